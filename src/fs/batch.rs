//! The batcher: one thread that turns sealed batches of the pending layer into reftable
//! commits — one table and one fsync round per batch, however many refs — through the
//! writer source ([`RefWriter`]: one stack object with one writer and its scratch buffer,
//! reused for every batch), which the thread owns: nothing else can wait for a commit's
//! fsyncs. A read-only view has no writer and no batcher. A batch is sealed when the
//! window since its first edit has passed, when it holds `--batch-max` edits, or when
//! someone waits for it (fsync, syncfs, unmount).
//! Commit points never wait for the batcher; only fsync-style calls do.
//!
//! The batch queue ([`BatchQueue`]) has its own lock: sealed batches waiting to be
//! written, the highest sequence number written, the batches and processes whose edits
//! failed, flush requests and the open batch's window start. The open batch itself is
//! built in the write overlay (`write.rs`), under the state lock, since staging an edit
//! must be atomic with the overlay's view; sealing moves it into the queue. fsync callers
//! wait on the queue's lock, never on the state lock.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::fs::procfs;
use crate::fs::queue::{Batch, LostEdit};
use crate::fs::record::{log_error, Recorder};
use crate::fs::source::{BatchEdit, CommitOutcome, RefWriter};
use crate::fs::state::Shared;

/// How long the batcher must be idle before it compacts the stack.
const IDLE_BEFORE_COMPACTION: Duration = Duration::from_secs(5);

/// The processes to tell (by their next `fsync`) that `edits` were not written: each
/// staging process still alive (a process that is gone has no one to tell). Reads
/// `/proc`, so it runs without locks.
fn lost_by_process(edits: &[&BatchEdit]) -> Vec<LostEdit> {
    let mut out = Vec::new();
    for edit in edits {
        for &pid in &edit.pids {
            let Some(start) = (pid != 0).then(|| procfs::start_time(pid)).flatten() else {
                continue;
            };
            out.push(LostEdit {
                pid,
                start,
                name: edit.name.clone(),
            });
        }
    }
    out
}

/// The batcher's writer source (a read-only mount has no batcher).
type Writer = Box<dyn RefWriter>;

/// Runs deferred compaction when due (`urgent_only`: only when tables pile up).
fn maintain(writer: &mut Writer, urgent_only: bool) {
    match writer.maintenance_due() {
        Some(urgent) if urgent || !urgent_only => {
            if let Err(e) = writer.maintain() {
                log_error("compact", b"tables.list", &e);
            }
        }
        _ => {}
    }
}

/// Writes a batch through the writer source (the batcher's own, so no request waits for
/// it). The source waits briefly for a `tables.list.lock` held by a live commit and gives
/// up on one held for longer (see `stack_source.rs`).
fn commit(writer: &mut Writer, batch: &Batch, rec: &Recorder) -> crate::Result<CommitOutcome> {
    let r = writer.commit(&batch.edits);
    if r.as_ref().is_ok_and(|o| o.applied > 0) {
        rec.committed(writer.last_table());
    }
    r
}

/// Why a whole batch could not be written, for its log line: a held `tables.list.lock`
/// says how old it is, who holds it and how to remove a stale one. Called without the
/// state lock ([`crate::lockfile::diagnose`] reads only `/proc` and the lock itself).
fn why_not_written(e: &crate::Error) -> String {
    match e {
        crate::Error::Lock(path) => {
            let what = match crate::lockfile::diagnose(path) {
                Ok(Some(d)) => d.to_string(),
                Ok(None) => format!("{}: released meanwhile", path.display()),
                Err(e) => format!("{}: {e}", path.display()),
            };
            format!(
                "the stack is locked by another writer ({what}); a live git holds \
                 tables.list.lock for milliseconds, so a git or mount that was killed \
                 probably left it: `reftablefs unlock GITDIR` removes a lock proven stale"
            )
        }
        e => e.to_string(),
    }
}

/// Starts the batcher thread, which owns `writer` (another stack object over the same
/// stack as the reader; a read-only view starts none).
pub fn spawn(shared: Arc<Shared>, mut writer: Writer) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("reftablefs-batch".into())
        .spawn(move || {
            run(&shared, &mut writer);
            shared.queue.set_batcher_gone();
        })
}

/// Waits for the next batch to write; `None` when stopping with nothing left.
///
/// Takes the state lock (to look at and seal the open batch), then the queue's lock; it
/// waits on the queue's lock only, holding it from its look at the open batch until the
/// wait, so that an edit staged meanwhile (whose wake-up takes the queue's lock) is never
/// missed.
fn next_batch(shared: &Shared, writer: &mut Writer) -> Option<Batch> {
    let queue = &*shared.queue;
    loop {
        let mut g = shared.lock();
        let mut q = queue.lock();
        if let Some(b) = q.sealed.pop_front() {
            return Some(b);
        }
        let stopping = shared.stopping();
        if !g.w.open.is_empty() {
            let seq = g.w.open.seq;
            let since = match q.open_since {
                Some((s, t)) if s == seq => t,
                _ => {
                    let now = Instant::now();
                    q.open_since = Some((seq, now));
                    now
                }
            };
            let waited = since.elapsed();
            if stopping || q.flush_requested || g.w.open.len() >= shared.batch.max {
                // Sealing queues the batch (under the queue's lock).
                drop(q);
                g.w.seal_all();
                continue;
            }
            if waited >= shared.batch.window {
                q.open_since = None;
                drop(q);
                g.w.seal_for_window();
                continue;
            }
            drop(g);
            let left = shared.batch.window - waited;
            let _ = queue
                .work
                .wait_timeout(q, left)
                .unwrap_or_else(|p| p.into_inner());
            continue;
        }
        q.flush_requested = false;
        if stopping {
            return None;
        }
        drop(g);
        let (q, timeout) = queue
            .work
            .wait_timeout(q, IDLE_BEFORE_COMPACTION)
            .unwrap_or_else(|p| p.into_inner());
        drop(q);
        if timeout.timed_out() {
            let g = shared.lock();
            let idle = g.w.open.is_empty() && queue.sealed_len() == 0;
            drop(g);
            if idle {
                // Idle: compact now, outside the state lock.
                maintain(writer, false);
            }
        }
    }
}

fn run(shared: &Shared, writer: &mut Writer) {
    while let Some(batch) = next_batch(shared, writer) {
        // The space held for this batch goes back to the file system, for its table.
        shared.lock().reserve.make_room(batch.seq);
        let result = commit(writer, &batch, &shared.rec);
        // Before the state lock: the request threads need it, and the diagnosis of a
        // held lock must never wait for them.
        let why_failed = result.as_ref().err().map(why_not_written);
        let mut g = shared.lock();
        // The reader sees the new table and the pending entries go away in one step under
        // the state lock (until now the reader kept the old tables: no read shows the
        // batch twice, nor loses it).
        g.src.acknowledge_own_commit();
        let _ = g.refresh();
        let mut lost: Vec<&BatchEdit> = Vec::new();
        match &result {
            Ok(out) => {
                for c in &out.conflicts {
                    let Some(mine) = batch.edits.iter().find(|e| e.name == c.name) else {
                        continue;
                    };
                    let why = format!(
                        "conflict with a concurrent writer: expected {}, found {}; \
                         the concurrent value stays, this update ({}) was not written",
                        show_expected(&c.expected),
                        show(c.found.as_ref()),
                        show(mine.new.as_ref())
                    );
                    log_error("commit", &c.name, &why);
                    shared.rec.conflict(&c.name, &why);
                    lost.push(mine);
                }
                for (name, why) in &out.failed {
                    let Some(mine) = batch.edits.iter().find(|e| &e.name == name) else {
                        continue;
                    };
                    let why = format!("not written: {why}");
                    log_error("commit", name, &why);
                    shared.rec.conflict(name, &why);
                    lost.push(mine);
                }
            }
            Err(e) => {
                let why = why_failed.unwrap_or_else(|| e.to_string());
                log::error!(
                    "reftablefs: commit: batch of {} edits not written: {why}",
                    batch.len()
                );
                for edit in &batch.edits {
                    log_error("commit", &edit.name, &"not written (see above)");
                    shared
                        .rec
                        .conflict(&edit.name, &format!("not written: {why}"));
                }
                lost.extend(batch.edits.iter());
            }
        }
        let failure = (!lost.is_empty()).then(|| format!("{} edits not written", lost.len()));
        let names: Vec<Vec<u8>> = lost.iter().map(|e| e.name.clone()).collect();
        for edit in &lost {
            g.mark_handles_failed(edit);
        }
        g.w.batch_done(batch.seq, &names);
        let idle = g.w.open.is_empty() && shared.queue.sealed_len() == 0;
        g.reserve.written(batch.seq, idle);
        drop(g);
        let by_process = lost_by_process(&lost);
        let names: Vec<&[u8]> = batch.edits.iter().map(|e| e.name.as_slice()).collect();
        shared.queue_changed_dirs(&names);
        shared.queue_changed_times(&names);
        let _ = shared.lock().refresh();
        // fsync waiters return from here on: the view shows the batch.
        shared.queue.mark_written(batch.seq, failure, by_process);
        maintain(writer, true);
    }
    // Unmounting: leave the stack compacted.
    maintain(writer, false);
}

/// A ref value for a log line.
/// What a commit expected, as [`show`] prints the value the mount believed the ref had.
fn show_expected(e: &crate::transaction::Expected) -> String {
    use crate::transaction::Expected;
    match e {
        Expected::MustNotExist => "absent".into(),
        Expected::Oid(id) => id.to_string(),
        Expected::Symref(t) => format!("ref: {}", String::from_utf8_lossy(t)),
        Expected::MustExist => "present".into(),
        Expected::Any => "any value".into(),
    }
}

fn show(v: Option<&crate::format::RefValue>) -> String {
    use crate::format::RefValue;
    match v {
        None | Some(RefValue::Deletion) => "absent".into(),
        Some(RefValue::Val1(id)) | Some(RefValue::Val2 { value: id, .. }) => id.to_string(),
        Some(RefValue::Symref(t)) => format!("ref: {}", String::from_utf8_lossy(t)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Condvar, Mutex, MutexGuard};

    use crate::format::{HashKind, LogRecord, ObjectId, RefRecord, RefValue};
    use crate::fs::error::FsError;
    use crate::fs::ino::ROOT;
    use crate::fs::queue::{BatchQueue, FAILED_BATCHES_MAX};
    use crate::fs::source::LogSettings;
    use crate::fs::source::{MemSource, RefSource};
    use crate::fs::state::BatchSettings;

    /// Bound on every wait of these tests (generous: a loaded machine is slow, and a
    /// wait that should end ends long before).
    const BOUND: Duration = Duration::from_secs(20);

    fn lost(pid: u32, start: u64, name: &str) -> LostEdit {
        LostEdit {
            pid,
            start,
            name: name.as_bytes().to_vec(),
        }
    }

    /// `wait_written` on another thread, its result sent back.
    fn waiter(q: &Arc<BatchQueue>, seq: u64) -> mpsc::Receiver<Result<(), FsError>> {
        let (tx, rx) = mpsc::channel();
        let q = q.clone();
        std::thread::spawn(move || {
            let _ = tx.send(q.wait_written(seq));
        });
        rx
    }

    #[test]
    fn a_waiter_returns_once_its_batch_is_written() {
        let q = Arc::new(BatchQueue::default());
        let rx = waiter(&q, 2);
        q.mark_written(1, None, Vec::new());
        assert!(
            rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "returned with batch 2 unwritten"
        );
        q.mark_written(2, None, Vec::new());
        assert_eq!(rx.recv_timeout(BOUND), Ok(Ok(())));
        assert_eq!(q.durable_seq(), 2);
        // Already written: no wait.
        assert_eq!(q.wait_written(1), Ok(()));
    }

    #[test]
    fn a_waiter_gets_eio_when_the_batcher_is_gone() {
        let q = Arc::new(BatchQueue::default());
        let rx = waiter(&q, 1);
        q.set_batcher_gone();
        assert_eq!(rx.recv_timeout(BOUND), Ok(Err(FsError::EIO)));
        assert_eq!(q.wait_written(0), Ok(()), "nothing to wait for");
    }

    #[test]
    fn a_process_s_failures_are_taken_once() {
        let q = BatchQueue::default();
        q.mark_written(1, None, Vec::new());
        q.mark_written(
            2,
            Some("1 edits not written".into()),
            vec![lost(7, 100, "refs/heads/a")],
        );
        q.mark_written(
            3,
            Some("1 edits not written".into()),
            vec![lost(7, 100, "refs/heads/b")],
        );
        assert!(
            q.take_failures(8).is_none(),
            "another process staged nothing"
        );
        let f = q.take_failures(7).expect("process 7's failures");
        assert_eq!(f.start, Some(100));
        assert_eq!(
            f.names,
            vec![b"refs/heads/a".to_vec(), b"refs/heads/b".to_vec()]
        );
        assert!(q.take_failures(7).is_none(), "reported once");
        assert!(q.failed_since(2) && q.failed_since(3));
        assert!(!q.failed_since(4));
    }

    #[test]
    fn a_new_process_with_a_reused_id_is_not_told_the_old_one_s_failures() {
        let q = BatchQueue::default();
        q.mark_written(1, Some("x".into()), vec![lost(7, 100, "refs/heads/old")]);
        q.mark_written(2, Some("x".into()), vec![lost(7, 200, "refs/heads/new")]);
        let f = q.take_failures(7).expect("failures");
        assert_eq!(f.start, Some(200));
        assert_eq!(f.names, vec![b"refs/heads/new".to_vec()]);
    }

    #[test]
    fn sealed_batches_come_out_in_order_and_failures_stay_bounded() {
        let mut w = crate::fs::protocol::WriteState::new(HashKind::Sha1, LogSettings::default());
        let mut m = MemSource::new();
        m.set("refs/heads/a", RefValue::Val1(id(1)));
        for n in 2..5 {
            w.commit_ref(
                &mut m,
                &crate::fs::protocol::Caller::default(),
                b"refs/heads/a",
                RefValue::Val1(id(n)),
            )
            .expect("staged");
            w.seal_all();
        }
        let q = w.queue().clone();
        let seqs: Vec<u64> = std::iter::from_fn(|| q.pop()).map(|b| b.seq).collect();
        assert_eq!(seqs, vec![1, 2, 3]);
        for seq in 1..=(FAILED_BATCHES_MAX as u64 + 10) {
            q.mark_written(seq, Some("lost".into()), Vec::new());
        }
        assert_eq!(q.lock().failed.len(), FAILED_BATCHES_MAX);
        assert!(q.failed_since(FAILED_BATCHES_MAX as u64 + 10));
    }

    fn id(n: u8) -> ObjectId {
        ObjectId::from_bytes(&[n; 20]).expect("sha-1 id")
    }

    /// Commits held until the test opens the gate.
    #[derive(Debug, Default)]
    struct Gate {
        m: Mutex<(bool, u32)>,
        cv: Condvar,
    }

    impl Gate {
        fn close(&self) {
            self.m.lock().unwrap().0 = true;
        }
        fn open(&self) {
            self.m.lock().unwrap().0 = false;
            self.cv.notify_all();
        }
        /// Waits (bounded) until `n` commits have reached the gate.
        fn wait_entered(&self, n: u32) {
            let g = self.m.lock().unwrap();
            let (g, t) = self
                .cv
                .wait_timeout_while(g, BOUND, |(_, entered)| *entered < n)
                .unwrap();
            assert!(
                !t.timed_out(),
                "the batcher never started commit {n}: {g:?}"
            );
        }
        fn pass(&self) {
            let mut g = self.m.lock().unwrap();
            g.1 += 1;
            self.cv.notify_all();
            let (g, t) = self
                .cv
                .wait_timeout_while(g, BOUND, |(closed, _)| *closed)
                .unwrap();
            drop(g);
            assert!(!t.timed_out(), "the gate stayed closed");
        }
    }

    /// One in-memory store written by the writer source, as the writer stack object of a
    /// mount writes its directory; the writer's commits pass a [`Gate`]. While one is
    /// under way (`hold`), the reader keeps its snapshot, as the reader stack object
    /// keeps the mount's own new table until the batcher acknowledges it.
    #[derive(Clone, Debug)]
    struct SharedMem {
        store: Arc<Mutex<MemSource>>,
        gate: Arc<Gate>,
        hold: Arc<AtomicBool>,
    }

    /// The reader source: a copy of the store as of its last reload.
    #[derive(Debug)]
    struct Snapshot {
        mem: SharedMem,
        snap: MemSource,
    }

    impl RefSource for Snapshot {
        fn hash_kind(&self) -> HashKind {
            HashKind::Sha1
        }
        fn reload(&mut self) -> crate::Result<bool> {
            if self.mem.hold.load(Ordering::SeqCst) {
                return Ok(false);
            }
            let m = self.mem.m();
            if m.generation == self.snap.generation {
                return Ok(false);
            }
            self.snap.refs.clone_from(&m.refs);
            self.snap.logs.clone_from(&m.logs);
            self.snap.generation = m.generation;
            self.snap.next_update_index = m.next_update_index;
            Ok(true)
        }
        fn generation(&self) -> u64 {
            self.snap.generation()
        }
        fn max_update_index(&self) -> u64 {
            self.snap.max_update_index()
        }
        fn first_ref_at_or_after(
            &mut self,
            key: &[u8],
            out: &mut RefRecord,
        ) -> crate::Result<bool> {
            self.snap.first_ref_at_or_after(key, out)
        }
        fn first_log_at_or_after(&mut self, key: &[u8], out: &mut Vec<u8>) -> crate::Result<bool> {
            self.snap.first_log_at_or_after(key, out)
        }
        fn read_log(&mut self, name: &[u8], out: &mut Vec<LogRecord>) -> crate::Result<()> {
            self.snap.read_log(name, out)
        }
        fn acknowledge_own_commit(&mut self) {
            self.mem.hold.store(false, Ordering::SeqCst);
        }
    }

    impl SharedMem {
        fn m(&self) -> MutexGuard<'_, MemSource> {
            self.store.lock().unwrap()
        }
        fn get(&self, name: &str) -> Option<RefValue> {
            self.m().refs.get(name.as_bytes()).cloned()
        }
    }

    impl RefWriter for SharedMem {
        fn commit(&mut self, edits: &[BatchEdit]) -> crate::Result<CommitOutcome> {
            self.hold.store(true, Ordering::SeqCst);
            self.gate.pass();
            self.m().commit(edits)
        }
    }

    /// A mount's state over a [`SharedMem`] holding `refs/heads/main` = 1, with its
    /// batcher running (stopped and joined on drop).
    struct Mount {
        shared: Arc<Shared>,
        mem: SharedMem,
        batcher: Option<JoinHandle<()>>,
        heads: u64,
        pid: u32,
    }

    impl Mount {
        fn new(window: Duration) -> Mount {
            let mem = SharedMem {
                store: Arc::new(Mutex::new(MemSource::new())),
                gate: Arc::new(Gate::default()),
                hold: Arc::new(AtomicBool::new(false)),
            };
            mem.m().set("refs/heads/main", RefValue::Val1(id(1)));
            let reader = Snapshot {
                mem: mem.clone(),
                snap: MemSource::new(),
            };
            let shared = Shared::new(
                Box::new(reader),
                false,
                LogSettings::default(),
                BatchSettings {
                    window,
                    max: 10_000,
                },
            );
            let refs = shared.lookup(ROOT, b"refs").expect("refs").0.ino.0;
            let heads = shared.lookup(refs, b"heads").expect("heads").0.ino.0;
            let batcher = Some(spawn(shared.clone(), Box::new(mem.clone())).expect("batcher"));
            Mount {
                shared,
                mem,
                batcher,
                heads,
                pid: std::process::id(),
            }
        }

        /// git's update of `refs/heads/NAME` to `id(n)`: create the lock (O_EXCL), write,
        /// rename onto the ref. Returns the lock's handle, still open.
        fn update(&self, name: &str, n: u8) -> u64 {
            let lock = format!("{name}.lock");
            let (_, fh) = self
                .shared
                .create(
                    self.heads,
                    lock.as_bytes(),
                    libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
                    0,
                )
                .expect("create the lock");
            let content = format!("{}\n", id(n));
            self.shared
                .write(fh, 0, content.as_bytes(), 0, self.pid)
                .expect("write the lock");
            self.shared
                .rename(
                    self.heads,
                    lock.as_bytes(),
                    self.heads,
                    name.as_bytes(),
                    self.pid,
                )
                .expect("rename acknowledged");
            fh
        }

        /// `fsync` of the mount root by this process (`fsyncdir`).
        fn fsync_root(&self) -> Result<(), FsError> {
            self.shared.sync_for(self.shared.tgid(self.pid))
        }
    }

    impl Drop for Mount {
        fn drop(&mut self) {
            self.mem.gate.open();
            self.shared.shutdown();
            if let Some(b) = self.batcher.take() {
                let _ = b.join();
            }
        }
    }

    #[test]
    fn an_edit_acknowledged_by_rename_is_written_by_the_next_fsync() {
        // A window far longer than the test: only the fsync writes the batch.
        let m = Mount::new(Duration::from_secs(600));
        let fh = m.update("main", 2);
        m.shared.flush(fh, m.pid).expect("close the lock");
        m.shared.release(fh);
        assert_eq!(m.mem.get("refs/heads/main"), Some(RefValue::Val1(id(1))));
        assert_eq!(m.fsync_root(), Ok(()));
        assert_eq!(m.mem.get("refs/heads/main"), Some(RefValue::Val1(id(2))));
        assert_eq!(m.mem.m().commits, 1, "one batch");
        // The reader shows the written value, with nothing pending.
        assert_eq!(m.shared.pending_status().0, 0);
    }

    #[test]
    fn a_conflict_fails_the_staging_process_s_fsync_once_and_its_handle_s_close() {
        let m = Mount::new(Duration::from_secs(600));
        // The lock is renamed while still open (its handle carries the edit).
        let fh = m.update("main", 2);
        // Another writer changes the ref on the stack before the batch is written.
        m.mem.m().set("refs/heads/main", RefValue::Val1(id(3)));
        assert_eq!(m.shared.fsync(fh, m.pid), Err(FsError::EIO));
        assert_eq!(
            m.mem.get("refs/heads/main"),
            Some(RefValue::Val1(id(3))),
            "theirs stays"
        );
        assert_eq!(m.fsync_root(), Ok(()), "the failure is reported once");
        assert_eq!(
            m.shared.flush(fh, m.pid),
            Err(FsError::EIO),
            "close of the handle"
        );
        assert_eq!(
            m.shared.flush(fh, m.pid),
            Err(FsError::EIO),
            "every close of it"
        );
        m.shared.release(fh);
        // A later update through the mount is not affected.
        let fh = m.update("main", 4);
        assert_eq!(m.shared.fsync(fh, m.pid), Ok(()));
        assert_eq!(m.shared.flush(fh, m.pid), Ok(()));
        m.shared.release(fh);
        assert_eq!(m.mem.get("refs/heads/main"), Some(RefValue::Val1(id(4))));
    }

    #[test]
    fn fsync_waits_for_a_batch_being_written_and_requests_do_not() {
        let m = Mount::new(Duration::from_millis(1));
        m.mem.gate.close();
        let fh = m.update("main", 2);
        m.shared.release(fh);
        // The batcher takes the batch on its own (the window is 1 ms) and is held in
        // the commit.
        m.mem.gate.wait_entered(1);
        let (tx, rx) = mpsc::channel();
        let (shared, pid) = (m.shared.clone(), m.pid);
        std::thread::spawn(move || {
            let _ = tx.send(shared.sync_for(shared.tgid(pid)));
        });
        // Requests are served meanwhile: a lookup, another lock taken and renamed (it
        // reads the pending value, staged while the first batch is being written).
        let (tx2, rx2) = mpsc::channel();
        let shared = m.shared.clone();
        let heads = m.heads;
        std::thread::spawn(move || {
            let looked = shared.lookup(heads, b"main").map(|_| ());
            let created = shared
                .create(
                    heads,
                    b"other.lock",
                    libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
                    0,
                )
                .map(|(_, fh)| shared.release(fh));
            let _ = tx2.send((looked, created));
        });
        assert_eq!(
            rx2.recv_timeout(BOUND),
            Ok((Ok(()), Ok(()))),
            "a request waited for the commit"
        );
        assert!(
            rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "fsync returned while its batch was still being written"
        );
        assert_eq!(m.mem.get("refs/heads/main"), Some(RefValue::Val1(id(1))));
        m.mem.gate.open();
        assert_eq!(rx.recv_timeout(BOUND), Ok(Ok(())));
        assert_eq!(m.mem.get("refs/heads/main"), Some(RefValue::Val1(id(2))));
    }

    #[test]
    fn edits_staged_before_an_fsync_share_one_table() {
        let m = Mount::new(Duration::from_secs(600));
        for (name, n) in [("main", 2), ("a", 3), ("b", 4)] {
            let fh = m.update(name, n);
            m.shared.release(fh);
        }
        assert_eq!(m.fsync_root(), Ok(()));
        assert_eq!(m.mem.m().commits, 1, "group commit");
        for (name, n) in [("main", 2), ("a", 3), ("b", 4)] {
            let full = format!("refs/heads/{name}");
            assert_eq!(m.mem.get(&full), Some(RefValue::Val1(id(n))), "{full}");
        }
        assert_eq!(m.fsync_root(), Ok(()), "nothing left: no wait, no table");
        assert_eq!(m.mem.m().commits, 1);
    }

    #[test]
    fn unmount_s_flush_reports_an_edit_not_written() {
        let m = Mount::new(Duration::from_secs(600));
        let fh = m.update("main", 2);
        m.shared.release(fh);
        m.mem.m().set("refs/heads/main", RefValue::Val1(id(3)));
        assert_eq!(m.shared.flush_all(), Err(FsError::EIO));
        // Written since: nothing failed.
        let fh = m.update("a", 4);
        m.shared.release(fh);
        assert_eq!(m.shared.flush_all(), Ok(()));
        assert_eq!(m.mem.get("refs/heads/a"), Some(RefValue::Val1(id(4))));
    }

    #[test]
    fn fsync_fails_once_the_batcher_is_gone_with_edits_unwritten() {
        let mut m = Mount::new(Duration::from_secs(600));
        m.shared.shutdown();
        m.batcher
            .take()
            .expect("batcher")
            .join()
            .expect("batcher ended");
        let fh = m.update("main", 2);
        m.shared.release(fh);
        assert_eq!(m.fsync_root(), Err(FsError::EIO));
        assert_eq!(m.mem.get("refs/heads/main"), Some(RefValue::Val1(id(1))));
    }

    /// The content of `refs/heads/NAME` as a client reads it (lookup, open, read).
    fn read_ref(shared: &Shared, heads: u64, name: &str) -> Result<Vec<u8>, FsError> {
        let ino = shared.lookup(heads, name.as_bytes())?.0.ino.0;
        let (fh, _) = shared.open(ino, libc::O_RDONLY)?;
        let data = shared.read_file(ino, fh, 0, 4096, false);
        shared.release(fh);
        data
    }

    #[test]
    fn reads_show_an_acknowledged_edit_while_and_after_it_is_written() {
        let m = Mount::new(Duration::from_millis(1));
        let want = format!("{}\n", id(2)).into_bytes();
        m.mem.gate.close();
        let fh = m.update("main", 2);
        m.shared.release(fh);
        m.mem.gate.wait_entered(1);
        // A client reading the ref over and over while the batch lands.
        let stop = Arc::new(AtomicBool::new(false));
        let (shared, heads, s, w) = (m.shared.clone(), m.heads, stop.clone(), want.clone());
        let reader = std::thread::spawn(move || {
            let (mut reads, mut wrong, mut first_wrong) = (0u64, 0u64, None);
            while !s.load(Ordering::SeqCst) || reads < 10 {
                let r = read_ref(&shared, heads, "main");
                if r.as_deref() != Ok(&w[..]) {
                    wrong += 1;
                    first_wrong.get_or_insert(r);
                }
                reads += 1;
            }
            (reads, wrong, first_wrong)
        });
        std::thread::sleep(Duration::from_millis(20));
        m.mem.gate.open();
        assert_eq!(m.fsync_root(), Ok(()));
        stop.store(true, Ordering::SeqCst);
        let (reads, wrong, first_wrong) = reader.join().expect("reader");
        assert_eq!(
            wrong, 0,
            "{wrong} of {reads} reads did not show the acknowledged value, first: {first_wrong:?}"
        );
        assert_eq!(read_ref(&m.shared, m.heads, "main"), Ok(want));
        assert_eq!(m.shared.pending_status().0, 0, "nothing pending");
    }
}
