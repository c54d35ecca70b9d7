//! The packed layer kept across unmount and mount (`GITDIR/reftablefs-packed`,
//! [`crate::fs::protocol::packed::STATE_FILE`]): read once when the view starts, written
//! by the watcher at most once a second after it changed and once more at unmount.
//! What it can lose: the changes of the last second when the daemon is killed (`kill -9`)
//! — the refs' values are in the stack whatever happens; only whether a ref shows as a
//! loose file or in `packed-refs` falls back to the layout's default.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::fs::protocol::STATE_FILE;

use super::Shared;

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
        let revision = {
            let mut g = self.lock();
            let super::Inner { w, src, .. } = &mut *g;
            if !content.is_empty() {
                w.load_packed_state(src.as_mut(), &content);
            }
            g.w.packed.revision()
        };
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
        let Some(f) = self.packed_file.get() else {
            return;
        };
        let mut saved = f.saved.lock().unwrap_or_else(|p| p.into_inner());
        if !now && saved.1.is_some_and(|t| t.elapsed() < SAVE_INTERVAL) {
            return;
        }
        let mut out = Vec::new();
        let (revision, default) = {
            let g = self.lock();
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

/// Writes `path` through a temporary file beside it, fsynced, renamed over it.
fn write_replace(path: &Path, content: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut file = std::fs::File::create(&tmp)?;
    let written = file.write_all(content).and_then(|()| file.sync_all());
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(())
}
