//! Jobs: from a batch script's `#DW` directives to a mounted cache and back
//! (`pliant job check|setup|teardown`, what Slurm's `burst_buffer.lua` calls).
//!
//! A job's cache lives in `ROOT/<job id>/`: `mnt` (what `$DW_JOB_STRIPED_CACHE` names),
//! `cache` (the extents and journal), `mount.log` (the daemon's log) and `job.json` (what
//! teardown needs). Teardown of a job that has no `job.json` succeeds: Slurm calls it for jobs
//! that were never set up, and again after a failure. A setup that fails removes what it made
//! (unmounting first if it got that far), and a teardown removes what a setup killed midway
//! left behind.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::FsConfig;
use crate::directives::{CacheDirective, JobDirectives};
use crate::mount::{self, Hint};

/// The user a job's cache is mounted for, when setup runs as root on the job's node (Slurm's
/// Prolog): the mount is `--allow-other`, so they use a mount root serves, as the kernel's
/// permission checks on the backing files allow, and the job's directory is root's with mode 0700
/// and an ACL that lets that user alone through to the mount point. The directory stays root's,
/// not the user's: what is in it (`job.json`, which teardown trusts; the cache directory, which the
/// daemon writes as root) must not be theirs to rename or replace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// The user.
    pub uid: u32,
}

/// Where a job's cache lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPaths {
    /// `ROOT/<job id>`.
    pub dir: PathBuf,
    /// The mount point.
    pub mountpoint: PathBuf,
    /// The cache directory.
    pub cache_dir: PathBuf,
    /// The daemon's log.
    pub log: PathBuf,
    /// What teardown reads.
    pub state: PathBuf,
}

impl JobPaths {
    /// The cache servers a setup has started so far (what a failed setup stops).
    fn servers_file(&self) -> PathBuf {
        self.dir.join("servers.json")
    }
}

/// What `job.json` holds.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct JobState {
    /// The job id.
    pub job_id: String,
    /// The directory the cache fronts.
    pub pfs: PathBuf,
    /// The mount point.
    pub mountpoint: PathBuf,
    /// A striped cache's servers this setup started (none: the mount's own cache).
    #[serde(default)]
    pub servers: Vec<ServerState>,
}

/// A cache server a job's setup started.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ServerState {
    /// Its pid.
    pub pid: u32,
    /// Where it listens.
    pub addr: String,
    /// Its cache directory (its journal: what a server that died had not written back).
    pub cache_dir: PathBuf,
    /// Where it keeps the names of the files it holds unwritten data of.
    #[serde(default)]
    pub dirty_list: Option<PathBuf>,
    /// The user it runs as, when setup ran as root for a job's user.
    #[serde(default)]
    pub uid: Option<u32>,
    /// Its secret file (to start it again over its journal).
    #[serde(default)]
    pub secret: Option<PathBuf>,
    /// Its log.
    #[serde(default)]
    pub log: Option<PathBuf>,
}

/// Whether a job's cache is striped across cache servers, and where they run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Striping {
    /// The mount's own cache (one node's).
    #[default]
    None,
    /// `n` servers on this machine, each with its share of the capacity.
    Local(usize),
    /// One server on each of the job's nodes, which meet in a directory they all see: each
    /// node's setup starts its server, leaves its address there (`server.<node>`), waits for
    /// every node's, and mounts over all of them in the order of the nodes' names. The first
    /// node there draws the cache's secret (`secret`, mode 0600), which the others read: the
    /// directory must be readable by the setups alone (root's, or the controller's), since
    /// whoever reads the secret can claim any uid to the servers.
    Nodes {
        /// The meeting directory.
        rendezvous: PathBuf,
        /// How many nodes the job has.
        nodes: usize,
        /// This node's name.
        node: String,
        /// What this node's server listens on (`0.0.0.0`: every interface).
        listen: std::net::IpAddr,
        /// The host name or address the other nodes reach it at.
        advertise: String,
    },
}

/// How long a node's setup waits for every other node's server.
pub const RENDEZVOUS_WAIT: Duration = Duration::from_secs(120);

/// What happened to one server at teardown.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ServerOutcome {
    /// The server.
    pub addr: String,
    /// It had died: its journal was replayed here (these files had data it had not written
    /// back; now they have).
    pub recovered_files: u64,
    /// Bytes the replay wrote back.
    pub recovered_bytes: u64,
}

/// A job that could not be set up or torn down.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    /// A job id with characters that do not belong in a path.
    #[error("job id {0:?}: expected letters, digits, '.', '_' or '-'")]
    BadId(String),
    /// The script asks for no cache.
    #[error("{0}: no `#DW jobdw type=cache …` directive")]
    NoCache(String),
    /// A preload path outside the cached directory (the parser checks this too).
    #[error("#DW preload path={0}: not under the job's pfs")]
    PreloadOutside(PathBuf),
    /// A preload that could not be reached inside the job's mount: a symbolic link on the way
    /// or at the end, another mount on the way, or nothing there.
    #[error("{file}:{line}: #DW preload: path={}: {message}", path.display())]
    Preload {
        /// The script.
        file: String,
        /// The directive's line.
        line: usize,
        /// The path it names.
        path: PathBuf,
        /// Why it was refused.
        message: String,
    },
    /// I/O on a path.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The mount daemon did not come up.
    #[error(
        "mounting {mountpoint}: {message}{}",
        log.as_ref().map(|l| format!(" (log: {})", l.display())).unwrap_or_default()
    )]
    Mount {
        /// The mount point.
        mountpoint: PathBuf,
        /// What happened, with this attempt's last lines of the daemon's log.
        message: String,
        /// The daemon's log, unless a failed setup removed it with the job's directory.
        log: Option<PathBuf>,
    },
    /// The script's directives name something that is not there.
    #[error(transparent)]
    Directive(#[from] crate::directives::DirectiveError),
    /// Setup of a job that is set up already.
    #[error("job {job_id}: already set up ({state} exists): tear it down first")]
    AlreadySetUp {
        /// The job id.
        job_id: String,
        /// Its `job.json`.
        state: PathBuf,
    },
    /// Something is mounted in a job's directory that teardown cannot account for.
    #[error("{dir}: {message}")]
    Busy {
        /// The job's directory.
        dir: PathBuf,
        /// What is there.
        message: String,
    },
    /// Reaching the mount failed.
    #[error(transparent)]
    Control(#[from] mount::ControlError),
    /// A job root that someone other than root could change, for a mount root makes for
    /// another user: they could put a link where root will mount or write.
    #[error(
        "{root}: {why}: a job root for other users' mounts must be root's and writable by root alone, as every directory above it (or sticky, as /tmp)"
    )]
    UnsafeRoot {
        /// The job root, or the directory above it at fault.
        root: PathBuf,
        /// What is wrong with it.
        why: String,
    },
}

impl JobError {
    /// Whether the job's own script is at fault (its directives, or the paths they name as the
    /// node finds them), not the machine: a node's Prolog must not fail for it, since Slurm
    /// drains a node whose Prolog fails and any user could then drain nodes at will.
    pub fn is_the_jobs_fault(&self) -> bool {
        matches!(
            self,
            JobError::NoCache(_)
                | JobError::PreloadOutside(_)
                | JobError::Preload { .. }
                | JobError::Directive(_)
        )
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> JobError + '_ {
    move |source| JobError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl JobPaths {
    /// The paths of job `job_id` under `root`.
    pub fn new(root: &Path, job_id: &str) -> Result<Self, JobError> {
        if job_id.is_empty()
            || job_id.starts_with('.')
            || !job_id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        {
            return Err(JobError::BadId(job_id.into()));
        }
        let dir = root.join(job_id);
        Ok(Self {
            mountpoint: dir.join("mnt"),
            cache_dir: dir.join("cache"),
            log: dir.join("mount.log"),
            state: dir.join("job.json"),
            dir,
        })
    }
}

/// The cache settings a directive asks for: its capacity, file size limit and write window,
/// the rest at their defaults.
pub fn cache_config(d: &CacheDirective, paths: &JobPaths) -> FsConfig {
    let mut c = FsConfig::new(d.pfs.clone(), paths.cache_dir.clone(), d.capacity_bytes);
    if c.extent > c.capacity {
        c.extent = (c.capacity.next_power_of_two() / 2).max(4096);
    }
    if let Some(m) = d.max_file_size {
        c.max_file_size = m;
    }
    if let Some(m) = d.write_window_multiplier {
        c.write_window_multiplier = m.into();
    }
    if let Some(s) = d.write_window_length_secs {
        c.write_window = Duration::from_secs(s);
    }
    c
}

/// The `pliant fs mount` arguments (after `fs mount`) for a cache config, daemon form.
pub fn mount_args(c: &FsConfig, mountpoint: &Path) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec![c.backing.clone().into(), mountpoint.into()];
    a.extend(cache_flags(c));
    a.push("--foreground".into());
    a
}

/// The flags of a cache config that `pliant fs mount` and `pliant fs server` share.
pub fn cache_flags(c: &FsConfig) -> Vec<OsString> {
    vec![
        "--cache-dir".into(),
        c.cache_dir.clone().into(),
        "--capacity".into(),
        c.capacity.to_string().into(),
        "--extent".into(),
        c.extent.to_string().into(),
        "--max-file-size".into(),
        c.max_file_size.to_string().into(),
        "--write-window-multiplier".into(),
        c.write_window_multiplier.to_string().into(),
        "--write-window-length".into(),
        c.write_window.as_secs().to_string().into(),
    ]
}

/// Starts `exe ARGS` as a mount daemon in its own process group, its output in `log`, and waits
/// (up to `timeout`) until `mountpoint` answers.
pub fn spawn_daemon(
    exe: &Path,
    args: &[OsString],
    mountpoint: &Path,
    log: &Path,
    timeout: Duration,
) -> Result<crate::FsStats, JobError> {
    use std::io::{Read, Seek};
    use std::os::unix::process::CommandExt;
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(io(log))?;
    // The log keeps earlier attempts' lines: an error shows only this attempt's.
    let start = out.metadata().map_err(io(log))?.len();
    let err = out.try_clone().map_err(io(log))?;
    let mut child = std::process::Command::new(exe)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err)
        // Its own group: a Ctrl-C meant for the command that started it must not stop it.
        .process_group(0)
        .spawn()
        .map_err(io(exe))?;
    mount::wait_mounted(mountpoint, &mut child, timeout).map_err(|e| {
        let message = e.to_string();
        let mut tail = String::new();
        if let Ok(mut f) = std::fs::File::open(log)
            && f.seek(std::io::SeekFrom::Start(start)).is_ok()
        {
            let _ = f.read_to_string(&mut tail);
        }
        let tail: Vec<&str> = tail.lines().rev().take(5).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        JobError::Mount {
            mountpoint: mountpoint.to_path_buf(),
            message: if tail.is_empty() {
                message
            } else {
                format!("{message}: {}", tail.join(" | "))
            },
            log: Some(log.to_path_buf()),
        }
    })
}

/// What setup did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Setup {
    /// The environment to give the job, `NAME=VALUE`.
    pub env: Vec<(String, String)>,
    /// Bytes the preloads copied.
    pub preloaded_bytes: u64,
    /// Files the preloads left out, and their bytes: they do not fit in the cache.
    pub not_preloaded: (u64, u64),
    /// The mount daemon's pid.
    pub pid: u32,
    /// A striped cache's servers, started by this setup.
    pub servers: Vec<ServerState>,
}

/// Mounts the job's cache (with `exe` as the `pliant` binary), preloads, records the job. If
/// any of it fails, what it made is removed (the mount unmounted, its dirty data, which is only
/// what preloads copied, dropped) and the job's directory with it: Slurm then sees a job that
/// was never set up, and a retry starts clean.
pub fn setup(
    exe: &Path,
    script: &str,
    directives: &JobDirectives,
    root: &Path,
    job_id: &str,
    owner: Option<Owner>,
    striping: &Striping,
) -> Result<Setup, JobError> {
    let d = directives
        .cache
        .as_ref()
        .ok_or_else(|| JobError::NoCache(script.into()))?;
    match owner {
        // Root setting up another user's job must not stat their preload paths: a stat follows
        // the symbolic links they put in their pfs and, by failing or not, tells them whether a
        // path they cannot list exists. Each preload is resolved inside the mount instead,
        // following no link (`setup_in`), which finds a missing one as well.
        Some(_) => directives.check_pfs(script)?,
        None => directives.check_paths(script)?,
    }
    let paths = JobPaths::new(root, job_id)?;
    if paths.state.exists() {
        return Err(JobError::AlreadySetUp {
            job_id: job_id.into(),
            state: paths.state.clone(),
        });
    }
    setup_in(exe, script, directives, d, &paths, job_id, owner, striping).map_err(|mut e| {
        // Servers it started go too, their data dropped (it is only what preloads copied).
        if let Ok(b) = std::fs::read(paths.servers_file())
            && let Ok(started) = serde_json::from_slice::<Vec<ServerState>>(&b)
        {
            for s in &started {
                let _ = stop_server(exe, s, true, Duration::from_secs(30));
            }
        }
        match remove_job_dir(&paths) {
            Ok(()) => {
                if let JobError::Mount { log, .. } = &mut e {
                    *log = None;
                }
            }
            Err(c) => tracing::error!(error = %c, "cleaning up after a failed setup"),
        }
        e
    })
}

/// Removes a job's directory, unmounting (with discard) or detaching whatever of ours is
/// still mounted in it; refuses while anything else is, since removing the directory would
/// reach through the mount.
fn remove_job_dir(paths: &JobPaths) -> Result<(), JobError> {
    if !paths.dir.exists() {
        return Ok(());
    }
    mount::detach_dead(&paths.mountpoint)?;
    if mount::stats(&paths.mountpoint).is_ok() {
        mount::unmount(
            &paths.mountpoint,
            true,
            Duration::from_secs(60),
            Duration::from_secs(60),
            &mut |_, _| {},
        )?;
    }
    if is_mount_point(&paths.mountpoint) {
        return Err(JobError::Busy {
            dir: paths.dir.clone(),
            message: format!(
                "{} is a mount point of something else: left alone",
                paths.mountpoint.display()
            ),
        });
    }
    std::fs::remove_dir_all(&paths.dir).map_err(io(&paths.dir))
}

/// Makes `dir` (and its parents) with mode 0700. A directory that is there already gets the mode
/// too: a job's directory must not be left open to others.
fn make_private_dir(dir: &Path) -> Result<(), JobError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io(dir))?;
    Ok(())
}

/// Lets user `uid` (and no one else but root) search `dir`: its POSIX access ACL becomes
/// `user::rwx user:UID:--x group::--- mask::--x other::---`, in the kernel's
/// `system.posix_acl_access` form (version 2, then (tag, permissions, id) entries in tag order).
fn let_through(dir: &Path, uid: u32) -> Result<(), JobError> {
    const UNDEFINED: u32 = u32::MAX;
    let entries: [(u16, u16, u32); 5] = [
        (0x01, 7, UNDEFINED), // ACL_USER_OBJ
        (0x02, 1, uid),       // ACL_USER
        (0x04, 0, UNDEFINED), // ACL_GROUP_OBJ
        (0x10, 1, UNDEFINED), // ACL_MASK
        (0x20, 0, UNDEFINED), // ACL_OTHER
    ];
    let mut acl = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in entries {
        acl.extend_from_slice(&tag.to_le_bytes());
        acl.extend_from_slice(&perm.to_le_bytes());
        acl.extend_from_slice(&id.to_le_bytes());
    }
    xattr::set(dir, "system.posix_acl_access", &acl).map_err(|e| JobError::Io {
        path: dir.to_path_buf(),
        source: std::io::Error::new(
            e.kind(),
            format!(
                "setting an ACL that lets the job's user through (the job root's file system must support POSIX ACLs): {e}"
            ),
        ),
    })
}

/// Refuses a job root that anyone but root could change, or reach into through a directory
/// above it that they could change: root is about to mount and write there for another user.
fn check_root_is_roots(root: &Path) -> Result<(), JobError> {
    use std::os::unix::fs::MetadataExt;
    let unsafe_root = |p: &Path, why: String| JobError::UnsafeRoot {
        root: p.to_path_buf(),
        why,
    };
    std::fs::create_dir_all(root).map_err(io(root))?;
    let link = std::fs::symlink_metadata(root).map_err(io(root))?;
    if !link.is_dir() {
        return Err(unsafe_root(
            root,
            "not a directory (a symbolic link?)".into(),
        ));
    }
    let real = std::fs::canonicalize(root).map_err(io(root))?;
    for (i, p) in real.ancestors().enumerate() {
        let m = std::fs::metadata(p).map_err(io(p))?;
        let writable_by_others = m.mode() & 0o022 != 0;
        // Above the root, a sticky directory (/tmp) is fine: no one else can rename or remove
        // root's entries in it. The root itself must be root's alone to write.
        let sticky = i > 0 && m.mode() & 0o1000 != 0;
        if m.uid() != 0 {
            return Err(unsafe_root(p, format!("owned by uid {}", m.uid())));
        }
        if writable_by_others && !sticky {
            return Err(unsafe_root(
                p,
                format!("mode {:o} lets others write", m.mode() & 0o7777),
            ));
        }
    }
    Ok(())
}

/// True if something is mounted at `p` (its device differs from its parent's).
fn is_mount_point(p: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (Ok(m), Some(Ok(parent))) = (
        std::fs::symlink_metadata(p),
        p.parent().map(std::fs::symlink_metadata),
    ) else {
        return false;
    };
    m.dev() != parent.dev()
}

#[allow(clippy::too_many_arguments)]
fn setup_in(
    exe: &Path,
    script: &str,
    directives: &JobDirectives,
    d: &CacheDirective,
    paths: &JobPaths,
    job_id: &str,
    owner: Option<Owner>,
    striping: &Striping,
) -> Result<Setup, JobError> {
    if let Some(o) = owner {
        let root = paths.dir.parent().unwrap_or(Path::new("/"));
        check_root_is_roots(root)?;
        make_private_dir(&paths.dir)?;
        let_through(&paths.dir, o.uid)?;
        make_private_dir(&paths.cache_dir)?;
        std::fs::create_dir_all(&paths.mountpoint).map_err(io(&paths.mountpoint))?;
    } else {
        for p in [&paths.mountpoint, &paths.cache_dir] {
            std::fs::create_dir_all(p).map_err(io(p))?;
        }
    }
    let cfg = cache_config(d, paths);
    let mut args: Vec<OsString> = vec!["fs".into(), "mount".into()];
    args.extend(mount_args(&cfg, &paths.mountpoint));
    if owner.is_some() {
        args.push("--allow-other".into());
    }
    let mut started = Vec::new();
    // Recorded as they start, so a setup that fails midway stops what it started.
    let record = |started: &Vec<ServerState>| -> Result<(), JobError> {
        let json = serde_json::to_vec(started).map_err(|e| JobError::Io {
            path: paths.servers_file(),
            source: std::io::Error::other(e),
        })?;
        std::fs::write(paths.servers_file(), json).map_err(io(&paths.servers_file()))
    };
    let secret = paths.dir.join("secret");
    let addrs: Vec<String> = match striping {
        Striping::None => Vec::new(),
        Striping::Local(n) => {
            write_secret(&secret, None)?;
            for i in 0..*n {
                let mut c = cfg.clone();
                c.cache_dir = paths.dir.join(format!("server{i}"));
                // DataWarp's capacity is the job's, shared out among its servers.
                c.capacity = (cfg.capacity / *n as u64).max(c.extent);
                let ip = std::net::IpAddr::from([127, 0, 0, 1]);
                let dirty = paths.dir.join(format!("server{i}.dirty"));
                started.push(spawn_server(exe, &c, &secret, ip, &dirty, &paths.log, owner)?.0);
                record(&started)?;
            }
            started.iter().map(|s| s.addr.clone()).collect()
        }
        Striping::Nodes {
            rendezvous,
            nodes,
            node,
            listen,
            advertise,
        } => {
            check_rendezvous(rendezvous)?;
            let shared = rendezvous.join("secret");
            write_secret(&shared, Some(rendezvous))?;
            check_private(&shared)?;
            std::fs::copy(&shared, &secret).map_err(io(&secret))?;
            let mut c = cfg.clone();
            c.cache_dir = paths.dir.join("server");
            c.capacity = (cfg.capacity / (*nodes).max(1) as u64).max(c.extent);
            // Beside the other nodes' addresses: it outlives this node's storage.
            let dirty = rendezvous.join(format!("dirty.{node}"));
            let (s, _) = spawn_server(exe, &c, &secret, *listen, &dirty, &paths.log, owner)?;
            let port = s.addr.rsplit(':').next().unwrap_or_default().to_string();
            started.push(s);
            record(&started)?;
            publish(rendezvous, node, &format!("{advertise}:{port}"))?;
            meet(rendezvous, *nodes, RENDEZVOUS_WAIT)?
        }
    };
    if !addrs.is_empty() {
        args.extend([
            "--servers".into(),
            addrs.join(",").into(),
            "--secret-file".into(),
            secret.into_os_string(),
        ]);
    }
    let stats = spawn_daemon(
        exe,
        &args,
        &paths.mountpoint,
        &paths.log,
        Duration::from_secs(30),
    )?;
    let state = JobState {
        job_id: job_id.into(),
        pfs: d.pfs.clone(),
        mountpoint: paths.mountpoint.clone(),
        servers: started.clone(),
    };
    let json = serde_json::to_vec_pretty(&state).map_err(|e| JobError::Io {
        path: paths.state.clone(),
        source: std::io::Error::other(e),
    })?;
    std::fs::write(&paths.state, json).map_err(io(&paths.state))?;
    let mut preloaded_bytes = 0;
    let mut not_preloaded = (0, 0);
    // Root sends the preload hints, on paths the job's user wrote. By name, a symbolic link they
    // made in their pfs (to another job's mount, which they cannot enter) would have root preload
    // what it leads to: so each path is resolved from the mount's root, following no link and
    // crossing into no other mount, and the hint goes to the descriptor that resolution gave.
    let mnt =
        crate::backing::BackingDir::open_root(&paths.mountpoint).map_err(io(&paths.mountpoint))?;
    for p in &directives.preloads {
        let rel = p
            .path
            .strip_prefix(&d.pfs)
            .map_err(|_| JobError::PreloadOutside(p.path.clone()))?;
        let refuse = |message: String| JobError::Preload {
            file: script.into(),
            line: p.line,
            path: p.path.clone(),
            message,
        };
        let fd = mnt.open_path_in_mount(rel).map_err(|e| {
            refuse(match e.raw_os_error() {
                Some(c) if c == nix::errno::Errno::ELOOP as i32 => {
                    "a symbolic link on the way: a preload must name a path inside the pfs, reached without following one".into()
                }
                // Without openat2 (before 5.6) a link in place of a directory shows as this.
                Some(c) if c == nix::errno::Errno::ENOTDIR as i32 => {
                    "not a directory on the way (or a symbolic link there): a preload must name a path inside the pfs, reached without following a link".into()
                }
                Some(c) if c == nix::errno::Errno::EXDEV as i32 => {
                    "crosses into another mount: a preload must name a path inside the pfs".into()
                }
                _ => e.to_string(),
            })
        })?;
        let kind = nix::sys::stat::fstat(&fd)
            .map_err(|e| refuse(std::io::Error::from(e).to_string()))?
            .st_mode
            & nix::libc::S_IFMT;
        if kind == nix::libc::S_IFLNK {
            return Err(refuse(
                "a symbolic link: a preload must name a file or directory inside the pfs, not a link"
                    .into(),
            ));
        }
        let r = mount::hint_fd(&fd, &paths.mountpoint.join(rel), Hint::Preload)?;
        preloaded_bytes += r.bytes;
        not_preloaded.0 += r.not_fitted;
        not_preloaded.1 += r.not_fitted_bytes;
    }
    Ok(Setup {
        env: vec![(
            "DW_JOB_STRIPED_CACHE".into(),
            paths.mountpoint.display().to_string(),
        )],
        preloaded_bytes,
        not_preloaded,
        pid: stats.pid,
        servers: started,
    })
}

/// A new random secret in `path`, readable by its owner alone. With `race` (the directory
/// several nodes' setups share), the first to get there wins and the others keep its secret:
/// it is written whole under another name and linked into place, which fails if one is there.
fn write_secret(path: &Path, race: Option<&Path>) -> Result<(), JobError> {
    use std::io::{Read, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(io(Path::new("/dev/urandom")))?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let tmp = match race {
        Some(dir) => dir.join(format!(".secret.{}", std::process::id())),
        None => path.to_path_buf(),
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io(&tmp))?;
    writeln!(f, "{hex}").map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    if race.is_some() {
        let linked = std::fs::hard_link(&tmp, path);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(path)(e)),
        }
    }
    Ok(())
}

/// Refuses a meeting directory others may write: they could put their own secret there before
/// the first node, or their own server's address, and have every mount send it the job's data.
fn check_rendezvous(dir: &Path) -> Result<(), JobError> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(dir).map_err(io(dir))?;
    if !m.is_dir() || m.mode() & 0o022 != 0 {
        return Err(JobError::UnsafeRoot {
            root: dir.to_path_buf(),
            why: format!(
                "the meeting directory of a job's cache servers must be a directory no one else may write (mode {:o})",
                m.mode() & 0o7777
            ),
        });
    }
    Ok(())
}

/// Refuses a secret file this process does not own alone.
fn check_private(path: &Path) -> Result<(), JobError> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(path).map_err(io(path))?;
    if !m.is_file() || m.uid() != nix::unistd::geteuid().as_raw() || m.mode() & 0o077 != 0 {
        return Err(JobError::UnsafeRoot {
            root: path.to_path_buf(),
            why: "the cache's secret must be a file of this user's that no one else may read"
                .into(),
        });
    }
    Ok(())
}

/// Leaves this node's server address in the meeting directory, whole (a new file renamed over
/// the name, so a reader never sees half of it).
fn publish(rendezvous: &Path, node: &str, addr: &str) -> Result<(), JobError> {
    if node.is_empty()
        || !node
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Err(JobError::BadId(node.to_string()));
    }
    let tmp = rendezvous.join(format!(".server.{node}.{}", std::process::id()));
    std::fs::write(&tmp, format!("{addr}\n")).map_err(io(&tmp))?;
    let to = rendezvous.join(format!("server.{node}"));
    std::fs::rename(&tmp, &to).map_err(io(&to))
}

/// Waits (at most `wait`) until `nodes` servers have left their addresses, and returns them in
/// the order of their nodes' names: the order every node mounts with.
fn meet(rendezvous: &Path, nodes: usize, wait: Duration) -> Result<Vec<String>, JobError> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        let mut found: Vec<(String, String)> = Vec::new();
        for e in std::fs::read_dir(rendezvous).map_err(io(rendezvous))? {
            let e = e.map_err(io(rendezvous))?;
            let name = e.file_name().to_string_lossy().to_string();
            if let Some(node) = name.strip_prefix("server.")
                && let Ok(text) = std::fs::read_to_string(e.path())
                && let Some(addr) = text.lines().next()
            {
                found.push((node.to_string(), addr.trim().to_string()));
            }
        }
        if found.len() >= nodes {
            found.sort();
            return Ok(found.into_iter().map(|(_, a)| a).collect());
        }
        if std::time::Instant::now() > deadline {
            let names: Vec<String> = found.into_iter().map(|(n, _)| n).collect();
            return Err(JobError::Mount {
                mountpoint: rendezvous.to_path_buf(),
                message: format!(
                    "{} of the job's {nodes} nodes' cache servers started within {wait:?} ({}): the others never said where theirs listens",
                    names.len(),
                    names.join(", ")
                ),
                log: None,
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts `exe fs server` for `cfg` in its own process group (its log appended to `log`) and
/// waits (up to 30 s) until it says where it listens. With `owner`, the server runs as that
/// user (its groups too), its cache directory, the secret and its list of dirty files theirs:
/// a server run as root would take whatever uid a request claims, and anyone who holds the
/// secret could then read and write every user's files through it.
#[allow(clippy::too_many_arguments)]
fn spawn_server(
    exe: &Path,
    cfg: &FsConfig,
    secret: &Path,
    listen: std::net::IpAddr,
    dirty_list: &Path,
    log: &Path,
    owner: Option<Owner>,
) -> Result<(ServerState, u64), JobError> {
    use std::os::unix::process::CommandExt;
    std::fs::create_dir_all(&cfg.cache_dir).map_err(io(&cfg.cache_dir))?;
    let ready = cfg.cache_dir.with_extension("ready");
    let out = std::fs::File::create(&ready).map_err(io(&ready))?;
    let err = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(io(log))?;
    // The list is made here, so a server that may not write the directory it is in (the
    // nodes' meeting directory) can still rewrite it.
    {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(dirty_list)
            .map_err(io(dirty_list))?;
    }
    let user = match owner {
        Some(o) => {
            let u = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(o.uid))
                .ok()
                .flatten()
                .ok_or_else(|| JobError::Io {
                    path: PathBuf::from(format!("uid {}", o.uid)),
                    source: std::io::Error::other("no such user"),
                })?;
            for p in [cfg.cache_dir.as_path(), secret, dirty_list] {
                nix::unistd::chown(p, Some(u.uid), Some(u.gid)).map_err(|e| JobError::Io {
                    path: p.to_path_buf(),
                    source: e.into(),
                })?;
            }
            Some((u.uid.as_raw(), u.gid.as_raw()))
        }
        None => None,
    };
    let mut args: Vec<OsString> = vec!["fs".into(), "server".into(), cfg.backing.clone().into()];
    args.extend(cache_flags(cfg));
    args.extend([
        "--listen".into(),
        std::net::SocketAddr::new(listen, 0).to_string().into(),
        "--secret-file".into(),
        secret.into(),
        "--dirty-list".into(),
        dirty_list.into(),
        "--json".into(),
    ]);
    // As the user: util-linux's setpriv sets the user, the group and the user's other groups,
    // then becomes the server (same pid).
    let mut command = match user {
        Some((uid, gid)) => {
            let mut c = std::process::Command::new("setpriv");
            c.arg(format!("--reuid={uid}"))
                .arg(format!("--regid={gid}"))
                .arg("--init-groups")
                .arg("--")
                .arg(exe);
            c
        }
        None => std::process::Command::new(exe),
    };
    command
        .args(&args)
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0);
    let mut child = command.spawn().map_err(|e| JobError::Io {
        path: exe.to_path_buf(),
        source: std::io::Error::new(
            e.kind(),
            format!(
                "starting a cache server{}: {e}",
                if user.is_some() {
                    " (with setpriv, from util-linux)"
                } else {
                    ""
                }
            ),
        ),
    })?;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(&ready).unwrap_or_default();
        if let Some(line) = text.lines().next()
            && text.contains('\n')
        {
            let v: serde_json::Value = serde_json::from_str(line).map_err(|e| JobError::Io {
                path: ready.clone(),
                source: std::io::Error::other(e),
            })?;
            let addr = v["addr"].as_str().unwrap_or_default().to_string();
            let recovered = v["recovered"]["bytes"].as_u64().unwrap_or(0);
            return Ok((
                ServerState {
                    pid: child.id(),
                    addr,
                    cache_dir: cfg.cache_dir.clone(),
                    dirty_list: Some(dirty_list.to_path_buf()),
                    uid: owner.map(|o| o.uid),
                    secret: Some(secret.to_path_buf()),
                    log: Some(log.to_path_buf()),
                },
                recovered,
            ));
        }
        let failed = |message: String| JobError::Mount {
            mountpoint: cfg.cache_dir.clone(),
            message: format!("cache server: {message}"),
            log: Some(log.to_path_buf()),
        };
        if let Ok(Some(status)) = child.try_wait() {
            return Err(failed(format!("exited ({status}) before it listened")));
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(failed("did not listen within 30 s".into()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether `pid` is the cache server over `cache_dir` (and not a process that took its pid
/// after it ended).
fn is_our_server(s: &ServerState) -> bool {
    let Ok(cmd) = std::fs::read(format!("/proc/{}/cmdline", s.pid)) else {
        return false;
    };
    let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
    let dir = s.cache_dir.as_os_str().as_encoded_bytes();
    args.windows(2).any(|w| w == [b"fs".as_slice(), b"server"]) && args.contains(&dir)
}

/// Stops a job's cache server: SIGTERM, which writes everything back before it exits (SIGKILL
/// with `discard`), waiting at most `wait`. Then, whatever the exit, its journal is read: what
/// it still names (a server that died, or was killed during its write-back) is written back
/// by the server started again over its cache directory (as its user), and counted. A server
/// whose journal is gone with its storage fails, naming the files it listed as holding
/// unwritten data.
fn stop_server(
    exe: &Path,
    s: &ServerState,
    discard: bool,
    wait: Duration,
) -> Result<ServerOutcome, JobError> {
    use nix::sys::signal::{Signal, kill};
    let mut outcome = ServerOutcome {
        addr: s.addr.clone(),
        recovered_files: 0,
        recovered_bytes: 0,
    };
    let stop = |pid: u32, how: Signal, wait: Duration| -> Result<(), JobError> {
        let st = ServerState { pid, ..s.clone() };
        if !is_our_server(&st) {
            return Ok(());
        }
        let _ = kill(nix::unistd::Pid::from_raw(pid as i32), how);
        let deadline = std::time::Instant::now() + wait;
        while is_our_server(&st) {
            if std::time::Instant::now() > deadline {
                return Err(JobError::Busy {
                    dir: s.cache_dir.clone(),
                    message: format!(
                        "cache server {} (pid {pid}) still writing back after {wait:?}: left running with its data",
                        s.addr
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    };
    stop(
        s.pid,
        if discard {
            Signal::SIGKILL
        } else {
            Signal::SIGTERM
        },
        wait,
    )?;
    if discard {
        let _ = std::fs::remove_dir_all(&s.cache_dir);
        return Ok(outcome);
    }
    let journal = s.cache_dir.join(crate::journal::FILE);
    if !journal.exists() {
        let files: Vec<String> = s
            .dirty_list
            .as_ref()
            .and_then(|p| std::fs::read(p).ok())
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let said = match files.len() {
            0 => "it listed no file with unwritten data".to_string(),
            n => {
                let shown: Vec<&str> = files.iter().take(20).map(String::as_str).collect();
                format!(
                    "the data it had not written back of {n} files is lost: {}{}",
                    shown.join(", "),
                    if n > 20 { ", …" } else { "" }
                )
            }
        };
        return Err(JobError::Mount {
            mountpoint: s.cache_dir.clone(),
            message: format!(
                "cache server {} is gone and so is its storage (its journal): {said}",
                s.addr
            ),
            log: None,
        });
    }
    let Some(replay) = crate::journal::Journal::replay(&journal).map_err(io(&journal))? else {
        return Ok(outcome);
    };
    if replay.files.is_empty() {
        return Ok(outcome);
    }
    // Started again over its cache directory, it writes its journal back before it listens.
    use std::os::unix::ffi::OsStrExt;
    let backing = PathBuf::from(std::ffi::OsStr::from_bytes(&replay.header.backing));
    let cfg = FsConfig::new(backing, s.cache_dir.clone(), 1 << 30);
    let secret = s.secret.clone().ok_or_else(|| JobError::Io {
        path: s.cache_dir.clone(),
        source: std::io::Error::other("no secret recorded to start the server again with"),
    })?;
    let log = s
        .log
        .clone()
        .unwrap_or_else(|| s.cache_dir.with_extension("log"));
    let dirty = s
        .dirty_list
        .clone()
        .unwrap_or_else(|| s.cache_dir.with_extension("dirty"));
    let owner = s.uid.map(|uid| Owner { uid });
    let ip = std::net::IpAddr::from([127, 0, 0, 1]);
    let (again, recovered) = spawn_server(exe, &cfg, &secret, ip, &dirty, &log, owner)?;
    outcome.recovered_files = replay.files.len() as u64;
    outcome.recovered_bytes = recovered;
    stop(again.pid, Signal::SIGTERM, wait)?;
    Ok(outcome)
}

/// What a teardown did.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Teardown {
    /// The cache was written back (or dropped) and unmounted; the directory removed.
    Unmounted(Box<mount::UnmountReport>),
    /// Set up, but no longer mounted (an earlier teardown got that far, or the daemon died
    /// and `discard` was asked for); the directory removed.
    NotMounted,
    /// A setup that did not finish had left the job's directory; removed.
    LeftoversRemoved,
    /// The job has no directory.
    Nothing,
}

/// Flushes (or with `discard` drops) and unmounts a job's cache, then removes its directory.
/// A write-back that keeps failing for `give_up_after` fails the teardown and leaves the cache
/// mounted with its data ([`mount::unmount`]): a later teardown can still write it back. A
/// striped cache's servers are stopped after the mount, each writing back all it holds (or
/// replayed from its journal if it had died); the teardown fails, naming the server, if one
/// cannot be, and nothing of the job is removed then.
pub fn teardown(
    exe: &Path,
    root: &Path,
    job_id: &str,
    discard: bool,
    give_up_after: Duration,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(Teardown, Vec<ServerOutcome>), JobError> {
    let paths = JobPaths::new(root, job_id)?;
    let state: JobState = match std::fs::read(&paths.state) {
        Ok(b) => serde_json::from_slice(&b).map_err(|e| JobError::Io {
            path: paths.state.clone(),
            source: std::io::Error::other(e),
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if !paths.dir.exists() {
                return Ok((Teardown::Nothing, Vec::new()));
            }
            // A setup killed before it wrote job.json. A mount answering there may be a setup
            // still running: left alone.
            mount::detach_dead(&paths.mountpoint)?;
            if mount::stats(&paths.mountpoint).is_ok() {
                return Err(JobError::Busy {
                    dir: paths.dir.clone(),
                    message: format!(
                        "a cache is mounted at {} but {} is missing: is the job's setup still running?",
                        paths.mountpoint.display(),
                        paths.state.display()
                    ),
                });
            }
            if let Ok(b) = std::fs::read(paths.servers_file())
                && let Ok(started) = serde_json::from_slice::<Vec<ServerState>>(&b)
            {
                for s in &started {
                    stop_server(exe, s, true, Duration::from_secs(30))?;
                }
            }
            remove_job_dir(&paths)?;
            return Ok((Teardown::LeftoversRemoved, Vec::new()));
        }
        Err(e) => {
            return Err(JobError::Io {
                path: paths.state.clone(),
                source: e,
            });
        }
    };
    // A daemon that died leaves a mount answering ENOTCONN: detached, it is "not mounted"
    // below, and the journal decides.
    mount::detach_dead(&state.mountpoint)?;
    let report = match mount::stats(&state.mountpoint) {
        Ok(_) => Teardown::Unmounted(Box::new(mount::unmount(
            &state.mountpoint,
            discard,
            Duration::from_secs(600),
            give_up_after,
            progress,
        )?)),
        // Already unmounted (a teardown that failed after unmounting): only the files are left.
        Err(mount::ControlError::NotPliant(_)) => {
            let journal = paths.cache_dir.join(crate::journal::FILE);
            let pending = crate::journal::Journal::replay(&journal)
                .map_err(io(&journal))?
                .is_some_and(|r| !r.files.is_empty());
            if pending && !discard {
                return Err(JobError::Mount {
                    mountpoint: state.mountpoint.clone(),
                    message: format!(
                        "not mounted, and the cache holds data a crashed mount had not written back: mount it again (pliant fs mount {} {} --cache-dir {}) to recover it, or tear down with --discard",
                        state.pfs.display(),
                        state.mountpoint.display(),
                        paths.cache_dir.display()
                    ),
                    log: Some(paths.log.clone()),
                });
            }
            Teardown::NotMounted
        }
        Err(e) => return Err(e.into()),
    };
    // Every server is stopped (or replayed) before any failure is reported: one lost server
    // must not leave the others running. The job's directory stays on a failure, for a
    // teardown with --discard once the loss is known.
    // All at once: each writes back its own stripes, so a job's teardown takes as long as its
    // slowest server, not their sum.
    let outcomes: Vec<Result<ServerOutcome, JobError>> = std::thread::scope(|scope| {
        let running: Vec<_> = state
            .servers
            .iter()
            .map(|s| scope.spawn(move || stop_server(exe, s, discard, Duration::from_secs(3600))))
            .collect();
        running
            .into_iter()
            .map(|t| {
                t.join().unwrap_or_else(|_| {
                    Err(JobError::Io {
                        path: paths.dir.clone(),
                        source: std::io::Error::other("stopping a cache server panicked"),
                    })
                })
            })
            .collect()
    });
    let mut servers = Vec::new();
    let mut failed = None;
    for o in outcomes {
        match o {
            Ok(o) => servers.push(o),
            Err(e) => {
                tracing::error!(error = %e, "stopping a cache server");
                failed.get_or_insert(e);
            }
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    std::fs::remove_dir_all(&paths.dir).map_err(io(&paths.dir))?;
    Ok((report, servers))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Root mounting for another user under a directory someone else may write in would let
    /// them put a link where the mount goes: refused, naming the directory.
    #[test]
    fn a_job_root_others_may_write_is_refused_for_another_users_mount() {
        use std::os::unix::fs::PermissionsExt;
        let top = tempfile::tempdir().expect("tempdir");
        let root = top.path().join("jobs");
        std::fs::create_dir(&root).expect("mkdir");
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let e = check_root_is_roots(&root).expect_err("refused");
        assert!(
            matches!(&e, JobError::UnsafeRoot { root: r, .. } if *r == root.canonicalize().expect("canonical")),
            "{e}"
        );
        let link = top.path().join("link");
        std::os::unix::fs::symlink(&root, &link).expect("symlink");
        let e = check_root_is_roots(&link).expect_err("refused");
        assert!(e.to_string().contains("not a directory"), "{e}");
    }
}
