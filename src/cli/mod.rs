//! The `reftablefs` command line: thin subcommands over the library's public API.
//!
//! Each subcommand lives in its own file and exposes `pub fn run(args: Args) -> Result<ExitCode>`.
//! Exit codes: 0 success, 1 "not found"/"verification failed" style answers, 128 fatal
//! errors (as git uses), 129 usage errors.

pub mod args;
pub mod common;
pub mod compact;
pub mod dump;
pub mod for_each_ref;
pub mod migrate;
#[cfg(feature = "fuse")]
pub mod mount;
pub mod objects;
pub mod progress;
pub mod reflog;
pub mod resolve;
pub mod show_ref;
pub mod store;
pub mod unlock;
pub mod update_ref;
pub mod update_ref_parse;
pub mod verify;

use std::process::ExitCode;

pub use args::Args;

/// Usage text printed by `reftablefs help` and on usage errors.
pub const USAGE: &str = "usage: reftablefs <command> [options]

global options (before the command): -C DIR, --git-dir=DIR, -c KEY=VALUE

commands:
  dump FILE [--verify]      print (or check) every block and record of a table
  show-ref [--head] [-d] [PATTERN...]   list refs as git show-ref
  for-each-ref [--format=F] [PATTERN...] list refs as git for-each-ref
  resolve [--stdin] NAME...  print the object id of each name (git rev-parse for refs)
  update-ref --stdin [-z] | REF NEW [OLD] | -d REF   git's update-ref, one table per transaction
  reflog [NAME]             show a reflog as git reflog show
  compact [--auto]          compact the stack (as git pack-refs)
  verify                    check the stack (as git refs verify)
  unlock [--force] [--min-age S] [--dry-run] [GITDIR]   remove a stale tables.list.lock and orphaned table locks/temporary tables
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
        "show-ref" => show_ref::run(args),
        "for-each-ref" => for_each_ref::run(args),
        "resolve" => resolve::run(args),
        "update-ref" => update_ref::run(args),
        "reflog" => reflog::run(args),
        "compact" => compact::run(args),
        "verify" => verify::run(args),
        "unlock" => unlock::run(args),
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
