//! The journal of dirty extents: what makes `fsync` in cache mode safe (DataWarp has no such
//! thing; a crashed DataWarp node loses what it had not written back).
//!
//! An append-only file in the cache directory. The first line names the backing directory and
//! the extent size, so a remount with other settings still finds the right bytes. Every other
//! line is `CRC32 JSON`, one [`Record`]. `fsync` in cache mode appends a `Dirty` record for every
//! dirty extent of the file, after the file's data is synced in the cache, and syncs the journal
//! before it returns. A write-back leaves the record standing (replaying an extent that is
//! already in the backing file is harmless while its data is still in the cache); when such an
//! extent's data is about to leave the cache, the backing file is synced, `Clean` is appended
//! and the journal synced, in that order, so no `Dirty` record outlives the data it points to
//! and no `Clean` is durable before the data it vouches for. Renames (before the rename),
//! truncations (before the cut) and unlinks of files with records are recorded and synced too,
//! so a replay writes to the right path and to the right length.
//!
//! A torn last line (the crash hit an append) fails its CRC and ends the replay: everything an
//! `fsync` acknowledged was synced before it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

const CRC: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);

/// The journal's file name in the cache directory.
pub const FILE: &str = "journal";

/// The format this build writes: 2 added [`Record::Whole`]. It reads 1 and 2.
pub const VERSION: u32 = 2;

/// The journal's first line.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Header {
    /// Format version.
    pub pliant_fs_journal: u32,
    /// The backing directory the records' paths are relative to (bytes of the path).
    pub backing: Vec<u8>,
    /// Extent size when the records were written.
    pub extent: u64,
}

/// One journal line.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Record {
    /// These extents of file `id` (at `path`, `size` bytes long) were dirty and synced in the
    /// cache file `data/<id>`.
    Dirty {
        /// The cache's file id.
        id: u64,
        /// Path relative to the backing directory, as bytes.
        path: Vec<u8>,
        /// The file's size.
        size: u64,
        /// Extent indices.
        extents: Vec<u64>,
    },
    /// These extents reached the backing directory.
    Clean {
        /// The cache's file id.
        id: u64,
        /// Extent indices.
        extents: Vec<u64>,
    },
    /// The file moved.
    Rename {
        /// The cache's file id.
        id: u64,
        /// The new path, relative to the backing directory.
        path: Vec<u8>,
    },
    /// The file was truncated (or extended) to `size`.
    Size {
        /// The cache's file id.
        id: u64,
        /// New size.
        size: u64,
    },
    /// The file is gone (unlinked, or all of it written back and dropped).
    Drop {
        /// The cache's file id.
        id: u64,
    },
    /// File `id` (at `path`) is open for writing in kernel passthrough: the kernel writes the
    /// cache file `data/<id>` without the daemon, so all of it, at its own length, is the
    /// file's data until a later `Dirty` record of the file names its extents again (written
    /// when the last such writer closes). The cache file was synced before this record.
    Whole {
        /// The cache's file id.
        id: u64,
        /// Path relative to the backing directory, as bytes.
        path: Vec<u8>,
    },
}

/// What a replay finds for one file: dirty extents to write back.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Pending {
    /// Path relative to the backing directory.
    pub path: PathBuf,
    /// The file's size.
    pub size: u64,
    /// Extent indices still dirty.
    pub extents: BTreeSet<u64>,
    /// The whole cache file is the file's data, at the cache file's length ([`Record::Whole`]):
    /// `size` and `extents` do not apply.
    pub whole: bool,
}

/// What a journal holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Replay {
    /// Its header.
    pub header: Header,
    /// Files with dirty extents, by id.
    pub files: BTreeMap<u64, Pending>,
    /// Lines read.
    pub records: u64,
    /// True when the last line was torn (a crash during an append).
    pub torn_tail: bool,
}

/// The open journal.
#[derive(Debug)]
pub struct Journal {
    file: File,
    /// Records appended since the last sync.
    unsynced: bool,
}

pub(crate) fn path_bytes(p: &Path) -> Vec<u8> {
    p.as_os_str().as_bytes().to_vec()
}

pub(crate) fn bytes_path(b: &[u8]) -> PathBuf {
    PathBuf::from(std::ffi::OsStr::from_bytes(b))
}

impl Journal {
    /// Starts a new, empty journal at `path` (replacing any), synced with its header.
    pub fn create(path: &Path, header: &Header) -> io::Result<Self> {
        let tmp = path.with_extension("new");
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&tmp)?;
        let mut line = serde_json::to_vec(header).map_err(io::Error::other)?;
        line.push(b'\n');
        file.write_all(&line)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
        let file = OpenOptions::new().append(true).open(path)?;
        Ok(Self {
            file,
            unsynced: false,
        })
    }

    /// Appends a record; durable after the next [`Journal::sync`].
    pub fn append(&mut self, rec: &Record) -> io::Result<()> {
        let json = serde_json::to_vec(rec).map_err(io::Error::other)?;
        let mut line = format!("{:08x} ", CRC.checksum(&json)).into_bytes();
        line.extend_from_slice(&json);
        line.push(b'\n');
        // One write per record, so a crash tears at most the last line.
        self.file.write_all(&line)?;
        self.unsynced = true;
        Ok(())
    }

    /// Makes every appended record durable.
    pub fn sync(&mut self) -> io::Result<()> {
        if self.unsynced {
            self.file.sync_data()?;
            self.unsynced = false;
        }
        Ok(())
    }

    /// Reads a journal; `Ok(None)` when there is none.
    pub fn replay(path: &Path) -> io::Result<Option<Replay>> {
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let bad = |line: u64, what: String| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}:{line}: {what}", path.display()),
            )
        };
        let mut lines = BufReader::new(file).split(b'\n');
        let header: Header = match lines.next() {
            None => return Ok(None),
            Some(l) => {
                let l = l?;
                serde_json::from_slice(&l).map_err(|e| bad(1, format!("header: {e}")))?
            }
        };
        if !(1..=VERSION).contains(&header.pliant_fs_journal) {
            return Err(bad(
                1,
                format!(
                    "journal format {} (this build reads 1 to {VERSION})",
                    header.pliant_fs_journal
                ),
            ));
        }
        let mut files: BTreeMap<u64, Pending> = BTreeMap::new();
        let mut records = 0;
        let mut torn_tail = false;
        let mut damaged_line = 0;
        for (n, line) in lines.enumerate() {
            // Line numbers from 1, the header being line 1.
            let line_no = n as u64 + 2;
            let line = line?;
            let parsed = (line.len() > 9 && line[8] == b' ')
                .then(|| {
                    let crc =
                        u32::from_str_radix(std::str::from_utf8(&line[..8]).ok()?, 16).ok()?;
                    (CRC.checksum(&line[9..]) == crc).then_some(())?;
                    serde_json::from_slice::<Record>(&line[9..]).ok()
                })
                .flatten();
            let Some(rec) = parsed else {
                // Only the last line may be torn; a bad line with records after it is damage
                // that a replay must not paper over.
                if !torn_tail {
                    damaged_line = line_no;
                }
                torn_tail = true;
                continue;
            };
            if torn_tail {
                return Err(bad(
                    damaged_line,
                    format!("damaged record (CRC or JSON), with records after it (line {line_no})"),
                ));
            }
            records += 1;
            match rec {
                Record::Dirty {
                    id,
                    path,
                    size,
                    extents,
                } => {
                    let p = files.entry(id).or_default();
                    p.path = bytes_path(&path);
                    p.size = size;
                    p.extents.extend(extents);
                    // The daemon names the file's dirty extents again: its passthrough
                    // writers closed, and this record lists all of them.
                    p.whole = false;
                }
                Record::Whole { id, path } => {
                    let p = files.entry(id).or_default();
                    p.path = bytes_path(&path);
                    p.whole = true;
                }
                Record::Clean { id, extents } => {
                    if let Some(p) = files.get_mut(&id) {
                        for e in extents {
                            p.extents.remove(&e);
                        }
                    }
                }
                Record::Rename { id, path } => {
                    if let Some(p) = files.get_mut(&id) {
                        p.path = bytes_path(&path);
                    }
                }
                Record::Size { id, size } => {
                    if let Some(p) = files.get_mut(&id) {
                        p.size = size;
                        // Extents past the new end hold nothing to write back (and their data
                        // may be gone from the cache).
                        let first_gone = size.div_ceil(header.extent.max(1));
                        p.extents.retain(|&e| e < first_gone);
                    }
                }
                Record::Drop { id } => {
                    files.remove(&id);
                }
            }
        }
        files.retain(|_, p| p.whole || !p.extents.is_empty());
        Ok(Some(Replay {
            header,
            files,
            records,
            torn_tail,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_follows_renames_sizes_and_cleans_and_stops_at_a_torn_tail() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join(FILE);
        let header = Header {
            pliant_fs_journal: 1,
            backing: b"/b".to_vec(),
            extent: 4096,
        };
        let mut j = Journal::create(&path, &header)?;
        j.append(&Record::Dirty {
            id: 1,
            path: b"a".to_vec(),
            size: 9000,
            extents: vec![0, 1, 2],
        })?;
        j.append(&Record::Clean {
            id: 1,
            extents: vec![1],
        })?;
        j.append(&Record::Rename {
            id: 1,
            path: b"d/b".to_vec(),
        })?;
        j.append(&Record::Size { id: 1, size: 8193 })?;
        j.append(&Record::Dirty {
            id: 4,
            path: b"h".to_vec(),
            size: 9000,
            extents: vec![0, 2],
        })?;
        j.append(&Record::Size { id: 4, size: 4096 })?;
        j.append(&Record::Dirty {
            id: 2,
            path: b"c".to_vec(),
            size: 1,
            extents: vec![0],
        })?;
        j.append(&Record::Drop { id: 2 })?;
        j.sync()?;
        drop(j);
        // A crash in the middle of an append.
        let mut f = OpenOptions::new().append(true).open(&path)?;
        f.write_all(b"deadbeef {\"op\":\"dirty\",\"id\":3")?;
        drop(f);
        let r = Journal::replay(&path)?.expect("journal");
        assert_eq!(r.header, header);
        assert!(r.torn_tail);
        assert_eq!(r.records, 8);
        let p = &r.files[&1];
        assert_eq!((p.path.as_path(), p.size), (Path::new("d/b"), 8193));
        assert_eq!(p.extents.iter().copied().collect::<Vec<_>>(), vec![0, 2]);
        assert_eq!(r.files.len(), 2, "file 2 was dropped, file 3 torn");
        // A truncation leaves nothing past the new end to write back.
        assert_eq!(
            r.files[&4].extents.iter().copied().collect::<Vec<_>>(),
            vec![0]
        );
        Ok(())
    }

    /// A `Whole` record makes the file's whole cache file pending, through renames and
    /// truncations and past `Clean` records, until a `Dirty` record names its extents again or
    /// a `Drop` forgets it.
    #[test]
    fn a_whole_record_stands_until_a_dirty_record_or_a_drop() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join(FILE);
        let header = Header {
            pliant_fs_journal: VERSION,
            backing: b"/b".to_vec(),
            extent: 4096,
        };
        let mut j = Journal::create(&path, &header)?;
        j.append(&Record::Whole {
            id: 1,
            path: b"a".to_vec(),
        })?;
        j.append(&Record::Clean {
            id: 1,
            extents: vec![0],
        })?;
        j.append(&Record::Rename {
            id: 1,
            path: b"b".to_vec(),
        })?;
        j.append(&Record::Size { id: 1, size: 0 })?;
        j.append(&Record::Whole {
            id: 2,
            path: b"c".to_vec(),
        })?;
        j.append(&Record::Dirty {
            id: 2,
            path: b"c".to_vec(),
            size: 5000,
            extents: vec![0, 1],
        })?;
        j.append(&Record::Whole {
            id: 3,
            path: b"d".to_vec(),
        })?;
        j.append(&Record::Drop { id: 3 })?;
        j.sync()?;
        let r = Journal::replay(&path)?.expect("journal");
        assert_eq!(r.files.len(), 2, "file 3 was dropped");
        assert!(r.files[&1].whole);
        assert_eq!(r.files[&1].path, Path::new("b"));
        assert!(!r.files[&2].whole, "the Dirty record after Whole ends it");
        assert_eq!(r.files[&2].extents.len(), 2);
        Ok(())
    }

    #[test]
    fn a_journal_of_a_newer_format_is_refused_by_name() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join(FILE);
        let header = Header {
            pliant_fs_journal: VERSION + 1,
            backing: b"/b".to_vec(),
            extent: 4096,
        };
        Journal::create(&path, &header)?;
        let err = Journal::replay(&path).expect_err("newer");
        assert!(err.to_string().contains("journal format 3"), "{err}");
        Ok(())
    }

    #[test]
    fn damage_before_the_last_record_is_an_error_not_a_silent_skip() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join(FILE);
        let header = Header {
            pliant_fs_journal: 1,
            backing: b"/b".to_vec(),
            extent: 4096,
        };
        let mut j = Journal::create(&path, &header)?;
        j.append(&Record::Drop { id: 1 })?;
        j.append(&Record::Drop { id: 2 })?;
        j.sync()?;
        let mut text = std::fs::read(&path)?;
        let second = text.iter().position(|&b| b == b'\n').expect("header") + 1;
        text[second] ^= 1;
        std::fs::write(&path, &text)?;
        let err = Journal::replay(&path).expect_err("damaged");
        assert!(err.to_string().contains("journal:2: damaged"), "{err}");
        Ok(())
    }
}
