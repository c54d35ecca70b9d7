//! reftablefs: git's reftable ref storage, read and written byte for byte the way git
//! 2.47 does, plus a FUSE driver that serves a reftable stack as a files-backend
//! (`refs/…`, `logs/…`, `packed-refs`) directory tree.
//!
//! Layers, bottom up (see `docs/design.md`):
//!
//! * [`format`](mod@format): pure bytes — varints, records, blocks, header/footer. No I/O.
//! * [`table`]: one `.ref` file — [`table::TableWriter`] (one scratch buffer reused for
//!   every record) and [`table::Table`] (reader with reseekable iterators).
//! * [`merged`]: newest-wins merge over several tables, reseekable.
//! * [`stack`]: `$GIT_DIR/reftable` — `tables.list`, locking, reload, transactions,
//!   geometric auto-compaction, one cached reseekable merged iterator.
//! * `fs` (feature `fuse`): the FUSE adapter.
//! * [`verify`](stack::verify), [`resolve`]: checking a stack as `git refs verify`,
//!   reading names through symrefs.
//!
//! The `reftablefs` binary (`src/main.rs`, `src/cli/`) is built on this public API, plus
//! the two hidden modules it shares with the mount (`status_file`, `mountinfo`).

// `unsafe` only where it is allowed below, per module, for FFI calls into libc; each
// block carries a `// SAFETY:` comment (enforced by clippy, see Cargo.toml).
#![deny(unsafe_code)]
// No panic on any input: no `unwrap`, `expect`, `panic!` or slice indexing (`get` and
// iterators instead) outside tests. The decode path (`format`, `table`, `merged`) and
// `stack` are held to all four; `fs` and `transaction` may index (allowed below).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

pub mod error;
pub mod files;
pub mod format;
// `unsafe` for mount, signals, eventfd, uid/gid, O_PATH descriptors. Slice indexing is
// allowed (write.rs and passthrough.rs index).
#[cfg(feature = "fuse")]
#[allow(unsafe_code)]
#[allow(clippy::indexing_slicing)]
pub mod fs;
mod fsio;
pub mod lockfile;
pub mod merged;
// Not library API (hidden from the docs, no stability promise): mountinfo's escaping
// (used by `fs` and `reftablefs status`) and the status file's document (written by `fs`,
// read by `reftablefs status`, `unmount` and `exec`), shared with the binary, which is
// another crate.
#[doc(hidden)]
pub mod mountinfo;
pub mod refname;
pub mod repo;
pub mod resolve;
pub mod stack;
#[doc(hidden)]
pub mod status_file;
pub mod table;
// Indexes only into the updates and edits of one transaction, by positions it made.
#[allow(clippy::indexing_slicing)]
pub mod transaction;

/// Test seams, for this crate's tests; not library API (hidden from the docs, no
/// stability promise).
#[doc(hidden)]
pub mod testing {
    /// The stack's file-system calls, listed ([`record`](fsio::record)) or failed one at
    /// a time ([`inject`](fsio::inject)): see `src/fsio.rs`.
    pub mod fsio {
        pub use crate::fsio::{inject, record, Op, Step};
    }
}

pub use error::{Error, Result};
pub use format::{HashKind, LogRecord, ObjectId, RefRecord, RefValue};
