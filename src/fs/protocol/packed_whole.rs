//! `packed-refs` as a whole file, as a files `.git` has it: whether it exists, content
//! written to it that is no valid `packed-refs`, and its `unlink`.
//!
//! * **Exists** once something wrote or created it through the mount (git's `pack-refs`,
//!   a client's `>packed-refs`), and while it has entries (the packed layout's refs, a
//!   state saved by an older mount); absent on a fresh loose-layout view, as in a fresh
//!   files repository, and after `unlink` until it is written again.
//! * **Junk**: content that does not parse as `packed-refs` (an unterminated line, a
//!   short id, a bad name, `printf junk >>.git/packed-refs`) is kept as written and shown
//!   byte for byte, so git reads it and fails as on disk; the packed refs in the stack stay
//!   unchanged (git 2.47 still reads them) until a valid `packed-refs` is written (the
//!   difference against the real entries is applied) or it is unlinked. At most
//!   [`PACKED_JUNK_MAX`] bytes; kept across mounts by the state layer
//!   (`state/packed_state.rs`, [`JUNK_FILE`]).
//! * **Unlink** does what it does to a files backend: every ref that is packed only (no
//!   loose file) is deleted, all in the open batch (their reflogs stay, as `logs/` does);
//!   loose refs keep their value and lose the entries they shadowed.

use std::sync::Arc;

use crate::fs::error::Refusal;
use crate::fs::source::RefSource;

use super::packed::*;
use super::*;

/// The most content the mount keeps as a `packed-refs` that does not parse.
pub const PACKED_JUNK_MAX: usize = 1 << 20;

/// The file beside the stack (`GITDIR/reftablefs-packed.junk`; git never reads it) that
/// keeps a `packed-refs` that does not parse, byte for byte, while it shows.
pub const JUNK_FILE: &str = "reftablefs-packed.junk";

impl PackedLayer {
    /// The content kept because it is no valid `packed-refs`, if any.
    pub fn junk(&self) -> Option<&Arc<Vec<u8>>> {
        self.junk.as_ref()
    }

    /// Changes with every change of [`Self::junk`].
    pub fn junk_revision(&self) -> u64 {
        self.junk_revision
    }
}

impl WriteState {
    /// Whether `packed-refs` exists in the view (see the module's documentation).
    pub fn packed_refs_exists(&mut self, src: &mut dyn RefSource) -> R<bool> {
        if self.packed.present || self.packed.junk.is_some() {
            return Ok(true);
        }
        if self.packed.layout() == Layout::Loose {
            // Loose(None) is the loose layout's default, never an entry: the first entry
            // answers.
            return Ok(self
                .packed
                .refs
                .values()
                .any(|p| !matches!(p, Packing::Loose(None))));
        }
        // The packed layout: any entry past the first line of the (cached) rendering; one
        // too big to render has entries.
        let bytes = match self.packed_refs_marked(src) {
            Ok((bytes, _)) => bytes,
            Err(r) if r.errno == libc::EFBIG => return Ok(true),
            Err(r) => return Err(r),
        };
        let first = bytes
            .iter()
            .position(|&b| b == b'\n')
            .map_or(bytes.len(), |i| i + 1);
        Ok(bytes.len() > first || bytes.first().is_some_and(|&b| b != b'#'))
    }

    /// `packed-refs` was created empty (`open(O_CREAT)` when it did not exist): it exists,
    /// with no entries and no header, until what is written is committed.
    pub fn create_packed_refs(&mut self) {
        self.packed.present = true;
        self.packed.header = Some(Vec::new());
        self.packed.epoch += 1;
        self.packed.revision += 1;
    }

    /// `content`, written as `packed-refs`, does not parse (`why`): kept and shown as
    /// written, the packed entries unchanged; refused beyond [`PACKED_JUNK_MAX`].
    pub(super) fn keep_packed_junk(&mut self, content: &[u8], why: &str) -> R<()> {
        if content.len() > PACKED_JUNK_MAX {
            return Err(Refusal::new(
                libc::EINVAL,
                format!(
                    "packed-refs: {why}; content that is no valid packed-refs is kept as \
                     written up to {} KiB only",
                    PACKED_JUNK_MAX >> 10
                ),
            ));
        }
        self.set_packed_junk(Some(content.to_vec()));
        self.packed.present = true;
        self.packed.revision += 1;
        Ok(())
    }

    /// Shows `junk` as `packed-refs` (`None`: the rendering again).
    pub fn set_packed_junk(&mut self, junk: Option<Vec<u8>>) {
        self.packed.junk = junk.map(Arc::new);
        self.packed.junk_revision += 1;
        self.packed.epoch += 1;
    }

    /// `unlink packed-refs`, as on a files backend: every packed-only ref is deleted (in
    /// the open batch; its reflog stays), a loose ref keeps its value and loses the entry
    /// it shadowed, and `packed-refs` is absent until written again. Validated first: on
    /// refusal nothing changes but the deletions staged before it (each a valid edit).
    pub fn unlink_packed_refs(&mut self, src: &mut dyn RefSource, who: &Caller) -> R<()> {
        if !self.packed_refs_exists(src)? {
            return Err(Refusal::new(libc::ENOENT, "packed-refs does not exist"));
        }
        let entries = self.packed_entries(src)?;
        for (name, _, only) in &entries {
            if *only {
                self.stage_value(src, who, name, RefValue::Deletion)?;
                self.packed.refs.remove(name);
            }
        }
        for (name, _, only) in entries {
            if !only {
                let now = self.effective(src, &name)?;
                self.packed.set(&name, now.as_ref(), Packing::Loose(None));
            }
        }
        if self.packed.junk.is_some() {
            self.set_packed_junk(None);
        }
        self.packed.present = false;
        self.packed.header = None;
        self.packed.epoch += 1;
        self.packed.revision += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{HashKind, ObjectId};
    use crate::fs::source::{LogSettings, MemSource, RefWriter};
    use crate::fs::view::{Kind, Scratch};

    const ME: Caller = Caller {
        pid: 0,
        handles: Vec::new(),
    };

    fn hex(n: u8) -> String {
        format!("{n:02x}").repeat(20)
    }

    /// A loose-layout view of main, topic and v1.
    fn setup() -> (MemSource, WriteState) {
        let mut m = MemSource::new();
        for (name, n) in [
            ("refs/heads/main", 1),
            ("refs/heads/topic", 2),
            ("refs/tags/v1", 3),
        ] {
            let id = ObjectId::from_bytes(&[n; 20]).unwrap();
            m.set(name, RefValue::Val1(id));
        }
        m.set("HEAD", RefValue::Symref(b"refs/heads/main".to_vec()));
        (m, WriteState::new(HashKind::Sha1, LogSettings::default()))
    }

    fn flush(w: &mut WriteState, m: &mut MemSource) {
        w.seal_all();
        while let Some(b) = w.queue().pop() {
            let out = m.commit(&b.edits).unwrap();
            let names: Vec<_> = out.conflicts.iter().map(|c| c.name.clone()).collect();
            w.batch_done(b.seq, &names);
        }
    }

    fn packed_all() -> String {
        format!(
            "# pack-refs with: peeled fully-peeled sorted \n{} refs/heads/main\n{} \
             refs/heads/topic\n{} refs/tags/v1\n",
            hex(1),
            hex(2),
            hex(3)
        )
    }

    /// Pack-refs --all --prune of the view.
    fn pack_prune(w: &mut WriteState, m: &mut MemSource) {
        w.commit_packed_refs(m, &ME, packed_all().as_bytes(), None)
            .unwrap();
        for n in ["refs/heads/main", "refs/heads/topic", "refs/tags/v1"] {
            w.unlink_ref(m, &ME, n.as_bytes()).unwrap();
        }
    }

    /// Absent on a fresh loose view, present once written, absent after unlink (which
    /// deletes the packed-only refs in one batch, keeps a loose one, and a second unlink
    /// finds nothing).
    #[test]
    fn packed_refs_exists_as_in_a_files_repository() {
        let (mut m, mut w) = setup();
        let mut s = Scratch::default();
        assert!(!w.packed_refs_exists(&mut m).unwrap());
        assert_eq!(w.classify(&mut m, &mut s, b"packed-refs").unwrap(), None);
        pack_prune(&mut w, &mut m);
        assert!(w.packed_refs_exists(&mut m).unwrap());
        assert_eq!(
            w.classify(&mut m, &mut s, b"packed-refs").unwrap(),
            Some(Kind::PackedRefs)
        );
        // topic written loose over its entry.
        let id9 = ObjectId::from_bytes(&[9; 20]).unwrap();
        w.commit_ref(&mut m, &ME, b"refs/heads/topic", RefValue::Val1(id9))
            .unwrap();
        flush(&mut w, &mut m);
        w.unlink_packed_refs(&mut m, &ME).unwrap();
        assert_eq!(w.open.edits.len(), 2, "one batch of two deletions");
        flush(&mut w, &mut m);
        assert!(!m.refs.contains_key(&b"refs/heads/main"[..]));
        assert!(!m.refs.contains_key(&b"refs/tags/v1"[..]));
        assert_eq!(
            m.refs.get(&b"refs/heads/topic"[..]).cloned(),
            Some(RefValue::Val1(id9))
        );
        assert!(!w.packed_refs_exists(&mut m).unwrap());
        assert_eq!(
            w.unlink_packed_refs(&mut m, &ME).unwrap_err().errno,
            libc::ENOENT
        );
        // Saved and read back: still absent; once created, present (and empty).
        let mut saved = Vec::new();
        w.packed.save(&mut saved);
        let mut again = WriteState::new(HashKind::Sha1, LogSettings::default());
        again.load_packed_state(&mut m, &saved);
        assert!(!again.packed_refs_exists(&mut m).unwrap());
        again.create_packed_refs();
        assert!(again.packed_refs(&mut m).unwrap().is_empty());
        let mut saved = Vec::new();
        again.packed.save(&mut saved);
        let mut third = WriteState::new(HashKind::Sha1, LogSettings::default());
        third.load_packed_state(&mut m, &saved);
        assert!(third.packed_refs_exists(&mut m).unwrap());
        assert!(third.packed_refs(&mut m).unwrap().is_empty());
    }

    /// Junk is shown byte for byte with the stack and the packed entries unchanged; a valid
    /// rewrite applies its difference against the real entries and drops the junk; junk
    /// past the bound is refused.
    #[test]
    fn junk_is_kept_until_a_valid_packed_refs() {
        let (mut m, mut w) = setup();
        pack_prune(&mut w, &mut m);
        let entries = w.packed.refs.clone();
        for junk in [
            format!("{}{} refs/zzzzz", packed_all(), hex(1)),
            format!("{}bogus content\n", packed_all()),
            format!("{}{} refs/zzzzz\n", packed_all(), &hex(1)[..7]),
        ] {
            w.commit_packed_refs(&mut m, &ME, junk.as_bytes(), None)
                .unwrap();
            assert_eq!(w.packed_refs(&mut m).unwrap().as_slice(), junk.as_bytes());
            assert!(w.open.is_empty(), "junk staged edits");
            assert_eq!(w.packed.refs, entries);
        }
        let revision = w.packed.junk_revision();
        let big = vec![b'x'; PACKED_JUNK_MAX + 1];
        assert_eq!(
            w.commit_packed_refs(&mut m, &ME, &big, None)
                .unwrap_err()
                .errno,
            libc::EINVAL
        );
        assert_eq!(
            w.packed.junk_revision(),
            revision,
            "a refusal changed the junk"
        );
        // Valid again, without topic: topic is deleted, the junk gone.
        let without = packed_all().replace(&format!("{} refs/heads/topic\n", hex(2)), "");
        w.commit_packed_refs(&mut m, &ME, without.as_bytes(), None)
            .unwrap();
        assert!(w.packed.junk().is_none());
        assert_eq!(
            w.packed_refs(&mut m).unwrap().as_slice(),
            without.as_bytes()
        );
        flush(&mut w, &mut m);
        assert!(!m.refs.contains_key(&b"refs/heads/topic"[..]));
        assert!(m.refs.contains_key(&b"refs/heads/main"[..]));
    }
}
