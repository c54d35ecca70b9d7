//! The mount's shared state: the reader source behind one mutex, the inode table, the
//! per-directory listing caches, the open handles and the write overlay. Request handlers
//! call into it; the watcher thread calls [`Shared::refresh`] and sends kernel
//! invalidations itself; the batcher thread (`batch.rs`) writes sealed batches through the
//! separate writer source.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fuser::FileAttr;
use lru::LruCache;
use rustix::event::EventfdFlags;
use rustix::process::{getgid, getuid};

use crate::format::HashKind;
use crate::fs::attr::attr;
use crate::fs::attr::GitDirModes;
use crate::fs::budget::STAGED_BYTES_MAX;
use crate::fs::error::FsError;
use crate::fs::ino::ROOT;
use crate::fs::inode::Inodes;
use crate::fs::procfs;
use crate::fs::protocol::WriteState;
use crate::fs::queue::BatchQueue;
use crate::fs::record::{log_error, Recorder};
use crate::fs::reserve::Reserve;
use crate::fs::source::LogSettings;
use crate::fs::source::RefSource;
use crate::fs::view::{self, Kind, Listing, Scratch};

mod broken;
mod calls;
mod handles;
mod invalidate;
mod linked;
mod listing;
mod names;
mod packed_link;
mod packed_state;
#[cfg(test)]
mod tests;
mod times;

pub use handles::Handle;

/// How many directory listings are cached at most (each sorted once, dropped on reload).
const DIR_CACHE_DIRS: usize = 4096;
/// The cache holds at most this many entries in all (about 14 bytes each, 3.5 MB); the
/// least recently used listings go first. Open handles keep their own listing. A listing
/// is rebuilt by one pass over the directory's refs (a reseek past every subtree), so a
/// walk that lists each directory once gains nothing from more.
const DIR_CACHE_MAX_ENTRIES: usize = 1 << 18;

/// Everything behind the state mutex.
pub struct Inner {
    pub(crate) src: Box<dyn RefSource>,
    /// The mount's recorder (as [`Shared::rec`]), for the calls made under the lock.
    pub(crate) rec: Arc<Recorder>,
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
    /// A linked worktree's view (`linked.rs`): its HEAD may hold git's null-id placeholder
    /// while the worktree is being created, and may be deleted while it is being removed.
    linked_worktree: bool,
    /// `refs` and `logs` (in that order) were removed by `rmdir` when empty: they do not
    /// show until `mkdir` makes them again or something appears below them (they always
    /// exist otherwise).
    gone_tops: [bool; 2],
    /// The file last sized ([`Inner::size_of`]): its time key, size and content
    /// fingerprint, which its time is checked against right after (see `mtime_of`).
    last_render: Option<(u64, u64, u64)>,
    /// When another writer last changed the stack (ns since the epoch): no directory
    /// shows an older time (the mount does not diff the tables to know whose entries
    /// changed).
    dir_epoch: u64,
    /// The watcher's wake-up descriptor (`Shared::wake`).
    wake: Wake,
    /// Broken refs and symbolic links kept beside the stack (`fs/broken.rs`; disabled
    /// until [`Shared::keep_broken_refs`]).
    pub(crate) broken_refs: crate::fs::broken::BrokenRefs,
    /// Where a `packed-refs` that does not parse is kept (`packed_state.rs`).
    pub(crate) junk_file: Option<packed_state::JunkFile>,
    /// `packed-refs` as a symbolic link to a file of GITDIR (`packed_link.rs`).
    packed_link: Option<packed_link::Link>,
    /// Listings made (each a pass over the overlay at least), for tests.
    #[cfg(test)]
    pub(crate) listings: u64,
}

/// The place of `refs` or `logs` in [`Inner::gone_tops`].
pub(super) fn top_index(path: &[u8]) -> Option<usize> {
    match path {
        b"refs" => Some(0),
        b"logs" => Some(1),
        _ => None,
    }
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
    /// What the mount records for `reftablefs status`: the mount's one recorder, shared
    /// by all its views (a view made alone, in tests, has its own).
    pub(crate) rec: Arc<Recorder>,
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
    /// entry (`None` if none could be made: the watcher then finds it at its next tick).
    wake: Wake,
    /// Where the packed layer is kept across mounts (`packed_state.rs`; unset: nowhere).
    packed_file: OnceLock<packed_state::PackedFile>,
    /// `packed-refs` as a symbolic link: its target for the router, GITDIR (`packed_link.rs`).
    link: packed_link::LinkShared,
}

/// The watcher's wake-up eventfd, shared by the view's state and its lock's contents.
type Wake = Option<Arc<OwnedFd>>;

/// Wakes the watcher waiting on `wake` (best effort: a full counter wakes it already).
fn wake_watcher(wake: &Wake) {
    if let Some(fd) = wake {
        let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
    }
}

impl Shared {
    /// Wraps the reader source, recording into a recorder of its own. A writable mount's
    /// writer source (another stack object on the same stack) goes to the batcher thread
    /// (`batch::spawn`).
    pub fn new(
        src: Box<dyn RefSource>,
        read_only: bool,
        log: LogSettings,
        batch: BatchSettings,
    ) -> Arc<Shared> {
        Shared::recording(src, read_only, log, batch, Arc::default())
    }

    /// [`Shared::new`] recording into `rec` (the mount's).
    pub fn recording(
        src: Box<dyn RefSource>,
        read_only: bool,
        log: LogSettings,
        batch: BatchSettings,
        rec: Arc<Recorder>,
    ) -> Arc<Shared> {
        let (uid, gid) = (getuid().as_raw(), getgid().as_raw());
        let generation = src.generation();
        let hash: HashKind = src.hash_kind();
        let log_index_seen = src.max_update_index();
        let w = WriteState::new(hash, log);
        let queue = w.queue().clone();
        let reserve = Reserve::none();
        let staged = reserve.staged();
        let flags = EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC;
        let wake: Wake = rustix::event::eventfd(0, flags).ok().map(Arc::new);
        Arc::new(Shared {
            inner: Mutex::new(Inner {
                src,
                rec: rec.clone(),
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
                linked_worktree: false,
                gone_tops: [false; 2],
                last_render: None,
                dir_epoch: 0,
                broken_refs: Default::default(),
                junk_file: None,
                packed_link: None,
                wake: wake.clone(),
                #[cfg(test)]
                listings: 0,
            }),
            rec,
            queue,
            read_only,
            tgids: Mutex::new(HashMap::new()),
            batch,
            uid,
            gid,
            gitdir_modes: OnceLock::new(),
            stopping: AtomicBool::new(false),
            staged,
            wake,
            packed_file: OnceLock::new(),
            link: Default::default(),
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

    /// A node's attributes, with its time (see [`Inner::mtime_of`]).
    fn attr_timed(&self, g: &mut Inner, ino: u64, path: &[u8], kind: Kind, size: u64) -> FileAttr {
        let mtime = g.mtime_of(path, kind);
        self.moded(attr(ino, kind, size, mtime, self.uid, self.gid))
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
    /// The start of a call that changes the view: refused on a read-only mount, waiting
    /// for room to stage when it `stages`, then the state locked and fresh.
    fn begin_change(&self, stages: bool) -> Result<MutexGuard<'_, Inner>, FsError> {
        if self.read_only() {
            return Err(FsError::EROFS);
        }
        if stages {
            self.wait_staging_room();
        }
        let mut g = self.lock();
        g.fresh()?;
        Ok(g)
    }

    fn wait_staging_room(&self) {
        while self.staged.load(Ordering::Relaxed) >= STAGED_BYTES_MAX && !self.stopping() {
            self.queue.request_flush();
            self.queue.wait_progress(Duration::from_millis(100));
        }
    }

    /// Sets the layout (`mount --layout`), before mounting.
    pub fn set_layout(&self, layout: crate::fs::protocol::Layout) {
        self.lock().w.set_layout(layout);
    }

    /// Keeps broken refs in `store` from now on (`fs/broken.rs`); set once, before mounting.
    pub fn keep_broken_refs(&self, store: crate::fs::broken::BrokenRefs) {
        self.lock().broken_load(store);
    }

    /// Sets the inode table's cap (`mount --inode-cap`).
    pub fn set_inode_cap(&self, cap: usize) {
        self.lock().inodes.set_cap(cap);
    }

    pub(crate) fn parent_of(&self, ino: u64) -> u64 {
        self.lock()
            .inodes
            .parent_and_name(ino)
            .map_or(ROOT, |(p, _)| p)
    }

    /// Waits until everything staged so far is written (group commit), then reports the
    /// failures of process `actor`'s edits (EIO, once).
    pub(crate) fn sync_for(&self, actor: u32) -> Result<(), FsError> {
        self.wait_written()?;
        match self.queue.take_failures(actor) {
            Some(f) if f.start == procfs::start_time(actor) => {
                let names: Vec<_> = f.names.iter().map(|n| String::from_utf8_lossy(n)).collect();
                log::error!(
                    "reftablefs: fsync by process {actor}: EIO, its updates of {} were not \
                     written (logged above)",
                    names.join(", ")
                );
                Err(FsError::EIO)
            }
            _ => Ok(()),
        }
    }

    /// Wakes the watcher thread.
    pub(crate) fn wake_watcher(&self) {
        wake_watcher(&self.wake);
    }

    /// The watcher's wake-up descriptor, if one could be made.
    pub(crate) fn wake_fd(&self) -> Option<BorrowedFd<'_>> {
        self.wake.as_deref().map(AsFd::as_fd)
    }

    /// Asks the batcher to seal and write everything staged so far and waits until it is
    /// (group commit: every waiter shares the next batch), on the queue's lock, not the
    /// state lock. EIO if the batcher is gone with batches unwritten.
    fn wait_written(&self) -> Result<(), FsError> {
        let target = {
            let g = self.lock();
            let target = g.w.last_staged_seq();
            // The batcher seals everything staged so far when it sees the request.
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
}

/// The directory `path` is in (`""`: the root).
pub(super) fn parent_dir(path: &[u8]) -> &[u8] {
    match path.iter().rposition(|&b| b == b'/') {
        Some(i) => path.get(..i).unwrap_or_default(),
        None => b"",
    }
}

/// `t` in nanoseconds since the epoch (0 before it).
pub(super) fn ns(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Attribute and entry TTL of ref files of a fixed size (see `inode.rs`).
pub const REF_ATTR_TTL: Duration = Duration::from_secs(10);

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
            log::info!("reftablefs: reload tables.list: the stack is readable again");
            self.dirs.clear();
            self.dirs_entries = 0;
            self.needs_invalidation = true;
        }
        let gen = self.src.generation();
        if gen != self.generation {
            let from = std::mem::replace(&mut self.generation, gen);
            self.dirs.clear();
            self.dirs_entries = 0;
            self.changed_at = SystemTime::now();
            if self.src.last_change_external() {
                self.needs_invalidation = true;
                // Names may have appeared or gone anywhere (the mount does not diff the
                // tables): every directory's time moves now.
                self.all_entries_changed();
                // Another writer: packed entries it contradicts would resurface on `rm`.
                // (The mount's own batches leave the packed layer as a files backend
                // leaves packed-refs: shadowed by loose values.)
                let Inner { w, src, .. } = self;
                w.revalidate_packed(src.as_mut());
            } else {
                self.w.packed_own_commit(from, gen);
            }
            // A real ref written on the stack drops the broken one of its name.
            self.broken_drop_shadowed();
            return Ok(Some(gen));
        }
        Ok(None)
    }

    /// Reloads before serving a request: EIO while the stack cannot be read (the reason
    /// was logged once), so nothing stale or half-read is served.
    fn fresh(&mut self) -> Result<(), FsError> {
        self.refresh().map(|_| ())
    }

    /// After an edit was staged: the view changed (mtimes), seal a full batch, wake the
    /// batcher.
    pub(crate) fn after_staging(&mut self) {
        self.changed_at = SystemTime::now();
        // The batcher seals a full batch (and one whose window passed) when it wakes.
        self.w.queue().kick();
    }

    /// Before an edit is staged: holds the disk space its table can take (`reserve.rs`),
    /// or refuses the call with the file system's errno (no space, quota, read-only, …),
    /// as a files backend's write of the lock would fail.
    fn promise(&mut self, op: &str, path: &[u8], bytes: u64) -> Result<(), FsError> {
        let seq = self.w.open.seq + 1;
        self.reserve.promise(seq, bytes).map_err(|errno| {
            self.rec.refuse_for(
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

    fn path_of(&self, ino: u64) -> Result<(Vec<u8>, Kind), FsError> {
        let mut path = Vec::new();
        let kind = self.inodes.path(ino, &mut path).ok_or(FsError::ENOENT)?;
        self.link_alias(&mut path).map_err(|_| FsError::ENOENT)?;
        let kind = self.kind_now(&path, kind);
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
        let mut path = view::join(&dir, name);
        self.link_alias(&mut path)?;
        Ok(path)
    }

    /// Classifies `path` through the overlay, logging source errors (EIO).
    fn classify(&mut self, path: &[u8]) -> Result<Option<Kind>, FsError> {
        if let Some(k) = self.link_kind(path) {
            return Ok(k);
        }
        let Inner {
            w, src, scratch, ..
        } = self;
        let kind = w
            .classify(src.as_mut(), scratch, path)
            .map_err(|r| self.rec.refuse("lookup", path, r))?
            .map(|k| self.broken_kind(path, k));
        match top_index(path) {
            Some(i) if self.gone_tops[i] => {
                // Removed when empty: shown again (for good) once something is below it.
                if self.unchecked_listing(path)?.is_empty() {
                    return Ok(None);
                }
                self.gone_tops[i] = false;
                Ok(kind)
            }
            _ => Ok(kind),
        }
    }

    /// Checks that `path` is still what the kernel thinks it is.
    fn still(&mut self, path: &[u8], kind: Kind) -> Result<(), FsError> {
        match self.classify(path)? {
            Some(k) if k == kind => Ok(()),
            _ => Err(FsError::ENOENT),
        }
    }

    /// The kind of file at `path` now, for an inode the kernel holds as `kind`: a ref
    /// file (or reflog) replaced by a broken ref (`fs/broken.rs`) is that file, and back.
    fn kind_now(&self, path: &[u8], kind: Kind) -> Kind {
        match kind {
            Kind::Ref | Kind::Log if self.broken_refs.is_link(path) => Kind::Link,
            Kind::Ref | Kind::Log if self.w.files.contains_key(path) => Kind::Scratch,
            Kind::Scratch if self.broken_refs.is_link(path) => Kind::Link,
            Kind::Link if !self.broken_refs.is_link(path) && self.w.files.contains_key(path) => {
                Kind::Scratch
            }
            Kind::Scratch
                if !self.w.files.contains_key(path)
                    && crate::fs::protocol::valid_ref_name(path) =>
            {
                Kind::Ref
            }
            k => k,
        }
    }

    fn size_of(&mut self, path: &[u8], kind: Kind) -> Result<u64, FsError> {
        let key = crate::fs::inode::time_key(path, kind);
        self.last_render = None;
        match kind {
            Kind::Dir => return Ok(4096),
            // Shared, not copied: its mark is the rendering's, made once with it.
            Kind::PackedRefs => {
                let Inner { w, src, .. } = self;
                let (data, fp) = w
                    .packed_refs_marked(src.as_mut())
                    .map_err(|r| self.rec.refuse("read", path, r))?;
                let n = data.len() as u64;
                self.last_render = Some((key, n, fp));
                return Ok(n);
            }
            // Measured where it is: a scratch file may hold hundreds of MiB (its mark
            // takes its size and, beyond 64 KiB, its first and last 4 KiB).
            Kind::Scratch | Kind::Link => {
                let c = self.file_content(path).ok_or(FsError::ENOENT)?;
                let n = c.len();
                let fp = if n <= 64 << 10 {
                    handles::fingerprint(c)
                } else {
                    let head = c.get(..4096).unwrap_or_default();
                    let tail = c.get(n - 4096..).unwrap_or_default();
                    handles::fingerprint(head) ^ handles::fingerprint(tail).rotate_left(17)
                };
                self.last_render = Some((key, n as u64, fp));
                return Ok(n as u64);
            }
            _ => {}
        }
        let mut buf = std::mem::take(&mut self.buf);
        let r = self.render(path, kind, &mut buf);
        let n = buf.len() as u64;
        if r.is_ok() {
            self.last_render = Some((key, n, handles::fingerprint(&buf)));
        }
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
        let Inner {
            w,
            src,
            packed_link: link,
            ..
        } = self;
        match kind {
            Kind::Dir => Err(FsError::EISDIR),
            Kind::PackedRefs => {
                let data = w
                    .packed_refs(src.as_mut())
                    .map_err(|r| self.rec.refuse("read", path, r))?;
                out.extend_from_slice(&data);
                Ok(())
            }
            // A link's content is its target (`broken.rs`; never opened: the kernel
            // follows it, or refuses with ELOOP).
            Kind::Scratch | Kind::Link => {
                let c = match link.as_ref().filter(|_| path == packed_link::LINK_PATH) {
                    Some(l) => &l.target,
                    None => w.files.get(path).ok_or(FsError::ENOENT)?,
                };
                out.extend_from_slice(c);
                Ok(())
            }
            Kind::Ref => {
                let v = w
                    .effective(src.as_mut(), path)
                    .map_err(|r| self.rec.refuse("read", path, r))?;
                view::render_ref(&v.ok_or(FsError::ENOENT)?, out);
                Ok(())
            }
            Kind::Log => {
                let name = path.strip_prefix(b"logs/").unwrap_or(path);
                w.render_log(src.as_mut(), name, out)
                    .map_err(|r| self.rec.refuse("read", path, r))
            }
        }
    }

    /// `packed-refs` as it shows now, shared (see [`WriteState::packed_refs`]).
    pub(super) fn packed_refs(&mut self, path: &[u8]) -> Result<Arc<Vec<u8>>, FsError> {
        Ok(self.packed_refs_marked(path)?.0)
    }

    /// [`Inner::packed_refs`] with the content's fingerprint.
    pub(super) fn packed_refs_marked(
        &mut self,
        path: &[u8],
    ) -> Result<(Arc<Vec<u8>>, u64), FsError> {
        let Inner { w, src, .. } = self;
        w.packed_refs_marked(src.as_mut())
            .map_err(|r| self.rec.refuse("read", path, r))
    }
}
