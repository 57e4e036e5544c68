//! The control verbs a mount answers through `pliant.*` extended attributes, run through the
//! core without a mount: who may use which, what a refused verb says, and the size probe that
//! lets a two-call `getxattr` run a verb once.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use pliant_fs::core::{Asker, Controls, VerbError};
use pliant_fs::{Caller, FsCache, FsConfig, SystemClock};

const PID: u32 = 4242;

/// Process `pid` of root.
fn by(pid: u32) -> Asker {
    Asker { pid, uid: 0 }
}

fn cache(backing: &Path, dir: &Path) -> Arc<FsCache> {
    let mut c = FsConfig::new(backing.into(), dir.into(), 1 << 20);
    c.extent = 4096;
    c.writeback_threads = 1;
    Arc::new(FsCache::new(c, Arc::new(SystemClock)).expect("mount").0)
}

fn dirs() -> (tempfile::TempDir, tempfile::TempDir) {
    (
        tempfile::tempdir().expect("backing"),
        tempfile::tempdir().expect("cache"),
    )
}

/// `getxattr(MOUNT, "pliant.<verb>")` by process `pid`, with its size probe first when `probe`.
fn get(c: &Controls, verb: &str, probe: bool, asker: Asker) -> serde_json::Value {
    let v = c
        .get(Path::new(""), 1, verb, probe, asker, Caller::root)
        .unwrap_or_else(|e| panic!("{verb}: {e}"));
    serde_json::from_slice(&v).expect("JSON")
}

#[test]
fn a_size_probe_runs_the_verb_once_and_the_next_call_gets_that_answer() {
    let (b, d) = dirs();
    let fs = cache(b.path(), d.path());
    let c = Controls::new(fs.clone());
    c.set("flush", b"", by(PID), true).expect("flush");
    let probed = get(&c, "result", true, by(PID));
    assert_eq!(probed["ok"], true);
    assert!(
        probed["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("flush ")),
        "{probed}"
    );
    // The result is taken once: the call after the probe gets the probe's answer, not a
    // second run of the verb (which would find nothing asked).
    assert_eq!(get(&c, "result", false, by(PID)), probed);
    assert_eq!(
        get(&c, "result", false, by(PID))["message"],
        "nothing was asked by this process"
    );
    // Another process's answer is its own, and so is another user's process's under the same
    // pid (pids are reused).
    c.set("discard", b"", by(PID), true).expect("discard");
    assert_eq!(
        get(&c, "result", false, by(PID + 1))["message"],
        "nothing was asked by this process"
    );
    let other_user = Asker {
        pid: PID,
        uid: 1000,
    };
    assert_eq!(
        get(&c, "result", false, other_user)["message"],
        "nothing was asked by this process"
    );
    assert_eq!(get(&c, "result", false, by(PID))["ok"], true);
}

#[test]
fn verbs_that_change_the_mount_are_its_owners_and_roots_only() {
    let (b, d) = dirs();
    let fs = cache(b.path(), d.path());
    let c = Controls::new(fs.clone());
    let discard = c.discard();
    assert!(matches!(
        c.set("discard", b"", by(PID), false),
        Err(VerbError::NotOwner)
    ));
    assert!(!discard.load(Ordering::Relaxed), "refused: nothing changed");
    assert_eq!(
        get(&c, "result", false, by(PID))["message"],
        "nothing was asked by this process",
        "a refused caller leaves no answer"
    );
    c.set("discard", b"", by(PID), true).expect("the owner's");
    assert!(discard.load(Ordering::Relaxed));
}

#[test]
fn a_refused_verb_says_why_and_an_unknown_one_is_no_attribute() {
    let (b, d) = dirs();
    let fs = cache(b.path(), d.path());
    let c = Controls::new(fs.clone());
    let e = c
        .set("policy.evict", b"not json", by(PID), true)
        .expect_err("not a policy");
    assert!(
        matches!(&e, VerbError::Refused(m) if m.starts_with("policy.evict: ")),
        "{e:?}"
    );
    let r = get(&c, "result", false, by(PID));
    assert_eq!(r["ok"], false);
    assert_eq!(r["message"], e.to_string());
    // A policy that does not compile: its name, then the engine's reason; the running one stays.
    let broken = br#"{"name": "broken", "code": "function when( return true end"}"#;
    let e = c
        .set("policy.evict", broken, by(PID), true)
        .expect_err("does not compile");
    let why = e.to_string();
    assert!(
        why.starts_with("policy broken: ") && why.len() > 20,
        "{why}"
    );
    assert_eq!(
        fs.stats().evict_policy,
        "fs-evict-watermarks",
        "the running one stays"
    );
    let e = c
        .set("policy.rollback", b"evict", by(PID), true)
        .expect_err("nothing to roll back to");
    assert!(
        e.to_string().starts_with("rolling back the evict policy: "),
        "{e}"
    );
    let e = c.set("nope", b"", by(PID), true).expect_err("no such verb");
    assert_eq!(e.to_string(), "pliant.nope: no such control");
    let e = c
        .set("policy.rollback", b"sideways", by(PID), true)
        .expect_err("no such policy");
    assert!(matches!(e, VerbError::Refused(_)), "{e:?}");
    assert!(matches!(
        c.get(Path::new(""), 1, "nope", false, by(PID), Caller::root),
        Err(VerbError::NoSuchVerb(v)) if v == "nope"
    ));
}

#[test]
fn stats_carry_the_metrics_address_and_a_hint_covers_only_what_its_caller_may_touch() {
    let (b, d) = dirs();
    std::fs::write(b.path().join("open"), vec![1u8; 10_000]).expect("open");
    std::fs::write(b.path().join("closed"), vec![2u8; 10_000]).expect("closed");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        b.path().join("closed"),
        std::fs::Permissions::from_mode(0o600),
    )
    .expect("chmod");
    std::fs::set_permissions(
        b.path().join("open"),
        std::fs::Permissions::from_mode(0o644),
    )
    .expect("chmod");
    let fs = cache(b.path(), d.path());
    let c = Controls::new(fs.clone()).with_metrics(Some("127.0.0.1:9".into()));
    assert_eq!(
        get(&c, "stats", false, by(PID))["metrics_addr"],
        "127.0.0.1:9"
    );
    // Someone else, not in the files' group: may read `open`, not `closed`.
    let stranger = || Caller {
        uid: 54_321,
        gid: 54_321,
        groups: Vec::new(),
    };
    let v = c
        .get(Path::new(""), 1, "preload", false, by(PID), stranger)
        .expect("preload");
    let r: serde_json::Value = serde_json::from_slice(&v).expect("JSON");
    assert_eq!(
        (r["files"].as_u64(), r["skipped"].as_u64()),
        (Some(1), Some(1)),
        "{r}"
    );
    assert_eq!(fs.stats().used_bytes, 10_000, "only `open` was copied up");
}
