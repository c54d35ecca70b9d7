//! What the stages of a commit share, below all of them: one update being prepared
//! ([`Upd`]: an edit, or an update derived from one) and the errors they return.

use super::edit::RefEdit;
use crate::format::{ObjectId, RefValue};
use crate::Error;

/// One update being prepared (an edit, or one derived from it).
#[derive(Debug)]
pub(super) struct Upd {
    pub(super) name: Vec<u8>,
    /// Index of the edit it comes from.
    pub(super) edit: usize,
    pub(super) log_only: bool,
    pub(super) via_head: bool,
    /// The log-only HEAD entry added for an update of HEAD's referent (git gives it the
    /// edit's new id, which is null for a symref edit).
    pub(super) head_copy: bool,
    /// The ref is a symref now (git's `REF_ISSYMREF` in `u->type`).
    pub(super) cur_symref: bool,
    /// Expectation applies (cleared on a symref split).
    pub(super) check_old: bool,
    /// The id the ref (resolved) has now; null when missing or unresolvable.
    pub(super) cur_oid: ObjectId,
    pub(super) queued: bool,
}

impl Upd {
    /// An update of `name` for edit `edit`, not yet looked at.
    pub(super) fn new(name: Vec<u8>, edit: usize, null: ObjectId) -> Upd {
        Upd {
            name,
            edit,
            log_only: false,
            via_head: false,
            head_copy: false,
            cur_symref: false,
            check_old: true,
            cur_oid: null,
            queued: false,
        }
    }
}

pub(super) fn tx_err(msg: String) -> Error {
    Error::Transaction(msg)
}

/// An expected old value that does not hold: the edit's ref name and expected value,
/// the value found (`None`: absent) and git's message.
pub(super) fn conflict(edit: &RefEdit, found: Option<&RefValue>, message: String) -> Error {
    Error::Conflict {
        refname: edit.name.clone(),
        expected: Box::new(edit.expected.clone()),
        found: found.map(|v| Box::new(v.clone())),
        message,
    }
}

pub(super) fn lossy(b: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(b)
}
