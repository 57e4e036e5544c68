//! Group commit under `--durability always`: the writes of every client waiting are made durable
//! by one fsync, run off the keyspace lock and off the async workers, and each client is
//! acknowledged after the fsync that covers its writes.
//!
//! Each batch committed gets a sequence number (the keyspace's store log assigns it under the
//! keyspace lock and writes the batches in that order, off it). A client waiting for its number
//! publishes it and, if no fsync is running, leads one itself (where: see below): it writes
//! every batch still queued, up to the highest number published, as one store write (one
//! append, where each client's batch was an append of its own), and fsyncs. The others wait for
//! it and find themselves covered, or lead the next one. While an fsync runs, the keyspace
//! serves every other client, and the batches committed meanwhile share the next fsync: under
//! load one fsync acknowledges many clients' writes (the "ops per fsync"
//! `tools/bench/group_commit.sh` reports).
//!
//! **Turns.** Run back to back, fsyncs split busy clients into two groups that alternate: the
//! clients one fsync acknowledges send their next writes while the next fsync, which only covers
//! the writes that arrived during the last, is running, so each fsync covers about half of them
//! and costs the same. Redis, whose event loop fsyncs once after reading every client that is
//! ready, covers them all at once. So an fsync's leader first waits for the clients the last
//! fsync acknowledged to take their turn: each holds a [`Turn`] until its next batch is
//! committed (or it goes away), and the leader starts once none is outstanding, or once as long as
//! the last fsync took has passed (a client that acknowledged and went idle holds up one fsync by
//! at most that, once: the next fsync counts afresh). A lone writer is its own group and never
//! waits.
//!
//! **Where the fsync runs.** Off the async worker, on the blocking pool, so that the clients not
//! waiting for it are served meanwhile, with one exception: on the single-threaded runtime
//! (`--threads 1`, the default), when every open connection is among the clients waiting for
//! this fsync, there is no other client to serve, and the leader writes and fsyncs on the worker
//! itself. The hop to the blocking pool and back cost 25-55 µs a cycle of about 700 µs, and
//! without it 50 clients' SETs under `always` went 5-10% faster (`serve-group-commit-30i` in
//! docs/benchmarks.md), as Redis, whose event loop fsyncs in line every time, does. What waits
//! meanwhile is work that is not a waiting client's (a new connection, a metrics scrape, the
//! cluster's tasks), for one fsync; and only while fsyncs are fast: not if the last one took over
//! [`INLINE_SYNC_MAX`], whether it worked or failed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use pliant_store::{Store, StoreError};

use crate::keyspace::StoreLog;

/// The longest the last fsync may have taken for the next one to run in line (see the module
/// doc): the longest a newcomer then waits, if the disk keeps its pace. Not tuned: far above this
/// machine's fsyncs (85-140 µs), so the benchmark never meets it; far below a slow disk's, whose
/// fsyncs go back to the blocking pool.
pub(crate) const INLINE_SYNC_MAX: Duration = Duration::from_millis(1);

/// A client waiting (see [`Turns::waiting`]).
#[derive(Debug)]
struct Waiting {
    seq: u64,
    /// A connection's commit, not the periodic sync's.
    client: bool,
    /// Woken when an fsync ends (or its leader goes away).
    waker: Option<Waker>,
}

/// What the fsyncs have covered so far.
#[derive(Debug, Default)]
struct Synced {
    /// Every batch with a sequence up to this one is durable.
    upto: u64,
    /// The latest failed fsync: the sequence it was to cover, and why. A batch it was to cover
    /// is not known durable; its clients get the error (and are not acknowledged).
    failed: Option<(u64, Arc<StoreError>)>,
    /// Turns handed out by the latest fsync (see the module doc).
    generation: u64,
}

/// The clients waiting, what the fsyncs have covered, and the turns of the last fsync's clients:
/// all under one lock, which every wait takes anyway (one waker each in the table of waiters
/// where a watch channel's notifications were a sixth of a group-committed SET's instructions).
#[derive(Debug, Default)]
struct Turns {
    /// Each waiting client's batch sequence, by a number of its own (ours, not a client's: a
    /// fast hash, not SipHash, which was three hashes of every group-committed write).
    waiting: HashMap<u64, Waiting, foldhash::fast::FixedState>,
    synced: Synced,
    /// Whether an fsync is running.
    running: bool,
    next_waiter: u64,
    /// The turns the latest fsync handed out, and how many of them are still outstanding.
    generation: u64,
    outstanding: usize,
    /// How long the latest fsync took, failed or not: the longest a leader waits for turns, and
    /// whether the next may run in line.
    last_sync: Duration,
}

/// A client's turn (see the module doc): held from the fsync that acknowledged its writes until
/// its next batch is in the store, or until it is dropped.
#[derive(Debug)]
pub struct Turn {
    shared: Arc<TurnsShared>,
    generation: u64,
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut t = self.shared.lock();
        if t.generation == self.generation && t.outstanding > 0 {
            t.outstanding -= 1;
            if t.outstanding == 0 {
                self.shared.settled.notify_waiters();
            }
        }
    }
}

#[derive(Debug, Default)]
struct TurnsShared {
    turns: Mutex<Turns>,
    /// Notified when the last outstanding turn is taken.
    settled: tokio::sync::Notify,
}

impl TurnsShared {
    // A panic while it is held leaves counters only: still usable.
    fn lock(&self) -> MutexGuard<'_, Turns> {
        self.turns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ends the running fsync with `publish`'s news, and wakes every waiter: those covered
    /// return, one of the others leads the next fsync.
    fn end_fsync(&self, publish: impl FnOnce(&mut Turns)) {
        let wakers: Vec<Waker> = {
            let mut t = self.lock();
            // Cleared under the lock that publishes the news: a waiter sees the fsync running
            // and its waker is taken below, or sees the news.
            t.running = false;
            // Taken before `publish`, which lets go of the clients it covers.
            let wakers = t
                .waiting
                .values_mut()
                .filter_map(|w| w.waker.take())
                .collect();
            publish(&mut t);
            wakers
        };
        for w in wakers {
            w.wake();
        }
    }

    /// Waits until every turn the latest fsync handed out is taken, or for as long as that fsync
    /// took.
    async fn settle(&self) {
        let started = Instant::now();
        loop {
            let notified = self.settled.notified();
            let bound = {
                let t = self.lock();
                if t.outstanding == 0 {
                    return;
                }
                t.last_sync
            };
            let Some(left) = bound.checked_sub(started.elapsed()) else {
                return;
            };
            if tokio::time::timeout(left, notified).await.is_err() {
                return;
            }
        }
    }
}

/// The leader of an fsync, until its news is out (see [`GroupSync::wait`]).
struct Leading<'a>(&'a GroupSync);

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        // Wakes the waiters, one of which leads the next fsync.
        self.0.turns.end_fsync(|_| {});
    }
}

/// A waiter's place among the waiting, given up with its wait.
struct Registered<'a>(&'a TurnsShared, u64);

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.0.lock().waiting.remove(&self.1);
    }
}

/// One store's group commit.
pub(crate) struct GroupSync {
    store: Arc<dyn Store>,
    /// The keyspace's store log, whose queued batches an fsync's leader writes first (see
    /// [`GroupSync::wait`]).
    log: Option<Arc<StoreLog>>,
    /// The highest sequence whose batch is in the store.
    committed: AtomicU64,
    turns: Arc<TurnsShared>,
    /// The node's open connections: whether every one is waiting (see the module doc).
    open: Arc<AtomicUsize>,
}

impl GroupSync {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        log: Option<Arc<StoreLog>>,
        open: Arc<AtomicUsize>,
    ) -> Self {
        Self {
            store,
            log,
            committed: AtomicU64::new(0),
            turns: Arc::default(),
            open,
        }
    }

    /// Whether the fsync about to run may run on this worker (see the module doc): the runtime
    /// has no other worker, every open connection is waiting for it, and the last was fast.
    fn in_line(&self) -> bool {
        if tokio::runtime::Handle::current().runtime_flavor()
            != tokio::runtime::RuntimeFlavor::CurrentThread
        {
            return false;
        }
        let open = self.open.load(Ordering::Acquire);
        let t = self.turns.lock();
        open > 0
            && t.last_sync <= INLINE_SYNC_MAX
            && t.waiting.values().filter(|w| w.client).count() >= open
    }

    /// Returns once the batch committed as `seq` is durable, with the client's [`Turn`], or with
    /// the error of the fsync that was to make it so. `synced(upto)` is called after each fsync
    /// this caller ran. `turn` is the client's turn from its last wait, if it still holds it:
    /// its new batch is in the store, so it is taken. `client`: the caller is a connection's
    /// commit (the periodic sync is not).
    pub(crate) async fn wait(
        &self,
        seq: u64,
        turn: Option<Turn>,
        client: bool,
        synced: impl Fn(u64),
    ) -> Result<Turn, Arc<StoreError>> {
        self.committed.fetch_max(seq, Ordering::AcqRel);
        let me = {
            let mut t = self.turns.lock();
            let me = t.next_waiter;
            t.next_waiter += 1;
            t.waiting.insert(
                me,
                Waiting {
                    seq,
                    client,
                    waker: None,
                },
            );
            me
        };
        // Gone from the waiting when this wait ends, however it ends (a cancelled waiter would
        // otherwise be counted for a turn it never takes).
        let _registered = Registered(&self.turns, me);
        drop(turn);
        loop {
            let next = std::future::poll_fn(|cx| {
                let mut t = self.turns.lock();
                if t.synced.upto >= seq {
                    // Whether the fsync that covered it counted it in its turns (it did unless
                    // it came too late to be seen waiting): its turn belongs to that fsync's
                    // generation then.
                    let counted = t.waiting.remove(&me).is_none();
                    return Poll::Ready(Next::Covered(Turn {
                        shared: self.turns.clone(),
                        generation: if counted { t.synced.generation } else { 0 },
                    }));
                }
                if let Some((covering, why)) = &t.synced.failed
                    && *covering >= seq
                {
                    return Poll::Ready(Next::Failed(why.clone()));
                }
                if !t.running {
                    t.running = true;
                    return Poll::Ready(Next::Lead);
                }
                // An fsync is running: it, or the next one, covers this batch. Its end wakes
                // every waiter.
                match t.waiting.get_mut(&me) {
                    Some(w) => match &mut w.waker {
                        Some(old) => old.clone_from(cx.waker()),
                        none => *none = Some(cx.waker().clone()),
                    },
                    // Only an fsync that covers it lets it go, and then the check above returns:
                    // not reached, but a poll again is never wrong where a missed wake-up hangs.
                    None => cx.waker().wake_by_ref(),
                }
                Poll::Pending
            })
            .await;
            match next {
                Next::Covered(turn) => return Ok(turn),
                Next::Failed(why) => return Err(why),
                Next::Lead => self.lead(&synced).await,
            }
        }
    }

    /// Runs an fsync as its leader (see the module doc) and publishes what it covered.
    async fn lead(&self, synced: &impl Fn(u64)) {
        // Dropped if this wait's caller goes away (a connection closed, the periodic sync
        // stopped at shutdown) before the fsync's news is out: the next waiter must find no
        // fsync running, or every later commit waits for ever.
        let leading = Leading(self);
        self.turns.settle().await;
        let upto = self.committed.load(Ordering::Acquire);
        let (store, log) = (self.store.clone(), self.log.clone());
        let started = Instant::now();
        // The batches waiting may still be queued (a committer under `always` leaves its batch
        // to the leader): written first, all as one store write, one append, as Redis writes its
        // AOF buffer once an event loop before its fsync.
        let write_and_sync = move || -> Result<(), Arc<StoreError>> {
            if let Some(log) = &log {
                log.write_through(upto)?;
            }
            store.sync().map_err(Arc::new)
        };
        let done = if self.in_line() {
            write_and_sync()
        } else {
            match tokio::task::spawn_blocking(write_and_sync).await {
                Ok(done) => done,
                // A panic inside the store is a bug of ours: not an error to report.
                Err(e) => std::panic::resume_unwind(e.into_panic()),
            }
        };
        let took = started.elapsed();
        std::mem::forget(leading);
        match done {
            Ok(()) => {
                synced(upto);
                // The clients it covers get the turns of a new generation; older ones still
                // held count for nothing.
                self.turns.end_fsync(|t| {
                    let before = t.waiting.len();
                    t.waiting.retain(|_, w| w.seq > upto);
                    t.outstanding = before - t.waiting.len();
                    t.generation += 1;
                    t.last_sync = took;
                    t.synced.upto = t.synced.upto.max(upto);
                    t.synced.generation = t.generation;
                });
            }
            Err(e) => {
                tracing::error!("store sync failed: {}", pliant_proto::error::chain(&e));
                self.turns.end_fsync(|t| {
                    t.outstanding = 0;
                    t.generation += 1;
                    // A disk slow to fail (an I/O error after its retries) is a slow disk: the
                    // next fsync must not stall the serving thread for as long (`in_line`).
                    t.last_sync = took;
                    t.synced.failed = Some((upto, e));
                });
            }
        }
    }
}

/// What a waiter does next.
enum Next {
    Covered(Turn),
    Failed(Arc<StoreError>),
    Lead,
}

#[cfg(test)]
mod tests {
    use super::*;
    use pliant_store::{FaultyStore, MemStore};
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    /// Many clients waiting at once share fsyncs; each is covered, none waits for ever.
    #[test]
    fn clients_waiting_together_share_fsyncs() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let group = Arc::new(GroupSync::new(
            Arc::new(MemStore::new()),
            None,
            Arc::default(),
        ));
        let syncs = Arc::new(AtomicUsize::new(0));
        rt.block_on(async {
            let waits: Vec<_> = (1..=200u64)
                .map(|seq| {
                    let (group, syncs) = (group.clone(), syncs.clone());
                    tokio::spawn(async move {
                        group
                            .wait(seq, None, true, |_| {
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
        assert!(group.turns.lock().synced.upto >= 200);
    }

    /// The bug: the once-a-second sync, aborted at shutdown while it led an fsync, left the
    /// fsync "running" for ever, and the shutdown's own sync (and every later commit) waited for
    /// it: a node that did not stop. A leader that goes away hands the lead on.
    #[test]
    fn a_leader_that_goes_away_hands_the_lead_on() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let store = FaultyStore::new(MemStore::new());
        let faults = store.faults();
        let group = Arc::new(GroupSync::new(Arc::new(store), None, Arc::default()));
        let stall = faults.stall(pliant_store::OpKind::Sync);
        rt.block_on(async {
            let leader = {
                let group = group.clone();
                tokio::spawn(async move { group.wait(1, None, true, |_| {}).await })
            };
            let held = tokio::task::spawn_blocking(move || {
                let held = stall.wait_held(Duration::from_secs(10));
                (held, stall)
            });
            let (held, stall) = held.await.expect("joined");
            assert!(held, "the leader's fsync reached the store");
            leader.abort();
            let _ = leader.await;
            // Its fsync is still held in the store; the next waiter leads one of its own.
            let next =
                tokio::time::timeout(Duration::from_secs(10), group.wait(2, None, true, |_| {}))
                    .await
                    .expect("not stuck behind the leader that went away")
                    .expect("durable");
            drop(next);
            stall.release();
        });
    }

    /// A store whose fsync takes `0` (a disk's), counting them and noting the threads they ran
    /// on; every one fails if `4` (a failing disk's).
    #[derive(Debug)]
    struct SlowSync(
        Duration,
        MemStore,
        AtomicUsize,
        Mutex<Vec<std::thread::ThreadId>>,
        bool,
    );

    impl SlowSync {
        fn new(pause: Duration) -> Self {
            Self(
                pause,
                MemStore::new(),
                AtomicUsize::new(0),
                Mutex::default(),
                false,
            )
        }

        fn failing(pause: Duration) -> Self {
            Self {
                4: true,
                ..Self::new(pause)
            }
        }
    }

    impl Store for SlowSync {
        fn get(&self, k: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
            self.1.get(k)
        }
        fn put(&self, k: &[u8], v: &[u8]) -> Result<(), StoreError> {
            self.1.put(k, v)
        }
        fn delete(&self, k: &[u8]) -> Result<(), StoreError> {
            self.1.delete(k)
        }
        fn batch(&self, b: &pliant_store::Batch) -> Result<(), StoreError> {
            self.1.batch(b)
        }
        fn sync(&self) -> Result<(), StoreError> {
            std::thread::sleep(self.0);
            self.2.fetch_add(1, Ordering::Relaxed);
            self.3
                .lock()
                .expect("not poisoned")
                .push(std::thread::current().id());
            if self.4 {
                return Err(StoreError::Injected { op: "sync" });
            }
            Ok(())
        }
        fn range(&self, r: pliant_store::KeyRange<'_>) -> pliant_store::Entries<'_> {
            self.1.range(r)
        }
    }

    /// `clients` clients on `rt`, each committing `rounds` batches `gap` apart and waiting for
    /// each to be durable, holding its turn from one to the next; every wait bounded.
    fn write_rounds(
        rt: &tokio::runtime::Runtime,
        group: &Arc<GroupSync>,
        clients: usize,
        rounds: usize,
        gap: Duration,
    ) {
        let committed = Arc::new(AtomicU64::new(0));
        rt.block_on(async {
            let clients: Vec<_> = (0..clients)
                .map(|_| {
                    let (group, committed) = (group.clone(), committed.clone());
                    tokio::spawn(async move {
                        let mut turn = None;
                        for _ in 0..rounds {
                            tokio::time::sleep(gap).await;
                            let seq = committed.fetch_add(1, Ordering::AcqRel) + 1;
                            let next = group.wait(seq, turn.take(), true, |_| {}).await;
                            turn = Some(next.expect("durable"));
                        }
                    })
                })
                .collect();
            for c in clients {
                tokio::time::timeout(Duration::from_secs(60), c)
                    .await
                    .expect("within 60 s")
                    .expect("joined");
            }
        });
    }

    /// The bug: back-to-back fsyncs split busy clients into two groups that alternate, each
    /// fsync covering about half of them (23.6 SETs per fsync with 50 clients). With turns,
    /// the clients one fsync acknowledged come back before the next starts, as in Redis's loop.
    #[test]
    fn clients_one_fsync_acknowledged_share_the_next() {
        const CLIENTS: u64 = 10;
        const ROUNDS: u64 = 20;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let store = Arc::new(SlowSync::new(Duration::from_millis(5)));
        let group = Arc::new(GroupSync::new(store.clone(), None, Arc::default()));
        // A client's round trip before its next write arrives: 300 µs.
        write_rounds(
            &rt,
            &group,
            CLIENTS as usize,
            ROUNDS as usize,
            Duration::from_micros(300),
        );
        let fsyncs = store.2.load(Ordering::Relaxed) as u64;
        // One group of all ten: about one fsync a round (the first may go alone). Two groups
        // alternating would be about two.
        assert!(
            fsyncs <= ROUNDS * 3 / 2,
            "{fsyncs} fsyncs for {ROUNDS} rounds of {CLIENTS} clients"
        );
    }

    /// `CLIENTS` clients writing `ROUNDS` times each on a single-threaded runtime, of `open`
    /// connections, over a store whose fsync takes `pause`: how many fsyncs ran on the runtime's
    /// own thread, of how many.
    fn fsyncs_in_line(open: usize, pause: Duration) -> (usize, usize) {
        const CLIENTS: usize = 4;
        const ROUNDS: usize = 10;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let store = Arc::new(SlowSync::new(pause));
        let group = Arc::new(GroupSync::new(
            store.clone(),
            None,
            Arc::new(AtomicUsize::new(open)),
        ));
        write_rounds(&rt, &group, CLIENTS, ROUNDS, Duration::from_millis(1));
        let here = std::thread::current().id();
        let on = store.3.lock().expect("not poisoned");
        (on.iter().filter(|t| **t == here).count(), on.len())
    }

    /// On the single-threaded runtime an fsync that every open connection waits for runs on the
    /// runtime's thread (no other client to serve); one connection that is not waiting, or a
    /// slow last fsync, sends it to the blocking pool, and every client is acknowledged either
    /// way.
    #[test]
    fn an_fsync_runs_in_line_only_when_every_connection_waits_for_it() {
        let fast = Duration::from_micros(200);
        let (in_line, all) = fsyncs_in_line(4, fast);
        assert!(
            in_line >= 1,
            "{in_line} of {all} fsyncs in line, all waiting"
        );
        let (in_line, all) = fsyncs_in_line(5, fast);
        assert_eq!(
            in_line, 0,
            "{in_line} of {all} in line with an idle connection"
        );
        let slow = INLINE_SYNC_MAX * 2;
        let (in_line, all) = fsyncs_in_line(4, slow);
        // The first fsync has no last one to go by.
        assert!(in_line <= 1, "{in_line} of {all} in line after slow fsyncs");
    }

    /// The bug: a failed fsync left the time of the last one that worked as the last fsync's,
    /// so a disk that took seconds to fail each fsync (a retried I/O error) had every next one
    /// run on the serving thread too, and everything that was not a waiting client (a new
    /// connection, SHUTDOWN, the metrics) stalled for each. A slow fsync counts, failed or not.
    #[test]
    fn a_slow_failed_fsync_sends_the_next_to_the_blocking_pool() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let store = Arc::new(SlowSync::failing(INLINE_SYNC_MAX * 3));
        // One open connection, the one waiting: every fsync may run in line but for its pace.
        let group = GroupSync::new(store.clone(), None, Arc::new(AtomicUsize::new(1)));
        rt.block_on(async {
            for seq in 1..=3 {
                assert!(
                    group.wait(seq, None, true, |_| {}).await.is_err(),
                    "a failed fsync acknowledges nothing"
                );
            }
        });
        let here = std::thread::current().id();
        let on = store.3.lock().expect("not poisoned");
        let in_line = on.iter().filter(|t| **t == here).count();
        // The first has no last one to go by.
        assert_eq!(on.len(), 3, "one fsync a wait");
        assert!(in_line <= 1, "{in_line} of 3 slow failed fsyncs in line");
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
        let group = GroupSync::new(Arc::new(store), None, Arc::default());
        faults.fail_syncs(1);
        rt.block_on(async {
            assert!(
                group.wait(1, None, true, |_| {}).await.is_err(),
                "not durable: not acknowledged"
            );
            group
                .wait(2, None, true, |_| {})
                .await
                .expect("the next fsync works");
        });
    }
}
