//! `pliant replay`: a trace against any Redis-protocol server.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use pliant_kv::replay::{Mode, Pace, ReplayOptions, is_pliant, replay};

use super::args::Json;
use super::input::TraceArgs;

/// Replay a trace against a Redis-protocol server (a Pliant node or Redis): reads as GET, writes
/// as SET of a value of the record's size, deletions as DEL.
///
/// --mode look-aside: a GET that finds nothing is followed by a SET, as a look-aside client does.
/// --mode read-through: the server fetches misses itself (the default when the server is a
/// Pliant node). With --clients 1 --pipeline 1 a Pliant node over a store counts in PLIANT.STATS
/// exactly the memory-tier misses `pliant sim` reports for the same trace and cache.
///
/// Examples:
///   pliant replay ../shared/traces/parsplice/d100K/rank4.csv.gz --server 127.0.0.1:6479
///   pliant replay trace.csv --server 127.0.0.1:6379 --mode look-aside --clients 8 --pipeline 16
///   pliant replay trace.csv --server 127.0.0.1:6479 --max-rate 5000 --json
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// The trace file.
    trace: PathBuf,
    #[command(flatten)]
    input: TraceArgs,
    /// The server.
    #[arg(long, value_name = "HOST:PORT")]
    server: String,
    /// Its password (as redis-cli's -a); also read from PLIANT_PASSWORD.
    #[arg(short = 'a', long = "pass", value_name = "PASSWORD")]
    password: Option<String>,
    /// Connections; each key's requests go to one of them, in trace order.
    #[arg(long, default_value_t = 1)]
    clients: usize,
    /// Requests each connection sends before reading the replies.
    #[arg(long, default_value_t = 1)]
    pipeline: usize,
    /// The trace's own clock, this many times faster.
    #[arg(long, value_name = "X", conflicts_with = "max_rate")]
    speed: Option<f64>,
    /// At most this many requests a second.
    #[arg(long, value_name = "R")]
    max_rate: Option<f64>,
    /// look-aside or read-through (default: read-through for a Pliant node, else look-aside).
    #[arg(long, value_name = "MODE")]
    mode: Option<String>,
    #[command(flatten)]
    output: Json,
}

pub fn run(a: &Args) -> anyhow::Result<ExitCode> {
    let password = a
        .password
        .clone()
        .or_else(|| std::env::var("PLIANT_PASSWORD").ok());
    let mode = match a.mode.as_deref() {
        Some("look-aside") => Mode::LookAside,
        Some("read-through") => Mode::ReadThrough,
        Some(other) => anyhow::bail!("--mode {other:?}: expected look-aside or read-through"),
        None if is_pliant(&a.server, password.as_deref())? => Mode::ReadThrough,
        None => Mode::LookAside,
    };
    let pace = match (a.speed, a.max_rate) {
        (Some(x), _) => Pace::Speed(x),
        (_, Some(r)) => Pace::MaxRate(r),
        _ => Pace::Unlimited,
    };
    let opts = ReplayOptions {
        server: a.server.clone(),
        password,
        clients: a.clients,
        pipeline: a.pipeline,
        pace,
        mode,
    };
    let records = pliant_trace::reader(&a.trace, &a.input.options()?)
        .with_context(|| a.trace.display().to_string())?;
    let bar = indicatif::ProgressBar::new_spinner().with_message(format!(
        "replaying {} against {}",
        a.trace.display(),
        a.server
    ));
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {msg}: {pos} records ({per_sec})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    let s = replay(records, &opts, &|n| bar.set_position(n))?;
    bar.finish_and_clear();
    if a.output.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        println!(
            "{} records, {} requests in {:.1} s: {:.0} ops/s; GET hits {} misses {}; latency p50 {:.0} us, p99 {:.0} us, p99.9 {:.0} us",
            s.records,
            s.requests,
            s.seconds,
            s.ops_per_s,
            s.hits,
            s.misses,
            s.latency_us.p50,
            s.latency_us.p99,
            s.latency_us.p999
        );
        if let Some(st) = &s.server_stats {
            println!(
                "server memory tier: {} hits, {} misses, {} evictions, {} keys held",
                st["hits"], st["misses"], st["evictions"], st["keys"]
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
