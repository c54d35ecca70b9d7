//! The mount's shared state: the ref source behind one mutex, the inode table, the
//! per-directory listing caches and the open handles. Request handlers call into it; the
//! watcher thread calls [`Shared::refresh`] and sends kernel invalidations itself.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use fuser::FileAttr;
use lru::LruCache;

use crate::format::{LogRecord, RefRecord};
use crate::fs::fuse::attr;
use crate::fs::inode::{Inodes, ROOT};
use crate::fs::source::{read_ref, RefSource};
use crate::fs::view::{self, Entry, Kind, Scratch};

/// How many directory listings are cached (each sorted once, dropped on reload).
const DIR_CACHE_DIRS: usize = 256;
/// Listings longer than this are not kept in the cache (open handles still hold theirs).
const DIR_CACHE_MAX_ENTRIES: usize = 100_000;

/// An open file or directory.
pub enum Handle {
    /// A file opened for reading: its content as of `open`, so a reader never sees a torn
    /// value however the ref changes meanwhile.
    File { data: Vec<u8> },
    /// An open directory: the listing as of `opendir`.
    Dir {
        path: Vec<u8>,
        entries: Arc<Vec<Entry>>,
    },
}

/// Everything behind the state mutex.
pub struct Inner {
    pub(crate) src: Box<dyn RefSource>,
    scratch: Scratch,
    pub(crate) inodes: Inodes,
    dirs: LruCache<Vec<u8>, Arc<Vec<Entry>>>,
    /// The generation the caches were built for.
    generation: u64,
    handles: HashMap<u64, Handle>,
    next_fh: u64,
    rec: RefRecord,
    logs: Vec<LogRecord>,
    buf: Vec<u8>,
    /// Bumped whenever what the mount shows may have changed (used as files' mtime).
    pub(crate) changed_at: SystemTime,
    /// Set by a reload that changed the view, taken by the watcher (kernel invalidation).
    needs_invalidation: bool,
}

/// State shared by the request handlers and the helper threads.
pub struct Shared {
    inner: Mutex<Inner>,
    uid: u32,
    gid: u32,
    stopping: AtomicBool,
}

/// Logs one error line: what failed, on which path, and why.
pub fn log_error(op: &str, path: &[u8], err: &dyn std::fmt::Display) {
    eprintln!("reftablefs: {op} {}: {err}", String::from_utf8_lossy(path));
}

impl Shared {
    /// Wraps a ref source.
    pub fn new(src: Box<dyn RefSource>) -> Arc<Shared> {
        // SAFETY: getuid/getgid cannot fail and have no preconditions.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let generation = src.generation();
        Arc::new(Shared {
            inner: Mutex::new(Inner {
                src,
                scratch: Scratch::default(),
                inodes: Inodes::new(),
                dirs: LruCache::new(NonZeroUsize::new(DIR_CACHE_DIRS).unwrap_or(NonZeroUsize::MIN)),
                generation,
                handles: HashMap::new(),
                next_fh: 1,
                rec: RefRecord::default(),
                logs: Vec::new(),
                buf: Vec::new(),
                changed_at: SystemTime::now(),
                needs_invalidation: false,
            }),
            uid,
            gid,
            stopping: AtomicBool::new(false),
        })
    }

    /// Locks the state (a poisoned lock is taken over: the state stays consistent because
    /// every mutation is a single step).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the mount is shutting down.
    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Marks the mount as shutting down (helper threads exit).
    pub fn shutdown(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// Reloads the source if the stack changed; drops caches when it did. Returns the new
    /// generation if it changed.
    pub fn refresh(&self) -> Result<Option<u64>, i32> {
        let mut g = self.lock();
        g.refresh()
    }

    /// Whether a reload changed the view since the last call (for the watcher).
    pub fn take_changed(&self) -> bool {
        std::mem::take(&mut self.lock().needs_invalidation)
    }

    pub(crate) fn lookup(&self, parent: u64, name: &[u8]) -> Result<FileAttr, i32> {
        let mut g = self.lock();
        g.refresh_logged();
        let mut dir = Vec::new();
        if g.inodes.path(parent, &mut dir).ok_or(libc::ENOENT)? != Kind::Dir {
            return Err(libc::ENOTDIR);
        }
        if !view::is_component(name) {
            return Err(libc::ENOENT);
        }
        let path = view::join(&dir, name);
        let kind = g.classify(&path)?.ok_or(libc::ENOENT)?;
        let size = g.size_of(&path, kind)?;
        let ino = g.inodes.remember(parent, name, &path, kind);
        Ok(attr(ino, kind, size, g.changed_at, self.uid, self.gid))
    }

    pub(crate) fn forget(&self, ino: u64, n: u64) {
        self.lock().inodes.forget(ino, n);
    }

    pub(crate) fn getattr(&self, ino: u64) -> Result<FileAttr, i32> {
        let mut g = self.lock();
        g.refresh_logged();
        let (path, kind) = g.path_of(ino)?;
        let size = g.size_of(&path, kind)?;
        Ok(attr(ino, kind, size, g.changed_at, self.uid, self.gid))
    }

    pub(crate) fn parent_of(&self, ino: u64) -> u64 {
        self.lock()
            .inodes
            .parent_and_name(ino)
            .map_or(ROOT, |(p, _)| p)
    }

    /// Opens a file for reading: renders its content once. Returns the handle and whether
    /// to bypass the page cache (ref and log files; `packed-refs` stays mmap-able).
    pub(crate) fn open(&self, ino: u64) -> Result<(u64, bool), i32> {
        let mut g = self.lock();
        g.refresh_logged();
        let (path, kind) = g.path_of(ino)?;
        if kind == Kind::Dir {
            return Err(libc::EISDIR);
        }
        let mut data = Vec::new();
        g.render(&path, kind, &mut data)?;
        let fh = g.add_handle(Handle::File { data });
        Ok((fh, kind != Kind::PackedRefs))
    }

    pub(crate) fn opendir(&self, ino: u64) -> Result<u64, i32> {
        let mut g = self.lock();
        g.refresh_logged();
        let (path, kind) = g.path_of(ino)?;
        if kind != Kind::Dir {
            return Err(libc::ENOTDIR);
        }
        let entries = g.listing(&path)?;
        Ok(g.add_handle(Handle::Dir { path, entries }))
    }

    pub(crate) fn with_handle<R>(&self, fh: u64, f: impl FnOnce(Option<&Handle>) -> R) -> R {
        let g = self.lock();
        f(g.handles.get(&fh))
    }

    pub(crate) fn release(&self, fh: u64) {
        self.lock().handles.remove(&fh);
    }

    /// Paths of known inodes whose kind changed or that vanished since they were looked
    /// up, as (parent inode, name) pairs for `inval_entry`. Scans at most `limit` inodes
    /// (beyond that the entry TTL bounds staleness).
    pub fn stale_entries(&self, limit: usize) -> Vec<(u64, Vec<u8>)> {
        let mut g = self.lock();
        let known: Vec<(u64, Kind)> = g.inodes.known().take(limit).collect();
        let mut out = Vec::new();
        let mut path = Vec::new();
        for (ino, kind) in known {
            if g.inodes.path(ino, &mut path).is_none() {
                continue;
            }
            let now = g.classify(&path).ok().flatten();
            if now != Some(kind) {
                if let Some((p, name)) = g.inodes.parent_and_name(ino) {
                    out.push((p, name.to_vec()));
                }
            }
        }
        out
    }
}

impl Inner {
    fn refresh(&mut self) -> Result<Option<u64>, i32> {
        match self.src.reload() {
            Ok(_) => {}
            Err(e) => {
                log_error("reload", b"tables.list", &e);
                return Err(e.errno());
            }
        }
        let gen = self.src.generation();
        if gen != self.generation {
            self.generation = gen;
            self.dirs.clear();
            self.changed_at = SystemTime::now();
            self.needs_invalidation = true;
            return Ok(Some(gen));
        }
        Ok(None)
    }

    fn refresh_logged(&mut self) {
        // A failed reload keeps serving the last good view; the error was logged.
        let _ = self.refresh();
    }

    fn add_handle(&mut self, h: Handle) -> u64 {
        let fh = self.next_fh;
        self.next_fh += 1;
        self.handles.insert(fh, h);
        fh
    }

    fn path_of(&self, ino: u64) -> Result<(Vec<u8>, Kind), i32> {
        let mut path = Vec::new();
        let kind = self.inodes.path(ino, &mut path).ok_or(libc::ENOENT)?;
        Ok((path, kind))
    }

    /// Classifies `path`, logging source errors (EIO).
    fn classify(&mut self, path: &[u8]) -> Result<Option<Kind>, i32> {
        view::classify(self.src.as_mut(), &mut self.scratch, path).map_err(|e| {
            log_error("lookup", path, &e);
            e.errno()
        })
    }

    /// Checks that `path` is still what the kernel thinks it is.
    fn still(&mut self, path: &[u8], kind: Kind) -> Result<(), i32> {
        match self.classify(path)? {
            Some(k) if k == kind => Ok(()),
            _ => Err(libc::ENOENT),
        }
    }

    fn size_of(&mut self, path: &[u8], kind: Kind) -> Result<u64, i32> {
        if kind == Kind::Dir {
            return Ok(4096);
        }
        let mut buf = std::mem::take(&mut self.buf);
        let r = self.render(path, kind, &mut buf);
        let n = buf.len() as u64;
        self.buf = buf;
        r.map(|_| n)
    }

    /// Renders a file's content.
    fn render(&mut self, path: &[u8], kind: Kind, out: &mut Vec<u8>) -> Result<(), i32> {
        out.clear();
        let hash = self.src.hash_kind();
        match kind {
            Kind::Dir => Err(libc::EISDIR),
            Kind::PackedRefs => {
                out.extend_from_slice(view::PACKED_REFS_HEADER);
                Ok(())
            }
            Kind::Ref => {
                let found = read_ref(self.src.as_mut(), path, &mut self.rec).map_err(|e| {
                    log_error("read", path, &e);
                    e.errno()
                })?;
                if !found {
                    return Err(libc::ENOENT);
                }
                view::render_ref(&self.rec.value, out);
                Ok(())
            }
            Kind::Log => {
                let name = path.strip_prefix(b"logs/").unwrap_or(path);
                self.still(path, kind)?;
                let mut logs = std::mem::take(&mut self.logs);
                let r = self.src.read_log(name, &mut logs);
                if let Err(e) = &r {
                    log_error("read", path, e);
                }
                view::render_log(&logs, hash, out);
                logs.clear();
                self.logs = logs;
                r.map_err(|e| e.errno())
            }
        }
    }

    /// The listing of a directory, from the cache or built now (and cached).
    fn listing(&mut self, path: &[u8]) -> Result<Arc<Vec<Entry>>, i32> {
        if let Some(e) = self.dirs.get(path) {
            return Ok(e.clone());
        }
        self.still(path, Kind::Dir)?;
        let mut out = Vec::new();
        view::list_dir(self.src.as_mut(), &mut self.scratch, path, &mut out).map_err(|e| {
            log_error("readdir", path, &e);
            e.errno()
        })?;
        out.shrink_to_fit();
        let arc = Arc::new(out);
        if arc.len() <= DIR_CACHE_MAX_ENTRIES {
            self.dirs.put(path.to_vec(), arc.clone());
        }
        Ok(arc)
    }
}

/// How long the watcher waits between checks when inotify is unavailable.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);
