//! Seeded synthetic workloads: Zipf(α) and uniform popularity over N keys.

use rand::{RngExt, SeedableRng};
use rand_distr::Distribution;
use rand_pcg::Pcg64Mcg;

use std::path::Path;

use crate::TraceError;
use crate::convert::{fill_next_access, write_oracle_general};
use crate::record::{Op, Record};

/// Which popularity distribution.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Popularity {
    /// Zipf with exponent α: key k (1-based rank) has weight 1/k^α.
    Zipf(f64),
    /// Every key equally likely.
    Uniform,
}

impl Popularity {
    /// The popularity a user names: `zipf` with exponent `alpha`, or `uniform` (which ignores it).
    pub fn named(dist: &str, alpha: f64) -> Result<Self, TraceError> {
        match dist {
            "zipf" => Ok(Self::Zipf(alpha)),
            "uniform" => Ok(Self::Uniform),
            other => Err(TraceError::Options(format!(
                "distribution {other:?}: expected zipf or uniform"
            ))),
        }
    }
}

/// A workload description.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Workload {
    /// Popularity.
    pub popularity: Popularity,
    /// Number of distinct keys (ids 1..=keys, id 1 the most popular).
    pub keys: u64,
    /// Number of requests.
    pub requests: u64,
    /// Object size in bytes.
    pub size: u32,
    /// Requests per second of trace time (sets timestamps).
    pub rate: u64,
    /// RNG seed.
    pub seed: u64,
}

impl Workload {
    /// Whether [`generate`] can make this workload: the error names the field that is wrong.
    pub fn validate(&self) -> Result<(), TraceError> {
        if let Popularity::Zipf(a) = self.popularity
            && !(a.is_finite() && a >= 0.0)
        {
            return Err(TraceError::Options(format!(
                "alpha {a}: the Zipf exponent must be a non-negative number"
            )));
        }
        if self.keys == 0 {
            return Err(TraceError::Options("keys must be at least 1".into()));
        }
        if self.rate == 0 {
            return Err(TraceError::Options(
                "rate must be at least 1 request per second".into(),
            ));
        }
        Ok(())
    }
}

/// Writes the workload as an oracleGeneral trace with next-access times (what Belady's MIN
/// needs) to `path`, gzipped if it ends in `.gz`; returns the records written. The workload is
/// checked first ([`Workload::validate`]).
pub fn write_workload(path: &Path, w: Workload) -> Result<u64, TraceError> {
    w.validate()?;
    let mut recs: Vec<Record> = generate(w).collect();
    fill_next_access(&mut recs);
    write_oracle_general(path, &recs)?;
    Ok(recs.len() as u64)
}

/// Streams the workload's requests (all reads). The same workload always gives the same trace.
///
/// # Panics
/// If the workload is not valid ([`Workload::validate`]).
pub fn generate(w: Workload) -> impl Iterator<Item = Record> + Send {
    assert!(w.keys > 0 && w.rate > 0, "workload needs keys and a rate");
    let mut rng = Pcg64Mcg::seed_from_u64(w.seed);
    let zipf = match w.popularity {
        Popularity::Zipf(a) => {
            Some(rand_distr::Zipf::new(w.keys as f64, a).expect("valid Zipf exponent"))
        }
        Popularity::Uniform => None,
    };
    (0..w.requests).map(move |i| {
        let key = match &zipf {
            Some(z) => z.sample(&mut rng) as u64,
            None => rng.random_range(1..=w.keys),
        };
        Record {
            time: i / w.rate,
            key,
            size: w.size,
            op: Op::Get,
            next_access: -1,
        }
    })
}
