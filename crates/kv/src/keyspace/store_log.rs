//! Store writes off the keyspace lock.
//!
//! A client's writes wait in the keyspace's `pending` map until its batch of commands ends; then
//! they must reach the store (a journal append) before any of them is acknowledged. Written under
//! the keyspace lock, that append stalled every client of the node for as long as the store
//! took (an append that meets a full page cache, a stall in the OS). So a commit takes `pending`
//! under the lock as a *queued batch* with the next sequence number, lets go of the lock, and
//! only then writes: the batches reach the store in sequence order, through one writer lock.
//!
//! **Combining.** Whoever holds the writer lock writes every batch queued at that moment, as one
//! store batch (their writes in sequence order, so a later batch's write of a key wins); a
//! committer that finds its batch written by another is done. Under load one journal append
//! carries many clients' batches. An async committer that finds the writer busy does not block
//! its worker thread on it: it waits for the write under way to end ([`StoreLog::written`]) and
//! looks again. The write itself runs on the committer's thread (an append to the page cache, as
//! Redis's AOF write runs in its event loop), never under the keyspace lock.
//!
//! **Reads.** Until its write returns, a queued batch is what the store will hold: reads look in
//! `pending`, then in the queued batches newest first, then in loans and the store. A batch
//! leaves the queue only once it is in the store, so a read never falls between the two.
//!
//! **Paths under the keyspace lock** (SCAN, DBSIZE, FLUSHDB, INFO keyspace) need the store
//! complete: they take the writer lock with the keyspace held and write the queue first. The
//! writer never takes the keyspace lock, so this cannot deadlock. Lock order everywhere:
//! keyspace, then writer, then the log's own state.
//!
//! **Failure.** A failed store write is recorded once ([`StoreLog::failed`]); every batch not yet
//! written then is refused with it, and so is every later write (as before: writes are refused
//! until restart, since what memory holds could no longer be told durable). The keys of the
//! batches that failed or were refused must leave memory, which the log cannot reach: they wait
//! in `doomed` for the next holder of the keyspace lock ([`super::Keyspace::drop_doomed`]). The
//! committer whose batch failed gets the error and acknowledges nothing.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, TryLockError};

use pliant_store::{Batch, SharedBytes, Store, StoreError};

use super::KvError;

/// Writes taken from `pending`: the newest value of each key (`None`: a deletion). Clients choose
/// the keys, so the hasher is seeded at random (a fixed seed let keys that collide be computed
/// in advance, and every insert of them cost a walk of the others, under the keyspace lock).
pub(super) type Writes =
    std::collections::HashMap<SharedBytes, Option<SharedBytes>, foldhash::fast::RandomState>;

/// A batch taken from `pending`, not yet in the store.
#[derive(Debug)]
struct Queued {
    seq: u64,
    writes: Writes,
}

#[derive(Debug, Default)]
struct State {
    /// Batches taken but not yet written, in sequence order.
    queued: VecDeque<Arc<Queued>>,
    /// The sequence of the latest batch taken (written, queued or refused).
    taken: u64,
    /// Batches written so far; they are written in sequence order, so this is also the latest
    /// written batch's sequence, what group commit waits on.
    commits: u64,
    /// Writes since the store was last synced.
    unsynced: bool,
    /// Keys of batches that failed or were refused: memory must let go of them.
    doomed: Vec<Vec<u8>>,
    /// Maps of written batches, emptied, for the next batches to fill: a map made anew for
    /// every batch grew, and rehashed, from nothing each time.
    spare: Vec<Writes>,
    /// The spare maps' capacity, in entries, all told.
    spare_entries: usize,
}

/// Spare maps kept, in entries of capacity all told, and the largest kept: one huge batch does
/// not keep its table. Not a count of maps: under group commit every waiting client's batch is a
/// map of its own and one store write frees as many as there were clients (50 in
/// `tools/bench/group_commit.sh`), where a bound of 4 maps had 46 of every 50 batches grow a new
/// one from nothing (`malloc` and hashbrown's rehash: 3% of the serving thread, perf).
const SPARE_ENTRIES: usize = 16 * 1024;
const SPARE_CAPACITY: usize = 4096;

/// The writer lock, held: dropped, it lets go of the lock and then wakes the committers waiting
/// for it, even when the store write panicked (they would otherwise wait for the next write).
struct Writing<'a> {
    guard: Option<MutexGuard<'a, ()>>,
    log: &'a StoreLog,
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        self.log.written.notify_waiters();
    }
}

/// The batches between the keyspace and its store (see the module doc).
#[derive(Debug)]
pub(crate) struct StoreLog {
    store: Arc<dyn Store>,
    /// Held for each store write: orders them.
    writer: Mutex<()>,
    state: Mutex<State>,
    /// The first failed write's error: every write after it is refused with it.
    failed: OnceLock<Arc<StoreError>>,
    /// Whether `doomed` holds keys (read at every acquisition of the keyspace lock).
    dooming: AtomicBool,
    /// Whether any batch is queued: a read of a key memory lacks looks in the queue only then
    /// (the look took the state's lock on every miss, 2% of a GET's instructions over a store).
    /// Set under the state lock before a batch is queued, cleared under it once none is.
    queuing: AtomicBool,
    /// Notified after each write ends and the writer lock is free again.
    written: tokio::sync::Notify,
    /// Fsyncs that covered what was written (`INFO`'s `store_syncs`).
    syncs: AtomicU64,
}

impl StoreLog {
    pub(super) fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            writer: Mutex::new(()),
            state: Mutex::default(),
            failed: OnceLock::new(),
            dooming: AtomicBool::new(false),
            queuing: AtomicBool::new(false),
            written: tokio::sync::Notify::new(),
            syncs: AtomicU64::new(0),
        }
    }

    // A panic while either is held leaves the state whole (each change completes under it).
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn writer(&self) -> Writing<'_> {
        Writing {
            guard: Some(self.writer.lock().unwrap_or_else(|p| p.into_inner())),
            log: self,
        }
    }

    /// Why writes are refused, once a store write failed.
    pub(crate) fn failed(&self) -> Option<&Arc<StoreError>> {
        self.failed.get()
    }

    /// Queues the writes of `pending` as the next batch, leaving it empty: its sequence. With no
    /// writes, the latest batch taken (what a client whose writes another committer took must
    /// see written). Refused once a write failed, `pending` left as it was.
    pub(super) fn queue(&self, pending: &mut Writes) -> Result<u64, Arc<StoreError>> {
        let mut st = self.state();
        if let Some(why) = self.failed.get() {
            return Err(why.clone());
        }
        if pending.is_empty() {
            return Ok(st.taken);
        }
        let spare = match st.spare.pop() {
            Some(map) => {
                st.spare_entries -= map.capacity();
                map
            }
            None => Writes::default(),
        };
        let writes = std::mem::replace(pending, spare);
        st.taken += 1;
        let seq = st.taken;
        self.queuing.store(true, Ordering::Release);
        st.queued.push_back(Arc::new(Queued { seq, writes }));
        Ok(seq)
    }

    /// What a queued batch says `key` holds (`Some(None)`: deleted), the newest first.
    pub(super) fn lookup(&self, key: &[u8]) -> Option<Option<Vec<u8>>> {
        // Queued under the keyspace lock, which the caller holds: a batch queued before this
        // read has set the flag.
        if !self.queuing.load(Ordering::Acquire) {
            return None;
        }
        let st = self.state();
        st.queued
            .iter()
            .rev()
            .find_map(|q| q.writes.get(key))
            .map(|v| v.as_deref().map(<[u8]>::to_vec))
    }

    /// Whether a queued batch writes `key`.
    pub(super) fn queues(&self, key: &[u8]) -> bool {
        if !self.queuing.load(Ordering::Acquire) {
            return false;
        }
        let st = self.state();
        st.queued.iter().any(|q| q.writes.contains_key(key))
    }

    /// Writes every queued batch, the writer lock held by the caller.
    fn write_queued(&self, _writer: &Writing<'_>) {
        let batches: Vec<Arc<Queued>> = {
            let mut st = self.state();
            if self.failed.get().is_some() {
                self.refuse_queued(&mut st);
                self.dooming.store(true, Ordering::Release);
                return;
            }
            st.queued.iter().cloned().collect()
        };
        let Some(last) = batches.last().map(|q| q.seq) else {
            return;
        };
        // The queued batches stay readable while the store writes: the store shares their
        // bytes (no copy).
        let mut batch = Batch::new();
        for q in &batches {
            for (k, v) in &q.writes {
                match v {
                    Some(v) => batch.put_shared(k.clone(), v.clone()),
                    None => batch.delete_shared(k.clone()),
                };
            }
        }
        let done = self.store.batch_take(&mut batch);
        let mut st = self.state();
        match done {
            Ok(()) => {
                st.queued.drain(..batches.len());
                if st.queued.is_empty() {
                    self.queuing.store(false, Ordering::Release);
                }
                st.commits = last;
                st.unsynced = true;
                // The writer holds the only other reference to a batch once it left the queue.
                for q in batches {
                    if let Ok(mut q) = Arc::try_unwrap(q)
                        && q.writes.capacity() <= SPARE_CAPACITY
                        && st.spare_entries + q.writes.capacity() <= SPARE_ENTRIES
                    {
                        q.writes.clear();
                        st.spare_entries += q.writes.capacity();
                        st.spare.push(q.writes);
                    }
                }
            }
            Err(e) => {
                tracing::error!(
                    "store write failed; writes are refused until restart: {}",
                    pliant_proto::error::chain(&e)
                );
                let _ = self.failed.set(Arc::new(e));
                self.refuse_queued(&mut st);
                self.dooming.store(true, Ordering::Release);
            }
        }
    }

    /// Every queued batch is refused: its keys are doomed.
    fn refuse_queued(&self, st: &mut State) {
        let queued = std::mem::take(&mut st.queued);
        self.queuing.store(false, Ordering::Release);
        for q in queued {
            match Arc::try_unwrap(q) {
                Ok(q) => st.doomed.extend(q.writes.into_keys().map(|k| k.to_vec())),
                Err(q) => st.doomed.extend(q.writes.keys().map(|k| k.to_vec())),
            }
        }
    }

    /// Whether the batch `seq` is written: `Some(Ok)`, `Some(Err)` if it was refused, `None` if
    /// it is still queued.
    fn outcome(&self, seq: u64) -> Option<Result<(), Arc<StoreError>>> {
        if self.state().commits >= seq {
            return Some(Ok(()));
        }
        self.failed.get().map(|why| Err(why.clone()))
    }

    /// Returns once every batch queued so far is in the store (see
    /// [`write_through`](Self::write_through)).
    pub(crate) fn write_queued_through(&self) -> Result<(), Arc<StoreError>> {
        let taken = self.state().taken;
        self.write_through(taken)
    }

    /// Returns once batch `seq` (and every one before it) is in the store, writing what is
    /// queued if nobody else is; blocks the calling thread for the writer lock. For paths that
    /// hold the keyspace lock: the queue is written before they go on.
    pub(crate) fn write_through(&self, seq: u64) -> Result<(), Arc<StoreError>> {
        if let Some(done) = self.outcome(seq) {
            return done;
        }
        self.write_queued(&self.writer());
        self.outcome(seq).unwrap_or(Ok(()))
    }

    /// Writes what is queued if the writer lock is free; whether it was.
    fn try_write(&self) -> bool {
        let guard = match self.writer.try_lock() {
            Ok(w) => w,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return false,
        };
        self.write_queued(&Writing {
            guard: Some(guard),
            log: self,
        });
        true
    }

    /// [`write_through`](Self::write_through) for a committer on the async workers: while
    /// another holds the writer lock (and may be writing this batch too), it waits for that write
    /// to end without holding its thread.
    pub(crate) async fn write_through_async(&self, seq: u64) -> Result<(), Arc<StoreError>> {
        // Bounded by the queue: each round either writes it (this caller holds the writer) or
        // waits for a write that empties what was queued when it began.
        loop {
            if let Some(done) = self.outcome(seq) {
                return done;
            }
            let ended = self.written.notified();
            tokio::pin!(ended);
            // Registered before the writer is tried: a write that ends in between still wakes it.
            ended.as_mut().enable();
            if !self.try_write() {
                ended.await;
            }
        }
    }

    /// Writes `batch` now, after what is queued, with the keyspace lock held by the caller (so
    /// nothing is queued meanwhile): FLUSHDB's deletions. A failure is the caller's error only
    /// (nothing of it was applied; memory still matches the store).
    pub(super) fn write_now(&self, batch: &mut Batch) -> Result<(), KvError> {
        let done = {
            let w = self.writer();
            self.write_queued(&w);
            match self.failed.get() {
                Some(why) => Err(KvError::Failed(why.clone())),
                None => self.store.batch_take(batch).map_err(KvError::Store),
            }
        };
        done?;
        let mut st = self.state();
        st.taken += 1;
        st.commits = st.taken;
        st.unsynced = true;
        Ok(())
    }

    /// Whether batches failed or were refused whose keys memory still holds.
    pub(crate) fn dooming(&self) -> bool {
        self.dooming.load(Ordering::Acquire)
    }

    /// The keys memory must let go of (see [`dooming`](Self::dooming)); taken.
    pub(super) fn take_doomed(&self) -> Vec<Vec<u8>> {
        if !self.dooming() {
            return Vec::new();
        }
        let mut st = self.state();
        self.dooming.store(false, Ordering::Release);
        std::mem::take(&mut st.doomed)
    }

    /// Batches written so far.
    pub(crate) fn commits(&self) -> u64 {
        self.state().commits
    }

    /// Whether writes are waiting for a sync.
    pub(crate) fn unsynced(&self) -> bool {
        self.state().unsynced
    }

    /// An fsync covered every batch up to sequence `upto`.
    pub(crate) fn synced_through(&self, upto: u64) {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        let mut st = self.state();
        if upto >= st.commits {
            st.unsynced = false;
        }
    }

    /// Fsyncs so far.
    pub(super) fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A written batch's map comes back emptied for the next batch to fill: a map made anew
    /// for every batch grew, and rehashed, from nothing each time. What the store holds is the
    /// batch's, shared, not copied.
    #[test]
    fn a_written_batch_s_map_is_filled_again_by_the_next_batch() {
        let store = Arc::new(pliant_store::MemStore::new());
        let log = StoreLog::new(store.clone());
        let mut pending = Writes::default();
        for i in 0..100u32 {
            pending.insert(i.to_be_bytes()[..].into(), Some(b"v"[..].into()));
        }
        let seq = log.queue(&mut pending).expect("queued");
        assert!(pending.is_empty() && pending.capacity() == 0, "a fresh map");
        log.write_through(seq).expect("written");
        assert_eq!(
            store.get(&7u32.to_be_bytes()).expect("read"),
            Some(b"v".to_vec())
        );
        pending.insert(b"k"[..].into(), None);
        log.queue(&mut pending).expect("queued");
        assert!(
            pending.is_empty() && pending.capacity() >= 100,
            "the written batch's map, emptied: capacity {}",
            pending.capacity()
        );
    }
    /// Group commit writes one batch of every waiting client at once: each comes back for a
    /// later batch to fill (not 4 of them, as a count of maps kept), up to `SPARE_ENTRIES` of
    /// capacity in all, a map larger than `SPARE_CAPACITY` never.
    #[test]
    fn every_batch_of_one_store_write_comes_back_within_the_bound() {
        let log = StoreLog::new(Arc::new(pliant_store::MemStore::new()));
        let mut pending = Writes::default();
        let mut last = 0;
        for i in 0..50u32 {
            pending.insert(i.to_be_bytes()[..].into(), Some(b"v"[..].into()));
            last = log.queue(&mut pending).expect("queued");
        }
        log.write_through(last).expect("written");
        for i in 0..50u32 {
            pending.insert(i.to_be_bytes()[..].into(), None);
            assert!(pending.capacity() > 1, "batch {i} filled a spare map");
            log.queue(&mut pending).expect("queued");
        }
        pending.insert(b"k"[..].into(), None);
        log.queue(&mut pending).expect("queued");
        assert!(pending.capacity() == 0, "the 51st: a fresh map");

        // Huge batches: the one past `SPARE_CAPACITY` is dropped, the rest kept while they fit.
        let log = StoreLog::new(Arc::new(pliant_store::MemStore::new()));
        for n in [SPARE_CAPACITY + 1, 3000, 3000, 3000, 3000, 3000, 3000] {
            for i in 0..n as u32 {
                pending.insert(i.to_be_bytes()[..].into(), None);
            }
            last = log.queue(&mut pending).expect("queued");
        }
        log.write_through(last).expect("written");
        let st = log.state();
        assert!(st.spare.iter().all(|m| m.capacity() <= SPARE_CAPACITY));
        assert_eq!(
            st.spare_entries,
            st.spare.iter().map(Writes::capacity).sum::<usize>()
        );
        assert!(
            st.spare_entries <= SPARE_ENTRIES && st.spare.len() >= 3,
            "{}",
            st.spare.len()
        );
    }
}
