//! The differential POSIX check (`tools/compat/posix_diff.py`, issue 32): its 800-odd cases
//! (open, rename, unlink, mkdir, rmdir, truncate, symlink, link, mknod, chmod, chown, write:
//! errno, link counts, times, sticky directories, permissions) run through a root
//! `--allow-other` mount and in a local directory, as root and as nobody, must give the same
//! results, but for the script's `KNOWN` differences (each with its reason) and its `PENDING`
//! ones (bugs to fix: printed loudly, not failed on). It needs /dev/fuse and root: outside CI
//! it says it skips without them; in CI (`CI` set) it fails.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

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

#[test]
fn posix_cases_through_an_allow_other_mount_match_a_local_directory() {
    if !possible() {
        return;
    }
    // A root mount reads through passthrough and writes through the daemon; one without
    // passthrough (what an ordinary user's mount is) writes through the kernel's write cache;
    // one with `--direct-io` without either.
    check(&[], &[]);
    check(&["--no-passthrough"], &["--write-cache"]);
    // `--direct-io`: no page cache for file data, each write to the daemon at once.
    check(&["--no-passthrough", "--direct-io"], &["--killpriv-v2"]);
}

/// The script through a mount with `extra` options, given `flags` too.
fn check(extra: &[&str], flags: &[&str]) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/compat/posix_diff.py");
    let args = [&["--capacity", "64MiB", "--allow-other"][..], extra].concat();
    let Some(mut m) = crate::fs_cli::mount_with(&args) else {
        return;
    };
    let (top, reference) = (m.dir.path().to_path_buf(), m.dir.path().join("reference"));
    fs::create_dir(&reference).expect("mkdir");
    // nobody must reach both sides: every directory on the way is 0755.
    for d in [&top, &m.backing, &reference] {
        fs::set_permissions(d, fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let mnt = m.mnt.clone();
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
