//! `pliant demo`: the main job. A ParSplice run (the model, or a real trace) through every cache
//! policy of the studies plus `auto`, with the trajectory each keeps, the memory each needs, and a
//! report with charts.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;

use anyhow::{Context, Result, bail};
use pliant_parsplice::{
    PolicyKind, RunReport, RunSpec, Segments, Store, StoreParams, WorkloadParams, efficiency,
};
use rayon::prelude::*;
use serde::Serialize;

use crate::plot::{Chart, Series, draw};

/// Arguments of `demo`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  pliant demo                                   # 2.5 h, growth delay 100,000, 8 nodes
  pliant demo --hours 4.2 --growth 1000000 --json
  pliant demo --trace ../shared/traces/parsplice/d100K/rank4.csv.gz")]
pub struct Args {
    /// Simulated wall-clock hours.
    #[arg(long, default_value_t = 2.5)]
    hours: f64,
    /// Growth delay in ps (ParSplice `<Delay>`): 100000 or 1000000 in the traced runs.
    #[arg(long, default_value_t = 100_000.0)]
    growth: f64,
    /// Nodes (WorkManager caches); the measured policy runs used 8. With --trace, default 1.
    #[arg(long)]
    nodes: Option<u32>,
    /// Workers per node.
    #[arg(long, default_value_t = 27)]
    workers: u32,
    /// Relative temperature (1.0 = the traced runs).
    #[arg(long, default_value_t = 1.0)]
    temperature: f64,
    /// Seed of the state process.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Effective penalty of a store read in seconds (the model's one parameter fitted to a
    /// measured policy run; see `pliant_parsplice::model::READ_LATENCY_SECONDS`).
    #[arg(long, value_name = "SECONDS")]
    miss_penalty: Option<f64>,
    /// Replay a real ParSplice trace (e.g. d100K rank4.csv.gz) instead of the model.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Where to write the HTML report and charts.
    #[arg(long, default_value = "pliant-report")]
    report: PathBuf,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

/// The policies of the ParSplice cache studies, plus `auto`.
pub fn policies() -> Vec<PolicyKind> {
    let mut p = vec![PolicyKind::Unlimited];
    p.extend([10, 100, 1_000, 10_000, 100_000].map(PolicyKind::Lru));
    p.extend([10, 100, 1_000, 10_000].map(|target| PolicyKind::TwoPhase {
        absorb: 100_000,
        target,
    }));
    p.push(PolicyKind::Auto);
    p
}

#[derive(Serialize)]
struct Row {
    policy: String,
    efficiency: f64,
    final_memory_bytes: u64,
    peak_memory_bytes: u64,
    memory_fraction: f64,
    peak_store_reads_per_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    auto_regime3_start_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    auto_threshold_keys: Option<u64>,
}

impl Row {
    /// The table's cells, shared by the text table and the HTML report.
    fn cells(&self) -> [String; 6] {
        [
            self.policy.clone(),
            format!("{:.1}%", 100.0 * self.efficiency),
            human(self.final_memory_bytes),
            human(self.peak_memory_bytes),
            format!("{:.2}%", 100.0 * self.memory_fraction),
            format!("{:.0}", self.peak_store_reads_per_s),
        ]
    }
}

/// Runs every policy on `workload` (in parallel), with `progress` told each run's progress.
pub fn run_all(
    workload: WorkloadParams,
    store_params: StoreParams,
    segments: Option<&[pliant_parsplice::Segment]>,
    policies: &[PolicyKind],
    bar: &indicatif::ProgressBar,
) -> Result<Vec<RunReport>> {
    let done = Mutex::new(vec![0.0f64; policies.len()]);
    policies
        .par_iter()
        .enumerate()
        .map(|(i, p)| {
            let store = Store::temporary()?;
            let spec = RunSpec {
                policy: p.clone(),
                workload,
                store: store_params,
                interval: 10.0,
            };
            let src = match segments {
                Some(s) => Segments::Recorded(s.to_vec()),
                None => Segments::Model,
            };
            let report = pliant_parsplice::run(&spec, src, &store, None, &|f| {
                if let Ok(mut d) = done.lock() {
                    d[i] = f;
                    bar.set_position((d.iter().sum::<f64>() * 1000.0) as u64);
                }
            })?;
            Ok(report)
        })
        .collect()
}

/// Runs `demo`.
pub fn run(a: &Args) -> Result<ExitCode> {
    let positive = |x: f64| x.is_finite() && x > 0.0;
    if !(positive(a.hours) && positive(a.growth) && positive(a.temperature)) {
        bail!("--hours, --growth and --temperature must be positive");
    }
    let workload = WorkloadParams {
        growth_delay: a.growth,
        temperature: a.temperature,
        workers: a.workers,
        nodes: a.nodes.unwrap_or(if a.trace.is_some() { 1 } else { 8 }),
        hours: a.hours,
        seed: a.seed,
    };
    let segments = match &a.trace {
        Some(p) => Some(trace_segments(p, &workload)?),
        None => None,
    };
    let policies = policies();
    let bar = indicatif::ProgressBar::new(policies.len() as u64 * 1000).with_message(format!(
        "{} policies, {} h of ParSplice",
        policies.len(),
        a.hours
    ));
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:40}] {percent}% ({elapsed})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let t = std::time::Instant::now();
    let mut store = StoreParams::default();
    if let Some(p) = a.miss_penalty {
        if !(p.is_finite() && p >= 0.0) {
            bail!("--miss-penalty must be a non-negative number of seconds");
        }
        store.read_latency_seconds = p;
    }
    let reports = run_all(workload, store, segments.as_deref(), &policies, &bar)?;
    bar.finish_and_clear();
    let seconds = t.elapsed().as_secs_f64();
    let end = a.hours * 3600.0;
    let base = &reports[0];
    let rows: Vec<Row> = reports
        .iter()
        .map(|r| Row {
            policy: r.policy.clone(),
            efficiency: efficiency(r, base, end),
            final_memory_bytes: r.final_bytes,
            peak_memory_bytes: r.peak_bytes,
            memory_fraction: r.final_bytes as f64 / base.final_bytes.max(1) as f64,
            peak_store_reads_per_s: r.peak_store_reads_per_s,
            auto_regime3_start_s: r.auto.map(|x| x.regime3_start),
            auto_threshold_keys: r.auto.map(|x| x.threshold_keys),
        })
        .collect();
    write_report(&a.report, a, &workload, &reports, &rows)?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "hours": a.hours,
                "growth_delay": a.growth,
                "nodes": workload.nodes,
                "workers_per_node": workload.workers,
                "source": a.trace.as_ref().map_or("model".to_string(), |p| p.display().to_string()),
                "seconds": seconds,
                "policies": rows,
            }))?
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "ParSplice, {} h, growth delay {}, {} nodes × {} workers ({}), {:.1} s\n",
        a.hours,
        a.growth,
        workload.nodes,
        workload.workers,
        a.trace
            .as_ref()
            .map_or("model".to_string(), |p| p.display().to_string()),
        seconds
    );
    println!(
        "{:<22} {:>10} {:>13} {:>13} {:>11} {:>16}",
        "policy", "efficiency", "final memory", "peak memory", "% of unlim.", "peak store rd/s"
    );
    for r in &rows {
        let [policy, eff, fin, peak, frac, store] = r.cells();
        println!("{policy:<22} {eff:>10} {fin:>13} {peak:>13} {frac:>11} {store:>16}");
    }
    if let Some(r) = rows.iter().find(|r| r.auto_threshold_keys.is_some()) {
        println!(
            "\nauto: third regime began at {:.0} s with {} keys held; trimmed to the working set since.",
            r.auto_regime3_start_s.unwrap_or(0.0),
            r.auto_threshold_keys.unwrap_or(0)
        );
    }
    println!("\nreport: {}", a.report.join("index.html").display());
    Ok(ExitCode::SUCCESS)
}

fn trace_segments(p: &Path, w: &WorkloadParams) -> Result<Vec<pliant_parsplice::Segment>> {
    let opts = pliant_trace::ReadOptions {
        format: Some(pliant_trace::Format::ParSplice),
        ..pliant_trace::ReadOptions::default()
    };
    let recs = pliant_trace::reader(p, &opts)?
        .map(|r| r.map(|r| (r.op == pliant_trace::Op::Get, r.key)))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    if recs.is_empty() {
        bail!("{}: no ParSplice operations", p.display());
    }
    Ok(pliant_parsplice::segments_from_trace(recs, w))
}

/// `1.5 GB`.
pub fn human(bytes: u64) -> String {
    let b = bytes as f64;
    match b {
        x if x >= 1e9 => format!("{:.2} GB", x / 1e9),
        x if x >= 1e6 => format!("{:.1} MB", x / 1e6),
        x if x >= 1e3 => format!("{:.1} KB", x / 1e3),
        x => format!("{x:.0} B"),
    }
}

fn write_report(
    dir: &Path,
    a: &Args,
    w: &WorkloadParams,
    reports: &[RunReport],
    rows: &[Row],
) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let base = &reports[0];
    let shown: Vec<&RunReport> = reports
        .iter()
        .filter(|r| {
            [
                "unlimited",
                "lru-10",
                "lru-100000",
                "two-phase-100000-10",
                "auto",
            ]
            .contains(&r.policy.as_str())
        })
        .collect();
    // One line per shown policy, a point per tick.
    let lines = |f: &dyn Fn(&RunReport, &pliant_parsplice::Tick) -> Option<f64>| -> Vec<Series> {
        shown
            .iter()
            .map(|r| {
                Series::line(
                    r.policy.clone(),
                    r.ticks
                        .iter()
                        .filter_map(|k| f(r, k).map(|y| (k.t / 3600.0, y)))
                        .collect(),
                )
            })
            .collect()
    };
    let eff = lines(&|r, k| (k.t >= 600.0).then(|| 100.0 * efficiency(r, base, k.t)));
    let mem = lines(&|_, k| Some(k.bytes as f64 / 1e6));
    let store = lines(&|_, k| Some(k.store_reads_per_s));
    let reads = vec![Series::line(
        "reads/s (all WorkManagers)",
        base.ticks
            .iter()
            .map(|k| (k.t / 3600.0, k.reads as f64 / 10.0))
            .collect(),
    )];
    let charts = [
        (
            "efficiency",
            Chart {
                title: "Efficiency: trajectory relative to the unlimited cache (%)",
                x_label: "hours",
                y_label: "efficiency %",
                log_x: false,
                series: eff,
            },
        ),
        (
            "memory",
            Chart {
                title: "Cache memory, all WorkManagers (MB)",
                x_label: "hours",
                y_label: "MB",
                log_x: false,
                series: mem,
            },
        ),
        (
            "store",
            Chart {
                title: "Store reads per second (misses reaching the store)",
                x_label: "hours",
                y_label: "reads/s",
                log_x: false,
                series: store,
            },
        ),
        (
            "reads",
            Chart {
                title: "Workload: reads per second",
                x_label: "hours",
                y_label: "reads/s",
                log_x: false,
                series: reads,
            },
        ),
    ];
    let mut imgs = String::new();
    for (name, chart) in charts {
        let svg = format!("{name}.svg");
        draw(&dir.join(&svg), std::slice::from_ref(&chart))?;
        draw(
            &dir.join(format!("{name}.png")),
            std::slice::from_ref(&chart),
        )?;
        imgs.push_str(&format!("<img src=\"{svg}\" alt=\"{}\">\n", chart.title));
    }
    let mut table = String::from(
        "<tr><th>policy</th><th>efficiency</th><th>final memory</th><th>peak memory</th>\
         <th>% of unlimited</th><th>peak store reads/s</th></tr>\n",
    );
    for r in rows {
        let cells: String = r.cells().iter().map(|c| format!("<td>{c}</td>")).collect();
        table.push_str(&format!("<tr>{cells}</tr>\n"));
    }
    let html = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Pliant: ParSplice cache policies</title>\
         <style>body{{font-family:sans-serif;max-width:1040px;margin:2em auto}}\
         table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 10px;text-align:right}}\
         td:first-child{{text-align:left}}img{{width:100%;margin:1em 0}}</style></head><body>\
         <h1>ParSplice cache policies</h1><p>{} h of ParSplice, growth delay {}, {} nodes × {} workers, \
         source: {}. Efficiency = trajectory at the end relative to the unlimited cache; memory = \
         bytes held by all WorkManager caches at the end.</p><table>{table}</table>{imgs}</body></html>\n",
        a.hours,
        w.growth_delay,
        w.nodes,
        w.workers,
        a.trace
            .as_ref()
            .map_or("the calibrated model".to_string(), |p| p
                .display()
                .to_string())
    );
    std::fs::write(dir.join("index.html"), html)
        .with_context(|| format!("writing {}", dir.join("index.html").display()))?;
    Ok(())
}
