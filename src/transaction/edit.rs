//! The vocabulary of a transaction: what one edit asks for ([`RefEdit`] with its
//! [`NewValue`] and [`Expected`] old value), log-only edits ([`LogEdit`]) and
//! `core.logAllRefUpdates`.

use crate::format::{LogRecord, ObjectId};

/// The value a ref edit gives the ref.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NewValue {
    /// One object id (the null id means delete).
    Oid(ObjectId),
    /// An annotated tag and the object it peels to.
    Peeled { value: ObjectId, peeled: ObjectId },
    /// A symbolic ref to the given target. As git: without `no_deref`, an edit of a ref
    /// that is a symref now makes its referent the new symref (see [`RefEdit::symref`]).
    Symref(Vec<u8>),
    /// Delete the ref.
    Delete,
}

/// What the ref must look like before the edit.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Expected {
    /// No check.
    #[default]
    Any,
    /// The ref must not exist.
    MustNotExist,
    /// The ref must exist (any value).
    MustExist,
    /// The ref (after dereferencing) must have this id.
    Oid(ObjectId),
    /// The ref itself must be a symref to this target.
    Symref(Vec<u8>),
}

/// One ref edit of a transaction.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RefEdit {
    /// The ref name as given (it may be a symref that gets dereferenced).
    pub name: Vec<u8>,
    /// The new value; `None` only verifies [`expected`](Self::expected).
    pub new: Option<NewValue>,
    /// The expected current value.
    pub expected: Expected,
    /// Update a symref itself instead of its referent.
    pub no_deref: bool,
    /// The reflog message (normalised as git does).
    pub message: Option<Vec<u8>>,
    /// A complete log record replacing the generated one (`refname` and `update_index`
    /// are ignored). Written whatever `core.logAllRefUpdates` says.
    pub log: Option<LogRecord>,
    /// Write a reflog entry even if the ref would not get one (`REF_FORCE_CREATE_REFLOG`).
    pub force_create_reflog: bool,
    /// Write no reflog entry for this ref, even if its reflog exists
    /// (`REF_SKIP_CREATE_REFLOG`).
    pub skip_create_reflog: bool,
    /// Skip ref-name checks (`REF_SKIP_REFNAME_VERIFICATION`).
    pub skip_refname_verification: bool,
    /// Files-backend reflog semantics (the mount replaying a files-backend client): the
    /// only log record written for this edit is [`log`](Self::log) — no generated entry,
    /// no HEAD entry for an update of HEAD's referent — and deleting the ref keeps its
    /// reflog (in the files backend a reflog goes only when `logs/…` is removed, which
    /// the mount sends as a [`LogEdit::Delete`]).
    pub files_reflog: bool,
}

impl RefEdit {
    /// Sets `name` to `id` whatever its current value.
    pub fn update(name: impl Into<Vec<u8>>, id: ObjectId) -> RefEdit {
        RefEdit {
            name: name.into(),
            new: Some(NewValue::Oid(id)),
            ..RefEdit::default()
        }
    }
    /// Creates `name` with `id`; fails if it exists.
    pub fn create(name: impl Into<Vec<u8>>, id: ObjectId) -> RefEdit {
        RefEdit::update(name, id).expect(Expected::MustNotExist)
    }
    /// Deletes `name`.
    pub fn delete(name: impl Into<Vec<u8>>) -> RefEdit {
        RefEdit {
            name: name.into(),
            new: Some(NewValue::Delete),
            ..RefEdit::default()
        }
    }
    /// Only checks that `name` matches `expected`.
    pub fn verify(name: impl Into<Vec<u8>>, expected: Expected) -> RefEdit {
        RefEdit {
            name: name.into(),
            expected,
            ..RefEdit::default()
        }
    }
    /// Makes `name` a symref to `target` (the symref itself is written).
    pub fn symref(name: impl Into<Vec<u8>>, target: impl Into<Vec<u8>>) -> RefEdit {
        RefEdit {
            name: name.into(),
            new: Some(NewValue::Symref(target.into())),
            no_deref: true,
            ..RefEdit::default()
        }
    }
    /// Sets the expected old value.
    pub fn expect(mut self, expected: Expected) -> RefEdit {
        self.expected = expected;
        self
    }
    /// Sets the reflog message.
    pub fn message(mut self, msg: impl Into<Vec<u8>>) -> RefEdit {
        self.message = Some(msg.into());
        self
    }
    /// Updates a symref itself rather than its referent.
    pub fn no_deref(mut self) -> RefEdit {
        self.no_deref = true;
        self
    }
    /// Supplies the complete reflog record.
    pub fn log_record(mut self, log: LogRecord) -> RefEdit {
        self.log = Some(log);
        self
    }
}

/// A log-only edit.
#[derive(Clone, Debug)]
pub enum LogEdit {
    /// Append one entry (written at the transaction's update index).
    Append { refname: Vec<u8>, entry: LogRecord },
    /// Replace the whole reflog with `entries` (oldest first): tombstones for the old
    /// entries, then the new ones (a files-backend reflog rewrite, reflog expiry).
    Rewrite {
        refname: Vec<u8>,
        entries: Vec<LogRecord>,
    },
    /// Start an empty reflog (git's existence marker) unless one exists.
    Create { refname: Vec<u8> },
    /// Delete the reflog: tombstones for every entry.
    Delete { refname: Vec<u8> },
}

/// `core.logAllRefUpdates`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LogAllRefUpdates {
    /// Only refs whose reflog exists.
    False,
    /// HEAD, `refs/heads/`, `refs/remotes/`, `refs/notes/`, and refs with a reflog
    /// (git's default for non-bare repositories).
    #[default]
    True,
    /// Every ref.
    Always,
}

impl LogAllRefUpdates {
    /// Whether an update of `refname` creates a reflog when none exists yet
    /// (git's `should_autocreate_reflog`).
    pub fn autocreates(self, refname: &[u8]) -> bool {
        match self {
            LogAllRefUpdates::Always => true,
            LogAllRefUpdates::False => false,
            LogAllRefUpdates::True => {
                refname == b"HEAD"
                    || refname.starts_with(b"refs/heads/")
                    || refname.starts_with(b"refs/remotes/")
                    || refname.starts_with(b"refs/notes/")
            }
        }
    }
}
