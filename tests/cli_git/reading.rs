//! Reading commands beside git: `show-ref`, `for-each-ref`, `resolve` against
//! `rev-parse`, `reflog`.

use super::*;

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
