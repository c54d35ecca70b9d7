//! The view's process as `exec` sees it: started, ready, flushed, unmounted and waited
//! for.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::process::{describe, try_reap, TORN_DOWN};
use super::signals::Signals;
use reftablefs::fs;

/// How long the view may take to appear.
pub(super) const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a mount held by processes COMMAND left behind is retried before it is detached.
const BUSY_RETRY: Duration = Duration::from_secs(1);

/// How long the view's process may take to exit after a detached (busy) unmount before it
/// is left to serve the processes that hold it.
const BUSY_GRACE: Duration = Duration::from_secs(2);

/// How the view's start ended.
pub(super) enum Ready {
    Yes,
    Exited(libc::c_int),
    Signal(libc::c_int),
    TimedOut,
}

/// The view's process, seen from this one.
pub(super) struct View {
    pub(super) pid: libc::pid_t,
    /// Its wait status, once reaped.
    pub(super) status: Option<libc::c_int>,
    /// The write end of its pipe; closed (or sent [`TORN_DOWN`]) at the end.
    pub(super) pipe: Option<OwnedFd>,
    pub(super) target: PathBuf,
    pub(super) log: PathBuf,
}

impl View {
    pub(super) fn reap(&mut self) -> Option<libc::c_int> {
        if self.status.is_none() {
            self.status = try_reap(self.pid);
        }
        self.status
    }

    /// Waits until the view is mounted, its process ended, a signal came or the time ran
    /// out.
    pub(super) fn wait_ready(&mut self, signals: &Signals) -> Ready {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if fs::is_mounted(&self.target) {
                return Ready::Yes;
            }
            if let Some(st) = self.reap() {
                return Ready::Exited(st);
            }
            if Instant::now() > deadline {
                return Ready::TimedOut;
            }
            if let Some((sig, _)) = signals.wait(Duration::from_millis(5)) {
                if sig != libc::SIGCHLD {
                    return Ready::Signal(sig);
                }
            }
        }
    }

    /// Ends a view COMMAND never used: the pipe closes, so the view unmounts itself (or
    /// its process ends before mounting); waited for a bounded time.
    pub(super) fn abandon(&mut self) {
        self.pipe = None;
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.reap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The view's process ended while COMMAND runs: its dead mount is detached, so
    /// COMMAND sees the real directory rather than `ENOTCONN`.
    pub(super) fn ended_early(&mut self, status: libc::c_int) {
        if fs::is_mounted(&self.target) {
            fs::lazy_unmount(&self.target);
        }
        if status != 0 {
            eprintln!(
                "reftablefs exec: the view's process ended ({}); {} is the real directory \
                 again (log: {})",
                describe(status),
                self.target.display(),
                self.log.display()
            );
        }
    }

    /// Flushes, unmounts and waits for the view's process; false when an update may not
    /// have been written or the process did not end as it should (said on stderr).
    pub(super) fn tear_down(&mut self, signals: &Signals) -> bool {
        let mut ok = true;
        let mut gone = Unmounted::Gone;
        if self.reap().is_none() && fs::is_mounted(&self.target) {
            ok &= self.flush();
            gone = self.unmount();
        }
        match (&gone, self.pipe.take()) {
            // Unmounted (or detached): an end of file from now on means nothing.
            (Unmounted::Gone | Unmounted::Detached, Some(p)) => {
                let mut f = std::fs::File::from(p);
                let _ = f.write_all(&[TORN_DOWN]);
            }
            // Still mounted: the pipe closes without the byte, so the view unmounts
            // itself (fs::mount's own unmount, then its flush).
            (Unmounted::Failed(e), p) => {
                eprintln!(
                    "reftablefs exec: cannot unmount {}: {e}; the view unmounts itself",
                    self.target.display()
                );
                drop(p);
            }
            (_, None) => {}
        }
        let busy = matches!(gone, Unmounted::Detached);
        let budget = if busy {
            BUSY_GRACE
        } else {
            crate::cli::unmount::DEFAULT_TIMEOUT
        };
        let deadline = Instant::now() + budget;
        while self.reap().is_none() && Instant::now() < deadline {
            // Signals that come now are not COMMAND's any more: the teardown goes on.
            let _ = signals.wait(Duration::from_millis(10));
        }
        match self.status {
            Some(0) => ok,
            Some(st) => {
                eprintln!(
                    "reftablefs exec: the view's process ended with {}: some pending ref \
                     updates may not have been written",
                    describe(st)
                );
                false
            }
            None if busy => {
                eprintln!(
                    "reftablefs exec: {} is still in use by processes the command left \
                     behind; the view is detached from it and its process (pid {}) serves \
                     them and writes their updates until they let go (log: {})",
                    self.target.display(),
                    self.pid,
                    self.log.display()
                );
                ok
            }
            None => {
                eprintln!(
                    "reftablefs exec: the view's process (pid {}) is still running after {} \
                     s (writing pending updates or compacting the stack)",
                    self.pid,
                    budget.as_secs()
                );
                false
            }
        }
    }

    /// `fsync` of the mount's root: every pending batch is committed. The mount's own
    /// record of updates not written says whether the flush lost one (the fsync reports a
    /// failed update to its writer, not to us).
    fn flush(&self) -> bool {
        let before = crate::cli::status::report_of(&self.target);
        let root = self.target.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        // The thread is left behind if the mount never answers; the process exits anyway.
        let spawned = std::thread::Builder::new()
            .name("reftablefs-exec-flush".into())
            .spawn(move || {
                let r = std::fs::File::open(&root).and_then(|d| d.sync_all());
                let _ = tx.send(r);
            });
        let mut ok = true;
        match spawned.map(|_| rx.recv_timeout(crate::cli::unmount::DEFAULT_TIMEOUT)) {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => {
                eprintln!(
                    "reftablefs exec: flushing {}: {e}: some pending ref updates were not written",
                    self.target.display()
                );
                ok = false;
            }
            Ok(Err(_)) | Err(_) => {
                eprintln!(
                    "reftablefs exec: flushing {} did not finish",
                    self.target.display()
                );
                ok = false;
            }
        }
        if let (Some(b), Some(a)) = (before, crate::cli::status::report_of(&self.target)) {
            let lost = a.conflicts_total.saturating_sub(b.conflicts_total);
            if lost > 0 {
                eprintln!(
                    "reftablefs exec: {lost} pending ref update(s) not written while flushing {}:",
                    self.target.display()
                );
                let shown = usize::try_from(lost).unwrap_or(usize::MAX);
                for e in a.conflicts.iter().rev().take(shown).rev() {
                    eprintln!("  {}: {}", e.name, e.reason);
                }
                ok = false;
            }
        }
        ok
    }

    /// Unmounts the view: a busy mount (held by processes COMMAND left behind) is tried
    /// again for [`BUSY_RETRY`], then detached.
    fn unmount(&self) -> Unmounted {
        use std::os::unix::ffi::OsStrExt;
        let Ok(c) = std::ffi::CString::new(self.target.as_os_str().as_bytes()) else {
            return Unmounted::Failed(std::io::ErrorKind::InvalidInput.into());
        };
        let deadline = Instant::now() + BUSY_RETRY;
        loop {
            // SAFETY: a NUL-terminated path.
            if unsafe { libc::umount2(c.as_ptr(), 0) } == 0 {
                return Unmounted::Gone;
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EBUSY) {
                // Unmounted by someone else meanwhile (EINVAL), or refused.
                return if fs::is_mounted(&self.target) {
                    Unmounted::Failed(e)
                } else {
                    Unmounted::Gone
                };
            }
            if Instant::now() > deadline {
                return if fs::lazy_unmount(&self.target) {
                    Unmounted::Detached
                } else {
                    Unmounted::Failed(std::io::Error::last_os_error())
                };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// How [`View::unmount`] ended.
enum Unmounted {
    /// The mount is gone.
    Gone,
    /// It was busy and is detached: its process serves those who hold it.
    Detached,
    /// It could not be unmounted.
    Failed(std::io::Error),
}
