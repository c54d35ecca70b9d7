//! Freshness: a dedicated thread watches the reftable directory with inotify. When
//! `tables.list` is replaced (by git, by our own batches, by compaction) it reloads the
//! stack and tells the kernel which cached names went stale. Notifications are sent from
//! this thread only, never from a request handler (they could deadlock there).

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;

use fuser::{INodeNo, Notifier};
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fs::inotify::{self, CreateFlags, WatchFlags};

use crate::fs::record::log_error;
use crate::fs::state::Shared;

/// How long the watcher waits between checks when inotify is unavailable.
const POLL_INTERVAL: std::time::Duration = std::time::Duration::from_millis(50);

/// At most this many known inodes are re-checked per change; beyond it the entry TTL
/// bounds staleness.
const INVALIDATE_SCAN_LIMIT: usize = 200_000;

/// An inotify descriptor watching one directory.
struct Inotify {
    fd: OwnedFd,
}

impl Inotify {
    fn new(dir: &Path) -> std::io::Result<Inotify> {
        let fd = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC)?;
        let mask = WatchFlags::MOVED_TO
            | WatchFlags::CREATE
            | WatchFlags::CLOSE_WRITE
            | WatchFlags::DELETE
            | WatchFlags::MODIFY;
        inotify::add_watch(&fd, dir, mask)?;
        Ok(Inotify { fd })
    }

    /// Waits up to `timeout_ms` for events (or a wake-up on `wake_fd`); drains them.
    /// `true` if any arrived.
    fn wait(&self, timeout_ms: i32, wake_fd: Option<BorrowedFd<'_>>) -> bool {
        let n = poll2(Some(self.fd.as_fd()), wake_fd, timeout_ms);
        if n == 0 {
            return false;
        }
        let mut buf = [0u8; 4096];
        let mut any = false;
        while rustix::io::read(&self.fd, &mut buf).is_ok_and(|r| r > 0) {
            any = true;
        }
        any
    }
}

/// Polls `fd` and `wake_fd` (those given); drains `wake_fd`. Returns how many are ready
/// (0 on a timeout or an error).
fn poll2(fd: Option<BorrowedFd<'_>>, wake_fd: Option<BorrowedFd<'_>>, timeout_ms: i32) -> usize {
    let mut pfds: Vec<PollFd<'_>> = [fd, wake_fd]
        .into_iter()
        .flatten()
        .map(|f| PollFd::from_borrowed_fd(f, PollFlags::IN))
        .collect();
    let timeout = Timespec {
        tv_sec: i64::from(timeout_ms / 1000),
        tv_nsec: i64::from(timeout_ms % 1000) * 1_000_000,
    };
    let n = rustix::event::poll(&mut pfds, Some(&timeout)).unwrap_or(0);
    if let (Some(w), Some(p)) = (wake_fd, pfds.last()) {
        if !p.revents().is_empty() {
            let mut v = [0u8; 8];
            let _ = rustix::io::read(w, &mut v);
        }
    }
    n
}

/// Maps the view's inode numbers to the mount's (a linked worktree's view, see
/// `worktree.rs`).
pub type InoMap = Box<dyn Fn(u64) -> u64 + Send>;

/// Starts the watcher thread for `reftable_dir`, whose view's inode numbers are `map`ped
/// to the mount's in every invalidation.
pub fn spawn_mapped(
    shared: Arc<Shared>,
    reftable_dir: &Path,
    notifier: Notifier,
    map: InoMap,
) -> std::io::Result<JoinHandle<()>> {
    let ino = match Inotify::new(reftable_dir) {
        Ok(i) => Some(i),
        Err(e) => {
            log_error(
                "inotify",
                reftable_dir.as_os_str().as_bytes(),
                &format!("{e}; polling instead"),
            );
            None
        }
    };
    std::thread::Builder::new()
        .name("reftablefs-watch".into())
        .spawn(move || run(shared, ino, notifier, map))
}

fn run(shared: Arc<Shared>, ino: Option<Inotify>, notifier: Notifier, map: InoMap) {
    let interval = i32::try_from(POLL_INTERVAL.as_millis()).unwrap_or(50);
    while !shared.stopping() {
        match &ino {
            // Wake up now and then even without events, to notice shutdown (and changes
            // the request handlers already reloaded).
            Some(i) => {
                i.wait(interval * 4, shared.wake_fd());
            }
            None => {
                poll2(None, shared.wake_fd(), interval);
            }
        }
        if shared.stopping() {
            break;
        }
        invalidate_mapped(&shared, &notifier, &map);
        evict(&shared, &notifier, &map);
        shared.save_packed_state(false);
    }
}

/// Names per round of [`evict`] (the table's lock is taken once per round).
const EVICT_ROUND: usize = 4096;

/// While the inode table is above its cap, asks the kernel to drop its oldest names: it
/// then sends `forget` for them (and for the unused children of a dropped directory), and
/// the table shrinks. Bounded: at most the table's excess is asked for per wake-up.
/// `map`: the view's inode numbers to the mount's.
pub fn evict(shared: &Shared, notifier: &Notifier, map: &dyn Fn(u64) -> u64) {
    // Each dropped name makes the kernel queue a FORGET for the event-loop threads, which
    // run near the clients (`cpu.rs`): sent from there, no wake-up crosses CPUs.
    let _near = crate::fs::cpu::near_clients();
    loop {
        let names = shared.evictable(EVICT_ROUND);
        for (parent, name) in &names {
            // ENOENT from the kernel only means the entry was not cached.
            let _ = notifier.inval_entry(INodeNo(map(*parent)), OsStr::from_bytes(name));
        }
        if names.len() < EVICT_ROUND || shared.stopping() {
            break;
        }
    }
}

/// Reloads and sends invalidations for names whose kind changed or that vanished and
/// for ref files whose content changed.
/// `map`: the view's inode numbers to the mount's.
pub fn invalidate_mapped(shared: &Shared, notifier: &Notifier, map: &dyn Fn(u64) -> u64) {
    let changed = shared.take_changed();
    let _ = shared.refresh();
    let stale = if !changed && !shared.take_changed() {
        // Nothing reloaded: only names request handlers found stale.
        shared.stale_names()
    } else {
        shared.stale(INVALIDATE_SCAN_LIMIT)
    };
    for (parent, name) in stale.entries {
        // ENOENT from the kernel only means the entry was not cached.
        let _ = notifier.inval_entry(INodeNo(map(parent)), OsStr::from_bytes(&name));
    }
    // Content changed under a cached name: drop the inode's attributes (its size) and
    // pages, so `stat` shows the new size at once (readers are safe without this: every
    // open compares the content with what the kernel holds).
    for ino in stale.inodes {
        let _ = notifier.inval_inode(INodeNo(map(ino)), 0, 0);
    }
    // A new mtime with the same content: attributes only (offset -1: no page is
    // touched, so this never waits for a read in flight).
    for ino in stale.attrs {
        let _ = notifier.inval_inode(INodeNo(map(ino)), -1, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::source::{LogSettings, MemSource};
    use crate::fs::state::BatchSettings;

    /// A wake-up ends the watcher's wait at once and is drained by it; the next wait
    /// times out.
    #[test]
    fn a_wake_up_ends_one_wait() {
        let batch = BatchSettings {
            window: std::time::Duration::from_secs(1),
            max: 1,
        };
        let shared = Shared::new(
            Box::new(MemSource::new()),
            true,
            LogSettings::default(),
            batch,
        );
        assert!(shared.wake_fd().is_some(), "no eventfd");
        shared.wake_watcher();
        let start = std::time::Instant::now();
        assert_eq!(poll2(None, shared.wake_fd(), 10_000), 1);
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
        assert_eq!(poll2(None, shared.wake_fd(), 10), 0, "not drained");
    }
}
