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

use crate::format::RefValue;
use crate::fs::error::Refusal;
use crate::fs::protocol::{valid_ref_name, Caller};
use crate::fs::record::log_error;
use crate::fs::state::Inner;

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

/// The hooks `state` calls (under the state lock).
impl Inner {
    /// Whether `path` written with `content` is kept as a broken ref instead of being a
    /// ref of the stack: a broken name, or content that is no ref value.
    pub(crate) fn broken_wants(&self, path: &[u8], content: &[u8]) -> bool {
        self.broken_refs.enabled()
            && is_candidate(path)
            && (!valid_ref_name(path) || self.w.parse_ref_content(content).is_err())
    }

    /// Whether content that can be no ref value may still be written into `path` (a ref
    /// file or a ref's lock below `refs/`): it will be kept as a broken ref, if there is
    /// room for it.
    pub(crate) fn broken_accepts(&self, path: &[u8], len: usize) -> bool {
        self.broken_refs.write_room(path, len) == Some(true)
    }

    /// Keeps `content` at `path` as a broken ref: stored, shown as the file; the stack's
    /// ref of that name (the file on disk would replace it) is deleted.
    pub(crate) fn broken_keep(
        &mut self,
        who: &Caller,
        path: &[u8],
        content: Vec<u8>,
    ) -> Result<(), Refusal> {
        let had = self.broken_refs.get(path).cloned();
        self.broken_refs.put(path, &content)?;
        if valid_ref_name(path) {
            let Inner { w, src, .. } = self;
            let deleted = match w.effective(src.as_mut(), path) {
                Ok(Some(_)) => w.commit_ref(src.as_mut(), who, path, RefValue::Deletion),
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            };
            if let Err(e) = deleted {
                let _ = match had {
                    Some(c) => self.broken_refs.put(path, &c),
                    None => self.broken_refs.remove(path).map(|_| ()),
                };
                return Err(e);
            }
        }
        self.w.files.insert(path.to_vec(), content);
        Ok(())
    }

    /// `rename()` of a ref file of the stack onto a bad name (`mv refs/heads/a
    /// refs/heads/a..b`): the file, with the ref's content, is kept as a broken ref there
    /// and the ref is deleted, as on disk. `None` when this is not such a rename.
    pub(crate) fn broken_rename_ref(
        &mut self,
        who: &Caller,
        from: &[u8],
        to: &[u8],
    ) -> Option<Result<(), Refusal>> {
        if !self.broken_refs.enabled() || !is_bad_name(to) {
            return None;
        }
        let Inner { w, src, .. } = self;
        let value = match w.effective(src.as_mut(), from) {
            Ok(Some(v)) => v,
            Ok(None) => return Some(Err(Refusal::new(libc::ENOENT, "no such ref"))),
            Err(e) => return Some(Err(e)),
        };
        let mut content = Vec::new();
        crate::fs::view::render_ref(&value, &mut content);
        if let Err(e) = self.broken_refs.put(to, &content) {
            return Some(Err(e));
        }
        let Inner { w, src, .. } = self;
        if let Err(e) = w.commit_ref(src.as_mut(), who, from, RefValue::Deletion) {
            let _ = self.broken_refs.remove(to);
            return Some(Err(e));
        }
        self.w.files.insert(to.to_vec(), content);
        Some(Ok(()))
    }

    /// Makes the store agree with the overlay's file at `path` after a call changed it
    /// (a close, a rename, an unlink): a broken ref's new content is kept, a broken ref
    /// gone (or become a real ref) is forgotten. On failure the overlay goes back to what
    /// the store holds, and the errno is the call's.
    pub(crate) fn broken_sync(&mut self, path: &[u8]) -> Result<(), Refusal> {
        if !self.broken_refs.enabled() || !is_candidate(path) {
            return Ok(());
        }
        let kept = self.broken_refs.contains(path);
        let r = match self.w.files.get(path) {
            Some(c) if kept || is_bad_name(path) => {
                let c = c.clone();
                self.broken_refs.put(path, &c)
            }
            _ if kept && !self.w.files.contains_key(path) => {
                self.broken_refs.remove(path).map(|_| ())
            }
            _ => Ok(()),
        };
        if r.is_err() {
            match self.broken_refs.get(path) {
                Some(c) => {
                    let c = c.clone();
                    self.w.files.insert(path.to_vec(), c);
                }
                None => {
                    self.w.files.remove(path);
                }
            }
        }
        r
    }

    /// After a reload: broken refs whose name the stack now holds as a real ref (written
    /// by another writer) are dropped. Returns their names.
    pub(crate) fn broken_drop_shadowed(&mut self) -> Vec<Vec<u8>> {
        if self.broken_refs.is_empty() {
            return Vec::new();
        }
        let names: Vec<Vec<u8>> = self
            .broken_refs
            .iter()
            .filter(|(n, _)| valid_ref_name(n))
            .map(|(n, _)| n.clone())
            .collect();
        let mut dropped = Vec::new();
        for n in names {
            let Inner { w, src, .. } = self;
            if !matches!(
                crate::fs::source::read_ref(src.as_mut(), &n, &mut Default::default()),
                Ok(true)
            ) {
                continue;
            }
            if w.pending.contains_key(&n) {
                continue;
            }
            if let Err(e) = self.broken_refs.remove(&n) {
                log_error("drop shadowed broken ref", &n, &e.reason);
            }
            self.w.files.remove(&n);
            dropped.push(n);
        }
        dropped
    }

    /// At mount: the store's refs become the view's files (after dropping those the
    /// stack holds as real refs).
    pub(crate) fn broken_load(&mut self, store: BrokenRefs) {
        self.broken_refs = store;
        let all: Vec<(Vec<u8>, Vec<u8>)> = self
            .broken_refs
            .iter()
            .map(|(n, c)| (n.clone(), c.clone()))
            .collect();
        for (n, c) in all {
            self.w.files.insert(n, c);
        }
        self.broken_drop_shadowed();
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

    /// Through the view's calls: a bad name created, written and closed is kept and
    /// listed; junk renamed from a valid ref's lock replaces that ref; unlink forgets it.
    #[test]
    fn the_view_keeps_lists_and_forgets_broken_refs() {
        use crate::format::{ObjectId, RefValue};
        use crate::fs::ino::ROOT;
        use crate::fs::source::{LogSettings, MemSource};
        use crate::fs::state::{BatchSettings, Shared};
        use crate::fs::view::Kind;

        let id = ObjectId::from_bytes(&[1; 20]).expect("id");
        let mut mem = MemSource::new();
        mem.set("refs/heads/main", RefValue::Val1(id));
        mem.set("refs/heads/b", RefValue::Val1(id));
        let shared = Shared::new(
            Box::new(mem),
            false,
            LogSettings::default(),
            BatchSettings {
                window: std::time::Duration::from_secs(60),
                max: 1000,
            },
        );
        let d = tempfile::tempdir().unwrap();
        shared.keep_broken_refs(BrokenRefs::open(d.path()).unwrap());
        let me = std::process::id();
        let refs = shared.lookup(ROOT, b"refs").unwrap().0.ino.0;
        let heads = shared.lookup(refs, b"heads").unwrap().0.ino.0;
        let flags = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;

        let (_, fh) = shared.create(heads, b"broken...ref", flags, me).unwrap();
        shared.write(fh, 0, b"junk\n", 0, me).unwrap();
        shared.flush(fh, me).unwrap();
        let (attr, kind, _) = shared.lookup(heads, b"broken...ref").unwrap();
        assert_eq!((kind, attr.size), (Kind::Scratch, 5));
        let store = BrokenRefs::open(d.path()).unwrap();
        assert_eq!(store.get(b"refs/heads/broken...ref").unwrap(), b"junk\n");

        // A new file at a valid name holding the null id stays after its release.
        let (_, fh) = shared.create(heads, b"zero", flags, me).unwrap();
        shared.write(fh, 0, &[b'0'; 40], 0, me).unwrap();
        shared.flush(fh, me).unwrap();
        shared.release(fh);
        assert_eq!(shared.lookup(heads, b"zero").unwrap().0.size, 40);
        shared.unlink(heads, b"zero", me).unwrap();

        // Junk through b's lock replaces the ref b.
        let (_, lock) = shared
            .create(heads, b"b.lock", flags | libc::O_EXCL, me)
            .unwrap();
        shared.write(lock, 0, b"not a ref\n", 0, me).unwrap();
        shared.flush(lock, me).unwrap();
        shared.rename(heads, b"b.lock", heads, b"b", me).unwrap();
        let (attr, kind, _) = shared.lookup(heads, b"b").unwrap();
        assert_eq!((kind, attr.size), (Kind::Scratch, 10));
        {
            let mut g = shared.lock();
            let Inner { w, src, .. } = &mut *g;
            assert_eq!(w.effective(src.as_mut(), b"refs/heads/b").unwrap(), None);
        }
        assert_eq!(BrokenRefs::open(d.path()).unwrap().len(), 2);

        // A valid write replaces the broken b; unlink forgets the bad name.
        let (_, fh) = shared.create(heads, b"b", flags, me).unwrap();
        shared
            .write(fh, 0, format!("{id}\n").as_bytes(), 0, me)
            .unwrap();
        shared.flush(fh, me).unwrap();
        assert_eq!(shared.lookup(heads, b"b").unwrap().1, Kind::Ref);
        shared.unlink(heads, b"broken...ref", me).unwrap();
        assert!(shared.lookup(heads, b"broken...ref").is_err());
        assert!(BrokenRefs::open(d.path()).unwrap().is_empty());
        assert!(!d.path().join(FILE_NAME).exists());

        // Past the store's bounds: ENOSPC at the write, nothing kept.
        let chunk = vec![b'x'; 60_000];
        let mut kept = 0;
        let errno = loop {
            let name = format!("big{kept}");
            let (_, fh) = shared.create(heads, name.as_bytes(), flags, me).unwrap();
            match shared.write(fh, 0, &chunk, 0, me) {
                Ok(_) => {
                    shared.flush(fh, me).unwrap();
                    shared.release(fh);
                    kept += 1;
                }
                Err(e) => {
                    shared.release(fh);
                    break e.errno();
                }
            }
        };
        assert_eq!((errno, kept), (libc::ENOSPC, 4));
        assert!(shared.lookup(heads, b"big4").is_err());
        assert_eq!(BrokenRefs::open(d.path()).unwrap().len(), 4);
        for i in 0..kept {
            shared
                .unlink(heads, format!("big{i}").as_bytes(), me)
                .unwrap();
        }

        // HEAD is never kept broken.
        let (_, fh) = shared.create(ROOT, b"HEAD.lock", flags, me).unwrap();
        assert_eq!(
            shared.write(fh, 0, b"junk", 0, me).unwrap_err().errno(),
            libc::EINVAL
        );
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
