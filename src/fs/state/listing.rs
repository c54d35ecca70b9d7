//! Directory listings of a ref view: the stack's part from the cache (built by reseeking
//! and cached), then the write overlay; the root without what does not exist there.

use std::sync::Arc;

use crate::fs::error::FsError;
use crate::fs::record::log_error;
use crate::fs::view::{self, Kind, Listing};

use super::{top_index, Inner, DIR_CACHE_MAX_ENTRIES};

impl Inner {
    /// The listing of a directory: the stack part from the cache (or built now, by
    /// reseeking, and cached), then the write overlay.
    pub(super) fn listing(&mut self, path: &[u8]) -> Result<Arc<Listing>, FsError> {
        self.still(path, Kind::Dir)?;
        let listing = self.unchecked_listing(path)?;
        if !path.is_empty() || (!self.gone_tops.contains(&true) && self.packed_refs_exists()?) {
            return Ok(listing);
        }
        // The root without what `rmdir` removed (`refs`, `logs` while they are empty) and
        // without `packed-refs` while it does not exist (`protocol/packed_whole.rs`).
        let mut entries = listing.to_entries();
        let mut shown = Vec::with_capacity(entries.len());
        for e in entries.drain(..) {
            let may_be_gone = top_index(&e.name).is_some() || e.kind == Kind::PackedRefs;
            if may_be_gone && self.classify(&e.name)?.is_none() {
                continue;
            }
            shown.push(e);
        }
        Ok(Arc::new(Listing::from_entries(&shown)))
    }

    /// [`Inner::listing`] of a directory known to exist, as the stack and the overlay
    /// have it (`refs` and `logs` always exist there). In the packed layout a directory
    /// below `refs` lists its loose refs only, found without the stack's listing.
    pub(super) fn unchecked_listing(&mut self, path: &[u8]) -> Result<Arc<Listing>, FsError> {
        #[cfg(test)]
        {
            self.listings += 1;
        }
        let packed_layout = self.w.packed.layout() == crate::fs::protocol::Layout::Packed;
        let stack = match self.dirs.get(path) {
            _ if packed_layout && matches!(view::area(path), view::Area::Refs(_)) => {
                let mut out = Vec::new();
                let Inner { w, src, .. } = self;
                w.packed_layout_listing(src.as_mut(), path, &mut out)
                    .map_err(|r| self.rec.refuse("readdir", path, r))?;
                Arc::new(Listing::from_entries(&out))
            }
            Some(e) => e.clone(),
            None => {
                let mut out = Vec::new();
                view::list_dir(self.src.as_mut(), &mut self.scratch, path, &mut out).map_err(
                    |e| {
                        log_error("readdir", path, &e);
                        FsError::Storage(e)
                    },
                )?;
                let arc = Arc::new(Listing::from_entries(&out));
                if arc.len() <= DIR_CACHE_MAX_ENTRIES {
                    while self.dirs_entries + arc.len() > DIR_CACHE_MAX_ENTRIES {
                        match self.dirs.pop_lru() {
                            Some((_, old)) => self.dirs_entries -= old.len(),
                            None => break,
                        }
                    }
                    if let Some((_, old)) = self.dirs.push(path.to_vec(), arc.clone()) {
                        self.dirs_entries -= old.len();
                    }
                    self.dirs_entries += arc.len();
                }
                arc
            }
        };
        let mut prefix = path.to_vec();
        prefix.push(b'/');
        if self.w.is_idle() && !(path.starts_with(b"refs") && self.w.packed.hides_below(&prefix)) {
            return Ok(stack);
        }
        let mut out = Vec::new();
        let Inner {
            w, src, scratch, ..
        } = self;
        w.overlay_listing(src.as_mut(), scratch, path, &stack.to_entries(), &mut out)
            .map_err(|r| self.rec.refuse("readdir", path, r))?;
        self.broken_link_kinds(path, &mut out);
        Ok(Arc::new(Listing::from_entries(&out)))
    }
}
