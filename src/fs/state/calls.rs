//! What each files-backend call on a file's content means on a ref view (`lookup`,
//! `getattr`, `create`, `write`, `flush`, `fsync`, `truncate`; the calls on names are in
//! `names.rs`): the state lock taken, the overlay (`write.rs`) asked to stage, refusals
//! recorded (`record.rs`).

use fuser::FileAttr;

use crate::format::HashKind;
use crate::fs::budget::{
    resize_bounded, splice, HANDLES_MAX, REF_FILE_MAX, SCRATCH_FILES_MAX, SCRATCH_FILE_MAX,
};
use crate::fs::error::{FsError, Refusal};
use crate::fs::protocol::{ref_name_of, Caller};
use crate::fs::reserve;
use crate::fs::view::{self, Kind};

use super::handles::{Handle, Target, PAGE_CACHED_MAX};
use super::{Inner, Shared};

/// A name a scratch file may be renamed over: a scratch file, or a kept symbolic link.
pub(super) fn is_scratch_kind(k: Kind) -> bool {
    matches!(k, Kind::Scratch | Kind::Link)
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
        // A ref file small enough for one page gets an inode of its own size; `packed-refs`
        // an inode of its content (`Inodes::remember_version`).
        let (ino, fixed) = if kind == Kind::PackedRefs {
            let (_, version) = g.packed_refs_marked(&path)?;
            let ino = (g.inodes).remember_version(parent, name, &path, size, version);
            (ino, g.inodes.fixed_size(ino).is_some())
        } else {
            let fixed = (kind == Kind::Ref && size <= PAGE_CACHED_MAX as u64).then_some(size);
            (
                g.inodes.remember(parent, name, &path, kind, fixed),
                fixed.is_some(),
            )
        };
        if g.inodes.over_cap() {
            // The watcher asks the kernel to drop the oldest names (see `inode.rs`).
            self.wake_watcher();
        }
        Ok((self.attr_timed(&mut g, ino, &path, kind, size), kind, fixed))
    }

    /// Attributes of `ino`, and whether they may be cached with a positive TTL.
    pub(crate) fn getattr(&self, ino: u64) -> Result<(FileAttr, bool), FsError> {
        let mut g = self.lock();
        g.fresh()?;
        let (path, kind) = g.path_of(ino)?;
        if let (Some(_), Some(len)) = (g.inodes.version(ino), g.inodes.fixed_size(ino)) {
            // A `packed-refs` inode shows one content for its whole life; when that is no
            // longer the content, the name has another inode already (its entry is never
            // cached: every path walk looks it up).
            return Ok((self.attr_timed(&mut g, ino, &path, kind, len), true));
        }
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
        let mut g = self.begin_change(true)?;
        let path = g.child_path(parent, name)?;
        if g.handles.len() >= HANDLES_MAX {
            return Err(self.rec.refuse_for(
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
                return Err(self.rec.refuse_for(
                    "create",
                    &path,
                    libc::ENOSPC,
                    crate::fs::broken::AT_BOUND,
                ));
            }
            if bad_name && !g.broken_refs.enabled() {
                return Err(self.rec.refuse(
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
                // It did not exist (`protocol/packed_whole.rs`): created empty, and that it
                // exists kept now, not within a second.
                let r = self.create_packed_refs(&mut g, parent, name);
                drop(g);
                self.save_packed_state(true);
                return r;
            }
            _ => Target::Scratch,
        };
        let kind = match target {
            Target::Log { .. } => Kind::Log,
            _ => {
                if g.w.files.len() >= SCRATCH_FILES_MAX {
                    return Err(self.rec.refuse(
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
                        .map_err(|r| self.rec.refuse("create", &path, r))?;
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
        let ino = g.inodes.created(parent, name, &path, kind);
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
                // A file kept whatever it holds (a broken name, a kept entry) must fit too.
                let must_fit = g.broken_refs.keeps_as_file(path);
                let r = g.w.files.update(path, |content| {
                    let old_len = content.len();
                    let others = total - content.capacity();
                    let r = splice(content, offset, data, append, limit, others)
                        .map_err(|e| self.rec.too_big("write", path, e, limit))
                        .and_then(|()| match (check_ref_prefix(path, content, hash), room) {
                            (Ok(()), Some(false)) if must_fit => Err(self.rec.refuse_for(
                                "write",
                                path,
                                libc::ENOSPC,
                                crate::fs::broken::AT_BOUND,
                            )),
                            (Ok(()), _) | (Err(_), Some(true)) => Ok(()),
                            (Err(_), Some(false)) => Err(self.rec.refuse_for(
                                "write",
                                path,
                                libc::ENOSPC,
                                crate::fs::broken::AT_BOUND,
                            )),
                            (Err(why), None) => {
                                Err(self.rec.refuse_for("write", path, libc::EINVAL, why))
                            }
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
                    .map_err(|e| self.rec.too_big("write", path, e, SCRATCH_FILE_MAX))?;
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
                .map_err(|e| self.rec.too_big("write", path, e, REF_FILE_MAX))?;
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
                        return Err(self.rec.refuse("write", &path, Refusal { errno, reason }));
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
                        .map_err(|e| self.rec.too_big("truncate", path, e, limit))?;
                }
                Target::Ref { .. } => {
                    let before = data.capacity();
                    resize_bounded(data, size, REF_FILE_MAX, total - before)
                        .map_err(|e| self.rec.too_big("truncate", path, e, REF_FILE_MAX))?;
                    *dirty = true;
                    g.handle_bytes = g.handle_bytes - before + data.capacity();
                }
                Target::Packed { .. } => {
                    let before = data.capacity();
                    resize_bounded(data, size, SCRATCH_FILE_MAX, total - before)
                        .map_err(|e| self.rec.too_big("truncate", path, e, SCRATCH_FILE_MAX))?;
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
                    return Err(self.rec.refuse_for(
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
                    .map_err(|e| self.rec.too_big("truncate", &path, e, limit))
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
            Kind::Log => Err(self.rec.refuse_for(
                "truncate",
                &path,
                libc::EINVAL,
                "a reflog is emptied (truncated to 0) or appended to, never cut",
            )),
            _ => Err(self.rec.refuse_for(
                "truncate",
                &path,
                libc::EPERM,
                "truncating a ref file without writing it would leave an invalid ref",
            )),
        }
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
            self.broken_sync(&path)
                .map_err(|r| self.rec.refuse(op, &path, r))?;
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
                .map_err(|r| self.rec.refuse("write", &path, r))?;
            self.sync_packed_junk()
                .map_err(|r| self.rec.refuse("write", &path, r))?;
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
                    .map_err(|r| self.rec.refuse("close", &path, r))?;
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
                return Err(self.rec.refuse_for(
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
                .map_err(|r| self.rec.refuse("write", &path, r))?;
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
            .map_err(|r| self.rec.refuse("write", &path, r));
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
                .map_err(|r| self.rec.refuse("write", &path, r))?;
        }
        staged
    }
}
