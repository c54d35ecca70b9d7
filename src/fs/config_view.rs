//! The repository's `config` as the mount serves it: without `extensions.refStorage`, so
//! that tools which know only the files backend (git 2.39, libgit2, dulwich, …) open the
//! repository; and a config written through the mount put back with the extension (and
//! `core.repositoryformatversion`) of the real one, so git 2.47 still finds the reftable
//! stack. Pure functions over bytes; the file handling is in `passthrough.rs`.

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

/// `raw` without its `extensions.refStorage` entries (every other byte kept).
pub fn served(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut section = String::new();
    for line in lines(raw) {
        match classify(line) {
            Line::Header(name, rest) => {
                section = name;
                match rest {
                    Some(at)
                        if is_refstorage(&section, &key_of(line.get(at..).unwrap_or_default())) =>
                    {
                        out.extend_from_slice(line.get(..at).unwrap_or_default());
                        out.push(b'\n');
                    }
                    _ => out.extend_from_slice(line),
                }
            }
            Line::Key(key) if is_refstorage(&section, &key) => {}
            _ => out.extend_from_slice(line),
        }
    }
    out
}

/// The lines of `config` that set `section.key` (whole lines, with their `\n`).
fn setting_lines<'a>(config: &'a [u8], want_section: &str, want_key: &str) -> Vec<&'a [u8]> {
    let mut section = String::new();
    let mut found = Vec::new();
    for line in lines(config) {
        match classify(line) {
            Line::Header(name, _) => section = name,
            Line::Key(key) if section == want_section && key == want_key => found.push(line),
            _ => {}
        }
    }
    found
}

/// The config to store when a client wrote `written` through the mount and the real one
/// is `original`: `written` with its `extensions.refStorage` and
/// `core.repositoryformatversion` lines replaced by those of `original` (inserted at the
/// top of the first `[extensions]` / `[core]` section, or in a new section at the end).
/// A client that drops or changes either cannot turn the repository away from reftable.
pub fn restored(written: &[u8], original: &[u8]) -> Vec<u8> {
    let keep_ext = setting_lines(original, "extensions", "refstorage");
    let keep_ver = setting_lines(original, "core", "repositoryformatversion");
    let mut out = Vec::with_capacity(written.len() + 64);
    let mut section = String::new();
    let (mut ext_done, mut ver_done) = (keep_ext.is_empty(), keep_ver.is_empty());
    for line in lines(written) {
        match classify(line) {
            Line::Header(name, rest) => {
                section = name;
                let header = match rest {
                    Some(at) => line.get(..at).unwrap_or_default(),
                    None => line,
                };
                out.extend_from_slice(header);
                if !out.ends_with(b"\n") {
                    out.push(b'\n');
                }
                if section == "extensions" && !ext_done {
                    push_lines(&mut out, &keep_ext);
                    ext_done = true;
                }
                if section == "core" && !ver_done {
                    push_lines(&mut out, &keep_ver);
                    ver_done = true;
                }
                if let Some(at) = rest {
                    let tail = line.get(at..).unwrap_or_default();
                    if !is_kept(&section, &key_of(tail)) {
                        out.extend_from_slice(tail);
                    }
                }
            }
            Line::Key(key) if is_kept(&section, &key) => {}
            _ => out.extend_from_slice(line),
        }
    }
    if !ver_done {
        if !out.is_empty() && !out.ends_with(b"\n") {
            out.push(b'\n');
        }
        out.extend_from_slice(b"[core]\n");
        push_lines(&mut out, &keep_ver);
    }
    if !ext_done {
        if !out.is_empty() && !out.ends_with(b"\n") {
            out.push(b'\n');
        }
        out.extend_from_slice(b"[extensions]\n");
        push_lines(&mut out, &keep_ext);
    }
    out
}

fn is_kept(section: &str, key: &str) -> bool {
    is_refstorage(section, key) || (section == "core" && key == "repositoryformatversion")
}

fn push_lines(out: &mut Vec<u8>, lines: &[&[u8]]) {
    for l in lines {
        out.extend_from_slice(l);
        if !l.ends_with(b"\n") {
            out.push(b'\n');
        }
    }
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

    #[test]
    fn restored_keeps_the_extension_whatever_the_client_wrote() {
        // Dropped with its section.
        let written = b"[core]\n\trepositoryformatversion = 1\n";
        assert_eq!(
            restored(written, INIT),
            b"[core]\n\trepositoryformatversion = 1\n[extensions]\n\trefStorage = reftable\n"
                .to_vec()
        );
        // Changed to files, and the format version lowered.
        let written =
            b"[core]\n\trepositoryformatversion = 0\n[extensions]\n\trefstorage = files\n";
        assert_eq!(
            restored(written, INIT),
            b"[core]\n\trepositoryformatversion = 1\n[extensions]\n\trefStorage = reftable\n"
                .to_vec()
        );
        // Empty.
        assert_eq!(
            restored(b"", INIT),
            b"[core]\n\trepositoryformatversion = 1\n[extensions]\n\trefStorage = reftable\n"
                .to_vec()
        );
    }
}
