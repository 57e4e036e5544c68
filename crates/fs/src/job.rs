//! Jobs: from a batch script's `#DW` directives to a mounted cache and back
//! (`pliant job check|setup|teardown`, what Slurm's `burst_buffer.lua` calls).
//!
//! A job's cache lives in `ROOT/<job id>/`: `mnt` (what `$DW_JOB_STRIPED_CACHE` names),
//! `cache` (the extents and journal), `mount.log` (the daemon's log) and `job.json` (what
//! teardown needs). Teardown of a job that has no `job.json` succeeds: Slurm calls it for jobs
//! that were never set up, and again after a failure.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::FsConfig;
use crate::directives::{CacheDirective, JobDirectives};
use crate::mount::{self, Hint};

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

/// What `job.json` holds.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct JobState {
    /// The job id.
    pub job_id: String,
    /// The directory the cache fronts.
    pub pfs: PathBuf,
    /// The mount point.
    pub mountpoint: PathBuf,
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
    /// I/O on a path.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The mount daemon did not come up.
    #[error("mounting {mountpoint}: {message} (log: {log})")]
    Mount {
        /// The mount point.
        mountpoint: PathBuf,
        /// What happened.
        message: String,
        /// The daemon's log.
        log: PathBuf,
    },
    /// Reaching the mount failed.
    #[error(transparent)]
    Control(#[from] mount::ControlError),
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
    let mut a: Vec<OsString> = vec![
        c.backing.clone().into(),
        mountpoint.into(),
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
    ];
    a.push("--foreground".into());
    a
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
    use std::os::unix::process::CommandExt;
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(io(log))?;
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
    mount::wait_mounted(mountpoint, &mut child, timeout).map_err(|message| {
        let tail = std::fs::read_to_string(log).unwrap_or_default();
        let tail: Vec<&str> = tail.lines().rev().take(5).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        JobError::Mount {
            mountpoint: mountpoint.to_path_buf(),
            message: if tail.is_empty() {
                message
            } else {
                format!("{message}: {}", tail.join(" | "))
            },
            log: log.to_path_buf(),
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
    /// The mount daemon's pid.
    pub pid: u32,
}

/// Mounts the job's cache (with `exe` as the `pliant` binary), preloads, records the job.
pub fn setup(
    exe: &Path,
    script: &str,
    directives: &JobDirectives,
    root: &Path,
    job_id: &str,
) -> Result<Setup, JobError> {
    let d = directives
        .cache
        .as_ref()
        .ok_or_else(|| JobError::NoCache(script.into()))?;
    let paths = JobPaths::new(root, job_id)?;
    for p in [&paths.mountpoint, &paths.cache_dir] {
        std::fs::create_dir_all(p).map_err(io(p))?;
    }
    let cfg = cache_config(d, &paths);
    let mut args: Vec<OsString> = vec!["fs".into(), "mount".into()];
    args.extend(mount_args(&cfg, &paths.mountpoint));
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
    };
    let json = serde_json::to_vec_pretty(&state).map_err(|e| JobError::Io {
        path: paths.state.clone(),
        source: std::io::Error::other(e),
    })?;
    std::fs::write(&paths.state, json).map_err(io(&paths.state))?;
    let mut preloaded_bytes = 0;
    for p in &directives.preloads {
        let rel = p
            .path
            .strip_prefix(&d.pfs)
            .map_err(|_| JobError::PreloadOutside(p.path.clone()))?;
        preloaded_bytes += mount::hint(&paths.mountpoint.join(rel), Hint::Preload)?.bytes;
    }
    Ok(Setup {
        env: vec![(
            "DW_JOB_STRIPED_CACHE".into(),
            paths.mountpoint.display().to_string(),
        )],
        preloaded_bytes,
        pid: stats.pid,
    })
}

/// Flushes (or with `discard` drops) and unmounts a job's cache, then removes its directory.
/// `Ok(None)` when there was nothing to tear down.
pub fn teardown(
    root: &Path,
    job_id: &str,
    discard: bool,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Option<mount::UnmountReport>, JobError> {
    let paths = JobPaths::new(root, job_id)?;
    let state: JobState = match std::fs::read(&paths.state) {
        Ok(b) => serde_json::from_slice(&b).map_err(|e| JobError::Io {
            path: paths.state.clone(),
            source: std::io::Error::other(e),
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(JobError::Io {
                path: paths.state.clone(),
                source: e,
            });
        }
    };
    let report = match mount::stats(&state.mountpoint) {
        Ok(_) => Some(mount::unmount(
            &state.mountpoint,
            discard,
            Duration::from_secs(600),
            progress,
        )?),
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
                    log: paths.log.clone(),
                });
            }
            None
        }
        Err(e) => return Err(e.into()),
    };
    std::fs::remove_dir_all(&paths.dir).map_err(io(&paths.dir))?;
    Ok(report)
}
