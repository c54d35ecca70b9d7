//! When a ref last changed, for its mtime, without a seek beyond the lookup that found it.
//!
//! A ref record carries the update index of the transaction that wrote it; every reflog
//! entry carries its transaction's update index and time. So a ref's change time is the
//! time of its record's update index, and that time is shared by every ref the
//! transaction wrote. This module keeps update index → time, learned from the tables
//! themselves: the first time a ref of a table is asked for, that table's log section is
//! read once (a table of one update index: its first entry; a compacted table: its
//! entries up to [`SCAN_MAX`]); later refs of the table cost no seek at all. A ref whose
//! index stays unknown (its transaction logged nothing, or the scan stopped short) falls
//! back to its own newest reflog entry — one seek, as before.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use crate::table::{LogIter, Table};
use crate::Result;

/// At most this many log records are read from one table to learn its update indices'
/// times (a compacted table with a longer log leaves the rest to per-ref seeks).
pub const SCAN_MAX: usize = 65_536;
/// At most this many update index → time entries are kept (the lowest indices go first).
pub const TIMES_MAX: usize = 1 << 18;

/// The change-time memory of one reader (see the module docs).
#[derive(Debug, Default)]
pub struct RefTimes {
    /// The last exact lookup of a non-symbolic ref: (stack generation, name, update index
    /// of its record).
    last: Option<(u64, Vec<u8>, u64)>,
    /// Update index → time (Unix seconds) of its transaction.
    by_index: BTreeMap<u64, u64>,
    /// Tables whose log section was read already (by name; dropped when compacted away).
    scanned: HashSet<String>,
    /// Log sections read, for tests and the status file.
    pub scans: u64,
}

impl RefTimes {
    /// Records that the lookup of `name` found a non-symbolic record of `update_index`.
    pub fn note_lookup(&mut self, generation: u64, name: &[u8], update_index: u64) {
        match &mut self.last {
            Some((g, n, u)) => {
                *g = generation;
                n.clear();
                n.extend_from_slice(name);
                *u = update_index;
            }
            slot @ None => *slot = Some((generation, name.to_vec(), update_index)),
        }
    }

    /// Forgets the last lookup (it was a symref, a deletion or another name).
    pub fn clear_lookup(&mut self) {
        self.last = None;
    }

    /// The update index of `name`'s record if the last lookup (in this generation) found it.
    pub fn looked_up(&self, generation: u64, name: &[u8]) -> Option<u64> {
        match &self.last {
            Some((g, n, u)) if *g == generation && n.as_slice() == name => Some(*u),
            _ => None,
        }
    }

    /// The time of update index `u`, reading the log section of the table that holds it
    /// the first time one of its indices is asked for.
    pub fn index_time(&mut self, tables: &[Arc<Table>], u: u64) -> Result<Option<u64>> {
        if let Some(&t) = self.by_index.get(&u) {
            return Ok(Some(t));
        }
        let Some(table) = tables
            .iter()
            .rev()
            .find(|t| t.min_update_index() <= u && u <= t.max_update_index())
        else {
            return Ok(None);
        };
        if !table.has_logs() || self.scanned.contains(table.name()) {
            return Ok(None);
        }
        if self.scanned.len() >= 4 * tables.len().max(16) {
            self.scanned
                .retain(|n| tables.iter().any(|t| t.name() == n.as_str()));
        }
        self.scanned.insert(table.name().to_owned());
        self.scans += 1;
        let single = table.min_update_index() == table.max_update_index();
        let mut it = table.log_iter();
        it.seek(b"", u64::MAX)?;
        let mut read = 0usize;
        while let Some(l) = it.next()? {
            read += 1;
            if !l.deleted && !crate::stack::is_existence_marker(l) {
                let t = self.by_index.entry(l.update_index).or_insert(l.time);
                *t = (*t).max(l.time);
                if single {
                    break;
                }
            }
            if read >= SCAN_MAX {
                break;
            }
        }
        while self.by_index.len() > TIMES_MAX {
            self.by_index.pop_first();
        }
        Ok(self.by_index.get(&u).copied())
    }
}
