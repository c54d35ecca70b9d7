//! The packed layer kept across unmount and mount (`GITDIR/reftablefs-packed`,
//! [`crate::fs::protocol::STATE_FILE`]): read once when the view starts, written
//! by the watcher at most once a second after it changed, at once after `packed-refs` was
//! created, renamed onto or unlinked (whether it exists), and once more at unmount.
//! What it can lose: the changes of the last second when the daemon is killed (`kill -9`)
//! — the refs' values are in the stack whatever happens; only whether a ref shows as a
//! loose file or in `packed-refs` falls back to the layout's default.
//!
//! A `packed-refs` that does not parse (`protocol/packed_whole.rs`) is kept in its own file
//! ([`JUNK_FILE`]), written (`fsync`ed) before the call that wrote it returns, removed when
//! a valid one replaces it or it is unlinked. `create` of `packed-refs` when it does not
//! exist is here too.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fuser::FileAttr;

use crate::fs::durable;
use crate::fs::error::{FsError, Refusal};
use crate::fs::protocol::{JUNK_FILE, PACKED_JUNK_MAX, STATE_FILE};
use crate::fs::view::Kind;

use super::handles::{Handle, Target};
use super::{Inner, Shared};

/// Where a `packed-refs` that does not parse is kept, and the junk revision it holds.
pub(crate) struct JunkFile {
    path: PathBuf,
    saved: u64,
}

impl Inner {
    /// Whether `packed-refs` exists in the view.
    pub(super) fn packed_refs_exists(&mut self) -> Result<bool, FsError> {
        let Inner { w, src, rec, .. } = self;
        w.packed_refs_exists(src.as_mut())
            .map_err(|r| rec.refuse("lookup", b"packed-refs", r))
    }

    /// Writes (or removes) [`JUNK_FILE`] if the content kept as `packed-refs` changed since:
    /// a failure is the caller's error (`EIO`; the content shows meanwhile, and the next
    /// change or the watcher writes it again).
    pub(crate) fn sync_packed_junk(&mut self) -> Result<(), Refusal> {
        let Some(f) = self.junk_file.as_mut() else {
            return Ok(());
        };
        let revision = self.w.packed.junk_revision();
        if revision == f.saved {
            return Ok(());
        }
        let r = match self.w.packed.junk() {
            Some(j) => write_replace(&f.path, j),
            None => match std::fs::remove_file(&f.path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                r => r.and_then(|()| sync_dir(&f.path)),
            },
        };
        match r {
            Ok(()) => {
                f.saved = revision;
                Ok(())
            }
            Err(e) => Err(Refusal::new(
                libc::EIO,
                format!(
                    "keeping packed-refs that does not parse in {}: {e}",
                    f.path.display()
                ),
            )),
        }
    }
}

/// How often at most the file is rewritten while refs are packed and unpacked.
const SAVE_INTERVAL: Duration = Duration::from_secs(1);

/// Where the layer is saved and what was saved last.
pub(crate) struct PackedFile {
    path: PathBuf,
    /// The layer's revision last saved, when, and whether the file exists. Also
    /// serializes the writes.
    saved: Mutex<(u64, Option<Instant>, bool)>,
}

impl Shared {
    /// Reads the packed layer saved in `gitdir` (if any) and keeps it there from now on
    /// (never for a read-only mount, which only reads it). Call after `set_layout`, before
    /// mounting.
    pub fn keep_packed_state_in(&self, gitdir: &Path) {
        let path = gitdir.join(STATE_FILE);
        let mut on_disk = true;
        let content = match std::fs::read(&path) {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                on_disk = false;
                Vec::new()
            }
            Err(e) => {
                log::warn!(
                    "reftablefs: {}: {e}; every ref shows as the layout puts it",
                    path.display()
                );
                Vec::new()
            }
        };
        let junk_path = gitdir.join(JUNK_FILE);
        let junk = read_junk(&junk_path);
        let revision = {
            let mut g = self.lock();
            let super::Inner { w, src, .. } = &mut *g;
            if !content.is_empty() {
                w.load_packed_state(src.as_mut(), &content);
            }
            if junk.is_some() {
                w.set_packed_junk(junk);
            }
            if !self.read_only() {
                g.junk_file = Some(JunkFile {
                    path: junk_path,
                    saved: g.w.packed.junk_revision(),
                });
            }
            g.w.packed.revision()
        };
        // `packed-refs` as a symbolic link, kept beside it (`packed_link.rs`).
        self.load_packed_link(gitdir);
        if !self.read_only() {
            let _ = self.packed_file.set(PackedFile {
                path,
                saved: Mutex::new((revision, None, on_disk)),
            });
        }
    }

    /// Writes the packed layer if it changed since it was last written, and (unless
    /// `now`) the last write is at least a second old. A failure is logged: the layer
    /// stays in memory and is written at the next chance.
    pub fn save_packed_state(&self, now: bool) {
        // The link's file, if its last write failed (`packed_link.rs`).
        self.retry_packed_link();
        let Some(f) = self.packed_file.get() else {
            return;
        };
        let mut saved = f.saved.lock().unwrap_or_else(|p| p.into_inner());
        if !now && saved.1.is_some_and(|t| t.elapsed() < SAVE_INTERVAL) {
            return;
        }
        let mut out = Vec::new();
        let (revision, default) = {
            let mut g = self.lock();
            // A junk file a call failed to write (or remove) is tried again.
            if let Err(r) = g.sync_packed_junk() {
                log::error!("reftablefs: {}", r.reason);
            }
            if g.w.packed.revision() == saved.0 {
                return;
            }
            let default = g.w.packed.is_default();
            if !default {
                g.w.packed.save(&mut out);
            }
            (g.w.packed.revision(), default)
        };
        // Nothing to keep and no file: no call at all (every ref write changes the
        // revision; the layout's default needs no file).
        let r = match (default, saved.2) {
            (true, false) => Ok(()),
            (true, true) => match std::fs::remove_file(&f.path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                r => r,
            },
            (false, _) => write_replace(&f.path, &out),
        };
        match r {
            Ok(()) => *saved = (revision, Some(Instant::now()), !default),
            Err(e) => log::error!("reftablefs: writing {}: {e}", f.path.display()),
        }
    }
}

impl Shared {
    /// `create` of `packed-refs` when it does not exist (`mv` across devices removes it,
    /// then creates it): it exists from now on, empty, and what is written through the
    /// handle replaces it at flush, as in place.
    pub(super) fn create_packed_refs(
        &self,
        g: &mut Inner,
        parent: u64,
        name: &[u8],
    ) -> Result<(FileAttr, u64), FsError> {
        let path = b"packed-refs".to_vec();
        let seen = g.w.packed.external_changes();
        let fh = g.add_handle(
            &path,
            Handle::Write {
                path: path.clone(),
                target: Target::Packed { seen },
                data: Vec::new(),
                dirty: false,
                failed: false,
            },
        )?;
        g.w.create_packed_refs();
        g.entries_changed(b"", true);
        let ino = g
            .inodes
            .remember(parent, name, &path, Kind::PackedRefs, None);
        Ok((self.attr_timed(g, ino, &path, Kind::PackedRefs, 0), fh))
    }
}

/// The content of [`JUNK_FILE`], if it exists and is within [`PACKED_JUNK_MAX`] (a larger
/// one, which the mount never writes, is left where it is and not shown).
fn read_junk(path: &Path) -> Option<Vec<u8>> {
    let warn = |e: &dyn std::fmt::Display| {
        log::warn!(
            "reftablefs: {}: {e}; packed-refs shows its entries",
            path.display()
        );
    };
    match std::fs::metadata(path) {
        Ok(m) if m.len() > PACKED_JUNK_MAX as u64 => {
            warn(&format!("larger than {PACKED_JUNK_MAX} bytes"));
            None
        }
        Ok(_) => std::fs::read(path).map_err(|e| warn(&e)).ok(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            warn(&e);
            None
        }
    }
}

/// Writes `path` through `path.tmp` (`durable::replace`).
fn write_replace(path: &Path, content: &[u8]) -> std::io::Result<()> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(std::io::ErrorKind::InvalidInput.into());
    };
    let mut tmp = name.to_owned();
    tmp.push(".tmp");
    durable::replace(dir, Path::new(&tmp), Path::new(name), content)
}

/// Fsyncs the directory of `path` (a name in it was made or removed).
fn sync_dir(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(dir) => durable::sync_dir(dir),
        None => Ok(()),
    }
}
