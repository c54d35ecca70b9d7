//! Stable inode numbers for the life of the mount (and beyond): an inode number is a hash
//! of the path and its kind, so the same ref always gets the same number and a name that
//! flips between file and directory gets a new one (the kernel never sees a node change
//! type). The table remembers only the nodes the kernel holds (lookup count > 0), each as
//! (parent, last component), and forgets them when the kernel does.

use std::collections::{HashMap, VecDeque};

use crate::fs::view::Kind;

/// How a ref file is opened for reading (see `docs/fuse.md`, "Caching and freshness").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// The kernel's cached pages (if any) hold exactly this content: keep them
    /// (`FOPEN_KEEP_CACHE`).
    Cached,
    /// The kernel drops the inode's pages at this open and refills them from this handle.
    Refill,
    /// Bypass the page cache (`FOPEN_DIRECT_IO`): reads are not capped at the size the
    /// kernel holds for the inode.
    Direct,
}

use crate::fs::ino::{next_ref_ino, ref_ino, ROOT};

/// A node the kernel knows about: 64 bytes, its name inline when it is short (the last
/// component of most ref names is; `tests::a_node_is_64_bytes`).
#[derive(Debug)]
struct Node {
    parent: u64,
    nlookup: u64,
    /// Its place in the eviction queue: the queue entry carrying this number is the
    /// node's own (older entries of a forgotten and re-learnt number are skipped).
    seq: u64,
    /// Fingerprint of the content the kernel's pages of this inode may hold (valid when
    /// `has_pages`); for a `packed-refs` inode, the version of the one content it shows
    /// (see [`Inodes::remember_version`]).
    pages: u64,
    /// A ref file's inode has one size for its whole life (its number is a hash of path,
    /// kind and size): the kernel's cached size can never be stale, so its content may go
    /// through the page cache. [`NO_SIZE`]: size not fixed (not a ref file, a file
    /// renamed or written through the kernel): attributes TTL 0, reads direct-IO.
    size: u32,
    kind: Kind,
    has_pages: bool,
    /// Taken off its name ([`Inodes::detach`]): no lookup, rename or eviction finds it by
    /// name any more.
    detached: bool,
    name: Name,
}

/// The name of a scratch node taken off its name ([`Inodes::unlinked`]): a NUL, which no
/// file name holds, so its path leads nowhere.
const DETACHED: &[u8] = b"\0";

/// `Node::size` of a node whose size is not fixed.
const NO_SIZE: u32 = u32::MAX;

/// A fixed size as stored in a node (a size that does not fit is not fixed: such a node
/// is served direct-IO, the safe side; ref files of fixed size are at most a page).
fn stored_size(size: Option<u64>) -> u32 {
    size.and_then(|s| u32::try_from(s).ok())
        .filter(|&s| s != NO_SIZE)
        .unwrap_or(NO_SIZE)
}

impl Node {
    /// Whether the node is known as `parent/name` of `kind` (and not taken off it).
    fn is_at(&self, parent: u64, name: &[u8], kind: Kind) -> bool {
        self.parent == parent && !self.detached && *self.name == *name && self.kind == kind
    }
    fn size(&self) -> Option<u64> {
        (self.size != NO_SIZE).then_some(u64::from(self.size))
    }
    fn pages(&self) -> Option<u64> {
        (self.has_pages && self.kind != Kind::PackedRefs).then_some(self.pages)
    }
    fn version(&self) -> Option<u64> {
        (self.has_pages && self.kind == Kind::PackedRefs).then_some(self.pages)
    }
    fn set_pages(&mut self, fp: Option<u64>) {
        self.has_pages = fp.is_some();
        self.pages = fp.unwrap_or(0);
    }
}

/// Bytes of a name kept inside the node.
const SHORT_NAME: usize = 22;

/// A path component: inline up to [`SHORT_NAME`] bytes, on the heap beyond (24 bytes
/// either way, where a `Box<[u8]>` costs 16 plus an allocation of at least 32).
#[derive(Debug, Clone)]
enum Name {
    Short { len: u8, bytes: [u8; SHORT_NAME] },
    Long(Box<[u8]>),
}

impl Name {
    fn new(name: &[u8]) -> Name {
        match u8::try_from(name.len()) {
            Ok(len) if name.len() <= SHORT_NAME => {
                let mut bytes = [0u8; SHORT_NAME];
                bytes.iter_mut().zip(name).for_each(|(slot, &b)| *slot = b);
                Name::Short { len, bytes }
            }
            _ => Name::Long(name.into()),
        }
    }
}

impl std::ops::Deref for Name {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Name::Short { len, bytes } => bytes.get(..usize::from(*len)).unwrap_or_default(),
            Name::Long(b) => b,
        }
    }
}

/// Hashes inode numbers (themselves hashes of a path) with one multiplication, which
/// also fills the top bits the map's probing looks at (a 48-bit number leaves them 0).
#[derive(Default, Clone, Copy)]
struct InoHasher(u64);

impl std::hash::Hasher for InoHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type InoMap<V> = HashMap<u64, V, std::hash::BuildHasherDefault<InoHasher>>;

/// The known nodes: inode number -> slot in a slab of nodes, so that the map's entries
/// are 16 bytes. The map is sized once for twice the nodes it may hold: a hash map whose
/// inserts and removes leave tombstones rehashes in place only while at most half its
/// capacity is live, and doubles otherwise (a map of whole 64-byte nodes doubled from
/// 19 to 38 MB in the middle of a 1M-name walk that way, with its live nodes under the
/// cap all along).
#[derive(Debug)]
struct NodeTable {
    slots: InoMap<usize>,
    nodes: Vec<Option<Node>>,
    free: Vec<usize>,
}

impl NodeTable {
    /// A table for `cap` known nodes plus the names on their way out (up to 1/6 more).
    /// Reserved up front only up to the default cap: a larger cap (`--inode-cap`) is
    /// reached by the map's ordinary growth, not paid for at mount time.
    fn for_cap(cap: usize) -> NodeTable {
        let cap = cap.min(INODE_CAP);
        let most = cap.saturating_add(cap / 6);
        NodeTable {
            slots: InoMap::with_capacity_and_hasher(most.saturating_mul(2), Default::default()),
            // Reserved once too (untouched pages cost nothing): no copy when it grows.
            nodes: Vec::with_capacity(most),
            free: Vec::new(),
        }
    }
    fn get(&self, ino: &u64) -> Option<&Node> {
        self.nodes.get(*self.slots.get(ino)?)?.as_ref()
    }
    fn get_mut(&mut self, ino: &u64) -> Option<&mut Node> {
        self.nodes.get_mut(*self.slots.get(ino)?)?.as_mut()
    }
    fn insert(&mut self, ino: u64, node: Node) {
        if let Some(slot) = self.slots.get(&ino).and_then(|&s| self.nodes.get_mut(s)) {
            *slot = Some(node);
            return;
        }
        let slot = match self.free.pop() {
            Some(s) => {
                if let Some(place) = self.nodes.get_mut(s) {
                    *place = Some(node);
                }
                s
            }
            None => {
                self.nodes.push(Some(node));
                self.nodes.len() - 1
            }
        };
        self.slots.insert(ino, slot);
    }
    fn remove(&mut self, ino: &u64) -> Option<Node> {
        let slot = self.slots.remove(ino)?;
        let node = self.nodes.get_mut(slot)?.take();
        self.free.push(slot);
        node
    }
    fn len(&self) -> usize {
        self.slots.len()
    }
    fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
    fn iter(&self) -> impl Iterator<Item = (&u64, &Node)> + '_ {
        self.slots
            .iter()
            .filter_map(|(ino, &s)| Some((ino, self.nodes.get(s)?.as_ref()?)))
    }
}

/// What a name last showed as its time: `shown` (nanoseconds since the epoch) while its
/// content had the mark `mark` (a hash of its size and content, with [`NO_OWN_TIME`] set
/// when the file had no time of its own; 0 for a directory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub mark: u64,
    pub shown: u64,
}

/// The bit of [`Stamp::mark`] saying the time shown was not the reflog's own (it had
/// none: created and not yet written to).
pub const NO_OWN_TIME: u64 = 2;

/// The times names showed (see `state::Inner::mtime_of`), so that a time never goes back
/// and moves when the content does: per name (path and kind, [`time_key`]), in two
/// generations of at most half the inode cap each. A name used again moves to the newer
/// one; when the newer one is full it becomes the older one and the older one is dropped,
/// so the names used least recently are forgotten first, and at most the cap is kept
/// (about 24 bytes each, plus the maps' slack: ~5 MB at the default cap).
#[derive(Debug, Default)]
pub struct Times {
    new: InoMap<Stamp>,
    old: InoMap<Stamp>,
    cap: usize,
}

impl Times {
    fn with_cap(cap: usize) -> Times {
        Times {
            cap,
            ..Default::default()
        }
    }

    /// The stamp of `key`, if it is remembered.
    pub fn get(&mut self, key: u64) -> Option<Stamp> {
        if let Some(s) = self.new.get(&key) {
            return Some(*s);
        }
        let s = self.old.remove(&key)?;
        self.put(key, s);
        Some(s)
    }

    /// Remembers `key`'s stamp.
    pub fn put(&mut self, key: u64, stamp: Stamp) {
        if self.new.len() >= (self.cap / 2).max(1) && !self.new.contains_key(&key) {
            self.old = std::mem::take(&mut self.new);
            self.old.remove(&key);
        }
        self.new.insert(key, stamp);
    }

    /// Names remembered.
    pub fn len(&self) -> usize {
        self.new.len() + self.old.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The key of `path` of `kind` in [`Times`]: 64-bit FNV-1a over both (a ref file's key
/// does not depend on its size, unlike its inode number).
pub fn time_key(path: &[u8], kind: Kind) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in path.iter().chain(std::iter::once(&(kind as u8))) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The inode table.
#[derive(Debug)]
pub struct Inodes {
    /// The times names showed (per name, bounded by the cap like the nodes).
    pub times: Times,
    nodes: NodeTable,
    /// Nodes the kernel made at their name (a scratch file's `create`) or moved there (a
    /// rename; their number is the hash of an older path), while they are there:
    /// (parent, name) -> inode. Small: scratch files and renamed nodes still known.
    bound: HashMap<(u64, Box<[u8]>), u64>,
    /// Known nodes in the order the kernel learnt them, oldest first: (inode, seq). The
    /// first ones are those the watcher asks the kernel to drop when the table is above
    /// its cap ([`Inodes::evictable_over_cap`]). Kept at most [`queue_bound`] long (the entries of
    /// forgotten nodes are dropped then: amortised, four insertions pay for one pass).
    order: VecDeque<(u64, u64)>,
    next_seq: u64,
    /// Known nodes taken off the queue (the kernel was asked to drop them) that it has
    /// not forgotten yet.
    asked: usize,
    /// Above this many known nodes the oldest are dropped ([`Inodes::evictable_over_cap`]).
    cap: usize,
}

impl Default for Inodes {
    fn default() -> Self {
        Inodes {
            times: Times::with_cap(INODE_CAP),
            nodes: NodeTable::for_cap(INODE_CAP),
            bound: HashMap::new(),
            order: VecDeque::new(),
            next_seq: 0,
            asked: 0,
            cap: INODE_CAP,
        }
    }
}

/// The default cap (`mount --inode-cap`): above this many known nodes the watcher asks
/// the kernel to drop its oldest entries (`inval_entry`), so that it forgets them: the
/// table stays bounded however many files a walk stats (the kernel itself keeps dentries
/// until memory pressure). A dropped name costs one lookup when it is used again; its
/// inode number is the same (a hash of the path).
///
/// At 131,072 (a walk of 100k loose refs with their directories stays within it) the
/// table costs about 9 MB of map (2^19 buckets of 16 bytes, sized once: `NodeTable`),
/// 10 MB of nodes and 4 MB of eviction queue: ~175 bytes a name at the cap.
pub const INODE_CAP: usize = 131_072;

/// How long the eviction queue may grow for `nodes` known nodes before the entries of
/// forgotten ones are dropped.
fn queue_bound(nodes: usize) -> usize {
    nodes + nodes / 4 + 1024
}

/// The smallest cap [`Inodes::set_cap`] takes.
pub const MIN_CAP: usize = 1024;

/// `Node::seq` of a node taken off the eviction queue (re-queued by its next lookup).
const UNQUEUED: u64 = u64::MAX;

/// FNV-1a over the path and the kind, never 0 or 1.
pub fn ino_of(path: &[u8], kind: Kind) -> u64 {
    ino_of_sized(path, kind, None)
}

/// FNV-1a over the path, the kind and (for a ref file of fixed size) the size, never 0
/// or 1, within a view's numbers (`ino.rs`).
pub fn ino_of_sized(path: &[u8], kind: Kind, size: Option<u64>) -> u64 {
    ino_of_content(path, kind, size, None)
}

/// [`ino_of_sized`], and the version of the content (a `packed-refs` inode).
fn ino_of_content(path: &[u8], kind: Kind, size: Option<u64>, version: Option<u64>) -> u64 {
    if path.is_empty() {
        return ROOT;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let size_bytes = size.map(u64::to_le_bytes);
    let version_bytes = version.map(u64::to_le_bytes);
    let tail = size_bytes.as_ref().map_or(&[][..], |b| &b[..]);
    let tail2 = version_bytes.as_ref().map_or(&[][..], |b| &b[..]);
    for &b in path
        .iter()
        .chain(std::iter::once(&(kind as u8)))
        .chain(tail)
        .chain(tail2)
    {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    ref_ino(h)
}

impl Inodes {
    /// An empty table (the root is implicit).
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one kernel lookup of `parent/name` (whose full path is `path`) and returns
    /// its inode number. `size`: the fixed size of a ref file's inode (see the `Node` type).
    pub fn remember(
        &mut self,
        parent: u64,
        name: &[u8],
        path: &[u8],
        kind: Kind,
        size: Option<u64>,
    ) -> u64 {
        self.remember_as(parent, name, path, kind, size, None)
    }

    /// [`Inodes::remember`] for `packed-refs` showing the content of version `version`,
    /// `len` bytes: an inode of that one content for its whole life (its number hashes
    /// the version too), as a `packed-refs` renamed over the old one on a disk is a new
    /// inode. Its size never changes, and the kernel's pages of it only ever hold that
    /// content: never pages of two contents mixed, whoever fills them and when.
    pub fn remember_version(
        &mut self,
        parent: u64,
        name: &[u8],
        path: &[u8],
        len: u64,
        version: u64,
    ) -> u64 {
        let kind = Kind::PackedRefs;
        self.remember_as(parent, name, path, kind, Some(len), Some(version))
    }

    fn remember_as(
        &mut self,
        parent: u64,
        name: &[u8],
        path: &[u8],
        kind: Kind,
        size: Option<u64>,
        version: Option<u64>,
    ) -> u64 {
        if path.is_empty() {
            return ROOT;
        }
        if kind == Kind::Scratch {
            // The scratch file the kernel made or moved here, not an unlinked one of the
            // same name that it may still hold.
            if let Some(ino) = self.bound_at(parent, name, kind) {
                self.looked_up_again(ino);
                return ino;
            }
        }
        let mut ino = ino_of_content(path, kind, size, version);
        loop {
            match self.nodes.get_mut(&ino) {
                None => {
                    self.insert_new(ino, parent, name, kind, size, version);
                    return ino;
                }
                // A `packed-refs` inode is found by its version alone: one opened for
                // writing (its size then not fixed) stays the one every open finds until
                // what is written changes the content, as on a disk (go-git `flock`s it).
                Some(n)
                    if n.is_at(parent, name, kind)
                        && n.version() == version
                        && (version.is_some() || n.size == stored_size(size)) =>
                {
                    self.looked_up_again(ino);
                    return ino;
                }
                // A 64-bit hash collision: probe (stable as long as the colliding node lives).
                Some(_) => ino = next_ref_ino(ino),
            }
        }
    }

    /// A new node `ino` (a number no known node has).
    fn insert_new(
        &mut self,
        ino: u64,
        parent: u64,
        name: &[u8],
        kind: Kind,
        size: Option<u64>,
        version: Option<u64>,
    ) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.nodes.insert(
            ino,
            Node {
                parent,
                nlookup: 1,
                seq,
                pages: version.unwrap_or(0),
                size: stored_size(size),
                kind,
                has_pages: version.is_some(),
                detached: false,
                name: Name::new(name),
            },
        );
        self.order.push_back((ino, seq));
        if self.order.len() > queue_bound(self.nodes.len()) {
            // Drop the entries of forgotten nodes (each live node has one).
            let nodes = &self.nodes;
            self.order
                .retain(|(i, s)| nodes.get(i).is_some_and(|n| n.seq == *s));
        }
    }

    /// One more kernel lookup of the known node `ino`.
    fn looked_up_again(&mut self, ino: u64) {
        let Some(n) = self.nodes.get_mut(&ino) else {
            return;
        };
        n.nlookup += 1;
        if n.seq == UNQUEUED {
            // Learnt again after the watcher asked the kernel to drop it.
            self.asked -= 1;
            n.seq = self.next_seq;
            self.next_seq += 1;
            self.order.push_back((ino, n.seq));
        }
    }

    /// The node bound at `parent/name` (made or moved there by the kernel) if it is of
    /// `kind`.
    fn bound_at(&self, parent: u64, name: &[u8], kind: Kind) -> Option<u64> {
        let ino = *self.bound.get(&(parent, Box::from(name)))?;
        let n = self.nodes.get(&ino)?;
        n.is_at(parent, name, kind).then_some(ino)
    }

    /// Records the kernel's `create` of `parent/name` (path `path`), a name that did not
    /// exist. A scratch file gets a number no known node has, bound to its name: a known
    /// node of that name is an unlinked file whose inode the kernel may still hold (an
    /// open descriptor, a FORGET on its way), and on a disk a new file is never that
    /// inode. The kernel taking the two for one inode showed a ref renamed from a lock
    /// as the next, empty lock (issue 26's lock-name cache, reverted in 6200129). Other
    /// kinds as [`Inodes::remember`].
    pub fn created(&mut self, parent: u64, name: &[u8], path: &[u8], kind: Kind) -> u64 {
        if kind != Kind::Scratch || path.is_empty() {
            return self.remember(parent, name, path, kind, None);
        }
        let mut ino = ino_of(path, kind);
        while self.nodes.get(&ino).is_some() {
            ino = next_ref_ino(ino);
        }
        self.insert_new(ino, parent, name, kind, None, None);
        if let Some(old) = self.bound.insert((parent, Box::from(name)), ino) {
            // Still bound there: no longer (the kernel made a new file at the name).
            self.detach(old, parent, name);
        }
        ino
    }

    /// Records the kernel's `unlink` of the scratch file `parent/name`: its node, if
    /// known, keeps living until the kernel forgets it, under no name (no lookup or
    /// create of the name finds it again).
    pub fn unlinked(&mut self, parent: u64, name: &[u8]) {
        if let Some(ino) = self.bound.remove(&(parent, Box::from(name))) {
            self.detach(ino, parent, name);
        }
    }

    /// Takes `ino`, if still known as `parent/name`, off that name: no lookup of the name
    /// finds it again. A scratch file (an unlinked lock) leads nowhere. A file renamed
    /// onto a ref's name and replaced there by the next rename keeps its path: the kernel
    /// may still send an `open` or `stat` to it (a lock's name is cached, and the dentry
    /// moved at the rename keeps that), and on a disk that finds the replaced file, never
    /// `ENOENT`; here it gets what the name holds now. Answering `ENOENT` there made a CAS
    /// client count a landed increment as failed (`write_path::cas_increments_never_lost`).
    fn detach(&mut self, ino: u64, parent: u64, name: &[u8]) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            if n.parent == parent && !n.detached && *n.name == *name {
                n.detached = true;
                if n.kind == Kind::Scratch {
                    n.name = Name::new(DETACHED);
                }
            }
        }
    }

    /// Follows a rename the kernel made: the node known as `parent/name` (path `from`,
    /// `kind`) is now `newparent/newname` of `new_kind`.
    #[allow(clippy::too_many_arguments)]
    pub fn moved(
        &mut self,
        parent: u64,
        name: &[u8],
        from: &[u8],
        kind: Kind,
        newparent: u64,
        newname: &[u8],
        new_kind: Kind,
    ) {
        let mut found = None;
        if let Some(&ino) = self.bound.get(&(parent, Box::from(name))) {
            found = Some(ino);
        } else {
            let mut ino = ino_of(from, kind);
            for _ in 0..64 {
                match self.nodes.get(&ino) {
                    Some(n) if n.is_at(parent, name, kind) => {
                        found = Some(ino);
                        break;
                    }
                    Some(_) => ino = next_ref_ino(ino),
                    None => break,
                }
            }
        }
        if found.is_none() {
            // A ref file's number also hashes its size: find it by name (renaming a ref
            // file itself, not its lock, is rare).
            found = self
                .nodes
                .iter()
                .find(|(_, n)| n.is_at(parent, name, kind))
                .map(|(&ino, _)| ino);
        }
        let Some(ino) = found else { return };
        self.bound.remove(&(parent, Box::from(name)));
        // The file the kernel had at the new name is replaced: unlinked, as by `unlink`.
        if let Some(old) = self.bound.remove(&(newparent, Box::from(newname))) {
            if old != ino {
                self.detach(old, newparent, newname);
            }
        }
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.parent = newparent;
            n.name = Name::new(newname);
            n.kind = new_kind;
            // The kernel's size for it came from writes, not from us.
            n.size = NO_SIZE;
            n.set_pages(None);
            self.bound.insert((newparent, Box::from(newname)), ino);
        }
    }

    /// The known directory node at `path`, if the kernel holds one: (inode, parent).
    pub fn known_dir(&self, path: &[u8]) -> Option<(u64, u64)> {
        let mut ino = ino_of(path, Kind::Dir);
        let mut buf = Vec::new();
        for _ in 0..64 {
            let n = self.nodes.get(&ino)?;
            if n.kind == Kind::Dir && self.path(ino, &mut buf).is_some() && buf == path {
                return Some((ino, n.parent));
            }
            ino = next_ref_ino(ino);
        }
        None
    }

    /// The version of the content `ino` shows, for a `packed-refs` inode made by
    /// [`Inodes::remember_version`] and not renamed since (one written or truncated
    /// through the kernel keeps it, without a fixed size).
    pub fn version(&self, ino: u64) -> Option<u64> {
        self.nodes.get(&ino).and_then(Node::version)
    }

    /// The fixed size of `ino` (a ref file looked up with its size), if any.
    pub fn fixed_size(&self, ino: u64) -> Option<u64> {
        self.nodes.get(&ino).and_then(Node::size)
    }

    /// An open for reading will serve content of `len` bytes with fingerprint `fp`:
    /// page cache only when that is the inode's fixed size, direct-IO otherwise (the name
    /// has moved on to another inode; the watcher or the next lookup re-resolves it).
    /// The kernel's pages are kept (`Cached`) only when the last page fill this mount
    /// answered was this very content; otherwise this open drops them (`Refill`).
    ///
    /// A `Refill` does not record `fp`: the kernel drops the pages only after this reply
    /// reaches it, and an open answered `Cached` meanwhile (another process, right after
    /// a writer's update returned) would read the old page before that drop. Only a fill
    /// ([`Inodes::pages_filled`]) says what the pages hold; until one comes, every open
    /// drops them again.
    pub fn open_for_read(&mut self, ino: u64, len: u64, fp: u64) -> OpenMode {
        let Some(n) = self.nodes.get(&ino) else {
            return OpenMode::Direct;
        };
        if n.size() != Some(len) {
            return OpenMode::Direct;
        }
        if n.pages() == Some(fp) {
            OpenMode::Cached
        } else {
            OpenMode::Refill
        }
    }

    /// A page-cache read of `ino` was answered with content of fingerprint `fp`: the
    /// kernel's page now holds that content (page fills of one inode are serialised by
    /// the kernel's page lock, and an open that drops the pages waits for a fill in
    /// flight, so the last fill answered is what the page holds, if anything).
    pub fn pages_filled(&mut self, ino: u64, fp: u64) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.set_pages(Some(fp));
        }
    }

    /// What the kernel may hold for `ino`: (fixed size, fingerprint of its pages).
    pub fn kernel_view(&self, ino: u64) -> Option<(Option<u64>, Option<u64>)> {
        self.nodes.get(&ino).map(|n| (n.size(), n.pages()))
    }

    /// The kernel's size of `ino` no longer comes from us alone (writes or a truncate
    /// through the kernel): attributes TTL 0 and direct-IO from now on.
    pub fn suspect(&mut self, ino: u64) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.size = NO_SIZE;
            if n.kind != Kind::PackedRefs {
                n.set_pages(None);
            }
        }
    }

    /// The kernel was told to drop the pages of `ino` (`inval_inode`). (A `packed-refs`
    /// inode keeps its version: the pages it may fill again hold the same content.)
    pub fn invalidated(&mut self, ino: u64) {
        if let Some(n) = self
            .nodes
            .get_mut(&ino)
            .filter(|n| n.kind != Kind::PackedRefs)
        {
            n.set_pages(None);
        }
    }

    /// Drops `n` kernel references to `ino`.
    pub fn forget(&mut self, ino: u64, n: u64) {
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.nlookup = node.nlookup.saturating_sub(n);
            if node.nlookup == 0 {
                if let Some(n) = self.nodes.remove(&ino) {
                    if n.seq == UNQUEUED {
                        self.asked -= 1;
                    }
                    let key = (n.parent, Box::<[u8]>::from(&*n.name));
                    if self.bound.get(&key) == Some(&ino) {
                        self.bound.remove(&key);
                    }
                }
            }
        }
    }

    /// The full path and kind of a known inode, rebuilt from the parent chain.
    pub fn path(&self, ino: u64, out: &mut Vec<u8>) -> Option<Kind> {
        out.clear();
        if ino == ROOT {
            return Some(Kind::Dir);
        }
        let node = self.nodes.get(&ino)?;
        let kind = node.kind;
        let mut parts: Vec<&[u8]> = vec![&node.name];
        let mut p = node.parent;
        let mut hops = 0;
        while p != ROOT {
            let n = self.nodes.get(&p)?;
            parts.push(&n.name);
            p = n.parent;
            hops += 1;
            if hops > 4096 {
                return None;
            }
        }
        for (i, part) in parts.iter().rev().enumerate() {
            if i > 0 {
                out.push(b'/');
            }
            out.extend_from_slice(part);
        }
        Some(kind)
    }

    /// Parent inode and name of a known inode that is still at its name (a detached one's
    /// name is another node's now: nothing to drop or refresh there for it).
    pub fn parent_and_name(&self, ino: u64) -> Option<(u64, &[u8])> {
        self.nodes
            .get(&ino)
            .filter(|n| !n.detached)
            .map(|n| (n.parent, &*n.name))
    }

    /// Every known inode with its kind (for invalidation passes).
    pub fn known(&self) -> impl Iterator<Item = (u64, Kind)> + '_ {
        self.nodes.iter().map(|(&ino, n)| (ino, n.kind))
    }

    /// Sets the cap (at least 1024 nodes: fewer would make the kernel forget the
    /// directories of a path walk while it is on them).
    pub fn set_cap(&mut self, cap: usize) {
        self.cap = cap.max(MIN_CAP);
        self.times.cap = self.cap;
        if self.nodes.is_empty() {
            self.nodes = NodeTable::for_cap(self.cap);
        }
    }

    /// The cap.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Whether the table is above its cap.
    pub fn over_cap(&self) -> bool {
        self.over(self.cap)
    }

    /// The oldest known names to drop while the table is above its cap (down to 3/4 of
    /// it), at most `max`: (parent, name) for `inval_entry`, each asked for once.
    pub fn evictable_over_cap(&mut self, max: usize) -> Vec<(u64, Box<[u8]>)> {
        self.evictable(self.cap, max)
    }

    /// Whether the table is above `cap` nodes.
    fn over(&self, cap: usize) -> bool {
        self.nodes.len() - self.asked > cap
    }

    /// The oldest known names to drop from the kernel's cache while the table is above
    /// `cap` (down to 3/4 of it), at most `max` of them: (parent, name) for
    /// `inval_entry`. Each is taken off the queue once; a name the kernel keeps in use
    /// stays known until it forgets it. The kernel's `forget` then removes the nodes
    /// (a directory's entry takes its unused children with it).
    fn evictable(&mut self, cap: usize, max: usize) -> Vec<(u64, Box<[u8]>)> {
        let mut out = Vec::new();
        // Nodes already asked for are on their way out.
        let live = self.nodes.len() - self.asked;
        if live <= cap {
            return out;
        }
        let excess = live - (cap - cap / 4);
        while out.len() < excess.min(max) {
            let Some((ino, seq)) = self.order.pop_front() else {
                break;
            };
            match self.nodes.get_mut(&ino) {
                // A detached node has no name the kernel could drop.
                Some(n) if n.seq == seq && !n.detached => {
                    n.seq = UNQUEUED;
                    self.asked += 1;
                    out.push((n.parent, Box::from(&*n.name)));
                }
                _ => {}
            }
        }
        out
    }

    /// Known nodes the kernel was asked to drop and has not forgotten yet.
    pub fn dropping(&self) -> usize {
        self.asked
    }

    /// Number of known inodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether no inode besides the root is known.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_64_bytes() {
        assert_eq!(std::mem::size_of::<Node>(), 64);
        assert_eq!(std::mem::size_of::<Name>(), 24);
        // Short and long names read back as given.
        for name in [
            &b""[..],
            b"r0000123",
            &[b'x'; SHORT_NAME],
            &[b'y'; SHORT_NAME + 1],
            &[0xff; 300],
        ] {
            assert_eq!(&*Name::new(name), name);
        }
        assert!(matches!(Name::new(&[b'x'; SHORT_NAME]), Name::Short { .. }));
        assert!(matches!(Name::new(&[b'x'; SHORT_NAME + 1]), Name::Long(_)));
    }

    #[test]
    fn times_keep_the_names_used_last_within_the_cap() {
        let mut t = Times::with_cap(100);
        let stamp = |n: u64| Stamp { mark: n, shown: n };
        t.put(7, stamp(7));
        for n in 0..1000u64 {
            t.put(n, stamp(n));
            // One name used all along stays.
            assert_eq!(t.get(7).map(|s| s.shown), Some(7));
            assert!(t.len() <= 100, "{} names at {n}", t.len());
        }
        assert_eq!(t.get(999), Some(stamp(999)));
        assert_eq!(t.get(0), None);
        assert_ne!(
            time_key(b"HEAD", Kind::Ref),
            time_key(b"HEAD", Kind::Scratch)
        );
        let mut i = Inodes::new();
        i.set_cap(MIN_CAP);
        assert_eq!(i.times.cap, MIN_CAP);
    }

    #[test]
    fn the_cap_is_set_per_table_and_bounded_below() {
        let mut t = Inodes::new();
        assert_eq!(t.cap(), INODE_CAP);
        t.set_cap(3);
        assert_eq!(t.cap(), MIN_CAP);
        let dir = t.remember(ROOT, b"d", b"d", Kind::Dir, None);
        for i in 0..MIN_CAP + 10 {
            let name = format!("r{i}");
            let path = format!("d/{name}");
            t.remember(dir, name.as_bytes(), path.as_bytes(), Kind::Ref, Some(41));
        }
        assert!(t.over_cap());
        let out = t.evictable_over_cap(usize::MAX);
        // Down to 3/4 of the cap, oldest (the directory) first.
        assert_eq!(out.len(), MIN_CAP + 11 - (MIN_CAP - MIN_CAP / 4));
        assert_eq!(out[0], (ROOT, Box::from(&b"d"[..])));
        assert!(!t.over_cap());
    }

    #[test]
    fn stable_numbers_paths_and_forget() {
        let mut t = Inodes::new();
        let refs = t.remember(ROOT, b"refs", b"refs", Kind::Dir, None);
        let heads = t.remember(refs, b"heads", b"refs/heads", Kind::Dir, None);
        let main = t.remember(heads, b"main", b"refs/heads/main", Kind::Ref, None);
        assert_eq!(main, ino_of(b"refs/heads/main", Kind::Ref));
        assert_ne!(main, ino_of(b"refs/heads/main", Kind::Dir));
        assert_eq!(
            t.remember(heads, b"main", b"refs/heads/main", Kind::Ref, None),
            main
        );
        let mut p = Vec::new();
        assert_eq!(t.path(main, &mut p), Some(Kind::Ref));
        assert_eq!(p, b"refs/heads/main");
        t.forget(main, 1);
        assert!(t.path(main, &mut p).is_some());
        t.forget(main, 1);
        assert!(t.path(main, &mut p).is_none());
        // A node moved twice by renames is still found.
        let lock = t.remember(heads, b"x.lock", b"refs/heads/x.lock", Kind::Scratch, None);
        t.moved(
            heads,
            b"x.lock",
            b"refs/heads/x.lock",
            Kind::Scratch,
            refs,
            b"tmp",
            Kind::Scratch,
        );
        t.moved(
            refs,
            b"tmp",
            b"refs/tmp",
            Kind::Scratch,
            heads,
            b"y",
            Kind::Ref,
        );
        assert_eq!(t.path(lock, &mut p), Some(Kind::Ref));
        assert_eq!(p, b"refs/heads/y");
        // The number comes back the same.
        assert_eq!(
            t.remember(heads, b"main", b"refs/heads/main", Kind::Ref, None),
            main
        );
        assert_eq!(t.path(ROOT, &mut p), Some(Kind::Dir));
        assert!(p.is_empty());
    }

    #[test]
    fn ref_inodes_have_one_size_and_track_cached_pages() {
        let mut t = Inodes::new();
        let head18 = t.remember(ROOT, b"HEAD", b"HEAD", Kind::Ref, Some(18));
        let head41 = t.remember(ROOT, b"HEAD", b"HEAD", Kind::Ref, Some(41));
        // Another length is another inode; the same length the same one.
        assert_ne!(head18, head41);
        assert_eq!(
            t.remember(ROOT, b"HEAD", b"HEAD", Kind::Ref, Some(18)),
            head18
        );
        assert_eq!(t.fixed_size(head18), Some(18));
        // Content of the inode's own size: pages are dropped at every open until a
        // fill says what they hold, then kept.
        assert_eq!(t.open_for_read(head41, 41, 7), OpenMode::Refill);
        assert_eq!(t.open_for_read(head41, 41, 7), OpenMode::Refill);
        t.pages_filled(head41, 7);
        assert_eq!(t.open_for_read(head41, 41, 7), OpenMode::Cached);
        // Same size, other content: the kernel must drop its pages, at every open until
        // a fill of the new content.
        assert_eq!(t.open_for_read(head41, 41, 8), OpenMode::Refill);
        assert_eq!(t.open_for_read(head41, 41, 8), OpenMode::Refill);
        t.pages_filled(head41, 8);
        assert_eq!(t.open_for_read(head41, 41, 8), OpenMode::Cached);
        // A fill with other content (a value reset in between): dropped again.
        t.pages_filled(head41, 7);
        assert_eq!(t.open_for_read(head41, 41, 8), OpenMode::Refill);
        // Content of another size through this inode: never the page cache.
        assert_eq!(t.open_for_read(head41, 18, 9), OpenMode::Direct);
        // Written through the kernel: its size is no longer ours.
        t.suspect(head18);
        assert_eq!(t.fixed_size(head18), None);
        assert_eq!(t.open_for_read(head18, 18, 1), OpenMode::Direct);
        // A later lookup of that size gets a fresh inode again.
        let again = t.remember(ROOT, b"HEAD", b"HEAD", Kind::Ref, Some(18));
        assert_ne!(again, head18);
        assert_eq!(t.open_for_read(again, 18, 1), OpenMode::Refill);
        // Unknown inodes are direct.
        assert_eq!(t.open_for_read(12345, 18, 1), OpenMode::Direct);
    }

    /// `packed-refs` gets an inode per version of its content: the same version is the
    /// same inode (also once opened for writing, without a fixed size then: go-git's
    /// `flock` of it must meet the next opener's), another version another inode; a lock
    /// renamed over it has none, and the kernel dropping pages leaves the version.
    #[test]
    fn packed_refs_is_an_inode_per_version() {
        let mut t = Inodes::new();
        let p = b"packed-refs";
        let v1 = t.remember_version(ROOT, p, p, 5000, 1);
        assert_eq!(t.remember_version(ROOT, p, p, 5000, 1), v1);
        let v2 = t.remember_version(ROOT, p, p, 5000, 2);
        assert_ne!(v1, v2, "another content, another inode (the same size)");
        assert_eq!((t.version(v1), t.version(v2)), (Some(1), Some(2)));
        assert_eq!(t.fixed_size(v2), Some(5000));
        t.invalidated(v2);
        assert_eq!(
            t.version(v2),
            Some(2),
            "dropped pages hold the same content again"
        );
        assert_eq!(
            t.kernel_view(v2),
            Some((Some(5000), None)),
            "no ref page fingerprint"
        );
        t.suspect(v2);
        assert_eq!((t.version(v2), t.fixed_size(v2)), (Some(2), None));
        assert_eq!(
            t.remember_version(ROOT, p, p, 5000, 2),
            v2,
            "written through the kernel: still the inode every open finds"
        );
        let lock = t.remember(
            ROOT,
            b"packed-refs.lock",
            b"packed-refs.lock",
            Kind::Scratch,
            None,
        );
        t.moved(
            ROOT,
            b"packed-refs.lock",
            b"packed-refs.lock",
            Kind::Scratch,
            ROOT,
            p,
            Kind::PackedRefs,
        );
        assert_eq!(
            t.version(lock),
            None,
            "a lock renamed over it shows no version"
        );
        let v3 = t.remember_version(ROOT, p, p, 4000, 3);
        assert!(![v1, v2, lock].contains(&v3));
        assert_eq!(
            t.remember(ROOT, b"HEAD", b"HEAD", Kind::Ref, Some(41)),
            t.remember(ROOT, b"HEAD", b"HEAD", Kind::Ref, Some(41)),
            "other kinds are as before"
        );
    }

    /// A created scratch file is a new inode, never one the kernel may still hold under
    /// another name or none; a rename moves the one the kernel made at that name.
    #[test]
    fn a_created_lock_is_a_new_inode_and_the_renamed_one_is_moved() {
        let mut t = Inodes::new();
        let dir = t.remember(ROOT, b"d", b"d", Kind::Dir, None);
        let lock = |t: &mut Inodes| t.created(dir, b"c.lock", b"d/c.lock", Kind::Scratch);
        let rename = |t: &mut Inodes| {
            t.moved(
                dir,
                b"c.lock",
                b"d/c.lock",
                Kind::Scratch,
                dir,
                b"c",
                Kind::Ref,
            )
        };
        let path = |t: &Inodes, ino| {
            let mut p = Vec::new();
            t.path(ino, &mut p).map(|_| p)
        };
        let a = lock(&mut t);
        rename(&mut t);
        assert_eq!(path(&t, a).as_deref(), Some(&b"d/c"[..]));
        // The next lock while the kernel holds `a` as `d/c`.
        let b = lock(&mut t);
        assert_ne!(b, a);
        // Unlinked (a refused rename), its inode still held (its FORGET not yet here).
        t.unlinked(dir, b"c.lock");
        let c = lock(&mut t);
        assert!(
            c != a && c != b,
            "a new lock is a new inode: {a:x} {b:x} {c:x}"
        );
        assert_eq!(
            t.remember(dir, b"c.lock", b"d/c.lock", Kind::Scratch, None),
            c,
            "a lookup finds the lock the kernel made, not the unlinked one"
        );
        rename(&mut t);
        assert_eq!(
            path(&t, c).as_deref(),
            Some(&b"d/c"[..]),
            "the lock made is moved"
        );
        assert_ne!(path(&t, b).as_deref(), Some(&b"d/c.lock"[..]));
        // a, replaced at `d/c` by c: still leads to the name (an open racing the rename
        // reads the ref, not ENOENT), but no lookup, rename or eviction finds it there.
        assert_eq!(path(&t, a).as_deref(), Some(&b"d/c"[..]));
        assert_eq!(t.parent_and_name(a), None, "a's name is c's now");
        assert_eq!(t.parent_and_name(c), Some((dir, &b"c"[..])));
        let looked_up = t.remember(dir, b"c", b"d/c", Kind::Ref, None);
        assert!(
            looked_up != a,
            "a lookup of the name never finds the replaced file"
        );
        // Forgetting the detached nodes leaves the one at the name bound.
        t.forget(a, 1);
        t.forget(b, 1);
        let d = lock(&mut t);
        assert!(d != c);
        rename(&mut t);
        assert_eq!(path(&t, d).as_deref(), Some(&b"d/c"[..]));
    }

    #[test]
    fn renamed_lock_loses_its_fixed_size_and_known_dirs_are_found() {
        let mut t = Inodes::new();
        let refs = t.remember(ROOT, b"refs", b"refs", Kind::Dir, None);
        let heads = t.remember(refs, b"heads", b"refs/heads", Kind::Dir, None);
        assert_eq!(t.known_dir(b"refs/heads"), Some((heads, refs)));
        assert_eq!(t.known_dir(b"refs/tags"), None);
        let x = t.remember(heads, b"x", b"refs/heads/x", Kind::Ref, Some(41));
        // Renaming a ref file itself (not its lock) finds it despite the sized number.
        t.moved(
            heads,
            b"x",
            b"refs/heads/x",
            Kind::Ref,
            heads,
            b"y",
            Kind::Ref,
        );
        let mut p = Vec::new();
        assert_eq!(t.path(x, &mut p), Some(Kind::Ref));
        assert_eq!(p, b"refs/heads/y");
        assert_eq!(t.fixed_size(x), None);
        assert_eq!(t.open_for_read(x, 41, 1), OpenMode::Direct);
    }

    #[test]
    fn above_the_cap_the_oldest_names_are_evicted_once() {
        let mut t = Inodes::new();
        let dir = t.remember(ROOT, b"d", b"d", Kind::Dir, None);
        let mut inos = Vec::new();
        for i in 0..20u32 {
            let name = format!("r{i}");
            let path = format!("d/{name}");
            inos.push(t.remember(dir, name.as_bytes(), path.as_bytes(), Kind::Ref, Some(41)));
        }
        // 21 nodes, cap 16: down to 12, oldest first (the directory, then r0, r1, ...).
        assert!(t.over(16));
        let first = t.evictable(16, 100);
        assert_eq!(first.len(), 21 - 12);
        assert_eq!(first[0], (ROOT, Box::from(&b"d"[..])));
        assert_eq!(first[1], (dir, Box::from(&b"r0"[..])));
        // Not forgotten yet: the same names are not asked for twice, nor more names.
        assert!(!t.over(16));
        assert!(t.evictable(16, 100).is_empty());
        for i in 20..24u32 {
            let name = format!("r{i}");
            let path = format!("d/{name}");
            inos.push(t.remember(dir, name.as_bytes(), path.as_bytes(), Kind::Ref, Some(41)));
        }
        // 25 known, 9 asked: 16 live, not above the cap; one more is.
        assert!(!t.over(16));
        inos.push(t.remember(dir, b"r24", b"d/r24", Kind::Ref, Some(41)));
        assert!(t.over(16));
        // `max` bounds a round.
        let second = t.evictable(16, 3);
        assert_eq!(second.len(), 3);
        assert_eq!(second[0], (dir, Box::from(&b"r8"[..])));
        // The kernel forgets r0..r7; r8 is looked up again and requeued at the back.
        for &ino in &inos[..8] {
            t.forget(ino, 1);
        }
        assert_eq!(
            t.remember(dir, b"r8", b"d/r8", Kind::Ref, Some(41)),
            inos[8]
        );
        assert_eq!(t.asked, 3 + 1 - 1);
        assert!(!t.over(16));
        assert!(t.evictable(16, 100).is_empty());
        // A forgotten, re-learnt number has one live queue entry.
        let r0 = t.remember(dir, b"r0", b"d/r0", Kind::Ref, Some(41));
        assert_eq!(r0, inos[0]);
        for i in 20..40u32 {
            let name = format!("r{i}");
            let path = format!("d/{name}");
            t.remember(dir, name.as_bytes(), path.as_bytes(), Kind::Ref, Some(41));
        }
        let names: Vec<_> = t.evictable(16, 1000);
        let r0s = names.iter().filter(|(_, n)| &**n == b"r0").count();
        assert!(r0s <= 1, "{names:?}");
        assert!(t.order.len() <= queue_bound(t.len()));
    }
}
