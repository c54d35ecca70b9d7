//! The parser the command table in [`super::table`] makes: git's parse-options
//! (parse-options.c) over one command's options.
//!
//! * Long options by their whole name or a unique prefix (`--ver` is `--verify`); an
//!   exact name wins over longer ones it begins (`--head` beside `--heads`); a prefix of
//!   two options is refused ("ambiguous option: he (could be --head or --heads)").
//! * A value as `--opt=value` or `--opt value`; an optional value only attached
//!   (`--hash=7`, `-s7`); `--[no-]x` options turned off by `--no-x` (and its prefixes).
//! * Short options bundled (`-dq`), a value attached or in the next word (`-mreason`,
//!   `-m reason`); `-verify` for `--verify` is caught as git catches it.
//! * `--` and `--end-of-options` end the options; `-` is an operand. Operands and values
//!   are kept as the bytes they were given.
//! * `-h` and `--help` ask for help; every mistake is a [`ParseError::Usage`] with git's
//!   words, exit 129.
//!
//! The global options are parsed with whole names only, as git's own (`git --vers` is
//! unknown too).

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use super::args::{parse_number, Args, Given};
use super::table::{Command, Id, Opt, SubOptions, GLOBAL_OPTIONS};

/// What the parser reads: one command's options and how its line is laid out.
#[derive(Clone, Copy, Debug)]
pub struct Grammar {
    pub options: &'static [Opt],
    /// Words taken first, before the options ([`Command::words`]).
    pub words: &'static [&'static str],
    /// Options may follow operands; otherwise the first operand ends them.
    pub options_anywhere: bool,
    /// Long options may be abbreviated to a unique prefix.
    pub abbreviations: bool,
    /// The option whose value lists the others (`mount -o`).
    pub sub_options: Option<&'static SubOptions>,
}

impl Grammar {
    /// The options before the command: whole names, and the command name ends them.
    pub const GLOBAL: Grammar = Grammar {
        options: GLOBAL_OPTIONS,
        words: &[],
        options_anywhere: false,
        abbreviations: false,
        sub_options: None,
    };

    /// The grammar of `cmd`'s line (the words after its name).
    pub fn of(cmd: &'static Command) -> Grammar {
        Grammar {
            options: cmd.options,
            words: cmd.words,
            options_anywhere: cmd.options_anywhere,
            abbreviations: true,
            sub_options: cmd.sub_options,
        }
    }
}

/// Why a command line was not parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// `-h` or `--help`: the caller prints the help.
    Help,
    /// git's message (printed as `error: <message>`), and whether the usage follows it
    /// (as git prints it after an unknown or ambiguous option, not after a bad value).
    Usage { message: String, usage: bool },
}

fn error(message: String) -> ParseError {
    ParseError::Usage {
        message,
        usage: false,
    }
}

fn error_with_usage(message: String) -> ParseError {
    ParseError::Usage {
        message,
        usage: true,
    }
}

/// How an option was named on the line, for git's messages: "switch `m'", "option
/// `format'", "option `no-progress'".
#[derive(Clone, Copy)]
enum Spelled<'a> {
    Short(u8),
    Long(&'a str),
    Negated(&'a str),
}

impl Spelled<'_> {
    fn describe(self) -> String {
        match self {
            Spelled::Short(c) => format!("switch `{}'", c as char),
            Spelled::Long(l) => format!("option `{l}'"),
            Spelled::Negated(l) => format!("option `no-{l}'"),
        }
    }
}

/// Parses the words after a command's name (or, with [`Grammar::GLOBAL`], after the
/// program's name: the first operand is then the command's name, and every word after
/// it an operand).
pub fn parse(g: &Grammar, argv: &[OsString]) -> Result<Args, ParseError> {
    let mut p = Parser {
        g,
        argv,
        next: 0,
        given: Vec::new(),
    };
    let word = argv
        .first()
        .and_then(|w| w.to_str())
        .and_then(|w| g.words.iter().find(|x| **x == w).copied());
    if word.is_some() {
        p.next = 1;
    }
    let mut operands = Vec::new();
    let mut options_done = false;
    while let Some(w) = argv.get(p.next) {
        p.next += 1;
        let b = w.as_bytes();
        if options_done {
            operands.push(w.clone());
        } else if b.first() != Some(&b'-') || b == b"-" {
            operands.push(w.clone());
            options_done = !g.options_anywhere;
        } else if b == b"--" || b == b"--end-of-options" {
            options_done = true;
        } else if let Some(long) = b.strip_prefix(b"--") {
            if long == b"help" {
                return Err(ParseError::Help);
            }
            p.long(long)?;
        } else {
            p.shorts(b.get(1..).unwrap_or_default())?;
        }
    }
    Ok(Args::new(g.options, p.given, word, operands))
}

struct Parser<'a> {
    g: &'a Grammar,
    argv: &'a [OsString],
    /// The index of the next word.
    next: usize,
    given: Vec<(Id, Given)>,
}

/// A long option matched by a prefix: which, under which long name, and whether negated.
#[derive(Clone, Copy)]
struct Candidate {
    index: usize,
    opt: &'static Opt,
    long: &'static str,
    negated: bool,
}

impl Parser<'_> {
    /// One `--word` (without its dashes), as git's `parse_long_opt`.
    fn long(&mut self, arg: &[u8]) -> Result<(), ParseError> {
        let text = String::from_utf8_lossy(arg).into_owned();
        let name_end = arg.iter().position(|&b| b == b'=').unwrap_or(arg.len());
        let (name, attached) = arg.split_at(name_end);
        let attached = attached.get(1..);
        let mut abbrev: Option<Candidate> = None;
        let mut ambiguous: Option<Candidate> = None;
        for (k, o) in self.g.options.iter().enumerate() {
            for long in o.longs() {
                let l = long.as_bytes();
                if name == l {
                    return self.apply(o, Spelled::Long(long), attached);
                }
                let mut candidate = None;
                if self.g.abbreviations && l.starts_with(name) {
                    candidate = Some(false);
                } else if !o.negatable() {
                    continue;
                } else if self.g.abbreviations && b"no-".starts_with(arg) {
                    // `--no` and `--n`: every negatable option, negated.
                    candidate = Some(true);
                } else if let Some(neg) = arg.strip_prefix(b"no-") {
                    let neg_name = neg.split(|&b| b == b'=').next().unwrap_or_default();
                    if neg_name == l {
                        let value = neg.get(l.len() + 1..);
                        return self.apply(o, Spelled::Negated(long), value);
                    }
                    if self.g.abbreviations && l.starts_with(neg) {
                        candidate = Some(true);
                    }
                }
                if let Some(negated) = candidate {
                    // Two names of one option are not ambiguous (`--branches, --heads`).
                    if abbrev.is_some_and(|a| a.index != k) {
                        ambiguous = abbrev;
                    }
                    abbrev = Some(Candidate {
                        index: k,
                        opt: o,
                        long,
                        negated,
                    });
                }
            }
        }
        if let (Some(a), Some(b)) = (ambiguous, abbrev) {
            let no = |c: Candidate| if c.negated { "no-" } else { "" };
            return Err(error_with_usage(format!(
                "ambiguous option: {text} (could be --{}{} or --{}{})",
                no(a),
                a.long,
                no(b),
                b.long
            )));
        }
        match abbrev {
            Some(c) if c.negated => self.apply(c.opt, Spelled::Negated(c.long), None),
            Some(c) => self.apply(c.opt, Spelled::Long(c.long), attached),
            None => Err(error_with_usage(format!("unknown option `{text}'"))),
        }
    }

    /// One `-abc` bundle (without its dash), as git's `parse_short_opt` loop.
    fn shorts(&mut self, bundle: &[u8]) -> Result<(), ParseError> {
        let mut at = 0;
        while let Some(&c) = bundle.get(at) {
            let Some(o) = self.g.options.iter().find(|o| o.short() == Some(c)) else {
                if at == 0 {
                    self.check_typos(bundle)?;
                }
                if c == b'h' {
                    return Err(ParseError::Help);
                }
                return Err(error_with_usage(if c.is_ascii() {
                    format!("unknown switch `{}'", c as char)
                } else {
                    format!(
                        "unknown non-ascii option in string: `-{}'",
                        String::from_utf8_lossy(bundle)
                    )
                }));
            };
            let rest = bundle.get(at + 1..).unwrap_or_default();
            if o.takes_value().is_some() {
                // The rest of the bundle is the value (`-mreason`, `-s7`).
                let attached = (!rest.is_empty()).then_some(rest);
                return self.apply(o, Spelled::Short(c), attached);
            }
            self.apply(o, Spelled::Short(c), None)?;
            if at == 0 && !rest.is_empty() {
                self.check_typos(bundle)?;
            }
            at += 1;
        }
        Ok(())
    }

    /// git's `check_typos`: `-verify` meant `--verify`.
    fn check_typos(&self, arg: &[u8]) -> Result<(), ParseError> {
        if !self.g.abbreviations || arg.len() < 3 {
            return Ok(());
        }
        let meant_long = arg.starts_with(b"no-")
            || self
                .g
                .options
                .iter()
                .flat_map(Opt::longs)
                .any(|l| l.as_bytes().starts_with(arg));
        if meant_long {
            return Err(error(format!(
                "did you mean `--{}` (with two dashes)?",
                String::from_utf8_lossy(arg)
            )));
        }
        Ok(())
    }

    /// Records option `o`, spelled `how`, with the value written attached to it, if any
    /// (git's `get_value`).
    fn apply(
        &mut self,
        o: &'static Opt,
        how: Spelled<'_>,
        attached: Option<&[u8]>,
    ) -> Result<(), ParseError> {
        if o.id == Id::Help {
            return Err(ParseError::Help);
        }
        let given = match (how, o.takes_value(), attached) {
            (Spelled::Negated(_), _, Some(_)) | (Spelled::Long(_), None, Some(_)) => {
                return Err(error(format!("{} takes no value", how.describe())));
            }
            (Spelled::Negated(_), _, None) => Given::Off,
            (_, None, _) => Given::On,
            (_, Some(true), None) => Given::On,
            (_, _, Some(v)) => Given::Value(OsString::from_vec(v.to_vec())),
            (_, Some(false), None) => match self.argv.get(self.next) {
                Some(v) => {
                    self.next += 1;
                    Given::Value(v.clone())
                }
                None => return Err(error(format!("{} requires a value", how.describe()))),
            },
        };
        self.record(o, how, given)
    }

    fn record(
        &mut self,
        o: &'static Opt,
        how: Spelled<'_>,
        given: Given,
    ) -> Result<(), ParseError> {
        if let Given::Value(v) = &given {
            if o.number && parse_number(v.as_bytes()).is_none() {
                // Named by its long name, as git's abbrev callback names `-s7x`'s `hash`.
                let how = o.longs().next().map_or(how, Spelled::Long);
                return Err(error(format!(
                    "{} expects a numerical value",
                    how.describe()
                )));
            }
            if let Some(so) = self.g.sub_options.filter(|so| so.option == o.id) {
                return self.sub_options(so, v.as_bytes());
            }
        }
        self.given.push((o.id, given));
        Ok(())
    }

    /// A `-o a,b=c` list: each item one of the other options, by its whole long name
    /// with `_` for `-`, or an alias; ignored items skipped.
    fn sub_options(&mut self, so: &SubOptions, list: &[u8]) -> Result<(), ParseError> {
        for item in list.split(|&b| b == b',').filter(|i| !i.is_empty()) {
            let name_end = item.iter().position(|&b| b == b'=').unwrap_or(item.len());
            let (name, value) = item.split_at(name_end);
            let value = value.get(1..);
            let name = String::from_utf8_lossy(name);
            let ignored = so.ignored.contains(&&*name)
                || so.ignored_prefixes.iter().any(|p| name.starts_with(p));
            if ignored {
                continue;
            }
            let long = match so.aliases.iter().find(|(a, _)| *a == name) {
                Some((_, long)) => (*long).to_owned(),
                None => name.replace('_', "-"),
            };
            let found = self.g.options.iter().find_map(|o| {
                let l = o.longs().find(|l| *l == long)?;
                (o.id != so.option).then_some((o, l))
            });
            let Some((o, l)) = found else {
                return Err(error_with_usage(format!(
                    "unknown option '{}' in -o {}",
                    String::from_utf8_lossy(item),
                    String::from_utf8_lossy(list)
                )));
            };
            let how = Spelled::Long(l);
            let given = match (o.takes_value(), value) {
                (None, Some(_)) => return Err(error(format!("{} takes no value", how.describe()))),
                (None | Some(true), None) => Given::On,
                (Some(false), None) => {
                    return Err(error(format!("{} requires a value", how.describe())))
                }
                (Some(_), Some(v)) => Given::Value(OsString::from_vec(v.to_vec())),
            };
            self.record(o, how, given)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::table::{find, opt, OptName, COMMANDS};

    fn words(line: &str) -> Vec<OsString> {
        line.split_whitespace().map(OsString::from).collect()
    }

    fn parse_cmd(cmd: &str, line: &str) -> Result<Args, ParseError> {
        parse(&Grammar::of(find(cmd).unwrap()), &words(line))
    }

    fn message(r: Result<Args, ParseError>) -> (String, bool) {
        match r {
            Err(ParseError::Usage { message, usage }) => (message, usage),
            other => panic!("not a usage error: {other:?}"),
        }
    }

    #[test]
    fn spellings_parse_into_names() {
        let o = |s| opt(Id::Head, s, "");
        let n = o("-d, --dereference").names();
        assert_eq!(
            n.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(),
            ["-d", "--dereference"]
        );
        assert!(n.iter().all(|n| n.value.is_none()));
        assert_eq!(
            (o("-d, --dereference").short(), o("--head").short()),
            (Some(b'd'), None)
        );
        let n = o("--format=<format>").names();
        assert_eq!(
            n,
            [OptName {
                name: "--format".into(),
                value: Some("<format>".into()),
                equals: true,
                optional: false,
                negation: false,
            }]
        );
        let n = o("-m <reason>").names();
        assert_eq!((n[0].name.as_str(), n[0].equals), ("-m", false));
        assert_eq!(o("-m <reason>").short(), Some(b'm'));
        let n = o("--[no-]progress").names();
        assert_eq!(
            n.iter()
                .map(|n| (n.name.as_str(), n.negation))
                .collect::<Vec<_>>(),
            [("--progress", false), ("--no-progress", true)]
        );
        assert_eq!(
            o("--[no-]progress").longs().collect::<Vec<_>>(),
            ["progress"]
        );
        // An optional value, written on the long name, is the short name's too.
        let h = o("-s, --hash[=<n>]");
        let n = h.names();
        assert_eq!(
            n.iter()
                .map(|n| (n.name.as_str(), n.value.as_deref(), n.equals, n.optional))
                .collect::<Vec<_>>(),
            [
                ("-s", Some("<n>"), false, true),
                ("--hash", Some("<n>"), true, true)
            ]
        );
        assert_eq!((h.short(), h.takes_value()), (Some(b's'), Some(true)));
        assert_eq!(o("--format=<format>").takes_value(), Some(false));
        assert_eq!(
            o("--branches, --heads").longs().collect::<Vec<_>>(),
            ["branches", "heads"]
        );
    }

    /// Within one command no two options share a name, a negation included.
    #[test]
    fn every_name_is_one_option() {
        let all = COMMANDS
            .iter()
            .map(|c| (c.name, c.options))
            .chain([("(global)", GLOBAL_OPTIONS)]);
        for (cmd, options) in all {
            let mut names: Vec<String> = options
                .iter()
                .flat_map(Opt::names)
                .map(|n| n.name)
                .collect();
            let n = names.len();
            names.sort();
            names.dedup();
            assert_eq!(names.len(), n, "{cmd}: a name is used twice: {names:?}");
            let mut ids: Vec<Id> = options.iter().map(|o| o.id).collect();
            ids.sort_by_key(|i| format!("{i:?}"));
            ids.dedup();
            assert_eq!(ids.len(), options.len(), "{cmd}: an Id is used twice");
            for o in options {
                assert!(
                    !o.names().is_empty() && o.names().iter().all(|n| n.name.starts_with('-')),
                    "{cmd}: {}",
                    o.spelling
                );
            }
        }
    }

    /// Every name of every option of every command (and the global ones) parses to that
    /// option, alone, with a value where it takes one; and every prefix of a long name
    /// gives that option when no other option's name begins so, and "ambiguous" when one
    /// does.
    #[test]
    fn every_table_entry_parses() {
        let grammars = COMMANDS
            .iter()
            .map(|c| (c.name, Grammar::of(c)))
            .chain([("(global)", Grammar::GLOBAL)]);
        for (cmd, g) in grammars {
            for o in g.options {
                // `-o`'s items are the other options (`every_option_is_an_o_item`).
                let listed = g.sub_options.is_some_and(|so| so.option == o.id);
                for n in o.names().into_iter().filter(|_| !listed) {
                    let mut line = vec![OsString::from(&n.name)];
                    let want = match (&n.value, n.negation) {
                        (_, true) => Given::Off,
                        (None, false) => Given::On,
                        (Some(_), false) if n.equals => {
                            line = vec![OsString::from(format!("{}=1", n.name))];
                            Given::Value("1".into())
                        }
                        (Some(_), false) if n.optional => {
                            line = vec![OsString::from(format!("{}1", n.name))];
                            Given::Value("1".into())
                        }
                        (Some(_), false) => {
                            line.push("1".into());
                            Given::Value("1".into())
                        }
                    };
                    if o.id == Id::Help {
                        assert_eq!(parse(&g, &line).unwrap_err(), ParseError::Help);
                        continue;
                    }
                    let a = parse(&g, &line).unwrap_or_else(|e| panic!("{cmd} {line:?}: {e:?}"));
                    assert_eq!(a.last(o.id), Some(&want), "{cmd} {line:?}");
                    assert!(a.operands().is_empty(), "{cmd} {line:?}");
                    // Its canonical spelling parses to the same.
                    let again = parse(&g, &a.canonical(&[])).unwrap();
                    assert_eq!(again.last(o.id), Some(&want), "{cmd} {line:?}");
                }
                for long in o.longs() {
                    for end in 1..long.len() {
                        let prefix = &long[..end];
                        let line = words(&format!("--{prefix}"));
                        let others = g
                            .options
                            .iter()
                            .filter(|p| p.id != o.id)
                            .filter(|p| {
                                p.longs().any(|l| l.starts_with(prefix))
                                    || (p.negatable() && "no-".starts_with(prefix))
                                    || (p.negatable()
                                        && prefix
                                            .strip_prefix("no-")
                                            .is_some_and(|n| p.longs().any(|l| l.starts_with(n))))
                            })
                            .count();
                        let exact = g.options.iter().any(|p| p.longs().any(|l| l == prefix));
                        let r = parse(&g, &line);
                        if !g.abbreviations {
                            assert!(exact || r.is_err(), "{cmd} {line:?}: abbreviated");
                        } else if exact {
                            assert!(
                                r.is_ok() || o.takes_value() == Some(false),
                                "{cmd} {line:?}"
                            );
                        } else if others == 0 {
                            let r = match o.takes_value() {
                                Some(false) => parse(&g, &words(&format!("--{prefix}=1"))),
                                _ => r,
                            };
                            let a = r.unwrap_or_else(|e| panic!("{cmd} {line:?}: {e:?}"));
                            assert!(a.last(o.id).is_some(), "{cmd} {line:?}");
                        } else {
                            let (m, usage) = message(r);
                            assert!(
                                m.starts_with("ambiguous option: ") && usage,
                                "{cmd} {line:?}: {m}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// Every option of a command with a `-o` list is one of its items, by its long name
    /// with `_` for `-`, and gives what the option itself gives.
    #[test]
    fn every_option_is_an_o_item() {
        for c in COMMANDS.iter().filter(|c| c.sub_options.is_some()) {
            let g = Grammar::of(c);
            let so = c.sub_options.unwrap();
            for o in c.options.iter().filter(|o| o.id != so.option) {
                let long = o.longs().next().unwrap();
                let (item, option) = match o.takes_value() {
                    Some(false) => (
                        format!("{}=1", long.replace('-', "_")),
                        format!("--{long}=1"),
                    ),
                    _ => (long.replace('-', "_"), format!("--{long}")),
                };
                let a = parse(&g, &[OsString::from("-o"), OsString::from(&item)]).unwrap();
                let b = parse(&g, &[OsString::from(&option)]).unwrap();
                assert_eq!(a.last(o.id), b.last(o.id), "{} -o {item}", c.name);
                assert!(a.last(o.id).is_some(), "{} -o {item}", c.name);
                assert_eq!(a.canonical(&[]), [OsString::from(option)]);
            }
        }
    }

    #[test]
    fn mount_takes_o_as_mount8_gives_it() {
        let a = parse_cmd(
            "mount",
            "-o ro,batch_window=50,over,,inode_cap=2048 wt wt/.git",
        )
        .unwrap();
        assert!(a.flag(Id::ReadOnly) && a.flag(Id::Over));
        assert_eq!(a.value(Id::BatchWindow), Some(std::ffi::OsStr::new("50")));
        assert_eq!(a.value(Id::InodeCap), Some(std::ffi::OsStr::new("2048")));
        assert_eq!(a.operands(), ["wt", "wt/.git"]);
        assert_eq!(
            a.canonical(&[]),
            [
                "--read-only",
                "--batch-window=50",
                "--over",
                "--inode-cap=2048"
            ]
        );
        // mount(8)'s own options and x-* are ignored; -o may be attached and repeated.
        let a = parse_cmd(
            "mount",
            "-orw,nosuid,nodev,noauto,user,x-systemd.automount,x-a=b -o read_only -o no_fsync",
        )
        .unwrap();
        assert_eq!(a.canonical(&[]), ["--read-only", "--no-fsync"]);
        let a = parse_cmd("mount", "-o ro --batch-window 9 -o batch_window=7").unwrap();
        assert_eq!(
            a.value(Id::BatchWindow),
            Some(std::ffi::OsStr::new("7")),
            "the last wins"
        );
        for (line, want, usage) in [
            (
                "-o rw,frobnicate",
                "unknown option 'frobnicate' in -o rw,frobnicate",
                true,
            ),
            (
                "-o batch_w=5",
                "unknown option 'batch_w=5' in -o batch_w=5",
                true,
            ),
            ("-o o=ro", "unknown option 'o=ro' in -o o=ro", true),
            ("-o ro=1", "option `read-only' takes no value", false),
            (
                "-o batch_window",
                "option `batch-window' requires a value",
                false,
            ),
            ("-o", "switch `o' requires a value", false),
        ] {
            assert_eq!(
                message(parse_cmd("mount", line)),
                (want.to_owned(), usage),
                "{line}"
            );
        }
    }

    #[test]
    fn bundles_prefixes_and_values_as_git() {
        let a = parse_cmd("show-ref", "-dq").unwrap();
        assert!(a.flag(Id::Dereference) && a.flag(Id::Quiet) && !a.flag(Id::Hash));
        let a = parse_cmd("show-ref", "--ver -q refs/heads/main").unwrap();
        assert!(a.flag(Id::Verify) && a.flag(Id::Quiet));
        assert_eq!(a.operands(), ["refs/heads/main"]);
        for line in ["--hash=7", "-s7", "--has=7", "-ds7"] {
            let a = parse_cmd("show-ref", line).unwrap();
            assert!(a.flag(Id::Hash), "{line}");
            assert_eq!(a.number(Id::Hash), Some(7), "{line}");
        }
        let a = parse_cmd("show-ref", "--hash 7").unwrap();
        assert_eq!((a.flag(Id::Hash), a.number(Id::Hash)), (true, None));
        assert_eq!(a.operands(), ["7"], "an optional value is only attached");
        let a = parse_cmd("show-ref", "--head --heads").unwrap();
        assert!(a.flag(Id::Head) && a.flag(Id::Branches), "exact names win");
        let a = parse_cmd("update-ref", "-mfoo -d refs/heads/x").unwrap();
        assert_eq!(a.value(Id::Message), Some(std::ffi::OsStr::new("foo")));
        let a = parse_cmd("update-ref", "-zm msg --std").unwrap();
        assert!(a.flag(Id::NulTerminated) && a.flag(Id::Stdin));
        assert_eq!(a.value(Id::Message), Some(std::ffi::OsStr::new("msg")));
        let a = parse_cmd("for-each-ref", "--form %(refname) --cou=2 --sort=-refname").unwrap();
        assert_eq!(
            a.value(Id::Format),
            Some(std::ffi::OsStr::new("%(refname)"))
        );
        assert_eq!(a.number(Id::Count), Some(2));
        let a = parse_cmd("unlock", "-fn").unwrap();
        assert!(a.flag(Id::Force) && a.flag(Id::DryRun));
        let a = parse_cmd("migrate", "--progress --no-prog").unwrap();
        assert_eq!(a.switch(Id::Progress), Some(false));
        let a = parse_cmd("migrate", "--no-progress --pro").unwrap();
        assert_eq!(a.switch(Id::Progress), Some(true));
    }

    #[test]
    fn mistakes_get_gits_words() {
        for (cmd, line, want, usage) in [
            (
                "show-ref",
                "--he",
                "ambiguous option: he (could be --head or --heads)",
                true,
            ),
            (
                "show-ref",
                "--he=1",
                "ambiguous option: he=1 (could be --head or --heads)",
                true,
            ),
            ("show-ref", "--bogus", "unknown option `bogus'", true),
            ("show-ref", "--bogus=1", "unknown option `bogus=1'", true),
            ("show-ref", "-x", "unknown switch `x'", true),
            ("show-ref", "-dx", "unknown switch `x'", true),
            (
                "show-ref",
                "--verify=1",
                "option `verify' takes no value",
                false,
            ),
            (
                "show-ref",
                "--ver=1",
                "option `verify' takes no value",
                false,
            ),
            (
                "show-ref",
                "-verify",
                "did you mean `--verify` (with two dashes)?",
                false,
            ),
            (
                "show-ref",
                "-no-head",
                "did you mean `--no-head` (with two dashes)?",
                false,
            ),
            ("show-ref", "-dverify", "unknown switch `v'", true),
            (
                "show-ref",
                "--hash=abc",
                "option `hash' expects a numerical value",
                false,
            ),
            (
                "show-ref",
                "-sq",
                "option `hash' expects a numerical value",
                false,
            ),
            (
                "show-ref",
                "--exists",
                "option `exists' requires a value",
                false,
            ),
            ("show-ref", "--no-tags", "unknown option `no-tags'", true),
            (
                "for-each-ref",
                "--format",
                "option `format' requires a value",
                false,
            ),
            (
                "for-each-ref",
                "--count=x",
                "option `count' expects a numerical value",
                false,
            ),
            (
                "for-each-ref",
                "--count=",
                "option `count' expects a numerical value",
                false,
            ),
            ("update-ref", "-m", "switch `m' requires a value", false),
            ("update-ref", "--no-m", "unknown option `no-m'", true),
            (
                "migrate",
                "--no-progress=1",
                "option `no-progress' takes no value",
                false,
            ),
            (
                "migrate",
                "--no",
                "ambiguous option: no (could be --no-reflogs or --no-progress)",
                true,
            ),
            (
                "compact",
                "-verbose",
                "did you mean `--verbose` (with two dashes)?",
                false,
            ),
        ] {
            assert_eq!(
                message(parse_cmd(cmd, line)),
                (want.to_owned(), usage),
                "{cmd} {line}"
            );
        }
        for line in ["-h", "--help", "-dh", "--head -h x"] {
            assert_eq!(
                parse_cmd("show-ref", line).unwrap_err(),
                ParseError::Help,
                "{line}"
            );
        }
        assert!(
            parse_cmd("show-ref", "--hel").is_err(),
            "--help is never abbreviated"
        );
    }

    #[test]
    fn operands_end_options_where_they_did() {
        // The first operand ends the options of most commands (as they parsed before).
        let a = parse_cmd("show-ref", "main -q").unwrap();
        assert!(!a.flag(Id::Quiet));
        assert_eq!(a.operands(), ["main", "-q"]);
        // `dump FILE --verify`, `status MNT --json`, `mount G M --read-only`.
        let a = parse_cmd("dump", "x.ref --verify").unwrap();
        assert!(a.flag(Id::Verify));
        assert_eq!(a.operands(), ["x.ref"]);
        // `--` and `--end-of-options` end them; `-` is an operand.
        let a = parse_cmd("show-ref", "-d -- -q").unwrap();
        assert!(a.flag(Id::Dereference) && !a.flag(Id::Quiet));
        assert_eq!(a.operands(), ["-q"]);
        let a = parse_cmd("dump", "--end-of-options --verify").unwrap();
        assert_eq!(a.operands(), ["--verify"]);
        let a = parse_cmd("status", "- --json").unwrap();
        assert!(a.flag(Id::Json));
        assert_eq!(a.operands(), ["-"]);
        // Leading words, only first.
        let a = parse_cmd("reflog", "show --no-abbrev main").unwrap();
        assert_eq!(
            (a.word(), a.operands()),
            (Some("show"), &["main".into()][..])
        );
        let a = parse_cmd("reflog", "main show").unwrap();
        assert_eq!((a.word(), a.operands().len()), (None, 2));
        // Bytes stay bytes.
        use std::os::unix::ffi::OsStrExt;
        let bad = OsString::from_vec(vec![b'r', 0xff, b'f']);
        let m = OsString::from_vec(vec![b'-', b'm', 0xfe]);
        let g = Grammar::of(find("update-ref").unwrap());
        let a = parse(&g, &[m, bad.clone()]).unwrap();
        assert_eq!(
            a.value(Id::Message).map(|v| v.as_bytes()),
            Some(&[0xfe][..])
        );
        assert_eq!(a.operands(), [bad]);
    }

    #[test]
    fn global_options_are_whole_and_end_at_the_command() {
        let g = Grammar::GLOBAL;
        let a = parse(&g, &words("-C a -C b --git-dir x -c k=v show-ref -d")).unwrap();
        assert_eq!(a.values(Id::ChangeDir), ["a", "b"]);
        assert_eq!(a.value(Id::GitDir), Some(std::ffi::OsStr::new("x")));
        assert_eq!(a.values(Id::Config), ["k=v"]);
        assert_eq!(a.operands(), ["show-ref", "-d"]);
        for line in ["--git-d=x show-ref", "--vers", "--bogus"] {
            assert!(parse(&g, &words(line)).is_err(), "{line}");
        }
        assert!(parse(&g, &words("--version")).unwrap().flag(Id::Version));
        assert_eq!(parse(&g, &words("-h")).unwrap_err(), ParseError::Help);
    }
}
