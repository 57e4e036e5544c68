//! The contract between a cache and its policy, as a policy sees it.

use pliant_policy::{Engine, HowMuch, PolicySource};
use pliant_tier::{CacheView, METRICS};

fn view() -> CacheView {
    CacheView {
        t: 600.0,
        keys: 1_000,
        bytes: 64_000,
        capacity: 2_000,
        hits: 900,
        misses: 100,
        reads_per_s: 40.0,
        writes_per_s: 2.0,
        misses_per_s: 4.0,
        queue_len: Some(3.0),
        cpu_load_avg: None,
        clients: Some(8.0),
        fetches_per_s: Some(3.5),
        new_keys_per_s: None,
        progress: Some(4.5e6),
        progress_per_s: Some(120.0),
    }
}

/// Renaming a metric breaks every policy that reads it: this list changes only on purpose.
#[test]
fn the_metric_names_a_policy_sees_are_pinned() {
    let names: Vec<_> = METRICS.iter().map(|m| m.name).collect();
    assert_eq!(
        names,
        [
            "keys",
            "bytes",
            "capacity",
            "hits",
            "misses",
            "reads_per_s",
            "writes_per_s",
            "misses_per_s",
            "req_rate",
            "queue_len",
            "cpu_load_avg",
            "clients",
            "fetches_per_s",
            "new_keys_per_s",
            "progress",
            "progress_per_s",
        ]
    );
    let mantle: Vec<_> = METRICS
        .iter()
        .filter(|m| m.mantle)
        .map(|m| m.name)
        .collect();
    assert_eq!(mantle, ["req_rate", "queue_len", "cpu_load_avg"]);
}

/// Each name reads back the view's value through the engine; an unreported one is `nil`.
#[test]
fn a_policy_reads_every_metric_of_the_view() {
    let v = view();
    let mut e = Engine::in_memory(v.metrics(0));
    for (info, want) in METRICS.iter().zip(v.values()) {
        e.install(PolicySource::functions(
            "read",
            format!(
                "function when() return true end\n\
                 function howmuch() return servers[whoami][\"{}\"] or -1 end",
                info.name
            ),
        ))
        .expect("install");
        let got = e.decide().expect("decide").howmuch;
        assert_eq!(
            got,
            Some(HowMuch::Amount(want.unwrap_or(-1.0))),
            "{}",
            info.name
        );
    }
}

/// Mantle's shape: `load()` over Ceph's names, `when()` over the computed `load`.
#[test]
fn a_mantle_policy_written_for_ceph_finds_its_inputs() {
    let mut e = Engine::in_memory(view().metrics(0));
    e.install(PolicySource::functions(
        "mantle",
        r#"
        function load()
          local me = servers[whoami]
          return me["req_rate"] + 10 * me["queue_len"] + (me["cpu_load_avg"] or 0)
        end
        function when() return servers[whoami]["load"] > 50 end
        function howmuch() return servers[whoami]["load"] end
        "#,
    ))
    .expect("install");
    let d = e.decide().expect("decide");
    assert_eq!(d.load, Some(72.0));
    assert!(d.when);
}

#[test]
fn a_decision_becomes_a_capacity_only_when_it_acts_and_changes_it() {
    let v = view();
    let decide = |code: &str| {
        let mut e = Engine::in_memory(v.metrics(0));
        e.install(PolicySource::functions("p", code))
            .expect("install");
        v.new_capacity(&e.decide().expect("decide"))
    };
    assert_eq!(
        decide("function when() return true end function howmuch() return 500 end"),
        Some(500)
    );
    assert_eq!(
        decide("function when() return false end function howmuch() return 500 end"),
        None
    );
    assert_eq!(
        decide("function when() return true end function howmuch() return 2000 end"),
        None,
        "the capacity it already has"
    );
    assert_eq!(
        decide("function when() return true end function howmuch() return -5 end"),
        Some(0)
    );
    assert_eq!(
        decide("function when() return true end function howmuch() return {a = 1} end"),
        None,
        "a table is not an amount"
    );
}

/// A service keeps one `Metrics` and updates it in place: every value follows the view, and a
/// metric the cache stopped reporting is `nil`, not its last value.
#[test]
fn writing_in_place_follows_the_view() {
    let mut v = view();
    let mut m = v.metrics(0);
    assert_eq!(m.get(&0.into(), "queue_len"), Some(3.0));
    v.keys = 7;
    v.queue_len = None;
    v.cpu_load_avg = Some(0.5);
    v.write_to(&mut m, 0);
    assert_eq!(m.get(&0.into(), "keys"), Some(7.0));
    assert_eq!(m.get(&0.into(), "queue_len"), None);
    assert_eq!(m.get(&0.into(), "cpu_load_avg"), Some(0.5));
    assert_eq!(m.get(&0.into(), "req_rate"), Some(42.0));
}

/// The simulator guide's table of what a policy sees (docs/simulator.md) names exactly these
/// metrics, and marks Mantle's.
#[test]
fn the_guide_table_lists_every_metric() {
    let guide = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/simulator.md"
    ))
    .expect("docs/simulator.md");
    let rows: Vec<&str> = guide
        .lines()
        .skip_while(|l| !l.starts_with("| metric | meaning | Ceph Mantle name |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .collect();
    let mut listed = Vec::new();
    for row in rows {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        for name in cells[1].split('`').skip(1).step_by(2) {
            listed.push((name.to_string(), cells[3] == "yes"));
        }
    }
    let want: Vec<(String, bool)> = METRICS
        .iter()
        .map(|m| (m.name.to_string(), m.mantle))
        .collect();
    assert_eq!(listed, want);
}

/// `policy check` dry-runs a policy in this environment: every server reports every metric a
/// cache gives, and Mantle's metadata-server `cpu` and `load`, so a check sees what a live cache
/// gives and no name a policy reads is nil only in the check.
#[test]
fn the_sample_environment_reports_every_metric_on_every_server() {
    let (m, ts) = pliant_tier::sample_environment();
    assert_eq!(m.ids().len() as i64, pliant_tier::SAMPLE_SERVERS);
    for id in m.ids() {
        for name in METRICS.iter().map(|i| i.name).chain(["cpu", "load"]) {
            assert!(m.get(id, name).is_some(), "server {id} lacks {name}");
        }
    }
    assert!(!ts.is_empty());
}
