//! The packed layer kept across mounts: [`STATE_FILE`] beside the stack, what it holds
//! (`PackedLayer::save`) and how it is read back and checked against the stack
//! (`WriteState::load_packed_state`). `packed.rs` has the layer itself.

use crate::format::ObjectId;
use crate::fs::source::RefSource;
use crate::fs::view;
use crate::refname::{check_refname_format, RefnameFlags};

use super::packed::*;
use super::*;

/// The file beside the stack (`GITDIR/reftablefs-packed`, never in `reftable/`, which git
/// 2.47 owns) that keeps the packed layer across unmount and mount: which refs are in
/// `packed-refs` only, which loose files shadow an entry, which are loose against the
/// layout, whether `packed-refs` exists, and the header of the last `packed-refs` written
/// (a `packed-refs` that does not parse is kept in [`super::JUNK_FILE`]). git never reads
/// it: the stack always holds every ref's effective value.
pub const STATE_FILE: &str = "reftablefs-packed";

/// The first line of [`STATE_FILE`].
const STATE_MAGIC: &[u8] = b"# reftablefs packed state 1\n";

impl PackedLayer {
    /// Changes with every change [`Self::save`] would write.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Whether there is nothing to save (the layout's default for every ref).
    pub fn is_default(&self) -> bool {
        self.refs.is_empty() && self.header.is_none() && !self.present
    }

    /// Appends the saved form of the layer to `out`: the magic line, `E` when
    /// `packed-refs` exists though it may have no entries (it was written and not
    /// unlinked since), `H <header>` when
    /// `packed-refs` was written with another first line, then one line per ref whose files
    /// differ from the layout's default, in name order: `P <id> <peeled|-> <name>` (in
    /// `packed-refs` only), `L <id> <peeled|-> <name>` (a loose file over that entry),
    /// `N <name>` (a loose file, no entry). Each line says what the ref is, whatever the
    /// layout: a mount with another layout reads it the same.
    pub fn save(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(STATE_MAGIC);
        if self.present {
            out.extend_from_slice(b"E\n");
        }
        if let Some(h) = &self.header {
            out.extend_from_slice(b"H ");
            out.extend_from_slice(h.strip_suffix(b"\n").unwrap_or(h));
            out.push(b'\n');
        }
        for (name, p) in &self.refs {
            let entry = match p {
                Packing::PackedOnly(e) => Some((b'P', e)),
                Packing::Loose(Some(e)) => Some((b'L', e)),
                Packing::Loose(None) => None,
            };
            match entry {
                Some((tag, e)) => {
                    out.push(tag);
                    out.push(b' ');
                    e.id.write_hex(out);
                    out.push(b' ');
                    match &e.peeled {
                        Some(p) => p.write_hex(out),
                        None => out.push(b'-'),
                    }
                }
                None => out.push(b'N'),
            }
            out.push(b' ');
            out.extend_from_slice(name);
            out.push(b'\n');
        }
    }
}

/// One line of [`STATE_FILE`]: the name and what it is (`None`: not a valid line).
fn parse_state_line(line: &[u8], hash: crate::format::HashKind) -> Option<(Vec<u8>, Packing)> {
    let (tag, rest) = (line.first()?, line.get(2..)?);
    if line.get(1) != Some(&b' ') {
        return None;
    }
    if *tag == b'N' {
        return Some((rest.to_vec(), Packing::Loose(None)));
    }
    let mut parts = rest.splitn(3, |&b| b == b' ');
    let id = ObjectId::from_hex(parts.next()?, hash)?;
    let peeled = match parts.next()? {
        b"-" => None,
        p => Some(ObjectId::from_hex(p, hash)?),
    };
    let name = parts.next()?.to_vec();
    let e = Packed { id, peeled };
    match tag {
        b'P' => Some((name, Packing::PackedOnly(e))),
        b'L' => Some((name, Packing::Loose(Some(e)))),
        _ => None,
    }
}

impl WriteState {
    /// Takes the packed layer saved in [`STATE_FILE`] (`content`; see
    /// [`PackedLayer::save`]), then checks it against the stack as after another writer's
    /// change (git may have written while nothing was mounted). A line that does not parse
    /// or names an invalid ref is skipped; the layout is the mount's. Returns the number of
    /// refs taken.
    pub fn load_packed_state(&mut self, src: &mut dyn RefSource, content: &[u8]) -> usize {
        let Some(body) = content.strip_prefix(STATE_MAGIC) else {
            return 0;
        };
        let mut taken = 0;
        for line in body.split(|&b| b == b'\n') {
            if line == b"E" {
                self.packed.present = true;
                continue;
            }
            if let Some(h) = line.strip_prefix(b"H ") {
                // A header is a line of `#…` or nothing (a `packed-refs` without one).
                let mut h = h.to_vec();
                if !h.is_empty() {
                    h.push(b'\n');
                }
                self.packed.header = (h != view::PACKED_REFS_HEADER).then_some(h);
                // Written with its own first line: it existed (a state saved before `E`).
                self.packed.present = true;
                continue;
            }
            let Some((name, packing)) = parse_state_line(line, self.hash) else {
                continue;
            };
            if check_refname_format(&name, RefnameFlags::default()).is_err() {
                continue;
            }
            let now = self.effective(src, &name).ok().flatten();
            match now {
                Some(v) => self.packed.set(&name, Some(&v), packing),
                // Gone meanwhile: what it was is dropped by the check below.
                None => {
                    self.packed.refs.insert(name, packing);
                }
            }
            taken += 1;
        }
        self.revalidate_packed(src);
        self.packed.revision += 1;
        taken
    }
}
