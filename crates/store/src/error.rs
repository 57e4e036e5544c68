//! What can go wrong with a store.

use std::path::PathBuf;

/// A store operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store directory itself (creating it, its format file, its lock file) could not be
    /// read or written. The text names the store and the action; the cause is the `source()`
    /// (shown after it by `pliant_proto::error::chain`).
    #[error("store {}: {action}", dir.display())]
    Io {
        /// The store directory.
        dir: PathBuf,
        /// What was being done.
        action: &'static str,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// The backend failed (an I/O error inside the LSM tree, corruption).
    /// The backend's own error is the `source()`, not repeated in the text.
    #[error("store {}: {action}", dir.display())]
    Backend {
        /// The store directory.
        dir: PathBuf,
        /// What was being done.
        action: &'static str,
        /// The backend's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// An earlier write failed, so this handle refuses every write (and sync) until the store is
    /// reopened: what it acknowledged after a lost write or a failed fsync could not be told
    /// durable. Reads go on. `first` is the first failure, typed, and the `source()` (fjall's
    /// own poisoned state, a [`StoreError::Backend`], when fjall is the one that refused).
    #[error(
        "store {}: writes refused until the store is reopened, since an earlier write failed",
        dir.display()
    )]
    Poisoned {
        /// The store directory.
        dir: PathBuf,
        /// The first failure (shared: every refusal carries it).
        #[source]
        first: std::sync::Arc<StoreError>,
    },
    /// Another handle holds the store directory: another process, or this one.
    #[error(
        "store {}: in use by another process or handle (lock on {} held); close it first",
        dir.display(), dir.join(crate::LOCK_FILE).display()
    )]
    Locked {
        /// The store directory.
        dir: PathBuf,
    },
    /// The directory holds a store of another format version.
    #[error(
        "store {}: format version {found}, this build reads version {expected}",
        dir.display()
    )]
    FormatVersion {
        /// The store directory.
        dir: PathBuf,
        /// The version its format file names.
        found: u32,
        /// The version this build reads and writes.
        expected: u32,
    },
    /// The directory is not empty and is not a Pliant store (no readable format file).
    #[error("{}: not a Pliant store: {reason}", dir.display())]
    NotAStore {
        /// The directory.
        dir: PathBuf,
        /// What is missing or wrong.
        reason: String,
    },
    /// A key or value is longer than every backend accepts ([`crate::MAX_KEY_LEN`],
    /// [`crate::MAX_VALUE_LEN`]). Nothing was written.
    #[error("{what} of {len} bytes is longer than the store's limit of {max}")]
    TooLarge {
        /// `"key"` or `"value"`.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A fault injected by [`crate::FaultyStore`].
    #[error("injected fault: {op} failed")]
    Injected {
        /// The operation that was made to fail.
        op: &'static str,
    },
}
