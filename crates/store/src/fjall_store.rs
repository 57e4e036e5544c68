//! The fjall backend: one keyspace of an LSM tree in the store directory's `fjall/`.

use std::ops::Bound;
use std::path::Path;

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode, Readable};

use crate::dir::StoreDir;
use crate::{
    Batch, Entries, KeyRange, MAX_KEY_LEN, Store, StoreError, Write, check_key, check_put,
};

const KEYSPACE: &str = "values";
const DATA_DIR: &str = "fjall";
/// How many times (10 ms apart: 2 s in all) an open waits for this process's previous handle
/// to let go of fjall's lock (see [`FjallStore::open`]).
const LOCKED_RETRIES: u32 = 200;
/// The leading byte of every key fjall holds for a user key.
const TAG: u8 = 0;

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
            .keyspace(KEYSPACE, KeyspaceCreateOptions::default)
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
