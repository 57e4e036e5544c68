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

#[test]
fn an_impossible_workload_is_refused_naming_the_field() {
    for (w, field) in [
        (Workload { keys: 0, ..zipf(1) }, "keys"),
        (Workload { rate: 0, ..zipf(1) }, "rate"),
        (
            Workload {
                popularity: Popularity::Zipf(-1.0),
                ..zipf(1)
            },
            "alpha",
        ),
        (
            Workload {
                popularity: Popularity::Zipf(f64::NAN),
                ..zipf(1)
            },
            "alpha",
        ),
    ] {
        let e = w.validate().expect_err("invalid");
        assert!(e.to_string().starts_with(field), "{field}: {e}");
    }
    assert!(zipf(1).validate().is_ok());
    assert!(matches!(Popularity::named("zipf", 0.8), Ok(Popularity::Zipf(a)) if a == 0.8));
    assert!(matches!(
        Popularity::named("uniform", 5.0),
        Ok(Popularity::Uniform)
    ));
    let e = Popularity::named("pareto", 1.0).expect_err("unknown");
    assert!(e.to_string().contains("zipf or uniform"), "{e}");
}

#[test]
fn a_written_workload_reads_back_with_its_next_access_times() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("z.oracleGeneral.gz");
    let w = Workload {
        requests: 5000,
        ..zipf(4)
    };
    assert_eq!(
        pliant_trace::write_workload(&path, w).expect("written"),
        5000
    );
    let back: Vec<Record> = pliant_trace::reader(&path, &Default::default())
        .expect("opens")
        .collect::<Result<_, _>>()
        .expect("reads");
    let mut expected: Vec<Record> = generate(w).collect();
    pliant_trace::fill_next_access(&mut expected);
    assert_eq!(back, expected);
    assert!(back.iter().any(|r| r.next_access > 0));
    // Converting it again changes nothing.
    let again = dir.path().join("again.oracleGeneral");
    let c = pliant_trace::convert_to_oracle_general(&path, &Default::default(), &again, &|_| {})
        .expect("converts");
    assert_eq!((c.records, c.skipped), (5000, 0));
    assert_eq!(std::fs::read(&again).expect("read"), {
        let plain = dir.path().join("plain.oracleGeneral");
        pliant_trace::write_oracle_general(&plain, &expected).expect("write");
        std::fs::read(&plain).expect("read")
    });
}
