//! What the policy benchmarks share: the 2,048-server cluster, the policies run over it, and the
//! floor they are measured against.

// Each benchmark binary uses its own part of this module.
#![allow(dead_code)]

use pliant_policy::{Engine, EngineConfig, MemoryStore, Metrics, PolicySource};

/// The metrics every server reports.
pub const METRICS: [&str; 8] = [
    "req_rate", "cpu", "keys", "bytes", "hits", "misses", "queue", "net",
];

/// An engine running `code` over `metrics`, without a decision log.
pub fn engine(metrics: Metrics, code: &str) -> Engine {
    let config = EngineConfig {
        log_capacity: 0,
        ..EngineConfig::default()
    };
    let mut e = Engine::new(config, std::rc::Rc::new(MemoryStore::new()), metrics);
    e.install(PolicySource::functions("bench", code))
        .expect("install");
    e
}

/// Mantle's classic shape: load from this server's metrics; act when above the cluster average,
/// which scans every server.
pub const CLUSTER_POLICY: &str = r#"
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
pub const ALL_METRICS_POLICY: &str = r#"
function when()
  local total = 0
  for _, s in pairs(servers) do
    total = total + s.req_rate + s.cpu + s.keys + s.bytes + s.hits + s.misses + s.queue + s.net
  end
  return total > 0
end
"#;

/// Servers in the benchmark cluster.
pub const SERVERS: i64 = 2048;

/// 2,048 servers × 8 metrics, all distinct values.
pub fn cluster() -> Metrics {
    let mut m = Metrics::new(7);
    for id in 0..SERVERS {
        for (j, name) in METRICS.iter().enumerate() {
            m.set(id, name, (id * 8 + j as i64) as f64);
        }
    }
    m
}

/// The floor: the benchmark policy over plain Lua tables that are never refreshed, under the same
/// instruction-count hook the engine installs (a step of 1,000). No engine, no refresh.
pub fn plain_lua_floor() -> impl FnMut() -> bool {
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

/// A heartbeat: one metric per server (its request rate) changes.
pub fn change_rate(m: &mut Metrics, tick: f64) {
    change_column(m, 0, tick);
}

/// One metric per server changes: column `col` of [`METRICS`], set by position.
pub fn change_column(m: &mut Metrics, col: usize, tick: f64) {
    for row in 0..SERVERS as usize {
        m.set_at(row, col, m.row(row)[col] + tick);
    }
}

/// The same change through [`Metrics::row_mut`], which does not say which column changed.
pub fn change_column_in_rows(m: &mut Metrics, col: usize, tick: f64) {
    for row in 0..SERVERS as usize {
        m.row_mut(row)[col] += tick;
    }
}

/// Every one of the 16,384 values changes.
pub fn change_all(m: &mut Metrics, tick: f64) {
    for row in 0..SERVERS as usize {
        for v in m.row_mut(row) {
            *v += tick;
        }
    }
}
