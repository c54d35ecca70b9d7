//! Finding and configuring the repository as git does: `-C`, `--git-dir`, SHA-256,
//! the repository's config, linked worktrees.

use super::*;

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
