//! `MOUNTPOINT/.reftablefs/status`: what the mount is doing, as one JSON document
//! (version 1, format in docs/cli.md; read by `reftablefs status`).
//!
//! `.reftablefs` is a directory of the mount itself, never of the git directory: it is
//! found by `lookup` at the root but not listed by `readdir` (tools walking the git
//! directory do not see it), it holds only `status`, and nothing in it can be written,
//! created, renamed or removed (`EACCES`). The document is made when the file is opened
//! (later reads of that open file see the same snapshot).
//!
//! The events it reports (refused operations, conflicts, commits) are recorded in one
//! [`Recorder`] per process (a `reftablefs mount` process serves one mount), each list
//! bounded to its last [`KEEP`] entries.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::fs::state::Shared;
use crate::json::Value;

/// The name of the directory at the root of the mount.
pub const DIR_NAME: &[u8] = b".reftablefs";
/// The name of the status file in it.
pub const FILE_NAME: &[u8] = b"status";
/// The directory's and the file's inode numbers (`ino.rs`).
use crate::fs::ino::{STATUS_DIR as DIR_INO, STATUS_FILE as FILE_INO};
/// How many entries of each event list are kept.
pub const KEEP: usize = 100;
/// The largest document served (the lists are bounded well below it).
pub const MAX_BYTES: usize = 1 << 20;
/// A `tables.list.lock` held by no process for this long is reported as stale.
pub const STALE_LOCK_AGE: Duration = Duration::from_secs(5);
/// File handles of open status files have this bit set (the state's handles count up
/// from 1).
const FH_BIT: u64 = 1 << 62;

/// One event (a refused operation or a conflict).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Event {
    time: u64,
    what: String,
    op: Option<String>,
    errno: Option<i32>,
    reason: String,
}

/// A bounded list of events and how many there were in all.
#[derive(Debug, Default)]
struct Events {
    total: u64,
    last: VecDeque<Event>,
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

#[derive(Debug, Default)]
struct Rec {
    repository: Option<String>,
    reftable_dir: Option<PathBuf>,
    read_only: bool,
    mounted_at: u64,
    commits: u64,
    last_commit: Option<(u64, String, u64)>,
    conflicts: Events,
    refused: Events,
    /// Open status files: their snapshot.
    open: HashMap<u64, std::sync::Arc<Vec<u8>>>,
}

/// What the mount records for its status file.
#[derive(Debug, Default)]
pub struct Recorder {
    rec: Mutex<Rec>,
    next_fh: AtomicU64,
}

/// The process's recorder.
pub fn recorder() -> &'static Recorder {
    static R: OnceLock<Recorder> = OnceLock::new();
    R.get_or_init(Recorder::default)
}

fn unix_now() -> u64 {
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
    fn rec(&self) -> std::sync::MutexGuard<'_, Rec> {
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

    /// Opens a status file: makes the document and returns its handle.
    pub(crate) fn open(&self, shared: &Shared) -> u64 {
        let doc = std::sync::Arc::new(self.document(shared));
        let fh = FH_BIT | self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.rec().open.insert(fh, doc);
        fh
    }

    /// Whether `fh` is an open status file.
    pub fn is_handle(fh: u64) -> bool {
        fh & FH_BIT != 0
    }

    /// Reads from an open status file.
    pub fn read(&self, fh: u64, offset: u64, size: u32) -> Option<Vec<u8>> {
        let r = self.rec();
        let doc = r.open.get(&fh)?;
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(doc.len());
        let end = start.saturating_add(size as usize).min(doc.len());
        Some(doc.get(start..end).unwrap_or_default().to_vec())
    }

    /// Closes an open status file.
    pub fn release(&self, fh: u64) {
        self.rec().open.remove(&fh);
    }

    /// The status document, newline-terminated.
    pub(crate) fn document(&self, shared: &Shared) -> Vec<u8> {
        let (pending, batch_age) = shared.pending_status();
        let (known, dropping, cap) = shared.inode_status();
        let num = |n: u64| Value::Num(n as f64);
        let events = |ev: &Events, key: &str| {
            Value::Arr(
                ev.last
                    .iter()
                    .map(|e| {
                        let mut o = vec![
                            ("time".to_owned(), num(e.time)),
                            (key.to_owned(), Value::Str(e.what.clone())),
                        ];
                        if let Some(op) = &e.op {
                            o.push(("op".into(), Value::Str(op.clone())));
                        }
                        if let Some(errno) = e.errno {
                            o.push(("errno".into(), Value::Str(errno_name(errno))));
                        }
                        o.push(("reason".into(), Value::Str(e.reason.clone())));
                        Value::Obj(o)
                    })
                    .collect(),
            )
        };
        // Diagnosed without the recorder's lock, which request threads take.
        let dir = self.rec().reftable_dir.clone();
        let stale = dir
            .map(|d| stale_locks(&d.join("tables.list.lock")))
            .unwrap_or_default();
        let r = self.rec();
        let doc = Value::Obj(vec![
            ("version".into(), num(1)),
            (
                "repository".into(),
                r.repository.clone().map_or(Value::Null, Value::Str),
            ),
            ("pid".into(), num(u64::from(std::process::id()))),
            (
                "mode".into(),
                Value::Str(if r.read_only { "ro" } else { "rw" }.into()),
            ),
            ("mounted_at".into(), num(r.mounted_at)),
            ("now".into(), num(unix_now())),
            ("pending_edits".into(), num(pending)),
            ("known_names".into(), num(known as u64)),
            ("known_names_dropping".into(), num(dropping as u64)),
            ("inode_cap".into(), num(cap as u64)),
            ("follow_cpu".into(), Value::Bool(crate::fs::cpu::enabled())),
            (
                "open_batch_age_ms".into(),
                batch_age.map_or(Value::Null, |d| {
                    num(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                }),
            ),
            ("commits".into(), num(r.commits)),
            (
                "last_commit".into(),
                r.last_commit
                    .as_ref()
                    .map_or(Value::Null, |(ui, table, time)| {
                        Value::Obj(vec![
                            ("update_index".into(), num(*ui)),
                            ("table".into(), Value::Str(table.clone())),
                            ("time".into(), num(*time)),
                        ])
                    }),
            ),
            ("conflicts_total".into(), num(r.conflicts.total)),
            ("conflicts".into(), events(&r.conflicts, "ref")),
            ("refused_total".into(), num(r.refused.total)),
            ("refused".into(), events(&r.refused, "path")),
            ("stale_locks".into(), Value::Arr(stale)),
        ]);
        drop(r);
        let mut out = doc.to_json().into_bytes();
        out.push(b'\n');
        if out.len() > MAX_BYTES {
            // Cannot happen with the bounded lists; stay within the promised size.
            out = format!(
                "{{\"version\":1,\"pending_edits\":{pending},\"error\":\"document too large\"}}\n"
            )
            .into_bytes();
        }
        out
    }
}

/// The stale-lock entries for `lock` (path relative to the git directory).
fn stale_locks(lock: &std::path::Path) -> Vec<Value> {
    match crate::lockfile::diagnose(lock) {
        Ok(Some(d)) if d.is_stale(STALE_LOCK_AGE) => vec![Value::Obj(vec![
            (
                "path".into(),
                Value::Str("reftable/tables.list.lock".into()),
            ),
            ("age_s".into(), Value::Num(d.age.as_secs() as f64)),
        ])],
        _ => Vec::new(),
    }
}

/// Whether `parent/name` is the status directory or lies in it.
pub fn is_status_name(parent: u64, name: &[u8]) -> bool {
    (parent == crate::fs::ino::ROOT && name == DIR_NAME) || parent == DIR_INO
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
}

/// The request handlers for the status directory and file (called by `fuse.rs` before
/// anything else looks at a request on them).
pub(crate) mod serve {
    use std::ffi::OsStr;
    use std::time::Duration;

    use fuser::{
        Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, ReplyAttr,
        ReplyData, ReplyDirectory, ReplyEntry, ReplyOpen,
    };

    use super::{recorder, Recorder, DIR_INO, DIR_NAME, FILE_INO, FILE_NAME};
    use crate::fs::ino::ROOT;
    use crate::fs::state::Shared;
    use crate::fs::view::Kind;

    const DIR_TTL: Duration = Duration::from_secs(1);

    fn attr_of(shared: &Shared, ino: u64) -> FileAttr {
        let now = std::time::SystemTime::now();
        let (uid, gid) = shared.owner();
        if ino == DIR_INO {
            let mut a = crate::fs::fuse::attr(ino, Kind::Dir, 4096, now, uid, gid);
            a.perm = 0o555;
            a
        } else {
            let size = recorder().document(shared).len() as u64;
            let mut a = crate::fs::fuse::attr(ino, Kind::Ref, size, now, uid, gid);
            a.perm = 0o444;
            a
        }
    }

    fn ttl(ino: u64) -> Duration {
        if ino == DIR_INO {
            DIR_TTL
        } else {
            Duration::ZERO
        }
    }

    /// `lookup` of `.reftablefs` at the root or of a name in it.
    pub fn lookup(shared: &Shared, parent: u64, name: &[u8], reply: ReplyEntry) {
        let ino = match (parent, name) {
            (ROOT, DIR_NAME) => DIR_INO,
            (DIR_INO, FILE_NAME) => FILE_INO,
            _ => return reply.error(Errno::ENOENT),
        };
        let a = attr_of(shared, ino);
        reply.entry_with_ttls(&ttl(ino), &ttl(ino), &a, Generation(0));
    }

    pub fn getattr(shared: &Shared, ino: u64, reply: ReplyAttr) {
        reply.attr(&ttl(ino), &attr_of(shared, ino));
    }

    /// Opens the status file for reading (its document is made now); anything else is
    /// refused.
    pub fn open(shared: &Shared, ino: u64, flags: i32, reply: ReplyOpen) {
        if ino == DIR_INO {
            return reply.error(Errno::EISDIR);
        }
        if flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0 {
            return reply.error(refuse("open", FILE_NAME));
        }
        let fh = recorder().open(shared);
        reply.opened(
            FileHandle(fh),
            FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_NOFLUSH,
        );
    }

    pub fn read(fh: u64, offset: u64, size: u32, reply: ReplyData) {
        match recorder().read(fh, offset, size) {
            Some(d) => reply.data(&d),
            None => reply.error(Errno::EBADF),
        }
    }

    pub fn release(fh: u64) {
        recorder().release(fh);
    }

    pub fn is_handle(fh: u64) -> bool {
        Recorder::is_handle(fh)
    }

    pub fn opendir(ino: u64, reply: ReplyOpen) {
        if ino == DIR_INO {
            reply.opened(FileHandle(0), FopenFlags::empty());
        } else {
            reply.error(Errno::ENOTDIR);
        }
    }

    /// Lists `.`, `..` and `status`.
    pub fn readdir(offset: u64, mut reply: ReplyDirectory) {
        let entries: [(u64, FileType, &[u8]); 3] = [
            (DIR_INO, FileType::Directory, b"."),
            (ROOT, FileType::Directory, b".."),
            (FILE_INO, FileType::RegularFile, FILE_NAME),
        ];
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(start) {
            use std::os::unix::ffi::OsStrExt;
            if reply.add(INodeNo(*ino), i as u64 + 1, *kind, OsStr::from_bytes(name)) {
                break;
            }
        }
        reply.ok();
    }

    /// A change in the status directory (create, write, rename, unlink, ...): refused.
    pub fn refuse(op: &str, name: &[u8]) -> Errno {
        let mut path = DIR_NAME.to_vec();
        if name != DIR_NAME {
            path.push(b'/');
            path.extend_from_slice(name);
        }
        let reason = "the mount's status directory is read-only";
        crate::fs::state::log_error(op, &path, &reason);
        recorder().refused(op, &path, libc::EACCES, reason);
        Errno::EACCES
    }
}
