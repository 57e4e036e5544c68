//! Properties over random traces, for every algorithm.

use pliant_cache::{ALGORITHMS, Capacity, NO_NEXT_ACCESS, Request};
use proptest::prelude::*;

/// Fills in next-access times, as `pliant trace convert` does.
fn with_next_access(keys: &[(u64, u32)]) -> Vec<Request> {
    let mut next = vec![NO_NEXT_ACCESS; keys.len()];
    let mut last = std::collections::HashMap::new();
    for (i, (k, _)) in keys.iter().enumerate().rev() {
        if let Some(&j) = last.get(k) {
            next[i] = j as i64;
        }
        last.insert(*k, i);
    }
    keys.iter()
        .zip(next)
        .map(|(&(key, size), next_access)| Request {
            key,
            size,
            next_access,
        })
        .collect()
}

fn trace(max_key: u64, max_size: u32) -> impl Strategy<Value = Vec<(u64, u32)>> {
    prop::collection::vec((0..max_key, 1..=max_size), 1..400)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn capacity_never_exceeded_and_counters_consistent(
        t in trace(60, 300),
        cap in 1u64..3000,
        keys_mode in any::<bool>(),
    ) {
        let reqs = with_next_access(&t);
        let capacity = if keys_mode { Capacity::Keys(cap / 50 + 1) } else { Capacity::Bytes(cap) };
        for algo in ALGORITHMS.iter().map(|a| a.name) {
            let mut c = pliant_cache::cache(algo, capacity).expect("algorithm");
            let mut bytes_requested = 0u64;
            for (n, r) in reqs.iter().enumerate() {
                c.access(r);
                bytes_requested += u64::from(r.size);
                let s = *c.stats();
                match capacity {
                    Capacity::Bytes(b) => prop_assert!(s.bytes <= b, "{algo}: {} > {b}", s.bytes),
                    Capacity::Keys(k) => prop_assert!(s.keys <= k, "{algo}: {} > {k}", s.keys),
                }
                prop_assert_eq!(s.hits + s.misses, n as u64 + 1, "{}", algo);
                prop_assert_eq!(s.byte_hits + s.byte_misses, bytes_requested, "{}", algo);
                prop_assert_eq!(s.keys, s.insertions - s.evictions, "{}", algo);
                prop_assert!(s.peak_keys >= s.keys && s.peak_bytes >= s.bytes, "{}", algo);
            }
        }
    }

    #[test]
    fn belady_misses_no_more_than_any_algorithm_on_unit_sizes(
        t in trace(40, 1),
        cap in 1u64..30,
    ) {
        let reqs = with_next_access(&t);
        let misses = |algo: &str| {
            let mut c = pliant_cache::cache(algo, Capacity::Keys(cap)).expect("algorithm");
            for r in &reqs {
                c.access(r);
            }
            c.stats().misses
        };
        let opt = misses("belady");
        for algo in ALGORITHMS.iter().map(|a| a.name) {
            prop_assert!(opt <= misses(algo), "belady {} > {} {}", opt, algo, misses(algo));
        }
    }

    #[test]
    fn shrinking_evicts_down_to_the_new_capacity(
        t in trace(80, 100),
        cap in 100u64..4000,
        shrink_to in 0u64..100,
    ) {
        let reqs = with_next_access(&t);
        for algo in ALGORITHMS.iter().map(|a| a.name) {
            let mut c = pliant_cache::cache(algo, Capacity::Bytes(cap)).expect("algorithm");
            for r in &reqs {
                c.access(r);
            }
            c.resize(Capacity::Bytes(shrink_to));
            let s = *c.stats();
            prop_assert!(s.bytes <= shrink_to, "{algo}: {} > {shrink_to}", s.bytes);
            prop_assert_eq!(s.keys, s.insertions - s.evictions, "{}", algo);
        }
    }
}
