//! The hierarchy's semantics, each on a hand-made sequence of segments, and the model's
//! guarantees: determinism, nothing lost, unlimited = 100%.

use pliant_parsplice::store::value_of;
use pliant_parsplice::{
    FjallStore, PolicyKind, RunReport, RunSpec, Segment, Segments, States, Store, StoreParams,
    WorkloadParams, efficiency, run,
};

fn seg(start: u64, new: Option<u64>) -> Segment {
    Segment {
        start,
        start_size: 100,
        new_state: new.map(|k| (k, 100)),
        atoms: 3.0,
    }
}

fn spec(policy: PolicyKind, workers: u32, nodes: u32, hours: f64) -> RunSpec {
    RunSpec {
        policy,
        workload: WorkloadParams {
            workers,
            nodes,
            hours,
            ..WorkloadParams::default()
        },
        store: StoreParams::default(),
        interval: 10.0,
    }
}

/// A run of the model on a scratch store.
fn model_run(spec: &RunSpec) -> RunReport {
    let store = FjallStore::temporary().expect("store");
    run(spec, Segments::Model, &store, None, &|_| {}).expect("run")
}

fn replay(spec: &RunSpec, segs: Vec<Segment>, store: &dyn Store) -> RunReport {
    run(spec, Segments::Recorded(&segs), store, None, &|_| {}).expect("run")
}

#[test]
fn reads_go_up_until_a_tier_has_the_key_and_the_tier_keeps_it() {
    let store = FjallStore::temporary().expect("store");
    store.put_state(7, 100).expect("seed");
    // One worker reads 7 three times: one store read, then two hits.
    let r = replay(
        &spec(PolicyKind::Unlimited, 1, 1, 0.01),
        vec![seg(7, None), seg(7, None), seg(7, None)],
        &store,
    );
    assert_eq!((r.cache_misses, r.cache_hits, r.store_reads), (1, 2, 1));
}

#[test]
fn concurrent_misses_for_one_key_are_coalesced() {
    let store = FjallStore::temporary().expect("store");
    store.put_state(7, 100).expect("seed");
    // Four workers of one WorkManager start at once on key 7: four misses, one store read.
    let r = replay(
        &spec(PolicyKind::Unlimited, 4, 1, 0.01),
        vec![seg(7, None); 4],
        &store,
    );
    assert_eq!((r.cache_misses, r.store_reads), (4, 1));
    // Two WorkManagers do not share a cache: one store read each.
    let r = replay(
        &spec(PolicyKind::Unlimited, 2, 2, 0.01),
        vec![seg(7, None); 4],
        &store,
    );
    assert_eq!(r.store_reads, 2);
}

#[test]
fn a_put_of_a_key_the_tier_holds_is_ignored_and_not_forwarded() {
    let store = FjallStore::temporary().expect("store");
    store.put_state(1, 100).expect("seed");
    // The first segment finds state 9; the second "finds" it again (a redundant put).
    let r = replay(
        &spec(PolicyKind::Unlimited, 1, 1, 0.01),
        vec![seg(1, Some(9)), seg(1, Some(9)), seg(9, None)],
        &store,
    );
    assert_eq!(r.redundant_puts, 1);
    assert_eq!(r.store_puts, 1, "forwarded upward once");
    assert_eq!(r.cache_misses, 1, "the worker's own put made state 9 a hit");
}

#[test]
fn same_seed_same_run() {
    let s = spec(
        PolicyKind::TwoPhase {
            absorb: 200,
            target: 20,
        },
        27,
        2,
        0.3,
    );
    let a = model_run(&s);
    let b = model_run(&s);
    assert_eq!(a, b);
    assert!(!a.trims.is_empty(), "the policy acted");
}

/// Memory is what all WorkManagers hold together: an unlimited cache only grows, so its peak is
/// its final size and its time average less; a two-phase cache peaks before its trims, at least
/// as high as any tick saw, and its time average is what the ticks sample.
#[test]
fn memory_is_final_peak_and_mean_of_the_sum_over_all_workmanagers() {
    let unlimited = model_run(&spec(PolicyKind::Unlimited, 27, 2, 0.3));
    assert_eq!(unlimited.peak_bytes, unlimited.final_bytes);
    assert!(0 < unlimited.mean_bytes && unlimited.mean_bytes < unlimited.final_bytes);
    let two_phase = model_run(&spec(
        PolicyKind::TwoPhase {
            absorb: 200,
            target: 20,
        },
        27,
        2,
        0.3,
    ));
    let ticks_max = two_phase.ticks.iter().map(|k| k.bytes).max().unwrap_or(0);
    assert!(
        two_phase.peak_bytes >= ticks_max,
        "the ticks are samples of what the meter saw"
    );
    assert!(two_phase.peak_bytes > two_phase.final_bytes, "it trimmed");
    assert!(two_phase.mean_bytes < two_phase.peak_bytes);
    assert!(two_phase.mean_bytes < unlimited.mean_bytes);
    // The mean is the time average: the ticks' average is its 10-s sampling.
    let ticks_mean =
        two_phase.ticks.iter().map(|k| k.bytes as f64).sum::<f64>() / two_phase.ticks.len() as f64;
    let rel = (ticks_mean - two_phase.mean_bytes as f64).abs() / ticks_mean;
    assert!(
        rel < 0.1,
        "time average {} vs tick average {ticks_mean}",
        two_phase.mean_bytes
    );
}

#[test]
fn the_backend_does_not_change_the_run() {
    // The store's speed is the model's; which backend holds the values changes nothing.
    let s = spec(PolicyKind::Lru(100), 27, 2, 0.2);
    let on_disk = model_run(&s);
    let mem = pliant_store::MemStore::new();
    let in_memory = run(&s, Segments::Model, &mem, None, &|_| {}).expect("run");
    assert_eq!(on_disk, in_memory);
    assert!(mem.states().expect("scan").len() as u64 > on_disk.states);
}

#[test]
fn a_store_failure_stops_the_run_with_the_store_error_as_source() {
    use std::error::Error as _;
    let store = pliant_store::FaultyStore::new(pliant_store::MemStore::new());
    store.faults().fail_write(15);
    let err = run(
        &spec(PolicyKind::Unlimited, 27, 1, 0.3),
        Segments::Model,
        &store,
        None,
        &|_| {},
    )
    .expect_err("the 15th put fails");
    assert!(matches!(
        &err,
        pliant_parsplice::ParspliceError::Store(pliant_store::StoreError::Injected { op: "put" })
    ));
    assert!(
        err.source()
            .and_then(|e| e.downcast_ref::<pliant_store::StoreError>())
            .is_some(),
        "{err:?}"
    );
    assert_eq!(
        store.faults().writes(),
        15,
        "the run stopped at the failure"
    );
}

#[test]
fn the_store_holds_every_value_written_and_survives_reopening() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = spec(PolicyKind::Lru(10), 27, 2, 0.3);
    let states = {
        let store = FjallStore::open(dir.path()).expect("store");
        let r = run(&s, Segments::Model, &store, None, &|_| {}).expect("run");
        assert!(r.states > 100, "the run created states: {}", r.states);
        assert!(
            r.cache_misses > 1000,
            "a 10-key cache misses and reads the store back"
        );
        r.states
    };
    let store = FjallStore::open(dir.path()).expect("reopen");
    let entries = store.states().expect("scan");
    // Every state created, plus the initial state of each superbasin.
    assert!(
        entries.len() as u64 > states,
        "{} ≤ {states}",
        entries.len()
    );
    for (k, v) in &entries {
        assert_eq!(v, &value_of(*k, v.len() as u32), "value of {k}");
        assert!(v.len() >= 300, "coordinates are at least 300 bytes");
    }
}

#[test]
fn unlimited_is_the_baseline_and_a_big_enough_lru_matches_it() {
    let s = |p| spec(p, 27, 1, 0.3);
    let go = |p| model_run(&s(p));
    let unlimited = go(PolicyKind::Unlimited);
    let big = go(PolicyKind::Lru(1_000_000));
    let tiny = go(PolicyKind::Lru(1));
    let end = 0.3 * 3600.0;
    assert_eq!(efficiency(&big, &unlimited, end), 1.0);
    assert!(
        efficiency(&tiny, &unlimited, end) < 0.9,
        "misses cost trajectory"
    );
}

/// An unlimited cache's model run of `hours` at the traces' layout, with WorkManager 0's trace:
/// the report, and the records read back from the trace written as ParSplice CSV.
fn model_trace(hours: f64) -> (RunReport, Vec<pliant_trace::Record>) {
    let mut out = Vec::new();
    let s = spec(PolicyKind::Unlimited, 27, 1, hours);
    let r = run(
        &s,
        Segments::Model,
        &FjallStore::temporary().expect("store"),
        Some(&mut out),
        &|_| {},
    )
    .expect("run");
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("rank4.csv");
    std::fs::write(&p, &out).expect("write");
    let recs = pliant_trace::reader(&p, &pliant_trace::ReadOptions::default())
        .expect("open")
        .collect::<Result<_, _>>()
        .expect("valid ParSplice CSV");
    (r, recs)
}

#[test]
fn generated_trace_reads_back_as_parsplice_csv() {
    let (r, recs) = model_trace(0.05);
    let reads = recs
        .iter()
        .filter(|x| x.op == pliant_trace::Op::Get)
        .count() as u64;
    let reads0: u64 = r.ticks.iter().map(|k| k.reads_node0).sum();
    assert_eq!(reads, reads0);
    assert_eq!(
        recs.len() as u64 - reads,
        r.states,
        "one logical put per new state"
    );
}
/// `auto`'s decisions on a short model run, pinned: when its gate opens, the regimes it found,
/// and the trims it makes from then on (the keys read or put within its window). A change to
/// `auto` or to the model that moves any of these shows here first.
#[test]
fn auto_decisions_on_a_short_run_are_pinned() {
    let r = model_run(&spec(PolicyKind::auto(), 251, 1, 0.6));
    let s = r.auto.expect("armed");
    assert_eq!((s.armed_at, s.regimes), (70.0, 2));
    assert_eq!(
        r.trims[..6],
        [
            (70.0, 13),
            (80.0, 22),
            (90.0, 24),
            (100.0, 37),
            (110.0, 32),
            (120.0, 54)
        ]
    );
    assert_eq!(
        r.trims.len(),
        183,
        "a trim whenever the tier held more than its window"
    );
    assert_eq!(s.target_keys, 4771);
    assert!((s.window_seconds - 285.870).abs() < 1e-3, "{s:?}");
}

/// A WorkManager's policy sees the run's trajectory as its progress (`progress`,
/// `progress_per_s`), and the tier's store traffic and new states: a policy that trims once the
/// trajectory passes 500,000 ps does so at the tick it passes it, not before.
#[test]
fn a_policy_sees_the_trajectory_as_progress_and_the_store_traffic() {
    let source = pliant_policy::PolicySource::functions(
        "progress",
        "function when()\n\
           local me = servers[whoami]\n\
           -- The install's dry run sees an empty view.\n\
           if me.progress == nil then return false end\n\
           assert(me.fetches_per_s ~= nil and me.new_keys_per_s ~= nil)\n\
           assert(me.progress_per_s ~= nil and me.progress_per_s >= 0)\n\
           return me.progress > 500000 and me.capacity > 7\n\
         end\n\
         function howmuch() return 7 end\n",
    );
    let r = model_run(&spec(
        PolicyKind::Lua {
            name: "progress".into(),
            source,
            params: Default::default(),
        },
        251,
        1,
        0.2,
    ));
    let first = r
        .trims
        .first()
        .copied()
        .expect("trimmed once the trajectory passed 500,000");
    assert_eq!(first.1, 7);
    let before = r
        .ticks
        .iter()
        .take_while(|k| k.t < first.0)
        .last()
        .expect("a tick before");
    assert!(before.trajectory <= 500_000.0, "{before:?}");
    let at = r.ticks.iter().find(|k| k.t == first.0).expect("the tick");
    assert!(at.trajectory > 500_000.0, "{at:?}");
}

/// A run of `policy` with every state a worker finds lost to the store (`lost_share` 1) and
/// `heal_scale` as given.
fn lossy(policy: PolicyKind, heal_scale: f64) -> RunReport {
    lossy_decaying(policy, heal_scale, f64::INFINITY)
}

/// [`lossy`], with the heal's chance falling by `e` every `decay` segments of a stall.
fn lossy_decaying(policy: PolicyKind, heal_scale: f64, decay: f64) -> RunReport {
    let mut s = spec(policy, 27, 1, 0.3);
    s.workload.lost_share = 1.0;
    s.workload.heal_scale = heal_scale;
    s.workload.heal_decay_segments = decay;
    model_run(&s)
}

/// The stall: a store read of a state the store never got stops the trajectory, which a cache
/// that keeps everything never does; unhealed it stays stopped to the end, and the stop is when
/// it began.
#[test]
fn a_lost_state_read_from_the_store_stops_the_trajectory_and_a_full_cache_never_reads_one() {
    let unlimited = lossy(PolicyKind::Unlimited, 0.0);
    assert!(unlimited.stalls.is_empty(), "{:?}", unlimited.stalls);
    let tiny = lossy(PolicyKind::Lru(1), 0.0);
    assert_eq!(tiny.stalls.len(), 1, "never healed: one stall");
    let stall = tiny.stalls[0];
    assert!(stall.end.is_none());
    let end = 0.3 * 3600.0;
    // Nothing is added once it began (the segments under way then may still end).
    let at_stall = tiny.trajectory_at(stall.start + 60.0);
    assert!(
        (tiny.trajectory_at(end) - at_stall).abs() < 1e-6,
        "{} then {}",
        at_stall,
        tiny.trajectory_at(end)
    );
    assert_eq!(tiny.stop(end, 0.0), Some(stall.start));
    assert_eq!(tiny.stop(end, end), None, "shorter than asked");
    assert!(efficiency(&tiny, &unlimited, end) < 0.9);
}

/// A stall heals when a segment finds the state again: with every segment doing so, each stall
/// ends at the next segment's end, and the run goes on stalling and resuming.
#[test]
fn a_stall_heals_when_a_segment_finds_the_state_again() {
    let healing = lossy(PolicyKind::Lru(1), 1e12);
    assert!(healing.stalls.len() > 1, "{:?}", healing.stalls.len());
    assert!(healing.stalls.iter().rev().skip(1).all(|s| s.end.is_some()));
    let never = lossy(PolicyKind::Lru(1), 0.0);
    let end = 0.3 * 3600.0;
    assert!(healing.trajectory_at(end) > 2.0 * never.trajectory_at(end));
}

/// The heal's chance falls as a stall lasts: with a chance of 1/2 at a stall's first segment,
/// falling by `e` with each segment after, a stall is left for good with chance about 0.37, so
/// the run stops for good where the same first chance without the decay heals every stall.
#[test]
fn a_stall_that_outlasts_its_first_segments_stops_the_trajectory_for_good() {
    let end = 0.3 * 3600.0;
    // A basin of one state at 27 workers and this few atoms: the chance is heal_scale * e^-n.
    let scale = 0.5 * std::f64::consts::E;
    let steady = lossy(PolicyKind::Lru(1), scale);
    let fading = lossy_decaying(PolicyKind::Lru(1), scale, 1.0);
    assert!(steady.stalls.iter().rev().skip(1).all(|s| s.end.is_some()));
    assert!(steady.stalls.len() > 10, "{}", steady.stalls.len());
    assert!(steady.stop(end, 60.0).is_none(), "steady heals");
    let last = fading.stalls.last().expect("stalls");
    assert!(last.end.is_none(), "{last:?}");
    assert!(fading.stalls.iter().rev().skip(1).all(|s| s.end.is_some()));
    assert_eq!(fading.stop(end, 60.0), Some(last.start));
    assert!(fading.trajectory_at(end) < steady.trajectory_at(end));
}

/// The model's reads are as local as d100K's (`tools/fit/parsplice_locality.py` fits them to
/// its LRU miss curve): a 10-key LRU cache over the model's trace at the traces' layout misses
/// within a factor of two of d100K's 1.20% (the old uniform draw missed 28.8%).
#[test]
fn the_model_reads_are_as_local_as_the_d100k_trace() {
    let (_, recs) = model_trace(2.0);
    let mut lru = std::collections::VecDeque::<u64>::new();
    let (mut reads, mut misses) = (0u64, 0u64);
    for rec in recs {
        let read = rec.op == pliant_trace::Op::Get;
        let held = lru.iter().position(|&k| k == rec.key);
        if read {
            reads += 1;
            misses += u64::from(held.is_none());
        }
        if let Some(i) = held {
            lru.remove(i);
        }
        lru.push_front(rec.key);
        lru.truncate(10);
    }
    let ratio = misses as f64 / reads as f64;
    assert!((0.006..0.024).contains(&ratio), "{ratio}");
}
