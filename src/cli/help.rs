//! The text generated from the command table in [`super::table`] for help and misuse:
//! git's `-h` layout (usage lines, then one line per option), a command's whole help, and
//! the top-level list of commands.

use std::process::ExitCode;

use super::parse::ParseError;
use super::table::{find, Command, Opt, COMMANDS, COMMON_EXIT_CODES, GLOBAL_OPTIONS};

/// Usage lines and options, as git prints them for `-h` and on misuse.
pub fn usage(cmd: &Command) -> String {
    let mut s = usage_lines(cmd);
    if !cmd.options.is_empty() {
        s.push('\n');
        options_block(&mut s, cmd.options);
    }
    s
}

/// The command's usage lines: `usage: reftablefs NAME ...`, then `   or: ...`.
fn usage_lines(cmd: &Command) -> String {
    let mut s = String::new();
    for (i, u) in cmd.usage.iter().enumerate() {
        let lead = if i == 0 { "usage:" } else { "   or:" };
        let line = format!("{lead} reftablefs {} {u}", cmd.name);
        s.push_str(line.trim_end());
        s.push('\n');
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
    let mut s = usage_lines(cmd);
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

/// What a command line that did not parse gets: `cmd`'s help on stdout (exit 0) for `-h`
/// and `--help`, else git's `error: ...` line, with the usage after it where git prints
/// it (exit 129).
pub fn parse_error(cmd: &Command, e: ParseError) -> ExitCode {
    match e {
        ParseError::Help => print_help(cmd),
        ParseError::Usage {
            message,
            usage: true,
        } => misuse(cmd.name, &message),
        ParseError::Usage { message, .. } => {
            eprintln!("error: {message}");
            ExitCode::from(129)
        }
    }
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
    use super::super::table::{opt, Id};
    use super::*;

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
                opt(Id::Message, "-m <reason>", "reason of the update"),
                opt(Id::Format, "--a-very-long-option=<value>", "x"),
            ],
        );
        assert_eq!(
            s,
            "    -m <reason>           reason of the update\n    --a-very-long-option=<value>\n                          x\n"
        );
    }
}
