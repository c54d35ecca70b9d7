//! A parsed command line, as [`super::parse`] makes it from the table: the options given,
//! in order, each named by its [`Id`]; the command's leading word (`reflog exists`); the
//! operands, as the bytes they were given.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use super::table::{Id, Opt};

/// How one option was given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Given {
    /// A flag (`--verify`, `-d`), or an option whose value may be left out, without it
    /// (`--hash`).
    On,
    /// Turned off again (`--no-progress`).
    Off,
    /// With its value (`--format=%(refname)`, `-m reason`, `-s7`).
    Value(OsString),
}

/// The command line of one command, parsed.
#[derive(Debug)]
pub struct Args {
    options: &'static [Opt],
    given: Vec<(Id, Given)>,
    word: Option<&'static str>,
    operands: Vec<OsString>,
    invocation: Vec<OsString>,
}

impl Args {
    /// What [`super::parse::parse`] found, for a command whose options are `options`.
    pub fn new(
        options: &'static [Opt],
        given: Vec<(Id, Given)>,
        word: Option<&'static str>,
        operands: Vec<OsString>,
    ) -> Args {
        Args {
            options,
            given,
            word,
            operands,
            invocation: Vec::new(),
        }
    }

    /// Asking for an option the command does not have is a mistake in the code (its
    /// answer would always be "not given").
    fn check(&self, id: Id) {
        debug_assert!(
            self.options.iter().any(|o| o.id == id),
            "{id:?} is not an option of this command"
        );
    }

    /// How `id` was given last, if at all.
    pub fn last(&self, id: Id) -> Option<&Given> {
        self.check(id);
        self.given
            .iter()
            .rev()
            .find(|(i, _)| *i == id)
            .map(|(_, g)| g)
    }

    /// Whether `id` is on: given, and not turned off again after.
    pub fn flag(&self, id: Id) -> bool {
        self.switch(id) == Some(true)
    }

    /// `Some(true)` on, `Some(false)` turned off (`--no-progress`), `None` not given.
    pub fn switch(&self, id: Id) -> Option<bool> {
        self.last(id).map(|g| *g != Given::Off)
    }

    /// The value `id` was given last (`None` when not given, turned off, or given
    /// without its optional value).
    pub fn value(&self, id: Id) -> Option<&OsStr> {
        match self.last(id)? {
            Given::Value(v) => Some(v),
            _ => None,
        }
    }

    /// Every value `id` was given, in order, since it was last turned off (`-C a -C b`).
    pub fn values(&self, id: Id) -> Vec<&OsStr> {
        self.check(id);
        let mut out = Vec::new();
        for (i, g) in &self.given {
            match g {
                Given::Value(v) if *i == id => out.push(v.as_os_str()),
                Given::Off if *i == id => out.clear(),
                _ => {}
            }
        }
        out
    }

    /// The value of a numeric option (the parser has checked it is one).
    pub fn number(&self, id: Id) -> Option<i64> {
        parse_number(self.value(id)?.as_bytes())
    }

    /// Which of `ids` was given last, and how (`--no-abbrev` after `--abbrev=9`).
    pub fn last_of(&self, ids: &[Id]) -> Option<(Id, &Given)> {
        for id in ids {
            self.check(*id);
        }
        self.given
            .iter()
            .rev()
            .find(|(i, _)| ids.contains(i))
            .map(|(i, g)| (*i, g))
    }

    /// Whether any option was given at all.
    pub fn any_option(&self) -> bool {
        !self.given.is_empty()
    }

    /// The leading word (`exists` of `reflog exists REF`), if one was given.
    pub fn word(&self) -> Option<&'static str> {
        self.word
    }

    /// The operands, as given.
    pub fn operands(&self) -> &[OsString] {
        &self.operands
    }

    /// The operands, as given.
    pub fn into_operands(self) -> Vec<OsString> {
        self.operands
    }

    /// The words before the command's own (global options and the command's name).
    #[cfg_attr(
        not(feature = "fuse"),
        expect(dead_code, reason = "only mount runs itself again")
    )]
    pub fn invocation(&self) -> &[OsString] {
        &self.invocation
    }

    /// Sets what [`Args::invocation`] returns.
    pub fn set_invocation(&mut self, words: Vec<OsString>) {
        self.invocation = words;
    }

    /// The options given, each as one word in its canonical spelling (`--batch-window=50`,
    /// `--read-only`, `--no-progress`; a short-only option as `-m` and its value), in
    /// order, leaving out those in `except`. Parsed again, they give the same options
    /// (whatever abbreviation, bundle or `-o` list they were given as).
    pub fn canonical(&self, except: &[Id]) -> Vec<OsString> {
        let mut out = Vec::new();
        for (id, g) in self.given.iter().filter(|(i, _)| !except.contains(i)) {
            let Some(o) = self.options.iter().find(|o| o.id == *id) else {
                continue;
            };
            match (o.longs().next(), g) {
                (Some(long), Given::On) => out.push(OsString::from(format!("--{long}"))),
                (Some(long), Given::Off) => out.push(OsString::from(format!("--no-{long}"))),
                (Some(long), Given::Value(v)) => {
                    let mut w = format!("--{long}=").into_bytes();
                    w.extend_from_slice(v.as_bytes());
                    out.push(OsString::from_vec(w));
                }
                (None, g) => {
                    let short = o
                        .short()
                        .map_or(String::new(), |c| format!("-{}", c as char));
                    out.push(OsString::from(short));
                    if let Given::Value(v) = g {
                        out.push(v.clone());
                    }
                }
            }
        }
        out
    }
}

/// git's `OPT_INTEGER` reading of a value (C's `strtol`, base 10, all of it): leading
/// white space, an optional sign, at least one digit, nothing after. Saturates.
pub fn parse_number(v: &[u8]) -> Option<i64> {
    let v = match v.iter().position(|b| !b.is_ascii_whitespace()) {
        Some(i) => v.get(i..)?,
        None => return None,
    };
    let (negative, digits) = match v.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, v),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut n: i64 = 0;
    for d in digits {
        n = n.saturating_mul(10).saturating_add(i64::from(d - b'0'));
    }
    Some(if negative { -n } else { n })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::table::{find, opt};

    #[test]
    fn numbers_as_strtol_reads_them() {
        for (v, want) in [
            ("7", Some(7)),
            ("+2", Some(2)),
            (" 2", Some(2)),
            ("-1", Some(-1)),
            ("0", Some(0)),
            ("", None),
            (" ", None),
            ("2 ", None),
            ("x", None),
            ("7x", None),
            ("-", None),
            ("99999999999999999999999", Some(i64::MAX)),
        ] {
            assert_eq!(parse_number(v.as_bytes()), want, "{v:?}");
        }
    }

    #[test]
    fn the_last_given_counts() {
        static OPTS: &[Opt] = &[
            opt(Id::Progress, "--[no-]progress", ""),
            opt(Id::ChangeDir, "-C <path>", ""),
            opt(Id::Message, "-m <reason>", ""),
        ];
        let v = |s: &str| Given::Value(s.into());
        let a = Args::new(
            OPTS,
            vec![
                (Id::Progress, Given::On),
                (Id::ChangeDir, v("a")),
                (Id::Progress, Given::Off),
                (Id::ChangeDir, v("b")),
                (Id::Message, v("m")),
            ],
            None,
            vec![],
        );
        assert_eq!(a.switch(Id::Progress), Some(false));
        assert!(!a.flag(Id::Progress));
        assert_eq!(a.values(Id::ChangeDir), ["a", "b"]);
        assert_eq!(a.value(Id::ChangeDir), Some(OsStr::new("b")));
        assert_eq!(
            a.canonical(&[Id::ChangeDir]),
            ["--progress", "--no-progress", "-m", "m"]
        );
        assert!(find("mount").is_some());
    }
}
