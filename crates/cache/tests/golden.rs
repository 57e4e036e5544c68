//! Golden miss counts: every libCacheSim-compatible algorithm on committed seeded traces must
//! miss exactly as often as libCacheSim 0.3.5 does (counts produced by
//! `tools/golden/make_goldens.py` running libCacheSim's C core).

use std::io::Read;

use pliant_cache::{Capacity, NO_NEXT_ACCESS, Request};

#[derive(serde::Deserialize)]
struct Golden {
    traces: std::collections::BTreeMap<String, Trace>,
}

#[derive(serde::Deserialize)]
struct Trace {
    file: String,
    requests: usize,
    runs: Vec<Run>,
}

#[derive(serde::Deserialize)]
struct Run {
    algo: String,
    units: String,
    capacity: u64,
    misses: u64,
}

fn data(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// Decodes a gzipped oracleGeneral trace (24-byte little-endian records).
fn load(file: &str) -> Vec<Request> {
    let f = std::fs::File::open(data(file)).expect("trace file");
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(f)
        .read_to_end(&mut raw)
        .expect("gunzip");
    assert_eq!(raw.len() % 24, 0, "whole records");
    raw.chunks_exact(24)
        .map(|r| {
            let key = u64::from_le_bytes(r[4..12].try_into().expect("8 bytes"));
            let size = u32::from_le_bytes(r[12..16].try_into().expect("4 bytes"));
            let next = i64::from_le_bytes(r[16..24].try_into().expect("8 bytes"));
            Request {
                key,
                size,
                next_access: if next < 0 { NO_NEXT_ACCESS } else { next },
            }
        })
        .collect()
}

fn golden() -> Golden {
    serde_json::from_str(&std::fs::read_to_string(data("golden.json")).expect("golden.json"))
        .expect("golden json")
}

fn replay(algo: &str, capacity: Capacity, reqs: &[Request]) -> u64 {
    let mut c = pliant_cache::cache(algo, capacity).expect("algorithm");
    for r in reqs {
        c.access(r);
    }
    c.stats().misses
}

#[test]
fn miss_counts_match_libcachesim_exactly() {
    let g = golden();
    let mut failures = Vec::new();
    let mut checked = 0;
    for (name, t) in &g.traces {
        let reqs = load(&t.file);
        assert_eq!(reqs.len(), t.requests, "{name}");
        for run in &t.runs {
            let capacity = match run.units.as_str() {
                "bytes" => Capacity::Bytes(run.capacity),
                _ => Capacity::Keys(run.capacity),
            };
            let got = replay(&run.algo, capacity, &reqs);
            checked += 1;
            if got != run.misses {
                failures.push(format!(
                    "{name} {} {capacity}: libCacheSim {} ours {got}",
                    run.algo, run.misses
                ));
            }
        }
    }
    assert!(checked >= 150, "golden file lost runs: {checked}");
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// On unit-size traces a byte capacity and a key capacity are the same cache.
#[test]
fn unit_trace_gives_same_misses_in_bytes_and_keys() {
    let reqs = load("zipf-unit.oracleGeneral.gz");
    for algo in pliant_cache::ALGORITHMS.iter().map(|a| a.name) {
        assert_eq!(
            replay(algo, Capacity::Bytes(100), &reqs),
            replay(algo, Capacity::Keys(100), &reqs),
            "{algo}"
        );
    }
}

/// W-TinyLFU is Pliant's own design (libCacheSim's variant differs), so its counts are pinned
/// against itself: a change to them must be deliberate. Values from this implementation.
#[test]
fn wtinylfu_regression_pins() {
    let pins = [
        (
            "zipf-unit.oracleGeneral.gz",
            Capacity::Keys(100),
            PIN_UNIT_100,
        ),
        (
            "zipf-unit.oracleGeneral.gz",
            Capacity::Keys(1000),
            PIN_UNIT_1000,
        ),
        (
            "scan-loop.oracleGeneral.gz",
            Capacity::Keys(200),
            PIN_SCAN_200,
        ),
    ];
    for (file, cap, want) in pins {
        assert_eq!(replay("wtinylfu", cap, &load(file)), want, "{file} {cap}");
    }
}

const PIN_UNIT_100: u64 = 7611;
const PIN_UNIT_1000: u64 = 2695;
const PIN_SCAN_200: u64 = 6691;
