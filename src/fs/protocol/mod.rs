//! The files-backend protocol, pure (no FUSE types, no threads, no locks): the overlay
//! that in-flight writes put over the stack
//! (scratch files such as `x.lock`, virtual directories, the pending layer of accepted
//! but not yet written ref edits, pending reflog lines, the packed layer), the
//! files-backend commit points turned into validated edits, and the open batch those edits
//! go into (see `batch.rs` for the batcher). Its files: this one (the overlay's state and
//! small helpers), `read.rs` (reads through the overlay), `stage.rs` (commit points as
//! edits), `packed.rs` (the packed layer), `packed_file.rs` (its state kept across
//! mounts), `packed_whole.rs` (`packed-refs` as a whole: whether it exists, content that
//! does not parse, its unlink).
//!
//! Effective values follow git's files backend: `effective = loose ?? packed`. The stack
//! always holds effective values; which refs are loose files and which live in
//! `packed-refs` only is the packed layer's (`packed.rs`): the mount's layout gives the
//! default, and the files backend's calls change it as they change a files `.git`, so that
//! `pack-refs --prune` (pack, then unlink each loose copy) leaves the refs packed only
//! without a stack change.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::format::{HashKind, LogRecord, RefRecord, RefValue};
use crate::fs::budget::ScratchFiles;
use crate::fs::error::Refusal;
use crate::fs::queue::{Batch, BatchQueue};
use crate::fs::source::LogSettings;
use crate::refname::check_for_update;

mod packed;
mod packed_file;
mod packed_whole;
mod read;
mod stage;
#[cfg(test)]
mod tests;

pub use packed::{packable, Layout, Packed, PackedLayer, Packing};
pub use packed_file::STATE_FILE;
pub use packed_whole::{JUNK_FILE, PACKED_JUNK_MAX};

/// How long a reflog line waits in the open batch for the rename that commits its update.
pub const LINE_WAITS_FOR_RENAME: std::time::Duration = std::time::Duration::from_millis(100);

/// The directories a ref name lies in, outermost first: `refs`, `refs/heads` for
/// `refs/heads/main`.
pub(super) fn dir_prefixes(name: &[u8]) -> impl Iterator<Item = &[u8]> {
    name.iter()
        .enumerate()
        .filter(|(_, &b)| b == b'/')
        .map(move |(i, _)| name.get(..i).unwrap_or_default())
}

/// A source error as a refusal (EIO and the message).
fn source_err(e: crate::Error) -> Refusal {
    Refusal {
        errno: e.errno(),
        reason: e.to_string(),
    }
}

type R<T> = std::result::Result<T, Refusal>;

/// A pending ref value (accepted, not yet in the stack) and the batch that carries it.
#[derive(Clone, Debug)]
pub struct Pending {
    pub value: RefValue,
    pub seq: u64,
}

/// A pending reflog state of one ref: `base` replaces the stack's entries (a rewrite or
/// deletion, carried by batch `base_seq`) when set; `appended` lines follow (oldest
/// first, each with the batch that carries it). `deleted`: the reflog was removed
/// (`unlink logs/x`, a move away); a reflog rewritten to nothing still exists (an empty
/// file), as in the files backend. Each part is dropped once its batch is written (the
/// stack then shows it), the whole entry once batch `seq` is.
#[derive(Clone, Debug, Default)]
pub struct PendingLog {
    pub base: Option<Vec<LogRecord>>,
    pub base_seq: u64,
    pub appended: Vec<(u64, LogRecord)>,
    pub deleted: bool,
    pub seq: u64,
}

/// What a lock (`x.lock` created with `O_EXCL`) saw of its ref when it was taken: the
/// files backend guarantees the holder that nobody else changes the ref until it
/// renames the lock or unlinks it, so this value is the update's expected old value.
#[derive(Clone, Debug)]
pub struct LockBase {
    /// The ref's name (the lock's path without `.lock`).
    pub name: Vec<u8>,
    /// The ref's effective value when the lock was created.
    pub value: Option<RefValue>,
    /// A commit point through the mount changed the ref since (a files-backend client
    /// ignoring the lock: as on disk, its change is simply overwritten by the rename).
    pub changed_through_mount: bool,
}

/// Who a staging call serves: the edits it stages record them, so that a failure is
/// reported to that process (its next `fsync`) and fails those handles (their `close`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Caller {
    /// The process (thread group id; 0 when unknown).
    pub pid: u32,
    /// The open files the call stages through.
    pub handles: Vec<u64>,
}

impl Caller {
    /// Process `pid` through the open files `handles`.
    pub fn new(pid: u32, handles: Vec<u64>) -> Caller {
        Caller { pid, handles }
    }
}

/// The overlay of in-flight writes.
#[derive(Debug, Default)]
pub struct WriteState {
    pub hash: HashKind,
    pub log: LogSettings,
    /// Created files that are not refs (yet): `*.lock`, `packed-refs.new`, temporary
    /// reflogs. Content in memory; gone at unmount.
    pub files: ScratchFiles,
    /// Directories made by `mkdir` (they exist until `rmdir`, empty or not).
    pub vdirs: BTreeSet<Vec<u8>>,
    /// Ref values accepted at a commit point, not yet in the stack (read-your-writes).
    pub pending: BTreeMap<Vec<u8>, Pending>,
    /// Reflog changes not yet in the stack.
    pub pending_logs: BTreeMap<Vec<u8>, PendingLog>,
    /// The packed layer: which refs are loose files, which are in `packed-refs` only,
    /// and what `packed-refs` holds.
    pub packed: PackedLayer,
    /// The batch being filled.
    pub open: Batch,
    /// Where sealed batches go (the batcher's queue, `batch.rs`).
    queue: Arc<BatchQueue>,
    /// Highest sequence number handed out.
    pub last_seq: u64,
    /// Ref locks held (by lock path), with what they saw of their ref.
    pub locks: HashMap<Vec<u8>, LockBase>,
    rec: RefRecord,
}

/// A ref value for a log line (`absent` when the ref does not exist).
fn show_value(v: Option<&RefValue>) -> String {
    match v {
        None | Some(RefValue::Deletion) => "absent".into(),
        Some(RefValue::Val1(id)) | Some(RefValue::Val2 { value: id, .. }) => id.to_string(),
        Some(RefValue::Symref(t)) => format!("ref: {}", String::from_utf8_lossy(t)),
    }
}

/// Splits a mount path into a ref name if it is a ref path (`HEAD`, `refs/…`), not a
/// lock or other scratch name.
pub fn ref_name_of(path: &[u8]) -> Option<&[u8]> {
    if path.starts_with(b"refs/") || crate::refname::is_root_ref(path) {
        Some(path)
    } else {
        None
    }
}

/// Whether `data`, written so far into a ref file or a ref's lock, can still become a
/// valid loose ref (`<hex id>` then whitespace, or `ref: <name>`); the reason if not.
/// Everything after a NUL is ignored, as git does.
pub fn ref_content_prefix_ok(data: &[u8], hash: HashKind) -> Result<(), String> {
    let data = match data.iter().position(|&b| b == 0) {
        Some(nul) => data.get(..nul).unwrap_or_default(),
        None => data,
    };
    let is_space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c);
    let hex_len = hash.hex_len();
    let hex_ok = data.iter().take(hex_len).all(|b| b.is_ascii_hexdigit())
        && data.get(hex_len).is_none_or(|&b| is_space(b));
    if hex_ok {
        if data.len() >= hex_len && data.iter().take(hex_len).all(|&b| b == b'0') {
            // Complete, and never a ref value: refused at the write, where even a shell's
            // `echo 0000… > refs/heads/x` sees it (shells ignore errors of `close`).
            return Err("the null object id is not a ref value".into());
        }
        return Ok(());
    }
    let head = data.get(..data.len().min(4)).unwrap_or_default();
    if !b"ref:".starts_with(head) {
        return Err(format!(
            "content can no longer become a ref value ({hex_len} hex digits or 'ref: <name>')"
        ));
    }
    let rest = data.get(4..).unwrap_or_default();
    let start = rest
        .iter()
        .position(|&b| !is_space(b))
        .unwrap_or(rest.len());
    let target = rest.get(start..).unwrap_or_default();
    let end = target
        .iter()
        .position(|&b| is_space(b))
        .unwrap_or(target.len());
    let (name, tail) = target.split_at(end);
    let bad = |b: u8| b < 0x20 || b == 0x7f || b" ~^:?*[\\".contains(&b);
    if name.iter().any(|&b| bad(b)) || !tail.iter().all(|&b| is_space(b)) {
        return Err("symbolic ref target can no longer become a valid ref name".into());
    }
    Ok(())
}

/// Whether `name` may be written as a ref (refname rules, `refs/…` or root-ref syntax).
pub fn valid_ref_name(name: &[u8]) -> bool {
    ref_name_of(name).is_some() && check_for_update(name, true).is_ok()
}

impl WriteState {
    /// Whether the overlay is empty (reads can skip it).
    pub fn is_idle(&self) -> bool {
        self.files.is_empty()
            && self.vdirs.is_empty()
            && self.pending.is_empty()
            && self.pending_logs.is_empty()
    }

    /// The queue this overlay seals batches into.
    pub(crate) fn queue(&self) -> &Arc<BatchQueue> {
        &self.queue
    }

    /// A fresh overlay.
    pub fn new(hash: HashKind, log: LogSettings) -> WriteState {
        WriteState {
            hash,
            log,
            open: Batch::new(1),
            last_seq: 1,
            ..Default::default()
        }
    }
}
