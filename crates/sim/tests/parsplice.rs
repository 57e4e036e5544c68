//! The real ParSplice d100K WorkManager trace (`../shared/traces/parsplice/d100K/rank4.csv.gz`)
//! through LRU at 100, 10,000 and 100,000 keys and through the two-phase policy. In CI the trace
//! must be there; elsewhere the test says it skipped.

use std::path::PathBuf;

use pliant_cache::Capacity;
use pliant_policy::{ParamValue, shipped};
use pliant_sim::{Config, PolicySpec, RunResult, SimOptions, replay};
use pliant_trace::ReadOptions;

fn trace() -> Option<PathBuf> {
    pliant_testdata::shared("traces/parsplice/d100K/rank4.csv.gz")
}

fn run(configs: &[Config], opts: &SimOptions) -> Vec<RunResult> {
    let p = trace().expect("checked by caller");
    let rd = pliant_trace::reader(&p, &ReadOptions::default()).expect("open");
    replay(rd, configs, opts, &|_| {}).expect("replay")
}

#[test]
fn d100k_lru_at_three_sizes_and_two_phase() {
    if trace().is_none() {
        return;
    }
    let lru: Vec<Config> = [100, 10_000, 100_000]
        .map(|k| Config {
            algo: "lru".into(),
            capacity: Capacity::Keys(k),
        })
        .to_vec();
    let r = run(&lru, &SimOptions::default());
    // Reads: every DBMemoryGet line of rank 4 (README: 1,034,063 cache gets).
    assert!(r.iter().all(|x| x.requests == 1_034_063));
    // 57,695 keys are written once each by the workers before they are read, so a cache that
    // holds them all misses only reads of keys evicted earlier: misses fall with size.
    assert!(r[0].misses > r[1].misses && r[1].misses >= r[2].misses);
    assert!(r[2].peak_keys <= 57_695, "never more keys than exist");
    for x in &r {
        eprintln!(
            "d100K rank4 LRU {}: misses {} miss ratio {:.4}",
            x.size, x.misses, x.miss_ratio
        );
    }

    let two_phase = SimOptions {
        interval: Some(10),
        policy: Some(PolicySpec {
            source: shipped::get("parsplice-absorb-trim").expect("shipped"),
            params: [
                ("absorb".to_string(), ParamValue::Num(10_000.0)),
                ("target".to_string(), ParamValue::Num(1_000.0)),
            ]
            .into(),
        }),
        ..SimOptions::default()
    };
    let unlimited = [Config {
        algo: "lru".into(),
        capacity: Capacity::Keys(u64::MAX),
    }];
    let p = &run(&unlimited, &two_phase)[0];
    eprintln!(
        "d100K rank4 two-phase (absorb 10000, target 1000): misses {} miss ratio {:.4}, \
         peak keys {}, final keys {}, first trim at {:?}",
        p.misses,
        p.miss_ratio,
        p.peak_keys,
        p.final_keys,
        p.resizes.first()
    );
    assert_eq!(p.requests, 1_034_063);
    assert!(p.peak_keys > 10_000, "absorbed past the threshold first");
    assert!(p.final_keys <= 1_000, "then trimmed to the target");
    assert!(!p.resizes.is_empty());
    assert!(
        p.misses >= r[2].misses,
        "a smaller cache cannot miss less than LRU 100K here"
    );
}
