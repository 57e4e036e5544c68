//! Cache policies of a WorkManager: what decides its capacity during a run.

use std::collections::{HashMap, VecDeque};

use pliant_policy::{Engine, ParamValue, Params, PolicySource, shipped};
use pliant_regime::THRESHOLD_REGIME;
pub use pliant_tier::CacheView;
use serde::Serialize;

use crate::ParspliceError;

/// A policy, as the demo and CLI name them.
#[derive(Debug, Clone, PartialEq)]
pub enum PolicyKind {
    /// No limit.
    Unlimited,
    /// LRU with a fixed key limit.
    Lru(u64),
    /// The studies' two-phase policy (`parsplice-absorb-trim`): unlimited until the cache has held
    /// `absorb` keys, then trimmed to `target`.
    TwoPhase {
        /// Absorb threshold, keys.
        absorb: u64,
        /// Trim target, keys.
        target: u64,
    },
    /// Any Lua policy (when → trim to howmuch keys).
    Lua {
        /// Label.
        name: String,
        /// Source.
        source: PolicySource,
        /// Parameters.
        params: Params,
    },
    /// Thresholds from regime detection while the run goes on, no hand-set numbers.
    Auto,
}

impl PolicyKind {
    /// A short label (`lru-100`, `two-phase-100000-10`, `auto`).
    pub fn label(&self) -> String {
        match self {
            Self::Unlimited => "unlimited".into(),
            Self::Lru(n) => format!("lru-{n}"),
            Self::TwoPhase { absorb, target } => format!("two-phase-{absorb}-{target}"),
            Self::Lua { name, .. } => name.clone(),
            Self::Auto => "auto".into(),
        }
    }

    /// The cache's initial key capacity.
    pub fn initial_capacity(&self) -> u64 {
        match self {
            Self::Lru(n) => *n,
            _ => u64::MAX,
        }
    }
}

/// One WorkManager's decision maker.
pub(crate) enum Decider {
    None,
    Lua(Box<Engine>),
    Auto(Box<Auto>),
}

impl Decider {
    pub fn new(kind: &PolicyKind, seed: u64) -> Result<Self, ParspliceError> {
        let lua = |source: PolicySource, params: Params| -> Result<Self, ParspliceError> {
            let mut e = Engine::in_memory(CacheView::default().metrics(0));
            e.set_params(params);
            e.install(source)?;
            Ok(Self::Lua(Box::new(e)))
        };
        match kind {
            PolicyKind::Unlimited | PolicyKind::Lru(_) => Ok(Self::None),
            PolicyKind::TwoPhase { absorb, target } => lua(
                shipped::get("parsplice-absorb-trim").ok_or_else(|| {
                    ParspliceError::Config("shipped policy parsplice-absorb-trim missing".into())
                })?,
                [
                    ("absorb".to_string(), ParamValue::Num(*absorb as f64)),
                    ("target".to_string(), ParamValue::Num(*target as f64)),
                ]
                .into(),
            ),
            PolicyKind::Lua { source, params, .. } => lua(source.clone(), params.clone()),
            PolicyKind::Auto => Ok(Self::Auto(Box::new(Auto::new(seed)))),
        }
    }

    /// Sees one read (the auto policy tracks key ids for the fan detector).
    #[inline]
    pub fn on_read(&mut self, t: f64, key: u64) {
        if let Self::Auto(a) = self {
            a.on_read(t, key);
        }
    }

    /// A decision: the new key capacity, if it differs from the current one.
    pub fn decide(&mut self, v: &CacheView) -> Result<Option<u64>, ParspliceError> {
        match self {
            Self::None => Ok(None),
            Self::Lua(e) => {
                v.write_to(e.metrics_mut(), 0);
                Ok(v.new_capacity(&e.decide()?))
            }
            Self::Auto(a) => Ok(a.decide(v).and_then(|n| v.resize_to(n))),
        }
    }

    /// The threshold the auto policy derived, if any: `(regime-3 start, keys held then)`.
    pub fn auto_threshold(&self) -> Option<(f64, u64)> {
        match self {
            Self::Auto(a) => a.armed,
            _ => None,
        }
    }
}

/// The `auto` policy, after the studies' regime analysis, run online:
///
/// 1. **When to stop absorbing.** Every minute after the first half hour, k-means (k = 4) over the
///    `(time, reads/s)` history so far. Once the last five minutes all belong to the third regime
///    or later, the flash crowd and its decline are over: the threshold is the number of keys held
///    when the third regime began, and the policy is armed (once, like `WRstate`).
/// 2. **How much to keep.** From then on the cache keeps the working set: the distinct keys read
///    in the last five minutes. Superbasins are never revisited, so keys not read for that long
///    are dead; LRU order keeps exactly the live ones.
///
/// k, the minute between fits and the five-minute windows are structure; no key count is set by
/// hand, the threshold and the trim target both come from the run itself.
#[derive(Debug)]
pub struct Auto {
    seed: u64,
    history: Vec<(f64, f64)>,
    keys_at: Vec<(f64, u64)>,
    last_fit: f64,
    armed: Option<(f64, u64)>,
    window: VecDeque<(f64, u64)>,
    live: HashMap<u64, u32, foldhash::fast::FixedState>,
}

/// Seconds of reads the working set and the regime confirmation look back over.
const AUTO_WINDOW_SECONDS: f64 = 300.0;
/// History needed before the first fit: the flash crowd's decline must be in the data.
const AUTO_MIN_HISTORY_SECONDS: f64 = 1800.0;

impl Auto {
    fn new(seed: u64) -> Self {
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

    fn on_read(&mut self, t: f64, key: u64) {
        self.window.push_back((t, key));
        *self.live.entry(key).or_insert(0) += 1;
    }

    fn decide(&mut self, v: &CacheView) -> Option<u64> {
        while let Some(&(t, k)) = self.window.front() {
            if t >= v.t - AUTO_WINDOW_SECONDS {
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
        if self.armed.is_none() && v.t >= AUTO_MIN_HISTORY_SECONDS && v.t - self.last_fit >= 60.0 {
            self.last_fit = v.t;
            if let Ok(r) = pliant_regime::kmeans_regimes(&self.history, 4, self.seed) {
                let recent = self
                    .history
                    .iter()
                    .filter(|(t, _)| *t > v.t - AUTO_WINDOW_SECONDS)
                    .count();
                let tail = &r.labels[r.labels.len() - recent.min(r.labels.len())..];
                if tail.iter().all(|&l| l >= THRESHOLD_REGIME) {
                    // `keys_at` has a sample at every fitted point, so a third regime always
                    // yields a threshold.
                    self.armed = r.threshold(&self.keys_at).map(|t| (t.start, t.keys));
                }
            }
        }
        self.armed?;
        let target = (self.live.len() as u64).max(1);
        (target != u64::MAX).then_some(target)
    }
}

/// Serialisable summary of the auto policy's choice.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct AutoChoice {
    /// When the third regime began, seconds.
    pub regime3_start: f64,
    /// Keys held then.
    pub threshold_keys: u64,
}
