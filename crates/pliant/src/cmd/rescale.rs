//! `pliant scale commission` / `decommission`: rescaling a live cluster.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use pliant_cluster::rescale::{Change, Options, Progress, Report};

use super::args::Json;

/// Add nodes to a live cluster and move slots to them, as Pufferscale plans it: every slot's
/// size (bytes) and load (ops/s over --window) are read from the nodes, the heuristic decides
/// which slots move where, and the moves run while clients keep reading and writing (several at
/// once, each node sending one slot and receiving one at a time; a node that is serving clients
/// sends at about half its speed, so their latency holds). A local cluster (`pliant
/// cluster up`) starts the new nodes itself; otherwise start them with `pliant serve --coord`
/// and this waits for them. Ctrl-C stops it cleanly within about a second (exit status 130):
/// the slots left migrating finish when it is run again.
///
/// Examples:
///   pliant scale commission --cluster 127.0.0.1:7000 --add 2
///   pliant scale commission --cluster 127.0.0.1:7000 --add 1 --strategy lt --dry-run
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct CommissionArgs {
    /// Any node of the cluster.
    #[arg(long, value_name = "ADDR:PORT")]
    cluster: String,
    /// How many nodes to add.
    #[arg(long, value_name = "N")]
    add: usize,
    #[command(flatten)]
    how: How,
}

/// Empty nodes of a live cluster into the others and stop them: their slots move as
/// Pufferscale plans it while clients keep reading and writing (a node that is serving clients
/// sends at about half its speed, so their latency holds); then the nodes leave the map and, in
/// a local cluster, their processes stop.
///
/// Examples:
///   pliant scale decommission --cluster 127.0.0.1:7000 --remove 346a25aa149d1c335df754b0b1db04355879ed4b
///   pliant scale decommission --cluster 127.0.0.1:7000 --remove ID1,ID2 --strategy ldt
///   pliant scale decommission --cluster 127.0.0.1:7000 --remove DEAD_ID --force
///
/// Running a command again after it failed half way, or was stopped with Ctrl-C (exit status
/// 130), finishes the slot moves it left, then plans what is left to do (a commission first
/// takes the live nodes the map does not name yet).
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct DecommissionArgs {
    /// Any node of the cluster.
    #[arg(long, value_name = "ADDR:PORT")]
    cluster: String,
    /// The nodes to remove, as CLUSTER NODES shows their ids (comma- or space-separated).
    #[arg(long, required = true, num_args = 1.., value_delimiter = ',', value_name = "NODE_ID,...")]
    remove: Vec<String>,
    /// Remove nodes that are down even though they own slots: their slots go to the staying
    /// nodes without their keys, which are lost (the report names the slots). Without it, a
    /// rescale waits for a dead owner to come back.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    how: How,
}

#[derive(clap::Args)]
struct How {
    /// Strategy: l, lt, dt, ldt.
    #[arg(long, default_value = "ldt")]
    strategy: String,
    /// Free weights W_L,W_D,W_T instead of a strategy (max(W_L, W_D) = 1, all > 0).
    #[arg(long, value_delimiter = ',', value_name = "WL,WD,WT")]
    weights: Option<Vec<f64>>,
    /// How long each slot's load is measured over: 2s, 500ms.
    #[arg(long, default_value = "2s", value_name = "DURATION")]
    window: String,
    /// Slot moves at once, at most.
    #[arg(long, default_value_t = 4)]
    parallel: usize,
    /// Bytes of keys and values a source node sends its target per batch (up to 4 batches on
    /// their way at once; a larger value goes alone): 256KiB, 1MiB, 16MiB (at most 64MiB).
    #[arg(long, default_value = "1MiB", value_name = "SIZE", value_parser = batch_bytes)]
    batch_bytes: usize,
    /// Print the plan; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// The password (as redis-cli's -a); also read from PLIANT_PASSWORD.
    #[arg(short = 'a', long = "pass", value_name = "PASSWORD")]
    password: Option<String>,
    #[command(flatten)]
    json: Json,
}

/// `--batch-bytes`: a size from 1 byte to 64 MiB (what a node accepts in `PLIANT.MIGRATE`).
fn batch_bytes(s: &str) -> Result<usize, String> {
    const MAX: u64 = 64 << 20;
    match s.parse::<pliant_cache::Capacity>() {
        Ok(pliant_cache::Capacity::Bytes(n)) if (1..=MAX).contains(&n) => Ok(n as usize),
        _ => Err(format!(
            "{s:?}: expected a size from 1 byte to 64MiB (256KiB, 1MiB)"
        )),
    }
}

pub fn commission(a: &CommissionArgs) -> Result<ExitCode> {
    run(&a.cluster, &Change::Commission(a.add), &a.how, false)
}

pub fn decommission(a: &DecommissionArgs) -> Result<ExitCode> {
    let ids: Vec<String> = a
        .remove
        .iter()
        .flat_map(|s| s.split_whitespace())
        .map(str::to_string)
        .collect();
    run(&a.cluster, &Change::Decommission(ids), &a.how, a.force)
}

fn run(cluster: &str, change: &Change, how: &How, force: bool) -> Result<ExitCode> {
    let window: Duration =
        pliant_policy::parse_interval(&how.window).map_err(|e| anyhow::anyhow!("--window: {e}"))?;
    let opts = Options {
        weights: super::scale::weights(&how.strategy, &how.weights)?,
        window,
        parallel: how.parallel,
        dry_run: how.dry_run,
        dialer: pliant_proto::Dialer::default().password(
            how.password
                .clone()
                .or_else(|| std::env::var("PLIANT_PASSWORD").ok())
                .as_deref(),
        ),
        force,
        interruptible: true,
        batch_bytes: how.batch_bytes,
    };
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:30} {pos}/{len} slots moved, {msg} ({eta} left)",
        )
        .expect("template"),
    );
    let report = pliant_cluster::rescale::rescale(cluster, change, &opts, &mut |p: Progress| {
        bar.set_length(p.planned as u64);
        bar.set_position(p.done as u64);
        bar.set_message(format!("{} MB", p.bytes / 1_000_000));
    });
    bar.finish_and_clear();
    let report = match report {
        Err(e @ pliant_cluster::rescale::RescaleError::Stopped { .. }) => {
            // As a shell reports a command ended by SIGINT.
            eprintln!("pliant scale: {e}");
            return Ok(ExitCode::from(130));
        }
        r => r?,
    };
    if how.json.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print(&report);
    }
    Ok(ExitCode::SUCCESS)
}

fn print(r: &Report) {
    if r.resumed_slots > 0 {
        println!(
            "finished first: {} slot move(s) an earlier run left",
            r.resumed_slots
        );
    }
    for l in &r.lost {
        let ranges: Vec<String> = l
            .slots
            .iter()
            .map(|&(a, b)| {
                if a == b {
                    a.to_string()
                } else {
                    format!("{a}-{b}")
                }
            })
            .collect();
        println!(
            "LOST (--force): node {} ({}) was down; its slots {} now belong to the other nodes without its keys{}",
            l.node,
            l.addr,
            ranges.join(","),
            if l.moving_in.is_empty() {
                String::new()
            } else {
                format!(
                    "; keys already moved to it of slots {:?} are gone too",
                    l.moving_in
                )
            }
        );
    }
    for id in &r.not_stopped {
        println!("node {id} left the map and holds nothing, but its process still runs: stop it");
    }
    let o = &r.planned;
    println!(
        "{} → {} nodes: {} slot moves, {:.1} MB planned in {:.1} ms (network measured at {:.0} MB/s, {})",
        r.nodes_before,
        r.nodes_after,
        r.moves,
        r.planned_bytes / 1e6,
        r.plan_ms,
        r.bandwidth_bytes_per_s / 1e6,
        r.bandwidth_between
    );
    // No command ran in the window: there is no load to balance, and no ratio to show.
    let load = if o.l_t > 0.0 {
        format!("{:.2}", o.load_ratio())
    } else {
        "n/a (no load in the window)".to_string()
    };
    println!(
        "planned: T_t {:.3} s, T_max/T_t {:.2}, L_max/L_t {load}, D_max/D_t {:.2}",
        o.t_t,
        o.transfer_ratio(),
        o.data_ratio()
    );
    if r.executed {
        println!(
            "moved: {} keys, {:.1} MB in {:.2} s ({:.2}× T_t)",
            r.keys_moved,
            r.bytes_moved as f64 / 1e6,
            r.seconds,
            if o.t_t > 0.0 { r.seconds / o.t_t } else { 0.0 }
        );
        for l in &r.links {
            println!(
                "link {} -> {}: {:.0} MB/s, {:.1} MB planned",
                l.from,
                l.to,
                l.bytes_per_s / 1e6,
                l.planned_bytes / 1e6
            );
        }
        if let Some(t) = r.links_t_max {
            println!(
                "T_max by the measured links: {t:.3} s (the moves took {:.2}× it)",
                if t > 0.0 { r.seconds / t } else { 0.0 }
            );
        }
        for id in &r.added {
            println!("added   {id}");
        }
        for id in &r.removed {
            println!("removed {id}");
        }
    } else {
        println!("dry run: nothing moved");
    }
}
