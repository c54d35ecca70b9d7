//! The table writer: records in, one complete `.ref` file out, byte for byte as git 2.47
//! writes it.
//!
//! Everything is built in memory: one output buffer, one block buffer, one scratch buffer
//! for values, one for messages, one deflate stream, one list of index records whose key
//! buffers are reused — all kept from one record, one block and one table to the next.
//! Writing a record allocates nothing once the buffers have grown.

use flate2::{Compress, Compression, FlushCompress, Status};

use crate::error::{Error, Result};
use crate::format::block::BlockWriter;
use crate::format::codec::{
    self, encode_log_value, encode_obj_value, encode_ref_value, BLOCK_INDEX, BLOCK_LOG, BLOCK_OBJ,
    BLOCK_REF,
};
use crate::format::header::{Footer, Header};
use crate::format::{varint, HashKind, LogRecord, ObjectId, RefRecord, RefValue};

/// Writer options; `Default` is git's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteOptions {
    /// Block size in bytes (0 = 4096); must be below 2^24.
    pub block_size: u32,
    /// A restart is forced every this many records (0 = 16).
    pub restart_interval: u16,
    /// No padding and an index from 2 blocks on (git never sets it).
    pub unpadded: bool,
    /// No obj section (`reftable.indexObjects=false`).
    pub skip_index_objects: bool,
    /// Store log messages verbatim instead of git's newline normalisation.
    pub exact_log_message: bool,
    /// The object hash; SHA-256 tables are format version 2.
    pub hash: HashKind,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            block_size: 4096,
            restart_interval: 16,
            unpadded: false,
            skip_index_objects: false,
            exact_log_message: false,
            hash: HashKind::Sha1,
        }
    }
}

impl WriteOptions {
    fn normalized(mut self) -> Self {
        if self.block_size == 0 {
            self.block_size = 4096;
        }
        if self.restart_interval == 0 {
            self.restart_interval = 16;
        }
        self
    }
}

/// Per-section statistics (as git's `reftable_block_stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SectionStats {
    /// Records written.
    pub entries: u64,
    /// Restarts registered.
    pub restarts: u64,
    /// Data blocks written.
    pub blocks: u64,
    /// Index blocks written for this section.
    pub index_blocks: u64,
    /// Number of index levels (0 = no index).
    pub max_index_level: u32,
    /// Offset of the first block (0 when it is the first block of the file).
    pub offset: u64,
    /// Offset of the top index level, 0 without index.
    pub index_offset: u64,
}

/// Statistics of the last table written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriterStats {
    pub refs: SectionStats,
    pub objs: SectionStats,
    pub logs: SectionStats,
    /// Index blocks of every section together.
    pub index_blocks: u64,
    /// All blocks written.
    pub blocks: u64,
    /// The obj section's id prefix length (set whenever the obj section was attempted).
    pub object_id_len: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Idle,
    Refs,
    Logs,
    Done,
}

#[derive(Debug, Default)]
struct IndexEntry {
    key: Vec<u8>,
    offset: u64,
}

/// Writes one table at a time into an in-memory buffer.
pub struct TableWriter {
    opts: WriteOptions,
    header: Header,
    state: State,
    out: Vec<u8>,
    next: u64,
    pending_padding: usize,
    bw: BlockWriter,
    bw_active: bool,
    last_key: Vec<u8>,
    key: Vec<u8>,
    val: Vec<u8>,
    msg: Vec<u8>,
    index: Vec<IndexEntry>,
    index_len: usize,
    index_prev: Vec<IndexEntry>,
    objs: Vec<(ObjectId, u64)>,
    positions: Vec<u64>,
    compress: Compress,
    stats: WriterStats,
}

impl TableWriter {
    /// A writer with options `opts`; call [`TableWriter::begin`] before adding records.
    pub fn new(opts: WriteOptions) -> TableWriter {
        let opts = opts.normalized();
        TableWriter {
            opts,
            header: Header {
                version: opts.hash.version(),
                hash: opts.hash,
                block_size: opts.block_size,
                min_update_index: 0,
                max_update_index: 0,
            },
            state: State::Idle,
            out: Vec::new(),
            next: 0,
            pending_padding: 0,
            bw: BlockWriter::default(),
            bw_active: false,
            last_key: Vec::new(),
            key: Vec::new(),
            val: Vec::new(),
            msg: Vec::new(),
            index: Vec::new(),
            index_len: 0,
            index_prev: Vec::new(),
            objs: Vec::new(),
            positions: Vec::new(),
            compress: Compress::new(Compression::new(9), true),
            stats: WriterStats::default(),
        }
    }

    /// Replaces the options; takes effect at the next [`TableWriter::begin`].
    pub fn set_options(&mut self, opts: WriteOptions) {
        self.opts = opts.normalized();
    }

    /// The options in effect.
    pub fn options(&self) -> &WriteOptions {
        &self.opts
    }

    /// Starts a new table with update-index limits `[min, max]`, reusing all buffers.
    /// Fails (API error) for a block size of 2^24 or more.
    pub fn begin(&mut self, min_update_index: u64, max_update_index: u64) -> Result<()> {
        if self.opts.block_size >= 1 << 24 {
            return Err(Error::Api("reftable block size cannot exceed 16MB".into()));
        }
        self.header = Header {
            version: self.opts.hash.version(),
            hash: self.opts.hash,
            block_size: self.opts.block_size,
            min_update_index,
            max_update_index,
        };
        self.out.clear();
        self.next = 0;
        self.pending_padding = 0;
        self.last_key.clear();
        self.index_len = 0;
        self.objs.clear();
        self.stats = WriterStats::default();
        self.reinit_block(BLOCK_REF);
        self.state = State::Refs;
        Ok(())
    }

    /// Statistics of the table being (or last) written.
    pub fn stats(&self) -> &WriterStats {
        &self.stats
    }

    /// The output buffer: after `finish`, the complete table (also after `EmptyTable`).
    pub fn output(&self) -> &[u8] {
        &self.out
    }

    /// Moves the bytes written so far to `sink` and empties the output buffer; offsets
    /// are unaffected. A caller streaming a large table calls this between records, then
    /// writes what `finish` returns after them.
    pub fn drain_output(&mut self, sink: &mut dyn std::io::Write) -> std::io::Result<()> {
        sink.write_all(&self.out)?;
        self.out.clear();
        Ok(())
    }

    fn check_id(&self, id: &ObjectId) -> Result<()> {
        if id.as_bytes().len() != self.opts.hash.size() {
            return Err(Error::Api(format!(
                "object id of {} bytes in a {} table",
                id.as_bytes().len(),
                self.opts.hash.name()
            )));
        }
        Ok(())
    }

    /// Adds a ref record. Keys must strictly increase; all refs come before all logs;
    /// `min <= update_index <= max`.
    pub fn add_ref(&mut self, rec: &RefRecord) -> Result<()> {
        match self.state {
            State::Refs => {}
            State::Logs => return Err(Error::Api("ref record added after log records".into())),
            _ => return Err(Error::Api("add_ref outside begin/finish".into())),
        }
        if rec.name.is_empty() {
            return Err(Error::Api("empty ref name".into()));
        }
        let (min, max) = (self.header.min_update_index, self.header.max_update_index);
        if rec.update_index < min || rec.update_index > max {
            return Err(Error::Api(format!(
                "update index {} of {} outside table limits {min}..={max}",
                rec.update_index,
                String::from_utf8_lossy(&rec.name)
            )));
        }
        match &rec.value {
            RefValue::Val1(id) => self.check_id(id)?,
            RefValue::Val2 { value, peeled } => {
                self.check_id(value)?;
                self.check_id(peeled)?;
            }
            _ => {}
        }
        self.key.clear();
        self.key.extend_from_slice(&rec.name);
        self.val.clear();
        let extra = encode_ref_value(&mut self.val, rec.update_index - min, &rec.value);
        self.add_record(BLOCK_REF, extra)?;
        if !self.opts.skip_index_objects {
            // Consecutive refs of one block often share an id: keep one entry (the
            // obj section dedups anyway), so the list grows with distinct ids, not refs.
            let next = self.next;
            let mut push = |id: ObjectId| {
                if self.objs.last() != Some(&(id, next)) {
                    self.objs.push((id, next));
                }
            };
            match &rec.value {
                RefValue::Val1(id) => push(*id),
                RefValue::Val2 { value, peeled } => {
                    push(*value);
                    push(*peeled);
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Adds a log record. Keys (refname, then update index descending) must strictly
    /// increase. Updates need `update_index <= max` (no lower bound); unless
    /// `exact_log_message`, the message is normalised to one line ending in `\n`.
    pub fn add_log(&mut self, log: &LogRecord) -> Result<()> {
        self.add_log_inner(log, self.opts.exact_log_message)
    }

    /// Adds a log record whose message is written as it is, whatever
    /// `exact_log_message` says: git's record with a NULL message (the existence marker
    /// of `create_reflog` and of an emptied reflog keeps an empty message until a
    /// compaction rewrites it as `"\n"`).
    pub fn add_log_verbatim(&mut self, log: &LogRecord) -> Result<()> {
        self.add_log_inner(log, true)
    }

    fn add_log_inner(&mut self, log: &LogRecord, exact: bool) -> Result<()> {
        if !matches!(self.state, State::Refs | State::Logs) {
            return Err(Error::Api("add_log outside begin/finish".into()));
        }
        if log.refname.is_empty() {
            return Err(Error::Api("empty log ref name".into()));
        }
        self.msg.clear();
        if !log.deleted {
            if log.update_index > self.header.max_update_index {
                return Err(Error::Api(format!(
                    "log update index {} above table maximum {}",
                    log.update_index, self.header.max_update_index
                )));
            }
            self.check_id(&log.old_id)?;
            self.check_id(&log.new_id)?;
            self.msg.extend_from_slice(&log.message);
            if !exact {
                while self.msg.last() == Some(&b'\n') {
                    self.msg.pop();
                }
                if self.msg.contains(&b'\n') {
                    return Err(Error::Api(format!(
                        "multi-line log message for {}",
                        String::from_utf8_lossy(&log.refname)
                    )));
                }
                self.msg.push(b'\n');
            }
        }
        if self.state == State::Refs {
            self.finish_public_section()?;
            self.state = State::Logs;
        }
        self.next -= self.pending_padding as u64;
        self.pending_padding = 0;
        self.key.clear();
        codec::log_key(&mut self.key, &log.refname, log.update_index);
        self.val.clear();
        let msg = std::mem::take(&mut self.msg);
        let extra = encode_log_value(&mut self.val, log, &msg);
        self.msg = msg;
        self.add_record(BLOCK_LOG, extra)
    }

    /// Finishes the table: remaining sections, indexes, footer. Returns the table bytes,
    /// or `Err(EmptyTable)` when no record was added (the 92/100-byte table is still in
    /// [`TableWriter::output`]).
    pub fn finish(&mut self) -> Result<&[u8]> {
        if !matches!(self.state, State::Refs | State::Logs) {
            return Err(Error::Api("finish without begin".into()));
        }
        self.finish_public_section()?;
        self.state = State::Done;
        let empty = self.next == 0;
        self.pending_padding = 0;
        if empty {
            self.header.write(&mut self.out);
        }
        let footer = Footer {
            ref_index_position: self.stats.refs.index_offset,
            obj_position: self.stats.objs.offset,
            obj_id_len: self.stats.object_id_len,
            obj_index_position: self.stats.objs.index_offset,
            log_position: self.stats.logs.offset,
            log_index_position: self.stats.logs.index_offset,
        };
        footer.write(&self.header, &mut self.out);
        if empty {
            return Err(Error::EmptyTable);
        }
        Ok(&self.out)
    }

    fn reinit_block(&mut self, typ: u8) {
        let header_off = if self.next == 0 {
            self.opts.hash.header_size()
        } else {
            0
        };
        self.bw.reset(
            typ,
            self.opts.block_size as usize,
            header_off,
            usize::from(self.opts.restart_interval),
        );
        self.bw_active = true;
    }

    fn add_record(&mut self, typ: u8, extra: u8) -> Result<()> {
        if self.key.is_empty() {
            return Err(Error::Api("empty key".into()));
        }
        if !self.last_key.is_empty() && self.last_key.as_slice() >= self.key.as_slice() {
            return Err(Error::Api(format!(
                "keys out of order: {:?} after {:?}",
                String::from_utf8_lossy(&self.key),
                String::from_utf8_lossy(&self.last_key)
            )));
        }
        self.last_key.clear();
        self.last_key.extend_from_slice(&self.key);
        self.add_to_block(typ, extra)
    }

    fn add_to_block(&mut self, typ: u8, extra: u8) -> Result<()> {
        if !self.bw_active {
            self.reinit_block(typ);
        }
        if self.bw.add(&self.key, extra, &self.val) {
            return Ok(());
        }
        self.flush_block()?;
        self.reinit_block(typ);
        if self.bw.add(&self.key, extra, &self.val) {
            return Ok(());
        }
        Err(Error::EntryTooBig)
    }

    fn section_stats(&mut self, typ: u8) -> Option<&mut SectionStats> {
        match typ {
            BLOCK_REF => Some(&mut self.stats.refs),
            BLOCK_OBJ => Some(&mut self.stats.objs),
            BLOCK_LOG => Some(&mut self.stats.logs),
            _ => None,
        }
    }

    fn flush_block(&mut self) -> Result<()> {
        if !self.bw_active || self.bw.entries() == 0 {
            return Ok(());
        }
        let typ = self.bw.typ();
        let header_off = self.bw.header_off();
        let entries = self.bw.entries() as u64;
        let restarts = self.bw.restart_count() as u64;
        let first_block = self.next == 0;
        let header = self.header;
        let block = self.bw.finish();
        if first_block {
            let mut h = Vec::with_capacity(28);
            header.write(&mut h);
            if let Some(dst) = block.get_mut(..h.len()) {
                dst.copy_from_slice(&h);
            }
        }
        // Padding owed by the previous block is written only now (git's padded_write).
        self.out.resize(self.out.len() + self.pending_padding, 0);
        let start = self.out.len();
        if typ == BLOCK_LOG {
            let skip = header_off + 4;
            let (head, body) = block.split_at(skip.min(block.len()));
            self.out.extend_from_slice(head);
            self.compress.reset();
            self.out.reserve(body.len() + body.len() / 8 + 64);
            loop {
                let before = self.compress.total_in() as usize;
                let input = body.get(before..).unwrap_or_default();
                match self
                    .compress
                    .compress_vec(input, &mut self.out, FlushCompress::Finish)
                {
                    Ok(Status::StreamEnd) => break,
                    Ok(_) => self.out.reserve(body.len() / 2 + 64),
                    Err(e) => {
                        return Err(Error::Zlib {
                            file: String::new(),
                            offset: self.next,
                            what: e.to_string(),
                        })
                    }
                }
            }
        } else {
            self.out.extend_from_slice(block);
        }
        let raw = self.out.len() - start;
        let padding = if !self.opts.unpadded && typ != BLOCK_LOG {
            (self.opts.block_size as usize).saturating_sub(raw)
        } else {
            0
        };
        self.pending_padding = padding;
        let next = self.next;
        if let Some(s) = self.section_stats(typ) {
            if s.blocks == 0 && next > 0 {
                s.offset = next;
            }
            s.entries += entries;
            s.restarts += restarts;
            s.blocks += 1;
        } else {
            self.stats.index_blocks += 1;
        }
        self.stats.blocks += 1;
        // One index record per block: its last key and its offset.
        if self.index_len == self.index.len() {
            self.index.push(IndexEntry::default());
        }
        if let Some(e) = self.index.get_mut(self.index_len) {
            e.key.clear();
            e.key.extend_from_slice(self.bw.last_key());
            e.offset = next;
        }
        self.index_len += 1;
        self.next += (padding + raw) as u64;
        self.bw_active = false;
        Ok(())
    }

    fn finish_section(&mut self) -> Result<()> {
        let typ = self.bw.typ();
        let before = self.stats.index_blocks;
        self.flush_block()?;
        let threshold = if self.opts.unpadded { 1 } else { 3 };
        let mut index_start = 0;
        let mut levels = 0;
        while self.index_len > threshold {
            levels += 1;
            index_start = self.next;
            self.reinit_block(BLOCK_INDEX);
            std::mem::swap(&mut self.index, &mut self.index_prev);
            let n = self.index_len;
            self.index_len = 0;
            for i in 0..n {
                let Some(e) = self.index_prev.get(i) else {
                    break;
                };
                self.key.clear();
                self.key.extend_from_slice(&e.key);
                self.val.clear();
                varint::put(&mut self.val, e.offset);
                self.add_to_block(BLOCK_INDEX, 0)?;
            }
            self.flush_block()?;
            // A level that holds one record per block does not shrink, and neither would
            // any level above it (same keys): git's writer loops forever here.
            if self.index_len >= n {
                return Err(Error::EntryTooBig);
            }
        }
        self.index_len = 0;
        let index_blocks = self.stats.index_blocks - before;
        if let Some(s) = self.section_stats(typ) {
            s.index_blocks = index_blocks;
            s.index_offset = index_start;
            s.max_index_level = levels;
        }
        self.last_key.clear();
        Ok(())
    }

    fn finish_public_section(&mut self) -> Result<()> {
        if !self.bw_active {
            return Ok(());
        }
        let typ = self.bw.typ();
        self.finish_section()?;
        if typ == BLOCK_REF && !self.opts.skip_index_objects && self.stats.refs.index_blocks > 0 {
            self.write_obj_section()?;
        }
        self.objs.clear();
        self.bw_active = false;
        Ok(())
    }

    fn write_obj_section(&mut self) -> Result<()> {
        let mut objs = std::mem::take(&mut self.objs);
        objs.sort_unstable();
        objs.dedup();
        let mut common = 1;
        for w in objs.windows(2) {
            if let [(a, _), (b, _)] = w {
                if a != b {
                    common = common.max(codec::common_prefix(a.as_bytes(), b.as_bytes()));
                }
            }
        }
        let id_len = (common + 1).min(self.opts.hash.size());
        self.stats.object_id_len = id_len as u8;
        self.reinit_block(BLOCK_OBJ);
        let mut positions = std::mem::take(&mut self.positions);
        let mut i = 0;
        let mut result = Ok(());
        while let Some((id, _)) = objs.get(i).copied() {
            positions.clear();
            while let Some((other, off)) = objs.get(i) {
                if *other != id {
                    break;
                }
                positions.push(*off);
                i += 1;
            }
            self.key.clear();
            self.key
                .extend_from_slice(id.as_bytes().get(..id_len).unwrap_or_default());
            self.val.clear();
            let extra = encode_obj_value(&mut self.val, &positions);
            if !self.bw_active {
                self.reinit_block(BLOCK_OBJ);
            }
            if self.bw.add(&self.key, extra, &self.val) {
                continue;
            }
            if let Err(e) = self.flush_block() {
                result = Err(e);
                break;
            }
            self.reinit_block(BLOCK_OBJ);
            if self.bw.add(&self.key, extra, &self.val) {
                continue;
            }
            // Too many positions for one block: count 0 means "scan all refs".
            self.val.clear();
            let extra = encode_obj_value(&mut self.val, &[]);
            if !self.bw.add(&self.key, extra, &self.val) {
                result = Err(Error::EntryTooBig);
                break;
            }
        }
        self.positions = positions;
        objs.clear();
        self.objs = objs;
        result?;
        self.finish_section()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_table_is_header_and_footer() {
        let mut w = TableWriter::new(WriteOptions::default());
        w.begin(1, 1).unwrap();
        assert!(matches!(w.finish(), Err(Error::EmptyTable)));
        assert_eq!(w.output().len(), 92);
        let mut w = TableWriter::new(WriteOptions {
            hash: HashKind::Sha256,
            ..WriteOptions::default()
        });
        w.begin(1, 1).unwrap();
        assert!(matches!(w.finish(), Err(Error::EmptyTable)));
        assert_eq!(w.output().len(), 100);
    }

    #[test]
    fn misuse_is_an_api_error() {
        let id = ObjectId::from_bytes(&[1; 20]).unwrap();
        let r = |n: &str, ui| RefRecord {
            name: n.as_bytes().to_vec(),
            update_index: ui,
            value: RefValue::Val1(id),
        };
        let mut w = TableWriter::new(WriteOptions::default());
        assert!(matches!(w.add_ref(&r("a", 1)), Err(Error::Api(_))));
        w.begin(1, 2).unwrap();
        assert!(matches!(w.add_ref(&r("", 1)), Err(Error::Api(_))));
        assert!(matches!(w.add_ref(&r("a", 3)), Err(Error::Api(_))));
        assert!(matches!(w.add_ref(&r("a", 0)), Err(Error::Api(_))));
        w.add_ref(&r("b", 1)).unwrap();
        assert!(matches!(w.add_ref(&r("a", 1)), Err(Error::Api(_))));
        assert!(matches!(w.add_ref(&r("b", 1)), Err(Error::Api(_))));
        let mut log = LogRecord {
            refname: b"b".to_vec(),
            update_index: 1,
            message: b"one\ntwo".to_vec(),
            ..LogRecord::default()
        };
        assert!(matches!(w.add_log(&log), Err(Error::Api(_))));
        log.message = b"one\n\n".to_vec();
        w.add_log(&log).unwrap();
        assert!(matches!(w.add_ref(&r("c", 1)), Err(Error::Api(_))));
        log.update_index = 3;
        assert!(
            matches!(w.add_log(&log), Err(Error::Api(_))),
            "ui above max"
        );
        w.finish().unwrap();
    }

    #[test]
    fn too_big_entry() {
        let mut w = TableWriter::new(WriteOptions {
            block_size: 256,
            ..WriteOptions::default()
        });
        w.begin(1, 1).unwrap();
        let log = LogRecord {
            refname: b"refs/heads/x".to_vec(),
            update_index: 1,
            message: vec![b'a'; 255],
            ..LogRecord::default()
        };
        assert!(matches!(w.add_log(&log), Err(Error::EntryTooBig)));
    }
}
