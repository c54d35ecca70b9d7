//! git's write protocol: hold `tables.list.lock`, write the table file, commit the new
//! list, then one fsync round (table, list, directory).

use std::fs::File;
use std::path::Path;

use super::direct::TableSink;
use super::list::list_is;
use super::{table_name, CommitError, Stack};
use crate::fsio;
use crate::lockfile::{self, LockFile};
use crate::table::TableWriter;
use crate::{Error, Result};

/// A held `tables.list.lock`, taken by [`Stack::lock_for_write`]: nothing else can
/// commit to the stack until it is given to [`Stack::add_table_locked`] or dropped
/// (dropping releases it and writes nothing). It keeps the table names `tables.list`
/// held when it was read under this lock: the list written is those plus the new table.
#[must_use = "dropping the lock releases it"]
pub struct ListLock {
    lock: LockFile,
    base: Vec<String>,
}

impl std::fmt::Debug for ListLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListLock")
            .field("path", &self.lock.path())
            .field("base", &self.base)
            .finish()
    }
}

impl Stack {
    // ----- writing ------------------------------------------------------------------

    pub(super) fn lock_list(&self) -> Result<LockFile> {
        let lock = LockFile::acquire(&self.lock_path, self.opts.lock_timeout)?;
        lockfile::chmod(lock.path(), self.perms)?;
        Ok(lock)
    }

    pub(super) fn sync_file(&mut self, f: &File, path: &Path) -> Result<()> {
        if self.opts.fsync {
            fsio::fsync(f, path).map_err(|e| Error::io(path, e))?;
            self.stats.file_fsyncs += 1;
        }
        Ok(())
    }

    pub(super) fn sync_dir(&mut self) -> Result<()> {
        if self.opts.fsync {
            lockfile::sync_dir(&self.dir)?;
            self.stats.dir_fsyncs += 1;
        }
        Ok(())
    }

    /// Writes `bytes` as a new table file: temp name `<prefix>.temp.XXXXXX`, chmod,
    /// write, fsync, rename to `0x<min>-0x<max>-<rand>.ref`. Returns the final name.
    pub(super) fn write_table_file(&mut self, bytes: &[u8], min: u64, max: u64) -> Result<String> {
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
    ///
    /// `base` is the list as read under this lock, which `names` was made from: the list
    /// is read once more first, and if it no longer names `base` (a tool wrote it in
    /// place, without the lock) nothing is written and the error is
    /// [`Error::Outdated`].
    pub(super) fn commit_list(
        &mut self,
        mut lock: LockFile,
        base: &[String],
        names: &[String],
    ) -> Result<(), CommitError> {
        match list_is(&self.list_path, base) {
            Ok(true) => {}
            Ok(false) => {
                return Err(CommitError {
                    committed: false,
                    error: Error::Outdated,
                })
            }
            Err(error) => {
                return Err(CommitError {
                    committed: false,
                    error,
                })
            }
        }
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
    pub(super) fn take_writer(&mut self) -> TableWriter {
        let mut w = self
            .writer
            .take()
            .unwrap_or_else(|| TableWriter::new(self.opts.write));
        w.set_options(self.opts.write);
        w
    }

    pub(super) fn put_writer(&mut self, w: TableWriter) {
        self.writer = Some(w);
    }

    /// Adds the table `writer` just finished (or nothing for an empty table) under the
    /// held `lock`, on top of `base` (the list read under it): one fsync round, reload,
    /// then auto-compaction. Returns the new table's name.
    fn add_finished_table(
        &mut self,
        lock: LockFile,
        base: Vec<String>,
        writer: &mut TableWriter,
        min: u64,
        max: u64,
    ) -> Result<Option<String>> {
        let bytes = match writer.finish() {
            Ok(b) => b,
            Err(Error::EmptyTable) => return Ok(None),
            Err(e) => return Err(e),
        };
        if self.names != base {
            // Re-read since the lock was taken: what the table was built against (the
            // caller's checks) is not what the stack holds now.
            return Err(Error::Outdated);
        }
        if min < self.next_update_index() {
            return Err(Error::Api(format!(
                "table update index {min} below the stack's next {}",
                self.next_update_index()
            )));
        }
        let name = self.write_table_file(bytes, min, max)?;
        let mut names = base.clone();
        names.push(name.clone());
        if let Err(e) = self.commit_list(lock, &base, &names) {
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
        let lock = self.lock_for_write()?;
        self.add_table_locked(lock, min, max, build)
    }

    /// The first half of [`add_table`](Self::add_table): takes `tables.list.lock` and
    /// reads `tables.list` again under it (whatever its identity says: a list written in
    /// place can keep it), re-reading the stack if another writer changed it, so that
    /// what is read until the lock is used or dropped is what the new table will be
    /// added on top of (a transaction checks its expected values in between).
    pub fn lock_for_write(&mut self) -> Result<ListLock> {
        let lock = self.lock_list()?;
        self.reload_now()?;
        Ok(ListLock {
            lock,
            base: self.names.clone(),
        })
    }

    /// The second half of [`add_table`](Self::add_table): `build` writes the records of
    /// one table with update indexes `[min, max]` into the stack's reused writer, then
    /// the table is added under `lock` (one fsync round, reload, auto-compaction).
    /// Returns the new table's name, `None` when `build` wrote nothing. On error the
    /// table is not added (and the lock is released); [`Error::Outdated`] when the stack
    /// was re-read since `lock` was taken, or `tables.list` no longer holds what was
    /// read under it.
    pub fn add_table_locked(
        &mut self,
        lock: ListLock,
        min: u64,
        max: u64,
        build: impl FnOnce(&mut TableWriter) -> Result<()>,
    ) -> Result<Option<String>> {
        let ListLock { lock, base } = lock;
        let mut w = self.take_writer();
        let r = w.begin(min, max).and_then(|()| build(&mut w));
        let r = r.and_then(|()| self.add_finished_table(lock, base, &mut w, min, max));
        self.put_writer(w);
        r
    }

    /// [`add_table_locked`](Self::add_table_locked) for a table of at least `min_size`
    /// bytes (git's size for compaction; see `min_ref_record_size`): when the geometric
    /// auto-compaction is certain to merge it with every table below it, the records are
    /// merged while the table is written and that one table is committed (the tables,
    /// the list and the update-index range git's addition plus compaction leave; see
    /// `direct.rs`). `build` may be called twice: a failure of that write before the
    /// list is committed falls back to the ordinary addition.
    pub fn add_table_locked_sized(
        &mut self,
        lock: ListLock,
        min: u64,
        max: u64,
        min_size: u64,
        mut build: impl FnMut(&mut TableSink) -> Result<()>,
    ) -> Result<Option<String>> {
        let ListLock { lock, base } = lock;
        if self.names == base && min >= self.next_update_index() {
            if let Some(direct) = self.plan_direct(min_size) {
                if let Ok(written) = self.write_direct(&direct, max, &mut build) {
                    return self.commit_direct(lock, &base, direct, written);
                }
                // Nothing listed, nothing left behind; the table locks go with `direct`.
            }
        }
        let mut w = self.take_writer();
        let r = w
            .begin(min, max)
            .and_then(|()| build(&mut TableSink::plain(&mut w)));
        let r = r.and_then(|()| self.add_finished_table(lock, base, &mut w, min, max));
        self.put_writer(w);
        r
    }
}
