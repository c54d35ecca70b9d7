//! The attributes a ref view's nodes (and the mount's root) show: their kind, size and
//! time (`attr`), and the real git directory's mode and owner ([`GitDirModes`]).

use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use fuser::{FileAttr, FileType, INodeNo};
use rustix::fs::{fstat, open, Mode, OFlags};
use rustix::process::{getgid, getuid};

use crate::fs::view::Kind;

/// How long GITDIR's mode and owner are shown before they are read again (the
/// passthrough's attribute TTL).
pub const MODES_TTL: Duration = Duration::from_secs(1);

pub(crate) fn attr(
    ino: u64,
    kind: Kind,
    size: u64,
    mtime: SystemTime,
    uid: u32,
    gid: u32,
) -> FileAttr {
    let (ft, perm, nlink) = match kind {
        Kind::Dir => (FileType::Directory, 0o755, 2),
        Kind::Link => (FileType::Symlink, 0o777, 1),
        _ => (FileType::RegularFile, 0o644, 1),
    };
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: mtime,
        mtime,
        ctime: mtime,
        crtime: mtime,
        kind: ft,
        perm,
        nlink,
        uid,
        gid,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

pub(crate) fn file_type(kind: Kind) -> FileType {
    match kind {
        Kind::Dir => FileType::Directory,
        Kind::Link => FileType::Symlink,
        _ => FileType::RegularFile,
    }
}

/// The real git directory's own mode and owner, which the mount's root and every node of
/// its ref view show (`Shared::set_gitdir_modes`): directories GITDIR's mode, files the same without execute, setgid
/// and sticky bits (`0700` → `0600`, `2775` → `0664`, as `core.sharedRepository` makes a
/// files repository's refs), owned by GITDIR's owner and group (root's shown as the
/// mounting user's, as passed-through files are). When other users may use the mount
/// (`allow_other`), the kernel checks their requests against these (`default_permissions`):
/// a mode-700 `.git` stays closed to them at its root, a shared one gives its group what
/// its modes give. Re-read at most every [`MODES_TTL`], so a `chmod` of the real directory
/// is followed.
pub struct GitDirModes {
    dir: OwnedFd,
    /// When last read, GITDIR's `st_mode` (permission bits), uid and gid.
    seen: Mutex<(std::time::Instant, u32, u32, u32)>,
    uid: u32,
    gid: u32,
}

impl GitDirModes {
    /// Opens `gitdir` (an `O_PATH` descriptor: the directory is followed as the user named
    /// it, then never again by path) and reads its mode.
    pub fn open(gitdir: &Path) -> io::Result<GitDirModes> {
        // `reftable`'s parent, when the stack was named relative to the git directory.
        let gitdir = if gitdir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            gitdir
        };
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let dir = open(gitdir, flags, Mode::empty())?;
        // `fstat` of an `O_PATH` descriptor.
        let st = fstat(&dir)?;
        let (uid, gid) = (getuid().as_raw(), getgid().as_raw());
        Ok(GitDirModes {
            dir,
            seen: Mutex::new((std::time::Instant::now(), st.st_mode, st.st_uid, st.st_gid)),
            uid,
            gid,
        })
    }

    /// (mode, uid, gid) of GITDIR, read again when older than [`MODES_TTL`] (if that fails,
    /// the last ones).
    fn current(&self) -> (u32, u32, u32) {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.0.elapsed() >= MODES_TTL {
            if let Ok(st) = fstat(&self.dir) {
                *seen = (std::time::Instant::now(), st.st_mode, st.st_uid, st.st_gid);
            }
        }
        let (_, mode, uid, gid) = *seen;
        let uid = if uid == 0 { self.uid } else { uid };
        let gid = if gid == 0 { self.gid } else { gid };
        (mode, uid, gid)
    }

    /// Gives `a` (a node of a ref view) GITDIR's mode and owner.
    pub fn apply(&self, a: &mut FileAttr) {
        let (mode, uid, gid) = self.current();
        a.perm = if a.kind == FileType::Directory {
            mode & 0o7777
        } else {
            mode & 0o666
        } as u16;
        a.uid = uid;
        a.gid = gid;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn ref_views_show_the_git_directorys_mode_and_owner() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let set = |mode: u32| {
            std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(mode)).unwrap()
        };
        set(0o700);
        let m = GitDirModes::open(t.path()).unwrap();
        let shown = |kind: FileType| {
            let mut a = attr(
                5,
                if kind == FileType::Directory {
                    crate::fs::view::Kind::Dir
                } else {
                    crate::fs::view::Kind::Ref
                },
                3,
                UNIX_EPOCH,
                12345,
                12345,
            );
            m.apply(&mut a);
            (a.perm, a.uid, a.gid)
        };
        let st = fstat(&m.dir).unwrap();
        let (me, my_group) = (getuid().as_raw(), getgid().as_raw());
        let owner = if st.st_uid == 0 { me } else { st.st_uid };
        let group = if st.st_gid == 0 { my_group } else { st.st_gid };
        assert_eq!(shown(FileType::Directory), (0o700, owner, group));
        assert_eq!(shown(FileType::RegularFile), (0o600, owner, group));
        // A chmod of the directory is seen once the last reading is a second old.
        set(0o2775);
        assert_eq!(shown(FileType::Directory).0, 0o700, "read again at once");
        if let Some(old) = std::time::Instant::now().checked_sub(MODES_TTL * 2) {
            m.seen.lock().unwrap().0 = old;
            assert_eq!(shown(FileType::Directory).0, 0o2775);
            assert_eq!(shown(FileType::RegularFile).0, 0o664);
        }
    }
}
