//! The cluster: Redis Cluster's 16,384 hash slots spread over nodes, so that every Redis Cluster
//! client routes by itself (`CLUSTER SLOTS`, `-MOVED`, `-ASK`), with the slot map and who is
//! alive kept in a coordination store that every node watches.
//!
//! - [`slot`]: which slot a key belongs to (CRC16, hash tags).
//! - [`map`]: the slot map, its JSON form and its checks.
//! - [`coord`]: the coordination store's trait and its embedded backend; [`coord_server`]
//!   serves the embedded one over the Redis protocol and [`remote`] is a node's client of it.
//! - [`balancer`]: Mantle's `where` acting on the cluster: a policy over every node's load
//!   moves this node's slots.
//! - [`Cluster`]: a node's membership (its id, its lease, the map it follows) and [`route`],
//!   the check every keyed command passes before it runs.
//!
//! Dependencies: `crc` (Redis Cluster's CRC16/XMODEM, rather than a table of our own); `nix`
//! (a safe `kill(2)`, to stop a local cluster's nodes with SIGTERM, which lets them sync their stores).

pub mod balancer;
pub mod coord;
pub mod coord_server;
#[cfg(feature = "etcd")]
pub mod etcd;
pub mod local;
pub mod map;
pub mod mover;
pub mod remote;
pub mod rescale;
pub mod slot;
pub mod status;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use pliant_proto::frame::Frame;
use tokio::sync::watch;

pub use coord::{ClusterState, Coord, CoordError, Embedded};
pub use map::{Member, SlotMap};
pub use slot::{SLOTS, key_slot};

/// What `--etcd` says in a build without the `etcd` feature.
pub const NO_ETCD: &str =
    "this pliant was built without etcd support: build it with `--features etcd` (needs protoc)";

/// The coordination store `desc` names (`ADDR:PORT` of an embedded one, or `etcd:URL`).
pub async fn open_coord(desc: &str, password: Option<&str>) -> Result<Arc<dyn Coord>, CoordError> {
    if let Some(url) = desc.strip_prefix("etcd:") {
        #[cfg(feature = "etcd")]
        return Ok(Arc::new(Arc::new(
            etcd::Etcd::connect(url)
                .await?
                .with_password(password.map(str::to_string)),
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
    Ok(Arc::new(Arc::new(remote::Remote::new(
        addr,
        password.map(str::to_string),
    ))))
}

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
    /// Keyed commands hold it shared from their routing decision to their end; a slot move's
    /// deletions at the source hold it alone. Without it a command routed here because its key
    /// was here could run after the key left: a read would miss a key that exists, a write
    /// would land on a node that no longer owns the slot.
    gate: std::sync::RwLock<()>,
    /// Keyed commands this node ran, by slot: the load a rescale balances.
    slot_ops: Box<[std::sync::atomic::AtomicU64]>,
    /// Keys a slot move has copied out and not yet deleted here: a write to one would be lost
    /// (the target already has the copy, and a deletion here would leave the copy behind to
    /// come back when the slot switches), so writes to them answer `-TRYAGAIN` (Redis Cluster
    /// clients retry it) until the move's deletion step, or, if the move stopped half way,
    /// until it is run again or its slot stops moving away from here (a forced decommission).
    inflight: std::sync::Mutex<std::collections::HashSet<Bytes>>,
    /// The balancer, if the node runs one (`--balancer`).
    balancer: std::sync::OnceLock<balancer::Balancer>,
}

impl Cluster {
    /// Joins the cluster of `coord` as `me` and follows its map; renews the lease in a task
    /// until the stop signal turns true (`Server::run` then leaves, once it has served what it
    /// read).
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
                    // The server leaves once it has served what it read (`Server::run`).
                    _ = stop.changed() => return,
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
            gate: std::sync::RwLock::new(()),
            slot_ops: (0..SLOTS)
                .map(|_| std::sync::atomic::AtomicU64::new(0))
                .collect(),
            inflight: std::sync::Mutex::new(std::collections::HashSet::new()),
            balancer: std::sync::OnceLock::new(),
        })
    }

    /// Held by a keyed command from its routing to its end (see the field).
    pub fn gate(&self) -> std::sync::RwLockReadGuard<'_, ()> {
        self.gate.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Held by a slot move's deletions at the source.
    pub fn gate_exclusive(&self) -> std::sync::RwLockWriteGuard<'_, ()> {
        self.gate.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks `keys` as copied out by a slot move (see the field); called under
    /// [`gate_exclusive`](Self::gate_exclusive), so no write is between its routing and its end.
    pub fn copying(&self, keys: impl IntoIterator<Item = Bytes>) {
        let mut m = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        m.extend(keys);
    }

    /// Ends the marks of `keys` (the move deleted them here, or kept them because they changed).
    pub fn copied<'a>(&self, keys: impl IntoIterator<Item = &'a [u8]>) {
        let mut m = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        for k in keys {
            m.remove(k);
        }
    }

    /// Whether a write to `key` must wait: a move has copied it and not yet deleted it here,
    /// and its slot is still moving away from here (a mark whose slot is not is dropped).
    pub fn is_copying(&self, key: &[u8]) -> bool {
        let mut m = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        if m.is_empty() || !m.contains(key) {
            return false;
        }
        let state = self.state();
        let me = state.map.index_of(&self.me.id);
        let moving_out = |k: &[u8]| {
            state
                .map
                .migration(key_slot(k))
                .is_some_and(|g| Some(g.from) == me)
        };
        if moving_out(key) {
            return true;
        }
        m.retain(|k| moving_out(k));
        false
    }

    /// Counts a keyed command run here on `slot`.
    pub fn count_op(&self, slot: u16) {
        if let Some(c) = self.slot_ops.get(usize::from(slot)) {
            c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Keyed commands run here on `slot` since the start.
    pub fn ops(&self, slot: u16) -> u64 {
        self.slot_ops
            .get(usize::from(slot))
            .map_or(0, |c| c.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Keyed commands run here since the start, on every slot: the load `PLIANT.LOAD` reports.
    pub fn total_ops(&self) -> u64 {
        self.slot_ops
            .iter()
            .map(|c| c.load(std::sync::atomic::Ordering::Relaxed))
            .sum()
    }

    /// The balancer, if the node runs one.
    pub fn balancer(&self) -> Option<&balancer::Balancer> {
        self.balancer.get()
    }

    /// Gives the node its balancer (once, at start).
    pub fn set_balancer(&self, b: balancer::Balancer) {
        let _ = self.balancer.set(b);
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
/// for a node with a store, so the same node restarted at the same address on the same store is
/// the same node; the start time for one without, whose data does not survive it). The hash is
/// not promised stable across Pliant versions: a node that must keep its id whatever changes
/// is given one (`--node-id`), as `pliant cluster up` gives its nodes the ids it keeps.
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
        // Importing: keys of several, some not here yet, wait until all have come (Redis).
        if keys.len() > 1 && !keys.iter().all(|k| has(k)) {
            return Some(Frame::error(
                "TRYAGAIN Multiple keys request during rehashing of slot",
            ));
        }
        return None;
    }
    Some(Frame::error(format!("MOVED {slot} {}", addr(owner))))
}

/// The map version node `addr` serves, if it answers.
pub(crate) async fn serves(addr: std::net::SocketAddr, password: Option<&str>) -> Option<u64> {
    let ask = async {
        // The whole exchange is bounded below; the dialer's own timeouts need not be.
        let mut c = pliant_proto::Dialer::new(addr)
            .password(password)
            .io_timeout(None)
            .connect_async()
            .await
            .ok()?;
        let text = match c.call(&[b"CLUSTER", b"INFO"]).await.ok()? {
            Frame::Bulk(b) | Frame::Verbatim(b) => b,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn member(i: u8) -> Member {
        Member {
            id: format!("{i:040x}"),
            addr: std::net::SocketAddr::from(([127, 0, 0, 1], 7000 + u16::from(i))),
        }
    }

    fn keys(ks: &[&'static str]) -> Vec<Bytes> {
        ks.iter()
            .map(|k| Bytes::from_static(k.as_bytes()))
            .collect()
    }

    fn code(f: Option<Frame>) -> Option<String> {
        match f {
            None => None,
            Some(Frame::Error(e)) => Some(e),
            Some(other) => panic!("not an error: {other:?}"),
        }
    }

    /// Node 1 as seen by itself and by node 2, over one embedded store whose map gives node 1
    /// every slot, with `{a}`'s slot moving from node 1 to node 2.
    async fn two_nodes() -> (Cluster, Cluster, u16) {
        let coord: Arc<Embedded> = Arc::new(Embedded::new());
        let stop = watch::channel(false).1;
        let one = Cluster::join(member(1), "embedded".into(), coord.clone(), stop.clone())
            .await
            .expect("join");
        let two = Cluster::join(member(2), "embedded".into(), coord.clone(), stop)
            .await
            .expect("join");
        let slot = key_slot(b"{a}");
        let map = SlotMap::even(0, &[member(1)])
            .with_node(&member(2))
            .0
            .with_migration(slot, 1)
            .expect("a migration");
        assert!(coord.update_now(0, map).expect("update"));
        for c in [&one, &two] {
            let mut rx = c.state.clone();
            while rx.borrow_and_update().map.version() < 1 {
                rx.changed().await.expect("watch");
            }
        }
        (one, two, slot)
    }

    #[tokio::test]
    async fn routing_answers_as_redis_cluster_does_during_a_slot_move() {
        let (one, two, slot) = two_nodes().await;
        let all = |_: &[u8]| true;
        let none = |_: &[u8]| false;
        let first_only = |k: &[u8]| k == b"{a}1";
        // The source answers for what it still has, sends on for what it has not.
        assert_eq!(code(route(&one, keys(&["{a}1"]).iter(), false, all)), None);
        assert_eq!(
            code(route(&one, keys(&["{a}1"]).iter(), false, none)),
            Some(format!("ASK {slot} 127.0.0.1:7002"))
        );
        assert!(
            code(route(
                &one,
                keys(&["{a}1", "{a}2"]).iter(),
                false,
                first_only
            ))
            .is_some_and(|e| e.starts_with("TRYAGAIN"))
        );
        // The target serves the slot only to a client that says ASKING, and a multi-key
        // command only once all its keys have come.
        assert_eq!(
            code(route(&two, keys(&["{a}1"]).iter(), false, all)),
            Some(format!("MOVED {slot} 127.0.0.1:7001"))
        );
        assert_eq!(code(route(&two, keys(&["{a}1"]).iter(), true, none)), None);
        assert!(
            code(route(
                &two,
                keys(&["{a}1", "{a}2"]).iter(),
                true,
                first_only
            ))
            .is_some_and(|e| e.starts_with("TRYAGAIN"))
        );
        // Slots that are not moving: owner runs them, the other node sends clients there.
        assert_eq!(code(route(&one, keys(&["b"]).iter(), false, none)), None);
        assert_eq!(
            code(route(&two, keys(&["b"]).iter(), true, all)),
            Some(format!("MOVED {} 127.0.0.1:7001", key_slot(b"b")))
        );
        assert!(
            code(route(&one, keys(&["a", "b"]).iter(), false, all))
                .is_some_and(|e| e.starts_with("CROSSSLOT"))
        );
    }

    #[tokio::test]
    async fn a_slot_without_an_owner_is_clusterdown() {
        let coord: Arc<Embedded> = Arc::new(Embedded::new());
        let stop = watch::channel(false).1;
        let one = Cluster::join(member(1), "embedded".into(), coord, stop)
            .await
            .expect("join");
        assert!(
            code(route(&one, keys(&["k"]).iter(), false, |_| true))
                .is_some_and(|e| e.starts_with("CLUSTERDOWN"))
        );
    }
}
