//! Cleaning: unlisted tables (`clean`) and leftovers of killed writers proven garbage
//! (`clean_orphans`).

use std::path::PathBuf;
use std::time::Duration;

use super::list::is_table_name;
use super::Stack;
use crate::fsio;
use crate::lockfile::{self};
use crate::table::Table;
use crate::{Error, Result};

impl Stack {
    /// git's `reftable_stack_clean`: under the list lock, re-read the list, then unlink
    /// every unlisted `*.ref` file whose max update index is at most the stack's. Files
    /// that do not parse, and files not ending in `.ref`, are left alone.
    pub fn clean(&mut self) -> Result<()> {
        let _lock = self.lock_list()?;
        // What is unlisted is decided on the list as read under the lock.
        self.reload_now()?;
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
            if let Ok(t) = Table::open_in(&path, &self.opts.block_cache) {
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
pub(super) fn is_temp_table_name(name: &str) -> bool {
    name.starts_with("0x") && name.contains(".temp.")
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
    /// Anything else (and anything held open by a process) is kept and reported. Who
    /// holds a file open is read from `/proc` alone ([`lockfile::diagnose`]), so the list
    /// lock is never held while waiting for another file system (a mount starting up
    /// runs this too).
    pub fn clean_orphans(&mut self, stale_locks: Option<Duration>) -> Result<OrphanReport> {
        let _lock = self.lock_list()?;
        self.reload_now()?;
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
