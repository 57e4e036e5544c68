//! What the slot index (`keyspace/slots.rs`) costs and saves, on one node's keyspace:
//! building it by one walk of a store of N keys (what a cluster node pays when it starts), the
//! bytes it holds per key, what it adds to a SET, and the slot commands' reads with it against
//! the walks of every key they did before it.
//!
//! ```sh
//! cargo run --release -p pliant-kv --example slot_index -- [KEYS] [VALUE_BYTES]
//! ```
//!
//! Defaults: 1,000,000 keys (`key:%012d`, 16 bytes, as redis-benchmark names them) of 1,024
//! bytes, in a `WriteBehind` store in a temporary directory (removed at the end).

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use pliant_cache::Capacity;
use pliant_kv::cluster::{SLOTS, key_slot};
use pliant_kv::{Keyspace, Value};
use pliant_store::Store;

/// The system allocator, counting the bytes held: the index's cost is what building it adds.
#[global_allocator]
static ALLOC: pliant_testdata::alloc::Counting = pliant_testdata::alloc::Counting;

fn key(i: u64) -> Bytes {
    Bytes::from(format!("key:{i:012}"))
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().map_or(Ok(1_000_000), |a| a.parse())?;
    let value_len: usize = args.next().map_or(Ok(1024), |a| a.parse())?;
    if args.next().as_deref() == Some("set") {
        return set_cost(n);
    }
    let dir = tempfile::tempdir()?;
    let store: Arc<dyn Store> = Arc::new(pliant_store::WriteBehind::open(
        dir.path(),
        pliant_store::WriteBehindOptions::default(),
    )?);
    let value = Bytes::from(vec![b'v'; value_len]);
    {
        let mut ks = Keyspace::new("lru", Capacity::Keys(1), Some(store.clone()))?;
        for i in 0..n {
            ks.set(key(i), Value::new(value.clone()))?;
            if i % 10_000 == 9_999 {
                ks.commit()?;
            }
        }
        ks.commit()?;
    }
    store.sync()?;
    println!("{n} keys of {value_len} bytes in a store");

    // Startup: a keyspace over the store, its index built by one walk.
    let mut ks = Keyspace::new("lru", Capacity::Keys(1), Some(store.clone()))?;
    let t = Instant::now();
    ks.index_slots()?;
    let build = ms(t);
    // What the index holds is what letting go of the keyspace (the index, and a memory tier of
    // one key) gives back: the store's caches, which the walk filled too, stay.
    let with = pliant_testdata::alloc::held();
    drop(ks);
    let index_bytes = with - pliant_testdata::alloc::held();
    println!(
        "build (one walk of the store): {build:.0} ms; index: {:.1} MB, {:.1} bytes a key",
        index_bytes as f64 / 1e6,
        index_bytes as f64 / n as f64
    );
    let mut ks = Keyspace::new("lru", Capacity::Keys(1), Some(store.clone()))?;
    ks.index_slots()?;

    // The slot commands, with the index and as they walked before it (a walk of every key of
    // the store, filtered by slot).
    let now = 0;
    let slot = key_slot(&key(0));
    let t = Instant::now();
    let counted = ks.slot_count(&[slot], now)?;
    let count_new = ms(t);
    let t = Instant::now();
    let (walked, _) = ks.scan(None, usize::MAX, now, &|k| key_slot(k) == slot)?;
    let count_old = ms(t);
    assert_eq!(counted, walked.len() as u64);
    println!("COUNTKEYSINSLOT: {count_new:.3} ms (index), {count_old:.0} ms (walk)");

    let t = Instant::now();
    let stats = ks.slot_stats(now)?;
    let stats_new = ms(t);
    let t = Instant::now();
    let (all, _) = ks.scan(None, usize::MAX, now, &|_| true)?;
    let mut bytes = 0u64;
    for k in &all {
        bytes += ks
            .peek(k, now)?
            .map_or(0, |v| (k.len() + v.data.len()) as u64);
    }
    let stats_old = ms(t);
    assert_eq!(stats.iter().map(|s| s.1).sum::<u64>(), bytes);
    println!("SLOTSTATS: {stats_new:.1} ms (index), {stats_old:.0} ms (walk)");

    // A move of a quarter of the slots: every SLOTKEYS call of 1,000 keys.
    let wanted: Vec<u16> = (0..SLOTS / 4).collect();
    let t = Instant::now();
    let (mut after, mut calls, mut found) = (None::<Bytes>, 0, 0);
    loop {
        let (keys, next) = ks
            .slot_keys(&wanted, after.as_deref(), 1000, now)?
            .ok_or("a token")?;
        calls += 1;
        found += keys.len();
        match next {
            Some(t) => after = Some(t),
            None => break,
        }
    }
    let keys_new = ms(t);
    let t = Instant::now();
    let (first, _) = ks.scan(None, 1000, now, &|k| key_slot(k) < SLOTS / 4)?;
    let first_old = ms(t);
    println!(
        "SLOTKEYS over a quarter of the slots: {found} keys in {calls} calls of 1,000, {keys_new:.0} ms in all (index); one call of the walk: {first_old:.1} ms for {} keys",
        first.len()
    );

    set_cost(n)
}

/// What the index adds to a SET: the same writes with and without it (no store, so the SET is
/// all memory's work; keys new, then each set again).
fn set_cost(n: u64) -> Result<(), Box<dyn std::error::Error>> {
    let mut held = [0i64; 2];
    for indexed in [false, true] {
        let before = pliant_testdata::alloc::held();
        let mut ks = Keyspace::new("lru", Capacity::Keys(n), None)?;
        if indexed {
            ks.index_slots()?;
        }
        let v = Value::new(Bytes::from_static(b"0123456789"));
        // New keys in a scattered order (a permutation of 0..n), as clients' random keys come,
        // not each slot's keys in order, which would append at the end of each slot's map.
        let t = Instant::now();
        for i in 0..n {
            ks.set(key(i.wrapping_mul(1_000_003) % n), v.clone())?;
        }
        let new = t.elapsed().as_secs_f64() * 1e9 / n as f64;
        let t = Instant::now();
        for i in 0..n {
            ks.set(key(i), v.clone())?;
        }
        let again = t.elapsed().as_secs_f64() * 1e9 / n as f64;
        println!(
            "SET without a store, index {}: {new:.0} ns a new key, {again:.0} ns a key set again",
            if indexed { "on " } else { "off" }
        );
        held[usize::from(indexed)] = pliant_testdata::alloc::held() - before;
    }
    println!(
        "index grown by those SETs (one by one, not in bulk): {:.1} bytes a key",
        (held[1] - held[0]) as f64 / n as f64
    );
    Ok(())
}
