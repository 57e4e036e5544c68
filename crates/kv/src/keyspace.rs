//! The keyspace of one node: a memory tier whose order and capacity come from a `pliant-cache`
//! algorithm, over an optional persistent store that holds every key.
//!
//! With a store, the store is the truth and memory a cache of it: writes go to the store first
//! (write-through), a read that misses in memory is read from the store and kept in memory
//! (read-through, as a ParSplice tier keeps what it fetched), and eviction drops values from
//! memory only. Without a store (`--no-store`) memory is all there is, and an evicted key is gone,
//! as in a Redis run with `maxmemory` and no persistence.
//!
//! Expiry is lazy: an expired key is deleted when it is next touched, and never returned.
//! Times are unix milliseconds passed in by the caller, so tests choose the clock.
//!
//! In the store, a value is one flag byte (0: no expiry; 1: an expiry follows as a big-endian
//! `u64` of unix milliseconds) and the value's bytes.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;
use pliant_cache::{Cache, Capacity, Evicted, Request};
use pliant_store::{Store, StoreError};

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
    #[error("{0}")]
    Algorithm(#[from] pliant_cache::AlgorithmError),
    /// An earlier commit to the store failed; writes are refused from then on, since what is in
    /// memory could no longer be told durable.
    #[error("writes are refused since the store failed: {0}; restart the node once it is fixed")]
    Failed(String),
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

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(9 + self.data.len());
        match self.expires_at {
            None => out.push(0),
            Some(t) => {
                out.push(1);
                out.extend_from_slice(&t.to_be_bytes());
            }
        }
        out.extend_from_slice(&self.data);
        out
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
            Some(1) if raw.len() >= 9 => {
                let mut t = [0; 8];
                t.copy_from_slice(&raw[1..9]);
                Ok(Self {
                    data: Bytes::from(raw).slice(9..),
                    expires_at: Some(u64::from_be_bytes(t)),
                })
            }
            Some(1) => Err(corrupt("expiry cut short")),
            Some(_) => Err(corrupt("unknown flag byte")),
            None => Err(corrupt("empty")),
        }
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
    /// Writes (puts and deletes) to the store.
    pub store_writes: u64,
    /// Syncs of the store.
    pub store_syncs: u64,
    /// Values written (SET and every command that stores a value).
    pub writes: u64,
}

/// Reads kept for a policy's `timeseries()` between two decisions; past this many, reads are not
/// recorded until the policy takes them (a decision every few seconds takes them long before).
pub const MAX_RECORDED_READS: usize = 1 << 20;

/// A key and its value in memory: one allocation holding the key's bytes then the value's, so a
/// key costs one map entry of 32 bytes and one heap block.
#[derive(Debug)]
struct Slot {
    data: Box<[u8]>,
    key_len: u32,
    /// Unix milliseconds; 0 for no expiry.
    expires_at: u64,
}

impl Slot {
    fn new(key: &[u8], v: &Value) -> Self {
        let mut data = Vec::with_capacity(key.len() + v.data.len());
        data.extend_from_slice(key);
        data.extend_from_slice(&v.data);
        Self {
            data: data.into_boxed_slice(),
            // Keys are at most the store's MAX_KEY_LEN (64 KiB), and a memory-only node's come
            // from requests bounded by --max-value-size; clamp rather than wrap.
            key_len: u32::try_from(key.len()).unwrap_or(u32::MAX),
            expires_at: v.expires_at.map_or(0, |t| t.max(1)),
        }
    }

    fn key(&self) -> &[u8] {
        &self.data[..self.key_len as usize]
    }

    fn live(&self, now: u64) -> bool {
        self.expires_at == 0 || self.expires_at > now
    }

    /// The value, copied out (the copy is what a reply sends).
    fn value(&self) -> Value {
        Value {
            data: Bytes::copy_from_slice(&self.data[self.key_len as usize..]),
            expires_at: (self.expires_at != 0).then_some(self.expires_at),
        }
    }

    /// Key and value bytes, as a byte capacity counts them.
    fn size(&self) -> u32 {
        u32::try_from(self.data.len()).unwrap_or(u32::MAX)
    }
}

/// One node's keys (see the module doc).
pub struct Keyspace {
    /// The memory tier's keys and values by id ([`Keyspace::id_of`], the number the algorithm
    /// knows a key by): one map, so an eviction finds its value directly, lookups compare
    /// integers rather than key bytes, and SCAN without a store walks ids in order.
    mem: BTreeMap<u64, Slot>,
    cache: Cache,
    algo: String,
    store: Option<Arc<dyn Store>>,
    /// Writes since the store was last synced.
    unsynced: bool,
    /// Store writes not yet committed (`None`: a deletion), newest per key: a pipeline's writes,
    /// and those of every client served meanwhile, go to the store as one batch ([`commit`]).
    ///
    /// [`commit`]: Keyspace::commit
    pending: std::collections::HashMap<Vec<u8>, Option<Vec<u8>>, foldhash::fast::FixedState>,
    /// Why writes are refused, once a commit failed.
    failed: Option<String>,
    stats: KvStats,
    /// `(unix seconds, key id)` of reads since a policy last took them; `None` when no policy
    /// asks for them.
    reads: Option<Vec<(f64, f64)>>,
    ids_hasher: foldhash::fast::FixedState,
}

impl std::fmt::Debug for Keyspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyspace")
            .field("keys_in_memory", &self.mem.len())
            .field("algorithm", &self.algo)
            .field("capacity", &self.cache.capacity())
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
            mem: BTreeMap::new(),
            cache,
            algo: algo.to_string(),
            store,
            unsynced: false,
            pending: Default::default(),
            failed: None,
            stats: KvStats::default(),
            reads: None,
            ids_hasher: foldhash::fast::FixedState::with_seed(11),
        })
    }

    /// The counters.
    pub fn stats(&self) -> KvStats {
        self.stats
    }

    /// The memory tier's algorithm spec.
    pub fn algorithm(&self) -> &str {
        &self.algo
    }

    /// The memory tier's capacity.
    pub fn capacity(&self) -> Capacity {
        self.cache.capacity()
    }

    /// Keys and bytes (keys plus values) the memory tier holds.
    pub fn memory(&self) -> (u64, u64) {
        let s = self.cache.stats();
        (s.keys, s.bytes)
    }

    /// Whether a persistent store is below memory.
    pub fn has_store(&self) -> bool {
        self.store.is_some()
    }

    /// Changes the memory tier's capacity; a smaller one evicts at once in the algorithm's order.
    /// Fails if the units differ (a key capacity cannot become a byte one).
    pub fn resize(&mut self, capacity: Capacity) -> Result<(), String> {
        if capacity.units() != self.cache.capacity().units() {
            return Err(format!(
                "the capacity counts {}; it cannot become {capacity}",
                match self.cache.capacity() {
                    Capacity::Keys(_) => "keys",
                    Capacity::Bytes(_) => "bytes",
                }
            ));
        }
        let mut gone = Vec::new();
        self.cache
            .resize_evicting(capacity, &mut |e: Evicted| gone.push(e.key));
        self.drop_evicted(gone);
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

    /// The value of `key`, if it exists.
    pub fn get(&mut self, key: &[u8], now: u64) -> Result<Option<Bytes>, KvError> {
        let id = self.id_of(key);
        if let Some(reads) = &mut self.reads
            && reads.len() < MAX_RECORDED_READS
        {
            reads.push((now as f64 / 1000.0, (id >> 11) as f64));
        }
        let v = self.read_id(key, id, now)?;
        match &v {
            Some(_) => self.stats.keyspace_hits += 1,
            None => self.stats.keyspace_misses += 1,
        }
        Ok(v.map(|v| v.data))
    }

    /// The whole value (with its expiry) of `key`, as reads see it: a memory hit, or fetched from
    /// the store and kept in memory. Not counted as a keyspace hit or miss (commands that only
    /// inspect a key, like TTL, are not reads in Redis's counters either).
    pub fn read(&mut self, key: &[u8], now: u64) -> Result<Option<Value>, KvError> {
        self.read_id(key, self.id_of(key), now)
    }

    /// [`read`](Self::read) of `key`, whose id is `id`.
    fn read_id(&mut self, key: &[u8], id: u64, now: u64) -> Result<Option<Value>, KvError> {
        if let Some(slot) = self.slot(id, key) {
            let (size, live) = (slot.size(), slot.live(now));
            if !live {
                self.expire(key)?;
                return Ok(None);
            }
            let value = slot.value();
            self.cache.get(&Request::new(id, size));
            self.stats.hits += 1;
            self.stats.hit_bytes += u64::from(size);
            return Ok(Some(value));
        }
        self.stats.misses += 1;
        let found = match &self.store {
            None => None,
            Some(store) => {
                self.stats.store_reads += 1;
                Self::stored(&self.pending, store.as_ref(), key)?
                    .map(|raw| Value::decode(key, raw))
                    .transpose()?
            }
        };
        // The miss is an access of the key as the algorithm sees it: one that keeps ghosts
        // (S3-FIFO, ARC) learns of it, as in the simulator's `access`.
        let size = found.as_ref().map_or(0, |v| size_of(key, v));
        self.cache.get(&Request::new(id, size));
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
        let Some(store) = &self.store else {
            return Ok(None);
        };
        self.stats.store_reads += 1;
        let raw = Self::stored(&self.pending, store.as_ref(), key)?;
        match raw {
            None => Ok(None),
            Some(raw) => Ok(Some(Value::decode(key, raw)?).filter(|v| v.live(now))),
        }
    }

    /// Sets `key` to `v`: in the store first (it is the truth), then in memory.
    pub fn set(&mut self, key: Bytes, v: Value) -> Result<(), KvError> {
        if let Some(why) = &self.failed {
            return Err(KvError::Failed(why.clone()));
        }
        self.stats.writes += 1;
        if self.store.is_some() {
            self.pending.insert(key.to_vec(), Some(v.encode()));
            self.stats.store_writes += 1;
        }
        self.keep(&key, v);
        Ok(())
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
        let Some(store) = &self.store else {
            return Ok(false);
        };
        self.stats.store_reads += 1;
        let raw = Self::stored(&self.pending, store.as_ref(), key)?;
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
        self.commit()?;
        let budget = count.saturating_mul(10).saturating_add(100);
        let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut found = Vec::new();
        let mut examined = 0;
        if let Some(store) = &self.store {
            for entry in store.range((lower, Bound::Unbounded)) {
                let (k, raw) = entry?;
                examined += 1;
                let v = Value::decode(&k, raw)?;
                let k = Bytes::from(k);
                if v.live(now) && filter(&k) {
                    found.push(k.clone());
                }
                if found.len() >= count || examined >= budget {
                    return Ok((found, Some(k)));
                }
            }
        } else {
            let lower = match after {
                None => Bound::Unbounded,
                Some(t) => match <[u8; 8]>::try_from(t) {
                    Ok(b) => Bound::Excluded(u64::from_be_bytes(b)),
                    Err(_) => return Ok((found, None)),
                },
            };
            for (id, slot) in self.mem.range((lower, Bound::Unbounded)) {
                examined += 1;
                if slot.live(now) && filter(slot.key()) {
                    found.push(Bytes::copy_from_slice(slot.key()));
                }
                if found.len() >= count || examined >= budget {
                    return Ok((found, Some(Bytes::copy_from_slice(&id.to_be_bytes()))));
                }
            }
        }
        Ok((found, None))
    }

    /// Keys that exist (expired ones not yet collected included, as Redis's `DBSIZE`). With a
    /// store this walks it.
    pub fn len(&mut self) -> Result<u64, KvError> {
        self.commit()?;
        match &self.store {
            None => Ok(self.mem.len() as u64),
            Some(store) => {
                let mut n = 0;
                for entry in store.range((Bound::Unbounded, Bound::Unbounded)) {
                    entry?;
                    n += 1;
                }
                Ok(n)
            }
        }
    }

    /// Whether there are no keys.
    pub fn is_empty(&mut self) -> Result<bool, KvError> {
        Ok(self.len()? == 0)
    }

    /// Deletes every key, in the store too.
    pub fn flush(&mut self) -> Result<(), KvError> {
        self.commit()?;
        if let Some(store) = &self.store {
            let keys: Vec<Vec<u8>> = store
                .range((Bound::Unbounded, Bound::Unbounded))
                .map(|e| e.map(|(k, _)| k))
                .collect::<Result<_, _>>()?;
            let mut batch = pliant_store::Batch::new();
            for k in &keys {
                batch.delete(k);
            }
            store.batch(&batch)?;
            self.stats.store_writes += 1;
            self.unsynced = true;
        }
        for (id, _) in std::mem::take(&mut self.mem) {
            self.cache.remove(id);
        }
        Ok(())
    }

    /// Hands the writes not yet committed to the store as one batch (in the store's journal,
    /// not yet synced: what `--durability none` and `everysec` acknowledge). If the store fails,
    /// the keys written since the last commit leave memory (which would otherwise serve values the
    /// store does not have), and every later write is refused ([`KvError::Failed`]).
    pub fn commit(&mut self) -> Result<(), KvError> {
        if let Some(why) = &self.failed {
            return Err(KvError::Failed(why.clone()));
        }
        let Some(store) = &self.store else {
            return Ok(());
        };
        if self.pending.is_empty() {
            return Ok(());
        }
        let mut batch = pliant_store::Batch::new();
        for (k, v) in &self.pending {
            match v {
                Some(v) => batch.put(k, v),
                None => batch.delete(k),
            };
        }
        match store.batch(&batch) {
            Ok(()) => {
                self.pending.clear();
                self.unsynced = true;
                Ok(())
            }
            Err(e) => {
                let keys: Vec<Vec<u8>> = self.pending.drain().map(|(k, _)| k).collect();
                for k in keys {
                    let id = self.id_of(&k);
                    if self.slot(id, &k).is_some() {
                        self.mem.remove(&id);
                        self.cache.remove(id);
                    }
                }
                self.failed = Some(e.to_string());
                Err(e.into())
            }
        }
    }

    /// Makes every write so far durable; a no-op without a store or without writes.
    pub fn sync(&mut self) -> Result<(), KvError> {
        self.commit()?;
        if let Some(store) = &self.store
            && self.unsynced
        {
            store.sync()?;
            self.unsynced = false;
            self.stats.store_syncs += 1;
        }
        Ok(())
    }

    /// Whether writes are waiting for a commit.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Whether writes are waiting for a sync.
    pub fn unsynced(&self) -> bool {
        self.unsynced
    }

    fn expire(&mut self, key: &[u8]) -> Result<(), KvError> {
        self.stats.expired += 1;
        self.remove(key)
    }

    fn remove(&mut self, key: &[u8]) -> Result<(), KvError> {
        if let Some(why) = &self.failed {
            return Err(KvError::Failed(why.clone()));
        }
        if self.store.is_some() {
            self.pending.insert(key.to_vec(), None);
            self.stats.store_writes += 1;
        }
        let id = self.id_of(key);
        if self.slot(id, key).is_some() {
            self.mem.remove(&id);
            self.cache.remove(id);
        }
        Ok(())
    }

    /// Puts `key` in the memory tier (replacing what it held), evicting as the algorithm says.
    fn keep(&mut self, key: &[u8], v: Value) {
        let size = size_of(key, &v);
        let id = self.id_of(key);
        let new = Slot::new(key, &v);
        if let Some(old) = self.mem.insert(id, new)
            && old.key() != key
        {
            // Two keys with one 64-bit hash share a place in the algorithm's order: the one held
            // leaves memory (the store keeps it), as an eviction would take it.
            self.cache.remove(id);
            self.stats.evictions += 1;
        }
        let mut gone = Vec::new();
        let outcome = self
            .cache
            .put_evicting(&Request::new(id, size), &mut |e: Evicted| gone.push(e.key));
        if outcome == pliant_cache::PutOutcome::Rejected {
            // Larger than the memory tier: it lives in the store only (or, without one, nowhere,
            // as a Redis whose maxmemory is below the value).
            gone.push(id);
        }
        self.drop_evicted(gone);
    }

    /// What the store holds for `key` once the writes not yet committed are counted.
    fn stored(
        pending: &std::collections::HashMap<Vec<u8>, Option<Vec<u8>>, foldhash::fast::FixedState>,
        store: &dyn Store,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>, KvError> {
        match pending.get(key) {
            Some(p) => Ok(p.clone()),
            None => Ok(store.get(key)?),
        }
    }

    /// The slot holding `key` (whose id is `id`), if memory holds it.
    fn slot(&self, id: u64, key: &[u8]) -> Option<&Slot> {
        self.mem.get(&id).filter(|s| s.key() == key)
    }

    /// The number the algorithm knows `key` by: a hash of its bytes, the same every time the key
    /// comes back, so that the ghosts of S3-FIFO and ARC recognise it.
    fn id_of(&self, key: &[u8]) -> u64 {
        use std::hash::BuildHasher;
        self.ids_hasher.hash_one(key)
    }

    fn drop_evicted(&mut self, gone: Vec<u64>) {
        for id in gone {
            if self.mem.remove(&id).is_some() {
                self.stats.evictions += 1;
            }
        }
    }
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
}
