//! git's `ref_transaction_prepare`, under the stack's lock: the updates derived from the
//! edits (an update through a symref moves to its referent, an update of HEAD's
//! referent gets a log-only HEAD entry), each checked against the stack, and the log
//! records the new table will hold. The top of the transaction's files: a
//! [`Transaction`] ends here, in [`Transaction::prepare`] or [`Transaction::commit`].

use super::batch::Transaction;
use super::check::{check_available, check_old_value, DfScratch};
use super::commit::{Committed, PreparedTransaction};
use super::edit::{Expected, NewValue, RefEdit};
use super::reflog::sort_logs;
use super::symref::split_symref;
use super::update::{conflict, lossy, tx_err, Affected, Upd};
use crate::format::{ObjectId, RefValue};
use crate::stack::{ref_value_id, Stack};
use crate::Result;

impl Transaction<'_> {
    /// Validates every edit under the stack lock and writes one table (or nothing when
    /// every edit is a no-op). On error nothing is written.
    pub fn commit(mut self) -> Result<Committed> {
        let prepared = self.plan()?;
        prepared.commit(self.stack)
    }

    /// git's `ref_transaction_prepare`: takes the stack's lock and checks everything a
    /// commit checks (names, duplicates, expected values, D/F conflicts) against the
    /// stack as it is under the lock. The returned [`PreparedTransaction`] holds the lock
    /// until it is committed or dropped (= aborted); its commit can then only fail on
    /// I/O. The stack is not borrowed meanwhile (it is only read until the commit).
    pub fn prepare(mut self) -> Result<PreparedTransaction> {
        self.plan()
    }

    fn plan(&mut self) -> Result<PreparedTransaction> {
        self.validate()?;
        let lock = self.stack.lock_for_write()?;
        let ui = self.stack.next_update_index();
        let null = self.stack.options().hash.null_id();

        let updates = self.plan_updates(null)?;
        // The updates in name order (stable: equal names keep their order). The generated
        // logs follow it, so sorting the logs finds them in one run.
        let mut by_name: Vec<usize> = (0..updates.len()).collect();
        by_name.sort_by(|&a, &b| updates[a].name.cmp(&updates[b].name));
        let (mut logs, new_ids) = self.plan_logs(&updates, &by_name, ui, null)?;

        // Write: refs sorted by name, then logs by (name, update index desc).
        let order: Vec<usize> = by_name
            .into_iter()
            .filter(|&i| updates[i].queued && !updates[i].log_only)
            .collect();
        let (keep, max_ui) = sort_logs(&updates, ui, &mut logs);

        Ok(PreparedTransaction {
            dir: self.stack.dir().to_path_buf(),
            lock,
            edits: std::mem::take(&mut self.edits),
            identity: std::mem::take(&mut self.identity),
            updates,
            logs,
            keep,
            order,
            new_ids,
            ui,
            max_ui,
            null,
        })
    }

    /// The updates of the edits and the ones derived from them, each checked against the
    /// stack and marked `queued` when it writes something.
    fn plan_updates(&mut self, null: ObjectId) -> Result<Vec<Upd>> {
        let mut updates: Vec<Upd> = self
            .edits
            .iter()
            .enumerate()
            .map(|(i, e)| Upd::new(e.name.clone(), i, null))
            .collect();
        let mut affected = Affected::default();
        for u in &updates {
            affected.insert(&u.name);
        }
        let head_referent = match self.stack.read_ref(b"HEAD")?.map(|r| r.value) {
            Some(RefValue::Symref(t)) => Some(t),
            _ => None,
        };
        let mut scratch = DfScratch::default();
        let mut i = 0;
        while i < updates.len() {
            let edit = &self.edits[updates[i].edit];
            if let Some(h) = &head_referent {
                let u = &updates[i];
                if !u.log_only && !u.via_head && !edit.files_reflog && u.name == *h {
                    let copy = head_copy(u, &mut affected, null)?;
                    updates.push(copy);
                }
            }
            prepare_update(
                self.stack,
                edit,
                &mut updates,
                i,
                &mut affected,
                &mut scratch,
                null,
            )?;
            i += 1;
        }
        Ok(updates)
    }
}

/// The log-only HEAD entry for `u`, an update of HEAD's referent.
fn head_copy(u: &Upd, affected: &mut Affected, null: ObjectId) -> Result<Upd> {
    if affected.contains(b"HEAD".as_slice()) {
        return Err(tx_err(format!(
            "multiple updates for 'HEAD' (including one via its referent '{}') are not allowed",
            lossy(&u.name)
        )));
    }
    affected.insert(b"HEAD");
    let mut copy = Upd::new(b"HEAD".to_vec(), u.edit, null);
    copy.log_only = true;
    copy.head_copy = true;
    // As git: the copy carries the update's old-id check (HAVE_OLD and old_oid; an old
    // symref target counts as the null id), made against the id HEAD resolves to.
    copy.check_old = u.check_old;
    Ok(copy)
}

/// Looks at `updates[i]` under the lock: reads the ref, splits an update through a
/// symref, checks the expected old value (or, for a ref that does not exist, D/F
/// conflicts) and decides whether it writes anything.
fn prepare_update(
    stack: &mut Stack,
    edit: &RefEdit,
    updates: &mut Vec<Upd>,
    i: usize,
    affected: &mut Affected,
    scratch: &mut DfScratch,
    null: ObjectId,
) -> Result<()> {
    let name = updates[i].name.clone();
    let cur = stack.read_ref(&name)?.map(|r| r.value);
    let Some(cur) = cur else {
        let u = &mut updates[i];
        let expects_existing = u.check_old
            && matches!(
                edit.expected,
                Expected::MustExist | Expected::Oid(_) | Expected::Symref(_)
            );
        if expects_existing {
            return Err(conflict(
                edit,
                None,
                format!(
                    "cannot lock ref '{}': unable to resolve reference '{}'",
                    lossy(&edit.name),
                    lossy(&name)
                ),
            ));
        }
        if !u.log_only {
            check_available(stack, &name, affected, scratch)?;
        }
        let writes = matches!(
            edit.new,
            Some(NewValue::Oid(_) | NewValue::Peeled { .. } | NewValue::Symref(_))
        );
        u.queued = writes || u.log_only;
        return Ok(());
    };
    let is_symref = matches!(cur, RefValue::Symref(_));
    updates[i].cur_symref = is_symref;
    let mut cur_oid = ref_value_id(&cur).unwrap_or(null);
    if let RefValue::Symref(target) = &cur {
        cur_oid = split_symref(stack, edit, updates, i, target, affected, null)?;
    }
    let u = &mut updates[i];
    u.cur_oid = cur_oid;
    check_old_value(edit, u, &cur, cur_oid, null)?;
    let changed = match &edit.new {
        None => false,
        // As git: only the id is compared, so a no-op update of an annotated tag keeps
        // its peeled value.
        Some(NewValue::Oid(id)) => is_symref || ref_value_id(&cur) != Some(*id),
        Some(NewValue::Peeled { value, .. }) => is_symref || ref_value_id(&cur) != Some(*value),
        Some(NewValue::Symref(_)) => true,
        Some(NewValue::Delete) => true,
    };
    u.queued = edit.new.is_some()
        && (u.log_only || matches!(edit.new, Some(NewValue::Symref(_))) || changed);
    Ok(())
}
