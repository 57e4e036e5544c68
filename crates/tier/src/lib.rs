//! A cache tier run by a policy: the rules of one tier of a cache hierarchy, and the one contract
//! between a cache and the policy engine.
//!
//! - [`Tier`] (module `tier`): a cache with the hierarchy's rules as pure operations (a read
//!   hits, joins a fetch in flight or misses; the tier keeps what it fetched; a put is forwarded
//!   up once, a redundant one not at all), the fetches in flight, the counters, and the view its
//!   policy decides on. The ParSplice simulator runs it in virtual time, and the service will run
//!   it on real requests: neither has rules of its own.
//! - [`CacheView`] (module `view`): every place a policy sizes a cache (the trace simulator, the
//!   ParSplice hierarchy, and next the live service) reports the cache to its policy through it
//!   and turns the policy's decision into a new capacity through [`CacheView::new_capacity`], so
//!   a policy sees the same names with the same meaning everywhere: one written against
//!   `pliant sim` runs unchanged in `pliant demo`. [`METRICS`] lists them, Ceph Mantle's among
//!   them.
//! - [`Decider`] (module `decider`): what decides a tier's capacity, a Lua policy of the engine
//!   or [`Auto`] (module `auto`: absorbs until regime detection says the opening is over, then keeps the working set an efficiency objective needs), the same in the simulator and
//!   the service; [`sample_environment`] is a cluster of such caches to dry-run a policy in.
//!
//! No I/O, no clock and no model of time: callers go up the hierarchy themselves and pass the
//! time in (see the `tier` module on why a fetch in flight is a token of the caller's type).
//!
//! Dependencies: Pliant's `cache` crate (the [`Cache`](pliant_cache::Cache) a tier holds) and
//! `policy` crate (the [`Metrics`](pliant_policy::Metrics) a view fills, the
//! [`Decision`](pliant_policy::Decision) it reads, the engine a [`Decider`] runs) and `regime`
//! crate (`auto`'s regime gate); `foldhash` (the in-flight table and `auto`'s live keys are looked up
//! on every read); `serde` (what `auto` decided goes into reports).

pub mod auto;
mod decider;
mod sample;
mod tier;
mod view;

pub use auto::{Auto, AutoState, Fit, Fitted};
pub use decider::{Decider, Resize};
pub use sample::{SAMPLE_SERVERS, sample_environment};
pub use tier::{Counters, InFlight, Put, Read, Tier};
pub use view::{CacheView, METRICS, MetricInfo};
