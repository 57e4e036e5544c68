//! A command's keys read from the store before it runs, off the keyspace lock and off the async
//! workers (the keyspace's `store_reads` says why and how a loan stays correct).

use std::sync::Arc;

use bytes::Bytes;
use pliant_store::Store;

use crate::keyspace::{Reading, StoreWant};

use super::Node;

/// Rounds of asking for one command: a round only reads keys whose loan a write made stale (or
/// whose reader went away) since the last; past this the command reads what is left itself, under
/// the lock, as it always could.
const ROUNDS: usize = 4;

/// Reads `readings` from `store`, on the calling (blocking-pool) thread: each one's value, or
/// `None` if the read failed (the command reads again and answers the error), with its time;
/// and when the thread started on them.
#[allow(clippy::type_complexity)]
fn read_all(
    store: &dyn Store,
    readings: Vec<Reading>,
) -> (
    std::time::Instant,
    Vec<(Reading, Option<(Option<Vec<u8>>, f64)>)>,
) {
    let started = std::time::Instant::now();
    let read = readings
        .into_iter()
        .map(|r| {
            let started = std::time::Instant::now();
            let found = store
                .get(r.key())
                .ok()
                .map(|raw| (raw, started.elapsed().as_secs_f64()));
            (r, found)
        })
        .collect();
    (started, read)
}

impl Node {
    /// Makes the store's values of `keys` that memory lacks available to the command about to
    /// read them, reading them with the keyspace unlocked, on the blocking pool; a key another
    /// command is reading already is waited for, not read twice. A no-op without a store.
    pub(crate) async fn read_ahead<'a>(&self, keys: impl Iterator<Item = &'a Bytes> + Clone) {
        let Some(store) = &self.store else {
            return;
        };
        for _ in 0..ROUNDS {
            let (mut reads, mut joins) = (Vec::new(), Vec::new());
            {
                let mut ks = self.keyspace();
                for k in keys.clone() {
                    match ks.store_want(k) {
                        StoreWant::Ready => {}
                        StoreWant::Join(j) => joins.push(j),
                        StoreWant::Read(r) => reads.push(r),
                    }
                }
            }
            if reads.is_empty() && joins.is_empty() {
                return;
            }
            if !reads.is_empty() {
                let store: Arc<dyn Store> = store.clone();
                let started = std::time::Instant::now();
                // Dropped with its readings if it panics, or if this command goes away first:
                // readers that joined them then wake and read for themselves.
                let read = move || read_all(&*store, reads);
                // On the readers' threads, at the lowest CPU priority (`super::readers`).
                let done = match &self.readers {
                    Some(r) => r.spawn(read).await,
                    None => tokio::task::spawn_blocking(read).await,
                };
                let Ok((picked_up, done)) = done else {
                    return;
                };
                let mut ks = self.keyspace();
                // Twice the way there: the way back also wakes a thread, and what it waits for
                // a worker beyond that costs this command, not the others.
                ks.store_handoff(2.0 * picked_up.duration_since(started).as_secs_f64());
                for (r, found) in done {
                    ks.store_read(r, found);
                }
            }
            for j in joins {
                j.wait().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use bytes::Bytes;
    use pliant_cache::Capacity;
    use pliant_store::{FaultyStore, MemStore, OpKind, Store};

    use crate::config::Config;
    use crate::keyspace::{Keyspace, StoreWant, Value};
    use crate::node::Node;

    /// A node over a store that holds `cold` (memory does not) and a memory that holds `hot`.
    fn node() -> (Arc<Node>, pliant_store::Faults) {
        let faulty = FaultyStore::new(MemStore::new());
        let faults = faulty.faults();
        let store: Arc<dyn Store> = Arc::new(faulty);
        let mut ks = Keyspace::new("lru", Capacity::Keys(100), Some(store)).expect("keyspace");
        ks.set(Bytes::from_static(b"cold"), Value::new("from the store"))
            .expect("set");
        ks.commit().expect("commit");
        ks.forget_memory();
        ks.set(Bytes::from_static(b"hot"), Value::new("in memory"))
            .expect("set");
        ks.commit().expect("commit");
        ks.assume_slow_store_reads();
        (Arc::new(Node::new(ks, &Config::default())), faults)
    }

    /// The bug: a GET that missed memory read the store with the keyspace locked, so one client's
    /// disk read stalled every client. Now, while the store holds a miss's read, the keyspace
    /// serves others, and a second reader of the key joins the read under way.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_held_store_read_leaves_the_keyspace_to_others_and_is_joined_not_repeated() {
        let (node, faults) = node();
        let stall = faults.stall(OpKind::Read);
        let reader = {
            let node = node.clone();
            tokio::spawn(async move {
                let cold = Bytes::from_static(b"cold");
                node.read_ahead([&cold].into_iter()).await;
            })
        };
        let held = {
            let s = &stall;
            tokio::task::block_in_place(|| s.wait_held(Duration::from_secs(10)))
        };
        assert!(held, "the miss reached the store");
        // The store read is held; the keyspace is not.
        let joined = {
            let mut ks = node.keyspace();
            assert_eq!(
                ks.get(b"hot", 0).expect("get"),
                Some(Bytes::from_static(b"in memory"))
            );
            let StoreWant::Join(joined) = ks.store_want(&Bytes::from_static(b"cold")) else {
                panic!("a second reader of the key joins the read under way");
            };
            joined
        };
        stall.release();
        tokio::time::timeout(Duration::from_secs(10), joined.wait())
            .await
            .expect("the joined read ends once the store answers");
        tokio::time::timeout(Duration::from_secs(10), reader)
            .await
            .expect("the reader ends")
            .expect("no panic");
        let mut ks = node.keyspace();
        assert!(
            matches!(
                ks.store_want(&Bytes::from_static(b"cold")),
                StoreWant::Ready
            ),
            "what was read is lent to the command"
        );
        let before = ks.stats().store_reads;
        assert_eq!(
            ks.get(b"cold", 0).expect("get"),
            Some(Bytes::from_static(b"from the store"))
        );
        assert_eq!(
            ks.stats().store_reads,
            before + 1,
            "one read of the store, counted once"
        );
        assert_eq!(
            (
                ks.stats().store_reads_off_lock,
                ks.stats().store_reads_joined
            ),
            (1, 1),
            "read off the lock once, joined once (INFO pliant)"
        );
        assert!(
            matches!(
                ks.store_want(&Bytes::from_static(b"cold")),
                StoreWant::Ready
            ),
            "memory keeps it"
        );
    }

    /// A store that fails a read: the command is not lent anything and reads for itself (and
    /// answers the store's error then), rather than taking a failure for "no such key".
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_store_read_lends_nothing() {
        #[derive(Debug)]
        struct Failing(MemStore);
        impl Store for Failing {
            fn get(&self, _: &[u8]) -> Result<Option<Vec<u8>>, pliant_store::StoreError> {
                Err(pliant_store::StoreError::Injected { op: "get" })
            }
            fn put(&self, k: &[u8], v: &[u8]) -> Result<(), pliant_store::StoreError> {
                self.0.put(k, v)
            }
            fn delete(&self, k: &[u8]) -> Result<(), pliant_store::StoreError> {
                self.0.delete(k)
            }
            fn batch(&self, b: &pliant_store::Batch) -> Result<(), pliant_store::StoreError> {
                self.0.batch(b)
            }
            fn sync(&self) -> Result<(), pliant_store::StoreError> {
                self.0.sync()
            }
            fn range(&self, r: pliant_store::KeyRange<'_>) -> pliant_store::Entries<'_> {
                self.0.range(r)
            }
        }
        let store: Arc<dyn Store> = Arc::new(Failing(MemStore::new()));
        let mut ks = Keyspace::new("lru", Capacity::Keys(10), Some(store)).expect("keyspace");
        ks.assume_slow_store_reads();
        let node = Node::new(ks, &Config::default());
        let k = Bytes::from_static(b"k");
        tokio::time::timeout(Duration::from_secs(10), node.read_ahead([&k].into_iter()))
            .await
            .expect("bounded: a failed read is not retried forever");
        assert!(
            node.keyspace().get(b"k", 0).is_err(),
            "the command reads the store itself and meets its error"
        );
    }
}
