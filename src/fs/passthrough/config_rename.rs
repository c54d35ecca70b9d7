//! `rename(X → config)` (git's `config.lock`, libgit2's, dulwich's): X's content becomes
//! the config, stored as every write of `config` is (`config_view::restored`: GITDIR's
//! extension and format version kept; `config.rs`), fsynced only if X may have been
//! fsynced (`config.rs`, "Durability").
//!
//! X itself becomes GITDIR's config, as a rename on a disk keeps the file: the stored text
//! is written into X (`pwrite`, `ftruncate`), which is then renamed over `config`; one
//! file fewer to create and to remove per rewrite (git 2.39's `branch -D` rewrites the
//! config once per branch). Where X is not the client's alone — another link to it, or a
//! handle of the mount open on it — X is read and a new file is stored instead, and X
//! unlinked. A rename that fails after X was rewritten writes X's own text back. Where X
//! holds exactly GITDIR's config already (owner and mode too) and no durability was asked
//! for, X is removed and the config kept, its mtime moved (`install_same_config`).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use crate::fs::config_view;
use crate::fs::error::FsError;
use crate::fs::ino::ROOT;

use super::config::{identity, read_config_file, stored_failed};
use super::*;

impl Passthrough {
    /// `rename(X → config)` (see the module docs); `from` is X, `src` its attributes.
    pub(super) fn install_config(
        &self,
        from: &At<'_>,
        src: &libc::stat,
        flags: u32,
    ) -> Result<(), FsError> {
        if src.st_mode & libc::S_IFMT != libc::S_IFREG || flags & libc::RENAME_EXCHANGE != 0 {
            return Err(FsError::EINVAL);
        }
        let mut c = self.configs();
        let real = self.real_config()?;
        let present = real
            .as_ref()
            .is_some_and(|(raw, _)| !config_view::is_removed(raw));
        if present && flags & libc::RENAME_NOREPLACE != 0 {
            return Err(FsError::EEXIST);
        }
        let file = File::from(openat(
            from.dirfd(),
            &from.name,
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0,
        )?);
        let st = Self::fstat(&file)?;
        if identity(&st) != identity(src) {
            // Replaced since the kernel looked it up: as if it had gone.
            return Err(FsError::ENOENT);
        }
        let written = read_config_file(&self.rec, file.try_clone().map_err(FsError::Io)?, CONFIG)?;
        let old = real.as_ref().map(|(_, st)| identity(st));
        let old_meta = real
            .as_ref()
            .map(|(_, st)| (st.st_uid, st.st_gid, st.st_mode & 0o7777));
        let (original, old_owner) = match real {
            Some((raw, st)) => (raw, Some((st.st_uid, st.st_gid))),
            None => (Vec::new(), None),
        };
        let (unsynced, in_use) = {
            let g = self.lock();
            let ino = g.by_real.get(&identity(src)).copied();
            let node = ino.and_then(|i| g.nodes.get(&i));
            let open = ino.is_some_and(|i| {
                g.backing.contains_key(&i)
                    || g.handles
                        .values()
                        .any(|h| matches!(h, PHandle::File { ino, .. } if *ino == i))
            });
            (node.is_some_and(|n| n.unsynced), open)
        };
        let durable = !unsynced;
        if st.st_nlink != 1 || in_use {
            self.store_config("rename", &written, &original, src.st_mode, durable)?;
            c.orphan_current();
            // SAFETY: valid descriptor and name.
            if unsafe { libc::unlinkat(from.dirfd(), from.name(), 0) } != 0 {
                return Err(FsError::last_os_error());
            }
            // The kernel now knows the renamed node as `config`: it resolves to the real one.
            self.renamed_to_config(old, src).gone(identity(src));
            return Ok(());
        }
        let content = config_view::restored(&written, &original);
        if config_view::sets_extension(&written) {
            log::warn!(
                "reftablefs: config written through the mount set extensions.refStorage; the repository's value is kept"
            );
        }
        let same_file = old_meta == Some((st.st_uid, st.st_gid, st.st_mode & 0o7777));
        if present && !durable && same_file && content == original {
            self.install_same_config(from, src, old)?;
            c.orphan_current();
            return Ok(());
        }
        let to = self.at(CONFIG)?;
        self.rename_rewritten(&file, from, &to, &content, &written, old_owner, durable)
            .map_err(|e| stored_failed(&self.rec, "rename", e))?;
        c.orphan_current();
        // The node the kernel renames is X, and X is the config now.
        drop(self.renamed_to_config(old, src));
        Ok(())
    }

    /// `rename(X → config)` where X holds exactly what GITDIR's config (the file `old`)
    /// holds, with its owner and mode, and nothing asked for durability (git 2.39's
    /// `branch -D` rewrites the config once per deleted branch, unchanged unless the
    /// branch had a section): X is removed and GITDIR's config stays, its mtime moved as
    /// the rename would have. What a client reads afterwards is what the rename would
    /// have shown, and the durable config on disk is never replaced, so its data needs no
    /// sync before a rename (the one of every store that changes it, 0.6 ms here). The
    /// node the kernel renames (X's) stands for GITDIR's config from now on.
    fn install_same_config(
        &self,
        from: &At<'_>,
        src: &libc::stat,
        old: Option<(u64, u64)>,
    ) -> Result<(), FsError> {
        // SAFETY: valid descriptor and name.
        if unsafe { libc::unlinkat(from.dirfd(), from.name(), 0) } != 0 {
            return Err(FsError::last_os_error());
        }
        let to = self.at(CONFIG)?;
        // SAFETY: valid descriptor and name; a null `times` is "now" for both.
        unsafe {
            libc::utimensat(
                to.dirfd(),
                to.name(),
                std::ptr::null(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        let mut g = self.lock();
        if let Some(x) = g.by_real.remove(&identity(src)) {
            if let Some(n) = g.nodes.get_mut(&x) {
                n.parent = ROOT;
                n.name = CONFIG.into();
                n.unsynced = false;
                if let Some(old) = old {
                    n.real = old;
                }
            }
            if let Some(old) = old {
                g.by_real.insert(old, x);
            }
        }
        Ok(())
    }

    /// After X (attributes `src`) was renamed over `config` (the file `old`, if any):
    /// the old config is gone, and X's node is the kernel's `config`. Returns the lock.
    fn renamed_to_config(
        &self,
        old: Option<(u64, u64)>,
        src: &libc::stat,
    ) -> MutexGuard<'_, Inner> {
        let mut g = self.lock();
        if let Some(old) = old {
            g.gone(old);
        }
        if let Some(&ino) = g.by_real.get(&identity(src)) {
            if let Some(n) = g.nodes.get_mut(&ino) {
                n.parent = ROOT;
                n.name = CONFIG.into();
            }
        }
        g
    }

    /// Writes `content` into `file` (X, at `from`), gives it the owner of the config it
    /// replaces (where we may), renames it to `to`; `durable`: X fsynced before, GITDIR
    /// after. A failed rename leaves X with `written`, its own text, again.
    #[allow(clippy::too_many_arguments)]
    fn rename_rewritten(
        &self,
        file: &File,
        from: &At<'_>,
        to: &At<'_>,
        content: &[u8],
        written: &[u8],
        owner: Option<(u32, u32)>,
        durable: bool,
    ) -> Result<(), FsError> {
        let put = |data: &[u8]| -> Result<(), FsError> {
            file.write_all_at(data, 0).map_err(FsError::Io)?;
            file.set_len(data.len() as u64).map_err(FsError::Io)
        };
        let fd = file.as_raw_fd();
        if let Some((uid, gid)) = owner {
            let st = Self::fstat(file)?;
            if (st.st_uid, st.st_gid) != (uid, gid) {
                // SAFETY: an open descriptor. Not root: the file stays ours, as before.
                if unsafe { libc::fchown(fd, uid, gid) } == 0 {
                    // fchown may clear set-id bits: the mode X had.
                    // SAFETY: an open descriptor.
                    unsafe { libc::fchmod(fd, st.st_mode & 0o7777) };
                }
            }
        }
        put(content)?;
        if durable {
            file.sync_all().map_err(FsError::Io)?;
            self.config_syncs.fetch_add(1, Ordering::Relaxed);
        } else {
            self.sync_before_rename(file)?;
        }
        // SAFETY: valid descriptors and NUL-terminated names.
        let r = unsafe {
            libc::syscall(
                libc::SYS_renameat2,
                from.dirfd(),
                from.name(),
                to.dirfd(),
                to.name(),
                0 as libc::c_uint,
            )
        };
        if r != 0 {
            let e = FsError::last_os_error();
            if put(written).is_err() {
                log::warn!("reftablefs: a config rename failed and its file could not be given back its own text");
            }
            return Err(e);
        }
        if durable {
            // SAFETY: an open directory descriptor.
            if unsafe { libc::fsync(self.root.as_raw_fd()) } != 0 {
                return Err(FsError::last_os_error());
            }
            self.config_syncs.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}
