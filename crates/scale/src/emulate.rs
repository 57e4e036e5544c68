//! The paper's emulation: a data service of thousands of buckets rescaled again and again, with
//! statistics of how good each recorded rescaling was.

use std::time::Instant;

use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Normal};
use rand_pcg::Pcg64Mcg;
use serde::Serialize;

use crate::heuristic::{PlanOptions, Strategy, plan};
use crate::model::{Bucket, Cluster, PlanError, Rescale, ServerId, TransferModel};

/// Emulation settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    /// Buckets.
    pub buckets: usize,
    /// Total data, GB.
    pub total_gb: f64,
    /// Standard deviation of sizes and loads, as a fraction of the mean.
    pub stdev: f64,
    /// Random rescalings before the first recorded one.
    pub warmup: usize,
    /// Recorded rescalings.
    pub reps: usize,
    /// Random rescalings between two recorded ones.
    pub between: usize,
    /// Network speed per server, GB/s.
    pub s_net: f64,
    /// Planner options.
    pub options: PlanOptions,
    /// Seed.
    pub seed: u64,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            buckets: 8192,
            total_gb: 4096.0,
            stdev: 0.4,
            warmup: 25,
            reps: 100,
            between: 9,
            s_net: 1.0,
            options: PlanOptions::default(),
            seed: 1,
        }
    }
}

/// A recorded rescaling of the paper.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Scenario {
    /// Its name.
    pub name: &'static str,
    /// Servers before.
    pub from: usize,
    /// Servers after.
    pub to: usize,
}

/// The paper's four scenarios.
pub const SCENARIOS: [Scenario; 4] = [
    Scenario {
        name: "commission-1920-onto-128",
        from: 128,
        to: 2048,
    },
    Scenario {
        name: "commission-64-onto-256",
        from: 256,
        to: 320,
    },
    Scenario {
        name: "decommission-1920-of-2048",
        from: 2048,
        to: 128,
    },
    Scenario {
        name: "decommission-64-of-320",
        from: 320,
        to: 256,
    },
];

/// Min, quartiles, max.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Quartiles {
    /// Minimum.
    pub min: f64,
    /// First quartile.
    pub q1: f64,
    /// Median.
    pub median: f64,
    /// Third quartile.
    pub q3: f64,
    /// Maximum.
    pub max: f64,
}

impl Quartiles {
    /// Of a non-empty sample (linear interpolation between order statistics).
    pub fn of(mut v: Vec<f64>) -> Self {
        v.sort_by(f64::total_cmp);
        let q = |p: f64| {
            if v.is_empty() {
                return 0.0;
            }
            let x = p * (v.len() - 1) as f64;
            let (lo, hi) = (x.floor() as usize, x.ceil() as usize);
            v[lo] + (v[hi] - v[lo]) * (x - lo as f64)
        };
        Self {
            min: q(0.0),
            q1: q(0.25),
            median: q(0.5),
            q3: q(0.75),
            max: q(1.0),
        }
    }
}

/// Statistics of one (scenario, strategy).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Scenario name.
    pub scenario: &'static str,
    /// Strategy name.
    pub strategy: &'static str,
    /// `L_max / L_t`.
    pub l_max_over_l_t: Quartiles,
    /// `D_max / D_t`.
    pub d_max_over_d_t: Quartiles,
    /// `T_max / T_t`.
    pub t_max_over_t_t: Quartiles,
    /// Fraction of data moved.
    pub moved_fraction: Quartiles,
    /// Planning time, ms.
    pub plan_ms: Quartiles,
}

/// A cluster of `servers` servers holding `p.buckets` buckets with normally distributed sizes and
/// loads (loads sum to 100), placed at random.
pub fn cluster(p: &Params, servers: usize, rng: &mut Pcg64Mcg) -> Result<Cluster, PlanError> {
    // Draws are redrawn until positive, so a mean that is not positive would never end.
    if !(p.buckets > 0 && servers > 0 && p.total_gb.is_finite() && p.total_gb > 0.0) {
        return Err(PlanError::Request(format!(
            "an emulated cluster needs buckets, servers and a positive total size \
             ({} buckets, {servers} servers, {} GB)",
            p.buckets, p.total_gb
        )));
    }
    let normal = |mean: f64| {
        Normal::new(mean, p.stdev * mean).map_err(|e| {
            PlanError::Request(format!(
                "sizes and loads: standard deviation {} × the mean: {e}",
                p.stdev
            ))
        })
    };
    let (sizes, loads) = (normal(p.total_gb / p.buckets as f64)?, normal(1.0)?);
    let draw = |rng: &mut Pcg64Mcg, n: &Normal<f64>| loop {
        // Redraw non-positive samples: sizes and loads are positive.
        let x: f64 = n.sample(rng);
        if x > 0.0 {
            return x;
        }
    };
    let mut buckets: Vec<Bucket> = (0..p.buckets)
        .map(|i| Bucket {
            id: i as u32,
            size: draw(rng, &sizes),
            load: draw(rng, &loads),
            server: rng.random_range(0..servers as u32),
        })
        .collect();
    let (size, load): (f64, f64) = (
        buckets.iter().map(|b| b.size).sum(),
        buckets.iter().map(|b| b.load).sum(),
    );
    for b in &mut buckets {
        b.size *= p.total_gb / size;
        b.load *= 100.0 / load;
    }
    Ok(Cluster {
        servers: (0..servers as u32).collect(),
        buckets,
        capacity: f64::INFINITY,
        transfer: TransferModel::Network { s_net: p.s_net },
    })
}

/// Rescales `c` to `to` servers (new ids, or random ones removed), applies the plan, and returns
/// the rescaling with its outcome and planning time.
pub fn rescale(
    c: &mut Cluster,
    to: usize,
    strategy: Strategy,
    opts: PlanOptions,
    next_id: &mut ServerId,
    rng: &mut Pcg64Mcg,
) -> Result<(crate::model::Outcome, f64), PlanError> {
    let from = c.servers.len();
    let r = if to >= from {
        let add: Vec<ServerId> = (0..(to - from) as u32).map(|i| *next_id + i).collect();
        *next_id += (to - from) as u32;
        Rescale {
            add,
            remove: Vec::new(),
        }
    } else {
        let mut s = c.servers.clone();
        s.shuffle(rng);
        Rescale {
            add: Vec::new(),
            remove: s[..from - to].to_vec(),
        }
    };
    let t = Instant::now();
    let placement = plan(c, &r, strategy.weights(), opts, |_| {})?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let outcome = c.evaluate(&r, &placement)?;
    let after = c.after(&r)?;
    for (b, s) in c.buckets.iter_mut().zip(&placement) {
        b.server = *s;
    }
    c.servers = after;
    Ok((outcome, ms))
}

/// Runs `scenario` with `strategy`: warm-up, then `reps` recorded rescalings from the scenario's
/// start size to its end size, with `between` rescalings before each: `between − 1` to random
/// sizes (uniform between the two) and a last one back to the start size.
pub fn emulate(scenario: Scenario, strategy: Strategy, p: &Params) -> Result<Report, PlanError> {
    let mut rng =
        Pcg64Mcg::seed_from_u64(p.seed ^ (scenario.from as u64) << 20 ^ scenario.to as u64);
    let (lo, hi) = (
        scenario.from.min(scenario.to),
        scenario.from.max(scenario.to),
    );
    let mut c = cluster(p, scenario.from, &mut rng)?;
    let mut next_id = scenario.from as ServerId;
    for _ in 0..p.warmup {
        let to = rng.random_range(lo..=hi);
        rescale(&mut c, to, strategy, p.options, &mut next_id, &mut rng)?;
    }
    let mut ratios = (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..p.reps {
        for _ in 0..p.between.saturating_sub(1) {
            let to = rng.random_range(lo..=hi);
            rescale(&mut c, to, strategy, p.options, &mut next_id, &mut rng)?;
        }
        if p.between > 0 {
            rescale(
                &mut c,
                scenario.from,
                strategy,
                p.options,
                &mut next_id,
                &mut rng,
            )?;
        }
        let (o, ms) = rescale(
            &mut c,
            scenario.to,
            strategy,
            p.options,
            &mut next_id,
            &mut rng,
        )?;
        ratios.0.push(o.l_max / o.l_t);
        ratios.1.push(o.d_max / o.d_t);
        ratios
            .2
            .push(if o.t_t > 0.0 { o.t_max / o.t_t } else { 1.0 });
        ratios.3.push(o.moved_fraction);
        ratios.4.push(ms);
    }
    Ok(Report {
        scenario: scenario.name,
        strategy: strategy.name(),
        l_max_over_l_t: Quartiles::of(ratios.0),
        d_max_over_d_t: Quartiles::of(ratios.1),
        t_max_over_t_t: Quartiles::of(ratios.2),
        moved_fraction: Quartiles::of(ratios.3),
        plan_ms: Quartiles::of(ratios.4),
    })
}
