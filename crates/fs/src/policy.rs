//! When to evict and when to write back: decisions of Lua policies run by `pliant-policy`'s
//! engine, Mantle's `when`/`howmuch` over the cache's metrics. The defaults are DataWarp's
//! watermark rules as shipped policies (`fs-evict-watermarks`, `fs-writeback-watermarks`); a
//! user can load another, say `fs-writeback-when-idle`, which also writes back as soon as the
//! job leaves the file system alone.
//!
//! One thread runs both engines (the engine is single-threaded). It decides every `interval`,
//! and at once when the write path reports that the cached or dirty bytes moved by a 64th of
//! the capacity since the last decision, so a fast writer is not left waiting a whole interval.
//! A decision sets two targets: cached bytes to evict down to, dirty bytes to write back down
//! to (`NONE`: nothing to do). The write path and the write-back threads follow the targets.
//! Two rules hold whatever a policy says: the cache never holds more than its capacity (the
//! write path evicts down to the low watermark itself when it would), and a dirty extent is
//! written back before it is evicted.
//!
//! A policy that fails to decide keeps its last targets for the round and the error is logged
//! and counted; one that fails to install at mount time stops the mount.

use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use pliant_policy::{Engine, EngineConfig, MemoryStore, Metrics, Params, PolicySource};

use crate::config::FsConfig;
use crate::core::Inner;

/// No target.
pub(crate) const NONE: u64 = u64::MAX;

/// Which decision a policy makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// When to evict.
    Evict,
    /// When to write back.
    Writeback,
}

impl Trigger {
    /// Its name on the command line and in the mount's control verbs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Evict => "evict",
            Self::Writeback => "writeback",
        }
    }
}

impl std::fmt::Display for Trigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not a [`Trigger`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?}: expected evict or writeback")]
pub struct UnknownTrigger(pub String);

impl std::str::FromStr for Trigger {
    type Err = UnknownTrigger;
    fn from_str(s: &str) -> Result<Self, UnknownTrigger> {
        [Self::Evict, Self::Writeback]
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| UnknownTrigger(s.to_string()))
    }
}

/// Why a mount's policy did not install, swap or roll back (a running one then stays as it
/// was).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// The engine refused the policy: it did not compile, or its dry run against the cache as
    /// it is failed.
    #[error("policy {name}")]
    Install {
        /// The policy's name.
        name: String,
        /// Why.
        #[source]
        source: pliant_policy::PolicyError,
    },
    /// The engine could not go back (no earlier version, or the earlier one no longer runs).
    #[error("rolling back the {which} policy")]
    Rollback {
        /// Which policy.
        which: Trigger,
        /// Why.
        #[source]
        source: pliant_policy::PolicyError,
    },
    /// The mount's policy thread is not running (the mount is stopping).
    #[error("the policy thread has stopped")]
    Stopped,
    /// The policy thread did not answer in time.
    #[error("the policy thread did not answer within {} s", .0.as_secs())]
    NoAnswer(Duration),
    /// The policy thread could not be started.
    #[error("starting the policy thread")]
    Spawn(#[source] std::io::Error),
}

/// What the policy thread answers a swap: the new version's description, or why not.
pub(crate) type Answer = mpsc::Sender<Result<String, PolicyError>>;

/// What the policy thread is asked while it runs: a swap, answered with the new version's
/// description or why it was refused (the running policy then stays).
pub(crate) enum Command {
    Load(Trigger, PolicySource, Option<Params>, Answer),
    Rollback(Trigger, Answer),
}

/// The policies of a mount.
#[derive(Debug, Clone)]
pub struct Policies {
    /// Decides when to evict and down to how many cached bytes.
    pub evict: PolicySource,
    /// Decides when to write back and down to how many dirty bytes.
    pub writeback: PolicySource,
    /// `params` the policies see.
    pub params: Params,
    /// How often they decide (besides when the cache moves).
    pub interval: Duration,
}

impl Default for Policies {
    fn default() -> Self {
        Self {
            evict: shipped("fs-evict-watermarks"),
            writeback: shipped("fs-writeback-watermarks"),
            params: Params::new(),
            interval: Duration::from_secs(1),
        }
    }
}

fn shipped(name: &str) -> PolicySource {
    pliant_policy::shipped::get(name)
        .unwrap_or_else(|| PolicySource::functions(name, "function when() return false end"))
}

/// The counters a decision looks at, and the time they were read.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    read: u64,
    written: u64,
    copy_up: u64,
    writeback: u64,
}

const ME: &str = "cache";

fn metrics(inner: &Inner, last: &Sample, now: &Sample, idle_since: Instant) -> Metrics {
    let secs = now.at.duration_since(last.at).as_secs_f64().max(1e-3);
    let rate = |a: u64, b: u64| b.saturating_sub(a) as f64 / secs;
    environment(
        inner.config(),
        inner.used_bytes(),
        inner.dirty_bytes(),
        Rates {
            read: rate(last.read, now.read),
            write: rate(last.written, now.written),
            copy_up: rate(last.copy_up, now.copy_up),
            writeback: rate(last.writeback, now.writeback),
        },
        now.at.duration_since(idle_since).as_secs_f64(),
    )
}

/// Bytes per second since the last decision.
struct Rates {
    read: f64,
    write: f64,
    copy_up: f64,
    writeback: f64,
}

/// The one table a mount's policies read (`servers[whoami]`, `whoami` = `"cache"`).
fn environment(cfg: &FsConfig, used: u64, dirty: u64, r: Rates, idle_secs: f64) -> Metrics {
    let mut m = Metrics::new(ME);
    for (name, v) in [
        ("capacity", cfg.capacity as f64),
        ("used", used as f64),
        ("dirty", dirty as f64),
        ("high", cfg.high),
        ("low", cfg.low),
        ("dirty_high", cfg.dirty_high),
        ("dirty_low", cfg.dirty_low),
        ("read_rate", r.read),
        ("write_rate", r.write),
        ("copy_up_rate", r.copy_up),
        ("writeback_rate", r.writeback),
        ("idle_secs", idle_secs),
    ] {
        m.set(ME, name, v);
    }
    m
}

/// What a mount's policies see, for dry-running one (`pliant policy check`): a 1 GiB cache with
/// the default watermarks, 95% full (past `high`, so an eviction policy is asked `howmuch`) and
/// half dirty (past `dirty_high`), busy writing, idle for no time.
pub fn sample_environment() -> Metrics {
    let cfg = FsConfig::new(PathBuf::new(), PathBuf::new(), 1 << 30);
    let used = cfg.capacity / 20 * 19;
    environment(
        &cfg,
        used,
        cfg.capacity / 2,
        Rates {
            read: 50e6,
            write: 200e6,
            copy_up: 20e6,
            writeback: 100e6,
        },
        0.0,
    )
}

fn sample(inner: &Inner) -> Sample {
    let c = inner.counters();
    Sample {
        at: Instant::now(),
        read: c.read_hit_bytes.load(Relaxed) + c.read_miss_bytes.load(Relaxed),
        written: c.written_bytes.load(Relaxed),
        copy_up: c.copy_up_bytes.load(Relaxed),
        writeback: c.writeback_bytes.load(Relaxed),
    }
}

fn engine(inner: &Inner, source: &PolicySource, params: &Params) -> Result<Engine, PolicyError> {
    let s = sample(inner);
    let config = EngineConfig {
        log_capacity: 1000,
        ..EngineConfig::default()
    };
    let mut e = Engine::new(
        config,
        Rc::new(MemoryStore::new()),
        metrics(inner, &s, &s, s.at),
    );
    e.set_params(params.clone());
    e.install(source.clone())
        .map_err(|source_err| PolicyError::Install {
            name: source.name.clone(),
            source: source_err,
        })?;
    Ok(e)
}

/// What a decision asks for: the target, or `NONE`.
fn target(e: &mut Engine, m: Metrics, capacity: u64) -> Result<u64, pliant_policy::PolicyError> {
    *e.metrics_mut() = m;
    let d = e.decide()?;
    if !d.when {
        return Ok(NONE);
    }
    let amount = d.howmuch.as_ref().and_then(|h| h.amount()).unwrap_or(0.0);
    Ok(if amount.is_finite() {
        amount.clamp(0.0, capacity as f64) as u64
    } else {
        0
    })
}

/// An engine and the parameters it runs with (the engine does not hand them back).
struct Running {
    engine: Engine,
    params: Params,
}

fn swap(inner: &Inner, cmd: Command, m: Metrics, evict: &mut Running, writeback: &mut Running) {
    let (which, reply) = match &cmd {
        Command::Load(t, _, _, r) | Command::Rollback(t, r) => (*t, r.clone()),
    };
    let r = match which {
        Trigger::Evict => evict,
        Trigger::Writeback => writeback,
    };
    let e = &mut r.engine;
    // Installing dry-runs the policy against the cache as it is now.
    *e.metrics_mut() = m;
    let result = match cmd {
        Command::Load(_, source, params, _) => {
            // A refused policy leaves the running one as it was (the engine swaps only after
            // the new one compiles and dry-runs); its parameters too.
            if let Some(p) = &params {
                e.set_params(p.clone());
            }
            let name = source.name.clone();
            let done = e.install(source);
            match (&done, params) {
                (Ok(_), Some(p)) => r.params = p,
                (Err(_), Some(_)) => e.set_params(r.params.clone()),
                _ => {}
            }
            done.map_err(|source| PolicyError::Install { name, source })
        }
        Command::Rollback(..) => e
            .rollback()
            .map_err(|source| PolicyError::Rollback { which, source }),
    };
    let result = result.map(|v| {
        let name = e
            .versions()
            .get(v.saturating_sub(1) as usize)
            .map(|x| x.source.name.clone());
        let name = name.unwrap_or_default();
        inner.policy_installed(which, name.clone());
        format!("{name} (version {v})")
    });
    let _ = reply.send(result);
}

/// Starts the policy thread; returns once both policies are installed (or why not).
pub(crate) fn start(
    inner: Arc<Inner>,
    policies: Policies,
) -> Result<std::thread::JoinHandle<()>, PolicyError> {
    let (tx, rx) = mpsc::channel();
    let (cmd_tx, cmd_rx) = mpsc::channel::<Command>();
    inner.policies_started(
        cmd_tx,
        (policies.evict.name.clone(), policies.writeback.name.clone()),
    );
    let handle = std::thread::Builder::new()
        .name("pliant-fs-policy".into())
        .spawn(move || {
            let engines = engine(&inner, &policies.evict, &policies.params)
                .and_then(|e| Ok((e, engine(&inner, &policies.writeback, &policies.params)?)));
            let (mut evict, mut writeback) = match engines {
                Ok((e, w)) => {
                    let _ = tx.send(Ok(()));
                    let p = policies.params.clone();
                    (
                        Running {
                            engine: e,
                            params: p.clone(),
                        },
                        Running {
                            engine: w,
                            params: p,
                        },
                    )
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            let mut last = sample(&inner);
            let mut idle_since = last.at;
            loop {
                inner.wait_for_decision(policies.interval);
                if inner.stopping() {
                    return;
                }
                let now = sample(&inner);
                while let Ok(cmd) = cmd_rx.try_recv() {
                    let m = metrics(&inner, &last, &now, idle_since);
                    swap(&inner, cmd, m, &mut evict, &mut writeback);
                }
                if now.read != last.read || now.written != last.written {
                    idle_since = now.at;
                }
                let cap = inner.config().capacity;
                let m = metrics(&inner, &last, &now, idle_since);
                match target(&mut evict.engine, m.clone(), cap) {
                    Ok(t) => inner.set_evict_to(t),
                    Err(e) => inner.policy_failed("eviction", &e.to_string()),
                }
                match target(&mut writeback.engine, m, cap) {
                    Ok(t) => inner.set_writeback_to(t),
                    Err(e) => inner.policy_failed("write-back", &e.to_string()),
                }
                last = now;
                inner.wake_writeback();
                inner.maybe_evict();
            }
        })
        .map_err(PolicyError::Spawn)?;
    match rx.recv() {
        Ok(Ok(())) => Ok(handle),
        Ok(Err(e)) => {
            let _ = handle.join();
            Err(e)
        }
        Err(_) => Err(PolicyError::Stopped),
    }
}
