//! The batcher: one thread that turns sealed batches of the pending layer into reftable
//! commits — one table and one fsync round per batch, however many refs — through the
//! writer source (one stack object with one writer and its scratch buffer, reused for
//! every batch). A batch is sealed when the window since its first edit has passed, when
//! it holds `--batch-max` edits, or when someone waits for it (fsync, syncfs, unmount).
//! Commit points never wait for the batcher; only fsync-style calls do.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::fs::source::{BatchEdit, CommitOutcome};
use crate::fs::state::{log_error, Shared};
use crate::fs::status;
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

/// Writes a batch through the writer source (its lock is held only by the batcher, so
/// no request waits for it). The source waits briefly for a `tables.list.lock` held by a
/// live commit and gives up on one held for longer (see `stack_source.rs`).
fn commit(shared: &Shared, batch: &Batch) -> crate::Result<CommitOutcome> {
    let mut w = shared.writer.lock().unwrap_or_else(|p| p.into_inner());
    match w.as_mut() {
        Some(src) => {
            let r = src.commit(&batch.edits);
            if r.as_ref().is_ok_and(|o| o.applied > 0) {
                crate::fs::status::recorder().committed(src.last_table());
            }
            r
        }
        None => Err(crate::Error::Api("read-only mount".into())),
    }
}

/// Why a whole batch could not be written, for its log line: a held `tables.list.lock`
/// says how old it is and how to remove a stale one.
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
        let result = commit(shared, &batch);
        let mut g = shared.lock();
        // The reader sees the new table and the pending entries go away in one step under
        // the state lock (until now the reader kept the old tables: no read shows the
        // batch twice, nor loses it).
        g.src.acknowledge_own_commit();
        let _ = g.refresh();
        let mut lost: Vec<&BatchEdit> = Vec::new();
        match &result {
            Ok(out) => {
                for (name, found) in &out.conflicts {
                    let Some(mine) = batch.edits.iter().find(|e| &e.name == name) else {
                        continue;
                    };
                    let why = format!(
                        "conflict with a concurrent writer: expected {}, found {}; \
                         the concurrent value stays, this update ({}) was not written",
                        show(mine.expected_old.as_ref()),
                        show(found.as_ref()),
                        show(mine.new.as_ref())
                    );
                    log_error("commit", name, &why);
                    status::recorder().conflict(name, &why);
                    lost.push(mine);
                }
                for (name, why) in &out.failed {
                    let Some(mine) = batch.edits.iter().find(|e| &e.name == name) else {
                        continue;
                    };
                    let why = format!("not written: {why}");
                    log_error("commit", name, &why);
                    status::recorder().conflict(name, &why);
                    lost.push(mine);
                }
            }
            Err(e) => {
                let why = why_not_written(e);
                eprintln!(
                    "reftablefs: commit: batch of {} edits not written: {why}",
                    batch.len()
                );
                for edit in &batch.edits {
                    log_error("commit", &edit.name, &"not written (see above)");
                    status::recorder().conflict(&edit.name, &format!("not written: {why}"));
                }
                lost.extend(batch.edits.iter());
            }
        }
        if !lost.is_empty() {
            g.failed
                .insert(batch.seq, format!("{} edits not written", lost.len()));
        }
        let names: Vec<Vec<u8>> = lost.iter().map(|e| e.name.clone()).collect();
        for edit in &lost {
            g.record_failure(edit);
        }
        g.w.batch_done(batch.seq, &names);
        drop(g);
        let names: Vec<&[u8]> = batch.edits.iter().map(|e| e.name.as_slice()).collect();
        shared.queue_changed_dirs(&names);
        shared.queue_changed_times(&names);
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

/// A ref value for a log line.
fn show(v: Option<&crate::format::RefValue>) -> String {
    use crate::format::RefValue;
    match v {
        None | Some(RefValue::Deletion) => "absent".into(),
        Some(RefValue::Val1(id)) | Some(RefValue::Val2 { value: id, .. }) => id.to_string(),
        Some(RefValue::Symref(t)) => format!("ref: {}", String::from_utf8_lossy(t)),
    }
}
