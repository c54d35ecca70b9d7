//! The `fuser::Filesystem` implementation: translation only. Each request is resolved to
//! its tree once (`router.rs`), the tree's [`Backend`] answers, and the answer becomes
//! the kernel's reply. Handlers never send notifications (see `watch.rs`).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::SystemTime;

use fuser::{
    BsdFileFlags, Errno, FileHandle, Filesystem, Generation, INodeNo, KernelConfig, LockOwner,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use crate::fs::backend::{Backend, Entry, Opened, Req, SetAttr};
use crate::fs::cpu;
use crate::fs::error::FsError;
use crate::fs::router::{Router, Target};

/// The filesystem handed to fuser: the router over the mount's trees.
pub struct RefFs {
    pub(crate) router: Router,
    /// Whether to ask the kernel for FUSE passthrough (`--no-kernel-passthrough` clears it).
    pub(crate) kernel_passthrough: bool,
}

/// The reply's errno: [`FsError::errno`].
fn errno(e: FsError) -> Errno {
    Errno::from_i32(e.errno())
}

fn req(r: &Request) -> Req {
    Req { pid: r.pid() }
}

fn reply_empty(r: Result<(), FsError>, reply: ReplyEmpty) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(e)),
    }
}

fn reply_entry(r: Result<Entry, FsError>, reply: ReplyEntry) {
    match r {
        Ok(e) => reply.entry_with_ttls(&e.attr_ttl, &e.entry_ttl, &e.attr, Generation(0)),
        Err(e) => reply.error(errno(e)),
    }
}

fn reply_attr(r: Result<(fuser::FileAttr, std::time::Duration), FsError>, reply: ReplyAttr) {
    match r {
        Ok((a, ttl)) => reply.attr(&ttl, &a),
        Err(e) => reply.error(errno(e)),
    }
}

impl RefFs {
    /// The tree of inode `ino`, or the error to reply.
    fn node(&self, ino: INodeNo) -> Result<Target, Errno> {
        self.router.node(ino.0).map_err(errno)
    }

    /// The tree of `parent/name`, or the error to reply.
    fn child(&self, parent: INodeNo, name: &OsStr, create: bool) -> Result<Target, Errno> {
        self.router
            .child(parent.0, name.as_bytes(), create)
            .map_err(errno)
    }
}

/// Runs `f` on the backend of `$target`, or replies its error.
macro_rules! on {
    ($target:expr, $reply:ident, |$b:ident| $body:expr) => {
        match $target {
            Ok(t) => {
                let $b: &dyn Backend = t.backend();
                $body
            }
            Err(e) => $reply.error(e),
        }
    };
}

impl Filesystem for RefFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Best effort: O_TRUNC arrives with open instead of a separate setattr.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_ATOMIC_O_TRUNC);
        // Cached pages are dropped whenever fresh attributes show another mtime or size
        // (a second line of defence behind the open-time content check).
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_AUTO_INVAL_DATA);
        if let Some(p) = &self.router.pass {
            // Kernel passthrough for passed-through regular files; the backing files may
            // sit on a stacked filesystem (overlayfs) themselves, hence depth 2.
            let on = self.kernel_passthrough
                && config
                    .add_capabilities(fuser::InitFlags::FUSE_PASSTHROUGH)
                    .is_ok()
                && config.set_max_stack_depth(2).is_ok();
            p.set_kernel_passthrough(on);
            log::info!(
                "reftablefs: passed-through files: {}",
                if on {
                    "kernel FUSE passthrough"
                } else if self.kernel_passthrough {
                    "plain forwarding (the kernel offers no FUSE passthrough)"
                } else {
                    "plain forwarding (--no-kernel-passthrough)"
                }
            );
        }
        Ok(())
    }

    fn destroy(&mut self) {
        // Unmounting: write every pending batch before the session ends.
        self.router.flush_all();
    }

    fn lookup(&self, r: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        cpu::on_request(r.pid());
        on!(self.child(parent, name, false), reply, |b| reply_entry(
            b.lookup(req(r), parent.0, name.as_bytes()),
            reply
        ))
    }

    fn forget(&self, _r: &Request, ino: INodeNo, nlookup: u64) {
        if let Ok(t) = self.router.node(ino.0) {
            t.backend().forget(ino.0, nlookup);
        }
    }

    fn getattr(&self, r: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        cpu::on_request(r.pid());
        on!(self.node(ino), reply, |b| reply_attr(
            b.getattr(req(r), ino.0, fh.map(|f| f.0)),
            reply
        ))
    }

    fn open(&self, r: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        cpu::on_request(r.pid());
        on!(self.node(ino), reply, |b| {
            match b.open(req(r), ino.0, flags.0, &|f| reply.open_backing(f)) {
                Ok(Opened {
                    fh,
                    flags,
                    backing: Some(backing),
                }) => reply.opened_passthrough(FileHandle(fh), flags, &backing),
                Ok(Opened { fh, flags, .. }) => reply.opened(FileHandle(fh), flags),
                Err(e) => reply.error(errno(e)),
            }
        })
    }

    fn read(
        &self,
        r: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        cpu::on_request(r.pid());
        on!(
            self.node(ino),
            reply,
            |b| match b.read(req(r), ino.0, fh.0, offset, size, flags.0) {
                Ok(d) => reply.data(&d),
                Err(e) => reply.error(errno(e)),
            }
        )
    }

    fn release(
        &self,
        _r: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        if let Ok(t) = self.router.node(ino.0) {
            t.backend().release(ino.0, fh.0);
        }
        reply.ok();
    }

    fn flush(&self, r: &Request, ino: INodeNo, fh: FileHandle, _lo: LockOwner, reply: ReplyEmpty) {
        cpu::on_request(r.pid());
        on!(self.node(ino), reply, |b| reply_empty(
            b.flush(req(r), ino.0, fh.0),
            reply
        ))
    }

    fn fsync(&self, r: &Request, ino: INodeNo, fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        cpu::on_request(r.pid());
        on!(self.node(ino), reply, |b| reply_empty(
            b.fsync(req(r), ino.0, fh.0, datasync),
            reply
        ))
    }

    fn fsyncdir(&self, r: &Request, ino: INodeNo, _fh: FileHandle, _ds: bool, reply: ReplyEmpty) {
        cpu::on_request(r.pid());
        on!(self.node(ino), reply, |b| reply_empty(
            b.fsyncdir(req(r), ino.0),
            reply
        ))
    }

    fn create(
        &self,
        r: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        cpu::on_request(r.pid());
        on!(self.child(parent, name, true), reply, |b| {
            let made = b.create(
                req(r),
                parent.0,
                name.as_bytes(),
                mode,
                umask,
                flags,
                &|f| reply.open_backing(f),
            );
            match made {
                Ok((
                    e,
                    Opened {
                        fh,
                        flags,
                        backing: Some(backing),
                    },
                )) => reply.created_passthrough(
                    &e.entry_ttl,
                    &e.attr,
                    Generation(0),
                    FileHandle(fh),
                    flags,
                    &backing,
                ),
                Ok((e, Opened { fh, flags, .. })) => {
                    reply.created(&e.entry_ttl, &e.attr, Generation(0), FileHandle(fh), flags)
                }
                Err(e) => reply.error(errno(e)),
            }
        })
    }

    fn write(
        &self,
        r: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        cpu::on_request(r.pid());
        on!(
            self.node(ino),
            reply,
            |b| match b.write(req(r), ino.0, fh.0, offset, data, flags.0) {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(errno(e)),
            }
        )
    }

    fn setattr(
        &self,
        r: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        cpu::on_request(r.pid());
        let a = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
        };
        on!(self.node(ino), reply, |b| reply_attr(
            b.setattr(req(r), ino.0, &a, fh.map(|f| f.0)),
            reply
        ))
    }

    fn unlink(&self, r: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        cpu::on_request(r.pid());
        on!(self.child(parent, name, false), reply, |b| reply_empty(
            b.unlink(req(r), parent.0, name.as_bytes()),
            reply
        ))
    }

    fn mkdir(
        &self,
        r: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        cpu::on_request(r.pid());
        on!(self.child(parent, name, true), reply, |b| reply_entry(
            b.mkdir(req(r), parent.0, name.as_bytes(), mode, umask),
            reply
        ))
    }

    fn rmdir(&self, r: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        cpu::on_request(r.pid());
        on!(self.child(parent, name, false), reply, |b| reply_empty(
            b.rmdir(req(r), parent.0, name.as_bytes()),
            reply
        ))
    }

    fn rename(
        &self,
        r: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        cpu::on_request(r.pid());
        let target = self
            .router
            .rename(parent.0, name.as_bytes(), newparent.0, newname.as_bytes())
            .map_err(errno);
        on!(target, reply, |b| reply_empty(
            b.rename(
                req(r),
                parent.0,
                name.as_bytes(),
                newparent.0,
                newname.as_bytes(),
                flags.bits(),
            ),
            reply
        ))
    }

    fn opendir(&self, r: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        cpu::on_request(r.pid());
        on!(self.node(ino), reply, |b| match b.opendir(req(r), ino.0) {
            Ok(fh) => reply.opened(FileHandle(fh), fuser::FopenFlags::empty()),
            Err(e) => reply.error(errno(e)),
        })
    }

    fn readdir(
        &self,
        r: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        cpu::on_request(r.pid());
        let t = match self.node(ino) {
            Ok(t) => t,
            Err(e) => return reply.error(e),
        };
        let mut add = |ino: u64, next: u64, kind: fuser::FileType, name: &[u8]| {
            reply.add(INodeNo(ino), next, kind, OsStr::from_bytes(name))
        };
        match t.backend().readdir(req(r), ino.0, fh.0, offset, &mut add) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn releasedir(
        &self,
        _r: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        if let Ok(t) = self.router.node(ino.0) {
            t.backend().releasedir(ino.0, fh.0);
        }
        reply.ok();
    }

    fn readlink(&self, r: &Request, ino: INodeNo, reply: ReplyData) {
        cpu::on_request(r.pid());
        on!(self.node(ino), reply, |b| match b.readlink(req(r), ino.0) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(errno(e)),
        })
    }

    fn symlink(
        &self,
        r: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        cpu::on_request(r.pid());
        on!(
            self.child(parent, link_name, false),
            reply,
            |b| reply_entry(
                b.symlink(
                    req(r),
                    parent.0,
                    link_name.as_bytes(),
                    target.as_os_str().as_bytes()
                ),
                reply
            )
        )
    }

    /// Hard links are refused (git then renames its temporary object files instead).
    fn link(&self, r: &Request, _ino: INodeNo, _np: INodeNo, _nn: &OsStr, reply: ReplyEntry) {
        cpu::on_request(r.pid());
        reply.error(Errno::EPERM);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        if let Some(Ok(s)) = self.router.pass.as_deref().map(|p| p.statfs()) {
            return reply.statfs(
                s.f_blocks,
                s.f_bfree,
                s.f_bavail,
                s.f_files,
                s.f_ffree,
                s.f_bsize as u32,
                s.f_namemax as u32,
                s.f_frsize as u32,
            );
        }
        reply.statfs(1 << 20, 1 << 19, 1 << 19, 1 << 20, 1 << 19, 4096, 255, 4096);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }
}
