//! Read-ahead through the core, without a mount: a reader going through a file in order has
//! the extents after its reads copied up by read-ahead (counted in `read_ahead_bytes`), one that
//! jumps about gets none, and what read-ahead copies is the file's data. A cold read is
//! answered from the backing file and leaves its own extent to the same thread, so the tests
//! wait for the copies they count.

use std::path::Path;
use std::sync::Arc;

use pliant_fs::{Caller, FsCache, FsConfig, Handle, SystemClock};

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
    copied(&fs, 64 * EXTENT);
    let s = fs.stats();
    // The first two extents copied behind their reads; from the second read on, read-ahead
    // had queued each next extent before the reader came to it.
    assert_eq!(
        s.read_ahead_bytes,
        62 * EXTENT,
        "a file read in order was copied ahead of its reads after its first two extents"
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
    copied(&fs, 72 * EXTENT);
    assert_eq!(
        fs.stats().read_ahead_bytes,
        before,
        "no read-ahead for jumps"
    );
    fs.release(h);
    fs.check_invariants().expect("bookkeeping");
}

/// Waits (at most 10 s) until `bytes` have been copied up in all.
fn copied(fs: &FsCache, bytes: u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while fs.stats().copy_up_bytes < bytes {
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {bytes} bytes copied up after 10 s",
            fs.stats().copy_up_bytes
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Reads extent 0 twice and extent 1 once, in order, with their copies done in between, the
/// last read with read-ahead held, which then holds a copy of extent 2 or later: the extent it
/// returns. (A cold read leaves its own extent to the read-ahead thread, first in its queue: a
/// hold before the first reads would stop that copy instead.)
fn hold_a_copy_ahead(fs: &FsCache, h: &Handle) -> u64 {
    fs.read(h, 0, EXTENT as u32).expect("read");
    copied(fs, EXTENT);
    // In order: extent 1 read ahead.
    fs.read(h, 0, EXTENT as u32).expect("read");
    copied(fs, 2 * EXTENT);
    fs.hold_read_ahead();
    // In order again, from the cache: extents 2 and 3 read ahead, held.
    fs.read(h, EXTENT, EXTENT as u32).expect("read");
    held_from(fs, 2)
}

/// Waits (at most 10 s) until a read-ahead copy of an extent at or after `from` is held.
fn held_from(fs: &FsCache, from: u64) -> u64 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let Some(&i) = fs.held_read_ahead().iter().find(|&&i| i >= from) {
            return i;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no read-ahead copy was held"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Read-ahead copies into the cache file without the file's lock. A truncation in the middle
/// of one (the file cut below the extent being copied) must leave the cache file as the cut
/// made it: no longer than the file, since a passthrough read ends where the cache file ends
/// (a copy that wrote on would have the kernel read zeros past the end of the file), and
/// holding nothing but the file's bytes and zeros.
#[test]
fn a_copy_the_file_was_cut_under_leaves_no_byte_of_it() {
    let (b, d) = (
        tempfile::tempdir().expect("b"),
        tempfile::tempdir().expect("d"),
    );
    let fs = cache(b.path(), d.path());
    let data = bytes(64 * EXTENT, 5);
    std::fs::write(b.path().join("f"), &data).expect("backing file");
    let h = fs.open(Path::new("f")).expect("open");
    let copied = hold_a_copy_ahead(&fs, &h);
    let cut = EXTENT + 100;
    fs.truncate_open(&h, cut).expect("cut");
    // A preload waits only for copies of the file's extents; the held one is past the cut.
    fs.preload(Path::new("f"), &Caller::root())
        .expect("preload");
    // Every extent is cached, but the held copy still writes the cache file past the cut:
    // no passthrough, whose reads would end where the cache file ends.
    assert!(
        fs.passthrough_file(&h).expect("passthrough").is_none(),
        "passthrough while a copy past the file's end was under way"
    );
    fs.release_read_ahead();
    assert!(
        fs.read_ahead_idle(std::time::Duration::from_secs(10)),
        "the read-ahead thread still busy after 10 s"
    );
    let cache_file = fs
        .passthrough_file(&h)
        .expect("passthrough")
        .expect("every extent of the cut file is cached");
    assert_eq!(
        cache_file.metadata().expect("metadata").len(),
        cut,
        "the cache file of a file cut while extent {copied} was being copied"
    );
    fs.unpin(&h);
    // A write far past the cut: everything between is a hole, zeros.
    let patch = bytes(300, 9);
    let at = 40 * EXTENT + 10;
    fs.write(&h, at, &patch).expect("write");
    let mut want = data[..cut as usize].to_vec();
    want.resize(at as usize, 0);
    want.extend_from_slice(&patch);
    let got = fs.read(&h, 0, want.len() as u32 + 1).expect("read all");
    assert!(
        got == want,
        "extent {copied} was being copied: {} bytes against {}, first difference at {:?}",
        got.len(),
        want.len(),
        got.iter().zip(&want).position(|(a, b)| a != b)
    );
    fs.release(h);
    fs.check_invariants().expect("bookkeeping");
}

/// A write to an extent read-ahead is copying waits for the copy, so the copy of the backing
/// file's older bytes never lands over it.
#[test]
fn a_write_waits_for_the_copy_of_its_extent() {
    let (b, d) = (
        tempfile::tempdir().expect("b"),
        tempfile::tempdir().expect("d"),
    );
    let fs = Arc::new(cache(b.path(), d.path()));
    let data = bytes(64 * EXTENT, 5);
    std::fs::write(b.path().join("f"), &data).expect("backing file");
    let h = Arc::new(fs.open(Path::new("f")).expect("open"));
    let copied = hold_a_copy_ahead(&fs, &h);
    let patch = bytes(300, 9);
    let at = copied * EXTENT + 10;
    let (tx, rx) = std::sync::mpsc::channel();
    let writer = {
        let (fs, h, patch) = (fs.clone(), h.clone(), patch.clone());
        std::thread::spawn(move || {
            fs.write(&h, at, &patch).expect("write");
            tx.send(()).expect("send");
        })
    };
    assert!(
        rx.recv_timeout(std::time::Duration::from_millis(200))
            .is_err(),
        "the write went ahead while extent {copied} was being copied"
    );
    fs.release_read_ahead();
    rx.recv_timeout(std::time::Duration::from_secs(10))
        .expect("the write finishes once the copy is done");
    writer.join().expect("writer");
    let mut want = data.clone();
    want[at as usize..at as usize + patch.len()].copy_from_slice(&patch);
    let got = fs.read(&h, 0, want.len() as u32).expect("read all");
    assert!(
        got == want,
        "first difference at {:?}",
        got.iter().zip(&want).position(|(a, b)| a != b)
    );
    let h = Arc::try_unwrap(h).expect("the writer is done");
    fs.release(h);
    fs.check_invariants().expect("bookkeeping");
}

/// What a cold read was answered with stays cached although the reader closed the file before
/// the copies behind its reads ran (read-ahead of a closed file is dropped; these are not
/// read-ahead).
#[test]
fn a_file_read_cold_and_closed_at_once_keeps_what_was_read_cached() {
    let (b, d) = (
        tempfile::tempdir().expect("b"),
        tempfile::tempdir().expect("d"),
    );
    let fs = cache(b.path(), d.path());
    let data = bytes(8 * EXTENT, 7);
    std::fs::write(b.path().join("f"), &data).expect("backing file");
    fs.hold_read_ahead();
    let h = fs.open(Path::new("f")).expect("open");
    for i in 0..2 {
        let got = fs.read(&h, i * EXTENT, EXTENT as u32).expect("read");
        assert_eq!(
            got,
            data[(i * EXTENT) as usize..((i + 1) * EXTENT) as usize]
        );
    }
    fs.release(h);
    assert_eq!(fs.stats().copy_up_bytes, 0, "nothing copied while held");
    fs.release_read_ahead();
    copied(&fs, 2 * EXTENT);
    let h = fs.open(Path::new("f")).expect("open");
    let hits = fs.stats().read_hit_bytes;
    for i in 0..2 {
        fs.read(&h, i * EXTENT, EXTENT as u32).expect("read");
    }
    assert_eq!(
        fs.stats().read_hit_bytes - hits,
        2 * EXTENT,
        "both extents read before the close were cached"
    );
    fs.release(h);
    fs.check_invariants().expect("bookkeeping");
}

/// Reads of cached extents read the cache file off the file's lock; an eviction in the middle
/// of one (its extents dropped, the cache file's range made a hole) must not make the read
/// return the hole's zeros: the read sees the change and is done again. A reader and an
/// evictor race for a bounded number of rounds; every read must return the file's bytes.
#[test]
fn a_read_that_an_eviction_cut_under_returns_the_file_s_bytes() {
    let (b, d) = (
        tempfile::tempdir().expect("b"),
        tempfile::tempdir().expect("d"),
    );
    let fs = Arc::new(cache(b.path(), d.path()));
    let data = bytes(16 * EXTENT, 11);
    std::fs::write(b.path().join("f"), &data).expect("backing file");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let evictor = {
        let (fs, stop) = (fs.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && n < 100_000 {
                fs.evict(Path::new("f"), &Caller::root()).expect("evict");
                n += 1;
            }
            n
        })
    };
    let h = fs.open(Path::new("f")).expect("open");
    for round in 0..1000 {
        for i in 0..16 {
            let got = fs.read(&h, i * EXTENT, EXTENT as u32).expect("read");
            assert!(
                got == data[(i * EXTENT) as usize..((i + 1) * EXTENT) as usize],
                "round {round}, extent {i}: not the file's bytes"
            );
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let evictions = evictor.join().expect("evictor");
    assert!(evictions > 0, "the evictor ran");
    fs.release(h);
    fs.check_invariants().expect("bookkeeping");
}
