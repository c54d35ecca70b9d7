//! `migrate` beside `git refs migrate`: the same table, reflogs carried, `--dry-run`.

use super::*;

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
