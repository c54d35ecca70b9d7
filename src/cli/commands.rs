//! Running a command of the table in [`super::table`], and the text generated from the
//! table for help and misuse.

use std::process::ExitCode;

use super::table::{find, Command, Opt, COMMANDS, COMMON_EXIT_CODES, GLOBAL_OPTIONS};
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

/// Usage lines and options, as git prints them for `-h` and on misuse.
pub fn usage(cmd: &Command) -> String {
    let mut s = String::new();
    for (i, u) in cmd.usage.iter().enumerate() {
        let lead = if i == 0 { "usage:" } else { "   or:" };
        let line = format!("{lead} reftablefs {} {u}", cmd.name);
        s.push_str(line.trim_end());
        s.push('\n');
    }
    if !cmd.options.is_empty() {
        s.push('\n');
        options_block(&mut s, cmd.options);
    }
    s
}

/// git's option list: four spaces, the spelling padded to column 26, the help.
pub fn options_block(s: &mut String, opts: &[Opt]) {
    const WIDTH: usize = 26;
    for o in opts {
        let left = format!("    {}", o.spelling);
        if left.len() + 2 <= WIDTH {
            s.push_str(&format!("{left:<WIDTH$}{}\n", o.help));
        } else {
            s.push_str(&format!("{left}\n{:WIDTH$}{}\n", "", o.help));
        }
    }
}

/// The whole help of one command: usage, description, options, examples, exit codes.
pub fn help(cmd: &Command) -> String {
    let mut s = String::new();
    for (i, u) in cmd.usage.iter().enumerate() {
        let lead = if i == 0 { "usage:" } else { "   or:" };
        let line = format!("{lead} reftablefs {} {u}", cmd.name);
        s.push_str(line.trim_end());
        s.push('\n');
    }
    s.push('\n');
    s.push_str(&wrap(cmd.description, 80, ""));
    if !cmd.options.is_empty() {
        s.push('\n');
        options_block(&mut s, cmd.options);
    }
    s.push_str("\nexamples:\n");
    for (line, what) in cmd.examples {
        s.push_str(&format!("    $ {line}\n        {what}\n"));
    }
    s.push_str("\nexit status:\n");
    for (code, what) in exit_codes(cmd) {
        s.push_str(&format!("    {code:<5}{what}\n"));
    }
    s
}

/// The command's exit codes with the shared ones, in numeric order.
pub fn exit_codes(cmd: &Command) -> Vec<(u8, &'static str)> {
    let mut v: Vec<(u8, &str)> = COMMON_EXIT_CODES
        .iter()
        .chain(cmd.exit_codes)
        .copied()
        .collect();
    v.sort_by_key(|&(c, _)| c);
    v
}

/// The top-level usage: synopsis and the list of commands.
pub fn main_usage() -> String {
    let mut s = String::from(
        "usage: reftablefs [-C <path>] [--git-dir=<path>] [-c <name>=<value>] <command> [<args>]\n\n",
    );
    options_block(&mut s, GLOBAL_OPTIONS);
    s.push_str("\nThese are the reftablefs commands:\n");
    let width = COMMANDS.iter().map(|c| c.name.len()).max().unwrap_or(0) + 3;
    for c in COMMANDS {
        s.push_str(&format!("   {:width$}{}\n", c.name, c.summary));
    }
    s.push_str(
        "\n'reftablefs help <command>' or 'reftablefs <command> --help' shows a command's options.\n",
    );
    s
}

/// Greedy word wrap to `width` columns, each line after `indent`.
pub fn wrap(text: &str, width: usize, indent: &str) -> String {
    let mut out = String::new();
    let mut line = String::from(indent);
    for word in text.split_whitespace() {
        if line.len() > indent.len() && line.len() + 1 + word.len() > width {
            out.push_str(&line);
            out.push('\n');
            line = String::from(indent);
        }
        if line.len() > indent.len() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if line.len() > indent.len() {
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// Prints the usage of `cmd` after `error: <msg>` on stderr; exit code 129.
pub fn misuse(cmd: &str, msg: &str) -> ExitCode {
    match find(cmd) {
        Some(c) => eprint!("error: {msg}\n{}", usage(c)),
        None => eprint!("error: {msg}\n{}", main_usage()),
    }
    ExitCode::from(129)
}

/// Prints the help of `cmd` on stdout; exit code 0.
pub fn print_help(cmd: &Command) -> ExitCode {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(help(cmd).as_bytes());
    let _ = out.flush();
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::super::table::OptName;
    use super::*;

    #[test]
    fn spellings_parse_into_names() {
        let o = |s| Opt {
            spelling: s,
            help: "",
        };
        let n = o("-d, --dereference").names();
        assert_eq!(
            n.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(),
            ["-d", "--dereference"]
        );
        assert!(n.iter().all(|n| n.value.is_none()));
        let n = o("--format=<format>").names();
        assert_eq!(
            n,
            [OptName {
                name: "--format".into(),
                value: Some("<format>".into()),
                equals: true
            }]
        );
        let n = o("-m <reason>").names();
        assert_eq!((n[0].name.as_str(), n[0].equals), ("-m", false));
        let n = o("--[no-]progress").names();
        assert_eq!(
            n.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(),
            ["--progress", "--no-progress"]
        );
    }

    #[test]
    fn every_command_runs() {
        for c in COMMANDS {
            assert!(runner(c.name).is_some(), "{} has no runner", c.name);
        }
    }

    #[test]
    fn every_command_is_complete_and_unique() {
        let mut names: Vec<&str> = COMMANDS.iter().map(|c| c.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), COMMANDS.len(), "duplicate command names");
        for c in COMMANDS {
            assert!(
                !c.summary.is_empty() && !c.description.is_empty(),
                "{}",
                c.name
            );
            assert!(!c.usage.is_empty() && !c.examples.is_empty(), "{}", c.name);
            for (line, _) in c.examples {
                assert!(line.contains(c.name), "{}: example {line}", c.name);
            }
            let h = help(c);
            for o in c.options {
                assert!(h.contains(o.spelling), "{}: {}", c.name, o.spelling);
            }
        }
    }

    #[test]
    fn option_lines_are_git_shaped() {
        let mut s = String::new();
        options_block(
            &mut s,
            &[
                Opt {
                    spelling: "-m <reason>",
                    help: "reason of the update",
                },
                Opt {
                    spelling: "--a-very-long-option=<value>",
                    help: "x",
                },
            ],
        );
        assert_eq!(
            s,
            "    -m <reason>           reason of the update\n    --a-very-long-option=<value>\n                          x\n"
        );
    }
}
