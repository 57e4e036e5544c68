//! The memory all WorkManager caches hold together, over a run: final, peak and time-averaged.
//!
//! The peak is of the sum at one instant. Summing each cache's own peak instead overstates it
//! whenever the caches peak at different times (a two-phase policy trims each WorkManager at its
//! own decision), which is what the demo reported before.

/// Keys and bytes held by every cache, as last observed, and what they have added up to.
#[derive(Debug, Clone)]
pub(crate) struct MemoryMeter {
    /// Per cache: (keys, bytes) since it was last observed.
    held: Vec<(u64, u64)>,
    /// Their sums.
    keys: u64,
    bytes: u64,
    peak_keys: u64,
    peak_bytes: u64,
    /// ∫ bytes dt up to `last_t`, byte-seconds.
    byte_seconds: f64,
    last_t: f64,
}

/// What a meter measured over a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Memory {
    /// Most keys held at once, all caches together.
    pub peak_keys: u64,
    /// Most bytes held at once, all caches together.
    pub peak_bytes: u64,
    /// Bytes held, averaged over the run's time.
    pub mean_bytes: f64,
}

impl MemoryMeter {
    /// A meter for `caches` caches holding nothing at time 0.
    pub fn new(caches: usize) -> Self {
        Self {
            held: vec![(0, 0); caches],
            keys: 0,
            bytes: 0,
            peak_keys: 0,
            peak_bytes: 0,
            byte_seconds: 0.0,
            last_t: 0.0,
        }
    }

    /// Cache `i` holds `keys` keys and `bytes` bytes from time `t` on. Times never go back.
    pub fn observe(&mut self, t: f64, i: usize, keys: u64, bytes: u64) {
        self.advance(t);
        let (k0, b0) = std::mem::replace(&mut self.held[i], (keys, bytes));
        self.keys = self.keys - k0 + keys;
        self.bytes = self.bytes - b0 + bytes;
        self.peak_keys = self.peak_keys.max(self.keys);
        self.peak_bytes = self.peak_bytes.max(self.bytes);
    }

    fn advance(&mut self, t: f64) {
        if t > self.last_t {
            self.byte_seconds += self.bytes as f64 * (t - self.last_t);
            self.last_t = t;
        }
    }

    /// What was measured from time 0 to `end`.
    pub fn measure(&mut self, end: f64) -> Memory {
        self.advance(end);
        Memory {
            peak_keys: self.peak_keys,
            peak_bytes: self.peak_bytes,
            mean_bytes: if end > 0.0 {
                self.byte_seconds / end
            } else {
                self.bytes as f64
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_is_of_the_sum_at_one_instant_and_the_mean_is_over_time() {
        let mut m = MemoryMeter::new(2);
        // Cache 0 holds 100 bytes for the first 5 s, cache 1 for the next 5 s: each peaks at
        // 100, never together.
        m.observe(0.0, 0, 1, 100);
        m.observe(5.0, 0, 0, 0);
        m.observe(5.0, 1, 1, 100);
        m.observe(10.0, 1, 0, 0);
        let r = m.measure(10.0);
        assert_eq!((r.peak_keys, r.peak_bytes), (1, 100));
        assert_eq!(r.mean_bytes, 100.0);
        // Held to the end: the last level counts until then.
        let mut m = MemoryMeter::new(1);
        m.observe(0.0, 0, 2, 40);
        m.observe(2.0, 0, 4, 80);
        assert_eq!(m.measure(4.0).mean_bytes, (40.0 * 2.0 + 80.0 * 2.0) / 4.0);
    }
}
