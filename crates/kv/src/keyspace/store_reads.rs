//! Store reads off the keyspace lock.
//!
//! A command that reads a key memory does not hold must read the store, which may mean a disk
//! read. Done under the keyspace lock, that read stalls every client of the node; so the server
//! asks first, under the lock ([`StoreReads::want`]), which of a command's keys need the store,
//! reads those with the lock released (on the blocking pool), and hands the values back as a
//! *loan*, which the command then finds where it would have read the store. Readers of a key
//! whose read is already under way join it instead of reading again.
//!
//! A loan is the store's value as of a write sequence: it is used only while no write of its key
//! (and no flush) has happened since that read began. Writes are stamped in a small table indexed
//! by the key's hash, so the check costs one array read; two keys sharing an entry can only make
//! a loan look stale, never a stale loan look good, and a loan found stale is simply not used (the
//! command reads the store itself, under the lock, as before).

use std::collections::HashMap;

use bytes::Bytes;

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
}

impl Default for StoreReads {
    fn default() -> Self {
        Self {
            under_way: HashMap::default(),
            loans: HashMap::default(),
            writes: 0,
            stamps: vec![0; STAMPS].into_boxed_slice(),
            flushed: 0,
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

    /// Joins the read of `key` under way, or starts one.
    pub(super) fn want(&mut self, key: &Bytes) -> StoreWant {
        if let Some(rx) = self.under_way.get(key) {
            // Under way until its reader finishes, or goes away without finishing it.
            if !*rx.borrow() && rx.has_changed().is_ok() {
                return StoreWant::Join(Joined(rx.clone()));
            }
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
