//! Per-object memory of each algorithm, measured with a counting global allocator: the heap a
//! full cache of one million objects holds, divided by one million. LRU must stay within 64 bytes.

// A counting allocator has to implement `GlobalAlloc`, an unsafe trait; it only forwards.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use pliant_cache::{ALGORITHMS, Capacity, Request};

struct Counting;

static HEAP: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator and only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        HEAP.fetch_add(l.size() as isize, Ordering::Relaxed);
        // SAFETY: same layout contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        HEAP.fetch_sub(l.size() as isize, Ordering::Relaxed);
        // SAFETY: `p` came from `alloc` with this layout.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        HEAP.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

const N: u64 = 1_000_000;

fn bytes_per_object(algo: &str) -> f64 {
    let before = HEAP.load(Ordering::Relaxed);
    let mut c = pliant_cache::cache(algo, Capacity::Keys(N)).expect("algorithm");
    for k in 0..N {
        c.access(&Request::new(k.wrapping_mul(0x9E37_79B9_7F4A_7C15), 1));
    }
    let used = HEAP.load(Ordering::Relaxed) - before;
    drop(c);
    used as f64 / N as f64
}

#[test]
fn lru_overhead_is_at_most_64_bytes_per_object() {
    let mut report = Vec::new();
    for algo in ALGORITHMS.iter().map(|a| a.name) {
        let b = bytes_per_object(algo);
        report.push(format!("{algo}: {b:.1} B/object"));
        if algo == "lru" {
            assert!(b <= 64.0, "LRU uses {b:.1} bytes per object");
        }
    }
    eprintln!(
        "heap per cached object at 1 M objects: {}",
        report.join(", ")
    );
}
