//! The fjall backend: one keyspace of an LSM tree in the store directory's `fjall/`.
//!
//! **Large values beside the tree.** A store created by this build keeps every value of at
//! least [`SEPARATED_FROM`] bytes in blob files beside the tree, the tree holding the key and
//! where its value is (fjall's key-value separation, after WiscKey, FAST'16): compactions then
//! rewrite keys and pointers, not values. Why: a node that takes a slot's keys from another
//! (a rescale, the balancer) writes them all at once, and with values inside the tree its
//! compactions rewrote each value several times over; most of the CPU a moved key cost the
//! receiving node at data scale (issue 34's 2 GiB commission of 1 KiB values, 2,000,000 keys
//! over 3 nodes: `move-kv-separation-34` in docs/benchmarks.md) went there. Measured in 3
//! alternating rounds: 17.6-20.3 µs of the nodes' CPU a key moved inline, 10.7-12.1
//! separated, the move 5.1-5.8 s against 3.2-3.5 s. What it costs: a point read of a separated
//! value reads its blob file too, and blob files hold overwritten and deleted values until
//! fjall's garbage collection rewrites a file that is mostly stale (its defaults, kept).
//! A store created before keeps its values in the tree: fjall records a keyspace's layout
//! when it creates it, so both open and work here.
//!
//! **Bulk batches as tables.** [`Store::ingest`] builds tables (and blob files) straight from a
//! sorted batch with fjall's ingestion and registers them under one sequence number above
//! every earlier write, where [`Store::batch`] writes each key to fjall's journal and memtable
//! and a flush writes the table later. The write-behind applier ingests the applications its
//! pending budget starts (a bulk load's, a slot move's), which are as large as a memtable, so
//! the tables are no smaller than a flush makes. Its price: each ingestion fsyncs its files and
//! the tree's version, and a write to the same keys during it could end up under it (fjall's
//! ingestion is for one writer; the applier is its tree's only one).

use std::ops::Bound;
use std::path::Path;

use fjall::{
    Database, Keyspace, KeyspaceCreateOptions, KvSeparationOptions, PersistMode, Readable,
};

use crate::dir::StoreDir;
use crate::{
    Batch, Entries, KeyRange, MAX_KEY_LEN, Store, StoreError, Write, check_key, check_put,
};

const KEYSPACE: &str = "values";
const DATA_DIR: &str = "fjall";
/// How many times an open tries fjall's lock again, 10 ms apart, while this process's previous
/// handle lets go of it (see [`FjallStore::open`]). fjall itself tries 3 times, 100 ms apart,
/// before it answers `Locked`, so this bounds the wait at about 40 s: a bound, not a wait
/// anyone should meet (a handle's threads let go within milliseconds of its drop).
const LOCKED_RETRIES: u32 = 200;
/// The leading byte of every key fjall holds for a user key.
const TAG: u8 = 0;

/// The size from which a value lives in a blob file (see the module doc): fjall's own default
/// (lsm-tree's `KvSeparationOptions`), below which the extra read of a separated value would
/// cost more than the compactions it saves.
pub const SEPARATED_FROM: u32 = 1024;

/// How a store about to be created lays out its values (a store that exists keeps its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// Values of [`SEPARATED_FROM`] bytes or more in blob files: what this build creates.
    Separated,
    /// Every value in the tree: what stores created before this build hold.
    #[cfg_attr(not(test), allow(dead_code))]
    Inline,
}

impl Layout {
    fn options(self) -> KeyspaceCreateOptions {
        let o = KeyspaceCreateOptions::default();
        match self {
            Layout::Separated => o.with_kv_separation(Some(
                KvSeparationOptions::default().separation_threshold(SEPARATED_FROM),
            )),
            Layout::Inline => o,
        }
    }
}

/// A store on disk, in fjall.
///
/// Writes go to fjall's journal (buffered by the OS) and are visible at once; [`Store::sync`]
/// fsyncs the journal. After a crash the store reopens at a batch boundary no earlier than the
/// last sync.
///
/// Every read goes through a fjall snapshot: fjall applies a batch to its memtable key by key
/// and only then publishes its sequence number, so a read at "the latest" sequence number could
/// see part of a batch that a snapshot cannot.
pub struct FjallStore {
    // Dropped in this order: fjall joins its workers and closes its files before the lock is
    // released, so a reopen right after a drop finds the directory free, and before the
    // temporary directory is removed.
    db: Database,
    values: Keyspace,
    dir: StoreDir,
    _temporary: Option<tempfile::TempDir>,
}

impl std::fmt::Debug for FjallStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FjallStore")
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl FjallStore {
    /// Opens the store directory `dir`, creating the store if the directory is missing or
    /// empty.
    ///
    /// Fails with [`StoreError::Locked`] if another handle (in any process) has it open,
    /// [`StoreError::FormatVersion`] if it was written by a build with another format version,
    /// and [`StoreError::NotAStore`] if it is a non-empty directory that is not a store.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        Self::open_as(dir, Layout::Separated)
    }

    fn open_as(dir: &Path, layout: Layout) -> Result<Self, StoreError> {
        let dir = StoreDir::open(dir)?;
        let path = dir.path();
        let backend = |action| {
            move |e: fjall::Error| match e {
                fjall::Error::Locked => StoreError::Locked {
                    dir: path.to_path_buf(),
                },
                e => StoreError::Backend {
                    dir: path.to_path_buf(),
                    action,
                    source: Box::new(e),
                },
            }
        };
        // The directory's own lock is ours, so no other process has the store: a fjall lock
        // still held is this process's previous handle, whose background threads let go of
        // the database only after the handle itself was dropped (a reopen right after a close
        // met it, in a test, once in many runs). It is waited for, briefly.
        let mut tries = 0;
        let db = loop {
            match Database::builder(dir.path().join(DATA_DIR)).open() {
                Err(fjall::Error::Locked) if tries < LOCKED_RETRIES => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                r => break r.map_err(backend("opening fjall"))?,
            }
        };
        let values = db
            .keyspace(KEYSPACE, || layout.options())
            .map_err(backend("opening the keyspace"))?;
        let store = Self {
            db,
            values,
            dir,
            _temporary: None,
        };
        // Writes a `WriteBehind` acknowledged but had not applied when the process stopped.
        crate::behind::recover(
            &store,
            &store.dir().join(crate::behind::LOG_DIR),
            store.dir(),
        )?;
        Ok(store)
    }

    /// A store in a fresh temporary directory, removed when the store is dropped.
    pub fn temporary() -> Result<Self, StoreError> {
        let tmp = tempfile::tempdir().map_err(|source| StoreError::Io {
            dir: std::env::temp_dir(),
            action: "creating a temporary directory",
            source,
        })?;
        let mut s = Self::open(tmp.path())?;
        s._temporary = Some(tmp);
        Ok(s)
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn err(&self, action: &'static str) -> impl Fn(fjall::Error) -> StoreError + '_ {
        move |e| match e {
            // fjall refuses every write after a failed journal fsync, as `WriteBehind` does.
            fjall::Error::Poisoned => StoreError::Poisoned {
                dir: self.dir.path().to_path_buf(),
                first: std::sync::Arc::new(StoreError::Backend {
                    dir: self.dir.path().to_path_buf(),
                    action,
                    source: Box::new(e),
                }),
            },
            e => StoreError::Backend {
                dir: self.dir.path().to_path_buf(),
                action,
                source: Box::new(e),
            },
        }
    }

    fn entries(&self, iter: fjall::Iter) -> Entries<'_> {
        Box::new(iter.map(|g| {
            g.into_inner()
                .map(|(k, v)| (k.get(1..).unwrap_or_default().to_vec(), v.to_vec()))
                .map_err(self.err("iterating"))
        }))
    }

    fn read(&self, key: &[u8]) -> Result<Option<fjall::UserValue>, StoreError> {
        if key.len() > MAX_KEY_LEN {
            return Ok(None);
        }
        self.db
            .snapshot()
            .get(&self.values, stored(key))
            .map_err(self.err("reading"))
    }
}

/// The key fjall stores for `key`: behind a tag byte, because fjall refuses the empty key (a
/// valid Redis key), and so that the store's own records can live under other tags later.
fn stored(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.push(TAG);
    k.extend_from_slice(key);
    k
}

impl Store for FjallStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.read(key)?.map(|v| v.to_vec()))
    }

    fn value_len(&self, key: &[u8]) -> Result<Option<usize>, StoreError> {
        Ok(self.read(key)?.map(|v| v.len()))
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        // fjall panics on a key or value over its limits.
        check_put(key, value)?;
        self.values
            .insert(stored(key), value)
            .map_err(self.err("writing"))
    }

    fn delete(&self, key: &[u8]) -> Result<(), StoreError> {
        check_key(key)?;
        self.values
            .remove(stored(key))
            .map_err(self.err("deleting"))
    }

    fn batch(&self, batch: &Batch) -> Result<(), StoreError> {
        batch.check()?;
        // One fjall batch is one journal entry under one sequence number, published after all
        // of it is applied: snapshots and recovery see all of it or none.
        let mut b = self.db.batch();
        for w in batch.writes() {
            match w {
                Write::Put { key, value } => b.insert(&self.values, stored(key), &value[..]),
                Write::Delete { key } => b.remove(&self.values, stored(key)),
            }
        }
        b.commit().map_err(self.err("writing a batch"))
    }

    fn ingest(&self, batch: &Batch) -> Result<(), StoreError> {
        batch.check()?;
        let writes = batch.writes();
        // fjall's ingestion panics at a key not above the one before: checked first, and a
        // batch out of order goes the ordinary way.
        if !writes.windows(2).all(|w| w[0].key() < w[1].key()) {
            return self.batch(batch);
        }
        // The new tables are registered at once under one sequence number above every write
        // before (fjall flushes the memtable first), so readers see all of the batch or none, a
        // crash before that leaves none (unregistered files), and after it all (fsynced).
        let mut ingestion = self
            .values
            .start_ingestion()
            .map_err(self.err("starting an ingestion"))?;
        for w in writes {
            match w {
                Write::Put { key, value } => ingestion.write(stored(key), &value[..]),
                Write::Delete { key } => ingestion.write_tombstone(stored(key)),
            }
            .map_err(self.err("ingesting a batch"))?;
        }
        ingestion
            .finish()
            .map_err(self.err("registering an ingested batch"))
    }

    fn sync(&self) -> Result<(), StoreError> {
        self.db
            .persist(PersistMode::SyncAll)
            .map_err(self.err("syncing"))
    }

    fn range(&self, (start, end): KeyRange<'_>) -> Entries<'_> {
        // fjall panics on a bound longer than a key can be. Such a bound K is cut to its first
        // MAX_KEY_LEN bytes K': for a key k no longer than that, k >= K iff k > K', and
        // k <= K iff k <= K'. An open end stops at the tag's own keys.
        let start = match start {
            Bound::Unbounded => Bound::Included(vec![TAG]),
            Bound::Included(k) | Bound::Excluded(k) if k.len() > MAX_KEY_LEN => {
                Bound::Excluded(stored(&k[..MAX_KEY_LEN]))
            }
            b => b.map(stored),
        };
        let end = match end {
            Bound::Unbounded => Bound::Excluded(vec![TAG + 1]),
            Bound::Included(k) | Bound::Excluded(k) if k.len() > MAX_KEY_LEN => {
                Bound::Included(stored(&k[..MAX_KEY_LEN]))
            }
            b => b.map(stored),
        };
        self.entries(self.db.snapshot().range(&self.values, (start, end)))
    }

    fn prefix(&self, prefix: &[u8]) -> Entries<'_> {
        if prefix.len() > MAX_KEY_LEN {
            return Box::new(std::iter::empty());
        }
        self.entries(self.db.snapshot().prefix(&self.values, stored(prefix)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flush(s: &FjallStore) {
        s.values
            .rotate_memtable_and_wait()
            .expect("flushing the memtable");
    }

    fn value(s: &FjallStore, key: &[u8]) -> Option<Vec<u8>> {
        s.get(key).expect("reading")
    }

    #[test]
    fn a_new_store_keeps_values_from_the_threshold_on_in_blob_files() {
        let s = FjallStore::temporary().expect("a temporary store");
        assert!(s.values.is_kv_separated());
        let small = vec![b's'; SEPARATED_FROM as usize - 1];
        s.put(b"small", &small).expect("writing");
        flush(&s);
        assert_eq!(
            s.values.blob_file_count(),
            0,
            "a value under the threshold stays in the tree"
        );
        let large = vec![b'l'; SEPARATED_FROM as usize];
        s.put(b"large", &large).expect("writing");
        flush(&s);
        assert_eq!(
            s.values.blob_file_count(),
            1,
            "a value of the threshold goes to a blob file"
        );
        assert_eq!(value(&s, b"small"), Some(small.clone()));
        assert_eq!(value(&s, b"large"), Some(large.clone()));
        assert_eq!(s.value_len(b"large").expect("reading"), Some(large.len()));
        let all: Vec<_> = s
            .range((Bound::Unbounded, Bound::Unbounded))
            .collect::<Result<_, _>>()
            .expect("iterating");
        assert_eq!(
            all,
            vec![(b"large".to_vec(), large), (b"small".to_vec(), small)]
        );
    }

    #[test]
    fn a_store_created_with_values_in_the_tree_keeps_that_layout_and_its_data() {
        let tmp = tempfile::tempdir().expect("a temporary directory");
        let old = vec![b'o'; 4096];
        {
            let s = FjallStore::open_as(tmp.path(), Layout::Inline).expect("creating");
            assert!(!s.values.is_kv_separated());
            s.put(b"old", &old).expect("writing");
            s.sync().expect("syncing");
        }
        let new = vec![b'n'; 4096];
        {
            let s = FjallStore::open(tmp.path()).expect("reopening");
            assert!(
                !s.values.is_kv_separated(),
                "an existing keyspace keeps its layout"
            );
            assert_eq!(value(&s, b"old"), Some(old.clone()));
            s.put(b"new", &new).expect("writing");
            flush(&s);
            assert_eq!(s.values.blob_file_count(), 0);
            s.sync().expect("syncing");
        }
        let s = FjallStore::open(tmp.path()).expect("reopening");
        assert_eq!(value(&s, b"old"), Some(old));
        assert_eq!(value(&s, b"new"), Some(new));
    }
}
