//! Stack behaviour from git's t0610 and the reftable unit tests ("stack", "merged"),
//! reproduced with our library on repositories made by git 2.47, checked with git.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use reftablefs::merged::MergedRefIter;
use reftablefs::stack::{Stack, StackOptions};
use reftablefs::table::{LogIter, RefIter};
use reftablefs::transaction::{Expected, LogAllRefUpdates, LogEdit, NewValue, RefEdit};
use reftablefs::{Error, HashKind, RefValue};

use crate::util::{self, ident, Repo};

fn mode(p: &std::path::Path) -> u32 {
    fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn we_write_git_reads_refs_reflogs_and_fsck_passes() {
    for hash in [HashKind::Sha1, HashKind::Sha256] {
        let repo = Repo::new(hash);
        let c = repo.commits(3);
        let mut st = repo.open();
        let mut tx = st.transaction();
        tx.identity(ident());
        tx.edit(RefEdit::create("refs/heads/main", c[0]).message("commit (initial): one"));
        tx.edit(RefEdit::create("refs/tags/v1", c[1]));
        tx.edit(RefEdit::symref("refs/heads/sym", "refs/heads/main"));
        let done = tx.commit().unwrap();
        assert!(done.table.is_some(), "a table was written");
        let mut tx = st.transaction();
        tx.identity(ident());
        tx.edit(
            RefEdit::update("refs/heads/main", c[2])
                .expect(Expected::Oid(c[0]))
                .message("commit: two"),
        );
        tx.commit().unwrap();

        let refs = repo.git_refs();
        assert_eq!(
            refs,
            vec![
                ("refs/heads/main".into(), c[2].to_hex()),
                ("refs/heads/sym".into(), c[2].to_hex()),
                ("refs/tags/v1".into(), c[1].to_hex()),
            ],
            "{hash:?}"
        );
        assert_eq!(
            repo.git(&["symbolic-ref", "refs/heads/sym"]).trim(),
            "refs/heads/main"
        );
        let log = repo.git(&["reflog", "show", "--format=%H %gs", "refs/heads/main"]);
        assert_eq!(
            log,
            format!("{} commit: two\n{} commit (initial): one\n", c[2], c[0])
        );
        // HEAD -> refs/heads/main: updating main wrote HEAD's log-only entries too.
        let head_log = repo.git(&["reflog", "show", "--format=%H %gs", "HEAD"]);
        assert_eq!(
            head_log,
            format!("{} commit: two\n{} commit (initial): one\n", c[2], c[0])
        );
        // refs/tags get no reflog with logAllRefUpdates=true.
        assert!(!repo
            .git_out(&["reflog", "exists", "refs/tags/v1"])
            .status
            .success());
        repo.git(&["fsck", "--no-progress"]);
        repo.verify_integrity();
    }
}

#[test]
fn git_writes_we_read() {
    for hash in [HashKind::Sha1, HashKind::Sha256] {
        let repo = Repo::new(hash);
        repo.git(&["commit", "-q", "--allow-empty", "-m", "initial"]);
        repo.git(&["tag", "-a", "-m", "tag", "t1"]);
        repo.git(&["branch", "b1"]);
        repo.git(&["symbolic-ref", "refs/heads/s", "refs/heads/b1"]);
        let mut st = repo.open();
        let head = st.read_ref(b"HEAD").unwrap().unwrap();
        assert_eq!(head.value, RefValue::Symref(b"refs/heads/main".to_vec()));
        let main = repo.git(&["rev-parse", "main"]);
        let tag = repo.git(&["rev-parse", "t1"]);
        match st.read_ref(b"refs/tags/t1").unwrap().unwrap().value {
            RefValue::Val2 { value, peeled } => {
                assert_eq!(value.to_hex(), tag.trim());
                assert_eq!(peeled.to_hex(), main.trim());
            }
            v => panic!("annotated tag should be peeled, got {v:?}"),
        }
        let mut names = Vec::new();
        st.for_each_ref(b"refs/", |r| {
            names.push(String::from_utf8(r.name.clone()).unwrap());
            true
        })
        .unwrap();
        assert_eq!(
            names,
            [
                "refs/heads/b1",
                "refs/heads/main",
                "refs/heads/s",
                "refs/tags/t1"
            ]
        );
        let log = st.read_log(b"refs/heads/main").unwrap();
        assert_eq!(log.len(), 1);
        assert_eq!(log[0].message, b"commit (initial): initial\n");
        assert_eq!(log[0].tz_offset, -700);
        assert_eq!(log[0].time, 1_112_912_053);
    }
}

#[test]
fn writes_are_synced_once_per_transaction() {
    let repo = Repo::new(HashKind::Sha1);
    let c = repo.commits(2);
    let mut st = repo.open_with(|o| {
        o.fsync = true;
        o.auto_compact = false;
    });
    let mut tx = st.transaction();
    for i in 0..100 {
        tx.edit(RefEdit::create(format!("refs/heads/b{i}"), c[0]));
    }
    tx.commit().unwrap();
    let s = st.stats();
    assert_eq!(
        (s.file_fsyncs, s.dir_fsyncs),
        (2, 1),
        "table + list + directory: {s:?}"
    );
    // With auto-compaction (the commit's table + ours => merged): 4 file fsyncs as in
    // t0610, where git's table is bigger than ours could be at least.
    let repo = Repo::new(HashKind::Sha1);
    repo.git(&["commit", "-q", "--allow-empty", "-m", "initial"]);
    let mut st = repo.open_with(|o| o.fsync = true);
    let mut tx = st.transaction();
    tx.edit(RefEdit::create("refs/heads/x", c[1]).message("m".repeat(200)));
    tx.commit().unwrap();
    let s = st.stats();
    assert_eq!((s.file_fsyncs, s.dir_fsyncs), (4, 2), "{s:?}");
    assert_eq!(repo.tables().len(), 1);
    // Ours certainly bigger than git's init table: written merged with it at once
    // (stack/direct.rs), one table, one list: 2 file fsyncs.
    let repo = Repo::new(HashKind::Sha1);
    let mut st = repo.open_with(|o| o.fsync = true);
    let mut tx = st.transaction();
    tx.edit(RefEdit::create("refs/heads/x", c[1]));
    tx.commit().unwrap();
    let s = st.stats();
    assert_eq!((s.file_fsyncs, s.dir_fsyncs), (2, 1), "{s:?}");
    assert_eq!(repo.tables().len(), 1);
    // fsync off: none counted.
    let mut st = repo.open();
    let mut tx = st.transaction();
    tx.edit(RefEdit::create("refs/heads/y", c[1]));
    tx.commit().unwrap();
    assert_eq!(st.stats().file_fsyncs, 0);
}

#[test]
fn permissions_follow_default_permissions() {
    let repo = Repo::new(HashKind::Sha1);
    let c = repo.commits(1);
    let mut st = repo.open_with(|o| {
        o.default_permissions = Some(0o660);
        o.auto_compact = false;
    });
    let mut tx = st.transaction();
    tx.edit(RefEdit::create("refs/heads/x", c[0]));
    let name = tx.commit().unwrap().table.unwrap();
    assert_eq!(mode(&repo.reftable_dir().join("tables.list")), 0o660);
    assert_eq!(mode(&repo.reftable_dir().join(&name)), 0o660);
    st.compact_all().unwrap();
    for t in repo.tables() {
        assert_eq!(mode(&repo.reftable_dir().join(t)), 0o660, "compacted table");
    }
}

#[test]
fn writes_cause_auto_compaction_and_can_be_disabled() {
    let repo = Repo::new(HashKind::Sha1);
    let c = repo.commits(8);
    let mut st = repo.open();
    for (i, id) in c.iter().enumerate().take(2) {
        let mut tx = st.transaction();
        tx.identity(ident())
            .edit(RefEdit::update("refs/heads/main", *id).message(format!("c{i}")));
        tx.commit().unwrap();
        assert_eq!(repo.tables().len(), 1, "auto-compaction keeps one table");
    }
    st.set_options(StackOptions {
        auto_compact: false,
        ..st.options().clone()
    });
    for i in 0..5 {
        let mut tx = st.transaction();
        tx.edit(RefEdit::update(format!("refs/heads/n{i}"), c[3]));
        tx.commit().unwrap();
    }
    assert_eq!(repo.tables().len(), 6);
    st.set_options(StackOptions {
        auto_compact: true,
        ..st.options().clone()
    });
    let mut tx = st.transaction();
    tx.edit(RefEdit::update("refs/heads/n9", c[4]));
    tx.commit().unwrap();
    assert!(
        repo.tables().len() < 7,
        "auto-compaction ran: {:?}",
        repo.tables()
    );
    repo.verify_integrity();
    assert_eq!(repo.git_refs().len(), 7);
}

#[test]
fn alternating_table_sizes_are_compacted() {
    // t0610: 5 rounds of branch -f / branch -d leave exactly 2 tables (git does this).
    let repo = Repo::new(HashKind::Sha1);
    repo.git(&["commit", "-q", "--allow-empty", "-m", "initial"]);
    let head = repo.git(&["rev-parse", "HEAD"]);
    let head = reftablefs::ObjectId::from_hex(head.trim().as_bytes(), HashKind::Sha1).unwrap();
    let mut st = repo.open();
    for _ in 0..5 {
        let mut tx = st.transaction();
        tx.edit(RefEdit::update("refs/heads/foo", head));
        tx.commit().unwrap();
        let mut tx = st.transaction();
        tx.edit(RefEdit::delete("refs/heads/foo"));
        tx.commit().unwrap();
    }
    assert_eq!(repo.tables().len(), 2, "{:?}", repo.tables());
}

#[test]
fn lock_timeout_and_retry() {
    let repo = Repo::new(HashKind::Sha1);
    let c = repo.commits(1);
    let lock = repo.reftable_dir().join("tables.list.lock");
    fs::write(&lock, "").unwrap();
    let mut st = repo.open();
    let mut tx = st.transaction();
    tx.edit(RefEdit::create("refs/heads/x", c[0]));
    let err = tx.commit().unwrap_err();
    assert!(matches!(err, Error::Lock(_)), "{err}");
    assert!(err.to_string().contains("data is locked"), "{err}");
    assert!(
        st.read_ref(b"refs/heads/x").unwrap().is_none(),
        "nothing written"
    );
    // Retry: the lock goes away after 1 s; a 5 s timeout succeeds.
    let l2 = lock.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1000));
        fs::remove_file(l2).unwrap();
    });
    st.set_options(StackOptions {
        lock_timeout: Some(Duration::from_secs(5)),
        ..st.options().clone()
    });
    let mut tx = st.transaction();
    tx.edit(RefEdit::create("refs/heads/x", c[0]));
    tx.commit().unwrap();
    t.join().unwrap();
    assert_eq!(
        repo.git(&["rev-parse", "refs/heads/x"]).trim(),
        c[0].to_hex()
    );
    // compact_all on a locked list: "data is locked".
    fs::write(&lock, "").unwrap();
    st.set_options(StackOptions {
        lock_timeout: None,
        ..st.options().clone()
    });
    let err = st.compact_all().unwrap_err();
    assert!(err.to_string().starts_with("data is locked"), "{err}");
    fs::remove_file(&lock).unwrap();
}

#[test]
fn auto_compaction_fails_gracefully_with_locked_tables() {
    // t0610 "fails gracefully when auto compaction fails": every table locked after
    // each write; all writes succeed and the list grows.
    let repo = Repo::new(HashKind::Sha1);
    let c = repo.commits(1);
    let mut st = repo.open();
    let start = repo.tables().len();
    for i in 0..10 {
        for t in repo.tables() {
            let _ = fs::write(repo.reftable_dir().join(format!("{t}.lock")), "");
        }
        let mut tx = st.transaction();
        tx.edit(RefEdit::create(format!("refs/heads/b{i}"), c[0]));
        tx.commit().unwrap();
    }
    assert_eq!(repo.tables().len(), start + 10);
    let s = st.stats();
    assert!(
        s.compaction_attempts >= 1 && s.compaction_failures == s.compaction_attempts,
        "{s:?}"
    );
    // compact_all with a locked table: lock error, failure counted, nothing changed.
    let before = st.stats().compaction_failures;
    let err = st.compact_all().unwrap_err();
    assert!(matches!(err, Error::Lock(_)), "{err}");
    assert_eq!(st.stats().compaction_failures, before + 1);
    assert_eq!(repo.tables().len(), start + 10);
}

#[test]
fn best_effort_compacts_only_newer_locked_tables() {
    // unit test auto_compaction_with_locked_tables: 5 tables, #2 locked (0-based 1).
    let repo = Repo::new(HashKind::Sha1);
    let c = repo.commits(1);
    let mut st = repo.open_with(|o| o.auto_compact = false);
    for i in 0..4 {
        let mut tx = st.transaction();
        tx.edit(RefEdit::create(format!("refs/heads/b{i}"), c[0]));
        tx.commit().unwrap();
    }
    let names = repo.tables();
    assert_eq!(names.len(), 5);
    fs::write(repo.reftable_dir().join(format!("{}.lock", names[1])), "").unwrap();
    assert!(st.compact_range(0, 4, true).unwrap());
    let after = repo.tables();
    assert_eq!(
        after.len(),
        3,
        "newest 3 merged, locked #1 and base kept: {after:?}"
    );
    assert_eq!(&after[..2], &names[..2]);
    assert_eq!(st.stats().compaction_failures, 0);
    fs::remove_file(repo.reftable_dir().join(format!("{}.lock", names[1]))).unwrap();
    assert_eq!(repo.git_refs().len(), 4);
}

#[test]
fn tombstones_survive_partial_compaction_and_vanish_in_full() {
    let repo = Repo::new(HashKind::Sha1);
    let c = repo.commits(1);
    let mut st = repo.open_with(|o| o.auto_compact = false);
    let mut tx = st.transaction();
    tx.identity(ident())
        .edit(RefEdit::create("refs/heads/a", c[0]).message("made"));
    tx.commit().unwrap();
    let mut tx = st.transaction();
    tx.edit(RefEdit::delete("refs/heads/a"));
    tx.commit().unwrap();
    let mut tx = st.transaction();
    tx.edit(RefEdit::create("refs/heads/z", c[0]));
    tx.commit().unwrap();
    assert!(st.read_ref(b"refs/heads/a").unwrap().is_none());
    assert!(
        st.read_log(b"refs/heads/a").unwrap().is_empty(),
        "log deleted with the ref"
    );
    // Compact the two newest (not from 0): the tombstone must stay.
    let n = st.table_names().len();
    st.compact_range(n - 2, n - 1, false).unwrap();
    assert!(st.read_ref(b"refs/heads/a").unwrap().is_none());
    let mut it = st.ref_iter();
    it.seek(b"refs/heads/a").unwrap();
    let r = it.next().unwrap().unwrap();
    assert!(
        r.name == b"refs/heads/a" && r.is_deletion(),
        "tombstone kept: {r:?}"
    );
    st.compact_all().unwrap();
    let mut it = st.ref_iter();
    it.seek(b"refs/heads/a").unwrap();
    assert_eq!(
        it.next().unwrap().unwrap().name,
        b"refs/heads/z".to_vec(),
        "tombstone dropped by full compaction"
    );
    let mut logs = st.log_iter();
    logs.seek(b"refs/heads/a", u64::MAX).unwrap();
    if let Some(l) = logs.next().unwrap() {
        assert_ne!(l.refname, b"refs/heads/a", "log tombstones dropped too");
    }
    repo.verify_integrity();
}

#[test]
fn read_across_reload_and_missing_table() {
    let repo = Repo::new(HashKind::Sha1);
    let c = repo.commits(1);
    let mut st = repo.open_with(|o| o.auto_compact = false);
    for i in 0..3 {
        let mut tx = st.transaction();
        tx.edit(RefEdit::create(format!("refs/heads/b{i}"), c[0]));
        tx.commit().unwrap();
    }
    let mut old: MergedRefIter = st.ref_iter();
    let gen = st.generation();
    // Another handle compacts; the old iterator still reads the old tables.
    let mut other = repo.open();
    other.compact_all().unwrap();
    assert!(st.reload().unwrap());
    assert!(st.generation() > gen, "generation bumped by the reload");
    old.seek(b"refs/heads/").unwrap();
    let mut n = 0;
    while let Some(r) = old.next().unwrap() {
        if r.name.starts_with(b"refs/heads/b") {
            n += 1;
        }
    }
    assert_eq!(n, 3, "old iterator survives compaction + reload");
    assert!(!st.reload().unwrap(), "second reload is a no-op");
    // reload_with_missing_table: a list naming a missing table fails with NotExist and
    // the old stack keeps working.
    let list = repo.reftable_dir().join("tables.list");
    let mut content = fs::read_to_string(&list).unwrap();
    content.push_str("0x000000000099-0x000000000099-deadbeef.ref\n");
    fs::write(repo.reftable_dir().join("tmp.list"), &content).unwrap();
    fs::rename(repo.reftable_dir().join("tmp.list"), &list).unwrap();
    let err = st.reload().unwrap_err();
    assert!(matches!(err, Error::NotExist(_)), "{err}");
    assert!(
        st.read_ref(b"refs/heads/b1").unwrap().is_some(),
        "old stack still readable"
    );
}

#[test]
fn hash_id_is_checked() {
    let repo = Repo::new(HashKind::Sha1);
    let err = Stack::open(
        repo.reftable_dir(),
        StackOptions {
            hash: HashKind::Sha256,
            ..StackOptions::default()
        },
    )
    .unwrap_err();
    assert!(matches!(err, Error::Format { .. }), "{err}");
    assert!(err.to_string().contains("sha1"), "{err}");
}

#[test]
fn transaction_errors_match_git() {
    let repo = Repo::new(HashKind::Sha1);
    let c = repo.commits(2);
    let mut st = repo.open();
    let mut tx = st.transaction();
    tx.edit(RefEdit::create("refs/heads/main", c[0]));
    tx.edit(RefEdit::symref("refs/heads/self", "refs/heads/self"));
    tx.commit().unwrap();

    let mut tx = st.transaction();
    tx.edit(RefEdit::update("refs/heads/main", c[1]));
    tx.edit(RefEdit::update("refs/heads/main", c[0]));
    assert_eq!(
        tx.commit().unwrap_err().to_string(),
        "multiple updates for ref 'refs/heads/main' not allowed"
    );
    let mut tx = st.transaction();
    tx.edit(RefEdit::update("refs/heads/main/forbidden", c[1]));
    assert_eq!(
        tx.commit().unwrap_err().to_string(),
        "'refs/heads/main' exists; cannot create 'refs/heads/main/forbidden'"
    );
    let mut tx = st.transaction();
    tx.edit(RefEdit::symref("refs/heads", "refs/heads/foo"));
    assert_eq!(
        tx.commit().unwrap_err().to_string(),
        "'refs/heads/main' exists; cannot create 'refs/heads'"
    );
    // The D/F check remembers directories found free of refs for the next name: one
    // beside it in another directory is still checked against the stack.
    let mut tx = st.transaction();
    tx.edit(RefEdit::create("refs/heads/d/e/one", c[1]));
    tx.edit(RefEdit::create("refs/heads/d/two", c[1]));
    tx.edit(RefEdit::create("refs/heads/main/three", c[1]));
    assert_eq!(
        tx.commit().unwrap_err().to_string(),
        "'refs/heads/main' exists; cannot create 'refs/heads/main/three'"
    );
    let mut tx = st.transaction();
    tx.edit(RefEdit::update("refs/x/a", c[1]));
    tx.edit(RefEdit::update("refs/x/a/b", c[1]));
    let e = tx.commit().unwrap_err().to_string();
    assert!(e.starts_with("cannot process 'refs/x/a"), "{e}");
    let mut tx = st.transaction();
    tx.edit(RefEdit::delete("refs/heads/self"));
    assert_eq!(
        tx.commit().unwrap_err().to_string(),
        "multiple updates for 'refs/heads/self' (including one via symref 'refs/heads/self') are not allowed"
    );
    let mut tx = st.transaction();
    tx.edit(RefEdit::delete("refs/heads/self").no_deref());
    tx.commit().unwrap();
    let mut tx = st.transaction();
    tx.edit(RefEdit::delete("../../my-private-file"));
    assert!(matches!(tx.commit().unwrap_err(), Error::Refname { .. }));
    let mut tx = st.transaction();
    tx.edit(RefEdit::delete("refs/heads/main").expect(Expected::Oid(c[1])));
    let e = tx.commit().unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "cannot lock ref 'refs/heads/main': is at {} but expected {}",
            c[0], c[1]
        )
    );
    // The conflict is typed: the ref, what the edit expected, and what the stack holds
    // under the lock.
    let typed_conflict = |e: Error, want: Expected| match e {
        Error::Conflict {
            refname,
            expected,
            found,
            ..
        } => {
            assert_eq!(refname, b"refs/heads/main");
            assert_eq!(*expected, want);
            assert_eq!(found.as_deref(), Some(&RefValue::Val1(c[0])));
        }
        e => panic!("not a typed conflict: {e:?}"),
    };
    let mut tx = st.transaction();
    tx.edit(RefEdit::delete("refs/heads/main").expect(Expected::Oid(c[1])));
    typed_conflict(tx.commit().unwrap_err(), Expected::Oid(c[1]));
    let mut tx = st.transaction();
    tx.edit(RefEdit::create("refs/heads/main", c[1]));
    let e = tx.commit().unwrap_err();
    assert_eq!(
        e.to_string(),
        "cannot lock ref 'refs/heads/main': reference already exists"
    );
    typed_conflict(e, Expected::MustNotExist);
    let mut tx = st.transaction();
    tx.edit(RefEdit::update("refs/heads/nope", c[1]).expect(Expected::Oid(c[0])));
    let e = tx.commit().unwrap_err();
    assert!(e.to_string().contains("unable to resolve reference"), "{e}");
    assert!(
        matches!(
            &e,
            Error::Conflict { refname, expected, found: None, .. }
                if refname == b"refs/heads/nope" && **expected == Expected::Oid(c[0])
        ),
        "{e:?}"
    );
    assert_eq!(
        repo.git(&["rev-parse", "refs/heads/main"]).trim(),
        c[0].to_hex()
    );
    // A failed batch writes nothing at all.
    let before = repo.tables();
    let mut tx = st.transaction();
    tx.edit(RefEdit::create("refs/heads/new", c[1]));
    tx.edit(RefEdit::create("refs/heads/main", c[1]));
    assert!(tx.commit().is_err());
    assert_eq!(repo.tables(), before);
    assert!(st.read_ref(b"refs/heads/new").unwrap().is_none());
}

#[test]
fn noop_and_missing_delete_write_nothing() {
    let repo = Repo::new(HashKind::Sha1);
    let c = repo.commits(1);
    let mut st = repo.open_with(|o| o.auto_compact = false);
    let mut tx = st.transaction();
    tx.edit(RefEdit::create("refs/tags/t", c[0]));
    tx.commit().unwrap();
    let before = repo.tables();
    let mut tx = st.transaction();
    tx.edit(RefEdit::update("refs/tags/t", c[0]));
    tx.edit(RefEdit::delete("refs/tags/missing"));
    let done = tx.commit().unwrap();
    assert_eq!(done.table, None);
    assert_eq!(repo.tables(), before);
}

#[test]
fn reflog_edits() {
    let repo = Repo::new(HashKind::Sha1);
    let c = repo.commits(3);
    let mut st = repo.open();
    // create_reflog: existence marker; git sees an empty but existing reflog.
    let mut tx = st.transaction();
    tx.log_edit(LogEdit::Create {
        refname: b"refs/heads/branch".to_vec(),
    });
    tx.commit().unwrap();
    assert!(repo
        .git_out(&["reflog", "exists", "refs/heads/branch"])
        .status
        .success());
    assert!(st.read_log(b"refs/heads/branch").unwrap().is_empty());
    // Ref updates log under logAllRefUpdates=false only when a reflog exists.
    let mut tx = st.transaction();
    tx.identity(ident())
        .log_all_ref_updates(LogAllRefUpdates::False);
    tx.edit(RefEdit::create("refs/heads/branch", c[0]).message("one"));
    tx.edit(RefEdit::create("refs/heads/nolog", c[0]).message("one"));
    tx.commit().unwrap();
    assert_eq!(st.read_log(b"refs/heads/branch").unwrap().len(), 1);
    assert!(st.read_log(b"refs/heads/nolog").unwrap().is_empty());
    // Append explicit records, then rewrite dropping the middle one.
    let mut e = st.read_log(b"refs/heads/branch").unwrap().remove(0);
    for (i, msg) in ["two", "three"].iter().enumerate() {
        e.old_id = c[i];
        e.new_id = c[i + 1];
        e.message = format!("{msg}\n").into_bytes();
        let mut tx = st.transaction();
        tx.log_edit(LogEdit::Append {
            refname: b"refs/heads/branch".to_vec(),
            entry: e.clone(),
        });
        tx.commit().unwrap();
    }
    let msgs = |st: &Stack| -> Vec<String> {
        st.read_log(b"refs/heads/branch")
            .unwrap()
            .iter()
            .map(|l| String::from_utf8_lossy(&l.message).trim().to_owned())
            .collect()
    };
    assert_eq!(msgs(&st), ["three", "two", "one"]);
    let mut entries = st.read_log(b"refs/heads/branch").unwrap();
    entries.reverse();
    entries.remove(1);
    let mut tx = st.transaction();
    tx.log_edit(LogEdit::Rewrite {
        refname: b"refs/heads/branch".to_vec(),
        entries,
    });
    tx.commit().unwrap();
    assert_eq!(msgs(&st), ["three", "one"]);
    let git_log = repo.git(&["reflog", "show", "--format=%gs", "refs/heads/branch"]);
    assert_eq!(git_log, "three\none\n");
    // Delete the reflog.
    let mut tx = st.transaction();
    tx.log_edit(LogEdit::Delete {
        refname: b"refs/heads/branch".to_vec(),
    });
    tx.commit().unwrap();
    assert!(!repo
        .git_out(&["reflog", "exists", "refs/heads/branch"])
        .status
        .success());
    // A long message is truncated to block_size / 2 and gets one newline.
    let mut tx = st.transaction();
    tx.identity(ident());
    tx.edit(RefEdit::update("refs/heads/main", c[2]).message("x".repeat(5000)));
    tx.commit().unwrap();
    assert_eq!(
        st.read_log(b"refs/heads/main").unwrap()[0].message.len(),
        2049
    );
    repo.verify_integrity();
}

#[test]
fn deref_head_and_peeled_values() {
    let repo = Repo::new(HashKind::Sha1);
    repo.git(&["commit", "-q", "--allow-empty", "-m", "initial"]);
    repo.git(&["tag", "-a", "-m", "tag", "t1"]);
    let main = reftablefs::ObjectId::from_hex(
        repo.git(&["rev-parse", "main"]).trim().as_bytes(),
        HashKind::Sha1,
    )
    .unwrap();
    let tag = reftablefs::ObjectId::from_hex(
        repo.git(&["rev-parse", "t1"]).trim().as_bytes(),
        HashKind::Sha1,
    )
    .unwrap();
    let c = repo.commits(1);
    let mut st = repo.open();
    // An update addressed to HEAD goes to main, HEAD gets a log-only entry.
    let mut tx = st.transaction();
    tx.identity(ident()).edit(
        RefEdit::update("HEAD", c[0])
            .expect(Expected::Oid(main))
            .message("via head"),
    );
    tx.edit(RefEdit {
        name: b"refs/tags/copy".to_vec(),
        new: Some(NewValue::Peeled {
            value: tag,
            peeled: main,
        }),
        ..RefEdit::default()
    });
    tx.commit().unwrap();
    assert_eq!(
        st.read_ref(b"HEAD").unwrap().unwrap().value,
        RefValue::Symref(b"refs/heads/main".to_vec())
    );
    assert_eq!(repo.git(&["rev-parse", "main"]).trim(), c[0].to_hex());
    assert_eq!(
        repo.git(&["log", "-g", "-1", "--format=%gs", "HEAD"])
            .trim(),
        "via head"
    );
    assert_eq!(
        repo.git(&["log", "-g", "-1", "--format=%gs", "main"])
            .trim(),
        "via head"
    );
    assert_eq!(
        repo.git(&["rev-parse", "refs/tags/copy^{}"]).trim(),
        main.to_hex()
    );
    let show = repo.git(&["show-ref", "-d", "refs/tags/copy"]);
    assert!(show.contains("refs/tags/copy^{}"), "{show}");
}

#[test]
fn corrupted_tables_and_list_make_writes_fail() {
    let repo = Repo::new(HashKind::Sha1);
    let c = repo.commits(1);
    let mut st = repo.open();
    let mut tx = st.transaction();
    tx.edit(RefEdit::create("refs/heads/a", c[0]));
    tx.commit().unwrap();
    // A table truncated to 0 bytes: a fresh open fails, and so does a write.
    let table = repo.reftable_dir().join(&repo.tables()[0]);
    let saved = fs::read(&table).unwrap();
    fs::write(&table, b"").unwrap();
    let err = Stack::open(repo.reftable_dir(), repo.options()).unwrap_err();
    assert!(matches!(err, Error::Format { .. }), "{err}");
    fs::write(&table, &saved).unwrap();
    // `garbage` in tables.list: reload and writes fail, nothing is written.
    let list = repo.reftable_dir().join("tables.list");
    let good = fs::read(&list).unwrap();
    // (Replaced by rename, as every writer does, so that the stat check notices.)
    fs::write(repo.reftable_dir().join("tmp"), b"garbage\n").unwrap();
    fs::rename(repo.reftable_dir().join("tmp"), &list).unwrap();
    let err = Stack::open(repo.reftable_dir(), repo.options()).unwrap_err();
    assert!(matches!(err, Error::NotExist(_)), "{err}");
    let mut tx = st.transaction();
    tx.edit(RefEdit::create("refs/heads/b", c[0]));
    assert!(tx.commit().is_err());
    assert_eq!(fs::read(&list).unwrap(), b"garbage\n");
    fs::write(&list, good).unwrap();
    assert!(
        !repo.reftable_dir().join("tables.list.lock").exists(),
        "lock released"
    );
}

#[test]
fn empty_transaction_in_empty_repo() {
    // t0610: delete main and HEAD (no-deref), then an empty transaction succeeds.
    let repo = Repo::new(HashKind::Sha1);
    repo.git(&["commit", "-q", "--allow-empty", "-m", "A"]);
    repo.git(&["update-ref", "-d", "refs/heads/main"]);
    repo.git(&["update-ref", "-d", "--no-deref", "HEAD"]);
    let mut st = repo.open();
    let done = st.transaction().commit().unwrap();
    assert_eq!(done.table, None);
    let mut n = 0;
    st.for_each_ref(b"", |_| {
        n += 1;
        true
    })
    .unwrap();
    assert_eq!(n, 0);
}

#[test]
fn many_concurrent_writers_all_land() {
    // t0610 "many concurrent writers": here 8 threads with their own stack handles plus
    // git processes, all with long lock timeouts, 100 refs in total.
    let repo = Repo::new(HashKind::Sha1);
    let c = repo.commits(1)[0];
    let dir = repo.reftable_dir();
    let mut handles = Vec::new();
    for t in 0..8 {
        let dir = dir.clone();
        let opts = StackOptions {
            lock_timeout: Some(Duration::from_secs(300)),
            ..repo.options()
        };
        handles.push(std::thread::spawn(move || {
            let mut st = Stack::open(dir, opts).unwrap();
            for i in 0..10 {
                let mut tx = st.transaction();
                tx.edit(RefEdit::create(
                    format!("refs/heads/branch-{}", t * 10 + i + 1),
                    c,
                ));
                tx.commit().unwrap();
            }
        }));
    }
    for i in 81..=100 {
        let out = repo.git_out(&[
            "-c",
            "reftable.lockTimeout=300000",
            "update-ref",
            &format!("refs/heads/branch-{i}"),
            &c.to_hex(),
        ]);
        assert!(out.status.success(), "{out:?}");
    }
    for h in handles {
        h.join().unwrap();
    }
    let listing = repo.git(&["for-each-ref", "--format=%(refname)", "refs/heads/"]);
    for i in 1..=100 {
        assert!(
            listing.contains(&format!("refs/heads/branch-{i}\n")),
            "branch-{i} missing"
        );
    }
    repo.verify_integrity();
}

#[test]
fn deleting_heads_referent_logs_head_like_git() {
    // git 2.47: `update-ref -m del -d refs/heads/master` writes HEAD `old -> 0` "del"
    // and tombstones master's reflog.
    let repo = Repo::new(HashKind::Sha1);
    repo.git(&["commit", "-q", "--allow-empty", "-m", "i"]);
    let c = repo.git(&["rev-parse", "main"]);
    let mut st = repo.open();
    let mut tx = st.transaction();
    tx.identity(ident())
        .edit(RefEdit::delete("refs/heads/main").message("del"));
    tx.commit().unwrap();
    assert!(st.read_ref(b"refs/heads/main").unwrap().is_none());
    assert!(st.read_log(b"refs/heads/main").unwrap().is_empty());
    let head = st.read_log(b"HEAD").unwrap();
    assert_eq!(head.len(), 2);
    assert_eq!(head[0].old_id.to_hex(), c.trim());
    assert!(head[0].new_id.is_null());
    assert_eq!(head[0].message, b"del\n");
    assert_eq!(head[1].message, b"commit (initial): i\n");
    repo.verify_integrity();
}

#[test]
fn transaction_tables_are_byte_identical_to_gits() {
    // The same updates made by git and by us, with the same identity and clock, give
    // the same table bytes (after auto-compaction with the init table).
    let a = Repo::new(HashKind::Sha1);
    let b = Repo::new(HashKind::Sha1);
    let ca = a.commits(2);
    let cb = b.commits(2);
    assert_eq!(ca, cb, "same objects in both repositories");
    a.git(&[
        "update-ref",
        "-m",
        "first  message",
        "refs/heads/main",
        &ca[0].to_hex(),
    ]);
    a.git(&[
        "update-ref",
        "-m",
        "second",
        "refs/heads/main",
        &ca[1].to_hex(),
        &ca[0].to_hex(),
    ]);
    a.git(&["update-ref", "refs/tags/v1", &ca[0].to_hex()]);
    a.git(&["update-ref", "-d", "refs/tags/v1"]);
    let mut st = b.open();
    for (name, new, old, msg) in [
        ("refs/heads/main", Some(cb[0]), None, Some("first  message")),
        ("refs/heads/main", Some(cb[1]), Some(cb[0]), Some("second")),
        ("refs/tags/v1", Some(cb[0]), None, None),
        ("refs/tags/v1", None, None, None),
    ] {
        let mut tx = st.transaction();
        tx.identity(ident());
        let mut e = match new {
            Some(id) => RefEdit::update(name, id),
            None => RefEdit::delete(name),
        };
        if let Some(old) = old {
            e = e.expect(Expected::Oid(old));
        }
        if let Some(m) = msg {
            e = e.message(m);
        }
        tx.edit(e);
        tx.commit().unwrap();
    }
    // A batch through HEAD, with creates, a no-op and a delete, in one transaction.
    let input = format!(
        "update HEAD {} {}\ncreate refs/heads/b1 {}\ncreate refs/tags/t1 {}\nupdate refs/heads/b0 {}\ndelete refs/heads/gone\n",
        ca[0], ca[1], ca[1], ca[0], ca[1]
    );
    a.git(&["update-ref", "refs/heads/b0", &ca[1].to_hex()]);
    let out = util::git_stdin(
        a.path(),
        &["update-ref", "-m", "batch", "--stdin"],
        input.as_bytes(),
    );
    assert!(out.status.success(), "{out:?}");
    let mut tx = st.transaction();
    tx.identity(ident())
        .edit(RefEdit::update("refs/heads/b0", cb[1]));
    tx.commit().unwrap();
    let mut tx = st.transaction();
    tx.identity(ident());
    tx.edit(
        RefEdit::update("HEAD", cb[0])
            .expect(Expected::Oid(cb[1]))
            .message("batch"),
    );
    tx.edit(RefEdit::create("refs/heads/b1", cb[1]).message("batch"));
    tx.edit(RefEdit::create("refs/tags/t1", cb[0]).message("batch"));
    tx.edit(RefEdit::update("refs/heads/b0", cb[1]).message("batch"));
    tx.edit(RefEdit::delete("refs/heads/gone").message("batch"));
    tx.commit().unwrap();
    let (ta, tb) = (a.tables(), b.tables());
    assert_eq!(ta.len(), tb.len(), "{ta:?} vs {tb:?}");
    for (x, y) in ta.iter().zip(&tb) {
        assert_eq!(x[..29], y[..29], "same update index range in the name");
        let bx = fs::read(a.reftable_dir().join(x)).unwrap();
        let by = fs::read(b.reftable_dir().join(y)).unwrap();
        assert!(bx == by, "table {x} differs from ours {y}");
    }
}

#[test]
fn noop_update_keeps_peeled_value_and_symref_expectations_resolve() {
    let repo = Repo::new(HashKind::Sha1);
    repo.git(&["commit", "-q", "--allow-empty", "-m", "A"]);
    repo.git(&["tag", "-a", "-m", "t", "t1"]);
    let tag = reftablefs::ObjectId::from_hex(
        repo.git(&["rev-parse", "t1"]).trim().as_bytes(),
        HashKind::Sha1,
    )
    .unwrap();
    let main = reftablefs::ObjectId::from_hex(
        repo.git(&["rev-parse", "main"]).trim().as_bytes(),
        HashKind::Sha1,
    )
    .unwrap();
    let mut st = repo.open();
    let before = repo.tables();
    let mut tx = st.transaction();
    tx.edit(RefEdit::update("refs/tags/t1", tag));
    assert_eq!(tx.commit().unwrap().table, None, "same id: nothing written");
    assert_eq!(repo.tables(), before);
    assert!(matches!(
        st.read_ref(b"refs/tags/t1").unwrap().unwrap().value,
        RefValue::Val2 { .. }
    ));
    // no_deref update of HEAD with an expected id: compared with what HEAD resolves to.
    let mut tx = st.transaction();
    tx.edit(RefEdit::symref("HEAD", "refs/heads/other").expect(Expected::Oid(main)));
    tx.commit().unwrap();
    assert_eq!(
        repo.git(&["symbolic-ref", "HEAD"]).trim(),
        "refs/heads/other"
    );
}

#[test]
fn small_block_sizes_give_entry_too_large() {
    // t0613: a 500-byte reflog message with blockSize=100 fails the transaction;
    // compaction with blockSize=50 fails with "entry too large".
    let repo = Repo::new(HashKind::Sha1);
    let c = repo.commits(1);
    let mut st = repo.open_with(|o| {
        o.write.block_size = 100;
        o.auto_compact = false;
    });
    let before = repo.tables();
    let mut tx = st.transaction();
    tx.identity(ident())
        .edit(RefEdit::create("refs/heads/logme", c[0]).message("a".repeat(500)));
    let err = tx.commit().unwrap_err();
    assert!(matches!(err, Error::EntryTooBig), "{err}");
    assert_eq!(err.to_string(), "entry too large");
    assert_eq!(repo.tables(), before, "nothing written");
    assert!(!repo.reftable_dir().join("tables.list.lock").exists());
    let mut tx = st.transaction();
    tx.edit(RefEdit::create("refs/heads/x", c[0]));
    tx.commit().unwrap();
    let mut opts = st.options().clone();
    opts.write.block_size = 50;
    st.set_options(opts);
    let err = st.compact_all().unwrap_err();
    assert_eq!(err.to_string(), "entry too large");
    let leftovers: Vec<_> = fs::read_dir(repo.reftable_dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".temp.") || n.ends_with(".lock"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn reflog_rewrites_are_minimal_and_keep_existence() {
    use reftablefs::table::Table;
    let repo = Repo::new(HashKind::Sha1);
    let c = repo.commits(4);
    let mut st = repo.open_with(|o| o.auto_compact = false);
    for (i, id) in c.iter().enumerate() {
        let mut tx = st.transaction();
        tx.identity(ident())
            .edit(RefEdit::update("refs/heads/x", *id).message(format!("m{i}")));
        tx.commit().unwrap();
    }
    let mut entries = st.read_log(b"refs/heads/x").unwrap();
    entries.reverse(); // oldest first, as a reflog file
                       // Drop m1 (what `git reflog delete x@{2}` or `stash drop` does): one tombstone.
    let mut kept = entries.clone();
    kept.remove(1);
    for e in &mut kept {
        e.message.pop(); // parsed lines may come without the newline
    }
    let mut tx = st.transaction();
    tx.log_edit(LogEdit::Rewrite {
        refname: b"refs/heads/x".to_vec(),
        entries: kept,
    });
    let name = tx.commit().unwrap().table.unwrap();
    let t = Table::open(repo.reftable_dir().join(&name)).unwrap();
    let mut it = t.log_iter();
    it.seek(b"", u64::MAX).unwrap();
    let mut recs = Vec::new();
    while let Some(l) = it.next().unwrap() {
        recs.push((l.refname.clone(), l.update_index, l.deleted));
    }
    assert_eq!(
        recs,
        vec![(b"refs/heads/x".to_vec(), entries[1].update_index, true)]
    );
    let msgs = repo.git(&["reflog", "show", "--format=%gs", "refs/heads/x"]);
    assert_eq!(msgs, "m3\nm2\nm0\n");
    // A rewrite that changes an entry: order and content as given.
    let mut changed = st.read_log(b"refs/heads/x").unwrap();
    changed.reverse();
    changed[0].message = b"edited\n".to_vec();
    let mut tx = st.transaction();
    tx.log_edit(LogEdit::Rewrite {
        refname: b"refs/heads/x".to_vec(),
        entries: changed,
    });
    tx.commit().unwrap();
    let msgs = repo.git(&["reflog", "show", "--format=%gs", "refs/heads/x"]);
    assert_eq!(msgs, "m3\nm2\nedited\n");
    // Emptied: the reflog still exists (existence marker), as after git's expiry.
    let mut tx = st.transaction();
    tx.log_edit(LogEdit::Rewrite {
        refname: b"refs/heads/x".to_vec(),
        entries: vec![],
    });
    tx.commit().unwrap();
    assert!(st.read_log(b"refs/heads/x").unwrap().is_empty());
    assert!(st.reflog_exists(b"refs/heads/x").unwrap());
    assert!(repo
        .git_out(&["reflog", "exists", "refs/heads/x"])
        .status
        .success());
    // Emptying an already empty reflog writes nothing.
    let mut tx = st.transaction();
    tx.log_edit(LogEdit::Rewrite {
        refname: b"refs/heads/x".to_vec(),
        entries: vec![],
    });
    assert_eq!(tx.commit().unwrap().table, None);
    repo.verify_integrity();
}

/// git writes the existence marker of `create_reflog` and of an emptied reflog with a
/// NULL message, which stays empty in the new table (compaction later makes it "\n"):
/// our uncompacted tables must have the same bytes.
#[test]
fn existence_markers_are_byte_identical_to_gits() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir(&a).unwrap();
    let g = util::git_no_compaction;
    g(&a, &["init", "-q", "--ref-format=reftable", "-b", "main"]);
    g(&a, &["commit", "-q", "--allow-empty", "-m", "one"]);
    g(
        &a,
        &["update-ref", "--create-reflog", "refs/tags/x", "HEAD"],
    );
    assert!(std::process::Command::new("cp")
        .arg("-a")
        .arg(&a)
        .arg(&b)
        .status()
        .unwrap()
        .success());
    let list = |dir: &std::path::Path| -> Vec<Vec<u8>> {
        let rt = dir.join(".git/reftable");
        fs::read_to_string(rt.join("tables.list"))
            .unwrap()
            .lines()
            .map(|l| fs::read(rt.join(l)).unwrap())
            .collect()
    };
    let opts = StackOptions {
        auto_compact: false,
        ..StackOptions::default()
    };
    let mut st = Stack::open(b.join(".git/reftable"), opts).unwrap();

    // Reflog expiry that drops every entry: a tombstone and the marker.
    g(&a, &["reflog", "expire", "--expire=all", "refs/tags/x"]);
    let mut tx = st.transaction();
    tx.log_edit(LogEdit::Rewrite {
        refname: b"refs/tags/x".to_vec(),
        entries: Vec::new(),
    });
    tx.commit().unwrap();
    let (ta, tb) = (list(&a), list(&b));
    assert_eq!(ta.len(), tb.len());
    assert_eq!(ta.last(), tb.last(), "reflog expire table differs");
    assert!(st.reflog_exists(b"refs/tags/x").unwrap());
    assert!(st.read_log(b"refs/tags/x").unwrap().is_empty());

    // create_reflog (`git checkout -l --orphan` when the branch would not log).
    g(
        &a,
        &[
            "-c",
            "core.logAllRefUpdates=false",
            "checkout",
            "-q",
            "-l",
            "--orphan",
            "orph",
        ],
    );
    let mut tx = st.transaction();
    tx.log_edit(LogEdit::Create {
        refname: b"refs/heads/orph".to_vec(),
    });
    tx.commit().unwrap();
    let (ta, tb) = (list(&a), list(&b));
    // git's next table re-points HEAD; the marker table is the one before it.
    assert_eq!(ta.len(), tb.len() + 1);
    assert_eq!(
        ta.get(tb.len() - 1),
        tb.last(),
        "create_reflog table differs"
    );

    // Compaction turns the empty message into "\n", as git's does.
    st.compact_all().unwrap();
    let rt = b.join(".git/reftable");
    let name = fs::read_to_string(rt.join("tables.list")).unwrap();
    let t = reftablefs::table::Table::open(rt.join(name.trim())).unwrap();
    let mut it = t.log_iter();
    it.seek(b"refs/heads/orph", u64::MAX).unwrap();
    assert_eq!(it.next().unwrap().unwrap().message, b"\n");
}

/// As git's reftable backend, deleting a symref keeps its reflog and logs `old -> 0`;
/// with a `LogEdit::Delete` in the same transaction (the mount: a files-backend git
/// unlinks the reflog with the ref) the reflog is gone, and git agrees.
#[test]
fn deleting_a_symref_keeps_its_reflog_unless_deleted_too() {
    let repo = Repo::new(HashKind::Sha1);
    let c = repo.commits(1);
    let mut st = repo.open();
    let mut tx = st.transaction();
    tx.identity(ident());
    tx.edit(RefEdit::update("refs/heads/main", c[0]).message("one"));
    tx.commit().unwrap();
    // (A symref's entry needs its target to exist before the transaction.)
    let mut tx = st.transaction();
    tx.identity(ident());
    tx.edit(RefEdit::symref("refs/remotes/o/HEAD", "refs/heads/main").message("sym"));
    tx.edit(RefEdit::symref("refs/remotes/p/HEAD", "refs/heads/main").message("sym"));
    tx.commit().unwrap();
    assert_eq!(st.read_log(b"refs/remotes/o/HEAD").unwrap().len(), 1);
    let mut tx = st.transaction();
    tx.identity(ident());
    tx.edit(RefEdit::delete("refs/remotes/o/HEAD").no_deref());
    tx.edit(RefEdit::delete("refs/remotes/p/HEAD").no_deref());
    tx.log_edit(LogEdit::Delete {
        refname: b"refs/remotes/p/HEAD".to_vec(),
    });
    tx.commit().unwrap();
    let log = st.read_log(b"refs/remotes/o/HEAD").unwrap();
    assert_eq!(log.len(), 2);
    assert!(log[0].new_id.is_null() && log[0].old_id == c[0]);
    assert!(repo
        .git_out(&["reflog", "exists", "refs/remotes/o/HEAD"])
        .status
        .success());
    assert!(!st.reflog_exists(b"refs/remotes/p/HEAD").unwrap());
    assert!(!repo
        .git_out(&["reflog", "exists", "refs/remotes/p/HEAD"])
        .status
        .success());
}

#[test]
fn names_of_one_batch_conflict_with_gits_messages() {
    // git 2.47's messages for D/F conflicts inside one batch, in its order: the name
    // checked first is reported, with the first conflicting name in name order; a name
    // added by a symref split counts for the names checked after it (the split adds
    // `refs/heads/q` between `q/x` and `q/y`).
    let repo = Repo::new(HashKind::Sha1);
    repo.git(&["commit", "-q", "--allow-empty", "-m", "x"]);
    repo.git(&["symbolic-ref", "refs/heads/sym", "refs/heads/q"]);
    let h = repo.git(&["rev-parse", "HEAD"]);
    let h = h.trim();
    let id = reftablefs::ObjectId::from_hex(h.as_bytes(), HashKind::Sha1).unwrap();
    let mut st = repo.open();
    for (names, msg) in [
        (
            &["refs/heads/q/x", "refs/heads/sym", "refs/heads/q/y"][..],
            "cannot process 'refs/heads/q/y' and 'refs/heads/q' at the same time",
        ),
        (
            &["refs/heads/a/b", "refs/heads/a"][..],
            "cannot process 'refs/heads/a/b' and 'refs/heads/a' at the same time",
        ),
        (
            &["refs/heads/c", "refs/heads/c/d", "refs/heads/c/a"][..],
            "cannot process 'refs/heads/c' and 'refs/heads/c/a' at the same time",
        ),
    ] {
        let input: String = names
            .iter()
            .map(|n| {
                let verb = if *n == "refs/heads/sym" {
                    "update"
                } else {
                    "create"
                };
                format!("{verb} {n} {h}\n")
            })
            .collect();
        let out = util::git_stdin(repo.path(), &["update-ref", "--stdin"], input.as_bytes());
        assert!(!out.status.success());
        assert_eq!(
            String::from_utf8_lossy(&out.stderr).trim(),
            format!("fatal: {msg}"),
            "git's message"
        );
        let mut tx = st.transaction();
        for n in names {
            tx.edit(if *n == "refs/heads/sym" {
                RefEdit::update(*n, id)
            } else {
                RefEdit::create(*n, id)
            });
        }
        let err = tx.commit().unwrap_err();
        assert_eq!(err.to_string(), msg, "{names:?}");
    }
}
