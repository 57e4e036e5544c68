//! Pliant's persistent tier: the [`Store`] trait every service builds on, its backends, and a
//! fault-injecting wrapper for tests.
//!
//! - [`Store`]: byte-string keys and values (the Redis-protocol service stores arbitrary keys),
//!   `get`/`put`/`delete`, atomic [`Batch`]es, [`Store::sync`] (durable on return), and ordered
//!   [`Store::range`]/[`Store::prefix`] iteration. Object safe, `Send + Sync`: a service holds an
//!   `Arc<dyn Store>`.
//! - [`FjallStore`]: fjall (an LSM tree) in a *store directory* that carries a format version and
//!   a lock (see [`FjallStore::open`]); a second opener, in this process or another, gets
//!   [`StoreError::Locked`] naming the directory. Values of [`SEPARATED_FROM`] bytes or more
//!   live in blob files beside the tree, so compactions do not rewrite them.
//! - [`WriteBehind`]: a [`FjallStore`] (or, for tests, any store) whose writes are acknowledged
//!   once appended to a log of its own and reach the tree once a second, coalesced (what
//!   `pliant serve --store` runs: an LSM tree's memtable costs a pipelined write several times
//!   an append).
//! - [`MemStore`]: a `BTreeMap` behind a lock, for simulations and tests; nothing is durable.
//! - [`FaultyStore`]: wraps any store and, on a test's command, fails the n-th write, fails
//!   syncs, or holds an operation until the test releases it ([`Faults`]).
//! - [`StoreError`]: typed errors a caller can match, with the backend's error kept as the
//!   `source()`.
//!
//! Dependencies: `fjall` (the LSM store, pure Rust; it sets the workspace's minimum Rust,
//! 1.90); `tempfile` (temporary stores, and the format file written by rename); `thiserror`
//! (the typed error); `tracing` (a line at `-v` for each application the write-behind applier
//! ingests); `crc32c` (the write-behind log's record checksums, CRC-32C with the
//! CPU's instruction where it has one: the crate `crc`'s 16-table software CRC was a fifth of a
//! slot move's writes at the target, row `move-log-buffer-34` in docs/benchmarks.md; `crc`
//! itself checks in the tests that the sums are the ones logs written before hold); `foldhash`
//! (its map of pending writes). The directory lock is std's `File::try_lock` (`flock`/`LockFileEx`).

mod behind;
mod dir;
mod error;
mod faulty;
mod fjall_store;
mod mem;

use std::ops::Bound;

pub use behind::{WriteBehind, WriteBehindOptions, log_segment};
pub use dir::{FORMAT_FILE, FORMAT_VERSION, LOCK_FILE};
pub use error::StoreError;
pub use faulty::{Faults, FaultyStore, OpKind, Stall};
pub use fjall_store::{FjallStore, SEPARATED_FROM};
pub use mem::MemStore;

/// The longest key a store accepts: fjall's limit less the byte the fjall backend puts before
/// every key, applied by every backend so that they agree.
pub const MAX_KEY_LEN: usize = u16::MAX as usize - 1;

/// The longest value a store accepts (fjall's limit, applied by every backend).
pub const MAX_VALUE_LEN: usize = u32::MAX as usize;

/// A key and its value, as iteration yields them.
pub type Entry = (Vec<u8>, Vec<u8>);

/// Entries in key order. An error ends the iteration (later items are not meaningful).
pub type Entries<'a> = Box<dyn Iterator<Item = Result<Entry, StoreError>> + Send + 'a>;

/// A key range, as `(start, end)` bounds (what `RangeBounds` is for an unsized key).
pub type KeyRange<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>);

/// Bytes a batch shares with whoever gave them: a writer that must keep its writes readable
/// until the store has them (pliant-kv's queued commits) hands them over without a copy.
pub type SharedBytes = std::sync::Arc<[u8]>;

/// One write of a [`Batch`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Write {
    /// Sets `key` to `value`.
    Put {
        /// The key.
        key: SharedBytes,
        /// The value.
        value: SharedBytes,
    },
    /// Removes `key` (no error if absent).
    Delete {
        /// The key.
        key: SharedBytes,
    },
}

impl Write {
    /// The key written.
    pub fn key(&self) -> &[u8] {
        match self {
            Write::Put { key, .. } | Write::Delete { key } => key,
        }
    }
}

/// Writes applied all or nothing by [`Store::batch`], in order (a later write to a key wins).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    writes: Vec<Write>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a put (of copies).
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> &mut Self {
        self.put_shared(key.into(), value.into())
    }

    /// Adds a delete (of a copy).
    pub fn delete(&mut self, key: &[u8]) -> &mut Self {
        self.delete_shared(key.into())
    }

    /// Adds a put of a key and value the batch shares with the caller (no copy).
    pub fn put_shared(&mut self, key: SharedBytes, value: SharedBytes) -> &mut Self {
        self.writes.push(Write::Put { key, value });
        self
    }

    /// Adds a delete of a key the batch shares with the caller.
    pub fn delete_shared(&mut self, key: SharedBytes) -> &mut Self {
        self.writes.push(Write::Delete { key });
        self
    }

    /// Checks every key and value against the limits, before anything is applied.
    pub(crate) fn check(&self) -> Result<(), StoreError> {
        self.writes.iter().try_for_each(|w| match w {
            Write::Put { key, value } => check_put(key, value),
            Write::Delete { key } => check_key(key),
        })
    }

    /// Takes the writes out, leaving the batch empty.
    pub(crate) fn take_writes(&mut self) -> Vec<Write> {
        std::mem::take(&mut self.writes)
    }

    /// The writes, in order.
    pub fn writes(&self) -> &[Write] {
        &self.writes
    }

    /// Number of writes.
    pub fn len(&self) -> usize {
        self.writes.len()
    }

    /// Whether there are no writes.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }
}

/// A persistent key-value store with ordered keys.
///
/// Keys and values are byte strings, keys ordered bytewise. A write is visible to every reader
/// once it returns; it is *durable* (survives a crash or power loss) once a later
/// [`sync`](Store::sync) returns. Iterators see a consistent snapshot taken when they are
/// created: writes made while iterating do not show up in them.
pub trait Store: Send + Sync + std::fmt::Debug {
    /// The value of `key`, if any.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;

    /// The length of `key`'s value, if any, without copying it out.
    fn value_len(&self, key: &[u8]) -> Result<Option<usize>, StoreError> {
        Ok(self.get(key)?.map(|v| v.len()))
    }

    /// Sets `key` to `value`.
    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), StoreError>;

    /// Removes `key`; removing an absent key is not an error.
    fn delete(&self, key: &[u8]) -> Result<(), StoreError>;

    /// Applies every write of `batch` or none: readers see all of them or none, and after a
    /// crash all of them or none survive.
    fn batch(&self, batch: &Batch) -> Result<(), StoreError>;

    /// [`batch`](Store::batch), then empties `batch`; on an error `batch` is left as it was.
    /// A backend that keeps the written bytes overrides it to take them instead of copying.
    fn batch_take(&self, batch: &mut Batch) -> Result<(), StoreError> {
        self.batch(batch)?;
        batch.writes.clear();
        Ok(())
    }

    /// [`batch`](Store::batch) for a large batch whose keys are distinct and in ascending
    /// order, by the backend's bulk path where it has one (fjall: tables built straight from
    /// the batch, without its journal and memtable). All or none, as a batch, and durable once
    /// [`sync`](Store::sync) returns (fjall's ingestion is durable at once; the default, a
    /// batch, only then). The caller must not write the same keys meanwhile: such a write may end up
    /// under the batch's. The write-behind applier, the only writer of its tree, calls it for
    /// an application as large as its pending budget (see [`WriteBehindOptions`]).
    fn ingest(&self, batch: &Batch) -> Result<(), StoreError> {
        self.batch(batch)
    }

    /// Makes every write that returned before this call durable.
    fn sync(&self) -> Result<(), StoreError>;

    /// Entries with keys in `range`, in key order.
    fn range(&self, range: KeyRange<'_>) -> Entries<'_>;

    /// Entries whose keys start with `prefix`, in key order.
    fn prefix(&self, prefix: &[u8]) -> Entries<'_> {
        let end = prefix_end(prefix);
        self.range((
            Bound::Included(prefix),
            end.as_deref().map_or(Bound::Unbounded, Bound::Excluded),
        ))
    }
}

// A shared store is a store, so generic code can take an `Arc<dyn Store>` or `Arc<FjallStore>`.
impl<S: Store + ?Sized> Store for std::sync::Arc<S> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        (**self).get(key)
    }
    fn value_len(&self, key: &[u8]) -> Result<Option<usize>, StoreError> {
        (**self).value_len(key)
    }
    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        (**self).put(key, value)
    }
    fn delete(&self, key: &[u8]) -> Result<(), StoreError> {
        (**self).delete(key)
    }
    fn batch(&self, batch: &Batch) -> Result<(), StoreError> {
        (**self).batch(batch)
    }
    fn batch_take(&self, batch: &mut Batch) -> Result<(), StoreError> {
        (**self).batch_take(batch)
    }
    fn ingest(&self, batch: &Batch) -> Result<(), StoreError> {
        (**self).ingest(batch)
    }
    fn sync(&self) -> Result<(), StoreError> {
        (**self).sync()
    }
    fn range(&self, range: KeyRange<'_>) -> Entries<'_> {
        (**self).range(range)
    }
    fn prefix(&self, prefix: &[u8]) -> Entries<'_> {
        (**self).prefix(prefix)
    }
}

pub(crate) fn check_key(key: &[u8]) -> Result<(), StoreError> {
    if key.len() > MAX_KEY_LEN {
        return Err(StoreError::TooLarge {
            what: "key",
            len: key.len(),
            max: MAX_KEY_LEN,
        });
    }
    Ok(())
}

pub(crate) fn check_put(key: &[u8], value: &[u8]) -> Result<(), StoreError> {
    check_key(key)?;
    if value.len() > MAX_VALUE_LEN {
        return Err(StoreError::TooLarge {
            what: "value",
            len: value.len(),
            max: MAX_VALUE_LEN,
        });
    }
    Ok(())
}

/// The least key greater than every key starting with `prefix` (`None`: no such key, every key
/// from `prefix` on starts with it).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let last = prefix.iter().rposition(|&b| b != u8::MAX)?;
    let mut end = prefix[..=last].to_vec();
    end[last] += 1;
    Some(end)
}

/// The whole key space.
pub const ALL: KeyRange<'static> = (Bound::Unbounded, Bound::Unbounded);
