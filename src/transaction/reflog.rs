//! Which log records the new table gets: log-only edits ([`LogEdit`]), the entries
//! generated for updates (git's `write_transaction_table`), tombstones for a deleted
//! ref's reflog, and their order in the table.

use std::collections::BTreeSet;

use super::batch::Transaction;
use super::edit::{LogEdit, NewValue, RefEdit};
use super::symref::resolve_target;
use super::update::Upd;
use crate::format::{LogRecord, ObjectId};
use crate::stack::Stack;
use crate::Result;

/// git's `copy_reflog_msg`: runs of whitespace become one space, leading and trailing
/// whitespace go away.
pub fn normalize_reflog_message(msg: &[u8], out: &mut Vec<u8>) {
    out.clear();
    let mut was_space = true;
    for &c in msg {
        let space = matches!(c, b' ' | b'\t' | b'\n' | b'\r');
        if was_space && space {
            continue;
        }
        was_space = space;
        out.push(if space { b' ' } else { c });
    }
    while out.last() == Some(&b' ') {
        out.pop();
    }
}

/// Where a log record of the new table comes from.
pub(super) enum LogSrc {
    /// Generated (or caller-supplied) entry of `updates[i]`.
    Update(usize),
    /// A tombstone for `(updates[i].name, ui)`.
    Tombstone(usize, u64),
    /// A record from a [`LogEdit`], complete with refname and update index.
    Extra(LogRecord),
    /// git's existence marker at this update index, written with a NULL message (empty,
    /// not normalised to `"\n"`) as git's `create_reflog` and reflog expiry do.
    Marker(Vec<u8>, u64),
}

impl Transaction<'_> {
    /// Whether an update of `name` gets a reflog entry: always with a caller-supplied
    /// record; never with `skip_create_reflog` (as git, even if the reflog exists);
    /// else `force_create_reflog`, `core.logAllRefUpdates` or an existing reflog.
    pub(super) fn should_log(&self, name: &[u8], edit: &RefEdit) -> Result<bool> {
        if edit.log.is_some() {
            return Ok(true);
        }
        if edit.files_reflog {
            return Ok(false);
        }
        if edit.skip_create_reflog {
            return Ok(false);
        }
        if edit.force_create_reflog {
            return Ok(true);
        }
        Ok(self.log_all.autocreates(name) || self.stack.reflog_exists(name)?)
    }

    pub(super) fn add_log_edit(
        &mut self,
        le: LogEdit,
        ui: u64,
        logs: &mut Vec<LogSrc>,
    ) -> Result<()> {
        let existing = |stack: &Stack, name: &[u8]| -> Result<Vec<u64>> {
            let mut it = stack.log_iter();
            crate::table::LogIter::seek(&mut it, name, u64::MAX)?;
            let mut out = Vec::new();
            while let Some(l) = crate::table::LogIter::next(&mut it)? {
                if l.refname != name {
                    break;
                }
                if !l.deleted {
                    out.push(l.update_index);
                }
            }
            Ok(out)
        };
        let tombstone = |name: &[u8], u: u64| LogRecord {
            refname: name.to_vec(),
            update_index: u,
            deleted: true,
            ..LogRecord::default()
        };
        match le {
            LogEdit::Append { refname, mut entry } => {
                entry.refname = refname;
                entry.update_index = ui;
                entry.deleted = false;
                logs.push(LogSrc::Extra(entry));
            }
            LogEdit::Create { refname } => {
                if !self.stack.reflog_exists(&refname)? {
                    logs.push(LogSrc::Marker(refname, ui));
                }
            }
            LogEdit::Delete { refname } => {
                for u in existing(self.stack, &refname)? {
                    logs.push(LogSrc::Extra(tombstone(&refname, u)));
                }
            }
            LogEdit::Rewrite { refname, entries } => {
                let entries_empty = entries.is_empty();
                // Existing live entries, oldest first.
                let mut old: Vec<LogRecord> = Vec::new();
                {
                    let mut it = self.stack.log_iter();
                    crate::table::LogIter::seek(&mut it, &refname, u64::MAX)?;
                    while let Some(l) = crate::table::LogIter::next(&mut it)? {
                        if l.refname != refname {
                            break;
                        }
                        if !l.deleted {
                            old.push(l.clone());
                        }
                    }
                }
                old.reverse();
                let only_marker =
                    old.len() == 1 && old.iter().all(crate::stack::is_existence_marker);
                if entries.is_empty() && only_marker {
                    // Already an existing, empty reflog.
                } else if let Some(keep) = subsequence(&old, &entries) {
                    // The usual rewrite (reflog expire/delete, stash drop): the kept
                    // entries stay where they are; only the dropped ones get tombstones.
                    for (k, o) in old.iter().enumerate() {
                        if !keep.contains(&k) {
                            logs.push(LogSrc::Extra(tombstone(&refname, o.update_index)));
                        }
                    }
                } else {
                    let m = entries.len() as u64;
                    // New entries take update indexes ending at this transaction's (newest
                    // last); an old entry at one of those indexes is shadowed, the others
                    // get tombstones.
                    let first = if m <= ui { ui + 1 - m } else { 1 };
                    let assigned: Vec<u64> = (0..m).map(|k| first + k).collect();
                    for o in &old {
                        if assigned.binary_search(&o.update_index).is_err() {
                            logs.push(LogSrc::Extra(tombstone(&refname, o.update_index)));
                        }
                    }
                    for (k, mut e) in entries.into_iter().enumerate() {
                        e.refname = refname.clone();
                        e.update_index = assigned.get(k).copied().unwrap_or(ui);
                        e.deleted = false;
                        logs.push(LogSrc::Extra(e));
                    }
                }
                // As git's expiry: a reflog emptied by a rewrite still exists.
                if entries_empty && !only_marker {
                    logs.push(LogSrc::Marker(refname.clone(), ui));
                }
            }
        }
        Ok(())
    }
}

/// Whether two reflog entries say the same (messages compared without trailing `\n`).
fn same_entry(a: &LogRecord, b: &LogRecord) -> bool {
    let trim =
        |m: &[u8]| -> usize { m.len() - m.iter().rev().take_while(|&&c| c == b'\n').count() };
    a.old_id == b.old_id
        && a.new_id == b.new_id
        && a.name == b.name
        && a.email == b.email
        && a.time == b.time
        && a.tz_offset == b.tz_offset
        && a.message.get(..trim(&a.message)) == b.message.get(..trim(&b.message))
}

/// If `new` (oldest first) is `old` with some entries removed, the indexes of `old` that
/// are kept.
fn subsequence(old: &[LogRecord], new: &[LogRecord]) -> Option<Vec<usize>> {
    let mut keep = Vec::with_capacity(new.len());
    let mut i = 0;
    for n in new {
        while i < old.len() && !same_entry(&old[i], n) {
            i += 1;
        }
        if i == old.len() {
            return None;
        }
        keep.push(i);
        i += 1;
    }
    Some(keep)
}

impl Transaction<'_> {
    /// The log records of the new table, unsorted: those of the log-only edits, then
    /// the generated ones for `updates`, taken in the order of `by_name` (the update
    /// indices sorted by name); and the new id each update logs (null when it logs none).
    pub(super) fn plan_logs(
        &mut self,
        updates: &[Upd],
        by_name: &[usize],
        ui: u64,
        null: ObjectId,
    ) -> Result<(Vec<LogSrc>, Vec<ObjectId>)> {
        // Log-only edits. A reflog deleted by one gets no generated entry either (the
        // mount deletes a ref and its reflog file in one batch, as a files-backend git
        // does; git's reftable backend alone would log a deleted symref).
        let mut logs: Vec<LogSrc> = Vec::new();
        let reflog_deleted: BTreeSet<Vec<u8>> = self
            .log_edits
            .iter()
            .filter_map(|le| match le {
                LogEdit::Delete { refname } => Some(refname.clone()),
                _ => None,
            })
            .collect();
        for le in std::mem::take(&mut self.log_edits) {
            self.add_log_edit(le, ui, &mut logs)?;
        }

        // Generated logs and tombstones (git's `write_transaction_table`): deleting a
        // ref that is not a symref deletes its reflog; any other update gets an entry when
        // the ref logs, with the old id it resolved to and the new id (a symref's target
        // resolved before this transaction; no entry when the target does not resolve).
        let mut new_ids: Vec<ObjectId> = vec![null; updates.len()];
        for &idx in by_name {
            let Some(u) = updates.get(idx) else { continue };
            if !u.queued {
                continue;
            }
            let edit = &self.edits[u.edit];
            let deleting = matches!(edit.new, Some(NewValue::Delete));
            if deleting && !u.cur_symref && !edit.files_reflog {
                let mut it = self.stack.log_iter();
                crate::table::LogIter::seek(&mut it, &u.name, u64::MAX)?;
                while let Some(l) = crate::table::LogIter::next(&mut it)? {
                    if l.refname != u.name {
                        break;
                    }
                    // git's merged iterator suppresses deletions: entries that are
                    // already tombstones get no second one.
                    if !l.deleted {
                        logs.push(LogSrc::Tombstone(idx, l.update_index));
                    }
                }
            } else if edit.new.is_some()
                && !reflog_deleted.contains(&u.name)
                && self.should_log(&u.name, edit)?
            {
                let new_id = match &edit.new {
                    Some(NewValue::Oid(id)) => Some(*id),
                    Some(NewValue::Peeled { value, .. }) => Some(*value),
                    Some(NewValue::Symref(_)) if u.head_copy => Some(null),
                    Some(NewValue::Symref(t)) => resolve_target(self.stack, t)?,
                    _ => Some(null),
                };
                if let Some(id) = new_id {
                    new_ids[idx] = id;
                    logs.push(LogSrc::Update(idx));
                } else if edit.log.is_some() {
                    // A supplied record is the entry, whatever the target resolves to.
                    logs.push(LogSrc::Update(idx));
                }
            }
        }
        Ok((logs, new_ids))
    }
}

/// Sorts `logs` into the table's order (refname ascending, update index descending);
/// of records with the same key the one added later wins. Returns which records are
/// written and the highest update index among them (at least `ui`).
pub(super) fn sort_logs(updates: &[Upd], ui: u64, logs: &mut [LogSrc]) -> (Vec<bool>, u64) {
    fn key_of<'x>(updates: &'x [Upd], ui: u64, s: &'x LogSrc) -> (&'x [u8], u64) {
        match s {
            LogSrc::Update(i) => (updates.get(*i).map_or(&[][..], |u| &u.name), ui),
            LogSrc::Tombstone(i, u) => (updates.get(*i).map_or(&[][..], |u| &u.name), *u),
            LogSrc::Extra(l) => (l.refname.as_slice(), l.update_index),
            LogSrc::Marker(name, u) => (name.as_slice(), *u),
        }
    }
    logs.sort_by(|a, b| {
        let (an, au) = key_of(updates, ui, a);
        let (bn, bu) = key_of(updates, ui, b);
        an.cmp(bn).then(bu.cmp(&au))
    });
    // Equal keys: the later source wins (stable sort keeps insertion order).
    let mut keep = vec![true; logs.len()];
    for j in 1..logs.len() {
        if key_of(updates, ui, &logs[j - 1]) == key_of(updates, ui, &logs[j]) {
            keep[j - 1] = false;
        }
    }
    let max_ui = logs
        .iter()
        .map(|s| key_of(updates, ui, s).1)
        .fold(ui, |m, u| if u > m { u } else { m });
    (keep, max_ui)
}
