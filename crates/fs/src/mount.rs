//! Running a mount, and reaching a running one: what `pliant fs mount` (the daemon, in the
//! foreground) and the other `pliant fs` commands call.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use crate::clock::SystemClock;
use crate::config::FsConfig;
use crate::core::{Access, CONTROL_PREFIX};
use crate::core::{FsCache, HintReport, OpenError, Recovery};
use crate::fuse::PliantFuse;
use crate::stats::FsStats;

/// How to mount.
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// The cache's settings.
    pub cache: FsConfig,
    /// Where the backing directory appears.
    pub mountpoint: PathBuf,
    /// Let other users in (root only; always with the kernel's permission checks).
    pub allow_other: bool,
    /// Threads reading FUSE requests.
    pub fuse_threads: usize,
    /// Serve reads of fully cached files by kernel passthrough when the kernel and the
    /// privileges allow it (root: CAP_SYS_ADMIN).
    pub passthrough: bool,
    /// Where passthrough is off (not asked for, or not root): let the kernel cache writes and
    /// write them back to the daemon (FUSE's write-back cache; see [`crate::fuse`]). Where it
    /// is on: let the kernel write files the cache holds whole straight into their cache files.
    /// Off, every write goes to the daemon at once.
    pub write_cache: bool,
    /// Opens not in passthrough bypass the kernel's page cache (FUSE `direct_io`): each
    /// `read()` and `write()` is one request to the daemon, a copy fewer for large ones, far
    /// slower for small ones (see [`crate::fuse`]).
    pub direct_io: bool,
    /// Set the kernel's read-ahead for this mount to this many bytes (root only): the size of
    /// the read requests the kernel sends the daemon for reads through its page cache, 128 KiB
    /// by default whatever the daemon asks (the kernel takes the smaller of the two when the
    /// mount starts, and only root may raise it after, in `/sys/class/bdi/…/read_ahead_kb`).
    /// The docs suggest 4 MiB: warm 1 MiB reads through the daemon ran fastest with it on this
    /// project's 2-core VM in two sweeps of 128 KiB to 16 MiB (`fs-read-ahead-32o` in
    /// docs/benchmarks.md: +10% and +19% over the default, 1 MiB +3–5%, 8 MiB +6–8%, 16 MiB
    /// +5–8%), 12–15% faster side by side; four of the largest read requests (1 MiB), one for
    /// each of the daemon's default 4 request threads.
    pub kernel_read_ahead: Option<u64>,
    /// Serve the counters in Prometheus's text format on this address.
    pub metrics: Option<std::net::SocketAddr>,
    /// Allow `metrics` on an address other than loopback: the endpoint has no authentication.
    pub unsafe_no_auth: bool,
    /// A striped mount: file data goes to these cache servers ([`crate::striped`]); the cache
    /// directory then holds only the mount's lock.
    pub striped: Option<crate::striped::ClientOptions>,
}

/// The largest `--kernel-read-ahead` taken: a bound on what one sequential reader makes the
/// kernel read ahead of it, far above where the sweep stopped gaining.
pub const KERNEL_READ_AHEAD_MAX: u64 = 256 << 20;

impl MountOptions {
    /// Checks what can be checked before anything starts (the CLI calls it before it spawns
    /// the daemon, so the error reaches the user rather than the daemon's log).
    pub fn check(&self) -> Result<(), MountError> {
        self.check_as(nix::unistd::geteuid().is_root())
    }

    fn check_as(&self, root: bool) -> Result<(), MountError> {
        if let Some(n) = self.kernel_read_ahead {
            let why = if !root {
                Some(
                    "only root may set a mount's read-ahead (/sys/class/bdi/…/read_ahead_kb); an ordinary user's mount keeps the kernel's 128 KiB unless an administrator raises it (docs/fs.md, \"Faster reads through the daemon\")",
                )
            } else if self.direct_io || self.striped.is_some() {
                Some(
                    "reads of a --direct-io or striped mount bypass the kernel's page cache, so its read-ahead would change nothing",
                )
            } else if n < 4096 || n % 1024 != 0 || n > KERNEL_READ_AHEAD_MAX {
                Some("must be a whole number of KiB from 4 KiB to 256 MiB")
            } else {
                None
            };
            if let Some(why) = why {
                return Err(MountError::KernelReadAhead(n, why));
            }
        }
        if let Some(addr) = self.metrics
            && !addr.ip().is_loopback()
            && !self.unsafe_no_auth
        {
            return Err(MountError::MetricsNotLoopback(addr));
        }
        // Compared as the kernel will resolve them, symbolic links and `..` included: a mount
        // point inside its backing directory shows itself inside itself (b/sub/sub/… for ever,
        // and a `find` or a preload of the top never ends); a backing or cache directory inside
        // the mount point is reached through the mount itself once it is up (the daemon's own
        // I/O would wait on the daemon); a cache directory inside the backing directory puts the
        // extents and journal where every user of the mount sees (and may change) them; a mount
        // point inside the cache directory is removed with it.
        let places = [
            ("backing directory", &self.cache.backing),
            ("mount point", &self.mountpoint),
            ("cache directory", &self.cache.cache_dir),
        ];
        let real: Vec<PathBuf> = places.iter().map(|(_, p)| real_path(p)).collect();
        for (i, (inner, inner_path)) in places.iter().enumerate() {
            for (j, (outer, outer_path)) in places.iter().enumerate() {
                if i != j && real[i].starts_with(&real[j]) {
                    return Err(MountError::Nested {
                        inner,
                        inner_path: inner_path.to_path_buf(),
                        outer,
                        outer_path: outer_path.to_path_buf(),
                        same: real[i] == real[j],
                    });
                }
            }
        }
        Ok(())
    }
}

/// `p` as the kernel resolves it: the real path of its nearest existing ancestor, then the
/// rest as written (the cache directory may not exist yet; a dead mount point cannot be
/// resolved, its parent can).
fn real_path(p: &Path) -> PathBuf {
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(p)
    };
    let mut rest = Vec::new();
    let mut cur = abs.as_path();
    loop {
        if let Ok(mut real) = cur.canonicalize() {
            real.extend(rest.iter().rev());
            return real;
        }
        match (cur.parent(), cur.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                cur = parent;
            }
            _ => return abs,
        }
    }
}

/// True if `path` is the mount point of a FUSE mount whose daemon is gone: the kernel answers
/// every request on it with ENOTCONN until it is detached.
pub fn is_dead_mount(path: &Path) -> bool {
    matches!(
        std::fs::symlink_metadata(path),
        Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ENOTCONN as i32)
    )
}

/// Detaches the mount at `mountpoint` if its daemon is gone (`kill -9`, a crash): lazily, so
/// that processes still inside it get errors rather than hold it. Root detaches it itself;
/// an ordinary user's mount is detached by the setuid helper (`fusermount3 -u -z`). True if
/// there was a dead mount to detach. What the dead daemon's journal holds is written back by
/// the next mount of its cache directory.
pub fn detach_dead(mountpoint: &Path) -> Result<bool, ControlError> {
    if !is_dead_mount(mountpoint) {
        return Ok(false);
    }
    let fail = |message: String| ControlError::Unmount {
        path: mountpoint.to_path_buf(),
        message,
    };
    match nix::mount::umount2(mountpoint, nix::mount::MntFlags::MNT_DETACH) {
        Ok(()) => {}
        Err(nix::errno::Errno::EPERM) => {
            let out = ["fusermount3", "fusermount"].iter().find_map(|bin| {
                std::process::Command::new(bin)
                    .arg("-u")
                    .arg("-z")
                    .arg(mountpoint)
                    .output()
                    .ok()
            });
            match out {
                Some(o) if o.status.success() => {}
                Some(o) => {
                    return Err(fail(format!(
                        "detaching the dead mount: {}",
                        String::from_utf8_lossy(&o.stderr).trim()
                    )));
                }
                None => {
                    return Err(fail(
                        "detaching the dead mount: not root, and no fusermount3 (package fuse3)"
                            .into(),
                    ));
                }
            }
        }
        Err(e) => return Err(fail(format!("detaching the dead mount: {e}"))),
    }
    Ok(true)
}

/// Why a mount failed or ended badly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MountError {
    /// The cache could not start.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// A striped mount's servers could not be reached.
    #[error(transparent)]
    Remote(#[from] crate::striped::RemoteError),
    /// The mount point is not a directory.
    #[error("mount point {0}: not a directory")]
    Mountpoint(PathBuf),
    /// `--metrics` on a non-loopback address without `--unsafe-no-auth`.
    #[error(
        "--metrics {0}: refusing to serve the mount's counters off this machine: the endpoint has no authentication (file names are not in it, but its sizes and rates are). Bind 127.0.0.1, or pass --unsafe-no-auth if a firewall already keeps everyone else out"
    )]
    MetricsNotLoopback(std::net::SocketAddr),
    /// Two of the backing directory, the mount point and the cache directory nested.
    #[error(
        "{inner} {} {} the {outer} {}: the backing directory, the mount point and the cache directory must not contain one another (a mount point inside its backing directory would show itself inside itself for ever; a directory inside the mount point would be reached through the mount)",
        inner_path.display(),
        if *same { "is" } else { "is inside" },
        outer_path.display()
    )]
    Nested {
        /// What is inside.
        inner: &'static str,
        /// Its path as given.
        inner_path: PathBuf,
        /// What it is inside.
        outer: &'static str,
        /// Its path as given.
        outer_path: PathBuf,
        /// The two are the same directory.
        same: bool,
    },
    /// `--kernel-read-ahead` refused.
    #[error("--kernel-read-ahead {0}: {1}")]
    KernelReadAhead(u64, &'static str),
    /// `--allow-other` by an ordinary user.
    #[error("--allow-other: only root may let other users into a mount it serves")]
    AllowOther,
    /// The kernel refused the mount.
    #[error(
        "mounting at {path}: {source} (is /dev/fuse there and usable? an unprivileged mount needs fusermount3 from the fuse3 package)"
    )]
    Mount {
        /// The mount point.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// Something else failed on a path.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
}

/// What a finished mount reports.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MountReport {
    /// What the journal of an earlier crash held.
    pub recovery: Recovery,
    /// The counters at the end.
    pub stats: FsStats,
    /// Dirty data was dropped on request.
    pub discarded: bool,
}

/// What `run_foreground` tells its caller once the mount is up.
#[derive(Debug)]
#[non_exhaustive]
pub struct Ready<'a> {
    /// What the journal of an earlier crash held (written back before the mount).
    pub recovery: &'a Recovery,
    /// A dead mount (its daemon killed) was detached from the mount point first.
    pub detached_dead_mount: bool,
    /// Where `--metrics` listens: the port the system chose for `:0`.
    pub metrics: Option<std::net::SocketAddr>,
}

/// Mounts and serves until unmounted (by `pliant fs unmount`, `umount`, or SIGINT/SIGTERM, which
/// unmount). Then writes every dirty extent back, unless `discard` was asked for.
/// `ready` is called once the mount is up.
pub fn run_foreground(
    opts: &MountOptions,
    ready: impl FnOnce(&Ready),
) -> Result<MountReport, MountError> {
    use nix::sys::signal::{SigSet, Signal};
    // A mount point left by a daemon that died answers ENOTCONN to everything: detached here
    // (the caller has said so), its journal is then replayed below like any crash's.
    let detached = detach_dead(&opts.mountpoint).map_err(|e| MountError::Io {
        path: opts.mountpoint.clone(),
        source: std::io::Error::other(match e {
            ControlError::Unmount { message, .. } => message,
            e => e.to_string(),
        }),
    })?;
    if detached {
        tracing::warn!(mountpoint = %opts.mountpoint.display(), "detached a dead mount (its daemon was gone)");
    }
    opts.check()?;
    if !opts.mountpoint.is_dir() {
        return Err(MountError::Mountpoint(opts.mountpoint.clone()));
    }
    let root = nix::unistd::geteuid().is_root();
    if opts.allow_other && !root {
        return Err(MountError::AllowOther);
    }
    // Signals go to one thread, which unmounts; blocked before any thread starts so that every
    // thread inherits the mask.
    let mut signals = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        signals.add(s);
    }
    let _ = signals.thread_block();
    let (cache, recovery) = FsCache::new(opts.cache.clone(), Arc::new(SystemClock))?;
    if let Some(o) = &opts.striped {
        let remote = crate::striped::Remote::connect(o)?;
        cache
            .set_remote(Arc::new(remote))
            .map_err(|source| MountError::Io {
                path: opts.cache.cache_dir.clone(),
                source,
            })?;
    }
    // The caller's umask is the kernel's to apply (FUSE hands it to the daemon, which takes it
    // off the mode): the daemon's own must not be taken off again. Whatever the daemon makes
    // for itself sits in the cache directory (0700), made above under its umask.
    nix::sys::stat::umask(nix::sys::stat::Mode::empty());
    let backing = cache.config().backing.clone();
    let core = Arc::new(cache);
    let access = Access::for_backing(&backing, opts.allow_other && root).map_err(|source| {
        MountError::Io {
            path: backing.clone(),
            source,
        }
    })?;
    // Bound before the mount, so a port in use fails the mount rather than a mounted daemon;
    // the address it got (`:0` picks one) is reported by `ready` and by `stats`.
    let metrics = match opts.metrics {
        Some(addr) => {
            let listener = std::net::TcpListener::bind(addr).map_err(|source| MountError::Io {
                path: PathBuf::from(format!("--metrics {addr}")),
                source,
            })?;
            let bound = listener.local_addr().map_err(|source| MountError::Io {
                path: PathBuf::from(format!("--metrics {addr}")),
                source,
            })?;
            Some((listener, bound))
        }
        None => None,
    };
    let metrics_addr = metrics.as_ref().map(|(_, a)| *a);
    let mut fs = PliantFuse::new(core.clone(), access)
        .with_passthrough(opts.passthrough && root)
        .with_write_cache(opts.write_cache && !(opts.passthrough && root))
        .with_passthrough_writes(opts.write_cache)
        .with_direct_io(opts.direct_io)
        .with_metrics(metrics_addr);
    if opts.striped.is_some() {
        fs = fs.striped();
    }
    let discard = fs.discard();
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName(format!("pliant:{}", backing.display())),
        fuser::MountOption::Subtype("pliant".into()),
        fuser::MountOption::DefaultPermissions,
        fuser::MountOption::NoDev,
        fuser::MountOption::NoSuid,
    ];
    config.acl = if opts.allow_other {
        fuser::SessionACL::All
    } else {
        fuser::SessionACL::Owner
    };
    config.n_threads = Some(opts.fuse_threads.max(1));
    config.clone_fd = true;
    let mut session =
        fuser::Session::new(fs, &opts.mountpoint, &config).map_err(|source| MountError::Mount {
            path: opts.mountpoint.clone(),
            source,
        })?;
    if let Some(bytes) = opts.kernel_read_ahead {
        let mountpoint = opts.mountpoint.clone();
        std::thread::Builder::new()
            .name("pliant-fs-read-ahead".into())
            .spawn(move || match set_kernel_read_ahead(&mountpoint, bytes) {
                Ok(file) => tracing::info!(file = %file.display(), kib = bytes >> 10, "kernel read-ahead set"),
                Err(e) => tracing::error!(error = %e, "--kernel-read-ahead: not set; reads go on with the kernel's"),
            })
            .map_err(|source| MountError::Io {
                path: PathBuf::from("read-ahead thread"),
                source,
            })?;
    }
    let mut unmounter = session.unmount_callable();
    let mountpoint = opts.mountpoint.clone();
    std::thread::Builder::new()
        .name("pliant-fs-signals".into())
        .spawn(move || {
            while let Ok(sig) = signals.wait() {
                tracing::warn!(signal = ?sig, mountpoint = %mountpoint.display(), "unmounting");
                if let Err(e) = unmounter.unmount() {
                    tracing::error!(error = %e, "unmount failed (files open?); a second signal tries again");
                } else {
                    break;
                }
            }
        })
        .map_err(|source| MountError::Io { path: PathBuf::from("signal thread"), source })?;
    if let Some((listener, _)) = metrics {
        // A weak reference: the unmount must get the cache back to shut it down.
        let core = Arc::downgrade(&core);
        std::thread::Builder::new()
            .name("pliant-fs-metrics".into())
            .spawn(move || serve_metrics(&listener, &core))
            .map_err(|source| MountError::Io {
                path: PathBuf::from("metrics thread"),
                source,
            })?;
    }
    ready(&Ready {
        recovery: &recovery,
        detached_dead_mount: detached,
        metrics: metrics_addr,
    });
    session.run().map_err(|source| MountError::Mount {
        path: opts.mountpoint.clone(),
        source,
    })?;
    let discarded = discard.load(Relaxed);
    let stats = core.stats();
    let mut last = Instant::now();
    let mut progress = |dirty: u64| {
        if last.elapsed() > Duration::from_secs(5) {
            tracing::warn!(dirty_bytes = dirty, "writing back before exit");
            last = Instant::now();
        }
    };
    // A scrape in progress holds the cache for a moment: try for up to 2 s.
    let mut core = core;
    let mut tries = 0;
    let cache = loop {
        match Arc::try_unwrap(core) {
            Ok(cache) => break Ok(cache),
            Err(c) if tries < 100 => {
                core = c;
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(c) => break Err(c),
        }
    };
    match cache {
        Ok(cache) => cache
            .shutdown(discarded, &mut progress)
            .map_err(|source| MountError::Io {
                path: backing.clone(),
                source,
            })?,
        Err(core) => {
            // Something still holds the cache (it should not): its data is written back, and
            // a discard that cannot reset the journal says so.
            if discarded {
                tracing::error!(
                    "could not discard: the journal stays, and the next mount of this cache directory writes its extents back"
                );
            } else {
                core.flush(&mut progress);
            }
        }
    }
    Ok(MountReport {
        recovery,
        stats,
        discarded,
    })
}

/// Sets the read-ahead of the FUSE mount at `mountpoint` to `bytes`; the file it wrote. The
/// mount's `stat` waits until the kernel has the daemon's INIT reply, which sets the read-ahead
/// to the smaller of the kernel's and the daemon's (128 KiB at most: the kernel offers its
/// default and takes no more): a value written before it would be cut back. So this runs on a
/// thread of its own while the session serves the `stat`.
fn set_kernel_read_ahead(mountpoint: &Path, bytes: u64) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    // One open directory for both questions: the device whose read-ahead is set is the one
    // checked to be a FUSE mount, whatever the path names by then.
    let root = std::fs::File::open(mountpoint)?;
    let dev = root.metadata()?.dev();
    if nix::sys::statfs::fstatfs(&root)?.filesystem_type() != nix::sys::statfs::FUSE_SUPER_MAGIC {
        return Err(std::io::Error::other(format!(
            "{} is not a FUSE mount",
            mountpoint.display()
        )));
    }
    let file = PathBuf::from(format!(
        "/sys/class/bdi/{}:{}/read_ahead_kb",
        nix::sys::stat::major(dev),
        nix::sys::stat::minor(dev)
    ));
    let fail =
        |e: std::io::Error| std::io::Error::new(e.kind(), format!("{}: {e}", file.display()));
    std::fs::write(&file, format!("{}\n", bytes >> 10)).map_err(fail)?;
    let now = std::fs::read_to_string(&file).map_err(fail)?;
    if now.trim() != (bytes >> 10).to_string() {
        return Err(std::io::Error::other(format!(
            "{}: wrote {}, reads back {}",
            file.display(),
            bytes >> 10,
            now.trim()
        )));
    }
    Ok(file)
}

/// The counters in Prometheus's text exposition format: every number of [`FsStats`] as a gauge
/// `pliant_fs_<name>`, labelled with the backing directory.
pub fn prometheus(s: &FsStats) -> String {
    let mut out = String::new();
    let label = s.backing.replace('\\', "\\\\").replace('"', "\\\"");
    if let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(s) {
        for (name, v) in fields {
            if let Some(x) = v.as_f64() {
                out.push_str(&format!(
                    "# TYPE pliant_fs_{name} gauge\npliant_fs_{name}{{backing=\"{label}\"}} {x}\n"
                ));
            }
        }
    }
    out
}

fn serve_metrics(listener: &std::net::TcpListener, core: &std::sync::Weak<FsCache>) {
    use std::io::{Read, Write};
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        // One request per connection, read with a bound so a silent client cannot hold it.
        let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
        let mut buf = [0u8; 1024];
        let _ = conn.read(&mut buf);
        let Some(core) = core.upgrade() else { return };
        let body = prometheus(&core.stats());
        drop(core);
        let _ = write!(
            conn,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
    }
}

/// Why a running mount could not be reached.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// The path is not inside a Pliant mount.
    #[error("{0}: not inside a pliant fs mount")]
    NotPliant(PathBuf),
    /// The mount answered with an error.
    #[error("{path}: {verb}: {source}")]
    Failed {
        /// The path.
        path: PathBuf,
        /// The verb.
        verb: String,
        /// What failed.
        source: std::io::Error,
    },
    /// The mount's daemon had died (`kill -9`, a crash): the dead mount was detached, but
    /// nothing could be written back.
    #[error(
        "{0}: the mount's daemon had died, so nothing could be written back; the dead mount was detached. What it had fsync'd is in its cache directory's journal: mount it again with the same --cache-dir to write that back (or remove the cache directory to drop it)"
    )]
    Dead(PathBuf),
    /// Unmounting failed.
    #[error("unmounting {path}: {message}")]
    Unmount {
        /// The mount point.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
}

fn verb(path: &Path, verb: &str) -> Result<Vec<u8>, ControlError> {
    verb_as(path, false, path, verb)
}

/// [`verb`] through `via`, following it if it is a link (`/proc/self/fd/N`, whose link is the
/// descriptor's file), errors naming `path`.
fn verb_as(via: &Path, deref: bool, path: &Path, verb: &str) -> Result<Vec<u8>, ControlError> {
    let name = format!("{CONTROL_PREFIX}{verb}");
    let got = if deref {
        xattr::get_deref(via, &name)
    } else {
        xattr::get(via, &name)
    };
    match got {
        Ok(Some(v)) => Ok(v),
        Ok(None) => Err(ControlError::NotPliant(path.to_path_buf())),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(c) if c == nix::errno::Errno::ENOTSUP as i32
                    || c == nix::errno::Errno::ENODATA as i32
            ) =>
        {
            Err(ControlError::NotPliant(path.to_path_buf()))
        }
        Err(source) => Err(ControlError::Failed {
            path: path.to_path_buf(),
            verb: verb.into(),
            source,
        }),
    }
}

fn json<T: serde::de::DeserializeOwned>(
    path: &Path,
    v: &str,
    bytes: &[u8],
) -> Result<T, ControlError> {
    serde_json::from_slice(bytes).map_err(|e| ControlError::Failed {
        path: path.to_path_buf(),
        verb: v.into(),
        source: std::io::Error::other(e),
    })
}

/// The counters of the mount `path` is in.
pub fn stats(path: &Path) -> Result<FsStats, ControlError> {
    json(path, "stats", &verb(path, "stats")?)
}

/// The hints: `preload`, `evict`, `writeback`, `invalidate` on the files at or under `path`.
pub fn hint(path: &Path, kind: Hint) -> Result<HintReport, ControlError> {
    let v = kind.verb();
    json(path, v, &verb(path, v)?)
}

/// [`hint`] on the file `fd` holds (an `O_PATH` descriptor will do), reached through
/// `/proc/self/fd/N`, which names that very file and is not resolved again from a path someone
/// else could change; errors name `path`.
pub fn hint_fd(
    fd: &impl std::os::fd::AsRawFd,
    path: &Path,
    kind: Hint,
) -> Result<HintReport, ControlError> {
    let v = kind.verb();
    let via = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    json(path, v, &verb_as(&via, true, path, v)?)
}

/// Swaps the policy deciding `which` on a running mount: `name` and function-style Lua
/// `code` (read by the caller; the daemon opens no file a client names), with new `params`
/// (`k=v`) if any. Returns the new version, or the reason it was refused.
pub fn load_policy(
    mountpoint: &Path,
    which: crate::policy::Trigger,
    name: &str,
    code: &str,
    params: Option<Vec<String>>,
) -> Result<String, ControlError> {
    let value = serde_json::json!({"name": name, "code": code, "params": params});
    set_verb(
        mountpoint,
        &format!("policy.{}", which.as_str()),
        value.to_string().as_bytes(),
    )
}

/// Goes back to the policy that decided `which` before the last swap.
pub fn rollback_policy(
    mountpoint: &Path,
    which: crate::policy::Trigger,
) -> Result<String, ControlError> {
    set_verb(mountpoint, "policy.rollback", which.as_str().as_bytes())
}

fn set_verb(path: &Path, v: &str, value: &[u8]) -> Result<String, ControlError> {
    let set = xattr::set(path, format!("{CONTROL_PREFIX}{v}"), value);
    #[derive(serde::Deserialize)]
    struct Answer {
        ok: bool,
        message: String,
    }
    match set {
        Err(e) if e.raw_os_error() == Some(nix::errno::Errno::EPERM as i32) => {
            return Err(ControlError::Failed {
                path: path.to_path_buf(),
                verb: v.into(),
                source: std::io::Error::other(format!(
                    "only the mount's owner or root may use {CONTROL_PREFIX}{v}: it changes the mount for every user"
                )),
            });
        }
        Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ENOTSUP as i32) => {
            return Err(ControlError::NotPliant(path.to_path_buf()));
        }
        // EINVAL: the daemon refused; its reason waits under `result`.
        Err(e) if e.raw_os_error() != Some(nix::errno::Errno::EINVAL as i32) => {
            return Err(ControlError::Failed {
                path: path.to_path_buf(),
                verb: v.into(),
                source: e,
            });
        }
        _ => {}
    }
    let a: Answer = json(path, v, &verb(path, "result")?)?;
    if a.ok {
        Ok(a.message)
    } else {
        Err(ControlError::Failed {
            path: path.to_path_buf(),
            verb: v.into(),
            source: std::io::Error::other(a.message),
        })
    }
}

/// A hint's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hint {
    /// Copy into the cache.
    Preload,
    /// Write back and drop from the cache.
    Evict,
    /// Write back and sync in the backing directory.
    Writeback,
    /// Drop clean cached data (the backing copy changed).
    Invalidate,
}

impl Hint {
    fn verb(self) -> &'static str {
        match self {
            Self::Preload => "preload",
            Self::Evict => "evict",
            Self::Writeback => "writeback",
            Self::Invalidate => "invalidate",
        }
    }
}

/// What an unmount did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct UnmountReport {
    /// Bytes dirty when the unmount began.
    pub dirty_bytes_at_start: u64,
    /// Seconds spent writing back.
    pub flush_secs: f64,
    /// Dirty data was dropped (`--discard`).
    pub discarded: bool,
    /// The counters just before the unmount.
    pub stats: FsStats,
}

/// Unmounts: writes every dirty extent back first (calling `progress(dirty, at_start)` about
/// five times a second) unless `discard`, unmounts, and waits (up to `wait`) for the daemon to
/// exit. A write-back that keeps failing (errors, and not a byte written back, for
/// `give_up_after`) ends the wait with an error and leaves the mount as it is, nothing dropped:
/// the daemon retries for ever, and whoever waits (a job's Epilog) must be able to say so. A
/// write-back that is only slow, without errors, is waited for.
pub fn unmount(
    mountpoint: &Path,
    discard: bool,
    wait: Duration,
    give_up_after: Duration,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<UnmountReport, ControlError> {
    if detach_dead(mountpoint)? {
        return Err(ControlError::Dead(mountpoint.to_path_buf()));
    }
    let before = stats(mountpoint)?;
    let start = Instant::now();
    if discard {
        set_verb(mountpoint, "discard", b"")?;
    } else {
        set_verb(mountpoint, "flush", b"")?;
        // Read after the ask: a number at least ours (asks only grow).
        let asked = stats(mountpoint)?.flush_asked;
        // Checked every 10 ms (the flush time is reported), progress every 200 ms. A daemon
        // that dies ends the wait with the error of the next `stats`.
        let mut n = 0u32;
        // Since when nothing was written back, and the errors counted then.
        let (mut since, mut dirty_then, mut errors_then) =
            (Instant::now(), before.dirty_bytes, before.writeback_errors);
        loop {
            let s = stats(mountpoint)?;
            if s.flush_done >= asked {
                break;
            }
            if s.dirty_bytes < dirty_then {
                (since, dirty_then, errors_then) =
                    (Instant::now(), s.dirty_bytes, s.writeback_errors);
            } else if since.elapsed() > give_up_after {
                if s.writeback_errors > errors_then {
                    return Err(ControlError::Unmount {
                        path: mountpoint.to_path_buf(),
                        message: format!(
                            "write-back keeps failing ({} errors, nothing written back in {give_up_after:?}; the daemon's log says why): still mounted with {} bytes dirty, nothing dropped",
                            s.writeback_errors - errors_then,
                            s.dirty_bytes
                        ),
                    });
                }
                (since, errors_then) = (Instant::now(), s.writeback_errors);
            }
            if n.is_multiple_of(20) {
                progress(s.dirty_bytes, before.dirty_bytes);
            }
            n += 1;
            std::thread::sleep(Duration::from_millis(10));
        }
        progress(0, before.dirty_bytes);
    }
    let flush_secs = start.elapsed().as_secs_f64();
    let last = stats(mountpoint)?;
    release_mount(mountpoint)?;
    let pid = nix::unistd::Pid::from_raw(last.pid as i32);
    let deadline = Instant::now() + wait;
    while running(pid) {
        if Instant::now() > deadline {
            return Err(ControlError::Unmount {
                path: mountpoint.to_path_buf(),
                message: format!(
                    "unmounted, but the daemon (pid {pid}) is still running after {wait:?}"
                ),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(UnmountReport {
        dirty_bytes_at_start: before.dirty_bytes,
        flush_secs,
        discarded: discard,
        stats: last,
    })
}

/// Whether process `pid` is still running. A daemon that has exited but whose parent has not
/// reaped it yet (a harness that started it with `--foreground` and never waits) is a zombie:
/// `kill(pid, 0)` still succeeds for it, its /proc state says `Z`.
fn running(pid: nix::unistd::Pid) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // `pid (comm) S …`: the state follows the last `)` (comm may hold one).
        Ok(stat) => !matches!(
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next()),
            Some('Z' | 'X')
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        // No /proc to read: the signal test, which cannot tell a zombie.
        Err(_) => nix::sys::signal::kill(pid, None).is_ok(),
    }
}

fn release_mount(mountpoint: &Path) -> Result<(), ControlError> {
    let fail = |message: String| ControlError::Unmount {
        path: mountpoint.to_path_buf(),
        message,
    };
    match nix::mount::umount(mountpoint) {
        Ok(()) => Ok(()),
        Err(nix::errno::Errno::EBUSY) => Err(fail(
            "busy: a process has a file open or its working directory inside".into(),
        )),
        Err(nix::errno::Errno::EPERM) => {
            // An ordinary user's mount is released by the setuid helper.
            let out = ["fusermount3", "fusermount"].iter().find_map(|bin| {
                std::process::Command::new(bin)
                    .arg("-u")
                    .arg(mountpoint)
                    .output()
                    .ok()
            });
            match out {
                Some(o) if o.status.success() => Ok(()),
                Some(o) => Err(fail(String::from_utf8_lossy(&o.stderr).trim().to_string())),
                None => Err(fail(
                    "not root, and no fusermount3 (package fuse3) to unmount with".into(),
                )),
            }
        }
        Err(e) => Err(fail(e.to_string())),
    }
}

/// Why a mount daemon started by [`wait_mounted`]'s caller did not come up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MountWaitError {
    /// The thread asking the mount point stopped.
    #[error("the mount probe stopped")]
    ProbeStopped,
    /// The daemon exited before its mount answered.
    #[error("the mount daemon exited ({0})")]
    Exited(std::process::ExitStatus),
    /// Its mount did not answer in time; the daemon was killed and the mount point detached.
    #[error("not answering after {timeout:?}; the daemon (pid {pid}) was stopped")]
    NotAnswering {
        /// How long it was given.
        timeout: Duration,
        /// The daemon's pid.
        pid: u32,
    },
}

/// Waits until `mountpoint` answers as a Pliant mount served by `pid` (or `child` exits).
pub fn wait_mounted(
    mountpoint: &Path,
    child: &mut std::process::Child,
    timeout: Duration,
) -> Result<FsStats, MountWaitError> {
    let deadline = Instant::now() + timeout;
    let pid = child.id();
    // The probe runs on a thread of its own: a daemon that mounted but does not answer would
    // hold it in the kernel for ever. Past the deadline the daemon is killed, which fails the
    // probe's request, and the caller gets an error instead of a hang.
    let (tx, rx) = std::sync::mpsc::channel();
    let mp = mountpoint.to_path_buf();
    std::thread::spawn(move || {
        loop {
            let s = stats(&mp);
            let done = matches!(&s, Ok(st) if st.pid == pid);
            if tx.send(s.ok().filter(|_| done)).is_err() || done {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left.min(Duration::from_millis(100))) {
            Ok(Some(s)) => return Ok(s),
            Ok(None) | Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err(MountWaitError::ProbeStopped);
            }
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(MountWaitError::Exited(status));
        }
        if left.is_zero() {
            let _ = child.kill();
            let _ = child.wait();
            let _ = nix::mount::umount2(mountpoint, nix::mount::MntFlags::MNT_DETACH);
            return Err(MountWaitError::NotAnswering { timeout, pid });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(kernel_read_ahead: Option<u64>) -> MountOptions {
        let top = std::env::temp_dir().join("pliant-mount-check");
        MountOptions {
            cache: FsConfig::new(top.join("b"), top.join("c"), 1 << 30),
            mountpoint: top.join("m"),
            allow_other: false,
            fuse_threads: 4,
            passthrough: false,
            write_cache: true,
            direct_io: false,
            kernel_read_ahead,
            metrics: None,
            unsafe_no_auth: false,
            striped: None,
        }
    }

    /// Only root may write a mount's read-ahead in sysfs: an ordinary user is told so before
    /// the daemon starts, not left with a mount that silently kept 128 KiB. Where reads bypass
    /// the page cache the setting is refused as having no effect; sizes outside 4 KiB–256 MiB
    /// or not whole KiB are refused.
    #[test]
    fn kernel_read_ahead_is_root_s_and_bounded() {
        let refused = |o: &MountOptions, root: bool| match o.check_as(root) {
            Err(MountError::KernelReadAhead(_, why)) => why,
            other => panic!("not refused: {other:?}"),
        };
        assert!(opts(None).check_as(false).is_ok());
        assert!(opts(Some(4 << 20)).check_as(true).is_ok());
        assert!(refused(&opts(Some(4 << 20)), false).contains("only root"));
        let mut direct = opts(Some(4 << 20));
        direct.direct_io = true;
        assert!(refused(&direct, true).contains("bypass"));
        for bad in [0, 2048, (4 << 20) + 512, KERNEL_READ_AHEAD_MAX + 1024] {
            assert!(refused(&opts(Some(bad)), true).contains("whole number of KiB"));
        }
        assert!(opts(Some(KERNEL_READ_AHEAD_MAX)).check_as(true).is_ok());
    }
}
