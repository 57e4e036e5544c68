//! `pliant fs …`: the transparent write-back cache (crate `pliant-fs`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use pliant_fs::{EvictionUnit, FsConfig, FsStats, FsyncMode, Hint, MountOptions};

use super::args::{Json, PolicyParams};
use super::demo::human;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Mount BACKING at MOUNTPOINT through a write-back cache in --cache-dir (or, with
    /// --servers, through a job's cache servers).
    Mount(Box<MountArgs>),
    /// Serve a striped cache's stripes of BACKING to a job's mounts (a cache server).
    Server(Box<ServerArgs>),
    /// Write every dirty extent back (progress bar), then unmount; a dead mount (its daemon
    /// killed) is detached, and its journal waits for the next mount of its cache directory.
    Unmount(UnmountArgs),
    /// A mount's capacity, usage, hit ratio, copy-up and write-back traffic, write window.
    Stat(StatArgs),
    /// Copy files (or whole directories) into the cache before they are read.
    Preload(HintArgs),
    /// Write back and drop files from the cache.
    Evict(HintArgs),
    /// Write files' dirty data back to the backing directory now, and sync it there.
    Writeback(HintArgs),
    /// Drop cached clean data of files whose backing copies changed behind the cache's back.
    Invalidate(HintArgs),
    /// Swap, roll back or show a running mount's eviction and write-back policies.
    Policy(PolicyArgs),
}

/// A running mount's policies. The policy file is read here and its source sent: the daemon
/// never opens a path a client names. A policy that does not compile or dry-run against the
/// cache as it is is refused, and the running one stays. Only the mount's owner (or root) may
/// swap.
///
/// Examples:
///   pliant fs policy /mnt/run42 load writeback fs-writeback-when-idle --param idle=10
///   pliant fs policy /mnt/run42 load evict ./my-evict.lua
///   pliant fs policy /mnt/run42 rollback writeback
///   pliant fs policy /mnt/run42 status
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct PolicyArgs {
    /// The mount point.
    mountpoint: PathBuf,
    #[command(subcommand)]
    what: PolicyWhat,
}

#[derive(clap::Subcommand)]
enum PolicyWhat {
    /// Swap in a policy (a shipped name or one .lua file with when/howmuch).
    Load {
        /// Which decision: evict or writeback.
        which: String,
        /// The policy.
        policy: PathBuf,
        #[command(flatten)]
        params: PolicyParams,
    },
    /// Go back to the policy before the last swap.
    Rollback {
        /// Which decision: evict or writeback.
        which: String,
    },
    /// The running policies' names.
    Status,
}

fn size(s: &str) -> Result<u64, String> {
    match s
        .parse::<pliant_cache::Capacity>()
        .map_err(|e| e.to_string())?
    {
        pliant_cache::Capacity::Bytes(n) => Ok(n),
        pliant_cache::Capacity::Keys(_) => {
            Err(format!("{s:?}: expected bytes (10GiB, 1MiB, 4096)"))
        }
    }
}

fn fraction(s: &str) -> Result<f64, String> {
    let (num, scale) = match s.strip_suffix('%') {
        Some(n) => (n, 0.01),
        None => (s, 1.0),
    };
    let v = num
        .trim()
        .parse::<f64>()
        .map_err(|_| format!("{s:?}: expected a percentage such as 90%"))?
        * scale;
    if v > 0.0 && v <= 1.0 {
        Ok(v)
    } else {
        Err(format!("{s:?}: must be above 0% and at most 100%"))
    }
}

/// Mount BACKING at MOUNTPOINT: every path under MOUNTPOINT is the same path under BACKING,
/// with file data kept in extents under --cache-dir and written back behind the application.
/// Without --foreground it starts the mount daemon (log in CACHE_DIR/mount.log) and returns
/// once the mount answers. BACKING, MOUNTPOINT and --cache-dir must not contain one another. A
/// dead mount at MOUNTPOINT (its daemon killed) is detached first, and what the cache's journal
/// holds is written back before the new mount serves.
///
/// Eviction runs from --high down to --low of the capacity; write-back from --dirty-high down
/// to --dirty-low, and always before a dirty extent leaves. `--fsync cache` returns once the data
/// and its journal record are durable in the cache directory (a crashed mount's next mount
/// writes them back); `--fsync backing` once the data is synced in BACKING. At most
/// multiplier × capacity bytes may be written per window (EDQUOT past it); files above
/// --max-file-size get EFBIG.
///
/// Examples:
///   pliant fs mount /lus/run42 /mnt/run42 --cache-dir /local/ssd/run42 --capacity 100GiB
///   pliant fs mount /lus/run42 /mnt/run42 --cache-dir /tmp/c --capacity 10GiB --fsync backing
///   pliant fs stat /mnt/run42
///   pliant fs unmount /mnt/run42
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct MountArgs {
    /// The slow directory to cache.
    backing: PathBuf,
    /// Where it appears (an existing directory).
    mountpoint: PathBuf,
    #[command(flatten)]
    cache: CacheArgs,
    /// Let other users in (root only), with the kernel checking the backing directory's modes.
    #[arg(long)]
    allow_other: bool,
    /// Threads serving FUSE requests. More let reads through the daemon wait for the disk side
    /// by side: on 2 cores, reads ran 40-65% slower with 1 thread than with 4, and 1 MiB writes
    /// about as fast (docs/benchmarks.md, fs-threads-32j and fs-write-32k).
    #[arg(long, default_value_t = 4)]
    fuse_threads: usize,
    /// Always read and write through the daemon. By default (Linux 6.9+, root only), reads of a
    /// file whose extents are all cached go from the kernel straight to its cache file (FUSE
    /// passthrough), and so do writes to such a file or one just created (the file is then
    /// dirty as a whole until its last writer closes; past the write window or
    /// --max-file-size such a write is refused at fsync or close).
    #[arg(long)]
    no_passthrough: bool,
    /// Send every write to the daemon at once. By default a mount without passthrough (an
    /// ordinary user's, or --no-passthrough) lets the kernel cache writes and pass them on
    /// later in large requests, much faster for small writes; a write past the write window
    /// or --max-file-size is then refused at fsync or close instead of at the write, and a
    /// file changed in the backing directory behind the cache is seen only once the kernel
    /// forgets it. With passthrough, this keeps writes out of passthrough.
    #[arg(long)]
    no_write_cache: bool,
    /// Keep file data out of the kernel's page cache (FUSE direct_io, for opens not in
    /// passthrough): each read() and write() is one request to the daemon, which sees it at
    /// once. For jobs that write in large blocks (checkpoints), one copy fewer: 1 MiB writes +
    /// fsync ran 1.4x as fast as the default on an ordinary user's mount, with about half its
    /// CPU; small reads and writes go one round trip each, 4 KiB ones at a fifth of the
    /// default's speed (docs/benchmarks.md, fs-direct-io-32m). A write past the write window or
    /// --max-file-size fails at that write. On a root mount, use it with --no-passthrough
    /// (passthrough already writes with one copy).
    #[arg(long)]
    direct_io: bool,
    /// Set the kernel's read-ahead for this mount (root only; 4MiB suggested): the size of the
    /// read requests reads through the kernel's page cache send the daemon, 128 KiB by default
    /// whatever the daemon asks, and only root may raise it. Warm 1 MiB reads through the
    /// daemon ran 12-15% faster with 4MiB, side by side (docs/benchmarks.md,
    /// fs-read-ahead-32o); a program that maps a file and touches it at random makes the
    /// kernel read this much around each page it faults in. An administrator can set it for
    /// ordinary users' mounts (docs/fs.md).
    #[arg(long, value_parser = size, value_name = "SIZE")]
    kernel_read_ahead: Option<u64>,
    /// Serve the counters to Prometheus at ADDR:PORT (`/metrics`). The endpoint has no
    /// authentication: an address other than loopback needs --unsafe-no-auth.
    #[arg(long, value_name = "ADDR:PORT")]
    metrics: Option<std::net::SocketAddr>,
    /// Let --metrics listen on an address other than loopback (a firewall must keep everyone
    /// else out).
    #[arg(long)]
    unsafe_no_auth: bool,
    /// Stay in the foreground (the daemon itself); Ctrl-C or SIGTERM unmounts after writing back.
    #[arg(long)]
    foreground: bool,
    #[command(flatten)]
    striped: StripedArgs,
}

/// The cache's own settings, the same for a mount and a cache server.
#[derive(clap::Args)]
pub struct CacheArgs {
    /// Where extents and the journal go (created, mode 0700; one mount at a time).
    #[arg(long, value_name = "DIR")]
    cache_dir: PathBuf,
    /// How much file data the cache holds (a striped mount holds none: its servers do).
    #[arg(long, value_parser = size, value_name = "SIZE")]
    capacity: Option<u64>,
    /// The unit of copy-up and write-back (a power of two, at least 4KiB).
    #[arg(long, value_parser = size, default_value = "1MiB")]
    extent: u64,
    /// Eviction starts above this share of the capacity ...
    #[arg(long, value_parser = fraction, default_value = "90%")]
    high: f64,
    /// ... and stops at this one.
    #[arg(long, value_parser = fraction, default_value = "70%")]
    low: f64,
    /// Write-back starts above this share of the capacity dirty ...
    #[arg(long, value_parser = fraction, default_value = "45%")]
    dirty_high: f64,
    /// ... and stops at this one.
    #[arg(long, value_parser = fraction, default_value = "20%")]
    dirty_low: f64,
    /// Threads writing back.
    #[arg(long, default_value_t = 8)]
    writeback_threads: usize,
    /// Extents copied up ahead of a reader going through a file in order, at most (the
    /// window doubles from 1 with each read in order; 0: no read-ahead).
    #[arg(long, default_value_t = 8, value_name = "EXTENTS")]
    read_ahead: u64,
    /// When fsync returns: once durable in the cache (and journaled), or in BACKING.
    #[arg(long, value_parser = ["cache", "backing"], default_value = "cache")]
    fsync: String,
    /// Writes that would make a file larger get EFBIG.
    #[arg(long, value_parser = size, default_value = "1GiB")]
    max_file_size: u64,
    /// At most this many times the capacity written per window (DataWarp's default: 10).
    #[arg(long, default_value_t = 10)]
    write_window_multiplier: u64,
    /// The window's length in seconds (DataWarp's default: 86400).
    #[arg(long, default_value_t = 86_400)]
    write_window_length: u64,
    /// When to evict and down to what: a shipped policy or a Lua file (Mantle's `when` and
    /// `howmuch` over the cache's metrics; `pliant policy list` shows the `fs-` ones).
    #[arg(long, default_value = "fs-evict-watermarks", value_name = "NAME|FILE")]
    evict_policy: PathBuf,
    /// When to write back and down to what (e.g. fs-writeback-when-idle, which also writes
    /// everything back once the job has been idle for `--param idle=SECONDS`).
    #[arg(
        long,
        default_value = "fs-writeback-watermarks",
        value_name = "NAME|FILE"
    )]
    writeback_policy: PathBuf,
    #[command(flatten)]
    params: PolicyParams,
    /// How often the policies decide (and whenever the cache moves by 1/64 of its capacity).
    #[arg(long, default_value = "1s", value_parser = pliant_policy::parse_interval)]
    policy_interval: Duration,
    /// Evict whole files in LRU order (as DataWarp) or single extents.
    #[arg(long, value_parser = ["file", "extent"], default_value = "file")]
    evict: String,
}

/// Where a striped mount's data goes (`pliant fs server`s), and how it is cut.
#[derive(clap::Args)]
pub struct StripedArgs {
    /// Make this a striped mount: file data goes, stripe by stripe, to these cache servers
    /// (HOST:PORT, comma-separated, in the same order on every node of the job).
    #[arg(long, value_delimiter = ',', value_name = "HOST:PORT,...")]
    servers: Vec<String>,
    /// The cache's secret, which its servers were given (a file only its owner may read).
    #[arg(long, value_name = "FILE", requires = "servers")]
    secret_file: Option<PathBuf>,
    /// The stripe: a multiple of 1 MiB from 1 MiB to 256 MiB (the servers' extent is 1 MiB).
    #[arg(long, value_parser = size, default_value = "1MiB", requires = "servers")]
    stripe: u64,
    /// How long to wait for a server before the application gets EIO.
    #[arg(long, default_value = "30s", value_parser = pliant_policy::parse_interval, requires = "servers")]
    server_timeout: Duration,
}

/// Serve stripes of BACKING to a job's striped mounts: a cache server. The data it is sent is
/// kept in extents under --cache-dir, journaled (`--fsync cache`: an fsync survives kill -9
/// of the server; the next server over the same cache directory writes it back) and written
/// back to BACKING by its policies. Every connection must give the secret in --secret-file;
/// every request is checked against BACKING's permissions for the uid it carries. Stops on
/// SIGINT or SIGTERM after writing everything back. `pliant job` starts the servers of a job;
/// run one by hand to try it.
///
/// Examples:
///   head -c 32 /dev/urandom | base64 > secret && chmod 600 secret
///   pliant fs server /lus/run42 --cache-dir /local/ssd/s0 --capacity 100GiB --listen 0.0.0.0:7420 --secret-file secret
///   pliant fs mount /lus/run42 /mnt/run42 --cache-dir /tmp/m0 --servers n1:7420,n2:7420 --secret-file secret
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct ServerArgs {
    /// The slow directory whose files it caches.
    backing: PathBuf,
    #[command(flatten)]
    cache: CacheArgs,
    /// Where to listen (port 0: any free port, reported once ready).
    #[arg(long, default_value = "127.0.0.1:0", value_name = "ADDR:PORT")]
    listen: std::net::SocketAddr,
    /// The cache's secret: the file's first line (a file only its owner may read).
    #[arg(long, value_name = "FILE")]
    secret_file: PathBuf,
    /// Keep the names of the files this server holds unwritten data of in FILE (a JSON array,
    /// rewritten within 2 s of a change; empty once all is written back): put it where it
    /// outlives this server's storage, so a server lost for good is reported with its files.
    #[arg(long, value_name = "FILE")]
    dirty_list: Option<PathBuf>,
    #[command(flatten)]
    json: Json,
}

#[derive(clap::Args)]
pub struct UnmountArgs {
    /// The mount point.
    mountpoint: PathBuf,
    /// Drop dirty data instead of writing it back (DataWarp's teardown after a failed job).
    #[arg(long)]
    discard: bool,
    #[command(flatten)]
    json: Json,
}

#[derive(clap::Args)]
pub struct StatArgs {
    /// The mount point (or any path inside it).
    mountpoint: PathBuf,
    #[command(flatten)]
    json: Json,
}

#[derive(clap::Args)]
pub struct HintArgs {
    /// Files or directories inside a mount.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    #[command(flatten)]
    json: Json,
}

pub fn run(c: Command) -> anyhow::Result<ExitCode> {
    match c {
        Command::Mount(a) => mount(&a),
        Command::Server(a) => server(&a),
        Command::Unmount(a) => unmount(&a),
        Command::Stat(a) => stat(&a),
        Command::Preload(a) => hint(&a, Hint::Preload),
        Command::Evict(a) => hint(&a, Hint::Evict),
        Command::Writeback(a) => hint(&a, Hint::Writeback),
        Command::Invalidate(a) => hint(&a, Hint::Invalidate),
        Command::Policy(a) => policy(&a),
    }
}

fn policy(a: &PolicyArgs) -> anyhow::Result<ExitCode> {
    let which = |w: &str| w.parse::<pliant_fs::Trigger>().map_err(anyhow::Error::msg);
    let msg = match &a.what {
        PolicyWhat::Load {
            which: w,
            policy,
            params,
        } => {
            let source = pliant_policy::PolicySource::resolve(std::slice::from_ref(policy))?;
            let pliant_policy::Style::Functions(chunk) = &source.style else {
                bail!(
                    "{}: only function-style policies (one .lua file) can be sent to a mount",
                    source.name
                );
            };
            let params = (!params.params.is_empty()).then(|| {
                params
                    .params
                    .iter()
                    .map(|(k, v)| format!("{k}={}", super::args::param_text(v)))
                    .collect()
            });
            pliant_fs::mount::load_policy(
                &a.mountpoint,
                which(w)?,
                &source.name,
                &chunk.code,
                params,
            )?
        }
        PolicyWhat::Rollback { which: w } => {
            pliant_fs::mount::rollback_policy(&a.mountpoint, which(w)?)?
        }
        PolicyWhat::Status => {
            let s = pliant_fs::mount::stats(&a.mountpoint)?;
            format!(
                "evict: {}\nwriteback: {}\npolicy errors: {}",
                s.evict_policy, s.writeback_policy, s.policy_errors
            )
        }
    };
    println!("{msg}");
    Ok(ExitCode::SUCCESS)
}

/// A striped mount's cache directory holds only its lock: its capacity is not used.
const STRIPED_MOUNT_CAPACITY: u64 = 1 << 30;

fn config(backing: &Path, a: &CacheArgs, striped: bool) -> anyhow::Result<FsConfig> {
    let capacity = match (a.capacity, striped) {
        (Some(c), _) => c,
        (None, true) => STRIPED_MOUNT_CAPACITY,
        (None, false) => bail!(
            "--capacity: required (how much file data the cache holds), except for a striped mount (--servers)"
        ),
    };
    let mut c = FsConfig::new(backing.to_path_buf(), a.cache_dir.clone(), capacity);
    c.extent = a.extent;
    c.high = a.high;
    c.low = a.low;
    c.dirty_high = a.dirty_high;
    c.dirty_low = a.dirty_low;
    c.writeback_threads = a.writeback_threads;
    c.read_ahead = a.read_ahead;
    c.fsync = a.fsync.parse::<FsyncMode>()?;
    c.max_file_size = a.max_file_size;
    c.write_window_multiplier = a.write_window_multiplier;
    c.write_window = Duration::from_secs(a.write_window_length);
    c.eviction = a.evict.parse::<EvictionUnit>()?;
    c.policies = pliant_fs::Policies {
        evict: pliant_policy::PolicySource::resolve(std::slice::from_ref(&a.evict_policy))?,
        writeback: pliant_policy::PolicySource::resolve(std::slice::from_ref(&a.writeback_policy))?,
        params: a.params.params.iter().cloned().collect(),
        interval: a.policy_interval,
    };
    c.validate().map_err(|e| anyhow::anyhow!("--{e}"))?;
    Ok(c)
}

/// A secret from the first line of `path`, refused if other users could read it.
fn read_secret(path: &Path) -> anyhow::Result<String> {
    use std::os::unix::fs::MetadataExt;
    let meta =
        std::fs::metadata(path).with_context(|| format!("--secret-file {}", path.display()))?;
    if meta.mode() & 0o077 != 0 {
        bail!(
            "--secret-file {}: its group or other users may read it (mode {:o}); `chmod 600` it",
            path.display(),
            meta.mode() & 0o777
        );
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--secret-file {}", path.display()))?;
    let secret = text.lines().next().unwrap_or("").trim().to_string();
    if secret.is_empty() {
        bail!("--secret-file {}: empty", path.display());
    }
    Ok(secret)
}

fn striped_options(a: &StripedArgs) -> anyhow::Result<Option<pliant_fs::striped::ClientOptions>> {
    if a.servers.is_empty() {
        return Ok(None);
    }
    let Some(secret_file) = &a.secret_file else {
        bail!("--servers: needs --secret-file, the secret the cache servers were given");
    };
    pliant_fs::striped::Layout::new(a.stripe, a.servers.len())
        .map_err(|e| anyhow::anyhow!("--stripe: {e}"))?;
    Ok(Some(pliant_fs::striped::ClientOptions {
        servers: a.servers.clone(),
        secret: read_secret(secret_file)?,
        stripe: a.stripe,
        timeout: a.server_timeout,
    }))
}

fn server(a: &ServerArgs) -> anyhow::Result<ExitCode> {
    let cfg = config(&a.backing, &a.cache, false)?;
    let secret = read_secret(&a.secret_file)?;
    let opts = pliant_fs::striped::ServerOptions {
        cache: cfg,
        listen: a.listen,
        secret,
        dirty_list: a.dirty_list.clone(),
    };
    let json = a.json.json;
    let stats = pliant_fs::striped::server::run_foreground(opts, |addr, recovery| {
        if json {
            println!(
                "{}",
                serde_json::json!({
                    "addr": addr.to_string(),
                    "pid": std::process::id(),
                    "recovered": recovery,
                })
            );
        } else {
            if recovery.files > 0 {
                eprintln!(
                    "recovered {} extents ({} bytes) of {} files an earlier server had not written back",
                    recovery.extents, recovery.bytes, recovery.files
                );
            }
            println!(
                "serving {} on {addr} (pid {})",
                a.backing.display(),
                std::process::id()
            );
        }
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
    })?;
    eprintln!(
        "stopped: {} written back to {}",
        human(stats.writeback_bytes),
        a.backing.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn mount(a: &MountArgs) -> anyhow::Result<ExitCode> {
    let striped = striped_options(&a.striped)?;
    let cfg = config(&a.backing, &a.cache, striped.is_some())?;
    let opts = MountOptions {
        cache: cfg,
        mountpoint: a.mountpoint.clone(),
        allow_other: a.allow_other,
        fuse_threads: a.fuse_threads,
        passthrough: !a.no_passthrough,
        write_cache: !a.no_write_cache,
        direct_io: a.direct_io,
        kernel_read_ahead: a.kernel_read_ahead,
        metrics: a.metrics,
        unsafe_no_auth: a.unsafe_no_auth,
        striped,
    };
    if a.foreground {
        let report = pliant_fs::mount::run_foreground(&opts, |ready| {
            let rec = ready.recovery;
            if ready.detached_dead_mount {
                eprintln!(
                    "{}: detached the mount of a daemon that had died",
                    a.mountpoint.display()
                );
            }
            if let Some(addr) = ready.metrics {
                eprintln!("metrics on http://{addr}/metrics");
            }
            if rec.files > 0 {
                eprintln!(
                    "recovered {} extents ({} bytes) of {} files an earlier mount had not written back",
                    rec.extents, rec.bytes, rec.files
                );
            }
            eprintln!(
                "mounted {} at {} (pid {})",
                a.backing.display(),
                a.mountpoint.display(),
                std::process::id()
            );
        })?;
        eprintln!(
            "unmounted {}: {} written back{}",
            a.mountpoint.display(),
            human(report.stats.writeback_bytes),
            if report.discarded {
                ", dirty data discarded"
            } else {
                ""
            }
        );
        return Ok(ExitCode::SUCCESS);
    }
    // Checked here too, so that the answer reaches the user rather than the daemon's log; a
    // dead mount (its daemon killed) is detached first, as the checks cannot see through it.
    if pliant_fs::mount::detach_dead(&a.mountpoint)? {
        eprintln!(
            "{}: the mount there had lost its daemon (killed?): detached it; what its journal holds is written back before the new mount serves",
            a.mountpoint.display()
        );
    }
    opts.check()?;
    std::fs::create_dir_all(&a.cache.cache_dir)
        .with_context(|| a.cache.cache_dir.display().to_string())?;
    let log = a.cache.cache_dir.join("mount.log");
    let exe = std::env::current_exe().context("finding the pliant binary")?;
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    args.push("--foreground".into());
    let stats =
        pliant_fs::job::spawn_daemon(&exe, &args, &a.mountpoint, &log, Duration::from_secs(30))?;
    println!(
        "mounted {} at {} (daemon pid {}, log {})",
        a.backing.display(),
        a.mountpoint.display(),
        stats.pid,
        log.display()
    );
    if let Some(addr) = &stats.metrics_addr {
        eprintln!("metrics on http://{addr}/metrics");
    }
    Ok(ExitCode::SUCCESS)
}

fn unmount(a: &UnmountArgs) -> anyhow::Result<ExitCode> {
    let bar = indicatif::ProgressBar::new(0).with_style(
        indicatif::ProgressStyle::with_template(
            "writing back {bar:40} {bytes}/{total_bytes} ({bytes_per_sec}, {eta} left)",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let report = match pliant_fs::mount::unmount(
        &a.mountpoint,
        a.discard,
        Duration::from_secs(600),
        Duration::from_secs(600),
        &mut |dirty, total| {
            bar.set_length(total);
            bar.set_position(total.saturating_sub(dirty));
        },
    ) {
        Ok(r) => r,
        // Dropping the data was asked for anyway: the mount is gone, which is what was wanted.
        Err(e @ pliant_fs::mount::ControlError::Dead(_)) if a.discard => {
            bar.finish_and_clear();
            eprintln!("{e}");
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) => return Err(e.into()),
    };
    bar.finish_and_clear();
    if a.json.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else if report.discarded {
        println!(
            "unmounted {}: {} of dirty data discarded",
            a.mountpoint.display(),
            human(report.dirty_bytes_at_start)
        );
    } else {
        println!(
            "unmounted {}: {} written back in {:.1} s",
            a.mountpoint.display(),
            human(report.dirty_bytes_at_start),
            report.flush_secs
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn stat(a: &StatArgs) -> anyhow::Result<ExitCode> {
    let s: FsStats = pliant_fs::mount::stats(&a.mountpoint)?;
    if a.json.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
        return Ok(ExitCode::SUCCESS);
    }
    let pct = |x: u64| {
        if s.capacity_bytes == 0 {
            0.0
        } else {
            100.0 * x as f64 / s.capacity_bytes as f64
        }
    };
    println!(
        "backing      {} (daemon pid {}, up {:.0} s)",
        s.backing, s.pid, s.uptime_secs
    );
    if s.servers > 0 {
        println!(
            "striped      over {} cache servers: the lines below add up theirs",
            s.servers
        );
    }
    println!("capacity     {}", human(s.capacity_bytes));
    println!(
        "used         {} ({:.1}%), {} files",
        human(s.used_bytes),
        pct(s.used_bytes),
        s.cached_files
    );
    println!(
        "dirty        {} ({:.1}%)",
        human(s.dirty_bytes),
        pct(s.dirty_bytes)
    );
    // The ratio is of read requests' bytes that found their extent cached; what reads made
    // the cache fetch from the backing directory is on the copy-up line, from the same reads
    // (a read's first touch copies a whole extent up, and the next reads of it find it).
    println!(
        "reads        {} through the daemon in {} requests: {:.1}% found their extent cached ({}), {} waited for a copy-up",
        human(s.read_hit_bytes + s.read_miss_bytes),
        s.read_requests,
        100.0 * s.hit_ratio,
        human(s.read_hit_bytes),
        human(s.read_miss_bytes)
    );
    println!("written      {}", human(s.written_bytes));
    println!(
        "copy-up      {} ({}/s mean): {} for reads, {} preloaded, {} under partial writes",
        human(s.copy_up_bytes),
        human(s.copy_up_rate as u64),
        human(s.copy_up_read_bytes),
        human(s.copy_up_preload_bytes),
        human(
            s.copy_up_bytes
                .saturating_sub(s.copy_up_read_bytes + s.copy_up_preload_bytes)
        )
    );
    println!(
        "write-back   {} ({}/s mean), {} errors retried",
        human(s.writeback_bytes),
        human(s.writeback_rate as u64),
        s.writeback_errors
    );
    println!(
        "evicted      {} extents, {}",
        s.evicted_extents,
        human(s.evicted_bytes)
    );
    println!(
        "write window {} of {} used, {:.0} s left; {} writes refused (EDQUOT), {} too large (EFBIG)",
        human(s.window_used_bytes),
        human(s.window_limit_bytes),
        s.window_left_secs,
        s.edquot_writes,
        s.efbig_writes
    );
    println!(
        "revalidated  {} files changed behind the cache; {} changed while it held their unwritten data (its data won)",
        s.revalidated_files, s.conflicting_files
    );
    Ok(ExitCode::SUCCESS)
}

fn hint(a: &HintArgs, kind: Hint) -> anyhow::Result<ExitCode> {
    let mut reports = Vec::new();
    let mut left_out = 0;
    for p in &a.paths {
        let r = pliant_fs::mount::hint(p, kind)?;
        left_out += r.not_fitted;
        let mut v = serde_json::json!({"path": p, "files": r.files, "bytes": r.bytes, "skipped": r.skipped});
        if kind == Hint::Preload {
            v["kept_bytes"] = r.kept_bytes.into();
            v["dropped_bytes"] = r.dropped_bytes.into();
            v["not_fitted"] = r.not_fitted.into();
            v["not_fitted_bytes"] = r.not_fitted_bytes.into();
        }
        reports.push(v);
        if kind == Hint::Preload && r.not_fitted > 0 {
            eprintln!(
                "{}: {} files ({}) not preloaded: they do not fit below the cache's eviction threshold with what this preload brought in (copying them would only push out what is cached)",
                p.display(),
                r.not_fitted,
                human(r.not_fitted_bytes)
            );
        }
        if !a.json.json {
            let verb = match kind {
                Hint::Preload => "copied up",
                Hint::Evict => "dropped",
                Hint::Writeback => "written back",
                Hint::Invalidate => "dropped (clean)",
            };
            println!(
                "{}: {} files, {} {verb}",
                p.display(),
                r.files,
                human(r.bytes)
            );
            if r.skipped > 0 {
                let may = match kind {
                    Hint::Preload | Hint::Invalidate => "read",
                    Hint::Evict | Hint::Writeback => "write",
                };
                println!(
                    "  {} files or directories left alone: you may not {may} them",
                    r.skipped
                );
            }
            if kind == Hint::Preload && r.files > 0 {
                println!(
                    "  {} of them in the cache now{}",
                    human(r.kept_bytes),
                    if r.dropped_bytes > 0 {
                        format!(
                            ", {} evicted again by the eviction policy",
                            human(r.dropped_bytes)
                        )
                    } else {
                        String::new()
                    }
                );
            }
        }
    }
    if a.json.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    }
    // What was asked for is not all in the cache: a job script must not take it for done.
    Ok(if left_out > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// `pliant job …`: DataWarp job directives to a mounted cache and back.
#[derive(clap::Subcommand)]
pub enum JobCommand {
    /// Check a batch script's `#DW` directives (what Slurm runs at submission).
    Check {
        /// The batch script.
        script: PathBuf,
    },
    /// Mount the cache a script's `#DW jobdw type=cache` asks for, run its `#DW preload`s, and
    /// print the job's environment (`DW_JOB_STRIPED_CACHE=…`), one NAME=VALUE per line.
    ///
    /// Exit status 3 when the script is at fault (its directives, or the pfs and preload paths
    /// they name, as found now), 1 for anything else (FUSE, the disk, the mount): a Slurm Prolog
    /// fails (and Slurm drains the node) only for the second.
    Setup {
        /// The batch script.
        script: PathBuf,
        /// The job's id (names its directory under --root).
        #[arg(long)]
        job_id: String,
        /// Where jobs' mounts and caches go.
        #[arg(long, env = "PLIANT_JOB_ROOT", default_value = "/tmp/pliant-jobs")]
        root: PathBuf,
        /// Mount for this user (run as root, e.g. by Slurm's Prolog on the job's node): the
        /// mount `--allow-other`, and the job's directory root's with an ACL that lets this user
        /// alone through. The root must be root's and writable by root alone
        #[arg(long)]
        uid: Option<u32>,
        /// Make it one cache for the whole job (`access_mode=striped` across servers): start this
        /// many `pliant fs server`s on this machine, each with its share of the capacity in the
        /// job's directory, and mount striped over them (0: the mount's own cache). Teardown
        /// stops them after each has written everything back.
        #[arg(
            long,
            default_value_t = 0,
            value_name = "N",
            conflicts_with = "rendezvous"
        )]
        cache_servers: usize,
        /// One cache server on each of the job's nodes instead (what each node's setup runs):
        /// this node's server leaves its address in DIR, a directory every node's setup sees
        /// and only they may read (it holds the cache's secret), and the mount waits there for
        /// --nodes servers, mounting over all of them in the order of the nodes' names.
        #[arg(long, value_name = "DIR", requires_all = ["nodes", "node"])]
        rendezvous: Option<PathBuf>,
        /// How many nodes the job has (with --rendezvous).
        #[arg(long, value_name = "N")]
        nodes: Option<usize>,
        /// This node's name (with --rendezvous; letters, digits, '.', '_', '-').
        #[arg(long, value_name = "NAME")]
        node: Option<String>,
        /// What this node's server listens on (with --rendezvous).
        #[arg(long, default_value = "0.0.0.0", value_name = "IP")]
        listen: std::net::IpAddr,
        /// The host name or address other nodes reach this node's server at (with
        /// --rendezvous; default: this node's host name).
        #[arg(long, value_name = "HOST")]
        advertise: Option<String>,
    },
    /// Write the job's cache back, unmount it and remove its directory (nothing to do is fine).
    Teardown {
        /// The job's id.
        #[arg(long)]
        job_id: String,
        /// Drop dirty data instead (a failed or cancelled job).
        #[arg(long)]
        discard: bool,
        /// Give up when write-back keeps failing with nothing written back for this many
        /// seconds: the teardown fails and the cache stays mounted with its data
        #[arg(long, value_name = "SECS", default_value_t = 600)]
        give_up_after: u64,
        /// Where jobs' mounts and caches go.
        #[arg(long, env = "PLIANT_JOB_ROOT", default_value = "/tmp/pliant-jobs")]
        root: PathBuf,
    },
}

fn read_script(script: &Path) -> anyhow::Result<(String, pliant_fs::directives::JobDirectives)> {
    let text = std::fs::read_to_string(script).with_context(|| script.display().to_string())?;
    let name = script.display().to_string();
    let d = pliant_fs::directives::parse_script(&name, &text)?;
    Ok((name, d))
}

/// `pliant job setup`'s exit status when the job's script is at fault (see `--help`).
const JOBS_FAULT: u8 = 3;

/// Whether a setup failed for the job's own script: its directives (read or checked), or the
/// paths they name.
fn jobs_fault(e: &anyhow::Error) -> bool {
    e.downcast_ref::<pliant_fs::job::JobError>()
        .is_some_and(pliant_fs::job::JobError::is_the_jobs_fault)
        || e.downcast_ref::<pliant_fs::directives::DirectiveError>()
            .is_some()
}

pub fn run_job(c: JobCommand) -> anyhow::Result<ExitCode> {
    match c {
        JobCommand::Check { script } => {
            let (name, d) = read_script(&script)?;
            d.check_paths(&name)?;
            match &d.cache {
                Some(c) => eprintln!(
                    "{name}: cache of {} over {} ({} preloads)",
                    human(c.capacity_bytes),
                    c.pfs.display(),
                    d.preloads.len()
                ),
                None => eprintln!("{name}: no #DW directives"),
            }
            Ok(ExitCode::SUCCESS)
        }
        JobCommand::Setup {
            script,
            job_id,
            root,
            uid,
            cache_servers,
            rendezvous,
            nodes,
            node,
            listen,
            advertise,
        } => {
            let striping = match (rendezvous, nodes, node) {
                (Some(rendezvous), Some(nodes), Some(node)) => {
                    let advertise = match advertise {
                        Some(a) => a,
                        None => nix::unistd::gethostname()
                            .context("this node's host name (give --advertise)")?
                            .to_string_lossy()
                            .into_owned(),
                    };
                    pliant_fs::job::Striping::Nodes {
                        rendezvous,
                        nodes,
                        node,
                        listen,
                        advertise,
                    }
                }
                _ if cache_servers > 0 => pliant_fs::job::Striping::Local(cache_servers),
                _ => pliant_fs::job::Striping::None,
            };
            let set_up = || -> anyhow::Result<pliant_fs::job::Setup> {
                let (name, d) = read_script(&script)?;
                if d.cache.is_none() {
                    return Err(pliant_fs::job::JobError::NoCache(name).into());
                }
                let exe = std::env::current_exe().context("finding the pliant binary")?;
                let owner = uid.map(|uid| pliant_fs::job::Owner { uid });
                Ok(pliant_fs::job::setup(
                    &exe, &name, &d, &root, &job_id, owner, &striping,
                )?)
            };
            let s = match set_up() {
                Ok(s) => s,
                Err(e) if jobs_fault(&e) => {
                    eprintln!("error: {}", super::chain(&e));
                    return Ok(ExitCode::from(JOBS_FAULT));
                }
                Err(e) => return Err(e),
            };
            if s.not_preloaded.0 > 0 {
                eprintln!(
                    "job {job_id}: {} files ({}) of the #DW preloads not preloaded: larger than the cache holds before it evicts",
                    s.not_preloaded.0,
                    human(s.not_preloaded.1)
                );
            }
            for (k, v) in &s.env {
                println!("{k}={v}");
            }
            Ok(ExitCode::SUCCESS)
        }
        JobCommand::Teardown {
            job_id,
            discard,
            give_up_after,
            root,
        } => {
            use pliant_fs::job::Teardown;
            let give_up_after = Duration::from_secs(give_up_after);
            let exe = std::env::current_exe().context("finding the pliant binary")?;
            let (what, servers) = pliant_fs::job::teardown(
                &exe,
                &root,
                &job_id,
                discard,
                give_up_after,
                &mut |_, _| {},
            )?;
            for s in &servers {
                if s.recovered_files > 0 {
                    eprintln!(
                        "job {job_id}: cache server {} had died; its journal wrote back {} of {} files",
                        s.addr,
                        human(s.recovered_bytes),
                        s.recovered_files
                    );
                }
            }
            if !servers.is_empty() {
                eprintln!(
                    "job {job_id}: {} cache servers stopped, everything they held {}",
                    servers.len(),
                    if discard { "dropped" } else { "written back" }
                );
            }
            match what {
                Teardown::Unmounted(r) => eprintln!(
                    "job {job_id}: {} {}",
                    human(r.dirty_bytes_at_start),
                    if r.discarded {
                        "discarded"
                    } else {
                        "written back"
                    }
                ),
                Teardown::NotMounted => {
                    eprintln!("job {job_id}: not mounted any more; its directory removed")
                }
                Teardown::LeftoversRemoved => eprintln!(
                    "job {job_id}: removed what a setup that did not finish left in {}",
                    root.join(&job_id).display()
                ),
                _ => eprintln!("job {job_id}: nothing to tear down"),
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
