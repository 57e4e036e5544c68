//! The ParSplice cache study: the studies' policies plus `auto`, each run on the model or on a
//! replayed trace (in parallel, a scratch store each), and compared with the unlimited cache.
//!
//! What "efficiency" means depends on the source. On the model every policy runs for the same
//! wall-clock span and efficiency is trajectory over the unlimited cache's at its end. A replay
//! has a fixed amount of work (the trace's reads), so efficiency is the time the unlimited cache
//! took to replay it over the time the policy took ([`replay_efficiency`]).

use std::path::PathBuf;
use std::sync::Mutex;

use rayon::prelude::*;
use serde::Serialize;

use crate::hierarchy::{RunReport, RunSpec, Segments, run};
use crate::model::{StoreParams, WorkloadParams};
use crate::policy::PolicyKind;
use crate::replay::{Replay, RunConfig, replay_efficiency};
use crate::store::FjallStore;
use crate::{ParspliceError, efficiency};

/// Seconds between policy decisions: ParSplice's performance counters come every 10 s
/// (`<PerfDelay> 10` in the traced runs' ps-config.xml).
pub const DECISION_INTERVAL: f64 = 10.0;

/// One policy of the study.
#[derive(Debug, Clone, PartialEq)]
pub struct StudyPolicy {
    /// The policy.
    pub kind: PolicyKind,
    /// Whether the demo's charts draw it: the unlimited reference, the extremes of LRU, the
    /// smallest two-phase target and `auto`, so the lines stay readable.
    pub charted: bool,
}

/// The study's policies, in the order every table lists them: the unlimited cache the others are
/// compared with (first), the ParSplice studies' LRU at five sizes and two-phase policy at four
/// targets, and `auto`. The demo, its report and the README's tables derive from this list (a
/// test holds the README to it); adding a policy to the study is adding it here.
pub fn policies() -> Vec<StudyPolicy> {
    let entry = |kind, charted| StudyPolicy { kind, charted };
    let mut p = vec![entry(PolicyKind::Unlimited, true)];
    p.extend(
        [10, 100, 1_000, 10_000, 100_000]
            .map(|n| entry(PolicyKind::Lru(n), n == 10 || n == 100_000)),
    );
    p.extend([10, 100, 1_000, 10_000].map(|target| {
        entry(
            PolicyKind::TwoPhase {
                absorb: 100_000,
                target,
            },
            target == 10,
        )
    }));
    p.push(entry(PolicyKind::no_progress(100_000, 10), false));
    p.push(entry(PolicyKind::auto(), true));
    p
}

/// The fixed policies swept for the efficiency–memory front ([`front`]): LRU at 1, 2 and 5 per
/// decade from 10 to 100,000 keys, and the two-phase policy absorbing 1,000, 10,000 or 100,000
/// keys then trimming to 10, 100 or 1,000. The grid is the studies' own range of sizes (10 to
/// 100,000 keys), filled in; nothing in it is chosen by looking at `auto`.
pub fn sweep() -> Vec<PolicyKind> {
    let mut p: Vec<PolicyKind> = [1u64, 10, 100, 1_000]
        .iter()
        .flat_map(|d| [1, 2, 5].map(|m| PolicyKind::Lru(10 * d * m)))
        .collect();
    p.push(PolicyKind::Lru(100_000));
    for absorb in [1_000, 10_000, 100_000] {
        p.extend([10, 100, 1_000].map(|target| PolicyKind::TwoPhase { absorb, target }));
    }
    p
}

/// Which memory a front is drawn over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// Memory at the end over the unlimited cache's (the studies' measure).
    Final,
    /// Memory averaged over the run over the unlimited cache's.
    Mean,
}

impl Measure {
    /// The row's memory in this measure, as a fraction of the unlimited cache's.
    pub fn of(self, r: &Row) -> f64 {
        match self {
            Self::Final => r.memory_fraction,
            Self::Mean => r.mean_fraction,
        }
    }
}

/// One policy on an efficiency–memory front.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FrontPoint {
    /// Policy label.
    pub policy: String,
    /// Its efficiency.
    pub efficiency: f64,
    /// Its memory, a fraction of the unlimited cache's in the front's measure.
    pub memory: f64,
}

/// The Pareto front of `rows` over memory in `measure`: the rows no other row beats on both
/// efficiency and memory (ties kept once), by memory ascending, efficiency then ascending too.
pub fn front(rows: &[Row], measure: Measure) -> Vec<FrontPoint> {
    let mut points: Vec<FrontPoint> = rows
        .iter()
        .map(|r| FrontPoint {
            policy: r.policy.clone(),
            efficiency: r.efficiency,
            memory: measure.of(r),
        })
        .collect();
    points.sort_by(|a, b| {
        a.memory
            .total_cmp(&b.memory)
            .then(b.efficiency.total_cmp(&a.efficiency))
    });
    let mut out: Vec<FrontPoint> = Vec::new();
    for p in points {
        if out.last().is_none_or(|l| p.efficiency > l.efficiency) {
            out.push(p);
        }
    }
    out
}

/// How far `r` lies below `front` at its own memory: the best efficiency the front reaches with
/// no more memory than `r` uses, minus `r`'s. Positive: a fixed policy did better with as little
/// memory; zero or negative: `r` is on or above the front. `None` when every point of the front
/// uses more memory than `r`: nothing fixed was that frugal.
pub fn below_front(front: &[FrontPoint], r: &Row, measure: Measure) -> Option<f64> {
    let m = measure.of(r);
    front
        .iter()
        .filter(|p| p.memory <= m)
        .map(|p| p.efficiency)
        .reduce(f64::max)
        .map(|best| best - r.efficiency)
}

/// What a user asks of a study; `None` takes the default (from the trace's `ps-config.xml` when
/// there is one).
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// A ParSplice trace to replay instead of the model.
    pub trace: Option<PathBuf>,
    /// Hours: of simulated wall-clock time on the model (default 2.5), of the trace's own clock
    /// on a replay (default: all of it).
    pub hours: Option<f64>,
    /// Growth delay, ps.
    pub growth: Option<f64>,
    /// WorkManagers (default: the measured runs' one; 1 on a replay: a trace is one
    /// WorkManager's).
    pub nodes: Option<u32>,
    /// Workers per WorkManager (default: the measured runs' 251 on the model, the traces' 27 on a
    /// replay).
    pub workers: Option<u32>,
    /// Temperature relative to the traced runs' own.
    pub temperature: f64,
    /// Seed of the state process.
    pub seed: u64,
    /// Effective penalty of a store read, seconds (default: the model's fitted
    /// [`READ_LATENCY_SECONDS`](crate::model::READ_LATENCY_SECONDS)).
    pub miss_penalty: Option<f64>,
}

/// A study ready to run: the workload, where its parameters came from, and the replay if any.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The workload every policy runs.
    pub workload: WorkloadParams,
    /// The store every policy's misses reach.
    pub store: StoreParams,
    /// Where the growth delay came from (`--growth`, a `ps-config.xml`, or `default`).
    pub growth_from: String,
    /// The temperature and its reference.
    pub temperature_from: String,
    /// The trace to replay, read and paired.
    pub replay: Option<Replay>,
}

impl Prepared {
    /// What the policies run on.
    pub fn segments(&self) -> Segments<'_> {
        self.replay
            .as_ref()
            .map_or(Segments::Model, Segments::Replay)
    }

    /// Warnings about the input, before anything runs (empty on the model).
    pub fn warnings(&self) -> Vec<String> {
        self.replay
            .as_ref()
            .map_or_else(Vec::new, |r| r.coverage.warnings())
    }
}

/// Checks `req`, reads the trace and its `ps-config.xml` if asked, and settles the workload.
/// Flags override the file; the temperature stays relative to the file's `<Temperature>`.
pub fn prepare(req: &Request) -> Result<Prepared, ParspliceError> {
    let positive = |x: f64| x.is_finite() && x > 0.0;
    if !(req.hours.is_none_or(positive)
        && req.growth.is_none_or(positive)
        && positive(req.temperature))
    {
        return Err(ParspliceError::Config(
            "--hours, --growth and --temperature must be positive".into(),
        ));
    }
    let mut store = StoreParams::default();
    if let Some(p) = req.miss_penalty {
        if !(p.is_finite() && p >= 0.0) {
            return Err(ParspliceError::Config(
                "--miss-penalty must be a non-negative number of seconds".into(),
            ));
        }
        store.read_latency_seconds = p;
    }
    if req.workers == Some(0) || req.nodes == Some(0) {
        return Err(ParspliceError::Config(
            "--workers and --nodes must be at least 1".into(),
        ));
    }
    let config = match &req.trace {
        Some(p) => RunConfig::beside(p)?,
        None => None,
    };
    let (growth, growth_from) = match (req.growth, &config) {
        (Some(g), _) => (g, "--growth".to_string()),
        (None, Some(c)) => (c.growth_delay, c.path.display().to_string()),
        (None, None) => (100_000.0, "default".to_string()),
    };
    let temperature_from = match &config {
        Some(c) => format!(
            "{:.0} K × {} (reference: {})",
            c.temperature_k,
            req.temperature,
            c.path.display()
        ),
        None => format!("{} × the traced runs'", req.temperature),
    };
    let mut workload = WorkloadParams {
        growth_delay: growth,
        temperature: req.temperature,
        workers: req.workers.unwrap_or(if req.trace.is_some() {
            crate::model::TRACED_WORKERS
        } else {
            WorkloadParams::default().workers
        }),
        nodes: req.nodes.unwrap_or(if req.trace.is_some() {
            1
        } else {
            WorkloadParams::default().nodes
        }),
        hours: req.hours.unwrap_or(2.5),
        seed: req.seed,
        ..WorkloadParams::default()
    };
    let replay = match &req.trace {
        Some(p) => {
            let r = Replay::from_file(
                p,
                &workload,
                req.hours.map(|h| h * 3600.0),
                DECISION_INTERVAL,
            )?;
            workload.hours = r.coverage.span_seconds / 3600.0;
            Some(r)
        }
        None => None,
    };
    Ok(Prepared {
        workload,
        store,
        growth_from,
        temperature_from,
        replay,
    })
}

/// One policy's result, as the demo's table and JSON show it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Row {
    /// Policy label.
    pub policy: String,
    /// Efficiency against the unlimited cache (see the module doc).
    pub efficiency: f64,
    /// Trajectory at the end, ps, on the model (efficiency × the unlimited cache's): the
    /// absolute figure the ratio comes from, to compare with a measured run's `times.txt`. `None`
    /// on a replay, whose efficiency is a ratio of times.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trajectory: Option<f64>,
    /// Keys the caches held at the end, all WorkManagers together (a measured run's
    /// WorkManager reports its own as `DBMemoryMapSize`).
    pub keys_held: u64,
    /// Bytes the caches held at the end.
    pub final_memory_bytes: u64,
    /// Most bytes the caches held at once, all together.
    pub peak_memory_bytes: u64,
    /// Bytes the caches held, all together, averaged over the run's time.
    pub mean_memory_bytes: u64,
    /// Final bytes over the unlimited cache's final bytes (the studies' measure).
    pub memory_fraction: f64,
    /// Peak bytes over the unlimited cache's peak bytes.
    pub peak_fraction: f64,
    /// Mean bytes over the unlimited cache's mean bytes.
    pub mean_fraction: f64,
    /// Highest store reads per second over a decision interval.
    pub peak_store_reads_per_s: f64,
    /// A replay's duration, seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_s: Option<f64>,
    /// When `auto` saw the run leave its opening regime and armed, seconds (WorkManager 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_armed_s: Option<f64>,
    /// The regimes its gate found then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_regimes: Option<usize>,
    /// Its working-set window at the last decision, seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_window_s: Option<f64>,
    /// The keys it kept at the last decision (read within that window).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_target_keys: Option<u64>,
    /// How far below the fixed policies' front on final memory it lies ([`below_front`]), when
    /// the front was swept and reaches down to its memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub below_front_final: Option<f64>,
    /// The same on mean memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub below_front_mean: Option<f64>,
}

/// Runs every policy of `policies` on `segments` in parallel; `progress` gets the fraction of
/// all runs done. Reports come in the order of `policies`.
pub fn run_all(
    workload: WorkloadParams,
    store: StoreParams,
    segments: Segments<'_>,
    policies: &[PolicyKind],
    progress: &(dyn Fn(f64) + Sync),
) -> Result<Vec<RunReport>, ParspliceError> {
    let done = Mutex::new(vec![0.0f64; policies.len()]);
    policies
        .par_iter()
        .enumerate()
        .map(|(i, p)| {
            let scratch = FjallStore::temporary()?;
            let spec = RunSpec {
                policy: p.clone(),
                workload,
                store,
                interval: DECISION_INTERVAL,
            };
            run(&spec, segments, &scratch, None, &|f| {
                if let Ok(mut d) = done.lock() {
                    d[i] = f;
                    progress(d.iter().sum::<f64>() / d.len() as f64);
                }
            })
        })
        .collect()
}

/// The rows of `reports`, compared with the first (the unlimited cache): at `end` seconds on the
/// model, by replay time on a replay.
pub fn rows(reports: &[RunReport], end: f64) -> Vec<Row> {
    let Some(base) = reports.first() else {
        return Vec::new();
    };
    reports
        .iter()
        .map(|r| Row {
            policy: r.policy.clone(),
            efficiency: replay_efficiency(r, base).unwrap_or_else(|| efficiency(r, base, end)),
            trajectory: r.finished_at.is_none().then(|| r.trajectory_at(end)),
            keys_held: r.final_keys,
            final_memory_bytes: r.final_bytes,
            peak_memory_bytes: r.peak_bytes,
            mean_memory_bytes: r.mean_bytes,
            memory_fraction: ratio(r.final_bytes, base.final_bytes),
            peak_fraction: ratio(r.peak_bytes, base.peak_bytes),
            mean_fraction: ratio(r.mean_bytes, base.mean_bytes),
            peak_store_reads_per_s: r.peak_store_reads_per_s,
            finished_s: r.finished_at,
            auto_armed_s: r.auto.map(|x| x.armed_at),
            auto_regimes: r.auto.map(|x| x.regimes),
            auto_window_s: r.auto.map(|x| x.window_seconds),
            auto_target_keys: r.auto.map(|x| x.target_keys),
            below_front_final: None,
            below_front_mean: None,
        })
        .collect()
}

/// A study's results: its policies' reports and rows and, when swept, the fixed policies'
/// efficiency–memory fronts with every row's distance below them.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// One report per policy asked for, in order.
    pub reports: Vec<RunReport>,
    /// Their rows.
    pub rows: Vec<Row>,
    /// The rows of every fixed policy run, the study's and the sweep's: what the fronts are drawn
    /// from (empty without a sweep).
    pub fixed: Vec<Row>,
    /// The front over final memory of every fixed policy run (empty without a sweep).
    pub front_final: Vec<FrontPoint>,
    /// The front over mean memory.
    pub front_mean: Vec<FrontPoint>,
}

/// What [`run_study`] runs: `policies`, then, with `front`, the [`sweep`]'s policies they do not
/// include.
pub fn runs(policies: &[PolicyKind], front: bool) -> Vec<PolicyKind> {
    let mut all = policies.to_vec();
    if front {
        all.extend(sweep().into_iter().filter(|k| !policies.contains(k)));
    }
    all
}

/// Runs `policies` (the first the unlimited reference) on the prepared study and, with `front`,
/// also the [`sweep`] of fixed policies, all in parallel ([`runs`]); then the fronts and every
/// row's distance below them.
pub fn run_study(
    p: &Prepared,
    policies: &[PolicyKind],
    front: bool,
    progress: &(dyn Fn(f64) + Sync),
) -> Result<Outcome, ParspliceError> {
    let all = runs(policies, front);
    let mut reports = run_all(p.workload, p.store, p.segments(), &all, progress)?;
    let mut rows = rows(&reports, p.workload.hours * 3600.0);
    let swept = rows.split_off(policies.len());
    reports.truncate(policies.len());
    if !front {
        return Ok(Outcome {
            reports,
            rows,
            fixed: Vec::new(),
            front_final: Vec::new(),
            front_mean: Vec::new(),
        });
    }
    let fixed: Vec<Row> = all
        .iter()
        .zip(rows.iter().chain(&swept))
        .filter(|(k, _)| k.is_fixed())
        .map(|(_, r)| r.clone())
        .collect();
    let front_final = self::front(&fixed, Measure::Final);
    let front_mean = self::front(&fixed, Measure::Mean);
    for r in &mut rows {
        r.below_front_final = below_front(&front_final, r, Measure::Final);
        r.below_front_mean = below_front(&front_mean, r, Measure::Mean);
    }
    Ok(Outcome {
        reports,
        rows,
        fixed,
        front_final,
        front_mean,
    })
}

/// `part / whole`, 0 when the whole is nothing.
fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// A warning when the comparison in `rows` carries no information: on a replay, every policy
/// (the smallest LRU included) finished at the same time as the unlimited cache, so the trace
/// never made a policy's choice cost anything. `None` when some policy differs, and on the model.
pub fn undecided(rows: &[Row]) -> Option<String> {
    let base = rows.first()?.finished_s?;
    rows.iter().all(|r| r.finished_s == Some(base)).then(|| {
        format!(
            "every policy replayed the trace in the same {base:.0} s as the unlimited cache: \
                 this trace gives a cache policy nothing to decide, so the 100% above says \
                 nothing about the policies"
        )
    })
}

/// Efficiency charts start here, seconds: before it the runs have spliced little trajectory,
/// and a ratio of small numbers says little about a policy.
pub const EFFICIENCY_CHART_FROM: f64 = 600.0;

/// `(t, efficiency of run against base)` at each of `run`'s ticks from
/// [`EFFICIENCY_CHART_FROM`] on; on a replay only while `base` is still replaying, as a replay's
/// efficiency over time means something only until the unlimited cache has finished.
pub fn efficiency_over_time(run: &RunReport, base: &RunReport) -> Vec<(f64, f64)> {
    let until = base.finished_at.unwrap_or(f64::INFINITY);
    run.ticks
        .iter()
        .filter(|k| k.t >= EFFICIENCY_CHART_FROM && k.t <= until)
        .map(|k| (k.t, efficiency(run, base, k.t)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(policy: &str, efficiency: f64, memory_fraction: f64, mean_fraction: f64) -> Row {
        Row {
            policy: policy.into(),
            efficiency,
            trajectory: None,
            keys_held: 0,
            final_memory_bytes: 0,
            peak_memory_bytes: 0,
            mean_memory_bytes: 0,
            memory_fraction,
            peak_fraction: 0.0,
            mean_fraction,
            peak_store_reads_per_s: 0.0,
            finished_s: None,
            auto_armed_s: None,
            auto_regimes: None,
            auto_window_s: None,
            auto_target_keys: None,
            below_front_final: None,
            below_front_mean: None,
        }
    }

    #[test]
    fn the_front_keeps_what_nothing_beats_and_measures_the_gap_below_it() {
        let rows = [
            row("unlimited", 1.0, 1.0, 1.0),
            row("small", 0.7, 0.001, 0.001),
            row("dominated", 0.6, 0.01, 0.002),
            row("mid", 0.95, 0.05, 0.3),
            row("big", 1.0, 0.5, 0.5),
        ];
        let f = front(&rows, Measure::Final);
        let names: Vec<&str> = f.iter().map(|p| p.policy.as_str()).collect();
        assert_eq!(
            names,
            ["small", "mid", "big"],
            "unlimited ties big with more memory"
        );
        let on_mean: Vec<String> = front(&rows, Measure::Mean)
            .into_iter()
            .map(|p| p.policy)
            .collect();
        assert_eq!(on_mean, ["small", "mid", "big"]);
        assert_eq!(
            front(&rows, Measure::Mean)[1].memory,
            0.3,
            "drawn over mean memory"
        );
        let gap = |e, m| below_front(&f, &row("auto", e, m, m), Measure::Final);
        assert_eq!(
            gap(0.9, 0.06),
            Some(0.95 - 0.9),
            "mid does better with less"
        );
        assert_eq!(gap(0.99, 0.06), Some(0.95 - 0.99), "above the front");
        assert_eq!(gap(0.5, 0.0001), None, "more frugal than anything fixed");
    }

    /// The rows carry the absolute figures beside the ratios: the trajectory the efficiency is
    /// the ratio of, and the keys held, fewer under a limit than without one.
    #[test]
    fn rows_give_the_trajectory_and_keys_held_beside_the_ratios() {
        let w = WorkloadParams {
            nodes: 1,
            hours: 0.25,
            ..WorkloadParams::default()
        };
        let policies = [
            PolicyKind::Unlimited,
            PolicyKind::Lru(10),
            PolicyKind::Lru(100),
        ];
        let reports = run_all(
            w,
            StoreParams::default(),
            Segments::Model,
            &policies,
            &|_| {},
        )
        .expect("run");
        let end = w.hours * 3600.0;
        let rows = rows(&reports, end);
        let base = rows[0].trajectory.expect("the model has a trajectory");
        assert!(base > 0.0);
        assert_eq!(base, reports[0].trajectory_at(end));
        for (r, rep) in rows.iter().zip(&reports) {
            let t = r.trajectory.expect("trajectory");
            assert!(t > 0.0, "{r:?}");
            assert!((t - r.efficiency * base).abs() <= 1e-9 * base, "{r:?}");
            assert_eq!(r.keys_held, rep.final_keys);
        }
        assert!(
            rows[1].keys_held <= 10 && rows[2].keys_held <= 100,
            "{rows:?}"
        );
        assert!(rows[0].keys_held > rows[2].keys_held, "{rows:?}");
    }

    #[test]
    fn efficiency_over_time_starts_at_ten_minutes_and_is_the_efficiency_then() {
        let w = WorkloadParams {
            nodes: 1,
            hours: 0.25,
            ..WorkloadParams::default()
        };
        let policies = [PolicyKind::Unlimited, PolicyKind::Lru(10)];
        let reports = run_all(
            w,
            StoreParams::default(),
            Segments::Model,
            &policies,
            &|_| {},
        )
        .expect("run");
        let (base, lru) = (&reports[0], &reports[1]);
        let e = efficiency_over_time(lru, base);
        let ticks: Vec<f64> = lru
            .ticks
            .iter()
            .map(|k| k.t)
            .filter(|&t| t >= EFFICIENCY_CHART_FROM)
            .collect();
        assert!(ticks.len() > 10, "{ticks:?}");
        assert_eq!(e.iter().map(|p| p.0).collect::<Vec<_>>(), ticks);
        assert!(e.iter().all(|&(t, x)| x == efficiency(lru, base, t)));
        assert!(efficiency_over_time(base, base).iter().all(|p| p.1 == 1.0));
    }

    /// One new state a second for 1,200 s, each read with the state of half its age: a cache
    /// of one key misses every older read, so LRU 1 finishes after the unlimited cache.
    #[test]
    fn a_replays_efficiency_over_time_ends_when_the_unlimited_cache_finished() {
        let mut ops: Vec<crate::replay::Op> = vec![(0, false, 100), (0, true, 100)];
        for s in 1..1200 {
            ops.extend([
                (s, false, 100 + s),
                (s, true, 100 + s),
                (s, true, 100 + s / 2),
            ]);
        }
        let w = WorkloadParams {
            workers: 2,
            nodes: 1,
            ..WorkloadParams::default()
        };
        let replay = Replay::from_ops(&ops, &w, None, DECISION_INTERVAL).expect("replay");
        let w = WorkloadParams {
            hours: replay.coverage.span_seconds / 3600.0,
            ..w
        };
        let policies = [PolicyKind::Unlimited, PolicyKind::Lru(1)];
        let reports = run_all(
            w,
            StoreParams::default(),
            Segments::Replay(&replay),
            &policies,
            &|_| {},
        )
        .expect("run");
        let (base, lru) = (&reports[0], &reports[1]);
        let until = base.finished_at.expect("a replay ends");
        assert!(
            lru.ticks.iter().any(|k| k.t > until),
            "LRU 1 is still replaying after {until} s"
        );
        let e = efficiency_over_time(lru, base);
        assert!(!e.is_empty());
        assert!(
            e.iter()
                .all(|&(t, _)| (EFFICIENCY_CHART_FROM..=until).contains(&t)),
            "{e:?}"
        );
    }
}
