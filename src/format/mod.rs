//! The pure byte layer: no files, no locks, no clocks. Bytes in, values out.
//!
//! The types in this file are the shared vocabulary of every layer above and should
//! change only with care.

pub mod block;
pub mod codec;
pub mod header;
pub mod record;
pub mod varint;

pub use record::{LogRecord, RefRecord, RefValue};

use std::fmt;

/// The object hash of a repository, and so of every table in its stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum HashKind {
    /// SHA-1: 20-byte ids, table format version 1.
    #[default]
    Sha1,
    /// SHA-256: 32-byte ids, table format version 2 (hash id `s256`).
    Sha256,
}

impl HashKind {
    /// Raw id length in bytes (20 or 32).
    pub const fn size(self) -> usize {
        match self {
            HashKind::Sha1 => 20,
            HashKind::Sha256 => 32,
        }
    }
    /// Length of the hex form (40 or 64).
    pub const fn hex_len(self) -> usize {
        self.size() * 2
    }
    /// Table format version (1 or 2).
    pub const fn version(self) -> u8 {
        match self {
            HashKind::Sha1 => 1,
            HashKind::Sha256 => 2,
        }
    }
    /// Header size in bytes (24 or 28).
    pub const fn header_size(self) -> usize {
        match self {
            HashKind::Sha1 => 24,
            HashKind::Sha256 => 28,
        }
    }
    /// Footer size in bytes (68 or 72).
    pub const fn footer_size(self) -> usize {
        self.header_size() + 44
    }
    /// The name git uses in `extensions.objectFormat`.
    pub const fn name(self) -> &'static str {
        match self {
            HashKind::Sha1 => "sha1",
            HashKind::Sha256 => "sha256",
        }
    }
    /// The all-zero id of this hash.
    pub const fn null_id(self) -> ObjectId {
        ObjectId {
            len: self.size() as u8,
            bytes: [0; 32],
        }
    }
}

/// An object id (SHA-1 or SHA-256), stored inline so records never allocate for ids.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectId {
    len: u8,
    bytes: [u8; 32],
}

impl ObjectId {
    /// Builds an id from raw bytes; `None` unless the length is 20 or 32.
    pub fn from_bytes(raw: &[u8]) -> Option<ObjectId> {
        if raw.len() != 20 && raw.len() != 32 {
            return None;
        }
        let mut bytes = [0u8; 32];
        bytes.get_mut(..raw.len())?.copy_from_slice(raw);
        Some(ObjectId {
            len: raw.len() as u8,
            bytes,
        })
    }

    /// Parses exactly `kind.hex_len()` hex digits (either case).
    pub fn from_hex(hex: &[u8], kind: HashKind) -> Option<ObjectId> {
        if hex.len() != kind.hex_len() {
            return None;
        }
        let mut bytes = [0u8; 32];
        for (dst, pair) in bytes.iter_mut().zip(hex.chunks_exact(2)) {
            let [hi, lo] = pair else { return None };
            let hi = (*hi as char).to_digit(16)?;
            let lo = (*lo as char).to_digit(16)?;
            *dst = (hi * 16 + lo) as u8;
        }
        Some(ObjectId {
            len: kind.size() as u8,
            bytes,
        })
    }

    /// The raw bytes (20 or 32 of them).
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..self.len as usize).unwrap_or(&self.bytes)
    }

    /// Whether every byte is zero (git's "null oid").
    pub fn is_null(&self) -> bool {
        self.as_bytes().iter().all(|&b| b == 0)
    }

    /// The hash this id belongs to, judged by its length.
    pub fn kind(&self) -> HashKind {
        if self.len == 32 {
            HashKind::Sha256
        } else {
            HashKind::Sha1
        }
    }

    /// Appends the lowercase hex form to `out` without allocating a new string.
    pub fn write_hex(&self, out: &mut Vec<u8>) {
        fn digit(n: u8) -> u8 {
            if n < 10 {
                b'0' + n
            } else {
                b'a' + n - 10
            }
        }
        for &b in self.as_bytes() {
            out.push(digit(b >> 4));
            out.push(digit(b & 15));
        }
    }

    /// The lowercase hex form.
    pub fn to_hex(&self) -> String {
        let mut v = Vec::with_capacity(64);
        self.write_hex(&mut v);
        String::from_utf8(v).unwrap_or_default()
    }
}

impl Default for ObjectId {
    /// The SHA-1 null id; callers that know the hash use [`HashKind::null_id`].
    fn default() -> Self {
        HashKind::Sha1.null_id()
    }
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObjectId({})", self.to_hex())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let hex = b"5e30a5b5a1b1d2f0c4a1e5f5a1b2c3d4e5f60718";
        let id = ObjectId::from_hex(hex, HashKind::Sha1).unwrap();
        assert_eq!(id.to_hex().as_bytes(), hex);
        assert_eq!(id.kind(), HashKind::Sha1);
        assert!(ObjectId::from_hex(b"zz", HashKind::Sha1).is_none());
        assert!(ObjectId::from_hex(&hex[..38], HashKind::Sha1).is_none());
        assert!(HashKind::Sha256.null_id().is_null());
    }
}
