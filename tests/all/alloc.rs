//! The test binary's global allocator. It caps the live heap at [`CAP`]: an allocation
//! that would pass it fails (the process aborts with "memory allocation failed") after a
//! message on stderr, instead of exhausting the machine, for tests whose sizes come from
//! random bytes (`props`, `mutation_fuzz`). And it counts what the tests that measure
//! memory read: allocations ([`allocs`]), the largest ([`largest`]), live bytes and their
//! peak ([`live`], [`reset_peak`], [`peak`]). The counts are the whole process's, so those
//! tests run alone, in a process of their own ([`crate::alone`]).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The most live heap in bytes.
pub const CAP: usize = 1 << 30;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static LARGEST: AtomicUsize = AtomicUsize::new(0);
static ALLOCS: AtomicU64 = AtomicU64::new(0);

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations and reallocations made by the whole process so far.
pub fn allocs() -> u64 {
    ALLOCS.load(Ordering::Relaxed)
}

/// The largest allocation (or reallocation) so far, in bytes.
pub fn largest() -> usize {
    LARGEST.load(Ordering::Relaxed)
}

/// Bytes allocated now.
pub fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// Starts a new peak at the live bytes of now, which it returns.
pub fn reset_peak() -> usize {
    let now = live();
    PEAK.store(now, Ordering::Relaxed);
    now
}

/// The most live bytes since [`reset_peak`].
pub fn peak() -> usize {
    PEAK.load(Ordering::Relaxed)
}

/// Counts `grow` more live bytes, or refuses them past [`CAP`].
fn grow(grow: usize) -> bool {
    let now = LIVE.fetch_add(grow, Ordering::Relaxed).saturating_add(grow);
    if now > CAP {
        LIVE.fetch_sub(grow, Ordering::Relaxed);
        let msg = b"alloc: the live heap would exceed this test binary's cap (1 GiB); aborting (randomised tests replay with the seed their failure prints; it is fixed unless set)\n";
        // SAFETY: writes a static buffer to stderr; allocates nothing.
        unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
        return false;
    }
    if now > PEAK.load(Ordering::Relaxed) {
        PEAK.fetch_max(now, Ordering::Relaxed);
    }
    true
}

fn note(size: usize) {
    ALLOCS.fetch_add(1, Ordering::Relaxed);
    if size > LARGEST.load(Ordering::Relaxed) {
        LARGEST.fetch_max(size, Ordering::Relaxed);
    }
}

// SAFETY: forwards to the system allocator; only counts, and refuses allocations beyond
// the cap (the caller then reports an allocation failure).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note(l.size());
        if !grow(l.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(l) };
        if p.is_null() {
            LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        note(n);
        if n > l.size() && !grow(n - l.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: same contract as the caller's.
        let q = unsafe { System.realloc(p, l, n) };
        if q.is_null() {
            if n > l.size() {
                LIVE.fetch_sub(n - l.size(), Ordering::Relaxed);
            }
        } else if n < l.size() {
            LIVE.fetch_sub(l.size() - n, Ordering::Relaxed);
        }
        q
    }
}
