//! File-system helpers for the stack: git-style `.lock` files (created `O_EXCL`, retried
//! with git's quadratic backoff, removed on drop, committed by rename), temporary files
//! named like `mkstemp`'s, fsync with counting, permissions, and a small PRNG for the
//! random parts of table names.

use std::cell::Cell;
use std::fs::{self, File};
use std::io;
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
    /// was unreadable, so a holder may be missing).
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
/// it open (a scan of `/proc/*/fd`). `Ok(None)` when it does not exist.
pub fn diagnose(path: &Path) -> Result<Option<LockDiagnosis>> {
    use std::os::unix::fs::MetadataExt;
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path, e)),
    };
    let id = (meta.dev(), meta.ino());
    let age = meta
        .modified()
        .ok()
        .and_then(|m| SystemTime::now().duration_since(m).ok())
        .unwrap_or_default();
    let (holders, complete) = holders_of(id);
    Ok(Some(LockDiagnosis {
        path: path.to_path_buf(),
        id,
        age,
        holders,
        complete,
    }))
}

/// Processes with a descriptor on the file `(dev, ino)`, and whether the scan saw every
/// process.
fn holders_of(id: (u64, u64)) -> (Vec<(u32, String)>, bool) {
    use std::os::unix::fs::MetadataExt;
    let mut holders = Vec::new();
    let Ok(procs) = fs::read_dir("/proc") else {
        return (holders, false);
    };
    let mut complete = true;
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let fds = match fs::read_dir(p.path().join("fd")) {
            Ok(fds) => fds,
            // The process exited meanwhile: it holds nothing.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(_) => {
                complete = false;
                continue;
            }
        };
        for fd in fds.flatten() {
            // stat through the magic link: the open file itself, even if unlinked.
            if let Ok(m) = fs::metadata(fd.path()) {
                if (m.dev(), m.ino()) == id {
                    let name = fs::read_to_string(p.path().join("comm")).unwrap_or_default();
                    holders.push((pid, name.trim_end().to_owned()));
                    break;
                }
            }
        }
    }
    (holders, complete)
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

    #[test]
    fn diagnosis_sees_this_process_holding_a_lock() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tables.list.lock");
        assert_eq!(diagnose(&p).unwrap(), None);
        let lock = LockFile::acquire(&p, None).unwrap();
        let d = diagnose(&p).unwrap().unwrap();
        assert!(
            d.holders.iter().any(|(pid, _)| *pid == std::process::id()),
            "{d}"
        );
        assert!(!d.is_stale(Duration::ZERO), "a held lock is not stale: {d}");
        // A leftover (as after kill -9): the file without an open descriptor.
        std::mem::forget(lock);
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
