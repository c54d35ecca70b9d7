//! A prepared transaction and its commit: the planned records written as one table
//! through the stack's write protocol ([`Stack::add_table_locked_sized`]).

use std::path::{Path, PathBuf};

use super::edit::{NewValue, RefEdit};
use super::identity::Identity;
use super::reflog::{normalize_reflog_message, LogSrc};
use super::update::Upd;
use crate::format::{LogRecord, ObjectId, RefRecord, RefValue};
use crate::merged::copy_log;
use crate::stack::{min_ref_record_size, ListLock, Stack};
use crate::{Error, Result};

/// What a committed transaction did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Committed {
    /// The update index of the new table (the stack's next index when nothing was
    /// written).
    pub update_index: u64,
    /// The new table's file name (the merged one when it was written already compacted
    /// with the stack below it); `None` when every edit was a no-op.
    pub table: Option<String>,
}

/// A transaction checked under the stack's lock ([`Transaction::prepare`](super::Transaction::prepare)); dropping it
/// aborts (the lock is released, nothing is written).
pub struct PreparedTransaction {
    pub(super) dir: PathBuf,
    pub(super) lock: ListLock,
    pub(super) edits: Vec<RefEdit>,
    pub(super) identity: Identity,
    pub(super) updates: Vec<Upd>,
    pub(super) logs: Vec<LogSrc>,
    pub(super) keep: Vec<bool>,
    pub(super) order: Vec<usize>,
    pub(super) new_ids: Vec<ObjectId>,
    pub(super) ui: u64,
    pub(super) max_ui: u64,
    pub(super) null: ObjectId,
}

impl std::fmt::Debug for PreparedTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedTransaction")
            .field("dir", &self.dir)
            .field("update_index", &self.ui)
            .field("edits", &self.edits.len())
            .finish()
    }
}

impl PreparedTransaction {
    /// The update index the table will get.
    pub fn update_index(&self) -> u64 {
        self.ui
    }

    /// The directory of the stack it was prepared on.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes the table on `stack`, which must be the stack it was prepared on (the
    /// same directory, not written to since: its lock was held).
    pub fn commit(self, stack: &mut Stack) -> Result<Committed> {
        if stack.dir() != self.dir {
            return Err(Error::Api(format!(
                "transaction prepared on {} committed on {}",
                self.dir.display(),
                stack.dir().display()
            )));
        }
        let block_size = stack.options().write.block_size;
        let max_msg = (if block_size == 0 { 4096 } else { block_size } / 2) as usize;
        let value = |u: &Upd| match &self.edits[u.edit].new {
            Some(NewValue::Oid(id)) => RefValue::Val1(*id),
            Some(NewValue::Peeled { value, peeled }) => RefValue::Val2 {
                value: *value,
                peeled: *peeled,
            },
            Some(NewValue::Symref(t)) => RefValue::Symref(t.clone()),
            Some(NewValue::Delete) | None => RefValue::Deletion,
        };
        // A lower bound of the table's size: its ref records alone.
        let hash = stack.options().hash;
        let min_size: u64 = self
            .order
            .iter()
            .filter_map(|&i| self.updates.get(i))
            .map(|u| min_ref_record_size(&value(u), hash))
            .sum();
        let (ui, max_ui) = (self.ui, self.max_ui);
        let lock = self.lock;
        let table = stack.add_table_locked_sized(lock, ui, max_ui, min_size, |w| {
            let mut rec = RefRecord::default();
            for &i in &self.order {
                let u = &self.updates[i];
                rec.name.clear();
                rec.name.extend_from_slice(&u.name);
                rec.update_index = self.ui;
                rec.value = value(u);
                w.add_ref(&rec)?;
            }
            let mut log = LogRecord::default();
            let mut norm = Vec::new();
            for (j, src) in self.logs.iter().enumerate() {
                if !self.keep[j] {
                    continue;
                }
                match src {
                    LogSrc::Extra(l) => w.add_log(l)?,
                    LogSrc::Marker(name, u) => {
                        log.refname.clear();
                        log.refname.extend_from_slice(name);
                        log.update_index = *u;
                        log.deleted = false;
                        log.old_id = self.null;
                        log.new_id = self.null;
                        log.name.clear();
                        log.email.clear();
                        log.time = 0;
                        log.tz_offset = 0;
                        log.message.clear();
                        w.add_log_verbatim(&log)?;
                    }
                    LogSrc::Tombstone(i, t) => {
                        log.refname.clear();
                        log.refname.extend_from_slice(&self.updates[*i].name);
                        log.update_index = *t;
                        log.deleted = true;
                        w.add_log(&log)?;
                    }
                    LogSrc::Update(i) => {
                        let u = &self.updates[*i];
                        let edit = &self.edits[u.edit];
                        if let Some(given) = &edit.log {
                            copy_log(&mut log, given);
                        } else {
                            log.old_id = u.cur_oid;
                            log.new_id = self.new_ids.get(*i).copied().unwrap_or(self.null);
                            log.name.clear();
                            log.name.extend_from_slice(&self.identity.name);
                            log.email.clear();
                            log.email.extend_from_slice(&self.identity.email);
                            log.time = self.identity.time;
                            log.tz_offset = self.identity.tz_offset;
                            normalize_reflog_message(
                                edit.message.as_deref().unwrap_or(b""),
                                &mut norm,
                            );
                            norm.truncate(max_msg);
                            log.message.clear();
                            log.message.extend_from_slice(&norm);
                            log.message.push(b'\n');
                        }
                        // The record's key is always the update's, whatever was given.
                        log.refname.clear();
                        log.refname.extend_from_slice(&u.name);
                        log.update_index = self.ui;
                        log.deleted = false;
                        w.add_log(&log)?;
                    }
                }
            }
            Ok(())
        })?;
        Ok(Committed {
            update_index: self.ui,
            table,
        })
    }
}
