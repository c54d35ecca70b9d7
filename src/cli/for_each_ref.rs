//! `reftablefs for-each-ref [--format=FORMAT] [--count=N] [PATTERN...]`: git's
//! `for-each-ref` over `refs/`, in name order, with symrefs resolved and dangling ones
//! skipped (as git does).
//!
//! Format atoms supported: `%(refname)`, `%(refname:short)`, `%(objectname)`, `%(objectname:short)`
//! (7 hex digits, no uniqueness check), `%(objecttype)`, `%(symref)`, `%(*objectname)`,
//! `%(*objecttype)`, `%(HEAD)`, plus `%%` and `%xx` escapes. Other atoms are refused
//! ("unknown field name"). The default format is git's,
//! `%(objectname) %(objecttype)<TAB>%(refname)`. Object types are not a ref-store
//! matter: only when the format asks for them, loose objects' headers are read
//! in-process and the rest come from one `git cat-file --batch-check` run.
//!
//! Patterns: a ref matches when it equals the pattern, starts with it up to a `/`, or
//! matches it as a glob (`*`, `?`; `*` does not cross `/`).

use std::os::unix::ffi::OsStrExt;
use std::process::ExitCode;

use reftablefs::format::ObjectId;
use reftablefs::{Error, Result};

use super::common::{self, for_each_resolved, Out};
use super::table::Id;
use super::{objects, Args};
use reftablefs::resolve::{resolve, Resolved};

const DEFAULT_FORMAT: &str = "%(objectname) %(objecttype)\t%(refname)";

/// One piece of a compiled format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    Lit(Vec<u8>),
    RefName,
    RefNameShort,
    ObjectName,
    ObjectNameShort,
    ObjectType,
    Symref,
    PeeledName,
    PeeledType,
    Head,
}

/// Compiles a `--format` string.
pub fn compile(b: &[u8]) -> Result<Vec<Piece>> {
    let mut out = Vec::new();
    let mut lit = Vec::new();
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        if c != b'%' {
            lit.push(c);
            i += 1;
            continue;
        }
        match b.get(i + 1) {
            Some(b'%') => {
                lit.push(b'%');
                i += 2;
            }
            Some(b'(') => {
                let close = b
                    .get(i + 2..)
                    .and_then(|r| r.iter().position(|&x| x == b')'))
                    .ok_or_else(|| {
                        Error::Transaction(format!(
                            "malformed format string {}",
                            String::from_utf8_lossy(b)
                        ))
                    })?;
                let atom = b.get(i + 2..i + 2 + close).unwrap_or_default();
                let atom = String::from_utf8_lossy(atom);
                let piece = match &*atom {
                    "refname" => Piece::RefName,
                    "refname:short" => Piece::RefNameShort,
                    "objectname" => Piece::ObjectName,
                    "objectname:short" => Piece::ObjectNameShort,
                    "objecttype" => Piece::ObjectType,
                    "symref" => Piece::Symref,
                    "*objectname" => Piece::PeeledName,
                    "*objecttype" => Piece::PeeledType,
                    "HEAD" => Piece::Head,
                    other => {
                        return Err(Error::Transaction(format!("unknown field name: {other}")))
                    }
                };
                if !lit.is_empty() {
                    out.push(Piece::Lit(std::mem::take(&mut lit)));
                }
                out.push(piece);
                i += close + 3;
            }
            _ => {
                let hex = b
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok());
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        lit.push(v);
                        i += 3;
                    }
                    None => {
                        lit.push(b'%');
                        i += 1;
                    }
                }
            }
        }
    }
    if !lit.is_empty() {
        out.push(Piece::Lit(lit));
    }
    Ok(out)
}

/// `*` and `?` glob where `*` does not match `/`.
pub fn glob(pattern: &[u8], name: &[u8]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some((b'*', rest)) => {
            let mut i = 0;
            loop {
                if glob(rest, name.get(i..).unwrap_or_default()) {
                    return true;
                }
                match name.get(i) {
                    Some(b'/') | None => return false,
                    Some(_) => i += 1,
                }
            }
        }
        Some((b'?', rest)) => match name.split_first() {
            Some((c, nrest)) if *c != b'/' => glob(rest, nrest),
            _ => false,
        },
        Some((c, rest)) => match name.split_first() {
            Some((n, nrest)) if n == c => glob(rest, nrest),
            _ => false,
        },
    }
}

/// git's `match_name_as_path`.
pub fn pattern_matches(pattern: &[u8], name: &[u8]) -> bool {
    if glob(pattern, name) {
        return true;
    }
    name.starts_with(pattern)
        && (name.len() == pattern.len()
            || pattern.ends_with(b"/")
            || name.get(pattern.len()) == Some(&b'/'))
}

/// The literal part of a pattern before any glob character.
fn literal_prefix(p: &[u8]) -> &[u8] {
    let end = p
        .iter()
        .position(|&c| matches!(c, b'*' | b'?' | b'[' | b'\\'))
        .unwrap_or(p.len());
    p.get(..end).unwrap_or_default()
}

struct Row {
    name: Vec<u8>,
    id: ObjectId,
    peeled: Option<ObjectId>,
    symref: Option<Vec<u8>>,
    short: Option<Vec<u8>>,
}

fn render(
    pieces: &[Piece],
    row: &Row,
    types: Option<(&str, &str)>,
    head: Option<&[u8]>,
    line: &mut Vec<u8>,
) {
    for p in pieces {
        match p {
            Piece::Lit(l) => line.extend_from_slice(l),
            Piece::RefName => line.extend_from_slice(&row.name),
            Piece::RefNameShort => {
                line.extend_from_slice(row.short.as_deref().unwrap_or(&row.name))
            }
            Piece::ObjectName => row.id.write_hex(line),
            Piece::ObjectNameShort => {
                let at = line.len();
                row.id.write_hex(line);
                line.truncate(at + 7);
            }
            Piece::ObjectType => line.extend_from_slice(types.map_or("", |t| t.0).as_bytes()),
            Piece::Symref => line.extend_from_slice(row.symref.as_deref().unwrap_or_default()),
            Piece::PeeledName => {
                if let Some(p) = &row.peeled {
                    p.write_hex(line)
                }
            }
            Piece::PeeledType => line.extend_from_slice(types.map_or("", |t| t.1).as_bytes()),
            Piece::Head => line.push(if head == Some(row.name.as_slice()) {
                b'*'
            } else {
                b' '
            }),
        }
    }
    line.push(b'\n');
}

/// Runs the subcommand.
pub fn run(args: Args) -> Result<ExitCode> {
    let root_refs = args.flag(Id::IncludeRootRefs);
    let format = args
        .value(Id::Format)
        .map_or(DEFAULT_FORMAT.as_bytes(), |f| f.as_bytes());
    // As git, the last --sort wins, and each is checked as it is read.
    let mut sort: Option<String> = None;
    for k in args.values(Id::Sort) {
        let k = k.to_string_lossy().into_owned();
        if !matches!(k.trim_start_matches('-'), "refname" | "objectname") {
            return Err(Error::Transaction(format!(
                "unsupported sort key: {k} (refname and objectname are)"
            )));
        }
        sort = Some(k);
    }
    // A number (the parser checked), and git's message for a negative one.
    let count = match args.number(Id::Count) {
        Some(n) if n < 0 => {
            let n = args.value(Id::Count).unwrap_or_default().to_string_lossy();
            return Ok(common::usage_error(
                &format!("invalid --count argument: `{n}'"),
                "for-each-ref",
            ));
        }
        n => n.map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
    };
    let patterns: Vec<Vec<u8>> = args
        .operands()
        .iter()
        .map(|p| p.as_bytes().to_vec())
        .collect();
    let pieces = compile(format)?;
    let needs_types = pieces
        .iter()
        .any(|p| matches!(p, Piece::ObjectType | Piece::PeeledType));
    let needs_head = pieces.contains(&Piece::Head);
    let needs_short = pieces.contains(&Piece::RefNameShort);
    let sorted_otherwise = sort.as_deref().is_some_and(|k| k != "refname");
    let collect = needs_types || sorted_otherwise;

    let repo = common::open_repo()?;
    let store = super::store::RefStore::open(&repo)?;
    let mut list = store.iter();
    let mut res = store.iter();
    let mut short_it = store.iter();
    let head = if needs_head {
        match resolve(&mut res, b"HEAD")? {
            Resolved::Oid { refname, .. } => Some(refname),
            _ => None,
        }
    } else {
        None
    };
    // Seek as far as the patterns allow: their common literal prefix, within refs/.
    let mut prefix: Vec<u8> = b"refs/".to_vec();
    if let Some(first) = patterns.first() {
        let mut common_len = literal_prefix(first).len();
        for p in &patterns {
            let lp = literal_prefix(p);
            common_len = common_len.min(
                lp.iter()
                    .zip(first.iter())
                    .take_while(|(a, b)| a == b)
                    .count(),
            );
        }
        let cp = first.get(..common_len).unwrap_or_default();
        if cp.starts_with(b"refs/") {
            prefix = cp.to_vec();
        }
    }
    if root_refs && patterns.is_empty() {
        prefix.clear(); // root refs sort before and after "refs/": walk everything
    }

    let mut out = Out::new();
    let mut line = Vec::with_capacity(128);
    let mut rows: Vec<Row> = Vec::new();
    let mut shown = 0usize;
    for_each_resolved(&mut list, &mut res, &prefix, &mut |r| {
        let listed =
            r.name.starts_with(b"refs/") || (root_refs && reftablefs::refname::is_root_ref(r.name));
        if !listed {
            return Ok(true);
        }
        if !patterns.is_empty() && !patterns.iter().any(|p| pattern_matches(p, r.name)) {
            return Ok(true);
        }
        if !collect && count.is_some_and(|c| shown >= c) {
            return Ok(false);
        }
        shown += 1;
        let row = Row {
            name: r.name.to_vec(),
            id: r.id,
            peeled: r.peeled,
            symref: r.symref.map(<[u8]>::to_vec),
            short: if needs_short {
                Some(common::shorten_unambiguous(&mut short_it, r.name)?)
            } else {
                None
            },
        };
        if collect {
            rows.push(row);
        } else {
            line.clear();
            render(&pieces, &row, None, head.as_deref(), &mut line);
            out.write(&line)?;
        }
        Ok(true)
    })?;
    if collect {
        if let Some(k) = &sort {
            match k.as_str() {
                "refname" => {}
                "-refname" => rows.reverse(),
                "objectname" => rows.sort_by_key(|r| r.id), // stable: ties stay by name
                _ => rows.sort_by_key(|r| std::cmp::Reverse(r.id)),
            }
        }
        if let Some(c) = count {
            rows.truncate(c);
        }
    }
    if collect && !needs_types {
        for row in &rows {
            line.clear();
            render(&pieces, row, None, head.as_deref(), &mut line);
            out.write(&line)?;
        }
    }
    if needs_types {
        let mut ids: Vec<ObjectId> = rows.iter().map(|r| r.id).collect();
        ids.extend(rows.iter().filter_map(|r| r.peeled));
        let types = objects::object_types(&repo.common_dir, &ids)?;
        let (direct, peeled) = types.split_at(rows.len().min(types.len()));
        let mut peeled = peeled.iter();
        for (row, t) in rows.iter().zip(direct) {
            let pt = if row.peeled.is_some() {
                peeled.next().map_or("", String::as_str)
            } else {
                ""
            };
            line.clear();
            render(
                &pieces,
                row,
                Some((t.as_str(), pt)),
                head.as_deref(),
                &mut line,
            );
            out.write(&line)?;
        }
    }
    out.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_compile() {
        assert_eq!(
            compile(b"%(objectname) %(objecttype)\t%(refname)").unwrap(),
            vec![
                Piece::ObjectName,
                Piece::Lit(b" ".to_vec()),
                Piece::ObjectType,
                Piece::Lit(b"\t".to_vec()),
                Piece::RefName
            ]
        );
        assert_eq!(
            compile(b"a%%b%09c").unwrap(),
            vec![Piece::Lit(b"a%b\tc".to_vec())]
        );
        assert!(compile(b"%(frob)")
            .unwrap_err()
            .to_string()
            .contains("unknown field name: frob"));
        assert!(compile(b"%(refname").is_err());
    }

    proptest::proptest! {
        #[test]
        fn format_and_pattern_code_never_panics(fmt in "\\PC{0,40}", name in proptest::collection::vec(proptest::num::u8::ANY, 0..30)) {
            let _ = compile(fmt.as_bytes());
            let _ = glob(fmt.as_bytes(), &name);
            let _ = pattern_matches(fmt.as_bytes(), &name);
            let _ = literal_prefix(fmt.as_bytes());
        }
    }

    #[test]
    fn patterns_like_git() {
        assert!(pattern_matches(b"refs/heads", b"refs/heads/main"));
        assert!(pattern_matches(b"refs/heads/", b"refs/heads/main"));
        assert!(!pattern_matches(b"refs/hea", b"refs/heads/main"));
        assert!(pattern_matches(b"refs/heads/m*", b"refs/heads/main"));
        assert!(!pattern_matches(b"refs/*", b"refs/heads/main"));
        assert!(pattern_matches(b"refs/*/main", b"refs/heads/main"));
        assert!(pattern_matches(b"refs/tags/v?", b"refs/tags/v1"));
        assert_eq!(literal_prefix(b"refs/heads/m*"), b"refs/heads/m");
    }

    #[test]
    fn render_row() {
        let id = ObjectId::from_bytes(&[0xab; 20]).unwrap();
        let row = Row {
            name: b"refs/heads/main".to_vec(),
            id,
            peeled: None,
            symref: Some(b"refs/x".to_vec()),
            short: None,
        };
        let mut line = Vec::new();
        let pieces =
            compile(b"%(HEAD)%(objectname:short) %(refname) %(symref) %(objecttype)").unwrap();
        render(
            &pieces,
            &row,
            Some(("commit", "")),
            Some(b"refs/heads/main"),
            &mut line,
        );
        assert_eq!(line, b"*abababa refs/heads/main refs/x commit\n");
    }
}
