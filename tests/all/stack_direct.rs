//! A big transaction on a small stack is written already compacted (`stack/direct.rs`):
//! the table, `tables.list` and update-index range must be what git 2.47 leaves after
//! the same transaction and its auto-compaction, byte for byte.

use std::fs;
use std::path::Path;

use reftablefs::stack::{Stack, StackOptions};
use reftablefs::transaction::{Expected, RefEdit};
use reftablefs::{HashKind, ObjectId};

use crate::util::{self, ident, Repo};

/// The tables `tables.list` names in `dir` (a work tree), with their bytes.
fn tables(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let rt = dir.join(".git/reftable");
    fs::read_to_string(rt.join("tables.list"))
        .unwrap()
        .lines()
        .map(|l| (l.to_owned(), fs::read(rt.join(l)).unwrap()))
        .collect()
}

/// Every `*.ref` file in the directory (listed or not).
fn ref_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir.join(".git/reftable"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".ref"))
        .collect();
    v.sort();
    v
}

/// A repository of four tables (git, no auto-compaction): `main` with a commit, a
/// branch and a tag with reflogs, and `n` commits; `b` is a copy.
fn two_copies(n: usize) -> (Repo, tempfile::TempDir, Vec<ObjectId>) {
    let a = Repo::new(HashKind::Sha1);
    util::git_no_compaction(a.path(), &["commit", "-q", "--allow-empty", "-m", "one"]);
    let c = a.commits(n);
    util::git_no_compaction(a.path(), &["update-ref", "refs/heads/old", &c[0].to_hex()]);
    util::git_no_compaction(a.path(), &["update-ref", "refs/tags/keep", &c[1].to_hex()]);
    assert_eq!(a.tables().len(), 4, "{:?}", a.tables());
    let tmp = tempfile::tempdir().unwrap();
    let b = tmp.path().join("b");
    assert!(std::process::Command::new("cp")
        .arg("-a")
        .arg(a.path())
        .arg(&b)
        .status()
        .unwrap()
        .success());
    (a, tmp, c)
}

#[test]
fn big_transaction_is_written_compacted_byte_identical_to_gits() {
    let n = 2000;
    let (a, tmp, c) = two_copies(4);
    let b = tmp.path().join("b");
    let head = a.git(&["rev-parse", "HEAD"]);
    let head = ObjectId::from_hex(head.trim().as_bytes(), HashKind::Sha1).unwrap();

    // git: creates, an update through HEAD, a delete of a ref with a reflog.
    let mut input = String::new();
    for i in 0..n {
        input.push_str(&format!(
            "create refs/heads/d{:02}/branch-{i:05} {}\n",
            i % 7,
            c[i % 4]
        ));
    }
    input.push_str(&format!("update HEAD {} {head}\n", c[2]));
    input.push_str("delete refs/heads/old\n");
    let out = util::git_stdin(
        a.path(),
        &["update-ref", "-m", "batch  one", "--stdin"],
        input.as_bytes(),
    );
    assert!(out.status.success(), "{out:?}");

    // Us, the same edits.
    let mut st = Stack::open(
        b.join(".git/reftable"),
        StackOptions {
            hash: HashKind::Sha1,
            ..StackOptions::default()
        },
    )
    .unwrap();
    let before = ref_files(&b);
    assert_eq!(before.len(), 4);
    let mut tx = st.transaction();
    tx.identity(ident());
    for i in 0..n {
        tx.edit(
            RefEdit::create(format!("refs/heads/d{:02}/branch-{i:05}", i % 7), c[i % 4])
                .message("batch  one"),
        );
    }
    tx.edit(
        RefEdit::update("HEAD", c[2])
            .expect(Expected::Oid(head))
            .message("batch  one"),
    );
    tx.edit(RefEdit::delete("refs/heads/old").message("batch  one"));
    let done = tx.commit().unwrap();

    let (ta, tb) = (tables(a.path()), tables(&b));
    assert_eq!(ta.len(), 1, "git compacted everything");
    assert_eq!(tb.len(), 1, "so did we");
    assert_eq!(ta[0].0[..29], tb[0].0[..29], "same update-index range");
    assert!(
        ta[0].1 == tb[0].1,
        "table {} differs from ours {}",
        ta[0].0,
        tb[0].0
    );
    // Written directly: the table the transaction reports is the compacted one, no other
    // table was ever created, and the replaced ones are gone.
    assert_eq!(done.table.as_deref(), Some(tb[0].0.as_str()));
    assert_eq!(ref_files(&b), vec![tb[0].0.clone()]);
    let s = st.stats();
    assert_eq!(
        (s.tables_added, s.compactions, s.compaction_attempts),
        (1, 1, 1)
    );
    // refs: the new ones, HEAD, main, keep; logs: the new ones, HEAD's and main's two
    // (a tag logs nothing; old's entries are tombstoned, and the tombstones dropped).
    assert_eq!(s.entries_written, 2 * n as u64 + 7);
}

#[test]
fn a_locked_table_means_the_ordinary_path_as_git() {
    // A compaction under way (a `<table>.lock` on the oldest table): git adds the table
    // and compacts best-effort above the locked one; so must we, byte for byte.
    let n = 1000;
    let (a, tmp, c) = two_copies(2);
    let b = tmp.path().join("b");
    let oldest = a.tables()[0].clone();
    for dir in [a.path(), b.as_path()] {
        fs::write(dir.join(".git/reftable").join(format!("{oldest}.lock")), "").unwrap();
    }
    let mut input = String::new();
    for i in 0..n {
        input.push_str(&format!("create refs/heads/x/b{i:04} {}\n", c[i % 2]));
    }
    let out = util::git_stdin(
        a.path(),
        &["update-ref", "-m", "locked", "--stdin"],
        input.as_bytes(),
    );
    assert!(out.status.success(), "{out:?}");
    let mut st = Stack::open(b.join(".git/reftable"), StackOptions::default()).unwrap();
    let mut tx = st.transaction();
    tx.identity(ident());
    for i in 0..n {
        tx.edit(RefEdit::create(format!("refs/heads/x/b{i:04}"), c[i % 2]).message("locked"));
    }
    tx.commit().unwrap();
    let (ta, tb) = (tables(a.path()), tables(&b));
    assert_eq!(
        ta.len(),
        2,
        "git: the locked table, then the rest compacted"
    );
    assert_eq!(tb.len(), ta.len());
    assert_eq!(tb[0].0, oldest, "the locked table stays");
    for (x, y) in ta.iter().zip(&tb) {
        assert_eq!(x.0[..29], y.0[..29]);
        assert!(x.1 == y.1, "table {} differs from ours {}", x.0, y.0);
    }
    assert!(b
        .join(".git/reftable")
        .join(format!("{oldest}.lock"))
        .exists());
}
