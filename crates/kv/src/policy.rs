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

use crate::config::PolicyConfig;
use crate::keyspace::KvStats;
use crate::node::{Node, Reported, now_ms as unix_ms, rss_bytes};

/// Points `timeseries()` holds at most (the newest); a policy that wants a longer history keeps
/// it in `WRstate`.
pub const MAX_SERIES: usize = 100_000;

/// `auto`'s decisions kept for `PLIANT.POLICY LOG` (the newest).
const AUTO_LOG: usize = 10_000;

/// How long a command waits for the policy thread (an install runs the policy's dry run, bounded
/// by its instruction budget).
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// The name that means `auto` (regime detection, [`pliant_tier::Auto`]) rather than a Lua
/// policy, in `--policy` and `PLIANT.POLICY LOAD`.
pub const AUTO: &str = "auto";

/// Why the node's policy thread did not do what it was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LivePolicyError {
    /// [`Policy::start`] was called outside a tokio runtime: reports to the parent are sent
    /// from the node's.
    #[error("the policy thread must start on the node's runtime")]
    NoRuntime,
    /// The thread could not be spawned.
    #[error("cannot start the policy thread")]
    Spawn(#[source] std::io::Error),
    /// The thread is gone (it stopped at its start, or the node is stopping).
    #[error("the policy thread has stopped")]
    Stopped,
    /// The thread did not answer within its reply timeout (an install's dry run is bounded by
    /// the policy's instruction budget, so this is a thread stuck elsewhere).
    #[error("the policy thread did not answer within {0:?}")]
    NoAnswer(Duration),
    /// The engine refused the policy (it does not compile, its dry run failed or exceeded its
    /// budget) or could not switch to a version; the running policy stays.
    #[error(transparent)]
    Engine(#[from] pliant_policy::PolicyError),
    /// A parameter of `auto` has the wrong type (its value as given, debug-printed).
    #[error("auto: parameter {name} must be a number, not {value}")]
    AutoParameterType {
        /// The parameter.
        name: String,
        /// What was given.
        value: String,
    },
    /// `auto`'s objective is outside (0, 1].
    #[error("auto: efficiency must be in (0, 1], not {0}")]
    AutoEfficiency(f64),
    /// `auto` takes only `efficiency` and `seed`.
    #[error("auto: unknown parameter {0:?} (it takes efficiency and seed)")]
    AutoUnknownParameter(String),
    /// A rollback with no policy running.
    #[error("no policy is running")]
    NothingRunning,
    /// A rollback with only one version ever run.
    #[error("no earlier policy to roll back to")]
    NoEarlier,
}

/// Why a report to the parent got no metrics back (logged; the decision goes on without them).
#[derive(Debug, thiserror::Error)]
enum ReportError {
    #[error("the parent did not answer within {0:?}")]
    Timeout(Duration),
    #[error("the parent did not take the report")]
    Upstream(#[source] crate::upstream::UpstreamError),
    #[error("the parent answered {0}, not its metrics")]
    Unexpected(String),
    #[error("the parent's metrics are malformed")]
    Malformed(#[source] serde_json::Error),
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
    /// What `auto` has decided, when it runs and has armed: when it armed, the regimes it
    /// found, its window and the key count it trims to.
    pub auto: Option<pliant_tier::AutoState>,
}

enum Msg {
    Load {
        source: PolicySource,
        params: Params,
        reply: SyncSender<Result<u64, LivePolicyError>>,
    },
    LoadAuto {
        params: Params,
        reply: SyncSender<Result<u64, LivePolicyError>>,
    },
    Rollback {
        reply: SyncSender<Result<u64, LivePolicyError>>,
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
    pub fn start(node: Arc<Node>, config: PolicyConfig) -> Result<Self, LivePolicyError> {
        let runtime =
            tokio::runtime::Handle::try_current().map_err(|_| LivePolicyError::NoRuntime)?;
        let (tx, rx) = std::sync::mpsc::channel();
        let (ready_tx, ready_rx) = sync_channel(1);
        std::thread::Builder::new()
            .name("pliant-policy".into())
            .spawn(move || {
                let mut t = Thread::new(node, runtime, config.params.clone(), config.interval);
                let installed = match config.source {
                    Some(s) => t.install(s).map(|_| ()),
                    None if config.auto => t.start_auto(&config.params).map(|_| ()),
                    None => Ok(()),
                };
                let ok = installed.is_ok();
                let _ = ready_tx.send(installed);
                if ok {
                    t.run(&rx);
                }
            })
            .map_err(LivePolicyError::Spawn)?;
        ready_rx.recv().map_err(|_| LivePolicyError::Stopped)??;
        Ok(Self { tx })
    }

    /// Installs `source` with `params` (the running policy stays if it fails); its version.
    pub fn load(&self, source: PolicySource, params: Params) -> Result<u64, LivePolicyError> {
        self.ask(|reply| Msg::Load {
            source,
            params,
            reply,
        })?
    }

    /// Makes `auto` the running policy with `params` (`efficiency`, the objective in (0, 1],
    /// and `seed`, its k-means seed); its version (versions count every load, Lua or `auto`).
    pub fn load_auto(&self, params: Params) -> Result<u64, LivePolicyError> {
        self.ask(|reply| Msg::LoadAuto { params, reply })?
    }

    /// Switches back to the policy that ran before; its version.
    pub fn rollback(&self) -> Result<u64, LivePolicyError> {
        self.ask(|reply| Msg::Rollback { reply })?
    }

    /// The running policy and its latest decision.
    pub fn status(&self) -> Result<Status, LivePolicyError> {
        self.ask(|reply| Msg::Status { reply })
    }

    /// The newest `n` entries of the decision log, one JSON object each, oldest first.
    pub fn log(&self, n: usize) -> Result<Vec<String>, LivePolicyError> {
        self.ask(|reply| Msg::Log { n, reply })
    }

    /// Changes the time between decisions.
    pub fn set_interval(&self, d: Duration) {
        let _ = self.tx.send(Msg::Interval(d));
    }

    fn ask<T>(&self, msg: impl FnOnce(SyncSender<T>) -> Msg) -> Result<T, LivePolicyError> {
        let (reply, rx) = sync_channel(1);
        self.tx
            .send(msg(reply))
            .map_err(|_| LivePolicyError::Stopped)?;
        rx.recv_timeout(REPLY_TIMEOUT).map_err(|e| match e {
            RecvTimeoutError::Timeout => LivePolicyError::NoAnswer(REPLY_TIMEOUT),
            RecvTimeoutError::Disconnected => LivePolicyError::Stopped,
        })
    }
}

/// A version of the node's policy: a Lua policy the engine holds (by its number there), or
/// `auto`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Running {
    Lua(u64),
    Auto { efficiency: f64, seed: u64 },
}

struct Thread {
    node: Arc<Node>,
    /// The node's runtime, where reports to the parent are sent from.
    runtime: tokio::runtime::Handle,
    engine: Engine,
    /// Every version loaded, version `n` at `n - 1`: versions count Lua loads and `auto` alike.
    versions: Vec<Running>,
    /// The versions in the order they ran, the running one last (a rollback appends the one it
    /// returns to, as the engine's history does).
    history: Vec<u64>,
    /// `auto`'s decisions, newest last (the engine logs the Lua policies').
    auto_log: std::collections::VecDeque<String>,
    whoami: ServerId,
    /// The running policy's parameters, restored if a load with new ones fails.
    params: Params,
    interval: Duration,
    started: Instant,
    /// The node's counters at the previous decision, and when: the rates are their changes.
    mark: (Instant, KvStats),
    /// The progress clients had reported at the previous decision.
    progress_mark: Option<f64>,
    decisions: u64,
    decision_seconds: f64,
    errors: u64,
    last_resize: Option<String>,
    last_error: Option<String>,
}

impl Thread {
    fn new(
        node: Arc<Node>,
        runtime: tokio::runtime::Handle,
        params: Params,
        interval: Duration,
    ) -> Self {
        let whoami = ServerId::parse(&node.id());
        let mut engine = Engine::in_memory(CacheView::default().metrics(whoami.clone()));
        engine.set_params(params.clone());
        let mark = {
            let mut ks = node.keyspace();
            ks.record_reads(true);
            (Instant::now(), ks.stats())
        };
        Self {
            node,
            runtime,
            engine,
            versions: Vec::new(),
            history: Vec::new(),
            auto_log: std::collections::VecDeque::new(),
            whoami,
            params,
            interval,
            started: Instant::now(),
            mark,
            progress_mark: None,
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

    /// The running version and what it is.
    fn running(&self) -> Option<(u64, Running)> {
        let v = *self.history.last()?;
        Some((v, self.version(v)?))
    }

    /// What version `v` is.
    fn version(&self, v: u64) -> Option<Running> {
        self.versions
            .get(usize::try_from(v).ok()?.checked_sub(1)?)
            .copied()
    }

    /// Makes a fresh `auto` decide, fed from now on.
    fn run_auto(&self, efficiency: f64, seed: u64) {
        self.node.keyspace().start_auto(
            pliant_tier::Auto::with_efficiency(seed, efficiency),
            unix_ms(),
        );
    }

    /// Installs a Lua policy (the running one stays if it fails); its version.
    fn install(&mut self, source: PolicySource) -> Result<u64, LivePolicyError> {
        let n = self.engine.install(source)?;
        self.node.keyspace().stop_auto();
        Ok(self.push(Running::Lua(n)))
    }

    /// Makes `auto` the running policy, for the objective and seed in `params`.
    fn start_auto(&mut self, params: &Params) -> Result<u64, LivePolicyError> {
        let num = |name: &str, default: f64| match params.get(name) {
            None => Ok(default),
            Some(pliant_policy::ParamValue::Num(x)) => Ok(*x),
            Some(v) => Err(LivePolicyError::AutoParameterType {
                name: name.to_string(),
                value: format!("{v:?}"),
            }),
        };
        let efficiency = num("efficiency", pliant_tier::auto::EFFICIENCY)?;
        if !(efficiency > 0.0 && efficiency <= 1.0) {
            return Err(LivePolicyError::AutoEfficiency(efficiency));
        }
        if let Some(k) = params
            .keys()
            .find(|k| !matches!(k.as_str(), "efficiency" | "seed"))
        {
            return Err(LivePolicyError::AutoUnknownParameter(k.clone()));
        }
        let seed = num("seed", 1.0)? as u64;
        self.run_auto(efficiency, seed);
        Ok(self.push(Running::Auto { efficiency, seed }))
    }

    fn push(&mut self, r: Running) -> u64 {
        self.versions.push(r);
        let v = self.versions.len() as u64;
        self.history.push(v);
        v
    }

    /// Back to the version that ran before the running one.
    fn rollback(&mut self) -> Result<u64, LivePolicyError> {
        if self.history.is_empty() {
            return Err(LivePolicyError::NothingRunning);
        }
        let previous =
            pliant_policy::previous_version(&self.history).ok_or(LivePolicyError::NoEarlier)?;
        let running = self
            .version(previous)
            .ok_or(pliant_policy::PolicyError::UnknownVersion(previous))?;
        match running {
            Running::Lua(n) => {
                self.engine.activate(n)?;
                self.node.keyspace().stop_auto();
            }
            Running::Auto { efficiency, seed } => self.run_auto(efficiency, seed),
        }
        self.history.push(previous);
        Ok(previous)
    }

    fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Load {
                source,
                params,
                reply,
            } => {
                self.engine.set_params(params.clone());
                let r = self.install(source);
                if r.is_ok() {
                    self.params = params;
                } else {
                    self.engine.set_params(self.params.clone());
                }
                let _ = reply.send(r);
            }
            Msg::LoadAuto { params, reply } => {
                let _ = reply.send(self.start_auto(&params));
            }
            Msg::Rollback { reply } => {
                let _ = reply.send(self.rollback());
            }
            Msg::Status { reply } => {
                let name = |r: &Running| match r {
                    Running::Lua(n) => self
                        .engine
                        .versions()
                        .iter()
                        .find(|v| v.number == *n)
                        .map_or_else(String::new, |v| v.source.name.clone()),
                    Running::Auto { .. } => AUTO.to_string(),
                };
                let versions: Vec<(u64, String)> = (1..)
                    .zip(&self.versions)
                    .map(|(v, r)| (v, name(r)))
                    .collect();
                let running = self.running();
                let policy = running.map(|(_, r)| name(&r));
                let active = running.map(|(v, _)| v);
                let auto = self.node.keyspace().auto_state();
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
                    auto,
                });
            }
            Msg::Log { n, reply } => {
                // The running policy's log: `auto`'s decisions, or the engine's evaluations.
                let lines = if matches!(self.running(), Some((_, Running::Auto { .. }))) {
                    let skip = self.auto_log.len().saturating_sub(n);
                    self.auto_log.iter().skip(skip).cloned().collect()
                } else {
                    let entries: Vec<_> = self.engine.log().entries().collect();
                    entries[entries.len().saturating_sub(n)..]
                        .iter()
                        .map(|e| serde_json::to_string(e).unwrap_or_default())
                        .collect()
                };
                let _ = reply.send(lines);
            }
            Msg::Interval(d) => self.interval = d,
        }
    }

    /// One decision over the node's metrics since the last one. Every interval, whatever the
    /// policy, the node also trades metrics with its tiers: it reports its own to its parent and
    /// hears the parent's in the reply, and its children report theirs to it the same way, so
    /// `servers` holds every node this one knows.
    fn decide(&mut self) {
        let auto = matches!(self.running(), Some((_, Running::Auto { .. })));
        let mut ks = self.node.keyspace();
        let s = ks.stats();
        let (at, before) = std::mem::replace(&mut self.mark, (Instant::now(), s));
        let progress = self.node.progress();
        let before_progress = std::mem::replace(&mut self.progress_mark, progress);
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
            // Reads waiting for the parent now (a coalesced fetch counts once); 0 at the top.
            queue_len: Some(ks.fetches_under_way() as f64),
            cpu_load_avg: load_average(),
            clients: Some(self.node.clients() as f64),
            fetches_per_s: Some(rate(
                s.store_reads + s.parent_requests,
                before.store_reads + before.parent_requests,
            )),
            // A write does not say whether its key was new to the node.
            new_keys_per_s: None,
            progress,
            // From the second report on: the first has no earlier one to count from (the whole
            // progress so far over one interval would look like a burst).
            progress_per_s: progress
                .zip(before_progress)
                .map(|(p, b)| (p - b).max(0.0) / dt),
        };
        // `auto` saw every read as it happened; the series is the Lua policies'.
        let reads = ks.take_reads();
        let begun = if auto {
            ks.auto_begin(view, unix_ms())
        } else {
            None
        };
        drop(ks);
        if let Some((auto_view, fit)) = begun {
            self.decisions += 1;
            let started = Instant::now();
            let fitted = fit.map(pliant_tier::Fit::run);
            let mut ks = self.node.keyspace();
            let trimmed = ks.auto_finish(&auto_view, fitted);
            let state = ks.auto_state();
            drop(ks);
            self.decision_seconds += started.elapsed().as_secs_f64();
            self.log_auto(&view, state, trimmed, started);
        }
        let own = reported(&view);
        self.node.set_metrics(own.clone());
        let others = self.exchange(&own);
        if auto || self.engine.active_version().is_none() {
            return;
        }
        self.fill_servers(own, others);
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

    fn log_auto(
        &mut self,
        view: &CacheView,
        state: Option<pliant_tier::AutoState>,
        trimmed: Option<u64>,
        started: Instant,
    ) {
        if let Some(n) = trimmed {
            tracing::info!("auto trimmed the memory tier to {n} keys");
            self.last_resize = Some(format!("trim to {n} keys"));
        }
        self.last_error = None;
        let entry = serde_json::json!({
            "decision": self.decisions,
            "policy": AUTO,
            "keys": view.keys,
            "reads_per_s": view.reads_per_s,
            "armed_at": state.map(|s| s.armed_at),
            "regimes": state.map(|s| s.regimes),
            "window_s": state.map(|s| s.window_seconds),
            "target_keys": state.map(|s| s.target_keys),
            "trimmed_to": trimmed,
            "micros": started.elapsed().as_secs_f64() * 1e6,
        });
        if self.auto_log.len() == AUTO_LOG {
            self.auto_log.pop_front();
        }
        self.auto_log.push_back(entry.to_string());
    }

    /// Reports `own` metrics to the parent, if any, and returns the other nodes this one knows:
    /// the parent (from its reply) and the children that reported within the last three
    /// intervals (at least ten seconds).
    fn exchange(&mut self, own: &Reported) -> Vec<(String, Reported)> {
        let mut others = Vec::new();
        if let Some(parent) = self.node.parent().cloned() {
            // A parent slow to answer costs at most an interval's report, not the decision.
            let wait = self.interval.min(Duration::from_secs(1));
            match report_to(&self.runtime, parent, self.node.id(), own, wait) {
                Ok(p) => others.push(p),
                Err(e) => tracing::debug!("no report from the parent this interval: {e}"),
            }
        }
        let max_age = (self.interval * 3).max(Duration::from_secs(10));
        others.extend(self.node.children(max_age));
        others
    }

    /// Fills the engine's `servers` with this node's metrics and the others'; when the set of
    /// nodes changed, the table is laid out anew, so a node that left is gone from it.
    fn fill_servers(&mut self, own: Reported, others: Vec<(String, Reported)>) {
        let ids: Vec<ServerId> = std::iter::once(self.whoami.clone())
            .chain(others.iter().map(|(id, _)| ServerId::parse(id)))
            .collect();
        let m = self.engine.metrics_mut();
        if m.ids() != ids.as_slice() {
            *m = CacheView::default().metrics(self.whoami.clone());
        }
        for (id, metrics) in std::iter::once((self.whoami.clone(), own)).chain(
            others
                .into_iter()
                .map(|(id, metrics)| (ServerId::parse(&id), metrics)),
        ) {
            // A metric a report left out is absent now (nil), not what it was last time.
            let names: Vec<String> = m.names().to_vec();
            for name in names {
                m.set(id.clone(), &name, f64::NAN);
            }
            for (name, value) in metrics {
                m.set(id.clone(), &name, value);
            }
        }
    }
}

/// A view as the metrics a node reports: the contract's names (absent ones as NaN) and
/// `rss_bytes`.
fn reported(view: &CacheView) -> Reported {
    pliant_tier::METRICS
        .iter()
        .zip(view.values())
        .map(|(info, v)| (info.name.to_string(), v.unwrap_or(f64::NAN)))
        .chain(std::iter::once((
            "rss_bytes".to_string(),
            rss_bytes().map_or(f64::NAN, |b| b as f64),
        )))
        .collect()
}

/// Sends `PLIANT.REPORT` to `parent` on the node's runtime and waits at most `wait` for the
/// parent's own metrics.
fn report_to(
    runtime: &tokio::runtime::Handle,
    parent: Arc<crate::upstream::Upstream>,
    id: String,
    own: &Reported,
    wait: Duration,
) -> Result<(String, Reported), ReportError> {
    let args = vec![
        bytes::Bytes::from_static(b"PLIANT.REPORT"),
        bytes::Bytes::from(id),
        bytes::Bytes::from(crate::node::reported_json(own).to_string()),
    ];
    let (tx, rx) = sync_channel(1);
    runtime.spawn(async move {
        // Not left waiting on a parent that never answers: one report an interval at most.
        if let Ok(reply) = tokio::time::timeout(wait, parent.call(args, None)).await {
            let _ = tx.send(reply);
        }
    });
    let reply = rx
        .recv_timeout(wait)
        .map_err(|_| ReportError::Timeout(wait))?
        .map_err(ReportError::Upstream)?;
    let text = match reply {
        pliant_proto::frame::Frame::Bulk(b) => b,
        other => return Err(ReportError::Unexpected(format!("{other:?}"))),
    };
    #[derive(serde::Deserialize)]
    struct Reply {
        id: String,
        metrics: serde_json::Value,
    }
    let r: Reply = serde_json::from_slice(&text).map_err(ReportError::Malformed)?;
    let metrics = crate::node::reported_from(r.metrics).map_err(ReportError::Malformed)?;
    Ok((r.id, metrics))
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
