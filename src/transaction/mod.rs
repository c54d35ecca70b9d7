//! Ref transactions: a batch of edits validated as a whole under `tables.list.lock` and
//! written as one table, or not at all (git's `refs/reftable-backend.c` prepare/commit).
//!
//! What git 2.47 does, and so what this does:
//! * names checked with [`crate::refname::check_for_update`]; the same ref twice is
//!   "multiple updates for ref '…' not allowed";
//! * an update through a symref (unless `no_deref`) is split: the referent gets the
//!   update, the symref a log-only entry; an update of HEAD's referent also gets a
//!   log-only HEAD entry at the same update index;
//! * expected old values are checked against the stack under the lock;
//! * a ref that does not exist yet is checked for D/F conflicts against the stack and
//!   the batch, with the stack's one cached iterator reseeked for every name;
//! * a no-op update is skipped with its reflog entry; deleting a missing ref writes
//!   nothing; deleting a ref writes a tombstone plus log tombstones for its whole reflog,
//!   except a symref, whose reflog gets an entry `old → 0` instead;
//! * writing a symref logs (when the ref logs) the id it resolved to → the id its new
//!   target resolves to now, and nothing when the target does not resolve; the HEAD
//!   entry for a symref written on HEAD's referent logs `old → 0`;
//! * reflog messages are normalised (whitespace runs → one space, trimmed), truncated to
//!   `block_size / 2`, and end in one `\n`; callers may supply the complete log record
//!   instead (the mount does, for reflog lines written by a files-backend git);
//! * one fsync round (table, `tables.list`, directory) per transaction, then
//!   auto-compaction.
//!
//! The files: `edit` (what a caller asks for), `plan` (git's prepare: the updates
//! derived from the edits and what the new table will hold), `symref` (following
//! symrefs, splitting an update through one), `check` (names, duplicates, expected old
//! values, D/F conflicts), `reflog` (which log records the table gets), `commit` (writing
//! the planned records through the stack's write protocol) and `identity`.

mod check;
mod commit;
mod edit;
#[allow(unsafe_code)] // localtime_r
mod identity;
mod plan;
mod reflog;
mod symref;

pub use commit::PreparedTransaction;
pub use edit::{Expected, LogAllRefUpdates, LogEdit, NewValue, RefEdit};
pub use identity::{local_tz_hhmm, Identity};
pub use reflog::normalize_reflog_message;

use crate::stack::Stack;
use crate::{Error, Result};

fn tx_err(msg: String) -> Error {
    Error::Transaction(msg)
}

/// An expected old value that does not hold: the edit's ref name and expected value,
/// the value found (`None`: absent) and git's message.
fn conflict(edit: &RefEdit, found: Option<&crate::format::RefValue>, message: String) -> Error {
    Error::Conflict {
        refname: edit.name.clone(),
        expected: Box::new(edit.expected.clone()),
        found: found.map(|v| Box::new(v.clone())),
        message,
    }
}

fn lossy(b: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(b)
}

/// What a committed transaction did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Committed {
    /// The update index of the new table (the stack's next index when nothing was
    /// written).
    pub update_index: u64,
    /// The new table's file name; `None` when every edit was a no-op.
    pub table: Option<String>,
}

/// A batch of edits on one stack. Build it with [`Stack::transaction`].
pub struct Transaction<'a> {
    stack: &'a mut Stack,
    edits: Vec<RefEdit>,
    log_edits: Vec<LogEdit>,
    identity: Identity,
    log_all: LogAllRefUpdates,
}

impl Stack {
    /// Starts a transaction (nothing is locked until [`Transaction::commit`]).
    pub fn transaction(&mut self) -> Transaction<'_> {
        Transaction {
            stack: self,
            edits: Vec::new(),
            log_edits: Vec::new(),
            identity: Identity::default(),
            log_all: LogAllRefUpdates::True,
        }
    }
}

impl<'a> Transaction<'a> {
    /// Adds a ref edit.
    pub fn edit(&mut self, e: RefEdit) -> &mut Self {
        self.edits.push(e);
        self
    }
    /// Adds a log-only edit.
    pub fn log_edit(&mut self, e: LogEdit) -> &mut Self {
        self.log_edits.push(e);
        self
    }
    /// Sets the identity of generated reflog entries.
    pub fn identity(&mut self, id: Identity) -> &mut Self {
        self.identity = id;
        self
    }
    /// Sets `core.logAllRefUpdates`.
    pub fn log_all_ref_updates(&mut self, v: LogAllRefUpdates) -> &mut Self {
        self.log_all = v;
        self
    }
    /// Number of ref edits so far.
    pub fn len(&self) -> usize {
        self.edits.len()
    }
    /// Whether no edit was added.
    pub fn is_empty(&self) -> bool {
        self.edits.is_empty() && self.log_edits.is_empty()
    }

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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reflog_messages_are_normalised_like_git() {
        let mut out = Vec::new();
        normalize_reflog_message(b"  commit:\tone\n\ntwo  \n", &mut out);
        assert_eq!(out, b"commit: one two");
        normalize_reflog_message(b"", &mut out);
        assert_eq!(out, b"");
        normalize_reflog_message(b"\n\n", &mut out);
        assert_eq!(out, b"");
    }

    #[test]
    fn timezone_is_hhmm() {
        // Whatever the local zone, the value must be a valid ±HHMM.
        let tz = local_tz_hhmm(1_112_912_053);
        assert!(tz.abs() % 100 < 60 && tz.abs() / 100 <= 14, "{tz}");
    }
}
