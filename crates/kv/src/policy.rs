//! The node's live policy: a Lua policy of `pliant-policy`'s engine that sizes the memory tier
//! every interval over the node's real metrics, swapped and rolled back while the node serves.
//!
//! The engine keeps its state in `Rc`s (a Lua VM is single-threaded), so it lives on a thread of
//! its own, which owns it for the node's life: at each interval it reads the node's counters
//! through the keyspace lock, fills `servers[whoami]` with the cache⇄policy contract's metrics
//! (`pliant_tier::CacheView`, the same names the simulator gives) plus `rss_bytes`, gives
//! `timeseries()` the `(unix time, key id)` of the reads since the last decision, decides, and
//! applies `when` + `howmuch` as the memory tier's new capacity (a smaller one evicts at once in
//! the algorithm's order; with a store, evicted keys stay readable from it). Commands reach the
//! thread through a channel ([`Policy`]).
//!
//! A policy that fails to install (it does not compile, or its dry run fails or exceeds its
//! instruction budget, an endless loop included) leaves the running one in place; one that fails
//! at a decision leaves the capacity as it was, and the error shows in `PLIANT.POLICY STATUS` and
//! in the decision log.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, SyncSender, sync_channel};
use std::time::{Duration, Instant};

use pliant_cache::Capacity;
use pliant_policy::{Engine, Params, PolicySource, ServerId};
use pliant_tier::CacheView;

use crate::keyspace::KvStats;
use crate::node::{Node, rss_bytes};

/// Points `timeseries()` holds at most (the newest); a policy that wants a longer history keeps
/// it in `WRstate`.
pub const MAX_SERIES: usize = 100_000;

/// How long a command waits for the policy thread (an install runs the policy's dry run, bounded
/// by its instruction budget).
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// A policy to start with.
#[derive(Debug, Clone)]
pub struct PolicyConfig {
    /// The policy, if any (without one, the thread waits for `PLIANT.POLICY LOAD`).
    pub source: Option<PolicySource>,
    /// Its parameters (`params.*`).
    pub params: Params,
    /// Time between decisions.
    pub interval: Duration,
}

/// What `PLIANT.POLICY STATUS` reports.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Status {
    /// The running policy's name and version.
    pub policy: Option<String>,
    /// Its version number.
    pub version: Option<u64>,
    /// Every version installed, oldest first: `(number, name)`.
    pub versions: Vec<(u64, String)>,
    /// Seconds between decisions.
    pub interval_s: f64,
    /// Decisions made.
    pub decisions: u64,
    /// Seconds spent deciding, over all decisions.
    pub decision_seconds: f64,
    /// Decisions that failed.
    pub errors: u64,
    /// The capacity the latest decision set, if it changed it.
    pub last_resize: Option<String>,
    /// The latest decision's error, if it failed (the capacity was left as it was).
    pub last_error: Option<String>,
}

enum Msg {
    Load {
        source: PolicySource,
        params: Params,
        reply: SyncSender<Result<u64, String>>,
    },
    Rollback {
        reply: SyncSender<Result<u64, String>>,
    },
    Status {
        reply: SyncSender<Status>,
    },
    Log {
        n: usize,
        reply: SyncSender<Vec<String>>,
    },
    Interval(Duration),
}

/// The handle commands use to talk to the policy thread.
#[derive(Debug, Clone)]
pub struct Policy {
    tx: Sender<Msg>,
}

impl Policy {
    /// Starts the policy thread for `node`, installing `config.source` first; fails with the
    /// policy's error if that install fails.
    pub fn start(node: Arc<Node>, config: PolicyConfig) -> Result<Self, String> {
        let (tx, rx) = std::sync::mpsc::channel();
        let (ready_tx, ready_rx) = sync_channel(1);
        std::thread::Builder::new()
            .name("pliant-policy".into())
            .spawn(move || {
                let mut t = Thread::new(node, config.params, config.interval);
                let installed = match config.source {
                    Some(s) => t.engine.install(s).map(|_| ()).map_err(|e| e.to_string()),
                    None => Ok(()),
                };
                let ok = installed.is_ok();
                let _ = ready_tx.send(installed);
                if ok {
                    t.run(&rx);
                }
            })
            .map_err(|e| format!("cannot start the policy thread: {e}"))?;
        ready_rx
            .recv()
            .map_err(|_| "the policy thread stopped".to_string())??;
        Ok(Self { tx })
    }

    /// Installs `source` with `params` (the running policy stays if it fails); its version.
    pub fn load(&self, source: PolicySource, params: Params) -> Result<u64, String> {
        self.ask(|reply| Msg::Load {
            source,
            params,
            reply,
        })?
    }

    /// Switches back to the policy that ran before; its version.
    pub fn rollback(&self) -> Result<u64, String> {
        self.ask(|reply| Msg::Rollback { reply })?
    }

    /// The running policy and its latest decision.
    pub fn status(&self) -> Result<Status, String> {
        self.ask(|reply| Msg::Status { reply })
    }

    /// The newest `n` entries of the decision log, one JSON object each, oldest first.
    pub fn log(&self, n: usize) -> Result<Vec<String>, String> {
        self.ask(|reply| Msg::Log { n, reply })
    }

    /// Changes the time between decisions.
    pub fn set_interval(&self, d: Duration) {
        let _ = self.tx.send(Msg::Interval(d));
    }

    fn ask<T>(&self, msg: impl FnOnce(SyncSender<T>) -> Msg) -> Result<T, String> {
        let (reply, rx) = sync_channel(1);
        self.tx
            .send(msg(reply))
            .map_err(|_| "the policy thread has stopped".to_string())?;
        rx.recv_timeout(REPLY_TIMEOUT)
            .map_err(|_| "the policy thread did not answer".to_string())
    }
}

struct Thread {
    node: Arc<Node>,
    engine: Engine,
    whoami: ServerId,
    /// The running policy's parameters, restored if a load with new ones fails.
    params: Params,
    interval: Duration,
    started: Instant,
    /// The node's counters at the previous decision, and when: the rates are their changes.
    mark: (Instant, KvStats),
    decisions: u64,
    decision_seconds: f64,
    errors: u64,
    last_resize: Option<String>,
    last_error: Option<String>,
}

impl Thread {
    fn new(node: Arc<Node>, params: Params, interval: Duration) -> Self {
        let whoami = ServerId::parse(&format!("127.0.0.1:{}", node.port()));
        let mut engine = Engine::in_memory(CacheView::default().metrics(whoami.clone()));
        engine.set_params(params.clone());
        let mark = {
            let mut ks = node.keyspace();
            ks.record_reads(true);
            (Instant::now(), ks.stats())
        };
        Self {
            node,
            engine,
            whoami,
            params,
            interval,
            started: Instant::now(),
            mark,
            decisions: 0,
            decision_seconds: 0.0,
            errors: 0,
            last_resize: None,
            last_error: None,
        }
    }

    fn run(&mut self, rx: &Receiver<Msg>) {
        let mut next = Instant::now() + self.interval;
        loop {
            match rx.recv_timeout(next.saturating_duration_since(Instant::now())) {
                Ok(msg) => self.handle(msg),
                Err(RecvTimeoutError::Timeout) => {
                    self.decide();
                    next = (next + self.interval).max(Instant::now());
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Load {
                source,
                params,
                reply,
            } => {
                self.engine.set_params(params.clone());
                let r = self.engine.install(source).map_err(|e| e.to_string());
                if r.is_ok() {
                    self.params = params;
                } else {
                    self.engine.set_params(self.params.clone());
                }
                let _ = reply.send(r);
            }
            Msg::Rollback { reply } => {
                let _ = reply.send(self.engine.rollback().map_err(|e| e.to_string()));
            }
            Msg::Status { reply } => {
                let active = self.engine.active_version();
                let versions: Vec<(u64, String)> = self
                    .engine
                    .versions()
                    .iter()
                    .map(|v| (v.number, v.source.name.clone()))
                    .collect();
                let policy = versions
                    .iter()
                    .find(|(n, _)| Some(*n) == active)
                    .map(|(_, name)| name.clone());
                let _ = reply.send(Status {
                    policy,
                    version: active,
                    versions,
                    interval_s: self.interval.as_secs_f64(),
                    decisions: self.decisions,
                    decision_seconds: self.decision_seconds,
                    errors: self.errors,
                    last_resize: self.last_resize.clone(),
                    last_error: self.last_error.clone(),
                });
            }
            Msg::Log { n, reply } => {
                let entries: Vec<_> = self.engine.log().entries().collect();
                let lines = entries[entries.len().saturating_sub(n)..]
                    .iter()
                    .map(|e| serde_json::to_string(e).unwrap_or_default())
                    .collect();
                let _ = reply.send(lines);
            }
            Msg::Interval(d) => self.interval = d,
        }
    }

    /// One decision over the node's metrics since the last one.
    fn decide(&mut self) {
        let (view, reads) = {
            let mut ks = self.node.keyspace();
            let s = ks.stats();
            let (at, before) = std::mem::replace(&mut self.mark, (Instant::now(), s));
            let dt = at.elapsed().as_secs_f64().max(1e-3);
            let rate = |a: u64, b: u64| a.saturating_sub(b) as f64 / dt;
            let (keys, bytes) = ks.memory();
            let view = CacheView {
                t: self.started.elapsed().as_secs_f64(),
                keys,
                bytes,
                capacity: ks.capacity().amount(),
                hits: s.hits,
                misses: s.misses,
                reads_per_s: rate(s.hits + s.misses, before.hits + before.misses),
                writes_per_s: rate(s.writes, before.writes),
                misses_per_s: rate(s.misses, before.misses),
                // Nothing waits on a tier above yet: a node is its own last tier.
                queue_len: Some(0.0),
                cpu_load_avg: load_average(),
                clients: Some(self.node.clients() as f64),
            };
            (view, ks.take_reads())
        };
        if self.engine.active_version().is_none() {
            return;
        }
        let m = self.engine.metrics_mut();
        view.write_to(m, self.whoami.clone());
        m.set(
            self.whoami.clone(),
            "rss_bytes",
            rss_bytes().map_or(f64::NAN, |b| b as f64),
        );
        self.engine.timeseries().with_mut(|points| {
            points.extend(reads);
            let excess = points.len().saturating_sub(MAX_SERIES);
            points.drain(..excess);
        });
        self.decisions += 1;
        let started = Instant::now();
        let decided = self.engine.decide();
        self.decision_seconds += started.elapsed().as_secs_f64();
        match decided {
            Ok(d) => {
                self.last_error = None;
                if let Some(n) = view.new_capacity(&d) {
                    let mut ks = self.node.keyspace();
                    let c = match ks.capacity() {
                        Capacity::Keys(_) => Capacity::Keys(n),
                        Capacity::Bytes(_) => Capacity::Bytes(n),
                    };
                    if ks.resize(c).is_ok() {
                        tracing::info!("policy resized the memory tier to {c}");
                        self.last_resize = Some(c.to_string());
                    }
                }
            }
            Err(e) => {
                self.errors += 1;
                tracing::warn!("policy decision failed (capacity unchanged): {e}");
                self.last_error = Some(e.to_string());
            }
        }
    }
}

/// The host's one-minute load average (Linux `/proc/loadavg`).
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}
