//! Broken refs, as a files `.git` keeps them (issue 25.6): a file under `refs/` whose name
//! fails `git check-ref-format` (`refs/heads/broken...ref`, `refs/heads/x..y`, …) or whose
//! content is no ref value (empty, the null id, junk, a symref to a bad name), a root ref
//! (`HEAD`) holding no ref value, a reflog holding no reflog lines, a file under `logs/`
//! of no ref name, and symbolic links at any of those paths: none can be a reftable ref
//! (git 2.47 ignores such refs in a stack too), yet a files backend keeps them as written
//! and git 2.39 reports them ("ignoring broken ref", fsck errors) or reads them (a link
//! into `refs/` is a symref).
//!
//! The store and its rules live here; `state/broken.rs` has the hooks the view's calls
//! use at their commit points (create, write, close, rename, unlink, symlink) and after a
//! reload.
//!
//! * **Where**: one index file per view beside its stack, `GITDIR/reftablefs-broken-refs`
//!   ([`FILE_NAME`]; a linked worktree's in `worktrees/<id>/`), never in the stack's
//!   directory. One file rather than one file per ref: a change is one atomic replacement
//!   (temporary file, `fsync`, `rename`, directory `fsync`), no escaping of arbitrary names
//!   into paths is needed (a bad name may hold `..`, `@{`, `.lock` components), and the
//!   whole store is read once at mount. Broken refs are rare and small, so rewriting the
//!   file per change costs nothing that matters.
//! * **Bounded**: at most [`BROKEN_MAX`] entries and [`BROKEN_BYTES_MAX`] bytes of names,
//!   contents and recorded values together; beyond it the call that would add one fails
//!   `ENOSPC`.
//! * **Shown**: each entry is a plain file (or a symbolic link) of the ref view at its
//!   path (a scratch file of the overlay: listed, read, written, renamed, unlinked as on
//!   disk); never a ref of the stack, so `packed-refs` never shows it.
//! * **Beneath**: an [`Entry`] records what the stack holds under it ([`Entry::shadow`]):
//!   a root ref's last real value, or the symref a link into `refs/` is; nothing for the
//!   others (a ref or reflog a file replaced is deleted from the stack).
//! * **Dropped** when the stack gains a real value of that name: a valid write through the
//!   mount replaces it; a ref written on the stack by another writer (git 2.47) other than
//!   the recorded one drops it at the next reload.
//!
//! File format: the line [`HEADER`], then per entry `<hex name> <hex content> <f|l> <hex
//! shadow|->\n`; files after [`HEADER_V1`] (the first version) hold `<hex name> <hex
//! content>\n` lines of plain files.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::fs::error::Refusal;
use crate::fs::protocol::valid_ref_name;

/// The store's file in GITDIR (or in a linked worktree's `worktrees/<id>/`).
pub const FILE_NAME: &str = "reftablefs-broken-refs";
/// Its temporary name while it is rewritten.
pub const TEMP_NAME: &str = "reftablefs-broken-refs.tmp";
/// The first line of the store's file (this version writes it).
pub const HEADER: &[u8] = b"# reftablefs broken refs v2\n";
/// The first line of a file of the first version (read, never written): files only, no
/// recorded stack value.
pub const HEADER_V1: &[u8] = b"# reftablefs broken refs v1\n";
/// At most this many entries are kept.
pub const BROKEN_MAX: usize = 1024;
/// At most this many bytes of names, contents and recorded stack values together.
pub const BROKEN_BYTES_MAX: usize = 256 << 10;

/// Why a broken ref is refused at the store's bounds.
pub const AT_BOUND: &str = "the broken refs kept beside the stack are at their bound \
     (1,024 refs, 256 KiB of names and contents)";

/// Whether a file (or symbolic link) at `path` may be kept: below `refs/` or `logs/`, or a
/// root ref (`HEAD`, `ORIG_HEAD`, …); never a lock, nor a name under `logs/` whose last
/// component starts with `.` (git's own temporary names there, which its reflog walk
/// skips: they stay scratch files).
pub fn is_candidate(path: &[u8]) -> bool {
    if path.ends_with(b".lock") {
        return false;
    }
    if path.starts_with(b"refs/") || crate::refname::is_root_ref(path) {
        return true;
    }
    match path.strip_prefix(b"logs/") {
        Some(rest) => {
            let base = rest.rsplit(|&b| b == b'/').next().unwrap_or_default();
            !rest.is_empty() && !base.is_empty() && !base.starts_with(b".")
        }
        None => false,
    }
}

/// The ref name a candidate path stands for: itself, or a reflog's name.
pub fn ref_of(path: &[u8]) -> &[u8] {
    path.strip_prefix(b"logs/").unwrap_or(path)
}

/// Whether `path` is a broken name (a file there can only be kept here).
pub fn is_bad_name(path: &[u8]) -> bool {
    is_candidate(path) && !valid_ref_name(ref_of(path))
}

/// What an entry is on the view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file with the entry's content.
    File,
    /// A symbolic link whose target is the entry's content.
    Link,
}

/// One kept name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub kind: EntryKind,
    /// The file's bytes, or the link's target.
    pub content: Vec<u8>,
    /// The value the stack holds under this entry, rendered as a ref file (`None`: the
    /// stack holds nothing there): a root ref keeps its last real value beneath a broken
    /// file; a link to a ref name is that symref. The entry is dropped when the stack's
    /// value no longer is this one (another writer wrote a real value).
    pub shadow: Option<Vec<u8>>,
}

impl Entry {
    /// A plain file.
    pub fn file(content: Vec<u8>, shadow: Option<Vec<u8>>) -> Entry {
        Entry {
            kind: EntryKind::File,
            content,
            shadow,
        }
    }

    fn bytes(&self) -> usize {
        self.content.len() + self.shadow.as_ref().map_or(0, Vec::len)
    }
}

/// The broken refs of one view, in memory and in their file.
#[derive(Debug, Default)]
pub struct BrokenRefs {
    /// The directory of the file, opened before mounting (`None`: not kept).
    dir: Option<File>,
    /// Kept in memory only (tests).
    memory: bool,
    map: BTreeMap<Vec<u8>, Entry>,
    bytes: usize,
    links: usize,
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

/// Parses the store's file: after [`HEADER`], `<hex name> <hex content> <f|l> <hex
/// shadow|->` lines; after [`HEADER_V1`], `<hex name> <hex content>` lines (files).
pub fn parse(data: &[u8]) -> io::Result<BTreeMap<Vec<u8>, Entry>> {
    let (body, v1) = match (data.strip_prefix(HEADER), data.strip_prefix(HEADER_V1)) {
        (Some(b), _) => (b, false),
        (None, Some(b)) => (b, true),
        _ => return Err(bad_data("unknown header")),
    };
    let mut map = BTreeMap::new();
    for (i, line) in body.split(|&b| b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        let parts: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        let entry = match (v1, parts.as_slice()) {
            (true, [n, c]) => unhex(n)
                .zip(unhex(c))
                .map(|(n, c)| (n, Entry::file(c, None))),
            (false, [n, c, k, s]) => {
                let kind = match *k {
                    b"f" => Some(EntryKind::File),
                    b"l" => Some(EntryKind::Link),
                    _ => None,
                };
                let shadow = match *s {
                    b"-" => Some(None),
                    s => unhex(s).map(Some),
                };
                match (unhex(n), unhex(c), kind, shadow) {
                    (Some(n), Some(content), Some(kind), Some(shadow)) => Some((
                        n,
                        Entry {
                            kind,
                            content,
                            shadow,
                        },
                    )),
                    _ => None,
                }
            }
            _ => None,
        };
        match entry {
            Some((n, e)) if is_candidate(&n) => {
                map.insert(n, e);
            }
            _ => return Err(bad_data(&format!("line {} is malformed", i + 2))),
        }
    }
    Ok(map)
}

/// Renders the store's file.
pub fn render(map: &BTreeMap<Vec<u8>, Entry>) -> Vec<u8> {
    let mut out = HEADER.to_vec();
    for (n, e) in map {
        hex(&mut out, n);
        out.push(b' ');
        hex(&mut out, &e.content);
        out.extend_from_slice(match e.kind {
            EntryKind::File => b" f ",
            EntryKind::Link => b" l ",
        });
        match &e.shadow {
            Some(s) => hex(&mut out, s),
            None => out.push(b'-'),
        }
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

    /// The store of the directory `gitdir` (GITDIR, or `/proc/self/fd/N` of a linked
    /// worktree's directory reached beneath GITDIR), its file read if present. No link is
    /// followed: the directory is opened once, and the file is named beneath that very
    /// directory.
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
                let limit = (2 * BROKEN_BYTES_MAX + 6 * BROKEN_MAX + HEADER.len()) as u64;
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
        s.bytes = s.map.iter().map(|(n, e)| n.len() + e.bytes()).sum();
        s.links = s.map.values().filter(|e| e.kind == EntryKind::Link).count();
        Ok(s)
    }

    /// `name` in the store's directory through its descriptor.
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

    pub fn get(&self, name: &[u8]) -> Option<&Entry> {
        self.map.get(name)
    }

    pub fn contains(&self, name: &[u8]) -> bool {
        self.map.contains_key(name)
    }

    /// Whether `name` is a kept symbolic link.
    pub fn is_link(&self, name: &[u8]) -> bool {
        self.links > 0
            && self
                .map
                .get(name)
                .is_some_and(|e| e.kind == EntryKind::Link)
    }

    /// Whether any symbolic link is kept.
    pub fn has_links(&self) -> bool {
        self.links > 0
    }

    /// Every entry, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&Vec<u8>, &Entry)> {
        self.map.iter()
    }

    /// For content that is no ref value written into `path` (a ref file or a ref's lock):
    /// `None` when this store does not keep it (the write is refused as before),
    /// `Some(true)` when it will be kept, `Some(false)` when the store is at its bounds.
    pub fn write_room(&self, path: &[u8], len: usize) -> Option<bool> {
        let name = path.strip_suffix(b".lock").unwrap_or(path);
        (self.enabled() && is_candidate(name)).then(|| self.has_room(name, len))
    }

    /// Whether a file written at `path` is kept here whatever it holds: a kept entry or a
    /// broken name.
    pub fn keeps_as_file(&self, path: &[u8]) -> bool {
        self.enabled() && (self.contains(path) || is_bad_name(path))
    }

    /// Whether `name` with `len` bytes of content (and recorded value) fits the bounds.
    pub fn has_room(&self, name: &[u8], len: usize) -> bool {
        let (count, bytes) = match self.map.get(name) {
            Some(e) => (self.map.len(), self.bytes - name.len() - e.bytes()),
            None => (self.map.len() + 1, self.bytes),
        };
        count <= BROKEN_MAX && bytes + name.len() + len <= BROKEN_BYTES_MAX
    }

    fn account(&mut self, name: &[u8], e: &Entry, add: bool) {
        let link = usize::from(e.kind == EntryKind::Link);
        if add {
            self.bytes += name.len() + e.bytes();
            self.links += link;
        } else {
            self.bytes -= name.len() + e.bytes();
            self.links -= link;
        }
    }

    /// Keeps `name` as `entry` (durably when the call returns); `ENOSPC` beyond the
    /// bounds, the file system's errno if the file cannot be written (nothing changes).
    pub fn put(&mut self, name: &[u8], entry: Entry) -> Result<(), Refusal> {
        if !is_candidate(name) {
            return Err(Refusal::new(
                libc::EINVAL,
                "not a path below refs/ or logs/, nor a root ref",
            ));
        }
        if self.map.get(name) == Some(&entry) {
            return Ok(());
        }
        if !self.has_room(name, entry.bytes()) {
            return Err(Refusal::new(libc::ENOSPC, AT_BOUND));
        }
        self.account(name, &entry, true);
        let old = self.map.insert(name.to_vec(), entry);
        if let Some(o) = &old {
            self.account(name, o, false);
        }
        if let Err(e) = self.save() {
            let new = match old {
                Some(o) => {
                    self.account(name, &o, true);
                    self.map.insert(name.to_vec(), o)
                }
                None => self.map.remove(name),
            };
            if let Some(n) = new {
                self.account(name, &n, false);
            }
            return Err(io_refusal(&e));
        }
        Ok(())
    }

    /// Forgets `name` (durably when the call returns), returning what it was; the file
    /// system's errno if the file cannot be written (nothing changes).
    pub fn remove(&mut self, name: &[u8]) -> Result<Option<Entry>, Refusal> {
        let Some(old) = self.map.remove(name) else {
            return Ok(None);
        };
        if let Err(e) = self.save() {
            self.map.insert(name.to_vec(), old);
            return Err(io_refusal(&e));
        }
        self.account(name, &old, false);
        Ok(Some(old))
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
        let dir = self.path("");
        crate::fs::durable::replace(
            &dir,
            Path::new(TEMP_NAME),
            Path::new(FILE_NAME),
            &render(&self.map),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(c: &[u8]) -> Entry {
        Entry::file(c.to_vec(), None)
    }

    #[test]
    fn names_and_candidates() {
        assert!(is_bad_name(b"refs/heads/broken...ref"));
        assert!(is_bad_name(b"refs/heads/ref.."));
        assert!(is_bad_name(b"refs/heads/a@{b"));
        assert!(is_bad_name(b"refs/heads/x.lock/y"));
        assert!(!is_bad_name(b"refs/heads/x.lock"));
        assert!(!is_bad_name(b"refs/heads/main"));
        assert!(is_candidate(b"HEAD"));
        assert!(is_candidate(b"ORIG_HEAD"));
        assert!(!is_candidate(b"HEAD.lock"));
        assert!(!is_candidate(b"COMMIT_EDITMSG"));
        assert!(!is_candidate(b"refs/heads/main.lock"));
        assert!(is_candidate(b"logs/PSEUDO-MAIN"));
        assert!(is_bad_name(b"logs/PSEUDO-MAIN"));
        assert!(is_candidate(b"logs/refs/heads/main"));
        assert!(!is_bad_name(b"logs/refs/heads/main"));
        assert!(!is_candidate(b"logs/refs/.tmp-renamed-log"));
        assert!(!is_candidate(b"logs/refs/heads/x.lock"));
        assert!(!is_candidate(b"logs"));
    }

    #[test]
    fn file_round_trips_any_bytes() {
        let mut m = BTreeMap::new();
        m.insert(
            b"refs/heads/broken...ref".to_vec(),
            Entry::file(b"junk\n\0\xff".to_vec(), None),
        );
        m.insert(b"refs/heads/empty".to_vec(), Entry::file(Vec::new(), None));
        m.insert(
            b"HEAD".to_vec(),
            Entry::file(b"0000\n".to_vec(), Some(b"ref: refs/heads/main\n".to_vec())),
        );
        m.insert(
            b"logs/refs/heads/u".to_vec(),
            Entry {
                kind: EntryKind::Link,
                content: b"../../../real-u".to_vec(),
                shadow: None,
            },
        );
        let text = render(&m);
        assert!(text.starts_with(HEADER));
        assert_eq!(parse(&text).unwrap(), m);
        // The first version's files are read (files without a recorded value).
        let mut v1 = HEADER_V1.to_vec();
        hex(&mut v1, b"refs/heads/x..y");
        v1.extend_from_slice(b" 6a756e6b\n");
        let got = parse(&v1).unwrap();
        assert_eq!(
            got.get(&b"refs/heads/x..y"[..]),
            Some(&Entry::file(b"junk".to_vec(), None))
        );
        let mut bad_kind = HEADER.to_vec();
        hex(&mut bad_kind, b"refs/heads/a");
        bad_kind.extend_from_slice(b" 00 x -\n");
        assert!(parse(&bad_kind).is_err());
        assert!(parse(b"nope\n").is_err());
        let mut bad = HEADER.to_vec();
        bad.extend_from_slice(b"zz 00\n");
        assert!(parse(&bad).is_err());
        let mut not_ref = HEADER.to_vec();
        hex(&mut not_ref, b"config");
        not_ref.extend_from_slice(b" 00 f -\n");
        assert!(parse(&not_ref).is_err());
    }

    #[test]
    fn store_survives_reopen_and_is_bounded() {
        let d = tempfile::tempdir().unwrap();
        let mut s = BrokenRefs::open(d.path()).unwrap();
        assert!(s.is_empty());
        s.put(b"refs/heads/ref..", f(b"1234\n")).unwrap();
        s.put(b"refs/heads/empty", f(b"")).unwrap();
        assert!(s.put(b"config", f(b"x")).is_err());
        let link = Entry {
            kind: EntryKind::Link,
            content: b"refs/heads/main".to_vec(),
            shadow: Some(b"ref: refs/heads/main\n".to_vec()),
        };
        s.put(b"HEAD", link.clone()).unwrap();
        assert!(s.is_link(b"HEAD") && s.has_links());
        let s2 = BrokenRefs::open(d.path()).unwrap();
        assert_eq!(s2.get(b"refs/heads/ref..").unwrap().content, b"1234\n");
        assert_eq!(s2.get(b"refs/heads/empty").unwrap().content, b"");
        assert_eq!(s2.get(b"HEAD"), Some(&link));
        assert!(s2.is_link(b"HEAD"));
        assert_eq!(s2.len(), 3);
        assert_eq!(s.remove(b"HEAD").unwrap(), Some(link));
        assert!(!s.has_links());
        assert!(!d.path().join(TEMP_NAME).exists());
        s.remove(b"refs/heads/ref..").unwrap();
        s.remove(b"refs/heads/empty").unwrap();
        // Nothing left: no file.
        assert!(!d.path().join(FILE_NAME).exists());
        // Bounds: bytes, then count.
        let big = vec![b'x'; BROKEN_BYTES_MAX];
        let e = s
            .put(b"refs/heads/big", Entry::file(big, None))
            .unwrap_err();
        assert_eq!(e.errno, libc::ENOSPC);
        assert!(s.is_empty());
        let mut m = BrokenRefs::in_memory();
        for i in 0..BROKEN_MAX {
            m.put(format!("refs/b/{i}..").as_bytes(), f(b"")).unwrap();
        }
        assert_eq!(
            m.put(b"refs/b/one-more..", f(b"")).unwrap_err().errno,
            libc::ENOSPC
        );
        // Replacing one is always possible.
        m.put(b"refs/b/0..", f(b"new")).unwrap();
    }

    #[test]
    fn failed_write_changes_nothing() {
        let d = tempfile::tempdir().unwrap();
        let mut s = BrokenRefs::open(d.path()).unwrap();
        s.put(b"refs/heads/a..", f(b"one")).unwrap();
        s.put(b"refs/heads/b..", f(b"two")).unwrap();
        // The temporary name taken by a directory: the rewrite fails.
        std::fs::create_dir(d.path().join(TEMP_NAME)).unwrap();
        assert!(s.put(b"refs/heads/a..", f(b"two")).is_err());
        assert_eq!(s.get(b"refs/heads/a..").unwrap().content, b"one");
        let link = Entry {
            kind: EntryKind::Link,
            content: b"x".to_vec(),
            shadow: None,
        };
        assert!(s.put(b"refs/heads/l", link).is_err());
        assert!(!s.has_links() && !s.contains(b"refs/heads/l"));
        assert!(s.remove(b"refs/heads/a..").is_err());
        assert!(s.contains(b"refs/heads/a.."));
        let s2 = BrokenRefs::open(d.path()).unwrap();
        assert_eq!(s2.get(b"refs/heads/a..").unwrap().content, b"one");
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
        assert!(s.put(b"refs/heads/a..", f(b"x")).is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    }
}
