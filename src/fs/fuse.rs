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

use crate::fs::backend::{
    Attrs, Backend, Entry, HandleAt, Made, NewNode, Opened, Opening, Rename, Req, SetAttr,
};
use crate::fs::cpu;
use crate::fs::error::FsError;
use crate::fs::router::Router;

/// The filesystem handed to fuser: the router over the mount's trees.
pub struct RefFs {
    pub(crate) router: Router,
    /// Whether to ask the kernel for FUSE passthrough (`--no-kernel-passthrough` clears it).
    pub(crate) kernel_passthrough: bool,
    /// FUSE over io_uring (`uring.rs`): `None` unless asked for (`--io-uring`); else
    /// where `init` leaves the prepared rings when the kernel offers the transport.
    pub(crate) uring: Option<std::sync::Arc<std::sync::Mutex<Option<crate::fs::uring::Plan>>>>,
}

/// The reply's errno: [`FsError::errno`].
fn errno(e: FsError) -> Errno {
    Errno::from_i32(e.errno())
}

fn req(r: &Request) -> Req {
    Req { pid: r.pid() }
}

/// The open file or directory `fh` of `ino`, at `offset`.
fn handle_at(ino: INodeNo, fh: FileHandle, offset: u64) -> HandleAt {
    HandleAt {
        ino: ino.0,
        fh: fh.0,
        offset,
    }
}

/// `parent/name`, to be made with `mode` less `umask`.
fn new_node(parent: INodeNo, name: &OsStr, mode: u32, umask: u32) -> NewNode<'_> {
    NewNode {
        parent: parent.0,
        name: name.as_bytes(),
        mode,
        umask,
    }
}

/// A reply to the kernel that carries a backend's answer of type `T`, or its error.
trait Answer<T> {
    fn answer(self, r: Result<T, FsError>);
}

impl Answer<()> for ReplyEmpty {
    fn answer(self, r: Result<(), FsError>) {
        match r {
            Ok(()) => self.ok(),
            Err(e) => self.error(errno(e)),
        }
    }
}

impl Answer<Entry> for ReplyEntry {
    fn answer(self, r: Result<Entry, FsError>) {
        match r {
            Ok(e) => self.entry_with_ttls(&e.attr_ttl, &e.entry_ttl, &e.attr, Generation(0)),
            Err(e) => self.error(errno(e)),
        }
    }
}

impl Answer<Attrs> for ReplyAttr {
    fn answer(self, r: Result<Attrs, FsError>) {
        match r {
            Ok((a, ttl)) => self.attr(&ttl, &a),
            Err(e) => self.error(errno(e)),
        }
    }
}

impl Answer<Vec<u8>> for ReplyData {
    fn answer(self, r: Result<Vec<u8>, FsError>) {
        match r {
            Ok(d) => self.data(&d),
            Err(e) => self.error(errno(e)),
        }
    }
}

impl Answer<u32> for ReplyWrite {
    fn answer(self, r: Result<u32, FsError>) {
        match r {
            Ok(n) => self.written(n),
            Err(e) => self.error(errno(e)),
        }
    }
}

impl Answer<Opened> for ReplyOpen {
    fn answer(self, r: Result<Opened, FsError>) {
        match r {
            Ok(Opened {
                fh,
                flags,
                backing: Some(backing),
            }) => self.opened_passthrough(FileHandle(fh), flags, &backing),
            Ok(Opened { fh, flags, .. }) => self.opened(FileHandle(fh), flags),
            Err(e) => self.error(errno(e)),
        }
    }
}

impl Answer<Made> for ReplyCreate {
    fn answer(self, r: Result<Made, FsError>) {
        let (e, o) = match r {
            Ok(made) => made,
            Err(e) => return self.error(errno(e)),
        };
        match o.backing {
            Some(backing) => self.created_passthrough(
                &e.entry_ttl,
                &e.attr,
                Generation(0),
                FileHandle(o.fh),
                o.flags,
                &backing,
            ),
            None => self.created(
                &e.entry_ttl,
                &e.attr,
                Generation(0),
                FileHandle(o.fh),
                o.flags,
            ),
        }
    }
}

impl RefFs {
    /// Answers a request on inode `ino` with what `call` asks of its tree's backend.
    fn on_node<T>(
        &self,
        r: &Request,
        ino: INodeNo,
        reply: impl Answer<T>,
        call: impl FnOnce(&dyn Backend, Req) -> Result<T, FsError>,
    ) {
        cpu::on_request(r.pid());
        reply.answer(
            self.router
                .node(ino.0)
                .and_then(|t| call(t.backend(), req(r))),
        );
    }

    /// Answers a request on `parent/name` (`create`: one that makes the name) with what
    /// `call` asks of its tree's backend.
    fn on_child<T>(
        &self,
        r: &Request,
        parent: INodeNo,
        name: &OsStr,
        create: bool,
        reply: impl Answer<T>,
        call: impl FnOnce(&dyn Backend, Req) -> Result<T, FsError>,
    ) {
        cpu::on_request(r.pid());
        let target = self.router.child(parent.0, name.as_bytes(), create);
        reply.answer(target.and_then(|t| call(t.backend(), req(r))));
    }

    /// Answers a request on the open file `fh` of `ino` at `offset` (read, write) with
    /// what `call` asks of its tree's backend.
    fn on_handle<T>(
        &self,
        r: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: impl Answer<T>,
        call: impl FnOnce(&dyn Backend, Req, HandleAt) -> Result<T, FsError>,
    ) {
        let at = handle_at(ino, fh, offset);
        self.on_node(r, ino, reply, |b, q| call(b, q, at))
    }
}

/// Handlers on the existing name `parent/name` (`lookup`, `unlink`, `rmdir`): each asks
/// the backend's call of the same name.
macro_rules! on_name {
    ($($op:ident -> $reply:ty;)*) => {$(
        fn $op(&self, r: &Request, parent: INodeNo, name: &OsStr, reply: $reply) {
            self.on_child(r, parent, name, false, reply, |b, q| {
                b.$op(q, parent.0, name.as_bytes())
            })
        }
    )*};
}

/// Handlers on an open file at an offset (`read`, `write`): the trait's parameters after
/// the offset, the reply, and the backend's call given where (`HandleAt`).
macro_rules! at_offset {
    ($(fn $op:ident($($arg:ident: $ty:ty),*) -> $reply:ty = $call:expr;)*) => {$(
        fn $op(
            &self,
            r: &Request,
            ino: INodeNo,
            fh: FileHandle,
            offset: u64,
            $($arg: $ty,)*
            reply: $reply,
        ) {
            self.on_handle(r, ino, fh, offset, reply, $call)
        }
    )*};
}

impl Filesystem for RefFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Best effort: O_TRUNC arrives with open instead of a separate setattr.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_ATOMIC_O_TRUNC);
        // Cached pages are dropped whenever fresh attributes show another mtime or size
        // (a second line of defence behind the open-time content check).
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_AUTO_INVAL_DATA);
        if let Some(slot) = &self.uring {
            // Everything that can fail is made first: once agreed, the kernel holds every
            // request until each CPU's queue has an entry (`uring.rs`).
            if config
                .capabilities()
                .contains(fuser::InitFlags::FUSE_OVER_IO_URING)
            {
                if let Some(plan) = crate::fs::uring::Plan::prepare() {
                    if config
                        .set_max_write(crate::fs::uring::PAYLOAD as u32)
                        .is_ok()
                        && config
                            .add_capabilities(fuser::InitFlags::FUSE_OVER_IO_URING)
                            .is_ok()
                    {
                        *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(plan);
                        log::info!("reftablefs: FUSE over io_uring: a queue per CPU");
                    }
                }
            } else {
                log::info!(
                    "reftablefs: FUSE over /dev/fuse (the kernel offers no io_uring: the fuse module's enable_uring is off, or the kernel is older than 6.14)"
                );
            }
        }
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

    on_name! {
        lookup -> ReplyEntry;
        unlink -> ReplyEmpty;
        rmdir -> ReplyEmpty;
    }

    fn forget(&self, _r: &Request, ino: INodeNo, nlookup: u64) {
        if let Ok(t) = self.router.node(ino.0) {
            t.backend().forget(ino.0, nlookup);
        }
    }

    fn getattr(&self, r: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let fh = fh.map(|f| f.0);
        self.on_node(r, ino, reply, |b, q| b.getattr(q, ino.0, fh))
    }

    fn open(&self, r: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        cpu::on_request(r.pid());
        let opened = self.router.node(ino.0).and_then(|t| {
            let backing = &|f: &std::fs::File| reply.open_backing(f);
            let how = Opening {
                flags: flags.0,
                backing,
            };
            t.backend().open(req(r), ino.0, how)
        });
        reply.answer(opened)
    }

    at_offset! {
        fn read(size: u32, flags: OpenFlags, _lock_owner: Option<LockOwner>) -> ReplyData =
            |b, q, at| b.read(q, at, size, flags.0);
        fn write(
            data: &[u8],
            _write_flags: WriteFlags,
            flags: OpenFlags,
            _lock_owner: Option<LockOwner>
        ) -> ReplyWrite = |b, q, at| b.write(q, at, data, flags.0);
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
        self.on_node(r, ino, reply, |b, q| b.flush(q, ino.0, fh.0))
    }

    fn fsync(&self, r: &Request, ino: INodeNo, fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        self.on_node(r, ino, reply, |b, q| b.fsync(q, ino.0, fh.0, datasync))
    }

    /// No file of the mount takes an ioctl: `ENOTTY`, as a disk answers for a regular file,
    /// and no log line. Every text-mode `open` in Python asks whether the file is a
    /// terminal (`TCGETS`); fuser's default logged a warning for each one, two lines of
    /// the daemon's log per ref a Python client read.
    #[allow(clippy::too_many_arguments)]
    fn ioctl(
        &self,
        _r: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        reply.error(fuser::Errno::ENOTTY);
    }

    fn fsyncdir(&self, r: &Request, ino: INodeNo, _fh: FileHandle, _ds: bool, reply: ReplyEmpty) {
        self.on_node(r, ino, reply, |b, q| b.fsyncdir(q, ino.0))
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
        let n = new_node(parent, name, mode, umask);
        let made = self.router.child(n.parent, n.name, true).and_then(|t| {
            let backing = &|f: &std::fs::File| reply.open_backing(f);
            t.backend().create(req(r), n, Opening { flags, backing })
        });
        reply.answer(made)
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
        let a = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
            fh: fh.map(|f| f.0),
        };
        self.on_node(r, ino, reply, |b, q| b.setattr(q, ino.0, &a))
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
        let n = new_node(parent, name, mode, umask);
        self.on_child(r, parent, name, true, reply, |b, q| b.mkdir(q, n))
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
        let rename = Rename {
            parent: parent.0,
            name: name.as_bytes(),
            newparent: newparent.0,
            newname: newname.as_bytes(),
            flags: flags.bits(),
        };
        let target = self.router.rename(&rename);
        reply.answer(target.and_then(|t| t.backend().rename(req(r), &rename)))
    }

    fn opendir(&self, r: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.on_node(r, ino, reply, |b, q| {
            let fh = b.opendir(q, ino.0)?;
            Ok(Opened {
                fh,
                flags: fuser::FopenFlags::empty(),
                backing: None,
            })
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
        let t = match self.router.node(ino.0) {
            Ok(t) => t,
            Err(e) => return reply.error(errno(e)),
        };
        let mut add = |ino: u64, next: u64, kind: fuser::FileType, name: &[u8]| {
            reply.add(INodeNo(ino), next, kind, OsStr::from_bytes(name))
        };
        match t
            .backend()
            .readdir(req(r), handle_at(ino, fh, offset), &mut add)
        {
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
        self.on_node(r, ino, reply, |b, q| b.readlink(q, ino.0))
    }

    fn symlink(
        &self,
        r: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        let (name, to) = (link_name.as_bytes(), target.as_os_str().as_bytes());
        // It makes the name (a worktree being created gets its view, as for `create`).
        self.on_child(r, parent, link_name, true, reply, |b, q| {
            b.symlink(q, parent.0, name, to)
        })
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
