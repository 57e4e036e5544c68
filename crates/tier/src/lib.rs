//! A cache tier run by a policy: the one contract between a cache and the policy engine.
//!
//! Every place a policy sizes a cache (the trace simulator, the ParSplice hierarchy, and next the
//! live service) reports the cache to its policy through [`CacheView`] and turns the policy's
//! decision into a new capacity through [`CacheView::new_capacity`], so a policy sees the same
//! names with the same meaning everywhere: one written against `pliant sim` runs unchanged in
//! `pliant demo`. [`METRICS`] lists them, Ceph Mantle's among them.
//!
//! Dependencies: Pliant's `policy` crate (the [`Metrics`](pliant_policy::Metrics) a view fills
//! and the [`Decision`](pliant_policy::Decision) it reads). No I/O.

mod view;

pub use view::{CacheView, METRICS, MetricInfo};
