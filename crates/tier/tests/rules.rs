//! A tier's rules for reads and puts, its counters and its view, through the public API; then
//! the same rules against a plain model on random operation sequences.

use pliant_cache::Capacity;
use pliant_tier::{Counters, InFlight, Put, Read, Tier};
use proptest::prelude::*;

fn lru(keys: u64) -> Tier {
    Tier::new(pliant_cache::cache("lru", Capacity::Keys(keys)).expect("lru"))
}

/// A read that misses and is fetched, ready at `ready`.
fn miss_and_fetch(t: &mut Tier, key: u64, now: f64, ready: f64) {
    assert_eq!(t.read(key, 100, now), Read::Miss);
    t.fetching(key, 100, ready);
}

#[test]
fn a_read_of_a_held_key_hits() {
    let mut t = lru(10);
    assert_eq!(t.put(1, 100), Put::Forward);
    assert_eq!(t.read(1, 100, 0.0), Read::Hit);
    assert_eq!((t.stats().hits, t.stats().misses), (1, 0));
}

#[test]
fn a_missed_key_is_kept_once_fetched() {
    let mut t = lru(10);
    miss_and_fetch(&mut t, 7, 1.0, 2.0);
    assert_eq!(t.stats().keys, 1, "kept as soon as the fetch starts");
    assert_eq!(t.read(7, 100, 2.0), Read::Hit);
    assert_eq!((t.stats().hits, t.stats().misses), (1, 1));
}

#[test]
fn a_read_during_a_fetch_of_its_key_joins_it() {
    let mut t = lru(10);
    miss_and_fetch(&mut t, 7, 1.0, 3.5);
    assert_eq!(t.read(7, 100, 1.0), Read::Join(3.5));
    assert_eq!(t.read(7, 100, 3.4), Read::Join(3.5));
    assert_eq!(t.counters().joined, 2);
    assert_eq!(t.counters().reads, 3);
    // A joined read neither hits nor misses: only the fetching read went up.
    assert_eq!((t.stats().hits, t.stats().misses), (0, 1));
    // Another key is not held up by it.
    assert_eq!(t.read(8, 100, 1.0), Read::Miss);
}

#[test]
fn a_finished_fetch_is_not_joined() {
    let mut t = lru(10);
    miss_and_fetch(&mut t, 7, 1.0, 3.5);
    assert_eq!(t.read(7, 100, 3.5), Read::Hit, "ready at 3.5: done at 3.5");
    assert_eq!(t.counters().joined, 0);
}

/// The fetch still wins once the cache has evicted the key: its readers wait for the value on
/// its way, they do not go up again.
#[test]
fn a_fetch_is_joined_even_after_its_key_was_evicted() {
    let mut t = lru(1);
    miss_and_fetch(&mut t, 7, 0.0, 5.0);
    miss_and_fetch(&mut t, 8, 0.0, 5.0);
    assert_eq!(t.stats().keys, 1);
    assert_eq!(t.read(7, 100, 1.0), Read::Join(5.0));
    assert_eq!(
        t.read(7, 100, 6.0),
        Read::Miss,
        "evicted, and the fetch is over"
    );
}

#[test]
fn a_put_of_a_held_key_is_redundant_and_not_forwarded() {
    let mut t = lru(10);
    assert_eq!(t.put(1, 100), Put::Forward);
    assert_eq!(t.put(1, 100), Put::Redundant);
    // What the tier fetched it holds too: a put of it goes no further.
    miss_and_fetch(&mut t, 2, 0.0, 1.0);
    assert_eq!(t.put(2, 100), Put::Redundant);
    assert_eq!(t.stats().redundant_puts, 2);
    assert_eq!(t.counters().puts, 3);
}

#[test]
fn a_fresh_put_is_forwarded_once() {
    let mut t = lru(10);
    let outcomes: Vec<_> = [1, 2, 1, 2, 1].map(|k| t.put(k, 100)).into();
    assert_eq!(
        outcomes,
        [
            Put::Forward,
            Put::Forward,
            Put::Redundant,
            Put::Redundant,
            Put::Redundant
        ]
    );
    // New contents (another size) are news above.
    assert_eq!(t.put(1, 200), Put::Forward);
    // So is a key the cache cannot hold at all.
    let mut none = lru(0);
    assert_eq!(none.put(1, 100), Put::Forward);
    assert_eq!(none.put(1, 100), Put::Forward);
    assert_eq!(none.stats().keys, 0);
}

#[test]
fn a_read_waiting_for_a_put_counts_but_asks_no_cache() {
    let mut t = lru(10);
    t.read_waiting_for_put();
    assert_eq!(
        t.counters(),
        Counters {
            reads: 1,
            puts: 0,
            joined: 0,
            waited: 1,
            fetches: 0,
            new_keys: 0,
        }
    );
    assert_eq!((t.stats().hits, t.stats().misses), (0, 0));
}

#[test]
fn a_view_gives_totals_and_the_rates_since_the_last_view() {
    let mut t = lru(100);
    for k in 0..4 {
        assert_eq!(t.put(k, 100), Put::Forward);
    }
    assert_eq!(t.read(0, 100, 1.0), Read::Hit);
    miss_and_fetch(&mut t, 10, 2.0, 30.0);
    miss_and_fetch(&mut t, 11, 3.0, 8.0);
    assert_eq!(t.read(10, 100, 4.0), Read::Join(30.0));
    let v = t.view(10.0, 10.0);
    assert_eq!(v.t, 10.0);
    assert_eq!((v.keys, v.bytes, v.capacity), (6, 600, 100));
    assert_eq!((v.hits, v.misses), (1, 2));
    assert_eq!(v.reads_per_s, 0.4);
    assert_eq!(v.writes_per_s, 0.4);
    assert_eq!(v.misses_per_s, 0.2);
    assert_eq!(
        v.fetches_per_s,
        Some(0.2),
        "keys 10 and 11 fetched once each"
    );
    assert_eq!(
        v.new_keys_per_s,
        Some(0.4),
        "four keys the tier did not hold"
    );
    assert_eq!(
        v.queue_len,
        Some(1.0),
        "only key 10's fetch is still under way"
    );
    assert_eq!(v.cpu_load_avg, None);
    assert_eq!(v.progress, None, "the tier knows no application's progress");

    // The next view counts from this one, over its own interval; totals keep growing.
    assert_eq!(t.read(12, 100, 11.0), Read::Miss);
    let v = t.view(15.0, 5.0);
    assert_eq!((v.hits, v.misses), (1, 3));
    assert_eq!(v.reads_per_s, 0.2);
    assert_eq!(v.writes_per_s, 0.0);
    assert_eq!(v.misses_per_s, 0.2);
    assert_eq!(
        v.fetches_per_s,
        Some(0.0),
        "key 12's miss is not fetched yet"
    );
    assert_eq!(t.put(0, 100), Put::Redundant);
    assert_eq!(
        t.view(16.0, 1.0).new_keys_per_s,
        Some(0.0),
        "a put of a key held is not new"
    );
}

#[test]
fn resizing_evicts_in_the_caches_order_and_keeps_its_unit() {
    let mut t = lru(3);
    for k in 1..=3 {
        assert_eq!(t.put(k, 100), Put::Forward);
    }
    assert_eq!(t.read(1, 100, 0.0), Read::Hit);
    t.resize(1);
    assert_eq!(t.capacity(), 1);
    assert_eq!(t.stats().keys, 1);
    assert_eq!(t.read(1, 100, 0.0), Read::Hit, "the most recent stays");
    assert_eq!(t.view(1.0, 1.0).capacity, 1);

    let mut bytes: Tier =
        Tier::new(pliant_cache::cache("lru", Capacity::Bytes(1000)).expect("lru"));
    for k in 1..=3 {
        assert_eq!(bytes.put(k, 100), Put::Forward);
    }
    // In bytes, as it was built: 250 bytes hold two 100-byte keys.
    bytes.resize(250);
    assert_eq!((bytes.capacity(), bytes.stats().keys), (250, 2));
}

#[test]
fn expiry_forgets_only_finished_fetches() {
    let mut t = lru(10);
    miss_and_fetch(&mut t, 1, 0.0, 2.0);
    miss_and_fetch(&mut t, 2, 0.0, 9.0);
    assert_eq!(t.in_flight(0.0), 2);
    t.expire(5.0);
    assert_eq!(t.finish(1), None, "ended at 2.0");
    assert_eq!(t.finish(2), Some(9.0));
}

/// The service's fetch: nobody knows when it ends; it is under way until the fetcher says so.
#[derive(Debug, Clone, PartialEq)]
struct Fetcher(&'static str);

impl InFlight for Fetcher {
    fn under_way(&self, _now: f64) -> bool {
        true
    }
}

#[test]
fn a_fetch_without_a_deadline_is_joined_until_it_finishes() {
    let mut t: Tier<Fetcher> =
        Tier::new(pliant_cache::cache("lru", Capacity::Keys(10)).expect("lru"));
    assert_eq!(t.read(1, 100, 0.0), Read::Miss);
    t.fetching(1, 100, Fetcher("a"));
    assert_eq!(t.read(1, 100, 1e9), Read::Join(Fetcher("a")));
    t.expire(1e9);
    assert_eq!(t.view(10.0, 10.0).queue_len, Some(1.0));
    assert_eq!(
        t.finish(1),
        Some(Fetcher("a")),
        "the token, to wake who joined"
    );
    assert_eq!(t.read(1, 100, 1e9), Read::Hit);
    assert_eq!(t.finish(1), None);
}

/// One step of a random workload.
#[derive(Debug, Clone)]
enum Op {
    /// Time passes, then a read; a miss is fetched, ready `fetch` seconds later.
    Read {
        key: u64,
        after: u8,
        fetch: u8,
    },
    Put {
        key: u64,
    },
    WaitForPut,
    Expire,
    Resize(u64),
    View,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..8u64, 0..3u8, 0..4u8)
            .prop_map(|(key, after, fetch)| Op::Read { key, after, fetch }),
        3 => (0..8u64).prop_map(|key| Op::Put { key }),
        1 => Just(Op::WaitForPut),
        1 => Just(Op::Expire),
        1 => (0..6u64).prop_map(Op::Resize),
        1 => Just(Op::View),
    ]
}

/// The rules written out plainly over an LRU list (most recent last) and a map of ready times.
#[derive(Default)]
struct Model {
    capacity: u64,
    held: Vec<u64>,
    ready: std::collections::HashMap<u64, f64>,
    hits: u64,
    misses: u64,
    counters: Counters,
}

impl Model {
    fn insert(&mut self, key: u64) {
        if self.capacity == 0 {
            return;
        }
        while self.held.len() as u64 >= self.capacity {
            self.held.remove(0);
        }
        self.held.push(key);
    }

    fn read(&mut self, key: u64, now: f64) -> Read<f64> {
        self.counters.reads += 1;
        if let Some(&r) = self.ready.get(&key).filter(|&&r| r > now) {
            self.counters.joined += 1;
            return Read::Join(r);
        }
        if let Some(i) = self.held.iter().position(|&k| k == key) {
            self.held.remove(i);
            self.held.push(key);
            self.hits += 1;
            Read::Hit
        } else {
            self.misses += 1;
            Read::Miss
        }
    }

    fn put(&mut self, key: u64) -> Put {
        self.counters.puts += 1;
        if self.held.contains(&key) {
            return Put::Redundant;
        }
        self.insert(key);
        self.counters.new_keys += 1;
        Put::Forward
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_tier_follows_the_rules(capacity in 0..6u64, ops in prop::collection::vec(op(), 1..80)) {
        let mut tier = lru(capacity);
        let mut m = Model { capacity, ..Model::default() };
        let mut now = 0.0;
        let mut last = (0, 0, 0);
        for op in ops {
            match op {
                Op::Read { key, after, fetch } => {
                    now += f64::from(after);
                    let got = tier.read(key, 100, now);
                    prop_assert_eq!(got, m.read(key, now));
                    if got == Read::Miss {
                        let ready = now + f64::from(fetch);
                        tier.fetching(key, 100, ready);
                        m.counters.fetches += 1;
                        m.ready.insert(key, ready);
                        m.insert(key);
                    }
                }
                Op::Put { key } => prop_assert_eq!(tier.put(key, 100), m.put(key)),
                Op::WaitForPut => {
                    tier.read_waiting_for_put();
                    m.counters.reads += 1;
                    m.counters.waited += 1;
                }
                Op::Expire => {
                    tier.expire(now);
                    m.ready.retain(|_, r| *r > now);
                }
                Op::Resize(n) => {
                    tier.resize(n);
                    m.capacity = n;
                    while m.held.len() as u64 > n {
                        m.held.remove(0);
                    }
                }
                Op::View => {
                    let v = tier.view(now, 2.0);
                    let c = m.counters;
                    prop_assert_eq!((v.keys, v.capacity), (m.held.len() as u64, m.capacity));
                    prop_assert_eq!(v.bytes, 100 * m.held.len() as u64);
                    prop_assert_eq!((v.hits, v.misses), (m.hits, m.misses));
                    prop_assert_eq!(v.reads_per_s, (c.reads - last.0) as f64 / 2.0);
                    prop_assert_eq!(v.writes_per_s, (c.puts - last.1) as f64 / 2.0);
                    prop_assert_eq!(v.misses_per_s, (m.misses - last.2) as f64 / 2.0);
                    let queue = m.ready.values().filter(|&&r| r > now).count();
                    prop_assert_eq!(v.queue_len, Some(queue as f64));
                    last = (c.reads, c.puts, m.misses);
                }
            }
            prop_assert_eq!(tier.counters(), m.counters);
            prop_assert_eq!(tier.stats().keys, m.held.len() as u64);
            prop_assert_eq!(tier.in_flight(now), m.ready.values().filter(|&&r| r > now).count());
        }
    }
}
