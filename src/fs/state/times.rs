//! The times a ref view shows (issue 25.5: as a files backend's): a file's mtime from its
//! newest reflog entry or the time it last changed, never going back; a directory's moving
//! only when a name in it appears or goes; and the attribute invalidations that tell the
//! kernel so (queued for the watcher).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::fs::ino::ROOT;
use crate::fs::view::Kind;

use super::{ns, parent_dir, top_index, Inner};

impl Inner {
    /// A node's mtime and ctime. They never go back, and a file's move whenever its
    /// content changes, whoever changed it (the mount, another writer on the stack): per
    /// name the time shown and a mark of the content it was shown for are kept
    /// ([`crate::fs::inode::Times`], bounded with the inode table).
    ///
    /// * A file seen for the first time shows its own time ([`Inner::own_time`]: for a ref
    ///   or a reflog the newest reflog entry's) or, without one, when the view last
    ///   changed.
    /// * With the same content it keeps that time, or takes a newer own time (`HEAD`
    ///   moves with its reflog when its branch moves).
    /// * A reflog shown without a time of its own (created and not yet written to) takes
    ///   its own once it has one, also an older one: the one exception to "never back",
    ///   so that a reflog's time is its newest line's.
    /// * With other content it takes its own time if that is newer, else now: a change
    ///   without a reflog line (a `HEAD` switch by go-git or a script), or with an older
    ///   one (a commit dated `@0`), still moves it forward. (Before, such a time went back
    ///   to the reflog's once the batch was written, and vim-fugitive, which caches HEAD by
    ///   its mtime, kept showing the old branch.)
    /// * A directory keeps its time until a name appears or goes below it
    ///   ([`Inner::entries_changed`]), or another writer changes the stack (every
    ///   directory then takes that time): `tar` of the git directory right after an update
    ///   sees nothing change under it (the view's every change moved them, also when a
    ///   batch was written or compacted after the update).
    pub(crate) fn mtime_of(&mut self, path: &[u8], kind: Kind) -> SystemTime {
        let key = crate::fs::inode::time_key(path, kind);
        let prev = self.inodes.times.get(key);
        let (mark, shown) = if kind == Kind::Dir {
            let shown = prev
                .map_or(ns(self.changed_at), |p| p.shown)
                .max(self.dir_epoch);
            (0, shown)
        } else {
            use crate::fs::inode::NO_OWN_TIME;
            let content = self.content_mark(path, kind, key) & !NO_OWN_TIME;
            // The content first: a ref's own time reuses the lookup its rendering made.
            let own = self.own_time(path, kind);
            // Only a reflog gives way (see below): a ref's value staged without a line
            // has no time of its own until written, and then an older one.
            let mark = content
                | if own.is_none() && kind == Kind::Log {
                    NO_OWN_TIME
                } else {
                    0
                };
            let shown = match (prev, own) {
                (None, _) => own.unwrap_or(ns(self.changed_at)),
                // A time that was not the file's own gives way to its own once it has
                // one (a reflog's first line).
                (Some(p), Some(t)) if p.mark & NO_OWN_TIME != 0 => t,
                (Some(p), _) if p.mark & !NO_OWN_TIME == content => {
                    own.map_or(p.shown, |t| t.max(p.shown))
                }
                (Some(p), Some(t)) if t > p.shown => t,
                (Some(p), _) => ns(SystemTime::now()).max(p.shown + 1),
            };
            (mark, shown)
        };
        let stamp = crate::fs::inode::Stamp { mark, shown };
        if prev != Some(stamp) {
            self.inodes.times.put(key, stamp);
        }
        UNIX_EPOCH + Duration::from_nanos(shown)
    }

    /// The mark of the content of `path` (of `kind`, time key `key`): from the sizing
    /// that just rendered it, else from a rendering now. 0 when it cannot be read.
    fn content_mark(&mut self, path: &[u8], kind: Kind, key: u64) -> u64 {
        if !matches!(self.last_render, Some((k, _, _)) if k == key)
            && self.size_of(path, kind).is_err()
        {
            self.last_render = None;
        }
        self.last_mark(key)
    }

    /// The mark of the last sizing if it was of `key` (0 otherwise).
    fn last_mark(&self, key: u64) -> u64 {
        match self.last_render {
            Some((k, size, fp)) if k == key => {
                (fp ^ size.rotate_left(32)).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1
            }
            _ => 0,
        }
    }

    /// A file's own time (ns since the epoch), if it has one: for a ref, when it last
    /// changed — a pending reflog line first, else the time of the transaction that wrote
    /// its record, known from the lookup that just found it without a further seek
    /// (`ref_times.rs`; a symref such as `HEAD`, whose record rarely changes while its
    /// reflog moves, takes its newest reflog entry); for a reflog, its newest entry (one
    /// seek of the log index). None for anything else, a ref without a reflog, a pending
    /// value without a line.
    fn own_time(&mut self, path: &[u8], kind: Kind) -> Option<u64> {
        let name = match kind {
            Kind::Ref => path,
            Kind::Log => path.strip_prefix(b"logs/").unwrap_or(path),
            _ => return None,
        };
        let secs = match self.w.pending_logs.get(name) {
            Some(pl) if !pl.appended.is_empty() => pl.appended.last().map(|(_, l)| l.time),
            Some(pl) if pl.deleted => None,
            Some(pl) if pl.base.is_some() => pl.base.as_ref().and_then(|b| {
                b.iter()
                    .find(|l| !l.deleted && !crate::stack::is_existence_marker(l))
                    .map(|l| l.time)
            }),
            _ if kind == Kind::Ref && self.w.pending.contains_key(name) => None,
            _ if kind == Kind::Ref => self.src.ref_time(name).ok().flatten(),
            _ => self.src.newest_log(name).ok().flatten().map(|(_, t)| t),
        };
        secs.map(|s| s.saturating_mul(1_000_000_000))
    }

    /// A name appeared in or went from directory `dir`: its time moves now. `kernel`:
    /// the request that did it names `dir` as its parent, and the kernel drops its cached
    /// attributes of `dir` itself; otherwise the watcher is asked to (a directory above
    /// that appeared or went with it).
    pub(crate) fn entries_changed(&mut self, dir: &[u8], kernel: bool) {
        let key = crate::fs::inode::time_key(dir, Kind::Dir);
        let prev = self
            .inodes
            .times
            .get(key)
            .map_or(ns(self.changed_at), |p| p.shown)
            .max(self.dir_epoch);
        let shown = ns(SystemTime::now()).max(prev + 1);
        self.inodes
            .times
            .put(key, crate::fs::inode::Stamp { mark: 0, shown });
        // A directory the times forgot starts from here: never back.
        self.changed_at = self
            .changed_at
            .max(UNIX_EPOCH + Duration::from_nanos(shown));
        if !kernel {
            self.queue_dir_attrs(dir);
        }
    }

    /// `path` went (an unlink, a rename away): its directory's entries changed, and so did
    /// those of the directory above each one it emptied (a directory of the view exists
    /// while something is below it; `refs` and `logs` always do).
    pub(crate) fn name_went(&mut self, path: &[u8]) {
        let mut dir = parent_dir(path);
        self.entries_changed(dir, true);
        while !dir.is_empty() && top_index(dir).is_none() {
            if !matches!(self.classify(dir), Ok(None)) {
                break;
            }
            dir = parent_dir(dir);
            self.entries_changed(dir, false);
        }
    }

    /// Every directory's time moves now (names may have appeared anywhere: a
    /// `packed-refs` that created refs); the watcher drops the kernel's cached
    /// attributes of those it holds.
    pub(crate) fn all_entries_changed(&mut self) {
        let now = ns(SystemTime::now()).max(self.dir_epoch + 1);
        self.dir_epoch = now;
        self.changed_at = self.changed_at.max(UNIX_EPOCH + Duration::from_nanos(now));
        // At most 4096 queued (the rest see their new time within the attribute TTL),
        // without a search per directory.
        let room = 4096usize.saturating_sub(self.stale_attrs.len());
        let known = self
            .inodes
            .known()
            .filter(|(_, k)| *k == Kind::Dir)
            .map(|(ino, _)| ino);
        let dirs: Vec<u64> = std::iter::once(ROOT).chain(known).take(room).collect();
        self.stale_attrs.extend(dirs);
        self.stale_attrs.sort_unstable();
        self.stale_attrs.dedup();
        self.wake_watcher();
    }

    /// The kernel's cached attributes of directory `dir`, if it holds it, are dropped by
    /// the watcher.
    fn queue_dir_attrs(&mut self, dir: &[u8]) {
        let ino = if dir.is_empty() {
            Some(ROOT)
        } else {
            self.inodes.known_dir(dir).map(|(ino, _)| ino)
        };
        if let Some(ino) = ino {
            self.queue_attrs(ino);
        }
    }

    /// The watcher drops the kernel's cached attributes of `ino` (at most 4096 queued).
    pub(crate) fn queue_attrs(&mut self, ino: u64) {
        if !self.stale_attrs.contains(&ino) && self.stale_attrs.len() < 4096 {
            self.stale_attrs.push(ino);
            self.wake_watcher();
        }
    }

    /// Wakes the watcher (see [`Shared::wake_watcher`]).
    fn wake_watcher(&self) {
        super::wake_watcher(&self.wake);
    }

    /// Whether the ref at `path` has a reflog entry newer than update index `since`.
    pub(super) fn log_changed_since(&mut self, path: &[u8], since: u64) -> bool {
        matches!(self.src.newest_log(path), Ok(Some((ui, _))) if ui > since)
    }
}
