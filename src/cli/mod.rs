//! The `reftablefs` command line: thin subcommands over the library's public API.
//!
//! Each subcommand lives in its own file and exposes `pub fn run(args: Args) -> Result<ExitCode>`;
//! [`table::COMMANDS`] is the table of them (names, options, help) that the parser
//! ([`parse`]), dispatch, help, completions and the man page are generated from.
//! Exit codes: 0 success, 1 "not found"/"verification failed" style answers, 128 fatal
//! errors (as git uses), 129 usage errors.

pub mod args;
pub mod commands;
pub mod common;
pub mod compact;
pub mod dump;
#[cfg(feature = "fuse")]
pub mod exec;
pub mod for_each_ref;
pub mod gen;
pub mod help;
pub mod logger;
pub mod migrate;
#[cfg(feature = "fuse")]
pub mod mount;
pub mod objects;
pub mod parse;
pub mod progress;
pub mod reflog;
pub mod resolve;
pub mod show_ref;
pub mod status;
pub mod store;
pub mod table;
pub mod unlock;
#[cfg(feature = "fuse")]
pub mod unmount;
pub mod update_ref;
pub mod update_ref_parse;
#[cfg(feature = "fuse")]
pub mod userns;
pub mod verify;

use std::ffi::OsString;
use std::process::ExitCode;

pub use args::Args;
use parse::{Grammar, ParseError};
use table::Id;

/// Runs the command line given without the program name.
pub fn main_with_args(argv: Vec<OsString>) -> ExitCode {
    let global = match parse::parse(&Grammar::GLOBAL, &argv) {
        Ok(a) => a,
        Err(ParseError::Help) => {
            print!("{}", help::main_usage());
            return ExitCode::SUCCESS;
        }
        Err(ParseError::Usage { message, .. }) => {
            eprint!("error: {message}\n{}", help::main_usage());
            return ExitCode::from(129);
        }
    };
    common::set_global_options(&global);
    if global.flag(Id::Version) {
        println!("reftablefs version {}", env!("CARGO_PKG_VERSION"));
        return ExitCode::SUCCESS;
    }
    let words = global.into_operands();
    let Some((name, rest)) = words.split_first() else {
        eprint!("{}", help::main_usage());
        return ExitCode::from(129);
    };
    let found = name
        .to_str()
        .and_then(|n| Some((table::find(n)?, commands::runner(n)?)));
    let Some((cmd, run)) = found else {
        eprint!(
            "reftablefs: '{}' is not a reftablefs command. See 'reftablefs help'.\n\n{}",
            name.to_string_lossy(),
            help::main_usage()
        );
        return ExitCode::from(129);
    };
    let mut args = match parse::parse(&Grammar::of(cmd), rest) {
        Ok(a) => a,
        Err(e) => return help::parse_error(cmd, e),
    };
    let before = argv.len() - rest.len();
    args.set_invocation(argv.get(..before).unwrap_or_default().to_vec());
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fatal: {e}");
            ExitCode::from(128)
        }
    }
}
