//! The rules of one cache tier in a hierarchy (a ParSplice WorkManager now, a node of the
//! service next): how it serves reads and puts, what it counts, and what it tells its policy.
//!
//! ParSplice's rules, which [`Tier`] applies:
//!
//! - a read is a **hit**, or **joins** a fetch of the same key already on its way up (concurrent
//!   misses are coalesced: one read goes up, however many readers want the key), or **misses** and
//!   goes up;
//! - the tier **keeps what it fetched**;
//! - a put is kept and **forwarded up once**: a put of a key the tier already holds (with the same
//!   size) is **redundant** and goes no further.
//!
//! The tier does no I/O and has no clock: the caller goes up (to the parent tier or the store)
//! when the tier says so, and says what time it is. That keeps one set of rules for the
//! simulator, which runs them in virtual time, and the service, which runs them on real requests.
//!
//! # Time and fetches in flight
//!
//! Time is a plain number of seconds the caller passes in: virtual time in the simulator, the
//! service's own clock (seconds since it started) in the service. It dates the policy's view and
//! is what a fetch in flight is asked about.
//!
//! A fetch in flight is a token of the caller's type ([`InFlight`]), because the two callers
//! know different things about it. The simulator knows when a fetch will end (its store model
//! says when the value arrives), so its token is that ready time, an `f64`: the fetch is under way
//! while `ready > now`, and [`Tier::expire`] drops the finished ones. A live service does not
//! know when the store will answer; its token is whatever its readers wait on (a channel, a
//! shared future), under way until the fetcher calls [`Tier::finish`], which hands the token back
//! so the fetcher can wake them. One in-flight table and one set of rules serve both, with no
//! made-up deadline in the service and no waker in the simulator.

use std::collections::HashMap;

use pliant_cache::{Cache, Capacity, Evicted, PutOutcome, Request, Stats};

use crate::{CacheView, Resize};

/// A fetch on its way up, as the caller represents it: readers of its key join it while it is
/// under way.
pub trait InFlight: Clone {
    /// Whether the fetch is still under way at `now` (seconds, the caller's clock).
    fn under_way(&self, now: f64) -> bool;
}

/// A fetch whose value arrives at a known time (the simulator's): under way until then.
impl InFlight for f64 {
    fn under_way(&self, now: f64) -> bool {
        *self > now
    }
}

/// What a read found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Read<F> {
    /// The tier holds the key.
    Hit,
    /// Another reader's fetch of the key is under way: wait for it (the read is coalesced).
    Join(F),
    /// The tier does not hold the key: fetch it from above, then tell the tier
    /// ([`Tier::fetching`]).
    Miss,
}

/// What to do with a put after the tier kept it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Put {
    /// The tier did not hold the key: pass the put up.
    Forward,
    /// The tier already held the key with this size: the put goes no further.
    Redundant,
}

/// What the tier counts beyond its cache's [`Stats`] (totals since it started).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Reads, whatever they found.
    pub reads: u64,
    /// Puts, redundant ones included.
    pub puts: u64,
    /// Reads that joined another reader's fetch (the cache saw neither a hit nor a miss).
    pub joined: u64,
    /// Reads that waited for a put the caller knew was coming
    /// ([`Tier::read_waiting_for_put`]).
    pub waited: u64,
    /// Fetches from the tier above ([`Tier::fetching`]).
    pub fetches: u64,
    /// Puts of keys the cache did not hold ([`Put::Forward`]).
    pub new_keys: u64,
}

/// One cache tier: a [`Cache`], the fetches in flight (tokens of type `F`, see the module doc)
/// and the counters, with the hierarchy's rules as operations.
#[derive(Debug)]
pub struct Tier<F = f64> {
    cache: Cache,
    in_flight: HashMap<u64, F, foldhash::fast::FixedState>,
    counters: Counters,
    /// The counters and cache misses at the last view: its rates are since then.
    at_last_view: (Counters, u64),
}

impl<F: InFlight> Tier<F> {
    /// A tier over `cache`, with nothing in flight.
    pub fn new(cache: Cache) -> Self {
        Self {
            cache,
            in_flight: HashMap::with_hasher(foldhash::fast::FixedState::with_seed(5)),
            counters: Counters::default(),
            at_last_view: (Counters::default(), 0),
        }
    }

    /// A read of `key` (`size` bytes) at `now`. A fetch under way wins over the cache: the tier
    /// keeps a key as soon as its fetch starts, but its value is there only once the fetch ends.
    pub fn read(&mut self, key: u64, size: u32, now: f64) -> Read<F> {
        self.counters.reads += 1;
        if let Some(fetch) = self.in_flight.get(&key).filter(|f| f.under_way(now)) {
            self.counters.joined += 1;
            return Read::Join(fetch.clone());
        }
        match self.cache.get(&Request::new(key, size)) {
            Some(_) => Read::Hit,
            None => Read::Miss,
        }
    }

    /// A read the caller serves by waiting for a put of its key that it knows is coming (a
    /// replayed trace reads a state no sooner than the segment finding it has stored it). It
    /// counts as a read, and the cache is not asked: the put will bring the key.
    pub fn read_waiting_for_put(&mut self) {
        self.counters.reads += 1;
        self.counters.waited += 1;
    }

    /// After a [`Read::Miss`]: the caller is fetching `key` from above. The tier keeps it, and
    /// readers of `key` join `fetch` while it is under way.
    pub fn fetching(&mut self, key: u64, size: u32, fetch: F) {
        self.fetching_evicting(key, size, fetch, &mut |_| {});
    }

    /// [`fetching`](Self::fetching), telling `evicted` what the cache lets go to make room (a
    /// service holding values beside the cache drops theirs).
    pub fn fetching_evicting(
        &mut self,
        key: u64,
        size: u32,
        fetch: F,
        evicted: &mut impl FnMut(Evicted),
    ) {
        self.in_flight.insert(key, fetch);
        self.counters.fetches += 1;
        // The outcome does not matter: a key the cache declines (larger than its capacity) is
        // still being fetched, and reads after the fetch miss again.
        let _ = self.cache.put_evicting(&Request::new(key, size), evicted);
    }

    /// The fetch of `key` ended (a service calls this when the value has arrived); returns its
    /// token, so the caller can wake the readers that joined it.
    pub fn finish(&mut self, key: u64) -> Option<F> {
        self.in_flight.remove(&key)
    }

    /// Forgets the fetches no longer under way at `now` (the simulator's, which end by the
    /// clock).
    pub fn expire(&mut self, now: f64) {
        self.in_flight.retain(|_, f| f.under_way(now));
    }

    /// Fetches under way at `now`.
    pub fn in_flight(&self, now: f64) -> usize {
        self.in_flight.values().filter(|f| f.under_way(now)).count()
    }

    /// A put of `key` (`size` bytes): the tier keeps it, and says whether it goes further up.
    pub fn put(&mut self, key: u64, size: u32) -> Put {
        self.put_evicting(key, size, &mut |_| {})
    }

    /// [`put`](Self::put), telling `evicted` what the cache lets go to make room.
    pub fn put_evicting(&mut self, key: u64, size: u32, evicted: &mut impl FnMut(Evicted)) -> Put {
        self.counters.puts += 1;
        match self.cache.put_evicting(&Request::new(key, size), evicted) {
            PutOutcome::Redundant => Put::Redundant,
            // A key the cache declines (too large) is still new to everything above.
            PutOutcome::Inserted | PutOutcome::Resized | PutOutcome::Rejected => {
                self.counters.new_keys += 1;
                Put::Forward
            }
        }
    }

    /// The tier as its policy sees it at `t`, with rates over the `interval` seconds since the
    /// previous view; the next view's rates start from here. `queue_len` is the fetches under
    /// way (a coalesced fetch counts once); `cpu_load_avg` and `clients` are the caller's to fill.
    pub fn view(&mut self, t: f64, interval: f64) -> CacheView {
        let s = *self.cache.stats();
        let c = self.counters;
        let (before, misses) = self.at_last_view;
        self.at_last_view = (c, s.misses);
        let rate = |now: u64, then: u64| (now - then) as f64 / interval;
        CacheView {
            t,
            keys: s.keys,
            bytes: s.bytes,
            capacity: self.cache.capacity().amount(),
            hits: s.hits,
            misses: s.misses,
            reads_per_s: rate(c.reads, before.reads),
            writes_per_s: rate(c.puts, before.puts),
            misses_per_s: rate(s.misses, misses),
            queue_len: Some(self.in_flight(t) as f64),
            cpu_load_avg: None,
            clients: None,
            fetches_per_s: Some(rate(c.fetches, before.fetches)),
            new_keys_per_s: Some(rate(c.new_keys, before.new_keys)),
            progress: None,
            progress_per_s: None,
        }
    }

    /// Sets the capacity to `amount`, in the cache's own unit (as [`CacheView::capacity`] and
    /// [`CacheView::new_capacity`] count it); lowering it evicts at once.
    pub fn resize(&mut self, amount: u64) {
        let capacity = match self.cache.capacity() {
            Capacity::Keys(_) => Capacity::Keys(amount),
            Capacity::Bytes(_) => Capacity::Bytes(amount),
        };
        self.cache.resize(capacity);
    }

    /// Applies a policy's decision ([`Resize`]).
    pub fn apply(&mut self, r: Resize) {
        match r {
            Resize::Capacity(n) => self.resize(n),
            Resize::Trim(n) => {
                let capacity = self.capacity();
                self.resize(n);
                self.resize(capacity);
            }
        }
    }

    /// The cache.
    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// The cache itself, for what the rules leave to the caller: a service keeps written values
    /// and removes deleted keys through it, and resizes it reporting evictions.
    pub fn cache_mut(&mut self) -> &mut Cache {
        &mut self.cache
    }

    /// Whether a fetch of `key` is under way at `now`.
    pub fn is_fetching(&self, key: u64, now: f64) -> bool {
        self.in_flight.get(&key).is_some_and(|f| f.under_way(now))
    }

    /// The cache's counters (hits, misses, redundant puts, keys and bytes held, peaks).
    pub fn stats(&self) -> &Stats {
        self.cache.stats()
    }

    /// The tier's own counters.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The capacity, in the cache's own unit.
    pub fn capacity(&self) -> u64 {
        self.cache.capacity().amount()
    }
}
