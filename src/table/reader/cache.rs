//! The one block cache of the process: loaded blocks of every open table, keyed by
//! (table serial, block offset), bounded in bytes, least recently used evicted first.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use lru::LruCache;

use super::Block;

/// Default byte budget of the block cache shared by every table of the process.
pub const DEFAULT_BLOCK_CACHE_BYTES: usize = 32 << 20;

static CACHE_BUDGET: AtomicUsize = AtomicUsize::new(DEFAULT_BLOCK_CACHE_BYTES);

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

/// The block at `off` of the table `serial`, if cached.
pub(super) fn get(serial: u64, off: u64) -> Option<Block> {
    cache().lru.get(&(serial, off)).cloned()
}

/// Caches `b` as the block at `off` of the table `serial`, then evicts down to the budget.
pub(super) fn insert(serial: u64, off: u64, b: Block) {
    cache().insert((serial, off), b);
}

/// Drops every cached block of the table `serial` (it is being closed).
pub(super) fn forget(serial: u64) {
    let mut c = cache();
    let mine: Vec<(u64, u64)> = c
        .lru
        .iter()
        .filter(|(k, _)| k.0 == serial)
        .map(|(k, _)| *k)
        .collect();
    for k in mine {
        if let Some(b) = c.lru.pop(&k) {
            c.bytes = c.bytes.saturating_sub(b.charge());
        }
    }
}
