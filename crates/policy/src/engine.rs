//! The engine: the running policy, its versions, hot swap, and decisions.

use std::rc::Rc;
use std::time::Instant;

use crate::PolicyError;
use crate::decision::Decision;
use crate::env::{Metrics, Params, TimeSeries};
use crate::log::{DecisionLog, LogEntry};
use crate::source::{Callback, PolicySource};
use crate::state::{MemoryStore, StateStore};
use crate::vm::Vm;

/// Per-policy resource limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// VM instructions one callback may execute. The default lets a callback spend 100
    /// instructions per point of a 6-million-point time series (the shipped `regime-fan` needs
    /// 14) while stopping a runaway loop within about two seconds.
    pub instructions: u64,
    /// Bytes the policy's Lua state may hold.
    pub memory_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            instructions: 600_000_000,
            memory_bytes: 64 << 20,
        }
    }
}

/// Engine settings.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Limits applied to every policy.
    pub limits: Limits,
    /// Decision-log entries kept (0 disables the log).
    pub log_capacity: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            log_capacity: 100_000,
        }
    }
}

/// A policy version the engine has accepted.
#[derive(Debug, Clone)]
pub struct Version {
    /// Version number, from 1, in installation order.
    pub number: u64,
    /// The source it was compiled from.
    pub source: PolicySource,
    /// The `params` table it was installed with: a version is its source and its parameters,
    /// so going back to it brings both back.
    pub params: Params,
}

struct Active {
    version: u64,
    name: Rc<str>,
    vm: Vm,
}

/// Runs policies over an environment and keeps serving the last good one.
///
/// The service owns the engine: it updates [`Engine::metrics_mut`] and the
/// [`Engine::timeseries`] buffer, and calls [`Engine::decide`] whenever a decision is due.
/// [`Engine::install`] swaps in a new policy only after it compiles and a decision dry-runs
/// cleanly against the current environment; [`Engine::activate`] and [`Engine::rollback`]
/// switch between installed versions the same way.
pub struct Engine {
    config: EngineConfig,
    store: Rc<dyn StateStore>,
    metrics: Metrics,
    series: TimeSeries,
    params: Params,
    versions: Vec<Version>,
    history: Vec<u64>,
    active: Option<Active>,
    log: DecisionLog,
    decisions: u64,
}

impl Engine {
    /// An engine with no policy, persisting state in `store`.
    pub fn new(config: EngineConfig, store: Rc<dyn StateStore>, metrics: Metrics) -> Self {
        Self {
            log: DecisionLog::new(config.log_capacity),
            config,
            store,
            metrics,
            series: TimeSeries::new(),
            params: Params::new(),
            versions: Vec::new(),
            history: Vec::new(),
            active: None,
            decisions: 0,
        }
    }

    /// An engine with in-memory state and default settings (simulations, tests).
    pub fn in_memory(metrics: Metrics) -> Self {
        Self::new(
            EngineConfig::default(),
            Rc::new(MemoryStore::new()),
            metrics,
        )
    }

    /// The metrics policies see.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Mutable metrics; every decision refreshes the policy's view from them.
    pub fn metrics_mut(&mut self) -> &mut Metrics {
        &mut self.metrics
    }

    /// The time-series buffer policies read through `timeseries()`; append to it directly.
    pub fn timeseries(&self) -> &TimeSeries {
        &self.series
    }

    /// Uses `series` (a handle to a buffer the caller shares, e.g. with other engines replaying the
    /// same trace) as the buffer `timeseries()` reads, for policies installed from now on.
    pub fn set_timeseries(&mut self, series: TimeSeries) {
        self.series = series;
    }

    /// Sets the `params` table for policies installed from now on.
    pub fn set_params(&mut self, params: Params) {
        self.params = params;
    }

    /// The `params` table the next install gets: the last set, or the running version's after
    /// [`Engine::activate`] or [`Engine::rollback`].
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// The decision log.
    pub fn log(&self) -> &DecisionLog {
        &self.log
    }

    /// Every accepted version, oldest first.
    pub fn versions(&self) -> &[Version] {
        &self.versions
    }

    /// The order in which versions were activated, oldest first.
    pub fn history(&self) -> &[u64] {
        &self.history
    }

    /// The running version, if any.
    pub fn active_version(&self) -> Option<u64> {
        self.active.as_ref().map(|a| a.version)
    }

    /// Bytes held by the running policy's Lua state.
    pub fn policy_memory(&self) -> usize {
        self.active.as_ref().map_or(0, |a| a.vm.used_memory())
    }

    /// Compiles `source`, dry-runs a decision against the current environment (with
    /// `WRstate` writes kept off disk), and only then makes it the running policy.
    ///
    /// On error the running policy is untouched.
    pub fn install(&mut self, source: PolicySource) -> Result<u64, PolicyError> {
        let number = self.versions.len() as u64 + 1;
        let (vm, _) = self.dry_run(&source, &self.params.clone(), number)?;
        self.versions.push(Version {
            number,
            source,
            params: self.params.clone(),
        });
        self.switch_to(number, vm);
        Ok(number)
    }

    /// Makes installed version `number` the running policy again, with the parameters it was
    /// installed with, after a fresh compile and dry run (its persisted state may have changed
    /// since).
    pub fn activate(&mut self, number: u64) -> Result<(), PolicyError> {
        let (source, params) = self
            .versions
            .iter()
            .find(|v| v.number == number)
            .map(|v| (v.source.clone(), v.params.clone()))
            .ok_or(PolicyError::UnknownVersion(number))?;
        let (vm, _) = self.dry_run(&source, &params, number)?;
        self.params = params;
        self.switch_to(number, vm);
        Ok(())
    }

    /// Switches back to the version that ran before the current one. Returns its number.
    pub fn rollback(&mut self) -> Result<u64, PolicyError> {
        let previous = previous_version(&self.history).ok_or(PolicyError::NoPolicy)?;
        self.activate(previous)?;
        Ok(previous)
    }

    /// Checks a policy the way [`Engine::install`] does without installing it: compile plus a
    /// dry run of a decision (`load` and `when`, then `where` and `howmuch` if `when` is true).
    /// Returns the dry run's decision.
    pub fn check(&mut self, source: &PolicySource) -> Result<Decision, PolicyError> {
        self.dry_run(source, &self.params.clone(), 0)
            .map(|(_, d)| d)
    }

    /// Compiles `source` in a fresh VM and dry-runs a decision against the current metrics
    /// with state writes kept in memory; log entries carry `version`.
    fn dry_run(
        &mut self,
        source: &PolicySource,
        params: &Params,
        version: u64,
    ) -> Result<(Vm, Decision), PolicyError> {
        let mut vm = Vm::new(
            source,
            self.config.limits,
            self.store.clone(),
            &self.series,
            params,
        )?;
        vm.set_dry_run(true)?;
        let name: Rc<str> = Rc::from(source.name.as_str());
        let r = evaluate(
            &mut vm,
            &self.metrics,
            true,
            version,
            &name,
            0,
            &mut self.log,
        );
        vm.set_dry_run(false)?;
        r.map(|d| (vm, d))
    }

    fn switch_to(&mut self, number: u64, vm: Vm) {
        tracing::info!(version = number, policy = vm.name(), "policy activated");
        self.active = Some(Active {
            version: number,
            name: Rc::from(vm.name()),
            vm,
        });
        self.history.push(number);
    }

    /// Makes one decision: refresh the environment, run `load` and `when`, and if `when` is true,
    /// `where` and `howmuch`. Every evaluation is logged.
    ///
    /// A failing policy returns the error and stays installed: the service decides what to do
    /// (typically nothing this round) and can [`Engine::rollback`].
    pub fn decide(&mut self) -> Result<Decision, PolicyError> {
        let active = self.active.as_mut().ok_or(PolicyError::NoPolicy)?;
        self.decisions += 1;
        let start = Instant::now();
        // Always: a decision sees exactly the supplied metrics, never values an earlier decision
        // wrote into the tables (such as a computed `load`).
        active.vm.refresh(&self.metrics)?;
        let mut d = evaluate(
            &mut active.vm,
            &self.metrics,
            false,
            active.version,
            &active.name,
            self.decisions,
            &mut self.log,
        )?;
        d.micros = start.elapsed().as_secs_f64() * 1e6;
        Ok(d)
    }
}

/// What a rollback returns to, given the versions in the order they were activated (the running
/// one last): the latest one that is not the running one. A service that keeps versions of its
/// own (a Lua policy or a built-in one) rolls back by the same rule.
pub fn previous_version(history: &[u64]) -> Option<u64> {
    let current = *history.last()?;
    history.iter().rev().find(|v| **v != current).copied()
}

/// Logs evaluations and sums their instruction counts.
struct Recorder<'a> {
    log: &'a mut DecisionLog,
    version: u64,
    name: &'a Rc<str>,
    decision: u64,
    dry_run: bool,
    instructions: u64,
}

impl Recorder<'_> {
    /// Logs one evaluation and passes its result through.
    fn record<T>(
        &mut self,
        vm: &Vm,
        cb: Callback,
        start: Instant,
        r: Result<T, PolicyError>,
        json: impl FnOnce(&T) -> serde_json::Value,
    ) -> Result<T, PolicyError> {
        let instructions = vm.instructions_used();
        self.instructions += instructions;
        if self.log.enabled() {
            self.log.push(LogEntry {
                decision: self.decision,
                version: self.version,
                policy: self.name.to_string(),
                callback: cb,
                result: r.as_ref().map_or(serde_json::Value::Null, json),
                micros: start.elapsed().as_secs_f64() * 1e6,
                instructions,
                error: r.as_ref().err().map(ToString::to_string),
                dry_run: self.dry_run,
            });
        }
        r
    }

    fn load(&mut self, vm: &Vm, metrics: &Metrics) -> Result<Option<f64>, PolicyError> {
        if !vm.has(Callback::Load) {
            return Ok(None);
        }
        let t = Instant::now();
        let r = vm.eval_load(metrics.whoami());
        self.record(vm, Callback::Load, t, r, |x| serde_json::json!(x))
    }
}

/// Runs a decision's callbacks: `load` and `when`, then `where` and `howmuch` if `when` is true.
fn evaluate(
    vm: &mut Vm,
    metrics: &Metrics,
    dry_run: bool,
    version: u64,
    name: &Rc<str>,
    decision: u64,
    log: &mut DecisionLog,
) -> Result<Decision, PolicyError> {
    if dry_run {
        vm.refresh(metrics)?;
    }
    let _loan = vm.lend(metrics);
    let mut rec = Recorder {
        log,
        version,
        name,
        decision,
        dry_run,
        instructions: 0,
    };
    let chunked = vm.is_chunk_style();
    let load = rec.load(vm, metrics)?;
    let t = Instant::now();
    let when = rec.record(vm, Callback::When, t, vm.eval_when(), |b| {
        serde_json::json!(b)
    })?;
    let (mut where_, mut howmuch) = (None, None);
    // A dry run asks what a decision would: `where` and `howmuch` only once `when` says so, as
    // Mantle does. A policy may set in `when` what `where` reads (its targets), so running
    // `where` after a `when` of false fails a policy that never fails in service.
    if when {
        if chunked {
            rec.load(vm, metrics)?;
        }
        let t = Instant::now();
        where_ = Some(
            rec.record(vm, Callback::Where, t, vm.eval_where(metrics), |w| {
                serde_json::json!(w)
            })?,
        );
        if chunked {
            rec.load(vm, metrics)?;
        }
        let t = Instant::now();
        howmuch = rec.record(vm, Callback::HowMuch, t, vm.eval_howmuch(), |h| {
            serde_json::json!(h)
        })?;
    }
    Ok(Decision {
        version,
        load,
        when,
        where_,
        howmuch,
        instructions: rec.instructions,
        micros: 0.0,
    })
}
