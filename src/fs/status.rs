//! `MOUNTPOINT/.reftablefs/status`: what the mount is doing, as one JSON document
//! (version 1, format in docs/cli.md and `status_file.rs`; read by `reftablefs status`).
//!
//! `.reftablefs` is a directory of the mount itself, never of the git directory: it is
//! found by `lookup` at the root but not listed by `readdir` (tools walking the git
//! directory do not see it), it holds only `status`, and nothing in it can be written,
//! created, renamed or removed (`EACCES`). The document is made when the file is opened
//! (later reads of that open file see the same snapshot).
//!
//! The events it reports (refused operations, conflicts, commits) are recorded by
//! `record.rs`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

pub use crate::fs::ino::{is_status_name, STATUS_DIR_NAME as DIR_NAME};
use crate::fs::ino::{STATUS_DIR as DIR_INO, STATUS_FILE as FILE_INO};
use crate::fs::record::{errno_name, unix_now};
use crate::fs::state::Shared;
use crate::status_file::{Conflict, LastCommit, Refusal, Report, StaleLock};

/// The name of the status file in it.
pub const FILE_NAME: &[u8] = b"status";
/// The largest document served (the lists are bounded well below it).
pub const MAX_BYTES: usize = 1 << 20;
/// A `tables.list.lock` held by no process for this long is reported as stale.
pub const STALE_LOCK_AGE: Duration = Duration::from_secs(5);
/// File handles of open status files have this bit set (the state's handles count up
/// from 1).
const FH_BIT: u64 = 1 << 62;

/// A mount's open status files: their snapshot (the document made at `open`). The
/// mount owns one (its router hands it to the status node), not the process.
#[derive(Debug, Default)]
pub struct OpenDocs {
    docs: Mutex<HashMap<u64, std::sync::Arc<Vec<u8>>>>,
    next_fh: AtomicU64,
}

impl OpenDocs {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, std::sync::Arc<Vec<u8>>>> {
        self.docs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens a status file: makes the document and returns its handle.
    pub(crate) fn open(&self, shared: &Shared) -> u64 {
        let doc = std::sync::Arc::new(document(shared));
        let fh = FH_BIT | self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(fh, doc);
        fh
    }

    /// Reads from an open status file.
    pub fn read(&self, fh: u64, offset: u64, size: u32) -> Option<Vec<u8>> {
        let docs = self.lock();
        let doc = docs.get(&fh)?;
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(doc.len());
        let end = start.saturating_add(size as usize).min(doc.len());
        Some(doc.get(start..end).unwrap_or_default().to_vec())
    }

    /// Closes an open status file.
    pub fn release(&self, fh: u64) {
        self.lock().remove(&fh);
    }
}

/// Whether `fh` is an open status file.
pub fn is_handle(fh: u64) -> bool {
    fh & FH_BIT != 0
}

/// The status document, newline-terminated.
pub(crate) fn document(shared: &Shared) -> Vec<u8> {
    let (pending, batch_age) = shared.pending_status();
    let (known, dropping, cap) = shared.inode_status();
    // Diagnosed without the recorder's lock, which request threads take.
    let dir = shared.rec.rec().reftable_dir.clone();
    let stale = dir
        .map(|d| stale_locks(&d.join("tables.list.lock")))
        .unwrap_or_default();
    let r = shared.rec.rec();
    let doc = Report {
        version: crate::status_file::VERSION,
        repository: r.repository.clone(),
        pid: Some(u64::from(std::process::id())),
        mode: Some(if r.read_only { "ro" } else { "rw" }.into()),
        mounted_at: Some(r.mounted_at),
        now: Some(unix_now()),
        pending_edits: pending,
        known_names: Some(known as u64),
        known_names_dropping: Some(dropping as u64),
        inode_cap: Some(cap as u64),
        follow_cpu: Some(crate::fs::cpu::enabled()),
        io_uring: crate::fs::uring::serving().map(|u| crate::status_file::IoUring {
            queues: u.queues as u64,
            threads: u.threads as u64,
            requests: u.requests,
        }),
        open_batch_age_ms: batch_age.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        commits: Some(r.commits),
        last_commit: r.last_commit.as_ref().map(|(ui, table, time)| LastCommit {
            update_index: *ui,
            table: table.clone(),
            time: Some(*time),
        }),
        conflicts_total: r.conflicts.total,
        conflicts: (r.conflicts.last.iter())
            .map(|e| Conflict {
                time: Some(e.time),
                name: e.what.clone(),
                reason: e.reason.clone(),
            })
            .collect(),
        refused_total: r.refused.total,
        refused: (r.refused.last.iter())
            .map(|e| Refusal {
                time: Some(e.time),
                path: e.what.clone(),
                op: e.op.clone(),
                errno: e.errno.map(errno_name),
                reason: e.reason.clone(),
            })
            .collect(),
        stale_locks: stale,
    };
    drop(r);
    let mut out = doc.to_json();
    if out.len() > MAX_BYTES {
        // Cannot happen with the bounded lists; stay within the promised size.
        out = format!(
            "{{\"version\":1,\"pending_edits\":{pending},\"error\":\"document too large\"}}\n"
        )
        .into_bytes();
    }
    out
}

/// The stale-lock entries for `lock` (path relative to the git directory).
fn stale_locks(lock: &std::path::Path) -> Vec<StaleLock> {
    match crate::lockfile::diagnose(lock) {
        Ok(Some(d)) if d.is_stale(STALE_LOCK_AGE) => vec![StaleLock {
            path: "reftable/tables.list.lock".into(),
            age_s: Some(d.age.as_secs()),
        }],
        _ => Vec::new(),
    }
}

/// The status directory and file as a [`Backend`](crate::fs::backend::Backend): found,
/// read, listed; every change refused (`EACCES`, recorded).
pub mod node {
    use std::sync::Arc;
    use std::time::Duration;

    use fuser::{FileAttr, FileType, FopenFlags};

    use super::{DIR_INO, DIR_NAME, FILE_INO, FILE_NAME};
    use crate::fs::backend::{
        self, AddEntry, Attrs, Backend, Entry, HandleAt, Made, NewNode, Opened, Opening, Rename,
        Req, SetAttr,
    };
    use crate::fs::error::FsError;
    use crate::fs::ino::ROOT;
    use crate::fs::state::Shared;
    use crate::fs::view::Kind;

    const DIR_TTL: Duration = Duration::from_secs(1);

    /// The status node of the mount whose main view is `shared`.
    pub struct StatusNode {
        pub shared: Arc<Shared>,
        /// The mount's open status files.
        pub docs: Arc<super::OpenDocs>,
    }

    fn ttl(ino: u64) -> Duration {
        if ino == DIR_INO {
            DIR_TTL
        } else {
            Duration::ZERO
        }
    }

    impl StatusNode {
        fn attr_of(&self, ino: u64) -> FileAttr {
            let now = std::time::SystemTime::now();
            let (uid, gid) = self.shared.owner();
            if ino == DIR_INO {
                let mut a = crate::fs::attr::attr(ino, Kind::Dir, 4096, now, uid, gid);
                a.perm = 0o555;
                a
            } else {
                let size = super::document(&self.shared).len() as u64;
                let mut a = crate::fs::attr::attr(ino, Kind::Ref, size, now, uid, gid);
                a.perm = 0o444;
                a
            }
        }
    }

    impl StatusNode {
        /// A change in the status directory (create, write, rename, unlink, ...):
        /// refused.
        pub fn refuse(&self, op: &str, name: &[u8]) -> FsError {
            let mut path = DIR_NAME.to_vec();
            if name != DIR_NAME {
                path.push(b'/');
                path.extend_from_slice(name);
            }
            self.shared.rec.refuse_for(
                op,
                &path,
                libc::EACCES,
                "the mount's status directory is read-only",
            )
        }
    }

    /// The name of `ino` for a refusal.
    fn name_of(ino: u64) -> &'static [u8] {
        if ino == DIR_INO {
            DIR_NAME
        } else {
            FILE_NAME
        }
    }

    impl Backend for StatusNode {
        /// `.reftablefs` at the root, or `status` in it.
        fn lookup(&self, _req: Req, parent: u64, name: &[u8]) -> Result<Entry, FsError> {
            let ino = match (parent, name) {
                (ROOT, DIR_NAME) => DIR_INO,
                (DIR_INO, FILE_NAME) => FILE_INO,
                _ => return Err(FsError::ENOENT),
            };
            Ok(Entry {
                attr: self.attr_of(ino),
                attr_ttl: ttl(ino),
                entry_ttl: ttl(ino),
            })
        }

        fn getattr(&self, _req: Req, ino: u64, _fh: Option<u64>) -> Result<Attrs, FsError> {
            Ok((self.attr_of(ino), ttl(ino)))
        }

        fn setattr(&self, _req: Req, ino: u64, _a: &SetAttr) -> Result<Attrs, FsError> {
            Err(self.refuse("setattr", name_of(ino)))
        }

        /// Opens the status file for reading (its document is made now); anything else
        /// is refused.
        fn open(&self, _req: Req, ino: u64, how: Opening<'_>) -> Result<Opened, FsError> {
            let flags = how.flags;
            if ino == DIR_INO {
                return Err(FsError::EISDIR);
            }
            if flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0 {
                return Err(self.refuse("open", FILE_NAME));
            }
            Ok(Opened {
                fh: self.docs.open(&self.shared),
                flags: FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_NOFLUSH,
                backing: None,
            })
        }

        fn create(&self, _req: Req, n: NewNode<'_>, _how: Opening<'_>) -> Result<Made, FsError> {
            Err(self.refuse("create", n.name))
        }

        fn read(
            &self,
            _req: Req,
            at: HandleAt,
            size: u32,
            _flags: i32,
        ) -> Result<Vec<u8>, FsError> {
            self.docs.read(at.fh, at.offset, size).ok_or(FsError::EBADF)
        }

        fn release(&self, _ino: u64, fh: u64) {
            self.docs.release(fh);
        }

        fn unlink(&self, _req: Req, _parent: u64, name: &[u8]) -> Result<(), FsError> {
            Err(self.refuse("unlink", name))
        }

        fn mkdir(&self, _req: Req, n: NewNode<'_>) -> Result<Entry, FsError> {
            Err(self.refuse("mkdir", n.name))
        }

        fn rmdir(&self, _req: Req, _parent: u64, name: &[u8]) -> Result<(), FsError> {
            Err(self.refuse("rmdir", name))
        }

        fn rename(&self, _req: Req, r: &Rename<'_>) -> Result<(), FsError> {
            Err(self.refuse("rename", r.name))
        }

        fn opendir(&self, _req: Req, ino: u64) -> Result<u64, FsError> {
            if ino == DIR_INO {
                Ok(0)
            } else {
                Err(FsError::ENOTDIR)
            }
        }

        /// Lists `.`, `..` and `status`.
        fn readdir(&self, _req: Req, at: HandleAt, add: AddEntry<'_>) -> Result<(), FsError> {
            backend::list(
                DIR_INO,
                ROOT,
                at.offset,
                |k| (k == 0).then_some((FILE_INO, FileType::RegularFile, FILE_NAME)),
                add,
            );
            Ok(())
        }

        fn releasedir(&self, _ino: u64, _fh: u64) {}

        fn symlink(
            &self,
            _req: Req,
            _parent: u64,
            name: &[u8],
            _to: &[u8],
        ) -> Result<Entry, FsError> {
            Err(self.refuse("symlink", name))
        }
    }
}
