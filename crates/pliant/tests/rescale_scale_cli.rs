//! The lean version of `tools/bench/rescale_scale.sh` (issue 34): the script itself, on a
//! local cluster of this build holding 20,000 keys of 1 KiB spread over every slot, one node
//! commissioned and decommissioned idle and then under redis-benchmark's load with the
//! checker writing; no Redis Cluster beside it. It needs redis-cli, redis-benchmark, python3
//! and stdbuf: in CI (`CI` set) a missing one fails the test, elsewhere the test skips, saying
//! so.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long the whole script may take (it bounds each of its own steps too).
const LIMIT: Duration = Duration::from_secs(900);

fn on_path(c: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {c}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn a_commission_and_a_decommission_of_a_loaded_cluster_lose_no_key_and_report_every_figure() {
    let missing: Vec<&str> = [
        "redis-cli",
        "redis-benchmark",
        "python3",
        "stdbuf",
        "timeout",
    ]
    .into_iter()
    .filter(|c| !on_path(c))
    .collect();
    if !missing.is_empty() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI: rescale_scale.sh needs {} (apt-get install redis-tools python3 coreutils)",
            missing.join(", ")
        );
        pliant_testdata::skip(&format!(
            "rescale_scale.sh test skipped: {} missing (apt-get install redis-tools)",
            missing.join(", ")
        ));
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/bench/rescale_scale.sh");
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("out.json");
    let log = dir.path().join("stderr.log");
    let mut child = Command::new(&script)
        .args(["--keys", "20000", "--no-redis", "--json"])
        .arg(&json)
        .env("PLIANT_BIN", env!("CARGO_BIN_EXE_pliant"))
        .env("MOVE_TIMEOUT", "300")
        .env("LOAD_TIMEOUT", "300")
        // Iterations of a fraction of a second against a debug build.
        .env("GET_CHUNK", "4000")
        .env("SET_CHUNK", "1000")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("run tools/bench/rescale_scale.sh");
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if start.elapsed() > LIMIT {
            // Its trap stops the cluster and the load by their pids.
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let stopping = Instant::now();
            while child.try_wait().expect("wait").is_none()
                && stopping.elapsed() < Duration::from_secs(120)
            {
                std::thread::sleep(Duration::from_millis(200));
            }
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "rescale_scale.sh took over {LIMIT:?}: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let out = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        status.success(),
        "rescale_scale.sh failed ({status}):\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("| pliant | loaded decommission |"),
        "no table: {stdout}"
    );
    let all: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("the --json file"))
            .expect("JSON");
    let v = &all["verify"];
    assert_eq!(v["keys"], 20000, "{v}");
    assert_eq!(v["missing"], 0, "keys lost: {v}");
    assert_eq!(v["wrong"], 0, "keys with another value: {v}");
    assert!(
        all["loads"]["pliant"]["ok"].as_bool() == Some(true),
        "{all}"
    );
    let phases = all["phases"].as_array().expect("phases");
    let names: Vec<&str> = phases.iter().filter_map(|p| p["phase"].as_str()).collect();
    assert_eq!(
        names,
        [
            "idle commission",
            "idle decommission",
            "loaded commission",
            "loaded decommission"
        ],
        "{all}"
    );
    for p in phases {
        for f in [
            "seconds",
            "wall_seconds",
            "t_t",
            "duration_over_t_t",
            "cpu_seconds",
            "cpu_us_per_key",
            "links_t_max",
        ] {
            assert!(p[f].as_f64().is_some_and(|x| x > 0.0), "{f} in {p}");
        }
        assert!(p["bytes_moved"].as_u64().is_some_and(|x| x > 0), "{p}");
        assert!(
            p["bandwidth_between"]
                .as_str()
                .is_some_and(|b| b.contains(" -> ") && !b.starts_with("this process")),
            "measured between two nodes: {p}"
        );
        assert!(p["keys_moved"].as_u64().is_some_and(|x| x > 0), "{p}");
        if p["phase"].as_str().is_some_and(|n| n.starts_with("loaded")) {
            for side in ["load_during", "load_without"] {
                for f in ["ops_per_s", "p50_ms", "p99_ms"] {
                    assert!(
                        p[side][f].as_f64().is_some_and(|x| x > 0.0),
                        "{side}.{f} in {p}"
                    );
                }
            }
            let c = &p["checker"];
            assert!(
                c["acknowledged_keys"].as_u64().is_some_and(|n| n > 0),
                "{c}"
            );
            assert_eq!(c["lost"], 0, "acknowledged writes lost: {c}");
            assert_eq!(c["stale"], 0, "stale reads: {c}");
            assert_eq!(c["errors"], 0, "checker errors: {c}");
        }
    }
}
