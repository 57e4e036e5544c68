//! `pliant parsplice`: the ParSplice workload model's own tools: write its trace, calibrate it
//! against the real traces, and compare its efficiency predictions with measured runs.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use pliant_parsplice::calibration::{self, Calibration};
use pliant_parsplice::model::{self, StoreParams};
use pliant_parsplice::{WorkloadParams, measured};
use pliant_trace::Profile;
use serde::Serialize;

use super::args::{Json, Seed};
use super::demo::{grouped, human};
use crate::plot::{Chart, Series, draw};

/// ParSplice model subcommands.
#[derive(clap::Subcommand)]
pub enum Command {
    /// Write the model's trace of one WorkManager, in the real traces' CSV format.
    /// Example: pliant parsplice gen --hours 4.2 --growth 100000 model-d100K.csv.gz
    Gen(GenArgs),
    /// Compare the model with the real traces (reads/s, distinct keys, key popularity, read:write)
    /// and draw them side by side.
    Calibrate(CalibrateArgs),
    /// The model's efficiency for the measured 8-node policy runs, beside the measured values.
    Compare(CompareArgs),
}

/// Arguments of `parsplice gen`.
#[derive(clap::Args)]
pub struct GenArgs {
    /// Hours of simulated time.
    #[arg(long, default_value_t = 4.2)]
    hours: f64,
    /// Growth delay (ps).
    #[arg(long, default_value_t = 100_000.0)]
    growth: f64,
    /// Relative temperature.
    #[arg(long, default_value_t = 1.0)]
    temperature: f64,
    /// Workers (one WorkManager; the traces' 27 by default, to compare with them).
    #[arg(long, default_value_t = pliant_parsplice::model::TRACED_WORKERS)]
    workers: u32,
    #[command(flatten)]
    rng: Seed,
    /// Writes the trace with one of the model's constants changed: NAME=VALUE, repeatable
    /// (the names are `parsplice compare --set`'s).
    #[arg(long = "set", value_name = "NAME=VALUE", value_parser = knob)]
    knobs: Vec<(String, f64)>,
    /// Output CSV (`.gz` compresses).
    output: PathBuf,
}

/// Arguments of `parsplice calibrate`.
#[derive(clap::Args)]
pub struct CalibrateArgs {
    /// Directory holding `d100K/rank4.csv.gz` and `d1M/rank4.csv.gz`.
    #[arg(long, default_value = "../shared/traces/parsplice")]
    traces: PathBuf,
    /// Where to write the charts.
    #[arg(long, default_value = "pliant-report/calibration")]
    out: PathBuf,
    #[command(flatten)]
    output: Json,
}

/// Arguments of `parsplice compare`.
#[derive(clap::Args)]
pub struct CompareArgs {
    /// Directory of the measured runs' `times.txt` files.
    #[arg(long, default_value = "../shared/results/parsplice-8node-policies")]
    results: PathBuf,
    /// Runs the model with one of its constants changed, to see how the comparison moves with
    /// it: NAME=VALUE, repeatable. Where segments start and the stall: p_current, p_move,
    /// recency_shape, p_hop, lost_share, heal_scale, heal_decay_segments; the store:
    /// miss_penalty, store_network_seconds, store_reads_per_s, store_puts_per_s,
    /// store_stall_seconds; the rates and sizes fitted to the measured runs: r0, a0, p0,
    /// segment_md_ps, k0, discovery_segments, value_bytes_base, value_bytes_per_atom (each the
    /// constant of that name in docs/parsplice.md's table).
    #[arg(long = "set", value_name = "NAME=VALUE", value_parser = knob)]
    knobs: Vec<(String, f64)>,
    /// Seed of the model's runs (the stalls are chance events: compare several seeds).
    #[command(flatten)]
    rng: Seed,
    #[command(flatten)]
    output: Json,
}

fn knob(s: &str) -> std::result::Result<(String, f64), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: expected NAME=VALUE"))?;
    let v: f64 = v
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: {v:?} is not a number"))?;
    Ok((k.trim().to_string(), v))
}

/// Runs a parsplice subcommand.
pub fn run(c: Command) -> Result<ExitCode> {
    match c {
        Command::Gen(a) => gen_cmd(&a),
        Command::Calibrate(a) => calibrate(&a),
        Command::Compare(a) => compare(&a),
    }
}

fn gen_cmd(a: &GenArgs) -> Result<ExitCode> {
    let mut w = WorkloadParams {
        growth_delay: a.growth,
        temperature: a.temperature,
        workers: a.workers,
        nodes: 1,
        hours: a.hours,
        seed: a.rng.seed,
        ..WorkloadParams::default()
    };
    let mut store = StoreParams::default();
    model::set_knobs(&mut w, &mut store, &a.knobs).map_err(|e| anyhow::anyhow!("--set: {e}"))?;
    if store != StoreParams::default() {
        anyhow::bail!(
            "--set: miss_penalty and store_* are the store's, which a trace of reads and puts \
             does not show"
        );
    }
    calibration::write_model_trace(&a.output, w)?;
    eprintln!("wrote {}", a.output.display());
    Ok(ExitCode::SUCCESS)
}

/// What the calibration reports of one trace.
#[derive(Serialize)]
struct Summary {
    reads: u64,
    writes: u64,
    keys: u64,
    read_write_ratio: f64,
    peak_reads_per_s: f64,
    top_key_share: f64,
}

impl Summary {
    fn of(p: &Profile) -> Self {
        Self {
            reads: p.reads,
            writes: p.writes,
            keys: p.distinct_keys,
            read_write_ratio: p.read_write_ratio(),
            peak_reads_per_s: p.peak_reads_per_second as f64,
            top_key_share: p.top_key_share(),
        }
    }
}

/// The real and the model's profile side by side: reads/s, distinct keys, key popularity.
fn charts(c: &Calibration) -> [Chart<'static>; 3] {
    let hours = |v: Vec<(f64, f64)>| v.into_iter().map(|(t, y)| (t / 3600.0, y)).collect();
    let rate = |p: &Profile| hours(p.read_rates());
    let keys = |p: &Profile| {
        hours(
            p.keys_held()
                .into_iter()
                .map(|(t, n)| (t, n as f64))
                .collect(),
        )
    };
    let popularity = |p: &Profile| {
        p.popularity
            .iter()
            .take(5000)
            .enumerate()
            .map(|(i, &n)| ((i + 1) as f64, 100.0 * n as f64 / p.reads.max(1) as f64))
            .collect()
    };
    let pair = |f: &dyn Fn(&Profile) -> Vec<(f64, f64)>| {
        vec![
            Series::line("real", f(&c.real)),
            Series::line("model", f(&c.model)),
        ]
    };
    [
        Chart {
            title: "Reads per second (100-s means)",
            x_label: "hours",
            y_label: "reads/s",
            log_x: false,
            series: pair(&rate),
        },
        Chart {
            title: "Distinct keys so far",
            x_label: "hours",
            y_label: "keys",
            log_x: false,
            series: pair(&keys),
        },
        Chart {
            title: "Key popularity: share of reads by rank",
            x_label: "rank",
            y_label: "% of reads",
            log_x: true,
            series: pair(&popularity),
        },
    ]
}

fn calibrate(a: &CalibrateArgs) -> Result<ExitCode> {
    std::fs::create_dir_all(&a.out)?;
    let runs = calibration::calibrate(&a.traces)?;
    let mut summary = Vec::new();
    for c in &runs {
        let name = c.trace;
        for ext in ["png", "svg"] {
            draw(&a.out.join(format!("calibration-{name}.{ext}")), &charts(c))?;
        }
        let (r, m) = (Summary::of(&c.real), Summary::of(&c.model));
        if !a.output.json {
            println!("{name} (4.2 h, one WorkManager, 27 workers)");
            println!("                      real       model");
            println!("  reads        {:>11} {:>11}", r.reads, m.reads);
            println!("  writes       {:>11} {:>11}", r.writes, m.writes);
            println!("  keys         {:>11} {:>11}", r.keys, m.keys);
            println!(
                "  read:write   {:>11.1} {:>11.1}",
                r.read_write_ratio, m.read_write_ratio
            );
            println!(
                "  peak reads/s {:>11.0} {:>11.0}",
                r.peak_reads_per_s, m.peak_reads_per_s
            );
            println!(
                "  top key      {:>10.2}% {:>10.2}%",
                100.0 * r.top_key_share,
                100.0 * m.top_key_share
            );
        }
        summary.push(serde_json::json!({"trace": name, "real": r, "model": m}));
    }
    if a.output.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        eprintln!("charts in {}", a.out.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn compare(a: &CompareArgs) -> Result<ExitCode> {
    let bar = indicatif::ProgressBar::new(1000);
    let rows = measured::compare(&a.results, &a.knobs, a.rng.seed, &|f| {
        bar.set_position((f * 1000.0) as u64)
    })?;
    bar.finish_and_clear();
    if a.output.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "efficiency (trajectory / unlimited), the measured runs' layout (one WorkManager, 251 workers), growth delay 100,000"
    );
    println!(
        "{:<24} {:>9} {:>8} {:>7}   {:>9} {:>8} {:>7}",
        "policy", "2.5 h real", "model", "gap", "4.2 h real", "model", "gap"
    );
    for r in &rows {
        println!(
            "{:<24} {:>9.1}% {:>7.1}% {:>+6.1}   {:>9.1}% {:>7.1}% {:>+6.1}",
            r.policy,
            100.0 * r.measured_2_5h,
            100.0 * r.model_2_5h,
            100.0 * (r.model_2_5h - r.measured_2_5h),
            100.0 * r.measured_4_2h,
            100.0 * r.model_4_2h,
            100.0 * (r.model_4_2h - r.measured_4_2h)
        );
    }
    let at = |s: Option<f64>| s.map_or("none".to_string(), |t| format!("{t:.0} s"));
    println!(
        "\nstops (the trajectory flat from then to the end, {:.0} s or more) and the model's stalls",
        measured::STOP_MIN_SECONDS
    );
    println!(
        "{:<24} {:>10} {:>10} {:>7} {:>12}",
        "policy", "real stop", "model", "stalls", "store reads"
    );
    for r in &rows {
        println!(
            "{:<24} {:>10} {:>10} {:>7} {:>12}",
            r.policy,
            at(r.measured_stop_s),
            at(r.model_stop_s),
            r.model_stalls,
            grouped(r.model_store_reads)
        );
    }
    println!(
        "\ntrajectory (ps) and what the model's caches held (all WorkManagers); the measured \
         WorkManager's keys and bytes: python3 tools/fit/parsplice_counters.py"
    );
    println!(
        "{:<24} {:>11} {:>11} {:>11} {:>11} {:>10} {:>10} {:>10} {:>10}",
        "policy",
        "2.5 h real",
        "model",
        "4.2 h real",
        "model",
        "keys 2.5 h",
        "4.2 h",
        "bytes 2.5 h",
        "4.2 h"
    );
    for r in &rows {
        println!(
            "{:<24} {:>11} {:>11} {:>11} {:>11} {:>10} {:>10} {:>10} {:>10}",
            r.policy,
            grouped(r.measured_trajectory_2_5h.round() as u64),
            grouped(r.model_trajectory_2_5h.round() as u64),
            grouped(r.measured_trajectory_4_2h.round() as u64),
            grouped(r.model_trajectory_4_2h.round() as u64),
            grouped(r.model_keys_held_2_5h),
            grouped(r.model_keys_held_4_2h),
            human(r.model_bytes_held_2_5h),
            human(r.model_bytes_held_4_2h)
        );
    }
    Ok(ExitCode::SUCCESS)
}
