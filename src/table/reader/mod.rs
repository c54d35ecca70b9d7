//! The table reader: validates header, footer and CRC on open; reads blocks on demand
//! (`pread` on the open file, never a mapping: a file truncated under us gives an error,
//! not a signal), checking each block's type before decoding it; keeps loaded blocks
//! (log blocks inflated) in a block cache bounded in bytes, which its owner hands to the
//! tables that share it (a stack's, a mount's); seeks through
//! (multi-level) indexes; iterates with reseekable cursors.
//!
//! This file opens tables and loads their blocks; `cache` is the block cache, `cursor`
//! the cursor and the ref and log iterators, `check` the dump's record listing and
//! [`Table::verify`].

mod cache;
mod check;
mod cursor;

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use flate2::{Decompress, FlushDecompress, Status};

use crate::error::{Error, Result};
use crate::format::codec::{
    be16, be24, decode_obj_value, is_block_type, DecodeError, BLOCK_LOG, BLOCK_OBJ, BLOCK_REF,
};
use crate::format::header::{Footer, Header};
use crate::format::{HashKind, LogRecord, ObjectId, RefRecord, RefValue};

use super::RefIter;

pub use cache::{BlockCache, DEFAULT_BLOCK_CACHE_BYTES};
pub use check::AnyRecord;
use cursor::Cursor;
pub use cursor::{TableLogIter, TableRefIter};

/// Largest uncompressed log block accepted (the u24 `block_len` cannot say more anyway).
const MAX_LOG_BLOCK: usize = 16 << 20;
/// How much compressed input a log block inflation reads at a time.
const INFLATE_CHUNK: usize = 64 << 10;
/// What a cached block costs beyond its bytes (the cache node, the `Arc`, the info).
const ENTRY_OVERHEAD: usize = 128;

static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

/// Where a table's bytes are: an open file read with `pread`, or bytes in memory.
enum Source {
    File(File),
    Mem(Box<[u8]>),
}

impl Source {
    /// Fills `buf` from file offset `off`; returns how many bytes were read, fewer than
    /// `buf.len()` only at the end of the file.
    fn read_at(&self, off: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Source::Mem(m) => {
                let start = usize::try_from(off).unwrap_or(usize::MAX).min(m.len());
                let src = m.get(start..).unwrap_or_default();
                let n = src.len().min(buf.len());
                if let (Some(d), Some(s)) = (buf.get_mut(..n), src.get(..n)) {
                    d.copy_from_slice(s);
                }
                Ok(n)
            }
            Source::File(f) => {
                let mut done = 0;
                while let Some(rest) = buf.get_mut(done..).filter(|r| !r.is_empty()) {
                    match f.read_at(rest, off + done as u64) {
                        Ok(0) => break,
                        Ok(n) => done += n,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(done)
            }
        }
    }
}

/// One open, immutable table, shared through `Arc` so iterators outlive stack reloads.
/// A table opened from a path keeps its file open and reads blocks as they are needed.
pub struct Table {
    name: String,
    src: Source,
    /// File size at open.
    size: u64,
    /// Key of this table's blocks in its cache.
    serial: u64,
    /// The block cache it shares with the other tables of its owner.
    cache: Arc<BlockCache>,
    header: Header,
    footer: Footer,
    /// End of the block area (file size minus footer).
    end: u64,
    has_refs: bool,
    has_logs: bool,
    inflate: Mutex<Decompress>,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("name", &self.name)
            .field("size", &self.size)
            .field("header", &self.header)
            .field("footer", &self.footer)
            .finish()
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        self.cache.forget(self.serial);
    }
}

/// Where a block is and what is in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockInfo {
    /// File offset of the block start (0 for the first block, which includes the header).
    pub offset: u64,
    /// `r`, `g`, `o` or `i`.
    pub typ: u8,
    /// 24/28 for the first block, else 0.
    pub header_off: usize,
    /// `block_len` (uncompressed for log blocks).
    pub block_len: usize,
    /// Offset of the restart table in the (uncompressed) block.
    pub restart_off: usize,
    /// Number of restarts.
    pub restart_count: usize,
    /// Bytes the block occupies on disk (with padding).
    pub on_disk: u64,
}

struct LoadedBlock {
    info: BlockInfo,
    /// The block's `block_len` bytes (inflated for log blocks), header included.
    data: Vec<u8>,
    /// Only the type is known (the block was looked at, not loaded): `info` holds no more.
    type_only: bool,
}

/// A loaded block, shared between the cache and the cursors reading it.
#[derive(Clone)]
struct Block(Arc<LoadedBlock>);

impl std::ops::Deref for Block {
    type Target = LoadedBlock;
    fn deref(&self) -> &LoadedBlock {
        &self.0
    }
}

impl Block {
    fn bytes(&self) -> &[u8] {
        &self.data
    }
    /// The records area: from after the block header to the restart table.
    fn records_end(&self) -> usize {
        self.info.restart_off
    }
    fn first_record(&self) -> usize {
        self.info.header_off + 4
    }
    fn charge(&self) -> usize {
        self.data.capacity() + ENTRY_OVERHEAD
    }
}

impl Table {
    /// Opens and validates the table at `path`. The file stays open; blocks are read from
    /// it on demand, so the file must not change while the table is open (reftable files
    /// never do: they are replaced, not rewritten). A file truncated under an open table
    /// gives errors naming the file and offset.
    ///
    /// The table has a block cache of its own ([`DEFAULT_BLOCK_CACHE_BYTES`]); tables
    /// opened together share one through [`Table::open_in`].
    pub fn open(path: impl AsRef<Path>) -> Result<Arc<Table>> {
        Table::open_in(path, &BlockCache::new(DEFAULT_BLOCK_CACHE_BYTES))
    }

    /// [`Table::open`], its blocks kept in `cache` (shared with other tables).
    pub fn open_in(path: impl AsRef<Path>, cache: &Arc<BlockCache>) -> Result<Arc<Table>> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::NotExist(path.to_path_buf())
            } else {
                Error::io(path, e)
            }
        })?;
        let size = file.metadata().map_err(|e| Error::io(path, e))?.len();
        Table::new(
            path.display().to_string(),
            Source::File(file),
            size,
            cache.clone(),
        )
    }

    /// Validates `bytes` as a table called `name` (used in error messages).
    pub fn from_bytes(name: impl Into<String>, bytes: Vec<u8>) -> Result<Arc<Table>> {
        let size = bytes.len() as u64;
        let cache = BlockCache::new(DEFAULT_BLOCK_CACHE_BYTES);
        Table::new(
            name.into(),
            Source::Mem(bytes.into_boxed_slice()),
            size,
            cache,
        )
    }

    fn new(name: String, src: Source, size: u64, cache: Arc<BlockCache>) -> Result<Arc<Table>> {
        let ferr = |off: u64, what: &str| Error::format(name.clone(), off, what);
        let ioerr = |e| Error::io(PathBuf::from(&name), e);
        if size < 29 {
            return Err(ferr(0, "file too short for a reftable"));
        }
        // Header, and the first block's type byte right after it.
        let mut head = [0u8; 29];
        let n = src.read_at(0, &mut head).map_err(ioerr)?;
        let head = head.get(..n).unwrap_or_default();
        let header = Header::parse(head).map_err(|(o, w)| ferr(o, w))?;
        let hs = header.size();
        let fs = hs + 44;
        if size < (hs + fs) as u64 {
            return Err(ferr(size, "file too short for header and footer"));
        }
        let foot_at = size - fs as u64;
        let mut foot = vec![0u8; fs];
        let n = src.read_at(foot_at, &mut foot).map_err(ioerr)?;
        let foot = foot.get(..n).unwrap_or_default();
        let footer = Footer::parse(foot, &header, head).map_err(|(o, w)| ferr(foot_at + o, w))?;
        let end = foot_at;
        let first = if (hs as u64) < end {
            head.get(hs).copied()
        } else {
            None
        };
        let has_refs = first == Some(BLOCK_REF);
        let has_logs = first == Some(BLOCK_LOG) || footer.log_position > 0;
        Ok(Arc::new(Table {
            serial: NEXT_SERIAL.fetch_add(1, Ordering::Relaxed),
            cache,
            name,
            src,
            size,
            header,
            footer,
            end,
            has_refs,
            has_logs,
            inflate: Mutex::new(Decompress::new(true)),
        }))
    }

    /// The name given at open (the path for `open`).
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The object hash of this table.
    pub fn hash_kind(&self) -> HashKind {
        self.header.hash
    }
    /// Format version (1 or 2).
    pub fn version(&self) -> u8 {
        self.header.version
    }
    /// The block size written in the header.
    pub fn block_size(&self) -> u32 {
        self.header.block_size
    }
    /// Lowest update index of the table.
    pub fn min_update_index(&self) -> u64 {
        self.header.min_update_index
    }
    /// Highest update index of the table.
    pub fn max_update_index(&self) -> u64 {
        self.header.max_update_index
    }
    /// File size in bytes (at open).
    pub fn file_size(&self) -> u64 {
        self.size
    }
    /// Reads the whole file (for dumps and tests; tables are otherwise read block by block).
    pub fn read_all(&self) -> Result<Vec<u8>> {
        let len = usize::try_from(self.size).map_err(|_| self.ferr(0, "table too large"))?;
        let mut v = vec![0u8; len];
        self.read_exact_at(0, &mut v)?;
        Ok(v)
    }
    /// The decoded header.
    pub fn header(&self) -> &Header {
        &self.header
    }
    /// The decoded footer.
    pub fn footer(&self) -> &Footer {
        &self.footer
    }
    /// Whether the table has a ref section.
    pub fn has_refs(&self) -> bool {
        self.has_refs
    }
    /// Whether the table has a log section.
    pub fn has_logs(&self) -> bool {
        self.has_logs
    }

    fn ferr(&self, off: u64, what: impl Into<String>) -> Error {
        Error::format(self.name.clone(), off, what)
    }

    fn derr(&self, block: &BlockInfo, e: DecodeError, base: usize) -> Error {
        let at = (base + e.at) as u64;
        if block.typ == BLOCK_LOG {
            self.ferr(
                block.offset,
                format!("{} (uncompressed offset {at} in log block)", e.what),
            )
        } else {
            self.ferr(block.offset + at, e.what)
        }
    }

    /// Reads up to `buf.len()` bytes at `off`; returns how many (fewer only at the end).
    fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<usize> {
        self.src
            .read_at(off, buf)
            .map_err(|e| Error::io(PathBuf::from(&self.name), e))
    }

    /// Fills `buf` from `off`, failing when the file ends first (it was truncated after
    /// it was opened).
    fn read_exact_at(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        let n = self.read_at(off, buf)?;
        if n < buf.len() {
            return Err(self.ferr(
                off + n as u64,
                format!(
                    "file ends before its size at open ({} bytes): truncated after open",
                    self.size
                ),
            ));
        }
        Ok(())
    }

    /// The block at `off`; `None` at the end of the block area or, when `want` is not
    /// empty, when the block there is of a type not in `want` (then it is not decoded).
    fn block_at(&self, off: u64, want: &[u8]) -> Result<Option<Block>> {
        if off >= self.end {
            return Ok(None);
        }
        let header_off = if off == 0 { self.header.size() } else { 0 };
        let at = off + header_off as u64;
        if off == 0 && at == self.end {
            return Ok(None); // header and footer only: an empty table
        }
        if at >= self.end {
            return Err(self.ferr(at, "block header past end of table"));
        }
        let cached = self.cache.get(self.serial, off);
        if let Some(b) = cached {
            if !want.is_empty() && !want.contains(&b.info.typ) {
                return Ok(None);
            }
            if !b.type_only {
                return Ok(Some(b));
            }
        }
        // One read that holds a whole padded block and the byte after it.
        let bs = self.header.block_size as usize;
        let first = bs.max(header_off + 4) + 1;
        let avail = usize::try_from(self.size - off).unwrap_or(usize::MAX);
        let mut buf = vec![0u8; first.min(avail)];
        let n = self.read_at(off, &mut buf)?;
        buf.truncate(n);
        let typ = buf.get(header_off).copied();
        let Some(typ) = typ else {
            return Err(self.ferr(
                at,
                "file ends before its size at open: truncated after open",
            ));
        };
        if !is_block_type(typ) {
            return Err(self.ferr(at, format!("unknown block type 0x{typ:02x}")));
        }
        if !want.is_empty() && !want.contains(&typ) {
            // Remember the type, so that the next look at this block (the end of every
            // scan of the section before it) reads nothing.
            let info = BlockInfo {
                offset: off,
                typ,
                header_off,
                block_len: 0,
                restart_off: 0,
                restart_count: 0,
                on_disk: 0,
            };
            let b = Block(Arc::new(LoadedBlock {
                info,
                data: Vec::new(),
                type_only: true,
            }));
            self.cache.insert(self.serial, off, b);
            return Ok(None);
        }
        let b = self.load_block(off, header_off, typ, buf)?;
        self.cache.insert(self.serial, off, b.clone());
        Ok(Some(b))
    }

    /// Loads the block at `off` (`header_off` past the file start for the first block),
    /// whose type byte is `typ`; `buf` holds the file bytes from `off` read so far.
    fn load_block(&self, off: u64, header_off: usize, typ: u8, mut buf: Vec<u8>) -> Result<Block> {
        let at = off + header_off as u64;
        let block_len = be24(&buf, header_off + 1)
            .filter(|_| at + 4 <= self.end)
            .ok_or_else(|| self.ferr(off, "truncated block header"))?
            as usize;
        if block_len < header_off + 4 + 2 {
            return Err(self.ferr(at + 1, format!("block length {block_len} too small")));
        }
        let (data, on_disk) = if typ == BLOCK_LOG {
            self.inflate(off, header_off, block_len, buf)?
        } else {
            if off + block_len as u64 > self.end {
                return Err(self.ferr(
                    at + 1,
                    format!("block length {block_len} past end of table"),
                ));
            }
            // The block and the byte after it (padding is NUL; a nonzero byte right after
            // block_len starts the next, unpadded, block or the footer).
            let want = (block_len as u64 + 1).min(self.size - off) as usize;
            let have = buf.len();
            if have < want {
                buf.resize(want, 0);
                let rest = buf.get_mut(have..).unwrap_or_default();
                self.read_exact_at(off + have as u64, rest)?;
            }
            let bs = self.header.block_size as usize;
            let unpadded = block_len < bs && buf.get(block_len).is_some_and(|&b| b != 0);
            let on_disk = if bs == 0 || unpadded { block_len } else { bs };
            buf.truncate(block_len);
            (buf, on_disk as u64)
        };
        let restart_count = be16(&data, block_len - 2).unwrap_or(0) as usize;
        let restart_off = (block_len - 2).checked_sub(3 * restart_count);
        let restart_off = match restart_off {
            Some(r) if r >= header_off + 4 => r,
            _ => {
                return Err(self.ferr(
                    off + block_len as u64 - 2,
                    format!("restart count {restart_count} does not fit the block"),
                ))
            }
        };
        Ok(Block(Arc::new(LoadedBlock {
            info: BlockInfo {
                offset: off,
                typ,
                header_off,
                block_len,
                restart_off,
                restart_count,
                on_disk,
            },
            data,
            type_only: false,
        })))
    }

    /// Inflates the log block at `off`; `first` holds the file bytes from `off` read so
    /// far (at least the block header). Returns the block and its size on disk.
    fn inflate(
        &self,
        off: u64,
        header_off: usize,
        block_len: usize,
        mut first: Vec<u8>,
    ) -> Result<(Vec<u8>, u64)> {
        let at = off + header_off as u64;
        let src_start = at + 4;
        let src_len = self.end.saturating_sub(src_start);
        let want = block_len - (header_off + 4);
        // Deflate cannot expand more than ~1032:1; refuse lengths the input cannot produce.
        if block_len > MAX_LOG_BLOCK
            || want as u64 > src_len.saturating_mul(1100).saturating_add(64)
        {
            return Err(self.ferr(
                at + 1,
                format!("log block length {block_len} impossible for the data"),
            ));
        }
        let zerr = |what: String| Error::Zlib {
            file: self.name.clone(),
            offset: src_start,
            what,
        };
        let mut out = Vec::with_capacity(block_len);
        out.extend_from_slice(first.get(..header_off + 4).unwrap_or_default());
        first.drain(..(header_off + 4).min(first.len()));
        first.truncate(usize::try_from(src_len).unwrap_or(usize::MAX));
        let mut chunk = first;
        let mut chunk_at = src_start;
        let mut z = self.inflate.lock().unwrap_or_else(|p| p.into_inner());
        z.reset(true);
        let short = || {
            zerr(format!(
                "log block does not inflate to its length {block_len}"
            ))
        };
        loop {
            let pos = usize::try_from(src_start + z.total_in() - chunk_at).unwrap_or(usize::MAX);
            let Some(input) = chunk.get(pos..).filter(|i| !i.is_empty()) else {
                // Next chunk of compressed input, up to the footer.
                let next_at = src_start + z.total_in();
                let left = usize::try_from(self.end.saturating_sub(next_at)).unwrap_or(usize::MAX);
                if left == 0 {
                    return Err(short());
                }
                chunk.resize(INFLATE_CHUNK.min(left), 0);
                self.read_exact_at(next_at, &mut chunk)?;
                chunk_at = next_at;
                continue;
            };
            let (in_before, out_before) = (z.total_in(), out.len());
            let status = z
                .decompress_vec(input, &mut out, FlushDecompress::None)
                .map_err(|e| zerr(e.to_string()))?;
            if status == Status::StreamEnd {
                break;
            }
            if z.total_in() == in_before && out.len() == out_before {
                return Err(short());
            }
        }
        if out.len() != block_len {
            return Err(self.ferr(
                at + 1,
                format!("log block inflates to {} bytes, not {block_len}", out.len()),
            ));
        }
        let on_disk = (header_off + 4) as u64 + z.total_in();
        Ok((out, on_disk))
    }

    /// Every block of the file in order, as git's `dump-reftable -b` lists them.
    pub fn blocks(&self) -> Result<Vec<BlockInfo>> {
        let mut v = Vec::new();
        let mut off = 0;
        while let Some(b) = self.block_at(off, &[])? {
            off += b.info.on_disk;
            v.push(b.info.clone());
        }
        Ok(v)
    }

    /// The block at `off`, which must exist (an offset from [`Table::blocks`]).
    fn load(&self, off: u64) -> Result<Block> {
        self.block_at(off, &[])?
            .ok_or_else(|| self.ferr(off, "no block at this offset"))
    }

    /// A reseekable iterator over the refs.
    pub fn ref_iter(self: &Arc<Self>) -> TableRefIter {
        TableRefIter {
            cur: Cursor::new(self.clone()),
            rec: RefRecord::default(),
            spare: Vec::new(),
            err: false,
        }
    }

    /// A reseekable iterator over the logs.
    pub fn log_iter(self: &Arc<Self>) -> TableLogIter {
        TableLogIter {
            cur: Cursor::new(self.clone()),
            rec: LogRecord::default(),
            want: Vec::new(),
            err: false,
        }
    }

    /// The refs whose value or peeled value is `oid`, through the obj section when the
    /// table has one (otherwise by scanning every ref).
    pub fn refs_for(self: &Arc<Self>, oid: &ObjectId) -> Result<Vec<RefRecord>> {
        let mut found = Vec::new();
        let matches = |r: &RefRecord| match &r.value {
            RefValue::Val1(v) => v == oid,
            RefValue::Val2 { value, peeled } => value == oid || peeled == oid,
            _ => false,
        };
        // Without the obj section's help: every ref.
        let scan_all = || -> Result<Vec<RefRecord>> {
            let mut found = Vec::new();
            let mut it = self.ref_iter();
            it.seek(b"")?;
            while let Some(r) = RefIter::next(&mut it)? {
                if matches(r) {
                    found.push(r.clone());
                }
            }
            Ok(found)
        };
        let id_len = usize::from(self.footer.obj_id_len);
        if self.footer.obj_position == 0 || id_len == 0 {
            return scan_all();
        }
        let prefix = oid.as_bytes().get(..id_len).unwrap_or_default();
        let mut cur = Cursor::new(self.clone());
        cur.seek(BLOCK_OBJ, prefix)?;
        let Some((extra, at)) = cur.next_key()? else {
            return Ok(found);
        };
        if cur.key != prefix {
            return Ok(found);
        }
        let mut positions = Vec::new();
        let n = cur.decode_with(at, |b| decode_obj_value(b, extra, &mut positions))?;
        cur.pos = at + n;
        if positions.is_empty() {
            return scan_all();
        }
        let mut it = self.ref_iter();
        for &p in &positions {
            let Some(b) = self.block_at(p, &[BLOCK_REF])? else {
                return Err(self.ferr(p, "obj record points to a block that is not a ref block"));
            };
            it.cur.set_block(b);
            it.cur.single_block = true;
            while let Some(r) = RefIter::next(&mut it)? {
                if matches(r) {
                    found.push(r.clone());
                }
            }
        }
        Ok(found)
    }
}
