//! The packed layer: what a files-backend git last wrote into `packed-refs` through the
//! mount (a ref's effective value is loose ?? packed, and the stack holds effective
//! values), its rendering, a new `packed-refs` renamed over it, and what another writer
//! on the stack makes of it.

use std::collections::BTreeMap;

use crate::files::{self};
use crate::format::{ObjectId, RefValue};
use crate::fs::error::Refusal;
use crate::fs::source::RefSource;
use crate::fs::view::{self};
use crate::refname::{check_refname_format, RefnameFlags};

use super::*;

/// A packed-layer entry.
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
}

impl WriteState {
    /// Renders `packed-refs`: the header and the packed layer.
    pub fn render_packed(&self, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(view::PACKED_REFS_HEADER);
        for (name, p) in &self.packed {
            files::render_packed_ref(name, &p.id, p.peeled.as_ref(), out);
        }
    }

    /// A new `packed-refs` (renamed over it): the packed layer becomes its content, and
    /// only changes of effective values (refs with no loose file) are committed.
    pub fn commit_packed_refs(
        &mut self,
        src: &mut dyn RefSource,
        who: &Caller,
        content: &[u8],
    ) -> R<()> {
        let parsed = files::parse_packed_refs(content, self.hash)
            .map_err(|e| Refusal::new(libc::EINVAL, format!("packed-refs: {e}")))?;
        let mut new: BTreeMap<Vec<u8>, Packed> = BTreeMap::new();
        for p in parsed {
            check_refname_format(&p.name, RefnameFlags::default())
                .map_err(|e| Refusal::new(libc::EINVAL, format!("packed-refs: {e}")))?;
            new.insert(
                p.name,
                Packed {
                    id: p.id,
                    peeled: p.peeled,
                },
            );
        }
        // Every existing ref has a loose file that shadows its packed value, so only a
        // name that does not exist yet changes its effective value (it is created).
        let mut created: Vec<(Vec<u8>, RefValue)> = Vec::new();
        for (name, p) in &new {
            if self.effective(src, name)?.is_none() {
                created.push((name.clone(), p.value()));
            }
        }
        for (name, v) in created {
            self.commit_ref(src, who, &name, v)?;
        }
        self.packed = new;
        Ok(())
    }

    /// After a reload by someone else: forget packed-layer entries the stack no longer
    /// agrees with (they would resurface on `rm`).
    pub fn revalidate_packed(&mut self, src: &mut dyn RefSource) {
        if self.packed.is_empty() {
            return;
        }
        let names: Vec<Vec<u8>> = self.packed.keys().cloned().collect();
        for n in names {
            let keep = match (self.effective(src, &n), self.packed.get(&n)) {
                (Ok(have), Some(p)) => same_object(have.as_ref(), &p.value()),
                _ => false,
            };
            if !keep {
                self.packed.remove(&n);
            }
        }
    }
}
