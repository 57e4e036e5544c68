//! A sample environment to dry-run a policy in before it decides for a real cache.

use pliant_policy::{Metrics, TimeSeries};

use crate::CacheView;

/// Servers in the sample cluster.
pub const SAMPLE_SERVERS: i64 = 4;

/// Four caches reporting every metric of the contract ([`METRICS`](crate::METRICS), as a service
/// reports them), each also with the `cpu` and `load` that Mantle's metadata-server policies read,
/// and 1,000 accesses in the time series. Server `i` (0-based) is `i + 1` times as busy as
/// server 0, so balancing policies have somewhere to send load. `whoami` is 0.
pub fn sample_environment() -> (Metrics, TimeSeries) {
    let mut m = Metrics::new(0);
    for id in 0..SAMPLE_SERVERS {
        let x = (id + 1) as f64;
        let n = id as u64 + 1;
        let cache = CacheView {
            t: 600.0,
            keys: 50_000 * n,
            bytes: 40_000_000 * n,
            capacity: 250_000,
            hits: 9_000 * n,
            misses: 1_000 * n,
            reads_per_s: 500.0 * x,
            writes_per_s: 10.0 * x,
            misses_per_s: 50.0 * x,
            queue_len: Some(2.0 * x),
            cpu_load_avg: Some(0.2 * x),
            clients: Some(27.0),
            fetches_per_s: Some(5.0 * x),
            new_keys_per_s: Some(2.0 * x),
            progress: Some(1.0e6 * x),
            progress_per_s: Some(100.0 * x),
        };
        cache.write_to(&mut m, id);
        m.set(id, "cpu", 0.2 * x);
        m.set(id, "load", 10.0 * x);
    }
    let ts = TimeSeries::new();
    for i in 0..1000u32 {
        ts.push(f64::from(i), f64::from(i / 100 * 50 + i % 37));
    }
    (m, ts)
}
