//! `$GIT_DIR/reftable`: the stack of tables listed in `tables.list`, read, reloaded,
//! appended to and compacted with git's protocol (reftable-format.md §7).
//!
//! * **Lookups** go through one cached merged ref iterator, reseeked for every lookup and
//!   dropped only when a reload changes the table set ([`Stack::generation`]).
//! * **Writes** hold `tables.list.lock`, write one table through the stack's single
//!   [`TableWriter`] (its buffers reused for every table), then run one fsync round: the
//!   table, the new list, the directory. See [`crate::transaction`].
//! * **Compaction** follows git's geometric rule with table locks, so a concurrent git is
//!   safe (§7.6, §7.7).

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::format::{HashKind, LogRecord, RefRecord, RefValue};
use crate::fsio;
use crate::lockfile::{self, LockFile};
use crate::merged::{BoxLogIter, BoxRefIter, MergedLogIter, MergedRefIter};
use crate::table::{LogIter, RefIter, Table, TableWriter, WriteOptions};
use crate::{Error, Result};

/// Options of a stack. `Default` matches git's ref backend with fsync off.
#[derive(Clone, Debug)]
pub struct StackOptions {
    /// The repository's object hash; every table must match it.
    pub hash: HashKind,
    /// Options for tables this stack writes (`hash` is overridden by [`Self::hash`]).
    pub write: WriteOptions,
    /// How long to retry `tables.list.lock`: `None` fails at once (git's library
    /// default), `Some(100ms)` is git's `reftable.lockTimeout` default,
    /// `Some(Duration::MAX)` waits forever.
    pub lock_timeout: Option<Duration>,
    /// fsync tables, `tables.list` and the directory (off for tests and benchmarks).
    pub fsync: bool,
    /// Run geometric auto-compaction after every commit.
    pub auto_compact: bool,
    /// The geometric factor (`reftable.geometricFactor`); 0 means 2.
    pub compaction_factor: u8,
    /// Mode for new tables and `tables.list`; `None` is `0666 & ~umask`.
    pub default_permissions: Option<u32>,
}

impl Default for StackOptions {
    fn default() -> Self {
        StackOptions {
            hash: HashKind::Sha1,
            write: WriteOptions::default(),
            lock_timeout: Some(Duration::from_millis(100)),
            fsync: false,
            auto_compact: true,
            compaction_factor: 2,
            default_permissions: None,
        }
    }
}

/// Counters a stack keeps about its own work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackStats {
    /// fsyncs of files (new tables and `tables.list.lock`).
    pub file_fsyncs: u64,
    /// fsyncs of the reftable directory.
    pub dir_fsyncs: u64,
    /// Tables added by transactions.
    pub tables_added: u64,
    /// Compactions attempted (git's `stats.attempts`).
    pub compaction_attempts: u64,
    /// Compactions that failed (git's `stats.failures`).
    pub compaction_failures: u64,
    /// Compactions that replaced tables.
    pub compactions: u64,
    /// Records written by compactions (git's `entries_written`).
    pub entries_written: u64,
    /// Reloads that changed the table set.
    pub reloads: u64,
    /// Reload attempts retried because a listed table vanished (concurrent compaction).
    pub reload_retries: u64,
}

/// Progress of a long compaction, passed to the progress hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactionProgress {
    /// Records written so far.
    pub records: u64,
    /// Bytes of input tables (a rough measure of the total work).
    pub input_bytes: u64,
    /// True for the final call.
    pub done: bool,
}

/// An open `tables.list` and its `(dev, ino)`.
type ListHandle = (File, (u64, u64));

/// What identifies a table file's content on disk: device, inode, size and
/// modification time (seconds, nanoseconds). A table is reused across reloads only while
/// its file keeps the identity it had when it was opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
}

impl FileId {
    fn of(m: &fs::Metadata) -> FileId {
        FileId {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
        }
    }
}

/// How often [`Stack::reload`] re-checks the identity of every table file when
/// `tables.list` itself did not change (the list is checked on every call).
pub const TABLE_RECHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Reflog expiry applied while compacting (git's `reftable_log_expiry_config`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogExpiry {
    /// Drop entries older than this time (seconds since the epoch); 0 = keep all.
    pub time: u64,
    /// Drop entries with a lower update index; 0 = keep all.
    pub min_update_index: u64,
}

type ReloadHook = Box<dyn FnMut(u64) + Send>;
type ProgressHook = Box<dyn FnMut(CompactionProgress) + Send>;

/// A reftable stack: `tables.list` plus its tables.
pub struct Stack {
    dir: PathBuf,
    list_path: PathBuf,
    lock_path: PathBuf,
    opts: StackOptions,
    perms: u32,
    names: Vec<String>,
    tables: Vec<Arc<Table>>,
    /// The identity of each table's file when it was opened (parallel to `tables`).
    ids: Vec<FileId>,
    /// When the table identities were last compared with the files.
    tables_checked: Instant,
    /// `tables.list` kept open after a reload so its inode cannot be reused while cached.
    list_file: Option<File>,
    list_id: Option<(u64, u64)>,
    generation: u64,
    cached: Option<MergedRefIter>,
    writer: Option<TableWriter>,
    pub(crate) stats: StackStats,
    on_reload: Option<ReloadHook>,
    progress: Option<ProgressHook>,
}

impl std::fmt::Debug for Stack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stack")
            .field("dir", &self.dir)
            .field("names", &self.names)
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

/// The name git gives a table: `0x%012x-0x%012x-%08x.ref`.
pub fn table_name(min: u64, max: u64, rand: u32) -> String {
    format!("0x{min:012x}-0x{max:012x}-{rand:08x}.ref")
}

/// Parses `tables.list` content: one name per line, empty lines skipped. Names must be
/// plain file names (no `/`, not `.`/`..`).
pub fn parse_tables_list(content: &[u8], file: &str) -> Result<Vec<String>> {
    let mut names = Vec::new();
    let mut offset = 0u64;
    for line in content.split(|&b| b == b'\n') {
        if !line.is_empty() {
            let name = std::str::from_utf8(line)
                .map_err(|_| Error::format(file, offset, "table name is not UTF-8"))?;
            if name.contains('/') || name == "." || name == ".." || name.contains('\0') {
                return Err(Error::format(
                    file,
                    offset,
                    format!("invalid table name {name:?}"),
                ));
            }
            names.push(name.to_owned());
        }
        offset += line.len() as u64 + 1;
    }
    Ok(names)
}

/// git's `suggest_compaction_segment`: for table sizes (oldest first) and a geometric
/// factor, the half-open range `[start, end)` to compact, or `None`.
pub fn suggest_compaction_segment(sizes: &[u64], factor: u8) -> Option<(usize, usize)> {
    let f = u64::from(if factor == 0 { 2 } else { factor });
    let n = sizes.len();
    if n <= 1 {
        return None;
    }
    let mut i = n - 1;
    let mut found = None;
    while i > 0 {
        if sizes[i - 1] < f.saturating_mul(sizes[i]) {
            found = Some(i);
            break;
        }
        i -= 1;
    }
    let i = found?;
    let end = i + 1;
    let mut bytes = sizes[i];
    let mut start = end;
    let mut j = i;
    while j > 0 {
        let cur = bytes;
        bytes = bytes.saturating_add(sizes[j - 1]);
        if sizes[j - 1] < f.saturating_mul(cur) {
            start = j - 1;
        }
        j -= 1;
    }
    (end > start).then_some((start, end))
}

fn is_not_found(e: &Error) -> bool {
    match e {
        Error::NotExist(_) => true,
        Error::Io { source, .. } => source.kind() == io::ErrorKind::NotFound,
        _ => false,
    }
}

/// Whether `name` is a table file name (git's `is_table_name`: it ends in `.ref`).
fn is_table_name(name: &str) -> bool {
    name.ends_with(".ref")
}

/// Reads `tables.list` through an open descriptor so that the `(dev, ino)` cached with
/// the names belongs to the content read.
///
/// A missing `tables.list` is an empty stack only in a directory without tables (a
/// fresh repository, as git reads it); next to tables it is an error naming the file:
/// the list was moved or deleted, and "empty" would hide every ref (and let cleanup
/// delete the tables).
fn read_list(path: &Path) -> Result<(Vec<String>, Option<ListHandle>)> {
    let mut f = match fsio::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            missing_list_error(path)?;
            return Ok((Vec::new(), None));
        }
        Err(e) => return Err(Error::io(path, e)),
    };
    let meta = f.metadata().map_err(|e| Error::io(path, e))?;
    let mut content = Vec::with_capacity(meta.len().min(1 << 20) as usize);
    fsio::read_to_end(&mut f, path, &mut content).map_err(|e| Error::io(path, e))?;
    let names = parse_tables_list(&content, &path.display().to_string())?;
    Ok((names, Some((f, (meta.dev(), meta.ino())))))
}

/// For a missing `tables.list`: `Ok` (an empty stack) when its directory holds no table,
/// else the error that says so.
pub fn missing_list_error(list: &Path) -> Result<()> {
    let dir = list.parent().unwrap_or(Path::new("."));
    let entries = fsio::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    let mut tables = 0usize;
    let mut example = String::new();
    for e in entries {
        let e = e.map_err(|e| Error::io(dir, e))?;
        if let Some(n) = e.file_name().to_str().filter(|n| is_table_name(n)) {
            tables += 1;
            if example.is_empty() {
                example = n.to_owned();
            }
        }
    }
    if tables == 0 {
        return Ok(());
    }
    Err(Error::io(
        list,
        io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "missing, but the directory holds {tables} table(s) ({example}{}); refusing \
                 to read the stack as empty: restore tables.list",
                if tables > 1 { ", ..." } else { "" }
            ),
        ),
    ))
}

impl Stack {
    /// Opens the stack in `dir` (`$GIT_DIR/reftable`), which must exist. A missing
    /// `tables.list` is an empty stack when the directory holds no table, and an
    /// error otherwise.
    pub fn open(dir: impl Into<PathBuf>, mut opts: StackOptions) -> Result<Stack> {
        let dir = dir.into();
        let meta = fs::metadata(&dir).map_err(|e| Error::io(&dir, e))?;
        if !meta.is_dir() {
            return Err(Error::io(
                &dir,
                io::Error::new(io::ErrorKind::NotADirectory, "not a directory"),
            ));
        }
        opts.write.hash = opts.hash;
        let perms = opts
            .default_permissions
            .unwrap_or_else(|| lockfile::default_permissions(0))
            & 0o7777;
        let mut st = Stack {
            list_path: dir.join("tables.list"),
            lock_path: dir.join("tables.list.lock"),
            dir,
            opts,
            perms,
            names: Vec::new(),
            tables: Vec::new(),
            ids: Vec::new(),
            tables_checked: Instant::now(),
            list_file: None,
            list_id: None,
            generation: 0,
            cached: None,
            writer: None,
            stats: StackStats::default(),
            on_reload: None,
            progress: None,
        };
        st.reload_now()?;
        Ok(st)
    }

    /// The reftable directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The options the stack was opened with.
    pub fn options(&self) -> &StackOptions {
        &self.opts
    }

    /// Changes options (write options, fsync, auto-compaction, timeouts). The hash stays.
    pub fn set_options(&mut self, mut opts: StackOptions) {
        opts.hash = self.opts.hash;
        opts.write.hash = opts.hash;
        if let Some(p) = opts.default_permissions {
            self.perms = p & 0o7777;
        }
        self.opts = opts;
    }

    /// The permission bits given to new tables and `tables.list`.
    pub fn permissions(&self) -> u32 {
        self.perms
    }

    /// Table file names, oldest first.
    pub fn table_names(&self) -> &[String] {
        &self.names
    }

    /// The open tables, oldest first.
    pub fn tables(&self) -> &[Arc<Table>] {
        &self.tables
    }

    /// Counter that changes whenever a reload changes the table set.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The stack's counters (fsyncs, tables, compactions).
    pub fn stats(&self) -> StackStats {
        self.stats
    }

    /// Sets a hook called with the new generation after every reload that changed the
    /// table set (after the cached iterator was dropped).
    pub fn set_on_reload(&mut self, hook: Option<Box<dyn FnMut(u64) + Send>>) {
        self.on_reload = hook;
    }

    /// Sets a hook that receives compaction progress (about every 64k records).
    pub fn set_progress(&mut self, hook: Option<Box<dyn FnMut(CompactionProgress) + Send>>) {
        self.progress = hook;
    }

    /// The update index the next table gets: newest max + 1, or 1 when empty.
    pub fn next_update_index(&self) -> u64 {
        self.tables.last().map_or(1, |t| t.max_update_index() + 1)
    }

    /// Whether the loaded table set is current: `tables.list` unchanged (one `stat` when
    /// its `(dev, ino)` is cached, else a comparison of its names) and every table file
    /// still the file that was opened (device, inode, size, mtime).
    pub fn is_up_to_date(&self) -> Result<bool> {
        Ok(self.list_up_to_date()? && !self.tables_changed())
    }

    fn list_up_to_date(&self) -> Result<bool> {
        if let Some(id) = self.list_id {
            return match fs::metadata(&self.list_path) {
                Ok(m) => Ok((m.dev(), m.ino()) == id),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(self.names.is_empty()),
                Err(e) => Err(Error::io(&self.list_path, e)),
            };
        }
        let (names, _) = read_list(&self.list_path)?;
        Ok(names == self.names)
    }

    /// Whether some table file is no longer the file that was opened (replaced,
    /// rewritten or gone).
    fn tables_changed(&self) -> bool {
        self.names.iter().zip(&self.ids).any(|(name, id)| {
            fs::metadata(self.dir.join(name)).map_or(true, |m| FileId::of(&m) != *id)
        })
    }

    /// Reloads if `tables.list` changed, or (checked at most every
    /// [`TABLE_RECHECK_INTERVAL`]) a table file changed on disk. Returns whether the
    /// table set changed.
    pub fn reload(&mut self) -> Result<bool> {
        if self.list_up_to_date()? {
            if self.tables_checked.elapsed() < TABLE_RECHECK_INTERVAL {
                return Ok(false);
            }
            self.tables_checked = Instant::now();
            if !self.tables_changed() {
                return Ok(false);
            }
        }
        self.reload_now()
    }

    /// Re-reads `tables.list` unconditionally, reusing already open tables. When a
    /// listed table is missing (a concurrent compaction), retries as git does: only if
    /// the list changed meanwhile, with a growing randomised delay, for up to 3 s but at
    /// least 3 attempts.
    pub fn reload_now(&mut self) -> Result<bool> {
        let deadline = Instant::now() + Duration::from_secs(3);
        let mut tries = 0u32;
        let mut delay_ms: u64 = 0;
        loop {
            tries += 1;
            let (names, handle) = read_list(&self.list_path)?;
            match self.open_tables(&names) {
                Ok((tables, ids, reopened)) => {
                    let changed = reopened || names != self.names;
                    self.install(names, tables, ids, handle, changed);
                    return Ok(changed);
                }
                Err(e) if is_not_found(&e) => {
                    if tries >= 3 && Instant::now() >= deadline {
                        return Err(e);
                    }
                    let (again, _) = read_list(&self.list_path)?;
                    if again == names {
                        return Err(e);
                    }
                    self.stats.reload_retries += 1;
                    delay_ms = delay_ms + ((delay_ms * u64::from(lockfile::rand_u32())) >> 32) + 1;
                    std::thread::sleep(Duration::from_millis(delay_ms));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Opens the tables `names`, reusing open ones whose file kept its identity. Returns
    /// the tables, their identities, and whether a table of the same name was re-opened
    /// because its file changed.
    fn open_tables(&self, names: &[String]) -> Result<(Vec<Arc<Table>>, Vec<FileId>, bool)> {
        let mut out = Vec::with_capacity(names.len());
        let mut ids = Vec::with_capacity(names.len());
        let mut reopened = false;
        for name in names {
            let path = self.dir.join(name);
            let not_exist = |e: Error| {
                if is_not_found(&e) {
                    Error::NotExist(path.clone())
                } else {
                    e
                }
            };
            // The identity is taken before opening: a file replaced in between is
            // noticed (and re-opened) at the next check, never missed.
            let id = fs::metadata(&path)
                .map(|m| FileId::of(&m))
                .map_err(|e| not_exist(Error::io(&path, e)))?;
            if let Some(pos) = self.names.iter().position(|n| n == name) {
                if let (Some(t), Some(old)) = (self.tables.get(pos), self.ids.get(pos)) {
                    if *old == id {
                        out.push(Arc::clone(t));
                        ids.push(id);
                        continue;
                    }
                    reopened = true;
                }
            }
            fsio::before_open(&path).map_err(|e| not_exist(Error::io(&path, e)))?;
            let table = Table::open(&path).map_err(not_exist)?;
            if table.hash_kind() != self.opts.hash {
                return Err(Error::format(
                    name.clone(),
                    0,
                    format!(
                        "table hash {} does not match the stack's {}",
                        table.hash_kind().name(),
                        self.opts.hash.name()
                    ),
                ));
            }
            out.push(table);
            ids.push(id);
        }
        Ok((out, ids, reopened))
    }

    /// Installs a freshly read table set. Tables of the old set that are not in the new
    /// one are only closed, never unlinked: git's reload unlinks them (for Windows), but
    /// a reload cannot prove them garbage (a list moved away and back, a list another
    /// tool wrote wrongly); the compaction that replaced them unlinks them itself, and
    /// [`Stack::clean`] removes leftovers under the lock.
    fn install(
        &mut self,
        names: Vec<String>,
        tables: Vec<Arc<Table>>,
        ids: Vec<FileId>,
        handle: Option<ListHandle>,
        changed: bool,
    ) {
        self.names = names;
        self.tables = tables;
        self.ids = ids;
        self.tables_checked = Instant::now();
        match handle {
            Some((f, id)) => {
                self.list_file = Some(f);
                self.list_id = Some(id);
            }
            None => {
                self.list_file = None;
                self.list_id = None;
            }
        }
        if changed {
            self.generation += 1;
            self.stats.reloads += 1;
            self.cached = None;
            if let Some(hook) = self.on_reload.as_mut() {
                hook(self.generation);
            }
        }
    }

    fn sub_ref_iters(tables: &[Arc<Table>]) -> Vec<BoxRefIter> {
        tables
            .iter()
            .map(|t| Box::new(t.ref_iter()) as BoxRefIter)
            .collect()
    }

    fn sub_log_iters(tables: &[Arc<Table>]) -> Vec<BoxLogIter> {
        tables
            .iter()
            .map(|t| Box::new(t.log_iter()) as BoxLogIter)
            .collect()
    }

    /// A fresh merged ref iterator over the current tables (tombstones returned). It
    /// keeps its tables alive across reloads.
    pub fn ref_iter(&self) -> MergedRefIter {
        MergedRefIter::new(Self::sub_ref_iters(&self.tables))
    }

    /// A fresh merged log iterator over the current tables (tombstones returned).
    pub fn log_iter(&self) -> MergedLogIter {
        MergedLogIter::new(Self::sub_log_iters(&self.tables))
    }

    /// Runs `f` with the one cached merged ref iterator (created on first use, dropped
    /// by reloads that change the table set). `f` must seek before reading.
    pub fn with_cached_iter<R>(
        &mut self,
        f: impl FnOnce(&mut MergedRefIter) -> Result<R>,
    ) -> Result<R> {
        if self.cached.is_none() {
            self.cached = Some(self.ref_iter());
        }
        match self.cached.as_mut() {
            Some(it) => f(it),
            None => Err(Error::Api("cached iterator missing".into())),
        }
    }

    /// Looks `name` up through the cached iterator and passes the live record (never a
    /// tombstone) to `f`. Allocates nothing once the iterator is warm.
    pub fn lookup<R>(&mut self, name: &[u8], f: impl FnOnce(Option<&RefRecord>) -> R) -> Result<R> {
        self.with_cached_iter(|it| {
            it.seek(name)?;
            let rec = it.next()?.filter(|r| r.name == name && !r.is_deletion());
            Ok(f(rec))
        })
    }

    /// Reads one ref through the cached iterator; `None` when missing or deleted.
    pub fn read_ref(&mut self, name: &[u8]) -> Result<Option<RefRecord>> {
        self.lookup(name, |r| r.cloned())
    }

    /// Like [`read_ref`](Self::read_ref) into a caller's buffer (no allocation once
    /// `out` has grown). Returns whether the ref exists.
    pub fn read_ref_into(&mut self, name: &[u8], out: &mut RefRecord) -> Result<bool> {
        self.lookup(name, |r| match r {
            Some(r) => {
                crate::merged::copy_ref(out, r);
                true
            }
            None => false,
        })
    }

    /// Calls `f` for every live ref whose name starts with `prefix`, in order, through
    /// the cached iterator. `f` returns `false` to stop.
    pub fn for_each_ref(
        &mut self,
        prefix: &[u8],
        mut f: impl FnMut(&RefRecord) -> bool,
    ) -> Result<()> {
        self.with_cached_iter(|it| {
            it.seek(prefix)?;
            while let Some(r) = it.next()? {
                if !r.name.starts_with(prefix) {
                    break;
                }
                if r.is_deletion() {
                    continue;
                }
                if !f(r) {
                    break;
                }
            }
            Ok(())
        })
    }

    /// The reflog of `name`, newest first, without tombstones and existence markers.
    pub fn read_log(&self, name: &[u8]) -> Result<Vec<LogRecord>> {
        let mut it = self.log_iter();
        it.seek(name, u64::MAX)?;
        let mut out = Vec::new();
        while let Some(l) = it.next()? {
            if l.refname != name {
                break;
            }
            if l.deleted || is_existence_marker(l) {
                continue;
            }
            out.push(l.clone());
        }
        Ok(out)
    }

    /// Whether `name` has a reflog: any non-tombstone log record, the existence marker
    /// included.
    pub fn reflog_exists(&self, name: &[u8]) -> Result<bool> {
        let mut it = self.log_iter();
        it.seek(name, u64::MAX)?;
        while let Some(l) = it.next()? {
            if l.refname != name {
                return Ok(false);
            }
            if !l.deleted {
                return Ok(true);
            }
        }
        Ok(false)
    }

    // ----- writing ------------------------------------------------------------------

    pub(crate) fn lock_list(&self) -> Result<LockFile> {
        let lock = LockFile::acquire(&self.lock_path, self.opts.lock_timeout)?;
        lockfile::chmod(lock.path(), self.perms)?;
        Ok(lock)
    }

    fn sync_file(&mut self, f: &File, path: &Path) -> Result<()> {
        if self.opts.fsync {
            fsio::fsync(f, path).map_err(|e| Error::io(path, e))?;
            self.stats.file_fsyncs += 1;
        }
        Ok(())
    }

    fn sync_dir(&mut self) -> Result<()> {
        if self.opts.fsync {
            lockfile::sync_dir(&self.dir)?;
            self.stats.dir_fsyncs += 1;
        }
        Ok(())
    }

    /// Writes `bytes` as a new table file: temp name `<prefix>.temp.XXXXXX`, chmod,
    /// write, fsync, rename to `0x<min>-0x<max>-<rand>.ref`. Returns the final name.
    fn write_table_file(&mut self, bytes: &[u8], min: u64, max: u64) -> Result<String> {
        let prefix = format!("0x{min:012x}-0x{max:012x}-{:08x}", lockfile::rand_u32());
        let (mut f, tmp) = lockfile::create_temp(&self.dir, &prefix)?;
        let result = (|| {
            lockfile::chmod(&tmp, self.perms)?;
            fsio::write_all(&mut f, &tmp, bytes).map_err(|e| Error::io(&tmp, e))?;
            self.sync_file(&f, &tmp)?;
            drop(f);
            let name = table_name(min, max, lockfile::rand_u32());
            let path = self.dir.join(&name);
            fsio::rename(&tmp, &path).map_err(|e| Error::io(&path, e))?;
            Ok(name)
        })();
        if result.is_err() {
            // Never listed: garbage (git's reftable_addition_close).
            let _ = fsio::remove_file(&tmp);
        }
        result
    }

    /// Writes `names` into the held list lock, fsyncs it, renames it over `tables.list`
    /// and fsyncs the directory. The error says whether the rename happened: once it
    /// did, the new list is what every reader sees, and the tables it names must stay.
    fn commit_list(&mut self, mut lock: LockFile, names: &[String]) -> Result<(), CommitError> {
        let mut content = Vec::with_capacity(names.len() * 48);
        for n in names {
            content.extend_from_slice(n.as_bytes());
            content.push(b'\n');
        }
        let path = lock.path().to_path_buf();
        let before = |e| CommitError {
            committed: false,
            error: e,
        };
        {
            let f = lock.file().map_err(before)?;
            fsio::write_all(f, &path, &content).map_err(|e| before(Error::io(&path, e)))?;
        }
        if self.opts.fsync {
            let f = lock.file().map_err(before)?;
            fsio::fsync(f, &path).map_err(|e| before(Error::io(&path, e)))?;
            self.stats.file_fsyncs += 1;
        }
        lock.commit(&self.list_path).map_err(before)?;
        self.sync_dir().map_err(|error| CommitError {
            committed: true,
            error,
        })
    }

    /// Takes the writer (created on first use) out of the stack; put it back with
    /// [`put_writer`](Self::put_writer).
    pub(crate) fn take_writer(&mut self) -> TableWriter {
        let mut w = self
            .writer
            .take()
            .unwrap_or_else(|| TableWriter::new(self.opts.write));
        w.set_options(self.opts.write);
        w
    }

    pub(crate) fn put_writer(&mut self, w: TableWriter) {
        self.writer = Some(w);
    }

    /// Adds the table `writer` just finished (or nothing for an empty table) under the
    /// held `lock`: one fsync round, reload, then auto-compaction. Returns the new
    /// table's name.
    pub(crate) fn add_finished_table(
        &mut self,
        lock: LockFile,
        writer: &mut TableWriter,
        min: u64,
        max: u64,
    ) -> Result<Option<String>> {
        let bytes = match writer.finish() {
            Ok(b) => b,
            Err(Error::EmptyTable) => return Ok(None),
            Err(e) => return Err(e),
        };
        if min < self.next_update_index() {
            return Err(Error::Api(format!(
                "table update index {min} below the stack's next {}",
                self.next_update_index()
            )));
        }
        let name = self.write_table_file(bytes, min, max)?;
        let mut names = self.names.clone();
        names.push(name.clone());
        if let Err(e) = self.commit_list(lock, &names) {
            if e.committed {
                // tables.list names the new table: it stays. The commit is visible but
                // not known durable; report that, and re-read the stack.
                self.stats.tables_added += 1;
                if self.reload_now().is_err() {
                    self.list_id = None;
                }
            } else {
                // Never listed: garbage (git's reftable_addition_close).
                let _ = fsio::remove_file(&self.dir.join(&name));
                self.list_id = None;
            }
            return Err(e.error);
        }
        self.stats.tables_added += 1;
        // The table is committed: a failing reload must not report the commit as failed.
        // Forget the cached list identity so the next operation re-reads the list.
        if self.reload_now().is_err() {
            self.list_id = None;
        }
        if self.opts.auto_compact {
            self.auto_compact_quiet();
        }
        Ok(Some(name))
    }

    /// Adds one table built by `build` with update indexes `[min, max]` (`min` must be
    /// at least [`next_update_index`](Self::next_update_index) after reload): a
    /// low-level addition; most callers want [`Stack::transaction`].
    pub fn add_table(
        &mut self,
        min: u64,
        max: u64,
        build: impl FnOnce(&mut TableWriter) -> Result<()>,
    ) -> Result<Option<String>> {
        let lock = self.lock_list()?;
        if !self.is_up_to_date()? {
            self.reload_now()?;
        }
        let mut w = self.take_writer();
        let r = w.begin(min, max).and_then(|()| build(&mut w));
        let r = r.and_then(|()| self.add_finished_table(lock, &mut w, min, max));
        self.put_writer(w);
        r
    }

    // ----- compaction ---------------------------------------------------------------

    fn segment_sizes(&self) -> Vec<u64> {
        let overhead = (self.opts.hash.footer_size() + self.opts.hash.header_size() - 1) as u64;
        self.tables
            .iter()
            .map(|t| t.file_size().saturating_sub(overhead))
            .collect()
    }

    /// Whether auto-compaction would do something now.
    pub fn compaction_required(&self) -> bool {
        self.tables.len() >= 2
            && suggest_compaction_segment(&self.segment_sizes(), self.opts.compaction_factor)
                .is_some()
    }

    /// Geometric auto-compaction (best effort). Returns whether tables were merged.
    pub fn auto_compact(&mut self) -> Result<bool> {
        match suggest_compaction_segment(&self.segment_sizes(), self.opts.compaction_factor) {
            Some((start, end)) => self.compact_range(start, end - 1, true),
            None => Ok(false),
        }
    }

    fn auto_compact_quiet(&mut self) {
        // git ignores lock and outdated errors here; other errors do not undo the
        // committed transaction either.
        let _ = self.auto_compact();
    }

    /// Compacts every table into one (no best effort: a locked table is an error).
    pub fn compact_all(&mut self) -> Result<bool> {
        let last = self.tables.len().saturating_sub(1);
        self.compact_range(0, last, false)
    }

    /// What `git pack-refs` does: full (or `auto`) compaction, then [`clean`](Self::clean).
    pub fn pack(&mut self, auto: bool) -> Result<bool> {
        let done = if auto {
            self.auto_compact()?
        } else {
            self.compact_all()?
        };
        self.clean()?;
        Ok(done)
    }

    /// Compacts the tables `first..=last` (git's `stack_compact_range`). With
    /// `best_effort`, a locked table shrinks the range to the newer locked tables if at
    /// least two are left. Tombstones are dropped only when `first == 0`.
    pub fn compact_range(&mut self, first: usize, last: usize, best_effort: bool) -> Result<bool> {
        self.compact_range_with(first, last, best_effort, None)
    }

    /// Full compaction that also expires reflog entries (git's
    /// `reftable_stack_compact_all` with a `reftable_log_expiry_config`). git's ref
    /// backend never passes one (it expires with tombstones); this is for tools.
    pub fn compact_all_with_expiry(&mut self, expiry: LogExpiry) -> Result<bool> {
        let last = self.tables.len().saturating_sub(1);
        self.compact_range_with(0, last, false, Some(expiry))
    }

    /// [`compact_range`](Self::compact_range) with an optional reflog expiry; with one,
    /// a single table is rewritten too.
    pub fn compact_range_with(
        &mut self,
        first: usize,
        last: usize,
        best_effort: bool,
        expiry: Option<LogExpiry>,
    ) -> Result<bool> {
        self.stats.compaction_attempts += 1;
        let r = self.compact_range_inner(first, last, best_effort, expiry);
        if r.is_err() {
            self.stats.compaction_failures += 1;
        }
        r
    }

    fn compact_range_inner(
        &mut self,
        mut first: usize,
        last: usize,
        best_effort: bool,
        expiry: Option<LogExpiry>,
    ) -> Result<bool> {
        // As git 2.47: the list lock is taken even for a range with nothing to merge,
        // so `pack-refs` on a locked stack of one table reports "data is locked".
        let list_lock = self.lock_list()?;
        if first > last || (expiry.is_none() && first == last) || last >= self.tables.len() {
            return Ok(false);
        }
        if !self.is_up_to_date()? {
            return Err(Error::Outdated);
        }
        // Lock the tables, newest first.
        let mut table_locks = Vec::new();
        let mut i = last + 1;
        while i > first {
            i -= 1;
            let lock_path = self.dir.join(format!("{}.lock", self.names[i]));
            match LockFile::marker(lock_path) {
                Ok(l) => table_locks.push(l),
                Err(Error::Lock(p)) => {
                    if best_effort && table_locks.len() >= 2 {
                        first = i + 1;
                        break;
                    }
                    return Err(Error::Lock(p));
                }
                Err(e) => return Err(e),
            }
        }
        drop(list_lock);

        let range: Vec<Arc<Table>> = self.tables[first..=last].to_vec();
        let old_names: Vec<String> = self.names[first..=last].to_vec();
        let min = range.first().map_or(0, |t| t.min_update_index());
        let max = range.last().map_or(0, |t| t.max_update_index());
        let drop_tombstones = first == 0;
        let input_bytes: u64 = range.iter().map(|t| t.file_size()).sum();

        let mut w = self.take_writer();
        let written = self.write_compacted(
            &mut w,
            &range,
            (min, max),
            drop_tombstones,
            input_bytes,
            expiry,
        );
        let new_name = match written {
            Ok(Some(n)) => {
                self.stats.entries_written += n;
                match w.finish() {
                    Ok(bytes) => {
                        let prefix =
                            format!("0x{min:012x}-0x{max:012x}-{:08x}", lockfile::rand_u32());
                        let r = self.write_temp_for_compaction(bytes, &prefix);
                        match r {
                            Ok(tmp) => Some(tmp),
                            Err(e) => {
                                self.put_writer(w);
                                return Err(e);
                            }
                        }
                    }
                    Err(Error::EmptyTable) => None,
                    Err(e) => {
                        self.put_writer(w);
                        return Err(e);
                    }
                }
            }
            Ok(None) => None,
            Err(e) => {
                self.put_writer(w);
                return Err(e);
            }
        };
        self.put_writer(w);

        // The new table is garbage until the new list names it.
        let cleanup = |tmp: &Option<PathBuf>| {
            if let Some(t) = tmp {
                let _ = fsio::remove_file(t);
            }
        };
        let list_lock = match self.lock_list() {
            Ok(l) => l,
            Err(e) => {
                cleanup(&new_name);
                return Err(e);
            }
        };
        // The list may have grown (or been compacted) meanwhile: find our range again.
        let current = if self.is_up_to_date()? {
            self.names.clone()
        } else {
            match read_list(&self.list_path) {
                Ok((n, _)) => n,
                Err(e) => {
                    cleanup(&new_name);
                    return Err(e);
                }
            }
        };
        let pos = current.iter().position(|n| Some(n) == old_names.first());
        let Some(pos) =
            pos.filter(|&p| current.get(p..p + old_names.len()) == Some(&old_names[..]))
        else {
            cleanup(&new_name);
            return Err(Error::Outdated);
        };
        let mut names: Vec<String> = current[..pos].to_vec();
        let mut final_path = None;
        if let Some(tmp) = &new_name {
            let final_name = table_name(min, max, lockfile::rand_u32());
            let path = self.dir.join(&final_name);
            if let Err(e) = fsio::rename(tmp, &path) {
                cleanup(&new_name);
                return Err(Error::io(&path, e));
            }
            names.push(final_name);
            final_path = Some(path);
        }
        names.extend_from_slice(&current[pos + old_names.len()..]);
        if let Err(e) = self.commit_list(list_lock, &names) {
            if e.committed {
                // The new list names the new table and no longer the old ones, but it is
                // not known durable (a crash could bring the old list back): keep every
                // table; `clean` removes the old ones later.
                self.stats.compactions += 1;
                if self.reload_now().is_err() {
                    self.list_id = None;
                }
            } else {
                // Not listed: garbage (git unlinks the new table on these errors too).
                if let Some(p) = &final_path {
                    let _ = fsio::remove_file(p);
                }
                self.list_id = None;
            }
            return Err(e.error);
        }
        self.stats.compactions += 1;
        let reload = self.reload_now();
        // Replaced by the committed list, and locked by us since before it was read:
        // garbage (git unlinks them here too; a reader may still have them open).
        for n in &old_names {
            let _ = fsio::remove_file(&self.dir.join(n));
        }
        drop(table_locks);
        if reload.is_err() {
            self.list_id = None;
        }
        Ok(true)
    }

    fn write_temp_for_compaction(&mut self, bytes: &[u8], prefix: &str) -> Result<PathBuf> {
        let (mut f, tmp) = lockfile::create_temp(&self.dir, prefix)?;
        let r = (|| {
            lockfile::chmod(&tmp, self.perms)?;
            fsio::write_all(&mut f, &tmp, bytes).map_err(|e| Error::io(&tmp, e))?;
            self.sync_file(&f, &tmp)
        })();
        match r {
            Ok(()) => Ok(tmp),
            Err(e) => {
                let _ = fsio::remove_file(&tmp);
                Err(e)
            }
        }
    }

    /// Merges `range` into `w` (refs, then logs). Returns the number of records, or
    /// `None` when there is nothing to write.
    fn write_compacted(
        &mut self,
        w: &mut TableWriter,
        range: &[Arc<Table>],
        (min, max): (u64, u64),
        drop_tombstones: bool,
        input_bytes: u64,
        expiry: Option<LogExpiry>,
    ) -> Result<Option<u64>> {
        w.begin(min, max)?;
        let mut count = 0u64;
        let report = |count: u64, done: bool, hook: &mut Option<ProgressHook>| {
            if let Some(h) = hook.as_mut() {
                h(CompactionProgress {
                    records: count,
                    input_bytes,
                    done,
                });
            }
        };
        let mut refs = MergedRefIter::new(Self::sub_ref_iters(range));
        refs.suppress_deletions(drop_tombstones);
        refs.seek(b"")?;
        while let Some(r) = refs.next()? {
            w.add_ref(r)?;
            count += 1;
            if count % 65536 == 0 {
                report(count, false, &mut self.progress);
            }
        }
        let mut logs = MergedLogIter::new(Self::sub_log_iters(range));
        logs.suppress_deletions(drop_tombstones);
        logs.seek(b"", u64::MAX)?;
        while let Some(l) = logs.next()? {
            if let Some(e) = expiry {
                if (e.min_update_index > 0 && l.update_index < e.min_update_index)
                    || (e.time > 0 && l.time < e.time)
                {
                    continue;
                }
            }
            w.add_log(l)?;
            count += 1;
            if count % 65536 == 0 {
                report(count, false, &mut self.progress);
            }
        }
        report(count, true, &mut self.progress);
        Ok((count > 0).then_some(count))
    }

    /// git's `reftable_stack_clean`: under the list lock, reload, then unlink every
    /// unlisted `*.ref` file whose max update index is at most the stack's. Files that
    /// do not parse, and files not ending in `.ref`, are left alone.
    pub fn clean(&mut self) -> Result<()> {
        let _lock = self.lock_list()?;
        self.reload()?;
        let max = self.next_update_index() - 1;
        let entries = fsio::read_dir(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if !is_table_name(name) || self.names.iter().any(|n| n == name) {
                continue;
            }
            let path = entry.path();
            if fsio::before_open(&path).is_err() {
                continue;
            }
            if let Ok(t) = Table::open(&path) {
                if t.max_update_index() <= max {
                    let _ = fsio::remove_file(&path);
                }
            }
        }
        Ok(())
    }
}

/// What [`Stack::clean_orphans`] did: files removed and files kept, each with the reason.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OrphanReport {
    /// Removed files and why they were garbage.
    pub removed: Vec<(PathBuf, String)>,
    /// Leftovers not removed and why.
    pub kept: Vec<(PathBuf, String)>,
}

/// Whether `name` is a temporary table (`0x…-0x…-….temp.XXXXXX`, git's and ours).
fn is_temp_table_name(name: &str) -> bool {
    name.starts_with("0x") && name.contains(".temp.")
}

/// A failed [`Stack::commit_list`]: the error, and whether `tables.list` was already
/// replaced when it happened.
struct CommitError {
    committed: bool,
    error: Error,
}

impl Stack {
    /// Removes the leftovers of killed writers that can be proven garbage, holding
    /// `tables.list.lock` (so no addition is running: additions hold it throughout):
    ///
    /// * `<table>.ref.lock` of a table `tables.list` does not name: only the holder of a
    ///   table's lock can drop the table from the list, so its holder is done with it;
    /// * `<table>.ref.lock` of a listed table only with `stale_locks = Some(min_age)`,
    ///   when nobody holds it open and it is at least `min_age` old (git and we close
    ///   table locks while compacting, so age is what protects a running compaction);
    /// * `*.temp.*` tables, when no listed table is locked any more: a live temporary
    ///   table belongs to an addition (which would hold the list lock we hold) or to a
    ///   compaction (which holds the locks of its listed input tables until it commits).
    ///
    /// Anything else (and anything held open by a process) is kept and reported.
    pub fn clean_orphans(&mut self, stale_locks: Option<Duration>) -> Result<OrphanReport> {
        let _lock = self.lock_list()?;
        self.reload()?;
        let mut report = OrphanReport::default();
        let mut temps = Vec::new();
        let mut listed_locks = 0usize;
        let entries = fsio::read_dir(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        let mut names: Vec<String> = entries
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .collect();
        names.sort();
        for name in names {
            let path = self.dir.join(&name);
            if is_temp_table_name(&name) {
                temps.push(path);
                continue;
            }
            let Some(table) = name.strip_suffix(".lock").filter(|t| is_table_name(t)) else {
                continue;
            };
            let Some(diag) = lockfile::diagnose(&path)? else {
                continue;
            };
            let listed = self.names.iter().any(|n| n == table);
            let why = if !diag.holders.is_empty() {
                None
            } else if !listed {
                Some(format!("lock of {table}, which tables.list does not name"))
            } else if stale_locks.is_some_and(|age| diag.is_stale(age)) {
                Some(format!("stale lock: {diag}"))
            } else {
                None
            };
            match why {
                Some(why) if lockfile::remove_diagnosed(&diag)? => report.removed.push((path, why)),
                Some(_) => {}
                None => {
                    if listed {
                        listed_locks += 1;
                    }
                    let what = if listed {
                        "lock of a listed table"
                    } else {
                        "held open"
                    };
                    report.kept.push((path, format!("{what}: {diag}")));
                }
            }
        }
        for path in temps {
            let Some(diag) = lockfile::diagnose(&path)? else {
                continue;
            };
            if listed_locks > 0 || !diag.holders.is_empty() || !diag.complete {
                let why = if listed_locks > 0 {
                    "a compaction may still be writing it (a listed table is locked)"
                } else {
                    "held open"
                };
                report.kept.push((path, format!("{why}: {diag}")));
            } else if lockfile::remove_diagnosed(&diag)? {
                report.removed.push((
                    path,
                    "temporary table of a writer that is gone (no list or table lock held)".into(),
                ));
            }
        }
        Ok(report)
    }
}

/// git's reflog existence marker: both ids null and every other field empty (its
/// message becomes `"\n"` after a compaction).
pub fn is_existence_marker(l: &LogRecord) -> bool {
    !l.deleted
        && l.old_id.is_null()
        && l.new_id.is_null()
        && l.name.is_empty()
        && l.email.is_empty()
        && l.time == 0
        && l.tz_offset == 0
        && (l.message.is_empty() || l.message == b"\n")
}

/// The value a ref record holds, for callers comparing values.
pub fn ref_value_id(v: &RefValue) -> Option<crate::ObjectId> {
    match v {
        RefValue::Val1(id) => Some(*id),
        RefValue::Val2 { value, .. } => Some(*value),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_and_iterators_can_move_between_threads() {
        fn send<T: Send>() {}
        send::<Stack>();
        send::<MergedRefIter>();
        send::<MergedLogIter>();
    }

    #[test]
    fn names_and_lists() {
        assert_eq!(
            table_name(1, 3, 0x1a9b_a01a),
            "0x000000000001-0x000000000003-1a9ba01a.ref"
        );
        assert_eq!(
            parse_tables_list(b"line1\n\nline2\nline3", "t").unwrap(),
            vec!["line1", "line2", "line3"]
        );
        assert!(parse_tables_list(b"../x\n", "t").is_err());
        let err = parse_tables_list(b"ok\n\xff\n", "tables.list").unwrap_err();
        assert!(err.to_string().contains("tables.list at offset 3"), "{err}");
    }

    #[test]
    fn suggest_compaction_segment_vectors() {
        assert_eq!(
            suggest_compaction_segment(&[512, 64, 17, 16, 9, 9, 9, 16, 2, 16], 2),
            Some((1, 10))
        );
        assert_eq!(suggest_compaction_segment(&[64, 32, 16, 8, 4, 2], 2), None);
        assert_eq!(
            suggest_compaction_segment(&[128, 32, 16, 8, 4, 3, 1], 2),
            Some((1, 6))
        );
        assert_eq!(suggest_compaction_segment(&[5], 2), None);
        assert_eq!(suggest_compaction_segment(&[], 2), None);
        assert_eq!(suggest_compaction_segment(&[10, 10], 0), Some((0, 2)));
        assert_eq!(suggest_compaction_segment(&[30, 10], 3), None);
        assert_eq!(suggest_compaction_segment(&[29, 10], 3), Some((0, 2)));
    }
}
