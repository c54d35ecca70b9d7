//! What is checked before anything is written: names and duplicates (before the lock),
//! expected old values and D/F conflicts (under the lock, against the stack and the
//! batch).

use super::batch::Transaction;
use super::edit::{Expected, NewValue, RefEdit};
use super::update::{conflict, lossy, tx_err, Affected, Upd};
use crate::format::{ObjectId, RefValue};
use crate::refname::{check_for_update, check_refname_format, RefnameFlags};
use crate::stack::Stack;
use crate::table::RefIter;
use crate::{Error, Result};

impl Transaction<'_> {
    /// Ids of the right hash, valid names (unless an edit skips the check), and no ref
    /// named twice.
    pub(super) fn validate(&mut self) -> Result<()> {
        let hash = self.stack.options().hash;
        for e in &mut self.edits {
            if let Some(NewValue::Oid(id)) = &e.new {
                if id.is_null() {
                    e.new = Some(NewValue::Delete);
                }
            }
            let ids: Vec<ObjectId> = match (&e.new, &e.expected) {
                (Some(NewValue::Oid(a)), _) => vec![*a],
                (Some(NewValue::Peeled { value, peeled }), _) => vec![*value, *peeled],
                _ => vec![],
            };
            let exp: Option<ObjectId> = match &e.expected {
                Expected::Oid(x) => Some(*x),
                _ => None,
            };
            for id in ids.iter().chain(exp.iter()) {
                if id.kind() != hash {
                    return Err(Error::Api(format!(
                        "object id {id} is not {} for ref '{}'",
                        hash.name(),
                        lossy(&e.name)
                    )));
                }
            }
            if !e.skip_refname_verification {
                let sets_value = matches!(
                    e.new,
                    Some(NewValue::Oid(_) | NewValue::Peeled { .. } | NewValue::Symref(_))
                );
                check_for_update(&e.name, sets_value)?;
                if let Some(NewValue::Symref(t)) = &e.new {
                    check_refname_format(
                        t,
                        RefnameFlags {
                            allow_onelevel: true,
                            refspec_pattern: false,
                        },
                    )?;
                }
            }
        }
        let mut names: Vec<&[u8]> = self.edits.iter().map(|e| e.name.as_slice()).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(tx_err(format!(
                "multiple updates for ref '{}' not allowed",
                lossy(w[0])
            )));
        }
        Ok(())
    }
}

/// What [`check_available`] keeps between calls: the seek key it builds, and the longest
/// directory it found to be no ref of the stack and no name of the batch (the stack does
/// not change while a transaction is planned, so every directory above it is no ref
/// either, and the next name under the same directories needs no seek for them: `refs`,
/// `refs/heads`, ...). The batch can grow (a symref split): the directory is trusted only
/// while the batch is as it was (`generation`).
#[derive(Default)]
pub(super) struct DfScratch {
    key: Vec<u8>,
    free_dir: Vec<u8>,
    generation: u64,
}

impl DfScratch {
    /// Whether `dir` is known to be no ref of the stack: `free_dir` or a directory above it.
    fn known_free(&self, dir: &[u8]) -> bool {
        self.free_dir.starts_with(dir)
            && (self.free_dir.len() == dir.len() || self.free_dir.get(dir.len()) == Some(&b'/'))
    }
}

/// D/F check of `name` (which does not exist) against the stack and the batch.
pub(super) fn check_available(
    stack: &mut Stack,
    name: &[u8],
    affected: &Affected,
    scratch: &mut DfScratch,
) -> Result<()> {
    let lossy_name = || lossy(name).into_owned();
    if scratch.generation != affected.generation() {
        scratch.free_dir.clear();
        scratch.generation = affected.generation();
    }
    stack.with_cached_iter(|it| {
        // Ancestors: every proper prefix directory, read through the reseeked iterator
        // unless an earlier name's check showed it is no ref.
        let mut free_to = 0;
        for (pos, _) in name.iter().enumerate().filter(|(_, &b)| b == b'/') {
            let dir = &name[..pos];
            free_to = pos;
            if scratch.known_free(dir) {
                continue;
            }
            it.seek(dir)?;
            if let Some(r) = it.next()? {
                if r.name == dir && !r.is_deletion() {
                    return Err(tx_err(format!(
                        "'{}' exists; cannot create '{}'",
                        lossy(dir),
                        lossy_name()
                    )));
                }
            }
            if affected.contains(dir) {
                return Err(tx_err(format!(
                    "cannot process '{}' and '{}' at the same time",
                    lossy_name(),
                    lossy(dir)
                )));
            }
        }
        if free_to > 0 && !scratch.known_free(&name[..free_to]) {
            scratch.free_dir.clear();
            scratch.free_dir.extend_from_slice(&name[..free_to]);
        }
        let scratch = &mut scratch.key;
        // Descendants: the same iterator reseeked to `name/`.
        scratch.clear();
        scratch.extend_from_slice(name);
        scratch.push(b'/');
        it.seek(scratch)?;
        while let Some(r) = it.next()? {
            if !r.name.starts_with(scratch) {
                break;
            }
            if r.is_deletion() {
                continue;
            }
            return Err(tx_err(format!(
                "'{}' exists; cannot create '{}'",
                lossy(&r.name),
                lossy_name()
            )));
        }
        if affected.has_below(name) {
            return Err(tx_err(format!(
                "cannot process '{}' and '{}' at the same time",
                lossy_name(),
                lossy(&affected.first_below(name))
            )));
        }
        Ok(())
    })
}

/// The expected old value of `edit` against the ref of `upd` as it is now (`cur`,
/// resolving to `cur_oid`): git's messages. The HEAD entry added for an update of
/// HEAD's referent checks the id HEAD resolves to.
pub(super) fn check_old_value(
    edit: &RefEdit,
    upd: &Upd,
    cur: &RefValue,
    cur_oid: ObjectId,
    null: ObjectId,
) -> Result<()> {
    if upd.check_old && upd.head_copy {
        let expected = match &edit.expected {
            Expected::Oid(x) => Some(*x),
            Expected::MustNotExist | Expected::Symref(_) => Some(null),
            Expected::Any | Expected::MustExist => None,
        };
        match expected {
            Some(x) if x != cur_oid && x.is_null() => {
                return Err(conflict(
                    edit,
                    Some(cur),
                    "cannot lock ref 'HEAD': reference already exists".into(),
                ));
            }
            Some(x) if x != cur_oid && cur_oid.is_null() => {
                return Err(conflict(
                    edit,
                    Some(cur),
                    format!("cannot lock ref 'HEAD': reference is missing but expected {x}"),
                ));
            }
            Some(x) if x != cur_oid => {
                return Err(conflict(
                    edit,
                    Some(cur),
                    format!("cannot lock ref 'HEAD': is at {cur_oid} but expected {x}"),
                ));
            }
            _ => {}
        }
    } else if upd.check_old {
        match &edit.expected {
            Expected::Any | Expected::MustExist => {}
            // As git: a symref (no_deref) is compared by the id it resolves to,
            // so a dangling symref passes "must not exist".
            Expected::MustNotExist if cur_oid.is_null() => {}
            Expected::MustNotExist => {
                return Err(conflict(
                    edit,
                    Some(cur),
                    format!(
                        "cannot lock ref '{}': reference already exists",
                        lossy(&edit.name)
                    ),
                ));
            }
            Expected::Oid(x) if cur_oid.is_null() && *x != cur_oid => {
                return Err(conflict(
                    edit,
                    Some(cur),
                    format!(
                        "cannot lock ref '{}': reference is missing but expected {x}",
                        lossy(&edit.name),
                    ),
                ));
            }
            Expected::Oid(x) => {
                if cur_oid != *x {
                    return Err(conflict(
                        edit,
                        Some(cur),
                        format!(
                            "cannot lock ref '{}': is at {} but expected {}",
                            lossy(&edit.name),
                            cur_oid,
                            x
                        ),
                    ));
                }
            }
            Expected::Symref(t) => match &cur {
                RefValue::Symref(actual) if actual == t => {}
                RefValue::Symref(actual) => {
                    return Err(conflict(
                        edit,
                        Some(cur),
                        format!(
                            "verifying symref target: '{}': is at {} but expected {}",
                            lossy(&edit.name),
                            lossy(actual),
                            lossy(t)
                        ),
                    ));
                }
                _ => {
                    return Err(conflict(edit, Some(cur), format!(
                            "cannot lock ref '{}': expected symref with target '{}': but is a regular ref",
                            lossy(&edit.name),
                            lossy(t)
                        )));
                }
            },
        }
    }
    Ok(())
}
