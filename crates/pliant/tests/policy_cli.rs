//! `pliant policy` and `pliant demo` as a user runs them: exit codes, output shapes, errors.

use std::path::Path;

use crate::common::{dir_with, pliant, stderr, stdout};

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

#[test]
fn check_passes_every_shipped_policy_file() {
    let o = pliant(
        &[
            "policy",
            "check",
            "policies/parsplice-absorb-trim.lua",
            "policies/static-limit.lua",
            "policies/regime-fan.lua",
            "policies/cephfs-greedy-spill",
        ],
        repo(),
    );
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert_eq!(
        stdout(&o).lines().filter(|l| l.starts_with("ok ")).count(),
        4
    );
}

/// The policy guide's first check example (docs/policies.md), every shipped policy file with its glob: the `fs-*`
/// policies failed it, dry-run in a cluster of caches that has no `high` or `capacity`.
#[test]
fn the_readmes_policy_check_passes_the_fs_policies_in_the_fs_environment() {
    let mut files: Vec<String> = std::fs::read_dir(repo().join("policies"))
        .expect("policies")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".lua"))
        .map(|n| format!("policies/{n}"))
        .collect();
    files.sort();
    files.push("policies/cephfs-greedy-spill".into());
    let mut args = vec!["policy", "check"];
    args.extend(files.iter().map(String::as_str));
    let o = pliant(&args, repo());
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    let line = out
        .lines()
        .find(|l| l.contains("fs-evict-watermarks.lua"))
        .expect("a line for the eviction policy");
    // 95% full past a 90% watermark: evict down to 70% of 1 GiB.
    assert!(
        line.contains("in fs:") && line.contains("when=true") && line.contains("howmuch=751619276"),
        "{line}"
    );
    assert!(
        out.contains("static-limit.lua (static-limit, functions) in tier:"),
        "{out}"
    );
    let o = pliant(
        &["policy", "check", "--env", "tier", "fs-evict-watermarks"],
        repo(),
    );
    assert_eq!(
        o.status.code(),
        Some(1),
        "no `high` among a cache cluster's metrics"
    );
    assert!(stdout(&o).contains("in tier: "), "{}", stdout(&o));
}

#[test]
fn a_syntax_error_names_its_file_and_line_once() {
    let dir = dir_with(&[("syn.lua", "function when()\n  x = = 1\nend\n")]);
    let o = pliant(&["policy", "check", "syn.lua"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(out.contains("syn.lua:2: syntax error: "), "{out}");
    assert_eq!(
        out.matches("syn.lua").count(),
        2,
        "the FAIL line and the error: {out}"
    );
}

#[test]
fn a_runaway_policy_reports_the_instructions_that_stopped_it() {
    let dir = dir_with(&[
        ("loop.lua", "function when() while true do end end"),
        ("m.json", r#"{"whoami": 0, "servers": {"0": {"keys": 1}}}"#),
    ]);
    let o = pliant(
        &[
            "policy",
            "run",
            "loop.lua",
            "--metrics",
            "m.json",
            "--budget",
            "100000",
            "--json",
        ],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    assert_eq!(v["instructions"], 100_000, "{v}");
    assert!(
        v["error"].as_str().expect("error").contains("budget"),
        "{v}"
    );
}

#[test]
fn check_fails_with_file_and_line() {
    let dir = dir_with(&[("bad.lua", "function when()\n  return nil + 1\nend\n")]);
    let o = pliant(&["policy", "check", "bad.lua"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(out.contains("FAIL  bad.lua"), "{out}");
    assert!(out.contains("bad.lua:2:"), "{out}");
}

#[test]
fn run_json_has_the_documented_shape() {
    let dir = dir_with(&[(
        "m.json",
        r#"{"whoami": 0, "servers": {"0": {"keys": 5000}}}"#,
    )]);
    let o = pliant(
        &[
            "policy",
            "run",
            "static-limit",
            "--metrics",
            "m.json",
            "--param",
            "limit=1000",
            "--json",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    assert_eq!(v["when"], true);
    assert_eq!(v["howmuch"], 1000.0);
    assert_eq!(v["where"], serde_json::json!({}));
    assert_eq!(v["error"], serde_json::Value::Null);
    assert!(v["instructions"].is_u64());
    assert!(v["micros"].as_f64().expect("micros") > 0.0);
}

#[test]
fn run_with_state_dir_continues_across_runs_and_timeseries_csv() {
    let dir = dir_with(&[
        (
            "m.json",
            r#"{"whoami": 0, "servers": {"0": {"keys": 150}}}"#,
        ),
        ("ts.csv", "ts,value\n0,1\n1,1\n2,5\n3,5\n"),
    ]);
    let args = |p: &'static str| {
        vec![
            "policy",
            "run",
            p,
            "--metrics",
            "m.json",
            "--state-dir",
            "state",
            "--param",
            "absorb=100",
            "--param",
            "target=10",
            "--timeseries",
            "ts.csv",
            "--json",
        ]
    };
    let o = pliant(&args("parsplice-absorb-trim"), dir.path());
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    assert_eq!(v["when"], true, "{v}");
    assert!(
        dir.path()
            .join("state/parsplice-absorb-trim.state.json")
            .exists()
    );
    // Shrink below absorb: the persisted state still says "trim above target".
    std::fs::write(
        dir.path().join("m.json"),
        r#"{"whoami": 0, "servers": {"0": {"keys": 50}}}"#,
    )
    .expect("write");
    let o = pliant(&args("parsplice-absorb-trim"), dir.path());
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    assert_eq!(v["when"], true, "{v}");
    assert_eq!(v["howmuch"], 10.0);

    let o = pliant(&args("regime-fan"), dir.path());
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    assert_eq!(v["when"], true, "two regimes in ts.csv: {v}");
    assert_eq!(v["howmuch"], 2.0);
}

#[test]
fn run_json_reports_policy_errors_and_exits_1() {
    let dir = dir_with(&[
        ("m.json", r#"{"whoami": 0, "servers": {"0": {}}}"#),
        ("p.lua", "function when() return 'yes' end"),
    ]);
    let o = pliant(
        &["policy", "run", "p.lua", "--metrics", "m.json", "--json"],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    assert_eq!(v["when"], serde_json::Value::Null);
    assert!(
        v["error"]
            .as_str()
            .expect("error")
            .contains("expected a boolean")
    );
}

#[test]
fn bad_inputs_name_file_line_or_field() {
    let run = ["policy", "run", "static-limit", "--metrics", "m.json"];
    let fine = r#"{"whoami": 0, "servers": {"0": {}}}"#;
    for (files, extra, says) in [
        (
            [(
                "m.json",
                "{\"whoami\": 0,\n \"servers\": {\"0\": {\"keys\": \"many\"}}}",
            )],
            &[][..],
            "servers[0][keys]",
        ),
        (
            [("m.json", r#"{"whoami": 9, "servers": {"0": {}}}"#)],
            &[],
            "whoami 9 is not among the servers",
        ),
        ([("m.json", fine)], &["--timeseries", "ts.csv"], "ts.csv:2:"),
    ] {
        let dir = dir_with(&files);
        std::fs::write(dir.path().join("ts.csv"), "1,2\n3,x\n").expect("write");
        let args: Vec<&str> = run.iter().chain(extra).copied().collect();
        let o = pliant(&args, dir.path());
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
    let dir = dir_with(&[("m.json", fine)]);
    let o = pliant(
        &["policy", "run", "no-such-policy", "--metrics", "m.json"],
        dir.path(),
    );
    assert!(
        stderr(&o).contains("not a shipped policy"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn policy_demo_runs_and_json_is_parseable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = pliant(&["policy", "demo", "--json"], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    // What the scenarios decide is tested in pliant-policy; here, that all three are printed.
    assert_eq!(v["cache"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        v["spill"].as_array().map(Vec::len),
        Some(12),
        "--ticks defaults to 12"
    );
    assert_eq!(v["fan"].as_array().map(Vec::len), Some(12));
    let text = stdout(&pliant(&["policy", "demo", "--ticks", "3"], dir.path()));
    for section in [
        "parsplice-absorb-trim",
        "static-limit",
        "cephfs-greedy-spill",
        "regime-fan",
    ] {
        assert!(text.contains(section), "{section} missing from\n{text}");
    }
}
