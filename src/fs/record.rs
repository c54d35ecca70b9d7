//! What the mount records for `reftablefs status`: refused operations, conflicts and
//! commits, each list bounded to its last [`KEEP`] entries, in one [`Recorder`] per
//! mount, made by the mount and handed to every tree it serves (its ref views, the
//! passthrough); and the one place that turns a refusal into a log line and a record
//! (`Recorder::refuse`). `status.rs` serves them as the status document.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::fs::budget::HELD_BYTES_MAX;
use crate::fs::error::{FsError, Refusal};

/// How many entries of each event list are kept.
pub const KEEP: usize = 100;

/// One event (a refused operation or a conflict).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Event {
    pub time: u64,
    pub what: String,
    pub op: Option<String>,
    pub errno: Option<i32>,
    pub reason: String,
}

/// A bounded list of events and how many there were in all.
#[derive(Debug, Default)]
pub(crate) struct Events {
    pub total: u64,
    pub last: VecDeque<Event>,
}

impl Events {
    fn push(&mut self, e: Event) {
        self.total += 1;
        if self.last.len() >= KEEP {
            self.last.pop_front();
        }
        self.last.push_back(e);
    }
}

/// What is recorded (a snapshot of it makes the status document).
#[derive(Debug, Default)]
pub(crate) struct Rec {
    pub repository: Option<String>,
    pub reftable_dir: Option<PathBuf>,
    pub read_only: bool,
    pub mounted_at: u64,
    pub commits: u64,
    pub last_commit: Option<(u64, String, u64)>,
    pub conflicts: Events,
    pub refused: Events,
}

/// What the mount records for its status file (one per mount, shared by its trees).
#[derive(Debug, Default)]
pub struct Recorder {
    rec: Mutex<Rec>,
}

pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The symbolic name of an errno (`EACCES`), or its number.
pub fn errno_name(e: i32) -> String {
    let name = match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EIO => "EIO",
        libc::EBADF => "EBADF",
        libc::EACCES => "EACCES",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::EXDEV => "EXDEV",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::EFBIG => "EFBIG",
        libc::ENOSPC => "ENOSPC",
        libc::EROFS => "EROFS",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::ENOTSUP => "ENOTSUP",
        libc::ENFILE => "ENFILE",
        libc::ENOMEM => "ENOMEM",
        libc::EDQUOT => "EDQUOT",
        libc::ELOOP => "ELOOP",
        _ => return e.to_string(),
    };
    name.to_owned()
}

impl Recorder {
    pub(crate) fn rec(&self) -> std::sync::MutexGuard<'_, Rec> {
        self.rec.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The mount started: what it serves and how.
    pub fn mounted(&self, repository: Option<String>, reftable_dir: PathBuf, read_only: bool) {
        let mut r = self.rec();
        r.repository = repository;
        r.reftable_dir = Some(reftable_dir);
        r.read_only = read_only;
        r.mounted_at = unix_now();
    }

    /// A client operation on `path` was answered with `errno` for `reason`.
    pub fn refused(&self, op: &str, path: &[u8], errno: i32, reason: &str) {
        self.rec().refused.push(Event {
            time: unix_now(),
            what: String::from_utf8_lossy(path).into_owned(),
            op: Some(op.to_owned()),
            errno: Some(errno),
            reason: reason.to_owned(),
        });
    }

    /// An edit of ref `name` was not written at commit (another writer changed the ref,
    /// or the batch failed), for `reason`.
    pub fn conflict(&self, name: &[u8], reason: &str) {
        self.rec().conflicts.push(Event {
            time: unix_now(),
            what: String::from_utf8_lossy(name).into_owned(),
            op: None,
            errno: None,
            reason: reason.to_owned(),
        });
    }

    /// The mount committed a table: the stack's last table is now `last` (its highest
    /// update index and file name), if known.
    pub fn committed(&self, last: Option<(u64, String)>) {
        let mut r = self.rec();
        r.commits += 1;
        if let Some((ui, name)) = last {
            r.last_commit = Some((ui, name, unix_now()));
        }
    }
}

/// Logs one error line: what failed, on which path, and why.
pub fn log_error(op: &str, path: &[u8], err: &dyn std::fmt::Display) {
    log::error!("reftablefs: {op} {}: {err}", String::from_utf8_lossy(path));
}

impl Recorder {
    /// A refused request: logged, recorded for `reftablefs status`, and returned as
    /// [`FsError::Refused`] (so it is recorded once, here). Every refusal with a reason
    /// goes through here.
    pub(crate) fn refuse(&self, op: &str, path: &[u8], r: Refusal) -> FsError {
        // A refusal is the client's doing, not the mount's failure: a warning.
        log::warn!(
            "reftablefs: {op} {}: {}",
            String::from_utf8_lossy(path),
            r.reason
        );
        self.refused(op, path, r.errno, &r.reason);
        FsError::Refused {
            errno: r.errno,
            reason: r.reason,
        }
    }

    /// [`refuse`](Self::refuse) with the errno and the reason given apart.
    pub(crate) fn refuse_for(
        &self,
        op: &str,
        path: &[u8],
        errno: i32,
        reason: impl Into<String>,
    ) -> FsError {
        self.refuse(op, path, Refusal::new(errno, reason))
    }

    /// An `EFBIG` from `budget::splice` or `budget::resize_bounded` as a recorded refusal
    /// (other errnos pass through).
    pub(crate) fn too_big(&self, op: &str, path: &[u8], e: FsError, limit: usize) -> FsError {
        if e.errno() != libc::EFBIG {
            return e;
        }
        self.refuse_for(
            op,
            path,
            libc::EFBIG,
            format!(
                "a file here holds at most {limit} bytes, and all lock and scratch files \
                 together {HELD_BYTES_MAX}"
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_lists_keep_the_last_entries_and_count_all() {
        let mut ev = Events::default();
        for i in 0..(KEEP as u64 + 7) {
            ev.push(Event {
                time: i,
                what: format!("refs/heads/b{i}"),
                op: None,
                errno: None,
                reason: "r".into(),
            });
        }
        assert_eq!(ev.total, KEEP as u64 + 7);
        assert_eq!(ev.last.len(), KEEP);
        assert_eq!(ev.last.front().map(|e| e.time), Some(7));
        assert_eq!(errno_name(libc::EACCES), "EACCES");
        assert_eq!(errno_name(12345), "12345");
    }

    /// Each mount records into its own recorder: a refusal made through one is in its
    /// record only, with its errno, and is answered as a refusal.
    #[test]
    fn a_refusal_is_recorded_by_its_own_recorder_only() {
        let (mine, other) = (Recorder::default(), Recorder::default());
        let e = mine.refuse_for("create", b"refs/heads/x", libc::EPERM, "why");
        assert_eq!(e.errno(), libc::EPERM);
        assert!(matches!(e, FsError::Refused { .. }), "{e:?}");
        {
            let r = mine.rec();
            assert_eq!(r.refused.total, 1);
            let ev = r.refused.last.front().expect("recorded");
            assert_eq!(
                (ev.what.as_str(), ev.op.as_deref(), ev.errno),
                ("refs/heads/x", Some("create"), Some(libc::EPERM))
            );
        }
        assert_eq!(other.rec().refused.total, 0, "recorded by another mount");
        // Not an EFBIG: passed through, not recorded.
        let e = mine.too_big("write", b"refs/heads/x", FsError::EIO, 10);
        assert_eq!((e.errno(), mine.rec().refused.total), (libc::EIO, 1));
    }
}
