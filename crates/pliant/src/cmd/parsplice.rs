//! `pliant parsplice`: the ParSplice workload model's own tools: write its trace, calibrate it
//! against the real traces, and compare its efficiency predictions with measured runs.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use pliant_parsplice::{
    FjallStore, PolicyKind, RunSpec, Segments, StoreParams, WorkloadParams, efficiency,
};
use pliant_trace::{Op, ReadOptions, Record};
use serde::Serialize;

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
    /// Workers (one WorkManager).
    #[arg(long, default_value_t = 27)]
    workers: u32,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
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
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Arguments of `parsplice compare`.
#[derive(clap::Args)]
pub struct CompareArgs {
    /// Directory of the measured runs' `times.txt` files.
    #[arg(long, default_value = "../shared/results/parsplice-8node-policies")]
    results: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Runs a parsplice subcommand.
pub fn run(c: Command) -> Result<ExitCode> {
    match c {
        Command::Gen(a) => gen_cmd(&a),
        Command::Calibrate(a) => calibrate(&a),
        Command::Compare(a) => compare(&a),
    }
}

fn model_trace(w: WorkloadParams) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let spec = RunSpec {
        policy: PolicyKind::Unlimited,
        workload: w,
        store: StoreParams::default(),
        interval: 10.0,
    };
    pliant_parsplice::run(
        &spec,
        Segments::Model,
        &FjallStore::temporary()?,
        Some(&mut out),
        &|_| {},
    )?;
    Ok(out)
}

fn gen_cmd(a: &GenArgs) -> Result<ExitCode> {
    let w = WorkloadParams {
        growth_delay: a.growth,
        temperature: a.temperature,
        workers: a.workers,
        nodes: 1,
        hours: a.hours,
        seed: a.seed,
    };
    let bytes = model_trace(w)?;
    let f = std::fs::File::create(&a.output)
        .with_context(|| format!("creating {}", a.output.display()))?;
    if a.output.extension().is_some_and(|e| e == "gz") {
        let mut enc = flate2::write::GzEncoder::new(f, flate2::Compression::default());
        std::io::Write::write_all(&mut enc, &bytes)?;
        enc.finish()?;
    } else {
        let mut f = f;
        std::io::Write::write_all(&mut f, &bytes)?;
    }
    eprintln!("wrote {}", a.output.display());
    Ok(ExitCode::SUCCESS)
}

/// What the calibration compares, for one trace.
#[derive(Serialize)]
struct Profile {
    reads: u64,
    writes: u64,
    keys: u64,
    read_write_ratio: f64,
    peak_reads_per_s: f64,
    top_key_share: f64,
    /// Reads/s per 100 s.
    #[serde(skip)]
    rate: Vec<(f64, f64)>,
    /// Distinct keys so far, per 100 s.
    #[serde(skip)]
    keys_over_time: Vec<(f64, f64)>,
    /// Share of reads of the key of each popularity rank (1-based).
    #[serde(skip)]
    popularity: Vec<(f64, f64)>,
}

fn profile(path: &Path) -> Result<Profile> {
    let opts = ReadOptions {
        format: Some(pliant_trace::Format::ParSplice),
        ..ReadOptions::default()
    };
    let recs: Vec<Record> = pliant_trace::reader(path, &opts)?.collect::<Result<_, _>>()?;
    let t0 = recs.first().map_or(0, |r| r.time);
    let mut per_bucket: Vec<u64> = Vec::new();
    let mut keys_at: Vec<u64> = Vec::new();
    let mut seen = HashSet::new();
    let mut counts: HashMap<u64, u64> = HashMap::new();
    let (mut reads, mut writes) = (0u64, 0u64);
    let mut per_second: HashMap<u64, u64> = HashMap::new();
    for r in &recs {
        let b = ((r.time - t0) / 100) as usize;
        if per_bucket.len() <= b {
            per_bucket.resize(b + 1, 0);
            keys_at.resize(b + 1, seen.len() as u64);
        }
        seen.insert(r.key);
        keys_at[b] = seen.len() as u64;
        if r.op == Op::Get {
            reads += 1;
            per_bucket[b] += 1;
            *counts.entry(r.key).or_default() += 1;
            *per_second.entry(r.time).or_default() += 1;
        } else {
            writes += 1;
        }
    }
    let mut pop: Vec<u64> = counts.into_values().collect();
    pop.sort_unstable_by(|a, b| b.cmp(a));
    Ok(Profile {
        reads,
        writes,
        keys: seen.len() as u64,
        read_write_ratio: reads as f64 / writes.max(1) as f64,
        peak_reads_per_s: per_second.values().copied().max().unwrap_or(0) as f64,
        top_key_share: pop.first().copied().unwrap_or(0) as f64 / reads.max(1) as f64,
        rate: per_bucket
            .iter()
            .enumerate()
            .map(|(i, &n)| (i as f64 / 36.0, n as f64 / 100.0))
            .collect(),
        keys_over_time: keys_at
            .iter()
            .enumerate()
            .map(|(i, &n)| (i as f64 / 36.0, n as f64))
            .collect(),
        popularity: pop
            .iter()
            .take(5000)
            .enumerate()
            .map(|(i, &n)| ((i + 1) as f64, 100.0 * n as f64 / reads.max(1) as f64))
            .collect(),
    })
}

fn calibrate(a: &CalibrateArgs) -> Result<ExitCode> {
    std::fs::create_dir_all(&a.out)?;
    let tmp = tempfile::tempdir()?;
    let mut summary = Vec::new();
    for (name, growth) in [("d100K", 100_000.0), ("d1M", 1_000_000.0)] {
        let real = a.traces.join(name).join("rank4.csv.gz");
        if !real.exists() {
            bail!("{} not found (pass --traces DIR)", real.display());
        }
        let model_path = tmp.path().join(format!("model-{name}.csv"));
        std::fs::write(
            &model_path,
            model_trace(WorkloadParams {
                growth_delay: growth,
                nodes: 1,
                hours: 15_000.0 / 3600.0,
                ..WorkloadParams::default()
            })?,
        )?;
        let (m, r) = (profile(&model_path)?, profile(&real)?);
        let pair = |f: fn(&Profile) -> Vec<(f64, f64)>| {
            vec![Series::line("real", f(&r)), Series::line("model", f(&m))]
        };
        let charts = [
            Chart {
                title: "Reads per second (100-s means)",
                x_label: "hours",
                y_label: "reads/s",
                log_x: false,
                series: pair(|p| p.rate.clone()),
            },
            Chart {
                title: "Distinct keys so far",
                x_label: "hours",
                y_label: "keys",
                log_x: false,
                series: pair(|p| p.keys_over_time.clone()),
            },
            Chart {
                title: "Key popularity: share of reads by rank",
                x_label: "rank",
                y_label: "% of reads",
                log_x: true,
                series: pair(|p| p.popularity.clone()),
            },
        ];
        for ext in ["png", "svg"] {
            draw(&a.out.join(format!("calibration-{name}.{ext}")), &charts)?;
        }
        summary.push(serde_json::json!({"trace": name, "real": r, "model": m}));
        if !a.json {
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
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        eprintln!("charts in {}", a.out.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Trajectory of a measured run at `t` seconds (`times.txt`: `seconds trajectory other`).
fn measured(dir: &Path, prefix: &str) -> Result<Vec<(f64, f64)>> {
    let entry = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok())
        .find(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .with_context(|| format!("no {prefix}* in {}", dir.display()))?;
    let text = std::fs::read_to_string(entry.path())?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let mut f = l.split_whitespace();
            let t = f.next().and_then(|x| x.parse().ok());
            let v = f.next().and_then(|x| x.parse().ok());
            t.zip(v).with_context(|| {
                format!(
                    "{}:{}: expected `seconds trajectory`",
                    entry.path().display(),
                    i + 1
                )
            })
        })
        .collect()
}

fn at(series: &[(f64, f64)], t: f64) -> f64 {
    series
        .iter()
        .find(|(s, _)| *s >= t)
        .or(series.last())
        .map_or(0.0, |p| p.1)
}

#[derive(Serialize)]
struct CompareRow {
    policy: String,
    measured_2_5h: f64,
    model_2_5h: f64,
    measured_4_2h: f64,
    model_4_2h: f64,
}

fn compare(a: &CompareArgs) -> Result<ExitCode> {
    let runs: [(PolicyKind, &str); 7] = [
        (PolicyKind::Unlimited, "scale-cachelimit-8n-unlimited"),
        (
            PolicyKind::Lru(100_000),
            "scale-cachelimit-8n-100000-72005-LRU",
        ),
        (PolicyKind::Lru(10), "scale-cachelimit-8n-10-"),
        (
            PolicyKind::TwoPhase {
                absorb: 100_000,
                target: 10,
            },
            "scale-cachedecrease-8n-10-",
        ),
        (
            PolicyKind::TwoPhase {
                absorb: 100_000,
                target: 100,
            },
            "scale-cachedecrease-8n-100-",
        ),
        (
            PolicyKind::TwoPhase {
                absorb: 100_000,
                target: 1000,
            },
            "scale-cachedecrease-8n-1000-",
        ),
        (
            PolicyKind::TwoPhase {
                absorb: 100_000,
                target: 10000,
            },
            "scale-cachedecrease-8n-10000-",
        ),
    ];
    let workload = WorkloadParams {
        hours: 15_000.0 / 3600.0,
        ..WorkloadParams::default()
    };
    let policies: Vec<PolicyKind> = runs.iter().map(|(p, _)| p.clone()).collect();
    let bar = indicatif::ProgressBar::new(1000);
    let reports = pliant_parsplice::study::run_all(
        workload,
        StoreParams::default(),
        Segments::Model,
        &policies,
        &|f| bar.set_position((f * 1000.0) as u64),
    )?;
    bar.finish_and_clear();
    let base_m = measured(&a.results, runs[0].1)?;
    let mut rows = Vec::new();
    for ((p, prefix), rep) in runs.iter().zip(&reports) {
        let m = measured(&a.results, prefix)?;
        let eff = |t: f64| at(&m, t) / at(&base_m, t);
        rows.push(CompareRow {
            policy: p.label(),
            measured_2_5h: eff(9_000.0),
            model_2_5h: efficiency(rep, &reports[0], 9_000.0),
            measured_4_2h: eff(15_000.0),
            model_4_2h: efficiency(rep, &reports[0], 15_000.0),
        });
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("efficiency (trajectory / unlimited), 8 nodes, growth delay 100,000");
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
    Ok(ExitCode::SUCCESS)
}
