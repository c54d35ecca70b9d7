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
//! visible and cannot be created; `config` is served without `extensions.refStorage` and
//! written back with it (`config_view.rs`).
//!
//! Inode numbers have the top bit set (`ino::PASS_BIT`), disjoint from the ref views'
//! (`ino.rs`). A node is remembered as (parent, name) while the
//! kernel holds it, so a path is rebuilt from the parents at each request and a renamed
//! directory takes its children along. Regular files are opened with the kernel's FUSE
//! passthrough (reads, writes and mmap go straight to the real file) when the kernel and
//! our privileges allow it, else forwarded by `pread`/`pwrite`.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{BackingId, FileAttr, FileType, INodeNo};

use crate::fs::backend::DirEntry;
use crate::fs::config_view;
use crate::fs::error::FsError;
use crate::fs::ino::{pass_ino, ROOT};

/// Entry and attribute TTL of passed-through nodes. Changes made through the mount are
/// seen at once (the kernel updates its own view); a change made directly in the git
/// directory is seen within this time.
pub const PASS_TTL: Duration = Duration::from_secs(1);

/// Whether a name at the top of the mount belongs to the ref view: `refs`, `logs`,
/// `packed-refs` (and its `.lock`, `.new`), git's root refs (`HEAD`, `ORIG_HEAD`,
/// `AUTO_MERGE`, …, by `refname::is_root_ref`) and their `.lock` files. Everything else
/// (`FETCH_HEAD`, `MERGE_HEAD`, `COMMIT_EDITMSG`, `config`, `objects`, …) is passed through.
pub fn is_ref_name_at_root(name: &[u8]) -> bool {
    if matches!(
        name,
        b"refs" | b"logs" | b"packed-refs" | b"packed-refs.lock" | b"packed-refs.new"
    ) {
        return true;
    }
    let stem = name.strip_suffix(b".lock").unwrap_or(name);
    crate::refname::is_root_ref(stem)
}

/// Names at the top of the real git directory that the mount never shows nor lets anyone
/// create: the stack's directory. (git's stubs `HEAD` and `refs/` are shadowed by the ref
/// view, see [`is_ref_name_at_root`].)
fn is_reserved_at_root(name: &[u8]) -> bool {
    name == b"reftable"
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
}

enum PHandle {
    File {
        file: Arc<File>,
        ino: u64,
        backed: bool,
    },
    Config {
        data: Arc<Vec<u8>>,
    },
    Dir {
        entries: Arc<Vec<DirEntry>>,
    },
}

/// What an `open` or `create` hands back to the kernel.
pub enum Opened {
    /// Forwarded: reads and writes come to us.
    Plain { fh: u64, direct: bool },
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
    kernel: AtomicBool,
    tmp_seq: AtomicU64,
    uid: u32,
    gid: u32,
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

/// `openat2(2)`'s `struct open_how` (libc's own is `#[non_exhaustive]`).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// How every path beneath the git directory is resolved: never outside the directory, and
/// no symbolic link followed in any component (`ELOOP`; a link that is itself the last
/// component is only described, read or changed by calls that do not follow it, see
/// [`At`]).
const RESOLVE: u64 =
    libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;

/// The open flags of a client's `open` or `create` that are passed on to the real file.
/// `openat2` refuses bits it does not know (where `openat` ignores them): the kernel's
/// FUSE request may carry some (`__FMODE_EXEC` when a file is executed), so anything else
/// is dropped; `O_NOFOLLOW` and `O_CLOEXEC` are always added.
const CLIENT_OPEN_FLAGS: i32 = libc::O_ACCMODE
    | libc::O_CREAT
    | libc::O_EXCL
    | libc::O_TRUNC
    | libc::O_APPEND
    | libc::O_NONBLOCK
    | libc::O_DSYNC
    | libc::O_SYNC
    | libc::O_DIRECT
    | libc::O_LARGEFILE
    | libc::O_NOATIME
    | libc::O_DIRECTORY;

fn owned_fd(fd: libc::c_int) -> Result<OwnedFd, FsError> {
    if fd < 0 {
        return Err(FsError::last_os_error());
    }
    // SAFETY: a descriptor the caller just opened and nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `openat2(dirfd, path, flags, mode, RESOLVE)`. A race with a rename elsewhere can make
/// the kernel answer `EAGAIN` (only `..` needs that check, and no path here has one): tried
/// three times.
fn openat2(dirfd: RawFd, path: &CStr, flags: i32, mode: u32) -> Result<OwnedFd, FsError> {
    let how = OpenHow {
        flags: u64::from(flags as u32),
        mode: u64::from(mode),
        resolve: RESOLVE,
    };
    let mut tries = 0;
    loop {
        // SAFETY: a valid descriptor, a NUL-terminated path and a `struct open_how` of the
        // size passed; the kernel reads them only during the call.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dirfd,
                path.as_ptr(),
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        if fd >= 0 {
            return owned_fd(fd as libc::c_int);
        }
        let e = FsError::last_os_error();
        tries += 1;
        if e.errno() != libc::EAGAIN || tries >= 3 {
            return Err(e);
        }
    }
}

/// Plain `openat` of one name in `dirfd` (the caller passes `O_NOFOLLOW`).
fn openat(dirfd: RawFd, name: &CStr, flags: i32, mode: u32) -> Result<OwnedFd, FsError> {
    // SAFETY: a valid descriptor and a NUL-terminated name.
    owned_fd(unsafe { libc::openat(dirfd, name.as_ptr(), flags, mode as libc::c_uint) })
}

fn fstat_fd(fd: RawFd) -> Result<libc::stat, FsError> {
    // SAFETY: zeroed plain-data struct filled by the kernel.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: an open descriptor (`O_PATH` ones too) and a valid out pointer.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(FsError::last_os_error());
    }
    Ok(st)
}

/// Reads `f` to its end, at most 64 MiB (config files and locks are small: bounded).
fn read_bounded(mut f: File) -> Result<Vec<u8>, FsError> {
    use std::io::Read;
    let mut out = Vec::new();
    (&mut f)
        .take(64 << 20)
        .read_to_end(&mut out)
        .map_err(FsError::Io)?;
    Ok(out)
}

/// One name in a directory beneath the git directory: what the `*at` calls act on. The
/// directory was reached with no symbolic link followed; the name is one component, and
/// no call made on it follows it (`AT_SYMLINK_NOFOLLOW`, `unlinkat`, `renameat2`,
/// `mkdirat`, `symlinkat`, `readlinkat`, [`At::chmod`]).
struct At<'a> {
    root: BorrowedFd<'a>,
    /// `None`: the git directory itself.
    dir: Option<OwnedFd>,
    name: CString,
}

impl At<'_> {
    fn dirfd(&self) -> RawFd {
        self.dir
            .as_ref()
            .map_or(self.root.as_raw_fd(), AsRawFd::as_raw_fd)
    }

    fn name(&self) -> *const libc::c_char {
        self.name.as_ptr()
    }

    /// `fstatat(AT_SYMLINK_NOFOLLOW)`: a symbolic link is described, not followed.
    fn lstat(&self) -> Result<libc::stat, FsError> {
        // SAFETY: zeroed plain-data struct filled by the kernel.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid descriptor, NUL-terminated name, valid out pointer.
        let r = unsafe {
            libc::fstatat(
                self.dirfd(),
                self.name(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if r != 0 {
            return Err(FsError::last_os_error());
        }
        Ok(st)
    }

    /// `chmod` of the name itself, never of what a symbolic link there points to (Linux
    /// cannot change a link's mode: `EOPNOTSUPP`). `fchmodat2(AT_SYMLINK_NOFOLLOW)` (Linux
    /// 6.6+); before it, the name is opened `O_PATH | O_NOFOLLOW` and that very inode
    /// changed through `/proc/self/fd/N` (what the C library does), so a name swapped
    /// for a link in between is not followed either.
    fn chmod(&self, mode: u32) -> Result<(), FsError> {
        // SAFETY: valid descriptor and NUL-terminated name; plain integers.
        let r = unsafe {
            libc::syscall(
                libc::SYS_fchmodat2,
                self.dirfd(),
                self.name(),
                mode,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if r == 0 {
            return Ok(());
        }
        let e = FsError::last_os_error();
        // ENOSYS: an older kernel; EPERM may be a sandbox refusing an unknown call (a real
        // EPERM comes back again below).
        if !matches!(e.errno(), libc::ENOSYS | libc::EPERM) {
            return Err(e);
        }
        self.chmod_by_proc(mode)
    }

    /// [`At::chmod`] without `fchmodat2`.
    fn chmod_by_proc(&self, mode: u32) -> Result<(), FsError> {
        let fd = openat(
            self.dirfd(),
            &self.name,
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0,
        )?;
        if fstat_fd(fd.as_raw_fd())?.st_mode & libc::S_IFMT == libc::S_IFLNK {
            return Err(FsError::ENOTSUP);
        }
        let proc = cstr(format!("/proc/self/fd/{}", fd.as_raw_fd()).as_bytes())?;
        // SAFETY: a NUL-terminated path naming our own open descriptor.
        if unsafe { libc::chmod(proc.as_ptr(), mode) } != 0 {
            return Err(FsError::last_os_error());
        }
        Ok(())
    }
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
            kernel: AtomicBool::new(false),
            tmp_seq: AtomicU64::new(0),
            uid,
            gid,
        })
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

    /// `lstat` of `path` beneath the git directory (`.`: the directory itself), no
    /// symbolic link followed in any component.
    fn lstat(&self, path: &[u8]) -> Result<libc::stat, FsError> {
        if path == b"." {
            return fstat_fd(self.root.as_raw_fd());
        }
        self.at(path)?.lstat()
    }

    fn fstat(file: &File) -> Result<libc::stat, FsError> {
        fstat_fd(file.as_raw_fd())
    }

    /// Opens `path` beneath the git directory (`.`: the directory itself) with no symbolic
    /// link followed in any component, the last one included (`O_NOFOLLOW`: `ELOOP`).
    fn open_beneath(&self, path: &[u8], flags: i32, mode: u32) -> Result<File, FsError> {
        let flags = flags | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // openat2 refuses a mode without O_CREAT (O_TMPFILE is never passed).
        let mode = if flags & libc::O_CREAT != 0 {
            mode & 0o7777
        } else {
            0
        };
        let fd = if self.openat2 {
            openat2(self.root.as_raw_fd(), &cstr(path)?, flags, mode)?
        } else if path == b"." {
            openat(self.root.as_raw_fd(), c".", flags, mode)?
        } else {
            let at = self.at(path)?;
            openat(at.dirfd(), &at.name, flags, mode)?
        };
        Ok(File::from(fd))
    }

    /// The directory holding `path`'s last component, reached beneath the git directory
    /// with no symbolic link followed, and that component.
    fn at(&self, path: &[u8]) -> Result<At<'_>, FsError> {
        let (dir, name) = match path.iter().rposition(|&b| b == b'/') {
            Some(i) => (Some(&path[..i]), &path[i + 1..]),
            None => (None, path),
        };
        if !crate::fs::view::is_component(name) {
            return Err(FsError::EINVAL);
        }
        let dir = match dir {
            Some(d) => Some(self.open_dir(d)?),
            None => None,
        };
        Ok(At {
            root: self.root.as_fd(),
            dir,
            name: cstr(name)?,
        })
    }

    /// [`Self::open_dir`] for other views of the mount (a linked worktree's stack): an
    /// `O_PATH` descriptor of the directory `path` beneath the git directory, no symbolic
    /// link followed in any component.
    pub(crate) fn dir_beneath(&self, path: &[u8]) -> Result<OwnedFd, FsError> {
        self.open_dir(path)
    }

    /// An `O_PATH` descriptor of the directory `path` beneath the git directory: one
    /// `openat2`, or (without it) a walk from the git directory's descriptor, one
    /// component at a time, each opened `O_NOFOLLOW` and checked to be a directory.
    fn open_dir(&self, path: &[u8]) -> Result<OwnedFd, FsError> {
        let flags = libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        if self.openat2 {
            return openat2(
                self.root.as_raw_fd(),
                &cstr(path)?,
                flags | libc::O_DIRECTORY,
                0,
            );
        }
        let mut cur: Option<OwnedFd> = None;
        for comp in path.split(|&b| b == b'/') {
            if !crate::fs::view::is_component(comp) {
                // As RESOLVE_BENEATH would: `..` may not climb out.
                return Err(if comp == b".." {
                    FsError::EXDEV
                } else {
                    FsError::EINVAL
                });
            }
            let dirfd = cur
                .as_ref()
                .map_or(self.root.as_raw_fd(), AsRawFd::as_raw_fd);
            // O_PATH | O_NOFOLLOW opens a symbolic link itself: refused below, as
            // RESOLVE_NO_SYMLINKS would.
            let fd = openat(dirfd, &cstr(comp)?, flags, 0)?;
            match fstat_fd(fd.as_raw_fd())?.st_mode & libc::S_IFMT {
                libc::S_IFDIR => cur = Some(fd),
                libc::S_IFLNK => return Err(FsError::ELOOP),
                _ => return Err(FsError::ENOTDIR),
            }
        }
        cur.ok_or(FsError::EINVAL)
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

    /// The real config as served (without the extension).
    fn served_config(&self) -> Result<Vec<u8>, FsError> {
        let raw = self.read_real(CONFIG)?;
        Ok(config_view::served(&raw))
    }

    fn read_real(&self, path: &[u8]) -> Result<Vec<u8>, FsError> {
        // O_NONBLOCK: a name swapped for a FIFO does not hang the request.
        read_bounded(self.open_beneath(path, libc::O_RDONLY | libc::O_NONBLOCK, 0)?)
    }

    /// Attributes of a node whose real file has `st`; `config` gets its served size.
    fn attr_for(&self, ino: u64, is_config: bool, st: &libc::stat) -> Result<FileAttr, FsError> {
        let size = if is_config && st.st_mode & libc::S_IFMT == libc::S_IFREG {
            Some(self.served_config()?.len() as u64)
        } else {
            None
        };
        Ok(self.attr(ino, st, size))
    }

    fn child_path(&self, parent: u64, name: &[u8]) -> Result<Vec<u8>, FsError> {
        if !crate::fs::view::is_component(name) {
            return Err(FsError::ENOENT);
        }
        let g = self.lock();
        if g.is_ref_root(parent) && is_reserved_at_root(name) {
            return Err(FsError::ENOENT);
        }
        let dir = g.path_of(parent)?;
        Ok(join(&dir, name))
    }

    /// Refuses to create or replace a reserved name at the root (or at the top of a
    /// linked worktree's directory).
    fn check_creatable(&self, parent: u64, name: &[u8]) -> Result<(), FsError> {
        if is_reserved_at_root(name) && self.lock().is_ref_root(parent) {
            return Err(crate::fs::record::refuse_for(
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
        let ino = self.lock().remember(parent, name, &st);
        self.attr_for(ino, parent == ROOT && name == CONFIG, &st)
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
        let (path, is_config, file) = {
            let g = self.lock();
            let file = fh.and_then(|fh| match g.handles.get(&fh) {
                Some(PHandle::File { file, .. }) => Some(file.clone()),
                _ => None,
            });
            (g.path_of(ino), g.is_config(ino), file)
        };
        if let Some(f) = file {
            // An open file: its own attributes, even when its name is gone.
            let st = Self::fstat(&f)?;
            return self.attr_for(ino, false, &st);
        }
        let st = self.lstat(&path?)?;
        self.attr_for(ino, is_config, &st)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn setattr(
        &self,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<fuser::TimeOrNow>,
        mtime: Option<fuser::TimeOrNow>,
        fh: Option<u64>,
    ) -> Result<FileAttr, FsError> {
        let (path, is_config, file) = {
            let g = self.lock();
            let file = fh.and_then(|fh| match g.handles.get(&fh) {
                Some(PHandle::File { file, .. }) => Some(file.clone()),
                _ => None,
            });
            (g.path_of(ino)?, g.is_config(ino), file)
        };
        if let Some(size) = size {
            if is_config {
                return Err(crate::fs::record::refuse_for(
                    "truncate",
                    &path,
                    libc::EPERM,
                    "config is written through config.lock and rename only",
                ));
            }
            let f = match file {
                Some(f) => f,
                None => Arc::new(self.open_beneath(&path, libc::O_WRONLY, 0)?),
            };
            f.set_len(size).map_err(FsError::Io)?;
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

    /// Registers `file` for kernel passthrough on `ino` (one backing file per inode,
    /// shared by its open handles), or says why not.
    fn backing_for(
        &self,
        ino: u64,
        file: &File,
        open_backing: impl FnOnce(&File) -> io::Result<BackingId>,
    ) -> Option<Arc<BackingId>> {
        if !self.kernel_passthrough() {
            return None;
        }
        let mut g = self.lock();
        if let Some((b, n)) = g.backing.get_mut(&ino) {
            *n += 1;
            return Some(b.clone());
        }
        match open_backing(file) {
            Ok(b) => {
                let b = Arc::new(b);
                g.backing.insert(ino, (b.clone(), 1));
                Some(b)
            }
            Err(e) => {
                drop(g);
                eprintln!(
                    "reftablefs: kernel FUSE passthrough refused ({e}); passed-through files are forwarded from now on"
                );
                self.set_kernel_passthrough(false);
                None
            }
        }
    }

    fn opened(
        &self,
        ino: u64,
        file: File,
        open_backing: impl FnOnce(&File) -> io::Result<BackingId>,
    ) -> Result<Opened, FsError> {
        let regular = Self::fstat(&file)?.st_mode & libc::S_IFMT == libc::S_IFREG;
        let backing = if regular {
            self.backing_for(ino, &file, open_backing)
        } else {
            None
        };
        let backed = backing.is_some();
        let fh = self.lock().add_handle(PHandle::File {
            file: Arc::new(file),
            ino,
            backed,
        });
        Ok(match backing {
            Some(backing) => Opened::Backed { fh, backing },
            None => Opened::Plain { fh, direct: false },
        })
    }

    pub fn open(
        &self,
        ino: u64,
        flags: i32,
        open_backing: impl FnOnce(&File) -> io::Result<BackingId>,
    ) -> Result<Opened, FsError> {
        let (path, is_config) = {
            let g = self.lock();
            (g.path_of(ino)?, g.is_config(ino))
        };
        if is_config {
            if flags & libc::O_ACCMODE != libc::O_RDONLY {
                return Err(crate::fs::record::refuse_for(
                    "open for writing",
                    &path,
                    libc::EPERM,
                    "config is written through config.lock and rename only",
                ));
            }
            let data = Arc::new(self.served_config()?);
            let fh = self.lock().add_handle(PHandle::Config { data });
            return Ok(Opened::Plain { fh, direct: true });
        }
        let flags = flags & CLIENT_OPEN_FLAGS & !(libc::O_CREAT | libc::O_EXCL);
        let file = self.open_beneath(&path, flags, 0)?;
        self.opened(ino, file, open_backing)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn create(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        umask: u32,
        flags: i32,
        open_backing: impl FnOnce(&File) -> io::Result<BackingId>,
    ) -> Result<(FileAttr, Opened), FsError> {
        self.check_creatable(parent, name)?;
        if parent == ROOT && name == CONFIG {
            let errno = if flags & libc::O_EXCL != 0 {
                libc::EEXIST
            } else {
                libc::EPERM
            };
            return Err(crate::fs::record::refuse_for(
                "create",
                name,
                errno,
                "config is written through config.lock and rename only",
            ));
        }
        let path = self.child_path(parent, name)?;
        let file = self.open_beneath(
            &path,
            flags & CLIENT_OPEN_FLAGS | libc::O_CREAT,
            mode & !umask & 0o7777,
        )?;
        let st = Self::fstat(&file)?;
        let ino = self.lock().remember(parent, name, &st);
        let attr = self.attr(ino, &st, None);
        Ok((attr, self.opened(ino, file, open_backing)?))
    }

    pub fn read(&self, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>, FsError> {
        let h = {
            let g = self.lock();
            match g.handles.get(&fh) {
                Some(PHandle::File { file, .. }) => Ok(file.clone()),
                Some(PHandle::Config { data }) => Err(Some(data.clone())),
                _ => Err(None),
            }
        };
        match h {
            Ok(file) => {
                let mut buf = vec![0; size as usize];
                let mut done = 0;
                while done < buf.len() {
                    match file.read_at(&mut buf[done..], offset + done as u64) {
                        Ok(0) => break,
                        Ok(n) => done += n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(FsError::Io(e)),
                    }
                }
                buf.truncate(done);
                Ok(buf)
            }
            Err(Some(data)) => {
                let start = usize::try_from(offset)
                    .unwrap_or(usize::MAX)
                    .min(data.len());
                let end = start.saturating_add(size as usize).min(data.len());
                Ok(data.get(start..end).unwrap_or_default().to_vec())
            }
            Err(None) => Err(FsError::EBADF),
        }
    }

    pub fn write(&self, fh: u64, offset: u64, data: &[u8]) -> Result<u32, FsError> {
        let file = match self.lock().handles.get(&fh) {
            Some(PHandle::File { file, .. }) => file.clone(),
            _ => return Err(FsError::EBADF),
        };
        // With O_APPEND, pwrite appends whatever the offset (as a write through the kernel).
        file.write_all_at(data, offset).map_err(FsError::Io)?;
        u32::try_from(data.len()).map_err(|_| FsError::EINVAL)
    }

    pub fn fsync(&self, fh: u64, datasync: bool) -> Result<(), FsError> {
        let file = match self.lock().handles.get(&fh) {
            Some(PHandle::File { file, .. }) => file.clone(),
            Some(_) => return Ok(()),
            None => return Err(FsError::EBADF),
        };
        let r = if datasync {
            file.sync_data()
        } else {
            file.sync_all()
        };
        r.map_err(FsError::Io)
    }

    pub fn release(&self, fh: u64) {
        let mut g = self.lock();
        if let Some(PHandle::File {
            ino, backed: true, ..
        }) = g.handles.remove(&fh)
        {
            if let Some((_, n)) = g.backing.get_mut(&ino) {
                *n -= 1;
                if *n == 0 {
                    g.backing.remove(&ino);
                }
            }
        }
    }

    pub fn mkdir(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        umask: u32,
    ) -> Result<FileAttr, FsError> {
        self.check_creatable(parent, name)?;
        let at = self.at(&self.child_path(parent, name)?)?;
        // SAFETY: valid descriptor and name.
        if unsafe { libc::mkdirat(at.dirfd(), at.name(), mode & !umask & 0o7777) } != 0 {
            return Err(FsError::last_os_error());
        }
        let st = at.lstat()?;
        let ino = self.lock().remember(parent, name, &st);
        Ok(self.attr(ino, &st, None))
    }

    pub fn symlink(&self, parent: u64, name: &[u8], target: &[u8]) -> Result<FileAttr, FsError> {
        self.check_creatable(parent, name)?;
        let at = self.at(&self.child_path(parent, name)?)?;
        let t = cstr(target)?;
        // SAFETY: valid descriptor, NUL-terminated target and name.
        if unsafe { libc::symlinkat(t.as_ptr(), at.dirfd(), at.name()) } != 0 {
            return Err(FsError::last_os_error());
        }
        let st = at.lstat()?;
        let ino = self.lock().remember(parent, name, &st);
        Ok(self.attr(ino, &st, None))
    }

    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>, FsError> {
        let path = self.lock().path_of(ino)?;
        let at = self.at(&path)?;
        let mut buf = vec![0u8; libc::PATH_MAX as usize];
        // SAFETY: valid descriptor, name and buffer of the given length.
        let n =
            unsafe { libc::readlinkat(at.dirfd(), at.name(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            return Err(FsError::last_os_error());
        }
        buf.truncate(n as usize);
        Ok(buf)
    }

    fn remove(&self, parent: u64, name: &[u8], dir: bool) -> Result<(), FsError> {
        if parent == ROOT && name == CONFIG {
            return Err(crate::fs::record::refuse_for(
                "unlink",
                name,
                libc::EPERM,
                "the repository's config cannot be removed through the mount",
            ));
        }
        let at = self.at(&self.child_path(parent, name)?)?;
        let st = at.lstat().ok();
        let flag = if dir { libc::AT_REMOVEDIR } else { 0 };
        // SAFETY: valid descriptor and name.
        if unsafe { libc::unlinkat(at.dirfd(), at.name(), flag) } != 0 {
            return Err(FsError::last_os_error());
        }
        if let Some(st) = st {
            if dir || st.st_nlink <= 1 {
                self.lock().gone((st.st_dev, st.st_ino));
            }
        }
        Ok(())
    }

    pub fn unlink(&self, parent: u64, name: &[u8]) -> Result<(), FsError> {
        self.remove(parent, name, false)
    }

    pub fn rmdir(&self, parent: u64, name: &[u8]) -> Result<(), FsError> {
        self.remove(parent, name, true)
    }

    pub fn rename(
        &self,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        flags: u32,
    ) -> Result<(), FsError> {
        self.check_creatable(newparent, newname)?;
        if parent == ROOT && name == CONFIG {
            return Err(crate::fs::record::refuse_for(
                "rename",
                name,
                libc::EPERM,
                "the repository's config cannot be moved away through the mount",
            ));
        }
        let from = self.child_path(parent, name)?;
        let to = self.child_path(newparent, newname)?;
        let src_at = self.at(&from)?;
        let src = src_at.lstat()?;
        if newparent == ROOT && newname == CONFIG {
            if flags != 0 {
                return Err(FsError::EINVAL);
            }
            return self.install_config(&src_at, &src);
        }
        let to_at = self.at(&to)?;
        let old_target = to_at.lstat().ok();
        // SAFETY: valid descriptors and names.
        let r = unsafe {
            libc::syscall(
                libc::SYS_renameat2,
                src_at.dirfd(),
                src_at.name(),
                to_at.dirfd(),
                to_at.name(),
                flags as libc::c_uint,
            )
        };
        if r != 0 {
            return Err(FsError::last_os_error());
        }
        let mut g = self.lock();
        if let Some(t) = old_target {
            if flags & libc::RENAME_EXCHANGE == 0
                && (t.st_dev, t.st_ino) != (src.st_dev, src.st_ino)
            {
                g.gone((t.st_dev, t.st_ino));
            }
        }
        if let Some(&ino) = g.by_real.get(&(src.st_dev, src.st_ino)) {
            if let Some(n) = g.nodes.get_mut(&ino) {
                n.parent = newparent;
                n.name = newname.into();
            }
        }
        Ok(())
    }

    /// `rename(X → config)`: X's content with the real config's `extensions.refStorage`
    /// and `core.repositoryformatversion` put back, written to a temporary file in the
    /// git directory, fsynced and renamed over `config`; then X is removed.
    fn install_config(&self, from: &At<'_>, src: &libc::stat) -> Result<(), FsError> {
        if src.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(FsError::EINVAL);
        }
        let written = read_bounded(File::from(openat(
            from.dirfd(),
            &from.name,
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0,
        )?))?;
        let original = self.read_real(CONFIG)?;
        let content = config_view::restored(&written, &original);
        if content != written {
            let served = config_view::served(&content);
            if served != config_view::served(&written) {
                eprintln!(
                    "reftablefs: config written through the mount changed extensions.refStorage or core.repositoryformatversion; the repository's values are kept"
                );
            }
        }
        let tmp = format!(
            "config.reftablefs-{}-{}.tmp",
            std::process::id(),
            self.tmp_seq.fetch_add(1, Ordering::Relaxed)
        );
        let tmp = tmp.as_bytes();
        let write = || -> Result<(), FsError> {
            let f = self.open_beneath(
                tmp,
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
                src.st_mode & 0o7777,
            )?;
            f.write_all_at(&content, 0).map_err(FsError::Io)?;
            f.sync_all().map_err(FsError::Io)?;
            let (a, b) = (cstr(tmp)?, cstr(CONFIG)?);
            let fd = self.root.as_raw_fd();
            // SAFETY: valid descriptors and paths.
            if unsafe { libc::renameat(fd, a.as_ptr(), fd, b.as_ptr()) } != 0 {
                return Err(FsError::last_os_error());
            }
            Ok(())
        };
        if let Err(e) = write() {
            if let Ok(c) = cstr(tmp) {
                // SAFETY: valid descriptor and path.
                unsafe { libc::unlinkat(self.root.as_raw_fd(), c.as_ptr(), 0) };
            }
            return Err(e);
        }
        // SAFETY: an open directory descriptor.
        unsafe { libc::fsync(self.root.as_raw_fd()) };
        // SAFETY: valid descriptor and name.
        if unsafe { libc::unlinkat(from.dirfd(), from.name(), 0) } != 0 {
            return Err(FsError::last_os_error());
        }
        // The kernel now knows the renamed node as `config`: it resolves to the real one.
        let mut g = self.lock();
        if let Some(&ino) = g.by_real.get(&(src.st_dev, src.st_ino)) {
            if let Some(n) = g.nodes.get_mut(&ino) {
                n.parent = ROOT;
                n.name = CONFIG.into();
            }
        }
        g.gone((src.st_dev, src.st_ino));
        Ok(())
    }

    /// Lists a directory of the real tree (`.` and `..` excluded; at the root, the ref
    /// view's names and the reserved ones excluded).
    fn list(&self, path: &[u8], at_root: bool) -> Result<Vec<DirEntry>, FsError> {
        let dir = self.open_beneath(path, libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
        let fd = dir.as_raw_fd();
        // SAFETY: fdopendir takes ownership of a dup of our descriptor.
        let dup = unsafe { libc::dup(fd) };
        if dup < 0 {
            return Err(FsError::last_os_error());
        }
        // SAFETY: a valid descriptor; on success the stream owns it.
        let stream = unsafe { libc::fdopendir(dup) };
        if stream.is_null() {
            // SAFETY: still ours on failure.
            unsafe { libc::close(dup) };
            return Err(FsError::last_os_error());
        }
        let mut out = Vec::new();
        loop {
            // SAFETY: a valid stream; the entry is valid until the next readdir.
            let ent = unsafe { libc::readdir64(stream) };
            if ent.is_null() {
                break;
            }
            // SAFETY: d_name is NUL-terminated within the entry.
            let name = unsafe { std::ffi::CStr::from_ptr((*ent).d_name.as_ptr()) }.to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            if at_root && (is_ref_name_at_root(name) || is_reserved_at_root(name)) {
                continue;
            }
            // SAFETY: as above.
            let (d_ino, d_type) = unsafe { ((*ent).d_ino, (*ent).d_type) };
            let kind = match d_type {
                libc::DT_DIR => FileType::Directory,
                libc::DT_LNK => FileType::Symlink,
                libc::DT_FIFO => FileType::NamedPipe,
                libc::DT_SOCK => FileType::Socket,
                libc::DT_CHR => FileType::CharDevice,
                libc::DT_BLK => FileType::BlockDevice,
                _ => FileType::RegularFile,
            };
            // Informational only (readdir's d_ino): the real number in our range.
            let ino = pass_ino(d_ino);
            out.push(DirEntry {
                name: name.into(),
                kind,
                ino,
            });
        }
        // SAFETY: the stream we opened (closes `dup`).
        unsafe { libc::closedir(stream) };
        Ok(out)
    }

    pub fn opendir(&self, ino: u64) -> Result<u64, FsError> {
        let (path, at_root) = {
            let g = self.lock();
            (g.path_of(ino)?, g.is_ref_root(ino))
        };
        let entries = Arc::new(self.list(&path, at_root)?);
        Ok(self.lock().add_handle(PHandle::Dir { entries }))
    }

    /// Adds `extra` (a linked worktree's ref view: `HEAD`, `refs`, `logs`) to the listing
    /// of the open directory `fh`.
    pub fn extend_dir(&self, fh: u64, extra: &[DirEntry]) {
        if let Some(PHandle::Dir { entries }) = self.lock().handles.get_mut(&fh) {
            Arc::make_mut(entries).extend(extra.iter().cloned());
        }
    }

    /// The id of the linked worktree whose directory (`worktrees/<id>`) is `ino`.
    pub fn worktree_of(&self, ino: u64) -> Option<Vec<u8>> {
        self.lock().worktree_of(ino).map(<[u8]>::to_vec)
    }

    /// The entries of an open directory.
    pub fn dir_entries(&self, fh: u64) -> Option<Arc<Vec<DirEntry>>> {
        match self.lock().handles.get(&fh) {
            Some(PHandle::Dir { entries }) => Some(entries.clone()),
            _ => None,
        }
    }

    /// Lists the root's passed-through names for the ref view's directory handle `fh`.
    pub fn open_root(&self, fh: u64) -> Result<(), FsError> {
        let entries = Arc::new(self.list(b".", true)?);
        self.lock().root_lists.insert(fh, entries);
        Ok(())
    }

    pub fn root_entries(&self, fh: u64) -> Option<Arc<Vec<DirEntry>>> {
        self.lock().root_lists.get(&fh).cloned()
    }

    pub fn release_root(&self, fh: u64) {
        self.lock().root_lists.remove(&fh);
    }

    pub fn releasedir(&self, fh: u64) {
        self.lock().handles.remove(&fh);
    }

    /// `fsync` of a directory: of the real one.
    pub fn fsyncdir(&self, ino: u64) -> Result<(), FsError> {
        let path = self.lock().path_of(ino)?;
        let d = self.open_beneath(&path, libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
        d.sync_all().map_err(FsError::Io)
    }

    /// `statvfs` of the real directory.
    pub fn statfs(&self) -> Result<libc::statvfs, FsError> {
        // SAFETY: zeroed plain data filled by the kernel.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: an open descriptor and a valid out pointer.
        if unsafe { libc::fstatvfs(self.root.as_raw_fd(), &mut s) } != 0 {
            return Err(FsError::last_os_error());
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ref_names_at_root_follow_git() {
        for n in [
            &b"HEAD"[..],
            b"HEAD.lock",
            b"ORIG_HEAD",
            b"ORIG_HEAD.lock",
            b"AUTO_MERGE",
            b"CHERRY_PICK_HEAD",
            b"refs",
            b"logs",
            b"packed-refs",
            b"packed-refs.lock",
            b"packed-refs.new",
        ] {
            assert!(is_ref_name_at_root(n), "{}", String::from_utf8_lossy(n));
        }
        for n in [
            &b"FETCH_HEAD"[..],
            b"MERGE_HEAD",
            b"COMMIT_EDITMSG",
            b"MERGE_MSG",
            b"config",
            b"config.lock",
            b"index",
            b"index.lock",
            b"objects",
            b"hooks",
            b"description",
            b"rebase-merge",
            b"gc.pid",
            b"reftable",
        ] {
            assert!(!is_ref_name_at_root(n), "{}", String::from_utf8_lossy(n));
        }
        assert!(is_reserved_at_root(b"reftable"));
    }

    #[test]
    fn a_linked_worktrees_directory_hides_its_stack_and_ref_names() {
        let t = tempfile::tempdir().unwrap();
        let wt = t.path().join("worktrees/wt");
        std::fs::create_dir_all(wt.join("reftable")).unwrap();
        std::fs::create_dir_all(wt.join("refs")).unwrap();
        std::fs::create_dir_all(t.path().join("other/wt")).unwrap();
        std::fs::write(wt.join("reftable/tables.list"), b"").unwrap();
        std::fs::write(wt.join("HEAD"), b"ref: refs/heads/.invalid\n").unwrap();
        std::fs::write(wt.join("gitdir"), b"/x/.git\n").unwrap();
        std::fs::write(wt.join("ORIG_HEAD"), b"stale\n").unwrap();
        let p = Passthrough::new(t.path()).unwrap();
        let wts = p.lookup(ROOT, b"worktrees").unwrap().ino.0;
        let w = p.lookup(wts, b"wt").unwrap().ino.0;
        assert_eq!(p.worktree_of(w).as_deref(), Some(&b"wt"[..]));
        assert_eq!(p.worktree_of(wts), None);
        let other = p.lookup(ROOT, b"other").unwrap().ino.0;
        let ow = p.lookup(other, b"wt").unwrap().ino.0;
        assert_eq!(p.worktree_of(ow), None, "only GITDIR/worktrees/<id>");
        let gitdir = p.lookup(w, b"gitdir").unwrap().ino.0;
        assert_eq!(p.worktree_of(gitdir), None, "a file is no worktree");
        // Listing: the stack and the ref names (served by the worktree's view) are hidden.
        let fh = p.opendir(w).unwrap();
        let names: Vec<_> = p
            .dir_entries(fh)
            .unwrap()
            .iter()
            .map(|e| String::from_utf8_lossy(&e.name).into_owned())
            .collect();
        assert_eq!(names, ["gitdir"]);
        p.releasedir(fh);
        assert_eq!(p.lookup(w, b"reftable").unwrap_err().errno(), libc::ENOENT);
        assert_eq!(
            p.mkdir(w, b"reftable", 0o755, 0).unwrap_err().errno(),
            libc::EPERM
        );
        // Elsewhere `reftable` is an ordinary name.
        assert!(p.mkdir(ow, b"reftable", 0o755, 0).is_ok());
    }

    /// GITDIR's directories swapped for symbolic links to a directory outside while the
    /// kernel holds their nodes: nothing outside is read, listed, created, removed, moved
    /// or changed; a link that is the last component stays a link.
    fn swapped_directories_are_never_followed(walk: bool) {
        use std::os::unix::fs::{symlink, PermissionsExt};
        let t = tempfile::tempdir().unwrap();
        let (git, out) = (t.path().join("git"), t.path().join("out"));
        std::fs::create_dir_all(git.join("objects/sub")).unwrap();
        std::fs::create_dir_all(git.join("objects/a/b")).unwrap();
        std::fs::write(git.join("objects/file"), b"mine").unwrap();
        std::fs::write(git.join("objects/mine"), b"mine").unwrap();
        std::fs::create_dir_all(out.join("b")).unwrap();
        for f in ["secret.txt", "victim", "b/secret.txt"] {
            std::fs::write(out.join(f), b"secret").unwrap();
        }
        std::fs::set_permissions(
            out.join("secret.txt"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        let p = Passthrough::new(&git).unwrap();
        let p = if walk { p.walking() } else { p };
        assert_eq!(p.openat2, !walk);
        let none = |_: &File| -> io::Result<BackingId> { Err(io::Error::other("no")) };
        let objects = p.lookup(ROOT, b"objects").unwrap().ino.0;
        let sub = p.lookup(objects, b"sub").unwrap().ino.0;
        let a = p.lookup(objects, b"a").unwrap().ino.0;
        let b = p.lookup(a, b"b").unwrap().ino.0;
        let file = p.lookup(objects, b"file").unwrap().ino.0;
        // The swaps, made directly in GITDIR.
        for (name, target) in [("sub", out.clone()), ("a", out.clone())] {
            let at = git.join("objects").join(name);
            std::fs::rename(&at, at.with_extension("old")).unwrap();
            symlink(target, &at).unwrap();
        }
        std::fs::remove_file(git.join("objects/file")).unwrap();
        symlink(out.join("secret.txt"), git.join("objects/file")).unwrap();

        let refused = |what: &str, r: Result<(), FsError>| match r {
            Ok(()) => panic!("{what} went through a swapped directory (walk {walk})"),
            Err(e) => assert!(
                [libc::ELOOP, libc::ENOTDIR, libc::ENOTSUP].contains(&e.errno()),
                "{what}: {e} (walk {walk})"
            ),
        };
        refused("lookup", p.lookup(sub, b"secret.txt").map(drop));
        refused("lookup below", p.lookup(b, b"secret.txt").map(drop));
        refused(
            "create",
            p.create(sub, b"p", 0o644, 0, libc::O_WRONLY, none)
                .map(drop),
        );
        refused("mkdir", p.mkdir(sub, b"d", 0o755, 0).map(drop));
        refused("symlink", p.symlink(sub, b"l", b"x").map(drop));
        refused("unlink", p.unlink(sub, b"victim"));
        refused("rmdir", p.rmdir(sub, b"b"));
        refused(
            "rename out of it",
            p.rename(sub, b"victim", objects, b"stolen", 0),
        );
        refused(
            "rename into it",
            p.rename(objects, b"mine", sub, b"mine", 0),
        );
        refused(
            "rename over config",
            p.rename(sub, b"victim", ROOT, b"config", 0),
        );
        refused("opendir", p.opendir(sub).map(drop));
        refused("fsyncdir", p.fsyncdir(sub));
        refused("open", p.open(file, libc::O_RDONLY, none).map(drop));
        refused(
            "chmod",
            p.setattr(file, Some(0o666), None, None, None, None, None, None)
                .map(drop),
        );
        refused(
            "truncate",
            p.setattr(file, None, None, None, Some(0), None, None, None)
                .map(drop),
        );
        for f in ["secret.txt", "victim", "b/secret.txt"] {
            assert_eq!(std::fs::read(out.join(f)).unwrap(), b"secret", "{f}");
        }
        let mode = std::fs::metadata(out.join("secret.txt"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "the outside file's mode changed");
        let mut names: Vec<_> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["b", "secret.txt", "victim"],
            "something made outside"
        );
        assert!(git.join("objects/mine").exists() && !git.join("objects/stolen").exists());
        // A link in GITDIR is a link through the mount: described, read, never followed.
        let l = p.lookup(objects, b"file").unwrap();
        assert_eq!(l.kind, FileType::Symlink);
        assert_eq!(
            p.readlink(l.ino.0).unwrap(),
            out.join("secret.txt").as_os_str().as_encoded_bytes()
        );
        assert_eq!(p.lookup(objects, b"sub").unwrap().kind, FileType::Symlink);
        // A new link through the mount is made as a link, its target untouched.
        let made = p.symlink(objects, b"made", b"../../out/victim").unwrap();
        assert_eq!(made.kind, FileType::Symlink);
        assert_eq!(p.readlink(made.ino.0).unwrap(), b"../../out/victim");
        // And ordinary paths still work.
        let a_old = p.lookup(objects, b"a.old").unwrap().ino.0;
        let b_old = p.lookup(a_old, b"b").unwrap().ino.0;
        let (f, _) = p
            .create(b_old, b"x", 0o644, 0, libc::O_WRONLY, none)
            .unwrap();
        p.rename(b_old, b"x", b_old, b"y", 0).unwrap();
        let fh = p.opendir(b_old).unwrap();
        let listed: Vec<_> = p
            .dir_entries(fh)
            .unwrap()
            .iter()
            .map(|e| e.name.clone())
            .collect();
        assert_eq!(listed, [Box::from(&b"y"[..])]);
        p.releasedir(fh);
        p.fsyncdir(b_old).unwrap();
        assert!(p.lookup(b_old, b"y").is_ok());
        p.setattr(f.ino.0, Some(0o600), None, None, None, None, None, None)
            .unwrap();
        assert_eq!(
            std::fs::metadata(git.join("objects/a.old/b/y"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o600
        );
        p.unlink(b_old, b"y").unwrap();
    }

    #[test]
    fn chmod_without_fchmodat2_changes_the_name_itself() {
        use std::os::unix::fs::{symlink, PermissionsExt};
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("f"), b"x").unwrap();
        std::fs::write(t.path().join("target"), b"x").unwrap();
        symlink(t.path().join("target"), t.path().join("l")).unwrap();
        let p = Passthrough::new(t.path()).unwrap();
        let mode = |n: &str| {
            std::fs::symlink_metadata(t.path().join(n))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        let before = mode("target");
        p.at(b"f").unwrap().chmod_by_proc(0o640).unwrap();
        assert_eq!(mode("f"), 0o640);
        let e = p.at(b"l").unwrap().chmod_by_proc(0o777).unwrap_err();
        assert_eq!(e.errno(), libc::ENOTSUP);
        assert_eq!(mode("target"), before, "the link was followed");
        assert_eq!(
            p.at(b"l").unwrap().chmod(0o777).unwrap_err().errno(),
            libc::ENOTSUP
        );
        assert_eq!(mode("target"), before, "the link was followed");
    }

    #[test]
    fn swapped_directories_are_never_followed_openat2() {
        swapped_directories_are_never_followed(false);
    }

    #[test]
    fn swapped_directories_are_never_followed_walking() {
        swapped_directories_are_never_followed(true);
    }

    #[test]
    fn passes_through_relative_to_the_directory() {
        let dir = std::env::temp_dir().join(format!("rtfs-pt-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("objects")).unwrap();
        std::fs::create_dir_all(dir.join("reftable")).unwrap();
        std::fs::write(
            dir.join("config"),
            b"[core]\n\trepositoryformatversion = 1\n[extensions]\n\trefStorage = reftable\n",
        )
        .unwrap();
        std::fs::write(dir.join("HEAD"), b"ref: refs/heads/.invalid\n").unwrap();
        let p = Passthrough::new(&dir).unwrap();
        let none = |_: &File| -> io::Result<BackingId> { Err(io::Error::other("no")) };
        // The root listing hides the stack and git's stubs.
        let mut names: Vec<_> = p
            .list(b".", true)
            .unwrap()
            .into_iter()
            .map(|e| String::from_utf8_lossy(&e.name).into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["config", "objects"]);
        assert_eq!(
            p.lookup(ROOT, b"reftable").unwrap_err().errno(),
            libc::ENOENT
        );
        assert_eq!(
            p.mkdir(ROOT, b"reftable", 0o755, 0).unwrap_err().errno(),
            libc::EPERM
        );
        // config is served without the extension, with its served size.
        let a = p.lookup(ROOT, b"config").unwrap();
        let served = b"[core]\n\trepositoryformatversion = 1\n[extensions]\n";
        assert_eq!(a.size, served.len() as u64);
        let Opened::Plain { fh, .. } = p.open(a.ino.0, libc::O_RDONLY, none).unwrap() else {
            panic!("config is never backed");
        };
        assert_eq!(p.read(fh, 0, 4096).unwrap(), served.to_vec());
        p.release(fh);
        assert_eq!(
            p.open(a.ino.0, libc::O_WRONLY, none)
                .err()
                .map(|e| e.errno()),
            Some(libc::EPERM)
        );
        // A config.lock renamed over config keeps the extension in the real file.
        let (_, o) = p
            .create(
                ROOT,
                b"config.lock",
                0o644,
                0,
                libc::O_WRONLY | libc::O_EXCL,
                none,
            )
            .unwrap();
        let Opened::Plain { fh, .. } = o else {
            panic!("no kernel passthrough here");
        };
        p.write(
            fh,
            0,
            b"[core]\n\trepositoryformatversion = 0\n[user]\n\tname = x\n",
        )
        .unwrap();
        p.release(fh);
        p.rename(ROOT, b"config.lock", ROOT, b"config", 0).unwrap();
        assert_eq!(
            std::fs::read(dir.join("config")).unwrap(),
            b"[core]\n\trepositoryformatversion = 1\n[user]\n\tname = x\n[extensions]\n\trefStorage = reftable\n".to_vec()
        );
        assert!(!dir.join("config.lock").exists());
        // Objects: a temporary file renamed into a new directory.
        let objects = p.lookup(ROOT, b"objects").unwrap().ino.0;
        let ab = p.mkdir(objects, b"ab", 0o755, 0o022).unwrap().ino.0;
        let (t, o) = p
            .create(
                objects,
                b"tmp_obj",
                0o444,
                0,
                libc::O_RDWR | libc::O_EXCL,
                none,
            )
            .unwrap();
        let Opened::Plain { fh, .. } = o else {
            panic!("no kernel passthrough here");
        };
        p.write(fh, 0, b"blob").unwrap();
        p.release(fh);
        p.rename(objects, b"tmp_obj", ab, b"cdef", 0).unwrap();
        assert_eq!(std::fs::read(dir.join("objects/ab/cdef")).unwrap(), b"blob");
        assert_eq!(p.getattr(t.ino.0, None).unwrap().size, 4);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
