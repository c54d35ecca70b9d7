//! `reftablefs compact [--auto]`: what `git pack-refs` does to a reftable stack. Without
//! `--auto` every table is compacted into one; with `--auto` git's geometric rule
//! (factor `reftable.geometricFactor`, default 2) picks the range, if any. Prints
//! `tables: N -> M` with `-v`. A held lock is git's
//! `error: unable to compact stack: data is locked` (exit 1).

use std::process::ExitCode;

use reftablefs::Result;

use super::common;
use super::table::Id;
use super::Args;

/// Runs the subcommand.
pub fn run(args: Args) -> Result<ExitCode> {
    let auto = args.flag(Id::Auto);
    let verbose = args.flag(Id::Verbose);
    if !args.operands().is_empty() {
        return Ok(common::usage_error("too many arguments", "compact"));
    }
    let repo = common::open_repo()?;
    let mut stack = repo.open_stack()?;
    let before = stack.table_names().len();
    if let Err(e) = stack.pack(auto) {
        eprintln!("error: unable to compact stack: {e}");
        return Ok(ExitCode::from(1));
    }
    if verbose {
        println!("tables: {before} -> {}", stack.table_names().len());
    }
    Ok(ExitCode::SUCCESS)
}
