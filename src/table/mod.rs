//! One reftable file: the writer and the reader.
//!
//! Contract used by the layers above (merged iterator, stack, FUSE):
//!
//! ```text
//! WriteOptions { block_size, restart_interval, unpadded, skip_index_objects,
//!                exact_log_message, hash }            // Default = git's defaults
//! TableWriter::new(opts) -> TableWriter               // owns its scratch + output buffers
//!   .begin(min_ui, max_ui)                            // start a table; reuses buffers
//!   .add_ref(&RefRecord) / .add_log(&LogRecord)       // strictly increasing keys
//!   .finish() -> Result<&[u8]>                        // Err(EmptyTable) if nothing added
//!   .set_options(opts)                                // between tables
//! Table::open(path) -> Result<Arc<Table>>             // validates header/footer/CRC
//! Table::from_bytes(name, Vec<u8>) -> Result<Arc<Table>>
//!   .hash_kind() .min_update_index() .max_update_index() .file_size() .name()
//!   .ref_iter() -> TableRefIter      // impl RefIter: seek(name), next() -> Option<&RefRecord>
//!   .log_iter() -> TableLogIter      // impl LogIter: seek(name, ui), next() -> Option<&LogRecord>
//!   .refs_for(&ObjectId) -> Result<Vec<RefRecord>>    // through the obj index when present
//! ```
//! Iterators are reseekable: `seek` may be called any number of times, and `next` lends
//! a record from buffers reused between calls.

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
