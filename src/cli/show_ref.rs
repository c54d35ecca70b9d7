//! `reftablefs show-ref [--head] [-d|--dereference] [-s|--hash[=N]] [--heads] [--tags]
//! [-q|--quiet] [--verify] [PATTERN...]`: git's `show-ref` output (`<oid> <refname>`,
//! `<peeled> <refname>^{}` with `-d`). Patterns match a ref's tail at a `/` boundary
//! (`main` matches `refs/heads/main`); `--verify` takes full names. Exit code 1 when
//! nothing matched, as git.

use std::os::unix::ffi::OsStrExt;
use std::process::ExitCode;

use reftablefs::format::ObjectId;
use reftablefs::Result;

use super::common::{self, for_each_resolved, Out};
use super::table::Id;
use super::Args;
use reftablefs::resolve::{resolve, Resolved};

/// git's tail match: `name` ends with `pattern` at a component boundary.
pub fn tail_matches(name: &[u8], pattern: &[u8]) -> bool {
    if !name.ends_with(pattern) {
        return false;
    }
    let cut = name.len() - pattern.len();
    cut == 0 || name.get(cut - 1) == Some(&b'/')
}

struct Opts {
    deref: bool,
    hash_only: bool,
    /// Hex digits shown of each object ID (`--hash=<n>`; all of them otherwise).
    abbrev: usize,
    quiet: bool,
}

fn print(
    out: &mut Out,
    o: &Opts,
    name: &[u8],
    id: &ObjectId,
    peeled: Option<&ObjectId>,
) -> Result<()> {
    if o.quiet {
        return Ok(());
    }
    let mut line = Vec::with_capacity(name.len() + 70);
    id.write_hex(&mut line);
    line.truncate(o.abbrev);
    if !o.hash_only {
        line.push(b' ');
        line.extend_from_slice(name);
    }
    line.push(b'\n');
    if o.deref {
        if let Some(p) = peeled {
            let at = line.len();
            p.write_hex(&mut line);
            line.truncate(at.saturating_add(o.abbrev));
            if !o.hash_only {
                line.push(b' ');
                line.extend_from_slice(name);
                line.extend_from_slice(b"^{}");
            }
            line.push(b'\n');
        }
    }
    out.write(&line)
}

/// The hex digits `--hash=<n>` shows, as git's `parse_opt_abbrev_cb`: all of them for
/// none or 0, at least 4. (git lengthens an abbreviation that is ambiguous in the object
/// database; these are cut at <n>, as `reflog`'s.)
fn abbrev(n: Option<i64>) -> usize {
    match n {
        None | Some(0) => usize::MAX,
        Some(n) => usize::try_from(n.max(4)).unwrap_or(usize::MAX),
    }
}

/// Runs the subcommand.
pub fn run(args: Args) -> Result<ExitCode> {
    let (head, heads, tags) = (
        args.flag(Id::Head),
        args.flag(Id::Branches),
        args.flag(Id::Tags),
    );
    let verify = args.flag(Id::Verify);
    let exists = args.value(Id::Exists).map(|r| r.as_bytes().to_vec());
    let o = Opts {
        deref: args.flag(Id::Dereference),
        hash_only: args.flag(Id::Hash),
        abbrev: abbrev(args.number(Id::Hash)),
        quiet: args.flag(Id::Quiet),
    };
    let patterns: Vec<Vec<u8>> = args
        .operands()
        .iter()
        .map(|p| p.as_bytes().to_vec())
        .collect();
    let repo = common::open_repo()?;
    let store = super::store::RefStore::open(&repo)?;
    let mut list = store.iter();
    let mut res = store.iter();
    if let Some(name) = exists {
        // git's `show-ref --exists`: the ref itself, symrefs not followed; 2 if missing.
        return Ok(match reftablefs::resolve::read_raw(&mut res, &name)? {
            reftablefs::resolve::Raw::Missing => {
                eprintln!("error: reference does not exist");
                ExitCode::from(2)
            }
            _ => ExitCode::SUCCESS,
        });
    }
    let mut out = Out::new();

    if verify {
        if patterns.is_empty() {
            return Err(reftablefs::Error::Transaction(
                "--verify requires a reference".into(),
            ));
        }
        for p in &patterns {
            let shown = (p.starts_with(b"refs/") || p == b"HEAD")
                && match resolve(&mut res, p)? {
                    Resolved::Oid { id, peeled, .. } => {
                        print(&mut out, &o, p, &id, peeled.as_ref())?;
                        true
                    }
                    _ => false,
                };
            if !shown {
                out.flush()?;
                if o.quiet {
                    return Ok(ExitCode::from(1));
                }
                return Err(reftablefs::Error::Transaction(format!(
                    "'{}' - not a valid ref",
                    String::from_utf8_lossy(p)
                )));
            }
        }
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }

    let mut found = false;
    if head {
        if let Resolved::Oid { id, peeled, .. } = resolve(&mut res, b"HEAD")? {
            print(&mut out, &o, b"HEAD", &id, peeled.as_ref())?;
            found = true;
        }
    }
    for_each_resolved(&mut list, &mut res, b"refs/", &mut |r| {
        if (heads || tags)
            && !((heads && r.name.starts_with(b"refs/heads/"))
                || (tags && r.name.starts_with(b"refs/tags/")))
        {
            return Ok(true);
        }
        if !patterns.is_empty() && !patterns.iter().any(|p| tail_matches(r.name, p)) {
            return Ok(true);
        }
        found = true;
        print(&mut out, &o, r.name, &r.id, r.peeled.as_ref())?;
        Ok(true)
    })?;
    out.flush()?;
    Ok(if found {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_matching_like_git() {
        assert!(tail_matches(b"refs/heads/main", b"main"));
        assert!(tail_matches(b"refs/heads/main", b"heads/main"));
        assert!(tail_matches(b"refs/heads/main", b"refs/heads/main"));
        assert!(!tail_matches(b"refs/heads/xmain", b"main"));
        assert!(!tail_matches(b"refs/heads/main", b"mai"));
        assert!(!tail_matches(b"refs/heads/main", b"refs/heads/main/x"));
    }
}
