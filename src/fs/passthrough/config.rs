//! `config` through the mount is a file (issue 25, item 2): read, written in place
//! (`O_TRUNC`, `O_APPEND`, `O_RDWR`, `write`, `ftruncate`, `truncate`), created, removed,
//! renamed over and moved away, as on a disk; GITDIR's real config always keeps the
//! `refStorage` extension and the format version it needs (`config_view.rs`).
//!
//! **The model.** Every open of `config` shares one content, [`OpenConfig`] — what the
//! name stands for while it is open, as a file's pages are: the served text
//! (`config_view::served`) when first opened, then changed by the handles' writes and
//! truncations. It is written to GITDIR (`config_view::restored` of it, to a temporary
//! file in GITDIR renamed over `config`: never torn), if changed since last stored, when
//! a handle opened for writing is closed (each `close`: FUSE `FLUSH`, whose error `close`
//! returns) or released, when any handle is `fsync`ed, and at once for a `truncate` by
//! name; so a reader never stores what a writer has not closed yet. While open, `stat`
//! shows the open content's size. Whoever replaces `config` meanwhile — a rename over
//! it through the mount (`config.lock`), `rm`, git 2.47 outside — leaves the open
//! content orphaned, as an unlinked file: its handles keep reading and writing it and
//! nothing of it is stored (the identity of GITDIR's file is checked under the config
//! lock before each store). `rm config` stores `config_view::removed` (the
//! extension and format version only, under a tombstone line): the mount then shows no
//! `config`, git 2.47 still reads a reftable repository, and the next create, write or
//! rename over `config` stores the new content with them.
//!
//! **Durability** is a file's: content is durable after a client's `fsync` of it. A store
//! is fsynced (the file, then GITDIR) when a client fsyncs an open `config` (with nothing
//! left to store, GITDIR's config and GITDIR are fsynced) and when a file is renamed over
//! `config`, unless the mount saw that file created empty and never fsynced since (git's
//! `config.lock` with `core.fsync` at its default: nothing asked for an fsync, as on a
//! disk; with `core.fsync=config` git fsyncs the lock first). A close, release or
//! `truncate` by name does not fsync, as on a disk. The stores the mount makes of its own
//! accord (`rm`'s tombstone, `config` moved away, an empty one created) are fsynced: a
//! disk would keep the durable file there, the mount writes a new one. One thing more
//! than a disk: every store's content is `fdatasync`ed before its rename, so a crash
//! leaves the old config or the new one, never an empty one (a files backend that lost
//! its config keeps its refs; a reftable repository without `extensions.refStorage`
//! shows none).
//!
//! Bounds: one config at most [`CONFIG_MAX`] (`EFBIG`, refused and recorded: a client's
//! write, a file renamed over it, GITDIR's own); all open contents together at most
//! [`CONFIG_HELD_MAX`] (`EFBIG` at `write`, `ENOMEM` at `open`).
//!
//! Lock order: [`Configs`] (the config lock, held across a store) before the
//! passthrough's `Inner` (nodes and handles), never the reverse.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

use fuser::FileAttr;

use crate::fs::config_view;
use crate::fs::error::FsError;
use crate::fs::ino::ROOT;
use crate::fs::record::Recorder;

use super::*;

/// Largest `config` the mount reads, holds or stores.
pub const CONFIG_MAX: usize = 16 << 20;
/// All open configs' contents together (allocations).
pub const CONFIG_HELD_MAX: usize = 64 << 20;

/// (st_dev, st_ino) of GITDIR's config, `None` where there is none.
type Identity = Option<(u64, u64)>;

pub(super) fn identity(st: &libc::stat) -> (u64, u64) {
    (st.st_dev, st.st_ino)
}

/// The content `config` has while open (see the module docs).
pub(super) struct OpenConfig {
    data: Vec<u8>,
    /// GITDIR's config this content stands for: as read at the first open, then as last
    /// stored.
    real: Identity,
    /// Replaced or removed by someone else: never stored.
    orphan: bool,
    /// Changed since last stored.
    dirty: bool,
    /// Open handles on it.
    handles: usize,
    /// GITDIR's config's attributes as last seen (for `fstat` once the name is gone).
    st: libc::stat,
}

/// The open configs (the config lock).
#[derive(Default)]
pub(super) struct Configs {
    /// The content the name `config` stands for while open.
    current: Option<u64>,
    files: HashMap<u64, OpenConfig>,
    next: u64,
    /// Bytes allocated by `files`' contents.
    held: usize,
}

impl Configs {
    /// `id` is no longer what `config` stands for.
    fn orphan(&mut self, id: u64) {
        if let Some(f) = self.files.get_mut(&id) {
            f.orphan = true;
            f.dirty = false;
        }
        if self.current == Some(id) {
            self.current = None;
        }
    }

    /// The current content is orphaned (the name was replaced or removed).
    pub(super) fn orphan_current(&mut self) {
        if let Some(id) = self.current {
            self.orphan(id);
        }
    }

    /// Forgets `id` when no handle holds it.
    fn drop_if_unused(&mut self, id: u64) {
        if self.files.get(&id).is_some_and(|f| f.handles == 0) {
            if let Some(f) = self.files.remove(&id) {
                self.held = self.held.saturating_sub(f.data.capacity());
            }
            if self.current == Some(id) {
                self.current = None;
            }
        }
    }

    /// Changes `id`'s content by `change`, which first learns the length it will need
    /// (checked against the bounds: `EFBIG`).
    fn change(
        &mut self,
        rec: &Recorder,
        id: u64,
        op: &str,
        new_len: impl FnOnce(&[u8]) -> Option<usize>,
        change: impl FnOnce(&mut Vec<u8>),
    ) -> Result<(), FsError> {
        let held = self.held;
        let f = self.files.get_mut(&id).ok_or(FsError::EBADF)?;
        let len = new_len(&f.data)
            .filter(|&l| l <= CONFIG_MAX)
            .ok_or_else(|| {
                rec.refuse_for(
                    op,
                    CONFIG,
                    libc::EFBIG,
                    format!("config beyond {} MiB", CONFIG_MAX >> 20),
                )
            })?;
        let before = f.data.capacity();
        if len > before && held.saturating_sub(before).saturating_add(len) > CONFIG_HELD_MAX {
            return Err(rec.refuse_for(
                op,
                CONFIG,
                libc::EFBIG,
                format!("open configs hold {} MiB already", CONFIG_HELD_MAX >> 20),
            ));
        }
        change(&mut f.data);
        f.dirty = true;
        let after = f.data.capacity();
        self.held = held.saturating_sub(before).saturating_add(after);
        Ok(())
    }
}

/// Reads `f` to its end; more than [`CONFIG_MAX`] is refused (`EFBIG`), never cut.
pub(super) fn read_config_file(rec: &Recorder, f: File, what: &[u8]) -> Result<Vec<u8>, FsError> {
    use std::io::Read;
    let mut out = Vec::new();
    (&f).take(CONFIG_MAX as u64 + 1)
        .read_to_end(&mut out)
        .map_err(FsError::Io)?;
    if out.len() > CONFIG_MAX {
        return Err(rec.refuse_for(
            "read",
            what,
            libc::EFBIG,
            format!("a config beyond {} MiB", CONFIG_MAX >> 20),
        ));
    }
    Ok(out)
}

impl Passthrough {
    pub(super) fn configs(&self) -> MutexGuard<'_, Configs> {
        self.configs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// GITDIR's config now: its content and attributes, `None` when there is none.
    pub(super) fn real_config(&self) -> Result<Option<(Vec<u8>, libc::stat)>, FsError> {
        // O_NONBLOCK: a name swapped for a FIFO does not hang the request.
        let f = match self.open_beneath(CONFIG, libc::O_RDONLY | libc::O_NONBLOCK, 0) {
            Ok(f) => f,
            Err(e) if e.errno() == libc::ENOENT => return Ok(None),
            Err(e) => return Err(e),
        };
        let st = Self::fstat(&f)?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(FsError::EINVAL);
        }
        Ok(Some((read_config_file(&self.rec, f, CONFIG)?, st)))
    }

    /// The config as served, `None` when the mount shows none (GITDIR has none, or it
    /// was removed through the mount).
    pub(super) fn served_config(&self) -> Result<Option<Vec<u8>>, FsError> {
        Ok(self
            .real_config()?
            .filter(|(raw, _)| !config_view::is_removed(raw))
            .map(|(raw, _)| config_view::served(&raw)))
    }

    /// GITDIR's config (raw) and its `stat`, when the mount shows one; `ENOENT` when it
    /// does not (none, or removed through the mount).
    fn shown_config(&self) -> Result<(Vec<u8>, libc::stat), FsError> {
        self.real_config()?
            .filter(|(raw, _)| !config_view::is_removed(raw))
            .ok_or(FsError::ENOENT)
    }

    /// The size `config` has now: while open, its open content's (as a file being
    /// written shows its new size before it is closed), else the served config's; `None`
    /// when the mount shows none.
    pub(super) fn config_size(&self) -> Result<Option<u64>, FsError> {
        {
            let c = self.configs();
            if let Some(f) = c.current.and_then(|id| c.files.get(&id)) {
                let now = self.lstat(CONFIG).ok().map(|st| identity(&st));
                if !f.orphan && now.is_some() && now == f.real {
                    return Ok(Some(f.data.len() as u64));
                }
            }
        }
        Ok(self.served_config()?.map(|s| s.len() as u64))
    }

    /// Writes `content` to a temporary file in GITDIR with `mode` and renames it to `to`
    /// (beneath GITDIR; `flags` of `renameat2`); `durable`: the file fsynced before the
    /// rename, GITDIR (and `to`'s directory) after it. Returns the new file's attributes.
    fn replace_atomically(
        &self,
        content: &[u8],
        mode: u32,
        to: &At<'_>,
        flags: u32,
        durable: bool,
    ) -> Result<libc::stat, FsError> {
        let tmp = format!(
            "config.reftablefs-{}-{}.tmp",
            std::process::id(),
            self.tmp_seq.fetch_add(1, Ordering::Relaxed)
        );
        let tmp = cstr(tmp.as_bytes())?;
        let root = self.root.as_raw_fd();
        let write = || -> Result<libc::stat, FsError> {
            let f = File::from(openat(
                root,
                &tmp,
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                mode & 0o7777,
            )?);
            // The file replaced keeps its owner (a mount run by root over a user's
            // .git); where we may not give it (not root), the file is ours, as before.
            if let Ok(old) = to.lstat() {
                if (old.st_uid, old.st_gid) != (self.uid, self.gid) {
                    // SAFETY: an open descriptor.
                    unsafe { libc::fchown(f.as_raw_fd(), old.st_uid, old.st_gid) };
                }
            }
            // The exact mode, whatever the mount's umask (after fchown, which may clear
            // set-id bits).
            // SAFETY: an open descriptor.
            if unsafe { libc::fchmod(f.as_raw_fd(), mode & 0o7777) } != 0 {
                return Err(FsError::last_os_error());
            }
            f.write_all_at(content, 0).map_err(FsError::Io)?;
            if durable {
                f.sync_all().map_err(FsError::Io)?;
                self.config_syncs.fetch_add(1, Ordering::Relaxed);
            } else {
                self.sync_before_rename(&f)?;
            }
            let st = Self::fstat(&f)?;
            // SAFETY: valid descriptors and NUL-terminated names.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_renameat2,
                    root,
                    tmp.as_ptr(),
                    to.dirfd(),
                    to.name(),
                    flags as libc::c_uint,
                )
            };
            if r != 0 {
                return Err(FsError::last_os_error());
            }
            Ok(st)
        };
        let st = match write() {
            Ok(st) => st,
            Err(e) => {
                // SAFETY: valid descriptor and name.
                unsafe { libc::unlinkat(root, tmp.as_ptr(), 0) };
                return Err(e);
            }
        };
        if !durable {
            return Ok(st);
        }
        // SAFETY: an open directory descriptor.
        unsafe { libc::fsync(root) };
        self.config_syncs.fetch_add(1, Ordering::Relaxed);
        if let Some(dir) = &to.dir {
            // The target's directory (an O_PATH descriptor: opened for the fsync).
            if let Ok(d) = openat(
                dir.as_raw_fd(),
                c".",
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
                0,
            ) {
                // SAFETY: an open directory descriptor.
                unsafe { libc::fsync(d.as_raw_fd()) };
            }
        }
        Ok(st)
    }

    /// Stores `written` (what a client wrote as `config`) in GITDIR over `original` (its
    /// config now), with the extension and format version kept, fsynced if `durable`;
    /// `op` names the call for the refusal of a failed store. Returns the new file's
    /// attributes. The caller holds the config lock.
    pub(super) fn store_config(
        &self,
        op: &str,
        written: &[u8],
        original: &[u8],
        mode: u32,
        durable: bool,
    ) -> Result<libc::stat, FsError> {
        let content = config_view::restored(written, original);
        if config_view::sets_extension(written) {
            log::warn!(
                "reftablefs: config written through the mount set extensions.refStorage; the repository's value is kept"
            );
        }
        let to = self.at(CONFIG)?;
        self.replace_atomically(&content, mode, &to, 0, durable)
            .map_err(|e| stored_failed(&self.rec, op, e))
    }

    /// GITDIR's config was replaced by a file of `new` attributes: the node the kernel
    /// knows as `config` stands for it (same inode number, as for an in-place write).
    fn config_replaced(&self, old: Identity, new: &libc::stat) {
        let mut g = self.lock();
        let Some(old) = old else { return };
        if let Some(ino) = g.by_real.remove(&old) {
            if let Some(n) = g.nodes.get_mut(&ino) {
                n.real = identity(new);
                g.by_real.insert(identity(new), ino);
            }
        }
    }

    /// The content `config` stands for now: the open one, or GITDIR's served config
    /// (`ENOENT` when the mount shows none). The caller holds the config lock.
    fn current_config(&self, c: &mut Configs) -> Result<u64, FsError> {
        let real = self.real_config()?;
        let now = real.as_ref().map(|(_, st)| identity(st));
        if let Some(id) = c.current {
            if c.files.get(&id).is_some_and(|f| f.real == now) {
                return Ok(id);
            }
            // Replaced outside the mount since it was opened.
            c.orphan(id);
        }
        let Some((raw, st)) = real.filter(|(raw, _)| !config_view::is_removed(raw)) else {
            return Err(FsError::ENOENT);
        };
        let data = config_view::served(&raw);
        if c.held.saturating_add(data.capacity()) > CONFIG_HELD_MAX {
            return Err(self.rec.refuse_for(
                "open",
                CONFIG,
                libc::ENOMEM,
                format!("open configs hold {} MiB already", CONFIG_HELD_MAX >> 20),
            ));
        }
        c.held += data.capacity();
        c.next += 1;
        let id = c.next;
        c.files.insert(
            id,
            OpenConfig {
                data,
                real: now,
                orphan: false,
                dirty: false,
                handles: 0,
                st,
            },
        );
        c.current = Some(id);
        Ok(id)
    }

    /// Stores `id`'s content if it changed since last stored (see the module docs);
    /// `durable` (a client's `fsync`): fsynced, and if there was nothing to store, GITDIR's
    /// config it stands for fsynced. The caller holds the config lock.
    fn commit_config(
        &self,
        c: &mut Configs,
        id: u64,
        op: &str,
        durable: bool,
    ) -> Result<(), FsError> {
        let Some(f) = c.files.get(&id) else {
            return Ok(());
        };
        if f.orphan {
            return Ok(());
        }
        if !f.dirty {
            return match (durable, f.real) {
                (true, Some(real)) => self
                    .sync_config(real)
                    .map_err(|e| stored_failed(&self.rec, op, e)),
                _ => Ok(()),
            };
        }
        let real = self.real_config()?;
        let now = real.as_ref().map(|(_, st)| identity(st));
        if now != f.real {
            // Replaced meanwhile: what was written went to the file it replaced.
            c.orphan(id);
            return Ok(());
        }
        let (original, mode) = match &real {
            Some((raw, st)) => (&raw[..], st.st_mode),
            None => (&[][..], f.st.st_mode),
        };
        let st = self.store_config(op, &f.data, original, mode, durable)?;
        if let Some(f) = c.files.get_mut(&id) {
            f.real = Some(identity(&st));
            f.st = st;
            f.dirty = false;
        }
        self.config_replaced(now, &st);
        Ok(())
    }

    /// `open` of `config`: joins (or starts) the content `config` stands for; `O_TRUNC`
    /// empties it.
    pub(super) fn open_config(&self, flags: i32) -> Result<Opened, FsError> {
        let writable = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let id = {
            let mut c = self.configs();
            let id = self.current_config(&mut c)?;
            if writable && flags & libc::O_TRUNC != 0 {
                c.change(&self.rec, id, "open", |_| Some(0), Vec::clear)?;
            }
            if let Some(f) = c.files.get_mut(&id) {
                f.handles += 1;
            }
            id
        };
        Ok(self.config_handle(id, flags))
    }

    fn config_handle(&self, id: u64, flags: i32) -> Opened {
        let writable = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let fh = self.lock().add_handle(PHandle::Config {
            id,
            append: flags & libc::O_APPEND != 0,
            writable,
        });
        Opened::Plain {
            fh,
            direct: true,
            flush: writable,
        }
    }

    /// `create` of `config` (the kernel found none): an empty config is stored at once
    /// (the name exists when `open` returns), written by the handle from then on. Where
    /// one appeared meanwhile, `O_EXCL` fails and anything else opens it.
    pub(super) fn create_config(
        &self,
        mode: u32,
        flags: i32,
    ) -> Result<(FileAttr, Opened), FsError> {
        let mut c = self.configs();
        let real = self.real_config()?;
        if real
            .as_ref()
            .is_some_and(|(raw, _)| !config_view::is_removed(raw))
        {
            if flags & libc::O_EXCL != 0 {
                return Err(FsError::EEXIST);
            }
            drop(c);
            let opened = self.open_config(flags)?;
            let st = self.lstat(CONFIG)?;
            let size = self.config_size()?.unwrap_or(0);
            let ino = self.lock().remember(ROOT, CONFIG, &st);
            return Ok((self.attr(ino, &st, Some(size)), opened));
        }
        let old = real.as_ref().map(|(_, st)| identity(st));
        let original = real.map(|(raw, _)| raw).unwrap_or_default();
        let st = self.store_config("create", b"", &original, mode, true)?;
        c.orphan_current();
        if let Some(old) = old {
            self.lock().gone(old);
        }
        c.next += 1;
        let id = c.next;
        c.files.insert(
            id,
            OpenConfig {
                data: Vec::new(),
                real: Some(identity(&st)),
                orphan: false,
                dirty: false,
                handles: 1,
                st,
            },
        );
        c.current = Some(id);
        drop(c);
        let ino = self.lock().remember(ROOT, CONFIG, &st);
        Ok((self.attr(ino, &st, Some(0)), self.config_handle(id, flags)))
    }

    pub(super) fn read_config(&self, id: u64, offset: u64, size: u32) -> Result<Vec<u8>, FsError> {
        let c = self.configs();
        let data = &c.files.get(&id).ok_or(FsError::EBADF)?.data;
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(data.len());
        let end = start.saturating_add(size as usize).min(data.len());
        Ok(data.get(start..end).unwrap_or_default().to_vec())
    }

    /// A write to an open config: into its content (at its end with `O_APPEND`); stored
    /// at close.
    pub(super) fn write_config(
        &self,
        id: u64,
        append: bool,
        offset: u64,
        data: &[u8],
    ) -> Result<u32, FsError> {
        let n = u32::try_from(data.len()).map_err(|_| FsError::EINVAL)?;
        let mut c = self.configs();
        let at = |cur: &[u8]| {
            if append {
                Some(cur.len())
            } else {
                usize::try_from(offset).ok()
            }
        };
        let start = c
            .files
            .get(&id)
            .and_then(|f| at(&f.data))
            .unwrap_or(usize::MAX);
        c.change(
            &self.rec,
            id,
            "write",
            |cur| start.checked_add(data.len()).map(|e| e.max(cur.len())),
            |buf| {
                let end = start.saturating_add(data.len());
                if buf.len() < end {
                    buf.resize(end, 0);
                }
                if let Some(dst) = buf.get_mut(start..end) {
                    dst.copy_from_slice(data);
                }
            },
        )?;
        Ok(n)
    }

    /// `truncate` of `config`: through an open handle, its content (stored at close); by
    /// name, stored at once.
    pub(super) fn truncate_config(&self, handle: Option<u64>, size: u64) -> Result<(), FsError> {
        let mut c = self.configs();
        let (id, now) = match handle {
            Some(id) => (id, false),
            None => (self.current_config(&mut c)?, true),
        };
        let len = usize::try_from(size).unwrap_or(usize::MAX);
        let r = c.change(
            &self.rec,
            id,
            "truncate",
            |_| Some(len),
            |buf| buf.resize(len, 0),
        );
        let r = r.and_then(|()| {
            if now {
                self.commit_config(&mut c, id, "truncate", false)
            } else {
                Ok(())
            }
        });
        c.drop_if_unused(id);
        r
    }

    /// Attributes of an open config: GITDIR's file's, with its content's size.
    pub(super) fn config_attr(&self, ino: u64, id: u64) -> Result<FileAttr, FsError> {
        let c = self.configs();
        let f = c.files.get(&id).ok_or(FsError::EBADF)?;
        let st = match (f.orphan, self.lstat(CONFIG)) {
            (false, Ok(st)) if Some(identity(&st)) == f.real => st,
            _ => f.st,
        };
        Ok(self.attr(ino, &st, Some(f.data.len() as u64)))
    }

    /// `close` (FUSE `FLUSH`) or `fsync` of an open config: stores what its handles
    /// changed (fsynced for an `fsync`); a failure is refused and recorded, and the
    /// content stays changed (the next close, fsync or release tries again).
    pub(super) fn flush_config(&self, id: u64, op: &str) -> Result<(), FsError> {
        let mut c = self.configs();
        self.commit_config(&mut c, id, op, op == "fsync")
    }

    /// fsyncs GITDIR's config if it is still the file `real`, then GITDIR (the name may
    /// have been stored without an fsync).
    fn sync_config(&self, real: (u64, u64)) -> Result<(), FsError> {
        let f = match self.open_beneath(CONFIG, libc::O_RDONLY | libc::O_NONBLOCK, 0) {
            Ok(f) => f,
            // Gone meanwhile: nothing of it to make durable.
            Err(e) if e.errno() == libc::ENOENT => return Ok(()),
            Err(e) => return Err(e),
        };
        if identity(&Self::fstat(&f)?) != real {
            return Ok(());
        }
        f.sync_all().map_err(FsError::Io)?;
        // SAFETY: an open directory descriptor.
        if unsafe { libc::fsync(self.root.as_raw_fd()) } != 0 {
            return Err(FsError::last_os_error());
        }
        self.config_syncs.fetch_add(2, Ordering::Relaxed);
        Ok(())
    }

    /// fsyncs made by stores of `config` so far.
    #[cfg(test)]
    pub(super) fn config_syncs(&self) -> u64 {
        self.config_syncs.load(Ordering::Relaxed)
    }

    /// A store's content reaches the disk before its rename, whether or not a client
    /// asked for durability: a crash must never leave GITDIR's config empty or partial,
    /// since without its `extensions.refStorage` git reads no refs at all (a files
    /// backend whose config is lost keeps its refs). Only the name's durability (the
    /// directory's fsync) waits for a client's fsync. `fdatasync`, counted apart.
    pub(super) fn sync_before_rename(&self, f: &File) -> Result<(), FsError> {
        f.sync_data().map_err(FsError::Io)?;
        self.config_data_syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// `fdatasync`s made before renames of stores nobody asked to be durable.
    #[cfg(test)]
    pub(super) fn config_data_syncs(&self) -> u64 {
        self.config_data_syncs.load(Ordering::Relaxed)
    }

    /// The last close of a handle: a writable one stores what is still unstored (a
    /// failure is logged and recorded: nobody is left to tell; a reader's never stores
    /// what a writer has not closed yet); forgets the content with its last handle.
    pub(super) fn release_config(&self, id: u64, writable: bool) {
        let mut c = self.configs();
        if writable {
            if let Err(e) = self.commit_config(&mut c, id, "release", false) {
                crate::fs::record::log_error("release", CONFIG, &e);
            }
        }
        if let Some(f) = c.files.get_mut(&id) {
            f.handles = f.handles.saturating_sub(1);
        }
        c.drop_if_unused(id);
    }

    /// `rm config`: GITDIR's config becomes `config_view::removed` of itself (the
    /// extension kept); open handles are orphaned.
    pub(super) fn unlink_config(&self) -> Result<(), FsError> {
        let mut c = self.configs();
        let (raw, st) = self.shown_config()?;
        let to = self.at(CONFIG)?;
        self.replace_atomically(&config_view::removed(&raw), st.st_mode, &to, 0, true)
            .map_err(|e| stored_failed(&self.rec, "unlink", e))?;
        c.orphan_current();
        self.lock().gone(identity(&st));
        Ok(())
    }

    /// `rename(config → Y)`: Y becomes a file of GITDIR with the served config (written
    /// to a temporary file and renamed there), then `config` is removed as by `rm`.
    pub(super) fn move_config_away(
        &self,
        newparent: u64,
        to: &At<'_>,
        flags: u32,
    ) -> Result<(), FsError> {
        if flags & libc::RENAME_EXCHANGE != 0 {
            return Err(FsError::EINVAL);
        }
        let mut c = self.configs();
        let (raw, st) = self.shown_config()?;
        let old_target = to.lstat().ok();
        let moved =
            self.replace_atomically(&config_view::served(&raw), st.st_mode, to, flags, true)?;
        let root = self.at(CONFIG)?;
        self.replace_atomically(&config_view::removed(&raw), st.st_mode, &root, 0, true)
            .map_err(|e| stored_failed(&self.rec, "rename", e))?;
        c.orphan_current();
        let mut g = self.lock();
        if let Some(t) = old_target {
            g.gone(identity(&t));
        }
        // The node the kernel knows as `config` is now Y.
        if let Some(ino) = g.by_real.remove(&identity(&st)) {
            if let Some(n) = g.nodes.get_mut(&ino) {
                n.parent = newparent;
                n.name = to.name.as_bytes().into();
                n.real = identity(&moved);
                g.by_real.insert(identity(&moved), ino);
            }
        }
        Ok(())
    }

    /// Whether the mount shows no `config` (for listings).
    pub(super) fn config_hidden(&self) -> bool {
        matches!(self.served_config(), Ok(None))
    }
}

/// A store of GITDIR's config that failed: refused with the file system's errno (the
/// client's call fails) and recorded.
pub(super) fn stored_failed(rec: &Recorder, op: &str, e: FsError) -> FsError {
    if matches!(e, FsError::Refused { .. }) {
        return e;
    }
    let errno = e.errno();
    rec.refuse_for(
        op,
        CONFIG,
        errno,
        format!("GITDIR's config could not be written: {e}"),
    )
}
