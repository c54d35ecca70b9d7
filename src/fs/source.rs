//! The seam between the FUSE adapter and the ref storage.
//!
//! Two roles, two traits. [`RefSource`] reads: the small set of primitives a ref view
//! serves requests from (point and range reads through one cached, reseekable iterator,
//! reflog reads, reload detection). [`RefWriter`] writes: committing a batch and the
//! stack's maintenance, owned by the batcher alone; a read-only mount makes none.
//! [`MemSource`] implements both in memory for unit tests (shared behind a mutex, one
//! store for a reader and a writer, as a mount opens one stack twice); the real stack is
//! adapted in `stack_source.rs`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::format::{HashKind, LogRecord, RefRecord, RefValue};
use crate::transaction::{Expected, LogAllRefUpdates};
use crate::{Error, Result};

/// Appended to a name, gives a key past every record of that name and before every
/// longer valid name: refnames cannot contain control characters, and in log keys the
/// name is followed by a NUL, which sorts below it.
pub const NEXT_NAME: u8 = 1;

/// One ref change of a batch, with the log records that go with it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchEdit {
    /// Full refname (`HEAD`, `refs/heads/x`).
    pub name: Vec<u8>,
    /// The new value (`RefValue::Deletion` deletes the ref, not its reflog: in the files
    /// backend a reflog goes only with `logs/…`); `None` for a log-only edit.
    pub new: Option<RefValue>,
    /// The value the mount believed the ref had when the edit was accepted (`None`:
    /// absent). Checked under the stack lock at commit time (only when `new` is set).
    pub expected_old: Option<RefValue>,
    /// Log records to add. With `replace_logs` unset, at most one, whose update index is
    /// assigned by the commit; with it set, each carries its own update index.
    pub logs: Vec<LogRecord>,
    /// The reflog becomes exactly `logs` (a rewrite; with no records it stays as an
    /// empty reflog, git's existence marker).
    pub replace_logs: bool,
    /// The reflog is deleted (`unlink logs/x`, a move away).
    pub delete_log: bool,
    /// The reflog exists from now on, empty unless it has entries (a `logs/x` file
    /// created through the mount: git's existence marker, written only if the stack has
    /// no reflog for the name).
    pub create_log: bool,
    /// The processes (thread group ids; 0 unknown) that staged this edit: if it cannot
    /// be written, their next `fsync` fails.
    pub pids: Vec<u32>,
    /// The mount's open-file handles through which it was staged (a lock renamed onto the
    /// ref, a ref written in place, a reflog appended to): if it cannot be written, their
    /// `close` and `fsync` fail.
    pub handles: Vec<u64>,
}

impl BatchEdit {
    /// Whether the edit writes git's existence marker when the stack has no reflog for
    /// the name: the reflog was created through the mount and nothing else was written
    /// to it (an appended line, a rewrite or a deletion says it all).
    pub fn creates_empty_log(&self) -> bool {
        self.create_log && self.logs.is_empty() && !self.replace_logs && !self.delete_log
    }

    /// [`expected_old`](Self::expected_old) as the transaction checks it: an absent ref
    /// must not exist, an id must match, a symref must have that target.
    pub fn expected(&self) -> Expected {
        match &self.expected_old {
            None | Some(RefValue::Deletion) => Expected::MustNotExist,
            Some(RefValue::Val1(id)) | Some(RefValue::Val2 { value: id, .. }) => Expected::Oid(*id),
            Some(RefValue::Symref(t)) => Expected::Symref(t.clone()),
        }
    }
}

/// An edit of a batch whose expected old value did not hold at commit (a concurrent
/// writer won): the transaction's typed conflict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// The ref.
    pub name: Vec<u8>,
    /// What the commit expected ([`BatchEdit::expected`]).
    pub expected: Expected,
    /// What the stack held under the lock (`None`: absent).
    pub found: Option<RefValue>,
}

/// What a commit of a batch did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommitOutcome {
    /// Edits written to the stack.
    pub applied: usize,
    /// Edits whose expected old value no longer matched (a concurrent writer won). These
    /// were *not* written.
    pub conflicts: Vec<Conflict>,
    /// Edits that could not be written for another reason (a D/F conflict with a ref
    /// another writer made, an I/O error after part of a split batch was written): their
    /// names and why. These were *not* written.
    pub failed: Vec<(Vec<u8>, String)>,
}

/// A [`RefSource::scan_refs`] visitor: sees each live ref (and the key buffer to leave
/// a seek target in) and says what it wants next.
pub type Visit<'a> = &'a mut dyn FnMut(&RefRecord, &mut Vec<u8>) -> Step;

/// What a [`RefSource::scan_refs`] visitor wants next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The next live ref.
    Next,
    /// Reseek to the key the visitor left in the key buffer.
    Seek,
    /// Stop scanning.
    Stop,
}

/// Reading the ref storage: what a ref view serves requests from.
pub trait RefSource: Send {
    /// The repository's object hash.
    fn hash_kind(&self) -> HashKind;
    /// Reloads when the storage changed underneath (cheap when it did not); `true` if the
    /// set of tables changed.
    fn reload(&mut self) -> Result<bool>;
    /// A counter bumped by every reload that changed what is stored.
    fn generation(&self) -> u64;
    /// Finds the first live (non-tombstone) ref whose name is `>= key`, through the cached
    /// reseekable iterator, and copies it into `out`. `false` at the end.
    fn first_ref_at_or_after(&mut self, key: &[u8], out: &mut RefRecord) -> Result<bool>;
    /// Visits live refs in order from `start`: after each one the visitor says whether to
    /// go on with the next, reseek (to the key it left in the buffer), or stop. One
    /// iterator for the whole scan (the cached one for a stack).
    fn scan_refs(&mut self, start: &[u8], visit: Visit<'_>) -> Result<()> {
        let mut key = start.to_vec();
        let mut rec = RefRecord::default();
        loop {
            if !self.first_ref_at_or_after(&key, &mut rec)? {
                return Ok(());
            }
            match visit(&rec, &mut key) {
                Step::Stop => return Ok(()),
                Step::Seek => {}
                Step::Next => {
                    key.clear();
                    key.extend_from_slice(&rec.name);
                    key.push(NEXT_NAME);
                }
            }
        }
    }
    /// Finds the first refname `>= key` that has a reflog (a live log record, the
    /// existence marker included) and copies it into `out`. `false` at the end.
    fn first_log_at_or_after(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool>;
    /// The reflog of `name`, newest first, tombstones skipped (existence markers kept).
    fn read_log(&mut self, name: &[u8], out: &mut Vec<LogRecord>) -> Result<()>;
    /// The batcher, holding the state lock, is about to reload this (reader) source and
    /// drop the pending entries of the batch it just committed: reloads may see the
    /// mount's own new table again (until now they kept the old table set, so that no
    /// read showed the batch twice).
    fn acknowledge_own_commit(&mut self) {}
    /// Whether the last reload that changed something brought tables another writer made
    /// (then names the kernel caches may be stale); `false` when every new table is the
    /// mount's own (its changes went through the kernel already).
    fn last_change_external(&self) -> bool {
        true
    }
    /// The newest entry of `name`'s reflog, tombstones and existence markers skipped:
    /// its update index and time (Unix seconds); `None` when it has none. One seek of
    /// the log index.
    fn newest_log(&mut self, name: &[u8]) -> Result<Option<(u64, u64)>> {
        let mut out = Vec::new();
        self.read_log(name, &mut out)?;
        Ok(out
            .iter()
            .find(|l| !l.deleted && !crate::stack::is_existence_marker(l))
            .map(|l| (l.update_index, l.time)))
    }
    /// When the ref `name` last changed (Unix seconds): the time of the transaction that
    /// wrote its record, else its newest reflog entry's; `None` when neither is known.
    /// Asked right after a lookup of `name`, whose record it reuses (no further seek where
    /// the source can tell; see `ref_times.rs`).
    fn ref_time(&mut self, name: &[u8]) -> Result<Option<u64>> {
        Ok(self.newest_log(name)?.map(|(_, t)| t))
    }
    /// The highest update index stored (0 when unknown: every reflog then counts as
    /// changed at each reload).
    fn max_update_index(&self) -> u64 {
        0
    }
}

/// Writing the ref storage: the batcher's alone (one per writable view; a read-only
/// mount makes none).
pub trait RefWriter: Send {
    /// Writes `edits` as one table (one fsync round) if every expected old value still
    /// holds under the stack lock; edits whose expectation fails are reported in
    /// [`CommitOutcome::conflicts`] and not written, the others are.
    fn commit(&mut self, edits: &[BatchEdit]) -> Result<CommitOutcome>;
    /// Whether deferred maintenance (compaction) is due, and how urgently: `Some(true)` when
    /// it should run now (too many tables), `Some(false)` when it can wait for an idle
    /// moment, `None` when nothing is due.
    fn maintenance_due(&self) -> Option<bool> {
        None
    }
    /// Runs deferred maintenance (geometric compaction). Best effort.
    fn maintain(&mut self) -> Result<()> {
        Ok(())
    }
    /// Number of fsync calls made so far (for the batching benchmark), if known.
    fn fsync_count(&self) -> u64 {
        0
    }
    /// The stack's last table: its highest update index and file name, if known.
    fn last_table(&self) -> Option<(u64, String)> {
        None
    }
}

/// Looks up one ref by exact name (tombstones count as absent).
pub fn read_ref(src: &mut dyn RefSource, name: &[u8], out: &mut RefRecord) -> Result<bool> {
    Ok(src.first_ref_at_or_after(name, out)? && out.name == name)
}

/// An in-memory [`RefSource`] for unit tests.
#[derive(Debug, Default)]
pub struct MemSource {
    /// Live refs by name.
    pub refs: BTreeMap<Vec<u8>, RefValue>,
    /// Log records by (refname, !update_index) so that newer entries sort first.
    pub logs: BTreeMap<(Vec<u8>, u64), LogRecord>,
    /// Bumped by `touch` (simulating another writer).
    pub generation: u64,
    /// The generation that `reload` last reported.
    seen_generation: u64,
    /// When set, every read fails with a format error (simulating a corrupt table).
    pub fail: bool,
    /// Next update index.
    pub next_update_index: u64,
    /// Number of commits (tables) written.
    pub commits: u64,
}

impl MemSource {
    /// An empty SHA-1 store.
    pub fn new() -> Self {
        MemSource {
            next_update_index: 1,
            ..Default::default()
        }
    }

    /// Sets a ref directly (as another writer would) and bumps the generation.
    pub fn set(&mut self, name: &str, value: RefValue) {
        self.refs.insert(name.as_bytes().to_vec(), value);
        self.generation += 1;
    }

    /// Adds a log record directly.
    pub fn add_log(&mut self, rec: LogRecord) {
        self.next_update_index = self.next_update_index.max(rec.update_index + 1);
        self.logs
            .insert((rec.refname.clone(), !rec.update_index), rec);
        self.generation += 1;
    }

    fn drop_logs(&mut self, name: &[u8]) {
        let stale: Vec<_> = self
            .logs
            .range((name.to_vec(), 0)..)
            .take_while(|((n, _), _)| n == name)
            .map(|(k, _)| k.clone())
            .collect();
        for k in stale {
            self.logs.remove(&k);
        }
    }

    fn check(&self) -> Result<()> {
        if self.fail {
            return Err(Error::format("mem.ref", 0, "simulated corruption"));
        }
        Ok(())
    }
}

impl RefSource for MemSource {
    fn hash_kind(&self) -> HashKind {
        HashKind::Sha1
    }

    fn reload(&mut self) -> Result<bool> {
        self.check()?;
        let changed = self.seen_generation != self.generation;
        self.seen_generation = self.generation;
        Ok(changed)
    }

    fn generation(&self) -> u64 {
        self.generation
    }

    fn max_update_index(&self) -> u64 {
        self.next_update_index.saturating_sub(1)
    }

    fn first_ref_at_or_after(&mut self, key: &[u8], out: &mut RefRecord) -> Result<bool> {
        self.check()?;
        match self.refs.range(key.to_vec()..).next() {
            Some((name, value)) => {
                out.name.clear();
                out.name.extend_from_slice(name);
                out.value = value.clone();
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn first_log_at_or_after(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.check()?;
        match self.logs.range((key.to_vec(), 0)..).next() {
            Some(((name, _), _)) => {
                out.clear();
                out.extend_from_slice(name);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn read_log(&mut self, name: &[u8], out: &mut Vec<LogRecord>) -> Result<()> {
        self.check()?;
        out.clear();
        for ((n, _), rec) in self.logs.range((name.to_vec(), 0)..) {
            if n != name {
                break;
            }
            out.push(rec.clone());
        }
        Ok(())
    }
}

impl RefWriter for MemSource {
    fn commit(&mut self, edits: &[BatchEdit]) -> Result<CommitOutcome> {
        self.check()?;
        let mut outcome = CommitOutcome::default();
        let ui = self.next_update_index;
        for e in edits {
            if let Some(new) = &e.new {
                let current = self.refs.get(&e.name).cloned();
                if current != e.expected_old {
                    outcome.conflicts.push(Conflict {
                        name: e.name.clone(),
                        expected: e.expected(),
                        found: current,
                    });
                    continue;
                }
                match new {
                    RefValue::Deletion => {
                        self.refs.remove(&e.name);
                    }
                    v => {
                        self.refs.insert(e.name.clone(), v.clone());
                    }
                }
            }
            if e.replace_logs || e.delete_log {
                self.drop_logs(&e.name);
            }
            // git's existence marker: the reflog exists, empty (a rewrite to nothing, or
            // a reflog file created where the stack has none).
            let has_log = self
                .logs
                .range((e.name.clone(), 0)..)
                .next()
                .is_some_and(|((n, _), _)| *n == e.name);
            let created = e.creates_empty_log() && !has_log;
            if (e.replace_logs && e.logs.is_empty()) || created {
                self.logs.insert(
                    (e.name.clone(), !ui),
                    LogRecord {
                        refname: e.name.clone(),
                        update_index: ui,
                        ..LogRecord::default()
                    },
                );
            }
            for l in &e.logs {
                let mut l = l.clone();
                if !e.replace_logs {
                    l.update_index = ui;
                }
                l.refname.clone_from(&e.name);
                self.logs.insert((e.name.clone(), !l.update_index), l);
            }
            outcome.applied += 1;
        }
        if outcome.applied > 0 {
            self.next_update_index += 1;
            self.commits += 1;
            self.generation += 1;
        }
        Ok(outcome)
    }
}

/// One in-memory store shared by a reader and a writer source, as a mount's two stack
/// objects share one directory (each call takes the lock for its moment).
pub type SharedMem = Arc<Mutex<MemSource>>;

fn locked(m: &SharedMem) -> MutexGuard<'_, MemSource> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl RefSource for SharedMem {
    fn hash_kind(&self) -> HashKind {
        locked(self).hash_kind()
    }
    fn reload(&mut self) -> Result<bool> {
        locked(self).reload()
    }
    fn generation(&self) -> u64 {
        locked(self).generation()
    }
    fn max_update_index(&self) -> u64 {
        locked(self).max_update_index()
    }
    fn first_ref_at_or_after(&mut self, key: &[u8], out: &mut RefRecord) -> Result<bool> {
        locked(self).first_ref_at_or_after(key, out)
    }
    fn first_log_at_or_after(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        locked(self).first_log_at_or_after(key, out)
    }
    fn read_log(&mut self, name: &[u8], out: &mut Vec<LogRecord>) -> Result<()> {
        locked(self).read_log(name, out)
    }
}

impl RefWriter for SharedMem {
    fn commit(&mut self, edits: &[BatchEdit]) -> Result<CommitOutcome> {
        locked(self).commit(edits)
    }
}

/// How generated reflog entries are written (commit points without an appended line).
#[derive(Clone, Debug)]
pub struct LogSettings {
    /// `core.logAllRefUpdates`.
    pub log_all: LogAllRefUpdates,
    /// Committer name and email for generated entries.
    pub name: Vec<u8>,
    pub email: Vec<u8>,
}

impl Default for LogSettings {
    fn default() -> Self {
        LogSettings {
            log_all: LogAllRefUpdates::True,
            name: b"reftablefs".to_vec(),
            email: b"reftablefs@localhost".to_vec(),
        }
    }
}
