//! Disk space reserved for acknowledged edits (issue 23: a full disk reported success for
//! writes never made).
//!
//! A files backend learns of no space, a quota, a read-only file system or a permission
//! at the system call: the lock's `write` fails, and git says so. The mount acknowledges
//! a commit point (`rename`, `unlink`, a reflog `write`) before the batch that carries it
//! is written, so it must know then that the write will find room. Before staging an
//! edit it *promises* the bytes the edit can take in a table; the promises are backed by
//! space really allocated on the stack's file system: an unnamed file (`O_TMPFILE` in
//! `reftable/`, so nothing is left behind whatever ends the mount) grown with
//! `fallocate`. When it cannot grow, the call fails with the file system's errno
//! (`ENOSPC`, `EDQUOT`, `EROFS`, `EACCES`, …) and nothing is staged.
//!
//! The batcher gives the space of the batch it is about to write back to the file system
//! just before writing it ([`Reserve::make_room`]) and takes back what later promises
//! need afterwards ([`Reserve::written`]). Between the two, another process may take that
//! space: the batch's edits then fail at `fsync` and `close` (EIO) as before; that
//! window is one table write long. A file system without `O_TMPFILE` or `fallocate`
//! falls back to `statvfs` (free blocks and the read-only flag): a check, not a hold.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What an edit staged at a commit point can take in a table at most, before its own
/// bytes: record, restart point, index entry and block padding, generously.
pub const EDIT_BYTES: u64 = 512;

/// Kept free beyond the promises: a new `tables.list`, a table's last block, the
/// directory growing.
const HEADROOM: u64 = 64 << 10;

/// The reservation grows in steps of this many bytes (one `fallocate` per step).
const STEP: u64 = 1 << 20;

/// The bytes an edit carrying `content` bytes (a lock's value, a reflog's lines, a
/// `packed-refs`) under `names` bytes of names can take in a table.
pub fn edit_bytes(names: usize, content: usize) -> u64 {
    EDIT_BYTES + 2 * (names as u64 + content as u64)
}

/// How the space is held.
#[derive(Debug)]
enum Hold {
    /// No check (a read-only mount, tests of the in-memory source).
    None,
    /// An unnamed file on the stack's file system, grown with `fallocate`.
    File(OwnedFd),
    /// `statvfs` of the directory: free space and the read-only flag, checked only.
    Check(CString),
}

/// The mount's reservation (see the module docs). Lives under the state lock.
#[derive(Debug)]
pub struct Reserve {
    hold: Hold,
    /// The directory, for the `statvfs` fallback.
    dir: Option<CString>,
    /// Bytes allocated in the file.
    allocated: u64,
    /// Bytes given back for the batch being written ([`Reserve::make_room`]).
    lent: u64,
    /// Promised bytes by the batch sequence number after which they are written.
    promised: BTreeMap<u64, u64>,
    /// Their sum.
    total: u64,
    /// `total`, readable without the state lock (staging waits on it: `budget.rs`).
    staged: Arc<AtomicU64>,
}

impl Default for Reserve {
    fn default() -> Self {
        Reserve::none()
    }
}

impl Reserve {
    /// No reservation: every promise holds.
    pub fn none() -> Reserve {
        Reserve {
            hold: Hold::None,
            dir: None,
            allocated: 0,
            lent: 0,
            promised: BTreeMap::new(),
            total: 0,
            staged: Arc::default(),
        }
    }

    /// A reservation on the file system of `dir` (the stack's `reftable/`), with its
    /// headroom allocated now when there is room.
    pub fn open(dir: &Path) -> Reserve {
        let Ok(c) = CString::new(dir.as_os_str().as_bytes()) else {
            return Reserve::none();
        };
        // SAFETY: a NUL-terminated path; the descriptor is owned below.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
                0o600,
            )
        };
        let mut r = Reserve {
            hold: if fd >= 0 {
                // SAFETY: a descriptor just returned by open, owned by nobody else.
                Hold::File(unsafe { OwnedFd::from_raw_fd(fd) })
            } else {
                Hold::Check(c.clone())
            },
            dir: Some(c),
            allocated: 0,
            lent: 0,
            promised: BTreeMap::new(),
            total: 0,
            staged: Arc::default(),
        };
        if let Err(errno) = r.ensure(0) {
            log::warn!(
                "reftablefs: reserving space in {}: {} (ref updates fail until there is room)",
                dir.display(),
                std::io::Error::from_raw_os_error(errno)
            );
        }
        r
    }

    /// Promises `bytes` for an edit of a batch numbered at most `seq`: Ok when the space
    /// is held (or the check passed), else the errno to fail the call with, and nothing
    /// is promised.
    pub fn promise(&mut self, seq: u64, bytes: u64) -> Result<(), i32> {
        // The first promise of a batch also holds what every table write needs besides
        // its records: its last block, and a new `tables.list` beside the old one.
        let bytes = if self.promised.contains_key(&seq) {
            bytes
        } else {
            bytes.saturating_add(self.batch_overhead())
        };
        self.ensure(bytes)?;
        *self.promised.entry(seq).or_default() += bytes;
        self.total += bytes;
        self.staged.store(self.total, Ordering::Relaxed);
        Ok(())
    }

    /// Holds `total + extra + HEADROOM` bytes: grows the file by whole steps, or to just
    /// what is needed when a whole step does not fit.
    fn ensure(&mut self, extra: u64) -> Result<(), i32> {
        let want = self.total.saturating_add(extra).saturating_add(HEADROOM);
        match &self.hold {
            Hold::None => Ok(()),
            Hold::File(_) if want <= self.allocated => Ok(()),
            Hold::File(_) if self.lent > 0 => {
                // A batch is being written with space lent to it: growing now must leave
                // that space free for the batch (fallocate would take it back).
                let grow = want - self.allocated;
                if self.free_bytes() < self.lent.saturating_add(grow) {
                    return Err(libc::ENOSPC);
                }
                self.grow(want.div_ceil(4096) * 4096)
            }
            Hold::File(_) => {
                let step = want.div_ceil(STEP).saturating_mul(STEP);
                match self.grow(step) {
                    Err(libc::ENOSPC) | Err(libc::EDQUOT) => self.grow(want.div_ceil(4096) * 4096),
                    other => other,
                }
                .or_else(|errno| {
                    if errno == libc::EOPNOTSUPP {
                        // No fallocate here: check free space instead from now on.
                        self.hold = self.dir.clone().map_or(Hold::None, Hold::Check);
                        self.allocated = 0;
                        return self.ensure(extra);
                    }
                    Err(errno)
                })
            }
            Hold::Check(dir) => {
                let mut st = zeroed_statvfs();
                // SAFETY: a NUL-terminated path and a local out-parameter.
                if unsafe { libc::statvfs(dir.as_ptr(), &mut st) } != 0 {
                    return Ok(());
                }
                if st.f_flag & libc::ST_RDONLY != 0 {
                    return Err(libc::EROFS);
                }
                let free = st.f_bavail.saturating_mul(st.f_frsize);
                if free < want {
                    return Err(libc::ENOSPC);
                }
                Ok(())
            }
        }
    }

    /// What one batch's commit takes besides its records: a table's last block and file
    /// system overhead (8 KiB), and `tables.list` written anew beside the old one (it
    /// grows while compaction cannot run: a full disk leaves every table in place).
    fn batch_overhead(&self) -> u64 {
        let list = match &self.dir {
            Some(dir) => {
                let mut path = dir.as_bytes().to_vec();
                path.extend_from_slice(b"/tables.list");
                let path = std::path::PathBuf::from(std::ffi::OsString::from(
                    <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&path),
                ));
                std::fs::metadata(path).map_or(0, |m| m.len())
            }
            None => 0,
        };
        (8 << 10) + 2 * list
    }

    /// Free bytes on the file system (for an unprivileged writer), `u64::MAX` when it
    /// cannot be told.
    fn free_bytes(&self) -> u64 {
        let Some(dir) = &self.dir else {
            return u64::MAX;
        };
        let mut st = zeroed_statvfs();
        // SAFETY: a NUL-terminated path and a local out-parameter.
        if unsafe { libc::statvfs(dir.as_ptr(), &mut st) } != 0 {
            return u64::MAX;
        }
        st.f_bavail.saturating_mul(st.f_frsize)
    }

    /// Allocates the file up to `target` bytes.
    fn grow(&mut self, target: u64) -> Result<(), i32> {
        let Hold::File(fd) = &self.hold else {
            return Ok(());
        };
        let len = libc::off_t::try_from(target).map_err(|_| libc::EFBIG)?;
        // SAFETY: fallocate on our own descriptor.
        if unsafe { libc::fallocate(fd.as_raw_fd(), 0, 0, len) } == 0 {
            self.allocated = self.allocated.max(target);
            return Ok(());
        }
        Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO))
    }

    /// Before writing batch `seq`: gives the space promised to it (and the headroom) back
    /// to the file system, so that its table finds room.
    pub fn make_room(&mut self, seq: u64) {
        let Hold::File(fd) = &self.hold else { return };
        let due: u64 = self
            .promised
            .range(..=seq.saturating_add(1))
            .map(|(_, b)| b)
            .sum();
        let room = due.saturating_add(HEADROOM).min(self.allocated);
        let keep = self.allocated - room;
        let Ok(len) = libc::off_t::try_from(keep) else {
            return;
        };
        // SAFETY: ftruncate on our own descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len) } == 0 {
            self.lent = self.lent.saturating_add(self.allocated - keep);
            self.allocated = keep;
        }
    }

    /// Batch `seq` was written (or failed): its promises end (`idle`: nothing is pending
    /// any more, so every promise ends); the reservation grows back to what the rest
    /// needs, if it can (if not, the next promise fails at its call).
    pub fn written(&mut self, seq: u64, idle: bool) {
        if idle {
            self.promised.clear();
        } else {
            let rest = self.promised.split_off(&seq.saturating_add(1));
            self.promised = rest;
        }
        self.total = self.promised.values().sum();
        self.staged.store(self.total, Ordering::Relaxed);
        // Take back what was lent for the table, as far as the table left it free.
        let lent = std::mem::take(&mut self.lent);
        if lent > 0 && self.grow(self.allocated.saturating_add(lent)).is_err() {
            let _ = self.grow(self.total.saturating_add(HEADROOM).div_ceil(4096) * 4096);
        }
        let _ = self.ensure(0);
    }

    /// The promised bytes, readable without the state lock.
    pub fn staged(&self) -> Arc<AtomicU64> {
        self.staged.clone()
    }

    /// Shares `counter` as this reservation's [`Reserve::staged`] (a reservation that
    /// replaces another keeps its readers).
    pub fn with_counter(mut self, counter: Arc<AtomicU64>) -> Reserve {
        counter.store(self.total, Ordering::Relaxed);
        self.staged = counter;
        self
    }

    /// Bytes promised and not yet written, and bytes held (for `status`).
    pub fn usage(&self) -> (u64, u64) {
        (self.total, self.allocated)
    }
}

fn zeroed_statvfs() -> libc::statvfs {
    // SAFETY: statvfs is a plain C struct of integers; all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promises_are_held_by_allocated_space_and_released_when_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut r = Reserve::open(dir.path());
        assert!(matches!(r.hold, Hold::File(_)), "O_TMPFILE works here");
        assert_eq!(r.usage(), (0, STEP));
        let o = r.batch_overhead();
        assert_eq!(o, 8 << 10, "no tables.list here");
        r.promise(2, 1000).expect("room");
        r.promise(2, 1000).expect("room");
        r.promise(3, 3 * STEP).expect("room");
        assert_eq!(
            r.usage().0,
            3 * STEP + 2000 + 2 * o,
            "one overhead per batch"
        );
        assert!(r.usage().1 >= r.usage().0 + HEADROOM);
        let before = r.usage().1;
        r.make_room(1);
        assert_eq!(
            before - r.usage().1,
            2000 + o + HEADROOM,
            "batch 2's share lent"
        );
        r.written(1, false);
        assert_eq!(
            r.usage().0,
            3 * STEP + 2000 + 2 * o,
            "batch 1 carried none of them"
        );
        assert!(r.usage().1 >= r.usage().0 + HEADROOM, "taken back");
        r.written(2, false);
        assert_eq!(r.usage().0, 3 * STEP + o);
        r.written(9, true);
        assert_eq!(r.usage().0, 0);
        // Nothing of the reservation is left in the directory.
        assert_eq!(std::fs::read_dir(dir.path()).expect("ls").count(), 0);
    }

    #[test]
    fn none_promises_everything() {
        let mut r = Reserve::none();
        r.promise(1, u64::MAX / 4).expect("no check");
        r.written(1, true);
        assert_eq!(r.usage(), (0, 0));
    }
}
