//! A global allocator that counts the bytes held, for the tests and examples that measure memory
//! per object (a cache algorithm's, the slot index's): install it with
//! `#[global_allocator] static A: pliant_testdata::alloc::Counting = pliant_testdata::alloc::Counting;`
//! and read [`held`] before and after building what is measured.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};

/// The system allocator, counting the bytes it holds.
pub struct Counting;

static HELD: AtomicI64 = AtomicI64::new(0);

/// Bytes held through [`Counting`] now (0 unless it is the global allocator).
pub fn held() -> i64 {
    HELD.load(Ordering::Relaxed)
}

// A counting allocator has to implement `GlobalAlloc`, an unsafe trait; it only forwards.
// SAFETY: forwards to the system allocator and only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        HELD.fetch_add(l.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(l) }
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        HELD.fetch_sub(l.size() as i64, Ordering::Relaxed);
        // SAFETY: `p` came from `alloc` with this layout.
        unsafe { System.dealloc(p, l) }
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        HELD.fetch_add(new as i64 - l.size() as i64, Ordering::Relaxed);
        // SAFETY: `p` came from `alloc` with layout `l`.
        unsafe { System.realloc(p, l, new) }
    }
}
