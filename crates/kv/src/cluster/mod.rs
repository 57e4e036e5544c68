//! The cluster: Redis Cluster's 16,384 hash slots spread over nodes, so that every Redis Cluster
//! client routes by itself (`CLUSTER SLOTS`, `-MOVED`, `-ASK`), with the slot map and who is
//! alive kept in a coordination store that every node watches.
//!
//! - [`slot`]: which slot a key belongs to (CRC16, hash tags).
//! - [`map`]: the slot map, its JSON form and its checks.
//! - [`coord`]: the coordination store's trait and its embedded backend; [`coord_server`]
//!   serves the embedded one over the Redis protocol and [`remote`] is a node's client of it.
//! - [`Cluster`]: a node's membership (its id, its lease, the map it follows) and [`route`],
//!   the check every keyed command passes before it runs.
//!
//! Dependencies: `crc` (Redis Cluster's CRC16/XMODEM, rather than a table of our own); `nix`
//! (a safe `kill(2)`, to stop a local cluster's nodes with SIGTERM, which lets them sync their stores).

pub mod coord;
pub mod coord_server;
pub mod local;
pub mod map;
pub mod mover;
pub mod remote;
pub mod slot;
pub mod status;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;

use crate::frame::Frame;
pub use coord::{ClusterState, Coord, CoordError, Embedded};
pub use map::{Member, SlotMap};
pub use slot::{SLOTS, key_slot};

/// A node's lease in the coordination store lasts this long without renewal; it is renewed
/// three times per lease, so a node that stops (or hangs) leaves the member list within this.
pub const LEASE: Duration = Duration::from_secs(6);

/// A node's place in a cluster.
pub struct Cluster {
    me: Member,
    /// Where the coordination store is, as `--coord` named it.
    coord_addr: String,
    coord: Arc<dyn Coord>,
    state: watch::Receiver<Arc<ClusterState>>,
}

impl Cluster {
    /// Joins the cluster of `coord` as `me` and follows its map; renews the lease in a task
    /// until the stop signal turns true, then leaves.
    pub async fn join(
        me: Member,
        coord_addr: String,
        coord: Arc<dyn Coord>,
        mut stop: watch::Receiver<bool>,
    ) -> Result<Self, CoordError> {
        coord.join(me.clone(), LEASE).await?;
        let state = coord.watch().await?;
        let (renewer, id) = (coord.clone(), me.id.clone());
        let again = me.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(LEASE / 3);
            let mut warned = false;
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stop.changed() => {
                        if let Err(e) = renewer.leave(&id).await {
                            tracing::warn!("leaving the cluster: {e}");
                        }
                        return;
                    }
                }
                let renewed = match renewer.keepalive(&id).await {
                    // Lapsed (the store restarted, or this node stalled): join again.
                    Err(CoordError::NoLease(_)) => renewer.join(again.clone(), LEASE).await,
                    other => other,
                };
                match renewed {
                    Ok(()) if warned => {
                        tracing::info!("coordination store reachable again");
                        warned = false;
                    }
                    Ok(()) => {}
                    Err(e) if !warned => {
                        tracing::warn!("renewing this node's lease: {e}");
                        warned = true;
                    }
                    Err(_) => {}
                }
            }
        });
        Ok(Self {
            me,
            coord_addr,
            coord,
            state,
        })
    }

    /// This node.
    pub fn me(&self) -> &Member {
        &self.me
    }

    /// Where the coordination store is.
    pub fn coord_addr(&self) -> &str {
        &self.coord_addr
    }

    /// The coordination store.
    pub fn coord(&self) -> &Arc<dyn Coord> {
        &self.coord
    }

    /// The state as this node last heard it.
    pub fn state(&self) -> Arc<ClusterState> {
        self.state.borrow().clone()
    }
}

/// A node id for `addr`: 40 hex digits from a hash of the address and `salt` (the store's path
/// for a node with a store, so the same node restarted on the same store is the same node; the
/// start time for one without, whose data does not survive it).
pub fn node_id(addr: std::net::SocketAddr, salt: &str) -> String {
    use std::hash::BuildHasher;
    let text = format!("{addr}|{salt}");
    (0..3u64)
        .map(|seed| foldhash::quality::FixedState::with_seed(seed).hash_one(&text))
        .map(|h| format!("{h:016x}"))
        .collect::<String>()[..40]
        .to_string()
}

/// Where a keyed command may run, as Redis Cluster decides it: `None` here, or the error that
/// sends the client elsewhere (`-MOVED`, `-ASK`), or refuses it (`-CROSSSLOT`, `-CLUSTERDOWN`,
/// `-TRYAGAIN`). `has` says whether this node holds a key (asked only of a slot that is moving
/// away, where a key already moved is asked for at the target).
pub fn route<'a>(
    cluster: &Cluster,
    keys: impl Iterator<Item = &'a Bytes>,
    asking: bool,
    mut has: impl FnMut(&[u8]) -> bool,
) -> Option<Frame> {
    let mut keys = keys.peekable();
    let first = keys.peek()?;
    let slot = key_slot(first);
    let keys: Vec<&Bytes> = keys.collect();
    if keys.iter().any(|k| key_slot(k) != slot) {
        return Some(Frame::error(
            "CROSSSLOT Keys in request don't hash to the same slot",
        ));
    }
    let state = cluster.state();
    let map = &state.map;
    let me = map.index_of(&cluster.me.id);
    let Some(owner) = map.owner_index(slot) else {
        return Some(Frame::error(format!(
            "CLUSTERDOWN Hash slot {slot} not served"
        )));
    };
    let addr = |i: u16| map.nodes()[usize::from(i)].addr;
    if Some(owner) == me {
        let m = map.migration(slot)?;
        // Moving away: what is still here is answered here; what is gone is at the target.
        let held = keys.iter().filter(|k| has(k)).count();
        return match held {
            n if n == keys.len() => None,
            0 => Some(Frame::error(format!("ASK {slot} {}", addr(m.to)))),
            _ => Some(Frame::error(
                "TRYAGAIN Multiple keys request during rehashing of slot",
            )),
        };
    }
    if asking && map.migration(slot).is_some_and(|m| Some(m.to) == me) {
        return None;
    }
    Some(Frame::error(format!("MOVED {slot} {}", addr(owner))))
}

/// The map version node `addr` serves, if it answers.
pub(crate) async fn serves(addr: std::net::SocketAddr, password: Option<&str>) -> Option<u64> {
    let ask = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        let mut buf = bytes::BytesMut::new();
        if let Some(p) = password {
            crate::upstream::roundtrip(&mut s, &mut buf, &[b"AUTH", p.as_bytes()])
                .await
                .ok()?;
        }
        let info = crate::upstream::roundtrip(&mut s, &mut buf, &[b"CLUSTER", b"INFO"])
            .await
            .ok()?;
        let text = match info {
            crate::frame::Frame::Bulk(b) | crate::frame::Frame::Verbatim(b) => b,
            _ => return None,
        };
        String::from_utf8_lossy(&text)
            .lines()
            .find_map(|l| l.strip_prefix("pliant_map_version:"))?
            .trim()
            .parse()
            .ok()
    };
    tokio::time::timeout(Duration::from_secs(2), ask)
        .await
        .ok()
        .flatten()
}

