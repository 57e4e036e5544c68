//! Pliant's simulator: replays a trace through many cache configurations in one pass, optionally
//! with a policy from the policy engine resizing each cache as the trace goes on.
//!
//! Semantics: a read is libCacheSim's `get` (a miss admits the object); a write stores the object
//! (a redundant put of a held key with the same size changes nothing) and is not a lookup; a
//! delete removes the key. Miss ratios are over reads. For traces without operations
//! (oracleGeneral) every record is a read, so miss counts equal libCacheSim's.
//!
//! Configurations run in parallel (rayon), each on its own cache. Policies are Lua states and
//! stay on the calling thread: batches of records are cut at decision boundaries, the caches
//! process a batch in parallel, then each policy decides over its cache's fresh metrics, which
//! `pliant-tier`'s [`CacheView`](pliant_tier::CacheView) defines (the same as everywhere else a
//! policy sizes a cache).
//!
//! [`bench`](mod@bench) is the replay-speed benchmark (`pliant bench sim`).
//!
//! Dependencies: `rayon` for parallel configurations; `foldhash` numbers keys for the policies'
//! time series; `serde` serialises results.

pub mod bench;
mod replay;

pub use replay::{
    Config, IntervalStats, PolicySpec, RunResult, SimError, SimOptions, replay, replay_file,
};
