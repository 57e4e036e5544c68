//! What `preload` copies when files do not fit, and what the read and copy-up counters say:
//! through the core, without a mount.

use std::path::Path;
use std::sync::Arc;

use pliant_fs::{Caller, FsCache, FsConfig, SystemClock};

const EXTENT: u64 = 4096;
/// 256 extents: 1 MiB, eviction above 90% of it.
const CAPACITY: u64 = 256 * EXTENT;

fn cache(backing: &Path, dir: &Path) -> FsCache {
    let mut c = FsConfig::new(backing.into(), dir.into(), CAPACITY);
    c.extent = EXTENT;
    c.writeback_threads = 1;
    FsCache::new(c, Arc::new(SystemClock)).expect("mount").0
}

fn bytes(n: u64, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

#[test]
fn a_preload_bigger_than_the_cache_pushed_out_what_was_preloaded_and_then_itself() {
    let (b, c) = (
        tempfile::tempdir().expect("b"),
        tempfile::tempdir().expect("c"),
    );
    std::fs::write(b.path().join("small"), bytes(100 * 1024, 1)).expect("small");
    std::fs::write(b.path().join("big"), bytes(2 * CAPACITY, 2)).expect("big");
    let fs = cache(b.path(), c.path());
    let r = fs
        .preload(Path::new("small"), &Caller::root())
        .expect("preload small");
    assert_eq!(
        (r.files, r.bytes, r.kept_bytes, r.not_fitted),
        (1, 100 * 1024, 100 * 1024, 0)
    );
    // Twice the capacity: left out, nothing of it copied, and nothing pushed out for it.
    let r = fs
        .preload(Path::new("big"), &Caller::root())
        .expect("preload big");
    assert_eq!(
        (r.files, r.bytes, r.not_fitted, r.not_fitted_bytes),
        (0, 0, 1, 2 * CAPACITY),
        "{r:?}"
    );
    let s = fs.stats();
    assert_eq!(s.used_bytes, 100 * 1024, "the earlier preload stays");
    assert_eq!((s.evicted_bytes, s.copy_up_bytes), (0, 100 * 1024));
    // A directory of files each 30% of the capacity: three fit below the eviction threshold
    // (90%), the fourth would push out the first three: left out, whichever it is.
    std::fs::create_dir(b.path().join("d")).expect("d");
    let part = CAPACITY * 30 / 100;
    for i in 0..4u8 {
        std::fs::write(b.path().join(format!("d/{i}")), bytes(part, i)).expect("part");
    }
    let r = fs
        .preload(Path::new("d"), &Caller::root())
        .expect("preload d");
    assert_eq!(
        (r.files, r.bytes, r.not_fitted, r.not_fitted_bytes),
        (3, 3 * part, 1, part),
        "{r:?}"
    );
    assert_eq!(r.kept_bytes + r.dropped_bytes, 3 * part, "{r:?}");
    assert!(
        fs.stats().used_bytes <= CAPACITY,
        "the preload never filled the cache past its capacity"
    );
}

#[test]
fn the_hit_ratio_disagreed_with_the_copy_up_counter_on_a_cold_sequential_read() {
    let (b, c) = (
        tempfile::tempdir().expect("b"),
        tempfile::tempdir().expect("c"),
    );
    let size = 4 * EXTENT;
    let data = bytes(size, 3);
    std::fs::write(b.path().join("cold"), &data).expect("cold");
    std::fs::write(b.path().join("pre"), bytes(EXTENT, 4)).expect("pre");
    std::fs::write(b.path().join("partial"), bytes(2 * EXTENT, 5)).expect("partial");
    let fs = cache(b.path(), c.path());
    // Read cold, in requests of an eighth of an extent, as the kernel reads ahead, with the
    // copies held: every request is answered from the backing directory (a cold read streams),
    // its extent and the next ones left to the read-ahead thread.
    fs.hold_read_ahead();
    let h = fs.open(Path::new("cold")).expect("open");
    let mut got = Vec::new();
    for off in (0..size).step_by((EXTENT / 8) as usize) {
        got.extend(fs.read(&h, off, (EXTENT / 8) as u32).expect("read"));
    }
    assert_eq!(got, data);
    let s = fs.stats();
    assert_eq!((s.read_hit_bytes, s.read_miss_bytes), (0, size));
    assert_eq!(s.copy_up_bytes, 0, "nothing copied while held");
    fs.release_read_ahead();
    let copied = |fs: &FsCache| {
        for _ in 0..1000 {
            if fs.stats().copy_up_bytes == size {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!(
            "the copies behind the reads did not end within 10 s: {:?}",
            fs.stats()
        );
    };
    copied(&fs);
    // Every byte came from the backing directory and was copied up for these reads: the first
    // extent behind the reads of it, the rest ahead of them; the ratio is of requests that
    // found their extent cached, and says so (none did), where the copy-up counter says the
    // reads made the file cached.
    let s = fs.stats();
    assert_eq!(s.copy_up_read_bytes, size);
    assert_eq!(s.read_ahead_bytes, size - EXTENT);
    assert_eq!(s.hit_ratio, 0.0);
    // Read again: all of it from the cache.
    let mut again = Vec::new();
    for off in (0..size).step_by((EXTENT / 8) as usize) {
        again.extend(fs.read(&h, off, (EXTENT / 8) as u32).expect("read"));
    }
    fs.release(h);
    assert_eq!(again, data);
    let s = fs.stats();
    assert_eq!((s.read_hit_bytes, s.read_miss_bytes), (size, size));
    assert!((s.hit_ratio - 0.5).abs() < 1e-9, "{}", s.hit_ratio);
    assert_eq!(s.copy_up_bytes, size, "no copy a second time");
    // A preload and a write to part of an extent copy up too, each counted apart.
    fs.preload(Path::new("pre"), &Caller::root())
        .expect("preload");
    let h = fs.open(Path::new("partial")).expect("open");
    fs.write(&h, 10, b"x").expect("write");
    fs.release(h);
    let s = fs.stats();
    assert_eq!(s.copy_up_preload_bytes, EXTENT);
    assert_eq!(s.copy_up_read_bytes, size, "no read since");
    assert_eq!(
        s.copy_up_bytes,
        size + EXTENT + EXTENT,
        "the partial write copied its extent up"
    );
    assert_eq!(
        s.read_hit_bytes + s.read_miss_bytes,
        2 * size,
        "no read since"
    );
}
