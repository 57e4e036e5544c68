//! Cold reads through the core, without a mount: a read none of whose extents is cached is
//! answered from the backing file and its extents are copied up behind it on the read-ahead
//! thread. What that thread copies must be the cache's like any other extent: in the eviction
//! order, so that the cache stays within its capacity.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pliant_fs::{EvictionUnit, FsCache, FsConfig, SystemClock};

const EXTENT: u64 = 4096;

fn cache(backing: &Path, dir: &Path, capacity: u64, unit: EvictionUnit) -> FsCache {
    let mut c = FsConfig::new(backing.into(), dir.into(), capacity);
    c.extent = EXTENT;
    c.writeback_threads = 1;
    c.eviction = unit;
    FsCache::new(c, Arc::new(SystemClock)).expect("mount").0
}

fn bytes(n: u64, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
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
        copied(&fs, order.len() as u64 * EXTENT);
        // One more cold read (the read-ahead thread evicts after each copy, a read after it).
        fs.read(&h, EXTENT, 1).expect("read");
        copied(&fs, (order.len() as u64 + 1) * EXTENT);
        fs.check_invariants().expect("bookkeeping");
        let used = fs.stats().used_bytes;
        assert!(
            used <= capacity,
            "{unit:?}: {used} bytes cached after cold reads, capacity {capacity}"
        );
        fs.release(h);
    }
}
