//! Unit tests of the ref view's state.

use super::*;
use crate::format::ObjectId;
use crate::format::RefValue;
use crate::fs::budget::STAGED_BYTES_MAX;
use crate::fs::ino::ROOT;
use crate::fs::inode::OpenMode;
use crate::fs::source::{BatchEdit, MemSource};
use std::sync::atomic::Ordering;
use std::time::Duration;

fn oid(b: u8) -> RefValue {
    RefValue::Val1(ObjectId::from_bytes(&[b; 20]).expect("sha-1 id"))
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
    let shared = Shared::new(
        Box::new(mem),
        false,
        LogSettings::default(),
        BatchSettings {
            window: Duration::from_secs(60),
            max: 1000,
        },
    );
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
    let shared = Shared::new(
        Box::new(MemSource::new()),
        false,
        LogSettings::default(),
        BatchSettings {
            window: Duration::from_millis(1),
            max: 1,
        },
    );
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
    let mut mem = MemSource::new();
    mem.set("refs/heads/x", oid(1));
    let shared = Shared::new(
        Box::new(mem),
        true,
        LogSettings::default(),
        BatchSettings {
            window: Duration::from_millis(1),
            max: 1,
        },
    );
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
    let set = |from: u8, to: u8| {
        let edit = BatchEdit {
            name: b"refs/heads/x".to_vec(),
            new: Some(oid(to)),
            expected_old: Some(oid(from)),
            ..BatchEdit::default()
        };
        shared.lock().src.commit(&[edit]).expect("commit");
    };
    let (old_fh, mode) = shared.open(ino, libc::O_RDONLY).expect("open");
    assert_eq!(mode, OpenMode::Refill, "nothing filled yet");
    let (fh, mode) = shared.open(ino, libc::O_RDONLY).expect("open");
    assert_eq!(mode, OpenMode::Refill, "a refill records nothing");
    assert_eq!(
        shared.read_file(ino, fh, 0, 4096, false).expect("read"),
        rendered(&oid(1))
    );
    shared.release(fh);
    let (fh, mode) = shared.open(ino, libc::O_RDONLY).expect("open");
    assert_eq!(mode, OpenMode::Cached, "the page holds this content now");
    shared.release(fh);
    // Another writer: same size, other content.
    set(1, 2);
    let (new_fh, mode) = shared.open(ino, libc::O_RDONLY).expect("open");
    assert_eq!(mode, OpenMode::Refill, "other content drops the pages");
    // The race: before any fill, a second open must drop the pages too (the first
    // open's drop may not have happened yet in the kernel).
    let (second, mode) = shared.open(ino, libc::O_RDONLY).expect("open");
    assert_eq!(mode, OpenMode::Refill, "no fill of the new content yet");
    // The old handle's fill serves the ref as it is now, not its snapshot.
    assert_eq!(
        shared.read_file(ino, old_fh, 0, 4096, false).expect("read"),
        rendered(&oid(2))
    );
    let (fh, mode) = shared.open(ino, libc::O_RDONLY).expect("open");
    assert_eq!(mode, OpenMode::Cached);
    shared.release(fh);
    // An O_DIRECT read fills no page: it records nothing.
    set(2, 3);
    assert_eq!(
        shared.read_file(ino, second, 0, 4096, true).expect("read"),
        rendered(&oid(3))
    );
    let (fh, mode) = shared.open(ino, libc::O_RDONLY).expect("open");
    assert_eq!(
        mode,
        OpenMode::Refill,
        "the page may still hold the old content"
    );
    shared.release(fh);
    // A direct-IO handle (fixed size no longer matching: a longer value) keeps its
    // snapshot; a page-cache handle whose ref changed size fills from its snapshot.
    let sym = RefValue::Symref(b"refs/heads/a-much-longer-target-name".to_vec());
    let edit = BatchEdit {
        name: b"refs/heads/x".to_vec(),
        new: Some(sym),
        expected_old: Some(oid(3)),
        ..BatchEdit::default()
    };
    shared.lock().src.commit(&[edit]).expect("commit");
    assert_eq!(
        shared.read_file(ino, new_fh, 0, 4096, false).expect("read"),
        rendered(&oid(2)),
        "a page-cache handle of the old size serves its snapshot"
    );
    shared.release(second);
    shared.release(new_fh);
    shared.release(old_fh);
}
