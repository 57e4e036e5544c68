//! An outside reference for the simulator's counts on the real d100K WorkManager trace
//! (`../shared/traces/parsplice/d100K/rank4.csv.gz`): libCacheSim's own C core, run over the same
//! trace by `tools/golden/parsplice_reference.py`, which commits its counts, the libCacheSim
//! version and its command in `tests/data/parsplice-d100K-libcachesim.json`.
//!
//! The mapping (the script's doc says it in full): Pliant counts misses of reads only, while
//! libCacheSim counts every request and has no write. The script hands libCacheSim every
//! logical operation, writes included, as a `get` of size 1 and counts the reads' misses apart
//! (`read_misses`); each key is written once before it is read, so each write is a miss that
//! inserts the key, as Pliant's write does, and libCacheSim's own total is `read_misses` plus
//! one per write. Pliant's misses must equal `read_misses`.

use pliant_cache::Capacity;
use pliant_sim::{Config, SimOptions, replay};
use pliant_trace::ReadOptions;

#[derive(serde::Deserialize)]
struct Reference {
    libcachesim: String,
    command: String,
    reads: u64,
    writes: u64,
    runs: Vec<Run>,
}

#[derive(serde::Deserialize)]
struct Run {
    algo: String,
    keys: u64,
    read_misses: u64,
    write_misses: u64,
    misses: u64,
}

fn reference() -> Reference {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/parsplice-d100K-libcachesim.json");
    let text = std::fs::read_to_string(&path).expect("the committed reference");
    serde_json::from_str(&text).expect("reference JSON")
}

#[test]
fn d100k_misses_equal_libcachesims_on_the_same_trace() {
    let r = reference();
    assert!(!r.libcachesim.is_empty() && r.command.contains("parsplice_reference.py"));
    // The reference's own bookkeeping: every write misses, and the total is reads' plus writes'.
    assert!(
        r.runs
            .iter()
            .any(|x| (x.algo.as_str(), x.keys) == ("lru", 100))
    );
    for x in &r.runs {
        assert_eq!(x.write_misses, r.writes, "{} {}", x.algo, x.keys);
        assert_eq!(x.misses, x.read_misses + x.write_misses);
    }
    let Some(trace) = pliant_testdata::shared("traces/parsplice/d100K/rank4.csv.gz") else {
        return;
    };
    let configs: Vec<Config> = r
        .runs
        .iter()
        .map(|x| Config {
            algo: x.algo.clone(),
            capacity: Capacity::Keys(x.keys),
        })
        .collect();
    let rd = pliant_trace::reader(&trace, &ReadOptions::default()).expect("open");
    let got = replay(rd, &configs, &SimOptions::default(), &|_| {}).expect("replay");
    let got: Vec<(String, u64, u64, u64)> = r
        .runs
        .iter()
        .zip(&got)
        .map(|(x, g)| (x.algo.clone(), x.keys, g.requests, g.misses))
        .collect();
    let want: Vec<(String, u64, u64, u64)> = r
        .runs
        .iter()
        .map(|x| (x.algo.clone(), x.keys, r.reads, x.read_misses))
        .collect();
    assert_eq!(
        got, want,
        "(algorithm, keys, reads, read misses): Pliant against libCacheSim {}",
        r.libcachesim
    );
}
