//! Policy-engine benchmarks: the three targets of the policy-engine issue.
//!
//! - a trivial `when()` decision (target ≥ 1 M decisions/s);
//! - `load()` + `when()` over 2,048 servers × 8 metrics, including the environment refresh
//!   (target ≤ 50 µs);
//! - a `timeseries()` scan of 1 M points (target ≥ 20 M points/s).

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use pliant_policy::{Engine, EngineConfig, MemoryStore, Metrics, PolicySource};

const METRICS: [&str; 8] = [
    "req_rate", "cpu", "keys", "bytes", "hits", "misses", "queue", "net",
];

fn engine(metrics: Metrics, code: &str) -> Engine {
    let config = EngineConfig {
        log_capacity: 0,
        ..EngineConfig::default()
    };
    let mut e = Engine::new(config, std::rc::Rc::new(MemoryStore::new()), metrics);
    e.install(PolicySource::functions("bench", code))
        .expect("install");
    e
}

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

fn cluster_decision(c: &mut Criterion) {
    let mut m = Metrics::new(7);
    for id in 0..2048i64 {
        for (j, name) in METRICS.iter().enumerate() {
            m.set(id, name, (id * 8 + j as i64) as f64);
        }
    }
    // Mantle's classic shape: load from this server's metrics; act when above the cluster
    // average, which scans every server.
    let mut e = engine(
        m,
        r#"
        function load()
          local me = servers[whoami]
          return me["req_rate"] * 0.5 + me["cpu"] * 0.3 + me["queue"] * 0.2
        end
        function when()
          local total, n = 0, 0
          for _, s in pairs(servers) do total = total + s["req_rate"]; n = n + 1 end
          return servers[whoami]["load"] > total / n
        end
        "#,
    );
    let mut tick = 0.0;
    let mut g = c.benchmark_group("policy");
    g.bench_function("load_when_2048_servers_x8_with_refresh", |b| {
        b.iter(|| {
            // Every server's metrics change between decisions, as heartbeats would make them.
            tick += 1.0;
            let m = e.metrics_mut();
            for row in 0..2048 {
                for v in m.row_mut(row) {
                    *v += tick;
                }
            }
            black_box(e.decide().expect("decide").when)
        })
    });
    // Heartbeat-like: one metric per server (its request rate) changes between decisions.
    g.bench_function("load_when_2048_servers_x8_with_refresh_rate_changes", |b| {
        b.iter(|| {
            tick += 1.0;
            let m = e.metrics_mut();
            for row in 0..2048 {
                m.row_mut(row)[0] += tick;
            }
            black_box(e.decide().expect("decide").when)
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
