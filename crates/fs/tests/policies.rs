//! The eviction and write-back triggers are the policies' decisions: the shipped watermark
//! rules by default, a user's policy when loaded, and a policy that does not compile stops the
//! mount with its name.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pliant_fs::{FsCache, FsConfig, OpenError, Policies, SystemClock};
use pliant_policy::{ParamValue, PolicySource};

const EXTENT: u64 = 4096;

fn config(backing: &Path, cache: &Path) -> FsConfig {
    let mut c = FsConfig::new(backing.into(), cache.into(), 256 * EXTENT);
    c.extent = EXTENT;
    c.writeback_threads = 2;
    c.policies.interval = Duration::from_millis(50);
    c
}

/// Polls `f` every 20 ms for at most 10 s.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "{what}: not within 10 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_default_policies_follow_the_watermarks() {
    let (b, c) = (
        tempfile::tempdir().expect("b"),
        tempfile::tempdir().expect("c"),
    );
    let cfg = config(b.path(), c.path());
    let cap = cfg.capacity;
    let (fs, _) = FsCache::new(cfg, Arc::new(SystemClock)).expect("mount");
    assert_eq!(fs.stats().writeback_policy, "fs-writeback-watermarks");
    let h = fs.create(Path::new("f"), 0o644, None).expect("create");
    // 40% of the capacity dirty: under the dirty high watermark (45%), nothing moves.
    fs.write(&h, 0, &vec![1u8; (cap * 40 / 100) as usize])
        .expect("write");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        fs.stats().writeback_bytes,
        0,
        "written back below the dirty high watermark"
    );
    // Past 45%: written back down to the dirty low watermark (20%), not further.
    fs.write(&h, cap * 40 / 100, &vec![2u8; (cap * 10 / 100) as usize])
        .expect("write");
    eventually("write-back to the low watermark", || {
        fs.stats().dirty_bytes <= cap * 20 / 100
    });
    std::thread::sleep(Duration::from_millis(300));
    let dirty = fs.stats().dirty_bytes;
    assert!(
        dirty > cap * 10 / 100,
        "kept writing back past the low watermark: {dirty} dirty"
    );
    // Past the high watermark (90%) of cached bytes: evicted down to the low one (70%).
    fs.write(&h, cap / 2, &vec![3u8; (cap * 45 / 100) as usize])
        .expect("write");
    eventually("eviction to the low watermark", || {
        fs.stats().used_bytes <= cap * 70 / 100
    });
    fs.release(h);
    fs.shutdown(false, &mut |_| {}).expect("shutdown");
}

#[test]
fn a_loaded_policy_writes_back_when_the_job_goes_idle() {
    let (b, c) = (
        tempfile::tempdir().expect("b"),
        tempfile::tempdir().expect("c"),
    );
    let mut cfg = config(b.path(), c.path());
    cfg.policies = Policies {
        writeback: pliant_policy::shipped::get("fs-writeback-when-idle").expect("shipped"),
        params: [("idle".to_string(), ParamValue::Num(0.3))]
            .into_iter()
            .collect(),
        ..cfg.policies
    };
    let (fs, _) = FsCache::new(cfg, Arc::new(SystemClock)).expect("mount");
    let h = fs.create(Path::new("f"), 0o644, None).expect("create");
    fs.write(&h, 0, &vec![1u8; 10 * EXTENT as usize])
        .expect("write");
    let written = Instant::now();
    eventually("write-back once idle", || fs.stats().dirty_bytes == 0);
    assert!(
        written.elapsed() >= Duration::from_millis(300),
        "wrote back before the job was idle"
    );
    assert_eq!(
        std::fs::read(b.path().join("f")).expect("backing").len(),
        10 * EXTENT as usize
    );
    fs.release(h);
    fs.shutdown(false, &mut |_| {}).expect("shutdown");
}

#[test]
fn a_policy_that_does_not_compile_stops_the_mount_and_says_which() {
    let (b, c) = (
        tempfile::tempdir().expect("b"),
        tempfile::tempdir().expect("c"),
    );
    let mut cfg = config(b.path(), c.path());
    cfg.policies.evict = PolicySource::functions("broken-evict", "function when( return true end");
    let err = FsCache::new(cfg, Arc::new(SystemClock)).expect_err("a broken policy");
    assert!(matches!(err, OpenError::Policy(_)), "{err}");
    assert!(err.to_string().contains("broken-evict"), "{err}");
}
