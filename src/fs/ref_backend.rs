//! A ref view as a [`Backend`]: the main view or a linked worktree's, its own inode
//! numbers mapped to the mount's (`ino::Map`), and the kernel caching policy of its
//! nodes (entry and attribute TTLs, page cache or direct-IO).

use std::sync::Arc;
use std::time::Duration;

use fuser::{FileAttr, FileType, FopenFlags, INodeNo};

use crate::fs::attr::file_type;
use crate::fs::backend::{
    self, AddEntry, Attrs, Backend, DirEntry, Entry, HandleAt, Made, NewNode, Opened, Opening,
    Rename, Req, SetAttr,
};
use crate::fs::error::FsError;
use crate::fs::ino::Map;
use crate::fs::inode::OpenMode;
use crate::fs::state::{Handle, Shared, REF_ATTR_TTL};
use crate::fs::view::Kind;
use crate::fs::worktree::Worktree;

/// Entry TTL for directories and ref files. A name that vanishes or changes kind is
/// invalidated by the watcher; a ref name's absence is never cached (a lock's is: such a
/// name appears only through the kernel); every open reaches the mount, which compares
/// the content with what the kernel may have cached.
pub const ENTRY_TTL: Duration = Duration::from_secs(10);
/// Attribute TTL for files other than ref files of a stable size (those get
/// `REF_ATTR_TTL`): zero, so a size is never stale (no truncated reads).
pub const FILE_ATTR_TTL: Duration = Duration::ZERO;
/// Attribute TTL for directories.
pub const DIR_ATTR_TTL: Duration = Duration::from_secs(1);

/// Whether `name` is a lock's (`x.lock`: never a ref or reflog name). A lock's name
/// appears and goes only through the kernel (`create`, `rename`, `unlink`; the mount never
/// removes one by itself, and a refused rename leaves it), which updates its own entry:
/// its presence may be cached as its absence is (`lookup`), sparing the `LOOKUP` before
/// git's `unlink` or `rename` of its lock, two per ref transaction.
fn is_lock(name: &[u8]) -> bool {
    name.ends_with(b".lock")
}

/// (attribute TTL, entry TTL) for a node of `kind` named `name`; `cache`: the attributes
/// of a ref file may be cached (its size is stable).
fn ttls(kind: Kind, name: &[u8], cache: bool) -> (Duration, Duration) {
    match kind {
        Kind::Dir => (DIR_ATTR_TTL, ENTRY_TTL),
        Kind::Scratch if is_lock(name) => (FILE_ATTR_TTL, ENTRY_TTL),
        // Another scratch file's name must not stay cached once it is gone; nor a kept
        // symbolic link's, which a rename replaces.
        Kind::Scratch | Kind::Link => (FILE_ATTR_TTL, Duration::ZERO),
        // An inode per content (`Inodes::remember_version`): its attributes never change,
        // and every path walk looks the name up, so that an open after a change finds the
        // new content's inode (as on a disk, where `packed-refs` is renamed over).
        Kind::PackedRefs => (attr_ttl(FileType::RegularFile, cache), Duration::ZERO),
        _ => (attr_ttl(FileType::RegularFile, cache), ENTRY_TTL),
    }
}

/// The attribute TTL of a node of type `ft`.
fn attr_ttl(ft: FileType, cache: bool) -> Duration {
    if ft == FileType::Directory {
        DIR_ATTR_TTL
    } else if cache {
        REF_ATTR_TTL
    } else {
        FILE_ATTR_TTL
    }
}

/// The ref view of the main git directory or of a linked worktree.
pub struct RefView {
    shared: Arc<Shared>,
    map: Map,
    /// The worktree, for a linked worktree's view (it takes only its own names).
    worktree: Option<Arc<Worktree>>,
}

impl RefView {
    /// The main view.
    pub fn main(shared: Arc<Shared>) -> RefView {
        RefView {
            shared,
            map: Map::MAIN,
            worktree: None,
        }
    }

    /// A linked worktree's view.
    pub fn worktree(w: Arc<Worktree>) -> RefView {
        RefView {
            shared: w.shared.clone(),
            map: w.map(),
            worktree: Some(w),
        }
    }

    /// The view's state.
    pub fn shared(&self) -> &Shared {
        &self.shared
    }

    /// Its inode map.
    pub fn map(&self) -> Map {
        self.map
    }

    fn inn(&self, ino: u64) -> u64 {
        self.map.inn(ino)
    }

    fn out(&self, mut a: FileAttr) -> FileAttr {
        a.ino = INodeNo(self.map.out(a.ino.0));
        a
    }

    /// A linked worktree's view refuses names that are not its own.
    fn check_creatable(&self, parent: u64, name: &[u8]) -> Result<(), FsError> {
        match &self.worktree {
            Some(w) => w.check_creatable(parent, name),
            None => Ok(()),
        }
    }

    /// The mount's inode number of `dir/name`, of `kind`.
    fn child_ino(&self, dir: &[u8], name: &[u8], kind: Kind) -> u64 {
        let child = crate::fs::view::join(dir, name);
        self.map.out(crate::fs::inode::ino_of(&child, kind))
    }

    /// The entries of the open directory `fh`, with the mount's inode numbers (for the
    /// listings this view's names join: the root, a worktree's directory).
    pub fn entries(&self, fh: u64) -> Option<Vec<DirEntry>> {
        self.shared.with_handle(fh, |h| match h {
            Some(Handle::Dir { path, entries }) => Some(
                (0..entries.len())
                    .filter_map(|k| entries.get(k))
                    .map(|(name, kind)| DirEntry {
                        ino: self.child_ino(path, name, kind),
                        kind: file_type(kind),
                        name: name.into(),
                    })
                    .collect(),
            ),
            _ => None,
        })
    }
}

impl Backend for RefView {
    fn lookup(&self, _req: Req, parent: u64, name: &[u8]) -> Result<Entry, FsError> {
        let claimed = parent == crate::fs::ino::ROOT && self.shared.link_claims(name);
        let (a, kind, cache) = match self.shared.lookup(self.inn(parent), name) {
            Ok(found) => found,
            // A lock's name appears only by a `create` or `rename` through the kernel,
            // which then updates its own entry: its absence may be remembered (git's
            // `O_EXCL` create of a lock is then one request, not a lookup and a create).
            // Any other name may become a ref by another writer's commit: never. Nor a
            // name `packed-refs` links to, which goes back to the passthrough with the link.
            Err(e) if e.errno() == libc::ENOENT && name.ends_with(b".lock") && !claimed => {
                return Ok(Entry::absent(ENTRY_TTL));
            }
            Err(e) => return Err(e),
        };
        let (attr_ttl, mut entry_ttl) = ttls(kind, name, cache);
        if claimed {
            // A file `packed-refs` links to goes back to the passthrough with the link
            // (`state/packed_link.rs`): its name is not cached.
            entry_ttl = Duration::ZERO;
        }
        Ok(Entry {
            attr: self.out(a),
            attr_ttl,
            entry_ttl,
        })
    }

    fn forget(&self, ino: u64, n: u64) {
        self.shared.forget(self.inn(ino), n);
    }

    fn getattr(&self, _req: Req, ino: u64, _fh: Option<u64>) -> Result<Attrs, FsError> {
        let (mut a, cache) = self.shared.getattr(self.inn(ino))?;
        a.ino = INodeNo(ino);
        Ok((a, attr_ttl(a.kind, cache)))
    }

    fn setattr(&self, req: Req, ino: u64, a: &SetAttr) -> Result<Attrs, FsError> {
        // Modes and times are accepted and not stored (core.sharedRepository chmods).
        if let Some(size) = a.size {
            self.shared.truncate(self.inn(ino), a.fh, size, req.pid)?;
        }
        self.getattr(req, ino, a.fh)
    }

    fn open(&self, req: Req, ino: u64, how: Opening<'_>) -> Result<Opened, FsError> {
        let flags = how.flags;
        let (fh, mode) = self.shared.open_as(self.inn(ino), flags, req.pid)?;
        let mut f = match mode {
            OpenMode::Direct => FopenFlags::FOPEN_DIRECT_IO,
            // Without KEEP_CACHE the kernel drops the inode's pages at this open.
            OpenMode::Refill => FopenFlags::empty(),
            OpenMode::Cached => FopenFlags::FOPEN_KEEP_CACHE,
        };
        // Nothing to commit when a reader closes: skip the FLUSH round trip.
        if flags & libc::O_ACCMODE == libc::O_RDONLY {
            f |= FopenFlags::FOPEN_NOFLUSH;
        }
        Ok(Opened {
            fh,
            flags: f,
            backing: None,
        })
    }

    fn create(&self, req: Req, n: NewNode<'_>, how: Opening<'_>) -> Result<Made, FsError> {
        let (parent, name) = (self.inn(n.parent), n.name);
        self.check_creatable(parent, name)?;
        let (a, fh) = self.shared.create(parent, name, how.flags, req.pid)?;
        // A created file is a scratch file until something is written and renamed.
        let (attr_ttl, entry_ttl) = match a.kind {
            FileType::Directory => (DIR_ATTR_TTL, DIR_ATTR_TTL),
            FileType::RegularFile => ttls(Kind::Scratch, name, false),
            _ => (Duration::ZERO, Duration::ZERO),
        };
        Ok((
            Entry {
                attr: self.out(a),
                attr_ttl,
                entry_ttl,
            },
            Opened {
                fh,
                flags: FopenFlags::FOPEN_DIRECT_IO,
                backing: None,
            },
        ))
    }

    fn read(&self, _req: Req, at: HandleAt, size: u32, flags: i32) -> Result<Vec<u8>, FsError> {
        // An O_DIRECT read of a page-cache handle fills no page.
        let direct = flags & libc::O_DIRECT != 0;
        self.shared
            .read_file(self.inn(at.ino), at.fh, at.offset, size, direct)
    }

    fn write(&self, req: Req, at: HandleAt, data: &[u8], flags: i32) -> Result<u32, FsError> {
        self.shared.write(at.fh, at.offset, data, flags, req.pid)
    }

    fn flush(&self, req: Req, _ino: u64, fh: u64) -> Result<(), FsError> {
        self.shared.flush(fh, req.pid)
    }

    fn fsync(&self, req: Req, _ino: u64, fh: u64, _datasync: bool) -> Result<(), FsError> {
        self.shared.fsync(fh, req.pid)
    }

    fn fsyncdir(&self, req: Req, _ino: u64) -> Result<(), FsError> {
        self.shared.sync_for(self.shared.tgid(req.pid))
    }

    fn release(&self, _ino: u64, fh: u64) {
        self.shared.release(fh);
    }

    fn unlink(&self, req: Req, parent: u64, name: &[u8]) -> Result<(), FsError> {
        self.shared.unlink(self.inn(parent), name, req.pid)
    }

    fn mkdir(&self, _req: Req, n: NewNode<'_>) -> Result<Entry, FsError> {
        let (parent, name) = (self.inn(n.parent), n.name);
        self.check_creatable(parent, name)?;
        let a = self.shared.mkdir(parent, name)?;
        Ok(Entry {
            attr: self.out(a),
            attr_ttl: DIR_ATTR_TTL,
            entry_ttl: ENTRY_TTL,
        })
    }

    fn rmdir(&self, _req: Req, parent: u64, name: &[u8]) -> Result<(), FsError> {
        self.shared.rmdir(self.inn(parent), name)
    }

    fn rename(&self, req: Req, r: &Rename<'_>) -> Result<(), FsError> {
        if r.flags != 0 {
            return Err(FsError::EINVAL);
        }
        let (parent, newparent) = (self.inn(r.parent), self.inn(r.newparent));
        self.check_creatable(newparent, r.newname)?;
        self.shared
            .rename(parent, r.name, newparent, r.newname, req.pid)
    }

    fn opendir(&self, _req: Req, ino: u64) -> Result<u64, FsError> {
        self.shared.opendir(self.inn(ino))
    }

    fn readdir(&self, _req: Req, at: HandleAt, add: AddEntry<'_>) -> Result<(), FsError> {
        let HandleAt { ino, fh, offset } = at;
        let parent = self.map.out(self.shared.parent_of(self.inn(ino)));
        // The listing is taken out of the state; the reply is built without its lock.
        let listing = self.shared.with_handle(fh, |h| match h {
            Some(Handle::Dir { path, entries }) => Some((path.clone(), entries.clone())),
            _ => None,
        });
        let Some((path, entries)) = listing else {
            return Err(FsError::EBADF);
        };
        backend::list(
            ino,
            parent,
            offset,
            |k| {
                let (name, kind) = entries.get(k)?;
                Some((self.child_ino(&path, name, kind), file_type(kind), name))
            },
            add,
        );
        Ok(())
    }

    fn releasedir(&self, _ino: u64, fh: u64) {
        self.shared.release(fh);
    }

    fn readlink(&self, _req: Req, ino: u64) -> Result<Vec<u8>, FsError> {
        self.shared.readlink(self.inn(ino))
    }

    fn symlink(&self, req: Req, parent: u64, name: &[u8], to: &[u8]) -> Result<Entry, FsError> {
        let parent = self.inn(parent);
        self.check_creatable(parent, name)?;
        let a = self.shared.symlink(parent, name, to, req.pid)?;
        Ok(Entry {
            attr: self.out(a),
            attr_ttl: FILE_ATTR_TTL,
            entry_ttl: Duration::ZERO,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::ino::ROOT;
    use crate::ObjectId;
    use crate::RefValue;

    /// An absent lock's name is answered as a remembered absence (node id 0 with the entry
    /// TTL); an absent ref name is an error the kernel does not keep; a present lock's
    /// name is kept for the entry TTL too, another scratch file's is not.
    #[test]
    fn only_a_lock_name_is_remembered_absent_or_present() {
        let shared = crate::fs::test_support::writable_view(&[(
            "refs/heads/main",
            RefValue::Val1(ObjectId::from_bytes(&[1; 20]).expect("id")),
        )]);
        let view = RefView::main(shared.clone());
        let req = Req {
            pid: std::process::id(),
        };
        let refs = view.lookup(req, ROOT, b"refs").expect("refs").attr.ino.0;
        let heads = view.lookup(req, refs, b"heads").expect("heads").attr.ino.0;

        let lock = view.lookup(req, heads, b"main.lock").expect("an answer");
        assert!(lock.is_absent(), "an absent lock is a remembered absence");
        assert_eq!(lock.entry_ttl, ENTRY_TTL);
        let root_lock = view.lookup(req, ROOT, b"HEAD.lock").expect("an answer");
        assert!(root_lock.is_absent());

        let e = view.lookup(req, heads, b"other").expect_err("no such ref");
        assert_eq!(e.errno(), libc::ENOENT);
        let e = view
            .lookup(req, heads, b"main.locks")
            .expect_err("no such ref");
        assert_eq!(e.errno(), libc::ENOENT);

        let flags = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY;
        let (_, fh) = shared
            .create(
                shared_ino(&view, heads),
                b"main.lock",
                flags,
                std::process::id(),
            )
            .expect("lock");
        let held = view.lookup(req, heads, b"main.lock").expect("the lock");
        assert!(!held.is_absent());
        assert_eq!(
            held.entry_ttl, ENTRY_TTL,
            "a lock's name is kept while it exists (it goes only through the kernel)"
        );
        assert_eq!(held.attr_ttl, Duration::ZERO, "its size is never kept");
        shared.release(fh);
        // Another scratch name (a file created at a ref's name becomes the ref behind
        // the kernel) is not kept.
        let (_, fh) = shared
            .create(shared_ino(&view, heads), b"new", flags, std::process::id())
            .expect("a file created in place");
        let made = view.lookup(req, heads, b"new").expect("the file");
        assert_eq!(
            made.entry_ttl,
            Duration::ZERO,
            "a scratch name is never kept"
        );
        shared.release(fh);
    }

    /// The view's own number of the mount's inode `ino`.
    fn shared_ino(view: &RefView, ino: u64) -> u64 {
        view.inn(ino)
    }
}
