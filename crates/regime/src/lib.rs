//! Regime detection for key-value workloads (the ParSplice cache studies): find the phases of a
//! run so that cache thresholds come from the data rather than from hand tuning.
//!
//! - [`kmeans_regimes`]: k-means over normalised `(time, reads/s)` points; each cluster is a
//!   regime, ordered by start time. The studies found k = 4 on ParSplice runs and used the start
//!   of the third regime as the point where the cache can be trimmed.
//! - [`fans`]: the "fan" detector over `(timestamp, key id)` accesses, with ids numbered in order
//!   of first appearance; the same algorithm as the shipped `regime-fan` Lua policy.
//! - [`Regimes::threshold`]: the studies' cache threshold, the keys held when the third regime
//!   began; [`analyse`] runs all three over one run.
//! - [`cluster`]: regimes by behaviour features alone (no clock), k (one included) chosen by the
//!   gap statistic: what `auto` arms on (see [`behaviour`]).
//!
//! Dependencies: `linfa` / `linfa-clustering` (k-means), `ndarray` (its data type),
//! `rand_xoshiro` 0.6 (the RNG type linfa takes, seeded here), `serde`, `thiserror`.

use linfa::prelude::*;
use linfa_clustering::KMeans;
use ndarray::Array2;
use rand_xoshiro_linfa::Xoshiro256Plus;
use rand_xoshiro_linfa::rand_core::SeedableRng;
use serde::Serialize;

pub mod behaviour;
pub use behaviour::{Clusters, cluster};

/// Why regimes could not be found.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegimeError {
    /// Fewer points than clusters.
    #[error("need at least {k} points for k = {k}, got {points}")]
    TooFewPoints {
        /// Clusters asked for.
        k: usize,
        /// Points given.
        points: usize,
    },
    /// k must be at least 1.
    #[error("k must be at least 1")]
    ZeroK,
    /// The clustering library failed.
    #[error("k-means: {0}")]
    KMeans(#[from] linfa_clustering::KMeansError),
}

/// One regime found by k-means.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Regime {
    /// 0-based, in order of start time.
    pub index: usize,
    /// First point's time.
    pub start: f64,
    /// Last point's time.
    pub end: f64,
    /// Mean rate of its points.
    pub mean_rate: f64,
    /// Points in it.
    pub points: usize,
    /// Centroid in the original units `(time, rate)`.
    pub centroid: (f64, f64),
}

/// The regimes of a rate series, and which regime each point belongs to.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Regimes {
    /// Regimes by start time.
    pub regimes: Vec<Regime>,
    /// Regime index of each input point.
    pub labels: Vec<usize>,
}

/// The regime at whose start the studies trim the cache: the third (0-based 2), after the
/// opening flash crowd and its decline.
pub const THRESHOLD_REGIME: usize = 2;

/// A cache threshold read off a run's regimes.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Threshold {
    /// When the third regime began, seconds.
    pub start: f64,
    /// Keys held then.
    pub keys: u64,
}

impl Regimes {
    /// Start of regime `i` (0-based), if found.
    pub fn start_of(&self, i: usize) -> Option<f64> {
        self.regimes.get(i).map(|r| r.start)
    }

    /// The studies' threshold: the keys held when the third regime began. `keys_held` is
    /// `(time, keys held)` in time order, sampled at least at the clustered points' times; the
    /// first sample at or after the regime's start counts, so a sample taken with the regime's
    /// first point is the one used. `None` with fewer than three regimes, or no sample that late.
    pub fn threshold(&self, keys_held: &[(f64, u64)]) -> Option<Threshold> {
        let start = self.start_of(THRESHOLD_REGIME)?;
        keys_held
            .iter()
            .find(|(t, _)| *t >= start)
            .map(|&(_, keys)| Threshold { start, keys })
    }
}

/// Clusters `(time, rate)` points into `k` regimes. Both coordinates are scaled to [0, 1] first so
/// that neither unit dominates; the result is deterministic for a seed.
pub fn kmeans_regimes(points: &[(f64, f64)], k: usize, seed: u64) -> Result<Regimes, RegimeError> {
    if k == 0 {
        return Err(RegimeError::ZeroK);
    }
    if points.len() < k {
        return Err(RegimeError::TooFewPoints {
            k,
            points: points.len(),
        });
    }
    let range = |f: fn(&(f64, f64)) -> f64| {
        let lo = points.iter().map(f).fold(f64::INFINITY, f64::min);
        let hi = points.iter().map(f).fold(f64::NEG_INFINITY, f64::max);
        (lo, if hi > lo { hi - lo } else { 1.0 })
    };
    let (t0, tw) = range(|p| p.0);
    let (r0, rw) = range(|p| p.1);
    let mut data = Array2::<f64>::zeros((points.len(), 2));
    for (i, (t, r)) in points.iter().enumerate() {
        data[[i, 0]] = (t - t0) / tw;
        data[[i, 1]] = (r - r0) / rw;
    }
    let dataset = DatasetBase::from(data);
    let model = KMeans::params_with_rng(k, Xoshiro256Plus::seed_from_u64(seed))
        .n_runs(10)
        .max_n_iterations(300)
        .tolerance(1e-6)
        .fit(&dataset)?;
    let raw: Vec<usize> = model.predict(&dataset).to_vec();

    // Order clusters by the time of their first point; empty clusters are dropped.
    let mut firsts: Vec<(f64, usize)> = (0..k)
        .filter_map(|c| {
            points
                .iter()
                .zip(&raw)
                .filter(|(_, l)| **l == c)
                .map(|(p, _)| p.0)
                .reduce(f64::min)
                .map(|t| (t, c))
        })
        .collect();
    firsts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let rank = |c: usize| firsts.iter().position(|(_, x)| *x == c).unwrap_or(0);
    let labels: Vec<usize> = raw.iter().map(|&c| rank(c)).collect();
    let centroids = model.centroids();
    let regimes = firsts
        .iter()
        .enumerate()
        .map(|(index, &(_, c))| {
            let mine: Vec<&(f64, f64)> = points
                .iter()
                .zip(&raw)
                .filter(|(_, l)| **l == c)
                .map(|(p, _)| p)
                .collect();
            Regime {
                index,
                start: mine.iter().map(|p| p.0).fold(f64::INFINITY, f64::min),
                end: mine.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max),
                mean_rate: mine.iter().map(|p| p.1).sum::<f64>() / mine.len() as f64,
                points: mine.len(),
                centroid: (t0 + centroids[[c, 0]] * tw, r0 + centroids[[c, 1]] * rw),
            }
        })
        .collect();
    Ok(Regimes { regimes, labels })
}

/// A regime found by the fan detector: a range of key ids.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct FanRegime {
    /// Lowest id.
    pub lo: u64,
    /// Highest id.
    pub hi: u64,
}

impl FanRegime {
    /// Ids it spans (`hi - lo + 1`).
    pub fn span(&self) -> u64 {
        self.hi - self.lo + 1
    }
}

/// The fan detector over `(timestamp, key id)` points in time order (ids numbered by first
/// appearance). Walking from the newest point to the oldest, a new fan starts whenever an id drops
/// below the current fan's bottom; a fan's top is its largest id; a fan whose top lies below the
/// previous (newer) fan's bottom starts a new regime. Returns regimes newest first.
///
/// The same algorithm as `policies/regime-fan.lua`; `tests/fan.rs` checks they agree.
pub fn fans(points: &[(f64, u64)]) -> Vec<FanRegime> {
    let mut found = Vec::new();
    let mut iter = points.iter().rev().map(|p| p.1);
    let Some(first) = iter.next() else {
        return found;
    };
    let (mut fb, mut ft) = (first, first);
    let mut cur: Option<FanRegime> = None;
    let mut prev_bottom: Option<u64> = None;
    let mut close = |fb: u64, ft: u64, cur: &mut Option<FanRegime>, found: &mut Vec<FanRegime>| {
        if prev_bottom.is_some_and(|pb| ft < pb) {
            found.extend(cur.take());
        }
        *cur = Some(match *cur {
            None => FanRegime { lo: fb, hi: ft },
            Some(r) => FanRegime {
                lo: r.lo.min(fb),
                hi: r.hi.max(ft),
            },
        });
        prev_bottom = Some(fb);
    };
    for id in iter {
        if id < fb {
            close(fb, ft, &mut cur, &mut found);
            (fb, ft) = (id, id);
        } else if id > ft {
            ft = id;
        }
    }
    close(fb, ft, &mut cur, &mut found);
    found.extend(cur);
    found
}

/// Total id span of fan regimes: the keys they need cached (`regime-fan`'s `howmuch`).
pub fn fan_span(regimes: &[FanRegime]) -> u64 {
    regimes.iter().map(FanRegime::span).sum()
}

/// What regime detection finds in one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Analysis {
    /// k-means regimes of the read rate.
    pub regimes: Regimes,
    /// The studies' threshold, when there are at least three regimes.
    pub threshold: Option<Threshold>,
    /// Fan regimes of the accesses, newest first.
    pub fans: Vec<FanRegime>,
}

/// Regimes of a run: k-means (`k`, `seed`) over `rates` (`(time, reads/s)`), the threshold from
/// `keys_held` (see [`Regimes::threshold`]), and the fan detector over `accesses`
/// (`(time, key id)`, ids by first appearance).
pub fn analyse(
    rates: &[(f64, f64)],
    keys_held: &[(f64, u64)],
    accesses: &[(f64, u64)],
    k: usize,
    seed: u64,
) -> Result<Analysis, RegimeError> {
    let regimes = kmeans_regimes(rates, k, seed)?;
    Ok(Analysis {
        threshold: regimes.threshold(keys_held),
        fans: fans(accesses),
        regimes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regimes(starts: &[f64]) -> Regimes {
        Regimes {
            regimes: starts
                .iter()
                .enumerate()
                .map(|(index, &start)| Regime {
                    index,
                    start,
                    end: start + 5.0,
                    mean_rate: 1.0,
                    points: 1,
                    centroid: (start, 1.0),
                })
                .collect(),
            labels: Vec::new(),
        }
    }

    #[test]
    fn threshold_is_the_keys_held_when_the_third_regime_began() {
        let held = [(0.0, 5), (10.0, 9), (20.0, 14), (30.0, 20), (40.0, 21)];
        let t = regimes(&[0.0, 10.0, 30.0, 40.0]).threshold(&held);
        assert_eq!(
            t,
            Some(Threshold {
                start: 30.0,
                keys: 20
            })
        );
        // Sampled less often than the points: the first sample after the start.
        let t = regimes(&[0.0, 10.0, 25.0]).threshold(&held);
        assert_eq!(
            t,
            Some(Threshold {
                start: 25.0,
                keys: 20
            })
        );
    }

    #[test]
    fn no_threshold_without_a_third_regime_or_a_late_enough_sample() {
        let held = [(0.0, 5), (10.0, 9)];
        assert_eq!(regimes(&[0.0, 10.0]).threshold(&held), None);
        assert_eq!(regimes(&[0.0, 5.0, 50.0]).threshold(&held), None);
        assert_eq!(regimes(&[0.0, 5.0, 8.0]).threshold(&[]), None);
    }

    /// A run in four phases (flash crowd, decline, plateau, tail) whose keys grow by one per
    /// 10-s point and whose reads sweep through a new basin of ids every 100 points.
    #[test]
    fn analyse_puts_the_threshold_at_the_plateaus_start() {
        let (mut rates, mut held, mut accesses) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..400u64 {
            let t = i as f64 * 10.0;
            let rate = match i {
                0..=49 => 600.0 + (i % 7) as f64,
                50..=149 => 300.0 - (i - 50) as f64 * 2.0,
                150..=299 => 100.0 + (i % 5) as f64,
                _ => 40.0 + (i % 3) as f64,
            };
            rates.push((t, rate));
            held.push((t, 1000 + i));
            accesses.push((t, (i / 100) * 100 + 99 - i % 100));
        }
        let a = analyse(&rates, &held, &accesses, 4, 7).expect("analyse");
        assert_eq!(a.regimes, kmeans_regimes(&rates, 4, 7).expect("kmeans"));
        let start = a
            .regimes
            .start_of(THRESHOLD_REGIME)
            .expect("a third regime");
        assert!(
            (1000.0..=2000.0).contains(&start),
            "plateau from 1,500 s: {start}"
        );
        assert_eq!(
            a.threshold,
            Some(Threshold {
                start,
                keys: 1000 + (start / 10.0) as u64
            })
        );
        assert_eq!(a.fans, fans(&accesses));
        assert_eq!(a.fans.len(), 4, "one per basin: {:?}", a.fans);
        assert!(matches!(
            analyse(&rates[..3], &held, &accesses, 4, 7),
            Err(RegimeError::TooFewPoints { k: 4, points: 3 })
        ));
    }
}
