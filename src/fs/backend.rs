//! The one trait every tree under the mount implements — the ref views (main and linked
//! worktrees), the passed-through rest of the git directory, the status node and the
//! root they share — so that the router (`router.rs`) resolves a request to its backend
//! once and `fuse.rs` only translates between the kernel's requests and these calls.
//!
//! Inode numbers here are the mount's (a view maps its own, `ino::Map`); answers carry
//! no reply object: `fuse.rs` turns them into replies. A backend that has no such
//! operation keeps the default, which refuses it as the files backend would.

use std::fs::File;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use fuser::{BackingId, FileAttr, FileType, FopenFlags, TimeOrNow};

use crate::fs::error::FsError;

/// Who sends a request: the calling thread's id, as FUSE gives it.
#[derive(Clone, Copy, Debug)]
pub struct Req {
    pub pid: u32,
}

/// A node found or made (`lookup`, `create`, `mkdir`, `symlink`): its attributes and how
/// long the kernel may keep them and the name.
#[derive(Clone, Debug)]
pub struct Entry {
    pub attr: FileAttr,
    pub attr_ttl: Duration,
    pub entry_ttl: Duration,
}

impl Entry {
    /// No such name, and the kernel may remember that for `ttl`: FUSE's reply of node id 0
    /// (a negative entry). Only for a name that can then appear only through the kernel
    /// (which updates its own entry) or, for a passed-through name, by a change in GITDIR
    /// that the mount shows within `ttl` anyway (`passthrough::PASS_TTL`).
    pub fn absent(ttl: Duration) -> Entry {
        let mut attr = crate::fs::attr::attr(
            0,
            crate::fs::view::Kind::Scratch,
            0,
            std::time::UNIX_EPOCH,
            0,
            0,
        );
        attr.nlink = 0;
        Entry {
            attr,
            attr_ttl: Duration::ZERO,
            entry_ttl: ttl,
        }
    }

    /// Whether this is [`Entry::absent`]'s answer.
    pub fn is_absent(&self) -> bool {
        self.attr.ino.0 == 0
    }
}

/// A file made and opened (`create`).
pub type Made = (Entry, Opened);

/// An opened file: its handle, how the kernel caches it, and the backing file when the
/// kernel's FUSE passthrough serves its reads and writes.
#[derive(Clone, Debug)]
pub struct Opened {
    pub fh: u64,
    pub flags: FopenFlags,
    pub backing: Option<Arc<BackingId>>,
}

/// One directory entry of a listing.
#[derive(Debug, Clone)]
pub struct DirEntry {
    pub name: Box<[u8]>,
    pub kind: FileType,
    pub ino: u64,
}

/// Registers an open file with the kernel for FUSE passthrough (`ReplyOpen::open_backing`).
pub type MakeBacking<'a> = &'a dyn Fn(&File) -> io::Result<BackingId>;

/// Adds one directory entry to a `readdir` reply: (inode, offset of the next entry,
/// kind, name); true when the reply is full.
pub type AddEntry<'a> = &'a mut dyn FnMut(u64, u64, FileType, &[u8]) -> bool;

/// What getattr and setattr answer: the attributes and how long the kernel may keep them.
pub type Attrs = (FileAttr, Duration);

/// What a `setattr` asks to change, and the open file it names (if any).
#[derive(Clone, Copy, Debug, Default)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeOrNow>,
    pub mtime: Option<TimeOrNow>,
    pub fh: Option<u64>,
}

/// How a file is opened (`open`, `create`): its flags, and how to register it with the
/// kernel for FUSE passthrough.
#[derive(Clone, Copy)]
pub struct Opening<'a> {
    pub flags: i32,
    pub backing: MakeBacking<'a>,
}

/// A node to make (`create`, `mkdir`): `parent/name` with `mode` less `umask`.
#[derive(Clone, Copy, Debug)]
pub struct NewNode<'a> {
    pub parent: u64,
    pub name: &'a [u8],
    pub mode: u32,
    pub umask: u32,
}

impl NewNode<'_> {
    /// The permission bits the node gets: `mode` less `umask`.
    pub fn perm(&self) -> u32 {
        self.mode & !self.umask & 0o7777
    }
}

/// Where in an open file or directory: the handle `fh` of `ino`, at `offset` (bytes of
/// a file, entries of a listing).
#[derive(Clone, Copy, Debug)]
pub struct HandleAt {
    pub ino: u64,
    pub fh: u64,
    pub offset: u64,
}

/// A rename of `parent/name` to `newparent/newname` (`flags`: `RENAME_*`).
#[derive(Clone, Copy, Debug)]
pub struct Rename<'a> {
    pub parent: u64,
    pub name: &'a [u8],
    pub newparent: u64,
    pub newname: &'a [u8],
    pub flags: u32,
}

/// A tree under the mount (see the module docs).
pub trait Backend {
    /// `parent/name`.
    fn lookup(&self, req: Req, parent: u64, name: &[u8]) -> Result<Entry, FsError>;

    /// The kernel drops `n` references to `ino`.
    fn forget(&self, _ino: u64, _n: u64) {}

    /// Attributes of `ino` and how long the kernel may keep them.
    fn getattr(&self, req: Req, ino: u64, fh: Option<u64>) -> Result<Attrs, FsError>;

    /// Changes attributes (a size: truncate); answers the new ones.
    fn setattr(&self, req: Req, ino: u64, a: &SetAttr) -> Result<Attrs, FsError>;

    fn open(&self, req: Req, ino: u64, how: Opening<'_>) -> Result<Opened, FsError>;

    fn create(&self, _req: Req, _n: NewNode<'_>, _how: Opening<'_>) -> Result<Made, FsError> {
        Err(FsError::EPERM)
    }

    /// `size` bytes; `flags`: the open file's flags (`O_DIRECT` reads fill no page).
    fn read(&self, req: Req, at: HandleAt, size: u32, flags: i32) -> Result<Vec<u8>, FsError>;

    /// `flags`: the open file's flags.
    fn write(&self, _req: Req, _at: HandleAt, _data: &[u8], _flags: i32) -> Result<u32, FsError> {
        Err(FsError::EBADF)
    }

    /// Every `close` of an open file.
    fn flush(&self, _req: Req, _ino: u64, _fh: u64) -> Result<(), FsError> {
        Ok(())
    }

    fn fsync(&self, _req: Req, _ino: u64, _fh: u64, _datasync: bool) -> Result<(), FsError> {
        Ok(())
    }

    fn fsyncdir(&self, _req: Req, _ino: u64) -> Result<(), FsError> {
        Ok(())
    }

    /// The last close of an open file.
    fn release(&self, ino: u64, fh: u64);

    fn unlink(&self, _req: Req, _parent: u64, _name: &[u8]) -> Result<(), FsError> {
        Err(FsError::EPERM)
    }

    fn mkdir(&self, _req: Req, _n: NewNode<'_>) -> Result<Entry, FsError> {
        Err(FsError::EPERM)
    }

    fn rmdir(&self, _req: Req, _parent: u64, _name: &[u8]) -> Result<(), FsError> {
        Err(FsError::EPERM)
    }

    /// A rename within this backend (the router refuses one across backends).
    fn rename(&self, _req: Req, _r: &Rename<'_>) -> Result<(), FsError> {
        Err(FsError::EPERM)
    }

    fn opendir(&self, req: Req, ino: u64) -> Result<u64, FsError>;

    /// Lists the open directory from the offset on (`.` and `..` first).
    fn readdir(&self, req: Req, at: HandleAt, add: AddEntry<'_>) -> Result<(), FsError>;

    fn releasedir(&self, ino: u64, fh: u64);

    fn readlink(&self, _req: Req, _ino: u64) -> Result<Vec<u8>, FsError> {
        Err(FsError::EINVAL)
    }

    /// `parent/name`, a symbolic link to `to`.
    fn symlink(&self, _req: Req, _parent: u64, _name: &[u8], _to: &[u8]) -> Result<Entry, FsError> {
        Err(FsError::EPERM)
    }
}

/// Lists `.`, `..` and then `entries` from `offset` on into `add` ([`list`]).
pub fn list_entries(ino: u64, parent: u64, offset: u64, entries: &[DirEntry], add: AddEntry<'_>) {
    let entry = |k: usize| entries.get(k).map(|e| (e.ino, e.kind, &e.name[..]));
    list(ino, parent, offset, entry, add);
}

/// Lists `.`, `..` and then `count` entries given by `entry(k)` (inode, kind, name), from
/// `offset` on, into `add` (offsets count from 1).
pub fn list<N: AsRef<[u8]>>(
    ino: u64,
    parent: u64,
    offset: u64,
    mut entry: impl FnMut(usize) -> Option<(u64, FileType, N)>,
    add: AddEntry<'_>,
) {
    let mut i = offset;
    loop {
        let full = match i {
            0 => add(ino, 1, FileType::Directory, b"."),
            1 => add(parent, 2, FileType::Directory, b".."),
            n => {
                let Some((cino, kind, name)) = usize::try_from(n - 2).ok().and_then(&mut entry)
                else {
                    break;
                };
                add(cino, n + 1, kind, name.as_ref())
            }
        };
        if full {
            break;
        }
        i += 1;
    }
}
