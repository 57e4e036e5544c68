//! A node's shared state: its keyspace, settings that change at run time, counters, SCAN
//! cursors, and the shutdown signal.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::config::{Config, Durability};
use crate::keyspace::Keyspace;

mod counters;
mod exec_gate;
mod group_sync;
mod read_ahead;
mod readers;

pub use counters::BatchCounts;
pub use group_sync::Turn;

/// SCAN cursors kept at once; the oldest is forgotten first (a client that comes back with it
/// gets `ERR invalid cursor`, never a wrong key).
const CURSORS: usize = 4096;

/// One node (see the module doc).
pub struct Node {
    keyspace: Mutex<Keyspace>,
    durability: AtomicU8,
    max_clients: usize,
    max_value_size: usize,
    port: AtomicU64,
    /// The address it listens on (the port may be picked at bind time).
    ip: std::net::IpAddr,
    started: Instant,
    connections: AtomicU64,
    rejected: AtomicU64,
    /// Shared with group commit, which fsyncs in line when every open connection waits for
    /// the fsync (see `node::group_sync`'s module doc).
    clients: std::sync::Arc<AtomicUsize>,
    /// The application's progress as its clients report it (`PLIANT.PROGRESS`): what the node's
    /// policy sees as `progress`. `None` until a client reports.
    progress: std::sync::Mutex<Option<f64>>,
    next_client: AtomicU64,
    cursors: Mutex<Cursors>,
    shutdown: tokio::sync::watch::Sender<bool>,
    policy: std::sync::OnceLock<crate::policy::Policy>,
    password: Option<String>,
    auth_failures: AtomicU64,
    tracking: std::sync::Arc<crate::tracking::Tracking>,
    parent: std::sync::OnceLock<std::sync::Arc<crate::upstream::Upstream>>,
    /// This node's metrics at its policy's latest decision, as the cache⇄policy contract names
    /// them: what it answers a child's report with.
    metrics: Mutex<Reported>,
    /// The latest report of each child tier, by the child's id, with when it came.
    children: Mutex<HashMap<String, (Instant, Reported)>>,
    /// Its place in a cluster, if it belongs to one.
    cluster: std::sync::OnceLock<crate::cluster::Cluster>,
    /// Held for reading by every command, for writing by EXEC: no other client's command runs
    /// between a transaction's commands.
    exec_gate: exec_gate::ExecGate,
    /// WATCHed keys: each with the connections watching it and the flag a change of it sets.
    watches: Mutex<HashMap<Bytes, Vec<Watcher>>>,
    /// Keys in `watches`: a write looks no further when none is watched.
    watched: AtomicUsize,
    /// The connections, for CLIENT LIST, INFO and KILL.
    registry: crate::clients::Registry,
    /// Per command of [`crate::COMMANDS`], by its index there: `INFO commandstats`.
    command_stats: counters::Counters,
    /// Group commit of the store's fsyncs (`--durability always`); none without a store.
    group_sync: Option<group_sync::GroupSync>,
    /// Walks of the whole store (DBSIZE, KEYS, SCAN, INFO keyspace) run one at a time: see
    /// [`Node::walk_store`].
    walks: std::sync::Arc<tokio::sync::Semaphore>,
    /// The threads that read the store for misses (`None` without a store).
    readers: Option<readers::Readers>,
    /// The store below memory, if any: what [`read_ahead`](Node::read_ahead) reads off the lock.
    store: Option<std::sync::Arc<dyn pliant_store::Store>>,
    /// Whether a command's misses are read off the lock now (the keyspace sets it).
    store_reads_asking: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The keyspace's batches on their way to the store, written off the keyspace lock
    /// ([`commit`](Node::commit)); none without a store.
    log: Option<std::sync::Arc<crate::keyspace::StoreLog>>,
}

/// One command's counters, read.
#[derive(Debug, Clone, Copy, Default)]
pub struct CommandStats {
    /// Times it ran.
    pub calls: u64,
    /// Microseconds it ran for, in all.
    pub usec: u64,
    /// Times it was refused before running (arity, authentication, a transaction's checks).
    pub rejected: u64,
    /// Times it ran and answered an error.
    pub failed: u64,
}

/// A connection watching a key: its id, and the flag a change of the key sets.
type Watcher = (u64, std::sync::Arc<std::sync::atomic::AtomicBool>);

/// One node's metrics as it reports them to its parent or children: `(name, value)`.
pub type Reported = Vec<(String, f64)>;

/// Unix milliseconds now: the clock commands run at (and live `auto`'s).
/// The monotonic clock in nanoseconds (from an arbitrary start): what commands are timed with.
pub(crate) fn mono_ns() -> u64 {
    // CLOCK_MONOTONIC cannot fail on Linux given a valid pointer; 0 would only make one
    // command's time wrong, never a key's expiry (that is `now_ms`'s).
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).map_or(0, |t| {
        (t.tv_sec() as u64)
            .wrapping_mul(1_000_000_000)
            .wrapping_add(t.tv_nsec() as u64)
    })
}

/// The wall clock in milliseconds since the epoch: what expiries are kept in.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Metrics as `PLIANT.REPORT` carries them: a JSON object of numbers, absent ones left out.
pub(crate) fn reported_json(m: &Reported) -> serde_json::Value {
    serde_json::Value::Object(
        m.iter()
            .filter(|(_, v)| v.is_finite())
            .map(|(k, v)| (k.clone(), (*v).into()))
            .collect(),
    )
}

/// [`reported_json`] read back.
pub(crate) fn reported_from(v: serde_json::Value) -> Result<Reported, serde_json::Error> {
    let m: std::collections::BTreeMap<String, f64> = serde_json::from_value(v)?;
    Ok(m.into_iter().collect())
}

#[derive(Default)]
struct Cursors {
    next: u64,
    keys: HashMap<u64, Bytes>,
    order: VecDeque<u64>,
}

impl Node {
    /// A node over `keyspace` with the run-time settings of `config`.
    pub fn new(keyspace: Keyspace, config: &Config) -> Self {
        let clients = std::sync::Arc::new(AtomicUsize::new(0));
        Self {
            group_sync: keyspace.store_handle().map(|store| {
                group_sync::GroupSync::new(store, keyspace.store_log(), clients.clone())
            }),
            walks: std::sync::Arc::new(tokio::sync::Semaphore::new(1)),
            readers: keyspace
                .store_handle()
                .and_then(|_| readers::Readers::new()),
            store: keyspace.store_handle(),
            log: keyspace.store_log(),
            store_reads_asking: keyspace.store_reads_asking(),
            keyspace: Mutex::new(keyspace),
            durability: AtomicU8::new(durability_code(config.durability)),
            max_clients: config.max_clients,
            max_value_size: config.max_value_size,
            port: AtomicU64::new(u64::from(config.bind.port())),
            ip: config.bind.ip(),
            started: Instant::now(),
            connections: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            clients,
            progress: std::sync::Mutex::new(None),
            next_client: AtomicU64::new(1),
            cursors: Mutex::new(Cursors::default()),
            shutdown: tokio::sync::watch::channel(false).0,
            policy: std::sync::OnceLock::new(),
            password: config.requirepass.clone(),
            auth_failures: AtomicU64::new(0),
            tracking: Default::default(),
            parent: std::sync::OnceLock::new(),
            metrics: Mutex::new(Vec::new()),
            children: Mutex::new(HashMap::new()),
            cluster: std::sync::OnceLock::new(),
            exec_gate: exec_gate::ExecGate::default(),
            watches: Mutex::new(HashMap::new()),
            watched: AtomicUsize::new(0),
            registry: Default::default(),
            command_stats: counters::Counters::new(crate::COMMANDS.len()),
        }
    }

    /// Counts a refusal of command `i` before it ran.
    pub(crate) fn count_rejected(&self, i: usize) {
        self.command_stats.rejected(i);
    }

    /// Every command's counters, in the order of [`crate::COMMANDS`].
    pub fn command_stats(&self) -> Vec<CommandStats> {
        self.command_stats.each()
    }

    /// The connections open now (CLIENT LIST, INFO, KILL).
    pub fn registry(&self) -> &crate::clients::Registry {
        &self.registry
    }

    /// Held while one command runs: shared, except by EXEC (see the field).
    pub(crate) fn exec_shared(&self) -> std::sync::RwLockReadGuard<'_, ()> {
        self.exec_gate.shared()
    }

    /// Held while a transaction's commands run (EXEC): no other command runs meanwhile.
    pub(crate) fn exec_exclusive(&self) -> Vec<std::sync::RwLockWriteGuard<'_, ()>> {
        self.exec_gate.exclusive()
    }

    /// Whether any connection watches any key.
    pub(crate) fn watching(&self) -> bool {
        self.watched.load(Ordering::Relaxed) > 0
    }

    /// Connection `id` watches `key`: `dirty` is set when the key changes.
    pub(crate) fn watch(
        &self,
        id: u64,
        key: Bytes,
        dirty: &std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) {
        let mut w = self.watches.lock().unwrap_or_else(|p| p.into_inner());
        let list = w.entry(key).or_default();
        if list.is_empty() {
            self.watched.fetch_add(1, Ordering::Relaxed);
        }
        if !list.iter().any(|(c, _)| *c == id) {
            list.push((id, dirty.clone()));
        }
    }

    /// Connection `id` no longer watches `keys`.
    pub(crate) fn unwatch<'a>(&self, id: u64, keys: impl Iterator<Item = &'a Bytes>) {
        let mut w = self.watches.lock().unwrap_or_else(|p| p.into_inner());
        for k in keys {
            if let Some(list) = w.get_mut(k) {
                list.retain(|(c, _)| *c != id);
                if list.is_empty() {
                    w.remove(k);
                    self.watched.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// `keys` changed: every connection watching one of them will find its EXEC refused.
    pub(crate) fn touch<'a>(&self, keys: impl Iterator<Item = &'a Bytes>) {
        let w = self.watches.lock().unwrap_or_else(|p| p.into_inner());
        for k in keys {
            if let Some(list) = w.get(k) {
                for (_, dirty) in list {
                    dirty.store(true, Ordering::Relaxed);
                }
            }
        }
    }

    /// The keys watched now (a FLUSHDB touches those of them that exist).
    pub(crate) fn watched_keys(&self) -> Vec<Bytes> {
        let w = self.watches.lock().unwrap_or_else(|p| p.into_inner());
        w.keys().cloned().collect()
    }

    /// Its place in a cluster, if it belongs to one.
    pub fn cluster(&self) -> Option<&crate::cluster::Cluster> {
        self.cluster.get()
    }

    /// Makes it a node of `cluster` (once, at start).
    pub fn set_cluster(&self, cluster: crate::cluster::Cluster) {
        let _ = self.cluster.set(cluster);
    }

    /// This node's id in the policies' `servers` tables: the address it listens on, with the
    /// host's name for an unspecified one (0.0.0.0), so that nodes on different hosts that
    /// listen on the same port are told apart.
    pub fn id(&self) -> String {
        let host = if self.ip.is_unspecified() {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_else(|_| self.ip.to_string())
        } else {
            self.ip.to_string()
        };
        format!("{host}:{}", self.port())
    }

    /// Records this node's metrics (its policy thread does, at every decision).
    pub fn set_metrics(&self, m: Reported) {
        *self.metrics.lock().unwrap_or_else(|p| p.into_inner()) = m;
    }

    /// This node's metrics at its latest decision.
    pub fn metrics(&self) -> Reported {
        self.metrics
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Records a child tier's report.
    pub fn report_child(&self, id: String, m: Reported) {
        self.children
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, (Instant::now(), m));
    }

    /// The children known now (the policy thread forgets those that stopped reporting).
    pub fn child_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .children
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect();
        ids.sort();
        ids
    }

    /// The children that reported within `max_age`, by id; older reports are forgotten (the
    /// child stopped, or lost its way here).
    pub fn children(&self, max_age: Duration) -> Vec<(String, Reported)> {
        let mut c = self.children.lock().unwrap_or_else(|p| p.into_inner());
        c.retain(|_, (at, _)| at.elapsed() <= max_age);
        let mut v: Vec<_> = c
            .iter()
            .map(|(id, (_, m))| (id.clone(), m.clone()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// Whether clients must authenticate.
    pub fn requires_auth(&self) -> bool {
        self.password.is_some()
    }

    /// Checks a password given by AUTH or HELLO, in time independent of where it differs (so a
    /// client cannot find it byte by byte).
    pub fn check_password(&self, given: &[u8]) -> bool {
        self.password
            .as_deref()
            .is_some_and(|p| pliant_proto::auth::same_password(p, given))
    }

    /// Counts a refused AUTH.
    pub fn count_auth_failure(&self) {
        self.auth_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// Wrong passwords given so far.
    pub fn auth_failures(&self) -> u64 {
        self.auth_failures.load(Ordering::Relaxed)
    }

    /// Which clients hold copies of which keys (CLIENT TRACKING; a parent's children).
    pub fn tracking(&self) -> &std::sync::Arc<crate::tracking::Tracking> {
        &self.tracking
    }

    /// The connection to the parent, if this node is a tier over one (`--parent`).
    pub fn parent(&self) -> Option<&std::sync::Arc<crate::upstream::Upstream>> {
        self.parent.get()
    }

    pub(crate) fn set_parent(&self, up: std::sync::Arc<crate::upstream::Upstream>) {
        let _ = self.parent.set(up);
    }

    /// The policy thread's handle, once the server has started it.
    pub fn policy(&self) -> Option<&crate::policy::Policy> {
        self.policy.get()
    }

    pub(crate) fn set_policy(&self, p: crate::policy::Policy) {
        let _ = self.policy.set(p);
    }

    /// The keyspace, locked. A command holds it for its whole run, so commands are atomic as
    /// in Redis.
    pub fn keyspace(&self) -> MutexGuard<'_, Keyspace> {
        // A panic while holding the lock leaves a keyspace whose every step is complete (each
        // mutation is one map operation after the store write), so it stays usable.
        let mut ks = self.keyspace.lock().unwrap_or_else(|p| p.into_inner());
        // A store write that failed off the lock left keys in memory the store lacks: they go
        // before anyone reads them (one atomic load when none did).
        if self.log.as_ref().is_some_and(|l| l.dooming()) {
            ks.drop_doomed();
        }
        ks
    }

    /// Whether a command's store reads are read before it runs, off the keyspace lock: over a
    /// store, while its reads take longer than leaving the lock (the keyspace's `store_reads`).
    pub fn reads_ahead(&self) -> bool {
        self.store.is_some() && self.store_reads_asking.load(Ordering::Relaxed)
    }

    /// Commits the writes waiting for the store as one batch and returns once they are as
    /// durable as `--durability` promises: in the store's journal, and under `always` synced
    /// too, by an fsync shared with every client waiting at the same time and run without the
    /// keyspace lock (so the others are served meanwhile). On an error nothing may be
    /// acknowledged.
    ///
    /// Neither the store write nor the fsync runs under the keyspace lock: the batch is queued
    /// under it and written after it is released, together with every batch queued meanwhile
    /// (see the keyspace's `store_log`), on this worker thread (a journal append, as Redis's
    /// AOF write runs in its event loop); the fsync runs on the blocking pool, or on this thread
    /// when nothing else could be served meanwhile (see `node::group_sync`'s module doc).
    ///
    /// `turn` is the connection's turn in group commit (see `node::group_sync`'s module doc): taken
    /// once this batch is in the store, and replaced by the turn the covering fsync hands out.
    pub async fn commit(&self, turn: &mut Option<Turn>) -> Result<(), crate::keyspace::KvError> {
        let (Some(group), Some(log), Durability::Always) =
            (&self.group_sync, &self.log, self.durability())
        else {
            return self.write_pending().await.map(|_| ());
        };
        // Queued only: the fsync's leader writes every batch queued, as one store write, before
        // it syncs (fifty clients' batches were fifty appends a cycle, one each).
        let seq = self.queue_outside_exec()?;
        if seq == 0 {
            return Ok(());
        }
        match group
            .wait(seq, turn.take(), true, |upto| log.synced_through(upto))
            .await
        {
            Ok(next) => {
                *turn = Some(next);
                Ok(())
            }
            Err(why) => match log.failed() {
                // The store refused the write: its keys leave memory before anyone else is
                // served from it.
                Some(first) if std::sync::Arc::ptr_eq(first, &why) => {
                    self.keyspace().drop_doomed();
                    Err(crate::keyspace::KvError::Failed(why))
                }
                _ => Err(crate::keyspace::KvError::Unsynced(why)),
            },
        }
    }

    /// Queues what is pending as the store log's next batch, never between two commands of a
    /// transaction: every connection's commit takes every connection's pending writes, and one
    /// taken while another thread's EXEC was half done put half a transaction in the store, which
    /// a crash under `everysec` could leave there. So it waits for the EXEC under way, as a
    /// command does (the transactions' gate, held shared only while the batch is queued).
    fn queue_outside_exec(&self) -> Result<u64, crate::keyspace::KvError> {
        let _outside_exec = self.exec_shared();
        self.keyspace().queue_pending()
    }

    /// Queues what is pending (under the keyspace lock) and returns once it, and every batch
    /// before it, is in the store (written without the lock): the sequence of the latest batch
    /// that holds this caller's writes (0: none ever). If the store refused it, its keys have
    /// left memory and the error says why.
    pub(crate) async fn write_pending(&self) -> Result<u64, crate::keyspace::KvError> {
        // Without a store nothing is ever pending: no lock to take at the end of every batch.
        if self.log.is_none() {
            return Ok(0);
        }
        let seq = self.queue_outside_exec()?;
        if let Some(log) = &self.log
            && seq > 0
            && let Err(why) = log.write_through_async(seq).await
        {
            // Its keys leave memory before anyone else is served from it.
            self.keyspace().drop_doomed();
            return Err(crate::keyspace::KvError::Failed(why));
        }
        Ok(seq)
    }

    /// Whether a store lies below memory (commands that walk it may walk it first, off the
    /// lock: [`walk_store`](Node::walk_store)).
    pub(crate) fn has_store(&self) -> bool {
        self.store.is_some()
    }

    /// Runs `walk` over the store (DBSIZE's count, SCAN's and KEYS' keys) with the keyspace
    /// unlocked and on the blocking pool: a walk is O(keys) (SCAN's a bounded share of them),
    /// and under the lock every client stalled for it (any client could send DBSIZE in a
    /// loop). What is pending is written first, so every write acknowledged before, this
    /// client's included, is seen; the store's iterator is one consistent snapshot. `None`
    /// without a store, or if the walk did not finish (a panic): the command then walks under
    /// the lock, as it always could.
    pub(crate) async fn walk_store<T: Send + 'static>(
        &self,
        walk: impl FnOnce(&dyn pliant_store::Store) -> Result<T, crate::keyspace::KvError>
        + Send
        + 'static,
    ) -> Option<Result<T, crate::keyspace::KvError>> {
        let store = self.store.clone()?;
        if let Err(e) = self.write_pending().await {
            return Some(Err(e));
        }
        // One at a time: a walk reads every key, so two at once share the disk and neither ends
        // sooner, and a client that sends DBSIZE in a loop (or many clients at once) holds one
        // blocking thread, not one a request. Fair: waiting walks go in the order they came.
        // Owned by the walk itself: a command that goes away (a connection closed, the node
        // stopping) leaves its walk running, and the next waits for that walk, not for it.
        let permit = self.walks.clone().acquire_owned().await.ok()?;
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            walk(store.as_ref())
        })
        .await
        .ok()
    }

    /// Commits what is pending and makes every write so far durable: the fsync (`--durability
    /// everysec`'s once a second, and at shutdown) runs off the keyspace lock, on the blocking
    /// pool, and is shared with group commit's; the store write runs off the lock too. A no-op
    /// without a store or without writes.
    pub async fn sync(&self) -> Result<(), crate::keyspace::KvError> {
        self.write_pending().await?;
        let (Some(group), Some(log)) = (&self.group_sync, &self.log) else {
            return Ok(());
        };
        let seq = log.commits();
        if log.unsynced() && seq > 0 {
            // Its turn is of no use: this is not a client that will write again.
            group
                .wait(seq, None, false, |upto| log.synced_through(upto))
                .await
                .map_err(crate::keyspace::KvError::Unsynced)?;
        }
        Ok(())
    }

    /// When writes are acknowledged.
    pub fn durability(&self) -> Durability {
        match self.durability.load(Ordering::Relaxed) {
            0 => Durability::None,
            2 => Durability::Always,
            _ => Durability::EverySec,
        }
    }

    /// Changes when writes are acknowledged (`CONFIG SET durability`).
    pub fn set_durability(&self, d: Durability) {
        self.durability.store(durability_code(d), Ordering::Relaxed);
    }

    /// Connections served at once.
    pub fn max_clients(&self) -> usize {
        self.max_clients
    }

    /// Longest value accepted, bytes.
    pub fn max_value_size(&self) -> usize {
        self.max_value_size
    }

    /// The port it listens on.
    pub fn port(&self) -> u64 {
        self.port.load(Ordering::Relaxed)
    }

    pub(crate) fn set_port(&self, port: u16) {
        self.port.store(u64::from(port), Ordering::Relaxed);
    }

    /// Since it started.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    pub(crate) fn count_command(&self) {
        self.command_stats.command();
    }

    /// Adds a connection's counts of its batch to the node's (`INFO commandstats`) and empties
    /// them: once a batch, and before a command that reads them.
    pub(crate) fn fold_counts(&self, counts: &mut BatchCounts) {
        self.command_stats.fold(counts);
    }

    /// Commands run so far.
    pub fn commands_processed(&self) -> u64 {
        self.command_stats.commands()
    }

    /// Connections accepted so far.
    pub fn connections_received(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// Connections refused (over `--max-clients`).
    pub fn rejected_connections(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }

    /// The application's progress so far, as its clients reported it (`None`: never).
    pub fn progress(&self) -> Option<f64> {
        *self.progress.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the progress to `value` (`add`: adds it to the progress so far), which must leave it
    /// finite and not negative; returns the new progress.
    pub fn report_progress(&self, value: f64, add: bool) -> Result<f64, &'static str> {
        let mut p = self.progress.lock().unwrap_or_else(|e| e.into_inner());
        let next = if add { p.unwrap_or(0.0) + value } else { value };
        if !next.is_finite() || next < 0.0 {
            return Err("progress must stay a finite number, not negative");
        }
        *p = Some(next);
        Ok(next)
    }

    /// Connections open now.
    pub fn clients(&self) -> usize {
        self.clients.load(Ordering::Relaxed)
    }

    /// Admits a new connection: its client id, or `None` (counted) if the node is full.
    pub(crate) fn admit(&self) -> Option<u64> {
        self.connections.fetch_add(1, Ordering::Relaxed);
        let admitted = self
            .clients
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max_clients).then_some(n + 1)
            })
            .is_ok();
        if admitted {
            Some(self.next_client.fetch_add(1, Ordering::Relaxed))
        } else {
            self.rejected.fetch_add(1, Ordering::Relaxed);
            None
        }
    }

    pub(crate) fn leave(&self) {
        self.clients.fetch_sub(1, Ordering::AcqRel);
    }

    /// A new SCAN cursor standing for `last`, the last key a call returned.
    pub fn new_cursor(&self, last: Bytes) -> u64 {
        let mut c = self.cursors.lock().unwrap_or_else(|p| p.into_inner());
        c.next += 1;
        let id = c.next;
        c.keys.insert(id, last);
        c.order.push_back(id);
        while c.order.len() > CURSORS {
            if let Some(old) = c.order.pop_front() {
                c.keys.remove(&old);
            }
        }
        id
    }

    /// The key a cursor stands for, if the node still knows it.
    pub fn cursor(&self, id: u64) -> Option<Bytes> {
        let c = self.cursors.lock().unwrap_or_else(|p| p.into_inner());
        c.keys.get(&id).cloned()
    }

    /// Asks the server to stop (SHUTDOWN, a signal).
    pub fn shut_down(&self) {
        self.shutdown.send_replace(true);
        // Connections waiting for a request look at `stopping` when woken (`Client::closed`).
        for c in self.registry.all() {
            c.nudge();
        }
    }

    /// Whether the server is stopping.
    pub fn stopping(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// A receiver that changes when the server starts stopping.
    pub fn stop_signal(&self) -> tokio::sync::watch::Receiver<bool> {
        self.shutdown.subscribe()
    }
}

fn durability_code(d: Durability) -> u8 {
    match d {
        Durability::None => 0,
        Durability::EverySec => 1,
        Durability::Always => 2,
    }
}

/// CPU time of the process and of its waited-for children, seconds: user, system, children's
/// user, children's system (Linux `/proc/self/stat`, in its fixed 100 ticks a second; `None`
/// elsewhere).
pub fn cpu_seconds() -> Option<(f64, f64, f64, f64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name may hold spaces: the fields are counted after its closing parenthesis
    // (field 3 is the first after it; utime is 14).
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<f64> = rest
        .split_whitespace()
        .skip(11)
        .take(4)
        .map(|x| x.parse::<f64>().map(|t| t / 100.0))
        .collect::<Result<_, _>>()
        .ok()?;
    Some((*f.first()?, *f.get(1)?, *f.get(2)?, *f.get(3)?))
}

/// The process's resident set, bytes (Linux `/proc/self/statm`; `None` elsewhere).
pub fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::{KvError, Value};
    use pliant_proto::frame::Frame;

    /// The bug: `--durability everysec` fsynced once a second with the keyspace locked, so every
    /// client stalled for the fsync. Now, while the store holds the fsync, the keyspace serves.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_periodic_fsync_leaves_the_keyspace_to_clients() {
        use pliant_store::{FaultyStore, MemStore, OpKind, Store};
        let faulty = FaultyStore::new(MemStore::new());
        let faults = faulty.faults();
        let store: std::sync::Arc<dyn Store> = std::sync::Arc::new(faulty);
        let ks =
            Keyspace::new("lru", pliant_cache::Capacity::Keys(10), Some(store)).expect("keyspace");
        let node = std::sync::Arc::new(Node::new(ks, &Config::default()));
        node.keyspace()
            .set(Bytes::from_static(b"k"), crate::keyspace::Value::new("v"))
            .expect("set");
        let stall = faults.stall(OpKind::Sync);
        let syncing = {
            let node = node.clone();
            tokio::spawn(async move { node.sync().await })
        };
        let held = tokio::task::block_in_place(|| stall.wait_held(Duration::from_secs(10)));
        assert!(held, "the fsync reached the store");
        assert_eq!(
            node.keyspace().get(b"k", 0).expect("get"),
            Some(Bytes::from_static(b"v")),
            "served while the fsync is held"
        );
        stall.release();
        tokio::time::timeout(Duration::from_secs(10), syncing)
            .await
            .expect("the fsync ends")
            .expect("no panic")
            .expect("synced");
        assert!(!node.keyspace().unsynced(), "every write is durable");
    }

    /// Under `always`, committers leave their batches queued and the fsync's leader writes them
    /// all as one store write before it syncs: the clients that wait out one fsync cost the
    /// store one append, not one each (fifty a cycle in `tools/bench/group_commit.sh`).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn batches_waiting_for_an_fsync_reach_the_store_in_one_write() {
        use pliant_store::OpKind;
        let (node, faults, store) = faulty_node_with(&Config {
            durability: crate::config::Durability::Always,
            ..Config::default()
        });
        set(&node, "first", "1").expect("set");
        let stall = faults.stall(OpKind::Sync);
        let first = commit(&node);
        let held = tokio::task::block_in_place(|| stall.wait_held(Duration::from_secs(10)));
        assert!(held, "the first fsync reached the store");
        assert_eq!(faults.writes(), 1, "the first batch, written by its leader");
        // Three clients commit while that fsync is held: queued, not written.
        let mut waiting = Vec::new();
        for key in ["a", "b", "c"] {
            set(&node, key, "v").expect("set");
            waiting.push(commit(&node));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(faults.writes(), 1, "queued while the fsync runs");
        stall.release();
        ended(first).await.expect("durable");
        for w in waiting {
            ended(w).await.expect("durable");
        }
        assert_eq!(faults.writes(), 2, "the three batches in one store write");
        for key in ["first", "a", "b", "c"] {
            assert!(
                store.get(key.as_bytes()).expect("read").is_some(),
                "{key} in the store"
            );
        }
        assert!(!node.keyspace().unsynced(), "every write is durable");
    }

    /// The bug: every connection's commit takes every connection's pending writes, and one that
    /// ran while another thread's EXEC was half done put half a transaction in the store (a
    /// crash under `everysec` could leave it there). A commit now waits for the EXEC under way.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_commit_waits_for_a_transaction_under_way() {
        let (node, _faults, store) = faulty_node();
        let exec = node.exec_exclusive();
        set(&node, "first", "1").expect("the transaction's first write");
        let committing = commit(&node);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            store.get(b"first").expect("read").is_none(),
            "nothing of the transaction in the store while it runs"
        );
        set(&node, "second", "2").expect("the transaction's second write");
        drop(exec);
        ended(committing).await.expect("committed");
        for key in ["first", "second"] {
            assert!(store.get(key.as_bytes()).expect("read").is_some(), "{key}");
        }
    }

    /// A node over a `FaultyStore`, with its controls and the store.
    fn faulty_node() -> (
        std::sync::Arc<Node>,
        pliant_store::Faults,
        std::sync::Arc<dyn pliant_store::Store>,
    ) {
        faulty_node_with(&Config::default())
    }

    /// [`faulty_node`] with `config`.
    fn faulty_node_with(
        config: &Config,
    ) -> (
        std::sync::Arc<Node>,
        pliant_store::Faults,
        std::sync::Arc<dyn pliant_store::Store>,
    ) {
        use pliant_store::{FaultyStore, MemStore, Store};
        let faulty = FaultyStore::new(MemStore::new());
        let faults = faulty.faults();
        let store: std::sync::Arc<dyn Store> = std::sync::Arc::new(faulty);
        let ks = Keyspace::new("lru", pliant_cache::Capacity::Keys(10), Some(store.clone()))
            .expect("keyspace");
        (std::sync::Arc::new(Node::new(ks, config)), faults, store)
    }

    fn set(node: &Node, key: &'static str, value: &'static str) -> Result<(), KvError> {
        node.keyspace()
            .set(Bytes::from_static(key.as_bytes()), Value::new(value))
    }

    fn get(node: &Node, key: &str) -> Option<Bytes> {
        node.keyspace().get(key.as_bytes(), 0).expect("get")
    }

    /// A client's commit, as the server runs it at the end of a batch of commands.
    fn commit(node: &std::sync::Arc<Node>) -> tokio::task::JoinHandle<Result<(), KvError>> {
        let node = node.clone();
        tokio::spawn(async move { node.commit(&mut None).await })
    }

    async fn ended(commit: tokio::task::JoinHandle<Result<(), KvError>>) -> Result<(), KvError> {
        tokio::time::timeout(Duration::from_secs(10), commit)
            .await
            .expect("the commit ends")
            .expect("no panic")
    }

    /// The bug: `Node::commit` wrote a client's batch to the store with the keyspace locked, so
    /// one client's store write (a journal append, a stall in the OS) stalled every client. Now,
    /// while the store holds the write, the keyspace lock is free: another client's GET of a key
    /// in memory is served, and a read of a key whose write is in the held batch sees it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_held_store_write_leaves_the_keyspace_to_other_clients() {
        use pliant_store::OpKind;
        let (node, faults, store) = faulty_node();
        set(&node, "hot", "in memory").expect("set");
        ended(commit(&node)).await.expect("committed");
        set(&node, "k", "new").expect("set");
        let stall = faults.stall(OpKind::Write);
        let committing = commit(&node);
        let held = tokio::task::block_in_place(|| stall.wait_held(Duration::from_secs(10)));
        assert!(held, "the batch reached the store");
        {
            let mut ks = node
                .keyspace
                .try_lock()
                .expect("the keyspace lock is free while the store holds the write");
            assert_eq!(
                ks.get(b"hot", 0).expect("get"),
                Some(Bytes::from_static(b"in memory")),
                "served while the store write is held"
            );
            // Not from memory: from the batch on its way to the store.
            ks.forget_memory();
            assert_eq!(
                ks.get(b"k", 0).expect("get"),
                Some(Bytes::from_static(b"new"))
            );
        }
        assert_eq!(store.get(b"k").expect("get"), None, "not in the store yet");
        stall.release();
        ended(committing).await.expect("committed");
        node.keyspace().forget_memory();
        assert_eq!(get(&node, "k"), Some(Bytes::from_static(b"new")));
        assert_eq!(faults.writes(), 2, "one store write per commit");
    }

    /// A client's request as the server runs it on this node, at `now`.
    async fn request(
        node: &Node,
        session: &mut crate::cmd::Session,
        args: &[&str],
        now: u64,
    ) -> Frame {
        let args: Vec<Bytes> = args
            .iter()
            .map(|a| Bytes::copy_from_slice(a.as_bytes()))
            .collect();
        crate::server::run_here(node, session, &args, now).await
    }

    fn client() -> crate::cmd::Session {
        crate::cmd::Session {
            authenticated: true,
            ..Default::default()
        }
    }

    /// A node over a held-able store with five keys committed (`hot`, `a`, `b`, `soon`, which
    /// has expired by the returned time but is not deleted yet, and `later`, which expires an
    /// hour after it was written), and the time its commands run at: two minutes on.
    async fn counted_node() -> (std::sync::Arc<Node>, pliant_store::Faults, u64) {
        let (node, faults, _) = faulty_node();
        let t = now_ms();
        for k in ["hot", "a", "b"] {
            set(&node, k, "v").expect("set");
        }
        for (k, ttl) in [("soon", 60_000), ("later", 3_600_000)] {
            node.keyspace()
                .set(
                    Bytes::from_static(k.as_bytes()),
                    Value {
                        data: Bytes::from_static(b"v"),
                        expires_at: Some(t + ttl),
                    },
                )
                .expect("set");
        }
        ended(commit(&node)).await.expect("committed");
        (node, faults, t + 120_000)
    }

    /// Runs `args` (a command that walks the store) for a client that first SETs `late` in the
    /// same batch (written, not yet acknowledged), with the store's walk held: the keyspace lock
    /// is free meanwhile and another client's GET of a key in memory is served; the reply once
    /// the walk is let go.
    async fn walk_held(args: &'static [&'static str]) -> Frame {
        use pliant_store::OpKind;
        let (node, faults, now) = counted_node().await;
        let stall = faults.stall(OpKind::Read);
        let walking = {
            let node = node.clone();
            tokio::spawn(async move {
                let mut session = client();
                let set = request(&node, &mut session, &["set", "late", "v"], now).await;
                assert_eq!(set, Frame::ok());
                request(&node, &mut session, args, now).await
            })
        };
        let held = tokio::task::block_in_place(|| stall.wait_held(Duration::from_secs(10)));
        assert!(held, "the walk reached the store");
        drop(
            node.keyspace
                .try_lock()
                .expect("the keyspace lock is free while the store holds the walk"),
        );
        assert_eq!(
            request(&node, &mut client(), &["get", "hot"], now).await,
            Frame::Bulk(Bytes::from_static(b"v")),
            "another client served while the walk is held"
        );
        stall.release();
        let reply = tokio::time::timeout(Duration::from_secs(10), walking)
            .await
            .expect("the walk ends")
            .expect("no panic");
        // The same answer as the walk under the lock that EXEC's commands still take.
        let mut session = client();
        for c in [&["multi"][..], args] {
            request(&node, &mut session, c, now).await;
        }
        assert_eq!(
            request(&node, &mut session, &["exec"], now).await,
            Frame::Array(vec![reply.clone()]),
            "as counted under the lock"
        );
        reply
    }

    /// The bug: a RESP2 connection that had subscribed and sent DBSIZE walked the whole store
    /// before its refusal (only the subscribe family is allowed then): a walk for nothing. It is
    /// refused without one now.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_subscribed_connection_s_dbsize_is_refused_without_a_walk() {
        use pliant_store::OpKind;
        let (node, faults, now) = counted_node().await;
        let gate = faults.stall(OpKind::Read);
        let mut session = client();
        let (_tx, rx) = tokio::sync::mpsc::unbounded_channel();
        session.messages = Some(rx);
        let reply = tokio::time::timeout(
            Duration::from_secs(10),
            request(&node, &mut session, &["dbsize"], now),
        )
        .await
        .expect("answered without waiting for a walk");
        assert!(
            matches!(&reply, Frame::Error(e) if e.starts_with("ERR Can't execute 'dbsize'")),
            "{reply:?}"
        );
        let walked = tokio::task::block_in_place(|| gate.wait_held(Duration::from_millis(100)));
        assert!(!walked, "no walk of the store");
    }

    /// The bug: walks ran on the blocking pool as many at once as clients sent them, so a
    /// client sending DBSIZE on many connections (or in a pipeline of many) took a blocking
    /// thread each, up to tokio's 512. Now one walk at a time: the second waits for the first.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn walks_of_the_store_run_one_at_a_time() {
        use pliant_store::OpKind;
        let (node, faults, now) = counted_node().await;
        let (first_gate, second_gate) = (faults.stall(OpKind::Read), faults.stall(OpKind::Read));
        let dbsize = |node: std::sync::Arc<Node>| {
            tokio::spawn(async move { request(&node, &mut client(), &["dbsize"], now).await })
        };
        let first = dbsize(node.clone());
        let held = tokio::task::block_in_place(|| first_gate.wait_held(Duration::from_secs(10)));
        assert!(held, "the first walk reached the store");
        let second = dbsize(node.clone());
        let reached =
            tokio::task::block_in_place(|| second_gate.wait_held(Duration::from_millis(300)));
        assert!(!reached, "the second walk waits for the first");
        first_gate.release();
        let held = tokio::task::block_in_place(|| second_gate.wait_held(Duration::from_secs(10)));
        assert!(held, "the second walk starts once the first ended");
        second_gate.release();
        for walk in [first, second] {
            let reply = tokio::time::timeout(Duration::from_secs(10), walk)
                .await
                .expect("the walk ends")
                .expect("no panic");
            assert_eq!(reply, Frame::Integer(5));
        }
    }

    /// The bug: over a store, DBSIZE walked every key of it with the keyspace locked, so every
    /// client stalled for an O(keys) walk (and any client could send DBSIZE in a loop). Now the
    /// walk runs off the lock, on the blocking pool, and still counts every key: those expired
    /// and not yet deleted (as Redis), and a write of the same batch, not yet acknowledged.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn dbsize_over_a_store_leaves_the_keyspace_to_other_clients() {
        assert_eq!(walk_held(&["dbsize"]).await, Frame::Integer(6));
    }

    /// The bug: INFO's keyspace section walked the store as DBSIZE did, under the lock. Now off
    /// it, with the same counts: live keys, those with an expiry, their mean time to live.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn info_keyspace_over_a_store_leaves_the_keyspace_to_other_clients() {
        let reply = walk_held(&["info", "keyspace"]).await;
        let Frame::Verbatim(text) = &reply else {
            panic!("INFO's text: {reply:?}");
        };
        assert_eq!(
            String::from_utf8_lossy(text),
            "# Keyspace\r\ndb0:keys=5,expires=1,avg_ttl=3480000\r\n\r\n"
        );
    }

    /// The live keys of [`counted_node`] and the batch's `late`, in key order.
    fn live_keys() -> Frame {
        Frame::Array(
            ["a", "b", "hot", "late", "later"]
                .iter()
                .map(|k| Frame::Bulk(Bytes::from_static(k.as_bytes())))
                .collect(),
        )
    }

    /// The bug: over a store, SCAN walked its share of the store (up to COUNT * 10 + 100 keys
    /// a call) with the keyspace locked. Now off it, with the same keys.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn scan_over_a_store_leaves_the_keyspace_to_other_clients() {
        assert_eq!(
            walk_held(&["scan", "0", "count", "100"]).await,
            Frame::Array(vec![Frame::Bulk(Bytes::from_static(b"0")), live_keys()])
        );
    }

    /// SCAN walked ahead of the lock keeps Redis's contract: a cursor it hands out resumes after
    /// the last key of its call, every live key comes once, and a cursor the node does not
    /// know (or a malformed one) is refused, as under the lock.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn scan_over_a_store_resumes_from_its_cursor_and_refuses_unknown_ones() {
        let (node, _faults, now) = counted_node().await;
        let mut c = client();
        let mut seen = Vec::new();
        let mut cursor = "0".to_string();
        for _ in 0..10 {
            let reply = request(&node, &mut c, &["scan", &cursor, "count", "2"], now).await;
            let Frame::Array(parts) = reply else {
                panic!("SCAN's reply: {reply:?}");
            };
            let [Frame::Bulk(next), Frame::Array(keys)] = &parts[..] else {
                panic!("SCAN's reply: {parts:?}");
            };
            seen.extend(keys.iter().cloned());
            cursor = String::from_utf8_lossy(next).into_owned();
            if cursor == "0" {
                break;
            }
        }
        assert_eq!(cursor, "0", "the scan ends");
        let live: Vec<Frame> = ["a", "b", "hot", "later"]
            .iter()
            .map(|k| Frame::Bulk(Bytes::from_static(k.as_bytes())))
            .collect();
        assert_eq!(seen, live, "the live keys once each, in key order");
        for bad in ["987654", "x"] {
            assert_eq!(
                request(&node, &mut c, &["scan", bad], now).await,
                Frame::error("ERR invalid cursor"),
                "{bad}"
            );
        }
    }

    /// The bug: over a store, KEYS walked every key of it with the keyspace locked. Now off it,
    /// in one snapshot, with the same keys.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn keys_over_a_store_leaves_the_keyspace_to_other_clients() {
        assert_eq!(walk_held(&["keys", "*"]).await, live_keys());
    }

    /// Two committers' batches that write one key reach the store in the order they were
    /// taken, the newer value last, even when the second committer reaches the writer first (it
    /// writes the first's batch too), or waits while the first's write is held.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_committers_batches_land_in_sequence_order_when_the_second_reaches_the_writer_first()
     {
        use pliant_store::OpKind;
        let (node, faults, store) = faulty_node();
        let log = node.log.clone().expect("a store log");
        // A value without an expiry is stored after a 0 flag byte.
        let stored = |key: &[u8]| {
            store
                .get(key)
                .expect("get")
                .map(|raw| Bytes::copy_from_slice(raw.strip_prefix(&[0]).expect("no expiry")))
        };

        set(&node, "k", "first").expect("set");
        let first = node.keyspace().queue_pending().expect("queued");
        set(&node, "k", "second").expect("set");
        let second = node.keyspace().queue_pending().expect("queued");
        assert!(first < second);
        log.write_through_async(second).await.expect("written");
        assert_eq!(faults.writes(), 1, "both batches in one store write");
        log.write_through_async(first)
            .await
            .expect("already written by the second committer");
        assert_eq!(faults.writes(), 1, "nothing left to write");
        assert_eq!(stored(b"k"), Some(Bytes::from_static(b"second")));

        // The first committer's write is held; the second queues behind it and must not pass.
        set(&node, "k", "third").expect("set");
        let stall = faults.stall(OpKind::Write);
        let third = commit(&node);
        assert!(tokio::task::block_in_place(
            || stall.wait_held(Duration::from_secs(10))
        ));
        set(&node, "k", "fourth").expect("set");
        let fourth = commit(&node);
        let start = std::time::Instant::now();
        while node.keyspace().has_pending() && start.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(!node.keyspace().has_pending(), "the second batch is queued");
        assert_eq!(get(&node, "k"), Some(Bytes::from_static(b"fourth")));
        stall.release();
        ended(third).await.expect("committed");
        ended(fourth).await.expect("committed");
        assert_eq!(stored(b"k"), Some(Bytes::from_static(b"fourth")));
    }

    /// A failed store write: the committer whose batch it held gets the error (the server then
    /// closes its connection without replies: nothing is acknowledged), so does a committer
    /// whose batch was queued behind it (never written), neither batch's keys are ever served
    /// again, and every later write is refused.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_store_write_is_never_served_refuses_later_writes_and_acknowledges_nobody() {
        use pliant_store::OpKind;
        let (node, faults, _store) = faulty_node();
        set(&node, "a", "1").expect("set");
        ended(commit(&node)).await.expect("committed");

        set(&node, "c", "3").expect("set");
        let stall = faults.stall(OpKind::Write);
        faults.fail_write(1);
        let failing = commit(&node);
        assert!(tokio::task::block_in_place(
            || stall.wait_held(Duration::from_secs(10))
        ));
        set(&node, "d", "4").expect("set");
        let behind = commit(&node);
        let start = std::time::Instant::now();
        while node.keyspace().has_pending() && start.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(!node.keyspace().has_pending(), "the second batch is queued");
        stall.release();
        for (name, c) in [("failed", failing), ("queued behind it", behind)] {
            let e = ended(c).await.expect_err("not acknowledged");
            assert!(matches!(e, KvError::Failed(_)), "{name}: {e:?}");
        }
        assert_eq!(
            get(&node, "c"),
            None,
            "a failed batch's key is never served"
        );
        assert_eq!(get(&node, "d"), None, "nor a refused batch's");
        assert_eq!(get(&node, "a"), Some(Bytes::from_static(b"1")));
        assert!(matches!(set(&node, "e", "5"), Err(KvError::Failed(_))));
        assert!(matches!(
            ended(commit(&node)).await,
            Err(KvError::Failed(_))
        ));
        assert_eq!(
            faults.writes(),
            2,
            "the refused batch never reached the store"
        );
    }
}
