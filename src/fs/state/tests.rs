//! Unit tests of the ref view's state.

use super::*;
use crate::format::ObjectId;
use crate::format::RefValue;
use crate::fs::budget::STAGED_BYTES_MAX;
use crate::fs::ino::ROOT;
use crate::fs::inode::OpenMode;
use crate::fs::source::{BatchEdit, MemSource, RefSource, RefWriter, SharedMem};
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Duration;

fn oid(b: u8) -> RefValue {
    RefValue::Val1(ObjectId::from_bytes(&[b; 20]).expect("sha-1 id"))
}

/// A view of `mem` (`read_only`: whether writes are refused) whose batches wait
/// `window` or hold `max` edits.
fn view(
    mem: impl RefSource + 'static,
    read_only: bool,
    window: Duration,
    max: usize,
) -> Arc<Shared> {
    Shared::new(
        Box::new(mem),
        read_only,
        LogSettings::default(),
        BatchSettings { window, max },
    )
}

/// Takes the lock `dir/name` (made exclusively) and closes it.
fn take_lock(shared: &Shared, dir: u64, name: &[u8]) {
    let flags = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY;
    let (_, fh) = shared
        .create(dir, name, flags, std::process::id())
        .expect("lock");
    shared.release(fh);
}

/// A reflog created in place (`open(logs/x, O_CREAT|O_APPEND)`) is staged for the
/// process that created it, through the file it opened: if its batch fails, that
/// process's `fsync` and that file's `close` are told (it was staged under whichever
/// process the previous request served).
#[test]
fn a_created_reflog_is_staged_for_its_creator() {
    let mut mem = MemSource::new();
    mem.set("refs/heads/x", oid(1));
    mem.add_log(crate::format::LogRecord {
        refname: b"refs/heads/y".to_vec(),
        update_index: 1,
        ..Default::default()
    });
    let shared = view(mem, false, Duration::from_secs(60), 1000);
    let me = std::process::id();
    let logs = shared.lookup(ROOT, b"logs").expect("logs").0.ino.0;
    let refs = shared.lookup(logs, b"refs").expect("refs").0.ino.0;
    let heads = shared.lookup(refs, b"heads").expect("heads").0.ino.0;
    // Another process's request first.
    let _ = shared.unlink(heads, b"nothing", 1);
    let (_, fh) = shared
        .create(
            heads,
            b"x",
            libc::O_CREAT | libc::O_WRONLY | libc::O_APPEND,
            me,
        )
        .expect("create the reflog");
    let tgid = shared.tgid(me);
    let g = shared.lock();
    let e =
        g.w.open
            .edits
            .iter()
            .find(|e| e.name == b"refs/heads/x")
            .expect("the creation is staged");
    assert_eq!(e.pids, vec![tgid]);
    assert_eq!(e.handles, vec![fh]);
}

/// Staging waits, holding no lock, while the edits staged and not yet written are
/// over the bound (`budget.rs`), and goes on once the batcher has written them.
#[test]
fn staging_waits_while_too_much_is_staged() {
    let shared = view(MemSource::new(), false, Duration::from_millis(1), 1);
    shared.staged.store(STAGED_BYTES_MAX, Ordering::Relaxed);
    let s2 = shared.clone();
    let t = std::thread::spawn(move || s2.wait_staging_room());
    std::thread::sleep(Duration::from_millis(300));
    assert!(!t.is_finished(), "staging went on past the bound");
    // The state lock is free meanwhile.
    drop(shared.lock());
    shared.staged.store(0, Ordering::Relaxed);
    t.join().expect("the waiter");
}

/// The pages of a ref file are kept by an open only when the last page fill answered
/// exactly the content that open serves. An open that drops them (`Refill`) records
/// nothing: the kernel drops them only after its reply, so an open answered `Cached`
/// meanwhile would read the old page (issue 23's stale read after a lock). A fill by
/// a handle opened before a change serves the ref as it is now, so a later opener
/// never reads an older value from the page; an O_DIRECT read fills no page.
#[test]
fn pages_are_kept_only_for_the_content_last_filled() {
    // The store, also written by another writer.
    let mut mem: SharedMem = Arc::new(Mutex::new(MemSource::new()));
    mem.lock().unwrap().set("refs/heads/x", oid(1));
    let shared = view(mem.clone(), true, Duration::from_millis(1), 1);
    let refs = shared.lookup(ROOT, b"refs").expect("refs").0.ino.0;
    let heads = shared.lookup(refs, b"heads").expect("heads").0.ino.0;
    let (a, _, cached) = shared.lookup(heads, b"x").expect("x");
    assert!(cached, "a ref file of one page has a fixed size");
    let ino = a.ino.0;
    let rendered = |v: &RefValue| {
        let mut out = Vec::new();
        view::render_ref(v, &mut out);
        out
    };
    let mut commit = |edit: BatchEdit| mem.commit(&[edit]).expect("commit");
    let mut set = |from: u8, to: u8| {
        let edit = BatchEdit {
            name: b"refs/heads/x".to_vec(),
            new: Some(oid(to)),
            expected_old: Some(oid(from)),
            ..BatchEdit::default()
        };
        commit(edit);
    };
    // Opens the ref file, the kernel told `want` (`why`): the handle.
    let open = |want: OpenMode, why: &str| {
        let (fh, mode) = shared.open(ino, libc::O_RDONLY).expect("open");
        assert_eq!(mode, want, "{why}");
        fh
    };
    let open_close = |want: OpenMode, why: &str| shared.release(open(want, why));
    // What a page fill (or, `direct`, an O_DIRECT read) through handle `fh` serves.
    let read = |fh: u64, direct: bool| shared.read_file(ino, fh, 0, 4096, direct).expect("read");
    let old_fh = open(OpenMode::Refill, "nothing filled yet");
    let fh = open(OpenMode::Refill, "a refill records nothing");
    assert_eq!(read(fh, false), rendered(&oid(1)));
    shared.release(fh);
    open_close(OpenMode::Cached, "the page holds this content now");
    // Another writer: same size, other content.
    set(1, 2);
    let new_fh = open(OpenMode::Refill, "other content drops the pages");
    // The race: before any fill, a second open must drop the pages too (the first
    // open's drop may not have happened yet in the kernel).
    let second = open(OpenMode::Refill, "no fill of the new content yet");
    // The old handle's fill serves the ref as it is now, not its snapshot.
    assert_eq!(read(old_fh, false), rendered(&oid(2)));
    open_close(
        OpenMode::Cached,
        "the old handle's fill holds the content now",
    );
    // An O_DIRECT read fills no page: it records nothing.
    set(2, 3);
    assert_eq!(read(second, true), rendered(&oid(3)));
    open_close(OpenMode::Refill, "the page may still hold the old content");
    // A direct-IO handle (fixed size no longer matching: a longer value) keeps its
    // snapshot; a page-cache handle whose ref changed size fills from its snapshot.
    let sym = RefValue::Symref(b"refs/heads/a-much-longer-target-name".to_vec());
    let edit = BatchEdit {
        name: b"refs/heads/x".to_vec(),
        new: Some(sym),
        expected_old: Some(oid(3)),
        ..BatchEdit::default()
    };
    commit(edit);
    assert_eq!(
        read(new_fh, false),
        rendered(&oid(2)),
        "a page-cache handle of the old size serves its snapshot"
    );
    shared.release(second);
    shared.release(new_fh);
    shared.release(old_fh);
}

/// A view over refs `refs/remotes/origin/b0000…` (each with a reflog) with a long batch
/// window (nothing is written: the overlay holds every edit).
fn remotes(n: usize) -> Arc<Shared> {
    let mut mem = MemSource::new();
    mem.set("HEAD", RefValue::Symref(b"refs/heads/main".to_vec()));
    for i in 0..n {
        let name = format!("refs/remotes/origin/b{i:04}");
        mem.set(&name, oid(1));
        mem.add_log(crate::format::LogRecord {
            refname: name.into_bytes(),
            update_index: 1,
            name: b"N".to_vec(),
            email: b"e".to_vec(),
            time: 5,
            ..Default::default()
        });
    }
    view(mem, false, Duration::from_secs(60), 100_000)
}

/// The inode of `path` (each component looked up).
fn walk(shared: &Shared, path: &str) -> u64 {
    path.split('/').fold(ROOT, |dir, name| {
        shared.lookup(dir, name.as_bytes()).expect(path).0.ino.0
    })
}

/// git's `rmdir` after each deletion (of the ref's directory and of its reflog's) tells
/// a directory that is not empty without a listing: 200 deletions in a directory of 3,000
/// make none (each made one of the whole directory).
#[test]
fn rmdir_after_a_deletion_makes_no_listing() {
    let shared = remotes(3000);
    let remotes_dir = walk(&shared, "refs/remotes");
    let origin = walk(&shared, "refs/remotes/origin");
    let logs_remotes = walk(&shared, "logs/refs/remotes");
    let logs_origin = walk(&shared, "logs/refs/remotes/origin");
    let before = shared.lock().listings;
    for i in 0..200 {
        let name = format!("b{:04}", i * 7);
        shared
            .unlink(origin, name.as_bytes(), 1)
            .expect("unlink ref");
        shared
            .unlink(logs_origin, name.as_bytes(), 1)
            .expect("unlink reflog");
        for (dir, what) in [(remotes_dir, "refs"), (logs_remotes, "logs")] {
            match shared.rmdir(dir, b"origin") {
                Err(e) if e.errno() == libc::ENOTEMPTY => {}
                other => panic!("rmdir of {what}/…/origin: {other:?}"),
            }
        }
    }
    assert_eq!(shared.lock().listings, before, "rmdir made listings");
}

/// `rmdir` as on disk: a directory `mkdir` made is removed when empty (not with a lock
/// in it); one whose last name went while the kernel held it is gone already, and its
/// `rmdir` succeeds; `refs` and `logs` are removed when empty, then gone until made
/// again or until something appears below them.
#[test]
fn rmdir_removes_what_is_empty() {
    let shared = remotes(2);
    let me = std::process::id();
    let origin = walk(&shared, "refs/remotes/origin");
    let made = shared.mkdir(origin, b"new").expect("mkdir").ino.0;
    take_lock(&shared, made, b"x.lock");
    let errno = |r: Result<(), FsError>| r.err().map(|e| e.errno());
    assert_eq!(errno(shared.rmdir(origin, b"new")), Some(libc::ENOTEMPTY));
    shared.unlink(made, b"x.lock", me).expect("unlink lock");
    assert_eq!(errno(shared.rmdir(origin, b"new")), None);
    assert!(shared.lookup(origin, b"new").is_err());
    // Emptied while held: gone, and rmdir says so as a files backend would.
    assert_eq!(errno(shared.rmdir(ROOT, b"logs")), Some(libc::ENOTEMPTY));
    let logs_origin = walk(&shared, "logs/refs/remotes/origin");
    let logs_remotes = walk(&shared, "logs/refs/remotes");
    let remotes_dir = walk(&shared, "refs/remotes");
    for b in [&b"b0000"[..], b"b0001"] {
        shared.unlink(origin, b, me).expect("unlink ref");
        shared.unlink(logs_origin, b, me).expect("unlink reflog");
    }
    assert_eq!(errno(shared.rmdir(logs_remotes, b"origin")), None);
    assert_eq!(errno(shared.rmdir(remotes_dir, b"origin")), None);
    // `logs` is empty: removed, not listed, made again; so is `refs`.
    assert_eq!(errno(shared.rmdir(ROOT, b"logs")), None);
    assert!(shared.lookup(ROOT, b"logs").is_err());
    let fh = shared.opendir(ROOT).expect("opendir");
    let shown = shared.with_handle(fh, |h| match h {
        Some(Handle::Dir { entries, .. }) => entries.to_entries(),
        _ => Vec::new(),
    });
    assert!(!shown.iter().any(|e| &*e.name == b"logs"), "{shown:?}");
    assert!(shown.iter().any(|e| &*e.name == b"refs"), "{shown:?}");
    shared.mkdir(ROOT, b"logs").expect("mkdir logs");
    assert_eq!(
        shared.lookup(ROOT, b"logs").expect("logs again").1,
        Kind::Dir
    );
    assert_eq!(errno(shared.rmdir(ROOT, b"refs")), None);
    assert!(shared.lookup(ROOT, b"refs").is_err());
}

/// A directory's time moves when a name appears in it or goes from it, and only then:
/// not when the view changes elsewhere or later (a batch written after the update), not
/// for the directory above. Never back.
#[test]
fn a_directory_time_moves_with_its_entries_only() {
    let shared = remotes(3);
    let me = std::process::id();
    let origin = walk(&shared, "refs/remotes/origin");
    let remotes_dir = walk(&shared, "refs/remotes");
    let time = |ino: u64| shared.getattr(ino).expect("getattr").0.ctime;
    let (o0, r0) = (time(origin), time(remotes_dir));
    // The view changes later (the batch is written): the times stay.
    shared.lock().changed_at = SystemTime::now() + Duration::from_secs(3600);
    assert_eq!((time(origin), time(remotes_dir)), (o0, r0));
    take_lock(&shared, origin, b"b0000.lock");
    let o1 = time(origin);
    assert!(o1 > o0, "{o1:?} after {o0:?}");
    assert_eq!(time(remotes_dir), r0);
    shared
        .unlink(origin, b"b0000.lock", me)
        .expect("unlink lock");
    let o2 = time(origin);
    assert!(o2 > o1, "{o2:?} after {o1:?}");
    assert_eq!(time(remotes_dir), r0);
    // The last name of a directory goes: the directory goes, the one above changes.
    for b in [&b"b0000"[..], b"b0001", b"b0002"] {
        shared.unlink(origin, b, me).expect("unlink ref");
    }
    assert!(time(remotes_dir) > r0);
}

/// With the bytes held for clients full, the next lock can still be opened and its first
/// write is refused `EFBIG`, whether or not the kernel's RELEASE of the file that filled
/// them has arrived: content stops `OPEN_RESERVE` short of the budget (CI once saw
/// `ENOMEM` at the `open` instead, when that RELEASE came late).
#[test]
fn a_full_budget_refuses_the_write_not_the_next_open() {
    use crate::fs::budget::{HELD_BYTES_MAX, OPEN_RESERVE};
    let shared = view(MemSource::new(), false, Duration::from_secs(60), 1000);
    let me = std::process::id();
    // Another scratch file holds all but 2 MiB (an allocation never touched: no memory).
    shared.lock().w.files.insert(
        b"packed-refs.new".to_vec(),
        Vec::with_capacity(HELD_BYTES_MAX - 2 * OPEN_RESERVE),
    );
    let logs = shared.lookup(ROOT, b"logs").expect("logs").0.ino.0;
    let flags = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY;
    let (_, a) = shared.create(logs, b"a.lock", flags, me).expect("a.lock");
    // Fill the rest: 64 KiB writes until one is refused, then single bytes.
    let mut at = 0u64;
    for chunk in [&[b'x'; 64 << 10][..], b"x"] {
        while shared.write(a, at, chunk, 0, me).is_ok() {
            at += chunk.len() as u64;
        }
    }
    assert!(at > 0, "nothing was written");
    // a.lock is still open (its RELEASE not yet arrived): the next open is not refused.
    let (_, b) = shared
        .create(logs, b"b.lock", flags, me)
        .expect("the next lock opens");
    let e = shared
        .write(b, 0, b"x", 0, me)
        .expect_err("the budget is full");
    assert_eq!(e.errno(), libc::EFBIG);
    shared.release(b);
    shared.release(a);
}
