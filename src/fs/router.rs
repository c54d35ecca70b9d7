//! Resolves each request to the tree it concerns, once: an inode number by its space
//! (`ino.rs`), a name by its parent and itself (the status directory, a ref name at the
//! root or in a linked worktree's directory, everything else passed through). The root
//! is shared by the main ref view and the passthrough ([`RootView`]). A rename across two
//! trees is refused here (`EXDEV`, recorded).

use crate::fs::backend::{
    AddEntry, Attrs, Backend, Entry, HandleAt, Opened, Opening, Rename, Req, SetAttr,
};
use crate::fs::error::FsError;
use crate::fs::ino::{self, Space, ROOT};
use crate::fs::pass_backend::PassView;
use crate::fs::passthrough::{self, Passthrough};
use crate::fs::ref_backend::RefView;
use crate::fs::state::Shared;
use crate::fs::status::{self, node::StatusNode};
use crate::fs::worktree::Worktrees;
use std::sync::Arc;

/// What the mount serves: the main ref view, the passthrough (unless refs-only) and the
/// linked worktrees' views.
pub struct Router {
    pub main: Arc<Shared>,
    pub pass: Option<Arc<Passthrough>>,
    pub wts: Option<Arc<Worktrees>>,
    /// The status node's open files.
    pub status_docs: Arc<status::OpenDocs>,
}

/// The tree a request goes to.
pub enum Target {
    Status(StatusNode),
    Pass(PassView),
    View(RefView),
    Root(RootView),
}

impl Target {
    /// Its backend.
    pub fn backend(&self) -> &dyn Backend {
        match self {
            Target::Status(b) => b,
            Target::Pass(b) => b,
            Target::View(b) => b,
            Target::Root(b) => b,
        }
    }

    /// Which tree this is: the status node, the passthrough, or a ref view (by its map).
    fn tree(&self) -> (u8, Option<ino::Map>) {
        match self {
            Target::Status(_) => (0, None),
            Target::Pass(_) => (1, None),
            Target::View(v) => (2, Some(v.map())),
            Target::Root(_) => (2, Some(ino::Map::MAIN)),
        }
    }
}

impl Router {
    /// The status node, over the main view and the mount's open status files.
    fn status_node(&self) -> StatusNode {
        StatusNode {
            shared: self.main.clone(),
            docs: self.status_docs.clone(),
        }
    }

    fn pass_view(&self, pass: &Arc<Passthrough>) -> Target {
        Target::Pass(PassView {
            pass: pass.clone(),
            wts: self.wts.clone(),
        })
    }

    /// The tree of inode `ino`.
    pub fn node(&self, ino: u64) -> Result<Target, FsError> {
        match ino::space_of(ino) {
            Space::Status => Ok(Target::Status(self.status_node())),
            Space::Pass => match &self.pass {
                Some(p) => Ok(self.pass_view(p)),
                None => Err(FsError::ESTALE),
            },
            Space::Worktree(_) => match self.wts.as_deref().and_then(|w| w.by_ino(ino)) {
                Some(w) => Ok(Target::View(RefView::worktree(w))),
                None => Err(FsError::ESTALE),
            },
            Space::Main if ino == ROOT => Ok(Target::Root(RootView {
                view: RefView::main(self.main.clone()),
                pass: self.pass.clone(),
                wts: self.wts.clone(),
            })),
            Space::Main => Ok(Target::View(RefView::main(self.main.clone()))),
        }
    }

    /// The tree of `parent/name`. `create`: the request writes the name (a linked
    /// worktree whose stack does not exist yet then gets one, `Worktrees::serve`).
    pub fn child(&self, parent: u64, name: &[u8], create: bool) -> Result<Target, FsError> {
        if status::is_status_name(parent, name) {
            return Ok(Target::Status(self.status_node()));
        }
        // A file `packed-refs` links to is the view's too (`state/packed_link.rs`).
        let ref_name = passthrough::is_ref_name_at_root(name)
            || (parent == ROOT && self.main.link_claims(name));
        if let Some(p) = &self.pass {
            if ino::is_pass(parent) {
                // Ref names in a linked worktree's directory belong to its ref view
                // (`packed-refs` is the common directory's only: a files backend has none
                // in a worktree's directory).
                let own = ref_name && !crate::fs::worktree::is_common_only(name);
                if let (true, Some(w), Some(id)) = (own, self.wts.as_deref(), p.worktree_of(parent))
                {
                    let wt = w.serve(&id, parent, create)?;
                    return Ok(Target::View(RefView::worktree(wt)));
                }
                return Ok(self.pass_view(p));
            }
            if parent == ROOT && !ref_name {
                return Ok(self.pass_view(p));
            }
        }
        match self.node(parent)? {
            // At the root, a ref name is the main view's.
            Target::Root(r) => Ok(Target::View(r.view)),
            t => Ok(t),
        }
    }

    /// The tree of a rename of `parent/name` to `newparent/newname`: both names must be
    /// in the same one (else `EXDEV`, recorded, as for a rename across file systems).
    pub fn rename(&self, r: &Rename<'_>) -> Result<Target, FsError> {
        let (name, newname) = (r.name, r.newname);
        let from = self.child(r.parent, name, false)?;
        let to = self.child(r.newparent, newname, true)?;
        if from.tree() == to.tree() {
            return Ok(from);
        }
        let across = match (&from, &to) {
            (Target::View(_), Target::View(_)) => "across the ref views of two worktrees",
            (Target::Status(_), _) | (_, Target::Status(_)) => {
                return Err(self.status_node().refuse("rename", name));
            }
            _ => "across the boundary between refs and passed-through files",
        };
        Err(self.main.rec.refuse_for(
            "rename",
            name,
            libc::EXDEV,
            format!("to {}: {across}", String::from_utf8_lossy(newname)),
        ))
    }

    /// Writes every pending update of every view (unmount).
    pub fn flush_all(&self) {
        let _ = self.main.flush_all();
        if let Some(w) = &self.wts {
            let _ = w.flush_all();
        }
    }
}

/// The mount's root: the main ref view's root with the passed-through names of the git
/// directory beside its own.
pub struct RootView {
    view: RefView,
    pass: Option<Arc<Passthrough>>,
    wts: Option<Arc<Worktrees>>,
}

impl Backend for RootView {
    fn lookup(&self, req: Req, parent: u64, name: &[u8]) -> Result<Entry, FsError> {
        self.view.lookup(req, parent, name)
    }

    /// The ref view's root, whose time moves when a ref name appears or goes there, and
    /// no older than the real git directory's, whose time moves when a passed-through
    /// name does (`index.lock`, `COMMIT_EDITMSG`): the root's entries are both trees'.
    fn getattr(&self, req: Req, ino: u64, fh: Option<u64>) -> Result<Attrs, FsError> {
        let (mut a, ttl) = self.view.getattr(req, ino, fh)?;
        if let Some(real) = self
            .pass
            .as_deref()
            .and_then(|p| p.getattr(ROOT, None).ok())
        {
            a.mtime = a.mtime.max(real.mtime);
            a.ctime = a.ctime.max(real.ctime);
        }
        Ok((a, ttl))
    }

    fn setattr(&self, req: Req, ino: u64, a: &SetAttr) -> Result<Attrs, FsError> {
        self.view.setattr(req, ino, a)
    }

    fn open(&self, req: Req, ino: u64, how: Opening<'_>) -> Result<Opened, FsError> {
        self.view.open(req, ino, how)
    }

    fn read(&self, req: Req, at: HandleAt, size: u32, flags: i32) -> Result<Vec<u8>, FsError> {
        self.view.read(req, at, size, flags)
    }

    fn release(&self, ino: u64, fh: u64) {
        self.view.release(ino, fh);
    }

    /// The root (`reftablefs unmount`, syncfs-like callers): the git directory, every
    /// worktree's view, then the main view.
    fn fsyncdir(&self, req: Req, ino: u64) -> Result<(), FsError> {
        if let Some(p) = &self.pass {
            p.fsyncdir(ROOT)?;
        }
        if let Some(w) = &self.wts {
            w.flush_all()?;
        }
        self.view.fsyncdir(req, ino)
    }

    fn opendir(&self, req: Req, ino: u64) -> Result<u64, FsError> {
        let fh = self.view.opendir(req, ino)?;
        if let Some(p) = &self.pass {
            if let Err(e) = p.open_root(fh) {
                self.view.releasedir(ino, fh);
                return Err(e);
            }
        }
        Ok(fh)
    }

    /// The ref view's names, then the passed-through ones.
    fn readdir(&self, req: Req, at: HandleAt, add: AddEntry<'_>) -> Result<(), FsError> {
        let Some(p) = &self.pass else {
            return self.view.readdir(req, at, add);
        };
        let (Some(mut all), Some(rest)) = (self.view.entries(at.fh), p.root_entries(at.fh)) else {
            return Err(FsError::EBADF);
        };
        // Names `packed-refs` links to are the view's (`state/packed_link.rs`).
        let view = self.view.shared();
        all.extend(rest.iter().filter(|e| !view.link_claims(&e.name)).cloned());
        crate::fs::backend::list_entries(ROOT, ROOT, at.offset, &all, add);
        Ok(())
    }

    fn releasedir(&self, ino: u64, fh: u64) {
        if let Some(p) = &self.pass {
            p.release_root(fh);
        }
        self.view.releasedir(ino, fh);
    }
}
