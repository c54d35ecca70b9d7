//! One reftable file: the writer and the reader.
//!
//! Contract used by the layers above (merged iterator, stack, FUSE):
//!
//! ```text
//! WriteOptions { block_size, restart_interval, unpadded, skip_index_objects,
//!                exact_log_message, hash }            // Default = git's defaults
//! TableWriter::new(opts) -> TableWriter               // owns its scratch + output buffers
//!   .begin(min_ui, max_ui) -> Result<()>              // start a table; reuses buffers
//!                                                     // (Err(Api) for block_size >= 2^24)
//!   .add_ref(&RefRecord) / .add_log(&LogRecord)       // strictly increasing keys
//!   .add_log_verbatim(&LogRecord)                     // message as is (git's NULL message)
//!   .finish() -> Result<&[u8]>                        // Err(EmptyTable) if nothing added
//!   .set_options(opts)                                // between tables
//!   .output() -> &[u8]   .stats() -> &WriterStats     // the bytes also after EmptyTable
//! Table::open(path) -> Result<Arc<Table>>             // validates header/footer/CRC; keeps
//!                                                     // the file open, reads blocks on demand
//! Table::open_in(path, &Arc<BlockCache>)              // its blocks in a cache shared with others
//! Table::from_bytes(name, Vec<u8>) -> Result<Arc<Table>>
//!   .hash_kind() .min_update_index() .max_update_index() .file_size() .name()
//!   .block_size() .version() .header() .footer() .has_refs() .has_logs() .read_all()
//!   .blocks() -> Result<Vec<BlockInfo>>  .block_records(&info)  .verify() -> Result<()>
//!   .ref_iter() -> TableRefIter      // impl RefIter: seek(name), next() -> Option<&RefRecord>
//!   .log_iter() -> TableLogIter      // impl LogIter: seek(name, ui), next() -> Option<&LogRecord>
//!   .refs_for(&ObjectId) -> Result<Vec<RefRecord>>    // through the obj index when present
//! BlockCache::new(budget) -> Arc<BlockCache>   .bytes()   // a block cache and its bytes
//! ```
//! Blocks are read with `pread` and kept in a least-recently-used [`BlockCache`] bounded
//! in bytes ([`DEFAULT_BLOCK_CACHE_BYTES`] unless its owner says otherwise) and shared by
//! the tables of its owner (a stack's, a mount's), so memory does not grow with the size
//! of the stack.
//!
//! Iterators are reseekable: `seek` may be called any number of times, and `next` lends
//! a record from buffers reused between calls.

mod iter;
mod reader;
mod writer;

pub use iter::{LogIter, RefIter};
pub use reader::{
    AnyRecord, BlockCache, BlockInfo, Table, TableLogIter, TableRefIter, DEFAULT_BLOCK_CACHE_BYTES,
};
pub use writer::{SectionStats, TableWriter, WriteOptions, WriterStats};
