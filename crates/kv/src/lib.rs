//! Pliant's live cache service: the Redis protocol (RESP2 and RESP3) over a memory tier whose
//! order comes from a `pliant-cache` algorithm, above a persistent `pliant-store`.
//!
//! - [`keyspace`]: the memory tier over the store (write-through, read-through, lazy expiry).
//! - `cmd`: the commands, one file per family, and the table [`COMMANDS`] that dispatches them.
//! - [`cluster`]: the routing of a cluster node (`-MOVED`, `-ASK`, `-CROSSSLOT`, `-TRYAGAIN`)
//!   and the gate a slot move's deletions take; `Node` is what the balancer sees of a node
//!   (`pliant_cluster::BalancedNode`).
//! - [`node`]: what connections share: the keyspace, counters, cursors, the stop signal.
//! - [`tracking`]: which clients hold copies of which keys, and their invalidation (CLIENT
//!   TRACKING); how a parent keeps its child tiers coherent.
//! - [`upstream`] and `leaf`: a tier's connection to its parent, and how a tier runs requests
//!   (fetch what memory lacks, coalesced; write through; keep puts).
//! - [`policy`]: the live policy, on a thread of its own, sizing the memory tier every interval.
//! - [`server`]: connections, pipelining, durability, the graceful stop.
//! - [`metrics`]: Prometheus's text format on `--metrics`.
//! - [`clients`]: the connections a node serves (CLIENT LIST, INFO, KILL) and the invalidation
//!   channel a CLIENT TRACKING REDIRECT target subscribes to.
//! - [`replay`]: a trace replayed against any Redis-protocol server (`pliant replay`).
//!
//! The protocol (RESP frames, the client that dials a node) is `pliant-proto`'s; the cluster's
//! control plane (the slot map, coordination, membership, moves, rescaling, the balancer) is
//! `pliant-cluster`'s, which never depends on this crate.
//!
//! Dependencies: `pliant-proto` (the protocol), `tokio` (the network and timers), `bytes`
//! (values shared without copies between the connection buffers, the memory tier and replies), `thiserror` (typed errors),
//! `tracing` (logs), `foldhash` (the eviction index), `atomic-waker` (the one waker that closes
//! a connection, for CLIENT KILL and the node's stop: two notifications' futures built and
//! dropped at every wait for a request were a tenth of a group-committed SET's instructions), `serde`/`serde_json` (the JSON counters),
//! `nix` (the monotonic clock as nanoseconds: a command's time is a subtraction of two integers,
//! where `Instant`'s normalises a `timespec`, a tenth of a pipelined GET's instructions),
//! `libc` (`setpriority`, which nix lacks: the store readers' threads run at the lowest CPU
//! priority, `node::readers`);
//! `pliant-cluster` (membership, the slot map and key slots routing reads, the balancer it starts);
//! `pliant-policy` and `pliant-tier` for the live policy, which sees the same metric names the
//! simulator gives.

pub mod clients;
pub mod cluster;
mod cmd;
pub mod config;
mod glob;
pub mod keyspace;
mod leaf;
pub mod metrics;
pub mod node;
pub mod policy;
pub mod replay;
pub mod server;
pub mod tracking;
pub mod upstream;

pub use cmd::{COMMANDS, Spec};
pub use config::{Config, DEFAULT_INTERVAL, DEFAULT_PORT, Durability, PolicyConfig};
pub use keyspace::{Keyspace, KvError, KvStats, Value};
pub use node::Node;
pub use policy::Policy;
pub use server::{ServeError, Server};

/// Runs a node with `config` until it is shut down (SHUTDOWN, SIGINT, SIGTERM). `ready` is
/// called with the address once it listens.
pub fn serve(
    config: &Config,
    ready: impl FnOnce(std::net::SocketAddr, Option<std::net::SocketAddr>),
) -> Result<(), ServeError> {
    let mut builder = if config.threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        if config.threads > 1 {
            b.worker_threads(config.threads);
        }
        b
    };
    let rt = builder.enable_all().build().map_err(ServeError::Runtime)?;
    rt.block_on(async {
        let server = Server::bind(config).await?;
        if let Ok(a) = server.local_addr() {
            ready(a, server.metrics_addr());
        }
        let node = server.node();
        tokio::spawn(async move {
            pliant_cluster::stop_on_signal().await;
            node.shut_down();
        });
        server.run().await
    })
}
