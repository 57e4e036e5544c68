//! The cache hierarchy in virtual time: workers → their node's WorkManager cache → the shared
//! persistent store. A discrete-event simulation, deterministic for a seed.
//!
//! ParSplice semantics: a read goes up until a tier has the key, and the WorkManager keeps what it
//! fetched; a worker's put is stored in its WorkManager and forwarded to the store once (a put of
//! a key a tier already holds is ignored); concurrent misses for one key at one WorkManager are
//! coalesced into one store read. The store is one FIFO server with the service model of
//! [`StoreParams`]; reads wait in its queue, puts are asynchronous for the worker but occupy it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io::Write;

use pliant_cache::{Cache, Capacity, Request};
use serde::Serialize;

use crate::ParspliceError;
use crate::model::{
    CACHE_HIT_SECONDS, STORE_NETWORK_SECONDS, StoreParams, WorkloadParams, segment_seconds,
    segment_trajectory,
};
use crate::policy::{AutoChoice, CacheView, Decider, PolicyKind};
use crate::replay::Replay;
use crate::store::{States, Store};
use crate::workload::{Segment, StateProcess};

/// Where segments come from.
#[derive(Clone, Copy)]
pub enum Segments<'a> {
    /// The model's state process, until the workload's `hours`.
    Model,
    /// A given sequence, computed for as long as the model says; the run ends at the workload's
    /// `hours` or when the sequence does.
    Recorded(&'a [Segment]),
    /// A trace on its own clock: the run ends when every segment has completed, and its
    /// `finished_at` says when.
    Replay(&'a Replay),
}

/// One run to simulate.
pub struct RunSpec {
    /// The WorkManagers' cache policy.
    pub policy: PolicyKind,
    /// The workload.
    pub workload: WorkloadParams,
    /// The store's service model.
    pub store: StoreParams,
    /// Seconds between policy decisions (ParSplice's perf counters come every 10 s).
    pub interval: f64,
}

/// One decision interval of a run.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Tick {
    /// End of the interval, seconds.
    pub t: f64,
    /// Trajectory spliced so far, ps.
    pub trajectory: f64,
    /// Reads in the interval, all WorkManagers.
    pub reads: u64,
    /// Reads in the interval at WorkManager 0 (the traced one).
    pub reads_node0: u64,
    /// Cache misses in the interval.
    pub misses: u64,
    /// Store reads per second in the interval (misses after coalescing).
    pub store_reads_per_s: f64,
    /// Keys held, all WorkManagers.
    pub keys: u64,
    /// Bytes held, all WorkManagers.
    pub bytes: u64,
}

/// The result of a run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RunReport {
    /// Policy label.
    pub policy: String,
    /// Per-interval timeline.
    pub ticks: Vec<Tick>,
    /// Segments completed.
    pub segments: u64,
    /// States created (keys written to the store).
    pub states: u64,
    /// Store reads and puts.
    pub store_reads: u64,
    /// Store puts.
    pub store_puts: u64,
    /// Most bytes the caches held at once.
    pub peak_bytes: u64,
    /// Bytes held at the end.
    pub final_bytes: u64,
    /// Most keys held at once.
    pub peak_keys: u64,
    /// Keys held at the end.
    pub final_keys: u64,
    /// Highest store reads per second over an interval.
    pub peak_store_reads_per_s: f64,
    /// The auto policy's threshold, where it derived one.
    pub auto: Option<AutoChoice>,
    /// Cache resizes made by the policy on WorkManager 0: `(t, keys)`.
    pub trims: Vec<(f64, u64)>,
    /// Reads served by the WorkManager caches.
    pub cache_hits: u64,
    /// Reads the WorkManager caches could not serve (including those that waited for another
    /// worker's read of the same key).
    pub cache_misses: u64,
    /// Reads of a recorded state that waited for the segment finding it to end (a replay reads a
    /// state no sooner than it was found); served by the cache then, neither hits nor misses.
    pub waited_for_state: u64,
    /// Puts of keys a WorkManager already held, ignored.
    pub redundant_puts: u64,
    /// A replay's end: when its last segment completed, seconds.
    pub finished_at: Option<f64>,
}

impl RunReport {
    /// Trajectory at time `t` (linear between ticks).
    pub fn trajectory_at(&self, t: f64) -> f64 {
        let mut prev = (0.0, 0.0);
        for k in &self.ticks {
            if k.t >= t {
                let f = if k.t > prev.0 {
                    (t - prev.0) / (k.t - prev.0)
                } else {
                    1.0
                };
                return prev.1 + f * (k.trajectory - prev.1);
            }
            prev = (k.t, k.trajectory);
        }
        prev.1
    }
}

struct Node {
    cache: Cache,
    decider: Decider,
    inflight: HashMap<u64, f64, foldhash::fast::FixedState>,
    reads: u64,
    puts: u64,
    /// Reads that waited for another worker's store read of the same key.
    coalesced: u64,
    /// Reads that waited for the segment finding their state.
    waited: u64,
    last: (u64, u64, u64),
}

struct Pending {
    new_state: Option<(u64, u32)>,
}

/// The virtual store server.
struct Server {
    free_at: f64,
    params: StoreParams,
    puts: u64,
    reads: u64,
}

impl Server {
    fn read(&mut self, t: f64) -> f64 {
        let start = (t + STORE_NETWORK_SECONDS / 2.0).max(self.free_at);
        self.free_at = start + 1.0 / self.params.reads_per_s;
        self.reads += 1;
        self.free_at + STORE_NETWORK_SECONDS / 2.0 + self.params.read_latency_seconds
    }

    fn put(&mut self, t: f64) {
        let start = t.max(self.free_at);
        self.free_at = start + 1.0 / self.params.puts_per_s;
        self.puts += 1;
        if self.params.stall_every_puts > 0
            && self.puts.is_multiple_of(self.params.stall_every_puts)
        {
            self.free_at += self.params.stall_seconds;
        }
    }
}

const TRACE_EPOCH: u64 = 1_500_000_000;

/// Runs one simulation. With `trace`, WorkManager 0's operations are written there in the
/// ParSplice keyspace CSV format (the same as the real traces). `progress` gets the fraction done.
pub fn run(
    spec: &RunSpec,
    segments: Segments,
    store: &dyn Store,
    mut trace: Option<&mut dyn Write>,
    progress: &dyn Fn(f64),
) -> Result<RunReport, ParspliceError> {
    let w = &spec.workload;
    let positive = |x: f64| x.is_finite() && x > 0.0;
    if w.workers == 0 || w.nodes == 0 || !positive(w.hours) || !positive(w.growth_delay) {
        return Err(ParspliceError::Config(
            "workers, nodes, hours and growth delay must be positive".into(),
        ));
    }
    let (end, total) = match segments {
        Segments::Replay(r) => (f64::INFINITY, r.segments.len()),
        _ => (w.hours * 3600.0, 0),
    };
    let per_segment = segment_trajectory(w);
    let mut process = StateProcess::new(*w);
    // Recorded segments with the start and compute times a replay prescribes (else the model's).
    type Given<'s> = Box<dyn Iterator<Item = (&'s Segment, Option<(f64, f64)>)> + 's>;
    let mut recorded = match segments {
        Segments::Model => None,
        Segments::Recorded(v) => Some(Box::new(v.iter().map(|s| (s, None))) as Given<'_>),
        Segments::Replay(r) => Some(Box::new(
            r.segments
                .iter()
                .zip(r.start.iter().zip(&r.compute).map(|(s, c)| Some((*s, *c)))),
        ) as Given<'_>),
    }
    .map(|it| it.enumerate().peekable());
    let mut nodes: Vec<Node> = (0..w.nodes)
        .map(|i| {
            Ok(Node {
                cache: pliant_cache::cache("lru", Capacity::Keys(spec.policy.initial_capacity()))?,
                decider: Decider::new(&spec.policy, w.seed ^ u64::from(i))?,
                inflight: HashMap::with_hasher(foldhash::fast::FixedState::with_seed(5)),
                reads: 0,
                puts: 0,
                coalesced: 0,
                waited: 0,
                last: (0, 0, 0),
            })
        })
        .collect::<Result<_, ParspliceError>>()?;
    let mut server = Server {
        free_at: 0.0,
        params: spec.store,
        puts: 0,
        reads: 0,
    };
    let workers = (w.workers * w.nodes) as usize;
    let mut pending: Vec<Option<Pending>> = (0..workers).map(|_| None).collect();
    // Recorded states being found, and when their segments end.
    let mut producing: HashMap<u64, u64, _> =
        HashMap::with_hasher(foldhash::fast::FixedState::with_seed(6));
    // Events `(ns, phase, worker)`: at one instant every segment completes (and its state reaches
    // the cache) before any worker starts reading, as in the traced run, where a state written
    // and read in the same second was written first.
    const COMPLETE: u8 = 0;
    const START: u8 = 1;
    let mut heap: BinaryHeap<Reverse<(u64, u8, u32)>> = BinaryHeap::new();
    let ns = |t: f64| (t * 1e9) as u64;
    for i in 0..workers {
        heap.push(Reverse((i as u64, START, i as u32)));
    }
    // States stored before the first read: in the store, and in every WorkManager's cache.
    if let Segments::Replay(r) = segments {
        for &(k, size) in &r.preload {
            store.put_state(k, size)?;
            server.put(0.0);
            for node in &mut nodes {
                node.puts += 1;
                node.cache.put(&Request::new(k, size));
            }
        }
    }
    // The splicer stores the initial state before any worker reads it.
    if recorded.is_none() {
        let (k, size) = process.take_seeded();
        store.put_state(k, size)?;
        server.put(0.0);
    }

    let mut trajectory = 0.0;
    let mut segments_done = 0u64;
    let mut states = 0u64;
    let mut timeline = Timeline::default();
    let mut next_decision = spec.interval;
    let mut last_progress = 0.0;
    let mut now = 0.0;

    while let Some(Reverse((tn, phase, wi))) = heap.pop() {
        let t = tn as f64 / 1e9;
        if t >= end {
            break;
        }
        now = t;
        timeline.decide_through(
            &mut nodes,
            &mut next_decision,
            t,
            spec.interval,
            trajectory,
            &server,
        )?;
        let node_i = wi as usize / w.workers as usize;
        // Complete the worker's segment.
        if let Some(p) = pending[wi as usize].take() {
            trajectory += per_segment;
            segments_done += 1;
            if let Some((k, size)) = p.new_state {
                producing.remove(&k);
                let node = &mut nodes[node_i];
                node.puts += 1;
                let outcome = node.cache.put(&Request::new(k, size));
                let fresh = outcome != pliant_cache::PutOutcome::Redundant;
                if node_i == 0
                    && let Some(out) = trace.as_deref_mut()
                {
                    write_put(out, TRACE_EPOCH + t as u64, k, fresh)?;
                }
                // A put the tier already holds is ignored there and goes no further.
                if fresh {
                    store.put_state(k, size)?;
                    server.put(t);
                    states += 1;
                }
                process.publish(k);
            }
        }
        if phase == COMPLETE {
            heap.push(Reverse((tn, START, wi)));
            continue;
        }
        // Start the next one.
        let (seg, compute) = match recorded.as_mut() {
            Some(it) => {
                // The trace has not made this read yet: the worker waits for its clock.
                let wait = it
                    .peek()
                    .and_then(|&(_, (_, timing))| timing.map(|(start, _)| ns(start)))
                    .filter(|&start| start > tn);
                if let Some(at) = wait {
                    heap.push(Reverse((at, START, wi)));
                    continue;
                }
                match it.next() {
                    Some((i, (s, c))) => {
                        if total > 0 && i % 1024 == 0 {
                            progress(i as f64 / total as f64);
                        }
                        (*s, c.map(|(_, compute)| compute))
                    }
                    None => continue,
                }
            }
            None => {
                let (seg, seeded) = process.next_segment();
                if let Some((k, size)) = seeded {
                    store.put_state(k, size)?;
                    server.put(t);
                }
                (seg, None)
            }
        };
        if recorded.is_some() && store.state_len(seg.start)?.is_none() {
            // A recorded trace may read a state written before the trace began.
            store.put_state(seg.start, seg.start_size)?;
        }
        let node = &mut nodes[node_i];
        node.reads += 1;
        node.decider.on_read(t, seg.start);
        let req = Request::new(seg.start, seg.start_size);
        // A state is read only once found: a read of the state an unfinished segment will write
        // waits for it (the traced run could not read it sooner either), then finds it in the
        // cache, where the segment's end puts it.
        let found = producing.get(&seg.start).copied().filter(|&f| f > tn);
        let latency = match node.inflight.get(&seg.start) {
            _ if let Some(f) = found => {
                node.waited += 1;
                (f - tn) as f64 / 1e9 + CACHE_HIT_SECONDS
            }
            // Another worker's read of this key is on its way up: wait for it (coalesced).
            Some(&ready) if ready > t => {
                node.coalesced += 1;
                ready - t + CACHE_HIT_SECONDS
            }
            _ if node.cache.get(&req).is_some() => CACHE_HIT_SECONDS,
            _ => {
                let ready = server.read(t);
                let len = store
                    .state_len(seg.start)?
                    .ok_or(ParspliceError::Lost(seg.start))?;
                if len != seg.start_size as usize {
                    return Err(ParspliceError::Lost(seg.start));
                }
                node.inflight.insert(seg.start, ready);
                // The tier keeps what it fetched; readers arriving before `ready` wait above.
                node.cache.put(&req);
                ready - t + CACHE_HIT_SECONDS
            }
        };
        if node_i == 0
            && let Some(out) = trace.as_deref_mut()
        {
            let ts = TRACE_EPOCH + t as u64;
            writeln!(
                out,
                "{ts},DBMemoryGet,0,{}\n{ts},DBMemoryMRUGet,0,{}",
                seg.start, seg.start
            )
            .map_err(ParspliceError::Io)?;
        }
        let finish = t + latency + compute.unwrap_or_else(|| segment_seconds(seg.atoms, w));
        pending[wi as usize] = Some(Pending {
            new_state: seg.new_state,
        });
        if recorded.is_some()
            && let Some((k, _)) = seg.new_state
        {
            producing.insert(k, ns(finish));
        }
        heap.push(Reverse((ns(finish), COMPLETE, wi)));
        if total == 0 && t - last_progress > end / 200.0 {
            last_progress = t;
            progress(t / end);
        }
    }
    let finished_at = (total > 0).then_some(now);
    timeline.decide_through(
        &mut nodes,
        &mut next_decision,
        finished_at.unwrap_or(end + 1e-9),
        spec.interval,
        trajectory,
        &server,
    )?;
    // A replay ends between decisions: one last, shorter interval records the end state.
    if let Some(t) = finished_at
        && timeline.ticks.last().is_none_or(|k| k.t < t)
    {
        let since = timeline.ticks.last().map_or(0.0, |k| k.t);
        timeline.decide(&mut nodes, t, (t - since).max(1e-9), trajectory, &server)?;
    }
    progress(1.0);
    let Timeline {
        ticks, trims, peak, ..
    } = timeline;
    let last = ticks.last().copied();
    let sum = |f: fn(&pliant_cache::Stats) -> u64| nodes.iter().map(|n| f(n.cache.stats())).sum();
    Ok(RunReport {
        cache_hits: sum(|s| s.hits),
        cache_misses: sum(|s| s.misses) + nodes.iter().map(|n| n.coalesced).sum::<u64>(),
        waited_for_state: nodes.iter().map(|n| n.waited).sum(),
        redundant_puts: sum(|s| s.redundant_puts),
        policy: spec.policy.label(),
        peak_store_reads_per_s: ticks
            .iter()
            .map(|k| k.store_reads_per_s)
            .fold(0.0, f64::max),
        ticks,
        segments: segments_done,
        states,
        store_reads: server.reads,
        store_puts: server.puts,
        peak_bytes: peak.1,
        final_bytes: last.map_or(0, |k| k.bytes),
        peak_keys: peak.0,
        final_keys: last.map_or(0, |k| k.keys),
        auto: nodes[0].decider.auto_threshold().map(|(t, k)| AutoChoice {
            regime3_start: t,
            threshold_keys: k,
        }),
        trims,
        finished_at,
    })
}

fn write_put(out: &mut dyn Write, ts: u64, k: u64, unique: bool) -> Result<(), ParspliceError> {
    writeln!(out, "{ts},DBMemoryPut,0,{k}").map_err(ParspliceError::Io)?;
    if unique {
        writeln!(out, "{ts},DBMemoryPutUnique,0,{k}").map_err(ParspliceError::Io)?;
    }
    writeln!(out, "{ts},DBMemoryMRUPut,0,{k}").map_err(ParspliceError::Io)
}

/// What the decisions record as the run goes: one tick per interval, the policy's trims, peaks.
#[derive(Default)]
struct Timeline {
    ticks: Vec<Tick>,
    /// Totals at the last tick: reads, reads at WorkManager 0, misses, store reads.
    last: (u64, u64, u64, u64),
    trims: Vec<(f64, u64)>,
    /// Most keys and bytes held at once.
    peak: (u64, u64),
}

impl Timeline {
    /// Makes every decision due at or before `until`, advancing `next` past it.
    fn decide_through(
        &mut self,
        nodes: &mut [Node],
        next: &mut f64,
        until: f64,
        interval: f64,
        trajectory: f64,
        server: &Server,
    ) -> Result<(), ParspliceError> {
        while *next <= until {
            self.decide(nodes, *next, interval, trajectory, server)?;
            *next += interval;
        }
        Ok(())
    }

    /// Every WorkManager's policy decides at `t`; then a tick is recorded.
    fn decide(
        &mut self,
        nodes: &mut [Node],
        t: f64,
        interval: f64,
        trajectory: f64,
        server: &Server,
    ) -> Result<(), ParspliceError> {
        for (i, n) in nodes.iter_mut().enumerate() {
            let s = *n.cache.stats();
            let (r0, p0, m0) = n.last;
            let view = CacheView {
                t,
                keys: s.keys,
                bytes: s.bytes,
                capacity: n.cache.capacity().amount(),
                hits: s.hits,
                misses: s.misses,
                reads_per_s: (n.reads - r0) as f64 / interval,
                writes_per_s: (n.puts - p0) as f64 / interval,
                misses_per_s: (s.misses - m0) as f64 / interval,
                // Misses waiting for the store (coalesced ones count once).
                queue_len: Some(n.inflight.values().filter(|&&r| r > t).count() as f64),
                cpu_load_avg: None,
            };
            n.last = (n.reads, n.puts, s.misses);
            if let Some(keys) = n.decider.decide(&view)? {
                n.cache.resize(Capacity::Keys(keys));
                if i == 0 {
                    self.trims.push((t, keys));
                }
            }
            n.inflight.retain(|_, r| *r > t);
        }
        let reads: u64 = nodes.iter().map(|n| n.reads).sum();
        let misses: u64 = nodes.iter().map(|n| n.cache.stats().misses).sum();
        let keys: u64 = nodes.iter().map(|n| n.cache.stats().keys).sum();
        let bytes: u64 = nodes.iter().map(|n| n.cache.stats().bytes).sum();
        let peak_keys: u64 = nodes.iter().map(|n| n.cache.stats().peak_keys).sum();
        let peak_bytes: u64 = nodes.iter().map(|n| n.cache.stats().peak_bytes).sum();
        self.peak = (self.peak.0.max(peak_keys), self.peak.1.max(peak_bytes));
        let (r, r0, m, sr) = self.last;
        self.ticks.push(Tick {
            t,
            trajectory,
            reads: reads - r,
            reads_node0: nodes[0].reads - r0,
            misses: misses - m,
            store_reads_per_s: (server.reads - sr) as f64 / interval,
            keys,
            bytes,
        });
        self.last = (reads, nodes[0].reads, misses, server.reads);
        Ok(())
    }
}
