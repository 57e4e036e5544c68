//! Hard links through the core, without a mount: every name of one file is one cached file,
//! whether the link was made through the cache or behind its back; unlinking one name keeps the
//! file's data for the others; a rename over a link, or between two names of one file, does
//! what rename(2) does; `fsync`'ed data survives a crash under the name that is left.

use std::path::Path;
use std::sync::Arc;

use pliant_fs::{FsCache, FsConfig, FsyncMode, SystemClock};

const EXTENT: u64 = 4096;

fn config(backing: &Path, dir: &Path) -> FsConfig {
    let mut c = FsConfig::new(backing.into(), dir.into(), 64 * EXTENT);
    c.extent = EXTENT;
    c.writeback_threads = 1;
    // The files here are a few KiB of 256: far below the dirty watermarks, so what is not
    // written back by the test stays the cache's alone.
    c.fsync = FsyncMode::Cache;
    c
}

fn cache(backing: &Path, dir: &Path) -> FsCache {
    FsCache::new(config(backing, dir), Arc::new(SystemClock))
        .expect("mount")
        .0
}

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(13) ^ seed).collect()
}

fn dirs() -> (tempfile::TempDir, tempfile::TempDir) {
    (
        tempfile::tempdir().expect("backing"),
        tempfile::tempdir().expect("cache"),
    )
}

fn p(s: &str) -> &Path {
    Path::new(s)
}

#[test]
fn two_names_made_through_the_cache_are_one_cached_file() {
    let (b, d) = dirs();
    let fs = cache(b.path(), d.path());
    let h = fs.create(p("a"), 0o644, None).expect("create");
    fs.write(&h, 0, &bytes(10_000, 1)).expect("write");
    fs.link(p("a"), p("b")).expect("link");
    let copied = fs.stats().copy_up_bytes;
    let hb = fs.open(p("b")).expect("open b");
    assert_eq!(fs.read(&hb, 0, 20_000).expect("read b"), bytes(10_000, 1));
    assert_eq!(
        fs.stats().copy_up_bytes,
        copied,
        "read from the cache, not copied up again"
    );
    // Written through b, read through a's handle.
    fs.write(&hb, 5_000, &bytes(8_000, 2)).expect("write b");
    let mut want = bytes(10_000, 1);
    want.truncate(5_000);
    want.extend(bytes(8_000, 2));
    assert_eq!(fs.read(&h, 0, 20_000).expect("read a"), want);
    for name in ["a", "b"] {
        let a = fs.getattr(p(name)).expect("getattr");
        assert_eq!((a.size, a.nlink), (13_000, 2), "{name}");
    }
    assert_eq!(
        fs.getattr(p("a")).expect("a").ident,
        fs.getattr(p("b")).expect("b").ident
    );
    fs.check_invariants().expect("bookkeeping");
    // One name goes: the file and its unwritten data stay under the other.
    fs.release(h);
    fs.unlink(p("a")).expect("unlink a");
    assert_eq!(fs.getattr(p("b")).expect("b").nlink, 1);
    assert_eq!(fs.read(&hb, 0, 20_000).expect("read b"), want);
    fs.check_invariants().expect("bookkeeping");
    fs.release(hb);
    fs.shutdown(false, &mut |_| {}).expect("unmount");
    assert_eq!(std::fs::read(b.path().join("b")).expect("b"), want);
    assert!(!b.path().join("a").exists());
}

#[test]
fn a_link_made_behind_the_cache_is_found_by_the_files_identity() {
    let (b, d) = dirs();
    std::fs::write(b.path().join("x"), bytes(6_000, 3)).expect("x");
    let fs = cache(b.path(), d.path());
    let h = fs.open(p("x")).expect("open x");
    fs.write(&h, 0, &bytes(100, 4)).expect("write x");
    // Linked in the backing directory while the cache holds x's unwritten data.
    std::fs::hard_link(b.path().join("x"), b.path().join("y")).expect("ln");
    let mut want = bytes(6_000, 3);
    want[..100].copy_from_slice(&bytes(100, 4));
    let hy = fs.open(p("y")).expect("open y");
    assert_eq!(fs.read(&hy, 0, 10_000).expect("read y"), want, "y is x");
    assert_eq!(fs.getattr(p("y")).expect("y").nlink, 2);
    fs.release(hy);
    // The other name, never opened, is there too once looked at.
    std::fs::hard_link(b.path().join("x"), b.path().join("z")).expect("ln");
    assert_eq!(fs.getattr(p("z")).expect("z").size, 6_000);
    fs.check_invariants().expect("bookkeeping");
    fs.release(h);
    fs.shutdown(false, &mut |_| {}).expect("unmount");
    for name in ["x", "y", "z"] {
        assert_eq!(
            std::fs::read(b.path().join(name)).expect(name),
            want,
            "{name}"
        );
    }
}

#[test]
fn unlinking_the_last_name_the_cache_knows_writes_back_for_the_names_it_does_not() {
    let (b, d) = dirs();
    std::fs::write(b.path().join("x"), bytes(3_000, 5)).expect("x");
    let fs = cache(b.path(), d.path());
    let h = fs.open(p("x")).expect("open x");
    fs.write(&h, 1_000, &bytes(500, 6)).expect("write x");
    // A name the cache never hears of: only the backing directory has it.
    std::fs::hard_link(b.path().join("x"), b.path().join("hidden")).expect("ln");
    fs.unlink(p("x")).expect("unlink x");
    // Still open: written back by the workers in their time, or at the latest on the close.
    fs.release(h);
    let mut want = bytes(3_000, 5);
    want[1_000..1_500].copy_from_slice(&bytes(500, 6));
    assert_eq!(
        std::fs::read(b.path().join("hidden")).expect("hidden"),
        want,
        "the cache's data reached the file's other name instead of being dropped"
    );
    fs.check_invariants().expect("bookkeeping");
}

#[test]
fn a_rename_over_a_link_and_between_two_names_of_one_file_do_what_rename_does() {
    let (b, d) = dirs();
    let fs = cache(b.path(), d.path());
    let h = fs.create(p("a"), 0o644, None).expect("a");
    fs.write(&h, 0, &bytes(2_000, 7)).expect("write a");
    fs.link(p("a"), p("b")).expect("link");
    // Between two names of one file: nothing happens, both stay.
    fs.rename(p("a"), p("b"), 0).expect("rename a b");
    assert_eq!(fs.getattr(p("a")).expect("a").nlink, 2);
    assert_eq!(fs.getattr(p("b")).expect("b").size, 2_000);
    // Another file over one of the names: that name now leads to it, the other keeps the data.
    let hc = fs.create(p("c"), 0o644, None).expect("c");
    fs.write(&hc, 0, &bytes(700, 8)).expect("write c");
    fs.rename(p("c"), p("b"), 0).expect("rename c b");
    assert_eq!(fs.getattr(p("b")).expect("b").size, 700);
    assert_eq!(fs.getattr(p("a")).expect("a").nlink, 1);
    assert_eq!(fs.read(&h, 0, 5_000).expect("read a"), bytes(2_000, 7));
    // A link renamed away from its file: still that file.
    fs.link(p("a"), p("d")).expect("link again");
    fs.rename(p("d"), p("e"), 0).expect("rename d e");
    let he = fs.open(p("e")).expect("open e");
    assert_eq!(fs.read(&he, 0, 5_000).expect("read e"), bytes(2_000, 7));
    fs.check_invariants().expect("bookkeeping");
    for x in [h, hc, he] {
        fs.release(x);
    }
    fs.shutdown(false, &mut |_| {}).expect("unmount");
    assert_eq!(
        std::fs::read(b.path().join("a")).expect("a"),
        bytes(2_000, 7)
    );
    assert_eq!(
        std::fs::read(b.path().join("e")).expect("e"),
        bytes(2_000, 7)
    );
    assert_eq!(std::fs::read(b.path().join("b")).expect("b"), bytes(700, 8));
    assert!(!b.path().join("c").exists() && !b.path().join("d").exists());
}

#[test]
fn fsynced_data_of_a_linked_file_survives_a_crash_under_the_name_left() {
    let (b, d) = dirs();
    let fs = cache(b.path(), d.path());
    let h = fs.create(p("a"), 0o644, None).expect("a");
    fs.write(&h, 0, &bytes(9_000, 9)).expect("write");
    fs.link(p("a"), p("b")).expect("link");
    fs.fsync(&h).expect("fsync");
    // The journal names a; a goes, so the journal must name b from now on.
    fs.unlink(p("a")).expect("unlink a");
    fs.crash();
    let (fs, recovery) = FsCache::new(config(b.path(), d.path()), Arc::new(SystemClock))
        .expect("remount after the crash");
    assert!(recovery.bytes > 0, "{recovery:?}");
    assert_eq!(
        std::fs::read(b.path().join("b")).expect("b"),
        bytes(9_000, 9)
    );
    assert!(
        !b.path().join("a").exists(),
        "a name that was removed is not brought back"
    );
    fs.shutdown(false, &mut |_| {}).expect("unmount");
}

/// Found by an audit: the backing unlink ran before the journal named the file's other name,
/// so a crash in between brought the removed name back with the data and left the other name
/// without it. The journal now names the other first; here the crash comes after the unlink.
#[test]
fn a_crash_right_after_unlinking_the_journaled_name_keeps_the_data_under_the_other() {
    let (b, d) = dirs();
    let fs = cache(b.path(), d.path());
    let h = fs.create(p("a"), 0o644, None).expect("a");
    fs.write(&h, 0, b"ACKNOWLEDGED").expect("write");
    fs.fsync(&h).expect("fsync");
    fs.link(p("a"), p("b")).expect("link");
    fs.unlink(p("a")).expect("unlink");
    fs.crash();
    let (fs, _) = FsCache::new(config(b.path(), d.path()), Arc::new(SystemClock)).expect("remount");
    assert!(!b.path().join("a").exists(), "the removed name came back");
    assert_eq!(
        std::fs::read(b.path().join("b")).expect("b"),
        b"ACKNOWLEDGED"
    );
    fs.shutdown(false, &mut |_| {}).expect("unmount");
}

/// Found by an audit: a name found by the file's identity skipped the check every open makes
/// against the backing directory, and served what the cache held after the file was
/// rewritten behind it.
#[test]
fn a_name_found_by_identity_is_checked_against_the_backing_file_as_any_open() {
    let (b, d) = dirs();
    std::fs::write(b.path().join("a"), b"old contents").expect("a");
    let fs = cache(b.path(), d.path());
    let h = fs.open(p("a")).expect("open a");
    assert_eq!(fs.read(&h, 0, 100).expect("read"), b"old contents");
    fs.release(h);
    std::fs::hard_link(b.path().join("a"), b.path().join("b")).expect("ln");
    // Rewritten in place through the new name, with a later mtime and another size.
    let t = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
    std::fs::write(b.path().join("b"), b"NEW CONTENTS, longer").expect("rewrite");
    std::fs::File::options()
        .write(true)
        .open(b.path().join("b"))
        .and_then(|f| f.set_modified(t))
        .expect("mtime");
    let hb = fs.open(p("b")).expect("open b");
    assert_eq!(
        fs.read(&hb, 0, 100).expect("read b"),
        b"NEW CONTENTS, longer"
    );
    fs.release(hb);
    fs.check_invariants().expect("bookkeeping");
}

/// Found by an audit: two names of one file opened at the same moment, neither cached yet,
/// could each make an entry, so a write through one was not seen through the other.
#[test]
fn two_names_opened_at_once_are_one_entry() {
    let (b, d) = dirs();
    let fs = Arc::new(cache(b.path(), d.path()));
    for n in 0..100 {
        let (a, l) = (format!("a{n}"), format!("b{n}"));
        std::fs::write(b.path().join(&a), vec![b'0'; 100]).expect("a");
        std::fs::hard_link(b.path().join(&a), b.path().join(&l)).expect("ln");
        let start = Arc::new(std::sync::Barrier::new(2));
        let open = |name: String| {
            let (fs, start) = (fs.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                fs.open(Path::new(&name)).expect("open")
            })
        };
        let (ta, tb) = (open(a.clone()), open(l.clone()));
        let (ha, hb) = (ta.join().expect("a"), tb.join().expect("b"));
        fs.write(&ha, 0, b"AAAA").expect("write a");
        assert_eq!(fs.read(&hb, 0, 4).expect("read b"), b"AAAA", "round {n}");
        fs.release(ha);
        fs.release(hb);
    }
    fs.check_invariants().expect("bookkeeping");
}

/// Found by an audit: a file with a name the cache never heard of, written through a handle
/// still open after its known name was unlinked: the writes never reached the other name, and
/// a flush waited for them for ever.
#[test]
fn writes_after_the_known_name_goes_reach_the_names_the_cache_does_not_know() {
    let (b, d) = dirs();
    std::fs::write(b.path().join("x"), b"0000000000").expect("x");
    std::fs::hard_link(b.path().join("x"), b.path().join("y")).expect("ln");
    let fs = Arc::new(cache(b.path(), d.path()));
    let h = fs.open(p("x")).expect("open x");
    fs.write(&h, 0, b"11").expect("write");
    fs.unlink(p("x")).expect("unlink x");
    fs.write(&h, 2, b"22").expect("write after the unlink");
    let flusher = fs.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        flusher.flush(&mut |_| {});
        let _ = tx.send(());
    });
    rx.recv_timeout(std::time::Duration::from_secs(10))
        .expect("the flush ended");
    assert_eq!(std::fs::read(b.path().join("y")).expect("y"), b"1122000000");
    fs.write(&h, 4, b"33").expect("write");
    fs.fsync(&h).expect("fsync");
    assert_eq!(
        std::fs::read(b.path().join("y")).expect("y"),
        b"1122330000",
        "fsync of a file with no name the journal could give writes it back"
    );
    fs.write(&h, 6, b"44").expect("write");
    fs.release(h);
    fs.check_invariants().expect("bookkeeping");
    assert_eq!(std::fs::read(b.path().join("y")).expect("y"), b"1122334400");
}

/// Found by an audit (older than hard links): a file unlinked while open, its only name, then
/// written: the writes stayed dirty with nowhere to go, and a flush waited for ever.
#[test]
fn writes_to_a_file_unlinked_while_open_do_not_hold_up_a_flush() {
    let (b, d) = dirs();
    let fs = Arc::new(cache(b.path(), d.path()));
    let h = fs.create(p("x"), 0o644, None).expect("x");
    fs.unlink(p("x")).expect("unlink");
    fs.write(&h, 0, b"zz").expect("write");
    assert_eq!(
        fs.read(&h, 0, 10).expect("read"),
        b"zz",
        "still the file's data"
    );
    let flusher = fs.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        flusher.flush(&mut |_| {});
        let _ = tx.send(());
    });
    rx.recv_timeout(std::time::Duration::from_secs(10))
        .expect("the flush ended");
    fs.release(h);
    fs.check_invariants().expect("bookkeeping");
}
