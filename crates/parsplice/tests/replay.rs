//! Replaying a recorded ParSplice trace: what a replay covers, how it pairs reads and writes,
//! where its parameters come from, the inputs it refuses, and the shared d1M and d100K
//! WorkManager traces replayed in full. In CI the shared traces must be there; elsewhere those
//! tests say they skipped.

use std::path::{Path, PathBuf};

use pliant_parsplice::replay::Op;
use pliant_parsplice::study::{self, Prepared, Request};
use pliant_parsplice::{
    ParspliceError, PolicyKind, Replay, RunConfig, StoreParams, WorkloadParams,
};
use pliant_trace::{ReadOptions, StatsBuilder};

const INTERVAL: f64 = study::DECISION_INTERVAL;

fn workload(workers: u32) -> WorkloadParams {
    WorkloadParams {
        workers,
        nodes: 1,
        ..WorkloadParams::default()
    }
}

const CONFIG: &str = "<ParSplice>
<SystemModifier>
<Delay> 1000000 </Delay>
</SystemModifier>
<TaskParameters>
<TaskParameter>
<Type> PARSPLICE_TASK_MIN </Type>
<Temperature> 1 </Temperature>
</TaskParameter>
<TaskParameter>
<Type> PARSPLICE_TASK_SEGMENT </Type>
<Temperature> 700 </Temperature>
</TaskParameter>
</TaskParameters>
</ParSplice>
";

#[test]
fn run_config_takes_the_growth_delay_and_the_segment_tasks_temperature() {
    let d = tempfile::tempdir().expect("tempdir");
    std::fs::write(d.path().join("ps-config.xml"), CONFIG).expect("write");
    let c = RunConfig::beside(&d.path().join("rank4.csv.gz"))
        .expect("read")
        .expect("beside the trace");
    assert_eq!(c.growth_delay, 1_000_000.0);
    assert_eq!(c.temperature_k, 700.0, "the segment task's, not the first");
    let none = tempfile::tempdir().expect("tempdir");
    assert!(
        RunConfig::beside(&none.path().join("rank4.csv.gz"))
            .expect("no file is not an error")
            .is_none()
    );
}

#[test]
fn run_config_errors_name_the_file_and_what_is_wrong() {
    let d = tempfile::tempdir().expect("tempdir");
    let p = d.path().join("ps-config.xml");
    std::fs::write(&p, CONFIG.replace("1000000", "fast")).expect("write");
    let msg = RunConfig::read(&p).expect_err("not a number").to_string();
    assert!(
        msg.contains("ps-config.xml") && msg.contains("line 3") && msg.contains("\"fast\""),
        "{msg}"
    );
    std::fs::write(&p, "<ParSplice><SystemModifier>").expect("write");
    let e = RunConfig::read(&p).expect_err("not XML");
    assert!(
        matches!(e, ParspliceError::Input { ref path, .. } if path == &p),
        "{e}"
    );
    std::fs::write(&p, CONFIG.replace("PARSPLICE_TASK_SEGMENT", "OTHER")).expect("write");
    let msg = RunConfig::read(&p)
        .expect_err("no segment task")
        .to_string();
    assert!(msg.contains("PARSPLICE_TASK_SEGMENT"), "{msg}");
}

/// A run's settings: flags override ps-config.xml, the temperature stays relative to its own, and
/// the header says where each came from.
#[test]
fn flags_override_the_run_config_and_say_so() {
    let d = tempfile::tempdir().expect("tempdir");
    std::fs::write(d.path().join("ps-config.xml"), CONFIG).expect("write");
    let trace = d.path().join("rank4.csv");
    std::fs::write(
        &trace,
        "100,DBMemoryGet,0,1\n100,DBMemoryPut,0,2\n130,DBMemoryGet,0,2\n130,DBMemoryPut,0,3\n",
    )
    .expect("write");
    let req = Request {
        trace: Some(trace),
        hours: None,
        growth: None,
        nodes: None,
        workers: Some(2),
        temperature: 1.0,
        seed: 1,
        miss_penalty: None,
    };
    let from_file = study::prepare(&req).expect("prepare");
    assert_eq!(from_file.workload.growth_delay, 1_000_000.0);
    assert!(from_file.growth_from.ends_with("ps-config.xml"));
    assert!(from_file.temperature_from.starts_with("700 K × 1"));
    assert_eq!(from_file.workload.nodes, 1, "a trace is one WorkManager's");
    assert_eq!(from_file.workload.hours, 30.0 / 3600.0, "the trace's span");
    let flags = study::prepare(&Request {
        growth: Some(100_000.0),
        temperature: 1.2,
        ..req.clone()
    })
    .expect("prepare");
    assert_eq!(flags.workload.growth_delay, 100_000.0);
    assert_eq!(flags.growth_from, "--growth");
    assert_eq!(flags.workload.temperature, 1.2);
    assert!(flags.temperature_from.starts_with("700 K × 1.2"));
    let e = study::prepare(&Request {
        miss_penalty: Some(-1.0),
        ..req
    })
    .expect_err("negative penalty");
    assert!(
        matches!(e, ParspliceError::Config(ref m) if m.contains("--miss-penalty")),
        "{e}"
    );
}

#[test]
fn each_write_is_the_state_found_by_the_segment_that_ends_next() {
    // Two workers. 9 is written before any read: the cache holds it from the start. The write of
    // 10 follows two reads, so it ends the segment that began two reads (one round) earlier, the
    // read of 1; 11 comes in the same round, so the other open segment, the read of 2, found it.
    let ops: Vec<Op> = vec![
        (0, false, 9),
        (0, true, 1),
        (1, true, 2),
        (2, false, 10),
        (3, false, 11),
        (20, true, 10),
        (40, true, 1),
    ];
    let r = Replay::from_ops(&ops, &workload(2), None, INTERVAL).expect("replay");
    let pairs: Vec<(u64, Option<u64>)> = r
        .segments
        .iter()
        .map(|s| (s.start, s.new_state.map(|n| n.0)))
        .collect();
    assert_eq!(pairs, [(1, Some(10)), (2, Some(11)), (10, None), (1, None)]);
    assert_eq!(r.preload.iter().map(|p| p.0).collect::<Vec<_>>(), [9]);
    assert_eq!(r.start, [0.0, 1.0, 20.0, 40.0]);
    // Read i computes until read i + W (two workers) began, less a hit's cost; the last reads
    // run to the end of the trace.
    let hit = pliant_parsplice::model::CACHE_HIT_SECONDS;
    let expect = [20.0 - hit, 39.0 - hit, 20.0 - hit, 0.0];
    for (c, e) in r.compute.iter().zip(expect) {
        assert!((c - e).abs() < 1e-9, "{:?} vs {expect:?}", r.compute);
    }
    let c = &r.coverage;
    assert_eq!((c.reads, c.writes, c.unpaired_writes), (4, 3, 0));
    assert_eq!((c.keys, c.rereads), (5, 2), "10 and 1 are read again");
    assert_eq!((c.span_seconds, c.trace_seconds), (40.0, 40.0));
}

/// Regression: a state written and read in the same second of the trace (a worker going on from
/// the state it found) was read before the segment that found it had ended, so even the
/// unlimited cache missed (11,003 store reads on the d100K trace) and every policy waited on it.
#[test]
fn the_unlimited_cache_replays_a_trace_without_reading_the_store() {
    let mut ops: Vec<Op> = vec![(0, false, 100), (0, true, 100)];
    for s in 1..120 {
        ops.extend([
            (s, false, 100 + s),
            (s, true, 100 + s),
            (s, true, 100 + s / 2),
        ]);
    }
    let w = workload(2);
    let replay = Replay::from_ops(&ops, &w, None, INTERVAL).expect("replay");
    assert_eq!(replay.coverage.unpaired_writes, 0);
    let p = Prepared {
        store: StoreParams::default(),
        workload: WorkloadParams {
            hours: replay.coverage.span_seconds / 3600.0,
            ..w
        },
        growth_from: String::new(),
        temperature_from: String::new(),
        replay: Some(replay),
    };
    let reports = study::run_all(
        p.workload,
        p.store,
        p.segments(),
        &[PolicyKind::Unlimited, PolicyKind::Lru(1)],
        &|_| {},
    )
    .expect("run");
    let [unlimited, lru1] = [&reports[0], &reports[1]];
    assert_eq!(unlimited.store_reads, 0);
    assert_eq!(unlimited.cache_misses, 0);
    let done = unlimited.finished_at.expect("replay");
    assert!(
        (119.0..121.0).contains(&done),
        "on the trace's clock: {done}"
    );
    // One key of room: the older state read each second is gone, and that costs time.
    assert!(lru1.store_reads > 100, "{}", lru1.store_reads);
    assert!(lru1.finished_at.expect("replay") > done);
}

#[test]
fn hours_cut_the_span_on_the_traces_own_clock() {
    let ops: Vec<Op> = (0..100).map(|i| (i * 10, true, i % 7)).collect();
    let r = Replay::from_ops(&ops, &workload(2), Some(300.0), INTERVAL).expect("replay");
    assert_eq!(r.coverage.reads, 30, "reads at 0, 10, …, 290 s");
    assert_eq!(r.coverage.span_seconds, 290.0);
    assert_eq!(r.coverage.trace_seconds, 990.0);
    assert!(
        r.coverage.warnings().is_empty(),
        "{:?}",
        r.coverage.warnings()
    );
    let long = Replay::from_ops(&ops, &workload(2), Some(2000.0), INTERVAL).expect("replay");
    let w = long.coverage.warnings();
    assert!(
        w.iter().any(|w| w.contains("trace ends after 0.28 h")),
        "{w:?}"
    );
}

#[test]
fn a_span_without_reads_is_refused() {
    let ops: Vec<Op> = (0..50).map(|i| (i * 10, false, i)).collect();
    let e = Replay::from_ops(&ops, &workload(2), None, INTERVAL).expect_err("no reads");
    assert!(
        matches!(e, ParspliceError::Degenerate(ref m) if m.contains("no reads")),
        "{e}"
    );
    let e = Replay::from_ops(&[], &workload(2), None, INTERVAL).expect_err("empty");
    assert!(matches!(e, ParspliceError::Degenerate(_)), "{e}");
}

#[test]
fn a_span_shorter_than_one_decision_is_refused_with_the_file_named() {
    let d = tempfile::tempdir().expect("tempdir");
    let p = d.path().join("rank4.csv");
    std::fs::write(&p, "100,DBMemoryGet,0,1\n105,DBMemoryGet,0,1\n").expect("write");
    let e = Replay::from_file(&p, &workload(2), None, INTERVAL).expect_err("5 s");
    let msg = e.to_string();
    assert!(
        msg.contains("rank4.csv") && msg.contains("lasts 5 s, shorter than one policy decision"),
        "{msg}"
    );
}

#[test]
fn more_writes_than_reads_and_few_rereads_are_flagged() {
    // A database's view: every read is of a new key, and writes outnumber reads.
    let mut ops: Vec<Op> = (0..20).map(|i| (i * 10, true, 1000 + i)).collect();
    ops.extend((0..30).map(|i| (200 + i, false, i)));
    let r = Replay::from_ops(&ops, &workload(2), None, INTERVAL).expect("replay");
    // Two workers: only the last two rounds' four segments can have found them.
    assert_eq!(r.coverage.unpaired_writes, 26);
    let w = r.coverage.warnings();
    assert!(
        w.iter()
            .any(|w| w.contains("26 writes could not be paired")),
        "{w:?}"
    );
    assert!(w.iter().any(|w| w.contains("only 0 of 20 reads")), "{w:?}");
}

#[test]
fn a_trace_that_no_policy_can_tell_apart_says_so() {
    // Every read is of a key never seen: no cache, however large, serves any of them, so every
    // policy replays in the unlimited cache's time.
    let d = tempfile::tempdir().expect("tempdir");
    let trace = d.path().join("rank4.csv");
    let text: String = (0..60)
        .map(|i| format!("{},DBMemoryGet,0,{}\n", 1000 + i * 5, 100 + i))
        .collect();
    std::fs::write(&trace, text).expect("write");
    let p = prepare(&trace);
    let policies = [
        PolicyKind::Unlimited,
        PolicyKind::Lru(10),
        PolicyKind::auto(),
    ];
    let rows = run(&p, &policies);
    assert!(rows.iter().all(|r| r.efficiency == 1.0), "{rows:?}");
    let w = study::undecided(&rows).expect("warned");
    assert!(w.contains("nothing to decide"), "{w}");
}

fn prepare(trace: &Path) -> Prepared {
    study::prepare(&Request {
        trace: Some(trace.to_path_buf()),
        hours: None,
        growth: None,
        nodes: None,
        workers: None,
        temperature: 1.0,
        seed: 1,
        miss_penalty: None,
    })
    .expect("prepare")
}

fn run(p: &Prepared, policies: &[PolicyKind]) -> Vec<study::Row> {
    let reports =
        study::run_all(p.workload, p.store, p.segments(), policies, &|_| {}).expect("run");
    study::rows(&reports, p.workload.hours * 3600.0)
}

/// `../shared/traces/parsplice/<run>/<file>`: required in CI, else `None` with a note.
fn shared(run: &str, file: &str) -> Option<PathBuf> {
    pliant_testdata::shared(&format!("traces/parsplice/{run}/{file}"))
}

/// The whole WorkManager trace replays: its reads, writes and keys are `pliant trace stats`'s;
/// the unlimited cache ends holding every key written; LRU with 10 keys loses efficiency while
/// `auto` keeps at least 96% of it (issue 8).
fn replays_in_full(run_name: &str) {
    let Some(trace) = shared(run_name, "rank4.csv.gz") else {
        return;
    };
    let mut stats = StatsBuilder::new();
    for r in pliant_trace::reader(&trace, &ReadOptions::default()).expect("open") {
        stats.add(&r.expect("record"));
    }
    let stats = stats.finish(0);
    let p = prepare(&trace);
    let c = &p.replay.as_ref().expect("a replay").coverage;
    assert_eq!(c.reads, stats.reads);
    assert_eq!(c.writes + c.unpaired_writes, stats.writes);
    assert_eq!(c.unpaired_writes, 0, "a WorkManager reads before it writes");
    assert_eq!(c.keys, stats.distinct_keys);
    assert_eq!(
        c.span_seconds,
        (stats.time_span.1 - stats.time_span.0) as f64
    );
    assert!(c.warnings().is_empty(), "{:?}", c.warnings());
    assert_eq!(
        p.workload.growth_delay,
        if run_name == "d1M" { 1e6 } else { 1e5 }
    );

    let policies = [
        PolicyKind::Unlimited,
        PolicyKind::Lru(10),
        PolicyKind::auto(),
    ];
    let reports =
        study::run_all(p.workload, p.store, p.segments(), &policies, &|_| {}).expect("run");
    let rows = study::rows(&reports, p.workload.hours * 3600.0);
    // Every key this trace wrote is one of its distinct keys; the WorkManager traces read
    // nothing they did not write first, so the counts agree.
    assert_eq!(
        reports[0].final_keys, stats.distinct_keys,
        "unlimited keeps every key"
    );
    assert_eq!(reports[0].segments, stats.reads, "every read replayed");
    // Every state the trace reads it wrote first, so the unlimited cache never reads the store.
    assert_eq!(reports[0].store_reads, 0, "unlimited misses nothing");
    let [unlimited, lru10, auto] = [&rows[0], &rows[1], &rows[2]];
    let finished = unlimited.finished_s.expect("a replay finishes");
    // At the trace's own pace: the last segments compute to the trace's end, and the last of them
    // was found at most a few minutes before it.
    assert!(
        finished >= c.span_seconds && finished < c.span_seconds + 300.0,
        "the unlimited cache replays at the trace's own pace: {finished} s for {} s",
        c.span_seconds
    );
    assert!(lru10.efficiency < 0.95, "LRU 10 keys: {}", lru10.efficiency);
    // Its objective is 96%; the trims' store reads hold it above (99.7% and 99.9%).
    assert!(auto.efficiency >= 0.95, "auto: {}", auto.efficiency);
    // On average over the run. Since its trims may not make the store serve rereads (the
    // stall risk, `pliant_tier::auto::CAUSED_FETCH_SHARE`) it keeps about a quarter to a third
    // (d100K 26%, d1M 31%), where the allowance alone kept 9% and 18%.
    assert!(
        auto.mean_memory_bytes < unlimited.mean_memory_bytes / 2,
        "auto saves memory: {} of {}",
        auto.mean_memory_bytes,
        unlimited.mean_memory_bytes
    );
    assert!(study::undecided(&rows).is_none());
}

#[test]
fn d1m_workmanager_trace_replays_in_full() {
    replays_in_full("d1M");
}

#[test]
fn d100k_workmanager_trace_replays_in_full() {
    replays_in_full("d100K");
}

/// The database ranks see only what the caches below them missed: each replay says so, and no
/// table of 100% goes out unqualified.
#[test]
fn database_ranks_are_flagged_as_not_a_caches_trace() {
    for (rank, role) in [
        ("rank2.csv.gz", "PersistentDB"),
        ("rank3.csv.gz", "InMemoryDB"),
    ] {
        let Some(trace) = shared("d1M", rank) else {
            return;
        };
        let p = prepare(&trace);
        let w = p.warnings();
        assert!(
            w.iter()
                .any(|w| w.contains(&format!("is the {role}'s trace"))),
            "{rank}: {w:?}"
        );
        let rows = run(&p, &[PolicyKind::Unlimited, PolicyKind::Lru(10)]);
        assert!(
            study::undecided(&rows).is_some() || rows[1].efficiency < 1.0,
            "{rank}: {rows:?}"
        );
    }
}
