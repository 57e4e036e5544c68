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
    /// `auto` as the study runs it, with the default efficiency objective.
    pub fn auto() -> Self {
        Self::Auto {
            efficiency: pliant_tier::auto::EFFICIENCY,
        }
    }
}

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
