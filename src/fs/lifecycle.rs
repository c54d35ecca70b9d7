//! A ref view's life, the same for the main view and for every linked worktree's: made
//! from a reader and (unless read-only) a writer over one stack ([`new_view`]), started
//! with its watcher and — only when it has a writer — its batcher ([`start`]), stopped
//! after writing everything pending ([`Threads::stop`]).

use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;

use fuser::Notifier;

use crate::fs::attr::GitDirModes;
use crate::fs::error::FsError;
use crate::fs::record::Recorder;
use crate::fs::source::{LogSettings, RefSource, RefWriter};
use crate::fs::state::{BatchSettings, Shared};
use crate::fs::watch::InoMap;
use crate::fs::{batch, watch, MountOptions};

/// A ref view's state: the reader serves requests; `read_only` when it has no writer;
/// `rec`, the mount's recorder.
pub fn new_view(
    reader: Box<dyn RefSource>,
    read_only: bool,
    log: LogSettings,
    reftable_dir: &Path,
    opts: &MountOptions,
    modes: Option<Arc<GitDirModes>>,
    rec: Arc<Recorder>,
) -> Arc<Shared> {
    let shared = Shared::recording(
        reader,
        read_only,
        log,
        BatchSettings {
            window: opts.batch_window,
            max: opts.batch_max.max(1),
        },
        rec,
    );
    shared.set_inode_cap(opts.inode_cap);
    shared.reserve_space_in(reftable_dir);
    if let Some(m) = modes {
        shared.set_gitdir_modes(m);
    }
    shared
}

/// A started view's threads.
#[derive(Default)]
pub struct Threads {
    threads: Vec<JoinHandle<()>>,
    /// The batcher, the only thread that writes the stack.
    batcher: Option<JoinHandle<()>>,
}

/// Starts the view's watcher of `reftable_dir` (when the session's notifier is known;
/// `map`: the view's inode numbers to the mount's) and, with a `writer`, its batcher,
/// which owns the writer.
pub fn start(
    shared: &Arc<Shared>,
    writer: Option<Box<dyn RefWriter>>,
    reftable_dir: &Path,
    notifier: Option<Notifier>,
    map: InoMap,
) -> std::io::Result<Threads> {
    let mut threads = Vec::new();
    if let Some(n) = notifier {
        threads.push(watch::spawn_mapped(shared.clone(), reftable_dir, n, map)?);
    }
    let batcher = match writer {
        Some(w) => Some(batch::spawn(shared.clone(), w)?),
        None => None,
    };
    Ok(Threads { threads, batcher })
}

impl Threads {
    /// Writes what is pending, stops the threads and waits for them: the error says a
    /// pending update could not be written (each was logged).
    pub fn stop(self, shared: &Shared) -> Result<(), FsError> {
        let flushed = shared.flush_all();
        shared.shutdown();
        for t in self.threads.into_iter().chain(self.batcher) {
            let _ = t.join();
        }
        flushed
    }

    /// The view was shut down ([`Shared::shutdown`]): waits until its batcher has ended
    /// (after its last compaction), so that nothing writes the stack any more. The other
    /// threads end on their own (a watcher may be waiting for the kernel, which may be
    /// waiting for the request that calls this).
    pub fn join_writer(&mut self) {
        if let Some(t) = self.batcher.take() {
            let _ = t.join();
        }
    }
}
