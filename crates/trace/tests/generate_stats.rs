//! Generators are deterministic and shaped as asked; statistics are exact on known traces.

use pliant_trace::{Op, Popularity, Record, StatsBuilder, Workload, generate};

fn zipf(seed: u64) -> Workload {
    Workload {
        popularity: Popularity::Zipf(1.0),
        keys: 1000,
        requests: 50_000,
        size: 100,
        rate: 1000,
        seed,
    }
}

#[test]
fn same_seed_same_trace_other_seed_other_trace() {
    let a: Vec<Record> = generate(zipf(7)).collect();
    let b: Vec<Record> = generate(zipf(7)).collect();
    let c: Vec<Record> = generate(zipf(8)).collect();
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert_eq!(a.len(), 50_000);
    assert_eq!(a.last().map(|r| r.time), Some(49));
}

#[test]
fn zipf_is_skewed_and_uniform_is_not() {
    let mut s = StatsBuilder::new();
    generate(zipf(1)).for_each(|r| s.add(&r));
    let z = s.finish(3);
    assert_eq!(z.top_keys[0].key, 1, "rank 1 is the most popular");
    // Zipf(1) over 1,000 keys: key 1 has 1/H(1000) ≈ 13.4% of requests.
    assert!(
        (z.top_keys[0].share - 0.134).abs() < 0.01,
        "{}",
        z.top_keys[0].share
    );
    let mut s = StatsBuilder::new();
    generate(Workload {
        popularity: Popularity::Uniform,
        ..zipf(1)
    })
    .for_each(|r| s.add(&r));
    let u = s.finish(1);
    assert!(u.top_keys[0].share < 0.002, "{}", u.top_keys[0].share);
    assert_eq!(u.distinct_keys, 1000);
}

#[test]
fn stats_on_a_hand_made_trace() {
    let mut recs = vec![
        Record::get(100, 1, 10),
        Record::get(100, 2, 20),
        Record::get(100, 1, 10),
        Record::get(101, 3, 30),
        Record::get(103, 1, 15),
    ];
    recs.push(Record {
        op: Op::Put,
        ..Record::get(103, 4, 40)
    });
    let mut s = StatsBuilder::new();
    recs.iter().for_each(|r| s.add(r));
    let st = s.finish(2);
    assert_eq!((st.requests, st.reads, st.writes), (6, 5, 1));
    assert_eq!(st.distinct_keys, 4);
    assert_eq!(st.working_set_bytes, 15 + 20 + 30 + 40, "last-seen sizes");
    assert_eq!(st.one_hit_wonders, 3);
    assert_eq!(st.time_span, (100, 103));
    assert_eq!(st.top_keys[0].key, 1);
    assert_eq!(st.top_keys[0].requests, 3);
    assert_eq!(st.reads_per_second, [(0, 3), (1, 1), (3, 1)]);
    assert_eq!(st.distinct_keys_per_second, [(0, 2), (1, 1), (3, 2)]);
}
