//! Seeded synthetic workloads: Zipf(α) and uniform popularity over N keys.

use rand::{RngExt, SeedableRng};
use rand_distr::Distribution;
use rand_pcg::Pcg64Mcg;

use crate::record::{Op, Record};

/// Which popularity distribution.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Popularity {
    /// Zipf with exponent α: key k (1-based rank) has weight 1/k^α.
    Zipf(f64),
    /// Every key equally likely.
    Uniform,
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

/// Streams the workload's requests (all reads). The same workload always gives the same trace.
///
/// # Panics
/// If `keys` is 0, `rate` is 0 or a Zipf exponent is negative or not finite.
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
