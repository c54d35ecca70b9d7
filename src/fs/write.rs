//! The write path's pure logic: the overlay that in-flight writes put over the stack
//! (scratch files such as `x.lock`, virtual directories, the pending layer of accepted
//! but not yet written ref edits, pending reflog lines, the volatile packed layer), the
//! files-backend commit points turned into validated edits, and the open batch those edits
//! go into. No FUSE types and no threads here (see `batch.rs` for the batcher).
//!
//! Effective values follow git's files backend: `effective = loose ?? packed`. The stack
//! always holds effective values; the packed layer only remembers what a files-backend
//! git last wrote into `packed-refs` through the mount, so that `pack-refs --prune`
//! (pack, then unlink each loose copy) changes nothing.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::files::{self, LooseRef};
use crate::format::{HashKind, LogRecord, ObjectId, RefRecord, RefValue};
use crate::fs::budget::ScratchFiles;
use crate::fs::error::Refusal;
use crate::fs::queue::{Batch, BatchQueue};
use crate::fs::source::LogSettings;
use crate::fs::source::NEXT_NAME;
use crate::fs::source::{BatchEdit, RefSource};
use crate::fs::view::{self, Entry, Kind, Scratch};
use crate::refname::{check_for_update, check_refname_format, RefnameFlags};

/// How long a reflog line waits in the open batch for the rename that commits its update.
pub const LINE_WAITS_FOR_RENAME: std::time::Duration = std::time::Duration::from_millis(100);

/// A source error as a refusal (EIO and the message).
fn source_err(e: crate::Error) -> Refusal {
    Refusal {
        errno: e.errno(),
        reason: e.to_string(),
    }
}

type R<T> = std::result::Result<T, Refusal>;

/// A packed-layer entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packed {
    pub id: ObjectId,
    pub peeled: Option<ObjectId>,
}

/// Whether a ref's effective value points at the same object as a packed entry. The
/// peeled id is derived data: a packed annotated tag carries it (`^<peeled>`), the same tag
/// written through a lock file does not, and both name one value.
fn same_object(have: Option<&RefValue>, packed: &RefValue) -> bool {
    have.and_then(RefValue::object_id)
        .is_some_and(|h| Some(h) == packed.object_id())
}

impl Packed {
    fn value(&self) -> RefValue {
        match self.peeled {
            Some(p) => RefValue::Val2 {
                value: self.id,
                peeled: p,
            },
            None => RefValue::Val1(self.id),
        }
    }
}

/// A pending ref value (accepted, not yet in the stack) and the batch that carries it.
#[derive(Clone, Debug)]
pub struct Pending {
    pub value: RefValue,
    pub seq: u64,
}

/// A pending reflog state of one ref: `base` replaces the stack's entries (a rewrite or
/// deletion, carried by batch `base_seq`) when set; `appended` lines follow (oldest
/// first, each with the batch that carries it). `deleted`: the reflog was removed
/// (`unlink logs/x`, a move away); a reflog rewritten to nothing still exists (an empty
/// file), as in the files backend. Each part is dropped once its batch is written (the
/// stack then shows it), the whole entry once batch `seq` is.
#[derive(Clone, Debug, Default)]
pub struct PendingLog {
    pub base: Option<Vec<LogRecord>>,
    pub base_seq: u64,
    pub appended: Vec<(u64, LogRecord)>,
    pub deleted: bool,
    pub seq: u64,
}

/// What a lock (`x.lock` created with `O_EXCL`) saw of its ref when it was taken: the
/// files backend guarantees the holder that nobody else changes the ref until it
/// renames the lock or unlinks it, so this value is the update's expected old value.
#[derive(Clone, Debug)]
pub struct LockBase {
    /// The ref's name (the lock's path without `.lock`).
    pub name: Vec<u8>,
    /// The ref's effective value when the lock was created.
    pub value: Option<RefValue>,
    /// A commit point through the mount changed the ref since (a files-backend client
    /// ignoring the lock: as on disk, its change is simply overwritten by the rename).
    pub changed_through_mount: bool,
}

/// Who a staging call serves: the edits it stages record them, so that a failure is
/// reported to that process (its next `fsync`) and fails those handles (their `close`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Caller {
    /// The process (thread group id; 0 when unknown).
    pub pid: u32,
    /// The open files the call stages through.
    pub handles: Vec<u64>,
}

impl Caller {
    /// Process `pid` through the open files `handles`.
    pub fn new(pid: u32, handles: Vec<u64>) -> Caller {
        Caller { pid, handles }
    }
}

/// The overlay of in-flight writes.
#[derive(Debug, Default)]
pub struct WriteState {
    pub hash: HashKind,
    pub log: LogSettings,
    /// Created files that are not refs (yet): `*.lock`, `packed-refs.new`, temporary
    /// reflogs. Content in memory; gone at unmount.
    pub files: ScratchFiles,
    /// Directories made by `mkdir` (they exist until `rmdir`, empty or not).
    pub vdirs: BTreeSet<Vec<u8>>,
    /// Ref values accepted at a commit point, not yet in the stack (read-your-writes).
    pub pending: BTreeMap<Vec<u8>, Pending>,
    /// Reflog changes not yet in the stack.
    pub pending_logs: BTreeMap<Vec<u8>, PendingLog>,
    /// The packed layer (what git last wrote into `packed-refs` through the mount).
    pub packed: BTreeMap<Vec<u8>, Packed>,
    /// The batch being filled.
    pub open: Batch,
    /// Where sealed batches go (the batcher's queue, `batch.rs`).
    queue: Arc<BatchQueue>,
    /// Highest sequence number handed out.
    pub last_seq: u64,
    /// Ref locks held (by lock path), with what they saw of their ref.
    pub locks: HashMap<Vec<u8>, LockBase>,
    rec: RefRecord,
}

/// A ref value for a log line (`absent` when the ref does not exist).
fn show_value(v: Option<&RefValue>) -> String {
    match v {
        None | Some(RefValue::Deletion) => "absent".into(),
        Some(RefValue::Val1(id)) | Some(RefValue::Val2 { value: id, .. }) => id.to_string(),
        Some(RefValue::Symref(t)) => format!("ref: {}", String::from_utf8_lossy(t)),
    }
}

/// Splits a mount path into a ref name if it is a ref path (`HEAD`, `refs/…`), not a
/// lock or other scratch name.
pub fn ref_name_of(path: &[u8]) -> Option<&[u8]> {
    if path.starts_with(b"refs/") || crate::refname::is_root_ref(path) {
        Some(path)
    } else {
        None
    }
}

/// Whether `data`, written so far into a ref file or a ref's lock, can still become a
/// valid loose ref (`<hex id>` then whitespace, or `ref: <name>`); the reason if not.
/// Everything after a NUL is ignored, as git does.
pub fn ref_content_prefix_ok(data: &[u8], hash: HashKind) -> Result<(), String> {
    let data = match data.iter().position(|&b| b == 0) {
        Some(nul) => data.get(..nul).unwrap_or_default(),
        None => data,
    };
    let is_space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c);
    let hex_len = hash.hex_len();
    let hex_ok = data.iter().take(hex_len).all(|b| b.is_ascii_hexdigit())
        && data.get(hex_len).is_none_or(|&b| is_space(b));
    if hex_ok {
        if data.len() >= hex_len && data.iter().take(hex_len).all(|&b| b == b'0') {
            // Complete, and never a ref value: refused at the write, where even a shell's
            // `echo 0000… > refs/heads/x` sees it (shells ignore errors of `close`).
            return Err("the null object id is not a ref value".into());
        }
        return Ok(());
    }
    let head = data.get(..data.len().min(4)).unwrap_or_default();
    if !b"ref:".starts_with(head) {
        return Err(format!(
            "content can no longer become a ref value ({hex_len} hex digits or 'ref: <name>')"
        ));
    }
    let rest = data.get(4..).unwrap_or_default();
    let start = rest
        .iter()
        .position(|&b| !is_space(b))
        .unwrap_or(rest.len());
    let target = rest.get(start..).unwrap_or_default();
    let end = target
        .iter()
        .position(|&b| is_space(b))
        .unwrap_or(target.len());
    let (name, tail) = target.split_at(end);
    let bad = |b: u8| b < 0x20 || b == 0x7f || b" ~^:?*[\\".contains(&b);
    if name.iter().any(|&b| bad(b)) || !tail.iter().all(|&b| is_space(b)) {
        return Err("symbolic ref target can no longer become a valid ref name".into());
    }
    Ok(())
}

/// Whether `name` may be written as a ref (refname rules, `refs/…` or root-ref syntax).
pub fn valid_ref_name(name: &[u8]) -> bool {
    ref_name_of(name).is_some() && check_for_update(name, true).is_ok()
}

impl WriteState {
    /// Whether the overlay is empty (reads can skip it).
    pub fn is_idle(&self) -> bool {
        self.files.is_empty()
            && self.vdirs.is_empty()
            && self.pending.is_empty()
            && self.pending_logs.is_empty()
    }

    /// A reflog file was created (`open(O_CREAT|O_APPEND)`): it exists from now on, empty
    /// until a line is appended.
    ///
    /// The creation is an edit of the open batch (git's existence marker when written), so
    /// that the empty reflog outlives the batch: it is not only a note in the overlay.
    pub fn note_new_log(&mut self, who: &Caller, name: &[u8]) {
        // Joins the open edit of `name` unless that one rewrites or deletes the reflog
        // (then `edit_slot` seals first).
        let i = self.edit_for(who, name, false, false);
        let seq = self.open.seq;
        if let Some(e) = self.open.edits.get_mut(i) {
            e.create_log = true;
        }
        let pl = self
            .pending_logs
            .entry(name.to_vec())
            .or_insert(PendingLog {
                base: None,
                appended: Vec::new(),
                deleted: false,
                base_seq: seq,
                seq,
            });
        if pl.deleted {
            // Deleted by an edit not written yet, created again: empty from here on.
            pl.base = Some(Vec::new());
            pl.deleted = false;
            pl.base_seq = seq;
        }
        pl.seq = seq;
    }

    /// The queue this overlay seals batches into.
    pub(crate) fn queue(&self) -> &Arc<BatchQueue> {
        &self.queue
    }

    /// A fresh overlay.
    pub fn new(hash: HashKind, log: LogSettings) -> WriteState {
        WriteState {
            hash,
            log,
            open: Batch::new(1),
            last_seq: 1,
            ..Default::default()
        }
    }

    // ----------------------------------------------------------------------------------
    // Reads through the overlay
    // ----------------------------------------------------------------------------------

    /// The effective value of a ref as git would resolve it (pending over stack).
    pub fn effective(&mut self, src: &mut dyn RefSource, name: &[u8]) -> R<Option<RefValue>> {
        if let Some(p) = self.pending.get(name) {
            return Ok((!matches!(p.value, RefValue::Deletion)).then(|| p.value.clone()));
        }
        let found = crate::fs::source::read_ref(src, name, &mut self.rec).map_err(source_err)?;
        Ok(found.then(|| self.rec.value.clone()))
    }

    /// Whether `name` shows as a loose ref file (every existing ref does).
    fn is_loose_ref(&mut self, src: &mut dyn RefSource, name: &[u8]) -> R<bool> {
        Ok(self.effective(src, name)?.is_some())
    }

    /// Whether some loose ref (stack or pending) lives below `prefix` (which ends in `/`).
    fn any_ref_below(&mut self, src: &mut dyn RefSource, prefix: &[u8]) -> R<bool> {
        let pending_live = self
            .pending
            .range(prefix.to_vec()..)
            .take_while(|(n, _)| n.starts_with(prefix))
            .any(|(_, p)| !matches!(p.value, RefValue::Deletion));
        if pending_live {
            return Ok(true);
        }
        let mut key = prefix.to_vec();
        loop {
            if !src
                .first_ref_at_or_after(&key, &mut self.rec)
                .map_err(source_err)?
                || !self.rec.name.starts_with(prefix)
            {
                return Ok(false);
            }
            let n = &self.rec.name;
            if !self.pending.contains_key(n) {
                return Ok(true);
            }
            key.clone_from(n);
            key.push(NEXT_NAME);
        }
    }

    fn any_path_below(&self, prefix: &[u8]) -> bool {
        self.files
            .paths_from(prefix)
            .next()
            .is_some_and(|p| p.starts_with(prefix))
            || self
                .vdirs
                .range(prefix.to_vec()..)
                .next()
                .is_some_and(|p| p.starts_with(prefix))
    }

    /// Whether the reflog of `name` exists (as a file) through the overlay.
    fn log_exists(&self, src: &mut dyn RefSource, name: &[u8], buf: &mut Vec<u8>) -> R<bool> {
        if let Some(pl) = self.pending_logs.get(name) {
            return Ok(!pl.deleted || !pl.appended.is_empty());
        }
        Ok(src.first_log_at_or_after(name, buf).map_err(source_err)? && buf == name)
    }

    /// Classifies a path through the overlay.
    pub fn classify(
        &mut self,
        src: &mut dyn RefSource,
        s: &mut Scratch,
        path: &[u8],
    ) -> R<Option<Kind>> {
        if self.files.contains_key(path) {
            return Ok(Some(Kind::Scratch));
        }
        let mut sub = path.to_vec();
        sub.push(b'/');
        match view::area(path) {
            view::Area::Refs(name) if name != b"refs" => {
                if self.is_loose_ref(src, name)? {
                    return Ok(Some(Kind::Ref));
                }
                if self.vdirs.contains(path)
                    || self.any_path_below(&sub)
                    || (name.starts_with(b"refs/") && self.any_ref_below(src, &sub)?)
                {
                    return Ok(Some(Kind::Dir));
                }
                Ok(None)
            }
            view::Area::Logs(Some(name)) => {
                let mut buf = Vec::new();
                if self.log_exists(src, name, &mut buf)? {
                    return Ok(Some(Kind::Log));
                }
                if self.vdirs.contains(path) || self.any_path_below(&sub) {
                    return Ok(Some(Kind::Dir));
                }
                let name_sub = &sub[5..];
                let pending_below = self
                    .pending_logs
                    .range(name_sub.to_vec()..)
                    .take_while(|(n, _)| n.starts_with(name_sub))
                    .any(|(_, pl)| !pl.deleted || !pl.appended.is_empty());
                if pending_below {
                    return Ok(Some(Kind::Dir));
                }
                // Stack reflogs below, skipping those the overlay deleted.
                let mut key = name_sub.to_vec();
                loop {
                    if !src
                        .first_log_at_or_after(&key, &mut buf)
                        .map_err(source_err)?
                        || !buf.starts_with(name_sub)
                    {
                        return Ok(None);
                    }
                    if !self.pending_logs.contains_key(&buf) {
                        return Ok(Some(Kind::Dir));
                    }
                    key.clone_from(&buf);
                    key.push(NEXT_NAME);
                }
            }
            _ => view::classify(src, s, path).map_err(source_err),
        }
    }

    /// Applies the overlay to a stack listing of directory `path`.
    pub fn overlay_listing(
        &mut self,
        src: &mut dyn RefSource,
        s: &mut Scratch,
        path: &[u8],
        stack: &[Entry],
        out: &mut Vec<Entry>,
    ) -> R<()> {
        out.clear();
        let mut prefix = path.to_vec();
        if !prefix.is_empty() {
            prefix.push(b'/');
        }
        let touched = !self.pending.is_empty() || !self.pending_logs.is_empty();
        for e in stack {
            if touched && matches!(e.kind, Kind::Ref | Kind::Log | Kind::Dir) {
                let child = view::join(path, &e.name);
                match self.classify(src, s, &child)? {
                    Some(k) if k == e.kind => out.push(e.clone()),
                    _ => {}
                }
            } else {
                out.push(e.clone());
            }
        }
        fn add(out: &mut Vec<Entry>, rest: &[u8], leaf: Kind) {
            if rest.is_empty() {
                return;
            }
            match rest.iter().position(|&b| b == b'/') {
                Some(i) => out.push(Entry {
                    name: rest[..i].into(),
                    kind: Kind::Dir,
                }),
                None => out.push(Entry {
                    name: rest.into(),
                    kind: leaf,
                }),
            }
        }
        for p in self
            .files
            .paths_from(&prefix)
            .take_while(|p| p.starts_with(&prefix))
        {
            add(out, &p[prefix.len()..], Kind::Scratch);
        }
        for p in self
            .vdirs
            .range(prefix.clone()..)
            .take_while(|p| p.starts_with(&prefix))
        {
            let rest = &p[prefix.len()..];
            match rest.iter().position(|&b| b == b'/') {
                Some(_) => add(out, rest, Kind::Dir),
                None if !rest.is_empty() => out.push(Entry {
                    name: rest.into(),
                    kind: Kind::Dir,
                }),
                None => {}
            }
        }
        match view::area(path) {
            view::Area::Logs(_) => {
                let lp: &[u8] = prefix.strip_prefix(b"logs/").unwrap_or_default();
                let logs: Vec<Vec<u8>> = self
                    .pending_logs
                    .iter()
                    .filter(|(n, pl)| n.starts_with(lp) && (!pl.deleted || !pl.appended.is_empty()))
                    .map(|(n, _)| n.clone())
                    .collect();
                if path.starts_with(b"logs") {
                    for n in logs {
                        add(out, &n[lp.len()..], Kind::Log);
                    }
                }
            }
            view::Area::Refs(_) | view::Area::Root => {
                let live: Vec<Vec<u8>> = self
                    .pending
                    .range(prefix.clone()..)
                    .take_while(|(n, _)| n.starts_with(&prefix))
                    .filter(|(_, p)| !matches!(p.value, RefValue::Deletion))
                    .map(|(n, _)| n.clone())
                    .collect();
                for n in live {
                    let rest = &n[prefix.len()..];
                    if path.is_empty()
                        && (rest.contains(&b'/') || !crate::refname::is_root_ref(rest))
                    {
                        continue;
                    }
                    add(out, rest, Kind::Ref);
                }
            }
            view::Area::PackedRefs => {}
        }
        view::finish_listing(out);
        Ok(())
    }

    /// Renders a reflog through the overlay (oldest first).
    pub fn render_log(&self, src: &mut dyn RefSource, name: &[u8], out: &mut Vec<u8>) -> R<()> {
        let mut recs = Vec::new();
        let pl = self.pending_logs.get(name);
        match pl.and_then(|p| p.base.as_ref()) {
            Some(base) => recs.extend(base.iter().cloned()),
            None => src.read_log(name, &mut recs).map_err(source_err)?,
        }
        // `recs` is newest first; pending appends are newer still.
        if let Some(pl) = pl {
            for (_, a) in &pl.appended {
                recs.insert(0, a.clone());
            }
        }
        view::render_log(&recs, self.hash, out);
        Ok(())
    }

    /// Renders `packed-refs`: the header and the packed layer.
    pub fn render_packed(&self, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(view::PACKED_REFS_HEADER);
        for (name, p) in &self.packed {
            files::render_packed_ref(name, &p.id, p.peeled.as_ref(), out);
        }
    }

    // ----------------------------------------------------------------------------------
    // Commit points
    // ----------------------------------------------------------------------------------

    fn seal(&mut self) {
        if !self.open.is_empty() {
            self.last_seq += 1;
            let b = std::mem::replace(&mut self.open, Batch::new(self.last_seq));
            self.queue.push(b);
        }
    }

    /// Seals the open batch because its window passed. A reflog line of a ref (not HEAD)
    /// whose commit point has not arrived yet stays in the new open batch (for at most
    /// [`LINE_WAITS_FOR_RENAME`]), so that the line and its rename land in one table (git
    /// appends the line just before renaming).
    pub fn seal_for_window(&mut self) {
        if self.open.is_empty() {
            return;
        }
        let awaiting = std::mem::take(&mut self.open.awaiting);
        let is_waiting = |e: &BatchEdit| {
            e.new.is_none()
                && e.name != b"HEAD"
                && awaiting
                    .get(&e.name)
                    .is_some_and(|t| t.elapsed() < LINE_WAITS_FOR_RENAME)
        };
        if !self.open.edits.iter().any(is_waiting) {
            self.seal();
            return;
        }
        let (waiting, rest): (Vec<BatchEdit>, Vec<BatchEdit>) =
            std::mem::take(&mut self.open.edits)
                .into_iter()
                .partition(|e| is_waiting(e));
        self.open.index.clear();
        for e in rest {
            self.open
                .index
                .insert(e.name.clone(), self.open.edits.len());
            self.open.edits.push(e);
        }
        self.seal();
        let seq = self.open.seq;
        for e in waiting {
            if let Some(pl) = self.pending_logs.get_mut(&e.name) {
                pl.seq = seq;
                for (s, _) in pl.appended.iter_mut() {
                    if *s == seq - 1 {
                        *s = seq;
                    }
                }
            }
            if let Some(t) = awaiting.get(&e.name) {
                self.open.awaiting.insert(e.name.clone(), *t);
            }
            self.open
                .index
                .insert(e.name.clone(), self.open.edits.len());
            self.open.edits.push(e);
        }
    }

    /// Seals the open batch (flush, fsync) and returns the last sequence number in use.
    pub fn seal_all(&mut self) -> u64 {
        self.seal();
        self.open.seq - 1
    }

    /// The edit for `name` in the open batch, creating it (or sealing first when `name`
    /// already has what the new step needs: a value, or a log line). A value joins a
    /// log-only edit only when that edit holds the line a writer appended for it.
    fn edit_slot(&mut self, name: &[u8], wants_value: bool, wants_log: bool) -> usize {
        if let Some(&i) = self.open.index.get(name) {
            let e = &self.open.edits[i];
            let own_line = self.open.awaiting.contains_key(name);
            let clash = e.replace_logs
                || e.delete_log
                || (wants_value && (e.new.is_some() || (!e.logs.is_empty() && !own_line)))
                // A line is appended before its own commit point: never onto a value.
                || (wants_log && (!e.logs.is_empty() || e.new.is_some()));
            if !clash {
                return i;
            }
            self.seal();
        }
        let i = self.open.edits.len();
        self.open.edits.push(BatchEdit {
            name: name.to_vec(),
            ..Default::default()
        });
        self.open.index.insert(name.to_vec(), i);
        i
    }

    /// [`Self::edit_slot`], recording the serving process as one that staged the edit.
    fn edit_for(&mut self, who: &Caller, name: &[u8], wants_value: bool, wants_log: bool) -> usize {
        let i = self.edit_slot(name, wants_value, wants_log);
        if let Some(e) = self.open.edits.get_mut(i) {
            if !e.pids.contains(&who.pid) {
                e.pids.push(who.pid);
            }
            for fh in &who.handles {
                if !e.handles.contains(fh) {
                    e.handles.push(*fh);
                }
            }
        }
        i
    }

    /// Checks a new ref name and the D/F rules against the effective view.
    fn check_new_name(&mut self, src: &mut dyn RefSource, name: &[u8]) -> R<()> {
        check_for_update(name, true).map_err(|e| Refusal::new(libc::EINVAL, e.to_string()))?;
        let mut i = 0;
        while let Some(pos) = name[i..].iter().position(|&b| b == b'/') {
            let prefix = &name[..i + pos];
            if prefix != b"refs" && self.effective(src, prefix)?.is_some() {
                return Err(Refusal::new(
                    libc::ENOTDIR,
                    format!(
                        "'{}' exists; cannot create '{}'",
                        String::from_utf8_lossy(prefix),
                        String::from_utf8_lossy(name)
                    ),
                ));
            }
            i += pos + 1;
        }
        let mut sub = name.to_vec();
        sub.push(b'/');
        if self.any_ref_below(src, &sub)? {
            return Err(Refusal::new(
                libc::EISDIR,
                format!("'{}' has refs below it", String::from_utf8_lossy(name)),
            ));
        }
        Ok(())
    }

    /// Parses loose-ref content and validates it.
    pub fn parse_ref_content(&self, content: &[u8]) -> R<RefValue> {
        match files::parse_loose_ref(content, self.hash) {
            Ok(LooseRef::Oid(id)) if id.is_null() => Err(Refusal::new(
                libc::EINVAL,
                "the null object id is not a ref value",
            )),
            Ok(LooseRef::Oid(id)) => Ok(RefValue::Val1(id)),
            Ok(LooseRef::Symref(t)) => {
                let flags = RefnameFlags {
                    allow_onelevel: true,
                    refspec_pattern: false,
                };
                check_refname_format(&t, flags)
                    .map_err(|e| Refusal::new(libc::EINVAL, format!("bad symref target: {e}")))?;
                Ok(RefValue::Symref(t))
            }
            Err(e) => Err(Refusal::new(libc::EINVAL, e.to_string())),
        }
    }

    /// A commit point: `name` takes `value` (a rename of a lock, a direct write, an unlink).
    /// Validates first; on refusal nothing changes. The update's reflog entry is only
    /// what the writer appended to `logs/<name>` (as in the files backend, a ref written
    /// without a line gets no entry, and a deleted ref keeps its reflog).
    pub fn commit_ref(
        &mut self,
        src: &mut dyn RefSource,
        who: &Caller,
        name: &[u8],
        value: RefValue,
    ) -> R<()> {
        let old = self.effective(src, name)?;
        if !matches!(value, RefValue::Deletion) {
            if old.is_none() {
                self.check_new_name(src, name)?;
            } else {
                check_for_update(name, true)
                    .map_err(|e| Refusal::new(libc::EINVAL, e.to_string()))?;
            }
            if name == b"HEAD" {
                if let RefValue::Symref(t) = &value {
                    if !t.starts_with(b"refs/") {
                        return Err(Refusal::new(
                            libc::EINVAL,
                            format!(
                                "refusing to point HEAD outside of refs/ ('{}')",
                                String::from_utf8_lossy(t)
                            ),
                        ));
                    }
                }
            }
        }
        let mut lock = name.to_vec();
        lock.extend_from_slice(b".lock");
        if let Some(l) = self.locks.get_mut(&lock) {
            l.changed_through_mount = true;
        }
        let unchanged = match (&old, &value) {
            (None, RefValue::Deletion) => true,
            (Some(o), v) => o == v,
            _ => false,
        };
        if unchanged {
            // Nothing to write; a line the writer appended just before stays the
            // log-only edit it is.
            self.open.awaiting.remove(name);
            return Ok(());
        }
        let i = self.edit_for(who, name, true, false);
        self.open.awaiting.remove(name);
        let seq = self.open.seq;
        let e = &mut self.open.edits[i];
        e.new = Some(value.clone());
        e.expected_old = old;
        self.pending.insert(name.to_vec(), Pending { value, seq });
        Ok(())
    }

    /// A lock was created (`open(x.lock, O_CREAT|O_EXCL)`): if `x` is a ref name,
    /// remember what the ref is now (see [`LockBase`]).
    pub fn note_lock(&mut self, src: &mut dyn RefSource, lock_path: &[u8]) -> R<()> {
        let Some(name) = lock_path.strip_suffix(b".lock") else {
            return Ok(());
        };
        if !valid_ref_name(name) {
            return Ok(());
        }
        let value = self.effective(src, name)?;
        self.locks.insert(
            lock_path.to_vec(),
            LockBase {
                name: name.to_vec(),
                value,
                changed_through_mount: false,
            },
        );
        Ok(())
    }

    /// A lock is renamed onto its ref: unless a commit point through the mount changed
    /// the ref meanwhile, the ref must still have the value it had when the lock was
    /// taken. Otherwise another writer (git on the stack) changed it under the lock:
    /// `EBUSY`, nothing is written, the lock stays.
    pub fn check_lock_base(&mut self, src: &mut dyn RefSource, lock_path: &[u8]) -> R<()> {
        let Some(base) = self.locks.get(lock_path).cloned() else {
            return Ok(());
        };
        // The value is compared whatever happened to the stack: the view also changes
        // without a reload when a failed batch's pending value goes away (a concurrent
        // writer won), and a rename writing what the view then shows must not pass for a
        // no-op that the client is told succeeded.
        if base.changed_through_mount {
            return Ok(());
        }
        let now = self.effective(src, &base.name)?;
        if now != base.value {
            return Err(Refusal::new(
                libc::EBUSY,
                format!(
                    "another writer changed '{}' while the lock was held: it was {} when \
                     the lock was taken and is {} now; the update was not written",
                    String::from_utf8_lossy(&base.name),
                    show_value(base.value.as_ref()),
                    show_value(now.as_ref())
                ),
            ));
        }
        Ok(())
    }

    /// `unlink` of a loose ref: loose-over-packed semantics. With a packed value the ref
    /// falls back to it — no stack change when it is the same value, which is what
    /// `pack-refs --prune` does — and the packed entry is consumed (the ref shows as a
    /// loose file again, so a later plain `rm` deletes it). Without one it is deleted.
    pub fn unlink_ref(&mut self, src: &mut dyn RefSource, who: &Caller, name: &[u8]) -> R<()> {
        if !self.is_loose_ref(src, name)? {
            return Err(Refusal::new(libc::ENOENT, "no such ref"));
        }
        match self.packed.get(name).copied() {
            Some(p) => {
                let v = p.value();
                if !same_object(self.effective(src, name)?.as_ref(), &v) {
                    self.commit_ref(src, who, name, v)?;
                }
                self.packed.remove(name);
                Ok(())
            }
            None => self.commit_ref(src, who, name, RefValue::Deletion),
        }
    }

    /// `unlink(logs/<name>)` or a move of the reflog away: the reflog is deleted.
    pub fn delete_log(&mut self, who: &Caller, name: &[u8]) {
        if self.open.index.contains_key(name) {
            self.seal();
        }
        let i = self.edit_for(who, name, false, true);
        let seq = self.open.seq;
        let e = &mut self.open.edits[i];
        e.delete_log = true;
        self.open.awaiting.remove(name);
        self.pending_logs.insert(
            name.to_vec(),
            PendingLog {
                base: Some(Vec::new()),
                appended: Vec::new(),
                deleted: true,
                base_seq: seq,
                seq,
            },
        );
    }

    /// A reflog line appended to `logs/<name>`: becomes the log record of the update.
    pub fn append_log(&mut self, who: &Caller, name: &[u8], data: &[u8]) -> R<usize> {
        let mut recs = Vec::new();
        for (line_no, _, line) in files::reflog_lines(data) {
            let rec = files::parse_reflog_line(line, self.hash)
                .map_err(|e| Refusal::new(libc::EINVAL, format!("reflog line {line_no}: {e}")))?;
            recs.push(rec);
        }
        for mut rec in recs {
            rec.refname = name.to_vec();
            let i = self.edit_for(who, name, false, true);
            let seq = self.open.seq;
            self.open.edits[i].logs.push(rec.clone());
            self.open
                .awaiting
                .insert(name.to_vec(), std::time::Instant::now());
            let pl = self.pending_logs.entry(name.to_vec()).or_default();
            pl.appended.push((seq, rec));
            pl.seq = seq;
        }
        Ok(data.len())
    }

    /// Replaces the whole reflog of `name` (a rewrite through `logs/x.lock`, the target of
    /// a move). `entries` are oldest first; with none the reflog stays, empty.
    pub fn replace_log(&mut self, who: &Caller, name: &[u8], entries: Vec<LogRecord>) {
        let mut base: Vec<LogRecord> = entries;
        for (i, r) in base.iter_mut().enumerate() {
            r.refname = name.to_vec();
            r.update_index = i as u64 + 1;
        }
        if self.open.index.contains_key(name) {
            self.seal();
        }
        let i = self.edit_for(who, name, false, true);
        let seq = self.open.seq;
        let e = &mut self.open.edits[i];
        e.replace_logs = true;
        e.logs = base.clone();
        base.reverse(); // newest first, as read_log gives
        self.pending_logs.insert(
            name.to_vec(),
            PendingLog {
                base: Some(base),
                appended: Vec::new(),
                deleted: false,
                base_seq: seq,
                seq,
            },
        );
    }

    /// Parses reflog text (a whole file) into records, oldest first.
    pub fn parse_log_text(&self, data: &[u8]) -> R<Vec<LogRecord>> {
        let mut out = Vec::new();
        for (line_no, _, line) in files::reflog_lines(data) {
            let rec = files::parse_reflog_line(line, self.hash)
                .map_err(|e| Refusal::new(libc::EINVAL, format!("reflog line {line_no}: {e}")))?;
            out.push(rec);
        }
        Ok(out)
    }

    /// A new `packed-refs` (renamed over it): the packed layer becomes its content, and
    /// only changes of effective values (refs with no loose file) are committed.
    pub fn commit_packed_refs(
        &mut self,
        src: &mut dyn RefSource,
        who: &Caller,
        content: &[u8],
    ) -> R<()> {
        let parsed = files::parse_packed_refs(content, self.hash)
            .map_err(|e| Refusal::new(libc::EINVAL, format!("packed-refs: {e}")))?;
        let mut new: BTreeMap<Vec<u8>, Packed> = BTreeMap::new();
        for p in parsed {
            check_refname_format(&p.name, RefnameFlags::default())
                .map_err(|e| Refusal::new(libc::EINVAL, format!("packed-refs: {e}")))?;
            new.insert(
                p.name,
                Packed {
                    id: p.id,
                    peeled: p.peeled,
                },
            );
        }
        // Every existing ref has a loose file that shadows its packed value, so only a
        // name that does not exist yet changes its effective value (it is created).
        let mut created: Vec<(Vec<u8>, RefValue)> = Vec::new();
        for (name, p) in &new {
            if self.effective(src, name)?.is_none() {
                created.push((name.clone(), p.value()));
            }
        }
        for (name, v) in created {
            self.commit_ref(src, who, &name, v)?;
        }
        self.packed = new;
        Ok(())
    }

    /// Drops overlay entries that a written batch made redundant (the reader source has
    /// been reloaded first), and entries of names that conflicted.
    pub fn batch_done(&mut self, seq: u64, conflicted: &[Vec<u8>]) {
        self.pending.retain(|_, p| p.seq > seq);
        self.pending_logs.retain(|_, p| p.seq > seq);
        for pl in self.pending_logs.values_mut() {
            pl.appended.retain(|(s, _)| *s > seq);
            if pl.base_seq <= seq {
                pl.base = None;
                pl.deleted = false;
            }
        }
        for n in conflicted {
            self.pending.remove(n);
            self.pending_logs.remove(n);
        }
    }

    /// After a reload by someone else: forget packed-layer entries the stack no longer
    /// agrees with (they would resurface on `rm`).
    pub fn revalidate_packed(&mut self, src: &mut dyn RefSource) {
        if self.packed.is_empty() {
            return;
        }
        let names: Vec<Vec<u8>> = self.packed.keys().cloned().collect();
        for n in names {
            let keep = match (self.effective(src, &n), self.packed.get(&n)) {
                (Ok(have), Some(p)) => same_object(have.as_ref(), &p.value()),
                _ => false,
            };
            if !keep {
                self.packed.remove(&n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// The caller of the staging calls in these tests.
    const ME: Caller = Caller {
        pid: 0,
        handles: Vec::new(),
    };
    use super::*;
    use crate::fs::source::{Conflict, MemSource};
    use crate::transaction::Expected;

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
}
