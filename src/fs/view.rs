//! The pure part of the read path: how paths of the mount map to refs and reflogs, how
//! directories are listed by reseeking past subtrees, and how files are rendered exactly as
//! git's files backend stores them. No FUSE types here, so all of it is unit-tested.
//!
//! Paths are byte strings relative to the mount root, without leading `/`: `""` is the root,
//! `HEAD`, `refs/heads/main`, `logs/refs/heads/main`, `packed-refs`.

use crate::format::{HashKind, LogRecord, RefRecord, RefValue};
use crate::fs::source::{RefSource, Step, NEXT_NAME};
use crate::Result;

/// Header of the `packed-refs` file the mount serves: git's, as `files` writes it.
pub use crate::files::PACKED_REFS_HEADER;

/// What a path of the mount is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A directory (the root, `refs`, `logs`, or a prefix of some ref or reflog name).
    Dir,
    /// A ref file (`HEAD`, `refs/…`).
    Ref,
    /// A reflog file (`logs/HEAD`, `logs/refs/…`).
    Log,
    /// The synthesised `packed-refs`.
    PackedRefs,
    /// A file that only lives in memory until it is committed or removed (`x.lock`,
    /// `packed-refs.new`, a temporary reflog), or a broken ref kept beside the stack.
    Scratch,
    /// A symbolic link kept beside the stack (`fs/broken.rs`); its target is its content.
    Link,
}

/// Where a path lives in the view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Area<'a> {
    /// The mount root.
    Root,
    /// `packed-refs`.
    PackedRefs,
    /// `logs` itself (`Some(b"")` is never produced) or `logs/<refname-ish>`.
    Logs(Option<&'a [u8]>),
    /// A ref name or ref-name prefix (`HEAD`, `refs`, `refs/heads/x`).
    Refs(&'a [u8]),
}

/// Splits a mount path into the area it belongs to.
pub fn area(path: &[u8]) -> Area<'_> {
    match path {
        b"" => Area::Root,
        b"packed-refs" => Area::PackedRefs,
        b"logs" => Area::Logs(None),
        p => match p.strip_prefix(b"logs/") {
            Some(rest) => Area::Logs(Some(rest)),
            None => Area::Refs(p),
        },
    }
}

/// Joins a directory path and a child name.
pub fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(dir.len() + 1 + name.len());
    p.extend_from_slice(dir);
    if !dir.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

/// Whether `name` is a plausible single path component (not empty, no `/`, not `.`/`..`).
pub fn is_component(name: &[u8]) -> bool {
    !name.is_empty() && name != b"." && name != b".." && !name.contains(&b'/') && !name.contains(&0)
}

/// Scratch state for classification and listing, reused between requests.
#[derive(Default)]
pub struct Scratch {
    rec: RefRecord,
    key: Vec<u8>,
    name: Vec<u8>,
}

/// Classifies a path against the stored refs: at most two seeks of the cached iterator
/// (one "is it a ref", one "is it a directory prefix").
pub fn classify(src: &mut dyn RefSource, s: &mut Scratch, path: &[u8]) -> Result<Option<Kind>> {
    match area(path) {
        Area::Root => Ok(Some(Kind::Dir)),
        Area::PackedRefs => Ok(Some(Kind::PackedRefs)),
        Area::Logs(None) => Ok(Some(Kind::Dir)),
        Area::Logs(Some(name)) => {
            if src.first_log_at_or_after(name, &mut s.name)? && s.name == name {
                return Ok(Some(Kind::Log));
            }
            s.key.clear();
            s.key.extend_from_slice(name);
            s.key.push(b'/');
            if src.first_log_at_or_after(&s.key, &mut s.name)? && s.name.starts_with(&s.key) {
                return Ok(Some(Kind::Dir));
            }
            Ok(None)
        }
        Area::Refs(name) => {
            if name == b"refs" {
                return Ok(Some(Kind::Dir));
            }
            if src.first_ref_at_or_after(name, &mut s.rec)? && s.rec.name == name {
                return Ok(Some(Kind::Ref));
            }
            if !name.starts_with(b"refs/") {
                return Ok(None);
            }
            s.key.clear();
            s.key.extend_from_slice(name);
            s.key.push(b'/');
            if src.first_ref_at_or_after(&s.key, &mut s.rec)? && s.rec.name.starts_with(&s.key) {
                return Ok(Some(Kind::Dir));
            }
            Ok(None)
        }
    }
}

/// One directory entry.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Entry {
    /// The child's name (one path component).
    pub name: Box<[u8]>,
    /// File or directory.
    pub kind: Kind,
}

/// A directory listing in compact form (one name buffer, end offsets, kinds): about 14
/// bytes per entry instead of a heap allocation each, so listings of huge directories can
/// be cached cheaply.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Listing {
    names: Vec<u8>,
    ends: Vec<u32>,
    kinds: Vec<Kind>,
}

impl Listing {
    /// Packs a sorted listing.
    pub fn from_entries(entries: &[Entry]) -> Listing {
        let total: usize = entries.iter().map(|e| e.name.len()).sum();
        let mut l = Listing {
            names: Vec::with_capacity(total),
            ends: Vec::with_capacity(entries.len()),
            kinds: Vec::with_capacity(entries.len()),
        };
        for e in entries {
            l.names.extend_from_slice(&e.name);
            l.ends
                .push(u32::try_from(l.names.len()).unwrap_or(u32::MAX));
            l.kinds.push(e.kind);
        }
        l
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether the directory is empty.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The `i`-th entry.
    pub fn get(&self, i: usize) -> Option<(&[u8], Kind)> {
        let end = *self.ends.get(i)? as usize;
        let start = match i.checked_sub(1) {
            Some(p) => *self.ends.get(p)? as usize,
            None => 0,
        };
        Some((self.names.get(start..end)?, *self.kinds.get(i)?))
    }

    /// The entries in order, unpacked.
    pub fn to_entries(&self) -> Vec<Entry> {
        (0..self.len())
            .filter_map(|i| self.get(i))
            .map(|(name, kind)| Entry {
                name: name.into(),
                kind,
            })
            .collect()
    }
}

/// The key just past every name that starts with `prefix + child + "/"`: `prefix + child +
/// "0"` (`'0'` is `'/' + 1`).
fn past_subtree(key: &mut Vec<u8>, prefix: &[u8], child: &[u8]) {
    key.clear();
    key.extend_from_slice(prefix);
    key.extend_from_slice(child);
    key.push(b'/' + 1);
}

/// Lists the immediate children of the ref-name prefix `prefix` (`""` or ending in `/`) by
/// reseeking past every subtree: the cost is one seek per child, not one step per ref.
pub fn list_refs(
    src: &mut dyn RefSource,
    _s: &mut Scratch,
    prefix: &[u8],
    out: &mut Vec<Entry>,
) -> Result<()> {
    src.scan_refs(prefix, &mut |rec, key| {
        let Some(rest) = rec.name.strip_prefix(prefix) else {
            return Step::Stop;
        };
        match rest.iter().position(|&b| b == b'/') {
            Some(i) => {
                let child = rest.get(..i).unwrap_or_default();
                if !child.is_empty() {
                    out.push(Entry {
                        name: child.into(),
                        kind: Kind::Dir,
                    });
                }
                // Skip the whole subtree with one reseek.
                past_subtree(key, prefix, child);
                Step::Seek
            }
            None => {
                if !rest.is_empty() {
                    out.push(Entry {
                        name: rest.into(),
                        kind: Kind::Ref,
                    });
                }
                Step::Next
            }
        }
    })?;
    finish_listing(out);
    Ok(())
}

/// Lists the immediate children of `logs/<prefix>` the same way over reflog names.
pub fn list_logs(
    src: &mut dyn RefSource,
    s: &mut Scratch,
    prefix: &[u8],
    out: &mut Vec<Entry>,
) -> Result<()> {
    s.key.clear();
    s.key.extend_from_slice(prefix);
    loop {
        if !src.first_log_at_or_after(&s.key, &mut s.name)? || !s.name.starts_with(prefix) {
            break;
        }
        let rest = s.name.get(prefix.len()..).unwrap_or_default();
        match rest.iter().position(|&b| b == b'/') {
            Some(i) => {
                let child = rest.get(..i).unwrap_or_default().to_vec();
                if !child.is_empty() {
                    out.push(Entry {
                        name: child.as_slice().into(),
                        kind: Kind::Dir,
                    });
                }
                past_subtree(&mut s.key, prefix, &child);
            }
            None => {
                if !rest.is_empty() {
                    out.push(Entry {
                        name: rest.into(),
                        kind: Kind::Log,
                    });
                }
                s.key.clear();
                s.key.extend_from_slice(&s.name);
                s.key.push(NEXT_NAME);
            }
        }
    }
    finish_listing(out);
    Ok(())
}

/// Sorts a listing once by name and resolves a name that is both a file and a directory
/// (a D/F conflict only a buggy writer can store) in favour of the file, as lookup does.
pub fn finish_listing(out: &mut Vec<Entry>) {
    out.sort_unstable_by(|a, b| a.name.cmp(&b.name).then_with(|| b.kind.cmp(&a.kind)));
    out.dedup_by(|later, earlier| later.name == earlier.name);
}

/// Lists any directory of the view. `path` must be a directory ([`classify`] said so).
pub fn list_dir(
    src: &mut dyn RefSource,
    s: &mut Scratch,
    path: &[u8],
    out: &mut Vec<Entry>,
) -> Result<()> {
    out.clear();
    match area(path) {
        Area::Root => {
            list_refs(src, s, b"", out)?;
            // Only root refs (and `refs/`) belong at the root; anything else a buggy writer
            // stored outside `refs/` is not shown.
            out.retain(|e| match e.kind {
                Kind::Dir => &*e.name == b"refs",
                _ => crate::refname::is_root_ref(&e.name),
            });
            for (name, kind) in [
                (&b"refs"[..], Kind::Dir),
                (b"logs", Kind::Dir),
                (b"packed-refs", Kind::PackedRefs),
            ] {
                if !out.iter().any(|e| &*e.name == name) {
                    out.push(Entry {
                        name: name.into(),
                        kind,
                    });
                }
            }
            finish_listing(out);
        }
        Area::Logs(None) => list_logs(src, s, b"", out)?,
        Area::Logs(Some(p)) => {
            let mut prefix = p.to_vec();
            prefix.push(b'/');
            list_logs(src, s, &prefix, out)?;
        }
        Area::Refs(p) => {
            let mut prefix = p.to_vec();
            prefix.push(b'/');
            list_refs(src, s, &prefix, out)?;
        }
        Area::PackedRefs => {}
    }
    Ok(())
}

/// Renders a ref value exactly as the files backend stores it: `<hex>\n` or `ref: <t>\n`.
/// A deletion renders as nothing.
pub fn render_ref(value: &RefValue, out: &mut Vec<u8>) {
    out.clear();
    match value {
        RefValue::Deletion => {}
        RefValue::Val1(id) | RefValue::Val2 { value: id, .. } => {
            id.write_hex(out);
            out.push(b'\n');
        }
        RefValue::Symref(target) => {
            out.extend_from_slice(b"ref: ");
            out.extend_from_slice(target);
            out.push(b'\n');
        }
    }
}

/// Whether a log record is git's "reflog exists" marker (no entry of its own).
pub fn is_existence_marker(rec: &LogRecord) -> bool {
    rec.old_id.is_null()
        && rec.new_id.is_null()
        && rec.name.is_empty()
        && rec.email.is_empty()
        && rec.time == 0
        && rec.tz_offset == 0
        && (rec.message.is_empty() || rec.message == b"\n")
}

/// Renders a whole reflog, oldest first, from records given newest first.
pub fn render_log(newest_first: &[LogRecord], hash: HashKind, out: &mut Vec<u8>) {
    out.clear();
    for rec in newest_first.iter().rev() {
        if !rec.deleted && !is_existence_marker(rec) {
            crate::files::render_reflog_line(rec, hash, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::ObjectId;
    use crate::fs::source::MemSource;

    fn id(n: u8) -> ObjectId {
        ObjectId::from_bytes(&[n; 20]).unwrap()
    }

    fn names(v: &[Entry]) -> Vec<(String, Kind)> {
        v.iter()
            .map(|e| (String::from_utf8_lossy(&e.name).into_owned(), e.kind))
            .collect()
    }

    /// A source that counts seeks, to prove listings skip subtrees.
    struct Counting(MemSource, usize);
    impl RefSource for Counting {
        fn hash_kind(&self) -> HashKind {
            HashKind::Sha1
        }
        fn reload(&mut self) -> Result<bool> {
            self.0.reload()
        }
        fn generation(&self) -> u64 {
            self.0.generation()
        }
        fn first_ref_at_or_after(&mut self, key: &[u8], out: &mut RefRecord) -> Result<bool> {
            self.1 += 1;
            self.0.first_ref_at_or_after(key, out)
        }
        fn first_log_at_or_after(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
            self.1 += 1;
            self.0.first_log_at_or_after(key, out)
        }
        fn read_log(&mut self, name: &[u8], out: &mut Vec<LogRecord>) -> Result<()> {
            self.0.read_log(name, out)
        }
    }

    fn sample() -> MemSource {
        let mut m = MemSource::new();
        m.set("HEAD", RefValue::Symref(b"refs/heads/main".to_vec()));
        m.set("ORIG_HEAD", RefValue::Val1(id(9)));
        m.set("refs/heads/main", RefValue::Val1(id(1)));
        m.set("refs/heads/a-b", RefValue::Val1(id(2)));
        m.set("refs/heads/a/x", RefValue::Val1(id(3)));
        m.set("refs/heads/a/y/z", RefValue::Val1(id(3)));
        m.set("refs/heads/a.c", RefValue::Val1(id(3)));
        m.set(
            "refs/tags/v1",
            RefValue::Val2 {
                value: id(4),
                peeled: id(1),
            },
        );
        m.add_log(LogRecord {
            refname: b"HEAD".to_vec(),
            update_index: 1,
            new_id: id(1),
            name: b"A U Thor".to_vec(),
            email: b"a@b".to_vec(),
            time: 1700000000,
            tz_offset: -700,
            message: b"commit (initial): one\n".to_vec(),
            ..Default::default()
        });
        m.add_log(LogRecord {
            refname: b"HEAD".to_vec(),
            update_index: 2,
            old_id: id(1),
            new_id: id(2),
            name: b"A U Thor".to_vec(),
            email: b"a@b".to_vec(),
            time: 1700000100,
            tz_offset: 130,
            message: b"\n".to_vec(),
            ..Default::default()
        });
        m.add_log(LogRecord {
            refname: b"refs/heads/a/x".to_vec(),
            update_index: 1,
            ..Default::default()
        });
        m
    }

    #[test]
    fn classify_paths() {
        let mut m = sample();
        let mut s = Scratch::default();
        let c = |m: &mut MemSource, s: &mut Scratch, p: &str| classify(m, s, p.as_bytes()).unwrap();
        assert_eq!(c(&mut m, &mut s, ""), Some(Kind::Dir));
        assert_eq!(c(&mut m, &mut s, "HEAD"), Some(Kind::Ref));
        assert_eq!(c(&mut m, &mut s, "refs"), Some(Kind::Dir));
        assert_eq!(c(&mut m, &mut s, "refs/heads"), Some(Kind::Dir));
        assert_eq!(c(&mut m, &mut s, "refs/heads/a"), Some(Kind::Dir));
        assert_eq!(c(&mut m, &mut s, "refs/heads/a/x"), Some(Kind::Ref));
        assert_eq!(c(&mut m, &mut s, "refs/heads/a/x/q"), None);
        assert_eq!(c(&mut m, &mut s, "refs/heads/mai"), None);
        assert_eq!(c(&mut m, &mut s, "refs/remotes"), None);
        assert_eq!(c(&mut m, &mut s, "FETCH_HEAD"), None);
        assert_eq!(c(&mut m, &mut s, "logs"), Some(Kind::Dir));
        assert_eq!(c(&mut m, &mut s, "logs/HEAD"), Some(Kind::Log));
        assert_eq!(c(&mut m, &mut s, "logs/refs/heads"), Some(Kind::Dir));
        assert_eq!(c(&mut m, &mut s, "logs/refs/heads/a/x"), Some(Kind::Log));
        assert_eq!(c(&mut m, &mut s, "logs/refs/heads/main"), None);
        assert_eq!(c(&mut m, &mut s, "packed-refs"), Some(Kind::PackedRefs));
    }

    #[test]
    fn listing_skips_subtrees_and_sorts() {
        let mut m = sample();
        for i in 0..1000 {
            m.set(&format!("refs/heads/a/y/many{i}"), RefValue::Val1(id(5)));
        }
        let mut c = Counting(m, 0);
        let mut s = Scratch::default();
        let mut out = Vec::new();
        list_dir(&mut c, &mut s, b"refs/heads", &mut out).unwrap();
        assert_eq!(
            names(&out),
            vec![
                ("a".into(), Kind::Dir),
                ("a-b".into(), Kind::Ref),
                ("a.c".into(), Kind::Ref),
                ("main".into(), Kind::Ref)
            ]
        );
        // One seek per child plus the final one, not one per ref below.
        assert!(c.1 <= 5, "{} seeks", c.1);
        list_dir(&mut c, &mut s, b"refs/heads/a", &mut out).unwrap();
        assert_eq!(
            names(&out),
            vec![("x".into(), Kind::Ref), ("y".into(), Kind::Dir)]
        );
    }

    #[test]
    fn root_and_logs_listing() {
        let mut m = sample();
        let mut s = Scratch::default();
        let mut out = Vec::new();
        list_dir(&mut m, &mut s, b"", &mut out).unwrap();
        assert_eq!(
            names(&out),
            vec![
                ("HEAD".into(), Kind::Ref),
                ("ORIG_HEAD".into(), Kind::Ref),
                ("logs".into(), Kind::Dir),
                ("packed-refs".into(), Kind::PackedRefs),
                ("refs".into(), Kind::Dir)
            ]
        );
        list_dir(&mut m, &mut s, b"logs", &mut out).unwrap();
        assert_eq!(
            names(&out),
            vec![("HEAD".into(), Kind::Log), ("refs".into(), Kind::Dir)]
        );
        list_dir(&mut m, &mut s, b"logs/refs/heads/a", &mut out).unwrap();
        assert_eq!(names(&out), vec![("x".into(), Kind::Log)]);
    }

    #[test]
    fn compact_listing_round_trips() {
        let entries = vec![
            Entry {
                name: b"a".as_slice().into(),
                kind: Kind::Dir,
            },
            Entry {
                name: b"main".as_slice().into(),
                kind: Kind::Ref,
            },
            Entry {
                name: b"x.lock".as_slice().into(),
                kind: Kind::Scratch,
            },
        ];
        let l = Listing::from_entries(&entries);
        assert_eq!(l.len(), 3);
        assert_eq!(l.get(1), Some((&b"main"[..], Kind::Ref)));
        assert_eq!(l.get(3), None);
        assert_eq!(l.to_entries(), entries);
        assert!(Listing::from_entries(&[]).is_empty());
    }

    #[test]
    fn df_conflict_in_store_prefers_file() {
        let mut m = MemSource::new();
        m.set("refs/heads/x", RefValue::Val1(id(1)));
        m.set("refs/heads/x/y", RefValue::Val1(id(1)));
        let mut s = Scratch::default();
        let mut out = Vec::new();
        list_dir(&mut m, &mut s, b"refs/heads", &mut out).unwrap();
        assert_eq!(names(&out), vec![("x".into(), Kind::Ref)]);
        assert_eq!(
            classify(&mut m, &mut s, b"refs/heads/x").unwrap(),
            Some(Kind::Ref)
        );
    }

    #[test]
    fn renders_refs_and_logs_like_files_backend() {
        let mut out = Vec::new();
        render_ref(&RefValue::Val1(id(0xab)), &mut out);
        assert_eq!(out, format!("{}\n", "ab".repeat(20)).as_bytes());
        render_ref(
            &RefValue::Val2 {
                value: id(1),
                peeled: id(2),
            },
            &mut out,
        );
        assert_eq!(out, format!("{}\n", "01".repeat(20)).as_bytes());
        render_ref(&RefValue::Symref(b"refs/heads/main".to_vec()), &mut out);
        assert_eq!(out, b"ref: refs/heads/main\n");

        let mut m = sample();
        let mut logs = Vec::new();
        m.read_log(b"HEAD", &mut logs).unwrap();
        render_log(&logs, HashKind::Sha1, &mut out);
        let want = format!(
            "{z} {one} A U Thor <a@b> 1700000000 -0700\tcommit (initial): one\n{one} {two} A U Thor <a@b> 1700000100 +0130\n",
            z = "0".repeat(40),
            one = "01".repeat(20),
            two = "02".repeat(20)
        );
        assert_eq!(String::from_utf8(out.clone()).unwrap(), want);
        // An existence marker alone renders as an empty (existing) reflog.
        m.read_log(b"refs/heads/a/x", &mut logs).unwrap();
        render_log(&logs, HashKind::Sha1, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn corrupt_source_is_an_error_not_a_panic() {
        let mut m = sample();
        m.fail = true;
        let mut s = Scratch::default();
        let err = classify(&mut m, &mut s, b"refs/heads/main").unwrap_err();
        assert_eq!(err.errno(), libc::EIO);
    }
}
