//! The control plane's settings, apart from the code that runs them: what `pliant serve
//! --balancer` (or its TOML file) resolves to, read by `pliant-kv`'s `Config`.

use std::time::Duration;

use pliant_policy::{Params, PolicySource};

/// Time between decisions by default: Ceph's `mds_bal_interval`, the interval Mantle's
/// balancers decide at.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);

/// A balancer to run.
#[derive(Debug, Clone)]
pub struct BalancerConfig {
    /// The policy `--balancer` names, set in the coordination store if it holds none (every
    /// node runs the store's policy; without one, a node waits for `PLIANT.BALANCER LOAD`).
    pub source: Option<PolicySource>,
    /// Its parameters (`params.*`).
    pub params: Params,
    /// Time between decisions.
    pub interval: Duration,
    /// Intervals over which a slot's load is measured to pick the slots to move (since this
    /// node's slots last changed, at most this many): see [`DEFAULT_SLOT_WINDOW`].
    pub slot_window: usize,
}

/// Intervals a slot's load is measured over by default. A node's load is a sum over thousands
/// of slots and one interval measures it well; a slot sees few commands per interval, and
/// picking the hottest by a short count picks some that were busy by chance (in
/// `tools/bench/balancer.sh` moves carried about three quarters of the load they were picked
/// for). A longer window lowers that noise; a shorter one follows a workload that shifts between
/// slots sooner. A choice, not a derivation, and one that measured no difference there against
/// 1, because the history restarts whenever the node's slots change, which there was every 3-4
/// intervals (README, "The balancer on a skewed cluster").
pub const DEFAULT_SLOT_WINDOW: usize = 10;
