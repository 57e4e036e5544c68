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
/// three times per lease, so a node that stops leaves the member list within this, and one
/// that hangs within [`HUNG`] more.
pub const LEASE: Duration = Duration::from_secs(6);

/// A node whose serving runtime has shown no sign of life for this long is hung: its lease is
/// no longer renewed (on a thread of its own, it would be for ever). Far longer than a lease,
/// so that a node only busy (a synced write on a loaded disk, a long batch under its lock)
/// keeps its place.
pub const HUNG: Duration = Duration::from_secs(30);

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
        stop: watch::Receiver<bool>,
    ) -> Result<Self, CoordError> {
        coord.join(me.clone(), LEASE).await?;
        let state = coord.watch().await?;
        let (id, again) = (me.id.clone(), me.clone());
        match coord.renewer() {
            // On a thread and a runtime of its own: a node serving on one thread (the default)
            // that is busy, or blocked on a synced write, for longer than a lease would
            // otherwise hold its renewals back and lose its place in the cluster.
            Some(renewer) => {
                // The serving runtime beats once a second; the lease is renewed only while it
                // has beaten within HUNG.
                let started = std::time::Instant::now();
                let beat = Arc::new(std::sync::atomic::AtomicU64::new(0));
                {
                    let (beat, mut stop) = (beat.clone(), stop.clone());
                    tokio::spawn(async move {
                        let mut tick = tokio::time::interval(Duration::from_secs(1));
                        loop {
                            tokio::select! {
                                _ = tick.tick() => {}
                                _ = stop.changed() => return,
                            }
                            let ms = started.elapsed().as_millis() as u64;
                            beat.store(ms, std::sync::atomic::Ordering::Relaxed);
                        }
                    });
                }
                let alive = move || {
                    let last = beat.load(std::sync::atomic::Ordering::Relaxed);
                    started.elapsed().as_millis() as u64 <= last + HUNG.as_millis() as u64
                };
                std::thread::Builder::new()
                    .name("pliant-lease".into())
                    .spawn(move || {
                        match tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                        {
                            Ok(rt) => rt.block_on(renew(renewer, id, again, stop, alive)),
                            Err(e) => tracing::error!("the lease's runtime: {e}"),
                        }
                    })
                    .map_err(|e| {
                        CoordError::Refused(format!("starting the lease's thread: {e}"))
                    })?;
            }
            None => {
                tokio::spawn(renew(coord.clone(), id, again, stop, || true));
            }
        }
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

/// Renews node `id`'s lease three times per lease until `stop` turns true, while `alive`
/// says the node serves; joins again (as `me`) if it lapsed.
async fn renew(
    renewer: Arc<dyn Coord>,
    id: String,
    me: Member,
    mut stop: watch::Receiver<bool>,
    alive: impl Fn() -> bool,
) {
    let mut tick = tokio::time::interval(LEASE / 3);
    let mut warned = false;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            // The server leaves once it has served what it read (`Server::run`).
            _ = stop.changed() => return,
        }
        if !alive() {
            if !warned {
                tracing::error!(
                    "this node has not served for {HUNG:?}: its lease is left to lapse"
                );
                warned = true;
            }
            continue;
        }
        let renewed = match renewer.keepalive(&id).await {
            // Lapsed (the store restarted, or this node stalled): join again.
            Err(CoordError::NoLease(_)) => renewer.join(me.clone(), LEASE).await,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coord::Embedded;
    use std::net::SocketAddr;

    /// A node whose serving runtime says it is hung is not renewed: its lease lapses, and when
    /// it serves again it joins again.
    #[tokio::test(start_paused = true)]
    async fn a_hung_node_is_not_renewed_and_joins_again_once_it_serves() {
        let store = Arc::new(Embedded::new());
        let me = Member {
            id: format!("{:040x}", 9),
            addr: SocketAddr::from(([127, 0, 0, 1], 1)),
        };
        store.join(me.clone(), LEASE).await.expect("join");
        let serving = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (stop_tx, stop) = watch::channel(false);
        let alive = {
            let serving = serving.clone();
            move || serving.load(std::sync::atomic::Ordering::Relaxed)
        };
        let coord: Arc<dyn Coord> = store.clone();
        let task = tokio::spawn(renew(coord, me.id.clone(), me.clone(), stop, alive));
        tokio::time::sleep(LEASE + Duration::from_secs(1)).await;
        store.expire();
        assert!(
            store.current().members.is_empty(),
            "a hung node kept its lease"
        );
        serving.store(true, std::sync::atomic::Ordering::Relaxed);
        tokio::time::sleep(LEASE).await;
        assert_eq!(
            store.current().members,
            vec![me],
            "it joined again once it served"
        );
        stop_tx.send(true).expect("stop");
        task.await.expect("renewer");
    }

    /// A node serving on one thread (the default) that stays busy for longer than a lease keeps
    /// its place: its lease is renewed on a thread of its own. Before, the renewals waited for
    /// the node's thread and the lease lapsed.
    #[test]
    fn a_node_busy_for_longer_than_a_lease_keeps_its_lease() {
        let store = Arc::new(Embedded::new());
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (server_stop, stopped) = watch::channel(false);
        let served = store.clone();
        let server = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("the store's runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind");
                addr_tx
                    .send(listener.local_addr().expect("addr"))
                    .expect("send");
                crate::coord_server::serve(listener, Some(served), None, None, stopped).await;
            });
        });
        let addr = addr_rx.recv().expect("the store's address");
        let node = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("the node's runtime");
        let dialer = Dialer::default();
        let me = Member {
            id: format!("{:040x}", 7),
            addr: SocketAddr::from(([127, 0, 0, 1], 1)),
        };
        let (node_stop, stopping) = watch::channel(false);
        let coord: Arc<dyn Coord> = Arc::new(Arc::new(crate::remote::Remote::new(addr, &dialer)));
        let _membership = node
            .block_on(Membership::join(
                me.clone(),
                addr.to_string(),
                coord,
                dialer,
                stopping,
            ))
            .expect("join");
        // The node's only thread does nothing else for longer than a lease.
        node.block_on(async { std::thread::sleep(LEASE + Duration::from_secs(2)) });
        let members = store.current().members;
        assert!(
            members.iter().any(|m| m.id == me.id),
            "the lease lapsed while the node was busy: {members:?}"
        );
        node_stop.send(true).expect("stop the node");
        server_stop.send(true).expect("stop the store");
        drop(node);
        server.join().expect("the store's thread");
    }
}
