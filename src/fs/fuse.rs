//! The `fuser::Filesystem` implementation: request handlers that translate between kernel
//! requests and the pure view logic. Handlers never send notifications (see `watch.rs`).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{
    BsdFileFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
    WriteFlags,
};

use crate::fs::inode::OpenMode;
use crate::fs::state::{Handle, Shared, REF_ATTR_TTL};
use crate::fs::view::Kind;

/// Entry TTL for directories and ref files. A name that vanishes or changes kind is
/// invalidated by the watcher; new names are never negatively cached; every open reaches
/// the mount, which compares the content with what the kernel may have cached.
pub const ENTRY_TTL: Duration = Duration::from_secs(10);
/// Attribute TTL for files other than ref files of a stable size (those get
/// [`REF_ATTR_TTL`]): zero, so a size is never stale (no truncated reads).
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

/// (attribute TTL, entry TTL) for a node of `kind`; `cache`: the attributes of a ref
/// file may be cached (its size is stable).
fn ttls(kind: Kind, cache: bool) -> (Duration, Duration) {
    match kind {
        Kind::Dir => (DIR_ATTR_TTL, ENTRY_TTL),
        // A lock file's name must not stay cached once it is gone (git retries a held
        // lock for only 100 ms).
        Kind::Scratch => (FILE_ATTR_TTL, Duration::ZERO),
        _ => (file_attr_ttl(cache), ENTRY_TTL),
    }
}

fn file_attr_ttl(cache: bool) -> Duration {
    if cache {
        REF_ATTR_TTL
    } else {
        FILE_ATTR_TTL
    }
}

fn flags_of(f: OpenFlags) -> i32 {
    f.0
}

fn reply_empty(r: Result<(), i32>, reply: ReplyEmpty) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(e)),
    }
}

impl Filesystem for RefFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Best effort: O_TRUNC arrives with open instead of a separate setattr.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_ATOMIC_O_TRUNC);
        // Cached pages are dropped whenever fresh attributes show another mtime or size
        // (a second line of defence behind the open-time content check).
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_AUTO_INVAL_DATA);
        Ok(())
    }

    fn destroy(&mut self) {
        // Unmounting: write every pending batch before the session ends.
        let _ = self.shared.flush_all();
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.shared.lookup(parent.0, name.as_bytes()) {
            Ok((a, kind, cache)) => {
                let (attr_ttl, entry_ttl) = ttls(kind, cache);
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
            Ok((a, cache)) => {
                let ttl = if a.kind == FileType::Directory {
                    DIR_ATTR_TTL
                } else {
                    file_attr_ttl(cache)
                };
                reply.attr(&ttl, &a);
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, open_flags: OpenFlags, reply: ReplyOpen) {
        match self.shared.open(ino.0, open_flags.0) {
            Ok((fh, mode)) => {
                let mut flags = match mode {
                    OpenMode::Direct => FopenFlags::FOPEN_DIRECT_IO,
                    // Without KEEP_CACHE the kernel drops the inode's pages at this open.
                    OpenMode::Refill => FopenFlags::empty(),
                    OpenMode::Cached => FopenFlags::FOPEN_KEEP_CACHE,
                };
                // Nothing to commit when a reader closes: skip the FLUSH round trip.
                if flags_of(open_flags) & libc::O_ACCMODE == libc::O_RDONLY {
                    flags |= FopenFlags::FOPEN_NOFLUSH;
                }
                reply.opened(FileHandle(fh), flags);
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        // Replied after the state lock is dropped.
        match self.shared.read_file(ino.0, fh.0, offset, size) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(errno(e)),
        }
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
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply_empty(self.shared.flush(fh.0, req.pid()), reply);
    }

    fn fsync(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply_empty(self.shared.fsync(fh.0, req.pid()), reply);
    }

    fn fsyncdir(
        &self,
        req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply_empty(self.shared.sync_for(self.shared.tgid(req.pid())), reply);
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        match self.shared.create(parent.0, name.as_bytes(), flags) {
            Ok((a, fh)) => {
                let ttl = if a.kind == FileType::Directory {
                    DIR_ATTR_TTL
                } else {
                    Duration::ZERO
                };
                reply.created(
                    &ttl,
                    &a,
                    Generation(0),
                    FileHandle(fh),
                    FopenFlags::FOPEN_DIRECT_IO,
                );
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn write(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.shared.write(fh.0, offset, data, flags.0, req.pid()) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // Modes and times are accepted and not stored (core.sharedRepository chmods).
        if let Some(size) = size {
            if let Err(e) = self
                .shared
                .truncate(ino.0, fh.map(|f| f.0), size, req.pid())
            {
                return reply.error(errno(e));
            }
        }
        match self.shared.getattr(ino.0) {
            Ok((a, cache)) => {
                let ttl = if a.kind == FileType::Directory {
                    DIR_ATTR_TTL
                } else {
                    file_attr_ttl(cache)
                };
                reply.attr(&ttl, &a);
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(
            self.shared.unlink(parent.0, name.as_bytes(), req.pid()),
            reply,
        );
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        match self.shared.mkdir(parent.0, name.as_bytes()) {
            Ok(a) => reply.entry_with_ttls(&DIR_ATTR_TTL, &ENTRY_TTL, &a, Generation(0)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(self.shared.rmdir(parent.0, name.as_bytes()), reply);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if !flags.is_empty() {
            return reply.error(Errno::EINVAL);
        }
        reply_empty(
            self.shared.rename(
                parent.0,
                name.as_bytes(),
                newparent.0,
                newname.as_bytes(),
                req.pid(),
            ),
            reply,
        );
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
        // The listing is taken out of the state; the reply is built without its lock.
        let listing = self.shared.with_handle(fh.0, |h| match h {
            Some(Handle::Dir { path, entries }) => Some((path.clone(), entries.clone())),
            _ => None,
        });
        match listing {
            Some((path, entries)) => {
                let path = &path;
                let mut i = offset;
                loop {
                    let full = match i {
                        0 => reply.add(INodeNo(ino.0), 1, FileType::Directory, "."),
                        1 => reply.add(INodeNo(parent), 2, FileType::Directory, ".."),
                        n => {
                            let Some((name, kind)) =
                                usize::try_from(n - 2).ok().and_then(|k| entries.get(k))
                            else {
                                break;
                            };
                            let child = crate::fs::view::join(path, name);
                            let cino = crate::fs::inode::ino_of(&child, kind);
                            reply.add(
                                INodeNo(cino),
                                n + 1,
                                file_type(kind),
                                OsStr::from_bytes(name),
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
            None => reply.error(Errno::EBADF),
        }
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
