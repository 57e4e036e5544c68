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

/// Mantle's classic shape: load from this server's metrics; act when above the cluster average,
/// which scans every server.
const CLUSTER_POLICY: &str = r#"
function load()
  local me = servers[whoami]
  return me["req_rate"] * 0.5 + me["cpu"] * 0.3 + me["queue"] * 0.2
end
function when()
  local total, n = 0, 0
  for _, s in pairs(servers) do total = total + s["req_rate"]; n = n + 1 end
  return servers[whoami]["load"] > total / n
end
"#;

/// The same decision over every metric of every server, so no column is left uncopied.
const ALL_METRICS_POLICY: &str = r#"
function when()
  local total = 0
  for _, s in pairs(servers) do
    total = total + s.req_rate + s.cpu + s.keys + s.bytes + s.hits + s.misses + s.queue + s.net
  end
  return total > 0
end
"#;

const SERVERS: i64 = 2048;

fn cluster() -> Metrics {
    let mut m = Metrics::new(7);
    for id in 0..SERVERS {
        for (j, name) in METRICS.iter().enumerate() {
            m.set(id, name, (id * 8 + j as i64) as f64);
        }
    }
    m
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

/// The floor: the benchmark policy over plain Lua tables that are never refreshed, under the same
/// instruction-count hook the engine installs (a step of 1,000). No engine, no refresh.
fn plain_lua_floor() -> impl FnMut() -> bool {
    let lua = mlua::Lua::new();
    let servers = lua.create_table().expect("table");
    for id in 0..SERVERS {
        let t = lua.create_table().expect("table");
        for (j, name) in METRICS.iter().enumerate() {
            t.raw_set(*name, (id * 8 + j as i64) as f64).expect("set");
        }
        servers.raw_set(id, t).expect("set");
    }
    lua.globals().set("servers", &servers).expect("set");
    lua.globals().set("whoami", 7).expect("set");
    lua.load(CLUSTER_POLICY).exec().expect("policy");
    let used = std::rc::Rc::new(std::cell::Cell::new(0u64));
    let u = used.clone();
    lua.set_hook(
        mlua::HookTriggers::new().every_nth_instruction(1000),
        move |_, _| {
            u.set(u.get() + 1000);
            Ok(mlua::VmState::Continue)
        },
    )
    .expect("hook");
    let load: mlua::Function = lua.globals().get("load").expect("load");
    let when: mlua::Function = lua.globals().get("when").expect("when");
    let me: mlua::Table = servers.get(7).expect("me");
    move || {
        // Owning the state: functions and tables are handles into it.
        let _state = &lua;
        used.set(0);
        let x: f64 = load.call(()).expect("load");
        me.raw_set("load", x).expect("set");
        when.call(()).expect("when")
    }
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
                for row in 0..SERVERS as usize {
                    m.row_mut(row)[0] += tick;
                }
            })
        })
    });
    // Every one of the 16,384 values changes between decisions.
    g.bench_function("load_when_2048_servers_x8_with_refresh", |b| {
        b.iter_custom(|iters| {
            decide_after(&mut e, iters, |m| {
                tick += 1.0;
                for row in 0..SERVERS as usize {
                    for v in m.row_mut(row) {
                        *v += tick;
                    }
                }
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
                for row in 0..SERVERS as usize {
                    for v in m.row_mut(row) {
                        *v += tick;
                    }
                }
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
