//! What decides a tier's capacity: nothing (a fixed size), a Lua policy of the engine, or `auto`.
//! The simulator's WorkManagers and the live service hold one each, so a policy decides the same
//! way in both.

use pliant_policy::{Engine, Params, PolicyError, PolicySource};
use pliant_regime::Threshold;

use crate::{Auto, CacheView};

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

    /// The `auto` policy; `seed` seeds its k-means.
    pub fn auto(seed: u64) -> Self {
        Self::Auto(Box::new(Auto::new(seed)))
    }

    /// Sees one read (`auto` tracks the keys read).
    #[inline]
    pub fn on_read(&mut self, t: f64, key: u64) {
        if let Self::Auto(a) = self {
            a.on_read(t, key);
        }
    }

    /// A decision over the tier's view: the new key capacity, if it differs from the current one.
    pub fn decide(&mut self, v: &CacheView) -> Result<Option<u64>, PolicyError> {
        match self {
            Self::Fixed => Ok(None),
            Self::Lua(e) => {
                v.write_to(e.metrics_mut(), 0);
                Ok(v.new_capacity(&e.decide()?))
            }
            Self::Auto(a) => Ok(a.decide(v).and_then(|n| v.resize_to(n))),
        }
    }

    /// The threshold `auto` armed at, if it is `auto` and has armed.
    pub fn auto_threshold(&self) -> Option<Threshold> {
        match self {
            Self::Auto(a) => a.threshold(),
            _ => None,
        }
    }
}
