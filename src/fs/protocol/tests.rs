//! Unit tests of the overlay and its commit points.

use super::*;
use crate::format::{HashKind, ObjectId, RefValue};
use crate::fs::protocol::Layout;
use crate::fs::source::{Conflict, MemSource};
use crate::fs::source::{LogSettings, RefSource, RefWriter};
use crate::fs::test_support::assert_splits;
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

/// `packed-refs` as the view shows it now.
fn packed_text(w: &mut WriteState, m: &mut MemSource) -> String {
    String::from_utf8(w.packed_refs(m).unwrap().to_vec()).unwrap()
}

/// The value of `name` in the view: the pending edits over the stack.
fn value(w: &mut WriteState, m: &mut MemSource, name: &str) -> Option<RefValue> {
    w.effective(m, name.as_bytes()).unwrap()
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
    // Created empty: a reflog before its batch is written and after.
    let create = |w: &mut WriteState, m: &mut MemSource, s: &mut Scratch| {
        w.note_new_log(&ME, b"refs/stash");
        let before = w.classify(m, s, b"logs/refs/stash").unwrap();
        flush(w, m);
        let after = w.classify(m, s, b"logs/refs/stash").unwrap();
        let log = Some(Kind::Log);
        assert_eq!((before, after), (log, log), "the empty reflog vanished");
    };
    create(&mut w, &mut m, &mut s);
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
    create(&mut w, &mut m, &mut s);
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
    assert_eq!(value(&mut w, &mut m, "refs/heads/main"), Some(v.clone()));
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
    let (mut m, mut w, mut s) = setup();
    let packed = format!(
        "# pack-refs with: peeled fully-peeled sorted \n{} refs/tags/v1\n^{}\n",
        hex(3),
        hex(9)
    );
    w.commit_packed_refs(&mut m, &ME, packed.as_bytes(), None)
        .unwrap();
    w.revalidate_packed(&mut m);
    w.unlink_ref(&mut m, &ME, b"refs/tags/v1").unwrap();
    assert!(w.open.is_empty(), "prune staged edits: {:?}", w.open.edits);
    flush(&mut w, &mut m);
    assert_eq!(
        m.refs.get(&b"refs/tags/v1"[..]),
        Some(&RefValue::Val1(id(3)))
    );
    // Packed only now, with its peeled line.
    assert_eq!(w.classify(&mut m, &mut s, b"refs/tags/v1").unwrap(), None);
    assert_eq!(packed_text(&mut w, &mut m), packed);
}

/// `git pack-refs --all --prune` as the files backend makes it: the refs are packed only
/// afterwards (no loose file, no stack change), a plain `rm` of one finds no file, a ref
/// written later is loose again, and deleting a packed-only ref is a rewrite of
/// `packed-refs` without it, which deletes it from the stack.
#[test]
fn pack_refs_all_prune_leaves_refs_packed_only() {
    let (mut m, mut w, mut s) = setup();
    let packed = format!(
        "# pack-refs with: peeled fully-peeled sorted \n{} refs/heads/main\n{} refs/heads/topic\n{} refs/tags/v1\n",
        hex(1), hex(2), hex(3)
    );
    w.commit_packed_refs(&mut m, &ME, packed.as_bytes(), None)
        .unwrap();
    assert_eq!(packed_text(&mut w, &mut m), packed);
    // Packed and loose: still files until pruned.
    assert_eq!(
        w.classify(&mut m, &mut s, b"refs/heads/topic").unwrap(),
        Some(Kind::Ref)
    );
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
    for n in ["refs/heads/main", "refs/heads/topic", "refs/tags/v1"] {
        assert_eq!(
            w.classify(&mut m, &mut s, n.as_bytes()).unwrap(),
            None,
            "{n}"
        );
        assert!(w.effective(&mut m, n.as_bytes()).unwrap().is_some(), "{n}");
    }
    // Directories only where a loose ref lives.
    assert_eq!(w.classify(&mut m, &mut s, b"refs/heads").unwrap(), None);
    let mut out = Vec::new();
    let stack = {
        let mut e = Vec::new();
        view::list_dir(&mut m, &mut s, b"refs", &mut e).unwrap();
        e
    };
    w.overlay_listing(&mut m, &mut s, b"refs", &stack, &mut out)
        .unwrap();
    assert!(out.is_empty(), "{out:?}");
    // No loose file to remove.
    let e = w.unlink_ref(&mut m, &ME, b"refs/heads/topic").unwrap_err();
    assert_eq!(e.errno, libc::ENOENT);
    assert_eq!(flush(&mut w, &mut m), 0);
    assert!(m.refs.contains_key(&b"refs/heads/topic"[..]));
    // Written later: loose again, packed-refs untouched.
    w.commit_ref(&mut m, &ME, b"refs/heads/topic", RefValue::Val1(id(7)))
        .unwrap();
    assert_eq!(
        w.classify(&mut m, &mut s, b"refs/heads/topic").unwrap(),
        Some(Kind::Ref)
    );
    assert_eq!(
        w.classify(&mut m, &mut s, b"refs/heads").unwrap(),
        Some(Kind::Dir)
    );
    flush(&mut w, &mut m);
    assert_eq!(packed_text(&mut w, &mut m), packed);
    // `rm` of the loose file falls back to the packed value.
    w.unlink_ref(&mut m, &ME, b"refs/heads/topic").unwrap();
    flush(&mut w, &mut m);
    assert_eq!(
        m.refs.get(&b"refs/heads/topic"[..]),
        Some(&RefValue::Val1(id(2)))
    );
    // git's delete of a packed-only ref: packed-refs rewritten without it.
    let without = format!(
        "# pack-refs with: peeled fully-peeled sorted \n{} refs/heads/main\n{} refs/tags/v1\n",
        hex(1),
        hex(3)
    );
    w.commit_packed_refs(&mut m, &ME, without.as_bytes(), None)
        .unwrap();
    assert_eq!(value(&mut w, &mut m, "refs/heads/topic"), None);
    flush(&mut w, &mut m);
    assert!(!m.refs.contains_key(&b"refs/heads/topic"[..]));
    assert_eq!(
        m.refs.get(&b"refs/heads/main"[..]),
        Some(&RefValue::Val1(id(1)))
    );
    // A changed packed-only value is written; a new name is created.
    let changed = format!(
        "# pack-refs with: peeled fully-peeled sorted \n{} refs/heads/main\n{} refs/heads/new\n{} refs/tags/v1\n",
        hex(5),
        hex(6),
        hex(3)
    );
    w.commit_packed_refs(&mut m, &ME, changed.as_bytes(), None)
        .unwrap();
    flush(&mut w, &mut m);
    assert_eq!(
        m.refs.get(&b"refs/heads/main"[..]),
        Some(&RefValue::Val1(id(5)))
    );
    assert_eq!(
        m.refs.get(&b"refs/heads/new"[..]),
        Some(&RefValue::Val1(id(6)))
    );
    assert_eq!(w.classify(&mut m, &mut s, b"refs/heads/new").unwrap(), None);
}

/// A header a writer put into `packed-refs` (t1409's mark) stays until the next rewrite.
#[test]
fn packed_refs_keeps_the_header_written() {
    let (mut m, mut w, _s) = setup();
    let marked = format!(
        "# pack-refs with: peeled fully-peeled sorted  t1409 \n{} refs/heads/main\n",
        hex(1)
    );
    w.commit_packed_refs(&mut m, &ME, marked.as_bytes(), None)
        .unwrap();
    w.commit_ref(&mut m, &ME, b"refs/heads/main", RefValue::Val1(id(4)))
        .unwrap();
    flush(&mut w, &mut m);
    assert_eq!(packed_text(&mut w, &mut m), marked);
}

/// Another writer's changes: a packed-only ref it changed shows loose over the old entry
/// (the loose layout), one it deleted goes; a creation by a `packed-refs` whose lock was
/// taken before that is refused.
#[test]
fn another_writer_and_the_packed_layer() {
    let (mut m, mut w, mut s) = setup();
    let packed = format!(
        "# pack-refs with: peeled fully-peeled sorted \n{} refs/heads/main\n{} refs/heads/topic\n",
        hex(1),
        hex(2)
    );
    w.commit_packed_refs(&mut m, &ME, packed.as_bytes(), None)
        .unwrap();
    for n in ["refs/heads/main", "refs/heads/topic"] {
        w.unlink_ref(&mut m, &ME, n.as_bytes()).unwrap();
    }
    w.note_packed_lock();
    let seen = w.packed_lock_seen();
    m.set("refs/heads/main", RefValue::Val1(id(8)));
    m.refs.remove(&b"refs/heads/topic"[..]);
    w.revalidate_packed(&mut m);
    assert_eq!(
        w.classify(&mut m, &mut s, b"refs/heads/main").unwrap(),
        Some(Kind::Ref)
    );
    assert_eq!(
        w.classify(&mut m, &mut s, b"refs/heads/topic").unwrap(),
        None
    );
    // The old packed-refs, written back by a writer that read it before: topic would
    // come back.
    let e = w
        .commit_packed_refs(&mut m, &ME, packed.as_bytes(), seen)
        .unwrap_err();
    assert_eq!(e.errno, libc::EBUSY);
    assert!(w.open.is_empty());
    // The same without the deleted ref is fine, and changes no value.
    let main_only = format!(
        "# pack-refs with: peeled fully-peeled sorted \n{} refs/heads/main\n",
        hex(1)
    );
    w.commit_packed_refs(&mut m, &ME, main_only.as_bytes(), seen)
        .unwrap();
    assert!(w.open.is_empty(), "{:?}", w.open.edits);
    assert_eq!(
        value(&mut w, &mut m, "refs/heads/main"),
        Some(RefValue::Val1(id(8)))
    );
}

/// The packed layout: every ref `pack-refs --all` packs is in `packed-refs` only (as git
/// renders it, peeled lines included), loose files for root refs and symrefs; a ref
/// written through the mount is loose, `pack-refs --prune` packs it again.
#[test]
fn the_packed_layout() {
    let (mut m, mut w, mut s) = setup();
    m.set(
        "refs/tags/v2",
        RefValue::Val2 {
            value: id(4),
            peeled: id(1),
        },
    );
    m.set(
        "refs/remotes/origin/HEAD",
        RefValue::Symref(b"refs/remotes/origin/main".to_vec()),
    );
    m.set("refs/remotes/origin/main", RefValue::Val1(id(1)));
    m.set("refs/bisect/bad", RefValue::Val1(id(2)));
    w.set_layout(Layout::Packed);
    let want = format!(
        "# pack-refs with: peeled fully-peeled sorted \n{h1} refs/heads/main\n{h2} refs/heads/topic\n{h1} refs/remotes/origin/main\n{h3} refs/tags/v1\n{h4} refs/tags/v2\n^{h1}\n",
        h1 = hex(1),
        h2 = hex(2),
        h3 = hex(3),
        h4 = hex(4)
    );
    assert_eq!(packed_text(&mut w, &mut m), want);
    let c = |w: &mut WriteState, m: &mut MemSource, s: &mut Scratch, p: &str| {
        w.classify(m, s, p.as_bytes()).unwrap()
    };
    assert_eq!(c(&mut w, &mut m, &mut s, "HEAD"), Some(Kind::Ref));
    assert_eq!(c(&mut w, &mut m, &mut s, "refs/heads/main"), None);
    assert_eq!(c(&mut w, &mut m, &mut s, "refs/heads"), None);
    assert_eq!(c(&mut w, &mut m, &mut s, "refs/tags"), None);
    assert_eq!(c(&mut w, &mut m, &mut s, "refs/remotes"), Some(Kind::Dir));
    assert_eq!(
        c(&mut w, &mut m, &mut s, "refs/remotes/origin/HEAD"),
        Some(Kind::Ref)
    );
    assert_eq!(
        c(&mut w, &mut m, &mut s, "refs/bisect/bad"),
        Some(Kind::Ref)
    );
    let mut out = Vec::new();
    w.packed_layout_listing(&mut m, b"refs", &mut out).unwrap();
    let names: Vec<_> = out.iter().map(|e| (e.name.to_vec(), e.kind)).collect();
    assert_eq!(
        names,
        vec![
            (b"bisect".to_vec(), Kind::Dir),
            (b"remotes".to_vec(), Kind::Dir)
        ]
    );
    // No loose file to unlink.
    let e = w.unlink_ref(&mut m, &ME, b"refs/heads/main").unwrap_err();
    assert_eq!(e.errno, libc::ENOENT);
    // A write makes it loose, packed-refs keeps the old entry.
    w.commit_ref(&mut m, &ME, b"refs/heads/main", RefValue::Val1(id(9)))
        .unwrap();
    assert_eq!(
        c(&mut w, &mut m, &mut s, "refs/heads/main"),
        Some(Kind::Ref)
    );
    assert_eq!(c(&mut w, &mut m, &mut s, "refs/heads"), Some(Kind::Dir));
    assert_eq!(packed_text(&mut w, &mut m), want);
    flush(&mut w, &mut m);
    assert_eq!(packed_text(&mut w, &mut m), want);
    // pack-refs --all --prune packs it again.
    let repacked = want.replace(
        &format!("{} refs/heads/main", hex(1)),
        &format!("{} refs/heads/main", hex(9)),
    );
    w.commit_packed_refs(&mut m, &ME, repacked.as_bytes(), None)
        .unwrap();
    w.unlink_ref(&mut m, &ME, b"refs/heads/main").unwrap();
    assert!(w.open.is_empty(), "{:?}", w.open.edits);
    assert_eq!(c(&mut w, &mut m, &mut s, "refs/heads/main"), None);
    assert_eq!(packed_text(&mut w, &mut m), repacked);
    // A new ref through the mount is loose; another writer's shows packed.
    w.commit_ref(&mut m, &ME, b"refs/heads/mine", RefValue::Val1(id(5)))
        .unwrap();
    flush(&mut w, &mut m);
    m.set("refs/heads/theirs", RefValue::Val1(id(6)));
    w.revalidate_packed(&mut m);
    assert_eq!(
        c(&mut w, &mut m, &mut s, "refs/heads/mine"),
        Some(Kind::Ref)
    );
    assert_eq!(c(&mut w, &mut m, &mut s, "refs/heads/theirs"), None);
    let text = packed_text(&mut w, &mut m);
    assert!(
        text.contains(&format!("{} refs/heads/theirs\n", hex(6))),
        "{text}"
    );
    assert!(!text.contains("refs/heads/mine"), "{text}");
    // Deleting a packed-only ref: packed-refs rewritten without it.
    let without = text.replace(&format!("{} refs/heads/theirs\n", hex(6)), "");
    w.commit_packed_refs(&mut m, &ME, without.as_bytes(), None)
        .unwrap();
    flush(&mut w, &mut m);
    assert!(!m.refs.contains_key(&b"refs/heads/theirs"[..]));
    assert_eq!(packed_text(&mut w, &mut m), without);
}

#[test]
fn plain_rm_without_pack_deletes() {
    let (mut m, mut w, _) = setup();
    w.unlink_ref(&mut m, &ME, b"refs/heads/topic").unwrap();
    assert_eq!(value(&mut w, &mut m, "refs/heads/topic"), None);
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
        value(&mut w, &mut m, "refs/heads/topic"),
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
        value(&mut w, &mut m, "refs/heads/topic"),
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
    let (full, long) = (format!("{}\n", hex(3)), format!("{}0", hex(3)));
    // The null id: fine while incomplete, refused once complete.
    let zeros = "0".repeat(40);
    let zeros_line = format!("{zeros}\n");
    assert_splits(
        |b| ref_content_prefix_ok(b, h).is_ok(),
        &[
            "",
            "0123",
            "ref",
            "ref:",
            "ref: refs/heads/x",
            "ref: refs/heads/x\n",
            "e",
            &full,
            &zeros[..39],
        ],
        &[
            "garbage\n",
            "xyz",
            "ref: a b",
            "ref: refs/heads/a\nb",
            "ref: refs/heads/a:b",
            &long,
            &zeros,
            &zeros_line,
        ],
    );
}

/// The packed layer saved and read by the next mount (`STATE_FILE`): refs packed only,
/// loose over an entry, loose against the packed layout, and the header come back as they
/// were; a ref another writer deleted or changed meanwhile is checked as after a reload;
/// junk lines are skipped.
#[test]
fn the_packed_layer_survives_a_remount() {
    let (mut m, mut w, mut s) = setup();
    let packed = format!(
        "# pack-refs with: peeled fully-peeled sorted  mark \n{} refs/heads/main\n{} refs/heads/topic\n{} refs/tags/v1\n^{}\n",
        hex(1), hex(2), hex(3), hex(9)
    );
    w.commit_packed_refs(&mut m, &ME, packed.as_bytes(), None)
        .unwrap();
    for n in ["refs/heads/main", "refs/heads/topic"] {
        w.unlink_ref(&mut m, &ME, n.as_bytes()).unwrap();
    }
    let before = w.packed.revision();
    w.commit_ref(&mut m, &ME, b"refs/heads/new", RefValue::Val1(id(4)))
        .unwrap();
    assert_ne!(w.packed.revision(), before);
    flush(&mut w, &mut m);
    let mut saved = Vec::new();
    w.packed.save(&mut saved);
    let shown = w.packed_refs(&mut m).unwrap();
    // The next mount, same layout.
    let mut again = WriteState::new(HashKind::Sha1, LogSettings::default());
    assert_eq!(again.load_packed_state(&mut m, &saved), 3);
    assert_eq!(again.packed.refs, w.packed.refs);
    assert_eq!(again.packed_refs(&mut m).unwrap(), shown);
    assert_eq!(
        again.classify(&mut m, &mut s, b"refs/heads/main").unwrap(),
        None
    );
    assert_eq!(
        again.classify(&mut m, &mut s, b"refs/tags/v1").unwrap(),
        Some(Kind::Ref)
    );
    // Another writer meanwhile: topic deleted, main changed (loose over its old entry).
    m.refs.remove(&b"refs/heads/topic"[..]);
    m.set("refs/heads/main", RefValue::Val1(id(8)));
    let mut junk = saved.clone();
    junk.extend_from_slice(b"P zz - refs/heads/bad\nX nonsense\nN ../escape\n");
    let mut third = WriteState::new(HashKind::Sha1, LogSettings::default());
    assert_eq!(third.load_packed_state(&mut m, &junk), 3);
    assert_eq!(
        third.classify(&mut m, &mut s, b"refs/heads/topic").unwrap(),
        None
    );
    assert_eq!(
        third.classify(&mut m, &mut s, b"refs/heads/main").unwrap(),
        Some(Kind::Ref)
    );
    assert!(!third
        .packed_refs(&mut m)
        .unwrap()
        .windows(16)
        .any(|x| x == b"refs/heads/topic"));
    // The packed layout reads the same lines; a ref without one takes its default: `new`
    // (loose by the loose layout's default) is packed, `v1` (loose over an entry) stays.
    let mut packed_layout = WriteState::new(HashKind::Sha1, LogSettings::default());
    packed_layout.set_layout(Layout::Packed);
    packed_layout.load_packed_state(&mut m, &saved);
    assert_eq!(
        packed_layout
            .classify(&mut m, &mut s, b"refs/heads/new")
            .unwrap(),
        None
    );
    assert_eq!(
        packed_layout
            .classify(&mut m, &mut s, b"refs/tags/v1")
            .unwrap(),
        Some(Kind::Ref)
    );
    assert_eq!(
        packed_layout
            .classify(&mut m, &mut s, b"refs/heads/topic")
            .unwrap(),
        None
    );
    // Nothing to keep: nothing saved but the magic line; a file of another format is
    // ignored.
    let (mut m2, mut fresh, _) = setup();
    assert!(fresh.packed.is_default());
    assert_eq!(fresh.load_packed_state(&mut m2, b"something else\n"), 0);
}

/// A `packed-refs` written whole is merged against what it showed: an entry dropped is a
/// deletion (packed only) or a loose ref left alone, a changed id a new value, a new name
/// a creation; a new name that is also a directory of another new name is refused with
/// nothing staged (as git's D/F check), and so is a creation after another writer
/// changed the stack while `packed-refs` was locked.
#[test]
fn a_packed_refs_written_whole_is_merged_name_by_name() {
    let (mut m, mut w, _s) = setup();
    let header = "# pack-refs with: peeled fully-peeled sorted \n";
    let all = format!(
        "{header}{} refs/heads/main\n{} refs/heads/topic\n{} refs/tags/v1\n",
        hex(1),
        hex(2),
        hex(3)
    );
    w.commit_packed_refs(&mut m, &ME, all.as_bytes(), None)
        .unwrap();
    for n in ["refs/heads/main", "refs/heads/topic", "refs/tags/v1"] {
        w.unlink_ref(&mut m, &ME, n.as_bytes()).unwrap();
    }
    flush(&mut w, &mut m);
    // topic dropped, v1 moved, new added (sorted between main and topic).
    let next = format!(
        "{header}{} refs/heads/main\n{} refs/heads/new\n{} refs/tags/v1\n",
        hex(1),
        hex(4),
        hex(5)
    );
    w.commit_packed_refs(&mut m, &ME, next.as_bytes(), None)
        .unwrap();
    flush(&mut w, &mut m);
    assert_eq!(m.refs.get(&b"refs/heads/topic"[..]), None);
    assert_eq!(
        m.refs.get(&b"refs/heads/new"[..]),
        Some(&RefValue::Val1(id(4)))
    );
    assert_eq!(
        m.refs.get(&b"refs/tags/v1"[..]),
        Some(&RefValue::Val1(id(5)))
    );
    assert_eq!(packed_text(&mut w, &mut m), next);
    // Both `refs/heads/d` and `refs/heads/d/e`, neither existing: refused, nothing staged.
    let df = format!(
        "{header}{} refs/heads/d\n{} refs/heads/d/e\n{} refs/heads/main\n{} refs/heads/new\n{} refs/tags/v1\n",
        hex(6),
        hex(6),
        hex(1),
        hex(4),
        hex(5)
    );
    let e = w
        .commit_packed_refs(&mut m, &ME, df.as_bytes(), None)
        .unwrap_err();
    assert_eq!(e.errno, libc::EINVAL, "{}", e.reason);
    assert!(w.open.is_empty());
    assert_eq!(packed_text(&mut w, &mut m), next);
}
