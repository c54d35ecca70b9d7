//! Running a command of the table in [`super::table`]: the code behind each name.

use std::process::ExitCode;

use super::Args;
use reftablefs::Result;

#[cfg(feature = "fuse")]
fn run_mount(args: Args) -> Result<ExitCode> {
    super::mount::run(args)
}

#[cfg(feature = "fuse")]
fn run_unmount(args: Args) -> Result<ExitCode> {
    super::unmount::run_unmount(args)
}

#[cfg(feature = "fuse")]
fn run_exec(args: Args) -> Result<ExitCode> {
    super::exec::run(args)
}

#[cfg(not(feature = "fuse"))]
fn run_mount(_: Args) -> Result<ExitCode> {
    Err(reftablefs::Error::Transaction(
        "this reftablefs was built without FUSE support (feature \"fuse\")".into(),
    ))
}

#[cfg(not(feature = "fuse"))]
fn run_unmount(args: Args) -> Result<ExitCode> {
    run_mount(args)
}

#[cfg(not(feature = "fuse"))]
fn run_exec(args: Args) -> Result<ExitCode> {
    run_mount(args)
}

/// The code that runs the command called `name` (every entry of [`COMMANDS`] has one:
/// see the test `every_command_runs`).
pub fn runner(name: &str) -> Option<fn(Args) -> Result<ExitCode>> {
    Some(match name {
        "show-ref" => super::show_ref::run,
        "for-each-ref" => super::for_each_ref::run,
        "resolve" => super::resolve::run,
        "update-ref" => super::update_ref::run,
        "reflog" => super::reflog::run,
        "compact" => super::compact::run,
        "verify" => super::verify::run,
        "migrate" => super::migrate::run,
        "dump" => super::dump::run,
        "mount" => run_mount,
        "unmount" => run_unmount,
        "exec" => run_exec,
        "status" => super::status::run,
        "unlock" => super::unlock::run,
        "completions" => super::gen::run_completions,
        "man" => super::gen::run_man,
        "help" => super::gen::run_help,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::table::COMMANDS;

    #[test]
    fn every_command_runs() {
        for c in COMMANDS {
            assert!(runner(c.name).is_some(), "{} has no runner", c.name);
        }
    }
}
