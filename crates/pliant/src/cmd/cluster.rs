//! `pliant cluster …`: a cluster of nodes on this machine, and the state of any cluster.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use pliant_cluster::local::{LocalSpec, Ready};

use super::args::Json;

#[derive(clap::Subcommand)]
pub enum Command {
    Up(UpArgs),
    Status(StatusArgs),
    Move(MoveArgs),
}

/// Move hash slots to another node while clients keep reading and writing them (as
/// `redis-cli --cluster reshard` does, with nothing lost): the slot is marked migrating, its keys
/// are copied in batches and deleted at the source once copied unchanged (clients asking for a
/// key already moved are sent on with -ASK; a source serving clients sends at about half its
/// speed, so their latency holds), then the map gives it to the target. A range whose
/// slots have several owners moves each owner's run in turn, one line (or JSON report) each. A
/// move that
/// stops half way (a node or the coordination store failed) leaves every key at exactly one
/// node; running it again finishes it.
///
/// Examples:
///   pliant cluster move 127.0.0.1:7000 --slot 42 --to 346a25aa149d1c335df754b0b1db04355879ed4b
///   pliant cluster move 127.0.0.1:7000 --slot 0-99 --to 346a25aa… --json
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct MoveArgs {
    /// Any node of the cluster.
    #[arg(value_name = "ADDR:PORT")]
    addr: String,
    /// The slot, or a range of them (100-199).
    #[arg(long, value_name = "SLOT|FIRST-LAST")]
    slot: String,
    /// The id of the node to move them to (as CLUSTER NODES shows it).
    #[arg(long, value_name = "NODE_ID")]
    to: String,
    /// The password (as redis-cli's -a); also read from PLIANT_PASSWORD.
    #[arg(short = 'a', long = "pass", value_name = "PASSWORD")]
    password: Option<String>,
    #[command(flatten)]
    json: Json,
}

/// Start a cluster of N nodes on this machine and keep it in the foreground (Ctrl-C stops every
/// node cleanly: each finishes its requests and syncs its store).
///
/// The 16,384 hash slots of Redis Cluster are spread evenly over the nodes, so Redis Cluster
/// clients (redis-cli -c, redis-py's RedisCluster, redis-benchmark --cluster) use it as they
/// use a Redis Cluster. This process holds the coordination store (the slot map, kept in
/// DIR/cluster.json, and which nodes are alive) and serves it to the nodes; started again with
/// the same DIR and ports, the nodes find their slots and keys again.
///
/// Node i listens on 127.0.0.1:(BASE_PORT + i) and keeps its store in DIR/node-i (its log in
/// DIR/node-i.log); the coordination store listens on BASE_PORT - 1. Flags after `--` go to
/// every `pliant serve`.
///
/// Examples:
///   pliant cluster up --nodes 3
///   redis-cli -c -p 7000 set greeting hello
///   pliant cluster status 127.0.0.1:7000
///   pliant cluster up --nodes 6 --dir /scratch/pc --base-port 7100 -- --no-store --capacity 1GiB
///   pliant cluster up --nodes 3 --balancer cephfs-greedy-spill --balancer-interval 5s
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct UpArgs {
    /// How many nodes.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Where the slot map, the nodes' stores and their logs live.
    #[arg(long, default_value = "pliant-cluster")]
    dir: PathBuf,
    /// The first node's port; 0 picks free ports for every node and the coordination store.
    #[arg(long, default_value_t = 7000)]
    base_port: u16,
    /// The password of every node and of the coordination store; also read from
    /// PLIANT_PASSWORD.
    #[arg(long, value_name = "PASSWORD")]
    requirepass: Option<String>,
    /// Keep the cluster's state in etcd at URL instead of in this process (the nodes watch it
    /// there; this process still starts a commission's nodes and stops a decommission's, asked
    /// at the address it records in etcd). Needs `--features etcd`.
    #[arg(long, value_name = "URL")]
    etcd: Option<String>,
    /// Set this Mantle balancer in the coordination store, which every node runs: nodes move
    /// their slots to even the load out, e.g. cephfs-greedy-spill (a shipped name, a Lua file
    /// or a directory of chunks). `pliant admin ADDR balancer load` swaps it later.
    #[arg(long, value_name = "FILE|NAME")]
    balancer: Option<String>,
    /// Balancer parameter KEY=VALUE (repeatable).
    #[arg(long = "balancer-param", value_name = "KEY=VALUE", value_parser = super::args::parse_param)]
    balancer_params: Vec<(String, pliant_policy::ParamValue)>,
    /// Time between balancer decisions [default: 10s].
    #[arg(long, value_name = "DURATION")]
    balancer_interval: Option<String>,
    /// Print the cluster's nodes as JSON once it is up.
    #[arg(long)]
    json: bool,
    /// Flags for every `pliant serve` (after `--`), e.g. -- --no-store --capacity 64MiB.
    #[arg(last = true, value_name = "SERVE FLAGS")]
    serve: Vec<String>,
}

/// Show a cluster: every node with its slots, keys, memory and load (commands per second over
/// --window), as the node at ADDR knows the map.
///
/// Examples:
///   pliant cluster status 127.0.0.1:7000
///   pliant cluster status 127.0.0.1:7000 --json
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct StatusArgs {
    /// Any node of the cluster.
    #[arg(value_name = "ADDR:PORT")]
    addr: String,
    /// The password (as redis-cli's -a); also read from PLIANT_PASSWORD.
    #[arg(short = 'a', long = "pass", value_name = "PASSWORD")]
    password: Option<String>,
    /// How long load is measured over: 1s, 500ms.
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    window: String,
    #[command(flatten)]
    json: Json,
}

pub fn run(c: Command) -> anyhow::Result<ExitCode> {
    match c {
        Command::Up(a) => up(&a),
        Command::Status(a) => status(&a),
        Command::Move(a) => move_slots(&a),
    }
}

fn move_slots(a: &MoveArgs) -> anyhow::Result<ExitCode> {
    let password = a
        .password
        .clone()
        .or_else(|| std::env::var("PLIANT_PASSWORD").ok());
    let parse = |s: &str| {
        s.trim().parse::<u16>().map_err(|_| {
            anyhow::anyhow!(
                "--slot {:?}: expected a slot (0-16383) or FIRST-LAST",
                a.slot
            )
        })
    };
    let (first, last) = match a.slot.split_once('-') {
        Some((f, l)) => (parse(f)?, parse(l)?),
        None => (parse(&a.slot)?, parse(&a.slot)?),
    };
    anyhow::ensure!(first <= last, "--slot {}: the range is reversed", a.slot);
    let slots: Vec<u16> = (first..=last).collect();
    let bar = indicatif::ProgressBar::new_spinner();
    // A range over several owners moves one owner's run at a time.
    let dialer = pliant_proto::Dialer::default().password(password.as_deref());
    let reports =
        pliant_cluster::mover::move_ranges_via(&dialer, &a.addr, &slots, &a.to, &mut |k, b| {
            bar.set_message(format!("{k} keys, {b} bytes moved"))
        });
    bar.finish_and_clear();
    let reports = reports?;
    if a.json.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else {
        for r in &reports {
            println!(
                "moved slots {} from {} to {}: {} keys, {} bytes in {:.2} s",
                pliant_cluster::mover::range_name(&r.slots),
                r.from,
                r.to,
                r.keys,
                r.bytes,
                r.seconds
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn up(a: &UpArgs) -> anyhow::Result<ExitCode> {
    let spec = LocalSpec {
        exe: std::env::current_exe()?,
        nodes: a.nodes,
        dir: a.dir.clone(),
        base_port: a.base_port,
        serve_args: {
            // The policy goes to the coordination store (every node runs the store's); its
            // interval is each node's own.
            let mut args = Vec::new();
            if let Some(i) = &a.balancer_interval {
                args.extend(["--balancer-interval".to_string(), i.clone()]);
            }
            args.extend(a.serve.iter().cloned());
            args
        },
        password: a
            .requirepass
            .clone()
            .or_else(|| std::env::var("PLIANT_PASSWORD").ok())
            .filter(|p| !p.is_empty()),
        etcd: a.etcd.clone(),
        balancer: match &a.balancer {
            None => None,
            Some(b) => {
                let source = pliant_policy::PolicySource::resolve(&[std::path::PathBuf::from(b)])?;
                let params: pliant_policy::Params = a.balancer_params.iter().cloned().collect();
                Some(pliant_cluster::balancer::record_of(&source, &params))
            }
        },
    };
    let json = a.json;
    pliant_cluster::local::up(&spec, |r: &Ready| {
        if json {
            let nodes: Vec<serde_json::Value> = r
                .state
                .map
                .nodes()
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    serde_json::json!({
                        "id": m.id, "addr": m.addr.to_string(),
                        "slots": r.state.map.ranges_of(i as u16),
                    })
                })
                .collect();
            println!(
                "{}",
                serde_json::json!({"coord": r.coord, "pids": r.pids, "nodes": nodes})
            );
        } else {
            println!("pliant cluster: {} nodes up", r.state.map.nodes().len());
            for (i, m) in r.state.map.nodes().iter().enumerate() {
                let ranges: Vec<String> = r
                    .state
                    .map
                    .ranges_of(i as u16)
                    .iter()
                    .map(|(a, b)| format!("{a}-{b}"))
                    .collect();
                println!("  {}  {}  slots {}", m.addr, m.id, ranges.join(","));
            }
            println!("  coordination store on {}", r.coord);
            println!("Ctrl-C stops the cluster (every node syncs its store first).");
        }
        // Scripts read the lines above as soon as they appear.
        use std::io::Write;
        let _ = std::io::stdout().flush();
    })?;
    eprintln!("pliant cluster: stopped");
    Ok(ExitCode::SUCCESS)
}

fn status(a: &StatusArgs) -> anyhow::Result<ExitCode> {
    let password = a
        .password
        .clone()
        .or_else(|| std::env::var("PLIANT_PASSWORD").ok());
    let window: Duration =
        pliant_policy::parse_interval(&a.window).map_err(|e| anyhow::anyhow!("--window: {e}"))?;
    let dialer = pliant_proto::Dialer::default().password(password.as_deref());
    let s = pliant_cluster::status::status(&dialer, &a.addr, window)?;
    if a.json.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "map version {}, {} of 16384 slots assigned, {} moving; coordination store {}",
        s.version, s.slots_assigned, s.slots_migrating, s.coord
    );
    println!(
        "{:<40}  {:<21}  {:>6}  {:>6}  {:>10}  {:>12}  {:>10}  state",
        "node", "address", "slots", "ranges", "keys", "memory", "ops/s"
    );
    let opt = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
    for n in &s.nodes {
        let state = match (n.alive, n.reachable) {
            (true, true) => "ok",
            (false, true) => "no lease",
            (true, false) => "unreachable",
            (false, false) => "down",
        };
        println!(
            "{:<40}  {:<21}  {:>6}  {:>6}  {:>10}  {:>12}  {:>10}  {state}",
            n.id,
            n.addr,
            n.slots,
            n.ranges,
            opt(n.keys),
            opt(n.memory_bytes),
            n.ops_per_s.map_or("-".to_string(), |v| format!("{v:.0}")),
        );
    }
    for n in &s.nodes {
        if let Some(b) = &n.balancer {
            println!(
                "balancer {} on {}: {} decisions, {} moves out ({} slots, {} keys), {} errors",
                b.policy, n.addr, b.decisions, b.moves, b.slots_moved, b.keys_moved, b.errors
            );
        }
    }
    let down = s.nodes.iter().any(|n| !n.reachable);
    Ok(if down {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
