//! `$GIT_DIR/reftable`: the stack of tables listed in `tables.list`, read, reloaded,
//! appended to and compacted with git's protocol (reftable-format.md §7).
//!
//! * **Lookups** go through one cached merged ref iterator, reseeked for every lookup and
//!   dropped only when a reload changes the table set ([`Stack::generation`]).
//! * **Writes** hold `tables.list.lock`, write one table through the stack's single
//!   [`TableWriter`] (its buffers reused for every table), then run one fsync round: the
//!   table, the new list, the directory. See [`crate::transaction`]. A transaction's
//!   table that auto-compaction is certain to merge with the whole stack is written
//!   merged at once (`direct.rs`).
//! * **Compaction** follows git's geometric rule with table locks, so a concurrent git is
//!   safe (§7.6, §7.7).
//!
//! The files of this module, one job each:
//!
//! * `mod.rs`: the [`Stack`] type, its options, counters and the small helpers on records;
//! * `list.rs`: `tables.list` (parsing, reading it with its identity), opening a stack
//!   and reloading it when the list or a table file changed;
//! * `read.rs`: lookups and iteration (the cached merged iterator, reflogs);
//! * `write.rs`: git's write protocol (list lock, table file, list commit, fsync round);
//! * `compact.rs`: geometric and explicit compaction with table locks;
//! * `direct.rs`: a transaction's table written already compacted with the stack below
//!   it, when git's auto-compaction is certain to merge them at once;
//! * `clean.rs`: removal of unlisted tables and of leftovers proven to be garbage.

mod clean;
mod compact;
mod direct;
mod list;
mod read;
pub mod verify;
mod write;

pub use clean::OrphanReport;
pub use compact::suggest_compaction_segment;
pub use direct::{min_ref_record_size, TableSink};
pub use list::{missing_list_error, parse_tables_list};
use list::{FileId, ListId};
pub use write::ListLock;

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::format::{HashKind, LogRecord, RefValue};
use crate::merged::MergedRefIter;
use crate::table::{BlockCache, Table, TableWriter, WriteOptions};

/// A failed `Stack::commit_list` (`write.rs`): the error, and whether `tables.list` was
/// already replaced when it happened. Here, not in `write.rs`, because `direct.rs` (whose
/// `TableSink` `write.rs` takes) reads it too.
struct CommitError {
    committed: bool,
    error: crate::Error,
}

/// Options of a stack. `Default` matches git's ref backend with fsync off.
#[derive(Clone, Debug)]
pub struct StackOptions {
    /// The repository's object hash; every table must match it.
    pub hash: HashKind,
    /// Options for tables this stack writes (`hash` is overridden by [`Self::hash`]).
    pub write: WriteOptions,
    /// How long to retry `tables.list.lock`: `None` fails at once (git's library
    /// default), `Some(100ms)` is git's `reftable.lockTimeout` default,
    /// `Some(Duration::MAX)` waits forever.
    pub lock_timeout: Option<Duration>,
    /// fsync tables, `tables.list` and the directory (off for tests and benchmarks).
    pub fsync: bool,
    /// Run geometric auto-compaction after every commit.
    pub auto_compact: bool,
    /// The geometric factor (`reftable.geometricFactor`); 0 means 2.
    pub compaction_factor: u8,
    /// Mode for new tables and `tables.list`; `None` is `0666 & ~umask`.
    pub default_permissions: Option<u32>,
    /// The block cache the stack's tables share (clones of the options share it too: a
    /// mount hands one to every stack it opens). `Default`: a new one of
    /// [`DEFAULT_BLOCK_CACHE_BYTES`](crate::table::DEFAULT_BLOCK_CACHE_BYTES).
    pub block_cache: Arc<BlockCache>,
}

impl Default for StackOptions {
    fn default() -> Self {
        StackOptions {
            hash: HashKind::Sha1,
            write: WriteOptions::default(),
            lock_timeout: Some(Duration::from_millis(100)),
            fsync: false,
            auto_compact: true,
            compaction_factor: 2,
            default_permissions: None,
            block_cache: BlockCache::new(crate::table::DEFAULT_BLOCK_CACHE_BYTES),
        }
    }
}

/// Counters a stack keeps about its own work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackStats {
    /// fsyncs of files (new tables and `tables.list.lock`).
    pub file_fsyncs: u64,
    /// fsyncs of the reftable directory.
    pub dir_fsyncs: u64,
    /// Tables added by transactions.
    pub tables_added: u64,
    /// Compactions attempted (git's `stats.attempts`).
    pub compaction_attempts: u64,
    /// Compactions that failed (git's `stats.failures`).
    pub compaction_failures: u64,
    /// Compactions that replaced tables.
    pub compactions: u64,
    /// Records written by compactions (git's `entries_written`).
    pub entries_written: u64,
    /// Reloads that changed the table set.
    pub reloads: u64,
    /// Reload attempts retried because a listed table vanished (concurrent compaction).
    pub reload_retries: u64,
}

/// Progress of a long compaction, passed to the progress hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactionProgress {
    /// Records written so far.
    pub records: u64,
    /// Bytes of input tables (a rough measure of the total work).
    pub input_bytes: u64,
    /// True for the final call.
    pub done: bool,
}

/// How often [`Stack::reload`] re-checks the identity of every table file when
/// `tables.list` itself did not change (the list is checked on every call).
pub const TABLE_RECHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Reflog expiry applied while compacting (git's `reftable_log_expiry_config`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogExpiry {
    /// Drop entries older than this time (seconds since the epoch); 0 = keep all.
    pub time: u64,
    /// Drop entries with a lower update index; 0 = keep all.
    pub min_update_index: u64,
}

pub(super) type ProgressHook = Box<dyn FnMut(CompactionProgress) + Send>;

/// A reftable stack: `tables.list` plus its tables.
pub struct Stack {
    dir: PathBuf,
    list_path: PathBuf,
    lock_path: PathBuf,
    opts: StackOptions,
    perms: u32,
    names: Vec<String>,
    tables: Vec<Arc<Table>>,
    /// The identity of each table's file when it was opened (parallel to `tables`).
    ids: Vec<FileId>,
    /// When the table identities were last compared with the files.
    tables_checked: Instant,
    /// `tables.list` kept open after a reload so its inode cannot be reused while cached.
    list_file: Option<File>,
    /// The identity of the `tables.list` whose names the stack holds (`None`: compare
    /// the names at the next check).
    list_id: Option<ListId>,
    generation: u64,
    cached: Option<MergedRefIter>,
    writer: Option<TableWriter>,
    stats: StackStats,
    progress: Option<ProgressHook>,
}

impl std::fmt::Debug for Stack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stack")
            .field("dir", &self.dir)
            .field("names", &self.names)
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

/// The name git gives a table: `0x%012x-0x%012x-%08x.ref`.
pub fn table_name(min: u64, max: u64, rand: u32) -> String {
    format!("0x{min:012x}-0x{max:012x}-{rand:08x}.ref")
}

/// git's reflog existence marker: both ids null and every other field empty (its
/// message becomes `"\n"` after a compaction).
pub fn is_existence_marker(l: &LogRecord) -> bool {
    !l.deleted
        && l.old_id.is_null()
        && l.new_id.is_null()
        && l.name.is_empty()
        && l.email.is_empty()
        && l.time == 0
        && l.tz_offset == 0
        && (l.message.is_empty() || l.message == b"\n")
}

/// The value a ref record holds, for callers comparing values.
pub fn ref_value_id(v: &RefValue) -> Option<crate::ObjectId> {
    match v {
        RefValue::Val1(id) => Some(*id),
        RefValue::Val2 { value, .. } => Some(*value),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merged::MergedLogIter;

    #[test]
    fn stack_and_iterators_can_move_between_threads() {
        fn send<T: Send>() {}
        send::<Stack>();
        send::<MergedRefIter>();
        send::<MergedLogIter>();
    }

    #[test]
    fn names_and_lists() {
        assert_eq!(
            table_name(1, 3, 0x1a9b_a01a),
            "0x000000000001-0x000000000003-1a9ba01a.ref"
        );
        assert_eq!(
            parse_tables_list(b"line1\n\nline2\nline3", "t").unwrap(),
            vec!["line1", "line2", "line3"]
        );
        assert!(parse_tables_list(b"../x\n", "t").is_err());
        let err = parse_tables_list(b"ok\n\xff\n", "tables.list").unwrap_err();
        assert!(err.to_string().contains("tables.list at offset 3"), "{err}");
    }

    #[test]
    fn suggest_compaction_segment_vectors() {
        assert_eq!(
            suggest_compaction_segment(&[512, 64, 17, 16, 9, 9, 9, 16, 2, 16], 2),
            Some((1, 10))
        );
        assert_eq!(suggest_compaction_segment(&[64, 32, 16, 8, 4, 2], 2), None);
        assert_eq!(
            suggest_compaction_segment(&[128, 32, 16, 8, 4, 3, 1], 2),
            Some((1, 6))
        );
        assert_eq!(suggest_compaction_segment(&[5], 2), None);
        assert_eq!(suggest_compaction_segment(&[], 2), None);
        assert_eq!(suggest_compaction_segment(&[10, 10], 0), Some((0, 2)));
        assert_eq!(suggest_compaction_segment(&[30, 10], 3), None);
        assert_eq!(suggest_compaction_segment(&[29, 10], 3), Some((0, 2)));
    }
}
