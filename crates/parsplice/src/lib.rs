//! ParSplice end to end: a calibrated model of the ParSplice molecular-dynamics workload, the
//! cache hierarchy it runs on simulated in virtual time with a real on-disk store, and the
//! trajectory model that turns cache behaviour into the science's goodness metric.
//!
//! - [`model`]: the fitted constants (trajectory rate, growth, value sizes, store speed);
//! - [`workload`]: the state process (superbasins, new states), independent of timing so every
//!   policy sees the same trajectory;
//! - [`hierarchy`]: workers → WorkManagers (a `pliant-tier` tier and a policy each) → the store,
//!   as a discrete-event simulation: the tier holds the rules for reads and puts, this crate the
//!   time, the workers and the store's speed;
//! - [`policy`]: unlimited, static LRU, the two-phase Lua policy, any Lua policy, and `auto`;
//! - [`replay`]: a recorded trace replayed on its own clock, and `ps-config.xml`;
//! - [`store`]: state ids and values over the persistent tier (`pliant-store`; fjall on disk in
//!   the demo);
//! - [`study`]: the studies' policies run side by side (what `pliant demo` shows).
//!
//! Efficiency of a policy at time t is its trajectory at t over the unlimited cache's.
//!
//! Dependencies: `rand`/`rand_pcg` (seeded state process), `foldhash`, `serde`, `thiserror`,
//! `roxmltree` (reads a run's `ps-config.xml`), `rayon` (a study's policies run in parallel);
//! Pliant's `cache`, `policy`, `regime`, `store` (the persistent tier), `tier` (a WorkManager's
//! rules for reads and puts, and what its policy sees of it) and `trace` (reads recorded traces)
//! crates.

pub mod hierarchy;
pub mod model;
pub mod policy;
pub mod replay;
pub mod store;
pub mod study;
pub mod workload;

pub use hierarchy::{RunReport, RunSpec, Segments, Tick, run};
pub use model::{StoreParams, WorkloadParams};
pub use policy::{AutoChoice, PolicyKind};
pub use replay::{Coverage, Replay, RunConfig, replay_efficiency};
pub use store::{FjallStore, States, Store, StoreError};
pub use workload::{Segment, StateProcess};

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ParspliceError {
    /// Invalid parameters.
    #[error("{0}")]
    Config(String),
    /// The store failed.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// The store holds a key that is not a state id (not 8 bytes).
    #[error("the store holds a key that is not a state id: {0:02x?}")]
    NotAState(Vec<u8>),
    /// A cache could not be built.
    #[error("cache: {0}")]
    Cache(#[from] pliant_cache::AlgorithmError),
    /// A value the store should hold is missing or wrong: data was lost.
    #[error("state {0} is missing from the store or has the wrong size")]
    Lost(u64),
    /// A policy failed.
    #[error("policy: {0}")]
    Policy(#[from] pliant_policy::PolicyError),
    /// Writing output (the generated trace) failed.
    #[error("writing output: {0}")]
    Io(#[source] std::io::Error),
    /// An input file could not be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// An input file says something unusable.
    #[error("{}: {message}", path.display())]
    Input {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The input leaves nothing to compare (no reads, a span shorter than one decision).
    #[error("{0}")]
    Degenerate(String),
    /// A trace could not be read.
    #[error(transparent)]
    Trace(#[from] pliant_trace::TraceError),
}

/// Efficiency of `run` against `baseline` at time `t`: trajectory ratio.
pub fn efficiency(run: &RunReport, baseline: &RunReport, t: f64) -> f64 {
    let b = baseline.trajectory_at(t);
    if b <= 0.0 {
        0.0
    } else {
        run.trajectory_at(t) / b
    }
}
