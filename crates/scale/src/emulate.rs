//! The paper's emulation: a data service of thousands of buckets rescaled again and again, with
//! statistics of how good each recorded rescaling was.

use std::time::Instant;

use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Normal};
use rand_pcg::Pcg64Mcg;
use rayon::prelude::*;
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

impl std::str::FromStr for Scenario {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        SCENARIOS.into_iter().find(|x| x.name == s).ok_or_else(|| {
            format!(
                "unknown scenario {s:?}; known: {}",
                SCENARIOS.map(|x| x.name).join(", ")
            )
        })
    }
}

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

/// The rescaling of `c` to `to` servers: new ids from `next_id` (which moves past them), or
/// random servers removed.
pub fn rescaling(c: &Cluster, to: usize, next_id: &mut ServerId, rng: &mut Pcg64Mcg) -> Rescale {
    let from = c.servers.len();
    if to >= from {
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
    }
}

/// Rescales `c` to `to` servers ([`rescaling`]), applies the plan, and returns the rescaling's
/// outcome and planning time.
pub fn rescale(
    c: &mut Cluster,
    to: usize,
    strategy: Strategy,
    opts: PlanOptions,
    next_id: &mut ServerId,
    rng: &mut Pcg64Mcg,
) -> Result<(crate::model::Outcome, f64), PlanError> {
    let r = rescaling(c, to, next_id, rng);
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
        ratios.0.push(o.load_ratio());
        ratios.1.push(o.data_ratio());
        ratios.2.push(o.transfer_ratio());
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

/// Every `scenario` × `strategy` (scenario by scenario), in parallel; `progress` is called as
/// each finishes. Reports come in that order.
pub fn emulate_all(
    scenarios: &[Scenario],
    strategies: &[Strategy],
    p: &Params,
    progress: &(dyn Fn() + Sync),
) -> Result<Vec<Report>, PlanError> {
    let jobs: Vec<(Scenario, Strategy)> = scenarios
        .iter()
        .flat_map(|sc| strategies.iter().map(move |st| (*sc, *st)))
        .collect();
    jobs.par_iter()
        .map(|&(sc, st)| {
            let r = emulate(sc, st, p);
            progress();
            r
        })
        .collect()
}

/// The sizes `pliant bench scale` plans, `(servers after, buckets)`: commissioning 15/16 of the
/// final servers as in 1,920-onto-128, from 128 servers and 8 K buckets to 16,384 and 1 M.
pub const SCALING: [(usize, usize); 5] = [
    (128, 8_192),
    (512, 32_768),
    (2_048, 131_072),
    (8_192, 524_288),
    (16_384, 1_048_576),
];

/// Planning time of one commission from `servers / 16` to `servers` servers holding `buckets`
/// buckets of 0.5 GB on average: the best of `reps` (at least 1) seeded clusters, in ms, since
/// on a shared machine the fastest run is the one least disturbed.
pub fn best_plan_ms(
    servers: usize,
    buckets: usize,
    strategy: Strategy,
    reps: usize,
) -> Result<f64, PlanError> {
    if servers < 16 {
        return Err(PlanError::Request(format!(
            "{servers} servers: a commission from servers / 16 needs at least 16"
        )));
    }
    let from = servers / 16;
    let params = Params {
        buckets,
        total_gb: buckets as f64 / 2.0,
        ..Params::default()
    };
    let mut best = f64::INFINITY;
    for rep in 0..reps.max(1) {
        let mut rng = Pcg64Mcg::seed_from_u64(rep as u64);
        let mut c = cluster(&params, from, &mut rng)?;
        let mut next = from as ServerId;
        let (_, ms) = rescale(
            &mut c,
            servers,
            strategy,
            PlanOptions::default(),
            &mut next,
            &mut rng,
        )?;
        best = best.min(ms);
    }
    Ok(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Params {
        Params {
            buckets: 256,
            total_gb: 128.0,
            warmup: 2,
            reps: 3,
            between: 2,
            ..Params::default()
        }
    }

    /// Everything but the planning time, which is the machine's.
    fn ratios(r: &Report) -> [Quartiles; 4] {
        [
            r.l_max_over_l_t,
            r.d_max_over_d_t,
            r.t_max_over_t_t,
            r.moved_fraction,
        ]
    }

    #[test]
    fn scenarios_parse_by_name() {
        assert_eq!("decommission-64-of-320".parse(), Ok(SCENARIOS[3]));
        let e = "grow-a-lot".parse::<Scenario>().err().unwrap_or_default();
        assert!(
            e.contains("\"grow-a-lot\"") && e.contains("commission-1920-onto-128"),
            "{e}"
        );
    }

    #[test]
    fn emulate_all_is_every_pair_in_order_as_run_alone() {
        let scenarios = [SCENARIOS[1], SCENARIOS[3]];
        let strategies = [Strategy::Lt, Strategy::Ldt];
        let done = std::sync::atomic::AtomicUsize::new(0);
        let all = emulate_all(&scenarios, &strategies, &small(), &|| {
            done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        })
        .expect("emulate");
        assert_eq!(done.into_inner(), 4);
        let names: Vec<(&str, &str)> = all.iter().map(|r| (r.scenario, r.strategy)).collect();
        assert_eq!(
            names,
            [
                ("commission-64-onto-256", "lt"),
                ("commission-64-onto-256", "ldt"),
                ("decommission-64-of-320", "lt"),
                ("decommission-64-of-320", "ldt"),
            ]
        );
        for r in &all {
            let sc = scenarios.iter().find(|s| s.name == r.scenario).copied();
            let st = r.strategy.parse().ok();
            let alone = emulate(sc.expect("scenario"), st.expect("strategy"), &small());
            assert_eq!(ratios(r), ratios(&alone.expect("alone")), "{}", r.scenario);
        }
    }

    #[test]
    fn planning_time_is_measured_and_needs_sixteen_servers() {
        let ms = best_plan_ms(32, 512, Strategy::Ldt, 2).expect("plan");
        assert!(ms.is_finite() && ms >= 0.0, "{ms}");
        assert!(matches!(
            best_plan_ms(15, 512, Strategy::Ldt, 1),
            Err(PlanError::Request(m)) if m.contains("at least 16")
        ));
    }
}
