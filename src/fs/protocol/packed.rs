//! The packed layer: which refs are loose files and which live in `packed-refs` only, what
//! `packed-refs` holds, its rendering (one per stack generation, shared), a new
//! `packed-refs` renamed over it or written in place, and what another writer on the stack
//! makes of it.
//!
//! The stack holds effective values (`effective = loose ?? packed`, as in git's files
//! backend); whether a ref is a loose file, a `packed-refs` entry or both is the view's
//! state, kept here (and across mounts in [`STATE_FILE`], by `state/packed_state.rs`). A layout ([`Layout`]) gives every ref
//! a default — the loose layout: a loose file only; the packed layout: in `packed-refs`
//! only when `git pack-refs --all` would pack it ([`packable`]), else a loose file — and
//! [`PackedLayer::refs`] holds the refs whose state differs from it, as the files backend
//! makes them differ:
//!
//! * a loose commit point (a lock renamed onto the ref, a ref written in place) makes the
//!   ref a loose file; its `packed-refs` entry, if any, stays (shadowed);
//! * `unlink` of a loose file falls back to the ref's `packed-refs` entry (the ref is then
//!   packed only; no stack change when the values agree, which is `pack-refs --prune`),
//!   or deletes the ref without one; a packed-only ref has no loose file to unlink
//!   (`ENOENT`);
//! * a new `packed-refs` (renamed over it, or written in place) becomes the packed entries:
//!   a packed-only ref it drops is deleted, one it changes takes the new value, a name it
//!   adds that does not exist is created — the changes of effective values, staged as
//!   edits — while a loose ref only gets another shadowed entry; content that does not
//!   parse is kept and shown as written instead (`packed_whole.rs`, with whether
//!   `packed-refs` exists and its `unlink`).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::files;
use crate::format::{ObjectId, RefValue};
use crate::fs::error::Refusal;
use crate::fs::source::{RefSource, Step};
use crate::fs::view;
use crate::refname::{check_refname_format, RefnameFlags};

use super::*;

/// A `packed-refs` entry: the id and, for an annotated tag, what it peels to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packed {
    pub id: ObjectId,
    pub peeled: Option<ObjectId>,
}

/// Whether a ref's effective value points at the same object as a packed entry. The
/// peeled id is derived data: a packed annotated tag carries it (`^<peeled>`), the same tag
/// written through a lock file does not, and both name one value.
pub(super) fn same_object(have: Option<&RefValue>, packed: &RefValue) -> bool {
    have.and_then(RefValue::object_id)
        .is_some_and(|h| Some(h) == packed.object_id())
}

impl Packed {
    pub(super) fn value(&self) -> RefValue {
        match self.peeled {
            Some(p) => RefValue::Val2 {
                value: self.id,
                peeled: p,
            },
            None => RefValue::Val1(self.id),
        }
    }

    /// The entry `pack-refs` writes for a ref of value `v` (as git 2.47 reads the stack: a
    /// record with a peeled id is an annotated tag, one without is not); `None` for a
    /// symref or a deletion.
    pub(super) fn of(v: &RefValue) -> Option<Packed> {
        match v {
            RefValue::Val1(id) => Some(Packed {
                id: *id,
                peeled: None,
            }),
            RefValue::Val2 { value, peeled } => Some(Packed {
                id: *value,
                peeled: Some(*peeled),
            }),
            RefValue::Symref(_) | RefValue::Deletion => None,
        }
    }
}

/// Which files a ref of the view is, where it differs from the layout's default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packing {
    /// A loose file (its value the ref's); the `packed-refs` entry it shadows, if any.
    Loose(Option<Packed>),
    /// In `packed-refs` only, no loose file; the entry's id is the ref's.
    PackedOnly(Packed),
}

/// How the mount shows refs that nobody packed or unpacked through it (`mount
/// --layout`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Layout {
    /// Every ref a loose file (as a files repository that never ran `git gc`);
    /// `packed-refs` holds what git wrote into it through the mount.
    #[default]
    Loose,
    /// As after `git gc`: every ref `git pack-refs --all` packs is in `packed-refs` only
    /// (rendered from the stack); loose files for the root refs, symrefs, per-worktree refs
    /// and the refs written through the mount since.
    Packed,
}

/// Whether `git pack-refs --all` packs a ref: below `refs/`, not a symref, not a
/// per-worktree ref (`refs/bisect/`, `refs/worktree/`, `refs/rewritten/`).
pub fn packable(name: &[u8], v: &RefValue) -> bool {
    name.starts_with(b"refs/")
        && !name.starts_with(b"refs/bisect/")
        && !name.starts_with(b"refs/worktree/")
        && !name.starts_with(b"refs/rewritten/")
        && matches!(v, RefValue::Val1(_) | RefValue::Val2 { .. })
}

/// A rendering of `packed-refs`, shared by every reader of its generation.
#[derive(Debug)]
struct Rendered {
    /// The stack generation it was rendered for (the packed layout's depends on it).
    generation: u64,
    /// [`PackedLayer::epoch`] when it was rendered.
    epoch: u64,
    bytes: Arc<Vec<u8>>,
}

/// The contents `packed-refs` showed last, newest first, each with its version: a number
/// that changes exactly when the content does (a new content is compared with the last
/// one, byte for byte). A version names one content for the mount's life: the inode a
/// lookup gives `packed-refs` is made of it (`fs/inode.rs`), so the kernel's pages of that
/// inode only ever hold that content, and an open that raced with a change still finds
/// the content its lookup saw. At most [`SHOWN_KEPT`] contents, and beyond the newest
/// only while they total at most [`SHOWN_BYTES_MAX`].
#[derive(Debug, Default)]
struct Shown {
    recent: std::collections::VecDeque<(Arc<Vec<u8>>, u64)>,
    last_version: u64,
}

/// How many contents [`Shown`] keeps.
const SHOWN_KEPT: usize = 4;
/// How many bytes the contents [`Shown`] keeps besides the newest may hold.
const SHOWN_BYTES_MAX: usize = 64 << 20;

impl Shown {
    /// `bytes` is what `packed-refs` shows now: the shared content and its version (the
    /// last one's when the content is the same).
    fn show(&mut self, bytes: Arc<Vec<u8>>) -> (Arc<Vec<u8>>, u64) {
        if let Some((last, v)) = self.recent.front() {
            if Arc::ptr_eq(last, &bytes) || **last == *bytes {
                return (last.clone(), *v);
            }
        }
        self.last_version += 1;
        let v = self.last_version;
        self.recent.push_front((bytes.clone(), v));
        self.recent.truncate(SHOWN_KEPT);
        let mut total = 0usize;
        let mut keep = 0usize;
        for (i, (b, _)) in self.recent.iter().enumerate() {
            total = total.saturating_add(b.len());
            if i > 0 && total > SHOWN_BYTES_MAX {
                break;
            }
            keep = i + 1;
        }
        self.recent.truncate(keep);
        (bytes, v)
    }

    /// The content of version `v`, if still kept.
    fn get(&self, v: u64) -> Option<Arc<Vec<u8>>> {
        self.recent
            .iter()
            .find(|(_, x)| *x == v)
            .map(|(b, _)| b.clone())
    }
}

/// The packed layout's loose refs that are not in [`PackedLayer::refs`]: the refs below
/// `refs/` that `pack-refs` leaves loose (symrefs, per-worktree refs), as one pass over
/// the stack found them.
#[derive(Debug)]
struct Unpackable {
    generation: u64,
    names: Vec<Vec<u8>>,
}

/// The view's packed state (see the module's documentation).
#[derive(Debug, Default)]
pub struct PackedLayer {
    layout: Layout,
    /// Refs whose files differ from the layout's default.
    pub refs: BTreeMap<Vec<u8>, Packing>,
    /// The first line of the last `packed-refs` written through the mount when it was not
    /// git's header (a test's mark, an old `# pack-refs with: peeled `; empty: none).
    pub(super) header: Option<Vec<u8>>,
    /// Bumped by every change of what `packed-refs` shows other than by the stack's own
    /// (a new `packed-refs`, another writer's change, a lost edit).
    pub(super) epoch: u64,
    /// Bumped by every change another writer made to the stack.
    external: u64,
    /// [`Self::external`] when `packed-refs.lock` was last created.
    lock_seen: Option<u64>,
    rendered: Option<Rendered>,
    unpackable: Option<Unpackable>,
    /// Bumped by every change of [`Self::refs`] or the header: what [`Self::save`] writes
    /// changed.
    pub(super) revision: u64,
    /// `packed-refs` exists because it was written (or created) through the mount and not
    /// unlinked since; it exists too while it has entries (`packed_whole.rs`).
    pub(super) present: bool,
    /// What was last written to `packed-refs` when it is no valid `packed-refs`, shown byte
    /// for byte instead of the rendering (`packed_whole.rs`).
    pub(super) junk: Option<Arc<Vec<u8>>>,
    /// The contents shown last, with their versions.
    shown: Shown,
    /// Bumped by every change of [`Self::junk`].
    pub(super) junk_revision: u64,
}

impl PackedLayer {
    /// The layout (the default state of refs).
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// How a live ref of effective value `v` shows.
    pub(super) fn packing(&self, name: &[u8], v: &RefValue) -> Packing {
        if let Some(p) = self.refs.get(name) {
            return *p;
        }
        match (self.layout, Packed::of(v)) {
            (Layout::Packed, Some(p)) if packable(name, v) => Packing::PackedOnly(p),
            _ => Packing::Loose(None),
        }
    }

    /// Records `packing` for `name` (whose effective value is then `v`), as an entry only
    /// where it differs from the layout's default.
    pub(super) fn set(&mut self, name: &[u8], v: Option<&RefValue>, packing: Packing) {
        self.revision += 1;
        let default = match v {
            Some(v) => {
                self.refs.remove(name);
                self.packing(name, v)
            }
            None => Packing::Loose(None),
        };
        if packing == default {
            self.refs.remove(name);
        } else {
            self.refs.insert(name.to_vec(), packing);
        }
    }

    /// Whether some ref below `prefix` may be packed only (the listing of a directory must
    /// then be checked name by name).
    pub fn hides_below(&self, prefix: &[u8]) -> bool {
        self.layout == Layout::Packed
            || self
                .refs
                .range(prefix.to_vec()..)
                .take_while(|(n, _)| n.starts_with(prefix))
                .any(|(_, p)| matches!(p, Packing::PackedOnly(_)))
    }

    /// The counter of other writers' changes (see [`WriteState::commit_packed_refs`]).
    pub fn external_changes(&self) -> u64 {
        self.external
    }
}

/// The largest `packed-refs` the mount renders: what a writer may write back through it
/// (a scratch file's bound).
pub const PACKED_REFS_MAX: usize = crate::fs::budget::SCRATCH_FILE_MAX;

/// `packed-refs` as structured entries: (name, entry, whether the ref is packed only).
type Entries = Vec<(Vec<u8>, Packed, bool)>;

impl WriteState {
    /// Sets the layout (at mount time, before any request).
    pub fn set_layout(&mut self, layout: Layout) {
        self.packed.layout = layout;
        self.packed.refs.clear();
        self.packed.epoch += 1;
        self.packed.revision += 1;
    }

    /// Whether the live ref `name` of effective value `v` shows as a loose file.
    pub(super) fn shows_loose(&self, name: &[u8], v: &RefValue) -> bool {
        matches!(self.packed.packing(name, v), Packing::Loose(_))
    }

    /// Whether `name` shows as a loose ref file.
    pub(super) fn is_loose_ref(&mut self, src: &mut dyn RefSource, name: &[u8]) -> R<bool> {
        Ok(match self.effective(src, name)? {
            Some(v) => self.shows_loose(name, &v),
            None => false,
        })
    }

    /// Whether some loose ref file lives below `prefix` (which ends in `/`).
    pub(super) fn any_loose_below(&mut self, src: &mut dyn RefSource, prefix: &[u8]) -> R<bool> {
        if !self.packed.hides_below(prefix) {
            return self.any_ref_below(src, prefix);
        }
        for name in self.loose_candidates(src, prefix)? {
            if self.is_loose_ref(src, &name)? {
                return Ok(true);
            }
        }
        if self.packed.layout == Layout::Packed {
            return Ok(false);
        }
        // The loose layout with packed-only refs below: one pass over the stack's refs
        // below, skipping those (a ref of the stack without an entry is a loose file unless
        // the overlay deletes it).
        let mut found = false;
        let (refs, pending) = (&self.packed.refs, &self.pending);
        src.scan_refs(prefix, &mut |rec, _key| {
            if !rec.name.starts_with(prefix) {
                return Step::Stop;
            }
            let packed_only = matches!(refs.get(&rec.name), Some(Packing::PackedOnly(_)));
            let deleted = pending
                .get(&rec.name)
                .is_some_and(|p| matches!(p.value, RefValue::Deletion));
            if packed_only || deleted {
                return Step::Next;
            }
            found = true;
            Step::Stop
        })
        .map_err(source_err)?;
        Ok(found)
    }

    /// Names below `prefix` that may be loose refs besides those of the stack the layout
    /// shows loose anyway: entries, pending values and (packed layout) the unpackable refs.
    fn loose_candidates(&mut self, src: &mut dyn RefSource, prefix: &[u8]) -> R<Vec<Vec<u8>>> {
        let below = |n: &&Vec<u8>| n.starts_with(prefix);
        // A packed-only entry is never a loose file: not a candidate.
        let mut out: Vec<Vec<u8>> = self
            .packed
            .refs
            .range(prefix.to_vec()..)
            .take_while(|(n, _)| n.starts_with(prefix))
            .filter(|(_, p)| !matches!(p, Packing::PackedOnly(_)))
            .map(|(n, _)| n.clone())
            .collect();
        out.extend(
            self.pending
                .range(prefix.to_vec()..)
                .map(|(n, _)| n)
                .take_while(below)
                .cloned(),
        );
        if self.packed.layout == Layout::Packed {
            self.ensure_unpackable(src)?;
            if let Some(u) = &self.packed.unpackable {
                let start = u.names.partition_point(|n| n.as_slice() < prefix);
                out.extend(
                    u.names
                        .get(start..)
                        .unwrap_or_default()
                        .iter()
                        .take_while(|n| n.starts_with(prefix))
                        .cloned(),
                );
            }
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    /// The packed layout's listing of directory `path` below `refs`: the loose refs below
    /// it, as files and directories (the overlay's scratch files and directories are added
    /// by [`WriteState::overlay_listing`]).
    pub fn packed_layout_listing(
        &mut self,
        src: &mut dyn RefSource,
        path: &[u8],
        out: &mut Vec<view::Entry>,
    ) -> R<()> {
        out.clear();
        let mut prefix = path.to_vec();
        prefix.push(b'/');
        for name in self.loose_candidates(src, &prefix)? {
            if !self.is_loose_ref(src, &name)? {
                continue;
            }
            let rest = name.get(prefix.len()..).unwrap_or_default();
            let entry = match rest.iter().position(|&b| b == b'/') {
                Some(i) => view::Entry {
                    name: rest.get(..i).unwrap_or_default().into(),
                    kind: view::Kind::Dir,
                },
                None => view::Entry {
                    name: rest.into(),
                    kind: view::Kind::Ref,
                },
            };
            if !entry.name.is_empty() {
                out.push(entry);
            }
        }
        view::finish_listing(out);
        Ok(())
    }

    /// A loose commit point wrote `value` over `old` (`None`: the ref did not exist): the
    /// ref is a loose file now (its `packed-refs` entry, if any, stays, shadowed), or gone.
    pub(super) fn written_loose(&mut self, name: &[u8], old: Option<&RefValue>, value: &RefValue) {
        if matches!(value, RefValue::Deletion) {
            if let Some(p) = self.packed.refs.remove(name) {
                self.packed.revision += 1;
                if !matches!(p, Packing::Loose(None)) {
                    self.packed.epoch += 1;
                }
            }
            return;
        }
        let shadowed = match old.map(|o| self.packed.packing(name, o)) {
            Some(Packing::PackedOnly(p)) | Some(Packing::Loose(Some(p))) => Some(p),
            _ => None,
        };
        self.packed.set(name, Some(value), Packing::Loose(shadowed));
    }

    /// `unlink` of a loose ref: loose-over-packed semantics. With a `packed-refs` entry the
    /// ref falls back to it and is packed only from now on — no stack change when it has
    /// that value already, which is what `pack-refs --prune` does. Without one the ref is
    /// deleted (its reflog stays, as in the files backend). A ref that is packed only has
    /// no loose file: `ENOENT`.
    pub fn unlink_ref(&mut self, src: &mut dyn RefSource, who: &Caller, name: &[u8]) -> R<()> {
        let Some(v) = self.effective(src, name)? else {
            return Err(Refusal::new(libc::ENOENT, "no such ref"));
        };
        match self.packed.packing(name, &v) {
            Packing::PackedOnly(_) => Err(Refusal::new(
                libc::ENOENT,
                "the ref is in packed-refs only: no loose file",
            )),
            Packing::Loose(Some(p)) => {
                let packed = p.value();
                let now = if same_object(Some(&v), &packed) {
                    v
                } else {
                    self.stage_value(src, who, name, packed.clone())?;
                    packed
                };
                self.packed.set(name, Some(&now), Packing::PackedOnly(p));
                Ok(())
            }
            Packing::Loose(None) => self.commit_ref(src, who, name, RefValue::Deletion),
        }
    }

    /// `packed-refs` as it shows now, shared: rendered once per stack generation (the
    /// packed layout's) and change of the packed layer, kept until either moves on.
    pub fn packed_refs(&mut self, src: &mut dyn RefSource) -> R<Arc<Vec<u8>>> {
        Ok(self.packed_refs_marked(src)?.0)
    }

    /// [`Self::packed_refs`] with the content's version (`Shown`): the same number for
    /// the same content shown again, a new one for every change.
    pub fn packed_refs_marked(&mut self, src: &mut dyn RefSource) -> R<(Arc<Vec<u8>>, u64)> {
        if let Some(bytes) = &self.packed.junk {
            let bytes = bytes.clone();
            return Ok(self.packed.shown.show(bytes));
        }
        let generation = src.generation();
        if let Some(r) = &self.packed.rendered {
            let same_stack = self.packed.layout == Layout::Loose || r.generation == generation;
            if r.epoch == self.packed.epoch && same_stack {
                let bytes = r.bytes.clone();
                return Ok(self.packed.shown.show(bytes));
            }
        }
        let mut out = Vec::new();
        out.extend_from_slice(
            self.packed
                .header
                .as_deref()
                .unwrap_or(view::PACKED_REFS_HEADER),
        );
        let mut too_big = false;
        self.visit_packed_entries(src, &mut |name, p, _| {
            if out.len() > PACKED_REFS_MAX {
                too_big = true;
                return;
            }
            files::render_packed_ref(name, &p.id, p.peeled.as_ref(), &mut out);
        })?;
        if too_big || out.len() > PACKED_REFS_MAX {
            return Err(Refusal::new(
                libc::EFBIG,
                format!(
                    "packed-refs would be larger than {} MiB (the most a writer may write \
                     back through the mount); mount with --layout=loose",
                    PACKED_REFS_MAX >> 20
                ),
            ));
        }
        out.shrink_to_fit();
        let (bytes, version) = self.packed.shown.show(Arc::new(out));
        self.packed.rendered = Some(Rendered {
            generation,
            epoch: self.packed.epoch,
            bytes: bytes.clone(),
        });
        Ok((bytes, version))
    }

    /// The content of `packed-refs` version `version` ([`Self::packed_refs_marked`]), if it
    /// is the last one shown or still kept with the few before it.
    pub fn packed_refs_version(&self, version: u64) -> Option<Arc<Vec<u8>>> {
        self.packed.shown.get(version)
    }

    /// The packed layout's unpackable refs of this generation, found by one pass (which
    /// renders `packed-refs` too) unless known.
    fn ensure_unpackable(&mut self, src: &mut dyn RefSource) -> R<()> {
        let generation = src.generation();
        if self
            .packed
            .unpackable
            .as_ref()
            .is_none_or(|u| u.generation != generation)
        {
            self.packed.rendered = None;
            self.packed_refs(src)?;
        }
        Ok(())
    }

    /// What `packed-refs` lists, sorted (see [`Self::visit_packed_entries`]).
    pub(super) fn packed_entries(&mut self, src: &mut dyn RefSource) -> R<Entries> {
        let mut out: Entries = Vec::new();
        self.visit_packed_entries(src, &mut |name, p, only| out.push((name.to_vec(), p, only)))?;
        Ok(out)
    }

    /// Calls `f` with what `packed-refs` lists, in name order (name, entry, whether the ref
    /// is packed only): the loose layout's entries; the packed layout's from one pass over
    /// the stack's refs below `refs/` merged with the pending values and the entries (which
    /// also finds the unpackable refs of this generation). Holds nothing per ref but the
    /// unpackable names.
    fn visit_packed_entries(
        &mut self,
        src: &mut dyn RefSource,
        f: &mut dyn FnMut(&[u8], Packed, bool),
    ) -> R<()> {
        if self.packed.layout == Layout::Loose {
            for (name, p) in &self.packed.refs {
                match p {
                    Packing::PackedOnly(p) => f(name, *p, true),
                    Packing::Loose(Some(p)) => f(name, *p, false),
                    Packing::Loose(None) => {}
                }
            }
            return Ok(());
        }
        let generation = src.generation();
        let mut unpackable = Vec::new();
        // Names not necessarily in the stack (pending creations), merged in order.
        let mut extra: Vec<&[u8]> = self
            .packed
            .refs
            .keys()
            .chain(self.pending.keys())
            .map(Vec::as_slice)
            .filter(|n| n.starts_with(b"refs/"))
            .collect();
        extra.sort_unstable();
        extra.dedup();
        let (pending, layer) = (&self.pending, &self.packed);
        let one = |name: &[u8],
                   stack: Option<&RefValue>,
                   out: &mut dyn FnMut(&[u8], Packed, bool),
                   un: &mut Vec<Vec<u8>>| {
            let v = match (pending.get(name), stack) {
                (Some(p), _) if matches!(p.value, RefValue::Deletion) => return,
                (Some(p), _) => &p.value,
                (None, Some(v)) => v,
                (None, None) => return,
            };
            match layer.packing(name, v) {
                Packing::PackedOnly(p) => {
                    // An entry another writer's value overtook shows that value.
                    let p = match Packed::of(v) {
                        Some(now) if now.id != p.id => now,
                        _ => p,
                    };
                    out(name, p, true);
                }
                Packing::Loose(Some(p)) => out(name, p, false),
                Packing::Loose(None) if !layer.refs.contains_key(name) => un.push(name.to_vec()),
                Packing::Loose(None) => {}
            }
        };
        let mut next = 0;
        src.scan_refs(b"refs/", &mut |rec, _key| {
            if !rec.name.starts_with(b"refs/") {
                return Step::Stop;
            }
            while let Some(x) = extra.get(next).filter(|x| **x < rec.name.as_slice()) {
                one(x, None, &mut *f, &mut unpackable);
                next += 1;
            }
            if extra.get(next).is_some_and(|x| *x == rec.name.as_slice()) {
                next += 1;
            }
            one(&rec.name, Some(&rec.value), &mut *f, &mut unpackable);
            Step::Next
        })
        .map_err(source_err)?;
        for x in extra.get(next..).unwrap_or_default() {
            one(x, None, &mut *f, &mut unpackable);
        }
        self.packed.unpackable = Some(Unpackable {
            generation,
            names: unpackable,
        });
        Ok(())
    }

    /// A new `packed-refs` (renamed over it, or written in place): its entries become the
    /// packed entries and the changes of effective values are staged — a packed-only ref
    /// it drops is deleted, one it changes takes the new value, a name it adds that does
    /// not exist is created; a loose ref only gets another shadowed entry. Content that
    /// does not parse (or names a bad ref) is kept and shown as written, the entries
    /// unchanged (`keep_packed_junk`). Validated first; on refusal nothing
    /// changes. `seen`: [`PackedLayer::external_changes`] when the
    /// writer took its lock (`packed-refs.lock`, or the in-place open): a name it would
    /// create is refused (`EBUSY`) if another writer changed the stack since, as that
    /// writer may have deleted it after this one read `packed-refs`.
    pub fn commit_packed_refs(
        &mut self,
        src: &mut dyn RefSource,
        who: &Caller,
        content: &[u8],
        seen: Option<u64>,
    ) -> R<()> {
        let parsed = match files::parse_packed_refs(content, self.hash) {
            Ok(p) => p,
            Err(e) => return self.keep_packed_junk(content, &e.to_string()),
        };
        if let Some(Err(e)) = parsed
            .iter()
            .map(|p| check_refname_format(&p.name, RefnameFlags::default()))
            .find(Result::is_err)
        {
            return self.keep_packed_junk(content, &e.to_string());
        }
        // Both lists are sorted by name, each name once (`parse_packed_refs` sorts and
        // refuses duplicates; `packed_entries` is in name order): one merge finds what
        // changes.
        let new: Vec<(Vec<u8>, Packed)> = parsed
            .into_iter()
            .map(|p| {
                let q = Packed {
                    id: p.id,
                    peeled: p.peeled,
                };
                (p.name, q)
            })
            .collect();
        let header = match content.first() {
            Some(b'#') => {
                let end = content
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(content.len(), |i| i + 1);
                content.get(..end).unwrap_or_default().to_vec()
            }
            _ => Vec::new(),
        };
        let mut current = self.packed_entries(src)?;
        if !current.windows(2).all(|w| w[0].0 < w[1].0) {
            // Not expected (`visit_packed_entries` goes in name order): the merge needs it.
            current.sort_by(|a, b| a.0.cmp(&b.0));
            current.dedup_by(|a, b| a.0 == b.0);
        }
        // What changes: (name, new packing, staged value); entries of `current` first,
        // then the names `content` adds, each in name order.
        let mut changes: Vec<(Vec<u8>, Option<Packing>, Option<RefValue>)> = Vec::new();
        let mut added: Vec<(&[u8], Packed)> = Vec::new();
        let (mut i, mut j) = (0, 0);
        loop {
            let order = match (current.get(i), new.get(j)) {
                (None, None) => break,
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (Some((a, _, _)), Some((b, _))) => a.cmp(b),
            };
            match (order, current.get(i), new.get(j)) {
                (std::cmp::Ordering::Less, Some((name, _, only)), _) => {
                    i += 1;
                    if *only {
                        changes.push((name.clone(), None, Some(RefValue::Deletion)));
                    } else {
                        changes.push((name.clone(), Some(Packing::Loose(None)), None));
                    }
                }
                (std::cmp::Ordering::Greater, _, Some((name, q))) => {
                    j += 1;
                    added.push((name, *q));
                }
                (_, Some((name, p, only)), Some((_, q))) => {
                    i += 1;
                    j += 1;
                    match only {
                        true if q.id != p.id => changes.push((
                            name.clone(),
                            Some(Packing::PackedOnly(*q)),
                            Some(q.value()),
                        )),
                        true if q != p => {
                            changes.push((name.clone(), Some(Packing::PackedOnly(*q)), None))
                        }
                        false if q != p => {
                            changes.push((name.clone(), Some(Packing::Loose(Some(*q))), None))
                        }
                        _ => {}
                    }
                }
                _ => break,
            }
        }
        // `added` is sorted: a name it also lists as a directory of another is found by
        // a binary search.
        let created = |dir: &[u8]| added.binary_search_by(|(n, _)| (*n).cmp(dir)).is_ok();
        for &(name, q) in &added {
            if self.effective(src, name)?.is_some() {
                changes.push((name.to_vec(), Some(Packing::Loose(Some(q))), None));
            } else {
                for dir in dir_prefixes(name) {
                    if created(dir) && self.effective(src, dir)?.is_none() {
                        return Err(Refusal::new(
                            libc::EINVAL,
                            format!(
                                "packed-refs lists both '{}' and '{}'",
                                String::from_utf8_lossy(dir),
                                String::from_utf8_lossy(name)
                            ),
                        ));
                    }
                }
                if seen.is_some_and(|s| s != self.packed.external) {
                    return Err(Refusal::new(
                        libc::EBUSY,
                        format!(
                            "packed-refs would create '{}', which does not exist: another \
                             writer changed the stack while packed-refs was locked (it may \
                             have deleted it); nothing was written",
                            String::from_utf8_lossy(name)
                        ),
                    ));
                }
                self.check_new_name(src, name)?;
                changes.push((name.to_vec(), Some(Packing::PackedOnly(q)), Some(q.value())));
            }
        }
        for (name, packing, value) in changes {
            if let Some(v) = &value {
                self.stage_value(src, who, &name, v.clone())?;
            }
            let now = self.effective(src, &name)?;
            match packing {
                Some(p) => self.packed.set(&name, now.as_ref(), p),
                None => {
                    self.packed.refs.remove(&name);
                }
            }
        }
        self.packed.header = (header != view::PACKED_REFS_HEADER).then_some(header);
        self.packed.present = true;
        if self.packed.junk.take().is_some() {
            self.packed.junk_revision += 1;
        }
        self.packed.epoch += 1;
        self.packed.revision += 1;
        Ok(())
    }

    /// A lock was taken on `packed-refs` (`packed-refs.lock` created): remember what the
    /// stack was, for [`Self::commit_packed_refs`].
    pub(super) fn note_packed_lock(&mut self) {
        self.packed.lock_seen = Some(self.packed.external);
    }

    /// [`PackedLayer::external_changes`] when `packed-refs.lock` was last taken.
    pub fn packed_lock_seen(&self) -> Option<u64> {
        self.packed.lock_seen
    }

    /// The stack moved from generation `from` to `to` by the mount's own batch: what
    /// `packed-refs` shows did not change (the batch's values were pending, and shown, until
    /// now), so its rendering and the unpackable refs carry over.
    pub fn packed_own_commit(&mut self, from: u64, to: u64) {
        let epoch = self.packed.epoch;
        if let Some(r) = self.packed.rendered.as_mut() {
            if r.generation == from && r.epoch == epoch {
                r.generation = to;
            }
        }
        if let Some(u) = self.packed.unpackable.as_mut() {
            if u.generation == from {
                u.generation = to;
            }
        }
    }

    /// After a reload by someone else: another writer changed the stack. An entry of a
    /// ref it deleted goes; a packed-only ref it changed shows as it wrote it — a loose
    /// file over the old entry in the loose layout, the packed-layout default there.
    pub fn revalidate_packed(&mut self, src: &mut dyn RefSource) {
        self.packed.external += 1;
        self.packed.epoch += 1;
        if self.packed.refs.is_empty() {
            return;
        }
        self.packed.revision += 1;
        let names: Vec<Vec<u8>> = self.packed.refs.keys().cloned().collect();
        for n in names {
            let Ok(now) = self.effective(src, &n) else {
                continue;
            };
            let Some(now) = now else {
                self.packed.refs.remove(&n);
                continue;
            };
            if let Some(Packing::PackedOnly(p)) = self.packed.refs.get(&n).copied() {
                if !same_object(Some(&now), &p.value()) {
                    self.packed.refs.remove(&n);
                    if self.packed.layout == Layout::Loose {
                        self.packed.set(&n, Some(&now), Packing::Loose(Some(p)));
                    }
                }
            }
        }
    }

    /// Edits of `names` were not written (a concurrent writer won): a packed-only value the
    /// mount staged for them is gone, the stack's shows (in the layout's default form).
    pub(super) fn packed_edits_lost(&mut self, names: &[Vec<u8>]) {
        for n in names {
            if let Some(Packing::PackedOnly(_)) = self.packed.refs.get(n) {
                self.packed.refs.remove(n);
            }
        }
        if !names.is_empty() {
            self.packed.epoch += 1;
            self.packed.revision += 1;
        }
    }
}

#[cfg(test)]
mod shown_tests {
    use super::*;

    /// A version changes exactly when the content does (the same bytes shown again share
    /// the first copy), and the last [`SHOWN_KEPT`] contents stay findable by version,
    /// fewer when they are large.
    #[test]
    fn a_version_per_content_and_the_last_few_kept() {
        let mut s = Shown::default();
        let a = Arc::new(b"a\n".to_vec());
        let (first, v1) = s.show(a.clone());
        assert_eq!(s.show(Arc::new(b"a\n".to_vec())), (first.clone(), v1));
        assert!(Arc::ptr_eq(&s.show(Arc::new(b"a\n".to_vec())).0, &a));
        let (_, v2) = s.show(Arc::new(b"b\n".to_vec()));
        assert_ne!(v1, v2);
        let (_, v3) = s.show(Arc::new(b"a\n".to_vec()));
        assert!(
            v3 != v1 && v3 != v2,
            "a content shown again after another: new"
        );
        assert_eq!(s.get(v1).as_deref(), Some(&b"a\n".to_vec()));
        for c in [b"c\n", b"d\n", b"e\n"] {
            s.show(Arc::new(c.to_vec()));
        }
        assert!(
            s.get(v1).is_none() && s.get(v2).is_none(),
            "only the last 4 kept"
        );
        assert!(s.get(v3).is_some());
        let big = |b: u8| Arc::new(vec![b; SHOWN_BYTES_MAX / 2 + 1]);
        let (_, b1) = s.show(big(1));
        let (_, b2) = s.show(big(2));
        assert!(
            s.get(b1).is_none(),
            "beyond the bytes kept besides the newest"
        );
        assert!(s.get(b2).is_some(), "the newest is always kept");
    }
}
