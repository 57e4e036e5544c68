//! Cold reads through the core, without a mount: a read none of whose extents is cached is
//! answered from the backing file and its extents are copied up behind it on the read-ahead
//! thread. What that thread copies must be the cache's like any other extent: in the eviction
//! order, so that the cache stays within its capacity; copied for a closed file without keeping
//! a descriptor to it. And an absent extent must hold the backing file's bytes, which for a
//! file unlinked while open it does not: eviction leaves such a file alone. A copy that fails
//! leaves nothing in the cache file, and a copy under way holds back neither a preload of other
//! extents nor a writer asking for passthrough.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pliant_fs::{EvictionUnit, FsCache, FsConfig, SystemClock};

const EXTENT: u64 = 4096;

fn cache(backing: &Path, dir: &Path, capacity: u64, unit: EvictionUnit) -> FsCache {
    let mut c = FsConfig::new(backing.into(), dir.into(), capacity);
    // Writes are refused beyond this many times the capacity a window: not what is tested.
    c.write_window_multiplier = 1 << 20;
    c.extent = EXTENT;
    c.writeback_threads = 1;
    c.eviction = unit;
    FsCache::new(c, Arc::new(SystemClock)).expect("mount").0
}

fn bytes(n: u64, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

/// Waits (at most 10 s) until the read-ahead thread has nothing left to copy. (Under eviction a
/// copy may end without copying: the file's extents were dropped meanwhile.)
fn idle(fs: &FsCache) {
    assert!(
        fs.read_ahead_idle(Duration::from_secs(10)),
        "the read-ahead thread still busy after 10 s"
    );
}

/// Waits (at most 10 s) until `bytes` have been copied up in all.
fn copied(fs: &FsCache, bytes: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while fs.stats().copy_up_bytes < bytes {
        assert!(
            Instant::now() < deadline,
            "{} of {bytes} bytes copied up after 10 s",
            fs.stats().copy_up_bytes
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A file read once out of order, every read cold: its extents, copied up behind the reads,
/// must be evictable, or reads alone fill the cache past its capacity for good.
#[test]
fn extents_copied_behind_cold_reads_can_be_evicted() {
    for unit in [EvictionUnit::File, EvictionUnit::Extent] {
        let (b, d) = (
            tempfile::tempdir().expect("b"),
            tempfile::tempdir().expect("d"),
        );
        let n = 64;
        let data = bytes(n * EXTENT, 9);
        std::fs::write(b.path().join("f"), &data).expect("backing file");
        let capacity = 16 * EXTENT;
        let fs = cache(b.path(), d.path(), capacity, unit);
        let h = fs.open(Path::new("f")).expect("open");
        // Every other extent, from the end: no read in order (no read-ahead), each cold.
        let order: Vec<u64> = (0..n).rev().filter(|i| i % 2 == 0).collect();
        for &i in &order {
            let got = fs.read(&h, i * EXTENT, EXTENT as u32).expect("read");
            assert_eq!(
                got,
                data[(i * EXTENT) as usize..((i + 1) * EXTENT) as usize]
            );
        }
        idle(&fs);
        // One more cold read (the read-ahead thread evicts after each copy, a read after it).
        fs.read(&h, EXTENT, 1).expect("read");
        idle(&fs);
        fs.check_invariants().expect("bookkeeping");
        let used = fs.stats().used_bytes;
        assert!(
            used <= capacity,
            "{unit:?}: {used} bytes cached after cold reads, capacity {capacity}"
        );
        fs.release(h);
    }
}

/// Descriptors this process holds to files in `dir`.
fn open_in(dir: &Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|t| t.parent() == Some(dir))
        .count()
}

/// A file closed before the copies its cold reads left are done: the copies still happen, but
/// the cache keeps no descriptor to a closed clean file's backing file (as its close made
/// sure), or every file read once and closed holds one for as long as it stays cached.
#[test]
fn a_copy_behind_a_closed_file_leaves_no_descriptor_to_its_backing_file() {
    let (b, d) = (
        tempfile::tempdir().expect("b"),
        tempfile::tempdir().expect("d"),
    );
    let n = 10;
    for k in 0..=n {
        std::fs::write(b.path().join(format!("f{k}")), bytes(EXTENT, k as u8)).expect("file");
    }
    let fs = cache(b.path(), d.path(), 256 * EXTENT, EvictionUnit::File);
    // The read-ahead thread stopped in a copy of an open file, so the others' copies come
    // after their files are closed.
    let first = fs.open(Path::new(&format!("f{n}"))).expect("open");
    fs.hold_read_ahead();
    fs.read(&first, 0, EXTENT as u32).expect("read");
    let deadline = Instant::now() + Duration::from_secs(10);
    while fs.held_read_ahead().is_empty() {
        assert!(Instant::now() < deadline, "no copy was held");
        std::thread::sleep(Duration::from_millis(1));
    }
    for k in 0..n {
        let h = fs.open(Path::new(&format!("f{k}"))).expect("open");
        let got = fs.read(&h, 0, EXTENT as u32).expect("read");
        assert_eq!(got, bytes(EXTENT, k as u8));
        fs.release(h);
    }
    fs.release_read_ahead();
    copied(&fs, (n + 1) * EXTENT);
    fs.release(first);
    fs.check_invariants().expect("bookkeeping");
    assert_eq!(
        open_in(b.path()),
        0,
        "descriptors to backing files of closed clean files"
    );
    // What was copied is the files' bytes.
    for k in 0..n {
        let h = fs.open(Path::new(&format!("f{k}"))).expect("open");
        assert_eq!(
            fs.read(&h, 0, EXTENT as u32).expect("read"),
            bytes(EXTENT, k as u8)
        );
        fs.release(h);
    }
    assert_eq!(fs.stats().read_hit_bytes, n * EXTENT, "read from the cache");
}

/// A file unlinked while open keeps what was written to it in the cache alone (its backing
/// file went with its name, and nothing is written back to it): eviction must not drop that,
/// or the open file reads its old bytes (or zeros) where it was written.
#[test]
fn an_open_unlinked_file_s_data_survives_eviction() {
    for unit in [EvictionUnit::Extent, EvictionUnit::File] {
        unlinked_file_under_eviction(unit);
    }
}

fn unlinked_file_under_eviction(unit: EvictionUnit) {
    let (b, d) = (
        tempfile::tempdir().expect("b"),
        tempfile::tempdir().expect("d"),
    );
    let old = bytes(4 * EXTENT, 1);
    std::fs::write(b.path().join("tmp"), &old).expect("tmp");
    std::fs::write(b.path().join("big"), bytes(16 * EXTENT, 2)).expect("big");
    let capacity = 8 * EXTENT;
    let fs = cache(b.path(), d.path(), capacity, unit);
    let h = fs.open(Path::new("tmp")).expect("open");
    let new = bytes(4 * EXTENT, 7);
    fs.write(&h, 0, &new).expect("write");
    fs.unlink(Path::new("tmp")).expect("unlink");
    // Another file read whole, over the capacity: eviction takes the least recently used.
    let big = fs.open(Path::new("big")).expect("open big");
    for i in 0..16 {
        fs.read(&big, i * EXTENT, EXTENT as u32).expect("read big");
    }
    idle(&fs);
    fs.read(&big, 0, 1).expect("read big");
    idle(&fs);
    fs.release(big);
    let used = fs.stats().used_bytes;
    assert!(
        used <= capacity,
        "{unit:?}: {used} bytes cached, capacity {capacity}"
    );
    let got = fs.read(&h, 0, (4 * EXTENT) as u32).expect("read tmp");
    assert!(
        got == new,
        "{unit:?}: the unlinked file's written bytes are gone (old bytes: {})",
        got == old
    );
    fs.check_invariants().expect("bookkeeping");
    fs.release(h);
}

/// Readers (cold and warm), writers of the bytes the file already holds, truncations to its own
/// length, evictions, invalidations and preloads, all at once on one file whose content thus
/// never changes: every read must return exactly it (a hole an eviction punched under a read
/// would show as zeros, a copy the file was cut under as a short or zeroed reply).
#[test]
fn a_file_whose_bytes_never_change_always_reads_the_same_under_every_operation() {
    for unit in [EvictionUnit::Extent, EvictionUnit::File] {
        let (b, d) = (
            tempfile::tempdir().expect("b"),
            tempfile::tempdir().expect("d"),
        );
        let n = 32;
        let data = Arc::new(bytes(n * EXTENT, 11));
        std::fs::write(b.path().join("f"), &*data).expect("file");
        let fs = Arc::new(cache(b.path(), d.path(), 16 * EXTENT, unit));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let deadline = Instant::now() + Duration::from_millis(1500);
        let mut threads = Vec::new();
        for t in 0..3u64 {
            let (fs, data, stop) = (fs.clone(), data.clone(), stop.clone());
            threads.push(std::thread::spawn(move || {
                let h = fs.open(Path::new("f")).expect("open");
                let mut x = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                let mut reads = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && reads < 200_000 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let off = x % (n * EXTENT);
                    let len = 1 + (x >> 32) % (3 * EXTENT);
                    let got = fs.read(&h, off, len as u32).expect("read");
                    let end = (off + len).min(n * EXTENT) as usize;
                    assert!(
                        got == data[off as usize..end],
                        "read of {len} at {off}: {} bytes, first differing at {:?}",
                        got.len(),
                        got.iter()
                            .zip(&data[off as usize..end])
                            .position(|(a, b)| a != b)
                    );
                    reads += 1;
                }
                fs.release(h);
            }));
        }
        {
            let (fs, data, stop) = (fs.clone(), data.clone(), stop.clone());
            threads.push(std::thread::spawn(move || {
                let h = fs.open(Path::new("f")).expect("open");
                let mut k = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && k < 100_000 {
                    let i = (k * 7) % n;
                    let s = (i * EXTENT) as usize;
                    match k % 4 {
                        0 => {
                            fs.write(&h, s as u64 + 100, &data[s + 100..s + 300])
                                .expect("write");
                        }
                        1 => fs.truncate_open(&h, n * EXTENT).expect("truncate"),
                        _ => {
                            fs.write(&h, s as u64, &data[s..s + EXTENT as usize])
                                .expect("write");
                        }
                    }
                    k += 1;
                }
                fs.release(h);
            }));
        }
        {
            let (fs, stop) = (fs.clone(), stop.clone());
            threads.push(std::thread::spawn(move || {
                let root = pliant_fs::Caller::root();
                let mut k = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && k < 100_000 {
                    let p = Path::new("f");
                    match k % 3 {
                        0 => drop(fs.evict(p, &root).expect("evict")),
                        1 => drop(fs.invalidate(p, &root).expect("invalidate")),
                        _ => drop(fs.preload(p, &root).expect("preload")),
                    }
                    k += 1;
                }
            }));
        }
        while Instant::now() < deadline && !threads.iter().any(|t| t.is_finished()) {
            std::thread::sleep(Duration::from_millis(10));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in threads {
            if let Err(e) = t.join() {
                std::panic::resume_unwind(e);
            }
        }
        fs.flush(&mut |_| {});
        fs.check_invariants().expect("bookkeeping");
        assert_eq!(std::fs::read(b.path().join("f")).expect("backing"), *data);
    }
}

/// The only cache file under the cache directory `d`.
fn cache_file(d: &Path) -> std::fs::Metadata {
    let files: Vec<_> = std::fs::read_dir(d.join("data"))
        .expect("data dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_file())
        .collect();
    assert_eq!(files.len(), 1, "one cache file: {files:?}");
    std::fs::metadata(&files[0]).expect("cache file")
}

/// A copy behind a cold read that fails halfway (a disk error) leaves nothing in the cache
/// file: neither blocks no extent accounts for, nor a length past the file's end when the
/// file was cut during the copy. Reads stay right, and a later read copies the extent up.
#[test]
fn a_copy_that_fails_halfway_leaves_nothing_behind() {
    use std::os::unix::fs::MetadataExt;
    let (b, d) = (
        tempfile::tempdir().expect("b"),
        tempfile::tempdir().expect("d"),
    );
    let data = bytes(4 * EXTENT, 7);
    std::fs::write(b.path().join("f"), &data).expect("f");
    let fs = cache(b.path(), d.path(), 64 * EXTENT, EvictionUnit::File);
    let h = fs.open(Path::new("f")).expect("open");

    fs.fail_read_ahead_copies(true);
    let got = fs.read(&h, 2 * EXTENT, EXTENT as u32).expect("cold read");
    assert_eq!(got, data[2 * EXTENT as usize..3 * EXTENT as usize]);
    idle(&fs);
    assert_eq!(
        fs.stats().copy_up_bytes,
        0,
        "a failed copy counted as copied"
    );
    assert_eq!(
        cache_file(d.path()).blocks(),
        0,
        "what the failed copy wrote stayed in the cache file"
    );

    // The file cut to one extent while the copy of its last is under way, which then fails.
    fs.hold_read_ahead();
    let got = fs.read(&h, 3 * EXTENT, EXTENT as u32).expect("cold read");
    assert_eq!(got, data[3 * EXTENT as usize..]);
    held(&fs);
    fs.truncate_open(&h, EXTENT).expect("truncate");
    fs.release_read_ahead();
    idle(&fs);
    assert!(
        cache_file(d.path()).len() <= EXTENT,
        "the failed copy left the cache file at {} bytes, past the file's {EXTENT}",
        cache_file(d.path()).len()
    );

    fs.fail_read_ahead_copies(false);
    let got = fs.read(&h, 0, EXTENT as u32).expect("read");
    assert_eq!(got, data[..EXTENT as usize]);
    idle(&fs);
    assert_eq!(
        fs.stats().copy_up_bytes,
        EXTENT,
        "the extent copied up once copies work"
    );
    fs.release(h);
    fs.check_invariants().expect("bookkeeping");
}

/// Lets held read-ahead copies go on however the test ends: a failed check must not leave a
/// thread of its scope waiting for them.
struct Release<'a>(&'a FsCache);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.0.release_read_ahead();
    }
}

/// Waits (at most 10 s) until a read-ahead copy is held.
fn held(fs: &FsCache) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while fs.held_read_ahead().is_empty() {
        assert!(Instant::now() < deadline, "no copy held after 10 s");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A preload waits only for copies of the extents it needs, not for every copy under way: a
/// stream of cold readers elsewhere in the file (here one copy, held) would otherwise hold it
/// back for as long as it lasts. And a writer asking for passthrough while a copy is under
/// way is sent through the daemon at once (the file is not whole), rather than waiting.
#[test]
fn a_copy_under_way_holds_back_neither_a_preload_of_other_extents_nor_a_writer() {
    let (b, d) = (
        tempfile::tempdir().expect("b"),
        tempfile::tempdir().expect("d"),
    );
    let data = bytes(8 * EXTENT, 11);
    std::fs::write(b.path().join("f"), &data).expect("f");
    let fs = cache(b.path(), d.path(), 64 * EXTENT, EvictionUnit::File);
    let h = fs.open(Path::new("f")).expect("open");
    fs.hold_read_ahead();
    std::thread::scope(|s| {
        let _release = Release(&fs);
        let got = fs.read(&h, 7 * EXTENT, EXTENT as u32).expect("cold read");
        assert_eq!(got, data[7 * EXTENT as usize..]);
        held(&fs);

        let (tx, rx) = std::sync::mpsc::channel();
        let (fs, h) = (&fs, &h);
        s.spawn(move || {
            let r = fs.passthrough_write_file(h).map(|f| f.is_some());
            tx.send(r).expect("send");
        });
        let pt = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("a passthrough writer waited for a copy of an extent it does not need");
        assert!(
            !pt.expect("passthrough"),
            "a file not whole opened in passthrough"
        );

        let preload = s.spawn(|| fs.preload(Path::new("f"), &pliant_fs::Caller::root()));
        let deadline = Instant::now() + Duration::from_secs(10);
        while fs.stats().copy_up_preload_bytes < 7 * EXTENT {
            assert!(
                Instant::now() < deadline,
                "the preload copied {} of the 7 extents no copy held, in 10 s",
                fs.stats().copy_up_preload_bytes / EXTENT
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        fs.release_read_ahead();
        let r = preload.join().expect("preload thread").expect("preload");
        assert_eq!(
            r.bytes,
            7 * EXTENT,
            "the preload copied the 7 extents, read-ahead the last"
        );
    });
    idle(&fs);
    assert_eq!(
        fs.stats().copy_up_bytes,
        8 * EXTENT,
        "each extent copied once"
    );
    let mut got = Vec::new();
    for i in 0..8 {
        got.extend(fs.read(&h, i * EXTENT, EXTENT as u32).expect("read"));
    }
    assert_eq!(got, data);
    assert_eq!(fs.stats().copy_up_bytes, 8 * EXTENT, "all of it was cached");
    fs.release(h);
    fs.check_invariants().expect("bookkeeping");
}
