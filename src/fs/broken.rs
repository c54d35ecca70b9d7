//! Broken refs, as a files `.git` keeps them (issue 25.6): a file under `refs/` whose name
//! fails `git check-ref-format` (`refs/heads/broken...ref`, `refs/heads/x..y`, …) or whose
//! content is no ref value (empty, the null id, junk, a symref to a bad name) cannot be a
//! reftable ref — git 2.47 ignores such refs in a stack too — yet a files backend keeps it
//! as written and git 2.39 reports it ("ignoring broken ref", fsck errors).
//!
//! The store and its rules live here; `state` calls the hooks at the end of this file at
//! its commit points (create, write, close, rename, unlink) and after a reload.
//!
//! * **Where**: one index file beside the stack, `GITDIR/reftablefs-broken-refs`
//!   ([`FILE_NAME`]), never in `GITDIR/reftable`. One file rather than one file per ref:
//!   a change is one atomic replacement (temporary file, `fsync`, `rename`, directory
//!   `fsync`), no escaping of arbitrary names into paths is needed (a bad name may hold
//!   `..`, `@{`, `.lock` components), and the whole store is read once at mount. Broken
//!   refs are rare and small, so rewriting the file per change costs nothing that matters.
//! * **Bounded**: at most [`BROKEN_MAX`] refs and [`BROKEN_BYTES_MAX`] bytes of names and
//!   contents together; beyond it the call that would add one fails `ENOSPC`.
//! * **Shown**: each broken ref is a plain file of the ref view at its path (a scratch
//!   file of the overlay: listed, read, written, renamed, unlinked as on disk); it is
//!   never a ref of the stack, so `packed-refs` never shows it.
//! * **Dropped** when the stack gains a real ref of that name: a valid write through the
//!   mount replaces it; a ref written on the stack by another writer (git 2.47) shadows
//!   it and drops it at the next reload.
//! * **Only the main view** keeps them (a linked worktree's view refuses as before).
//!
//! File format: the line [`HEADER`], then per ref `<hex name> <hex content>\n`.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::fs::error::Refusal;
use crate::fs::protocol::valid_ref_name;

/// The store's file in GITDIR.
pub const FILE_NAME: &str = "reftablefs-broken-refs";
/// Its temporary name while it is rewritten.
pub const TEMP_NAME: &str = "reftablefs-broken-refs.tmp";
/// The first line of the store's file.
pub const HEADER: &[u8] = b"# reftablefs broken refs v1\n";
/// At most this many broken refs are kept.
pub const BROKEN_MAX: usize = 1024;
/// At most this many bytes of names and contents together.
pub const BROKEN_BYTES_MAX: usize = 256 << 10;

/// Why a broken ref is refused at the store's bounds.
pub const AT_BOUND: &str = "the broken refs kept beside the stack are at their bound \
     (1,024 refs, 256 KiB of names and contents)";

/// Whether a file at `path` may be kept as a broken ref: below `refs/`, not a lock.
pub fn is_candidate(path: &[u8]) -> bool {
    path.starts_with(b"refs/") && !path.ends_with(b".lock")
}

/// Whether `path` is a broken name (a file there can only be a broken ref).
pub fn is_bad_name(path: &[u8]) -> bool {
    is_candidate(path) && !valid_ref_name(path)
}

/// The broken refs of one view, in memory and in their file.
#[derive(Debug, Default)]
pub struct BrokenRefs {
    /// GITDIR, opened before mounting (`None`: not kept, e.g. a linked worktree's view).
    dir: Option<File>,
    /// Kept in memory only (tests).
    memory: bool,
    map: BTreeMap<Vec<u8>, Vec<u8>>,
    bytes: usize,
}

fn hex(out: &mut Vec<u8>, b: &[u8]) {
    const H: &[u8; 16] = b"0123456789abcdef";
    for &x in b {
        out.push(H[usize::from(x >> 4)]);
        out.push(H[usize::from(x & 15)]);
    }
}

fn unhex(s: &[u8]) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    let d = |c: u8| (c as char).to_digit(16).map(|v| v as u8);
    s.chunks(2)
        .map(|p| Some(d(*p.first()?)? << 4 | d(*p.get(1)?)?))
        .collect()
}

fn bad_data(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{FILE_NAME}: {what}"))
}

/// Parses the store's file.
pub fn parse(data: &[u8]) -> io::Result<BTreeMap<Vec<u8>, Vec<u8>>> {
    let body = data
        .strip_prefix(HEADER)
        .ok_or_else(|| bad_data("unknown header"))?;
    let mut map = BTreeMap::new();
    for (i, line) in body.split(|&b| b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        let mut parts = line.splitn(2, |&b| b == b' ');
        let name = parts.next().and_then(unhex);
        let content = parts.next().and_then(unhex);
        match (name, content) {
            (Some(n), Some(c)) if is_candidate(&n) => {
                map.insert(n, c);
            }
            _ => return Err(bad_data(&format!("line {} is malformed", i + 2))),
        }
    }
    Ok(map)
}

/// Renders the store's file.
pub fn render(map: &BTreeMap<Vec<u8>, Vec<u8>>) -> Vec<u8> {
    let mut out = HEADER.to_vec();
    for (n, c) in map {
        hex(&mut out, n);
        out.push(b' ');
        hex(&mut out, c);
        out.push(b'\n');
    }
    out
}

fn io_refusal(e: &io::Error) -> Refusal {
    Refusal::new(
        e.raw_os_error().unwrap_or(libc::EIO),
        format!("the broken refs' file {FILE_NAME} could not be written: {e}"),
    )
}

impl BrokenRefs {
    /// A store in memory only (tests).
    pub fn in_memory() -> BrokenRefs {
        BrokenRefs {
            memory: true,
            ..Default::default()
        }
    }

    /// The store of `gitdir` (its file read if present). No link is followed: GITDIR is
    /// opened once, and the file is named beneath that very directory.
    pub fn open(gitdir: &Path) -> io::Result<BrokenRefs> {
        let dir = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(gitdir)?;
        let mut s = BrokenRefs {
            dir: Some(dir),
            ..Default::default()
        };
        let mut data = Vec::new();
        match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(s.path(FILE_NAME))
        {
            Ok(f) => {
                let limit = (2 * BROKEN_BYTES_MAX + 3 * BROKEN_MAX + HEADER.len()) as u64;
                f.take(limit + 1).read_to_end(&mut data)?;
                if data.len() as u64 > limit {
                    return Err(bad_data("larger than the store's bounds"));
                }
                s.map = parse(&data)?;
                if s.map.len() > BROKEN_MAX {
                    return Err(bad_data("holds more refs than the store's bounds"));
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(e),
        }
        s.bytes = s.map.iter().map(|(n, c)| n.len() + c.len()).sum();
        Ok(s)
    }

    /// `name` in GITDIR through the directory's descriptor.
    fn path(&self, name: &str) -> PathBuf {
        match &self.dir {
            Some(d) => PathBuf::from(format!("/proc/self/fd/{}/{name}", d.as_raw_fd())),
            None => PathBuf::from(name),
        }
    }

    /// Whether this view keeps broken refs.
    pub fn enabled(&self) -> bool {
        self.dir.is_some() || self.memory
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn get(&self, name: &[u8]) -> Option<&Vec<u8>> {
        self.map.get(name)
    }

    pub fn contains(&self, name: &[u8]) -> bool {
        self.map.contains_key(name)
    }

    /// Every broken ref, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&Vec<u8>, &Vec<u8>)> {
        self.map.iter()
    }

    /// For content that is no ref value written into `path` (a ref file or a ref's lock):
    /// `None` when this store does not keep it (the write is refused as before),
    /// `Some(true)` when it will be kept, `Some(false)` when the store is at its bounds.
    pub fn write_room(&self, path: &[u8], len: usize) -> Option<bool> {
        let name = path.strip_suffix(b".lock").unwrap_or(path);
        (self.enabled() && is_candidate(name)).then(|| self.has_room(name, len))
    }

    /// Whether `name` with `len` bytes of content fits the bounds.
    pub fn has_room(&self, name: &[u8], len: usize) -> bool {
        let (count, bytes) = match self.map.get(name) {
            Some(c) => (self.map.len(), self.bytes - name.len() - c.len()),
            None => (self.map.len() + 1, self.bytes),
        };
        count <= BROKEN_MAX && bytes + name.len() + len <= BROKEN_BYTES_MAX
    }

    /// Keeps `name` with `content` (durably when the call returns); `ENOSPC` beyond the
    /// bounds, the file system's errno if the file cannot be written (nothing changes).
    pub fn put(&mut self, name: &[u8], content: &[u8]) -> Result<(), Refusal> {
        if !is_candidate(name) {
            return Err(Refusal::new(libc::EINVAL, "not a ref path below refs/"));
        }
        if self.map.get(name).is_some_and(|c| c == content) {
            return Ok(());
        }
        if !self.has_room(name, content.len()) {
            return Err(Refusal::new(libc::ENOSPC, AT_BOUND));
        }
        let old = self.map.insert(name.to_vec(), content.to_vec());
        self.bytes += name.len() + content.len();
        if let Some(o) = &old {
            self.bytes -= name.len() + o.len();
        }
        if let Err(e) = self.save() {
            self.bytes -= name.len() + content.len();
            match old {
                Some(o) => {
                    self.bytes += name.len() + o.len();
                    self.map.insert(name.to_vec(), o);
                }
                None => {
                    self.map.remove(name);
                }
            }
            return Err(io_refusal(&e));
        }
        Ok(())
    }

    /// Forgets `name` (durably when the call returns); the file system's errno if the
    /// file cannot be written (nothing changes).
    pub fn remove(&mut self, name: &[u8]) -> Result<bool, Refusal> {
        let Some(old) = self.map.remove(name) else {
            return Ok(false);
        };
        if let Err(e) = self.save() {
            self.map.insert(name.to_vec(), old);
            return Err(io_refusal(&e));
        }
        self.bytes -= name.len() + old.len();
        Ok(true)
    }

    /// Writes the file: a temporary file, `fsync`, `rename` over the file, directory
    /// `fsync`; with no broken ref left the file is removed.
    fn save(&self) -> io::Result<()> {
        let Some(dir) = &self.dir else {
            return Ok(());
        };
        let path = self.path(FILE_NAME);
        if self.map.is_empty() {
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
                Err(e) => return Err(e),
            }
            return dir.sync_all();
        }
        let tmp = self.path(TEMP_NAME);
        let written = (|| {
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o644)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&tmp)?;
            f.write_all(&render(&self.map))?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        dir.sync_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_candidates() {
        assert!(is_bad_name(b"refs/heads/broken...ref"));
        assert!(is_bad_name(b"refs/heads/ref.."));
        assert!(is_bad_name(b"refs/heads/a@{b"));
        assert!(is_bad_name(b"refs/heads/x.lock/y"));
        assert!(!is_bad_name(b"refs/heads/x.lock"));
        assert!(!is_bad_name(b"refs/heads/main"));
        assert!(!is_candidate(b"HEAD"));
        assert!(!is_candidate(b"refs/heads/main.lock"));
    }

    #[test]
    fn file_round_trips_any_bytes() {
        let mut m = BTreeMap::new();
        m.insert(
            b"refs/heads/broken...ref".to_vec(),
            b"junk\n\0\xff".to_vec(),
        );
        m.insert(b"refs/heads/empty".to_vec(), Vec::new());
        let text = render(&m);
        assert!(text.starts_with(HEADER));
        assert_eq!(parse(&text).unwrap(), m);
        assert!(parse(b"nope\n").is_err());
        let mut bad = HEADER.to_vec();
        bad.extend_from_slice(b"zz 00\n");
        assert!(parse(&bad).is_err());
        let mut not_ref = HEADER.to_vec();
        hex(&mut not_ref, b"HEAD");
        not_ref.extend_from_slice(b" 00\n");
        assert!(parse(&not_ref).is_err());
    }

    #[test]
    fn store_survives_reopen_and_is_bounded() {
        let d = tempfile::tempdir().unwrap();
        let mut s = BrokenRefs::open(d.path()).unwrap();
        assert!(s.is_empty());
        s.put(b"refs/heads/ref..", b"1234\n").unwrap();
        s.put(b"refs/heads/empty", b"").unwrap();
        assert!(s.put(b"HEAD", b"x").is_err());
        let s2 = BrokenRefs::open(d.path()).unwrap();
        assert_eq!(s2.get(b"refs/heads/ref..").unwrap(), b"1234\n");
        assert_eq!(s2.get(b"refs/heads/empty").unwrap(), b"");
        assert_eq!(s2.len(), 2);
        assert!(!d.path().join(TEMP_NAME).exists());
        s.remove(b"refs/heads/ref..").unwrap();
        s.remove(b"refs/heads/empty").unwrap();
        // Nothing left: no file.
        assert!(!d.path().join(FILE_NAME).exists());
        // Bounds: bytes, then count.
        let big = vec![b'x'; BROKEN_BYTES_MAX];
        let e = s.put(b"refs/heads/big", &big).unwrap_err();
        assert_eq!(e.errno, libc::ENOSPC);
        assert!(s.is_empty());
        let mut m = BrokenRefs::in_memory();
        for i in 0..BROKEN_MAX {
            m.put(format!("refs/b/{i}..").as_bytes(), b"").unwrap();
        }
        assert_eq!(
            m.put(b"refs/b/one-more..", b"").unwrap_err().errno,
            libc::ENOSPC
        );
        // Replacing one is always possible.
        m.put(b"refs/b/0..", b"new").unwrap();
    }

    #[test]
    fn failed_write_changes_nothing() {
        let d = tempfile::tempdir().unwrap();
        let mut s = BrokenRefs::open(d.path()).unwrap();
        s.put(b"refs/heads/a..", b"one").unwrap();
        s.put(b"refs/heads/b..", b"two").unwrap();
        // The temporary name taken by a directory: the rewrite fails.
        std::fs::create_dir(d.path().join(TEMP_NAME)).unwrap();
        assert!(s.put(b"refs/heads/a..", b"two").is_err());
        assert_eq!(s.get(b"refs/heads/a..").unwrap(), b"one");
        assert!(s.remove(b"refs/heads/a..").is_err());
        assert!(s.contains(b"refs/heads/a.."));
        let s2 = BrokenRefs::open(d.path()).unwrap();
        assert_eq!(s2.get(b"refs/heads/a..").unwrap(), b"one");
    }

    #[test]
    fn a_symlinked_file_is_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("victim");
        std::fs::write(&target, b"keep").unwrap();
        std::os::unix::fs::symlink(&target, d.path().join(FILE_NAME)).unwrap();
        assert!(BrokenRefs::open(d.path()).is_err());
        std::fs::remove_file(d.path().join(FILE_NAME)).unwrap();
        std::os::unix::fs::symlink(&target, d.path().join(TEMP_NAME)).unwrap();
        let mut s = BrokenRefs::open(d.path()).unwrap();
        assert!(s.put(b"refs/heads/a..", b"x").is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    }
}
