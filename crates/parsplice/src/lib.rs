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
//! - [`policy`]: the study's names for its policies (unlimited, static LRU, the two-phase Lua
//!   policy, any Lua policy, `auto`) and the `pliant-tier` decider each becomes;
//! - [`replay`]: a recorded trace replayed on its own clock, and `ps-config.xml`;
//! - [`store`]: state ids and values over the persistent tier (`pliant-store`; fjall on disk in
//!   the demo);
//! - [`study`]: the registry of the study's policies, run side by side (what `pliant demo`
//!   shows);
//! - [`calibration`]: the model's trace beside the real traces (`pliant parsplice calibrate`);
//! - [`measured`]: the measured 8-node policy runs beside the model (`pliant parsplice compare`).
//!
//! Efficiency of a policy at time t is its trajectory at t over the unlimited cache's
//! ([`efficiency`], with trajectories read by [`interpolate`]).
//!
//! Dependencies: `rand`/`rand_pcg` (seeded state process), `foldhash`, `serde`, `thiserror`,
//! `roxmltree` (reads a run's `ps-config.xml`), `flate2` (writes the model's trace gzipped, as
//! the real ones are), `rayon` (a study's policies run in parallel);
//! Pliant's `cache`, `policy`, `store` (the persistent tier), `tier` (a WorkManager's
//! rules for reads and puts, and what its policy sees of it) and `trace` (reads recorded traces)
//! crates.

pub mod calibration;
pub mod hierarchy;
pub mod measured;
mod meter;
pub mod model;
pub mod policy;
pub mod replay;
pub mod store;
pub mod study;
pub mod workload;

pub use hierarchy::{RunReport, RunSpec, Segments, Tick, run};
pub use model::{StoreParams, WorkloadParams};
pub use pliant_tier::AutoState;
pub use policy::PolicyKind;
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
    /// An output file could not be written.
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
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

/// A run's trajectory at `t` from its `(seconds, trajectory)` samples in time order: linear
/// between samples, from `(0, 0)` (a run starts with none) to the first, and the last sample's
/// value after the last. The model's ticks (every 10 s) and a measured run's `times.txt` (every
/// 100 s) are both read this way, so model and measurement are compared alike.
///
/// Linear, not a step, because trajectory is cumulative: it only grows, so between two samples
/// it lies between their values, and the line is exact at every sample and splits the unknown
/// growth in between. A step would put all of that growth at one end: `pliant parsplice
/// compare` used to take the first sample at or after `t`, which credits a run at `t` with
/// trajectory spliced up to 100 s later. At the times `compare` reads (9,000 s and 15,000 s,
/// both sample times of every measured run) the two agree exactly, so no reported number moved.
pub fn interpolate(samples: impl IntoIterator<Item = (f64, f64)>, t: f64) -> f64 {
    let mut prev = (0.0, 0.0);
    for (s, v) in samples {
        if s >= t {
            let f = if s > prev.0 {
                (t - prev.0) / (s - prev.0)
            } else {
                1.0
            };
            return prev.1 + f * (v - prev.1);
        }
        prev = (s, v);
    }
    prev.1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolation_is_linear_between_samples_and_exact_at_them() {
        let s = [(100.0, 1000.0), (200.0, 1500.0), (300.0, 1500.0)];
        let at = |t: f64| interpolate(s, t);
        assert_eq!(at(100.0), 1000.0);
        assert_eq!(at(200.0), 1500.0);
        assert_eq!(at(150.0), 1250.0);
        assert_eq!(at(250.0), 1500.0, "a plateau stays flat");
        assert_eq!(at(50.0), 500.0, "from nothing at t = 0");
        assert_eq!(at(0.0), 0.0);
        assert_eq!(at(1e9), 1500.0, "the last sample holds after the end");
        assert_eq!(interpolate([], 10.0), 0.0);
    }

    /// Between two samples the estimate stays between them: never the later sample's value
    /// before its time.
    #[test]
    fn interpolation_does_not_credit_later_growth() {
        let s = [(100.0, 0.0), (200.0, 100.0)];
        for t in [101.0, 150.0, 199.0] {
            let v = interpolate(s, t);
            assert!(v > 0.0 && v < 100.0, "{t}: {v}");
        }
    }

    #[test]
    fn a_repeated_sample_time_reads_as_its_first_value_there_and_its_last_after() {
        assert_eq!(
            interpolate([(0.0, 0.0), (10.0, 4.0), (10.0, 6.0)], 10.0),
            4.0
        );
        assert_eq!(
            interpolate([(10.0, 4.0), (10.0, 6.0), (20.0, 6.0)], 15.0),
            6.0
        );
    }
}
