//! The block cache: loaded blocks of the tables that share it, keyed by (table serial,
//! block offset), bounded in bytes, least recently used evicted first. Whoever opens the
//! tables owns it and hands it to them ([`super::Table::open_in`]): a stack shares one
//! across its tables (`StackOptions::block_cache`), a mount one across its stacks; a
//! table opened alone has its own.

use std::sync::{Arc, Mutex, MutexGuard};

use lru::LruCache;

use super::Block;

/// Default byte budget of a block cache.
pub const DEFAULT_BLOCK_CACHE_BYTES: usize = 32 << 20;

/// The loaded blocks of the tables that share this cache, least recently used evicted
/// first once their bytes exceed the budget.
pub struct BlockCache {
    budget: usize,
    blocks: Mutex<Blocks>,
}

struct Blocks {
    lru: LruCache<(u64, u64), Block>,
    bytes: usize,
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCache")
            .field("budget", &self.budget)
            .field("bytes", &self.bytes())
            .finish()
    }
}

impl BlockCache {
    /// An empty cache that keeps at most `budget` bytes.
    pub fn new(budget: usize) -> Arc<BlockCache> {
        Arc::new(BlockCache {
            budget,
            blocks: Mutex::new(Blocks {
                lru: LruCache::unbounded(),
                bytes: 0,
            }),
        })
    }

    /// The most bytes it keeps.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Bytes it holds now (blocks plus bookkeeping).
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    fn lock(&self) -> MutexGuard<'_, Blocks> {
        // The cache holds no invariant a panicking holder could break halfway: entries
        // are whole blocks, and `bytes` is only a budget.
        self.blocks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The block at `off` of the table `serial`, if cached.
    pub(super) fn get(&self, serial: u64, off: u64) -> Option<Block> {
        self.lock().lru.get(&(serial, off)).cloned()
    }

    /// Caches `b` as the block at `off` of the table `serial`, then evicts down to the
    /// budget.
    pub(super) fn insert(&self, serial: u64, off: u64, b: Block) {
        let mut c = self.lock();
        c.bytes += b.charge();
        if let Some(old) = c.lru.put((serial, off), b) {
            c.bytes = c.bytes.saturating_sub(old.charge());
        }
        while c.bytes > self.budget {
            let Some((_, old)) = c.lru.pop_lru() else {
                break;
            };
            c.bytes = c.bytes.saturating_sub(old.charge());
        }
    }

    /// Drops every cached block of the table `serial` (it is being closed).
    pub(super) fn forget(&self, serial: u64) {
        let mut c = self.lock();
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
}
