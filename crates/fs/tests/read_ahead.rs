//! Read-ahead through the core, without a mount: a reader going through a file in order finds
//! the extents after its reads already copied up (counted in `read_ahead_bytes`), one that jumps
//! about gets none, and what read-ahead copies is the file's data.

use std::path::Path;
use std::sync::Arc;

use pliant_fs::{FsCache, FsConfig, SystemClock};

const EXTENT: u64 = 4096;

fn cache(backing: &Path, dir: &Path) -> FsCache {
    let mut c = FsConfig::new(backing.into(), dir.into(), 256 * EXTENT);
    c.extent = EXTENT;
    c.writeback_threads = 1;
    FsCache::new(c, Arc::new(SystemClock)).expect("mount").0
}

fn bytes(n: u64, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(29) ^ seed).collect()
}

#[test]
fn a_reader_in_order_finds_the_next_extents_copied_and_one_that_jumps_does_not() {
    let (b, d) = (
        tempfile::tempdir().expect("b"),
        tempfile::tempdir().expect("d"),
    );
    let data = bytes(64 * EXTENT, 3);
    std::fs::write(b.path().join("seq"), &data).expect("seq");
    std::fs::write(b.path().join("jumps"), &data).expect("jumps");
    let fs = cache(b.path(), d.path());
    let h = fs.open(Path::new("seq")).expect("open");
    let mut got = Vec::new();
    for i in 0..64 {
        got.extend(fs.read(&h, i * EXTENT, EXTENT as u32).expect("read"));
    }
    assert_eq!(got, data);
    let s = fs.stats();
    assert!(
        s.read_ahead_bytes >= 32 * EXTENT,
        "most of a file read in order was copied ahead of its reads: {} of {}",
        s.read_ahead_bytes,
        64 * EXTENT
    );
    assert_eq!(s.copy_up_read_bytes, 64 * EXTENT, "each extent copied once");
    fs.release(h);
    let before = fs.stats().read_ahead_bytes;
    let h = fs.open(Path::new("jumps")).expect("open");
    for i in [40u64, 3, 17, 60, 8, 33, 51, 0] {
        let got = fs.read(&h, i * EXTENT, EXTENT as u32).expect("read");
        assert_eq!(
            got,
            data[(i * EXTENT) as usize..((i + 1) * EXTENT) as usize]
        );
    }
    assert_eq!(
        fs.stats().read_ahead_bytes,
        before,
        "no read-ahead for jumps"
    );
    fs.release(h);
    fs.check_invariants().expect("bookkeeping");
}
