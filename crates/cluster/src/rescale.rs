//! Live rescaling (Pufferscale on the cluster): measure every slot's size and load on the live
//! nodes, plan with `pliant-scale`'s heuristic, start (or wait for) new nodes, run the planned
//! slot moves several at a time ([`crate::mover`]), retire the nodes that leave.
//!
//! - A slot is a bucket: its size is the bytes of its keys and values, its load the keyed
//!   commands per second its owner ran on it over the sampling window. The plan is made with
//!   `PlanOptions::slots`: a node's next keys follow the slots it owns, most of which hold
//!   nothing in a young cluster, so every node's slot count is balanced too and runs of slots
//!   move together (the planner's doc, "Slots", says how).
//! - The transfer model is the network one with `s_net` measured here and now, between two of
//!   the nodes: bytes per second one way, from ECHO round trips of 4 MiB that one node sends
//!   another (`PLIANT.NETPROBE`; each way half a round trip), as a slot move's copy moves each
//!   byte once, source node to target node (`PLIANT.MIGRATE`). The process that runs the
//!   rescale (on a login node, say) may reach the nodes over another network than theirs, so it
//!   measures its own link only when the cluster has one node, or a node cannot probe (a
//!   version without the command). Once the new nodes are up, the source of each pair of
//!   nodes the plan moves slots between measures that link, and the report gives the plan's
//!   transfer time by those links ([`Report::links_t_max`]) beside the planner's.
//! - Moves run as the planner hands them over, at most `parallel` at once and at most one out
//!   of and one into any node at a time (the model's full-duplex node).

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use pliant_proto::Dialer;
use pliant_proto::frame::Frame;
use serde::Serialize;

use crate::coord::{ClusterState, Coord, CoordError};
use crate::mover::Conn;
use crate::mover::{MoveError, MoveReport, change_map, move_slots, move_slots_until};

/// Slots moved together, at most: enough that a map update and a walk over the source's keys
/// serve many slots, few enough that progress shows and a failure leaves little half done.
pub(crate) const GROUP: usize = 512;

/// What to change.
#[derive(Debug, Clone)]
pub enum Change {
    /// Add this many nodes.
    Commission(usize),
    /// Remove these nodes (ids as CLUSTER NODES shows them).
    Decommission(Vec<String>),
}

/// How to rescale.
#[derive(Debug, Clone)]
pub struct Options {
    /// The planner's weights (a strategy's, or given).
    pub weights: pliant_scale::Weights,
    /// How long load is sampled over.
    pub window: Duration,
    /// Moves at once, at most.
    pub parallel: usize,
    /// Plan only.
    pub dry_run: bool,
    /// How every node and the coordination store are reached: the cluster's password and the
    /// timeouts, aimed at no node ([`Dialer::to`] aims it).
    pub dialer: Dialer,
    /// Decommission nodes that are down even though they own slots: their slots go to the
    /// staying nodes empty (their keys are lost, and the report names the slots).
    pub force: bool,
    /// Ctrl-C (SIGINT) stops the rescale cleanly: no move or batch starts after it, those under
    /// way end (within about a second), and the error says how far it got; the slots left
    /// migrating finish when the command is run again. For a command run from a terminal.
    pub interruptible: bool,
    /// Bytes a batch the source sends the target ([`crate::mover::BATCH_BYTES`] by default).
    pub batch_bytes: usize,
}

/// What a rescale did (or, dry, would do).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Nodes before.
    pub nodes_before: usize,
    /// Nodes after.
    pub nodes_after: usize,
    /// Nodes started (their ids).
    pub added: Vec<String>,
    /// Nodes retired (out of the map).
    pub removed: Vec<String>,
    /// Removed nodes whose process this command could not stop (no supervisor runs them, or
    /// stopping failed): they hold nothing; stop them by hand.
    pub not_stopped: Vec<String>,
    /// Measured `s_net`, bytes per second: what the plan was made with.
    pub bandwidth_bytes_per_s: f64,
    /// Between what it was measured: `"NODE -> NODE"`, or `"this process -> NODE"`.
    pub bandwidth_between: String,
    /// Each pair of nodes the moves ran between, its bandwidth as its source measured it just
    /// before the moves, and the bytes the plan moves over it.
    pub links: Vec<Link>,
    /// The plan's `T_max` (s) by the measured links: the longest any node's link is busy,
    /// sending or receiving, with each link at its own bandwidth (`None` if a link could not
    /// be measured, or nothing moved). The planner's `T_t` and `T_max` use one `s_net`.
    pub links_t_max: Option<f64>,
    /// The planner's targets and the planned placement's objectives.
    pub planned: pliant_scale::Outcome,
    /// How long planning took, ms.
    pub plan_ms: f64,
    /// Slot moves planned.
    pub moves: usize,
    /// Bytes the plan moves.
    pub planned_bytes: f64,
    /// Whether anything was moved (false for a dry run).
    pub executed: bool,
    /// Keys moved.
    pub keys_moved: u64,
    /// Bytes copied (a key copied twice, because it changed during its move, counts twice).
    pub bytes_moved: u64,
    /// Wall time of the moves, s.
    pub seconds: f64,
    /// Slots whose move an earlier rescale or move left unfinished, finished first.
    pub resumed_slots: usize,
    /// What `--force` gave up: the slots of nodes that were down.
    pub lost: Vec<Lost>,
}

/// One pair of nodes a rescale moved slots between ([`Report::links`]).
#[derive(Debug, Clone, Serialize)]
pub struct Link {
    /// The source node.
    pub from: String,
    /// The target node.
    pub to: String,
    /// One way, bytes per second, as the source measured it (`PLIANT.NETPROBE`).
    pub bytes_per_s: f64,
    /// Bytes the plan moves from one to the other.
    pub planned_bytes: f64,
}

/// Slots a forced decommission gave to other nodes without their keys.
#[derive(Debug, Clone, Serialize)]
pub struct Lost {
    /// The node that was down.
    pub node: String,
    /// Its address.
    pub addr: String,
    /// The slots it owned, as ranges: they now belong to the staying nodes, empty.
    pub slots: Vec<(u16, u16)>,
    /// Slots that were moving to it: they stay with their owner, but the keys already moved
    /// to it are gone.
    pub moving_in: Vec<u16>,
}

/// Why a rescale stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RescaleError {
    /// The cluster could not be read.
    #[error(transparent)]
    Status(#[from] crate::status::StatusError),
    /// A move (or the map) failed; what was moved stays moved, the rest stays where it was.
    #[error(transparent)]
    Move(#[from] MoveError),
    /// The planner refused.
    #[error("planning: {0}")]
    Plan(#[from] pliant_scale::PlanError),
    /// The request makes no sense for this cluster; nothing was changed.
    #[error("{0}")]
    Invalid(String),
    /// Stopped by Ctrl-C ([`Options::interruptible`]).
    #[error(
        "stopped after {done} of {planned} slot moves ({bytes} bytes copied); the slots left migrating finish when the command is run again"
    )]
    Stopped {
        /// Moves done.
        done: usize,
        /// Moves planned.
        planned: usize,
        /// Bytes copied.
        bytes: u64,
    },
}

/// What a progress bar needs: slots moved of planned, bytes copied.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Moves done.
    pub done: usize,
    /// Moves planned.
    pub planned: usize,
    /// Bytes copied so far.
    pub bytes: u64,
}

/// Rescales the cluster node `node` belongs to.
pub fn rescale(
    node: &str,
    change: &Change,
    opts: &Options,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<Report, RescaleError> {
    let (_, coord_desc, _) = crate::status::view(&opts.dialer, node)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| RescaleError::Invalid(format!("starting the runtime: {e}")))?;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    rt.block_on(async {
        if opts.interruptible {
            let stop = stop.clone();
            tokio::spawn(async move {
                if tokio::signal::ctrl_c().await.is_ok() {
                    stop.store(true, std::sync::atomic::Ordering::Relaxed);
                }
            });
        }
        let coord = crate::open_coord(&coord_desc, &opts.dialer)
            .await
            .map_err(MoveError::from)?;
        run(&coord, change, opts, progress, &stop).await
    })
}

async fn run(
    remote: &Arc<dyn Coord>,
    change: &Change,
    opts: &Options,
    progress: &mut (dyn FnMut(Progress) + Send),
    stop: &Arc<std::sync::atomic::AtomicBool>,
) -> Result<Report, RescaleError> {
    let dialer = &opts.dialer;
    let mut state = remote.state().await.map_err(MoveError::from)?;
    // A forced decommission and a node's removal write the map without a move, so without
    // asking the nodes: on a store that lost its state they raised its fresh map towards the
    // version the nodes recorded, past which they act on it (see `refuse_if_behind`).
    if !opts.dry_run {
        crate::mover::refuse_if_behind(dialer, &state.members, state.map.version()).await?;
    }
    let mut lost = Vec::new();
    if let (Change::Decommission(ids), true, false) = (change, opts.force, opts.dry_run) {
        lost = force_out(remote.as_ref(), &state, ids).await?;
        state = remote.state().await.map_err(MoveError::from)?;
    }
    // A rescale or move that stopped half way left slots migrating: finish those first, so that
    // running the command again resumes it.
    let mut resumed_slots = 0;
    let moving = state.map.migrations().next().map(|(slot, _)| slot);
    if let Some(slot) = moving {
        if opts.dry_run {
            return Err(RescaleError::Invalid(format!(
                "slot {slot} is still moving from an earlier rescale or move: run without --dry-run to finish it first"
            )));
        }
        resumed_slots = finish_moves(remote.as_ref(), &state, dialer).await?;
        state = remote.state().await.map_err(MoveError::from)?;
    }
    let map = &state.map;
    // Servers: the map's nodes that own slots (all must be alive: their keys are there).
    let owners: Vec<usize> = (0..map.nodes().len())
        .filter(|&i| map.slots_of(i as u16) > 0)
        .collect();
    for &i in &owners {
        let m = &map.nodes()[i];
        if !state.alive(&m.id) {
            return Err(RescaleError::Invalid(format!(
                "node {} ({}) owns slots but is not alive: its keys are there, so a rescale waits for it (or `pliant scale decommission --remove {} --force` gives its slots to the other nodes, without its keys)",
                m.id, m.addr, m.id
            )));
        }
    }
    let remove: Vec<String> = match change {
        Change::Commission(0) => {
            return Err(RescaleError::Invalid("--add must be at least 1".into()));
        }
        Change::Commission(_) => Vec::new(),
        Change::Decommission(ids) => {
            for id in ids {
                if map.index_of(id).is_none() && !state.members.iter().any(|m| m.id == *id) {
                    return Err(RescaleError::Invalid(format!(
                        "node {id} is not in the cluster (see CLUSTER NODES)"
                    )));
                }
            }
            let staying = owners
                .iter()
                .filter(|&&i| !ids.contains(&map.nodes()[i].id))
                .count();
            if staying == 0 {
                return Err(RescaleError::Invalid(
                    "removing every node that holds slots would leave nowhere for the keys".into(),
                ));
            }
            ids.clone()
        }
    };

    // Sizes and loads of every slot, from its owner.
    let (sizes, loads) = slot_stats(&state, &owners, dialer, opts.window).await?;
    let Some(&first) = owners.first() else {
        return Err(RescaleError::Invalid(
            "no node owns any slot: nothing to rescale (is the cluster up?)".into(),
        ));
    };
    let (bandwidth, bandwidth_between) = match owners.get(1) {
        Some(&second) => {
            let (from, to) = (&map.nodes()[first], &map.nodes()[second]);
            match probe(dialer, from.addr, &to.id).await {
                Ok(b) => (b, format!("{} -> {}", from.id, to.id)),
                Err(e) => {
                    tracing::warn!(
                        "node {} could not measure its link to {} ({e}): measuring this process's link instead",
                        from.id,
                        to.id
                    );
                    let b = measure_bandwidth(dialer, from.addr).await?;
                    (b, format!("this process -> {}", from.id))
                }
            }
        }
        None => {
            let only = &map.nodes()[first];
            let b = measure_bandwidth(dialer, only.addr).await?;
            (b, format!("this process -> {}", only.id))
        }
    };
    let servers: Vec<pliant_scale::ServerId> = (0..owners.len() as u32).collect();
    let server_of: HashMap<u16, u32> = owners
        .iter()
        .enumerate()
        .map(|(s, &i)| (i as u16, s as u32))
        .collect();
    let buckets: Vec<pliant_scale::Bucket> = (0..crate::SLOTS)
        .filter_map(|slot| {
            let owner = map.owner_index(slot)?;
            Some(pliant_scale::Bucket {
                id: u32::from(slot),
                size: sizes[usize::from(slot)],
                load: loads[usize::from(slot)],
                server: server_of[&owner],
            })
        })
        .collect();
    let cluster = pliant_scale::Cluster {
        servers,
        buckets,
        capacity: f64::INFINITY,
        transfer: pliant_scale::TransferModel::Network { s_net: bandwidth },
    };
    let rescale = match change {
        Change::Commission(n) => pliant_scale::Rescale::commission(&cluster, *n as u32),
        Change::Decommission(_) => pliant_scale::Rescale::decommission(
            owners
                .iter()
                .enumerate()
                .filter(|(_, i)| remove.contains(&map.nodes()[**i].id))
                .map(|(s, _)| s as u32)
                .collect(),
        ),
    };
    let planning = Instant::now();
    let mut moves = Vec::new();
    let placement = pliant_scale::plan(
        &cluster,
        &rescale,
        opts.weights,
        // Slots: a node's next keys follow the slots it owns, most of which hold nothing yet.
        pliant_scale::PlanOptions {
            slots: true,
            ..pliant_scale::PlanOptions::default()
        },
        |m| moves.push(m),
    )?;
    let plan_ms = planning.elapsed().as_secs_f64() * 1e3;
    let planned = cluster.evaluate(&rescale, &placement)?;
    let mut report = Report {
        nodes_before: owners.len(),
        nodes_after: owners.len() + rescale.add.len() - rescale.remove.len(),
        added: Vec::new(),
        removed: Vec::new(),
        not_stopped: Vec::new(),
        bandwidth_bytes_per_s: bandwidth,
        bandwidth_between,
        links: Vec::new(),
        links_t_max: None,
        planned,
        plan_ms,
        moves: moves.len(),
        planned_bytes: moves.iter().map(|m| m.bytes).sum(),
        executed: false,
        keys_moved: 0,
        bytes_moved: 0,
        seconds: 0.0,
        resumed_slots,
        lost,
    };
    if opts.dry_run {
        return Ok(report);
    }

    // New nodes: started by a local cluster's supervisor, or awaited.
    let mut id_of: HashMap<u32, String> = owners
        .iter()
        .enumerate()
        .map(|(s, &i)| (s as u32, map.nodes()[i].id.clone()))
        .collect();
    if let Change::Commission(n) = change {
        let ids = new_nodes(remote, &state, *n).await?;
        for (s, id) in rescale.add.iter().zip(&ids) {
            id_of.insert(*s, id.clone());
        }
        report.added = ids;
    }

    // Each link the moves use, measured by its source now that every node is up.
    let mut by_pair: Vec<((String, String), f64)> = Vec::new();
    for m in &moves {
        let pair = (id_of[&m.from].clone(), id_of[&m.to].clone());
        match by_pair.iter_mut().find(|(p, _)| *p == pair) {
            Some((_, b)) => *b += m.bytes,
            None => by_pair.push((pair, m.bytes)),
        }
    }
    let mut unmeasured = false;
    for ((from, to), planned_bytes) in by_pair {
        let Some(addr) = map.nodes().iter().find(|n| n.id == from).map(|n| n.addr) else {
            unmeasured = true;
            continue;
        };
        match probe_member(dialer, addr, &to).await {
            Ok(bytes_per_s) => report.links.push(Link {
                from,
                to,
                bytes_per_s,
                planned_bytes,
            }),
            Err(e) => {
                tracing::warn!("node {from} could not measure its link to {to}: {e}");
                unmeasured = true;
            }
        }
    }
    if !unmeasured {
        report.links_t_max = links_t_max(&report.links);
    }

    // The moves, several at once.
    let started = Instant::now();
    let coord: Arc<dyn Coord> = remote.clone();
    // Moves between one pair of nodes go together, a group at a time: one map update marks
    // a group migrating and one walk over the source's keys per round copies all of it.
    let mut groups: Vec<(String, String, Vec<u16>)> = Vec::new();
    for m in &moves {
        let (from, to) = (&id_of[&m.from], &id_of[&m.to]);
        match groups
            .iter_mut()
            .find(|(f, t, g)| f == from && t == to && g.len() < GROUP)
        {
            Some((_, _, g)) => g.push(m.bucket as u16),
            None => groups.push((from.clone(), to.clone(), vec![m.bucket as u16])),
        }
    }
    let mut queue: VecDeque<(Vec<u16>, String, String)> =
        groups.into_iter().map(|(f, t, g)| (g, f, t)).collect();
    let mut busy_out: HashSet<String> = HashSet::new();
    let mut busy_in: HashSet<String> = HashSet::new();
    let mut running = tokio::task::JoinSet::new();
    let mut done = 0;
    let bytes = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut failed = None;
    loop {
        let stopped = || stop.load(std::sync::atomic::Ordering::Relaxed);
        while failed.is_none() && !stopped() && running.len() < opts.parallel.max(1) {
            let Some(pos) = queue
                .iter()
                .position(|(_, from, to)| !busy_out.contains(from) && !busy_in.contains(to))
            else {
                break;
            };
            let (slots, from, to) = queue.remove(pos).expect("a position in the queue");
            busy_out.insert(from.clone());
            busy_in.insert(to.clone());
            let (coord, dialer, bytes) = (coord.clone(), opts.dialer.clone(), bytes.clone());
            let (stop, batch_bytes) = (stop.clone(), opts.batch_bytes);
            running.spawn(async move {
                let mut last = 0;
                let r = move_slots_until(
                    coord.as_ref(),
                    &dialer,
                    &slots,
                    &to,
                    &mut |_, b| {
                        bytes.fetch_add(b - last, std::sync::atomic::Ordering::Relaxed);
                        last = b;
                    },
                    &stop,
                    batch_bytes,
                )
                .await;
                (from, to, r)
            });
        }
        let Some(joined) = running.join_next().await else {
            break;
        };
        let (from, to, r) =
            joined.map_err(|e| RescaleError::Invalid(format!("a move task: {e}")))?;
        busy_out.remove(&from);
        busy_in.remove(&to);
        match r {
            Ok(MoveReport { keys, slots, .. }) => {
                report.keys_moved += keys;
                done += slots.len();
                progress(Progress {
                    done,
                    planned: report.moves,
                    bytes: bytes.load(std::sync::atomic::Ordering::Relaxed),
                });
            }
            Err(e) => {
                // Let the moves under way finish; start no more.
                failed.get_or_insert(e);
            }
        }
    }
    report.bytes_moved = bytes.load(std::sync::atomic::Ordering::Relaxed);
    report.seconds = started.elapsed().as_secs_f64();
    report.executed = true;
    // Stopped before every move ran: the nodes that were to leave stay.
    let stopped = matches!(failed, Some(MoveError::Stopped))
        || (failed.is_none()
            && !queue.is_empty()
            && stop.load(std::sync::atomic::Ordering::Relaxed));
    if stopped {
        return Err(RescaleError::Stopped {
            done,
            planned: report.moves,
            bytes: report.bytes_moved,
        });
    }
    if let Some(e) = failed {
        return Err(e.into());
    }

    // Nodes that leave: out of the map, and stopped if a supervisor runs them.
    for id in &remove {
        change_map(coord.as_ref(), |m| {
            m.without_node(id)
                .map(Some)
                .map_err(|e| MoveError::Invalid(e.to_string()))
        })
        .await?;
        // Out of the map, it holds nothing: a process that could not be stopped is left to
        // the operator, and the other nodes still leave.
        match remote.retire(id).await {
            Ok(()) => {}
            Err(CoordError::Refused(e)) if e.contains("no supervisor") => {
                tracing::warn!("node {id} holds no slot now: stop its process");
                report.not_stopped.push(id.clone());
            }
            Err(e) => {
                tracing::warn!("node {id} holds no slot now, but stopping it failed: {e}");
                report.not_stopped.push(id.clone());
            }
        }
        report.removed.push(id.clone());
    }
    Ok(report)
}

/// `n` new members: live nodes the map does not name yet (started by hand, or by an earlier
/// commission that stopped before moving anything to them: running it again resumes), then
/// nodes started by the supervisor of a local cluster, or (where none runs the coordination
/// store) awaited for up to a minute as an operator starts them.
async fn new_nodes(
    remote: &Arc<dyn Coord>,
    state: &ClusterState,
    n: usize,
) -> Result<Vec<String>, RescaleError> {
    let mut idle: Vec<String> = state
        .members
        .iter()
        .filter(|m| state.map.index_of(&m.id).is_none())
        .map(|m| m.id.clone())
        .take(n)
        .collect();
    if idle.len() == n {
        return Ok(idle);
    }
    match remote.spawn(n - idle.len()).await {
        Ok(ids) => {
            idle.extend(ids);
            return Ok(idle);
        }
        Err(CoordError::Refused(e)) if e.contains("no supervisor") => {}
        Err(e) => return Err(MoveError::from(e).into()),
    }
    tracing::warn!("start {n} node(s) with `pliant serve --coord …`; waiting up to 60 s for them");
    // Any live node the map does not name is free to take slots, whether it joined before this
    // command started or while it waits (a node started by hand a moment earlier counts).
    let known: HashSet<&str> = state.map.nodes().iter().map(|m| m.id.as_str()).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = remote.state().await.map_err(MoveError::from)?;
        let fresh: Vec<String> = now
            .members
            .iter()
            .filter(|m| !known.contains(m.id.as_str()))
            .map(|m| m.id.clone())
            .take(n)
            .collect();
        if fresh.len() == n {
            return Ok(fresh);
        }
        if Instant::now() >= deadline {
            return Err(RescaleError::Invalid(format!(
                "only {} of {n} new nodes joined within 60 s; nothing was moved",
                fresh.len()
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Finishes every move the map shows under way (grouped by source and target, as a rescale
/// makes them); how many slots.
async fn finish_moves(
    coord: &dyn Coord,
    state: &ClusterState,
    dialer: &Dialer,
) -> Result<usize, RescaleError> {
    let map = &state.map;
    // One group per source and target: `move_slots` wants one owner.
    let mut groups: std::collections::BTreeMap<(u16, u16), Vec<u16>> = Default::default();
    for (slot, m) in map.migrations() {
        groups.entry((m.from, m.to)).or_default().push(slot);
    }
    let mut done = 0;
    for ((_, to), slots) in groups {
        let to = &map.nodes()[usize::from(to)].id;
        for chunk in slots.chunks(GROUP) {
            tracing::info!("finishing the move of {} slot(s) to {to}", chunk.len());
            move_slots(coord, dialer, chunk, to, &mut |_, _| {}).await?;
            done += chunk.len();
        }
    }
    Ok(done)
}

/// Takes the slots of the nodes of `ids` that are down away from them (`--force`): a slot one
/// of them was moving out goes to its target (which has part of its keys), the others to the
/// staying live nodes in contiguous runs; a slot moving in to one of them stays with its owner.
/// What each lost.
async fn force_out(
    coord: &dyn Coord,
    state: &ClusterState,
    ids: &[String],
) -> Result<Vec<Lost>, RescaleError> {
    let map = &state.map;
    let dead: Vec<String> = ids
        .iter()
        .filter(|id| map.index_of(id).is_some() && !state.alive(id))
        .cloned()
        .collect();
    if dead.is_empty() {
        return Ok(Vec::new());
    }
    let staying: Vec<String> = map
        .nodes()
        .iter()
        .filter(|m| !ids.contains(&m.id) && state.alive(&m.id))
        .map(|m| m.id.clone())
        .collect();
    if staying.is_empty() {
        return Err(RescaleError::Invalid(format!(
            "no live node stays to take the slots of {}",
            dead.join(", ")
        )));
    }
    let lost: Vec<Lost> = dead
        .iter()
        .filter_map(|id| {
            let i = map.index_of(id)?;
            let m = &map.nodes()[usize::from(i)];
            Some(Lost {
                node: id.clone(),
                addr: m.addr.to_string(),
                slots: map.ranges_of(i),
                moving_in: map
                    .migrations()
                    .filter(|(_, g)| g.to == i)
                    .map(|(s, _)| s)
                    .collect(),
            })
        })
        .collect();
    change_map(coord, |map| {
        let is_dead = |i: u16| dead.contains(&map.nodes()[usize::from(i)].id);
        let mut orphans = Vec::new();
        let mut next = map.clone();
        for slot in 0..crate::SLOTS {
            let Some(owner) = map.owner_index(slot) else {
                continue;
            };
            match map.migration(slot) {
                Some(g) if is_dead(g.to) => next = next.with_owner(slot, owner),
                Some(g) if is_dead(owner) => next = next.with_owner(slot, g.to),
                _ if is_dead(owner) => orphans.push(slot),
                _ => {}
            }
        }
        if orphans.is_empty() && next == map {
            return Ok(None);
        }
        for (j, &slot) in orphans.iter().enumerate() {
            let to = map
                .index_of(&staying[j * staying.len() / orphans.len()])
                .ok_or_else(|| MoveError::Invalid("a staying node left the map".into()))?;
            next = next.with_owner(slot, to);
        }
        Ok(Some(next))
    })
    .await?;
    for l in &lost {
        tracing::warn!(
            "forced: node {} ({}) was down; its slots {:?} now belong to the other nodes without its keys",
            l.node,
            l.addr,
            l.slots
        );
    }
    Ok(lost)
}

/// Every slot's bytes and ops/s: two PLIANT.SLOTSTATS of each owner, `window` apart.
async fn slot_stats(
    state: &ClusterState,
    owners: &[usize],
    dialer: &Dialer,
    window: Duration,
) -> Result<(Vec<f64>, Vec<f64>), RescaleError> {
    let n = usize::from(crate::SLOTS);
    let (mut sizes, mut loads) = (vec![0.0; n], vec![0.0; n]);
    let mut conns = Vec::new();
    for &i in owners {
        let addr = state.map.nodes()[i].addr;
        conns.push(Conn::open(dialer, addr).await?);
    }
    let mut first = Vec::new();
    for c in &mut conns {
        first.push((Instant::now(), read_stats(c).await?));
    }
    tokio::time::sleep(window).await;
    for (c, (t0, before)) in conns.iter_mut().zip(first) {
        let after = read_stats(c).await?;
        let secs = t0.elapsed().as_secs_f64().max(1e-3);
        for (slot, (_, bytes, ops)) in &after {
            let i = usize::from(*slot);
            sizes[i] += *bytes as f64;
            let was = before.get(slot).map_or(0, |b| b.2);
            loads[i] += ops.saturating_sub(was) as f64 / secs;
        }
    }
    Ok((sizes, loads))
}

/// PLIANT.SLOTSTATS: slot → (keys, bytes, ops).
async fn read_stats(c: &mut Conn) -> Result<HashMap<u16, (u64, u64, u64)>, RescaleError> {
    let addr = c.addr();
    let fail = |why: String| RescaleError::Move(MoveError::Node { addr, why });
    // One walk over every key of the node: longer than a move's batch.
    let reply = c
        .call_within(&[b"PLIANT.SLOTSTATS"], Duration::from_secs(120))
        .await?;
    let Frame::Array(rows) = reply else {
        return Err(fail(format!("PLIANT.SLOTSTATS: {reply:?}")));
    };
    let mut out = HashMap::new();
    for row in rows {
        match row {
            Frame::Array(v) => match v.as_slice() {
                [
                    Frame::Integer(s),
                    Frame::Integer(k),
                    Frame::Integer(b),
                    Frame::Integer(o),
                ] => {
                    out.insert(*s as u16, (*k as u64, *b as u64, *o as u64));
                }
                _ => return Err(fail(format!("PLIANT.SLOTSTATS row {v:?}"))),
            },
            other => return Err(fail(format!("PLIANT.SLOTSTATS row {other:?}"))),
        }
    }
    Ok(out)
}

/// Payload of a link's measurement: what [`measure_bandwidth`] sends too.
const PROBE_BYTES: usize = 4 * 1024 * 1024;

/// One way, bytes per second, from the node at `from` to node `to` of its cluster, as the node
/// at `from` measures it (`PLIANT.NETPROBE`).
async fn probe(dialer: &Dialer, from: SocketAddr, to: &str) -> Result<f64, MoveError> {
    let mut c = Conn::open(dialer, from).await?;
    let size = PROBE_BYTES.to_string();
    match c
        .call(&[b"PLIANT.NETPROBE", to.as_bytes(), size.as_bytes()])
        .await?
    {
        Frame::Integer(n) if n > 0 => Ok(n as f64),
        other => Err(MoveError::Node {
            addr: from,
            why: format!("PLIANT.NETPROBE {to} answered {other:?}"),
        }),
    }
}

/// [`probe`] to a node that may have joined a moment ago: the source may not have heard of it
/// yet (its view of the members comes with the coordination store's next change), so it is
/// asked again, for up to 5 s.
async fn probe_member(dialer: &Dialer, from: SocketAddr, to: &str) -> Result<f64, MoveError> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match probe(dialer, from, to).await {
            Err(MoveError::Node { why, .. })
                if why.contains("is not in this cluster") && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            r => return r,
        }
    }
}

/// A plan's `T_max` over measured links: each node's link is busy for the bytes it sends over
/// each of its links at that link's bandwidth, and as long receiving; `T_max` is the longest of
/// these. `None` with no link (nothing moves).
fn links_t_max(links: &[Link]) -> Option<f64> {
    let mut busy: HashMap<(&str, bool), f64> = HashMap::new();
    for l in links {
        let t = l.planned_bytes / l.bytes_per_s.max(1.0);
        *busy.entry((l.from.as_str(), true)).or_default() += t;
        *busy.entry((l.to.as_str(), false)).or_default() += t;
    }
    busy.into_values().reduce(f64::max)
}

/// `s_net`: bytes per second one way, from ECHO round trips of a 4 MiB payload to `addr` (the
/// median of five): a round trip moves the payload out, then (once it is all in) back, so each
/// way took about half of it, and a slot move's copy moves each byte once, source to target.
async fn measure_bandwidth(dialer: &Dialer, addr: SocketAddr) -> Result<f64, RescaleError> {
    const PAYLOAD: usize = PROBE_BYTES;
    let mut c = Conn::open(dialer, addr).await?;
    let payload = Bytes::from(vec![b'x'; PAYLOAD]);
    let mut rates = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        match c.call(&[b"ECHO", &payload]).await {
            Ok(Frame::Bulk(b)) if b.len() == PAYLOAD => {}
            other => {
                return Err(RescaleError::Move(MoveError::Node {
                    addr,
                    why: format!("measuring bandwidth: {other:?}"),
                }));
            }
        }
        rates.push(2.0 * PAYLOAD as f64 / t.elapsed().as_secs_f64().max(1e-6));
    }
    rates.sort_by(f64::total_cmp);
    Ok(rates[rates.len() / 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(from: &str, to: &str, bytes_per_s: f64, planned_bytes: f64) -> Link {
        Link {
            from: from.into(),
            to: to.into(),
            bytes_per_s,
            planned_bytes,
        }
    }

    /// A node's link is busy for the sum over its links of bytes over that link's bandwidth,
    /// one sum sending and one receiving (full duplex); the slowest link decides, not the
    /// average of the bandwidths.
    #[test]
    fn links_t_max_is_the_busiest_direction_of_any_node_at_each_links_own_speed() {
        assert_eq!(links_t_max(&[]), None);
        // Two sources into one new node: it receives 3 s + 1 s.
        let into_new = [link("a", "n", 100.0, 300.0), link("b", "n", 200.0, 200.0)];
        assert_eq!(links_t_max(&into_new), Some(4.0));
        // One leaving node sends to two: 2 s + 5 s; the targets receive 2 s and 5 s.
        let out_of_old = [link("x", "a", 50.0, 100.0), link("x", "b", 10.0, 50.0)];
        assert_eq!(links_t_max(&out_of_old), Some(7.0));
        // Sending and receiving are apart: a node that sends 3 s and receives 3 s is busy 3 s.
        let both = [link("a", "b", 1.0, 3.0), link("b", "a", 1.0, 3.0)];
        assert_eq!(links_t_max(&both), Some(3.0));
    }
}
