//! `pliant sim` and `pliant trace` as a user runs them.

use std::path::Path;

use crate::common::{err, ok, pliant};

#[test]
fn gen_convert_stats_and_sim_with_belady() {
    let d = tempfile::tempdir().expect("tempdir");
    ok(&pliant(
        &[
            "trace",
            "gen",
            "--keys",
            "500",
            "--requests",
            "20000",
            "--seed",
            "3",
            "z.oracleGeneral",
        ],
        d.path(),
    ));
    let stats: serde_json::Value = serde_json::from_str(&ok(&pliant(
        &["trace", "stats", "z.oracleGeneral", "--json"],
        d.path(),
    )))
    .expect("json");
    assert_eq!(stats["requests"], 20000);
    assert_eq!(stats["reads"], 20000);
    assert!(stats["distinct_keys"].as_u64().expect("keys") <= 500);

    let out = ok(&pliant(
        &[
            "sim",
            "z.oracleGeneral",
            "--algo",
            "lru,belady,s3fifo:small=0.2",
            "--size",
            "50keys,200keys",
            "--json",
        ],
        d.path(),
    ));
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).expect("json array");
    assert_eq!(rows.len(), 6);
    for key in [
        "algo",
        "size",
        "requests",
        "misses",
        "miss_ratio",
        "byte_misses",
        "byte_miss_ratio",
        "seconds",
        "mreq_per_s",
    ] {
        assert!(rows.iter().all(|r| r.get(key).is_some()), "missing {key}");
    }
    let miss = |algo: &str, size: &str| {
        rows.iter()
            .find(|r| r["algo"] == algo && r["size"] == size)
            .and_then(|r| r["misses"].as_u64())
            .expect("row")
    };
    assert!(miss("belady", "50keys") < miss("lru", "50keys"));
    assert!(miss("lru", "200keys") < miss("lru", "50keys"));
}

#[test]
fn convert_parsplice_csv_then_replay_the_binary_identically() {
    let d = tempfile::tempdir().expect("tempdir");
    let mut csv = String::new();
    for i in 0..300u64 {
        csv.push_str(&format!("{},DBMemoryGet,0,{}\n", 1000 + i / 10, i % 37));
        csv.push_str(&format!("{},DBMemoryMRUGet,0,{}\n", 1000 + i / 10, i % 37));
    }
    std::fs::write(d.path().join("rank4.csv"), csv).expect("write");
    ok(&pliant(
        &[
            "trace",
            "convert",
            "rank4.csv",
            "--to",
            "oracle-general",
            "r.oracleGeneral.gz",
        ],
        d.path(),
    ));
    let sim = |file: &str| -> serde_json::Value {
        serde_json::from_str(&ok(&pliant(
            &["sim", file, "--algo", "arc", "--size", "10keys", "--json"],
            d.path(),
        )))
        .expect("json")
    };
    let (a, b) = (sim("rank4.csv"), sim("r.oracleGeneral.gz"));
    assert_eq!(a[0]["misses"], b[0]["misses"]);
    assert_eq!(a[0]["requests"], 300);
}

#[test]
fn sim_with_policy_reports_timeline_and_plots() {
    let d = tempfile::tempdir().expect("tempdir");
    ok(&pliant(
        &[
            "trace",
            "gen",
            "--keys",
            "2000",
            "--requests",
            "50000",
            "--rate",
            "1000",
            "g.bin",
        ],
        d.path(),
    ));
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies/static-limit.lua");
    let repo = repo.to_str().expect("utf8");
    let out = ok(&pliant(
        &[
            "sim",
            "g.bin",
            "--algo",
            "lru",
            "--size",
            "unlimited",
            "--policy",
            repo,
            "--param",
            "limit=300",
            "--interval",
            "5",
            "--json",
            "--plot",
            "p.svg",
        ],
        d.path(),
    ));
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).expect("json");
    assert_eq!(rows[0]["resizes"][0], serde_json::json!([5, 300]));
    assert_eq!(rows[0]["timeline"].as_array().expect("timeline").len(), 10);
    assert!(rows[0]["final_keys"].as_u64().expect("keys") <= 300);
    for (f, title) in [("p.svg", "Miss ratio"), ("p-timeline.svg", "Keys held")] {
        let svg = std::fs::read_to_string(d.path().join(f)).expect(f);
        assert!(svg.contains("<svg") && svg.contains(title), "{f}");
    }
}

#[test]
fn bad_inputs_name_the_problem() {
    let d = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        d.path().join("t.csv"),
        "1,DBMemoryGet,0,5\n2,DBMemoryGet,0,x\n",
    )
    .expect("w");
    let e = err(&pliant(&["sim", "t.csv", "--size", "10keys"], d.path()));
    assert!(e.contains("t.csv:2:"), "{e}");
    let o = ok(&pliant(
        &["sim", "t.csv", "--size", "10keys", "--lenient", "--json"],
        d.path(),
    ));
    assert!(o.contains("\"requests\": 1"), "{o}");
    let e = err(&pliant(
        &["sim", "t.csv", "--size", "10keys", "--format", "parquet"],
        d.path(),
    ));
    assert!(e.contains("parsplice, oracle-general, csv, twitter"), "{e}");
    let e = err(&pliant(&["sim", "t.csv", "--size", "10furlongs"], d.path()));
    assert!(e.contains("10furlongs"), "{e}");
    let e = err(&pliant(
        &["sim", "t.csv", "--size", "10keys", "--algo", "lirs"],
        d.path(),
    ));
    assert!(
        e.contains("unknown algorithm") && e.contains("sieve"),
        "{e}"
    );
    let e = err(&pliant(
        &["sim", "t.csv", "--size", "10keys", "--algo", "belady"],
        d.path(),
    ));
    assert!(e.contains("trace convert"), "{e}");
    std::fs::write(d.path().join("x.oracleGeneral"), [0u8; 30]).expect("w");
    let e = err(&pliant(
        &["sim", "x.oracleGeneral", "--size", "10keys"],
        d.path(),
    ));
    assert!(e.contains("truncated at byte 24"), "{e}");
}
