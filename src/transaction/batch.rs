//! The transaction a caller builds: its edits, identity and `core.logAllRefUpdates`,
//! gathered on one stack before anything is locked. The stages below take it from here
//! (`plan` locks, checks and plans; `commit` writes).

use super::edit::{LogAllRefUpdates, LogEdit, RefEdit};
use super::identity::Identity;
use crate::stack::Stack;

/// A batch of edits on one stack. Build it with [`Stack::transaction`].
pub struct Transaction<'a> {
    pub(super) stack: &'a mut Stack,
    pub(super) edits: Vec<RefEdit>,
    pub(super) log_edits: Vec<LogEdit>,
    pub(super) identity: Identity,
    pub(super) log_all: LogAllRefUpdates,
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
}
