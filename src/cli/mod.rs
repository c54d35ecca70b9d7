//! The `reftablefs` command line: thin subcommands over the library's public API.
//!
//! Each subcommand lives in its own file and exposes `pub fn run(args: Args) -> Result<ExitCode>`.
//! Exit codes: 0 success, 1 "not found"/"verification failed" style answers, 128 fatal
//! errors (as git uses), 129 usage errors.

pub mod args;
pub mod common;
pub mod dump;
pub mod migrate;
#[cfg(feature = "fuse")]
pub mod mount;
pub mod objects;
pub mod progress;
pub mod update_ref_parse;

use std::process::ExitCode;

pub use args::Args;

/// Usage text printed by `reftablefs help` and on usage errors.
pub const USAGE: &str = "usage: reftablefs <command> [options]

global options (before the command): -C DIR, --git-dir=DIR, -c KEY=VALUE

commands:
  dump FILE [--verify]      print (or check) every block and record of a table
  migrate [--dry-run]       convert a files-backend repository to reftable (as git refs migrate)
  mount [--read-only] [--daemon] [--batch-window MS] [--batch-max N] [--no-fsync] GITDIR MOUNTPOINT
  unmount MOUNTPOINT        flush pending writes and unmount
";

/// Runs the command line given without the program name.
pub fn main_with_args(argv: Vec<std::ffi::OsString>) -> ExitCode {
    let mut args = Args::new(argv);
    if let Err(msg) = common::parse_global_options(&mut args) {
        return common::usage_error(&msg, USAGE);
    }
    let Some(cmd) = args.next_positional() else {
        eprint!("{USAGE}");
        return ExitCode::from(129);
    };
    let result: crate::Result<ExitCode> = match cmd.as_str() {
        "help" | "--help" | "-h" => {
            print!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        "migrate" => migrate::run(args),
        "dump" => dump::run(args),
        #[cfg(feature = "fuse")]
        "mount" => mount::run(args),
        #[cfg(feature = "fuse")]
        "unmount" => mount::run_unmount(args),
        other => {
            eprintln!("reftablefs: unknown command '{other}'\n{USAGE}");
            return ExitCode::from(129);
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fatal: {e}");
            ExitCode::from(128)
        }
    }
}
