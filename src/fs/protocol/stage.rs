//! The commit points of the files protocol turned into validated edits of the open batch:
//! a lock's rename, an in-place write, an unlink, a reflog line, a reflog rewrite or
//! deletion — each for an explicit caller ([`Caller`]). Starting a new batch when an edit
//! clashes with the open one is the overlay's; sealing for the window, `--batch-max` and
//! flushes is the batcher's (`batch.rs`).

use crate::files::{self, LooseRef};
use crate::format::{LogRecord, RefValue};
use crate::fs::error::Refusal;
use crate::fs::queue::Batch;
use crate::fs::source::{BatchEdit, RefSource};
use crate::refname::{check_for_update, check_refname_format, RefnameFlags};

use super::*;

impl WriteState {
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

    /// Closes the open batch (queued for the batcher) and opens the next: when an edit
    /// cannot join it (a second value for one ref, a line that must follow a value), or
    /// when the batcher seals it.
    pub(super) fn close_open_batch(&mut self) {
        if !self.open.is_empty() {
            self.last_seq += 1;
            let b = std::mem::replace(&mut self.open, Batch::new(self.last_seq));
            self.queue.push(b);
        }
    }

    /// The batcher (`batch.rs`, the only caller) seals the open batch because its window
    /// passed. A reflog line of a ref (not HEAD)
    /// whose commit point has not arrived yet stays in the new open batch (for at most
    /// [`LINE_WAITS_FOR_RENAME`]), so that the line and its rename land in one table (git
    /// appends the line just before renaming).
    pub(crate) fn seal_for_window(&mut self) {
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
            self.close_open_batch();
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
        self.close_open_batch();
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

    /// The batcher (the only caller) seals the open batch: it holds `--batch-max` edits,
    /// or someone waits for it (fsync, unmount).
    pub(crate) fn seal_all(&mut self) {
        self.close_open_batch();
    }

    /// The last batch that holds a staged edit: the open one if it holds any, else the
    /// one before it (what an `fsync` now waits for).
    pub fn last_staged_seq(&self) -> u64 {
        if self.open.is_empty() {
            self.open.seq - 1
        } else {
            self.open.seq
        }
    }

    /// The edit for `name` in the open batch, creating it (or sealing first when `name`
    /// already has what the new step needs: a value, or a log line). A value joins a
    /// log-only edit only when that edit holds the line a writer appended for it.
    pub(super) fn edit_slot(&mut self, name: &[u8], wants_value: bool, wants_log: bool) -> usize {
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
            self.close_open_batch();
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
    pub(super) fn edit_for(
        &mut self,
        who: &Caller,
        name: &[u8],
        wants_value: bool,
        wants_log: bool,
    ) -> usize {
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
    pub(super) fn check_new_name(&mut self, src: &mut dyn RefSource, name: &[u8]) -> R<()> {
        check_for_update(name, true).map_err(|e| Refusal::new(libc::EINVAL, e.to_string()))?;
        for prefix in dir_prefixes(name) {
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

    /// A loose commit point: `name` takes `value` (a rename of a lock, a direct write, an
    /// unlink), and is a loose file from now on (or gone). Validates first; on refusal
    /// nothing changes. The update's reflog entry is only what the writer appended to
    /// `logs/<name>` (as in the files backend, a ref written without a line gets no entry,
    /// and a deleted ref keeps its reflog).
    pub fn commit_ref(
        &mut self,
        src: &mut dyn RefSource,
        who: &Caller,
        name: &[u8],
        value: RefValue,
    ) -> R<()> {
        let old = self.stage_value(src, who, name, value.clone())?;
        self.written_loose(name, old.as_ref(), &value);
        Ok(())
    }

    /// Stages `name` taking `value` (a commit point's change of its effective value),
    /// validated first; on refusal nothing changes. Returns the ref's effective value
    /// before.
    pub(super) fn stage_value(
        &mut self,
        src: &mut dyn RefSource,
        who: &Caller,
        name: &[u8],
        value: RefValue,
    ) -> R<Option<RefValue>> {
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
            return Ok(old);
        }
        let i = self.edit_for(who, name, true, false);
        self.open.awaiting.remove(name);
        let seq = self.open.seq;
        let e = &mut self.open.edits[i];
        e.new = Some(value.clone());
        e.expected_old = old.clone();
        self.pending.insert(name.to_vec(), Pending { value, seq });
        Ok(old)
    }

    /// A lock was created (`open(x.lock, O_CREAT|O_EXCL)`): if `x` is a ref name,
    /// remember what the ref is now (see [`LockBase`]).
    pub fn note_lock(&mut self, src: &mut dyn RefSource, lock_path: &[u8]) -> R<()> {
        if lock_path == b"packed-refs.lock" {
            self.note_packed_lock();
        }
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

    /// `unlink(logs/<name>)` or a move of the reflog away: the reflog is deleted.
    pub fn delete_log(&mut self, who: &Caller, name: &[u8]) {
        if self.open.index.contains_key(name) {
            self.close_open_batch();
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
            self.close_open_batch();
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
        self.packed_edits_lost(conflicted);
    }
}
