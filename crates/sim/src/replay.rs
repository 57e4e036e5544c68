//! One pass over a trace, many configurations.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use pliant_cache::{Cache, Capacity, NO_NEXT_ACCESS, Request};
use pliant_policy::{Engine, PolicySource, TimeSeries};
use pliant_tier::CacheView;
use pliant_trace::{Format, Op, ReadOptions, Record, TraceError};
use rayon::prelude::*;
use serde::Serialize;

/// One cache to simulate.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Algorithm spec (see `pliant_cache::build`).
    pub algo: String,
    /// Initial capacity.
    pub capacity: Capacity,
}

/// A policy that drives capacity: installed on every configuration.
#[derive(Debug, Clone)]
pub struct PolicySpec {
    /// The policy.
    pub source: PolicySource,
    /// Its parameters.
    pub params: pliant_policy::Params,
}

/// Simulation options.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// Treat every object as size 1.
    pub ignore_size: bool,
    /// Seconds of trace time between decisions and timeline points (`None`: no timeline unless a
    /// policy is given, which needs one).
    pub interval: Option<u64>,
    /// The policy that resizes the caches.
    pub policy: Option<PolicySpec>,
    /// Most recent `(timestamp, key id)` points kept for the policy's `timeseries()`.
    pub series_points: usize,
    /// Records per batch (between parallel steps).
    pub batch: usize,
}

impl Default for SimOptions {
    fn default() -> Self {
        Self {
            ignore_size: false,
            interval: None,
            policy: None,
            series_points: 100_000,
            batch: 1 << 16,
        }
    }
}

/// What went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// Reading the trace failed.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// A configuration is invalid.
    #[error("{0}")]
    Config(String),
    /// A configuration names an algorithm that does not exist or does not fit its capacity.
    #[error(transparent)]
    Algorithm(#[from] pliant_cache::AlgorithmError),
    /// The policy failed to install or to decide.
    #[error("policy: {0}")]
    Policy(#[from] pliant_policy::PolicyError),
    /// An offline algorithm (Belady's MIN) asked for over a trace without next-access times.
    #[error(
        "{algo} needs next-access times, which only oracle-general traces carry; convert {} \
         first (pliant trace convert {} --to oracle-general OUT)",
        path.display(),
        path.display()
    )]
    NeedsNextAccess {
        /// The algorithm.
        algo: String,
        /// The trace.
        path: std::path::PathBuf,
    },
}

/// One point of a configuration's timeline.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct IntervalStats {
    /// Start of the interval, seconds from the first record.
    pub t: u64,
    /// Reads in the interval.
    pub reads: u64,
    /// Hit ratio of the interval's reads.
    pub hit_ratio: f64,
    /// Misses per second: the load reaching the store behind the cache.
    pub misses_per_s: f64,
    /// Keys held at the end of the interval.
    pub keys: u64,
    /// Bytes held at the end of the interval.
    pub bytes: u64,
    /// Capacity in force at the end of the interval (keys or bytes).
    pub capacity: u64,
}

/// Result of one configuration.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RunResult {
    /// Algorithm.
    pub algo: String,
    /// Initial capacity (`1000keys`, `134217728B`, `unlimited`).
    pub size: String,
    /// Reads.
    pub requests: u64,
    /// Read misses.
    pub misses: u64,
    /// Misses over reads.
    pub miss_ratio: f64,
    /// Bytes of the misses.
    pub byte_misses: u64,
    /// Byte misses over read bytes.
    pub byte_miss_ratio: f64,
    /// Wall-clock seconds of the whole replay (shared by all configurations of one pass).
    pub seconds: f64,
    /// Million reads per second of wall-clock time.
    pub mreq_per_s: f64,
    /// Most keys held.
    pub peak_keys: u64,
    /// Most bytes held.
    pub peak_bytes: u64,
    /// Keys held at the end.
    pub final_keys: u64,
    /// Bytes held at the end.
    pub final_bytes: u64,
    /// Per-interval timeline (with `--interval` or a policy).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<IntervalStats>,
    /// Policy decisions that trimmed or grew the cache: `(t, new capacity)`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resizes: Vec<(u64, u64)>,
}

/// A capacity shown the way users write it.
fn size_label(c: Capacity) -> String {
    match c {
        Capacity::Keys(u64::MAX) | Capacity::Bytes(u64::MAX) => "unlimited".into(),
        other => other.to_string(),
    }
}

struct Lane {
    cache: Cache,
    reads: u64,
    last: (u64, u64, u64),
    timeline: Vec<IntervalStats>,
    resizes: Vec<(u64, u64)>,
}

impl Lane {
    #[inline]
    fn apply(&mut self, batch: &[Request], ops: &[Op]) {
        for (r, op) in batch.iter().zip(ops) {
            match op {
                Op::Get => {
                    self.reads += 1;
                    self.cache.access(r);
                }
                Op::Put => {
                    self.cache.put(r);
                }
                Op::Delete => {
                    self.cache.remove(r.key);
                }
            }
        }
    }

    /// Closes an interval starting at `t` of `secs` seconds.
    fn close_interval(&mut self, t: u64, secs: u64) -> (u64, u64, f64) {
        let s = *self.cache.stats();
        let (reads0, hits0, misses0) = self.last;
        let reads = self.reads - reads0;
        let hits = s.hits - hits0;
        let misses = s.misses - misses0;
        self.last = (self.reads, s.hits, s.misses);
        self.timeline.push(IntervalStats {
            t,
            reads,
            hit_ratio: if reads == 0 {
                1.0
            } else {
                hits as f64 / reads as f64
            },
            misses_per_s: misses as f64 / secs as f64,
            keys: s.keys,
            bytes: s.bytes,
            capacity: self.cache.capacity().amount(),
        });
        (
            reads,
            misses,
            if reads == 0 {
                1.0
            } else {
                hits as f64 / reads as f64
            },
        )
    }
}

/// [`replay`] of the trace file at `path`, read with `opts`. An algorithm that needs next-access
/// times ([`AlgorithmInfo::needs_next_access`](pliant_cache::AlgorithmInfo)) is refused before
/// anything is read unless the trace is oracleGeneral: over another format it would see no
/// future and silently act as a poor FIFO.
pub fn replay_file(
    path: &Path,
    opts: &ReadOptions,
    configs: &[Config],
    sim: &SimOptions,
    progress: &dyn Fn(u64),
) -> Result<Vec<RunResult>, SimError> {
    if pliant_trace::format_of(path, opts)? != Format::OracleGeneral
        && let Some(c) = configs
            .iter()
            .find(|c| pliant_cache::algorithm(&c.algo).is_some_and(|a| a.needs_next_access))
    {
        return Err(SimError::NeedsNextAccess {
            algo: c.algo.clone(),
            path: path.to_path_buf(),
        });
    }
    replay(pliant_trace::reader(path, opts)?, configs, sim, progress)
}

/// Replays `trace` once through every configuration. `progress` is called with the number of
/// records read so far after each batch.
pub fn replay(
    trace: impl Iterator<Item = Result<Record, TraceError>>,
    configs: &[Config],
    opts: &SimOptions,
    progress: &dyn Fn(u64),
) -> Result<Vec<RunResult>, SimError> {
    if configs.is_empty() {
        return Err(SimError::Config("no configuration to simulate".into()));
    }
    let mut lanes: Vec<Lane> = configs
        .iter()
        .map(|c| {
            let cache = pliant_cache::cache(&c.algo, c.capacity)?;
            Ok(Lane {
                cache,
                reads: 0,
                last: (0, 0, 0),
                timeline: Vec::new(),
                resizes: Vec::new(),
            })
        })
        .collect::<Result<_, SimError>>()?;

    let interval = match (&opts.policy, opts.interval) {
        (_, Some(0)) => return Err(SimError::Config("--interval must be at least 1 s".into())),
        (Some(_), None) => 10,
        (_, Some(i)) => i,
        (None, None) => 0,
    };
    let series = TimeSeries::new();
    let mut engines: Vec<Engine> = Vec::new();
    if let Some(p) = &opts.policy {
        for (c, lane) in configs.iter().zip(&lanes) {
            if c.capacity.units() != pliant_cache::Units::Objects {
                return Err(SimError::Config(format!(
                    "{} {}: a policy's howmuch counts keys, so use a key capacity \
                     (e.g. --size unlimited or 1000keys)",
                    c.algo, c.capacity
                )));
            }
            let mut e = Engine::in_memory(view(lane, 0, 0, 0, 0, interval).metrics(0));
            e.set_timeseries(series.clone());
            e.set_params(p.params.clone());
            e.install(p.source.clone())?;
            engines.push(e);
        }
    }

    let mut ids: HashMap<u64, u64, foldhash::fast::FixedState> =
        HashMap::with_hasher(foldhash::fast::FixedState::with_seed(2));
    let mut batch: Vec<Request> = Vec::with_capacity(opts.batch);
    let mut ops: Vec<Op> = Vec::with_capacity(opts.batch);
    let mut first_time: Option<u64> = None;
    let mut boundary = interval;
    let mut interval_writes = 0u64;
    let mut read = 0u64;
    let start = Instant::now();
    let mut trace = trace.peekable();

    loop {
        batch.clear();
        ops.clear();
        let mut crossed = false;
        while batch.len() < opts.batch {
            let Some(peek) = trace.peek() else { break };
            let rel = match peek {
                Ok(r) => r.time.saturating_sub(*first_time.get_or_insert(r.time)),
                Err(_) => 0,
            };
            if interval > 0 && rel >= boundary {
                crossed = true;
                break;
            }
            let Some(r) = trace.next() else { break };
            let r = r?;
            read += 1;
            if r.op == Op::Put {
                interval_writes += 1;
            }
            if !engines.is_empty() && r.op == Op::Get {
                let next_id = ids.len() as u64;
                let id = *ids.entry(r.key).or_insert(next_id);
                series.with_mut(|pts| {
                    if pts.len() >= opts.series_points {
                        let drop = (opts.series_points / 10).max(1);
                        pts.drain(..drop);
                    }
                    pts.push((r.time as f64, id as f64));
                });
            }
            batch.push(Request {
                key: r.key,
                size: if opts.ignore_size { 1 } else { r.size },
                next_access: if r.next_access < 0 {
                    NO_NEXT_ACCESS
                } else {
                    r.next_access
                },
            });
            ops.push(r.op);
        }
        if !batch.is_empty() {
            let (b, o) = (&batch[..], &ops[..]);
            if lanes.len() == 1 {
                lanes[0].apply(b, o);
            } else {
                lanes.par_iter_mut().for_each(|l| l.apply(b, o));
            }
            progress(read);
        }
        let done = trace.peek().is_none();
        if interval > 0 && (crossed || (done && read > 0)) {
            let t0 = boundary - interval;
            for (i, lane) in lanes.iter_mut().enumerate() {
                let (reads, misses, _) = lane.close_interval(t0, interval);
                if let Some(e) = engines.get_mut(i) {
                    let v = view(
                        lane,
                        t0 + interval,
                        reads,
                        interval_writes,
                        misses,
                        interval,
                    );
                    v.write_to(e.metrics_mut(), 0);
                    if let Some(n) = v.new_capacity(&e.decide()?) {
                        lane.cache.resize(Capacity::Keys(n));
                        lane.resizes.push((t0 + interval, n));
                    }
                }
            }
            interval_writes = 0;
            boundary += interval;
            // Skip empty intervals quickly: jump to the one holding the next record.
            if let Some(Ok(r)) = trace.peek() {
                let rel = r.time.saturating_sub(first_time.unwrap_or(r.time));
                while rel >= boundary + interval {
                    for lane in lanes.iter_mut() {
                        lane.close_interval(boundary, interval);
                    }
                    boundary += interval;
                }
            }
        }
        if done {
            break;
        }
    }

    let seconds = start.elapsed().as_secs_f64();
    Ok(configs
        .iter()
        .zip(lanes)
        .map(|(c, l)| {
            let s = *l.cache.stats();
            RunResult {
                algo: c.algo.clone(),
                size: size_label(c.capacity),
                requests: l.reads,
                misses: s.misses,
                miss_ratio: if l.reads == 0 {
                    0.0
                } else {
                    s.misses as f64 / l.reads as f64
                },
                byte_misses: s.byte_misses,
                byte_miss_ratio: s.byte_miss_ratio(),
                seconds,
                mreq_per_s: l.reads as f64 / seconds.max(1e-9) / 1e6,
                peak_keys: s.peak_keys,
                peak_bytes: s.peak_bytes,
                final_keys: s.keys,
                final_bytes: s.bytes,
                timeline: l.timeline,
                resizes: l.resizes,
            }
        })
        .collect())
}

/// What the cache of `lane` reports to its policy at the end of an interval.
fn view(lane: &Lane, t: u64, reads: u64, writes: u64, misses: u64, secs: u64) -> CacheView {
    let s = lane.cache.stats();
    let secs = secs.max(1) as f64;
    CacheView {
        t: t as f64,
        keys: s.keys,
        bytes: s.bytes,
        capacity: lane.cache.capacity().amount(),
        hits: s.hits,
        misses: s.misses,
        reads_per_s: reads as f64 / secs,
        writes_per_s: writes as f64 / secs,
        misses_per_s: misses as f64 / secs,
        queue_len: None,
        cpu_load_avg: None,
        clients: None,
        // Every miss of a replayed trace is fetched from below, none coalesced.
        fetches_per_s: Some(misses as f64 / secs),
        new_keys_per_s: None,
        progress: None,
        progress_per_s: None,
    }
}
