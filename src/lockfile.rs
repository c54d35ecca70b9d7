//! File-system helpers for the stack: git-style `.lock` files (created `O_EXCL`, retried
//! with git's quadratic backoff, removed on drop, committed by rename), temporary files
//! named like `mkstemp`'s, fsync with counting, permissions, and a small PRNG for the
//! random parts of table names.

use std::cell::Cell;
use std::fs::{self, File};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::{fsio, Error, Result};

/// A held `.lock` file. Dropping it removes the file unless it was committed.
#[must_use = "a lock is released as soon as it is dropped"]
#[derive(Debug)]
pub struct LockFile {
    path: PathBuf,
    file: Option<File>,
    done: bool,
}

impl LockFile {
    /// Creates `lock_path` with `O_CREAT|O_EXCL` (mode 0666 minus the umask), retrying
    /// while it exists for up to `timeout` (`None`: fail at once; `Duration::MAX`: wait
    /// forever) with git's backoff (`lockfile.c`: wait ≈ n² ms · U(0.75, 1.25), at most
    /// 1 s between attempts). A lock held by someone else is [`Error::Lock`].
    pub fn acquire(lock_path: impl Into<PathBuf>, timeout: Option<Duration>) -> Result<LockFile> {
        let path = lock_path.into();
        let start = Instant::now();
        let mut multiplier: u64 = 1;
        let mut n: u64 = 1;
        loop {
            match fsio::create_new(&path, 0o666) {
                Ok(file) => {
                    return Ok(LockFile {
                        path,
                        file: Some(file),
                        done: false,
                    })
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(Error::io(path, e)),
            }
            let Some(limit) = timeout else {
                return Err(Error::Lock(path));
            };
            if start.elapsed() >= limit {
                return Err(Error::Lock(path));
            }
            let wait_ms = (750 + u64::from(rand_u32() % 500)) * multiplier / 1000;
            let remaining = limit.saturating_sub(start.elapsed());
            std::thread::sleep(Duration::from_millis(wait_ms.max(1)).min(remaining));
            multiplier += 2 * n + 1;
            if multiplier > 1000 {
                multiplier = 1000;
            } else {
                n += 1;
            }
        }
    }

    /// Like [`acquire`](Self::acquire) without retry, closing the descriptor at once (as
    /// git does: a compaction of thousands of tables must not hold thousands of
    /// descriptors): the `<table>.lock` markers of compaction. [`diagnose`] therefore
    /// cannot see their holder; their age is what protects them.
    pub fn marker(lock_path: impl Into<PathBuf>) -> Result<LockFile> {
        let mut lock = LockFile::acquire(lock_path, None)?;
        lock.file = None;
        Ok(lock)
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open lock file, to write the new content into.
    pub fn file(&mut self) -> Result<&mut File> {
        match self.file.as_mut() {
            Some(f) => Ok(f),
            None => Err(Error::Api(format!(
                "lock {} has no open file",
                self.path.display()
            ))),
        }
    }

    /// Renames the lock over `target`. On failure the lock file is removed.
    pub fn commit(mut self, target: &Path) -> Result<()> {
        self.file = None;
        fsio::rename(&self.path, target).map_err(|e| Error::io(target, e))?;
        self.done = true;
        Ok(())
    }
}

impl Drop for LockFile {
    fn drop(&mut self) {
        self.file = None;
        if !self.done {
            let _ = fsio::remove_file(&self.path);
        }
    }
}

/// What is known about a lock (or temporary) file found on disk: how old it is and which
/// processes hold it open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockDiagnosis {
    /// The file.
    pub path: PathBuf,
    /// Its `(dev, ino)` when diagnosed.
    pub id: (u64, u64),
    /// Time since its last modification (its creation, for a lock nobody wrote into).
    pub age: Duration,
    /// Processes with the file open: `(pid, command name)`.
    pub holders: Vec<(u32, String)>,
    /// Whether every process's descriptors could be read (false: some `/proc/PID/fd`
    /// could not be listed, or a descriptor named like the file could not be confirmed
    /// either way, so a holder may be missing).
    pub complete: bool,
}

impl LockDiagnosis {
    /// Proven stale: nobody holds it open (every process was checked) and it is at
    /// least `min_age` old. A lock whose holder closed it (git closes its table-lock
    /// markers) is only protected by `min_age`.
    pub fn is_stale(&self, min_age: Duration) -> bool {
        self.complete && self.holders.is_empty() && self.age >= min_age
    }
}

impl std::fmt::Display for LockDiagnosis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} s old, ", self.path.display(), self.age.as_secs())?;
        if self.holders.is_empty() {
            if self.complete {
                write!(f, "held open by no process")
            } else {
                write!(f, "no holder found (some processes could not be inspected)")
            }
        } else {
            write!(f, "held open by")?;
            for (i, (pid, name)) in self.holders.iter().enumerate() {
                let sep = if i == 0 { " " } else { ", " };
                write!(f, "{sep}pid {pid} ({name})")?;
            }
            Ok(())
        }
    }
}

/// Diagnoses the lock (or temporary) file at `path`: its age, and which processes hold
/// it open. `Ok(None)` when it does not exist.
///
/// It never blocks on another file system: only `path` itself (on the stack's own file
/// system) and procfs are touched, and no descriptor of any process is `stat`ed (that
/// asks the descriptor's file system, and a stopped FUSE daemon, a hung NFS or sshfs
/// server, or a mount diagnosing its own lock while its request threads wait for it
/// never answer). A holder is found by the link text of `/proc/PID/fd/N` (the path the
/// kernel prints, never resolved) ending in the lock's file name, confirmed by
/// `/proc/PID/fdinfo/N`: the lock's inode number on the lock's mount, or on another
/// mount of the same file system (a bind mount, another namespace).
pub fn diagnose(path: &Path) -> Result<Option<LockDiagnosis>> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    // An `O_PATH` descriptor (no open of the file itself): its `/proc/self/fdinfo` gives
    // the lock's mount id and inode number in the kernel's own terms, the ones every
    // holder's `fdinfo` shows; `fstat` of it, its dev, inode and age, all of one file.
    let own = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path, e)),
    };
    let meta = own.metadata().map_err(|e| Error::io(path, e))?;
    let id = (meta.dev(), meta.ino());
    let age = meta
        .modified()
        .ok()
        .and_then(|m| SystemTime::now().duration_since(m).ok())
        .unwrap_or_default();
    let (holders, complete) = match own_fd_info(&own) {
        Some(info) => {
            let name = path.file_name().map(|n| n.as_bytes()).unwrap_or_default();
            holders_of(name, info)
        }
        None => (Vec::new(), false),
    };
    Ok(Some(LockDiagnosis {
        path: path.to_path_buf(),
        id,
        age,
        holders,
        complete,
    }))
}

/// What `/proc/PID/fdinfo/N` says about a descriptor: `flags:` (octal), `mnt_id:`,
/// `ino:` (absent before Linux 5.14).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FdInfo {
    flags: u32,
    mnt_id: u64,
    ino: Option<u64>,
}

/// At most this much of an `fdinfo` file is read: its first lines are the ones wanted
/// (what follows, for some descriptors, lists locks or watches).
const FDINFO_MAX: u64 = 4096;

fn parse_fdinfo(text: &[u8]) -> Option<FdInfo> {
    let (mut flags, mut mnt_id, mut ino) = (None, None, None);
    for line in text.split(|&b| b == b'\n') {
        let Some((key, value)) = std::str::from_utf8(line)
            .ok()
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let value = value.trim();
        match key {
            "flags" => flags = u32::from_str_radix(value, 8).ok(),
            "mnt_id" => mnt_id = value.parse().ok(),
            "ino" => ino = value.parse().ok(),
            _ => {}
        }
    }
    Some(FdInfo {
        flags: flags?,
        mnt_id: mnt_id?,
        ino,
    })
}

/// Reads `/proc/PID/fdinfo/N` (procfs only: the descriptor's file system is not asked).
fn read_fdinfo(path: &Path) -> io::Result<Option<FdInfo>> {
    use std::io::Read;
    let mut text = Vec::new();
    File::open(path)?.take(FDINFO_MAX).read_to_end(&mut text)?;
    Ok(parse_fdinfo(&text))
}

/// The lock as `fdinfo` names it, from this process's `O_PATH` descriptor on it.
fn own_fd_info(own: &File) -> Option<FdInfo> {
    use std::os::fd::AsRawFd;
    read_fdinfo(Path::new(&format!("/proc/self/fdinfo/{}", own.as_raw_fd())))
        .ok()
        .flatten()
}

/// Whether a descriptor's link text (`readlink /proc/PID/fd/N`: the path the kernel
/// prints, never resolved) names a file called `name`, also one since unlinked.
fn link_names(link: &[u8], name: &[u8]) -> bool {
    let link = link.strip_suffix(b" (deleted)").unwrap_or(link);
    !name.is_empty()
        && link.len() > name.len()
        && link.ends_with(name)
        && link.get(link.len() - name.len() - 1) == Some(&b'/')
}

/// `major:minor` of mount `mnt_id` (its file system) in a `mountinfo` text.
fn mount_dev(mountinfo: &[u8], mnt_id: u64) -> Option<Vec<u8>> {
    let want = mnt_id.to_string();
    mountinfo.split(|&b| b == b'\n').find_map(|line| {
        let mut fields = line.split(|&b| b == b' ');
        (fields.next()? == want.as_bytes())
            .then(|| Some(fields.nth(1)?.to_vec()))
            .flatten()
    })
}

/// The file system (`major:minor`) of mount `mnt_id`, as process `pid` sees its mounts
/// (mount ids are unique across namespaces; a process in another namespace lists its
/// own). `ours` caches this process's `mountinfo` for one scan.
fn mount_dev_of(ours: &mut Option<Vec<u8>>, pid: Option<u32>, mnt_id: u64) -> Option<Vec<u8>> {
    let mine = ours.get_or_insert_with(|| fs::read("/proc/self/mountinfo").unwrap_or_default());
    if let Some(dev) = mount_dev(mine, mnt_id) {
        return Some(dev);
    }
    let theirs = fs::read(format!("/proc/{}/mountinfo", pid?)).ok()?;
    mount_dev(&theirs, mnt_id)
}

/// Processes with a descriptor open on the lock (`name`, whose `fdinfo` is `lock`), and
/// whether every process could be checked.
///
/// Only procfs is read, which answers from the kernel's tables (see [`diagnose`]): the
/// link text of each descriptor picks the candidates whose file is called `name` (also
/// `name (deleted)`: a lock unlinked while held, whose inode then differs from a new
/// lock's), and a candidate's `fdinfo` confirms it. `O_PATH` descriptors hold nothing
/// (this diagnosis's own among them). A process whose descriptor table cannot be listed,
/// or a candidate that cannot be confirmed either way, makes the scan incomplete; a
/// descriptor whose link text is refused (a process with capabilities this one lacks)
/// is skipped, as the `stat` of the earlier scan was. Threads with a descriptor table
/// of their own (`unshare(CLONE_FILES)`) are not seen.
fn holders_of(name: &[u8], lock: FdInfo) -> (Vec<(u32, String)>, bool) {
    let mut holders = Vec::new();
    let Ok(procs) = fs::read_dir("/proc") else {
        return (holders, false);
    };
    let mut complete = true;
    let mut mountinfo = None;
    for p in procs {
        let Ok(p) = p else {
            complete = false;
            continue;
        };
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        match holds(pid, name, lock, &mut mountinfo) {
            Ok(true) => {
                let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                holders.push((pid, comm.trim_end().to_owned()));
            }
            Ok(false) => {}
            // The process exited meanwhile: it holds nothing.
            Err(e) if gone(&e) => {}
            Err(_) => complete = false,
        }
    }
    (holders, complete)
}

/// Whether an error reading `/proc/PID/...` means the process or descriptor is gone.
fn gone(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ESRCH))
}

/// Whether process `pid` has a descriptor open on the lock (see [`holders_of`]); an
/// error when that cannot be told.
fn holds(pid: u32, name: &[u8], lock: FdInfo, mountinfo: &mut Option<Vec<u8>>) -> io::Result<bool> {
    let fd_dir = PathBuf::from(format!("/proc/{pid}/fd"));
    let mut unsure = None;
    for fd in fs::read_dir(&fd_dir)? {
        let fd = fd?;
        let link = match fs::read_link(fd.path()) {
            Ok(l) => l,
            Err(e) if gone(&e) => continue,
            // Refused (a process with capabilities this one lacks): skipped, as the
            // `stat` of the old scan was.
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => continue,
            Err(e) => return Err(e),
        };
        if !link_names(link.as_os_str().as_bytes(), name) {
            continue;
        }
        let info =
            match read_fdinfo(&Path::new(&format!("/proc/{pid}/fdinfo")).join(fd.file_name())) {
                Ok(Some(i)) => i,
                Ok(None) => {
                    unsure = Some(io::Error::other("unreadable fdinfo"));
                    continue;
                }
                Err(e) if gone(&e) => continue,
                Err(e) => {
                    unsure = Some(e);
                    continue;
                }
            };
        if info.flags & (libc::O_PATH as u32) != 0 {
            continue;
        }
        match (info.ino, lock.ino) {
            (Some(a), Some(b)) if a != b => continue,
            // Before Linux 5.14 `fdinfo` has no inode: the name and the mount must do.
            _ => {}
        }
        if info.mnt_id == lock.mnt_id {
            return Ok(true);
        }
        let theirs = mount_dev_of(mountinfo, Some(pid), info.mnt_id);
        let ours = mount_dev_of(mountinfo, None, lock.mnt_id);
        match (theirs, ours) {
            (Some(a), Some(b)) if a == b => return Ok(true),
            (Some(_), Some(_)) => {}
            _ => unsure = Some(io::Error::other("mount of a descriptor not found")),
        }
    }
    match unsure {
        Some(e) => Err(e),
        None => Ok(false),
    }
}

/// Removes the lock or temporary file `diag` describes, if it is still the same file
/// (same `(dev, ino)`): a lock released and taken again by someone else in between is
/// a new file and is left alone. Returns whether it was removed.
pub fn remove_diagnosed(diag: &LockDiagnosis) -> Result<bool> {
    use std::os::unix::fs::MetadataExt;
    match fs::symlink_metadata(&diag.path) {
        Ok(m) if (m.dev(), m.ino()) == diag.id => {}
        Ok(_) => return Ok(false),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(Error::io(&diag.path, e)),
    }
    match fsio::remove_file(&diag.path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io(&diag.path, e)),
    }
}

/// Creates a new file `<prefix>.temp.XXXXXX` in `dir` as `mkstemp` does (mode 0600,
/// `O_EXCL`, six random characters). Returns the file and its path.
pub fn create_temp(dir: &Path, prefix: &str) -> Result<(File, PathBuf)> {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    for _ in 0..100 {
        let mut name = format!("{prefix}.temp.");
        let mut r = u64::from(rand_u32()) << 32 | u64::from(rand_u32());
        for _ in 0..6 {
            let idx = (r % CHARS.len() as u64) as usize;
            name.push(char::from(CHARS.get(idx).copied().unwrap_or(b'x')));
            r /= CHARS.len() as u64;
        }
        let path = dir.join(name);
        match fsio::create_new(&path, 0o600) {
            Ok(f) => return Ok((f, path)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::io(path, e)),
        }
    }
    Err(Error::io(
        dir,
        io::Error::new(
            io::ErrorKind::AlreadyExists,
            "could not create a temporary file",
        ),
    ))
}

/// Sets the permission bits of `path`.
pub fn chmod(path: &Path, mode: u32) -> Result<()> {
    fsio::chmod(path, mode).map_err(|e| Error::io(path, e))
}

/// Fsyncs a directory (so that renames in it are durable).
pub fn sync_dir(dir: &Path) -> Result<()> {
    fsio::fsync_dir(dir).map_err(|e| Error::io(dir, e))
}

/// The process umask, read from `/proc/self/status` (changing it to read it would race
/// with other threads); 0o022 when unknown.
pub fn current_umask() -> u32 {
    let Ok(status) = fs::read_to_string("/proc/self/status") else {
        return 0o022;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        .unwrap_or(0o022)
}

/// git's default for new reftable files: `0666 & ~umask`, adjusted by
/// `core.sharedRepository` as `calc_shared_perm` does.
pub fn default_permissions(shared: SharedRepository) -> u32 {
    shared.calc_perm(0o666 & !current_umask())
}

/// `core.sharedRepository`, as git's `git_config_perm`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SharedRepository {
    /// `umask`/`false`/`0`: permissions from the umask.
    Umask,
    /// `group`/`true`/`1`: OR in 0660.
    Group,
    /// `all`/`world`/`everybody`/`2`: OR in 0664.
    Everybody,
    /// An octal mode: files get exactly `mode & 0666`.
    Mode(u32),
}

impl SharedRepository {
    /// git's `calc_shared_perm(mode)`.
    pub fn calc_perm(self, mode: u32) -> u32 {
        let (mut tweak, exact) = match self {
            SharedRepository::Umask => (0, false),
            SharedRepository::Group => (0o660, false),
            SharedRepository::Everybody => (0o664, false),
            SharedRepository::Mode(m) => (m, true),
        };
        if mode & 0o200 == 0 {
            tweak &= !0o222;
        }
        if mode & 0o100 != 0 {
            tweak |= (tweak & 0o444) >> 2;
        }
        if exact {
            (mode & !0o777) | tweak
        } else {
            mode | tweak
        }
    }
}

thread_local! {
    static RNG: Cell<u64> = const { Cell::new(0) };
}

/// A fast, non-cryptographic 32-bit random number (SplitMix64, seeded from the clock,
/// the pid and the thread), standing in for git's insecure PRNG in table names and backoff.
pub fn rand_u32() -> u32 {
    RNG.with(|cell| {
        let mut s = cell.get();
        if s == 0 {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            let local = 0u8;
            s = (nanos as u64)
                ^ (u64::from(std::process::id()) << 32)
                ^ (&local as *const u8 as u64)
                ^ 0x9e37_79b9_7f4a_7c15;
        }
        s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        cell.set(s);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 32) as u32
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn lock_is_exclusive_and_released_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tables.list.lock");
        let lock = LockFile::acquire(&p, None).unwrap();
        let err = LockFile::acquire(&p, None).unwrap_err();
        assert!(matches!(err, Error::Lock(_)), "{err}");
        assert!(err.to_string().starts_with("data is locked"), "{err}");
        drop(lock);
        assert!(!p.exists(), "dropping a lock removes it");
        let _again = LockFile::acquire(&p, None).unwrap();
    }

    #[test]
    fn lock_times_out_then_waits_for_release() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.lock");
        let held = LockFile::acquire(&p, None).unwrap();
        let t = Instant::now();
        assert!(LockFile::acquire(&p, Some(Duration::from_millis(100))).is_err());
        assert!(
            t.elapsed() >= Duration::from_millis(100),
            "waited the whole timeout"
        );
        let p2 = p.clone();
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            drop(held);
            p2
        });
        let got = LockFile::acquire(&p, Some(Duration::from_secs(5)));
        releaser.join().unwrap();
        assert!(got.is_ok(), "lock acquired after release");
    }

    /// A FUSE file system of one file, `held`, whose `getattr` waits while its gate is
    /// shut (at most [`GATE_MAX`](unanswered::GATE_MAX)): a stopped daemon or a hung
    /// network file system, as far as a caller of `stat` can tell, but one this test can
    /// always let go.
    #[cfg(feature = "fuse")]
    mod unanswered {
        use std::ffi::OsStr;
        use std::fs::File;
        use std::sync::{Arc, Condvar, Mutex};
        use std::time::{Duration, Instant, UNIX_EPOCH};

        use fuser::{
            Config, Errno, FileAttr, FileHandle, FileType, Filesystem, Generation, INodeNo,
            MountOption, ReplyAttr, ReplyEntry, Request,
        };

        /// The longest a `getattr` waits for the gate.
        pub const GATE_MAX: Duration = Duration::from_secs(30);
        const HELD: INodeNo = INodeNo(2);

        #[derive(Default)]
        struct Gate {
            shut: Mutex<bool>,
            opened: Condvar,
        }

        impl Gate {
            fn set(&self, shut: bool) {
                *self.shut.lock().unwrap_or_else(|p| p.into_inner()) = shut;
                self.opened.notify_all();
            }

            fn wait_open(&self) {
                let deadline = Instant::now() + GATE_MAX;
                let mut shut = self.shut.lock().unwrap_or_else(|p| p.into_inner());
                while *shut {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return;
                    }
                    shut = self
                        .opened
                        .wait_timeout(shut, left)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            }
        }

        struct Fs(Arc<Gate>);

        fn attr(ino: INodeNo) -> FileAttr {
            let (kind, perm) = if ino == INodeNo::ROOT {
                (FileType::Directory, 0o755)
            } else {
                (FileType::RegularFile, 0o644)
            };
            FileAttr {
                ino,
                size: 0,
                blocks: 0,
                atime: UNIX_EPOCH,
                mtime: UNIX_EPOCH,
                ctime: UNIX_EPOCH,
                crtime: UNIX_EPOCH,
                kind,
                perm,
                nlink: 1,
                uid: 0,
                gid: 0,
                rdev: 0,
                blksize: 4096,
                flags: 0,
            }
        }

        impl Filesystem for Fs {
            fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
                if parent == INodeNo::ROOT && name == "held" {
                    reply.entry(&Duration::ZERO, &attr(HELD), Generation(0));
                } else {
                    reply.error(Errno::ENOENT);
                }
            }

            fn getattr(
                &self,
                _req: &Request,
                ino: INodeNo,
                _fh: Option<FileHandle>,
                reply: ReplyAttr,
            ) {
                if ino == HELD {
                    self.0.wait_open();
                }
                reply.attr(&Duration::ZERO, &attr(ino));
            }
        }

        fn has_fusermount3() -> bool {
            std::env::var_os("PATH").is_some_and(|paths| {
                std::env::split_paths(&paths).any(|d| d.join("fusermount3").is_file())
            })
        }

        /// The mount, with `held` open in this process; dropping it opens the gate,
        /// closes the file and unmounts.
        pub struct Unanswered {
            gate: Arc<Gate>,
            held: Option<File>,
            session: Option<fuser::BackgroundSession>,
            _dir: tempfile::TempDir,
        }

        impl Unanswered {
            /// Mounts it and opens `held` (gate open), then shuts the gate. `None` (and a
            /// SKIP line) where this machine cannot mount: no `/dev/fuse`, or a mount
            /// refused without `fusermount3` to fall back on, as the mount tests skip.
            pub fn start() -> Option<Unanswered> {
                if !std::path::Path::new("/dev/fuse").exists() {
                    eprintln!("SKIP the unanswered file system: no /dev/fuse");
                    return None;
                }
                let dir = tempfile::tempdir().expect("tempdir");
                let gate = Arc::new(Gate::default());
                let mut config = Config::default();
                config.mount_options = vec![
                    MountOption::FSName("reftablefs-test".into()),
                    MountOption::RO,
                ];
                // Two threads: a close (FLUSH) is answered while a getattr waits.
                config.n_threads = Some(2);
                let session = match fuser::Session::new(Fs(gate.clone()), dir.path(), &config)
                    .and_then(fuser::Session::spawn)
                {
                    Ok(s) => s,
                    Err(e) if !has_fusermount3() => {
                        eprintln!("SKIP the unanswered file system: {e}, no fusermount3");
                        return None;
                    }
                    Err(e) => panic!("cannot mount the test file system: {e}"),
                };
                let held = dir.path().join("held");
                let mut me = Unanswered {
                    gate,
                    held: None,
                    session: Some(session),
                    _dir: dir,
                };
                me.held = Some(File::open(held).expect("open held"));
                me.gate.set(true);
                Some(me)
            }

            /// A `stat` through this process's descriptor on `held` (what the old scan
            /// did): on another thread, which must still be waiting after `wait`. The
            /// receiver gets its end once the gate opens.
            pub fn stat_waits(&self, wait: Duration) -> std::sync::mpsc::Receiver<()> {
                use std::os::fd::AsRawFd;
                let fd = self.held.as_ref().map_or(-1, |f| f.as_raw_fd());
                let link = format!("/proc/self/fd/{fd}");
                let (tx, rx) = std::sync::mpsc::channel();
                std::thread::spawn(move || {
                    let _ = std::fs::metadata(link);
                    let _ = tx.send(());
                });
                assert!(
                    rx.recv_timeout(wait).is_err(),
                    "a stat of the unanswered file returned: the test proves nothing"
                );
                rx
            }

            /// Lets every waiting and later `getattr` through.
            pub fn open_gate(&self) {
                self.gate.set(false);
            }
        }

        impl Drop for Unanswered {
            fn drop(&mut self) {
                self.open_gate();
                self.held = None;
                if let Some(s) = self.session.take() {
                    let _ = s.umount_and_join();
                }
            }
        }
    }

    /// [`diagnose`] on another thread; `None` if it has not returned within `bound`.
    fn diagnose_within(path: &Path, bound: Duration) -> Option<Result<Option<LockDiagnosis>>> {
        let (tx, rx) = std::sync::mpsc::channel();
        let p = path.to_path_buf();
        std::thread::spawn(move || {
            let _ = tx.send(diagnose(&p));
        });
        rx.recv_timeout(bound).ok()
    }

    #[test]
    fn diagnosis_sees_this_process_holding_a_lock() {
        const BOUND: Duration = Duration::from_secs(10);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tables.list.lock");
        assert_eq!(diagnose(&p).unwrap(), None);
        // This process also holds a file open on a file system that does not answer (a
        // stopped FUSE daemon, a hung NFS server, the mount itself): the diagnosis must
        // not ask it anything.
        #[cfg(feature = "fuse")]
        let stuck = unanswered::Unanswered::start();
        #[cfg(feature = "fuse")]
        let waiting_stat = stuck
            .as_ref()
            .map(|s| s.stat_waits(Duration::from_millis(300)));
        let mut lock = LockFile::acquire(&p, None).unwrap();
        let start = Instant::now();
        let got = diagnose_within(&p, BOUND);
        #[cfg(feature = "fuse")]
        if let Some(s) = &stuck {
            s.open_gate();
        }
        #[cfg(feature = "fuse")]
        if let Some(rx) = waiting_stat {
            assert!(rx.recv_timeout(BOUND).is_ok(), "the stat never returned");
        }
        let d = got
            .unwrap_or_else(|| {
                panic!("the diagnosis did not return within {BOUND:?}: it asked a file system")
            })
            .unwrap()
            .unwrap();
        assert!(start.elapsed() < BOUND);
        assert!(
            d.holders.iter().any(|(pid, _)| *pid == std::process::id()),
            "{d}"
        );
        assert!(d.complete, "{d}");
        assert!(!d.is_stale(Duration::ZERO), "a held lock is not stale: {d}");
        // Closed but left (as after kill -9): nobody holds it.
        lock.file = None;
        let d = diagnose(&p).unwrap().unwrap();
        assert!(d.holders.is_empty(), "{d}");
        assert!(d.is_stale(Duration::ZERO), "{d}");
        drop(lock);
        #[cfg(feature = "fuse")]
        drop(stuck);
        let p2 = dir.path().join("left.lock");
        drop(File::create(&p2).unwrap());
        let d = diagnose(&p2).unwrap().unwrap();
        assert!(d.holders.is_empty(), "{d}");
        assert!(d.is_stale(Duration::ZERO), "{d}");
        assert!(!d.is_stale(Duration::from_secs(3600)), "too young: {d}");
        assert!(d.to_string().contains("held open by no process"), "{d}");
        // Replaced by a new lock in between: not removed.
        fs::remove_file(&p2).unwrap();
        drop(File::create(&p2).unwrap());
        let same_ino = diagnose(&p2).unwrap().unwrap().id == d.id;
        assert_eq!(remove_diagnosed(&d).unwrap(), same_ino);
        let d = diagnose(&p2).unwrap();
        if let Some(d) = d {
            assert!(remove_diagnosed(&d).unwrap());
        }
        assert!(!p2.exists());
    }

    #[test]
    fn diagnosis_tells_a_deleted_lock_from_its_successor() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tables.list.lock");
        let me = std::process::id();
        let held = |d: &LockDiagnosis| d.holders.iter().any(|(pid, _)| *pid == me);
        // The old lock, still open here, is unlinked and a new one made at its path:
        // this process holds the old file, not the new one (the link text says
        // "tables.list.lock (deleted)" and the inode differs).
        let old = File::create(&p).unwrap();
        fs::remove_file(&p).unwrap();
        drop(File::create(&p).unwrap());
        let d = diagnose(&p).unwrap().unwrap();
        assert!(
            !held(&d),
            "the old file's holder counted for the new one: {d}"
        );
        // A file of the same name elsewhere is not the lock either.
        let other_dir = dir.path().join("other");
        fs::create_dir(&other_dir).unwrap();
        let other = File::create(other_dir.join("tables.list.lock")).unwrap();
        assert!(!held(&diagnose(&p).unwrap().unwrap()));
        // An O_PATH descriptor on the lock holds nothing.
        let path_only = {
            use std::os::unix::fs::OpenOptionsExt;
            fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH)
                .open(&p)
                .unwrap()
        };
        assert!(!held(&diagnose(&p).unwrap().unwrap()), "O_PATH counted");
        let new = File::open(&p).unwrap();
        let d = diagnose(&p).unwrap().unwrap();
        assert!(held(&d) && d.complete, "{d}");
        drop((old, other, path_only, new));
        assert!(!held(&diagnose(&p).unwrap().unwrap()));
    }

    #[test]
    fn fdinfo_and_link_text() {
        let info = parse_fdinfo(b"pos:\t0\nflags:\t02100002\nmnt_id:\t31\nino:\t1234\n").unwrap();
        assert_eq!(
            info,
            FdInfo {
                flags: 0o2100002,
                mnt_id: 31,
                ino: Some(1234)
            }
        );
        assert_eq!(
            parse_fdinfo(b"pos:\t0\nflags:\t0100000\nmnt_id:\t24\n").map(|i| i.ino),
            Some(None),
            "before Linux 5.14: no ino line"
        );
        assert_eq!(parse_fdinfo(b"pos:\t0\n"), None);
        let name = b"tables.list.lock";
        assert!(link_names(b"/r/.git/reftable/tables.list.lock", name));
        assert!(link_names(
            b"/r/.git/reftable/tables.list.lock (deleted)",
            name
        ));
        assert!(!link_names(b"/r/.git/reftable/xtables.list.lock", name));
        assert!(!link_names(b"tables.list.lock", name));
        assert!(!link_names(b"pipe:[22718]", name));
        assert!(!link_names(b"/r/tables.list.lock.new", name));
        let info = b"24 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n\
                     31 24 0:45 / /tmp/m rw - fuse.reftable reftablefs rw\n";
        assert_eq!(mount_dev(info, 31).as_deref(), Some(&b"0:45"[..]));
        assert_eq!(mount_dev(info, 24).as_deref(), Some(&b"254:0"[..]));
        assert_eq!(mount_dev(info, 2), None);
    }

    #[test]
    fn commit_renames() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("tables.list");
        let mut lock = LockFile::acquire(dir.path().join("tables.list.lock"), None).unwrap();
        lock.file().unwrap().write_all(b"a.ref\n").unwrap();
        lock.commit(&target).unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"a.ref\n");
        assert!(!dir.path().join("tables.list.lock").exists());
    }

    #[test]
    fn temp_names_and_modes() {
        let dir = tempfile::tempdir().unwrap();
        let (_f, p) = create_temp(dir.path(), "0x000000000001-0x000000000001-0badf00d").unwrap();
        let name = p.file_name().unwrap().to_str().unwrap().to_owned();
        assert!(
            name.starts_with("0x000000000001-0x000000000001-0badf00d.temp."),
            "{name}"
        );
        assert_eq!(
            name.len(),
            "0x000000000001-0x000000000001-0badf00d.temp.".len() + 6
        );
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        chmod(&p, 0o640).unwrap();
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o640
        );
    }

    #[test]
    fn shared_permissions_match_t0610() {
        // (umask, shared) -> mode, from t0610 "honors --shared=$shared with umask".
        use SharedRepository::{Everybody, Group, Umask};
        let cases = [
            (0o002, Umask, 0o664),
            (0o022, Umask, 0o644),
            (0o027, Umask, 0o640),
            (0o002, Group, 0o664),
            (0o022, Group, 0o664),
            (0o027, Group, 0o660),
            (0o002, Everybody, 0o664),
            (0o022, Everybody, 0o664),
            (0o027, Everybody, 0o664),
        ];
        for (umask, shared, want) in cases {
            assert_eq!(
                shared.calc_perm(0o666 & !umask),
                want,
                "umask {umask:o} shared {shared:?}"
            );
        }
    }

    #[test]
    fn random_numbers_vary() {
        let a: Vec<u32> = (0..8).map(|_| rand_u32()).collect();
        assert!(a.windows(2).any(|w| w[0] != w[1]));
    }
}
