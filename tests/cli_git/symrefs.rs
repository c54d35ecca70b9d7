//! Symref writes beside git: creating, re-pointing and deleting symrefs, and the
//! reflog edge cases around them, byte for byte.

use super::*;

/// One case of a symref write: ours (`reftablefs` args + stdin) and git's (args + stdin)
/// on two copies of [`rich_repo`] must both succeed and leave byte-identical stacks.
fn symref_case(
    tmp: &Path,
    base: &Path,
    ours_args: &[&str],
    git_args: &[&str],
    input: &str,
) -> (PathBuf, PathBuf) {
    let n = std::fs::read_dir(tmp).unwrap().count();
    let (a, b) = (tmp.join(format!("o{n}")), tmp.join(format!("g{n}")));
    copy_repo(base, &a);
    copy_repo(base, &b);
    let stdin = |args: &[&str]| args.contains(&"--stdin").then_some(input.as_bytes());
    let oa = run(BIN, &a, ours_args, stdin(ours_args));
    let ob = run("git", &b, git_args, stdin(git_args));
    let ctx = format!(
        "ours {ours_args:?} / git {git_args:?} with {input:?}\nour stderr: {}\ngit stderr: {}",
        String::from_utf8_lossy(&oa.stderr),
        String::from_utf8_lossy(&ob.stderr)
    );
    assert!(oa.status.success() && ob.status.success(), "{ctx}");
    let (sa, sb) = (stack_bytes(&a), stack_bytes(&b));
    assert_eq!(sa.0, sb.0, "tables.list differs: {ctx}");
    for (i, (x, y)) in sa.1.iter().zip(&sb.1).enumerate() {
        assert!(x == y, "table {i} differs: {ctx}");
    }
    (a, b)
}

#[test]
fn symref_creation_table_matches_git() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    std::fs::create_dir(&base).unwrap();
    rich_repo(&base);
    let cases = tmp.path().join("cases");
    std::fs::create_dir(&cases).unwrap();
    let t = cases.as_path();
    let stdin_nd = ["update-ref", "--no-deref", "--stdin"];
    let stdin = ["update-ref", "--stdin"];
    // Creation under refs/heads/: a reflog entry 0 -> the target's id (message "\n").
    symref_case(
        t,
        &base,
        &stdin,
        &stdin,
        "symref-update refs/heads/sym refs/heads/main\n",
    );
    // With a message, and through symref-create.
    let with_msg = ["update-ref", "-m", "  made  a\tsymref ", "--stdin"];
    symref_case(
        t,
        &base,
        &with_msg,
        &with_msg,
        "symref-create refs/heads/sym refs/heads/main\n",
    );
    // A dangling target: no entry (git's TODO), the ref is still written.
    symref_case(
        t,
        &base,
        &stdin,
        &stdin,
        "symref-create refs/heads/sym refs/heads/nowhere\n",
    );
    // A target created in the same transaction is not resolvable yet: no entry.
    symref_case(
        t,
        &base,
        &stdin,
        &stdin,
        "symref-create refs/heads/sym refs/heads/new\ncreate refs/heads/new HEAD\n",
    );
    // Not logged (refs/tags/), unless --create-reflog.
    symref_case(
        t,
        &base,
        &stdin,
        &stdin,
        "symref-update refs/tags/st refs/heads/main\n",
    );
    let force = ["update-ref", "--create-reflog", "--stdin"];
    symref_case(
        t,
        &base,
        &force,
        &force,
        "symref-update refs/tags/st refs/heads/main\n",
    );
    // A regular ref turned into a symref: old id = its id.
    symref_case(
        t,
        &base,
        &stdin,
        &stdin,
        "symref-update refs/heads/main-2 refs/heads/topic\n",
    );
    // An existing symref re-pointed (no-deref): old = what it resolved to.
    symref_case(
        t,
        &base,
        &stdin_nd,
        &stdin_nd,
        "symref-update refs/remotes/origin/HEAD refs/heads/main-2 ref refs/remotes/origin/main\n",
    );
    // Without no-deref, git writes the new symref on the referent (and a log-only entry
    // on the symref itself).
    symref_case(
        t,
        &base,
        &stdin,
        &stdin,
        "symref-update refs/remotes/origin/HEAD refs/heads/main-2\n",
    );
    // HEAD's referent made a symref: HEAD logs old -> 0.
    symref_case(
        t,
        &base,
        &stdin_nd,
        &stdin_nd,
        "symref-update refs/heads/topic refs/heads/main\n",
    );
    // HEAD re-pointed, as `git symbolic-ref HEAD` (ours through update-ref --no-deref).
    symref_case(
        t,
        &base,
        &stdin_nd,
        &["symbolic-ref", "HEAD", "refs/heads/main"],
        "symref-update HEAD refs/heads/main\n",
    );
    symref_case(
        t,
        &base,
        &["update-ref", "--no-deref", "-m", "switch", "--stdin"],
        &["symbolic-ref", "-m", "switch", "HEAD", "refs/heads/main"],
        "symref-update HEAD refs/heads/main\n",
    );
    symref_case(
        t,
        &base,
        &stdin_nd,
        &["symbolic-ref", "refs/heads/s2", "refs/heads/main-2"],
        "symref-update refs/heads/s2 refs/heads/main-2\n",
    );
    // Deleting a symref keeps its reflog and logs old -> 0 (no tombstones), in both
    // spellings.
    let (a, _) = symref_case(
        t,
        &base,
        &stdin_nd,
        &["symbolic-ref", "-d", "refs/remotes/origin/HEAD"],
        "symref-delete refs/remotes/origin/HEAD\n",
    );
    assert!(run(
        BIN,
        &a,
        &["reflog", "exists", "refs/remotes/origin/HEAD"],
        None
    )
    .status
    .success());
    symref_case(
        t,
        &base,
        &["update-ref", "--no-deref", "-d", "refs/remotes/origin/HEAD"],
        &["update-ref", "--no-deref", "-d", "refs/remotes/origin/HEAD"],
        "",
    );
    // Deleting through the symref deletes the referent (tombstones) and logs on the
    // symref and on HEAD.
    symref_case(
        t,
        &base,
        &["update-ref", "-d", "HEAD"],
        &["update-ref", "-d", "HEAD"],
        "",
    );
}

/// Cases the random symref test found, pinned: a deleted ref's reflog gets tombstones
/// only for its live entries; an expected symref target is checked on the symref and on
/// its referent; the log-only HEAD entry carries the old-id check (so git refuses a
/// correct `ref OLD` on HEAD's referent); a symref cycle is "error reading reference".
#[test]
fn symref_and_reflog_edge_cases_match_git() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    std::fs::create_dir(&base).unwrap();
    rich_repo(&base);
    let t = tmp.path();
    // main-2 gets three entries, the middle one deleted (a tombstone in the stack).
    git(
        &base,
        &["update-ref", "-m", "m1", "refs/heads/main-2", "HEAD"],
    );
    git(
        &base,
        &["update-ref", "-m", "m2", "refs/heads/main-2", "HEAD~1"],
    );
    git(&base, &["reflog", "delete", "refs/heads/main-2@{1}"]);
    symref_case(
        t,
        &base,
        &["update-ref", "-d", "refs/heads/main-2"],
        &["update-ref", "-d", "refs/heads/main-2"],
        "",
    );
    // Refusals: same exit code, stdout and first stderr line, nothing written.
    let refused = |setup: &[&[&str]], input: &str| {
        let n = std::fs::read_dir(t).unwrap().count();
        let (a, b) = (t.join(format!("ro{n}")), t.join(format!("rg{n}")));
        copy_repo(&base, &a);
        for args in setup {
            git(&a, args);
        }
        copy_repo(&a, &b);
        let args = ["update-ref", "--stdin"];
        let before = stack_bytes(&a);
        let oa = run(BIN, &a, &args, Some(input.as_bytes()));
        let ob = run("git", &b, &args, Some(input.as_bytes()));
        let first = |o: &Output| {
            let e = String::from_utf8_lossy(&o.stderr);
            e.lines().next().unwrap_or("").to_owned()
        };
        assert_eq!(
            (oa.status.code(), first(&oa)),
            (ob.status.code(), first(&ob)),
            "{input:?}"
        );
        assert_eq!(oa.status.code(), Some(128), "{input:?} must be refused");
        assert_eq!(stack_bytes(&a), before, "{input:?}");
    };
    // origin/HEAD -> origin/main -> main: the old target is checked on origin/HEAD.
    refused(
        &[&[
            "symbolic-ref",
            "refs/remotes/origin/main",
            "refs/heads/main",
        ]],
        "symref-update refs/remotes/origin/HEAD refs/heads/x ref refs/heads/main\n",
    );
    // HEAD -> topic -> main: the HEAD entry's old-target check is git's null id.
    refused(
        &[
            &["update-ref", "-d", "refs/heads/topic"],
            &["symbolic-ref", "refs/heads/topic", "refs/heads/main"],
        ],
        "option no-deref\nsymref-update refs/heads/topic refs/heads/main-2 ref refs/heads/main\n",
    );
    // Through a chain, the HEAD copy is checked before the final referent.
    refused(
        &[
            &["update-ref", "-d", "refs/heads/topic"],
            &["symbolic-ref", "refs/heads/topic", "refs/heads/main"],
            &["symbolic-ref", "refs/tags/st", "refs/heads/topic"],
        ],
        &format!(
            "create refs/tags/st {}\n",
            git(&base, &["rev-parse", "HEAD"]).trim()
        ),
    );
    // A cycle.
    refused(
        &[
            &["symbolic-ref", "refs/heads/c1", "refs/heads/c2"],
            &["symbolic-ref", "refs/heads/c2", "refs/heads/c1"],
        ],
        &format!("option no-deref\nverify refs/heads/c1 {}\n", "0".repeat(40)),
    );
}
