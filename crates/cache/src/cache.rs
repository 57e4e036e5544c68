//! The cache core: capacity in bytes or keys, per-operation eviction, run-time resize, and the
//! counters every caller wants.

use crate::algorithm::{Algorithm, Evicted, Request, Units};

/// A cache's capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capacity {
    /// At most this many bytes.
    Bytes(u64),
    /// At most this many keys.
    Keys(u64),
}

impl Capacity {
    /// The units this capacity counts in.
    pub fn units(self) -> Units {
        match self {
            Self::Bytes(_) => Units::Bytes,
            Self::Keys(_) => Units::Objects,
        }
    }

    /// The number of units.
    pub fn amount(self) -> u64 {
        match self {
            Self::Bytes(n) | Self::Keys(n) => n,
        }
    }
}

impl std::fmt::Display for Capacity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // In the largest unit that divides it, binary first, so `64MiB` reads back as
            // written (and parses back to the same capacity).
            Self::Bytes(n) => match [
                (1u64 << 40, "TiB"),
                (1 << 30, "GiB"),
                (1 << 20, "MiB"),
                (1 << 10, "KiB"),
                (1_000_000_000_000, "TB"),
                (1_000_000_000, "GB"),
                (1_000_000, "MB"),
                (1_000, "KB"),
            ]
            .into_iter()
            .find(|&(unit, _)| *n > 0 && n % unit == 0)
            {
                Some((unit, name)) => write!(f, "{}{name}", n / unit),
                None => write!(f, "{n}B"),
            },
            Self::Keys(u64::MAX) => f.write_str("unlimited"),
            Self::Keys(n) => write!(f, "{n}keys"),
        }
    }
}

/// A capacity string that is not bytes, keys or `unlimited`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("size {0:?}: expected bytes (4096, 128MiB, 1GB), keys (1000keys) or unlimited")]
pub struct CapacityError(pub String);

impl std::str::FromStr for Capacity {
    type Err = CapacityError;

    /// Parses what users and configuration files write: bytes (`4096`, `4096B`, decimal units
    /// `KB`/`MB`/`GB`/`TB`, binary units `KiB`/`MiB`/`GiB`/`TiB` or just `K`/`M`/`G`/`T`), keys
    /// (`1000keys`, `1e5keys`), or `unlimited` (`inf`), case-insensitive; `_` separates digits.
    /// Zero, negative and non-finite sizes are errors: a cache that can hold nothing is a
    /// mistake, not a configuration.
    fn from_str(s: &str) -> Result<Self, CapacityError> {
        let bad = || CapacityError(s.to_string());
        let t = s.trim().to_ascii_lowercase();
        if t == "unlimited" || t == "inf" {
            return Ok(Self::Keys(u64::MAX));
        }
        if let Some(n) = t.strip_suffix("keys").or_else(|| t.strip_suffix("key")) {
            let n = positive(n).ok_or_else(bad)?;
            return Ok(Self::Keys(n as u64));
        }
        let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let mult: f64 = match unit {
            "" | "b" => 1.0,
            "kb" => 1e3,
            "mb" => 1e6,
            "gb" => 1e9,
            "tb" => 1e12,
            "kib" | "k" => 1024.0,
            "mib" | "m" => 1024.0 * 1024.0,
            "gib" | "g" => 1024.0 * 1024.0 * 1024.0,
            "tib" | "t" => 1024f64.powi(4),
            _ => return Err(bad()),
        };
        let n = positive(num).ok_or_else(bad)?;
        Ok(Self::Bytes((n * mult).round() as u64))
    }
}

fn positive(s: &str) -> Option<f64> {
    let v: f64 = s.trim().replace('_', "").parse().ok()?;
    (v.is_finite() && v > 0.0).then_some(v)
}

/// Counters. Byte counters count request sizes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Lookups that found the key.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
    /// Bytes of the hits.
    pub byte_hits: u64,
    /// Bytes of the misses.
    pub byte_misses: u64,
    /// Objects inserted (by a miss or a put).
    pub insertions: u64,
    /// Puts of a key already held with the same size (ignored).
    pub redundant_puts: u64,
    /// Objects evicted, by admission pressure or by a resize.
    pub evictions: u64,
    /// Keys held now.
    pub keys: u64,
    /// Bytes held now.
    pub bytes: u64,
    /// Most keys ever held.
    pub peak_keys: u64,
    /// Most bytes ever held.
    pub peak_bytes: u64,
}

impl Stats {
    /// Misses over lookups (0 when there were none).
    pub fn miss_ratio(&self) -> f64 {
        let n = self.hits + self.misses;
        if n == 0 {
            0.0
        } else {
            self.misses as f64 / n as f64
        }
    }

    /// Byte misses over looked-up bytes.
    pub fn byte_miss_ratio(&self) -> f64 {
        let n = self.byte_hits + self.byte_misses;
        if n == 0 {
            0.0
        } else {
            self.byte_misses as f64 / n as f64
        }
    }
}

/// What a [`Cache::put`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    /// The key was not held; it is now.
    Inserted,
    /// The key was held with this size; nothing changed.
    Redundant,
    /// The key was held with another size; it now has the new one.
    Resized,
    /// The object cannot be admitted (larger than the cache allows); nothing is held.
    Rejected,
}

/// A cache: an eviction algorithm plus capacity, resize and counters.
pub struct Cache {
    algo: Box<dyn Algorithm>,
    capacity: Capacity,
    stats: Stats,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("algorithm", &self.algo.name())
            .field("capacity", &self.capacity)
            .field("stats", &self.stats)
            .finish()
    }
}

impl Cache {
    /// A cache around an algorithm built for `capacity` (see [`crate::build`]).
    pub fn new(algo: Box<dyn Algorithm>, capacity: Capacity) -> Self {
        Self {
            algo,
            capacity,
            stats: Stats::default(),
        }
    }

    /// The algorithm's name.
    pub fn algorithm(&self) -> &'static str {
        self.algo.name()
    }

    /// The capacity.
    pub fn capacity(&self) -> Capacity {
        self.capacity
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Heap bytes the algorithm's structures have allocated.
    pub fn allocated_bytes(&self) -> usize {
        self.algo.allocated_bytes()
    }

    /// libCacheSim's `get`: a hit records the access; a miss admits the object (evicting as
    /// needed) unless it can never fit. Returns whether it was a hit.
    #[inline]
    pub fn access(&mut self, req: &Request) -> bool {
        if self.algo.find(req, true).is_some() {
            self.stats.hits += 1;
            self.stats.byte_hits += u64::from(req.size);
            return true;
        }
        self.stats.misses += 1;
        self.stats.byte_misses += u64::from(req.size);
        if self.algo.can_insert(req) {
            self.admit(req, &mut |_| {});
        }
        false
    }

    /// A lookup that does not admit on a miss (a tier that fetches from its parent and then
    /// [`Cache::put`]s). Returns the held size on a hit.
    pub fn get(&mut self, req: &Request) -> Option<u32> {
        let r = self.algo.find(req, true);
        if r.is_some() {
            self.stats.hits += 1;
            self.stats.byte_hits += u64::from(req.size);
        } else {
            self.stats.misses += 1;
            self.stats.byte_misses += u64::from(req.size);
        }
        r
    }

    /// The slot of a resident `key` ([`Algorithm::slot`]): where a cache that keeps values beside
    /// the algorithm keeps this key's.
    #[inline]
    pub fn slot(&self, key: u64) -> Option<u32> {
        self.algo.slot(key)
    }

    /// Whether `key` is held, without touching any state.
    pub fn contains(&mut self, key: u64) -> bool {
        self.algo.find(&Request::new(key, 0), false).is_some()
    }

    /// Stores an object. A key already held with the same size is a redundant put: nothing
    /// changes (not even recency). A different size replaces the object.
    pub fn put(&mut self, req: &Request) -> PutOutcome {
        self.put_evicting(req, &mut |_| {})
    }

    /// [`put`](Self::put), telling `evicted` of every object that leaves to make room: a cache
    /// that holds values (the service's memory tier) drops them there.
    #[inline]
    pub fn put_evicting(&mut self, req: &Request, evicted: &mut impl FnMut(Evicted)) -> PutOutcome {
        match self.algo.find(req, false) {
            Some(size) if size == req.size => {
                self.stats.redundant_puts += 1;
                PutOutcome::Redundant
            }
            Some(_) => {
                self.algo.remove(req.key);
                let admitted = self.algo.can_insert(req) && self.admit(req, evicted);
                self.sync();
                if admitted {
                    PutOutcome::Resized
                } else {
                    PutOutcome::Rejected
                }
            }
            None => {
                // A ghost of the key (S3-FIFO's, ARC's) goes first: inserting beside it left two
                // nodes of one key, and dropping the ghost later unindexed the resident one.
                self.algo.remove(req.key);
                if self.algo.can_insert(req) && self.admit(req, evicted) {
                    PutOutcome::Inserted
                } else {
                    PutOutcome::Rejected
                }
            }
        }
    }

    /// Removes a key; returns whether it was held.
    pub fn remove(&mut self, key: u64) -> bool {
        let removed = self.algo.remove(key).is_some();
        self.sync();
        removed
    }

    /// Changes the capacity. Lowering it evicts at once, in the algorithm's order, down to the new
    /// size; this is how policies act ("trim to n keys"). The units cannot change.
    ///
    /// # Panics
    /// If `capacity` counts in other units than the cache was built with.
    pub fn resize(&mut self, capacity: Capacity) {
        self.resize_evicting(capacity, &mut |_| {});
    }

    /// [`resize`](Self::resize), telling `evicted` of every object that leaves.
    ///
    /// # Panics
    /// If `capacity` counts in other units than the cache was built with.
    pub fn resize_evicting(&mut self, capacity: Capacity, evicted: &mut impl FnMut(Evicted)) {
        assert_eq!(
            capacity.units(),
            self.capacity.units(),
            "a cache cannot change between byte and key capacity"
        );
        self.capacity = capacity;
        self.algo.set_capacity(capacity.amount());
        let probe = Request::new(u64::MAX, 0);
        while self.algo.occupied() > capacity.amount() && !self.algo.is_empty() {
            if let Some(e) = self.algo.evict(&probe) {
                self.stats.evictions += 1;
                evicted(e);
            }
        }
        self.sync();
    }

    /// Evicts until `req` fits and inserts it; false if the algorithm declined it after all.
    #[inline]
    fn admit(&mut self, req: &Request, evicted: &mut impl FnMut(Evicted)) -> bool {
        let cap = self.capacity.amount();
        let w = self.capacity.units().weight(req.size);
        while self.algo.occupied() + w > cap && !self.algo.is_empty() {
            if let Some(e) = self.algo.evict(req) {
                self.stats.evictions += 1;
                evicted(e);
            }
        }
        let inserted = self.algo.insert(req);
        if inserted {
            self.stats.insertions += 1;
        }
        self.sync();
        inserted
    }

    #[inline]
    fn sync(&mut self) {
        let s = &mut self.stats;
        s.keys = self.algo.len();
        s.bytes = self.algo.bytes();
        s.peak_keys = s.peak_keys.max(s.keys);
        s.peak_bytes = s.peak_bytes.max(s.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_every_unit() {
        let parse = |s: &str| s.parse::<Capacity>().ok();
        assert_eq!(parse("128MiB"), Some(Capacity::Bytes(128 << 20)));
        assert_eq!(parse("128m"), Some(Capacity::Bytes(128 << 20)));
        assert_eq!(parse("1GB"), Some(Capacity::Bytes(1_000_000_000)));
        assert_eq!(parse("1.5KB"), Some(Capacity::Bytes(1500)));
        assert_eq!(parse("2TiB"), Some(Capacity::Bytes(2 << 40)));
        assert_eq!(parse("4096"), Some(Capacity::Bytes(4096)));
        assert_eq!(parse(" 4_096B "), Some(Capacity::Bytes(4096)));
        assert_eq!(parse("1000keys"), Some(Capacity::Keys(1000)));
        assert_eq!(parse("1key"), Some(Capacity::Keys(1)));
        assert_eq!(parse("1e5keys"), Some(Capacity::Keys(100_000)));
        assert_eq!(parse("unlimited"), Some(Capacity::Keys(u64::MAX)));
        assert_eq!(parse("INF"), Some(Capacity::Keys(u64::MAX)));
        for bad in [
            "",
            "12parsecs",
            "-5",
            "keys",
            "0",
            "0keys",
            "nankeys",
            "1e999",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn errors_name_the_input_and_the_accepted_forms() {
        let e = "10furlongs"
            .parse::<Capacity>()
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some(
                "size \"10furlongs\": expected bytes (4096, 128MiB, 1GB), keys (1000keys) or \
                 unlimited"
            )
        );
    }

    /// Results label their size with `Display`; reading a label back gives the same capacity.
    #[test]
    fn display_reads_back() {
        for c in [
            Capacity::Bytes(1),
            Capacity::Bytes(134_217_728),
            Capacity::Keys(100),
            Capacity::Keys(u64::MAX),
        ] {
            assert_eq!(c.to_string().parse::<Capacity>().ok(), Some(c), "{c}");
        }
    }

    /// `--capacity 64MiB` was shown as 67108864B by the service and "67.1 MB" by the CLI.
    #[test]
    fn a_size_shows_in_the_unit_it_was_given() {
        for (given, shown) in [
            ("64MiB", "64MiB"),
            ("1GiB", "1GiB"),
            ("500MB", "500MB"),
            ("1536KiB", "1536KiB"),
            ("4097", "4097B"),
        ] {
            let c: Capacity = given.parse().expect("size");
            assert_eq!(c.to_string(), shown);
            assert_eq!(shown.parse::<Capacity>().ok(), Some(c));
        }
    }
}
