//! Compaction: git's geometric rule (`suggest_compaction_segment`) and the merge of a
//! range of tables under table locks, so a concurrent git is safe.

use std::path::PathBuf;
use std::sync::Arc;

use super::list::{list_is, read_list};
use super::{table_name, CompactionProgress, LogExpiry, ProgressHook, Stack};
use crate::fsio;
use crate::lockfile::{self, LockFile};
use crate::merged::{MergedLogIter, MergedRefIter};
use crate::table::{LogIter, RefIter, Table, TableWriter};
use crate::{Error, Result};

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
        if let (Some(&prev), Some(&cur)) = (sizes.get(i - 1), sizes.get(i)) {
            if prev < f.saturating_mul(cur) {
                found = Some(i);
                break;
            }
        }
        i -= 1;
    }
    let i = found?;
    let end = i + 1;
    let mut bytes = *sizes.get(i)?;
    let mut start = end;
    let mut j = i;
    while j > 0 {
        let cur = bytes;
        let Some(&prev) = sizes.get(j - 1) else {
            break;
        };
        bytes = bytes.saturating_add(prev);
        if prev < f.saturating_mul(cur) {
            start = j - 1;
        }
        j -= 1;
    }
    (end > start).then_some((start, end))
}

/// A compaction writes its table to disk in pieces of about this size.
const COMPACT_CHUNK: usize = 1 << 20;

/// Appends what the writer produced so far to the temporary table file and empties its
/// output buffer (offsets in the table are unaffected).
fn drain(w: &mut TableWriter, f: &mut std::fs::File, tmp: &std::path::Path) -> Result<()> {
    fsio::write_all(f, tmp, w.output()).map_err(|e| Error::io(tmp, e))?;
    w.drain_output(&mut std::io::sink())
        .map_err(|e| Error::io(tmp, e))
}

/// A table index past the stack's list (the range was checked against it, so this
/// reports a broken invariant instead of panicking).
fn out_of_range(i: usize) -> Error {
    Error::Api(format!("table index {i} outside the stack"))
}

impl Stack {
    // ----- compaction ---------------------------------------------------------------

    pub(super) fn segment_sizes(&self) -> Vec<u64> {
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

    pub(super) fn auto_compact_quiet(&mut self) {
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

    pub(super) fn compact_range_inner(
        &mut self,
        mut first: usize,
        last: usize,
        best_effort: bool,
        expiry: Option<LogExpiry>,
    ) -> Result<bool> {
        // As git 2.47: the list lock is taken even for a range with nothing to merge,
        // so `pack-refs` on a locked stack of one table reports "data is locked".
        let list_lock = self.lock_list()?;
        let len = self.tables.len().min(self.names.len());
        if first > last || (expiry.is_none() && first == last) || last >= len {
            return Ok(false);
        }
        // The range names tables of the list the stack holds: it must still be the list
        // on disk, read now under the lock (its identity alone could hide a list written
        // in place).
        if !list_is(&self.list_path, &self.names)? || self.tables_changed() {
            return Err(Error::Outdated);
        }
        // Lock the tables, newest first.
        let mut table_locks = Vec::new();
        let mut i = last + 1;
        while i > first {
            i -= 1;
            let name = self.names.get(i).ok_or_else(|| out_of_range(i))?;
            let lock_path = self.dir.join(format!("{name}.lock"));
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

        let range: Vec<Arc<Table>> = self
            .tables
            .get(first..=last)
            .ok_or_else(|| out_of_range(last))?
            .to_vec();
        let old_names: Vec<String> = self
            .names
            .get(first..=last)
            .ok_or_else(|| out_of_range(last))?
            .to_vec();
        let min = range.first().map_or(0, |t| t.min_update_index());
        let max = range.last().map_or(0, |t| t.max_update_index());
        let drop_tombstones = first == 0;
        let input_bytes: u64 = range.iter().map(|t| t.file_size()).sum();

        // The new table streams into a temporary file as it is written (the writer's
        // output is drained every `COMPACT_CHUNK` bytes), so a compaction holds a bounded
        // part of the table in memory however big the stack.
        let prefix = format!("0x{min:012x}-0x{max:012x}-{:08x}", lockfile::rand_u32());
        let (mut f, tmp) = lockfile::create_temp(&self.dir, &prefix)?;
        let mut w = self.take_writer();
        let written = (|| {
            lockfile::chmod(&tmp, self.perms)?;
            let n = self.write_compacted(
                &mut w,
                &range,
                (min, max),
                drop_tombstones,
                input_bytes,
                expiry,
                &mut f,
                &tmp,
            )?;
            let Some(n) = n else { return Ok(None) };
            match w.finish() {
                Ok(_) => {}
                Err(Error::EmptyTable) => return Ok(None),
                Err(e) => return Err(e),
            }
            drain(&mut w, &mut f, &tmp)?;
            self.sync_file(&f, &tmp)?;
            Ok(Some(n))
        })();
        self.put_writer(w);
        drop(f);
        let new_name = match written {
            Ok(Some(n)) => {
                self.stats.entries_written += n;
                Some(tmp)
            }
            Ok(None) => {
                let _ = fsio::remove_file(&tmp);
                None
            }
            Err(e) => {
                let _ = fsio::remove_file(&tmp);
                return Err(e);
            }
        };

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
        // The list may have grown (or been compacted) meanwhile: read it under the lock
        // (never trusting its identity) and find our range again.
        let current = match read_list(&self.list_path) {
            Ok((n, _)) => n,
            Err(e) => {
                cleanup(&new_name);
                return Err(e);
            }
        };
        let pos = current.iter().position(|n| Some(n) == old_names.first());
        let Some(pos) =
            pos.filter(|&p| current.get(p..p + old_names.len()) == Some(old_names.as_slice()))
        else {
            cleanup(&new_name);
            return Err(Error::Outdated);
        };
        let (before, after) = (
            current.get(..pos).unwrap_or_default(),
            current.get(pos + old_names.len()..).unwrap_or_default(),
        );
        let mut names: Vec<String> = before.to_vec();
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
        names.extend_from_slice(after);
        if let Err(e) = self.commit_list(list_lock, &current, &names) {
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

    /// Merges `range` into `w` (refs, then logs), draining its output into `f` (the
    /// temporary file at `tmp`) as it grows. Returns the number of records, or `None` when
    /// there is nothing to write.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn write_compacted(
        &mut self,
        w: &mut TableWriter,
        range: &[Arc<Table>],
        (min, max): (u64, u64),
        drop_tombstones: bool,
        input_bytes: u64,
        expiry: Option<LogExpiry>,
        f: &mut std::fs::File,
        tmp: &std::path::Path,
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
            if w.output().len() >= COMPACT_CHUNK {
                drain(w, f, tmp)?;
            }
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
            if w.output().len() >= COMPACT_CHUNK {
                drain(w, f, tmp)?;
            }
            count += 1;
            if count % 65536 == 0 {
                report(count, false, &mut self.progress);
            }
        }
        report(count, true, &mut self.progress);
        Ok((count > 0).then_some(count))
    }
}
