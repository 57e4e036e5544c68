//! The real ParSplice d100K WorkManager trace (`../shared/traces/parsplice/d100K/rank4.csv.gz`)
//! through LRU at 100, 10,000 and 100,000 keys and through the two-phase policy: the exact
//! counts of the README's table. In CI the trace must be there; elsewhere the test says it
//! skipped. The LRU counts are also libCacheSim's on the same trace (`libcachesim.rs`); the
//! two-phase counts have no outside reference (libCacheSim has no resizing policy).

use std::path::PathBuf;

use pliant_cache::Capacity;
use pliant_policy::{ParamValue, shipped};
use pliant_sim::{Config, PolicySpec, RunResult, SimOptions, replay};
use pliant_trace::ReadOptions;

/// Every DBMemoryGet line of rank 4.
const READS: u64 = 1_034_063;
/// Keys the run creates, each written once before it is read.
const KEYS: u64 = 57_695;

fn trace() -> Option<PathBuf> {
    pliant_testdata::shared("traces/parsplice/d100K/rank4.csv.gz")
}

fn run(configs: &[Config], opts: &SimOptions) -> Vec<RunResult> {
    let p = trace().expect("checked by caller");
    let rd = pliant_trace::reader(&p, &ReadOptions::default()).expect("open");
    replay(rd, configs, opts, &|_| {}).expect("replay")
}

fn lru(keys: u64) -> Config {
    Config {
        algo: "lru".into(),
        capacity: Capacity::Keys(keys),
    }
}

/// An unlimited cache under the two-phase policy, deciding every 10 s.
fn two_phase(absorb: f64, target: f64) -> RunResult {
    let opts = SimOptions {
        interval: Some(10),
        policy: Some(PolicySpec {
            source: shipped::get("parsplice-absorb-trim").expect("shipped"),
            params: [
                ("absorb".to_string(), ParamValue::Num(absorb)),
                ("target".to_string(), ParamValue::Num(target)),
            ]
            .into(),
        }),
        ..SimOptions::default()
    };
    run(&[lru(u64::MAX)], &opts).remove(0)
}

#[test]
fn d100k_lru_at_three_sizes_gives_the_readme_counts() {
    if trace().is_none() {
        return;
    }
    let r = run(
        &[lru(100), lru(10_000), lru(100_000)],
        &SimOptions::default(),
    );
    let got: Vec<(u64, u64, u64)> = r
        .iter()
        .map(|x| (x.requests, x.misses, x.peak_keys))
        .collect();
    assert_eq!(
        got,
        [(READS, 8_617, 100), (READS, 0, 10_000), (READS, 0, KEYS)],
        "(reads, misses, peak keys) of LRU 100, 10,000 and 100,000"
    );
}

#[test]
fn d100k_two_phase_gives_the_readme_counts() {
    if trace().is_none() {
        return;
    }
    for (target, misses) in [
        (10.0, 7_861),
        (100.0, 5_986),
        (1_000.0, 2_861),
        (10_000.0, 0),
    ] {
        let p = two_phase(10_000.0, target);
        assert_eq!(
            (p.requests, p.misses, p.peak_keys),
            (READS, misses, 10_017),
            "absorb 10,000 then {target}"
        );
        assert_eq!(
            p.resizes.first().map(|r| r.0),
            Some(4_480),
            "the first trim"
        );
        assert!(p.final_keys <= target as u64);
    }
    // The studies' hand-picked threshold is never reached on this 57,695-key run.
    let p = two_phase(100_000.0, 1_000.0);
    assert_eq!((p.misses, p.peak_keys), (0, KEYS));
    assert!(p.resizes.is_empty(), "never trims: {:?}", p.resizes.first());
}
