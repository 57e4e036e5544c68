//! Prometheus's text format on `--metrics ADDR:PORT`: the counters of `INFO` and `PLIANT.STATS`,
//! and the policy's decision count and time. A minimal HTTP/1.1 responder (one request per
//! connection, `GET /metrics`): a scrape endpoint needs no more, and no HTTP stack is pulled in
//! for it.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::node::{Node, rss_bytes};

/// The longest request head read; a scraper's is a few hundred bytes.
const MAX_HEAD: usize = 8 * 1024;

/// Serves `GET /metrics` on `listener` until the node stops.
pub async fn serve(listener: TcpListener, node: Arc<Node>) {
    let mut stop = node.stop_signal();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((mut stream, _)) = accepted else { continue };
                let node = node.clone();
                tokio::spawn(async move {
                    let mut head = Vec::with_capacity(512);
                    let mut buf = [0u8; 1024];
                    // Bounded in size and time: a client that never finishes its request is
                    // dropped.
                    let read = tokio::time::timeout(Duration::from_secs(5), async {
                        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
                            let n = stream.read(&mut buf).await.ok()?;
                            if n == 0 {
                                return None;
                            }
                            head.extend_from_slice(&buf[..n]);
                        }
                        Some(())
                    })
                    .await;
                    if !matches!(read, Ok(Some(()))) {
                        return;
                    }
                    let response = if head.starts_with(b"GET /metrics ") || head.starts_with(b"GET / ") {
                        let body = render(&node);
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        )
                    } else {
                        "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string()
                    };
                    let _ = stream.write_all(response.as_bytes()).await;
                });
            }
            _ = stop.changed() => return,
        }
    }
}

/// The metrics, in Prometheus's text format.
pub fn render(node: &Node) -> String {
    let (s, (keys, bytes), capacity) = {
        let ks = node.keyspace();
        (ks.stats(), ks.memory(), ks.capacity())
    };
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, value: f64| {
        let _ = write!(
            out,
            "# HELP pliant_{name} {help}\n# TYPE pliant_{name} {kind}\npliant_{name} {}\n",
            number(value)
        );
    };
    metric(
        "keyspace_hits_total",
        "counter",
        "Reads of keys that exist.",
        s.keyspace_hits as f64,
    );
    metric(
        "keyspace_misses_total",
        "counter",
        "Reads of keys that do not exist.",
        s.keyspace_misses as f64,
    );
    metric(
        "memory_hits_total",
        "counter",
        "Reads the memory tier served.",
        s.hits as f64,
    );
    metric(
        "memory_misses_total",
        "counter",
        "Reads the memory tier did not hold.",
        s.misses as f64,
    );
    metric(
        "memory_hit_bytes_total",
        "counter",
        "Bytes of the memory tier's hits.",
        s.hit_bytes as f64,
    );
    metric(
        "memory_miss_bytes_total",
        "counter",
        "Bytes of misses the store served.",
        s.miss_bytes as f64,
    );
    metric(
        "writes_total",
        "counter",
        "Values written.",
        s.writes as f64,
    );
    metric(
        "evictions_total",
        "counter",
        "Keys the memory tier evicted.",
        s.evictions as f64,
    );
    metric(
        "parent_requests_total",
        "counter",
        "Reads a tier sent to its parent (coalesced ones count once).",
        s.parent_requests as f64,
    );
    metric(
        "coalesced_total",
        "counter",
        "Reads that joined a fetch of their key already on its way to the parent.",
        s.coalesced as f64,
    );
    metric(
        "redundant_puts_total",
        "counter",
        "Puts of a key held with the same value, which went no further.",
        s.redundant_puts as f64,
    );
    metric(
        "invalidated_total",
        "counter",
        "Keys dropped from memory because the parent said they changed.",
        s.invalidated as f64,
    );
    metric(
        "tiers_cut_off_total",
        "counter",
        "Child tiers cut off for not acknowledging an invalidation in time.",
        node.tracking().cut_off() as f64,
    );
    metric(
        "expired_total",
        "counter",
        "Keys deleted because they expired.",
        s.expired as f64,
    );
    metric(
        "store_reads_total",
        "counter",
        "Reads of the persistent store.",
        s.store_reads as f64,
    );
    metric(
        "store_reads_off_lock_total",
        "counter",
        "Reads of the persistent store done before their command ran, with the keyspace unlocked.",
        s.store_reads_off_lock as f64,
    );
    metric(
        "store_writes_total",
        "counter",
        "Writes to the persistent store.",
        s.store_writes as f64,
    );
    metric(
        "store_syncs_total",
        "counter",
        "Syncs of the persistent store.",
        s.store_syncs as f64,
    );
    metric(
        "memory_keys",
        "gauge",
        "Keys the memory tier holds.",
        keys as f64,
    );
    metric(
        "memory_bytes",
        "gauge",
        "Bytes (keys and values) the memory tier holds.",
        bytes as f64,
    );
    metric(
        "memory_capacity",
        "gauge",
        "The memory tier's capacity, in its unit (keys or bytes); +Inf if unlimited.",
        if capacity.amount() == u64::MAX {
            f64::INFINITY
        } else {
            capacity.amount() as f64
        },
    );
    metric(
        "connected_clients",
        "gauge",
        "Connections open.",
        node.clients() as f64,
    );
    metric(
        "connections_total",
        "counter",
        "Connections accepted.",
        node.connections_received() as f64,
    );
    metric(
        "rejected_connections_total",
        "counter",
        "Connections refused over --max-clients.",
        node.rejected_connections() as f64,
    );
    metric(
        "commands_total",
        "counter",
        "Commands run.",
        node.commands_processed() as f64,
    );
    metric(
        "auth_failures_total",
        "counter",
        "AUTH attempts refused.",
        node.auth_failures() as f64,
    );
    metric(
        "rss_bytes",
        "gauge",
        "The process's resident memory.",
        rss_bytes().map_or(f64::NAN, |b| b as f64),
    );
    if let Some(st) = node.policy().and_then(|p| p.status().ok()) {
        metric(
            "policy_decisions_total",
            "counter",
            "Decisions the live policy made.",
            st.decisions as f64,
        );
        metric(
            "policy_decision_seconds_total",
            "counter",
            "Time the live policy spent deciding.",
            st.decision_seconds,
        );
        metric(
            "policy_errors_total",
            "counter",
            "Decisions that failed (the capacity was left as it was).",
            st.errors as f64,
        );
        metric(
            "policy_version",
            "gauge",
            "The running policy's version (0: none).",
            st.version.unwrap_or(0) as f64,
        );
    }
    out
}

/// A sample value as Prometheus writes it (`+Inf`, `-Inf`, `NaN`).
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        v.to_string()
    }
}
