//! Open files of a ref view: what an open handle holds (`Handle`), opening for reading
//! (the page-cache rules: a ref file's pages kept only for the content last filled) and
//! for writing, reads, and release.

use std::sync::Arc;

use crate::fs::budget::{CONTENT_BYTES_MAX, HANDLES_MAX, HELD_BYTES_MAX};
use crate::fs::error::FsError;
use crate::fs::inode::OpenMode;
use crate::fs::protocol::Caller;
use crate::fs::reserve;
use crate::fs::view::{Kind, Listing};

use super::{Inner, Shared};

/// What an open-for-writing handle writes to.
#[derive(Debug, Clone)]
pub enum Target {
    /// A scratch file (content in the overlay's `files`).
    Scratch,
    /// A ref written in place (`echo <hex> > refs/heads/x`): committed at flush.
    Ref { name: Vec<u8>, placeholder: bool },
    /// A reflog opened for writing: every line a write completes is parsed into a log
    /// record and staged; the handle's `data` keeps the unfinished last line (at most
    /// [`LOG_LINE_MAX`] bytes), written by process `tail_by`.
    Log { name: Vec<u8>, tail_by: u32 },
    /// `packed-refs` opened for writing (go-git locks it with `flock` and may rewrite it in
    /// place): what is written replaces it at flush, a commit point as a `packed-refs.new`
    /// renamed over it. `seen`: other writers' changes counted when it was opened
    /// (`WriteState::commit_packed_refs`).
    Packed { seen: u64 },
}

/// The longest unfinished reflog line an open reflog keeps between writes (a line split
/// over several `write()`s: shell `printf` pieces, buffered writers that flush mid-line).
pub const LOG_LINE_MAX: usize = 1 << 20;

/// An open file or directory.
pub enum Handle {
    /// A file opened for reading: its content as of `open`, so a reader never sees a torn
    /// value however the ref changes meanwhile. `fp` is the content's fingerprint when
    /// the handle fills the page cache of a ref file.
    File { data: Vec<u8>, fp: Option<u64> },
    /// `packed-refs` opened for reading: the one content of its inode (a version of the
    /// rendering, `Inodes::remember_version`), shared with every other reader of it.
    Shared { data: Arc<Vec<u8>> },
    /// An open directory: the listing as of `opendir`.
    Dir {
        path: Vec<u8>,
        entries: Arc<Listing>,
    },
    /// A file opened for writing: `data` is a ref's content written so far
    /// ([`Target::Ref`]) or a reflog's unfinished last line ([`Target::Log`]). `failed`: an
    /// edit staged through this file could not be written; every later `flush` (close)
    /// and `fsync` of it reports EIO.
    Write {
        path: Vec<u8>,
        target: Target,
        data: Vec<u8>,
        dirty: bool,
        failed: bool,
    },
}

impl Handle {
    /// Bytes this handle holds (`budget.rs`).
    pub(super) fn held(&self) -> usize {
        match self {
            Handle::File { data, .. } => data.capacity(),
            Handle::Shared { data, .. } => data.len(),
            Handle::Dir { path, entries } => path.capacity() + entries.len() * 32,
            Handle::Write { path, data, .. } => path.capacity() + data.capacity(),
        }
    }
}

/// Ref files up to this size (one page: one read request fills it at once) go through
/// the page cache; longer ones (only a symref to a very long name) are direct-IO.
pub(super) const PAGE_CACHED_MAX: usize = 4096;

/// A 64-bit FNV-1a fingerprint of a file's content.
pub(super) fn fingerprint(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl Shared {
    /// [`Shared::open_as`] by an unknown process.
    #[cfg(test)]
    pub(crate) fn open(&self, ino: u64, flags: i32) -> Result<(u64, OpenMode), FsError> {
        self.open_as(ino, flags, 0)
    }

    /// Opens a file for the thread `pid`. Returns the handle and how the kernel may cache
    /// its content: ref files of a stable size through the page cache (kept while their
    /// content is what the kernel's pages hold), `packed-refs` through the page cache
    /// refilled at every open (git may mmap it), everything else direct-IO. A reflog
    /// opened for writing with `O_TRUNC` is emptied for `pid`'s process (a failed write of
    /// that edit is reported to it).
    pub(crate) fn open_as(
        &self,
        ino: u64,
        flags: i32,
        pid: u32,
    ) -> Result<(u64, OpenMode), FsError> {
        let writing = flags & libc::O_ACCMODE != libc::O_RDONLY;
        if writing && self.read_only() {
            return Err(FsError::EROFS);
        }
        let mut g = self.lock();
        g.fresh()?;
        let (path, kind) = g.path_of(ino)?;
        if kind == Kind::Dir {
            return Err(FsError::EISDIR);
        }
        if kind == Kind::Link {
            // A symbolic link is resolved by the kernel in the caller, never opened.
            return Err(FsError::ELOOP);
        }
        if !writing && kind == Kind::PackedRefs {
            // The inode's one content, whose pages the kernel keeps: every page of it ever
            // filled holds this content. An inode whose content is no longer kept (more
            // changes came between the lookup and this open than are kept) or that never
            // had one (a lock renamed over `packed-refs`) is stale: the kernel looks the
            // name up again. One opened for writing through the kernel (go-git) is read
            // direct-IO: its size and pages in the kernel may come from those writes.
            let current = g.packed_refs_marked(&path)?;
            let data = match g.inodes.version(ino) {
                Some(v) if v == current.1 => current.0,
                Some(v) => g.w.packed_refs_version(v).ok_or(FsError::ESTALE)?,
                None => return Err(FsError::ESTALE),
            };
            let mode = match g.inodes.fixed_size(ino) {
                Some(_) => OpenMode::Cached,
                None => OpenMode::Direct,
            };
            let fh = g.add_handle(&path, Handle::Shared { data })?;
            return Ok((fh, mode));
        }
        if !writing {
            let mut data = Vec::new();
            g.render(&path, kind, &mut data)?;
            let (mode, fp) = match kind {
                Kind::Ref if data.len() <= PAGE_CACHED_MAX => {
                    let fp = fingerprint(&data);
                    let size = data.len() as u64;
                    let mode = g.inodes.open_for_read(ino, size, fp);
                    if g.inodes.fixed_size(ino).is_some_and(|f| f != size) {
                        self.name_is_stale(&mut g, ino);
                    }
                    (mode, (mode != OpenMode::Direct).then_some(fp))
                }
                _ => (OpenMode::Direct, None),
            };
            let fh = g.add_handle(&path, Handle::File { data, fp })?;
            return Ok((fh, mode));
        }
        g.still(&path, kind)?;
        let fh = g.open_for_write(&path, kind, flags, self.tgid(pid))?;
        // Writes through the kernel move its idea of the size.
        g.inodes.suspect(ino);
        Ok((fh, OpenMode::Direct))
    }

    /// The bytes a read of an open file returns. A direct-IO read handle answers from its
    /// content as of `open` (a reader never sees a torn value however the ref changes
    /// meanwhile); a page-cache read handle fills the inode's one page, which every later
    /// open of the inode may keep, so it answers with the ref's content now (one read
    /// fills the whole file: never torn), or with its own snapshot when the ref's size
    /// has moved on (the page then belongs to an inode no open keeps any more). `direct`:
    /// the read bypasses the page cache (`O_DIRECT`), so it fills no page. A read-write
    /// handle (a reflog opened `rb+`) answers from the file as it is now through the
    /// overlay.
    pub(crate) fn read_file(
        &self,
        ino: u64,
        fh: u64,
        offset: u64,
        size: u32,
        direct: bool,
    ) -> Result<Vec<u8>, FsError> {
        let mut g = self.lock();
        let slice = |data: &[u8]| -> Vec<u8> {
            let start = usize::try_from(offset)
                .unwrap_or(usize::MAX)
                .min(data.len());
            let end = start.saturating_add(size as usize).min(data.len());
            data.get(start..end).unwrap_or_default().to_vec()
        };
        match g.handles.get(&fh) {
            Some(Handle::File { fp: None, data }) => Ok(slice(data)),
            Some(Handle::Shared { data }) => Ok(slice(data)),
            Some(Handle::File { fp: Some(fp), data }) => {
                let (own_fp, own) = (*fp, slice(data));
                let len = data.len();
                let mut now = Vec::new();
                let current = match g.path_of(ino) {
                    Ok((path, Kind::Ref)) => g.render(&path, Kind::Ref, &mut now).is_ok(),
                    _ => false,
                };
                let (out, filled) = if current && now.len() == len {
                    (slice(&now), fingerprint(&now))
                } else {
                    (own, own_fp)
                };
                if !direct {
                    g.inodes.pages_filled(ino, filled);
                }
                Ok(out)
            }
            Some(Handle::Write {
                target: Target::Ref { .. } | Target::Packed { .. },
                data,
                ..
            }) => Ok(slice(data)),
            Some(Handle::Write {
                path,
                target: Target::Scratch,
                ..
            }) => Ok(slice(g.w.files.get(path).ok_or(FsError::ENOENT)?)),
            Some(Handle::Write { path, data, .. }) => {
                // A reflog read through its read-write handle: the lines staged, then
                // the unfinished line this handle wrote.
                let (path, tail) = (path.clone(), data.clone());
                let mut buf = Vec::new();
                g.render(&path, Kind::Log, &mut buf)?;
                buf.extend_from_slice(&tail);
                Ok(slice(&buf))
            }
            _ => Err(FsError::EBADF),
        }
    }

    pub(crate) fn with_handle<R>(&self, fh: u64, f: impl FnOnce(Option<&Handle>) -> R) -> R {
        let g = self.lock();
        f(g.handles.get(&fh))
    }

    pub(crate) fn release(&self, fh: u64) {
        let mut g = self.lock();
        match g.remove_handle(fh) {
            Some(Handle::Write {
                path,
                target: Target::Ref {
                    placeholder: true, ..
                },
                ..
            }) => {
                // A ref created in place but never validly written (e.g. `touch`) vanishes.
                g.w.files.remove(&path);
            }
            Some(Handle::Write {
                path,
                target: Target::Log { .. },
                data,
                ..
            }) if !data.is_empty() => {
                // The last close came from another process than the one that wrote the
                // piece (its own close would have been refused): nobody can be told now,
                // so it is logged and recorded.
                let _ = self.rec.refuse_for(
                    "release",
                    &path,
                    libc::EINVAL,
                    unfinished_line(data.len()),
                );
            }
            _ => {}
        }
    }
}

impl Inner {
    /// Registers an open file: `ENFILE` beyond [`HANDLES_MAX`] open files, `ENOMEM` when
    /// its content would take the bytes held beyond [`HELD_BYTES_MAX`] (`budget.rs`).
    pub(super) fn add_handle(&mut self, path: &[u8], h: Handle) -> Result<u64, FsError> {
        if self.handles.len() >= HANDLES_MAX {
            return Err(self.rec.refuse_for(
                "open",
                path,
                libc::ENFILE,
                format!("{HANDLES_MAX} files are open on the mount already"),
            ));
        }
        let held = h.held();
        if self.w.files.bytes() + self.handle_bytes + held > HELD_BYTES_MAX {
            return Err(self.rec.refuse_for(
                "open",
                path,
                libc::ENOMEM,
                format!(
                    "lock, scratch and open files hold {HELD_BYTES_MAX} bytes at most, and this \
                     open would pass that"
                ),
            ));
        }
        let fh = self.next_fh;
        self.next_fh += 1;
        self.handle_bytes += held;
        self.handles.insert(fh, h);
        Ok(fh)
    }

    /// Closes an open file's handle.
    pub(super) fn remove_handle(&mut self, fh: u64) -> Option<Handle> {
        let h = self.handles.remove(&fh)?;
        self.handle_bytes -= h.held();
        Some(h)
    }

    /// Opens `path` (of `kind`) for writing for process `pid`. With `O_TRUNC` a scratch
    /// file is emptied and a reflog rewritten to nothing (an edit staged at the open, as
    /// the files backend's truncation happens there).
    pub(super) fn open_for_write(
        &mut self,
        path: &[u8],
        kind: Kind,
        flags: i32,
        pid: u32,
    ) -> Result<u64, FsError> {
        let trunc = flags & libc::O_TRUNC != 0;
        let target = match kind {
            // A file at a ref's own path (one being created in place, a linked worktree's
            // placeholder HEAD): what is written becomes the ref.
            Kind::Scratch if crate::fs::protocol::valid_ref_name(path) => Target::Ref {
                name: path.to_vec(),
                placeholder: false,
            },
            Kind::Scratch => {
                if trunc {
                    self.w.files.update(path, Vec::clear);
                }
                Target::Scratch
            }
            Kind::Ref => Target::Ref {
                name: path.to_vec(),
                placeholder: false,
            },
            Kind::Log => {
                let name = path.get(5..).unwrap_or_default().to_vec();
                if trunc {
                    self.promise("open", path, reserve::edit_bytes(name.len(), 0))?;
                }
                Target::Log { name, tail_by: pid }
            }
            Kind::PackedRefs => Target::Packed {
                seen: self.w.packed.external_changes(),
            },
            Kind::Dir => return Err(FsError::EISDIR),
            Kind::Link => return Err(FsError::ELOOP),
        };
        let mut data = Vec::new();
        if let (Target::Ref { .. } | Target::Packed { .. }, false) = (&target, trunc) {
            self.render(path, kind, &mut data)?;
        }
        let emptied_log = match &target {
            Target::Log { name, .. } if trunc => Some(name.clone()),
            _ => None,
        };
        let fh = self.add_handle(
            path,
            Handle::Write {
                path: path.to_vec(),
                target,
                data,
                dirty: trunc,
                failed: false,
            },
        )?;
        if let Some(name) = emptied_log {
            // `cat > logs/x`, `open(O_TRUNC)`: the reflog is replaced by what is written
            // next, as on disk (it was appended to).
            self.w
                .replace_log(&Caller::new(pid, vec![fh]), &name, Vec::new());
            self.after_staging();
        }
        Ok(fh)
    }

    /// A write of `data` into the reflog open as `fh` by process `actor`: every line it
    /// completes (with the unfinished line the handle kept) is staged; what follows the
    /// last newline is kept for the next write, and refused once it can no longer become
    /// a reflog line or passes [`LOG_LINE_MAX`]. On a refusal nothing of `data` is taken.
    pub(super) fn write_log(&mut self, fh: u64, data: &[u8], actor: u32) -> Result<(), FsError> {
        let Some(Handle::Write {
            path,
            target: Target::Log { name, .. },
            data: tail,
            ..
        }) = self.handles.get_mut(&fh)
        else {
            return Err(FsError::EBADF);
        };
        let (path, name) = (path.clone(), name.clone());
        let mut text = std::mem::take(tail);
        let before = text.capacity();
        let kept = text.len();
        let put_back = |g: &mut Inner, mut text: Vec<u8>, by: Option<u32>| {
            if let Some(Handle::Write {
                target: Target::Log { tail_by, .. },
                data: tail,
                ..
            }) = g.handles.get_mut(&fh)
            {
                if let Some(by) = by {
                    *tail_by = by;
                }
                text.shrink_to(text.len().max(256));
                g.handle_bytes = g.handle_bytes - before + text.capacity();
                *tail = text;
            }
        };
        let last_nl = data.iter().rposition(|&b| b == b'\n');
        let unfinished = match last_nl {
            Some(i) => data.len() - i - 1,
            None => kept + data.len(),
        };
        let others = self.w.files.bytes() + self.handle_bytes - before;
        if unfinished > LOG_LINE_MAX || others + kept + data.len() > CONTENT_BYTES_MAX {
            put_back(self, text, None);
            return Err(self
                .rec
                .too_big("append", &path, FsError::EFBIG, LOG_LINE_MAX));
        }
        text.extend_from_slice(data);
        let Some(i) = last_nl.map(|i| kept + i) else {
            if let Err(why) = crate::files::reflog_line_prefix_ok(&text, self.w.hash) {
                text.truncate(kept);
                put_back(self, text, None);
                // No reflog lines: kept as a file where broken refs are (`broken.rs`).
                if let Some(r) = self.broken_log_junk(fh, data, actor) {
                    return r;
                }
                return Err(self.rec.refuse_for("append", &path, libc::EINVAL, why));
            }
            put_back(self, text, Some(actor));
            return Ok(());
        };
        let rest = text.split_off(i + 1);
        if let Err(why) = crate::files::reflog_line_prefix_ok(&rest, self.w.hash) {
            text.truncate(kept);
            put_back(self, text, None);
            if let Some(r) = self.broken_log_junk(fh, data, actor) {
                return r;
            }
            return Err(self.rec.refuse_for("append", &path, libc::EINVAL, why));
        }
        let who = Caller::new(actor, vec![fh]);
        let staged = self
            .promise("append", &path, reserve::edit_bytes(name.len(), text.len()))
            .and_then(|()| match self.w.append_log(&who, &name, &text) {
                Err(r) if r.errno == libc::EINVAL => Ok(Some(r)),
                Err(r) => Err(self.rec.refuse("append", &path, r)),
                Ok(_) => Ok(None),
            });
        let junk = match staged {
            Ok(junk) => junk,
            Err(e) => {
                text.truncate(kept);
                put_back(self, text, None);
                return Err(e);
            }
        };
        if let Some(r) = junk {
            text.truncate(kept);
            put_back(self, text, None);
            // No reflog lines: kept as a file where broken refs are (`broken.rs`).
            if let Some(kept) = self.broken_log_junk(fh, data, actor) {
                return kept;
            }
            return Err(self.rec.refuse("append", &path, r));
        }
        put_back(self, rest, Some(actor));
        self.after_staging();
        Ok(())
    }

    /// A close (`flush`) of the reflog open as `fh` by process `actor`: a line it left
    /// unfinished is refused and dropped. A close by another process (a child that
    /// inherited the descriptor closing its copy, as a shell's command substitution does
    /// in the middle of a `printf` loop) leaves it to the writer.
    pub(super) fn close_log(&mut self, fh: u64, actor: u32) -> Result<(), FsError> {
        let Some(Handle::Write {
            path,
            target: Target::Log { tail_by, .. },
            data: tail,
            ..
        }) = self.handles.get_mut(&fh)
        else {
            return Ok(());
        };
        if tail.is_empty() || *tail_by != actor {
            return Ok(());
        }
        let (path, dropped) = (path.clone(), std::mem::take(tail));
        self.handle_bytes -= dropped.capacity();
        Err(self
            .rec
            .refuse_for("close", &path, libc::EINVAL, unfinished_line(dropped.len())))
    }
}

/// Why an unfinished reflog line is refused at its close.
fn unfinished_line(len: usize) -> String {
    format!(
        "the last reflog line written never ended ({len} bytes without a newline): it was \
         not stored (the lines before it were)"
    )
}
