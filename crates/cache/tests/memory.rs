//! Per-object memory of each algorithm, measured with a counting global allocator: the heap a
//! full cache of one million objects holds, divided by one million. LRU must stay within 64 bytes.

use pliant_cache::{ALGORITHMS, Capacity, Request};

#[global_allocator]
static A: pliant_testdata::alloc::Counting = pliant_testdata::alloc::Counting;

const N: u64 = 1_000_000;

fn bytes_per_object(algo: &str) -> f64 {
    let before = pliant_testdata::alloc::held();
    let mut c = pliant_cache::cache(algo, Capacity::Keys(N)).expect("algorithm");
    for k in 0..N {
        c.access(&Request::new(k.wrapping_mul(0x9E37_79B9_7F4A_7C15), 1));
    }
    let used = pliant_testdata::alloc::held() - before;
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
