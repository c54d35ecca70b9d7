//! Shared pieces of the subcommands: global options (`-C`, `--git-dir`, `-c`), opening
//! the repository, buffered stdout that treats a closed pipe as success, and the ref
//! resolution rules of `git rev-parse` (symref following, DWIM) over any [`RefIter`].

use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::OnceLock;

use reftablefs::format::{HashKind, ObjectId, RefValue};
use reftablefs::repo::{Discover, Repo};
use reftablefs::resolve::{resolve, Resolved};
use reftablefs::table::RefIter;
use reftablefs::{Error, Result};

use super::table::Id;
use super::Args;

static GLOBAL: OnceLock<Discover> = OnceLock::new();

/// Keeps the global options that came before the subcommand, as git reads them:
/// `-C <dir>` (repeatable, relative to the previous), `--git-dir=<dir>`,
/// `-c <key>=<value>`.
pub fn set_global_options(args: &Args) {
    let mut d = Discover::default();
    for dir in args.values(Id::ChangeDir) {
        let dir = PathBuf::from(dir);
        d.cwd = Some(match d.cwd.take() {
            Some(prev) => prev.join(dir),
            None => dir,
        });
    }
    d.git_dir = args.value(Id::GitDir).map(PathBuf::from);
    // `repo::Discover` keeps configuration as text.
    d.config_params = args
        .values(Id::Config)
        .into_iter()
        .map(|kv| kv.to_string_lossy().into_owned())
        .collect();
    // Only the first call counts (main runs once per process).
    let _ = GLOBAL.set(d);
}

/// The global options as parsed (`-C`, `--git-dir`, `-c`), for commands that find the
/// repository themselves (`exec`).
#[cfg(feature = "fuse")]
pub fn global_options() -> Discover {
    GLOBAL.get().cloned().unwrap_or_default()
}

/// Opens the repository named by the global options and the environment.
pub fn open_repo() -> Result<Repo> {
    let d = GLOBAL.get().cloned().unwrap_or_default();
    Repo::discover(&d)
}

/// git's `die`: prints `fatal: <msg>` and gives exit code 128.
pub fn fatal(msg: &str) -> std::process::ExitCode {
    eprintln!("fatal: {msg}");
    std::process::ExitCode::from(128)
}

/// A usage error of the command `cmd`: `error: <msg>` and the command's usage on stderr,
/// exit code 129.
pub fn usage_error(msg: &str, cmd: &str) -> std::process::ExitCode {
    super::help::misuse(cmd, msg)
}

/// Buffered stdout. A closed pipe (`| head`) ends output quietly, as git does.
pub struct Out {
    w: io::BufWriter<io::StdoutLock<'static>>,
    closed: bool,
}

impl Out {
    /// Locks stdout behind a 64 KiB buffer.
    pub fn new() -> Out {
        Out {
            w: io::BufWriter::with_capacity(1 << 16, io::stdout().lock()),
            closed: false,
        }
    }

    /// Writes bytes; `Err` only for real I/O errors (not a closed pipe).
    pub fn write(&mut self, bytes: &[u8]) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        match self.w.write_all(bytes) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(())
            }
            Err(e) => Err(Error::io("stdout", e)),
        }
    }

    /// Flushes the buffer and reports success: the end of a command that printed.
    pub fn finish(mut self) -> Result<std::process::ExitCode> {
        self.flush()?;
        Ok(std::process::ExitCode::SUCCESS)
    }

    /// Flushes the buffer (call before reporting success; also done on drop).
    pub fn flush(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        match self.w.flush() {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(())
            }
            Err(e) => Err(Error::io("stdout", e)),
        }
    }
}

impl Default for Out {
    fn default() -> Self {
        Out::new()
    }
}

// ---------------------------------------------------------------------------------------
// DWIM (git's expand_ref), over the library's symref resolution
// ---------------------------------------------------------------------------------------

/// git's `ref_rev_parse_rules`, as (prefix, suffix) pairs around the short name.
pub const DWIM_RULES: [(&str, &str); 6] = [
    ("", ""),
    ("refs/", ""),
    ("refs/tags/", ""),
    ("refs/heads/", ""),
    ("refs/remotes/", ""),
    ("refs/remotes/", "/HEAD"),
];

/// The result of DWIM-resolving a short name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dwim {
    /// The full ref name that matched first (the symref itself, not its target).
    pub refname: Vec<u8>,
    /// That name after following symrefs (what `--symbolic-full-name` prints).
    pub resolved: Vec<u8>,
    pub id: ObjectId,
    pub peeled: Option<ObjectId>,
    /// How many rules matched (more than one: git warns "refname is ambiguous").
    pub matches: usize,
}

/// Expands `short` with git's rules and resolves each candidate (git's `expand_ref`
/// with `warn_ambiguous_refs`, its default). `warn` receives git's warnings.
pub fn dwim(
    it: &mut dyn RefIter,
    short: &[u8],
    warn: &mut dyn FnMut(String),
) -> Result<Option<Dwim>> {
    let mut found: Option<Dwim> = None;
    let mut full = Vec::with_capacity(short.len() + 24);
    for (prefix, suffix) in DWIM_RULES {
        full.clear();
        full.extend_from_slice(prefix.as_bytes());
        full.extend_from_slice(short);
        full.extend_from_slice(suffix.as_bytes());
        match resolve(it, &full)? {
            Resolved::Oid {
                id,
                peeled,
                refname,
                ..
            } => match &mut found {
                Some(f) => f.matches += 1,
                None => {
                    found = Some(Dwim {
                        refname: full.clone(),
                        resolved: refname,
                        id,
                        peeled,
                        matches: 1,
                    })
                }
            },
            Resolved::Dangling { .. } if full != b"HEAD" => warn(format!(
                "ignoring dangling symref {}",
                String::from_utf8_lossy(&full)
            )),
            Resolved::Broken { .. } if full.contains(&b'/') => warn(format!(
                "ignoring broken ref {}",
                String::from_utf8_lossy(&full)
            )),
            _ => {}
        }
    }
    Ok(found)
}

/// Resolves a revision argument the way this tool supports `git rev-parse`: a full hex
/// object id of the repository's hash, `@` for `HEAD`, or a ref name (DWIM).
/// Returns `None` when nothing matches; warnings go to `warn`.
pub fn rev_parse(
    it: &mut dyn RefIter,
    arg: &[u8],
    hash: HashKind,
    warn: &mut dyn FnMut(String),
) -> Result<Option<ObjectId>> {
    if arg.len() == hash.hex_len() {
        if let Some(id) = ObjectId::from_hex(arg, hash) {
            return Ok(Some(id));
        }
    }
    let name: &[u8] = if arg == b"@" { b"HEAD" } else { arg };
    match dwim(it, name, warn)? {
        Some(d) => {
            if d.matches > 1 {
                warn(format!(
                    "refname '{}' is ambiguous.",
                    String::from_utf8_lossy(arg)
                ));
            }
            Ok(Some(d.id))
        }
        None => Ok(None),
    }
}

/// One listed ref, with symrefs resolved.
#[derive(Debug)]
pub struct Listed<'a> {
    pub name: &'a [u8],
    /// The object id (of the symref's final target for a symref).
    pub id: ObjectId,
    /// The peeled id of an annotated tag (from the table's value type 2).
    pub peeled: Option<ObjectId>,
    /// The symref's direct target, for a symref.
    pub symref: Option<&'a [u8]>,
}

/// Calls `f` for every live ref whose name starts with `prefix`, in name order, with
/// symrefs resolved (dangling or broken symrefs are skipped, as git's ref iteration
/// does). `list` walks, `res` is reseeked for symref resolution. `f` returns `false`
/// to stop.
pub fn for_each_resolved(
    list: &mut dyn RefIter,
    res: &mut dyn RefIter,
    prefix: &[u8],
    f: &mut dyn FnMut(Listed<'_>) -> Result<bool>,
) -> Result<()> {
    list.seek(prefix)?;
    while let Some(rec) = list.next()? {
        if !rec.name.starts_with(prefix) {
            break;
        }
        let listed = match &rec.value {
            RefValue::Deletion => continue,
            RefValue::Val1(id) => Listed {
                name: &rec.name,
                id: *id,
                peeled: None,
                symref: None,
            },
            RefValue::Val2 { value, peeled } => Listed {
                name: &rec.name,
                id: *value,
                peeled: Some(*peeled),
                symref: None,
            },
            RefValue::Symref(target) => match resolve(res, &rec.name)? {
                Resolved::Oid { id, peeled, .. } => Listed {
                    name: &rec.name,
                    id,
                    peeled,
                    symref: Some(target),
                },
                _ => continue,
            },
        };
        if !f(listed)? {
            break;
        }
    }
    Ok(())
}

/// git's `refs_shorten_unambiguous_ref` (non-strict): the shortest form of `name` under
/// the DWIM rules that no earlier rule would resolve to another existing ref.
pub fn shorten_unambiguous(it: &mut dyn RefIter, name: &[u8]) -> Result<Vec<u8>> {
    let mut cand = Vec::with_capacity(name.len() + 24);
    for i in (1..DWIM_RULES.len()).rev() {
        let Some(&(pre, suf)) = DWIM_RULES.get(i) else {
            continue;
        };
        let (pre, suf) = (pre.as_bytes(), suf.as_bytes());
        if name.len() <= pre.len() + suf.len() || !name.starts_with(pre) || !name.ends_with(suf) {
            continue;
        }
        let short = name
            .get(pre.len()..name.len() - suf.len())
            .unwrap_or_default();
        let mut ambiguous = false;
        for &(p, s) in DWIM_RULES.get(..i).unwrap_or_default() {
            cand.clear();
            cand.extend_from_slice(p.as_bytes());
            cand.extend_from_slice(short);
            cand.extend_from_slice(s.as_bytes());
            if matches!(resolve(it, &cand)?, Resolved::Oid { .. }) {
                ambiguous = true;
                break;
            }
        }
        if !ambiguous {
            return Ok(short.to_vec());
        }
    }
    Ok(name.to_vec())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use reftablefs::format::RefRecord;
    use reftablefs::merged::mem::VecRefIter;

    pub(crate) fn oid(n: u8) -> ObjectId {
        ObjectId::from_bytes(&[n; 20]).unwrap()
    }

    pub(crate) fn store(recs: &[(&str, RefValue)]) -> VecRefIter {
        let mut v: Vec<RefRecord> = recs
            .iter()
            .map(|(n, val)| RefRecord {
                name: n.as_bytes().to_vec(),
                update_index: 1,
                value: val.clone(),
            })
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        VecRefIter::new(v)
    }

    fn sym(t: &str) -> RefValue {
        RefValue::Symref(t.as_bytes().to_vec())
    }

    #[test]
    fn resolve_follows_symrefs_and_stops_at_depth() {
        let mut it = store(&[
            ("HEAD", sym("refs/heads/main")),
            ("refs/heads/main", RefValue::Val1(oid(1))),
            ("refs/heads/gone", RefValue::Deletion),
            ("refs/heads/dangling", sym("refs/heads/gone")),
            ("refs/l1", sym("refs/l2")),
            ("refs/l2", sym("refs/l3")),
            ("refs/l3", sym("refs/l4")),
            ("refs/l4", sym("refs/l5")),
            ("refs/l5", sym("refs/l6")),
            ("refs/l6", RefValue::Val1(oid(2))),
            ("refs/bad", sym("refs/a..b")),
        ]);
        assert_eq!(
            resolve(&mut it, b"HEAD").unwrap(),
            Resolved::Oid {
                refname: b"refs/heads/main".to_vec(),
                id: oid(1),
                peeled: None,
                via_symref: true
            }
        );
        assert_eq!(
            resolve(&mut it, b"refs/heads/gone").unwrap(),
            Resolved::Missing
        );
        assert_eq!(
            resolve(&mut it, b"refs/heads/dangling").unwrap(),
            Resolved::Dangling {
                refname: b"refs/heads/gone".to_vec()
            }
        );
        assert!(
            matches!(resolve(&mut it, b"refs/l2").unwrap(), Resolved::Oid { .. }),
            "4 hops is fine"
        );
        assert!(
            matches!(
                resolve(&mut it, b"refs/l1").unwrap(),
                Resolved::Broken { .. }
            ),
            "5 hops is too deep"
        );
        assert!(matches!(
            resolve(&mut it, b"refs/bad").unwrap(),
            Resolved::Broken { .. }
        ));
        assert_eq!(
            resolve(&mut it, b"refs/heads/../x").unwrap(),
            Resolved::Missing
        );
    }

    #[test]
    fn dwim_rules_order_and_ambiguity() {
        let mut it = store(&[
            ("HEAD", sym("refs/heads/main")),
            ("refs/heads/main", RefValue::Val1(oid(1))),
            (
                "refs/tags/main",
                RefValue::Val2 {
                    value: oid(3),
                    peeled: oid(4),
                },
            ),
            ("refs/remotes/origin/HEAD", sym("refs/remotes/origin/main")),
            ("refs/remotes/origin/main", RefValue::Val1(oid(5))),
            ("refs/heads/dang", sym("refs/heads/nowhere")),
        ]);
        let mut warnings = Vec::new();
        let d = dwim(&mut it, b"main", &mut |w| warnings.push(w))
            .unwrap()
            .unwrap();
        assert_eq!(
            (d.refname.as_slice(), d.id, d.matches),
            (b"refs/tags/main".as_slice(), oid(3), 2)
        );
        let d = dwim(&mut it, b"origin", &mut |w| warnings.push(w))
            .unwrap()
            .unwrap();
        assert_eq!(
            (d.refname.as_slice(), d.id),
            (b"refs/remotes/origin/HEAD".as_slice(), oid(5))
        );
        assert!(dwim(&mut it, b"dang", &mut |w| warnings.push(w))
            .unwrap()
            .is_none());
        assert_eq!(warnings, ["ignoring dangling symref refs/heads/dang"]);

        let mut w2 = Vec::new();
        let hex = oid(9).to_hex();
        assert_eq!(
            rev_parse(&mut it, hex.as_bytes(), HashKind::Sha1, &mut |w| w2.push(w)).unwrap(),
            Some(oid(9))
        );
        assert_eq!(
            rev_parse(&mut it, b"@", HashKind::Sha1, &mut |w| w2.push(w)).unwrap(),
            Some(oid(1))
        );
        assert_eq!(
            rev_parse(&mut it, b"main", HashKind::Sha1, &mut |w| w2.push(w)).unwrap(),
            Some(oid(3))
        );
        assert_eq!(
            rev_parse(&mut it, b"nope", HashKind::Sha1, &mut |w| w2.push(w)).unwrap(),
            None
        );
        assert_eq!(w2, ["refname 'main' is ambiguous."]);
    }
}
