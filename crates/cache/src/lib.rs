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
//! `s3fifo:small=0.1,threshold=2`. A [`Capacity`] parses from what users write (`128MiB`,
//! `1GB`, `1000keys`, `unlimited`), for the CLI and services alike.
//!
//! Dependencies: `foldhash` for the key index (fast on integer keys, fixed seed so runs are
//! deterministic); `thiserror` for the typed error.

mod algorithm;
pub mod arc;
pub mod belady;
mod cache;
pub mod clock;
mod core;
pub mod fifo;
pub mod lfu;
mod list;
pub mod lru;
pub mod s3fifo;
pub mod sieve;
pub mod wtinylfu;

pub use algorithm::{Algorithm, Evicted, NO_NEXT_ACCESS, Request, Units};
pub use cache::{Cache, Capacity, CapacityError, PutOutcome, Stats};

/// One registered algorithm: everything the CLI, the README's table and the tests know of it.
#[derive(Debug, Clone, Copy)]
pub struct AlgorithmInfo {
    /// The name `--algo` takes.
    pub name: &'static str,
    /// Other names accepted for it.
    pub aliases: &'static [&'static str],
    /// What it is, in a few words.
    pub summary: &'static str,
    /// The parameters it takes after a colon (`s3fifo:small=0.2`); empty if none.
    pub params: &'static str,
    /// Whether it reads each request's next-access time (an offline algorithm): only traces
    /// that carry them (oracleGeneral) can drive it.
    pub needs_next_access: bool,
    make: Make,
}

/// A built algorithm, or why its parameters were refused.
type Built = Result<Box<dyn Algorithm>, AlgorithmError>;

#[derive(Debug, Clone, Copy)]
enum Make {
    Plain(fn(u64, Units) -> Box<dyn Algorithm>),
    WithParams(fn(u64, Units, &str) -> Built),
}

/// Every algorithm, in the order tables list them. Adding one is adding its module and an entry
/// here: [`build`], the CLI's help, the tests that run every algorithm and the check of the
/// README's table (`tests/api.rs`) all follow from this list.
pub const ALGORITHMS: &[AlgorithmInfo] = &[
    plain("lru", &[], "least recently used", |c, u| {
        Box::new(lru::Lru::new(c, u))
    }),
    plain("fifo", &[], "first in, first out", |c, u| {
        Box::new(fifo::Fifo::new(c, u))
    }),
    plain("clock", &[], "CLOCK with one reference bit", |c, u| {
        Box::new(clock::Clock::new(c, u))
    }),
    plain(
        "lfu",
        &[],
        "least frequently used, FIFO among equals",
        |c, u| Box::new(lfu::Lfu::new(c, u)),
    ),
    plain("arc", &[], "adaptive replacement cache", |c, u| {
        Box::new(arc::Arc::new(c, u))
    }),
    plain("sieve", &[], "SIEVE", |c, u| {
        Box::new(sieve::Sieve::new(c, u))
    }),
    AlgorithmInfo {
        name: "s3fifo",
        aliases: &["s3-fifo"],
        summary: "S3-FIFO: small, main and ghost FIFO queues",
        params: "small=RATIO in (0, 1), default 0.1; threshold=N ≥ 1, default 2",
        needs_next_access: false,
        make: Make::WithParams(s3fifo_with),
    },
    plain(
        "wtinylfu",
        &["w-tinylfu"],
        "W-TinyLFU: 1% LRU window, SLRU main, count-min sketch",
        |c, u| Box::new(wtinylfu::WTinyLfu::new(c, u)),
    ),
    AlgorithmInfo {
        needs_next_access: true,
        ..plain(
            "belady",
            &["min"],
            "Belady's MIN, the offline optimum (needs next-access times)",
            |c, u| Box::new(belady::Belady::new(c, u)),
        )
    },
];

const fn plain(
    name: &'static str,
    aliases: &'static [&'static str],
    summary: &'static str,
    new: fn(u64, Units) -> Box<dyn Algorithm>,
) -> AlgorithmInfo {
    AlgorithmInfo {
        name,
        aliases,
        summary,
        params: "",
        needs_next_access: false,
        make: Make::Plain(new),
    }
}

/// The registered algorithm called `name` (or one of its aliases), case-insensitively; `name` may
/// be a whole spec as [`build`] takes it (`s3fifo:small=0.2`), whose parameters are ignored here.
pub fn algorithm(name: &str) -> Option<&'static AlgorithmInfo> {
    let name = name.split_once(':').map_or(name, |(n, _)| n).trim();
    ALGORITHMS.iter().find(|a| {
        a.name.eq_ignore_ascii_case(name) || a.aliases.iter().any(|x| x.eq_ignore_ascii_case(name))
    })
}

/// The registered names, comma-separated (for help texts and errors).
pub fn algorithm_names() -> String {
    ALGORITHMS
        .iter()
        .map(|a| a.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// An algorithm name (or its parameters) that is not understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AlgorithmError {
    /// No algorithm of that name.
    #[error("unknown algorithm {name:?}; known: {}", algorithm_names())]
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
pub fn build(spec: &str, capacity: Capacity) -> Built {
    let (name, params) = spec.split_once(':').unwrap_or((spec, ""));
    let info = algorithm(name).ok_or_else(|| AlgorithmError::Unknown {
        name: name.trim().to_ascii_lowercase(),
    })?;
    let (cap, units) = (capacity.amount(), capacity.units());
    match info.make {
        Make::WithParams(make) => make(cap, units, params),
        Make::Plain(_) if !params.is_empty() => Err(AlgorithmError::Param {
            algorithm: info.name.into(),
            param: params.to_string(),
            reason: "this algorithm takes no parameters".into(),
        }),
        Make::Plain(new) => Ok(new(cap, units)),
    }
}

/// S3-FIFO with `small=RATIO,threshold=N` parameters (each optional).
fn s3fifo_with(cap: u64, units: Units, params: &str) -> Built {
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
    Ok(Box::new(s3fifo::S3Fifo::with_params(
        cap, units, small, threshold,
    )))
}

/// A [`Cache`] running algorithm `spec` at `capacity`.
pub fn cache(spec: &str, capacity: Capacity) -> Result<Cache, AlgorithmError> {
    Ok(Cache::new(build(spec, capacity)?, capacity))
}
