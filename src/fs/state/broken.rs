//! The state's hooks for broken refs (`fs/broken.rs` is their store): what the files
//! calls of `calls.rs` ask under the state lock — whether a write is kept as a broken ref,
//! keeping, renaming, syncing and dropping one, and loading the store at mount.

use crate::format::RefValue;
use crate::fs::broken::{is_bad_name, is_candidate, BrokenRefs};
use crate::fs::error::Refusal;
use crate::fs::protocol::{valid_ref_name, Caller};
use crate::fs::record::log_error;

use super::Inner;

/// The hooks `state` calls (under the state lock).
impl Inner {
    /// Whether `path` written with `content` is kept as a broken ref instead of being a
    /// ref of the stack: a broken name, or content that is no ref value.
    pub(crate) fn broken_wants(&self, path: &[u8], content: &[u8]) -> bool {
        self.broken_refs.enabled()
            && is_candidate(path)
            && (!valid_ref_name(path) || self.w.parse_ref_content(content).is_err())
    }

    /// Whether content that can be no ref value may still be written into `path` (a ref
    /// file or a ref's lock below `refs/`): it will be kept as a broken ref, if there is
    /// room for it.
    pub(crate) fn broken_accepts(&self, path: &[u8], len: usize) -> bool {
        self.broken_refs.write_room(path, len) == Some(true)
    }

    /// Keeps `content` at `path` as a broken ref: stored, shown as the file; the stack's
    /// ref of that name (the file on disk would replace it) is deleted.
    pub(crate) fn broken_keep(
        &mut self,
        who: &Caller,
        path: &[u8],
        content: Vec<u8>,
    ) -> Result<(), Refusal> {
        let had = self.broken_refs.get(path).cloned();
        self.broken_refs.put(path, &content)?;
        if valid_ref_name(path) {
            let Inner { w, src, .. } = self;
            let deleted = match w.effective(src.as_mut(), path) {
                Ok(Some(_)) => w.commit_ref(src.as_mut(), who, path, RefValue::Deletion),
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            };
            if let Err(e) = deleted {
                let _ = match had {
                    Some(c) => self.broken_refs.put(path, &c),
                    None => self.broken_refs.remove(path).map(|_| ()),
                };
                return Err(e);
            }
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
        crate::fs::view::render_ref(&value, &mut content);
        if let Err(e) = self.broken_refs.put(to, &content) {
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

    /// Makes the store agree with the overlay's file at `path` after a call changed it
    /// (a close, a rename, an unlink): a broken ref's new content is kept, a broken ref
    /// gone (or become a real ref) is forgotten. On failure the overlay goes back to what
    /// the store holds, and the errno is the call's.
    pub(crate) fn broken_sync(&mut self, path: &[u8]) -> Result<(), Refusal> {
        if !self.broken_refs.enabled() || !is_candidate(path) {
            return Ok(());
        }
        let kept = self.broken_refs.contains(path);
        let r = match self.w.files.get(path) {
            Some(c) if kept || is_bad_name(path) => {
                let c = c.clone();
                self.broken_refs.put(path, &c)
            }
            _ if kept && !self.w.files.contains_key(path) => {
                self.broken_refs.remove(path).map(|_| ())
            }
            _ => Ok(()),
        };
        if r.is_err() {
            match self.broken_refs.get(path) {
                Some(c) => {
                    let c = c.clone();
                    self.w.files.insert(path.to_vec(), c);
                }
                None => {
                    self.w.files.remove(path);
                }
            }
        }
        r
    }

    /// After a reload: broken refs whose name the stack now holds as a real ref (written
    /// by another writer) are dropped. Returns their names.
    pub(crate) fn broken_drop_shadowed(&mut self) -> Vec<Vec<u8>> {
        if self.broken_refs.is_empty() {
            return Vec::new();
        }
        let names: Vec<Vec<u8>> = self
            .broken_refs
            .iter()
            .filter(|(n, _)| valid_ref_name(n))
            .map(|(n, _)| n.clone())
            .collect();
        let mut dropped = Vec::new();
        for n in names {
            let Inner { w, src, .. } = self;
            if !matches!(
                crate::fs::source::read_ref(src.as_mut(), &n, &mut Default::default()),
                Ok(true)
            ) {
                continue;
            }
            if w.pending.contains_key(&n) {
                continue;
            }
            if let Err(e) = self.broken_refs.remove(&n) {
                log_error("drop shadowed broken ref", &n, &e.reason);
            }
            self.w.files.remove(&n);
            dropped.push(n);
        }
        dropped
    }

    /// At mount: the store's refs become the view's files (after dropping those the
    /// stack holds as real refs).
    pub(crate) fn broken_load(&mut self, store: BrokenRefs) {
        self.broken_refs = store;
        let all: Vec<(Vec<u8>, Vec<u8>)> = self
            .broken_refs
            .iter()
            .map(|(n, c)| (n.clone(), c.clone()))
            .collect();
        for (n, c) in all {
            self.w.files.insert(n, c);
        }
        self.broken_drop_shadowed();
    }
}

#[cfg(test)]
mod tests {
    use super::Inner;
    use crate::fs::broken::{BrokenRefs, FILE_NAME};

    /// Through the view's calls: a bad name created, written and closed is kept and
    /// listed; junk renamed from a valid ref's lock replaces that ref; unlink forgets it.
    #[test]
    fn the_view_keeps_lists_and_forgets_broken_refs() {
        use crate::format::{ObjectId, RefValue};
        use crate::fs::ino::ROOT;
        use crate::fs::source::{LogSettings, MemSource};
        use crate::fs::state::{BatchSettings, Shared};
        use crate::fs::view::Kind;

        let id = ObjectId::from_bytes(&[1; 20]).expect("id");
        let mut mem = MemSource::new();
        mem.set("refs/heads/main", RefValue::Val1(id));
        mem.set("refs/heads/b", RefValue::Val1(id));
        let shared = Shared::new(
            Box::new(mem),
            false,
            LogSettings::default(),
            BatchSettings {
                window: std::time::Duration::from_secs(60),
                max: 1000,
            },
        );
        let d = tempfile::tempdir().unwrap();
        shared.keep_broken_refs(BrokenRefs::open(d.path()).unwrap());
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
        assert_eq!(store.get(b"refs/heads/broken...ref").unwrap(), b"junk\n");

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

        // HEAD is never kept broken.
        let (_, fh) = shared.create(ROOT, b"HEAD.lock", flags, me).unwrap();
        assert_eq!(
            shared.write(fh, 0, b"junk", 0, me).unwrap_err().errno(),
            libc::EINVAL
        );
    }
}
