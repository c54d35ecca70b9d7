//! Reading records: the cursor that walks one section of a table and seeks through its
//! indexes, and the typed reseekable iterators over refs and logs built on it.

use std::sync::Arc;

use crate::error::Result;
use crate::format::codec::{
    self, be24, decode_key, decode_log_value, decode_ref_value, restart_key, skip_value,
    DecodeError, BLOCK_INDEX, BLOCK_LOG, BLOCK_REF,
};
use crate::format::{HashKind, LogRecord, RefRecord};
use crate::table::{LogIter, RefIter};

use super::{Block, Table};

/// The shared engine of the typed iterators: walks records of one section, lending the
/// current key; seeks through indexes.
pub(super) struct Cursor {
    pub(super) table: Arc<Table>,
    pub(super) block: Option<Block>,
    pub(super) pos: usize,
    pub(super) key: Vec<u8>,
    pub(super) single_block: bool,
    /// The block the last seek started from (an index root or a section's first
    /// block), kept so that reseeking the same section does not go through the cache.
    pub(super) root: Option<Block>,
    /// A (section type, offset) known to hold no block of that section: where a scan
    /// of the section stops, remembered so that it is not looked up again.
    pub(super) section_end: Option<(u8, u64)>,
}

impl Cursor {
    pub(super) fn new(table: Arc<Table>) -> Cursor {
        Cursor {
            table,
            block: None,
            pos: 0,
            key: Vec::new(),
            single_block: false,
            root: None,
            section_end: None,
        }
    }

    /// The block after `b` if it belongs to the same section.
    fn next_in_section(&mut self, b: &Block) -> Result<Option<Block>> {
        let (typ, next) = (b.info.typ, b.info.offset + b.info.on_disk);
        if self.section_end == Some((typ, next)) {
            return Ok(None);
        }
        let nb = self.table.block_at(next, &[typ])?;
        if nb.is_none() {
            self.section_end = Some((typ, next));
        }
        Ok(nb)
    }

    pub(super) fn set_block(&mut self, b: Block) {
        self.pos = b.first_record();
        self.key.clear();
        self.block = Some(b);
    }

    fn hash(&self) -> HashKind {
        self.table.header.hash
    }

    /// Positions before the first record of section `typ` whose key is `>= want`.
    pub(super) fn seek(&mut self, typ: u8, want: &[u8]) -> Result<()> {
        self.block = None;
        self.single_block = false;
        self.key.clear();
        let t = self.table.clone();
        let (present, start, index) = match typ {
            BLOCK_REF => (t.has_refs, 0, t.footer.ref_index_position),
            BLOCK_LOG => (
                t.has_logs,
                t.footer.log_position,
                t.footer.log_index_position,
            ),
            _ => (
                t.footer.obj_position > 0,
                t.footer.obj_position,
                t.footer.obj_index_position,
            ),
        };
        if !present {
            return Ok(());
        }
        if index == 0 {
            return self.seek_linear(start, typ, want);
        }
        self.seek_linear(index, BLOCK_INDEX, want)?;
        // Descend: every child sits before its parent, so offsets strictly decrease.
        loop {
            let parent = self.block.as_ref().map(|b| b.info.offset).unwrap_or(0);
            let Some((_, at)) = self.next_key()? else {
                self.block = None;
                return Ok(());
            };
            let (child, n) = self.decode_with(at, |b| {
                let mut r = codec::Reader::new(b);
                let v = r.varint("bad index block position")?;
                Ok((v, r.pos()))
            })?;
            self.pos = at + n;
            if child >= parent {
                return Err(t.ferr(parent, format!("index record points forward to {child}")));
            }
            match t.block_at(child, &[typ, BLOCK_INDEX])? {
                Some(b) => {
                    let c = b.info.typ;
                    self.set_block(b);
                    self.seek_in_block(want)?;
                    if c == typ {
                        return Ok(());
                    }
                }
                _ => return Err(t.ferr(child, "index record points to a block of the wrong type")),
            }
        }
    }

    fn seek_linear(&mut self, start: u64, typ: u8, want: &[u8]) -> Result<()> {
        let t = self.table.clone();
        let mut cur = match &self.root {
            Some(b) if b.info.offset == start && b.info.typ == typ => b.clone(),
            _ => {
                let Some(b) = t.block_at(start, &[typ])? else {
                    return Err(t.ferr(start, format!("expected a '{}' block", typ as char)));
                };
                self.root = Some(b.clone());
                b
            }
        };
        while let Some(nb) = self.next_in_section(&cur)? {
            let first = restart_key(
                nb.bytes()
                    .get(nb.first_record()..nb.records_end())
                    .unwrap_or_default(),
            )
            .map_err(|e| t.derr(&nb.info, e, nb.first_record()))?;
            if first > want {
                break;
            }
            cur = nb;
        }
        self.set_block(cur);
        self.seek_in_block(want)
    }

    /// Positions inside the current block before the first record `>= want`.
    fn seek_in_block(&mut self, want: &[u8]) -> Result<()> {
        let Some(b) = self.block.clone() else {
            return Ok(());
        };
        let bytes = b.bytes();
        let t = &self.table;
        let restart = |i: usize| -> Result<usize> {
            let r = be24(bytes, b.info.restart_off + 3 * i).unwrap_or(0) as usize;
            if r < b.first_record() || r >= b.info.restart_off {
                return Err(t.derr(
                    &b.info,
                    DecodeError {
                        at: 0,
                        what: "restart offset out of range",
                    },
                    b.info.restart_off + 3 * i,
                ));
            }
            Ok(r)
        };
        // First restart whose key is > want.
        let (mut lo, mut hi) = (0usize, b.info.restart_count);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let r = restart(mid)?;
            let k = restart_key(bytes.get(r..b.info.restart_off).unwrap_or_default())
                .map_err(|e| t.derr(&b.info, e, r))?;
            if k > want {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        self.pos = if lo > 0 {
            restart(lo - 1)?
        } else {
            b.first_record()
        };
        self.key.clear();
        loop {
            let prev = self.pos;
            let Some((extra, at)) = self.key_in_block()? else {
                self.pos = prev;
                return Ok(());
            };
            if self.key.as_slice() >= want {
                // Back up: the key buffer holds this record's key, a valid prefix source.
                self.pos = prev;
                return Ok(());
            }
            let typ = b.info.typ;
            let hash = self.hash();
            let n = self.decode_with(at, |v| skip_value(v, typ, extra, hash))?;
            self.pos = at + n;
        }
    }

    /// Decodes the next key in the current block, without moving to another block.
    fn key_in_block(&mut self) -> Result<Option<(u8, usize)>> {
        let Some(b) = &self.block else {
            return Ok(None);
        };
        if self.pos >= b.records_end() {
            return Ok(None);
        }
        let input = b.bytes().get(self.pos..b.records_end()).unwrap_or_default();
        match decode_key(input, &mut self.key) {
            Ok((extra, n)) => Ok(Some((extra, self.pos + n))),
            Err(e) => Err(self.table.derr(&b.info, e, self.pos)),
        }
    }

    /// Decodes the next key, moving on to the next block of the same type when the
    /// current one is done. Returns the extra bits and the offset of the value.
    pub(super) fn next_key(&mut self) -> Result<Option<(u8, usize)>> {
        loop {
            let Some(b) = &self.block else {
                return Ok(None);
            };
            if self.pos < b.records_end() {
                return self.key_in_block();
            }
            if self.single_block {
                self.block = None;
                return Ok(None);
            }
            let b = b.clone();
            let Some(nb) = self.next_in_section(&b)? else {
                self.block = None;
                return Ok(None);
            };
            self.set_block(nb);
        }
    }

    /// Runs a value decoder on the value at `at`, mapping its errors to file offsets.
    pub(super) fn decode_with<T>(
        &self,
        at: usize,
        f: impl FnOnce(&[u8]) -> Result<T, DecodeError>,
    ) -> Result<T> {
        let Some(b) = &self.block else {
            return Err(self.table.ferr(0, "no current block"));
        };
        let input = b.bytes().get(at..b.records_end()).unwrap_or_default();
        f(input).map_err(|e| self.table.derr(&b.info, e, at))
    }
}

/// A reseekable iterator over one table's refs.
pub struct TableRefIter {
    pub(super) cur: Cursor,
    pub(super) rec: RefRecord,
    pub(super) spare: Vec<u8>,
    pub(super) err: bool,
}

impl RefIter for TableRefIter {
    fn seek(&mut self, name: &[u8]) -> Result<()> {
        self.err = false;
        let r = self.cur.seek(BLOCK_REF, name);
        self.err = r.is_err();
        r
    }

    fn next(&mut self) -> Result<Option<&RefRecord>> {
        if self.err {
            self.cur.block = None;
        }
        let Some((extra, at)) = self.cur.next_key()? else {
            return Ok(None);
        };
        let hash = self.cur.hash();
        let (rec, spare) = (&mut self.rec, &mut self.spare);
        let decoded = self.cur.decode_with(at, |b| {
            decode_ref_value(b, extra, hash, &mut rec.value, spare)
        });
        let (delta, n) = match decoded {
            Ok(v) => v,
            Err(e) => {
                self.cur.block = None;
                return Err(e);
            }
        };
        self.cur.pos = at + n;
        self.rec.name.clear();
        self.rec.name.extend_from_slice(&self.cur.key);
        self.rec.update_index = self.cur.table.header.min_update_index.wrapping_add(delta);
        Ok(Some(&self.rec))
    }
}

impl TableRefIter {
    /// The table this iterator reads.
    pub fn table(&self) -> &Arc<Table> {
        &self.cur.table
    }
}

/// A reseekable iterator over one table's logs.
pub struct TableLogIter {
    pub(super) cur: Cursor,
    pub(super) rec: LogRecord,
    pub(super) want: Vec<u8>,
    pub(super) err: bool,
}

impl LogIter for TableLogIter {
    fn seek(&mut self, refname: &[u8], update_index: u64) -> Result<()> {
        self.want.clear();
        if !refname.is_empty() || update_index != u64::MAX {
            codec::log_key(&mut self.want, refname, update_index);
        }
        let want = std::mem::take(&mut self.want);
        let r = self.cur.seek(BLOCK_LOG, &want);
        self.want = want;
        self.err = r.is_err();
        r
    }

    fn next(&mut self) -> Result<Option<&LogRecord>> {
        if self.err {
            self.cur.block = None;
        }
        let Some((extra, at)) = self.cur.next_key()? else {
            return Ok(None);
        };
        let hash = self.cur.hash();
        let rec = &mut self.rec;
        let decoded = self
            .cur
            .decode_with(at, |b| decode_log_value(b, extra, hash, rec));
        let n = match decoded {
            Ok(n) => n,
            Err(e) => {
                self.cur.block = None;
                return Err(e);
            }
        };
        self.cur.pos = at + n;
        let (name, ui) = match codec::split_log_key(&self.cur.key) {
            Ok(v) => v,
            Err(e) => {
                let err = match &self.cur.block {
                    Some(b) => self.cur.table.derr(&b.info, e, at),
                    None => self.cur.table.ferr(0, e.what),
                };
                self.cur.block = None;
                return Err(err);
            }
        };
        self.rec.refname.clear();
        self.rec.refname.extend_from_slice(name);
        self.rec.update_index = ui;
        Ok(Some(&self.rec))
    }
}

impl TableLogIter {
    /// The table this iterator reads.
    pub fn table(&self) -> &Arc<Table> {
        &self.cur.table
    }
}
