//! A cluster on this machine (`pliant cluster up`): this process holds the embedded
//! coordination store and serves it to N `pliant serve --coord` processes it starts, spreads the
//! slots over them once they have joined, and stops them when it is stopped.
//!
//! ```text
//! <dir>/cluster.json   the slot map, kept across restarts (the same nodes, with the same
//!                      stores at the same addresses, find their slots again)
//! <dir>/coord.addr     where the coordination store listens (`etcd:URL` with --etcd, where
//!                      this process then serves only SPAWN and RETIRE, at the address it
//!                      records in etcd)
//! <dir>/node-<i>.id    node i's id, chosen at its first start and kept
//! <dir>/node-<i>/      node i's store (unless the nodes run --no-store)
//! <dir>/node-<i>.log   node i's log
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use pliant_proto::Dialer;

use crate::coord::{ClusterState, Coord, CoordError, Embedded};
use crate::coord_server::Supervise;
use crate::map::SlotMap;

/// How long the nodes get to start and join.
const START: Duration = Duration::from_secs(30);

/// How long a node gets to stop cleanly (finish requests, sync its store) before it is killed.
const STOP: Duration = Duration::from_secs(15);

/// What `pliant cluster up` starts.
#[derive(Debug, Clone)]
pub struct LocalSpec {
    /// The `pliant` binary the nodes run.
    pub exe: PathBuf,
    /// How many nodes.
    pub nodes: usize,
    /// Where the map, the nodes' stores and their logs live.
    pub dir: PathBuf,
    /// Node i listens on 127.0.0.1:`base_port + i`, the coordination store on `base_port - 1`;
    /// 0: every port picked free at run time.
    pub base_port: u16,
    /// Flags given to every `pliant serve` (e.g. `--no-store`, `--capacity 64MiB`).
    pub serve_args: Vec<String>,
    /// The cluster's password: clients' and the coordination store's.
    pub password: Option<String>,
    /// Keep the cluster's state in etcd at this URL instead of holding it here. This process
    /// still supervises the nodes: it records where it takes SPAWN and RETIRE in etcd
    /// (`/pliant/supervisor`), so a commission's new nodes are started here too.
    pub etcd: Option<String>,
    /// The balancer policy to set in the coordination store before the nodes start (every node
    /// runs the store's policy).
    pub balancer: Option<crate::coord::BalancerRecord>,
}

/// The cluster once every node has joined and every slot is assigned.
#[derive(Debug, Clone)]
pub struct Ready {
    /// Where the coordination store is: this process's ADDR:PORT, or `etcd:URL`.
    pub coord: String,
    /// The nodes and the map.
    pub state: ClusterState,
    /// The process id of each node, in start order.
    pub pids: Vec<u32>,
}

/// Why the cluster could not start or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpError {
    /// A file or directory could not be made or read.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// A node stopped before the cluster was up.
    #[error("node {node} exited ({status}) while starting; the end of {log}:\n{tail}")]
    NodeExited {
        /// Its number.
        node: usize,
        /// How it exited.
        status: String,
        /// Its log file.
        log: String,
        /// The last lines of it.
        tail: String,
    },
    /// Not every node joined in time.
    #[error("only {joined} of {wanted} nodes joined within {START:?}; see their logs in {dir}")]
    Timeout {
        /// Nodes that joined.
        joined: usize,
        /// Nodes started.
        wanted: usize,
        /// The cluster directory.
        dir: String,
    },
    /// The coordination store failed.
    #[error(transparent)]
    Coord(#[from] CoordError),
    /// Bad arguments.
    #[error("{0}")]
    Invalid(String),
    /// RETIRE named a node this supervisor does not run.
    #[error("node {0} is not one this supervisor runs")]
    NotSupervised(String),
    /// A SPAWN or RETIRE came as the cluster stopped.
    #[error("the cluster is stopping")]
    Stopping,
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> UpError {
    let what = what.into();
    move |source| UpError::Io { what, source }
}

/// Starts the cluster of `spec`, calls `ready` once it serves, and runs until SIGINT/SIGTERM;
/// then stops every node cleanly (SHUTDOWN: requests finished, stores synced), killing only one
/// that does not stop within 15 s.
pub fn up(spec: &LocalSpec, ready: impl FnOnce(&Ready)) -> Result<(), UpError> {
    if spec.nodes == 0 {
        return Err(UpError::Invalid("--nodes must be at least 1".into()));
    }
    if spec.base_port != 0 && usize::from(spec.base_port) + spec.nodes > 65536 {
        return Err(UpError::Invalid(format!(
            "--base-port {} leaves no room for {} nodes",
            spec.base_port, spec.nodes
        )));
    }
    if spec.base_port == 1 {
        return Err(UpError::Invalid(
            "--base-port must be 0 (pick ports) or at least 2 (the coordination store takes the port below)".into(),
        ));
    }
    // Refused before anything is created: a build without etcd must not leave a directory.
    #[cfg(not(feature = "etcd"))]
    if spec.etcd.is_some() {
        return Err(UpError::Invalid(crate::NO_ETCD.into()));
    }
    std::fs::create_dir_all(&spec.dir).map_err(io(format!("creating {}", spec.dir.display())))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io("starting the runtime"))?;
    rt.block_on(run(spec, ready))
}

async fn run(spec: &LocalSpec, ready: impl FnOnce(&Ready)) -> Result<(), UpError> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (sv_tx, sv_rx) = tokio::sync::mpsc::channel(4);
    let mut supervisor = None;
    let (coord, node_coord, server): (Arc<dyn Coord>, NodeCoord, _) = match &spec.etcd {
        Some(url) => {
            // The state is in etcd; this process still starts and stops the nodes of a
            // commission or decommission, asked at the address it records there.
            let listener = bind_coord(spec).await?;
            let (coord, addr) = open_etcd(url, &listener).await?;
            let server = tokio::spawn(crate::coord_server::serve(
                listener,
                None,
                spec.password.clone(),
                Some(sv_tx),
                stop_rx,
            ));
            tracing::info!("supervisor for etcd's cluster at {addr}");
            supervisor = Some(addr);
            (coord, NodeCoord::Etcd(url.clone()), Some(server))
        }
        None => {
            let embedded = Arc::new(Embedded::open(&spec.dir.join("cluster.json"))?);
            let listener = bind_coord(spec).await?;
            let addr = listener.local_addr().map_err(io("coordination address"))?;
            let server = tokio::spawn(crate::coord_server::serve(
                listener,
                Some(embedded.clone()),
                spec.password.clone(),
                Some(sv_tx),
                stop_rx,
            ));
            (embedded, NodeCoord::Addr(addr), Some(server))
        }
    };
    if let Some(b) = &spec.balancer {
        let v = coord
            .set_balancer(b.clone())
            .await
            .map_err(UpError::Coord)?;
        tracing::info!("balancer {} is version {v} of the cluster's", b.name);
    }
    let coord_desc = node_coord.describe();
    std::fs::write(spec.dir.join("coord.addr"), format!("{coord_desc}\n"))
        .map_err(io("writing coord.addr"))?;
    // Stop on SIGINT/SIGTERM from now on, so a stop during the start leaves no node behind.
    let stop = tokio::spawn(crate::stop_on_signal());
    // Node i for every i this directory has known (retired ones stay stopped), and at least
    // --nodes of them.
    let known = (0..)
        .take_while(|i| spec.dir.join(format!("node-{i}.id")).exists() || retired(spec, *i))
        .count();
    let mut nodes: Vec<Option<Child>> = Vec::new();
    for i in 0..known.max(spec.nodes) {
        if retired(spec, i) {
            nodes.push(None);
            continue;
        }
        match start_node(spec, i, &node_coord) {
            Ok(child) => nodes.push(Some(child)),
            Err(e) => {
                stop_nodes(&mut nodes, spec).await;
                return Err(e);
            }
        }
    }
    let result = serve_cluster(
        spec,
        coord.as_ref(),
        &node_coord,
        &mut nodes,
        ready,
        stop,
        sv_rx,
    )
    .await;
    stop_nodes(&mut nodes, spec).await;
    let _ = stop_tx.send(true);
    if let Some(server) = server {
        let _ = server.await;
    }
    if let (Some(url), Some(addr)) = (&spec.etcd, supervisor) {
        forget_supervisor(url, addr).await;
    }
    result
}

/// The coordination store's (or, with etcd, the supervisor's) listener: the port below the
/// nodes', or one picked free.
async fn bind_coord(spec: &LocalSpec) -> Result<tokio::net::TcpListener, UpError> {
    let coord_port = if spec.base_port == 0 {
        0
    } else {
        spec.base_port - 1
    };
    tokio::net::TcpListener::bind(("127.0.0.1", coord_port))
        .await
        .map_err(io(format!(
            "binding the coordination store to 127.0.0.1:{coord_port}"
        )))
}

async fn serve_cluster(
    spec: &LocalSpec,
    coord: &dyn Coord,
    node_coord: &NodeCoord,
    nodes: &mut Vec<Option<Child>>,
    ready: impl FnOnce(&Ready),
    mut stop: tokio::task::JoinHandle<()>,
    mut supervise: tokio::sync::mpsc::Receiver<Supervise>,
) -> Result<(), UpError> {
    let state = tokio::select! {
        s = wait_for_nodes(spec, coord, nodes) => s?,
        _ = &mut stop => return Ok(()),
    };
    let state = if state.map.assigned() == 0 {
        // A new cluster: every slot, evenly, in the order of the nodes' addresses.
        let mut members = state.members.clone();
        members.sort_by_key(|m| m.addr);
        let version = state.map.version();
        if !coord
            .update(version, SlotMap::even(version, &members))
            .await?
        {
            return Err(UpError::Invalid(
                "the slot map changed while it was being assigned".into(),
            ));
        }
        coord.state().await?
    } else {
        rejoin(spec, coord, state).await?
    };
    let dialer = Dialer::default().password(spec.password.as_deref());
    tokio::select! {
        w = wait_for_map(spec, &dialer, &state) => w?,
        _ = &mut stop => return Ok(()),
    }
    ready(&Ready {
        coord: node_coord.describe(),
        state,
        pids: nodes.iter().flatten().map(Child::id).collect(),
    });
    let mut exited = vec![false; nodes.len()];
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(()),
            _ = tick.tick() => {}
            Some(req) = supervise.recv() => {
                match req {
                    // A stop while nodes start or stop (up to half a minute) is not left
                    // waiting: the nodes started so far are in `nodes` and stop with the rest.
                    Supervise::Spawn(n, reply) => {
                        let r = tokio::select! {
                            r = spawn_more(spec, coord, node_coord, nodes, n) => r,
                            _ = &mut stop => {
                                let _ = reply.send(Err(UpError::Stopping));
                                return Ok(());
                            }
                        };
                        exited.resize(nodes.len(), false);
                        let _ = reply.send(r);
                    }
                    Supervise::Retire(id, reply) => {
                        let r = tokio::select! {
                            r = retire(spec, coord, nodes, &id) => r,
                            _ = &mut stop => {
                                let _ = reply.send(Err(UpError::Stopping));
                                return Ok(());
                            }
                        };
                        let _ = reply.send(r.map(|_| ()));
                    }
                }
            }
        }
        for (i, child) in nodes.iter_mut().enumerate() {
            let Some(child) = child else { continue };
            if !exited[i]
                && let Ok(Some(status)) = child.try_wait()
            {
                exited[i] = true;
                let id = node_id(spec, i).unwrap_or_default();
                let owns = coord.state().await.map_or(true, |s| {
                    s.map.index_of(&id).is_some_and(|x| s.map.slots_of(x) > 0)
                });
                if owns {
                    tracing::error!(
                        "node {i} exited ({status}); its slots are not served until it returns (see {})",
                        log_path(spec, i).display()
                    );
                } else {
                    tracing::info!("node {i} exited ({status}); it owned no slot");
                }
            }
        }
    }
}

/// Starts `n` more nodes (numbered after the others) and waits until they hold leases.
async fn spawn_more(
    spec: &LocalSpec,
    coord: &dyn Coord,
    node_coord: &NodeCoord,
    nodes: &mut Vec<Option<Child>>,
    n: usize,
) -> Result<Vec<String>, UpError> {
    let first = nodes.len();
    let mut ids = Vec::new();
    for i in first..first + n {
        ids.push(node_id(spec, i)?);
        nodes.push(Some(start_node(spec, i, node_coord)?));
    }
    let deadline = tokio::time::Instant::now() + START;
    let mut rx = coord.watch().await?;
    loop {
        let state = coord.state().await?;
        if ids.iter().all(|id| state.alive(id)) {
            return Ok(ids);
        }
        for (i, child) in nodes.iter_mut().enumerate().skip(first) {
            if let Some(Ok(Some(status))) = child.as_mut().map(Child::try_wait) {
                return Err(UpError::NodeExited {
                    node: i,
                    status: status.to_string(),
                    log: log_path(spec, i).display().to_string(),
                    tail: String::new(),
                });
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(UpError::Timeout {
                joined: ids.iter().filter(|id| state.alive(id)).count(),
                wanted: n,
                dir: spec.dir.display().to_string(),
            });
        }
        let _ = tokio::time::timeout(Duration::from_millis(100), rx.changed()).await;
    }
}

/// Stops node `id`'s process cleanly (SIGTERM; killed after [`STOP`]) and ends its lease: its
/// index.
async fn retire(
    spec: &LocalSpec,
    coord: &dyn Coord,
    nodes: &mut [Option<Child>],
    id: &str,
) -> Result<usize, UpError> {
    let i = (0..nodes.len())
        .find(|&i| nodes[i].is_some() && node_id(spec, i).is_ok_and(|n| n == id))
        .ok_or_else(|| UpError::NotSupervised(id.to_string()))?;
    let Some(mut child) = nodes[i].take() else {
        return Err(UpError::NotSupervised(id.to_string()));
    };
    let child = &mut child;
    if let Ok(None) = child.try_wait() {
        signal_term(child);
        let deadline = tokio::time::Instant::now() + STOP;
        loop {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if tokio::time::Instant::now() >= deadline => {
                    tracing::error!("node {i} did not stop within {STOP:?}; killing it");
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                Ok(None) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
    if let Err(e) = coord.leave(id).await {
        tracing::warn!("ending node {id}'s lease: {e}");
    }
    // Not started again by a later `cluster up` on this directory.
    std::fs::write(
        spec.dir.join(format!("node-{i}.retired")),
        format!("{id}\n"),
    )
    .map_err(io(format!("marking node {i} retired")))?;
    Ok(i)
}

/// Whether node `i` of this directory was retired by a decommission.
fn retired(spec: &LocalSpec, i: usize) -> bool {
    spec.dir.join(format!("node-{i}.retired")).exists()
}

/// A saved map, with the addresses its nodes came back at; an error if one of them did not
/// come back (its slots, and with a store its keys, would be unreachable).
async fn rejoin(
    spec: &LocalSpec,
    coord: &dyn Coord,
    state: ClusterState,
) -> Result<ClusterState, UpError> {
    let missing: Vec<String> = state
        .map
        .nodes()
        .iter()
        .filter(|m| {
            state
                .map
                .index_of(&m.id)
                .is_some_and(|i| state.map.slots_of(i) > 0)
        })
        .filter(|m| !state.alive(&m.id))
        .map(|m| format!("{} ({})", m.id, m.addr))
        .collect();
    if !missing.is_empty() {
        return Err(UpError::Invalid(format!(
            "{} holds a slot map whose nodes {} did not join (each node-<i>.id file in the directory names a node to start; one is missing or its node failed to start: see the node-<i>.log files), or start a new cluster elsewhere (--dir)",
            spec.dir.join("cluster.json").display(),
            missing.join(", ")
        )));
    }
    let mut map = state.map.clone();
    for m in &state.members {
        if map.index_of(&m.id).is_some() {
            map = map.with_node(m).0;
        }
    }
    if map != state.map {
        let v = state.map.version();
        if !coord.update(v, map).await? {
            return Err(UpError::Invalid(
                "the slot map changed while the nodes' addresses were updated".into(),
            ));
        }
    }
    Ok(coord.state().await?)
}

/// Node `i`'s id: the one it was given at its first start, or a new one, kept.
fn node_id(spec: &LocalSpec, i: usize) -> Result<String, UpError> {
    let file = spec.dir.join(format!("node-{i}.id"));
    match std::fs::read_to_string(&file) {
        Ok(text) => {
            let id = text.trim().to_string();
            if crate::map::valid_id(&id) {
                Ok(id)
            } else {
                Err(UpError::Invalid(format!(
                    "{}: {id:?} is not a node id (40 lowercase hex digits)",
                    file.display()
                )))
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let salt = format!("{}|{i}|{nanos}|{}", spec.dir.display(), std::process::id());
            let id = crate::node_id(SocketAddr::from(([127, 0, 0, 1], 0)), &salt);
            std::fs::write(&file, format!("{id}\n"))
                .map_err(io(format!("writing {}", file.display())))?;
            Ok(id)
        }
        Err(e) => Err(io(format!("reading {}", file.display()))(e)),
    }
}

/// Waits until every node holds a lease, failing early if one exits.
async fn wait_for_nodes(
    spec: &LocalSpec,
    coord: &dyn Coord,
    nodes: &mut [Option<Child>],
) -> Result<ClusterState, UpError> {
    let deadline = tokio::time::Instant::now() + START;
    let mut rx = coord.watch().await?;
    loop {
        let state = coord.state().await?;
        // This supervisor's own nodes, by id: a node started by hand, or a lease left by a
        // killed earlier run, does not stand in for one of them.
        let ids: Vec<String> = (0..nodes.len())
            .filter(|&i| nodes[i].is_some())
            .filter_map(|i| node_id(spec, i).ok())
            .collect();
        let running = ids.len();
        if ids.iter().all(|id| state.alive(id)) {
            return Ok(state);
        }
        for (i, child) in nodes.iter_mut().enumerate() {
            if let Some(Ok(Some(status))) = child.as_mut().map(Child::try_wait) {
                let log = log_path(spec, i);
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                return Err(UpError::NodeExited {
                    node: i,
                    status: status.to_string(),
                    log: log.display().to_string(),
                    tail: lines[lines.len().saturating_sub(10)..].join("\n"),
                });
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(UpError::Timeout {
                joined: ids.iter().filter(|id| state.alive(id)).count(),
                wanted: running,
                dir: spec.dir.display().to_string(),
            });
        }
        let _ = tokio::time::timeout(Duration::from_millis(100), rx.changed()).await;
    }
}

/// Waits until every node of the map serves its version (they learn it by watch, a moment
/// after it is written), so the cluster is ready when it says so.
async fn wait_for_map(
    spec: &LocalSpec,
    dialer: &Dialer,
    state: &ClusterState,
) -> Result<(), UpError> {
    let version = state.map.version();
    let deadline = tokio::time::Instant::now() + START;
    for m in state.map.nodes().iter().filter(|m| state.alive(&m.id)) {
        loop {
            if crate::serves(dialer, m.addr).await >= Some(version) {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(UpError::Timeout {
                    joined: state.members.len(),
                    wanted: spec.nodes,
                    dir: spec.dir.display().to_string(),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(())
}

fn log_path(spec: &LocalSpec, i: usize) -> PathBuf {
    spec.dir.join(format!("node-{i}.log"))
}

/// How a node reaches the coordination store.
#[derive(Debug, Clone)]
enum NodeCoord {
    /// The one this process serves.
    Addr(SocketAddr),
    /// etcd.
    Etcd(String),
}

impl NodeCoord {
    fn describe(&self) -> String {
        match self {
            Self::Addr(a) => a.to_string(),
            Self::Etcd(url) => format!("etcd:{url}"),
        }
    }
}

/// etcd at `url`, with the supervisor's address (`listener`'s) recorded in it.
#[cfg(feature = "etcd")]
async fn open_etcd(
    url: &str,
    listener: &tokio::net::TcpListener,
) -> Result<(Arc<dyn Coord>, SocketAddr), UpError> {
    let addr = listener.local_addr().map_err(io("supervisor address"))?;
    let etcd = crate::etcd::Etcd::connect(url).await?;
    etcd.set_supervisor(Some(addr)).await?;
    Ok((Arc::new(Arc::new(etcd)), addr))
}

#[cfg(not(feature = "etcd"))]
async fn open_etcd(
    _: &str,
    _: &tokio::net::TcpListener,
) -> Result<(Arc<dyn Coord>, SocketAddr), UpError> {
    Err(UpError::Invalid(crate::NO_ETCD.into()))
}

/// Removes the supervisor's address from etcd as it stops, unless another supervisor's
/// replaced it (a later commission then waits for nodes started by hand instead of asking a
/// supervisor that is gone).
#[cfg(feature = "etcd")]
async fn forget_supervisor(url: &str, addr: SocketAddr) {
    let forgot = match crate::etcd::Etcd::connect(url).await {
        Ok(etcd) => etcd.forget_supervisor(addr).await,
        Err(e) => Err(e),
    };
    if let Err(e) = forgot {
        tracing::warn!("removing this supervisor's address from etcd: {e}");
    }
}

#[cfg(not(feature = "etcd"))]
async fn forget_supervisor(_: &str, _: SocketAddr) {}

fn start_node(spec: &LocalSpec, i: usize, coord: &NodeCoord) -> Result<Child, UpError> {
    let port = if spec.base_port == 0 {
        0
    } else {
        usize::from(spec.base_port) + i
    };
    let log = log_path(spec, i);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(io(format!("opening {}", log.display())))?;
    let id = node_id(spec, i)?;
    let mut cmd = Command::new(&spec.exe);
    cmd.args(["serve", "--bind", &format!("127.0.0.1:{port}")])
        .args(["--node-id", &id]);
    match coord {
        NodeCoord::Addr(a) => cmd.args(["--coord", &a.to_string()]),
        NodeCoord::Etcd(url) => cmd.args(["--etcd", url]),
    };
    if !spec
        .serve_args
        .iter()
        .any(|a| a == "--no-store" || a == "--store")
    {
        cmd.arg("--store").arg(spec.dir.join(format!("node-{i}")));
    }
    cmd.args(&spec.serve_args);
    // The password goes by the environment, not the command line `ps` shows.
    if let Some(p) = &spec.password {
        cmd.env("PLIANT_PASSWORD", p);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(file)
        .spawn()
        .map_err(io(format!("starting {}", spec.exe.display())))
}

/// Stops every node still running: SHUTDOWN (it syncs its store), then, after [`STOP`], a kill.
async fn stop_nodes(nodes: &mut [Option<Child>], spec: &LocalSpec) {
    for child in nodes.iter_mut().flatten() {
        if let Ok(None) = child.try_wait() {
            // Ctrl-C in a terminal reached the nodes too; SIGTERM the rest.
            signal_term(child);
        }
    }
    let deadline = tokio::time::Instant::now() + STOP;
    for (i, child) in nodes.iter_mut().enumerate() {
        let Some(child) = child else { continue };
        loop {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if tokio::time::Instant::now() >= deadline => {
                    tracing::error!(
                        "node {i} did not stop within {STOP:?}; killing it (see {})",
                        log_path(spec, i).display()
                    );
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                Ok(None) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
}

/// SIGTERM to a node, by its pid (std's `Child::kill` can only SIGKILL, which skips the sync).
fn signal_term(child: &Child) {
    let Ok(pid) = i32::try_from(child.id()) else {
        return;
    };
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    );
}

#[cfg(test)]
mod tests {
    #[cfg(not(feature = "etcd"))]
    #[test]
    fn a_build_without_etcd_refuses_etcd_before_creating_the_directory() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("cluster");
        let spec = super::LocalSpec {
            exe: "pliant".into(),
            nodes: 3,
            dir: dir.clone(),
            base_port: 0,
            serve_args: Vec::new(),
            password: None,
            etcd: Some("http://127.0.0.1:2379".into()),
            balancer: None,
        };
        let e = super::up(&spec, |_| {}).expect_err("no etcd in this build");
        assert!(e.to_string().contains("built without etcd"), "{e}");
        assert!(!dir.exists(), "{} was created", dir.display());
    }
}
