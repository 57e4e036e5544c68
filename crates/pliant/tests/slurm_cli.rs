//! Pliant's burst buffer under a real Slurm: Debian's Slurm 22.05 on this machine, one node
//! (three for the job striped across nodes, each with a network namespace of its own too),
//! started by tools/slurm/cluster.sh with its own munged, each slurmd in a mount namespace of
//! its own (the "compute node"). Ordinary users `sbatch` scripts with `#DW` directives; the
//! controller's burst_buffer.lua checks and hands them over, the node's Prolog mounts the cache
//! for the job's user and its Epilog writes it back. Run as root (the daemons are root's); in
//! CI (`CI` set) a cluster that cannot start fails the test, elsewhere a machine without Slurm
//! or without root skips it, saying so.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a job may take to go through stage-in, run and stage-out.
const JOB_LIMIT: Duration = Duration::from_secs(120);

/// A cluster in a temporary directory, of one node or more (nodes n1..nN, each in network and
/// mount namespaces of its own); stopped (each daemon by its pid, the network removed) when
/// dropped.
struct Cluster {
    dir: tempfile::TempDir,
    conf: PathBuf,
    /// The first node's slurmd (the only one's, in a one-node cluster).
    slurmd_pid: u32,
    /// Every node's slurmd, node n1's first.
    slurmd_pids: Vec<u32>,
    stopped: bool,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/slurm/cluster.sh")
}

/// Whether this machine can run the cluster: root, and Slurm and munge installed. In CI it must.
fn slurm_possible() -> bool {
    let missing: Vec<&str> = ["munged", "slurmctld", "slurmd", "sbatch", "scontrol"]
        .into_iter()
        .filter(|c| {
            !Command::new("sh")
                .args(["-c", &format!("command -v {c}")])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .collect();
    let why = if !nix::unistd::geteuid().is_root() {
        Some("needs root to run slurmctld, slurmd and munged".to_string())
    } else if !missing.is_empty() {
        Some(format!(
            "{} missing (packages munge slurmctld slurmd slurm-client slurm-wlm-basic-plugins; tools/test.sh installs them)",
            missing.join(", ")
        ))
    } else if !Path::new("/dev/fuse").exists() {
        Some("no /dev/fuse for the job's cache".to_string())
    } else {
        None
    };
    match why {
        None => true,
        Some(why) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI: the Slurm tests must run: {why}"
            );
            pliant_testdata::skip(&format!("Slurm test skipped: {why}"));
            false
        }
    }
}

/// Whether nodes of their own network can be made here (cluster.sh's PLIANT_SLURM_NODES > 1):
/// `ip` and `nsenter`, and CAP_NET_ADMIN (a container may be run without it). In CI it must.
fn nodes_possible() -> bool {
    let has = |c: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {c}")])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    // CAP_NET_ADMIN is capability 12.
    let net_admin = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|c| u64::from_str_radix(c.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << 12) != 0);
    let why = if !has("ip") || !has("nsenter") {
        "ip or nsenter missing (packages iproute2 util-linux; tools/test.sh installs them)"
    } else if !net_admin {
        "no CAP_NET_ADMIN for the nodes' network namespaces"
    } else {
        return true;
    };
    assert!(
        std::env::var_os("CI").is_none(),
        "CI: the Slurm test of several nodes must run: {why}"
    );
    pliant_testdata::skip(&format!("Slurm test of several nodes skipped: {why}"));
    false
}

impl Cluster {
    fn start(pool_bytes: u64) -> Option<Self> {
        Self::start_nodes(pool_bytes, 1)
    }

    /// A cluster of `nodes` nodes (cluster.sh's PLIANT_SLURM_NODES).
    fn start_nodes(pool_bytes: u64, nodes: usize) -> Option<Self> {
        if !slurm_possible() || (nodes > 1 && !nodes_possible()) {
            return None;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let out = Command::new(script())
            .args(["start", dir.path().to_str().expect("utf-8")])
            .env("PLIANT_SLURM_NODES", nodes.to_string())
            .env("PLIANT_BIN", env!("CARGO_BIN_EXE_pliant"))
            .env("PLIANT_BB_POOL_BYTES", pool_bytes.to_string())
            .env("PLIANT_BB_STAGE_OUT_WAIT", "60")
            // A write-back that keeps failing fails the Epilog's teardown in seconds, not ten
            // minutes: what the stage-out failure test waits for.
            .env("PLIANT_BB_GIVE_UP_AFTER", "3")
            .output()
            .expect("run tools/slurm/cluster.sh");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut c = Cluster {
            conf: dir.path().join("slurm.conf"),
            dir,
            slurmd_pid: 0,
            slurmd_pids: Vec::new(),
            stopped: false,
        };
        assert!(
            out.status.success(),
            "tools/slurm/cluster.sh start failed (Slurm or munge did not come up): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        c.slurmd_pid = text
            .lines()
            .find_map(|l| l.strip_prefix("export SLURMD_PID="))
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no SLURMD_PID in cluster.sh's output: {text}"));
        c.slurmd_pids = if nodes == 1 {
            vec![c.slurmd_pid]
        } else {
            text.lines()
                .find_map(|l| l.strip_prefix("export SLURMD_PIDS="))
                .map(|p| {
                    p.trim_matches('\'')
                        .split_whitespace()
                        .map(|p| p.parse().expect("a pid"))
                        .collect()
                })
                .unwrap_or_default()
        };
        assert_eq!(
            c.slurmd_pids.len(),
            nodes,
            "one slurmd a node in cluster.sh's output: {text}"
        );
        Some(c)
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A Slurm command, as root.
    fn cmd(&self, args: &[&str]) -> Output {
        Command::new(args[0])
            .args(&args[1..])
            .env("SLURM_CONF", &self.conf)
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", args[0]))
    }

    /// `sbatch --parsable SCRIPT` as `user`, in `dir`.
    fn sbatch_as(&self, user: &User, script: &Path, dir: &Path) -> Output {
        Command::new("setpriv")
            .args([
                format!("--reuid={}", user.uid),
                format!("--regid={}", user.gid),
                "--clear-groups".into(),
                "sbatch".into(),
                "--parsable".into(),
            ])
            .arg(script)
            .env("SLURM_CONF", &self.conf)
            .current_dir(dir)
            .output()
            .expect("setpriv sbatch")
    }

    fn submit(&self, user: &User, script: &Path, dir: &Path) -> u32 {
        let o = self.sbatch_as(user, script, dir);
        assert!(
            o.status.success(),
            "sbatch {}: {}",
            script.display(),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout)
            .trim()
            .parse()
            .expect("sbatch --parsable prints the job id")
    }

    /// `scontrol show job ID` as `Key=Value` pairs (one line: `-o`).
    fn job(&self, id: u32) -> std::collections::HashMap<String, String> {
        let o = self.cmd(&["scontrol", "-o", "show", "job", &id.to_string()]);
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        text.split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Waits (bounded) until job `id` satisfies `done`; its record then.
    fn wait_job(
        &self,
        id: u32,
        what: &str,
        done: impl Fn(&std::collections::HashMap<String, String>) -> bool,
    ) -> std::collections::HashMap<String, String> {
        let deadline = Instant::now() + JOB_LIMIT;
        loop {
            let j = self.job(id);
            if done(&j) {
                return j;
            }
            if Instant::now() > deadline {
                panic!(
                    "job {id}: not {what} after {JOB_LIMIT:?}: {j:?}\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Waits until job `id` ended and its burst buffer is gone through stage-out and teardown.
    fn wait_done(&self, id: u32) -> std::collections::HashMap<String, String> {
        self.wait_job(id, "finished with its burst buffer torn down", |j| {
            let state = j.get("JobState").map(String::as_str).unwrap_or("");
            !matches!(
                state,
                "PENDING" | "RUNNING" | "CONFIGURING" | "COMPLETING" | ""
            ) && j.get("BurstBufferState").map(String::as_str) == Some("complete")
                && !self.state_dir().join(id.to_string()).exists()
        })
    }

    fn state_dir(&self) -> PathBuf {
        self.path().join("bb-state")
    }

    fn job_root(&self) -> PathBuf {
        self.path().join("jobs")
    }

    /// Where node `k` (1..N) of a cluster of several keeps its jobs: its job root, seen from
    /// here (on the node, at `job_root`).
    fn node_job_root(&self, k: usize) -> PathBuf {
        self.path().join(format!("jobs-n{k}"))
    }

    /// The ends of the daemons' logs, for a failure's message.
    fn logs(&self) -> String {
        let mut s = String::new();
        let nodes = self.slurmd_pids.len();
        let slurmd: Vec<String> = if nodes > 1 {
            (1..=nodes).map(|k| format!("slurmd-n{k}.log")).collect()
        } else {
            vec!["slurmd.log".into()]
        };
        for f in std::iter::once("slurmctld.log".to_string()).chain(slurmd) {
            let text = std::fs::read_to_string(self.path().join(&f)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            s += &format!(
                "--- {f}\n{}\n",
                lines[lines.len().saturating_sub(30)..].join("\n")
            );
        }
        s
    }

    /// The mounts of the cluster's directory in the namespace of `pid` ("self": this test's,
    /// which is the controller's). Not the job root's own mount: a node of a cluster of several
    /// has its job root mounted there from the start, and it is no job's.
    fn mounts_in(&self, pid: &str) -> Vec<String> {
        let dir = self.path().to_str().expect("utf-8");
        let root = self.job_root();
        let root = root.to_str().expect("utf-8");
        std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
            .expect("mountinfo")
            .lines()
            .filter(|l| l.contains(dir) && l.split(' ').nth(4) != Some(root))
            .map(str::to_string)
            .collect()
    }

    fn node_mounts(&self) -> Vec<String> {
        self.mounts_in(&self.slurmd_pid.to_string())
    }

    /// The mounts in node `k`'s namespace (1..N).
    fn node_mounts_on(&self, k: usize) -> Vec<String> {
        self.mounts_in(&self.slurmd_pids[k - 1].to_string())
    }

    fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        let o = Command::new(script())
            .args(["stop", self.path().to_str().expect("utf-8")])
            .output()
            .expect("cluster.sh stop");
        assert!(
            o.status.success(),
            "cluster.sh stop: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if !self.stopped {
            self.stopped = true;
            let _ = Command::new(script())
                .args(["stop", self.path().to_str().unwrap_or("")])
                .output();
        }
    }
}

/// An ordinary user, made for these tests if missing (a Slurm job needs a name for its uid).
struct User {
    uid: u32,
    gid: u32,
}

fn user(name: &str) -> User {
    static USERADD: Mutex<()> = Mutex::new(());
    let _g = USERADD.lock().unwrap_or_else(|e| e.into_inner());
    let id = |flag: &str| -> Option<u32> {
        let o = Command::new("id").args([flag, name]).output().ok()?;
        String::from_utf8_lossy(&o.stdout).trim().parse().ok()
    };
    if id("-u").is_none() {
        let o = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                "/bin/sh",
                name,
            ])
            .output()
            .expect("useradd");
        assert!(
            o.status.success(),
            "useradd {name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    User {
        uid: id("-u").expect("uid"),
        gid: id("-g").expect("gid"),
    }
}

/// A directory of `user`'s under the cluster's: their job's working directory and its `pfs`.
fn work_dir(c: &Cluster, name: &str, u: &User) -> PathBuf {
    let w = c.path().join(name);
    std::fs::create_dir_all(w.join("pfs/in")).expect("mkdir");
    std::fs::write(w.join("pfs/in/input.txt"), "the job's input\n").expect("write");
    for p in ["", "pfs", "pfs/in", "pfs/in/input.txt"] {
        std::os::unix::fs::chown(w.join(p), Some(u.uid), Some(u.gid)).expect("chown");
    }
    w
}

/// Writes a batch script (owned by `u`) into `w`.
fn batch(w: &Path, name: &str, u: &User, text: &str) -> PathBuf {
    let p = w.join(name);
    std::fs::write(&p, text).expect("write script");
    std::os::unix::fs::chown(&p, Some(u.uid), Some(u.gid)).expect("chown");
    p
}

/// The script of a job that waits (bounded) for the file `go` before writing, so that the test
/// can look at the node while it runs; `tail` is run last.
fn cache_job(w: &Path, capacity: &str, tail: &str) -> String {
    let w = w.display();
    format!(
        r#"#!/bin/sh
#SBATCH --output={w}/job.out
#DW jobdw type=cache access_mode=striped pool=pliant capacity={capacity} pfs={w}/pfs
#DW preload path={w}/pfs/in
echo "cache=$DW_JOB_STRIPED_CACHE"
echo "uid=$(id -u)"
grep " $DW_JOB_STRIPED_CACHE " /proc/self/mountinfo
touch {w}/started
i=0
while [ ! -e {w}/go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
cat "$DW_JOB_STRIPED_CACHE/in/input.txt"
echo "written through the cache" > "$DW_JOB_STRIPED_CACHE/output.txt"
cat "$DW_JOB_STRIPED_CACHE/output.txt"
{tail}
"#
    )
}

/// Waits (bounded) until the job made `w/started`.
fn wait_started(c: &Cluster, w: &Path, id: u32) {
    let deadline = Instant::now() + JOB_LIMIT;
    while !w.join("started").exists() {
        assert!(
            Instant::now() < deadline,
            "job {id} did not start in {JOB_LIMIT:?}: {:?}\n{}",
            c.job(id),
            c.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn go(w: &Path) {
    std::fs::write(w.join("go"), "").expect("go");
}

/// Submits, as `u`, a cache job that writes through its cache and then waits (at most 60 s)
/// for `w/go2`; returns its id once it has written (bounded).
fn submit_held_after_writing(c: &Cluster, u: &User, w: &Path) -> u32 {
    go(w);
    let tail = format!(
        "touch {w}/written\ni=0\nwhile [ ! -e {w}/go2 ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done",
        w = w.display()
    );
    let s = batch(w, "job.sh", u, &cache_job(w, "64MiB", &tail));
    let id = c.submit(u, &s, w);
    let deadline = Instant::now() + JOB_LIMIT;
    while !w.join("written").exists() {
        assert!(Instant::now() < deadline, "job {id}: {:?}", c.job(id));
        std::thread::sleep(Duration::from_millis(100));
    }
    id
}

/// Nothing of any job is mounted in the node's namespace.
fn assert_unmounted_on_the_node(c: &Cluster) {
    assert_eq!(
        c.node_mounts(),
        Vec::<String>::new(),
        "unmounted on the node"
    );
}

/// The whole pool (1 GiB) is free again.
fn assert_pool_given_back(c: &Cluster) {
    let burst = String::from_utf8_lossy(&c.cmd(&["scontrol", "show", "burst"]).stdout).into_owned();
    assert!(
        burst.contains("FreeSpace=1GiB UsedSpace=0"),
        "given back: {burst}"
    );
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The issue's case: an ordinary user's job gets its cache on the node, mounted for them (and
/// seen only in the node's namespace), reads the preloaded input and writes through it; after
/// the job the output is in the pfs directory, the user's, and nothing is mounted anywhere.
#[test]
fn a_users_job_writes_through_its_cache_on_the_node_and_the_data_lands_as_theirs() {
    let Some(mut c) = Cluster::start(1 << 30) else {
        return;
    };
    let u = user("pliant-bb1");
    let w = work_dir(&c, "work", &u);
    let s = batch(&w, "job.sh", &u, &cache_job(&w, "64MiB", ""));
    let id = c.submit(&u, &s, &w);
    wait_started(&c, &w, id);

    let mnt = c.job_root().join(id.to_string()).join("mnt");
    let node = c.node_mounts();
    assert!(
        node.iter()
            .any(|l| l.contains(&format!(" {} ", mnt.display()))),
        "the cache is mounted on the node at {}: {node:?}",
        mnt.display()
    );
    assert!(
        c.mounts_in("self").is_empty(),
        "nothing of the job's is mounted on the controller: {:?}",
        c.mounts_in("self")
    );
    let dir = std::fs::metadata(c.job_root().join(id.to_string())).expect("job dir");
    assert_eq!(
        (dir.uid(), dir.mode() & 0o777),
        (0, 0o710),
        "the job's directory is root's, with an ACL (its mask the group bits) for the user"
    );
    go(&w);

    let j = c.wait_done(id);
    assert_eq!(j["JobState"], "COMPLETED", "{j:?}");
    let out = read(&w.join("job.out"));
    assert!(
        out.contains(&format!("cache={}\n", mnt.display())),
        "DW_JOB_STRIPED_CACHE reached the job: {out}"
    );
    assert!(out.contains(&format!("uid={}\n", u.uid)), "{out}");
    assert!(
        out.contains("fuse") && out.contains("allow_other"),
        "the job saw its cache mounted (allow_other, for a root daemon): {out}"
    );
    assert!(
        out.contains("the job's input\nwritten through the cache\n"),
        "{out}"
    );
    let written = w.join("pfs/output.txt");
    assert_eq!(read(&written), "written through the cache\n");
    let m = std::fs::metadata(&written).expect("stat");
    assert_eq!(
        (m.uid(), m.gid()),
        (u.uid, u.gid),
        "the job's file is its user's"
    );
    assert_unmounted_on_the_node(&c);
    assert_eq!(c.mounts_in("self"), Vec::<String>::new());
    assert!(
        !c.job_root().join(id.to_string()).exists(),
        "the job's directory is gone"
    );
    c.stop();
}

/// A bad directive is refused at sbatch, with its line and parameter.
#[test]
fn a_bad_directive_is_refused_at_sbatch_with_its_line() {
    let Some(mut c) = Cluster::start(1 << 30) else {
        return;
    };
    let u = user("pliant-bb1");
    let w = work_dir(&c, "work", &u);
    let s = batch(
        &w,
        "bad.sh",
        &u,
        &format!(
            "#!/bin/sh\n#SBATCH --output={w}/job.out\n#DW jobdw type=cache access_mode=striped pool=pliant capacity=12XB pfs={w}/pfs\ntrue\n",
            w = w.display()
        ),
    );
    let o = c.sbatch_as(&u, &s, &w);
    let e = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "refused: {e}");
    assert!(
        e.contains("batch script:3: #DW jobdw: capacity=12XB: expected a size"),
        "names the line and the parameter: {e}"
    );
    let queue = c.cmd(&["squeue", "-h"]);
    assert_eq!(
        String::from_utf8_lossy(&queue.stdout).trim(),
        "",
        "no job was queued"
    );
    c.stop();
}

/// A job that fails still has its cache written back (Slurm stages out after a failed job) and
/// taken down; Slurm records the job's own failure, not the burst buffer's.
#[test]
fn a_failed_jobs_writes_are_still_staged_out() {
    let Some(mut c) = Cluster::start(1 << 30) else {
        return;
    };
    let u = user("pliant-bb1");
    let w = work_dir(&c, "work", &u);
    go(&w);
    let s = batch(&w, "job.sh", &u, &cache_job(&w, "64MiB", "exit 3"));
    let id = c.submit(&u, &s, &w);
    let j = c.wait_done(id);
    assert_eq!(
        (j["JobState"].as_str(), j["ExitCode"].as_str()),
        ("FAILED", "3:0"),
        "{j:?}"
    );
    assert_eq!(
        read(&w.join("pfs/output.txt")),
        "written through the cache\n"
    );
    assert_unmounted_on_the_node(&c);
    assert!(!c.job_root().join(id.to_string()).exists());
    c.stop();
}

/// Two users' jobs run at once, each with its cache on the node in its own directory, sharing
/// the pool (`scontrol show burst` counts both); neither user can enter the other's cache.
#[test]
fn two_users_jobs_share_the_pool_at_once() {
    let Some(mut c) = Cluster::start(1 << 30) else {
        return;
    };
    let users = [user("pliant-bb1"), user("pliant-bb2")];
    let mut jobs = Vec::new();
    for (i, u) in users.iter().enumerate() {
        let w = work_dir(&c, &format!("work{i}"), u);
        let s = batch(&w, "job.sh", u, &cache_job(&w, "256MiB", ""));
        jobs.push((c.submit(u, &s, &w), w));
    }
    for (id, w) in &jobs {
        wait_started(&c, w, *id);
    }
    let burst = String::from_utf8_lossy(&c.cmd(&["scontrol", "show", "burst"]).stdout).into_owned();
    assert!(
        burst.contains(
            "PoolName[0]=pliant Granularity=1 TotalSpace=1GiB FreeSpace=512MiB UsedSpace=512MiB"
        ),
        "both jobs' capacity is taken from the pool: {burst}"
    );
    // The other user's job directory is closed to each: tried on the node, where it is mounted.
    for (i, u) in users.iter().enumerate() {
        let (other, _) = &jobs[1 - i];
        let theirs = c.job_root().join(other.to_string()).join("mnt");
        let o = Command::new("nsenter")
            .args(["-t", &c.slurmd_pid.to_string(), "-m", "setpriv"])
            .args([
                format!("--reuid={}", u.uid),
                format!("--regid={}", u.gid),
                "--clear-groups".into(),
                "ls".into(),
            ])
            .arg(&theirs)
            .output()
            .expect("nsenter");
        assert!(
            !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("Permission denied"),
            "user {} kept out of {}: {}",
            u.uid,
            theirs.display(),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    for (_, w) in &jobs {
        go(w);
    }
    for ((id, w), u) in jobs.iter().zip(&users) {
        let j = c.wait_done(*id);
        assert_eq!(j["JobState"], "COMPLETED", "{j:?}");
        let m = std::fs::metadata(w.join("pfs/output.txt")).expect("written back");
        assert_eq!((m.uid(), m.gid()), (u.uid, u.gid));
    }
    assert_pool_given_back(&c);
    assert_unmounted_on_the_node(&c);
    c.stop();
}

/// A slow parallel file system (`pliant bench slow-fs`), mounted before the cluster starts so
/// that slurmd's namespace has it too; unmounted and stopped by its pid when dropped.
struct SlowFs {
    top: tempfile::TempDir,
    child: std::process::Child,
}

impl SlowFs {
    fn start(rate: &str) -> Self {
        let top = tempfile::tempdir().expect("tempdir");
        for d in ["real", "mnt"] {
            std::fs::create_dir(top.path().join(d)).expect("mkdir");
        }
        std::fs::set_permissions(
            top.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod");
        let child = Command::new(env!("CARGO_BIN_EXE_pliant"))
            .args(["bench", "slow-fs"])
            .arg(top.path().join("real"))
            .arg(top.path().join("mnt"))
            .args(["--stream-rate", rate])
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("slow-fs");
        let s = SlowFs { top, child };
        let mnt = format!(" {} ", s.mnt().display());
        let deadline = Instant::now() + Duration::from_secs(30);
        while !std::fs::read_to_string("/proc/self/mountinfo")
            .expect("mountinfo")
            .contains(&mnt)
        {
            assert!(Instant::now() < deadline, "slow-fs did not mount in 30 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        s
    }

    fn real(&self) -> PathBuf {
        self.top.path().join("real")
    }

    fn mnt(&self) -> PathBuf {
        self.top.path().join("mnt")
    }
}

impl Drop for SlowFs {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = nix::mount::umount2(&self.mnt(), nix::mount::MntFlags::MNT_DETACH);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A user who removes a `#DW preload` path between `sbatch` and the job's start makes the
/// node's setup fail. That is the job's fault, not the node's: the job runs without its cache
/// (and fails on its own), and the node stays in service. The bug: the Prolog failed, and Slurm
/// drained the node, which any user could do at will.
#[test]
fn a_preload_path_gone_before_the_job_starts_fails_the_job_not_the_node() {
    let Some(mut c) = Cluster::start(1 << 30) else {
        return;
    };
    let u = user("pliant-bb1");
    let w = work_dir(&c, "work", &u);
    go(&w);
    let text = cache_job(&w, "64MiB", "").replacen("#!/bin/sh\n", "#!/bin/sh\n#SBATCH --hold\n", 1);
    let s = batch(&w, "job.sh", &u, &text);
    let id = c.submit(&u, &s, &w);
    std::fs::remove_dir_all(w.join("pfs/in")).expect("remove the preload path");
    let o = c.cmd(&["scontrol", "release", &id.to_string()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j = c.wait_done(id);
    assert_eq!(j["JobState"], "FAILED", "{j:?}");
    let out = read(&w.join("job.out"));
    assert!(
        out.contains("No such file or directory"),
        "the job ran without its cache: {out}"
    );
    assert_eq!(c.node_mounts(), Vec::<String>::new(), "nothing mounted");
    let node = c.cmd(&["sinfo", "-h", "-o", "%T"]);
    let state = String::from_utf8_lossy(&node.stdout).trim().to_owned();
    assert!(
        !state.starts_with("drain"),
        "the node is in service: {state}"
    );
    c.stop();
}

/// `scancel` while the node stages the job in (its Prolog preloading, seconds over a slow
/// file system): the job never runs, the cache is taken down on the node anyway, the pool is
/// given back and the node stays in service (a Prolog that fails would drain it).
#[test]
fn scancel_during_the_nodes_stage_in_leaves_nothing_mounted() {
    cancel_during_the_nodes_stage_in(false);
}

/// The same with `scancel --hurry`: Slurm hurries the teardown at once, while the node's Prolog
/// is still preloading, and the hand-over directory goes before the Prolog can say it mounted.
/// The bug: the Prolog then failed (the node drained) and left the cache mounted, its daemon
/// running, the pool already given back. Now the Prolog takes its cache down itself.
#[test]
fn scancel_hurry_during_the_nodes_stage_in_leaves_nothing_mounted_and_the_node_in_service() {
    cancel_during_the_nodes_stage_in(true);
}

/// Submits a job that preloads 20 MB from a pfs read at 2 MB/s and cancels it (hurried or not)
/// while the node preloads: the job never runs, nothing stays mounted, the pool is given back
/// and the node stays in service.
fn cancel_during_the_nodes_stage_in(hurry: bool) {
    if !slurm_possible() {
        return;
    }
    // 20 MB to preload at 2 MB/s: ten seconds in which to cancel.
    let slow = SlowFs::start("2MB");
    let Some(mut c) = Cluster::start(1 << 30) else {
        return;
    };
    let u = user("pliant-bb1");
    let input = slow.real().join("in");
    std::fs::create_dir(&input).expect("mkdir");
    std::fs::write(input.join("big"), vec![7u8; 20_000_000]).expect("write");
    for p in [slow.real(), input.clone(), input.join("big")] {
        std::os::unix::fs::chown(&p, Some(u.uid), Some(u.gid)).expect("chown");
    }
    let w = c.path().join("work");
    std::fs::create_dir(&w).expect("mkdir");
    std::os::unix::fs::chown(&w, Some(u.uid), Some(u.gid)).expect("chown");
    let pfs = slow.mnt();
    let s = batch(
        &w,
        "job.sh",
        &u,
        &format!(
            "#!/bin/sh\n#SBATCH --output={w}/job.out\n#DW jobdw type=cache access_mode=striped pool=pliant capacity=64MiB pfs={pfs}\n#DW preload path={pfs}/in\necho ran > \"$DW_JOB_STRIPED_CACHE/ran.txt\"\n",
            w = w.display(),
            pfs = pfs.display()
        ),
    );
    let id = c.submit(&u, &s, &w);
    let mnt = format!(
        " {} ",
        c.job_root().join(id.to_string()).join("mnt").display()
    );
    let deadline = Instant::now() + JOB_LIMIT;
    while !c.node_mounts().iter().any(|l| l.contains(&mnt)) {
        assert!(
            Instant::now() < deadline,
            "job {id}: no cache mounted on the node in {JOB_LIMIT:?}: {:?}\n{}",
            c.job(id),
            c.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let job = id.to_string();
    let args: &[&str] = if hurry {
        &["scancel", "--hurry", &job]
    } else {
        &["scancel", &job]
    };
    let o = c.cmd(args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j = c.wait_done(id);
    assert_eq!(j["JobState"], "CANCELLED", "{j:?}");
    assert!(
        !slow.real().join("ran.txt").exists(),
        "the job's script never ran"
    );
    // The Prolog may still be preloading when the job is already cancelled: it takes the cache
    // down when it ends.
    let deadline = Instant::now() + JOB_LIMIT;
    while !c.node_mounts().is_empty() || c.job_root().join(id.to_string()).exists() {
        assert!(
            Instant::now() < deadline,
            "job {id}: still on the node after {JOB_LIMIT:?}: {:?}\n{}",
            c.node_mounts(),
            c.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_pool_given_back(&c);
    let deadline = Instant::now() + JOB_LIMIT;
    loop {
        let node = c.cmd(&["sinfo", "-h", "-o", "%T"]);
        let state = String::from_utf8_lossy(&node.stdout).trim().to_owned();
        if state == "idle" {
            break;
        }
        assert!(
            !state.starts_with("drain") && Instant::now() < deadline,
            "the node is still in service: {state}\n{}",
            c.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    c.stop();
    drop(slow);
}

/// Whether files in the temporary directory take the immutable flag (`chattr +i`: ext4, xfs,
/// btrfs; not every overlay or tmpfs); in CI they must.
fn immutable_flag_possible() -> bool {
    let d = tempfile::tempdir().expect("tempdir");
    let f = d.path().join("probe");
    std::fs::write(&f, "").expect("write");
    let set = Command::new("chattr").arg("+i").arg(&f).output();
    let ok = set.as_ref().is_ok_and(|o| o.status.success());
    if ok {
        let o = Command::new("chattr").arg("-i").arg(&f).output();
        assert!(
            o.is_ok_and(|o| o.status.success()),
            "chattr -i {}",
            f.display()
        );
        return true;
    }
    let why = match set {
        Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
        Err(e) => format!("chattr: {e} (package e2fsprogs)"),
    };
    assert!(
        std::env::var_os("CI").is_none(),
        "CI: the stage-out failure test makes a file immutable: {why}"
    );
    pliant_testdata::skip(&format!(
        "no immutable flag on the temporary directory's file system: {why}"
    ));
    false
}

/// A write-back that keeps failing on the node (the pfs file made immutable under the job)
/// fails stage-out: the job stays in stage-out with the node's message in `scontrol show job`,
/// and its data stays in the cache, mounted on the node, until an administrator's teardown
/// there writes it back.
#[test]
fn a_failed_write_back_is_a_stage_out_failure_in_scontrol_and_loses_nothing() {
    if !slurm_possible() || !immutable_flag_possible() {
        return;
    }
    let Some(mut c) = Cluster::start(1 << 30) else {
        return;
    };
    let u = user("pliant-bb1");
    let w = work_dir(&c, "work", &u);
    let id = submit_held_after_writing(&c, &u, &w);
    let out = w.join("pfs/output.txt");
    let chattr = |flag: &str| {
        let o = Command::new("chattr")
            .arg(flag)
            .arg(&out)
            .output()
            .expect("chattr");
        assert!(
            o.status.success(),
            "chattr {flag} (the test needs a file system with the immutable flag, e.g. ext4): {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    chattr("+i");
    std::fs::write(w.join("go2"), "").expect("go2");
    let j = c.wait_job(id, "failed in stage-out", |j| {
        j.get("Reason")
            .is_some_and(|r| r.replace('_', " ").contains("write-back keeps failing"))
    });
    chattr("-i");
    // scontrol prints the reason with its spaces as underscores.
    let reason = j["Reason"].replace('_', " ");
    assert!(
        reason.starts_with("burst buffer/lua: slurm bb data out: the node's write-back failed: ")
            && reason.contains(": error: unmounting ")
            && reason.contains("still mounted with 26 bytes dirty, nothing dropped"),
        "the stage-out failure is the burst buffer's, with the node's message: {reason}"
    );
    assert_eq!(read(&out), "", "nothing reached the pfs yet");
    let mnt = c.job_root().join(id.to_string()).join("mnt");
    assert!(
        c.node_mounts()
            .iter()
            .any(|l| l.contains(&format!(" {} ", mnt.display()))),
        "the cache stays mounted on the node with the data"
    );
    // The administrator's way out, on the node: a teardown once the pfs takes writes again.
    let o = Command::new("nsenter")
        .args(["-t", &c.slurmd_pid.to_string(), "-m"])
        .arg(env!("CARGO_BIN_EXE_pliant"))
        .args(["job", "teardown", "--job-id", &id.to_string(), "--root"])
        .arg(c.job_root())
        .output()
        .expect("nsenter pliant job teardown");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(read(&out), "written through the cache\n");
    assert_unmounted_on_the_node(&c);
    c.stop();
}

/// slurmctld stopped and started again while a job runs with its cache: the job finishes, its
/// stage-out (on the new controller) still waits for the node's write-back, the data lands and
/// the pool is given back.
#[test]
fn a_controller_restart_in_the_middle_of_a_job_loses_nothing() {
    let Some(mut c) = Cluster::start(1 << 30) else {
        return;
    };
    let u = user("pliant-bb1");
    let w = work_dir(&c, "work", &u);
    let s = batch(&w, "job.sh", &u, &cache_job(&w, "64MiB", ""));
    let id = c.submit(&u, &s, &w);
    wait_started(&c, &w, id);
    let o = Command::new(script())
        .args(["restart-controller", c.path().to_str().expect("utf-8")])
        .output()
        .expect("cluster.sh restart-controller");
    assert!(
        o.status.success(),
        "restart-controller: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let burst = String::from_utf8_lossy(&c.cmd(&["scontrol", "show", "burst"]).stdout).into_owned();
    assert!(
        burst.contains("UsedSpace=64MiB"),
        "the new controller knows the job's share of the pool: {burst}"
    );
    go(&w);
    let j = c.wait_done(id);
    assert_eq!(j["JobState"], "COMPLETED", "{j:?}");
    assert_eq!(
        read(&w.join("pfs/output.txt")),
        "written through the cache\n"
    );
    assert_unmounted_on_the_node(&c);
    assert_pool_given_back(&c);
    c.stop();
}

/// `scancel --hurry` while a job runs: Slurm skips its stage-out and hurries the teardown, and
/// the node's Epilog, told so, discards what the job wrote instead of writing it back. The
/// file's name reached the pfs when it was made (metadata goes through at once), its data not.
#[test]
fn scancel_hurry_discards_what_the_job_wrote() {
    let Some(mut c) = Cluster::start(1 << 30) else {
        return;
    };
    let u = user("pliant-bb1");
    let w = work_dir(&c, "work", &u);
    let id = submit_held_after_writing(&c, &u, &w);
    let o = c.cmd(&["scancel", "--hurry", &id.to_string()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j = c.wait_done(id);
    assert_eq!(j["JobState"], "CANCELLED", "{j:?}");
    assert_eq!(
        read(&w.join("pfs/output.txt")),
        "",
        "the job's data was discarded, not written back"
    );
    assert_unmounted_on_the_node(&c);
    assert!(!c.job_root().join(id.to_string()).exists());
    assert_pool_given_back(&c);
    c.stop();
}

/// The node's script runs as root and writes into the hand-over directory, which is SlurmUser's.
/// A link planted at one of the names it writes (by whoever can write there) must be replaced,
/// never followed: root would otherwise overwrite the file it points to. No Slurm needed: the
/// Epilog is run directly, for a job with nothing mounted.
#[test]
fn the_node_script_replaces_a_link_at_a_name_it_writes_and_never_follows_it() {
    let top = tempfile::tempdir().expect("tempdir");
    let state = top.path().join("state");
    let job = state.join("41");
    std::fs::create_dir_all(&job).expect("mkdir");
    std::fs::write(job.join("job.sh"), "#!/bin/sh\n").expect("job.sh");
    let victim = top.path().join("victim");
    std::fs::write(&victim, "keep\n").expect("victim");
    // At the name itself, and at the temporary name a write-then-rename would have used.
    std::os::unix::fs::symlink(&victim, job.join("stage-out.n1")).expect("symlink");
    std::os::unix::fs::symlink(&victim, job.join("stage-out.n1.tmp")).expect("symlink");
    let o = Command::new("sh")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/slurm/node.sh"))
        .arg("epilog")
        .env("SLURM_JOB_ID", "41")
        .env("SLURMD_NODENAME", "n1")
        .env("PLIANT_BB_STATE_DIR", &state)
        .env("PLIANT_JOB_ROOT", top.path().join("jobs"))
        .env("PLIANT_BIN", env!("CARGO_BIN_EXE_pliant"))
        .output()
        .expect("node.sh epilog");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(read(&victim), "keep\n", "the link's target is untouched");
    let written = job.join("stage-out.n1");
    assert!(
        !std::fs::symlink_metadata(&written)
            .expect("stage-out.n1")
            .file_type()
            .is_symlink(),
        "the link was replaced"
    );
    assert!(read(&written).starts_with("ok\n"), "{}", read(&written));
}

/// A job on three nodes, its Prolog and Epilog run directly as slurmd would run them on each
/// node (here three job roots on one machine, at once; no Slurm needed): every node's mount
/// stripes over the three nodes' cache servers, so what each node writes of one shared file
/// every node reads whole; after the controller's word each node's Epilog writes its server's
/// stripes back, and the pfs holds the file. Root and FUSE, as the node's script needs.
#[test]
fn the_node_script_mounts_one_striped_cache_across_a_jobs_nodes() {
    let usable = nix::unistd::geteuid().is_root() && Path::new("/dev/fuse").exists();
    if !usable {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI: the node script's striped test runs as root with /dev/fuse"
        );
        pliant_testdata::skip("the node script runs as root with /dev/fuse");
        return;
    }
    let top = tempfile::tempdir().expect("tempdir");
    let pfs = top.path().join("pfs");
    std::fs::create_dir_all(&pfs).expect("pfs");
    let state = top.path().join("state");
    let job = state.join("77");
    std::fs::create_dir_all(&job).expect("hand-over");
    std::fs::write(
        job.join("job.sh"),
        format!(
            "#!/bin/sh\n#SBATCH -N 3\n#DW jobdw type=cache access_mode=striped pool=pliant capacity=192MiB pfs={}\n",
            pfs.display()
        ),
    )
    .expect("job.sh");
    let _cleanup = crate::fs_cli::JobCleanup {
        roots: (0..3)
            .map(|i| top.path().join(format!("node{i}")))
            .collect(),
        id: "77",
    };
    let run = |phase: &str, i: usize| {
        Command::new("sh")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/slurm/node.sh"))
            .arg(phase)
            .env("SLURM_JOB_ID", "77")
            .env("SLURM_JOB_UID", "0")
            .env("SLURM_JOB_NUM_NODES", "3")
            .env("SLURMD_NODENAME", format!("n{i}"))
            .env("PLIANT_BB_STATE_DIR", &state)
            .env("PLIANT_JOB_ROOT", top.path().join(format!("node{i}")))
            .env("PLIANT_BB_LISTEN", "127.0.0.1")
            .env("PLIANT_BB_ADVERTISE", "127.0.0.1")
            .env("PLIANT_BB_DECISION_WAIT", "30")
            .env("PLIANT_BIN", env!("CARGO_BIN_EXE_pliant"))
            .output()
            .expect("node.sh")
    };
    let prologs: Vec<Output> = std::thread::scope(|s| {
        let run = &run;
        let hs: Vec<_> = (0..3).map(|i| s.spawn(move || run("prolog", i))).collect();
        hs.into_iter().map(|h| h.join().expect("prolog")).collect()
    });
    for (i, o) in prologs.iter().enumerate() {
        assert!(
            o.status.success() && job.join(format!("mounted.n{i}")).exists(),
            "node n{i}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let mnt = |i: usize| top.path().join(format!("node{i}/77/mnt"));
    let data: Vec<u8> = (0..5_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::File::create(mnt(0).join("shared")).expect("create");
    let cuts = [0, 1_700_001, 3_300_007, data.len()];
    for i in 0..3 {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(mnt(i).join("shared"))
            .expect("open");
        f.write_all_at(&data[cuts[i]..cuts[i + 1]], cuts[i] as u64)
            .expect("write");
    }
    for i in 0..3 {
        assert!(
            std::fs::read(mnt(i).join("shared")).expect("read") == data,
            "node n{i} reads other than what the three nodes wrote"
        );
    }
    // The controller's word (slurm_bb_data_out), then each node's Epilog.
    std::fs::write(job.join("want"), "stage-out\n").expect("want");
    for i in 0..3 {
        let o = run("epilog", i);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let outcome = read(&job.join(format!("stage-out.n{i}")));
        assert!(outcome.starts_with("ok\n"), "node n{i}: {outcome}");
        assert!(!top.path().join(format!("node{i}/77")).exists());
    }
    assert!(
        std::fs::read(pfs.join("shared")).expect("pfs") == data,
        "the pfs holds the shared file after every node's Epilog"
    );
}

/// Issue 35 under a real Slurm: a user's `sbatch -N 3` job with one striped cache. Each node's
/// Prolog (slurmd's, in the node's own network and mount namespaces) starts a cache server at
/// the node's own address and mounts over all three; the job's steps on the three nodes write
/// disjoint ranges of one file (cut off 1 MiB boundaries), then each node reads it whole and
/// finds what all three wrote; after the job every node's Epilog writes its stripes back, the
/// pfs holds the file as the user's, no node has anything mounted, and the pool is given back.
#[test]
fn a_three_node_jobs_nodes_share_one_striped_cache_through_their_prologs() {
    let Some(mut c) = Cluster::start_nodes(1 << 30, 3) else {
        return;
    };
    let u = user("pliant-bb1");
    let w = work_dir(&c, "work", &u);
    let data: Vec<u8> = (0..5_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let expected = w.join("expected");
    std::fs::write(&expected, &data).expect("write");
    std::os::unix::fs::chown(&expected, Some(u.uid), Some(u.gid)).expect("chown");
    let (a, b, end) = (1_700_001, 3_300_007, data.len());
    let text = format!(
        r#"#!/bin/sh
#SBATCH -N 3
#SBATCH --output={w}/job.out
#DW jobdw type=cache access_mode=striped pool=pliant capacity=192MiB pfs={w}/pfs
: > "$DW_JOB_STRIPED_CACHE/shared" || exit 1
touch {w}/started
i=0
while [ ! -e {w}/go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
srun -N 3 --ntasks-per-node=1 sh -c '
case $SLURM_NODEID in
0) from=0 to={a} ;;
1) from={a} to={b} ;;
*) from={b} to={end} ;;
esac
grep " $DW_JOB_STRIPED_CACHE " /proc/self/mountinfo | grep -q fuse && echo "mounted on $SLURMD_NODENAME"
dd if={w}/expected of="$DW_JOB_STRIPED_CACHE/shared" bs=1M iflag=skip_bytes,count_bytes \
  oflag=seek_bytes conv=notrunc skip=$from seek=$from count=$((to - from)) status=none &&
  echo "$SLURMD_NODENAME wrote $from..$to"' || exit 1
srun -N 3 --ntasks-per-node=1 sh -c \
  'cmp {w}/expected "$DW_JOB_STRIPED_CACHE/shared" && echo "$SLURMD_NODENAME read it whole"'
"#,
        w = w.display()
    );
    let s = batch(&w, "job.sh", &u, &text);
    let id = c.submit(&u, &s, &w);
    wait_started(&c, &w, id);

    // While the job runs: each node's cache server is at that node's address (node k at
    // 10.213.X.(10+k), what its Prolog was given), and each node has the mount in its own
    // namespace, the controller none.
    let net = read(&c.path().join("net"));
    let x = net.split_whitespace().next().expect("the cluster's subnet");
    let handover = c.state_dir().join(id.to_string());
    let mnt = format!(
        " {} ",
        c.job_root().join(id.to_string()).join("mnt").display()
    );
    for k in 1..=3 {
        let server = read(&handover.join(format!("server.n{k}")));
        assert!(
            server.starts_with(&format!("10.213.{x}.{}:", 10 + k)),
            "node n{k}'s cache server is at its own address: {server}"
        );
        // Another node's mount was seen missing when the batch script had started (1 run in
        // 3, the node's server address already written): its Prolog's last step, waited for
        // at most 30 s.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut mounts = c.node_mounts_on(k);
        while !mounts.iter().any(|l| l.contains(&mnt)) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(100));
            mounts = c.node_mounts_on(k);
        }
        assert!(
            mounts.iter().any(|l| l.contains(&mnt)),
            "node n{k} has the job's cache mounted within 30 s:{mnt}{mounts:?}"
        );
    }
    assert_eq!(c.mounts_in("self"), Vec::<String>::new());
    go(&w);

    let j = c.wait_done(id);
    let out = read(&w.join("job.out"));
    assert_eq!(j["JobState"], "COMPLETED", "{j:?}\n{out}");
    for (k, (from, to)) in [(0, a), (a, b), (b, end)].into_iter().enumerate() {
        let n = k + 1;
        for line in [
            format!("mounted on n{n}\n"),
            format!("n{n} wrote {from}..{to}\n"),
            format!("n{n} read it whole\n"),
        ] {
            assert!(out.contains(&line), "{line:?} in the job's output: {out}");
        }
    }
    let written = w.join("pfs/shared");
    assert!(
        std::fs::read(&written).expect("the pfs's file") == data,
        "the pfs holds what the three nodes wrote"
    );
    let m = std::fs::metadata(&written).expect("stat");
    assert_eq!(
        (m.uid(), m.gid()),
        (u.uid, u.gid),
        "the job's file is its user's"
    );
    for k in 1..=3 {
        assert_eq!(
            c.node_mounts_on(k),
            Vec::<String>::new(),
            "nothing mounted on node n{k}"
        );
        assert!(
            !c.node_job_root(k).join(id.to_string()).exists(),
            "the job's directory is gone from node n{k}"
        );
    }
    assert_pool_given_back(&c);
    c.stop();
}
