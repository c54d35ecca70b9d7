//! What the stages of a commit share, below all of them: one update being prepared
//! ([`Upd`]: an edit, or an update derived from one), the names the batch touches
//! ([`Affected`]) and the errors they return.

use std::collections::HashSet;

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

/// The names a transaction touches (git's `affected_refnames`, growing as symrefs are
/// split) and every directory above them, so that both D/F questions against the batch
/// (is this directory one of its names? is this name a directory of one?) are one hash
/// lookup each.
#[derive(Debug, Default)]
pub(super) struct Affected {
    names: HashSet<Vec<u8>>,
    dirs: HashSet<Vec<u8>>,
    /// Names inserted so far: what was found absent stays absent while it is unchanged.
    generation: u64,
}

impl Affected {
    /// Whether `name` is one of the batch's names.
    pub(super) fn contains(&self, name: &[u8]) -> bool {
        self.names.contains(name)
    }

    /// Whether some name of the batch lies below the directory `dir`.
    pub(super) fn has_below(&self, dir: &[u8]) -> bool {
        self.dirs.contains(dir)
    }

    /// The first name (in name order) below the directory `dir`, for an error message.
    pub(super) fn first_below(&self, dir: &[u8]) -> Vec<u8> {
        self.names
            .iter()
            .filter(|n| n.starts_with(dir) && n.get(dir.len()) == Some(&b'/'))
            .min()
            .cloned()
            .unwrap_or_default()
    }

    /// Adds `name`.
    pub(super) fn insert(&mut self, name: &[u8]) {
        if self.names.contains(name) {
            return;
        }
        for (pos, _) in name.iter().enumerate().filter(|(_, &b)| b == b'/') {
            let dir = name.get(..pos).unwrap_or_default();
            if !self.dirs.contains(dir) {
                self.dirs.insert(dir.to_vec());
            }
        }
        self.names.insert(name.to_vec());
        self.generation += 1;
    }

    /// Changes with every insertion.
    pub(super) fn generation(&self) -> u64 {
        self.generation
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
