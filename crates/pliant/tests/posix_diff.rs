//! The differential POSIX check (`tools/compat/posix_diff.py`, issue 32): its 800-odd cases
//! (open, rename, unlink, mkdir, rmdir, truncate, symlink, link, mknod, chmod, chown, write:
//! errno, link counts, times, sticky directories, permissions) run through a root
//! `--allow-other` mount and in a local directory, as root and as nobody, must give the same
//! results, but for the script's `KNOWN` differences (each with its reason) and its `PENDING`
//! ones (bugs to fix: printed loudly, not failed on). It needs /dev/fuse and root: outside CI
//! it says it skips without them; in CI (`CI` set) it fails.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common::{ok, pliant, stderr};

/// Whether this run can mount with `--allow-other` and switch users: /dev/fuse, root and the
/// system's python3 (a per-user one, pyenv under /root, is no use to another user's child).
fn possible() -> bool {
    let missing = if !Path::new("/dev/fuse").exists() {
        Some("no usable /dev/fuse here")
    } else if !nix::unistd::geteuid().is_root() {
        Some("needs root to mount with --allow-other and switch users")
    } else if !Path::new("/usr/bin/python3").exists() {
        Some("/usr/bin/python3 is needed (package python3)")
    } else {
        None
    };
    if let Some(why) = missing {
        assert!(std::env::var_os("CI").is_none(), "CI: {why}");
        pliant_testdata::skip(why);
        return false;
    }
    true
}

/// A root mount over `backing` at `mnt`; unmounted (writing back) by [`Mount::unmount`], or
/// discarded and detached when dropped after a failure. A watchdog kills a daemon that hangs,
/// so a stuck request fails the test (ENOTCONN) instead of hanging the suite.
struct Mount {
    dir: PathBuf,
    mnt: PathBuf,
    pid: u32,
    done: bool,
    stop_watch: Arc<AtomicBool>,
}

impl Mount {
    fn start(
        dir: &Path,
        backing: &Path,
        mnt: &Path,
        cache: &Path,
        extra: &[&str],
        limit: Duration,
    ) -> Mount {
        let s = |p: &Path| p.to_str().expect("utf-8").to_string();
        let args = [
            "fs".into(),
            "mount".into(),
            s(backing),
            s(mnt),
            "--cache-dir".into(),
            s(cache),
            "--capacity".into(),
            "64MiB".into(),
            "--allow-other".into(),
        ];
        let args: Vec<&str> = args
            .iter()
            .map(String::as_str)
            .chain(extra.iter().copied())
            .collect();
        ok(&pliant(&args, dir));
        let stats = ok(&pliant(&["fs", "stat", &s(mnt), "--json"], dir));
        let stats: serde_json::Value = serde_json::from_str(&stats).expect("stat json");
        let pid = stats["pid"].as_u64().expect("pid") as u32;
        let stop_watch = Arc::new(AtomicBool::new(false));
        let stop = stop_watch.clone();
        std::thread::spawn(move || {
            let deadline = Instant::now() + limit;
            while Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(200));
                if stop.load(Ordering::Relaxed) {
                    return;
                }
            }
            eprintln!("watchdog: killing mount daemon {pid} after {limit:?}");
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        });
        Mount {
            dir: dir.to_path_buf(),
            mnt: mnt.to_path_buf(),
            pid,
            done: false,
            stop_watch,
        }
    }

    fn unmount(&mut self) {
        let out = pliant(
            &["fs", "unmount", self.mnt.to_str().expect("utf-8")],
            &self.dir,
        );
        self.done = true;
        self.stop_watch.store(true, Ordering::Relaxed);
        assert!(out.status.success(), "unmount: {}", stderr(&out));
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        self.stop_watch.store(true, Ordering::Relaxed);
        if !self.done {
            let mnt = self.mnt.to_str().unwrap_or_default();
            let _ = pliant(&["fs", "unmount", "--discard", mnt], &self.dir);
            let _ = nix::mount::umount2(&self.mnt, nix::mount::MntFlags::MNT_DETACH);
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
fn posix_cases_through_an_allow_other_mount_match_a_local_directory() {
    if !possible() {
        return;
    }
    // A root mount reads through passthrough and writes through the daemon; one without
    // passthrough (what an ordinary user's mount is) writes through the kernel's write cache.
    check(&[], &[]);
    check(&["--no-passthrough"], &["--write-cache"]);
}

/// The script through a mount with `extra` options, given `flags` too.
fn check(extra: &[&str], flags: &[&str]) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/compat/posix_diff.py");
    let top = tempfile::tempdir().expect("tempdir");
    let [backing, mnt, cache, reference] =
        ["backing", "mnt", "cache", "reference"].map(|n| top.path().join(n));
    // nobody must reach both sides: every directory on the way is 0755.
    fs::set_permissions(top.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    for d in [&backing, &mnt, &reference] {
        fs::create_dir(d).expect("mkdir");
        fs::set_permissions(d, fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let mut m = Mount::start(
        top.path(),
        &backing,
        &mnt,
        &cache,
        extra,
        Duration::from_secs(120),
    );
    let out = Command::new("/usr/bin/python3")
        .arg(&script)
        .args([&mnt, &reference])
        .args(["--as-user", "65534:65534", "--json"])
        .args(flags)
        .output()
        .expect("run python3 posix_diff.py");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: posix_diff.py said: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    m.unmount();
    for (run, r) in report["runs"].as_object().expect("runs") {
        eprintln!(
            "posix_diff {extra:?} as {run}: {} cases, {} passed, {} differing",
            r["cases"], r["passed"], r["differing"]
        );
    }
    let diffs = report["differences"].as_array().expect("differences");
    let with = |status: &str| -> Vec<String> {
        diffs
            .iter()
            .filter(|d| d["status"] == status)
            .map(|d| {
                format!(
                    "[{}] {}: through the mount {} / local {}{}",
                    d["run"].as_str().unwrap_or("?"),
                    d["case"].as_str().unwrap_or("?"),
                    d["target"],
                    d["reference"],
                    d["reason"]
                        .as_str()
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default()
                )
            })
            .collect()
    };
    // The bugs to fix, one line per reason with its cases (the details: run the script).
    let mut pending: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for d in diffs.iter().filter(|d| d["status"] == "pending") {
        let reason = d["reason"].as_str().unwrap_or("?").to_string();
        let case = format!(
            "[{}] {}",
            d["run"].as_str().unwrap_or("?"),
            d["case"].as_str().unwrap_or("?")
        );
        pending.entry(reason).or_default().push(case);
    }
    if !pending.is_empty() {
        eprintln!(
            "POSIX DIFFERENCES TO FIX (PENDING in tools/compat/posix_diff.py, not failing this test):"
        );
        for (reason, cases) in &pending {
            eprintln!(
                "  {} differences: {reason}
    {}",
                cases.len(),
                cases.join(" ")
            );
        }
    }
    for known in with("known") {
        eprintln!("known difference: {known}");
    }
    let new = with("new");
    assert!(
        new.is_empty(),
        "{} cases differ between the mount ({extra:?}) and a local directory (neither KNOWN nor \
         PENDING in tools/compat/posix_diff.py):\n  {}",
        new.len(),
        new.join("\n  ")
    );
    assert!(report["runs"]["65534"]["cases"].as_u64() >= Some(500));
}
