//! What the kernel holds that went stale: names and ref files whose content or time
//! changed, found after the mount's own batches, by request handlers and by the
//! watcher's scans (`watch.rs` sends the invalidations).

use crate::fs::view::Kind;

use super::handles::fingerprint;
use super::{Inner, Shared};

impl Shared {
    /// After the mount's own batch: directories the kernel holds on the paths of the
    /// written refs (and their reflogs) that no longer exist or are no longer
    /// directories (a deleted ref takes its emptied parents with it) are queued for
    /// `inval_entry` — the kernel saw the unlink but not that. Costs a few seeks per
    /// edit, not a pass over every known inode.
    pub(crate) fn queue_changed_dirs(&self, names: &[&[u8]]) {
        let mut g = self.lock();
        let mut path = Vec::new();
        let mut queued = false;
        for name in names {
            for base in [&b""[..], &b"logs/"[..]] {
                path.clear();
                path.extend_from_slice(base);
                path.extend_from_slice(name);
                let mut end = path.len();
                while let Some(slash) = path
                    .get(..end)
                    .and_then(|p| p.iter().rposition(|&b| b == b'/'))
                {
                    end = slash;
                    let Some(dir) = path.get(..end) else { break };
                    if dir == b"refs" || dir == b"logs" || dir.is_empty() {
                        break;
                    }
                    let Some((_, parent)) = g.inodes.known_dir(dir) else {
                        continue;
                    };
                    let dir = dir.to_vec();
                    if g.classify(&dir).ok().flatten() == Some(Kind::Dir) {
                        // Still a directory: so are its parents.
                        break;
                    }
                    let name = dir
                        .rsplit(|&b| b == b'/')
                        .next()
                        .unwrap_or_default()
                        .to_vec();
                    if !g
                        .stale_names
                        .iter()
                        .any(|(q, n)| *q == parent && *n == name)
                    {
                        g.stale_names.push((parent, name));
                        queued = true;
                    }
                }
            }
        }
        drop(g);
        if queued {
            self.wake_watcher();
        }
    }

    /// After the mount's own batch: the kernel may hold the attributes of the written
    /// refs for 10 s (a symref such as `HEAD` keeps its content while its reflog, hence
    /// its mtime, moves): the known ref file inodes of these names are queued for an
    /// attributes-only `inval_inode` (it takes no inode or page lock, so it cannot wait
    /// for a client request in flight). Reflogs have attributes TTL 0 anyway.
    pub(crate) fn queue_changed_times(&self, names: &[&[u8]]) {
        let mut g = self.lock();
        let mut buf = Vec::new();
        let mut queued = false;
        for name in names {
            if g.render(name, Kind::Ref, &mut buf).is_err() {
                continue;
            }
            let ino = crate::fs::inode::ino_of_sized(name, Kind::Ref, Some(buf.len() as u64));
            if g.inodes.kernel_view(ino).is_some()
                && !g.stale_attrs.contains(&ino)
                && g.stale_attrs.len() < 4096
            {
                g.stale_attrs.push(ino);
                queued = true;
            }
        }
        drop(g);
        if queued {
            self.wake_watcher();
        }
    }

    /// `ino` is a ref file's inode of an old size that the kernel still reaches by name:
    /// queue its name for `inval_entry` and wake the watcher (the sure way back to the
    /// right inode, whatever race left the old entry in place).
    pub(super) fn name_is_stale(&self, g: &mut Inner, ino: u64) {
        let Some((p, name)) = g.inodes.parent_and_name(ino) else {
            return;
        };
        if g.stale_names.len() >= 4096
            || g.stale_names
                .iter()
                .any(|(q, n)| *q == p && n.as_slice() == name)
        {
            return;
        }
        let entry = (p, name.to_vec());
        g.stale_names.push(entry);
        self.wake_watcher();
    }

    /// What the kernel holds that went stale since it was looked up or read: (parent
    /// inode, name) pairs of known names whose kind changed or that vanished (for
    /// `inval_entry`), and known ref files whose content differs from what the kernel was
    /// last given (for `inval_inode`: attributes and pages). Scans at most `limit` inodes.
    pub fn stale(&self, limit: usize) -> Stale {
        let mut g = self.lock();
        let known: Vec<(u64, Kind)> = g.inodes.known().take(limit).collect();
        let mut out = Stale::default();
        // Reflog entries newer than this moved their ref's mtime.
        let top = g.src.max_update_index();
        let log_since = std::mem::replace(&mut g.log_index_seen, top);
        self.take_stale_names(&mut g, &mut out);
        let mut path = Vec::new();
        let mut buf = Vec::new();
        for (ino, kind) in known {
            if g.inodes.path(ino, &mut path).is_none() || g.link_alias(&mut path).is_err() {
                continue;
            }
            let now = g.classify(&path).ok().flatten();
            if now != Some(kind) {
                if let Some((p, name)) = g.inodes.parent_and_name(ino) {
                    out.entries.push((p, name.to_vec()));
                }
                continue;
            }
            if kind != Kind::Ref {
                continue;
            }
            let Some((Some(size), pages)) = g.inodes.kernel_view(ino) else {
                continue;
            };
            if g.render(&path, kind, &mut buf).is_err() {
                continue;
            }
            if size != buf.len() as u64 {
                // Another size is another inode: re-resolve the name.
                if let Some((p, name)) = g.inodes.parent_and_name(ino) {
                    out.entries.push((p, name.to_vec()));
                }
            } else if pages.is_none_or(|f| f == fingerprint(&buf)) {
                // The same content, maybe with a new time (a ref reset to its own
                // value, a symref whose target moved): then only the attributes go.
                if g.log_changed_since(&path, log_since) {
                    out.attrs.push(ino);
                }
            } else {
                g.inodes.invalidated(ino);
                out.inodes.push(ino);
            }
        }
        out
    }
}

impl Shared {
    pub(super) fn take_stale_names(&self, g: &mut Inner, out: &mut Stale) {
        out.entries.append(&mut g.stale_names);
        out.attrs.append(&mut g.stale_attrs);
    }

    /// Names queued by request handlers (see [`Shared::stale`]), without a scan.
    pub fn stale_names(&self) -> Stale {
        let mut out = Stale::default();
        self.take_stale_names(&mut self.lock(), &mut out);
        out
    }
}

/// Kernel caches to invalidate (see [`Shared::stale`]).
#[derive(Debug, Default)]
pub struct Stale {
    /// (parent inode, name) for `inval_entry`.
    pub entries: Vec<(u64, Vec<u8>)>,
    /// Inodes for `inval_inode` (attributes and all pages).
    pub inodes: Vec<u64>,
    /// Inodes for an attributes-only `inval_inode` (a new mtime, the same content).
    pub attrs: Vec<u64>,
}
