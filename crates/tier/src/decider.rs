//! What decides a tier's capacity: nothing (a fixed size), a Lua policy of the engine, or `auto`.
//! The simulator's WorkManagers and the live service hold one each, so a policy decides the same
//! way in both.

use crate::auto::AutoState;
use crate::{Auto, CacheView};
use pliant_policy::{Engine, Params, PolicyError, PolicySource};

/// What a decision does to a tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resize {
    /// A new capacity, in the cache's unit; lowering it evicts at once.
    Capacity(u64),
    /// Evict down to this many keys now and leave the capacity alone: the cache takes new keys
    /// again until the next decision trims it (`auto`, whose working set is keys by recency, not a
    /// count to hold between decisions).
    Trim(u64),
}

impl Resize {
    /// The key count it asks for.
    pub fn amount(self) -> u64 {
        match self {
            Self::Capacity(n) | Self::Trim(n) => n,
        }
    }
}

/// One tier's decision maker.
pub enum Decider {
    /// The capacity stays as configured.
    Fixed,
    /// A policy of the engine: its `when` and `howmuch` over the tier's [`CacheView`].
    Lua(Box<Engine>),
    /// Thresholds from regime detection (see [`Auto`]).
    Auto(Box<Auto>),
}

impl Decider {
    /// A Lua policy with its parameters, installed in an engine of its own (in memory: a tier's
    /// policy state lives as long as the tier).
    pub fn lua(source: PolicySource, params: Params) -> Result<Self, PolicyError> {
        let mut e = Engine::in_memory(CacheView::default().metrics(0));
        e.set_params(params);
        e.install(source)?;
        Ok(Self::Lua(Box::new(e)))
    }

    /// The `auto` policy for an `efficiency` objective ([`crate::auto::EFFICIENCY`] by default);
    /// `seed` seeds its k-means.
    pub fn auto(seed: u64, efficiency: f64) -> Self {
        Self::Auto(Box::new(Auto::with_efficiency(seed, efficiency)))
    }

    /// Sees one read (`auto` tracks the keys read and their reuse times).
    #[inline]
    pub fn on_read(&mut self, t: f64, key: u64) {
        if let Self::Auto(a) = self {
            a.on_read(t, key);
        }
    }

    /// Sees a put (`auto` counts it as an access of the key, as LRU order does).
    #[inline]
    pub fn on_put(&mut self, t: f64, key: u64) {
        if let Self::Auto(a) = self {
            a.on_put(t, key);
        }
    }

    /// Sees a read that waited `seconds` for a fetch from above, one it started (`fetched`) or
    /// joined (`auto` prices its misses with them).
    #[inline]
    pub fn on_wait(&mut self, seconds: f64, fetched: bool) {
        if let Self::Auto(a) = self {
            a.on_wait(seconds, fetched);
        }
    }

    /// Sees a read that waited `seconds` for a value its producer put late, because misses
    /// delayed the producer (`auto` counts it as what its misses cost).
    #[inline]
    pub fn on_late_put(&mut self, seconds: f64) {
        if let Self::Auto(a) = self {
            a.on_late_put(seconds);
        }
    }

    /// A decision over the tier's view: a new capacity if it differs from the current one
    /// (fixed sizes, Lua policies), or a trim if the tier holds more than it should (`auto`).
    pub fn decide(&mut self, v: &CacheView) -> Result<Option<Resize>, PolicyError> {
        match self {
            Self::Fixed => Ok(None),
            Self::Lua(e) => {
                v.write_to(e.metrics_mut(), 0);
                Ok(v.new_capacity(&e.decide()?).map(Resize::Capacity))
            }
            Self::Auto(a) => Ok(a.decide(v).filter(|&n| v.keys > n).map(Resize::Trim)),
        }
    }

    /// What `auto` has decided, if it is `auto` and has armed.
    pub fn auto_state(&self) -> Option<AutoState> {
        match self {
            Self::Auto(a) => a.state(),
            _ => None,
        }
    }
}
