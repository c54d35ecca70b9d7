//! The batcher: one thread that turns sealed batches of the pending layer into reftable
//! commits — one table and one fsync round per batch, however many refs — through the
//! writer source (one stack object with one writer and its scratch buffer, reused for
//! every batch). A batch is sealed when the window since its first edit has passed, when
//! it holds `--batch-max` edits, or when someone waits for it (fsync, syncfs, unmount).
//! Commit points never wait for the batcher; only fsync-style calls do.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::fs::state::{log_error, Shared};
use crate::fs::write::Batch;

/// How long the batcher must be idle before it compacts the stack.
const IDLE_BEFORE_COMPACTION: Duration = Duration::from_secs(5);

/// Runs deferred compaction when due (`urgent_only`: only when tables pile up).
fn maintain(shared: &Shared, urgent_only: bool) {
    let mut w = shared.writer.lock().unwrap_or_else(|p| p.into_inner());
    let Some(src) = w.as_mut() else { return };
    match src.maintenance_due() {
        Some(urgent) if urgent || !urgent_only => {
            if let Err(e) = src.maintain() {
                log_error("compact", b"tables.list", &e);
            }
        }
        _ => {}
    }
}

/// How long a batch keeps retrying while another writer holds `tables.list.lock`.
const LOCK_RETRY_FOR: Duration = Duration::from_secs(60);

/// Commits a batch; a held stack lock (git committing at the same moment) is transient,
/// so the batch is retried with a growing pause instead of being given up.
fn commit_with_retry(
    shared: &Shared,
    batch: &Batch,
) -> crate::Result<crate::fs::source::CommitOutcome> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(5);
    loop {
        let result = {
            let mut w = shared.writer.lock().unwrap_or_else(|p| p.into_inner());
            match w.as_mut() {
                Some(src) => src.commit(&batch.edits),
                None => Err(crate::Error::Api("read-only mount".into())),
            }
        };
        match result {
            Err(crate::Error::Lock(path)) if start.elapsed() < LOCK_RETRY_FOR => {
                if start.elapsed() > Duration::from_secs(1) && pause >= Duration::from_millis(500) {
                    log_error(
                        "commit",
                        path.as_os_str().as_encoded_bytes(),
                        &"held by another writer; retrying",
                    );
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(500));
            }
            other => return other,
        }
    }
}

/// Starts the batcher thread.
pub fn spawn(shared: Arc<Shared>) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("reftablefs-batch".into())
        .spawn(move || {
            run(&shared);
            shared.set_batcher_gone();
        })
}

/// Waits for the next batch to write; `None` when stopping with nothing left.
fn next_batch(shared: &Shared) -> Option<Batch> {
    let mut g = shared.lock();
    loop {
        if let Some(b) = g.w.sealed.pop_front() {
            return Some(b);
        }
        let stopping = shared.stopping();
        if !g.w.open.is_empty() {
            let seq = g.w.open.seq;
            let since = match g.open_since {
                Some((s, t)) if s == seq => t,
                _ => {
                    let now = Instant::now();
                    g.open_since = Some((seq, now));
                    now
                }
            };
            let waited = since.elapsed();
            if stopping || g.flush_requested || g.w.open.len() >= shared.batch.max {
                g.w.seal_all();
                continue;
            }
            if waited >= shared.batch.window {
                g.w.seal_for_window();
                g.open_since = None;
                continue;
            }
            let left = shared.batch.window - waited;
            g = shared
                .cv
                .wait_timeout(g, left)
                .map(|r| r.0)
                .unwrap_or_else(|p| p.into_inner().0);
            continue;
        }
        g.flush_requested = false;
        if stopping {
            return None;
        }
        let (g2, timeout) = shared
            .cv
            .wait_timeout(g, IDLE_BEFORE_COMPACTION)
            .unwrap_or_else(|p| p.into_inner());
        g = g2;
        if timeout.timed_out() && g.w.open.is_empty() && g.w.sealed.is_empty() {
            // Idle: compact now, outside the state lock.
            drop(g);
            maintain(shared, false);
            g = shared.lock();
        }
    }
}

fn run(shared: &Shared) {
    while let Some(batch) = next_batch(shared) {
        let result = commit_with_retry(shared, &batch);
        let mut g = shared.lock();
        // The reader must see the new table before the pending entries go away.
        let _ = g.refresh();
        match result {
            Ok(out) => {
                let mut conflicted = Vec::new();
                for (name, found) in out.conflicts {
                    let mine = batch.edits.iter().find(|e| e.name == name);
                    log_error(
                        "commit",
                        &name,
                        &format!(
                            "conflict with a concurrent writer: expected {:?}, found {:?}; \
                             the concurrent value wins, this update ({:?}) was not written",
                            mine.and_then(|e| e.expected_old.as_ref()),
                            found,
                            mine.and_then(|e| e.new.as_ref())
                        ),
                    );
                    conflicted.push(name);
                }
                if !conflicted.is_empty() {
                    g.failed.insert(batch.seq, "conflict".into());
                }
                g.w.batch_done(batch.seq, &conflicted);
            }
            Err(e) => {
                for edit in &batch.edits {
                    log_error(
                        "commit",
                        &edit.name,
                        &format!("batch of {} edits not written: {e}", batch.len()),
                    );
                }
                let names: Vec<Vec<u8>> = batch.edits.iter().map(|e| e.name.clone()).collect();
                g.failed.insert(batch.seq, e.to_string());
                g.w.batch_done(batch.seq, &names);
            }
        }
        drop(g);
        let names: Vec<&[u8]> = batch.edits.iter().map(|e| e.name.as_slice()).collect();
        shared.queue_changed_dirs(&names);
        let mut g = shared.lock();
        g.durable_seq = batch.seq;
        // Keep the failure record bounded.
        while g.failed.len() > 1024 {
            g.failed.pop_first();
        }
        let _ = g.refresh();
        drop(g);
        shared.cv.notify_all();
        maintain(shared, true);
    }
    // Unmounting: leave the stack compacted.
    maintain(shared, false);
}
