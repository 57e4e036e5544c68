//! The simulator agrees with the cache core, runs many configurations in one pass, and lets a
//! policy drive capacity.

use pliant_cache::{Capacity, Request};
use pliant_policy::{ParamValue, shipped};
use pliant_sim::{Config, PolicySpec, SimOptions, replay};
use pliant_trace::{Popularity, Record, Workload, generate};

fn workload(requests: u64) -> Vec<Record> {
    generate(Workload {
        popularity: Popularity::Zipf(0.9),
        keys: 5_000,
        requests,
        size: 100,
        rate: 1_000,
        seed: 42,
    })
    .collect()
}

fn ok(recs: &[Record]) -> impl Iterator<Item = Result<Record, pliant_trace::TraceError>> + '_ {
    recs.iter().copied().map(Ok)
}

#[test]
fn one_pass_over_many_configurations_matches_separate_caches() {
    let recs = workload(60_000);
    let configs: Vec<Config> = ["lru", "arc", "sieve", "s3fifo", "clock"]
        .iter()
        .flat_map(|a| {
            [Capacity::Keys(100), Capacity::Bytes(100 * 1000)].map(|capacity| Config {
                algo: a.to_string(),
                capacity,
            })
        })
        .collect();
    let results = replay(ok(&recs), &configs, &SimOptions::default(), &|_| {}).expect("replay");
    for (c, r) in configs.iter().zip(&results) {
        let mut cache = pliant_cache::cache(&c.algo, c.capacity).expect("cache");
        for rec in &recs {
            cache.access(&Request::new(rec.key, rec.size));
        }
        assert_eq!(r.misses, cache.stats().misses, "{} {}", c.algo, c.capacity);
        assert_eq!(r.requests, 60_000);
        assert!((r.miss_ratio - r.misses as f64 / 60_000.0).abs() < 1e-12);
    }
}

#[test]
fn writes_store_and_are_not_lookups() {
    let recs = vec![
        Record {
            op: pliant_trace::Op::Put,
            ..Record::get(0, 1, 10)
        },
        Record::get(0, 1, 10),
        Record::get(0, 2, 10),
    ];
    let configs = [Config {
        algo: "lru".into(),
        capacity: Capacity::Keys(10),
    }];
    let r = &replay(ok(&recs), &configs, &SimOptions::default(), &|_| {}).expect("replay")[0];
    assert_eq!(
        (r.requests, r.misses),
        (2, 1),
        "the put made the first read a hit"
    );
}

#[test]
fn timeline_reports_each_interval() {
    let recs = workload(30_000); // 30 s at 1,000 requests/s
    let configs = [Config {
        algo: "lru".into(),
        capacity: Capacity::Keys(500),
    }];
    let opts = SimOptions {
        interval: Some(10),
        ..SimOptions::default()
    };
    let r = &replay(ok(&recs), &configs, &opts, &|_| {}).expect("replay")[0];
    assert_eq!(r.timeline.len(), 3);
    assert_eq!(
        r.timeline.iter().map(|i| i.t).collect::<Vec<_>>(),
        [0, 10, 20]
    );
    assert_eq!(r.timeline.iter().map(|i| i.reads).sum::<u64>(), 30_000);
    let misses: f64 = r.timeline.iter().map(|i| i.misses_per_s * 10.0).sum();
    assert!((misses - r.misses as f64).abs() < 1e-6);
    assert!(
        r.timeline[2].hit_ratio > r.timeline[0].hit_ratio,
        "a warm cache hits more"
    );
}

#[test]
fn policy_trims_the_cache_through_the_engine() {
    let recs = workload(30_000);
    let configs = [Config {
        algo: "lru".into(),
        capacity: Capacity::Keys(u64::MAX),
    }];
    let opts = SimOptions {
        interval: Some(5),
        policy: Some(PolicySpec {
            source: shipped::get("static-limit").expect("shipped"),
            params: [("limit".to_string(), ParamValue::Num(300.0))].into(),
        }),
        ..SimOptions::default()
    };
    let r = &replay(ok(&recs), &configs, &opts, &|_| {}).expect("replay")[0];
    assert_eq!(r.resizes, [(5, 300)], "trimmed once, at the first decision");
    assert!(r.final_keys <= 300);
    assert!(
        r.peak_keys > 300,
        "grew unlimited before the first decision"
    );
    assert!(
        r.timeline[1..]
            .iter()
            .all(|i| i.keys <= 300 && i.capacity == 300)
    );
}

#[test]
fn policy_needs_a_key_capacity() {
    let recs = workload(100);
    let configs = [Config {
        algo: "lru".into(),
        capacity: Capacity::Bytes(1 << 20),
    }];
    let opts = SimOptions {
        policy: Some(PolicySpec {
            source: shipped::get("static-limit").expect("shipped"),
            params: Default::default(),
        }),
        ..SimOptions::default()
    };
    let e = replay(ok(&recs), &configs, &opts, &|_| {}).expect_err("bytes");
    assert!(e.to_string().contains("key capacity"), "{e}");
}

#[test]
fn trace_errors_surface_with_their_location() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("rank4.csv");
    std::fs::write(&p, "1,DBMemoryGet,0,5\n1,DBMemoryGet,zero,5\n").expect("write");
    let rd = pliant_trace::reader(&p, &pliant_trace::ReadOptions::default()).expect("open");
    let configs = [Config {
        algo: "lru".into(),
        capacity: Capacity::Keys(10),
    }];
    let e = replay(rd, &configs, &SimOptions::default(), &|_| {}).expect_err("bad line");
    assert!(e.to_string().contains("rank4.csv:2:"), "{e}");
}

#[test]
fn ignore_size_counts_every_object_as_one_byte() {
    let recs = workload(20_000);
    let run = |capacity, ignore_size| {
        let configs = [Config {
            algo: "lru".into(),
            capacity,
        }];
        let opts = SimOptions {
            ignore_size,
            ..SimOptions::default()
        };
        replay(ok(&recs), &configs, &opts, &|_| {}).expect("replay")[0].misses
    };
    // Objects are 100 bytes: 200 bytes hold 2 of them, unless sizes are ignored (200 objects).
    assert_eq!(
        run(Capacity::Bytes(200), true),
        run(Capacity::Keys(200), false)
    );
    assert!(run(Capacity::Bytes(200), false) > run(Capacity::Bytes(200), true));
}

/// Belady over a trace without next-access times would see no future and act as a poor FIFO:
/// it is refused by name (or alias) before the trace is read; over oracleGeneral it runs.
#[test]
fn belady_needs_an_oracle_general_trace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let csv = dir.path().join("t.csv");
    std::fs::write(&csv, "1,GET,7\n2,GET,7\n").expect("write");
    let opts = pliant_trace::ReadOptions {
        format: Some(pliant_trace::Format::Csv),
        ..Default::default()
    };
    for algo in ["belady", "MIN"] {
        let configs = [Config {
            algo: algo.into(),
            capacity: Capacity::Keys(10),
        }];
        let e = pliant_sim::replay_file(&csv, &opts, &configs, &SimOptions::default(), &|_| {})
            .expect_err("refused");
        assert!(
            matches!(&e, pliant_sim::SimError::NeedsNextAccess { algo: a, path } if a == algo && path == &csv),
            "{e}"
        );
    }
    let og = dir.path().join("t.oracleGeneral");
    let n = pliant_trace::write_workload(
        &og,
        Workload {
            popularity: Popularity::Zipf(1.0),
            keys: 100,
            requests: 2000,
            size: 1,
            rate: 100,
            seed: 3,
        },
    )
    .expect("write the workload");
    let configs = [Config {
        algo: "belady".into(),
        capacity: Capacity::Keys(10),
    }];
    let r = pliant_sim::replay_file(
        &og,
        &Default::default(),
        &configs,
        &SimOptions::default(),
        &|_| {},
    )
    .expect("belady over oracleGeneral");
    assert_eq!(r[0].requests, n);
    assert!(r[0].misses < n, "a 10-key optimum over Zipf hits sometimes");
}
