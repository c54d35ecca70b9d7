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
//! while mounted is served from its first request.
//!
//! Worktrees are also created and removed through the mount (issue 25.4), with the
//! result git 2.47 gives on the reftable repository. A files-backend `git worktree add`
//! makes `worktrees/<id>/` and writes `locked`, `gitdir` and `commondir` (passed through),
//! then `HEAD` holding the null id as a placeholder: that first write of a ref name makes
//! the worktree's stack as git 2.47 does (`Worktrees::make_stack`: `reftable/`, the
//! `HEAD` and `refs/heads` stubs), the placeholder is kept in the view's memory only
//! (`state/linked.rs`), and the `symbolic-ref`/`update-ref` of HEAD and the `reset` that
//! git then runs in the new worktree write its stack. `git worktree remove` and `prune`
//! (`rm -rf worktrees/<id>`) delete the view's refs and reflogs one by one, HEAD included;
//! the final `rmdir` removes the stack and the stubs when the view holds nothing
//! ([`Worktrees::remove`]). `lock`, `unlock`, `move` and `repair` only write `locked` and
//! `gitdir`, which are passed through. A worktree's `gitdir` names a directory outside
//! GITDIR: the mount never follows it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use fuser::Notifier;

use crate::fs::error::FsError;
use crate::fs::ino::{slot_of, Map, ROOT, SLOTS_MAX};
use crate::fs::record::{log_error, Recorder};
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
        self.shared.rec.refused("create", &shown, libc::EPERM, why);
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
    /// The mount's recorder, which every worktree's view records into.
    rec: Arc<Recorder>,
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

/// Whether `name`, at the top of a linked worktree's directory, is the common directory's
/// only (`packed-refs` and its `.lock` and `.new`): not one of the worktree's view, which
/// a files backend's worktree directory does not have (git reads and writes
/// `packed-refs` in the common directory only).
pub fn is_common_only(name: &[u8]) -> bool {
    matches!(
        name,
        b"packed-refs" | b"packed-refs.lock" | b"packed-refs.new"
    )
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

/// git 2.47's `HEAD` stub in a reftable git directory (`reftable_be_create_on_disk`).
const HEAD_STUB: &[u8] = b"ref: refs/heads/.invalid\n";
/// git 2.47's `refs/heads` stub file.
const REFS_STUB: &[u8] = b"this repository uses the reftable format\n";

/// `worktrees/<id>` (`rel` empty) or `worktrees/<id>/<rel>`, relative to the git directory.
fn worktree_path(id: &[u8], rel: &[u8]) -> Vec<u8> {
    let mut p = b"worktrees/".to_vec();
    p.extend_from_slice(id);
    if !rel.is_empty() {
        p.push(b'/');
        p.extend_from_slice(rel);
    }
    p
}

/// A directory beneath the git directory, reached with no symbolic link followed: its
/// descriptor and the path that names it while the descriptor is open
/// (`/proc/self/fd/N`); a name joined to that path is looked up in that very directory.
struct Beneath {
    _fd: std::os::fd::OwnedFd,
    path: PathBuf,
}

impl Beneath {
    fn open(pass: &crate::fs::passthrough::Passthrough, rel: &[u8]) -> Result<Beneath, FsError> {
        use std::os::fd::AsRawFd;
        let fd = pass.dir_beneath(rel)?;
        let path = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
        Ok(Beneath { _fd: fd, path })
    }
}

/// Unlinks `path` (never following a link: unlink does not); gone already is fine.
fn remove_if_present(path: &Path) -> Result<(), FsError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}

/// Whether the stack in `dir` (of a worktree the mount does not serve) holds no ref and
/// no reflog.
fn stack_is_empty(
    repo: &crate::repo::Repo,
    dir: &Path,
    opts: &MountOptions,
) -> Result<bool, FsError> {
    let ro = MountOptions {
        read_only: true,
        ..opts.clone()
    };
    let mut o = stack_source::open_dir(repo, dir, &ro)?;
    let mut rec = crate::format::RefRecord::default();
    if o.reader.first_ref_at_or_after(b"", &mut rec)? {
        return Ok(false);
    }
    let mut name = Vec::new();
    Ok(!o.reader.first_log_at_or_after(b"", &mut name)?)
}

impl Worktrees {
    /// The worktrees of the repository at `gitdir` (to be called before mounting); their
    /// stacks are found through `pass`, beneath the git directory.
    pub fn new(
        gitdir: &Path,
        pass: Arc<crate::fs::passthrough::Passthrough>,
        modes: Arc<crate::fs::attr::GitDirModes>,
        opts: &MountOptions,
        rec: Arc<Recorder>,
    ) -> crate::Result<Worktrees> {
        Ok(Worktrees {
            pass,
            modes,
            repo: crate::repo::Repo::open(gitdir)?,
            opts: opts.clone(),
            rec,
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
                    log::info!(
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
        let (stack, real) = match stack.filter(|s| s.path.join("tables.list").is_file()) {
            Some(s) => (s, real),
            None if create => {
                // A files-backend git creating the worktree (`git worktree add` writes
                // `worktrees/<id>/HEAD` once `gitdir` and `locked` are there): its stack is
                // made first, as git 2.47 makes it, under this lock (one maker per id).
                if self.opts.read_only {
                    return Err(FsError::EROFS);
                }
                self.make_stack(id)?;
                let s = StackDir::open(&self.pass, id).ok_or(FsError::EIO)?;
                let real = identity(&s.path);
                (s, real)
            }
            None => return Err(FsError::ENOENT),
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

    /// Makes worktree `id`'s stack as git 2.47's `git worktree add` does before the first
    /// update of its HEAD (`reftable_be_create_on_disk`): `reftable/` (empty: the first
    /// commit writes `tables.list`), the `HEAD` stub and `refs/heads` stub that older gits
    /// read, each only where it is missing, with git 2.47's modes (the creating git's
    /// umask, read off `worktrees/<id>` itself, and `core.sharedRepository`). Everything is reached
    /// beneath the git directory with no symbolic link followed (`dir_beneath`, and
    /// `O_EXCL` for new files).
    fn make_stack(&self, id: &[u8]) -> Result<(), FsError> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
        let top = worktree_path(id, b"");
        let base = Beneath::open(&self.pass, &top)?;
        // git 2.47: `0777`/`0666` less the creating git's umask — which the mode of
        // `worktrees/<id>` shows, as git 2.39 made it with a plain mkdir — then
        // `adjust_shared_perm` (`core.sharedRepository`; directories get setgid).
        let umasked = std::fs::metadata(&base.path)?.permissions().mode() & 0o777;
        let shared = self.repo.settings.shared;
        let (dmode, fmode) = if shared == crate::lockfile::SharedRepository::Umask {
            (umasked, umasked & 0o666)
        } else {
            (
                shared.calc_perm(umasked) | libc::S_ISGID,
                shared.calc_perm(umasked & 0o666),
            )
        };
        let mkdir = |rel: &[u8], name: &str| -> Result<(), FsError> {
            match std::fs::DirBuilder::new()
                .mode(dmode)
                .create(base.path.join(name))
            {
                Ok(()) => {
                    // The exact mode (ours, not the daemon's umask), on the directory made.
                    let d = Beneath::open(&self.pass, &worktree_path(id, rel))?;
                    std::fs::set_permissions(&d.path, std::fs::Permissions::from_mode(dmode))?;
                    Ok(())
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
                Err(e) => Err(e.into()),
            }
        };
        let stub = |dir: &Path, name: &str, text: &[u8]| -> Result<(), FsError> {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(fmode)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(dir.join(name));
            match f {
                Ok(mut f) => {
                    use std::io::Write;
                    f.set_permissions(std::fs::Permissions::from_mode(fmode))?;
                    f.write_all(text)?;
                    Ok(())
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
                Err(e) => Err(e.into()),
            }
        };
        mkdir(b"reftable", "reftable")?;
        stub(&base.path, "HEAD", HEAD_STUB)?;
        mkdir(b"refs", "refs")?;
        let refs = Beneath::open(&self.pass, &worktree_path(id, b"refs"))?;
        stub(&refs.path, "heads", REFS_STUB)?;
        log::info!(
            "reftablefs: worktree {} created through the mount: made its stack as git 2.47 does",
            String::from_utf8_lossy(id)
        );
        Ok(())
    }

    /// Before `rmdir worktrees/<id>` (the end of git's `rm -rf` of a worktree in
    /// `git worktree remove` and `prune`): when the directory holds only what git 2.47
    /// keeps there for the worktree's stack — `reftable/`, the `HEAD` stub, `refs/` with
    /// the `refs/heads` stub — and the worktree's view holds nothing (every ref, HEAD
    /// included, and every reflog deleted through it, nothing pending: a directory of a
    /// files backend is empty then), the view is retired and those are removed, so the
    /// rmdir that follows succeeds as on an empty directory. Anything else in the
    /// directory is left as it is (the rmdir then fails `ENOTEMPTY`, as on disk); a view
    /// that still holds something gives `ENOTEMPTY` at once.
    pub fn remove(&self, id: &[u8]) -> Result<(), FsError> {
        if !valid_id(id) {
            return Ok(());
        }
        let Ok(base) = Beneath::open(&self.pass, &worktree_path(id, b"")) else {
            return Ok(());
        };
        let stub_ok = |dir: &Path, name: &str, text: &[u8]| -> bool {
            use std::io::Read;
            use std::os::unix::fs::OpenOptionsExt;
            let mut content = Vec::new();
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(dir.join(name))
                .and_then(|f| f.take(4096).read_to_end(&mut content))
                .is_ok()
                && content == text
        };
        let mut has_stack = false;
        let mut has_refs = false;
        for e in std::fs::read_dir(&base.path)? {
            let e = e?;
            let is_dir = e.file_type()?.is_dir();
            match e.file_name().as_encoded_bytes() {
                b"reftable" if is_dir => has_stack = true,
                b"HEAD" if stub_ok(&base.path, "HEAD", HEAD_STUB) => {}
                b"refs" if is_dir => has_refs = true,
                _ => return Ok(()),
            }
        }
        let refs = if has_refs {
            let r = Beneath::open(&self.pass, &worktree_path(id, b"refs"))?;
            for e in std::fs::read_dir(&r.path)? {
                if e?.file_name() != "heads" || !stub_ok(&r.path, "heads", REFS_STUB) {
                    return Ok(());
                }
            }
            Some(r)
        } else {
            None
        };
        let mut g = self.lock();
        let stack = if has_stack {
            let s = Beneath::open(&self.pass, &worktree_path(id, b"reftable"))?;
            let served = g.by_id.get(id).and_then(|&k| g.slots.get(k)).cloned();
            let empty = match &served {
                Some(w) => w.shared.holds_nothing()?,
                None => stack_is_empty(&self.repo, &s.path, &self.opts)?,
            };
            if !empty {
                return Err(FsError::ENOTEMPTY);
            }
            if let Some(w) = served {
                // Retired: its threads see `stopping` and end (joined at unmount); its
                // slot is never reused, so numbers the kernel still holds stay its own.
                g.by_id.remove(id);
                w.shared.shutdown();
                w.threads
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .join_writer();
                log::info!(
                    "reftablefs: worktree {} removed through the mount: its stack goes too",
                    String::from_utf8_lossy(id)
                );
            }
            Some(s)
        } else {
            None
        };
        if let Some(s) = stack {
            for e in std::fs::read_dir(&s.path)? {
                let name = e?.file_name();
                std::fs::remove_file(s.path.join(&name))?;
            }
            std::fs::remove_dir(base.path.join("reftable"))?;
        }
        if let Some(r) = refs {
            remove_if_present(&r.path.join("heads"))?;
            std::fs::remove_dir(base.path.join("refs"))?;
        }
        remove_if_present(&base.path.join("HEAD"))?;
        Ok(())
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
            self.rec.clone(),
        );
        shared.set_linked_worktree();
        // Its broken refs and symbolic links, beside its stack (`broken.rs`).
        let top = Beneath::open(&self.pass, &worktree_path(id, b""))?;
        let store = crate::fs::broken::BrokenRefs::open(&top.path)
            .map_err(|e| fail("open worktree broken refs", &e))?;
        shared.keep_broken_refs(store);
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
        log::info!(
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
    use crate::fs::test_support::assert_splits;

    #[test]
    fn worktree_paths_follow_git() {
        assert_splits(
            is_worktree_path,
            &[
                "HEAD",
                "HEAD.lock",
                "ORIG_HEAD",
                "refs",
                "refs/bisect",
                "refs/bisect/bad",
                "refs/bisect/bad.lock",
                "refs/worktree/a/b",
                "refs/rewritten/onto",
                "logs",
                "logs/HEAD",
                "logs/refs",
                "logs/refs/bisect/bad",
            ],
            &[
                "refs/heads",
                "refs/heads/main",
                "refs/tags/v1",
                "refs/bisectx",
                "refs/bisectx/a",
                "logs/refs/heads/main",
            ],
        );
    }
}
