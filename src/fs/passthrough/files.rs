//! Passed-through regular files: open (with the kernel's FUSE passthrough when it is
//! offered), create, read, write, flush, fsync, release; `config`'s handles go to
//! `config.rs`.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use fuser::{BackingId, FileAttr};

use crate::fs::backend::NewNode;
use crate::fs::error::FsError;
use crate::fs::ino::ROOT;

use super::*;

impl Passthrough {
    /// Registers `file` for kernel passthrough on `ino` (one backing file per inode,
    /// shared by its open handles), or says why not.
    pub(super) fn backing_for(
        &self,
        ino: u64,
        file: &File,
        open_backing: impl FnOnce(&File) -> io::Result<BackingId>,
    ) -> Option<Arc<BackingId>> {
        if !self.kernel_passthrough() {
            return None;
        }
        let mut g = self.lock();
        if let Some((b, n)) = g.backing.get_mut(&ino) {
            *n += 1;
            return Some(b.clone());
        }
        match open_backing(file) {
            Ok(b) => {
                let b = Arc::new(b);
                g.backing.insert(ino, (b.clone(), 1));
                Some(b)
            }
            Err(e) => {
                drop(g);
                log::warn!(
                    "reftablefs: kernel FUSE passthrough refused ({e}); passed-through files are forwarded from now on"
                );
                self.set_kernel_passthrough(false);
                None
            }
        }
    }

    pub(super) fn opened(
        &self,
        ino: u64,
        file: File,
        open_backing: impl FnOnce(&File) -> io::Result<BackingId>,
    ) -> Result<Opened, FsError> {
        let regular = Self::fstat(&file)?.st_mode & libc::S_IFMT == libc::S_IFREG;
        let backing = if regular {
            self.backing_for(ino, &file, open_backing)
        } else {
            None
        };
        let backed = backing.is_some();
        let fh = self.lock().add_handle(PHandle::File {
            file: Arc::new(file),
            ino,
            backed,
        });
        Ok(match backing {
            Some(backing) => Opened::Backed { fh, backing },
            None => Opened::Plain {
                fh,
                direct: false,
                flush: false,
            },
        })
    }

    pub fn open(
        &self,
        ino: u64,
        flags: i32,
        open_backing: impl FnOnce(&File) -> io::Result<BackingId>,
    ) -> Result<Opened, FsError> {
        let (path, is_config) = {
            let g = self.lock();
            (g.path_of(ino)?, g.is_config(ino))
        };
        if is_config {
            return self.open_config(flags);
        }
        let flags = flags & CLIENT_OPEN_FLAGS & !(libc::O_CREAT | libc::O_EXCL);
        let file = self.open_beneath(&path, flags, 0)?;
        self.opened(ino, file, open_backing)
    }

    pub fn create(
        &self,
        n: NewNode<'_>,
        flags: i32,
        open_backing: impl FnOnce(&File) -> io::Result<BackingId>,
    ) -> Result<(FileAttr, Opened), FsError> {
        let (parent, name) = (n.parent, n.name);
        self.check_creatable(parent, name)?;
        if parent == ROOT && name == CONFIG {
            return self.create_config(n.perm(), flags);
        }
        let path = self.child_path(parent, name)?;
        let file = self.open_beneath(&path, flags & CLIENT_OPEN_FLAGS | libc::O_CREAT, n.perm())?;
        let st = Self::fstat(&file)?;
        let ino = {
            let mut g = self.lock();
            let ino = g.remember(parent, name, &st);
            // Empty: whatever it will hold is written through the mount from here on.
            if st.st_size == 0 {
                if let Some(n) = g.nodes.get_mut(&ino) {
                    n.unsynced = true;
                }
            }
            ino
        };
        let attr = self.attr(ino, &st, None);
        Ok((attr, self.opened(ino, file, open_backing)?))
    }

    pub fn read(&self, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>, FsError> {
        let h = {
            let g = self.lock();
            match g.handles.get(&fh) {
                Some(PHandle::File { file, .. }) => Ok(file.clone()),
                Some(PHandle::Config { id, .. }) => Err(Some(*id)),
                _ => Err(None),
            }
        };
        match h {
            Ok(file) => {
                let mut buf = vec![0; size as usize];
                let mut done = 0;
                while done < buf.len() {
                    match file.read_at(&mut buf[done..], offset + done as u64) {
                        Ok(0) => break,
                        Ok(n) => done += n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(FsError::Io(e)),
                    }
                }
                buf.truncate(done);
                Ok(buf)
            }
            Err(Some(id)) => self.read_config(id, offset, size),
            Err(None) => Err(FsError::EBADF),
        }
    }

    pub fn write(&self, fh: u64, offset: u64, data: &[u8]) -> Result<u32, FsError> {
        // The handle first, the passthrough's lock dropped: a config's write takes the
        // config lock, which is never taken under it.
        let handle = match self.lock().handles.get(&fh) {
            Some(PHandle::File { file, .. }) => Ok(file.clone()),
            Some(&PHandle::Config {
                id,
                append,
                writable: true,
            }) => Err(Some((id, append))),
            _ => Err(None),
        };
        let file = match handle {
            Ok(file) => file,
            Err(Some((id, append))) => return self.write_config(id, append, offset, data),
            Err(None) => return Err(FsError::EBADF),
        };
        // With O_APPEND, pwrite appends whatever the offset (as a write through the kernel).
        file.write_all_at(data, offset).map_err(FsError::Io)?;
        u32::try_from(data.len()).map_err(|_| FsError::EINVAL)
    }

    /// Each `close` of a handle opened with `flush` (a writable config): stores it.
    pub fn flush(&self, fh: u64) -> Result<(), FsError> {
        let config = self.lock().config_of(fh);
        match config {
            Some((id, true)) => self.flush_config(id, "close"),
            _ => Ok(()),
        }
    }

    pub fn fsync(&self, fh: u64, datasync: bool) -> Result<(), FsError> {
        // As in `write`: the lock dropped before a config is stored.
        let handle = match self.lock().handles.get(&fh) {
            Some(PHandle::File { file, ino, .. }) => Ok(Some((file.clone(), *ino))),
            Some(&PHandle::Config { id, .. }) => Err(id),
            Some(_) => Ok(None),
            None => return Err(FsError::EBADF),
        };
        let (file, ino) = match handle {
            Ok(Some(h)) => h,
            Ok(None) => return Ok(()),
            Err(id) => return self.flush_config(id, "fsync"),
        };
        let r = if datasync {
            file.sync_data()
        } else {
            file.sync_all()
        };
        r.map_err(FsError::Io)?;
        if let Some(n) = self.lock().nodes.get_mut(&ino) {
            n.unsynced = false;
        }
        Ok(())
    }

    pub fn release(&self, fh: u64) {
        let mut g = self.lock();
        match g.handles.remove(&fh) {
            Some(PHandle::File {
                ino, backed: true, ..
            }) => {
                if let Some((_, n)) = g.backing.get_mut(&ino) {
                    *n -= 1;
                    if *n == 0 {
                        g.backing.remove(&ino);
                    }
                }
            }
            Some(PHandle::Config { id, writable, .. }) => {
                drop(g);
                self.release_config(id, writable);
            }
            _ => {}
        }
    }
}
