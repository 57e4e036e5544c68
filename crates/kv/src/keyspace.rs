//! The keyspace of one node: a memory tier whose order and capacity come from a `pliant-cache`
//! algorithm, over an optional persistent store that holds every key, or over a parent node.
//!
//! With a store, the store is the truth and memory a cache of it: writes go to the store first
//! (write-through), a read that misses in memory is read from the store and kept in memory
//! (read-through, as a ParSplice tier keeps what it fetched), and eviction drops values from
//! memory only. Without a store (`--no-store`) memory is all there is, and an evicted key is gone,
//! as in a Redis run with `maxmemory` and no persistence.
//!
//! Over a parent (`--parent`, a cache tier) the parent is the truth and this node a cache of it,
//! with ParSplice's rules as `pliant-tier`'s [`Tier`] states them: a read that misses goes up once
//! however many readers want the key ([`Keyspace::want`]: the others join the fetch under way),
//! the tier keeps what it fetched ([`Keyspace::fetched`]), a put of a key held with the same value
//! goes no further ([`Keyspace::put_redundant`]). The keyspace does no I/O for it: the node's
//! connection to its parent ([`crate::upstream`]) fetches, and hands the values of the command
//! being run to it as a loan ([`Keyspace::lend`]), so a command sees what was fetched for it even
//! if memory is too small to hold it all.
//!
//! Expiry is lazy: an expired key is deleted when it is next touched, and never returned. Keys
//! with an expiry that memory holds are also swept once a second ([`Keyspace::expire_sweep`],
//! a bounded walk), so a pure cache does not keep expired keys in its capacity (and its key
//! count) until something reads them; keys only the store holds wait for their next touch.
//! Times are unix milliseconds passed in by the caller, so tests choose the clock.
//!
//! On a cluster node the keyspace also indexes every key it holds by hash slot (`slots`), kept
//! in step where a key comes or goes: with a store where a write enters `pending` (set, delete,
//! expiry, flush, a failed batch), without one where memory gains or loses an entry (set,
//! delete, expiry, eviction, rebuild, a tier's fetches, puts and invalidations).
//!
//! In the store, a value is one flag byte (0: no expiry; 1: an expiry follows as a big-endian
//! `u64` of unix milliseconds) and the value's bytes.

use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;
use pliant_cache::{Cache, Capacity, Evicted, Request};
use pliant_store::{SharedBytes, Store, StoreError};
use pliant_tier::{Auto, AutoState, CacheView, InFlight, Read, Tier};

mod slots;
mod store_log;
mod store_reads;
pub(crate) use store_log::StoreLog;
pub use store_reads::{Joined, Reading, StoreWant};

use crate::upstream::UpstreamError;
use slots::SlotIndex;
pub(crate) use slots::parse_token;
use store_log::Writes;

/// Why a keyspace operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KvError {
    /// The persistent store failed; the operation had no effect on memory.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// A value in the store does not decode (written by something else, or damaged).
    #[error("store value of key {key:?} is corrupt: {why}")]
    Corrupt {
        /// The key, lossily as text.
        key: String,
        /// What was wrong.
        why: &'static str,
    },
    /// The cache algorithm could not be built.
    #[error(transparent)]
    Algorithm(#[from] pliant_cache::AlgorithmError),
    /// A pure cache (no store, no parent) whose byte capacity is smaller than the entry a write
    /// would make: it could hold it nowhere, so the write is refused (Redis's `-OOM`) rather
    /// than acknowledged and dropped.
    #[error("OOM command not allowed when used memory > 'maxmemory'.")]
    OutOfMemory,
    /// A key or value larger than the store takes: the write is refused before it reaches the
    /// store, whose refusal of the batch would refuse every write after it.
    #[error("ERR {what} is too long for the store: {len} bytes, at most {max}")]
    TooLarge {
        /// "key" or "value".
        what: &'static str,
        /// Its length (a value's with its expiry's encoding).
        len: usize,
        /// The store's limit.
        max: usize,
    },
    /// A commit to the store failed (this one or an earlier one); writes are refused from then
    /// on, since what is in memory could no longer be told durable. The source is the store's
    /// error, the first commit's, shared by every refusal after it.
    #[error("writes are refused until the node is restarted, since the store failed")]
    Failed(#[source] Arc<StoreError>),
    /// The fsync that was to make committed writes durable failed: none of the writes it
    /// covered may be acknowledged (the next fsync tries again).
    #[error("store sync failed")]
    Unsynced(#[source] Arc<StoreError>),
}

/// A value and when it expires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Value {
    /// The bytes.
    pub data: Bytes,
    /// Unix milliseconds after which the key no longer exists; `None`: never.
    pub expires_at: Option<u64>,
}

impl Value {
    /// A value that never expires.
    pub fn new(data: impl Into<Bytes>) -> Self {
        Self {
            data: data.into(),
            expires_at: None,
        }
    }

    fn live(&self, now: u64) -> bool {
        self.expires_at.is_none_or(|t| t > now)
    }

    /// The store's encoding: a flag byte, the expiry if any, the data.
    #[cfg(test)]
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEAD + self.data.len());
        self.encode_into(&mut out);
        out
    }

    /// [`encode`](Self::encode), assembled in `scratch` and copied out once, shared: the batch
    /// that writes it to the store takes no copy of its own (see `store_log`).
    fn encode_shared(&self, scratch: &mut Vec<u8>) -> SharedBytes {
        scratch.clear();
        self.encode_into(scratch);
        let shared = SharedBytes::from(&scratch[..]);
        if scratch.capacity() > SCRATCH_KEPT {
            *scratch = Vec::new();
        }
        shared
    }

    fn encode_into(&self, out: &mut Vec<u8>) {
        match self.expires_at {
            None => out.push(0),
            Some(t) => {
                out.push(1);
                out.extend_from_slice(&t.to_be_bytes());
            }
        }
        out.extend_from_slice(&self.data);
    }

    fn decode(key: &[u8], raw: Vec<u8>) -> Result<Self, KvError> {
        let corrupt = |why| KvError::Corrupt {
            key: String::from_utf8_lossy(key).into_owned(),
            why,
        };
        match raw.first() {
            Some(0) => Ok(Self {
                data: Bytes::from(raw).slice(1..),
                expires_at: None,
            }),
            Some(1) => match encoded_expiry(&raw) {
                Some(t) => Ok(Self {
                    data: Bytes::from(raw).slice(HEAD..),
                    expires_at: Some(t),
                }),
                None => Err(corrupt("expiry cut short")),
            },
            Some(_) => Err(corrupt("unknown flag byte")),
            None => Err(corrupt("empty")),
        }
    }
}

/// The longest header of the store's encoding of a value: its flag byte and an expiry.
const HEAD: usize = 9;

/// The expiry of a value in the store's encoding, if it has one, whole.
fn encoded_expiry(raw: &[u8]) -> Option<u64> {
    match raw {
        [1, t @ ..] => Some(u64::from_be_bytes(t.get(..8)?.try_into().ok()?)),
        _ => None,
    }
}

/// Counters of one keyspace (what `INFO` and `PLIANT.STATS` report).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct KvStats {
    /// Reads of keys that exist (Redis's `keyspace_hits`).
    pub keyspace_hits: u64,
    /// Reads of keys that do not (Redis's `keyspace_misses`).
    pub keyspace_misses: u64,
    /// Reads the memory tier served.
    pub hits: u64,
    /// Reads the memory tier did not hold (served by the store, or not found).
    pub misses: u64,
    /// Bytes of the memory tier's hits (key and value).
    pub hit_bytes: u64,
    /// Bytes of the memory tier's misses that the store served.
    pub miss_bytes: u64,
    /// Keys the memory tier evicted (with a store, they remain there).
    pub evictions: u64,
    /// Keys deleted because they had expired.
    pub expired: u64,
    /// Reads of the store.
    pub store_reads: u64,
    /// Of them, those read before their command ran, with the keyspace unlocked (see
    /// `store_reads`'s module doc: while the store's reads cost more than leaving the lock).
    pub store_reads_off_lock: u64,
    /// Commands that waited for another's read of their key off the lock instead of reading it.
    pub store_reads_joined: u64,
    /// Writes (puts and deletes) to the store.
    pub store_writes: u64,
    /// Syncs of the store.
    pub store_syncs: u64,
    /// Values written (SET and every command that stores a value).
    pub writes: u64,
    /// Reads sent to the parent (a tier's misses that went up; coalesced ones count once).
    pub parent_requests: u64,
    /// Reads that joined a fetch of their key already on its way up.
    pub coalesced: u64,
    /// Puts of a key held with the same value, which went no further.
    pub redundant_puts: u64,
    /// Keys dropped from memory because the parent said they changed.
    pub invalidated: u64,
}

/// What the parent said a key holds: its value, nothing, or why it could not be asked (shared
/// by every reader that joined the fetch).
pub type Fetched = Result<Option<Value>, Arc<UpstreamError>>;

/// A fetch from the parent under way: the readers of its key wait on it ([`Keyspace::want`]).
#[derive(Debug, Clone)]
pub struct Fetch(tokio::sync::watch::Receiver<Option<Fetched>>);

impl Fetch {
    /// Waits for the fetch to end.
    pub async fn wait(mut self) -> Fetched {
        match self.0.wait_for(Option::is_some).await {
            Ok(v) => v
                .clone()
                .unwrap_or_else(|| Err(Arc::new(UpstreamError::Abandoned))),
            Err(_) => Err(Arc::new(UpstreamError::Abandoned)),
        }
    }
}

impl InFlight for Fetch {
    /// Under way until the fetcher reports ([`Keyspace::fetched`] finishes it in the tier first),
    /// or goes away without reporting (its request never sent, its connection lost): the next
    /// reader then fetches again rather than join a fetch that will never end.
    fn under_way(&self, _now: f64) -> bool {
        self.0.borrow().is_none() && self.0.has_changed().is_ok()
    }
}

/// Where a read of a key stands before a command runs on a tier ([`Keyspace::want`]).
#[derive(Debug)]
pub enum Want {
    /// Memory holds it (or a value was lent for it): run the command.
    Ready,
    /// Another reader's fetch of it is under way: wait for that.
    Join(Fetch),
    /// Nobody is fetching it: ask the parent, then report with [`Keyspace::fetched`] and `done`.
    Fetch(FetchDone),
}

/// The fetcher's side of a [`Fetch`]: what wakes the readers that joined it.
#[derive(Debug)]
pub struct FetchDone(tokio::sync::watch::Sender<Option<Fetched>>);

impl FetchDone {
    /// Wakes the readers that joined the fetch.
    pub fn done(self, v: &Fetched) {
        self.0.send_replace(Some(v.clone()));
    }
}

/// Values fetched from the parent for the command being run (a `None`: the parent has no such
/// key), by key.
pub type Lent = std::collections::HashMap<Bytes, Option<Value>, foldhash::fast::FixedState>;

/// Reads kept for a policy's `timeseries()` between two decisions; past this many, reads are not
/// recorded until the policy takes them (a decision every few seconds takes them long before).
pub const MAX_RECORDED_READS: usize = 1 << 20;

/// A key and its value in memory: one allocation holding a header (the key's length and whether
/// an expiry follows, as one LEB128 number: one byte for keys under 64 bytes), the key's bytes,
/// the value's, and the expiry's (8, little-endian) if it has one. The slot itself is one
/// pointer and a length, 16 bytes, and `None` costs nothing more.
#[derive(Debug)]
struct Slot {
    data: Box<[u8]>,
}

impl Slot {
    fn new(key: &[u8], v: &Value) -> Self {
        let expiry = v.expires_at.map(|t| t.max(1).to_le_bytes());
        let mut header = ((key.len() as u64) << 1) | u64::from(expiry.is_some());
        // Exactly the bytes needed, so turning the vector into a box does not reallocate.
        let header_len = (64 - (header | 1).leading_zeros()).div_ceil(7) as usize;
        let mut data = Vec::with_capacity(
            header_len + key.len() + v.data.len() + expiry.map_or(0, |e| e.len()),
        );
        loop {
            let byte = (header & 0x7f) as u8;
            header >>= 7;
            if header == 0 {
                data.push(byte);
                break;
            }
            data.push(byte | 0x80);
        }
        data.extend_from_slice(key);
        data.extend_from_slice(&v.data);
        if let Some(e) = expiry {
            data.extend_from_slice(&e);
        }
        debug_assert_eq!(data.len(), data.capacity());
        Self {
            data: data.into_boxed_slice(),
        }
    }

    /// Where the key starts, the key's length, and whether an expiry ends the bytes.
    fn header(&self) -> (usize, usize, bool) {
        let (mut n, mut shift, mut i) = (0u64, 0, 0);
        while let Some(&b) = self.data.get(i) {
            n |= u64::from(b & 0x7f) << shift;
            i += 1;
            if b & 0x80 == 0 {
                break;
            }
            shift += 7;
        }
        (i, (n >> 1) as usize, n & 1 == 1)
    }

    fn key(&self) -> &[u8] {
        let (start, len, _) = self.header();
        &self.data[start..start + len]
    }

    /// The value's bytes.
    fn bytes(&self) -> &[u8] {
        let (start, len, expires) = self.header();
        let end = self.data.len() - if expires { 8 } else { 0 };
        &self.data[start + len..end]
    }

    /// Unix milliseconds, if it expires.
    fn expires_at(&self) -> Option<u64> {
        self.header().2.then(|| {
            let mut t = [0; 8];
            t.copy_from_slice(&self.data[self.data.len() - 8..]);
            u64::from_le_bytes(t)
        })
    }

    fn live(&self, now: u64) -> bool {
        self.expires_at().is_none_or(|t| t > now)
    }

    /// The value, copied out (the copy is what a reply sends).
    fn value(&self) -> Value {
        Value {
            data: Bytes::copy_from_slice(self.bytes()),
            expires_at: self.expires_at(),
        }
    }

    /// Whether it holds `data` with expiry `expires_at` (unix ms; 0: none) and is live at `now`.
    fn unchanged(&self, data: &[u8], expires_at: u64, now: u64) -> bool {
        self.live(now) && self.bytes() == data && self.expires_at().unwrap_or(0) == expires_at
    }

    /// Key and value bytes, as a byte capacity counts them.
    fn size(&self) -> u32 {
        u32::try_from(self.key().len() + self.bytes().len()).unwrap_or(u32::MAX)
    }
}

/// What one walk of the whole store counts, at one time: `DBSIZE`'s keys, `INFO keyspace`'s.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreCounts {
    /// Every key, those expired and not yet deleted included (`DBSIZE`, as Redis counts).
    pub all: u64,
    /// The keys not expired (`INFO keyspace`'s `keys`).
    pub live: u64,
    /// Of those, the ones with an expiry (`expires`).
    pub expires: u64,
    /// Their mean time to live, ms (`avg_ttl`); 0 without any.
    pub avg_ttl: u64,
}

/// Walks every key of `store` (O(keys)) and counts them as of `now` (Unix ms). Holds no lock:
/// the node runs it on the blocking pool with the keyspace unlocked once what is pending is in
/// the store (a store iterator is a consistent snapshot); [`Keyspace::len`] and
/// [`Keyspace::expiry_counts`] run it under the lock where the caller cannot.
pub fn count_store(store: &dyn Store, now: u64) -> Result<StoreCounts, KvError> {
    count_store_over(store, &Writes::default(), now)
}

/// [`count_store`] with the writes `over` (key → encoded value, `None` a deletion) laid over the
/// store: what it would count once they were written.
fn count_store_over(store: &dyn Store, over: &Writes, now: u64) -> Result<StoreCounts, KvError> {
    let mut t = Tally::default();
    for entry in store.range((Bound::Unbounded, Bound::Unbounded)) {
        let (_, raw) = entry?;
        t.count(&raw, now, 1);
    }
    for (k, v) in over {
        if let Some(old) = store.get(k)? {
            t.count(&old, now, -1);
        }
        if let Some(v) = v {
            t.count(v, now, 1);
        }
    }
    Ok(t.counts())
}

/// Running sums of [`StoreCounts`]; a key counts in (`sign` 1) or out (-1).
#[derive(Default)]
struct Tally {
    all: i128,
    live: i128,
    expires: i128,
    ttl_sum: i128,
}

impl Tally {
    fn count(&mut self, raw: &[u8], now: u64, sign: i128) {
        self.all += sign;
        match encoded_expiry(raw) {
            None => self.live += sign,
            Some(t) if t > now => {
                self.live += sign;
                self.expires += sign;
                self.ttl_sum += sign * i128::from(t - now);
            }
            Some(_) => {}
        }
    }

    fn counts(&self) -> StoreCounts {
        let n = |x: i128| u64::try_from(x.max(0)).unwrap_or(u64::MAX);
        StoreCounts {
            all: n(self.all),
            live: n(self.live),
            expires: n(self.expires),
            avg_ttl: if self.expires > 0 {
                n(self.ttl_sum / self.expires)
            } else {
                0
            },
        }
    }
}

/// [`Keyspace::scan`] over a store: up to `count` live keys of `store` that satisfy `filter`, in
/// key order after `after`, and the last key examined if it stopped early. Examines at most
/// `count * 10 + 100` keys (`usize::MAX`: every key, in one snapshot, as KEYS walks). Holds no
/// lock: the node runs it on the blocking pool once what is pending is in the store.
pub fn scan_store(
    store: &dyn Store,
    after: Option<&[u8]>,
    count: usize,
    now: u64,
    filter: &dyn Fn(&[u8]) -> bool,
) -> Result<(Vec<Bytes>, Option<Bytes>), KvError> {
    scan_store_over(store, &Writes::default(), after, count, now, filter)
}

/// [`scan_store`] with the writes `over` (key → encoded value, `None` a deletion) laid over the
/// store, in key order with it: what it would find once they were written.
fn scan_store_over(
    store: &dyn Store,
    over: &Writes,
    after: Option<&[u8]>,
    count: usize,
    now: u64,
    filter: &dyn Fn(&[u8]) -> bool,
) -> Result<(Vec<Bytes>, Option<Bytes>), KvError> {
    let budget = count.saturating_mul(10).saturating_add(100);
    let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
    let mut laid: Vec<(&[u8], Option<&[u8]>)> = over
        .iter()
        .filter(|(k, _)| after.is_none_or(|a| k.as_ref() > a))
        .map(|(k, v)| (k.as_ref(), v.as_deref()))
        .collect();
    laid.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut laid = laid.into_iter().peekable();
    let mut stored = store.range((lower, Bound::Unbounded)).peekable();
    let mut found = Vec::new();
    let mut examined = 0usize;
    loop {
        // The next key of either, the pending write winning over the store's value.
        let order = match (stored.peek(), laid.peek()) {
            (None, None) => return Ok((found, None)),
            (Some(Err(_)), _) | (Some(Ok(_)), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (Some(Ok((sk, _))), Some((lk, _))) => sk.as_slice().cmp(lk),
        };
        let (k, raw) = if order == std::cmp::Ordering::Less {
            match stored.next() {
                Some(entry) => {
                    let (k, raw) = entry?;
                    (k, Some(raw))
                }
                None => return Ok((found, None)),
            }
        } else {
            if order == std::cmp::Ordering::Equal {
                stored.next();
            }
            match laid.next() {
                Some((k, v)) => (k.to_vec(), v.map(<[u8]>::to_vec)),
                None => return Ok((found, None)),
            }
        };
        examined += 1;
        let k = Bytes::from(k);
        if let Some(raw) = raw
            && Value::decode(&k, raw)?.live(now)
            && filter(&k)
        {
            found.push(k.clone());
        }
        if found.len() >= count || examined >= budget {
            return Ok((found, Some(k)));
        }
    }
}

/// Keys a walk of slots found, and the token to go on from (`None`: the walk is over): what
/// [`Keyspace::slot_keys`] gives.
pub type SlotWalk = (Vec<Bytes>, Option<Bytes>);

/// The largest encoding buffer a keyspace keeps between writes: a huge value's does not stay.
const SCRATCH_KEPT: usize = 1 << 20;

/// One node's keys (see the module doc).
pub struct Keyspace {
    /// The memory tier's keys and values, by the slot their key holds in the algorithm
    /// ([`pliant_cache::Cache::slot`]): the algorithm's index is the only one a key is hashed
    /// into, an eviction says which slot to empty, and SCAN without a store walks slots in order
    /// (a key keeps its slot while it stays, so a scan returns it once; a key set again with a
    /// value of another size is put anew and may move, as with a byte capacity under pressure).
    mem: Vec<Option<Slot>>,
    /// Slots that hold a value.
    held: u64,
    /// Of them, those whose value has an expiry, and the sum of their expiry times (unix ms):
    /// `INFO keyspace`'s `expires` and `avg_ttl` without a walk, for a node without a store.
    expiring: u64,
    expiry_sum: u128,
    /// Where the next [`expire_sweep`](Self::expire_sweep) walks memory from.
    sweep_at: usize,
    /// The memory tier's algorithm, the fetches from the parent under way and the tier's rules.
    tier: Tier<Fetch>,
    algo: String,
    store: Option<Arc<dyn Store>>,
    /// Whether a parent holds every key (a cache tier): memory misses are fetched from it.
    parent: bool,
    /// Values fetched for the command being run ([`Keyspace::lend`]); empty otherwise.
    lent: Lent,
    /// Whether a command on a tier looked for a key neither memory nor the loan had (it left
    /// memory between the fetch and the command): the caller runs it again.
    unready: bool,
    /// Store writes not yet committed (`None`: a deletion), newest per key: a pipeline's writes,
    /// and those of every client served meanwhile, go to the store as one batch ([`commit`]).
    ///
    /// [`commit`]: Keyspace::commit
    pending: store_log::Writes,
    /// Where a value is encoded for the store before it is copied out once (`encode_shared`).
    scratch: Vec<u8>,
    /// The batches taken from `pending` on their way to the store, the count of those written,
    /// and the first failure (see [`store_log`]); shared with the node, which writes them off
    /// the lock. `None` without a store.
    log: Option<Arc<StoreLog>>,
    /// Store reads done off the lock for the commands about to run, and those under way.
    off_lock: store_reads::StoreReads,
    /// How long the store read behind the latest loan took (`auto` prices the miss with it).
    loan_waited: Option<f64>,
    stats: KvStats,
    /// `(unix seconds, key id)` of reads since a policy last took them; `None` when no policy
    /// asks for them.
    reads: Option<Vec<(f64, f64)>>,
    /// `auto`, when it is the node's policy: fed every read, put and store or parent wait as
    /// they happen (under the lock the command holds anyway), so it sees them in order.
    auto: Option<LiveAuto>,
    /// The latest time a command ran at (unix milliseconds): when a put happened, for `auto`.
    clock: u64,
    ids_hasher: foldhash::fast::FixedState,
    /// Every key by its cluster slot, once built ([`index_slots`](Self::index_slots)): with a
    /// store, kept in step with `pending` (every key the store will hold); without one, with
    /// `mem` (see `slots`).
    slots: Option<Box<SlotIndex>>,
}

/// `auto` on a live node: its clock counts seconds from `epoch` (unix milliseconds), since it
/// indexes keys by the second of their last access.
#[derive(Debug)]
struct LiveAuto {
    epoch: u64,
    auto: Box<Auto>,
}

impl LiveAuto {
    fn t(&self, now: u64) -> f64 {
        now.saturating_sub(self.epoch) as f64 / 1000.0
    }
}

impl std::fmt::Debug for Keyspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyspace")
            .field("keys_in_memory", &self.held)
            .field("algorithm", &self.algo)
            .field("capacity", &self.capacity())
            .field("store", &self.store.is_some())
            .finish()
    }
}

impl Keyspace {
    /// An empty memory tier of `capacity` ordered by the algorithm `algo` (a `pliant-cache`
    /// spec, `lru` or `s3fifo:small=0.2`), over `store` if there is one.
    pub fn new(
        algo: &str,
        capacity: Capacity,
        store: Option<Arc<dyn Store>>,
    ) -> Result<Self, KvError> {
        let cache = Cache::new(pliant_cache::build(algo, capacity)?, capacity);
        Ok(Self {
            mem: Vec::new(),
            held: 0,
            expiring: 0,
            expiry_sum: 0,
            sweep_at: 0,
            tier: Tier::new(cache),
            algo: algo.to_string(),
            log: store.clone().map(|s| Arc::new(StoreLog::new(s))),
            store,
            parent: false,
            lent: Lent::default(),
            unready: false,
            pending: Default::default(),
            scratch: Vec::new(),
            off_lock: store_reads::StoreReads::default(),
            loan_waited: None,
            stats: KvStats::default(),
            reads: None,
            auto: None,
            clock: 0,
            ids_hasher: foldhash::fast::FixedState::with_seed(11),
            slots: None,
        })
    }

    /// An empty memory tier of `capacity` ordered by `algo`, caching a parent that holds every
    /// key (see the module doc).
    pub fn over_parent(algo: &str, capacity: Capacity) -> Result<Self, KvError> {
        let mut ks = Self::new(algo, capacity, None)?;
        ks.parent = true;
        Ok(ks)
    }

    /// Whether this keyspace caches a parent.
    pub fn has_parent(&self) -> bool {
        self.parent
    }

    /// The counters.
    pub fn stats(&self) -> KvStats {
        KvStats {
            coalesced: self.tier.counters().joined,
            store_syncs: self.log.as_ref().map_or(0, |l| l.syncs()),
            ..self.stats
        }
    }

    /// The memory tier's algorithm spec.
    pub fn algorithm(&self) -> &str {
        &self.algo
    }

    /// The memory tier's capacity.
    pub fn capacity(&self) -> Capacity {
        self.cache().capacity()
    }

    /// Keys and bytes (keys plus values) the memory tier holds.
    pub fn memory(&self) -> (u64, u64) {
        let s = self.tier.stats();
        (s.keys, s.bytes)
    }

    /// Whether a persistent store is below memory.
    pub fn has_store(&self) -> bool {
        self.store.is_some()
    }

    /// Changes the memory tier's capacity; a smaller one evicts at once in the algorithm's order.
    /// Fails if the units differ (a key capacity cannot become a byte one).
    pub fn resize(&mut self, capacity: Capacity) -> Result<(), String> {
        if capacity.units() != self.capacity().units() {
            return Err(format!(
                "the capacity counts {}; it cannot become {capacity}",
                match self.capacity() {
                    Capacity::Keys(_) => "keys",
                    Capacity::Bytes(_) => "bytes",
                }
            ));
        }
        let mut gone = Vec::new();
        self.tier
            .cache_mut()
            .resize_evicting(capacity, &mut |e: Evicted| gone.push(e));
        self.drop_evicted(gone);
        Ok(())
    }

    /// Orders the memory tier by another algorithm, of `capacity` (which may count other units
    /// than the current one): `CONFIG SET maxmemory-policy`, or a `maxmemory` in bytes on a
    /// tier that counted keys. The new algorithm is built empty and every key memory holds
    /// enters it anew, in the order of their slots: it starts without the old one's history
    /// (recency, frequencies, ghosts), as after a restart with memory warm. Keys that no longer
    /// fit are evicted as a resize evicts them. Refused while fetches from a parent are under
    /// way, since they belong to the old order.
    pub fn rebuild(&mut self, algo: &str, capacity: Capacity) -> Result<(), String> {
        if let Some(a) = pliant_cache::algorithm(algo).filter(|a| a.needs_next_access) {
            return Err(crate::config::offline_refused(a.name));
        }
        if self.fetches_under_way() > 0 {
            return Err("fetches from the parent are under way; try again".into());
        }
        let built = pliant_cache::build(algo, capacity).map_err(|e| e.to_string())?;
        let old = std::mem::take(&mut self.mem);
        if self.store.is_none()
            && let Some(ix) = &mut self.slots
        {
            // Memory is every key: those the new order keeps come back as they are placed.
            ix.clear();
        }
        self.held = 0;
        (self.expiring, self.expiry_sum) = (0, 0);
        self.tier = Tier::new(Cache::new(built, capacity));
        self.algo = algo.to_string();
        for slot in old.into_iter().flatten() {
            let key = slot.key().to_vec();
            let v = slot.value();
            self.keep(&key, v);
        }
        Ok(())
    }

    /// Starts (or stops) recording reads for a policy's `timeseries()`.
    pub fn record_reads(&mut self, on: bool) {
        self.reads = on.then(Vec::new);
    }

    /// The reads recorded since the last call, as `(unix seconds, key id)`: a key's id is a
    /// 53-bit hash of its bytes, exact as a Lua number.
    pub fn take_reads(&mut self) -> Vec<(f64, f64)> {
        self.reads.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// The time of the command about to run (unix milliseconds): what a put's time is for
    /// `auto`.
    #[inline]
    pub fn tick(&mut self, now: u64) {
        self.clock = self.clock.max(now);
    }

    /// Makes `auto` see every read, put and wait from `now` on (its clock starts there), until
    /// [`stop_auto`](Self::stop_auto); it replaces any `auto` running, which starts learning
    /// afresh.
    pub fn start_auto(&mut self, auto: Auto, now: u64) {
        self.auto = Some(LiveAuto {
            epoch: now,
            auto: Box::new(auto),
        });
    }

    /// Stops feeding `auto` and forgets it.
    pub fn stop_auto(&mut self) {
        self.auto = None;
    }

    /// What `auto` has decided so far, if it runs and has armed.
    pub fn auto_state(&self) -> Option<AutoState> {
        self.auto.as_ref().and_then(|a| a.auto.state())
    }

    /// The quick first step of a decision of `auto` over `view` (its `t` is set here, on
    /// `auto`'s clock): the view as `auto` saw it, and the fit its gate asks for, which the
    /// caller runs without holding the keyspace (a k-means can take a while, and readers wait on
    /// the lock), then hands to [`auto_finish`](Self::auto_finish).
    pub fn auto_begin(
        &mut self,
        mut view: CacheView,
        now: u64,
    ) -> Option<(CacheView, Option<pliant_tier::Fit>)> {
        let a = self.auto.as_mut()?;
        view.t = a.t(now);
        let fit = a.auto.begin(&view);
        Some((view, fit))
    }

    /// The rest of `auto`'s decision: once armed, memory is trimmed to the keys read or put
    /// within its window, in the algorithm's order, and takes new keys until the next decision
    /// ([`pliant_tier::Resize::Trim`]). Returns the key count trimmed to, if memory held more.
    pub fn auto_finish(
        &mut self,
        view: &CacheView,
        fitted: Option<pliant_tier::Fitted>,
    ) -> Option<u64> {
        let a = self.auto.as_mut()?;
        let target = a.auto.finish(view, fitted)?;
        let (keys, _) = self.memory();
        (keys > target).then(|| {
            self.trim(target);
            target
        })
    }

    /// A read that waited `seconds` for its value from the parent, a fetch it started
    /// (`fetched`) or joined: `auto` prices misses with it. It belongs to the latest read.
    pub fn auto_wait(&mut self, seconds: f64, fetched: bool) {
        if let Some(a) = &mut self.auto {
            a.auto.on_wait(seconds, fetched);
        }
    }

    /// Evicts, in the algorithm's order, until memory holds at most `keys` keys; the capacity
    /// stays (a byte capacity is trimmed to the bytes that many keys of the mean size take).
    pub fn trim(&mut self, keys: u64) {
        let (held, bytes) = self.memory();
        if held <= keys {
            return;
        }
        let capacity = self.capacity();
        let to = match capacity {
            Capacity::Keys(_) => Capacity::Keys(keys),
            Capacity::Bytes(_) => {
                Capacity::Bytes((u128::from(bytes) * u128::from(keys) / u128::from(held)) as u64)
            }
        };
        let mut gone = Vec::new();
        let cache = self.tier.cache_mut();
        cache.resize_evicting(to, &mut |e: Evicted| gone.push(e));
        cache.resize(capacity);
        self.drop_evicted(gone);
    }

    /// The value of `key`, if it exists.
    pub fn get(&mut self, key: &[u8], now: u64) -> Result<Option<Bytes>, KvError> {
        Ok(self.get_value(key, now)?.map(|v| v.data))
    }

    /// The value of `key` with its expiry, if it exists: a read, counted as [`get`](Self::get)
    /// counts it.
    pub fn get_value(&mut self, key: &[u8], now: u64) -> Result<Option<Value>, KvError> {
        let id = self.id_of(key);
        if let Some(reads) = &mut self.reads
            && reads.len() < MAX_RECORDED_READS
        {
            reads.push((now as f64 / 1000.0, (id >> 11) as f64));
        }
        let Some(a) = &mut self.auto else {
            return self.count_read(key, id, now);
        };
        a.auto.on_read(a.t(now), id);
        // A read the store served waited for it as a tier's miss waits for its parent: `auto`
        // prices misses with that wait.
        let (store_reads, started) = (self.stats.store_reads, std::time::Instant::now());
        self.loan_waited = None;
        let v = self.count_read(key, id, now);
        if self.stats.store_reads > store_reads {
            // Read off the lock before the command ran: the wait is that read's.
            let waited = self
                .loan_waited
                .take()
                .unwrap_or_else(|| started.elapsed().as_secs_f64());
            self.auto_wait(waited, true);
        }
        v
    }

    /// [`read_id`](Self::read_id), counted as a keyspace hit or miss.
    fn count_read(&mut self, key: &[u8], id: u64, now: u64) -> Result<Option<Value>, KvError> {
        let v = self.read_id(key, id, now)?;
        match &v {
            Some(_) => self.stats.keyspace_hits += 1,
            None => self.stats.keyspace_misses += 1,
        }
        Ok(v)
    }

    /// The whole value (with its expiry) of `key`, as reads see it: a memory hit, or fetched from
    /// the store and kept in memory. Not counted as a keyspace hit or miss (commands that only
    /// inspect a key, like TTL, are not reads in Redis's counters either).
    pub fn read(&mut self, key: &[u8], now: u64) -> Result<Option<Value>, KvError> {
        self.read_id(key, self.id_of(key), now)
    }

    /// [`read`](Self::read) of `key`, whose id is `id`.
    fn read_id(&mut self, key: &[u8], id: u64, now: u64) -> Result<Option<Value>, KvError> {
        if let Some(v) = self.lent.get(key) {
            // Fetched for this command: a miss, counted and kept when it was fetched.
            return Ok(v.clone().filter(|v| v.live(now)));
        }
        if let Some(slot) = self.slot(id, key) {
            let (size, live) = (slot.size(), slot.live(now));
            if !live {
                self.expire(key)?;
                return Ok(None);
            }
            let value = slot.value();
            let _ = self.tier.read(id, size, secs(now));
            self.stats.hits += 1;
            self.stats.hit_bytes += u64::from(size);
            return Ok(Some(value));
        }
        if self.parent {
            // Counted, and kept, when it was fetched (`want`, `fetched`): this is the loan.
            return Ok(self.lent_value(key).filter(|v| v.live(now)));
        }
        self.stats.misses += 1;
        let found = if self.store.is_some() {
            self.stats.store_reads += 1;
            self.stored(key, id, true)?
                .map(|raw| Value::decode(key, raw))
                .transpose()?
        } else {
            None
        };
        // The miss is an access of the key as the algorithm sees it: one that keeps ghosts
        // (S3-FIFO, ARC) learns of it, as in the simulator's `access`.
        let size = found.as_ref().map_or(0, |v| size_of(key, v));
        let _ = self.tier.read(id, size, secs(now));
        let Some(v) = found else {
            return Ok(None);
        };
        if !v.live(now) {
            self.expire(key)?;
            return Ok(None);
        }
        self.stats.miss_bytes += u64::from(size);
        self.keep(key, v.clone());
        Ok(Some(v))
    }

    /// The live value of `key` without counting a read, touching the memory tier's order or
    /// keeping a value read from the store (what a write needs to know of the value it replaces).
    pub fn peek(&mut self, key: &[u8], now: u64) -> Result<Option<Value>, KvError> {
        if let Some(slot) = self.slot(self.id_of(key), key) {
            return Ok(Some(slot.value()).filter(|v| v.live(now)));
        }
        if self.store.is_none() {
            return Ok(self.lent_value(key).filter(|v| v.live(now)));
        }
        self.stats.store_reads += 1;
        let raw = self.stored(key, self.id_of(key), false)?;
        match raw {
            None => Ok(None),
            Some(raw) => Ok(Some(Value::decode(key, raw)?).filter(|v| v.live(now))),
        }
    }

    /// Whether `key` holds `data` with expiry `expires_at` (unix ms; 0: none) and is live at
    /// `now`: what [`peek`](Self::peek) would answer compared, without copying the value out of
    /// memory (a slot move's source asks it of every key it sent, to delete what is unchanged).
    pub fn holds_unchanged(
        &mut self,
        key: &[u8],
        data: &[u8],
        expires_at: u64,
        now: u64,
    ) -> Result<bool, KvError> {
        if let Some(slot) = self.slot(self.id_of(key), key) {
            return Ok(slot.unchanged(data, expires_at, now));
        }
        Ok(self
            .peek(key, now)?
            .is_some_and(|v| v.data == data && v.expires_at.unwrap_or(0) == expires_at))
    }

    /// Deletes `key` if it holds `data` with expiry `expires_at` (unix ms; 0: none) and is live
    /// at `now`: [`holds_unchanged`](Self::holds_unchanged) then [`delete`](Self::delete), with
    /// one lookup of a key memory holds where those made three (a slot move's source does this
    /// for every key it sent). Whether it deleted the key.
    pub fn delete_if_unchanged(
        &mut self,
        key: &[u8],
        data: &[u8],
        expires_at: u64,
        now: u64,
    ) -> Result<bool, KvError> {
        let id = self.id_of(key);
        let unchanged = match self.slot(id, key) {
            Some(slot) => slot.unchanged(data, expires_at, now),
            // Only the store holds it (rare: a move's keys were just read out of memory).
            None => self.holds_unchanged(key, data, expires_at, now)?,
        };
        if unchanged {
            self.remove_id(key, id)?;
        }
        Ok(unchanged)
    }

    /// Sets `key` to `v`: in the store first (it is the truth), then in memory.
    pub fn set(&mut self, key: Bytes, v: Value) -> Result<(), KvError> {
        self.refused()?;
        if self.would_oom(u64::from(size_of(&key, &v))) {
            return Err(KvError::OutOfMemory);
        }
        if self.store.is_some() {
            // The store refuses a batch holding one key or value over its limits, and a refused
            // batch refuses every write after it (`store_log`): refused here, alone.
            if key.len() > pliant_store::MAX_KEY_LEN {
                return Err(KvError::TooLarge {
                    what: "key",
                    len: key.len(),
                    max: pliant_store::MAX_KEY_LEN,
                });
            }
            if v.data.len() + HEAD > pliant_store::MAX_VALUE_LEN {
                return Err(KvError::TooLarge {
                    what: "value",
                    len: v.data.len() + HEAD,
                    max: pliant_store::MAX_VALUE_LEN,
                });
            }
        }
        self.stats.writes += 1;
        if self.store.is_some() {
            let encoded = v.encode_shared(&mut self.scratch);
            self.pending.insert(key.as_ref().into(), Some(encoded));
            self.stats.store_writes += 1;
            self.off_lock.written(self.id_of(&key));
            if self.slots.is_some() {
                self.index_set(&key, &v);
            }
        }
        self.auto_put(&key);
        self.keep(&key, v);
        Ok(())
    }

    /// Whether a write of an entry of `bytes` (key and value) would find no place at all: a pure
    /// cache (no store, no parent) of a byte capacity below it. Anywhere else, memory evicts to
    /// make room or the store (the parent) holds what memory cannot.
    pub fn would_oom(&self, bytes: u64) -> bool {
        self.store.is_none()
            && !self.parent
            && matches!(self.capacity(), Capacity::Bytes(b) if bytes > b)
    }

    /// Deletes `key`; returns whether it existed (and had not expired).
    pub fn delete(&mut self, key: &[u8], now: u64) -> Result<bool, KvError> {
        let existed = self.exists(key, now)?;
        if existed {
            self.remove(key)?;
        }
        Ok(existed)
    }

    /// Whether `key` exists, without reading it into memory.
    pub fn exists(&mut self, key: &[u8], now: u64) -> Result<bool, KvError> {
        if let Some(slot) = self.slot(self.id_of(key), key) {
            if slot.live(now) {
                return Ok(true);
            }
            self.expire(key)?;
            return Ok(false);
        }
        if self.store.is_none() {
            return Ok(self.lent_value(key).is_some_and(|v| v.live(now)));
        }
        self.stats.store_reads += 1;
        let raw = self.stored(key, self.id_of(key), false)?;
        match raw {
            None => Ok(false),
            Some(raw) => {
                if Value::decode(key, raw)?.live(now) {
                    Ok(true)
                } else {
                    self.expire(key)?;
                    Ok(false)
                }
            }
        }
    }

    /// Up to `count` live keys that satisfy `filter`, after the position `after` (a token an
    /// earlier call returned; `None` to start), and the token to go on from (`None`: done).
    /// With a store the store is walked in key order (it holds every key) and a token is the last
    /// key; without one, memory in id order, and a token is the last id. Examines at most
    /// `count * 10 + 100` keys, so one call is bounded even when few keys match.
    pub fn scan(
        &mut self,
        after: Option<&[u8]>,
        count: usize,
        now: u64,
        filter: &dyn Fn(&[u8]) -> bool,
    ) -> Result<(Vec<Bytes>, Option<Bytes>), KvError> {
        self.walk_ready()?;
        if let Some(store) = &self.store {
            return scan_store_over(store.as_ref(), &self.pending, after, count, now, filter);
        }
        let budget = count.saturating_mul(10).saturating_add(100);
        let mut found = Vec::new();
        let mut examined = 0;
        let start = match after {
            None => 0,
            Some(t) => match <[u8; 8]>::try_from(t) {
                Ok(b) => usize::try_from(u64::from_be_bytes(b)).map_or(usize::MAX, |s| s + 1),
                Err(_) => return Ok((found, None)),
            },
        };
        for (i, slot) in self.mem.iter().enumerate().skip(start) {
            examined += 1;
            if let Some(slot) = slot
                && slot.live(now)
                && filter(slot.key())
            {
                found.push(Bytes::copy_from_slice(slot.key()));
            }
            if found.len() >= count || examined >= budget {
                return Ok((
                    found,
                    Some(Bytes::copy_from_slice(&(i as u64).to_be_bytes())),
                ));
            }
        }
        Ok((found, None))
    }

    /// Builds the slot index (see `slots`) if it is not built: one walk of the store, with the
    /// writes pending laid over it, or of memory without a store. From then on every path that
    /// adds or removes a key keeps it in step. A cluster node builds it when it starts.
    pub fn index_slots(&mut self) -> Result<(), KvError> {
        if self.slots.is_some() {
            return Ok(());
        }
        let ix = match self.store.clone() {
            Some(store) => {
                self.walk_ready()?;
                let pending = &self.pending;
                let mut failed = None;
                let walk = store
                    .range((Bound::Unbounded, Bound::Unbounded))
                    .map_while(|entry| {
                        let decoded = entry.map_err(KvError::from).and_then(|(k, raw)| {
                            let v = Value::decode(&k, raw)?;
                            Ok((size_of(&k, &v), v.expires_at, k))
                        });
                        match decoded {
                            Ok(e) => Some(e),
                            Err(e) => {
                                failed = Some(e);
                                None
                            }
                        }
                    })
                    .filter(|(_, _, k)| !pending.contains_key(k.as_slice()))
                    .map(|(size, at, k)| (k, size, at));
                let mut ix = SlotIndex::build(walk);
                if let Some(e) = failed {
                    return Err(e);
                }
                for (k, raw) in &self.pending {
                    if let Some(raw) = raw {
                        let v = Value::decode(k, raw.to_vec())?;
                        ix.insert(k, size_of(k, &v), v.expires_at);
                    }
                }
                ix
            }
            None => {
                let mut ix = SlotIndex::default();
                for slot in self.mem.iter().flatten() {
                    ix.insert(slot.key(), slot.size(), slot.expires_at());
                }
                ix
            }
        };
        self.slots = Some(Box::new(ix));
        Ok(())
    }

    /// Keys in the slot index, if it is built.
    pub fn indexed_keys(&self) -> Option<u64> {
        self.slots.as_ref().map(|ix| ix.len())
    }

    /// The slot index, built if it is not, with the keys of `slots` whose expiry has passed at
    /// `now` deleted (as reads of them would), so its counts are of live keys.
    fn slot_index(&mut self, slots: &[u16], now: u64) -> Result<&SlotIndex, KvError> {
        self.index_slots()?;
        for &s in slots {
            let gone = match &mut self.slots {
                Some(ix) => ix.expired(s, now),
                None => Vec::new(),
            };
            for k in gone {
                self.expire(&k)?;
            }
        }
        match &self.slots {
            Some(ix) => Ok(ix),
            None => unreachable!("built above"),
        }
    }

    /// Live keys at `now` of each of `slots` (`CLUSTER COUNTKEYSINSLOT`, `PLIANT.SLOTCOUNT`): O(1)
    /// a slot, unless a key of it has expired since it was last looked at (the slot's keys are
    /// walked once then, and the expired ones deleted).
    pub fn slot_count(&mut self, slots: &[u16], now: u64) -> Result<u64, KvError> {
        let ix = self.slot_index(slots, now)?;
        Ok(slots.iter().map(|&s| ix.slot(s).0).sum())
    }

    /// The slots the index holds any key of (expired ones not yet deleted included), ascending:
    /// O(slots), from the index's counts, without a walk or an expiry check. What a cluster
    /// node looks at to find keys of slots it no longer owns (`cluster::settle`).
    pub fn slots_held(&mut self) -> Result<Vec<u16>, KvError> {
        self.index_slots()?;
        Ok(match &self.slots {
            Some(ix) => (0..crate::cluster::SLOTS)
                .filter(|&s| ix.slot(s).0 > 0)
                .collect(),
            None => Vec::new(),
        })
    }

    /// Live keys at `now` and their bytes (keys and values), of every slot (`PLIANT.SLOTSTATS`).
    pub fn slot_stats(&mut self, now: u64) -> Result<Vec<(u64, u64)>, KvError> {
        self.index_slots()?;
        let due: Vec<u16> = match &self.slots {
            Some(ix) => (0..crate::cluster::SLOTS)
                .filter(|&s| ix.due(s, now))
                .collect(),
            None => Vec::new(),
        };
        let ix = self.slot_index(&due, now)?;
        Ok((0..crate::cluster::SLOTS).map(|s| ix.slot(s)).collect())
    }

    /// Up to `count` live keys at `now` of `slots` (ascending, no repeats) after the position
    /// of `after` (a token an earlier call returned; `None` to start), in slot order
    /// and key order within a slot, and the token to go on from (`None`: done). Reads only
    /// those slots' keys. A key present from the first call to the last is returned exactly
    /// once, whatever was written between calls. `None` if `after` is not a token.
    pub fn slot_keys(
        &mut self,
        slots: &[u16],
        after: Option<&[u8]>,
        count: usize,
        now: u64,
    ) -> Result<Option<SlotWalk>, KvError> {
        let after = match after {
            None => None,
            Some(t) => match parse_token(t) {
                Some(p) => Some(p),
                None => return Ok(None),
            },
        };
        let ix = self.slot_index(&[], now)?;
        Ok(Some(ix.walk(slots, after, count, now)))
    }

    /// Keys that exist (expired ones not yet collected included, as Redis's `DBSIZE`). With a
    /// store this walks it, under the keyspace lock: what runs where the server cannot walk
    /// off the lock first ([`count_store`], `Node::walk_store`).
    pub fn len(&mut self) -> Result<u64, KvError> {
        self.walk_ready()?;
        match &self.store {
            None => Ok(self.held),
            Some(store) => Ok(count_store_over(store.as_ref(), &self.pending, 0)?.all),
        }
    }

    /// The keys, those of them with an expiry, and their mean time to live in ms (what `INFO
    /// keyspace` reports as `keys`, `expires`, `avg_ttl`). With a store, walks every key, as
    /// [`len`](Self::len) does, and leaves out those expired; without one, memory's counters
    /// answer at once.
    pub fn expiry_counts(&mut self, now: u64) -> Result<(u64, u64, u64), KvError> {
        self.walk_ready()?;
        match &self.store {
            // Memory is every key: its counters answer at once. Keys expired and not yet
            // deleted are counted, as Redis counts them until it deletes them; their time to
            // live counts as none.
            None => {
                let avg = (self.expiry_sum / u128::from(self.expiring.max(1)))
                    .saturating_sub(u128::from(now));
                let avg = if self.expiring == 0 { 0 } else { avg as u64 };
                Ok((self.held, self.expiring, avg))
            }
            Some(store) => {
                let c = count_store_over(store.as_ref(), &self.pending, now)?;
                Ok((c.live, c.expires, c.avg_ttl))
            }
        }
    }

    /// Active expiry: looks at up to `budget` slots of memory, on from where the last sweep
    /// stopped, and deletes the keys among them that have expired (as a read of them would);
    /// how many. Nothing to do, and nothing walked, when no key in memory has an expiry.
    pub fn expire_sweep(&mut self, now: u64, budget: usize) -> Result<u64, KvError> {
        let len = self.mem.len();
        if self.expiring == 0 || len == 0 {
            return Ok(0);
        }
        let mut i = if self.sweep_at >= len {
            0
        } else {
            self.sweep_at
        };
        let mut gone = Vec::new();
        for _ in 0..budget.min(len) {
            if let Some(s) = &self.mem[i]
                && !s.live(now)
            {
                gone.push(s.key().to_vec());
            }
            i = (i + 1) % len;
        }
        self.sweep_at = i;
        for k in &gone {
            self.expire(k)?;
        }
        Ok(gone.len() as u64)
    }

    /// The bytes `key`'s entry takes in the memory tier (`MEMORY USAGE`): its block (a length
    /// header, the key, the value, the expiry) and the slot that points to it. A key held only
    /// in the store is counted as the entry it would be in memory. `None` if it does not exist.
    pub fn usage(&mut self, key: &[u8], now: u64) -> Result<Option<u64>, KvError> {
        let slot_bytes = std::mem::size_of::<Option<Slot>>() as u64;
        if let Some(slot) = self.slot(self.id_of(key), key) {
            return Ok(slot.live(now).then(|| slot.data.len() as u64 + slot_bytes));
        }
        Ok(self
            .peek(key, now)?
            .map(|v| Slot::new(key, &v).data.len() as u64 + slot_bytes))
    }

    /// Whether there are no keys.
    pub fn is_empty(&mut self) -> Result<bool, KvError> {
        Ok(self.len()? == 0)
    }

    /// Deletes every key, in the store too.
    pub fn flush(&mut self) -> Result<(), KvError> {
        // The writes still pending are deleted with the rest rather than written first: inside
        // EXEC they are the transaction's so far, which must not reach the store on their own.
        self.walk_ready()?;
        if let Some(store) = &self.store {
            let keys: Vec<Vec<u8>> = store
                .range((Bound::Unbounded, Bound::Unbounded))
                .map(|e| e.map(|(k, _)| k))
                .collect::<Result<_, _>>()?;
            let mut batch = pliant_store::Batch::new();
            for k in &keys {
                batch.delete(k);
            }
            for k in self.pending.keys() {
                batch.delete(k);
            }
            self.off_lock.flushed();
            if let Some(log) = &self.log {
                log.write_now(&mut batch)?;
            }
            // Deleted by that batch: nothing of them is to be written any more.
            self.pending.clear();
            self.stats.store_writes += 1;
            if let Some(ix) = &mut self.slots {
                ix.clear();
            }
        }
        self.forget_memory();
        Ok(())
    }

    /// Drops every value from memory (the store, or the parent, keeps them): what a tier does
    /// when its parent says everything changed, or when it loses its parent and can no longer
    /// hear of changes.
    pub fn forget_memory(&mut self) {
        for slot in std::mem::take(&mut self.mem).into_iter().flatten() {
            let id = self.id_of(slot.key());
            self.tier.cache_mut().remove(id);
        }
        self.held = 0;
        (self.expiring, self.expiry_sum) = (0, 0);
        if self.store.is_none()
            && let Some(ix) = &mut self.slots
        {
            ix.clear();
        }
    }

    /// Whether memory holds every one of `keys` (a tier's read of them can run at once).
    pub fn holds_all<'a>(&self, mut keys: impl Iterator<Item = &'a Bytes>) -> bool {
        keys.all(|k| self.slot(self.id_of(k), k).is_some())
    }

    /// Where a read of `key` stands on a tier, before the command runs: held (or lent), joining
    /// a fetch under way, or to be fetched by the caller, which the tier now counts as a
    /// parent request and treats as held (readers after this one join the fetch).
    pub fn want(&mut self, key: &[u8], now: u64) -> Want {
        let id = self.id_of(key);
        if self.slot(id, key).is_some() || self.lent.contains_key(key) {
            return Want::Ready;
        }
        self.evict_colliding(id, key);
        match self.tier.read(id, 0, secs(now)) {
            Read::Join(f) => Want::Join(f),
            Read::Hit | Read::Miss => {
                self.stats.misses += 1;
                self.stats.parent_requests += 1;
                let (tx, rx) = tokio::sync::watch::channel(None);
                let mut gone = Vec::new();
                // The value's size is not known until it arrives: the key holds a place of
                // size 0 meanwhile, and `fetched` gives it its size.
                self.tier
                    .fetching_evicting(id, 0, Fetch(rx), &mut |e: Evicted| gone.push(e));
                self.drop_evicted(gone);
                Want::Fetch(FetchDone(tx))
            }
        }
    }

    /// The parent answered a fetch of `key` (the caller runs this in the order the parent's
    /// replies and invalidations arrive, so a value it replaced is never kept after the news of
    /// its replacement): memory keeps the value, or lets go of the place it held.
    pub fn fetched(&mut self, key: &[u8], v: &Fetched) {
        let id = self.id_of(key);
        let _ = self.tier.finish(id);
        match v {
            Ok(Some(v)) => {
                self.stats.miss_bytes += u64::from(size_of(key, v));
                self.keep(key, v.clone());
            }
            Ok(None) | Err(_) => {
                if self.slot(id, key).is_none() {
                    // The place held for the fetch goes (with whatever its slot still held).
                    if let Some(p) = self.cache().slot(id) {
                        self.vacate(p);
                    }
                    self.tier.cache_mut().remove(id);
                }
            }
        }
    }

    /// Lends the values fetched for one command (see the module doc); the caller takes them
    /// back with [`unlend`](Self::unlend) before it lets go of the keyspace.
    pub fn lend(&mut self, lent: Lent) {
        self.lent = lent;
    }

    /// On a tier, what the loan says of a key memory does not hold (nothing, off a tier).
    fn lent_value(&mut self, key: &[u8]) -> Option<Value> {
        if !self.parent {
            return None;
        }
        match self.lent.get(key) {
            Some(v) => v.clone(),
            None => {
                self.unready = true;
                None
            }
        }
    }

    /// Whether the last command on a tier missed a key it should have had (see `unready`);
    /// resets it.
    pub fn take_unready(&mut self) -> bool {
        std::mem::take(&mut self.unready)
    }

    /// Takes back what [`lend`](Self::lend) lent.
    pub fn unlend(&mut self) -> Lent {
        std::mem::take(&mut self.lent)
    }

    /// Whether anything is lent (off a tier, never).
    pub fn lends(&self) -> bool {
        !self.lent.is_empty()
    }

    /// A put on a tier: if memory holds `key` with this very value (and no expiry), the put is
    /// redundant, counted, and goes no further (`true`); otherwise the caller forwards it.
    pub fn put_redundant(&mut self, key: &[u8], data: &[u8]) -> bool {
        let id = self.id_of(key);
        let same = self
            .slot(id, key)
            .is_some_and(|s| s.expires_at().is_none() && s.bytes() == data);
        if same {
            let size = u32::try_from(key.len() + data.len()).unwrap_or(u32::MAX);
            // Redundant by the guard above, so nothing leaves; were it not, what left would still
            // be let go of here.
            let mut gone = Vec::new();
            let _ = self
                .tier
                .put_evicting(id, size, &mut |e: Evicted| gone.push(e));
            self.drop_evicted(gone);
            self.stats.redundant_puts += 1;
        }
        same
    }

    /// The parent acknowledged a put of `key` this tier forwarded: memory keeps it (replacing
    /// what it held), as the tier's put rule says.
    pub fn put_forwarded(&mut self, key: &[u8], v: Value) {
        self.stats.writes += 1;
        self.auto_put(key);
        let id = self.id_of(key);
        if let Some(p) = self.cache().slot(id)
            && self.vacate(p)
        {
            // Held with another value: the put is new to the rule, not a redundant one.
            self.tier.cache_mut().remove(id);
        }
        let size = size_of(key, &v);
        let mut gone = Vec::new();
        let put = self
            .tier
            .put_evicting(id, size, &mut |e: Evicted| gone.push(e));
        debug_assert_eq!(put, pliant_tier::Put::Forward);
        self.drop_evicted(gone);
        // Not resident: larger than the memory tier, and the parent holds it.
        if let Some(s) = self.cache().slot(id) {
            self.place(s, Slot::new(key, &v));
        }
    }

    /// Drops `key` from memory (not from a store or the parent): a tier's copy of a key that
    /// changed above, or that a write this tier forwarded changed.
    pub fn drop_key(&mut self, key: &[u8]) -> bool {
        self.drop_key_id(key, self.id_of(key))
    }

    /// [`drop_key`](Self::drop_key) of `key`, whose id is `id`.
    fn drop_key_id(&mut self, key: &[u8], id: u64) -> bool {
        match self.cache().slot(id) {
            Some(s) if self.slot_at(s).is_some_and(|x| x.key() == key) => {
                self.vacate(s);
                self.tier.cache_mut().remove(id);
                true
            }
            _ => false,
        }
    }

    /// The parent says these keys changed (`None`: every key): memory drops its copies.
    pub fn invalidate(&mut self, keys: Option<&[Bytes]>) {
        match keys {
            None => {
                self.stats.invalidated += self.held;
                self.forget_memory();
            }
            Some(keys) => {
                for k in keys {
                    if self.drop_key(k) {
                        self.stats.invalidated += 1;
                    }
                }
            }
        }
    }

    /// Readies the store for a walk under the lock: every batch queued is written, and the
    /// writes still pending are left pending, for the walk to lay over the store. Pending may
    /// be a transaction's writes so far (a walk queued in MULTI runs inside EXEC): written for
    /// the walk, half a transaction would be in the store, where a crash would leave it.
    fn walk_ready(&mut self) -> Result<(), KvError> {
        let Some(log) = self.log.clone() else {
            return Ok(());
        };
        let done = log.write_queued_through();
        self.drop_doomed();
        done.map_err(KvError::Failed)
    }

    /// Hands the writes not yet committed to the store as one batch (in the store's journal,
    /// not yet synced: what `--durability none` and `everysec` acknowledge), after every batch
    /// queued before it: with the keyspace lock held, so for paths that need the store complete
    /// (a node's commits go through `queue_pending` and write off the
    /// lock). If the store fails, the keys of every batch not written leave memory (which would
    /// otherwise serve values the store does not have), and every later write is refused
    /// ([`KvError::Failed`]).
    pub fn commit(&mut self) -> Result<(), KvError> {
        let Some(log) = self.log.clone() else {
            return Ok(());
        };
        let seq = self.queue_pending()?;
        let done = log.write_through(seq);
        self.drop_doomed();
        done.map_err(KvError::Failed)
    }

    /// Takes the writes not yet committed as the next batch of the store log, to be written off
    /// the lock ([`StoreLog::write_through_async`]): its sequence, or with none pending, the
    /// latest batch's (which holds this client's writes if another committer took them).
    /// Refused once a store write failed; the writes then leave memory.
    pub(crate) fn queue_pending(&mut self) -> Result<u64, KvError> {
        let Some(log) = &self.log else {
            return Ok(0);
        };
        match log.queue(&mut self.pending) {
            Ok(seq) => Ok(seq),
            Err(why) => {
                // Writes are refused from now on: the pending ones leave memory with the rest.
                self.drop_doomed();
                Err(KvError::Failed(why))
            }
        }
    }

    /// Lets go of the keys of batches the store failed or refused (see [`store_log`]), and,
    /// once writes are refused, of the writes still pending, which will never be written.
    pub(crate) fn drop_doomed(&mut self) {
        let Some(log) = self.log.clone() else {
            return;
        };
        let mut doomed = log.take_doomed();
        if log.failed().is_some() {
            doomed.extend(self.pending.drain().map(|(k, _)| k.to_vec()));
        }
        for k in doomed {
            let id = self.id_of(&k);
            self.drop_id(id, &k);
            if self.slots.is_some() {
                self.reindex(&k);
            }
        }
    }

    /// `key` is set to `v` over a store: the slot index takes its size and expiry, unless
    /// memory says it has them already (the same key set again with a value of the same size
    /// and expiry, the common overwrite, which then costs the index no lookup of its own).
    fn index_set(&mut self, key: &[u8], v: &Value) {
        let size = size_of(key, v);
        let held = self
            .slot(self.id_of(key), key)
            .is_some_and(|s| s.size() == size && s.expires_at() == v.expires_at.map(|t| t.max(1)));
        if !held && let Some(ix) = &mut self.slots {
            ix.insert(key, size, v.expires_at);
        }
    }

    /// Puts `key` in the slot index as the store will hold it (its write in a batch the store
    /// failed is not): after the writes pending, the batches queued, the store. Left as it was
    /// if the store cannot say (writes are refused then, and a restart builds the index anew).
    fn reindex(&mut self, key: &[u8]) {
        let raw = match self.pending.get(key) {
            Some(p) => p.as_deref().map(<[u8]>::to_vec),
            None => match self.log.as_ref().and_then(|l| l.lookup(key)) {
                Some(queued) => queued,
                None => match self.store.as_ref().map(|s| s.get(key)) {
                    Some(Ok(raw)) => raw,
                    Some(Err(_)) | None => return,
                },
            },
        };
        let v = raw.map(|raw| Value::decode(key, raw));
        let Some(ix) = &mut self.slots else {
            return;
        };
        match v {
            None => ix.remove(key),
            Some(Ok(v)) => ix.insert(key, size_of(key, &v), v.expires_at),
            Some(Err(_)) => {}
        }
    }

    /// The store log this keyspace's commits go through (`None` without a store).
    pub(crate) fn store_log(&self) -> Option<Arc<StoreLog>> {
        self.log.clone()
    }

    /// Refuses a write once a store write failed.
    fn refused(&self) -> Result<(), KvError> {
        match self.log.as_ref().and_then(|l| l.failed()) {
            Some(why) => Err(KvError::Failed(why.clone())),
            None => Ok(()),
        }
    }

    /// Whether writes are waiting for a commit.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Whether writes are waiting for a sync.
    pub fn unsynced(&self) -> bool {
        self.log.as_ref().is_some_and(|l| l.unsynced())
    }

    /// Batches committed to the store so far; the latest one's sequence for group commit.
    pub fn commits(&self) -> u64 {
        self.log.as_ref().map_or(0, |l| l.commits())
    }

    /// The store, for what runs on it without the keyspace (group commit's fsync).
    pub fn store_handle(&self) -> Option<Arc<dyn Store>> {
        self.store.clone()
    }

    fn expire(&mut self, key: &[u8]) -> Result<(), KvError> {
        self.stats.expired += 1;
        self.remove(key)
    }

    fn remove(&mut self, key: &[u8]) -> Result<(), KvError> {
        self.remove_id(key, self.id_of(key))
    }

    /// [`remove`](Self::remove) of `key`, whose id is `id`.
    fn remove_id(&mut self, key: &[u8], id: u64) -> Result<(), KvError> {
        self.refused()?;
        // A key over the store's limit was never written there (see `set`): nothing to delete.
        if self.store.is_some() && key.len() <= pliant_store::MAX_KEY_LEN {
            self.pending.insert(key.into(), None);
            self.stats.store_writes += 1;
            self.off_lock.written(id);
            if let Some(ix) = &mut self.slots {
                ix.remove(key);
            }
        }
        self.drop_key_id(key, id);
        Ok(())
    }

    /// Puts `key` in the memory tier (replacing what it held), evicting as the algorithm says.
    fn keep(&mut self, key: &[u8], v: Value) {
        let size = size_of(key, &v);
        let id = self.id_of(key);
        self.evict_colliding(id, key);
        let before = self.cache().slot(id);
        let mut gone = Vec::new();
        let outcome = self
            .tier
            .cache_mut()
            .put_evicting(&Request::new(id, size), &mut |e: Evicted| gone.push(e));
        self.drop_evicted(gone);
        let after = self.cache().slot(id);
        if let Some(p) = before
            && after != Some(p)
        {
            // Replaced by an object of another size: the old slot was let go unreported.
            self.vacate(p);
        }
        match after {
            Some(s) if outcome != pliant_cache::PutOutcome::Rejected => {
                self.place(s, Slot::new(key, &v));
            }
            // Larger than the memory tier: it lives in the store only (or, without one, nowhere,
            // as a Redis whose maxmemory is below the value).
            _ => {}
        }
    }

    /// Fetches from the parent under way (one per key, however many readers wait on it).
    pub fn fetches_under_way(&self) -> usize {
        self.tier.in_flight(secs(self.clock))
    }

    /// Tells `auto` of a put of `key` now: memory holds it from here on.
    fn auto_put(&mut self, key: &[u8]) {
        if self.auto.is_some() {
            let id = self.id_of(key);
            if let Some(a) = &mut self.auto {
                a.auto.on_put(a.t(self.clock), id);
            }
        }
    }

    /// What the store holds for `key` (whose id is `id`) once the writes not yet committed are
    /// counted: from them (pending, then the batches queued for the store, newest first), from a
    /// loan read off the lock (taken when the caller keeps the value in
    /// memory), or, with neither, from the store itself, under the lock.
    fn stored(&mut self, key: &[u8], id: u64, take: bool) -> Result<Option<Vec<u8>>, KvError> {
        if let Some(p) = self.pending.get(key) {
            return Ok(p.as_deref().map(<[u8]>::to_vec));
        }
        if let Some(queued) = self.log.as_ref().and_then(|l| l.lookup(key)) {
            return Ok(queued);
        }
        if let Some((raw, seconds)) = self.off_lock.loan(key, id, take) {
            self.loan_waited = Some(seconds);
            return Ok(raw);
        }
        let Some(store) = &self.store else {
            return Ok(None);
        };
        let started = crate::node::mono_ns();
        let raw = store.get(key)?;
        self.off_lock
            .read_under_lock_took(crate::node::mono_ns().saturating_sub(started) as f64 * 1e-9);
        Ok(raw)
    }

    /// Where a command's read of `key` stands before it runs on a node over a store (see the
    /// `store_reads` module): ready, joining a store read under way, or to be read by the caller
    /// off the lock and handed back with [`store_read`](Self::store_read).
    pub fn store_want(&mut self, key: &Bytes) -> StoreWant {
        if self.store.is_none() || self.parent {
            return StoreWant::Ready;
        }
        let id = self.id_of(key);
        if self.slot(id, key).is_some()
            || self.pending.contains_key(key.as_ref())
            || self.log.as_ref().is_some_and(|l| l.queues(key))
            || self.off_lock.has_loan(key, id)
        {
            return StoreWant::Ready;
        }
        let w = self.off_lock.want(key);
        if matches!(w, StoreWant::Join(_)) {
            self.stats.store_reads_joined += 1;
        }
        w
    }

    /// The smoothed microseconds of a store read and of leaving the lock for one (what decides
    /// whether misses leave it; `INFO pliant`).
    pub fn store_read_costs(&self) -> (f64, f64) {
        self.off_lock.costs()
    }

    /// The store read `r` ended: what it found and in how many seconds, or `None` if it failed
    /// (the command then reads the store itself and answers its error).
    pub fn store_read(&mut self, r: Reading, found: Option<(Option<Vec<u8>>, f64)>) {
        let id = self.id_of(r.key());
        if found.is_some() {
            self.stats.store_reads_off_lock += 1;
        }
        self.off_lock.finished(r, id, found);
    }

    /// Whether misses leave the lock now: a flag the server reads without the lock, before it
    /// asks [`store_want`](Self::store_want) about a command's keys.
    pub fn store_reads_asking(&self) -> Arc<std::sync::atomic::AtomicBool> {
        self.off_lock.asking()
    }

    /// For tests: store reads have been slow, so misses leave the lock from now on.
    #[cfg(test)]
    pub(crate) fn assume_slow_store_reads(&mut self) {
        for _ in 0..64 {
            self.off_lock.read_took(1.0);
        }
    }

    /// A trip off the lock for store reads cost `seconds` beyond the reads themselves.
    pub fn store_handoff(&mut self, seconds: f64) {
        self.off_lock.handoff_took(seconds);
    }

    fn cache(&self) -> &Cache {
        self.tier.cache()
    }

    /// The most keys [`warm`](Self::warm) looks up at once.
    pub const WARM_MAX: usize = 64;

    /// Brings what reading `keys` will touch (the algorithm's index, the slot, the entry's
    /// block) into the CPU's caches, for all of them at once, before a pipeline's commands run
    /// one after the other. Each of those is a cache miss when keys are many; run command by
    /// command they are paid one after another, while here the loads of different keys do not
    /// depend on each other and the CPU overlaps them.
    pub fn warm<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) {
        let mut slots = [0u32; Self::WARM_MAX];
        let mut n = 0;
        for k in keys.into_iter().take(Self::WARM_MAX) {
            if let Some(s) = self.cache().slot(self.id_of(k)) {
                slots[n] = s;
                n += 1;
            }
        }
        let mut touched = 0usize;
        for &s in &slots[..n] {
            if let Some(slot) = self.slot_at(s) {
                touched = touched.wrapping_add(slot.data.first().copied().unwrap_or(0).into());
            }
        }
        std::hint::black_box(touched);
    }

    /// The slot holding `key` (whose id is `id`), if memory holds it.
    fn slot(&self, id: u64, key: &[u8]) -> Option<&Slot> {
        self.slot_at(self.cache().slot(id)?)
            .filter(|s| s.key() == key)
    }

    /// Two keys with one 64-bit hash share a place in the algorithm's order: if another key than
    /// `key` holds the place of `id`, it leaves memory (a store keeps it), as an eviction would
    /// take it, before `key` takes the place.
    fn evict_colliding(&mut self, id: u64, key: &[u8]) {
        if let Some(p) = self.cache().slot(id)
            && self.slot_at(p).is_some_and(|s| s.key() != key)
        {
            self.vacate(p);
            self.tier.cache_mut().remove(id);
            self.stats.evictions += 1;
        }
    }

    /// What slot `s` holds.
    fn slot_at(&self, s: u32) -> Option<&Slot> {
        self.mem.get(s as usize)?.as_ref()
    }

    /// Puts `value` in slot `s`, replacing what it held.
    fn place(&mut self, s: u32, value: Slot) {
        let i = s as usize;
        if self.mem.len() <= i {
            self.mem.resize_with(i + 1, || None);
        }
        self.count_expiry(&value, true);
        if self.store.is_none()
            && let Some(ix) = &mut self.slots
            && !self.mem[i]
                .as_ref()
                .is_some_and(|old| same_entry(old, &value))
        {
            // (The same key set again with a value of the same size and expiry leaves the index
            // as it is: the common overwrite costs it nothing.)
            ix.insert(value.key(), value.size(), value.expires_at());
        }
        match self.mem[i].replace(value) {
            None => self.held += 1,
            Some(old) => {
                self.count_expiry(&old, false);
                if self.store.is_none()
                    && let Some(ix) = &mut self.slots
                    && self.mem[i]
                        .as_ref()
                        .is_some_and(|new| new.key() != old.key())
                {
                    ix.remove(old.key());
                }
            }
        }
    }

    /// Empties slot `s`; whether it held a value.
    fn vacate(&mut self, s: u32) -> bool {
        let taken = self.mem.get_mut(s as usize).and_then(Option::take);
        if let Some(old) = &taken {
            self.count_expiry(old, false);
            if self.store.is_none()
                && let Some(ix) = &mut self.slots
            {
                // Without a store, a key that leaves memory is gone.
                ix.remove(old.key());
            }
        }
        self.held -= u64::from(taken.is_some());
        taken.is_some()
    }

    /// Counts a slot's expiry in (`add`) or out of [`expiring`](Self::expiring).
    fn count_expiry(&mut self, slot: &Slot, add: bool) {
        if let Some(t) = slot.expires_at() {
            if add {
                self.expiring += 1;
                self.expiry_sum += u128::from(t);
            } else {
                self.expiring -= 1;
                self.expiry_sum -= u128::from(t);
            }
        }
    }

    /// Drops `key` (whose id is `id`) from memory and the algorithm, if memory holds it.
    fn drop_id(&mut self, id: u64, key: &[u8]) {
        if let Some(s) = self.cache().slot(id)
            && self.slot_at(s).is_some_and(|x| x.key() == key)
        {
            self.vacate(s);
            self.tier.cache_mut().remove(id);
        }
    }

    /// The number the algorithm knows `key` by: a hash of its bytes, the same every time the key
    /// comes back, so that the ghosts of S3-FIFO and ARC recognise it.
    fn id_of(&self, key: &[u8]) -> u64 {
        use std::hash::BuildHasher;
        self.ids_hasher.hash_one(key)
    }

    fn drop_evicted(&mut self, gone: Vec<Evicted>) {
        for e in gone {
            if self.vacate(e.slot) {
                self.stats.evictions += 1;
            }
        }
    }
}

/// Whether two entries of memory are one key with a value of one size and one expiry: as the
/// slot index sees them, the same.
fn same_entry(a: &Slot, b: &Slot) -> bool {
    a.size() == b.size() && a.expires_at() == b.expires_at() && a.key() == b.key()
}

/// Unix milliseconds as the tier's clock (seconds).
fn secs(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

/// What a key weighs against a byte capacity: its key and value bytes.
fn size_of(key: &[u8], v: &Value) -> u32 {
    u32::try_from(key.len() + v.data.len()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pliant_store::MemStore;

    fn ks(cap: &str, store: bool) -> Keyspace {
        let store: Option<Arc<dyn Store>> = store.then(|| Arc::new(MemStore::new()) as _);
        Keyspace::new("lru", cap.parse().expect("capacity"), store).expect("keyspace")
    }

    #[test]
    fn a_slot_gives_back_its_key_value_and_expiry() {
        for (key, data, expires_at) in [
            (&b"k"[..], &b"value"[..], None),
            (
                &[b'x'; 300][..],
                &b"long key: a two-byte header"[..],
                Some(5),
            ),
            (b"key", b"", Some(1_700_000_000_000)),
            (b"", b"v", Some(1)),
            (b"0123456789abcdef", &[7u8; 100][..], None),
        ] {
            let v = Value {
                data: Bytes::copy_from_slice(data),
                expires_at,
            };
            let slot = Slot::new(key, &v);
            assert_eq!(slot.key(), key);
            assert_eq!(slot.bytes(), data);
            assert_eq!(slot.value(), v);
            assert_eq!(
                slot.size(),
                size_of(key, &v),
                "the size excludes the expiry's bytes"
            );
            assert_eq!(slot.live(1), expires_at.is_none_or(|t| t > 1));
        }
        assert_eq!(std::mem::size_of::<Option<Slot>>(), 16);
    }

    #[test]
    fn values_round_trip_through_the_store_encoding() {
        for v in [
            Value::new("abc"),
            Value {
                data: Bytes::from_static(b""),
                expires_at: Some(1_700_000_000_000),
            },
        ] {
            assert_eq!(Value::decode(b"k", v.encode()).expect("decodes"), v);
        }
        assert!(matches!(
            Value::decode(b"k", vec![1, 2]),
            Err(KvError::Corrupt { .. })
        ));
    }

    /// The bug: SCAN, KEYS, DBSIZE and INFO keyspace under the lock (queued in MULTI, run by
    /// EXEC) wrote what was pending to the store before walking it, so a transaction with a
    /// walk in the middle put its first half in the store, where a crash would leave it. The
    /// walk now lays what is pending over the store, and FLUSHDB deletes it with the rest.
    #[test]
    fn a_walk_under_the_lock_sees_pending_writes_without_writing_them() {
        let mut k = ks("100keys", true);
        let store = k.store_handle().expect("store");
        k.set(Bytes::from_static(b"old"), Value::new("1"))
            .expect("set");
        k.set(Bytes::from_static(b"gone"), Value::new("2"))
            .expect("set");
        k.commit().expect("commit");
        // A transaction's first half: one key set, one deleted, one with an expiry.
        k.set(Bytes::from_static(b"new"), Value::new("3"))
            .expect("set");
        k.remove(b"gone").expect("remove");
        let mut expiring = Value::new("4");
        expiring.expires_at = Some(10_000);
        k.set(Bytes::from_static(b"ttl"), expiring).expect("set");
        let (keys, next) = k.scan(None, 100, 1_000, &|_| true).expect("scan");
        assert_eq!(keys, ["new", "old", "ttl"]);
        assert_eq!(next, None);
        let (first, next) = k.scan(None, 1, 1_000, &|_| true).expect("scan");
        assert_eq!(first, ["new"]);
        assert_eq!(next.as_deref(), Some(&b"new"[..]));
        assert_eq!(k.len().expect("len"), 3);
        assert_eq!(k.expiry_counts(1_000).expect("counts"), (3, 1, 9_000));
        for (key, stored) in [(&b"new"[..], false), (b"ttl", false), (b"gone", true)] {
            assert_eq!(
                store.get(key).expect("get").is_some(),
                stored,
                "{}: the walk wrote nothing pending",
                String::from_utf8_lossy(key)
            );
        }
        // FLUSHDB deletes what is pending with the rest, without writing it first.
        k.flush().expect("flush");
        assert_eq!(k.len().expect("len"), 0);
        assert!(!k.has_pending());
        assert_eq!(store.range((Bound::Unbounded, Bound::Unbounded)).count(), 0);
    }

    /// The bug: a SET of a key longer than the store takes (65,535 bytes; a request's bulk may
    /// be 512 MiB) reached the store's batch, whose refusal refused every write of every client
    /// after it, until a restart. It is refused alone now, and the node goes on writing.
    #[test]
    fn a_key_too_long_for_the_store_is_refused_alone_and_writes_go_on() {
        let mut k = ks("10keys", true);
        let long = Bytes::from(vec![b'k'; pliant_store::MAX_KEY_LEN + 1]);
        let e = k.set(long.clone(), Value::new("v")).expect_err("refused");
        assert!(matches!(e, KvError::TooLarge { what: "key", .. }), "{e:?}");
        assert!(e.to_string().starts_with("ERR key is too long"), "{e}");
        // Deleting it writes nothing to the store either (it was never there).
        k.remove(&long).expect("removed");
        k.set(Bytes::from_static(b"after"), Value::new("v"))
            .expect("a later write");
        k.commit().expect("committed: the store refused nothing");
        assert_eq!(
            k.get(b"after", 0).expect("get"),
            Some(Bytes::from_static(b"v"))
        );
    }

    #[test]
    fn a_full_memory_tier_evicts_to_the_store_and_reads_back_through_it() {
        let mut k = ks("2keys", true);
        for i in 0..5u8 {
            k.set(Bytes::from(vec![b'a' + i]), Value::new(vec![i]))
                .expect("set");
        }
        assert_eq!(k.memory().0, 2);
        assert_eq!(k.stats().evictions, 3);
        // "a" left memory but not the store: a miss served by the store, kept again.
        assert_eq!(k.get(b"a", 0).expect("get"), Some(Bytes::from_static(&[0])));
        let s = k.stats();
        assert_eq!((s.hits, s.misses, s.keyspace_hits), (0, 1, 1));
        assert_eq!(k.get(b"a", 0).expect("get"), Some(Bytes::from_static(&[0])));
        assert_eq!(k.stats().hits, 1);
        assert_eq!(k.len().expect("len"), 5);
    }

    /// What a slot move's source deletes once the target has a batch: a key is unchanged only
    /// with the same data, the same expiry and still live, whether memory or the store holds it
    /// (compared in place in memory, read back from the store otherwise).
    #[test]
    fn a_key_is_unchanged_only_with_its_data_and_expiry_in_memory_or_the_store() {
        let mut k = ks("2keys", true);
        let with = |data: &'static [u8], expires_at| Value {
            data: Bytes::from_static(data),
            expires_at,
        };
        k.set(Bytes::from_static(b"plain"), with(b"v1", None))
            .expect("set");
        k.set(Bytes::from_static(b"timed"), with(b"v2", Some(1_000)))
            .expect("set");
        for now in [0, 999] {
            assert!(k.holds_unchanged(b"plain", b"v1", 0, now).expect("compare"));
            assert!(
                k.holds_unchanged(b"timed", b"v2", 1_000, now)
                    .expect("compare")
            );
        }
        assert!(!k.holds_unchanged(b"plain", b"v2", 0, 0).expect("compare"));
        assert!(!k.holds_unchanged(b"plain", b"v1", 5, 0).expect("compare"));
        assert!(!k.holds_unchanged(b"timed", b"v2", 0, 0).expect("compare"));
        assert!(
            !k.holds_unchanged(b"timed", b"v2", 1_000, 1_000)
                .expect("expired")
        );
        assert!(!k.holds_unchanged(b"absent", b"", 0, 0).expect("compare"));
        // Three more keys push both out of memory: the store answers the same.
        for i in 0..3u8 {
            k.set(Bytes::from(vec![b'a' + i]), Value::new(vec![i]))
                .expect("set");
        }
        assert!(k.slot(k.id_of(b"plain"), b"plain").is_none(), "evicted");
        assert!(k.holds_unchanged(b"plain", b"v1", 0, 0).expect("compare"));
        assert!(!k.holds_unchanged(b"plain", b"v", 0, 0).expect("compare"));
        assert!(
            k.holds_unchanged(b"timed", b"v2", 1_000, 0)
                .expect("compare")
        );
        assert!(
            !k.holds_unchanged(b"timed", b"v2", 1_000, 2_000)
                .expect("expired")
        );
    }

    /// The source's deletion after an acknowledged batch: a key changed since its copy stays,
    /// an unchanged one leaves memory, the store and the slot index, whether memory held it
    /// (one lookup) or only the store did; a second deletion of it finds nothing.
    #[test]
    fn a_key_is_deleted_if_unchanged_only() {
        let mut k = ks("2keys", true);
        k.index_slots().expect("index");
        let set = |k: &mut Keyspace, key: &'static [u8], data: &'static [u8], at| {
            let v = Value {
                data: Bytes::from_static(data),
                expires_at: at,
            };
            k.set(Bytes::from_static(key), v).expect("set");
        };
        set(&mut k, b"plain", b"v1", None);
        set(&mut k, b"timed", b"v2", Some(1_000));
        assert!(!k.delete_if_unchanged(b"plain", b"v2", 0, 0).expect("del"));
        assert!(!k.delete_if_unchanged(b"plain", b"v1", 7, 0).expect("del"));
        assert!(
            !k.delete_if_unchanged(b"timed", b"v2", 1_000, 1_000)
                .expect("del")
        );
        assert!(!k.delete_if_unchanged(b"absent", b"", 0, 0).expect("del"));
        assert_eq!(k.len().expect("len"), 2, "nothing changed was deleted");
        assert!(k.delete_if_unchanged(b"plain", b"v1", 0, 0).expect("del"));
        assert!(!k.delete_if_unchanged(b"plain", b"v1", 0, 0).expect("del"));
        assert_eq!(k.peek(b"plain", 0).expect("peek"), None);
        assert_eq!(k.memory().0, 1, "gone from memory");
        // Three more keys push "timed" out of memory: the store's copy is compared and deleted.
        for key in [&b"a"[..], b"b", b"c"] {
            set(&mut k, key, b"x", None);
        }
        assert!(k.slot(k.id_of(b"timed"), b"timed").is_none(), "evicted");
        assert!(
            !k.delete_if_unchanged(b"timed", b"v3", 1_000, 0)
                .expect("del")
        );
        assert!(
            k.delete_if_unchanged(b"timed", b"v2", 1_000, 0)
                .expect("del")
        );
        k.commit().expect("committed");
        assert_eq!(k.peek(b"timed", 0).expect("peek"), None);
        assert_eq!(k.len().expect("len"), 3);
        let slot = pliant_cluster::key_slot(b"timed");
        let slot_of_plain = pliant_cluster::key_slot(b"plain");
        for s in [slot, slot_of_plain] {
            let (keys, _) = k
                .slot_keys(&[s], None, 10, 0)
                .expect("walk")
                .expect("token");
            assert!(
                keys.iter()
                    .all(|x| x.as_ref() != b"timed" && x.as_ref() != b"plain"),
                "the slot index forgot them: {keys:?}"
            );
        }
    }

    #[test]
    fn without_a_store_an_evicted_key_is_gone() {
        let mut k = ks("2keys", false);
        for i in 0..3u8 {
            k.set(Bytes::from(vec![i]), Value::new("v")).expect("set");
        }
        assert_eq!(k.get(&[0], 0).expect("get"), None);
        assert_eq!(k.len().expect("len"), 2);
        k.resize(Capacity::Keys(1)).expect("same units");
        assert_eq!(k.memory().0, 1);
        assert_eq!(k.len().expect("len"), 1);
        assert!(k.resize(Capacity::Bytes(100)).is_err());
    }

    #[test]
    fn expired_keys_are_never_returned_and_are_deleted_from_the_store() {
        let mut k = ks("unlimited", true);
        let v = Value {
            data: Bytes::from_static(b"v"),
            expires_at: Some(1_000),
        };
        k.set(Bytes::from_static(b"k"), v).expect("set");
        assert!(k.exists(b"k", 999).expect("exists"));
        assert_eq!(k.get(b"k", 1_000).expect("get"), None);
        assert_eq!(k.stats().expired, 1);
        assert_eq!(k.len().expect("len"), 0);
    }

    #[test]
    fn a_key_present_for_a_whole_scan_without_a_store_is_returned_once_despite_churn() {
        let mut k = ks("unlimited", false);
        for i in 0..300u32 {
            k.set(Bytes::from(format!("stay:{i}")), Value::new("v"))
                .expect("set");
            k.set(Bytes::from(format!("churn:{i}")), Value::new("v"))
                .expect("set");
        }
        let mut seen = Vec::new();
        let mut after: Option<Bytes> = None;
        for round in 0..1000u32 {
            // Between calls, keys come and go: their slots are freed and taken again.
            k.delete(format!("churn:{round}").as_bytes(), 0)
                .expect("delete");
            k.set(Bytes::from(format!("new:{round}")), Value::new("v"))
                .expect("set");
            let (keys, next) = k
                .scan(after.as_deref(), 5, 0, &|key: &[u8]| {
                    key.starts_with(b"stay:")
                })
                .expect("scan");
            seen.extend(keys);
            match next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        let unique: std::collections::BTreeSet<_> = seen.iter().collect();
        assert_eq!(
            unique.len(),
            300,
            "every key present throughout is returned"
        );
        assert_eq!(seen.len(), 300, "and once");
    }

    #[test]
    fn scan_walks_every_key_once_in_bounded_steps() {
        for store in [false, true] {
            let mut k = ks("unlimited", store);
            for i in 0..250u32 {
                k.set(Bytes::from(format!("key:{i:03}")), Value::new("v"))
                    .expect("set");
            }
            let mut seen = Vec::new();
            let mut after: Option<Bytes> = None;
            for _ in 0..1000 {
                let (keys, next) = k
                    .scan(after.as_deref(), 7, 0, &|key: &[u8]| key.ends_with(b"7"))
                    .expect("scan");
                seen.extend(keys);
                match next {
                    Some(n) => after = Some(n),
                    None => break,
                }
            }
            assert_eq!(seen.len(), 25, "store: {store}");
            let unique: std::collections::BTreeSet<_> = seen.iter().collect();
            assert_eq!(unique.len(), 25, "store: {store}");
            if store {
                assert!(
                    seen.windows(2).all(|w| w[0] < w[1]),
                    "the store walks keys in order"
                );
            }
        }
    }

    /// A store read done off the lock is the store's value when the read began: a write of the
    /// key (a set, a delete, a flush) while it ran makes it stale, and a command then never sees
    /// it (it reads the value the write left).
    #[test]
    fn a_store_read_that_a_write_overtook_is_never_served() {
        let key = Bytes::from_static(b"k");
        let over_store = || {
            let store: Arc<dyn Store> = Arc::new(MemStore::new());
            let mut k = Keyspace::new("lru", Capacity::Keys(10), Some(store)).expect("keyspace");
            k.set(key.clone(), Value::new("old")).expect("set");
            k.commit().expect("commit");
            k.forget_memory();
            k.assume_slow_store_reads();
            k
        };
        let read = |k: &mut Keyspace| match k.store_want(&key) {
            StoreWant::Read(r) => r,
            w => panic!("a key only the store holds is read off the lock, not {w:?}"),
        };
        let old = Some((Some(Value::new("old").encode()), 0.0));
        type Write = fn(&mut Keyspace, &Bytes);
        let writes: [(&str, Write); 3] = [
            ("set", |k, key| {
                k.set(key.clone(), Value::new("new")).expect("set")
            }),
            ("delete", |k, key| {
                assert!(k.delete(key, 0).expect("delete"));
            }),
            ("flush", |k, _| k.flush().expect("flush")),
        ];
        for (name, write) in writes {
            let mut k = over_store();
            let r = read(&mut k);
            write(&mut k, &key);
            k.commit().expect("commit");
            k.forget_memory();
            k.store_read(r, old.clone());
            let expected = (name == "set").then(|| Bytes::from_static(b"new"));
            assert_eq!(k.get(&key, 0).expect("get"), expected, "after a {name}");
        }
        // Nothing overtook it: the command is lent it.
        let mut k = over_store();
        let r = read(&mut k);
        k.store_read(r, old.clone());
        assert!(matches!(k.store_want(&key), StoreWant::Ready));
        assert_eq!(
            k.get(&key, 0).expect("get"),
            Some(Bytes::from_static(b"old"))
        );
    }

    /// A pipeline's writes go to the store as one batch; a failed batch takes its keys out of
    /// memory (so nothing serves a value the store lacks) and refuses every later write.
    #[test]
    fn writes_commit_as_one_batch_and_a_failed_commit_is_not_served() {
        let faulty = pliant_store::FaultyStore::new(MemStore::new());
        let faults = faulty.faults();
        let store: Arc<dyn Store> = Arc::new(faulty);
        let mut k = Keyspace::new("lru", Capacity::Keys(1), Some(store.clone())).expect("keyspace");
        // Capacity 1: "a" leaves memory before the commit, and is read from the pending writes.
        k.set(Bytes::from_static(b"a"), Value::new("1"))
            .expect("set");
        k.set(Bytes::from_static(b"b"), Value::new("2"))
            .expect("set");
        assert_eq!(k.get(b"a", 0).expect("get"), Some(Bytes::from_static(b"1")));
        assert_eq!(
            faults.writes(),
            0,
            "nothing reached the store before the commit"
        );
        k.commit().expect("commit");
        assert_eq!(faults.writes(), 1, "two puts, one batch");
        assert_eq!(store.get(b"b").expect("get").map(|v| v.len()), Some(2));

        k.set(Bytes::from_static(b"c"), Value::new("3"))
            .expect("set");
        faults.fail_write(1);
        assert!(k.commit().is_err());
        assert_eq!(
            k.get(b"c", 0).expect("get"),
            None,
            "never served once its commit failed"
        );
        assert!(matches!(
            k.set(Bytes::from_static(b"d"), Value::new("4")),
            Err(KvError::Failed(_))
        ));
    }

    /// A tier's rules, as `pliant-tier` states them: the first reader of a missing key fetches
    /// it, later ones join; the tier keeps what it fetched; a command sees what was fetched for it
    /// even when memory could not keep it.
    #[tokio::test]
    async fn a_tier_fetches_a_missing_key_once_and_keeps_it() {
        let mut k = Keyspace::over_parent("lru", Capacity::Keys(1)).expect("keyspace");
        let Want::Fetch(done) = k.want(b"a", 0) else {
            panic!("the first reader fetches");
        };
        let Want::Join(joined) = k.want(b"a", 0) else {
            panic!("the second joins");
        };
        let v: Fetched = Ok(Some(Value::new("1")));
        k.fetched(b"a", &v);
        done.done(&v);
        assert_eq!(joined.wait().await.ok(), v.ok());
        let s = k.stats();
        assert_eq!((s.parent_requests, s.coalesced, s.misses), (1, 1, 1));
        assert!(matches!(k.want(b"a", 0), Want::Ready), "kept");
        assert_eq!(k.get(b"a", 0).expect("get"), Some(Bytes::from_static(b"1")));
        assert_eq!(k.stats().hits, 1);

        // "b" evicts "a" from a memory of one key; a loan still answers for "a".
        let Want::Fetch(done) = k.want(b"b", 0) else {
            panic!("fetch b");
        };
        k.fetched(b"b", &Ok(Some(Value::new("2"))));
        drop(done);
        let mut lent = Lent::default();
        lent.insert(Bytes::from_static(b"a"), Some(Value::new("1")));
        k.lend(lent);
        assert_eq!(k.get(b"a", 0).expect("get"), Some(Bytes::from_static(b"1")));
        assert!(!k.take_unready());
        k.unlend();
        assert_eq!(k.get(b"a", 0).expect("get"), None);
        assert!(k.take_unready(), "a key neither held nor lent is reported");
    }

    /// A fetch whose fetcher went away without a word is not joined forever: the next reader
    /// fetches again.
    #[test]
    fn an_abandoned_fetch_is_fetched_again() {
        let mut k = Keyspace::over_parent("lru", Capacity::Keys(10)).expect("keyspace");
        let Want::Fetch(done) = k.want(b"a", 0) else {
            panic!("fetch");
        };
        drop(done);
        assert!(matches!(k.want(b"a", 0), Want::Fetch(_)));
    }

    #[test]
    fn a_put_of_the_value_held_is_redundant_and_another_value_is_not() {
        let mut k = Keyspace::over_parent("lru", Capacity::Keys(10)).expect("keyspace");
        assert!(!k.put_redundant(b"a", b"1"), "not held");
        k.put_forwarded(b"a", Value::new("1"));
        assert!(k.put_redundant(b"a", b"1"));
        assert!(!k.put_redundant(b"a", b"2"), "same size, another value");
        k.put_forwarded(b"a", Value::new("2"));
        assert_eq!(k.get(b"a", 0).expect("get"), Some(Bytes::from_static(b"2")));
        assert_eq!(k.stats().redundant_puts, 1);
        k.invalidate(Some(&[Bytes::from_static(b"a")]));
        assert!(
            matches!(k.want(b"a", 0), Want::Fetch(_)),
            "dropped by the invalidation"
        );
        assert_eq!(k.stats().invalidated, 1);
    }

    /// Live `auto` on the node's own keyspace, the clock given: a run that stays in its flash
    /// crowd (2,000 reads of 10 keys every 10 s) keeps absorbing; one whose reads then spread
    /// out (20 new keys a decision, each read twice) arms once they have, and trims memory to
    /// the keys read within its window while the store still serves every key.
    #[test]
    fn live_auto_absorbs_a_flash_crowd_and_trims_once_the_reads_spread_out() {
        let key = |i: u64| Bytes::from(format!("key:{i}"));
        let run = |spread_at: u64| {
            let mut k = ks("unlimited", true);
            let t0 = 1_700_000_000_000;
            k.start_auto(Auto::with_efficiency(1, 0.96), t0);
            for i in 0..10 {
                k.tick(t0);
                k.set(key(i), Value::new("crowd")).expect("set");
            }
            let (mut written, mut trims) = (10, Vec::new());
            for d in 0..120u64 {
                let start = t0 + d * 10_000;
                let reads = if d < spread_at {
                    for r in 0..2_000 {
                        k.get(&key(r % 10), start + r * 5).expect("get");
                    }
                    2_000
                } else {
                    for j in 0..20 {
                        let at = start + j * 500;
                        k.tick(at);
                        k.set(key(written + j), Value::new("new")).expect("set");
                        k.get(&key(written + j), at + 100).expect("get");
                        k.get(&key(written + j), at + 200).expect("get");
                    }
                    written += 20;
                    40
                };
                let (keys, bytes) = k.memory();
                let view = CacheView {
                    keys,
                    bytes,
                    reads_per_s: reads as f64 / 10.0,
                    clients: Some(1.0),
                    ..CacheView::default()
                };
                // Both steps at once: nothing else holds this keyspace.
                let (view, fit) = k.auto_begin(view, start + 10_000).expect("auto runs");
                if let Some(n) = k.auto_finish(&view, fit.map(pliant_tier::Fit::run)) {
                    trims.push((d, n, k.memory().0));
                }
            }
            (k, written, trims)
        };

        let (k, _, trims) = run(u64::MAX);
        assert_eq!(
            k.auto_state(),
            None,
            "a run still in its flash crowd keeps absorbing"
        );
        assert!(trims.is_empty(), "{trims:?}");

        let (mut k, written, trims) = run(60);
        let state = k.auto_state().expect("armed once the reads spread out");
        assert!(
            (600.0..=700.0).contains(&state.armed_at),
            "armed at {} s; the reads spread out at 600 s",
            state.armed_at
        );
        assert_eq!(state.regimes, 2);
        let &(first, target, held) = trims.first().expect("it trims");
        assert!(first >= 60, "no trim before the crowd ended: {trims:?}");
        assert!(
            held <= target,
            "memory holds {held} after a trim to {target}"
        );
        assert!(
            k.memory().0 < written / 2,
            "memory holds {} of {written} keys",
            k.memory().0
        );
        for i in 0..written {
            assert!(
                k.get(&key(i), 1_700_002_000_000).expect("get").is_some(),
                "key {i} is still served (from the store)"
            );
        }
    }
}

/// The slot index against a walk of every key, as the slot commands walked before it.
#[cfg(test)]
mod slot_index_tests {
    use super::*;
    use crate::cluster::{SLOTS, key_slot};
    use pliant_store::MemStore;

    /// SplitMix64: a seeded generator, so a failing run can be run again.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Keys over a few slots (hash tags) and many (no tag), short (held in place by the index)
    /// and long (boxed), the empty key included.
    fn universe() -> Vec<Bytes> {
        let mut keys: Vec<Bytes> = (0..24)
            .map(|i| Bytes::from(format!("{{t{}}}k{i}", i % 3)))
            .collect();
        keys.extend((0..16).map(|i| Bytes::from(format!("plain:{i}"))));
        keys.extend((0..6).map(|i| Bytes::from(format!("a-key-longer-than-22-bytes-{i}"))));
        keys.push(Bytes::new());
        keys
    }

    /// Every key that exists (expired ones not yet deleted included), by slot and key, with the
    /// bytes and expiry the index should hold: the old walk, brute force.
    fn walked(k: &mut Keyspace) -> Vec<(Vec<u8>, u32, Option<u64>)> {
        // At time 0 no key has expired (an expiry is at 1 or later), so the walk sees them all.
        let (keys, next) = k.scan(None, usize::MAX, 0, &|_| true).expect("scan");
        assert_eq!(next, None);
        let mut all: Vec<(u16, Vec<u8>, u32, Option<u64>)> = keys
            .iter()
            .map(|key| {
                let v = k.peek(key, 0).expect("peek").expect("a key the walk found");
                (key_slot(key), key.to_vec(), size_of(key, &v), v.expires_at)
            })
            .collect();
        all.sort();
        all.into_iter().map(|(_, k, b, e)| (k, b, e)).collect()
    }

    fn assert_matches_walk(k: &mut Keyspace, what: &str) {
        let expect = walked(k);
        let mut slots: Vec<u16> = universe().iter().map(|k| key_slot(k)).collect();
        slots.extend(expect.iter().map(|(k, _, _)| key_slot(k)));
        slots.sort_unstable();
        slots.dedup();
        let ix = k.slots.as_ref().expect("the index is built");
        assert_eq!(ix.len(), expect.len() as u64, "{what}: keys in every slot");
        assert_eq!(ix.checked_entries(&slots), expect, "{what}");
    }

    /// The slot commands' answers at `now` against a walk of the live keys.
    fn assert_queries_match_walk(k: &mut Keyspace, now: u64, rng: &mut Rng, what: &str) {
        let (live, _) = k.scan(None, usize::MAX, now, &|_| true).expect("scan");
        let mut per_slot = vec![(0u64, 0u64); usize::from(SLOTS)];
        let mut ordered: Vec<(u16, Bytes)> = Vec::new();
        for key in live {
            let v = k.peek(&key, now).expect("peek").expect("live");
            let s = key_slot(&key);
            per_slot[usize::from(s)].0 += 1;
            per_slot[usize::from(s)].1 += u64::from(size_of(&key, &v));
            ordered.push((s, key));
        }
        ordered.sort();
        assert_eq!(
            k.slot_stats(now).expect("stats"),
            per_slot,
            "{what}: SLOTSTATS"
        );
        let slot = key_slot(&universe()[rng.below(universe().len() as u64) as usize]);
        assert_eq!(
            k.slot_count(&[slot], now).expect("count"),
            per_slot[usize::from(slot)].0,
            "{what}: COUNTKEYSINSLOT {slot}"
        );
        // Every slot, walked a few keys at a time.
        let all: Vec<u16> = (0..SLOTS).collect();
        let (mut got, mut after) = (Vec::new(), None::<Bytes>);
        loop {
            let (keys, next) = k
                .slot_keys(&all, after.as_deref(), 3, now)
                .expect("walk")
                .expect("a token");
            got.extend(keys);
            match next {
                Some(t) => after = Some(t),
                None => break,
            }
        }
        let expect: Vec<Bytes> = ordered.into_iter().map(|(_, k)| k).collect();
        assert_eq!(got, expect, "{what}: SLOTKEYS");
    }

    /// A seeded mix of writes, deletes, reads, expiries (lazy and swept), evictions, resizes,
    /// rebuilds, flushes, commits and reopenings of the store, with the index compared with a
    /// walk of every key after each step.
    fn model(store: bool, seed: u64, steps: usize) {
        let mut rng = Rng(seed);
        let keys = universe();
        let backing: Option<Arc<dyn Store>> = store.then(|| Arc::new(MemStore::new()) as _);
        let mut k = Keyspace::new("lru", Capacity::Keys(8), backing.clone()).expect("keyspace");
        let mut now = 1_000u64;
        // Built after some writes (over what is pending and committed), not at the start.
        let build_at = rng.below(40) as usize;
        for step in 0..steps {
            if step == build_at {
                k.index_slots().expect("index");
            }
            let key = keys[rng.below(keys.len() as u64) as usize].clone();
            let what = format!("seed {seed} store {store} step {step}");
            match rng.below(100) {
                0..35 => {
                    let len = rng.below(40) as usize;
                    let v = Value {
                        data: Bytes::from(vec![b'v'; len]),
                        expires_at: (rng.below(10) < 3).then(|| now + 1 + rng.below(60)),
                    };
                    k.set(key, v).expect("set");
                }
                35..50 => {
                    k.delete(&key, now).expect("delete");
                }
                50..60 => {
                    k.get(&key, now).expect("get");
                }
                60..66 => now += rng.below(30),
                66..70 => {
                    k.expire_sweep(now, 5).expect("sweep");
                }
                70..76 => k.commit().expect("commit"),
                76 => k.flush().expect("flush"),
                77..81 => {
                    let cap = Capacity::Keys(1 + rng.below(12));
                    k.resize(cap).expect("resize");
                }
                81 => {
                    let algo = ["lru", "fifo", "s3fifo", "clock"][rng.below(4) as usize];
                    let cap = Capacity::Keys(2 + rng.below(10));
                    k.rebuild(algo, cap).expect("rebuild");
                }
                82..86 if step > build_at => {
                    assert_queries_match_walk(&mut k, now, &mut rng, &what);
                }
                86 if store => {
                    // Reopened: the writes committed, a new keyspace over the same store, its
                    // index built by one walk.
                    k.commit().expect("commit");
                    k = Keyspace::new("lru", Capacity::Keys(8), backing.clone()).expect("keyspace");
                    if step > build_at {
                        k.index_slots().expect("index");
                    }
                }
                _ => {
                    k.trim(rng.below(6));
                }
            }
            if k.slots.is_some() {
                assert_matches_walk(&mut k, &what);
            }
        }
    }

    #[test]
    fn the_index_equals_a_walk_of_every_key_through_random_writes_with_a_store() {
        for seed in 1..=6 {
            model(true, seed, 2_000);
        }
    }

    #[test]
    fn the_index_equals_a_walk_of_every_key_through_random_writes_without_a_store() {
        for seed in 1..=6 {
            model(false, seed, 2_000);
        }
    }

    /// A slot move's walk (`PLIANT.SLOTKEYS`) with keys written, rewritten with other sizes
    /// (which moves them within memory), deleted and added between its calls: every key present
    /// throughout is returned exactly once, and no key twice.
    #[test]
    fn a_walk_of_slots_resumes_from_its_token_whatever_is_written_between_calls() {
        for store in [false, true] {
            for seed in 1..=4 {
                let mut rng = Rng(seed);
                let backing: Option<Arc<dyn Store>> = store.then(|| Arc::new(MemStore::new()) as _);
                let mut k =
                    Keyspace::new("lru", Capacity::Keys(10_000), backing).expect("keyspace");
                k.index_slots().expect("index");
                let key = |i: u64| Bytes::from(format!("{{t{}}}key:{i}", i % 5));
                for i in 0..300 {
                    k.set(key(i), Value::new(vec![b'v'; 10])).expect("set");
                }
                let mut wanted: Vec<u16> = (0..5)
                    .map(|t| key_slot(format!("{{t{t}}}").as_bytes()))
                    .collect();
                wanted.sort_unstable();
                wanted.dedup();
                let mut touched = std::collections::HashSet::new();
                let mut returned: Vec<Bytes> = Vec::new();
                let mut after: Option<Bytes> = None;
                let mut next_new = 300;
                loop {
                    let (keys, next) = k
                        .slot_keys(&wanted, after.as_deref(), 7, 0)
                        .expect("walk")
                        .expect("a token");
                    returned.extend(keys);
                    for _ in 0..5 {
                        let i = rng.below(next_new);
                        match rng.below(3) {
                            0 => {
                                k.delete(&key(i), 0).expect("delete");
                                touched.insert(i);
                            }
                            1 => {
                                let len = 1 + rng.below(50) as usize;
                                k.set(key(i), Value::new(vec![b'w'; len])).expect("set");
                            }
                            _ => {
                                k.set(key(next_new), Value::new("new")).expect("set");
                                touched.insert(next_new);
                                next_new += 1;
                            }
                        }
                    }
                    if rng.below(4) == 0 {
                        k.commit().expect("commit");
                    }
                    match next {
                        Some(t) => after = Some(t),
                        None => break,
                    }
                }
                let mut seen = std::collections::HashSet::new();
                for r in &returned {
                    assert!(seen.insert(r.clone()), "{r:?} returned twice");
                }
                for i in (0..300).filter(|i| !touched.contains(i)) {
                    assert!(
                        seen.contains(&key(i)),
                        "key {i}, present throughout, skipped"
                    );
                }
            }
        }
    }

    /// Without a store an evicted key is gone, and leaves the index; with one it stays there.
    #[test]
    fn an_evicted_key_leaves_the_index_only_without_a_store() {
        for store in [false, true] {
            let backing: Option<Arc<dyn Store>> = store.then(|| Arc::new(MemStore::new()) as _);
            let mut k = Keyspace::new("lru", Capacity::Keys(2), backing).expect("keyspace");
            k.index_slots().expect("index");
            for key in ["{s}a", "{s}b", "{s}c"] {
                k.set(Bytes::from(key), Value::new("v")).expect("set");
            }
            let slot = key_slot(b"{s}");
            assert_eq!(
                k.slot_count(&[slot], 0).expect("count"),
                if store { 3 } else { 2 },
                "store {store}"
            );
        }
    }

    /// A batch the store failed is not in the store, so its writes leave the index: it says
    /// what the store holds (what a restart would build it from).
    #[test]
    fn the_writes_of_a_failed_batch_leave_the_index() {
        let faulty = pliant_store::FaultyStore::new(MemStore::new());
        let faults = faulty.faults();
        let store: Arc<dyn Store> = Arc::new(faulty);
        let mut k = Keyspace::new("lru", Capacity::Keys(10), Some(store)).expect("keyspace");
        k.index_slots().expect("index");
        k.set(Bytes::from_static(b"{s}a"), Value::new("1"))
            .expect("set");
        k.set(Bytes::from_static(b"{s}b"), Value::new("2"))
            .expect("set");
        k.commit().expect("commit");
        k.set(Bytes::from_static(b"{s}a"), Value::new("longer"))
            .expect("set");
        k.set(Bytes::from_static(b"{s}c"), Value::new("3"))
            .expect("set");
        k.delete(b"{s}b", 0).expect("delete");
        faults.fail_write(1);
        assert!(k.commit().is_err());
        let slot = key_slot(b"{s}");
        let ix = k.slots.as_ref().expect("index");
        assert_eq!(
            ix.checked_entries(&[slot]),
            [(b"{s}a".to_vec(), 5, None), (b"{s}b".to_vec(), 5, None)],
            "as the store holds them"
        );
    }

    /// Over a parent, the index holds what memory holds of the parent's keys (what a walk
    /// listed before it): puts forwarded and fetches come in, invalidations and evictions go.
    #[test]
    fn over_a_parent_the_index_follows_what_memory_holds() {
        let mut k = Keyspace::over_parent("lru", Capacity::Keys(3)).expect("keyspace");
        k.index_slots().expect("index");
        for key in ["{p}a", "{p}b"] {
            k.put_forwarded(key.as_bytes(), Value::new("v"));
        }
        let Want::Fetch(done) = k.want(b"{p}c", 0) else {
            panic!("not held: fetched");
        };
        let fetched: Fetched = Ok(Some(Value::new("fetched")));
        k.fetched(b"{p}c", &fetched);
        done.done(&fetched);
        assert_matches_walk(&mut k, "puts and a fetch");
        assert_eq!(k.slot_count(&[key_slot(b"{p}")], 0).expect("count"), 3);
        k.put_forwarded(b"{p}d", Value::new("v"));
        assert_matches_walk(&mut k, "an eviction");
        k.invalidate(Some(&[Bytes::from_static(b"{p}c")]));
        assert_matches_walk(&mut k, "one key invalidated");
        assert_eq!(k.slot_count(&[key_slot(b"{p}")], 0).expect("count"), 2);
        k.invalidate(None);
        assert_matches_walk(&mut k, "every key invalidated");
        assert_eq!(k.slot_count(&[key_slot(b"{p}")], 0).expect("count"), 0);
    }

    /// A count leaves out keys whose expiry passed, and deletes them, in the store too.
    #[test]
    fn a_count_deletes_the_slots_expired_keys_and_leaves_them_out() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let mut k = Keyspace::new("lru", Capacity::Keys(1), Some(store.clone())).expect("ks");
        k.index_slots().expect("index");
        for (key, at) in [("{s}a", Some(50)), ("{s}b", Some(500)), ("{s}c", None)] {
            let v = Value {
                data: Bytes::from_static(b"v"),
                expires_at: at,
            };
            k.set(Bytes::from(key), v).expect("set");
        }
        k.commit().expect("commit");
        let slot = key_slot(b"{s}");
        assert_eq!(k.slot_count(&[slot], 10).expect("count"), 3);
        assert_eq!(k.slot_count(&[slot], 100).expect("count"), 2);
        k.commit().expect("commit");
        assert_eq!(
            store.get(b"{s}a").expect("get"),
            None,
            "deleted in the store"
        );
        assert_eq!(
            k.slot_stats(1_000).expect("stats")[usize::from(slot)],
            (1, 5)
        );
    }
}
