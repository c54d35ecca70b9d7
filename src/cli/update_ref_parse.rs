//! The input language of `git update-ref --stdin` (git 2.47 `builtin/update-ref.c`),
//! parsed into ref edits grouped into transactions. Pure: object names are resolved
//! through a caller-supplied function, and nothing is written here.
//!
//! Lines (`-z`: the fields after `<ref>` are NUL-terminated instead, see git's docs):
//!
//! ```text
//! update SP <ref> SP <new-oid> [SP <old-oid>] LF
//! create SP <ref> SP <new-oid> LF
//! delete SP <ref> [SP <old-oid>] LF
//! verify SP <ref> [SP <old-oid>] LF
//! symref-update SP <ref> SP <new-target> [SP (ref SP <old-target> | oid SP <old-oid>)] LF
//! symref-create SP <ref> SP <new-target> LF
//! symref-delete SP <ref> [SP <old-target>] LF
//! symref-verify SP <ref> [SP <old-target>] LF
//! option SP no-deref LF
//! start LF | prepare LF | commit LF | abort LF
//! ```
//!
//! Error messages are git's (`main` prefixes them with `fatal: `).

use std::fmt;

use reftablefs::format::{HashKind, ObjectId};
use reftablefs::refname::{check_refname_format, RefnameFlags};
use reftablefs::transaction::{Expected, NewValue, RefEdit};
use reftablefs::{Error, Result};

/// Why parsing stopped: a malformed command (git's message; the command dies with it as
/// git's `die` does, `fatal: <message>` and exit 128 — it is not a failed transaction),
/// or an error reading the input or resolving an object name.
#[derive(Debug)]
pub enum ParseError {
    /// The input is not git's command language; git's message.
    Input(String),
    /// Reading the input or resolving an object name failed.
    Error(Error),
}

impl From<Error> for ParseError {
    fn from(e: Error) -> Self {
        ParseError::Error(e)
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Input(m) => f.write_str(m),
            ParseError::Error(e) => write!(f, "{e}"),
        }
    }
}

/// The result of parsing.
pub type ParseResult<T> = std::result::Result<T, ParseError>;

/// How a group of edits ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// `commit` (prints `commit: ok`).
    Commit,
    /// `abort` (prints `abort: ok`).
    Abort,
    /// End of input outside an explicit transaction: committed silently.
    Eof,
    /// End of input inside `start` (or after `prepare`): aborted silently, as git does.
    EofAbort,
}

/// One event of the input, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// An edit queued into the current transaction: its name, new value, expected old
    /// value and `no_deref` (`option no-deref` preceded it), the rest default.
    Edit(Box<RefEdit>),
    /// `start: ok`.
    Start,
    /// `prepare`: the transaction is validated (prints `prepare: ok`).
    Prepare,
    /// The current transaction ends.
    End(Ending),
}

fn die(msg: impl Into<String>) -> ParseError {
    ParseError::Input(msg.into())
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum State {
    Open,
    Started,
    Prepared,
    Closed,
}

/// Command table: name, number of arguments (fields in `-z` mode), state it moves to.
const COMMANDS: [(&str, usize, State); 13] = [
    ("update", 3, State::Open),
    ("create", 2, State::Open),
    ("delete", 2, State::Open),
    ("verify", 2, State::Open),
    ("symref-update", 4, State::Open),
    ("symref-create", 2, State::Open),
    ("symref-delete", 2, State::Open),
    ("symref-verify", 2, State::Open),
    ("option", 1, State::Open),
    ("start", 0, State::Started),
    ("prepare", 0, State::Prepared),
    ("abort", 0, State::Closed),
    ("commit", 0, State::Closed),
];

/// Reads one command's worth of input into `buf` (cleared first), as git does: a line
/// in text mode; in `-z` mode the command's first field plus up to `nargs - 1` more
/// NUL-terminated fields. Returns `false` at end of input.
pub fn read_unit(r: &mut dyn std::io::BufRead, z: bool, buf: &mut Vec<u8>) -> Result<bool> {
    buf.clear();
    let term = if z { 0 } else { b'\n' };
    let n = r.read_until(term, buf).map_err(|e| Error::io("stdin", e))?;
    if n == 0 {
        return Ok(false);
    }
    if z {
        let nargs = COMMANDS
            .iter()
            .find(|(name, args, _)| {
                buf.starts_with(name.as_bytes()) && buf.get(name.len()) == Some(&b' ') && *args > 0
            })
            .map_or(0, |c| c.1);
        for _ in 1..nargs {
            if r.read_until(0, buf).map_err(|e| Error::io("stdin", e))? == 0 {
                break;
            }
        }
    }
    Ok(true)
}

/// An incremental parser: feed it one unit (see [`read_unit`]) at a time, so that a
/// caller can answer `start`/`prepare`/`commit` before the next command arrives.
#[derive(Debug)]
pub struct StreamParser {
    z: bool,
    hash: HashKind,
    state: State,
    no_deref: bool,
    /// `update-ref --no-deref`: every command is `no-deref` (git's `default_flags`).
    default_no_deref: bool,
}

impl StreamParser {
    /// A parser for text (`z == false`) or NUL-terminated input.
    pub fn new(z: bool, hash: HashKind) -> Self {
        StreamParser {
            z,
            hash,
            state: State::Open,
            no_deref: false,
            default_no_deref: false,
        }
    }

    /// `update-ref --no-deref --stdin`: every command behaves as after `option no-deref`
    /// (so `symref-delete` and `symref-verify` are allowed).
    pub fn with_no_deref(mut self, no_deref: bool) -> Self {
        self.default_no_deref = no_deref;
        self
    }

    /// Parses one command. `Ok(None)` for `option` (it applies to the next command).
    pub fn feed(
        &mut self,
        unit: &[u8],
        resolve: &mut dyn FnMut(&[u8]) -> Result<Option<ObjectId>>,
    ) -> ParseResult<Option<Event>> {
        let term = if self.z { 0 } else { b'\n' };
        if unit.first() == Some(&term) {
            return Err(die("empty command in input"));
        }
        if unit.first().is_some_and(|b| b.is_ascii_whitespace()) {
            return Err(die(format!(
                "whitespace before command: {}",
                show_line(unit, term)
            )));
        }
        let cmd = COMMANDS.iter().find(|(name, args, _)| {
            unit.starts_with(name.as_bytes())
                && match unit.get(name.len()) {
                    Some(&c) => c == if *args > 0 { b' ' } else { term },
                    // A final command without its newline (text mode).
                    None => *args == 0 && !self.z,
                }
        });
        let Some(&(name, nargs, cmd_state)) = cmd else {
            return Err(die(format!("unknown command: {}", show_line(unit, term))));
        };
        let state = self.state;
        match state {
            State::Open | State::Started => {
                if state == State::Started && cmd_state == State::Started {
                    return Err(die("cannot restart ongoing transaction"));
                }
                if cmd_state >= state {
                    self.state = cmd_state;
                }
            }
            State::Prepared => {
                if cmd_state != State::Closed {
                    return Err(die("prepared transactions can only be closed"));
                }
                self.state = cmd_state;
            }
            State::Closed => {
                if cmd_state != State::Started {
                    return Err(die("transaction is closed"));
                }
                self.state = cmd_state;
            }
        }
        let mut p = Parser {
            input: unit,
            pos: (name.len() + usize::from(nargs > 0)).min(unit.len()),
            z: self.z,
            hash: self.hash,
            resolve,
            no_deref: self.no_deref || self.default_no_deref,
        };
        let event = p.command(name)?;
        self.no_deref = p.no_deref;
        Ok(event)
    }

    /// End of input: the implicit transaction ends, or an explicit one was left open.
    pub fn finish(&self) -> ParseResult<Option<Event>> {
        match self.state {
            State::Open => Ok(Some(Event::End(Ending::Eof))),
            State::Closed => Ok(None),
            State::Started | State::Prepared => Ok(Some(Event::End(Ending::EofAbort))),
        }
    }
}

/// Parses a whole input (see [`StreamParser`]); the tests' driver. `resolve` turns a non-empty object
/// name into an id (git's `repo_get_oid`); it returns `Ok(None)` for an unknown name.
#[cfg(test)]
pub fn parse(
    input: &[u8],
    nul_terminated: bool,
    hash: HashKind,
    resolve: &mut dyn FnMut(&[u8]) -> Result<Option<ObjectId>>,
) -> ParseResult<Vec<Event>> {
    let mut parser = StreamParser::new(nul_terminated, hash);
    let mut reader = std::io::Cursor::new(input);
    let mut unit = Vec::new();
    let mut events = Vec::new();
    while read_unit(&mut reader, nul_terminated, &mut unit)? {
        if let Some(e) = parser.feed(&unit, resolve)? {
            events.push(e);
        }
    }
    if let Some(e) = parser.finish()? {
        events.push(e);
    }
    Ok(events)
}

fn show_line(rest: &[u8], term: u8) -> String {
    let end = rest
        .iter()
        .position(|&b| b == term)
        .map_or(rest.len(), |i| i + 1);
    String::from_utf8_lossy(rest.get(..end).unwrap_or(rest)).into_owned()
}

struct Parser<'a, 'r> {
    input: &'a [u8],
    pos: usize,
    z: bool,
    hash: HashKind,
    resolve: &'r mut dyn FnMut(&[u8]) -> Result<Option<ObjectId>>,
    no_deref: bool,
}

impl Parser<'_, '_> {
    fn term(&self) -> u8 {
        if self.z {
            0
        } else {
            b'\n'
        }
    }

    fn peek(&self) -> Option<u8> {
        self.input.get(self.pos).copied()
    }

    fn rest_str(&self) -> String {
        show_line(self.input.get(self.pos..).unwrap_or_default(), self.term())
    }

    /// Text mode: one argument, possibly C-quoted, up to whitespace.
    fn text_arg(&mut self) -> ParseResult<Vec<u8>> {
        let rest = self.input.get(self.pos..).unwrap_or_default();
        if rest.first() == Some(&b'"') {
            let (value, used) = unquote_c_style(rest)
                .ok_or_else(|| die(format!("badly quoted argument: {}", self.rest_str())))?;
            self.pos += used;
            if self.peek().is_some_and(|b| !b.is_ascii_whitespace()) {
                return Err(die(format!(
                    "unexpected character after quoted argument: {}",
                    show_line(rest, b'\n')
                )));
            }
            return Ok(value);
        }
        let len = rest
            .iter()
            .position(|b| b.is_ascii_whitespace())
            .unwrap_or(rest.len());
        self.pos += len;
        Ok(rest.get(..len).unwrap_or_default().to_vec())
    }

    /// `-z` mode: everything up to the next NUL (not consumed).
    fn z_field(&mut self) -> Vec<u8> {
        let rest = self.input.get(self.pos..).unwrap_or_default();
        let len = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        self.pos += len;
        rest.get(..len).unwrap_or_default().to_vec()
    }

    /// The refname right after `command SP`.
    fn refname(&mut self) -> ParseResult<Option<Vec<u8>>> {
        let r = if self.z {
            self.z_field()
        } else {
            self.text_arg()?
        };
        if r.is_empty() {
            return Ok(None);
        }
        if check_refname_format(
            &r,
            RefnameFlags {
                allow_onelevel: true,
                refspec_pattern: false,
            },
        )
        .is_err()
        {
            return Err(die(format!(
                "invalid ref format: {}",
                String::from_utf8_lossy(&r)
            )));
        }
        Ok(Some(r))
    }

    /// The next argument after a delimiter: `None` if absent (or empty).
    fn next_arg(&mut self) -> ParseResult<Option<Vec<u8>>> {
        if self.z {
            if self.peek() != Some(0) {
                return Ok(None);
            }
            self.pos += 1;
            let v = self.z_field();
            return Ok((!v.is_empty()).then_some(v));
        }
        match self.peek() {
            None | Some(b'\n') => Ok(None),
            Some(b' ') => {
                self.pos += 1;
                let v = self.text_arg()?;
                Ok((!v.is_empty()).then_some(v))
            }
            Some(_) => Err(die(format!("expected SP but got: {}", self.rest_str()))),
        }
    }

    fn next_refname(&mut self) -> ParseResult<Option<Vec<u8>>> {
        if self.z {
            if self.peek() != Some(0) {
                return Ok(None);
            }
        } else {
            match self.peek() {
                None | Some(b'\n') => return Ok(None),
                Some(b' ') => {}
                Some(_) => return Err(die(format!("expected SP but got: {}", self.rest_str()))),
            }
        }
        self.pos += 1;
        self.refname()
    }

    fn get_oid(
        &mut self,
        arg: &[u8],
        what: &str,
        cmd: &str,
        refname: &str,
    ) -> ParseResult<ObjectId> {
        match (self.resolve)(arg)? {
            Some(id) => Ok(id),
            None => Err(die(format!(
                "{cmd} {refname}: invalid {what}: {}",
                String::from_utf8_lossy(arg)
            ))),
        }
    }

    /// git's `parse_next_oid`: `Ok(None)` when the argument is absent.
    fn next_oid(
        &mut self,
        cmd: &str,
        refname: &str,
        old: bool,
        allow_empty: bool,
    ) -> ParseResult<Option<ObjectId>> {
        let what = if old { "<old-oid>" } else { "<new-oid>" };
        let eof = || {
            die(format!(
                "{cmd} {refname}: unexpected end of input when reading {what}"
            ))
        };
        if self.pos >= self.input.len() {
            return Err(eof());
        }
        if !self.z {
            match self.peek() {
                None | Some(b'\n') => return Ok(None),
                Some(b' ') => {}
                Some(_) => {
                    return Err(die(format!(
                        "{cmd} {refname}: expected SP but got: {}",
                        self.rest_str()
                    )))
                }
            }
            self.pos += 1;
            let arg = self.text_arg()?;
            if arg.is_empty() {
                return Ok(Some(self.hash.null_id()));
            }
            return self.get_oid(&arg, what, cmd, refname).map(Some);
        }
        if self.peek() != Some(0) {
            return Err(die(format!(
                "{cmd} {refname}: expected NUL but got: {}",
                self.rest_str()
            )));
        }
        self.pos += 1;
        if self.pos >= self.input.len() {
            return Err(eof());
        }
        let arg = self.z_field();
        if !arg.is_empty() {
            return self.get_oid(&arg, what, cmd, refname).map(Some);
        }
        if allow_empty {
            eprintln!("warning: {cmd} {refname}: missing <new-oid>, treating as zero");
            return Ok(Some(self.hash.null_id()));
        }
        Ok(None)
    }

    /// Checks that the command ends here and consumes its terminator.
    fn end(&mut self, cmd: &str, refname: Option<&str>) -> ParseResult<()> {
        let term = self.term();
        match self.peek() {
            Some(b) if b == term => {
                self.pos += 1;
                Ok(())
            }
            // Text mode: a missing final newline is tolerated as end of input.
            None if !self.z => Ok(()),
            _ => Err(die(match refname {
                Some(r) => format!("{cmd} {r}: extra input: {}", self.rest_str()),
                None => format!("{cmd}: extra input: {}", self.rest_str()),
            })),
        }
    }

    /// An edit: `new` is `None` for a `verify`.
    fn edit(&mut self, name: Vec<u8>, new: Option<NewValue>, expected: Expected) -> Event {
        let no_deref = std::mem::take(&mut self.no_deref);
        Event::Edit(Box::new(RefEdit {
            name,
            new,
            expected,
            no_deref,
            ..RefEdit::default()
        }))
    }

    fn command(&mut self, cmd: &str) -> ParseResult<Option<Event>> {
        match cmd {
            "start" | "prepare" | "commit" | "abort" => {
                self.end(cmd, None)?;
                Ok(Some(match cmd {
                    "start" => Event::Start,
                    "prepare" => Event::Prepare,
                    "commit" => Event::End(Ending::Commit),
                    _ => Event::End(Ending::Abort),
                }))
            }
            "option" => {
                let rest = self.input.get(self.pos..).unwrap_or_default();
                let term = self.term();
                let ok = rest.starts_with(b"no-deref")
                    && (rest.get(8) == Some(&term) || (rest.len() == 8 && !self.z));
                if ok {
                    self.no_deref = true;
                    return Ok(None);
                }
                Err(die(format!("option unknown: {}", self.rest_str())))
            }
            _ => self.ref_command(cmd).map(Some),
        }
    }

    fn ref_command(&mut self, cmd: &str) -> ParseResult<Event> {
        let Some(name) = self.refname()? else {
            return Err(die(format!("{cmd}: missing <ref>")));
        };
        let r = String::from_utf8_lossy(&name).into_owned();
        let null = self.hash.null_id();
        let event = match cmd {
            "update" => {
                let new = self
                    .next_oid(cmd, &r, false, true)?
                    .ok_or_else(|| die(format!("update {r}: missing <new-oid>")))?;
                let old = self.next_oid(cmd, &r, true, false)?;
                self.end(cmd, Some(&r))?;
                let old = match old {
                    None => Expected::Any,
                    Some(o) if o == null => Expected::MustNotExist,
                    Some(o) => Expected::Oid(o),
                };
                let new = if new == null {
                    Some(NewValue::Delete)
                } else {
                    Some(NewValue::Oid(new))
                };
                self.edit(name, new, old)
            }
            "create" => {
                let new = self
                    .next_oid(cmd, &r, false, false)?
                    .ok_or_else(|| die(format!("create {r}: missing <new-oid>")))?;
                if new == null {
                    return Err(die(format!("create {r}: zero <new-oid>")));
                }
                self.end(cmd, Some(&r))?;
                self.edit(name, Some(NewValue::Oid(new)), Expected::MustNotExist)
            }
            "delete" => {
                let old = match self.next_oid(cmd, &r, true, false)? {
                    None => Expected::Any,
                    Some(o) if o == null => return Err(die(format!("delete {r}: zero <old-oid>"))),
                    Some(o) => Expected::Oid(o),
                };
                self.end(cmd, Some(&r))?;
                self.edit(name, Some(NewValue::Delete), old)
            }
            "verify" => {
                let old = match self.next_oid(cmd, &r, true, false)? {
                    None => Expected::MustNotExist,
                    Some(o) if o == null => Expected::MustNotExist,
                    Some(o) => Expected::Oid(o),
                };
                self.end(cmd, Some(&r))?;
                self.edit(name, None, old)
            }
            "symref-update" => {
                let target = self
                    .next_refname()?
                    .ok_or_else(|| die(format!("symref-update {r}: missing <new-target>")))?;
                let old = match self.next_arg()? {
                    None => Expected::Any,
                    Some(kind) => {
                        let value = self
                            .next_arg()?
                            .ok_or_else(|| die(format!("symref-update {r}: expected old value")))?;
                        let value_s = String::from_utf8_lossy(&value).into_owned();
                        match kind.as_slice() {
                            b"oid" => {
                                let id = (self.resolve)(&value)?.ok_or_else(|| {
                                    die(format!("symref-update {r}: invalid oid: {value_s}"))
                                })?;
                                if id == null {
                                    Expected::MustNotExist
                                } else {
                                    Expected::Oid(id)
                                }
                            }
                            b"ref" => {
                                let flags = RefnameFlags {
                                    allow_onelevel: true,
                                    refspec_pattern: false,
                                };
                                if check_refname_format(&value, flags).is_err() {
                                    return Err(die(format!(
                                        "symref-update {r}: invalid ref: {value_s}"
                                    )));
                                }
                                Expected::Symref(value)
                            }
                            other => {
                                return Err(die(format!(
                                    "symref-update {r}: invalid arg '{}' for old value",
                                    String::from_utf8_lossy(other)
                                )))
                            }
                        }
                    }
                };
                self.end(cmd, Some(&r))?;
                self.edit(name, Some(NewValue::Symref(target)), old)
            }
            "symref-create" => {
                let target = self
                    .next_refname()?
                    .ok_or_else(|| die(format!("symref-create {r}: missing <new-target>")))?;
                self.end(cmd, Some(&r))?;
                self.edit(name, Some(NewValue::Symref(target)), Expected::MustNotExist)
            }
            "symref-delete" | "symref-verify" => {
                if !self.no_deref {
                    return Err(die(format!("{cmd}: cannot operate with deref mode")));
                }
                let target = self.next_refname()?;
                self.end(cmd, Some(&r))?;
                if cmd == "symref-delete" {
                    let old = target.map_or(Expected::Any, Expected::Symref);
                    self.edit(name, Some(NewValue::Delete), old)
                } else {
                    let old = target.map_or(Expected::MustNotExist, Expected::Symref);
                    self.edit(name, None, old)
                }
            }
            _ => return Err(die(format!("unknown command: {cmd}"))),
        };
        Ok(event)
    }
}

/// git's `unquote_c_style`: a `"..."` string with C escapes (`\n`, `\t`, `\"`, `\\`,
/// octal `\ooo`, …). Returns the value and the bytes consumed, or `None` if malformed.
pub fn unquote_c_style(s: &[u8]) -> Option<(Vec<u8>, usize)> {
    if s.first() != Some(&b'"') {
        return None;
    }
    let mut out = Vec::new();
    let mut i = 1;
    loop {
        let c = *s.get(i)?;
        i += 1;
        match c {
            b'"' => return Some((out, i)),
            b'\\' => {
                let e = *s.get(i)?;
                i += 1;
                let v = match e {
                    b'a' => 7,
                    b'b' => 8,
                    b'f' => 12,
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'v' => 11,
                    b'\\' | b'"' => e,
                    b'0'..=b'3' => {
                        let d1 = *s.get(i)?;
                        let d2 = *s.get(i + 1)?;
                        if !(b'0'..=b'7').contains(&d1) || !(b'0'..=b'7').contains(&d2) {
                            return None;
                        }
                        i += 2;
                        ((e - b'0') << 6) | ((d1 - b'0') << 3) | (d2 - b'0')
                    }
                    _ => return None,
                };
                out.push(v);
            }
            b'\n' => return None,
            other => out.push(other),
        }
    }
}

/// Checks git's rule that a ref appears at most once per transaction:
/// `multiple updates for ref '<name>' not allowed`.
pub fn reject_duplicates(edits: &[RefEdit]) -> Result<()> {
    let mut names: Vec<&[u8]> = edits.iter().map(|e| e.name.as_slice()).collect();
    names.sort_unstable();
    for pair in names.windows(2) {
        if let [a, b] = pair {
            if a == b {
                return Err(Error::Transaction(format!(
                    "multiple updates for ref '{}' not allowed",
                    String::from_utf8_lossy(a)
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> ObjectId {
        ObjectId::from_bytes(&[n; 20]).unwrap()
    }

    fn run(input: &str, z: bool) -> ParseResult<Vec<Event>> {
        let mut resolve = |arg: &[u8]| -> Result<Option<ObjectId>> {
            Ok(match arg {
                b"main" => Some(id(7)),
                other => ObjectId::from_hex(other, HashKind::Sha1),
            })
        };
        parse(input.as_bytes(), z, HashKind::Sha1, &mut resolve)
    }

    /// A `verify`: no new value.
    const VERIFY: Option<NewValue> = None;

    fn edit(name: &str, new: impl Into<Option<NewValue>>, expected: Expected) -> Event {
        Event::Edit(Box::new(RefEdit {
            name: name.as_bytes().to_vec(),
            new: new.into(),
            expected,
            ..RefEdit::default()
        }))
    }

    fn hx(n: u8) -> String {
        id(n).to_hex()
    }

    #[test]
    fn text_commands() {
        let zero = "0".repeat(40);
        let input = format!(
            "update refs/heads/a {a}\nupdate refs/heads/b {a} {b}\nupdate refs/heads/c {zero}\nupdate refs/heads/d {a} {zero}\n\
             create refs/heads/e main\ndelete refs/heads/f\ndelete refs/heads/g {b}\nverify refs/heads/h\nverify refs/heads/i {a}\n\
             symref-update HEAD refs/heads/a\nsymref-update HEAD refs/heads/a ref refs/heads/b\nsymref-update HEAD refs/heads/a oid {b}\n\
             symref-create refs/s refs/heads/a\n",
            a = hx(1),
            b = hx(2)
        );
        let ev = run(&input, false).unwrap();
        assert_eq!(
            ev,
            vec![
                edit("refs/heads/a", NewValue::Oid(id(1)), Expected::Any),
                edit("refs/heads/b", NewValue::Oid(id(1)), Expected::Oid(id(2))),
                edit("refs/heads/c", NewValue::Delete, Expected::Any),
                edit("refs/heads/d", NewValue::Oid(id(1)), Expected::MustNotExist),
                edit("refs/heads/e", NewValue::Oid(id(7)), Expected::MustNotExist),
                edit("refs/heads/f", NewValue::Delete, Expected::Any),
                edit("refs/heads/g", NewValue::Delete, Expected::Oid(id(2))),
                edit("refs/heads/h", VERIFY, Expected::MustNotExist),
                edit("refs/heads/i", VERIFY, Expected::Oid(id(1))),
                edit(
                    "HEAD",
                    NewValue::Symref(b"refs/heads/a".to_vec()),
                    Expected::Any
                ),
                edit(
                    "HEAD",
                    NewValue::Symref(b"refs/heads/a".to_vec()),
                    Expected::Symref(b"refs/heads/b".to_vec())
                ),
                edit(
                    "HEAD",
                    NewValue::Symref(b"refs/heads/a".to_vec()),
                    Expected::Oid(id(2))
                ),
                edit(
                    "refs/s",
                    NewValue::Symref(b"refs/heads/a".to_vec()),
                    Expected::MustNotExist
                ),
                Event::End(Ending::Eof),
            ]
        );
    }

    #[test]
    fn options_transactions_and_quoting() {
        let input = format!(
            "start\noption no-deref\nsymref-delete HEAD refs/heads/a\nupdate \"refs/heads/q\\165\" {a}\nprepare\ncommit\nstart\nabort\n",
            a = hx(1)
        );
        let ev = run(&input, false).unwrap();
        assert_eq!(ev.len(), 7);
        assert_eq!(ev[0], Event::Start);
        assert_eq!(
            ev[1],
            Event::Edit(Box::new(RefEdit {
                name: b"HEAD".to_vec(),
                new: Some(NewValue::Delete),
                expected: Expected::Symref(b"refs/heads/a".to_vec()),
                no_deref: true,
                ..RefEdit::default()
            }))
        );
        assert_eq!(
            ev[2],
            edit("refs/heads/qu", NewValue::Oid(id(1)), Expected::Any),
            "no-deref is per command"
        );
        assert_eq!(
            &ev[3..],
            [
                Event::Prepare,
                Event::End(Ending::Commit),
                Event::Start,
                Event::End(Ending::Abort)
            ]
        );
    }

    #[test]
    fn nul_terminated_mode() {
        let a = hx(1);
        let input = format!(
            "update refs/heads/a\0{a}\0\0create refs/heads/b\0{a}\0delete refs/heads/c\0\0verify refs/heads/d\0{a}\0\
             update refs/heads/e\0\0\0symref-update HEAD\0refs/heads/a\0ref\0refs/heads/b\0"
        );
        let ev = run(&input, true).unwrap();
        assert_eq!(
            ev,
            vec![
                edit("refs/heads/a", NewValue::Oid(id(1)), Expected::Any),
                edit("refs/heads/b", NewValue::Oid(id(1)), Expected::MustNotExist),
                edit("refs/heads/c", NewValue::Delete, Expected::Any),
                edit("refs/heads/d", VERIFY, Expected::Oid(id(1))),
                edit("refs/heads/e", NewValue::Delete, Expected::Any),
                edit(
                    "HEAD",
                    NewValue::Symref(b"refs/heads/a".to_vec()),
                    Expected::Symref(b"refs/heads/b".to_vec())
                ),
                Event::End(Ending::Eof),
            ]
        );
    }

    #[test]
    fn errors_use_gits_messages() {
        let a = hx(1);
        let cases = [
            ("\n".to_string(), "empty command in input"),
            (" update x\n".to_string(), "whitespace before command"),
            (
                "frobnicate x\n".to_string(),
                "unknown command: frobnicate x",
            ),
            (
                "update refs/heads/a\n".to_string(),
                "update refs/heads/a: missing <new-oid>",
            ),
            (
                "update refs/heads/a..b 1\n".to_string(),
                "invalid ref format: refs/heads/a..b",
            ),
            (
                "update refs/heads/a nosuch\n".to_string(),
                "update refs/heads/a: invalid <new-oid>: nosuch",
            ),
            (
                format!("update refs/heads/a {a} {a} x\n"),
                "update refs/heads/a: extra input:  x",
            ),
            (
                format!("create refs/heads/a {}\n", "0".repeat(40)),
                "create refs/heads/a: zero <new-oid>",
            ),
            (
                format!("delete refs/heads/a {}\n", "0".repeat(40)),
                "delete refs/heads/a: zero <old-oid>",
            ),
            (
                "symref-delete HEAD\n".to_string(),
                "symref-delete: cannot operate with deref mode",
            ),
            (
                "symref-update HEAD refs/heads/a bogus x\n".to_string(),
                "invalid arg 'bogus' for old value",
            ),
            (
                "symref-update HEAD refs/heads/a ref\n".to_string(),
                "symref-update HEAD: expected old value",
            ),
            ("option frob\n".to_string(), "option unknown: frob"),
            (
                "start\nstart\n".to_string(),
                "cannot restart ongoing transaction",
            ),
            (
                "start\nprepare\nupdate x 1\n".to_string(),
                "prepared transactions can only be closed",
            ),
            (
                "start\ncommit\ncommit\n".to_string(),
                "transaction is closed",
            ),
            (
                "update \"refs/heads/a\n".to_string(),
                "badly quoted argument",
            ),
        ];
        for (input, want) in cases {
            let e = run(&input, false).unwrap_err().to_string();
            assert!(e.contains(want), "{input:?}: got {e:?}, want {want:?}");
        }
        let e = run("update refs/heads/a\0", true).unwrap_err().to_string();
        assert!(
            e.contains("unexpected end of input when reading <new-oid>"),
            "{e}"
        );
    }

    #[test]
    fn duplicates_are_rejected() {
        let a = hx(1);
        let ev = run(
            &format!("update refs/heads/m {a}\nupdate refs/heads/m {a}\n"),
            false,
        )
        .unwrap();
        let edits: Vec<RefEdit> = ev
            .into_iter()
            .filter_map(|e| match e {
                Event::Edit(e) => Some(*e),
                _ => None,
            })
            .collect();
        assert_eq!(
            reject_duplicates(&edits).unwrap_err().to_string(),
            "multiple updates for ref 'refs/heads/m' not allowed"
        );
        assert!(reject_duplicates(&edits[..1]).is_ok());
    }

    #[test]
    fn unquote() {
        assert_eq!(
            unquote_c_style(b"\"a\\tb\\\"c\\101\" rest"),
            Some((b"a\tb\"cA".to_vec(), 13))
        );
        assert_eq!(unquote_c_style(b"\"open"), None);
        assert_eq!(unquote_c_style(b"\"bad\\q\""), None);
    }

    proptest::proptest! {
        #[test]
        fn parser_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..120), z: bool) {
            let mut resolve = |_: &[u8]| -> Result<Option<ObjectId>> { Ok(Some(id(1))) };
            let _ = parse(&bytes, z, HashKind::Sha1, &mut resolve);
        }
    }
}
