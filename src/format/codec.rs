//! Encoding and decoding of record keys and values inside a block.
//!
//! ```text
//! record  = varint(prefix_len) varint(suffix_len << 3 | extra) suffix[suffix_len] value
//! ref     value = varint(update_index - min) [H | H H | varint(len) target]   extra = value_type 0..3
//! log     key   = refname 0x00 be64(!update_index)                              extra = 0 (deletion) | 1
//!         value = old[H] new[H] varint(len) name varint(len) email varint(time) be16(tz) varint(len) msg
//! obj     key   = id[..obj_id_len]; value = [varint(count) if extra == 0] varint(pos0) varint(delta)*
//!                                                                              extra = count if 1..=7
//! index   key   = last key of the pointed-to block; value = varint(block offset)   extra = 0
//! ```
//!
//! Decoders never panic and never allocate more than the input could describe: every
//! length is checked against the bytes actually available.

use super::varint;
use super::{HashKind, LogRecord, ObjectId, RefValue};

/// Block type bytes.
pub const BLOCK_REF: u8 = b'r';
/// Log block type.
pub const BLOCK_LOG: u8 = b'g';
/// Obj block type.
pub const BLOCK_OBJ: u8 = b'o';
/// Index block type.
pub const BLOCK_INDEX: u8 = b'i';

/// Whether `t` is one of the four block types.
pub fn is_block_type(t: u8) -> bool {
    matches!(t, BLOCK_REF | BLOCK_LOG | BLOCK_OBJ | BLOCK_INDEX)
}

/// A decoding failure: what went wrong, at which offset of the slice handed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeError {
    /// Offset relative to the start of the input the decoder was given.
    pub at: usize,
    /// What was wrong.
    pub what: &'static str,
}

type DResult<T> = Result<T, DecodeError>;

fn err<T>(at: usize, what: &'static str) -> DResult<T> {
    Err(DecodeError { at, what })
}

/// A cursor over untrusted bytes: the only place that slices them.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Wraps `buf`, starting at offset 0.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }
    /// Bytes consumed so far.
    pub fn pos(&self) -> usize {
        self.pos
    }
    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }
    /// One varint.
    pub fn varint(&mut self, what: &'static str) -> DResult<u64> {
        let rest = self.buf.get(self.pos..).unwrap_or_default();
        match varint::get(rest) {
            Some((v, n)) => {
                self.pos += n;
                Ok(v)
            }
            None => err(self.pos, what),
        }
    }
    /// `n` bytes.
    pub fn bytes(&mut self, n: usize, what: &'static str) -> DResult<&'a [u8]> {
        let end = self.pos.checked_add(n);
        match end.and_then(|e| self.buf.get(self.pos..e)) {
            Some(s) => {
                self.pos += n;
                Ok(s)
            }
            None => err(self.pos, what),
        }
    }
    /// A varint length followed by that many bytes.
    pub fn string(&mut self, what: &'static str) -> DResult<&'a [u8]> {
        let at = self.pos;
        let n = self.varint(what)?;
        let n = usize::try_from(n).or_else(|_| err(at, what))?;
        self.bytes(n, what)
    }
    /// A big-endian u16.
    pub fn be16(&mut self, what: &'static str) -> DResult<u16> {
        let b = self.bytes(2, what)?;
        Ok(u16::from_be_bytes([
            b.first().copied().unwrap_or(0),
            b.get(1).copied().unwrap_or(0),
        ]))
    }
    /// An object id of `size` bytes.
    pub fn oid(&mut self, size: usize, what: &'static str) -> DResult<ObjectId> {
        let at = self.pos;
        let b = self.bytes(size, what)?;
        ObjectId::from_bytes(b).ok_or(DecodeError { at, what })
    }
}

/// Big-endian u24 at `at`, if in range.
pub fn be24(buf: &[u8], at: usize) -> Option<u32> {
    let b = buf.get(at..at.checked_add(3)?)?;
    Some(u32::from_be_bytes([0, *b.first()?, *b.get(1)?, *b.get(2)?]))
}

/// Big-endian u16 at `at`, if in range.
pub fn be16(buf: &[u8], at: usize) -> Option<u16> {
    let b = buf.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([*b.first()?, *b.get(1)?]))
}

/// Big-endian u32 at `at`, if in range.
pub fn be32(buf: &[u8], at: usize) -> Option<u32> {
    let b: [u8; 4] = buf.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(u32::from_be_bytes(b))
}

/// Big-endian u64 at `at`, if in range.
pub fn be64(buf: &[u8], at: usize) -> Option<u64> {
    let b: [u8; 8] = buf.get(at..at.checked_add(8)?)?.try_into().ok()?;
    Some(u64::from_be_bytes(b))
}

/// Length of the common prefix of two byte strings.
pub fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Appends a record key encoded against `prev` (`prev` empty at a forced restart).
/// Returns whether the record is a restart (its prefix length is 0).
pub fn encode_key(out: &mut Vec<u8>, prev: &[u8], key: &[u8], extra: u8) -> bool {
    let prefix = common_prefix(prev, key);
    let suffix = key.get(prefix..).unwrap_or_default();
    varint::put(out, prefix as u64);
    varint::put(out, ((suffix.len() as u64) << 3) | u64::from(extra & 7));
    out.extend_from_slice(suffix);
    prefix == 0
}

/// Decodes a record key from `input` into `key` (which holds the previous key).
/// Returns the 3 extra bits and the bytes consumed.
pub fn decode_key(input: &[u8], key: &mut Vec<u8>) -> DResult<(u8, usize)> {
    let mut r = Reader::new(input);
    let prefix = r.varint("bad key prefix length")?;
    let sx = r.varint("bad key suffix length")?;
    let extra = (sx & 7) as u8;
    let suffix_len = usize::try_from(sx >> 3).or_else(|_| err(0, "bad key suffix length"))?;
    let prefix = usize::try_from(prefix).unwrap_or(usize::MAX);
    if prefix > key.len() {
        return err(0, "key prefix longer than previous key");
    }
    let suffix = r.bytes(suffix_len, "key suffix past end of block")?;
    key.truncate(prefix);
    key.extend_from_slice(suffix);
    if key.is_empty() {
        return err(0, "empty key");
    }
    Ok((extra, r.pos()))
}

/// Decodes the key of a restart record without copying: the key is its suffix.
pub fn restart_key(input: &[u8]) -> DResult<&[u8]> {
    let mut r = Reader::new(input);
    let prefix = r.varint("bad key prefix length")?;
    if prefix != 0 {
        return err(0, "restart record with nonzero prefix");
    }
    let sx = r.varint("bad key suffix length")?;
    let n = usize::try_from(sx >> 3).or_else(|_| err(0, "bad key suffix length"))?;
    r.bytes(n, "key suffix past end of block")
}

/// Appends the value of a ref record; returns its value type (the key's extra bits).
pub fn encode_ref_value(out: &mut Vec<u8>, ui_delta: u64, value: &RefValue) -> u8 {
    varint::put(out, ui_delta);
    match value {
        RefValue::Deletion => 0,
        RefValue::Val1(id) => {
            out.extend_from_slice(id.as_bytes());
            1
        }
        RefValue::Val2 { value, peeled } => {
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(peeled.as_bytes());
            2
        }
        RefValue::Symref(target) => {
            varint::put(out, target.len() as u64);
            out.extend_from_slice(target);
            3
        }
    }
}

/// Decodes a ref value into `value`, reusing a symref buffer when it can (`spare` holds a
/// buffer to reuse and receives one that is no longer needed). Returns
/// `(update_index delta, bytes consumed)`.
pub fn decode_ref_value(
    input: &[u8],
    extra: u8,
    hash: HashKind,
    value: &mut RefValue,
    spare: &mut Vec<u8>,
) -> DResult<(u64, usize)> {
    let mut r = Reader::new(input);
    let delta = r.varint("bad update index")?;
    let h = hash.size();
    let new = match extra {
        0 => RefValue::Deletion,
        1 => RefValue::Val1(r.oid(h, "truncated object id")?),
        2 => {
            let v = r.oid(h, "truncated object id")?;
            let p = r.oid(h, "truncated peeled id")?;
            RefValue::Val2 {
                value: v,
                peeled: p,
            }
        }
        3 => {
            let t = r.string("truncated symref target")?;
            if let RefValue::Symref(buf) = value {
                buf.clear();
                buf.extend_from_slice(t);
                return Ok((delta, r.pos()));
            }
            let mut buf = std::mem::take(spare);
            buf.clear();
            buf.extend_from_slice(t);
            RefValue::Symref(buf)
        }
        _ => return err(0, "invalid ref value type"),
    };
    if let RefValue::Symref(old) = std::mem::replace(value, new) {
        *spare = old;
    }
    Ok((delta, r.pos()))
}

/// Appends the value of a log record (nothing for a deletion); returns the log type.
pub fn encode_log_value(out: &mut Vec<u8>, log: &LogRecord, message: &[u8]) -> u8 {
    if log.deleted {
        return 0;
    }
    out.extend_from_slice(log.old_id.as_bytes());
    out.extend_from_slice(log.new_id.as_bytes());
    varint::put(out, log.name.len() as u64);
    out.extend_from_slice(&log.name);
    varint::put(out, log.email.len() as u64);
    out.extend_from_slice(&log.email);
    varint::put(out, log.time);
    out.extend_from_slice(&log.tz_offset.to_be_bytes());
    varint::put(out, message.len() as u64);
    out.extend_from_slice(message);
    1
}

/// Appends a log key: refname NUL be64(!update_index).
pub fn log_key(out: &mut Vec<u8>, refname: &[u8], update_index: u64) {
    out.extend_from_slice(refname);
    out.push(0);
    out.extend_from_slice(&(!update_index).to_be_bytes());
}

/// Splits a log key into refname and update index.
pub fn split_log_key(key: &[u8]) -> DResult<(&[u8], u64)> {
    if key.len() <= 9 {
        return err(0, "log key too short");
    }
    let split = key.len() - 9;
    if key.get(split) != Some(&0) {
        return err(0, "log key without NUL before update index");
    }
    let ui = be64(key, split + 1).map(|v| !v).unwrap_or(0);
    Ok((key.get(..split).unwrap_or_default(), ui))
}

/// Decodes a log value into `log` (refname and update index are set by the caller from
/// the key). Returns bytes consumed.
pub fn decode_log_value(
    input: &[u8],
    extra: u8,
    hash: HashKind,
    log: &mut LogRecord,
) -> DResult<usize> {
    match extra {
        0 => {
            log.deleted = true;
            log.old_id = hash.null_id();
            log.new_id = hash.null_id();
            log.name.clear();
            log.email.clear();
            log.time = 0;
            log.tz_offset = 0;
            log.message.clear();
            Ok(0)
        }
        1 => {
            let mut r = Reader::new(input);
            let h = hash.size();
            log.deleted = false;
            log.old_id = r.oid(h, "truncated old id")?;
            log.new_id = r.oid(h, "truncated new id")?;
            let name = r.string("truncated log name")?;
            log.name.clear();
            log.name.extend_from_slice(name);
            let email = r.string("truncated log email")?;
            log.email.clear();
            log.email.extend_from_slice(email);
            log.time = r.varint("bad log time")?;
            log.tz_offset = r.be16("truncated tz offset")? as i16;
            let msg = r.string("truncated log message")?;
            log.message.clear();
            log.message.extend_from_slice(msg);
            Ok(r.pos())
        }
        _ => err(0, "invalid log value type"),
    }
}

/// Appends an obj record value; returns the extra bits (`cnt_3`).
pub fn encode_obj_value(out: &mut Vec<u8>, positions: &[u64]) -> u8 {
    let n = positions.len();
    let extra = if (1..=7).contains(&n) { n as u8 } else { 0 };
    if extra == 0 {
        varint::put(out, n as u64);
    }
    let mut last = 0u64;
    for (i, &p) in positions.iter().enumerate() {
        varint::put(out, if i == 0 { p } else { p.wrapping_sub(last) });
        last = p;
    }
    extra
}

/// Decodes an obj record value into `positions` (cleared first). Returns bytes consumed.
pub fn decode_obj_value(input: &[u8], extra: u8, positions: &mut Vec<u64>) -> DResult<usize> {
    let mut r = Reader::new(input);
    let count = obj_position_count(&mut r, extra)?;
    positions.clear();
    let mut last = 0u64;
    for i in 0..count {
        let at = r.pos();
        let v = r.varint("bad obj position")?;
        if i > 0 && v == 0 {
            // git writes each block once, ascending: a zero delta is corruption (and
            // would make lookups rescan one block over and over).
            return err(at, "obj positions not strictly ascending");
        }
        last = if i == 0 {
            v
        } else {
            last.checked_add(v).ok_or(DecodeError {
                at: r.pos(),
                what: "obj position overflow",
            })?
        };
        positions.push(last);
    }
    Ok(r.pos())
}

/// An obj record's position count: `extra` (`cnt_3`), or the varint that follows when it
/// is 0. Every position takes at least one byte: the count is bounded by what is there.
fn obj_position_count(r: &mut Reader<'_>, extra: u8) -> DResult<u64> {
    let count = if extra == 0 {
        r.varint("bad obj position count")?
    } else {
        u64::from(extra)
    };
    if count > r.remaining() as u64 {
        return err(r.pos(), "obj position count larger than the block");
    }
    Ok(count)
}

/// Bytes taken by a value of block type `typ`, without decoding it into a record.
pub fn skip_value(input: &[u8], typ: u8, extra: u8, hash: HashKind) -> DResult<usize> {
    let mut r = Reader::new(input);
    let h = hash.size();
    match typ {
        BLOCK_REF => {
            r.varint("bad update index")?;
            match extra {
                0 => {}
                1 => {
                    r.bytes(h, "truncated object id")?;
                }
                2 => {
                    r.bytes(2 * h, "truncated object ids")?;
                }
                3 => {
                    r.string("truncated symref target")?;
                }
                _ => return err(0, "invalid ref value type"),
            }
        }
        BLOCK_LOG => match extra {
            0 => {}
            1 => {
                r.bytes(2 * h, "truncated log ids")?;
                r.string("truncated log name")?;
                r.string("truncated log email")?;
                r.varint("bad log time")?;
                r.bytes(2, "truncated tz offset")?;
                r.string("truncated log message")?;
            }
            _ => return err(0, "invalid log value type"),
        },
        BLOCK_OBJ => {
            for _ in 0..obj_position_count(&mut r, extra)? {
                r.varint("bad obj position")?;
            }
        }
        BLOCK_INDEX => {
            r.varint("bad index block position")?;
        }
        _ => return err(0, "unknown block type"),
    }
    Ok(r.pos())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_round_trip_keeps_extra() {
        let mut out = Vec::new();
        assert!(encode_key(&mut out, b"", b"refs/heads/a", 6));
        assert!(!encode_key(&mut out, b"refs/heads/a", b"refs/heads/b", 1));
        let mut key = Vec::new();
        let (x, n) = decode_key(&out, &mut key).unwrap();
        assert_eq!((x, key.as_slice()), (6, &b"refs/heads/a"[..]));
        let (x, _) = decode_key(&out[n..], &mut key).unwrap();
        assert_eq!((x, key.as_slice()), (1, &b"refs/heads/b"[..]));
        // A prefix longer than the previous key is a format error.
        let mut short = b"ab".to_vec();
        assert!(decode_key(&[5, 8, b'x'], &mut short).is_err());
    }

    #[test]
    fn suffix_length_example() {
        // (17 << 3) | 1 = 137 encodes as 80 09.
        let mut out = Vec::new();
        encode_key(&mut out, b"", b"refs/heads/master", 1);
        assert_eq!(&out[..3], &[0x00, 0x80, 0x09]);
    }

    #[test]
    fn ref_values_round_trip() {
        let a = ObjectId::from_bytes(&[7; 20]).unwrap();
        let b = ObjectId::from_bytes(&[9; 20]).unwrap();
        let vals = [
            RefValue::Deletion,
            RefValue::Val1(a),
            RefValue::Val2 {
                value: a,
                peeled: b,
            },
            RefValue::Symref(b"refs/heads/main".to_vec()),
        ];
        for v in &vals {
            let mut out = Vec::new();
            let extra = encode_ref_value(&mut out, 3, v);
            let mut got = RefValue::Symref(Vec::new());
            let mut spare = Vec::new();
            let (d, n) =
                decode_ref_value(&out, extra, HashKind::Sha1, &mut got, &mut spare).unwrap();
            assert_eq!((d, n, &got), (3, out.len(), v));
            assert_eq!(
                skip_value(&out, BLOCK_REF, extra, HashKind::Sha1).unwrap(),
                out.len()
            );
        }
        let mut got = RefValue::Deletion;
        assert!(decode_ref_value(&[0], 4, HashKind::Sha1, &mut got, &mut Vec::new()).is_err());
    }

    #[test]
    fn obj_values_round_trip() {
        for positions in [
            vec![100, 200, 300],
            (0..9).map(|i| i * 4096).collect(),
            vec![],
        ] {
            let mut out = Vec::new();
            let extra = encode_obj_value(&mut out, &positions);
            let mut got = Vec::new();
            assert_eq!(decode_obj_value(&out, extra, &mut got).unwrap(), out.len());
            assert_eq!(got, positions);
        }
        // 3 positions 100, 200, 300: 64 64 64 with cnt_3 = 3.
        let mut out = Vec::new();
        assert_eq!(encode_obj_value(&mut out, &[100, 200, 300]), 3);
        assert_eq!(out, [0x64, 0x64, 0x64]);
        let mut got = Vec::new();
        // Repeated positions are corruption.
        assert!(decode_obj_value(&[100, 0], 2, &mut got).is_err());
        // An absurd count is refused before allocating.
        assert!(decode_obj_value(&[0x80, 0xfe, 0xfe, 0xfe, 0x7f, 0], 0, &mut got).is_err());
    }

    #[test]
    fn log_key_split() {
        let mut k = Vec::new();
        log_key(&mut k, b"HEAD", 2);
        assert_eq!(
            &k[4..],
            &[0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfd]
        );
        assert_eq!(split_log_key(&k).unwrap(), (&b"HEAD"[..], 2));
        assert!(split_log_key(b"short").is_err());
        assert!(split_log_key(b"HEADx12345678").is_err());
    }
}
