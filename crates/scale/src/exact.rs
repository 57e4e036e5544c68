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
use serde::Serialize;

use crate::heuristic::Strategy;
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
        other => PlanError::Solver(other.to_string()),
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
