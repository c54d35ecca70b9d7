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

use crate::fs::attr::file_type;
use crate::fs::cpu;
use crate::fs::error::FsError;
use crate::fs::ino::{self, Map, ROOT};
use crate::fs::inode::OpenMode;
use crate::fs::passthrough::{self, Opened, Passthrough, PASS_TTL};
use crate::fs::state::{Handle, Shared, REF_ATTR_TTL};
use crate::fs::status::{self, serve as status_fs};
use crate::fs::view::Kind;
use crate::fs::worktree::{Worktree, Worktrees};

/// Entry TTL for directories and ref files. A name that vanishes or changes kind is
/// invalidated by the watcher; new names are never negatively cached; every open reaches
/// the mount, which compares the content with what the kernel may have cached.
pub const ENTRY_TTL: Duration = Duration::from_secs(10);
/// Attribute TTL for files other than ref files of a stable size (those get
/// [`REF_ATTR_TTL`]): zero, so a size is never stale (no truncated reads).
pub const FILE_ATTR_TTL: Duration = Duration::ZERO;
/// Attribute TTL for directories.
pub const DIR_ATTR_TTL: Duration = Duration::from_secs(1);
/// Open flags of every passed-through file: no `FLUSH` at close. A passed-through file
/// has nothing to do at close (its writes went to the real file at each `write`, by the
/// kernel's passthrough or by our `pwrite`), and a `FLUSH` is a round trip the closing
/// process waits for (a third of a `cat`'s requests).
const PASS_OPEN_FLAGS: FopenFlags = FopenFlags::FOPEN_NOFLUSH;

/// The filesystem handed to fuser: a thin handle on the shared state (the ref view) and,
/// unless the mount is refs-only, the passed-through rest of the git directory. Requests
/// go to the passthrough when their inode is a passed-through one, or when they name a
/// child of the root that is no ref name (`passthrough::is_ref_name_at_root`).
pub struct RefFs {
    pub(crate) shared: Arc<Shared>,
    pub(crate) pass: Option<Arc<Passthrough>>,
    /// Whether to ask the kernel for FUSE passthrough (`--no-kernel-passthrough` clears it).
    pub(crate) kernel_passthrough: bool,
    /// The ref views of linked worktrees (`worktrees/<id>/HEAD`, …; none when refs-only).
    pub(crate) wts: Option<Arc<Worktrees>>,
}

/// A ref view: the main one, or a linked worktree's (`worktree.rs`).
enum ViewRef<'a> {
    Main(&'a Shared),
    Wt(Arc<Worktree>),
}

impl ViewRef<'_> {
    /// A linked worktree's view takes only its own names (`Worktree::check_creatable`).
    fn check_creatable(&self, parent: u64, name: &[u8]) -> Result<(), FsError> {
        match self {
            ViewRef::Main(_) => Ok(()),
            ViewRef::Wt(w) => w.check_creatable(parent, name),
        }
    }
}

impl std::ops::Deref for ViewRef<'_> {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        match self {
            ViewRef::Main(s) => s,
            ViewRef::Wt(w) => &w.shared,
        }
    }
}

impl RefFs {
    /// The passthrough, if `ino` is one of its nodes.
    fn pass_ino(&self, ino: INodeNo) -> Option<&Passthrough> {
        self.pass.as_deref().filter(|_| ino::is_pass(ino.0))
    }

    /// The passthrough, if `parent/name` belongs to it (ref names in a linked worktree's
    /// directory belong to that worktree's ref view).
    fn pass_child(&self, parent: INodeNo, name: &OsStr) -> Option<&Passthrough> {
        let p = self.pass.as_deref()?;
        let ref_name = passthrough::is_ref_name_at_root(name.as_bytes());
        if ino::is_pass(parent.0) {
            if ref_name && self.wts.is_some() && p.worktree_of(parent.0).is_some() {
                return None;
            }
            Some(p)
        } else if parent.0 == ROOT && !ref_name {
            Some(p)
        } else {
            None
        }
    }

    /// When `ino` is a linked worktree's directory whose stack exists: adds its ref
    /// view's names (`HEAD`, `refs`, `logs`, …) to the passed-through listing `fh`.
    fn add_worktree_refs(&self, p: &Passthrough, ino: u64, fh: u64) {
        let Some(w) = self.wts.as_deref() else { return };
        let Some(id) = p.worktree_of(ino) else { return };
        let Ok(wt) = w.serve(&id, ino, false) else {
            return;
        };
        let Ok(dfh) = wt.shared.opendir(ROOT) else {
            return;
        };
        let entries = view_entries(&wt.shared, wt.map(), dfh);
        wt.shared.release(dfh);
        if let Some(e) = entries {
            p.extend_dir(fh, &e);
        }
    }

    /// The ref view serving inode `ino` (not passed through), with its inode map.
    fn view(&self, ino: u64) -> Result<(ViewRef<'_>, Map), Errno> {
        if !ino::is_worktree(ino) {
            return Ok((ViewRef::Main(&self.shared), Map::MAIN));
        }
        match self.wts.as_deref().and_then(|w| w.by_ino(ino)) {
            Some(w) => {
                let m = w.map();
                Ok((ViewRef::Wt(w), m))
            }
            None => Err(Errno::ESTALE),
        }
    }

    /// The ref view `parent/name` belongs to (`pass_child` said it is not passed
    /// through). `create`: the request writes the name (see `Worktrees::serve`).
    fn view_child(&self, parent: u64, create: bool) -> Result<(ViewRef<'_>, Map), Errno> {
        if !ino::is_pass(parent) {
            return self.view(parent);
        }
        let (Some(p), Some(w)) = (self.pass.as_deref(), self.wts.as_deref()) else {
            return Err(Errno::ENOENT);
        };
        let Some(id) = p.worktree_of(parent) else {
            return Err(Errno::ENOENT);
        };
        let wt = w.serve(&id, parent, create).map_err(errno)?;
        let m = wt.map();
        Ok((ViewRef::Wt(wt), m))
    }
}

/// The entries of a ref view's open directory handle `fh`, with the mount's inodes.
fn view_entries(sh: &Shared, m: Map, fh: u64) -> Option<Vec<passthrough::DirEntry>> {
    sh.with_handle(fh, |h| match h {
        Some(Handle::Dir { path, entries }) => Some(
            (0..entries.len())
                .filter_map(|k| entries.get(k))
                .map(|(name, kind)| passthrough::DirEntry {
                    name: name.into(),
                    kind: file_type(kind),
                    ino: m.out(crate::fs::inode::ino_of(
                        &crate::fs::view::join(path, name),
                        kind,
                    )),
                })
                .collect(),
        ),
        _ => None,
    })
}

fn pass_reply_entry(r: Result<FileAttr, FsError>, reply: ReplyEntry) {
    match r {
        Ok(a) => reply.entry_with_ttls(&PASS_TTL, &PASS_TTL, &a, Generation(0)),
        Err(e) => reply.error(errno(e)),
    }
}

/// The reply's errno: [`FsError::errno`].
fn errno(e: FsError) -> Errno {
    Errno::from_i32(e.errno())
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

fn reply_empty(r: Result<(), FsError>, reply: ReplyEmpty) {
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
        if let Some(p) = &self.pass {
            // Kernel passthrough for passed-through regular files; the backing files may
            // sit on a stacked filesystem (overlayfs) themselves, hence depth 2.
            let on = self.kernel_passthrough
                && config
                    .add_capabilities(fuser::InitFlags::FUSE_PASSTHROUGH)
                    .is_ok()
                && config.set_max_stack_depth(2).is_ok();
            p.set_kernel_passthrough(on);
            eprintln!(
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
        let _ = self.shared.flush_all();
        if let Some(w) = &self.wts {
            let _ = w.flush_all();
        }
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        cpu::on_request(req.pid());
        if status::is_status_name(parent.0, name.as_bytes()) {
            return status_fs::lookup(&self.shared, parent.0, name.as_bytes(), reply);
        }
        if let Some(p) = self.pass_child(parent, name) {
            return pass_reply_entry(p.lookup(parent.0, name.as_bytes()), reply);
        }
        let (sh, m) = match self.view_child(parent.0, false) {
            Ok(v) => v,
            Err(e) => return reply.error(e),
        };
        match sh.lookup(m.inn(parent.0), name.as_bytes()) {
            Ok((mut a, kind, cache)) => {
                a.ino = INodeNo(m.out(a.ino.0));
                let (attr_ttl, entry_ttl) = ttls(kind, cache);
                reply.entry_with_ttls(&attr_ttl, &entry_ttl, &a, Generation(0));
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        if ino::is_status(ino.0) {
            return;
        }
        if let Some(p) = self.pass_ino(ino) {
            return p.forget(ino.0, nlookup);
        }
        if let Ok((sh, m)) = self.view(ino.0) {
            sh.forget(m.inn(ino.0), nlookup);
        }
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        cpu::on_request(req.pid());
        if ino::is_status(ino.0) {
            return status_fs::getattr(&self.shared, ino.0, reply);
        }
        if let Some(p) = self.pass_ino(ino) {
            return match p.getattr(ino.0, fh.map(|f| f.0)) {
                Ok(a) => reply.attr(&PASS_TTL, &a),
                Err(e) => reply.error(errno(e)),
            };
        }
        let (sh, m) = match self.view(ino.0) {
            Ok(v) => v,
            Err(e) => return reply.error(e),
        };
        match sh.getattr(m.inn(ino.0)) {
            Ok((mut a, cache)) => {
                a.ino = ino;
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

    fn open(&self, req: &Request, ino: INodeNo, open_flags: OpenFlags, reply: ReplyOpen) {
        cpu::on_request(req.pid());
        if ino::is_status(ino.0) {
            return status_fs::open(&self.shared, ino.0, open_flags.0, reply);
        }
        if let Some(p) = self.pass_ino(ino) {
            let r = p.open(ino.0, open_flags.0, |f| reply.open_backing(f));
            return match r {
                Ok(Opened::Backed { fh, backing }) => {
                    reply.opened_passthrough(FileHandle(fh), PASS_OPEN_FLAGS, &backing)
                }
                Ok(Opened::Plain { fh, direct }) => reply.opened(
                    FileHandle(fh),
                    if direct {
                        PASS_OPEN_FLAGS | FopenFlags::FOPEN_DIRECT_IO
                    } else {
                        PASS_OPEN_FLAGS
                    },
                ),
                Err(e) => reply.error(errno(e)),
            };
        }
        let (sh, m) = match self.view(ino.0) {
            Ok(v) => v,
            Err(e) => return reply.error(e),
        };
        match sh.open(m.inn(ino.0), open_flags.0) {
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
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        cpu::on_request(req.pid());
        if status_fs::is_handle(fh.0) {
            return status_fs::read(fh.0, offset, size, reply);
        }
        if let Some(p) = self.pass_ino(ino) {
            return match p.read(fh.0, offset, size) {
                Ok(d) => reply.data(&d),
                Err(e) => reply.error(errno(e)),
            };
        }
        // Replied after the state lock is dropped.
        let (sh, m) = match self.view(ino.0) {
            Ok(v) => v,
            Err(e) => return reply.error(e),
        };
        // An O_DIRECT read of a page-cache handle fills no page.
        let direct = flags_of(flags) & libc::O_DIRECT != 0;
        match sh.read_file(m.inn(ino.0), fh.0, offset, size, direct) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        if status_fs::is_handle(fh.0) {
            status_fs::release(fh.0);
            return reply.ok();
        }
        if let Some(p) = self.pass_ino(ino) {
            p.release(fh.0);
            return reply.ok();
        }
        if let Ok((sh, _)) = self.view(ino.0) {
            sh.release(fh.0);
        }
        reply.ok();
    }

    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        cpu::on_request(req.pid());
        if ino::is_status(ino.0) {
            return reply.ok();
        }
        if self.pass_ino(ino).is_some() {
            // Written through at every write: nothing to do at close (and opened with
            // FOPEN_NOFLUSH, so only a kernel without it sends this).
            return reply.ok();
        }
        match self.view(ino.0) {
            Ok((sh, _)) => reply_empty(sh.flush(fh.0, req.pid()), reply),
            Err(e) => reply.error(e),
        }
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        cpu::on_request(req.pid());
        if ino::is_status(ino.0) {
            return reply.ok();
        }
        if let Some(p) = self.pass_ino(ino) {
            return reply_empty(p.fsync(fh.0, datasync), reply);
        }
        match self.view(ino.0) {
            Ok((sh, _)) => reply_empty(sh.fsync(fh.0, req.pid()), reply),
            Err(e) => reply.error(e),
        }
    }

    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        cpu::on_request(req.pid());
        if let Some(p) = self.pass_ino(ino) {
            return reply_empty(p.fsyncdir(ino.0), reply);
        }
        if let Some(p) = self.pass.as_deref().filter(|_| ino.0 == ROOT) {
            if let Err(e) = p.fsyncdir(ROOT) {
                return reply.error(errno(e));
            }
        }
        if ino.0 == ROOT {
            // The root (`reftablefs unmount`, syncfs-like callers): every worktree too.
            if let Some(Err(e)) = self.wts.as_deref().map(Worktrees::flush_all) {
                return reply.error(errno(e));
            }
        }
        match self.view(ino.0) {
            Ok((sh, _)) => reply_empty(sh.sync_for(sh.tgid(req.pid())), reply),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        cpu::on_request(req.pid());
        if status::is_status_name(parent.0, name.as_bytes()) {
            return reply.error(status_fs::refuse("create", name.as_bytes()));
        }
        if let Some(p) = self.pass_child(parent, name) {
            let r = p.create(parent.0, name.as_bytes(), mode, umask, flags, |f| {
                reply.open_backing(f)
            });
            return match r {
                Ok((a, Opened::Backed { fh, backing })) => reply.created_passthrough(
                    &PASS_TTL,
                    &a,
                    Generation(0),
                    FileHandle(fh),
                    PASS_OPEN_FLAGS,
                    &backing,
                ),
                Ok((a, Opened::Plain { fh, .. })) => reply.created(
                    &PASS_TTL,
                    &a,
                    Generation(0),
                    FileHandle(fh),
                    PASS_OPEN_FLAGS,
                ),
                Err(e) => reply.error(errno(e)),
            };
        }
        let (sh, m) = match self.view_child(parent.0, true) {
            Ok(v) => v,
            Err(e) => return reply.error(e),
        };
        if let Err(e) = sh.check_creatable(m.inn(parent.0), name.as_bytes()) {
            return reply.error(errno(e));
        }
        match sh.create(m.inn(parent.0), name.as_bytes(), flags, req.pid()) {
            Ok((mut a, fh)) => {
                a.ino = INodeNo(m.out(a.ino.0));
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
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        cpu::on_request(req.pid());
        if let Some(p) = self.pass_ino(ino) {
            return match p.write(fh.0, offset, data) {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(errno(e)),
            };
        }
        let sh = match self.view(ino.0) {
            Ok((sh, _)) => sh,
            Err(e) => return reply.error(e),
        };
        match sh.write(fh.0, offset, data, flags.0, req.pid()) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
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
        cpu::on_request(req.pid());
        if ino::is_status(ino.0) {
            let name = if ino.0 == ino::STATUS_DIR {
                status::DIR_NAME
            } else {
                status::FILE_NAME
            };
            return reply.error(status_fs::refuse("setattr", name));
        }
        if let Some(p) = self.pass_ino(ino) {
            let r = p.setattr(ino.0, mode, uid, gid, size, atime, mtime, fh.map(|f| f.0));
            return match r {
                Ok(a) => reply.attr(&PASS_TTL, &a),
                Err(e) => reply.error(errno(e)),
            };
        }
        let (sh, m) = match self.view(ino.0) {
            Ok(v) => v,
            Err(e) => return reply.error(e),
        };
        // Modes and times are accepted and not stored (core.sharedRepository chmods).
        if let Some(size) = size {
            if let Err(e) = sh.truncate(m.inn(ino.0), fh.map(|f| f.0), size, req.pid()) {
                return reply.error(errno(e));
            }
        }
        match sh.getattr(m.inn(ino.0)) {
            Ok((mut a, cache)) => {
                a.ino = ino;
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
        cpu::on_request(req.pid());
        if status::is_status_name(parent.0, name.as_bytes()) {
            return reply.error(status_fs::refuse("unlink", name.as_bytes()));
        }
        if let Some(p) = self.pass_child(parent, name) {
            return reply_empty(p.unlink(parent.0, name.as_bytes()), reply);
        }
        match self.view_child(parent.0, false) {
            Ok((sh, m)) => reply_empty(
                sh.unlink(m.inn(parent.0), name.as_bytes(), req.pid()),
                reply,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        cpu::on_request(req.pid());
        if status::is_status_name(parent.0, name.as_bytes()) {
            return reply.error(status_fs::refuse("mkdir", name.as_bytes()));
        }
        if let Some(p) = self.pass_child(parent, name) {
            return pass_reply_entry(p.mkdir(parent.0, name.as_bytes(), mode, umask), reply);
        }
        let (sh, m) = match self.view_child(parent.0, true) {
            Ok(v) => v,
            Err(e) => return reply.error(e),
        };
        if let Err(e) = sh.check_creatable(m.inn(parent.0), name.as_bytes()) {
            return reply.error(errno(e));
        }
        match sh.mkdir(m.inn(parent.0), name.as_bytes()) {
            Ok(mut a) => {
                a.ino = INodeNo(m.out(a.ino.0));
                reply.entry_with_ttls(&DIR_ATTR_TTL, &ENTRY_TTL, &a, Generation(0))
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        cpu::on_request(req.pid());
        if status::is_status_name(parent.0, name.as_bytes()) {
            return reply.error(status_fs::refuse("rmdir", name.as_bytes()));
        }
        if let Some(p) = self.pass_child(parent, name) {
            return reply_empty(p.rmdir(parent.0, name.as_bytes()), reply);
        }
        match self.view_child(parent.0, false) {
            Ok((sh, m)) => reply_empty(sh.rmdir(m.inn(parent.0), name.as_bytes()), reply),
            Err(e) => reply.error(e),
        }
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
        cpu::on_request(req.pid());
        for (p, n) in [(parent, name), (newparent, newname)] {
            if status::is_status_name(p.0, n.as_bytes()) {
                return reply.error(status_fs::refuse("rename", n.as_bytes()));
            }
        }
        let from = self.pass_child(parent, name);
        let to = self.pass_child(newparent, newname);
        match (from, to) {
            (Some(p), Some(_)) => {
                return reply_empty(
                    p.rename(
                        parent.0,
                        name.as_bytes(),
                        newparent.0,
                        newname.as_bytes(),
                        flags.bits(),
                    ),
                    reply,
                );
            }
            (None, None) => {}
            _ => {
                crate::fs::record::log_error(
                    "rename",
                    name.as_bytes(),
                    &format!(
                        "to {}: across the boundary between refs and passed-through files",
                        String::from_utf8_lossy(newname.as_bytes())
                    ),
                );
                return reply.error(Errno::EXDEV);
            }
        }
        if !flags.is_empty() {
            return reply.error(Errno::EINVAL);
        }
        let (sh, m) = match self.view_child(parent.0, false) {
            Ok(v) => v,
            Err(e) => return reply.error(e),
        };
        match self.view_child(newparent.0, true) {
            Ok((_, m2)) if m2.same_view(&m) => {
                if let Err(e) = sh.check_creatable(m.inn(newparent.0), newname.as_bytes()) {
                    return reply.error(errno(e));
                }
            }
            Ok(_) => {
                crate::fs::record::log_error(
                    "rename",
                    name.as_bytes(),
                    &format!(
                        "to {}: across the ref views of two worktrees",
                        String::from_utf8_lossy(newname.as_bytes())
                    ),
                );
                return reply.error(Errno::EXDEV);
            }
            Err(e) => return reply.error(e),
        }
        reply_empty(
            sh.rename(
                m.inn(parent.0),
                name.as_bytes(),
                m.inn(newparent.0),
                newname.as_bytes(),
                req.pid(),
            ),
            reply,
        );
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        cpu::on_request(req.pid());
        if ino::is_status(ino.0) {
            return status_fs::opendir(ino.0, reply);
        }
        if let Some(p) = self.pass_ino(ino) {
            return match p.opendir(ino.0) {
                Ok(fh) => {
                    self.add_worktree_refs(p, ino.0, fh);
                    reply.opened(FileHandle(fh), FopenFlags::empty())
                }
                Err(e) => reply.error(errno(e)),
            };
        }
        let (sh, m) = match self.view(ino.0) {
            Ok(v) => v,
            Err(e) => return reply.error(e),
        };
        match sh.opendir(m.inn(ino.0)) {
            Ok(fh) => {
                if let Some(p) = self.pass.as_deref().filter(|_| ino.0 == ROOT) {
                    if let Err(e) = p.open_root(fh) {
                        sh.release(fh);
                        return reply.error(errno(e));
                    }
                }
                reply.opened(FileHandle(fh), FopenFlags::empty())
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        cpu::on_request(req.pid());
        if ino.0 == ino::STATUS_DIR {
            return status_fs::readdir(offset, reply);
        }
        if let Some(p) = self.pass_ino(ino) {
            let Some(entries) = p.dir_entries(fh.0) else {
                return reply.error(Errno::EBADF);
            };
            let parent = p.parent_of(ino.0);
            return pass_readdir(ino.0, parent, &entries, offset, reply);
        }
        if let Some(p) = self.pass.as_deref().filter(|_| ino.0 == ROOT) {
            // The root: the ref view's names, then the passed-through ones.
            let refs = view_entries(&self.shared, Map::MAIN, fh.0);
            let (Some(mut all), Some(rest)) = (refs, p.root_entries(fh.0)) else {
                return reply.error(Errno::EBADF);
            };
            all.extend(rest.iter().cloned());
            return pass_readdir(ROOT, ROOT, &all, offset, reply);
        }
        let (sh, m) = match self.view(ino.0) {
            Ok(v) => v,
            Err(e) => return reply.error(e),
        };
        let parent = m.out(sh.parent_of(m.inn(ino.0)));
        // The listing is taken out of the state; the reply is built without its lock.
        let listing = sh.with_handle(fh.0, |h| match h {
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
                            let cino = m.out(crate::fs::inode::ino_of(&child, kind));
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
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        if ino::is_status(ino.0) {
            return reply.ok();
        }
        if let Some(p) = self.pass_ino(ino) {
            p.releasedir(fh.0);
            return reply.ok();
        }
        if let Some(p) = self.pass.as_deref().filter(|_| ino.0 == ROOT) {
            p.release_root(fh.0);
        }
        if let Ok((sh, _)) = self.view(ino.0) {
            sh.release(fh.0);
        }
        reply.ok();
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        cpu::on_request(req.pid());
        match self.pass_ino(ino).map(|p| p.readlink(ino.0)) {
            Some(Ok(t)) => reply.data(&t),
            Some(Err(e)) => reply.error(errno(e)),
            None => reply.error(Errno::EINVAL),
        }
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        cpu::on_request(req.pid());
        if status::is_status_name(parent.0, link_name.as_bytes()) {
            return reply.error(status_fs::refuse("symlink", link_name.as_bytes()));
        }
        match self.pass_child(parent, link_name) {
            Some(p) => pass_reply_entry(
                p.symlink(
                    parent.0,
                    link_name.as_bytes(),
                    target.as_os_str().as_bytes(),
                ),
                reply,
            ),
            None => reply.error(Errno::EPERM),
        }
    }

    /// Hard links are refused (git then renames its temporary object files instead).
    fn link(
        &self,
        req: &Request,
        _ino: INodeNo,
        _newparent: INodeNo,
        _newname: &OsStr,
        reply: ReplyEntry,
    ) {
        cpu::on_request(req.pid());
        reply.error(Errno::EPERM);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        if let Some(Ok(s)) = self.pass.as_deref().map(Passthrough::statfs) {
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

/// Replies to a `readdir` from a listing: `.`, `..`, then `entries`, from `offset` on.
fn pass_readdir(
    ino: u64,
    parent: u64,
    entries: &[passthrough::DirEntry],
    offset: u64,
    mut reply: ReplyDirectory,
) {
    let mut i = offset;
    loop {
        let full = match i {
            0 => reply.add(INodeNo(ino), 1, FileType::Directory, "."),
            1 => reply.add(INodeNo(parent), 2, FileType::Directory, ".."),
            n => {
                let Some(e) = usize::try_from(n - 2).ok().and_then(|k| entries.get(k)) else {
                    break;
                };
                reply.add(INodeNo(e.ino), n + 1, e.kind, OsStr::from_bytes(&e.name))
            }
        };
        if full {
            break;
        }
        i += 1;
    }
    reply.ok();
}
