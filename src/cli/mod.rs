//! The `reftablefs` command line: thin subcommands over the library's public API.
//!
//! Each subcommand lives in its own file and exposes `pub fn run(args: Args) -> Result<ExitCode>`;
//! [`table::COMMANDS`] is the table of them (names, options, help) that dispatch,
//! help, completions and the man page are generated from.
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
pub mod migrate;
#[cfg(feature = "fuse")]
pub mod mount;
pub mod objects;
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

use std::process::ExitCode;

pub use args::Args;

/// Runs the command line given without the program name.
pub fn main_with_args(argv: Vec<std::ffi::OsString>) -> ExitCode {
    let mut args = Args::new(argv);
    if let Err(msg) = common::parse_global_options(&mut args) {
        eprint!("error: {msg}\n{}", commands::main_usage());
        return ExitCode::from(129);
    }
    if args.flag("--version") {
        println!("reftablefs version {}", env!("CARGO_PKG_VERSION"));
        return ExitCode::SUCCESS;
    }
    if args.flag("-h") || args.flag("--help") {
        print!("{}", commands::main_usage());
        return ExitCode::SUCCESS;
    }
    if args.peek_is_option() {
        let opt = args.peek().unwrap_or_default();
        eprint!("error: unknown option '{opt}'\n{}", commands::main_usage());
        return ExitCode::from(129);
    }
    let Some(name) = args.next_positional() else {
        eprint!("{}", commands::main_usage());
        return ExitCode::from(129);
    };
    let (Some(cmd), Some(run)) = (table::find(&name), commands::runner(&name)) else {
        eprint!(
            "reftablefs: '{name}' is not a reftablefs command. See 'reftablefs help'.\n\n{}",
            commands::main_usage()
        );
        return ExitCode::from(129);
    };
    // `CMD -h` and `CMD --help` print the command's help (an option spelled so later on
    // the line does too, through `common::unknown_option`).
    if args.flag("-h") || args.flag("--help") {
        return commands::print_help(cmd);
    }
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fatal: {e}");
            ExitCode::from(128)
        }
    }
}
