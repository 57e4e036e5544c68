//! Pliant's elastic rescaling planner: commission and decommission servers of a data service by
//! moving buckets so that load balance, data balance and transfer time are all good, with no data
//! lost. After Pufferscale (Cheriere et al., CCGrid 2020), whose code is not public; built from the
//! paper.
//!
//! - [`model`]: servers, buckets, objectives `L_max`, `D_max`, `T_max`, the paper's targets, and
//!   validation of any placement;
//! - [`heuristic`]: the Pufferscale heuristic, streaming moves as it decides them; for hash slots
//!   ([`PlanOptions::slots`]) it also balances every server's bucket count, the load its next
//!   keys will bring, and moves runs of slots together (the module doc says how);
//! - [`exact`] (cargo feature `exact`): a mixed-integer model of the same problem for small
//!   instances (the baseline), and the heuristic-versus-optimum comparison;
//! - [`candidates`]: how often evaluating only the `k` least-penalised servers changes a plan
//!   against evaluating every server, and by how much;
//! - [`emulate`]: the paper's emulation at scale, every scenario and strategy in parallel, and
//!   planning time as the cluster grows (`pliant bench scale`).
//!
//! Dependencies: `good_lp` with HiGHS for the exact baseline, only with the `exact` feature:
//! HiGHS is built from source with cmake and its bindings are generated with bindgen, which needs
//! libclang, so the default build (and `pliant demo`) must not pull it in; `rayon` runs the
//! comparison's instances in parallel; `rand`, `rand_distr`, `rand_pcg` for seeded emulation;
//! `serde` and `serde_json` for cluster files and results; `thiserror`.

pub mod candidates;
pub mod emulate;
#[cfg(feature = "exact")]
pub mod exact;
pub mod heuristic;
pub mod model;

pub use heuristic::{PlanOptions, Strategy, Weights, plan};
pub use model::{
    Bucket, Cluster, Move, Outcome, Placement, PlanError, Rescale, ServerId, Targets, TransferModel,
};
