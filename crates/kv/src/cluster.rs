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
    /// [`Cluster::total_ops`] when the last batch of the last `PLIANT.MIGRATE` call here that
    /// ended well was sent: whether clients were served since, which paces the next call's first
    /// batch (`cmd/migrate.rs`). A call that failed leaves it older, so the next call's first
    /// batch may be paced for nothing: one pause, no more.
    ops_at_last_stream: std::sync::atomic::AtomicU64,
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
    /// Per slot moving here, the move (`Migration::since`) for which this node's keys of the
    /// slot are known to be that move's alone: what an earlier move of it here left (one given
    /// up while this node lived on: a forced decommission of a target that was only hung) has
    /// been dropped. Until then the slot's copies (`PLIANT.RESTORE`) and its `ASKING` clients
    /// wait: served, those keys would come back (a key the owner deleted since, with its old
    /// value), and kept, they would outlive the move as the slot's keys. Set only under
    /// [`gate_exclusive`](Self::gate_exclusive) and the keyspace lock ([`Cluster::drop_strays`]),
    /// so no command routed under an earlier move is between its routing and its end when
    /// it is. At start, every move under way here counts as settled: its copies may already
    /// be here, acknowledged and deleted at the source, and nothing tells them from an earlier
    /// move's (see docs/cluster.md).
    settled: std::sync::Mutex<std::collections::HashMap<u16, u64>>,
    /// Wakes the task that drops keys of slots this node no longer owns or imports
    /// ([`settle`]): a copy or a client found a slot moving here not settled yet.
    unsettled: Arc<tokio::sync::Notify>,
    /// The newest map version this node has heard and acted on, kept across restarts: a map
    /// older than it (a coordination store that lost its state) is not acted on
    /// ([`Cluster::act_on`]).
    record: Arc<MapRecord>,
    /// Set when the node started on a map older than its record: what it takes at start (the
    /// moves under way here as settled, the slots moving away as unsure) is taken from the
    /// first map it acts on instead. Taken from the older map, a move under way here in the
    /// newer one would have its copies dropped as strays once the store's state came back.
    adopt: std::sync::atomic::AtomicBool,
    /// Held while what `adopt` says is taken: once.
    adopting: std::sync::Mutex<()>,
    /// When the error about an older map was last logged, and for which version: once per
    /// version heard, and again at most once a minute (clients can wake the task often).
    behind_logged: std::sync::Mutex<Option<(u64, std::time::Instant)>>,
}

/// Keys one hold of the keyspace lock drops at most, in [`settle`]'s task: each hold is short,
/// so commands run between.
const STRAY_BATCH: usize = 256;

/// Keys a move's first batch (`PLIANT.RESTORE`) drops at most before it is written, if the
/// slot still holds an earlier move's keys (the task had not dropped them yet): about what the
/// batch itself writes under the same hold (a source sends at most 8,192 keys a batch). Past
/// it the batch is refused with `-TRYAGAIN` and the task goes on.
pub const RESTORE_DROPS_MAX: usize = 8192;

/// The file, in a cluster node's store directory, that holds the newest slot map version the
/// node has heard and acted on (see [`Cluster::act_on`]): one decimal number and a newline.
pub const MAP_RECORD_FILE: &str = "cluster-map-version";

/// Why a node does not act on the map it hears, or could not drop keys it does not own.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SettleError {
    /// The keyspace (its store) failed.
    #[error(transparent)]
    Keyspace(#[from] crate::keyspace::KvError),
    /// The map heard is older than one this node acted on: the coordination store lost its
    /// state, most likely. Acting on it could delete the only copy of acknowledged writes.
    #[error(
        "the slot map this node hears is version {heard}, older than version {acted} it has already acted on: did the coordination store lose its state (a lost cluster.json, a wiped etcd prefix)? This node drops no key and takes part in no slot move until the store holds a map of version {acted} or later again: restore the store's state (see docs/cluster.md, \"How do I recover from a lost coordination store?\")"
    )]
    Behind {
        /// The version of the map heard.
        heard: u64,
        /// The newest version this node acted on (its record).
        acted: u64,
    },
    /// Keys of a slot were still left to drop after 1,000,000 holds of the locks (`HOLDS_PER_SLOT`).
    #[error(
        "slot {slot}: keys still left to drop after {holds} holds of the locks ({dropped} dropped); left for the next pass"
    )]
    Unfinished {
        /// The slot.
        slot: u16,
        /// The holds spent on it.
        holds: usize,
        /// The keys dropped in them.
        dropped: usize,
    },
    /// Some slots of a settling pass failed (the others were settled): how many, and the
    /// first.
    #[error("{failures} slots could not be settled; the first, slot {slot}: {first}")]
    Slots {
        /// How many failed.
        failures: usize,
        /// The first that did.
        slot: u16,
        /// Why.
        first: Box<SettleError>,
    },
    /// The record of the newest map version acted on could not be written or read.
    #[error("the record of the newest slot map version this node acted on, {}: {why}", path.display())]
    Record {
        /// The record's file.
        path: std::path::PathBuf,
        /// What went wrong.
        why: String,
    },
}

/// The newest map version this node has heard and acted on (see [`Cluster::act_on`]), kept in
/// a file of its store's directory ([`MAP_RECORD_FILE`]) so that a restart remembers it; a node
/// without a store keeps it in memory only (it keeps no key across a restart either).
struct MapRecord {
    /// The file; held while it is written (one writer at a time: they share the temporary).
    path: std::sync::Mutex<Option<std::path::PathBuf>>,
    /// The version the file holds: read without the lock, on the clients' path too.
    acted: std::sync::atomic::AtomicU64,
}

impl MapRecord {
    /// What `path` holds (0 if it does not exist yet).
    fn open(path: Option<std::path::PathBuf>) -> Result<Self, SettleError> {
        let acted = match &path {
            None => 0,
            Some(p) => match std::fs::read_to_string(p) {
                Ok(text) => text.trim().parse::<u64>().map_err(|_| SettleError::Record {
                    path: p.clone(),
                    why: format!(
                        "it holds {:?}, not a map version; delete it only if the coordination store's map is the cluster's own (see docs/cluster.md)",
                        text.chars().take(40).collect::<String>()
                    ),
                })?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
                Err(e) => {
                    return Err(SettleError::Record {
                        path: p.clone(),
                        why: e.to_string(),
                    });
                }
            },
        };
        Ok(Self {
            path: std::sync::Mutex::new(path),
            acted: std::sync::atomic::AtomicU64::new(acted),
        })
    }

    fn acted(&self) -> u64 {
        self.acted.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Records `version` if it is newer, durably before it counts: a temporary, synced, renamed
    /// over the file, the rename synced through the directory (either version survives a
    /// crash, never half of one).
    fn raise(&self, version: u64) -> Result<(), SettleError> {
        let path = self.path.lock().unwrap_or_else(|p| p.into_inner());
        if version <= self.acted() {
            return Ok(());
        }
        if let Some(p) = path.as_ref() {
            write_record(p, version).map_err(|e| SettleError::Record {
                path: p.clone(),
                why: format!("writing version {version}: {e}"),
            })?;
        }
        self.acted
            .fetch_max(version, std::sync::atomic::Ordering::AcqRel);
        Ok(())
    }
}

/// Writes `version` to `path` (see [`MapRecord::raise`]).
fn write_record(path: &std::path::Path, version: u64) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(format!("{version}\n").as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    #[cfg(unix)]
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// What [`Cluster::drop_strays`] did: the keys it dropped, and whether none is left to drop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Strays {
    /// Keys dropped (from memory and store).
    pub dropped: usize,
    /// Whether the slot holds none this node should not (its move here, if any, is settled).
    pub done: bool,
}

/// What this node does with its keys of a slot, as the map it last heard has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// They are its own: it owns the slot (a move out of it included; its keys leave only by
    /// that move's deletions), or the slot moves here under the move they came with, or the
    /// map names no owner, or no node as this one (nothing to go by: kept).
    Keep,
    /// Not its own: the map names another owner, and the slot is not moving here, or moves
    /// here under a move (`settles`) not settled yet; once none is left, that move is.
    Drop { settles: Option<u64> },
}

/// Keys clients wrote at a move's target, by slot, each slot's with the move they were written
/// during (see `Cluster::written_here`), and the bytes of those keys.
#[derive(Default)]
struct WrittenHere {
    slots: std::collections::HashMap<u16, (u64, std::collections::HashSet<Bytes>)>,
    bytes: usize,
}

/// The most bytes of keys (with 64 bytes of overhead each) [`Cluster::clients_write`] notes; past
/// it, writes sent to a move's target answer `-TRYAGAIN` until the move ends. Without it a client could make the record grow
/// without storing anything (ASKING, then DEL of keys the target lacks, as many as it likes).
/// 64 MiB is a million keys of 64 bytes, more than a slot move of the benchmarks' 2 M keys
/// spread over 16,384 slots sees written at its target.
pub const WRITTEN_HERE_MAX_BYTES: usize = 64 << 20;

/// What one noted key costs the record besides its bytes: its `Bytes` handle (32 bytes), the
/// hash set's slot and control byte, and the key's own allocation, rounded up. Without it, keys
/// of a few bytes would hold several times the bound.
const NOTE_OVERHEAD: usize = 64;

/// The record's cost of noting `k` ([`WRITTEN_HERE_MAX_BYTES`]).
fn note_cost(k: &Bytes) -> usize {
    k.len() + NOTE_OVERHEAD
}

impl WrittenHere {
    /// Keeps only the slots `keep` says (given the slot and the move its keys were written
    /// during), and their bytes.
    fn retain(&mut self, mut keep: impl FnMut(u16, u64) -> bool) {
        let mut freed = 0;
        self.slots.retain(|&slot, (since, keys)| {
            let k = keep(slot, *since);
            if !k {
                freed += keys.iter().map(note_cost).sum::<usize>();
            }
            k
        });
        self.bytes -= freed;
    }

    /// Forgets what was written to `slot`.
    fn forget(&mut self, slot: u16) {
        if let Some((_, keys)) = self.slots.remove(&slot) {
            self.bytes -= keys.iter().map(note_cost).sum::<usize>();
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

/// What a node takes from the first map it acts on after it starts: the slots moving away from
/// it (`unsure`: which of their keys a move copied out is not known) and the moves under way to
/// it, taken as settled (see `Cluster::settled`).
fn at_start(
    map: &pliant_cluster::SlotMap,
    me: Option<u16>,
) -> (
    std::collections::HashSet<u16>,
    std::collections::HashMap<u16, u64>,
) {
    let unsure = map
        .migrations()
        .filter(|(_, m)| Some(m.from) == me)
        .map(|(slot, _)| slot)
        .collect();
    let settled = map
        .migrations()
        .filter(|(_, m)| Some(m.to) == me)
        .map(|(slot, m)| (slot, m.since))
        .collect();
    (unsure, settled)
}

impl Cluster {
    /// Routing over `membership` (a node that has joined its cluster), with the newest map
    /// version it acts on kept in memory only (a node without a store).
    pub fn new(membership: Membership) -> Self {
        let record = MapRecord::open(None).expect("no file to read");
        Self::build(membership, record)
    }

    /// [`Cluster::new`], with the newest map version it acts on kept in `record` (in its store's
    /// directory: [`MAP_RECORD_FILE`]), read now. Refused if the file holds something else.
    pub fn with_record(
        membership: Membership,
        record: std::path::PathBuf,
    ) -> Result<Self, SettleError> {
        Ok(Self::build(membership, MapRecord::open(Some(record))?))
    }

    fn build(membership: Membership, record: MapRecord) -> Self {
        let record = Arc::new(record);
        let state = membership.state();
        let me = state.map.index_of(&membership.me().id);
        let written_here: Arc<std::sync::Mutex<WrittenHere>> = Arc::default();
        // Every map this node hears, as it hears it: what clients wrote during a move that is
        // over is forgotten (see the field). The checks that use the record compare moves
        // themselves; this only frees it early.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let (mut maps, written, id, newest) = (
                membership.watch(),
                Arc::downgrade(&written_here),
                membership.me().id.clone(),
                record.clone(),
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
                    // A map older than one acted on (a store that lost its state) is not the
                    // cluster's: what it says is over may come back with the store's state.
                    if state.map.version() < newest.acted() {
                        continue;
                    }
                    w.retain_current(&state.map, state.map.index_of(&id));
                }
            });
        }
        // Started on a map older than one acted on: what follows is taken from the first map
        // acted on (see `adopt`).
        let adopt = state.map.version() < record.acted();
        let (unsure, settled) = if adopt {
            Default::default()
        } else {
            at_start(&state.map, me)
        };
        Self {
            record,
            adopt: std::sync::atomic::AtomicBool::new(adopt),
            adopting: std::sync::Mutex::new(()),
            behind_logged: std::sync::Mutex::new(None),
            settled: std::sync::Mutex::new(settled),
            unsettled: Arc::default(),
            unsure_any: std::sync::atomic::AtomicBool::new(!unsure.is_empty()),
            unsure: std::sync::Mutex::new(unsure),
            membership,
            gate: std::sync::RwLock::new(()),
            slot_ops: (0..SLOTS)
                .map(|_| std::sync::atomic::AtomicU64::new(0))
                .collect(),
            ops_at_last_stream: std::sync::atomic::AtomicU64::new(0),
            inflight: std::sync::Mutex::new(std::collections::HashSet::new()),
            balancer: std::sync::OnceLock::new(),
            streaming: tokio::sync::Mutex::new(()),
            written_here,
        }
    }

    /// The newest map version this node has heard and acted on (its record, kept across
    /// restarts where it has a store).
    pub fn acted_version(&self) -> u64 {
        self.record.acted()
    }

    /// Whether `state`'s map is older than one this node acted on (see [`Cluster::act_on`]):
    /// what `CLUSTER INFO` says as `pliant_map_behind`.
    pub fn behind(&self, state: &ClusterState) -> bool {
        state.map.version() < self.record.acted()
    }

    /// Checks that this node may act on `state`'s map: refused ([`SettleError::Behind`],
    /// logged) if it is older than the newest map the node acted on, which is what a node
    /// hears from a coordination store that lost its state (a fresh map gives its slots to
    /// others, and dropping their keys would delete the only copy of acknowledged writes);
    /// else the map's version is recorded, durably (a restart must remember it), before
    /// anything is done on it. Called before every destructive act a map decides: dropping
    /// keys of slots the map gives others, a move's copies written here, a move's copies sent
    /// from here (and deleted here). Writes a small file when the version grows: once a map.
    pub fn act_on(&self, state: &ClusterState) -> Result<(), SettleError> {
        self.not_behind(state)?;
        let (heard, acted) = (state.map.version(), self.record.acted());
        self.record.raise(heard)?;
        self.adopt_if_due(state);
        if self
            .behind_logged
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .is_some()
        {
            tracing::info!(
                "the slot map is version {heard}, not older than version {acted} this node acted on: acting on it again"
            );
        }
        Ok(())
    }

    /// If this node started on a map older than its record (see `adopt`) and `state`'s is not,
    /// takes from it what a node takes at start. Also called on the clients' path (a write
    /// checks whether its slot is unsure), so the first write after the store's state came
    /// back does not come before it.
    fn adopt_if_due(&self, state: &ClusterState) {
        if !self.adopt.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        // One at a time, checked again under the lock; the flag is cleared last, so a caller
        // that sees it clear sees both records filled.
        let _one = self.adopting.lock().unwrap_or_else(|p| p.into_inner());
        if !self.adopt.load(std::sync::atomic::Ordering::Acquire) || self.behind(state) {
            return;
        }
        let me = state.map.index_of(&self.me().id);
        let (unsure, settled) = at_start(&state.map, me);
        if !unsure.is_empty() {
            self.unsure
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(unsure);
            self.unsure_any
                .store(true, std::sync::atomic::Ordering::Release);
        }
        self.settled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(settled);
        self.adopt
            .store(false, std::sync::atomic::Ordering::Release);
        tracing::info!(
            "started on a slot map older than the newest this node acted on; version {} is not: what a node takes at start is taken from it",
            state.map.version()
        );
    }

    /// [`SettleError::Behind`] (logged) if `state`'s map is older than the record; nothing
    /// written.
    fn not_behind(&self, state: &ClusterState) -> Result<(), SettleError> {
        let (heard, acted) = (state.map.version(), self.record.acted());
        if heard < acted {
            let e = SettleError::Behind { heard, acted };
            self.log_behind(heard, &e);
            return Err(e);
        }
        Ok(())
    }

    /// Logs that the map heard is older than the record: once per version heard, and again
    /// at most once a minute.
    fn log_behind(&self, heard: u64, e: &SettleError) {
        let mut last = self.behind_logged.lock().unwrap_or_else(|p| p.into_inner());
        let now = std::time::Instant::now();
        let due = last.is_none_or(|(v, at)| {
            v != heard || now.duration_since(at) >= std::time::Duration::from_secs(60)
        });
        if due {
            *last = Some((heard, now));
            tracing::error!("{e}");
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

    /// Whether `slot`'s copies and `ASKING` clients may be served here: it does not move here,
    /// or its move here is settled (see `settled`). If not, the settling task is woken.
    pub fn import_settled(&self, slot: u16) -> bool {
        let Some(since) = self.import(slot) else {
            return true;
        };
        self.settled_for(slot, since)
    }

    /// Whether `slot`'s move here that began at `since` is settled (see `settled`); wakes the
    /// settling task if not.
    pub fn settled_for(&self, slot: u16, since: u64) -> bool {
        let settled = self
            .settled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&slot)
            == Some(&since);
        if !settled {
            self.unsettled.notify_one();
        }
        settled
    }

    /// The latest map version this node serves in full: the map's, or, while a move to it is
    /// not settled (see `settled`), the one before that move began (wakes the task then).
    /// What `CLUSTER INFO` says as `pliant_map_version`, and what a move waits for at both of
    /// its ends before it copies anything and before it gives the slot away: so the keys an
    /// earlier move left at the target are gone before the target can own the slot (a move
    /// with nothing to copy would otherwise give it away before the task came to it).
    pub fn served_version(&self, state: &ClusterState) -> u64 {
        let map = &state.map;
        let me = map.index_of(&self.me().id);
        let settled = self.settled.lock().unwrap_or_else(|p| p.into_inner());
        let served = map
            .migrations()
            .filter(|(s, m)| Some(m.to) == me && settled.get(s) != Some(&m.since))
            .map(|(_, m)| m.since.saturating_sub(1))
            .fold(map.version(), u64::min);
        if served < map.version() {
            self.unsettled.notify_one();
        }
        served
    }

    /// The slots moving here under a move not settled yet (see `settled`): what `CLUSTER INFO`
    /// says as `pliant_unsettled_imports`; their moves wait for them.
    pub fn unsettled_imports(&self, state: &ClusterState) -> usize {
        let map = &state.map;
        let me = map.index_of(&self.me().id);
        let settled = self.settled.lock().unwrap_or_else(|p| p.into_inner());
        map.migrations()
            .filter(|(s, m)| Some(m.to) == me && settled.get(s) != Some(&m.since))
            .count()
    }

    /// What this node does with its keys of `slot` (see [`Fate`]), by `state`'s map.
    fn fate(&self, state: &ClusterState, slot: u16) -> Fate {
        let map = &state.map;
        let Some(me) = map.index_of(&self.me().id) else {
            return Fate::Keep;
        };
        if let Some(since) = import(map, Some(me), slot) {
            let settled = self
                .settled
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&slot)
                == Some(&since);
            return if settled {
                Fate::Keep
            } else {
                Fate::Drop {
                    settles: Some(since),
                }
            };
        }
        match map.owner_index(slot) {
            Some(owner) if owner != me => Fate::Drop { settles: None },
            _ => Fate::Keep,
        }
    }

    /// Drops up to `max` of this node's keys of `slot` if they are not its own (see `Fate`),
    /// from memory and store; says how many, and whether none is left to drop (the slot's move
    /// here, if it has one, is then settled). Called with the move gate held alone (`_gate`: no
    /// command routed by an earlier map is between its routing and its end, so none adds a key
    /// after the count) and the keyspace lock (`ks`: no copy lands meanwhile); the map is read
    /// under both, so a slot that became this node's is never touched. Nothing is dropped on
    /// a map older than one this node acted on ([`SettleError::Behind`]: see
    /// [`Cluster::act_on`]).
    pub fn drop_strays(
        &self,
        _gate: &std::sync::RwLockWriteGuard<'_, ()>,
        ks: &mut crate::keyspace::Keyspace,
        slot: u16,
        max: usize,
        now: u64,
    ) -> Result<Strays, SettleError> {
        let state = self.state();
        self.not_behind(&state)?;
        self.adopt_if_due(&state);
        let Fate::Drop { settles } = self.fate(&state, slot) else {
            return Ok(Strays {
                dropped: 0,
                done: true,
            });
        };
        let mut dropped = 0;
        if let Some((keys, _)) = ks.slot_keys(&[slot], None, max, now)?
            && !keys.is_empty()
        {
            // The map recorded before a key goes; a slot with none to drop (a move here to a
            // slot this node holds nothing of, the usual case) is settled without waiting for
            // that write.
            self.act_on(&state)?;
            for k in keys {
                dropped += usize::from(ks.delete(&k, now)?);
            }
        }
        // Counted after: what expired is deleted by the count itself.
        if ks.slot_count(&[slot], now)? > 0 {
            return Ok(Strays {
                dropped,
                done: false,
            });
        }
        if let Some(since) = settles {
            self.settled
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(slot, since);
        }
        Ok(Strays {
            dropped,
            done: true,
        })
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
        let bytes: usize = new.iter().map(|(_, _, k)| note_cost(k)).sum();
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
        let state = self.state();
        if import(&state.map, state.map.index_of(&self.me().id), slot) == Some(*since) {
            return keys.contains(key);
        }
        // Not forgotten on a map older than one acted on: the move may come back with the
        // store's state.
        if !self.behind(&state) {
            w.forget(slot);
        }
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
        // A map older than one acted on ends no move (see `act_on`): they are all kept.
        if self.behind(&state) {
            return u.contains(&key_slot(key));
        }
        let me = state.map.index_of(&self.me().id);
        u.retain(|&s| state.map.migration(s).is_some_and(|g| Some(g.from) == me));
        if u.is_empty() {
            self.unsure_any
                .store(false, std::sync::atomic::Ordering::Release);
        }
        u.contains(&key_slot(key))
    }

    /// A connection to another node of the cluster at `addr`, as this node's own requests to
    /// it (a move's copies, a link's probe) make them: the cluster's password, 5 s to connect,
    /// 30 s for each reply.
    pub async fn dial(
        &self,
        addr: std::net::SocketAddr,
    ) -> Result<pliant_proto::AsyncClient, pliant_proto::ClientError> {
        self.membership
            .dialer()
            .to(addr)
            .connect_timeout(std::time::Duration::from_secs(5))
            .io_timeout(Some(std::time::Duration::from_secs(30)))
            .connect_async()
            .await
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
        if self.adopt.load(std::sync::atomic::Ordering::Relaxed) {
            self.adopt_if_due(&self.state());
        }
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
        // On a map older than one acted on, every mark holds (its move may come back).
        if moving_out(key) || self.behind(&state) {
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

    /// The keyed commands run here when the last slot move's stream out of here sent its last
    /// batch (0 if none has; see the field).
    pub fn ops_at_last_stream(&self) -> u64 {
        self.ops_at_last_stream
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// See [`Cluster::ops_at_last_stream`].
    pub fn stream_ended_at_ops(&self, ops: u64) {
        self.ops_at_last_stream
            .store(ops, std::sync::atomic::Ordering::Relaxed);
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

/// Keeps the invariant *a node holds keys only of slots it owns, or imports under the move
/// they came with*, off the clients' path: a task that, at start and on every map this node
/// hears (and when a copy or a client finds a slot moving here not settled), drops its keys of
/// slots whose fate is `Fate::Drop`, `STRAY_BATCH` keys a hold of the locks, and settles
/// the slots moving here. A move given up while its target lived on left its copies there;
/// kept, they came back when the slot moved there again (see docs/cluster.md).
pub fn settle(node: &Arc<Node>) {
    let Some(cluster) = node.cluster() else {
        return;
    };
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let (mut maps, woken, weak) = (
        cluster.membership().watch(),
        cluster.unsettled.clone(),
        Arc::downgrade(node),
    );
    rt.spawn(async move {
        loop {
            // What this pass reads is the latest map: only a later one wakes the next.
            drop(maps.borrow_and_update());
            let failed = match weak.upgrade() {
                None => return,
                Some(node) => match settle_once(&node).await {
                    Ok(()) => false,
                    Err(e) => {
                        tracing::warn!("dropping keys of slots this node does not own: {e}");
                        true
                    }
                },
            };
            // A failure (the store's) is tried again a second later, else on the next map or
            // call; what is not dropped yet keeps its slot's move waiting, never served.
            let retry = async {
                if failed {
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                } else {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                changed = maps.changed() => if changed.is_err() { return },
                () = woken.notified(), if !failed => {}
                () = retry => {}
            }
        }
    });
}

/// Holds of the locks [`settle_once`] spends on one slot at most in a pass ([`STRAY_BATCH`] keys
/// each): a slot gaining keys as fast as they go is one whose fate changed (it became this
/// node's, and then it is kept), so the bound is not reached but by a fault; then the slot is
/// left for the next pass, and said.
const HOLDS_PER_SLOT: usize = 1_000_000;

/// The order [`settle_once`] goes through the slots in: those moving here first (`imports`:
/// their moves wait for them, copies and `ASKING` clients refused until they are settled), then
/// the others this node holds keys of (`held`), each in slot order, each once.
fn settle_order(held: &[u16], imports: &[u16]) -> Vec<u16> {
    let mut first = imports.to_vec();
    first.sort_unstable();
    first.dedup();
    let mut rest: Vec<u16> = held
        .iter()
        .copied()
        .filter(|s| first.binary_search(s).is_err())
        .collect();
    rest.sort_unstable();
    rest.dedup();
    first.extend(rest);
    first
}

/// One pass of [`settle`]'s task over every slot this node holds keys of or imports, those
/// moving here first ([`settle_order`]). A slot that fails is said and left for the next pass,
/// the others go on; the pass then fails with the first failure (the task tries again a second
/// later). Nothing on a map older than one this node acted on (see [`Cluster::act_on`]: logged
/// there).
async fn settle_once(node: &Node) -> Result<(), SettleError> {
    let Some(cluster) = node.cluster() else {
        return Ok(());
    };
    // An older map waits for a newer one.
    let state = cluster.state();
    if cluster.not_behind(&state).is_err() {
        return Ok(());
    }
    cluster.adopt_if_due(&state);
    let held = node.keyspace().slots_held()?;
    let imports: Vec<u16> = {
        // What was settled for moves no longer under way here is of no use. The map is read
        // under the lock: one read before could be older than the one a move was settled by
        // meanwhile, which this would then forget, and its copies would be dropped as strays.
        let mut settled = cluster.settled.lock().unwrap_or_else(|p| p.into_inner());
        let state = cluster.state();
        if cluster.behind(&state) {
            return Ok(());
        }
        let me = state.map.index_of(&cluster.me().id);
        settled.retain(|&s, since| import(&state.map, me, s) == Some(*since));
        state
            .map
            .migrations()
            .filter(|(_, m)| Some(m.to) == me)
            .map(|(s, _)| s)
            .collect()
    };
    let mut failed: Option<(u16, SettleError)> = None;
    let mut failures = 0usize;
    let mut recorded = false;
    for slot in settle_order(&held, &imports) {
        let holds = held.binary_search(&slot).is_ok();
        // Every map heard is recorded (a restart must know it, keys or not), off the runtime's
        // thread (a synced write of a small file, once a map: clients are served meanwhile),
        // and before any key goes: the slots moving here that hold none, the usual case, are
        // settled first without waiting for it (nothing is dropped there).
        if holds && !recorded {
            recorded = true;
            if let Err(e) = record(cluster, &state).await {
                failures += 1;
                failed.get_or_insert((slot, e));
                break;
            }
        }
        match settle_slot(node, cluster, slot, holds).await {
            Ok(()) => {}
            // The map went back during the pass: nothing more on it (logged by `act_on`).
            Err(SettleError::Behind { .. }) => return Ok(()),
            Err(e) => {
                tracing::warn!(
                    "slot {slot}: dropping the keys this node does not own failed, going on with the other slots (this one is tried again): {e}"
                );
                failures += 1;
                failed.get_or_insert((slot, e));
            }
        }
    }
    if !recorded {
        record(cluster, &state).await?;
    }
    match failed {
        None => Ok(()),
        Some((slot, first)) => Err(SettleError::Slots {
            failures,
            slot,
            first: Box::new(first),
        }),
    }
}

/// Records `state`'s map version (see [`Cluster::act_on`]) on the blocking pool, if it grew.
async fn record(cluster: &Cluster, state: &ClusterState) -> Result<(), SettleError> {
    let v = state.map.version();
    if v <= cluster.acted_version() {
        return Ok(());
    }
    let record = cluster.record.clone();
    match tokio::task::spawn_blocking(move || record.raise(v)).await {
        Ok(r) => r,
        Err(e) => {
            let path = cluster
                .record
                .path
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            Err(SettleError::Record {
                path: path.clone().unwrap_or_default(),
                why: format!("the task writing it failed: {e}"),
            })
        }
    }
}

/// Drops this node's keys of `slot` that are not its own, [`STRAY_BATCH`] a hold of the locks,
/// and syncs the deletions if it held any (`held`).
async fn settle_slot(
    node: &Node,
    cluster: &Cluster,
    slot: u16,
    held: bool,
) -> Result<(), SettleError> {
    let state = cluster.state();
    if cluster.fate(&state, slot) == Fate::Keep {
        return Ok(());
    }
    let mut dropped = 0;
    let mut done = false;
    for _ in 0..HOLDS_PER_SLOT {
        let strays = {
            // Outside any transaction, as every command is, then the locks in the order
            // commands take them.
            let _outside_exec = node.exec_shared();
            let gate = cluster.gate_exclusive();
            let mut ks = node.keyspace();
            cluster.drop_strays(&gate, &mut ks, slot, STRAY_BATCH, crate::node::now_ms())
        };
        let strays = match strays {
            Ok(s) => s,
            // What was dropped before is said all the same.
            Err(e) => {
                log_dropped(slot, dropped, &state);
                return Err(e);
            }
        };
        dropped += strays.dropped;
        // Into the store's journal, with what else is pending, a hold at a time.
        if let Err(e) = node.write_pending().await {
            log_dropped(slot, dropped, &state);
            return Err(e.into());
        }
        if strays.done {
            done = true;
            break;
        }
        tokio::task::yield_now().await;
    }
    log_dropped(slot, dropped, &state);
    // And synced, whatever the durability: a restart must not find them again, least of all in
    // a slot moving here, where it would take them for the move's (see `settled`). The copies
    // a settled move brings are synced after them anyway (the journal's order).
    if held {
        node.sync().await?;
    }
    if !done {
        return Err(SettleError::Unfinished {
            slot,
            holds: HOLDS_PER_SLOT,
            dropped,
        });
    }
    Ok(())
}

/// Says how many keys of `slot` this node dropped as not its own (none: nothing said):
/// deletions are never silent.
fn log_dropped(slot: u16, dropped: usize, state: &ClusterState) {
    if dropped == 0 {
        return;
    }
    let owner = state.map.owner(slot).map_or_else(
        || "no node".to_string(),
        |o| format!("{} ({})", o.id, o.addr),
    );
    tracing::warn!(
        "dropped {dropped} keys of slot {slot} from memory and store: the slot map (version {}) gives the slot to {owner} and does not move it here with these keys (left here by a move given up)",
        state.map.version()
    );
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

    /// A node over `store`, with the slot index a cluster node keeps.
    fn store_node(store: Arc<dyn pliant_store::Store>) -> Arc<Node> {
        let mut ks =
            crate::keyspace::Keyspace::new("lru", pliant_cache::Capacity::Keys(100), Some(store))
                .expect("keyspace");
        ks.index_slots().expect("index");
        Arc::new(Node::new(ks, &crate::config::Config::default()))
    }

    /// Waits until `c` has heard the map of version `v` or a later one.
    async fn hears(c: &Cluster, v: u64) {
        let mut rx = c.membership().watch();
        while rx.borrow_and_update().map.version() < v {
            rx.changed().await.expect("watch");
        }
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
            hears(c, 1).await;
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
        let heard_by = &two;
        let seen = |v: u64| {
            async move {
                hears(heard_by, v).await;
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
        huge.resize(WRITTEN_HERE_MAX_BYTES - NOTE_OVERHEAD, b'x');
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

    /// The invariant `settle` keeps: a move given up and begun again unheard (as in the test
    /// above) leaves the first move's copies at the target; they are dropped before the
    /// second move here counts as settled (until then its copies and `ASKING` clients wait),
    /// a few keys a hold of the locks. Keys of a slot given up and not moving here go too, a
    /// slot this node owns keeps its keys, and the task does the same on a map it hears.
    #[tokio::test]
    async fn keys_an_earlier_move_left_here_go_before_a_later_move_here_is_served() {
        let coord: Arc<Embedded> = Arc::new(Embedded::new());
        let stop = watch::channel(false).1;
        let one = join(member(1), coord.clone(), stop.clone()).await;
        let mut ks = crate::keyspace::Keyspace::new("lru", pliant_cache::Capacity::Keys(100), None)
            .expect("keyspace");
        ks.index_slots().expect("index");
        let node = Arc::new(Node::new(ks, &crate::config::Config::default()));
        node.set_cluster(join(member(2), coord.clone(), stop).await);
        let two = node.cluster().expect("a cluster node");
        let (slot, mine) = (key_slot(b"{a}"), key_slot(b"b"));
        let (base, _) = SlotMap::even(0, &[member(1)]).with_node(&member(2));
        let base = base.with_owner(mine, 1);
        let moving = base.clone().with_migration(slot, 1).expect("a migration");
        let seen = |v: u64| hears(two, v);
        let drop_strays = |max: usize| {
            let gate = two.gate_exclusive();
            let mut ks = node.keyspace();
            two.drop_strays(&gate, &mut ks, slot, max, crate::node::now_ms())
                .expect("drop")
                .done
        };
        let held = |k: &str| {
            node.keyspace()
                .exists(k.as_bytes(), crate::node::now_ms())
                .expect("exists")
        };
        let put = |k: &'static str| {
            node.keyspace()
                .set(
                    Bytes::from_static(k.as_bytes()),
                    crate::keyspace::Value::new("v"),
                )
                .expect("set")
        };
        assert!(coord.update_now(0, moving.clone()).expect("update"));
        seen(1).await;
        assert!(
            !two.import_settled(slot),
            "a move begun here is not settled at once"
        );
        let served = || two.served_version(&two.state());
        assert_eq!(served(), 0, "nor is the map that began it served in full");
        assert!(drop_strays(2), "nothing to drop");
        assert!(two.import_settled(slot));
        assert_eq!(served(), 1);
        // The first move's copies, and a key of the node's own slot.
        for k in ["{a}1", "{a}2", "{a}3", "b"] {
            put(k);
        }
        // Given up and begun again, unheard.
        assert!(coord.update_now(1, base.clone()).expect("update"));
        assert!(coord.update_now(2, moving).expect("update"));
        seen(3).await;
        assert!(!two.import_settled(slot), "the second move is another");
        assert_eq!(served(), 2, "a move waits for its target to drop them");
        assert!(!drop_strays(2), "three keys, two a hold");
        assert!(!two.import_settled(slot));
        assert!(drop_strays(2));
        assert!(two.import_settled(slot));
        assert_eq!(served(), 3);
        assert!(!held("{a}1") && !held("{a}2") && !held("{a}3"));
        assert!(held("b"), "the node's own slot keeps its keys");
        // Its copies now stay.
        put("{a}4");
        assert!(drop_strays(2) && held("{a}4"));
        // Given up, heard: its keys are not this node's.
        assert!(coord.update_now(3, base.clone()).expect("update"));
        seen(4).await;
        assert!(drop_strays(2) && !held("{a}4"));
        // The task does it on a map it hears.
        put("{a}5");
        settle(&node);
        let moving = base.with_migration(slot, 1).expect("a migration");
        assert!(coord.update_now(4, moving).expect("update"));
        seen(5).await;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !two.import_settled(slot) && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(two.import_settled(slot), "settled by the task");
        assert!(!held("{a}5") && held("b"));
        drop(one);
    }

    /// A coordination store whose state the test sets, a map older than the last included:
    /// what a node hears from a store that lost its state (a wiped etcd prefix, a lost
    /// `cluster.json`). It keeps every lease and refuses every update.
    struct Staged(watch::Sender<Arc<ClusterState>>);

    impl Staged {
        fn publish(&self, map: SlotMap) {
            self.0.send_replace(Arc::new(ClusterState {
                map,
                members: vec![member(1), member(2)],
                balancer: None,
            }));
        }
    }

    impl pliant_cluster::Coord for Staged {
        fn join(
            &self,
            _: Member,
            _: std::time::Duration,
        ) -> pliant_cluster::coord::BoxFuture<'_, Result<(), pliant_cluster::CoordError>> {
            Box::pin(async { Ok(()) })
        }
        fn keepalive<'a>(
            &'a self,
            _: &'a str,
        ) -> pliant_cluster::coord::BoxFuture<'a, Result<(), pliant_cluster::CoordError>> {
            Box::pin(async { Ok(()) })
        }
        fn leave<'a>(
            &'a self,
            _: &'a str,
        ) -> pliant_cluster::coord::BoxFuture<'a, Result<(), pliant_cluster::CoordError>> {
            Box::pin(async { Ok(()) })
        }
        fn state(
            &self,
        ) -> pliant_cluster::coord::BoxFuture<'_, Result<ClusterState, pliant_cluster::CoordError>>
        {
            let s = (**self.0.borrow()).clone();
            Box::pin(async move { Ok(s) })
        }
        fn update(
            &self,
            _: u64,
            _: SlotMap,
        ) -> pliant_cluster::coord::BoxFuture<'_, Result<bool, pliant_cluster::CoordError>>
        {
            Box::pin(async { Err(pliant_cluster::CoordError::Refused("staged".into())) })
        }
        fn watch(
            &self,
        ) -> pliant_cluster::coord::BoxFuture<
            '_,
            Result<watch::Receiver<Arc<ClusterState>>, pliant_cluster::CoordError>,
        > {
            let rx = self.0.subscribe();
            Box::pin(async move { Ok(rx) })
        }
        fn set_balancer(
            &self,
            _: pliant_cluster::coord::BalancerRecord,
        ) -> pliant_cluster::coord::BoxFuture<'_, Result<u64, pliant_cluster::CoordError>> {
            Box::pin(async { Err(pliant_cluster::CoordError::Refused("staged".into())) })
        }
    }

    /// The record of the newest map version acted on only grows, is read back as written, leaves
    /// no temporary behind, and a file that holds something else is refused, named. Prints what
    /// a raise costs (a synced write and rename; `--nocapture`): once a map, off the runtime's
    /// thread in the settling task.
    #[test]
    fn the_map_record_only_grows_and_is_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(MAP_RECORD_FILE);
        let record = MapRecord::open(Some(path.clone())).expect("no file yet");
        assert_eq!(record.acted(), 0);
        let mut took = Vec::new();
        for v in 1..=200u64 {
            let began = std::time::Instant::now();
            record.raise(v).expect("raise");
            took.push(began.elapsed().as_secs_f64() * 1e3);
        }
        took.sort_by(f64::total_cmp);
        eprintln!(
            "map record raise, 200 in {}: median {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
            dir.path().display(),
            took[100],
            took[180],
            took[198],
            took[199]
        );
        record.raise(7).expect("an older version");
        assert_eq!(record.acted(), 200, "never lowered");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "200\n");
        assert!(!path.with_extension("tmp").exists(), "no temporary left");
        assert_eq!(
            MapRecord::open(Some(path.clone()))
                .expect("read back")
                .acted(),
            200
        );
        std::fs::write(&path, "two hundred").expect("write");
        let e = MapRecord::open(Some(path.clone()))
            .err()
            .expect("refused")
            .to_string();
        assert!(
            e.contains(&path.display().to_string()) && e.contains("two hundred"),
            "{e}"
        );
        // In memory only: nothing written, the version kept all the same.
        let memory = MapRecord::open(None).expect("memory");
        memory.raise(3).expect("raise");
        assert_eq!(memory.acted(), 3);
    }

    /// Regression (data loss): a coordination store that lost its state gives a fresh map
    /// (version 1 here) that gives the node's slot to another node; the settling task took it
    /// as the cluster's and deleted the slot's keys from memory and store, the only copy of
    /// acknowledged writes. A map older than the newest the node acted on is not acted on,
    /// live or after a restart (the version is kept in a file beside the store), until the
    /// store's state comes back.
    #[tokio::test]
    async fn a_map_older_than_one_acted_on_drops_no_key_even_after_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let record = dir.path().join(MAP_RECORD_FILE);
        let store = Arc::new(pliant_store::MemStore::new());
        let staged = Arc::new(Staged(watch::channel(Arc::new(ClusterState::empty())).0));
        let stop = watch::channel(false).1;
        let slot = key_slot(b"{a}");
        let (base, two) = SlotMap::even(0, &[member(1)]).with_node(&member(2));
        let mine = base.clone().with_owner(slot, two).with_version(5);
        let fresh = SlotMap::even(0, &[member(1), member(2)])
            .with_owner(slot, 0)
            .with_version(1);
        staged.publish(mine.clone());
        let start = || async {
            let node = store_node(store.clone() as Arc<dyn pliant_store::Store>);
            let m = Membership::join(
                member(2),
                "staged".into(),
                staged.clone(),
                Dialer::default(),
                stop.clone(),
            )
            .await
            .expect("join");
            node.set_cluster(Cluster::with_record(m, record.clone()).expect("record"));
            settle(&node);
            node
        };
        let heard = |node: &Arc<Node>, v: u64| {
            let mut rx = node.cluster().expect("cluster").membership().watch();
            async move {
                while rx.borrow_and_update().map.version() != v {
                    rx.changed().await.expect("watch");
                }
                // The settling task hears it as this does, and a pass is short.
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        };
        let keys = ["{a}1", "{a}2", "{a}3"];
        let all_there = |node: &Arc<Node>| {
            keys.iter().all(|k| {
                node.keyspace()
                    .exists(k.as_bytes(), crate::node::now_ms())
                    .expect("exists")
            }) && keys.iter().all(|k| {
                pliant_store::Store::get(&*store, k.as_bytes())
                    .expect("store")
                    .is_some()
            })
        };
        let run = |node: &Node, args: &[&str]| {
            let mut session = crate::cmd::Session {
                authenticated: true,
                ..Default::default()
            };
            let args: Vec<Bytes> = args
                .iter()
                .map(|a| Bytes::copy_from_slice(a.as_bytes()))
                .collect();
            let mut ctx = crate::cmd::Ctx::new(node, &mut session, crate::node::now_ms());
            crate::cmd::execute(&mut ctx, &args)
        };
        let drop_now = |node: &Arc<Node>| {
            let c = node.cluster().expect("cluster");
            let gate = c.gate_exclusive();
            let mut ks = node.keyspace();
            c.drop_strays(&gate, &mut ks, slot, 100, crate::node::now_ms())
        };

        let node = start().await;
        heard(&node, 5).await;
        assert_eq!(node.cluster().expect("cluster").acted_version(), 5);
        for k in keys {
            node.keyspace()
                .set(
                    Bytes::from_static(k.as_bytes()),
                    crate::keyspace::Value::new("acknowledged"),
                )
                .expect("set");
        }
        node.write_pending().await.expect("write");
        node.sync().await.expect("sync");
        assert!(all_there(&node), "in memory and store");

        // The store loses its state; the node, live, hears a fresh map.
        staged.publish(fresh.clone());
        heard(&node, 1).await;
        assert!(all_there(&node), "a live node dropped keys on an older map");
        let c = node.cluster().expect("cluster");
        assert!(c.behind(&c.state()));
        assert!(matches!(
            drop_now(&node),
            Err(SettleError::Behind { heard: 1, acted: 5 })
        ));
        settle_once(&node).await.expect("a pass that does nothing");
        assert!(all_there(&node));
        // Operators see it; a move's copies are refused with both versions named.
        let info = format!("{:?}", run(&node, &["CLUSTER", "INFO"]));
        assert!(
            info.contains("pliant_map_behind:1") && info.contains("pliant_map_newest_acted:5"),
            "{info}"
        );
        match run(&node, &["PLIANT.RESTORE", "{a}1", "older", "0"]) {
            Frame::Error(e) => assert!(
                e.starts_with("MAPBEHIND") && e.contains("version 1") && e.contains("version 5"),
                "{e}"
            ),
            other => panic!("a copy written on an older map: {other:?}"),
        }

        // Restarted, on the same store, the fresh map still there: the record remembers.
        drop(node);
        let node = start().await;
        heard(&node, 1).await;
        assert!(
            all_there(&node),
            "a restarted node dropped keys on an older map"
        );
        let c = node.cluster().expect("cluster");
        assert_eq!(c.acted_version(), 5, "read back from {}", record.display());
        assert!(c.behind(&c.state()));
        assert!(matches!(
            drop_now(&node),
            Err(SettleError::Behind { heard: 1, acted: 5 })
        ));
        assert!(all_there(&node));

        // The store's state comes back: the node acts again, and keeps its own slot's keys.
        staged.publish(mine.with_version(6));
        heard(&node, 6).await;
        let c = node.cluster().expect("cluster");
        assert!(!c.behind(&c.state()));
        assert_eq!(c.acted_version(), 6);
        assert!(all_there(&node));
        let info = format!("{:?}", run(&node, &["CLUSTER", "INFO"]));
        assert!(info.contains("pliant_map_behind:0"), "{info}");
        // A newer map that gives the slot away is acted on, as before.
        staged.publish(fresh.with_version(7));
        heard(&node, 7).await;
        assert!(drop_now(&node).expect("drop").done);
        node.write_pending().await.expect("write");
        assert!(
            keys.iter().all(|k| {
                pliant_store::Store::get(&*store, k.as_bytes())
                    .expect("store")
                    .is_none()
            }),
            "a newer map giving the slot away drops its keys"
        );
    }

    /// A node restarted on an older map (its store lost its state meanwhile) takes what a node
    /// takes at start (the moves under way here as settled, those away as unsure) from the
    /// first map it acts on, once the store's state is back, not from the older map: taken
    /// from that one, which has no move, a move under way here had its copies (acknowledged,
    /// deleted at the source) dropped as strays once the newer map came, and writes to a slot
    /// moving away were let through though which of its keys were copied out is not known.
    #[tokio::test]
    async fn a_node_started_on_an_older_map_takes_its_start_view_from_the_newer_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let record = dir.path().join(MAP_RECORD_FILE);
        std::fs::write(&record, "6\n").expect("a record");
        let store = Arc::new(pliant_store::MemStore::new());
        let (here, away) = (key_slot(b"{a}"), key_slot(b"{c}"));
        {
            let ks = crate::keyspace::Keyspace::new(
                "lru",
                pliant_cache::Capacity::Keys(100),
                Some(store.clone() as Arc<dyn pliant_store::Store>),
            )
            .expect("keyspace");
            let node = Node::new(ks, &crate::config::Config::default());
            for k in ["{a}1", "{c}1"] {
                node.keyspace()
                    .set(
                        Bytes::from_static(k.as_bytes()),
                        crate::keyspace::Value::new("copied"),
                    )
                    .expect("set");
            }
            node.write_pending().await.expect("write");
        }
        let staged = Arc::new(Staged(watch::channel(Arc::new(ClusterState::empty())).0));
        let (base, two) = SlotMap::even(0, &[member(1)]).with_node(&member(2));
        staged.publish(base.clone().with_version(1));
        let node = store_node(store.clone() as Arc<dyn pliant_store::Store>);
        let m = Membership::join(
            member(2),
            "staged".into(),
            staged.clone(),
            Dialer::default(),
            watch::channel(false).1,
        )
        .await
        .expect("join");
        node.set_cluster(Cluster::with_record(m, record.clone()).expect("record"));
        settle(&node);
        let c = node.cluster().expect("cluster");
        assert!(c.behind(&c.state()));
        // The store's state comes back: a move here and one away under way.
        let newer = base
            .with_version(4)
            .with_owner(away, two)
            .with_migration(here, two)
            .expect("a move here")
            .with_migration(away, 0)
            .expect("a move away")
            .with_version(6);
        staged.publish(newer);
        let mut rx = c.membership().watch();
        while rx.borrow_and_update().map.version() != 6 {
            rx.changed().await.expect("watch");
        }
        // A write to the slot moving away comes first, as a client's could.
        assert!(c.is_copying(b"{c}1"), "a write to a slot moving away waits");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(c.import_settled(here), "the move here counts as settled");
        let held = |k: &str| {
            node.keyspace()
                .exists(k.as_bytes(), crate::node::now_ms())
                .expect("exists")
                && pliant_store::Store::get(&*store, k.as_bytes())
                    .expect("store")
                    .is_some()
        };
        assert!(held("{a}1"), "the move's copy here was dropped as a stray");
        assert!(held("{c}1"));
        assert_eq!(c.acted_version(), 6);
    }

    /// The map is recorded before any key goes, and a move here to a slot the node holds
    /// nothing of is settled without waiting for that write: a record that cannot be written
    /// (here its directory does not exist) stops every deletion, and no move here waits on it.
    /// (The settling pass wrote the record first: a move's `ASKING` clients waited on a synced
    /// write at each new map, and a test in the suite saw one answered `-TRYAGAIN`.)
    #[tokio::test]
    async fn a_record_that_cannot_be_written_stops_deletions_and_no_empty_move_here_waits_on_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let record = dir.path().join("missing").join(MAP_RECORD_FILE);
        let store = Arc::new(pliant_store::MemStore::new());
        let node = store_node(store.clone() as Arc<dyn pliant_store::Store>);
        let coord: Arc<Embedded> = Arc::new(Embedded::new());
        let stop = watch::channel(false).1;
        let one = join(member(1), coord.clone(), stop.clone()).await;
        let m = Membership::join(
            member(2),
            "embedded".into(),
            coord.clone(),
            Dialer::default(),
            stop,
        )
        .await
        .expect("join");
        node.set_cluster(Cluster::with_record(m, record).expect("no record yet"));
        let two = node.cluster().expect("a cluster node");
        node.keyspace()
            .set(
                Bytes::from_static(b"{c}1"),
                crate::keyspace::Value::new("v"),
            )
            .expect("set");
        node.write_pending().await.expect("write");
        let here = key_slot(b"{a}");
        let map = SlotMap::even(0, &[member(1)])
            .with_node(&member(2))
            .0
            .with_migration(here, 1)
            .expect("a migration");
        assert!(coord.update_now(0, map).expect("update"));
        hears(two, 1).await;
        match settle_once(&node).await {
            Err(SettleError::Slots { first, .. }) => {
                assert!(matches!(*first, SettleError::Record { .. }), "{first}")
            }
            other => panic!("the record's failure is reported: {other:?}"),
        }
        assert!(
            two.import_settled(here),
            "the move here waited on the record"
        );
        assert!(
            pliant_store::Store::get(&*store, b"{c}1")
                .expect("store")
                .is_some(),
            "a key dropped on a map not recorded"
        );
        assert_eq!(two.acted_version(), 0);
        drop(one);
    }

    /// A store whose value of one key does not decode: what a damaged store gives, a fault of
    /// one slot.
    #[derive(Debug)]
    struct OneBadValue {
        inner: Arc<pliant_store::MemStore>,
        bad: &'static [u8],
    }

    impl pliant_store::Store for OneBadValue {
        fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, pliant_store::StoreError> {
            if key == self.bad {
                return Ok(Some(vec![0xff; 3]));
            }
            pliant_store::Store::get(&*self.inner, key)
        }
        fn put(&self, key: &[u8], value: &[u8]) -> Result<(), pliant_store::StoreError> {
            self.inner.put(key, value)
        }
        fn delete(&self, key: &[u8]) -> Result<(), pliant_store::StoreError> {
            self.inner.delete(key)
        }
        fn batch(&self, batch: &pliant_store::Batch) -> Result<(), pliant_store::StoreError> {
            self.inner.batch(batch)
        }
        fn sync(&self) -> Result<(), pliant_store::StoreError> {
            self.inner.sync()
        }
        fn range(&self, range: pliant_store::KeyRange<'_>) -> pliant_store::Entries<'_> {
            self.inner.range(range)
        }
    }

    /// The settling pass goes on past a slot that fails (it stopped at the first, and every
    /// slot after it, a slot moving here included, waited for the retry, which failed there
    /// again: the moves here waited for good), and it settles the slots moving here first.
    #[tokio::test]
    async fn a_settling_pass_goes_on_past_a_slot_that_fails() {
        assert_eq!(
            settle_order(&[9, 3, 7, 5], &[7, 1, 7]),
            [1, 7, 3, 5, 9],
            "slots moving here first, then the others, each once"
        );
        let (bad, other, moving) = (key_slot(b"{b}"), key_slot(b"{c}"), key_slot(b"{a}"));
        assert!(
            bad < other && bad < moving,
            "the failing slot comes first in slot order"
        );
        let inner = Arc::new(pliant_store::MemStore::new());
        {
            // The keys, written through a node of their own (the store is what survives).
            let ks = crate::keyspace::Keyspace::new(
                "lru",
                pliant_cache::Capacity::Keys(100),
                Some(inner.clone() as Arc<dyn pliant_store::Store>),
            )
            .expect("keyspace");
            let node = Node::new(ks, &crate::config::Config::default());
            for k in ["{b}x", "{c}1", "{a}1"] {
                node.keyspace()
                    .set(
                        Bytes::from_static(k.as_bytes()),
                        crate::keyspace::Value::new("left"),
                    )
                    .expect("set");
            }
            node.write_pending().await.expect("write");
        }
        let coord: Arc<Embedded> = Arc::new(Embedded::new());
        let stop = watch::channel(false).1;
        let one = join(member(1), coord.clone(), stop.clone()).await;
        let store = OneBadValue {
            inner: inner.clone(),
            bad: b"{b}x",
        };
        let node = store_node(Arc::new(store) as Arc<dyn pliant_store::Store>);
        node.set_cluster(join(member(2), coord.clone(), stop).await);
        let two = node.cluster().expect("a cluster node");
        let map = SlotMap::even(0, &[member(1)])
            .with_node(&member(2))
            .0
            .with_migration(moving, 1)
            .expect("a migration");
        assert!(coord.update_now(0, map).expect("update"));
        hears(two, 1).await;
        assert_eq!(two.unsettled_imports(&two.state()), 1);
        let mut session = crate::cmd::Session {
            authenticated: true,
            ..Default::default()
        };
        let args = [Bytes::from_static(b"CLUSTER"), Bytes::from_static(b"INFO")];
        let mut ctx = crate::cmd::Ctx::new(&node, &mut session, crate::node::now_ms());
        let info = format!("{:?}", crate::cmd::execute(&mut ctx, &args));
        assert!(info.contains("pliant_unsettled_imports:1"), "{info}");

        match settle_once(&node).await {
            Err(SettleError::Slots {
                failures: 1, slot, ..
            }) => assert_eq!(slot, bad),
            other => panic!("the bad slot's failure is reported: {other:?}"),
        }
        assert!(
            two.import_settled(moving),
            "the slot moving here is settled all the same"
        );
        assert_eq!(two.unsettled_imports(&two.state()), 0);
        let held = |k: &str| {
            pliant_store::Store::get(&*inner, k.as_bytes())
                .expect("store")
                .is_some()
        };
        assert!(
            !held("{a}1") && !held("{c}1"),
            "the other slots' keys dropped"
        );
        assert!(held("{b}x"), "the failing slot's key is left for the retry");
        drop(one);
    }

    /// A slot whose keys have all expired is settled in one call: the walk for keys to drop
    /// finds none live, and the count after it deletes the expired ones (memory and store) as
    /// it walks the slot, so it is zero at once, however many there were.
    #[tokio::test]
    async fn a_slot_whose_keys_all_expired_is_settled_in_one_go() {
        let store = Arc::new(pliant_store::MemStore::new());
        let node = store_node(store.clone() as Arc<dyn pliant_store::Store>);
        let coord: Arc<Embedded> = Arc::new(Embedded::new());
        let stop = watch::channel(false).1;
        let one = join(member(1), coord.clone(), stop.clone()).await;
        node.set_cluster(join(member(2), coord.clone(), stop).await);
        let two = node.cluster().expect("a cluster node");
        let (moving, away) = (key_slot(b"{a}"), key_slot(b"{c}"));
        let keys = ["{a}1", "{a}2", "{a}3", "{c}1", "{c}2", "{c}3"];
        let at = crate::node::now_ms() + 100;
        for k in keys {
            node.keyspace()
                .set(
                    Bytes::from_static(k.as_bytes()),
                    crate::keyspace::Value {
                        data: Bytes::from_static(b"v"),
                        expires_at: Some(at),
                    },
                )
                .expect("set");
        }
        node.write_pending().await.expect("write");
        let map = SlotMap::even(0, &[member(1)])
            .with_node(&member(2))
            .0
            .with_migration(moving, 1)
            .expect("a migration");
        assert!(coord.update_now(0, map).expect("update"));
        hears(two, 1).await;
        while crate::node::now_ms() <= at + 10 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(!two.import_settled(moving));
        for slot in [moving, away] {
            let strays = {
                let gate = two.gate_exclusive();
                let mut ks = node.keyspace();
                // One key a call at most: three expired keys need no more than one.
                two.drop_strays(&gate, &mut ks, slot, 1, crate::node::now_ms())
                    .expect("drop")
            };
            assert_eq!(
                strays,
                Strays {
                    dropped: 0,
                    done: true
                },
                "slot {slot}"
            );
        }
        assert!(two.import_settled(moving), "settled in one call");
        node.write_pending().await.expect("write");
        for k in keys {
            assert!(
                pliant_store::Store::get(&*store, k.as_bytes())
                    .expect("store")
                    .is_none(),
                "{k} left in the store"
            );
        }
        assert!(node.keyspace().slots_held().expect("held").is_empty());
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
