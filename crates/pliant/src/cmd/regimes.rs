//! `pliant regimes`: find a run's regimes (k-means over reads/s) and the fan detector's
//! superbasins, and the cache thresholds they suggest.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Result, bail};
use serde::Serialize;

use super::args::{Json, Plot, Seed};
use super::input::TraceArgs;
use crate::plot::{Chart, Series, draw};

/// Arguments of `regimes`.
#[derive(clap::Args)]
#[command(after_help = "Example:
  pliant regimes ../shared/traces/parsplice/d100K/rank4.csv.gz --plot regimes.png")]
#[command(mut_arg("seed", |a| a.help("k-means seed")))]
#[command(mut_arg("plot", |a| a.help("Chart of reads/s coloured by regime, with the centroids (.png or .svg)")))]
pub struct Args {
    /// The trace.
    trace: PathBuf,
    #[command(flatten)]
    input: TraceArgs,
    /// Number of regimes (clusters).
    #[arg(long, default_value_t = 4)]
    k: usize,
    /// Seconds per reads/s point (ParSplice's counters come every 10 s).
    #[arg(long, default_value_t = 10)]
    bucket: u64,
    #[command(flatten)]
    rng: Seed,
    #[command(flatten)]
    output: Json,
    #[command(flatten)]
    chart: Plot,
}

#[derive(Serialize)]
struct Output {
    trace: String,
    reads: u64,
    distinct_keys: u64,
    regimes: Vec<pliant_regime::Regime>,
    /// Keys an unlimited cache held when the third regime began: the studies' threshold.
    suggested_threshold_keys: Option<u64>,
    fan_regimes: usize,
    /// Id span of the newest fan regimes (the keys still in use at the end).
    newest_fan_spans: Vec<u64>,
    fan_suggested_keys: u64,
}

/// Runs `regimes`.
pub fn run(a: &Args) -> Result<ExitCode> {
    if a.bucket == 0 {
        bail!("--bucket must be at least 1 second");
    }
    let reader = pliant_trace::reader(&a.trace, &a.input.options()?)?;
    let profile = pliant_trace::profile(reader, a.bucket, true)?;
    let points = profile.read_rates();
    let pliant_regime::Analysis {
        regimes: found,
        threshold,
        fans,
    } = pliant_regime::analyse(
        &points,
        &profile.keys_held(),
        &profile.accesses,
        a.k,
        a.rng.seed,
    )?;
    let out = Output {
        trace: a.trace.display().to_string(),
        reads: profile.reads,
        distinct_keys: profile.distinct_keys,
        suggested_threshold_keys: threshold.map(|t| t.keys),
        fan_regimes: fans.len(),
        newest_fan_spans: fans.iter().take(5).map(|f| f.span()).collect(),
        fan_suggested_keys: pliant_regime::fan_span(&fans),
        regimes: found.regimes.clone(),
    };
    if let Some(p) = &a.chart.plot {
        let mut series: Vec<Series> = (0..found.regimes.len())
            .map(|r| {
                Series::dots(
                    format!("regime {}", r + 1),
                    points
                        .iter()
                        .zip(&found.labels)
                        .filter(|(_, l)| **l == r)
                        .map(|(p, _)| (p.0 / 3600.0, p.1))
                        .collect(),
                )
            })
            .collect();
        series.push(Series::dots(
            "centroids",
            found
                .regimes
                .iter()
                .map(|r| (r.centroid.0 / 3600.0, r.centroid.1))
                .collect(),
        ));
        draw(
            p,
            &[Chart {
                title: "Reads per second by regime (k-means), with centroids",
                x_label: "hours",
                y_label: "reads/s",
                log_x: false,
                series,
            }],
        )?;
        eprintln!("wrote {}", p.display());
    }
    if a.output.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{}: {} reads, {} keys",
        out.trace, out.reads, out.distinct_keys
    );
    println!("\nregime     start (s)    end (s)   mean reads/s   points");
    for r in &out.regimes {
        println!(
            "{:>6} {:>13.0} {:>10.0} {:>14.1} {:>8}",
            r.index + 1,
            r.start,
            r.end,
            r.mean_rate,
            r.points
        );
    }
    match out.suggested_threshold_keys {
        Some(k) => println!("\nsuggested threshold (keys held when regime 3 began): {k}"),
        None => println!("\nfewer than three regimes: no threshold suggested"),
    }
    println!(
        "fan detector: {} regimes; newest spans {:?}; total span {} keys",
        out.fan_regimes, out.newest_fan_spans, out.fan_suggested_keys
    );
    Ok(ExitCode::SUCCESS)
}
