//! `pliant-slowfs`: a slow file system for benchmarks (`pliant bench slow-fs`): a FUSE
//! passthrough over a directory whose data requests each take `bytes / stream_rate` seconds, so
//! that one stream of I/O moves at most `stream_rate` bytes/s while concurrent streams add up,
//! as on a parallel file system where one client stream is limited by its stripe and its round
//! trips (DataWarp's figure 11: more write-back threads, more throughput). It stands in for
//! Lustre in `tools/bench/fs_fio.sh` and `tools/bench/store_miss_p99.sh`; it is not a product
//! feature, hence a crate of its own beside `pliant-fs`. Metadata requests are passed through
//! without delay.
//!
//! Dependencies: `pliant-fs` (its inode table, and its conversion of attributes, so that both
//! file systems show a file alike), `fuser` (the protocol), `nix` (`statvfs`, signals).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use pliant_fs::core::{Attr, Inodes};
use pliant_fs::fuse::{fattr, reply_statfs};

// A panic in one FUSE request must not take the whole mount down with poisoned locks.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

const TTL: Duration = Duration::from_secs(1);

/// The slow passthrough.
#[derive(Debug)]
pub struct SlowFs {
    root: PathBuf,
    stream_rate: f64,
    /// Paths relative to `root`.
    inodes: Mutex<Inodes>,
    files: Mutex<HashMap<u64, std::sync::Arc<File>>>,
    next_fh: AtomicU64,
}

fn err(e: std::io::Error) -> Errno {
    Errno::from(e)
}

/// The cache's own conversion, so both file systems show a file alike.
fn attr(ino: u64, m: &std::fs::Metadata) -> FileAttr {
    fattr(ino, &Attr::from_meta(m))
}

impl SlowFs {
    /// Serves `root`, each data request taking `bytes / stream_rate` seconds.
    pub fn new(root: PathBuf, stream_rate: f64) -> Self {
        Self {
            root,
            stream_rate,
            inodes: Mutex::new(Inodes::default()),
            files: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
        }
    }

    fn path(&self, ino: INodeNo) -> Result<PathBuf, Errno> {
        let rel = lock(&self.inodes).path(ino.0).ok_or(Errno::ENOENT)?;
        Ok(self.root.join(rel))
    }

    fn rel<'a>(&self, p: &'a Path) -> &'a Path {
        p.strip_prefix(&self.root).unwrap_or(p)
    }

    fn ino(&self, p: &Path) -> u64 {
        lock(&self.inodes).lookup(self.rel(p))
    }

    fn delay(&self, bytes: usize) {
        std::thread::sleep(Duration::from_secs_f64(bytes as f64 / self.stream_rate));
    }

    fn entry(&self, p: PathBuf, reply: ReplyEntry) {
        match std::fs::symlink_metadata(&p) {
            Ok(m) => reply.entry(&TTL, &attr(self.ino(&p), &m), Generation(0)),
            Err(e) => reply.error(err(e)),
        }
    }

    fn file(&self, fh: FileHandle) -> Result<std::sync::Arc<File>, Errno> {
        lock(&self.files).get(&fh.0).cloned().ok_or(Errno::EBADF)
    }
}

/// No page cache, and writes inside a file may run at once, as a parallel file system's client
/// writes stripes in parallel: what limits a stream is the stream rate, not the kernel's lock.
fn parallel() -> FopenFlags {
    FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES
}

impl Filesystem for SlowFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.path(parent) {
            Ok(p) => self.entry(p.join(name), reply),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self
            .path(ino)
            .and_then(|p| std::fs::symlink_metadata(p).map_err(err))
        {
            Ok(m) => reply.attr(&TTL, &attr(ino.0, &m)),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let res = self.path(ino).and_then(|p| {
            if let Some(m) = mode {
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(m & 0o7777))
                    .map_err(err)?;
            }
            if let Some(s) = size {
                OpenOptions::new()
                    .write(true)
                    .open(&p)
                    .and_then(|f| f.set_len(s))
                    .map_err(err)?;
            }
            std::fs::symlink_metadata(&p).map_err(err)
        });
        match res {
            Ok(m) => reply.attr(&TTL, &attr(ino.0, &m)),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let res = self.path(parent).map(|p| p.join(name)).and_then(|p| {
            std::fs::DirBuilder::new()
                .mode(mode & !umask)
                .create(&p)
                .map_err(err)
                .map(|_| p)
        });
        match res {
            Ok(p) => self.entry(p, reply),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self
            .path(parent)
            .and_then(|p| std::fs::remove_file(p.join(name)).map_err(err))
        {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self
            .path(parent)
            .and_then(|p| std::fs::remove_dir(p.join(name)).map_err(err))
        {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        _flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let res = (|| {
            let from = self.path(parent)?.join(name);
            let to = self.path(newparent)?.join(newname);
            std::fs::rename(&from, &to).map_err(err)?;
            lock(&self.inodes).renamed(self.rel(&from), self.rel(&to), false);
            Ok(())
        })();
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let write = !matches!(flags.acc_mode(), fuser::OpenAccMode::O_RDONLY);
        let res = self.path(ino).and_then(|p| {
            OpenOptions::new()
                .read(true)
                .write(write)
                .open(p)
                .map_err(err)
        });
        match res {
            Ok(f) => {
                let fh = self.next_fh.fetch_add(1, Relaxed);
                lock(&self.files).insert(fh, std::sync::Arc::new(f));
                reply.opened(FileHandle(fh), parallel());
            }
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let res = self.path(parent).map(|p| p.join(name)).and_then(|p| {
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(mode & !umask)
                .open(&p)
                .map_err(err)?;
            let m = f.metadata().map_err(err)?;
            Ok((p, f, m))
        });
        match res {
            Ok((p, f, m)) => {
                let fh = self.next_fh.fetch_add(1, Relaxed);
                lock(&self.files).insert(fh, std::sync::Arc::new(f));
                reply.created(
                    &TTL,
                    &attr(self.ino(&p), &m),
                    Generation(0),
                    FileHandle(fh),
                    parallel(),
                );
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
        let res = self.file(fh).and_then(|f| {
            let mut buf = vec![0u8; size as usize];
            let mut n = 0;
            while n < buf.len() {
                match f.read_at(&mut buf[n..], offset + n as u64) {
                    Ok(0) => break,
                    Ok(k) => n += k,
                    Err(e) => return Err(err(e)),
                }
            }
            buf.truncate(n);
            Ok(buf)
        });
        match res {
            Ok(buf) => {
                self.delay(buf.len());
                reply.data(&buf)
            }
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
        self.delay(data.len());
        match self
            .file(fh)
            .and_then(|f| f.write_all_at(data, offset).map_err(err))
        {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lo: LockOwner,
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
        lock(&self.files).remove(&fh.0);
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
        match self.file(fh).and_then(|f| f.sync_all().map_err(err)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let p = match self.path(ino) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        let list = match std::fs::read_dir(&p) {
            Ok(l) => l,
            Err(e) => return reply.error(err(e)),
        };
        let mut all = vec![
            (ino.0, FileType::Directory, ".".into()),
            (1, FileType::Directory, "..".into()),
        ];
        for e in list.flatten() {
            let kind = match e.file_type() {
                Ok(t) if t.is_dir() => FileType::Directory,
                Ok(t) if t.is_symlink() => FileType::Symlink,
                _ => FileType::RegularFile,
            };
            all.push((self.ino(&p.join(e.file_name())), kind, e.file_name()));
        }
        for (i, (n, kind, name)) in all.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(n), (i + 1) as u64, kind, &name) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = nix::sys::statvfs::statvfs(&self.root)
            .map_err(|e| std::io::Error::from_raw_os_error(e as i32));
        reply_statfs(s, reply);
    }
}

/// Mounts `root` slowed down at `mountpoint` and serves until unmounted or signalled.
pub fn run(
    root: &Path,
    mountpoint: &Path,
    stream_rate: f64,
    threads: usize,
) -> std::io::Result<()> {
    use nix::sys::signal::{SigSet, Signal};
    let mut signals = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM] {
        signals.add(s);
    }
    let _ = signals.thread_block();
    let mut config = fuser::Config::default();
    config.mount_options = vec![fuser::MountOption::FSName("pliant-slowfs".into())];
    config.n_threads = Some(threads.max(1));
    config.clone_fd = true;
    let mut session = fuser::Session::new(
        SlowFs::new(root.canonicalize()?, stream_rate),
        mountpoint,
        &config,
    )?;
    let mut unmounter = session.unmount_callable();
    std::thread::spawn(move || {
        if signals.wait().is_ok() {
            let _ = unmounter.unmount();
        }
    });
    session.run()
}
