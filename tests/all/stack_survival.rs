//! The stack against faults and foreign hands: a failed directory fsync after the commit
//! keeps the new table; a moved `tables.list` is an error and deletes nothing; a table
//! file changed on disk is re-read. Integrity is checked with `verify_stack` (what
//! `reftablefs verify` runs) and the refs' values, read by us and by git.

use std::fs;
use std::path::Path;

use reftablefs::stack::verify::verify_stack;
use reftablefs::stack::{Stack, StackOptions};
use reftablefs::testing::fsio::{self, Op};
use reftablefs::transaction::RefEdit;
use reftablefs::{HashKind, ObjectId, RefValue};

use crate::util::Repo;

fn assert_verifies(dir: &Path) {
    let rep = verify_stack(dir, HashKind::Sha1).expect("verify runs");
    assert!(rep.errors.is_empty(), "verify: {:?}", rep.errors);
}

fn value(st: &mut Stack, name: &str) -> Option<ObjectId> {
    st.read_ref(name.as_bytes())
        .expect("read")
        .and_then(|r| match r.value {
            RefValue::Val1(id) => Some(id),
            _ => None,
        })
}

fn commit_one(st: &mut Stack, name: &str, id: ObjectId) -> reftablefs::Result<()> {
    let mut tx = st.transaction();
    tx.edit(RefEdit::update(name, id));
    tx.commit().map(|_| ())
}

/// Index of the first recorded step of kind `op`.
fn step_of(steps: &[fsio::Step], op: Op) -> usize {
    steps
        .iter()
        .position(|s| s.op == op)
        .unwrap_or_else(|| panic!("no {op:?} step in {steps:#?}"))
}

fn listed_tables_exist(dir: &Path) {
    let list = fs::read_to_string(dir.join("tables.list")).expect("tables.list");
    for name in list.lines().filter(|l| !l.is_empty()) {
        assert!(dir.join(name).exists(), "listed table {name} was deleted");
    }
}

#[test]
fn dir_fsync_failure_after_commit_keeps_the_new_table() {
    let repo = Repo::new(HashKind::Sha1);
    let ids = repo.commits(2);
    let mut st = repo.open_with(|o| {
        o.fsync = true;
        o.auto_compact = false;
    });
    commit_one(&mut st, "refs/heads/a", ids[0]).unwrap();
    // Where the directory fsync comes in a commit, then fail exactly that call.
    let (r, steps) = fsio::record(|| commit_one(&mut st, "refs/heads/b", ids[0]));
    r.unwrap();
    let at = step_of(&steps, Op::FsyncDir);
    let (r, _) = fsio::inject(at, libc::EIO, || {
        commit_one(&mut st, "refs/heads/c", ids[1])
    });
    let err = r.expect_err("the failed fsync is reported");
    assert!(err.to_string().contains("Input/output error"), "{err}");
    // The list was renamed before the fsync: the new table is listed and kept, and the
    // stack was re-read.
    let dir = repo.reftable_dir();
    listed_tables_exist(&dir);
    assert_eq!(value(&mut st, "refs/heads/c"), Some(ids[1]));
    let mut fresh = repo.open();
    assert_eq!(value(&mut fresh, "refs/heads/c"), Some(ids[1]));
    assert_eq!(value(&mut fresh, "refs/heads/a"), Some(ids[0]));
    assert_verifies(&dir);
    assert_eq!(
        repo.git(&["rev-parse", "refs/heads/c"]).trim(),
        ids[1].to_hex()
    );
}

#[test]
fn dir_fsync_failure_after_compaction_keeps_every_table() {
    let repo = Repo::new(HashKind::Sha1);
    let ids = repo.commits(3);
    let mut st = repo.open_with(|o| {
        o.fsync = true;
        o.auto_compact = false;
    });
    for (i, id) in ids.iter().enumerate() {
        commit_one(&mut st, &format!("refs/heads/b{i}"), *id).unwrap();
    }
    let dir = repo.reftable_dir();
    let before: Vec<String> = st.table_names().to_vec();
    // Record on a copy of the stack to find the step, then fail it on the real one.
    let copy = tempfile::tempdir().unwrap();
    for e in fs::read_dir(&dir).unwrap() {
        let e = e.unwrap();
        fs::copy(e.path(), copy.path().join(e.file_name())).unwrap();
    }
    let mut st2 = Stack::open(copy.path(), st.options().clone()).unwrap();
    let (r, steps) = fsio::record(|| st2.compact_all());
    assert!(r.unwrap());
    let at = step_of(&steps, Op::FsyncDir);
    let (r, _) = fsio::inject(at, libc::EIO, || st.compact_all());
    r.expect_err("the failed fsync is reported");
    listed_tables_exist(&dir);
    assert_eq!(st.table_names().len(), 1, "the stack was re-read");
    // Not known durable: the replaced tables are kept (clean removes them later).
    for name in &before {
        assert!(dir.join(name).exists(), "{name} removed before durability");
    }
    assert_verifies(&dir);
    let mut fresh = repo.open();
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(value(&mut fresh, &format!("refs/heads/b{i}")), Some(*id));
    }
    st.clean().unwrap();
    for name in &before {
        assert!(!dir.join(name).exists(), "clean removes {name}");
    }
}

#[test]
fn missing_tables_list_is_an_error_and_deletes_nothing() {
    let repo = Repo::new(HashKind::Sha1);
    let ids = repo.commits(1);
    let mut st = repo.open_with(|o| o.auto_compact = false);
    for i in 0..3 {
        commit_one(&mut st, &format!("refs/heads/b{i}"), ids[0]).unwrap();
    }
    let dir = repo.reftable_dir();
    let saved = repo.path().join("saved.list");
    fs::rename(dir.join("tables.list"), &saved).unwrap();
    let files_before = dir_listing(&dir);

    // The open stack: reload and writes fail, naming the file.
    let err = st.reload().expect_err("missing list is an error");
    assert!(err.to_string().contains("tables.list"), "{err}");
    assert!(err.to_string().contains("table(s)"), "{err}");
    let err = commit_one(&mut st, "refs/heads/new", ids[0]).expect_err("no write");
    assert!(err.to_string().contains("tables.list"), "{err}");
    assert!(st.compact_all().is_err());
    assert!(st.clean().is_err());
    // A new stack refuses to open.
    let err = Stack::open(&dir, StackOptions::default()).expect_err("no open");
    assert!(err.to_string().contains("tables.list"), "{err}");
    assert_eq!(dir_listing(&dir), files_before, "no table deleted");

    fs::rename(&saved, dir.join("tables.list")).unwrap();
    st.reload().unwrap();
    for i in 0..3 {
        assert_eq!(value(&mut st, &format!("refs/heads/b{i}")), Some(ids[0]));
    }
    assert_verifies(&dir);
    assert_eq!(repo.git_refs().len(), 3);
}

#[test]
fn unreadable_tables_list_is_an_error() {
    let repo = Repo::new(HashKind::Sha1);
    let ids = repo.commits(1);
    let mut st = repo.open();
    commit_one(&mut st, "refs/heads/a", ids[0]).unwrap();
    let dir = repo.reftable_dir();
    let list = dir.join("tables.list");
    let saved = repo.path().join("saved.list");
    fs::rename(&list, &saved).unwrap();
    fs::create_dir(&list).unwrap();
    let err = Stack::open(&dir, StackOptions::default()).expect_err("a directory is no list");
    assert!(err.to_string().contains("tables.list"), "{err}");
    fs::remove_dir(&list).unwrap();
    fs::rename(&saved, &list).unwrap();
    assert_eq!(value(&mut repo.open(), "refs/heads/a"), Some(ids[0]));
}

#[test]
fn fresh_directory_without_list_is_an_empty_stack() {
    let tmp = tempfile::tempdir().unwrap();
    let mut st = Stack::open(tmp.path(), StackOptions::default()).unwrap();
    assert!(st.table_names().is_empty());
    let id = ObjectId::from_bytes(&[1; 20]).unwrap();
    commit_one(&mut st, "refs/heads/a", id).unwrap();
    assert_eq!(value(&mut st, "refs/heads/a"), Some(id));
}

#[test]
fn table_changed_on_disk_is_reopened() {
    let repo = Repo::new(HashKind::Sha1);
    let ids = repo.commits(1);
    let mut st = repo.open_with(|o| o.auto_compact = false);
    commit_one(&mut st, "refs/heads/a", ids[0]).unwrap();
    let dir = repo.reftable_dir();
    let name = st.table_names().last().unwrap().clone();
    let path = dir.join(&name);
    let good = fs::read(&path).unwrap();
    // Flip one bit of the object id (the only place its bytes occur in the table).
    let pos = good
        .windows(20)
        .position(|w| w == ids[0].as_bytes())
        .expect("id in table");
    let mut bad = good.clone();
    bad[pos + 19] ^= 1;
    let mut flipped = ids[0].as_bytes().to_vec();
    flipped[19] ^= 1;
    let flipped = ObjectId::from_bytes(&flipped).unwrap();

    // Installed by rename (a new inode), then restored in place (same inode, new mtime).
    let tmp = dir.join("swap.tmp");
    fs::write(&tmp, &bad).unwrap();
    fs::rename(&tmp, &path).unwrap();
    st.reload_now().unwrap();
    assert_eq!(value(&mut st, "refs/heads/a"), Some(flipped));
    std::thread::sleep(std::time::Duration::from_millis(20));
    fs::write(&path, &good).unwrap();
    let gen = st.generation();
    st.reload_now().unwrap();
    assert_ne!(st.generation(), gen, "a changed table is a changed stack");
    assert_eq!(value(&mut st, "refs/heads/a"), Some(ids[0]));

    // reload() notices too, within the re-check interval.
    fs::write(&tmp, &bad).unwrap();
    fs::rename(&tmp, &path).unwrap();
    std::thread::sleep(reftablefs::stack::TABLE_RECHECK_INTERVAL);
    assert!(st.reload().unwrap());
    assert_eq!(value(&mut st, "refs/heads/a"), Some(flipped));
    fs::write(&path, &good).unwrap();
    std::thread::sleep(reftablefs::stack::TABLE_RECHECK_INTERVAL);
    assert!(st.reload().unwrap());
    assert_eq!(value(&mut st, "refs/heads/a"), Some(ids[0]));
    assert_verifies(&dir);
}

fn dir_listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn reftablefs(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_reftablefs"))
        .args(args)
        .output()
        .expect("reftablefs runs")
}

/// Leftovers of a `kill -9` during a compaction and during an addition: a stale
/// `tables.list.lock`, locks of a listed and of an unlisted table, a temporary table.
#[test]
fn unlock_removes_only_what_is_proven_stale() {
    let repo = Repo::new(HashKind::Sha1);
    let ids = repo.commits(1);
    let mut st = repo.open_with(|o| o.auto_compact = false);
    for i in 0..2 {
        commit_one(&mut st, &format!("refs/heads/b{i}"), ids[0]).unwrap();
    }
    let dir = repo.reftable_dir();
    let listed = st.table_names()[0].clone();
    let list_lock = dir.join("tables.list.lock");
    let listed_lock = dir.join(format!("{listed}.lock"));
    let unlisted_lock = dir.join("0x000000000009-0x000000000009-deadbeef.ref.lock");
    let temp = dir.join("0x000000000001-0x000000000002-0badf00d.temp.AbCdEf");
    for p in [&list_lock, &listed_lock, &unlisted_lock, &temp] {
        fs::write(p, b"").unwrap();
    }
    let git_dir = repo.path().join(".git");
    let git_dir = git_dir.to_str().unwrap();

    // A lock held open by a live process is never removed, even with --force.
    let holder = fs::File::open(&list_lock).unwrap();
    let out = reftablefs(&["unlock", "--force", git_dir]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("held open by pid"), "{text}");
    assert!(list_lock.exists());
    drop(holder);

    // Too young for the default --min-age: kept, and said so.
    let out = reftablefs(&["unlock", git_dir]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("--min-age"), "{text}");
    assert!(list_lock.exists());

    // Old enough: the list lock goes, then the unlisted table's lock; the listed table's
    // lock is young, so it stays and protects the temporary table.
    let out = reftablefs(&["unlock", "--min-age", "0", git_dir]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("removed"), "{text}");
    assert!(!list_lock.exists(), "{text}");
    assert!(!unlisted_lock.exists(), "{text}");
    // --min-age 0 makes the listed table's lock stale too, and then the temp table.
    assert!(!listed_lock.exists(), "{text}");
    assert!(!temp.exists(), "{text}");
    assert_eq!(out.status.code(), Some(0), "{text}");

    // Library: the automatic cleanup (no stale-lock age) keeps a listed table's lock and
    // the temporary table it may protect.
    fs::write(&listed_lock, b"").unwrap();
    fs::write(&temp, b"").unwrap();
    fs::write(&unlisted_lock, b"").unwrap();
    let rep = st.clean_orphans(None).unwrap();
    assert_eq!(rep.removed.len(), 1, "{rep:?}");
    assert!(!unlisted_lock.exists());
    assert!(listed_lock.exists() && temp.exists(), "{rep:?}");
    fs::remove_file(&listed_lock).unwrap();
    let rep = st.clean_orphans(None).unwrap();
    assert!(!temp.exists(), "{rep:?}");
    // Nothing listed was touched.
    listed_tables_exist(&dir);
    assert_verifies(&dir);
    assert_eq!(repo.git_refs().len(), 2);
}

// ----- tables.list written in place --------------------------------------------------
//
// git replaces tables.list by a rename and so tests only its `(dev, ino)`; a tool that
// appends a name to it (or rewrites it) in place keeps the inode. The stack must see such
// a list at its next reload, and never write a list it did not read under the lock.

/// `(dev, ino, size)` of `path`.
fn inode_of(path: &Path) -> (u64, u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let m = fs::metadata(path).unwrap();
    (m.dev(), m.ino(), m.size())
}

/// A copy of the reftable directory `dir` (every file), in a new temporary directory.
fn copy_stack(dir: &Path) -> tempfile::TempDir {
    let copy = tempfile::tempdir().unwrap();
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            fs::copy(e.path(), copy.path().join(e.file_name())).unwrap();
        }
    }
    copy
}

/// A valid next table for the stack in `dir` holding `name` → `id`: committed on a copy
/// of the stack, and copied back beside it (not listed). Returns its file name.
fn foreign_table(dir: &Path, opts: &StackOptions, name: &str, id: ObjectId) -> String {
    let copy = copy_stack(dir);
    let mut other = Stack::open(copy.path(), opts.clone()).unwrap();
    commit_one(&mut other, name, id).unwrap();
    let table = other.table_names().last().unwrap().clone();
    fs::copy(copy.path().join(&table), dir.join(&table)).unwrap();
    table
}

/// Appends `table` to `dir/tables.list` in place (same inode), as a foreign tool would.
fn append_in_place(dir: &Path, table: &str) {
    use std::io::Write;
    let list = dir.join("tables.list");
    let before = inode_of(&list);
    let mut f = fs::OpenOptions::new().append(true).open(&list).unwrap();
    f.write_all(format!("{table}\n").as_bytes()).unwrap();
    drop(f);
    let after = inode_of(&list);
    assert_eq!((before.0, before.1), (after.0, after.1), "same inode");
    assert!(after.2 > before.2);
}

fn listed(dir: &Path) -> Vec<String> {
    fs::read_to_string(dir.join("tables.list"))
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

#[test]
fn table_appended_to_the_list_in_place_is_seen_by_the_next_reload() {
    let repo = Repo::new(HashKind::Sha1);
    let ids = repo.commits(2);
    let mut st = repo.open_with(|o| o.auto_compact = false);
    commit_one(&mut st, "refs/heads/a", ids[0]).unwrap();
    let dir = repo.reftable_dir();
    let table = foreign_table(&dir, st.options(), "refs/heads/b", ids[1]);
    append_in_place(&dir, &table);

    assert!(!st.is_up_to_date().unwrap(), "the list grew in place");
    assert!(st.reload().unwrap(), "reload sees the appended table");
    assert_eq!(st.table_names().last(), Some(&table));
    assert_eq!(value(&mut st, "refs/heads/b"), Some(ids[1]));
    assert_eq!(value(&mut st, "refs/heads/a"), Some(ids[0]));
    assert!(st.is_up_to_date().unwrap());
    assert!(!st.reload().unwrap(), "and only once");
    // git 2.47 reads the same stack.
    assert_eq!(
        repo.git(&["rev-parse", "refs/heads/b"]).trim(),
        ids[1].to_hex()
    );
    repo.verify_integrity();
}

#[test]
fn list_rewritten_in_place_to_the_same_size_is_seen_by_the_next_reload() {
    let repo = Repo::new(HashKind::Sha1);
    let ids = repo.commits(3);
    let mut st = repo.open_with(|o| o.auto_compact = false);
    commit_one(&mut st, "refs/heads/a", ids[0]).unwrap();
    let dir = repo.reftable_dir();
    // The table that will replace the next one: same update index, another ref.
    let other = foreign_table(&dir, st.options(), "refs/heads/c", ids[2]);
    commit_one(&mut st, "refs/heads/b", ids[1]).unwrap();
    assert_eq!(value(&mut st, "refs/heads/b"), Some(ids[1]));
    let list = dir.join("tables.list");
    let old = fs::read(&list).unwrap();
    let mtime = fs::metadata(&list).unwrap().modified().unwrap();
    let mut names = listed(&dir);
    *names.last_mut().unwrap() = other.clone();
    let new = names.iter().map(|n| format!("{n}\n")).collect::<String>();
    assert_eq!(new.len(), old.len(), "table names have one length");
    assert_ne!(new.as_bytes(), &old[..]);

    // Rewritten in place, its mtime put back: only the content and the ctime differ.
    let before = inode_of(&list);
    let f = fs::OpenOptions::new().write(true).open(&list).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, new.as_bytes(), 0).unwrap();
    f.set_modified(mtime).unwrap();
    drop(f);
    assert_eq!(inode_of(&list), before, "same inode, same size");
    assert_eq!(fs::metadata(&list).unwrap().modified().unwrap(), mtime);

    assert!(st.reload().unwrap(), "reload sees the rewritten list");
    assert_eq!(st.table_names(), names.as_slice());
    assert_eq!(value(&mut st, "refs/heads/c"), Some(ids[2]));
    assert_eq!(value(&mut st, "refs/heads/b"), None);
    assert_eq!(
        repo.git(&["rev-parse", "refs/heads/c"]).trim(),
        ids[2].to_hex()
    );
    repo.verify_integrity();
}

#[test]
fn commit_after_an_in_place_append_keeps_the_appended_table() {
    for auto_compact in [false, true] {
        let repo = Repo::new(HashKind::Sha1);
        let ids = repo.commits(3);
        let mut st = repo.open_with(|o| o.auto_compact = auto_compact);
        commit_one(&mut st, "refs/heads/a", ids[0]).unwrap();
        let dir = repo.reftable_dir();
        let before = listed(&dir).len();
        let table = foreign_table(&dir, st.options(), "refs/heads/b", ids[1]);
        append_in_place(&dir, &table);
        // No reload: the commit itself must read the list under its lock.
        match commit_one(&mut st, "refs/heads/c", ids[2]) {
            Ok(()) => {}
            Err(e) => panic!("commit on an appended list (auto_compact {auto_compact}): {e}"),
        }
        if !auto_compact {
            let names = listed(&dir);
            assert!(names.contains(&table), "{table} dropped from {names:?}");
            assert_eq!(names.len(), before + 2, "{names:?}");
        }
        let refs = repo.git_refs();
        for (name, id) in [("a", ids[0]), ("b", ids[1]), ("c", ids[2])] {
            let want = (format!("refs/heads/{name}"), id.to_hex());
            assert!(
                refs.contains(&want),
                "auto_compact {auto_compact}: {want:?} not in {refs:?}"
            );
        }
        assert_eq!(value(&mut st, "refs/heads/b"), Some(ids[1]));
        listed_tables_exist(&dir);
        repo.verify_integrity();
    }
}

#[test]
fn compaction_after_an_in_place_append_keeps_the_appended_table() {
    let repo = Repo::new(HashKind::Sha1);
    let ids = repo.commits(3);
    let mut st = repo.open_with(|o| o.auto_compact = false);
    commit_one(&mut st, "refs/heads/a", ids[0]).unwrap();
    commit_one(&mut st, "refs/heads/c", ids[2]).unwrap();
    let dir = repo.reftable_dir();
    let table = foreign_table(&dir, st.options(), "refs/heads/b", ids[1]);
    append_in_place(&dir, &table);
    // The compaction was asked for on the stack as it was: it fails as outdated or
    // compacts what the list now holds, and never writes a list without the table.
    match st.compact_all() {
        Ok(_) => {}
        Err(reftablefs::Error::Outdated) => {
            assert!(listed(&dir).contains(&table));
            st.reload().unwrap();
            assert!(st.compact_all().unwrap());
        }
        Err(e) => panic!("compaction: {e}"),
    }
    assert_eq!(listed(&dir).len(), 1, "compacted");
    let refs = repo.git_refs();
    for (name, id) in [("a", ids[0]), ("b", ids[1]), ("c", ids[2])] {
        let want = (format!("refs/heads/{name}"), id.to_hex());
        assert!(refs.contains(&want), "{want:?} not in {refs:?}");
    }
    listed_tables_exist(&dir);
    repo.verify_integrity();
}

#[test]
fn a_list_written_in_place_under_a_held_lock_is_not_overwritten() {
    // A tool that ignores tables.list.lock appends while a transaction holds it: the
    // commit fails before writing its list (the list is read again before the rename),
    // and the appended table stays listed.
    let repo = Repo::new(HashKind::Sha1);
    let ids = repo.commits(3);
    let mut st = repo.open_with(|o| o.auto_compact = false);
    commit_one(&mut st, "refs/heads/a", ids[0]).unwrap();
    let dir = repo.reftable_dir();
    let before = listed(&dir).len();
    let table = foreign_table(&dir, st.options(), "refs/heads/b", ids[1]);
    let mut tx = st.transaction();
    tx.edit(RefEdit::update("refs/heads/c", ids[2]));
    let prepared = tx.prepare().unwrap();
    append_in_place(&dir, &table);
    let err = prepared
        .commit(&mut st)
        .expect_err("the list changed under the lock");
    assert!(matches!(err, reftablefs::Error::Outdated), "{err}");
    assert!(!dir.join("tables.list.lock").exists(), "lock released");
    let names = listed(&dir);
    assert_eq!(names.last(), Some(&table), "{names:?}");
    assert_eq!(names.len(), before + 1, "{names:?}");
    listed_tables_exist(&dir);
    // No temporary or unlisted new table left behind.
    let leftovers: Vec<String> = dir_listing(&dir)
        .into_iter()
        .filter(|n| n.contains(".temp.") || (n.ends_with(".ref") && !names.contains(n)))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // The next commit writes on top of it.
    commit_one(&mut st, "refs/heads/c", ids[2]).unwrap();
    assert_eq!(value(&mut st, "refs/heads/b"), Some(ids[1]));
    assert_eq!(value(&mut st, "refs/heads/c"), Some(ids[2]));
    repo.verify_integrity();
}
