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
//!   auto-compaction; when that is certain to merge the new table with the whole stack,
//!   the table is written already merged instead (`stack/direct.rs`: what git leaves, in
//!   one pass).
//!
//! The files, each depending only on the ones listed before it: `edit` (what a caller
//! asks for) and `identity`; `update` (what the stages share: one update being
//! prepared, the errors); `batch` (the [`Transaction`] a caller builds); `symref`
//! (following symrefs, splitting an update through one); `check` (names, duplicates,
//! expected old values, D/F conflicts); `reflog` (which log records the table gets);
//! `commit` (writing the planned records through the stack's write protocol); `plan`
//! (git's prepare: the updates derived from the edits and what the new table will hold,
//! and the entry points [`Transaction::prepare`] and [`Transaction::commit`]).

mod batch;
mod check;
mod commit;
mod edit;
#[allow(unsafe_code)] // localtime_r
mod identity;
mod plan;
mod reflog;
mod symref;
mod update;

pub use batch::Transaction;
pub use commit::{Committed, PreparedTransaction};
pub use edit::{Expected, LogAllRefUpdates, LogEdit, NewValue, RefEdit};
pub use identity::{local_tz_hhmm, Identity};
pub use reflog::normalize_reflog_message;

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
