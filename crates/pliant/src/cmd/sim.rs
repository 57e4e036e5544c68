//! `pliant sim`: replay a trace through many cache configurations in one pass.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use pliant_cache::Capacity;
use pliant_policy::PolicySource;
use pliant_sim::{Config, PolicySpec, RunResult, SimOptions};

use super::args::{Json, Plot, PolicyParams};
use super::input::TraceArgs;
use crate::plot::{Chart, Series, draw};

/// Arguments of `sim`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  pliant sim zipf.oracleGeneral --algo lru,arc,sieve,s3fifo,belady --size 1000keys,10000keys --plot mrc.png
  pliant sim rank4.csv.gz --algo lru --size 100keys,10000keys,100000keys --json
  pliant sim rank4.csv.gz --algo lru --size unlimited \\
      --policy policies/parsplice-absorb-trim.lua --param absorb=10000 --param target=1000 \\
      --interval 10 --plot two-phase.png")]
#[command(mut_arg("json", |a| a.help("Print a JSON array, one object per configuration")))]
#[command(mut_arg("plot", |a| a.help("Write charts here (.png or .svg): miss ratio over size; with a timeline, also misses/s and cache size over time in FILE-timeline.EXT")))]
pub struct Args {
    /// The trace file.
    trace: PathBuf,
    #[command(flatten)]
    input: TraceArgs,
    /// Algorithms, comma-separated: lru, fifo, clock, lfu, arc, sieve, s3fifo, wtinylfu, belady
    /// (Belady needs next-access times: convert the trace to oracle-general first).
    #[arg(long, default_value = "lru", value_delimiter = ',')]
    algo: Vec<String>,
    /// Cache sizes, comma-separated: bytes (4096, 128MiB, 1GB), keys (1000keys) or unlimited.
    #[arg(long, required = true, value_delimiter = ',')]
    size: Vec<String>,
    /// Count every object as size 1.
    #[arg(long)]
    ignore_size: bool,
    /// A policy (Lua) that resizes every cache: when `when` holds, trim to `howmuch` keys.
    #[arg(long, num_args = 1.., value_name = "FILES")]
    policy: Vec<PathBuf>,
    #[command(flatten)]
    params: PolicyParams,
    /// Trace time between policy decisions and timeline points, in whole seconds (10s, 2m, 1h,
    /// or plain seconds).
    #[arg(long, value_name = "DURATION", value_parser = whole_seconds)]
    interval: Option<u64>,
    #[command(flatten)]
    output: Json,
    #[command(flatten)]
    chart: Plot,
}

/// Runs `sim`.
pub fn run(a: &Args) -> Result<ExitCode> {
    let opts = a.input.options()?;
    let mut configs = Vec::new();
    for algo in &a.algo {
        pliant_cache::build(algo, Capacity::Keys(1))?;
        for s in &a.size {
            configs.push(Config {
                algo: algo.clone(),
                capacity: s.parse()?,
            });
        }
    }
    let policy = if a.policy.is_empty() {
        None
    } else {
        Some(PolicySpec {
            source: PolicySource::from_paths(&a.policy)?,
            params: a.params.params.iter().cloned().collect(),
        })
    };
    let sim = SimOptions {
        ignore_size: a.ignore_size,
        interval: a.interval,
        policy,
        ..SimOptions::default()
    };
    let bar = indicatif::ProgressBar::new_spinner().with_message(format!(
        "replaying {} through {} configurations",
        a.trace.display(),
        configs.len()
    ));
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {msg}: {human_pos} records ({per_sec})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    let results =
        pliant_sim::replay_file(&a.trace, &opts, &configs, &sim, &|n| bar.set_position(n))?;
    bar.finish_and_clear();

    if let Some(p) = &a.chart.plot {
        plot(p, &results)?;
    }
    if a.output.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        print_table(&results);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_table(results: &[RunResult]) {
    println!(
        "{:<10} {:>14} {:>11} {:>11} {:>10} {:>10} {:>11} {:>9}",
        "algo", "size", "requests", "misses", "miss ratio", "byte miss", "peak keys", "Mreq/s"
    );
    for r in results {
        println!(
            "{:<10} {:>14} {:>11} {:>11} {:>10.4} {:>10.4} {:>11} {:>9.2}",
            r.algo,
            r.size,
            r.requests,
            r.misses,
            r.miss_ratio,
            r.byte_miss_ratio,
            r.peak_keys,
            r.mreq_per_s
        );
        if !r.resizes.is_empty() {
            let shown: Vec<String> = r
                .resizes
                .iter()
                .take(5)
                .map(|(t, n)| format!("t={t}s → {n} keys"))
                .collect();
            println!(
                "           policy resized {} times: {}{}",
                r.resizes.len(),
                shown.join(", "),
                if r.resizes.len() > 5 { ", …" } else { "" }
            );
        }
    }
    if let Some(r) = results.first() {
        println!(
            "\n{} configurations, one pass, {:.2} s",
            results.len(),
            r.seconds
        );
    }
}

/// A result's size label as a chart coordinate; `unlimited` has none.
fn size_value(size: &str) -> Option<f64> {
    match size.parse::<Capacity>().ok()? {
        Capacity::Keys(u64::MAX) | Capacity::Bytes(u64::MAX) => None,
        c => Some(c.amount() as f64),
    }
}

fn plot(path: &std::path::Path, results: &[RunResult]) -> Result<()> {
    let mut by_algo: Vec<Series> = Vec::new();
    for r in results {
        let Some(x) = size_value(&r.size) else {
            continue;
        };
        match by_algo.iter_mut().find(|s| s.label == r.algo) {
            Some(s) => s.points.push((x, r.miss_ratio)),
            None => by_algo.push(Series::line(r.algo.clone(), vec![(x, r.miss_ratio)])),
        }
    }
    for s in &mut by_algo {
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let unit = if results.iter().any(|r| r.size.ends_with("keys")) {
        "cache size (keys)"
    } else {
        "cache size (bytes)"
    };
    draw(
        path,
        &[Chart {
            title: "Miss ratio over cache size",
            x_label: unit,
            y_label: "miss ratio",
            log_x: true,
            series: by_algo,
        }],
    )?;
    if results.iter().any(|r| !r.timeline.is_empty()) {
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("png");
        let stem = path.with_extension("");
        let tl = PathBuf::from(format!("{}-timeline.{ext}", stem.display()));
        let lines = |f: fn(&pliant_sim::IntervalStats) -> f64| -> Vec<Series> {
            results
                .iter()
                .map(|r| {
                    Series::line(
                        format!("{} {}", r.algo, r.size),
                        r.timeline.iter().map(|i| (i.t as f64, f(i))).collect(),
                    )
                })
                .collect()
        };
        draw(
            &tl,
            &[
                Chart {
                    title: "Misses per second (load on the store behind the cache)",
                    x_label: "trace time (s)",
                    y_label: "misses/s",
                    log_x: false,
                    series: lines(|i| i.misses_per_s),
                },
                Chart {
                    title: "Keys held",
                    x_label: "trace time (s)",
                    y_label: "keys",
                    log_x: false,
                    series: lines(|i| i.keys as f64),
                },
            ],
        )?;
        eprintln!("wrote {} and {}", path.display(), tl.display());
    } else {
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// `--interval`: a duration as everywhere in Pliant, in whole seconds (a trace's clock is).
fn whole_seconds(s: &str) -> Result<u64, String> {
    let d = pliant_policy::parse_interval(s)?;
    if d.subsec_nanos() != 0 {
        return Err(format!(
            "interval {s:?}: trace intervals are whole seconds (10s, 2m, 1h)"
        ));
    }
    Ok(d.as_secs())
}
