//! The files backend's text formats: loose ref files, `packed-refs` and reflog lines.
//!
//! Pure functions, bytes in and values out, no I/O. Used by `migrate` (reading a
//! files-backend repository) and by the FUSE adapter (serving and parsing the loose-ref
//! view). Every parser follows git 2.47's own reader (`parse_loose_ref_contents`,
//! `refs/packed-backend.c`, `show_one_reflog_ent`) and never panics: bad input yields a
//! [`ParseError`] that says what was wrong and where (line number, byte offset), which
//! [`ParseError::in_file`] turns into a crate [`Error`] naming the file or ref.

use std::fmt;

use crate::format::{HashKind, LogRecord, ObjectId};
use crate::refname::is_root_ref;
use crate::Error;

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
    let old_id = oid_prefix(line, hash).ok_or_else(|| err("bad old object id"))?;
    if line.get(hex) != Some(&b' ') {
        return Err(err("bad old object id"));
    }
    let rest = line.get(hex + 1..).unwrap_or_default();
    let new_id = oid_prefix(rest, hash).ok_or_else(|| err("bad new object id"))?;
    if rest.get(hex) != Some(&b' ') {
        return Err(err("bad new object id"));
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
    if time == 0 {
        return Err(err("missing or zero timestamp"));
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

// ---------------------------------------------------------------------------------------
// Reading a whole files-backend ref store from disk
// ---------------------------------------------------------------------------------------

/// Every ref and reflog of a files-backend repository, as `git refs migrate` sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FilesRefs {
    /// Effective refs (loose over packed), sorted by name; `update_index` is 0.
    pub refs: Vec<crate::format::RefRecord>,
    /// Reflogs sorted by ref name, each oldest entry first; `update_index` is 0.
    pub reflogs: Vec<(Vec<u8>, Vec<LogRecord>)>,
}

/// Progress callback: called with the number of refs read so far.
pub type Progress<'a> = &'a mut dyn FnMut(usize);

fn io_err(path: &std::path::Path, e: std::io::Error) -> Error {
    Error::io(path, e)
}

/// Reads the files backend of `git_dir`: `packed-refs`, loose refs under `refs/`
/// (skipping names that begin with `.` or end in `.lock`, as git's `loose_fill_ref_dir`),
/// root refs in the git dir (`HEAD`, `ORIG_HEAD`, …; pseudorefs excluded) and, when
/// `with_reflogs`, every reflog under `logs/`. Loose values override packed ones; a
/// peeled value from `packed-refs` is kept only while the loose file does not override
/// the ref. Errors name the file and line.
pub fn read_files_backend(
    git_dir: &std::path::Path,
    hash: HashKind,
    with_reflogs: bool,
    progress: Progress<'_>,
) -> crate::Result<FilesRefs> {
    use crate::format::{RefRecord, RefValue};

    let packed_path = git_dir.join("packed-refs");
    let packed = match std::fs::read(&packed_path) {
        Ok(buf) => parse_packed_refs(&buf, hash)
            .map_err(|e| e.in_file(packed_path.display().to_string()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(io_err(&packed_path, e)),
    };
    progress(packed.len());
    let loose = read_loose_refs(git_dir, hash, progress, packed.len())?;

    let mut refs = Vec::with_capacity(packed.len() + loose.len());
    let mut merge = LooseOverPacked::new(loose);
    for p in packed {
        if merge.overrides(&p.name, &mut |l| refs.push(l)) {
            continue;
        }
        let value = match p.peeled {
            Some(peeled) => RefValue::Val2 {
                value: p.id,
                peeled,
            },
            None => RefValue::Val1(p.id),
        };
        refs.push(RefRecord {
            name: p.name,
            update_index: 0,
            value,
        });
    }
    merge.rest(&mut |l| refs.push(l));

    let reflogs = if with_reflogs {
        read_reflogs(git_dir, hash)?
    } else {
        Vec::new()
    };
    Ok(FilesRefs { refs, reflogs })
}

/// The loose refs under `refs/` (skipping names that begin with `.` or end in `.lock`)
/// and the root refs of the git dir, sorted by name. `progress` gets `base` plus the
/// number read so far.
pub fn read_loose_refs(
    git_dir: &std::path::Path,
    hash: HashKind,
    progress: Progress<'_>,
    base: usize,
) -> crate::Result<Vec<crate::format::RefRecord>> {
    let mut loose = Vec::new();
    let mut name = b"refs/".to_vec();
    walk_loose(
        &git_dir.join("refs"),
        &mut name,
        hash,
        &mut loose,
        progress,
        base,
    )?;
    // Root refs: regular files directly in the git dir.
    let entries = std::fs::read_dir(git_dir).map_err(|e| io_err(git_dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| io_err(git_dir, e))?;
        let fname = entry.file_name();
        let fname = fname.as_encoded_bytes();
        if !is_root_ref(fname) {
            continue;
        }
        let path = entry.path();
        if !path.is_file() {
            continue;
        }
        loose.push(read_loose_file(&path, fname, hash)?);
    }
    loose.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    Ok(loose)
}

/// Every reflog under `logs/` (ref logs and root refs' logs), sorted by ref name, each
/// oldest entry first.
pub fn read_reflogs(
    git_dir: &std::path::Path,
    hash: HashKind,
) -> crate::Result<Vec<(Vec<u8>, Vec<LogRecord>)>> {
    let mut reflogs = Vec::new();
    let logs = git_dir.join("logs");
    let mut name = Vec::new();
    walk_logs(&logs, &mut name, hash, &mut reflogs, true)?;
    reflogs.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    Ok(reflogs)
}

/// Merges sorted loose refs into a sorted stream of packed refs: a loose ref overrides
/// the packed ref of the same name.
pub struct LooseOverPacked {
    loose: std::iter::Peekable<std::vec::IntoIter<crate::format::RefRecord>>,
}

impl LooseOverPacked {
    /// Loose refs sorted by name.
    pub fn new(loose: Vec<crate::format::RefRecord>) -> Self {
        LooseOverPacked {
            loose: loose.into_iter().peekable(),
        }
    }

    /// Called with each packed name in order: hands `out` the loose refs that sort before
    /// `name`, and returns whether a loose ref of that name overrides the packed one (the
    /// loose ref then comes out before the next packed name).
    pub fn overrides(
        &mut self,
        name: &[u8],
        out: &mut dyn FnMut(crate::format::RefRecord),
    ) -> bool {
        while let Some(l) = self.loose.next_if(|l| l.name.as_slice() < name) {
            out(l);
        }
        self.loose.peek().is_some_and(|l| l.name == name)
    }

    /// Hands `out` the loose refs left after the last packed name.
    pub fn rest(self, out: &mut dyn FnMut(crate::format::RefRecord)) {
        self.loose.for_each(out);
    }
}

fn read_loose_file(
    path: &std::path::Path,
    name: &[u8],
    hash: HashKind,
) -> crate::Result<crate::format::RefRecord> {
    use crate::format::{RefRecord, RefValue};
    let content = std::fs::read(path).map_err(|e| io_err(path, e))?;
    let value =
        match parse_loose_ref(&content, hash).map_err(|e| e.in_file(path.display().to_string()))? {
            LooseRef::Oid(id) => RefValue::Val1(id),
            LooseRef::Symref(t) => RefValue::Symref(t),
        };
    Ok(RefRecord {
        name: name.to_vec(),
        update_index: 0,
        value,
    })
}

fn walk_loose(
    dir: &std::path::Path,
    name: &mut Vec<u8>,
    hash: HashKind,
    out: &mut Vec<crate::format::RefRecord>,
    progress: Progress<'_>,
    base: usize,
) -> crate::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(dir, e)),
    };
    let mut list: Vec<(std::ffi::OsString, std::fs::FileType)> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_err(dir, e))?;
        let ft = entry.file_type().map_err(|e| io_err(&entry.path(), e))?;
        list.push((entry.file_name(), ft));
    }
    list.sort_by(|a, b| a.0.cmp(&b.0));
    for (fname, ft) in list {
        let bytes = fname.as_encoded_bytes();
        if bytes.starts_with(b".") || bytes.ends_with(b".lock") {
            continue;
        }
        let path = dir.join(&fname);
        let len = name.len();
        name.extend_from_slice(bytes);
        let is_dir = if ft.is_symlink() {
            path.is_dir()
        } else {
            ft.is_dir()
        };
        if is_dir {
            name.push(b'/');
            walk_loose(&path, name, hash, out, progress, base)?;
        } else {
            out.push(read_loose_file(&path, name, hash)?);
            if out.len() % 4096 == 0 {
                progress(base + out.len());
            }
        }
        name.truncate(len);
    }
    Ok(())
}

fn walk_logs(
    dir: &std::path::Path,
    name: &mut Vec<u8>,
    hash: HashKind,
    out: &mut Vec<(Vec<u8>, Vec<LogRecord>)>,
    top: bool,
) -> crate::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| io_err(dir, e))?;
        let fname = entry.file_name();
        let bytes = fname.as_encoded_bytes();
        if bytes.starts_with(b".") || bytes.ends_with(b".lock") {
            continue;
        }
        let path = entry.path();
        let len = name.len();
        name.extend_from_slice(bytes);
        if path.is_dir() {
            // At the top only `logs/refs/` holds ref logs.
            if !top || bytes == b"refs" {
                name.push(b'/');
                walk_logs(&path, name, hash, out, false)?;
            }
        } else if !top || is_root_ref(bytes) {
            let content = std::fs::read(&path).map_err(|e| io_err(&path, e))?;
            let recs = parse_reflog(&content, name, hash)
                .map_err(|e| e.in_file(path.display().to_string()))?;
            out.push((name.clone(), recs));
        }
        name.truncate(len);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "1111111111111111111111111111111111111111";
    const B: &str = "2222222222222222222222222222222222222222";
    const C: &str = "3333333333333333333333333333333333333333";

    fn oid(h: &str) -> ObjectId {
        ObjectId::from_hex(h.as_bytes(), HashKind::Sha1).unwrap()
    }

    #[test]
    fn loose_ref_oid_forms() {
        let want = LooseRef::Oid(oid(A));
        for content in [
            format!("{A}\n"),
            A.to_string(),
            format!("{A}  \r\n"),
            format!("{A}\0junk"),
        ] {
            assert_eq!(
                parse_loose_ref(content.as_bytes(), HashKind::Sha1),
                Ok(want.clone()),
                "{content:?}"
            );
        }
        // FETCH_HEAD style trailing data after whitespace is accepted.
        let fetch = format!("{A}\t\tbranch 'main' of ../sub\n");
        assert_eq!(parse_loose_ref(fetch.as_bytes(), HashKind::Sha1), Ok(want));
        // Upper-case hex is accepted, as git's hexval does.
        let lower = "abcdef0123456789abcdef0123456789abcdef01";
        let upper = lower.to_uppercase() + "\n";
        assert_eq!(
            parse_loose_ref(upper.as_bytes(), HashKind::Sha1),
            Ok(LooseRef::Oid(oid(lower)))
        );
    }

    #[test]
    fn loose_ref_symref_forms() {
        for content in [
            "ref: refs/heads/main\n",
            "ref:refs/heads/main",
            "ref:\t  refs/heads/main \n",
        ] {
            assert_eq!(
                parse_loose_ref(content.as_bytes(), HashKind::Sha1),
                Ok(LooseRef::Symref(b"refs/heads/main".to_vec())),
                "{content:?}"
            );
        }
    }

    #[test]
    fn loose_ref_rejects_garbage() {
        let bad = [
            "".to_string(),
            "\n".to_string(),
            "ref:".to_string(),
            "ref:   \n".to_string(),
            A[..39].to_string(),
            format!("{A}x\n"),
            format!("{A}1\n"),
            "zz".repeat(20),
        ];
        for content in bad {
            let e = parse_loose_ref(content.as_bytes(), HashKind::Sha1).unwrap_err();
            assert!(!e.what.is_empty(), "{content:?}");
        }
        // A SHA-1 id is too short for a SHA-256 repository.
        assert!(parse_loose_ref(format!("{A}\n").as_bytes(), HashKind::Sha256).is_err());
    }

    #[test]
    fn loose_ref_round_trip() {
        for v in [
            LooseRef::Oid(oid(B)),
            LooseRef::Symref(b"refs/heads/x".to_vec()),
        ] {
            let mut out = Vec::new();
            render_loose_ref(&v, &mut out);
            assert_eq!(out.last(), Some(&b'\n'));
            assert_eq!(parse_loose_ref(&out, HashKind::Sha1), Ok(v));
        }
        let mut out = Vec::new();
        render_loose_ref(&LooseRef::Symref(b"refs/heads/main".to_vec()), &mut out);
        assert_eq!(out, b"ref: refs/heads/main\n");
    }

    #[test]
    fn packed_refs_parse_sorted_with_peeled() {
        let text = format!(
            "# pack-refs with: peeled fully-peeled sorted \n{A} refs/heads/main\n{B} refs/tags/v1\n^{C}\n"
        );
        let mut p = PackedRefsParser::new(text.as_bytes(), HashKind::Sha1).unwrap();
        assert_eq!(
            p.traits(),
            PackedTraits {
                peeled: true,
                fully_peeled: true,
                sorted: true
            }
        );
        let first = p.next().unwrap().unwrap();
        assert_eq!((first.name, first.line), (b"refs/heads/main".as_slice(), 2));
        let refs = parse_packed_refs(text.as_bytes(), HashKind::Sha1).unwrap();
        assert_eq!(
            refs,
            vec![
                PackedRef {
                    name: b"refs/heads/main".to_vec(),
                    id: oid(A),
                    peeled: None
                },
                PackedRef {
                    name: b"refs/tags/v1".to_vec(),
                    id: oid(B),
                    peeled: Some(oid(C))
                },
            ]
        );
        let mut out = Vec::new();
        render_packed_refs(&refs, &mut out);
        assert_eq!(out, text.as_bytes());
    }

    #[test]
    fn packed_refs_unsorted_input_is_sorted_and_headerless_ok() {
        let text = format!("{A} refs/tags/z\n{B} refs/heads/a\n^{C}\n{C} refs/heads/b\n");
        let refs = parse_packed_refs(text.as_bytes(), HashKind::Sha1).unwrap();
        let names: Vec<&[u8]> = refs.iter().map(|r| r.name.as_slice()).collect();
        assert_eq!(
            names,
            [b"refs/heads/a".as_slice(), b"refs/heads/b", b"refs/tags/z"]
        );
        assert_eq!(refs[0].peeled, Some(oid(C)));
        assert_eq!(refs[2].id, oid(A));
        assert!(parse_packed_refs(b"", HashKind::Sha1).unwrap().is_empty());
        assert!(parse_packed_refs(PACKED_REFS_HEADER, HashKind::Sha1)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn packed_refs_errors_name_the_line() {
        let cases = [
            (
                format!("{A} refs/heads/a\n{B} refs/heads/b"),
                2,
                "unterminated",
            ),
            (
                format!("{A} refs/heads/a\nbogus line\n"),
                2,
                "unexpected line",
            ),
            (format!("^{A}\n"), 1, "peeled line without"),
            (format!("{A} refs/heads/a\n^zz\n"), 2, "malformed peeled"),
            (format!("{A}refs/heads/a\n"), 1, "unexpected line"),
            (format!("{A} \n"), 1, "without a refname"),
            (
                format!("{A} refs/b\n{B} refs/a\n{C} refs/b\n"),
                3,
                "duplicate ref 'refs/b'",
            ),
        ];
        for (text, line, what) in cases {
            let e = parse_packed_refs(text.as_bytes(), HashKind::Sha1).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.to_string().contains(what), "{text:?}: {e}");
        }
        let e = parse_packed_refs(format!("{A} x\n{A} \n").as_bytes(), HashKind::Sha1)
            .unwrap_err()
            .in_file("/repo/.git/packed-refs");
        let msg = e.to_string();
        assert!(
            msg.contains("/repo/.git/packed-refs") && msg.contains("line 2"),
            "{msg}"
        );
    }

    #[test]
    fn reflog_line_parses_like_git() {
        let line =
            format!("{A} {B} A U Thor <author@example.com> 1112911993 -0700\tcommit: second\n");
        let rec = parse_reflog_line(line.as_bytes(), HashKind::Sha1).unwrap();
        assert_eq!(rec.old_id, oid(A));
        assert_eq!(rec.new_id, oid(B));
        assert_eq!(rec.name, b"A U Thor");
        assert_eq!(rec.email, b"author@example.com");
        assert_eq!(rec.time, 1112911993);
        assert_eq!(rec.tz_offset, -700);
        assert_eq!(rec.message, b"commit: second\n");
        let mut out = Vec::new();
        render_reflog_line(&rec, HashKind::Sha1, &mut out);
        assert_eq!(out, line.as_bytes());
    }

    #[test]
    fn reflog_line_without_message() {
        let line = format!("{A} {B} C O Mitter <c@o.m> 1700000000 +0130\n");
        let rec = parse_reflog_line(line.as_bytes(), HashKind::Sha1).unwrap();
        assert_eq!(rec.tz_offset, 130);
        assert_eq!(rec.message, b"\n");
        let mut out = Vec::new();
        render_reflog_line(&rec, HashKind::Sha1, &mut out);
        assert_eq!(out, line.as_bytes());
        // An empty message with tab survives as the empty message.
        let tabbed = format!("{A} {B} N <e> 5 +0000\t\n");
        assert_eq!(
            parse_reflog_line(tabbed.as_bytes(), HashKind::Sha1)
                .unwrap()
                .message,
            b"\n"
        );
    }

    #[test]
    fn reflog_render_normalises_missing_newline_and_tz() {
        let rec = LogRecord {
            old_id: oid(A),
            new_id: oid(B),
            name: b"N".to_vec(),
            email: b"e@x".to_vec(),
            time: 42,
            tz_offset: -30,
            message: b"no newline".to_vec(),
            ..LogRecord::default()
        };
        let mut out = Vec::new();
        render_reflog_line(&rec, HashKind::Sha1, &mut out);
        assert_eq!(
            out,
            format!("{A} {B} N <e@x> 42 -0030\tno newline\n").as_bytes()
        );
    }

    #[test]
    fn reflog_errors() {
        let good = format!("{A} {B} N <e> 5 +0000\tm\n");
        assert!(parse_reflog_line(good.as_bytes(), HashKind::Sha1).is_ok());
        let bad = [
            format!("{A} {B} N <e> 5 +0000\tm"),
            format!("{A}{B} N <e> 5 +0000\n"),
            format!("{A} {B} N e 5 +0000\n"),
            format!("{A} {B} N e> 5 +0000\n"),
            format!("{A} {B} N <e>5 +0000\n"),
            format!("{A} {B} N <e> 0 +0000\n"),
            format!("{A} {B} N <e> x +0000\n"),
            format!("{A} {B} N <e> 5 0000\n"),
            format!("{A} {B} N <e> 5 +00\n"),
            format!("{A} {B} N <e> 5 +00a0\n"),
            format!("{A} {B} N <e> 5 +0000 x\n"),
            format!("{A} {B} N <e> 99999999999999999999999 +0000\n"),
            "\n".to_string(),
            String::new(),
        ];
        for line in bad {
            assert!(
                parse_reflog_line(line.as_bytes(), HashKind::Sha1).is_err(),
                "{line:?}"
            );
        }
        let file = format!("{good}{good}{A} broken\n");
        let e = parse_reflog(file.as_bytes(), b"refs/heads/x", HashKind::Sha1).unwrap_err();
        assert_eq!(e.line, 3);
        assert_eq!(e.offset, 2 * good.len());
        let ok = parse_reflog(
            format!("{good}{good}").as_bytes(),
            b"refs/heads/x",
            HashKind::Sha1,
        )
        .unwrap();
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[1].refname, b"refs/heads/x");
    }

    #[test]
    fn sha256_reflog_and_packed() {
        let a = "a".repeat(64);
        let b = "b".repeat(64);
        let line = format!("{a} {b} N <e> 5 +0000\tm\n");
        let rec = parse_reflog_line(line.as_bytes(), HashKind::Sha256).unwrap();
        assert_eq!(rec.new_id.kind(), HashKind::Sha256);
        assert!(parse_reflog_line(line.as_bytes(), HashKind::Sha1).is_err());
        let packed = format!("{a} refs/heads/x\n^{b}\n");
        let refs = parse_packed_refs(packed.as_bytes(), HashKind::Sha256).unwrap();
        assert_eq!(refs[0].peeled.unwrap().to_hex(), b);
    }

    fn git(dir: &std::path::Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .current_dir(dir)
            .args(["-c", "user.name=T", "-c", "user.email=t@x"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn reads_a_real_files_repository_like_git() {
        use crate::format::RefValue;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        git(dir, &["init", "-q", "--ref-format=files", "-b", "main"]);
        git(dir, &["commit", "-q", "--allow-empty", "-m", "one"]);
        git(dir, &["tag", "-a", "-m", "annotated", "v1"]);
        git(dir, &["branch", "packed-only"]);
        git(dir, &["branch", "dir/nested"]);
        git(dir, &["pack-refs", "--all"]);
        git(dir, &["commit", "-q", "--allow-empty", "-m", "two"]); // main loose again, overrides packed
        git(dir, &["branch", "loose-only"]);
        git(dir, &["update-ref", "ORIG_HEAD", "HEAD~1"]);
        git(dir, &["symbolic-ref", "refs/heads/sym", "refs/heads/main"]);
        std::fs::write(dir.join(".git/refs/heads/stale.lock"), "garbage").unwrap();

        let got = read_files_backend(&dir.join(".git"), HashKind::Sha1, true, &mut |_| {}).unwrap();
        let mut ours = String::new();
        for r in &got.refs {
            let name = String::from_utf8_lossy(&r.name);
            match &r.value {
                RefValue::Val1(id) => ours += &format!("{name} {id}\n"),
                RefValue::Val2 { value, peeled } => ours += &format!("{name} {value} {peeled}\n"),
                RefValue::Symref(t) => {
                    ours += &format!("{name} -> {}\n", String::from_utf8_lossy(t))
                }
                RefValue::Deletion => panic!("no tombstones in a files repo"),
            }
        }
        let head = git(dir, &["rev-parse", "HEAD"]);
        let orig = git(dir, &["rev-parse", "ORIG_HEAD"]);
        let mut want = format!("HEAD -> refs/heads/main\nORIG_HEAD {}", orig);
        for line in git(
            dir,
            &[
                "for-each-ref",
                "--format=%(refname) %(objectname) %(*objectname)%(symref)",
            ],
        )
        .lines()
        {
            let line = line.trim_end();
            if line.starts_with("refs/heads/sym ") {
                want += "refs/heads/sym -> refs/heads/main\n";
            } else {
                want += &format!("{line}\n");
            }
        }
        assert_eq!(ours, want);
        assert!(
            ours.contains(&format!("refs/heads/main {}", head.trim())),
            "loose overrides packed"
        );

        let names: Vec<&[u8]> = got.reflogs.iter().map(|(n, _)| n.as_slice()).collect();
        assert_eq!(
            names,
            [
                b"HEAD".as_slice(),
                b"refs/heads/dir/nested",
                b"refs/heads/loose-only",
                b"refs/heads/main",
                b"refs/heads/packed-only",
                b"refs/heads/sym"
            ]
        );
        let (_, main_log) = &got.reflogs[3];
        let git_log = git(
            dir,
            &["reflog", "show", "--format=%H %gs", "refs/heads/main"],
        );
        let ours: Vec<String> = main_log
            .iter()
            .rev()
            .map(|r| {
                format!(
                    "{} {}",
                    r.new_id,
                    String::from_utf8_lossy(&r.message).trim_end()
                )
            })
            .collect();
        assert_eq!(ours, git_log.lines().collect::<Vec<_>>());
        assert_eq!(main_log[0].name, b"T");
    }

    #[test]
    fn broken_loose_ref_is_reported_with_its_path() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        git(dir, &["init", "-q", "--ref-format=files"]);
        std::fs::write(dir.join(".git/refs/heads/bad"), "not an id\n").unwrap();
        let e =
            read_files_backend(&dir.join(".git"), HashKind::Sha1, false, &mut |_| {}).unwrap_err();
        assert!(e.to_string().contains("refs/heads/bad"), "{e}");
    }

    proptest::proptest! {
        #[test]
        fn parsers_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let _ = parse_loose_ref(&bytes, HashKind::Sha1);
            let _ = parse_packed_refs(&bytes, HashKind::Sha1);
            let _ = parse_reflog(&bytes, b"x", HashKind::Sha256);
        }

        #[test]
        fn reflog_round_trips(name in "[A-Za-z][A-Za-z .]{0,20}[A-Za-z]", email in "[a-z@.]{0,20}",
                              time in 1u64..u64::MAX, tz in -1259i16..1259, msg in "[ -~]{0,40}") {
            let rec = LogRecord {
                old_id: oid(A), new_id: oid(C), name: name.into_bytes(), email: email.into_bytes(),
                time, tz_offset: tz, message: format!("{msg}\n").into_bytes(), ..LogRecord::default()
            };
            let mut out = Vec::new();
            render_reflog_line(&rec, HashKind::Sha1, &mut out);
            let back = parse_reflog_line(&out, HashKind::Sha1).unwrap();
            proptest::prop_assert_eq!(back, rec);
        }
    }
}
