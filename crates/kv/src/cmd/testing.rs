//! What the tests of the commands that reach other nodes (`PLIANT.MIGRATE`, `PLIANT.NETPROBE`)
//! share: a cluster node made in-process, whose map names a second node at a given address.

use std::sync::Arc;

use pliant_cluster::{Embedded, Member, Membership, SlotMap};

use crate::node::Node;

/// Member `i` of a test cluster, at `addr`.
pub(super) fn member(i: u8, addr: std::net::SocketAddr) -> Member {
    Member {
        id: format!("{i:040x}"),
        addr,
    }
}

/// Member 1 of a cluster (its own coordination store, embedded) whose map gives it every slot
/// and names `other` too, with `migrating` moving from it to `other`; its keys indexed by slot,
/// up to 10,000 of them in memory, no store.
pub(super) async fn cluster_node(other: &Member, migrating: Option<u16>) -> Arc<Node> {
    let coord: Arc<Embedded> = Arc::new(Embedded::new());
    let me = member(1, std::net::SocketAddr::from(([127, 0, 0, 1], 1)));
    let (mut map, to) = SlotMap::even(0, std::slice::from_ref(&me)).with_node(other);
    if let Some(slot) = migrating {
        map = map.with_migration(slot, to).expect("a migration");
    }
    assert!(coord.update_now(0, map).expect("update"));
    let m = Membership::join(
        me,
        "embedded".into(),
        coord,
        pliant_proto::Dialer::default(),
        tokio::sync::watch::channel(false).1,
    )
    .await
    .expect("join");
    let mut ks = crate::keyspace::Keyspace::new("lru", pliant_cache::Capacity::Keys(10_000), None)
        .expect("keyspace");
    ks.index_slots().expect("index");
    let node = Arc::new(Node::new(ks, &crate::config::Config::default()));
    node.set_cluster(crate::cluster::Cluster::new(m));
    node
}
