//! `tables.list`: parsing, reading it with its identity, opening and reloading a stack.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::{CompactionProgress, Stack, StackOptions, StackStats, TABLE_RECHECK_INTERVAL};
use crate::fsio;
use crate::lockfile::{self};
use crate::table::Table;
use crate::{Error, Result};

/// An open `tables.list` and the identity of the content read through it.
pub(super) type ListHandle = (File, ListId);

/// What identifies a file's content on disk: device, inode, size, modification time and
/// inode change time (seconds, nanoseconds). A table is reused across reloads only while
/// its file keeps the identity it had when it was opened; `tables.list` is re-read when
/// its identity changes.
///
/// `(dev, ino)` alone is git's test for `tables.list` (git always replaces it by a
/// rename); a list written in place keeps its inode, so size and times are compared too.
/// `ctime` cannot be set from user space: a rewrite that restores the old size and
/// mtime still changes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileId {
    pub(super) fn of(m: &fs::Metadata) -> FileId {
        FileId {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }

    /// The later of mtime and ctime, in nanoseconds since the epoch.
    fn changed_ns(&self) -> i128 {
        let ns = |(s, n): (i64, i64)| i128::from(s) * 1_000_000_000 + i128::from(n);
        ns(self.mtime).max(ns(self.ctime))
    }
}

/// How long after a file's last change a write may still leave its size, mtime and
/// ctime as they were: the file system's timestamp granularity (a coarse clock tick of
/// a few milliseconds on Linux; 1 or 2 s where timestamps have no nanoseconds), with
/// room for the coarse clock lagging the one we read.
fn racy_margin(id: &FileId) -> Duration {
    if id.mtime.1 == 0 && id.ctime.1 == 0 {
        Duration::from_secs(3)
    } else {
        Duration::from_millis(100)
    }
}

/// The identity of the `tables.list` content a stack holds: the file's [`FileId`] (taken
/// before its content was read) and when that content was last known to be the file's
/// (read or compared, after the read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ListId {
    file: FileId,
    verified: SystemTime,
}

/// What one look at `tables.list` found, against the content a stack holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ListCheck {
    /// Same identity, changed too long before the content was read for a write since
    /// to have left the identity as it was.
    Unchanged,
    /// Same identity, but changed so shortly before the content was read that a later
    /// write could share its timestamps (git's "racy" files): compare the content.
    Racy,
    /// Another file or another identity: re-read it.
    Changed,
}

impl ListId {
    /// Compares `now`, the list's identity as just seen, with this one (the racy-git
    /// rule: a write after the read that kept size, mtime and ctime must have come within
    /// one timestamp tick of the change before it).
    pub(super) fn check(&self, now: &FileId) -> ListCheck {
        if *now != self.file {
            return ListCheck::Changed;
        }
        let verified = match self.verified.duration_since(UNIX_EPOCH) {
            Ok(d) => i128::try_from(d.as_nanos()).unwrap_or(i128::MAX),
            Err(_) => return ListCheck::Racy,
        };
        let margin = i128::try_from(racy_margin(&self.file).as_nanos()).unwrap_or(i128::MAX);
        if self.file.changed_ns().saturating_add(margin) >= verified {
            ListCheck::Racy
        } else {
            ListCheck::Unchanged
        }
    }
}

/// Whether `content` (a `tables.list`) names exactly `names`, in order (no allocation).
pub(super) fn lists_names(content: &[u8], names: &[String]) -> bool {
    let mut want = names.iter();
    for line in content.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        match want.next() {
            Some(n) if n.as_bytes() == line => {}
            _ => return false,
        }
    }
    want.next().is_none()
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

pub(super) fn is_not_found(e: &Error) -> bool {
    match e {
        Error::NotExist(_) => true,
        Error::Io { source, .. } => source.kind() == io::ErrorKind::NotFound,
        _ => false,
    }
}

/// Whether `name` is a table file name (git's `is_table_name`: it ends in `.ref`).
pub(super) fn is_table_name(name: &str) -> bool {
    name.ends_with(".ref")
}

/// Reads `tables.list` through an open descriptor so that the `(dev, ino)` cached with
/// the names belongs to the content read.
///
/// A missing `tables.list` is an empty stack only in a directory without tables (a
/// fresh repository, as git reads it); next to tables it is an error naming the file:
/// the list was moved or deleted, and "empty" would hide every ref (and let cleanup
/// delete the tables).
pub(super) fn read_list(path: &Path) -> Result<(Vec<String>, Option<ListHandle>)> {
    let mut f = match fsio::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            missing_list_error(path)?;
            return Ok((Vec::new(), None));
        }
        Err(e) => return Err(Error::io(path, e)),
    };
    // The identity is taken before the content is read: a write in between makes the
    // next check see another identity (or a racy one), never miss the write.
    let meta = f.metadata().map_err(|e| Error::io(path, e))?;
    let mut content = Vec::with_capacity(meta.len().min(1 << 20) as usize);
    fsio::read_to_end(&mut f, path, &mut content).map_err(|e| Error::io(path, e))?;
    let id = ListId {
        file: FileId::of(&meta),
        verified: SystemTime::now(),
    };
    let names = parse_tables_list(&content, &path.display().to_string())?;
    Ok((names, Some((f, id))))
}

/// Reads `tables.list` and says whether it names exactly `names` (a missing list names
/// none). For checks under the list lock.
pub(super) fn list_is(path: &Path, names: &[String]) -> Result<bool> {
    let mut f = match fsio::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(names.is_empty()),
        Err(e) => return Err(Error::io(path, e)),
    };
    let mut content = Vec::with_capacity(names.len() * 43);
    fsio::read_to_end(&mut f, path, &mut content).map_err(|e| Error::io(path, e))?;
    Ok(lists_names(&content, names))
}

/// Whether the open `tables.list` file `f` (at `path`, for errors) names exactly `names`
/// now: read from its start with `pread`, whatever was read through it before. At most
/// one byte more than `names` take is read: a longer list is taken as changed (the
/// reload reads it whole).
fn file_lists(f: &File, path: &Path, names: &[String]) -> Result<bool> {
    let want: usize = names.iter().map(|n| n.len() + 1).sum();
    let mut content = vec![0u8; want + 1];
    let mut len = 0usize;
    while let Some(buf) = content.get_mut(len..).filter(|b| !b.is_empty()) {
        match fsio::read_at(f, path, buf, len as u64) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io(path, e)),
        }
    }
    Ok(len <= want && lists_names(content.get(..len).unwrap_or_default(), names))
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
            .unwrap_or_else(|| lockfile::default_permissions(lockfile::SharedRepository::Umask))
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

    /// Sets a hook that receives compaction progress (about every 64k records).
    pub fn set_progress(&mut self, hook: Option<Box<dyn FnMut(CompactionProgress) + Send>>) {
        self.progress = hook;
    }

    /// The update index the next table gets: newest max + 1, or 1 when empty.
    pub fn next_update_index(&self) -> u64 {
        self.tables.last().map_or(1, |t| t.max_update_index() + 1)
    }

    /// Whether the loaded table set is current: `tables.list` unchanged and every table
    /// file still the file that was opened (device, inode, size, mtime, ctime).
    ///
    /// The list is unchanged when it is the same file with the same size, mtime and ctime
    /// (one `stat`), and, while its last change is too recent for a write since to have
    /// changed them (git's racy-file rule), the same content (one read).
    pub fn is_up_to_date(&self) -> Result<bool> {
        Ok(self.list_state()?.is_some() && !self.tables_changed())
    }

    /// `Some(verified)` when `tables.list` still holds the names the stack holds
    /// (`verified`: the time its content was compared now, if it was), `None` when it
    /// changed.
    pub(super) fn list_state(&self) -> Result<Option<Option<SystemTime>>> {
        if let Some(id) = &self.list_id {
            let meta = match fs::metadata(&self.list_path) {
                Ok(m) => m,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    return Ok(self.names.is_empty().then_some(None))
                }
                Err(e) => return Err(Error::io(&self.list_path, e)),
            };
            return match id.check(&FileId::of(&meta)) {
                ListCheck::Unchanged => Ok(Some(None)),
                ListCheck::Changed => Ok(None),
                ListCheck::Racy => {
                    let same = match &self.list_file {
                        // The file `id` is of, held open since it was read: its inode
                        // cannot have been reused, so the same (dev, ino) at the path is
                        // this very file, read where it is (no open by path).
                        Some(f) => file_lists(f, &self.list_path, &self.names)?,
                        None => list_is(&self.list_path, &self.names)?,
                    };
                    Ok(same.then(|| Some(SystemTime::now())))
                }
            };
        }
        let (names, _) = read_list(&self.list_path)?;
        Ok((names == self.names).then_some(None))
    }

    /// Whether some table file is no longer the file that was opened (replaced,
    /// rewritten or gone).
    pub(super) fn tables_changed(&self) -> bool {
        self.names.iter().zip(&self.ids).any(|(name, id)| {
            fs::metadata(self.dir.join(name)).map_or(true, |m| FileId::of(&m) != *id)
        })
    }

    /// Reloads if `tables.list` changed (see [`is_up_to_date`](Self::is_up_to_date)),
    /// or (checked at most every [`TABLE_RECHECK_INTERVAL`]) a table file changed on
    /// disk. Returns whether the table set changed.
    pub fn reload(&mut self) -> Result<bool> {
        match self.list_state()? {
            None => return self.reload_now(),
            Some(verified) => {
                if let (Some(at), Some(id)) = (verified, self.list_id.as_mut()) {
                    id.verified = at;
                }
            }
        }
        if self.tables_checked.elapsed() < TABLE_RECHECK_INTERVAL {
            return Ok(false);
        }
        self.tables_checked = Instant::now();
        if !self.tables_changed() {
            return Ok(false);
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
    pub(super) fn open_tables(
        &self,
        names: &[String],
    ) -> Result<(Vec<Arc<Table>>, Vec<FileId>, bool)> {
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
            let table = Table::open_in(&path, &self.opts.block_cache).map_err(not_exist)?;
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
    pub(super) fn install(
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(size: u64, mtime: (i64, i64), ctime: (i64, i64)) -> FileId {
        FileId {
            dev: 1,
            ino: 2,
            size,
            mtime,
            ctime,
        }
    }

    fn at(secs: u64, nanos: u32) -> SystemTime {
        UNIX_EPOCH + Duration::new(secs, nanos)
    }

    #[test]
    fn list_identity_is_more_than_the_inode() {
        let file = id(43, (1000, 5), (1000, 5));
        let held = ListId {
            file,
            verified: at(2000, 0),
        };
        assert_eq!(held.check(&file), ListCheck::Unchanged);
        // Appended in place: same inode, another size.
        assert_eq!(
            held.check(&id(86, (1000, 5), (1000, 5))),
            ListCheck::Changed
        );
        // Rewritten in place to the same size.
        assert_eq!(
            held.check(&id(43, (1001, 5), (1001, 5))),
            ListCheck::Changed
        );
        // ... with its mtime put back: the ctime still moved.
        assert_eq!(
            held.check(&id(43, (1000, 5), (1003, 7))),
            ListCheck::Changed
        );
        // Nanoseconds count.
        assert_eq!(
            held.check(&id(43, (1000, 6), (1000, 6))),
            ListCheck::Changed
        );
        let mut other_inode = file;
        other_inode.ino = 3;
        assert_eq!(held.check(&other_inode), ListCheck::Changed);
    }

    #[test]
    fn a_list_changed_just_before_it_was_read_is_compared_by_content() {
        // Changed 50 ms before the read: a write after it may share every timestamp.
        let file = id(43, (1000, 950_000_000), (1000, 950_000_000));
        let mut held = ListId {
            file,
            verified: at(1001, 0),
        };
        assert_eq!(held.check(&file), ListCheck::Racy);
        // Compared again 200 ms after the change: settled.
        held.verified = at(1001, 150_000_000);
        assert_eq!(held.check(&file), ListCheck::Unchanged);
        // A file system without sub-second timestamps: racy for seconds.
        let coarse = id(43, (1000, 0), (1000, 0));
        let held = ListId {
            file: coarse,
            verified: at(1002, 0),
        };
        assert_eq!(held.check(&coarse), ListCheck::Racy);
        let held = ListId {
            file: coarse,
            verified: at(1004, 0),
        };
        assert_eq!(held.check(&coarse), ListCheck::Unchanged);
        // A change time in the future (another clock): racy.
        let held = ListId {
            file,
            verified: at(900, 0),
        };
        assert_eq!(held.check(&file), ListCheck::Racy);
    }

    /// A racy `tables.list` is compared through the file the stack holds open (its inode
    /// cannot be reused meanwhile): read from its start whatever was read through it
    /// before, an in-place change of that file seen, a longer list than is compared taken
    /// as changed.
    #[test]
    fn a_held_list_is_compared_where_it_is() {
        use std::io::Read;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tables.list");
        let names = vec!["a.ref".to_owned(), "b.ref".to_owned()];
        std::fs::write(&path, "a.ref\nb.ref\n").unwrap();
        let mut f = File::open(&path).unwrap();
        let mut seen = String::new();
        f.read_to_string(&mut seen).unwrap();
        assert!(
            file_lists(&f, &path, &names).unwrap(),
            "read from its start"
        );
        let w = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&w, b"c", 0).unwrap();
        assert!(!file_lists(&f, &path, &names).unwrap(), "changed in place");
        let many: Vec<String> = (0..3).map(|i| format!("{i}.ref")).collect();
        let long = "x".repeat(1 << 20);
        std::fs::write(&path, long).unwrap();
        assert!(
            !file_lists(&f, &path, &many).unwrap(),
            "too long: changed, not an error"
        );
    }

    #[test]
    fn lists_names_compares_lines() {
        let names = vec!["a.ref".to_owned(), "b.ref".to_owned()];
        assert!(lists_names(b"a.ref\nb.ref\n", &names));
        assert!(lists_names(b"a.ref\n\nb.ref", &names));
        assert!(!lists_names(b"a.ref\n", &names));
        assert!(!lists_names(b"a.ref\nb.ref\nc.ref\n", &names));
        assert!(!lists_names(b"a.ref\nc.ref\n", &names));
        assert!(lists_names(b"", &[]));
        assert!(!lists_names(b"\xff\n", &[]));
    }
}
