//! Freshness: a dedicated thread watches the reftable directory with inotify. When
//! `tables.list` is replaced (by git, by our own batches, by compaction) it reloads the
//! stack and tells the kernel which cached names went stale. Notifications are sent from
//! this thread only, never from a request handler (they could deadlock there).

use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;

use fuser::{INodeNo, Notifier};

use crate::fs::record::log_error;
use crate::fs::state::Shared;

/// How long the watcher waits between checks when inotify is unavailable.
const POLL_INTERVAL: std::time::Duration = std::time::Duration::from_millis(50);

/// At most this many known inodes are re-checked per change; beyond it the entry TTL
/// bounds staleness.
const INVALIDATE_SCAN_LIMIT: usize = 200_000;

/// An inotify descriptor watching one directory.
struct Inotify {
    fd: libc::c_int,
}

impl Inotify {
    fn new(dir: &Path) -> std::io::Result<Inotify> {
        // SAFETY: plain syscalls on a descriptor we own; the path is NUL-terminated.
        unsafe {
            let fd = libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let c = CString::new(dir.as_os_str().as_bytes()).map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "NUL in path")
            })?;
            let mask = libc::IN_MOVED_TO
                | libc::IN_CREATE
                | libc::IN_CLOSE_WRITE
                | libc::IN_DELETE
                | libc::IN_MODIFY;
            if libc::inotify_add_watch(fd, c.as_ptr(), mask) < 0 {
                let e = std::io::Error::last_os_error();
                libc::close(fd);
                return Err(e);
            }
            Ok(Inotify { fd })
        }
    }

    /// Waits up to `timeout_ms` for events (or a wake-up on `wake_fd`); drains them.
    /// `true` if any arrived.
    fn wait(&self, timeout_ms: i32, wake_fd: libc::c_int) -> bool {
        let n = poll2(self.fd, wake_fd, timeout_ms);
        if n <= 0 {
            return false;
        }
        let mut buf = [0u8; 4096];
        let mut any = false;
        loop {
            // SAFETY: reading into a stack buffer of the given length.
            let r = unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), buf.len()) };
            if r <= 0 {
                break;
            }
            any = true;
        }
        any
    }
}

impl Drop for Inotify {
    fn drop(&mut self) {
        // SAFETY: closing the descriptor we own, once.
        unsafe {
            libc::close(self.fd);
        }
    }
}

/// Polls `fd` and (if `>= 0`) `wake_fd`; drains `wake_fd`. Returns poll's result.
fn poll2(fd: libc::c_int, wake_fd: libc::c_int, timeout_ms: i32) -> libc::c_int {
    let mut pfds = [
        libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: wake_fd,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // SAFETY: two valid pollfds (a negative fd is ignored by poll).
    let n = unsafe { libc::poll(pfds.as_mut_ptr(), 2, timeout_ms) };
    if wake_fd >= 0 && pfds[1].revents != 0 {
        let mut v: u64 = 0;
        // SAFETY: reading 8 bytes into a local from our eventfd.
        unsafe {
            libc::read(wake_fd, (&mut v as *mut u64).cast(), 8);
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
                poll2(-1, shared.wake_fd(), interval);
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
