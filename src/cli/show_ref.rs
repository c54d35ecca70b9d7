//! `reftablefs show-ref [--head] [-d|--dereference] [-s|--hash] [--heads] [--tags]
//! [-q|--quiet] [--verify] [PATTERN...]`: git's `show-ref` output (`<oid> <refname>`,
//! `<peeled> <refname>^{}` with `-d`). Patterns match a ref's tail at a `/` boundary
//! (`main` matches `refs/heads/main`); `--verify` takes full names. Exit code 1 when
//! nothing matched, as git.

use std::process::ExitCode;

use reftablefs::format::ObjectId;
use reftablefs::Result;

use super::common::{self, for_each_resolved, Out};
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
    if !o.hash_only {
        line.push(b' ');
        line.extend_from_slice(name);
    }
    line.push(b'\n');
    if o.deref {
        if let Some(p) = peeled {
            p.write_hex(&mut line);
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

/// Runs the subcommand.
pub fn run(mut args: Args) -> Result<ExitCode> {
    let (mut head, mut heads, mut tags, mut verify) = (false, false, false, false);
    let mut exists: Option<String> = None;
    let mut o = Opts {
        deref: false,
        hash_only: false,
        quiet: false,
    };
    while args.peek_is_option() {
        if args.flag("--head") {
            head = true;
        } else if args.flag("-d") || args.flag("--dereference") {
            o.deref = true;
        } else if args.flag("-s") || args.flag("--hash") {
            o.hash_only = true;
        } else if args.flag("--heads") || args.flag("--branches") {
            heads = true;
        } else if args.flag("--tags") {
            tags = true;
        } else if args.flag("-q") || args.flag("--quiet") {
            o.quiet = true;
        } else if let Some(r) = args.value("--exists") {
            exists = Some(r.to_string_lossy().into_owned());
        } else if args.flag("--verify") {
            verify = true;
        } else {
            return Ok(common::unknown_option(&args, "show-ref"));
        }
    }
    let patterns: Vec<Vec<u8>> = args.rest().into_iter().map(String::into_bytes).collect();
    let repo = common::open_repo()?;
    let store = super::store::RefStore::open(&repo)?;
    let mut list = store.iter();
    let mut res = store.iter();
    if let Some(name) = exists {
        // git's `show-ref --exists`: the ref itself, symrefs not followed; 2 if missing.
        return Ok(
            match reftablefs::resolve::read_raw(&mut res, name.as_bytes())? {
                reftablefs::resolve::Raw::Missing => {
                    eprintln!("error: reference does not exist");
                    ExitCode::from(2)
                }
                _ => ExitCode::SUCCESS,
            },
        );
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
