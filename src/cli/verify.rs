//! `reftablefs verify [--verbose]`: checks a reftable stack the way `git refs verify`
//! reports problems (`error: <what>: <msgId>: <message>` / `warning: …` on stderr;
//! exit 1 when any error was found, warnings alone leave 0). The checks are
//! [`verify_stack`]'s.

use std::process::ExitCode;

use reftablefs::stack::verify::verify_stack;
use reftablefs::Result;

use super::common;
use super::table::Id;
use super::Args;

/// Runs the subcommand.
pub fn run(args: Args) -> Result<ExitCode> {
    let verbose = args.flag(Id::Verbose);
    let repo = common::open_repo()?;
    repo.require_reftable()?;
    let mut dirs = vec![repo.reftable_dir()];
    if let Some(wt) = repo.worktree_reftable_dir() {
        dirs.push(wt);
    }
    let mut failed = false;
    for dir in dirs {
        if verbose {
            eprintln!("Checking reftable stack {}", dir.display());
        }
        let rep = verify_stack(&dir, repo.hash())?;
        for w in &rep.warnings {
            eprintln!("warning: {w}");
        }
        for e in &rep.errors {
            eprintln!("error: {e}");
        }
        failed |= !rep.errors.is_empty();
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
