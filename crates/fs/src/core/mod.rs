//! The file-system core: every operation of the mount, by path and by open handle, over the
//! backing directory and the extent files, with no FUSE in sight (mountpoint-s3's split: the
//! adapter in `fuse.rs` only translates, so everything here is testable without mounting).
//!
//! ## Data
//! A cached file is an entry with a sparse cache file `data/<id>` that mirrors the file's
//! offsets, and a map of the extents present in it, each clean or dirty. A read of extents
//! none of which is present streams: it is answered from the backing file, and its extents copy
//! up behind it on the read-ahead thread (with read-ahead off, they are copied up first); a
//! read that finds some of its extents present copies the rest up first. A write does
//! read-modify-write of a partial
//! extent (copying it up) and skips the copy-up for an extent it covers whole (or where the
//! backing file has no bytes). Sizes and modification times of files with dirty data are the
//! cache's, so `stat` through the mount is right before anything reaches the backing directory.
//!
//! ## Metadata
//! Every metadata operation (create, mkdir, rename, unlink, chmod, truncate, symlink, xattrs)
//! goes to the backing directory at once, so the backing tree always has every name, and only
//! file contents lag behind. A truncation applies to the backing file and to the cache.
//!
//! ## Locks
//! `State` (names, LRU order, the dirty queue, the write window) and one lock per file
//! (`FileData`). A file's lock may be held while taking the state lock, never the reverse. A
//! write-back copies an extent out under the file lock and writes it to the backing file
//! without it, marking the extent in flight; anything else that must write back, drop or cut
//! that extent waits for it (the file's condition variable), so an older copy never lands on
//! top of a newer one. A read reads the cache file (or, cold, the backing file) without the
//! file's lock too; anything that drops extents or cuts the file bumps the file's `epoch`, and a
//! read of cached extents that saw it change is done again under the lock.
//!
//! ## Files
//! This file has the public types, `FsCache`'s methods (every metadata operation goes to the
//! backing directory here), the shared state (`Inner`, `State`, `FileData`) and the glue to the
//! policy thread. By job: `extents` (open, copy-up, read, write), `writeback` (`fsync`, the
//! workers, flushing), `eviction`, `metadata` (what truncation, unlink and rename do to
//! cached files), `recovery` (the journal's replay at mount) and `check` (the bookkeeping
//! checker for tests).

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use crate::backing::{self, BackingDir};
use crate::clock::Clock;
use crate::config::{FsConfig, FsyncMode};
use crate::journal::{self, Header, Journal};
use crate::stats::{Counters, FsStats};
use crate::window::WriteWindow;

mod access;
mod check;
mod control;
mod eviction;
mod extents;
mod inodes;
mod metadata;
mod passthrough;
mod recovery;
mod writeback;

use self::recovery::recover;

pub use self::access::{Access, Gate, groups_of};
pub use self::control::{Asker, CONTROL_PREFIX, Controls, VerbError};
pub use self::inodes::{Inodes, ROOT};

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic in one FUSE request must not take the whole mount down with poisoned locks.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn errno(e: nix::errno::Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// What the cache holds of one extent.
#[derive(Debug, Clone)]
struct Extent {
    /// Bytes of the file this extent covers (less than the extent size for the last one).
    bytes: u64,
    dirty: bool,
    /// Bumped by every write, so a write-back knows whether it wrote the latest data.
    generation: u64,
    in_flight: bool,
    /// Named by a synced `Dirty` journal record with no `Clean` after it yet.
    journaled: bool,
    /// LRU tick (extent-level eviction).
    tick: u64,
}

#[derive(Debug)]
struct FileData {
    /// Relative to the backing directory; `None` once unlinked (the entry lives on while open).
    /// The name write-back opens and the journal records.
    path: Option<PathBuf>,
    /// The file's other names the cache knows (hard links): each maps to this entry too, and
    /// one of them becomes `path` when `path` goes.
    links: Vec<PathBuf>,
    cache: Option<Arc<File>>,
    backing: Option<Arc<File>>,
    backing_writable: bool,
    size: u64,
    /// Bytes the backing file holds (what a copy-up can read).
    backing_size: u64,
    mtime: SystemTime,
    /// The backing file's (size, mtime) when last looked at: a difference means someone
    /// changed it behind the cache's back.
    seen: (u64, SystemTime),
    extents: BTreeMap<u64, Extent>,
    cached_bytes: u64,
    dirty_bytes: u64,
    open_count: u32,
    /// LRU tick (file-level eviction).
    tick: u64,
    /// Has `Dirty` records in the journal: renames, sizes and drops must be journaled too.
    journaled: bool,
    /// Open in kernel passthrough (reads go to the cache file without the daemon): its extents
    /// must stay where they are.
    pinned: u32,
    /// Extents being copied up by read-ahead, off this lock (see `extents::readahead`).
    copying: std::collections::BTreeSet<u64>,
    /// Bumped whenever extents are dropped (truncation, revalidation, eviction, unlink): a
    /// read-ahead copy begun before keeps nothing.
    epoch: u64,
    /// The last extent a read of the file reached, and how many extents read-ahead copies up
    /// beyond the next read (doubling while reads go on in order, none after a jump).
    last_read: Option<u64>,
    ahead: u64,
    /// The bytes of the file's last write through the daemon: a write that begins where it
    /// ended (or at an extent's start, or near, `extents::goes_on_in_order`) goes on in order,
    /// and starts the disk's write-out of the extents it finishes (`extents::start_write_out`).
    last_write: std::ops::Range<u64>,
    /// Handles open for writing in kernel passthrough ([`passthrough`]): while any is, the
    /// kernel writes the cache file without the daemon, the whole file is dirty, and its size
    /// and modification time are the cache file's.
    pt_writers: u32,
    /// The size up to which what passthrough writers wrote is charged to the write window:
    /// growth past it is charged when the daemon next looks.
    pt_charged: u64,
    /// The cache file's modification time when last taken: a later one is the kernel's writes.
    pt_mtime: SystemTime,
    /// Where the disk's write-out of what passthrough writers wrote was last started up to
    /// ([`FsCache::passthrough_write_coming`]).
    pt_written_out: u64,
    /// What a passthrough writer did that the cache refused (EFBIG, EDQUOT), for the next
    /// `fsync` or `close` to report.
    pt_refused: Option<nix::errno::Errno>,
    /// Forgotten by a striped mount with its last handle ([`extents`]' `forget_closed`): an
    /// open that found the entry just before must look again, or it would hold an entry the
    /// cache no longer knows.
    forgotten: bool,
}

/// Tests only: a place where background work (read-ahead copies, write-backs) stops while a
/// test holds it, so the test can act inside that work for certain. Unheld (always, outside
/// tests), a pass costs one atomic load: every write-back and copy goes through it.
#[derive(Debug, Default)]
struct Hold {
    /// Whether a test ever held it (the pass's fast check; the state decides).
    used: AtomicBool,
    /// Whether work stops here, and the extents stopped so far.
    state: Mutex<(bool, Vec<u64>)>,
    cv: Condvar,
}

impl Hold {
    fn hold(&self) {
        self.used.store(true, Relaxed);
        lock(&self.state).0 = true;
    }

    fn held(&self) -> Vec<u64> {
        lock(&self.state).1.clone()
    }

    fn release(&self) {
        let mut h = lock(&self.state);
        h.0 = false;
        h.1.clear();
        self.cv.notify_all();
    }

    /// Stops the work on extent `i` here while held and `stopping` is false.
    fn stop_here(&self, i: u64, stopping: impl Fn() -> bool) {
        if !self.used.load(Relaxed) {
            return;
        }
        let mut h = lock(&self.state);
        if h.0 {
            h.1.push(i);
            while h.0 && !stopping() {
                h = self
                    .cv
                    .wait_timeout(h, std::time::Duration::from_millis(50))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
    }
}

impl FileData {
    /// The indices of the extents not yet written back, in order.
    fn dirty_extents(&self) -> Vec<u64> {
        self.extents
            .iter()
            .filter(|(_, x)| x.dirty)
            .map(|(i, _)| *i)
            .collect()
    }
}

/// A cached file.
#[derive(Debug)]
pub(crate) struct FileEntry {
    id: u64,
    /// The backing file's device and inode numbers: a name of a file with several links is
    /// looked up by them, so that every name of one file is one entry.
    ident: (u64, u64),
    data: Mutex<FileData>,
    /// Signalled when an extent stops being in flight.
    idle: Condvar,
}

/// An open file: what reads and writes go through, and on whose behalf (a striped mount's
/// servers check every request against the caller it names).
#[derive(Debug, Clone)]
pub struct Handle(Arc<FileEntry>, Option<Arc<Caller>>);

impl Handle {
    /// The backing file's device and inode numbers when it was opened.
    pub fn ident(&self) -> (u64, u64) {
        self.0.ident
    }

    /// The handle, opened on `caller`'s behalf.
    pub fn for_caller(mut self, caller: Caller) -> Self {
        self.1 = Some(Arc::new(caller));
        self
    }
}

/// On whose behalf an extent is copied up (`pliant fs stat` shows the three apart).
#[derive(Debug, Clone, Copy)]
enum CopyUp {
    /// A read of it.
    Read,
    /// A `preload` hint.
    Preload,
    /// A write to part of it (read-modify-write).
    Write,
}

#[derive(Debug)]
struct State {
    files: HashMap<u64, Arc<FileEntry>>,
    by_path: HashMap<PathBuf, u64>,
    /// Entries by their backing file's identity (see `FileEntry::ident`).
    by_ident: HashMap<(u64, u64), u64>,
    /// Oldest first: `(file id, None)` for file-level eviction, `(id, Some(extent))` for
    /// extent-level.
    lru: BTreeMap<u64, (u64, Option<u64>)>,
    /// Dirty extents, oldest first (stale entries are skipped when popped).
    dirty_queue: BTreeMap<u64, (u64, u64)>,
    tick: u64,
    next_id: u64,
    window: WriteWindow,
    /// Callers waiting for every dirty extent to be written back.
    flushing: u32,
    /// Workers hold off (tests that check the bookkeeping need it still).
    paused: bool,
    /// Workers in the middle of a write-back.
    busy: u32,
    /// Files being written back, and by how many workers: a worker prefers another file, since
    /// a file system client usually writes one file at a time (the inode's lock).
    writing: HashMap<u64, u32>,
}

impl State {
    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }
}

pub(crate) struct Inner {
    cfg: FsConfig,
    /// The backing directory, reached beneath its root's descriptor only (see `backing`).
    tree: BackingDir,
    data_dir: PathBuf,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    journal: Mutex<Journal>,
    counters: Counters,
    used: AtomicU64,
    dirty: AtomicU64,
    /// Wakes write-back workers.
    work: Condvar,
    /// Extents for the read-ahead thread to copy up, and its wake-up: a file's extent, and
    /// whether a read answered from the backing file left it (copied even if the file is
    /// closed by then) rather than read-ahead.
    ahead: Mutex<std::collections::VecDeque<(std::sync::Weak<FileEntry>, u64, bool)>>,
    ahead_cv: Condvar,
    /// Tests only ([`FsCache::hold_read_ahead`]): read-ahead copies stop between taking what
    /// they copy (under the file's lock) and copying it (off it).
    ahead_hold: Hold,
    /// Tests only ([`FsCache::hold_write_back`]): write-backs stop between taking an extent
    /// (under the file's lock) and writing it to the backing file (off it).
    writeback_hold: Hold,
    /// Set by the read-ahead thread when it takes an extent from `ahead` (under its lock), unset
    /// when it is back for the next: with `ahead` empty, it has nothing under way.
    ahead_busy: AtomicBool,
    /// Tests only ([`FsCache::fail_read_ahead_copies`]): read-ahead copies write half their
    /// range, then fail, as a disk error in the middle of a copy would.
    ahead_fail: AtomicBool,
    /// Wakes callers waiting for write-back progress.
    progress: Condvar,
    evicting: Mutex<()>,
    stop: AtomicBool,
    /// Background flushes asked for and done (`request_flush`), and whether one runs.
    flush_asked: AtomicU64,
    flush_done: AtomicU64,
    flusher: Mutex<bool>,
    /// The eviction policy's target: cached bytes to evict down to (`policy::NONE`: none).
    evict_to: AtomicU64,
    /// The write-back policy's target: dirty bytes to write back down to.
    writeback_to: AtomicU64,
    /// Set (and `decide_cv` signalled) to ask the policies for a decision now.
    decide_now: Mutex<bool>,
    decide_cv: Condvar,
    /// What `nudge` last saw.
    last_nudge: AtomicU64,
    /// Swaps for the policy thread.
    policy_tx: Mutex<Option<std::sync::mpsc::Sender<crate::policy::Command>>>,
    /// The running policies' names (eviction, write-back).
    policy_names: Mutex<(String, String)>,
    started: Instant,
    workers: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// Held for the mount's life: a second mount of the same cache directory fails.
    _lock: nix::fcntl::Flock<File>,
    /// A striped mount's servers: file data goes to them, not to this cache's extents.
    remote: std::sync::OnceLock<Arc<crate::striped::Remote>>,
}

/// What a mount found in the journal of an earlier one that did not finish.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Recovery {
    /// Files with extents to write back.
    pub files: u64,
    /// Extents written back.
    pub extents: u64,
    /// Bytes written back.
    pub bytes: u64,
    /// The journal's last line was torn (a crash during an append that nothing acknowledged).
    pub torn_tail: bool,
}

/// A file's attributes as the mount shows them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Attr {
    /// Size, the cache's when it holds newer data.
    pub size: u64,
    /// 512-byte blocks.
    pub blocks: u64,
    /// Access time.
    pub atime: SystemTime,
    /// Modification time, the cache's when it holds newer data.
    pub mtime: SystemTime,
    /// Status change time.
    pub ctime: SystemTime,
    /// The `S_IFMT` bits and permissions (`st_mode`).
    pub mode: u32,
    /// Links.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number of a device file.
    pub rdev: u32,
    /// The backing file's device and inode numbers: two names with the same are one file
    /// (hard links).
    pub ident: (u64, u64),
}

fn time_of(secs: i64, nsecs: i64) -> SystemTime {
    let nsecs = nsecs.clamp(0, 999_999_999) as u32;
    if secs >= 0 {
        SystemTime::UNIX_EPOCH + Duration::new(secs as u64, nsecs)
    } else {
        SystemTime::UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()) + Duration::new(0, nsecs)
    }
}

impl Attr {
    /// The attributes of a file as its metadata gives them.
    pub fn from_meta(m: &std::fs::Metadata) -> Self {
        Self {
            size: m.size(),
            blocks: m.blocks(),
            atime: time_of(m.atime(), m.atime_nsec()),
            mtime: time_of(m.mtime(), m.mtime_nsec()),
            ctime: time_of(m.ctime(), m.ctime_nsec()),
            mode: m.mode(),
            nlink: m.nlink() as u32,
            uid: m.uid(),
            gid: m.gid(),
            rdev: m.rdev() as u32,
            ident: (m.dev(), m.ino()),
        }
    }
    /// Whether this is a directory.
    pub fn is_dir(&self) -> bool {
        self.mode & libc_mode::S_IFMT == libc_mode::S_IFDIR
    }
    /// Whether this is a regular file.
    pub fn is_file(&self) -> bool {
        self.mode & libc_mode::S_IFMT == libc_mode::S_IFREG
    }
}

/// The `st_mode` type bits (POSIX values, the same on every Linux).
pub mod libc_mode {
    /// Type mask.
    pub const S_IFMT: u32 = 0o170_000;
    /// Directory.
    pub const S_IFDIR: u32 = 0o040_000;
    /// Regular file.
    pub const S_IFREG: u32 = 0o100_000;
    /// Symbolic link.
    pub const S_IFLNK: u32 = 0o120_000;
    /// FIFO (named pipe).
    pub const S_IFIFO: u32 = 0o010_000;
    /// Character device.
    pub const S_IFCHR: u32 = 0o020_000;
    /// Block device.
    pub const S_IFBLK: u32 = 0o060_000;
    /// Unix socket.
    pub const S_IFSOCK: u32 = 0o140_000;
}

/// A directory entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The name.
    pub name: std::ffi::OsString,
    /// The `S_IFMT` bits of its type.
    pub kind: u32,
}

/// What a hint did.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HintReport {
    /// Files the hint reached.
    pub files: u64,
    /// Bytes it copied up, wrote back or dropped.
    pub bytes: u64,
    /// Files under the path the caller may not read (`preload`, `invalidate`) or write
    /// (`evict`, `writeback`), and directories it may not list: left alone.
    #[serde(default)]
    pub skipped: u64,
    /// `preload`: files left out because they do not fit: larger than the cache holds before
    /// eviction starts, or than what the files this preload brought in have left of that
    /// (copying them up would only push out what is there, the preload's own files first).
    #[serde(default)]
    pub not_fitted: u64,
    /// `preload`: the bytes of those files.
    #[serde(default)]
    pub not_fitted_bytes: u64,
    /// `preload`: bytes of the preloaded files still in the cache when it ended.
    #[serde(default)]
    pub kept_bytes: u64,
    /// `preload`: bytes of the preloaded files eviction took back before it ended (an
    /// eviction policy that keeps less than the high watermark).
    #[serde(default)]
    pub dropped_bytes: u64,
}

/// Who asks for a hint. The kernel checks the path a hint names; the files a hint reaches
/// under a directory are the daemon's to check, with the same rule the kernel applies to the
/// mount (`default_permissions`: the mode bits of owner, group and others; ACLs are not
/// consulted, as they are not through the mount).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    /// The user id.
    pub uid: u32,
    /// The primary group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

/// Permission bits as `access(2)` names them.
pub mod want {
    /// `R_OK`.
    pub const READ: u32 = 4;
    /// `W_OK`.
    pub const WRITE: u32 = 2;
    /// `X_OK`: execute a file, search a directory.
    pub const EXEC: u32 = 1;
}

impl Caller {
    /// Root (or the daemon itself): may read and write everything.
    pub fn root() -> Self {
        Self::default()
    }

    /// This process's own user and groups.
    pub fn this_process() -> Self {
        Self {
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
            groups: nix::unistd::getgroups()
                .map(|g| g.into_iter().map(|g| g.as_raw()).collect())
                .unwrap_or_default(),
        }
    }

    /// Whether the caller may access a file of `mode` (type and permission bits), owned by
    /// `uid` and `gid`, for the bits of `wanted`.
    pub fn may(&self, mode: u32, uid: u32, gid: u32, wanted: u32) -> bool {
        if self.uid == 0 {
            // Root reads and writes anything, and searches a directory; it executes a file
            // only if someone may.
            let dir = mode & libc_mode::S_IFMT == libc_mode::S_IFDIR;
            return wanted & want::EXEC == 0 || dir || mode & 0o111 != 0;
        }
        let bits = if self.uid == uid {
            mode >> 6
        } else if self.gid == gid || self.groups.contains(&gid) {
            mode >> 3
        } else {
            mode
        } & 7;
        bits & wanted == wanted
    }
}

/// A lock type as `fcntl` gives it.
fn lock_kind(typ: i32) -> io::Result<crate::striped::locks::Kind> {
    use crate::striped::locks::Kind;
    match typ {
        nix::libc::F_RDLCK => Ok(Kind::Read),
        nix::libc::F_WRLCK => Ok(Kind::Write),
        nix::libc::F_UNLCK => Ok(Kind::Unlock),
        _ => Err(errno(nix::errno::Errno::EINVAL)),
    }
}

/// A time for `utimensat`: `None` leaves it as it is.
fn timespec(t: Option<SystemTime>) -> nix::sys::time::TimeSpec {
    match t {
        None => nix::sys::time::TimeSpec::UTIME_OMIT,
        Some(t) => {
            let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
            nix::sys::time::TimeSpec::new(d.as_secs() as i64, d.subsec_nanos() as i64)
        }
    }
}

/// `attr` of a file's backing copy, with the size and times of the data only the cache holds.
fn corrected(mut attr: Attr, d: &FileData) -> Attr {
    if attr.is_file() && (d.dirty_bytes > 0 || d.seen == (attr.size, attr.mtime)) {
        attr.size = d.size;
        attr.mtime = d.mtime;
        // A write changes the status too: no older than the data the cache holds.
        attr.ctime = attr.ctime.max(d.mtime);
        attr.blocks = attr.blocks.max(d.size.div_ceil(512));
    }
    attr
}

/// The cache.
pub struct FsCache {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for FsCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FsCache")
            .field("backing", &self.inner.cfg.backing)
            .finish()
    }
}

/// Why a mount could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// A setting that cannot work.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// Another mount uses the cache directory.
    #[error("cache directory {0}: in use by another mount")]
    Locked(PathBuf),
    /// The journal of an earlier mount names another backing directory.
    #[error(
        "cache directory {cache_dir} holds dirty data of {journal_backing}, not of {backing}: mount {journal_backing} with it first (removing the directory loses that data)"
    )]
    OtherBacking {
        /// The cache directory.
        cache_dir: PathBuf,
        /// What the journal names.
        journal_backing: PathBuf,
        /// What this mount was given.
        backing: PathBuf,
    },
    /// A policy that does not install.
    #[error(transparent)]
    Policy(#[from] crate::policy::PolicyError),
    /// I/O on a named path.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// What failed.
        source: io::Error,
    },
}

fn at(path: &Path) -> impl FnOnce(io::Error) -> OpenError + '_ {
    move |source| OpenError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl FsCache {
    /// Opens the cache over `cfg.backing`: takes the cache directory, writes back whatever the
    /// journal of an unfinished earlier mount holds, and starts the write-back threads.
    pub fn new(mut cfg: FsConfig, clock: Arc<dyn Clock>) -> Result<(Self, Recovery), OpenError> {
        cfg.validate()?;
        // Opened first, and its path then taken from what was opened: a path resolved first and
        // opened after could be switched in between (a link put where a directory was, by
        // whoever owns its parent), and the access checks of the directories above the backing
        // directory would then look at other directories than the ones served.
        let tree = BackingDir::open_root(&cfg.backing).map_err(|e| OpenError::Io {
            path: cfg.backing.clone(),
            source: if e.raw_os_error() == Some(nix::errno::Errno::ENOTDIR as i32) {
                io::Error::other("not a directory")
            } else {
                e
            },
        })?;
        cfg.backing = tree.real_path().map_err(at(&cfg.backing))?;
        std::fs::create_dir_all(&cfg.cache_dir).map_err(at(&cfg.cache_dir))?;
        cfg.cache_dir = cfg.cache_dir.canonicalize().map_err(at(&cfg.cache_dir))?;
        // The cache holds copies of files only their owners may read.
        std::fs::set_permissions(
            &cfg.cache_dir,
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .map_err(at(&cfg.cache_dir))?;
        let lock_path = cfg.cache_dir.join("lock");
        let lock_file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(at(&lock_path))?;
        let dir_lock =
            nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusiveNonblock)
                .map_err(|_| OpenError::Locked(cfg.cache_dir.clone()))?;
        let data_dir = cfg.cache_dir.join("data");
        let journal_path = cfg.cache_dir.join(journal::FILE);
        let recovery = recover(&cfg, &tree, &data_dir, &journal_path)?;
        if data_dir.exists() {
            std::fs::remove_dir_all(&data_dir).map_err(at(&data_dir))?;
        }
        std::fs::create_dir_all(&data_dir).map_err(at(&data_dir))?;
        let header = Header {
            pliant_fs_journal: journal::VERSION,
            backing: journal::path_bytes(&cfg.backing),
            extent: cfg.extent,
        };
        let journal = Journal::create(&journal_path, &header).map_err(at(&journal_path))?;
        let window = WriteWindow::new(cfg.window_bytes(), cfg.write_window);
        let threads = cfg.writeback_threads;
        let inner = Arc::new(Inner {
            cfg,
            tree,
            data_dir,
            clock,
            state: Mutex::new(State {
                files: HashMap::new(),
                by_path: HashMap::new(),
                by_ident: HashMap::new(),
                lru: BTreeMap::new(),
                dirty_queue: BTreeMap::new(),
                tick: 0,
                next_id: 1,
                window,
                flushing: 0,
                paused: false,
                busy: 0,
                writing: HashMap::new(),
            }),
            journal: Mutex::new(journal),
            counters: Counters::default(),
            used: AtomicU64::new(0),
            dirty: AtomicU64::new(0),
            work: Condvar::new(),
            ahead: Mutex::default(),
            ahead_cv: Condvar::new(),
            ahead_hold: Hold::default(),
            writeback_hold: Hold::default(),
            ahead_busy: AtomicBool::new(false),
            ahead_fail: AtomicBool::new(false),
            progress: Condvar::new(),
            evicting: Mutex::new(()),
            stop: AtomicBool::new(false),
            flush_asked: AtomicU64::new(0),
            flush_done: AtomicU64::new(0),
            flusher: Mutex::new(false),
            started: Instant::now(),
            workers: Mutex::new(Vec::new()),
            evict_to: AtomicU64::new(crate::policy::NONE),
            writeback_to: AtomicU64::new(crate::policy::NONE),
            decide_now: Mutex::new(false),
            decide_cv: Condvar::new(),
            last_nudge: AtomicU64::new(0),
            policy_tx: Mutex::new(None),
            policy_names: Mutex::new((String::new(), String::new())),
            _lock: dir_lock,
            remote: std::sync::OnceLock::new(),
        });
        let mut workers = Vec::with_capacity(threads);
        for i in 0..threads {
            let inner = inner.clone();
            let h = std::thread::Builder::new()
                .name(format!("pliant-fs-wb{i}"))
                .spawn(move || inner.writeback_worker())
                .map_err(|e| OpenError::Io {
                    path: PathBuf::from("write-back thread"),
                    source: e,
                })?;
            workers.push(h);
        }
        {
            let inner = inner.clone();
            let h = std::thread::Builder::new()
                .name("pliant-fs-ahead".into())
                .spawn(move || inner.readahead_worker())
                .map_err(|e| OpenError::Io {
                    path: PathBuf::from("read-ahead thread"),
                    source: e,
                })?;
            workers.push(h);
        }
        *lock(&inner.workers) = workers;
        let cache = Self { inner };
        let policy = crate::policy::start(cache.inner.clone(), cache.inner.cfg.policies.clone())?;
        lock(&cache.inner.workers).push(policy);
        Ok((cache, recovery))
    }

    /// The settings in force (the backing and cache paths canonical).
    pub fn config(&self) -> &FsConfig {
        &self.inner.cfg
    }

    fn tree(&self) -> &BackingDir {
        &self.inner.tree
    }

    /// Makes this a striped mount's cache: file data goes to `remote`'s servers from now on.
    /// Set once, before the mount serves anything.
    pub fn set_remote(&self, remote: Arc<crate::striped::Remote>) -> io::Result<()> {
        remote.keep_locks_alive();
        self.inner
            .remote
            .set(remote)
            .map_err(|_| io::Error::other("the cache's servers are set already"))
    }

    /// `fcntl(F_SETLK/F_SETLKW)` of a striped mount's open file, across every mount of the
    /// cache (`typ`: `F_RDLCK`, `F_WRLCK`, `F_UNLCK`; `end` inclusive). Only a striped mount
    /// takes locks here; the others leave them to the kernel.
    #[allow(clippy::too_many_arguments)]
    pub fn set_lock(
        &self,
        h: &Handle,
        owner: u64,
        typ: i32,
        start: u64,
        end: u64,
        pid: u32,
        wait: bool,
    ) -> io::Result<()> {
        let r = self
            .inner
            .remote
            .get()
            .ok_or_else(|| errno(nix::errno::Errno::ENOSYS))?;
        let (ino, path, who) = self.remote_file(h)?;
        r.set_lock(
            ino,
            &path,
            &who,
            owner,
            lock_kind(typ)?,
            (start, end),
            pid,
            wait,
        )
    }

    /// `fcntl(F_GETLK)` of a striped mount's open file: the first conflicting lock, as
    /// (`F_RDLCK` or `F_WRLCK`, start, end, pid).
    pub fn get_lock(
        &self,
        h: &Handle,
        owner: u64,
        typ: i32,
        start: u64,
        end: u64,
    ) -> io::Result<Option<(i32, u64, u64, u32)>> {
        let r = self
            .inner
            .remote
            .get()
            .ok_or_else(|| errno(nix::errno::Errno::ENOSYS))?;
        let (ino, path, who) = self.remote_file(h)?;
        Ok(
            r.get_lock(ino, &path, &who, owner, lock_kind(typ)?, (start, end))?
                .map(|(w, s, e, pid)| {
                    (
                        if w {
                            nix::libc::F_WRLCK
                        } else {
                            nix::libc::F_RDLCK
                        },
                        s,
                        e,
                        pid,
                    )
                }),
        )
    }

    /// The names of the files the cache holds unwritten data of, sorted.
    pub fn dirty_files(&self) -> Vec<PathBuf> {
        let files: Vec<Arc<FileEntry>> = lock(&self.inner.state).files.values().cloned().collect();
        let mut out: Vec<PathBuf> = files
            .iter()
            .filter_map(|e| {
                let d = lock(&e.data);
                if d.dirty_bytes > 0 {
                    d.path.clone()
                } else {
                    None
                }
            })
            .collect();
        out.sort();
        out
    }

    /// A striped mount's servers, if this is one.
    pub fn remote(&self) -> Option<&Arc<crate::striped::Remote>> {
        self.inner.remote.get()
    }

    /// A striped mount's file: its identity, name and caller for the servers.
    fn remote_file(&self, h: &Handle) -> io::Result<(u64, PathBuf, Caller)> {
        let path = lock(&h.0.data).path.clone();
        // A file unlinked while open has no name the servers know it by.
        let path = path.ok_or_else(|| errno(nix::errno::Errno::ESTALE))?;
        let who = match &h.1 {
            Some(c) => (**c).clone(),
            None => Caller::this_process(),
        };
        Ok((h.0.ident.1, path, who))
    }

    /// `attr` of a striped mount's file, with the size and times of data still only in its
    /// servers.
    fn remote_corrected(
        r: &crate::striped::Remote,
        rel: &Path,
        who: &Caller,
        mut attr: Attr,
    ) -> io::Result<Attr> {
        if attr.is_file()
            && let Some((size, mtime)) = r.size(rel, who)?
        {
            attr.size = attr.size.max(size);
            attr.mtime = attr.mtime.max(mtime);
            attr.ctime = attr.ctime.max(mtime);
            attr.blocks = attr.blocks.max(size.div_ceil(512));
        }
        Ok(attr)
    }

    /// Attributes of `rel` (the root is `""`), corrected for data only the cache has.
    pub fn getattr(&self, rel: &Path) -> io::Result<Attr> {
        if let Some(r) = self.inner.remote.get() {
            let a = Attr::from_meta(&self.tree().symlink_metadata(rel)?);
            return Self::remote_corrected(r, rel, &Caller::this_process(), a);
        }
        let entry = match self.inner.entry(rel) {
            Some(entry) => entry,
            None => {
                let meta = self.tree().symlink_metadata(rel)?;
                // A name of a file the cache holds under another (a hard link): its data too.
                let adopted = (meta.is_file() && meta.nlink() > 1)
                    .then(|| self.inner.adopt(rel, (meta.dev(), meta.ino())))
                    .flatten();
                match adopted {
                    Some(entry) => entry,
                    None => return Ok(Attr::from_meta(&meta)),
                }
            }
        };
        // The backing file is looked at under the file's lock: a write-back completing between
        // the two would otherwise show the backing file's old size as the file's.
        let mut d = lock(&entry.data);
        self.inner.absorb(&entry, &mut d)?;
        let meta = self.tree().symlink_metadata(rel)?;
        Ok(corrected(Attr::from_meta(&meta), &d))
    }

    /// Attributes of an open file, from its backing descriptor: what `fstat` asks, whatever the
    /// file's name is now (one unlinked while open has none).
    pub fn getattr_open(&self, h: &Handle) -> io::Result<Attr> {
        let mut d = lock(&h.0.data);
        self.inner.absorb(&h.0, &mut d)?;
        let meta = self.inner.backing_fd(&mut d)?.metadata()?;
        if let Some(r) = self.inner.remote.get() {
            drop(d);
            let a = Attr::from_meta(&meta);
            return match self.remote_file(h) {
                Ok((_, path, who)) => Self::remote_corrected(r, &path, &who, a),
                Err(_) => Ok(a),
            };
        }
        Ok(corrected(Attr::from_meta(&meta), &d))
    }

    /// `fchmod` of an open file.
    pub fn chmod_open(&self, h: &Handle, mode: u32) -> io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let f = self.inner.backing_fd(&mut lock(&h.0.data))?;
        f.set_permissions(std::fs::Permissions::from_mode(mode & 0o7777))
    }

    /// `fchown` of an open file.
    pub fn chown_open(&self, h: &Handle, uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
        let f = self.inner.backing_fd(&mut lock(&h.0.data))?;
        std::os::unix::fs::fchown(&*f, uid, gid)
    }

    /// `futimens` of an open file (`None`: left as it is).
    pub fn set_times_open(
        &self,
        h: &Handle,
        atime: Option<SystemTime>,
        mtime: Option<SystemTime>,
    ) -> io::Result<()> {
        let mut d = lock(&h.0.data);
        // Before the time is set: a passthrough write's time taken later must not replace it.
        self.inner.absorb(&h.0, &mut d)?;
        let f = self.inner.backing_fd(&mut d)?;
        nix::sys::stat::futimens(&*f, &timespec(atime), &timespec(mtime)).map_err(errno)?;
        if let Some(t) = mtime {
            d.mtime = t;
            if let Ok(m) = f.metadata() {
                d.seen = (m.size(), Attr::from_meta(&m).mtime);
            }
        }
        Ok(())
    }

    /// `ftruncate` of an open file (limits as [`truncate`](Self::truncate)).
    pub fn truncate_open(&self, h: &Handle, size: u64) -> io::Result<()> {
        if size > self.inner.cfg.max_file_size {
            Counters::add(&self.inner.counters.efbig, 1);
            return Err(errno(nix::errno::Errno::EFBIG));
        }
        if let Some(r) = self.inner.remote.get() {
            let (ino, path, who) = self.remote_file(h)?;
            return r.truncate(&path, &who, size, ino);
        }
        self.inner.truncate_entry(&h.0, size)
    }

    /// Opens a regular file, revalidating what the cache holds of it: if the backing file's
    /// size or modification time changed behind the cache's back, its clean extents go.
    pub fn open(&self, rel: &Path) -> io::Result<Handle> {
        let e = self.inner.open_entry(rel, None)?;
        if self.inner.remote.get().is_some() {
            // A striped mount sends the servers the entry's name: the one just opened is
            // certain to lead to the file, where an older one may have been unlinked or
            // renamed through another mount since.
            let mut d = lock(&e.data);
            if d.path.as_deref() != Some(rel) {
                let old = d.path.replace(rel.to_path_buf());
                d.links.retain(|l| l != rel);
                d.links.extend(old);
            }
        }
        Ok(Handle(e, None))
    }

    /// Creates a regular file in the backing directory with `mode`, owned by `owner` when
    /// given, and opens it. Always exclusive (`EEXIST` if anything is there): a file that
    /// appeared since the kernel looked is someone else's, which this call must neither open
    /// past its permissions nor give to `owner`; [`FsCache::open`] is for that, after the
    /// caller's check.
    pub fn create(&self, rel: &Path, mode: u32, owner: Option<(u32, u32)>) -> io::Result<Handle> {
        let f = self.tree().open(
            rel,
            backing::Open {
                create: Some(true),
                mode,
                ..backing::Open::READ_WRITE
            },
        )?;
        if let Some(owner) = owner {
            let (uid, gid) = self.new_owner(rel, owner);
            std::os::unix::fs::fchown(&f, uid, gid)?;
            // The change of owner cleared set-user-ID and set-group-ID: the mode asked for.
            if mode & 0o6000 != 0 {
                use std::os::unix::fs::PermissionsExt;
                f.set_permissions(std::fs::Permissions::from_mode(mode & 0o7777))?;
            }
        }
        self.inner.open_entry(rel, Some(f)).map(|e| Handle(e, None))
    }

    /// Closes a handle. A file unlinked while open leaves the cache with its last handle.
    pub fn release(&self, h: Handle) {
        self.inner.release(&h.0);
        if self.inner.remote.get().is_some() {
            // A striped mount's entry holds no data, and its names go stale as other mounts
            // rename and unlink: kept, a new file given a freed inode number would be taken
            // for it (a hard link) and its requests sent under the old name.
            self.inner.forget_closed(&h.0);
        }
    }

    /// Reads up to `len` bytes at `offset`, copying missing extents up first.
    pub fn read(&self, h: &Handle, offset: u64, len: u32) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        self.read_into(h, offset, len, &mut out)?;
        Ok(out)
    }

    /// [`read`](Self::read) into `buf` (replacing what it held): a caller that reads often keeps
    /// one buffer rather than allocating and zeroing one a read.
    pub fn read_into(
        &self,
        h: &Handle,
        offset: u64,
        len: u32,
        buf: &mut Vec<u8>,
    ) -> io::Result<()> {
        Counters::add(&self.inner.counters.read_requests, 1);
        if let Some(r) = self.inner.remote.get() {
            let (ino, path, who) = self.remote_file(h)?;
            let backing_size = || -> io::Result<u64> {
                Ok(self
                    .inner
                    .backing_fd(&mut lock(&h.0.data))?
                    .metadata()?
                    .len())
            };
            return r.read(ino, &path, &who, offset, len as u64, &backing_size, buf);
        }
        self.inner.read(&h.0, offset, len as u64, buf)?;
        self.inner.nudge();
        self.inner.maybe_evict();
        Ok(())
    }

    /// Writes `data` at `offset` into the cache.
    pub fn write(&self, h: &Handle, offset: u64, data: &[u8]) -> io::Result<u32> {
        if let Some(r) = self.inner.remote.get() {
            if offset.saturating_add(data.len() as u64) > self.inner.cfg.max_file_size {
                Counters::add(&self.inner.counters.efbig, 1);
                return Err(errno(nix::errno::Errno::EFBIG));
            }
            let (ino, path, who) = self.remote_file(h)?;
            return r.write(ino, &path, &who, offset, data);
        }
        self.inner.write(&h.0, offset, data)?;
        self.inner.nudge();
        self.inner.maybe_evict();
        Ok(data.len() as u32)
    }

    /// Tests only: read-ahead copies stop after they let go of the file's lock and before they
    /// copy, until `release_read_ahead`; `held_read_ahead` gives the extents stopped so far. So
    /// a test can put a truncation or a write inside a copy for certain.
    #[doc(hidden)]
    pub fn hold_read_ahead(&self) {
        self.inner.ahead_hold.hold();
    }

    /// Tests only: the extents [`hold_read_ahead`](Self::hold_read_ahead) stopped.
    #[doc(hidden)]
    pub fn held_read_ahead(&self) -> Vec<u64> {
        self.inner.ahead_hold.held()
    }

    /// Tests only: while `on`, read-ahead copies write half their range into the cache file,
    /// then fail, as a disk error in the middle of a copy would.
    #[doc(hidden)]
    pub fn fail_read_ahead_copies(&self, on: bool) {
        self.inner.ahead_fail.store(on, Relaxed);
    }

    /// Tests only: write-backs stop after they let go of the file's lock and before they write
    /// the backing file, until `release_write_back`; `held_write_back` gives the extents stopped
    /// so far. So a test can look at the file while its write-back is under way.
    #[doc(hidden)]
    pub fn hold_write_back(&self) {
        self.inner.writeback_hold.hold();
    }

    /// Tests only: the extents [`hold_write_back`](Self::hold_write_back) stopped.
    #[doc(hidden)]
    pub fn held_write_back(&self) -> Vec<u64> {
        self.inner.writeback_hold.held()
    }

    /// Tests only: lets the write-backs [`hold_write_back`](Self::hold_write_back) stopped go on.
    #[doc(hidden)]
    pub fn release_write_back(&self) {
        self.inner.writeback_hold.release();
    }

    /// Tests only: waits (at most `limit`) until the read-ahead thread has nothing queued and
    /// nothing under way (its copies and the evictions after them done); whether it got there.
    /// A copy can end without copying (the file's extents were dropped meanwhile), so a count
    /// of bytes copied up is no way to wait for it.
    #[doc(hidden)]
    pub fn read_ahead_idle(&self, limit: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if lock(&self.inner.ahead).is_empty() && !self.inner.ahead_busy.load(Relaxed) {
                return true;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Tests only: lets the copies [`hold_read_ahead`](Self::hold_read_ahead) stopped go on.
    #[doc(hidden)]
    pub fn release_read_ahead(&self) {
        self.inner.ahead_hold.release();
    }

    /// For kernel passthrough: if every extent of the file is in the cache, pins them there and
    /// returns the cache file (whose offsets are the file's), else `None`. Undo with
    /// [`FsCache::unpin`].
    pub fn passthrough_file(&self, h: &Handle) -> io::Result<Option<Arc<File>>> {
        if self.inner.remote.get().is_some() {
            return Ok(None);
        }
        let entry = &h.0;
        let mut d = lock(&entry.data);
        self.inner.absorb(entry, &mut d)?;
        let all = self
            .inner
            .extent_range(0, d.size)
            .all(|i| d.extents.contains_key(&i));
        // A read-ahead copy under way while every extent is cached is one past the file's end
        // (the file was cut during it): it writes the cache file without the lock until it
        // finds the cut and trims the file back, and the kernel's passthrough reads end where
        // the cache file ends, not where the file does. Through the daemon meanwhile.
        if !all || !d.copying.is_empty() {
            return Ok(None);
        }
        let size = d.size;
        let f = self.inner.cache_file(entry.id, &mut d)?;
        if f.metadata()?.len() < size {
            f.set_len(size)?;
        }
        let f = d.cache.clone();
        d.pinned += 1;
        Counters::add(&self.inner.counters.passthrough_opens, 1);
        Ok(f)
    }

    /// Swaps the policy deciding `which` for `source` (with new `params`, if given) while the
    /// mount runs; returns the new version's description, or why it was refused (the running
    /// policy then stays).
    pub fn load_policy(
        &self,
        which: crate::policy::Trigger,
        source: pliant_policy::PolicySource,
        params: Option<pliant_policy::Params>,
    ) -> Result<String, crate::policy::PolicyError> {
        self.policy_call(|tx| crate::policy::Command::Load(which, source, params, tx))
    }

    /// Goes back to the policy that decided `which` before the last swap.
    pub fn rollback_policy(
        &self,
        which: crate::policy::Trigger,
    ) -> Result<String, crate::policy::PolicyError> {
        self.policy_call(|tx| crate::policy::Command::Rollback(which, tx))
    }

    fn policy_call(
        &self,
        cmd: impl FnOnce(crate::policy::Answer) -> crate::policy::Command,
    ) -> Result<String, crate::policy::PolicyError> {
        use crate::policy::PolicyError;
        // Past this, the caller (a FUSE request thread) gets an answer instead of waiting on.
        const ANSWER_WITHIN: Duration = Duration::from_secs(30);
        let (tx, rx) = std::sync::mpsc::channel();
        let sender = lock(&self.inner.policy_tx)
            .clone()
            .ok_or(PolicyError::Stopped)?;
        sender.send(cmd(tx)).map_err(|_| PolicyError::Stopped)?;
        *lock(&self.inner.decide_now) = true;
        self.inner.decide_cv.notify_all();
        rx.recv_timeout(ANSWER_WITHIN)
            .map_err(|_| PolicyError::NoAnswer(ANSWER_WITHIN))?
    }

    /// Pins a file's extents in the cache (a handle the kernel may map the cache file for).
    pub fn pin(&self, h: &Handle) {
        lock(&h.0.data).pinned += 1;
    }

    /// Releases a pin of [`FsCache::passthrough_file`] or [`FsCache::pin`].
    pub fn unpin(&self, h: &Handle) {
        let mut d = lock(&h.0.data);
        d.pinned = d.pinned.saturating_sub(1);
    }

    /// For kernel passthrough of writes (see the `passthrough` module): if the file may be
    /// written by the kernel straight into its cache file (held whole, or just created; below
    /// `--max-file-size`; room in the write window for it to grow to that), makes it dirty as
    /// a whole, journaled durably, pins its extents and returns the cache file; else `None`
    /// (the writes then go through [`FsCache::write`]). Undo with
    /// [`FsCache::end_passthrough_write`].
    pub fn passthrough_write_file(&self, h: &Handle) -> io::Result<Option<Arc<File>>> {
        if self.inner.remote.get().is_some() {
            return Ok(None);
        }
        self.inner.start_pt_write(&h.0)
    }

    /// The kernel is about to pass a `write()` through to `rel`'s cache file: it asks for the
    /// file's `security.capability` before each (a root mount has no FUSE_HANDLE_KILLPRIV_V2),
    /// the one moment the daemon hears of those writes. Starts the disk's write-out of the
    /// extents the file's passthrough writers have filled since the last call, as a write
    /// through the daemon starts its own (`extents::start_write_out`): otherwise all of it
    /// waits for the `fsync`, as after a direct write, and on a disk slower than the copies
    /// the daemon's path was faster (`fs-rewrite-32q` in docs/benchmarks.md). Only what the
    /// file grew by: a rewrite inside it is left to the kernel, as the daemon leaves scattered
    /// writes. The bytes whose write-out it started (0 for a file not written by passthrough).
    pub fn passthrough_write_coming(&self, rel: &Path) -> u64 {
        // By name only: a file open for passthrough writing has its entry already (a lookup of
        // the backing directory for every other file would cost each `getxattr` a `stat`).
        match self.inner.entry(rel) {
            Some(e) => self.inner.pt_write_out(&e),
            None => 0,
        }
    }

    /// A handle [`FsCache::passthrough_write_file`] opened closes; with the last of the file's,
    /// the daemon tracks its dirty extents again and writes them back.
    pub fn end_passthrough_write(&self, h: &Handle) -> io::Result<()> {
        let r = self.inner.end_pt_write(&h.0);
        self.inner.nudge();
        r
    }

    /// At `close` (FUSE's flush): what the cache refused of the kernel's passthrough writes to
    /// the file since it last said (EFBIG), if anything.
    pub fn flush_handle(&self, h: &Handle) -> io::Result<()> {
        if self.inner.remote.get().is_some() {
            return Ok(());
        }
        self.inner.pt_refusal(&h.0)
    }

    /// Makes the file's data durable as `--fsync` says: in the cache (data synced, journal
    /// record synced) or in the backing directory.
    pub fn fsync(&self, h: &Handle) -> io::Result<()> {
        if let Some(r) = self.inner.remote.get() {
            let (ino, path, who) = self.remote_file(h)?;
            return r.fsync(ino, &path, &who);
        }
        match self.inner.cfg.fsync {
            FsyncMode::Cache => self.inner.fsync_cache(&h.0)?,
            FsyncMode::Backing => self.inner.writeback_file(&h.0, true).map(|_| ())?,
        }
        self.inner.pt_refusal(&h.0)
    }

    /// Truncates (or extends) a file to `size`, in the backing directory and in the cache.
    pub fn truncate(&self, rel: &Path, size: u64) -> io::Result<()> {
        if size > self.inner.cfg.max_file_size {
            Counters::add(&self.inner.counters.efbig, 1);
            return Err(errno(nix::errno::Errno::EFBIG));
        }
        if let Some(r) = self.inner.remote.get() {
            return r.truncate(rel, &Caller::this_process(), size, 0);
        }
        match self.inner.entry_or_link(rel) {
            Some(e) => self.inner.truncate_entry(&e, size),
            None => self.tree().open(rel, backing::Open::WRITE)?.set_len(size),
        }
    }

    /// Sets permissions.
    pub fn chmod(&self, rel: &Path, mode: u32) -> io::Result<()> {
        self.tree().chmod(rel, mode)
    }

    /// Sets the owner (without following a symbolic link).
    pub fn chown(&self, rel: &Path, uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
        self.tree().chown(rel, uid, gid)
    }

    /// Sets access and modification times (`None` leaves one alone); the cache remembers a
    /// new modification time for a file whose data it still holds.
    pub fn set_times(
        &self,
        rel: &Path,
        atime: Option<SystemTime>,
        mtime: Option<SystemTime>,
    ) -> io::Result<()> {
        self.tree()
            .set_times(rel, &timespec(atime), &timespec(mtime))?;
        if let (Some(t), Some(entry)) = (mtime, self.inner.entry_or_link(rel)) {
            let mut d = lock(&entry.data);
            self.inner.absorb(&entry, &mut d)?;
            d.mtime = t;
            if let Ok(m) = self.tree().metadata(rel) {
                d.seen = (m.size(), Attr::from_meta(&m).mtime);
            }
        }
        Ok(())
    }

    /// Makes a directory.
    pub fn mkdir(&self, rel: &Path, mode: u32, owner: Option<(u32, u32)>) -> io::Result<()> {
        self.tree().mkdir(rel, mode & 0o7777)?;
        if let Some(owner) = owner {
            let (uid, gid) = self.new_owner(rel, owner);
            self.tree().chown(rel, uid, gid)?;
        }
        Ok(())
    }

    /// Makes a FIFO, a socket or a device node at `rel` in the backing directory, where it
    /// behaves as any other: the kernel opens and serves such files itself, so none of their
    /// data passes through the cache. `mode` holds the type and permission bits, `rdev` a
    /// device's number. Devices are root's alone (`EPERM`), whatever the daemon may do: the
    /// kernel checks `CAP_MKNOD` before it asks, and this holds even if it did not.
    pub fn mknod(
        &self,
        rel: &Path,
        mode: u32,
        rdev: u64,
        caller: &Caller,
        owner: Option<(u32, u32)>,
    ) -> io::Result<()> {
        use libc_mode::{S_IFBLK, S_IFCHR, S_IFIFO, S_IFMT, S_IFSOCK};
        match mode & S_IFMT {
            S_IFIFO | S_IFSOCK => {}
            S_IFCHR | S_IFBLK if caller.uid == 0 => {}
            S_IFCHR | S_IFBLK => return Err(errno(nix::errno::Errno::EPERM)),
            // A regular file is `create`'s, a directory `mkdir`'s.
            _ => return Err(errno(nix::errno::Errno::EINVAL)),
        }
        self.tree().mknod(rel, mode, mode & 0o7777, rdev)?;
        if let Some(owner) = owner {
            let (uid, gid) = self.new_owner(rel, owner);
            self.tree().chown(rel, uid, gid)?;
            if mode & 0o6000 != 0 {
                self.tree().chmod(rel, mode & 0o7777)?;
            }
        }
        Ok(())
    }

    /// Removes an empty directory.
    pub fn rmdir(&self, rel: &Path) -> io::Result<()> {
        self.tree().rmdir(rel)
    }

    /// Makes a symbolic link at `rel` pointing at `target`.
    pub fn symlink(&self, rel: &Path, target: &Path, owner: Option<(u32, u32)>) -> io::Result<()> {
        self.tree().symlink(rel, target)?;
        if let Some(owner) = owner {
            let (uid, gid) = self.new_owner(rel, owner);
            self.tree().chown(rel, uid, gid)?;
        }
        Ok(())
    }

    /// Who a new entry at `rel` made for `owner` (its creator, user and group) belongs to: the
    /// creator, but in a set-group-ID directory the directory's group, which the entry got when
    /// it was made (`None`: left as it is).
    fn new_owner(&self, rel: &Path, (uid, gid): (u32, u32)) -> (Option<u32>, Option<u32>) {
        let parent = rel.parent().unwrap_or(Path::new(""));
        let sgid = self
            .tree()
            .symlink_metadata(parent)
            .is_ok_and(|m| m.mode() & 0o2000 != 0);
        (Some(uid), (!sgid).then_some(gid))
    }

    /// Reads a symbolic link.
    pub fn readlink(&self, rel: &Path) -> io::Result<PathBuf> {
        self.tree().readlink(rel)
    }

    /// Lists a directory (without `.` and `..`).
    pub fn readdir(&self, rel: &Path) -> io::Result<Vec<DirEntry>> {
        Ok(self
            .tree()
            .read_dir(rel)?
            .into_iter()
            .map(|(name, kind)| DirEntry { name, kind })
            .collect())
    }

    /// Removes a file; its cached data goes (dirty data included: there is nowhere to write
    /// it), or goes when its last handle closes.
    pub fn unlink(&self, rel: &Path) -> io::Result<()> {
        let renamed = self.inner.journal_unlink(rel)?;
        if let Err(e) = self.tree().unlink(rel) {
            if let Some(id) = renamed {
                self.inner.journal_rename_back(id, rel)?;
            }
            return Err(e);
        }
        self.inner.detach(rel);
        if let Some(r) = self.inner.remote.get() {
            r.unlinked(rel, &Caller::this_process())?;
        }
        Ok(())
    }

    /// A cache server of a striped cache: `rel` was unlinked in the backing directory by a
    /// mount, so what this server holds under that name goes. Refused while the backing
    /// directory still has, under that name, the file this server holds (a notice must not
    /// make a server drop the data of a file that is still there).
    pub fn note_unlinked(&self, rel: &Path) -> io::Result<()> {
        if let Some(e) = self.inner.entry(rel)
            && let Ok(m) = self.tree().symlink_metadata(rel)
            && (m.dev(), m.ino()) == e.ident
        {
            return Err(errno(nix::errno::Errno::EEXIST));
        }
        self.inner.journal_unlink(rel)?;
        self.inner.detach(rel);
        Ok(())
    }

    /// A cache server of a striped cache: `from` was renamed to `to` in the backing directory
    /// by a mount (swapped with it if `exchange`); the names this server holds follow, in the
    /// journal first. Refused (without `exchange`) while `from` is still the file this server
    /// holds under it.
    pub fn note_renamed(&self, from: &Path, to: &Path, exchange: bool) -> io::Result<()> {
        if !exchange
            && let Some(e) = self.inner.entry(from)
            && let Ok(m) = self.tree().symlink_metadata(from)
            && (m.dev(), m.ino()) == e.ident
        {
            return Err(errno(nix::errno::Errno::EEXIST));
        }
        // Told twice (a notice sent again): `to` is already the entry of the file there, which
        // must not be taken for the file the rename replaced.
        if !exchange
            && self.inner.entry(from).is_none()
            && let Some(e) = self.inner.entry(to)
            && let Ok(m) = self.tree().symlink_metadata(to)
            && (m.dev(), m.ino()) == e.ident
        {
            return Ok(());
        }
        self.inner.journal_moves(from, to, exchange)?;
        self.inner.renamed(from, to, exchange);
        Ok(())
    }

    /// Whether `caller` may reach `rel` (search every directory above it) and access it for
    /// `wanted`, by the mode bits as the kernel checks them through a mount. The file's owner
    /// may always: they could change its mode to allow themselves, and a file created
    /// read-only must still take the writes of the descriptor that created it.
    /// Returns the file's metadata.
    pub fn may(&self, rel: &Path, caller: &Caller, wanted: u32) -> io::Result<std::fs::Metadata> {
        self.may_reach(rel, caller)?;
        let m = self.tree().symlink_metadata(rel)?;
        if caller.uid == m.uid() || caller.may(m.mode(), m.uid(), m.gid(), wanted) {
            Ok(m)
        } else {
            Err(errno(nix::errno::Errno::EACCES))
        }
    }

    /// Whether `caller` may search every directory above `rel`, from the backing root down.
    pub fn may_reach(&self, rel: &Path, caller: &Caller) -> io::Result<()> {
        let mut dir = PathBuf::new();
        let parents: Vec<_> = rel
            .parent()
            .into_iter()
            .flat_map(|p| p.components())
            .collect();
        for next in std::iter::once(None).chain(parents.into_iter().map(Some)) {
            if let Some(c) = next {
                dir.push(c);
            }
            let m = self.tree().symlink_metadata(&dir)?;
            if !caller.may(m.mode(), m.uid(), m.gid(), want::EXEC) {
                return Err(errno(nix::errno::Errno::EACCES));
            }
        }
        Ok(())
    }

    /// Whether `caller` may add or remove names in the directory holding `rel`.
    pub fn may_change_parent(&self, rel: &Path, caller: &Caller) -> io::Result<()> {
        let parent = rel.parent().unwrap_or(Path::new(""));
        self.may_reach(rel, caller)?;
        let m = self.tree().symlink_metadata(parent)?;
        if caller.may(m.mode(), m.uid(), m.gid(), want::WRITE | want::EXEC) {
            Ok(())
        } else {
            Err(errno(nix::errno::Errno::EACCES))
        }
    }

    /// Makes `new` a second name of the file at `existing` (a hard link): in the backing
    /// directory at once, and in the cache one entry for both names, so that what is written
    /// through one is read through the other.
    pub fn link(&self, existing: &Path, new: &Path) -> io::Result<()> {
        self.tree().link(existing, new)?;
        self.inner.linked(existing, new);
        Ok(())
    }

    /// Renames `from` to `to` (a file or a whole directory), with `renameat2` flags
    /// (`RENAME_NOREPLACE`, `RENAME_EXCHANGE`).
    pub fn rename(&self, from: &Path, to: &Path, flags: u32) -> io::Result<()> {
        let rflags =
            nix::fcntl::RenameFlags::from_bits(flags).ok_or(errno(nix::errno::Errno::EINVAL))?;
        let exchange = rflags.contains(nix::fcntl::RenameFlags::RENAME_EXCHANGE);
        // Two names of one file: rename(2) does nothing, and leaves both names.
        if let (Ok(a), Ok(b)) = (
            self.tree().symlink_metadata(from),
            self.tree().symlink_metadata(to),
        ) && (a.dev(), a.ino()) == (b.dev(), b.ino())
        {
            return self.tree().rename(from, to, rflags);
        }
        // Journaled files get their new paths in the journal before the rename: a crash in
        // between must not have the next mount write their data back under the old names
        // (where another file may be by then).
        self.inner.journal_moves(from, to, exchange)?;
        if let Err(e) = self.tree().rename(from, to, rflags) {
            // Nothing moved: the journal gets the old paths back.
            let _ = self.inner.journal_moves(to, from, exchange);
            return Err(e);
        }
        self.inner.renamed(
            from,
            to,
            rflags.contains(nix::fcntl::RenameFlags::RENAME_EXCHANGE),
        );
        if let Some(r) = self.inner.remote.get() {
            r.renamed(from, to, exchange, &Caller::this_process())?;
        }
        Ok(())
    }

    /// Reads an extended attribute of the backing path.
    pub fn getxattr(&self, rel: &Path, name: &std::ffi::OsStr) -> io::Result<Option<Vec<u8>>> {
        self.tree().getxattr(rel, name)
    }

    /// Sets an extended attribute of the backing path.
    pub fn setxattr(&self, rel: &Path, name: &std::ffi::OsStr, value: &[u8]) -> io::Result<()> {
        self.tree().setxattr(rel, name, value)
    }

    /// Lists extended attributes of the backing path.
    pub fn listxattr(&self, rel: &Path) -> io::Result<Vec<std::ffi::OsString>> {
        self.tree().listxattr(rel)
    }

    /// Removes an extended attribute of the backing path.
    pub fn removexattr(&self, rel: &Path, name: &std::ffi::OsStr) -> io::Result<()> {
        self.tree().removexattr(rel, name)
    }

    /// The backing file system's numbers.
    pub fn statfs(&self) -> io::Result<nix::sys::statvfs::Statvfs> {
        self.tree().statfs()
    }

    /// `pliant fs preload`: copies every extent of the files at or under `rel` that `caller`
    /// may read into the cache.
    /// A file that cannot fit (with the files this preload already brought in) below the
    /// eviction threshold (`high × capacity`) is left out and counted in `not_fitted`, nothing
    /// of it copied: copying it would only evict, the older cached files and then itself.
    /// `kept_bytes` and `dropped_bytes` say what of the preloaded files is in the cache at the
    /// end.
    pub fn preload(&self, rel: &Path, caller: &Caller) -> io::Result<HintReport> {
        if self.inner.remote.get().is_some() {
            // A striped mount's data is in its servers: each stripe is read once through its
            // owner, which copies it up (and the bytes come here for nothing: servers take no
            // hints of their own yet).
            return self.for_files(rel, caller, want::READ, &mut |c, p, r| {
                let h = c.open(p)?.for_caller(caller.clone());
                let size = c.getattr(p)?.size;
                let mut buf = Vec::new();
                let mut at = 0;
                let res = loop {
                    if at >= size {
                        break Ok(());
                    }
                    if let Err(e) = c.read_into(&h, at, 4 << 20, &mut buf) {
                        break Err(e);
                    }
                    if buf.is_empty() {
                        break Ok(());
                    }
                    at += buf.len() as u64;
                };
                c.release(h);
                res?;
                r.bytes += at;
                r.kept_bytes += at;
                r.files += 1;
                Ok(())
            });
        }
        let limit = (self.inner.cfg.capacity as f64 * self.inner.cfg.high) as u64;
        let mut ours: Vec<(Arc<FileEntry>, u64)> = Vec::new();
        let mut ours_bytes = 0u64;
        let mut report = self.for_files(rel, caller, want::READ, &mut |c, p, r| {
            let h = c.open(p)?;
            let size = lock(&h.0.data).size;
            if ours_bytes.saturating_add(size) > limit {
                c.release(h);
                r.not_fitted += 1;
                r.not_fitted_bytes += size;
                return Ok(());
            }
            let res = c.inner.preload_entry(&h.0);
            if res.is_ok() {
                ours_bytes += size;
                ours.push((h.0.clone(), size));
            }
            c.release(h);
            r.bytes += res?;
            r.files += 1;
            c.inner.maybe_evict();
            Ok(())
        })?;
        for (entry, size) in &ours {
            let kept = lock(&entry.data).cached_bytes.min(*size);
            report.kept_bytes += kept;
            report.dropped_bytes += size - kept;
        }
        Ok(report)
    }

    /// `pliant fs evict`: writes back and drops the cached data of the files at or under `rel`
    /// that `caller` may write.
    pub fn evict(&self, rel: &Path, caller: &Caller) -> io::Result<HintReport> {
        self.no_hints_here()?;
        self.for_cached(rel, caller, want::WRITE, |i, e| i.evict_extents(e, None))
    }

    /// `pliant fs writeback`: writes the dirty data of the files at or under `rel` that
    /// `caller` may write back, and syncs them in the backing directory.
    pub fn writeback(&self, rel: &Path, caller: &Caller) -> io::Result<HintReport> {
        self.no_hints_here()?;
        self.for_cached(rel, caller, want::WRITE, |i, e| i.writeback_file(e, true))
    }

    /// `pliant fs invalidate`: drops the clean cached data of the files at or under `rel` that
    /// `caller` may read (after their backing copies changed); dirty data stays.
    pub fn invalidate(&self, rel: &Path, caller: &Caller) -> io::Result<HintReport> {
        self.no_hints_here()?;
        self.for_cached(rel, caller, want::READ, |i, e| i.invalidate_entry(e))
    }

    /// Runs `f` on the cached files at or under `rel` (files the cache holds nothing of are
    /// left alone), adding up the bytes it reports.
    fn for_cached(
        &self,
        rel: &Path,
        caller: &Caller,
        wanted: u32,
        f: impl Fn(&Inner, &FileEntry) -> io::Result<u64>,
    ) -> io::Result<HintReport> {
        self.for_files(rel, caller, wanted, &mut |c, p, r| {
            if let Some(e) = c.inner.entry(p) {
                r.bytes += f(&c.inner, &e)?;
                r.files += 1;
            }
            Ok(())
        })
    }

    /// Runs `f` on the regular files at or under `rel` that `caller` may access for
    /// `wanted`, descending only into directories it may list and search. A file or directory
    /// named directly that it may not access is an error (`EACCES`); under a directory, it is
    /// skipped and counted.
    fn for_files(
        &self,
        rel: &Path,
        caller: &Caller,
        wanted: u32,
        f: &mut dyn FnMut(&Self, &Path, &mut HintReport) -> io::Result<()>,
    ) -> io::Result<HintReport> {
        let mut report = HintReport::default();
        let mut stack = vec![rel.to_path_buf()];
        while let Some(p) = stack.pop() {
            let meta = self.tree().symlink_metadata(&p)?;
            if meta.is_dir() {
                if !caller.may(meta.mode(), meta.uid(), meta.gid(), want::READ | want::EXEC) {
                    if p == rel {
                        return Err(errno(nix::errno::Errno::EACCES));
                    }
                    report.skipped += 1;
                    continue;
                }
                for (name, _) in self.tree().read_dir(&p)? {
                    stack.push(p.join(name));
                }
            } else if meta.is_file() {
                if !caller.may(meta.mode(), meta.uid(), meta.gid(), wanted) {
                    if p == rel {
                        return Err(errno(nix::errno::Errno::EACCES));
                    }
                    report.skipped += 1;
                    continue;
                }
                f(self, &p, &mut report)?;
            }
        }
        Ok(report)
    }

    /// Writes every dirty extent back, calling `progress(dirty bytes left)` about five times a
    /// second; returns once nothing is dirty. Failed write-backs are retried (and logged).
    pub fn flush(&self, progress: &mut dyn FnMut(u64)) {
        self.inner.flush(progress);
    }

    /// Asks for a flush in the background and returns at once: the caller (a FUSE request
    /// thread) must not be held for the minutes a large flush takes. Returns the flush's
    /// number; it is done once [`FsStats::flush_done`] reaches it. Asks made while a flush
    /// runs are served by one more flush after it, which covers what they wrote before asking.
    pub fn request_flush(&self) -> io::Result<u64> {
        Inner::request_flush(&self.inner)
    }

    /// The counters.
    pub fn stats(&self) -> FsStats {
        let own = self.inner.stats();
        match self.inner.remote.get() {
            // The job's cache is its servers: a server that does not answer leaves the mount's
            // own (empty) counters, and the log says why.
            Some(r) => match r.stats() {
                Ok(servers) => own.striped(&servers),
                Err(e) => {
                    tracing::warn!(error = %e, "the cache servers' counters");
                    own
                }
            },
            None => own,
        }
    }

    /// Hints work on the data a cache holds; a striped mount's is in its servers, which do not
    /// take hints yet.
    fn no_hints_here(&self) -> io::Result<()> {
        if self.inner.remote.get().is_some() {
            return Err(errno(nix::errno::Errno::ENOSYS));
        }
        Ok(())
    }

    /// Stops the mount: with `discard`, drops dirty data (DataWarp's teardown after a failed
    /// job); otherwise writes everything back first. Leaves an empty journal, so the next mount
    /// has nothing to recover.
    pub fn shutdown(self, discard: bool, progress: &mut dyn FnMut(u64)) -> io::Result<()> {
        if !discard {
            self.inner.flush(progress);
        }
        self.inner.stop_threads();
        let header = Header {
            pliant_fs_journal: journal::VERSION,
            backing: journal::path_bytes(&self.inner.cfg.backing),
            extent: self.inner.cfg.extent,
        };
        *lock(&self.inner.journal) =
            Journal::create(&self.inner.cfg.cache_dir.join(journal::FILE), &header)?;
        let _ = std::fs::remove_dir_all(&self.inner.data_dir);
        Ok(())
    }

    /// Simulates `kill -9` for tests: stops the write-back threads and forgets everything in
    /// memory, leaving the cache directory as a crash would.
    #[doc(hidden)]
    pub fn crash(self) {
        self.inner.stop_threads();
    }
}

impl Drop for FsCache {
    fn drop(&mut self) {
        self.inner.stop_threads();
    }
}

impl Inner {
    fn entry(&self, rel: &Path) -> Option<Arc<FileEntry>> {
        let s = lock(&self.state);
        s.by_path.get(rel).and_then(|id| s.files.get(id)).cloned()
    }

    // What the policy thread may see and set: it goes through these rather than `Inner`'s
    // fields, so the locks and atomics it shares with the core stay the core's to arrange.

    pub(crate) fn config(&self) -> &FsConfig {
        &self.cfg
    }

    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Takes the policy thread's command channel and the names of the policies it installed.
    pub(crate) fn policies_started(
        &self,
        tx: std::sync::mpsc::Sender<crate::policy::Command>,
        names: (String, String),
    ) {
        *lock(&self.policy_tx) = Some(tx);
        *lock(&self.policy_names) = names;
    }

    /// Records which policy now decides `which` (after a load or a rollback).
    pub(crate) fn policy_installed(&self, which: crate::policy::Trigger, name: String) {
        let mut names = lock(&self.policy_names);
        match which {
            crate::policy::Trigger::Evict => names.0 = name,
            crate::policy::Trigger::Writeback => names.1 = name,
        }
    }

    /// Returns when a decision is asked for (`nudge`, a policy swap, shutdown) or after
    /// `interval`, whichever is first, taking the request.
    pub(crate) fn wait_for_decision(&self, interval: Duration) {
        let mut due = lock(&self.decide_now);
        if !*due {
            due = self
                .decide_cv
                .wait_timeout(due, interval)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        *due = false;
    }

    /// The eviction policy's target: cached bytes to evict down to (`policy::NONE`: none).
    pub(crate) fn set_evict_to(&self, target: u64) {
        self.evict_to.store(target, Relaxed);
    }

    /// The write-back policy's target: dirty bytes to write back down to.
    pub(crate) fn set_writeback_to(&self, target: u64) {
        self.writeback_to.store(target, Relaxed);
    }

    pub(crate) fn used_bytes(&self) -> u64 {
        self.used.load(Relaxed)
    }

    pub(crate) fn dirty_bytes(&self) -> u64 {
        self.dirty.load(Relaxed)
    }

    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Relaxed)
    }

    pub(crate) fn wake_writeback(&self) {
        self.work.notify_all();
    }

    pub(crate) fn policy_failed(&self, which: &str, error: &str) {
        if self
            .counters
            .policy_errors
            .fetch_add(1, Relaxed)
            .is_multiple_of(100)
        {
            tracing::error!(
                policy = which,
                error,
                "the policy failed to decide; its last targets stand"
            );
        }
    }

    /// Asks the policies for a decision now if the cached or dirty bytes moved by a 64th of the
    /// capacity since the last time this asked.
    fn nudge(&self) {
        let step = (self.cfg.capacity / 64).max(1);
        let key = (self.used.load(Relaxed) / step) << 32 | (self.dirty.load(Relaxed) / step);
        if self.last_nudge.swap(key, Relaxed) != key {
            *lock(&self.decide_now) = true;
            self.decide_cv.notify_one();
        }
    }

    /// Stops the policy and write-back threads.
    fn stop_threads(&self) {
        self.stop.store(true, Relaxed);
        self.work.notify_all();
        {
            let _queue = lock(&self.ahead);
            self.ahead_cv.notify_all();
        }
        *lock(&self.decide_now) = true;
        self.decide_cv.notify_all();
        for h in std::mem::take(&mut *lock(&self.workers)) {
            let _ = h.join();
        }
    }

    fn stats(&self) -> FsStats {
        let c = &self.counters;
        let up = self.started.elapsed().as_secs_f64().max(1e-9);
        let now = self.clock.now();
        let s = lock(&self.state);
        let (wu, wl, wleft) = s.window.usage(now);
        let cached_files = s.files.len() as u64;
        drop(s);
        // One guard: two in one expression would both live to its end, the second waiting on
        // the first.
        let names = lock(&self.policy_names).clone();
        let hit = c.read_hit_bytes.load(Relaxed);
        let miss = c.read_miss_bytes.load(Relaxed);
        FsStats {
            pid: std::process::id(),
            backing: self.cfg.backing.display().to_string(),
            uptime_secs: up,
            capacity_bytes: self.cfg.capacity,
            used_bytes: self.used.load(Relaxed),
            dirty_bytes: self.dirty.load(Relaxed),
            cached_files,
            read_hit_bytes: hit,
            read_miss_bytes: miss,
            read_requests: c.read_requests.load(Relaxed),
            hit_ratio: if hit + miss == 0 {
                0.0
            } else {
                hit as f64 / (hit + miss) as f64
            },
            written_bytes: c.written_bytes.load(Relaxed),
            copy_up_bytes: c.copy_up_bytes.load(Relaxed),
            copy_up_read_bytes: c.copy_up_read_bytes.load(Relaxed),
            copy_up_preload_bytes: c.copy_up_preload_bytes.load(Relaxed),
            read_ahead_bytes: c.read_ahead_bytes.load(Relaxed),
            copy_up_rate: c.copy_up_bytes.load(Relaxed) as f64 / up,
            writeback_bytes: c.writeback_bytes.load(Relaxed),
            writeback_rate: c.writeback_bytes.load(Relaxed) as f64 / up,
            writeback_errors: c.writeback_errors.load(Relaxed),
            evicted_extents: c.evicted_extents.load(Relaxed),
            evicted_bytes: c.evicted_bytes.load(Relaxed),
            edquot_writes: c.edquot.load(Relaxed),
            efbig_writes: c.efbig.load(Relaxed),
            window_used_bytes: wu,
            window_limit_bytes: wl,
            window_left_secs: wleft,
            revalidated_files: c.revalidated_files.load(Relaxed),
            conflicting_files: c.conflicting_files.load(Relaxed),
            passthrough_opens: c.passthrough_opens.load(Relaxed),
            passthrough_write_opens: c.passthrough_write_opens.load(Relaxed),
            evict_policy: names.0,
            writeback_policy: names.1,
            policy_errors: c.policy_errors.load(Relaxed),
            flush_asked: self.flush_asked.load(Relaxed),
            flush_done: self.flush_done.load(Relaxed),
            metrics_addr: None,
            servers: 0,
        }
    }
}
