//! The control plane of a Pliant cluster: Redis Cluster's 16,384 hash slots spread over nodes, so
//! that every Redis Cluster client routes by itself, with the slot map and who is alive kept in a
//! coordination store that every node watches; and what changes the map.
//!
//! - [`slot`]: which slot a key belongs to (CRC16, hash tags).
//! - [`map`]: the slot map, its JSON form and its checks.
//! - [`coord`]: the coordination store's trait ([`Coord`]: leases, compare-and-swap map
//!   updates, the balancer policy's record, watches) and its embedded backend; [`coord_server`]
//!   serves the embedded one over the Redis protocol and [`remote`] is a node's client of it;
//!   `etcd` is the etcd backend (feature `etcd`).
//! - [`membership`]: a node's membership ([`Membership`]: its id, its lease, the map it
//!   follows, the control plane's [`Dialer`]).
//! - [`mover`]: moving slots between live nodes with nothing lost; [`rescale`]: adding and
//!   removing nodes with `pliant-scale`'s planner in slot mode.
//! - [`balancer`]: Mantle's `where` acting on the cluster: a policy over every node's load moves
//!   this node's slots. It sees its node through [`BalancedNode`], which the data plane
//!   implements; [`config`] holds its settings.
//! - [`local`]: a cluster on this machine (`pliant cluster up`) and its supervisor; [`status`]:
//!   `pliant cluster status`.
//!
//! What stays in the data plane (`pliant-kv`): the routing every keyed command passes
//! (`-MOVED`, `-ASK`, `-CROSSSLOT`, `-TRYAGAIN`), the gate that keeps a move's deletions out from
//! between a command's routing and its end, and the `CLUSTER`/`PLIANT.*` commands a move runs.
//! This crate never depends on `pliant-kv`: it talks to nodes over the protocol only.
//!
//! Dependencies: `pliant-proto` (the one client: every connection this crate opens is a
//! [`Dialer`]'s, built once with the cluster's password and aimed at each node; the frames the
//! coordination store is served in); `pliant-scale` (the rescale's plan); `pliant-policy` (the
//! balancer's Lua engine); `tokio` (connections, timers, watches); `crc` (Redis Cluster's
//! CRC16/XMODEM, rather than a table of our own); `foldhash` (node ids); `nix` (a safe
//! `kill(2)`, to stop a local cluster's nodes with SIGTERM, which lets them sync their stores);
//! `serde`/`serde_json` (the map's and the store's JSON); `thiserror` (typed errors);
//! `etcd-client` behind the feature `etcd` (its gRPC code is generated with protoc).

pub mod balancer;
pub mod config;
pub mod coord;
pub mod coord_server;
#[cfg(feature = "etcd")]
pub mod etcd;
pub mod local;
pub mod map;
pub mod membership;
pub mod mover;
pub mod remote;
pub mod rescale;
pub mod slot;
pub mod status;

use std::sync::Arc;
use std::time::Duration;

use pliant_proto::Dialer;
use pliant_proto::frame::Frame;

pub use balancer::{BalancedNode, Balancer, BalancerError};
pub use config::BalancerConfig;
pub use coord::{ClusterState, Coord, CoordError, Embedded};
pub use map::{Member, SlotMap};
pub use membership::{LEASE, Membership, node_id};
pub use slot::{SLOTS, key_slot};

/// What `--etcd` says in a build without the `etcd` feature.
pub const NO_ETCD: &str =
    "this pliant was built without etcd support: build it with `--features etcd` (needs protoc)";

/// The coordination store `desc` names (`ADDR:PORT` of an embedded one, or `etcd:URL`),
/// reached with `dialer` (the cluster's password; aimed here at the store).
pub async fn open_coord(desc: &str, dialer: &Dialer) -> Result<Arc<dyn Coord>, CoordError> {
    if let Some(url) = desc.strip_prefix("etcd:") {
        #[cfg(feature = "etcd")]
        return Ok(Arc::new(Arc::new(
            etcd::Etcd::connect(url).await?.with_dialer(dialer.clone()),
        )));
        #[cfg(not(feature = "etcd"))]
        {
            let _ = url;
            return Err(CoordError::Refused(NO_ETCD.into()));
        }
    }
    let addr: std::net::SocketAddr = desc
        .parse()
        .map_err(|_| CoordError::Refused(format!("{desc:?} is neither ADDR:PORT nor etcd:URL")))?;
    Ok(Arc::new(Arc::new(remote::Remote::new(addr, dialer))))
}

/// The map version node `addr` serves, if it answers.
pub(crate) async fn serves(dialer: &Dialer, addr: std::net::SocketAddr) -> Option<u64> {
    serving(dialer, addr).await.map(|s| s.version)
}

/// What a node says of the map it serves (`CLUSTER INFO`).
pub(crate) struct Serving {
    /// The version it serves in full (`pliant_map_version`).
    pub(crate) version: u64,
    /// If the map it hears is older than one it acted on (`pliant_map_behind:1`: the
    /// coordination store lost its state), the newest it acted on (`pliant_map_newest_acted`):
    /// it takes part in no move then.
    pub(crate) behind: Option<u64>,
}

/// What node `addr` says of the map it serves, if it answers.
pub(crate) async fn serving(dialer: &Dialer, addr: std::net::SocketAddr) -> Option<Serving> {
    let ask = async {
        // The whole exchange is bounded below; the dialer's own timeouts need not be.
        let mut c = dialer
            .to(addr)
            .io_timeout(None)
            .connect_async()
            .await
            .ok()?;
        let text = match c.call(&[b"CLUSTER", b"INFO"]).await.ok()? {
            Frame::Bulk(b) | Frame::Verbatim(b) => b,
            _ => return None,
        };
        let text = String::from_utf8_lossy(&text);
        let field = |name: &str| -> Option<u64> {
            text.lines()
                .find_map(|l| l.strip_prefix(name))?
                .trim()
                .parse()
                .ok()
        };
        Some(Serving {
            version: field("pliant_map_version:")?,
            behind: (field("pliant_map_behind:") == Some(1))
                .then(|| field("pliant_map_newest_acted:").unwrap_or(0)),
        })
    };
    tokio::time::timeout(Duration::from_secs(2), ask)
        .await
        .ok()
        .flatten()
}

/// Returns at the first SIGINT or SIGTERM: what stops a node (`pliant serve`) and a local
/// cluster's supervisor (`pliant cluster up`).
pub async fn stop_on_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
