//! Policy-engine benchmarks: the three targets of the policy-engine issue.
//!
//! - a trivial `when()` decision (target ≥ 1 M decisions/s);
//! - `load()` + `when()` over 2,048 servers × 8 metrics, including the environment refresh
//!   (target ≤ 50 µs, or within 1.3× of the floor where the floor itself is above it), next to
//!   the floor: the same policy over plain Lua tables that need no refresh, with the budget hook
//!   on, and the engine's own decision when no metric changed. The refresh's cost is the
//!   difference; the service's own metric updates are kept off the clock;
//! - a `timeseries()` scan of 1 M points (target ≥ 20 M points/s).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use pliant_policy::{Engine, Metrics};

mod common;
use common::{
    ALL_METRICS_POLICY, CLUSTER_POLICY, change_all, change_rate, cluster, engine, plain_lua_floor,
};

fn trivial_when(c: &mut Criterion) {
    let mut m = Metrics::new(0);
    m.set(0, "keys", 1.0);
    let mut e = engine(m, "function when() return true end");
    let mut g = c.benchmark_group("policy");
    g.throughput(Throughput::Elements(1));
    g.bench_function("trivial_when_decision", |b| {
        b.iter(|| black_box(e.decide().expect("decide").when))
    });
    g.finish();
}

/// Times `decide` alone: `change` (the service updating its metrics) runs outside the clock.
fn decide_after(e: &mut Engine, iters: u64, mut change: impl FnMut(&mut Metrics)) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        change(e.metrics_mut());
        let t = Instant::now();
        black_box(e.decide().expect("decide").when);
        total += t.elapsed();
    }
    total
}

fn cluster_decision(c: &mut Criterion) {
    let mut g = c.benchmark_group("policy");
    let mut floor = plain_lua_floor();
    g.bench_function("floor_plain_lua_2048_servers", |b| {
        b.iter(|| black_box(floor()))
    });
    let mut e = engine(cluster(), CLUSTER_POLICY);
    // Nothing changes between decisions: the refresh finds nothing to write.
    g.bench_function("load_when_2048_servers_x8_unchanged", |b| {
        b.iter(|| black_box(e.decide().expect("decide").when))
    });
    let mut tick = 0.0;
    // Heartbeat-like: one metric per server (its request rate) changes between decisions.
    g.bench_function("load_when_2048_servers_x8_with_refresh_rate_changes", |b| {
        b.iter_custom(|iters| {
            decide_after(&mut e, iters, |m| {
                tick += 1.0;
                change_rate(m, tick)
            })
        })
    });
    // Every one of the 16,384 values changes between decisions.
    g.bench_function("load_when_2048_servers_x8_with_refresh", |b| {
        b.iter_custom(|iters| {
            decide_after(&mut e, iters, |m| {
                tick += 1.0;
                change_all(m, tick)
            })
        })
    });
    // A policy that reads all 8 metrics makes the refresh write every changed value.
    let mut all = engine(cluster(), ALL_METRICS_POLICY);
    g.bench_function("all_metrics_2048_servers_x8_unchanged", |b| {
        b.iter(|| black_box(all.decide().expect("decide").when))
    });
    g.bench_function("all_metrics_2048_servers_x8_with_refresh", |b| {
        b.iter_custom(|iters| {
            decide_after(&mut all, iters, |m| {
                tick += 1.0;
                change_all(m, tick)
            })
        })
    });
    g.finish();
}

fn timeseries_scan(c: &mut Criterion) {
    let mut e = engine(
        Metrics::new(0),
        r#"
        function when()
          local ts = timeseries()
          local sum = 0
          for i = 1, ts:size() do
            local _, v = ts:get(i)
            sum = sum + v
          end
          return sum > 0
        end
        "#,
    );
    e.timeseries().replace(
        (0..1_000_000u32)
            .map(|i| (f64::from(i), f64::from(i % 977)))
            .collect(),
    );
    let mut g = c.benchmark_group("policy");
    g.sample_size(20);
    g.throughput(Throughput::Elements(1_000_000));
    g.bench_function("timeseries_scan_1M_points", |b| {
        b.iter(|| black_box(e.decide().expect("decide").when))
    });
    g.finish();
}

criterion_group!(benches, trivial_when, cluster_decision, timeseries_scan);
criterion_main!(benches);
