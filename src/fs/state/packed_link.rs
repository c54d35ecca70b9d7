//! `packed-refs` made a symbolic link to another file of GITDIR, as a files `.git` has it
//! (t3210's `mv packed-refs my-deviant-packed-refs; ln -s my-deviant-packed-refs
//! packed-refs`). The view ADOPTS the link's target `T` (a plain name directly in GITDIR):
//!
//! * `symlink(T, packed-refs)` (only while `packed-refs` does not exist): `T`'s content on
//!   disk, if it exists, becomes the view's `packed-refs`, committed to the stack exactly
//!   as a file renamed over `packed-refs` is (junk is kept as junk); git 2.47 reads the
//!   stack only, so the refs land there.
//! * While the link exists, `packed-refs` is that link (`lstat`, `readlink`), and the names
//!   `T`, `T.lock` and `T.new` at the top of the mount are the view's `packed-refs`,
//!   `packed-refs.lock` and `packed-refs.new` (git 2.39 and go-git lock and write the
//!   resolved name): the router sends them to the view ([`Shared::link_claims`]) and the
//!   view's paths are aliased ([`Inner::link_alias`]). The names `packed-refs.lock` and
//!   `packed-refs.new` are then no files (`EINVAL` at a create). The file `T` on disk is
//!   shadowed and left as it was (it is stale until the link goes).
//! * `rm packed-refs` removes the link: what the view's `packed-refs` shows is written to
//!   `GITDIR/T` (temporary file, `fsync`, `rename`, directory `fsync`; removed when the
//!   view's `packed-refs` does not exist), then the packed-only refs are deleted, as `rm
//!   packed-refs` deletes them. `GITDIR/T` is replaced or removed only when it is what was
//!   adopted (its size and fingerprint are kept) or already what is to be written:
//!   changed on disk behind the mount, the unlink is refused (`EBUSY`) and nothing is
//!   lost. `rm T` while linked is today's `rm packed-refs` (the link stays, dangling).
//! * The link is kept across mounts in [`LINK_FILE`] beside the stack (written atomically
//!   at `symlink`, removed at its `unlink`, read defensively when the view starts).
//! * Anything else is refused at the call: a target with a `/`, `.`, `..`, a name the ref
//!   view or the mount owns (`HEAD`, `refs`, `config`, `reftablefs-*`, …), one that is a
//!   directory or a link on disk; `rename` to or from the link (`EPERM`).

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use fuser::FileAttr;

use crate::fs::durable;
use crate::fs::error::{FsError, Refusal};
use crate::fs::ino::ROOT;
use crate::fs::protocol::Caller;
use crate::fs::reserve;
use crate::fs::view::{self, Kind, Listing};

use super::{Inner, Shared};

/// The file beside the stack (`GITDIR/reftablefs-packed-link`; its name starts with
/// [`crate::fs::protocol::STATE_FILE`], so the mount never shows it) that keeps the link.
pub const LINK_FILE: &str = "reftablefs-packed-link";
/// Its temporary name while it is written.
const LINK_TEMP: &str = "reftablefs-packed-link.tmp";
/// The temporary name of `T` while it is written when the link goes.
const TARGET_TEMP: &str = "reftablefs-packed-link.out";
/// The first line of [`LINK_FILE`].
const MAGIC: &[u8] = b"# reftablefs packed-refs link 1\n";
/// The most [`LINK_FILE`] holds (a name of at most 255 bytes, hex, and two numbers).
const LINK_FILE_MAX: usize = 1024;
/// The view's path of the link itself (a NUL: no name the kernel sends can be it).
pub(super) const LINK_PATH: &[u8] = b"packed-refs\0link";

/// The link: its target and what `GITDIR/target` was when it was adopted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Link {
    pub target: Vec<u8>,
    /// Size and fingerprint of the file adopted (`None`: it did not exist).
    pub adopted: Option<(u64, u64)>,
}

/// What the router and the link's I/O need outside the state lock.
#[derive(Default)]
pub(crate) struct LinkShared {
    /// The target while the link exists (a leaf lock: taken alone by the router, or under
    /// the state lock).
    target: RwLock<Option<Arc<[u8]>>>,
    /// GITDIR (as the view reaches it: `/proc/self/fd/N` under `--over`).
    gitdir: OnceLock<PathBuf>,
    /// Serializes writes of [`LINK_FILE`] and of the target.
    io: Mutex<()>,
    /// The last write of [`LINK_FILE`] failed: it is tried again with the packed layer's.
    unsaved: AtomicBool,
}

/// Why `target` cannot be adopted as `packed-refs` (`None`: it can).
fn target_refused(target: &[u8]) -> Option<&'static str> {
    if !view::is_component(target) || target.len() > 240 {
        return Some("packed-refs links only to a plain name directly in the git directory");
    }
    let owned = |n: &[u8]| {
        crate::fs::passthrough::is_ref_name_at_root(n)
            || n.starts_with(b"reftable")
            || n == b"config"
            || n == b"config.lock"
            || crate::fs::ino::is_status_name(ROOT, n)
    };
    let with = |suffix: &[u8]| [target, suffix].concat();
    if owned(target) || owned(&with(b".lock")) || owned(&with(b".new")) {
        return Some(
            "packed-refs links only to a name that neither the ref view nor the mount owns",
        );
    }
    None
}

/// `data`'s size and fingerprint.
fn mark(data: &[u8]) -> (u64, u64) {
    (data.len() as u64, super::handles::fingerprint(data))
}

fn refusal(errno: i32, why: impl Into<String>) -> Refusal {
    Refusal::new(errno, why.into())
}

/// The content of `GITDIR/name` (`None`: it does not exist); a directory, a link or
/// anything but a file is refused, as is one larger than a `packed-refs` may be.
fn read_target(gitdir: &Path, name: &[u8]) -> Result<Option<Vec<u8>>, Refusal> {
    use std::os::unix::ffi::OsStrExt;
    let path = gitdir.join(std::ffi::OsStr::from_bytes(name));
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(refusal(
                libc::EPERM,
                "the link's target is itself a symbolic link",
            ))
        }
        Err(e) => {
            return Err(refusal(
                libc::EIO,
                format!("reading the link's target: {e}"),
            ))
        }
    };
    let meta = file
        .metadata()
        .map_err(|e| refusal(libc::EIO, format!("the link's target: {e}")))?;
    if !meta.is_file() {
        return Err(refusal(libc::EPERM, "the link's target is no regular file"));
    }
    let max = crate::fs::budget::SCRATCH_FILE_MAX;
    let mut data = Vec::new();
    file.take(max as u64 + 1)
        .read_to_end(&mut data)
        .map_err(|e| refusal(libc::EIO, format!("reading the link's target: {e}")))?;
    if data.len() > max {
        return Err(refusal(
            libc::EFBIG,
            format!("the link's target is larger than {} MiB", max >> 20),
        ));
    }
    Ok(Some(data))
}

/// [`LINK_FILE`]'s content for `link`.
fn encode(link: &Link) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(b"T ");
    for b in &link.target {
        out.extend_from_slice(format!("{b:02x}").as_bytes());
    }
    out.push(b'\n');
    if let Some((len, fp)) = link.adopted {
        out.extend_from_slice(format!("A {len} {fp:016x}\n").as_bytes());
    }
    out
}

/// The link [`LINK_FILE`]'s content names, if it is valid.
fn decode(data: &[u8]) -> Result<Link, &'static str> {
    let rest = data.strip_prefix(MAGIC).ok_or("no magic line")?;
    let text = std::str::from_utf8(rest).map_err(|_| "not text")?;
    let mut lines = text.lines();
    let hex = lines
        .next()
        .and_then(|l| l.strip_prefix("T "))
        .ok_or("no target line")?;
    if hex.len() % 2 != 0 {
        return Err("odd target");
    }
    let target = (0..hex.len() / 2)
        .map(|i| {
            hex.get(2 * i..2 * i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect::<Option<Vec<u8>>>()
        .ok_or("target not hex")?;
    if target_refused(&target).is_some() {
        return Err("target not adoptable");
    }
    let adopted = match lines.next() {
        None => None,
        Some(l) => {
            let mut f = l.strip_prefix("A ").ok_or("bad line")?.split(' ');
            let len = f.next().and_then(|s| s.parse().ok()).ok_or("bad size")?;
            let fp = f
                .next()
                .and_then(|s| u64::from_str_radix(s, 16).ok())
                .ok_or("bad fingerprint")?;
            Some((len, fp))
        }
    };
    if lines.next().is_some() {
        return Err("trailing lines");
    }
    Ok(Link { target, adopted })
}

impl Inner {
    /// The view's path for the path `path` the kernel named, while `packed-refs` is a link:
    /// `T` → `packed-refs`, `T.lock`/`T.new` → `packed-refs.lock`/`.new`, `packed-refs` →
    /// the link ([`LINK_PATH`]); `packed-refs.lock`/`.new` are no names then (`EINVAL`).
    pub(super) fn link_alias(&self, path: &mut Vec<u8>) -> Result<(), FsError> {
        let Some(link) = &self.packed_link else {
            return Ok(());
        };
        if path.contains(&b'/') {
            return Ok(());
        }
        let t = link.target.as_slice();
        let new: &[u8] = match path.strip_prefix(t) {
            Some(b"") => b"packed-refs",
            Some(b".lock") => b"packed-refs.lock",
            Some(b".new") => b"packed-refs.new",
            _ => match path.as_slice() {
                b"packed-refs" => LINK_PATH,
                b"packed-refs.lock" | b"packed-refs.new" => return Err(FsError::EINVAL),
                _ => return Ok(()),
            },
        };
        *path = new.to_vec();
        Ok(())
    }

    /// The kind of the link's path (`None`: `path` is not it).
    pub(super) fn link_kind(&self, path: &[u8]) -> Option<Option<Kind>> {
        (path == LINK_PATH).then(|| self.packed_link.as_ref().map(|_| Kind::Link))
    }

    /// A scratch file's content, or the link's target.
    pub(super) fn file_content(&self, path: &[u8]) -> Option<&[u8]> {
        match (&self.packed_link, path == LINK_PATH) {
            (Some(l), true) => Some(&l.target),
            (None, true) => None,
            _ => self.w.files.get(path).map(Vec::as_slice),
        }
    }

    /// The root's listing as the kernel names it while `packed-refs` is a link.
    pub(super) fn link_listing(&self, dir: &[u8], listing: Arc<Listing>) -> Arc<Listing> {
        let Some(link) = self.packed_link.as_ref().filter(|_| dir.is_empty()) else {
            return listing;
        };
        let t = &link.target;
        let mut out: Vec<view::Entry> = listing
            .to_entries()
            .into_iter()
            .map(|mut e| {
                let suffix: Option<&[u8]> = match &*e.name {
                    b"packed-refs" => Some(b""),
                    b"packed-refs.lock" => Some(b".lock"),
                    b"packed-refs.new" => Some(b".new"),
                    _ => None,
                };
                if let Some(s) = suffix {
                    e.name = [t.as_slice(), s].concat().into();
                }
                e
            })
            .collect();
        out.push(view::Entry {
            name: b"packed-refs".as_slice().into(),
            kind: Kind::Link,
        });
        view::finish_listing(&mut out);
        Arc::new(Listing::from_entries(&out))
    }

    /// Sets the link (under the state lock, with its copy for the router), and queues
    /// the kernel's entries of the names it moves between the trees for invalidation.
    fn set_link(&mut self, shared: &LinkShared, link: Option<Link>) {
        let names = link.as_ref().or(self.packed_link.as_ref()).map(|l| {
            let t = l.target.clone();
            [
                t.clone(),
                [&t, b".lock".as_slice()].concat(),
                [&t, b".new".as_slice()].concat(),
            ]
        });
        *shared.target.write().unwrap_or_else(|p| p.into_inner()) =
            link.as_ref().map(|l| Arc::from(l.target.as_slice()));
        self.packed_link = link;
        for n in names.into_iter().flatten().chain([b"packed-refs".to_vec()]) {
            if self.stale_names.len() < 4096 {
                self.stale_names.push((ROOT, n));
            }
        }
        self.entries_changed(b"", true);
    }

    /// What the view's `packed-refs` shows now (`None`: it does not exist).
    fn packed_shown(&mut self) -> Result<Option<Arc<Vec<u8>>>, FsError> {
        if !self.packed_refs_exists()? {
            return Ok(None);
        }
        self.packed_refs(b"packed-refs").map(Some)
    }
}

impl Shared {
    /// Whether the name `name` at the top of the mount is the ref view's because
    /// `packed-refs` links to it (see the module's documentation).
    pub fn link_claims(&self, name: &[u8]) -> bool {
        let g = self.link.target.read().unwrap_or_else(|p| p.into_inner());
        let Some(t) = g.as_deref() else {
            return false;
        };
        matches!(name.strip_prefix(t), Some(b"" | b".lock" | b".new"))
    }

    /// Whether `packed-refs` is a symbolic link now.
    pub fn link_claims_any(&self) -> bool {
        self.link
            .target
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// Reads the link kept in `gitdir` (if any) and keeps it there from now on. Junk is
    /// ignored with a log line (no link).
    pub(super) fn load_packed_link(&self, gitdir: &Path) {
        let _ = self.link.gitdir.set(gitdir.to_path_buf());
        let path = gitdir.join(LINK_FILE);
        let data = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(&path)
            .and_then(|f| {
                let mut d = Vec::new();
                f.take(LINK_FILE_MAX as u64 + 1).read_to_end(&mut d)?;
                Ok(d)
            });
        let link = match data {
            Ok(d) if d.len() > LINK_FILE_MAX => Err("too large".to_string()),
            Ok(d) => decode(&d).map_err(str::to_string),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return,
            Err(e) => Err(e.to_string()),
        };
        match link {
            Ok(l) => {
                let mut g = self.lock();
                g.set_link(&self.link, Some(l));
            }
            Err(e) => log::warn!(
                "reftablefs: {}: {e}; packed-refs is no symbolic link",
                path.display()
            ),
        }
    }

    /// Writes [`LINK_FILE`] for the link now (removes it when there is none).
    fn save_packed_link(&self, gitdir: &Path) -> Result<(), Refusal> {
        let _io = self.link.io.lock().unwrap_or_else(|p| p.into_inner());
        let link = self.lock().packed_link.clone();
        let r = match &link {
            Some(l) => durable::replace(
                gitdir,
                Path::new(LINK_TEMP),
                Path::new(LINK_FILE),
                &encode(l),
            ),
            None => match std::fs::remove_file(gitdir.join(LINK_FILE)) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                r => r.and_then(|()| durable::sync_dir(gitdir)),
            },
        };
        self.link.unsaved.store(r.is_err(), Ordering::Relaxed);
        r.map_err(|e| refusal(libc::EIO, format!("keeping the packed-refs link: {e}")))
    }

    /// Writes [`LINK_FILE`] again if its last write failed (with the packed layer's save,
    /// at most once a second and at unmount); a failure is logged.
    pub(super) fn retry_packed_link(&self) {
        if !self.link.unsaved.load(Ordering::Relaxed) {
            return;
        }
        if let Some(gitdir) = self.link.gitdir.get() {
            if let Err(r) = self.save_packed_link(gitdir) {
                log::error!("reftablefs: {}", r.reason);
            }
        }
    }

    /// `symlink(target, packed-refs)`: the link made and `target` adopted (see the
    /// module's documentation).
    pub(crate) fn symlink_packed_refs(
        &self,
        parent: u64,
        name: &[u8],
        target: &[u8],
        pid: u32,
    ) -> Result<FileAttr, FsError> {
        if self.read_only() {
            return Err(FsError::EROFS);
        }
        let actor = self.tgid(pid);
        let refuse = |r: Refusal| self.rec.refuse("symlink", b"packed-refs", r);
        if let Some(why) = target_refused(target) {
            return Err(refuse(refusal(libc::EPERM, why)));
        }
        let Some(gitdir) = self.link.gitdir.get() else {
            return Err(refuse(refusal(
                libc::EPERM,
                "packed-refs is a symbolic link only where the view keeps its state in a git \
                 directory",
            )));
        };
        // What the target holds now, read before the state is locked.
        let found = read_target(gitdir, target).map_err(refuse)?;
        let mut g = self.begin_change(true)?;
        if g.is_linked_worktree() {
            return Err(refuse(refusal(
                libc::EPERM,
                "a worktree has no packed-refs",
            )));
        }
        if g.packed_link.is_some() || g.packed_refs_exists()? {
            return Err(FsError::EEXIST);
        }
        let size = found.as_ref().map_or(0, Vec::len);
        g.promise("symlink", b"packed-refs", reserve::edit_bytes(11, size))?;
        if let Some(content) = &found {
            let who = Caller::new(actor, Vec::new());
            let Inner { w, src, .. } = &mut *g;
            w.commit_packed_refs(src.as_mut(), &who, content, None)
                .map_err(refuse)?;
            g.sync_packed_junk().map_err(refuse)?;
            g.all_entries_changed();
        }
        let link = Link {
            target: target.to_vec(),
            adopted: found.as_deref().map(mark),
        };
        g.set_link(&self.link, Some(link));
        g.after_staging();
        let ino = g.inodes.remember(parent, name, LINK_PATH, Kind::Link, None);
        let attr = self.attr_timed(&mut g, ino, LINK_PATH, Kind::Link, target.len() as u64);
        drop(g);
        self.wake_watcher();
        self.save_packed_state(true);
        self.save_packed_link(gitdir).map_err(refuse)?;
        Ok(attr)
    }

    /// `readlink` of the link (`None`: `path` is not it).
    pub(super) fn readlink_packed_refs(g: &Inner, path: &[u8]) -> Option<Vec<u8>> {
        g.link_kind(path)?;
        g.packed_link.as_ref().map(|l| l.target.clone())
    }

    /// `unlink(packed-refs)` while it is a link: the link goes, `GITDIR/T` holds what the
    /// view's `packed-refs` showed, and the packed-only refs are deleted (see the module's
    /// documentation).
    pub(crate) fn unlink_packed_link(&self, pid: u32) -> Result<(), FsError> {
        if self.read_only() {
            return Err(FsError::EROFS);
        }
        let actor = self.tgid(pid);
        let refuse = |r: Refusal| self.rec.refuse("unlink", b"packed-refs", r);
        let Some(gitdir) = self.link.gitdir.get() else {
            return Err(FsError::ENOENT);
        };
        // What it shows can change between the write of T and the change of the view
        // (another writer): then T is written again.
        for _ in 0..3 {
            let (link, shown) = {
                let mut g = self.lock();
                g.fresh()?;
                let Some(link) = g.packed_link.clone() else {
                    return Err(FsError::ENOENT);
                };
                (link, g.packed_shown()?)
            };
            self.put_target(gitdir, &link, shown.as_deref().map(Vec::as_slice))
                .map_err(refuse)?;
            let mut g = self.begin_change(true)?;
            if g.packed_link.as_ref() != Some(&link) {
                return Err(FsError::ENOENT);
            }
            let now = g.packed_shown()?;
            if now.as_deref() != shown.as_deref() {
                continue;
            }
            if let Some(bytes) = &now {
                g.promise(
                    "unlink",
                    b"packed-refs",
                    reserve::edit_bytes(11, bytes.len()),
                )?;
                let who = Caller::new(actor, Vec::new());
                let Inner { w, src, .. } = &mut *g;
                w.unlink_packed_refs(src.as_mut(), &who).map_err(refuse)?;
                g.sync_packed_junk().map_err(refuse)?;
                g.all_entries_changed();
            }
            g.set_link(&self.link, None);
            g.after_staging();
            drop(g);
            self.wake_watcher();
            self.save_packed_state(true);
            return self.save_packed_link(gitdir).map_err(refuse);
        }
        Err(refuse(refusal(
            libc::EBUSY,
            "packed-refs kept changing while its link was removed",
        )))
    }

    /// Makes `GITDIR/T` hold `content` (`None`: removed), if it is what was adopted, absent,
    /// or already that (else `EBUSY`: changed on disk behind the mount, it is kept).
    fn put_target(
        &self,
        gitdir: &Path,
        link: &Link,
        content: Option<&[u8]>,
    ) -> Result<(), Refusal> {
        use std::os::unix::ffi::OsStrExt;
        let _io = self.link.io.lock().unwrap_or_else(|p| p.into_inner());
        let name = Path::new(std::ffi::OsStr::from_bytes(&link.target));
        let on_disk = read_target(gitdir, &link.target)?;
        if on_disk.as_deref() == content {
            return Ok(());
        }
        if let Some(d) = &on_disk {
            if link.adopted != Some(mark(d)) {
                return Err(refusal(
                    libc::EBUSY,
                    format!(
                        "{} was changed in the git directory behind the mount while \
                         packed-refs linked to it; move it away first (nothing was changed)",
                        name.display()
                    ),
                ));
            }
        }
        let r = match content {
            Some(c) => durable::replace(gitdir, Path::new(TARGET_TEMP), name, c),
            None => {
                std::fs::remove_file(gitdir.join(name)).and_then(|()| durable::sync_dir(gitdir))
            }
        };
        r.map_err(|e| refusal(libc::EIO, format!("writing {}: {e}", name.display())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{ObjectId, RefValue};
    use crate::fs::state::Handle;

    /// A writable view of main and topic (batches wait a minute) keeping its state in `d`.
    fn view(d: &Path) -> Arc<Shared> {
        let id = |n: u8| ObjectId::from_bytes(&[n; 20]).expect("id");
        let shared = crate::fs::test_support::writable_view(&[
            ("refs/heads/main", RefValue::Val1(id(1))),
            ("HEAD", RefValue::Symref(b"refs/heads/main".to_vec())),
        ]);
        shared.keep_packed_state_in(d);
        shared
    }

    fn read(shared: &Shared, name: &[u8]) -> Result<Vec<u8>, i32> {
        let ino = shared.lookup(ROOT, name).map_err(|e| e.errno())?.0.ino.0;
        let (fh, _) = shared.open(ino, libc::O_RDONLY).map_err(|e| e.errno())?;
        let data = shared.read_file(ino, fh, 0, 1 << 20, true);
        shared.release(fh);
        data.map_err(|e| e.errno())
    }

    fn root_names(shared: &Shared) -> Vec<(String, Kind)> {
        let dir = shared.opendir(ROOT).expect("opendir");
        let listed = shared.with_handle(dir, |h| match h {
            Some(Handle::Dir { entries, .. }) => (0..entries.len())
                .filter_map(|i| entries.get(i))
                .map(|(n, k)| (String::from_utf8_lossy(n).into_owned(), k))
                .collect::<Vec<_>>(),
            _ => Vec::new(),
        });
        shared.release(dir);
        listed
    }

    /// The t3210 sequence through the view's calls: the target adopted, its lock protocol,
    /// the link kept across a new view, and its unlink writing the target back.
    #[test]
    fn a_link_adopts_its_target_as_packed_refs() {
        let d = tempfile::tempdir().expect("tempdir");
        let me = std::process::id();
        let shared = view(d.path());
        let t = b"my-deviant-packed-refs";
        let topic = format!("{} refs/heads/topic\n", "02".repeat(20));
        let packed = format!("# pack-refs with: peeled fully-peeled sorted \n{topic}");
        std::fs::write(d.path().join("my-deviant-packed-refs"), &packed).expect("write");

        // Refused targets: an error at the call, nothing changed.
        for bad in [&b"../x"[..], b"HEAD", b"a/b", b"config"] {
            let e = shared.symlink(ROOT, b"packed-refs", bad, me).unwrap_err();
            assert_eq!(e.errno(), libc::EPERM, "{bad:?}");
        }
        std::fs::create_dir(d.path().join("dir")).expect("mkdir");
        let e = shared
            .symlink(ROOT, b"packed-refs", b"dir", me)
            .unwrap_err();
        assert_eq!(e.errno(), libc::EPERM);
        assert!(!shared.link_claims_any());

        let a = shared
            .symlink(ROOT, b"packed-refs", t, me)
            .expect("symlink");
        assert_eq!((a.kind, a.size), (fuser::FileType::Symlink, t.len() as u64));
        let (a, kind, _) = shared.lookup(ROOT, b"packed-refs").expect("lookup");
        assert_eq!(kind, Kind::Link);
        assert_eq!(shared.readlink(a.ino.0).expect("readlink"), t);
        assert_eq!(read(&shared, t), Ok(packed.clone().into_bytes()));
        assert!(shared.link_claims(t) && shared.link_claims(b"my-deviant-packed-refs.lock"));
        assert!(!shared.link_claims(b"packed-refs") && !shared.link_claims(b"other"));
        let value = |shared: &Shared, name: &[u8]| {
            let mut g = shared.lock();
            let Inner { w, src, .. } = &mut *g;
            w.effective(src.as_mut(), name).expect("effective")
        };
        assert!(value(&shared, b"refs/heads/topic").is_some(), "adopted");
        let names = root_names(&shared);
        assert!(
            names.contains(&("packed-refs".into(), Kind::Link)),
            "{names:?}"
        );
        assert!(
            names.contains(&("my-deviant-packed-refs".into(), Kind::PackedRefs)),
            "{names:?}"
        );
        assert_eq!(
            shared
                .symlink(ROOT, b"packed-refs", t, me)
                .unwrap_err()
                .errno(),
            libc::EEXIST
        );
        assert_eq!(
            shared
                .rename(ROOT, b"packed-refs", ROOT, b"x", me)
                .unwrap_err()
                .errno(),
            libc::EPERM
        );
        let flags = libc::O_CREAT | libc::O_WRONLY | libc::O_EXCL;
        assert_eq!(
            shared
                .create(ROOT, b"packed-refs.lock", flags, me)
                .unwrap_err()
                .errno(),
            libc::EINVAL
        );

        // git 2.39's pack-refs: T.lock, T.new renamed onto T, T.lock removed.
        let (_, lock) = shared
            .create(ROOT, b"my-deviant-packed-refs.lock", flags, me)
            .expect("lock");
        let (_, new) = shared
            .create(ROOT, b"my-deviant-packed-refs.new", flags, me)
            .expect("new");
        let main = format!("{} refs/heads/main\n", "01".repeat(20));
        let both = format!("# pack-refs with: peeled fully-peeled sorted \n{main}{topic}");
        shared.write(new, 0, both.as_bytes(), 0, me).expect("write");
        shared.flush(new, me).expect("flush");
        shared.release(new);
        shared
            .rename(ROOT, b"my-deviant-packed-refs.new", ROOT, t, me)
            .expect("rename");
        shared.release(lock);
        shared
            .unlink(ROOT, b"my-deviant-packed-refs.lock", me)
            .expect("unlock");
        assert_eq!(read(&shared, t), Ok(both.clone().into_bytes()));
        // The file on disk is shadowed, untouched.
        let on_disk = std::fs::read(d.path().join("my-deviant-packed-refs")).expect("read");
        assert_eq!(on_disk, packed.as_bytes());

        // Kept across views.
        drop(shared);
        let shared = view(d.path());
        assert!(shared.link_claims_any());
        let (a, kind, _) = shared.lookup(ROOT, b"packed-refs").expect("lookup");
        assert_eq!(kind, Kind::Link);
        assert_eq!(shared.readlink(a.ino.0).expect("readlink"), t);

        // Changed on disk behind the mount: the link is kept (EBUSY), nothing lost.
        std::fs::write(d.path().join("my-deviant-packed-refs"), "other").expect("write");
        assert_eq!(
            shared.unlink(ROOT, b"packed-refs", me).unwrap_err().errno(),
            libc::EBUSY
        );
        std::fs::write(d.path().join("my-deviant-packed-refs"), &packed).expect("write");

        // rm packed-refs: the link goes, T holds what it showed, packed-only refs go.
        let shown = read(&shared, t).expect("shown");
        shared.unlink(ROOT, b"packed-refs", me).expect("unlink");
        assert!(!shared.link_claims_any());
        assert_eq!(
            shared.lookup(ROOT, b"packed-refs").unwrap_err().errno(),
            libc::ENOENT
        );
        let on_disk = std::fs::read(d.path().join("my-deviant-packed-refs")).expect("read");
        assert_eq!(on_disk, shown);
        assert!(!d.path().join(LINK_FILE).exists());
        assert_eq!(
            value(&shared, b"refs/heads/topic"),
            None,
            "packed only: deleted"
        );
        assert!(value(&shared, b"refs/heads/main").is_some(), "loose: kept");

        // A dangling link: T absent until written; rm T keeps the link.
        shared
            .symlink(ROOT, b"packed-refs", b"gone", me)
            .expect("symlink");
        assert_eq!(read(&shared, b"gone"), Err(libc::ENOENT));
        let (_, fh) = shared
            .create(ROOT, b"gone", libc::O_CREAT | libc::O_WRONLY, me)
            .expect("create");
        shared.write(fh, 0, topic.as_bytes(), 0, me).expect("write");
        shared.flush(fh, me).expect("flush");
        shared.release(fh);
        assert_eq!(read(&shared, b"gone"), Ok(topic.clone().into_bytes()));
        shared.unlink(ROOT, b"gone", me).expect("rm T");
        assert_eq!(read(&shared, b"gone"), Err(libc::ENOENT));
        assert!(shared.link_claims_any());
        assert_eq!(value(&shared, b"refs/heads/topic"), None);
        shared.unlink(ROOT, b"packed-refs", me).expect("unlink");
        assert!(!d.path().join("gone").exists());
    }

    #[test]
    fn targets_refused_and_kept() {
        for bad in [
            &b""[..],
            b".",
            b"..",
            b"a/b",
            b"../x",
            b"HEAD",
            b"refs",
            b"packed-refs",
            b"config",
            b"reftable",
            b"reftablefs-packed",
            b"ORIG_HEAD",
        ] {
            assert!(
                target_refused(bad).is_some(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(target_refused(b"my-deviant-packed-refs").is_none());
        let l = Link {
            target: b"my\ndeviant".to_vec(),
            adopted: Some((12, 0xabc)),
        };
        assert_eq!(decode(&encode(&l)), Ok(l));
        let l = Link {
            target: b"x".to_vec(),
            adopted: None,
        };
        assert_eq!(decode(&encode(&l)), Ok(l));
        for junk in [
            &b""[..],
            b"junk",
            b"# reftablefs packed-refs link 1\nT 2f2e2e\n",
            b"# reftablefs packed-refs link 1\nT 7\n",
            b"# reftablefs packed-refs link 1\nT 78\nA x y\n",
            b"# reftablefs packed-refs link 1\nT 78\nA 1 2\nmore\n",
        ] {
            assert!(decode(junk).is_err(), "{junk:?}");
        }
    }
}
