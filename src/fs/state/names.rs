//! The files-backend calls that add or remove names on a ref view (`opendir`, `unlink`,
//! `mkdir`, `rmdir`, `rename`, the commit point of the files protocol), as `calls.rs`
//! does the calls on a file's content: the state lock taken, the overlay asked to stage,
//! refusals recorded.

use fuser::FileAttr;

use crate::format::RefValue;
use crate::fs::budget::VDIRS_MAX;
use crate::fs::error::{FsError, Refusal};
use crate::fs::protocol::{ref_name_of, Caller};
use crate::fs::reserve;
use crate::fs::view::{self, Kind};

use super::calls::{is_lockish, is_scratch_kind};
use super::handles::Handle;
use super::{Inner, Shared};

impl Shared {
    pub(crate) fn opendir(&self, ino: u64) -> Result<u64, FsError> {
        let mut g = self.lock();
        g.fresh()?;
        let (path, kind) = g.path_of(ino)?;
        if kind != Kind::Dir {
            return Err(FsError::ENOTDIR);
        }
        let entries = g.listing(&path)?;
        let entries = g.link_listing(&path, entries);
        g.add_handle(&path.clone(), Handle::Dir { path, entries })
    }

    pub(crate) fn unlink(&self, parent: u64, name: &[u8], pid: u32) -> Result<(), FsError> {
        if parent == crate::fs::ino::ROOT && name == b"packed-refs" && self.link_claims_any() {
            // A symbolic link to a file adopted as packed-refs (`packed_link.rs`).
            return self.unlink_packed_link(pid);
        }
        let actor = self.tgid(pid);
        let mut g = self.begin_change(true)?;
        let path = g.child_path(parent, name)?;
        let kind = g.classify(&path)?.ok_or(FsError::ENOENT)?;
        if path == b"HEAD" && kind == Kind::Ref && !g.is_linked_worktree() {
            return Err(self.rec.refuse(
                "unlink",
                &path,
                Refusal {
                    errno: libc::EPERM,
                    reason: "HEAD is never deleted (git would no longer see a repository)".into(),
                },
            ));
        }
        let kept = matches!(kind, Kind::Scratch | Kind::Link) && g.broken_refs.contains(&path);
        if matches!(kind, Kind::Ref | Kind::Log) || kept {
            g.promise("unlink", &path, reserve::edit_bytes(path.len(), 0))?;
        }
        if kind == Kind::PackedRefs {
            // Deletes every packed-only ref: about the names it lists.
            let size = g.size_of(&path, kind)? as usize;
            g.promise("unlink", &path, reserve::edit_bytes(path.len(), size))?;
        }
        let who = Caller::new(actor, Vec::new());
        // A broken ref or link kept beside the stack, with what the stack holds beneath
        // it (`broken.rs`).
        if let Some(r) = g.broken_unlink(&who, &path) {
            r.map_err(|r| self.rec.refuse("unlink", &path, r))?;
        }
        let Inner { w, src, .. } = &mut *g;
        let r = match kind {
            _ if kept => Ok(()),
            Kind::Scratch | Kind::Link => {
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
            Kind::PackedRefs => w.unlink_packed_refs(src.as_mut(), &who),
        };
        r.map_err(|r| self.rec.refuse("unlink", &path, r))?;
        if kind == Kind::PackedRefs {
            g.sync_packed_junk()
                .map_err(|r| self.rec.refuse("unlink", &path, r))?;
            g.all_entries_changed();
        }
        if kind == Kind::Scratch {
            // The kernel's inode of it lives on under no name (`Inodes::unlinked`).
            g.inodes.unlinked(parent, name);
            // A broken ref removed (`broken.rs`).
            g.broken_sync(&path)
                .map_err(|r| self.rec.refuse("unlink", &path, r))?;
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
        if kind == Kind::PackedRefs {
            // That it is gone is kept now, not within a second.
            self.save_packed_state(true);
        }
        Ok(())
    }

    pub(crate) fn mkdir(&self, parent: u64, name: &[u8]) -> Result<FileAttr, FsError> {
        let mut g = self.begin_change(false)?;
        let path = g.child_path(parent, name)?;
        if g.classify(&path)?.is_some() {
            return Err(FsError::EEXIST);
        }
        if path == b"packed-refs" {
            // Absent (`protocol/packed_whole.rs`), but never a directory.
            return Err(self.rec.refuse_for(
                "mkdir",
                &path,
                libc::EPERM,
                "packed-refs is a file of the ref view, never a directory",
            ));
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
                self.rec.refuse(
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
            return Err(self.rec.refuse_for(
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
        let mut g = self.begin_change(false)?;
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
        let actor = self.tgid(pid);
        let mut g = self.begin_change(true)?;
        let from = g.child_path(parent, name)?;
        let to = g.child_path(newparent, newname)?;
        if [&from, &to].iter().any(|p| g.link_kind(p).is_some()) {
            return Err(self.rec.refuse_for(
                "rename",
                &from,
                libc::EPERM,
                "packed-refs is a symbolic link the view keeps: it is removed, not moved",
            ));
        }
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
            Kind::Scratch | Kind::Log | Kind::Link => g.size_of(&from, kind).unwrap_or(0) as usize,
            _ => 0,
        };
        g.promise(
            "rename",
            &from,
            reserve::edit_bytes(from.len() + to.len(), content),
        )?;
        let r = g.do_rename(&who, &from, kind, &to, to_kind);
        if let Err(e) = r {
            return Err(self.rec.refuse("rename", &from, e));
        }
        // Broken refs follow the files moved (`broken.rs`).
        for p in [&from, &to] {
            g.broken_sync(p)
                .map_err(|r| self.rec.refuse("rename", p, r))?;
        }
        if to == b"packed-refs" {
            g.sync_packed_junk()
                .map_err(|r| self.rec.refuse("rename", &to, r))?;
        }
        // The kernel moved its dentry (and inode) to the new name: follow it.
        let new_kind = g.classify(&to).ok().flatten().unwrap_or(kind);
        g.inodes
            .moved(parent, name, &from, kind, newparent, newname, new_kind);
        // The names of both directories changed (the kernel drops their attributes);
        // a new packed-refs may make or remove refs anywhere.
        g.name_went(&from);
        g.entries_changed(super::parent_dir(&to), true);
        g.after_staging();
        if to == b"packed-refs" {
            g.all_entries_changed();
            drop(g);
            // That it exists (a `packed-refs` without entries) is kept now, not within a
            // second.
            self.save_packed_state(true);
        }
        Ok(())
    }
}

impl Inner {
    pub(super) fn do_rename(
        &mut self,
        who: &Caller,
        from: &[u8],
        kind: Kind,
        to: &[u8],
        to_kind: Option<Kind>,
    ) -> Result<(), Refusal> {
        // A symbolic link moves as a link (`broken.rs`).
        if kind == Kind::Link {
            return self.broken_rename_link(who, from, to, to_kind);
        }
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
        // A file renamed over a kept symbolic link replaces it (a broken name: kept as a
        // file there; a ref or reflog: committed below, and the link forgotten).
        let over_link = to_kind == Some(Kind::Link);
        let Inner {
            w,
            src,
            broken_refs,
            ..
        } = self;
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
                    // A broken reflog file there is replaced (`broken.rs`).
                    w.files.remove(to);
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
                    if over_link {
                        let file = crate::fs::broken::Entry::file(content.clone(), None);
                        broken_refs.put(to, file)?;
                    }
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
                    && !matches!(view::area(to), view::Area::Refs(_) | view::Area::PackedRefs)
                {
                    if over_link {
                        let file = crate::fs::broken::Entry::file(text.clone(), None);
                        broken_refs.put(to, file)?;
                    }
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
                w.commit_ref(src, who, from, RefValue::Deletion)?;
                // A broken ref or link there is replaced (`broken.rs`), as on disk.
                w.files.remove(to);
                Ok(())
            }
            Kind::Dir => Err(Refusal {
                errno: libc::EXDEV,
                reason: "directories are not renamed".into(),
            }),
            Kind::Link => Err(bad("a symbolic link that is not kept")),
            Kind::PackedRefs => Err(Refusal {
                errno: libc::EPERM,
                reason: "packed-refs is replaced, not moved".into(),
            }),
        }
    }
}
