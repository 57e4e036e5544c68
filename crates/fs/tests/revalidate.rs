//! Revalidation through the core, without a mount: a file changed in the backing directory
//! while the cache holds unwritten data of it is a conflict (counted; the cache's data wins),
//! and the cache's own write-back, which writes the backing file off the file's lock, is not
//! one. (A bench over a slow backing store warned of such a conflict once in seven runs: an
//! open that came while a write-back had grown the backing file.)

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pliant_fs::{Caller, FsCache, FsConfig, SystemClock};

const EXTENT: u64 = 4096;

fn cache(backing: &Path, dir: &Path) -> FsCache {
    let mut c = FsConfig::new(backing.into(), dir.into(), 256 * EXTENT);
    c.extent = EXTENT;
    c.writeback_threads = 1;
    // 8 extents of 256 stay far below the dirty watermarks: nothing is written back unless
    // the test asks.
    FsCache::new(c, Arc::new(SystemClock)).expect("mount").0
}

struct Release<'a>(&'a FsCache);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.0.release_write_back();
    }
}

fn bytes(n: u64, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

#[test]
fn an_open_during_the_cache_s_own_write_back_is_no_conflict_and_a_change_behind_it_is() {
    let (b, d) = (
        tempfile::tempdir().expect("b"),
        tempfile::tempdir().expect("d"),
    );
    let fs = cache(b.path(), d.path());
    let data = bytes(8 * EXTENT, 5);
    let h = fs.create(Path::new("f"), 0o644, None).expect("create");
    fs.write(&h, 0, &data).expect("write");
    fs.release(h);

    // The write-back gives the backing file its length, then stops before writing its first
    // extent: the backing file has changed, by the cache's own hand.
    fs.hold_write_back();
    std::thread::scope(|s| {
        // Released however this scope ends: a failed check must not leave the write-back
        // waiting, and the scope waiting for it.
        let _release = Release(&fs);
        let wb = s.spawn(|| fs.writeback(Path::new("f"), &Caller::root()));
        let deadline = Instant::now() + Duration::from_secs(10);
        while fs.held_write_back().is_empty() {
            assert!(Instant::now() < deadline, "the write-back never started");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(
            std::fs::metadata(b.path().join("f")).expect("stat").len(),
            8 * EXTENT,
            "the write-back had set the backing file's length before it stopped"
        );
        let h = fs.open(Path::new("f")).expect("open during the write-back");
        assert_eq!(
            fs.stats().conflicting_files,
            0,
            "the cache's own write-back taken for a change behind its back"
        );
        fs.release_write_back();
        wb.join().expect("write-back thread").expect("write-back");
        assert_eq!(fs.read(&h, 0, data.len() as u32).expect("read"), data);
        fs.release(h);
    });
    assert_eq!(std::fs::read(b.path().join("f")).expect("backing"), data);

    // A change behind the cache while it holds unwritten data: a conflict, and the cache's
    // data wins.
    let h = fs.open(Path::new("f")).expect("open");
    let ours = bytes(EXTENT, 9);
    fs.write(&h, 0, &ours).expect("write");
    fs.release(h);
    std::thread::sleep(Duration::from_millis(20)); // a modification time of its own
    std::fs::write(b.path().join("f"), b"someone else").expect("change behind");
    let h = fs.open(Path::new("f")).expect("open after the change");
    assert_eq!(
        fs.stats().conflicting_files,
        1,
        "the change behind the cache counted"
    );
    assert_eq!(fs.read(&h, 0, EXTENT as u32).expect("read"), ours);
    fs.release(h);
    fs.check_invariants().expect("bookkeeping");
}
