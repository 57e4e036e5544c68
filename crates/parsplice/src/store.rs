//! ParSplice's states in the persistent tier at the top of the hierarchy, any
//! [`pliant_store::Store`] (the demo's is fjall on disk, [`FjallStore`]).
//!
//! A state's key is its id big-endian, so keys sort by id; its value is `size` bytes derived from
//! the id ([`value_of`]), so that a read-back can check it. The store's *speed* in the simulation
//! comes from [`crate::StoreParams`]; the I/O is real so that "nothing lost" can be checked by
//! reading every value back.

pub use pliant_store::{FjallStore, MemStore, Store, StoreError};

use crate::ParspliceError;

/// The store key of state `id`.
pub fn key(id: u64) -> [u8; 8] {
    id.to_be_bytes()
}

/// The coordinates of state `key`: `size` bytes derived from the key, so a read-back can check
/// them.
pub fn value_of(key: u64, size: u32) -> Vec<u8> {
    key.to_le_bytes()
        .iter()
        .copied()
        .cycle()
        .take(size as usize)
        .collect()
}

/// ParSplice's operations on a store, in state ids.
pub trait States {
    /// Writes a state's coordinates.
    fn put_state(&self, id: u64, size: u32) -> Result<(), StoreError>;

    /// Size of a state's stored coordinates (the simulation's reads).
    fn state_len(&self, id: u64) -> Result<Option<usize>, StoreError>;

    /// Every stored `(id, value)`, in id order (for checks that nothing was lost).
    fn states(&self) -> Result<Vec<(u64, Vec<u8>)>, ParspliceError>;
}

impl<S: Store + ?Sized> States for S {
    fn put_state(&self, id: u64, size: u32) -> Result<(), StoreError> {
        self.put(&key(id), &value_of(id, size))
    }

    fn state_len(&self, id: u64) -> Result<Option<usize>, StoreError> {
        self.value_len(&key(id))
    }

    fn states(&self) -> Result<Vec<(u64, Vec<u8>)>, ParspliceError> {
        self.range(pliant_store::ALL)
            .map(|kv| {
                let (k, v) = kv?;
                let id = <[u8; 8]>::try_from(k.as_slice())
                    .map_err(|_| ParspliceError::NotAState(k.clone()))?;
                Ok((u64::from_be_bytes(id), v))
            })
            .collect()
    }
}
