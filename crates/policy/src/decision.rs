//! Typed decisions: what a policy told the service to do.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::env::ServerId;

/// Where to send load: server id → amount, only the servers that receive something.
pub type Targets = BTreeMap<ServerId, f64>;

/// `howmuch`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum HowMuch {
    /// A number (keys to keep, load to move, ...), as the policy defines it.
    Amount(f64),
    /// A table, e.g. Mantle's list of strategies `{"half", "small_first"}`, as JSON.
    Table(serde_json::Value),
}

impl HowMuch {
    /// The amount, if `howmuch` returned a number.
    pub fn amount(&self) -> Option<f64> {
        match self {
            Self::Amount(x) => Some(*x),
            Self::Table(_) => None,
        }
    }
}

/// One complete decision.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// The policy version that decided.
    pub version: u64,
    /// This server's load after `load` ran, if known.
    pub load: Option<f64>,
    /// Whether to act.
    pub when: bool,
    /// Where to send load; `None` unless `when` was true.
    #[serde(rename = "where")]
    pub where_: Option<Targets>,
    /// How much; `None` unless `when` was true and `howmuch` returned something.
    pub howmuch: Option<HowMuch>,
    /// VM instructions used by all callbacks of this decision (counted in blocks of 1,000).
    pub instructions: u64,
    /// Wall time of the decision, including the environment refresh, in microseconds.
    pub micros: f64,
}
