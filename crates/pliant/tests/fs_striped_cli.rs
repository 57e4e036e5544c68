//! A striped cache through the real processes (issue 35; `tools/bench/fs_striped.sh` is the
//! full version): three `pliant fs server`s and three striped `pliant fs mount`s over one
//! backing directory; three writers, one per mount, write unaligned disjoint ranges of one
//! shared file at once; every mount reads the whole file back; after teardown (the mounts
//! unmounted, the servers stopped with SIGTERM, which writes back) the backing file holds
//! exactly what was written. Needs /dev/fuse: outside CI the test is skipped with a note when
//! it is missing; in CI (`CI` set) it fails. Bounded: a watchdog kills every process it
//! started after two minutes, so a stuck request fails the test instead of hanging it.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{ok, pliant};

const SIZE: u64 = 8 << 20;
/// The writers' bounds: none a multiple of 4096, none on a stripe boundary.
const BOUNDS: [u64; 4] = [0, 2_796_203 + 1001, 5_592_405 + 2003, SIZE - 777];
/// Each writer's write size: a prime, so pieces cross stripe boundaries anywhere.
const WRITE: usize = 65_521;
const LIMIT: Duration = Duration::from_secs(120);

/// The byte at `offset` of the shared file: depends on the offset, so a piece written at the
/// wrong place shows.
fn byte_at(offset: u64) -> u8 {
    (offset.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8 ^ (offset >> 20) as u8
}

fn expected(from: u64, to: u64) -> Vec<u8> {
    (from..to).map(byte_at).collect()
}

/// Every process the test started: the servers (children) and the mount daemons (by pid).
/// Dropped, it unmounts and stops whatever is left; its watchdog kills them all after LIMIT.
struct Job {
    dir: tempfile::TempDir,
    servers: Vec<Child>,
    mounts: Vec<PathBuf>,
    pids: Arc<Mutex<Vec<u32>>>,
    done: Arc<AtomicBool>,
}

impl Job {
    fn new() -> Self {
        let pids: Arc<Mutex<Vec<u32>>> = Arc::default();
        let done: Arc<AtomicBool> = Arc::default();
        let (p, d) = (pids.clone(), done.clone());
        std::thread::spawn(move || {
            let deadline = Instant::now() + LIMIT;
            while Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(200));
                if d.load(Relaxed) {
                    return;
                }
            }
            for pid in p.lock().map(|v| v.clone()).unwrap_or_default() {
                eprintln!("watchdog: killing {pid} after {LIMIT:?}");
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        });
        Self {
            dir: tempfile::tempdir().expect("tempdir"),
            servers: Vec::new(),
            mounts: Vec::new(),
            pids,
            done,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn watch(&self, pid: u32) {
        self.pids.lock().expect("pids").push(pid);
    }

    /// Starts a server and returns its address, from the JSON line it prints once listening.
    fn server(&mut self, i: usize) -> String {
        let mut child = Command::new(env!("CARGO_BIN_EXE_pliant"))
            .args(["fs", "server"])
            .arg(self.path("backing"))
            .arg("--cache-dir")
            .arg(self.path(&format!("cache{i}")))
            .args(["--capacity", "64MiB", "--listen", "127.0.0.1:0"])
            .arg("--secret-file")
            .arg(self.path("secret"))
            .arg("--json")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start pliant fs server");
        self.watch(child.id());
        let stdout = child.stdout.take().expect("stdout");
        self.servers.push(child);
        // The line comes within the watchdog's limit, or the watchdog kills the server and
        // the read ends.
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("server's line");
        let v: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("server said {line:?}: {e}"));
        v["addr"].as_str().expect("addr").to_string()
    }

    fn mount(&mut self, i: usize, servers: &str) -> PathBuf {
        let mnt = self.path(&format!("mnt{i}"));
        std::fs::create_dir(&mnt).expect("mount point");
        let out = pliant(
            &[
                "fs",
                "mount",
                self.path("backing").to_str().expect("utf-8"),
                mnt.to_str().expect("utf-8"),
                "--cache-dir",
                self.path(&format!("mcache{i}")).to_str().expect("utf-8"),
                "--servers",
                servers,
                "--secret-file",
                self.path("secret").to_str().expect("utf-8"),
                "--server-timeout",
                "20s",
            ],
            self.dir.path(),
        );
        let said = crate::common::stderr(&out) + &crate::common::stdout(&out);
        assert!(out.status.success(), "mount {i}: {said}");
        self.mounts.push(mnt.clone());
        let stat = crate::common::json(&pliant(
            &["fs", "stat", mnt.to_str().expect("utf-8"), "--json"],
            self.dir.path(),
        ));
        self.watch(stat["pid"].as_u64().expect("daemon pid") as u32);
        mnt
    }

    fn unmount_all(&mut self) {
        for mnt in std::mem::take(&mut self.mounts) {
            ok(&pliant(
                &["fs", "unmount", mnt.to_str().expect("utf-8")],
                self.dir.path(),
            ));
        }
    }

    /// SIGTERM to every server (each writes back what it holds), then waits for them all
    /// (within the watchdog's limit); panics unless each exited with success.
    fn stop_servers(&mut self) {
        for c in &self.servers {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        for mut c in std::mem::take(&mut self.servers) {
            let status = c.wait().expect("wait for server");
            assert!(status.success(), "server {} exited with {status}", c.id());
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        for mnt in std::mem::take(&mut self.mounts) {
            let _ = pliant(
                &["fs", "unmount", "--discard", mnt.to_str().unwrap_or("")],
                self.dir.path(),
            );
        }
        for mut c in std::mem::take(&mut self.servers) {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.done.store(true, Relaxed);
    }
}

#[test]
fn three_writers_through_three_striped_mounts_of_three_servers_meet_in_one_file() {
    if !crate::fs_cli::fuse_available() {
        return;
    }
    let mut job = Job::new();
    std::fs::create_dir(job.path("backing")).expect("backing");
    let secret = job.path("secret");
    std::fs::write(&secret, "a-secret-for-the-test\n").expect("secret");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let addrs: Vec<String> = (0..3).map(|i| job.server(i)).collect();
    let servers = addrs.join(",");
    let mounts: Vec<PathBuf> = (0..3).map(|i| job.mount(i, &servers)).collect();

    // Three writers at once, one per mount, each its range of the one file.
    std::thread::scope(|s| {
        for (k, mnt) in mounts.iter().enumerate() {
            s.spawn(move || {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(mnt.join("shared.dat"))
                    .expect("open through the mount");
                let (from, to) = (BOUNDS[k], BOUNDS[k + 1]);
                let mut at = from;
                while at < to {
                    let end = (at + WRITE as u64).min(to);
                    f.write_all_at(&expected(at, end), at)
                        .unwrap_or_else(|e| panic!("writer {k} at {at}: {e}"));
                    at = end;
                }
                f.sync_all().expect("fsync through the mount");
            });
        }
    });

    // Every mount reads the whole file: what all three wrote.
    let want = expected(0, BOUNDS[3]);
    for (i, mnt) in mounts.iter().enumerate() {
        let got = std::fs::read(mnt.join("shared.dat")).expect("read through the mount");
        assert_eq!(got.len(), want.len(), "size through mount {i}");
        let bad = got.iter().zip(&want).filter(|(a, b)| a != b).count();
        assert_eq!(bad, 0, "mismatched bytes through mount {i}");
    }

    // Teardown: the servers write back; the backing file is the same bytes.
    job.unmount_all();
    job.stop_servers();
    let got = std::fs::read(job.path("backing").join("shared.dat")).expect("backing file");
    assert_eq!(got.len(), want.len(), "size of the backing file");
    let bad = got.iter().zip(&want).filter(|(a, b)| a != b).count();
    assert_eq!(
        bad, 0,
        "mismatched bytes in the backing file after teardown"
    );
}
