//! A node's side of its cluster: the routing every keyed command passes before it runs, as Redis
//! Cluster routes it (`-MOVED`, `-ASK`, `-CROSSSLOT`, `-TRYAGAIN`, `-CLUSTERDOWN`), and the gate
//! that keeps a slot move's deletions out from between a command's routing and its end.
//!
//! The control plane (hash slots, the slot map, the coordination store, membership, moves,
//! rescaling, the balancer) is `pliant-cluster`'s; this module builds on its [`Membership`],
//! map and slot types, and [`Node`] is what its balancer sees of a node ([`BalancedNode`]). The
//! commands a move runs here (`PLIANT.SLOTKEYS`, `RESTORE`, `DELIFEQ`, …) are `cmd/cluster.rs`.

use std::sync::Arc;

use bytes::Bytes;
use pliant_cluster::balancer::{BalancedNode, Balancer};
use pliant_cluster::coord::ClusterState;
use pliant_cluster::map::Member;
use pliant_cluster::membership::Membership;
use pliant_proto::frame::Frame;

use crate::node::Node;

/// The slot of a key and the number of slots: what the data plane's routing and its slot
/// commands use (`pliant_cluster::slot`'s).
pub use pliant_cluster::slot::{SLOTS, key_slot};

/// A node's place in a cluster: its [`Membership`], and what routing keeps beside it.
pub struct Cluster {
    membership: Membership,
    /// Keyed commands hold it shared from their routing decision to their end; a slot move's
    /// deletions at the source hold it alone. Without it a command routed here because its key
    /// was here could run after the key left: a read would miss a key that exists, a write
    /// would land on a node that no longer owns the slot.
    gate: std::sync::RwLock<()>,
    /// Keyed commands this node ran, by slot: the load a rescale and the balancer balance.
    slot_ops: Box<[std::sync::atomic::AtomicU64]>,
    /// Keys a slot move has copied out and not yet deleted here: a write to one would be lost
    /// (the target already has the copy, and a deletion here would leave the copy behind to
    /// come back when the slot switches), so writes to them answer `-TRYAGAIN` (Redis Cluster
    /// clients retry it) until the move's deletion step, or, if the move stopped half way,
    /// until it is run again or its slot stops moving away from here (a forced decommission).
    inflight: std::sync::Mutex<std::collections::HashSet<Bytes>>,
    /// Slots that were moving away from here when this node started: which of their keys a
    /// move had copied out before a crash is not known (the marks above live in memory), and a
    /// write to one of those (a DEL above all) would let the target's copy come back. So every
    /// write to such a slot answers `-TRYAGAIN` until its move ends (run again, it finishes
    /// it), as writes to marked keys do. `unsure_any` keeps the check off every other write.
    unsure: std::sync::Mutex<std::collections::HashSet<u16>>,
    unsure_any: std::sync::atomic::AtomicBool,
    /// The balancer, if the node runs one (`--balancer`): what `PLIANT.BALANCER` asks.
    balancer: std::sync::OnceLock<Balancer>,
    /// Held by a `PLIANT.MIGRATE` call for as long as it streams: one at a time from this node.
    /// Two at once over one slot (a rescaler killed while its call ran here, and the rescale run
    /// again) would both copy a key; the first's deletion here then sends the key's writers to
    /// the target, whose newer value the second's late copy of the old one overwrote (a lost
    /// acknowledged write, seen once in CI). The rescaler moves one slot range out of a node at
    /// a time anyway.
    streaming: tokio::sync::Mutex<()>,
    /// Keys of slots moving here that a client wrote here (sent with `-ASK`, so after the
    /// source lost them), by slot, for as long as that move of their slot goes on:
    /// `PLIANT.RESTORE` leaves them alone. A copy of such a key can still arrive after the
    /// write (a batch held up in the network on a connection its source gave up on, which the
    /// source then copied again, deleted on that second acknowledgement, and so sent the key's
    /// writers here), and it holds a value older than the write or a deletion, which it would
    /// otherwise undo. A slot's keys belong to one move (the map version it began at,
    /// `Migration::since`) and count only while that move is the slot's current one here: kept
    /// into a later move of the slot here, they would refuse that move's copies, which the
    /// source then deletes. The move, not the slot's state in the last map heard, is what is
    /// compared: this node may never hear the map between two moves (maps heard while it was
    /// busy or cut off from the store come as one change, the latest), and a move given up
    /// and begun again looks the same in two maps but for its `since`. Forgotten at once when
    /// the node hears the slot's move end ([`Cluster::new`]'s task), or starts moving it away.
    written_here: Arc<std::sync::Mutex<WrittenHere>>,
}

/// Keys clients wrote at a move's target, by slot, each slot's with the move they were written
/// during (see `Cluster::written_here`), and the bytes of those keys.
#[derive(Default)]
struct WrittenHere {
    slots: std::collections::HashMap<u16, (u64, std::collections::HashSet<Bytes>)>,
    bytes: usize,
}

/// The most key bytes [`Cluster::clients_write`] notes; past it, writes sent to a move's target
/// answer `-TRYAGAIN` until the move ends. Without it a client could make the record grow
/// without storing anything (ASKING, then DEL of keys the target lacks, as many as it likes).
/// 64 MiB is a million keys of 64 bytes, more than a slot move of the benchmarks' 2 M keys
/// spread over 16,384 slots sees written at its target.
pub const WRITTEN_HERE_MAX_BYTES: usize = 64 << 20;

impl WrittenHere {
    /// Keeps only the slots `keep` says (given the slot and the move its keys were written
    /// during), and their bytes.
    fn retain(&mut self, mut keep: impl FnMut(u16, u64) -> bool) {
        let mut freed = 0;
        self.slots.retain(|&slot, (since, keys)| {
            let k = keep(slot, *since);
            if !k {
                freed += keys.iter().map(Bytes::len).sum::<usize>();
            }
            k
        });
        self.bytes -= freed;
    }

    /// Forgets what was written to `slot`.
    fn forget(&mut self, slot: u16) {
        if let Some((_, keys)) = self.slots.remove(&slot) {
            self.bytes -= keys.iter().map(Bytes::len).sum::<usize>();
        }
    }

    /// Keeps only what was written during the moves to `me` that `map` has.
    fn retain_current(&mut self, map: &pliant_cluster::SlotMap, me: Option<u16>) {
        self.retain(|slot, since| import(map, me, slot) == Some(since));
    }
}

/// The move of `slot` to node `me` in `map` (the version it began at), if it is moving there.
fn import(map: &pliant_cluster::SlotMap, me: Option<u16>, slot: u16) -> Option<u64> {
    map.migration(slot)
        .filter(|m| Some(m.to) == me)
        .map(|m| m.since)
}

impl Cluster {
    /// Routing over `membership` (a node that has joined its cluster).
    pub fn new(membership: Membership) -> Self {
        let state = membership.state();
        let me = state.map.index_of(&membership.me().id);
        let written_here: Arc<std::sync::Mutex<WrittenHere>> = Arc::default();
        // Every map this node hears, as it hears it: what clients wrote during a move that is
        // over is forgotten (see the field). The checks that use the record compare moves
        // themselves; this only frees it early.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let (mut maps, written, id) = (
                membership.watch(),
                Arc::downgrade(&written_here),
                membership.me().id.clone(),
            );
            rt.spawn(async move {
                while maps.changed().await.is_ok() {
                    let Some(written) = written.upgrade() else {
                        return;
                    };
                    // The map is read under the record's lock: one read before it could be
                    // older than the one a client's write was noted under meanwhile.
                    let mut w = written.lock().unwrap_or_else(|p| p.into_inner());
                    let state = maps.borrow_and_update().clone();
                    w.retain_current(&state.map, state.map.index_of(&id));
                }
            });
        }
        let unsure: std::collections::HashSet<u16> = state
            .map
            .migrations()
            .filter(|(_, m)| Some(m.from) == me)
            .map(|(slot, _)| slot)
            .collect();
        Self {
            unsure_any: std::sync::atomic::AtomicBool::new(!unsure.is_empty()),
            unsure: std::sync::Mutex::new(unsure),
            membership,
            gate: std::sync::RwLock::new(()),
            slot_ops: (0..SLOTS)
                .map(|_| std::sync::atomic::AtomicU64::new(0))
                .collect(),
            inflight: std::sync::Mutex::new(std::collections::HashSet::new()),
            balancer: std::sync::OnceLock::new(),
            streaming: tokio::sync::Mutex::new(()),
            written_here,
        }
    }

    /// This node's turn to stream a slot move's copy out (see `streaming`): waits for the call
    /// before it to end.
    pub async fn stream_turn(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.streaming.lock().await
    }

    /// Whether `slot` is moving here, as this node last heard.
    pub fn importing(&self, slot: u16) -> bool {
        self.import(slot).is_some()
    }

    /// The move of `slot` here (the map version it began at), as this node last heard.
    pub fn import(&self, slot: u16) -> Option<u64> {
        let state = self.state();
        import(&state.map, state.map.index_of(&self.me().id), slot)
    }

    /// Notes that a client is writing `keys` here (see `written_here`), those of slots moving
    /// here; called before the write runs, so no copy can land between the two. `false`, noting
    /// nothing, when the record would pass [`WRITTEN_HERE_MAX_BYTES`]: the write must not run.
    pub fn clients_write(&self, keys: impl IntoIterator<Item = Bytes>) -> bool {
        let mut w = self.written_here.lock().unwrap_or_else(|p| p.into_inner());
        let state = self.state();
        let me = state.map.index_of(&self.me().id);
        let mut new: Vec<(u16, u64, Bytes)> = Vec::new();
        // A key twice in one command (MSET k a k b) is counted once: bytes counted and never
        // inserted would never be given back.
        let mut seen = std::collections::HashSet::new();
        for k in keys {
            let slot = key_slot(&k);
            let Some(since) = import(&state.map, me, slot) else {
                continue;
            };
            if !seen.insert(k.clone()) {
                continue;
            }
            match w.slots.get(&slot) {
                // What was written during an earlier move of the slot is no longer anyone's:
                // neither its keys nor its bytes count in this move.
                Some((then, _)) if *then != since => w.forget(slot),
                Some((_, keys)) if keys.contains(&k) => continue,
                _ => {}
            }
            new.push((slot, since, k));
        }
        let bytes: usize = new.iter().map(|(_, _, k)| k.len()).sum();
        if w.bytes + bytes > WRITTEN_HERE_MAX_BYTES {
            return false;
        }
        w.bytes += bytes;
        for (slot, since, k) in new {
            w.slots
                .entry(slot)
                .or_insert_with(|| (since, Default::default()))
                .1
                .insert(k);
        }
        true
    }

    /// Whether a client wrote `key` here since its slot began moving here (see
    /// `written_here`).
    pub fn written_here(&self, key: &[u8]) -> bool {
        let slot = key_slot(key);
        let mut w = self.written_here.lock().unwrap_or_else(|p| p.into_inner());
        let Some((since, keys)) = w.slots.get(&slot) else {
            return false;
        };
        if self.import(slot) == Some(*since) {
            return keys.contains(key);
        }
        w.forget(slot);
        false
    }

    /// Forgets what clients wrote here to `slots` (see `written_here`): they are moving away
    /// from here, so not here; a later move of them here starts with nothing written.
    pub fn moving_away(&self, slots: &[u16]) {
        let mut w = self.written_here.lock().unwrap_or_else(|p| p.into_inner());
        w.retain(|s, _| !slots.contains(&s));
    }

    /// Whether `key`'s slot was moving away from here when the node started and still is (see
    /// the field); slots that stopped moving are forgotten.
    fn unsure(&self, key: &[u8]) -> bool {
        let mut u = self.unsure.lock().unwrap_or_else(|p| p.into_inner());
        let state = self.state();
        let me = state.map.index_of(&self.me().id);
        u.retain(|&s| state.map.migration(s).is_some_and(|g| Some(g.from) == me));
        if u.is_empty() {
            self.unsure_any
                .store(false, std::sync::atomic::Ordering::Release);
        }
        u.contains(&key_slot(key))
    }

    /// Its membership: the control plane's view of this node.
    pub fn membership(&self) -> &Membership {
        &self.membership
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
        if self.unsure_any.load(std::sync::atomic::Ordering::Acquire) && self.unsure(key) {
            return true;
        }
        let mut m = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        if m.is_empty() || !m.contains(key) {
            return false;
        }
        let state = self.state();
        let me = state.map.index_of(&self.me().id);
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
    pub fn balancer(&self) -> Option<&Balancer> {
        self.balancer.get()
    }

    /// Gives the node its balancer (once, at start).
    pub fn set_balancer(&self, b: Balancer) {
        let _ = self.balancer.set(b);
    }

    /// This node.
    pub fn me(&self) -> &Member {
        self.membership.me()
    }

    /// Where the coordination store is.
    pub fn coord_addr(&self) -> &str {
        self.membership.coord_addr()
    }

    /// The coordination store.
    pub fn coord(&self) -> &Arc<dyn pliant_cluster::Coord> {
        self.membership.coord()
    }

    /// The state as this node last heard it.
    pub fn state(&self) -> Arc<ClusterState> {
        self.membership.state()
    }
}

/// What the balancer sees of a node: its membership, its per-slot counts, its stop signal.
impl BalancedNode for Node {
    fn membership(&self) -> Option<&Membership> {
        self.cluster().map(Cluster::membership)
    }

    fn slot_ops(&self, slot: u16) -> u64 {
        self.cluster().map_or(0, |c| c.ops(slot))
    }

    fn stop_signal(&self) -> tokio::sync::watch::Receiver<bool> {
        Node::stop_signal(self)
    }
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
    let me = map.index_of(&cluster.me().id);
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

#[cfg(test)]
mod tests {
    use super::*;
    use pliant_cluster::{Embedded, SlotMap};
    use pliant_proto::Dialer;
    use tokio::sync::watch;

    async fn join(me: Member, coord: Arc<Embedded>, stop: watch::Receiver<bool>) -> Cluster {
        let m = Membership::join(me, "embedded".into(), coord, Dialer::default(), stop)
            .await
            .expect("join");
        Cluster::new(m)
    }

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
        let one = join(member(1), coord.clone(), stop.clone()).await;
        let two = join(member(2), coord.clone(), stop).await;
        let slot = key_slot(b"{a}");
        let map = SlotMap::even(0, &[member(1)])
            .with_node(&member(2))
            .0
            .with_migration(slot, 1)
            .expect("a migration");
        assert!(coord.update_now(0, map).expect("update"));
        for c in [&one, &two] {
            let mut rx = c.membership().watch();
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

    /// What clients wrote at a move's target holds off that move's copies, and only that
    /// move's: a slot that stops moving here and comes again starts with nothing written
    /// (kept, it would refuse the new move's copies, which the source then deletes).
    #[tokio::test]
    async fn a_slot_moving_here_again_forgets_what_clients_wrote_here_last_time() {
        let coord: Arc<Embedded> = Arc::new(Embedded::new());
        let stop = watch::channel(false).1;
        let one = join(member(1), coord.clone(), stop.clone()).await;
        let two = join(member(2), coord.clone(), stop).await;
        let slot = key_slot(b"{a}");
        let seen = |v: u64| {
            let mut rx = two.membership().watch();
            async move {
                while rx.borrow_and_update().map.version() < v {
                    rx.changed().await.expect("watch");
                }
                // The forgetting task hears each map as this does.
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        };
        let (base, _) = SlotMap::even(0, &[member(1)]).with_node(&member(2));
        let moving = base.clone().with_migration(slot, 1).expect("a migration");
        assert!(coord.update_now(0, moving.clone()).expect("update"));
        seen(1).await;
        let k = Bytes::from_static(b"{a}k");
        assert!(two.clients_write([k.clone(), Bytes::from_static(b"b")]));
        assert!(one.clients_write([k.clone()]));
        assert!(two.written_here(&k), "written at the target");
        assert!(!two.written_here(b"b"), "a slot not moving here");
        assert!(!one.written_here(&k), "the source notes nothing");
        // The move is given up, then started again: two maps the target hears one after the
        // other, with no copy or write in between.
        assert!(coord.update_now(1, base).expect("update"));
        seen(2).await;
        assert!(coord.update_now(2, moving).expect("update"));
        seen(3).await;
        assert!(!two.written_here(&k), "forgotten between the two moves");
        // And a move out of the node forgets at once.
        assert!(two.clients_write([k.clone()]));
        two.moving_away(&[slot]);
        assert!(!two.written_here(&k));
        // The record is bounded: a write that would pass it is refused and noted nowhere (the
        // caller answers -TRYAGAIN); one within it still is, and a key noted once costs nothing
        // more.
        let mut huge = b"{a}".to_vec();
        huge.resize(WRITTEN_HERE_MAX_BYTES, b'x');
        let huge = Bytes::from(huge);
        assert!(
            two.clients_write([k.clone(), k.clone()]),
            "one key twice in one write"
        );
        two.moving_away(&[slot]);
        assert!(two.clients_write([huge.clone()]), "exactly the bound");
        assert!(two.clients_write([huge.clone()]), "already noted");
        assert!(!two.clients_write([k.clone()]), "one byte past it");
        assert!(!two.written_here(&k));
        two.moving_away(&[slot]);
        assert!(
            two.clients_write([k.clone()]),
            "the bytes came back with the slot"
        );
    }

    /// Regression: a move given up and begun again, heard as one change (a node busy, or cut
    /// off from the store, through both updates hears only the latest map; here both are made
    /// before the node's watch runs), kept what clients wrote at the target during the first
    /// move: the slot was moving here in both maps the node saw. The second move's copies of
    /// those keys (newer: written at the source, the owner again, in between) were then
    /// skipped, and deleted at the source on their acknowledgement: acknowledged writes lost.
    /// What was written counts only during the move it was written in.
    #[tokio::test]
    async fn a_move_given_up_and_begun_again_unheard_forgets_what_clients_wrote_in_the_first() {
        let coord: Arc<Embedded> = Arc::new(Embedded::new());
        let stop = watch::channel(false).1;
        let one = join(member(1), coord.clone(), stop.clone()).await;
        let two = join(member(2), coord.clone(), stop).await;
        let slot = key_slot(b"{a}");
        let (base, _) = SlotMap::even(0, &[member(1)]).with_node(&member(2));
        let moving = base.clone().with_migration(slot, 1).expect("a migration");
        assert!(coord.update_now(0, moving.clone()).expect("update"));
        let mut rx = two.membership().watch();
        while rx.borrow_and_update().map.version() < 1 {
            rx.changed().await.expect("watch");
        }
        let k = Bytes::from_static(b"{a}k");
        assert!(two.clients_write([k.clone()]));
        assert!(two.written_here(&k));
        let first = two.import(slot).expect("moving here");
        // Given up (a forced decommission of a target taken for dead), then begun again, with
        // no await in between: the node's tasks hear only the second.
        assert!(coord.update_now(1, base).expect("update"));
        assert!(coord.update_now(2, moving).expect("update"));
        while rx.borrow_and_update().map.version() < 3 {
            rx.changed().await.expect("watch");
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let second = two.import(slot).expect("moving here again");
        assert!(second > first, "a new move: {first} then {second}");
        assert!(
            !two.written_here(&k),
            "a client's write during the first move must not hold off the second's copies"
        );
        // Noted again during the second, it holds.
        assert!(two.clients_write([k.clone()]));
        assert!(two.written_here(&k));
        // Once more, unheard, and this time a client writes the key again before any copy
        // comes: noted anew for the third move (not taken for noted already by the second's).
        let (base, _) = SlotMap::even(0, &[member(1)]).with_node(&member(2));
        let moving = base.clone().with_migration(slot, 1).expect("a migration");
        assert!(coord.update_now(3, base).expect("update"));
        assert!(coord.update_now(4, moving).expect("update"));
        // No await: the map-watch task has not run, the record is as the second move left it.
        assert_eq!(two.state().map.version(), 5);
        assert!(two.clients_write([k.clone()]));
        assert!(two.written_here(&k), "written during the third move");
        drop(one);
    }

    #[tokio::test]
    async fn a_slot_without_an_owner_is_clusterdown() {
        let coord: Arc<Embedded> = Arc::new(Embedded::new());
        let stop = watch::channel(false).1;
        let one = join(member(1), coord, stop).await;
        assert!(
            code(route(&one, keys(&["k"]).iter(), false, |_| true))
                .is_some_and(|e| e.starts_with("CLUSTERDOWN"))
        );
    }
}
