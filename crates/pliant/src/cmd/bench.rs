//! `pliant bench`: the performance benchmarks whose numbers docs/benchmarks.md reports.

use std::path::PathBuf;
use std::process::ExitCode;

use super::args::Json;
use anyhow::Result;
use pliant_cache::Capacity;
use pliant_sim::Config;

/// Benchmarks.
#[derive(clap::Subcommand)]
pub enum Command {
    /// Replay speed: a Zipf trace through each algorithm at two sizes, one configuration per
    /// pass, timing the whole replay including trace decoding (oracleGeneral from disk).
    Sim(SimArgs),
    /// Protocol fuzzing: seeded random RESP frames, mutated, through both parsers whole and in
    /// pieces (no panic, no hang, and the two ways agree).
    Frames(FramesArgs),
    /// Rescaling planner scaling: plan time from 128 to 16,384 servers and 8 K to 1 M buckets
    /// (commissioning 15/16 of the final servers, as in the 1,920-onto-128 scenario).
    Scale(ScaleArgs),
    /// A slow file system for the `pliant fs` benchmarks (tools/bench/fs_fio.sh): mounts DIR at
    /// MOUNTPOINT (in the foreground) with every data request taking bytes / --stream-rate
    /// seconds, so one stream is limited as on a parallel file system and concurrent streams
    /// add up. Ctrl-C or SIGTERM unmounts.
    SlowFs(SlowFsArgs),
    /// A line chart (PNG or SVG by extension) from two-column CSV files, one line per file:
    /// what the benchmark scripts draw their figures with.
    Chart(ChartArgs),
}

/// Arguments of `bench chart`.
#[derive(clap::Args)]
pub struct ChartArgs {
    /// Lines, as LABEL=FILE.csv (columns x,y; a first line that is not numbers is a header).
    #[arg(required = true, value_name = "LABEL=CSV")]
    series: Vec<String>,
    /// Where to write the chart.
    #[arg(long)]
    out: PathBuf,
    /// Title.
    #[arg(long, default_value = "")]
    title: String,
    /// X axis label.
    #[arg(long, default_value = "x")]
    x_label: String,
    /// Y axis label.
    #[arg(long, default_value = "y")]
    y_label: String,
}

/// Arguments of `bench slow-fs`.
#[derive(clap::Args)]
pub struct SlowFsArgs {
    /// The directory to serve.
    dir: std::path::PathBuf,
    /// Where to mount it.
    mountpoint: std::path::PathBuf,
    /// Bytes per second of one stream of requests (e.g. 50MB).
    #[arg(long, default_value = "50MB")]
    stream_rate: String,
    /// Requests served at once.
    #[arg(long, default_value_t = 16)]
    threads: usize,
}

/// Arguments of `bench frames`.
#[derive(clap::Args)]
pub struct FramesArgs {
    /// Frames to try.
    #[arg(long, default_value_t = 1_000_000)]
    count: u64,
    /// Seed of the generator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    output: Json,
}

/// Arguments of `bench scale`.
#[derive(clap::Args)]
pub struct ScaleArgs {
    /// Repetitions per size (best kept).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Strategy.
    #[arg(long, default_value = "ldt")]
    strategy: String,
    #[command(flatten)]
    output: Json,
}

/// Arguments of `bench sim`.
#[derive(clap::Args)]
pub struct SimArgs {
    /// Requests in the generated trace.
    #[arg(long, default_value_t = 20_000_000)]
    requests: u64,
    /// Distinct keys.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Zipf exponent.
    #[arg(long, default_value_t = 1.0)]
    alpha: f64,
    /// Algorithms.
    #[arg(long, default_value = "lru,arc,sieve,s3fifo", value_delimiter = ',')]
    algo: Vec<String>,
    /// Cache sizes as fractions of the working set (distinct keys).
    #[arg(long, default_value = "0.01,0.1", value_delimiter = ',')]
    fractions: Vec<f64>,
    /// Repetitions per configuration (the best is reported, the machine being shared).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Keep the generated trace here (default: a temporary file).
    #[arg(long)]
    trace: Option<PathBuf>,
    #[command(flatten)]
    output: Json,
}

/// Runs a benchmark.
pub fn run(c: Command) -> Result<ExitCode> {
    match c {
        Command::Sim(a) => sim(&a),
        Command::Scale(a) => scale(&a),
        Command::Frames(a) => frames(&a),
        Command::SlowFs(a) => slow_fs(&a),
        Command::Chart(a) => chart(&a),
    }
}

fn chart(a: &ChartArgs) -> Result<ExitCode> {
    let mut series = Vec::new();
    for s in &a.series {
        let (label, file) = s
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("{s:?}: expected LABEL=FILE.csv"))?;
        let text = std::fs::read_to_string(file).map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
        let mut points = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let mut cols = line.split(',').map(str::trim);
            let parsed = (
                cols.next().and_then(|x| x.parse::<f64>().ok()),
                cols.next().and_then(|y| y.parse::<f64>().ok()),
            );
            match parsed {
                (Some(x), Some(y)) => points.push((x, y)),
                _ if n == 0 => {}
                _ => anyhow::bail!("{file}:{}: expected two numbers x,y, got {line:?}", n + 1),
            }
        }
        series.push(crate::plot::Series::line(label, points));
    }
    crate::plot::draw(
        &a.out,
        &[crate::plot::Chart {
            title: &a.title,
            x_label: &a.x_label,
            y_label: &a.y_label,
            log_x: false,
            series,
        }],
    )?;
    println!("wrote {}", a.out.display());
    Ok(ExitCode::SUCCESS)
}

fn slow_fs(a: &SlowFsArgs) -> Result<ExitCode> {
    let rate = match a.stream_rate.parse::<pliant_cache::Capacity>() {
        Ok(pliant_cache::Capacity::Bytes(n)) => n as f64,
        _ => anyhow::bail!(
            "--stream-rate {:?}: expected bytes per second (50MB, 100MiB)",
            a.stream_rate
        ),
    };
    pliant_slowfs::run(&a.dir, &a.mountpoint, rate, a.threads)?;
    Ok(ExitCode::SUCCESS)
}

fn frames(a: &FramesArgs) -> Result<ExitCode> {
    let bar = indicatif::ProgressBar::new(a.count);
    let r = pliant_proto::fuzz::fuzz_frames(a.count, a.seed, &|n| bar.set_position(n));
    bar.finish_and_clear();
    if a.output.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!(
            "{} frames (seed {}) in {:.1} s: {} parsed, {} incomplete, {} refused; {} disagreements between whole and piecewise parsing",
            r.inputs, a.seed, r.seconds, r.parsed, r.incomplete, r.refused, r.disagreements
        );
    }
    Ok(if r.disagreements == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn scale(a: &ScaleArgs) -> Result<ExitCode> {
    let strategy: pliant_scale::Strategy = a.strategy.parse().map_err(anyhow::Error::msg)?;
    let mut rows = Vec::new();
    for (servers, buckets) in pliant_scale::emulate::SCALING {
        let from = servers / 16;
        let best = pliant_scale::emulate::best_plan_ms(servers, buckets, strategy, a.reps)?;
        if !a.output.json {
            println!(
                "{from:>6} → {servers:>6} servers, {buckets:>8} buckets: {best:>9.1} ms ({:.2} µs per bucket)",
                1e3 * best / buckets as f64
            );
        }
        rows.push(serde_json::json!({"from": from, "servers": servers, "buckets": buckets, "plan_ms": best}));
    }
    if a.output.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    }
    Ok(ExitCode::SUCCESS)
}

fn sim(a: &SimArgs) -> Result<ExitCode> {
    let dir = tempfile::tempdir()?;
    let path = a
        .trace
        .clone()
        .unwrap_or_else(|| dir.path().join("bench.oracleGeneral"));
    if !path.exists() {
        eprintln!(
            "generating {} requests, Zipf({}) over {} keys → {}",
            a.requests,
            a.alpha,
            a.keys,
            path.display()
        );
        pliant_sim::bench::write_zipf_trace(&path, a.requests, a.keys, a.alpha)?;
    }
    let mut rows = Vec::new();
    for algo in &a.algo {
        for &f in &a.fractions {
            let keys = ((a.keys as f64) * f).round() as u64;
            let config = Config {
                algo: algo.clone(),
                capacity: Capacity::Keys(keys),
            };
            let r = pliant_sim::bench::best_replay(&path, &config, a.reps)?;
            if !a.output.json {
                println!(
                    "{:<8} {:>9} keys ({:>4.1}% of working set): {:>6.2} M requests/s \
                     (miss ratio {:.4}, {:.2} s)",
                    algo,
                    keys,
                    100.0 * f,
                    r.mreq_per_s,
                    r.miss_ratio,
                    r.seconds
                );
            }
            rows.push(serde_json::json!({
                "algo": algo, "keys": keys, "fraction": f,
                "mreq_per_s": r.mreq_per_s, "miss_ratio": r.miss_ratio,
                "seconds": r.seconds, "requests": r.requests,
            }));
        }
    }
    if a.output.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    }
    Ok(ExitCode::SUCCESS)
}
