//! Resolving a path beneath the git directory with no symbolic link followed in any
//! component: `openat2` (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`),
//! or a walk one `O_NOFOLLOW` directory at a time; the parent's descriptor and the last
//! name for the `*at` calls that act on a name without following it.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use crate::fs::error::FsError;

use super::*;

/// `openat2(2)`'s `struct open_how` (libc's own is `#[non_exhaustive]`).
#[repr(C)]
pub(super) struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// How every path beneath the git directory is resolved: never outside the directory, and
/// no symbolic link followed in any component (`ELOOP`; a link that is itself the last
/// component is only described, read or changed by calls that do not follow it, see
/// [`At`]).
pub(super) const RESOLVE: u64 =
    libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;

/// The open flags of a client's `open` or `create` that are passed on to the real file.
/// `openat2` refuses bits it does not know (where `openat` ignores them): the kernel's
/// FUSE request may carry some (`__FMODE_EXEC` when a file is executed), so anything else
/// is dropped; `O_NOFOLLOW` and `O_CLOEXEC` are always added.
pub(super) const CLIENT_OPEN_FLAGS: i32 = libc::O_ACCMODE
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

pub(super) fn owned_fd(fd: libc::c_int) -> Result<OwnedFd, FsError> {
    if fd < 0 {
        return Err(FsError::last_os_error());
    }
    // SAFETY: a descriptor the caller just opened and nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `openat2(dirfd, path, flags, mode, RESOLVE)`. A race with a rename elsewhere can make
/// the kernel answer `EAGAIN` (only `..` needs that check, and no path here has one): tried
/// three times.
pub(super) fn openat2(
    dirfd: RawFd,
    path: &CStr,
    flags: i32,
    mode: u32,
) -> Result<OwnedFd, FsError> {
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
pub(super) fn openat(dirfd: RawFd, name: &CStr, flags: i32, mode: u32) -> Result<OwnedFd, FsError> {
    // SAFETY: a valid descriptor and a NUL-terminated name.
    owned_fd(unsafe { libc::openat(dirfd, name.as_ptr(), flags, mode as libc::c_uint) })
}

pub(super) fn fstat_fd(fd: RawFd) -> Result<libc::stat, FsError> {
    // SAFETY: zeroed plain-data struct filled by the kernel.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: an open descriptor (`O_PATH` ones too) and a valid out pointer.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(FsError::last_os_error());
    }
    Ok(st)
}

/// One name in a directory beneath the git directory: what the `*at` calls act on. The
/// directory was reached with no symbolic link followed; the name is one component, and
/// no call made on it follows it (`AT_SYMLINK_NOFOLLOW`, `unlinkat`, `renameat2`,
/// `mkdirat`, `symlinkat`, `readlinkat`, [`At::chmod`]).
pub(super) struct At<'a> {
    pub(super) root: BorrowedFd<'a>,
    /// `None`: the git directory itself.
    pub(super) dir: Option<OwnedFd>,
    pub(super) name: CString,
}

impl At<'_> {
    pub(super) fn dirfd(&self) -> RawFd {
        self.dir
            .as_ref()
            .map_or(self.root.as_raw_fd(), AsRawFd::as_raw_fd)
    }

    pub(super) fn name(&self) -> *const libc::c_char {
        self.name.as_ptr()
    }

    /// `fstatat(AT_SYMLINK_NOFOLLOW)`: a symbolic link is described, not followed.
    pub(super) fn lstat(&self) -> Result<libc::stat, FsError> {
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
    pub(super) fn chmod(&self, mode: u32) -> Result<(), FsError> {
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
    pub(super) fn chmod_by_proc(&self, mode: u32) -> Result<(), FsError> {
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

impl Passthrough {
    /// `lstat` of `path` beneath the git directory (`.`: the directory itself), no
    /// symbolic link followed in any component.
    pub(super) fn lstat(&self, path: &[u8]) -> Result<libc::stat, FsError> {
        if path == b"." {
            return fstat_fd(self.root.as_raw_fd());
        }
        self.at(path)?.lstat()
    }

    pub(super) fn fstat(file: &File) -> Result<libc::stat, FsError> {
        fstat_fd(file.as_raw_fd())
    }

    /// Opens `path` beneath the git directory (`.`: the directory itself) with no symbolic
    /// link followed in any component, the last one included (`O_NOFOLLOW`: `ELOOP`).
    pub(super) fn open_beneath(&self, path: &[u8], flags: i32, mode: u32) -> Result<File, FsError> {
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
    pub(super) fn at(&self, path: &[u8]) -> Result<At<'_>, FsError> {
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
    pub(super) fn open_dir(&self, path: &[u8]) -> Result<OwnedFd, FsError> {
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

    pub(super) fn child_path(&self, parent: u64, name: &[u8]) -> Result<Vec<u8>, FsError> {
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
}
