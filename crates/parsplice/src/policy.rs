//! The study's names for what sizes a WorkManager's cache, and the [`Decider`] each becomes (the
//! deciding itself, `auto` included, is `pliant-tier`'s, shared with the live service).

use pliant_policy::{ParamValue, Params, PolicySource, shipped};
pub use pliant_tier::CacheView;
use pliant_tier::Decider;

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
    /// Absorbs until regime detection says the run's opening is over, then keeps the working set
    /// that an efficiency objective needs ([`pliant_tier::Auto`]).
    Auto {
        /// The efficiency objective ([`pliant_tier::auto::EFFICIENCY`] in the study, see
        /// [`PolicyKind::auto`]).
        efficiency: f64,
    },
}

impl PolicyKind {
    /// The shipped `parsplice-no-progress` as the study runs it: the two-phase policy (absorb,
    /// then trim to `target`) that grows the cache back to `absorb` for good when the trajectory
    /// stalls after the trim or the store serves more than [`NO_PROGRESS_THRASH`] of the reads.
    pub fn no_progress(absorb: u64, target: u64) -> Self {
        Self::Lua {
            name: format!("no-progress-{absorb}-{target}"),
            source: shipped::get("parsplice-no-progress").expect("a shipped policy"),
            params: [
                ("absorb".to_string(), ParamValue::Num(absorb as f64)),
                ("target".to_string(), ParamValue::Num(target as f64)),
                ("thrash".to_string(), ParamValue::Num(NO_PROGRESS_THRASH)),
            ]
            .into(),
        }
    }

    /// `auto` as the study runs it, with the default efficiency objective.
    pub fn auto() -> Self {
        Self::Auto {
            efficiency: pliant_tier::auto::EFFICIENCY,
        }
    }
}

/// Share of the WorkManager's reads the store may serve after the trim before `no_progress` grows
/// the cache back: one in 10,000. In the measured runs LevelDB served no read in the hour before
/// a trim and 0.004–0.1% of the reads after one (gets from the trim to the stop: 139, 374, 29
/// and 44, `tools/fit/parsplice_counters.py`), and each store read risks a stop
/// (`model::LOST_SHARE`), so store traffic the cache did not cause before is the warning.
pub const NO_PROGRESS_THRASH: f64 = 0.0001;

impl PolicyKind {
    /// A short label (`lru-100`, `two-phase-100000-10`, `auto`).
    pub fn label(&self) -> String {
        match self {
            Self::Unlimited => "unlimited".into(),
            Self::Lru(n) => format!("lru-{n}"),
            Self::TwoPhase { absorb, target } => format!("two-phase-{absorb}-{target}"),
            Self::Lua { name, .. } => name.clone(),
            Self::Auto { .. } => "auto".into(),
        }
    }

    /// Whether the policy is a fixed rule with its numbers set by hand (unlimited, LRU, two-phase):
    /// what the efficiency–memory front is made of.
    pub fn is_fixed(&self) -> bool {
        matches!(self, Self::Unlimited | Self::Lru(_) | Self::TwoPhase { .. })
    }

    /// The cache's initial key capacity.
    pub fn initial_capacity(&self) -> u64 {
        match self {
            Self::Lru(n) => *n,
            _ => u64::MAX,
        }
    }
}

impl PolicyKind {
    /// The decision maker a WorkManager runs for this policy; `seed` seeds `auto`'s k-means.
    pub(crate) fn decider(&self, seed: u64) -> Result<Decider, ParspliceError> {
        Ok(match self {
            Self::Unlimited | Self::Lru(_) => Decider::Fixed,
            Self::TwoPhase { absorb, target } => Decider::lua(
                shipped::get("parsplice-absorb-trim").ok_or_else(|| {
                    ParspliceError::Config("shipped policy parsplice-absorb-trim missing".into())
                })?,
                [
                    ("absorb".to_string(), ParamValue::Num(*absorb as f64)),
                    ("target".to_string(), ParamValue::Num(*target as f64)),
                ]
                .into(),
            )?,
            Self::Lua { source, params, .. } => Decider::lua(source.clone(), params.clone())?,
            Self::Auto { efficiency } => Decider::auto(seed, *efficiency),
        })
    }
}
