//! The shipped policies on hand-made scenarios with known answers.

use std::rc::Rc;

use pliant_policy::{
    Engine, EngineConfig, HowMuch, MemoryStore, Metrics, ParamValue, Params, PolicySource,
    ServerId, shipped,
};

fn engine_with(
    name: &str,
    metrics: Metrics,
    params: &[(&str, f64)],
    store: &MemoryStore,
) -> Engine {
    let mut e = Engine::new(EngineConfig::default(), Rc::new(store.clone()), metrics);
    let p: Params = params
        .iter()
        .map(|(k, v)| (k.to_string(), ParamValue::Num(*v)))
        .collect();
    e.set_params(p);
    e.install(shipped::get(name).expect("shipped policy"))
        .expect("shipped policy installs");
    e
}

fn cache(keys: f64) -> Metrics {
    let mut m = Metrics::new(0);
    m.set(0, "keys", keys);
    m
}

/// Feeds a sequence of cache sizes; returns `(when, howmuch)` for each.
fn run_keys(e: &mut Engine, keys: &[f64]) -> Vec<(bool, Option<f64>)> {
    keys.iter()
        .map(|&k| {
            e.metrics_mut().set(0, "keys", k);
            let d = e.decide().expect("decide");
            (d.when, d.howmuch.and_then(|h| h.amount()))
        })
        .collect()
}

#[test]
fn parsplice_absorb_trim_absorbs_then_trims_and_remembers() {
    let store = MemoryStore::new();
    let mut e = engine_with(
        "parsplice-absorb-trim",
        cache(0.0),
        &[("absorb", 100.0), ("target", 10.0)],
        &store,
    );
    // Above target but never above absorb: no trimming (the flash crowd is being absorbed).
    assert_eq!(
        run_keys(&mut e, &[5.0, 50.0, 99.0]),
        [(false, None), (false, None), (false, None)]
    );
    // Crosses absorb: trim to target from now on, also after the cache shrank.
    assert_eq!(
        run_keys(&mut e, &[150.0, 8.0, 20.0]),
        [(true, Some(10.0)), (false, None), (true, Some(10.0))]
    );
    // A restarted service remembers the absorb phase is over.
    let mut again = engine_with(
        "parsplice-absorb-trim",
        cache(0.0),
        &[("absorb", 100.0), ("target", 10.0)],
        &store,
    );
    assert_eq!(run_keys(&mut again, &[20.0]), [(true, Some(10.0))]);
}

#[test]
fn parsplice_absorb_trim_defaults_are_the_studies_thresholds() {
    let store = MemoryStore::new();
    let mut e = engine_with("parsplice-absorb-trim", cache(0.0), &[], &store);
    assert_eq!(
        run_keys(&mut e, &[50_000.0, 100_001.0, 999.0, 1001.0]),
        [
            (false, None),
            (true, Some(1000.0)),
            (false, None),
            (true, Some(1000.0))
        ]
    );
}

#[test]
fn static_limit_keeps_at_most_n_keys() {
    let store = MemoryStore::new();
    let mut e = engine_with("static-limit", cache(0.0), &[("limit", 100.0)], &store);
    assert_eq!(
        run_keys(&mut e, &[50.0, 100.0, 101.0, 5000.0]),
        [
            (false, None),
            (false, None),
            (true, Some(100.0)),
            (true, Some(100.0))
        ]
    );
}

fn rates(whoami: i64, r: [f64; 3]) -> Metrics {
    let mut m = Metrics::new(whoami);
    for (id, rate) in (1..).zip(r) {
        m.set(id, "req_rate", rate);
    }
    m
}

#[test]
fn cephfs_greedy_spill_waits_for_three_overloaded_decisions() {
    let store = MemoryStore::new();
    let mut e = engine_with(
        "cephfs-greedy-spill",
        rates(1, [30.0, 10.0, 20.0]),
        &[],
        &store,
    );
    // Average 20, server 1 at 30: overloaded. Acts on the third consecutive decision.
    let whens: Vec<bool> = (0..4).map(|_| e.decide().expect("decide").when).collect();
    assert_eq!(whens, [false, false, true, true]);
    let d = e.decide().expect("decide");
    let w = d.where_.expect("where");
    assert_eq!(w.len(), 1);
    assert_eq!(
        w.get(&ServerId::Num(2)),
        Some(&10.0),
        "half of 30 would leave server 1 under the average 20: its excess, 10, to the next server"
    );
    assert_eq!(
        serde_json::to_value(d.howmuch.expect("howmuch")).expect("json"),
        serde_json::json!(["big", "small", "big_small"])
    );
    // Not overloaded once: the count resets, so three more are needed.
    e.metrics_mut().set(1, "req_rate", 5.0);
    assert!(!e.decide().expect("decide").when);
    e.metrics_mut().set(1, "req_rate", 30.0);
    let whens: Vec<bool> = (0..3).map(|_| e.decide().expect("decide").when).collect();
    assert_eq!(whens, [false, false, true]);
}

#[test]
fn cephfs_greedy_spill_wraps_to_first_server_and_ignores_underloaded() {
    let store = MemoryStore::new();
    let mut e = engine_with(
        "cephfs-greedy-spill",
        rates(3, [10.0, 10.0, 40.0]),
        &[],
        &store,
    );
    for _ in 0..2 {
        e.decide().expect("decide");
    }
    let d = e.decide().expect("decide");
    assert!(d.when);
    assert_eq!(d.where_.expect("where").get(&ServerId::Num(1)), Some(&20.0));

    let store = MemoryStore::new();
    let mut e = engine_with(
        "cephfs-greedy-spill",
        rates(2, [10.0, 10.0, 40.0]),
        &[],
        &store,
    );
    assert!((0..5).all(|_| !e.decide().expect("decide").when));
}

#[test]
fn cephfs_greedy_spill_sends_half_when_that_is_less_than_the_excess() {
    let store = MemoryStore::new();
    let mut e = engine_with(
        "cephfs-greedy-spill",
        rates(1, [90.0, 5.0, 5.0]),
        &[],
        &store,
    );
    let d = (0..3)
        .map(|_| e.decide().expect("decide"))
        .last()
        .expect("three");
    assert!(d.when);
    assert_eq!(d.where_.expect("where").get(&ServerId::Num(2)), Some(&45.0));
}

/// The greedy spill's `when` on server 1 of three with these loads, for `n` decisions.
fn spill_whens(loads: [f64; 3], params: &[(&str, f64)], n: usize) -> Vec<bool> {
    let store = MemoryStore::new();
    let mut e = engine_with("cephfs-greedy-spill", rates(1, loads), params, &store);
    (0..n).map(|_| e.decide().expect("decide").when).collect()
}

#[test]
fn cephfs_greedy_spill_leaves_an_overloaded_neighbour_and_a_barely_overloaded_self_alone() {
    // Server 1 well over the average (30), but its neighbour is over too: nowhere to spill.
    assert_eq!(spill_whens([45.0, 40.0, 5.0], &[], 5), [false; 5]);
    // 9% over the average: within Ceph's mds_bal_min_rebalance (10%), not overloaded...
    assert_eq!(spill_whens([109.0, 91.0, 100.0], &[], 5), [false; 5]);
    // ...unless the policy is given a smaller margin.
    assert_eq!(
        spill_whens([109.0, 91.0, 100.0], &[("min_rebalance", 0.05)], 3),
        [false, false, true]
    );
}

/// Every server runs the policy on the same loads and acts on its own decision, one decision
/// round after another, as the cluster's balancer does: the spill must even the loads out and
/// then stop.
#[test]
fn cephfs_greedy_spill_evens_a_skewed_cluster_out_and_stops() {
    let mut loads = [90.0, 5.0, 5.0];
    let stores: Vec<MemoryStore> = (0..3).map(|_| MemoryStore::new()).collect();
    let mut engines: Vec<Engine> = (0..3)
        .map(|i| {
            engine_with(
                "cephfs-greedy-spill",
                rates(i as i64 + 1, loads),
                &[],
                &stores[i],
            )
        })
        .collect();
    let mut last_move = None;
    for round in 0..40 {
        let mut moves = Vec::new();
        for (i, e) in engines.iter_mut().enumerate() {
            for (id, l) in (1..).zip(loads) {
                e.metrics_mut().set(id, "req_rate", l);
            }
            let d = e.decide().expect("decide");
            for (to, x) in d.where_.iter().flatten() {
                let ServerId::Num(to) = to else {
                    panic!("numeric ids")
                };
                moves.push((i, *to as usize - 1, *x));
            }
        }
        for &(from, to, x) in &moves {
            loads[from] -= x;
            loads[to] += x;
        }
        if !moves.is_empty() {
            last_move = Some(round);
        }
    }
    let avg = 100.0 / 3.0;
    assert!(
        loads.iter().all(|l| (l - avg).abs() < 0.1 * avg),
        "even within 10%: {loads:?}"
    );
    assert!(
        last_move.is_some_and(|r| r < 30),
        "stopped moving: last move in round {last_move:?}"
    );
}

/// Runs regime-fan over a series of key ids in time order; returns `(when, howmuch)`, `howmuch`
/// from a copy whose `when` always says yes (a decision asks `howmuch` only then).
fn fan(ids: &[f64]) -> (bool, Option<HowMuch>) {
    let store = MemoryStore::new();
    let mut e = engine_with("regime-fan", cache(0.0), &[], &store);
    e.timeseries().replace(
        ids.iter()
            .enumerate()
            .map(|(t, &id)| (t as f64, id))
            .collect(),
    );
    let d = e
        .check(&shipped::get("regime-fan").expect("policy"))
        .expect("check");
    assert_eq!(e.decide().expect("decide").when, d.when);
    let asked = PolicySource::functions(
        "regime-fan",
        include_str!("../../../policies/regime-fan.lua").to_owned()
            + "\nfunction when() return true end\n",
    );
    (d.when, e.check(&asked).expect("check").howmuch)
}

#[test]
fn regime_fan_two_disjoint_blocks_are_two_regimes() {
    // Newest first: fan {5}, then fan {1} whose top 1 < 5: a boundary. Spans 1 + 1.
    let (when, h) = fan(&[1.0, 1.0, 1.0, 1.0, 5.0, 5.0, 5.0, 5.0]);
    assert!(when);
    assert_eq!(h, Some(HowMuch::Amount(2.0)));
}

#[test]
fn regime_fan_overlapping_fans_are_one_regime() {
    // Newest first: 5 | 4 5 | 3 4 3: each older fan reaches the newer fan's bottom. One regime 3..5.
    let (when, h) = fan(&[3.0, 4.0, 3.0, 5.0, 4.0, 5.0]);
    assert!(!when);
    assert_eq!(h, Some(HowMuch::Amount(3.0)));
}

#[test]
fn regime_fan_three_superbasins() {
    let ids = [
        1.0, 2.0, 1.0, 2.0, 10.0, 11.0, 10.0, 11.0, 20.0, 21.0, 20.0, 21.0,
    ];
    let (when, h) = fan(&ids);
    assert!(when);
    // Regimes 20..21, 10..11, 1..2.
    assert_eq!(h, Some(HowMuch::Amount(6.0)));
}

#[test]
fn regime_fan_empty_series_has_no_regimes() {
    let (when, h) = fan(&[]);
    assert!(!when);
    assert_eq!(h, Some(HowMuch::Amount(0.0)));
}

/// The default instruction budget must let a policy scan a 6-million-point time series.
#[test]
fn regime_fan_scans_six_million_points_within_default_budget() {
    let store = MemoryStore::new();
    let mut e = engine_with("regime-fan", cache(0.0), &[], &store);
    // Two superbasins of 3 M accesses each, sweeping their 100 keys (downward in time, so the
    // backward walk sees each basin as one widening fan).
    let points: Vec<(f64, f64)> = (0..6_000_000u32)
        .map(|i| {
            let basin = if i < 3_000_000 { 0.0 } else { 1000.0 };
            (f64::from(i), basin + f64::from(99 - i % 100))
        })
        .collect();
    e.timeseries().replace(points);
    let d = e.decide().expect("6 M points fit the default budget");
    assert!(d.when, "two basins found");
    // Regimes 1000..1099 and 0..99.
    assert_eq!(d.howmuch, Some(HowMuch::Amount(200.0)));
    eprintln!(
        "regime-fan over 6 M points: {} instructions",
        d.instructions
    );
    assert!(
        d.instructions > 6_000_000,
        "really scanned: {}",
        d.instructions
    );
}

/// One decision of `parsplice-no-progress` over a cache of `keys` (capacity `capacity`), the
/// application's progress rate `progress` (`None`: not reported) and the tier above's share of
/// `reads` reads per second: `(when, howmuch)`.
fn watched(
    e: &mut Engine,
    keys: f64,
    capacity: f64,
    progress: Option<f64>,
    fetches: f64,
) -> (bool, Option<f64>) {
    let m = e.metrics_mut();
    m.set(0, "keys", keys);
    m.set(0, "capacity", capacity);
    m.set(0, "progress_per_s", progress.unwrap_or(f64::NAN));
    m.set(0, "reads_per_s", 100.0);
    m.set(0, "fetches_per_s", fetches);
    let d = e.decide().expect("decide");
    (d.when, d.howmuch.and_then(|h| h.amount()))
}

const WATCHED: [(&str, f64); 5] = [
    ("absorb", 100.0),
    ("target", 10.0),
    ("window", 3.0),
    ("stall", 0.25),
    ("thrash", 0.5),
];

#[test]
fn parsplice_no_progress_trims_then_grows_back_when_progress_stops_and_remembers() {
    let store = MemoryStore::new();
    let mut e = engine_with("parsplice-no-progress", cache(0.0), &WATCHED, &store);
    // Absorbing, with progress at 100/s: the yardstick.
    for keys in [50.0, 80.0, 99.0] {
        assert_eq!(watched(&mut e, keys, 1e9, Some(100.0), 1.0), (false, None));
    }
    // Crosses absorb: trimmed to the target.
    assert_eq!(
        watched(&mut e, 150.0, 1e9, Some(100.0), 1.0),
        (true, Some(10.0))
    );
    // Progress slows to half of what it was: not a stall (below a quarter is); trims go on.
    for _ in 0..4 {
        assert_eq!(
            watched(&mut e, 20.0, 10.0, Some(50.0), 1.0),
            (true, Some(10.0))
        );
    }
    // Progress stops: once the window's mean is below a quarter of the yardstick (50, 50, 0 is
    // not; 50, 0, 0 is), the cache grows back to `grow` (default: absorb).
    assert_eq!(watched(&mut e, 10.0, 10.0, Some(0.0), 1.0), (false, None));
    assert_eq!(
        watched(&mut e, 10.0, 10.0, Some(0.0), 1.0),
        (true, Some(100.0))
    );
    // For good: it never trims again, and a restarted service remembers.
    assert_eq!(watched(&mut e, 500.0, 100.0, Some(0.0), 1.0), (false, None));
    let mut again = engine_with("parsplice-no-progress", cache(0.0), &WATCHED, &store);
    assert_eq!(
        watched(&mut again, 500.0, 100.0, Some(100.0), 1.0),
        (false, None)
    );
    // Its capacity lowered by someone else: put back.
    assert_eq!(
        watched(&mut again, 10.0, 10.0, Some(100.0), 1.0),
        (true, Some(100.0))
    );
}

#[test]
fn parsplice_no_progress_without_a_progress_signal_grows_back_on_thrashing_only() {
    let store = MemoryStore::new();
    let mut e = engine_with("parsplice-no-progress", cache(0.0), &WATCHED, &store);
    assert_eq!(watched(&mut e, 150.0, 1e9, None, 1.0), (true, Some(10.0)));
    // No progress reported: nothing to call a stall; a tenth of the reads fetched is no thrash.
    for _ in 0..5 {
        assert_eq!(watched(&mut e, 20.0, 10.0, None, 10.0), (true, Some(10.0)));
    }
    // Most reads go to the tier above: once the window is full of it, the cache grows back.
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(watched(&mut e, 10.0, 10.0, None, 90.0));
    }
    assert_eq!(got.last(), Some(&(true, Some(100.0))), "{got:?}");
}
