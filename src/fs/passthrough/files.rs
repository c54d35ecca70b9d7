//! Passed-through regular files: open (with the kernel's FUSE passthrough when it is
//! offered), create, read, write, fsync, release; `config` served without the
//! `refStorage` extension.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use fuser::{BackingId, FileAttr};

use crate::fs::config_view;
use crate::fs::error::FsError;
use crate::fs::ino::ROOT;

use super::*;

impl Passthrough {
    /// The real config as served (without the extension).
    pub(super) fn served_config(&self) -> Result<Vec<u8>, FsError> {
        let raw = self.read_real(CONFIG)?;
        Ok(config_view::served(&raw))
    }

    pub(super) fn read_real(&self, path: &[u8]) -> Result<Vec<u8>, FsError> {
        // O_NONBLOCK: a name swapped for a FIFO does not hang the request.
        read_bounded(self.open_beneath(path, libc::O_RDONLY | libc::O_NONBLOCK, 0)?)
    }

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
                eprintln!(
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
            None => Opened::Plain { fh, direct: false },
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
            if flags & libc::O_ACCMODE != libc::O_RDONLY {
                return Err(crate::fs::record::refuse_for(
                    "open for writing",
                    &path,
                    libc::EPERM,
                    "config is written through config.lock and rename only",
                ));
            }
            let data = Arc::new(self.served_config()?);
            let fh = self.lock().add_handle(PHandle::Config { data });
            return Ok(Opened::Plain { fh, direct: true });
        }
        let flags = flags & CLIENT_OPEN_FLAGS & !(libc::O_CREAT | libc::O_EXCL);
        let file = self.open_beneath(&path, flags, 0)?;
        self.opened(ino, file, open_backing)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn create(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        umask: u32,
        flags: i32,
        open_backing: impl FnOnce(&File) -> io::Result<BackingId>,
    ) -> Result<(FileAttr, Opened), FsError> {
        self.check_creatable(parent, name)?;
        if parent == ROOT && name == CONFIG {
            let errno = if flags & libc::O_EXCL != 0 {
                libc::EEXIST
            } else {
                libc::EPERM
            };
            return Err(crate::fs::record::refuse_for(
                "create",
                name,
                errno,
                "config is written through config.lock and rename only",
            ));
        }
        let path = self.child_path(parent, name)?;
        let file = self.open_beneath(
            &path,
            flags & CLIENT_OPEN_FLAGS | libc::O_CREAT,
            mode & !umask & 0o7777,
        )?;
        let st = Self::fstat(&file)?;
        let ino = self.lock().remember(parent, name, &st);
        let attr = self.attr(ino, &st, None);
        Ok((attr, self.opened(ino, file, open_backing)?))
    }

    pub fn read(&self, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>, FsError> {
        let h = {
            let g = self.lock();
            match g.handles.get(&fh) {
                Some(PHandle::File { file, .. }) => Ok(file.clone()),
                Some(PHandle::Config { data }) => Err(Some(data.clone())),
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
            Err(Some(data)) => {
                let start = usize::try_from(offset)
                    .unwrap_or(usize::MAX)
                    .min(data.len());
                let end = start.saturating_add(size as usize).min(data.len());
                Ok(data.get(start..end).unwrap_or_default().to_vec())
            }
            Err(None) => Err(FsError::EBADF),
        }
    }

    pub fn write(&self, fh: u64, offset: u64, data: &[u8]) -> Result<u32, FsError> {
        let file = match self.lock().handles.get(&fh) {
            Some(PHandle::File { file, .. }) => file.clone(),
            _ => return Err(FsError::EBADF),
        };
        // With O_APPEND, pwrite appends whatever the offset (as a write through the kernel).
        file.write_all_at(data, offset).map_err(FsError::Io)?;
        u32::try_from(data.len()).map_err(|_| FsError::EINVAL)
    }

    pub fn fsync(&self, fh: u64, datasync: bool) -> Result<(), FsError> {
        let file = match self.lock().handles.get(&fh) {
            Some(PHandle::File { file, .. }) => file.clone(),
            Some(_) => return Ok(()),
            None => return Err(FsError::EBADF),
        };
        let r = if datasync {
            file.sync_data()
        } else {
            file.sync_all()
        };
        r.map_err(FsError::Io)
    }

    pub fn release(&self, fh: u64) {
        let mut g = self.lock();
        if let Some(PHandle::File {
            ino, backed: true, ..
        }) = g.handles.remove(&fh)
        {
            if let Some((_, n)) = g.backing.get_mut(&ino) {
                *n -= 1;
                if *n == 0 {
                    g.backing.remove(&ino);
                }
            }
        }
    }
}
