//! Unit tests of the overlay and its commit points.

use super::*;
use crate::format::{HashKind, ObjectId, RefValue};
use crate::fs::source::{Conflict, MemSource};
use crate::fs::source::{LogSettings, RefSource};
use crate::fs::view::{self, Kind, Scratch};
use crate::transaction::Expected;

/// The caller of the staging calls in these tests.
const ME: Caller = Caller {
    pid: 0,
    handles: Vec::new(),
};

fn id(n: u8) -> ObjectId {
    ObjectId::from_bytes(&[n; 20]).unwrap()
}
fn hex(n: u8) -> String {
    format!("{:02x}", n).repeat(20)
}

fn setup() -> (MemSource, WriteState, Scratch) {
    let mut m = MemSource::new();
    m.set("HEAD", RefValue::Symref(b"refs/heads/main".to_vec()));
    m.set("refs/heads/main", RefValue::Val1(id(1)));
    m.set("refs/heads/topic", RefValue::Val1(id(2)));
    m.set("refs/tags/v1", RefValue::Val1(id(3)));
    (
        m,
        WriteState::new(HashKind::Sha1, LogSettings::default()),
        Scratch::default(),
    )
}

fn flush(w: &mut WriteState, m: &mut MemSource) -> usize {
    w.seal_all();
    let mut n = 0;
    while let Some(b) = w.queue().pop() {
        let out = m.commit(&b.edits).unwrap();
        let names: Vec<_> = out.conflicts.iter().map(|c| c.name.clone()).collect();
        w.batch_done(b.seq, &names);
        n += 1;
    }
    n
}

/// libgit2's stash: `git_reference_ensure_log` creates `logs/refs/stash` empty, then
/// appends to it. A batch written in between (a HEAD line of the previous command)
/// must not take the empty reflog with it.
#[test]
fn a_reflog_created_empty_outlives_the_batch_it_joined() {
    let (mut m, mut w, mut s) = setup();
    let line = format!(
        "{} {} A <a@b> 1700000000 +0000\treset: moving\n",
        hex(1),
        hex(2)
    );
    w.append_log(&ME, b"HEAD", line.as_bytes()).unwrap();
    w.note_new_log(&ME, b"refs/stash");
    assert_eq!(
        w.classify(&mut m, &mut s, b"logs/refs/stash").unwrap(),
        Some(Kind::Log)
    );
    flush(&mut w, &mut m);
    assert_eq!(
        w.classify(&mut m, &mut s, b"logs/refs/stash").unwrap(),
        Some(Kind::Log),
        "the empty reflog vanished with the batch"
    );
    let mut text = Vec::new();
    w.render_log(&mut m, b"refs/stash", &mut text).unwrap();
    assert!(text.is_empty(), "{text:?}");
    // Written as git's existence marker, once: a second creation adds nothing.
    let marker = |m: &MemSource| m.logs.keys().filter(|(n, _)| n == b"refs/stash").count();
    assert_eq!(marker(&m), 1);
    w.note_new_log(&ME, b"refs/stash");
    flush(&mut w, &mut m);
    assert_eq!(marker(&m), 1);
    // Deleted, then created again before the deletion is written: it exists, empty.
    w.delete_log(&ME, b"refs/stash");
    w.note_new_log(&ME, b"refs/stash");
    assert_eq!(
        w.classify(&mut m, &mut s, b"logs/refs/stash").unwrap(),
        Some(Kind::Log)
    );
    flush(&mut w, &mut m);
    assert_eq!(
        w.classify(&mut m, &mut s, b"logs/refs/stash").unwrap(),
        Some(Kind::Log)
    );
}

#[test]
fn rename_commit_is_read_your_writes_then_one_batch() {
    let (mut m, mut w, mut s) = setup();
    let v = w
        .parse_ref_content(format!("{}\n", hex(9)).as_bytes())
        .unwrap();
    w.commit_ref(&mut m, &ME, b"refs/heads/main", v.clone())
        .unwrap();
    w.commit_ref(&mut m, &ME, b"refs/heads/new/deep", RefValue::Val1(id(8)))
        .unwrap();
    assert_eq!(
        w.effective(&mut m, b"refs/heads/main").unwrap(),
        Some(v.clone())
    );
    assert_eq!(
        w.classify(&mut m, &mut s, b"refs/heads/new").unwrap(),
        Some(Kind::Dir)
    );
    // Nothing in the stack yet.
    assert_eq!(
        m.refs.get(&b"refs/heads/main"[..]),
        Some(&RefValue::Val1(id(1)))
    );
    assert_eq!(flush(&mut w, &mut m), 1);
    assert_eq!(m.commits, 1, "one table for the whole batch");
    assert_eq!(m.refs.get(&b"refs/heads/main"[..]), Some(&v));
    assert!(w.pending.is_empty());
    // As in the files backend, an update that came without a reflog line gets no
    // reflog entry.
    let mut logs = Vec::new();
    m.read_log(b"refs/heads/main", &mut logs).unwrap();
    assert!(logs.is_empty(), "invented reflog entry: {logs:?}");
}

#[test]
fn appended_reflog_line_becomes_the_updates_log() {
    let (mut m, mut w, _) = setup();
    let line = format!(
        "{} {} C O Mitter <c@o.m> 1700000000 +0100\tcommit: x\n",
        hex(1),
        hex(9)
    );
    w.append_log(&ME, b"refs/heads/main", line.as_bytes())
        .unwrap();
    w.commit_ref(&mut m, &ME, b"refs/heads/main", RefValue::Val1(id(9)))
        .unwrap();
    // HEAD's line comes after the rename, into the same batch.
    w.append_log(&ME, b"HEAD", line.as_bytes()).unwrap();
    assert_eq!(w.open.len(), 2);
    flush(&mut w, &mut m);
    let mut logs = Vec::new();
    m.read_log(b"refs/heads/main", &mut logs).unwrap();
    assert_eq!(logs.len(), 1);
    assert_eq!(logs[0].message, b"commit: x\n");
    assert_eq!(logs[0].tz_offset, 100);
    m.read_log(b"HEAD", &mut logs).unwrap();
    assert_eq!(logs.len(), 1);
    assert_eq!(
        logs[0].update_index,
        m.logs.keys().next().map(|k| !k.1).unwrap()
    );
}

#[test]
fn reflog_line_waits_across_windows_for_its_rename() {
    let (mut m, mut w, _) = setup();
    w.commit_ref(&mut m, &ME, b"refs/heads/topic", RefValue::Val1(id(4)))
        .unwrap();
    let line = format!(
        "{} {} C O Mitter <c@o.m> 1700000000 +0100\tcommit: y\n",
        hex(1),
        hex(9)
    );
    w.append_log(&ME, b"refs/heads/main", line.as_bytes())
        .unwrap();
    // Two windows pass before git's rename arrives: the line is carried, the rest goes.
    w.seal_for_window();
    w.seal_for_window();
    assert_eq!(w.queue().sealed_len(), 1);
    assert_eq!(w.open.len(), 1);
    w.commit_ref(&mut m, &ME, b"refs/heads/main", RefValue::Val1(id(9)))
        .unwrap();
    flush(&mut w, &mut m);
    let mut logs = Vec::new();
    m.read_log(b"refs/heads/main", &mut logs).unwrap();
    assert_eq!(logs.len(), 1, "one entry, the appended line: {logs:?}");
    assert_eq!(logs[0].message, b"commit: y\n");
    // A line whose rename never comes is written on its own after the wait.
    w.append_log(&ME, b"refs/heads/topic", line.as_bytes())
        .unwrap();
    std::thread::sleep(LINE_WAITS_FOR_RENAME);
    w.seal_for_window();
    assert!(w.open.is_empty());
}

#[test]
fn second_update_of_same_ref_starts_a_new_batch() {
    let (mut m, mut w, _) = setup();
    w.commit_ref(&mut m, &ME, b"refs/heads/main", RefValue::Val1(id(5)))
        .unwrap();
    w.commit_ref(&mut m, &ME, b"refs/heads/main", RefValue::Val1(id(6)))
        .unwrap();
    assert_eq!(w.queue().sealed_len(), 1);
    assert_eq!(flush(&mut w, &mut m), 2);
    assert_eq!(
        m.refs.get(&b"refs/heads/main"[..]),
        Some(&RefValue::Val1(id(6)))
    );
}

#[test]
fn bad_content_and_names_are_refused_with_nothing_staged() {
    let (mut m, mut w, _) = setup();
    for bad in [
        &b"zz\n"[..],
        b"",
        b"ref: ",
        b"ref: refs/heads/a..b\n",
        &[b'a'; 39],
    ] {
        let e = w.parse_ref_content(bad).unwrap_err();
        assert_eq!(e.errno, libc::EINVAL, "{bad:?}");
    }
    let e = w
        .commit_ref(&mut m, &ME, b"refs/heads/a..b", RefValue::Val1(id(1)))
        .unwrap_err();
    assert_eq!(e.errno, libc::EINVAL);
    // D/F: refs/heads/main is a ref, so refs/heads/main/x cannot be created.
    let e = w
        .commit_ref(&mut m, &ME, b"refs/heads/main/x", RefValue::Val1(id(1)))
        .unwrap_err();
    assert_eq!(e.errno, libc::ENOTDIR);
    // And refs/heads cannot become a ref.
    let e = w
        .commit_ref(&mut m, &ME, b"refs/heads", RefValue::Val1(id(1)))
        .unwrap_err();
    assert_eq!(e.errno, libc::EISDIR);
    let e = w
        .append_log(&ME, b"refs/heads/main", b"garbage\n")
        .unwrap_err();
    assert_eq!(e.errno, libc::EINVAL);
    assert!(w.open.is_empty() && w.pending.is_empty() && w.pending_logs.is_empty());
}

/// pack-refs writes an annotated tag with its `^peeled` line while the stack holds the
/// tag without a peeled id (it came in through a lock file): another writer's commit
/// (a revalidation) must keep the packed entry, and the prune's unlink must keep the
/// tag. Dropping the entry there turned the prune into a deletion of an acknowledged
/// ref.
#[test]
fn prune_keeps_an_annotated_tag_packed_with_its_peeled_id() {
    let (mut m, mut w, _s) = setup();
    let packed = format!(
        "# pack-refs with: peeled fully-peeled sorted \n{} refs/tags/v1\n^{}\n",
        hex(3),
        hex(9)
    );
    w.commit_packed_refs(&mut m, &ME, packed.as_bytes())
        .unwrap();
    w.revalidate_packed(&mut m);
    w.unlink_ref(&mut m, &ME, b"refs/tags/v1").unwrap();
    assert!(w.open.is_empty(), "prune staged edits: {:?}", w.open.edits);
    flush(&mut w, &mut m);
    assert_eq!(
        m.refs.get(&b"refs/tags/v1"[..]),
        Some(&RefValue::Val1(id(3)))
    );
}

#[test]
fn pack_refs_all_prune_changes_nothing_but_rm_still_deletes() {
    let (mut m, mut w, mut s) = setup();
    let packed = format!(
        "# pack-refs with: peeled fully-peeled sorted \n{} refs/heads/main\n{} refs/heads/topic\n{} refs/tags/v1\n",
        hex(1), hex(2), hex(3)
    );
    w.commit_packed_refs(&mut m, &ME, packed.as_bytes())
        .unwrap();
    let mut out = Vec::new();
    w.render_packed(&mut out);
    assert_eq!(out, packed.as_bytes());
    for n in ["refs/heads/main", "refs/heads/topic", "refs/tags/v1"] {
        w.unlink_ref(&mut m, &ME, n.as_bytes()).unwrap();
    }
    assert!(
        w.open.is_empty(),
        "pack + prune staged edits: {:?}",
        w.open.edits
    );
    assert_eq!(flush(&mut w, &mut m), 0);
    assert_eq!(m.refs.len(), 4);
    // Every ref still shows as a loose file; the packed entries were consumed.
    assert_eq!(
        w.classify(&mut m, &mut s, b"refs/heads/topic").unwrap(),
        Some(Kind::Ref)
    );
    w.render_packed(&mut out);
    assert_eq!(out, view::PACKED_REFS_HEADER);
    // So a plain rm deletes.
    w.unlink_ref(&mut m, &ME, b"refs/heads/topic").unwrap();
    flush(&mut w, &mut m);
    assert!(!m.refs.contains_key(&b"refs/heads/topic"[..]));
    // git's delete of a packed + loose ref: packed-refs rewritten without it, then
    // the loose file unlinked.
    w.commit_packed_refs(&mut m, &ME, packed.as_bytes())
        .unwrap();
    assert!(
        m.refs.contains_key(&b"refs/heads/topic"[..])
            || w.pending.contains_key(&b"refs/heads/topic"[..])
    );
    let without = format!(
        "# pack-refs with: peeled fully-peeled sorted \n{} refs/heads/main\n{} refs/tags/v1\n",
        hex(1),
        hex(3)
    );
    w.commit_packed_refs(&mut m, &ME, without.as_bytes())
        .unwrap();
    w.unlink_ref(&mut m, &ME, b"refs/heads/topic").unwrap();
    flush(&mut w, &mut m);
    assert!(!m.refs.contains_key(&b"refs/heads/topic"[..]));
    assert_eq!(
        m.refs.get(&b"refs/heads/main"[..]),
        Some(&RefValue::Val1(id(1)))
    );
}

#[test]
fn plain_rm_without_pack_deletes() {
    let (mut m, mut w, _) = setup();
    w.unlink_ref(&mut m, &ME, b"refs/heads/topic").unwrap();
    assert_eq!(w.effective(&mut m, b"refs/heads/topic").unwrap(), None);
    flush(&mut w, &mut m);
    assert!(!m.refs.contains_key(&b"refs/heads/topic"[..]));
}

#[test]
fn concurrent_writer_conflict_is_reported_not_applied() {
    let (mut m, mut w, _) = setup();
    w.commit_ref(&mut m, &ME, b"refs/heads/topic", RefValue::Val1(id(7)))
        .unwrap();
    m.set("refs/heads/topic", RefValue::Val1(id(6))); // git wins the race
    w.seal_all();
    let b = w.queue().pop().unwrap();
    let out = m.commit(&b.edits).unwrap();
    assert_eq!(
        out.conflicts,
        vec![Conflict {
            name: b"refs/heads/topic".to_vec(),
            expected: Expected::Oid(id(2)),
            found: Some(RefValue::Val1(id(6)))
        }]
    );
    w.batch_done(b.seq, &[b"refs/heads/topic".to_vec()]);
    assert_eq!(
        w.effective(&mut m, b"refs/heads/topic").unwrap(),
        Some(RefValue::Val1(id(6)))
    );
}

#[test]
fn listing_overlays_pending_scratch_and_vdirs() {
    let (mut m, mut w, mut s) = setup();
    w.files.insert(b"refs/heads/main.lock".to_vec(), Vec::new());
    w.vdirs.insert(b"refs/heads/empty".to_vec());
    w.commit_ref(&mut m, &ME, b"refs/heads/zz", RefValue::Val1(id(4)))
        .unwrap();
    w.unlink_ref(&mut m, &ME, b"refs/heads/topic").unwrap();
    let mut stack = Vec::new();
    view::list_dir(&mut m, &mut s, b"refs/heads", &mut stack).unwrap();
    let mut out = Vec::new();
    w.overlay_listing(&mut m, &mut s, b"refs/heads", &stack, &mut out)
        .unwrap();
    let got: Vec<(String, Kind)> = out
        .iter()
        .map(|e| (String::from_utf8_lossy(&e.name).into_owned(), e.kind))
        .collect();
    assert_eq!(
        got,
        vec![
            ("empty".into(), Kind::Dir),
            ("main".into(), Kind::Ref),
            ("main.lock".into(), Kind::Scratch),
            ("zz".into(), Kind::Ref)
        ]
    );
}

#[test]
fn reflog_replace_and_delete() {
    let (mut m, mut w, mut s) = setup();
    let text = format!(
        "{} {} A <a@b> 1700000000 +0000\tone\n{} {} A <a@b> 1700000001 +0000\ttwo\n",
        hex(0),
        hex(1),
        hex(1),
        hex(2)
    );
    let recs = w.parse_log_text(text.as_bytes()).unwrap();
    w.replace_log(&ME, b"refs/heads/topic", recs);
    let mut out = Vec::new();
    w.render_log(&mut m, b"refs/heads/topic", &mut out).unwrap();
    assert_eq!(
        String::from_utf8(out.clone()).unwrap(),
        text.replace(&hex(0), &"0".repeat(40))
    );
    flush(&mut w, &mut m);
    w.render_log(&mut m, b"refs/heads/topic", &mut out).unwrap();
    assert_eq!(String::from_utf8(out.clone()).unwrap(), text);
    // Rewritten to nothing (reflog expire, stash pop of the last entry): the reflog
    // stays, empty, before and after the batch.
    w.replace_log(&ME, b"refs/heads/topic", Vec::new());
    for _ in 0..2 {
        assert_eq!(
            w.classify(&mut m, &mut s, b"logs/refs/heads/topic")
                .unwrap(),
            Some(Kind::Log)
        );
        w.render_log(&mut m, b"refs/heads/topic", &mut out).unwrap();
        assert!(out.is_empty());
        flush(&mut w, &mut m);
    }
    // Only removing the reflog file deletes it.
    w.delete_log(&ME, b"refs/heads/topic");
    for _ in 0..2 {
        assert_eq!(
            w.classify(&mut m, &mut s, b"logs/refs/heads/topic")
                .unwrap(),
            None
        );
        flush(&mut w, &mut m);
    }
}

#[test]
fn deleting_a_ref_keeps_its_reflog() {
    let (mut m, mut w, mut s) = setup();
    let line = format!("{} {} A <a@b> 1700000000 +0000\tone\n", hex(0), hex(2));
    w.append_log(&ME, b"refs/heads/topic", line.as_bytes())
        .unwrap();
    flush(&mut w, &mut m);
    w.unlink_ref(&mut m, &ME, b"refs/heads/topic").unwrap();
    flush(&mut w, &mut m);
    assert!(!m.refs.contains_key(&b"refs/heads/topic"[..]));
    assert_eq!(
        w.classify(&mut m, &mut s, b"logs/refs/heads/topic")
            .unwrap(),
        Some(Kind::Log),
        "unlinking a ref deleted its reflog (libgit2's branch rename moves it after)"
    );
    let mut out = Vec::new();
    w.render_log(&mut m, b"refs/heads/topic", &mut out).unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        line.replace(&hex(0), &"0".repeat(40))
    );
}

#[test]
fn no_invented_entries_and_late_lines_are_the_only_entry() {
    let (mut m, mut w, _) = setup();
    // A shell: `mv x.lock x` with no line: no entry.
    w.commit_ref(&mut m, &ME, b"refs/heads/topic", RefValue::Val1(id(7)))
        .unwrap();
    // GitPython: lock + rename, then the line.
    w.commit_ref(&mut m, &ME, b"refs/heads/main", RefValue::Val1(id(8)))
        .unwrap();
    let line = format!("{} {} A <a@b> 1700000000 +0000\tlate\n", hex(1), hex(8));
    w.append_log(&ME, b"refs/heads/main", line.as_bytes())
        .unwrap();
    // A HEAD line for HEAD's referent's update is HEAD's entry, as written.
    let head = format!("{} {} A <a@b> 1700000000 +0000\tto dev\n", hex(1), hex(8));
    w.append_log(&ME, b"HEAD", head.as_bytes()).unwrap();
    flush(&mut w, &mut m);
    let mut logs = Vec::new();
    m.read_log(b"refs/heads/topic", &mut logs).unwrap();
    assert!(logs.is_empty(), "{logs:?}");
    m.read_log(b"refs/heads/main", &mut logs).unwrap();
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert_eq!(logs[0].message, b"late\n");
    m.read_log(b"HEAD", &mut logs).unwrap();
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert_eq!(logs[0].message, b"to dev\n");
}

#[test]
fn a_lock_expects_the_value_it_saw() {
    let (mut m, mut w, _) = setup();
    w.note_lock(&mut m, b"refs/heads/topic.lock").unwrap();
    // Unchanged: the rename goes through.
    w.check_lock_base(&mut m, b"refs/heads/topic.lock").unwrap();
    // Another writer changes the ref under the lock: the rename fails.
    m.set("refs/heads/topic", RefValue::Val1(id(6)));
    let e = w
        .check_lock_base(&mut m, b"refs/heads/topic.lock")
        .unwrap_err();
    assert_eq!(e.errno, libc::EBUSY);
    // A change through the mount itself (a client ignoring the lock) is overwritten
    // by the rename, as on disk.
    w.locks.clear();
    w.note_lock(&mut m, b"refs/heads/topic.lock").unwrap();
    w.commit_ref(&mut m, &ME, b"refs/heads/topic", RefValue::Val1(id(5)))
        .unwrap();
    w.check_lock_base(&mut m, b"refs/heads/topic.lock").unwrap();
}

/// Two clients through the mount and git on the stack incrementing one counter: B's
/// pending k+1 is what A's lock sees; git moves the stack from k to k+2; B's batch
/// conflicts and its pending value goes, so the view shows git's k+2 with no reload.
/// A, which read k+1, renames k+2: that is not a no-op to acknowledge but a change
/// under A's lock (the increment would be lost while A is told it succeeded).
#[test]
fn a_lock_sees_a_failed_batch_s_value_go() {
    let (mut m, mut w, _) = setup();
    w.commit_ref(&mut m, &ME, b"refs/heads/topic", RefValue::Val1(id(3)))
        .unwrap();
    w.seal_all();
    m.set("refs/heads/topic", RefValue::Val1(id(4)));
    w.note_lock(&mut m, b"refs/heads/topic.lock").unwrap();
    flush(&mut w, &mut m);
    assert_eq!(
        w.effective(&mut m, b"refs/heads/topic").unwrap(),
        Some(RefValue::Val1(id(4)))
    );
    let e = w
        .check_lock_base(&mut m, b"refs/heads/topic.lock")
        .unwrap_err();
    assert_eq!(e.errno, libc::EBUSY);
}

#[test]
fn ref_content_prefixes() {
    let h = HashKind::Sha1;
    for ok in [
        &b""[..],
        b"0123",
        b"ref",
        b"ref:",
        b"ref: refs/heads/x",
        b"ref: refs/heads/x\n",
        b"e",
    ] {
        assert!(ref_content_prefix_ok(ok, h).is_ok(), "{ok:?}");
    }
    let full = format!("{}\n", hex(3));
    assert!(ref_content_prefix_ok(full.as_bytes(), h).is_ok());
    for bad in [
        &b"garbage\n"[..],
        b"xyz",
        b"ref: a b",
        b"ref: refs/heads/a\nb",
        b"ref: refs/heads/a:b",
    ] {
        assert!(ref_content_prefix_ok(bad, h).is_err(), "{bad:?}");
    }
    let long = format!("{}0", hex(3));
    assert!(ref_content_prefix_ok(long.as_bytes(), h).is_err());
    // The null id: fine while incomplete, refused once complete.
    let zeros = "0".repeat(40);
    assert!(ref_content_prefix_ok(&zeros.as_bytes()[..39], h).is_ok());
    assert!(ref_content_prefix_ok(zeros.as_bytes(), h).is_err());
    assert!(ref_content_prefix_ok(format!("{zeros}\n").as_bytes(), h).is_err());
}
