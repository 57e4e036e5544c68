//! The core's bookkeeping of files the kernel writes in passthrough, without a mount: the
//! test writes the cache file [`FsCache::passthrough_write_file`] returns, as the kernel would.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use pliant_fs::{Caller, FsCache, FsConfig, FsyncMode, SystemClock};

const EXTENT: u64 = 4096;

fn config(backing: &Path, cache: &Path) -> FsConfig {
    let mut c = FsConfig::new(backing.into(), cache.into(), 64 * EXTENT);
    c.extent = EXTENT;
    c.writeback_threads = 2;
    c.max_file_size = 16 * EXTENT;
    c.write_window_multiplier = 1000;
    c.fsync = FsyncMode::Cache;
    c
}

fn mount(c: FsConfig) -> FsCache {
    FsCache::new(c, Arc::new(SystemClock)).expect("mount").0
}

fn bytes(len: u64, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_add((i % 251) as u8))
        .collect()
}

/// A new file written by the kernel: the whole of it dirty, its size the cache file's, and
/// neither cleaned by write-back while the writer is open; written back in full once closed.
#[test]
fn a_passthrough_writer_s_file_is_dirty_as_a_whole_and_not_cleaned_while_open() {
    let (b, c) = (
        tempfile::tempdir().expect("b"),
        tempfile::tempdir().expect("c"),
    );
    let fs = mount(config(b.path(), c.path()));
    let h = fs.create(Path::new("f"), 0o644, None).expect("create");
    let file = fs
        .passthrough_write_file(&h)
        .expect("passthrough")
        .expect("a new file may be written in passthrough");
    let first = bytes(2 * EXTENT + 100, 1);
    file.write_all_at(&first, 0).expect("kernel write");
    let a = fs.getattr_open(&h).expect("getattr");
    assert_eq!(a.size, first.len() as u64, "the size is the cache file's");
    assert_eq!(
        fs.stats().dirty_bytes,
        first.len() as u64,
        "dirty as a whole"
    );
    fs.check_invariants().expect("bookkeeping");

    // A write-back while open copies the file out but leaves it dirty: the kernel may write on.
    fs.writeback(Path::new("f"), &Caller::root())
        .expect("writeback");
    assert_eq!(std::fs::read(b.path().join("f")).expect("backing"), first);
    assert_eq!(
        fs.stats().dirty_bytes,
        first.len() as u64,
        "written back, but still dirty while a passthrough writer is open"
    );
    let second = bytes(EXTENT, 7);
    file.write_all_at(&second, EXTENT).expect("kernel write");
    fs.check_invariants().expect("bookkeeping");

    fs.end_passthrough_write(&h).expect("close");
    fs.release(h);
    fs.check_invariants().expect("bookkeeping after the close");
    assert_eq!(
        fs.stats().written_bytes,
        first.len() as u64,
        "what the file grew (the rewrite inside it is not seen)"
    );
    fs.shutdown(false, &mut |_| {}).expect("unmount");
    let mut want = first;
    want[EXTENT as usize..2 * EXTENT as usize].copy_from_slice(&second);
    assert_eq!(std::fs::read(b.path().join("f")).expect("backing"), want);
}

/// A crash while a passthrough writer is open (its file fsync'ed): the next mount writes the
/// whole cache file back, the new bytes and the cached old ones, at the cache file's length.
#[test]
fn a_crash_with_a_passthrough_writer_open_writes_the_whole_cache_file_back() {
    let (b, c) = (
        tempfile::tempdir().expect("b"),
        tempfile::tempdir().expect("c"),
    );
    let old = bytes(3 * EXTENT, 3);
    std::fs::write(b.path().join("f"), &old).expect("backing file");
    let fs = mount(config(b.path(), c.path()));
    let h = fs.open(Path::new("f")).expect("open");
    assert!(
        fs.passthrough_write_file(&h)
            .expect("passthrough")
            .is_none(),
        "not cached: through the daemon"
    );
    fs.preload(Path::new("f"), &Caller::root())
        .expect("preload");
    let file = fs
        .passthrough_write_file(&h)
        .expect("passthrough")
        .expect("cached whole");
    let new = bytes(EXTENT + 10, 9);
    file.write_all_at(&new, 2 * EXTENT + 5)
        .expect("kernel write");
    fs.fsync(&h).expect("fsync");
    assert_eq!(
        std::fs::read(b.path().join("f")).expect("backing"),
        old,
        "nothing written back before the crash"
    );
    // Past --max-file-size, never acknowledged (not fsync'ed): not written back.
    let max = fs.config().max_file_size;
    file.write_all_at(b"beyond", max).expect("kernel write");
    fs.crash();
    let (fs, rec) = FsCache::new(config(b.path(), c.path()), Arc::new(SystemClock)).expect("mount");
    assert_eq!(rec.files, 1, "{rec:?}");
    let mut want = old;
    want.truncate(2 * EXTENT as usize + 5);
    want.extend_from_slice(&new);
    let got = std::fs::read(b.path().join("f")).expect("backing");
    assert_eq!(got.len() as u64, max, "cut at the limit");
    assert_eq!(&got[..want.len()], &want[..]);
    assert!(got[want.len()..].iter().all(|&x| x == 0));
    fs.shutdown(false, &mut |_| {}).expect("unmount");
}

/// Past `--max-file-size` through passthrough: the bytes beyond are cut off and `fsync` (and
/// `close`, the flush) says EFBIG; a file at the limit is not opened in passthrough (its
/// writes go through the daemon, which refuses the one that crosses).
#[test]
fn past_max_file_size_the_kernel_s_bytes_are_cut_and_fsync_or_close_says_efbig() {
    let (b, c) = (
        tempfile::tempdir().expect("b"),
        tempfile::tempdir().expect("c"),
    );
    let fs = mount(config(b.path(), c.path()));
    let max = fs.config().max_file_size;
    let h = fs.create(Path::new("big"), 0o644, None).expect("create");
    let file = fs
        .passthrough_write_file(&h)
        .expect("passthrough")
        .expect("new file");
    file.write_all_at(&bytes(EXTENT, 1), max - 10)
        .expect("kernel write past the limit");
    let e = fs.fsync(&h).expect_err("past the limit");
    assert_eq!(e.raw_os_error(), Some(nix::libc::EFBIG), "{e}");
    assert_eq!(fs.getattr_open(&h).expect("getattr").size, max);
    fs.fsync(&h).expect("said once");
    file.write_all_at(b"x", max)
        .expect("kernel write past the limit");
    let e = fs.flush_handle(&h).expect_err("at close");
    assert_eq!(e.raw_os_error(), Some(nix::libc::EFBIG), "{e}");
    fs.end_passthrough_write(&h).expect("close");
    fs.release(h);
    assert_eq!(fs.stats().efbig_writes, 2);

    // At the limit: through the daemon, which refuses the write past it.
    let h = fs.open(Path::new("big")).expect("open");
    assert!(
        fs.passthrough_write_file(&h)
            .expect("passthrough")
            .is_none()
    );
    let e = fs.write(&h, max, b"y").expect_err("EFBIG");
    assert_eq!(e.raw_os_error(), Some(nix::libc::EFBIG), "{e}");
    fs.release(h);
    fs.shutdown(false, &mut |_| {}).expect("unmount");
    let got = std::fs::read(b.path().join("big")).expect("backing");
    assert_eq!(got.len() as u64, max);
    assert_eq!(&got[(max - 10) as usize..], &bytes(EXTENT, 1)[..10]);
}

/// The write window is charged what a passthrough-written file grew, when the daemon looks:
/// past the window the kernel's bytes are cut off and `fsync` says EDQUOT; a file opened
/// with less than an extent of room left goes through the daemon, where the write that
/// crosses fails.
#[test]
fn past_the_write_window_the_kernel_s_bytes_are_cut_and_fsync_says_edquot() {
    let (b, c) = (
        tempfile::tempdir().expect("b"),
        tempfile::tempdir().expect("c"),
    );
    let mut cfg = config(b.path(), c.path());
    cfg.capacity = 10 * EXTENT;
    cfg.write_window_multiplier = 1;
    let fs = mount(cfg);
    let h = fs.create(Path::new("a"), 0o644, None).expect("create");
    let file = fs.passthrough_write_file(&h).expect("pt").expect("room");
    file.write_all_at(&bytes(4 * EXTENT, 5), 0)
        .expect("kernel write");
    fs.fsync(&h).expect("within the window");
    // Rewritten in place (not charged: the daemon does not see it), and grown past the 10 extents of the window.
    file.write_all_at(&bytes(12 * EXTENT, 6), 0)
        .expect("kernel write");
    let e = fs.fsync(&h).expect_err("past the window");
    assert_eq!(e.raw_os_error(), Some(nix::libc::EDQUOT), "{e}");
    assert_eq!(
        fs.getattr_open(&h).expect("getattr").size,
        10 * EXTENT,
        "cut where the window ran out"
    );
    fs.fsync(&h).expect("said once");
    file.write_all_at(b"more", 10 * EXTENT)
        .expect("kernel write");
    let e = fs.flush_handle(&h).expect_err("past the window");
    assert_eq!(e.raw_os_error(), Some(nix::libc::EDQUOT), "{e}");
    assert_eq!(fs.getattr_open(&h).expect("getattr").size, 10 * EXTENT);
    fs.end_passthrough_write(&h).expect("close");
    fs.release(h);
    let h = fs.create(Path::new("b"), 0o644, None).expect("create");
    assert!(
        fs.passthrough_write_file(&h).expect("pt").is_none(),
        "no room left: through the daemon"
    );
    let e = fs.write(&h, 0, b"z").expect_err("EDQUOT");
    assert_eq!(e.raw_os_error(), Some(nix::libc::EDQUOT), "{e}");
    fs.release(h);
    fs.shutdown(false, &mut |_| {}).expect("unmount");
    let want = bytes(12 * EXTENT, 6)[..10 * EXTENT as usize].to_vec();
    assert_eq!(std::fs::read(b.path().join("a")).expect("a"), want);
}

/// Truncation and reads through the daemon while the kernel writes: the daemon reads the
/// cache file at the size the kernel made, and a truncation cuts what the kernel wrote.
#[test]
fn daemon_reads_and_truncation_see_the_kernel_s_writes() {
    let (b, c) = (
        tempfile::tempdir().expect("b"),
        tempfile::tempdir().expect("c"),
    );
    let fs = mount(config(b.path(), c.path()));
    let h = fs.create(Path::new("f"), 0o644, None).expect("create");
    let file = fs.passthrough_write_file(&h).expect("pt").expect("new");
    let data = bytes(3 * EXTENT, 4);
    file.write_all_at(&data, 0).expect("kernel write");
    let r = fs.open(Path::new("f")).expect("reader");
    assert_eq!(fs.read(&r, 0, 3 * EXTENT as u32).expect("read"), data);
    fs.truncate(Path::new("f"), EXTENT + 1).expect("truncate");
    assert_eq!(
        fs.getattr(Path::new("f")).expect("getattr").size,
        EXTENT + 1
    );
    file.write_all_at(b"end", 2 * EXTENT).expect("kernel write");
    fs.check_invariants().expect("bookkeeping");
    let mut want = data[..EXTENT as usize + 1].to_vec();
    want.resize(2 * EXTENT as usize, 0);
    want.extend_from_slice(b"end");
    assert_eq!(fs.read(&r, 0, 4 * EXTENT as u32).expect("read"), want);
    fs.release(r);
    fs.end_passthrough_write(&h).expect("close");
    fs.release(h);
    fs.shutdown(false, &mut |_| {}).expect("unmount");
    assert_eq!(std::fs::read(b.path().join("f")).expect("backing"), want);
}

/// The kernel asks for `security.capability` before each `write()` it passes through: the core
/// then starts the disk's write-out of the extents the file grew by since it last did, once
/// each, and of nothing for a file not written by passthrough or for a rewrite inside it.
#[test]
fn the_write_out_of_what_passthrough_writers_filled_starts_before_their_next_write() {
    let (b, c) = (
        tempfile::tempdir().expect("b"),
        tempfile::tempdir().expect("c"),
    );
    let fs = mount(config(b.path(), c.path()));
    std::fs::write(b.path().join("other"), bytes(3 * EXTENT, 9)).expect("seed");
    assert_eq!(
        fs.passthrough_write_coming(Path::new("other")),
        0,
        "not open"
    );
    assert_eq!(fs.passthrough_write_coming(Path::new("absent")), 0);
    let h = fs.create(Path::new("f"), 0o644, None).expect("create");
    let file = fs.passthrough_write_file(&h).expect("pt").expect("room");
    assert_eq!(
        fs.passthrough_write_coming(Path::new("f")),
        0,
        "nothing yet"
    );
    file.write_all_at(&bytes(2 * EXTENT + 100, 1), 0)
        .expect("kernel write");
    assert_eq!(
        fs.passthrough_write_coming(Path::new("f")),
        2 * EXTENT,
        "the two filled extents, not the third begun"
    );
    assert_eq!(fs.passthrough_write_coming(Path::new("f")), 0, "once");
    file.write_all_at(&bytes(100, 2), 0)
        .expect("a rewrite inside");
    assert_eq!(fs.passthrough_write_coming(Path::new("f")), 0);
    file.write_all_at(&bytes(3 * EXTENT, 3), 2 * EXTENT)
        .expect("kernel write");
    assert_eq!(fs.passthrough_write_coming(Path::new("f")), 3 * EXTENT);
    // Cut below what was written out: written out again from the cut as it fills anew.
    fs.truncate_open(&h, EXTENT + 10).expect("truncate");
    file.write_all_at(&bytes(2 * EXTENT, 4), EXTENT)
        .expect("kernel write");
    assert_eq!(fs.passthrough_write_coming(Path::new("f")), 2 * EXTENT);
    fs.end_passthrough_write(&h).expect("close");
    assert_eq!(
        fs.passthrough_write_coming(Path::new("f")),
        0,
        "no passthrough writer left"
    );
    fs.check_invariants().expect("bookkeeping");
}
