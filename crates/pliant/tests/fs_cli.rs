//! `pliant fs` and `pliant job` through real FUSE mounts: what applications expect of a POSIX
//! file system, crash recovery after `kill -9`, revalidation, the write window, two users, job
//! directives, and random operations against a model. They need /dev/fuse: outside CI they
//! are skipped with a note when it is missing; in CI (`CI` set) they fail.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use rand::{Rng, RngExt, SeedableRng};

use crate::common::{err, json, ok, pliant};

pub(crate) fn fuse_available() -> bool {
    let present = Path::new("/dev/fuse").exists()
        && (nix::unistd::geteuid().is_root()
            || Command::new("fusermount3")
                .arg("--version")
                .output()
                .is_ok());
    if !present {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI: /dev/fuse (and, unprivileged, fusermount3 from fuse3) is needed for the fs tests"
        );
        pliant_testdata::skip("no usable /dev/fuse here");
    }
    present
}

pub(crate) struct Mounted {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) backing: PathBuf,
    pub(crate) mnt: PathBuf,
    cache: PathBuf,
    pid: u32,
    args: Vec<String>,
    done: bool,
    /// The daemon's pid for the watchdog.
    watched: std::sync::Arc<std::sync::atomic::AtomicU32>,
}

/// A request stuck in the daemon would block the test inside the kernel for ever: after
/// `limit` the watchdog kills the daemon, which fails every pending request (ENOTCONN), so the
/// test fails instead of hanging. It stands down when the test drops its end.
fn watchdog(limit: std::time::Duration) -> std::sync::Arc<std::sync::atomic::AtomicU32> {
    let pid = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let watched = pid.clone();
    std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + limit;
        while std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(200));
            if std::sync::Arc::strong_count(&watched) == 1 {
                return;
            }
        }
        let p = watched.load(std::sync::atomic::Ordering::Relaxed);
        if p != 0 {
            eprintln!("watchdog: killing mount daemon {p} after {limit:?}");
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(p as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    });
    pid
}

pub(crate) fn mount_with(extra: &[&str]) -> Option<Mounted> {
    if !fuse_available() {
        return None;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (backing, mnt, cache) = (
        dir.path().join("backing"),
        dir.path().join("mnt"),
        dir.path().join("cache"),
    );
    fs::create_dir(&backing).expect("backing");
    fs::create_dir(&mnt).expect("mnt");
    let mut m = Mounted {
        dir,
        backing,
        mnt,
        cache,
        pid: 0,
        args: Vec::new(),
        done: false,
        watched: watchdog(std::time::Duration::from_secs(180)),
    };
    m.args = [
        "fs",
        "mount",
        m.backing.to_str().expect("utf-8"),
        m.mnt.to_str().expect("utf-8"),
        "--cache-dir",
        m.cache.to_str().expect("utf-8"),
    ]
    .iter()
    .chain(extra)
    .map(|s| s.to_string())
    .collect();
    m.start();
    Some(m)
}

impl Mounted {
    /// Mounts; returns what the command said on stderr.
    fn start(&mut self) -> String {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let out = pliant(&args, self.dir.path());
        ok(&out);
        self.pid = self.stats()["pid"].as_u64().expect("pid") as u32;
        self.watched
            .store(self.pid, std::sync::atomic::Ordering::Relaxed);
        self.done = false;
        crate::common::stderr(&out)
    }

    fn stats(&self) -> serde_json::Value {
        json(&pliant(
            &["fs", "stat", self.mnt.to_str().expect("utf-8"), "--json"],
            self.dir.path(),
        ))
    }

    fn at(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    pub(crate) fn unmount(&mut self) -> serde_json::Value {
        let v = json(&pliant(
            &["fs", "unmount", self.mnt.to_str().expect("utf-8"), "--json"],
            self.dir.path(),
        ));
        self.done = true;
        v
    }

    /// Sends the daemon `sig` and waits (up to `limit`) for it to exit.
    fn stop_by(&mut self, sig: nix::sys::signal::Signal, limit: std::time::Duration) {
        let pid = nix::unistd::Pid::from_raw(self.pid as i32);
        nix::sys::signal::kill(pid, sig).expect("kill");
        let deadline = std::time::Instant::now() + limit;
        while nix::sys::signal::kill(pid, None).is_ok() {
            assert!(
                std::time::Instant::now() < deadline,
                "the daemon outlived {sig} by {limit:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        self.done = true;
    }

    /// `kill -9` of the daemon; the dead mount is detached as an administrator would.
    fn kill9(&mut self) {
        self.stop_by(
            nix::sys::signal::Signal::SIGKILL,
            std::time::Duration::from_secs(10),
        );
        let _ = nix::mount::umount2(&self.mnt, nix::mount::MntFlags::MNT_DETACH);
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if !self.done {
            let _ = pliant(
                &[
                    "fs",
                    "unmount",
                    "--discard",
                    self.mnt.to_str().unwrap_or_default(),
                ],
                self.dir.path(),
            );
            let _ = nix::mount::umount2(&self.mnt, nix::mount::MntFlags::MNT_DETACH);
            // No pid yet (the mount failed): kill(0) would be this test's own process group.
            if self.pid != 0 {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(self.pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

#[test]
fn posix_operations_through_the_mount_reach_the_backing_directory() {
    posix_operations_case(&[]);
}

/// The same walk with `--direct-io` (no page cache for file data) on a mount without
/// passthrough: every read and write a request of its own, a shared `mmap` through the page
/// cache the kernel keeps coherent with them.
#[test]
fn posix_operations_under_direct_io_reach_the_backing_directory() {
    posix_operations_case(&["--direct-io", "--no-passthrough"]);
}

fn posix_operations_case(extra: &[&str]) {
    let args: Vec<&str> = ["--capacity", "8MiB", "--extent", "64KiB"]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
    let Some(mut m) = mount_with(&args) else {
        return;
    };
    fs::create_dir_all(m.at("d/e")).expect("mkdir");
    fs::write(m.at("d/e/f.txt"), b"hello").expect("write");
    let mut big = vec![0u8; 3 << 20];
    rand_pcg::Pcg64::seed_from_u64(7).fill_bytes(&mut big);
    fs::write(m.at("big"), &big).expect("write big");
    assert_eq!(fs::read(m.at("big")).expect("read big"), big);
    // Overwrite in the middle of an extent, append, then shrink and grow again.
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.at("d/e/f.txt"))
        .expect("open");
    f.write_all_at(b"J", 1).expect("pwrite");
    f.write_all_at(b" world", 5).expect("append");
    f.set_len(3).expect("truncate");
    f.set_len(6).expect("extend");
    drop(f);
    assert_eq!(fs::read(m.at("d/e/f.txt")).expect("read"), b"hJl\0\0\0");
    fs::rename(m.at("d/e/f.txt"), m.at("d/g.txt")).expect("rename");
    fs::rename(m.at("d/e"), m.at("d/e2")).expect("rename dir");
    std::os::unix::fs::symlink("g.txt", m.at("d/link")).expect("symlink");
    assert_eq!(
        fs::read_link(m.at("d/link")).expect("readlink"),
        Path::new("g.txt")
    );
    assert_eq!(
        fs::read(m.at("d/link")).expect("through the link"),
        b"hJl\0\0\0"
    );
    fs::set_permissions(m.at("d/g.txt"), fs::Permissions::from_mode(0o600)).expect("chmod");
    xattr::set(m.at("d/g.txt"), "user.origin", b"pliant").expect("setxattr");
    assert_eq!(
        xattr::get(m.at("d/g.txt"), "user.origin").expect("getxattr"),
        Some(b"pliant".to_vec())
    );
    let names: Vec<_> = xattr::list(m.at("d/g.txt")).expect("listxattr").collect();
    assert_eq!(
        names,
        vec![std::ffi::OsString::from("user.origin")],
        "control names stay hidden"
    );
    let mut listed: Vec<String> = fs::read_dir(m.at("d"))
        .expect("readdir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    listed.sort();
    assert_eq!(listed, ["e2", "g.txt", "link"]);
    // Locks: flock and fcntl, as MPI-IO takes them.
    let a = fs::File::open(m.at("big")).expect("open a");
    let b = fs::File::open(m.at("big")).expect("open b");
    let held =
        nix::fcntl::Flock::lock(a, nix::fcntl::FlockArg::LockExclusiveNonblock).expect("flock");
    assert!(
        nix::fcntl::Flock::lock(b, nix::fcntl::FlockArg::LockExclusiveNonblock).is_err(),
        "second flock"
    );
    drop(held);
    let out = Command::new("python3")
        .arg("-c")
        .arg(concat!(
            "import fcntl, mmap, os, sys\n",
            "p = sys.argv[1]\n",
            "fd = os.open(p, os.O_RDWR)\n",
            "fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 4096, 0)\n",
            "pid = os.fork()\n",
            "if pid == 0:\n",
            "    try:\n",
            "        fcntl.lockf(os.open(p, os.O_RDWR), fcntl.LOCK_EX | fcntl.LOCK_NB, 4096, 0)\n",
            "        os._exit(1)\n",
            "    except OSError:\n",
            "        os._exit(0)\n",
            "assert os.waitpid(pid, 0)[1] == 0, 'a second process got the fcntl lock'\n",
            "m = mmap.mmap(fd, 8192, mmap.MAP_SHARED)\n",
            "m[100:105] = b'MMAP!'\n",
            "m.flush()\n",
            "m.close()\n",
            "os.close(fd)\n",
        ))
        .arg(m.at("big"))
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "fcntl/mmap: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    big[100..105].copy_from_slice(b"MMAP!");
    assert_eq!(fs::read(m.at("big")).expect("read after mmap"), big);
    fs::remove_file(m.at("d/link")).expect("unlink");
    fs::remove_dir(m.at("d/e2")).expect("rmdir");
    let report = m.unmount();
    assert!(report["stats"]["written_bytes"].as_u64().expect("written") >= big.len() as u64);
    // Everything is in the backing directory, with the cache's sizes and modes.
    assert_eq!(fs::read(m.backing.join("big")).expect("backing big"), big);
    assert_eq!(
        fs::read(m.backing.join("d/g.txt")).expect("backing g"),
        b"hJl\0\0\0"
    );
    assert_eq!(
        fs::metadata(m.backing.join("d/g.txt"))
            .expect("meta")
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    assert_eq!(
        xattr::get(m.backing.join("d/g.txt"), "user.origin").expect("xattr"),
        Some(b"pliant".to_vec())
    );
    assert!(!m.backing.join("d/e2").exists() && !m.backing.join("d/link").exists());
}

/// FIFOs and Unix sockets made through the mount are made in the backing directory and work
/// through the mount (the kernel serves them; no data of theirs reaches the cache). Every wait
/// is bounded: a FIFO's reader opens without blocking and reads for at most 10 s.
#[test]
fn fifos_and_sockets_work_through_the_mount() {
    use std::io::{Read, Write};
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let Some(mut m) = mount_with(&["--capacity", "8MiB"]) else {
        return;
    };
    nix::unistd::mkfifo(
        &m.at("pipe"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .expect("mkfifo through the mount");
    assert!(
        fs::symlink_metadata(m.backing.join("pipe"))
            .expect("in the backing directory")
            .file_type()
            .is_fifo()
    );
    assert!(
        fs::symlink_metadata(m.at("pipe"))
            .expect("through the mount")
            .file_type()
            .is_fifo()
    );
    let mut reader = fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(m.at("pipe"))
        .expect("open the reading end");
    let path = m.at("pipe");
    let writer = std::thread::spawn(move || fs::write(path, b"through the pipe"));
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while got.len() < 16 && std::time::Instant::now() < deadline {
        let mut buf = [0u8; 64];
        match reader.read(&mut buf) {
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("reading the fifo: {e}"),
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    writer.join().expect("writer").expect("write the fifo");
    assert_eq!(got, b"through the pipe");

    let listener = std::os::unix::net::UnixListener::bind(m.at("sock")).expect("bind in the mount");
    assert!(
        fs::symlink_metadata(m.backing.join("sock"))
            .expect("in the backing directory")
            .file_type()
            .is_socket()
    );
    let mut client =
        std::os::unix::net::UnixStream::connect(m.at("sock")).expect("connect through the mount");
    let (mut server, _) = listener.accept().expect("accept");
    client.write_all(b"ping").expect("send");
    let mut four = [0u8; 4];
    server.read_exact(&mut four).expect("receive");
    assert_eq!(&four, b"ping");
    drop((client, server, listener, reader));
    fs::remove_file(m.at("sock")).expect("unlink the socket");
    fs::remove_file(m.at("pipe")).expect("unlink the fifo");
    assert!(!m.backing.join("sock").exists() && !m.backing.join("pipe").exists());
    assert_eq!(m.stats()["used_bytes"], 0, "nothing of theirs was cached");
    m.unmount();
}

/// Hard links through the mount behave as on the backing directory: one inode number and
/// one file for both names, `st_nlink`, data written through one name read through the other,
/// one name unlinked or renamed over while the other keeps the data.
#[test]
fn hard_links_through_the_mount_are_one_file() {
    use std::os::unix::fs::MetadataExt;
    let Some(mut m) = mount_with(&["--capacity", "8MiB", "--extent", "64KiB"]) else {
        return;
    };
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    fs::write(m.at("a"), &data).expect("write a");
    fs::hard_link(m.at("a"), m.at("b")).expect("ln a b");
    let (ma, mb) = (
        fs::metadata(m.at("a")).expect("a"),
        fs::metadata(m.at("b")).expect("b"),
    );
    assert_eq!(ma.ino(), mb.ino(), "one inode number for both names");
    assert_eq!((ma.nlink(), mb.nlink()), (2, 2));
    assert_eq!(
        fs::metadata(m.backing.join("a")).expect("backing a").ino(),
        fs::metadata(m.backing.join("b")).expect("backing b").ino(),
        "a link in the backing directory"
    );
    // Appended through b, read through a (the cache's data: nothing written back yet).
    let mut f = OpenOptions::new()
        .append(true)
        .open(m.at("b"))
        .expect("open b");
    f.write_all(b"tail").expect("append");
    drop(f);
    let mut want = data.clone();
    want.extend_from_slice(b"tail");
    assert_eq!(fs::read(m.at("a")).expect("read a"), want);
    fs::remove_file(m.at("a")).expect("rm a");
    assert_eq!(fs::metadata(m.at("b")).expect("b").nlink(), 1);
    assert_eq!(fs::read(m.at("b")).expect("read b"), want);
    // Linked again, then another file renamed over the new name: b keeps its data.
    fs::hard_link(m.at("b"), m.at("c")).expect("ln b c");
    fs::write(m.at("d"), b"another file").expect("write d");
    fs::rename(m.at("d"), m.at("c")).expect("mv d c");
    assert_eq!(fs::read(m.at("c")).expect("read c"), b"another file");
    assert_eq!(fs::metadata(m.at("b")).expect("b").nlink(), 1);
    assert_eq!(fs::read(m.at("b")).expect("read b"), want);
    m.unmount();
    assert_eq!(fs::read(m.backing.join("b")).expect("backing b"), want);
    assert_eq!(
        fs::read(m.backing.join("c")).expect("backing c"),
        b"another file"
    );
    assert!(!m.backing.join("a").exists() && !m.backing.join("d").exists());
}

#[test]
fn kill_9_loses_nothing_fsynced_and_the_next_mount_writes_it_back() {
    kill_9_case(&[]);
}

/// The same through the kernel's write-back cache (a mount without passthrough): fsync
/// writes the kernel's dirty pages to the daemon before it asks the daemon to sync.
#[test]
fn kill_9_loses_nothing_fsynced_under_the_write_cache() {
    kill_9_case(&["--no-passthrough"]);
}

/// The same under `--direct-io`: each write reaches the daemon before `write()` returns, and
/// `fsync` syncs what it holds.
#[test]
fn kill_9_loses_nothing_fsynced_under_direct_io() {
    kill_9_case(&["--no-passthrough", "--direct-io"]);
}

fn kill_9_case(extra: &[&str]) {
    let args: Vec<&str> = ["--capacity", "16MiB", "--extent", "64KiB"]
        .iter()
        .chain(extra)
        .copied()
        .collect();
    let Some(mut m) = mount_with(&args) else {
        return;
    };
    let synced: Vec<u8> = (0..500_000u32).map(|i| (i % 241) as u8).collect();
    let mut f = fs::File::create(m.at("synced")).expect("create");
    f.write_all(&synced).expect("write");
    f.sync_all().expect("fsync");
    fs::write(m.at("unsynced"), b"may be lost").expect("write");
    // A hard-linked file whose journaled name goes before the crash: its data comes back
    // under the name that is left.
    let linked: Vec<u8> = (0..200_000u32).map(|i| (i % 239) as u8).collect();
    let mut f = fs::File::create(m.at("linked")).expect("create linked");
    f.write_all(&linked).expect("write linked");
    fs::hard_link(m.at("linked"), m.at("other-name")).expect("link");
    f.sync_all().expect("fsync linked");
    fs::remove_file(m.at("linked")).expect("unlink the journaled name");
    // Nothing of it is in the backing directory yet: it is only in the cache (and journal).
    assert_eq!(
        fs::metadata(m.backing.join("synced")).expect("meta").len(),
        0
    );
    m.kill9();
    m.start();
    // The remount wrote the journal's extents back before serving.
    assert_eq!(
        fs::read(m.backing.join("synced")).expect("backing after recovery"),
        synced
    );
    assert_eq!(fs::read(m.at("synced")).expect("through the mount"), synced);
    assert_eq!(
        fs::read(m.backing.join("other-name")).expect("the link left"),
        linked
    );
    assert!(
        !m.backing.join("linked").exists(),
        "the removed name stays removed"
    );
    let log = fs::read_to_string(m.cache.join("mount.log")).expect("log");
    assert!(log.contains("recovered"), "{log}");
    m.unmount();
    assert_eq!(fs::read(m.backing.join("synced")).expect("backing"), synced);
}

#[test]
fn a_file_changed_behind_the_cache_is_revalidated_on_open() {
    let Some(mut m) = mount_with(&["--capacity", "8MiB", "--extent", "64KiB"]) else {
        return;
    };
    fs::write(m.backing.join("input"), b"version one").expect("seed");
    assert_eq!(fs::read(m.at("input")).expect("read"), b"version one");
    // Another client of the parallel file system rewrites it (a second later: mtimes differ).
    std::thread::sleep(std::time::Duration::from_millis(1100));
    fs::write(m.backing.join("input"), b"version two, longer").expect("rewrite");
    std::thread::sleep(std::time::Duration::from_millis(1100)); // past the attribute TTL
    assert_eq!(
        fs::read(m.at("input")).expect("reread"),
        b"version two, longer"
    );
    assert_eq!(m.stats()["revalidated_files"], 1);
    m.unmount();
}

/// Write-through (no write-back cache in the kernel): the daemon has each `write()` before it
/// returns, and the write that crosses a limit fails (EFBIG past --max-file-size, EDQUOT past
/// the write window).
#[test]
fn the_write_window_refuses_with_edquot_and_large_files_get_efbig() {
    limits_case(&["--no-write-cache"]);
}

/// The same under `--direct-io` (no page cache: each `write()` a request of its own).
#[test]
fn under_direct_io_the_daemon_has_each_write_and_limits_refuse_it() {
    limits_case(&["--direct-io", "--no-passthrough"]);
}

/// `--kernel-read-ahead` raises the mount's read-ahead in sysfs once the kernel has the
/// daemon's INIT (which would cut a value written earlier back to 128 KiB), and the kernel then
/// sends a sequential reader's data in larger requests: the daemon counts fewer of them for the
/// same bytes than on a mount without it.
#[test]
fn a_larger_kernel_read_ahead_sends_the_daemon_larger_reads() {
    if !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI: --kernel-read-ahead is root's; the fs tests run as root"
        );
        pliant_testdata::skip("--kernel-read-ahead needs root");
        return;
    }
    let mean_read = |extra: &[&str]| -> (u64, f64) {
        let args: Vec<&str> = ["--capacity", "64MiB", "--no-passthrough"]
            .into_iter()
            .chain(extra.iter().copied())
            .collect();
        let mut m = mount_with(&args).expect("fuse");
        let data: Vec<u8> = (0..16u32 << 20).map(|i| (i % 251) as u8).collect();
        fs::write(m.backing.join("f"), &data).expect("seed");
        use std::os::unix::fs::MetadataExt;
        let dev = fs::metadata(&m.mnt).expect("stat").dev();
        let sysfs = format!(
            "/sys/class/bdi/{}:{}/read_ahead_kb",
            nix::sys::stat::major(dev),
            nix::sys::stat::minor(dev)
        );
        // The setting is made on a thread of the daemon once the mount answers: polled.
        let mut kib = 0;
        for _ in 0..50 {
            kib = fs::read_to_string(&sysfs)
                .expect(&sysfs)
                .trim()
                .parse()
                .expect("KiB");
            if extra.is_empty() || kib == 4096 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        assert_eq!(fs::read(m.at("f")).expect("cold read"), data);
        for _ in 0..100 {
            if m.stats()["copy_up_bytes"].as_u64() == Some(16 << 20) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let mut f = fs::File::open(m.at("f")).expect("open");
        nix::fcntl::posix_fadvise(
            &f,
            0,
            0,
            nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
        )
        .expect("drop the mount's pages of the file");
        let before = m.stats();
        let mut back = Vec::new();
        let mut chunk = vec![0u8; 1 << 20];
        loop {
            let n = f.read(&mut chunk).expect("read");
            if n == 0 {
                break;
            }
            back.extend_from_slice(&chunk[..n]);
        }
        assert!(back == data, "the warm read returned other bytes");
        let after = m.stats();
        let n = |s: &serde_json::Value, k: &str| s[k].as_u64().expect(k);
        let bytes = n(&after, "read_hit_bytes") + n(&after, "read_miss_bytes")
            - n(&before, "read_hit_bytes")
            - n(&before, "read_miss_bytes");
        let requests = n(&after, "read_requests") - n(&before, "read_requests");
        assert!(
            bytes >= 16 << 20,
            "the daemon served {bytes} bytes of the warm read"
        );
        drop(f);
        m.unmount();
        (kib, bytes as f64 / requests as f64)
    };
    let (default_kib, default_mean) = mean_read(&[]);
    let (kib, mean) = mean_read(&["--kernel-read-ahead", "4MiB"]);
    assert_eq!(
        kib, 4096,
        "{kib} KiB in sysfs (the kernel's default: {default_kib})"
    );
    assert!(
        mean >= 2.0 * default_mean && mean >= 512.0 * 1024.0,
        "mean read request {mean:.0} bytes with 4 MiB of read-ahead, {default_mean:.0} without"
    );
}

fn limits_case(extra: &[&str]) {
    let args: Vec<&str> = [
        "--capacity",
        "4MiB",
        "--extent",
        "64KiB",
        "--write-window-multiplier",
        "1",
        "--max-file-size",
        "3MiB",
    ]
    .into_iter()
    .chain(extra.iter().copied())
    .collect();
    let Some(mut m) = mount_with(&args) else {
        return;
    };
    let mut f = fs::File::create(m.at("seen")).expect("create");
    f.write_all(&vec![3u8; 1 << 20]).expect("1 MiB");
    assert_eq!(
        m.stats()["window_used_bytes"].as_u64().expect("used"),
        1 << 20,
        "the daemon holds the write before any fsync or close"
    );
    drop(f);
    let mut f = fs::File::create(m.at("big")).expect("create");
    let e = f
        .write_all(&vec![1u8; 4 << 20])
        .expect_err("past max-file-size");
    assert_eq!(
        e.raw_os_error(),
        Some(nix::errno::Errno::EFBIG as i32),
        "{e}"
    );
    drop(f);
    let mut written = 0;
    let mut quota = None;
    for i in 0..4 {
        let mut f = fs::File::create(m.at(&format!("f{i}"))).expect("create");
        match f.write_all(&vec![2u8; 2 << 20]) {
            Ok(()) => written += 2 << 20,
            Err(e) => {
                quota = e.raw_os_error();
                break;
            }
        }
    }
    assert_eq!(
        quota,
        Some(nix::errno::Errno::EDQUOT as i32),
        "after {written} bytes"
    );
    let s = m.stats();
    assert!(
        s["edquot_writes"].as_u64().expect("edquot") >= 1
            && s["efbig_writes"].as_u64().expect("efbig") >= 1
    );
    assert!(s["window_used_bytes"].as_u64().expect("used") <= 4 << 20);
    m.unmount();
    let seen = fs::read(m.backing.join("seen")).expect("backing");
    assert_eq!(
        seen,
        vec![3u8; 1 << 20],
        "the accepted MiB reached the backing directory"
    );
}

/// Under the kernel's write-back cache the daemon sees a write only when the kernel writes it
/// back: `write()` succeeds, the refusal (EFBIG past --max-file-size, EDQUOT past the write
/// window) comes back from `fsync`, or from `close` (as EIO: all the kernel keeps for it) when
/// nothing was synced; the cache and the backing directory hold only what was accepted.
#[test]
fn under_the_write_cache_edquot_and_efbig_reach_fsync_and_close() {
    use std::os::fd::IntoRawFd;
    let Some(mut m) = mount_with(&[
        "--no-passthrough",
        "--capacity",
        "4MiB",
        "--extent",
        "64KiB",
        "--write-window-multiplier",
        "1",
        "--max-file-size",
        "3MiB",
    ]) else {
        return;
    };
    // Under the kernel's write cache a write returns before the daemon sees it: the refusal
    // comes at the fsync.
    let refused_at_fsync = |name: &str, fill: u8, len: usize, why: &str| {
        let mut f = fs::File::create(m.at(name)).expect("create");
        f.write_all(&vec![fill; len])
            .expect("the kernel takes the write");
        f.sync_all().expect_err(why).raw_os_error()
    };
    assert_eq!(
        refused_at_fsync("big", 1, 4 << 20, "past max-file-size"),
        Some(nix::errno::Errno::EFBIG as i32)
    );
    // 3 MiB were accepted (and charged to the window, 4 MiB long): the next 2 MiB cross it.
    assert_eq!(
        refused_at_fsync("f0", 2, 2 << 20, "past the write window"),
        Some(nix::errno::Errno::EDQUOT as i32)
    );
    // Not synced: close says it.
    let mut f = fs::File::create(m.at("f1")).expect("create");
    f.write_all(&vec![3u8; 1 << 20])
        .expect("the kernel takes the write");
    let e = nix::unistd::close(f.into_raw_fd()).expect_err("close after a refused write-back");
    assert_eq!(e, nix::errno::Errno::EIO);
    let s = m.stats();
    assert!(
        s["edquot_writes"].as_u64().expect("edquot") >= 1
            && s["efbig_writes"].as_u64().expect("efbig") >= 1,
        "{s}"
    );
    assert!(s["window_used_bytes"].as_u64().expect("used") <= 4 << 20);
    m.unmount();
    // Only what the daemon accepted reached the backing directory.
    let big = fs::read(m.backing.join("big")).expect("big");
    assert!(
        big.len() <= 3 << 20 && big.iter().all(|&b| b == 1),
        "{}",
        big.len()
    );
    assert!(fs::metadata(m.backing.join("f1")).expect("f1").len() < 1 << 20);
}

#[test]
fn a_user_who_cannot_traverse_the_backing_parents_cannot_reach_it_through_the_cache() {
    if !two_users_possible() {
        return;
    }
    if !fuse_available() {
        return;
    }
    // /…/alice (0700, alice's) / project (0755): bob may not reach project at all.
    let top = tempfile::tempdir().expect("tempdir");
    fs::set_permissions(top.path(), fs::Permissions::from_mode(0o755)).expect("chmod top");
    let (alice, bob) = (60_001u32, 60_002u32);
    let home = top.path().join("alice");
    let project = home.join("project");
    fs::create_dir_all(&project).expect("mkdir");
    fs::write(project.join("secret"), b"alice's data").expect("seed");
    for p in [&home, &project, &project.join("secret")] {
        std::os::unix::fs::chown(p, Some(alice), Some(alice)).expect("chown");
    }
    fs::set_permissions(&home, fs::Permissions::from_mode(0o700)).expect("chmod home");
    fs::set_permissions(&project, fs::Permissions::from_mode(0o755)).expect("chmod project");
    fs::set_permissions(project.join("secret"), fs::Permissions::from_mode(0o644)).expect("chmod");
    let mnt = top.path().join("mnt");
    fs::create_dir(&mnt).expect("mnt");
    let cache = top.path().join("cache");
    let p = |s: &Path| s.to_str().expect("utf-8").to_string();
    let args = [
        "fs",
        "mount",
        &p(&project),
        &p(&mnt),
        "--cache-dir",
        &p(&cache),
        "--capacity",
        "8MiB",
        "--allow-other",
    ];
    ok(&pliant(&args, top.path()));
    let cat_as = |uid: u32| {
        Command::new("setpriv")
            .args([
                format!("--reuid={uid}"),
                format!("--regid={uid}"),
                "--clear-groups".into(),
            ])
            .arg("cat")
            .arg(mnt.join("secret"))
            .output()
            .expect("setpriv")
    };
    let as_bob = cat_as(bob);
    let as_alice = cat_as(alice);
    // A file alice creates through the mount is hers in the backing directory.
    let touch = Command::new("setpriv")
        .args([
            format!("--reuid={alice}"),
            format!("--regid={alice}"),
            "--clear-groups".into(),
        ])
        .arg("touch")
        .arg(mnt.join("new"))
        .output()
        .expect("setpriv touch");
    ok(&pliant(&["fs", "unmount", &p(&mnt)], top.path()));
    assert!(
        !as_bob.status.success(),
        "bob read alice's file through the cache"
    );
    assert!(
        String::from_utf8_lossy(&as_bob.stderr).contains("Permission denied"),
        "{}",
        String::from_utf8_lossy(&as_bob.stderr)
    );
    assert_eq!(
        as_alice.stdout,
        b"alice's data",
        "{}",
        String::from_utf8_lossy(&as_alice.stderr)
    );
    assert!(
        touch.status.success(),
        "{}",
        String::from_utf8_lossy(&touch.stderr)
    );
    let meta = fs::metadata(project.join("new")).expect("created in the backing directory");
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), alice);
}

#[test]
fn job_directives_set_up_a_cache_and_teardown_writes_it_back() {
    if !fuse_available() {
        return;
    }
    let top = tempfile::tempdir().expect("tempdir");
    let pfs = top.path().join("pfs");
    fs::create_dir_all(pfs.join("input")).expect("pfs");
    fs::write(pfs.join("input/mesh"), vec![7u8; 300_000]).expect("input");
    let script = top.path().join("job.sh");
    fs::write(
        &script,
        format!(
            "#!/bin/bash\n#SBATCH -N 1\n#DW jobdw type=cache access_mode=striped(MFS=1GiB) pfs={} \\\n#DW   capacity=64MiB write_window_multiplier=4\n#DW preload path={}/input\nsrun ./a.out\n",
            pfs.display(),
            pfs.display()
        ),
    )
    .expect("script");
    let root = top.path().join("jobs");
    let r = |s: &Path| s.to_str().expect("utf-8").to_string();
    ok(&pliant(&["job", "check", &r(&script)], top.path()));
    let env = ok(&pliant(
        &[
            "job",
            "setup",
            &r(&script),
            "--job-id",
            "42",
            "--root",
            &r(&root),
        ],
        top.path(),
    ));
    let cache = env
        .lines()
        .find_map(|l| l.strip_prefix("DW_JOB_STRIPED_CACHE="))
        .map(PathBuf::from)
        .expect("DW_JOB_STRIPED_CACHE");
    let s = json(&pliant(&["fs", "stat", &r(&cache), "--json"], top.path()));
    assert_eq!(
        s["copy_up_bytes"], 300_000,
        "the preload copied the input up"
    );
    assert_eq!(s["window_limit_bytes"], 4 * (64 << 20));
    fs::write(cache.join("output"), b"results").expect("job writes");
    ok(&pliant(
        &["job", "teardown", "--job-id", "42", "--root", &r(&root)],
        top.path(),
    ));
    assert_eq!(
        fs::read(pfs.join("output")).expect("written back"),
        b"results"
    );
    assert!(
        !root.join("42").exists(),
        "teardown removes the job's directory"
    );
    // Teardown again (Slurm retries) is fine; a bad directive names its line and parameter.
    ok(&pliant(
        &["job", "teardown", "--job-id", "42", "--root", &r(&root)],
        top.path(),
    ));
    fs::write(
        &script,
        "#!/bin/bash\n#DW jobdw type=cache access_mode=striped pfs=/x capacity=12XB\n",
    )
    .expect("bad");
    let e = err(&pliant(&["job", "check", &r(&script)], top.path()));
    assert!(
        e.contains("job.sh:2:") && e.contains("capacity=12XB"),
        "{e}"
    );
}

/// `job setup --cache-servers 3`: three cache servers and a striped mount over them; the
/// preload goes through the servers; a server killed with -9 after an fsync loses nothing: the
/// teardown replays its journal, says so, and every server's data is in the pfs after it.
#[test]
fn a_striped_job_writes_back_every_servers_data_at_teardown_even_a_killed_ones() {
    if !fuse_available() {
        return;
    }
    let top = tempfile::tempdir().expect("tempdir");
    let pfs = top.path().join("pfs");
    fs::create_dir_all(&pfs).expect("pfs");
    let input: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    fs::write(pfs.join("input"), &input).expect("input");
    let script = top.path().join("job.sh");
    fs::write(
        &script,
        format!(
            "#!/bin/bash\n#DW jobdw type=cache access_mode=striped capacity=192MiB pfs={}\n#DW preload path={}/input\n",
            pfs.display(),
            pfs.display()
        ),
    )
    .expect("script");
    let root = top.path().join("jobs");
    let _cleanup = (
        JobCleanup {
            roots: vec![root.clone()],
            id: "9",
        },
        JobCleanup {
            roots: vec![root.clone()],
            id: "10",
        },
    );
    let r = |s: &Path| s.to_str().expect("utf-8").to_string();
    let env = ok(&pliant(
        &[
            "job",
            "setup",
            &r(&script),
            "--job-id",
            "9",
            "--root",
            &r(&root),
            "--cache-servers",
            "3",
        ],
        top.path(),
    ));
    let cache = env
        .lines()
        .find_map(|l| l.strip_prefix("DW_JOB_STRIPED_CACHE="))
        .map(PathBuf::from)
        .expect("DW_JOB_STRIPED_CACHE");
    let state: serde_json::Value =
        serde_json::from_slice(&fs::read(root.join("9/job.json")).expect("job.json"))
            .expect("json");
    let pids: Vec<i32> = state["servers"]
        .as_array()
        .expect("servers")
        .iter()
        .map(|s| s["pid"].as_i64().expect("pid") as i32)
        .collect();
    assert_eq!(pids.len(), 3);
    let s = json(&pliant(&["fs", "stat", &r(&cache), "--json"], top.path()));
    assert_eq!(s["servers"], 3);
    assert_eq!(s["capacity_bytes"], 192 << 20, "the capacity is shared out");
    assert_eq!(
        s["copy_up_bytes"], 3_000_000,
        "the preload copied the input up into the servers"
    );
    let output: Vec<u8> = (0..7_000_000u32).map(|i| (i * 7 % 253) as u8).collect();
    {
        let mut f = fs::File::create(cache.join("output")).expect("create");
        f.write_all(&output).expect("write");
        f.sync_all().expect("fsync");
    }
    assert!(
        fs::metadata(pfs.join("output")).expect("name").len() < output.len() as u64,
        "written back before the teardown: the kill below would prove nothing"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pids[1]),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill -9");
    let out = pliant(
        &["job", "teardown", "--job-id", "9", "--root", &r(&root)],
        top.path(),
    );
    ok(&out);
    let said = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(said.contains("had died; its journal wrote back"), "{said}");
    assert!(
        fs::read(pfs.join("output")).expect("output") == output,
        "the pfs has every fsync'ed byte after the teardown"
    );
    assert!(
        !root.join("9").exists(),
        "teardown removes the job's directory"
    );
    for pid in pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists()
                || fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.contains(") Z ")),
            "server {pid} still running after the teardown"
        );
    }

    // A server lost for good (killed, and its storage gone with it): the teardown fails naming
    // the file whose data it held, never a silent success; --discard then takes the job down.
    ok(&pliant(
        &[
            "job",
            "setup",
            &r(&script),
            "--job-id",
            "10",
            "--root",
            &r(&root),
            "--cache-servers",
            "3",
        ],
        top.path(),
    ));
    let mnt = root.join("10/mnt");
    fs::write(mnt.join("checkpoint.h5"), vec![9u8; 3 << 20]).expect("write");
    let state: serde_json::Value =
        serde_json::from_slice(&fs::read(root.join("10/job.json")).expect("job.json"))
            .expect("json");
    let victim = &state["servers"][0];
    let dir = PathBuf::from(victim["cache_dir"].as_str().expect("cache_dir"));
    let listed = victim["dirty_list"]
        .as_str()
        .expect("dirty_list")
        .to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !fs::read_to_string(&listed).is_ok_and(|t| t.contains("checkpoint.h5")) {
        assert!(
            std::time::Instant::now() < deadline,
            "the server never listed the file"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(victim["pid"].as_i64().expect("pid") as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill -9");
    fs::remove_dir_all(&dir).expect("its storage goes");
    let e = err(&pliant(
        &["job", "teardown", "--job-id", "10", "--root", &r(&root)],
        top.path(),
    ));
    assert!(e.contains("is lost: checkpoint.h5"), "{e}");
    assert!(
        root.join("10").exists(),
        "kept for a teardown with --discard"
    );
    ok(&pliant(
        &[
            "job",
            "teardown",
            "--job-id",
            "10",
            "--root",
            &r(&root),
            "--discard",
        ],
        top.path(),
    ));
    assert!(!root.join("10").exists());
}

/// Root setting up a striped job for another user (Slurm's Prolog) runs the cache servers as
/// that user: a server run as root would take whatever uid a request claims, and a user who
/// swapped directories in their pfs between its check and its open reached other users' files
/// through it (found by an audit). The user's writes land in the pfs as theirs.
#[test]
fn a_striped_job_for_another_user_runs_its_servers_as_that_user() {
    if !fuse_available() || !two_users_possible() {
        return;
    }
    let top = tempfile::tempdir().expect("tempdir");
    fs::set_permissions(top.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    let pfs = top.path().join("pfs");
    fs::create_dir_all(&pfs).expect("pfs");
    nix::unistd::chown(&pfs, Some(65534.into()), Some(65534.into())).expect("chown");
    let script = striped_script(top.path(), &pfs, "128MiB");
    let root = top.path().join("jobs");
    let _cleanup = JobCleanup {
        roots: vec![root.clone()],
        id: "15",
    };
    let r = |s: &Path| s.to_str().expect("utf-8").to_string();
    let env = ok(&pliant(
        &[
            "job",
            "setup",
            &r(&script),
            "--job-id",
            "15",
            "--root",
            &r(&root),
            "--uid",
            "65534",
            "--cache-servers",
            "2",
        ],
        top.path(),
    ));
    let cache = env
        .lines()
        .find_map(|l| l.strip_prefix("DW_JOB_STRIPED_CACHE="))
        .map(PathBuf::from)
        .expect("DW_JOB_STRIPED_CACHE");
    let state: serde_json::Value =
        serde_json::from_slice(&fs::read(root.join("15/job.json")).expect("job.json"))
            .expect("json");
    for srv in state["servers"].as_array().expect("servers") {
        let pid = srv["pid"].as_u64().expect("pid");
        let status = fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        let uid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .expect("Uid line")
            .split_whitespace()
            .collect::<Vec<_>>();
        assert_eq!(uid, ["65534"; 4], "server {pid} runs as the job's user");
    }
    let o = python_as(
        65534,
        &format!(
            "import os\nfd = os.open({:?}, os.O_CREAT | os.O_WRONLY, 0o644)\nos.write(fd, bytes(range(256)) * 12288)\nos.fsync(fd)\nos.close(fd)\n\
             fd = os.open({:?}, os.O_CREAT | os.O_WRONLY, 0o444)\nos.write(fd, b'made read-only')\nos.close(fd)\n\
             fd = os.open({:?}, os.O_CREAT | os.O_WRONLY, 0o644)\nos.write(fd, b'written, then made read-only')\nos.fchmod(fd, 0o444)\nos.close(fd)\n",
            cache.join("out").display().to_string(),
            cache.join("created-read-only").display().to_string(),
            cache.join("chmodded").display().to_string(),
        ),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    ok(&pliant(
        &["job", "teardown", "--job-id", "15", "--root", &r(&root)],
        top.path(),
    ));
    let want: Vec<u8> = (0..12288).flat_map(|_| 0u8..=255).collect();
    assert!(fs::read(pfs.join("out")).expect("out") == want);
    let meta = fs::metadata(pfs.join("out")).expect("meta");
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), 65534);
    // A file its owner may no longer write keeps what was written before (POSIX lets the
    // descriptor that created it, or opened it before the chmod, write): the servers, which
    // run as that owner, write it back, and leave its mode as the owner set it.
    for (name, want) in [
        ("created-read-only", "made read-only"),
        ("chmodded", "written, then made read-only"),
    ] {
        assert_eq!(
            fs::read_to_string(pfs.join(name)).expect("read"),
            want,
            "{name}"
        );
        let mode = fs::metadata(pfs.join(name))
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o444, "{name}");
    }
}

/// A striped mount killed with -9 after an fsync loses nothing: the data is in the servers,
/// and the teardown (which detaches the dead mount) writes it back.
#[test]
fn a_striped_mount_killed_after_an_fsync_loses_nothing() {
    if !fuse_available() {
        return;
    }
    let top = tempfile::tempdir().expect("tempdir");
    let pfs = top.path().join("pfs");
    fs::create_dir_all(&pfs).expect("pfs");
    let script = striped_script(top.path(), &pfs, "128MiB");
    let root = top.path().join("jobs");
    let _cleanup = JobCleanup {
        roots: vec![root.clone()],
        id: "13",
    };
    let r = |s: &Path| s.to_str().expect("utf-8").to_string();
    ok(&pliant(
        &[
            "job",
            "setup",
            &r(&script),
            "--job-id",
            "13",
            "--root",
            &r(&root),
            "--cache-servers",
            "2",
        ],
        top.path(),
    ));
    let mnt = root.join("13/mnt");
    let data: Vec<u8> = (0..4_000_000u32).map(|i| (i % 249) as u8).collect();
    {
        let mut f = fs::File::create(mnt.join("out")).expect("create");
        f.write_all(&data).expect("write");
        f.sync_all().expect("fsync");
    }
    let pid = json(&pliant(&["fs", "stat", &r(&mnt), "--json"], top.path()))["pid"]
        .as_i64()
        .expect("the mount's pid") as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill -9 the mount");
    ok(&pliant(
        &["job", "teardown", "--job-id", "13", "--root", &r(&root)],
        top.path(),
    ));
    assert!(
        fs::read(pfs.join("out")).expect("out") == data,
        "every fsync'ed byte is in the pfs after the mount was killed"
    );
}

/// A batch script in `top` asking for a striped cache of `capacity` over `pfs`.
fn striped_script(top: &Path, pfs: &Path, capacity: &str) -> PathBuf {
    let script = top.join("job.sh");
    fs::write(
        &script,
        format!(
            "#!/bin/bash\n#DW jobdw type=cache access_mode=striped capacity={capacity} pfs={}\n",
            pfs.display()
        ),
    )
    .expect("script");
    script
}

/// Takes a job down (discarding) when a test ends without having done it: a failed assertion
/// must not leave cache servers and mounts running (they hold ports and mounts the next tests
/// need). After a teardown that ran, it finds nothing to do.
pub(crate) struct JobCleanup {
    pub(crate) roots: Vec<PathBuf>,
    pub(crate) id: &'static str,
}

impl Drop for JobCleanup {
    fn drop(&mut self) {
        for root in &self.roots {
            let _ = Command::new(env!("CARGO_BIN_EXE_pliant"))
                .args([
                    "job",
                    "teardown",
                    "--discard",
                    "--job-id",
                    self.id,
                    "--root",
                ])
                .arg(root)
                .output();
        }
    }
}

/// Three nodes' `pliant job setup --rendezvous` for job `id` at once (three job roots under
/// `top`, standing for three nodes), meeting in `rv`: each node's mount point.
fn three_nodes_setup(top: &Path, script: &Path, rv: &Path, id: &str) -> Vec<PathBuf> {
    let r = |s: &Path| s.to_str().expect("utf-8").to_string();
    let outs: Vec<std::process::Output> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..3)
            .map(|i| {
                let (script, rv) = (r(script), r(rv));
                let root = r(&top.join(format!("node{i}")));
                s.spawn(move || {
                    std::process::Command::new(env!("CARGO_BIN_EXE_pliant"))
                        .args([
                            "job",
                            "setup",
                            &script,
                            "--job-id",
                            id,
                            "--root",
                            &root,
                            "--rendezvous",
                            &rv,
                            "--nodes",
                            "3",
                            "--node",
                            &format!("n{i}"),
                            "--listen",
                            "127.0.0.1",
                            "--advertise",
                            "127.0.0.1",
                        ])
                        .output()
                        .expect("pliant job setup")
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("setup")).collect()
    });
    outs.iter()
        .map(|o| {
            ok(o)
                .lines()
                .find_map(|l| l.strip_prefix("DW_JOB_STRIPED_CACHE="))
                .map(PathBuf::from)
                .expect("DW_JOB_STRIPED_CACHE")
        })
        .collect()
}

/// Three nodes' setups (here three job roots on one machine) meet in one directory: each
/// starts its server, and every node's mount stripes over all three, so what each node writes
/// of one shared file every node reads whole; each node's teardown writes its server's stripes
/// back. A meeting directory others may write is refused.
#[test]
fn three_nodes_setups_meet_and_share_one_striped_cache() {
    if !fuse_available() {
        return;
    }
    let top = tempfile::tempdir().expect("tempdir");
    let pfs = top.path().join("pfs");
    fs::create_dir_all(&pfs).expect("pfs");
    let script = striped_script(top.path(), &pfs, "192MiB");
    let _cleanup = JobCleanup {
        roots: (0..3)
            .map(|i| top.path().join(format!("node{i}")))
            .collect(),
        id: "11",
    };
    let rv = top.path().join("rendezvous");
    fs::create_dir(&rv).expect("rendezvous");
    let r = |s: &Path| s.to_str().expect("utf-8").to_string();
    fs::set_permissions(&rv, fs::Permissions::from_mode(0o777)).expect("chmod");
    let e = err(&pliant(
        &[
            "job",
            "setup",
            &r(&script),
            "--job-id",
            "11",
            "--root",
            &r(&top.path().join("node0")),
            "--rendezvous",
            &r(&rv),
            "--nodes",
            "3",
            "--node",
            "n0",
        ],
        top.path(),
    ));
    assert!(e.contains("no one else may write"), "{e}");
    fs::set_permissions(&rv, fs::Permissions::from_mode(0o700)).expect("chmod");
    let mnts = three_nodes_setup(top.path(), &script, &rv, "11");
    let data: Vec<u8> = (0..6_000_000u32).map(|i| (i * 13 % 251) as u8).collect();
    fs::File::create(mnts[0].join("shared")).expect("create");
    let cuts = [0, 2_000_017, 4_000_005, data.len()];
    for (i, m) in mnts.iter().enumerate() {
        let f = OpenOptions::new()
            .write(true)
            .open(m.join("shared"))
            .expect("open");
        f.write_all_at(&data[cuts[i]..cuts[i + 1]], cuts[i] as u64)
            .expect("write");
        f.sync_all().expect("fsync");
    }
    for m in &mnts {
        assert!(
            fs::read(m.join("shared")).expect("read") == data,
            "{} reads other than what the three nodes wrote",
            m.display()
        );
        let s = json(&pliant(&["fs", "stat", &r(m), "--json"], top.path()));
        assert_eq!(s["servers"], 3);
    }
    for i in 0..3 {
        let root = top.path().join(format!("node{i}"));
        ok(&pliant(
            &["job", "teardown", "--job-id", "11", "--root", &r(&root)],
            top.path(),
        ));
    }
    assert!(
        fs::read(pfs.join("shared")).expect("pfs") == data,
        "the pfs holds the shared file after every node's teardown"
    );
}

/// Random operations through three striped mounts (three nodes' setups meeting in one
/// directory) against one model: creates, writes across stripe boundaries, truncations, reads,
/// renames, hard links, unlinks and fsyncs, each from a mount picked at random; every read and
/// size from any mount matches the model, and after every node's teardown the pfs holds it.
#[test]
fn random_operations_through_three_striped_mounts_match_one_model() {
    if !fuse_available() {
        return;
    }
    let top = tempfile::tempdir().expect("tempdir");
    let pfs = top.path().join("pfs");
    fs::create_dir_all(pfs.join("sub")).expect("pfs");
    let script = striped_script(top.path(), &pfs, "192MiB");
    let _cleanup = JobCleanup {
        roots: (0..3)
            .map(|i| top.path().join(format!("node{i}")))
            .collect(),
        id: "12",
    };
    let rv = top.path().join("rendezvous");
    fs::create_dir(&rv).expect("rendezvous");
    fs::set_permissions(&rv, fs::Permissions::from_mode(0o700)).expect("chmod");
    let r = |s: &Path| s.to_str().expect("utf-8").to_string();
    let mnts = three_nodes_setup(top.path(), &script, &rv, "12");
    let names = ["a", "b", "sub/c", "sub/d"];
    let mut rng = rand_pcg::Pcg64::seed_from_u64(35);
    let mut model: BTreeMap<usize, usize> = BTreeMap::new();
    let mut files: BTreeMap<usize, Vec<u8>> = BTreeMap::new();
    let mut next_file = 0;
    let unname = |model: &mut BTreeMap<usize, usize>, files: &mut BTreeMap<usize, Vec<u8>>, f| {
        if let Some(id) = model.remove(&f)
            && !model.values().any(|i| *i == id)
        {
            files.remove(&id);
        }
    };
    const MIB: usize = 1 << 20;
    // What was done, for the message of a failure.
    let mut log: Vec<String> = Vec::new();
    for n in 0..800 {
        let f = rng.random_range(0..names.len());
        let mi = rng.random_range(0..mnts.len());
        let m = &mnts[mi];
        let path = m.join(names[f]);
        let op = rng.random_range(0..100);
        log.push(format!("op {n}: kind {op} on {} via mount {mi}", names[f]));
        match op {
            0..10 if !model.contains_key(&f) => {
                fs::File::create(&path).expect("create");
                log.push("  created".into());
                model.insert(f, next_file);
                files.insert(next_file, Vec::new());
                next_file += 1;
            }
            10..45 if model.contains_key(&f) => {
                let off = rng.random_range(0..4 * MIB);
                let len = rng.random_range(1..MIB + MIB / 2);
                let seed = rng.random::<u8>();
                let data: Vec<u8> = (0..len)
                    .map(|i| seed.wrapping_add((i % 251) as u8))
                    .collect();
                let file = OpenOptions::new().write(true).open(&path).expect("open w");
                file.write_all_at(&data, off as u64).expect("pwrite");
                log.push(format!("  wrote {len} at {off}"));
                let mm = files.get_mut(&model[&f]).expect("model");
                if mm.len() < off + len {
                    mm.resize(off + len, 0);
                }
                mm[off..off + len].copy_from_slice(&data);
            }
            45..55 if model.contains_key(&f) => {
                let size = rng.random_range(0..3 * MIB);
                OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .expect("open t")
                    .set_len(size as u64)
                    .expect("truncate");
                log.push(format!("  truncated to {size}"));
                files.get_mut(&model[&f]).expect("model").resize(size, 0);
            }
            55..80 if model.contains_key(&f) => {
                let off = rng.random_range(0..5 * MIB as u64);
                let len = rng.random_range(1..2 * MIB);
                let mut file = fs::File::open(&path).expect("open r");
                file.seek(SeekFrom::Start(off)).expect("seek");
                let mut got = Vec::new();
                file.take(len as u64).read_to_end(&mut got).expect("read");
                log.push(format!("  read {len} at {off}"));
                let mm = &files[&model[&f]];
                let lo = (off as usize).min(mm.len());
                let hi = (off as usize + len).min(mm.len());
                assert!(
                    got == mm[lo..hi],
                    "op {n}: read {} @{off}+{len} via {}; the last steps:\n{}",
                    names[f],
                    m.display(),
                    log[log.len().saturating_sub(40)..].join("\n")
                );
                let size = fs::metadata(&path).expect("stat").len();
                assert!(
                    size == mm.len() as u64,
                    "op {n}: size of {} via {}: {size}, expected {}; the last steps:\n{}",
                    names[f],
                    m.display(),
                    mm.len(),
                    log[log.len().saturating_sub(40)..].join("\n")
                );
            }
            80..85 if model.contains_key(&f) => {
                let to = rng.random_range(0..names.len());
                if to != f {
                    fs::rename(&path, m.join(names[to])).expect("rename");
                    log.push(format!("  renamed to {}", names[to]));
                    if model.get(&to) != model.get(&f) {
                        unname(&mut model, &mut files, to);
                        let id = model.remove(&f).expect("model");
                        model.insert(to, id);
                    }
                }
            }
            85..88 if model.contains_key(&f) => {
                let to = rng.random_range(0..names.len());
                if !model.contains_key(&to) {
                    fs::hard_link(&path, m.join(names[to])).expect("link");
                    log.push(format!("  linked as {}", names[to]));
                    model.insert(to, model[&f]);
                }
            }
            88..94 if model.contains_key(&f) => {
                fs::remove_file(&path).expect("unlink");
                log.push("  unlinked".into());
                unname(&mut model, &mut files, f);
            }
            94..100 if model.contains_key(&f) => {
                OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .expect("open s")
                    .sync_all()
                    .expect("fsync");
                log.push("  fsynced".into());
            }
            _ => {}
        }
    }
    for i in 0..3 {
        ok(&pliant(
            &[
                "job",
                "teardown",
                "--job-id",
                "12",
                "--root",
                &r(&top.path().join(format!("node{i}"))),
            ],
            top.path(),
        ));
    }
    for (i, name) in names.iter().enumerate() {
        let on_disk = fs::read(pfs.join(name)).ok();
        assert!(
            on_disk.as_ref() == model.get(&i).map(|id| &files[id]),
            "pfs {name} after teardown: {:?} bytes, expected {:?}",
            on_disk.as_ref().map(Vec::len),
            model.get(&i).map(|id| files[id].len())
        );
    }
}

/// `job setup` runs as root and sent each `#DW preload` hint to the path by name, following
/// symbolic links: a link a user made in their pfs to another job's mount (which they cannot
/// enter) had root preload the other job's file into the other job's cache. A preload is now
/// resolved inside the job's own mount, following no link: setup fails naming the directive,
/// and the other cache is left as it was.
#[test]
fn a_preload_through_a_symbolic_link_in_the_pfs_is_refused() {
    if !fuse_available() {
        return;
    }
    let top = tempfile::tempdir().expect("tempdir");
    let root = top.path().join("jobs");
    let r = |s: &Path| s.to_str().expect("utf-8").to_string();
    let setup =
        |job_id: &str, pfs: &Path, preload: Option<&str>| {
            let script = top.path().join(format!("job{job_id}.sh"));
            fs::write(
            &script,
            format!(
                "#!/bin/bash\n#DW jobdw type=cache access_mode=striped pfs={} capacity=64MiB\n{}",
                pfs.display(),
                preload.map(|p| format!("#DW preload path={p}\n")).unwrap_or_default()
            ),
        )
        .expect("script");
            pliant(
                &[
                    "job",
                    "setup",
                    &r(&script),
                    "--job-id",
                    job_id,
                    "--root",
                    &r(&root),
                ],
                top.path(),
            )
        };
    let stat = |m: &Path| json(&pliant(&["fs", "stat", &r(m), "--json"], top.path()));
    // Another user's job, its secret in its pfs, mounted at ROOT/10/mnt.
    let theirs = top.path().join("theirs");
    fs::create_dir_all(&theirs).expect("their pfs");
    fs::write(theirs.join("secret"), vec![9u8; 300_000]).expect("secret");
    ok(&setup("10", &theirs, None));
    let their_mnt = root.join("10/mnt");
    // This job's pfs, with a link to that mount and an input of its own.
    let pfs = top.path().join("pfs");
    fs::create_dir_all(pfs.join("input")).expect("pfs");
    fs::write(pfs.join("input/mesh"), vec![7u8; 100_000]).expect("input");
    std::os::unix::fs::symlink(&their_mnt, pfs.join("link")).expect("symlink");
    let bad = format!("{}/link/secret", pfs.display());
    let e = err(&setup("11", &pfs, Some(&bad)));
    assert!(
        e.contains("job11.sh:3: #DW preload")
            && e.contains(&format!("path={bad}"))
            && e.contains("symbolic link"),
        "{e}"
    );
    assert!(
        !root.join("11").exists(),
        "a failed setup removes its directory: {e}"
    );
    let s = stat(&their_mnt);
    assert_eq!(
        s["copy_up_bytes"], 0,
        "the other job's cache is untouched: {s}"
    );
    assert_eq!(s["used_bytes"], 0, "{s}");
    // A link as the last name is refused too; a file inside the pfs is preloaded as before.
    let e = err(&setup("12", &pfs, Some(&format!("{}/link", pfs.display()))));
    assert!(
        e.contains("job12.sh:3:") && e.contains("symbolic link"),
        "{e}"
    );
    // Root setting up for another user (Slurm's Prolog): refused the same way, and with exit
    // status 3, the job's own fault, which the Prolog does not fail for (a failed Prolog drains
    // the node).
    if nix::unistd::geteuid().is_root() {
        let script = top.path().join("job14.sh");
        fs::write(
            &script,
            format!(
                "#!/bin/bash\n#DW jobdw type=cache access_mode=striped pfs={} capacity=64MiB\n#DW preload path={bad}\n",
                pfs.display()
            ),
        )
        .expect("script");
        let o = pliant(
            &[
                "job",
                "setup",
                &r(&script),
                "--job-id",
                "14",
                "--root",
                &r(&root),
                "--uid",
                "65534",
            ],
            top.path(),
        );
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(3), "the job's fault: {e}");
        assert!(
            e.contains("job14.sh:3: #DW preload") && e.contains("symbolic link"),
            "{e}"
        );
        assert!(!root.join("14").exists(), "{e}");
        assert_eq!(stat(&their_mnt)["copy_up_bytes"], 0);
    } else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI: the --uid preload case runs as root"
        );
        pliant_testdata::skip("the --uid case of the preload refusal needs root");
    }
    let env = ok(&setup(
        "13",
        &pfs,
        Some(&format!("{}/input/mesh", pfs.display())),
    ));
    let cache = env
        .lines()
        .find_map(|l| l.strip_prefix("DW_JOB_STRIPED_CACHE="))
        .map(PathBuf::from)
        .expect("DW_JOB_STRIPED_CACHE");
    assert_eq!(stat(&cache)["copy_up_preload_bytes"], 100_000);
    for id in ["13", "10"] {
        ok(&pliant(
            &["job", "teardown", "--job-id", id, "--root", &r(&root)],
            top.path(),
        ));
    }
}

/// Random operations (create, write at random offsets, truncate, read, rename, hard link, unlink, fsync,
/// evict) through the mount against an in-memory model, then the backing directory after
/// unmount: the mount-sized version of `pliant-fs`'s 100,000-operation model test.
#[test]
fn random_operations_through_the_mount_match_the_model() {
    random_operations_case(&[]);
}

/// The same through the kernel's write-back cache: sizes and contents as the model says,
/// whatever the kernel holds back.
#[test]
fn random_operations_under_the_write_cache_match_the_model() {
    random_operations_case(&["--no-passthrough"]);
}

fn random_operations_case(extra: &[&str]) {
    let args: Vec<&str> = [
        "--capacity",
        "1MiB",
        "--extent",
        "16KiB",
        "--writeback-threads",
        "2",
        "--write-window-multiplier",
        "1000",
    ]
    .iter()
    .chain(extra)
    .copied()
    .collect();
    let Some(mut m) = mount_with(&args) else {
        return;
    };
    let names = ["a", "b", "c", "sub/d", "sub/e"];
    fs::create_dir(m.at("sub")).expect("sub");
    let mut rng = rand_pcg::Pcg64::seed_from_u64(2026);
    // Names lead to files (two names of one file after a hard link); files hold the bytes.
    let mut model: BTreeMap<usize, usize> = BTreeMap::new();
    let mut files: BTreeMap<usize, Vec<u8>> = BTreeMap::new();
    let mut next_file = 0;
    // Name `f` goes; its file too when that was its last name.
    let unname = |model: &mut BTreeMap<usize, usize>, files: &mut BTreeMap<usize, Vec<u8>>, f| {
        if let Some(id) = model.remove(&f)
            && !model.values().any(|i| *i == id)
        {
            files.remove(&id);
        }
    };
    let ops = 3000;
    for n in 0..ops {
        let f = rng.random_range(0..names.len());
        let path = m.at(names[f]);
        match rng.random_range(0..100) {
            0..10 if !model.contains_key(&f) => {
                fs::File::create(&path).expect("create");
                model.insert(f, next_file);
                files.insert(next_file, Vec::new());
                next_file += 1;
            }
            10..45 if model.contains_key(&f) => {
                let off = rng.random_range(0..200_000usize);
                let len = rng.random_range(1..40_000usize);
                let byte = rng.random::<u8>();
                let data = vec![byte; len];
                let file = OpenOptions::new().write(true).open(&path).expect("open w");
                file.write_all_at(&data, off as u64).expect("pwrite");
                let mm = files.get_mut(&model[&f]).expect("model");
                if mm.len() < off + len {
                    mm.resize(off + len, 0);
                }
                mm[off..off + len].copy_from_slice(&data);
            }
            45..55 if model.contains_key(&f) => {
                let size = rng.random_range(0..150_000usize);
                OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .expect("open t")
                    .set_len(size as u64)
                    .expect("truncate");
                files.get_mut(&model[&f]).expect("model").resize(size, 0);
            }
            55..80 if model.contains_key(&f) => {
                let off = rng.random_range(0..200_000u64);
                let len = rng.random_range(1..50_000usize);
                let mut file = fs::File::open(&path).expect("open r");
                file.seek(SeekFrom::Start(off)).expect("seek");
                let mut got = Vec::new();
                file.take(len as u64).read_to_end(&mut got).expect("read");
                let mm = &files[&model[&f]];
                let lo = (off as usize).min(mm.len());
                let hi = (off as usize + len).min(mm.len());
                assert!(got == mm[lo..hi], "op {n}: read {} @{off}+{len}", names[f]);
            }
            80..83 if model.contains_key(&f) => {
                let to = rng.random_range(0..names.len());
                if to != f {
                    fs::rename(&path, m.at(names[to])).expect("rename");
                    // Two names of one file: rename(2) does nothing.
                    if model.get(&to) != model.get(&f) {
                        unname(&mut model, &mut files, to);
                        let id = model.remove(&f).expect("model");
                        model.insert(to, id);
                    }
                }
            }
            83..85 if model.contains_key(&f) => {
                let to = rng.random_range(0..names.len());
                if !model.contains_key(&to) {
                    fs::hard_link(&path, m.at(names[to])).expect("link");
                    model.insert(to, model[&f]);
                }
            }
            85..90 if model.contains_key(&f) => {
                fs::remove_file(&path).expect("unlink");
                unname(&mut model, &mut files, f);
            }
            90..95 if model.contains_key(&f) => {
                OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .expect("open s")
                    .sync_all()
                    .expect("fsync");
            }
            95..100 if model.contains_key(&f) => {
                ok(&pliant(
                    &["fs", "evict", path.to_str().expect("utf-8")],
                    m.dir.path(),
                ));
            }
            _ => {}
        }
        if n % 100 == 0 {
            for (i, id) in &model {
                let meta = fs::metadata(m.at(names[*i])).expect("stat");
                let links = model.values().filter(|x| *x == id).count() as u64;
                assert_eq!(
                    meta.len(),
                    files[id].len() as u64,
                    "op {n}: size of {}",
                    names[*i]
                );
                assert_eq!(
                    std::os::unix::fs::MetadataExt::nlink(&meta),
                    links,
                    "op {n}: links of {}",
                    names[*i]
                );
            }
        }
    }
    let s = m.stats();
    assert!(
        s["evicted_extents"].as_u64().expect("evicted") > 0,
        "the cache was small enough to evict: {s}"
    );
    m.unmount();
    for (i, name) in names.iter().enumerate() {
        let on_disk = fs::read(m.backing.join(name)).ok();
        assert_eq!(
            on_disk.as_ref(),
            model.get(&i).map(|id| &files[id]),
            "backing {name} after unmount"
        );
    }
}

#[test]
fn unmount_of_a_path_that_is_not_a_mount_says_so() {
    let d = tempfile::tempdir().expect("tempdir");
    let e = err(&pliant(
        &["fs", "unmount", d.path().to_str().expect("utf-8")],
        d.path(),
    ));
    assert!(e.contains("not inside a pliant fs mount"), "{e}");
    // The mount point beside the cache directory, not around it (which is refused).
    fs::create_dir(d.path().join("m")).expect("m");
    let e = err(&pliant(
        &[
            "fs",
            "mount",
            "/nonexistent-backing",
            "m",
            "--cache-dir",
            "c",
            "--capacity",
            "1MiB",
            "--foreground",
        ],
        d.path(),
    ));
    assert!(e.contains("/nonexistent-backing"), "{e}");
}

/// FUSE passthrough (Linux 6.9+, root): a fully cached file opened read-only is read by the
/// kernel straight from its cache file; a writer joining such readers goes through the daemon,
/// and the readers see what it wrote; everything reaches the backing directory.
/// With `--no-write-cache` a writer joining passthrough readers goes through the daemon, which
/// writes the cache file they read.
#[test]
fn passthrough_reads_see_writes_through_the_daemon() {
    passthrough_readers_and_a_writer_case(&["--no-write-cache"], 0);
}

/// By default the writer of a file the cache holds whole goes by passthrough too: the kernel
/// writes the cache file the readers read, and the daemon tracks the file as dirty.
#[test]
fn passthrough_readers_and_writers_share_the_cache_file() {
    passthrough_readers_and_a_writer_case(&[], 2);
}

/// Skips (or, in CI, fails) without root: passthrough needs CAP_SYS_ADMIN.
fn passthrough_possible() -> bool {
    if !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI: the passthrough test runs as root"
        );
        pliant_testdata::skip("FUSE passthrough needs CAP_SYS_ADMIN");
        return false;
    }
    true
}

fn passthrough_readers_and_a_writer_case(extra: &[&str], write_opens: u64) {
    if !passthrough_possible() {
        return;
    }
    let args: Vec<&str> = ["--capacity", "16MiB", "--extent", "64KiB"]
        .iter()
        .chain(extra)
        .copied()
        .collect();
    let Some(mut m) = mount_with(&args) else {
        return;
    };
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i % 253) as u8).collect();
    fs::write(m.at("f"), &data).expect("write");
    // The kernel sends the writer's RELEASE after `close` returns: until the daemon has it, the
    // file still has a writer through the daemon and a new reader cannot go by passthrough.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut reader = loop {
        let r = fs::File::open(m.at("f")).expect("open for reading");
        if m.stats()["passthrough_opens"] == 1 || std::time::Instant::now() > deadline {
            break r;
        }
        drop(r);
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut got = Vec::new();
    reader.read_to_end(&mut got).expect("read");
    assert_eq!(got, data);
    assert_eq!(
        m.stats()["passthrough_opens"],
        1,
        "a fully cached file opens in passthrough"
    );
    let writer = OpenOptions::new()
        .write(true)
        .open(m.at("f"))
        .expect("open for writing");
    writer
        .write_all_at(b"NEW", 500_000)
        .expect("write beside a passthrough reader");
    let mut head = [0u8; 3];
    reader.read_exact_at(&mut head, 500_000).expect("reread");
    assert_eq!(
        &head, b"NEW",
        "the passthrough reader sees the daemon's write"
    );
    drop((reader, writer));
    let s = m.stats();
    let dirty = s["dirty_bytes"].as_u64().expect("dirty");
    assert!(dirty > 0, "the write was tracked as dirty");
    assert_eq!(
        s["passthrough_write_opens"], write_opens,
        "the create and the writer by passthrough, or neither"
    );
    m.unmount();
    let mut want = data;
    want[500_000..500_003].copy_from_slice(b"NEW");
    assert_eq!(fs::read(m.backing.join("f")).expect("backing"), want);
}

/// Root mount: a file just created, and one the cache holds whole, opened for writing go by
/// passthrough (the kernel writes their cache files); fsync'ed, the writers still open, the
/// daemon killed with -9: the remount writes both whole files back.
#[test]
fn passthrough_writes_fsynced_survive_kill_9_with_the_writers_open() {
    if !passthrough_possible() {
        return;
    }
    let Some(mut m) = mount_with(&["--capacity", "16MiB", "--extent", "64KiB"]) else {
        return;
    };
    let mut old: Vec<u8> = (0..700_000u32).map(|i| (i % 251) as u8).collect();
    fs::write(m.backing.join("old"), &old).expect("seed");
    assert_eq!(fs::read(m.at("old")).expect("read, copying it up"), old);
    // The reader's RELEASE comes after `close` returns: until the daemon has it, the inode
    // has a handle through the page cache and a writer cannot go by passthrough.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let w_old = loop {
        let w = OpenOptions::new()
            .write(true)
            .open(m.at("old"))
            .expect("open for writing");
        if m.stats()["passthrough_write_opens"] == 1 || std::time::Instant::now() > deadline {
            break w;
        }
        drop(w);
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(m.stats()["passthrough_write_opens"], 1, "the cached file");
    w_old.write_all_at(b"MIDDLE", 300_000).expect("write");
    w_old.write_all_at(b"TAIL", 700_000).expect("append");
    w_old.sync_all().expect("fsync");
    old[300_000..300_006].copy_from_slice(b"MIDDLE");
    old.extend_from_slice(b"TAIL");
    let new: Vec<u8> = (0..1_500_000u32).map(|i| (i % 239) as u8).collect();
    let mut w_new = fs::File::create(m.at("new")).expect("create");
    w_new.write_all(&new).expect("write");
    w_new.sync_all().expect("fsync");
    assert_eq!(m.stats()["passthrough_write_opens"], 2, "and the new one");
    // The size the daemon gives is the kernel's.
    assert_eq!(
        fs::metadata(m.at("new")).expect("stat").len(),
        new.len() as u64
    );
    assert_eq!(
        fs::metadata(m.at("old")).expect("stat").len(),
        old.len() as u64
    );
    assert_eq!(
        fs::metadata(m.backing.join("new")).expect("backing").len(),
        0,
        "only in the cache (and its journal) before the crash"
    );
    m.kill9();
    drop((w_old, w_new));
    m.start();
    assert_eq!(fs::read(m.backing.join("new")).expect("backing new"), new);
    assert_eq!(fs::read(m.backing.join("old")).expect("backing old"), old);
    let log = fs::read_to_string(m.cache.join("mount.log")).expect("log");
    assert!(log.contains("recovered"), "{log}");
    m.unmount();
}

/// Root mount: a file the cache does not hold, opened with `O_TRUNC` for writing, is emptied
/// by the open itself (FUSE_ATOMIC_O_TRUNC), so it is whole in the cache when the open picks
/// its mode and is written by passthrough (it went through the daemon, a round trip a write,
/// when the kernel truncated after the open); what it wrote reaches the backing directory.
#[test]
fn a_file_opened_with_o_trunc_is_written_by_passthrough() {
    if !passthrough_possible() {
        return;
    }
    let Some(mut m) = mount_with(&["--capacity", "16MiB", "--extent", "64KiB"]) else {
        return;
    };
    fs::write(m.backing.join("out"), vec![7u8; 700_000]).expect("seed");
    let before = fs::metadata(m.backing.join("out"))
        .expect("stat")
        .modified()
        .expect("mtime");
    std::thread::sleep(std::time::Duration::from_millis(20));
    let new: Vec<u8> = (0..300_000u32).map(|i| (i % 241) as u8).collect();
    let mut w = OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(m.at("out"))
        .expect("open with O_TRUNC");
    assert_eq!(w.metadata().expect("fstat").len(), 0, "emptied by the open");
    assert_eq!(
        m.stats()["passthrough_write_opens"],
        1,
        "the emptied file is written by passthrough"
    );
    w.write_all(&new).expect("write");
    w.sync_all().expect("fsync");
    drop(w);
    let after = fs::metadata(m.at("out"))
        .expect("stat")
        .modified()
        .expect("mtime");
    assert!(after > before, "the open marked a modification");
    // Read-only with O_TRUNC (which Rust's `OpenOptions` refuses to ask for): Linux empties the
    // file for a caller who may write it, as root may.
    fs::write(m.at("out"), b"some bytes").expect("refill");
    let fd = nix::fcntl::open(
        &m.at("out"),
        nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_TRUNC,
        nix::sys::stat::Mode::empty(),
    )
    .expect("O_RDONLY | O_TRUNC");
    drop(fd);
    assert_eq!(fs::metadata(m.at("out")).expect("stat").len(), 0);
    fs::write(m.at("out"), &new).expect("rewrite");
    m.unmount();
    assert_eq!(fs::read(m.backing.join("out")).expect("backing"), new);
}

/// Through passthrough the daemon cannot refuse a write: past --max-file-size, or past the
/// write window (charged what the file grew), the kernel's bytes are cut off and `fsync`, or
/// `close`, returns EFBIG or EDQUOT; a file opened with no room left in the window goes
/// through the daemon, where the write that crosses fails.
/// Writes `len` bytes of `fill` into a new file at `path` by passthrough (the kernel accepts
/// them all), then its fsync fails with `errno` and the file is `kept` bytes long: what passed
/// the limit was cut off.
fn refused_at_fsync(path: &Path, fill: u8, len: usize, errno: nix::errno::Errno, kept: u64) {
    let mut f = fs::File::create(path).expect("create");
    f.write_all(&vec![fill; len])
        .expect("the kernel writes the cache file");
    let e = f.sync_all().expect_err("past a limit");
    assert_eq!(e.raw_os_error(), Some(errno as i32), "{e}");
    assert_eq!(f.metadata().expect("fstat").len(), kept, "cut at the limit");
}

#[test]
fn passthrough_writes_get_efbig_and_edquot_at_fsync_or_close() {
    use std::os::fd::IntoRawFd;
    if !passthrough_possible() {
        return;
    }
    let Some(mut m) = mount_with(&[
        "--capacity",
        "8MiB",
        "--extent",
        "64KiB",
        "--write-window-multiplier",
        "1",
        "--max-file-size",
        "3MiB",
    ]) else {
        return;
    };
    refused_at_fsync(&m.at("big"), 1, 4 << 20, nix::errno::Errno::EFBIG, 3 << 20);
    let mut f = fs::File::create(m.at("big2")).expect("create");
    f.write_all(&vec![1u8; 4 << 20])
        .expect("the kernel writes the cache file");
    let e = nix::unistd::close(f.into_raw_fd()).expect_err("close past max-file-size");
    assert_eq!(e, nix::errno::Errno::EFBIG);
    assert_eq!(m.stats()["passthrough_write_opens"], 2);
    // 6 MiB of the 8 MiB window charged: a third file keeps the 2 MiB left of its 3.
    refused_at_fsync(&m.at("f0"), 2, 3 << 20, nix::errno::Errno::EDQUOT, 2 << 20);
    // No room left: through the daemon, where the write that crosses fails at once.
    let mut f = fs::File::create(m.at("f1")).expect("create");
    let e = f.write_all(b"x").expect_err("past the write window");
    assert_eq!(
        e.raw_os_error(),
        Some(nix::errno::Errno::EDQUOT as i32),
        "{e}"
    );
    drop(f);
    let s = m.stats();
    assert_eq!(s["passthrough_write_opens"], 3, "{s}");
    assert!(s["efbig_writes"].as_u64().expect("efbig") >= 2, "{s}");
    assert!(s["edquot_writes"].as_u64().expect("edquot") >= 2, "{s}");
    assert_eq!(
        s["window_used_bytes"].as_u64().expect("used"),
        8 << 20,
        "{s}"
    );
    m.unmount();
    for (name, len, fill) in [
        ("big", 3 << 20, 1),
        ("big2", 3 << 20, 1),
        ("f0", 2 << 20, 2),
    ] {
        let b = fs::read(m.backing.join(name)).expect("backing");
        assert!(
            b.len() == len && b.iter().all(|&x| x == fill),
            "{name}: {}",
            b.len()
        );
    }
    assert_eq!(fs::metadata(m.backing.join("f1")).expect("f1").len(), 0);
}

#[test]
fn the_counters_are_served_to_prometheus() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let addr = format!("127.0.0.1:{port}");
    let Some(mut m) = mount_with(&["--capacity", "8MiB", "--metrics", &addr]) else {
        return;
    };
    fs::write(m.at("f"), vec![5u8; 100_000]).expect("write");
    let mut conn = std::net::TcpStream::connect(&addr).expect("connect");
    conn.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("request");
    let mut body = String::new();
    conn.read_to_string(&mut body).expect("response");
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    let written = body
        .lines()
        .find(|l| l.starts_with("pliant_fs_written_bytes{"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok());
    assert_eq!(written, Some(100_000.0), "{body}");
    m.unmount();
}

/// The write-back policy swapped on a running mount: the idle policy writes back what the
/// watermarks would have left dirty; a policy that does not compile is refused with its error
/// and the running one stays; a rollback restores the watermarks.
#[test]
fn a_policy_swapped_on_a_running_mount_decides_at_once() {
    let Some(mut m) = mount_with(&["--capacity", "64MiB", "--policy-interval", "100ms"]) else {
        return;
    };
    let mnt = m.mnt.to_str().expect("utf-8").to_string();
    fs::write(m.at("f"), vec![1u8; 1 << 20]).expect("write");
    std::thread::sleep(std::time::Duration::from_millis(400));
    assert_eq!(
        m.stats()["dirty_bytes"],
        1 << 20,
        "the watermarks leave 1 MiB of 64 dirty"
    );
    let out = ok(&pliant(
        &[
            "fs",
            "policy",
            &mnt,
            "load",
            "writeback",
            "fs-writeback-when-idle",
            "--param",
            "idle=0.2",
        ],
        m.dir.path(),
    ));
    assert!(out.contains("fs-writeback-when-idle"), "{out}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while m.stats()["dirty_bytes"] != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the idle policy did not write back"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let broken = m.dir.path().join("broken.lua");
    fs::write(&broken, "function when( return true end").expect("broken");
    let e = err(&pliant(
        &[
            "fs",
            "policy",
            &mnt,
            "load",
            "evict",
            broken.to_str().expect("utf-8"),
        ],
        m.dir.path(),
    ));
    assert!(e.contains("broken"), "{e}");
    assert_eq!(
        m.stats()["evict_policy"],
        "fs-evict-watermarks",
        "a refused policy changes nothing"
    );
    ok(&pliant(
        &["fs", "policy", &mnt, "rollback", "writeback"],
        m.dir.path(),
    ));
    assert_eq!(m.stats()["writeback_policy"], "fs-writeback-watermarks");
    m.unmount();
}

/// Whether this run may mount with `--allow-other` and switch users (root); in CI it must.
fn two_users_possible() -> bool {
    if !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI: the two-user tests run as root"
        );
        pliant_testdata::skip("needs root to mount with --allow-other and switch users");
        return false;
    }
    true
}

/// Runs python3 `code` as `uid` (primary group the same, no other groups): what another user
/// of an `--allow-other` mount can do. The system's python3: a per-user one (pyenv under
/// /root) is out of another user's reach.
fn python_as(uid: u32, code: &str) -> std::process::Output {
    assert!(
        Path::new("/usr/bin/python3").exists(),
        "/usr/bin/python3 is needed (package python3)"
    );
    Command::new("setpriv")
        .args([
            format!("--reuid={uid}"),
            format!("--regid={uid}"),
            "--clear-groups".into(),
        ])
        .args(["/usr/bin/python3", "-c", code])
        .output()
        .expect("setpriv python3")
}

/// Under the write-back cache the kernel leaves the clearing of set-user-ID and set-group-ID
/// bits to the daemon (FUSE_HANDLE_KILLPRIV_V2, which spares a GETXATTR before every write):
/// a write or a truncation by a user without CAP_FSETID drops them, as on a local file system.
#[test]
fn a_write_by_another_user_drops_set_id_bits_under_the_write_cache() {
    set_id_bits_case(&[]);
}

/// The same under `--direct-io`: the kernel sends such a write at once, with the same flag.
#[test]
fn a_write_by_another_user_drops_set_id_bits_under_direct_io() {
    set_id_bits_case(&["--direct-io"]);
}

fn set_id_bits_case(extra: &[&str]) {
    use std::os::unix::fs::MetadataExt;
    if !two_users_possible() {
        return;
    }
    let args: Vec<&str> = ["--capacity", "16MiB", "--no-passthrough", "--allow-other"]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
    let Some(mut m) = mount_with(&args) else {
        return;
    };
    let bob = 60_002u32;
    for p in [m.dir.path(), m.backing.as_path()] {
        fs::set_permissions(p, fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    for name in ["written", "truncated"] {
        let p = m.backing.join(name);
        fs::write(&p, b"#!/bin/sh\n").expect("seed");
        std::os::unix::fs::chown(&p, Some(bob), Some(bob)).expect("chown");
        fs::set_permissions(&p, fs::Permissions::from_mode(0o6775)).expect("chmod");
    }
    let mnt = m.mnt.to_str().expect("utf-8");
    let out = python_as(
        bob,
        &format!(
            r#"
import os
with open("{mnt}/written", "r+b") as f:
    f.seek(0, 2)
    f.write(b"echo hi\n")
os.truncate("{mnt}/truncated", 3)
"#
        ),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for name in ["written", "truncated"] {
        let mode = fs::metadata(m.at(name)).expect("stat").mode() & 0o7777;
        assert_eq!(mode, 0o775, "{name}: {mode:o}");
    }
    // Root keeps them (CAP_FSETID), as on a local file system.
    fs::set_permissions(m.at("written"), fs::Permissions::from_mode(0o6775)).expect("chmod");
    OpenOptions::new()
        .append(true)
        .open(m.at("written"))
        .expect("open")
        .write_all(b"echo root\n")
        .expect("write");
    let mode = fs::metadata(m.at("written")).expect("stat").mode() & 0o7777;
    assert_eq!(mode, 0o6775, "{mode:o}");
    m.unmount();
    assert_eq!(
        fs::read(m.backing.join("written")).expect("backing"),
        b"#!/bin/sh\necho hi\necho root\n"
    );
}

/// A reader could once arm the sticky discard with one `getxattr` and have the next stop of
/// the daemon (SIGTERM from an epilog, `umount`) drop every user's unwritten data. Now the
/// verbs that change the mount for everyone are the owner's `setxattr`s, and the hints check
/// each file against the caller.
#[test]
fn a_reader_cannot_arm_discard_and_sigterm_keeps_the_owners_data() {
    if !two_users_possible() {
        return;
    }
    let Some(mut m) = mount_with(&["--capacity", "64MiB", "--allow-other"]) else {
        return;
    };
    let bob = 60_002u32;
    for p in [m.dir.path(), m.backing.as_path()] {
        fs::set_permissions(p, fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    // A directory of bob's own, where the kernel lets him set attributes: the daemon must
    // refuse the owner's verbs there itself.
    fs::create_dir(m.backing.join("bobs")).expect("mkdir");
    std::os::unix::fs::chown(m.backing.join("bobs"), Some(bob), Some(bob)).expect("chown");
    let data: Vec<u8> = (0..3u32 << 20).map(|i| (i % 251) as u8).collect();
    fs::write(m.at("data"), &data).expect("write");
    assert!(m.stats()["dirty_bytes"].as_u64().expect("dirty") > 0);
    let mnt = m.mnt.to_str().expect("utf-8").to_string();
    let script = format!(
        r#"
import errno, json, os
def get(p, v):
    try:
        return json.loads(os.getxattr(p, "pliant." + v))
    except OSError as e:
        return errno.errorcode[e.errno]
def put(p, v):
    try:
        os.setxattr(p, "pliant." + v, b"")
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
m = "{mnt}"
print(json.dumps({{
    "get_discard": get(m + "/data", "discard"),
    "get_flush": get(m + "/data", "flush"),
    "set_discard": put(m + "/bobs", "discard"),
    "set_flush": put(m + "/bobs", "flush"),
    "evict": get(m + "/data", "evict"),
    "writeback": get(m + "/data", "writeback"),
    "evict_dir": get(m, "evict"),
    "preload": get(m + "/data", "preload"),
}}))
"#
    );
    let out = python_as(bob, &script);
    let tried: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {} {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(tried["get_discard"], "ENODATA", "{tried}");
    assert_eq!(tried["get_flush"], "ENODATA", "{tried}");
    assert_eq!(tried["set_discard"], "EPERM", "{tried}");
    assert_eq!(tried["set_flush"], "EPERM", "{tried}");
    assert_eq!(tried["evict"], "EACCES", "{tried}");
    assert_eq!(tried["writeback"], "EACCES", "{tried}");
    assert_eq!(tried["evict_dir"]["files"], 0, "{tried}");
    assert!(tried["evict_dir"]["skipped"].as_u64() >= Some(1), "{tried}");
    // A reader may preload what it may read.
    assert_eq!(tried["preload"]["files"], 1, "{tried}");
    assert_eq!(m.stats()["flush_asked"], 0, "bob started a flush");
    assert!(m.stats()["dirty_bytes"].as_u64().expect("dirty") > 0);
    // The daemon stopped as an epilog or init system would: the owner's data reaches the
    // backing directory.
    m.stop_by(
        nix::sys::signal::Signal::SIGTERM,
        std::time::Duration::from_secs(60),
    );
    assert!(
        fs::read(m.backing.join("data")).expect("backing copy") == data,
        "the owner's unwritten data was dropped"
    );
}

/// `flush` writes back for as long as the backing store needs: a FUSE request thread must not
/// be held for it. Over a backing store that takes seconds, the owner's ask returns while the
/// data is still dirty, the mount keeps serving, and the flush ends by itself.
#[test]
fn a_flush_returns_at_once_and_holds_no_request_thread() {
    if !fuse_available() {
        return;
    }
    let top = tempfile::tempdir().expect("tempdir");
    let (slow_dir, slow_mnt) = (top.path().join("slow-dir"), top.path().join("slow-mnt"));
    fs::create_dir(&slow_dir).expect("mkdir");
    fs::create_dir(&slow_mnt).expect("mkdir");
    // 4 MiB at 1 MB/s: seconds of write-back, whatever the machine's load.
    let mut slow = Command::new(env!("CARGO_BIN_EXE_pliant"))
        .args(["bench", "slow-fs"])
        .arg(&slow_dir)
        .arg(&slow_mnt)
        .args(["--stream-rate", "1MB", "--threads", "4"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("slow-fs");
    let slow_pid = nix::unistd::Pid::from_raw(slow.id() as i32);
    let stop_slow = |slow: &mut std::process::Child| {
        let _ = nix::mount::umount2(&slow_mnt, nix::mount::MntFlags::MNT_DETACH);
        let _ = Command::new("fusermount3")
            .arg("-uz")
            .arg(&slow_mnt)
            .output();
        let _ = nix::sys::signal::kill(slow_pid, nix::sys::signal::Signal::SIGTERM);
        let _ = slow.wait();
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while fs::read_to_string("/proc/self/mountinfo")
        .map(|m| !m.contains(slow_mnt.to_str().expect("utf-8")))
        .unwrap_or(true)
    {
        if std::time::Instant::now() > deadline {
            stop_slow(&mut slow);
            panic!("slow-fs did not mount within 30 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let mnt = top.path().join("mnt");
    fs::create_dir(&mnt).expect("mkdir");
    let cache = top.path().join("cache");
    let p = |s: &Path| s.to_str().expect("utf-8").to_string();
    let mounted = pliant(
        &[
            "fs",
            "mount",
            &p(&slow_mnt),
            &p(&mnt),
            "--cache-dir",
            &p(&cache),
            "--capacity",
            "64MiB",
        ],
        top.path(),
    );
    if !mounted.status.success() {
        stop_slow(&mut slow);
        panic!("mount: {}", String::from_utf8_lossy(&mounted.stderr));
    }
    let stat = || json(&pliant(&["fs", "stat", &p(&mnt), "--json"], top.path()));
    let data = vec![9u8; 4 << 20];
    fs::write(mnt.join("big"), &data).expect("write");
    let asked = xattr::set(&mnt, "pliant.flush", b"");
    let after = stat();
    let served = fs::metadata(mnt.join("big")).map(|m| m.len());
    // Ends by itself (bounded: 4 MiB at 1 MB/s, with room for a loaded machine).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let mut done = after.clone();
    while done["flush_done"].as_u64() < after["flush_asked"].as_u64()
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(100));
        done = stat();
    }
    let unmounted = pliant(&["fs", "unmount", &p(&mnt)], top.path());
    stop_slow(&mut slow);
    asked.expect("the owner's flush");
    assert_eq!(after["flush_asked"], 1, "{after}");
    assert_eq!(
        after["flush_done"], 0,
        "the ask waited for the flush: {after}"
    );
    assert!(after["dirty_bytes"].as_u64() > Some(0), "{after}");
    assert_eq!(served.expect("stat during the flush"), 4 << 20);
    assert_eq!(done["flush_done"], 1, "the flush did not end: {done}");
    assert_eq!(done["dirty_bytes"], 0, "{done}");
    ok(&unmounted);
    assert!(fs::read(slow_dir.join("big")).expect("backing copy") == data);
}

#[test]
fn metrics_off_loopback_are_refused_without_unsafe_no_auth() {
    let top = tempfile::tempdir().expect("tempdir");
    for d in ["b", "m"] {
        fs::create_dir(top.path().join(d)).expect("mkdir");
    }
    let e = err(&pliant(
        &[
            "fs",
            "mount",
            "b",
            "m",
            "--cache-dir",
            "c",
            "--capacity",
            "8MiB",
            "--metrics",
            "0.0.0.0:0",
        ],
        top.path(),
    ));
    assert!(e.contains("--unsafe-no-auth"), "{e}");
    assert!(e.contains("0.0.0.0:0"), "{e}");
    assert!(
        !top.path().join("c").exists(),
        "refused after creating the cache directory"
    );
}

/// After `kill -9` of the daemon the mount point answered ENOTCONN to everything: `fs mount`
/// said "not a directory" and `fs unmount` "Transport endpoint is not connected", and only
/// `fusermount3 -u` got out. Now both detach the dead mount, and the next mount writes back
/// what was fsync'd from the journal.
#[test]
fn a_dead_mount_after_kill_9_was_stuck_until_fusermount3() {
    let Some(mut m) = mount_with(&["--capacity", "16MiB", "--extent", "64KiB"]) else {
        return;
    };
    let write_synced = |m: &Mounted, name: &str, seed: u32| {
        let data: Vec<u8> = (0..300_000u32).map(|i| ((i + seed) % 239) as u8).collect();
        let mut f = fs::File::create(m.at(name)).expect("create");
        f.write_all(&data).expect("write");
        f.sync_all().expect("fsync");
        data
    };
    let first = write_synced(&m, "first", 1);
    m.stop_by(
        nix::sys::signal::Signal::SIGKILL,
        std::time::Duration::from_secs(10),
    );
    let dead = fs::metadata(&m.mnt).expect_err("a dead mount answers with an error");
    assert_eq!(
        dead.raw_os_error(),
        Some(nix::errno::Errno::ENOTCONN as i32)
    );
    // Unmount detaches it and says that nothing could be written back, and how to get it.
    let e = err(&pliant(
        &["fs", "unmount", m.mnt.to_str().expect("utf-8")],
        m.dir.path(),
    ));
    assert!(
        e.contains("daemon had died") && e.contains("detached"),
        "{e}"
    );
    assert!(e.contains("--cache-dir"), "{e}");
    assert!(m.mnt.is_dir(), "the mount point is usable again");
    m.start();
    assert_eq!(fs::read(m.backing.join("first")).expect("recovered"), first);
    // Mount over a dead mount directly: detached with a note, then recovered alike.
    let second = write_synced(&m, "second", 2);
    m.stop_by(
        nix::sys::signal::Signal::SIGKILL,
        std::time::Duration::from_secs(10),
    );
    let said = m.start();
    assert!(said.contains("detached"), "{said}");
    assert_eq!(
        fs::read(m.backing.join("second")).expect("recovered"),
        second
    );
    assert_eq!(fs::read(m.at("second")).expect("through the mount"), second);
    m.unmount();
}

/// `fs unmount` waited for the daemon with `kill(pid, 0)`, which a zombie passes: under a
/// harness that started `--foreground` and never reaped it, the unmount hung for 600 s and
/// then failed although everything was written back.
#[test]
fn unmount_hung_600_s_on_a_daemon_its_parent_had_not_reaped() {
    if !fuse_available() {
        return;
    }
    use std::io::BufRead;
    let top = tempfile::tempdir().expect("tempdir");
    let (b, mnt, c) = (
        top.path().join("b"),
        top.path().join("mnt"),
        top.path().join("c"),
    );
    fs::create_dir(&b).expect("b");
    fs::create_dir(&mnt).expect("mnt");
    // The harness: starts the daemon, never waits for it; exits by itself after 120 s.
    let mut harness = Command::new("python3")
        .arg("-c")
        .arg(concat!(
            "import subprocess, sys, time\n",
            "p = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL,\n",
            "                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n",
            "print(p.pid, flush=True)\n",
            "time.sleep(120)\n",
        ))
        .arg(env!("CARGO_BIN_EXE_pliant"))
        .args(["fs", "mount"])
        .args([&b, &mnt])
        .arg("--cache-dir")
        .arg(&c)
        .args(["--capacity", "8MiB", "--foreground"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    std::io::BufReader::new(harness.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the daemon's pid");
    let daemon: i32 = line.trim().parse().expect("a pid");
    let watched = watchdog(std::time::Duration::from_secs(120));
    watched.store(daemon as u32, std::sync::atomic::Ordering::Relaxed);
    let cleanup = |harness: &mut std::process::Child| {
        let _ = nix::mount::umount2(&mnt, nix::mount::MntFlags::MNT_DETACH);
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(daemon),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = harness.kill();
        let _ = harness.wait();
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let o = pliant(
            &["fs", "stat", mnt.to_str().expect("utf-8"), "--json"],
            top.path(),
        );
        if o.status.success() {
            break;
        }
        if std::time::Instant::now() > deadline {
            cleanup(&mut harness);
            panic!("not mounted within 30 s: {}", crate::common::stderr(&o));
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let data = vec![9u8; 200_000];
    fs::write(mnt.join("f"), &data).expect("write");
    let started = std::time::Instant::now();
    let mut unmount = Command::new(env!("CARGO_BIN_EXE_pliant"))
        .args(["fs", "unmount"])
        .arg(&mnt)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("unmount");
    let status = loop {
        if let Some(st) = unmount.try_wait().expect("try_wait") {
            break Some(st);
        }
        if started.elapsed() > std::time::Duration::from_secs(60) {
            let _ = unmount.kill();
            let _ = unmount.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let state = fs::read_to_string(format!("/proc/{daemon}/stat")).unwrap_or_default();
    cleanup(&mut harness);
    let status = status.expect("fs unmount still waiting after 60 s");
    assert!(status.success(), "fs unmount failed");
    assert!(
        state
            .rsplit_once(')')
            .is_some_and(|(_, r)| r.trim_start().starts_with('Z')),
        "the daemon was not left a zombie, so this test tests nothing: {state}"
    );
    assert_eq!(fs::read(b.join("f")).expect("written back"), data);
}

/// A failed `fs mount` quoted the last lines of the whole log, earlier attempts' included.
#[test]
fn a_failed_mount_quoted_earlier_attempts_log_lines() {
    let top = tempfile::tempdir().expect("tempdir");
    fs::create_dir(top.path().join("m")).expect("m");
    fs::create_dir(top.path().join("c")).expect("c");
    fs::write(
        top.path().join("c/mount.log"),
        "AN EARLIER ATTEMPT'S LINE\n".repeat(10),
    )
    .expect("old log");
    let e = err(&pliant(
        &[
            "fs",
            "mount",
            "/nonexistent-pliant-backing",
            "m",
            "--cache-dir",
            "c",
            "--capacity",
            "8MiB",
        ],
        top.path(),
    ));
    assert!(e.contains("/nonexistent-pliant-backing"), "{e}");
    assert!(!e.contains("EARLIER"), "{e}");
}

/// A mount point inside its backing directory was mounted, and showed itself inside itself
/// for ever (`b/sub/sub/…`). Each nesting of backing directory, mount point and cache
/// directory is refused before anything starts, through symbolic links too.
#[test]
fn a_mount_point_inside_its_backing_directory_recursed_for_ever() {
    let top = tempfile::tempdir().expect("tempdir");
    for d in ["b/sub", "m", "other"] {
        fs::create_dir_all(top.path().join(d)).expect("mkdir");
    }
    std::os::unix::fs::symlink("b", top.path().join("link")).expect("symlink");
    let refused = |backing: &str, mnt: &str, cache: &str, want: &str| {
        let out = pliant(
            &[
                "fs",
                "mount",
                backing,
                mnt,
                "--cache-dir",
                cache,
                "--capacity",
                "8MiB",
            ],
            top.path(),
        );
        if out.status.success() {
            // Mounted: undone before anything walks the tree, which would recurse for ever.
            let _ = nix::mount::umount2(&top.path().join(mnt), nix::mount::MntFlags::MNT_DETACH);
            let said = crate::common::stdout(&out);
            if let Some(pid) = said
                .split("daemon pid ")
                .nth(1)
                .and_then(|r| r.split(',').next())
                .and_then(|p| p.parse::<i32>().ok())
            {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            panic!("{backing} {mnt} {cache}: mounted: {said}");
        }
        let e = crate::common::stderr(&out);
        assert!(e.contains(want), "{backing} {mnt} {cache}: {e}");
        assert!(e.contains("must not contain one another"), "{e}");
    };
    refused(
        "b",
        "b/sub",
        "c",
        "mount point b/sub is inside the backing directory b",
    );
    refused(
        "b",
        "link/sub",
        "c",
        "mount point link/sub is inside the backing directory b",
    );
    refused("b", "b", "c", "backing directory b is the mount point b");
    refused(
        "m/x",
        "m",
        "c",
        "backing directory m/x is inside the mount point m",
    );
    refused(
        "b",
        "m",
        "m/cache",
        "cache directory m/cache is inside the mount point m",
    );
    refused(
        "b",
        "m",
        "b/cache",
        "cache directory b/cache is inside the backing directory b",
    );
    refused(
        "b",
        "other/m",
        "other",
        "mount point other/m is inside the cache directory other",
    );
    assert!(!top.path().join("c").exists() && !top.path().join("m/cache").exists());
}

/// `--metrics 127.0.0.1:0` served on a port nobody was told of.
#[test]
fn metrics_on_port_0_never_said_which_port_they_got() {
    let Some(mut m) = mount_with(&["--capacity", "8MiB", "--metrics", "127.0.0.1:0"]) else {
        return;
    };
    let addr = m.stats()["metrics_addr"]
        .as_str()
        .expect("stat reports the address")
        .to_string();
    assert!(
        addr.starts_with("127.0.0.1:") && !addr.ends_with(":0"),
        "{addr}"
    );
    let log = fs::read_to_string(m.cache.join("mount.log")).expect("log");
    assert!(
        log.contains(&format!("metrics on http://{addr}/metrics")),
        "{log}"
    );
    let mut conn = std::net::TcpStream::connect(&addr).expect("connect to the reported port");
    conn.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("request");
    let mut body = String::new();
    conn.read_to_string(&mut body).expect("response");
    assert!(body.contains("pliant_fs_capacity_bytes{"), "{body}");
    m.unmount();
    // The parent says it too, on stderr.
    let said = m.start();
    assert!(said.contains("metrics on http://127.0.0.1:"), "{said}");
    m.unmount();
}

/// `fs preload` of a file larger than the cache said "268.4 MB copied up", exited 0, and left
/// the cache empty, having pushed out what was preloaded before. Now it is left out, the
/// command says so and fails, and the earlier preload stays; `fs stat` tells the copy-up of
/// preloads from that of reads.
#[test]
fn a_preload_bigger_than_the_cache_emptied_it_and_exited_0() {
    let Some(mut m) = mount_with(&["--capacity", "1MiB", "--extent", "64KiB"]) else {
        return;
    };
    fs::write(m.backing.join("small"), vec![1u8; 200_000]).expect("small");
    fs::write(m.backing.join("big"), vec![2u8; 3 << 20]).expect("big");
    let dir = m.dir.path().to_path_buf();
    let small = m.at("small");
    let said = json(&pliant(
        &["fs", "preload", small.to_str().expect("utf-8"), "--json"],
        &dir,
    ));
    assert_eq!(said[0]["bytes"], 200_000, "{said}");
    assert_eq!(said[0]["kept_bytes"], 200_000, "{said}");
    let big = m.at("big");
    let out = pliant(&["fs", "preload", big.to_str().expect("utf-8")], &dir);
    let e = err(&out);
    assert!(
        e.contains("1 files (") && e.contains("not preloaded"),
        "{e}"
    );
    assert!(crate::common::stdout(&out).contains("0 files, 0 B copied up"));
    let out = pliant(
        &["fs", "preload", big.to_str().expect("utf-8"), "--json"],
        &dir,
    );
    let said: serde_json::Value = serde_json::from_str(&crate::common::stdout(&out)).expect("json");
    assert!(!out.status.success());
    assert_eq!(
        (
            &said[0]["not_fitted"],
            &said[0]["not_fitted_bytes"],
            &said[0]["bytes"]
        ),
        (&(1.into()), &((3u64 << 20).into()), &(0.into())),
        "{said}"
    );
    let s = m.stats();
    assert_eq!(s["used_bytes"], 200_000, "the earlier preload stays: {s}");
    assert_eq!(s["copy_up_preload_bytes"], 200_000, "{s}");
    let text = ok(&pliant(
        &["fs", "stat", m.mnt.to_str().expect("utf-8")],
        &dir,
    ));
    let copy_up = text
        .lines()
        .find(|l| l.starts_with("copy-up"))
        .expect("a copy-up line");
    assert!(
        copy_up.contains("0 B for reads")
            && copy_up.contains(" preloaded, 0 B under partial writes"),
        "{text}"
    );
    m.unmount();
}

/// A `job setup` whose mount failed left `ROOT/N/{cache,mnt,mount.log}`, and `job teardown`
/// said "nothing mounted" and left them too; `job check` accepted a `pfs` that is not there.
#[test]
fn a_failed_job_setup_left_its_directory_and_teardown_left_it_too() {
    let top = tempfile::tempdir().expect("tempdir");
    let pfs = top.path().join("pfs");
    fs::create_dir(&pfs).expect("pfs");
    let root = top.path().join("jobs");
    let r = |s: &Path| s.to_str().expect("utf-8").to_string();
    let script = top.path().join("job.sh");
    fs::write(
        &script,
        "#!/bin/bash\n#DW jobdw type=cache access_mode=striped capacity=1GiB pfs=/nonexistent-pliant-pfs\n",
    )
    .expect("script");
    let e = err(&pliant(&["job", "check", &r(&script)], top.path()));
    assert!(
        e.contains("job.sh:2: #DW jobdw: pfs=/nonexistent-pliant-pfs"),
        "{e}"
    );
    let e = err(&pliant(
        &[
            "job",
            "setup",
            &r(&script),
            "--job-id",
            "6",
            "--root",
            &r(&root),
        ],
        top.path(),
    ));
    assert!(e.contains("pfs=/nonexistent-pliant-pfs"), "{e}");
    assert!(
        !root.join("6").exists(),
        "refused, yet it made the job's directory"
    );
    if !fuse_available() {
        return;
    }
    // The mount itself fails: the backing directory inside the mount point.
    let root_in = pfs.join("jobs");
    fs::write(
        &script,
        format!(
            "#!/bin/bash\n#DW jobdw type=cache access_mode=striped capacity=64MiB pfs={}\n",
            pfs.display()
        ),
    )
    .expect("script");
    let e = err(&pliant(
        &[
            "job",
            "setup",
            &r(&script),
            "--job-id",
            "7",
            "--root",
            &r(&root_in),
        ],
        top.path(),
    ));
    assert!(e.contains("mounting"), "{e}");
    assert!(
        !root_in.join("7").exists(),
        "the failed setup left its directory: {e}"
    );
    // What a setup killed midway leaves is removed by teardown, which says so.
    for d in ["8/mnt", "8/cache"] {
        fs::create_dir_all(root.join(d)).expect("leftovers");
    }
    fs::write(root.join("8/mount.log"), "half a setup\n").expect("log");
    let out = pliant(
        &["job", "teardown", "--job-id", "8", "--root", &r(&root)],
        top.path(),
    );
    ok(&out);
    assert!(
        crate::common::stderr(&out).contains("removed"),
        "{}",
        crate::common::stderr(&out)
    );
    assert!(!root.join("8").exists());
}
