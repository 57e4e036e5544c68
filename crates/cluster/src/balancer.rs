//! Mantle on the cluster: every node runs the cluster's balancing policy (kept in the
//! coordination store with a version: set by `cluster up --balancer`, `serve --balancer` or
//! `PLIANT.BALANCER LOAD`, installed by every node at its next decision) over every node's load,
//! and moves its own hash slots where the policy says.
//!
//! As in CephFS with Mantle, each node decides for itself, every interval (10 s by default,
//! Ceph's `mds_bal_interval`):
//!
//! 1. it measures every node's load: the keyed commands each ran per second since the last
//!    decision (its own from its per-slot counters, the others' by `PLIANT.LOAD`, the count a
//!    node keeps, asked with a timeout of half the interval, as Mantle bounds its reads);
//! 2. the policy's `servers[id]` holds `load` and `req_rate` (both that rate, Mantle's names)
//!    and `slots` (how many the node owns) for every node of the map and every live member,
//!    under the node ids `CLUSTER NODES` shows; `whoami` is this node's id;
//! 3. when `when` holds, `where`'s targets (an amount of load per node) become slot moves:
//!    for each target, this node's slots are picked by their own load (over the last
//!    `slot_window` intervals since its slots last changed) with each of `howmuch`'s strategies (Mantle's fragment selectors: `big` hottest first,
//!    `small` coolest first, `big_small` alternating, `half` half of the loaded slots in slot
//!    order), and the selection whose load is closest to the amount is moved by the slot mover
//!    ([`crate::mover`]), the one `pliant cluster move` and rescaling use.
//!
//! A decision is skipped (and logged as such) while any slot is moving (this node's or
//! another's, so two balancers or a rescale never pull one slot two ways), while a node of the
//! map cannot be measured, and on the first interval (there is no rate yet). The one exception
//! is a move this balancer began that failed half way (a broken connection, a node too slow to
//! answer): the mover leaves its slots migrating, to be finished by running it again, and with
//! no one to run it every balancer would skip for good. So the balancer remembers its failed
//! moves and its next decision finishes them before it measures anything (a decision skipped
//! as such, with a move of strategy `finish`), trying again at the decision after if that
//! fails too. Not a move that met `-MOVEOVER` (another process gave it up or began it again:
//! theirs), and not after a restart (the memory is this thread's): such a move waits, as one a
//! rescale left half done, for `pliant cluster move` or a rescale to run it again. Another
//! process finishing the same move beside the balancer is safe: the mover's last step gives a
//! slot only while that very move is still the slot's. After moving, the
//! counts are read again, so that the next decision sees the load as it is after the move, not a
//! blend. `PLIANT.BALANCER STATUS` and `PLIANT.BALANCER LOG [n]` show what it decided.
//!
//! The engine keeps its state in `Rc`s (a Lua VM is single-threaded), so the balancer is a
//! thread of its own, with a small runtime of its own for its connections.
//!
//! It sees the node it runs on through [`BalancedNode`] (its membership, its per-slot counts,
//! its stop signal), which the data plane (`pliant-kv`'s `Node`) implements: nothing here holds
//! a node.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pliant_policy::{
    Callback, Engine, HowMuch, Metrics, ParamValue, Params, PolicySource, ServerId, Style,
};
use serde::Serialize;

use pliant_proto::frame::Frame;
use tokio::sync::watch;

use crate::config::BalancerConfig;
use crate::coord::{BalancerRecord, ClusterState, Coord, CoordError};
use crate::map::Member;
use crate::membership::Membership;
use crate::mover::{Conn, MoveError, move_slots};

/// Decisions kept for `PLIANT.BALANCER LOG` (the newest).
const LOG: usize = 1_000;

/// The strategies `howmuch` may name, and the ones tried when it names none.
pub const STRATEGIES: &[&str] = &["big", "small", "big_small", "half"];
const DEFAULT_STRATEGIES: &[&str] = &["big", "small", "big_small"];

/// What the balancer needs of the node it runs on: what the data plane (`pliant-kv`'s `Node`)
/// offers it, so that the control plane holds no node.
pub trait BalancedNode: Send + Sync + 'static {
    /// Its membership (id, the map it follows, the coordination store, the dialer), while it
    /// is in a cluster.
    fn membership(&self) -> Option<&Membership>;
    /// Keyed commands it ran on `slot` since it started: its load, slot by slot.
    fn slot_ops(&self, slot: u16) -> u64;
    /// A receiver that turns true when the node starts stopping: the balancer stops with it.
    fn stop_signal(&self) -> watch::Receiver<bool>;
}

/// Slots sent to one node by one decision.
#[derive(Debug, Clone, Serialize)]
pub struct Moved {
    /// The node they went to.
    pub to: String,
    /// The load `where` asked to send it, ops/s.
    pub asked: f64,
    /// The strategy whose selection was closest, or `finish`: the rest of a move of this
    /// balancer's that had failed half way (its `asked` and `load` are 0).
    pub strategy: String,
    /// Slots moved.
    pub slots: usize,
    /// Their load over the last interval, ops/s.
    pub load: f64,
    /// Keys moved.
    pub keys: u64,
    /// Bytes of keys and values moved.
    pub bytes: u64,
    /// How long the move took.
    pub seconds: f64,
}

impl Moved {
    /// A move to node `to` about to begin, nothing moved yet.
    fn begin(to: &str, asked: f64, strategy: String, load: f64) -> Self {
        Self {
            to: to.to_string(),
            asked,
            strategy,
            slots: 0,
            load,
            keys: 0,
            bytes: 0,
            seconds: 0.0,
        }
    }
}

/// One decision.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    /// When, milliseconds since the Unix epoch.
    pub unix_ms: u64,
    /// The map version it decided on.
    pub version: u64,
    /// Every node's load, ops/s.
    pub loads: BTreeMap<String, f64>,
    /// The policy's `when`.
    pub when: bool,
    /// `where`'s targets: load to send to each node.
    pub targets: BTreeMap<String, f64>,
    /// What was moved.
    pub moved: Vec<Moved>,
    /// Why the decision was skipped, if it was.
    pub skipped: Option<String>,
    /// What failed, if anything (the policy, a selection, a move).
    pub error: Option<String>,
}

/// What `PLIANT.BALANCER STATUS` reports.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Status {
    /// The running policy's name (empty while the cluster has none).
    pub policy: String,
    /// The version of the cluster's balancer policy this node runs.
    pub version: Option<u64>,
    /// Why the cluster's latest policy did not install here, if it did not (the one before
    /// runs on).
    pub install_error: Option<String>,
    /// Seconds between decisions.
    pub interval_s: f64,
    /// Decisions the policy made.
    pub decisions: u64,
    /// Intervals with no decision (see [`Entry`]'s `skipped`).
    pub skipped: u64,
    /// Decisions that failed.
    pub errors: u64,
    /// Decisions whose `when` held.
    pub whens: u64,
    /// Moves made (one per target of a decision).
    pub moves: u64,
    /// Slots moved away from this node.
    pub slots_moved: u64,
    /// Keys moved away from this node.
    pub keys_moved: u64,
    /// The latest decision.
    pub last: Option<Entry>,
}

#[derive(Default)]
struct Shared {
    status: Status,
    log: VecDeque<Entry>,
}

/// Why the balancer did not start, or did not take a policy.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BalancerError {
    /// The node is in no cluster.
    #[error("a balancer moves slots between a cluster's nodes: give --coord or --etcd")]
    NotInCluster,
    /// The thread could not be spawned.
    #[error("cannot start the balancer thread")]
    Spawn(#[source] std::io::Error),
    /// The thread is gone (it stopped at its start, or the node is stopping).
    #[error("the balancer thread stopped")]
    Stopped,
    /// The thread did not answer within its reply timeout.
    #[error("the balancer thread did not answer within {0:?}")]
    NoAnswer(Duration),
    /// A record whose chunks make no policy.
    #[error("balancer {name}: {why}")]
    Record {
        /// The policy's name.
        name: String,
        /// What is wrong with its chunks.
        why: String,
    },
    /// The engine refused the policy (it does not compile, or its dry run failed or exceeded
    /// its budget); the running one stays.
    #[error("balancer {name}")]
    Policy {
        /// The policy's name.
        name: String,
        /// The engine's error.
        #[source]
        source: pliant_policy::PolicyError,
    },
    /// The coordination store could not be reached or did not take the record.
    #[error("coordination store")]
    Coord(#[source] CoordError),
    /// A rollback with no earlier policy in the store.
    #[error("no earlier balancer policy to roll back to")]
    NoEarlier,
}

/// Why a decision was skipped: not every node's load could be measured ([`Entry`]'s `skipped`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MeasureError {
    /// The node left its cluster (or never joined one).
    #[error("not a cluster node")]
    NotInCluster,
    /// A node did not report its count.
    #[error("node {id} ({addr}) not measured")]
    Node {
        /// Its id.
        id: String,
        /// Its address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: LoadError,
    },
}

/// Why a node's `PLIANT.LOAD` count could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// No connection within the time a measurement allows (half the interval).
    #[error("no connection within {0:?}")]
    NoConnection(Duration),
    /// The connection or the request failed.
    #[error("PLIANT.LOAD")]
    Call(#[source] MoveError),
    /// The node answered something other than a count.
    #[error("PLIANT.LOAD answered {0}")]
    Unexpected(String),
}

/// What failed in a decision ([`Entry`]'s `error`): the policy, its `howmuch`, or a move.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecisionError {
    /// The policy failed (an error in its code, its budget exceeded).
    #[error("policy")]
    Policy(#[source] pliant_policy::PolicyError),
    /// `howmuch` named no strategy the balancer has.
    #[error(
        "howmuch: {0}; the balancer takes a list of strategies among {list}",
        list = STRATEGIES.join(", ")
    )]
    HowMuch(String),
    /// A target of `where` holds no lease.
    #[error("target {0} is not a live member of the cluster")]
    NotAlive(String),
    /// Moving slots to a target failed (the moves before it stand).
    #[error("moving slots to {to}")]
    Move {
        /// The target.
        to: String,
        /// Why.
        #[source]
        source: MoveError,
    },
    /// Finishing a move of this balancer's that had failed half way failed again (tried again
    /// at the next decision).
    #[error("finishing the move of slots to {to} that failed before")]
    Finish {
        /// The target.
        to: String,
        /// Why.
        #[source]
        source: MoveError,
    },
}

/// What `PLIANT.BALANCER LOAD` and `ROLLBACK` ask of the balancer thread.
enum Msg {
    Load {
        record: BalancerRecord,
        reply: std::sync::mpsc::SyncSender<Result<u64, BalancerError>>,
    },
    Rollback {
        reply: std::sync::mpsc::SyncSender<Result<u64, BalancerError>>,
    },
}

/// How long `PLIANT.BALANCER LOAD`/`ROLLBACK` wait for the balancer thread (a load dry-runs the
/// policy, bounded by its instruction budget, and writes the coordination store).
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// The handle `PLIANT.BALANCER` uses.
#[derive(Clone)]
pub struct Balancer {
    shared: Arc<Mutex<Shared>>,
    tx: tokio::sync::mpsc::UnboundedSender<Msg>,
}

impl std::fmt::Debug for Balancer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Balancer").finish_non_exhaustive()
    }
}

impl Balancer {
    /// Starts the balancer of `node` (a cluster node). It runs the policy the coordination
    /// store holds; `config.source`, if given, is checked now (a policy that does not compile
    /// or whose dry run fails stops the start) and set in the store if the store has none.
    pub fn start(
        node: Arc<dyn BalancedNode>,
        config: BalancerConfig,
    ) -> Result<Self, BalancerError> {
        let Some(cluster) = node.membership() else {
            return Err(BalancerError::NotInCluster);
        };
        let (me, state) = (cluster.me().id.clone(), cluster.state());
        let shared = Arc::new(Mutex::new(Shared {
            status: Status {
                interval_s: config.interval.as_secs_f64(),
                ..Status::default()
            },
            log: VecDeque::new(),
        }));
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
        let out = shared.clone();
        std::thread::Builder::new()
            .name("pliant-balancer".into())
            .spawn(move || {
                // An install's dry run sees the cluster as it is, every load 0 (none is
                // measured yet).
                let mut metrics = Metrics::new(ServerId::Name(me));
                fill(&mut metrics, &state, &BTreeMap::new());
                let flag = match &config.source {
                    None => None,
                    Some(source) => match check(&metrics, source, &config.params) {
                        Ok(()) => Some(record_of(source, &config.params)),
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    },
                };
                let _ = ready_tx.send(Ok(()));
                Thread {
                    node,
                    engine: Engine::in_memory(metrics),
                    installed: None,
                    flag,
                    rx,
                    interval: config.interval,
                    shared: out,
                    conns: HashMap::new(),
                    seen: HashMap::new(),
                    history: VecDeque::new(),
                    owned: Vec::new(),
                    slot_window: config.slot_window.max(1),
                    unfinished: BTreeMap::new(),
                }
                .run();
            })
            .map_err(BalancerError::Spawn)?;
        ready_rx.recv().map_err(|_| BalancerError::Stopped)??;
        Ok(Self { shared, tx })
    }

    /// Checks `record`'s policy here and makes it the cluster's (every node installs it at its
    /// next decision); its version. The running policy stays if the check fails.
    pub fn load(&self, record: BalancerRecord) -> Result<u64, BalancerError> {
        self.ask(|reply| Msg::Load { record, reply })
    }

    /// Makes the policy before the cluster's current one current again; its (new) version.
    pub fn rollback(&self) -> Result<u64, BalancerError> {
        self.ask(|reply| Msg::Rollback { reply })
    }

    fn ask(
        &self,
        msg: impl FnOnce(std::sync::mpsc::SyncSender<Result<u64, BalancerError>>) -> Msg,
    ) -> Result<u64, BalancerError> {
        let (reply, answer) = std::sync::mpsc::sync_channel(1);
        self.tx
            .send(msg(reply))
            .map_err(|_| BalancerError::Stopped)?;
        answer.recv_timeout(REPLY_TIMEOUT).map_err(|e| match e {
            std::sync::mpsc::RecvTimeoutError::Timeout => BalancerError::NoAnswer(REPLY_TIMEOUT),
            std::sync::mpsc::RecvTimeoutError::Disconnected => BalancerError::Stopped,
        })?
    }

    /// What it has done.
    pub fn status(&self) -> Status {
        self.lock().status.clone()
    }

    /// Its latest `n` decisions, oldest first.
    pub fn log(&self, n: usize) -> Vec<Entry> {
        let s = self.lock();
        s.log
            .iter()
            .skip(s.log.len().saturating_sub(n))
            .cloned()
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The coordination store's form of `source` with `params`.
pub fn record_of(source: &PolicySource, params: &Params) -> BalancerRecord {
    let chunks = match &source.style {
        Style::Functions(c) => [("main".to_string(), c.code.clone())].into(),
        Style::Chunks(cs) => cs
            .iter()
            .map(|(cb, c)| (cb.name().to_string(), c.code.clone()))
            .collect(),
    };
    BalancerRecord {
        version: 0,
        name: source.name.clone(),
        chunks,
        params: params
            .iter()
            .map(|(k, v)| {
                let text = match v {
                    ParamValue::Num(x) => x.to_string(),
                    ParamValue::Str(s) => s.clone(),
                };
                (k.clone(), text)
            })
            .collect(),
        previous: None,
    }
}

/// The policy and parameters a record holds.
pub fn source_of(r: &BalancerRecord) -> Result<(PolicySource, Params), BalancerError> {
    let bad = |why: String| BalancerError::Record {
        name: r.name.clone(),
        why,
    };
    let params = r
        .params
        .iter()
        .map(|(k, v)| (k.clone(), ParamValue::parse(v)))
        .collect();
    if let Some(code) = r.chunks.get("main") {
        if r.chunks.len() > 1 {
            return Err(bad(
                "a policy of functions (\"main\") has no other chunks".to_string()
            ));
        }
        return Ok((
            PolicySource::functions(r.name.clone(), code.clone()),
            params,
        ));
    }
    let mut parts = Vec::new();
    for (name, code) in &r.chunks {
        let cb = Callback::ALL
            .into_iter()
            .find(|c| c.name() == name)
            .ok_or_else(|| {
                bad(format!(
                    "chunk {name:?} is none of main, load, when, where, howmuch"
                ))
            })?;
        parts.push((cb, code.as_str()));
    }
    if parts.is_empty() {
        return Err(bad("no source".to_string()));
    }
    Ok((PolicySource::chunks(r.name.clone(), parts), params))
}

/// Installs `source` in a throwaway engine over `metrics` (which runs its dry run).
fn check(metrics: &Metrics, source: &PolicySource, params: &Params) -> Result<(), BalancerError> {
    let mut e = Engine::in_memory(metrics.clone());
    e.set_params(params.clone());
    e.install(source.clone())
        .map(|_| ())
        .map_err(|e| BalancerError::Policy {
            name: source.name.clone(),
            source: e,
        })
}

struct Thread {
    node: Arc<dyn BalancedNode>,
    engine: Engine,
    /// The version of the store's record the engine runs (or failed to install: it is not
    /// tried again until the store's version changes).
    installed: Option<u64>,
    /// The policy `--balancer` named, to set in the store if it has none.
    flag: Option<BalancerRecord>,
    rx: tokio::sync::mpsc::UnboundedReceiver<Msg>,
    interval: Duration,
    shared: Arc<Mutex<Shared>>,
    /// Connections to the other nodes, by address (dropped on an error, opened again).
    conns: HashMap<SocketAddr, Conn>,
    /// Every other node's count when last read: id → (when, keyed commands so far).
    seen: HashMap<String, (Instant, u64)>,
    /// This node's per-slot counts at each of the last `slot_window` + 1 reads since its slots
    /// last changed, oldest first.
    history: VecDeque<(Instant, Vec<u64>)>,
    /// The slots this node owned at the last read.
    owned: Vec<u16>,
    /// Intervals of history a slot's load is measured over.
    slot_window: usize,
    /// Slots of moves this balancer began that failed half way, with the node each was moving
    /// to: finished at the next decision (see the module doc).
    unfinished: BTreeMap<u16, String>,
}

/// What woke the balancer thread.
enum Wake {
    Tick,
    Stop,
    Msg(Msg),
}

/// Every node's load over the interval just ended, and this node's per slot over its window.
struct Loads {
    nodes: BTreeMap<String, f64>,
    slots: Vec<f64>,
}

impl Thread {
    fn run(mut self) {
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                tracing::error!("balancer: cannot start its runtime: {e}");
                return;
            }
        };
        let mut coord: Option<Arc<dyn Coord>> = None;
        let mut stop = self.node.stop_signal();
        let mut next = tokio::time::Instant::now() + self.interval;
        loop {
            if *stop.borrow() {
                return;
            }
            let wake = rt.block_on(async {
                tokio::select! {
                    _ = tokio::time::sleep_until(next) => Wake::Tick,
                    _ = stop.changed() => Wake::Stop,
                    Some(m) = self.rx.recv() => Wake::Msg(m),
                }
            });
            if matches!(wake, Wake::Stop) {
                return;
            }
            // A cluster without a balancer policy costs its nodes nothing but this check.
            let idle = self.flag.is_none()
                && self.installed.is_none()
                && matches!(wake, Wake::Tick)
                && self
                    .node
                    .membership()
                    .is_some_and(|c| c.state().balancer.is_none());
            if idle {
                next += self.interval;
                continue;
            }
            if coord.is_none() {
                let Some((desc, dialer)) = self
                    .node
                    .membership()
                    .map(|c| (c.coord_addr().to_string(), c.dialer().clone()))
                else {
                    return;
                };
                match rt.block_on(crate::open_coord(&desc, &dialer)) {
                    Ok(c) => coord = Some(c),
                    Err(e) => {
                        let e = BalancerError::Coord(e);
                        match wake {
                            Wake::Msg(Msg::Load { reply, .. } | Msg::Rollback { reply }) => {
                                let _ = reply.send(Err(e));
                            }
                            _ => self.record(Entry::skipped(0, pliant_proto::error::chain(&e))),
                        }
                        next = tokio::time::Instant::now() + self.interval;
                        continue;
                    }
                }
            }
            let Some(c) = coord.clone() else { continue };
            match wake {
                Wake::Msg(m) => {
                    rt.block_on(self.handle(m, c.as_ref()));
                    continue;
                }
                Wake::Tick | Wake::Stop => next += self.interval,
            }
            rt.block_on(self.sync_policy(c.as_ref()));
            // No policy runs until one installs (the first may fail to, here).
            if self.engine.active_version().is_none() {
                continue;
            }
            let entry = rt.block_on(self.decide(c.as_ref()));
            self.record(entry);
        }
    }

    /// Follows the store: sets `--balancer`'s policy there if it has none, installs the
    /// store's policy when its version is not the one running.
    async fn sync_policy(&mut self, coord: &dyn Coord) {
        let Some(state) = self.node.membership().map(|c| c.state()) else {
            return;
        };
        let record = match (&state.balancer, self.flag.take()) {
            (Some(r), flag) => {
                if let Some(f) = flag.filter(|f| f.name != r.name) {
                    tracing::warn!(
                        "the cluster runs balancer {} (version {}); --balancer {} was not set",
                        r.name,
                        r.version,
                        f.name
                    );
                }
                r.clone()
            }
            (None, None) => return,
            (None, Some(f)) => match coord.set_balancer(f.clone()).await {
                Ok(v) => BalancerRecord { version: v, ..f },
                Err(e) => {
                    tracing::warn!(
                        "balancer: setting {} in the coordination store: {e}",
                        f.name
                    );
                    self.flag = Some(f);
                    return;
                }
            },
        };
        if self.installed == Some(record.version) {
            return;
        }
        self.installed = Some(record.version);
        // Checked apart first, so that a policy that fails here leaves the running one with its
        // own parameters.
        let installed = source_of(&record).and_then(|(source, params)| {
            check(self.engine.metrics(), &source, &params)?;
            self.engine.set_params(params);
            self.engine
                .install(source)
                .map(|_| ())
                .map_err(|e| BalancerError::Policy {
                    name: record.name.clone(),
                    source: e,
                })
        });
        let mut s = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        match installed {
            Ok(()) => {
                tracing::info!(
                    "balancer {} version {} installed",
                    record.name,
                    record.version
                );
                s.status.policy = record.name.clone();
                s.status.version = Some(record.version);
                s.status.install_error = None;
            }
            Err(e) => {
                let e = pliant_proto::error::chain(&e);
                tracing::warn!("{e}; the policy that ran before runs on");
                s.status.install_error = Some(e);
            }
        }
    }

    async fn handle(&mut self, m: Msg, coord: &dyn Coord) {
        let (result, reply) = match m {
            Msg::Load { record, reply } => {
                let checked = source_of(&record)
                    .and_then(|(source, params)| check(self.engine.metrics(), &source, &params));
                let result = match checked {
                    Ok(()) => coord
                        .set_balancer(record)
                        .await
                        .map_err(BalancerError::Coord),
                    Err(e) => Err(e),
                };
                (result, reply)
            }
            Msg::Rollback { reply } => {
                let result = match coord.state().await {
                    Err(e) => Err(BalancerError::Coord(e)),
                    Ok(s) => match s.balancer.and_then(|b| b.previous) {
                        None => Err(BalancerError::NoEarlier),
                        Some(prev) => coord
                            .set_balancer(*prev)
                            .await
                            .map_err(BalancerError::Coord),
                    },
                };
                (result, reply)
            }
        };
        let _ = reply.send(result);
    }

    fn record(&self, e: Entry) {
        let mut s = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        let st = &mut s.status;
        if e.skipped.is_some() {
            st.skipped += 1;
        } else {
            st.decisions += 1;
        }
        st.errors += u64::from(e.error.is_some());
        st.whens += u64::from(e.when);
        st.moves += e.moved.len() as u64;
        st.slots_moved += e.moved.iter().map(|m| m.slots as u64).sum::<u64>();
        st.keys_moved += e.moved.iter().map(|m| m.keys).sum::<u64>();
        if let Some(err) = &e.error {
            tracing::warn!("balancer: {err}");
        }
        for m in &e.moved {
            tracing::info!(
                "balancer: moved {} slot(s) ({:.1} ops/s of {:.1} asked, {}) to {}",
                m.slots,
                m.load,
                m.asked,
                m.strategy,
                m.to
            );
        }
        st.last = Some(e.clone());
        if s.log.len() == LOG {
            s.log.pop_front();
        }
        s.log.push_back(e);
    }

    /// The nodes the policy sees: the map's, then live members that own nothing.
    fn nodes(state: &ClusterState) -> Vec<Member> {
        let mut nodes: Vec<Member> = state.map.nodes().to_vec();
        for m in &state.members {
            if state.map.index_of(&m.id).is_none() {
                nodes.push(m.clone());
            }
        }
        nodes
    }

    /// Reads every node's count; their rates since the last read, if every node answered
    /// now and then.
    async fn measure(&mut self, nodes: &[Member], me: &str) -> Result<Option<Loads>, MeasureError> {
        let node = self.node.clone();
        let Some(cluster) = node.membership() else {
            return Err(MeasureError::NotInCluster);
        };
        let dialer = cluster.dialer().clone();
        let timeout = (self.interval / 2).max(Duration::from_millis(200));
        let mut counts = Vec::with_capacity(nodes.len());
        let mut failed = None;
        for m in nodes.iter().filter(|m| m.id != me) {
            match self.remote_count(&dialer, m.addr, timeout).await {
                Ok(c) => counts.push((m.id.clone(), Instant::now(), c)),
                Err(source) => {
                    failed = Some(MeasureError::Node {
                        id: m.id.clone(),
                        addr: m.addr,
                        source,
                    });
                }
            }
        }
        let now = Instant::now();
        let slots: Vec<u64> = (0..crate::SLOTS).map(|s| node.slot_ops(s)).collect();
        let mut loads = Loads {
            nodes: BTreeMap::new(),
            slots: vec![0.0; slots.len()],
        };
        let mut complete = failed.is_none();
        // This node's load: over the last interval, like the others'.
        match self.history.back() {
            Some((t0, before)) => {
                let secs = now.duration_since(*t0).as_secs_f64().max(1e-3);
                let ops: u64 = before
                    .iter()
                    .zip(&slots)
                    .map(|(b, a)| a.saturating_sub(*b))
                    .sum();
                loads.nodes.insert(me.to_string(), ops as f64 / secs);
            }
            None => complete = false,
        }
        // Each slot's: over the window (see `slot_window`), restarted when this node's slots
        // change, so that a slot that just arrived is not judged by another node's history.
        let owned: Vec<u16> = {
            let state = cluster.state();
            let i = state.map.index_of(me);
            (0..crate::SLOTS)
                .filter(|&s| i.is_some() && state.map.owner_index(s) == i)
                .collect()
        };
        if owned != self.owned {
            self.history.clear();
            self.owned = owned;
        }
        if let Some((t0, before)) = self.history.front() {
            let secs = now.duration_since(*t0).as_secs_f64().max(1e-3);
            for (i, (b, a)) in before.iter().zip(&slots).enumerate() {
                loads.slots[i] = a.saturating_sub(*b) as f64 / secs;
            }
        }
        self.history.push_back((now, slots));
        while self.history.len() > self.slot_window + 1 {
            self.history.pop_front();
        }
        for (id, t1, c1) in counts {
            match self.seen.insert(id.clone(), (t1, c1)) {
                // A count that went down is a node that restarted: no rate this time.
                Some((t0, c0)) if c1 >= c0 => {
                    let secs = t1.duration_since(t0).as_secs_f64().max(1e-3);
                    loads.nodes.insert(id, (c1 - c0) as f64 / secs);
                }
                _ => complete = false,
            }
        }
        if let Some(f) = failed {
            return Err(f);
        }
        Ok(complete.then_some(loads))
    }

    async fn remote_count(
        &mut self,
        dialer: &pliant_proto::Dialer,
        addr: SocketAddr,
        timeout: Duration,
    ) -> Result<u64, LoadError> {
        let c = match self.conns.entry(addr) {
            std::collections::hash_map::Entry::Occupied(c) => c.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let c = tokio::time::timeout(timeout, Conn::open(dialer, addr))
                    .await
                    .map_err(|_| LoadError::NoConnection(timeout))?
                    .map_err(LoadError::Call)?;
                v.insert(c)
            }
        };
        let r = c.call_within(&[b"PLIANT.LOAD"], timeout).await;
        match r {
            Ok(Frame::Integer(n)) if n >= 0 => Ok(n as u64),
            Ok(other) => {
                self.conns.remove(&addr);
                Err(LoadError::Unexpected(format!("{other:?}")))
            }
            Err(e) => {
                self.conns.remove(&addr);
                Err(LoadError::Call(e))
            }
        }
    }

    async fn decide(&mut self, coord: &dyn Coord) -> Entry {
        let node = self.node.clone();
        let Some(cluster) = node.membership() else {
            return Entry::skipped(0, pliant_proto::error::chain(&MeasureError::NotInCluster));
        };
        let dialer = cluster.dialer().clone();
        let state = cluster.state();
        let me = cluster.me().id.clone();
        let version = state.map.version();
        // Its own failed moves first, before anything is measured (a node that cannot be
        // measured does not stop them), and nothing else is moved meanwhile. A slot of them
        // that no longer moves from here to the node it was moving to is no longer this
        // balancer's to finish (another process finished it or changed the move).
        // Looked up in the store itself: this node's copy of the map may lag behind it (a move's
        // update the store applied after its reply had timed out).
        if !self.unfinished.is_empty()
            && let Ok(now) = coord.state().await
        {
            let map = &now.map;
            self.unfinished.retain(|&slot, to| {
                map.migration(slot).is_some_and(|m| {
                    map.index_of(&me) == Some(m.from) && map.index_of(to) == Some(m.to)
                })
            });
        }
        if !self.unfinished.is_empty() {
            let mut entry = Entry::skipped(
                version,
                "finishing this balancer's moves that failed half way".into(),
            );
            self.finish(coord, &dialer, &mut entry).await;
            self.after_moves(&entry, &cluster.state(), &me).await;
            return entry;
        }
        let nodes = Self::nodes(&state);
        let loads = match self.measure(&nodes, &me).await {
            Ok(Some(l)) => l,
            Ok(None) => return Entry::skipped(version, "no rate yet for every node".into()),
            Err(e) => return Entry::skipped(version, pliant_proto::error::chain(&e)),
        };
        if let Some((slot, _)) = state.map.migrations().next() {
            let mut e = Entry::skipped(version, format!("slot {slot} is moving"));
            e.loads = loads.nodes;
            return e;
        }
        let mut metrics = Metrics::new(ServerId::Name(me.clone()));
        fill(&mut metrics, &state, &loads.nodes);
        *self.engine.metrics_mut() = metrics;
        let mut entry = Entry::new(version, loads.nodes.clone());
        let d = match self.engine.decide() {
            Ok(d) => d,
            Err(e) => {
                entry.error = Some(pliant_proto::error::chain(&DecisionError::Policy(e)));
                return entry;
            }
        };
        entry.when = d.when;
        if !d.when {
            return entry;
        }
        let targets: Vec<(String, f64)> = d
            .where_
            .iter()
            .flatten()
            .map(|(id, x)| (id.to_string(), *x))
            .filter(|(id, x)| *x > 0.0 && *id != me)
            .collect();
        entry.targets = targets.iter().cloned().collect();
        let strategies = match strategies(d.howmuch.as_ref()) {
            Ok(s) => s,
            Err(e) => {
                entry.error = Some(pliant_proto::error::chain(&e));
                return entry;
            }
        };
        let Some(mine) = state.map.index_of(&me) else {
            return entry;
        };
        let mut candidates: Vec<(u16, f64)> = (0..crate::SLOTS)
            .filter(|&s| state.map.owner_index(s) == Some(mine))
            .map(|s| (s, loads.slots[usize::from(s)]))
            .filter(|&(_, l)| l > 0.0)
            .collect();
        for (to, asked) in targets {
            if !state.alive(&to) {
                entry.error = Some(pliant_proto::error::chain(&DecisionError::NotAlive(to)));
                break;
            }
            let Some(pick) = select(&candidates, asked, &strategies) else {
                continue;
            };
            candidates.retain(|(s, _)| !pick.slots.contains(s));
            let moved = Moved::begin(&to, asked, pick.strategy.to_string(), pick.load);
            let failed = self
                .move_groups(coord, &dialer, &pick.slots, moved, &mut entry)
                .await;
            if let Some(source) = failed {
                let f = DecisionError::Move { to, source };
                entry.error = Some(pliant_proto::error::chain(&f));
                break;
            }
        }
        self.after_moves(&entry, &cluster.state(), &me).await;
        entry
    }

    /// Runs again the moves of [`Thread::unfinished`] (slots still migrating from this node to
    /// the node named), target by target, into `entry`.
    async fn finish(
        &mut self,
        coord: &dyn Coord,
        dialer: &pliant_proto::Dialer,
        entry: &mut Entry,
    ) {
        let mut by_target: BTreeMap<String, Vec<u16>> = BTreeMap::new();
        for (&slot, to) in &self.unfinished {
            by_target.entry(to.clone()).or_default().push(slot);
        }
        for (to, slots) in by_target {
            let moved = Moved::begin(&to, 0.0, "finish".into(), 0.0);
            let failed = self.move_groups(coord, dialer, &slots, moved, entry).await;
            if let Some(source) = failed {
                let f = DecisionError::Finish { to, source };
                entry.error = Some(pliant_proto::error::chain(&f));
                break;
            }
        }
    }

    /// Moves `slots` (all this node's) to node `moved.to`, group by group, counting them in
    /// `moved`, which goes into `entry` if any moved (timed from this call); the first
    /// failure stops it and is returned. The slots of a group whose move failed stay migrating
    /// (the mover's design: running it again finishes it), so they are remembered in
    /// [`Thread::unfinished`], unless the move met `-MOVEOVER`: another process gave it up or
    /// began it again, and it is that process's to finish.
    async fn move_groups(
        &mut self,
        coord: &dyn Coord,
        dialer: &pliant_proto::Dialer,
        slots: &[u16],
        mut moved: Moved,
        entry: &mut Entry,
    ) -> Option<MoveError> {
        let started = Instant::now();
        let to = moved.to.clone();
        let mut failed = None;
        for group in slots.chunks(crate::rescale::GROUP) {
            match move_slots(coord, dialer, group, &to, &mut |_, _| {}).await {
                Ok(r) => {
                    // No round: another process had finished them already.
                    if r.rounds > 0 {
                        moved.slots += group.len();
                    }
                    moved.keys += r.keys;
                    moved.bytes += r.bytes;
                    for s in group {
                        self.unfinished.remove(s);
                    }
                }
                Err(e) => {
                    if matches!(e, MoveError::MoveOver { .. }) {
                        for s in group {
                            self.unfinished.remove(s);
                        }
                    } else {
                        self.unfinished
                            .extend(group.iter().map(|&s| (s, to.clone())));
                    }
                    failed = Some(e);
                    break;
                }
            }
        }
        moved.seconds = started.elapsed().as_secs_f64();
        if moved.slots > 0 {
            entry.moved.push(moved);
        }
        failed
    }

    /// After a decision that moved slots, the counts are read again: the next decision should
    /// see the load after the moves, not a blend. (This node's slots changed, so `measure`
    /// restarts their history too.)
    async fn after_moves(&mut self, entry: &Entry, state: &ClusterState, me: &str) {
        if !entry.moved.is_empty() {
            self.seen.clear();
            let _ = self.measure(&Self::nodes(state), me).await;
        }
    }
}

/// `servers[id]` for every node the policy sees ([`Thread::nodes`], this one included even
/// before its membership shows): `load` and `req_rate` (ops/s, 0 where not measured) and
/// `slots`.
fn fill(metrics: &mut Metrics, state: &ClusterState, loads: &BTreeMap<String, f64>) {
    let mut nodes = Thread::nodes(state);
    let me = metrics.whoami().to_string();
    if !nodes.iter().any(|m| m.id == me) {
        nodes.push(Member {
            id: me,
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        });
    }
    for m in &nodes {
        let id = ServerId::Name(m.id.clone());
        let rate = loads.get(&m.id).copied().unwrap_or(0.0);
        metrics.set(id.clone(), "load", rate);
        metrics.set(id.clone(), "req_rate", rate);
        let owned = state
            .map
            .index_of(&m.id)
            .map_or(0, |i| state.map.slots_of(i));
        metrics.set(id, "slots", owned as f64);
    }
}

impl Entry {
    fn new(version: u64, loads: BTreeMap<String, f64>) -> Self {
        Self {
            unix_ms: now_ms(),
            version,
            loads,
            when: false,
            targets: BTreeMap::new(),
            moved: Vec::new(),
            skipped: None,
            error: None,
        }
    }

    fn skipped(version: u64, why: String) -> Self {
        Self {
            skipped: Some(why),
            ..Self::new(version, BTreeMap::new())
        }
    }
}

/// Milliseconds since the Unix epoch: when a decision was made.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `howmuch`'s strategies: a list of names from [`STRATEGIES`], or nothing (the default ones).
fn strategies(h: Option<&HowMuch>) -> Result<Vec<&'static str>, DecisionError> {
    let unknown = DecisionError::HowMuch;
    match h {
        None => Ok(DEFAULT_STRATEGIES.to_vec()),
        Some(HowMuch::Amount(x)) => Err(unknown(format!("returned the number {x}"))),
        Some(HowMuch::Table(v)) => {
            let items: Vec<serde_json::Value> = match v {
                serde_json::Value::Array(a) => a.clone(),
                serde_json::Value::Object(o) => o.values().cloned().collect(),
                other => vec![other.clone()],
            };
            items
                .iter()
                .map(|i| {
                    let name = i.as_str().unwrap_or_default();
                    STRATEGIES
                        .iter()
                        .find(|s| **s == name)
                        .copied()
                        .ok_or_else(|| unknown(format!("{i} is not one")))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(|v| {
                    if v.is_empty() {
                        DEFAULT_STRATEGIES.to_vec()
                    } else {
                        v
                    }
                })
        }
    }
}

/// Slots picked by one strategy.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    /// The strategy.
    pub strategy: &'static str,
    /// The slots.
    pub slots: Vec<u16>,
    /// Their load.
    pub load: f64,
}

/// The selection of `slots` (slot, load) closest to `amount` among `strategies`' (ties: the
/// first strategy listed); `None` if no strategy picks anything.
///
/// `big`, `small` and `big_small` take slots hottest first, coolest first, or alternately
/// from either end, each only if it keeps the total within `amount`; `half` takes the first
/// half of the slots in slot order, whatever their load (Mantle's fragment-count selector).
pub fn select(slots: &[(u16, f64)], amount: f64, strategies: &[&'static str]) -> Option<Selection> {
    let mut by_load: Vec<(u16, f64)> = slots.to_vec();
    by_load.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let fill = |order: &mut dyn Iterator<Item = (u16, f64)>| {
        let mut picked = Vec::new();
        let mut sum = 0.0;
        for (s, l) in order {
            if sum + l <= amount {
                sum += l;
                picked.push(s);
            }
        }
        (picked, sum)
    };
    strategies
        .iter()
        .map(|&strategy| {
            let (slots, load) = match strategy {
                "big" => fill(&mut by_load.iter().copied()),
                "small" => fill(&mut by_load.iter().rev().copied()),
                "big_small" => {
                    let n = by_load.len();
                    fill(&mut (0..n).map(|i| {
                        let j = if i % 2 == 0 { i / 2 } else { n - 1 - i / 2 };
                        by_load[j]
                    }))
                }
                _ => {
                    let mut in_order = slots.to_vec();
                    in_order.sort_by_key(|&(s, _)| s);
                    in_order.truncate(in_order.len() / 2);
                    let load = in_order.iter().map(|&(_, l)| l).sum();
                    (in_order.into_iter().map(|(s, _)| s).collect(), load)
                }
            };
            Selection {
                strategy,
                slots,
                load,
            }
        })
        .filter(|s| !s.slots.is_empty())
        .fold(None, |best: Option<Selection>, s| match best {
            Some(b) if (b.load - amount).abs() <= (s.load - amount).abs() => Some(b),
            _ => Some(s),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coord::Embedded;
    use pliant_proto::Dialer;

    /// A node as the balancer sees it, with no data plane behind it.
    struct Bare {
        membership: Option<Membership>,
        stop: watch::Sender<bool>,
    }

    impl BalancedNode for Bare {
        fn membership(&self) -> Option<&Membership> {
            self.membership.as_ref()
        }

        fn slot_ops(&self, _: u16) -> u64 {
            0
        }

        fn stop_signal(&self) -> watch::Receiver<bool> {
            self.stop.subscribe()
        }
    }

    fn config() -> BalancerConfig {
        BalancerConfig {
            source: None,
            params: Params::new(),
            interval: Duration::from_secs(60),
            slot_window: 1,
        }
    }

    #[test]
    fn a_node_in_no_cluster_gets_no_balancer() {
        let node = Arc::new(Bare {
            membership: None,
            stop: watch::channel(false).0,
        });
        assert!(matches!(
            Balancer::start(node, config()),
            Err(BalancerError::NotInCluster)
        ));
    }

    /// The balancer reaches the coordination store with its node's dialer (the password held
    /// there, given nowhere else) and stops with its node's stop signal: all it knows of a node
    /// is [`BalancedNode`].
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_balancer_reaches_the_store_with_its_nodes_dialer_and_stops_with_it() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let (server_stop, stopped) = watch::channel(false);
        let server = tokio::spawn(crate::coord_server::serve(
            listener,
            Some(Arc::new(Embedded::new())),
            Some("pw".into()),
            None,
            stopped,
        ));
        let dialer = Dialer::default().password(Some("pw"));
        let coord = crate::open_coord(&addr, &dialer).await.expect("coord");
        let (stop, node_stop) = watch::channel(false);
        let me = Member {
            id: format!("{:040x}", 1),
            addr: SocketAddr::from(([127, 0, 0, 1], 1)),
        };
        let membership = Membership::join(me, addr, coord.clone(), dialer, node_stop)
            .await
            .expect("join");
        let node = Arc::new(Bare {
            membership: Some(membership),
            stop,
        });
        let b = Balancer::start(node.clone(), config()).expect("start");
        let record = record_of(
            &PolicySource::functions("never", "function when() return false end"),
            &Params::new(),
        );
        let loader = b.clone();
        let v = tokio::task::spawn_blocking(move || loader.load(record))
            .await
            .expect("load thread")
            .expect("loaded through the store");
        let held = coord.state().await.expect("state").balancer;
        assert_eq!(held.map(|r| (r.name, r.version)), Some(("never".into(), v)));

        node.stop.send(true).expect("stop");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let b = b.clone();
            let again = record_of(
                &PolicySource::functions("again", "function when() return false end"),
                &Params::new(),
            );
            match tokio::task::spawn_blocking(move || b.load(again))
                .await
                .expect("load thread")
            {
                Err(BalancerError::Stopped) => break,
                other => assert!(
                    Instant::now() < deadline,
                    "still answering 10 s after its node stopped: {other:?}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        server_stop.send(true).expect("stop the store");
        server.await.expect("store");
    }

    fn loads(l: &[f64]) -> Vec<(u16, f64)> {
        (0..).zip(l.iter().copied()).collect()
    }

    #[test]
    fn big_takes_the_hottest_slots_that_fit() {
        let s = select(&loads(&[1.0, 8.0, 3.0, 5.0]), 10.0, &["big"]).expect("a selection");
        assert_eq!((s.slots, s.load), (vec![1, 0], 9.0));
    }

    #[test]
    fn the_strategy_closest_to_the_amount_wins() {
        // big: 8 then 1 = 9; small: 1 + 3 + 5 = 9 (tie, big listed first); big_small: 8, 1 = 9.
        let all = ["big", "small", "big_small"];
        let s = select(&loads(&[1.0, 8.0, 3.0, 5.0]), 9.5, &all).expect("a selection");
        assert_eq!(s.strategy, "big");
        // 12: big takes 8 + 3 + 1 = 12 exactly; small 1 + 3 + 5 = 9.
        let s = select(&loads(&[1.0, 8.0, 3.0, 5.0]), 12.0, &["small", "big"]).expect("some");
        assert_eq!((s.strategy, s.load), ("big", 12.0));
        let mut slots = s.slots;
        slots.sort_unstable();
        assert_eq!(slots, [0, 1, 2]);
    }

    #[test]
    fn big_small_alternates_from_both_ends() {
        let s = select(&loads(&[4.0, 3.0, 2.0, 1.0]), 5.0, &["big_small"]).expect("some");
        assert_eq!((s.slots, s.load), (vec![0, 3], 5.0));
    }

    #[test]
    fn half_takes_the_first_half_in_slot_order_whatever_the_amount() {
        let s = select(&loads(&[4.0, 3.0, 2.0, 1.0]), 0.5, &["half"]).expect("some");
        assert_eq!((s.slots, s.load), (vec![0, 1], 7.0));
    }

    #[test]
    fn nothing_fits_nothing_moves() {
        assert_eq!(select(&loads(&[4.0, 3.0]), 1.0, &["big", "small"]), None);
        assert_eq!(select(&[], 10.0, &["big", "half"]), None);
    }

    #[test]
    fn howmuch_names_strategies_or_gets_an_error_naming_them() {
        assert_eq!(strategies(None).expect("default"), DEFAULT_STRATEGIES);
        let named = HowMuch::Table(serde_json::json!(["small", "half"]));
        assert_eq!(strategies(Some(&named)).expect("named"), ["small", "half"]);
        let bad = HowMuch::Table(serde_json::json!(["biggest"]));
        let e = strategies(Some(&bad)).expect_err("unknown").to_string();
        assert!(e.contains("\"biggest\"") && e.contains("big_small"), "{e}");
        let e = strategies(Some(&HowMuch::Amount(3.0)))
            .expect_err("a number")
            .to_string();
        assert!(e.contains("number 3"), "{e}");
    }
}
