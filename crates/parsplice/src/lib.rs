//! ParSplice end to end: a calibrated model of the ParSplice molecular-dynamics workload, the
//! cache hierarchy it runs on simulated in virtual time with a real on-disk store, and the
//! trajectory model that turns cache behaviour into the science's goodness metric.
//!
//! - [`model`]: the fitted constants (trajectory rate, growth, value sizes, store speed);
//! - [`workload`]: the state process (superbasins, new states), independent of timing so every
//!   policy sees the same trajectory;
//! - [`hierarchy`]: workers → WorkManager caches (a policy each) → the store, as a discrete-event
//!   simulation;
//! - [`policy`]: unlimited, static LRU, the two-phase Lua policy, any Lua policy, and `auto`;
//! - [`store`]: fjall on disk.
//!
//! Efficiency of a policy at time t is its trajectory at t over the unlimited cache's.
//!
//! Dependencies: `fjall` (the LSM store, pure Rust), `rand`/`rand_pcg` (seeded state process),
//! `foldhash`, `tempfile` (scratch stores), `serde`, `thiserror`; Pliant's `cache`, `policy` and
//! `regime` crates.

pub mod hierarchy;
pub mod model;
pub mod policy;
pub mod store;
pub mod workload;

pub use hierarchy::{RunReport, RunSpec, Segments, Tick, run};
pub use model::{StoreParams, WorkloadParams};
pub use policy::{AutoChoice, PolicyKind};
pub use store::Store;
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
    Store(String),
    /// A value the store should hold is missing or wrong: data was lost.
    #[error("state {0} is missing from the store or has the wrong size")]
    Lost(u64),
    /// A policy failed.
    #[error("policy: {0}")]
    Policy(#[from] pliant_policy::PolicyError),
    /// Writing output failed.
    #[error("{0}")]
    Io(String),
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

/// Segments from a recorded ParSplice trace: each read starts a segment; a put right after it is
/// the state that segment found. Sizes come from the model (traces carry none), from the atoms at
/// that point of the trajectory.
pub fn segments_from_trace(
    records: impl IntoIterator<Item = (bool, u64)>,
    w: &WorkloadParams,
) -> Vec<Segment> {
    let per = model::segment_trajectory(w);
    let mut out: Vec<Segment> = Vec::new();
    let mut sizes: std::collections::HashMap<u64, u32> = std::collections::HashMap::new();
    for (is_read, key) in records {
        let a = model::atoms(out.len() as f64 * per, w);
        let size = *sizes.entry(key).or_insert_with(|| model::value_size(a));
        if is_read {
            out.push(Segment {
                start: key,
                start_size: size,
                new_state: None,
                atoms: a,
            });
        } else if let Some(last) = out.last_mut()
            && last.new_state.is_none()
        {
            last.new_state = Some((key, size));
        }
    }
    out
}
