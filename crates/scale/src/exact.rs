//! The exact baseline: the rescaling problem as a mixed-integer program, for small instances.
//!
//! Variables `x[b][s] ∈ {0, 1}` (bucket b ends on remaining server s), each bucket on exactly one
//! server, capacities respected; `L ≥ load(s)`, `D ≥ data(s)` and `T ≥` each server's transfer
//! time (received and sent bytes are linear in `x`). Objectives, as in the paper's comparison:
//! - **L**: minimise `L_max`;
//! - **LT**: `L_max` within 10% of L's optimum, then minimise `T_max`;
//! - **LDT**: `L_max` and `D_max` within 10% of their optima, then minimise `T_max`.
//!
//! Solved with HiGHS (an open-source MILP solver, built from source by `highs-sys`) through
//! `good_lp`. `microlp`, the pure-Rust solver, was tried first: it ran for over ten minutes on a
//! single 16-bucket instance.

use good_lp::{
    Expression, Solution, SolverModel, Variable, constraint, highs, variable, variables,
};
use rand::SeedableRng;
use rayon::prelude::*;
use serde::Serialize;

use crate::emulate::{self, Params, Quartiles};
use crate::heuristic::{PlanOptions, Strategy, plan};
use crate::model::{Cluster, Placement, PlanError, Rescale, TransferModel};

/// Optimal objective values and a placement achieving them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Optimum {
    /// Optimal `L_max` (stage one).
    pub l_max: f64,
    /// `D_max` of the final placement.
    pub d_max: f64,
    /// `T_max` of the final placement (the minimised one for LT and LDT).
    pub t_max: f64,
    /// The final placement.
    #[serde(skip)]
    pub placement: Placement,
}

enum Goal {
    Load,
    Data,
    Transfer,
}

fn solve(
    c: &Cluster,
    r: &Rescale,
    goal: Goal,
    l_cap: Option<f64>,
    d_cap: Option<f64>,
) -> Result<(f64, Placement), PlanError> {
    let dests = c.after(r)?;
    let mut vars = variables!();
    let x: Vec<Vec<Variable>> = c
        .buckets
        .iter()
        .map(|_| {
            dests
                .iter()
                .map(|_| vars.add(variable().binary()))
                .collect()
        })
        .collect();
    let l = vars.add(variable().min(0.0));
    let d = vars.add(variable().min(0.0));
    let t = vars.add(variable().min(0.0));
    let objective = match goal {
        Goal::Load => l,
        Goal::Data => d,
        Goal::Transfer => t,
    };
    let mut m = vars.minimise(objective).using(highs);
    for row in &x {
        let one: Expression = row.iter().sum();
        m = m.with(constraint!(one == 1.0));
    }
    for (j, _) in dests.iter().enumerate() {
        let load: Expression = c
            .buckets
            .iter()
            .zip(&x)
            .map(|(b, row)| b.load * row[j])
            .sum();
        let data: Expression = c
            .buckets
            .iter()
            .zip(&x)
            .map(|(b, row)| b.size * row[j])
            .sum();
        m = m.with(constraint!(load <= l));
        if c.capacity.is_finite() {
            m = m.with(constraint!(data.clone() <= c.capacity));
        }
        m = m.with(constraint!(data <= d));
    }
    // Transfers of every server, remaining or leaving, old or new.
    let all: Vec<u32> = c.servers.iter().chain(&r.add).copied().collect();
    for s in all {
        let j = dests.iter().position(|&x| x == s);
        let mut recv = Expression::from(0.0);
        let mut sent = Expression::from(0.0);
        for (b, row) in c.buckets.iter().zip(&x) {
            match (b.server == s, j) {
                (true, Some(j)) => sent += b.size - b.size * row[j],
                (true, None) => sent += b.size,
                (false, Some(j)) => recv += b.size * row[j],
                (false, None) => {}
            }
        }
        match c.transfer {
            TransferModel::Network { s_net } => {
                m = m.with(constraint!(recv * (1.0 / s_net) <= t));
                m = m.with(constraint!(sent * (1.0 / s_net) <= t));
            }
            TransferModel::Storage { s_read, s_write } => {
                m = m.with(constraint!(
                    sent * (1.0 / s_read) + recv * (1.0 / s_write) <= t
                ));
            }
        }
    }
    if let Some(cap) = l_cap {
        m = m.with(constraint!(l <= cap));
    }
    if let Some(cap) = d_cap {
        m = m.with(constraint!(d <= cap));
    }
    let sol = m.solve().map_err(|e| match e {
        good_lp::ResolutionError::Infeasible => {
            PlanError::Infeasible("the caps on L_max and D_max cannot hold together".into())
        }
        other => PlanError::Solver(other),
    })?;
    let placement = x
        .iter()
        .map(|row| {
            let j = row
                .iter()
                .enumerate()
                .max_by(|a, b| sol.value(*a.1).total_cmp(&sol.value(*b.1)))
                .map_or(0, |(j, _)| j);
            dests[j]
        })
        .collect();
    Ok((sol.value(objective), placement))
}

/// The optimum of `r` for the objective of `strategy` (L, LT or LDT; DT is not in the paper's
/// comparison and is refused).
pub fn optimum(c: &Cluster, r: &Rescale, strategy: Strategy) -> Result<Optimum, PlanError> {
    let (l_star, p_l) = solve(c, r, Goal::Load, None, None)?;
    let placement = match strategy {
        Strategy::L => p_l,
        Strategy::Lt => solve(c, r, Goal::Transfer, Some(1.1 * l_star + 1e-9), None)?.1,
        Strategy::Ldt => {
            let (d_star, _) = solve(c, r, Goal::Data, None, None)?;
            solve(
                c,
                r,
                Goal::Transfer,
                Some(1.1 * l_star + 1e-9),
                Some(1.1 * d_star + 1e-9),
            )?
            .1
        }
        Strategy::Dt => {
            return Err(PlanError::Request(
                "the exact comparison covers l, lt and ldt".into(),
            ));
        }
    };
    let o = c.evaluate(r, &placement)?;
    Ok(Optimum {
        l_max: l_star,
        d_max: o.d_max,
        t_max: o.t_max,
        placement,
    })
}

/// The heuristic against the optimum for one rescaling case and strategy, over random instances.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// The case: `5-to-8` or `8-to-5` servers.
    pub scenario: &'static str,
    /// `l`, `lt` or `ldt`.
    pub strategy: &'static str,
    /// Instances compared.
    pub instances: usize,
    /// Instances where the exact model's caps cannot hold together (excluded from the ratios).
    pub infeasible: usize,
    /// Heuristic objective over the optimum's: `L_max` for l, `T_max` for lt and ldt.
    pub objective_ratio: Quartiles,
    /// Heuristic `L_max` over the optimum's.
    pub l_max_ratio: Quartiles,
    /// Share of instances whose objective ratio is at most 1.10.
    pub within_10_percent: f64,
    /// Time the solver took per instance (ms).
    pub exact_ms: Quartiles,
}

/// The paper's comparison: `instances` random 16-bucket clusters per case (5 → 8 and 8 → 5
/// servers) and strategy (l, lt, ldt), each planned by the heuristic and solved exactly, in
/// parallel. `progress` is called once per instance solved.
pub fn compare(
    instances: usize,
    seed: u64,
    progress: &(dyn Fn() + Sync),
) -> Result<Vec<Comparison>, PlanError> {
    let small = Params {
        buckets: 16,
        total_gb: 16.0,
        seed,
        ..Params::default()
    };
    let cases: [(&'static str, u32, u32); 2] = [("5-to-8", 5, 8), ("8-to-5", 8, 5)];
    let mut rows = Vec::new();
    for (name, from, to) in cases {
        let r = if to > from {
            Rescale {
                add: (from..to).collect(),
                remove: vec![],
            }
        } else {
            Rescale {
                add: vec![],
                remove: (to..from).collect(),
            }
        };
        for st in [Strategy::L, Strategy::Lt, Strategy::Ldt] {
            let outcomes: Vec<Option<(f64, f64, f64)>> = (0..instances)
                .into_par_iter()
                .map(|i| {
                    let mut rng =
                        rand_pcg::Pcg64Mcg::seed_from_u64(seed.wrapping_mul(1000) + i as u64);
                    let c = emulate::cluster(&small, from as usize, &mut rng)?;
                    let out = compare_one(&c, &r, st);
                    progress();
                    out
                })
                .collect::<Result<_, _>>()?;
            let infeasible = outcomes.iter().filter(|o| o.is_none()).count();
            let results: Vec<(f64, f64, f64)> = outcomes.into_iter().flatten().collect();
            let within = results.iter().filter(|r| r.0 <= 1.10 + 1e-9).count() as f64
                / results.len().max(1) as f64;
            rows.push(Comparison {
                scenario: name,
                strategy: st.name(),
                instances: results.len(),
                infeasible,
                objective_ratio: Quartiles::of(results.iter().map(|r| r.0).collect()),
                l_max_ratio: Quartiles::of(results.iter().map(|r| r.1).collect()),
                within_10_percent: within,
                exact_ms: Quartiles::of(results.iter().map(|r| r.2).collect()),
            });
        }
    }
    Ok(rows)
}

/// `(objective ratio, L_max ratio, solver ms)` of one instance, or `None` if infeasible.
fn compare_one(
    c: &Cluster,
    r: &Rescale,
    st: Strategy,
) -> Result<Option<(f64, f64, f64)>, PlanError> {
    let t = std::time::Instant::now();
    let opt = match optimum(c, r, st) {
        Ok(o) => o,
        Err(PlanError::Infeasible(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let h = c.evaluate(
        r,
        &plan(c, r, st.weights(), PlanOptions::default(), |_| {})?,
    )?;
    let objective = match st {
        Strategy::L => h.l_max / opt.l_max,
        _ if opt.t_max > 0.0 => h.t_max / opt.t_max,
        _ => 1.0,
    };
    Ok(Some((objective, h.l_max / opt.l_max, ms)))
}
