//! Everything of the git directory that is not a ref: `objects/`, `index`, `config`,
//! `hooks/`, `COMMIT_EDITMSG`, `FETCH_HEAD`, `rebase-merge/`, … passed through to the real
//! git directory, so that the mountpoint is a complete git directory.
//!
//! Every system call reaches the real directory relative to a descriptor opened before
//! mounting, never through the mount itself, and never outside that directory: a path is
//! resolved beneath it with no symbolic link followed in any component (`openat2` with
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`, or without `openat2`
//! a walk that opens each directory `O_NOFOLLOW` from the git directory's descriptor), and
//! the last component is opened `O_NOFOLLOW` or acted on by an `*at` call on its parent's
//! descriptor that does not follow it (`fstatat(AT_SYMLINK_NOFOLLOW)`, `unlinkat`,
//! `renameat2`, `mkdirat`, `symlinkat`, `readlinkat`, `fchmodat2(AT_SYMLINK_NOFOLLOW)`, …).
//! So a directory of GITDIR swapped for a symbolic link while the kernel still holds its
//! entry (`objects/sub` → `/home/me/.ssh`) gives `ELOOP`, not the files it points to; a
//! symbolic link that is itself in GITDIR is still a link through the mount (listed,
//! `readlink`, resolved by the client's kernel). The stack's own files (`reftable/`) are not
//! visible and cannot be created; `config` is a file served without
//! `extensions.refStorage` and stored with it (`config.rs`, `config_view.rs`; a file
//! renamed over it in `config_rename.rs`).
//!
//! Inode numbers have the top bit set (`ino::PASS_BIT`), disjoint from the ref views'
//! (`ino.rs`). A node is remembered as (parent, name) while the
//! kernel holds it, so a path is rebuilt from the parents at each request and a renamed
//! directory takes its children along. Regular files are opened with the kernel's FUSE
//! passthrough (reads, writes and mmap go straight to the real file) when the kernel and
//! our privileges allow it, else forwarded by `pread`/`pwrite`.

use std::collections::HashMap;
use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{BackingId, FileAttr, FileType, INodeNo};

use crate::fs::backend::{DirEntry, SetAttr};
use crate::fs::error::FsError;
use crate::fs::ino::{pass_ino, ROOT};
use crate::fs::record::Recorder;

mod config;
mod config_rename;
mod dirs;
mod files;
mod resolve;
#[cfg(test)]
mod tests;

use resolve::*;

/// Entry and attribute TTL of passed-through nodes. Changes made through the mount are
/// seen at once (the kernel updates its own view); a change made directly in the git
/// directory is seen within this time, a name made there too (an absent name's answer is
/// kept this long: `pass_backend.rs`).
pub const PASS_TTL: Duration = Duration::from_secs(1);

/// Whether a name at the top of the mount belongs to the ref view: `refs`, `logs`,
/// `packed-refs` (and its `.lock`, `.new`, and go-git's temporary `._packed-refs*`, which
/// it renames over `packed-refs`), git's root refs (`HEAD`, `ORIG_HEAD`, `AUTO_MERGE`, …,
/// by `refname::is_root_ref`) and their `.lock` files. Everything else (`FETCH_HEAD`,
/// `MERGE_HEAD`, `COMMIT_EDITMSG`, `config`, `objects`, …) is passed through.
pub fn is_ref_name_at_root(name: &[u8]) -> bool {
    if matches!(
        name,
        b"refs" | b"logs" | b"packed-refs" | b"packed-refs.lock" | b"packed-refs.new"
    ) || name.starts_with(b"._packed-refs")
    {
        return true;
    }
    let stem = name.strip_suffix(b".lock").unwrap_or(name);
    crate::refname::is_root_ref(stem)
}

/// Names at the top of the real git directory that the mount never shows nor lets anyone
/// create: the stack's directory, the broken refs' file and its temporary name
/// (`broken.rs`), and the packed layer's file with its temporary name
/// (`protocol::STATE_FILE`). (git's stubs `HEAD` and `refs/` are shadowed by the ref view,
/// see [`is_ref_name_at_root`].)
fn is_reserved_at_root(name: &[u8]) -> bool {
    name == b"reftable"
        || name == crate::fs::broken::FILE_NAME.as_bytes()
        || name == crate::fs::broken::TEMP_NAME.as_bytes()
        || name.starts_with(crate::fs::protocol::STATE_FILE.as_bytes())
}

const CONFIG: &[u8] = b"config";

/// One node the kernel holds.
#[derive(Debug)]
struct Node {
    parent: u64,
    name: Box<[u8]>,
    nlookup: u64,
    /// (st_dev, st_ino) of the real file when it was last looked up.
    real: (u64, u64),
    /// `S_IFMT` bits.
    fmt: u32,
    /// Created empty through the mount (`create`) and not `fsync`ed through it since:
    /// what it holds is what a client wrote and never asked to be durable, so `config`
    /// stored from it (renamed over `config`) is not fsynced either (`config.rs`).
    /// `false` for every other node (not known: such a store is fsynced).
    unsynced: bool,
}

enum PHandle {
    File {
        file: Arc<File>,
        ino: u64,
        backed: bool,
    },
    /// An open `config`: the content it shares with every open of it (`config.rs`).
    Config {
        id: u64,
        append: bool,
        writable: bool,
    },
    Dir {
        entries: Arc<Vec<DirEntry>>,
    },
}

/// What an `open` or `create` hands back to the kernel.
pub enum Opened {
    /// Forwarded: reads and writes come to us; `flush`: the handle wants each `close`
    /// (FUSE `FLUSH`; `config` written in place is stored then).
    Plain { fh: u64, direct: bool, flush: bool },
    /// Kernel passthrough on this backing file.
    Backed { fh: u64, backing: Arc<BackingId> },
}

#[derive(Default)]
struct Inner {
    nodes: HashMap<u64, Node>,
    by_real: HashMap<(u64, u64), u64>,
    next_ino: u64,
    handles: HashMap<u64, PHandle>,
    next_fh: u64,
    /// Per inode: its backing file (the kernel wants one per inode) and how many open
    /// handles use it.
    backing: HashMap<u64, (Arc<BackingId>, usize)>,
    /// Listings of the root's passed-through part, keyed by the ref view's directory
    /// handle of the same `opendir`.
    root_lists: HashMap<u64, Arc<Vec<DirEntry>>>,
}

/// The passed-through part of the mount.
pub struct Passthrough {
    root: OwnedFd,
    /// Whether paths are resolved by `openat2` (else walked one component at a time: a
    /// kernel before 5.6, or a sandbox that refuses the call).
    openat2: bool,
    inner: Mutex<Inner>,
    /// The open configs (`config.rs`): taken before `inner`, never under it.
    configs: Mutex<config::Configs>,
    kernel: AtomicBool,
    tmp_seq: AtomicU64,
    /// fsyncs made by stores of `config` (files and GITDIR), for the tests.
    #[cfg_attr(not(test), allow(dead_code))]
    config_syncs: AtomicU64,
    /// `fdatasync`s of stores before their rename when no client asked for durability.
    config_data_syncs: AtomicU64,
    uid: u32,
    gid: u32,
    /// The mount's recorder of refusals (one of its own until [`Passthrough::recording`]).
    rec: Arc<Recorder>,
}

fn cstr(path: &[u8]) -> Result<CString, FsError> {
    CString::new(path).map_err(|_| FsError::EINVAL)
}

fn file_type(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

fn time(sec: i64, nsec: i64) -> SystemTime {
    let nsec = u32::try_from(nsec).unwrap_or(0).min(999_999_999);
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec.unsigned_abs(), nsec)
    } else {
        UNIX_EPOCH - Duration::new(sec.unsigned_abs(), 0) + Duration::new(0, nsec)
    }
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    if dir == b"." {
        return name.to_vec();
    }
    let mut p = Vec::with_capacity(dir.len() + 1 + name.len());
    p.extend_from_slice(dir);
    p.push(b'/');
    p.extend_from_slice(name);
    p
}

impl Inner {
    fn path_of(&self, ino: u64) -> Result<Vec<u8>, FsError> {
        if ino == ROOT {
            return Ok(b".".to_vec());
        }
        let mut parts: Vec<&[u8]> = Vec::new();
        let mut cur = ino;
        while cur != ROOT {
            let n = self.nodes.get(&cur).ok_or(FsError::ESTALE)?;
            parts.push(&n.name);
            if parts.len() > 4096 {
                return Err(FsError::ELOOP);
            }
            cur = n.parent;
        }
        let mut p = Vec::new();
        for (i, part) in parts.iter().rev().enumerate() {
            if i > 0 {
                p.push(b'/');
            }
            p.extend_from_slice(part);
        }
        Ok(p)
    }

    fn remember(&mut self, parent: u64, name: &[u8], st: &libc::stat) -> u64 {
        let real = (st.st_dev, st.st_ino);
        let fmt = st.st_mode & libc::S_IFMT;
        if let Some(&ino) = self.by_real.get(&real) {
            if let Some(n) = self.nodes.get_mut(&ino) {
                if n.fmt == fmt {
                    n.parent = parent;
                    n.name = name.into();
                    n.nlookup += 1;
                    return ino;
                }
            }
        }
        self.next_ino += 1;
        let ino = pass_ino(self.next_ino);
        self.nodes.insert(
            ino,
            Node {
                parent,
                name: name.into(),
                nlookup: 1,
                real,
                fmt,
                unsynced: false,
            },
        );
        self.by_real.insert(real, ino);
        ino
    }

    /// The real file `real` is gone (unlinked, replaced): a new file that reuses its
    /// number gets a new inode.
    fn gone(&mut self, real: (u64, u64)) {
        self.by_real.remove(&real);
    }

    fn add_handle(&mut self, h: PHandle) -> u64 {
        self.next_fh += 1;
        self.handles.insert(self.next_fh, h);
        self.next_fh
    }

    /// The id of the linked worktree whose directory (`worktrees/<id>`) is `ino`.
    fn worktree_of(&self, ino: u64) -> Option<&[u8]> {
        let n = self.nodes.get(&ino)?;
        if n.fmt != libc::S_IFDIR {
            return None;
        }
        let p = self.nodes.get(&n.parent)?;
        (p.parent == ROOT && *p.name == *b"worktrees").then_some(&n.name[..])
    }

    /// Whether `ino` is the root or a linked worktree's directory: there, git's ref
    /// names belong to a ref view and `reftable` is hidden.
    fn is_ref_root(&self, ino: u64) -> bool {
        ino == ROOT || self.worktree_of(ino).is_some()
    }

    fn is_config(&self, ino: u64) -> bool {
        self.nodes
            .get(&ino)
            .is_some_and(|n| n.parent == ROOT && *n.name == *CONFIG)
    }

    /// The open config of handle `fh` (its content's id, whether it may write), if it is
    /// one.
    fn config_of(&self, fh: u64) -> Option<(u64, bool)> {
        match self.handles.get(&fh) {
            Some(PHandle::Config { id, writable, .. }) => Some((*id, *writable)),
            _ => None,
        }
    }
}

impl Passthrough {
    /// Opens the real git directory (before mounting: every later access is relative to
    /// this descriptor).
    pub fn new(gitdir: &Path) -> io::Result<Passthrough> {
        let c = CString::new(std::os::unix::ffi::OsStrExt::as_bytes(gitdir.as_os_str()))
            .map_err(io::Error::other)?;
        // SAFETY: a NUL-terminated path; the descriptor is owned below.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor we just opened and own.
        let root = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let openat2 = openat2(
            root.as_raw_fd(),
            c".",
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            0,
        )
        .is_ok();
        Ok(Passthrough {
            root,
            openat2,
            inner: Mutex::new(Inner::default()),
            configs: Mutex::new(config::Configs::default()),
            kernel: AtomicBool::new(false),
            tmp_seq: AtomicU64::new(0),
            config_syncs: AtomicU64::new(0),
            config_data_syncs: AtomicU64::new(0),
            uid,
            gid,
            rec: Arc::default(),
        })
    }

    /// Records refusals into `rec` (the mount's).
    pub fn recording(mut self, rec: Arc<Recorder>) -> Passthrough {
        self.rec = rec;
        self
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Resolves paths by the walk, as on a kernel without `openat2` (tests).
    #[cfg(test)]
    fn walking(mut self) -> Passthrough {
        self.openat2 = false;
        self
    }

    /// Turns kernel passthrough on (the kernel accepted `FUSE_PASSTHROUGH`) or off.
    pub fn set_kernel_passthrough(&self, on: bool) {
        self.kernel.store(on, Ordering::SeqCst);
    }

    /// Whether regular files are opened with kernel passthrough.
    pub fn kernel_passthrough(&self) -> bool {
        self.kernel.load(Ordering::SeqCst)
    }

    fn attr(&self, ino: u64, st: &libc::stat, size: Option<u64>) -> FileAttr {
        let kind = file_type(st.st_mode);
        FileAttr {
            ino: INodeNo(ino),
            size: size.unwrap_or(st.st_size as u64),
            blocks: st.st_blocks as u64,
            atime: time(st.st_atime, st.st_atime_nsec),
            mtime: time(st.st_mtime, st.st_mtime_nsec),
            ctime: time(st.st_ctime, st.st_ctime_nsec),
            crtime: time(st.st_mtime, st.st_mtime_nsec),
            kind,
            perm: (st.st_mode & 0o7777) as u16,
            nlink: st.st_nlink as u32,
            // The mount is the mounting user's; the real owner may differ (root's files
            // in a user's repository are still shown as the user's, as the ref view does).
            uid: if st.st_uid == 0 { self.uid } else { st.st_uid },
            gid: if st.st_gid == 0 { self.gid } else { st.st_gid },
            rdev: st.st_rdev as u32,
            blksize: st.st_blksize as u32,
            flags: 0,
        }
    }

    /// Attributes of a node whose real file has `st`; `config` gets its size
    /// (`config_size`: the open content's while open; not there when the mount shows
    /// none).
    fn attr_for(&self, ino: u64, is_config: bool, st: &libc::stat) -> Result<FileAttr, FsError> {
        let size = if is_config && st.st_mode & libc::S_IFMT == libc::S_IFREG {
            Some(self.config_size()?.ok_or(FsError::ENOENT)?)
        } else {
            None
        };
        Ok(self.attr(ino, st, size))
    }

    /// Refuses to create or replace a reserved name at the root (or at the top of a
    /// linked worktree's directory).
    fn check_creatable(&self, parent: u64, name: &[u8]) -> Result<(), FsError> {
        if is_reserved_at_root(name) && self.lock().is_ref_root(parent) {
            return Err(self.rec.refuse_for(
                "create",
                name,
                libc::EPERM,
                "the reftable stack's directory is not writable through the mount",
            ));
        }
        Ok(())
    }

    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<FileAttr, FsError> {
        let path = self.child_path(parent, name)?;
        let st = self.lstat(&path)?;
        if parent == ROOT && name == CONFIG && st.st_mode & libc::S_IFMT == libc::S_IFREG {
            // Not there when removed through the mount (GITDIR keeps the extension).
            let size = self.config_size()?.ok_or(FsError::ENOENT)?;
            let ino = self.lock().remember(parent, name, &st);
            return Ok(self.attr(ino, &st, Some(size)));
        }
        let ino = self.lock().remember(parent, name, &st);
        Ok(self.attr(ino, &st, None))
    }

    pub fn forget(&self, ino: u64, n: u64) {
        let mut g = self.lock();
        let Some(node) = g.nodes.get_mut(&ino) else {
            return;
        };
        node.nlookup = node.nlookup.saturating_sub(n);
        if node.nlookup == 0 {
            let real = node.real;
            g.nodes.remove(&ino);
            if g.by_real.get(&real) == Some(&ino) {
                g.by_real.remove(&real);
            }
        }
    }

    pub fn parent_of(&self, ino: u64) -> u64 {
        self.lock().nodes.get(&ino).map_or(ROOT, |n| n.parent)
    }

    pub fn getattr(&self, ino: u64, fh: Option<u64>) -> Result<FileAttr, FsError> {
        let (path, is_config, file, config) = {
            let g = self.lock();
            let file = fh.and_then(|fh| match g.handles.get(&fh) {
                Some(PHandle::File { file, .. }) => Some(file.clone()),
                _ => None,
            });
            (
                g.path_of(ino),
                g.is_config(ino),
                file,
                fh.and_then(|fh| g.config_of(fh)),
            )
        };
        if let Some((id, _)) = config {
            // An open config: its content's size, even when its name is gone.
            return self.config_attr(ino, id);
        }
        if let Some(f) = file {
            // An open file: its own attributes, even when its name is gone.
            let st = Self::fstat(&f)?;
            return self.attr_for(ino, false, &st);
        }
        let st = self.lstat(&path?)?;
        self.attr_for(ino, is_config, &st)
    }

    pub fn setattr(&self, ino: u64, a: &SetAttr) -> Result<FileAttr, FsError> {
        let (mode, uid, gid, fh) = (a.mode, a.uid, a.gid, a.fh);
        let (size, atime, mtime) = (a.size, a.atime, a.mtime);
        let (path, is_config, file, config) = {
            let g = self.lock();
            let file = fh.and_then(|fh| match g.handles.get(&fh) {
                Some(PHandle::File { file, .. }) => Some(file.clone()),
                _ => None,
            });
            let config = fh.and_then(|fh| g.config_of(fh));
            (g.path_of(ino)?, g.is_config(ino), file, config)
        };
        if let Some(size) = size {
            match config {
                // ftruncate of an open config, or O_TRUNC without atomic truncation.
                Some((id, true)) => self.truncate_config(Some(id), size)?,
                Some((_, false)) => return Err(FsError::EBADF),
                // truncate(2) by name.
                None if is_config => self.truncate_config(None, size)?,
                None => {
                    let f = match file {
                        Some(f) => f,
                        None => Arc::new(self.open_beneath(&path, libc::O_WRONLY, 0)?),
                    };
                    f.set_len(size).map_err(FsError::Io)?;
                }
            }
        }
        if mode.is_none() && uid.is_none() && gid.is_none() && atime.is_none() && mtime.is_none() {
            return self.getattr(ino, fh);
        }
        let at = self.at(&path)?;
        if let Some(mode) = mode {
            at.chmod(mode & 0o7777)?;
        }
        if uid.is_some() || gid.is_some() {
            let u = uid.unwrap_or(u32::MAX);
            let g = gid.unwrap_or(u32::MAX);
            // SAFETY: valid descriptor and name; -1 leaves an id unchanged.
            let r =
                unsafe { libc::fchownat(at.dirfd(), at.name(), u, g, libc::AT_SYMLINK_NOFOLLOW) };
            if r != 0 {
                return Err(FsError::last_os_error());
            }
        }
        if atime.is_some() || mtime.is_some() {
            let ts = |t: Option<fuser::TimeOrNow>| match t {
                None => libc::timespec {
                    tv_sec: 0,
                    tv_nsec: libc::UTIME_OMIT,
                },
                Some(fuser::TimeOrNow::Now) => libc::timespec {
                    tv_sec: 0,
                    tv_nsec: libc::UTIME_NOW,
                },
                Some(fuser::TimeOrNow::SpecificTime(t)) => {
                    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
                    libc::timespec {
                        tv_sec: d.as_secs() as libc::time_t,
                        tv_nsec: libc::c_long::from(d.subsec_nanos() as i32),
                    }
                }
            };
            let times = [ts(atime), ts(mtime)];
            // SAFETY: valid descriptor, name and two timespecs.
            let r = unsafe {
                libc::utimensat(
                    at.dirfd(),
                    at.name(),
                    times.as_ptr(),
                    libc::AT_SYMLINK_NOFOLLOW,
                )
            };
            if r != 0 {
                return Err(FsError::last_os_error());
            }
        }
        self.getattr(ino, fh)
    }
}
