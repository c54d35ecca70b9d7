//! Record types shared by every layer. Encoding and decoding live beside them
//! (format-core work); these definitions are the contract.

use super::ObjectId;

/// The value of a ref record (`value_type` 0..=3 in the key's extra bits).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum RefValue {
    /// Type 0: a tombstone that hides older tables' value.
    #[default]
    Deletion,
    /// Type 1: one object id.
    Val1(ObjectId),
    /// Type 2: an annotated tag's id and the id it peels to.
    Val2 { value: ObjectId, peeled: ObjectId },
    /// Type 3: a symbolic ref; the target refname.
    Symref(Vec<u8>),
}

impl RefValue {
    /// The object id a ref points at directly (an annotated tag's own id, not the peeled
    /// one); `None` for a symref or a deletion.
    pub fn object_id(&self) -> Option<&ObjectId> {
        match self {
            RefValue::Val1(id) | RefValue::Val2 { value: id, .. } => Some(id),
            RefValue::Deletion | RefValue::Symref(_) => None,
        }
    }
}

/// A ref record: key = refname.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct RefRecord {
    pub name: Vec<u8>,
    pub update_index: u64,
    pub value: RefValue,
}

impl RefRecord {
    /// Whether this record is a deletion tombstone.
    pub fn is_deletion(&self) -> bool {
        matches!(self.value, RefValue::Deletion)
    }
}

/// A log record: key = refname NUL be64(!update_index). Flat so that a decoder can reuse
/// every buffer from one record to the next, whatever kind the next record is.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LogRecord {
    pub refname: Vec<u8>,
    pub update_index: u64,
    /// `true` for a log tombstone (log_type 0): the fields below are then meaningless.
    pub deleted: bool,
    pub old_id: ObjectId,
    pub new_id: ObjectId,
    /// Committer name.
    pub name: Vec<u8>,
    /// Committer email, without `<` `>`.
    pub email: Vec<u8>,
    /// Seconds since the epoch.
    pub time: u64,
    /// git's ±HHMM as a decimal integer: -0700 is -700 (not minutes).
    pub tz_offset: i16,
    /// The message, normally ending in exactly one `\n`.
    pub message: Vec<u8>,
}
