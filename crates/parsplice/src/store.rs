//! The persistent store at the top of the hierarchy: fjall (an LSM tree) on disk, holding every
//! value that reaches it. Its *speed* in the simulation comes from [`crate::StoreParams`]; the
//! I/O here is real so that "nothing lost" can be checked by reading every value back.

use std::path::Path;

use fjall::{Database, Keyspace, KeyspaceCreateOptions};

use crate::ParspliceError;

/// Values on disk.
pub struct Store {
    _db: Database,
    values: Keyspace,
    _dir: Option<tempfile::TempDir>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

fn err(e: impl std::fmt::Display) -> ParspliceError {
    ParspliceError::Store(e.to_string())
}

impl Store {
    /// A store in a fresh temporary directory, removed when dropped.
    pub fn temporary() -> Result<Self, ParspliceError> {
        let dir = tempfile::tempdir().map_err(err)?;
        let mut s = Self::open(dir.path())?;
        s._dir = Some(dir);
        Ok(s)
    }

    /// A store in `path`.
    pub fn open(path: &Path) -> Result<Self, ParspliceError> {
        let db = Database::builder(path).open().map_err(err)?;
        let values = db
            .keyspace("values", KeyspaceCreateOptions::default)
            .map_err(err)?;
        Ok(Self {
            _db: db,
            values,
            _dir: None,
        })
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

    /// Writes a state's coordinates.
    pub fn put(&self, key: u64, size: u32) -> Result<(), ParspliceError> {
        self.values
            .insert(key.to_be_bytes(), Self::value_of(key, size))
            .map_err(err)
    }

    /// Reads a state's coordinates.
    pub fn get(&self, key: u64) -> Result<Option<Vec<u8>>, ParspliceError> {
        Ok(self
            .values
            .get(key.to_be_bytes())
            .map_err(err)?
            .map(|v| v.to_vec()))
    }

    /// Every stored `(key, value)`, in key order (for checks that nothing was lost).
    pub fn entries(&self) -> Result<Vec<(u64, Vec<u8>)>, ParspliceError> {
        self.values
            .iter()
            .map(|kv| {
                let (k, v) = kv.into_inner().map_err(err)?;
                let key = u64::from_be_bytes(
                    k.as_ref()
                        .try_into()
                        .map_err(|_| ParspliceError::Store("a key is not 8 bytes".into()))?,
                );
                Ok((key, v.to_vec()))
            })
            .collect()
    }

    /// Size of a state's stored coordinates, without copying them (the simulation's reads).
    pub fn size_of(&self, key: u64) -> Result<Option<usize>, ParspliceError> {
        Ok(self
            .values
            .get(key.to_be_bytes())
            .map_err(err)?
            .map(|v| v.len()))
    }
}
