//! A recorded ParSplice trace prepared for replay on its own clock.
//!
//! Each logical read of the trace starts a segment. Which key a segment reads and what it writes
//! come from the trace; how long its worker computes comes from the trace's clock too, so that
//! the unlimited cache replays the trace at the rate it was recorded:
//!
//! - With `W` workers pulling segments in order, a worker that starts read `i` starts its next one
//!   about `W` reads later, so it computes `t[i + W] − t[i]` seconds (less the cost of a hit).
//!   Summed over the trace that is `W` times the traced span, so `W` workers with a cache that
//!   always hits finish in the traced span.
//! - A write is the state found by the segment that ends next, the one that began `W` reads
//!   before the write: it reaches the cache just before the trace's next read, as it did in the
//!   traced run. Most segments find no new state (the trace has far fewer writes than reads);
//!   writes before the first read (the initial state) are in the cache when the replay begins.
//! - No read is replayed before the trace made it: a worker free early waits for the trace's
//!   clock, so a cache that always hits replays the trace exactly as it was recorded.
//! - A miss then costs what the model charges it (network, the store's queue and service, the
//!   read latency of [`StoreParams`](crate::StoreParams)) on top, and delays every later read of
//!   that worker: misses cost trajectory at the trace's own read rate.
//! - Every policy replays the same reads, so replay efficiency is the time the unlimited cache
//!   took to replay the covered span over the time the policy took ([`replay_efficiency`]).
//!
//! The run's growth delay and temperature come from `ps-config.xml` beside the trace when there
//! is one ([`RunConfig`]); its `layout.txt` says which rank is the WorkManager, and a trace of any
//! other rank (the databases above it see a handful of reads) is flagged as not a cache's trace.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::ParspliceError;
use crate::hierarchy::RunReport;
use crate::model::{CACHE_HIT_SECONDS, WorkloadParams, atoms, segment_trajectory, value_size};
use crate::workload::Segment;

/// What `ps-config.xml` says about a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunConfig {
    /// The file read.
    pub path: PathBuf,
    /// `<SystemModifier><Delay>`: ps of trajectory between two deposited atoms.
    pub growth_delay: f64,
    /// `<Temperature>` of the segment task (`PARSPLICE_TASK_SEGMENT`), kelvin.
    pub temperature_k: f64,
}

impl RunConfig {
    /// Reads `ps-config.xml` in `dir`, if there is one.
    pub fn beside(trace: &Path) -> Result<Option<Self>, ParspliceError> {
        let path = trace
            .parent()
            .unwrap_or_else(|| Path::new("."))
            .join("ps-config.xml");
        if !path.exists() {
            return Ok(None);
        }
        Self::read(&path).map(Some)
    }

    /// Reads a `ps-config.xml`.
    pub fn read(path: &Path) -> Result<Self, ParspliceError> {
        let bad = |what: String| ParspliceError::Input {
            path: path.to_owned(),
            message: what,
        };
        let text = std::fs::read_to_string(path).map_err(|e| ParspliceError::Read {
            path: path.to_owned(),
            source: e,
        })?;
        let doc = roxmltree::Document::parse(&text).map_err(|e| bad(e.to_string()))?;
        let number = |node: roxmltree::Node<'_, '_>, what: &str| -> Result<f64, ParspliceError> {
            let s = node.text().unwrap_or("").trim();
            s.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x > 0.0)
                .ok_or_else(|| {
                    let line = doc.text_pos_at(node.range().start).row;
                    bad(format!(
                        "line {line}: {what} is {s:?}, not a positive number"
                    ))
                })
        };
        let root = doc.root_element();
        let delay = child(root, "SystemModifier")
            .and_then(|m| child(m, "Delay"))
            .ok_or_else(|| bad("no <SystemModifier><Delay> (the growth delay)".into()))?;
        let segment_task = child(root, "TaskParameters")
            .into_iter()
            .flat_map(|t| t.children())
            .filter(|n| n.has_tag_name("TaskParameter"))
            .find(|t| {
                child(*t, "Type").and_then(|n| n.text()).map(str::trim)
                    == Some("PARSPLICE_TASK_SEGMENT")
            });
        let temperature = segment_task
            .and_then(|t| child(t, "Temperature"))
            .ok_or_else(|| {
                bad("no <Temperature> in the PARSPLICE_TASK_SEGMENT task parameters".into())
            })?;
        Ok(Self {
            path: path.to_owned(),
            growth_delay: number(delay, "<Delay>")?,
            temperature_k: number(temperature, "<Temperature>")?,
        })
    }
}

fn child<'a, 'i>(parent: roxmltree::Node<'a, 'i>, name: &str) -> Option<roxmltree::Node<'a, 'i>> {
    parent
        .children()
        .find(|n| n.is_element() && n.has_tag_name(name))
}

/// What part of a trace a replay covers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Coverage {
    /// The trace.
    pub path: PathBuf,
    /// Logical reads replayed.
    pub reads: u64,
    /// Logical writes replayed.
    pub writes: u64,
    /// Writes with no read left to pair them with (a trace with more writes than reads), not
    /// replayed.
    pub unpaired_writes: u64,
    /// Distinct keys read or written in the covered span.
    pub keys: u64,
    /// Reads of a key read or written earlier in the span: what any cache could serve.
    pub rereads: u64,
    /// Seconds of the trace's clock covered, from its first operation.
    pub span_seconds: f64,
    /// Seconds the whole trace spans.
    pub trace_seconds: f64,
    /// Seconds asked for, if a span was asked for.
    pub requested_seconds: Option<f64>,
    /// The rank's role in `layout.txt` beside the trace (`WorkManager`, `InMemoryDB`, …).
    pub role: Option<String>,
}

impl Coverage {
    /// Things a user should know before reading the results; empty when the replay is sound.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        // The trace's clock counts whole seconds: a span asked for ends before the trace's last
        // second unless the trace runs out first.
        if let Some(asked) = self.requested_seconds
            && asked > self.trace_seconds + 1.0
        {
            w.push(format!(
                "the trace ends after {:.2} h, before the {:.2} h asked for: replayed all of it",
                self.trace_seconds / 3600.0,
                asked / 3600.0
            ));
        }
        if let Some(role) = &self.role
            && role != "WorkManager"
        {
            w.push(format!(
                "{} is the {role}'s trace (layout.txt), not a WorkManager's: its reads are what \
                 the caches below it missed, so the policies here have little to decide",
                self.path.display()
            ));
        }
        if self.unpaired_writes > 0 {
            w.push(format!(
                "{} writes could not be paired with a read (the trace writes more than it \
                 reads) and were not replayed",
                self.unpaired_writes
            ));
        }
        if self.rereads * 2 < self.reads {
            w.push(format!(
                "only {} of {} reads ({:.1}%) read a key seen before in the span: even an \
                 unlimited cache serves few of them, so efficiencies stay near 100% whatever \
                 the policy",
                self.rereads,
                self.reads,
                100.0 * self.rereads as f64 / self.reads.max(1) as f64
            ));
        }
        w
    }
}

/// A trace ready to replay: segments in order and each one's compute time.
#[derive(Debug, Clone)]
pub struct Replay {
    /// The segments, in the trace's order.
    pub segments: Vec<Segment>,
    /// Seconds each segment's worker computes (see the module doc).
    pub compute: Vec<f64>,
    /// Seconds from the trace's start at which each segment's read was recorded: no replay reads
    /// sooner than the trace did.
    pub start: Vec<f64>,
    /// States written before the trace's first read: in the WorkManager when the replay begins.
    pub preload: Vec<(u64, u32)>,
    /// What the replay covers.
    pub coverage: Coverage,
}

/// One logical operation of a ParSplice trace: `(seconds since the trace's first operation,
/// is a read, key)`.
pub type Op = (u64, bool, u64);

impl Replay {
    /// Reads a ParSplice trace and prepares its first `seconds` (all of it if `None`) for `w`'s
    /// workers. Fails on a trace that leaves nothing to compare: no reads in the span, or a span
    /// shorter than one decision `interval`.
    pub fn from_file(
        path: &Path,
        w: &WorkloadParams,
        seconds: Option<f64>,
        interval: f64,
    ) -> Result<Self, ParspliceError> {
        let opts = pliant_trace::ReadOptions {
            format: Some(pliant_trace::Format::ParSplice),
            ..pliant_trace::ReadOptions::default()
        };
        let reader = pliant_trace::reader(path, &opts)?;
        let mut ops = Vec::new();
        let mut first = None;
        for r in reader {
            let r = r?;
            let t0 = *first.get_or_insert(r.time);
            ops.push((
                r.time.saturating_sub(t0),
                r.op == pliant_trace::Op::Get,
                r.key,
            ));
        }
        let mut replay = Self::from_ops(&ops, w, seconds, interval).map_err(|e| match e {
            ParspliceError::Degenerate(m) => ParspliceError::Input {
                path: path.to_owned(),
                message: m,
            },
            e => e,
        })?;
        replay.coverage.path = path.to_owned();
        replay.coverage.role = role_in_layout(path);
        Ok(replay)
    }

    /// Prepares logical operations (in trace order, times from the trace's start) for replay.
    pub fn from_ops(
        ops: &[Op],
        w: &WorkloadParams,
        seconds: Option<f64>,
        interval: f64,
    ) -> Result<Self, ParspliceError> {
        let trace_seconds = ops.last().map_or(0, |o| o.0) as f64;
        let covered: &[Op] = match seconds {
            Some(s) => {
                let n = ops.partition_point(|o| (o.0 as f64) < s);
                &ops[..n]
            }
            None => ops,
        };
        let mut trajectory = 0.0;
        let workers = (w.workers * w.nodes) as usize;
        // Writes left over once every segment that could have found them has a state.
        let mut unpaired = 0u64;
        let mut segments: Vec<Segment> = Vec::new();
        let mut times: Vec<u64> = Vec::new();
        let mut seen: HashSet<u64, foldhash::fast::FixedState> =
            HashSet::with_hasher(foldhash::fast::FixedState::with_seed(11));
        let mut sizes = std::collections::HashMap::<u64, u32, _>::with_hasher(
            foldhash::fast::FixedState::with_seed(12),
        );
        let (mut reads, mut writes, mut rereads) = (0u64, 0u64, 0u64);
        let mut preload: Vec<(u64, u32)> = Vec::new();
        for &(t, is_read, key) in covered {
            let a = atoms(trajectory, w);
            let size = *sizes.entry(key).or_insert_with(|| value_size(a, w));
            let known = !seen.insert(key);
            if is_read {
                reads += 1;
                rereads += u64::from(known);
                segments.push(Segment {
                    start: key,
                    start_size: size,
                    new_state: None,
                    atoms: a,
                });
                trajectory += segment_trajectory(a, w);
                times.push(t);
                continue;
            }
            writes += 1;
            if segments.is_empty() {
                // Stored before the trace's first read (the splicer's initial state): the
                // WorkManager holds it when the replay begins.
                preload.push((key, size));
                continue;
            }
            match writer(&segments, workers) {
                Some(i) => segments[i].new_state = Some((key, size)),
                None => unpaired += 1,
            }
        }
        if reads == 0 {
            return Err(ParspliceError::Degenerate(
                "no reads to replay in the span: nothing for a cache to serve".into(),
            ));
        }
        let span_seconds = covered.last().map_or(0, |o| o.0) as f64;
        if span_seconds < interval {
            return Err(ParspliceError::Degenerate(format!(
                "the span replayed lasts {span_seconds:.0} s, shorter than one policy decision \
                 ({interval} s): no policy would act"
            )));
        }
        let last = *times.last().unwrap_or(&0);
        let compute = times
            .iter()
            .enumerate()
            .map(|(i, &t)| {
                let next = times.get(i + workers).copied().unwrap_or(last);
                ((next - t) as f64 - CACHE_HIT_SECONDS).max(0.0)
            })
            .collect();
        Ok(Self {
            segments,
            compute,
            start: times.iter().map(|&t| t as f64).collect(),
            preload,
            coverage: Coverage {
                path: PathBuf::new(),
                reads,
                writes: writes - unpaired,
                unpaired_writes: unpaired,
                keys: seen.len() as u64,
                rereads,
                span_seconds,
                trace_seconds,
                requested_seconds: seconds,
                role: None,
            },
        })
    }
}

/// The segment a write that follows the last of `segments`' reads belongs to: in the compute
/// model segment `i` ends just before read `i + workers` begins, so the write is the state found by
/// the segment that began `workers` reads ago. If that one already has a state (two writes in
/// one round), the nearest earlier free segment of the round before takes it (its state then
/// reaches the cache a little early, never after a read that needs it), else the nearest later
/// one; `None` if every segment of the two rounds has a state.
fn writer(segments: &[Segment], workers: usize) -> Option<usize> {
    let r = segments.len();
    let ideal = r.saturating_sub(workers);
    let lowest = r.saturating_sub(2 * workers);
    let free = |i: &usize| segments[*i].new_state.is_none();
    (lowest..=ideal).rev().chain(ideal + 1..r).find(free)
}

/// The role of `rankN.csv*` in the `layout.txt` beside it (`rank rank parent role seed` lines).
fn role_in_layout(trace: &Path) -> Option<String> {
    let name = trace.file_name()?.to_str()?;
    let rank: u32 = name.strip_prefix("rank")?.split('.').next()?.parse().ok()?;
    let layout = std::fs::read_to_string(trace.parent()?.join("layout.txt")).ok()?;
    layout.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() >= 4 && f[0].parse() == Ok(rank)).then(|| f[3].to_string())
    })
}

/// Replay efficiency: the time the unlimited cache took to replay the covered span over the time
/// `run` took. `None` if either run is not a replay.
pub fn replay_efficiency(run: &RunReport, unlimited: &RunReport) -> Option<f64> {
    Some(unlimited.finished_at? / run.finished_at?)
}
