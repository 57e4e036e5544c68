//! A node's membership of a cluster: its id and address, its lease in the coordination store
//! (renewed in a task), the map it follows (by watch), and the dialer the control plane reaches
//! the other nodes and the store with.

use std::sync::Arc;
use std::time::Duration;

use pliant_proto::Dialer;
use tokio::sync::watch;

use crate::coord::{ClusterState, Coord, CoordError};
use crate::map::Member;

/// A node's lease in the coordination store lasts this long without renewal; it is renewed
/// three times per lease, so a node that stops (or hangs) leaves the member list within this.
pub const LEASE: Duration = Duration::from_secs(6);

/// A node's place in a cluster, as the control plane knows it. The data plane's routing (and
/// its gate) is built over it by `pliant-kv`.
pub struct Membership {
    me: Member,
    /// Where the coordination store is, as `--coord` named it.
    coord_addr: String,
    coord: Arc<dyn Coord>,
    state: watch::Receiver<Arc<ClusterState>>,
    /// Address-independent (the cluster's password, the timeouts): aimed at a node with
    /// [`Dialer::to`] whenever the control plane talks to one.
    dialer: Dialer,
}

impl Membership {
    /// Joins the cluster of `coord` as `me` and follows its map; renews the lease in a task
    /// until `stop` turns true (the server then leaves, once it has served what it read).
    pub async fn join(
        me: Member,
        coord_addr: String,
        coord: Arc<dyn Coord>,
        dialer: Dialer,
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
            dialer,
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

    /// The state as this node hears it, changes included (to wait for a map version).
    pub fn watch(&self) -> watch::Receiver<Arc<ClusterState>> {
        self.state.clone()
    }

    /// The control plane's dialer, aimed at no node: [`Dialer::to`] aims it.
    pub fn dialer(&self) -> &Dialer {
        &self.dialer
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
