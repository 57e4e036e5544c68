//! The in-memory backend.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::{Batch, Entries, KeyRange, Store, StoreError, Write, check_key, check_put};

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

/// A store in memory, for simulations and tests. Nothing is durable: [`Store::sync`] succeeds
/// and does nothing, and the data is gone when the store is dropped.
///
/// An iterator copies the entries of its range when it is created (its snapshot), so it holds no
/// lock while the caller consumes it.
#[derive(Debug, Default)]
pub struct MemStore {
    map: RwLock<Map>,
}

impl MemStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    // No operation leaves the map half-changed if it panics (a batch is applied after it is
    // checked, by inserts and removes that do not panic), so a poisoned lock is still sound.
    fn read(&self) -> RwLockReadGuard<'_, Map> {
        self.map.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Map> {
        self.map.write().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Whether `range` holds no key at all; `BTreeMap::range` panics on such ranges instead.
fn is_empty_range((start, end): KeyRange<'_>) -> bool {
    match (start, end) {
        (Bound::Included(s), Bound::Included(e)) => s > e,
        (Bound::Included(s) | Bound::Excluded(s), Bound::Excluded(e))
        | (Bound::Excluded(s), Bound::Included(e)) => s >= e,
        _ => false,
    }
}

impl Store for MemStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.read().get(key).cloned())
    }

    fn value_len(&self, key: &[u8]) -> Result<Option<usize>, StoreError> {
        Ok(self.read().get(key).map(Vec::len))
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        check_put(key, value)?;
        self.write().insert(key.to_vec(), value.to_vec());
        Ok(())
    }

    fn delete(&self, key: &[u8]) -> Result<(), StoreError> {
        check_key(key)?;
        self.write().remove(key);
        Ok(())
    }

    fn batch(&self, batch: &Batch) -> Result<(), StoreError> {
        batch.check()?;
        // One write lock for the whole batch: no reader sees part of it.
        let mut map = self.write();
        for w in batch.writes() {
            match w {
                Write::Put { key, value } => {
                    map.insert(key.to_vec(), value.to_vec());
                }
                Write::Delete { key } => {
                    map.remove(&key[..]);
                }
            }
        }
        Ok(())
    }

    fn sync(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn range(&self, range: KeyRange<'_>) -> Entries<'_> {
        if is_empty_range(range) {
            return Box::new(std::iter::empty());
        }
        let snapshot: Vec<_> = self
            .read()
            .range::<[u8], _>(range)
            .map(|(k, v)| Ok((k.clone(), v.clone())))
            .collect();
        Box::new(snapshot.into_iter())
    }
}
