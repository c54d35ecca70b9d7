//! What a client can make the mount hold in memory, and the bounds on it (issue 23: 100,000
//! files created in `refs/` at once peaked at 806 MiB while the documented bound was
//! 512 MiB, and each create cost a pass over every other file).
//!
//! Every structure a client grows is bounded here, and each bound is enforced where the
//! structure grows, with the errno a files backend would give:
//!
//! | what | bound | beyond it |
//! | --- | --- | --- |
//! | bytes held for lock and scratch files, files written in place and open files' snapshots (counted by allocation, not length); content stops [`OPEN_RESERVE`] short of it | [`HELD_BYTES_MAX`] | `EFBIG` (`write`, `truncate`), `ENOMEM` (`open`) |
//! | one ref file, ref lock or in-place ref write | [`REF_FILE_MAX`] | `EFBIG` |
//! | one other scratch file | [`SCRATCH_FILE_MAX`] | `EFBIG` |
//! | lock and scratch files | [`SCRATCH_FILES_MAX`] | `ENOSPC` |
//! | open files | [`HANDLES_MAX`] | `ENFILE` |
//! | directories made by `mkdir` | [`VDIRS_MAX`] | `ENOSPC` |
//! | edits staged and not yet written | [`STAGED_BYTES_MAX`] (of `reserve.rs`'s estimate) | the staging call waits for the batcher, as a write waits for writeback |
//!
//! Elsewhere: the inode table (`inode.rs`, `--inode-cap`), the listing cache
//! (`state.rs`), stale-name queues (4,096), per-process failure records (`batch.rs`),
//! linked worktrees (`worktree.rs`).

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::fs::error::FsError;

/// Largest ref file, ref lock or in-place ref write (a ref holds a few hundred bytes).
pub const REF_FILE_MAX: usize = 64 << 10;
/// Largest other scratch file (`packed-refs.new` of 1M refs is about 100 MB, a reflog
/// moved through a temporary name, files of the git directory such as `COMMIT_EDITMSG`).
pub const SCRATCH_FILE_MAX: usize = 256 << 20;
/// All bytes held for clients together (see the module docs).
pub const HELD_BYTES_MAX: usize = 512 << 20;
/// The last bytes of [`HELD_BYTES_MAX`], which content (scratch files, in-place writes,
/// unfinished reflog lines) never takes: they are kept for opens' own bookkeeping (a
/// handle's name, a ref's snapshot). Without it a full budget made the next `open`'s
/// outcome depend on whether the kernel's asynchronous RELEASE of the previous file had
/// arrived (`ENOMEM` at the open, or `EFBIG` at the first write).
pub const OPEN_RESERVE: usize = 1 << 20;
/// What content may hold together: [`HELD_BYTES_MAX`] less [`OPEN_RESERVE`].
pub const CONTENT_BYTES_MAX: usize = HELD_BYTES_MAX - OPEN_RESERVE;
/// Number of scratch files (locks and others) at most.
pub const SCRATCH_FILES_MAX: usize = 1 << 16;
/// Open files (and directories) at most.
pub const HANDLES_MAX: usize = 1 << 17;
/// Directories made by `mkdir` (virtual until a ref lands below) at most.
pub const VDIRS_MAX: usize = 1 << 16;
/// Staged edits' estimated table bytes (`reserve.rs`) beyond which a staging call waits.
pub const STAGED_BYTES_MAX: u64 = 256 << 20;

/// The scratch files (`*.lock`, `packed-refs.new`, temporary names): content in memory,
/// with the bytes they hold (allocations) counted as they change.
#[derive(Debug, Default)]
pub struct ScratchFiles {
    files: BTreeMap<Vec<u8>, Vec<u8>>,
    bytes: usize,
}

impl ScratchFiles {
    /// Number of files.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Bytes held (allocated) by all of them.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether `path` is a scratch file.
    pub fn contains_key(&self, path: &[u8]) -> bool {
        self.files.contains_key(path)
    }

    /// The content of `path`.
    pub fn get(&self, path: &[u8]) -> Option<&Vec<u8>> {
        self.files.get(path)
    }

    /// Sets the content of `path` (a new file, or one replaced).
    pub fn insert(&mut self, path: Vec<u8>, content: Vec<u8>) {
        self.bytes += content.capacity();
        if let Some(old) = self.files.insert(path, content) {
            self.bytes -= old.capacity();
        }
    }

    /// Removes `path`, returning its content.
    pub fn remove(&mut self, path: &[u8]) -> Option<Vec<u8>> {
        let old = self.files.remove(path)?;
        self.bytes -= old.capacity();
        Some(old)
    }

    /// Changes the content of `path` in place; `None` when it does not exist.
    pub fn update<R>(&mut self, path: &[u8], f: impl FnOnce(&mut Vec<u8>) -> R) -> Option<R> {
        let content = self.files.get_mut(path)?;
        let before = content.capacity();
        let r = f(content);
        self.bytes = self.bytes - before + content.capacity();
        Some(r)
    }

    /// Paths from `from` on, in order.
    pub fn paths_from<'a>(&'a self, from: &[u8]) -> impl Iterator<Item = &'a Vec<u8>> + 'a {
        self.files
            .range::<[u8], _>((Bound::Included(from), Bound::Unbounded))
            .map(|(p, _)| p)
    }
}

/// Writes `data` into `buf` at `offset` (or at the end for O_APPEND), refusing (EFBIG) a
/// file beyond `limit` or an allocation that would take the bytes held beyond
/// [`HELD_BYTES_MAX`] (`others`: bytes held by everything else). Grows by doubling within
/// those bounds, so many small writes cost linear time.
pub fn splice(
    buf: &mut Vec<u8>,
    offset: u64,
    data: &[u8],
    append: bool,
    limit: usize,
    others: usize,
) -> Result<(), FsError> {
    let at = if append {
        buf.len()
    } else {
        usize::try_from(offset).map_err(|_| FsError::EFBIG)?
    };
    let end = at.checked_add(data.len()).ok_or(FsError::EFBIG)?;
    if end > limit {
        return Err(FsError::EFBIG);
    }
    grow_within(buf, end, limit, others)?;
    if buf.len() < end {
        buf.resize(end, 0);
    }
    if let Some(dst) = buf.get_mut(at..end) {
        dst.copy_from_slice(data);
    }
    Ok(())
}

/// `truncate`/`ftruncate` of a scratch file or in-place ref write, bounded as [`splice`].
pub fn resize_bounded(
    buf: &mut Vec<u8>,
    size: u64,
    limit: usize,
    others: usize,
) -> Result<(), FsError> {
    let size = usize::try_from(size).map_err(|_| FsError::EFBIG)?;
    if size > limit {
        return Err(FsError::EFBIG);
    }
    grow_within(buf, size, limit, others)?;
    buf.resize(size, 0);
    buf.shrink_to(size.max(64));
    Ok(())
}

/// Makes room for `end` bytes in `buf`: a doubled allocation when that stays within
/// `limit` and the budget, else exactly `end`; `EFBIG` when not even that fits.
fn grow_within(buf: &mut Vec<u8>, end: usize, limit: usize, others: usize) -> Result<(), FsError> {
    if end <= buf.capacity() {
        return Ok(());
    }
    let room = CONTENT_BYTES_MAX.saturating_sub(others);
    if end > room {
        return Err(FsError::EFBIG);
    }
    let doubled = buf.capacity().saturating_mul(2).max(64);
    let cap = doubled.min(limit).min(room).max(end);
    buf.reserve_exact(cap - buf.len());
    if others.saturating_add(buf.capacity()) > CONTENT_BYTES_MAX {
        // The allocator rounded up past the budget: give the excess back.
        buf.shrink_to(end);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_bytes_follow_every_change() {
        let mut f = ScratchFiles::default();
        f.insert(b"a.lock".to_vec(), Vec::with_capacity(100));
        f.insert(b"b.lock".to_vec(), vec![1; 10]);
        assert_eq!(f.bytes(), 100 + 10);
        f.update(b"a.lock", |c| splice(c, 0, &[7; 500], false, 1 << 20, 0))
            .expect("exists")
            .expect("fits");
        let a = f.get(b"a.lock").expect("a").capacity();
        assert!(a >= 500);
        assert_eq!(f.bytes(), a + 10);
        f.insert(b"b.lock".to_vec(), Vec::new());
        assert_eq!(f.bytes(), a);
        f.remove(b"a.lock");
        assert_eq!(f.bytes(), 0);
        let names: Vec<_> = f.paths_from(b"a").collect();
        assert_eq!(names, [&b"b.lock".to_vec()]);
    }

    #[test]
    fn splice_is_bounded_by_the_file_and_the_budget() {
        let mut buf = Vec::new();
        assert!(splice(&mut buf, 0, &[1; 100], false, 64, 0).is_err());
        assert!(buf.is_empty());
        // Near the budget: the allocation never crosses it.
        let others = CONTENT_BYTES_MAX - 1000;
        splice(&mut buf, 0, &[1; 600], false, 1 << 20, others).expect("fits");
        assert!(others + buf.capacity() <= CONTENT_BYTES_MAX);
        assert!(splice(&mut buf, 600, &[1; 600], false, 1 << 20, others).is_err());
        assert_eq!(buf.len(), 600, "a refused write changes nothing");
        // Many small appends: the allocation doubles (linear time), not one per write.
        let mut grown = Vec::new();
        let mut reallocs = 0;
        for _ in 0..10_000 {
            let cap = grown.capacity();
            splice(&mut grown, 0, b"0123456789", true, 1 << 20, 0).expect("fits");
            if grown.capacity() != cap {
                reallocs += 1;
            }
        }
        assert!(reallocs < 20, "{reallocs} reallocations");
    }
}
