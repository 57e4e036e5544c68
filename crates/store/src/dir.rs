//! The store directory: a format file naming the layout's version, and a lock file held while
//! the store is open.
//!
//! ```text
//! <dir>/FORMAT   "pliant-store format 1\n", written once when the store is created
//! <dir>/LOCK     empty; an exclusive advisory lock (flock) on it while a handle is open
//! <dir>/fjall/   the backend's own files
//! <dir>/log/     writes acknowledged by a `WriteBehind` and not yet in the tree (format 2)
//! ```
//!
//! A format 1 directory (before the log) is a format 2 one with an empty log: it is opened and
//! its format file rewritten. A build that reads only format 1 refuses a format 2 directory, as
//! it must: it would not replay the log.
//!
//! The lock is advisory and taken with `LOCK_NB`, so a second opener fails at once instead of
//! waiting; the kernel drops it when the holder exits, however it exits, so a crash leaves no
//! stale lock to clean up.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use crate::StoreError;

/// The format version this build reads and writes. Bump it when the layout of the directory or
/// the encoding of what the backend stores changes.
pub const FORMAT_VERSION: u32 = 2;

/// Older versions this build opens, upgrading the format file.
const UPGRADABLE: &[u32] = &[1];

/// Name of the format file in a store directory.
pub const FORMAT_FILE: &str = "FORMAT";

/// Name of the lock file in a store directory.
pub const LOCK_FILE: &str = "LOCK";

const FORMAT_TMP: &str = "FORMAT.tmp";
const MAGIC: &str = "pliant-store format ";

/// An open store directory; the lock is held until this is dropped.
#[derive(Debug)]
pub(crate) struct StoreDir {
    path: PathBuf,
    _lock: File,
}

impl StoreDir {
    /// Opens (creating if needed) the store directory `path` and locks it.
    pub(crate) fn open(path: &Path) -> Result<Self, StoreError> {
        let io = |action| {
            move |source| StoreError::Io {
                dir: path.to_path_buf(),
                action,
                source,
            }
        };
        // Refuse a directory with someone else's files before leaving a lock file in it. A
        // directory holding only what a crashed creation leaves (the lock, the format file's
        // temporary) counts as empty.
        match fs::read_dir(path) {
            Ok(entries) => {
                let mut foreign = None;
                for e in entries {
                    let name = e.map_err(io("listing the directory"))?.file_name();
                    if name == FORMAT_FILE {
                        foreign = None;
                        break;
                    }
                    if name != LOCK_FILE && name != FORMAT_TMP && foreign.is_none() {
                        foreign = Some(name);
                    }
                }
                if let Some(name) = foreign {
                    return Err(StoreError::NotAStore {
                        dir: path.to_path_buf(),
                        reason: format!(
                            "the directory is not empty (it holds {}) and has no {FORMAT_FILE} file",
                            Path::new(&name).display()
                        ),
                    });
                }
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {
                fs::create_dir_all(path).map_err(io("creating the directory"))?;
            }
            Err(e) => return Err(io("listing the directory")(e)),
        }

        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path.join(LOCK_FILE))
            .map_err(io("opening the lock file"))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(StoreError::Locked {
                    dir: path.to_path_buf(),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io("locking the lock file")(e)),
        }

        // Checked again under the lock: another process may have created the store meanwhile.
        match fs::read_to_string(path.join(FORMAT_FILE)) {
            Ok(text) => {
                if check_format(path, &text)? != FORMAT_VERSION {
                    write_format(path)?;
                }
            }
            Err(e) if e.kind() == ErrorKind::NotFound => write_format(path)?,
            Err(e) => return Err(io("reading the format file")(e)),
        }
        Ok(Self {
            path: path.to_path_buf(),
            _lock: lock,
        })
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

/// The version `text` names, if this build can open it.
fn check_format(dir: &Path, text: &str) -> Result<u32, StoreError> {
    let found = text
        .strip_prefix(MAGIC)
        .and_then(|v| v.trim_end().parse::<u32>().ok())
        .ok_or_else(|| StoreError::NotAStore {
            dir: dir.to_path_buf(),
            reason: format!("{FORMAT_FILE} does not start with \"{MAGIC}<version>\""),
        })?;
    if found == FORMAT_VERSION || UPGRADABLE.contains(&found) {
        Ok(found)
    } else {
        Err(StoreError::FormatVersion {
            dir: dir.to_path_buf(),
            found,
            expected: FORMAT_VERSION,
        })
    }
}

/// Writes the format file so that it is either absent or complete, even across a crash: a
/// temporary, synced, renamed into place, and the rename synced through the directory.
fn write_format(dir: &Path) -> Result<(), StoreError> {
    let io = |source| StoreError::Io {
        dir: dir.to_path_buf(),
        action: "writing the format file",
        source,
    };
    let tmp = dir.join(FORMAT_TMP);
    let mut f = File::create(&tmp).map_err(io)?;
    f.write_all(format!("{MAGIC}{FORMAT_VERSION}\n").as_bytes())
        .map_err(io)?;
    f.sync_all().map_err(io)?;
    fs::rename(&tmp, dir.join(FORMAT_FILE)).map_err(io)?;
    sync_dir(dir).map_err(io)
}

/// Makes the directory's entries (a file created, renamed or removed in it) durable.
#[cfg(unix)]
pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

// std cannot open a directory as a `File` on Windows: there the rename itself is not synced.
#[cfg(not(unix))]
pub(crate) fn sync_dir(_dir: &Path) -> std::io::Result<()> {
    Ok(())
}
