//! A linked worktree's view (`worktree.rs` marks it with [`Shared::set_linked_worktree`]):
//! what a files-backend git does to a worktree's own directory while it creates or removes
//! the worktree, which the main view refuses.
//!
//! * Created (`git worktree add` by git < 2.45): git writes `worktrees/<id>/HEAD` in place
//!   holding the null object id — only so that the directory passes for a git directory
//!   (`is_git_directory`) until `git symbolic-ref HEAD …` or `git update-ref --no-deref
//!   HEAD …`, run in the new worktree, replaces it. No stack can hold the null id, and git
//!   2.47 never writes it (its worktree's HEAD is made in the worktree's stack by that
//!   first update). So while the worktree's stack has no HEAD, the null id written to
//!   HEAD is kept as a file in the mount's memory (a scratch file, read back as written),
//!   never in the stack; the first commit of HEAD (a lock renamed onto it, an in-place
//!   write) replaces it, as a rename replaces a file.
//! * Removed (`git worktree remove`/`prune`: `rm -rf worktrees/<id>`): HEAD may be
//!   unlinked (a deletion in the worktree's stack, as of any ref); the empty `refs` and
//!   `logs` are removed as in every view (`calls.rs`, `rmdir`). The worktree's directory
//!   and its stack are removed by `Worktrees::remove` once the view
//!   [holds nothing](Shared::holds_nothing).

use crate::format::{HashKind, RefRecord};
use crate::fs::error::FsError;

use super::{Inner, Shared};

/// Whether `data` is exactly a null object id (and trailing whitespace), the placeholder
/// git < 2.45 writes into a new worktree's HEAD.
pub(super) fn is_null_id(data: &[u8], hash: HashKind) -> bool {
    let n = hash.hex_len();
    data.len() >= n
        && data.iter().take(n).all(|&b| b == b'0')
        && data.iter().skip(n).all(|b| b.is_ascii_whitespace())
}

impl Inner {
    /// Whether `data` written to ref `name` is a linked worktree's placeholder HEAD (the
    /// null id while the worktree's stack has no HEAD): kept as a scratch file.
    pub(super) fn is_placeholder_head(&mut self, name: &[u8], data: &[u8]) -> bool {
        if !self.linked_worktree || name != b"HEAD" || !is_null_id(data, self.w.hash) {
            return false;
        }
        let Inner { w, src, .. } = self;
        matches!(w.effective(src.as_mut(), name), Ok(None))
    }

    /// Whether HEAD may be deleted: only in a linked worktree's view, which git removes
    /// whole (`rm -rf worktrees/<id>`); the main view's HEAD is never deleted (git would
    /// no longer see a repository).
    pub(super) fn is_linked_worktree(&self) -> bool {
        self.linked_worktree
    }
}

impl Shared {
    /// Marks the view as a linked worktree's (see the module comment); set once, before it
    /// serves a request.
    pub fn set_linked_worktree(&self) {
        self.lock().linked_worktree = true;
    }

    /// Whether the view holds nothing at all once everything staged is written: no ref
    /// (HEAD included), no reflog, no lock or scratch file, no directory made by `mkdir`,
    /// nothing pending. A worktree's directory is removable only then, as a directory on
    /// disk only when it is empty. EIO if a staged edit could not be written.
    pub fn holds_nothing(&self) -> Result<bool, FsError> {
        self.flush_all()?;
        let mut g = self.lock();
        g.fresh()?;
        if !g.w.is_idle() {
            return Ok(false);
        }
        let mut rec = RefRecord::default();
        if g.src.first_ref_at_or_after(b"", &mut rec)? {
            return Ok(false);
        }
        let mut name = Vec::new();
        Ok(!g.src.first_log_at_or_after(b"", &mut name)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::ino::ROOT;
    use crate::fs::source::{LogSettings, MemSource};
    use crate::fs::state::BatchSettings;
    use std::time::Duration;

    fn view(linked: bool) -> std::sync::Arc<Shared> {
        let shared = Shared::new(
            Box::new(MemSource::new()),
            false,
            LogSettings::default(),
            BatchSettings {
                window: Duration::from_secs(60),
                max: 1000,
            },
        );
        if linked {
            shared.set_linked_worktree();
        }
        shared
    }

    /// What a file of the view reads.
    fn read(shared: &Shared, name: &[u8]) -> Vec<u8> {
        let ino = shared.lookup(ROOT, name).expect("lookup").0.ino.0;
        let (fh, _) = shared.open(ino, libc::O_RDONLY).expect("open");
        let data = shared.read_file(ino, fh, 0, 4096, true).expect("read");
        shared.release(fh);
        data
    }

    /// Writes `data` into `name` in place (`open(O_CREAT|O_TRUNC)`, write, close).
    fn write_in_place(shared: &Shared, name: &[u8], data: &[u8]) -> Result<(), FsError> {
        let me = std::process::id();
        let flags = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;
        let (_, fh) = shared.create(ROOT, name, flags, me)?;
        let r = shared
            .write(fh, 0, data, flags, me)
            .and_then(|_| shared.flush(fh, me));
        shared.release(fh);
        r
    }

    /// git 2.39's `worktree add`: the placeholder HEAD is kept and read back, then
    /// replaced by the symref renamed onto it; a view that keeps no broken refs refuses
    /// the null id elsewhere (one that does keeps it: `broken.rs`).
    #[test]
    fn a_new_worktrees_placeholder_head_is_replaced_by_its_first_update() {
        let zero = format!("{}\n", "0".repeat(40));
        let main = view(false);
        assert_eq!(
            write_in_place(&main, b"HEAD", zero.as_bytes())
                .expect_err("a main view keeping no broken refs refuses the null id")
                .errno(),
            libc::EINVAL
        );
        let wt = view(true);
        write_in_place(&wt, b"HEAD", zero.as_bytes()).expect("the placeholder");
        assert_eq!(read(&wt, b"HEAD"), zero.as_bytes());
        assert!(
            wt.lock().w.pending.is_empty(),
            "nothing staged for the stack"
        );
        // `git symbolic-ref HEAD refs/heads/wt`: HEAD.lock, written, renamed onto HEAD.
        let me = std::process::id();
        let flags = libc::O_CREAT | libc::O_EXCL | libc::O_RDWR;
        let (_, fh) = wt.create(ROOT, b"HEAD.lock", flags, me).expect("lock");
        wt.write(fh, 0, b"ref: refs/heads/wt\n", flags, me)
            .expect("write the lock");
        wt.flush(fh, me).expect("close the lock");
        wt.release(fh);
        wt.rename(ROOT, b"HEAD.lock", ROOT, b"HEAD", me)
            .expect("rename onto HEAD");
        assert_eq!(read(&wt, b"HEAD"), b"ref: refs/heads/wt\n");
        assert!(wt.lock().w.files.is_empty(), "the placeholder is gone");
        // Once HEAD exists, the null id is refused as everywhere.
        assert_eq!(
            write_in_place(&wt, b"HEAD", zero.as_bytes())
                .expect_err("null id over a real HEAD")
                .errno(),
            libc::EINVAL
        );
    }

    /// `rm -rf worktrees/<id>`: HEAD may be unlinked in a linked worktree's view only;
    /// the empty `refs` and `logs` are removed in every view.
    #[test]
    fn a_linked_worktrees_head_and_top_directories_may_go() {
        let me = std::process::id();
        for linked in [false, true] {
            let v = view(linked);
            write_in_place(&v, b"HEAD", format!("{}\n", "1".repeat(40)).as_bytes()).expect("HEAD");
            let unlinked = v.unlink(ROOT, b"HEAD", me);
            let refs = v.rmdir(ROOT, b"refs");
            let logs = v.rmdir(ROOT, b"logs");
            if linked {
                unlinked.expect("unlink HEAD");
                refs.expect("rmdir refs");
                logs.expect("rmdir logs");
                assert!(v.lookup(ROOT, b"HEAD").is_err(), "HEAD is gone");
            } else {
                assert_eq!(unlinked.map_err(|e| e.errno()), Err(libc::EPERM));
                // Empty, they go as on disk in every view (gone until made again).
                refs.expect("rmdir of the main view's empty refs");
                logs.expect("rmdir of the main view's empty logs");
            }
        }
    }

    #[test]
    fn only_the_null_id_is_a_placeholder() {
        let z40 = "0".repeat(40);
        assert!(is_null_id(z40.as_bytes(), HashKind::Sha1));
        assert!(is_null_id(format!("{z40}\n").as_bytes(), HashKind::Sha1));
        assert!(!is_null_id(format!("{z40}1\n").as_bytes(), HashKind::Sha1));
        assert!(!is_null_id(z40.as_bytes(), HashKind::Sha256));
        assert!(is_null_id("0".repeat(64).as_bytes(), HashKind::Sha256));
        assert!(!is_null_id(b"ref: refs/heads/main\n", HashKind::Sha1));
        assert!(!is_null_id(b"", HashKind::Sha1));
    }

    /// t1450 11 and `git worktree remove`: a linked worktree's HEAD written with the null
    /// id is kept beside its stack (which keeps the real HEAD); `rm -rf` unlinks it with
    /// the HEAD beneath, leaving no file and no HEAD (the view then holds nothing once
    /// written, so the directory can go).
    #[test]
    fn a_broken_worktree_head_is_kept_and_unlinked_with_its_stack_value() {
        use crate::fs::broken::BrokenRefs;
        let me = std::process::id();
        let d = tempfile::tempdir().expect("tempdir");
        let wt = view(true);
        wt.keep_broken_refs(BrokenRefs::open(d.path()).expect("store"));
        write_in_place(&wt, b"HEAD", b"ref: refs/heads/wt\n").expect("HEAD");
        let zero = format!("{}\n", "0".repeat(40));
        write_in_place(&wt, b"HEAD", zero.as_bytes()).expect("the broken HEAD");
        assert_eq!(read(&wt, b"HEAD"), zero.as_bytes());
        {
            let mut g = wt.lock();
            let Inner { w, src, .. } = &mut *g;
            assert_eq!(
                w.effective(src.as_mut(), b"HEAD").expect("HEAD"),
                Some(crate::format::RefValue::Symref(b"refs/heads/wt".to_vec())),
                "the stack keeps its HEAD"
            );
        }
        assert_eq!(BrokenRefs::open(d.path()).expect("store").len(), 1);
        wt.unlink(ROOT, b"HEAD", me).expect("unlink HEAD");
        assert!(wt.lookup(ROOT, b"HEAD").is_err(), "HEAD is gone");
        assert!(BrokenRefs::open(d.path()).expect("store").is_empty());
        let mut g = wt.lock();
        assert!(g.w.files.is_empty(), "no file left");
        let Inner { w, src, .. } = &mut *g;
        assert_eq!(w.effective(src.as_mut(), b"HEAD").expect("HEAD"), None);
    }
}
