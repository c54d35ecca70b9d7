//! The state's hooks for broken refs (`fs/broken.rs` is their store): what the files
//! calls of `calls.rs` and `names.rs` ask under the state lock — whether a write is kept
//! as a broken ref, keeping, renaming, unlinking, syncing and dropping one, a reflog
//! written with junk kept as a file, symbolic links made and read, and loading the store
//! at mount.

use fuser::FileAttr;

use crate::format::RefValue;
use crate::fs::broken::{is_bad_name, is_candidate, ref_of, BrokenRefs, Entry, EntryKind};
use crate::fs::budget::SCRATCH_FILES_MAX;
use crate::fs::error::{FsError, Refusal};
use crate::fs::protocol::{valid_ref_name, Caller};
use crate::fs::record::log_error;
use crate::fs::reserve;
use crate::fs::view::{self, Kind};

use super::handles::{Handle, Target};
use super::{Inner, Shared};

/// Where a kept entry sits, for what the stack holds beneath it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// A root ref (`HEAD`, `ORIG_HEAD`, …): the stack keeps its last real value beneath
    /// a broken file (git 2.47 reads it; a stack without `HEAD` is no repository).
    Root,
    /// A valid ref name below `refs/`: the file replaced the ref, which is deleted.
    Ref,
    /// The reflog of a valid ref name: the file replaced the reflog, which is deleted.
    Log,
    /// A broken name: nothing of the stack is there.
    Bad,
}

fn place(path: &[u8]) -> Place {
    if is_bad_name(path) {
        Place::Bad
    } else if path.starts_with(b"logs/") {
        Place::Log
    } else if path.starts_with(b"refs/") {
        Place::Ref
    } else {
        Place::Root
    }
}

/// Whether a symbolic link's target names a ref below `refs/` (what git < 2.x wrote for
/// a symref, and git's files backend still reads as one).
fn is_symref_target(target: &[u8]) -> bool {
    target.starts_with(b"refs/") && valid_ref_name(target)
}

/// The hooks `state` calls (under the state lock).
impl Inner {
    /// Whether `path` written with `content` is kept as a broken ref instead of being a
    /// ref (or reflog) of the stack: a broken name, or content that is no ref value (no
    /// reflog lines).
    pub(crate) fn broken_wants(&self, path: &[u8], content: &[u8]) -> bool {
        self.broken_refs.enabled()
            && is_candidate(path)
            && match place(path) {
                Place::Bad => true,
                Place::Log => self.w.parse_log_text(content).is_err(),
                Place::Root | Place::Ref => self.w.parse_ref_content(content).is_err(),
            }
    }

    /// Whether content that can be no ref value may still be written into `path` (a ref
    /// file or a ref's lock): it will be kept as a broken ref, if there is room for it.
    pub(crate) fn broken_accepts(&self, path: &[u8], len: usize) -> bool {
        self.broken_refs.write_room(path, len) == Some(true)
    }

    /// The stack's value of ref `name` now (through the overlay), rendered as its file.
    fn stack_value(&mut self, name: &[u8]) -> Result<Option<Vec<u8>>, Refusal> {
        let Inner { w, src, .. } = self;
        Ok(w.effective(src.as_mut(), name)?.map(|v| {
            let mut out = Vec::new();
            view::render_ref(&v, &mut out);
            out
        }))
    }

    /// Whether the reflog of `name` exists in the stack (through the pending layer).
    fn stack_log_exists(&mut self, name: &[u8]) -> bool {
        if let Some(pl) = self.w.pending_logs.get(name) {
            return !pl.deleted || !pl.appended.is_empty();
        }
        let mut buf = Vec::new();
        matches!(self.src.first_log_at_or_after(name, &mut buf), Ok(true)) && buf == name
    }

    /// Keeps `content` at `path` as a broken ref: stored, shown as the file. What the
    /// stack holds there: a root ref keeps its value (recorded), a ref or reflog of that
    /// name is deleted (the file on disk would replace it).
    pub(crate) fn broken_keep(
        &mut self,
        who: &Caller,
        path: &[u8],
        content: Vec<u8>,
    ) -> Result<(), Refusal> {
        self.broken_keep_entry(who, path, EntryKind::File, content)
    }

    /// [`Inner::broken_keep`] of a file or a symbolic link. A link at a ref's path whose
    /// target names a ref below `refs/` is that symref in the stack (recorded as the
    /// link's value), as git's files backend reads such a link.
    fn broken_keep_entry(
        &mut self,
        who: &Caller,
        path: &[u8],
        kind: EntryKind,
        content: Vec<u8>,
    ) -> Result<(), Refusal> {
        let at = place(path);
        let symref = kind == EntryKind::Link
            && matches!(at, Place::Root | Place::Ref)
            && is_symref_target(&content);
        let shadow = if symref {
            Some([b"ref: ".as_slice(), &content, b"\n"].concat())
        } else if at == Place::Root {
            self.stack_value(path)?
        } else {
            None
        };
        let had = self.broken_refs.get(path).cloned();
        let entry = Entry {
            kind,
            content: content.clone(),
            shadow,
        };
        let log_exists = at == Place::Log && self.stack_log_exists(ref_of(path));
        self.broken_refs.put(path, entry)?;
        let Inner { w, src, .. } = self;
        let staged = if symref {
            w.commit_ref(src.as_mut(), who, path, RefValue::Symref(content.clone()))
        } else {
            match at {
                Place::Ref => match w.effective(src.as_mut(), path) {
                    Ok(Some(_)) => w.commit_ref(src.as_mut(), who, path, RefValue::Deletion),
                    Ok(None) => Ok(()),
                    Err(e) => Err(e),
                },
                Place::Log if log_exists => {
                    w.delete_log(who, ref_of(path));
                    Ok(())
                }
                _ => Ok(()),
            }
        };
        if let Err(e) = staged {
            let _ = match had {
                Some(c) => self.broken_refs.put(path, c),
                None => self.broken_refs.remove(path).map(|_| ()),
            };
            return Err(e);
        }
        self.w.files.insert(path.to_vec(), content);
        Ok(())
    }

    /// `rename()` of a ref file of the stack onto a bad name (`mv refs/heads/a
    /// refs/heads/a..b`): the file, with the ref's content, is kept as a broken ref there
    /// and the ref is deleted, as on disk. `None` when this is not such a rename.
    pub(crate) fn broken_rename_ref(
        &mut self,
        who: &Caller,
        from: &[u8],
        to: &[u8],
    ) -> Option<Result<(), Refusal>> {
        if !self.broken_refs.enabled() || !is_bad_name(to) {
            return None;
        }
        let Inner { w, src, .. } = self;
        let value = match w.effective(src.as_mut(), from) {
            Ok(Some(v)) => v,
            Ok(None) => return Some(Err(Refusal::new(libc::ENOENT, "no such ref"))),
            Err(e) => return Some(Err(e)),
        };
        let mut content = Vec::new();
        view::render_ref(&value, &mut content);
        if let Err(e) = self.broken_refs.put(to, Entry::file(content.clone(), None)) {
            return Some(Err(e));
        }
        let Inner { w, src, .. } = self;
        if let Err(e) = w.commit_ref(src.as_mut(), who, from, RefValue::Deletion) {
            let _ = self.broken_refs.remove(to);
            return Some(Err(e));
        }
        self.w.files.insert(to.to_vec(), content);
        Some(Ok(()))
    }

    /// `unlink` of a kept entry: forgotten, and what the stack held beneath it (a root
    /// ref's value, a symref made by a link) is deleted too, as the file on disk is gone —
    /// except the main view's `HEAD` (EPERM, as for a real `HEAD`). `None` when `path` is
    /// no kept entry.
    pub(super) fn broken_unlink(
        &mut self,
        who: &Caller,
        path: &[u8],
    ) -> Option<Result<(), Refusal>> {
        let e = self.broken_refs.get(path)?.clone();
        let under = match (&e.shadow, place(path)) {
            (Some(_), Place::Root | Place::Ref) => match self.stack_value(path) {
                Ok(v) => v.is_some(),
                Err(r) => return Some(Err(r)),
            },
            _ => false,
        };
        if under && path == b"HEAD" && !self.is_linked_worktree() {
            return Some(Err(Refusal::new(
                libc::EPERM,
                "HEAD is never deleted (git would no longer see a repository)",
            )));
        }
        if let Err(r) = self.broken_refs.remove(path) {
            return Some(Err(r));
        }
        if under {
            let Inner { w, src, .. } = self;
            if let Err(r) = w.commit_ref(src.as_mut(), who, path, RefValue::Deletion) {
                let _ = self.broken_refs.put(path, e);
                return Some(Err(r));
            }
        }
        self.w.files.remove(path);
        Some(Ok(()))
    }

    /// `rename()` of a kept symbolic link: the link is made at `to` (a symref there if
    /// its target names a ref) and unlinked at `from`.
    pub(super) fn broken_rename_link(
        &mut self,
        who: &Caller,
        from: &[u8],
        to: &[u8],
        to_kind: Option<Kind>,
    ) -> Result<(), Refusal> {
        if from == to {
            return Ok(());
        }
        let target = match self.broken_refs.get(from) {
            Some(e) if e.kind == EntryKind::Link => e.content.clone(),
            _ => return Err(Refusal::new(libc::ENOENT, "no such link")),
        };
        if !self.broken_refs.enabled() || !is_candidate(to) {
            return Err(Refusal::new(
                libc::EPERM,
                "a symbolic link moves only to a ref, reflog or root ref path",
            ));
        }
        match to_kind {
            None | Some(Kind::Scratch | Kind::Link) => {}
            Some(_) => {
                return Err(Refusal::new(
                    libc::EPERM,
                    "a symbolic link does not replace a ref or a reflog of the stack",
                ))
            }
        }
        self.broken_keep_entry(who, to, EntryKind::Link, target)?;
        self.broken_unlink(who, from).unwrap_or(Ok(()))
    }

    /// Makes the store agree with the overlay's file at `path` after a call changed it
    /// (a close, a rename, an unlink): a broken ref's new content is kept, a broken ref
    /// gone (or become a real ref) is forgotten. On failure the overlay goes back to what
    /// the store holds, and the errno is the call's.
    pub(crate) fn broken_sync(&mut self, path: &[u8]) -> Result<(), Refusal> {
        if !self.broken_refs.enabled() || !is_candidate(path) {
            return Ok(());
        }
        let kept = self.broken_refs.get(path).cloned();
        let r = match (self.w.files.get(path), kept) {
            (Some(c), Some(e)) if e.content != *c => {
                let e = Entry {
                    content: c.clone(),
                    ..e
                };
                self.broken_refs.put(path, e)
            }
            (Some(c), None) if is_bad_name(path) => {
                let e = Entry::file(c.clone(), None);
                self.broken_refs.put(path, e)
            }
            (None, Some(_)) => self.broken_refs.remove(path).map(|_| ()),
            _ => Ok(()),
        };
        if r.is_err() {
            match self.broken_refs.get(path) {
                Some(e) => {
                    let c = e.content.clone();
                    self.w.files.insert(path.to_vec(), c);
                }
                None => {
                    self.w.files.remove(path);
                }
            }
        }
        r
    }

    /// A write into an empty reflog open as `fh` that is no reflog lines (`echo <id> >
    /// logs/refs/x`, t1407): where the view keeps broken refs, the reflog becomes a kept
    /// file holding what was written (`None`: not kept here, refuse as before). A reflog
    /// holding lines is never turned into a file by a bad line appended to it (the
    /// append is refused, and its lines stay in the stack). The stack's empty reflog of
    /// that name is deleted (the file replaced it).
    pub(super) fn broken_log_junk(
        &mut self,
        fh: u64,
        data: &[u8],
        actor: u32,
    ) -> Option<Result<(), FsError>> {
        let (path, name, tail) = match self.handles.get(&fh) {
            Some(Handle::Write {
                path,
                target: Target::Log { name, .. },
                data,
                ..
            }) => (path.clone(), name.clone(), data.clone()),
            _ => return None,
        };
        if !self.broken_refs.enabled() || !is_candidate(&path) {
            return None;
        }
        let mut content = Vec::new();
        let Inner { w, src, .. } = self;
        if let Err(r) = w.render_log(src.as_mut(), &name, &mut content) {
            return Some(Err(self.rec.refuse("append", &path, r)));
        }
        if !content.is_empty() {
            return None;
        }
        content.extend_from_slice(&tail);
        content.extend_from_slice(data);
        if !self.broken_refs.has_room(&path, content.len()) {
            return Some(Err(self.rec.refuse_for(
                "append",
                &path,
                libc::ENOSPC,
                crate::fs::broken::AT_BOUND,
            )));
        }
        if let Err(e) = self.promise("append", &path, reserve::edit_bytes(name.len(), 0)) {
            return Some(Err(e));
        }
        let who = Caller::new(actor, vec![fh]);
        if let Err(r) = self.broken_keep(&who, &path, content) {
            return Some(Err(self.rec.refuse("append", &path, r)));
        }
        if let Some(Handle::Write { target, data, .. }) = self.handles.get_mut(&fh) {
            *target = Target::Scratch;
            let held = data.capacity();
            *data = Vec::new();
            self.handle_bytes -= held;
        }
        self.after_staging();
        Some(Ok(()))
    }

    /// The kind `path` shows (`kind`, as the overlay classified it): a kept symbolic link
    /// is one.
    pub(super) fn broken_kind(&self, path: &[u8], kind: Kind) -> Kind {
        if kind == Kind::Scratch && self.broken_refs.is_link(path) {
            Kind::Link
        } else {
            kind
        }
    }

    /// The entries of directory `dir` with kept symbolic links shown as links.
    pub(super) fn broken_link_kinds(&self, dir: &[u8], entries: &mut [view::Entry]) {
        if !self.broken_refs.has_links() {
            return;
        }
        for e in entries.iter_mut().filter(|e| e.kind == Kind::Scratch) {
            if self.broken_refs.is_link(&view::join(dir, &e.name)) {
                e.kind = Kind::Link;
            }
        }
    }

    /// After a reload: entries whose stack value changed under them are dropped — a real
    /// ref (or reflog) written on the stack by another writer where the entry holds
    /// nothing, or another value than the one recorded beneath a root ref or a symref
    /// link. Returns their names.
    pub(crate) fn broken_drop_shadowed(&mut self) -> Vec<Vec<u8>> {
        if self.broken_refs.is_empty() {
            return Vec::new();
        }
        let all: Vec<(Vec<u8>, Option<Vec<u8>>)> = self
            .broken_refs
            .iter()
            .filter(|(n, _)| !is_bad_name(n))
            .map(|(n, e)| (n.clone(), e.shadow.clone()))
            .collect();
        let mut dropped = Vec::new();
        for (n, shadow) in all {
            let changed = if place(&n) == Place::Log {
                let name = ref_of(&n);
                if self.w.pending_logs.contains_key(name) {
                    continue;
                }
                self.stack_log_exists(name)
            } else {
                if self.w.pending.contains_key(&n) {
                    continue;
                }
                let mut rec = Default::default();
                let now = match crate::fs::source::read_ref(self.src.as_mut(), &n, &mut rec) {
                    Ok(true) => {
                        let mut out = Vec::new();
                        view::render_ref(&rec.value, &mut out);
                        Some(out)
                    }
                    Ok(false) => None,
                    Err(_) => continue,
                };
                now != shadow
            };
            if !changed {
                continue;
            }
            if let Err(e) = self.broken_refs.remove(&n) {
                log_error("drop shadowed broken ref", &n, &e.reason);
                continue;
            }
            self.w.files.remove(&n);
            dropped.push(n);
        }
        dropped
    }

    /// At mount: the store's entries become the view's files (after dropping those the
    /// stack changed under).
    pub(crate) fn broken_load(&mut self, store: BrokenRefs) {
        self.broken_refs = store;
        let all: Vec<(Vec<u8>, Vec<u8>)> = self
            .broken_refs
            .iter()
            .map(|(n, e)| (n.clone(), e.content.clone()))
            .collect();
        for (n, c) in all {
            self.w.files.insert(n, c);
        }
        self.broken_drop_shadowed();
    }
}

impl Shared {
    /// `symlink(target, parent/name)` in the ref view: kept beside the stack where the
    /// view keeps broken refs, at a ref, reflog or root ref path that does not exist
    /// (EEXIST otherwise); a link at a ref's path to a ref name below `refs/` is that
    /// symref in the stack. Refused (EPERM, recorded) anywhere else.
    pub(crate) fn symlink(
        &self,
        parent: u64,
        name: &[u8],
        target: &[u8],
        pid: u32,
    ) -> Result<FileAttr, FsError> {
        if parent == crate::fs::ino::ROOT && name == b"packed-refs" && !self.link_claims_any() {
            // The link adopts its target as packed-refs (`packed_link.rs`).
            return self.symlink_packed_refs(parent, name, target, pid);
        }
        let actor = self.tgid(pid);
        let mut g = self.begin_change(true)?;
        let path = g.child_path(parent, name)?;
        if g.link_kind(&path).is_some() {
            return Err(FsError::EEXIST);
        }
        if !g.broken_refs.enabled() || !is_candidate(&path) {
            return Err(self.rec.refuse_for(
                "symlink",
                &path,
                libc::EPERM,
                "symbolic links are kept only at ref, reflog and root ref paths (not locks, \
                 not packed-refs), where the view keeps broken refs",
            ));
        }
        if target.is_empty() {
            return Err(FsError::ENOENT);
        }
        if g.classify(&path)?.is_some() {
            return Err(FsError::EEXIST);
        }
        if !g.broken_refs.has_room(&path, 2 * target.len() + 6) {
            return Err(self.rec.refuse_for(
                "symlink",
                &path,
                libc::ENOSPC,
                crate::fs::broken::AT_BOUND,
            ));
        }
        if g.w.files.len() >= SCRATCH_FILES_MAX {
            return Err(self.rec.refuse_for(
                "symlink",
                &path,
                libc::ENOSPC,
                format!("{SCRATCH_FILES_MAX} lock and scratch files exist already"),
            ));
        }
        g.promise(
            "symlink",
            &path,
            reserve::edit_bytes(path.len(), target.len()),
        )?;
        let who = Caller::new(actor, Vec::new());
        g.broken_keep_entry(&who, &path, EntryKind::Link, target.to_vec())
            .map_err(|r| self.rec.refuse("symlink", &path, r))?;
        g.entries_changed(super::parent_dir(&path), true);
        g.after_staging();
        let ino = g.inodes.remember(parent, name, &path, Kind::Link, None);
        Ok(self.attr_timed(&mut g, ino, &path, Kind::Link, target.len() as u64))
    }

    /// `readlink` of a kept symbolic link: its target's bytes (EINVAL for anything else).
    pub(crate) fn readlink(&self, ino: u64) -> Result<Vec<u8>, FsError> {
        let mut g = self.lock();
        g.fresh()?;
        let (path, kind) = g.path_of(ino)?;
        if let Some(t) = Self::readlink_packed_refs(&g, &path) {
            return Ok(t);
        }
        if kind != Kind::Link || !g.broken_refs.is_link(&path) {
            return Err(if g.classify(&path)?.is_some() {
                FsError::EINVAL
            } else {
                FsError::ENOENT
            });
        }
        g.w.files.get(&path).cloned().ok_or(FsError::ENOENT)
    }
}

#[cfg(test)]
mod tests {
    use super::Inner;
    use crate::fs::broken::{BrokenRefs, FILE_NAME};

    /// A writable view of `refs` whose batches wait a minute (nothing is committed unless
    /// asked), keeping its broken refs in the temporary directory returned with it.
    fn view_keeping_broken_refs(
        refs: &[(&str, crate::format::RefValue)],
    ) -> (std::sync::Arc<crate::fs::state::Shared>, tempfile::TempDir) {
        let shared = crate::fs::test_support::writable_view(refs);
        let d = tempfile::tempdir().unwrap();
        shared.keep_broken_refs(BrokenRefs::open(d.path()).unwrap());
        (shared, d)
    }

    /// Through the view's calls: a bad name created, written and closed is kept and
    /// listed; junk renamed from a valid ref's lock replaces that ref; unlink forgets it.
    #[test]
    fn the_view_keeps_lists_and_forgets_broken_refs() {
        use crate::format::{ObjectId, RefValue};
        use crate::fs::ino::ROOT;
        use crate::fs::view::Kind;

        let id = ObjectId::from_bytes(&[1; 20]).expect("id");
        let (shared, d) = view_keeping_broken_refs(&[
            ("refs/heads/main", RefValue::Val1(id)),
            ("refs/heads/b", RefValue::Val1(id)),
        ]);
        let me = std::process::id();
        let refs = shared.lookup(ROOT, b"refs").unwrap().0.ino.0;
        let heads = shared.lookup(refs, b"heads").unwrap().0.ino.0;
        let flags = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;

        let (_, fh) = shared.create(heads, b"broken...ref", flags, me).unwrap();
        shared.write(fh, 0, b"junk\n", 0, me).unwrap();
        shared.flush(fh, me).unwrap();
        let (attr, kind, _) = shared.lookup(heads, b"broken...ref").unwrap();
        assert_eq!((kind, attr.size), (Kind::Scratch, 5));
        let store = BrokenRefs::open(d.path()).unwrap();
        assert_eq!(
            store.get(b"refs/heads/broken...ref").unwrap().content,
            b"junk\n"
        );

        // A new file at a valid name holding the null id stays after its release.
        let (_, fh) = shared.create(heads, b"zero", flags, me).unwrap();
        shared.write(fh, 0, &[b'0'; 40], 0, me).unwrap();
        shared.flush(fh, me).unwrap();
        shared.release(fh);
        assert_eq!(shared.lookup(heads, b"zero").unwrap().0.size, 40);
        shared.unlink(heads, b"zero", me).unwrap();

        // Junk through b's lock replaces the ref b.
        let (_, lock) = shared
            .create(heads, b"b.lock", flags | libc::O_EXCL, me)
            .unwrap();
        shared.write(lock, 0, b"not a ref\n", 0, me).unwrap();
        shared.flush(lock, me).unwrap();
        shared.rename(heads, b"b.lock", heads, b"b", me).unwrap();
        let (attr, kind, _) = shared.lookup(heads, b"b").unwrap();
        assert_eq!((kind, attr.size), (Kind::Scratch, 10));
        {
            let mut g = shared.lock();
            let Inner { w, src, .. } = &mut *g;
            assert_eq!(w.effective(src.as_mut(), b"refs/heads/b").unwrap(), None);
        }
        assert_eq!(BrokenRefs::open(d.path()).unwrap().len(), 2);

        // A valid write replaces the broken b; unlink forgets the bad name.
        let (_, fh) = shared.create(heads, b"b", flags, me).unwrap();
        shared
            .write(fh, 0, format!("{id}\n").as_bytes(), 0, me)
            .unwrap();
        shared.flush(fh, me).unwrap();
        assert_eq!(shared.lookup(heads, b"b").unwrap().1, Kind::Ref);
        shared.unlink(heads, b"broken...ref", me).unwrap();
        assert!(shared.lookup(heads, b"broken...ref").is_err());
        assert!(BrokenRefs::open(d.path()).unwrap().is_empty());
        assert!(!d.path().join(FILE_NAME).exists());

        // Past the store's bounds: ENOSPC at the write, nothing kept.
        let chunk = vec![b'x'; 60_000];
        let mut kept = 0;
        let errno = loop {
            let name = format!("big{kept}");
            let (_, fh) = shared.create(heads, name.as_bytes(), flags, me).unwrap();
            match shared.write(fh, 0, &chunk, 0, me) {
                Ok(_) => {
                    shared.flush(fh, me).unwrap();
                    shared.release(fh);
                    kept += 1;
                }
                Err(e) => {
                    shared.release(fh);
                    break e.errno();
                }
            }
        };
        assert_eq!((errno, kept), (libc::ENOSPC, 4));
        assert!(shared.lookup(heads, b"big4").is_err());
        assert_eq!(BrokenRefs::open(d.path()).unwrap().len(), 4);
        for i in 0..kept {
            shared
                .unlink(heads, format!("big{i}").as_bytes(), me)
                .unwrap();
        }

        // HEAD written with junk is kept too, the stack keeping its value beneath.
        let (_, fh) = shared.create(ROOT, b"HEAD.lock", flags, me).unwrap();
        shared.write(fh, 0, b"junk", 0, me).unwrap();
        shared.flush(fh, me).unwrap();
        shared.release(fh);
        shared
            .rename(ROOT, b"HEAD.lock", ROOT, b"HEAD", me)
            .unwrap();
        assert_eq!(shared.lookup(ROOT, b"HEAD").unwrap().1, Kind::Scratch);
        let kept = BrokenRefs::open(d.path()).unwrap();
        assert_eq!(kept.get(b"HEAD").unwrap().content, b"junk");
        assert_eq!(
            kept.get(b"HEAD").unwrap().shadow,
            None,
            "no HEAD in this stack"
        );
    }

    /// A root ref, a symbolic link and a reflog written with junk, through the view's
    /// calls: what shows, what the stack holds beneath, and what unlink takes.
    #[test]
    fn head_links_and_junk_reflogs_are_kept() {
        use crate::format::{ObjectId, RefValue};
        use crate::fs::ino::ROOT;
        use crate::fs::state::Handle;
        use crate::fs::view::Kind;

        let id = ObjectId::from_bytes(&[1; 20]).expect("id");
        let (shared, d) = view_keeping_broken_refs(&[
            ("refs/heads/main", RefValue::Val1(id)),
            ("HEAD", RefValue::Symref(b"refs/heads/main".to_vec())),
        ]);
        let me = std::process::id();
        let flags = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;
        let value = |name: &[u8]| {
            let mut g = shared.lock();
            let Inner { w, src, .. } = &mut *g;
            w.effective(src.as_mut(), name).unwrap()
        };
        let read = |parent: u64, name: &[u8]| {
            let ino = shared.lookup(parent, name).unwrap().0.ino.0;
            let (fh, _) = shared.open(ino, libc::O_RDONLY).unwrap();
            let data = shared.read_file(ino, fh, 0, 4096, true).unwrap();
            shared.release(fh);
            data
        };
        let symref = Some(RefValue::Symref(b"refs/heads/main".to_vec()));

        // `echo $ZERO_OID > HEAD`: read back as written; the stack keeps the symref.
        let zero = format!("{}\n", "0".repeat(40));
        let (_, fh) = shared.create(ROOT, b"HEAD", flags, me).unwrap();
        shared.write(fh, 0, zero.as_bytes(), 0, me).unwrap();
        shared.flush(fh, me).unwrap();
        shared.release(fh);
        assert_eq!(read(ROOT, b"HEAD"), zero.as_bytes());
        assert_eq!(value(b"HEAD"), symref);
        let kept = BrokenRefs::open(d.path()).unwrap();
        assert_eq!(
            kept.get(b"HEAD").unwrap().shadow.as_deref(),
            Some(&b"ref: refs/heads/main\n"[..])
        );
        // The main view's HEAD is never deleted, broken or not.
        assert_eq!(
            shared.unlink(ROOT, b"HEAD", me).unwrap_err().errno(),
            libc::EPERM
        );
        // A valid value written makes it a ref again, and the store forgets it.
        let (_, fh) = shared.create(ROOT, b"HEAD", flags, me).unwrap();
        shared
            .write(fh, 0, b"ref: refs/heads/main\n", 0, me)
            .unwrap();
        shared.flush(fh, me).unwrap();
        shared.release(fh);
        assert_eq!(shared.lookup(ROOT, b"HEAD").unwrap().1, Kind::Ref);
        assert!(BrokenRefs::open(d.path()).unwrap().is_empty());

        // A link to a ref name is that symref in the stack, shown as a link.
        let refs = shared.lookup(ROOT, b"refs").unwrap().0.ino.0;
        let heads = shared.lookup(refs, b"heads").unwrap().0.ino.0;
        let a = shared.symlink(heads, b"s", b"refs/heads/main", me).unwrap();
        assert_eq!((a.kind, a.size), (fuser::FileType::Symlink, 15));
        let (a, kind, _) = shared.lookup(heads, b"s").unwrap();
        assert_eq!(kind, Kind::Link);
        assert_eq!(shared.readlink(a.ino.0).unwrap(), b"refs/heads/main");
        assert_eq!(value(b"refs/heads/s"), symref);
        let dir = shared.opendir(heads).unwrap();
        let listed = shared.with_handle(dir, |h| match h {
            Some(Handle::Dir { entries, .. }) => (0..entries.len())
                .filter_map(|i| entries.get(i))
                .map(|(n, k)| (n.to_vec(), k))
                .collect::<Vec<_>>(),
            _ => Vec::new(),
        });
        shared.release(dir);
        assert_eq!(
            listed,
            [(b"main".to_vec(), Kind::Ref), (b"s".to_vec(), Kind::Link)]
        );
        // Existing names and places that keep nothing are refused at the call.
        assert_eq!(
            shared
                .symlink(heads, b"main", b"x", me)
                .unwrap_err()
                .errno(),
            libc::EEXIST
        );
        assert_eq!(
            shared
                .symlink(ROOT, b"packed-refs", b"x", me)
                .unwrap_err()
                .errno(),
            libc::EPERM
        );
        assert_eq!(
            shared
                .symlink(heads, b"x.lock", b"x", me)
                .unwrap_err()
                .errno(),
            libc::EPERM
        );
        // unlink takes the link and its symref.
        shared.unlink(heads, b"s", me).unwrap();
        assert!(shared.lookup(heads, b"s").is_err());
        assert_eq!(value(b"refs/heads/s"), None);

        // A link with any other target, in logs/: kept and shown as written.
        let logs = shared.lookup(ROOT, b"logs").unwrap().0.ino.0;
        let lrefs = shared.mkdir(logs, b"refs").unwrap().ino.0;
        let lheads = shared.mkdir(lrefs, b"heads").unwrap().ino.0;
        shared
            .symlink(lheads, b"u", b"../../../real-u", me)
            .unwrap();
        let (a, kind, _) = shared.lookup(lheads, b"u").unwrap();
        assert_eq!(kind, Kind::Link);
        assert_eq!(shared.readlink(a.ino.0).unwrap(), b"../../../real-u");
        assert_eq!(
            shared.open(a.ino.0, libc::O_RDONLY).unwrap_err().errno(),
            libc::ELOOP
        );
        let kept = BrokenRefs::open(d.path()).unwrap();
        assert!(kept.is_link(b"logs/refs/heads/u"));
        // Renamed, it moves as a link.
        shared.rename(lheads, b"u", lheads, b"v", me).unwrap();
        assert!(shared.lookup(lheads, b"u").is_err());
        assert_eq!(shared.lookup(lheads, b"v").unwrap().1, Kind::Link);
        shared.unlink(lheads, b"v", me).unwrap();
        assert!(BrokenRefs::open(d.path()).unwrap().is_empty());

        // A reflog written with what is no reflog line is kept as written.
        let (_, fh) = shared.create(lheads, b"main", flags, me).unwrap();
        shared.write(fh, 0, zero.as_bytes(), 0, me).unwrap();
        shared.flush(fh, me).unwrap();
        shared.release(fh);
        assert_eq!(read(lheads, b"main"), zero.as_bytes());
        assert_eq!(shared.lookup(lheads, b"main").unwrap().1, Kind::Scratch);
        let kept = BrokenRefs::open(d.path()).unwrap();
        assert_eq!(
            kept.get(b"logs/refs/heads/main").unwrap().content,
            zero.as_bytes()
        );
        shared.unlink(lheads, b"main", me).unwrap();
        assert!(shared.lookup(lheads, b"main").is_err());
        assert!(BrokenRefs::open(d.path()).unwrap().is_empty());

        // A bad line appended to a reflog that holds lines is refused; its lines stay.
        let line = format!("{} {id} A <a@b.c> 1700000000 +0000\tx\n", "0".repeat(40));
        let (_, fh) = shared.create(lheads, b"side", flags, me).unwrap();
        shared.write(fh, 0, line.as_bytes(), 0, me).unwrap();
        shared.flush(fh, me).unwrap();
        shared.release(fh);
        let append = libc::O_WRONLY | libc::O_APPEND;
        let (_, fh) = shared.create(lheads, b"side", append, me).unwrap();
        assert_eq!(
            shared
                .write(fh, 0, zero.as_bytes(), append, me)
                .unwrap_err()
                .errno(),
            libc::EINVAL
        );
        shared.release(fh);
        assert_eq!(read(lheads, b"side"), line.as_bytes());
        assert_eq!(shared.lookup(lheads, b"side").unwrap().1, Kind::Log);
        assert!(BrokenRefs::open(d.path()).unwrap().is_empty());
    }
}
