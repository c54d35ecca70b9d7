//! The repository's `config` as the mount serves it: without `extensions.refStorage`, so
//! that tools which know only the files backend (git 2.39, libgit2, dulwich, …) open the
//! repository; and a config written through the mount put back with the extension (and
//! the `core.repositoryformatversion` it needs) of the real one, so git 2.47 still finds
//! the reftable stack. Pure functions over bytes; the file handling is in
//! `passthrough/config.rs`.
//!
//! The two are inverse: whatever a client writes, [`served`] of what [`restored`] stores
//! is what it wrote (less any `refStorage` line of its own, which is never stored), so a
//! client reads back its own bytes. Where the client's text has no plain `[extensions]`
//! header, or sets another format version than the repository needs, the lines git 2.47
//! needs go into sections of their own at the end, each header marked with [`MARK`],
//! which [`served`] leaves out. A config removed through the mount is stored as
//! [`TOMBSTONE`] and those sections only ([`removed`]): the repository stays one for git
//! 2.47, and the mount shows no `config` ([`is_removed`]).

/// The comment on the header of a section the mount added to GITDIR's config; such a
/// section's `refStorage` / `repositoryformatversion` lines (and the header, when nothing
/// else is in it) are not served.
pub const MARK: &str = "# reftablefs: kept for git 2.47, not shown through the mount";

/// Added after [`MARK`] when the client's text before the section did not end with a
/// newline: the one the mount put before the header is not served either.
const JOINED: &str = "; no newline before";

/// The first line of GITDIR's config after `rm config` through the mount: with nothing
/// else served, the mount shows no `config`.
pub const TOMBSTONE: &str =
    "# reftablefs: config removed through the mount; git 2.47 needs the lines below";

/// What the repository needs when its config says nothing: the mount serves a reftable
/// stack.
const DEFAULT_VERSION: &[u8] = b"\trepositoryformatversion = 1\n";
const DEFAULT_EXT: &[u8] = b"\trefStorage = reftable\n";

/// What one line of a config file is, as far as these two keys are concerned.
#[derive(Debug, PartialEq, Eq)]
enum Line<'a> {
    /// `[section]` or `[section "sub"]`: the lowercased section name, and the byte offset
    /// where a key on the same line starts (`[extensions] refStorage = x`), if any.
    Header(String, Option<usize>),
    /// `key = value` (or `key` alone): the lowercased key.
    Key(String),
    /// A comment, a blank line or anything else.
    Other(&'a [u8]),
}

fn key_of(s: &[u8]) -> String {
    let s = trim_start(s);
    let end = s
        .iter()
        .position(|&b| !(b.is_ascii_alphanumeric() || b == b'-'))
        .unwrap_or(s.len());
    String::from_utf8_lossy(s.get(..end).unwrap_or_default()).to_ascii_lowercase()
}

fn trim_start(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|b| b.is_ascii_whitespace()).count();
    s.get(n..).unwrap_or_default()
}

fn classify(line: &[u8]) -> Line<'_> {
    let t = trim_start(line);
    match t.first() {
        Some(b'[') => {
            let body = t.get(1..).unwrap_or_default();
            let end = body
                .iter()
                .position(|&b| b == b']' || b == b'"' || b.is_ascii_whitespace())
                .unwrap_or(body.len());
            let name =
                String::from_utf8_lossy(body.get(..end).unwrap_or_default()).to_ascii_lowercase();
            let rest_at = body.iter().position(|&b| b == b']').map(|p| {
                let off = line.len() - t.len() + 1 + p + 1;
                off + line
                    .get(off..)
                    .unwrap_or_default()
                    .iter()
                    .take_while(|b| b.is_ascii_whitespace())
                    .count()
            });
            let rest_at = rest_at.filter(|&o| {
                line.get(o..)
                    .is_some_and(|r| r.first().is_some_and(|b| b.is_ascii_alphabetic()))
            });
            Line::Header(name, rest_at)
        }
        Some(b) if b.is_ascii_alphabetic() => Line::Key(key_of(t)),
        _ => Line::Other(line),
    }
}

/// Splits into lines, each with its `\n` (the last may lack one).
fn lines(content: &[u8]) -> impl Iterator<Item = &[u8]> {
    content.split_inclusive(|&b| b == b'\n')
}

fn is_refstorage(section: &str, key: &str) -> bool {
    section == "extensions" && key == "refstorage"
}

/// Whether `line` is the header of a section the mount added (ends with [`MARK`], or
/// with [`MARK`] and [`JOINED`]); if so, the header without its mark (`[core]\n`) and
/// whether the newline before it is the mount's.
fn marked_header(line: &[u8]) -> Option<(Vec<u8>, bool)> {
    let t = line.trim_ascii();
    if !t.starts_with(b"[") {
        return None;
    }
    let joined = t.ends_with(JOINED.as_bytes());
    let t = if joined {
        t.get(..t.len() - JOINED.len()).unwrap_or_default()
    } else {
        t
    };
    if !t.ends_with(MARK.as_bytes()) {
        return None;
    }
    let head = t
        .get(..t.len() - MARK.len())
        .unwrap_or_default()
        .trim_ascii_end();
    let mut h = head.to_vec();
    h.push(b'\n');
    Some((h, joined))
}

fn is_tombstone(line: &[u8]) -> bool {
    line.trim_ascii() == TOMBSTONE.as_bytes()
}

/// `raw` as the mount serves it: without its `extensions.refStorage` entries, the
/// sections the mount added (their kept lines; their header when nothing else is in
/// them) and the [`TOMBSTONE`] line; every other byte kept.
pub fn served(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut section = String::new();
    let mut marked = false;
    // A marked section's header, shown only if the section holds something else.
    let mut pending: Option<Vec<u8>> = None;
    // The newline the mount put before a marked header ([`JOINED`]) was taken off the
    // end of `out`: it goes back if anything is shown after it.
    let mut owed = false;
    let emit = |out: &mut Vec<u8>, owed: &mut bool, bytes: &[u8]| {
        if std::mem::take(owed) {
            out.push(b'\n');
        }
        out.extend_from_slice(bytes);
    };
    for line in lines(raw) {
        if is_tombstone(line) {
            continue;
        }
        match classify(line) {
            Line::Header(name, rest) => {
                pending = None;
                section = name;
                if let Some((h, joined)) = marked_header(line) {
                    marked = true;
                    if joined && !owed && out.ends_with(b"\n") {
                        // The newline the mount added: not the client's.
                        out.pop();
                        owed = true;
                    }
                    pending = Some(h);
                    continue;
                }
                marked = false;
                match rest {
                    Some(at)
                        if is_refstorage(&section, &key_of(line.get(at..).unwrap_or_default())) =>
                    {
                        emit(&mut out, &mut owed, line.get(..at).unwrap_or_default());
                        out.push(b'\n');
                    }
                    _ => emit(&mut out, &mut owed, line),
                }
            }
            Line::Key(key) if is_refstorage(&section, &key) => {}
            Line::Key(key) if marked && is_version(&section, &key) => {}
            _ => {
                if let Some(h) = pending.take() {
                    emit(&mut out, &mut owed, &h);
                }
                emit(&mut out, &mut owed, line);
            }
        }
    }
    out
}

/// Whether GITDIR's config `raw` is one the mount removed ([`removed`]) and nothing has
/// been written to since: the mount shows no `config`.
pub fn is_removed(raw: &[u8]) -> bool {
    lines(raw).any(is_tombstone) && served(raw).is_empty()
}

/// The last line of `config` that sets `section.key` (a whole line, with its `\n`).
fn last_setting<'a>(config: &'a [u8], want_section: &str, want_key: &str) -> Option<&'a [u8]> {
    let mut section = String::new();
    let mut found = None;
    for line in lines(config) {
        match classify(line) {
            Line::Header(name, _) => section = name,
            Line::Key(key) if section == want_section && key == want_key => found = Some(line),
            _ => {}
        }
    }
    found
}

/// The integer a `key = value` line sets, when it is a plain decimal (a comment after it
/// allowed); anything else is `None`, which the caller takes for "not the same".
fn int_value(line: &[u8]) -> Option<i64> {
    let eq = line.iter().position(|&b| b == b'=')?;
    let v = line.get(eq + 1..)?;
    let v = v.trim_ascii();
    let end = v
        .iter()
        .position(|&b| b == b'#' || b == b';')
        .unwrap_or(v.len());
    std::str::from_utf8(v.get(..end)?.trim_ascii())
        .ok()?
        .parse()
        .ok()
}

/// What the repository needs of its config, from GITDIR's `original`: its (last)
/// `refStorage` line and its (last) `core.repositoryformatversion` line, or the values a
/// reftable repository needs where it has none.
fn kept(original: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let line = |l: Option<&[u8]>, default: &[u8]| {
        let mut v = l.unwrap_or(default).to_vec();
        if !v.ends_with(b"\n") {
            v.push(b'\n');
        }
        v
    };
    (
        line(
            last_setting(original, "extensions", "refstorage"),
            DEFAULT_EXT,
        ),
        line(
            last_setting(original, "core", "repositoryformatversion"),
            DEFAULT_VERSION,
        ),
    )
}

fn push_marked(out: &mut Vec<u8>, section: &str, line: &[u8]) {
    let joined = if !out.is_empty() && !out.ends_with(b"\n") {
        out.push(b'\n');
        JOINED
    } else {
        ""
    };
    out.extend_from_slice(format!("[{section}] {MARK}{joined}\n").as_bytes());
    out.extend_from_slice(line);
}

/// The config to store when a client wrote `written` through the mount and GITDIR's is
/// `original`: `written` without `refStorage` lines of its own, with the repository's
/// `refStorage` line (from `original`) after its first plain `[extensions]` header, and
/// the repository's `core.repositoryformatversion` unless `written` already sets the
/// same; what has no place in `written` goes into sections of its own at the end, marked
/// [`MARK`] (and `JOINED` when `written` does not end with a newline). [`served`] of
/// the result is [`served`] of `written` (`written` itself when it had no `refStorage`
/// line). A client that drops or changes either line cannot turn the repository away
/// from reftable.
pub fn restored(written: &[u8], original: &[u8]) -> Vec<u8> {
    let (ext, ver) = kept(original);
    let body = served(written);
    let mut out = Vec::with_capacity(body.len() + 2 * MARK.len() + 64);
    let mut ext_done = false;
    for line in lines(&body) {
        out.extend_from_slice(line);
        if ext_done {
            continue;
        }
        if let Line::Header(name, None) = classify(line) {
            if name == "extensions" && line.ends_with(b"\n") {
                out.extend_from_slice(&ext);
                ext_done = true;
            }
        }
    }
    let has = last_setting(&body, "core", "repositoryformatversion");
    let same_version = match (has, int_value(&ver)) {
        (Some(w), Some(v)) => int_value(w) == Some(v),
        _ => false,
    };
    if !same_version {
        push_marked(&mut out, "core", &ver);
    }
    if !ext_done {
        push_marked(&mut out, "extensions", &ext);
    }
    out
}

/// GITDIR's config after `rm config` through the mount: the [`TOMBSTONE`] and the
/// repository's own lines (`kept`) in marked sections, so that git 2.47 still reads a
/// reftable repository and the mount shows no `config`.
pub fn removed(original: &[u8]) -> Vec<u8> {
    let (ext, ver) = kept(original);
    let mut out = Vec::with_capacity(TOMBSTONE.len() + 2 * MARK.len() + 64);
    out.extend_from_slice(TOMBSTONE.as_bytes());
    out.push(b'\n');
    push_marked(&mut out, "core", &ver);
    push_marked(&mut out, "extensions", &ext);
    out
}

/// Whether a client's `written` config holds lines the mount does not store as written:
/// a `refStorage` of its own (or a marked section copied from GITDIR).
pub fn sets_extension(written: &[u8]) -> bool {
    served(written) != written
}

fn is_version(section: &str, key: &str) -> bool {
    section == "core" && key == "repositoryformatversion"
}

#[cfg(test)]
mod tests {
    use super::*;

    const INIT: &[u8] = b"[core]\n\trepositoryformatversion = 1\n\tfilemode = true\n\tbare = false\n[extensions]\n\trefStorage = reftable\n";

    #[test]
    fn served_drops_only_the_extension() {
        assert_eq!(
            served(INIT),
            b"[core]\n\trepositoryformatversion = 1\n\tfilemode = true\n\tbare = false\n[extensions]\n".to_vec()
        );
        // Other extensions and sections stay; spelling and case of the key do not matter.
        let raw = b"[extensions]\n\tobjectFormat = sha256\n  REFSTORAGE=reftable\n[remote \"o\"]\n\trefstorage = x\n";
        assert_eq!(
            served(raw),
            b"[extensions]\n\tobjectFormat = sha256\n[remote \"o\"]\n\trefstorage = x\n".to_vec()
        );
        // A key on the header's line.
        assert_eq!(
            served(b"[extensions] refStorage = reftable\n[core]\n"),
            b"[extensions] \n[core]\n".to_vec()
        );
        // Nothing to drop: unchanged, even without a final newline.
        assert_eq!(
            served(b"[core]\n\tbare = true"),
            b"[core]\n\tbare = true".to_vec()
        );
    }

    #[test]
    fn restored_round_trips_a_client_edit() {
        // git config through the mount: the client read `served` and appended a section.
        let mut written = served(INIT);
        written.extend_from_slice(b"[user]\n\tname = x\n");
        let mut want = INIT.to_vec();
        want.extend_from_slice(b"[user]\n\tname = x\n");
        assert_eq!(restored(&written, INIT), want);
        // Unchanged content comes back byte for byte.
        assert_eq!(restored(&served(INIT), INIT), INIT.to_vec());
    }

    fn marked(section: &str, line: &str) -> String {
        format!("[{section}] {MARK}\n{line}")
    }

    #[test]
    fn restored_keeps_the_extension_whatever_the_client_wrote() {
        let ver = marked("core", "\trepositoryformatversion = 1\n");
        let ext = marked("extensions", "\trefStorage = reftable\n");
        // Dropped with its section: a marked one at the end.
        let written = b"[core]\n\trepositoryformatversion = 1\n";
        assert_eq!(
            String::from_utf8_lossy(&restored(written, INIT)),
            format!("[core]\n\trepositoryformatversion = 1\n{ext}")
        );
        // Changed to files, and the format version lowered: the client's own lines stay
        // (it reads them back), the repository's come after them.
        let written =
            b"[core]\n\trepositoryformatversion = 0\n[extensions]\n\trefstorage = files\n";
        assert_eq!(
            String::from_utf8_lossy(&restored(written, INIT)),
            format!(
                "[core]\n\trepositoryformatversion = 0\n[extensions]\n\trefStorage = reftable\n{ver}"
            )
        );
        // Empty.
        assert_eq!(
            String::from_utf8_lossy(&restored(b"", INIT)),
            format!("{ver}{ext}")
        );
        // An original without either (removed outside the mount): a reftable repository's.
        assert_eq!(
            String::from_utf8_lossy(&restored(b"[a]\n\tb = c\n", b"")),
            format!("[a]\n\tb = c\n{ver}{ext}")
        );
    }

    /// Whatever a client writes, it reads back what it wrote (less a `refStorage` of its
    /// own), and git 2.47 reads the repository's extension and format version.
    #[test]
    fn a_client_reads_back_what_it_wrote() {
        let cases: &[&[u8]] = &[
            b"",
            b"\n",
            b"[section]\n\tpenguin = little blue\n",
            b"[core]\n\tbare = false\n",
            b"[core]\n\trepositoryformatversion = 0\n",
            b"[core]\n\trepositoryformatversion = 1 ; one\n",
            b"[extensions]\n",
            b"[extensions]",
            b"[extensions] objectFormat = sha1\n",
            b"[extensions]\n\tobjectFormat = sha1\n[extensions]\n",
            b"[beta] ; silly comment # another comment\nnoIndent= sillyValue ; 'nother\n\n# empty line\n\t\t; comment\n[nextSection] noNewline = ouch\n",
            b"[alpha]\nbar = foo\n[beta]\nbaz = multiple \\\nlines\nfoo = bar\n",
            b"[path]bool\n",
            b"[core]\n\trepositoryformatversion = 1\n\tfilemode = true\n[extensions]\n",
        ];
        for original in [INIT, &removed(INIT)[..], b"" as &[u8]] {
            for &w in cases {
                let stored = restored(w, original);
                // Exactly what was written, a last line without a newline included.
                let want = w.to_vec();
                assert_eq!(
                    String::from_utf8_lossy(&served(&stored)),
                    String::from_utf8_lossy(&want),
                    "written {:?} over {:?}",
                    String::from_utf8_lossy(w),
                    String::from_utf8_lossy(original)
                );
                assert!(!is_removed(&stored));
                // What git 2.47 reads: the last version line is 1, the extension is set.
                let ver = last_setting(&stored, "core", "repositoryformatversion");
                assert_eq!(ver.and_then(int_value), Some(1), "{stored:?}");
                assert_eq!(
                    last_setting(&stored, "extensions", "refstorage"),
                    Some(&b"\trefStorage = reftable\n"[..]),
                    "{:?}",
                    String::from_utf8_lossy(&stored)
                );
                // Written again unchanged: served the same.
                let again = restored(&served(&stored), &stored);
                assert_eq!(served(&again), served(&stored));
                if w.ends_with(b"\n") {
                    assert_eq!(again, stored);
                }
            }
        }
    }

    /// A last line without a newline reads back without one; a section git 2.47 adds
    /// after the mount's own sections reads back on a line of its own.
    #[test]
    fn a_last_line_without_a_newline_stays_so() {
        let stored = restored(b"[A]", INIT);
        assert_eq!(served(&stored), b"[A]".to_vec());
        let mut more = stored.clone();
        more.extend_from_slice(b"[foo]\n\tx = 1\n");
        assert_eq!(
            String::from_utf8_lossy(&served(&more)),
            "[A]\n[foo]\n\tx = 1\n"
        );
        let mut inside = stored;
        inside.extend_from_slice(b"\tfoo = bar\n");
        assert_eq!(
            String::from_utf8_lossy(&served(&inside)),
            "[A]\n[extensions]\n\tfoo = bar\n"
        );
    }

    #[test]
    fn a_removed_config_is_served_as_none_and_keeps_the_extension() {
        let gone = removed(INIT);
        assert!(is_removed(&gone));
        assert!(served(&gone).is_empty());
        assert_eq!(
            last_setting(&gone, "extensions", "refstorage"),
            Some(&b"\trefStorage = reftable\n"[..])
        );
        assert_eq!(
            last_setting(&gone, "core", "repositoryformatversion"),
            Some(&b"\trepositoryformatversion = 1\n"[..])
        );
        // Removed twice: the same.
        assert_eq!(removed(&gone), gone);
        // git 2.47 adds a key outside the mount: the config is back, with that key under
        // its section's header.
        let mut more = gone.clone();
        more.extend_from_slice(b"\tfoo = bar\n");
        assert!(!is_removed(&more));
        assert_eq!(served(&more), b"[extensions]\n\tfoo = bar\n".to_vec());
        // An empty config written through the mount is there, and empty.
        let empty = restored(b"", &gone);
        assert!(!is_removed(&empty) && served(&empty).is_empty());
        // A config that only has a comment is not removed.
        assert!(!is_removed(b"# hello\n"));
        assert!(sets_extension(INIT) && !sets_extension(&served(INIT)));
    }
}
