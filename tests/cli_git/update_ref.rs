//! `update-ref` beside git: the tables it writes, its errors and transactions, the
//! single-ref and `-z` forms, locks, `prepare` and object checks.

use super::*;

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
