//! The files backend's text formats: loose ref files, `packed-refs` and reflog lines.
//!
//! Pure functions, bytes in and values out, no I/O; reading a whole store from disk is
//! the job of the submodule `walk`. Used by `migrate` (reading a
//! files-backend repository) and by the FUSE adapter (serving and parsing the loose-ref
//! view). Every parser follows git 2.47's own reader (`parse_loose_ref_contents`,
//! `refs/packed-backend.c`, `show_one_reflog_ent`) and never panics: bad input yields a
//! [`ParseError`] that says what was wrong and where (line number, byte offset), which
//! [`ParseError::in_file`] turns into a crate [`Error`] naming the file or ref.

use std::fmt;

use crate::format::{HashKind, LogRecord, ObjectId};
use crate::Error;

mod walk;

pub use walk::{
    read_files_backend, read_loose_refs, read_reflogs, FilesRefs, LooseOverPacked, Progress,
};

/// What went wrong while parsing files-backend text, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line number, or 0 for single-value contents (a loose ref file).
    pub line: usize,
    /// Byte offset of the offending line (or value) in the input.
    pub offset: usize,
    /// What was wrong.
    pub what: String,
}

impl ParseError {
    fn new(line: usize, offset: usize, what: impl Into<String>) -> Self {
        ParseError {
            line,
            offset,
            what: what.into(),
        }
    }

    /// Turns this into a crate error naming `file` (a path or a ref name).
    pub fn in_file(self, file: impl Into<String>) -> Error {
        Error::Format {
            file: file.into(),
            offset: self.offset as u64,
            what: self.to_string(),
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "line {}: {}", self.line, self.what)
        } else {
            f.write_str(&self.what)
        }
    }
}

impl std::error::Error for ParseError {}

/// git's `isspace` (its own ctype table: space, `\t`, `\n`, `\r`).
fn is_git_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// Shows at most 40 bytes of `bytes` for an error message.
fn excerpt(bytes: &[u8]) -> String {
    let cut = bytes.get(..40).unwrap_or(bytes);
    let mut s = String::from_utf8_lossy(cut).escape_debug().to_string();
    if cut.len() < bytes.len() {
        s.push('…');
    }
    s
}

/// Parses `hex_len` hex digits at the start of `bytes`.
fn oid_prefix(bytes: &[u8], hash: HashKind) -> Option<ObjectId> {
    ObjectId::from_hex(bytes.get(..hash.hex_len())?, hash)
}

// ---------------------------------------------------------------------------------------
// Loose ref files
// ---------------------------------------------------------------------------------------

/// The value held by a loose ref file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LooseRef {
    /// A hex object id.
    Oid(ObjectId),
    /// `ref: <target>`: a symbolic ref.
    Symref(Vec<u8>),
}

/// Parses a loose ref file's content as git does (`read_ref_internal` +
/// `parse_loose_ref_contents`): trailing whitespace is trimmed; `ref:` followed by
/// optional whitespace and the target is a symref; otherwise the content must start with
/// an object id of the repository's hash length, followed by the end, NUL or whitespace
/// (`FETCH_HEAD`-style trailing data is allowed and ignored).
///
/// The symref target is not validated as a refname; callers check it.
pub fn parse_loose_ref(content: &[u8], hash: HashKind) -> Result<LooseRef, ParseError> {
    // git reads the file into a C string: everything from the first NUL on is ignored.
    let content = match content.iter().position(|&b| b == 0) {
        Some(nul) => content.get(..nul).unwrap_or_default(),
        None => content,
    };
    let end = content
        .iter()
        .rposition(|&b| !is_git_space(b))
        .map_or(0, |i| i + 1);
    let content = content.get(..end).unwrap_or_default();
    if let Some(rest) = content.strip_prefix(b"ref:") {
        let start = rest
            .iter()
            .position(|&b| !is_git_space(b))
            .unwrap_or(rest.len());
        let target = rest.get(start..).unwrap_or_default();
        if target.is_empty() {
            return Err(ParseError::new(
                0,
                0,
                "symbolic ref without a target ('ref:' alone)",
            ));
        }
        return Ok(LooseRef::Symref(target.to_vec()));
    }
    let Some(id) = oid_prefix(content, hash) else {
        return Err(ParseError::new(
            0,
            0,
            format!(
                "expected {} hex digits or 'ref: <target>', found '{}'",
                hash.hex_len(),
                excerpt(content)
            ),
        ));
    };
    match content.get(hash.hex_len()) {
        None => Ok(LooseRef::Oid(id)),
        Some(&b) if is_git_space(b) => Ok(LooseRef::Oid(id)),
        Some(_) => Err(ParseError::new(
            0,
            hash.hex_len(),
            format!("object id followed by garbage: '{}'", excerpt(content)),
        )),
    }
}

/// Appends a loose ref file's content as git writes it: `<hex>\n` or `ref: <target>\n`.
pub fn render_loose_ref(value: &LooseRef, out: &mut Vec<u8>) {
    match value {
        LooseRef::Oid(id) => id.write_hex(out),
        LooseRef::Symref(target) => {
            out.extend_from_slice(b"ref: ");
            out.extend_from_slice(target);
        }
    }
    out.push(b'\n');
}

// ---------------------------------------------------------------------------------------
// packed-refs
// ---------------------------------------------------------------------------------------

/// The header git 2.47 writes (note the trailing space).
pub const PACKED_REFS_HEADER: &[u8] = b"# pack-refs with: peeled fully-peeled sorted \n";

/// One record of a `packed-refs` file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedRef {
    pub name: Vec<u8>,
    pub id: ObjectId,
    /// The `^<oid>` line that followed, if any.
    pub peeled: Option<ObjectId>,
}

/// One record lent by [`PackedRefsParser`], borrowing the name from the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackedEntry<'a> {
    pub name: &'a [u8],
    pub id: ObjectId,
    pub peeled: Option<ObjectId>,
    /// 1-based line number of the record's line.
    pub line: usize,
}

/// The traits named in a `packed-refs` header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PackedTraits {
    pub peeled: bool,
    pub fully_peeled: bool,
    pub sorted: bool,
}

/// A streaming, allocation-free parser of `packed-refs` content. Records come in file
/// order; check [`PackedRefsParser::traits`] for `sorted` (or use [`parse_packed_refs`]).
#[derive(Debug)]
pub struct PackedRefsParser<'a> {
    buf: &'a [u8],
    pos: usize,
    line: usize,
    hash: HashKind,
    traits: PackedTraits,
    failed: bool,
}

impl<'a> PackedRefsParser<'a> {
    /// Reads the optional header line; records follow through `Iterator::next`.
    pub fn new(buf: &'a [u8], hash: HashKind) -> Result<Self, ParseError> {
        let mut p = PackedRefsParser {
            buf,
            pos: 0,
            line: 0,
            hash,
            traits: PackedTraits::default(),
            failed: false,
        };
        if buf.first() == Some(&b'#') {
            let (line, _) = p.take_line()?;
            if let Some(traits) = line.strip_prefix(b"# pack-refs with:") {
                for t in traits.split(|&b| b == b' ').filter(|t| !t.is_empty()) {
                    match t {
                        b"peeled" => p.traits.peeled = true,
                        b"fully-peeled" => p.traits.fully_peeled = true,
                        b"sorted" => p.traits.sorted = true,
                        _ => {}
                    }
                }
            }
            // Any other comment line is ignored, as git does.
        }
        Ok(p)
    }

    /// The traits of the header (all false when there is none).
    pub fn traits(&self) -> PackedTraits {
        self.traits
    }

    /// Takes the next LF-terminated line (without its LF) and its start offset.
    fn take_line(&mut self) -> Result<(&'a [u8], usize), ParseError> {
        let start = self.pos;
        let rest = self.buf.get(start..).unwrap_or_default();
        self.line += 1;
        match rest.iter().position(|&b| b == b'\n') {
            Some(nl) => {
                self.pos = start + nl + 1;
                Ok((rest.get(..nl).unwrap_or_default(), start))
            }
            None => Err(ParseError::new(
                self.line,
                start,
                format!("unterminated line in packed-refs: '{}'", excerpt(rest)),
            )),
        }
    }

    fn record(&mut self) -> Result<Option<PackedEntry<'a>>, ParseError> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let (line, off) = self.take_line()?;
        let line_no = self.line;
        let hex = self.hash.hex_len();
        let bad = |what: &str| {
            ParseError::new(
                line_no,
                off,
                format!("{what} in packed-refs: '{}'", excerpt(line)),
            )
        };
        if line.first() == Some(&b'^') {
            return Err(bad("peeled line without a preceding ref"));
        }
        let id = oid_prefix(line, self.hash).ok_or_else(|| bad("unexpected line"))?;
        if line.get(hex) != Some(&b' ') {
            return Err(bad("unexpected line"));
        }
        let name = line.get(hex + 1..).unwrap_or_default();
        if name.is_empty() {
            return Err(bad("record without a refname"));
        }
        let mut peeled = None;
        if self.buf.get(self.pos) == Some(&b'^') {
            let (pline, poff) = self.take_line()?;
            let body = pline.get(1..).unwrap_or_default();
            match ObjectId::from_hex(body, self.hash) {
                Some(p) => peeled = Some(p),
                None => {
                    return Err(ParseError::new(
                        self.line,
                        poff,
                        format!("malformed peeled line in packed-refs: '{}'", excerpt(pline)),
                    ))
                }
            }
        }
        Ok(Some(PackedEntry {
            name,
            id,
            peeled,
            line: line_no,
        }))
    }
}

impl<'a> Iterator for PackedRefsParser<'a> {
    type Item = Result<PackedEntry<'a>, ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match self.record() {
            Ok(Some(e)) => Some(Ok(e)),
            Ok(None) => None,
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// Parses a whole `packed-refs` file into records sorted by refname (git sorts
/// unsorted input in memory). Duplicate names are an error.
pub fn parse_packed_refs(buf: &[u8], hash: HashKind) -> Result<Vec<PackedRef>, ParseError> {
    let mut refs = Vec::new();
    let mut lines = Vec::new();
    let mut sorted = true;
    for entry in PackedRefsParser::new(buf, hash)? {
        let e = entry?;
        if let Some(last) = refs.last() {
            let last: &PackedRef = last;
            if last.name.as_slice() >= e.name {
                sorted = false;
            }
        }
        refs.push(PackedRef {
            name: e.name.to_vec(),
            id: e.id,
            peeled: e.peeled,
        });
        lines.push(e.line);
    }
    if !sorted {
        let mut order: Vec<usize> = (0..refs.len()).collect();
        order.sort_by(|&a, &b| {
            let na = refs.get(a).map(|r| r.name.as_slice());
            let nb = refs.get(b).map(|r| r.name.as_slice());
            na.cmp(&nb)
        });
        let mut taken: Vec<Option<PackedRef>> = refs.into_iter().map(Some).collect();
        let mut out: Vec<PackedRef> = Vec::with_capacity(taken.len());
        for i in order {
            let Some(r) = taken.get_mut(i).and_then(Option::take) else {
                continue;
            };
            if out.last().is_some_and(|l| l.name == r.name) {
                let line = lines.get(i).copied().unwrap_or(0);
                return Err(ParseError::new(
                    line,
                    0,
                    format!(
                        "duplicate ref '{}' in packed-refs",
                        String::from_utf8_lossy(&r.name)
                    ),
                ));
            }
            out.push(r);
        }
        refs = out;
    }
    Ok(refs)
}

/// Appends a complete `packed-refs` file as git 2.47 writes it: the header, then
/// `<oid> SP <name> LF` and `^<peeled> LF` per record. `refs` must already be sorted
/// by name (use [`sort_packed_refs`] otherwise).
pub fn render_packed_refs<'r>(refs: impl IntoIterator<Item = &'r PackedRef>, out: &mut Vec<u8>) {
    out.extend_from_slice(PACKED_REFS_HEADER);
    for r in refs {
        render_packed_ref(&r.name, &r.id, r.peeled.as_ref(), out);
    }
}

/// Appends one `packed-refs` record (and its `^` line when peeled).
pub fn render_packed_ref(name: &[u8], id: &ObjectId, peeled: Option<&ObjectId>, out: &mut Vec<u8>) {
    id.write_hex(out);
    out.push(b' ');
    out.extend_from_slice(name);
    out.push(b'\n');
    if let Some(p) = peeled {
        out.push(b'^');
        p.write_hex(out);
        out.push(b'\n');
    }
}

/// Sorts records by name, as `packed-refs` requires.
pub fn sort_packed_refs(refs: &mut [PackedRef]) {
    refs.sort_unstable_by(|a, b| a.name.cmp(&b.name));
}

// ---------------------------------------------------------------------------------------
// Reflog lines
// ---------------------------------------------------------------------------------------

/// Parses one reflog line (`line` includes its final `\n`) into `rec`'s fields, reusing
/// its buffers: `<old> SP <new> SP <name> <<email>> SP <time> SP <±hhmm> [TAB <msg>] LF`.
///
/// `refname` and `update_index` are left alone (the file's path and the caller decide
/// them); `deleted` is set to false. The message keeps its trailing `\n`; a line
/// without a message gets `"\n"`, as git's reader hands it out.
///
/// A time of 0 is a time (`GIT_COMMITTER_DATE=@0`, `SOURCE_DATE_EPOCH=0` builds write
/// it; git 2.47 stores such entries on reftable), but a line that would be reftable's
/// "reflog exists" marker (null ids, no name, no email, time 0, `+0000`, no message) is
/// refused: stored, it would read back as no entry at all.
pub fn parse_reflog_line_into(
    line: &[u8],
    hash: HashKind,
    rec: &mut LogRecord,
) -> Result<(), ParseError> {
    let err = |what: &str| ParseError::new(0, 0, format!("{what}: '{}'", excerpt(line)));
    if line.last() != Some(&b'\n') {
        return Err(err("reflog line does not end in a newline"));
    }
    let hex = hash.hex_len();
    let ends_after = |which: &str| {
        err(&format!(
            "the line ends after {which} object id (a reflog line is '<old id> <new id> \
             <name> <<email>> <time> <+hhmm>', then a tab and the message)"
        ))
    };
    let old_id = oid_prefix(line, hash).ok_or_else(|| err("bad old object id"))?;
    match line.get(hex) {
        Some(b' ') => {}
        Some(b'\n') => return Err(ends_after("an")),
        _ => return Err(err("bad old object id")),
    }
    let rest = line.get(hex + 1..).unwrap_or_default();
    let new_id = oid_prefix(rest, hash).ok_or_else(|| err("bad new object id"))?;
    match rest.get(hex) {
        Some(b' ') => {}
        Some(b'\n') => return Err(ends_after("the new")),
        _ => return Err(err("bad new object id")),
    }
    let ident = rest.get(hex + 1..).unwrap_or_default();
    let gt = ident
        .iter()
        .position(|&b| b == b'>')
        .ok_or_else(|| err("no '>' after the email"))?;
    let who = ident.get(..gt).unwrap_or_default();
    let lt = who
        .iter()
        .position(|&b| b == b'<')
        .ok_or_else(|| err("no '<' before the email"))?;
    let name_end = who
        .get(..lt)
        .unwrap_or_default()
        .iter()
        .rposition(|&b| b != b' ')
        .map_or(0, |i| i + 1);
    let name = who.get(..name_end).unwrap_or_default();
    let email = who.get(lt + 1..).unwrap_or_default();
    let after = ident.get(gt + 1..).unwrap_or_default();
    let after = after
        .strip_prefix(b" ")
        .ok_or_else(|| err("no space after the email"))?;
    let digits = after.iter().take_while(|b| b.is_ascii_digit()).count();
    let mut time: u64 = 0;
    for &d in after.get(..digits).unwrap_or_default() {
        time = time
            .checked_mul(10)
            .and_then(|t| t.checked_add(u64::from(d - b'0')))
            .ok_or_else(|| err("timestamp out of range"))?;
    }
    if digits == 0 {
        return Err(err("missing timestamp"));
    }
    let tz = after.get(digits..).unwrap_or_default();
    let tz = tz.strip_prefix(b" ").ok_or_else(|| err("no timezone"))?;
    let (sign, tzd) = match tz.split_first() {
        Some((&b'+', r)) => (1i16, r),
        Some((&b'-', r)) => (-1i16, r),
        _ => return Err(err("timezone without a sign")),
    };
    let tz_digits = tzd.get(..4).ok_or_else(|| err("short timezone"))?;
    let mut tz_val: i16 = 0;
    for &d in tz_digits {
        if !d.is_ascii_digit() {
            return Err(err("timezone is not ±HHMM"));
        }
        tz_val = tz_val * 10 + i16::from(d - b'0');
    }
    let message = match tzd.get(4..).unwrap_or_default() {
        [b'\t', msg @ ..] => msg,
        [b'\n'] => b"\n".as_slice(),
        _ => return Err(err("garbage after the timezone")),
    };
    if time == 0
        && tz_val == 0
        && old_id.is_null()
        && new_id.is_null()
        && name.is_empty()
        && email.is_empty()
        && matches!(message, b"" | b"\n")
    {
        return Err(err(
            "null ids, no name, no email and time 0: reftable's mark of a reflog without \
             entries, which would read back as no line",
        ));
    }
    rec.deleted = false;
    rec.old_id = old_id;
    rec.new_id = new_id;
    rec.name.clear();
    rec.name.extend_from_slice(name);
    rec.email.clear();
    rec.email.extend_from_slice(email);
    rec.time = time;
    rec.tz_offset = sign * tz_val;
    rec.message.clear();
    rec.message.extend_from_slice(message);
    Ok(())
}

/// Whether `prefix`, the start of a reflog line written so far (no newline yet), can still
/// become one: as far as it goes, `<old id> <new id> ` in hex of `hash`'s length. The
/// reason if not.
pub fn reflog_line_prefix_ok(prefix: &[u8], hash: HashKind) -> Result<(), String> {
    let hex = hash.hex_len();
    for (which, field) in [(0, "old"), (hex + 1, "new")] {
        let Some(part) = prefix.get(which..) else {
            return Ok(());
        };
        let id_ok = part.iter().take(hex).all(u8::is_ascii_hexdigit);
        if !id_ok || part.get(hex).is_some_and(|&b| b != b' ') {
            return Err(format!(
                "the reflog line written so far can no longer become one (its {field} object id \
                 is not {hex} hex digits and a space): '{}'",
                excerpt(prefix)
            ));
        }
    }
    Ok(())
}

/// Parses one reflog line into a new record (see [`parse_reflog_line_into`]).
pub fn parse_reflog_line(line: &[u8], hash: HashKind) -> Result<LogRecord, ParseError> {
    let mut rec = LogRecord::default();
    parse_reflog_line_into(line, hash, &mut rec)?;
    Ok(rec)
}

/// Iterates the lines of a reflog file, oldest first, with their line numbers.
/// Errors carry the line number and byte offset.
pub fn reflog_lines(content: &[u8]) -> impl Iterator<Item = (usize, usize, &[u8])> {
    let mut pos = 0usize;
    let mut line_no = 0usize;
    std::iter::from_fn(move || {
        let rest = content.get(pos..)?;
        if rest.is_empty() {
            return None;
        }
        let len = rest
            .iter()
            .position(|&b| b == b'\n')
            .map_or(rest.len(), |i| i + 1);
        let line = rest.get(..len)?;
        let start = pos;
        pos += len;
        line_no += 1;
        Some((line_no, start, line))
    })
}

/// Parses a whole reflog file, oldest entry first. `refname` is copied into each
/// record; update indexes are left 0 for the caller to assign.
pub fn parse_reflog(
    content: &[u8],
    refname: &[u8],
    hash: HashKind,
) -> Result<Vec<LogRecord>, ParseError> {
    let mut out = Vec::new();
    for (line_no, off, line) in reflog_lines(content) {
        let mut rec = LogRecord {
            refname: refname.to_vec(),
            ..LogRecord::default()
        };
        parse_reflog_line_into(line, hash, &mut rec).map_err(|mut e| {
            e.line = line_no;
            e.offset = off;
            e
        })?;
        out.push(rec);
    }
    Ok(out)
}

/// Appends git's ±HHMM form of a tz integer (`-700` → `-0700`).
pub fn write_tz(tz: i16, out: &mut Vec<u8>) {
    let sign = if tz < 0 { b'-' } else { b'+' };
    let abs = tz.unsigned_abs();
    out.push(sign);
    let hh = abs / 100;
    let mm = abs % 100;
    out.extend_from_slice(format!("{hh:02}{mm:02}").as_bytes());
}

/// Appends one reflog line as the files backend writes it:
/// `<old> <new> <name> <<email>> <time> <±hhmm>[\t<msg>]\n`. Null ids are written with
/// `hash`'s length; trailing newlines of the message are dropped (an empty message is
/// written without the tab) and an inner newline, which git's normalisation never leaves
/// but a verbatim record could carry, becomes a space so that the line stays one line.
pub fn render_reflog_line(rec: &LogRecord, hash: HashKind, out: &mut Vec<u8>) {
    write_id(&rec.old_id, hash, out);
    out.push(b' ');
    write_id(&rec.new_id, hash, out);
    out.push(b' ');
    out.extend_from_slice(&rec.name);
    out.extend_from_slice(b" <");
    out.extend_from_slice(&rec.email);
    out.extend_from_slice(b"> ");
    out.extend_from_slice(rec.time.to_string().as_bytes());
    out.push(b' ');
    write_tz(rec.tz_offset, out);
    let mut msg: &[u8] = &rec.message;
    while let Some(m) = msg.strip_suffix(b"\n") {
        msg = m;
    }
    if !msg.is_empty() {
        out.push(b'\t');
        out.extend(msg.iter().map(|&b| if b == b'\n' { b' ' } else { b }));
    }
    out.push(b'\n');
}

/// Appends `id` in hex, or `hash`'s null id when `id` is null (whatever its length).
fn write_id(id: &ObjectId, hash: HashKind, out: &mut Vec<u8>) {
    if id.is_null() {
        out.extend(std::iter::repeat_n(b'0', hash.hex_len()));
    } else {
        id.write_hex(out);
    }
}

#[cfg(test)]
mod tests;
