//! The FUSE adapter: translates kernel requests into [`FsCache`] calls and nothing more (inode
//! numbers to paths, open handles to numbers, errors to errnos), plus the control names
//! `pliant fs` reaches the mount through.
//!
//! ## Control through extended attributes
//! No one needs a socket or a pid file: the verbs are extended attribute names under
//! `pliant.`, which never reach the backing directory and are not listed. Each verb has a rule
//! by whom it affects (docs/security.md):
//!
//! - `getxattr(PATH, "pliant.<verb>")`, a read, for verbs that touch only what the caller may
//!   touch: `stats` (the mount's [`FsStats`](crate::FsStats)), `preload` and `invalidate` (of clean copies) on
//!   the files at or under PATH that the caller may read, `evict` and `writeback` on those it
//!   may write (a [`HintReport`](crate::core::HintReport); the kernel checks PATH itself, the core each file under it).
//! - `setxattr(MOUNT, "pliant.<verb>", VALUE)`, for verbs that change the mount for every
//!   user, its owner's or root's only (`EPERM` otherwise): `flush` (start writing everything
//!   back, in the background: a FUSE request thread is not held for it), `discard` (drop dirty
//!   data at the unmount), `policy.*` (swap or roll back a policy). The answer waits for the
//!   same process under `getxattr("pliant.result")`.
//!
//! A `getxattr` asking only for the size runs the verb and keeps the answer for the same
//! process's next call (a bounded number of them), so the usual two-call pattern runs a verb
//! once.
//!
//! ## Security
//! The kernel checks permissions (`default_permissions`) against the backing directory's modes
//! and owners, which the attributes pass through. What it cannot see are the directories above
//! the backing directory: a user who may not traverse them must not reach the backing tree
//! through the mount (DataWarp's hole). Every request from a user other than the mount's owner
//! and root is checked against them first.

use std::collections::HashMap;

use indexmap::IndexMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use fuser::{
    BackingId, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, TimeOrNow, WriteFlags,
};

use crate::core::{Attr, FsCache, Handle, libc_mode, lock};

/// The attribute names `pliant fs` uses.
pub const CONTROL_PREFIX: &str = "pliant.";

/// Answers kept for a later call of the same process (size probes, `setxattr` results). Any
/// user who may read a file can ask, so they are bounded: past this, the oldest go (a process
/// that lost its answer asks again).
const KEPT_ANSWERS: usize = 256;

/// Keeps `v` under `k` in `map`, dropping the oldest answers past [`KEPT_ANSWERS`].
fn keep<K: std::hash::Hash + Eq, V>(map: &mut IndexMap<K, V>, k: K, v: V) {
    map.insert(k, v);
    while map.len() > KEPT_ANSWERS {
        map.shift_remove_index(0);
    }
}

/// How long the kernel may trust attributes and names. Short: the backing directory can change
/// behind the cache's back, and revalidation on open is only as good as the attributes it sees.
const TTL: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
struct Inodes {
    paths: HashMap<u64, (PathBuf, u64)>,
    by_path: HashMap<PathBuf, u64>,
    next: u64,
}

impl Inodes {
    fn path(&self, ino: INodeNo) -> Option<PathBuf> {
        if ino.0 == 1 {
            return Some(PathBuf::new());
        }
        self.paths.get(&ino.0).map(|(p, _)| p.clone())
    }

    /// The inode number of `path`, counting one more kernel reference.
    fn lookup(&mut self, path: &Path) -> u64 {
        if path.as_os_str().is_empty() {
            return 1;
        }
        if let Some(&ino) = self.by_path.get(path) {
            if let Some(e) = self.paths.get_mut(&ino) {
                e.1 += 1;
            }
            return ino;
        }
        // Numbers are never reused in a mount: the kernel may still hold a forgotten one.
        self.next = self.next.max(1) + 1;
        let ino = self.next;
        self.paths.insert(ino, (path.to_path_buf(), 1));
        self.by_path.insert(path.to_path_buf(), ino);
        ino
    }

    fn forget(&mut self, ino: u64, n: u64) {
        if let Some(e) = self.paths.get_mut(&ino) {
            e.1 = e.1.saturating_sub(n);
            if e.1 == 0 {
                let (p, _) = self.paths.remove(&ino).unwrap_or_default();
                if self.by_path.get(&p) == Some(&ino) {
                    self.by_path.remove(&p);
                }
            }
        }
    }

    fn renamed(&mut self, from: &Path, to: &Path, exchange: bool) {
        let swap = |base: &Path, rest: &Path| {
            if rest.as_os_str().is_empty() {
                base.to_path_buf()
            } else {
                base.join(rest)
            }
        };
        if !exchange && let Some(ino) = self.by_path.remove(to) {
            // The replaced file keeps its number for the kernel, under no name.
            if let Some(e) = self.paths.get_mut(&ino) {
                e.0 = PathBuf::from(format!("\0replaced-{ino}"));
            }
        }
        let moved: Vec<(PathBuf, u64)> = self
            .by_path
            .iter()
            .filter(|(p, _)| p.starts_with(from) || (exchange && p.starts_with(to)))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        for (p, _) in &moved {
            self.by_path.remove(p);
        }
        for (p, ino) in moved {
            let new = match (p.strip_prefix(from), p.strip_prefix(to)) {
                (Ok(rest), _) => swap(to, rest),
                (_, Ok(rest)) => swap(from, rest),
                _ => continue,
            };
            if let Some(e) = self.paths.get_mut(&ino) {
                e.0 = new.clone();
            }
            self.by_path.insert(new, ino);
        }
    }
}

/// Who may use the mount beyond its owner.
#[derive(Debug, Clone)]
pub struct Access {
    /// The daemon's user: always allowed.
    pub owner: u32,
    /// The directories above the backing directory: `(mode, uid, gid)` of each.
    pub ancestors: Vec<(u32, u32, u32)>,
    /// Files created for other users get their owner (only meaningful run as root).
    pub chown_new: bool,
}

impl Access {
    /// Reads the modes of the backing directory's ancestors.
    pub fn for_backing(backing: &Path, chown_new: bool) -> std::io::Result<Self> {
        let mut ancestors = Vec::new();
        let mut p = backing.parent();
        while let Some(dir) = p {
            let m = std::fs::metadata(dir)?;
            ancestors.push((m.mode(), m.uid(), m.gid()));
            p = dir.parent();
        }
        Ok(Self {
            owner: nix::unistd::getuid().as_raw(),
            ancestors,
            chown_new,
        })
    }

    fn may_traverse(&self, uid: u32, gid: u32, groups: &[u32]) -> bool {
        uid == 0
            || uid == self.owner
            || self.ancestors.iter().all(|&(mode, ouid, ogid)| {
                if uid == ouid {
                    mode & 0o100 != 0
                } else if gid == ogid || groups.contains(&ogid) {
                    mode & 0o010 != 0
                } else {
                    mode & 0o001 != 0
                }
            })
    }
}

/// A directory's entries as readdir pages through them: inode number, type, name.
type Listing = Vec<(u64, FileType, OsString)>;

/// How an open file handle reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Through the daemon, with the kernel's page cache.
    Cached,
    /// Kernel passthrough to the cache file; the file's extents are pinned.
    Passthrough,
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
pub(crate) fn reply_statfs(s: std::io::Result<nix::sys::statvfs::Statvfs>, reply: ReplyStatfs) {
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

/// Supplementary groups of a process, from `/proc/PID/status`.
fn groups_of(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("Groups:").map(|g| {
                    g.split_whitespace()
                        .filter_map(|x| x.parse().ok())
                        .collect()
                })
            })
        })
        .unwrap_or_default()
}

/// The FUSE file system over a [`FsCache`].
pub struct PliantFuse {
    core: Arc<FsCache>,
    inodes: Mutex<Inodes>,
    handles: Mutex<HashMap<u64, Handle>>,
    next_fh: AtomicU64,
    access: Access,
    traversal: Mutex<HashMap<(u32, u32), bool>>,
    /// Answers of control verbs asked for their size first, by (pid, inode, name).
    pending: Mutex<IndexMap<(u32, u64, OsString), Vec<u8>>>,
    /// Set by the owner's `discard` verb: the unmount drops dirty data.
    pub discard: Arc<AtomicBool>,
    /// Answers of the owner's `setxattr` verbs, by the asking process.
    results: Mutex<IndexMap<u32, (bool, String)>>,
    /// Directory listings of open directories, by handle.
    listings: Mutex<HashMap<u64, Listing>>,
    /// Asked for: use kernel passthrough for reads of fully cached files.
    want_passthrough: bool,
    /// The kernel agreed (set at init).
    passthrough: AtomicBool,
    pt: Mutex<Passthrough>,
    /// Where the Prometheus endpoint listens (`stats` reports it: `--metrics …:0` picks a port).
    metrics: Option<String>,
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

fn file_type(mode: u32) -> FileType {
    match mode & libc_mode::S_IFMT {
        libc_mode::S_IFDIR => FileType::Directory,
        libc_mode::S_IFLNK => FileType::Symlink,
        0o020_000 => FileType::CharDevice,
        0o060_000 => FileType::BlockDevice,
        0o010_000 => FileType::NamedPipe,
        0o140_000 => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

pub(crate) fn fattr(ino: u64, a: &Attr) -> FileAttr {
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
            core,
            inodes: Mutex::new(Inodes::default()),
            handles: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            access,
            traversal: Mutex::new(HashMap::new()),
            pending: Mutex::new(IndexMap::new()),
            discard: Arc::new(AtomicBool::new(false)),
            results: Mutex::new(IndexMap::new()),
            listings: Mutex::new(HashMap::new()),
            want_passthrough: false,
            passthrough: AtomicBool::new(false),
            pt: Mutex::new(Passthrough::default()),
            metrics: None,
        }
    }

    /// The address the Prometheus endpoint was bound to, reported by `stats`.
    pub fn with_metrics(mut self, addr: Option<std::net::SocketAddr>) -> Self {
        self.metrics = addr.map(|a| a.to_string());
        self
    }

    /// Reads of files whose extents are all cached go from the kernel to the cache file
    /// without the daemon (FUSE passthrough, Linux 6.9+, needs CAP_SYS_ADMIN); when the kernel
    /// or the privileges say no, everything goes through the daemon as before.
    pub fn with_passthrough(mut self, on: bool) -> Self {
        self.want_passthrough = on;
        self
    }

    /// Opens `h` as the kernel should see it: in passthrough when it can be, else cached.
    fn reply_open(&self, ino: INodeNo, h: Handle, read_only: bool, reply: ReplyOpen) {
        let fh = self.next_fh.fetch_add(1, Relaxed);
        if self.passthrough.load(Relaxed) {
            let mut pt = lock(&self.pt);
            let Passthrough { inodes, handles } = &mut *pt;
            let node = inodes.entry(ino.0).or_default();
            if read_only && node.cached == 0 {
                match self.core.passthrough_file(&h) {
                    Ok(Some(file)) => {
                        let id = match node.id.upgrade() {
                            Some(id) => Ok(id),
                            None => reply.open_backing(&*file).map(Arc::new),
                        };
                        match id {
                            Ok(id) => {
                                node.id = Arc::downgrade(&id);
                                node.passthrough += 1;
                                handles.insert(fh, (ino.0, Mode::Passthrough, Some(id.clone())));
                                lock(&self.handles).insert(fh, h);
                                return reply.opened_passthrough(
                                    FileHandle(fh),
                                    FopenFlags::empty(),
                                    &id,
                                );
                            }
                            Err(e) => {
                                self.core.unpin(&h);
                                self.passthrough.store(false, Relaxed);
                                tracing::warn!(error = %e, "FUSE passthrough refused; reads go through the daemon");
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
                self.core.pin(&h);
                handles.insert(fh, (ino.0, Mode::DirectBesidePassthrough, Some(id.clone())));
                lock(&self.handles).insert(fh, h);
                return reply.opened_passthrough(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO, &id);
            }
            node.cached += 1;
            handles.insert(fh, (ino.0, Mode::Cached, None));
        }
        lock(&self.handles).insert(fh, h);
        reply.opened(FileHandle(fh), FopenFlags::empty());
    }

    fn guard(&self, req: &Request) -> Result<(), Errno> {
        let (uid, gid) = (req.uid(), req.gid());
        if uid == 0 || uid == self.access.owner {
            return Ok(());
        }
        let mut t = lock(&self.traversal);
        let ok = *t
            .entry((uid, gid))
            .or_insert_with(|| self.access.may_traverse(uid, gid, &groups_of(req.pid())));
        if ok { Ok(()) } else { Err(Errno::EACCES) }
    }

    fn path(&self, ino: INodeNo) -> Result<PathBuf, Errno> {
        lock(&self.inodes).path(ino).ok_or(Errno::ENOENT)
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        if name.as_bytes().contains(&b'/') || name == ".." || name == "." {
            return Err(Errno::EINVAL);
        }
        Ok(self.path(parent)?.join(name))
    }

    fn owner(&self, req: &Request) -> Option<(u32, u32)> {
        self.access.chown_new.then(|| (req.uid(), req.gid()))
    }

    fn entry(&self, path: &Path, reply: ReplyEntry) {
        match self.core.getattr(path) {
            Ok(a) => {
                let ino = lock(&self.inodes).lookup(path);
                reply.entry(&TTL, &fattr(ino, &a), Generation(0));
            }
            Err(e) => reply.error(err(e)),
        }
    }

    fn handle(&self, fh: FileHandle) -> Result<Handle, Errno> {
        lock(&self.handles).get(&fh.0).cloned().ok_or(Errno::EBADF)
    }

    /// `.`, `..` and the backing directory's entries, with the inode numbers the kernel knows.
    fn listing(&self, ino: INodeNo) -> Result<Listing, Errno> {
        let path = self.path(ino)?;
        let list = self.core.readdir(&path).map_err(err)?;
        let parent_ino = {
            let inodes = lock(&self.inodes);
            path.parent()
                .and_then(|pp| inodes.by_path.get(pp).copied())
                .unwrap_or(1)
        };
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
                    .by_path
                    .get(&child)
                    .copied()
                    .unwrap_or(u64::MAX / 2 + all.len() as u64);
                all.push((n, file_type(e.kind), e.name));
            }
        }
        Ok(all)
    }

    /// The owner's verbs. `setxattr(MOUNT, "pliant.policy.evict"|"pliant.policy.writeback",
    /// {"name", "code", "params": ["k=v", …]})` swaps a policy; `"pliant.policy.rollback"`
    /// with `evict` or `writeback` rolls one back; `"pliant.flush"` starts a flush (the answer
    /// names its number, done once `stats` shows `flush_done` there); `"pliant.discard"` has
    /// the unmount drop dirty data. The answer waits under `pliant.result`.
    fn control_set(&self, verb: &str, value: &[u8]) -> Result<String, String> {
        use crate::policy::Trigger;
        match verb {
            "flush" => {
                return self
                    .core
                    .request_flush()
                    .map(|n| format!("flush {n} started"))
                    .map_err(|e| format!("starting a flush: {e}"));
            }
            "discard" => {
                self.discard.store(true, Relaxed);
                return Ok("dirty data is dropped at the unmount".into());
            }
            _ => {}
        }
        if verb == "policy.rollback" {
            let which: Trigger = String::from_utf8_lossy(value).trim().parse()?;
            return self.core.rollback_policy(which);
        }
        match verb.strip_prefix("policy.").map(str::parse::<Trigger>) {
            Some(Ok(which)) => {
                #[derive(serde::Deserialize)]
                struct Load {
                    name: String,
                    code: String,
                    params: Option<Vec<String>>,
                }
                let l: Load = serde_json::from_slice(value).map_err(|e| format!("{verb}: {e}"))?;
                let params = l.params.map(|ps| {
                    ps.iter()
                        .filter_map(|p| p.split_once('='))
                        .map(|(k, v)| (k.to_string(), pliant_policy::ParamValue::parse(v)))
                        .collect()
                });
                let source = pliant_policy::PolicySource::functions(l.name, l.code);
                self.core.load_policy(which, source, params)
            }
            _ => Err(format!("{CONTROL_PREFIX}{verb}: no such control")),
        }
    }

    /// Who asks, for the checks the kernel cannot make.
    fn caller(req: &Request) -> crate::core::Caller {
        crate::core::Caller {
            uid: req.uid(),
            gid: req.gid(),
            groups: groups_of(req.pid()),
        }
    }

    /// `create` without `O_EXCL` of a name that someone else made in the backing directory
    /// after the kernel looked it up: an open of that file, whose permissions the kernel did
    /// not check (it checked only the directory's). Checked here against the caller; the file
    /// stays its owner's.
    fn open_appeared(&self, req: &Request, p: &Path, flags: i32) -> Result<Handle, Errno> {
        use crate::core::want;
        let a = self.core.getattr(p).map_err(err)?;
        let mut wanted = match flags & nix::libc::O_ACCMODE {
            nix::libc::O_RDONLY => want::READ,
            nix::libc::O_WRONLY => want::WRITE,
            _ => want::READ | want::WRITE,
        };
        if flags & nix::libc::O_TRUNC != 0 {
            wanted |= want::WRITE;
        }
        if !Self::caller(req).may(a.mode, a.uid, a.gid, wanted) {
            return Err(Errno::EACCES);
        }
        let h = self.core.open(p).map_err(err)?;
        if flags & nix::libc::O_TRUNC != 0
            && let Err(e) = self.core.truncate(p, 0)
        {
            self.core.release(h);
            return Err(err(e));
        }
        Ok(h)
    }

    /// The verbs of `getxattr`: none changes anything the caller could not change itself.
    fn control(&self, path: &Path, verb: &str, req: &Request) -> Result<Vec<u8>, Errno> {
        let json = |v: serde_json::Result<Vec<u8>>| v.map_err(|_| Errno::EIO);
        let caller = || Self::caller(req);
        let pid = req.pid();
        match verb {
            "stats" => {
                let mut s = self.core.stats();
                s.metrics_addr.clone_from(&self.metrics);
                json(serde_json::to_vec(&s))
            }
            "preload" => json(serde_json::to_vec(
                &self.core.preload(path, &caller()).map_err(err)?,
            )),
            "evict" => json(serde_json::to_vec(
                &self.core.evict(path, &caller()).map_err(err)?,
            )),
            "writeback" => json(serde_json::to_vec(
                &self.core.writeback(path, &caller()).map_err(err)?,
            )),
            "invalidate" => json(serde_json::to_vec(
                &self.core.invalidate(path, &caller()).map_err(err)?,
            )),
            "result" => {
                let (ok, message) = lock(&self.results)
                    .shift_remove(&pid)
                    .unwrap_or((false, "nothing was asked by this process".into()));
                json(serde_json::to_vec(
                    &serde_json::json!({"ok": ok, "message": message}),
                ))
            }
            _ => Err(Errno::ENODATA),
        }
    }
}

impl Filesystem for PliantFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // One request per extent where the kernel allows it.
        let _ = config.set_max_write(1 << 20);
        let _ = config.set_max_readahead(1 << 20);
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

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let res = self
            .guard(req)
            .and_then(|_| self.path(ino))
            .and_then(|p| self.core.getattr(&p).map_err(err));
        match res {
            Ok(a) => reply.attr(&TTL, &fattr(ino.0, &a)),
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
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let res = (|| {
            self.guard(req)?;
            let p = self.path(ino)?;
            if let Some(m) = mode {
                self.core.chmod(&p, m).map_err(err)?;
            }
            if uid.is_some() || gid.is_some() {
                self.core.chown(&p, uid, gid).map_err(err)?;
            }
            if let Some(s) = size {
                self.core.truncate(&p, s).map_err(err)?;
            }
            if atime.is_some() || mtime.is_some() {
                self.core
                    .set_times(&p, atime.map(time), mtime.map(time))
                    .map_err(err)?;
            }
            self.core.getattr(&p).map_err(err)
        })();
        match res {
            Ok(a) => reply.attr(&TTL, &fattr(ino.0, &a)),
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
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if mode & libc_mode::S_IFMT != libc_mode::S_IFREG {
            // Devices, fifos and sockets have no data to cache and no place in a job's output.
            return reply.error(Errno::EPERM);
        }
        let res = self
            .guard(req)
            .and_then(|_| self.child(parent, name))
            .and_then(|p| {
                let h = self
                    .core
                    .create(&p, mode & !umask & 0o7777, self.owner(req));
                h.map(|h| self.core.release(h)).map_err(err).map(|_| p)
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
            .and_then(|p| self.core.unlink(&p).map_err(err));
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let res = self
            .guard(req)
            .and_then(|_| self.child(parent, name))
            .and_then(|p| self.core.rmdir(&p).map_err(err));
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
        _req: &Request,
        _ino: INodeNo,
        _newparent: INodeNo,
        _newname: &OsStr,
        reply: ReplyEntry,
    ) {
        // The cache keys data by path; two names for one file would be two caches of it.
        reply.error(Errno::EPERM);
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let res = self
            .guard(req)
            .and_then(|_| self.path(ino))
            .and_then(|p| self.core.open(&p).map_err(err));
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
        match self
            .handle(fh)
            .and_then(|h| self.core.read(&h, offset, size).map_err(err))
        {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self
            .handle(fh)
            .and_then(|h| self.core.write(&h, offset, data).map_err(err))
        {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
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
        let h = lock(&self.handles).remove(&fh.0);
        if let Some(h) = h {
            let mut pt = lock(&self.pt);
            if let Some((ino, mode, _id)) = pt.handles.remove(&fh.0)
                && let Some(node) = pt.inodes.get_mut(&ino)
            {
                match mode {
                    Mode::Cached => node.cached = node.cached.saturating_sub(1),
                    Mode::Passthrough => {
                        node.passthrough = node.passthrough.saturating_sub(1);
                        self.core.unpin(&h);
                    }
                    Mode::DirectBesidePassthrough => {
                        node.passthrough = node.passthrough.saturating_sub(1);
                        self.core.unpin(&h);
                    }
                }
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
            // These verbs change the mount for everyone: its owner's (or root's) call.
            if req.uid() != 0 && req.uid() != self.access.owner {
                return reply.error(Errno::EPERM);
            }
            let result = self.control_set(&String::from_utf8_lossy(verb), value);
            let ok = result.is_ok();
            let message = result.unwrap_or_else(|e| e);
            keep(&mut lock(&self.results), req.pid(), (ok, message));
            return if ok {
                reply.ok()
            } else {
                reply.error(Errno::EINVAL)
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
                let key = (req.pid(), ino.0, name.to_os_string());
                if size > 0
                    && let Some(v) = lock(&self.pending).shift_remove(&key)
                {
                    return Ok(v);
                }
                let v = self.control(&p, &String::from_utf8_lossy(verb), req)?;
                if size == 0 {
                    keep(&mut lock(&self.pending), key, v.clone());
                }
                return Ok(v);
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
                let ino = lock(&self.inodes).lookup(&p);
                let fh = self.next_fh.fetch_add(1, Relaxed);
                lock(&self.handles).insert(fh, h);
                if self.passthrough.load(Relaxed) {
                    let mut pt = lock(&self.pt);
                    pt.inodes.entry(ino).or_default().cached += 1;
                    pt.handles.insert(fh, (ino, Mode::Cached, None));
                }
                reply.created(
                    &TTL,
                    &fattr(ino, &a),
                    Generation(0),
                    FileHandle(fh),
                    FopenFlags::empty(),
                );
            }
            Err(e) => reply.error(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{IndexMap, KEPT_ANSWERS, keep};

    #[test]
    fn kept_answers_are_bounded_and_the_oldest_go_first() {
        let mut m = IndexMap::new();
        for i in 0..KEPT_ANSWERS as u32 + 10 {
            keep(&mut m, i, i * 10);
        }
        assert_eq!(m.len(), KEPT_ANSWERS);
        assert_eq!(m.get(&9), None);
        assert_eq!(m.get(&10), Some(&100));
        keep(&mut m, 10, 1);
        keep(&mut m, 1_000_000, 0);
        assert_eq!(m.len(), KEPT_ANSWERS);
        assert_eq!(
            m.get(&10),
            None,
            "a key set again keeps its place, the oldest"
        );
    }
}
