//! Linked worktrees: `MNT/worktrees/<id>/` serves that worktree's `HEAD`, its other root
//! refs (`ORIG_HEAD`, `BISECT_*`…), its per-worktree refs (`refs/bisect/`,
//! `refs/worktree/`, `refs/rewritten/`) and their reflogs (`logs/…`) from the worktree's
//! own stack (`GITDIR/worktrees/<id>/reftable/`, where git 2.47 keeps it); everything else
//! of that directory (`gitdir`, `commondir`, `index`, `locked`, …) is passed through.
//!
//! Each served worktree is one more [`Shared`] — its own reader and writer sources,
//! batcher and watcher — exactly as the main view, started at the first request that
//! reaches one of its ref names. Its inode numbers are the main view's scheme shifted into
//! their own range: bit 62 set, the worktree's slot in bits 48..62, the view's own
//! number (at most `ino::REF_INO_MAX`) below; its root (`ROOT` inside the view) is the
//! passed-through directory `worktrees/<id>` itself. [`Map`] translates both ways.
//!
//! A worktree is served once its stack exists (`tables.list`), so one that git 2.47 adds
//! while mounted is served from its first request. Creating a worktree through the mount
//! (a files-backend `git worktree add` writes `worktrees/<id>/HEAD` holding the null id as a
//! placeholder) is refused with EPERM and a log line before anything is created: git's
//! cleanup then leaves nothing that git 2.47 could not open.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use fuser::Notifier;

use crate::fs::error::FsError;
use crate::fs::ino::{slot_of, Map, ROOT, SLOTS_MAX};
use crate::fs::record::log_error;
use crate::fs::state::Shared;
use crate::fs::{lifecycle, stack_source, MountOptions};

/// One served linked worktree.
pub struct Worktree {
    pub id: Vec<u8>,
    pub shared: Arc<Shared>,
    slot: u64,
    /// (st_dev, st_ino) of the stack's directory: a worktree removed and made again under
    /// the same id has another.
    real: (u64, u64),
    /// The stack directory's descriptor, which its `/proc/self/fd/N` path names.
    _stack: std::os::fd::OwnedFd,
    /// The mount's inode of `worktrees/<id>` as last seen (the passthrough may give the
    /// directory a new number after the kernel forgot it).
    dir: Arc<AtomicU64>,
    threads: Mutex<lifecycle::Threads>,
}

impl Worktree {
    /// Refuses (EPERM, logged) to create `name` in the view's directory `parent` (its own
    /// number) unless the path is one of the worktree's: a name at its top (`HEAD`,
    /// `ORIG_HEAD`, …, `refs`, `logs`), a per-worktree ref (`refs/bisect/…`,
    /// `refs/worktree/…`, `refs/rewritten/…`) or its reflog. A shared ref written here
    /// would land in the worktree's stack, where git ignores it.
    pub fn check_creatable(&self, parent: u64, name: &[u8]) -> Result<(), FsError> {
        let mut path = Vec::new();
        if parent != ROOT && self.shared.lock().inodes.path(parent, &mut path).is_none() {
            return Err(FsError::ESTALE);
        }
        let path = crate::fs::view::join(&path, name);
        if is_worktree_path(&path) {
            return Ok(());
        }
        let mut shown = b"worktrees/".to_vec();
        shown.extend_from_slice(&self.id);
        shown.push(b'/');
        shown.extend_from_slice(&path);
        let why = "only HEAD, root refs and per-worktree refs (refs/bisect/, refs/worktree/, \
                   refs/rewritten/) and their reflogs live in a worktree's stack: shared refs \
                   are written in the common directory";
        log_error("create", &shown, &why);
        crate::fs::record::recorder().refused("create", &shown, libc::EPERM, why);
        Err(FsError::EPERM)
    }

    /// The map of this view, with its directory's current inode.
    pub fn map(&self) -> Map {
        Map::worktree(self.slot, self.dir.load(Ordering::SeqCst))
    }
}

#[derive(Default)]
struct Inner {
    by_id: HashMap<Vec<u8>, usize>,
    slots: Vec<Arc<Worktree>>,
}

/// The linked worktrees of one mount.
pub struct Worktrees {
    /// The passthrough, through which each worktree's stack directory is reached beneath
    /// the git directory.
    pass: Arc<crate::fs::passthrough::Passthrough>,
    /// GITDIR's modes, which every view shows.
    modes: Arc<crate::fs::attr::GitDirModes>,
    /// The repository's settings, read before mounting (`stack_source::open_dir`).
    repo: crate::repo::Repo,
    opts: MountOptions,
    notifier: OnceLock<Notifier>,
    inner: Mutex<Inner>,
}

/// git's `is_per_worktree_ref` (refs.c): refs below `refs/worktree/`, `refs/bisect/`
/// and `refs/rewritten/` belong to each worktree.
pub fn is_per_worktree_ref(name: &[u8]) -> bool {
    [&b"refs/worktree/"[..], b"refs/bisect/", b"refs/rewritten/"]
        .iter()
        .any(|p| name.starts_with(p))
}

/// Whether `path` (relative to a worktree's directory) may be created in its ref view:
/// a top-level name, `refs`, a per-worktree ref or directory on the way to one, and the
/// same below `logs/` (`logs/HEAD`, `logs/refs/bisect/…`).
fn is_worktree_path(path: &[u8]) -> bool {
    let rel = path.strip_prefix(b"logs/").unwrap_or(path);
    if !rel.contains(&b'/') || rel == b"refs" {
        return true;
    }
    let mut with_slash = rel.to_vec();
    with_slash.push(b'/');
    is_per_worktree_ref(rel) || is_per_worktree_ref(&with_slash)
}

/// (st_dev, st_ino) of `dir`, if it exists.
fn identity(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir).ok().map(|m| (m.dev(), m.ino()))
}

/// A worktree's stack directory, reached beneath the git directory with no symbolic link
/// followed (a `worktrees/<id>` swapped for a link to a directory outside is never
/// served): its descriptor, and the path that names it for as long as the descriptor is
/// open (`/proc/self/fd/N`, as `--over` names the real `.git`).
struct StackDir {
    fd: std::os::fd::OwnedFd,
    path: PathBuf,
}

impl StackDir {
    fn open(pass: &crate::fs::passthrough::Passthrough, id: &[u8]) -> Option<StackDir> {
        use std::os::fd::AsRawFd;
        let mut rel = b"worktrees/".to_vec();
        rel.extend_from_slice(id);
        rel.extend_from_slice(b"/reftable");
        let fd = pass.dir_beneath(&rel).ok()?;
        let path = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
        Some(StackDir { fd, path })
    }
}

/// Whether `id` can name a worktree directory (one path component).
fn valid_id(id: &[u8]) -> bool {
    crate::fs::view::is_component(id) && id != b"." && id != b".."
}

impl Worktrees {
    /// The worktrees of the repository at `gitdir` (to be called before mounting); their
    /// stacks are found through `pass`, beneath the git directory.
    pub fn new(
        gitdir: &Path,
        pass: Arc<crate::fs::passthrough::Passthrough>,
        modes: Arc<crate::fs::attr::GitDirModes>,
        opts: &MountOptions,
    ) -> crate::Result<Worktrees> {
        Ok(Worktrees {
            pass,
            modes,
            repo: crate::repo::Repo::open(gitdir)?,
            opts: opts.clone(),
            notifier: OnceLock::new(),
            inner: Mutex::new(Inner::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hands over the session's notifier (before the session runs): watchers of worktrees
    /// started later use it.
    pub fn set_notifier(&self, n: Notifier) {
        let _ = self.notifier.set(n);
    }

    /// The worktree view owning the mount inode `ino` (an `ino::WT_BIT` number).
    pub fn by_ino(&self, ino: u64) -> Option<Arc<Worktree>> {
        self.lock().slots.get(slot_of(ino)).cloned()
    }

    /// The view of worktree `id`, whose directory is the mount's inode `dir`; started now
    /// if it is not served yet. `create`: the request writes a ref name, so a worktree
    /// without a stack (being created by a files-backend git) gets one as git 2.47 makes
    /// it. Without a stack and without `create`: ENOENT.
    pub fn serve(&self, id: &[u8], dir: u64, create: bool) -> Result<Arc<Worktree>, FsError> {
        if !valid_id(id) {
            return Err(FsError::ENOENT);
        }
        let stack = StackDir::open(&self.pass, id);
        let real = stack.as_ref().and_then(|s| identity(&s.path));
        let mut g = self.lock();
        if let Some(&k) = g.by_id.get(id) {
            let w = g.slots.get(k).cloned().ok_or(FsError::EIO)?;
            match real {
                Some(r) if r == w.real => {
                    w.dir.store(dir, Ordering::SeqCst);
                    return Ok(w);
                }
                None => return Err(FsError::ENOENT),
                Some(_) => {
                    // The worktree was removed and another one made under its id (by git
                    // 2.47 on the real directory): the old view retires, a new one starts.
                    // The old view is flushed without this lock, which every worktree
                    // request takes (no request waits for its commit); its pending edits
                    // were for the removed stack and cannot meet the new one's.
                    eprintln!(
                        "reftablefs: worktree {} was re-created: serving its new stack",
                        String::from_utf8_lossy(id)
                    );
                    g.by_id.remove(id);
                    drop(g);
                    let _ = w.shared.flush_all();
                    w.shared.shutdown();
                    return self.serve(id, dir, create);
                }
            }
        }
        let Some(stack) = stack.filter(|s| s.path.join("tables.list").is_file()) else {
            if create {
                // A files-backend git creating a worktree (`git worktree add` writes
                // `worktrees/<id>/HEAD` as a plain file holding the null id, which no
                // stack can take): refused before anything is created, so git's own
                // cleanup leaves nothing behind.
                let mut path = b"worktrees/".to_vec();
                path.extend_from_slice(id);
                let why = "creating a linked worktree through the mount is not supported \
                           (its HEAD would need a stack of its own): run `git worktree add` \
                           with git >= 2.45 on the real git directory, then use the worktree \
                           through the mount";
                return Err(crate::fs::record::refuse_for(
                    "create",
                    &path,
                    libc::EPERM,
                    why,
                ));
            }
            return Err(FsError::ENOENT);
        };
        if g.slots.len() >= SLOTS_MAX {
            log_error(
                "serve worktree",
                id,
                &format!("this mount already serves {SLOTS_MAX} worktrees; remount"),
            );
            return Err(FsError::ENOSPC);
        }
        let k = g.slots.len();
        let w = self.start(id, dir, k as u64, stack, real.unwrap_or_default())?;
        g.by_id.insert(id.to_vec(), k);
        g.slots.push(w.clone());
        Ok(w)
    }

    /// Opens the worktree's stack and starts its batcher and watcher.
    fn start(
        &self,
        id: &[u8],
        dir: u64,
        slot: u64,
        stack_dir: StackDir,
        real: (u64, u64),
    ) -> Result<Arc<Worktree>, FsError> {
        let stack = stack_dir.path.as_path();
        let fail = |what: &str, e: &dyn std::fmt::Display| {
            log_error(what, stack.as_os_str().as_encoded_bytes(), e);
            FsError::EIO
        };
        let o = stack_source::open_dir(&self.repo, stack, &self.opts)
            .map_err(|e| fail("open worktree stack", &e))?;
        let writer = if self.opts.read_only { None } else { o.writer };
        let shared = lifecycle::new_view(
            o.reader,
            writer.is_none(),
            o.log,
            stack,
            &self.opts,
            Some(self.modes.clone()),
        );
        let dir = Arc::new(AtomicU64::new(dir));
        let d = dir.clone();
        let map = move |ino: u64| Map::worktree(slot, d.load(Ordering::SeqCst)).out(ino);
        let threads = lifecycle::start(
            &shared,
            writer,
            stack,
            self.notifier.get().cloned(),
            Box::new(map),
        )
        .map_err(|e| fail("start worktree threads", &e))?;
        eprintln!(
            "reftablefs: serving worktree {} from {}",
            String::from_utf8_lossy(id),
            stack.display()
        );
        Ok(Arc::new(Worktree {
            id: id.to_vec(),
            shared,
            slot,
            real,
            _stack: stack_dir.fd,
            dir,
            threads: Mutex::new(threads),
        }))
    }

    /// Every served worktree.
    pub fn all(&self) -> Vec<Arc<Worktree>> {
        self.lock().slots.clone()
    }

    /// Writes every pending batch of every worktree (fsync of the root, unmount).
    pub fn flush_all(&self) -> Result<(), FsError> {
        let mut r = Ok(());
        for w in self.all() {
            if let Err(e) = w.shared.flush_all() {
                r = Err(e);
            }
        }
        r
    }

    /// Unmounted: writes what is pending and stops every worktree's threads.
    pub fn stop_all(&self) -> Result<(), FsError> {
        let mut r = Ok(());
        for w in self.all() {
            let threads = std::mem::take(&mut *w.threads.lock().unwrap_or_else(|p| p.into_inner()));
            if let Err(e) = threads.stop(&w.shared) {
                r = Err(e);
            }
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worktree_paths_follow_git() {
        for ok in [
            &b"HEAD"[..],
            b"HEAD.lock",
            b"ORIG_HEAD",
            b"refs",
            b"refs/bisect",
            b"refs/bisect/bad",
            b"refs/bisect/bad.lock",
            b"refs/worktree/a/b",
            b"refs/rewritten/onto",
            b"logs",
            b"logs/HEAD",
            b"logs/refs",
            b"logs/refs/bisect/bad",
        ] {
            assert!(is_worktree_path(ok), "{}", String::from_utf8_lossy(ok));
        }
        for no in [
            &b"refs/heads"[..],
            b"refs/heads/main",
            b"refs/tags/v1",
            b"refs/bisectx",
            b"refs/bisectx/a",
            b"logs/refs/heads/main",
        ] {
            assert!(!is_worktree_path(no), "{}", String::from_utf8_lossy(no));
        }
    }
}
