//! The 2,048-server decision as ratios to its floor, measured interleaved.
//!
//! The shared machines this runs on change speed by 2× from one minute to the next, so absolute
//! times from back-to-back criterion runs are not comparable (`engine.rs` gives them anyway).
//! Here every round runs each scenario for a short warm batch, one after the other, and the
//! report takes per-scenario medians over all rounds: a slow minute slows every scenario alike.
//!
//! Scenarios: the floor (plain Lua tables, no engine, budget hook on); the engine's decision with
//! nothing changed (and, as a control, with as many bytes as a metric update written elsewhere);
//! with one metric per server changed, one the policy reads and one it does not (the walk over
//! the changed rows without writing into Lua); with all 16,384 values changed; and a policy
//! reading every metric, unchanged and all changed. The refresh's cost is a changed
//! scenario's median minus the unchanged one's.
//!
//! `cargo bench -p pliant-policy --bench refresh [-- ROUNDS]` (default 400 rounds).

use std::hint::black_box;
use std::time::Instant;

use pliant_policy::Engine;

mod common;
use common::{
    ALL_METRICS_POLICY, CLUSTER_POLICY, change_all, change_column, change_column_in_rows,
    change_rate, cluster, engine, plain_lua_floor,
};

/// Decisions per scenario per round; the first ones warm the caches and are not timed.
const BATCH: usize = 6;
const WARM: usize = 2;

thread_local! {
    /// As many numbers as the cluster's metric matrix holds.
    static POLLUTION: std::cell::RefCell<Vec<f64>> =
        std::cell::RefCell::new(vec![0.0; common::SERVERS as usize * common::METRICS.len()]);
}

/// The median, NaN for a scenario that did not run.
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() {
    let rounds: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(400);
    let mut floor = plain_lua_floor();
    let mut cluster_engine = engine(cluster(), CLUSTER_POLICY);
    let mut all_engine = engine(cluster(), ALL_METRICS_POLICY);
    type Change = fn(&mut pliant_policy::Metrics, f64);
    let none: Change = |_, _| {};
    // The control: nothing changes, but the same bytes as a metric update are written
    // elsewhere, so the decision runs with the caches that update leaves behind.
    let pollute: Change = |_, tick| {
        POLLUTION.with_borrow_mut(|p| p.iter_mut().for_each(|v| *v += tick));
    };
    let scenarios: [(&str, usize, Change); 8] = [
        ("no metric changed", 0, none),
        ("no metric changed, 128 KiB written elsewhere", 0, pollute),
        ("one metric per server changed", 0, change_rate),
        ("the same, written through row_mut", 0, |m, t| {
            change_column_in_rows(m, 0, t)
        }),
        // `net`, which the policy never reads: the walk over the changed rows without a write.
        ("one unread metric per server changed", 0, |m, t| {
            change_column(m, 7, t)
        }),
        ("all 16,384 values changed", 0, change_all),
        ("policy reading all 8 metrics, nothing changed", 1, none),
        ("policy reading all 8 metrics, all changed", 1, change_all),
    ];
    // For profiling one scenario: `PLIANT_BENCH_ONLY=unread perf record …/refresh-…`.
    let only = std::env::var("PLIANT_BENCH_ONLY").ok();
    let skip = |name: &str| only.as_deref().is_some_and(|o| !name.contains(o));
    let mut times = vec![Vec::with_capacity(rounds * (BATCH - WARM)); scenarios.len() + 1];
    let mut tick = 0.0;
    for _ in 0..rounds {
        for i in 0..BATCH {
            let t = Instant::now();
            black_box(floor());
            if i >= WARM {
                times[0].push(t.elapsed().as_secs_f64() * 1e6);
            }
        }
        for (s, &(name, which, change)) in scenarios.iter().enumerate() {
            if skip(name) {
                continue;
            }
            let e: &mut Engine = if which == 0 {
                &mut cluster_engine
            } else {
                &mut all_engine
            };
            for i in 0..BATCH {
                tick += 1.0;
                change(e.metrics_mut(), tick);
                let t = Instant::now();
                black_box(e.decide().expect("decide").when);
                if i >= WARM {
                    times[s + 1].push(t.elapsed().as_secs_f64() * 1e6);
                }
            }
        }
    }
    let m: Vec<f64> = times.iter_mut().map(|t| median(t)).collect();
    println!(
        "{rounds} rounds × {} timed decisions per scenario; medians",
        BATCH - WARM
    );
    println!(
        "{:<48} {:>9} {:>9} {:>10}",
        "scenario", "µs", "× floor", "refresh µs"
    );
    println!(
        "{:<48} {:>9.1} {:>9.2} {:>10}",
        "floor: plain Lua tables", m[0], 1.0, "—"
    );
    for (s, (name, which, _)) in scenarios.iter().enumerate() {
        let base = if *which == 0 { m[1] } else { m[7] };
        println!(
            "{:<48} {:>9.1} {:>9.2} {:>10.1}",
            name,
            m[s + 1],
            m[s + 1] / m[0],
            m[s + 1] - base
        );
    }
}
