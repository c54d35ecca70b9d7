//! The passed-through rest of the git directory (`passthrough.rs`) as a [`Backend`]: its
//! nodes are the git directory's own, served with a 1 s TTL; a linked worktree's
//! directory lists its ref view's names beside its files.

use std::sync::Arc;

use fuser::{FileAttr, FopenFlags};

use crate::fs::backend::{
    self, AddEntry, Attrs, Backend, Entry, HandleAt, Made, NewNode, Opened, Opening, Rename, Req,
    SetAttr,
};
use crate::fs::error::FsError;
use crate::fs::passthrough::{self, Passthrough, PASS_TTL};
use crate::fs::ref_backend::RefView;
use crate::fs::worktree::Worktrees;

/// Open flags of every passed-through file: no `FLUSH` at close. A passed-through file
/// has nothing to do at close (its writes went to the real file at each `write`, by the
/// kernel's passthrough or by our `pwrite`), and a `FLUSH` is a round trip the closing
/// process waits for (a third of a `cat`'s requests). The one exception, `config` opened
/// for writing, is stored at each close (`passthrough/config.rs`).
const PASS_OPEN_FLAGS: FopenFlags = FopenFlags::FOPEN_NOFLUSH;

/// The passthrough, with the worktrees whose ref views join its directories' listings.
pub struct PassView {
    pub pass: Arc<Passthrough>,
    pub wts: Option<Arc<Worktrees>>,
}

fn entry(a: FileAttr) -> Entry {
    Entry {
        attr: a,
        attr_ttl: PASS_TTL,
        entry_ttl: PASS_TTL,
    }
}

fn opened(o: passthrough::Opened) -> Opened {
    match o {
        passthrough::Opened::Backed { fh, backing } => Opened {
            fh,
            flags: PASS_OPEN_FLAGS,
            backing: Some(backing),
        },
        passthrough::Opened::Plain { fh, direct, flush } => {
            let mut flags = if flush {
                FopenFlags::empty()
            } else {
                PASS_OPEN_FLAGS
            };
            if direct {
                flags |= FopenFlags::FOPEN_DIRECT_IO;
            }
            Opened {
                fh,
                flags,
                backing: None,
            }
        }
    }
}

impl PassView {
    /// When `ino` is a linked worktree's directory whose stack exists: adds its ref
    /// view's names (`HEAD`, `refs`, `logs`, …) to the passed-through listing `fh`.
    fn add_worktree_refs(&self, req: Req, ino: u64, fh: u64) {
        let Some(w) = self.wts.as_deref() else { return };
        let Some(id) = self.pass.worktree_of(ino) else {
            return;
        };
        let Ok(wt) = w.serve(&id, ino, false) else {
            return;
        };
        let view = RefView::worktree(wt);
        let Ok(dfh) = view.opendir(req, ino) else {
            return;
        };
        let entries = view.entries(dfh);
        view.releasedir(ino, dfh);
        if let Some(mut e) = entries {
            e.retain(|d| !crate::fs::worktree::is_common_only(&d.name));
            self.pass.extend_dir(fh, &e);
        }
    }
}

impl Backend for PassView {
    fn lookup(&self, _req: Req, parent: u64, name: &[u8]) -> Result<Entry, FsError> {
        match self.pass.lookup(parent, name) {
            Ok(a) => Ok(entry(a)),
            // A passed-through name made in GITDIR behind the mount's back shows within
            // PASS_TTL, as a changed one does; one made through the mount updates the
            // kernel's own entry. So its absence may be remembered as long (git 2.39 looks
            // for `hooks/reference-transaction` three times per ref transaction). Not a
            // ref name in a worktree's directory before the worktree is known.
            Err(e) if e.errno() == libc::ENOENT && !passthrough::is_ref_name_at_root(name) => {
                Ok(Entry::absent(PASS_TTL))
            }
            Err(e) => Err(e),
        }
    }

    fn forget(&self, ino: u64, n: u64) {
        self.pass.forget(ino, n);
    }

    fn getattr(&self, _req: Req, ino: u64, fh: Option<u64>) -> Result<Attrs, FsError> {
        Ok((self.pass.getattr(ino, fh)?, PASS_TTL))
    }

    fn setattr(&self, _req: Req, ino: u64, a: &SetAttr) -> Result<Attrs, FsError> {
        Ok((self.pass.setattr(ino, a)?, PASS_TTL))
    }

    fn open(&self, _req: Req, ino: u64, how: Opening<'_>) -> Result<Opened, FsError> {
        self.pass.open(ino, how.flags, how.backing).map(opened)
    }

    fn create(&self, _req: Req, n: NewNode<'_>, how: Opening<'_>) -> Result<Made, FsError> {
        let (a, o) = self.pass.create(n, how.flags, how.backing)?;
        Ok((entry(a), opened(o)))
    }

    fn read(&self, _req: Req, at: HandleAt, size: u32, _flags: i32) -> Result<Vec<u8>, FsError> {
        self.pass.read(at.fh, at.offset, size)
    }

    fn write(&self, _req: Req, at: HandleAt, data: &[u8], _flags: i32) -> Result<u32, FsError> {
        self.pass.write(at.fh, at.offset, data)
    }

    /// Written through at every write: nothing to do at close (and opened with
    /// FOPEN_NOFLUSH, so only a kernel without it sends FLUSH), except for `config` opened
    /// for writing, stored at each close.
    fn flush(&self, _req: Req, _ino: u64, fh: u64) -> Result<(), FsError> {
        self.pass.flush(fh)
    }

    fn fsync(&self, _req: Req, _ino: u64, fh: u64, datasync: bool) -> Result<(), FsError> {
        self.pass.fsync(fh, datasync)
    }

    fn fsyncdir(&self, _req: Req, ino: u64) -> Result<(), FsError> {
        self.pass.fsyncdir(ino)
    }

    fn release(&self, _ino: u64, fh: u64) {
        self.pass.release(fh);
    }

    fn unlink(&self, _req: Req, parent: u64, name: &[u8]) -> Result<(), FsError> {
        self.pass.unlink(parent, name)
    }

    fn mkdir(&self, _req: Req, n: NewNode<'_>) -> Result<Entry, FsError> {
        self.pass.mkdir(n).map(entry)
    }

    /// `worktrees/<id>`: the worktree's stack goes first when its view holds nothing
    /// (`Worktrees::remove`), so that the directory is as empty as a files backend's.
    fn rmdir(&self, _req: Req, parent: u64, name: &[u8]) -> Result<(), FsError> {
        if let Some(w) = self.wts.as_deref() {
            if self.pass.is_worktrees_dir(parent) {
                w.remove(name)?;
            }
        }
        self.pass.rmdir(parent, name)
    }

    fn rename(&self, _req: Req, r: &Rename<'_>) -> Result<(), FsError> {
        self.pass.rename(r)
    }

    fn opendir(&self, req: Req, ino: u64) -> Result<u64, FsError> {
        let fh = self.pass.opendir(ino)?;
        self.add_worktree_refs(req, ino, fh);
        Ok(fh)
    }

    fn readdir(&self, _req: Req, at: HandleAt, add: AddEntry<'_>) -> Result<(), FsError> {
        let entries = self.pass.dir_entries(at.fh).ok_or(FsError::EBADF)?;
        let parent = self.pass.parent_of(at.ino);
        backend::list_entries(at.ino, parent, at.offset, &entries, add);
        Ok(())
    }

    fn releasedir(&self, _ino: u64, fh: u64) {
        self.pass.releasedir(fh);
    }

    fn readlink(&self, _req: Req, ino: u64) -> Result<Vec<u8>, FsError> {
        self.pass.readlink(ino)
    }

    fn symlink(&self, _req: Req, parent: u64, name: &[u8], to: &[u8]) -> Result<Entry, FsError> {
        self.pass.symlink(parent, name, to).map(entry)
    }
}
