//! The README's regime tables on the real ParSplice WorkManager traces, exactly: the regimes'
//! starts, the suggested threshold and the fan detector's superbasin count, as `pliant regimes`
//! computes them (10-s buckets, k = 4, seed 1). In CI the traces must be there; elsewhere the
//! test says it skipped.

use pliant_trace::ReadOptions;

/// (trace, regime starts in s, threshold keys, fan regimes), from the README.
const RUNS: [(&str, [f64; 4], u64, usize); 2] = [
    ("d100K", [0.0, 380.0, 5150.0, 10070.0], 12_436, 77),
    ("d1M", [0.0, 1710.0, 5970.0, 10590.0], 294, 34),
];

#[test]
fn the_traced_runs_give_the_readme_regimes_threshold_and_superbasins() {
    for (run, starts, threshold, fans) in RUNS {
        let Some(path) = pliant_testdata::shared(&format!("traces/parsplice/{run}/rank4.csv.gz"))
        else {
            continue;
        };
        let reader = pliant_trace::reader(&path, &ReadOptions::default()).expect("opens");
        let profile = pliant_trace::profile(reader, 10, true).expect("profile");
        let a = pliant_regime::analyse(
            &profile.read_rates(),
            &profile.keys_held(),
            &profile.accesses,
            4,
            1,
        )
        .expect("regimes");
        let got: Vec<f64> = a.regimes.regimes.iter().map(|r| r.start).collect();
        assert_eq!(got, starts, "{run}: regime starts");
        assert_eq!(
            a.threshold.map(|t| t.keys),
            Some(threshold),
            "{run}: threshold"
        );
        assert_eq!(a.fans.len(), fans, "{run}: superbasins");
    }
}
