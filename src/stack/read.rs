//! Reading a stack: lookups through the cached merged iterator, iteration, reflogs.

use std::sync::Arc;

use super::{is_existence_marker, Stack};
use crate::format::{LogRecord, RefRecord};
use crate::merged::{BoxLogIter, BoxRefIter, MergedLogIter, MergedRefIter};
use crate::table::{LogIter, RefIter, Table};
use crate::{Error, Result};

impl Stack {
    pub(super) fn sub_ref_iters(tables: &[Arc<Table>]) -> Vec<BoxRefIter> {
        tables
            .iter()
            .map(|t| Box::new(t.ref_iter()) as BoxRefIter)
            .collect()
    }

    pub(super) fn sub_log_iters(tables: &[Arc<Table>]) -> Vec<BoxLogIter> {
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
}
