//! The Rust fan detector and the shipped `regime-fan` Lua policy agree, and k-means finds
//! planted regimes.

use pliant_policy::{Engine, HowMuch, Metrics, PolicySource, shipped};
use pliant_regime::{FanRegime, fan_span, fans, kmeans_regimes};

fn lua_fan(ids: &[u64]) -> (bool, f64) {
    let mut e = Engine::in_memory(Metrics::new(0));
    e.timeseries().replace(
        ids.iter()
            .enumerate()
            .map(|(t, &i)| (t as f64, i as f64))
            .collect(),
    );
    let d = e
        .check(&shipped::get("regime-fan").expect("shipped"))
        .expect("check");
    // A decision asks `howmuch` only once `when` says yes: ask a copy that always does.
    let asked = PolicySource::functions(
        "regime-fan",
        include_str!("../../../policies/regime-fan.lua").to_owned()
            + "\nfunction when() return true end\n",
    );
    let Some(HowMuch::Amount(x)) = e.check(&asked).expect("check").howmuch else {
        panic!("regime-fan returns a number")
    };
    (d.when, x)
}

fn rust_fan(ids: &[u64]) -> (bool, f64) {
    let pts: Vec<(f64, u64)> = ids
        .iter()
        .enumerate()
        .map(|(t, &i)| (t as f64, i))
        .collect();
    let r = fans(&pts);
    (r.len() >= 2, fan_span(&r) as f64)
}

#[test]
fn three_superbasins_are_three_regimes_newest_first() {
    let ids = [1, 2, 1, 2, 10, 11, 10, 11, 20, 21, 20, 21];
    let pts: Vec<(f64, u64)> = ids
        .iter()
        .enumerate()
        .map(|(t, &i)| (t as f64, i))
        .collect();
    assert_eq!(
        fans(&pts),
        [
            FanRegime { lo: 20, hi: 21 },
            FanRegime { lo: 10, hi: 11 },
            FanRegime { lo: 1, hi: 2 }
        ]
    );
}

#[test]
fn rust_and_lua_detectors_agree_on_pseudorandom_series() {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    for case in 0..200 {
        let n = 1 + case % 60;
        let ids: Vec<u64> = (0..n)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Basins of growing ids with revisits, like a ParSplice run.
                (i as u64 / 10) * 8 + x % 12
            })
            .collect();
        assert_eq!(rust_fan(&ids), lua_fan(&ids), "case {case}: {ids:?}");
    }
    assert_eq!(rust_fan(&[]), lua_fan(&[]));
}

#[test]
fn kmeans_finds_planted_regimes_in_time_order() {
    // Four phases: a flash crowd, a decline, a plateau, a low tail.
    let mut pts = Vec::new();
    for t in 0..400 {
        let rate = match t {
            0..=49 => 600.0 + (t % 7) as f64,
            50..=149 => 300.0 - (t - 50) as f64 * 2.0,
            150..=299 => 100.0 + (t % 5) as f64,
            _ => 40.0 + (t % 3) as f64,
        };
        pts.push((t as f64 * 10.0, rate));
    }
    let r = kmeans_regimes(&pts, 4, 7).expect("kmeans");
    assert_eq!(r.regimes.len(), 4);
    let starts: Vec<f64> = r.regimes.iter().map(|x| x.start).collect();
    assert!(starts.windows(2).all(|w| w[0] < w[1]), "{starts:?}");
    assert_eq!(r.regimes[0].start, 0.0);
    assert!(r.regimes[0].mean_rate > 500.0);
    assert!(r.regimes[3].mean_rate < 60.0);
    assert_eq!(r.labels.len(), 400);
    assert_eq!(
        r,
        kmeans_regimes(&pts, 4, 7).expect("again"),
        "deterministic"
    );
    assert!(kmeans_regimes(&pts[..3], 4, 7).is_err());
}
