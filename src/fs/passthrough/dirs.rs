//! Passed-through directories and names: mkdir, symlinks, unlink, rmdir, rename (of
//! `config` in `config.rs`), listings, fsyncdir, statfs.

use std::os::fd::AsRawFd;
use std::sync::Arc;

use fuser::{FileAttr, FileType};

use crate::fs::backend::{DirEntry, NewNode, Rename};
use crate::fs::error::FsError;
use crate::fs::ino::{pass_ino, ROOT};

use super::*;

impl Passthrough {
    pub fn mkdir(&self, n: NewNode<'_>) -> Result<FileAttr, FsError> {
        let (parent, name) = (n.parent, n.name);
        self.check_creatable(parent, name)?;
        let at = self.at(&self.child_path(parent, name)?)?;
        // SAFETY: valid descriptor and name.
        if unsafe { libc::mkdirat(at.dirfd(), at.name(), n.perm()) } != 0 {
            return Err(FsError::last_os_error());
        }
        let st = at.lstat()?;
        let ino = self.lock().remember(parent, name, &st);
        Ok(self.attr(ino, &st, None))
    }

    pub fn symlink(&self, parent: u64, name: &[u8], target: &[u8]) -> Result<FileAttr, FsError> {
        self.check_creatable(parent, name)?;
        let at = self.at(&self.child_path(parent, name)?)?;
        let t = cstr(target)?;
        // SAFETY: valid descriptor, NUL-terminated target and name.
        if unsafe { libc::symlinkat(t.as_ptr(), at.dirfd(), at.name()) } != 0 {
            return Err(FsError::last_os_error());
        }
        let st = at.lstat()?;
        let ino = self.lock().remember(parent, name, &st);
        Ok(self.attr(ino, &st, None))
    }

    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>, FsError> {
        let path = self.lock().path_of(ino)?;
        let at = self.at(&path)?;
        let mut buf = vec![0u8; libc::PATH_MAX as usize];
        // SAFETY: valid descriptor, name and buffer of the given length.
        let n =
            unsafe { libc::readlinkat(at.dirfd(), at.name(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            return Err(FsError::last_os_error());
        }
        buf.truncate(n as usize);
        Ok(buf)
    }

    pub(super) fn remove(&self, parent: u64, name: &[u8], dir: bool) -> Result<(), FsError> {
        if parent == ROOT && name == CONFIG {
            if dir {
                return Err(FsError::ENOTDIR);
            }
            return self.unlink_config();
        }
        let at = self.at(&self.child_path(parent, name)?)?;
        let st = at.lstat().ok();
        let flag = if dir { libc::AT_REMOVEDIR } else { 0 };
        // SAFETY: valid descriptor and name.
        if unsafe { libc::unlinkat(at.dirfd(), at.name(), flag) } != 0 {
            return Err(FsError::last_os_error());
        }
        if let Some(st) = st {
            if dir || st.st_nlink <= 1 {
                self.lock().gone((st.st_dev, st.st_ino));
            }
        }
        Ok(())
    }

    pub fn unlink(&self, parent: u64, name: &[u8]) -> Result<(), FsError> {
        self.remove(parent, name, false)
    }

    pub fn rmdir(&self, parent: u64, name: &[u8]) -> Result<(), FsError> {
        self.remove(parent, name, true)
    }

    pub fn rename(&self, r: &Rename<'_>) -> Result<(), FsError> {
        let (parent, name, flags) = (r.parent, r.name, r.flags);
        let (newparent, newname) = (r.newparent, r.newname);
        self.check_creatable(newparent, newname)?;
        let from_config = parent == ROOT && name == CONFIG;
        let to_config = newparent == ROOT && newname == CONFIG;
        if from_config && to_config {
            return Ok(());
        }
        let from = self.child_path(parent, name)?;
        let to = self.child_path(newparent, newname)?;
        if from_config {
            return self.move_config_away(newparent, &self.at(&to)?, flags);
        }
        let src_at = self.at(&from)?;
        let src = src_at.lstat()?;
        if to_config {
            return self.install_config(&src_at, &src, flags);
        }
        let to_at = self.at(&to)?;
        let old_target = to_at.lstat().ok();
        // SAFETY: valid descriptors and names.
        let r = unsafe {
            libc::syscall(
                libc::SYS_renameat2,
                src_at.dirfd(),
                src_at.name(),
                to_at.dirfd(),
                to_at.name(),
                flags as libc::c_uint,
            )
        };
        if r != 0 {
            return Err(FsError::last_os_error());
        }
        let mut g = self.lock();
        if let Some(t) = old_target {
            if flags & libc::RENAME_EXCHANGE == 0
                && (t.st_dev, t.st_ino) != (src.st_dev, src.st_ino)
            {
                g.gone((t.st_dev, t.st_ino));
            }
        }
        if let Some(&ino) = g.by_real.get(&(src.st_dev, src.st_ino)) {
            if let Some(n) = g.nodes.get_mut(&ino) {
                n.parent = newparent;
                n.name = newname.into();
            }
        }
        Ok(())
    }

    /// Lists a directory of the real tree (`.` and `..` excluded; at the root, the ref
    /// view's names and the reserved ones excluded).
    pub(super) fn list(&self, path: &[u8], at_root: bool) -> Result<Vec<DirEntry>, FsError> {
        let dir = self.open_beneath(path, libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
        let fd = dir.as_raw_fd();
        // SAFETY: fdopendir takes ownership of a dup of our descriptor.
        let dup = unsafe { libc::dup(fd) };
        if dup < 0 {
            return Err(FsError::last_os_error());
        }
        // SAFETY: a valid descriptor; on success the stream owns it.
        let stream = unsafe { libc::fdopendir(dup) };
        if stream.is_null() {
            // SAFETY: still ours on failure.
            unsafe { libc::close(dup) };
            return Err(FsError::last_os_error());
        }
        let mut out = Vec::new();
        // Removed through the mount: GITDIR keeps a config with the extension only.
        let hide_config = at_root && self.config_hidden();
        loop {
            // SAFETY: a valid stream; the entry is valid until the next readdir.
            let ent = unsafe { libc::readdir64(stream) };
            if ent.is_null() {
                break;
            }
            // SAFETY: d_name is NUL-terminated within the entry.
            let name = unsafe { std::ffi::CStr::from_ptr((*ent).d_name.as_ptr()) }.to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            if at_root && (is_ref_name_at_root(name) || is_reserved_at_root(name)) {
                continue;
            }
            if hide_config && name == CONFIG {
                continue;
            }
            // SAFETY: as above.
            let (d_ino, d_type) = unsafe { ((*ent).d_ino, (*ent).d_type) };
            let kind = match d_type {
                libc::DT_DIR => FileType::Directory,
                libc::DT_LNK => FileType::Symlink,
                libc::DT_FIFO => FileType::NamedPipe,
                libc::DT_SOCK => FileType::Socket,
                libc::DT_CHR => FileType::CharDevice,
                libc::DT_BLK => FileType::BlockDevice,
                _ => FileType::RegularFile,
            };
            // Informational only (readdir's d_ino): the real number in our range.
            let ino = pass_ino(d_ino);
            out.push(DirEntry {
                name: name.into(),
                kind,
                ino,
            });
        }
        // SAFETY: the stream we opened (closes `dup`).
        unsafe { libc::closedir(stream) };
        Ok(out)
    }

    pub fn opendir(&self, ino: u64) -> Result<u64, FsError> {
        let (path, at_root) = {
            let g = self.lock();
            (g.path_of(ino)?, g.is_ref_root(ino))
        };
        let entries = Arc::new(self.list(&path, at_root)?);
        Ok(self.lock().add_handle(PHandle::Dir { entries }))
    }

    /// Adds `extra` (a linked worktree's ref view: `HEAD`, `refs`, `logs`) to the listing
    /// of the open directory `fh`.
    pub fn extend_dir(&self, fh: u64, extra: &[DirEntry]) {
        if let Some(PHandle::Dir { entries }) = self.lock().handles.get_mut(&fh) {
            Arc::make_mut(entries).extend(extra.iter().cloned());
        }
    }

    /// Whether `ino` is `worktrees`, where the linked worktrees' directories are.
    pub fn is_worktrees_dir(&self, ino: u64) -> bool {
        self.lock()
            .nodes
            .get(&ino)
            .is_some_and(|n| n.parent == ROOT && *n.name == *b"worktrees" && n.fmt == libc::S_IFDIR)
    }

    /// The id of the linked worktree whose directory (`worktrees/<id>`) is `ino`.
    pub fn worktree_of(&self, ino: u64) -> Option<Vec<u8>> {
        self.lock().worktree_of(ino).map(<[u8]>::to_vec)
    }

    /// The entries of an open directory.
    pub fn dir_entries(&self, fh: u64) -> Option<Arc<Vec<DirEntry>>> {
        match self.lock().handles.get(&fh) {
            Some(PHandle::Dir { entries }) => Some(entries.clone()),
            _ => None,
        }
    }

    /// Lists the root's passed-through names for the ref view's directory handle `fh`.
    pub fn open_root(&self, fh: u64) -> Result<(), FsError> {
        let entries = Arc::new(self.list(b".", true)?);
        self.lock().root_lists.insert(fh, entries);
        Ok(())
    }

    pub fn root_entries(&self, fh: u64) -> Option<Arc<Vec<DirEntry>>> {
        self.lock().root_lists.get(&fh).cloned()
    }

    pub fn release_root(&self, fh: u64) {
        self.lock().root_lists.remove(&fh);
    }

    pub fn releasedir(&self, fh: u64) {
        self.lock().handles.remove(&fh);
    }

    /// `fsync` of a directory: of the real one.
    pub fn fsyncdir(&self, ino: u64) -> Result<(), FsError> {
        let path = self.lock().path_of(ino)?;
        let d = self.open_beneath(&path, libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
        d.sync_all().map_err(FsError::Io)
    }

    /// `statvfs` of the real directory.
    pub fn statfs(&self) -> Result<libc::statvfs, FsError> {
        // SAFETY: zeroed plain data filled by the kernel.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: an open descriptor and a valid out pointer.
        if unsafe { libc::fstatvfs(self.root.as_raw_fd(), &mut s) } != 0 {
            return Err(FsError::last_os_error());
        }
        Ok(s)
    }
}
