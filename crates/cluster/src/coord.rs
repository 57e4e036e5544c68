//! The coordination store: what every node of a cluster agrees on (the slot map with its
//! version, which nodes are alive, and the balancer policy every node runs, with its version),
//! behind one trait with two backends.
//!
//! - [`Embedded`]: the state in this process, for a cluster on one machine. `pliant cluster up`
//!   holds it and serves it to its nodes over the Redis protocol ([`super::coord_server`]);
//!   each node reaches it through [`super::remote::Remote`]. No extra process to run.
//! - etcd (`--etcd`), for clusters across machines, comes behind a cargo feature: its client's
//!   code generation needs `protoc`.
//!
//! Liveness is a lease: a node joins with a time to live and renews it; a node that stops
//! renewing leaves the member list when its lease lapses (its slots stay its own: nothing moves
//! a dead node's slots without an operator saying so). Map changes are a compare-and-swap on the
//! version, so two writers never both win; nodes learn of changes by watching, not polling.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::map::{MapError, Member, SlotMap, valid_id};

/// A boxed future, so the trait can be used as `dyn Coord`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the cluster agrees on at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterState {
    /// The slot map.
    pub map: SlotMap,
    /// Nodes whose lease is current, in the order they joined.
    pub members: Vec<Member>,
    /// The balancer policy every node runs, if one was set.
    pub balancer: Option<BalancerRecord>,
}

/// The cluster's balancer policy as the coordination store keeps it (Mantle keeps its balancer
/// in RADOS and its version in the MDS map): the source, the parameters, a version every node
/// compares with the one it runs, and the one before it, for a rollback.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BalancerRecord {
    /// Set by the store: 1, 2, … in the order policies were set.
    #[serde(default)]
    pub version: u64,
    /// The policy's name.
    pub name: String,
    /// The Lua source: `{"main": …}` for a policy of functions, or one chunk per callback
    /// (`load`, `when`, `where`, `howmuch`) for Mantle-library chunks.
    pub chunks: std::collections::BTreeMap<String, String>,
    /// Its parameters (`params.*`), as `name=value` text gives them.
    #[serde(default)]
    pub params: std::collections::BTreeMap<String, String>,
    /// The record it replaced (without its own predecessor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<Box<BalancerRecord>>,
}

impl BalancerRecord {
    /// This record as the successor of `current` (its version next, `current` its previous).
    pub fn after(mut self, current: Option<&BalancerRecord>) -> Self {
        self.version = current.map_or(1, |c| c.version + 1);
        self.previous = current.map(|c| {
            Box::new(BalancerRecord {
                previous: None,
                ..c.clone()
            })
        });
        self
    }
}

impl ClusterState {
    /// Nothing assigned, nobody alive.
    pub fn empty() -> Self {
        Self {
            map: SlotMap::empty(),
            members: Vec::new(),
            balancer: None,
        }
    }

    /// Whether node `id` holds a current lease.
    pub fn alive(&self, id: &str) -> bool {
        self.members.iter().any(|m| m.id == id)
    }

    /// As JSON: `{"map": …, "members": […], "balancer": {…} or null}`.
    pub fn to_json(&self) -> String {
        format!(
            "{{\"map\":{},\"members\":{},\"balancer\":{}}}",
            self.map.to_json(),
            serde_json::to_string(&self.members).expect("members serialise"),
            serde_json::to_string(&self.balancer).expect("a balancer record serialises")
        )
    }

    /// Read back from [`to_json`](Self::to_json), checked.
    pub fn from_json(text: &str) -> Result<Self, MapError> {
        let v: serde_json::Value = serde_json::from_str(text)?;
        let map = SlotMap::from_json(&v["map"].to_string())?;
        let members: Vec<Member> = serde_json::from_value(v["members"].clone())?;
        let balancer = serde_json::from_value(v["balancer"].clone())?;
        Ok(Self {
            map,
            members,
            balancer,
        })
    }
}

/// Why the coordination store could not do what was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CoordError {
    /// It cannot be reached, or the connection failed.
    #[error("coordination store {addr}: {why}")]
    Unreachable {
        /// Where it was sought.
        addr: String,
        /// What happened.
        why: String,
    },
    /// The node's lease lapsed (it must join again).
    #[error("node {0} holds no lease (it lapsed, or the node never joined)")]
    NoLease(String),
    /// A request it refused, with its reason.
    #[error("coordination store refused: {0}")]
    Refused(String),
    /// What it holds is not a valid state.
    #[error("coordination store holds a corrupted entry: {0}")]
    Corrupted(#[from] MapError),
}

/// The operations a node and the rescaler need of the coordination store.
pub trait Coord: Send + Sync {
    /// Registers `me` as alive for `ttl`, renewed by [`keepalive`](Self::keepalive). A node that
    /// joins again with the same id replaces its earlier entry (a restart at a new address).
    fn join(&self, me: Member, ttl: Duration) -> BoxFuture<'_, Result<(), CoordError>>;
    /// Renews the lease of node `id`; [`CoordError::NoLease`] if it lapsed.
    fn keepalive<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), CoordError>>;
    /// Ends the lease of node `id` now (a clean stop).
    fn leave<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), CoordError>>;
    /// The current state.
    fn state(&self) -> BoxFuture<'_, Result<ClusterState, CoordError>>;
    /// Replaces the map, if its version is still `expected`, by `map` at version `expected + 1`
    /// (one transaction). `Ok(false)`: someone changed it first; read it again.
    fn update(&self, expected: u64, map: SlotMap) -> BoxFuture<'_, Result<bool, CoordError>>;
    /// The state, kept current as it changes.
    fn watch(&self) -> BoxFuture<'_, Result<watch::Receiver<Arc<ClusterState>>, CoordError>>;
    /// Makes `record` the cluster's balancer policy ([`BalancerRecord::after`] the current
    /// one, in one transaction); its version.
    fn set_balancer(&self, record: BalancerRecord) -> BoxFuture<'_, Result<u64, CoordError>>;
    /// Asks whoever runs the nodes to start `n` more: their ids once they hold leases.
    /// [`CoordError::Refused`] (saying "no supervisor") where nobody does: an operator starts
    /// them (`pliant serve --coord` or `--etcd`).
    fn spawn(&self, n: usize) -> BoxFuture<'_, Result<Vec<String>, CoordError>> {
        let _ = n;
        Box::pin(async { Err(CoordError::Refused(NO_SUPERVISOR.into())) })
    }
    /// Asks whoever runs the nodes to stop node `id` and end its lease.
    fn retire<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), CoordError>> {
        let _ = id;
        Box::pin(async { Err(CoordError::Refused(NO_SUPERVISOR.into())) })
    }
    /// A client of the same store that opens its own connections in whatever runtime uses it:
    /// what renews a node's lease on a thread of its own, so that a node busy serving (one
    /// thread by default) or a slow request to the store on the shared connection does not
    /// hold its renewals back past the lease. `None` where the client is bound to the runtime
    /// that made it (the lease is then renewed there).
    fn renewer(&self) -> Option<Arc<dyn Coord>> {
        None
    }
}

/// Why [`Coord::spawn`] and [`Coord::retire`] are refused where no supervisor runs the nodes.
pub const NO_SUPERVISOR: &str = "no supervisor: nodes are started and stopped by hand here";

/// A node's lease: renewed for `ttl` at each keepalive.
struct Lease {
    member: Member,
    ttl: Duration,
    deadline: Instant,
}

/// The state in this process.
pub struct Embedded {
    leases: Mutex<Vec<Lease>>,
    map: Mutex<SlotMap>,
    balancer: Mutex<Option<BalancerRecord>>,
    /// Held by an update of the map or the balancer from its read of the current one to its
    /// application, through its save (an fsync): updates one at a time, while `map` and
    /// `balancer` are held only to read or swap, so that readers (a node renewing its lease, a
    /// state read) do not wait for a save. A save waits behind whatever else the disk is
    /// writing: an fsync under a loaded node's writes took over 5 s (a node's lease renewal and
    /// a move's map update then timed out).
    updating: Mutex<()>,
    tx: watch::Sender<Arc<ClusterState>>,
    /// Where the map is kept across restarts, if anywhere.
    file: Option<std::path::PathBuf>,
}

impl Default for Embedded {
    fn default() -> Self {
        Self::new()
    }
}

impl Embedded {
    /// An empty cluster.
    pub fn new() -> Self {
        Self {
            leases: Mutex::new(Vec::new()),
            map: Mutex::new(SlotMap::empty()),
            balancer: Mutex::new(None),
            updating: Mutex::new(()),
            tx: watch::channel(Arc::new(ClusterState::empty())).0,
            file: None,
        }
    }

    /// The state kept in `file` (a JSON slot map, written at every update, so a cluster
    /// started again finds its map): read if it exists, checked; created at the first update.
    pub fn open(file: &std::path::Path) -> Result<Self, CoordError> {
        let mut e = Self::new();
        e.file = Some(file.to_path_buf());
        match std::fs::read_to_string(file) {
            Ok(text) => {
                let map = SlotMap::from_json(&text)
                    .map_err(|err| CoordError::Refused(format!("{}: {err}", file.display())))?;
                *e.map.get_mut().expect("map lock") = map;
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(CoordError::Refused(format!("{}: {err}", file.display()))),
        }
        let bfile = balancer_file(file);
        match std::fs::read_to_string(&bfile) {
            Ok(text) => {
                let record: BalancerRecord = serde_json::from_str(&text)
                    .map_err(|err| CoordError::Refused(format!("{}: {err}", bfile.display())))?;
                *e.balancer.get_mut().expect("balancer lock") = Some(record);
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(CoordError::Refused(format!("{}: {err}", bfile.display()))),
        }
        e.publish();
        Ok(e)
    }

    /// Writes `map` to the file, if there is one.
    fn save(&self, map: &SlotMap) -> Result<(), CoordError> {
        match &self.file {
            Some(file) => write_atomically(file, &map.to_json()),
            None => Ok(()),
        }
    }

    /// [`Coord::set_balancer`], here and now (saved beside the map before it is applied).
    pub fn set_balancer_now(&self, record: BalancerRecord) -> Result<u64, CoordError> {
        let version = {
            let _one = self.updating.lock().expect("update lock");
            let record = record.after(self.balancer.lock().expect("balancer lock").as_ref());
            if let Some(file) = &self.file {
                let json = serde_json::to_string(&record).expect("a balancer record serialises");
                write_atomically(&balancer_file(file), &json)?;
            }
            let v = record.version;
            *self.balancer.lock().expect("balancer lock") = Some(record);
            v
        };
        self.publish();
        Ok(version)
    }

    /// The state now (leases that lapsed by now dropped).
    pub fn current(&self) -> ClusterState {
        self.expire();
        (**self.tx.borrow()).clone()
    }

    /// Drops the leases that lapsed; tells watchers if any did. Call it now and then (the
    /// server does, a few times per lease).
    pub fn expire(&self) {
        let now = Instant::now();
        let changed = {
            let mut leases = self.leases.lock().expect("leases lock");
            let before = leases.len();
            leases.retain(|l| {
                let keep = l.deadline > now;
                if !keep {
                    let m = &l.member;
                    tracing::warn!("node {} ({}): lease lapsed", m.id, m.addr);
                }
                keep
            });
            leases.len() != before
        };
        if changed {
            self.publish();
        }
    }

    /// Sends watchers the state now. Both locks are held (map first, as everywhere) until it
    /// is sent, so two publishers cannot send an older state last.
    fn publish(&self) {
        let map = self.map.lock().expect("map lock");
        let balancer = self.balancer.lock().expect("balancer lock");
        let leases = self.leases.lock().expect("leases lock");
        let members = leases.iter().map(|l| l.member.clone()).collect();
        self.tx.send_replace(Arc::new(ClusterState {
            map: map.clone(),
            members,
            balancer: balancer.clone(),
        }));
    }

    /// [`Coord::join`], here and now.
    pub fn join_now(&self, me: Member, ttl: Duration) -> Result<(), CoordError> {
        if !valid_id(&me.id) {
            return Err(CoordError::Refused(format!(
                "node id {:?} is not 40 hex digits",
                me.id
            )));
        }
        let deadline = Instant::now()
            .checked_add(ttl)
            .ok_or_else(|| CoordError::Refused(format!("a lease of {ttl:?} is too long")))?;
        {
            let mut leases = self.leases.lock().expect("leases lock");
            let lease = Lease {
                deadline,
                member: me,
                ttl,
            };
            match leases.iter_mut().find(|l| l.member.id == lease.member.id) {
                Some(entry) => *entry = lease,
                None => leases.push(lease),
            }
        }
        self.publish();
        Ok(())
    }

    /// [`Coord::keepalive`], here and now.
    pub fn keepalive_now(&self, id: &str) -> Result<(), CoordError> {
        let mut leases = self.leases.lock().expect("leases lock");
        let now = Instant::now();
        // A lease lapses when `expire` drops it, not when its deadline passes: a renewal that
        // waited in this store's socket while the store itself was stalled (a synced write of
        // the map on a loaded disk) renews, rather than making the node leave and join again.
        match leases.iter_mut().find(|l| l.member.id == id) {
            Some(l) => {
                // Its ttl was checked when it joined.
                l.deadline = now.checked_add(l.ttl).unwrap_or(l.deadline);
                Ok(())
            }
            None => Err(CoordError::NoLease(id.to_string())),
        }
    }

    /// The store was not looking for `stalled` (its reaper ran that late): every lease gets
    /// that time back before it is judged, since a node cannot be held to renewals the store
    /// was in no state to receive (etcd extends its leases after an election for the same
    /// reason).
    pub fn forgive(&self, stalled: Duration) {
        let mut leases = self.leases.lock().expect("leases lock");
        for l in leases.iter_mut() {
            l.deadline = l.deadline.checked_add(stalled).unwrap_or(l.deadline);
        }
        tracing::warn!(
            ?stalled,
            "the coordination store stalled: its nodes' leases get that time back"
        );
    }

    /// [`Coord::leave`], here and now.
    pub fn leave_now(&self, id: &str) {
        self.leases
            .lock()
            .expect("leases lock")
            .retain(|l| l.member.id != id);
        self.publish();
    }

    /// [`Coord::update`], here and now (saved before it is applied, so a map that could not be
    /// saved is not applied either).
    pub fn update_now(&self, expected: u64, map: SlotMap) -> Result<bool, CoordError> {
        {
            let _one = self.updating.lock().expect("update lock");
            let map = {
                let current = self.map.lock().expect("map lock");
                if current.version() != expected {
                    return Ok(false);
                }
                let next = expected.checked_add(1).ok_or_else(|| {
                    CoordError::Refused("the map version cannot grow any further".into())
                })?;
                map.with_moves_begun(&current, next).with_version(next)
            };
            // Readers see the map before this one until it is saved and applied.
            self.save(&map)?;
            *self.map.lock().expect("map lock") = map;
        }
        self.publish();
        Ok(true)
    }

    /// A watcher of the state.
    pub fn subscribe(&self) -> watch::Receiver<Arc<ClusterState>> {
        self.tx.subscribe()
    }
}

impl Coord for Embedded {
    fn join(&self, me: Member, ttl: Duration) -> BoxFuture<'_, Result<(), CoordError>> {
        Box::pin(async move { self.join_now(me, ttl) })
    }
    fn keepalive<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), CoordError>> {
        Box::pin(async move { self.keepalive_now(id) })
    }
    fn leave<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), CoordError>> {
        Box::pin(async move {
            self.leave_now(id);
            Ok(())
        })
    }
    fn state(&self) -> BoxFuture<'_, Result<ClusterState, CoordError>> {
        Box::pin(async move { Ok(self.current()) })
    }
    fn update(&self, expected: u64, map: SlotMap) -> BoxFuture<'_, Result<bool, CoordError>> {
        Box::pin(async move { self.update_now(expected, map) })
    }
    fn watch(&self) -> BoxFuture<'_, Result<watch::Receiver<Arc<ClusterState>>, CoordError>> {
        Box::pin(async move { Ok(self.subscribe()) })
    }
    fn set_balancer(&self, record: BalancerRecord) -> BoxFuture<'_, Result<u64, CoordError>> {
        Box::pin(async move { self.set_balancer_now(record) })
    }
}

/// Where an embedded store whose map is in `file` keeps the balancer policy.
fn balancer_file(file: &std::path::Path) -> std::path::PathBuf {
    file.with_file_name("balancer.json")
}

/// Writes `text` to `file`: a temporary file synced, then renamed over the old one, so a crash
/// leaves one version or the other, never half of one.
fn write_atomically(file: &std::path::Path, text: &str) -> Result<(), CoordError> {
    let tmp = file.with_extension("json.tmp");
    let write = || -> std::io::Result<()> {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, file)
    };
    write().map_err(|e| CoordError::Refused(format!("saving {}: {e}", file.display())))
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

    /// Regression: an update held the map's lock through its save, an fsync, which may wait
    /// seconds behind the disk's other writes, and every reader waited with it (nodes' lease
    /// renewals and moves timed out). A save that does not end (its file a FIFO nobody reads)
    /// leaves readers, lease renewals and joins (which tell the watchers) answered at once,
    /// with the map before the update; a map that could not be saved is not applied.
    #[test]
    fn readers_are_answered_while_an_update_waits_for_its_save() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("cluster.json");
        let c = Arc::new(Embedded::open(&file).expect("open"));
        let map = SlotMap::even(1, &[member(1)]);
        assert!(c.update_now(0, map.clone()).expect("saved"));
        c.join_now(member(1), Duration::from_secs(60))
            .expect("join");
        let tmp = file.with_extension("json.tmp");
        crate::map::tests::mkfifo(&tmp);
        let update = {
            let c = c.clone();
            let next = SlotMap::even(1, &[member(1), member(2)]);
            std::thread::spawn(move || c.update_now(1, next))
        };
        // The update is in its save (blocked opening the FIFO) until the FIFO is read.
        std::thread::sleep(Duration::from_millis(200));
        assert!(!update.is_finished(), "the save is waiting for its reader");
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = {
            let c = c.clone();
            std::thread::spawn(move || {
                c.keepalive_now(&member(1).id).expect("renewed");
                // A join tells the watchers, which reads the map.
                c.join_now(member(3), Duration::from_secs(60))
                    .expect("join");
                let _ = tx.send(c.current().map.version());
            })
        };
        let read = rx.recv_timeout(Duration::from_secs(10));
        // Let the save go on (and fail: a FIFO cannot be synced) before asserting.
        let mut fifo = std::fs::File::open(&tmp).expect("open the FIFO");
        std::io::Read::read_to_end(&mut fifo, &mut Vec::new()).expect("read the FIFO");
        assert_eq!(read, Ok(1), "readers were answered while the save waited");
        reader.join().expect("reader");
        assert!(update.join().expect("update").is_err(), "the save failed");
        assert_eq!(c.current().map, map.with_version(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_lapses_unless_renewed_and_watchers_see_it() {
        let c = Embedded::new();
        let mut w = c.watch().await.expect("embedded store");
        c.join(member(1), Duration::from_secs(3))
            .await
            .expect("embedded store");
        c.join(member(2), Duration::from_secs(3))
            .await
            .expect("embedded store");
        assert!(w.has_changed().expect("embedded store"));
        assert_eq!(w.borrow_and_update().members.len(), 2);
        tokio::time::advance(Duration::from_secs(2)).await;
        c.keepalive(&member(1).id).await.expect("embedded store");
        tokio::time::advance(Duration::from_secs(2)).await;
        c.expire();
        assert_eq!(w.borrow_and_update().members, vec![member(1)]);
        assert!(matches!(
            c.keepalive(&member(2).id).await,
            Err(CoordError::NoLease(_))
        ));

        c.leave(&member(1).id).await.expect("embedded store");
        assert!(c.state().await.expect("embedded store").members.is_empty());
        // A store that stalled longer than a lease judges nobody for its own silence.
        c.join(member(3), Duration::from_secs(3))
            .await
            .expect("embedded store");
        tokio::time::advance(Duration::from_secs(10)).await;
        c.forgive(Duration::from_secs(10));
        c.expire();
        assert!(
            w.borrow_and_update()
                .members
                .iter()
                .any(|m| *m == member(3)),
            "a lease lapsed during the store's own stall"
        );
        c.keepalive(&member(3).id)
            .await
            .expect("renewed after the stall");
    }

    #[tokio::test]
    async fn an_update_wins_only_over_the_version_it_read() {
        let c = Embedded::new();
        let map = SlotMap::even(0, &[member(1)]);
        assert!(c.update(0, map.clone()).await.expect("embedded store"));
        // A second writer that read version 0 too loses, and changes nothing.
        assert!(
            !c.update(0, SlotMap::even(0, &[member(2)]))
                .await
                .expect("embedded store")
        );
        let s = c.state().await.expect("embedded store");
        assert_eq!(s.map.version(), 1);
        assert_eq!(s.map.owner(0), Some(&member(1)));
        assert_eq!(
            ClusterState::from_json(&s.to_json()).expect("embedded store"),
            s
        );
    }

    #[test]
    fn a_saved_map_is_found_again_and_a_corrupted_one_refused() {
        let dir = tempfile::tempdir().expect("embedded store");
        let file = dir.path().join("cluster.json");
        let c = Embedded::open(&file).expect("embedded store");
        assert!(
            c.update_now(0, SlotMap::even(0, &[member(1), member(2)]))
                .expect("embedded store")
        );
        let again = Embedded::open(&file).expect("embedded store");
        assert_eq!(again.current().map, c.current().map);
        assert_eq!(again.current().map.version(), 1);
        std::fs::write(&file, "{\"version\": 2, \"nodes\": [{\"id\": \"x\"")
            .expect("embedded store");
        let err = Embedded::open(&file).err().expect("corrupted").to_string();
        assert!(
            err.contains("cluster.json") && err.contains("slot map"),
            "{err}"
        );
    }

    #[test]
    fn the_balancer_policy_gets_versions_keeps_the_one_before_and_survives_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("cluster.json");
        let record = |name: &str| BalancerRecord {
            version: 0,
            name: name.into(),
            chunks: [(
                "main".to_string(),
                "function when() return false end".to_string(),
            )]
            .into(),
            params: [("k".to_string(), "1".to_string())].into(),
            previous: None,
        };
        let c = Embedded::open(&file).expect("a new store");
        let w = c.subscribe();
        assert_eq!(c.set_balancer_now(record("a")).expect("set"), 1);
        assert_eq!(c.set_balancer_now(record("b")).expect("set"), 2);
        let b = w.borrow().balancer.clone().expect("watchers see it");
        assert_eq!((b.name.as_str(), b.version), ("b", 2));
        let prev = b.previous.as_deref().expect("the one before");
        assert_eq!((prev.name.as_str(), prev.version), ("a", 1));
        assert!(prev.previous.is_none(), "one step of history, not a chain");
        // The state's JSON carries it, and a store opened again on the file has it.
        let state = c.current();
        assert_eq!(
            ClusterState::from_json(&state.to_json()).expect("JSON"),
            state
        );
        drop(c);
        let again = Embedded::open(&file).expect("reopened");
        assert_eq!(again.current().balancer, Some(b));
    }
}
