//! Helpers shared by the policy integration tests.

use std::rc::Rc;

use pliant_policy::{Engine, EngineConfig, Limits, MemoryStore, Metrics, PolicySource};

/// A three-server cluster seen from server 1.
pub fn cluster() -> Metrics {
    let mut m = Metrics::new(1);
    for (id, keys, rate) in [(1, 500.0, 30.0), (2, 100.0, 10.0), (3, 300.0, 20.0)] {
        m.set(id, "keys", keys);
        m.set(id, "req_rate", rate);
    }
    m
}

/// An engine with small limits so hostile policies are stopped quickly.
pub fn small_engine(metrics: Metrics) -> Engine {
    let config = EngineConfig {
        limits: Limits {
            instructions: 5_000_000,
            memory_bytes: 16 << 20,
        },
        log_capacity: 1000,
    };
    Engine::new(config, Rc::new(MemoryStore::new()), metrics)
}

/// A function-style policy named `p`.
pub fn f(code: &str) -> PolicySource {
    PolicySource::functions("p", code)
}
