//! The cache hierarchy in virtual time: workers → their node's WorkManager cache → the shared
//! persistent store. A discrete-event simulation, deterministic for a seed.
//!
//! A WorkManager is a [`Tier`] (`pliant-tier`), which holds ParSplice's rules: a read goes up
//! until a tier has the key, and the WorkManager keeps what it fetched; a worker's put is stored
//! in its WorkManager and forwarded to the store once (a put of a key a tier already holds is
//! ignored); concurrent misses for one key at one WorkManager are coalesced into one store read.
//!
//! This module supplies time and the rest of the machine: workers as events, a fetch in flight
//! as the virtual time its value arrives, a replay's timing, and the store as one FIFO server
//! with the service model of [`StoreParams`] (reads wait in its queue, puts are asynchronous for
//! the worker but occupy it) in front of a real [`Store`].
//!
//! On the model's own segments, the trajectory stalls: a store read of a state the persistent
//! store never got ([`crate::model::lost`]) finds it nowhere, the trajectory stops growing (the
//! workers go on computing, the system does not grow) until a segment finds the state again
//! ([`crate::model::heal_chance`]). A cache that keeps what it is given never reads such a state
//! from the store, so only a limited one stalls.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io::Write;
use std::iter::{Enumerate, Peekable};

use pliant_cache::Capacity;
use pliant_tier::{AutoState, Decider, Put, Read, Resize, Tier};
use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64Mcg;
use serde::Serialize;

use crate::ParspliceError;
use crate::meter::MemoryMeter;
use crate::model::{
    CACHE_HIT_SECONDS, StoreParams, WorkloadParams, heal_chance, lost, segment_seconds,
    segment_trajectory,
};
use crate::policy::PolicyKind;
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

/// A span in which the trajectory did not grow: a state it needed was nowhere.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Stall {
    /// When the missing state was read, seconds.
    pub start: f64,
    /// When a segment found it again; `None`: not by the run's end.
    pub end: Option<f64>,
    /// Atoms in the system meanwhile.
    pub atoms: f64,
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
    /// Most bytes the caches held at once, all together (the peak of the sum).
    pub peak_bytes: u64,
    /// Bytes held at the end.
    pub final_bytes: u64,
    /// Bytes held, all caches together, averaged over the run's time.
    pub mean_bytes: u64,
    /// Most keys held at once, all caches together.
    pub peak_keys: u64,
    /// Keys held at the end.
    pub final_keys: u64,
    /// Highest store reads per second over an interval.
    pub peak_store_reads_per_s: f64,
    /// What `auto` decided at WorkManager 0, where it armed.
    pub auto: Option<AutoState>,
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
    /// The trajectory's stalls, in order (the model's own segments only).
    pub stalls: Vec<Stall>,
}

impl RunReport {
    /// When the trajectory stopped for good: the start of a stall that lasted to the run's end
    /// (`end`, seconds) and at least `min` seconds, as the measured runs' stops are read.
    pub fn stop(&self, end: f64, min: f64) -> Option<f64> {
        self.stalls
            .last()
            .filter(|s| s.end.is_none() && end - s.start >= min)
            .map(|s| s.start)
    }
}

impl RunReport {
    /// Trajectory at time `t`, interpolated between ticks like every other trajectory
    /// ([`crate::interpolate`]).
    pub fn trajectory_at(&self, t: f64) -> f64 {
        crate::interpolate(self.ticks.iter().map(|k| (k.t, k.trajectory)), t)
    }
}

/// A WorkManager: its tier (cache, fetches in flight, counters) and the policy that sizes it.
struct Node {
    /// A fetch in flight is the virtual time its value arrives.
    tier: Tier,
    decider: Decider,
    /// Workers it serves.
    workers: u32,
    /// The run's trajectory at its previous decision.
    trajectory_then: f64,
}

impl Node {
    /// The policy decides at `t` over the `interval` just ended, seeing the run's `trajectory`
    /// as its progress, and resizes the tier if it asks; then the fetches that have arrived by `t`
    /// are forgotten. Returns what it did to the tier.
    fn decide(
        &mut self,
        t: f64,
        interval: f64,
        trajectory: f64,
    ) -> Result<Option<Resize>, ParspliceError> {
        let mut view = self.tier.view(t, interval);
        view.clients = Some(f64::from(self.workers));
        view.progress = Some(trajectory);
        view.progress_per_s = Some((trajectory - self.trajectory_then) / interval);
        self.trajectory_then = trajectory;
        let resized = self.decider.decide(&view)?;
        if let Some(r) = resized {
            self.tier.apply(r);
        }
        self.tier.expire(t);
        Ok(resized)
    }
}

/// A worker's segment under way.
struct Pending {
    /// The state it will have found when it ends, and its size.
    new_state: Option<(u64, u32)>,
    /// Atoms in the system while it computes (what its trajectory is worth).
    atoms: f64,
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
        let start = (t + self.params.network_seconds / 2.0).max(self.free_at);
        self.free_at = start + 1.0 / self.params.reads_per_s;
        self.reads += 1;
        self.free_at + self.params.network_seconds / 2.0 + self.params.read_latency_seconds
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

/// What a worker does at an event. At one instant every segment completes (and its state
/// reaches the cache) before any worker starts reading, as in the traced run, where a state
/// written and read in the same second was written first: hence `Complete` orders first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Complete,
    Start,
}

/// The workers' events `(ns, phase, worker)`, earliest first.
#[derive(Default)]
struct Events(BinaryHeap<Reverse<(u64, Phase, u32)>>);

impl Events {
    fn push(&mut self, ns: u64, phase: Phase, worker: u32) {
        self.0.push(Reverse((ns, phase, worker)));
    }

    fn pop(&mut self) -> Option<(u64, Phase, u32)> {
        self.0.pop().map(|Reverse(e)| e)
    }
}

/// Virtual seconds as the events' nanoseconds.
fn ns(t: f64) -> u64 {
    (t * 1e9) as u64
}

/// Recorded segments with the start and compute times a replay prescribes (else the model's).
type Recorded<'s> = Box<dyn Iterator<Item = (&'s Segment, Option<(f64, f64)>)> + 's>;

/// Recorded segments, numbered, with a look at the next one's start.
type Given<'s> = Peekable<Enumerate<Recorded<'s>>>;

fn given(segments: Segments<'_>) -> Option<Given<'_>> {
    let it: Recorded<'_> = match segments {
        Segments::Model => return None,
        Segments::Recorded(v) => Box::new(v.iter().map(|s| (s, None))),
        Segments::Replay(r) => Box::new(
            r.segments
                .iter()
                .zip(r.start.iter().zip(&r.compute).map(|(s, c)| Some((*s, *c)))),
        ),
    };
    Some(it.enumerate().peekable())
}

const TRACE_EPOCH: u64 = 1_500_000_000;

/// WorkManager 0's operations in the ParSplice keyspace CSV format (the real traces'), if asked.
struct TraceOut<'w>(Option<&'w mut dyn Write>);

impl<'w> TraceOut<'w> {
    /// Node 0's writer, if there is one.
    fn of(&mut self, node: usize) -> Option<&mut (dyn Write + 'w)> {
        if node == 0 {
            self.0.as_deref_mut()
        } else {
            None
        }
    }

    fn read(&mut self, node: usize, t: f64, k: u64) -> Result<(), ParspliceError> {
        let Some(out) = self.of(node) else {
            return Ok(());
        };
        let ts = TRACE_EPOCH + t as u64;
        writeln!(out, "{ts},DBMemoryGet,0,{k}\n{ts},DBMemoryMRUGet,0,{k}")
            .map_err(ParspliceError::Io)
    }

    /// A put; `unique` when the tier did not hold the key (ParSplice's `PutUnique`).
    fn put(&mut self, node: usize, t: f64, k: u64, unique: bool) -> Result<(), ParspliceError> {
        let Some(out) = self.of(node) else {
            return Ok(());
        };
        let ts = TRACE_EPOCH + t as u64;
        writeln!(out, "{ts},DBMemoryPut,0,{k}").map_err(ParspliceError::Io)?;
        if unique {
            writeln!(out, "{ts},DBMemoryPutUnique,0,{k}").map_err(ParspliceError::Io)?;
        }
        writeln!(out, "{ts},DBMemoryMRUPut,0,{k}").map_err(ParspliceError::Io)
    }
}

/// Runs one simulation. With `trace`, WorkManager 0's operations are written there in the
/// ParSplice keyspace CSV format (the same as the real traces). `progress` gets the fraction done.
pub fn run(
    spec: &RunSpec,
    segments: Segments,
    store: &dyn Store,
    trace: Option<&mut dyn Write>,
    progress: &dyn Fn(f64),
) -> Result<RunReport, ParspliceError> {
    check(&spec.workload)?;
    let mut sim = Sim::new(spec, segments, store, TraceOut(trace), progress)?;
    sim.preload(segments)?;
    sim.run_events()?;
    sim.finish()
}

fn check(w: &WorkloadParams) -> Result<(), ParspliceError> {
    let positive = |x: f64| x.is_finite() && x > 0.0;
    if w.workers == 0 || w.nodes == 0 || !positive(w.hours) || !positive(w.growth_delay) {
        return Err(ParspliceError::Config(
            "workers, nodes, hours and growth delay must be positive".into(),
        ));
    }
    Ok(())
}

/// A run under way: the simulated machine, the workers' events, and what the run has done.
struct Sim<'a, 'w> {
    spec: &'a RunSpec,
    store: &'a dyn Store,
    trace: TraceOut<'w>,
    progress: &'a dyn Fn(f64),
    nodes: Vec<Node>,
    server: Server,
    /// The model's state process; with recorded segments it only hears of the states found.
    process: StateProcess,
    recorded: Option<Given<'a>>,
    /// A replay's segments (0 on the model and on recorded segments: progress goes by time).
    total: usize,
    /// When the run ends (never, for a replay: it ends when its segments have).
    end: f64,
    events: Events,
    /// Each worker's segment under way.
    pending: Vec<Option<Pending>>,
    /// Recorded states being found, and when (ns) their segments end.
    producing: HashMap<u64, u64, foldhash::fast::FixedState>,
    timeline: Timeline,
    next_decision: f64,
    trajectory: f64,
    segments_done: u64,
    /// States that reached the store from a worker.
    states: u64,
    last_progress: f64,
    /// The last event's time.
    now: f64,
    /// The state the trajectory waits for, if it is stalled.
    stalled_on: Option<u64>,
    /// Segments completed since the trajectory stalled ([`heal_chance`] falls with them).
    stalled_segments: u64,
    stalls: Vec<Stall>,
    /// States the splicer stored itself (each superbasin's first): never lost.
    seeds: std::collections::HashSet<u64, foldhash::fast::FixedState>,
    /// Draws whether a segment finds a stalled trajectory's state again.
    heal: Pcg64Mcg,
}

impl<'a, 'w> Sim<'a, 'w> {
    fn new(
        spec: &'a RunSpec,
        segments: Segments<'a>,
        store: &'a dyn Store,
        trace: TraceOut<'w>,
        progress: &'a dyn Fn(f64),
    ) -> Result<Self, ParspliceError> {
        let w = &spec.workload;
        let nodes = (0..w.nodes)
            .map(|i| {
                let capacity = Capacity::Keys(spec.policy.initial_capacity());
                Ok(Node {
                    tier: Tier::new(pliant_cache::cache("lru", capacity)?),
                    decider: spec.policy.decider(w.seed ^ u64::from(i))?,
                    workers: w.workers,
                    trajectory_then: 0.0,
                })
            })
            .collect::<Result<_, ParspliceError>>()?;
        let workers = w.workers * w.nodes;
        let mut events = Events::default();
        // Workers start one nanosecond apart, in order.
        for i in 0..workers {
            events.push(u64::from(i), Phase::Start, i);
        }
        let (end, total) = match segments {
            Segments::Replay(r) => (f64::INFINITY, r.segments.len()),
            _ => (w.hours * 3600.0, 0),
        };
        Ok(Self {
            spec,
            store,
            trace,
            progress,
            nodes,
            server: Server {
                free_at: 0.0,
                params: spec.store,
                puts: 0,
                reads: 0,
            },
            process: StateProcess::new(*w),
            recorded: given(segments),
            total,
            end,
            events,
            pending: (0..workers).map(|_| None).collect(),
            producing: HashMap::with_hasher(foldhash::fast::FixedState::with_seed(6)),
            timeline: Timeline::new(w.nodes as usize),
            next_decision: spec.interval,
            trajectory: 0.0,
            segments_done: 0,
            states: 0,
            last_progress: 0.0,
            now: 0.0,
            stalled_on: None,
            stalled_segments: 0,
            stalls: Vec::new(),
            seeds: std::collections::HashSet::with_hasher(foldhash::fast::FixedState::with_seed(7)),
            heal: Pcg64Mcg::seed_from_u64(w.seed ^ 0x5EA1),
        })
    }

    /// Stores what exists before the first read: a replay's earlier states, in the store and in
    /// every WorkManager; on the model, the initial state, which the splicer stores before any
    /// worker reads it.
    fn preload(&mut self, segments: Segments) -> Result<(), ParspliceError> {
        if let Segments::Replay(r) = segments {
            for &(k, size) in &r.preload {
                self.store.put_state(k, size)?;
                self.server.put(0.0);
                for node in &mut self.nodes {
                    // Nothing to forward: the store has it already.
                    let _ = node.tier.put(k, size);
                    node.decider.on_put(0.0, k);
                }
            }
            for (i, node) in self.nodes.iter().enumerate() {
                self.timeline.observe(0.0, i, node);
            }
        }
        if self.recorded.is_none() {
            let (k, size) = self.process.take_seeded();
            self.seeds.insert(k);
            self.store.put_state(k, size)?;
            self.server.put(0.0);
        }
        Ok(())
    }

    /// The event loop, until the run's end or the last event. Decisions due by an event's time
    /// are made before it.
    fn run_events(&mut self) -> Result<(), ParspliceError> {
        while let Some((tn, phase, worker)) = self.events.pop() {
            let t = tn as f64 / 1e9;
            if t >= self.end {
                break;
            }
            self.now = t;
            self.decide_through(t)?;
            self.complete_segment(worker, t)?;
            match phase {
                Phase::Complete => self.events.push(tn, Phase::Start, worker),
                Phase::Start => self.start_segment(worker, tn, t)?,
            }
            // An event changes only its worker's WorkManager.
            let node = self.node_of(worker);
            self.timeline.observe(t, node, &self.nodes[node]);
        }
        Ok(())
    }

    fn node_of(&self, worker: u32) -> usize {
        (worker / self.spec.workload.workers) as usize
    }

    /// Makes every decision due at or before `until`.
    fn decide_through(&mut self, until: f64) -> Result<(), ParspliceError> {
        self.timeline.decide_through(
            &mut self.nodes,
            &mut self.next_decision,
            until,
            self.spec.interval,
            self.trajectory,
            &self.server,
        )
    }

    /// Ends `worker`'s segment, if one is under way: its trajectory counts, and the state it
    /// found goes to its WorkManager.
    fn complete_segment(&mut self, worker: u32, t: f64) -> Result<(), ParspliceError> {
        let Some(p) = self.pending[worker as usize].take() else {
            return Ok(());
        };
        if self.stalled_on.is_some() {
            self.stalled_segments += 1;
            let chance = heal_chance(p.atoms, self.stalled_segments, &self.spec.workload);
            if self.heal.random_bool(chance) {
                self.stalled_on = None;
                self.process.set_stalled(false);
                if let Some(s) = self.stalls.last_mut() {
                    s.end = Some(t);
                }
            }
        } else {
            self.trajectory += segment_trajectory(p.atoms, &self.spec.workload);
        }
        self.segments_done += 1;
        if let Some((k, size)) = p.new_state {
            self.put_found_state(self.node_of(worker), k, size, t)?;
        }
        Ok(())
    }

    /// A worker of `node` puts the state `k` it found: its WorkManager keeps it and forwards it
    /// to the store unless it held it already.
    fn put_found_state(
        &mut self,
        node: usize,
        k: u64,
        size: u32,
        t: f64,
    ) -> Result<(), ParspliceError> {
        self.producing.remove(&k);
        let n = &mut self.nodes[node];
        let forward = n.tier.put(k, size) == Put::Forward;
        n.decider.on_put(t, k);
        self.trace.put(node, t, k, forward)?;
        if forward {
            self.store.put_state(k, size)?;
            self.server.put(t);
            self.states += 1;
        }
        self.process.publish(k);
        Ok(())
    }

    /// Starts `worker`'s next segment, if there is one and its time has come: the worker reads
    /// the segment's start state, computes, and completes the segment later.
    fn start_segment(&mut self, worker: u32, tn: u64, t: f64) -> Result<(), ParspliceError> {
        let Some((seg, compute)) = self.next_segment(worker, tn, t)? else {
            return Ok(());
        };
        if self.recorded.is_some() && self.store.state_len(seg.start)?.is_none() {
            // A recorded trace may read a state written before the trace began.
            self.store.put_state(seg.start, seg.start_size)?;
        }
        let node = self.node_of(worker);
        let latency = self.read_latency(node, &seg, tn, t)?;
        self.trace.read(node, t, seg.start)?;
        let compute = compute.unwrap_or_else(|| segment_seconds(seg.atoms, &self.spec.workload));
        let finish = t + latency + compute;
        self.pending[worker as usize] = Some(Pending {
            new_state: seg.new_state,
            atoms: seg.atoms,
        });
        if self.recorded.is_some()
            && let Some((k, _)) = seg.new_state
        {
            self.producing.insert(k, ns(finish));
        }
        self.events.push(ns(finish), Phase::Complete, worker);
        if self.total == 0 && t - self.last_progress > self.end / 200.0 {
            self.last_progress = t;
            (self.progress)(t / self.end);
        }
        Ok(())
    }

    /// The segment `worker` starts at `t` (`tn` ns), and its compute time if a replay gives it:
    /// the model's next, or the next recorded one. `None` when there is nothing to start now: the
    /// recorded segments are done, or the trace has not made the next read yet (the worker is
    /// woken again when it has).
    fn next_segment(
        &mut self,
        worker: u32,
        tn: u64,
        t: f64,
    ) -> Result<Option<(Segment, Option<f64>)>, ParspliceError> {
        let Some(recorded) = self.recorded.as_mut() else {
            let (seg, seeded) = self.process.next_segment();
            if let Some((k, size)) = seeded {
                self.seeds.insert(k);
                self.store.put_state(k, size)?;
                self.server.put(t);
            }
            return Ok(Some((seg, None)));
        };
        let not_yet = recorded
            .peek()
            .and_then(|&(_, (_, timing))| timing.map(|(start, _)| ns(start)))
            .filter(|&start| start > tn);
        if let Some(at) = not_yet {
            self.events.push(at, Phase::Start, worker);
            return Ok(None);
        }
        let Some((i, (seg, timing))) = recorded.next() else {
            return Ok(None);
        };
        if self.total > 0 && i % 1024 == 0 {
            (self.progress)(i as f64 / self.total as f64);
        }
        Ok(Some((*seg, timing.map(|(_, compute)| compute))))
    }

    /// How long `seg`'s start state takes to reach a worker of `node` that reads it at `t`
    /// (`tn` ns): as its WorkManager serves the read (a hit, joining another worker's fetch, or a
    /// miss that fetches from the store), or once the segment finding the state has ended.
    fn read_latency(
        &mut self,
        node: usize,
        seg: &Segment,
        tn: u64,
        t: f64,
    ) -> Result<f64, ParspliceError> {
        let (key, size) = (seg.start, seg.start_size);
        let n = &mut self.nodes[node];
        n.decider.on_read(t, key);
        // A state is read only once found: a read of the state an unfinished segment will write
        // waits for it (the traced run could not read it sooner either), then finds it in the
        // cache, where the segment's end puts it.
        if let Some(found) = self.producing.get(&key).copied().filter(|&f| f > tn) {
            n.tier.read_waiting_for_put();
            n.decider.on_late_put((found - tn) as f64 / 1e9);
            return Ok((found - tn) as f64 / 1e9 + CACHE_HIT_SECONDS);
        }
        Ok(match n.tier.read(key, size, t) {
            Read::Hit => CACHE_HIT_SECONDS,
            Read::Join(ready) => {
                n.decider.on_wait(ready - t, false);
                ready - t + CACHE_HIT_SECONDS
            }
            Read::Miss => {
                let ready = self.fetch(key, size, t)?;
                self.stall_if_lost(key, seg.atoms, t);
                let n = &mut self.nodes[node];
                n.tier.fetching(key, size, ready);
                n.decider.on_wait(ready - t, true);
                ready - t + CACHE_HIT_SECONDS
            }
        })
    }

    /// A store read of `key` at `t` on the model's segments: if the store never got it, the
    /// trajectory stalls (see the module doc).
    fn stall_if_lost(&mut self, key: u64, atoms: f64, t: f64) {
        if self.recorded.is_some()
            || self.stalled_on.is_some()
            || self.seeds.contains(&key)
            || !lost(key, &self.spec.workload)
        {
            return;
        }
        self.stalled_on = Some(key);
        self.stalled_segments = 0;
        self.process.set_stalled(true);
        self.stalls.push(Stall {
            start: t,
            end: None,
            atoms,
        });
    }

    /// A store read of `key` at `t`, queued at the store server; the value is checked against
    /// what the store holds. Returns when it arrives.
    fn fetch(&mut self, key: u64, size: u32, t: f64) -> Result<f64, ParspliceError> {
        let ready = self.server.read(t);
        let len = self
            .store
            .state_len(key)?
            .ok_or(ParspliceError::Lost(key))?;
        if len != size as usize {
            return Err(ParspliceError::Lost(key));
        }
        Ok(ready)
    }

    /// The last decisions, and the report.
    fn finish(mut self) -> Result<RunReport, ParspliceError> {
        let finished_at = (self.total > 0).then_some(self.now);
        self.decide_through(finished_at.unwrap_or(self.end + 1e-9))?;
        // A replay ends between decisions: one last, shorter interval records the end state.
        if let Some(t) = finished_at
            && self.timeline.ticks.last().is_none_or(|k| k.t < t)
        {
            let since = self.timeline.ticks.last().map_or(0.0, |k| k.t);
            let interval = (t - since).max(1e-9);
            self.timeline
                .decide(&mut self.nodes, t, interval, self.trajectory, &self.server)?;
        }
        (self.progress)(1.0);
        Ok(self.report(finished_at))
    }

    fn report(self, finished_at: Option<f64>) -> RunReport {
        let Timeline {
            ticks,
            trims,
            mut memory,
            ..
        } = self.timeline;
        let memory = memory.measure(finished_at.unwrap_or(self.end));
        let last = ticks.last().copied();
        let nodes = &self.nodes;
        let sum = |f: fn(&Node) -> u64| nodes.iter().map(f).sum::<u64>();
        RunReport {
            cache_hits: sum(|n| n.tier.stats().hits),
            cache_misses: sum(|n| n.tier.stats().misses + n.tier.counters().joined),
            waited_for_state: sum(|n| n.tier.counters().waited),
            redundant_puts: sum(|n| n.tier.stats().redundant_puts),
            policy: self.spec.policy.label(),
            peak_store_reads_per_s: ticks
                .iter()
                .map(|k| k.store_reads_per_s)
                .fold(0.0, f64::max),
            ticks,
            segments: self.segments_done,
            states: self.states,
            store_reads: self.server.reads,
            store_puts: self.server.puts,
            peak_bytes: memory.peak_bytes,
            final_bytes: last.map_or(0, |k| k.bytes),
            mean_bytes: memory.mean_bytes.round() as u64,
            peak_keys: memory.peak_keys,
            final_keys: last.map_or(0, |k| k.keys),
            auto: nodes[0].decider.auto_state(),
            trims,
            finished_at,
            stalls: self.stalls,
        }
    }
}

/// What the decisions record as the run goes: one tick per interval, the policy's trims, peaks.
struct Timeline {
    ticks: Vec<Tick>,
    /// Totals at the last tick: reads, reads at WorkManager 0, misses, store reads.
    last: (u64, u64, u64, u64),
    trims: Vec<(f64, u64)>,
    /// What all the caches hold together, as it changes.
    memory: MemoryMeter,
}

impl Timeline {
    fn new(nodes: usize) -> Self {
        Self {
            ticks: Vec::new(),
            last: (0, 0, 0, 0),
            trims: Vec::new(),
            memory: MemoryMeter::new(nodes),
        }
    }

    /// Node `i` changed what it holds at `t`.
    fn observe(&mut self, t: f64, i: usize, node: &Node) {
        let s = node.tier.stats();
        self.memory.observe(t, i, s.keys, s.bytes);
    }

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
            if let Some(r) = n.decide(t, interval, trajectory)?
                && i == 0
            {
                self.trims.push((t, r.amount()));
            }
        }
        let sum = |f: fn(&Node) -> u64| nodes.iter().map(f).sum::<u64>();
        let reads = sum(|n| n.tier.counters().reads);
        let misses = sum(|n| n.tier.stats().misses);
        for (i, n) in nodes.iter().enumerate() {
            self.observe(t, i, n);
        }
        let reads_node0 = nodes[0].tier.counters().reads;
        let (r, r0, m, sr) = self.last;
        self.ticks.push(Tick {
            t,
            trajectory,
            reads: reads - r,
            reads_node0: reads_node0 - r0,
            misses: misses - m,
            store_reads_per_s: (server.reads - sr) as f64 / interval,
            keys: sum(|n| n.tier.stats().keys),
            bytes: sum(|n| n.tier.stats().bytes),
        });
        self.last = (reads, reads_node0, misses, server.reads);
        Ok(())
    }
}
