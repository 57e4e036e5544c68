//! Slots (`Cache::slot`): the number a service keeps a resident key's value under. For every
//! algorithm, over random accesses, puts, removals and resizes, a model of slot → key built only
//! from what the cache reports must agree with it at every step: a resident key keeps its slot
//! until an eviction or a removal says it left, no two resident keys share one, and a key that is
//! not resident (a ghost included) has none.

use std::collections::HashMap;

use pliant_cache::{ALGORITHMS, Capacity, PutOutcome, Request};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Access(u64, u32),
    Put(u64, u32),
    Remove(u64),
    Resize(u64),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        6 => (0..40u64, 1..=40u32).prop_map(|(k, s)| Op::Access(k, s)),
        3 => (0..40u64, 1..=40u32).prop_map(|(k, s)| Op::Put(k, s)),
        1 => (0..40u64).prop_map(Op::Remove),
        1 => (1..30u64).prop_map(Op::Resize),
    ];
    prop::collection::vec(op, 1..300)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn a_resident_key_keeps_its_slot_until_it_is_reported_gone(
        ops in ops(),
        cap in 1u64..30,
        bytes in any::<bool>(),
    ) {
        let capacity = if bytes { Capacity::Bytes(cap * 20) } else { Capacity::Keys(cap) };
        for info in ALGORITHMS.iter().filter(|a| !a.needs_next_access) {
            let algo = info.name;
            let mut c = pliant_cache::cache(algo, capacity).expect("algorithm");
            // slot -> key, from what the cache reported
            let mut model: HashMap<u32, u64> = HashMap::new();
            for op in &ops {
                let mut gone = Vec::new();
                let (key, before) = match *op {
                    Op::Access(k, s) => {
                        // As the service reads: a lookup, and on a miss the value put.
                        let before = c.slot(k);
                        if c.get(&Request::new(k, s)).is_some() {
                            prop_assert_eq!(c.slot(k), before, "{}: a hit keeps the slot", algo);
                        } else {
                            c.put_evicting(&Request::new(k, s), &mut |e| gone.push(e));
                        }
                        (Some(k), before)
                    }
                    Op::Put(k, s) => {
                        let before = c.slot(k);
                        let outcome = c.put_evicting(&Request::new(k, s), &mut |e| gone.push(e));
                        if outcome == PutOutcome::Redundant {
                            prop_assert_eq!(c.slot(k), before, "{}: a redundant put keeps the slot", algo);
                        }
                        (Some(k), before)
                    }
                    Op::Remove(k) => {
                        if let Some(s) = c.slot(k) {
                            model.remove(&s);
                        }
                        c.remove(k);
                        (None, None)
                    }
                    Op::Resize(n) => {
                        let to = if bytes { Capacity::Bytes(n * 20) } else { Capacity::Keys(n) };
                        c.resize_evicting(to, &mut |e| gone.push(e));
                        (None, None)
                    }
                };
                for e in &gone {
                    prop_assert_eq!(model.remove(&e.slot), Some(e.key), "{}: evicted {:?}", algo, e);
                }
                if let (Some(k), Some(b)) = (key, before) {
                    // A put of another size replaces the object: its old slot is free, unreported.
                    if model.get(&b) == Some(&k) && c.slot(k) != Some(b) {
                        model.remove(&b);
                    }
                }
                if let Some(k) = key
                    && let Some(s) = c.slot(k)
                {
                    if let Some(&other) = model.get(&s) {
                        prop_assert_eq!(other, k, "{}: slot {} given to {} while {} holds it", algo, s, k, other);
                    }
                    model.insert(s, k);
                }
                // Every key the model holds is resident at its slot, and nothing else is.
                for (&s, &k) in &model {
                    prop_assert_eq!(c.slot(k), Some(s), "{}: key {}", algo, k);
                }
                prop_assert_eq!(model.len() as u64, c.stats().keys, "{}", algo);
            }
        }
    }
}
