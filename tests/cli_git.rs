//! The `reftablefs` binary side by side with git 2.47 on the same repositories: the
//! outputs, exit codes and (where git writes the same thing) table bytes must be equal.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_reftablefs");

/// A fixed, isolated environment so that git and we compute the same identities.
fn env(cmd: &mut Command) -> &mut Command {
    cmd.env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_COMMITTER_NAME", "C O Mitter")
        .env("GIT_COMMITTER_EMAIL", "committer@example.com")
        .env("GIT_COMMITTER_DATE", "1112911993 -0700")
        .env("GIT_AUTHOR_NAME", "A U Thor")
        .env("GIT_AUTHOR_EMAIL", "author@example.com")
        .env("GIT_AUTHOR_DATE", "1112911993 -0700")
        .env("GIT_TEST_REFTABLE_AUTOCOMPACTION", "false")
}

fn run(program: &str, dir: &Path, args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut cmd = Command::new(program);
    env(&mut cmd).current_dir(dir).args(args);
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("{program} {args:?}: {e}"));
    if let Some(input) = stdin {
        use std::io::Write;
        let mut w = child.stdin.take().unwrap();
        w.write_all(input).unwrap();
    }
    child.wait_with_output().unwrap()
}

fn git(dir: &Path, args: &[&str]) -> String {
    let o = run("git", dir, args, None);
    assert!(
        o.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn ours(dir: &Path, args: &[&str]) -> Output {
    run(BIN, dir, args, None)
}

/// stdout + exit code of both tools must be equal.
fn same(dir: &Path, ours_args: &[&str], git_args: &[&str]) {
    let a = ours(dir, ours_args);
    let b = run("git", dir, git_args, None);
    assert_eq!(
        (String::from_utf8_lossy(&a.stdout), a.status.code()),
        (String::from_utf8_lossy(&b.stdout), b.status.code()),
        "reftablefs {ours_args:?} vs git {git_args:?}\nour stderr: {}\ngit stderr: {}",
        String::from_utf8_lossy(&a.stderr),
        String::from_utf8_lossy(&b.stderr)
    );
}

/// The stack is intact: `reftablefs verify` passes (it walks every block; `git refs
/// verify` passes corrupt tables) and git reads the same refs as we do.
fn verify_integrity(dir: &Path) {
    let v = ours(dir, &["verify"]);
    assert!(
        v.status.success(),
        "reftablefs verify: {}",
        String::from_utf8_lossy(&v.stderr)
    );
    same(dir, &["for-each-ref"], &["for-each-ref"]);
}

fn tables(dir: &Path) -> Vec<PathBuf> {
    let list = std::fs::read_to_string(dir.join(".git/reftable/tables.list")).unwrap();
    list.lines()
        .map(|l| dir.join(".git/reftable").join(l))
        .collect()
}

/// A reftable repository with branches, tags (light and annotated), symrefs (one
/// dangling), remotes, a root ref and nested names.
fn rich_repo(dir: &Path) {
    git(dir, &["init", "-q", "--ref-format=reftable", "-b", "main"]);
    git(dir, &["commit", "-q", "--allow-empty", "-m", "one"]);
    git(dir, &["commit", "-q", "--allow-empty", "-m", "two"]);
    git(dir, &["tag", "light"]);
    git(dir, &["tag", "-a", "-m", "annotated", "v1", "HEAD~1"]);
    git(dir, &["branch", "feature/deep/x"]);
    git(dir, &["branch", "main-2"]);
    git(dir, &["update-ref", "refs/remotes/origin/main", "HEAD~1"]);
    git(
        dir,
        &[
            "symbolic-ref",
            "refs/remotes/origin/HEAD",
            "refs/remotes/origin/main",
        ],
    );
    git(
        dir,
        &["symbolic-ref", "refs/heads/dangling", "refs/heads/nowhere"],
    );
    git(dir, &["update-ref", "ORIG_HEAD", "HEAD~1"]);
    git(dir, &["update-ref", "refs/tags/main", "HEAD~1"]); // makes "main" ambiguous
    git(dir, &["checkout", "-q", "-b", "topic"]);
    git(dir, &["commit", "-q", "--allow-empty", "-m", "three"]);
}

#[test]
fn listing_commands_match_git() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    rich_repo(d);
    for args in [
        vec!["show-ref"],
        vec!["show-ref", "--head"],
        vec!["show-ref", "-d"],
        vec!["show-ref", "main"],
        vec!["show-ref", "--tags", "-d"],
        vec!["show-ref", "--heads", "--hash"],
        vec!["show-ref", "nosuch"],
        vec!["show-ref", "--verify", "refs/heads/main"],
        vec!["for-each-ref"],
        vec!["for-each-ref", "refs/heads"],
        vec!["for-each-ref", "refs/tags/", "refs/remotes"],
        vec![
            "for-each-ref",
            "--format=%(refname) %(objectname) %(symref) %(*objectname) %(*objecttype)",
        ],
        vec![
            "for-each-ref",
            "--format=%(HEAD)%(refname)%09%(objectname:short)",
            "refs/heads/m*",
        ],
        vec!["for-each-ref", "--count=3", "--format=%(refname)"],
        vec!["for-each-ref", "refs/nosuch"],
        vec![
            "for-each-ref",
            "--include-root-refs",
            "--format=%(refname) %(objectname)",
        ],
        vec!["show-ref", "--exists", "refs/heads/main"],
        vec!["show-ref", "--exists", "refs/heads/dangling"],
        vec!["show-ref", "--exists", "refs/heads/nope"],
        vec!["reflog", "exists", "refs/heads/main"],
        vec!["reflog", "exists", "main"],
        vec!["reflog", "exists", "refs/tags/v1"],
    ] {
        same(d, &args, &args);
    }
}

#[test]
fn resolve_matches_rev_parse() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    rich_repo(d);
    let names = [
        "HEAD",
        "@",
        "main",
        "topic",
        "light",
        "v1",
        "origin",
        "origin/main",
        "refs/heads/main-2",
        "heads/feature/deep/x",
        "ORIG_HEAD",
        "feature/deep/x",
    ];
    same(
        d,
        &[&["resolve"][..], &names].concat(),
        &[&["rev-parse"][..], &names].concat(),
    );
    // --stdin gives the same answers.
    let input = names.join("\n") + "\n";
    let a = run(BIN, d, &["resolve", "--stdin"], Some(input.as_bytes()));
    assert_eq!(
        String::from_utf8_lossy(&a.stdout),
        git(d, &[&["rev-parse"][..], &names].concat())
    );
    // git's warnings for an ambiguous name, and the fatal error for an unknown one.
    let a = ours(d, &["resolve", "main"]);
    assert!(String::from_utf8_lossy(&a.stderr).contains("warning: refname 'main' is ambiguous."));
    let a = ours(d, &["resolve", "nosuch"]);
    assert_eq!(a.status.code(), Some(128));
    assert!(String::from_utf8_lossy(&a.stderr).contains("fatal: ambiguous argument 'nosuch'"));
    same(
        d,
        &["resolve", "--symbolic-full-name", "main", "origin", "HEAD"],
        &[
            "rev-parse",
            "--symbolic-full-name",
            "main",
            "origin",
            "HEAD",
        ],
    );
}

#[test]
fn reflog_matches_git() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    rich_repo(d);
    for name in [
        None,
        Some("main"),
        Some("topic"),
        Some("refs/heads/main-2"),
        Some("feature/deep/x"),
        Some("@"),
    ] {
        let mut a = vec!["reflog"];
        let mut g = vec!["reflog", "show"];
        if let Some(n) = name {
            a.push(n);
            g.push(n);
        }
        same(d, &a, &g);
        a.insert(1, "--no-abbrev");
        g.insert(2, "--no-abbrev");
        same(d, &a, &g);
    }
}

#[test]
fn update_ref_stdin_writes_gits_table_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    std::fs::create_dir(&a).unwrap();
    rich_repo(&a);
    assert!(Command::new("cp")
        .args(["-a"])
        .arg(&a)
        .arg(&b)
        .status()
        .unwrap()
        .success());
    let main = git(&a, &["rev-parse", "refs/heads/main"]);
    let main = main.trim();
    let topic = git(&a, &["rev-parse", "topic"]);
    let topic = topic.trim();
    let zero = "0".repeat(40);
    let rounds = [
        (
            None,
            format!(
                "create refs/heads/new {main}\nupdate refs/heads/main-2 topic {main}\ndelete refs/heads/feature/deep/x\n\
                 verify refs/heads/main {main}\nupdate refs/tags/zz {main} {zero}\n"
            ),
        ),
        (
            Some("batch msg"),
            format!(
                "update refs/heads/main-2 {main} {topic}\ncreate refs/heads/n2 {main}\ndelete refs/tags/zz\n"
            ),
        ),
    ];
    for (msg, input) in rounds {
        let mut args = vec!["update-ref", "--stdin"];
        if let Some(m) = msg {
            args.extend(["-m", m]);
        }
        let o = run(BIN, &a, &args, Some(input.as_bytes()));
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let o = run("git", &b, &args, Some(input.as_bytes()));
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let (ta, tb) = (tables(&a), tables(&b));
    assert_eq!(ta.len(), tb.len());
    for (x, y) in ta.iter().zip(&tb) {
        assert_eq!(
            std::fs::read(x).unwrap(),
            std::fs::read(y).unwrap(),
            "{} vs {}",
            x.display(),
            y.display()
        );
    }
    assert_eq!(git(&a, &["for-each-ref"]), git(&b, &["for-each-ref"]));
    assert_eq!(
        git(&a, &["reflog", "show", "--no-abbrev", "main-2"]),
        git(&b, &["reflog", "show", "--no-abbrev", "main-2"])
    );
    verify_integrity(&a); // (fsck objects to rich_repo's dangling symref, in both)
}

#[test]
fn update_ref_errors_and_transactions_match_git() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    rich_repo(d);
    let main = git(d, &["rev-parse", "refs/heads/main"]);
    let main = main.trim();
    let cases = [
        format!("update refs/heads/x {main}\nupdate refs/heads/x {main}\n"),
        format!("verify refs/heads/main {}\n", "1".repeat(40)),
        format!("create refs/heads/main {main}\n"),
        format!("create refs/heads/main/sub {main}\n"),
        "frobnicate\n".to_string(),
        format!("update refs/heads/a..b {main}\n"),
        format!("start\ncreate refs/heads/t1 {main}\nprepare\ncommit\nstart\ncreate refs/heads/t2 {main}\nabort\n"),
        format!("start\ncreate refs/heads/t3 {main}\n"),
        // Malformed commands: git's `die`, exit 128 before anything is written.
        "update refs/heads/x\n".to_string(),
        format!("update refs/heads/x {main} {main} extra\n"),
        format!("create refs/heads/x {}\n", "0".repeat(40)),
        "delete refs/heads/x nonsense\n".to_string(),
        "option bogus\n".to_string(),
        "symref-delete refs/heads/x\n".to_string(),
        "symref-update refs/heads/x refs/heads/main bogus refs/heads/y\n".to_string(),
        format!("start\ncreate refs/heads/x {main}\nstart\n"),
        format!("update \"refs/heads/x {main}\n"),
    ];
    for input in &cases {
        let before = git(d, &["for-each-ref"]);
        let a = run(BIN, d, &["update-ref", "--stdin"], Some(input.as_bytes()));
        let after_ours = git(d, &["for-each-ref"]);
        // Undo our effect (only the t1 case writes), then let git try.
        if before != after_ours {
            git(d, &["update-ref", "-d", "refs/heads/t1"]);
        }
        let b = run("git", d, &["update-ref", "--stdin"], Some(input.as_bytes()));
        let after_git = git(d, &["for-each-ref"]);
        if before != after_git {
            git(d, &["update-ref", "-d", "refs/heads/t1"]);
        }
        assert_eq!(after_ours, after_git, "{input:?}");
        assert_eq!(
            (String::from_utf8_lossy(&a.stdout), a.status.code()),
            (String::from_utf8_lossy(&b.stdout), b.status.code()),
            "{input:?}"
        );
        let (ea, eb) = (
            String::from_utf8_lossy(&a.stderr),
            String::from_utf8_lossy(&b.stderr),
        );
        let first = |s: &str| s.lines().next().unwrap_or("").to_owned();
        if a.status.code() == Some(128) && !input.starts_with("start\ncreate refs/heads/t3") {
            assert_eq!(first(&ea), first(&eb), "{input:?}");
        }
    }
}

#[test]
fn update_ref_single_form_and_nul_mode() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    rich_repo(d);
    let main = git(d, &["rev-parse", "refs/heads/main"]);
    let main = main.trim();
    let o = ours(
        d,
        &["update-ref", "-m", "by hand", "refs/heads/single", main],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(git(d, &["rev-parse", "refs/heads/single"]).trim(), main);
    assert!(git(d, &["reflog", "show", "single"]).contains("single@{0}: by hand"));
    let o = ours(
        d,
        &["update-ref", "-d", "refs/heads/single", &"1".repeat(40)],
    );
    assert_eq!(o.status.code(), Some(128));
    // An argument that names no object: git's `die` (exit 128, same message), and no
    // usage text; a wrong number of arguments is a usage error (129).
    for args in [
        &["update-ref", "refs/heads/single", "nonsense"][..],
        &["update-ref", "refs/heads/single", main, "nonsense"][..],
        &["update-ref", "-d", "refs/heads/single", "nonsense"][..],
        &["update-ref", "refs/heads/single"][..],
    ] {
        let (a, b) = (ours(d, args), run("git", d, args, None));
        assert_eq!(a.status.code(), b.status.code(), "{args:?}");
        let first = |o: &Output| {
            let e = String::from_utf8_lossy(&o.stderr).into_owned();
            e.lines().next().unwrap_or("").to_owned()
        };
        if b.status.code() == Some(128) {
            assert_eq!(first(&a), first(&b), "{args:?}");
        }
    }
    assert!(ours(d, &["update-ref", "-d", "refs/heads/single", main])
        .status
        .success());
    assert!(run(
        "git",
        d,
        &["rev-parse", "--verify", "-q", "refs/heads/single"],
        None
    )
    .stdout
    .is_empty());
    let input = format!("create refs/heads/z1\0{main}\0update refs/heads/z2\0{main}\0\0");
    let o = run(
        BIN,
        d,
        &["update-ref", "--stdin", "-z"],
        Some(input.as_bytes()),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        git(d, &["for-each-ref", "--format=%(refname)", "refs/heads/z*"]),
        "refs/heads/z1\nrefs/heads/z2\n"
    );
}

#[test]
fn migrate_is_byte_identical_to_git_refs_migrate() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    std::fs::create_dir(&a).unwrap();
    git(&a, &["init", "-q", "--ref-format=files", "-b", "main"]);
    git(&a, &["config", "core.logAllRefUpdates", "false"]);
    for i in 0..5 {
        git(
            &a,
            &["commit", "-q", "--allow-empty", "-m", &format!("c{i}")],
        );
        git(&a, &["branch", &format!("b{i}")]);
    }
    git(&a, &["tag", "-a", "-m", "t", "v1", "HEAD~2"]);
    git(&a, &["pack-refs", "--all"]);
    git(&a, &["commit", "-q", "--allow-empty", "-m", "loose"]);
    git(&a, &["tag", "-a", "-m", "t", "v2"]); // loose annotated tag: must be peeled
    git(&a, &["update-ref", "ORIG_HEAD", "HEAD~1"]);
    git(&a, &["symbolic-ref", "refs/heads/sym", "refs/heads/b1"]);
    let _ = std::fs::remove_dir_all(a.join(".git/logs"));
    let b = tmp.path().join("b");
    assert!(Command::new("cp")
        .args(["-a"])
        .arg(&a)
        .arg(&b)
        .status()
        .unwrap()
        .success());

    let before = git(
        &a,
        &[
            "for-each-ref",
            "--format=%(refname) %(objectname) %(*objectname) %(symref)",
        ],
    );
    let o = ours(&a, &["migrate", "--ref-format=reftable"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    git(&b, &["refs", "migrate", "--ref-format=reftable"]);

    let (ta, tb) = (tables(&a), tables(&b));
    assert_eq!(ta.len(), 1);
    assert_eq!(
        std::fs::read(&ta[0]).unwrap(),
        std::fs::read(&tb[0]).unwrap()
    );
    assert_eq!(
        std::fs::read(a.join(".git/config")).unwrap(),
        std::fs::read(b.join(".git/config")).unwrap()
    );
    for stub in ["HEAD", "refs/heads"] {
        assert_eq!(
            std::fs::read(a.join(".git").join(stub)).unwrap(),
            std::fs::read(b.join(".git").join(stub)).unwrap()
        );
    }
    assert!(!a.join(".git/packed-refs").exists() && !a.join(".git/ORIG_HEAD").exists());
    assert_eq!(
        git(&a, &["rev-parse", "--show-ref-format"]).trim(),
        "reftable"
    );
    assert_eq!(
        git(
            &a,
            &[
                "for-each-ref",
                "--format=%(refname) %(objectname) %(*objectname) %(symref)"
            ]
        ),
        before
    );
    git(&a, &["fsck", "--no-progress"]);
    verify_integrity(&a);
    assert!(ours(&a, &["verify"]).status.success());
    // Migrating again is refused as git refuses it.
    let o = ours(&a, &["migrate"]);
    assert_eq!(o.status.code(), Some(128));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("current and new ref storage format are equal")
    );
}

#[test]
fn migrate_carries_reflogs_and_dry_run_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    git(d, &["init", "-q", "--ref-format=files", "-b", "main"]);
    for i in 0..4 {
        git(
            d,
            &["commit", "-q", "--allow-empty", "-m", &format!("c{i}")],
        );
    }
    git(d, &["checkout", "-q", "-b", "side"]);
    git(d, &["commit", "-q", "--allow-empty", "-m", "side"]);
    git(d, &["checkout", "-q", "main"]);
    git(d, &["tag", "-a", "-m", "t", "v1"]);
    git(d, &["pack-refs", "--all"]);
    git(
        d,
        &["commit", "-q", "--allow-empty", "--amend", "-m", "amended"],
    );
    let fer = |d: &Path| git(d, &["for-each-ref"]);
    let logs = |d: &Path| {
        ["HEAD", "main", "side"]
            .iter()
            .map(|n| {
                git(
                    d,
                    &[
                        "reflog",
                        "show",
                        "--no-abbrev",
                        "--format=%H %gd %gs %gn %ge %gD",
                        n,
                    ],
                )
            })
            .collect::<String>()
    };
    let (refs_before, logs_before) = (fer(d), logs(d));

    let o = ours(d, &["migrate", "--dry-run"]);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.starts_with("Finished dry-run migration of refs, the result can be found at '"),
        "{out}"
    );
    assert_eq!(git(d, &["rev-parse", "--show-ref-format"]).trim(), "files");
    assert!(d.join(".git/packed-refs").exists());
    let result_dir = out.trim().rsplit('\'').nth(1).unwrap().to_owned();
    assert!(Path::new(&result_dir).join("reftable/tables.list").exists());
    std::fs::remove_dir_all(&result_dir).unwrap();

    let o = ours(d, &["migrate"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        git(d, &["rev-parse", "--show-ref-format"]).trim(),
        "reftable"
    );
    assert_eq!(fer(d), refs_before);
    assert_eq!(logs(d), logs_before);
    git(d, &["fsck", "--no-progress"]);
    verify_integrity(d);
    // git keeps working on the result: a commit appends to the migrated reflog.
    git(d, &["commit", "-q", "--allow-empty", "-m", "after"]);
    assert!(
        git(d, &["reflog", "show", "main"]).lines().count()
            > logs_before.lines().filter(|l| l.contains("main@")).count()
    );
}

#[test]
fn compact_and_verify() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    rich_repo(d);
    assert!(tables(d).len() > 3, "auto-compaction is off in these tests");
    let listing = git(d, &["for-each-ref"]);
    assert!(ours(d, &["compact", "--auto"]).status.success());
    let o = ours(d, &["compact"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(tables(d).len(), 1);
    assert_eq!(git(d, &["for-each-ref"]), listing);
    verify_integrity(d);
    let o = ours(d, &["verify"]);
    assert!(
        o.status.success() && o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    // A held lock: git's message, exit 1.
    std::fs::write(d.join(".git/reftable/tables.list.lock"), "").unwrap();
    let o = ours(d, &["compact"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr)
        .starts_with("error: unable to compact stack: data is locked"));
    std::fs::remove_file(d.join(".git/reftable/tables.list.lock")).unwrap();

    // Reftable has no block checksums: corrupt structure, not payload. The first
    // block's type byte (after the 24-byte header), then a footer byte (CRC).
    let t = tables(d)[0].clone();
    let good = std::fs::read(&t).unwrap();
    for at in [24, good.len() - 10] {
        let mut bytes = good.clone();
        bytes[at] ^= 0x55;
        std::fs::write(&t, &bytes).unwrap();
        let o = ours(d, &["verify"]);
        assert_eq!(o.status.code(), Some(1), "byte {at}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.starts_with("error: ") && err.contains("badReftable"),
            "byte {at}: {err}"
        );
    }
    std::fs::write(&t, &good).unwrap();
    assert!(ours(d, &["verify"]).status.success());
}

#[test]
fn verify_reports_names_like_git_refs_verify() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    rich_repo(d);
    let rt = d.join(".git/reftable");
    let first = tables(d)[0].clone();
    std::fs::rename(&first, rt.join("foo-bar-0001.ref")).unwrap();
    let list = std::fs::read_to_string(rt.join("tables.list")).unwrap();
    let name = first.file_name().unwrap().to_str().unwrap();
    std::fs::write(
        rt.join("tables.list"),
        list.replace(name, "foo-bar-0001.ref"),
    )
    .unwrap();
    let o = ours(d, &["verify"]);
    assert_eq!(o.status.code(), Some(0), "a warning only");
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "warning: foo-bar-0001.ref: badReftableTableName: invalid reftable table name\n"
    );
}

#[test]
fn global_options_find_the_repository_like_git() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let repo = d.join("r");
    std::fs::create_dir_all(repo.join("sub/dir")).unwrap();
    rich_repo(&repo);
    let want = git(&repo, &["show-ref"]);
    let o = ours(&repo.join("sub/dir"), &["show-ref"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), want);
    let o = ours(d, &["-C", "r", "show-ref"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), want);
    let o = ours(d, &["--git-dir=r/.git", "show-ref"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), want);
    let mut cmd = Command::new(BIN);
    env(&mut cmd)
        .current_dir(d)
        .env("GIT_DIR", repo.join(".git"))
        .arg("show-ref");
    assert_eq!(String::from_utf8_lossy(&cmd.output().unwrap().stdout), want);
    let o = ours(d, &["show-ref"]);
    assert_eq!(o.status.code(), Some(128));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a git repository"));
    let o = ours(d, &["frobnicate"]);
    assert_eq!(o.status.code(), Some(129));
}

/// Copies `a` (a git repository) to `b` with `cp -a`.
fn copy_repo(a: &Path, b: &Path) {
    assert!(Command::new("cp")
        .args(["-a"])
        .arg(a)
        .arg(b)
        .status()
        .unwrap()
        .success());
}

/// The stack's table names without their random suffix, and every table's bytes.
fn stack_bytes(dir: &Path) -> (Vec<String>, Vec<Vec<u8>>) {
    let list = std::fs::read_to_string(dir.join(".git/reftable/tables.list")).unwrap();
    let names = list
        .lines()
        .map(|l| l.get(..l.len().saturating_sub(13)).unwrap_or(l).to_owned())
        .collect();
    let bytes = tables(dir)
        .iter()
        .map(|t| std::fs::read(t).unwrap())
        .collect();
    (names, bytes)
}

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

#[test]
fn sha256_repositories_work_end_to_end() {
    let tmp = tempfile::tempdir().unwrap();
    let r = tmp.path().join("rt");
    std::fs::create_dir(&r).unwrap();
    git(
        &r,
        &[
            "init",
            "-q",
            "--ref-format=reftable",
            "--object-format=sha256",
            "-b",
            "main",
        ],
    );
    git(&r, &["commit", "-q", "--allow-empty", "-m", "x"]);
    git(&r, &["tag", "-a", "-m", "t", "v1"]);
    let head = git(&r, &["rev-parse", "HEAD"]);
    assert_eq!(head.trim().len(), 64);
    let input = format!("create refs/heads/n {}", head.trim());
    assert!(
        run(BIN, &r, &["update-ref", "--stdin"], Some(input.as_bytes()))
            .status
            .success()
    );
    for args in [vec!["show-ref", "-d"], vec!["for-each-ref"]] {
        same(&r, &args, &args);
    }
    same(
        &r,
        &["reflog", "--no-abbrev"],
        &["reflog", "show", "--no-abbrev"],
    );
    same(
        &r,
        &["resolve", "HEAD", "v1", "n"],
        &["rev-parse", "HEAD", "v1", "n"],
    );
    assert!(ours(&r, &["verify"]).status.success());

    let f = tmp.path().join("files");
    std::fs::create_dir(&f).unwrap();
    git(&f, &["init", "-q", "--object-format=sha256", "-b", "main"]);
    git(&f, &["commit", "-q", "--allow-empty", "-m", "x"]);
    git(&f, &["branch", "b"]);
    git(&f, &["tag", "-a", "-m", "t", "v1"]);
    let before = git(&f, &["for-each-ref"]);
    let logs = git(&f, &["reflog", "show", "--no-abbrev"]);
    let o = ours(&f, &["migrate"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(git(&f, &["for-each-ref"]), before);
    assert_eq!(git(&f, &["reflog", "show", "--no-abbrev"]), logs);
    assert!(git(&f, &["config", "extensions.objectformat"]).contains("sha256"));
    git(&f, &["fsck", "--no-progress"]);
    verify_integrity(&f);
}

#[test]
fn repository_config_reaches_the_tables_we_write() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    std::fs::create_dir(&a).unwrap();
    rich_repo(&a);
    // Config that changes table bytes and permissions.
    git(&a, &["config", "reftable.blockSize", "256"]);
    git(&a, &["config", "reftable.restartInterval", "3"]);
    git(&a, &["config", "reftable.indexObjects", "false"]);
    git(&a, &["config", "core.sharedRepository", "group"]);
    let b = tmp.path().join("b");
    assert!(Command::new("cp")
        .args(["-a"])
        .arg(&a)
        .arg(&b)
        .status()
        .unwrap()
        .success());
    let main = git(&a, &["rev-parse", "refs/heads/main"]);
    let input: String = (0..40)
        .map(|i| format!("create refs/heads/cfg/b{i:03} {}\n", main.trim()))
        .collect();
    // `-c` on the command line also reaches the stack: the same logAllRefUpdates for both.
    let args = [
        "-c",
        "core.logAllRefUpdates=always",
        "update-ref",
        "-m",
        "cfg",
        "--stdin",
    ];
    assert!(run(BIN, &a, &args, Some(input.as_bytes())).status.success());
    assert!(run("git", &b, &args, Some(input.as_bytes()))
        .status
        .success());
    let (ta, tb) = (tables(&a), tables(&b));
    let (la, lb) = (ta.last().unwrap(), tb.last().unwrap());
    assert_eq!(std::fs::read(la).unwrap(), std::fs::read(lb).unwrap());
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(la), mode(lb), "table mode");
    assert_eq!(
        mode(&a.join(".git/reftable/tables.list")),
        mode(&b.join(".git/reftable/tables.list"))
    );
    assert_eq!(
        mode(la) & 0o060,
        0o060,
        "group read/write from core.sharedRepository=group"
    );
}

#[test]
fn a_held_lock_fails_like_git() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    rich_repo(d);
    std::fs::write(d.join(".git/reftable/tables.list.lock"), "").unwrap();
    let main = git(d, &["rev-parse", "refs/heads/main"]);
    let input = format!("create refs/heads/locked {}\n", main.trim());
    let a = run(BIN, d, &["update-ref", "--stdin"], Some(input.as_bytes()));
    let b = run("git", d, &["update-ref", "--stdin"], Some(input.as_bytes()));
    assert_eq!((a.status.code(), b.status.code()), (Some(128), Some(128)));
    let first = |o: &Output| {
        String::from_utf8_lossy(&o.stderr)
            .lines()
            .next()
            .unwrap_or("")
            .to_owned()
    };
    assert_eq!(first(&a), "fatal: cannot lock references");
    assert_eq!(first(&a), first(&b));
    // With reftable.lockTimeout, a lock released meanwhile lets the write through.
    let lock = d.join(".git/reftable/tables.list.lock");
    let remover = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(300));
        std::fs::remove_file(lock).unwrap();
    });
    let a = run(
        BIN,
        d,
        &["-c", "reftable.lockTimeout=5000", "update-ref", "--stdin"],
        Some(input.as_bytes()),
    );
    remover.join().unwrap();
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    assert_eq!(git(d, &["rev-parse", "refs/heads/locked"]), main);
}

#[test]
fn linked_worktrees_see_their_own_per_worktree_refs() {
    let tmp = tempfile::tempdir().unwrap();
    let main = tmp.path().join("main");
    std::fs::create_dir(&main).unwrap();
    git(
        &main,
        &["init", "-q", "--ref-format=reftable", "-b", "main"],
    );
    git(&main, &["commit", "-q", "--allow-empty", "-m", "one"]);
    git(&main, &["worktree", "add", "-q", "-b", "wtb", "../wt"]);
    let wt = tmp.path().join("wt");
    git(&wt, &["commit", "-q", "--allow-empty", "-m", "in worktree"]);
    git(&wt, &["update-ref", "refs/bisect/bad", "HEAD"]);
    git(&wt, &["update-ref", "refs/worktree/x", "HEAD~1"]);
    git(&main, &["update-ref", "refs/bisect/main-only", "HEAD"]);
    for dir in [&wt, &main] {
        for args in [vec!["show-ref", "--head"], vec!["for-each-ref"]] {
            same(dir, &args, &args);
        }
        same(dir, &["reflog"], &["reflog", "show"]);
        same(
            dir,
            &["resolve", "HEAD", "wtb", "main"],
            &["rev-parse", "HEAD", "wtb", "main"],
        );
        assert!(ours(dir, &["verify"]).status.success());
    }
    // Writes: shared refs go to the main stack, per-worktree refs to the worktree's.
    let head = git(&wt, &["rev-parse", "HEAD"]);
    let head = head.trim();
    assert!(ours(&wt, &["update-ref", "refs/heads/from-wt", head])
        .status
        .success());
    assert_eq!(
        git(&main, &["rev-parse", "refs/heads/from-wt"]).trim(),
        head
    );
    assert!(ours(&wt, &["update-ref", "refs/bisect/good", head])
        .status
        .success());
    assert_eq!(git(&wt, &["rev-parse", "refs/bisect/good"]).trim(), head);
    assert!(run(
        "git",
        &main,
        &["rev-parse", "--verify", "-q", "refs/bisect/good"],
        None
    )
    .stdout
    .is_empty());
    // What we cannot do atomically is refused, not half done.
    let input = format!("update refs/heads/x {head}\nupdate refs/bisect/y {head}\n");
    let o = run(BIN, &wt, &["update-ref", "--stdin"], Some(input.as_bytes()));
    assert_eq!(o.status.code(), Some(128));
    assert!(run(
        "git",
        &wt,
        &["rev-parse", "--verify", "-q", "refs/heads/x"],
        None
    )
    .stdout
    .is_empty());
}

/// Random batches of `update-ref --stdin` run by both tools on copies of one repository
/// (auto-compaction on): every batch must succeed or fail alike, and the stacks must be
/// byte-identical afterwards (same tables, same compaction decisions).
#[test]
fn random_update_ref_batches_give_gits_stack_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    std::fs::create_dir(&a).unwrap();
    git(&a, &["init", "-q", "--ref-format=reftable", "-b", "main"]);
    let mut ids = Vec::new();
    for i in 0..4 {
        git(
            &a,
            &["commit", "-q", "--allow-empty", "-m", &format!("c{i}")],
        );
        ids.push(git(&a, &["rev-parse", "HEAD"]).trim().to_owned());
    }
    let b = tmp.path().join("b");
    assert!(Command::new("cp")
        .args(["-a"])
        .arg(&a)
        .arg(&b)
        .status()
        .unwrap()
        .success());
    let names: Vec<String> = (0..24)
        .map(|i| match i % 4 {
            0 => format!("refs/heads/r{i}"),
            1 => format!("refs/heads/dir{}/r{i}", i % 3),
            2 => format!("refs/tags/t{i}"),
            _ => format!("refs/remotes/o/r{i}"),
        })
        .collect();
    let mut seed: u64 = 0x2545_F491_4F6C_DD1D;
    let mut rnd = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let zero = "0".repeat(40);
    let (mut ok, mut failed) = (0, 0);
    // A model of the current values, to make most expectations right.
    let mut model: std::collections::BTreeMap<String, String> = Default::default();
    for round in 0..40 {
        let mut input = String::new();
        let mut used = std::collections::BTreeSet::new();
        let mut next = model.clone();
        for _ in 0..1 + rnd(6) {
            let name = &names[rnd(names.len())];
            if !used.insert(name.clone()) {
                continue;
            }
            let id = ids[rnd(ids.len())].clone();
            let cur = model.get(name).cloned();
            // Right expectation 6 times in 7, else a random (mostly wrong) one.
            let old = if rnd(7) > 0 {
                cur.clone().unwrap_or_else(|| zero.clone())
            } else {
                ids[rnd(ids.len())].clone()
            };
            let line = match rnd(6) {
                0 if cur.is_none() => format!("create {name} {id}\n"),
                0 | 1 => format!("update {name} {id}\n"),
                2 => format!("update {name} {id} {old}\n"),
                3 if cur.is_some() => format!("delete {name} {old}\n"),
                3 => format!("delete {name}\n"),
                4 => format!("verify {name} {old}\n"),
                _ => format!("update {name} {id}\n"),
            };
            if line.starts_with("delete") {
                next.remove(name);
            } else if !line.starts_with("verify") {
                next.insert(name.clone(), id);
            }
            input += &line;
        }
        let args = ["update-ref", "-m", &format!("round {round}"), "--stdin"];
        let (oa, ob) = run_both(&a, &b, &args, &input);
        assert_eq!(
            oa.status.code(),
            ob.status.code(),
            "round {round}: {input}\nours: {}\ngit: {}",
            String::from_utf8_lossy(&oa.stderr),
            String::from_utf8_lossy(&ob.stderr)
        );
        if oa.status.success() {
            ok += 1;
            model = next;
        } else {
            failed += 1;
        }
        let (ta, tb) = (tables(&a), tables(&b));
        assert_eq!(ta.len(), tb.len(), "round {round}: table count");
        for (x, y) in ta.iter().zip(&tb) {
            assert_eq!(
                std::fs::read(x).unwrap(),
                std::fs::read(y).unwrap(),
                "round {round}: {input}"
            );
        }
    }
    assert!(
        ok > 15 && failed > 3,
        "both outcomes exercised: {ok} ok, {failed} failed"
    );
    assert_eq!(git(&a, &["for-each-ref"]), git(&b, &["for-each-ref"]));
    verify_integrity(&a);
    git(&a, &["fsck", "--no-progress"]);
}

/// Arbitrary input never makes the binary panic: mutated and random `update-ref --stdin`
/// input (text and `-z`), and random argument lists for every subcommand. Exit codes
/// stay within git's (0, 1, 2, 128, 129); a panic would exit with 101.
#[test]
fn no_input_makes_the_binary_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    rich_repo(d);
    let main = git(d, &["rev-parse", "refs/heads/main"]);
    let valid = format!(
        "start\ncreate refs/heads/f1 {m}\nupdate refs/heads/f2 {m} {z}\ndelete refs/heads/main-2\n\
         symref-update refs/heads/s refs/heads/main ref refs/heads/x\noption no-deref\nverify HEAD\nprepare\ncommit\n",
        m = main.trim(),
        z = "0".repeat(40)
    );
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut rnd = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n.max(1) as u64) as usize
    };
    let check = |o: &Output, what: &str| {
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("panicked"), "{what}: {err}");
        assert!(
            matches!(o.status.code(), Some(0 | 1 | 2 | 128 | 129)),
            "{what}: {:?} {err}",
            o.status
        );
    };
    for i in 0..60 {
        let mut input = valid.clone().into_bytes();
        for _ in 0..1 + rnd(4) {
            let at = rnd(input.len());
            match rnd(4) {
                0 => input[at] = rnd(256) as u8,
                1 => input.truncate(at),
                2 => input.insert(at, [b'\0', b'\n', b' ', b'"', b'\\'][rnd(5)]),
                _ => {
                    let cut = rnd(input.len().saturating_sub(at)) + at;
                    input.drain(at..cut);
                }
            }
        }
        let z = i % 2 == 1;
        let args: &[&str] = if z {
            &["update-ref", "--stdin", "-z"]
        } else {
            &["update-ref", "--stdin"]
        };
        let o = run(BIN, d, args, Some(&input));
        check(&o, &format!("{:?}", String::from_utf8_lossy(&input)));
    }
    let words = [
        "show-ref",
        "for-each-ref",
        "resolve",
        "update-ref",
        "reflog",
        "compact",
        "verify",
        "--head",
        "-d",
        "--format=%(",
        "--format=%(refname)%",
        "--count=x",
        "--count=2",
        "--verify",
        "--exists",
        "--stdin",
        "HEAD",
        "@",
        "main",
        "refs/heads/main",
        "refs/heads/a..b",
        "",
        "-",
        "--",
        "-z",
        "-m",
        "show",
        "exists",
        "--abbrev=0",
        "--abbrev=x",
        "--no-abbrev",
        "--auto",
        "-C",
        ".",
        "--git-dir",
        "-c",
        "x=y",
        "core.bare",
        "refs/",
        "refs/*",
        "*",
        "\u{1F600}",
        "--symbolic-full-name",
        "--include-root-refs",
        "migrate",
        "status",
        "--json",
        "help",
        "-h",
        "--help",
        "completions",
        "bash",
        "man",
        "dump",
        "--version",
    ];
    for _ in 0..150 {
        let n = 1 + rnd(4);
        let mut args: Vec<&str> = (0..n).map(|_| words[rnd(words.len())]).collect();
        // Never read this process's stdin, never migrate (the repository is reftable
        // anyway, but keep the test's effects obvious).
        args.retain(|a| *a != "--stdin" && *a != "migrate");
        if args.is_empty() {
            continue;
        }
        let o = run(BIN, d, &args, Some(b""));
        check(&o, &format!("{args:?}"));
    }
    // The repository is still sound whatever was run against it.
    verify_integrity(d);
}

/// `update-ref --stdin` answers each command as it comes, and holds the stack's lock
/// from `prepare` to `commit` as git does: another writer is refused meanwhile.
#[test]
fn prepare_holds_the_lock_until_commit() {
    use std::io::{BufRead, BufReader, Write};
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    rich_repo(d);
    let main = git(d, &["rev-parse", "refs/heads/main"]);
    let main = main.trim();
    let mut cmd = Command::new(BIN);
    env(&mut cmd).current_dir(d).args(["update-ref", "--stdin"]);
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    writeln!(stdin, "start").unwrap();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "start: ok\n");
    writeln!(stdin, "create refs/heads/prepared {main}\nprepare").unwrap();
    line.clear();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "prepare: ok\n");
    // Meanwhile git cannot write.
    let other = format!("create refs/heads/other {main}\n");
    let o = run("git", d, &["update-ref", "--stdin"], Some(other.as_bytes()));
    assert_eq!(o.status.code(), Some(128));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot lock references"));
    writeln!(stdin, "commit").unwrap();
    drop(stdin);
    line.clear();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "commit: ok\n");
    assert!(child.wait().unwrap().success());
    assert_eq!(git(d, &["rev-parse", "refs/heads/prepared"]).trim(), main);
    // The lock is gone: git writes again.
    assert!(
        run("git", d, &["update-ref", "--stdin"], Some(other.as_bytes()))
            .status
            .success()
    );
}

/// A stack that git's transactions would never write (written here table by table with
/// the library's writer): `verify` names every problem as `git refs verify` would.
#[test]
fn verify_finds_bad_names_referents_and_df_conflicts() {
    use reftablefs::table::{TableWriter, WriteOptions};
    use reftablefs::{ObjectId, RefRecord, RefValue};
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    rich_repo(d);
    let id = ObjectId::from_hex(
        git(d, &["rev-parse", "refs/heads/main"]).trim().as_bytes(),
        reftablefs::HashKind::Sha1,
    )
    .unwrap();
    let rt = d.join(".git/reftable");
    let list = std::fs::read_to_string(rt.join("tables.list")).unwrap();
    let last = list.lines().last().unwrap();
    let max: u64 =
        u64::from_str_radix(last.split('-').nth(1).unwrap().trim_start_matches("0x"), 16).unwrap();
    let ui = max + 1;
    let mut refs = vec![
        RefRecord {
            name: b"refs/heads/bad..name".to_vec(),
            update_index: ui,
            value: RefValue::Val1(id),
        },
        RefRecord {
            name: b"refs/heads/main/sub".to_vec(),
            update_index: ui,
            value: RefValue::Val1(id),
        },
        RefRecord {
            name: b"refs/heads/garbage-sym".to_vec(),
            update_index: ui,
            value: RefValue::Symref(b"garbage".to_vec()),
        },
    ];
    refs.sort_by(|a, b| a.name.cmp(&b.name));
    let mut w = TableWriter::new(WriteOptions::default());
    w.begin(ui, ui).unwrap();
    for r in &refs {
        w.add_ref(r).unwrap();
    }
    let bytes = w.finish().unwrap().to_vec();
    let name = format!("0x{ui:012x}-0x{ui:012x}-12345678.ref");
    std::fs::write(rt.join(&name), bytes).unwrap();
    std::fs::write(rt.join("tables.list"), format!("{list}{name}\n")).unwrap();

    let o = ours(d, &["verify"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    for want in [
        "error: refs/heads/bad..name: badRefName: invalid refname format",
        "error: refs/heads/garbage-sym: badReferentName: points to invalid refname 'garbage'",
        "error: refs/heads/main/sub: badRefDFConflict: 'refs/heads/main' exists; cannot have 'refs/heads/main/sub'",
    ] {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
    assert_eq!(err.lines().count(), 3, "{err}");
}

/// `prepare` checks what git's `ref_transaction_prepare` checks (expected old values,
/// missing refs, D/F conflicts, duplicates, symref targets) and fails there with git's
/// message, stdout and exit code; nothing is written.
#[test]
fn prepare_checks_expectations_like_git() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    rich_repo(d);
    let main = git(d, &["rev-parse", "refs/heads/main"]);
    let main = main.trim();
    let wrong = "1".repeat(40);
    let cases = [
        format!("update refs/heads/main {main} {wrong}\n"),
        format!("verify refs/heads/main {wrong}\n"),
        format!("create refs/heads/main {main}\n"),
        format!("update refs/heads/nosuch {main} {main}\n"),
        format!("create refs/heads/main/sub {main}\n"),
        format!("create refs/heads/feature {main}\n"),
        format!("create refs/heads/n1 {main}\ncreate refs/heads/n1/n2 {main}\n"),
        format!("update refs/heads/x {main}\nupdate refs/heads/x {main}\n"),
        "symref-update refs/remotes/origin/HEAD refs/heads/main ref refs/heads/main\n".into(),
        "symref-verify refs/remotes/origin/HEAD refs/heads/main\n".into(),
        format!("delete refs/heads/main {wrong}\n"),
        // A dangling symref (no-deref) resolves to the null id.
        format!("verify refs/heads/dangling {wrong}\n"),
        format!(
            "verify refs/heads/dangling {}\nverify refs/heads/main {main}\n",
            "0".repeat(40)
        ),
        // Succeeds: prepare: ok, commit: ok.
        format!("create refs/heads/fine {main}\nverify refs/heads/main {main}\n"),
    ];
    for case in &cases {
        let input = format!("start\n{case}prepare\ncommit\n");
        let args = ["update-ref", "--no-deref", "--stdin"];
        let before = git(d, &["for-each-ref"]);
        let n_tables = tables(d).len();
        let a = run(BIN, d, &args, Some(input.as_bytes()));
        let after_ours = git(d, &["for-each-ref"]);
        if before != after_ours {
            git(d, &["update-ref", "-d", "refs/heads/fine"]);
        }
        let b = run("git", d, &args, Some(input.as_bytes()));
        let after_git = git(d, &["for-each-ref"]);
        if before != after_git {
            git(d, &["update-ref", "-d", "refs/heads/fine"]);
        }
        assert_eq!(after_ours, after_git, "{input:?}");
        let (ea, eb) = (
            String::from_utf8_lossy(&a.stderr),
            String::from_utf8_lossy(&b.stderr),
        );
        assert_eq!(
            (String::from_utf8_lossy(&a.stdout), a.status.code()),
            (String::from_utf8_lossy(&b.stdout), b.status.code()),
            "{input:?}\nour stderr: {ea}\ngit stderr: {eb}"
        );
        let first = |s: &str| s.lines().next().unwrap_or("").to_owned();
        assert_eq!(first(&ea), first(&eb), "{input:?}");
        if !a.status.success() {
            assert!(first(&ea).starts_with("fatal: prepare: "), "{ea}");
            assert_eq!(
                tables(d).len(),
                n_tables,
                "{input:?}: a failed prepare wrote"
            );
        }
    }
}

/// The current refs of `dir` as the random tests model them: `name -> id` for regular
/// refs, `name -> "-> target"` for symrefs, and `HEAD -> id` when HEAD resolves.
fn ref_model(dir: &Path) -> std::collections::BTreeMap<String, String> {
    let mut m = std::collections::BTreeMap::new();
    let out = git(
        dir,
        &[
            "for-each-ref",
            "--format=%(refname) %(objectname) %(symref)",
        ],
    );
    for l in out.lines() {
        let mut f = l.split(' ');
        let (name, id, sym) = (f.next(), f.next(), f.next());
        if let (Some(name), Some(id)) = (name, id) {
            match sym {
                Some(t) if !t.is_empty() => m.insert(name.to_owned(), format!("-> {t}")),
                _ => m.insert(name.to_owned(), id.to_owned()),
            };
        }
    }
    let head = run("git", dir, &["rev-parse", "-q", "--verify", "HEAD"], None);
    if head.status.success() {
        let id = String::from_utf8_lossy(&head.stdout).trim().to_owned();
        m.insert("HEAD".to_owned(), id);
    }
    let head = run("git", dir, &["symbolic-ref", "-q", "HEAD"], None);
    let target = String::from_utf8_lossy(&head.stdout).trim().to_owned();
    m.insert("HEAD (symref)".to_owned(), format!("-> {target}"));
    m
}

/// As [`random_update_ref_batches_give_gits_stack_byte_for_byte`], with symrefs
/// (created, re-pointed with and without `no-deref`, deleted, updated through, dangling,
/// chained), updates of HEAD and of its referent, and deletions of refs that have
/// reflogs: every batch must succeed or fail alike and leave byte-identical stacks.
#[test]
fn random_batches_with_symrefs_and_head_match_git_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_owned();
    // RTFS_KEEP leaves the two repositories behind for debugging.
    let _tmp = if std::env::var_os("RTFS_KEEP").is_some() {
        eprintln!("keeping {}", root.display());
        std::mem::forget(tmp);
        None
    } else {
        Some(tmp)
    };
    let a = root.join("a");
    std::fs::create_dir(&a).unwrap();
    git(&a, &["init", "-q", "--ref-format=reftable", "-b", "main"]);
    let mut ids = Vec::new();
    for i in 0..3 {
        git(
            &a,
            &["commit", "-q", "--allow-empty", "-m", &format!("c{i}")],
        );
        ids.push(git(&a, &["rev-parse", "HEAD"]).trim().to_owned());
    }
    git(&a, &["branch", "b1"]);
    git(&a, &["tag", "t1"]);
    let b = root.join("b");
    copy_repo(&a, &b);
    let names = [
        "refs/heads/main",
        "refs/heads/b1",
        "refs/heads/b2",
        "refs/heads/d/b3",
        "refs/tags/t1",
        "refs/tags/t2",
        "refs/remotes/o/main",
    ];
    let symrefs = [
        "refs/heads/s0",
        "refs/heads/s1",
        "refs/remotes/o/HEAD",
        "refs/tags/st",
    ];
    // RTFS_SEED / RTFS_ROUNDS explore further (the defaults are what CI runs).
    let mut seed: u64 = std::env::var("RTFS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let rounds: usize = std::env::var("RTFS_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let mut rnd = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let zero = "0".repeat(40);
    let (mut ok, mut failed) = (0, 0);
    for round in 0..rounds {
        let model = ref_model(&a);
        let mut input = String::new();
        let mut used = std::collections::BTreeSet::new();
        for _ in 0..1 + rnd(4) {
            let id = ids[rnd(ids.len())].clone();
            let kind = rnd(12);
            let name = match kind {
                // Plain commands on symrefs too (through them, or on them with no-deref).
                0..=4 if rnd(4) == 0 => symrefs[rnd(symrefs.len())],
                0..=4 => names[rnd(names.len())],
                5..=8 => symrefs[rnd(symrefs.len())],
                _ => "HEAD",
            };
            if !used.insert(name) {
                continue;
            }
            let cur = model.get(name).cloned();
            let cur_id = cur
                .clone()
                .filter(|c| !c.starts_with("->"))
                .unwrap_or_else(|| zero.clone());
            let target = if rnd(4) == 0 {
                symrefs[rnd(symrefs.len())]
            } else {
                names[rnd(names.len())]
            };
            let no_deref = if rnd(2) == 0 { "option no-deref\n" } else { "" };
            let line = match kind {
                0 | 1 => format!("update {name} {id}\n"),
                2 => format!("update {name} {id} {cur_id}\n"),
                3 => format!("{no_deref}delete {name}\n"),
                4 => format!("delete {name} {cur_id}\n"),
                5 => format!("{no_deref}symref-update {name} {target}\n"),
                6 => match cur.as_deref().and_then(|c| c.strip_prefix("-> ")) {
                    Some(old) if rnd(3) > 0 => {
                        format!("{no_deref}symref-update {name} {target} ref {old}\n")
                    }
                    _ => format!("symref-create {name} {target}\n"),
                },
                7 => format!("option no-deref\nsymref-delete {name}\n"),
                8 => format!("{no_deref}update {name} {id}\n"),
                9 => format!("update HEAD {id} {cur_id}\n"),
                10 => format!("update HEAD {id}\n"),
                _ => format!(
                    "option no-deref\nsymref-update HEAD {}\n",
                    ["refs/heads/main", "refs/heads/b1", "refs/heads/b2"][rnd(3)]
                ),
            };
            input += &line;
        }
        let msg = format!("round {round}");
        let mut args: Vec<&str> = if rnd(3) == 0 {
            vec!["update-ref", "--stdin"]
        } else {
            vec!["update-ref", "-m", &msg, "--stdin"]
        };
        if rnd(6) == 0 {
            args.insert(1, "--create-reflog");
        }
        if rnd(8) == 0 {
            args.insert(1, "--no-deref");
        }
        let (oa, ob) = run_both(&a, &b, &args, &input);
        let (ea, eb) = (
            String::from_utf8_lossy(&oa.stderr),
            String::from_utf8_lossy(&ob.stderr),
        );
        assert_eq!(
            oa.status.code(),
            ob.status.code(),
            "round {round}: {input}\nours: {ea}\ngit: {eb}"
        );
        let first = |s: &str| s.lines().next().unwrap_or("").to_owned();
        assert_eq!(
            first(&ea),
            first(&eb),
            "round {round}: {input}\nrefs before: {model:#?}"
        );
        if oa.status.success() {
            ok += 1;
        } else {
            failed += 1;
        }
        let (ta, tb) = (tables(&a), tables(&b));
        assert_eq!(ta.len(), tb.len(), "round {round}: table count\n{input}");
        for (x, y) in ta.iter().zip(&tb) {
            if std::fs::read(x).unwrap() != std::fs::read(y).unwrap() {
                let dump = |t: &Path| {
                    let o = Command::new("python3")
                        .arg(concat!(
                            env!("CARGO_MANIFEST_DIR"),
                            "/../shared/tools/rtdump.py"
                        ))
                        .arg(t)
                        .output();
                    o.map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                        .unwrap_or_default()
                };
                panic!(
                    "round {round}: {} differs after\n{input}\nours:\n{}\ngit:\n{}",
                    x.display(),
                    dump(x),
                    dump(y)
                );
            }
        }
    }
    eprintln!("{ok} batches committed, {failed} refused");
    assert!(
        ok > 15 && failed > 3,
        "both outcomes exercised: {ok} ok, {failed} failed"
    );
    assert_eq!(ref_model(&a), ref_model(&b));
    verify_integrity(&a);
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

/// `update-ref` refuses, as git does, a new value naming a missing object and a
/// non-commit written to a branch (`refs/heads/*`, `HEAD`, or the branch a symref points
/// to), in the command-line form and with `--stdin` (text and `-z`, with and without
/// `prepare`): same stdout, stderr and exit code as git 2.47, and nothing written.
#[test]
fn update_ref_checks_objects_like_git() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir(&a).unwrap();
    rich_repo(&a);
    git(&a, &["symbolic-ref", "refs/tags/s", "refs/heads/main"]);
    let blob = run(
        "git",
        &a,
        &["hash-object", "-w", "--stdin"],
        Some(b"a blob\n"),
    );
    let blob = String::from_utf8(blob.stdout).unwrap().trim().to_owned();
    let tree = git(&a, &["rev-parse", "HEAD^{tree}"]).trim().to_owned();
    let tag = git(&a, &["rev-parse", "refs/tags/v1"]).trim().to_owned();
    let commit = git(&a, &["rev-parse", "HEAD"]).trim().to_owned();
    let missing = "1234567890".repeat(4);
    copy_repo(&a, &b);
    type Case = (Vec<String>, Option<String>);
    let line = |args: &[&str]| -> Case { (args.iter().map(|s| s.to_string()).collect(), None) };
    let stdin = |args: &[&str], input: String| -> Case {
        (args.iter().map(|s| s.to_string()).collect(), Some(input))
    };
    let cases: Vec<Case> = vec![
        line(&["update-ref", "refs/heads/x", &blob]),
        line(&["update-ref", "refs/heads/x", &missing]),
        line(&["update-ref", "refs/tags/x", &missing]),
        line(&["update-ref", "refs/heads/x", &tag]),
        line(&["update-ref", "HEAD", &tree]),
        line(&["update-ref", "--no-deref", "HEAD", &blob]),
        line(&["update-ref", "refs/tags/s", &blob]),
        line(&["update-ref", "refs/heads/main", &blob, &commit]),
        stdin(&["update-ref", "--stdin"], format!("update refs/heads/y {blob}\n")),
        stdin(&["update-ref", "--stdin"], format!("create refs/heads/y {missing}\n")),
        stdin(
            &["update-ref", "--stdin"],
            format!("create refs/heads/ok {commit}\nupdate refs/heads/y {tag}\n"),
        ),
        stdin(
            &["update-ref", "--stdin"],
            format!("update refs/tags/s {blob}\ncreate refs/heads/q {blob}\n"),
        ),
        stdin(
            &["update-ref", "--stdin"],
            format!("start\nupdate refs/heads/y {blob}\nprepare\ncommit\n"),
        ),
        stdin(
            &["update-ref", "--stdin"],
            format!("start\ncreate refs/heads/y {commit}\ncommit\nstart\nupdate refs/heads/y {tree}\ncommit\n"),
        ),
        stdin(
            &["update-ref", "--stdin"],
            format!("update refs/heads/y {missing} {}\n", "0".repeat(39) + "1"),
        ),
        stdin(&["update-ref", "--stdin", "-z"], format!("update refs/heads/z\0{blob}\0\0")),
        stdin(&["update-ref", "--stdin", "-z"], format!("create refs/tags/z\0{missing}\0")),
        // Accepted: a blob or a tree under refs/tags, a symref under refs/tags itself.
        line(&["update-ref", "refs/tags/blob", &blob]),
        stdin(
            &["update-ref", "--stdin"],
            format!("create refs/tags/tree {tree}\noption no-deref\nupdate refs/tags/s {blob}\n"),
        ),
    ];
    let state = |d: &Path| {
        (
            git(d, &["for-each-ref", "--include-root-refs"]),
            git(d, &["reflog", "show", "--all"]),
        )
    };
    for (args, input) in &cases {
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let before = state(&a);
        let ours = run(BIN, &a, &argv, input.as_deref().map(str::as_bytes));
        let theirs = run("git", &b, &argv, input.as_deref().map(str::as_bytes));
        let show = |o: &Output| {
            (
                String::from_utf8_lossy(&o.stdout).into_owned(),
                String::from_utf8_lossy(&o.stderr).into_owned(),
                o.status.code(),
            )
        };
        assert_eq!(show(&ours), show(&theirs), "{args:?} {input:?}");
        let (after_a, after_b) = (state(&a), state(&b));
        assert_eq!(after_a.0, after_b.0, "{args:?} {input:?}");
        if ours.status.code() == Some(128)
            && !input.as_deref().unwrap_or("").contains("commit\nstart")
        {
            assert_eq!(
                after_a, before,
                "{args:?}: refused, yet something was written"
            );
        }
    }
}

/// Runs `args` with `input` on stdin in `a` with our binary and in `b` with git (both with
/// auto-compaction on), and returns both outputs: ours first.
fn run_both(
    a: &Path,
    b: &Path,
    args: &[&str],
    input: &str,
) -> (std::process::Output, std::process::Output) {
    let run = |mut cmd: Command, dir: &Path| {
        env(&mut cmd)
            .env("GIT_TEST_REFTABLE_AUTOCOMPACTION", "true")
            .current_dir(dir)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    (run(Command::new(BIN), a), run(Command::new("git"), b))
}
