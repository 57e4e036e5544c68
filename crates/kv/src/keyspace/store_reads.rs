//! Store reads off the keyspace lock.
//!
//! A command that reads a key memory does not hold must read the store, which may mean a disk
//! read. Done under the keyspace lock, that read stalls every client of the node; so the server
//! asks first, under the lock ([`StoreReads::want`]), which of a command's keys need the store,
//! reads those with the lock released (on the blocking pool), and hands the values back as a
//! *loan*, which the command then finds where it would have read the store. Readers of a key
//! whose read is already under way join it instead of reading again.
//!
//! Leaving the lock has a price: two more acquisitions of it, and a hand-off to the blocking pool
//! and back, some tens of microseconds. A read the store answers from memory (its memtable, its
//! block cache, the page cache, or a Bloom filter that rules the key out) costs less than that,
//! and is cheaper for every other client done under the lock than around it (measured: GETs of
//! keys the store lacks ran at 0.35x of Redis, pipelined, with every miss sent off the lock). So a
//! miss leaves the lock only while store reads take longer than the hand-off. The reads' cost is
//! the smoothed average of what they took, wherever they ran (RFC 6298's gain, 1/8). The
//! hand-off's is twice the time from handing the reads to the blocking pool to a thread starting
//! on them (a thread woken there, and one on the way back), at its least over the last
//! [`TRIPS`] trips: on a busy node a trip also queues, for a core and then for a worker, and that
//! costs the reader, not the others (measured on a saturated 2-core node: whole trips of 816 us on
//! average, and ways there of 1 ms, which kept reads of 200-330 us under the lock). One miss in
//! [`EXPLORE`] leaves the lock whatever they say, so the hand-off stays measured. While misses stay under the lock
//! the server does not even ask (a flag it reads without the lock, [`StoreReads::asking`]): a
//! command costs what it did before store reads could leave the lock.
//!
//! A loan is the store's value as of a write sequence: it is used only while no write of its key
//! (and no flush) has happened since that read began. Writes are stamped in a small table indexed
//! by the key's hash, so the check costs one array read; two keys sharing an entry can only make
//! a loan look stale, never a stale loan look good, and a loan found stale is simply not used (the
//! command reads the store itself, under the lock, as before).

use std::collections::HashMap;

use bytes::Bytes;

/// One miss in this many is read off the lock even while reads are cheaper than the hand-off, to
/// keep measuring the hand-off: at most this share of cheap misses pays it needlessly.
pub const EXPLORE: u64 = 1024;

/// Trips over which the hand-off's least cost is taken: enough that one found a core free.
pub const TRIPS: usize = 16;

/// The gain of the smoothed averages (RFC 6298's for a round-trip time).
const GAIN: f64 = 1.0 / 8.0;

/// Entries of the write-stamp table (a power of two).
const STAMPS: usize = 4096;

/// Loans or reads under way kept at most; past this, loans nobody took are dropped (a loan is an
/// optimisation: the command it was for reads the store itself if it finds none) and reads whose
/// reader went away are forgotten. Bounds what clients that disconnect mid-read leave behind.
const MAX_ENTRIES: usize = 4096;

/// A store read under way: its readers wait on it ([`Joined::wait`]).
#[derive(Debug, Clone)]
pub struct Joined(tokio::sync::watch::Receiver<bool>);

impl Joined {
    /// Waits for the read to end (or for its reader to go away without finishing it).
    pub async fn wait(mut self) {
        // An error is the reader gone: the caller asks again and reads itself.
        let _ = self.0.wait_for(|done| *done).await;
    }
}

/// The reader's side of a read under way: what wakes the readers that joined it.
#[derive(Debug)]
pub struct Reading {
    key: Bytes,
    since: u64,
    done: tokio::sync::watch::Sender<bool>,
}

impl Reading {
    /// The key to read.
    pub fn key(&self) -> &Bytes {
        &self.key
    }
}

/// Where a command's read of a key stands before it runs.
#[derive(Debug)]
pub enum StoreWant {
    /// Memory holds it, a write not yet committed says what it holds, a loan has it, or there
    /// is no store: run.
    Ready,
    /// Another reader's store read of it is under way: wait for that, then ask again.
    Join(Joined),
    /// Read it from the store off the lock, then hand the value back with
    /// [`Keyspace::store_read`](super::Keyspace::store_read).
    Read(Reading),
}

/// A value read from the store for a key: its bytes as stored (`None`: no such key), the write
/// sequence it is current as of, and how long the read took (what `auto` prices a miss with).
#[derive(Debug)]
struct Loan {
    raw: Option<Vec<u8>>,
    since: u64,
    seconds: f64,
}

/// The reads under way, the loans, and the writes' stamps (see the module doc).
#[derive(Debug)]
pub(super) struct StoreReads {
    under_way: HashMap<Bytes, tokio::sync::watch::Receiver<bool>, foldhash::fast::FixedState>,
    loans: HashMap<Bytes, Loan, foldhash::fast::FixedState>,
    /// Writes so far: a read started when this was `n` sees every write up to `n`.
    writes: u64,
    /// The latest write's sequence of the keys hashing to each entry.
    stamps: Box<[u64]>,
    /// The latest flush's sequence (every key written).
    flushed: u64,
    /// Smoothed seconds of a store read, and of leaving the lock for one (see the module doc).
    read_secs: f64,
    handoff_secs: f64,
    /// The latest trips' costs (a ring), whose least is `handoff_secs`.
    trips: [f64; TRIPS],
    trip: usize,
    /// Misses read under the lock so far (every [`EXPLORE`]-th makes the next leave it).
    misses: u64,
    /// Whether the next miss leaves the lock to measure the hand-off.
    explore: bool,
    /// Whether misses leave the lock now: what the server reads before it asks.
    asking: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Default for StoreReads {
    fn default() -> Self {
        Self {
            under_way: HashMap::default(),
            loans: HashMap::default(),
            writes: 0,
            stamps: vec![0; STAMPS].into_boxed_slice(),
            flushed: 0,
            read_secs: 0.0,
            handoff_secs: 0.0,
            trips: [f64::INFINITY; TRIPS],
            trip: 0,
            misses: 0,
            explore: false,
            asking: Default::default(),
        }
    }
}

impl StoreReads {
    /// A write of the key whose id is `id`: loans of it taken before now are stale.
    pub(super) fn written(&mut self, id: u64) {
        self.writes += 1;
        self.stamps[id as usize & (STAMPS - 1)] = self.writes;
    }

    /// Every key written (a flush).
    pub(super) fn flushed(&mut self) {
        self.writes += 1;
        self.flushed = self.writes;
        self.loans.clear();
    }

    fn stale(&self, id: u64, since: u64) -> bool {
        self.flushed > since || self.stamps[id as usize & (STAMPS - 1)] > since
    }

    /// Whether a current loan holds `key` (a stale one is dropped).
    pub(super) fn has_loan(&mut self, key: &[u8], id: u64) -> bool {
        match self.loans.get(key) {
            Some(l) if !self.stale(id, l.since) => true,
            Some(_) => {
                self.loans.remove(key);
                false
            }
            None => false,
        }
    }

    /// The loan of `key` if it is current: taken (`take`, the caller keeps the value in memory)
    /// or copied. With how long its read took.
    pub(super) fn loan(
        &mut self,
        key: &[u8],
        id: u64,
        take: bool,
    ) -> Option<(Option<Vec<u8>>, f64)> {
        let l = self.loans.get(key)?;
        if self.stale(id, l.since) {
            self.loans.remove(key);
            return None;
        }
        if take {
            let l = self.loans.remove(key)?;
            Some((l.raw, l.seconds))
        } else {
            Some((l.raw.clone(), l.seconds))
        }
    }

    /// The flag that says whether misses leave the lock now (see the module doc).
    pub(super) fn asking(&self) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
        self.asking.clone()
    }

    /// The smoothed microseconds of a store read and of a trip off the lock.
    pub(super) fn costs(&self) -> (f64, f64) {
        (self.read_secs * 1e6, self.handoff_secs * 1e6)
    }

    /// A store read took `seconds` off the lock.
    pub(super) fn read_took(&mut self, seconds: f64) {
        self.read_secs += GAIN * (seconds - self.read_secs);
        self.refresh();
    }

    /// A store read took `seconds` under the lock.
    pub(super) fn read_under_lock_took(&mut self, seconds: f64) {
        self.misses += 1;
        if self.misses.is_multiple_of(EXPLORE) {
            self.explore = true;
        }
        self.read_took(seconds);
    }

    /// A trip off the lock cost `seconds` (see the module doc: twice its way there).
    pub(super) fn handoff_took(&mut self, seconds: f64) {
        self.trips[self.trip % TRIPS] = seconds.max(0.0);
        self.trip += 1;
        self.handoff_secs = self.trips.iter().copied().fold(f64::INFINITY, f64::min);
        self.refresh();
    }

    fn worth_leaving(&self) -> bool {
        self.read_secs > self.handoff_secs || self.explore
    }

    fn refresh(&self) {
        self.asking
            .store(self.worth_leaving(), std::sync::atomic::Ordering::Relaxed);
    }

    /// Joins the read of `key` under way, or starts one; or, while a store read costs less than
    /// leaving the lock for it, says to read it under the lock (`Ready`).
    pub(super) fn want(&mut self, key: &Bytes) -> StoreWant {
        if let Some(rx) = self.under_way.get(key) {
            // Under way until its reader finishes, or goes away without finishing it.
            if !*rx.borrow() && rx.has_changed().is_ok() {
                return StoreWant::Join(Joined(rx.clone()));
            }
        }
        if !self.worth_leaving() {
            return StoreWant::Ready;
        }
        if self.explore {
            self.explore = false;
            self.refresh();
        }
        if self.under_way.len() >= MAX_ENTRIES {
            self.under_way
                .retain(|_, rx| !*rx.borrow() && rx.has_changed().is_ok());
        }
        let (done, rx) = tokio::sync::watch::channel(false);
        self.under_way.insert(key.clone(), rx);
        StoreWant::Read(Reading {
            key: key.clone(),
            since: self.writes,
            done,
        })
    }

    /// The read `r` found `raw`, in `seconds` (`None`: it failed, and the command will read the
    /// store itself and answer its error): it becomes a loan unless a write of its key came
    /// meanwhile, and its joiners wake.
    pub(super) fn finished(&mut self, r: Reading, id: u64, found: Option<(Option<Vec<u8>>, f64)>) {
        if let Some(rx) = self.under_way.get(&r.key)
            && rx.same_channel(&r.done.subscribe())
        {
            self.under_way.remove(&r.key);
        }
        if let Some((_, seconds)) = &found {
            self.read_took(*seconds);
        }
        if let Some((raw, seconds)) = found
            && !self.stale(id, r.since)
        {
            if self.loans.len() >= MAX_ENTRIES {
                self.loans.clear();
            }
            self.loans.insert(
                r.key,
                Loan {
                    raw,
                    since: r.since,
                    seconds,
                },
            );
        }
        r.done.send_replace(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bug: on a saturated node most trips queue for a core (ways there of 1 ms against
    /// reads of 200 us), and their average kept slow reads under the lock. The least of the
    /// latest trips is what counts.
    #[test]
    fn trips_that_queued_do_not_keep_slow_reads_under_the_lock() {
        let mut r = StoreReads::default();
        let asking = r.asking();
        r.handoff_took(30e-6);
        for _ in 0..TRIPS - 1 {
            r.handoff_took(2e-3);
        }
        for _ in 0..32 {
            r.read_under_lock_took(200e-6);
        }
        assert!(asking.load(std::sync::atomic::Ordering::Relaxed));
        // Once every trip in the window queued, the machine is that slow: the hand-off is.
        r.handoff_took(2e-3);
        assert!((r.costs().1 - 2000.0).abs() < 1e-6);
        assert!(!asking.load(std::sync::atomic::Ordering::Relaxed));
    }

    /// A miss leaves the lock while store reads cost more than leaving it; cheap ones stay,
    /// except one in `EXPLORE`, which keeps the hand-off measured.
    #[test]
    fn misses_leave_the_lock_only_while_store_reads_cost_more_than_the_hand_off() {
        let key = Bytes::from_static(b"k");
        let mut r = StoreReads::default();
        let asking = r.asking();
        r.handoff_took(20e-6);
        // Misses the server asks about when the flag says so, read under the lock otherwise.
        let mut left = 0;
        for _ in 0..EXPLORE * 2 {
            if asking.load(std::sync::atomic::Ordering::Relaxed) {
                assert!(
                    matches!(r.want(&key), StoreWant::Read(_)),
                    "it asked: it leaves"
                );
                left += 1;
            } else {
                assert!(matches!(r.want(&key), StoreWant::Ready));
                r.read_under_lock_took(2e-6);
            }
        }
        assert_eq!(left, 1, "cheap reads: only the explorer leaves");
        // The disk: reads of a millisecond.
        for _ in 0..32 {
            r.read_under_lock_took(1e-3);
        }
        assert!(asking.load(std::sync::atomic::Ordering::Relaxed));
        assert!(matches!(r.want(&key), StoreWant::Read(_)));
        // The page cache again: back under the lock once the average says so.
        for _ in 0..64 {
            r.read_took(2e-6);
        }
        assert!(!asking.load(std::sync::atomic::Ordering::Relaxed));
        assert!(matches!(r.want(&key), StoreWant::Ready));
    }
}
