//! What each files-backend call means on a ref view (`lookup`, `getattr`, `create`,
//! `write`, `flush`, `fsync`, `truncate`, `opendir`, `unlink`, `mkdir`, `rmdir`,
//! `rename`): the state lock taken, the overlay (`write.rs`) asked to stage, refusals
//! recorded (`record.rs`).

use fuser::FileAttr;

use crate::format::{HashKind, RefValue};
use crate::fs::budget::{
    resize_bounded, splice, HANDLES_MAX, HELD_BYTES_MAX, REF_FILE_MAX, SCRATCH_FILES_MAX,
    SCRATCH_FILE_MAX, VDIRS_MAX,
};
use crate::fs::error::{FsError, Refusal};
use crate::fs::protocol::{ref_name_of, Caller};
use crate::fs::record::{refuse, refuse_for};
use crate::fs::reserve;
use crate::fs::view::{self, Kind};

use super::handles::{Handle, Target, PAGE_CACHED_MAX};
use super::{Inner, Shared};

/// An `EFBIG` from [`splice`] or [`resize_bounded`] as a recorded refusal (other errnos
/// pass through).
pub(super) fn too_big(op: &str, path: &[u8], e: FsError, limit: usize) -> FsError {
    if e.errno() != libc::EFBIG {
        return e;
    }
    refuse_for(
        op,
        path,
        libc::EFBIG,
        format!(
            "a file here holds at most {limit} bytes, and all lock and scratch files \
                 together {HELD_BYTES_MAX}"
        ),
    )
}

pub(super) fn is_scratch_kind(k: Kind) -> bool {
    k == Kind::Scratch
}

/// `x.lock` / `x.new` names are never refs or reflogs themselves.
pub(super) fn is_lockish(name: &[u8]) -> bool {
    name.ends_with(b".lock") || name.ends_with(b".new")
}

/// The size limit of scratch file `path`: a ref's lock is a ref file.
pub(super) fn scratch_limit(path: &[u8]) -> usize {
    let base = path.strip_suffix(b".lock").unwrap_or(path);
    if crate::fs::protocol::valid_ref_name(base) {
        REF_FILE_MAX
    } else {
        SCRATCH_FILE_MAX
    }
}

/// Refuses content written into a ref file or a ref's lock that can no longer become a
/// valid ref value (shells ignore errors from `close`, so `write` must say it).
pub(super) fn check_ref_prefix(path: &[u8], data: &[u8], hash: HashKind) -> Result<(), String> {
    let base = path.strip_suffix(b".lock").unwrap_or(path);
    if !crate::fs::protocol::valid_ref_name(base) {
        return Ok(());
    }
    crate::fs::protocol::ref_content_prefix_ok(data, hash)
}

impl Shared {
    /// Looks up `parent/name`: its attributes, kind and whether they may be cached with a
    /// positive TTL (see [`Inner::cacheable`]).
    pub(crate) fn lookup(
        &self,
        parent: u64,
        name: &[u8],
    ) -> Result<(FileAttr, Kind, bool), FsError> {
        let mut g = self.lock();
        g.fresh()?;
        // A name that can be no path component simply does not exist (ENOENT, not EINVAL).
        let path = g.child_path(parent, name).map_err(|e| {
            if e.errno() == libc::EINVAL {
                FsError::ENOENT
            } else {
                e
            }
        })?;
        let kind = g.classify(&path)?.ok_or(FsError::ENOENT)?;
        let size = g.size_of(&path, kind)?;
        // A ref file small enough for one page gets an inode of its own size.
        let fixed = (kind == Kind::Ref && size <= PAGE_CACHED_MAX as u64).then_some(size);
        let ino = g.inodes.remember(parent, name, &path, kind, fixed);
        if g.inodes.over_cap() {
            // The watcher asks the kernel to drop the oldest names (see `inode.rs`).
            self.wake_watcher();
        }
        Ok((
            self.attr_timed(&mut g, ino, &path, kind, size),
            kind,
            fixed.is_some(),
        ))
    }

    /// Attributes of `ino`, and whether they may be cached with a positive TTL.
    pub(crate) fn getattr(&self, ino: u64) -> Result<(FileAttr, bool), FsError> {
        let mut g = self.lock();
        g.fresh()?;
        let (path, kind) = g.path_of(ino)?;
        let size = g.size_of(&path, kind)?;
        match g.inodes.fixed_size(ino) {
            // The inode keeps its size: page-cache readers opened before a change read
            // their snapshot of exactly that size (never capped, never padded). The name
            // has moved on to another inode (the watcher sends `inval_entry`; opens of
            // this one are direct-IO meanwhile), so this is not cached.
            Some(fixed) if fixed != size => {
                self.name_is_stale(&mut g, ino);
                Ok((self.attr_timed(&mut g, ino, &path, kind, fixed), false))
            }
            Some(_) => Ok((self.attr_timed(&mut g, ino, &path, kind, size), true)),
            None => Ok((self.attr_timed(&mut g, ino, &path, kind, size), false)),
        }
    }

    /// `create`: a new file (`x.lock` with O_EXCL is atomic: EEXIST when it exists, also
    /// between threads, since the check and the insert happen under one lock).
    pub(crate) fn create(
        &self,
        parent: u64,
        name: &[u8],
        flags: i32,
        pid: u32,
    ) -> Result<(FileAttr, u64), FsError> {
        if self.read_only() {
            return Err(FsError::EROFS);
        }
        self.wait_staging_room();
        let mut g = self.lock();
        g.fresh()?;
        let path = g.child_path(parent, name)?;
        if g.handles.len() >= HANDLES_MAX {
            return Err(refuse_for(
                "create",
                &path,
                libc::ENFILE,
                format!("{HANDLES_MAX} files are open on the mount already"),
            ));
        }
        if let Some(kind) = g.classify(&path)? {
            if flags & libc::O_EXCL != 0 {
                return Err(FsError::EEXIST);
            }
            if kind == Kind::Dir {
                return Err(FsError::EISDIR);
            }
            let fh = g.open_for_write(&path, kind, flags, self.tgid(pid))?;
            let size = g.size_of(&path, kind)?;
            let ino = g.inodes.remember(parent, name, &path, kind, None);
            return Ok((self.attr_timed(&mut g, ino, &path, kind, size), fh));
        }
        // A new file. Reflogs and refs written in place get a handle that commits on
        // flush; anything else (locks, packed-refs.new, temporary names, files of the
        // git directory that are not refs such as COMMIT_EDITMSG) is scratch. Below
        // `refs/` only a valid ref name or its lock can ever be a file.
        if let view::Area::Refs(n) = view::area(&path) {
            let base = n.strip_suffix(b".lock").unwrap_or(n);
            let bad_name = n.starts_with(b"refs/") && !crate::fs::protocol::valid_ref_name(base);
            // Kept as a broken ref where the view keeps them (`broken.rs`), if there is
            // room for one more.
            if bad_name && g.broken_refs.enabled() && !g.broken_accepts(n, 0) {
                return Err(refuse_for(
                    "create",
                    &path,
                    libc::ENOSPC,
                    crate::fs::broken::AT_BOUND,
                ));
            }
            if bad_name && !g.broken_refs.enabled() {
                return Err(refuse(
                    "create",
                    &path,
                    Refusal {
                        errno: libc::EINVAL,
                        reason: "not a valid ref name (git check-ref-format), nor its lock".into(),
                    },
                ));
            }
        }
        let target = match view::area(&path) {
            view::Area::Logs(Some(n))
                if !is_lockish(n) && crate::fs::protocol::valid_ref_name(n) =>
            {
                g.promise("create", &path, reserve::edit_bytes(path.len(), 0))?;
                Target::Log {
                    name: n.to_vec(),
                    tail_by: 0,
                }
            }
            view::Area::Refs(n)
                if !is_lockish(n)
                    && ref_name_of(n).is_some()
                    && crate::fs::protocol::valid_ref_name(n) =>
            {
                Target::Ref {
                    name: n.to_vec(),
                    placeholder: true,
                }
            }
            view::Area::PackedRefs => {
                return Err(refuse_for(
                    "create",
                    &path,
                    libc::EPERM,
                    "packed-refs is replaced by renaming packed-refs.lock onto it, as git does",
                ))
            }
            _ => Target::Scratch,
        };
        let kind = match target {
            Target::Log { .. } => Kind::Log,
            _ => {
                if g.w.files.len() >= SCRATCH_FILES_MAX {
                    return Err(refuse(
                        "create",
                        &path,
                        Refusal {
                            errno: libc::ENOSPC,
                            reason: format!(
                                "{SCRATCH_FILES_MAX} lock and scratch files exist already"
                            ),
                        },
                    ));
                }
                if matches!(target, Target::Scratch) {
                    let Inner { w, src, .. } = &mut *g;
                    w.note_lock(src.as_mut(), &path)
                        .map_err(|r| refuse("create", &path, r))?;
                }
                g.w.files.insert(path.clone(), Vec::new());
                Kind::Scratch
            }
        };
        let new_log = match &target {
            Target::Log { name, .. } => Some(name.clone()),
            _ => None,
        };
        let fh = g.add_handle(
            &path,
            Handle::Write {
                path: path.clone(),
                target,
                data: Vec::new(),
                dirty: false,
                failed: false,
            },
        )?;
        if let Some(n) = new_log {
            // The reflog exists from now on (an edit: git's existence marker), staged for
            // this process through this file.
            let who = Caller::new(self.tgid(pid), vec![fh]);
            g.w.note_new_log(&who, &n);
        }
        // A name appeared: its directory's time moves (the kernel drops its attributes).
        g.entries_changed(super::parent_dir(&path), true);
        let ino = g.inodes.remember(parent, name, &path, kind, None);
        Ok((self.attr_timed(&mut g, ino, &path, kind, 0), fh))
    }

    pub(crate) fn write(
        &self,
        fh: u64,
        offset: u64,
        data: &[u8],
        flags: i32,
        pid: u32,
    ) -> Result<u32, FsError> {
        self.wait_staging_room();
        let actor = self.tgid(pid);
        let mut g = self.lock();
        let g = &mut *g;
        let total = g.w.files.bytes() + g.handle_bytes;
        let Some(Handle::Write {
            path,
            target,
            data: buf,
            ..
        }) = g.handles.get_mut(&fh)
        else {
            return Err(FsError::EBADF);
        };
        let n = u32::try_from(data.len()).map_err(|_| FsError::EFBIG)?;
        let append = flags & libc::O_APPEND != 0;
        match target {
            Target::Log { .. } => {
                // Lines may come in pieces: the handle keeps an unfinished one.
                g.write_log(fh, data, actor)?;
                return Ok(n);
            }
            Target::Scratch => {
                let hash = g.w.hash;
                let limit = scratch_limit(path);
                // Content that can be no ref value is kept as a broken ref (`broken.rs`).
                let room = g.broken_refs.write_room(path, offset as usize + data.len());
                let r = g.w.files.update(path, |content| {
                    let old_len = content.len();
                    let others = total - content.capacity();
                    let r = splice(content, offset, data, append, limit, others)
                        .map_err(|e| too_big("write", path, e, limit))
                        .and_then(|()| match (check_ref_prefix(path, content, hash), room) {
                            (Ok(()), _) | (Err(_), Some(true)) => Ok(()),
                            (Err(_), Some(false)) => Err(refuse_for(
                                "write",
                                path,
                                libc::ENOSPC,
                                crate::fs::broken::AT_BOUND,
                            )),
                            (Err(why), None) => Err(refuse_for("write", path, libc::EINVAL, why)),
                        });
                    if r.is_err() {
                        content.truncate(old_len);
                    }
                    r
                });
                r.ok_or(FsError::ENOENT)??;
            }
            Target::Packed { .. } => {
                let before = buf.capacity();
                splice(buf, offset, data, append, SCRATCH_FILE_MAX, total - before)
                    .map_err(|e| too_big("write", path, e, SCRATCH_FILE_MAX))?;
                let after = buf.capacity();
                if let Some(Handle::Write { dirty, .. }) = g.handles.get_mut(&fh) {
                    *dirty = true;
                }
                g.handle_bytes = g.handle_bytes - before + after;
            }
            Target::Ref { name, .. } => {
                let before = buf.capacity();
                let mut next = buf.clone();
                splice(
                    &mut next,
                    offset,
                    data,
                    append,
                    REF_FILE_MAX,
                    total - before,
                )
                .map_err(|e| too_big("write", path, e, REF_FILE_MAX))?;
                if let Err(why) = check_ref_prefix(path, &next, g.w.hash) {
                    // A linked worktree's placeholder HEAD is no ref value (`linked.rs`);
                    // other content that is none is kept as a broken ref (`broken.rs`).
                    let (path, name) = (path.clone(), name.clone());
                    let room = g.broken_refs.write_room(&name, next.len());
                    if !g.is_placeholder_head(&name, &next) && room != Some(true) {
                        let (errno, reason) = match room {
                            Some(_) => (libc::ENOSPC, crate::fs::broken::AT_BOUND.to_string()),
                            None => (libc::EINVAL, why),
                        };
                        return Err(refuse("write", &path, Refusal { errno, reason }));
                    }
                }
                let Some(Handle::Write {
                    data: buf, dirty, ..
                }) = g.handles.get_mut(&fh)
                else {
                    return Err(FsError::EBADF);
                };
                *buf = next;
                *dirty = true;
                g.handle_bytes = g.handle_bytes - before + buf.capacity();
            }
        }
        Ok(n)
    }

    /// `flush` (every close): a ref written in place is committed here, so that close()
    /// reports a refusal; EIO if an edit staged through this file could not be written.
    pub(crate) fn flush(&self, fh: u64, pid: u32) -> Result<(), FsError> {
        self.wait_staging_room();
        let actor = self.tgid(pid);
        let mut g = self.lock();
        // Every close of the handle reports it (a forked child's close of an inherited
        // descriptor sends a flush too).
        if let Some(Handle::Write { failed: true, .. }) = g.handles.get(&fh) {
            return Err(FsError::EIO);
        }
        g.close_log(fh, actor)?;
        g.commit_direct(fh, &Caller::new(actor, vec![fh]))?;
        g.sync_broken_handle(fh, "close")
    }

    /// `fsync` of a file: commits a ref written in place, then waits until everything
    /// staged so far is written. EIO if an edit the calling process staged could not be
    /// written (reported once), or if this file's handle saw such a failure.
    pub(crate) fn fsync(&self, fh: u64, pid: u32) -> Result<(), FsError> {
        let actor = self.tgid(pid);
        let handle_failed = {
            let mut g = self.lock();
            g.commit_direct(fh, &Caller::new(actor, vec![fh]))?;
            g.sync_broken_handle(fh, "fsync")?;
            matches!(g.handles.get(&fh), Some(Handle::Write { failed: true, .. }))
        };
        let own = self.sync_for(actor);
        if handle_failed {
            return Err(FsError::EIO);
        }
        own
    }

    pub(crate) fn truncate(
        &self,
        ino: u64,
        fh: Option<u64>,
        size: u64,
        pid: u32,
    ) -> Result<(), FsError> {
        if self.read_only() {
            return Err(FsError::EROFS);
        }
        let actor = self.tgid(pid);
        let mut g = self.lock();
        let g = &mut *g;
        g.inodes.suspect(ino);
        let total = g.w.files.bytes() + g.handle_bytes;
        if let Some(Handle::Write {
            path,
            target,
            data,
            dirty,
            ..
        }) = fh.and_then(|f| g.handles.get_mut(&f))
        {
            match target {
                Target::Scratch => {
                    let limit = scratch_limit(path);
                    g.w.files
                        .update(path, |c| {
                            let others = total - c.capacity();
                            resize_bounded(c, size, limit, others)
                        })
                        .unwrap_or(Ok(()))
                        .map_err(|e| too_big("truncate", path, e, limit))?;
                }
                Target::Ref { .. } => {
                    let before = data.capacity();
                    resize_bounded(data, size, REF_FILE_MAX, total - before)
                        .map_err(|e| too_big("truncate", path, e, REF_FILE_MAX))?;
                    *dirty = true;
                    g.handle_bytes = g.handle_bytes - before + data.capacity();
                }
                Target::Packed { .. } => {
                    let before = data.capacity();
                    resize_bounded(data, size, SCRATCH_FILE_MAX, total - before)
                        .map_err(|e| too_big("truncate", path, e, SCRATCH_FILE_MAX))?;
                    *dirty = true;
                    g.handle_bytes = g.handle_bytes - before + data.capacity();
                }
                // A reflog emptied in place (dulwich rewrites one through a read-write
                // handle: truncate, then write the lines it keeps): the reflog stays,
                // empty, and what is written next is appended.
                Target::Log { name, .. } if size == 0 => {
                    let name = name.clone();
                    let path = path.clone();
                    let who = Caller::new(actor, fh.into_iter().collect());
                    g.promise("truncate", &path, reserve::edit_bytes(name.len(), 0))?;
                    g.w.replace_log(&who, &name, Vec::new());
                    g.after_staging();
                }
                Target::Log { .. } => {
                    return Err(refuse_for(
                        "truncate",
                        path,
                        libc::EINVAL,
                        "a reflog is emptied (truncated to 0) or appended to, never cut",
                    ))
                }
            }
            return Ok(());
        }
        let (path, kind) = g.path_of(ino)?;
        match kind {
            Kind::Scratch => {
                let limit = scratch_limit(&path);
                g.w.files
                    .update(&path, |c| {
                        let others = total - c.capacity();
                        resize_bounded(c, size, limit, others)
                    })
                    .unwrap_or(Ok(()))
                    .map_err(|e| too_big("truncate", &path, e, limit))
            }
            Kind::Dir => Err(FsError::EISDIR),
            // `truncate -s 0 logs/x`: the reflog stays, empty.
            Kind::Log if size == 0 => {
                let name = path.get(5..).unwrap_or_default().to_vec();
                g.promise("truncate", &path, reserve::edit_bytes(name.len(), 0))?;
                g.w.replace_log(&Caller::new(actor, Vec::new()), &name, Vec::new());
                g.after_staging();
                Ok(())
            }
            Kind::Log => Err(refuse_for(
                "truncate",
                &path,
                libc::EINVAL,
                "a reflog is emptied (truncated to 0) or appended to, never cut",
            )),
            _ => Err(refuse_for(
                "truncate",
                &path,
                libc::EPERM,
                "truncating a ref file without writing it would leave an invalid ref",
            )),
        }
    }

    pub(crate) fn opendir(&self, ino: u64) -> Result<u64, FsError> {
        let mut g = self.lock();
        g.fresh()?;
        let (path, kind) = g.path_of(ino)?;
        if kind != Kind::Dir {
            return Err(FsError::ENOTDIR);
        }
        let entries = g.listing(&path)?;
        g.add_handle(&path.clone(), Handle::Dir { path, entries })
    }

    pub(crate) fn unlink(&self, parent: u64, name: &[u8], pid: u32) -> Result<(), FsError> {
        if self.read_only() {
            return Err(FsError::EROFS);
        }
        self.wait_staging_room();
        let actor = self.tgid(pid);
        let mut g = self.lock();
        g.fresh()?;
        let path = g.child_path(parent, name)?;
        let kind = g.classify(&path)?.ok_or(FsError::ENOENT)?;
        if path == b"HEAD" && kind == Kind::Ref && !g.is_linked_worktree() {
            return Err(refuse(
                "unlink",
                &path,
                Refusal {
                    errno: libc::EPERM,
                    reason: "HEAD is never deleted (git would no longer see a repository)".into(),
                },
            ));
        }
        if matches!(kind, Kind::Ref | Kind::Log) {
            g.promise("unlink", &path, reserve::edit_bytes(path.len(), 0))?;
        }
        let who = Caller::new(actor, Vec::new());
        let Inner { w, src, .. } = &mut *g;
        let r = match kind {
            Kind::Scratch => {
                w.files.remove(&path);
                w.locks.remove(&path);
                Ok(())
            }
            Kind::Ref => w.unlink_ref(src.as_mut(), &who, &path),
            Kind::Log => {
                let n = path.get(5..).unwrap_or_default().to_vec();
                w.delete_log(&who, &n);
                Ok(())
            }
            Kind::Dir => return Err(FsError::EISDIR),
            Kind::PackedRefs => {
                return Err(refuse_for(
                    "unlink",
                    &path,
                    libc::EPERM,
                    "removing packed-refs would delete every packed ref; the mount keeps it",
                ))
            }
        };
        r.map_err(|r| refuse("unlink", &path, r))?;
        if kind == Kind::Scratch {
            // A broken ref removed (`broken.rs`).
            g.broken_sync(&path)
                .map_err(|r| refuse("unlink", &path, r))?;
        }
        g.name_went(&path);
        g.after_staging();
        drop(g);
        if matches!(kind, Kind::Ref | Kind::Scratch) && path.starts_with(b"refs/") {
            // A loose file unlinked over a `packed-refs` entry changes no value, so no
            // batch invalidates the directories it emptied; nor does one for a lock file
            // unlinked after it (`pack-refs --prune`: unlink `x`, then `x.lock`).
            self.queue_changed_dirs(&[&path]);
        }
        Ok(())
    }

    pub(crate) fn mkdir(&self, parent: u64, name: &[u8]) -> Result<FileAttr, FsError> {
        if self.read_only() {
            return Err(FsError::EROFS);
        }
        let mut g = self.lock();
        g.fresh()?;
        let path = g.child_path(parent, name)?;
        if g.classify(&path)?.is_some() {
            return Err(FsError::EEXIST);
        }
        // Where broken refs are kept (`broken.rs`), a directory of bad names may hold them.
        if path.starts_with(b"refs/") && !g.broken_refs.enabled() {
            crate::refname::check_refname_format(
                &path,
                crate::refname::RefnameFlags {
                    allow_onelevel: true,
                    refspec_pattern: false,
                },
            )
            .map_err(|e| {
                refuse(
                    "mkdir",
                    &path,
                    Refusal {
                        errno: libc::EINVAL,
                        reason: e.to_string(),
                    },
                )
            })?;
        }
        if let Some(i) = super::top_index(&path) {
            // `refs` or `logs` removed when empty: made again (they are never made by
            // mkdir otherwise: they always exist).
            g.gone_tops[i] = false;
            g.entries_changed(b"", true);
            let ino = g.inodes.remember(parent, name, &path, Kind::Dir, None);
            return Ok(self.attr_timed(&mut g, ino, &path, Kind::Dir, 4096));
        }
        if g.w.vdirs.len() >= VDIRS_MAX {
            return Err(refuse_for(
                "mkdir",
                &path,
                libc::ENOSPC,
                format!("{VDIRS_MAX} directories made by mkdir exist already"),
            ));
        }
        g.w.vdirs.insert(path.clone());
        g.entries_changed(super::parent_dir(&path), true);
        // A new directory starts with the time it was made.
        g.entries_changed(&path, true);
        let ino = g.inodes.remember(parent, name, &path, Kind::Dir, None);
        Ok(self.attr_timed(&mut g, ino, &path, Kind::Dir, 4096))
    }

    pub(crate) fn rmdir(&self, parent: u64, name: &[u8]) -> Result<(), FsError> {
        if self.read_only() {
            return Err(FsError::EROFS);
        }
        let mut g = self.lock();
        g.fresh()?;
        let path = g.child_path(parent, name)?;
        match g.classify(&path)? {
            // Gone already: a directory of the view exists while something is below it,
            // and the last name below it went (an unlink, a rename, a deletion by another
            // writer) while the kernel still held this one. On disk it would be there,
            // empty, and its `rmdir` (git's after every deletion) would succeed.
            None => return Ok(()),
            Some(Kind::Dir) => {}
            Some(_) => return Err(FsError::ENOTDIR),
        }
        if let Some(i) = super::top_index(&path) {
            // `refs` and `logs` always exist; removed when empty (`rm -rf .git/logs`), they
            // are gone until made again or until something appears below them. Their
            // listings are a few entries.
            if !g.listing(&path)?.is_empty() {
                return Err(FsError::ENOTEMPTY);
            }
            g.gone_tops[i] = true;
            g.entries_changed(b"", true);
            return Ok(());
        }
        // Any other directory exists because something is below it or `mkdir` made it:
        // it is empty when, without the `mkdir`, it would not exist. A few seeks, never a
        // listing (git tries an `rmdir` of a ref's directory after each deletion, in
        // directories of thousands of refs).
        let made = g.w.vdirs.remove(&path);
        let without = g.classify(&path);
        if made && !matches!(without, Ok(None)) {
            g.w.vdirs.insert(path.clone());
        }
        match without? {
            Some(_) => Err(FsError::ENOTEMPTY),
            None => {
                g.name_went(&path);
                Ok(())
            }
        }
    }

    /// `rename`: the commit point of the files protocol (`x.lock` → `x`, `packed-refs.new`
    /// → `packed-refs`, reflog rewrites and moves).
    pub(crate) fn rename(
        &self,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        pid: u32,
    ) -> Result<(), FsError> {
        if self.read_only() {
            return Err(FsError::EROFS);
        }
        self.wait_staging_room();
        let actor = self.tgid(pid);
        let mut g = self.lock();
        g.fresh()?;
        let from = g.child_path(parent, name)?;
        let to = g.child_path(newparent, newname)?;
        // Handles still open on the renamed file (a lock written and not yet closed).
        let open_on_from: Vec<u64> = g
            .handles
            .iter()
            .filter(|(_, h)| matches!(h, Handle::Write { path, .. } if *path == from))
            .map(|(fh, _)| *fh)
            .collect();
        let who = Caller::new(actor, open_on_from);
        let kind = g.classify(&from)?.ok_or(FsError::ENOENT)?;
        let to_kind = g.classify(&to)?;
        if to_kind == Some(Kind::Dir) && kind != Kind::Dir {
            return Err(FsError::EISDIR);
        }
        let content = match kind {
            Kind::Scratch | Kind::Log => g.size_of(&from, kind).unwrap_or(0) as usize,
            _ => 0,
        };
        g.promise(
            "rename",
            &from,
            reserve::edit_bytes(from.len() + to.len(), content),
        )?;
        let r = g.do_rename(&who, &from, kind, &to, to_kind);
        if let Err(e) = r {
            return Err(refuse("rename", &from, e));
        }
        // Broken refs follow the files moved (`broken.rs`).
        for p in [&from, &to] {
            g.broken_sync(p).map_err(|r| refuse("rename", p, r))?;
        }
        // The kernel moved its dentry (and inode) to the new name: follow it.
        let new_kind = g.classify(&to).ok().flatten().unwrap_or(kind);
        g.inodes
            .moved(parent, name, &from, kind, newparent, newname, new_kind);
        // The names of both directories changed (the kernel drops their attributes);
        // a new packed-refs may make or remove refs anywhere.
        g.name_went(&from);
        g.entries_changed(super::parent_dir(&to), true);
        if to == b"packed-refs" {
            g.all_entries_changed();
        }
        g.after_staging();
        Ok(())
    }
}

impl Inner {
    /// A broken ref written in place through `fh` is kept (`broken.rs`) at its `close`
    /// or `fsync` (`op`).
    fn sync_broken_handle(&mut self, fh: u64, op: &str) -> Result<(), FsError> {
        if let Some(Handle::Write {
            path,
            target: Target::Scratch,
            ..
        }) = self.handles.get(&fh)
        {
            let path = path.clone();
            self.broken_sync(&path).map_err(|r| refuse(op, &path, r))?;
        }
        Ok(())
    }

    /// Commits a ref or `packed-refs` written in place (on flush or fsync), if its handle
    /// is dirty.
    pub(super) fn commit_direct(&mut self, fh: u64, who: &Caller) -> Result<(), FsError> {
        if let Some(Handle::Write {
            path,
            target: Target::Packed { seen },
            data,
            dirty: dirty @ true,
            ..
        }) = self.handles.get_mut(&fh)
        {
            *dirty = false;
            let (path, data, seen) = (path.clone(), data.clone(), *seen);
            self.promise("write", &path, reserve::edit_bytes(path.len(), data.len()))?;
            let Inner { w, src, .. } = self;
            w.commit_packed_refs(src.as_mut(), who, &data, Some(seen))
                .map_err(|r| refuse("write", &path, r))?;
            self.all_entries_changed();
            self.after_staging();
            return Ok(());
        }
        let Some(Handle::Write {
            path,
            target: Target::Ref { name, placeholder },
            dirty,
            ..
        }) = self.handles.get_mut(&fh)
        else {
            return Ok(());
        };
        if !*dirty && *placeholder {
            let (p, n) = (path.clone(), name.clone());
            if self.broken_wants(&n, b"") {
                // Kept as an empty broken ref (`broken.rs`).
                let (path, name) = (p, n);
                self.broken_keep(who, &name, Vec::new())
                    .map_err(|r| refuse("close", &path, r))?;
                if let Some(Handle::Write {
                    target: Target::Ref { placeholder, .. },
                    ..
                }) = self.handles.get_mut(&fh)
                {
                    *placeholder = false;
                }
                self.after_staging();
                return Ok(());
            }
        }
        let Some(Handle::Write {
            path,
            target: Target::Ref { name, placeholder },
            data,
            dirty,
            ..
        }) = self.handles.get_mut(&fh)
        else {
            return Ok(());
        };
        if !*dirty {
            if *placeholder {
                // A ref file created and closed without content (`touch`, `: >`): an
                // empty file can never be a ref, so nothing is stored — said here, at
                // the close, and recorded.
                let path = path.clone();
                return Err(refuse_for(
                    "close",
                    &path,
                    libc::EINVAL,
                    "an empty file is not a ref value; nothing was written",
                ));
            }
            return Ok(());
        }
        let (path, name, data) = (path.clone(), name.clone(), data.clone());
        if self.is_placeholder_head(&name, &data) {
            // Kept as written, in memory only (`linked.rs`).
            self.w.files.insert(path, data);
            if let Some(Handle::Write {
                target: Target::Ref { placeholder, .. },
                dirty,
                ..
            }) = self.handles.get_mut(&fh)
            {
                *placeholder = false;
                *dirty = false;
            }
            return Ok(());
        }
        self.promise("write", &path, reserve::edit_bytes(name.len(), data.len()))?;
        if let Some(Handle::Write { dirty, .. }) = self.handles.get_mut(&fh) {
            *dirty = false;
        }
        if self.broken_wants(&name, &data) {
            // No ref value: kept as a broken ref (`broken.rs`), also after the release.
            self.broken_keep(who, &name, data)
                .map_err(|r| refuse("write", &path, r))?;
            if let Some(Handle::Write {
                target: Target::Ref { placeholder, .. },
                ..
            }) = self.handles.get_mut(&fh)
            {
                *placeholder = false;
            }
            self.after_staging();
            return Ok(());
        }
        let Inner { w, src, .. } = self;
        let staged = w
            .parse_ref_content(&data)
            .and_then(|v| {
                // The file at the ref's path until now (the empty one of a ref created in
                // place, a worktree's placeholder HEAD) is replaced by the ref.
                let shadow = w.files.remove(&path);
                let r = w.commit_ref(src.as_mut(), who, &name, v);
                if let (Err(_), Some(s)) = (&r, shadow) {
                    w.files.insert(path.clone(), s);
                }
                r
            })
            .map_err(|r| refuse("write", &path, r));
        if staged.is_ok() {
            if let Some(Handle::Write {
                target: Target::Ref { placeholder, .. },
                ..
            }) = self.handles.get_mut(&fh)
            {
                *placeholder = false;
            }
            self.after_staging();
            // A broken ref of this name is replaced by the ref (`broken.rs`).
            self.broken_sync(&path)
                .map_err(|r| refuse("write", &path, r))?;
        }
        staged
    }

    pub(super) fn do_rename(
        &mut self,
        who: &Caller,
        from: &[u8],
        kind: Kind,
        to: &[u8],
        to_kind: Option<Kind>,
    ) -> Result<(), Refusal> {
        // A name or content reftable cannot hold is kept as a broken ref (`broken.rs`).
        if let (Kind::Scratch, Some(content)) = (kind, self.w.files.get(from)) {
            if to_kind != Some(Kind::Dir) && self.broken_wants(to, content) {
                let content = content.clone();
                self.broken_keep(who, to, content)?;
                self.w.files.remove(from);
                self.w.locks.remove(from);
                return Ok(());
            }
        }
        if kind == Kind::Ref && to_kind != Some(Kind::Dir) {
            if let Some(r) = self.broken_rename_ref(who, from, to) {
                return r;
            }
        }
        let Inner { w, src, .. } = self;
        let src = src.as_mut();
        let to_log = match view::area(to) {
            view::Area::Logs(Some(n))
                if crate::fs::protocol::valid_ref_name(n) && !is_lockish(n) =>
            {
                Some(n)
            }
            _ => None,
        };
        let to_ref = match view::area(to) {
            view::Area::Refs(n) if !is_lockish(n) => ref_name_of(n),
            _ => None,
        };
        let bad = |why: &str| Refusal {
            errno: libc::EINVAL,
            reason: why.to_string(),
        };
        match kind {
            Kind::Scratch => {
                let content = w.files.get(from).cloned().unwrap_or_default();
                if to == b"packed-refs" {
                    let seen = w
                        .files
                        .contains_key(b"packed-refs.lock")
                        .then(|| w.packed_lock_seen())
                        .flatten();
                    w.commit_packed_refs(src, who, &content, seen)?;
                } else if let Some(n) = to_log {
                    let entries = w.parse_log_text(&content)?;
                    w.replace_log(who, n, entries);
                } else if let Some(n) = to_ref {
                    let v = w.parse_ref_content(&content)?;
                    if from.strip_suffix(b".lock") == Some(n) {
                        w.check_lock_base(src, from)?;
                    }
                    w.commit_ref(src, who, n, v)?;
                    // A file at the ref's path (a linked worktree's placeholder HEAD) is
                    // replaced, as a rename replaces it on disk.
                    w.files.remove(to);
                } else if to_kind.is_none_or(is_scratch_kind) {
                    w.files.insert(to.to_vec(), content);
                } else {
                    return Err(bad("cannot replace this file with a scratch file"));
                }
                w.files.remove(from);
                w.locks.remove(from);
                Ok(())
            }
            Kind::Log => {
                let name = from.get(5..).unwrap_or_default().to_vec();
                let mut text = Vec::new();
                w.render_log(src, &name, &mut text)?;
                if let Some(n) = to_log {
                    let entries = w.parse_log_text(&text)?;
                    w.delete_log(who, &name);
                    w.replace_log(who, n, entries);
                } else if to_kind.is_none_or(is_scratch_kind)
                    && !matches!(view::area(to), view::Area::Refs(_))
                {
                    w.files.insert(to.to_vec(), text);
                    w.delete_log(who, &name);
                } else {
                    return Err(bad(
                        "a reflog can only move to another reflog or a temporary name",
                    ));
                }
                Ok(())
            }
            Kind::Ref => {
                let Some(n) = to_ref else {
                    return Err(bad("a ref can only be renamed to another ref name"));
                };
                let v = w.effective(src, from)?.unwrap_or(RefValue::Deletion);
                w.commit_ref(src, who, n, v)?;
                w.commit_ref(src, who, from, RefValue::Deletion)
            }
            Kind::Dir => Err(Refusal {
                errno: libc::EXDEV,
                reason: "directories are not renamed".into(),
            }),
            Kind::PackedRefs => Err(Refusal {
                errno: libc::EPERM,
                reason: "packed-refs is replaced, not moved".into(),
            }),
        }
    }
}
