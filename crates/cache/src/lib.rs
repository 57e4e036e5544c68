//! Pliant's cache core: eviction algorithms behind one trait, and a [`Cache`] that drives them
//! with capacity in bytes or keys, per-operation eviction, run-time resize and counters.
//!
//! Each algorithm lives in its own module and states, in its module doc, every decision that
//! decides a miss count (objects larger than the cache, sizes on a hit, tie-breaking, ghosts).
//! For LRU, FIFO, CLOCK, LFU, ARC, SIEVE, S3-FIFO and Belady those decisions are libCacheSim's,
//! and the golden tests check identical miss counts against libCacheSim itself
//! (`tests/golden.rs`, goldens produced by `tools/golden/make_goldens.py`).
//!
//! Algorithms are registered by name ([`ALGORITHMS`], [`build`]); S3-FIFO takes parameters as
//! `s3fifo:small=0.1,threshold=2`.
//!
//! Dependencies: `foldhash` for the key index (fast on integer keys, fixed seed so runs are
//! deterministic); `thiserror` for the typed error.

pub mod arc;
pub mod belady;
mod cache;
pub mod clock;
mod core;
pub mod fifo;
pub mod lfu;
mod list;
pub mod lru;
mod policy;
pub mod s3fifo;
pub mod sieve;
pub mod wtinylfu;

pub use cache::{Cache, Capacity, PutOutcome, Stats};
pub use policy::{Evicted, NO_NEXT_ACCESS, Policy, Request, Units};

/// Registered algorithm names.
pub const ALGORITHMS: [&str; 9] = [
    "lru", "fifo", "clock", "lfu", "arc", "sieve", "s3fifo", "wtinylfu", "belady",
];

/// An algorithm name (or its parameters) that is not understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AlgorithmError {
    /// No algorithm of that name.
    #[error("unknown algorithm {name:?}; known: {}", ALGORITHMS.join(", "))]
    Unknown {
        /// The name given.
        name: String,
    },
    /// A parameter is malformed or not supported by the algorithm.
    #[error("algorithm {algorithm}: bad parameter {param:?} ({reason})")]
    Param {
        /// The algorithm.
        algorithm: String,
        /// The parameter as given.
        param: String,
        /// What is wrong.
        reason: String,
    },
}

/// Builds the algorithm `spec` (a name from [`ALGORITHMS`], optionally `name:key=value,...`)
/// for `capacity`.
pub fn build(spec: &str, capacity: Capacity) -> Result<Box<dyn Policy>, AlgorithmError> {
    let (name, params) = spec.split_once(':').unwrap_or((spec, ""));
    let name = name.trim().to_ascii_lowercase();
    let (cap, units) = (capacity.amount(), capacity.units());
    let no_params = || {
        if params.is_empty() {
            Ok(())
        } else {
            Err(AlgorithmError::Param {
                algorithm: name.clone(),
                param: params.to_string(),
                reason: "this algorithm takes no parameters".into(),
            })
        }
    };
    Ok(match name.as_str() {
        "lru" => no_params().map(|_| Box::new(lru::Lru::new(cap, units)) as Box<dyn Policy>)?,
        "fifo" => no_params().map(|_| Box::new(fifo::Fifo::new(cap, units)) as Box<dyn Policy>)?,
        "clock" => {
            no_params().map(|_| Box::new(clock::Clock::new(cap, units)) as Box<dyn Policy>)?
        }
        "lfu" => no_params().map(|_| Box::new(lfu::Lfu::new(cap, units)) as Box<dyn Policy>)?,
        "arc" => no_params().map(|_| Box::new(arc::Arc::new(cap, units)) as Box<dyn Policy>)?,
        "sieve" => {
            no_params().map(|_| Box::new(sieve::Sieve::new(cap, units)) as Box<dyn Policy>)?
        }
        "wtinylfu" | "w-tinylfu" => {
            no_params().map(|_| Box::new(wtinylfu::WTinyLfu::new(cap, units)) as Box<dyn Policy>)?
        }
        "belady" | "min" => {
            no_params().map(|_| Box::new(belady::Belady::new(cap, units)) as Box<dyn Policy>)?
        }
        "s3fifo" | "s3-fifo" => {
            let (mut small, mut threshold) = (0.1, 2);
            for kv in params.split(',').filter(|s| !s.trim().is_empty()) {
                let bad = |reason: &str| AlgorithmError::Param {
                    algorithm: "s3fifo".into(),
                    param: kv.to_string(),
                    reason: reason.into(),
                };
                match kv.split_once('=').map(|(k, v)| (k.trim(), v.trim())) {
                    Some(("small", v)) => {
                        small = v
                            .parse::<f64>()
                            .ok()
                            .filter(|x| *x > 0.0 && *x < 1.0)
                            .ok_or_else(|| bad("small must be a ratio in (0, 1)"))?;
                    }
                    Some(("threshold", v)) => {
                        threshold = v
                            .parse::<u32>()
                            .ok()
                            .filter(|x| *x >= 1)
                            .ok_or_else(|| bad("threshold must be an integer ≥ 1"))?;
                    }
                    _ => return Err(bad("expected small=RATIO or threshold=N")),
                }
            }
            Box::new(s3fifo::S3Fifo::with_params(cap, units, small, threshold))
        }
        _ => return Err(AlgorithmError::Unknown { name }),
    })
}

/// A [`Cache`] running algorithm `spec` at `capacity`.
pub fn cache(spec: &str, capacity: Capacity) -> Result<Cache, AlgorithmError> {
    Ok(Cache::new(build(spec, capacity)?, capacity))
}
