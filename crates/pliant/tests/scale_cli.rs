//! `pliant scale` as a user runs it.

use crate::common::{dir_with, err, json as ok, pliant};

const CLUSTER: &str = r#"{
  "servers": [1, 2, 3],
  "buckets": [
    {"id": 10, "size": 100, "load": 5, "server": 1},
    {"id": 11, "size": 100, "load": 5, "server": 1},
    {"id": 12, "size": 100, "load": 5, "server": 2},
    {"id": 13, "size": 100, "load": 5, "server": 2},
    {"id": 14, "size": 100, "load": 5, "server": 3},
    {"id": 15, "size": 100, "load": 5, "server": 3}
  ],
  "transfer": {"kind": "network", "s_net": 100}
}"#;

#[test]
fn plan_add_and_remove_from_a_cluster_file() {
    let d = tempfile::tempdir().expect("tempdir");
    std::fs::write(d.path().join("c.json"), CLUSTER).expect("write");
    let v = ok(&pliant(
        &["scale", "plan", "--state", "c.json", "--add", "3", "--json"],
        d.path(),
    ));
    assert_eq!(v["rescale"]["add"], serde_json::json!([4, 5, 6]));
    assert_eq!(v["outcome"]["l_max"], 5.0, "one bucket per server");
    assert_eq!(v["moves"].as_array().expect("moves").len(), 3);
    let v = ok(&pliant(
        &[
            "scale",
            "plan",
            "--state",
            "c.json",
            "--remove",
            "3",
            "--strategy",
            "lt",
            "--json",
        ],
        d.path(),
    ));
    let placed: Vec<u64> = v["placement"]
        .as_array()
        .expect("placement")
        .iter()
        .map(|p| p["server"].as_u64().expect("server"))
        .collect();
    assert!(!placed.contains(&3), "decommissioned server emptied");
    assert_eq!(
        v["moves"].as_array().expect("moves").len(),
        2,
        "only server 3's buckets move"
    );
}

#[test]
fn plan_errors_name_the_problem() {
    let bad = dir_with(&[("c.json", "{\"servers\": [1],\n \"buckets\": 7}")]);
    let good = dir_with(&[("c.json", CLUSTER)]);
    let plan = ["scale", "plan", "--state", "c.json"];
    for (dir, extra, says) in [
        (&bad, &["--add", "1"][..], "c.json:2:"),
        (&good, &["--remove", "9"], "server 9 is not in the cluster"),
        (
            &good,
            &["--add", "1", "--strategy", "fast"],
            "known: l, lt, dt, ldt",
        ),
        (
            &good,
            &["--add", "1", "--weights", "0.5,0.5,1"],
            "max(W_L, W_D) must be 1",
        ),
    ] {
        let args: Vec<&str> = plan.iter().chain(extra).copied().collect();
        let e = err(&pliant(&args, dir.path()));
        assert!(e.contains(says), "{args:?}: {e}");
    }
}

#[test]
fn emulate_json_shape() {
    let d = tempfile::tempdir().expect("tempdir");
    let v = ok(&pliant(
        &[
            "scale",
            "emulate",
            "--scenario",
            "decommission-64-of-320",
            "--strategy",
            "lt,ldt",
            "--reps",
            "2",
            "--json",
        ],
        d.path(),
    ));
    let rows = v.as_array().expect("array");
    assert_eq!(rows.len(), 2);
    for r in rows {
        assert_eq!(r["scenario"], "decommission-64-of-320");
        for k in [
            "l_max_over_l_t",
            "d_max_over_d_t",
            "t_max_over_t_t",
            "moved_fraction",
            "plan_ms",
        ] {
            for q in ["min", "q1", "median", "q3", "max"] {
                assert!(r[k][q].is_number(), "{k}.{q}");
            }
        }
    }
    let o = pliant(&["scale", "emulate", "--scenario", "grow-a-lot"], d.path());
    assert!(String::from_utf8_lossy(&o.stderr).contains("commission-1920-onto-128"));
}

#[cfg(feature = "exact")]
#[test]
fn optimal_json_shape() {
    let d = tempfile::tempdir().expect("tempdir");
    let v = ok(&pliant(
        &["scale", "optimal", "--instances", "2", "--json"],
        d.path(),
    ));
    let rows = v.as_array().expect("array");
    assert_eq!(rows.len(), 6);
    assert!(
        rows.iter()
            .all(|r| r["objective_ratio"]["min"].as_f64().expect("ratio") > 0.5)
    );
}

/// Without the `exact` feature the command says in one line how to get it.
#[cfg(not(feature = "exact"))]
#[test]
fn optimal_without_the_solver_says_how_to_build_it() {
    let d = tempfile::tempdir().expect("tempdir");
    let o = pliant(&["scale", "optimal", "--instances", "2"], d.path());
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--features exact"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}
