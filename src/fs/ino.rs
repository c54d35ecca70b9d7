//! The mount's inode number space, in one place: which numbers belong to which tree under
//! the mount, and how a ref view's own numbers map to the mount's.
//!
//! | numbers | tree | owner of the numbers inside |
//! | --- | --- | --- |
//! | [`ROOT`] (1) | the mount's root, the main ref view's root | — |
//! | [`STATUS_DIR`], [`STATUS_FILE`] (2, 3) | `.reftablefs/` and its `status` file | `status.rs` |
//! | 4 ..= [`REF_INO_MAX`] (48 bits) | the main ref view: `HEAD`, `refs/`, `logs/`, `packed-refs` | `inode.rs` (a hash of the path, kind and size) |
//! | [`WT_BIT`] \| slot << [`SLOT_SHIFT`] \| a view's number | a linked worktree's ref view (its root is the passed-through `worktrees/<id>`) | `worktree.rs` (slots), [`Map`] |
//! | [`PASS_BIT`] \| n | everything else of the git directory, passed through | `passthrough.rs` |
//!
//! [`space_of`] tells a number's tree; the router (`fuse.rs`) sends each request there.

/// The root directory's inode number (FUSE's fixed `1`).
pub const ROOT: u64 = 1;
/// `.reftablefs/`, the status directory.
pub const STATUS_DIR: u64 = 2;
/// `.reftablefs/status`.
pub const STATUS_FILE: u64 = 3;
/// The smallest number a ref view's node gets: above the status directory's and file's,
/// which a hash landing on 2 or 3 took before (such a ref was answered by the status
/// node).
pub const FIRST_REF: u64 = 4;
/// The largest number of a ref view's node (48 bits).
pub const REF_INO_MAX: u64 = (1 << 48) - 1;
/// Set in every number of a linked worktree's ref view.
pub const WT_BIT: u64 = 1 << 62;
/// A worktree's slot sits above its view's own numbers.
pub const SLOT_SHIFT: u32 = 48;
/// How many worktrees one mount serves at most (slots are not reused while mounted).
pub const SLOTS_MAX: usize = 1 << (62 - SLOT_SHIFT);
/// Set in every passed-through node's number.
pub const PASS_BIT: u64 = 1 << 63;

const _: () = assert!(REF_INO_MAX < 1 << SLOT_SHIFT);

/// The tree a number belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Space {
    /// The status directory or file.
    Status,
    /// The passed-through rest of the git directory.
    Pass,
    /// The ref view of the linked worktree in this slot.
    Worktree(usize),
    /// The main ref view (the root included).
    Main,
}

/// The tree `ino` belongs to.
pub fn space_of(ino: u64) -> Space {
    if ino & PASS_BIT != 0 {
        Space::Pass
    } else if ino & WT_BIT != 0 {
        Space::Worktree(slot_of(ino))
    } else if ino == STATUS_DIR || ino == STATUS_FILE {
        Space::Status
    } else {
        Space::Main
    }
}

/// Whether `ino` is a passed-through node.
pub fn is_pass(ino: u64) -> bool {
    space_of(ino) == Space::Pass
}

/// Whether `ino` belongs to a linked worktree's ref view.
pub fn is_worktree(ino: u64) -> bool {
    matches!(space_of(ino), Space::Worktree(_))
}

/// Whether `ino` is the status directory or its file.
pub fn is_status(ino: u64) -> bool {
    space_of(ino) == Space::Status
}

/// The name of the status directory at the root of the mount.
pub const STATUS_DIR_NAME: &[u8] = b".reftablefs";

/// Whether `parent/name` is the status directory or lies in it.
pub fn is_status_name(parent: u64, name: &[u8]) -> bool {
    (parent == ROOT && name == STATUS_DIR_NAME) || parent == STATUS_DIR
}

/// The worktree slot of a [`WT_BIT`] number.
pub fn slot_of(ino: u64) -> usize {
    usize::try_from((ino & !WT_BIT) >> SLOT_SHIFT).unwrap_or(usize::MAX)
}

/// A ref view's number for the 64-bit hash `h` of a node: within the view's 48 bits,
/// never one of the fixed numbers below [`FIRST_REF`].
pub fn ref_ino(h: u64) -> u64 {
    (h & REF_INO_MAX).max(FIRST_REF)
}

/// The next number to probe after `ino` collided (within the view's numbers).
pub fn next_ref_ino(ino: u64) -> u64 {
    ref_ino(ino.wrapping_add(1))
}

/// A passed-through node's number for the counter or real inode number `n`.
pub fn pass_ino(n: u64) -> u64 {
    PASS_BIT | (n & !PASS_BIT)
}

/// How a ref view's inode numbers map to the mount's: the identity for the main view; for
/// a worktree, its slot above the view's numbers and its root at the worktree directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Map {
    slot: Option<u64>,
    /// The mount's inode of `worktrees/<id>` (passed through).
    dir: u64,
}

impl Map {
    /// The main view's (identity) map.
    pub const MAIN: Map = Map { slot: None, dir: 0 };

    /// The map of the worktree view in `slot`, whose root is the mount's `dir`.
    pub fn worktree(slot: u64, dir: u64) -> Map {
        Map {
            slot: Some(slot),
            dir,
        }
    }

    /// The mount's inode number → the view's.
    pub fn inn(&self, ino: u64) -> u64 {
        match self.slot {
            None => ino,
            Some(_) if ino == self.dir => ROOT,
            Some(_) => ino & REF_INO_MAX,
        }
    }

    /// Whether `other` maps the same view.
    pub fn same_view(&self, other: &Map) -> bool {
        self.slot == other.slot
    }

    /// The view's inode number → the mount's.
    pub fn out(&self, ino: u64) -> u64 {
        match self.slot {
            None => ino,
            Some(_) if ino == ROOT => self.dir,
            Some(s) => WT_BIT | s << SLOT_SHIFT | (ino & REF_INO_MAX),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_number_has_one_tree() {
        assert_eq!(space_of(ROOT), Space::Main);
        assert_eq!(space_of(STATUS_DIR), Space::Status);
        assert_eq!(space_of(STATUS_FILE), Space::Status);
        for h in [0, 1, 2, 3, 1 << 48, (1 << 48) | 3] {
            assert_eq!(space_of(ref_ino(h)), Space::Main, "hash {h:#x}");
        }
        assert_eq!(space_of(pass_ino(7)), Space::Pass);
        assert_eq!(space_of(pass_ino(u64::MAX)), Space::Pass);
        let m = Map::worktree(3, pass_ino(17));
        for inner in [FIRST_REF, 99, REF_INO_MAX] {
            let o = m.out(inner);
            assert_eq!(space_of(o), Space::Worktree(3));
            assert_eq!(m.inn(o), inner);
        }
        assert_eq!(m.out(ROOT), pass_ino(17));
        assert_eq!(m.inn(pass_ino(17)), ROOT);
        assert_eq!(space_of(PASS_BIT | WT_BIT | 5), Space::Pass);
        assert_eq!(Map::MAIN.out(42), 42);
    }
}
