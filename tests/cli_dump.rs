//! `reftablefs dump` on a table git wrote.

use std::process::Command;

#[path = "support/git.rs"]
mod util;

use util::git;

#[test]
fn dump_prints_blocks_and_records_and_verifies() {
    let d = tempfile::tempdir().unwrap();
    let repo = d.path().join("r");
    git(
        d.path(),
        &[
            "init",
            "-q",
            "--ref-format=reftable",
            "--initial-branch",
            "master",
            "r",
        ],
    );
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "initial"]);
    git(&repo, &["tag", "initial"]);
    git(&repo, &["pack-refs"]);
    let list = std::fs::read_to_string(repo.join(".git/reftable/tables.list")).unwrap();
    let table = repo.join(".git/reftable").join(list.trim());
    let bin = env!("CARGO_BIN_EXE_reftablefs");

    let out = Command::new(bin).arg("dump").arg(&table).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains(
        "header: version 1 hash sha1 block_size 4096 min_update_index 1 max_update_index 3"
    ));
    assert!(
        text.contains("block r at 0: length 129 restarts 2"),
        "{text}"
    );
    assert!(
        text.contains("block g at 137: length 262 restarts 2"),
        "{text}"
    );
    assert!(text.contains("ref HEAD ui 1 symref refs/heads/master"));
    assert!(text.contains(
        "C O Mitter <committer@example.com> 1112912053 -0700 commit (initial): initial\\n"
    ));

    let out = Command::new(bin)
        .args(["dump", "--verify"])
        .arg(&table)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("ok "));

    // A corrupted copy: the CRC no longer matches, and the error names file and offset.
    let mut bytes = std::fs::read(&table).unwrap();
    let n = bytes.len();
    bytes[n - 10] ^= 0x40;
    let bad = d.path().join("bad.ref");
    std::fs::write(&bad, bytes).unwrap();
    let out = Command::new(bin)
        .args(["dump", "--verify"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(128));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.ref") && err.contains("offset"), "{err}");

    let out = Command::new(bin).arg("dump").output().unwrap();
    assert_eq!(out.status.code(), Some(129));
}
