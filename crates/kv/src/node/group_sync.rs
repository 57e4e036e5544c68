//! Group commit under `--durability always`: the writes of every client waiting are made durable
//! by one fsync, run off the keyspace lock and off the async workers, and each client is
//! acknowledged after the fsync that covers its writes.
//!
//! Each commit of a batch to the store (under the keyspace lock, where the store keeps the order
//! of batches) gets a sequence number. A client waiting for its number publishes it and, if no
//! fsync is running, runs one itself (on the blocking pool) covering everything published so
//! far; the others wait for it and find themselves covered, or lead the next one. While an fsync
//! runs, the keyspace serves every other client, and the batches committed meanwhile share the
//! next fsync: under load one fsync acknowledges many clients' writes (the "ops per fsync"
//! `tools/bench/durability.sh` reports). The sequence a batch gets is published only after its
//! batch is in the store, so an fsync started after reading a number covers that batch.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use pliant_store::{Store, StoreError};

/// What the fsyncs have covered so far.
#[derive(Debug, Clone, Default)]
struct Synced {
    /// Every batch with a sequence up to this one is durable.
    upto: u64,
    /// The latest failed fsync: the sequence it was to cover, and why. A batch it was to cover
    /// is not known durable; its clients get the error (and are not acknowledged).
    failed: Option<(u64, Arc<StoreError>)>,
}

/// One store's group commit.
pub(crate) struct GroupSync {
    store: Arc<dyn Store>,
    /// The highest sequence whose batch is in the store.
    committed: AtomicU64,
    /// Whether an fsync is running.
    running: AtomicBool,
    synced: tokio::sync::watch::Sender<Synced>,
}

impl GroupSync {
    pub(crate) fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            committed: AtomicU64::new(0),
            running: AtomicBool::new(false),
            synced: tokio::sync::watch::Sender::new(Synced::default()),
        }
    }

    /// Returns once the batch committed as `seq` is durable, or with the error of the fsync
    /// that was to make it so. `synced(upto)` is called after each fsync this caller ran.
    pub(crate) async fn wait(&self, seq: u64, synced: impl Fn(u64)) -> Result<(), Arc<StoreError>> {
        let mut rx = self.synced.subscribe();
        self.committed.fetch_max(seq, Ordering::AcqRel);
        loop {
            {
                let s = rx.borrow_and_update();
                if s.upto >= seq {
                    return Ok(());
                }
                if let Some((covering, why)) = &s.failed
                    && *covering >= seq
                {
                    return Err(why.clone());
                }
            }
            if !self.running.swap(true, Ordering::AcqRel) {
                let upto = self.committed.load(Ordering::Acquire);
                let store = self.store.clone();
                let done = match tokio::task::spawn_blocking(move || store.sync()).await {
                    Ok(done) => done,
                    // A panic inside the store is a bug of ours: not an error to report.
                    Err(e) => std::panic::resume_unwind(e.into_panic()),
                };
                // Cleared before the news goes out: a waiter woken by it and not covered must
                // find no fsync running, and lead the next one itself.
                self.running.store(false, Ordering::Release);
                match done {
                    Ok(()) => {
                        synced(upto);
                        self.synced.send_modify(|s| s.upto = s.upto.max(upto));
                    }
                    Err(e) => {
                        tracing::error!("store sync failed: {e}");
                        self.synced
                            .send_modify(|s| s.failed = Some((upto, Arc::new(e))));
                    }
                }
                continue;
            }
            // An fsync is running: it, or the next one, covers this batch. Its end always sends.
            if rx.changed().await.is_err() {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pliant_store::{FaultyStore, MemStore};
    use std::sync::atomic::AtomicUsize;

    /// Many clients waiting at once share fsyncs; each is covered, none waits for ever.
    #[test]
    fn clients_waiting_together_share_fsyncs() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let group = Arc::new(GroupSync::new(Arc::new(MemStore::new())));
        let syncs = Arc::new(AtomicUsize::new(0));
        rt.block_on(async {
            let waits: Vec<_> = (1..=200u64)
                .map(|seq| {
                    let (group, syncs) = (group.clone(), syncs.clone());
                    tokio::spawn(async move {
                        group
                            .wait(seq, |_| {
                                syncs.fetch_add(1, Ordering::Relaxed);
                            })
                            .await
                    })
                })
                .collect();
            for w in waits {
                tokio::time::timeout(std::time::Duration::from_secs(30), w)
                    .await
                    .expect("within 30 s")
                    .expect("joined")
                    .expect("durable");
            }
        });
        let n = syncs.load(Ordering::Relaxed);
        assert!((1..=200).contains(&n), "{n} fsyncs");
        assert!(group.synced.borrow().upto >= 200);
    }

    /// A failed fsync is the error of every client it was to cover, and the next one retries.
    #[test]
    fn a_failed_fsync_acknowledges_none_of_the_clients_it_covered() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let store = FaultyStore::new(MemStore::new());
        let faults = store.faults();
        let group = GroupSync::new(Arc::new(store));
        faults.fail_syncs(1);
        rt.block_on(async {
            assert!(
                group.wait(1, |_| {}).await.is_err(),
                "not durable: not acknowledged"
            );
            group.wait(2, |_| {}).await.expect("the next fsync works");
        });
    }
}
