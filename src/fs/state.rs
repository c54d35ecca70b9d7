//! The mount's shared state: the reader source behind one mutex, the inode table, the
//! per-directory listing caches, the open handles and the write overlay. Request handlers
//! call into it; the watcher thread calls [`Shared::refresh`] and sends kernel
//! invalidations itself; the batcher thread (`batch.rs`) writes sealed batches through the
//! separate writer source.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fuser::FileAttr;
use lru::LruCache;

use crate::format::{HashKind, RefValue};
use crate::fs::attr::attr;
use crate::fs::attr::GitDirModes;
use crate::fs::budget::{
    resize_bounded, splice, HANDLES_MAX, HELD_BYTES_MAX, REF_FILE_MAX, SCRATCH_FILES_MAX,
    SCRATCH_FILE_MAX, STAGED_BYTES_MAX, VDIRS_MAX,
};
use crate::fs::error::FsError;
use crate::fs::error::Refusal;
use crate::fs::ino::ROOT;
use crate::fs::inode::{Inodes, OpenMode};
use crate::fs::procfs;
use crate::fs::queue::BatchQueue;
use crate::fs::record::{log_error, refuse, refuse_for};
use crate::fs::reserve::{self, Reserve};
use crate::fs::source::LogSettings;
use crate::fs::source::RefSource;
use crate::fs::view::{self, Kind, Listing, Scratch};
use crate::fs::write::{ref_name_of, Caller, WriteState};

/// How many directory listings are cached at most (each sorted once, dropped on reload).
const DIR_CACHE_DIRS: usize = 4096;
/// The cache holds at most this many entries in all (about 14 bytes each, 3.5 MB); the
/// least recently used listings go first. Open handles keep their own listing. A listing
/// is rebuilt by one pass over the directory's refs (a reseek past every subtree), so a
/// walk that lists each directory once gains nothing from more.
const DIR_CACHE_MAX_ENTRIES: usize = 1 << 18;

/// What an open-for-writing handle writes to.
#[derive(Debug, Clone)]
pub enum Target {
    /// A scratch file (content in the overlay's `files`).
    Scratch,
    /// A ref written in place (`echo <hex> > refs/heads/x`): committed at flush.
    Ref { name: Vec<u8>, placeholder: bool },
    /// A reflog opened for appending: every write is parsed into log records.
    Log { name: Vec<u8> },
}

/// An open file or directory.
pub enum Handle {
    /// A file opened for reading: its content as of `open`, so a reader never sees a torn
    /// value however the ref changes meanwhile. `fp` is the content's fingerprint when
    /// the handle fills the page cache of a ref file.
    File { data: Vec<u8>, fp: Option<u64> },
    /// An open directory: the listing as of `opendir`.
    Dir {
        path: Vec<u8>,
        entries: Arc<Listing>,
    },
    /// A file opened for writing. `failed`: an edit staged through this file could not
    /// be written; every later `flush` (close) and `fsync` of it reports EIO.
    Write {
        path: Vec<u8>,
        target: Target,
        data: Vec<u8>,
        dirty: bool,
        failed: bool,
    },
}

impl Handle {
    /// Bytes this handle holds (`budget.rs`).
    fn held(&self) -> usize {
        match self {
            Handle::File { data, .. } => data.capacity(),
            Handle::Dir { path, entries } => path.capacity() + entries.len() * 32,
            Handle::Write { path, data, .. } => path.capacity() + data.capacity(),
        }
    }
}

/// Everything behind the state mutex.
pub struct Inner {
    pub(crate) src: Box<dyn RefSource>,
    scratch: Scratch,
    pub(crate) inodes: Inodes,
    dirs: LruCache<Vec<u8>, Arc<Listing>>,
    /// Entries in `dirs`, for the budget.
    dirs_entries: usize,
    /// The generation the caches were built for.
    generation: u64,
    handles: HashMap<u64, Handle>,
    /// Bytes the open handles hold ([`Handle::held`]).
    handle_bytes: usize,
    next_fh: u64,
    buf: Vec<u8>,
    /// Bumped whenever what the mount shows may have changed: the mtime of directories
    /// and of files without a time of their own (see [`Inner::mtime_of`]).
    pub(crate) changed_at: SystemTime,
    /// The stack's highest update index when the watcher last looked for refs whose
    /// reflog (hence mtime) changed.
    log_index_seen: u64,
    /// Set by a reload that changed the view, taken by the watcher (kernel invalidation).
    needs_invalidation: bool,
    /// The write overlay (with the open batch; sealed ones are in [`Shared::queue`]).
    pub(crate) w: WriteState,
    /// Disk space held for the edits the overlay acknowledged (`reserve.rs`).
    pub(crate) reserve: Reserve,
    /// Why the last reload failed (a corrupt or missing table): requests fail with EIO
    /// until a reload succeeds again.
    broken: Option<String>,
    /// Names a request found resolved to an inode of a ref's old size: the watcher sends
    /// `inval_entry` for them.
    stale_names: Vec<(u64, Vec<u8>)>,
    /// Ref file inodes whose cached attributes (mtime) went stale with their content
    /// unchanged: the watcher sends an attributes-only `inval_inode` for them.
    stale_attrs: Vec<u64>,
}

/// Batching settings.
#[derive(Clone, Copy, Debug)]
pub struct BatchSettings {
    pub window: Duration,
    pub max: usize,
}

/// State shared by the request handlers and the helper threads.
pub struct Shared {
    inner: Mutex<Inner>,
    /// The batch queue (its own lock; see `batch.rs`), shared with the overlay, which
    /// seals batches into it.
    pub(crate) queue: Arc<BatchQueue>,
    pub(crate) batch: BatchSettings,
    read_only: bool,
    /// Thread id → thread group id, cached for a second (see [`Shared::tgid`]).
    tgids: Mutex<HashMap<u32, (u32, Instant)>>,
    uid: u32,
    gid: u32,
    /// GITDIR's mode and owner, which every node shows (unset: `0755`/`0644` and the
    /// mounting user's).
    gitdir_modes: OnceLock<Arc<GitDirModes>>,
    stopping: AtomicBool,
    /// Bytes staged and not yet written ([`Reserve::staged`]): staging waits while they
    /// are over [`STAGED_BYTES_MAX`].
    staged: Arc<std::sync::atomic::AtomicU64>,
    /// An eventfd that wakes the watcher when a request handler found a stale kernel
    /// entry (`-1` if none could be made: the watcher then finds it at its next tick).
    wake_fd: libc::c_int,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if self.wake_fd >= 0 {
            // SAFETY: closing the descriptor we own, once.
            unsafe {
                libc::close(self.wake_fd);
            }
        }
    }
}

/// An `EFBIG` from [`splice`] or [`resize_bounded`] as a recorded refusal (other errnos
/// pass through).
fn too_big(op: &str, path: &[u8], e: FsError, limit: usize) -> FsError {
    if e.errno() != libc::EFBIG {
        return e;
    }
    refuse_for(
        op,
        path,
        libc::EFBIG,
        format!(
            "a file here holds at most {limit} bytes, and all lock and scratch files \
                 together {HELD_BYTES_MAX}"
        ),
    )
}

fn is_scratch_kind(k: Kind) -> bool {
    k == Kind::Scratch
}

impl Shared {
    /// Wraps the reader source. A writable mount's writer source (another stack object
    /// on the same stack) goes to the batcher thread (`batch::spawn`).
    pub fn new(
        src: Box<dyn RefSource>,
        read_only: bool,
        log: LogSettings,
        batch: BatchSettings,
    ) -> Arc<Shared> {
        // SAFETY: getuid/getgid cannot fail and have no preconditions.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let generation = src.generation();
        let hash: HashKind = src.hash_kind();
        let log_index_seen = src.max_update_index();
        let w = WriteState::new(hash, log);
        let queue = w.queue().clone();
        let reserve = Reserve::none();
        let staged = reserve.staged();
        Arc::new(Shared {
            inner: Mutex::new(Inner {
                src,
                scratch: Scratch::default(),
                inodes: Inodes::new(),
                dirs: LruCache::new(NonZeroUsize::new(DIR_CACHE_DIRS).unwrap_or(NonZeroUsize::MIN)),
                dirs_entries: 0,
                generation,
                handles: HashMap::new(),
                handle_bytes: 0,
                next_fh: 1,
                buf: Vec::new(),
                changed_at: SystemTime::now(),
                log_index_seen,
                needs_invalidation: false,
                w,
                reserve,
                broken: None,
                stale_names: Vec::new(),
                stale_attrs: Vec::new(),
            }),
            queue,
            read_only,
            tgids: Mutex::new(HashMap::new()),
            batch,
            uid,
            gid,
            gitdir_modes: OnceLock::new(),
            stopping: AtomicBool::new(false),
            staged,
            // SAFETY: a plain syscall; the descriptor is owned by `Shared`.
            wake_fd: unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) },
        })
    }

    /// Locks the state (a poisoned lock is taken over: every mutation is one step).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the mount is shutting down.
    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Marks the mount as shutting down (helper threads exit once drained).
    pub fn shutdown(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.queue.kick();
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    /// The owner (uid, gid) of every file of the mount.
    pub(crate) fn owner(&self) -> (u32, u32) {
        (self.uid, self.gid)
    }

    /// The thread group (process) of the thread `pid` that sent a request: FUSE
    /// requests carry the calling thread's id. Cached for a second per thread id.
    pub(crate) fn tgid(&self, pid: u32) -> u32 {
        if pid == 0 {
            return 0;
        }
        let mut cache = self.tgids.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(&(tgid, at)) = cache.get(&pid) {
            if at.elapsed() < Duration::from_secs(1) {
                return tgid;
            }
        }
        let tgid = procfs::tgid(pid).unwrap_or(pid);
        if cache.len() >= 1024 {
            cache.retain(|_, (_, at)| at.elapsed() < Duration::from_secs(1));
        }
        cache.insert(pid, (tgid, Instant::now()));
        tgid
    }

    /// Reloads the source if the stack changed; drops caches when it did.
    pub fn refresh(&self) -> Result<Option<u64>, FsError> {
        self.lock().refresh()
    }

    /// After the mount's own batch: directories the kernel holds on the paths of the
    /// written refs (and their reflogs) that no longer exist or are no longer
    /// directories (a deleted ref takes its emptied parents with it) are queued for
    /// `inval_entry` — the kernel saw the unlink but not that. Costs a few seeks per
    /// edit, not a pass over every known inode.
    pub(crate) fn queue_changed_dirs(&self, names: &[&[u8]]) {
        let mut g = self.lock();
        let mut path = Vec::new();
        let mut queued = false;
        for name in names {
            for base in [&b""[..], &b"logs/"[..]] {
                path.clear();
                path.extend_from_slice(base);
                path.extend_from_slice(name);
                let mut end = path.len();
                while let Some(slash) = path
                    .get(..end)
                    .and_then(|p| p.iter().rposition(|&b| b == b'/'))
                {
                    end = slash;
                    let Some(dir) = path.get(..end) else { break };
                    if dir == b"refs" || dir == b"logs" || dir.is_empty() {
                        break;
                    }
                    let Some((_, parent)) = g.inodes.known_dir(dir) else {
                        continue;
                    };
                    let dir = dir.to_vec();
                    if g.classify(&dir).ok().flatten() == Some(Kind::Dir) {
                        // Still a directory: so are its parents.
                        break;
                    }
                    let name = dir
                        .rsplit(|&b| b == b'/')
                        .next()
                        .unwrap_or_default()
                        .to_vec();
                    if !g
                        .stale_names
                        .iter()
                        .any(|(q, n)| *q == parent && *n == name)
                    {
                        g.stale_names.push((parent, name));
                        queued = true;
                    }
                }
            }
        }
        drop(g);
        if queued {
            self.wake_watcher();
        }
    }

    /// Ref edits accepted and not yet in a committed table (refs with a pending value or
    /// reflog), and the age of the open batch (`None` when none is open).
    pub(crate) fn pending_status(&self) -> (u64, Option<Duration>) {
        let g = self.lock();
        let w = &g.w;
        let logs_only = w
            .pending_logs
            .keys()
            .filter(|k| !w.pending.contains_key(*k))
            .count();
        let n = (w.pending.len() + logs_only) as u64;
        let age = if w.open.is_empty() {
            None
        } else {
            self.queue.window_age(w.open.seq)
        };
        (n, age)
    }

    /// Whether a reload changed the view since the last call (for the watcher).
    pub fn take_changed(&self) -> bool {
        std::mem::take(&mut self.lock().needs_invalidation)
    }

    /// Every node shows `modes` (GITDIR's mode and owner) from now on; set once, before
    /// mounting.
    pub fn set_gitdir_modes(&self, modes: Arc<GitDirModes>) {
        let _ = self.gitdir_modes.set(modes);
    }

    fn moded(&self, mut a: FileAttr) -> FileAttr {
        if let Some(m) = self.gitdir_modes.get() {
            m.apply(&mut a);
        }
        a
    }

    fn attr_of(&self, g: &Inner, ino: u64, kind: Kind, size: u64) -> FileAttr {
        self.moded(attr(ino, kind, size, g.changed_at, self.uid, self.gid))
    }

    /// [`Shared::attr_of`] with the file's own time (see [`Inner::mtime_of`]).
    fn attr_timed(&self, g: &mut Inner, ino: u64, path: &[u8], kind: Kind, size: u64) -> FileAttr {
        let mtime = g.mtime_of(path, kind);
        self.moded(attr(ino, kind, size, mtime, self.uid, self.gid))
    }

    /// After the mount's own batch: the kernel may hold the attributes of the written
    /// refs for 10 s (a symref such as `HEAD` keeps its content while its reflog, hence
    /// its mtime, moves): the known ref file inodes of these names are queued for an
    /// attributes-only `inval_inode` (it takes no inode or page lock, so it cannot wait
    /// for a client request in flight). Reflogs have attributes TTL 0 anyway.
    pub(crate) fn queue_changed_times(&self, names: &[&[u8]]) {
        let mut g = self.lock();
        let mut buf = Vec::new();
        let mut queued = false;
        for name in names {
            if g.render(name, Kind::Ref, &mut buf).is_err() {
                continue;
            }
            let ino = crate::fs::inode::ino_of_sized(name, Kind::Ref, Some(buf.len() as u64));
            if g.inodes.kernel_view(ino).is_some()
                && !g.stale_attrs.contains(&ino)
                && g.stale_attrs.len() < 4096
            {
                g.stale_attrs.push(ino);
                queued = true;
            }
        }
        drop(g);
        if queued {
            self.wake_watcher();
        }
    }

    /// Looks up `parent/name`: its attributes, kind and whether they may be cached with a
    /// positive TTL (see [`Inner::cacheable`]).
    pub(crate) fn lookup(
        &self,
        parent: u64,
        name: &[u8],
    ) -> Result<(FileAttr, Kind, bool), FsError> {
        let mut g = self.lock();
        g.fresh()?;
        // A name that can be no path component simply does not exist (ENOENT, not EINVAL).
        let path = g.child_path(parent, name).map_err(|e| {
            if e.errno() == libc::EINVAL {
                FsError::ENOENT
            } else {
                e
            }
        })?;
        let kind = g.classify(&path)?.ok_or(FsError::ENOENT)?;
        let size = g.size_of(&path, kind)?;
        // A ref file small enough for one page gets an inode of its own size.
        let fixed = (kind == Kind::Ref && size <= PAGE_CACHED_MAX as u64).then_some(size);
        let ino = g.inodes.remember(parent, name, &path, kind, fixed);
        if g.inodes.over_cap() {
            // The watcher asks the kernel to drop the oldest names (see `inode.rs`).
            self.wake_watcher();
        }
        Ok((
            self.attr_timed(&mut g, ino, &path, kind, size),
            kind,
            fixed.is_some(),
        ))
    }

    pub(crate) fn forget(&self, ino: u64, n: u64) {
        self.lock().inodes.forget(ino, n);
    }

    /// Up to `max` of the oldest known names for `inval_entry` while the inode table is
    /// above its cap (see [`crate::fs::inode::INODE_CAP`]).
    pub fn evictable(&self, max: usize) -> Vec<(u64, Box<[u8]>)> {
        self.lock().inodes.evictable_over_cap(max)
    }

    /// The inode table for `reftablefs status`: (known names, of them being dropped, cap).
    pub(crate) fn inode_status(&self) -> (usize, usize, usize) {
        let g = self.lock();
        (g.inodes.len(), g.inodes.dropping(), g.inodes.cap())
    }

    /// Holds disk space on the file system of `dir` (the stack's `reftable/`) for every
    /// edit acknowledged and not yet written (`reserve.rs`); a read-only mount holds none.
    pub fn reserve_space_in(&self, dir: &std::path::Path) {
        if !self.read_only {
            self.lock().reserve = Reserve::open(dir).with_counter(self.staged.clone());
        }
    }

    /// Before a call that may stage an edit: while the edits staged and not yet written
    /// are over [`STAGED_BYTES_MAX`], waits for the batcher (as a write waits for
    /// writeback), holding no lock.
    fn wait_staging_room(&self) {
        while self.staged.load(Ordering::Relaxed) >= STAGED_BYTES_MAX && !self.stopping() {
            self.queue.request_flush();
            self.queue.wait_progress(Duration::from_millis(100));
        }
    }

    /// Sets the inode table's cap (`mount --inode-cap`).
    pub fn set_inode_cap(&self, cap: usize) {
        self.lock().inodes.set_cap(cap);
    }

    /// Attributes of `ino`, and whether they may be cached with a positive TTL.
    pub(crate) fn getattr(&self, ino: u64) -> Result<(FileAttr, bool), FsError> {
        let mut g = self.lock();
        g.fresh()?;
        let (path, kind) = g.path_of(ino)?;
        let size = g.size_of(&path, kind)?;
        match g.inodes.fixed_size(ino) {
            // The inode keeps its size: page-cache readers opened before a change read
            // their snapshot of exactly that size (never capped, never padded). The name
            // has moved on to another inode (the watcher sends `inval_entry`; opens of
            // this one are direct-IO meanwhile), so this is not cached.
            Some(fixed) if fixed != size => {
                self.name_is_stale(&mut g, ino);
                Ok((self.attr_timed(&mut g, ino, &path, kind, fixed), false))
            }
            Some(_) => Ok((self.attr_timed(&mut g, ino, &path, kind, size), true)),
            None => Ok((self.attr_timed(&mut g, ino, &path, kind, size), false)),
        }
    }

    pub(crate) fn parent_of(&self, ino: u64) -> u64 {
        self.lock()
            .inodes
            .parent_and_name(ino)
            .map_or(ROOT, |(p, _)| p)
    }

    /// Opens a file. Returns the handle and how the kernel may cache its content: ref
    /// files of a stable size through the page cache (kept while their content is what
    /// the kernel's pages hold), `packed-refs` through the page cache refilled at every
    /// open (git may mmap it), everything else direct-IO.
    pub(crate) fn open(&self, ino: u64, flags: i32) -> Result<(u64, OpenMode), FsError> {
        let writing = flags & libc::O_ACCMODE != libc::O_RDONLY;
        if writing && self.read_only() {
            return Err(FsError::EROFS);
        }
        let mut g = self.lock();
        g.fresh()?;
        let (path, kind) = g.path_of(ino)?;
        if kind == Kind::Dir {
            return Err(FsError::EISDIR);
        }
        if !writing {
            let mut data = Vec::new();
            g.render(&path, kind, &mut data)?;
            let (mode, fp) = match kind {
                Kind::Ref if data.len() <= PAGE_CACHED_MAX => {
                    let fp = fingerprint(&data);
                    let size = data.len() as u64;
                    let mode = g.inodes.open_for_read(ino, size, fp);
                    if g.inodes.fixed_size(ino).is_some_and(|f| f != size) {
                        self.name_is_stale(&mut g, ino);
                    }
                    (mode, (mode != OpenMode::Direct).then_some(fp))
                }
                Kind::PackedRefs => (OpenMode::Refill, None),
                _ => (OpenMode::Direct, None),
            };
            let fh = g.add_handle(&path, Handle::File { data, fp })?;
            return Ok((fh, mode));
        }
        g.still(&path, kind)?;
        let fh = g.open_for_write(&path, kind, flags)?;
        // Writes through the kernel move its idea of the size.
        g.inodes.suspect(ino);
        Ok((fh, OpenMode::Direct))
    }

    /// `create`: a new file (`x.lock` with O_EXCL is atomic: EEXIST when it exists, also
    /// between threads, since the check and the insert happen under one lock).
    pub(crate) fn create(
        &self,
        parent: u64,
        name: &[u8],
        flags: i32,
        pid: u32,
    ) -> Result<(FileAttr, u64), FsError> {
        if self.read_only() {
            return Err(FsError::EROFS);
        }
        self.wait_staging_room();
        let mut g = self.lock();
        g.fresh()?;
        let path = g.child_path(parent, name)?;
        if g.handles.len() >= HANDLES_MAX {
            return Err(refuse_for(
                "create",
                &path,
                libc::ENFILE,
                format!("{HANDLES_MAX} files are open on the mount already"),
            ));
        }
        if let Some(kind) = g.classify(&path)? {
            if flags & libc::O_EXCL != 0 {
                return Err(FsError::EEXIST);
            }
            if kind == Kind::Dir {
                return Err(FsError::EISDIR);
            }
            let fh = g.open_for_write(&path, kind, flags)?;
            let size = g.size_of(&path, kind)?;
            let ino = g.inodes.remember(parent, name, &path, kind, None);
            return Ok((self.attr_of(&g, ino, kind, size), fh));
        }
        // A new file. Reflogs and refs written in place get a handle that commits on
        // flush; anything else (locks, packed-refs.new, temporary names, files of the
        // git directory that are not refs such as COMMIT_EDITMSG) is scratch. Below
        // `refs/` only a valid ref name or its lock can ever be a file.
        if let view::Area::Refs(n) = view::area(&path) {
            let base = n.strip_suffix(b".lock").unwrap_or(n);
            if n.starts_with(b"refs/") && !crate::fs::write::valid_ref_name(base) {
                return Err(refuse(
                    "create",
                    &path,
                    Refusal {
                        errno: libc::EINVAL,
                        reason: "not a valid ref name (git check-ref-format), nor its lock".into(),
                    },
                ));
            }
        }
        let target = match view::area(&path) {
            view::Area::Logs(Some(n)) if !is_lockish(n) && crate::fs::write::valid_ref_name(n) => {
                g.promise("create", &path, reserve::edit_bytes(path.len(), 0))?;
                Target::Log { name: n.to_vec() }
            }
            view::Area::Refs(n)
                if !is_lockish(n)
                    && ref_name_of(n).is_some()
                    && crate::fs::write::valid_ref_name(n) =>
            {
                Target::Ref {
                    name: n.to_vec(),
                    placeholder: true,
                }
            }
            view::Area::PackedRefs => {
                return Err(refuse_for(
                    "create",
                    &path,
                    libc::EPERM,
                    "packed-refs is replaced by renaming packed-refs.lock onto it, as git does",
                ))
            }
            _ => Target::Scratch,
        };
        let kind = match target {
            Target::Log { .. } => Kind::Log,
            _ => {
                if g.w.files.len() >= SCRATCH_FILES_MAX {
                    return Err(refuse(
                        "create",
                        &path,
                        Refusal {
                            errno: libc::ENOSPC,
                            reason: format!(
                                "{SCRATCH_FILES_MAX} lock and scratch files exist already"
                            ),
                        },
                    ));
                }
                if matches!(target, Target::Scratch) {
                    let Inner { w, src, .. } = &mut *g;
                    w.note_lock(src.as_mut(), &path)
                        .map_err(|r| refuse("create", &path, r))?;
                }
                g.w.files.insert(path.clone(), Vec::new());
                Kind::Scratch
            }
        };
        let new_log = match &target {
            Target::Log { name } => Some(name.clone()),
            _ => None,
        };
        let fh = g.add_handle(
            &path,
            Handle::Write {
                path: path.clone(),
                target,
                data: Vec::new(),
                dirty: false,
                failed: false,
            },
        )?;
        if let Some(n) = new_log {
            // The reflog exists from now on (an edit: git's existence marker), staged for
            // this process through this file.
            let who = Caller::new(self.tgid(pid), vec![fh]);
            g.w.note_new_log(&who, &n);
        }
        let ino = g.inodes.remember(parent, name, &path, kind, None);
        Ok((self.attr_of(&g, ino, kind, 0), fh))
    }

    pub(crate) fn write(
        &self,
        fh: u64,
        offset: u64,
        data: &[u8],
        flags: i32,
        pid: u32,
    ) -> Result<u32, FsError> {
        self.wait_staging_room();
        let actor = self.tgid(pid);
        let mut g = self.lock();
        let g = &mut *g;
        let total = g.w.files.bytes() + g.handle_bytes;
        let Some(Handle::Write {
            path,
            target,
            data: buf,
            dirty,
            ..
        }) = g.handles.get_mut(&fh)
        else {
            return Err(FsError::EBADF);
        };
        let n = u32::try_from(data.len()).map_err(|_| FsError::EFBIG)?;
        let append = flags & libc::O_APPEND != 0;
        match target {
            Target::Log { name } => {
                let name = name.clone();
                let path = path.clone();
                let who = Caller::new(actor, vec![fh]);
                g.promise("append", &path, reserve::edit_bytes(name.len(), data.len()))?;
                g.w.append_log(&who, &name, data)
                    .map_err(|r| refuse("append", &path, r))?;
                g.after_staging(self.batch.max);
                return Ok(n);
            }
            Target::Scratch => {
                let hash = g.w.hash;
                let limit = scratch_limit(path);
                let r = g.w.files.update(path, |content| {
                    let old_len = content.len();
                    let others = total - content.capacity();
                    let r = splice(content, offset, data, append, limit, others)
                        .map_err(|e| too_big("write", path, e, limit))
                        .and_then(|()| {
                            check_ref_prefix(path, content, hash)
                                .map_err(|why| refuse_for("write", path, libc::EINVAL, why))
                        });
                    if r.is_err() {
                        content.truncate(old_len);
                    }
                    r
                });
                r.ok_or(FsError::ENOENT)??;
            }
            Target::Ref { .. } => {
                let before = buf.capacity();
                let mut next = buf.clone();
                splice(
                    &mut next,
                    offset,
                    data,
                    append,
                    REF_FILE_MAX,
                    total - before,
                )
                .map_err(|e| too_big("write", path, e, REF_FILE_MAX))?;
                check_ref_prefix(path, &next, g.w.hash).map_err(|why| {
                    refuse(
                        "write",
                        path,
                        Refusal {
                            errno: libc::EINVAL,
                            reason: why,
                        },
                    )
                })?;
                *buf = next;
                *dirty = true;
                g.handle_bytes = g.handle_bytes - before + buf.capacity();
            }
        }
        Ok(n)
    }

    /// `flush` (every close): a ref written in place is committed here, so that close()
    /// reports a refusal; EIO if an edit staged through this file could not be written.
    pub(crate) fn flush(&self, fh: u64, pid: u32) -> Result<(), FsError> {
        self.wait_staging_room();
        let actor = self.tgid(pid);
        let mut g = self.lock();
        // Every close of the handle reports it (a forked child's close of an inherited
        // descriptor sends a flush too).
        if let Some(Handle::Write { failed: true, .. }) = g.handles.get(&fh) {
            return Err(FsError::EIO);
        }
        g.commit_direct(fh, &Caller::new(actor, vec![fh]), self.batch.max)
    }

    /// `fsync` of a file: commits a ref written in place, then waits until everything
    /// staged so far is written. EIO if an edit the calling process staged could not be
    /// written (reported once), or if this file's handle saw such a failure.
    pub(crate) fn fsync(&self, fh: u64, pid: u32) -> Result<(), FsError> {
        let actor = self.tgid(pid);
        let handle_failed = {
            let mut g = self.lock();
            g.commit_direct(fh, &Caller::new(actor, vec![fh]), self.batch.max)?;
            matches!(g.handles.get(&fh), Some(Handle::Write { failed: true, .. }))
        };
        let own = self.sync_for(actor);
        if handle_failed {
            return Err(FsError::EIO);
        }
        own
    }

    /// Waits until everything staged so far is written (group commit), then reports the
    /// failures of process `actor`'s edits (EIO, once).
    pub(crate) fn sync_for(&self, actor: u32) -> Result<(), FsError> {
        self.wait_written()?;
        match self.queue.take_failures(actor) {
            Some(f) if f.start == procfs::start_time(actor) => {
                let names: Vec<_> = f.names.iter().map(|n| String::from_utf8_lossy(n)).collect();
                eprintln!(
                    "reftablefs: fsync by process {actor}: EIO, its updates of {} were not \
                     written (logged above)",
                    names.join(", ")
                );
                Err(FsError::EIO)
            }
            _ => Ok(()),
        }
    }

    pub(crate) fn truncate(
        &self,
        ino: u64,
        fh: Option<u64>,
        size: u64,
        pid: u32,
    ) -> Result<(), FsError> {
        if self.read_only() {
            return Err(FsError::EROFS);
        }
        let actor = self.tgid(pid);
        let mut g = self.lock();
        let g = &mut *g;
        g.inodes.suspect(ino);
        let total = g.w.files.bytes() + g.handle_bytes;
        if let Some(Handle::Write {
            path,
            target,
            data,
            dirty,
            ..
        }) = fh.and_then(|f| g.handles.get_mut(&f))
        {
            match target {
                Target::Scratch => {
                    let limit = scratch_limit(path);
                    g.w.files
                        .update(path, |c| {
                            let others = total - c.capacity();
                            resize_bounded(c, size, limit, others)
                        })
                        .unwrap_or(Ok(()))
                        .map_err(|e| too_big("truncate", path, e, limit))?;
                }
                Target::Ref { .. } => {
                    let before = data.capacity();
                    resize_bounded(data, size, REF_FILE_MAX, total - before)
                        .map_err(|e| too_big("truncate", path, e, REF_FILE_MAX))?;
                    *dirty = true;
                    g.handle_bytes = g.handle_bytes - before + data.capacity();
                }
                // A reflog emptied in place (dulwich rewrites one through a read-write
                // handle: truncate, then write the lines it keeps): the reflog stays,
                // empty, and what is written next is appended.
                Target::Log { name } if size == 0 => {
                    let name = name.clone();
                    let path = path.clone();
                    let who = Caller::new(actor, fh.into_iter().collect());
                    g.promise("truncate", &path, reserve::edit_bytes(name.len(), 0))?;
                    g.w.replace_log(&who, &name, Vec::new());
                    g.after_staging(self.batch.max);
                }
                Target::Log { .. } => {
                    return Err(refuse_for(
                        "truncate",
                        path,
                        libc::EINVAL,
                        "a reflog is emptied (truncated to 0) or appended to, never cut",
                    ))
                }
            }
            return Ok(());
        }
        let (path, kind) = g.path_of(ino)?;
        match kind {
            Kind::Scratch => {
                let limit = scratch_limit(&path);
                g.w.files
                    .update(&path, |c| {
                        let others = total - c.capacity();
                        resize_bounded(c, size, limit, others)
                    })
                    .unwrap_or(Ok(()))
                    .map_err(|e| too_big("truncate", &path, e, limit))
            }
            Kind::Dir => Err(FsError::EISDIR),
            _ => Err(refuse_for(
                "truncate",
                &path,
                libc::EPERM,
                "truncating a ref file without writing it would leave an invalid ref",
            )),
        }
    }

    pub(crate) fn opendir(&self, ino: u64) -> Result<u64, FsError> {
        let mut g = self.lock();
        g.fresh()?;
        let (path, kind) = g.path_of(ino)?;
        if kind != Kind::Dir {
            return Err(FsError::ENOTDIR);
        }
        let entries = g.listing(&path)?;
        g.add_handle(&path.clone(), Handle::Dir { path, entries })
    }

    /// `ino` is a ref file's inode of an old size that the kernel still reaches by name:
    /// queue its name for `inval_entry` and wake the watcher (the sure way back to the
    /// right inode, whatever race left the old entry in place).
    fn name_is_stale(&self, g: &mut Inner, ino: u64) {
        let Some((p, name)) = g.inodes.parent_and_name(ino) else {
            return;
        };
        if g.stale_names.len() >= 4096
            || g.stale_names
                .iter()
                .any(|(q, n)| *q == p && n.as_slice() == name)
        {
            return;
        }
        let entry = (p, name.to_vec());
        g.stale_names.push(entry);
        self.wake_watcher();
    }

    /// Wakes the watcher thread.
    pub(crate) fn wake_watcher(&self) {
        if self.wake_fd >= 0 {
            let one: u64 = 1;
            // SAFETY: writing 8 bytes from a local to our eventfd.
            unsafe {
                libc::write(self.wake_fd, (&one as *const u64).cast(), 8);
            }
        }
    }

    /// The watcher's wake-up descriptor (`-1` if none).
    pub(crate) fn wake_fd(&self) -> libc::c_int {
        self.wake_fd
    }

    /// The bytes a read of an open file returns. A direct-IO read handle answers from its
    /// content as of `open` (a reader never sees a torn value however the ref changes
    /// meanwhile); a page-cache read handle fills the inode's one page, which every later
    /// open of the inode may keep, so it answers with the ref's content now (one read
    /// fills the whole file: never torn), or with its own snapshot when the ref's size
    /// has moved on (the page then belongs to an inode no open keeps any more). `direct`:
    /// the read bypasses the page cache (`O_DIRECT`), so it fills no page. A read-write
    /// handle (a reflog opened `rb+`) answers from the file as it is now through the
    /// overlay.
    pub(crate) fn read_file(
        &self,
        ino: u64,
        fh: u64,
        offset: u64,
        size: u32,
        direct: bool,
    ) -> Result<Vec<u8>, FsError> {
        let mut g = self.lock();
        let slice = |data: &[u8]| -> Vec<u8> {
            let start = usize::try_from(offset)
                .unwrap_or(usize::MAX)
                .min(data.len());
            let end = start.saturating_add(size as usize).min(data.len());
            data.get(start..end).unwrap_or_default().to_vec()
        };
        match g.handles.get(&fh) {
            Some(Handle::File { fp: None, data }) => Ok(slice(data)),
            Some(Handle::File { fp: Some(fp), data }) => {
                let (own_fp, own) = (*fp, slice(data));
                let len = data.len();
                let mut now = Vec::new();
                let current = match g.path_of(ino) {
                    Ok((path, Kind::Ref)) => g.render(&path, Kind::Ref, &mut now).is_ok(),
                    _ => false,
                };
                let (out, filled) = if current && now.len() == len {
                    (slice(&now), fingerprint(&now))
                } else {
                    (own, own_fp)
                };
                if !direct {
                    g.inodes.pages_filled(ino, filled);
                }
                Ok(out)
            }
            Some(Handle::Write {
                target: Target::Ref { .. },
                data,
                ..
            }) => Ok(slice(data)),
            Some(Handle::Write {
                path,
                target: Target::Scratch,
                ..
            }) => Ok(slice(g.w.files.get(path).ok_or(FsError::ENOENT)?)),
            Some(Handle::Write { path, .. }) => {
                let path = path.clone();
                let mut buf = Vec::new();
                g.render(&path, Kind::Log, &mut buf)?;
                Ok(slice(&buf))
            }
            _ => Err(FsError::EBADF),
        }
    }

    pub(crate) fn with_handle<R>(&self, fh: u64, f: impl FnOnce(Option<&Handle>) -> R) -> R {
        let g = self.lock();
        f(g.handles.get(&fh))
    }

    pub(crate) fn release(&self, fh: u64) {
        let mut g = self.lock();
        if let Some(Handle::Write {
            path,
            target: Target::Ref {
                placeholder: true, ..
            },
            ..
        }) = g.remove_handle(fh)
        {
            // A ref created in place but never validly written (e.g. `touch`) vanishes.
            g.w.files.remove(&path);
        }
    }

    pub(crate) fn unlink(&self, parent: u64, name: &[u8], pid: u32) -> Result<(), FsError> {
        if self.read_only() {
            return Err(FsError::EROFS);
        }
        self.wait_staging_room();
        let actor = self.tgid(pid);
        let mut g = self.lock();
        g.fresh()?;
        let path = g.child_path(parent, name)?;
        let kind = g.classify(&path)?.ok_or(FsError::ENOENT)?;
        if path == b"HEAD" && kind == Kind::Ref {
            return Err(refuse(
                "unlink",
                &path,
                Refusal {
                    errno: libc::EPERM,
                    reason: "HEAD is never deleted (git would no longer see a repository)".into(),
                },
            ));
        }
        if matches!(kind, Kind::Ref | Kind::Log) {
            g.promise("unlink", &path, reserve::edit_bytes(path.len(), 0))?;
        }
        let who = Caller::new(actor, Vec::new());
        let Inner { w, src, .. } = &mut *g;
        let r = match kind {
            Kind::Scratch => {
                w.files.remove(&path);
                w.locks.remove(&path);
                Ok(())
            }
            Kind::Ref => w.unlink_ref(src.as_mut(), &who, &path),
            Kind::Log => {
                let n = path.get(5..).unwrap_or_default().to_vec();
                w.delete_log(&who, &n);
                Ok(())
            }
            Kind::Dir => return Err(FsError::EISDIR),
            Kind::PackedRefs => {
                return Err(refuse_for(
                    "unlink",
                    &path,
                    libc::EPERM,
                    "removing packed-refs would delete every packed ref; the mount keeps it",
                ))
            }
        };
        r.map_err(|r| refuse("unlink", &path, r))?;
        g.after_staging(self.batch.max);
        Ok(())
    }

    pub(crate) fn mkdir(&self, parent: u64, name: &[u8]) -> Result<FileAttr, FsError> {
        if self.read_only() {
            return Err(FsError::EROFS);
        }
        let mut g = self.lock();
        g.fresh()?;
        let path = g.child_path(parent, name)?;
        if g.classify(&path)?.is_some() {
            return Err(FsError::EEXIST);
        }
        if path.starts_with(b"refs/") {
            crate::refname::check_refname_format(
                &path,
                crate::refname::RefnameFlags {
                    allow_onelevel: true,
                    refspec_pattern: false,
                },
            )
            .map_err(|e| {
                refuse(
                    "mkdir",
                    &path,
                    Refusal {
                        errno: libc::EINVAL,
                        reason: e.to_string(),
                    },
                )
            })?;
        }
        if g.w.vdirs.len() >= VDIRS_MAX {
            return Err(refuse_for(
                "mkdir",
                &path,
                libc::ENOSPC,
                format!("{VDIRS_MAX} directories made by mkdir exist already"),
            ));
        }
        g.w.vdirs.insert(path.clone());
        let ino = g.inodes.remember(parent, name, &path, Kind::Dir, None);
        Ok(self.attr_of(&g, ino, Kind::Dir, 4096))
    }

    pub(crate) fn rmdir(&self, parent: u64, name: &[u8]) -> Result<(), FsError> {
        if self.read_only() {
            return Err(FsError::EROFS);
        }
        let mut g = self.lock();
        g.fresh()?;
        let path = g.child_path(parent, name)?;
        match g.classify(&path)? {
            None => return Err(FsError::ENOENT),
            Some(Kind::Dir) => {}
            Some(_) => return Err(FsError::ENOTDIR),
        }
        if path == b"refs" || path == b"logs" {
            return Err(FsError::EBUSY);
        }
        let listing = g.listing(&path)?;
        if !listing.is_empty() {
            return Err(FsError::ENOTEMPTY);
        }
        g.w.vdirs.remove(&path);
        Ok(())
    }

    /// `rename`: the commit point of the files protocol (`x.lock` → `x`, `packed-refs.new`
    /// → `packed-refs`, reflog rewrites and moves).
    pub(crate) fn rename(
        &self,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        pid: u32,
    ) -> Result<(), FsError> {
        if self.read_only() {
            return Err(FsError::EROFS);
        }
        self.wait_staging_room();
        let actor = self.tgid(pid);
        let mut g = self.lock();
        g.fresh()?;
        let from = g.child_path(parent, name)?;
        let to = g.child_path(newparent, newname)?;
        // Handles still open on the renamed file (a lock written and not yet closed).
        let open_on_from: Vec<u64> = g
            .handles
            .iter()
            .filter(|(_, h)| matches!(h, Handle::Write { path, .. } if *path == from))
            .map(|(fh, _)| *fh)
            .collect();
        let who = Caller::new(actor, open_on_from);
        let kind = g.classify(&from)?.ok_or(FsError::ENOENT)?;
        let to_kind = g.classify(&to)?;
        if to_kind == Some(Kind::Dir) && kind != Kind::Dir {
            return Err(FsError::EISDIR);
        }
        let content = match kind {
            Kind::Scratch | Kind::Log => g.size_of(&from, kind).unwrap_or(0) as usize,
            _ => 0,
        };
        g.promise(
            "rename",
            &from,
            reserve::edit_bytes(from.len() + to.len(), content),
        )?;
        let r = g.do_rename(&who, &from, kind, &to, to_kind);
        if let Err(e) = r {
            return Err(refuse("rename", &from, e));
        }
        // The kernel moved its dentry (and inode) to the new name: follow it.
        let new_kind = g.classify(&to).ok().flatten().unwrap_or(kind);
        g.inodes
            .moved(parent, name, &from, kind, newparent, newname, new_kind);
        g.after_staging(self.batch.max);
        Ok(())
    }

    /// Seals the open batch and waits until everything staged so far is written
    /// (group commit: every waiter shares the next batch), on the queue's lock, not the
    /// state lock. EIO if the batcher is gone with batches unwritten.
    fn wait_written(&self) -> Result<(), FsError> {
        let target = {
            let mut g = self.lock();
            let target = g.w.seal_all();
            self.queue.request_flush();
            target
        };
        self.queue.wait_written(target)
    }

    /// Writes everything staged (unmount): EIO if a batch written meanwhile failed in
    /// part or whole (each failure was logged).
    pub fn flush_all(&self) -> Result<(), FsError> {
        let first_unwritten = self.queue.durable_seq() + 1;
        self.wait_written()?;
        if self.queue.failed_since(first_unwritten) {
            Err(FsError::EIO)
        } else {
            Ok(())
        }
    }

    /// What the kernel holds that went stale since it was looked up or read: (parent
    /// inode, name) pairs of known names whose kind changed or that vanished (for
    /// `inval_entry`), and known ref files whose content differs from what the kernel was
    /// last given (for `inval_inode`: attributes and pages). Scans at most `limit` inodes.
    pub fn stale(&self, limit: usize) -> Stale {
        let mut g = self.lock();
        let known: Vec<(u64, Kind)> = g.inodes.known().take(limit).collect();
        let mut out = Stale::default();
        // Reflog entries newer than this moved their ref's mtime.
        let top = g.src.max_update_index();
        let log_since = std::mem::replace(&mut g.log_index_seen, top);
        self.take_stale_names(&mut g, &mut out);
        let mut path = Vec::new();
        let mut buf = Vec::new();
        for (ino, kind) in known {
            if g.inodes.path(ino, &mut path).is_none() {
                continue;
            }
            let now = g.classify(&path).ok().flatten();
            if now != Some(kind) {
                if let Some((p, name)) = g.inodes.parent_and_name(ino) {
                    out.entries.push((p, name.to_vec()));
                }
                continue;
            }
            if kind != Kind::Ref {
                continue;
            }
            let Some((Some(size), pages)) = g.inodes.kernel_view(ino) else {
                continue;
            };
            if g.render(&path, kind, &mut buf).is_err() {
                continue;
            }
            if size != buf.len() as u64 {
                // Another size is another inode: re-resolve the name.
                if let Some((p, name)) = g.inodes.parent_and_name(ino) {
                    out.entries.push((p, name.to_vec()));
                }
            } else if pages.is_none_or(|f| f == fingerprint(&buf)) {
                // The same content, maybe with a new time (a ref reset to its own
                // value, a symref whose target moved): then only the attributes go.
                if g.log_changed_since(&path, log_since) {
                    out.attrs.push(ino);
                }
            } else {
                g.inodes.invalidated(ino);
                out.inodes.push(ino);
            }
        }
        out
    }
}

impl Shared {
    fn take_stale_names(&self, g: &mut Inner, out: &mut Stale) {
        out.entries.append(&mut g.stale_names);
        out.attrs.append(&mut g.stale_attrs);
    }

    /// Names queued by request handlers (see [`Shared::stale`]), without a scan.
    pub fn stale_names(&self) -> Stale {
        let mut out = Stale::default();
        self.take_stale_names(&mut self.lock(), &mut out);
        out
    }
}

/// Kernel caches to invalidate (see [`Shared::stale`]).
#[derive(Debug, Default)]
pub struct Stale {
    /// (parent inode, name) for `inval_entry`.
    pub entries: Vec<(u64, Vec<u8>)>,
    /// Inodes for `inval_inode` (attributes and all pages).
    pub inodes: Vec<u64>,
    /// Inodes for an attributes-only `inval_inode` (a new mtime, the same content).
    pub attrs: Vec<u64>,
}

/// Attribute and entry TTL of ref files of a fixed size (see `inode.rs`).
pub const REF_ATTR_TTL: Duration = Duration::from_secs(10);

/// Ref files up to this size (one page: one read request fills it at once) go through
/// the page cache; longer ones (only a symref to a very long name) are direct-IO.
const PAGE_CACHED_MAX: usize = 4096;

/// A 64-bit FNV-1a fingerprint of a file's content.
fn fingerprint(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// `x.lock` / `x.new` names are never refs or reflogs themselves.
fn is_lockish(name: &[u8]) -> bool {
    name.ends_with(b".lock") || name.ends_with(b".new")
}

/// The size limit of scratch file `path`: a ref's lock is a ref file.
fn scratch_limit(path: &[u8]) -> usize {
    let base = path.strip_suffix(b".lock").unwrap_or(path);
    if crate::fs::write::valid_ref_name(base) {
        REF_FILE_MAX
    } else {
        SCRATCH_FILE_MAX
    }
}

/// Refuses content written into a ref file or a ref's lock that can no longer become a
/// valid ref value (shells ignore errors from `close`, so `write` must say it).
fn check_ref_prefix(path: &[u8], data: &[u8], hash: HashKind) -> Result<(), String> {
    let base = path.strip_suffix(b".lock").unwrap_or(path);
    if !crate::fs::write::valid_ref_name(base) {
        return Ok(());
    }
    crate::fs::write::ref_content_prefix_ok(data, hash)
}

impl Inner {
    /// An edit could not be written: the next `close` (and `fsync`) of every file still
    /// open on its ref, lock or reflog fails. (The processes that staged it are told by
    /// the batch queue.)
    pub(crate) fn mark_handles_failed(&mut self, edit: &crate::fs::source::BatchEdit) {
        for fh in &edit.handles {
            if let Some(Handle::Write { failed, .. }) = self.handles.get_mut(fh) {
                *failed = true;
            }
        }
    }

    pub(crate) fn refresh(&mut self) -> Result<Option<u64>, FsError> {
        if let Err(e) = self.src.reload() {
            let msg = e.to_string();
            if self.broken.as_deref() != Some(msg.as_str()) {
                log_error("reload", b"tables.list", &msg);
                self.broken = Some(msg);
            }
            return Err(FsError::EIO);
        }
        if self.broken.take().is_some() {
            eprintln!("reftablefs: reload tables.list: the stack is readable again");
            self.dirs.clear();
            self.dirs_entries = 0;
            self.needs_invalidation = true;
        }
        let gen = self.src.generation();
        if gen != self.generation {
            self.generation = gen;
            self.dirs.clear();
            self.dirs_entries = 0;
            self.changed_at = SystemTime::now();
            if self.src.last_change_external() {
                self.needs_invalidation = true;
                // Another writer: packed entries it contradicts would resurface on `rm`.
                // (The mount's own batches leave the packed layer as a files backend
                // leaves packed-refs: shadowed by loose values.)
                let Inner { w, src, .. } = self;
                w.revalidate_packed(src.as_mut());
            }
            return Ok(Some(gen));
        }
        Ok(None)
    }

    /// A file's mtime and ctime: for a ref, when it last changed — a pending reflog line
    /// first, else the time of the transaction that wrote its record, known from the
    /// lookup that just found it without a further seek (`ref_times.rs`; a symref such as
    /// `HEAD`, whose record rarely changes while its reflog moves, takes its newest reflog
    /// entry); for a reflog, its newest entry (one seek of the log index); for everything
    /// else (directories, `packed-refs`, lock files, refs whose time is unknown, a pending
    /// value without a line), when the view last changed.
    pub(crate) fn mtime_of(&mut self, path: &[u8], kind: Kind) -> SystemTime {
        let name = match kind {
            Kind::Ref => path,
            Kind::Log => path.strip_prefix(b"logs/").unwrap_or(path),
            _ => return self.changed_at,
        };
        let secs = match self.w.pending_logs.get(name) {
            Some(pl) if !pl.appended.is_empty() => pl.appended.last().map(|(_, l)| l.time),
            Some(pl) if pl.deleted => None,
            Some(pl) if pl.base.is_some() => pl.base.as_ref().and_then(|b| {
                b.iter()
                    .find(|l| !l.deleted && !crate::stack::is_existence_marker(l))
                    .map(|l| l.time)
            }),
            _ if kind == Kind::Ref && self.w.pending.contains_key(name) => None,
            _ if kind == Kind::Ref => self.src.ref_time(name).ok().flatten(),
            _ => self.src.newest_log(name).ok().flatten().map(|(_, t)| t),
        };
        secs.map_or(self.changed_at, |s| UNIX_EPOCH + Duration::from_secs(s))
    }

    /// Whether the ref at `path` has a reflog entry newer than update index `since`.
    fn log_changed_since(&mut self, path: &[u8], since: u64) -> bool {
        matches!(self.src.newest_log(path), Ok(Some((ui, _))) if ui > since)
    }

    /// Reloads before serving a request: EIO while the stack cannot be read (the reason
    /// was logged once), so nothing stale or half-read is served.
    fn fresh(&mut self) -> Result<(), FsError> {
        self.refresh().map(|_| ())
    }

    /// After an edit was staged: the view changed (mtimes), seal a full batch, wake the
    /// batcher.
    pub(crate) fn after_staging(&mut self, max: usize) {
        self.changed_at = SystemTime::now();
        if self.w.open.len() >= max {
            self.w.seal_all();
        }
        self.w.queue().kick();
    }

    /// Before an edit is staged: holds the disk space its table can take (`reserve.rs`),
    /// or refuses the call with the file system's errno (no space, quota, read-only, …),
    /// as a files backend's write of the lock would fail.
    fn promise(&mut self, op: &str, path: &[u8], bytes: u64) -> Result<(), FsError> {
        let seq = self.w.open.seq + 1;
        self.reserve.promise(seq, bytes).map_err(|errno| {
            refuse_for(
                op,
                path,
                errno,
                format!(
                    "the stack's file system cannot take this update ({}): nothing was \
                     staged, as a files backend's write of the lock would fail",
                    std::io::Error::from_raw_os_error(errno)
                ),
            )
        })
    }

    /// Registers an open file: `ENFILE` beyond [`HANDLES_MAX`] open files, `ENOMEM` when
    /// its content would take the bytes held beyond [`HELD_BYTES_MAX`] (`budget.rs`).
    fn add_handle(&mut self, path: &[u8], h: Handle) -> Result<u64, FsError> {
        if self.handles.len() >= HANDLES_MAX {
            return Err(refuse_for(
                "open",
                path,
                libc::ENFILE,
                format!("{HANDLES_MAX} files are open on the mount already"),
            ));
        }
        let held = h.held();
        if self.w.files.bytes() + self.handle_bytes + held > HELD_BYTES_MAX {
            return Err(refuse_for(
                "open",
                path,
                libc::ENOMEM,
                format!(
                    "lock, scratch and open files hold {HELD_BYTES_MAX} bytes at most, and this \
                     open would pass that"
                ),
            ));
        }
        let fh = self.next_fh;
        self.next_fh += 1;
        self.handle_bytes += held;
        self.handles.insert(fh, h);
        Ok(fh)
    }

    /// Closes an open file's handle.
    fn remove_handle(&mut self, fh: u64) -> Option<Handle> {
        let h = self.handles.remove(&fh)?;
        self.handle_bytes -= h.held();
        Some(h)
    }

    fn path_of(&self, ino: u64) -> Result<(Vec<u8>, Kind), FsError> {
        let mut path = Vec::new();
        let kind = self.inodes.path(ino, &mut path).ok_or(FsError::ENOENT)?;
        Ok((path, kind))
    }

    fn child_path(&self, parent: u64, name: &[u8]) -> Result<Vec<u8>, FsError> {
        let mut dir = Vec::new();
        if self.inodes.path(parent, &mut dir).ok_or(FsError::ENOENT)? != Kind::Dir {
            return Err(FsError::ENOTDIR);
        }
        if !view::is_component(name) {
            return Err(FsError::EINVAL);
        }
        Ok(view::join(&dir, name))
    }

    /// Classifies `path` through the overlay, logging source errors (EIO).
    fn classify(&mut self, path: &[u8]) -> Result<Option<Kind>, FsError> {
        let Inner {
            w, src, scratch, ..
        } = self;
        w.classify(src.as_mut(), scratch, path)
            .map_err(|r| refuse("lookup", path, r))
    }

    /// Checks that `path` is still what the kernel thinks it is.
    fn still(&mut self, path: &[u8], kind: Kind) -> Result<(), FsError> {
        match self.classify(path)? {
            Some(k) if k == kind => Ok(()),
            _ => Err(FsError::ENOENT),
        }
    }

    fn size_of(&mut self, path: &[u8], kind: Kind) -> Result<u64, FsError> {
        match kind {
            Kind::Dir => return Ok(4096),
            // Measured where it is: a scratch file may hold hundreds of MiB.
            Kind::Scratch => {
                return self
                    .w
                    .files
                    .get(path)
                    .map(|c| c.len() as u64)
                    .ok_or(FsError::ENOENT)
            }
            _ => {}
        }
        let mut buf = std::mem::take(&mut self.buf);
        let r = self.render(path, kind, &mut buf);
        let n = buf.len() as u64;
        if buf.capacity() > 64 << 10 {
            // A large rendering (packed-refs, a long reflog) is not kept around.
            buf = Vec::new();
        }
        self.buf = buf;
        r.map(|_| n)
    }

    /// Renders a file's content.
    fn render(&mut self, path: &[u8], kind: Kind, out: &mut Vec<u8>) -> Result<(), FsError> {
        out.clear();
        let Inner { w, src, .. } = self;
        match kind {
            Kind::Dir => Err(FsError::EISDIR),
            Kind::PackedRefs => {
                w.render_packed(out);
                Ok(())
            }
            Kind::Scratch => {
                out.extend_from_slice(w.files.get(path).ok_or(FsError::ENOENT)?);
                Ok(())
            }
            Kind::Ref => {
                let v = w
                    .effective(src.as_mut(), path)
                    .map_err(|r| refuse("read", path, r))?;
                view::render_ref(&v.ok_or(FsError::ENOENT)?, out);
                Ok(())
            }
            Kind::Log => {
                let name = path.strip_prefix(b"logs/").unwrap_or(path);
                w.render_log(src.as_mut(), name, out)
                    .map_err(|r| refuse("read", path, r))
            }
        }
    }

    /// The listing of a directory: the stack part from the cache (or built now, by
    /// reseeking, and cached), then the write overlay.
    fn listing(&mut self, path: &[u8]) -> Result<Arc<Listing>, FsError> {
        self.still(path, Kind::Dir)?;
        let stack = match self.dirs.get(path) {
            Some(e) => e.clone(),
            None => {
                let mut out = Vec::new();
                view::list_dir(self.src.as_mut(), &mut self.scratch, path, &mut out).map_err(
                    |e| {
                        log_error("readdir", path, &e);
                        FsError::Storage(e)
                    },
                )?;
                let arc = Arc::new(Listing::from_entries(&out));
                if arc.len() <= DIR_CACHE_MAX_ENTRIES {
                    while self.dirs_entries + arc.len() > DIR_CACHE_MAX_ENTRIES {
                        match self.dirs.pop_lru() {
                            Some((_, old)) => self.dirs_entries -= old.len(),
                            None => break,
                        }
                    }
                    if let Some((_, old)) = self.dirs.push(path.to_vec(), arc.clone()) {
                        self.dirs_entries -= old.len();
                    }
                    self.dirs_entries += arc.len();
                }
                arc
            }
        };
        if self.w.is_idle() {
            return Ok(stack);
        }
        let mut out = Vec::new();
        let Inner {
            w, src, scratch, ..
        } = self;
        w.overlay_listing(src.as_mut(), scratch, path, &stack.to_entries(), &mut out)
            .map_err(|r| refuse("readdir", path, r))?;
        Ok(Arc::new(Listing::from_entries(&out)))
    }

    fn open_for_write(&mut self, path: &[u8], kind: Kind, flags: i32) -> Result<u64, FsError> {
        let trunc = flags & libc::O_TRUNC != 0;
        let target = match kind {
            Kind::Scratch => {
                if trunc {
                    self.w.files.update(path, Vec::clear);
                }
                Target::Scratch
            }
            Kind::Ref => Target::Ref {
                name: path.to_vec(),
                placeholder: false,
            },
            Kind::Log => Target::Log {
                name: path.get(5..).unwrap_or_default().to_vec(),
            },
            Kind::PackedRefs => {
                return Err(refuse_for("open for writing", path, libc::EPERM, "packed-refs is replaced through packed-refs.lock and a rename, not written in place"))
            }
            Kind::Dir => return Err(FsError::EISDIR),
        };
        let mut data = Vec::new();
        if let (Target::Ref { .. }, false) = (&target, trunc) {
            self.render(path, kind, &mut data)?;
        }
        self.add_handle(
            path,
            Handle::Write {
                path: path.to_vec(),
                target,
                data,
                dirty: trunc,
                failed: false,
            },
        )
    }

    /// Commits a ref written in place (on flush or fsync), if its handle is dirty.
    fn commit_direct(&mut self, fh: u64, who: &Caller, max: usize) -> Result<(), FsError> {
        let Some(Handle::Write {
            path,
            target: Target::Ref { name, placeholder },
            data,
            dirty,
            ..
        }) = self.handles.get_mut(&fh)
        else {
            return Ok(());
        };
        if !*dirty {
            if *placeholder {
                // A ref file created and closed without content (`touch`, `: >`): an
                // empty file can never be a ref, so nothing is stored — said here, at
                // the close, and recorded.
                let path = path.clone();
                return Err(refuse_for(
                    "close",
                    &path,
                    libc::EINVAL,
                    "an empty file is not a ref value; nothing was written",
                ));
            }
            return Ok(());
        }
        let (path, name, data, placeholder) =
            (path.clone(), name.clone(), data.clone(), *placeholder);
        self.promise("write", &path, reserve::edit_bytes(name.len(), data.len()))?;
        if let Some(Handle::Write { dirty, .. }) = self.handles.get_mut(&fh) {
            *dirty = false;
        }
        let Inner { w, src, .. } = self;
        let staged = w
            .parse_ref_content(&data)
            .and_then(|v| {
                if placeholder {
                    w.files.remove(&path);
                }
                let r = w.commit_ref(src.as_mut(), who, &name, v);
                if r.is_err() && placeholder {
                    w.files.insert(path.clone(), Vec::new());
                }
                r
            })
            .map_err(|r| refuse("write", &path, r));
        if staged.is_ok() {
            if let Some(Handle::Write {
                target: Target::Ref { placeholder, .. },
                ..
            }) = self.handles.get_mut(&fh)
            {
                *placeholder = false;
            }
            self.after_staging(max);
        }
        staged
    }

    fn do_rename(
        &mut self,
        who: &Caller,
        from: &[u8],
        kind: Kind,
        to: &[u8],
        to_kind: Option<Kind>,
    ) -> Result<(), Refusal> {
        let Inner { w, src, .. } = self;
        let src = src.as_mut();
        let to_log = match view::area(to) {
            view::Area::Logs(Some(n)) if crate::fs::write::valid_ref_name(n) && !is_lockish(n) => {
                Some(n)
            }
            _ => None,
        };
        let to_ref = match view::area(to) {
            view::Area::Refs(n) if !is_lockish(n) => ref_name_of(n),
            _ => None,
        };
        let bad = |why: &str| Refusal {
            errno: libc::EINVAL,
            reason: why.to_string(),
        };
        match kind {
            Kind::Scratch => {
                let content = w.files.get(from).cloned().unwrap_or_default();
                if to == b"packed-refs" {
                    w.commit_packed_refs(src, who, &content)?;
                } else if let Some(n) = to_log {
                    let entries = w.parse_log_text(&content)?;
                    w.replace_log(who, n, entries);
                } else if let Some(n) = to_ref {
                    let v = w.parse_ref_content(&content)?;
                    if from.strip_suffix(b".lock") == Some(n) {
                        w.check_lock_base(src, from)?;
                    }
                    w.commit_ref(src, who, n, v)?;
                } else if to_kind.is_none_or(is_scratch_kind) {
                    w.files.insert(to.to_vec(), content);
                } else {
                    return Err(bad("cannot replace this file with a scratch file"));
                }
                w.files.remove(from);
                w.locks.remove(from);
                Ok(())
            }
            Kind::Log => {
                let name = from.get(5..).unwrap_or_default().to_vec();
                let mut text = Vec::new();
                w.render_log(src, &name, &mut text)?;
                if let Some(n) = to_log {
                    let entries = w.parse_log_text(&text)?;
                    w.delete_log(who, &name);
                    w.replace_log(who, n, entries);
                } else if to_kind.is_none_or(is_scratch_kind)
                    && !matches!(view::area(to), view::Area::Refs(_))
                {
                    w.files.insert(to.to_vec(), text);
                    w.delete_log(who, &name);
                } else {
                    return Err(bad(
                        "a reflog can only move to another reflog or a temporary name",
                    ));
                }
                Ok(())
            }
            Kind::Ref => {
                let Some(n) = to_ref else {
                    return Err(bad("a ref can only be renamed to another ref name"));
                };
                let v = w.effective(src, from)?.unwrap_or(RefValue::Deletion);
                w.commit_ref(src, who, n, v)?;
                w.commit_ref(src, who, from, RefValue::Deletion)
            }
            Kind::Dir => Err(Refusal {
                errno: libc::EXDEV,
                reason: "directories are not renamed".into(),
            }),
            Kind::PackedRefs => Err(Refusal {
                errno: libc::EPERM,
                reason: "packed-refs is replaced, not moved".into(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::ObjectId;
    use crate::fs::source::{BatchEdit, MemSource};

    fn oid(b: u8) -> RefValue {
        RefValue::Val1(ObjectId::from_bytes(&[b; 20]).expect("sha-1 id"))
    }

    /// A reflog created in place (`open(logs/x, O_CREAT|O_APPEND)`) is staged for the
    /// process that created it, through the file it opened: if its batch fails, that
    /// process's `fsync` and that file's `close` are told (it was staged under whichever
    /// process the previous request served).
    #[test]
    fn a_created_reflog_is_staged_for_its_creator() {
        let mut mem = MemSource::new();
        mem.set("refs/heads/x", oid(1));
        mem.add_log(crate::format::LogRecord {
            refname: b"refs/heads/y".to_vec(),
            update_index: 1,
            ..Default::default()
        });
        let shared = Shared::new(
            Box::new(mem),
            false,
            LogSettings::default(),
            BatchSettings {
                window: Duration::from_secs(60),
                max: 1000,
            },
        );
        let me = std::process::id();
        let logs = shared.lookup(ROOT, b"logs").expect("logs").0.ino.0;
        let refs = shared.lookup(logs, b"refs").expect("refs").0.ino.0;
        let heads = shared.lookup(refs, b"heads").expect("heads").0.ino.0;
        // Another process's request first.
        let _ = shared.unlink(heads, b"nothing", 1);
        let (_, fh) = shared
            .create(
                heads,
                b"x",
                libc::O_CREAT | libc::O_WRONLY | libc::O_APPEND,
                me,
            )
            .expect("create the reflog");
        let tgid = shared.tgid(me);
        let g = shared.lock();
        let e =
            g.w.open
                .edits
                .iter()
                .find(|e| e.name == b"refs/heads/x")
                .expect("the creation is staged");
        assert_eq!(e.pids, vec![tgid]);
        assert_eq!(e.handles, vec![fh]);
    }

    /// Staging waits, holding no lock, while the edits staged and not yet written are
    /// over the bound (`budget.rs`), and goes on once the batcher has written them.
    #[test]
    fn staging_waits_while_too_much_is_staged() {
        let shared = Shared::new(
            Box::new(MemSource::new()),
            false,
            LogSettings::default(),
            BatchSettings {
                window: Duration::from_millis(1),
                max: 1,
            },
        );
        shared.staged.store(STAGED_BYTES_MAX, Ordering::Relaxed);
        let s2 = shared.clone();
        let t = std::thread::spawn(move || s2.wait_staging_room());
        std::thread::sleep(Duration::from_millis(300));
        assert!(!t.is_finished(), "staging went on past the bound");
        // The state lock is free meanwhile.
        drop(shared.lock());
        shared.staged.store(0, Ordering::Relaxed);
        t.join().expect("the waiter");
    }

    /// The pages of a ref file are kept by an open only when the last page fill answered
    /// exactly the content that open serves. An open that drops them (`Refill`) records
    /// nothing: the kernel drops them only after its reply, so an open answered `Cached`
    /// meanwhile would read the old page (issue 23's stale read after a lock). A fill by
    /// a handle opened before a change serves the ref as it is now, so a later opener
    /// never reads an older value from the page; an O_DIRECT read fills no page.
    #[test]
    fn pages_are_kept_only_for_the_content_last_filled() {
        let mut mem = MemSource::new();
        mem.set("refs/heads/x", oid(1));
        let shared = Shared::new(
            Box::new(mem),
            true,
            LogSettings::default(),
            BatchSettings {
                window: Duration::from_millis(1),
                max: 1,
            },
        );
        let refs = shared.lookup(ROOT, b"refs").expect("refs").0.ino.0;
        let heads = shared.lookup(refs, b"heads").expect("heads").0.ino.0;
        let (a, _, cached) = shared.lookup(heads, b"x").expect("x");
        assert!(cached, "a ref file of one page has a fixed size");
        let ino = a.ino.0;
        let rendered = |v: &RefValue| {
            let mut out = Vec::new();
            view::render_ref(v, &mut out);
            out
        };
        let set = |from: u8, to: u8| {
            let edit = BatchEdit {
                name: b"refs/heads/x".to_vec(),
                new: Some(oid(to)),
                expected_old: Some(oid(from)),
                ..BatchEdit::default()
            };
            shared.lock().src.commit(&[edit]).expect("commit");
        };
        let (old_fh, mode) = shared.open(ino, libc::O_RDONLY).expect("open");
        assert_eq!(mode, OpenMode::Refill, "nothing filled yet");
        let (fh, mode) = shared.open(ino, libc::O_RDONLY).expect("open");
        assert_eq!(mode, OpenMode::Refill, "a refill records nothing");
        assert_eq!(
            shared.read_file(ino, fh, 0, 4096, false).expect("read"),
            rendered(&oid(1))
        );
        shared.release(fh);
        let (fh, mode) = shared.open(ino, libc::O_RDONLY).expect("open");
        assert_eq!(mode, OpenMode::Cached, "the page holds this content now");
        shared.release(fh);
        // Another writer: same size, other content.
        set(1, 2);
        let (new_fh, mode) = shared.open(ino, libc::O_RDONLY).expect("open");
        assert_eq!(mode, OpenMode::Refill, "other content drops the pages");
        // The race: before any fill, a second open must drop the pages too (the first
        // open's drop may not have happened yet in the kernel).
        let (second, mode) = shared.open(ino, libc::O_RDONLY).expect("open");
        assert_eq!(mode, OpenMode::Refill, "no fill of the new content yet");
        // The old handle's fill serves the ref as it is now, not its snapshot.
        assert_eq!(
            shared.read_file(ino, old_fh, 0, 4096, false).expect("read"),
            rendered(&oid(2))
        );
        let (fh, mode) = shared.open(ino, libc::O_RDONLY).expect("open");
        assert_eq!(mode, OpenMode::Cached);
        shared.release(fh);
        // An O_DIRECT read fills no page: it records nothing.
        set(2, 3);
        assert_eq!(
            shared.read_file(ino, second, 0, 4096, true).expect("read"),
            rendered(&oid(3))
        );
        let (fh, mode) = shared.open(ino, libc::O_RDONLY).expect("open");
        assert_eq!(
            mode,
            OpenMode::Refill,
            "the page may still hold the old content"
        );
        shared.release(fh);
        // A direct-IO handle (fixed size no longer matching: a longer value) keeps its
        // snapshot; a page-cache handle whose ref changed size fills from its snapshot.
        let sym = RefValue::Symref(b"refs/heads/a-much-longer-target-name".to_vec());
        let edit = BatchEdit {
            name: b"refs/heads/x".to_vec(),
            new: Some(sym),
            expected_old: Some(oid(3)),
            ..BatchEdit::default()
        };
        shared.lock().src.commit(&[edit]).expect("commit");
        assert_eq!(
            shared.read_file(ino, new_fh, 0, 4096, false).expect("read"),
            rendered(&oid(2)),
            "a page-cache handle of the old size serves its snapshot"
        );
        shared.release(second);
        shared.release(new_fh);
        shared.release(old_fh);
    }
}
