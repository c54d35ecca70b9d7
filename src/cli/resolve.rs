//! `reftablefs resolve [--stdin] [--symbolic-full-name] NAME...`: what `git rev-parse NAME`
//! prints for ref names: the object id, following symrefs (up to 5 hops) after git's
//! DWIM rules (`NAME`, `refs/NAME`, `refs/tags/NAME`, `refs/heads/NAME`,
//! `refs/remotes/NAME`, `refs/remotes/NAME/HEAD`), with git's warnings (ambiguous
//! refname, dangling symref). Full hex ids are printed as given; `@` is `HEAD`.
//! Revision syntax beyond that (`~`, `^`, `@{}`) is not supported. An unknown name is
//! fatal (exit 128) as in git, after the names before it were printed.

use std::io::BufRead;
use std::os::unix::ffi::OsStrExt;
use std::process::ExitCode;

use reftablefs::{Error, Result};

use super::common::{self, dwim, rev_parse, Out};
use super::table::Id;
use super::Args;

/// Runs the subcommand.
pub fn run(args: Args) -> Result<ExitCode> {
    let stdin = args.flag(Id::Stdin);
    let full_name = args.flag(Id::SymbolicFullName);
    let mut names: Vec<Vec<u8>> = args
        .operands()
        .iter()
        .map(|n| n.as_bytes().to_vec())
        .collect();
    if stdin {
        for line in std::io::stdin().lock().split(b'\n') {
            let mut line = line.map_err(|e| Error::io("stdin", e))?;
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if !line.is_empty() {
                names.push(line);
            }
        }
    }
    if names.is_empty() {
        return Ok(common::usage_error("no names given", "resolve"));
    }
    let repo = common::open_repo()?;
    let hash = repo.hash();
    let store = super::store::RefStore::open(&repo)?;
    // One iterator, reseeked for every lookup (the stack's cached-iterator pattern).
    let mut iter = store.iter();
    let it = &mut iter;
    let mut out = Out::new();
    let mut line = Vec::with_capacity(80);
    let mut warn = |w: String| eprintln!("warning: {w}");
    (|| -> Result<()> {
        for name in &names {
            line.clear();
            if full_name {
                let arg: &[u8] = if name == b"@" { b"HEAD" } else { name };
                match dwim(it, arg, &mut warn)? {
                    Some(d) if d.matches == 1 => line.extend_from_slice(&d.resolved),
                    Some(_) => {
                        warn(format!(
                            "refname '{}' is ambiguous.",
                            String::from_utf8_lossy(name)
                        ));
                        continue;
                    }
                    None => continue,
                }
            } else {
                match rev_parse(it, name, hash, &mut warn)? {
                    Some(id) => id.write_hex(&mut line),
                    None => {
                        out.flush()?;
                        return Err(Error::Transaction(format!(
                            "ambiguous argument '{}': unknown revision or path not in the working tree.",
                            String::from_utf8_lossy(name)
                        )));
                    }
                }
            }
            line.push(b'\n');
            out.write(&line)?;
        }
        Ok(())
    })()?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
