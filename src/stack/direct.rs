//! An addition written already compacted: when git's geometric rule is certain to merge
//! the new table with every table below it as soon as it is committed (the usual case
//! for a big transaction on a small stack, e.g. 100k creates on `git init`'s table), the
//! old tables' records are merged into the writer while the new table is written, and
//! the one table git's auto-compaction would produce is committed instead of two tables
//! (the new one, then the compacted one). Same bytes, same update-index range, same
//! `tables.list`; the log blocks are deflated once instead of twice.
//!
//! The rule is decided before the table is written, from a lower bound of its size
//! ([`TableSink`] callers give it; [`min_ref_record_size`] per ref): the segment is the
//! whole stack for every size at or above the bound, or the ordinary path is taken.
//! The old tables are locked (`<table>.lock`, as a compaction does) under the held list
//! lock; a table locked by someone else (a compaction under way) also means the
//! ordinary path, whose best-effort auto-compaction then decides as git's does.

use std::cmp::Ordering;
use std::sync::Arc;

use super::compact::suggest_compaction_segment;
use super::{CommitError, Stack, StackStats};
use crate::format::{HashKind, LogRecord, RefRecord, RefValue};
use crate::fsio;
use crate::lockfile::LockFile;
use crate::merged::{copy_log, copy_ref, log_key_cmp, MergedLogIter, MergedRefIter};
use crate::table::{LogIter, RefIter, Table, TableWriter};
use crate::{Error, Result};

/// The fewest bytes a ref record holding `value` takes in any table: a one-byte prefix
/// length, a one-byte suffix length and type, at least one suffix byte (keys strictly
/// increase, so no key is a prefix of the one before it), the update-index delta, and the
/// value.
pub fn min_ref_record_size(value: &RefValue, hash: HashKind) -> u64 {
    let v = match value {
        RefValue::Deletion => 0,
        RefValue::Val1(_) => hash.size(),
        RefValue::Val2 { .. } => 2 * hash.size(),
        RefValue::Symref(t) => 1 + t.len(),
    };
    4 + v as u64
}

/// Where a table's records go: straight into the writer, or merged with the records of
/// the tables below (newest wins, tombstones dropped: the compaction of the whole stack).
/// Records must come in table order (refs by name, then logs by name and update index
/// descending), as [`TableWriter`] wants them.
pub struct TableSink<'a> {
    w: &'a mut TableWriter,
    under: Option<Under>,
}

/// The older tables' records, merged, each kind one record ahead.
struct Under {
    refs: MergedRefIter,
    logs: MergedLogIter,
    next_ref: Option<RefRecord>,
    next_log: Option<LogRecord>,
    refs_done: bool,
}

impl Under {
    fn new(tables: &[Arc<Table>]) -> Result<Under> {
        let mut refs = MergedRefIter::new(Stack::sub_ref_iters(tables));
        refs.suppress_deletions(true);
        refs.seek(b"")?;
        let mut logs = MergedLogIter::new(Stack::sub_log_iters(tables));
        logs.suppress_deletions(true);
        logs.seek(b"", u64::MAX)?;
        let mut u = Under {
            refs,
            logs,
            next_ref: None,
            next_log: None,
            refs_done: false,
        };
        u.advance_ref()?;
        u.advance_log()?;
        Ok(u)
    }

    fn advance_ref(&mut self) -> Result<()> {
        match self.refs.next()? {
            Some(r) => copy_ref(self.next_ref.get_or_insert_with(RefRecord::default), r),
            None => self.next_ref = None,
        }
        Ok(())
    }

    fn advance_log(&mut self) -> Result<()> {
        match self.logs.next()? {
            Some(l) => copy_log(self.next_log.get_or_insert_with(LogRecord::default), l),
            None => self.next_log = None,
        }
        Ok(())
    }

    /// Writes the old refs before `name` (all with `None`); drops one named `name`.
    fn refs_until(&mut self, w: &mut TableWriter, name: Option<&[u8]>) -> Result<()> {
        while let Some(r) = &self.next_ref {
            match name.map_or(Ordering::Less, |n| r.name.as_slice().cmp(n)) {
                Ordering::Less => w.add_ref(r)?,
                Ordering::Equal => {
                    self.advance_ref()?;
                    break;
                }
                Ordering::Greater => break,
            }
            self.advance_ref()?;
        }
        Ok(())
    }

    /// Writes the old logs before `key` (all with `None`); drops one with its key.
    fn logs_until(&mut self, w: &mut TableWriter, key: Option<&LogRecord>) -> Result<()> {
        if !self.refs_done {
            self.refs_until(w, None)?;
            self.refs_done = true;
        }
        while let Some(l) = &self.next_log {
            match key.map_or(Ordering::Less, |k| log_key_cmp(l, k)) {
                Ordering::Less => w.add_log(l)?,
                Ordering::Equal => {
                    self.advance_log()?;
                    break;
                }
                Ordering::Greater => break,
            }
            self.advance_log()?;
        }
        Ok(())
    }
}

impl<'a> TableSink<'a> {
    pub(super) fn plain(w: &'a mut TableWriter) -> TableSink<'a> {
        TableSink { w, under: None }
    }

    /// Adds a ref record ([`TableWriter::add_ref`]).
    pub fn add_ref(&mut self, rec: &RefRecord) -> Result<()> {
        if let Some(u) = &mut self.under {
            u.refs_until(self.w, Some(&rec.name))?;
            if rec.value == RefValue::Deletion {
                return Ok(());
            }
        }
        self.w.add_ref(rec)
    }

    /// Adds a log record ([`TableWriter::add_log`]).
    pub fn add_log(&mut self, log: &LogRecord) -> Result<()> {
        if let Some(u) = &mut self.under {
            u.logs_until(self.w, Some(log))?;
            if log.deleted {
                return Ok(());
            }
        }
        self.w.add_log(log)
    }

    /// Adds a log record with its message as it is ([`TableWriter::add_log_verbatim`]);
    /// merged, the message is normalised as the compaction would write it.
    pub fn add_log_verbatim(&mut self, log: &LogRecord) -> Result<()> {
        if self.under.is_some() {
            return self.add_log(log);
        }
        self.w.add_log_verbatim(log)
    }

    /// Writes the old records after the last one added.
    fn finish_merge(&mut self) -> Result<()> {
        if let Some(u) = &mut self.under {
            u.logs_until(self.w, None)?;
        }
        Ok(())
    }
}

/// The tables of a direct write, locked.
pub(super) struct Direct {
    tables: Vec<Arc<Table>>,
    old_names: Vec<String>,
    _locks: Vec<LockFile>,
}

impl Stack {
    /// Whether the addition of a table of at least `min_size` bytes (git's size for
    /// compaction: file size less header and footer, plus one) is followed by the
    /// compaction of the whole stack with it, whatever its exact size; if so, the locked
    /// tables. Called under the list lock, on the stack read under it.
    pub(super) fn plan_direct(&self, min_size: u64) -> Option<Direct> {
        if !self.opts.auto_compact
            || self.tables.is_empty()
            || self.tables.len() != self.names.len()
            || self.tables_changed()
        {
            return None;
        }
        let mut sizes = self.segment_sizes();
        sizes.push(min_size);
        // The segment grows with the new table's size (its end is the new table once
        // `prev < factor * size`; its start is the oldest table once that holds for the
        // accumulated sizes): the whole stack at the bound is the whole stack above it.
        if suggest_compaction_segment(&sizes, self.opts.compaction_factor) != Some((0, sizes.len()))
        {
            return None;
        }
        let mut locks = Vec::with_capacity(self.names.len());
        for name in self.names.iter().rev() {
            // Locked by another process (a compaction under way): the ordinary path.
            locks.push(LockFile::marker(self.dir.join(format!("{name}.lock"))).ok()?);
        }
        Some(Direct {
            tables: self.tables.clone(),
            old_names: self.names.clone(),
            _locks: locks,
        })
    }

    /// Writes the records `build` adds merged with every table of the stack (git's
    /// compaction of the whole stack, tombstones dropped) as one table file with update
    /// indexes `[min of the oldest table, max]`, not listed yet. Returns its name and
    /// record count, `None` when nothing is left.
    pub(super) fn write_direct(
        &mut self,
        direct: &Direct,
        max: u64,
        build: &mut impl FnMut(&mut TableSink) -> Result<()>,
    ) -> Result<Option<(String, u64)>> {
        let first = direct.tables.first().map_or(1, |t| t.min_update_index());
        let mut w = self.take_writer();
        let r = (|| {
            w.begin(first, max)?;
            let mut sink = TableSink {
                w: &mut w,
                under: Some(Under::new(&direct.tables)?),
            };
            build(&mut sink)?;
            sink.finish_merge()?;
            match w.finish() {
                Ok(_) => {}
                Err(Error::EmptyTable) => return Ok(None),
                Err(e) => return Err(e),
            }
            let records = w.stats().refs.entries + w.stats().logs.entries;
            let name = self.write_table_file(w.output(), first, max)?;
            Ok(Some((name, records)))
        })();
        self.put_writer(w);
        r
    }

    /// Commits the list naming only the table of [`write_direct`](Self::write_direct)
    /// (nothing when it is `None`) under the held `lock`. The replaced tables, locked by
    /// `direct`, are removed once the list is committed and its directory synced (as a
    /// compaction does).
    pub(super) fn commit_direct(
        &mut self,
        lock: LockFile,
        base: &[String],
        direct: Direct,
        written: Option<(String, u64)>,
    ) -> Result<Option<String>> {
        self.stats.compaction_attempts += 1;
        let names: Vec<String> = written.iter().map(|(n, _)| n.clone()).collect();
        let records = written.as_ref().map_or(0, |w| w.1);
        if let Err(CommitError { committed, error }) = self.commit_list(lock, base, &names) {
            self.stats.compaction_failures += 1;
            if committed {
                // Listed but not known durable: every table stays (`clean` removes the
                // old ones later).
                note_committed(&mut self.stats, records);
                if self.reload_now().is_err() {
                    self.list_id = None;
                }
            } else {
                // Never listed: garbage.
                if let Some((n, _)) = &written {
                    let _ = fsio::remove_file(&self.dir.join(n));
                }
                self.list_id = None;
            }
            return Err(error);
        }
        note_committed(&mut self.stats, records);
        let reload = self.reload_now();
        // Replaced by the committed list, and locked by us under the list lock since
        // before the list was read: garbage.
        for n in &direct.old_names {
            let _ = fsio::remove_file(&self.dir.join(n));
        }
        drop(direct);
        if reload.is_err() {
            self.list_id = None;
        }
        Ok(names.into_iter().next())
    }
}

/// Counts a committed direct write as git counts its addition and compaction.
fn note_committed(stats: &mut StackStats, records: u64) {
    stats.tables_added += 1;
    stats.compactions += 1;
    stats.entries_written += records;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::WriteOptions;
    use crate::ObjectId;

    #[test]
    fn min_ref_record_size_is_a_lower_bound_and_tight() {
        // One-byte names after one another: every record is as small as a record holding
        // its value can be, so the table holds exactly the bounds plus block overhead.
        for hash in [HashKind::Sha1, HashKind::Sha256] {
            let id = ObjectId::from_bytes(&vec![7; hash.size()]).unwrap();
            let values = [
                RefValue::Deletion,
                RefValue::Val1(id),
                RefValue::Val2 {
                    value: id,
                    peeled: id,
                },
                RefValue::Symref(b"x".to_vec()),
            ];
            let mut w = TableWriter::new(WriteOptions {
                hash,
                skip_index_objects: true,
                unpadded: true,
                ..WriteOptions::default()
            });
            w.begin(1, 1).unwrap();
            let mut bound = 0;
            for (i, name) in (b'a'..=b'z').enumerate() {
                let value = values[i % values.len()].clone();
                bound += min_ref_record_size(&value, hash);
                w.add_ref(&RefRecord {
                    name: vec![name],
                    update_index: 1,
                    value,
                })
                .unwrap();
            }
            let size = w.finish().unwrap().len() as u64;
            let overhead = (hash.header_size() + hash.footer_size()) as u64;
            // Block header (4 bytes), restart offsets (3 each: every record here, none
            // sharing a prefix with the one before) and their count (2): all that is not
            // a record.
            let restarts = 3 * 26 + 2;
            assert_eq!(size - overhead - 4 - restarts, bound, "{hash:?}");
        }
    }
}
