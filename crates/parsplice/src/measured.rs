//! The measured 8-node policy runs (`../shared/results/parsplice-8node-policies`) and the
//! model's predictions for them: what `pliant parsplice compare` shows.
//!
//! Each run left a `times.txt`: `wallclock_seconds trajectory other` every 100 s up to
//! 15,000 s. A policy's measured efficiency at t is its trajectory at t over the unlimited run's,
//! read with [`interpolate`] like the model's.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::hierarchy::{RunReport, Segments};
use crate::model::{StoreParams, WorkloadParams};
use crate::policy::PolicyKind;
use crate::{ParspliceError, efficiency, interpolate, study};

/// `(seconds, trajectory)` samples of one run, in time order.
pub type Series = Vec<(f64, f64)>;

/// The measured runs: each policy and the prefix of its `times.txt` file. The unlimited cache,
/// the baseline, comes first.
pub fn runs() -> [(PolicyKind, &'static str); 7] {
    let two_phase = |target| PolicyKind::TwoPhase {
        absorb: 100_000,
        target,
    };
    [
        (PolicyKind::Unlimited, "scale-cachelimit-8n-unlimited"),
        (
            PolicyKind::Lru(100_000),
            "scale-cachelimit-8n-100000-72005-LRU",
        ),
        (PolicyKind::Lru(10), "scale-cachelimit-8n-10-"),
        (two_phase(10), "scale-cachedecrease-8n-10-"),
        (two_phase(100), "scale-cachedecrease-8n-100-"),
        (two_phase(1000), "scale-cachedecrease-8n-1000-"),
        (two_phase(10000), "scale-cachedecrease-8n-10000-"),
    ]
}

/// Reads the trajectory of the run whose file in `dir` starts with `prefix`. Exactly one file
/// may match: which of several a directory listing gives first is not defined.
pub fn load(dir: &Path, prefix: &str) -> Result<Series, ParspliceError> {
    let input = |path: &Path, message: String| ParspliceError::Input {
        path: path.to_path_buf(),
        message,
    };
    let entries = std::fs::read_dir(dir).map_err(|source| ParspliceError::Read {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| e.path())
        .collect();
    found.sort();
    let path = match &found[..] {
        [one] => one,
        [] => return Err(input(dir, format!("no {prefix}* here"))),
        _ => {
            return Err(input(
                dir,
                format!("{} files start with {prefix}; expected one", found.len()),
            ));
        }
    };
    let text = std::fs::read_to_string(path).map_err(|source| ParspliceError::Read {
        path: path.clone(),
        source,
    })?;
    parse(&text).map_err(|line| input(path, format!("line {line}: expected `seconds trajectory`")))
}

/// The `(seconds, trajectory)` pairs of a `times.txt` text, or the 1-based number of the first
/// line that has none. Blank lines are skipped; fields after the second are ignored.
fn parse(text: &str) -> Result<Series, usize> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let mut f = l.split_whitespace();
            let t = f.next().and_then(|x| x.parse().ok());
            let v = f.next().and_then(|x| x.parse().ok());
            t.zip(v).ok_or(i + 1)
        })
        .collect()
}

/// Measured efficiency of `run` against `base` (the unlimited run) at `t`: trajectory ratio.
pub fn measured_efficiency(run: &Series, base: &Series, t: f64) -> f64 {
    interpolate(run.iter().copied(), t) / interpolate(base.iter().copied(), t)
}

/// One policy: measured and modelled efficiency at 2.5 h and 4.2 h.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Row {
    /// Policy label.
    pub policy: String,
    /// Measured efficiency at 9,000 s.
    pub measured_2_5h: f64,
    /// The model's at 9,000 s.
    pub model_2_5h: f64,
    /// Measured efficiency at 15,000 s.
    pub measured_4_2h: f64,
    /// The model's at 15,000 s.
    pub model_4_2h: f64,
    /// Measured trajectory at 9,000 s, ps (`times.txt`).
    pub measured_trajectory_2_5h: f64,
    /// The model's trajectory at 9,000 s, ps.
    pub model_trajectory_2_5h: f64,
    /// Measured trajectory at 15,000 s, ps.
    pub measured_trajectory_4_2h: f64,
    /// The model's trajectory at 15,000 s, ps.
    pub model_trajectory_4_2h: f64,
    /// Keys the model's caches held at 9,000 s, all WorkManagers together (the last tick at or
    /// before it). The measured WorkManager's are in its counters (`DBMemoryMapSize`,
    /// `tools/fit/parsplice_counters.py`).
    pub model_keys_held_2_5h: u64,
    /// The same at 15,000 s.
    pub model_keys_held_4_2h: u64,
    /// Bytes the model's caches held at 9,000 s (the measured WorkManager's: `DBMemorySize`).
    pub model_bytes_held_2_5h: u64,
    /// The same at 15,000 s.
    pub model_bytes_held_4_2h: u64,
    /// When the measured trajectory stopped for good ([`stop`]), seconds.
    pub measured_stop_s: Option<f64>,
    /// When the model's did: a stall unhealed at the end that lasted [`STOP_MIN_SECONDS`].
    pub model_stop_s: Option<f64>,
    /// The model's stalls, healed or not.
    pub model_stalls: usize,
    /// The model's store reads (cache misses after coalescing).
    pub model_store_reads: u64,
}

/// A run stopped when its trajectory did not grow from some time to the end and that lasted at
/// least this long (`tools/fit/parsplice_counters.py` reads the measured stops the same way).
pub const STOP_MIN_SECONDS: f64 = 1800.0;

/// When the measured trajectory `m` stopped for good: its last growing sample, if the flat tail
/// after it lasts [`STOP_MIN_SECONDS`].
pub fn stop(m: &Series) -> Option<f64> {
    let &(end, _) = m.last()?;
    let grew = (1..m.len())
        .rev()
        .find(|&i| m[i].1 != m[i - 1].1)
        .unwrap_or(0);
    let at = m[grew].0;
    (end - at >= STOP_MIN_SECONDS).then_some(at)
}

impl Row {
    /// The row of `policy`: its measured run `m` and model run `rep` against the unlimited
    /// cache's, `base` measured and `base_rep` modelled, at [`AT`].
    pub fn new(
        policy: String,
        (m, base): (&Series, &Series),
        (rep, base_rep): (&RunReport, &RunReport),
    ) -> Self {
        let held = |t: f64| {
            rep.ticks
                .iter()
                .take_while(|k| k.t <= t)
                .last()
                .map_or((0, 0), |k| (k.keys, k.bytes))
        };
        let traj = |s: &Series, t: f64| crate::interpolate(s.iter().copied(), t);
        Self {
            policy,
            measured_2_5h: measured_efficiency(m, base, AT[0]),
            model_2_5h: efficiency(rep, base_rep, AT[0]),
            measured_4_2h: measured_efficiency(m, base, AT[1]),
            model_4_2h: efficiency(rep, base_rep, AT[1]),
            measured_trajectory_2_5h: traj(m, AT[0]),
            model_trajectory_2_5h: rep.trajectory_at(AT[0]),
            measured_trajectory_4_2h: traj(m, AT[1]),
            model_trajectory_4_2h: rep.trajectory_at(AT[1]),
            model_keys_held_2_5h: held(AT[0]).0,
            model_keys_held_4_2h: held(AT[1]).0,
            model_bytes_held_2_5h: held(AT[0]).1,
            model_bytes_held_4_2h: held(AT[1]).1,
            measured_stop_s: stop(m),
            model_stop_s: rep.stop(AT[1], STOP_MIN_SECONDS),
            model_stalls: rep.stalls.len(),
            model_store_reads: rep.store_reads,
        }
    }
}

/// Seconds the comparison reads efficiency at: 2.5 h, and the measured runs' end (~4.2 h).
pub const AT: [f64; 2] = [9_000.0, 15_000.0];

/// Runs the model (the measured runs' layout, growth delay 100,000 and 15,000 s, `seed`) for
/// every policy of [`runs`] and compares its efficiency with the measured runs' in `dir`.
/// `progress` gets the fraction of the model runs done.
pub fn compare(
    dir: &Path,
    knobs: &[(String, f64)],
    seed: u64,
    progress: &(dyn Fn(f64) + Sync),
) -> Result<Vec<Row>, ParspliceError> {
    let runs = runs();
    // Every file first: a missing one should not cost a model run.
    let measured: Vec<Series> = runs
        .iter()
        .map(|(_, prefix)| load(dir, prefix))
        .collect::<Result<_, _>>()?;
    let mut workload = WorkloadParams {
        hours: 15_000.0 / 3600.0,
        seed,
        ..WorkloadParams::default()
    };
    let mut store = StoreParams::default();
    crate::model::set_knobs(&mut workload, &mut store, knobs).map_err(ParspliceError::Config)?;
    let policies: Vec<PolicyKind> = runs.iter().map(|(p, _)| p.clone()).collect();
    let reports = study::run_all(workload, store, Segments::Model, &policies, progress)?;
    Ok(policies
        .iter()
        .zip(&measured)
        .zip(&reports)
        .map(|((p, m), rep)| Row::new(p.label(), (m, &measured[0]), (rep, &reports[0])))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_txt_parses_and_bad_lines_are_numbered() {
        assert_eq!(
            parse("100 1814818 2425059\n\n200 2302211 3658486\n"),
            Ok(vec![(100.0, 1_814_818.0), (200.0, 2_302_211.0)])
        );
        assert_eq!(parse("100 5\n200\n"), Err(2));
        assert_eq!(parse("100 5\nx 6\n"), Err(2));
    }

    #[test]
    fn exactly_one_file_per_prefix() {
        let d = tempfile::tempdir().expect("tempdir");
        for (name, text) in [
            ("run-a-1.times.txt", "100 10\n200 30\n"),
            ("run-ab-1.times.txt", "100 1\n"),
            ("run-ab-2.times.txt", "100 2\n"),
            ("run-bad.times.txt", "100 1\n200 two\n"),
        ] {
            std::fs::write(d.path().join(name), text).expect("write");
        }
        let load = |prefix: &str| load(d.path(), prefix);
        assert_eq!(
            load("run-a-").ok(),
            Some(vec![(100.0, 10.0), (200.0, 30.0)])
        );
        let err = |prefix: &str| {
            load(prefix)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(
            err("run-ab-").contains("2 files start with run-ab-"),
            "{}",
            err("run-ab-")
        );
        assert!(err("run-c").contains("no run-c*"), "{}", err("run-c"));
        assert!(
            err("run-bad").contains("run-bad.times.txt: line 2"),
            "{}",
            err("run-bad")
        );
        assert!(matches!(
            super::load(&d.path().join("nowhere"), "run"),
            Err(ParspliceError::Read { .. })
        ));
    }

    #[test]
    fn a_run_stops_at_its_last_growth_when_the_flat_tail_is_long_enough() {
        let run = |v: &[f64]| -> Series {
            v.iter()
                .enumerate()
                .map(|(i, &x)| (100.0 * i as f64, x))
                .collect()
        };
        let mut flat = vec![1.0, 2.0, 3.0];
        flat.extend([3.0; 18]);
        assert_eq!(
            stop(&run(&flat)),
            Some(200.0),
            "grew last from 100 to 200 s"
        );
        let mut short = vec![1.0, 2.0, 3.0];
        short.extend([3.0; 10]);
        assert_eq!(stop(&run(&short)), None, "flat for 1,000 s only");
        assert_eq!(stop(&run(&[1.0, 2.0, 3.0])), None);
    }

    #[test]
    fn measured_efficiency_reads_both_runs_at_the_same_time() {
        let base = vec![(100.0, 100.0), (200.0, 300.0)];
        let run = vec![(100.0, 50.0), (200.0, 240.0)];
        assert_eq!(measured_efficiency(&run, &base, 100.0), 0.5);
        assert_eq!(measured_efficiency(&run, &base, 200.0), 0.8);
        assert_eq!(measured_efficiency(&run, &base, 150.0), 145.0 / 200.0);
        assert_eq!(measured_efficiency(&run, &base, 1e6), 0.8, "the end holds");
    }

    /// A row gives the absolute trajectories and the model's keys and bytes held beside the
    /// ratios: the model's at the last tick at or before 2.5 h and 4.2 h.
    #[test]
    fn a_row_has_the_trajectories_and_what_the_model_held() {
        let w = WorkloadParams {
            nodes: 1,
            hours: 2.6,
            ..WorkloadParams::default()
        };
        let policies = [PolicyKind::Unlimited, PolicyKind::Lru(10)];
        let reports = study::run_all(
            w,
            StoreParams::default(),
            Segments::Model,
            &policies,
            &|_| {},
        )
        .expect("run");
        let base: Series = vec![(9_000.0, 200.0), (15_000.0, 400.0)];
        let run: Series = vec![(9_000.0, 100.0), (15_000.0, 100.0)];
        let r = Row::new("lru-10".into(), (&run, &base), (&reports[1], &reports[0]));
        assert_eq!((r.measured_2_5h, r.measured_4_2h), (0.5, 0.25));
        assert_eq!(
            (r.measured_trajectory_2_5h, r.measured_trajectory_4_2h),
            (100.0, 100.0)
        );
        let t = reports[1].trajectory_at(9_000.0);
        assert!(t > 0.0);
        assert_eq!(r.model_trajectory_2_5h, t);
        assert_eq!(r.model_2_5h * reports[0].trajectory_at(9_000.0), t);
        let at = |x: f64| {
            let k = reports[1].ticks.iter().rfind(|k| k.t <= x).expect("tick");
            (k.keys, k.bytes)
        };
        assert_eq!(
            (r.model_keys_held_2_5h, r.model_bytes_held_2_5h),
            at(9_000.0)
        );
        assert!(r.model_keys_held_2_5h <= 10 && r.model_bytes_held_2_5h > 0);
        // The model ran 2.6 h: at 4.2 h it holds what it held at its end.
        assert_eq!(r.model_keys_held_4_2h, reports[1].final_keys);
        let u = Row::new(
            "unlimited".into(),
            (&base, &base),
            (&reports[0], &reports[0]),
        );
        assert!(u.model_keys_held_2_5h > 1_000, "{u:?}");
    }

    /// The measured runs beside the repository: every policy has exactly one file, and the
    /// efficiencies at 2.5 h are those `../shared/results/README.md` quotes from the files.
    #[test]
    fn the_shared_measured_runs() {
        let Some(dir) = pliant_testdata::shared("results/parsplice-8node-policies") else {
            return;
        };
        let runs = runs();
        assert_eq!(runs[0].0, PolicyKind::Unlimited, "the baseline comes first");
        let series: Vec<Series> = runs
            .iter()
            .map(|(_, prefix)| load(&dir, prefix).expect(prefix))
            .collect();
        assert!(
            series
                .iter()
                .all(|s| s.len() == 150 && s[149].0 == 15_000.0)
        );
        let at = |i: usize| measured_efficiency(&series[i], &series[0], AT[0]);
        assert_eq!(at(0), 1.0);
        assert_eq!(at(2), 3_909_214.0 / 5_182_228.0, "LRU-10");
        assert_eq!(at(3), 4_965_811.0 / 5_182_228.0, "decrease to 10");
    }
}
