//! The FUSE adapter: translates kernel requests into [`FsCache`] calls and nothing more (inode
//! numbers to paths, open handles to numbers, errors to errnos).
//!
//! The control verbs ([`Controls`]), the inode table ([`Inodes`]) and the check of who may use
//! the mount ([`Gate`]) are the core's, tested without a mount; this file hands them the
//! kernel's requests.
//!
//! ## Writes: the kernel's write-back cache
//! A mount without passthrough (an ordinary user's, or `--no-passthrough`) asks the kernel for
//! FUSE's write-back cache (`FUSE_WRITEBACK_CACHE`): `write()` copies into the kernel's page
//! cache and returns, and the kernel passes dirty pages on to [`Filesystem::write`] in requests
//! of up to `max_write` (1 MiB) when its dirty limits say so, and at `fsync` and `close`. Why
//! (profiled with `perf` and the kernel's `fuse:fuse_request_send` tracepoint, measured with
//! `tools/bench/fs_write.sh`, docs/benchmarks.md `fs-write-32`): without it every `write()` is
//! one synchronous round trip to the daemon *plus* a GETXATTR of `security.capability` before
//! it (the kernel's check for privileges to drop), and 4 KiB sequential writes ran at 10% of
//! writing the backing directory directly. With it, and with `FUSE_HANDLE_KILLPRIV_V2` (the
//! file system clears set-user-ID and set-group-ID bits itself, so the kernel marks it
//! `SB_NOSEC` and stops asking), they run at 102-113% of direct, and 1 MiB writes + fsync went
//! from 69% to 155% of direct on a loaded machine. The daemon's own code is a few percent of
//! its time: the rest is the kernel copying the data to the daemon and the daemon copying it
//! into the cache file (ext4), three copies where writing directly makes one. The cache file's
//! write-out to disk starts as each extent fills (the core's `start_write_out`), so the disk
//! works while the next extents arrive instead of all at `fsync`: 1 MiB writes + fsync went from
//! about half of direct to 0.74-0.80 (`fs-write-32i`), and to 0.77-0.80 once the kernel's
//! pieces taken out of order by the request threads counted as in order too (`fs-write-32k`).
//! What did not win: a larger share of dirty memory for the mount (the bdi's `max_ratio`,
//! `strict_limit`: root only), more background requests (`max_background`) or fewer, the cache
//! file written outside the file's lock, `O_DIRECT` cache-file writes, the write-out started
//! from a thread of its own, fresh extents allocated ahead (`fs-write-32l`). Kept, and what it
//! changes:
//!
//! - `fsync` stays exact: the kernel writes the file's dirty pages to the daemon and waits for
//!   them before it sends FSYNC, so `--fsync cache` returns once the data is in the cache file
//!   and the journal, as before.
//! - The limits are checked where the data arrives, at write-back: a write past the write
//!   window (EDQUOT) or past `--max-file-size` (EFBIG) is accepted by `write()`, refused when
//!   the kernel passes it on, and the refusal reaches the application at `fsync` (that errno)
//!   or at `close` (EIO: all the kernel keeps of it for `close`). The refused bytes are in
//!   neither the cache nor the backing directory (the kernel's size of the file may still
//!   count them, read as zeros, until it lets go of the file). `--no-write-cache` sends every
//!   write through at once, and the write that crosses a limit fails, as before.
//! - The cache's own size and dirty extents move only with the writes it accepts, as before.
//!   The kernel keeps its own size and modification time of a file it caches (it trusts them
//!   over [`Filesystem::getattr`]'s) and sends the modification time as a `setattr` when it
//!   writes the inode back, which the cache takes as any `utimens`. It reads, through the
//!   daemon, the page a partial-page write lands in.
//! - Set-ID bits: a write carrying `FUSE_WRITE_KILL_SUIDGID`, or a truncation by a caller
//!   other than root, clears them on the backing file (`PliantFuse::kill_suidgid`), and so
//!   does a `chown(f, -1, -1)` by the owner or root (the kernel sends it as a request that sets
//!   nothing); the kernel still drops `security.capability` itself.
//! - Revalidation: since the kernel trusts its own size, a file changed in the backing directory
//!   behind the cache is seen in full only once the kernel has forgotten its inode;
//!   `--no-write-cache` for data that other nodes change during the job.
//! - Not with passthrough: the kernel refuses passthrough when the write-back cache is on, so
//!   a root mount uses passthrough for writes instead (below).
//!
//! ## Writes on a root mount: passthrough
//! With passthrough (root, Linux 6.9+), an open for writing of a file the cache holds whole, a
//! file just created, or one opened with `O_TRUNC` (emptied by the open itself under
//! `FUSE_ATOMIC_O_TRUNC`, asked for on every mount, so whole by the time the open picks its mode:
//! a rewrite 2.5× faster where the data path sets the pace, `fs-rewrite-32q`) is opened by the
//! kernel on the file's cache file
//! ([`FsCache::passthrough_write_file`]; the core decides, this adapter only hands the kernel
//! the backing id): `write()` goes from the application straight into the cache file, one copy
//! as a direct write makes, and no request reaches the daemon. Why: through the daemon every
//! `write()` of a root mount was a synchronous round trip and two more copies (the kernel's
//! write-back cache, which would batch them, cannot be had beside passthrough), and 1 MiB
//! writes + fsync ran at 0.72-0.74 of direct (`fs-fio-32b` in docs/benchmarks.md); by
//! passthrough at 1.13 (0.90-1.25 over 5 interleaved pairs; 0.85, 0.66-1.40, in a run of 10
//! on a machine other jobs loaded: `fs-fio-32c`). What is left per `write()`: the kernel asks
//! for the file's `security.capability` (GETXATTR) before each, as the write cache's
//! `FUSE_HANDLE_KILLPRIV_V2` avoids; not taken here, since the daemon could then not drop the
//! capability of a file the kernel writes. That question is also the daemon's one sign of those
//! writes: it starts the disk's write-out of the extents they filled
//! ([`FsCache::passthrough_write_coming`]), so the `fsync` does not wait for the whole file
//! (1 MiB writes + fsync 1.85-1.96 of direct, from 0.84-1.11: `fs-pt-writeout-32r`). The
//! daemon does not see those writes, so the core holds such a file dirty as a whole, journaled
//! before the open is answered, until
//! its last writer closes, and takes its size and time from the cache file whenever it answers
//! for it (`getattr`, `fsync`, `flush`, `release`; the kernel itself keeps the size its writes
//! made and asks again after them). The kernel still sends FSYNC, FLUSH (at every `close`),
//! SETATTR (truncation) and RELEASE for such a file, which is where the limits reach the
//! application: a write past the write window or `--max-file-size` is cut off when the daemon
//! next looks, and `fsync` or `close` returns EDQUOT or EFBIG. A file already at the limit or
//! with no room left in the window is opened through the daemon, where the write that crosses
//! fails at once; so is one with set-ID bits, and a writer joining handles that use the page
//! cache. `--no-write-cache` sends every write through the daemon as before.
//!
//! ## Large writes without the page cache: `--direct-io`
//! Asked for (`with_direct_io`), every open not in passthrough is `direct_io`: the kernel keeps no
//! page cache for the file's data and sends each `read()` and `write()` as requests of up to
//! `max_write`, copying the application's buffer straight to the daemon. Under the write cache a
//! written byte is copied into the kernel's page cache, then out of it to the daemon at write-back,
//! then into the cache file; here the first copy is gone. Measured (`fs-direct-io-32m` in
//! docs/benchmarks.md): 1 MiB writes + fsync 1.42-1.44× the write cache's MB/s with about 40-60%
//! less of the machine's CPU a GiB; 4 KiB writes at 0.18 of it and 4 KiB sequential reads at about
//! 0.2 (a round trip each, no read-ahead); 1 MiB and 4 KiB random reads equal. Hence an option for
//! jobs that write in large blocks, not the default. The write cache is not asked for then (under
//! it the kernel keeps a file's modification time itself, and direct writes would never move it),
//! only `FUSE_HANDLE_KILLPRIV_V2`, so that the kernel does not ask for `security.capability` before
//! each write and the daemon drops set-ID bits as under the write cache; a `direct_io` write
//! reaches the daemon before `write()` returns, so the limits fail the write that crosses them.
//! `FUSE_DIRECT_IO_ALLOW_MMAP` is asked for too, or a shared mapping of such a file would fail with
//! ENODEV. A striped mount is `direct_io` always (its own reasons: [`crate::striped`]).

use std::collections::HashMap;

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use fuser::{
    BackingId, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyLock, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use crate::core::{
    Access, Asker, Attr, CONTROL_PREFIX, Controls, FsCache, Gate, Handle, Inodes, ROOT, VerbError,
    groups_of, libc_mode, lock,
};

/// How long the kernel may trust attributes and names. Short: the backing directory can change
/// behind the cache's back, and revalidation on open is only as good as the attributes it sees.
const TTL: Duration = Duration::from_secs(1);

/// A directory's entries as readdir pages through them: inode number, type, name.
type Listing = Vec<(u64, FileType, OsString)>;

/// How an open file handle reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Through the daemon, with the kernel's page cache.
    Cached,
    /// Kernel passthrough to the cache file for reads; the file's extents are pinned.
    Passthrough,
    /// Kernel passthrough to the cache file for writes (and reads): the core holds the file
    /// dirty as a whole and pinned until the last such handle closes.
    PassthroughWrite,
    /// Through the daemon without the page cache, beside passthrough handles of the same inode
    /// (the kernel allows an inode one mode at a time: a writer joining passthrough readers
    /// must go through the daemon, which tracks what it dirties).
    DirectBesidePassthrough,
}

#[derive(Debug, Default)]
struct PtInode {
    /// The kernel needs one backing id per inode for all its passthrough opens.
    id: Weak<BackingId>,
    cached: u32,
    passthrough: u32,
}

#[derive(Debug, Default)]
struct Passthrough {
    inodes: HashMap<u64, PtInode>,
    handles: HashMap<u64, (u64, Mode, Option<Arc<BackingId>>)>,
}

/// Answers `statfs` with the backing file system's numbers: what `df` shows of a mount is
/// what lies behind it.
pub fn reply_statfs(s: std::io::Result<nix::sys::statvfs::Statvfs>, reply: ReplyStatfs) {
    match s {
        Ok(s) => reply.statfs(
            s.blocks(),
            s.blocks_free(),
            s.blocks_available(),
            s.files(),
            s.files_free(),
            s.block_size() as u32,
            s.name_max() as u32,
            s.fragment_size() as u32,
        ),
        Err(e) => reply.error(err(e)),
    }
}

/// The FUSE file system over a [`FsCache`].
pub struct PliantFuse {
    core: Arc<FsCache>,
    inodes: Mutex<Inodes>,
    /// Open handles, by number: the inode each was opened as, and the core's handle.
    handles: Mutex<HashMap<u64, (u64, Handle)>>,
    next_fh: AtomicU64,
    gate: Gate,
    controls: Controls,
    /// Directory listings of open directories, by handle.
    listings: Mutex<HashMap<u64, Listing>>,
    /// Asked for: use kernel passthrough for reads of fully cached files.
    want_passthrough: bool,
    /// The kernel agreed (set at init).
    passthrough: AtomicBool,
    /// Asked for: the kernel's write-back cache, where passthrough is not asked for.
    want_write_cache: bool,
    /// Asked for: opens for writing in passthrough too, where the core allows them.
    want_passthrough_writes: bool,
    /// The kernel agreed to leave the clearing of set-user-ID and set-group-ID bits on
    /// writes and truncations to us (FUSE_HANDLE_KILLPRIV_V2, set at init with the cache).
    kill_suidgid: AtomicBool,
    pt: Mutex<Passthrough>,
    /// A striped mount: no page cache (`direct_io`), attributes asked for every time, and
    /// handles that carry their caller to the servers.
    striped: bool,
    /// Asked for (`--direct-io`): opens not in passthrough are `direct_io`, every `read()` and
    /// `write()` one request to the daemon with no page cache between (see the module doc).
    direct_io: bool,
    /// How long the kernel may trust attributes and names.
    ttl: Duration,
}

impl std::fmt::Debug for PliantFuse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PliantFuse")
            .field("core", &self.core)
            .finish()
    }
}

fn err(e: std::io::Error) -> Errno {
    Errno::from(e)
}

/// What the kernel leaves to the daemon under FUSE_HANDLE_KILLPRIV_V2: the mode `a` gets once a
/// write or truncation by a caller without CAP_FSETID has cleared its set-user-ID bit, and its
/// set-group-ID bit where group execute is set (as the kernel does on a local file system);
/// `None` if nothing is to clear. The backing file holds the mode.
fn suidgid_cleared(a: Attr) -> Option<u32> {
    let mode = a.mode & 0o7777;
    let mut kill = mode & 0o4000;
    if mode & 0o2010 == 0o2010 {
        kill |= 0o2000;
    }
    (kill != 0).then_some(mode & !kill)
}

fn control_errno(e: VerbError) -> Errno {
    match e {
        VerbError::NotOwner => Errno::EPERM,
        VerbError::Refused(_) => Errno::EINVAL,
        VerbError::NoSuchVerb(_) => Errno::ENODATA,
        VerbError::Io(e) => err(e),
    }
}

fn file_type(mode: u32) -> FileType {
    match mode & libc_mode::S_IFMT {
        libc_mode::S_IFDIR => FileType::Directory,
        libc_mode::S_IFLNK => FileType::Symlink,
        libc_mode::S_IFCHR => FileType::CharDevice,
        libc_mode::S_IFBLK => FileType::BlockDevice,
        libc_mode::S_IFIFO => FileType::NamedPipe,
        libc_mode::S_IFSOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

/// The attributes the kernel gets for inode `ino` (`pliant-slowfs` shows its files the same way).
pub fn fattr(ino: u64, a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: a.size,
        blocks: a.blocks,
        atime: a.atime,
        mtime: a.mtime,
        ctime: a.ctime,
        crtime: a.ctime,
        kind: file_type(a.mode),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: 4096,
        flags: 0,
    }
}

fn time(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    }
}

impl PliantFuse {
    /// Wraps a cache.
    pub fn new(core: Arc<FsCache>, access: Access) -> Self {
        Self {
            controls: Controls::new(core.clone()),
            core,
            inodes: Mutex::new(Inodes::default()),
            handles: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            gate: Gate::new(access),
            listings: Mutex::new(HashMap::new()),
            want_passthrough: false,
            passthrough: AtomicBool::new(false),
            want_write_cache: false,
            want_passthrough_writes: false,
            kill_suidgid: AtomicBool::new(false),
            pt: Mutex::new(Passthrough::default()),
            striped: false,
            direct_io: false,
            ttl: TTL,
        }
    }

    /// A striped mount's adapter (see the [`crate::striped`] module doc): every open is
    /// `direct_io`, so no mount keeps a copy in its page cache that another mount's write would
    /// make stale, and attributes are never cached by the kernel, so a size another mount made
    /// is seen at once.
    pub fn striped(mut self) -> Self {
        self.striped = true;
        self.ttl = Duration::ZERO;
        self.inodes = Mutex::new(Inodes::following_renames());
        self.want_passthrough = false;
        self.want_write_cache = false;
        self
    }

    /// Opens that are not in passthrough bypass the kernel's page cache (`direct_io`): see the
    /// module doc's "Large writes without the page cache".
    pub fn with_direct_io(mut self, on: bool) -> Self {
        self.direct_io = on;
        self
    }

    /// The flags an open replies with.
    fn open_flags(&self) -> FopenFlags {
        if self.striped || self.direct_io {
            FopenFlags::FOPEN_DIRECT_IO
        } else {
            FopenFlags::empty()
        }
    }

    /// `h` carrying `req`'s caller on a striped mount (its servers check each request).
    fn stamp(&self, req: &Request, h: Handle) -> Handle {
        if self.striped {
            h.for_caller(Self::caller(req))
        } else {
            h
        }
    }

    /// The address the Prometheus endpoint was bound to, reported by `stats`.
    pub fn with_metrics(mut self, addr: Option<std::net::SocketAddr>) -> Self {
        self.controls = self.controls.with_metrics(addr.map(|a| a.to_string()));
        self
    }

    /// The flag the owner's `discard` verb sets: the unmount drops dirty data.
    pub fn discard(&self) -> Arc<AtomicBool> {
        self.controls.discard()
    }

    /// Reads of files whose extents are all cached go from the kernel to the cache file
    /// without the daemon (FUSE passthrough, Linux 6.9+, needs CAP_SYS_ADMIN); when the kernel
    /// or the privileges say no, everything goes through the daemon as before.
    pub fn with_passthrough(mut self, on: bool) -> Self {
        self.want_passthrough = on;
        self
    }

    /// Writes go into the kernel's page cache and reach the cache when the kernel writes them
    /// back (see the module doc). Only without passthrough: the kernel offers one or the other.
    pub fn with_write_cache(mut self, on: bool) -> Self {
        self.want_write_cache = on;
        self
    }

    /// With passthrough: files the core allows it for are opened for writing in passthrough
    /// too, the kernel writing their cache files (see the module doc). Off, every write goes
    /// through the daemon at once (`--no-write-cache`).
    pub fn with_passthrough_writes(mut self, on: bool) -> Self {
        self.want_passthrough_writes = on;
        self
    }

    /// Runs `by_handle` on the open file the kernel names (`fh`: `fstat`, `ftruncate`, …), or
    /// `by_path` on the inode's name; if the name is gone (a file unlinked while open, whose
    /// `fstat` and `fchmod` come by inode), `by_handle` on an open handle of it.
    fn on_file<T>(
        &self,
        ino: INodeNo,
        fh: Option<FileHandle>,
        by_handle: impl Fn(&Handle) -> Result<T, Errno>,
        by_path: impl Fn(&Path) -> Result<T, Errno>,
    ) -> Result<T, Errno> {
        if let Some(h) = fh.and_then(|fh| self.handle(fh).ok()) {
            return by_handle(&h);
        }
        match self.path(ino).and_then(|p| by_path(&p)) {
            Err(Errno::ENOENT) => match self.handle_of(ino) {
                Some(h) => by_handle(&h),
                None => Err(Errno::ENOENT),
            },
            r => r,
        }
    }

    /// Opens `h` as the kernel should see it: in passthrough when it can be, else cached.
    fn reply_open(&self, ino: INodeNo, h: Handle, read_only: bool, reply: ReplyOpen) {
        let fh = self.next_fh.fetch_add(1, Relaxed);
        match self.open_mode(fh, ino.0, &h, read_only, |f| reply.open_backing(f)) {
            Some((mode, id)) => {
                lock(&self.handles).insert(fh, (ino.0, h));
                let flags = match mode {
                    Mode::DirectBesidePassthrough => FopenFlags::FOPEN_DIRECT_IO,
                    _ => FopenFlags::empty(),
                };
                reply.opened_passthrough(FileHandle(fh), flags, &id)
            }
            None => {
                lock(&self.handles).insert(fh, (ino.0, h));
                reply.opened(FileHandle(fh), self.open_flags())
            }
        }
    }

    /// The kernel mode of a new handle `fh` of inode `ino` (`h`), counted in the passthrough
    /// table: passthrough (with the backing id to reply with) where the core lets the file be
    /// read, or written, straight from its cache file, and where the inode has no handle using
    /// the page cache; beside other passthrough handles, through the daemon without the page
    /// cache; else `None` (cached). The decision is the core's; this only tracks the kernel's
    /// one mode per inode and its backing id.
    fn open_mode(
        &self,
        fh: u64,
        ino: u64,
        h: &Handle,
        read_only: bool,
        open_backing: impl FnOnce(&std::fs::File) -> std::io::Result<BackingId>,
    ) -> Option<(Mode, Arc<BackingId>)> {
        if !self.passthrough.load(Relaxed) {
            return None;
        }
        let mut pt = lock(&self.pt);
        let Passthrough { inodes, handles } = &mut *pt;
        let node = inodes.entry(ino).or_default();
        if node.cached == 0 && (read_only || self.want_passthrough_writes) {
            let (file, mode) = if read_only {
                (self.core.passthrough_file(h), Mode::Passthrough)
            } else {
                (self.core.passthrough_write_file(h), Mode::PassthroughWrite)
            };
            match file {
                Ok(Some(file)) => {
                    let id = match node.id.upgrade() {
                        Some(id) => Ok(id),
                        None => open_backing(&file).map(Arc::new),
                    };
                    match id {
                        Ok(id) => {
                            node.id = Arc::downgrade(&id);
                            node.passthrough += 1;
                            handles.insert(fh, (ino, mode, Some(id.clone())));
                            return Some((mode, id));
                        }
                        Err(e) => {
                            self.end_passthrough(h, mode);
                            self.passthrough.store(false, Relaxed);
                            tracing::warn!(error = %e, "FUSE passthrough refused; reads and writes go through the daemon");
                        }
                    }
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "passthrough: the cache file"),
            }
        }
        if node.passthrough > 0
            && let Some(id) = node.id.upgrade()
        {
            node.passthrough += 1;
            // Pinned too: the kernel may map the cache file for this handle as well.
            self.core.pin(h);
            handles.insert(fh, (ino, Mode::DirectBesidePassthrough, Some(id.clone())));
            return Some((Mode::DirectBesidePassthrough, id));
        }
        node.cached += 1;
        handles.insert(fh, (ino, Mode::Cached, None));
        None
    }

    /// Undoes what the core did for a passthrough handle of `mode`.
    fn end_passthrough(&self, h: &Handle, mode: Mode) {
        match mode {
            Mode::Cached => {}
            Mode::Passthrough | Mode::DirectBesidePassthrough => self.core.unpin(h),
            Mode::PassthroughWrite => {
                if let Err(e) = self.core.end_passthrough_write(h) {
                    tracing::error!(error = %e, "closing a file written in passthrough");
                }
            }
        }
    }

    fn guard(&self, req: &Request) -> Result<(), Errno> {
        if self
            .gate
            .admits(req.uid(), req.gid(), || groups_of(req.pid()))
        {
            Ok(())
        } else {
            Err(Errno::EACCES)
        }
    }

    fn path(&self, ino: INodeNo) -> Result<PathBuf, Errno> {
        lock(&self.inodes).path(ino.0).ok_or(Errno::ENOENT)
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        if name.as_bytes().contains(&b'/') || name == ".." || name == "." {
            return Err(Errno::EINVAL);
        }
        Ok(self.path(parent)?.join(name))
    }

    fn owner(&self, req: &Request) -> Option<(u32, u32)> {
        self.gate.new_owner(req.uid(), req.gid())
    }

    fn entry(&self, path: &Path, reply: ReplyEntry) {
        match self.core.getattr(path) {
            Ok(a) => {
                let ino = self.number(path, &a);
                reply.entry(&self.ttl, &fattr(ino, &a), Generation(0));
            }
            Err(e) => reply.error(err(e)),
        }
    }

    /// The inode number of `path`, whose attributes are `a`, counting a kernel reference: a
    /// file's other names share it (hard links).
    fn number(&self, path: &Path, a: &Attr) -> u64 {
        if !a.is_file() {
            return lock(&self.inodes).lookup(path);
        }
        let same = |other: &Path| self.core.getattr(other).is_ok_and(|o| o.ident == a.ident);
        lock(&self.inodes).lookup_file(path, Some((a.ident, a.nlink)), same)
    }

    fn handle(&self, fh: FileHandle) -> Result<Handle, Errno> {
        lock(&self.handles)
            .get(&fh.0)
            .map(|(_, h)| h.clone())
            .ok_or(Errno::EBADF)
    }

    /// An open handle of inode `ino`: the way to a file unlinked while open, whose name is gone
    /// (the kernel sends `fstat` and `fchmod` by inode, without the handle).
    fn handle_of(&self, ino: INodeNo) -> Option<Handle> {
        lock(&self.handles)
            .values()
            .find(|(i, _)| *i == ino.0)
            .map(|(_, h)| h.clone())
    }

    /// `.`, `..` and the backing directory's entries, with the inode numbers the kernel knows.
    fn listing(&self, ino: INodeNo) -> Result<Listing, Errno> {
        let path = self.path(ino)?;
        let list = self.core.readdir(&path).map_err(err)?;
        let parent_ino = path
            .parent()
            .and_then(|pp| lock(&self.inodes).ino(pp))
            .unwrap_or(ROOT);
        let mut all: Listing = vec![
            (ino.0, FileType::Directory, ".".into()),
            (parent_ino, FileType::Directory, "..".into()),
        ];
        {
            let inodes = lock(&self.inodes);
            for e in list {
                let child = path.join(&e.name);
                // Numbers for names the kernel has not looked up are only shown by `ls -i`;
                // high numbers keep them apart from the mount's own.
                let n = inodes
                    .ino(&child)
                    .unwrap_or(u64::MAX / 2 + all.len() as u64);
                all.push((n, file_type(e.kind), e.name));
            }
        }
        Ok(all)
    }

    /// Who asks, for the answers kept for it.
    fn asker(req: &Request) -> Asker {
        Asker {
            pid: req.pid(),
            uid: req.uid(),
        }
    }

    /// Who asks, for the checks the kernel cannot make.
    fn caller(req: &Request) -> crate::core::Caller {
        crate::core::Caller {
            uid: req.uid(),
            gid: req.gid(),
            // Unreadable: judged by the user and group alone.
            groups: groups_of(req.pid()).unwrap_or_default(),
        }
    }

    /// An open with `O_TRUNC` under FUSE_ATOMIC_O_TRUNC: the kernel checked the caller may
    /// write and sends no truncation after the open (`fuse_do_setattr` drops the one `open(2)`
    /// makes), so the daemon does all it did: empties the file, marks its modification (as a
    /// local open with `O_TRUNC` does, even of an empty file), and, for a caller without
    /// CAP_FSETID, clears the set-ID bits the kernel would have cleared in that truncation.
    /// Done before the reply, the file is empty, so whole in the cache, when the open chooses
    /// its mode: a root mount writes it by passthrough (before, the truncation came after the
    /// open, and a file the cache did not hold whole was written through the daemon).
    ///
    /// The set-ID bits go first: a failure there refuses the open with the file as it was,
    /// where the truncation cannot be undone. `h` carries the caller (`stamp`), so a striped
    /// mount's servers check the caller's right, not the daemon's. A failure to mark the time
    /// after the truncation is logged, not returned: the file is emptied either way.
    fn truncate_at_open(&self, req: &Request, h: &Handle) -> Result<(), Errno> {
        if req.uid() != 0
            && let Some(m) = suidgid_cleared(self.core.getattr_open(h).map_err(err)?)
        {
            self.core.chmod_open(h, m).map_err(err)?;
        }
        self.core.truncate_open(h, 0).map_err(err)?;
        if let Err(e) = self.core.set_times_open(h, None, Some(SystemTime::now())) {
            tracing::warn!(error = %e, "an open with O_TRUNC emptied a file but could not mark its modification time");
        }
        Ok(())
    }

    /// `create` without `O_EXCL` of a name that someone else made in the backing directory
    /// after the kernel looked it up: an open of that file, whose permissions the kernel did
    /// not check (it checked only the directory's). Checked here against the caller, on the
    /// file the handle opened (a file renamed over the name meanwhile is the one checked, and
    /// the one emptied for `O_TRUNC`, as [`truncate_at_open`](Self::truncate_at_open) does for
    /// an open: the kernel sends nothing after a create); the file stays its owner's.
    fn open_appeared(&self, req: &Request, p: &Path, flags: i32) -> Result<Handle, Errno> {
        use crate::core::want;
        let mut wanted = match flags & nix::libc::O_ACCMODE {
            nix::libc::O_RDONLY => want::READ,
            nix::libc::O_WRONLY => want::WRITE,
            _ => want::READ | want::WRITE,
        };
        if flags & nix::libc::O_TRUNC != 0 {
            wanted |= want::WRITE;
        }
        let h = self.stamp(req, self.core.open(p).map_err(err)?);
        let checked = self.core.getattr_open(&h).map_err(err).and_then(|a| {
            if !Self::caller(req).may(a.mode, a.uid, a.gid, wanted) {
                return Err(Errno::EACCES);
            }
            if flags & nix::libc::O_TRUNC != 0 {
                self.truncate_at_open(req, &h)?;
            }
            Ok(())
        });
        match checked {
            Ok(()) => Ok(h),
            Err(e) => {
                self.core.release(h);
                Err(e)
            }
        }
    }
}

impl Filesystem for PliantFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // One request per extent where the kernel allows it.
        let _ = config.set_max_write(1 << 20);
        let _ = config.set_max_readahead(1 << 20);
        // `--direct-io` on a mount that is not striped (a striped one is `direct_io` anyway).
        let direct_io = self.direct_io && !self.striped;
        if direct_io && !self.want_passthrough {
            // Not the write cache: under it the kernel keeps a file's modification time itself
            // and direct writes never move it (posix_diff: `write.*` kept m= c=). Only
            // FUSE_HANDLE_KILLPRIV_V2, for its SB_NOSEC (below).
            match config.add_capabilities(fuser::InitFlags::FUSE_HANDLE_KILLPRIV_V2) {
                Ok(()) => self.kill_suidgid.store(true, Relaxed),
                Err(missing) => tracing::warn!(
                    ?missing,
                    "this kernel offers no FUSE_HANDLE_KILLPRIV_V2: it asks for security.capability before every write"
                ),
            }
        } else if self.want_write_cache && !self.want_passthrough {
            // FUSE_HANDLE_KILLPRIV_V2 also marks the file system SB_NOSEC: without it, the
            // kernel asks for `security.capability` (a GETXATTR round trip) before every write.
            match config.add_capabilities(
                fuser::InitFlags::FUSE_WRITEBACK_CACHE | fuser::InitFlags::FUSE_HANDLE_KILLPRIV_V2,
            ) {
                Ok(()) => self.kill_suidgid.store(true, Relaxed),
                Err(missing) => tracing::warn!(
                    ?missing,
                    "this kernel offers no FUSE write-back cache (with HANDLE_KILLPRIV_V2); every write goes through the daemon at once"
                ),
            }
        }
        if direct_io {
            // Without it the kernel refuses a shared `mmap` of a `direct_io` file (ENODEV);
            // with it (Linux 6.6+) such a mapping goes through the page cache, which the
            // kernel keeps coherent with the direct reads and writes of the same mount.
            if let Err(missing) =
                config.add_capabilities(fuser::InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP)
            {
                tracing::warn!(
                    ?missing,
                    "this kernel does not let direct_io files be mapped shared: mmap(MAP_SHARED) fails with ENODEV under --direct-io"
                );
            }
        }
        // `O_TRUNC` comes with the open, not as a truncation after it (see `truncate_at_open`).
        if let Err(missing) = config.add_capabilities(fuser::InitFlags::FUSE_ATOMIC_O_TRUNC) {
            tracing::warn!(
                ?missing,
                "this kernel offers no FUSE atomic O_TRUNC: a file opened with O_TRUNC is emptied after its open"
            );
        }
        if self.striped {
            // `fcntl` locks go to the servers, so that nodes exclude each other; `flock` stays
            // the kernel's on each node (fuser does not say which of the two a request is).
            if let Err(missing) = config.add_capabilities(fuser::InitFlags::FUSE_POSIX_LOCKS) {
                tracing::warn!(
                    ?missing,
                    "this kernel offers no FUSE POSIX locks: fcntl locks stay local to the node"
                );
            }
        }
        if self.want_passthrough {
            // Depth 1: the cache files sit on an ordinary file system.
            let ok = config
                .add_capabilities(fuser::InitFlags::FUSE_PASSTHROUGH)
                .is_ok()
                && config.set_max_stack_depth(1).is_ok();
            self.passthrough.store(ok, Relaxed);
            if !ok {
                tracing::warn!(
                    "this kernel offers no FUSE passthrough; reads go through the daemon"
                );
            }
        }
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if let Err(e) = self.guard(req) {
            return reply.error(e);
        }
        match self.child(parent, name) {
            Ok(p) => self.entry(&p, reply),
            Err(e) => reply.error(e),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        lock(&self.inodes).forget(ino.0, nlookup);
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        // By the open handle when the kernel names one, or when the file's name is gone (a file
        // unlinked while open: `fstat` comes by inode).
        let res = self.guard(req).and_then(|_| {
            self.on_file(
                ino,
                fh,
                |h| self.core.getattr_open(h).map_err(err),
                |p| self.core.getattr(p).map_err(err),
            )
        });
        match res {
            Ok(a) => reply.attr(&self.ttl, &fattr(ino.0, &a)),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let kill = req.uid() != 0 && self.kill_suidgid.load(Relaxed);
        // Under FUSE_HANDLE_KILLPRIV_V2 the kernel strips the set-ID clearing from a
        // `chown(f, -1, -1)` and sends what is left: a request that sets nothing. On a local
        // file system that call clears a regular file's set-user-ID bit, and its set-group-ID
        // bit where group execute is set, for its owner and for root; so does the daemon. For
        // anyone else a local chown fails (EPERM) and changes nothing; here nothing changes: the
        // kernel sends the same request after it drops a file's capabilities at a write, which
        // must not fail. (So a file with both set-ID bits and capabilities loses the bits at
        // root's write too, where ext4 keeps them: rare, and the safe way round.)
        let chown_nothing = self.kill_suidgid.load(Relaxed)
            && [mode, uid, gid].iter().all(Option::is_none)
            && size.is_none()
            && atime.is_none()
            && mtime.is_none();
        // Asked only for such a request: the file's attributes are a stat of the backing file.
        let nothing_cleared = |a: Attr| {
            let mine = req.uid() == 0 || req.uid() == a.uid;
            (mine && a.mode & nix::libc::S_IFMT == nix::libc::S_IFREG)
                .then(|| suidgid_cleared(a))
                .flatten()
        };
        let (atime, mtime) = (atime.map(time), mtime.map(time));
        let by_handle = |h: &Handle| {
            if let Some(m) = mode {
                self.core.chmod_open(h, m).map_err(err)?;
            }
            if uid.is_some() || gid.is_some() {
                self.core.chown_open(h, uid, gid).map_err(err)?;
            }
            if let Some(s) = size {
                self.core.truncate_open(h, s).map_err(err)?;
                if kill && let Some(m) = suidgid_cleared(self.core.getattr_open(h).map_err(err)?) {
                    self.core.chmod_open(h, m).map_err(err)?;
                }
            }
            if atime.is_some() || mtime.is_some() {
                self.core.set_times_open(h, atime, mtime).map_err(err)?;
            }
            if chown_nothing
                && let Some(m) = nothing_cleared(self.core.getattr_open(h).map_err(err)?)
            {
                self.core.chmod_open(h, m).map_err(err)?;
            }
            self.core.getattr_open(h).map_err(err)
        };
        let by_path = |p: &Path| {
            if let Some(m) = mode {
                self.core.chmod(p, m).map_err(err)?;
            }
            if uid.is_some() || gid.is_some() {
                self.core.chown(p, uid, gid).map_err(err)?;
            }
            if let Some(s) = size {
                self.core.truncate(p, s).map_err(err)?;
                if kill && let Some(m) = suidgid_cleared(self.core.getattr(p).map_err(err)?) {
                    self.core.chmod(p, m).map_err(err)?;
                }
            }
            if atime.is_some() || mtime.is_some() {
                self.core.set_times(p, atime, mtime).map_err(err)?;
            }
            if chown_nothing && let Some(m) = nothing_cleared(self.core.getattr(p).map_err(err)?) {
                self.core.chmod(p, m).map_err(err)?;
            }
            self.core.getattr(p).map_err(err)
        };
        let res = self
            .guard(req)
            .and_then(|_| self.on_file(ino, fh, by_handle, by_path));
        match res {
            Ok(a) => reply.attr(&self.ttl, &fattr(ino.0, &a)),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        let res = self
            .guard(req)
            .and_then(|_| self.path(ino))
            .and_then(|p| self.core.readlink(&p).map_err(err));
        match res {
            Ok(t) => reply.data(t.as_os_str().as_bytes()),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let perm = mode & !umask & 0o7777;
        let res = self
            .guard(req)
            .and_then(|_| self.child(parent, name))
            .and_then(|p| {
                if mode & libc_mode::S_IFMT == libc_mode::S_IFREG {
                    let h = self.core.create(&p, perm, self.owner(req));
                    return h.map(|h| self.core.release(h)).map_err(err).map(|_| p);
                }
                let kind = mode & libc_mode::S_IFMT;
                self.core
                    .mknod(
                        &p,
                        kind | perm,
                        rdev.into(),
                        &Self::caller(req),
                        self.owner(req),
                    )
                    .map_err(err)
                    .map(|()| p)
            });
        match res {
            Ok(p) => self.entry(&p, reply),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let res = self
            .guard(req)
            .and_then(|_| self.child(parent, name))
            .and_then(|p| {
                self.core
                    .mkdir(&p, mode & !umask, self.owner(req))
                    .map_err(err)
                    .map(|_| p)
            });
        match res {
            Ok(p) => self.entry(&p, reply),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let res = self
            .guard(req)
            .and_then(|_| self.child(parent, name))
            .and_then(|p| {
                self.core.unlink(&p).map_err(err)?;
                lock(&self.inodes).unlinked(&p);
                Ok(())
            });
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let res = self
            .guard(req)
            .and_then(|_| self.child(parent, name))
            .and_then(|p| {
                self.core.rmdir(&p).map_err(err)?;
                lock(&self.inodes).unlinked(&p);
                Ok(())
            });
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let res = self
            .guard(req)
            .and_then(|_| self.child(parent, link_name))
            .and_then(|p| {
                self.core
                    .symlink(&p, target, self.owner(req))
                    .map_err(err)
                    .map(|_| p)
            });
        match res {
            Ok(p) => self.entry(&p, reply),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let res = (|| {
            self.guard(req)?;
            let from = self.child(parent, name)?;
            let to = self.child(newparent, newname)?;
            self.core.rename(&from, &to, flags.bits()).map_err(err)?;
            let exchange = flags.bits() & 2 != 0;
            lock(&self.inodes).renamed(&from, &to, exchange);
            Ok(())
        })();
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let res = (|| {
            self.guard(req)?;
            let existing = self.path(ino)?;
            let new = self.child(newparent, newname)?;
            // The file the kernel means, not whatever was put under its name behind the mount
            // since (the kernel checked the caller against the file it knows).
            let known = lock(&self.inodes).ident(ino.0);
            if let Some(known) = known
                && self.core.getattr(&existing).map_err(err)?.ident != known
            {
                return Err(Errno::ENOENT);
            }
            self.core.link(&existing, &new).map_err(err)?;
            let a = self.core.getattr(&new).map_err(err)?;
            lock(&self.inodes).linked(ino.0, &new);
            Ok(a)
        })();
        match res {
            Ok(a) => reply.entry(&self.ttl, &fattr(ino.0, &a), Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let res = self
            .guard(req)
            .and_then(|_| self.path(ino))
            .and_then(|p| self.core.open(&p).map_err(err))
            .map(|h| self.stamp(req, h))
            .and_then(|h| {
                // Present only under FUSE_ATOMIC_O_TRUNC (the kernel strips it otherwise).
                if flags.0 & nix::libc::O_TRUNC == 0 {
                    return Ok(h);
                }
                match self.truncate_at_open(req, &h) {
                    Ok(()) => Ok(h),
                    Err(e) => {
                        self.core.release(h);
                        Err(e)
                    }
                }
            });
        match res {
            Ok(h) => {
                let read_only = matches!(flags.acc_mode(), fuser::OpenAccMode::O_RDONLY);
                self.reply_open(ino, h, read_only, reply)
            }
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        // One buffer a request thread, kept between reads (up to a few extents' worth).
        thread_local! {
            static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        BUF.with_borrow_mut(|buf| {
            match self
                .handle(fh)
                .and_then(|h| self.core.read_into(&h, offset, size, buf).map_err(err))
            {
                Ok(()) => reply.data(buf),
                Err(e) => reply.error(e),
            }
            if buf.capacity() > 4 << 20 {
                *buf = Vec::new();
            }
        });
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        // Under the write-back cache this may be the kernel writing back what it accepted a
        // while ago: an error here (EDQUOT, EFBIG) reaches the application at fsync or close.
        match self.handle(fh).and_then(|h| {
            let n = self.core.write(&h, offset, data).map_err(err)?;
            if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID)
                && let Some(m) = suidgid_cleared(self.core.getattr_open(&h).map_err(err)?)
            {
                self.core.chmod_open(&h, m).map_err(err)?;
            }
            Ok(n)
        }) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // `close` waits for this: where a passthrough write the cache refused (EFBIG) reaches
        // an application that did not fsync.
        match self
            .handle(fh)
            .and_then(|h| self.core.flush_handle(&h).map_err(err))
        {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // Taken out first: a guard in the `if let` would hold the handle table through the body,
        // against an open that holds the passthrough table and wants the handle table.
        let h = lock(&self.handles).remove(&fh.0).map(|(_, h)| h);
        if let Some(h) = h {
            let mut pt = lock(&self.pt);
            if let Some((ino, mode, _id)) = pt.handles.remove(&fh.0)
                && let Some(node) = pt.inodes.get_mut(&ino)
            {
                match mode {
                    Mode::Cached => node.cached = node.cached.saturating_sub(1),
                    _ => node.passthrough = node.passthrough.saturating_sub(1),
                }
                self.end_passthrough(&h, mode);
                if node.cached == 0 && node.passthrough == 0 {
                    pt.inodes.remove(&ino);
                }
            }
            drop(pt);
            self.core.release(h);
        }
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self
            .handle(fh)
            .and_then(|h| self.core.fsync(&h).map_err(err))
        {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.guard(req).and_then(|_| self.path(ino)) {
            Ok(_) => {
                let fh = self.next_fh.fetch_add(1, Relaxed);
                reply.opened(FileHandle(fh), FopenFlags::empty())
            }
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if let Err(e) = self.guard(req) {
            return reply.error(e);
        }
        // The listing is read once per open directory (at offset 0) and the kernel's further
        // calls page through it: reading it again per call would cost a large directory
        // quadratic time, and offsets would shift if it changed in between.
        if offset == 0 || !lock(&self.listings).contains_key(&fh.0) {
            match self.listing(ino) {
                Ok(all) => {
                    lock(&self.listings).insert(fh.0, all);
                }
                Err(e) => return reply.error(e),
            }
        }
        let listings = lock(&self.listings);
        let all = listings.get(&fh.0).map(Vec::as_slice).unwrap_or_default();
        for (i, (n, kind, name)) in all.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*n), (i + 1) as u64, *kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        lock(&self.listings).remove(&fh.0);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        reply_statfs(self.core.statfs(), reply);
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        if let Some(verb) = name.as_bytes().strip_prefix(CONTROL_PREFIX.as_bytes()) {
            let verb = String::from_utf8_lossy(verb);
            let owner = self.gate.owns(req.uid());
            return match self.controls.set(&verb, value, Self::asker(req), owner) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(control_errno(e)),
            };
        }
        let res = self
            .guard(req)
            .and_then(|_| self.path(ino))
            .and_then(|p| self.core.setxattr(&p, name, value).map_err(err));
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let res = (|| {
            self.guard(req)?;
            let p = self.path(ino)?;
            if let Some(verb) = name.as_bytes().strip_prefix(CONTROL_PREFIX.as_bytes()) {
                let verb = String::from_utf8_lossy(verb);
                return self
                    .controls
                    .get(&p, ino.0, &verb, size == 0, Self::asker(req), || {
                        Self::caller(req)
                    })
                    .map_err(control_errno);
            }
            if name.as_bytes() == b"security.capability" && self.passthrough.load(Relaxed) {
                // A `write()` by passthrough may follow (see the core's method).
                self.core.passthrough_write_coming(&p);
            }
            self.core
                .getxattr(&p, name)
                .map_err(err)?
                .ok_or(Errno::NO_XATTR)
        })();
        match res {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() > size as usize => reply.error(Errno::ERANGE),
            Ok(v) => reply.data(&v),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let res = self
            .guard(req)
            .and_then(|_| self.path(ino))
            .and_then(|p| self.core.listxattr(&p).map_err(err));
        match res {
            Ok(names) => {
                let mut v = Vec::new();
                for n in names {
                    v.extend_from_slice(n.as_bytes());
                    v.push(0);
                }
                if size == 0 {
                    reply.size(v.len() as u32)
                } else if v.len() > size as usize {
                    reply.error(Errno::ERANGE)
                } else {
                    reply.data(&v)
                }
            }
            Err(e) => reply.error(e),
        }
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let res = self
            .guard(req)
            .and_then(|_| self.path(ino))
            .and_then(|p| self.core.removexattr(&p, name).map_err(err));
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn access(&self, req: &Request, ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        // With default_permissions the kernel checks modes itself; what is left is the
        // traversal of the backing directory's parents.
        match self.guard(req).and_then(|_| self.path(ino)) {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn getlk(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: ReplyLock,
    ) {
        let res = self.handle(fh).and_then(|h| {
            self.core
                .get_lock(&h, lock_owner.0, typ, start, end)
                .map_err(err)
        });
        match res {
            Ok(Some((typ, start, end, pid))) => reply.locked(start, end, typ, pid),
            Ok(None) => reply.locked(start, end, nix::libc::F_UNLCK, pid),
            Err(e) => reply.error(e),
        }
    }

    fn setlk(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        let res = self.handle(fh).and_then(|h| {
            self.core
                .set_lock(&h, lock_owner.0, typ, start, end, pid, sleep)
                .map_err(err)
        });
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let res = (|| {
            self.guard(req)?;
            let p = self.child(parent, name)?;
            let h = match self
                .core
                .create(&p, mode & !umask & 0o7777, self.owner(req))
            {
                Ok(h) => h,
                Err(e)
                    if e.raw_os_error() == Some(nix::libc::EEXIST)
                        && flags & nix::libc::O_EXCL == 0 =>
                {
                    self.open_appeared(req, &p, flags)?
                }
                Err(e) => return Err(err(e)),
            };
            let a = self.core.getattr(&p).map_err(err)?;
            Ok((p, h, a))
        })();
        match res {
            Ok((p, h, a)) => {
                let h = self.stamp(req, h);
                let ino = self.number(&p, &a);
                let fh = self.next_fh.fetch_add(1, Relaxed);
                let read_only = flags & nix::libc::O_ACCMODE == nix::libc::O_RDONLY;
                let mode = self.open_mode(fh, ino, &h, read_only, |f| reply.open_backing(f));
                lock(&self.handles).insert(fh, (ino, h));
                match mode {
                    Some((mode, id)) => reply.created_passthrough(
                        &self.ttl,
                        &fattr(ino, &a),
                        Generation(0),
                        FileHandle(fh),
                        match mode {
                            Mode::DirectBesidePassthrough => FopenFlags::FOPEN_DIRECT_IO,
                            _ => FopenFlags::empty(),
                        },
                        &id,
                    ),
                    None => reply.created(
                        &self.ttl,
                        &fattr(ino, &a),
                        Generation(0),
                        FileHandle(fh),
                        self.open_flags(),
                    ),
                }
            }
            Err(e) => reply.error(e),
        }
    }
}
