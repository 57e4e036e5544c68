//! Regimes by behaviour: k-means over what a cache sees per interval (not over time), with k
//! chosen by the data.
//!
//! The studies clustered `(time, reads/s)`. With time as a coordinate, any run is cut into
//! slices of the clock whether or not its behaviour changed; [`cluster`] takes only behaviour
//! features and lets the gap statistic (Tibshirani, Walther and Hastie, "Estimating the number
//! of clusters in a data set via the gap statistic", JRSS B 63(2), 2001) pick k, one included.
//! k = 1 matters here: "the run is still in its opening regime" is exactly the answer that a
//! silhouette, undefined for one cluster and above 0.5 for a split of plain Gaussian noise,
//! cannot give.

use linfa::prelude::*;
use linfa_clustering::KMeans;
use ndarray::Array2;
use rand_xoshiro_linfa::Xoshiro256Plus;
use rand_xoshiro_linfa::rand_core::{RngCore, SeedableRng};

use crate::RegimeError;

/// Reference data sets drawn per fit for the gap statistic. The rule's own standard-error term
/// (`s_k`, which grows as `sqrt(1 + 1/B)`) absorbs the noise of a small B; 20 keeps a fit of a
/// few hundred points in milliseconds.
pub const REFERENCE_SETS: usize = 20;

/// Points grouped into regimes.
#[derive(Debug, Clone, PartialEq)]
pub struct Clusters {
    /// Regimes found; 1 when the points show no structure beyond uniform noise (0 for no points).
    pub k: usize,
    /// Regime of each point, numbered in order of first appearance (point 0 is in regime 0).
    pub labels: Vec<usize>,
    /// `Gap(k)` for k = 1, 2, … `k_max` (for reports and tests).
    pub gaps: Vec<f64>,
}

/// Clusters `points` (one feature vector each) into between 1 and `k_max` regimes, k by the gap
/// statistic: `Gap(k)` is how much tighter k-means packs the points than it packs uniform points
/// over their bounding box ([`REFERENCE_SETS`] of them), in log within-cluster sum of squares,
/// and k is the smallest with `Gap(k) ≥ Gap(k+1) − s(k+1)`. Deterministic for a seed.
///
/// The features must share a unit, because distances add them up: logarithms of rates do (one
/// unit is a factor of e in any of them). Standardising each feature instead would blow a
/// feature that only carries noise up to the weight of one that carries the regimes.
pub fn cluster<const D: usize>(
    points: &[[f64; D]],
    k_max: usize,
    seed: u64,
) -> Result<Clusters, RegimeError> {
    if k_max == 0 {
        return Err(RegimeError::ZeroK);
    }
    if points.is_empty() {
        return Ok(Clusters {
            k: 0,
            labels: Vec::new(),
            gaps: Vec::new(),
        });
    }
    // k clusters need more than k points to say anything.
    let k_max = k_max.min(points.len().saturating_sub(1)).max(1);
    let mut lo = [f64::INFINITY; D];
    let mut hi = [f64::NEG_INFINITY; D];
    for p in points {
        for j in 0..D {
            lo[j] = lo[j].min(p[j]);
            hi[j] = hi[j].max(p[j]);
        }
    }
    let mut rng = Xoshiro256Plus::seed_from_u64(seed ^ 0x9e37_79b9_7f4a_7c15);
    let references: Vec<Vec<[f64; D]>> = (0..REFERENCE_SETS)
        .map(|_| {
            (0..points.len())
                .map(|_| {
                    std::array::from_fn(|j| {
                        let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                        lo[j] + u * (hi[j] - lo[j])
                    })
                })
                .collect()
        })
        .collect();
    let mut gaps = Vec::with_capacity(k_max);
    let mut sds = Vec::with_capacity(k_max);
    let mut fits = Vec::with_capacity(k_max);
    for k in 1..=k_max {
        let (w, labels) = kmeans(points, k, seed, 10)?;
        let logs: Vec<f64> = references
            .iter()
            .map(|r| Ok(kmeans(r, k, seed, 3)?.0.max(f64::MIN_POSITIVE).ln()))
            .collect::<Result<_, RegimeError>>()?;
        let b = logs.len() as f64;
        let mean = logs.iter().sum::<f64>() / b;
        let sd = (logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / b).sqrt();
        gaps.push(mean - w.max(f64::MIN_POSITIVE).ln());
        sds.push(sd * (1.0 + 1.0 / b).sqrt());
        fits.push(labels);
    }
    let k = (1..k_max)
        .find(|&k| gaps[k - 1] >= gaps[k] - sds[k])
        .unwrap_or(k_max);
    let raw = &fits[k - 1];
    // Renumber by first appearance.
    let mut order = vec![None; k];
    let mut next = 0;
    let labels = raw
        .iter()
        .map(|&c| {
            *order[c].get_or_insert_with(|| {
                next += 1;
                next - 1
            })
        })
        .collect();
    Ok(Clusters {
        k: next,
        labels,
        gaps,
    })
}

/// k-means of `points` into `k` clusters: the within-cluster sum of squares and the labels.
fn kmeans<const D: usize>(
    points: &[[f64; D]],
    k: usize,
    seed: u64,
    runs: usize,
) -> Result<(f64, Vec<usize>), RegimeError> {
    let data = Array2::from_shape_fn((points.len(), D), |(i, j)| points[i][j]);
    let dataset = DatasetBase::from(data);
    let model = KMeans::params_with_rng(k, Xoshiro256Plus::seed_from_u64(seed))
        .n_runs(runs)
        .max_n_iterations(300)
        .tolerance(1e-6)
        .fit(&dataset)?;
    let labels = model.predict(&dataset).to_vec();
    let c = model.centroids();
    let w = points
        .iter()
        .zip(&labels)
        .map(|(p, &l)| (0..D).map(|j| (p[j] - c[[l, j]]).powi(2)).sum::<f64>())
        .sum();
    Ok((w, labels))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Normal noise from a seeded generator (Box–Muller).
    fn noise(n: usize, seed: u64) -> Vec<f64> {
        let mut rng = Xoshiro256Plus::seed_from_u64(seed);
        let mut u = || ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        (0..n)
            .map(|_| (-2.0 * u().ln()).sqrt() * (std::f64::consts::TAU * u()).cos())
            .collect()
    }

    #[test]
    fn two_levels_are_two_regimes_in_order_of_appearance() {
        let (a, b) = (noise(60, 1), noise(60, 2));
        let pts: Vec<[f64; 2]> = (0..60)
            .map(|i| {
                let level = if i < 20 { 600.0_f64 } else { 100.0 };
                [level.ln() + 0.05 * a[i], 50.0_f64.ln() + 0.05 * b[i]]
            })
            .collect();
        let c = cluster(&pts, 4, 3).expect("cluster");
        assert_eq!(c.k, 2, "{c:?}");
        assert!(c.labels[..20].iter().all(|&l| l == 0));
        assert!(c.labels[20..].iter().all(|&l| l == 1));
        assert!(c.gaps[1] > c.gaps[0], "{:?}", c.gaps);
    }

    /// Gaussian noise around one level, at any scale, is one regime (a silhouette would split it).
    #[test]
    fn noise_around_one_level_is_one_regime() {
        for (seed, scale) in [(5, 0.05), (6, 1.0), (7, 30.0)] {
            let (a, b) = (noise(80, seed), noise(80, seed + 100));
            let pts: Vec<[f64; 2]> = (0..80).map(|i| [scale * a[i], scale * b[i]]).collect();
            let c = cluster(&pts, 4, 3).expect("cluster");
            assert_eq!(c.k, 1, "scale {scale}: {:?}", c.gaps);
            assert!(c.labels.iter().all(|&l| l == 0));
        }
    }

    #[test]
    fn too_few_points_are_one_regime_and_zero_k_is_an_error() {
        let c = cluster(&[[1.0], [9.0]], 4, 1).expect("cluster");
        assert_eq!(c.k, 1);
        assert!(matches!(cluster(&[[1.0]], 0, 1), Err(RegimeError::ZeroK)));
    }
}
