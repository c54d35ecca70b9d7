//! A global allocator that caps the live heap of a test binary: an allocation that would
//! take it past `CAP` bytes fails (the process aborts with "memory allocation failed")
//! after a message on stderr, instead of exhausting the machine. Include it with
//! `#[path = "support/capped_alloc.rs"] mod capped_alloc;` and install it:
//! `#[global_allocator] static GLOBAL: capped_alloc::Capped<{ 1 << 30 }> = capped_alloc::Capped;`

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The allocator; `CAP` is the most live heap in bytes.
pub struct Capped<const CAP: usize>;

static LIVE: AtomicUsize = AtomicUsize::new(0);

/// Bytes currently allocated.
#[allow(dead_code)]
pub fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

fn over_cap(size: usize, cap: usize) -> bool {
    if LIVE.fetch_add(size, Ordering::Relaxed).saturating_add(size) <= cap {
        return false;
    }
    LIVE.fetch_sub(size, Ordering::Relaxed);
    let msg = b"capped_alloc: live heap would exceed this test binary's cap; aborting (replay with the seed printed above)\n";
    // SAFETY: writes a static buffer to stderr; allocates nothing.
    unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
    true
}

// SAFETY: forwards to the system allocator; only counts live bytes and refuses
// allocations beyond the cap (the caller then reports an allocation failure).
unsafe impl<const CAP: usize> GlobalAlloc for Capped<CAP> {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if over_cap(l.size(), CAP) {
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
        if n > l.size() && over_cap(n - l.size(), CAP) {
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
