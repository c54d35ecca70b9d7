//! Following symrefs (git's `refs_resolve_ref_unsafe`) and splitting an update through a
//! symref: the referent gets the update, the symref a log-only entry.

use super::edit::{Expected, RefEdit};
use super::update::{lossy, tx_err, Affected, Upd};
use crate::format::{ObjectId, RefValue};
use crate::refname::SYMREF_MAXDEPTH;
use crate::stack::{ref_value_id, Stack};
use crate::Result;

/// What following a symref chain found.
pub(super) enum Resolution {
    Id(ObjectId),
    /// A ref of the chain does not exist (a dangling symref).
    Missing,
    /// Still a symref after [`SYMREF_MAXDEPTH`] reads (a cycle, or too long a chain).
    TooDeep,
}

/// git's `refs_resolve_ref_unsafe`: follows symrefs from `name`, reading at most
/// `reads` refs (git reads 5: `SYMREF_MAXDEPTH`).
pub(super) fn resolve_chain(stack: &mut Stack, name: &[u8], reads: usize) -> Result<Resolution> {
    let mut cur = name.to_vec();
    for _ in 0..reads {
        match stack.read_ref(&cur)?.map(|r| r.value) {
            Some(RefValue::Symref(t)) => cur = t,
            Some(v) => {
                return Ok(match ref_value_id(&v) {
                    Some(id) => Resolution::Id(id),
                    None => Resolution::Missing,
                })
            }
            None => return Ok(Resolution::Missing),
        }
    }
    Ok(Resolution::TooDeep)
}

/// Resolves a symref target as git's `refs_resolve_ref_unsafe(.., RESOLVE_REF_READING)`:
/// `None` when it (or a ref it points to) does not exist, or the chain is too long.
pub(super) fn resolve_target(stack: &mut Stack, name: &[u8]) -> Result<Option<ObjectId>> {
    Ok(match resolve_chain(stack, name, SYMREF_MAXDEPTH)? {
        Resolution::Id(id) => Some(id),
        Resolution::Missing | Resolution::TooDeep => None,
    })
}

/// `updates[i]` names a symref to `target`: returns the id the symref resolves to now
/// (null when it does not resolve) and, unless the edit is `no_deref` or the update
/// log-only, moves the update to the referent — a new update of `target` is queued and
/// `updates[i]` becomes log-only.
pub(super) fn split_symref(
    stack: &mut Stack,
    edit: &RefEdit,
    updates: &mut Vec<Upd>,
    i: usize,
    target: &[u8],
    affected: &mut Affected,
    null: ObjectId,
) -> Result<ObjectId> {
    let name = updates[i].name.clone();
    let (log_only, check_old, edit_index) =
        (updates[i].log_only, updates[i].check_old, updates[i].edit);
    // The symref itself was the first of git's reads.
    let resolved = resolve_chain(stack, target, SYMREF_MAXDEPTH - 1)?;
    let cur_oid = match resolved {
        Resolution::Id(id) => id,
        Resolution::Missing | Resolution::TooDeep => null,
    };
    let no_deref = edit.no_deref || log_only;
    let have_old = check_old
        && matches!(
            edit.expected,
            Expected::Oid(_) | Expected::MustNotExist | Expected::Symref(_)
        );
    if no_deref && have_old && matches!(resolved, Resolution::TooDeep) {
        return Err(tx_err(format!(
            "cannot lock ref '{}': error reading reference",
            lossy(&name)
        )));
    }
    if !edit.no_deref && !log_only {
        if affected.contains(target) {
            return Err(tx_err(format!(
                "multiple updates for '{}' (including one via symref '{}') are not allowed",
                lossy(target),
                lossy(&name)
            )));
        }
        affected.insert(target);
        let mut referent = Upd::new(target.to_vec(), edit_index, null);
        referent.via_head = name == b"HEAD";
        referent.check_old = check_old;
        updates.push(referent);
        updates[i].log_only = true;
        // As git: an expected old id moves to the referent (HAVE_OLD is cleared), but an
        // expected symref target (`old_target`) is checked on both the symref and its
        // referent.
        if !matches!(edit.expected, Expected::Symref(_)) {
            updates[i].check_old = false;
        }
    }
    Ok(cur_oid)
}
