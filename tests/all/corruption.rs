//! Corruption sweep over real tables written by git: every single-byte change and every
//! truncation either reads back or fails with an error naming the file and the offset —
//! never a panic, never an endless loop, never an allocation of absurd size.

use std::path::Path;
use std::sync::Arc;

use reftablefs::table::{LogIter, RefIter, Table};
use reftablefs::Error;

use crate::alloc::largest;
use crate::alone::alone;
use crate::util;

/// git without auto-compaction, so that each command leaves its own table.
fn git(dir: &Path, args: &[&str]) {
    util::git_no_compaction(dir, args)
}

/// Real tables: Appendix A's, one with indexes and an obj section at block size 100, one
/// SHA-256 table with several log blocks, and a log-only table.
fn tables(d: &Path) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut read_all = |repo: &Path| {
        let list = std::fs::read_to_string(repo.join(".git/reftable/tables.list")).unwrap();
        for l in list.lines() {
            out.push(std::fs::read(repo.join(".git/reftable").join(l)).unwrap());
        }
    };
    let r = d.join("a");
    git(
        d,
        &[
            "init",
            "-q",
            "--ref-format=reftable",
            "--initial-branch",
            "master",
            "a",
        ],
    );
    git(&r, &["commit", "-q", "--allow-empty", "-m", "initial"]);
    git(&r, &["tag", "-a", "-m", "t", "initial"]);
    git(&r, &["symbolic-ref", "refs/heads/sym", "refs/heads/master"]);
    git(&r, &["branch", "gone"]);
    git(&r, &["branch", "-D", "gone"]);
    git(
        &r,
        &["reflog", "expire", "--expire=all", "refs/heads/master"],
    );
    read_all(&r);
    git(&r, &["-c", "reftable.blockSize=256", "pack-refs"]);
    for i in 0..24 {
        git(&r, &["branch", &format!("b{i}")]);
    }
    git(
        &r,
        &[
            "-c",
            "reftable.blockSize=256",
            "-c",
            "reftable.restartInterval=2",
            "pack-refs",
        ],
    );
    read_all(&r);
    let s = d.join("s");
    git(
        d,
        &[
            "init",
            "-q",
            "--ref-format=reftable",
            "--object-format=sha256",
            "s",
        ],
    );
    for i in 0..30 {
        git(
            &s,
            &[
                "commit",
                "-q",
                "--allow-empty",
                "-m",
                &format!("commit {i} with a longer message to fill blocks"),
            ],
        );
    }
    git(&s, &["-c", "reftable.blockSize=512", "pack-refs"]);
    read_all(&s);
    out
}

/// Reads everything a client could: returns the first error.
fn exercise(t: &Arc<Table>) -> Result<(), Error> {
    let mut names = Vec::new();
    let mut it = t.ref_iter();
    it.seek(b"")?;
    let mut n = 0;
    while let Some(r) = it.next()? {
        names.push(r.name.clone());
        n += 1;
        assert!(n < 100_000, "endless ref iteration");
    }
    for name in &names {
        it.seek(name)?;
        it.next()?;
    }
    let mut li = t.log_iter();
    li.seek(b"", u64::MAX)?;
    let mut n = 0;
    while li.next()?.is_some() {
        n += 1;
        assert!(n < 100_000, "endless log iteration");
    }
    for name in &names {
        li.seek(name, u64::MAX)?;
        li.next()?;
    }
    t.refs_for(&reftablefs::ObjectId::from_bytes(&[0x5e; 20]).unwrap())?;
    t.verify()
}

fn check(name: &str, bytes: Vec<u8>) {
    let r = Table::from_bytes(name, bytes).and_then(|t| exercise(&t));
    match r {
        Ok(()) => {}
        Err(Error::Format { file, what, .. }) | Err(Error::Zlib { file, what, .. }) => {
            assert_eq!(file, name, "{what}");
            let e = Table::from_bytes(name, vec![]).unwrap_err().to_string();
            assert!(e.contains(name) && e.contains("offset"));
        }
        Err(e) => panic!("{name}: unexpected error class: {e}"),
    }
}

#[test]
fn every_byte_change_and_truncation() {
    // Alone in a process of its own: the largest allocation is the process's.
    if !alone(module_path!(), "every_byte_change_and_truncation") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let tables = tables(d.path());
    assert!(tables.len() >= 4);
    let mut cases = 0;
    for (ti, orig) in tables.iter().enumerate() {
        let t = Table::from_bytes("orig", orig.clone()).unwrap();
        exercise(&t).unwrap();
        for pos in 0..orig.len() {
            for v in [orig[pos] ^ 0x01, orig[pos] ^ 0x80, 0x00, 0xff] {
                if v == orig[pos] {
                    continue;
                }
                let mut b = orig.clone();
                b[pos] = v;
                check(&format!("t{ti}-byte{pos}-{v:02x}.ref"), b);
                cases += 1;
            }
        }
        for len in 0..orig.len() {
            check(&format!("t{ti}-len{len}.ref"), orig[..len].to_vec());
            cases += 1;
        }
    }
    assert!(cases > 5000, "{cases}");
    let largest = largest();
    assert!(largest < 4 << 20, "largest allocation {largest} bytes");
}
