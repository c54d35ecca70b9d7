//! Building one block in memory (the write side; reading lives in `table`).
//!
//! ```text
//! [file header, first block only] type:u8 block_len:u24 records… restart:u24×N N:u16 [NUL padding]
//! ```
//! `block_len` is the end of the restart count, counted from the block start (file offset 0
//! for the first block, so it includes the file header). Restarts are forced every
//! `restart_interval` records and also placed at every record whose prefix length is 0.

use super::codec::encode_key;

/// At most this many restarts are registered in one block.
pub const MAX_RESTARTS: usize = (1 << 16) - 1;

/// One block under construction. All buffers are kept across blocks.
#[derive(Debug, Default)]
pub struct BlockWriter {
    buf: Vec<u8>,
    key_hdr: Vec<u8>,
    restarts: Vec<u32>,
    last_key: Vec<u8>,
    block_size: usize,
    header_off: usize,
    restart_interval: usize,
    entries: usize,
    typ: u8,
}

impl BlockWriter {
    /// Starts a new block of type `typ`; the first `header_off` bytes are left for the
    /// file header (zeroed until the table writer fills them).
    pub fn reset(
        &mut self,
        typ: u8,
        block_size: usize,
        header_off: usize,
        restart_interval: usize,
    ) {
        self.buf.clear();
        self.buf.resize(header_off, 0);
        self.buf.extend_from_slice(&[typ, 0, 0, 0]);
        self.restarts.clear();
        self.last_key.clear();
        self.block_size = block_size;
        self.header_off = header_off;
        self.restart_interval = restart_interval.max(1);
        self.entries = 0;
        self.typ = typ;
    }

    /// The block type.
    pub fn typ(&self) -> u8 {
        self.typ
    }

    /// Number of records added.
    pub fn entries(&self) -> usize {
        self.entries
    }

    /// Number of restarts registered.
    pub fn restart_count(&self) -> usize {
        self.restarts.len()
    }

    /// The key of the last record added.
    pub fn last_key(&self) -> &[u8] {
        &self.last_key
    }

    /// Offset of the first byte after the file header (24/28 for the first block, else 0).
    pub fn header_off(&self) -> usize {
        self.header_off
    }

    /// Adds a record if it fits (with its share of the restart table); `false` if not,
    /// in which case the block is unchanged.
    pub fn add(&mut self, key: &[u8], extra: u8, value: &[u8]) -> bool {
        let forced = self.entries % self.restart_interval == 0;
        self.key_hdr.clear();
        let prev: &[u8] = if forced { &[] } else { &self.last_key };
        let mut is_restart = encode_key(&mut self.key_hdr, prev, key, extra);
        let n = self.key_hdr.len() + value.len();
        let mut rlen = self.restarts.len();
        if rlen >= MAX_RESTARTS {
            is_restart = false;
        }
        if is_restart {
            rlen += 1;
        }
        let used = self.buf.len();
        if 2 + 3 * rlen + n > self.block_size.saturating_sub(used) {
            return false;
        }
        if is_restart {
            self.restarts.push(used as u32);
        }
        self.buf.extend_from_slice(&self.key_hdr);
        self.buf.extend_from_slice(value);
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.entries += 1;
        true
    }

    /// Appends the restart table and count and fills in `block_len`. Returns the whole
    /// uncompressed block (including the header area of the first block), whose first
    /// `header_off` bytes the caller may overwrite with the file header.
    pub fn finish(&mut self) -> &mut [u8] {
        for &r in &self.restarts {
            self.buf.extend_from_slice(&r.to_be_bytes()[1..]);
        }
        self.buf
            .extend_from_slice(&(self.restarts.len() as u16).to_be_bytes());
        let len = (self.buf.len() as u32).to_be_bytes();
        if let Some(dst) = self.buf.get_mut(self.header_off + 1..self.header_off + 4) {
            dst.copy_from_slice(&len[1..]);
        }
        &mut self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::codec::BLOCK_REF;

    #[test]
    fn restarts_forced_and_natural() {
        let mut w = BlockWriter::default();
        w.reset(BLOCK_REF, 4096, 24, 16);
        assert!(w.add(b"HEAD", 3, b"\0\x11refs/heads/master"));
        assert!(w.add(b"refs/heads/master", 1, &[1; 21]));
        assert!(w.add(b"refs/tags/initial", 1, &[2; 21]));
        assert_eq!(w.restart_count(), 2);
        let b = w.finish();
        // block_len includes the 24-byte header area; restart table [28, 53].
        let n = b.len();
        assert_eq!(&b[24..28], &[b'r', 0, 0, n as u8]);
        assert_eq!(&b[n - 8..], &[0, 0, 28, 0, 0, 53, 0, 2]);
    }

    #[test]
    fn full_block_refuses() {
        let mut w = BlockWriter::default();
        w.reset(BLOCK_REF, 40, 0, 16);
        assert!(w.add(b"a", 0, &[0; 20]));
        assert!(!w.add(b"b", 0, &[0; 20]));
        assert_eq!(w.entries(), 1);
    }
}
