//! [`WriteBehind`]: a [`FjallStore`] whose writes are acknowledged once they are in a log of its
//! own, and reach the LSM tree later, once a second, with every key written meanwhile coalesced
//! to its last value.
//!
//! Why: an LSM tree spends most of a write in its memtable, a skip list that every key is
//! searched into (fjall: 35% of a pipelined `SET`'s CPU time in `pliant serve`, against 4% for
//! its journal), while Redis's append-only file only appends. Here a write costs what an AOF
//! write costs (one append of the batch's bytes, handed to the kernel before it returns, as
//! fjall's journal is); a background thread moves the writes into the tree, each key once however
//! often it was written in that second. What a crash can lose is unchanged: a write that
//! returned is in the kernel (it survives a killed process), and one followed by a
//! [`Store::sync`] is on disk.
//!
//! ```text
//! <store dir>/log/<n>.log   segments: a header, then length-and-CRC framed batches; n grows
//! <store dir>/log/spare     the last applied segment's file, kept to be the next segment
//! ```
//!
//! - **Writes** ([`Store::batch`], `put`, `delete`): one record per batch, appended to the
//!   current segment and written to the kernel, then the batch's keys go into the *active* map
//!   (key → last value or deletion), all under one lock, so a reader sees all of a batch or none.
//! - **The applier** (a thread) every second, or sooner when the active map holds
//!   `max_pending_bytes` or an iterator asks: seals the segment and starts the next, moves the
//!   active map to *applying*, fsyncs the sealed segment, writes the map into fjall as one batch
//!   (or, when the budget started it, a bulk load's or a slot move's, ingests it: tables built
//!   straight from the sorted map, without fjall's journal and memtable, [`Store::ingest`];
//!   13-18% less CPU a moved key in three sittings of four, `move-ingest-34` in
//!   docs/benchmarks.md), syncs fjall, renames the segment to `spare` and syncs the directory.
//!   Only then is the segment gone, so a crash at any point leaves every write in the tree or
//!   in a segment (or both: replaying a write that is already in the tree writes the same
//!   value again).
//! - **Recycled segments**: the next segment is the spare file renamed, written over from its
//!   start. Under `--durability always` an fsync follows every group of writes, and an fsync of
//!   a file that grew must also commit the file system's journal (ext4: the new size and
//!   blocks), while one of blocks the file already had writes the data alone (half the time per
//!   fsync on ext4 here: `log-fsync` in docs/benchmarks.md); databases' write-ahead logs
//!   reuse their files for the same reason (RocksDB's `recycle_log_file_num`, PostgreSQL's WAL
//!   segments). What the spare held before must never be replayed: each segment's header holds
//!   the number it was opened as, every record's CRC covers that number, and sealing a segment
//!   writes an empty record, the seal, after its last batch, so the replay knows where a
//!   segment ends and an older life's records fail their CRC.
//! - **Reads**: a point read looks in the active map, then in the map being applied, then in
//!   the tree. An iterator lays the pending writes in its range (sorted when it is created, so
//!   its cost grows with what is pending, at most about a second of writes) over a snapshot of
//!   the tree taken under the same lock.
//! - **Backpressure**: a writer that finds `max_pending_bytes` already waiting blocks until the
//!   applier has caught up; memory stays bounded when writes come faster than fjall takes them.
//! - **Recovery** ([`FjallStore::open`], so any opener of the directory gets it): the segments
//!   are replayed in order into the tree, each to its seal, up to the first record that is torn
//!   or fails its CRC (a write that was cut off by a crash was never acknowledged), the tree is
//!   synced, and the segments and the spare are deleted. Segments of the format before the
//!   header (no seal, CRCs of the payload alone) are still read.
//! - **Failure**: if the log cannot be written, or the applier cannot write the tree, every later
//!   write is refused with [`StoreError::Poisoned`], the first error its source (reads go on,
//!   from the maps and the tree), and the segments stay for the next open to replay.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::ErrorKind;
use std::ops::Bound;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::dir::sync_dir;
use crate::{
    Batch, Entries, FjallStore, KeyRange, MAX_KEY_LEN, SharedBytes, Store, StoreError, Write,
};

/// The log's directory inside a store directory.
pub(crate) const LOG_DIR: &str = "log";

/// The applied segment kept to be the next one (see the module doc).
const SPARE: &str = "spare";

/// A segment's first bytes: this, then the number it was opened as (u64 little-endian), the seed
/// of its records' CRCs. Read as the length of a record of the format before it, the magic would
/// be 10^17 bytes: a segment of that format never starts with it.
const MAGIC: [u8; 8] = *b"PLNTLOG2";
const SEGMENT_HEADER: u64 = 16;

/// A record's header: the payload's length (u64: a batch may hold several 512-MiB values) and
/// its CRC-32C, little-endian.
const HEADER: usize = 12;

const PUT: u8 = 1;
const DELETE: u8 = 2;
/// A seal's whole payload. Not an empty record: zeros (a hole a power cut can leave where a write
/// had not reached the disk) read as an empty record whose CRC may match.
const SEAL: u8 = 3;

/// What a pending key costs besides its bytes (map slot, two vectors), for the byte budget.
const ENTRY_OVERHEAD: usize = 64;

/// The largest record buffer kept from one append to the next. A batch of a slot move is about
/// 1 MiB (`pliant_cluster::mover::BATCH_BYTES`) and its record a little more: under a smaller
/// cap the buffer went after every such batch and the next one grew a new one from nothing
/// (row `move-log-buffer-34` in docs/benchmarks.md); a larger batch (up to 64 MiB) still does
/// not keep its buffer for the life of the store.
const KEPT_BUFFER: usize = 4 << 20;

/// When the applier runs.
///
/// Neither number decides what a reader sees or what a crash loses; they trade memory and the
/// cost of an iterator (both grow with what is pending) against how many writes of one key are
/// coalesced into one insert into the tree.
#[derive(Debug, Clone)]
pub struct WriteBehindOptions {
    /// The longest a write waits before the applier moves it into the tree (default 1 s, the
    /// period of `--durability everysec`'s sync: the coalescing window).
    pub apply_every: Duration,
    /// Keys and values waiting for the applier, in bytes, beyond which the applier starts at once
    /// and writers wait for it (default 64 MiB, fjall's default memtable size: one application
    /// fills at most one memtable).
    pub max_pending_bytes: usize,
    /// Applications of at least this many bytes (default 64 MiB, as `max_pending_bytes`: the
    /// ones the budget started, a bulk load's or a slot move's) go into the tree by
    /// [`Store::ingest`], as tables of their own, rather than through its journal and memtable
    /// into tables later; smaller ones, an ordinary second of writes, into the memtable, where
    /// they make no small table each. `usize::MAX` never ingests.
    pub ingest_from: usize,
    /// Bytes of zeros written into the first segment at open (default 0), so that it starts as
    /// a recycled one would, on blocks it already has: for a store fsynced after every group of
    /// writes, whose first second of fsyncs would otherwise each commit the journal too. Later
    /// segments are recycled whatever this is.
    pub preallocate: u64,
}

impl Default for WriteBehindOptions {
    fn default() -> Self {
        Self {
            apply_every: Duration::from_secs(1),
            max_pending_bytes: 64 << 20,
            ingest_from: 64 << 20,
            preallocate: 0,
        }
    }
}

// Keys are the clients' to choose, so the hasher is seeded at random (against collision
// floods); the map's order is never seen: its keys are distinct, so any order applies the same.
type Pending = HashMap<SharedBytes, Option<SharedBytes>, foldhash::fast::RandomState>;

/// A [`FjallStore`] with its writes logged and applied behind (see the module doc).
#[derive(Debug)]
pub struct WriteBehind<S: Store + 'static = FjallStore> {
    shared: Arc<Shared<S>>,
    applier: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared<S> {
    tree: S,
    /// The directory errors name: the store directory (or, over another store, the log's).
    dir: PathBuf,
    log_dir: PathBuf,
    opts: WriteBehindOptions,
    state: Mutex<State>,
    /// Held by whoever fsyncs the log's files, until the outcome is recorded: Linux reports a
    /// failed writeback to one fsync of a file only, so a second fsync running beside the one
    /// that failed could return success for the same lost pages. Writers never take it.
    /// Lock order: this, then `state`.
    fsyncs: Mutex<()>,
    /// The applier waits on it.
    wake: Condvar,
    /// Writers held back and iterators waiting for an application wait on it.
    applied_cv: Condvar,
    /// Applications written through the tree's journal and memtable, and ingested.
    batched: std::sync::atomic::AtomicU64,
    ingested: std::sync::atomic::AtomicU64,
}

#[derive(Debug)]
struct State {
    active: Pending,
    active_bytes: usize,
    applying: Arc<Pending>,
    /// The segment being appended to, its number and where its next record goes. Shared so
    /// that a sync can run without the lock (see [`Store::sync`]).
    log: Arc<File>,
    segment: u64,
    pos: u64,
    /// The sealed segment being applied, kept so that a sync covers it too.
    sealed: Option<Arc<File>>,
    /// Whether a segment was created since the directory was last synced.
    dir_dirty: bool,
    want_apply: bool,
    stop: bool,
    /// The first failure: from then on every write and sync is refused with it as the cause.
    failed: Option<Arc<StoreError>>,
    buf: Vec<u8>,
}

impl WriteBehind<FjallStore> {
    /// Opens the store directory `dir` (see [`FjallStore::open`], which also replays what a
    /// crash left in the log) with its writes applied behind.
    pub fn open(dir: &Path, opts: WriteBehindOptions) -> Result<Self, StoreError> {
        Self::fjall(FjallStore::open(dir)?, opts)
    }

    /// A write-behind store in a fresh temporary directory, removed when it is dropped.
    pub fn temporary(opts: WriteBehindOptions) -> Result<Self, StoreError> {
        Self::fjall(FjallStore::temporary()?, opts)
    }

    fn fjall(tree: FjallStore, opts: WriteBehindOptions) -> Result<Self, StoreError> {
        let (dir, log_dir) = (tree.dir().to_path_buf(), tree.dir().join(LOG_DIR));
        Self::start(tree, dir, log_dir, opts)
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }
}

impl<S: Store + 'static> WriteBehind<S> {
    /// Writes behind over any store, with the log in `log_dir`: first replays what the log
    /// holds into `tree` (as [`FjallStore::open`] does for its own directory). For tests that
    /// make the store under the log fail ([`crate::FaultyStore`]).
    pub fn over(tree: S, log_dir: &Path, opts: WriteBehindOptions) -> Result<Self, StoreError> {
        recover(&tree, log_dir, log_dir)?;
        Self::start(tree, log_dir.to_path_buf(), log_dir.to_path_buf(), opts)
    }

    fn start(
        tree: S,
        store_dir: PathBuf,
        log_dir: PathBuf,
        opts: WriteBehindOptions,
    ) -> Result<Self, StoreError> {
        let io = |action| {
            let dir = store_dir.clone();
            move |source| StoreError::Io {
                dir: dir.clone(),
                action,
                source,
            }
        };
        if !log_dir.is_dir() {
            fs::create_dir_all(&log_dir).map_err(io("creating the log directory"))?;
            if let Some(parent) = log_dir.parent() {
                sync_dir(parent).map_err(io("syncing the log directory's parent"))?;
            }
        }
        // Opening the tree replayed and removed every segment; numbering goes on from the
        // highest one seen anyway, so a segment that survived is never appended to.
        let segment = segments(&log_dir)
            .map_err(io("listing the log"))?
            .last()
            .map_or(0, |(n, _)| n + 1);
        let log = open_segment(&log_dir, segment).map_err(io("creating a log segment"))?;
        if opts.preallocate > SEGMENT_HEADER {
            fill_zeros(&log, opts.preallocate).map_err(io("preallocating a log segment"))?;
        }
        let shared = Arc::new(Shared {
            tree,
            dir: store_dir.clone(),
            log_dir,
            opts,
            fsyncs: Mutex::new(()),
            state: Mutex::new(State {
                active: Pending::default(),
                active_bytes: 0,
                applying: Arc::new(Pending::default()),
                log: Arc::new(log),
                segment,
                pos: SEGMENT_HEADER,
                sealed: None,
                dir_dirty: true,
                want_apply: false,
                stop: false,
                failed: None,
                buf: Vec::new(),
            }),
            wake: Condvar::new(),
            applied_cv: Condvar::new(),
            batched: Default::default(),
            ingested: Default::default(),
        });
        let s = Arc::clone(&shared);
        let applier = std::thread::Builder::new()
            .name("pliant-store-applier".into())
            .spawn(move || s.run())
            .map_err(io("starting the applier thread"))?;
        Ok(Self {
            shared,
            applier: Some(applier),
        })
    }

    /// Applications so far: written through the tree's journal and memtable, and ingested
    /// (see [`WriteBehindOptions::ingest_from`]).
    pub fn applications(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (
            self.shared.batched.load(Relaxed),
            self.shared.ingested.load(Relaxed),
        )
    }

    /// Stops the applier with whatever is pending left only in the log, as a killed process
    /// would leave it (the kernel keeps what was written): for crash tests. The next open
    /// replays it.
    #[doc(hidden)]
    pub fn abandon(mut self) {
        let abandoned = StoreError::Io {
            dir: self.shared.dir.clone(),
            action: "abandoning the store (a crash test)",
            source: std::io::Error::other("abandoned"),
        };
        self.lock().failed = Some(Arc::new(abandoned));
        self.stop();
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.lock()
    }

    fn stop(&mut self) {
        self.lock().stop = true;
        self.shared.wake.notify_all();
        if let Some(h) = self.applier.take() {
            let _ = h.join();
        }
    }

    /// The entries of the tree that `iter` gives, with the writes not yet in it laid over them:
    /// the pending writes `within` the range, taken under the lock together with the tree's
    /// snapshot (the applier needs the lock to rotate, so no newer write can reach the tree
    /// between the two, and the writes being applied are in both, with the same values).
    fn merged<'a>(
        &'a self,
        within: impl Fn(&[u8]) -> bool,
        iter: impl FnOnce(&'a S) -> Entries<'a>,
    ) -> Entries<'a> {
        let st = self.lock();
        // The active writes come after the ones being applied, and replace them.
        let over: BTreeMap<Vec<u8>, Option<Vec<u8>>> = st
            .applying
            .iter()
            .chain(st.active.iter())
            .filter(|(k, _)| within(k))
            .map(|(k, v)| (k.to_vec(), v.as_deref().map(<[u8]>::to_vec)))
            .collect();
        let tree = iter(&self.shared.tree);
        drop(st);
        Box::new(Merge {
            tree: tree.peekable(),
            over: over.into_iter().peekable(),
        })
    }

    /// What `found` makes of `key`'s pending write, if it has one (`None` in it: deleted).
    fn lookup<T>(&self, key: &[u8], found: impl Fn(Option<&[u8]>) -> T) -> Option<T> {
        let st = self.lock();
        st.active
            .get(key)
            .or_else(|| st.applying.get(key))
            .map(|v| found(v.as_deref()))
    }
}

impl<S: Store + 'static> Drop for WriteBehind<S> {
    fn drop(&mut self) {
        // The applier applies what is pending before it exits.
        self.stop();
    }
}

impl<S: Store> Shared<S> {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn poisoned(&self, first: &Arc<StoreError>) -> StoreError {
        StoreError::Poisoned {
            dir: self.dir.clone(),
            first: first.clone(),
        }
    }

    fn io(&self, action: &'static str) -> impl Fn(std::io::Error) -> StoreError + '_ {
        move |source| StoreError::Io {
            dir: self.dir.clone(),
            action,
            source,
        }
    }

    /// The applier thread.
    fn run(&self) {
        loop {
            let mut st = self.lock();
            let until = Instant::now() + self.opts.apply_every;
            while !st.stop
                && !st.want_apply
                && st.active_bytes < self.opts.max_pending_bytes
                && st.failed.is_none()
            {
                let now = Instant::now();
                if now >= until {
                    break;
                }
                st = self
                    .wake
                    .wait_timeout(st, until - now)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            st.want_apply = false;
            if st.failed.is_some() || (st.stop && st.active.is_empty()) {
                self.applied_cv.notify_all();
                return;
            }
            if st.active.is_empty() {
                continue;
            }
            // Seal the segment and start the next one.
            let next = st.segment + 1;
            let sealing = (|| {
                let seal = seal(st.segment);
                st.log
                    .write_all_at(&seal, st.pos)
                    .map_err(self.io("sealing a log segment"))?;
                open_segment(&self.log_dir, next).map_err(self.io("creating a log segment"))
            })();
            let log = match sealing {
                Ok(f) => f,
                Err(e) => {
                    st.failed = Some(Arc::new(e));
                    self.applied_cv.notify_all();
                    return;
                }
            };
            let sealed = std::mem::replace(&mut st.log, Arc::new(log));
            let segment = std::mem::replace(&mut st.segment, next);
            st.pos = SEGMENT_HEADER;
            st.sealed = Some(Arc::clone(&sealed));
            st.dir_dirty = true;
            let pending = Arc::new(std::mem::take(&mut st.active));
            let bytes = std::mem::take(&mut st.active_bytes);
            st.applying = Arc::clone(&pending);
            drop(st);

            let done = self.apply(&sealed, segment, &pending, bytes);
            let mut st = self.lock();
            match done {
                Ok(()) => {
                    st.applying = Arc::new(Pending::default());
                    st.sealed = None;
                }
                // `applying` stays: reads still find those writes, and the segment stays for
                // the next open.
                Err(e) => st.failed = Some(Arc::new(e)),
            }
            self.applied_cv.notify_all();
        }
    }

    fn apply(
        &self,
        sealed: &File,
        segment: u64,
        pending: &Pending,
        bytes: usize,
    ) -> Result<(), StoreError> {
        {
            let _fsyncing = self.fsyncs.lock().unwrap_or_else(|p| p.into_inner());
            sealed
                .sync_data()
                .map_err(self.io("syncing a sealed log segment"))?;
        }
        let mut batch = Batch::new();
        // In key order: the tree's memtable is a skip list, and inserts in order find their
        // place through nodes the last insert just visited, where the map's order sent each to
        // cold memory (the applier's CPU a second of group-committed SETs fell by a third, sort
        // included: `serve-group-commit-30h` in docs/benchmarks.md).
        let mut sorted: Vec<_> = pending.iter().collect();
        sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (k, v) in sorted {
            match v {
                Some(v) => batch.put_shared(k.clone(), v.clone()),
                None => batch.delete_shared(k.clone()),
            };
        }
        if bytes >= self.opts.ingest_from {
            let started = Instant::now();
            self.tree.ingest(&batch)?;
            self.ingested
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::info!(
                mib = bytes >> 20,
                keys = batch.len(),
                secs = started.elapsed().as_secs_f64(),
                "store: a bulk application ingested as tables"
            );
        } else {
            self.tree.batch(&batch)?;
            self.batched
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.tree.sync()?;
        // The segment may go only once the tree has its writes on disk, and its removal must be
        // on disk before a later segment's: a removal that a power cut undid would otherwise
        // replay this segment's older values over the later one's.
        fs::rename(
            segment_path(&self.log_dir, segment),
            self.log_dir.join(SPARE),
        )
        .map_err(self.io("keeping an applied log segment as the spare"))?;
        sync_dir(&self.log_dir).map_err(self.io("syncing the log directory"))
    }
}

impl<S: Store + 'static> Store for WriteBehind<S> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        match self.lookup(key, |v| v.map(<[u8]>::to_vec)) {
            Some(v) => Ok(v),
            None => self.shared.tree.get(key),
        }
    }

    fn value_len(&self, key: &[u8]) -> Result<Option<usize>, StoreError> {
        match self.lookup(key, |v| v.map(<[u8]>::len)) {
            Some(n) => Ok(n),
            None => self.shared.tree.value_len(key),
        }
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        let mut b = Batch::new();
        b.put(key, value);
        self.batch(&b)
    }

    fn delete(&self, key: &[u8]) -> Result<(), StoreError> {
        let mut b = Batch::new();
        b.delete(key);
        self.batch(&b)
    }

    fn batch(&self, batch: &Batch) -> Result<(), StoreError> {
        self.batch_take(&mut batch.clone())
    }

    fn batch_take(&self, batch: &mut Batch) -> Result<(), StoreError> {
        batch.check()?;
        if batch.is_empty() {
            return Ok(());
        }
        let mut st = self.lock();
        while st.active_bytes >= self.shared.opts.max_pending_bytes && st.failed.is_none() {
            st.want_apply = true;
            self.shared.wake.notify_all();
            st = self
                .shared
                .applied_cv
                .wait(st)
                .unwrap_or_else(|p| p.into_inner());
        }
        if let Some(first) = &st.failed {
            return Err(self.shared.poisoned(first));
        }
        let st = &mut *st;
        encode(batch, st.segment, &mut st.buf);
        if let Err(e) = st.log.write_all_at(&st.buf, st.pos) {
            // Part of the record may be in the segment: nothing after it could be replayed.
            let kept = std::io::Error::new(e.kind(), e.to_string());
            st.failed = Some(Arc::new(self.shared.io("appending to the log")(kept)));
            self.shared.applied_cv.notify_all();
            return Err(self.shared.io("appending to the log")(e));
        }
        st.pos += st.buf.len() as u64;
        for w in batch.take_writes() {
            let (key, value) = match w {
                Write::Put { key, value } => (key, Some(value)),
                Write::Delete { key } => (key, None),
            };
            st.active_bytes += key.len() + value.as_ref().map_or(0, |v| v.len()) + ENTRY_OVERHEAD;
            st.active.insert(key, value);
        }
        if st.active_bytes >= self.shared.opts.max_pending_bytes {
            self.shared.wake.notify_all();
        }
        if st.buf.capacity() > KEPT_BUFFER {
            st.buf = Vec::new();
        }
        Ok(())
    }

    fn sync(&self) -> Result<(), StoreError> {
        // The files are synced without the lock: writers go on appending meanwhile, and their
        // batches are on disk with the next sync (under `--durability always`, the next group
        // commit's). A write that returned before this call is in `log`, or in a segment sealed
        // since (still `sealed`, or applied: then the tree has it on disk).
        // One at a time, the outcome recorded before the next (see `Shared::fsyncs`).
        let _fsyncing = self.shared.fsyncs.lock().unwrap_or_else(|p| p.into_inner());
        let (log, sealed, dir_dirty, segment) = {
            let st = self.lock();
            if let Some(first) = &st.failed {
                return Err(self.shared.poisoned(first));
            }
            (
                Arc::clone(&st.log),
                st.sealed.clone(),
                st.dir_dirty,
                st.segment,
            )
        };
        let synced = (|| {
            log.sync_data().map_err(|e| ("syncing the log", e))?;
            if let Some(sealed) = &sealed {
                sealed
                    .sync_data()
                    .map_err(|e| ("syncing a sealed log segment", e))?;
            }
            if dir_dirty {
                sync_dir(&self.shared.log_dir).map_err(|e| ("syncing the log directory", e))?;
            }
            Ok(())
        })();
        let mut st = self.lock();
        match synced {
            Ok(()) => {
                // A failure recorded meanwhile (the applier's write of the tree) may have been
                // an fsync of these files whose error this one did not see.
                if let Some(first) = &st.failed {
                    return Err(self.shared.poisoned(first));
                }
                // A segment created since is not in the directory's entry this sync wrote.
                if dir_dirty && st.segment == segment {
                    st.dir_dirty = false;
                }
                Ok(())
            }
            Err((action, e)) => {
                // After a failed fsync the kernel may drop the pages it could not write and
                // report the next fsync as a success: a later write could then be acknowledged
                // behind a hole in the log. Nothing more is acknowledged.
                let kept = std::io::Error::new(e.kind(), e.to_string());
                if st.failed.is_none() {
                    st.failed = Some(Arc::new(self.shared.io(action)(kept)));
                }
                self.shared.applied_cv.notify_all();
                Err(self.shared.io(action)(e))
            }
        }
    }

    fn range(&self, range: KeyRange<'_>) -> Entries<'_> {
        let (start, end) = range;
        let within = |k: &[u8]| {
            (match start {
                Bound::Included(s) => k >= s,
                Bound::Excluded(s) => k > s,
                Bound::Unbounded => true,
            }) && (match end {
                Bound::Included(e) => k <= e,
                Bound::Excluded(e) => k < e,
                Bound::Unbounded => true,
            })
        };
        self.merged(within, |tree| tree.range(range))
    }

    fn prefix(&self, prefix: &[u8]) -> Entries<'_> {
        if prefix.len() > MAX_KEY_LEN {
            return Box::new(std::iter::empty());
        }
        self.merged(|k| k.starts_with(prefix), |tree| tree.prefix(prefix))
    }
}

/// The tree's entries with the pending writes laid over them, both in key order.
struct Merge<'a> {
    tree: std::iter::Peekable<Entries<'a>>,
    over: std::iter::Peekable<std::collections::btree_map::IntoIter<Vec<u8>, Option<Vec<u8>>>>,
}

impl Iterator for Merge<'_> {
    type Item = Result<crate::Entry, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let order = match (self.tree.peek(), self.over.peek()) {
                (_, None) | (Some(Err(_)), _) => return self.tree.next(),
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (Some(Ok((tk, _))), Some((ok, _))) => tk.cmp(ok),
            };
            if order == std::cmp::Ordering::Less {
                return self.tree.next();
            }
            if order == std::cmp::Ordering::Equal {
                // The pending write replaces the tree's value.
                self.tree.next();
            }
            match self.over.next()? {
                (k, Some(v)) => return Some(Ok((k, v))),
                (_, None) => continue,
            }
        }
    }
}

/// What [`recover`] found in the log.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Recovered {
    pub segments: usize,
    pub batches: usize,
    /// Bytes after the last whole record (a write cut off by the crash), skipped.
    pub torn_bytes: u64,
}

/// Replays the log segments in `log_dir` into `tree`, in order, each to its seal, up to the first
/// damaged record; syncs the tree; removes the segments and the spare. Errors name `dir`.
pub(crate) fn recover(
    tree: &dyn Store,
    log_dir: &Path,
    dir: &Path,
) -> Result<Recovered, StoreError> {
    let io = |action| {
        move |source| StoreError::Io {
            dir: dir.to_path_buf(),
            action,
            source,
        }
    };
    let list = match segments(log_dir) {
        Ok(l) => l,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Recovered::default()),
        Err(e) => return Err(io("listing the log")(e)),
    };
    let mut found = Recovered::default();
    let mut writes: Pending = Pending::default();
    'segments: for (number, path) in &list {
        found.segments += 1;
        let bytes = fs::read(path).map_err(io("reading a log segment"))?;
        let (mut at, seed) = match bytes.split_first_chunk::<8>() {
            Some((magic, rest)) if *magic == MAGIC => match rest.first_chunk::<8>() {
                Some(n) if u64::from_le_bytes(*n) == *number => {
                    (SEGMENT_HEADER as usize, Some(*number))
                }
                // Cut off while its header was written, or a recycled file whose new header
                // did not reach the disk (its rename did): what follows is the spare's older
                // life, and nothing written in this one was acknowledged as on disk (its header
                // went to the disk with the first fsync that covered a write of it).
                _ => {
                    found.torn_bytes = bytes.len() as u64;
                    break 'segments;
                }
            },
            _ => (0, None),
        };
        while at < bytes.len() {
            match decode(&bytes[at..], seed) {
                Record::Batch(used, batch) => {
                    for (k, v) in batch {
                        writes.insert(k.into(), v.map(Into::into));
                    }
                    found.batches += 1;
                    at += used;
                }
                // What follows, if anything, is the spare's older life.
                Record::Seal => continue 'segments,
                Record::Damaged => {
                    // Nothing after a damaged record was acknowledged after it was written, and
                    // what follows it cannot be trusted to be whole: stop here, for every
                    // later segment too.
                    found.torn_bytes = (bytes.len() - at) as u64;
                    break 'segments;
                }
            }
        }
    }
    if !writes.is_empty() {
        let mut batch = Batch::new();
        for (k, v) in &writes {
            match v {
                Some(v) => batch.put(k, v),
                None => batch.delete(k),
            };
        }
        tree.batch(&batch)?;
        tree.sync()?;
    }
    // Oldest first, each removal on disk before the next: a power cut in between leaves the
    // newest segments, whose replay over the tree writes each of their keys' last value again.
    // Left the other way, an older segment could be replayed over a newer value.
    for (_, path) in &list {
        fs::remove_file(path).map_err(io("removing a replayed log segment"))?;
        sync_dir(log_dir).map_err(io("syncing the log directory"))?;
    }
    match fs::remove_file(log_dir.join(SPARE)) {
        Err(e) if e.kind() != ErrorKind::NotFound => {
            return Err(io("removing the spare log segment")(e));
        }
        _ => {}
    }
    Ok(found)
}

/// The numbered segments in `dir`, in order. Other files are left alone.
fn segments(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir)? {
        let path = e?.path();
        let n = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".log"))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(n) = n {
            out.push((n, path));
        }
    }
    out.sort();
    Ok(out)
}

fn segment_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:020}.log"))
}

/// The bytes of a log segment numbered `number` holding `batches` (and no seal), as a store
/// would leave it: for tests of the replay.
#[doc(hidden)]
pub fn log_segment(number: u64, batches: &[Batch]) -> Vec<u8> {
    let mut out = Vec::from(MAGIC);
    out.extend_from_slice(&number.to_le_bytes());
    let mut record = Vec::new();
    for b in batches {
        encode(b, number, &mut record);
        out.extend_from_slice(&record);
    }
    out
}

/// Segment `n`, on the spare's blocks if there is a spare, its header written; records go after
/// [`SEGMENT_HEADER`].
fn open_segment(dir: &Path, n: u64) -> std::io::Result<File> {
    let path = segment_path(dir, n);
    match fs::rename(dir.join(SPARE), &path) {
        Err(e) if e.kind() != ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    // Not truncated: the spare's blocks are the point.
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)?;
    let mut header = [0; SEGMENT_HEADER as usize];
    header[..8].copy_from_slice(&MAGIC);
    header[8..].copy_from_slice(&n.to_le_bytes());
    f.write_all_at(&header, 0)?;
    Ok(f)
}

/// Zeros from the segment header up to `len` bytes, on disk.
fn fill_zeros(f: &File, len: u64) -> std::io::Result<()> {
    let zeros = vec![0; 1 << 20];
    let mut at = SEGMENT_HEADER;
    while at < len {
        let n = (len - at).min(zeros.len() as u64);
        f.write_all_at(&zeros[..n as usize], at)?;
        at += n;
    }
    f.sync_data()
}

/// A record's CRC: of the segment's number, then of the payload (see the module doc); of the
/// payload alone in a segment of the format before the header.
fn checksum(seed: Option<u64>, payload: &[u8]) -> u32 {
    let seeded = seed.map_or(0, |n| crc32c::crc32c(&n.to_le_bytes()));
    crc32c::crc32c_append(seeded, payload)
}

/// One record of segment `segment`: payload length and CRC, then per write a tag, the key's
/// length and key, and for a put the value's length and value (lengths u32 little-endian).
fn encode(batch: &Batch, segment: u64, out: &mut Vec<u8>) {
    out.clear();
    // Its size first: grown by doubling, a record of 1 MiB was copied over and over.
    let size = HEADER
        + batch
            .writes()
            .iter()
            .map(|w| match w {
                // The tag, then each length (u32) and its bytes, as written below.
                Write::Put { key, value } => 1 + 4 + key.len() + 4 + value.len(),
                Write::Delete { key } => 1 + 4 + key.len(),
            })
            .sum::<usize>();
    out.reserve(size);
    out.extend_from_slice(&[0; HEADER]);
    for w in batch.writes() {
        match w {
            Write::Put { key, value } => {
                out.push(PUT);
                put_bytes(out, key);
                put_bytes(out, value);
            }
            Write::Delete { key } => {
                out.push(DELETE);
                put_bytes(out, key);
            }
        }
    }
    debug_assert_eq!(out.len(), size, "the record's size as computed");
    frame(segment, out);
}

/// Segment `segment`'s seal: a record of the payload [`SEAL`] alone.
fn seal(segment: u64) -> Vec<u8> {
    let mut out = vec![0; HEADER];
    out.push(SEAL);
    frame(segment, &mut out);
    out
}

/// Fills in the header of the record in `out`.
fn frame(segment: u64, out: &mut [u8]) {
    let payload = &out[HEADER..];
    let len = payload.len() as u64;
    let crc = checksum(Some(segment), payload);
    out[..8].copy_from_slice(&len.to_le_bytes());
    out[8..HEADER].copy_from_slice(&crc.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    let len = u32::try_from(b.len()).expect("keys and values are checked to fit in u32");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(b);
}

type Decoded = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// What [`decode`] found.
#[derive(Debug, PartialEq)]
enum Record {
    /// A batch, and the record's length.
    Batch(usize, Decoded),
    /// The segment's seal: nothing after it belongs to the segment.
    Seal,
    /// Torn, damaged, or from an older life of the file.
    Damaged,
}

/// The record at the start of `bytes`, of a segment whose CRCs are seeded with `seed` (`None`:
/// the format before the header, which has no seal).
fn decode(bytes: &[u8], seed: Option<u64>) -> Record {
    decode_batch(bytes, seed).unwrap_or(Record::Damaged)
}

fn decode_batch(bytes: &[u8], seed: Option<u64>) -> Option<Record> {
    let len = usize::try_from(u64::from_le_bytes(*bytes.first_chunk::<8>()?)).ok()?;
    let crc = u32::from_le_bytes(bytes.get(8..HEADER)?.try_into().ok()?);
    let payload = bytes.get(HEADER..HEADER.checked_add(len)?)?;
    // An empty batch is never written, and zeros (a hole a power cut can leave where a write
    // had not reached the disk, or a preallocated segment's rest) would pass as one in a
    // segment of the format before the header: the CRC of nothing is 0.
    if len == 0 || checksum(seed, payload) != crc {
        return None;
    }
    if payload == [SEAL] {
        return seed.map(|_| Record::Seal);
    }
    let mut writes = Vec::new();
    let mut p = payload;
    while let Some((&tag, rest)) = p.split_first() {
        let (key, rest) = take_bytes(rest)?;
        match tag {
            PUT => {
                let (value, rest) = take_bytes(rest)?;
                writes.push((key.to_vec(), Some(value.to_vec())));
                p = rest;
            }
            DELETE => {
                writes.push((key.to_vec(), None));
                p = rest;
            }
            _ => return None,
        }
    }
    Some(Record::Batch(HEADER + len, writes))
}

fn take_bytes(p: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_le_bytes(p.get(..4)?.try_into().ok()?) as usize;
    let end = 4usize.checked_add(len)?;
    Some((p.get(4..end)?, p.get(end..)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_a_cut_or_flipped_one_is_refused() {
        let mut b = Batch::new();
        b.put(b"k", b"v").delete(b"gone").put(b"", b"");
        let mut buf = Vec::new();
        encode(&b, 7, &mut buf);
        let Record::Batch(used, writes) = decode(&buf, Some(7)) else {
            panic!("a whole record is read back");
        };
        assert_eq!(used, buf.len());
        assert_eq!(
            writes,
            vec![
                (b"k".to_vec(), Some(b"v".to_vec())),
                (b"gone".to_vec(), None),
                (Vec::new(), Some(Vec::new())),
            ]
        );
        for cut in 0..buf.len() {
            assert_eq!(
                decode(&buf[..cut], Some(7)),
                Record::Damaged,
                "cut at {cut}"
            );
        }
        for i in 0..buf.len() {
            let mut bad = buf.clone();
            bad[i] ^= 0x40;
            assert_eq!(
                decode(&bad, Some(7)),
                Record::Damaged,
                "bit flipped in byte {i}"
            );
        }
    }

    #[test]
    fn a_record_is_read_in_its_own_segment_only_and_a_seal_is_told_from_zeros() {
        let mut b = Batch::new();
        b.put(b"k", b"v");
        let mut buf = Vec::new();
        encode(&b, 7, &mut buf);
        // The same bytes in a recycled file opened as another segment are an older life's.
        assert_eq!(decode(&buf, Some(8)), Record::Damaged);
        assert_eq!(decode(&buf, None), Record::Damaged);
        let seal = seal(7);
        assert_eq!(decode(&seal, Some(7)), Record::Seal);
        assert_eq!(decode(&seal, Some(8)), Record::Damaged);
        for seed in [None, Some(0), Some(7)] {
            assert_eq!(
                decode(&[0; 64], seed),
                Record::Damaged,
                "zeros, seed {seed:?}"
            );
        }
    }

    /// The checksum as logs written before `crc32c` computed it (the crate `crc`, CRC-32/ISCSI,
    /// slice-by-16): every log on disk holds these sums.
    const OLD_CRC: crc::Crc<u32, crc::Table<16>> =
        crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_ISCSI);

    #[test]
    fn the_checksum_is_the_one_logs_written_before_hold() {
        let mut data = vec![0u8; 3000];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for b in &mut data {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        for len in [0, 1, 7, 8, 15, 16, 17, 63, 64, 65, 1000, 3000] {
            let payload = &data[..len];
            for seed in [
                None,
                Some(0),
                Some(1),
                Some(u64::MAX),
                Some(0x0123_4567_89ab_cdef),
            ] {
                let mut d = OLD_CRC.digest();
                if let Some(n) = seed {
                    d.update(&n.to_le_bytes());
                }
                d.update(payload);
                assert_eq!(
                    checksum(seed, payload),
                    d.finalize(),
                    "{len} bytes, seed {seed:?}"
                );
            }
        }
    }

    #[test]
    fn a_record_of_the_format_before_the_header_is_read() {
        // That format: the CRC of the payload alone, and no segment header.
        let mut b = Batch::new();
        b.put(b"old", b"record");
        let mut buf = Vec::new();
        encode(&b, 0, &mut buf);
        let crc = OLD_CRC.checksum(&buf[HEADER..]);
        buf[8..HEADER].copy_from_slice(&crc.to_le_bytes());
        let Record::Batch(used, writes) = decode(&buf, None) else {
            panic!("an old record is read");
        };
        assert_eq!(used, buf.len());
        assert_eq!(writes, vec![(b"old".to_vec(), Some(b"record".to_vec()))]);
    }
}
