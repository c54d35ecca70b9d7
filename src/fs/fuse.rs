//! The `fuser::Filesystem` implementation: request handlers that translate between kernel
//! requests and the pure view logic. Handlers never send notifications (see `watch.rs`).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, Request,
};

use crate::fs::state::{Handle, Shared};
use crate::fs::view::Kind;

/// Entry TTL for directories and ref files: short, and invalidated by the watcher.
pub const ENTRY_TTL: Duration = Duration::from_secs(1);
/// Attribute TTL for files: zero, so a size is never stale (no truncated reads).
pub const FILE_ATTR_TTL: Duration = Duration::ZERO;
/// Attribute TTL for directories.
pub const DIR_ATTR_TTL: Duration = Duration::from_secs(1);

/// The filesystem handed to fuser: a thin handle on the shared state.
pub struct RefFs {
    pub(crate) shared: Arc<Shared>,
}

fn errno(e: i32) -> Errno {
    Errno::from_i32(e)
}

pub(crate) fn attr(
    ino: u64,
    kind: Kind,
    size: u64,
    mtime: SystemTime,
    uid: u32,
    gid: u32,
) -> FileAttr {
    let (ft, perm, nlink) = match kind {
        Kind::Dir => (FileType::Directory, 0o755, 2),
        _ => (FileType::RegularFile, 0o644, 1),
    };
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: mtime,
        mtime,
        ctime: mtime,
        crtime: mtime,
        kind: ft,
        perm,
        nlink,
        uid,
        gid,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

pub(crate) fn file_type(kind: Kind) -> FileType {
    match kind {
        Kind::Dir => FileType::Directory,
        _ => FileType::RegularFile,
    }
}

fn ttls(kind: Kind) -> (Duration, Duration) {
    match kind {
        Kind::Dir => (DIR_ATTR_TTL, ENTRY_TTL),
        _ => (FILE_ATTR_TTL, ENTRY_TTL),
    }
}

impl Filesystem for RefFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Best effort: O_TRUNC arrives with open instead of a separate setattr.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_ATOMIC_O_TRUNC);
        Ok(())
    }

    fn destroy(&mut self) {
        self.shared.shutdown();
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.shared.lookup(parent.0, name.as_bytes()) {
            Ok(a) => {
                let kind = if a.kind == FileType::Directory {
                    Kind::Dir
                } else {
                    Kind::Ref
                };
                let (attr_ttl, entry_ttl) = ttls(kind);
                reply.entry_with_ttls(&attr_ttl, &entry_ttl, &a, Generation(0));
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.shared.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.shared.getattr(ino.0) {
            Ok(a) => {
                let ttl = if a.kind == FileType::Directory {
                    DIR_ATTR_TTL
                } else {
                    FILE_ATTR_TTL
                };
                reply.attr(&ttl, &a);
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.shared.open(ino.0) {
            Ok((fh, direct)) => {
                let flags = if direct {
                    FopenFlags::FOPEN_DIRECT_IO
                } else {
                    FopenFlags::empty()
                };
                reply.opened(FileHandle(fh), flags);
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.shared.with_handle(fh.0, |h| match h {
            Some(Handle::File { data, .. }) => {
                let start = usize::try_from(offset)
                    .unwrap_or(usize::MAX)
                    .min(data.len());
                let end = start.saturating_add(size as usize).min(data.len());
                reply.data(data.get(start..end).unwrap_or_default());
            }
            _ => reply.error(Errno::EBADF),
        });
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.shared.release(fh.0);
        reply.ok();
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.shared.opendir(ino.0) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let parent = self.shared.parent_of(ino.0);
        self.shared.with_handle(fh.0, |h| match h {
            Some(Handle::Dir { path, entries }) => {
                let mut i = offset;
                loop {
                    let full = match i {
                        0 => reply.add(INodeNo(ino.0), 1, FileType::Directory, "."),
                        1 => reply.add(INodeNo(parent), 2, FileType::Directory, ".."),
                        n => {
                            let Some(e) = usize::try_from(n - 2).ok().and_then(|k| entries.get(k))
                            else {
                                break;
                            };
                            let child = crate::fs::view::join(path, &e.name);
                            let cino = crate::fs::inode::ino_of(&child, e.kind);
                            reply.add(
                                INodeNo(cino),
                                n + 1,
                                file_type(e.kind),
                                OsStr::from_bytes(&e.name),
                            )
                        }
                    };
                    if full {
                        break;
                    }
                    i += 1;
                }
                reply.ok();
            }
            _ => reply.error(Errno::EBADF),
        });
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.shared.release(fh.0);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        reply.statfs(1 << 20, 1 << 19, 1 << 19, 1 << 20, 1 << 19, 4096, 255, 4096);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }
}
