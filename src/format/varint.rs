//! git's varint: the pack-file "offset" encoding (big-endian groups of 7 bits, each
//! continuation adding one), not LEB128.
//!
//! ```text
//! 0 -> 00   127 -> 7f   128 -> 80 00   137 -> 80 09   300 -> 81 2c   u64::MAX -> 80 fe×8 7f
//! ```

/// Longest encoding of a u64.
pub const MAX_VARINT_LEN: usize = 10;

/// Encodes `v` into a stack buffer; returns the buffer and the start of the encoding
/// (the bytes are `buf[start..]`).
#[inline]
pub fn encode(mut v: u64) -> ([u8; MAX_VARINT_LEN], usize) {
    let mut buf = [0u8; MAX_VARINT_LEN];
    let mut i = MAX_VARINT_LEN - 1;
    let mut byte = (v & 0x7f) as u8;
    loop {
        if let Some(b) = buf.get_mut(i) {
            *b = byte;
        }
        v >>= 7;
        if v == 0 || i == 0 {
            break;
        }
        v -= 1;
        i -= 1;
        byte = 0x80 | (v & 0x7f) as u8;
    }
    (buf, i)
}

/// Appends the encoding of `v` to `out`.
#[inline]
pub fn put(out: &mut Vec<u8>, v: u64) {
    let (buf, start) = encode(v);
    out.extend_from_slice(buf.get(start..).unwrap_or_default());
}

/// Number of bytes the encoding of `v` takes.
#[inline]
pub fn encoded_len(v: u64) -> usize {
    MAX_VARINT_LEN - encode(v).1
}

/// Decodes one varint at the start of `input`: `(value, bytes consumed)`, or `None` when
/// the input is truncated or the value overflows 64 bits.
#[inline]
pub fn get(input: &[u8]) -> Option<(u64, usize)> {
    let mut iter = input.iter();
    let mut b = *iter.next()?;
    let mut v = u64::from(b & 0x7f);
    let mut n = 1;
    while b & 0x80 != 0 {
        b = *iter.next()?;
        n += 1;
        let next = v.checked_add(1)?;
        if next > (u64::MAX >> 7) {
            return None;
        }
        v = (next << 7) | u64::from(b & 0x7f);
    }
    Some((v, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        put(&mut out, v);
        out
    }

    #[test]
    fn git_vectors() {
        let cases: &[(u64, &[u8])] = &[
            (0, &[0x00]),
            (127, &[0x7f]),
            (128, &[0x80, 0x00]),
            (137, &[0x80, 0x09]),
            (200, &[0x80, 0x48]),
            (255, &[0x80, 0x7f]),
            (256, &[0x81, 0x00]),
            (300, &[0x81, 0x2c]),
            (4096, &[0x9f, 0x00]),
            (16511, &[0xff, 0x7f]),
            (16512, &[0x80, 0x80, 0x00]),
            (
                u64::MAX,
                &[0x80, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0x7f],
            ),
        ];
        for &(v, bytes) in cases {
            assert_eq!(enc(v), bytes, "encoding {v}");
            assert_eq!(get(bytes), Some((v, bytes.len())), "decoding {v}");
            assert_eq!(encoded_len(v), bytes.len());
        }
    }

    #[test]
    fn round_trip_and_errors() {
        for v in [
            1u64 << 63,
            (1 << 63) - 1,
            1 << 56,
            (1 << 57) + 5,
            u64::MAX - 1,
        ] {
            assert_eq!(get(&enc(v)), Some((v, enc(v).len())));
        }
        // ff x9 then 00 overflows (git's varint_overflow test).
        let mut over = vec![0xffu8; 9];
        over.push(0);
        assert_eq!(get(&over), None);
        assert_eq!(get(&[]), None);
        assert_eq!(get(&[0x80]), None);
    }
}
