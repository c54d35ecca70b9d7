//! The batch queue: batches of staged edits on their way to the stack, and what became of
//! them. The overlay (`write.rs`) builds the open batch and seals it into the queue; the
//! batcher (`batch.rs`) takes sealed batches, writes them and marks them written; `fsync`
//! waits here for its batch. It has its own lock (see [`BatchQueue`]).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::fs::error::FsError;
use crate::fs::source::BatchEdit;

/// One batch under construction or waiting to be written.
#[derive(Debug, Default)]
pub struct Batch {
    pub seq: u64,
    pub edits: Vec<BatchEdit>,
    pub(crate) index: HashMap<Vec<u8>, usize>,
    /// Names whose log-only edit holds a line a writer appended and whose commit point
    /// (the rename that follows it in git's protocol) has not arrived yet.
    pub(crate) awaiting: HashMap<Vec<u8>, std::time::Instant>,
}

impl Batch {
    pub(crate) fn new(seq: u64) -> Batch {
        Batch {
            seq,
            ..Default::default()
        }
    }
    /// Number of edits.
    pub fn len(&self) -> usize {
        self.edits.len()
    }
    /// Whether the batch holds nothing.
    pub fn is_empty(&self) -> bool {
        self.edits.is_empty()
    }
}

/// At most this many processes keep a failure record (the oldest are dropped, logged).
const PROC_FAILURES_MAX: usize = 4096;

/// At most this many failed batches are remembered (for [`BatchQueue::failed_since`]).
pub(crate) const FAILED_BATCHES_MAX: usize = 1024;

/// Failed edits of one process (see [`BatchQueue::take_failures`]).
#[derive(Debug, Default)]
pub struct ProcFailure {
    /// The process's start time (`/proc/<pid>/stat` field 22), so that a new process
    /// reusing the id is not told of another's failure.
    pub start: Option<u64>,
    /// The refs whose edits failed.
    pub names: Vec<Vec<u8>>,
}

/// An edit of a written batch that was not written, for one process that staged it.
#[derive(Debug)]
pub(crate) struct LostEdit {
    /// The process (thread group id).
    pub pid: u32,
    /// Its start time (see [`ProcFailure::start`]).
    pub start: u64,
    /// The ref.
    pub name: Vec<u8>,
}

/// The batch queue: sealed batches on their way to the stack and what became of them.
///
/// Lock order: the state lock (`Shared::inner`) may be held when this lock is taken
/// (sealing, staging's wake-up, `reftablefs status`), never the other way round.
#[derive(Debug, Default)]
pub struct BatchQueue {
    q: Mutex<Queue>,
    /// Signalled for the batcher: a batch was sealed, an edit staged, a flush requested,
    /// the mount is stopping.
    pub(crate) work: Condvar,
    /// Signalled for fsync waiters: a batch was written (or failed), the batcher is gone.
    written: Condvar,
}

/// What [`BatchQueue`]'s lock protects.
#[derive(Debug, Default)]
pub(crate) struct Queue {
    /// Sealed batches waiting for the batcher, oldest first.
    pub(crate) sealed: VecDeque<Batch>,
    /// Highest batch sequence number written (or failed) so far.
    pub(crate) durable_seq: u64,
    /// Batches that failed in part or whole, with the reason (for unmount's flush).
    pub(crate) failed: BTreeMap<u64, String>,
    /// A flush (fsync, unmount) asks the batcher not to wait for the window.
    pub(crate) flush_requested: bool,
    /// When the open batch (by sequence number) was first seen with an edit.
    pub(crate) open_since: Option<(u64, Instant)>,
    /// Edits that could not be written, by the process that staged them (thread group
    /// id): its next `fsync` on the mount fails with EIO and takes the record (Linux's
    /// errseq rule for writeback errors: each failure is reported once, to whoever
    /// wrote the data).
    pub(crate) proc_failures: HashMap<u32, ProcFailure>,
    /// The batcher thread ended: nothing more will be written.
    pub(crate) batcher_gone: bool,
}

impl BatchQueue {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Queue> {
        self.q.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a sealed batch (sequence numbers in increasing order) and wakes the batcher.
    pub fn push(&self, batch: Batch) {
        self.lock().sealed.push_back(batch);
        self.work.notify_all();
    }

    /// Wakes the batcher (an edit was staged, the mount is stopping). Takes the lock, so
    /// that a batcher between looking at the open batch and waiting cannot miss it.
    pub fn kick(&self) {
        drop(self.lock());
        self.work.notify_all();
    }

    /// Asks the batcher to write the open batch without waiting for its window.
    pub fn request_flush(&self) {
        self.lock().flush_requested = true;
        self.work.notify_all();
    }

    /// The next sealed batch, oldest first (tests; the batcher pops in `next_batch`).
    #[cfg(test)]
    pub fn pop(&self) -> Option<Batch> {
        self.lock().sealed.pop_front()
    }

    /// Number of sealed batches waiting.
    pub fn sealed_len(&self) -> usize {
        self.lock().sealed.len()
    }

    /// How long the open batch `seq` has been waiting, if the batcher has seen it.
    pub fn window_age(&self, seq: u64) -> Option<Duration> {
        match self.lock().open_since {
            Some((s, t)) if s == seq => Some(t.elapsed()),
            _ => None,
        }
    }

    /// Batch `seq` was written: `failure` says why some or all of its edits were not, and
    /// `lost` names them for each process that staged them. Wakes fsync waiters.
    pub(crate) fn mark_written(&self, seq: u64, failure: Option<String>, lost: Vec<LostEdit>) {
        let mut q = self.lock();
        if let Some(why) = failure {
            q.failed.insert(seq, why);
        }
        for l in lost {
            q.record_failure(l);
        }
        q.durable_seq = q.durable_seq.max(seq);
        // Keep the failure record bounded.
        while q.failed.len() > FAILED_BATCHES_MAX {
            q.failed.pop_first();
        }
        drop(q);
        self.written.notify_all();
    }

    /// The batcher ended: waiters stop waiting.
    pub fn set_batcher_gone(&self) {
        self.lock().batcher_gone = true;
        self.written.notify_all();
        self.work.notify_all();
    }

    /// Highest batch sequence number written (or failed).
    pub fn durable_seq(&self) -> u64 {
        self.lock().durable_seq
    }

    /// Waits until every batch up to `seq` is written (group commit: every waiter shares
    /// the next batch). EIO if the batcher is gone with batches unwritten.
    pub fn wait_written(&self, seq: u64) -> Result<(), FsError> {
        let mut q = self.lock();
        while q.durable_seq < seq && !q.batcher_gone {
            q = self
                .written
                .wait_timeout(q, Duration::from_millis(100))
                .map(|r| r.0)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        if q.durable_seq < seq {
            return Err(FsError::EIO);
        }
        Ok(())
    }

    /// Waits until a batch is written (or `timeout` passes).
    pub fn wait_progress(&self, timeout: Duration) {
        let q = self.lock();
        if q.batcher_gone {
            return;
        }
        let _ = self.written.wait_timeout(q, timeout);
    }

    /// Whether a batch numbered `seq` or later failed in part or whole.
    pub fn failed_since(&self, seq: u64) -> bool {
        self.lock().failed.range(seq..).next().is_some()
    }

    /// Takes process `pid`'s record of failed edits (each failure is reported once).
    pub fn take_failures(&self, pid: u32) -> Option<ProcFailure> {
        self.lock().proc_failures.remove(&pid)
    }
}

impl Queue {
    fn record_failure(&mut self, l: LostEdit) {
        if !self.proc_failures.contains_key(&l.pid) && self.proc_failures.len() >= PROC_FAILURES_MAX
        {
            if let Some(&old) = self.proc_failures.keys().next() {
                self.proc_failures.remove(&old);
                log::warn!(
                    "reftablefs: too many processes with unreported failures: \
                     process {old} will not be told by fsync"
                );
            }
        }
        let f = self.proc_failures.entry(l.pid).or_default();
        if f.start != Some(l.start) {
            f.start = Some(l.start);
            f.names.clear();
        }
        if f.names.len() < 64 {
            f.names.push(l.name);
        }
    }
}
