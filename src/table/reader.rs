//! The table reader: validates header, footer and CRC on open; reads blocks on demand
//! (`pread` on the open file, never a mapping: a file truncated under us gives an error,
//! not a signal), checking each block's type before decoding it; keeps loaded blocks
//! (log blocks inflated) in one process-wide cache bounded in bytes; seeks through
//! (multi-level) indexes; iterates with reseekable cursors.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use flate2::{Decompress, FlushDecompress, Status};
use lru::LruCache;

use crate::error::{Error, Result};
use crate::format::codec::{
    self, be16, be24, decode_key, decode_log_value, decode_obj_value, decode_ref_value,
    is_block_type, restart_key, skip_value, DecodeError, BLOCK_INDEX, BLOCK_LOG, BLOCK_OBJ,
    BLOCK_REF,
};
use crate::format::header::{Footer, Header};
use crate::format::{varint, HashKind, LogRecord, ObjectId, RefRecord, RefValue};

use super::{LogIter, RefIter};

/// Default byte budget of the block cache shared by every table of the process.
pub const DEFAULT_BLOCK_CACHE_BYTES: usize = 32 << 20;
/// Largest uncompressed log block accepted (the u24 `block_len` cannot say more anyway).
const MAX_LOG_BLOCK: usize = 16 << 20;
/// How much compressed input a log block inflation reads at a time.
const INFLATE_CHUNK: usize = 64 << 10;
/// What a cached block costs beyond its bytes (the cache node, the `Arc`, the info).
const ENTRY_OVERHEAD: usize = 128;

static CACHE_BUDGET: AtomicUsize = AtomicUsize::new(DEFAULT_BLOCK_CACHE_BYTES);
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

/// The loaded blocks of every open table, keyed by (table serial, block offset), least
/// recently used evicted first once their bytes exceed the budget.
struct BlockCache {
    lru: LruCache<(u64, u64), Block>,
    bytes: usize,
}

fn cache() -> MutexGuard<'static, BlockCache> {
    static CACHE: OnceLock<Mutex<BlockCache>> = OnceLock::new();
    let m = CACHE.get_or_init(|| {
        Mutex::new(BlockCache {
            lru: LruCache::unbounded(),
            bytes: 0,
        })
    });
    // The cache holds no invariant a panicking holder could break halfway: entries are
    // whole blocks, and `bytes` is only a budget.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl BlockCache {
    fn insert(&mut self, key: (u64, u64), b: Block) {
        self.bytes += b.charge();
        if let Some(old) = self.lru.put(key, b) {
            self.bytes = self.bytes.saturating_sub(old.charge());
        }
        let budget = CACHE_BUDGET.load(Ordering::Relaxed);
        while self.bytes > budget {
            let Some((_, old)) = self.lru.pop_lru() else {
                break;
            };
            self.bytes = self.bytes.saturating_sub(old.charge());
        }
    }
}

/// Sets the byte budget of the block cache shared by all tables (default
/// [`DEFAULT_BLOCK_CACHE_BYTES`]); takes effect at the next block loaded.
pub fn set_block_cache_bytes(bytes: usize) {
    CACHE_BUDGET.store(bytes, Ordering::Relaxed);
}

/// Bytes the block cache holds now (blocks plus bookkeeping).
pub fn block_cache_bytes() -> usize {
    cache().bytes
}

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
    /// Key of this table's blocks in the shared cache.
    serial: u64,
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
        let mut c = cache();
        let mine: Vec<(u64, u64)> = c
            .lru
            .iter()
            .filter(|(k, _)| k.0 == self.serial)
            .map(|(k, _)| *k)
            .collect();
        for k in mine {
            if let Some(b) = c.lru.pop(&k) {
                c.bytes = c.bytes.saturating_sub(b.charge());
            }
        }
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
    pub fn open(path: impl AsRef<Path>) -> Result<Arc<Table>> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::NotExist(path.to_path_buf())
            } else {
                Error::io(path, e)
            }
        })?;
        let size = file.metadata().map_err(|e| Error::io(path, e))?.len();
        Table::new(path.display().to_string(), Source::File(file), size)
    }

    /// Validates `bytes` as a table called `name` (used in error messages).
    pub fn from_bytes(name: impl Into<String>, bytes: Vec<u8>) -> Result<Arc<Table>> {
        let size = bytes.len() as u64;
        Table::new(name.into(), Source::Mem(bytes.into_boxed_slice()), size)
    }

    fn new(name: String, src: Source, size: u64) -> Result<Arc<Table>> {
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
        let cached = cache().lru.get(&(self.serial, off)).cloned();
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
            cache().insert((self.serial, off), b);
            return Ok(None);
        }
        let b = self.load_block(off, header_off, typ, buf)?;
        cache().insert((self.serial, off), b.clone());
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
        let id_len = usize::from(self.footer.obj_id_len);
        if self.footer.obj_position == 0 || id_len == 0 {
            let mut it = self.ref_iter();
            it.seek(b"")?;
            while let Some(r) = RefIter::next(&mut it)? {
                if matches(r) {
                    found.push(r.clone());
                }
            }
            return Ok(found);
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
            let mut it = self.ref_iter();
            it.seek(b"")?;
            while let Some(r) = RefIter::next(&mut it)? {
                if matches(r) {
                    found.push(r.clone());
                }
            }
            return Ok(found);
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

/// The shared engine of the typed iterators: walks records of one section, lending the
/// current key; seeks through indexes.
struct Cursor {
    table: Arc<Table>,
    block: Option<Block>,
    pos: usize,
    key: Vec<u8>,
    single_block: bool,
    /// The block the last seek started from (an index root or a section's first
    /// block), kept so that reseeking the same section does not go through the cache.
    root: Option<Block>,
    /// A (section type, offset) known to hold no block of that section: where a scan
    /// of the section stops, remembered so that it is not looked up again.
    section_end: Option<(u8, u64)>,
}

impl Cursor {
    fn new(table: Arc<Table>) -> Cursor {
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

    fn set_block(&mut self, b: Block) {
        self.pos = b.first_record();
        self.key.clear();
        self.block = Some(b);
    }

    fn hash(&self) -> HashKind {
        self.table.header.hash
    }

    /// Positions before the first record of section `typ` whose key is `>= want`.
    fn seek(&mut self, typ: u8, want: &[u8]) -> Result<()> {
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
    fn next_key(&mut self) -> Result<Option<(u8, usize)>> {
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
    fn decode_with<T>(
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
    cur: Cursor,
    rec: RefRecord,
    spare: Vec<u8>,
    err: bool,
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
    cur: Cursor,
    rec: LogRecord,
    want: Vec<u8>,
    err: bool,
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

/// A decoded record of any block type, for dumps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AnyRecord {
    Ref(RefRecord),
    Log(LogRecord),
    Obj {
        prefix: Vec<u8>,
        positions: Vec<u64>,
    },
    Index {
        last_key: Vec<u8>,
        offset: u64,
    },
}

impl Table {
    /// Decodes every record of the block at `off` (the dump's view): `(record offset in
    /// the uncompressed block, prefix length, record)`.
    pub fn block_records(self: &Arc<Self>, info: &BlockInfo) -> Result<Vec<(usize, AnyRecord)>> {
        let mut cur = Cursor::new(self.clone());
        cur.set_block(self.load(info.offset)?);
        cur.single_block = true;
        let hash = self.header.hash;
        let mut out = Vec::new();
        loop {
            let start = cur.pos;
            let Some((extra, at)) = cur.next_key()? else {
                break;
            };
            let rec = match info.typ {
                BLOCK_REF => {
                    let mut v = RefValue::Deletion;
                    let mut spare = Vec::new();
                    let (d, n) = cur.decode_with(at, |b| {
                        decode_ref_value(b, extra, hash, &mut v, &mut spare)
                    })?;
                    cur.pos = at + n;
                    AnyRecord::Ref(RefRecord {
                        name: cur.key.clone(),
                        update_index: self.header.min_update_index.wrapping_add(d),
                        value: v,
                    })
                }
                BLOCK_LOG => {
                    let mut l = LogRecord::default();
                    let n = cur.decode_with(at, |b| decode_log_value(b, extra, hash, &mut l))?;
                    cur.pos = at + n;
                    let (name, ui) =
                        codec::split_log_key(&cur.key).map_err(|e| self.derr(info, e, start))?;
                    l.refname = name.to_vec();
                    l.update_index = ui;
                    AnyRecord::Log(l)
                }
                BLOCK_OBJ => {
                    let mut p = Vec::new();
                    let n = cur.decode_with(at, |b| decode_obj_value(b, extra, &mut p))?;
                    cur.pos = at + n;
                    AnyRecord::Obj {
                        prefix: cur.key.clone(),
                        positions: p,
                    }
                }
                _ => {
                    let (v, n) = cur.decode_with(at, |b| {
                        let mut r = codec::Reader::new(b);
                        let v = r.varint("bad index block position")?;
                        Ok((v, r.pos()))
                    })?;
                    cur.pos = at + n;
                    AnyRecord::Index {
                        last_key: cur.key.clone(),
                        offset: v,
                    }
                }
            };
            out.push((start, rec));
        }
        Ok(out)
    }

    /// Reads the restart offsets of a block (for dumps and checks).
    pub fn restarts(&self, info: &BlockInfo) -> Result<Vec<usize>> {
        let b = self.load(info.offset)?;
        Ok((0..b.info.restart_count)
            .map(|i| be24(b.bytes(), b.info.restart_off + 3 * i).unwrap_or(0) as usize)
            .collect())
    }

    /// Checks the whole table: every block and record decodes, keys strictly increase
    /// within each section, restart tables point at prefix-0 records, index records name
    /// the last key of the block they point to, update indexes respect the limits, and
    /// the footer's section offsets match the blocks found.
    pub fn verify(self: &Arc<Self>) -> Result<()> {
        let blocks = self.blocks()?;
        let mut last_key: Vec<u8> = Vec::new();
        let mut last_typ = 0u8;
        let mut last_keys = std::collections::HashMap::new();
        let mut section_start = std::collections::HashMap::new();
        let mut ref_ids: std::collections::HashMap<u64, Vec<ObjectId>> = Default::default();
        let mut objs: Vec<(u64, Vec<u8>, Vec<u64>)> = Vec::new();
        for info in &blocks {
            let recs = self.block_records(info)?;
            if recs.is_empty() {
                return Err(self.ferr(info.offset, "block without records"));
            }
            let restarts = self.restarts(info)?;
            let starts: Vec<usize> = recs.iter().map(|(s, _)| *s).collect();
            let b = self.load(info.offset)?;
            for r in &restarts {
                if starts.binary_search(r).is_err() {
                    return Err(
                        self.ferr(info.offset, format!("restart {r} is not a record start"))
                    );
                }
                let pfx = varint::get(b.bytes().get(*r..).unwrap_or_default()).map(|v| v.0);
                if pfx != Some(0) {
                    return Err(self.ferr(
                        info.offset + *r as u64,
                        "restart record with nonzero prefix",
                    ));
                }
            }
            if info.typ != last_typ {
                last_key.clear();
                section_start.entry(info.typ).or_insert(info.offset);
                last_typ = info.typ;
            }
            for (at, rec) in &recs {
                let mut key = Vec::new();
                match rec {
                    AnyRecord::Ref(r) => {
                        key.extend_from_slice(&r.name);
                        let ids = ref_ids.entry(info.offset).or_default();
                        match &r.value {
                            RefValue::Val1(v) => ids.push(*v),
                            RefValue::Val2 { value, peeled } => ids.extend([*value, *peeled]),
                            _ => {}
                        }
                        if r.update_index > self.header.max_update_index {
                            return Err(self.ferr(
                                info.offset + *at as u64,
                                "ref update index above table maximum",
                            ));
                        }
                    }
                    AnyRecord::Log(l) => {
                        codec::log_key(&mut key, &l.refname, l.update_index);
                        if !l.deleted && l.update_index > self.header.max_update_index {
                            return Err(
                                self.ferr(info.offset, "log update index above table maximum")
                            );
                        }
                    }
                    AnyRecord::Obj { prefix, positions } => {
                        key.extend_from_slice(prefix);
                        objs.push((info.offset, prefix.clone(), positions.clone()));
                    }
                    AnyRecord::Index {
                        last_key: k,
                        offset,
                    } => {
                        key.extend_from_slice(k);
                        match last_keys.get(offset) {
                            Some(lk) if lk == k => {}
                            _ => return Err(self.ferr(info.offset, format!("index record for {offset} does not match that block's last key"))),
                        }
                    }
                }
                if info.typ != BLOCK_INDEX && !last_key.is_empty() && key <= last_key {
                    return Err(self.ferr(info.offset + *at as u64, "keys out of order"));
                }
                last_key = key;
            }
            last_keys.insert(info.offset, last_key.clone());
        }
        // Obj records: each listed block is a ref block holding an id with that prefix,
        // and every id of every ref block is listed.
        let id_len = usize::from(self.footer.obj_id_len);
        if self.footer.obj_position > 0 {
            let mut listed = std::collections::HashSet::new();
            for (off, prefix, positions) in &objs {
                if prefix.len() != id_len {
                    return Err(
                        self.ferr(*off, "obj record prefix length differs from the footer's")
                    );
                }
                for p in positions {
                    let ids = ref_ids.get(p).ok_or_else(|| {
                        self.ferr(
                            *off,
                            format!("obj record lists {p}, which is not a ref block"),
                        )
                    })?;
                    if !ids.iter().any(|id| id.as_bytes().starts_with(prefix)) {
                        return Err(
                            self.ferr(*off, format!("obj record lists block {p} without that id"))
                        );
                    }
                    listed.insert((prefix.clone(), *p));
                }
                if positions.is_empty() {
                    for p in ref_ids.keys() {
                        listed.insert((prefix.clone(), *p));
                    }
                }
            }
            for (off, ids) in &ref_ids {
                for id in ids {
                    let prefix = id.as_bytes().get(..id_len).unwrap_or_default().to_vec();
                    if !listed.contains(&(prefix, *off)) {
                        return Err(self.ferr(
                            *off,
                            format!("object {id} of this block is missing from the obj index"),
                        ));
                    }
                }
            }
        }
        let f = &self.footer;
        let check = |typ: u8, pos: u64| -> Result<()> {
            let found = section_start.get(&typ).copied();
            let ok = match found {
                Some(o) => pos == o || (o == 0 && pos == 0),
                None => pos == 0,
            };
            if !ok {
                return Err(self.ferr(
                    self.end,
                    format!(
                        "footer position {pos} of section '{}' does not match",
                        typ as char
                    ),
                ));
            }
            Ok(())
        };
        check(BLOCK_OBJ, f.obj_position)?;
        if f.log_position > 0 || section_start.contains_key(&BLOCK_LOG) {
            check(BLOCK_LOG, f.log_position)?;
        }
        for pos in [
            f.ref_index_position,
            f.obj_index_position,
            f.log_index_position,
        ] {
            if pos > 0
                && !blocks
                    .iter()
                    .any(|b| b.offset == pos && b.typ == BLOCK_INDEX)
            {
                return Err(self.ferr(pos, "footer index position is not an index block"));
            }
        }
        Ok(())
    }
}
