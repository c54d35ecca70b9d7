//! The two iterator traits every layer reads through: a table's cursors implement them,
//! and so do the merged iterators above. Reseekable: `seek` may be called any number of
//! times, and `next` lends a record from buffers reused between calls.

use crate::format::{LogRecord, RefRecord};
use crate::Result;

/// A reseekable iterator over ref records in key order.
pub trait RefIter {
    /// Positions before the first ref whose name is `>= name` (`b""` = the start).
    fn seek(&mut self, name: &[u8]) -> Result<()>;
    /// The next record, lent from a reused buffer; `None` at the end. Tombstones are
    /// returned (callers skip them after their own bounds check).
    fn next(&mut self) -> Result<Option<&RefRecord>>;
}

/// A reseekable iterator over log records in key order (refname asc, update index desc).
pub trait LogIter {
    /// Positions before the first log record whose key is `>= (refname, update_index)`;
    /// `seek(name, u64::MAX)` finds the newest entry of `name`.
    fn seek(&mut self, refname: &[u8], update_index: u64) -> Result<()>;
    /// The next record, lent from a reused buffer; `None` at the end.
    fn next(&mut self) -> Result<Option<&LogRecord>>;
}
