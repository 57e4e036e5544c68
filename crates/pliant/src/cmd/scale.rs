//! `pliant scale`: plan a rescaling of a real cluster, emulate the paper's scenarios at scale,
//! and compare the heuristic with the exact optimum on small instances.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use pliant_scale::emulate::{self, Params, Quartiles, Report, SCENARIOS, Scenario};
use pliant_scale::{Cluster, Move, PlanOptions, Rescale, Strategy, Weights, plan};

use super::args::{Json, Plot, Seed};
use crate::plot::{Chart, Series, draw};

/// Rescaling subcommands.
#[derive(clap::Subcommand)]
pub enum Command {
    /// Plan a rescaling of a cluster described in JSON; print the moves and the outcome.
    ///
    /// CLUSTER.json: {"servers": [ids], "buckets": [{"id", "size", "load", "server"}],
    /// "capacity": bytes (optional), "transfer": {"kind": "network", "s_net": bytes/s}
    /// or {"kind": "storage", "s_read": .., "s_write": ..}}.
    ///
    /// Example: pliant scale plan --state cluster.json --add 4 --strategy ldt --json
    #[command(verbatim_doc_comment)]
    Plan(PlanArgs),
    /// The paper's emulation: 8,192 buckets, 4,096 GB, rescaled again and again; statistics of
    /// the recorded rescalings per scenario and strategy.
    Emulate(EmulateArgs),
    /// Heuristic against the exact optimum (mixed-integer program) on small random instances:
    /// 5 → 8 and 8 → 5 servers, 16 buckets.
    ///
    /// Needs a pliant built with `--features exact` (HiGHS; building it needs libclang and cmake).
    Optimal(OptimalArgs),
    Commission(super::rescale::CommissionArgs),
    Decommission(super::rescale::DecommissionArgs),
}

/// Arguments of `scale plan`.
#[derive(clap::Args)]
pub struct PlanArgs {
    /// The cluster.
    #[arg(long, value_name = "CLUSTER.json")]
    state: PathBuf,
    /// Commission this many new servers (ids after the largest existing one).
    #[arg(long, conflicts_with = "remove")]
    add: Option<u32>,
    /// Decommission these servers (comma- or space-separated).
    #[arg(long, num_args = 1.., value_delimiter = ',', value_name = "ID,...")]
    remove: Vec<u32>,
    /// Strategy: l, lt, dt, ldt.
    #[arg(long, default_value = "ldt")]
    strategy: String,
    /// Free weights W_L,W_D,W_T instead of a strategy (max(W_L, W_D) = 1, all > 0).
    #[arg(long, value_delimiter = ',', value_name = "WL,WD,WT")]
    weights: Option<Vec<f64>>,
    /// Candidate servers per bucket (0 = all).
    #[arg(long, default_value_t = 16)]
    candidates: usize,
    /// The buckets are hash slots: balance every server's bucket count too (the keys it will
    /// receive) and move runs of consecutive ids together, as a live cluster's rescale does.
    #[arg(long)]
    slots: bool,
    #[command(flatten)]
    output: Json,
}

/// Arguments of `scale emulate`.
#[derive(clap::Args)]
#[command(mut_arg("json", |a| a.help("Print a JSON array, one object per (scenario, strategy)")))]
#[command(mut_arg("plot", |a| a.help("Box-plot figure (.png or .svg)")))]
pub struct EmulateArgs {
    /// Scenarios (default: all four).
    #[arg(long, value_delimiter = ',')]
    scenario: Vec<String>,
    /// Strategies (default: l, lt, dt, ldt).
    #[arg(long, value_delimiter = ',')]
    strategy: Vec<String>,
    /// Recorded rescalings per scenario.
    #[arg(long, default_value_t = 100)]
    reps: usize,
    #[command(flatten)]
    rng: Seed,
    #[command(flatten)]
    output: Json,
    #[command(flatten)]
    chart: Plot,
}

/// Arguments of `scale optimal`.
#[derive(clap::Args)]
pub struct OptimalArgs {
    /// Instances per scenario.
    #[arg(long, default_value_t = 100)]
    instances: usize,
    #[command(flatten)]
    rng: Seed,
    #[command(flatten)]
    output: Json,
}

/// Runs a scale subcommand.
pub fn run(c: Command) -> Result<ExitCode> {
    match c {
        Command::Plan(a) => plan_cmd(&a),
        Command::Emulate(a) => emulate_cmd(&a),
        Command::Optimal(a) => optimal_cmd(&a),
        Command::Commission(a) => super::rescale::commission(&a),
        Command::Decommission(a) => super::rescale::decommission(&a),
    }
}

pub(super) fn weights(strategy: &str, free: &Option<Vec<f64>>) -> Result<Weights> {
    Ok(match free {
        Some(w) => Weights::from_list(w).context("--weights")?,
        None => strategy
            .parse::<Strategy>()
            .map_err(anyhow::Error::msg)?
            .weights(),
    })
}

fn plan_cmd(a: &PlanArgs) -> Result<ExitCode> {
    let text = std::fs::read_to_string(&a.state)
        .with_context(|| format!("reading {}", a.state.display()))?;
    let cluster = Cluster::from_json(&text, &a.state.display().to_string())?;
    let r = match (a.add, a.remove.is_empty()) {
        (Some(n), true) => Rescale::commission(&cluster, n),
        (None, false) => Rescale::decommission(a.remove.clone()),
        _ => bail!("give --add N or --remove ID,..."),
    };
    let w = weights(&a.strategy, &a.weights)?;
    let opts = PlanOptions {
        candidates: if a.candidates == 0 {
            usize::MAX
        } else {
            a.candidates
        },
        slots: a.slots,
    };
    let mut moves: Vec<Move> = Vec::new();
    let t = std::time::Instant::now();
    let placement = plan(&cluster, &r, w, opts, |m| {
        if !a.output.json {
            println!(
                "move bucket {:>6}  {:>5} -> {:<5}  {:>14.0} bytes",
                m.bucket, m.from, m.to, m.bytes
            );
        }
        moves.push(m);
    })?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let o = cluster.evaluate(&r, &placement)?;
    if a.output.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "rescale": r, "weights": w, "moves": moves, "outcome": o, "plan_ms": ms,
                "placement": cluster.buckets.iter().zip(&placement)
                    .map(|(b, s)| serde_json::json!({"bucket": b.id, "server": s}))
                    .collect::<Vec<_>>(),
            }))?
        );
    } else {
        println!(
            "\n{} moves, {:.1}% of the data; L_max/L_t {:.3}, D_max/D_t {:.3}, T_max/T_t {:.3}; planned in {ms:.2} ms",
            moves.len(),
            100.0 * o.moved_fraction,
            o.load_ratio(),
            o.data_ratio(),
            o.transfer_ratio()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn emulate_cmd(a: &EmulateArgs) -> Result<ExitCode> {
    let scenarios: Vec<Scenario> = if a.scenario.is_empty() {
        SCENARIOS.to_vec()
    } else {
        a.scenario
            .iter()
            .map(|n| n.parse().map_err(anyhow::Error::msg))
            .collect::<Result<_>>()?
    };
    let strategies: Vec<Strategy> = if a.strategy.is_empty() {
        Strategy::ALL.to_vec()
    } else {
        a.strategy
            .iter()
            .map(|s| s.parse().map_err(anyhow::Error::msg))
            .collect::<Result<_>>()?
    };
    let params = Params {
        reps: a.reps,
        seed: a.rng.seed,
        ..Params::default()
    };
    let bar = indicatif::ProgressBar::new((scenarios.len() * strategies.len()) as u64);
    let reports = emulate::emulate_all(&scenarios, &strategies, &params, &|| bar.inc(1))?;
    bar.finish_and_clear();
    if let Some(p) = &a.chart.plot {
        boxplot(p, &reports)?;
    }
    if a.output.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
        return Ok(ExitCode::SUCCESS);
    }
    let q = |x: &Quartiles| format!("{:.3} [{:.3}, {:.3}]", x.median, x.min, x.max);
    println!(
        "{:<27} {:<4} {:>25} {:>25} {:>25} {:>7} {:>9}",
        "scenario", "", "L_max/L_t med [min,max]", "D_max/D_t", "T_max/T_t", "moved", "plan ms"
    );
    for r in &reports {
        println!(
            "{:<27} {:<4} {:>25} {:>25} {:>25} {:>6.1}% {:>9.2}",
            r.scenario,
            r.strategy,
            q(&r.l_max_over_l_t),
            q(&r.d_max_over_d_t),
            q(&r.t_max_over_t_t),
            100.0 * r.moved_fraction.median,
            r.plan_ms.median
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Box plots: one panel per ratio, one box per (scenario, strategy), drawn as whiskers (min–max)
/// and boxes (quartiles) from line segments.
fn boxplot(path: &std::path::Path, reports: &[Report]) -> Result<()> {
    type Get = fn(&Report) -> Quartiles;
    let panels: [(&str, Get); 3] = [
        ("L_max / L_t", |r| r.l_max_over_l_t),
        ("D_max / D_t", |r| r.d_max_over_d_t),
        ("T_max / T_t", |r| r.t_max_over_t_t),
    ];
    let charts: Vec<Chart<'_>> = panels
        .iter()
        .map(|(title, get)| Chart {
            title,
            x_label: "scenario × strategy (1-4: l, lt, dt, ldt per scenario)",
            y_label: "ratio to target",
            log_x: false,
            series: Strategy::ALL
                .iter()
                .map(|st| {
                    let mut pts = Vec::new();
                    for (i, r) in reports
                        .iter()
                        .enumerate()
                        .filter(|(_, r)| r.strategy == st.name())
                    {
                        let q = get(r);
                        let x = i as f64 + 1.0;
                        // Whisker, box outline, median tick; NaN breaks the line between shapes.
                        for (a, b) in [
                            ((x, q.min), (x, q.max)),
                            ((x - 0.3, q.q1), (x + 0.3, q.q1)),
                            ((x + 0.3, q.q1), (x + 0.3, q.q3)),
                            ((x + 0.3, q.q3), (x - 0.3, q.q3)),
                            ((x - 0.3, q.q3), (x - 0.3, q.q1)),
                            ((x - 0.35, q.median), (x + 0.35, q.median)),
                        ] {
                            pts.push(a);
                            pts.push(b);
                            pts.push((f64::NAN, f64::NAN));
                        }
                    }
                    Series::line(st.name(), pts)
                })
                .collect(),
        })
        .collect();
    draw(path, &charts)?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

#[cfg(not(feature = "exact"))]
fn optimal_cmd(_: &OptimalArgs) -> Result<ExitCode> {
    bail!(
        "this pliant was built without the exact solver; rebuild with `cargo build --release \
         --features exact` (needs libclang and cmake to build HiGHS)"
    )
}

#[cfg(feature = "exact")]
fn optimal_cmd(a: &OptimalArgs) -> Result<ExitCode> {
    let bar = indicatif::ProgressBar::new((a.instances * 2 * 3) as u64);
    let rows = pliant_scale::exact::compare(a.instances, a.rng.seed, &|| bar.inc(1))?;
    bar.finish_and_clear();
    if a.output.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("heuristic / optimum (objective: L_max for l, T_max for lt and ldt), 16 buckets");
    println!(
        "{:<7} {:<4} {:>9} {:>9} {:>9} {:>11} {:>10} {:>11} {:>10}",
        "case", "", "median", "q3", "max", "≤ 10% over", "L ratio", "infeasible", "exact ms"
    );
    for r in &rows {
        println!(
            "{:<7} {:<4} {:>9.3} {:>9.3} {:>9.3} {:>10.0}% {:>10.3} {:>11} {:>10.1}",
            r.scenario,
            r.strategy,
            r.objective_ratio.median,
            r.objective_ratio.q3,
            r.objective_ratio.max,
            100.0 * r.within_10_percent,
            r.l_max_ratio.median,
            r.infeasible,
            r.exact_ms.median
        );
    }
    Ok(ExitCode::SUCCESS)
}
