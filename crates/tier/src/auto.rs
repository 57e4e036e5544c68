//! The `auto` policy, after the ParSplice studies' regime analysis, run online:
//!
//! 1. **When to stop absorbing.** Every minute after the first half hour, k-means (k = 4) over the
//!    `(time, reads/s)` history so far. Once the last five minutes all belong to the third regime
//!    or later, the flash crowd and its decline are over: the threshold is the number of keys held
//!    when the third regime began, and the policy is armed (once, like `WRstate`).
//! 2. **How much to keep.** From then on the cache keeps the working set: the distinct keys read
//!    in the last five minutes. Superbasins are never revisited, so keys not read for that long
//!    are dead; LRU order keeps exactly the live ones.
//!
//! k, the minute between fits and the five-minute windows are structure; no key count is set by
//! hand, the threshold and the trim target both come from the run itself.
//!
//! It lives here rather than in the ParSplice simulator because a live tier runs it the same way:
//! it sees reads ([`Auto::on_read`]) and the tier's [`CacheView`] at each decision, nothing else.

use std::collections::{HashMap, VecDeque};

use pliant_regime::{THRESHOLD_REGIME, Threshold};

use crate::CacheView;

/// Seconds of reads the working set and the regime confirmation look back over.
const WINDOW_SECONDS: f64 = 300.0;
/// History needed before the first fit: the flash crowd's decline must be in the data.
const MIN_HISTORY_SECONDS: f64 = 1800.0;
/// Seconds between k-means fits while not yet armed.
const FIT_EVERY_SECONDS: f64 = 60.0;
/// Regimes the history is cut into: flash crowd, decline, steady exploration, and a spare for
/// the noise between them.
const REGIMES: usize = 4;

/// The `auto` policy's state for one cache (see the module doc).
#[derive(Debug)]
pub struct Auto {
    seed: u64,
    history: Vec<(f64, f64)>,
    keys_at: Vec<(f64, u64)>,
    last_fit: f64,
    armed: Option<Threshold>,
    window: VecDeque<(f64, u64)>,
    live: HashMap<u64, u32, foldhash::fast::FixedState>,
}

impl Auto {
    /// A policy that has seen nothing; `seed` seeds its k-means.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            history: Vec::new(),
            keys_at: Vec::new(),
            last_fit: f64::NEG_INFINITY,
            armed: None,
            window: VecDeque::new(),
            live: HashMap::with_hasher(foldhash::fast::FixedState::with_seed(4)),
        }
    }

    /// Sees one read of `key` at time `t` (seconds).
    #[inline]
    pub fn on_read(&mut self, t: f64, key: u64) {
        self.window.push_back((t, key));
        *self.live.entry(key).or_insert(0) += 1;
    }

    /// The key count to keep, once armed; `None` while the cache should go on absorbing.
    pub fn decide(&mut self, v: &CacheView) -> Option<u64> {
        while let Some(&(t, k)) = self.window.front() {
            if t >= v.t - WINDOW_SECONDS {
                break;
            }
            self.window.pop_front();
            if let Some(c) = self.live.get_mut(&k) {
                *c -= 1;
                if *c == 0 {
                    self.live.remove(&k);
                }
            }
        }
        self.history.push((v.t, v.reads_per_s));
        self.keys_at.push((v.t, v.keys));
        if self.armed.is_none()
            && v.t >= MIN_HISTORY_SECONDS
            && v.t - self.last_fit >= FIT_EVERY_SECONDS
        {
            self.last_fit = v.t;
            if let Ok(r) = pliant_regime::kmeans_regimes(&self.history, REGIMES, self.seed) {
                let recent = self
                    .history
                    .iter()
                    .filter(|(t, _)| *t > v.t - WINDOW_SECONDS)
                    .count();
                let tail = &r.labels[r.labels.len() - recent.min(r.labels.len())..];
                if tail.iter().all(|&l| l >= THRESHOLD_REGIME) {
                    // `keys_at` has a sample at every fitted point, so a third regime always
                    // yields a threshold.
                    self.armed = r.threshold(&self.keys_at);
                }
            }
        }
        self.armed?;
        Some((self.live.len() as u64).max(1))
    }

    /// The threshold it armed at: when the third regime began and the keys held then.
    pub fn threshold(&self) -> Option<Threshold> {
        self.armed
    }
}
