//! `pliant serve`: one cache node speaking the Redis protocol.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use pliant_cache::Capacity;
use pliant_kv::{Config, Durability};
use pliant_policy::PolicySource;

use super::args::PolicyParams;

/// Run a cache node that speaks the Redis protocol (redis-cli, redis-benchmark and Redis
/// client libraries work unmodified).
///
/// With no flags: 127.0.0.1:6479 (beside a Redis on 6379), an unlimited LRU memory tier over a
/// persistent store in ./pliant-data, writes synced to disk once a second. Stop it with
/// Ctrl-C, SIGTERM or the SHUTDOWN command: it finishes the requests it has read, syncs the
/// store and exits.
///
/// Examples:
///   pliant serve
///   pliant serve --no-store --capacity 64MiB --algo s3fifo
///   pliant serve --bind 127.0.0.1:7000 --store /scratch/kv --durability always
///   pliant serve --policy static-limit --param limit=100000 --interval 10s
///   redis-cli -p 6479 set greeting hello
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Address and port to listen on.
    #[arg(long, value_name = "ADDR:PORT", default_value_t = SocketAddr::from(([127, 0, 0, 1], pliant_kv::DEFAULT_PORT)))]
    bind: SocketAddr,
    /// Directory of the persistent store this node holds (created if missing). Every key is
    /// written there; memory caches it.
    #[arg(
        long,
        value_name = "DIR",
        default_value = "pliant-data",
        conflicts_with = "no_store"
    )]
    store: PathBuf,
    /// No persistent store: a pure cache, like a Redis without persistence (evicted keys are gone).
    #[arg(long)]
    no_store: bool,
    /// Memory tier capacity: bytes (64MiB, 1GB), keys (10000keys) or unlimited.
    #[arg(long, value_name = "SIZE", default_value = "unlimited")]
    capacity: Capacity,
    /// Eviction algorithm of the memory tier (pliant-cache's: lru, fifo, clock, lfu, arc, sieve,
    /// s3fifo, wtinylfu; parameters after a colon, e.g. s3fifo:small=0.2).
    #[arg(long, value_name = "ALGO", default_value = "lru")]
    algo: String,
    /// When a write is acknowledged: none (never synced by the node), everysec (synced once a
    /// second: at most ~1 s lost in a crash), always (synced before the reply).
    #[arg(long, value_name = "MODE", default_value = "everysec")]
    durability: Durability,
    /// Connections served at once; more get an error and are closed.
    #[arg(long, value_name = "N", default_value_t = pliant_kv::config::DEFAULT_MAX_CLIENTS)]
    max_clients: usize,
    /// Longest value accepted (Redis's proto-max-bulk-len).
    #[arg(long, value_name = "SIZE", default_value = "512MiB")]
    max_value_size: Capacity,
    /// A Lua policy that sizes the memory tier live: a file, chunk files, or a shipped name
    /// (static-limit, parsplice-absorb-trim, …). Without one, PLIANT.POLICY LOAD can add one later.
    #[arg(long, num_args = 1.., value_name = "FILE|NAME")]
    policy: Vec<PathBuf>,
    #[command(flatten)]
    params: PolicyParams,
    /// The password clients must give (AUTH, or HELLO 3 AUTH default PASSWORD) before any other
    /// command; also read from PLIANT_PASSWORD. Never logged or shown by INFO.
    #[arg(long, value_name = "PASSWORD")]
    requirepass: Option<String>,
    /// Serve a non-loopback --bind address without a password (refused otherwise).
    #[arg(long)]
    unsafe_no_auth: bool,
    /// Serve Prometheus metrics (the counters of INFO and PLIANT.STATS, policy decisions and
    /// their time) on http://ADDR:PORT/metrics.
    #[arg(long, value_name = "ADDR:PORT")]
    metrics: Option<SocketAddr>,
    /// Time between policy decisions: 10s, 500ms, 2m, or plain seconds.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = pliant_policy::parse_interval)]
    interval: std::time::Duration,
}

pub fn run(a: &Args) -> anyhow::Result<ExitCode> {
    let max_value_size = match a.max_value_size {
        Capacity::Bytes(n) => usize::try_from(n).context("--max-value-size is too large")?,
        Capacity::Keys(_) => anyhow::bail!("--max-value-size takes bytes (512MiB), not keys"),
    };
    pliant_cache::build(&a.algo, a.capacity).context("--algo")?;
    let config = Config {
        bind: a.bind,
        store: (!a.no_store).then(|| a.store.clone()),
        capacity: a.capacity,
        algo: a.algo.clone(),
        durability: a.durability,
        max_clients: a.max_clients,
        max_value_size,
        policy: pliant_kv::PolicyConfig {
            source: if a.policy.is_empty() {
                None
            } else {
                Some(PolicySource::resolve(&a.policy)?)
            },
            params: a.params.params.iter().cloned().collect(),
            interval: a.interval,
        },
        requirepass: a
            .requirepass
            .clone()
            .or_else(|| std::env::var("PLIANT_PASSWORD").ok())
            .filter(|p| !p.is_empty()),
        unsafe_no_auth: a.unsafe_no_auth,
        metrics: a.metrics,
    };
    let store = config
        .store
        .as_ref()
        .map_or("no store".to_string(), |p| format!("store {}", p.display()));
    pliant_kv::serve(&config, |addr, metrics| {
        eprintln!(
            "pliant serve: listening on {addr} ({} memory tier of {}, {store}, durability {})",
            config.algo, config.capacity, config.durability
        );
        if let Some(m) = metrics {
            eprintln!("pliant serve: metrics on http://{m}/metrics");
        }
    })?;
    eprintln!("pliant serve: stopped cleanly");
    Ok(ExitCode::SUCCESS)
}
