//! `pliant trace`: statistics, conversion and generation of traces.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use pliant_trace::{Popularity, StatsBuilder, TraceStats, Workload};

use super::args::{Json, Plot, Seed};
use super::input::TraceArgs;
use crate::plot::{Chart, Series, draw};

/// Trace subcommands.
#[derive(clap::Subcommand)]
pub enum Command {
    /// Summarise a trace: requests, reads/writes, distinct keys, working set, one-hit wonders,
    /// top keys, reads per second and distinct keys per second over time.
    Stats(StatsArgs),
    /// Convert a trace to libCacheSim's oracleGeneral format, with the next-access times that
    /// Belady's MIN needs. Example: pliant trace convert rank4.csv.gz --to oracle-general
    /// rank4.oracleGeneral.gz
    Convert(ConvertArgs),
    /// Write a seeded synthetic trace (oracleGeneral, with next-access times).
    /// Example: pliant trace gen --dist zipf --alpha 1.0 --keys 1000000 --requests 20000000
    /// zipf.oracleGeneral
    Gen(GenArgs),
}

/// Arguments of `trace stats`.
#[derive(clap::Args)]
#[command(mut_arg("json", |a| a.help("Print JSON instead of text")))]
#[command(mut_arg("plot", |a| a.help("Write charts (PNG and SVG) of reads/s and distinct keys/s into this directory").value_name("DIR")))]
pub struct StatsArgs {
    /// The trace file.
    trace: PathBuf,
    #[command(flatten)]
    input: TraceArgs,
    /// How many of the most requested keys to list.
    #[arg(long, default_value_t = 10)]
    top: usize,
    #[command(flatten)]
    output: Json,
    #[command(flatten)]
    chart: Plot,
}

/// Arguments of `trace convert`.
#[derive(clap::Args)]
pub struct ConvertArgs {
    /// The trace to read.
    input_trace: PathBuf,
    #[command(flatten)]
    input: TraceArgs,
    /// Output format (only oracle-general is written).
    #[arg(long, default_value = "oracle-general")]
    to: String,
    /// Output file (`.gz` compresses).
    output: PathBuf,
}

/// Arguments of `trace gen`.
#[derive(clap::Args)]
#[command(mut_arg("seed", |a| a.help("RNG seed")))]
pub struct GenArgs {
    /// Popularity: zipf or uniform.
    #[arg(long, default_value = "zipf")]
    dist: String,
    /// Zipf exponent.
    #[arg(long, default_value_t = 1.0)]
    alpha: f64,
    /// Distinct keys.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Requests.
    #[arg(long, default_value_t = 1_000_000)]
    requests: u64,
    /// Object size in bytes.
    #[arg(long, default_value_t = 1)]
    size: u32,
    /// Requests per second of trace time.
    #[arg(long, default_value_t = 10_000)]
    rate: u64,
    #[command(flatten)]
    rng: Seed,
    /// Output file (`.gz` compresses).
    output: PathBuf,
}

/// Runs a trace subcommand.
pub fn run(c: Command) -> Result<ExitCode> {
    match c {
        Command::Stats(a) => stats(&a),
        Command::Convert(a) => convert(&a),
        Command::Gen(a) => generate(&a),
    }
}

fn stats(a: &StatsArgs) -> Result<ExitCode> {
    let mut rd = pliant_trace::reader(&a.trace, &a.input.options()?)?;
    let mut b = StatsBuilder::new();
    for r in rd.by_ref() {
        b.add(&r?);
    }
    let skipped = rd.skipped();
    let s = b.finish(a.top);
    if let Some(dir) = &a.chart.plot {
        std::fs::create_dir_all(dir)?;
        for ext in ["png", "svg"] {
            draw(&dir.join(format!("trace-stats.{ext}")), &charts(&s))?;
        }
        eprintln!("wrote {}/trace-stats.png and .svg", dir.display());
    }
    if a.output.json {
        let mut v = serde_json::to_value(&s)?;
        v["skipped_lines"] = skipped.into();
        v["warnings"] = rd.warnings().into();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("trace            {}", a.trace.display());
    println!("requests         {}", s.requests);
    println!(
        "reads / writes   {} / {} ({} deletes){}",
        s.reads,
        s.writes,
        s.deletes,
        // The same trace as CSV and as oracleGeneral must not look like two traces.
        if pliant_trace::format_of(&a.trace, &a.input.options()?)?
            == pliant_trace::Format::OracleGeneral
        {
            " (oracleGeneral has no operation field: every request reads)"
        } else {
            ""
        }
    );
    if s.writes > 0 {
        println!("read:write       {:.1}:1", s.reads as f64 / s.writes as f64);
    }
    println!("distinct keys    {}", s.distinct_keys);
    println!("working set      {} bytes", s.working_set_bytes);
    println!(
        "one-hit wonders  {} ({:.1}% of keys)",
        s.one_hit_wonders,
        100.0 * s.one_hit_wonder_ratio
    );
    println!(
        "time span        {} s ({} .. {})",
        s.time_span.1 - s.time_span.0,
        s.time_span.0,
        s.time_span.1
    );
    let peak = s.reads_per_second.iter().map(|x| x.1).max().unwrap_or(0);
    println!("peak reads/s     {peak}");
    println!("top keys:");
    for k in &s.top_keys {
        println!(
            "  {:>20}  {:>10} requests  {:>6.2}%",
            k.key,
            k.requests,
            100.0 * k.share
        );
    }
    if skipped > 0 {
        println!("skipped          {skipped} malformed lines (--lenient)");
    }
    Ok(ExitCode::SUCCESS)
}

fn charts(s: &TraceStats) -> Vec<Chart<'static>> {
    vec![
        Chart {
            title: "Reads per second",
            x_label: "trace time (s)",
            y_label: "reads/s",
            log_x: false,
            series: vec![Series {
                label: "reads/s".into(),
                dots: false,
                points: s
                    .reads_per_second
                    .iter()
                    .map(|&(t, n)| (t as f64, n as f64))
                    .collect(),
            }],
        },
        Chart {
            title: "Distinct keys per 1-second window",
            x_label: "trace time (s)",
            y_label: "distinct keys",
            log_x: false,
            series: vec![Series::line(
                "distinct keys",
                s.distinct_keys_per_second
                    .iter()
                    .map(|&(t, n)| (t as f64, n as f64))
                    .collect(),
            )],
        },
    ]
}

fn convert(a: &ConvertArgs) -> Result<ExitCode> {
    if a.to.parse::<pliant_trace::Format>()? != pliant_trace::Format::OracleGeneral {
        bail!("--to {}: only oracle-general can be written", a.to);
    }
    let bar = indicatif::ProgressBar::new_spinner();
    let done = pliant_trace::convert_to_oracle_general(
        &a.input_trace,
        &a.input.options()?,
        &a.output,
        &|n| bar.set_position(n),
    )?;
    bar.finish_and_clear();
    eprintln!(
        "wrote {} records to {}{}",
        done.records,
        a.output.display(),
        if done.skipped > 0 {
            format!(" ({} malformed lines skipped)", done.skipped)
        } else {
            String::new()
        }
    );
    if done.writes > 0 {
        eprintln!(
            "warning: {} of them were writes or deletes, written as plain requests: \
             oracleGeneral has no operation field, so libCacheSim and `pliant sim` replay them \
             as reads (pass --ops reads to keep only the reads)",
            done.writes
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn generate(a: &GenArgs) -> Result<ExitCode> {
    let workload = Workload {
        popularity: Popularity::named(&a.dist, a.alpha)?,
        keys: a.keys,
        requests: a.requests,
        size: a.size,
        rate: a.rate,
        seed: a.rng.seed,
    };
    let n = pliant_trace::write_workload(&a.output, workload).context("trace gen")?;
    eprintln!("wrote {n} requests to {}", a.output.display());
    Ok(ExitCode::SUCCESS)
}
