//! File header and footer.
//!
//! ```text
//! header  "REFT" version:u8 block_size:u24 min_update_index:u64 max_update_index:u64
//!         [hash_id:u32 ("sha1" | "s256"), version 2 only]                    24 / 28 bytes
//! footer  header-copy ref_index_pos:u64 (obj_pos << 5 | obj_id_len):u64 obj_index_pos:u64
//!         log_pos:u64 log_index_pos:u64 crc32:u32                            68 / 72 bytes
//! ```

use super::codec::{be24, be32, be64};
use super::HashKind;

/// The magic at the start of header and footer.
pub const MAGIC: &[u8; 4] = b"REFT";
/// Hash id of SHA-1 in a version 2 header.
pub const HASH_ID_SHA1: u32 = 0x7368_6131;
/// Hash id of SHA-256 in a version 2 header.
pub const HASH_ID_SHA256: u32 = 0x7332_3536;

/// The decoded header fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub version: u8,
    pub hash: HashKind,
    pub block_size: u32,
    pub min_update_index: u64,
    pub max_update_index: u64,
}

impl Header {
    /// Header size for this header's version.
    pub fn size(&self) -> usize {
        if self.version == 1 {
            24
        } else {
            28
        }
    }

    /// Appends the encoded header to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(MAGIC);
        out.push(self.version);
        out.extend_from_slice(&self.block_size.to_be_bytes()[1..]);
        out.extend_from_slice(&self.min_update_index.to_be_bytes());
        out.extend_from_slice(&self.max_update_index.to_be_bytes());
        if self.version == 2 {
            let id = match self.hash {
                HashKind::Sha1 => HASH_ID_SHA1,
                HashKind::Sha256 => HASH_ID_SHA256,
            };
            out.extend_from_slice(&id.to_be_bytes());
        }
    }

    /// Parses a header at the start of `buf`: `Err((offset, what))` when invalid.
    pub fn parse(buf: &[u8]) -> Result<Header, (u64, &'static str)> {
        if buf.get(..4) != Some(&MAGIC[..]) {
            return Err((0, "bad magic"));
        }
        let version = *buf.get(4).ok_or((4, "truncated header"))?;
        let hash = match version {
            1 => HashKind::Sha1,
            2 => match be32(buf, 24).ok_or((24, "truncated header"))? {
                HASH_ID_SHA1 => HashKind::Sha1,
                HASH_ID_SHA256 => HashKind::Sha256,
                _ => return Err((24, "unknown hash id")),
            },
            _ => return Err((4, "unsupported version")),
        };
        Ok(Header {
            version,
            hash,
            block_size: be24(buf, 5).ok_or((5, "truncated header"))?,
            min_update_index: be64(buf, 8).ok_or((8, "truncated header"))?,
            max_update_index: be64(buf, 16).ok_or((16, "truncated header"))?,
        })
    }
}

/// The footer's section pointers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footer {
    pub ref_index_position: u64,
    pub obj_position: u64,
    pub obj_id_len: u8,
    pub obj_index_position: u64,
    pub log_position: u64,
    pub log_index_position: u64,
}

impl Footer {
    /// Appends header copy, pointers and CRC to `out`.
    pub fn write(&self, header: &Header, out: &mut Vec<u8>) {
        let start = out.len();
        header.write(out);
        out.extend_from_slice(&self.ref_index_position.to_be_bytes());
        out.extend_from_slice(
            &((self.obj_position << 5) | u64::from(self.obj_id_len)).to_be_bytes(),
        );
        out.extend_from_slice(&self.obj_index_position.to_be_bytes());
        out.extend_from_slice(&self.log_position.to_be_bytes());
        out.extend_from_slice(&self.log_index_position.to_be_bytes());
        let crc = crc32fast::hash(out.get(start..).unwrap_or_default());
        out.extend_from_slice(&crc.to_be_bytes());
    }

    /// Parses the footer `buf` (exactly the footer bytes) of a table whose header is
    /// `header`. Offsets in errors are relative to the footer start.
    pub fn parse(
        buf: &[u8],
        header: &Header,
        header_bytes: &[u8],
    ) -> Result<Footer, (u64, &'static str)> {
        let hs = header.size();
        if buf.len() != hs + 44 {
            return Err((0, "truncated footer"));
        }
        if buf.get(..4) != Some(&MAGIC[..]) {
            return Err((0, "bad footer magic"));
        }
        if buf.get(..hs) != header_bytes.get(..hs) {
            return Err((0, "footer does not repeat the header"));
        }
        let crc = be32(buf, hs + 40).ok_or((hs as u64 + 40, "truncated footer"))?;
        if crc32fast::hash(buf.get(..hs + 40).unwrap_or_default()) != crc {
            return Err((hs as u64 + 40, "footer CRC mismatch"));
        }
        let f = |i: usize| be64(buf, hs + 8 * i).unwrap_or(0);
        let obj = f(1);
        let footer = Footer {
            ref_index_position: f(0),
            obj_position: obj >> 5,
            obj_id_len: (obj & 31) as u8,
            obj_index_position: f(2),
            log_position: f(3),
            log_index_position: f(4),
        };
        if footer.obj_position > 0 && footer.obj_id_len == 0 {
            return Err((hs as u64 + 8, "obj section without object id length"));
        }
        if usize::from(footer.obj_id_len) > header.hash.size() {
            return Err((hs as u64 + 8, "object id length larger than the hash"));
        }
        Ok(footer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_footer_round_trip() {
        for hash in [HashKind::Sha1, HashKind::Sha256] {
            let h = Header {
                version: hash.version(),
                hash,
                block_size: 4096,
                min_update_index: 1,
                max_update_index: 3,
            };
            let mut out = Vec::new();
            h.write(&mut out);
            assert_eq!(out.len(), hash.header_size());
            assert_eq!(Header::parse(&out).unwrap(), h);
            let f = Footer {
                log_position: 137,
                obj_position: 500,
                obj_id_len: 2,
                ..Footer::default()
            };
            let mut foot = Vec::new();
            f.write(&h, &mut foot);
            assert_eq!(foot.len(), hash.footer_size());
            assert_eq!(Footer::parse(&foot, &h, &out).unwrap(), f);
            let mut bad = foot.clone();
            bad[hash.header_size() + 3] ^= 1;
            assert!(Footer::parse(&bad, &h, &out).is_err());
        }
    }
}
