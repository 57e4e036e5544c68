//! `pliant serve`: one cache node speaking the Redis protocol.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use pliant_kv::config::{OneOrMany, Settings};

use super::args::PolicyParams;

/// Run a cache node that speaks the Redis protocol (redis-cli, redis-benchmark and Redis client
/// libraries work unmodified).
///
/// With no flags: 127.0.0.1:6479 (beside a Redis on 6379), an unlimited LRU memory tier over a
/// persistent store in ./pliant-data, writes synced to disk once a second. Stop it with
/// Ctrl-C, SIGTERM or the SHUTDOWN command: it finishes the requests it has read, syncs the
/// store and exits.
///
/// Every flag can also be given in a TOML file (--config), under the flag's name
/// (capacity = "64MiB", no-store = true, [param] limit = 100); flags win over the file.
///
/// Examples:
///   pliant serve
///   pliant serve --no-store --capacity 64MiB --algo s3fifo
///   pliant serve --bind 127.0.0.1:7000 --store /scratch/kv --durability always
///   pliant serve --bind 127.0.0.1:7001 --parent 127.0.0.1:7000 --capacity 10000keys
///   pliant serve --policy static-limit --param limit=100000 --interval 10s
///   pliant serve --config pliant.toml --metrics 127.0.0.1:9479
///   pliant serve --bind 127.0.0.1:7003 --coord 127.0.0.1:6999 --balancer cephfs-greedy-spill
///   redis-cli -p 6479 set greeting hello
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// A TOML file of settings, under the flags' names; flags given here win over it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address and port to listen on [default: 127.0.0.1:6479].
    #[arg(long, value_name = "ADDR:PORT")]
    bind: Option<SocketAddr>,
    /// Directory of the persistent store this node holds (created if missing): every key is
    /// written there, memory caches it [default: ./pliant-data].
    #[arg(long, value_name = "DIR", conflicts_with = "no_store")]
    store: Option<PathBuf>,
    /// No persistent store: a pure cache, like a Redis without persistence (evicted keys are gone).
    #[arg(long)]
    no_store: bool,
    /// Be a cache tier of the node at ADDR:PORT, which holds every key: a miss is fetched from
    /// it (concurrent misses of one key make one request), a write goes through it and is kept
    /// here, and it tells this node when a key it holds changes (CLIENT TRACKING), so no client
    /// reads an old value through this node once a write elsewhere is acknowledged. No store of
    /// its own.
    #[arg(long, value_name = "ADDR:PORT", conflicts_with_all = ["store", "no_store"])]
    parent: Option<SocketAddr>,
    /// The password the parent wants; also read from PLIANT_PARENT_PASSWORD [default: this
    /// node's own password].
    #[arg(long, value_name = "PASSWORD")]
    parent_password: Option<String>,
    /// How long a client of this tier waits for the parent's answer before it gets an error
    /// (10s, 500ms or seconds); a write that times out may or may not have been applied, and a
    /// fetch that times out is still kept when it arrives [default: 15s, Redis's
    /// cluster-node-timeout].
    #[arg(long, value_name = "DURATION")]
    parent_timeout: Option<String>,
    /// Memory tier capacity: bytes (64MiB, 1GB), keys (10000keys) or unlimited [default: unlimited].
    #[arg(long, value_name = "SIZE")]
    capacity: Option<String>,
    /// Eviction algorithm of the memory tier (pliant-cache's: lru, fifo, clock, lfu, arc, sieve,
    /// s3fifo, wtinylfu; parameters after a colon, e.g. s3fifo:small=0.2) [default: lru].
    #[arg(long, value_name = "ALGO")]
    algo: Option<String>,
    /// When a write is acknowledged: none (never synced by the node), everysec (synced once a
    /// second: at most ~1 s lost in a crash), always (synced before the reply) [default: everysec].
    #[arg(long, value_name = "MODE")]
    durability: Option<String>,
    /// Connections served at once; more get an error and are closed [default: 10000].
    #[arg(long, value_name = "N")]
    max_clients: Option<usize>,
    /// Longest value accepted (Redis's proto-max-bulk-len) [default: 512MiB].
    #[arg(long, value_name = "SIZE")]
    max_value_size: Option<String>,
    /// A policy that sizes the memory tier live: a Lua file, chunk files, a shipped name
    /// (static-limit, parsplice-absorb-trim, …), or `auto` (regime detection: absorbs until the
    /// reads leave their opening regime, then keeps the working set that --param efficiency=0.96
    /// allows). Without one, PLIANT.POLICY LOAD can add one later.
    #[arg(long, num_args = 1.., value_name = "FILE|NAME")]
    policy: Vec<PathBuf>,
    #[command(flatten)]
    params: PolicyParams,
    /// Time between policy decisions: 10s, 500ms, 2m, or plain seconds [default: 10s].
    #[arg(long, value_name = "DURATION")]
    interval: Option<String>,
    /// The password clients must give (AUTH, or HELLO 3 AUTH default PASSWORD) before any other
    /// command; also read from PLIANT_PASSWORD. Never logged or shown by INFO.
    #[arg(long, value_name = "PASSWORD")]
    requirepass: Option<String>,
    /// Serve a non-loopback --bind address without a password, or --metrics on a non-loopback
    /// address (refused otherwise).
    #[arg(long)]
    unsafe_no_auth: bool,
    /// Serve Prometheus metrics (the counters of INFO and PLIANT.STATS, policy decisions and
    /// their time) on http://ADDR:PORT/metrics. The endpoint has no authentication: a
    /// non-loopback address is refused unless --unsafe-no-auth is given.
    #[arg(long, value_name = "ADDR:PORT")]
    metrics: Option<SocketAddr>,
    /// Threads serving connections; 0 means one per core [default: 1].
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Join the cluster whose coordination store listens at ADDR:PORT (what `pliant cluster
    /// up` prints): serve the hash slots its map gives this node, send clients elsewhere for
    /// the others (-MOVED), as a Redis Cluster node does.
    #[arg(long, value_name = "ADDR:PORT", conflicts_with = "parent")]
    coord: Option<SocketAddr>,
    /// This node's id in the cluster, 40 lowercase hex digits (as CLUSTER NODES shows them)
    /// [default: derived from --bind and --store; `pliant cluster up` gives its nodes theirs].
    #[arg(long, value_name = "ID")]
    node_id: Option<String>,
    /// Join the cluster whose state is in etcd at URL (http://HOST:2379; several
    /// comma-separated), for clusters across machines. Needs a pliant built with
    /// `--features etcd`.
    #[arg(long, value_name = "URL", conflicts_with_all = ["parent", "coord"])]
    etcd: Option<String>,
    /// A Mantle balancer for a cluster node (with --coord or --etcd): every interval the policy
    /// sees every node's load (keyed commands per second: `load`, `req_rate`) and `slots`;
    /// when `when` holds, `where`'s targets become moves of this node's slots, picked by their
    /// load with `howmuch`'s strategies (big, small, big_small, half). A Lua file, chunk files
    /// or a shipped name (cephfs-greedy-spill).
    #[arg(long, num_args = 1.., value_name = "FILE|NAME")]
    balancer: Vec<PathBuf>,
    /// Balancer parameter KEY=VALUE (repeatable), e.g. min_rebalance=0.2.
    #[arg(long = "balancer-param", value_name = "KEY=VALUE", value_parser = super::args::parse_param)]
    balancer_params: Vec<(String, pliant_policy::ParamValue)>,
    /// Time between balancer decisions: 10s, 500ms, or plain seconds [default: 10s, Ceph's
    /// mds_bal_interval].
    #[arg(long, value_name = "DURATION")]
    balancer_interval: Option<String>,
    /// Intervals over which each slot's load is measured to pick the slots to move (since this
    /// node's slots last changed): longer picks by less noisy loads, shorter follows a shifting
    /// workload sooner [default: 10].
    #[arg(long, value_name = "N")]
    balancer_slot_window: Option<usize>,
}

pub fn run(a: &Args) -> anyhow::Result<ExitCode> {
    let flags = Settings {
        bind: a.bind,
        store: a.store.clone(),
        no_store: a.no_store.then_some(true),
        parent: a.parent,
        parent_password: a
            .parent_password
            .clone()
            .or_else(|| std::env::var("PLIANT_PARENT_PASSWORD").ok()),
        parent_timeout: a.parent_timeout.clone(),
        capacity: a.capacity.clone(),
        algo: a.algo.clone(),
        durability: a.durability.clone(),
        max_clients: a.max_clients,
        max_value_size: a.max_value_size.clone(),
        policy: (!a.policy.is_empty()).then(|| OneOrMany::Many(a.policy.clone())),
        param: (!a.params.params.is_empty()).then(|| a.params.params.iter().cloned().collect()),
        interval: a.interval.clone(),
        requirepass: a
            .requirepass
            .clone()
            .or_else(|| std::env::var("PLIANT_PASSWORD").ok()),
        unsafe_no_auth: a.unsafe_no_auth.then_some(true),
        metrics: a.metrics,
        threads: a.threads,
        coord: a.coord,
        node_id: a.node_id.clone(),
        etcd: a.etcd.clone(),
        balancer: (!a.balancer.is_empty()).then(|| OneOrMany::Many(a.balancer.clone())),
        balancer_param: (!a.balancer_params.is_empty())
            .then(|| a.balancer_params.iter().cloned().collect()),
        balancer_interval: a.balancer_interval.clone(),
        balancer_slot_window: a.balancer_slot_window,
    };
    let settings = match &a.config {
        Some(file) => flags.or(Settings::from_file(file)?),
        None => flags,
    };
    let config = settings.resolve()?;
    let cluster = match (&config.coord, &config.etcd) {
        (Some(c), _) => format!(", cluster of {c}"),
        (None, Some(url)) => format!(", cluster in etcd {url}"),
        (None, None) => String::new(),
    };
    let store = match (&config.store, config.parent) {
        (Some(p), _) => format!("store {}", p.display()),
        (None, Some(parent)) => format!("tier of {parent}"),
        (None, None) => "no store".to_string(),
    };
    pliant_kv::serve(&config, |addr, metrics| {
        eprintln!(
            "pliant serve: listening on {addr} ({} memory tier of {}, {store}, durability {}{cluster})",
            config.algo, config.capacity, config.durability
        );
        if let Some(m) = metrics {
            eprintln!("pliant serve: metrics on http://{m}/metrics");
        }
    })?;
    eprintln!("pliant serve: stopped cleanly");
    Ok(ExitCode::SUCCESS)
}
