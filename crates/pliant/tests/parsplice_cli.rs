//! `pliant demo`, `pliant regimes` and `pliant parsplice` as a user runs them.

use crate::common::{err, json, ok, pliant};

#[test]
fn demo_json_has_every_policy_and_writes_the_report() {
    let d = tempfile::tempdir().expect("tempdir");
    let out = ok(&pliant(
        &["demo", "--hours", "0.2", "--nodes", "1", "--json"],
        d.path(),
    ));
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    let rows = v["policies"].as_array().expect("policies");
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["policy"].as_str().expect("name"))
        .collect();
    assert_eq!(
        names,
        [
            "unlimited",
            "lru-10",
            "lru-100",
            "lru-1000",
            "lru-10000",
            "lru-100000",
            "two-phase-100000-10",
            "two-phase-100000-100",
            "two-phase-100000-1000",
            "two-phase-100000-10000",
            "no-progress-100000-10",
            "auto"
        ]
    );
    for r in rows {
        for k in [
            "efficiency",
            "final_memory_bytes",
            "peak_memory_bytes",
            "mean_memory_bytes",
            "memory_fraction",
            "peak_fraction",
            "mean_fraction",
            "peak_store_reads_per_s",
        ] {
            assert!(r[k].is_number(), "{k} in {r}");
        }
    }
    // Each fraction is the row's memory over the unlimited cache's, in the same measure.
    let bytes = |r: &serde_json::Value, k: &str| r[k].as_f64().expect("bytes");
    for (fraction, measure) in [
        ("memory_fraction", "final_memory_bytes"),
        ("peak_fraction", "peak_memory_bytes"),
        ("mean_fraction", "mean_memory_bytes"),
    ] {
        let want = bytes(&rows[1], measure) / bytes(&rows[0], measure);
        let got = rows[1][fraction].as_f64().expect("fraction");
        assert!(
            (got - want).abs() < 1e-9 && got < 0.05,
            "{fraction}: {got} vs {want}"
        );
    }
    assert!(
        rows[1]["efficiency"].as_f64().expect("eff") < 1.0,
        "10 keys cost trajectory"
    );
    // The absolute figures beside the ratios: each trajectory is its efficiency times the
    // unlimited cache's, and a limited cache holds fewer keys than the unlimited one.
    let field = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k}"));
    let base = field(&rows[0], "trajectory");
    assert!(base > 0.0);
    for r in rows {
        let want = field(r, "efficiency") * base;
        assert!(
            (field(r, "trajectory") - want).abs() <= 1e-9 * base,
            "trajectory in {r}"
        );
        assert!(r["keys_held"].is_u64(), "keys_held in {r}");
    }
    let keys = |i: usize| rows[i]["keys_held"].as_u64().expect("keys_held");
    assert!(
        keys(1) <= 10 && keys(0) > keys(2),
        "lru-10 and lru-100 hold less"
    );
    assert!(
        (1..rows.len()).all(|i| keys(i) <= keys(0)),
        "none holds more than unlimited"
    );
    let html = std::fs::read_to_string(d.path().join("pliant-report/index.html")).expect("report");
    assert!(html.contains("lru-10") && html.contains("efficiency.svg"));
    assert!(d.path().join("pliant-report/memory.png").exists());
    // The front: fixed policies only, by memory, each point buying efficiency with memory.
    let front = v["front_final"].as_array().expect("front_final");
    let num = |p: &serde_json::Value, k: &str| p[k].as_f64().expect("number");
    assert!(front.len() >= 2, "{front:?}");
    assert!(
        front
            .windows(2)
            .all(|w| num(&w[0], "memory") < num(&w[1], "memory")
                && num(&w[0], "efficiency") < num(&w[1], "efficiency"))
    );
    assert!(front.iter().all(|p| p["policy"] != "auto"));
    // Every fixed policy run: the table's ten and the sweep's fourteen others.
    assert_eq!(v["fixed"].as_array().map(Vec::len), Some(24));
    assert!(html.contains("front-final.svg") && html.contains("front-mean.svg"));
}

/// `parsplice gen --set` takes the model's locality and stall constants and refuses, naming
/// them, what is not one, what is out of range and what a trace cannot show (the store's), and
/// writes nothing then.
#[test]
fn gen_set_refuses_bad_knobs_by_name_and_writes_nothing() {
    let d = tempfile::tempdir().expect("tempdir");
    for (set, says) in [
        ("p_hopp=0.1", "unknown knob \"p_hopp\""),
        ("p_current=1.5", "p_current=1.5: out of its range"),
        ("p_move=x", "is not a number"),
        ("store_reads_per_s=5", "store_*"),
        ("miss_penalty=1", "miss_penalty"),
    ] {
        let e = err(&pliant(
            &["parsplice", "gen", "--hours", "0.01", "--set", set, "m.csv"],
            d.path(),
        ));
        assert!(e.contains(says), "--set {set}: {e}");
        assert!(
            !d.path().join("m.csv").exists(),
            "--set {set} wrote a trace"
        );
    }
    ok(&pliant(
        &[
            "parsplice",
            "gen",
            "--hours",
            "0.01",
            "--set",
            "p_hop=0.1",
            "--set",
            "recency_shape=0.5",
            "m.csv",
        ],
        d.path(),
    ));
    assert!(d.path().join("m.csv").exists());
}

#[test]
fn generated_parsplice_trace_feeds_regimes_and_demo() {
    let d = tempfile::tempdir().expect("tempdir");
    ok(&pliant(
        &["parsplice", "gen", "--hours", "0.5", "m.csv.gz"],
        d.path(),
    ));
    let out = ok(&pliant(
        &["regimes", "m.csv.gz", "--json", "--plot", "r.svg"],
        d.path(),
    ));
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["regimes"].as_array().expect("regimes").len(), 4);
    assert!(v["suggested_threshold_keys"].as_u64().expect("threshold") > 0);
    assert!(v["fan_regimes"].as_u64().expect("fans") >= 1);
    assert!(
        std::fs::read_to_string(d.path().join("r.svg"))
            .expect("svg")
            .contains("regime")
    );
    let out = ok(&pliant(
        &[
            "demo",
            "--trace",
            "m.csv.gz",
            "--hours",
            "0.5",
            "--json",
            "--report",
            "rep",
            "--no-front",
        ],
        d.path(),
    ));
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["nodes"], 1, "a trace is one WorkManager's");
    assert_eq!(
        v["policies"][0]["policy"], "unlimited",
        "the reference comes first"
    );
}

#[test]
fn demo_rejects_bad_numbers() {
    let d = tempfile::tempdir().expect("tempdir");
    let o = pliant(&["demo", "--hours", "0"], d.path());
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("must be positive"));
}

/// A replay no policy can lose on says so, in the table's output and in the JSON; a trace shorter
/// than one decision is refused with its name.
#[test]
fn demo_on_a_degenerate_trace_warns_or_refuses() {
    let d = tempfile::tempdir().expect("tempdir");
    // Every read is of a state never seen: no cache serves any of them.
    let text: String = (0..60)
        .map(|i| format!("{},DBMemoryGet,0,{}\n", 1000 + i * 5, 100 + i))
        .collect();
    std::fs::write(d.path().join("fresh.csv"), text).expect("write");
    let out = ok(&pliant(
        &["demo", "--trace", "fresh.csv", "--no-front"],
        d.path(),
    ));
    assert!(
        out.contains("warning: every policy replayed the trace"),
        "{out}"
    );
    let v = json(&pliant(
        &[
            "demo",
            "--trace",
            "fresh.csv",
            "--json",
            "--report",
            "j",
            "--no-front",
        ],
        d.path(),
    ));
    let warnings = v["warnings"].as_array().expect("warnings");
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().is_some_and(|w| w.contains("nothing to decide"))),
        "{warnings:?}"
    );
    assert_eq!(v["replay"]["reads"], 60);
    assert_eq!(v["replay"]["rereads"], 0);

    std::fs::write(
        d.path().join("short.csv"),
        "1000,DBMemoryGet,0,1\n1004,DBMemoryGet,0,1\n",
    )
    .expect("write");
    let e = err(&pliant(&["demo", "--trace", "short.csv"], d.path()));
    assert!(
        e.contains("short.csv") && e.contains("shorter than one policy decision"),
        "{e}"
    );
}

/// `python3 tools/fit/SCRIPT ARGS…` from the repository root, with `CI` as given.
fn fit_tool(script: &str, args: &[&str], ci: Option<&str>) -> std::process::Output {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut cmd = std::process::Command::new("python3");
    cmd.arg(std::path::Path::new("tools/fit").join(script))
        .args(args)
        .current_dir(&root)
        .env_remove("CI");
    if let Some(ci) = ci {
        cmd.env("CI", ci);
    }
    cmd.output().expect("python3")
}

fn counters_script(args: &[&str], ci: Option<&str>) -> std::process::Output {
    fit_tool("parsplice_counters.py", args, ci)
}

/// Without the measured runs the counters script stops with status 2 naming what is missing,
/// in CI too, where it says so loudly.
#[test]
fn the_counters_script_names_the_missing_data() {
    let d = tempfile::tempdir().expect("tempdir");
    let nowhere = d.path().join("nowhere");
    for ci in [None, Some("true")] {
        let out = counters_script(&["--shared", &nowhere.to_string_lossy()], ci);
        let text = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text}");
        assert!(
            text.contains(
                &*nowhere
                    .join("results/parsplice-8node-policies")
                    .to_string_lossy()
            ),
            "{text}"
        );
        assert_eq!(text.contains("CI: "), ci.is_some(), "{text}");
    }
}

/// The counters script on the measured runs beside the repository: its JSON has every run and
/// field, and the figures ../shared/results/README.md quotes from the same files.
#[test]
fn the_counters_script_reads_the_measured_runs() {
    let Some(perf) = pliant_testdata::shared("results/parsplice-8node-policies/perf") else {
        return;
    };
    let shared = perf.join("../../..");
    let d = tempfile::tempdir().expect("tempdir");
    let file = d.path().join("counters.json");
    let out = counters_script(
        &[
            "--shared",
            &shared.to_string_lossy(),
            "--json",
            &file.to_string_lossy(),
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("| run | trajectory 1 h |"));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("json")).expect("json");
    let runs = v["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 8);
    let run = |name: &str| {
        runs.iter()
            .find(|r| r["run"].as_str().is_some_and(|n| n.starts_with(name)))
            .unwrap_or_else(|| panic!("{name}"))
    };
    let num = |r: &serde_json::Value, path: &[&str]| {
        path.iter()
            .fold(r, |v, k| &v[*k])
            .as_f64()
            .unwrap_or_else(|| panic!("{path:?} in {}", r["run"]))
    };
    for r in runs {
        for at in ["3600", "9000", "15000"] {
            for k in ["trajectory", "keys_held", "bytes_held"] {
                assert!(num(r, &[k, at]) >= 0.0);
            }
        }
        for w in ["0-3600", "3600-6600", "9000-12000", "12000-end"] {
            for k in [
                "wm_gets_per_s",
                "wm_puts_per_s",
                "ldb_puts_per_s",
                "ldb_gets_per_s",
            ] {
                assert!(num(r, &["rates", w, k]) >= 0.0);
            }
        }
        assert_eq!(r["put_unique_equals_put"], true, "README: Unique = Put");
        let two_phase = r["run"]
            .as_str()
            .is_some_and(|n| n.contains("cachedecrease"));
        assert_eq!(r["trim_s"].is_number(), two_phase, "{}", r["run"]);
        if two_phase {
            // README: the trims at 6,680-6,910 s, from about 99,600-99,950 keys.
            assert!((6_600.0..7_000.0).contains(&num(r, &["trim_s"])));
            assert!(num(r, &["keys_before_trim"]) > 99_000.0);
        }
    }
    let unlimited = run("scale-cachelimit-8n-unlimited");
    let keys = num(unlimited, &["keys_held", "9000"]);
    assert!((50_000.0..1_000_000.0).contains(&keys), "{keys}");
    let per_key = num(unlimited, &["bytes_per_key", "9000"]);
    assert!(
        (3_300.0..4_600.0).contains(&per_key),
        "README: 3.3-4.6 KB a key: {per_key}"
    );
    assert_eq!(num(unlimited, &["trajectory", "9000"]), 5_182_228.0);
    assert!(
        unlimited["stop_s"].is_null(),
        "the unlimited run grows to the end"
    );
    assert!(unlimited["keys_fit"]["b"].is_number());
    // The stops the issue quotes, and each run's last LevelDB get before it (README).
    for (name, stop, last_get) in [
        ("scale-cachedecrease-8n-10-", 7_000.0, 6_941.0),
        ("scale-cachedecrease-8n-100-", 8_300.0, 8_263.0),
        ("scale-cachedecrease-8n-1000-", 6_900.0, 6_852.0),
        ("scale-cachedecrease-8n-10000-", 10_100.0, 9_997.0),
        ("scale-cachelimit-8n-10-", 12_200.0, 12_195.0),
    ] {
        assert_eq!(num(run(name), &["stop_s"]), stop, "{name}");
        assert_eq!(num(run(name), &["last_ldb_get_s"]), last_get, "{name}");
    }
    // README's final totals: the unlimited run's InMemoryDB got 260,731 puts, LevelDB 252,631;
    // the shortfall at the end is theirs.
    let end = unlimited["unstored"]
        .as_array()
        .expect("unstored")
        .iter()
        .find(|u| u["at"] == "end")
        .expect("end");
    assert_eq!(num(end, &["missing"]), 260_731.0 - 252_631.0);
    let gets: f64 = ["10-", "100-", "1000-", "10000-"]
        .iter()
        .map(|n| {
            num(
                run(&format!("scale-cachedecrease-8n-{n}")),
                &["ldb_gets_trim_to_stop"],
            )
        })
        .sum();
    assert!((500.0..700.0).contains(&gets), "{gets}");
}

/// The model's rates and sizes are the fit script's, on the unlimited run: `--check` passes on
/// the committed model.rs, and each fit is within its stated error on the runs it was not
/// fitted on (the docs quote these).
#[test]
fn the_model_holds_the_fit_of_the_unlimited_run() {
    let Some(perf) = pliant_testdata::shared("results/parsplice-8node-policies/perf") else {
        return;
    };
    let shared = perf.join("../../..");
    let d = tempfile::tempdir().expect("tempdir");
    let file = d.path().join("fit.json");
    let out = fit_tool(
        "parsplice_model.py",
        &[
            "--shared",
            &shared.to_string_lossy(),
            "--json",
            &file.to_string_lossy(),
            "--check",
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("json")).expect("json");
    assert_eq!(v["fitted_on"], "scale-cachelimit-8n-unlimited-71994");
    let judged = v["judged"].as_array().expect("judged");
    assert_eq!(
        judged.len(),
        10,
        "the fitted run, the two traces also fitted on, and the seven others"
    );
    // The six runs whose policy acts only later (LRU 10's workers waited on its cache from the
    // start: its production is not the fit's to judge).
    let held_out: Vec<_> = judged
        .iter()
        .filter(|j| {
            j["run"]
                .as_str()
                .is_some_and(|r| !r.contains("fitted on") && !r.starts_with("LRU 10"))
        })
        .collect();
    assert_eq!(held_out.len(), 6);
    for j in held_out {
        let rms = |k: &str| j[k].as_f64();
        let states = j["states"]["total_error"].as_f64().expect("states");
        assert!(states.abs() < 0.15, "states {states} on {}", j["run"]);
        if let Some(t) = rms("trajectory_rms") {
            assert!(t < 0.05, "trajectory {t} on {}", j["run"]);
        }
        assert!(
            rms("production_rms").expect("production") < 0.2,
            "{}",
            j["run"]
        );
        assert!(rms("md_per_get_rms").expect("md") < 0.05, "{}", j["run"]);
        if let Some(b) = rms("bytes_rms") {
            assert!(b < 0.01, "bytes {b} on {}", j["run"]);
        }
    }
}
