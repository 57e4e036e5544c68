//! What another user can make the cache do, tested on the core (no mount needed: the daemon is
//! the core, run as root). The backing directory is a shared tree other users write to
//! directly, so a directory on the way to a cached file can become a symbolic link at any time;
//! the cache must then refuse, never follow it out of the tree. And the hints reach only the
//! files the caller may read or write.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pliant_fs::{Caller, FsCache, FsConfig, SystemClock};

const EXTENT: u64 = 4096;

struct Setup {
    _top: tempfile::TempDir,
    backing: PathBuf,
    cache: PathBuf,
    outside: PathBuf,
}

/// backing/d/f ("inside") and, beside the backing directory, outside/f ("outside", 0644).
fn setup() -> Setup {
    let top = tempfile::tempdir().expect("tempdir");
    let backing = top.path().join("backing");
    let outside = top.path().join("outside");
    fs::create_dir_all(backing.join("d")).expect("mkdir");
    fs::create_dir(&outside).expect("mkdir");
    fs::write(backing.join("d/f"), b"inside").expect("write");
    fs::write(outside.join("f"), b"outside").expect("write");
    fs::set_permissions(outside.join("f"), fs::Permissions::from_mode(0o644)).expect("chmod");
    Setup {
        cache: top.path().join("cache"),
        _top: top,
        backing,
        outside,
    }
}

fn mount(s: &Setup) -> FsCache {
    let mut c = FsConfig::new(s.backing.clone(), s.cache.clone(), 64 * EXTENT);
    c.extent = EXTENT;
    FsCache::new(c, Arc::new(SystemClock)).expect("mount").0
}

/// What another user does in the backing directory: `d` moved away, a link to `outside` in
/// its place.
fn swap(s: &Setup) {
    fs::rename(s.backing.join("d"), s.backing.join("d.old")).expect("rename");
    std::os::unix::fs::symlink(&s.outside, s.backing.join("d")).expect("symlink");
}

fn outside_untouched(s: &Setup) {
    let f = s.outside.join("f");
    assert_eq!(
        fs::read(&f).expect("read"),
        b"outside",
        "outside/f was written"
    );
    let m = fs::metadata(&f).expect("stat");
    assert_eq!(m.mode() & 0o7777, 0o644, "outside/f's mode changed");
    assert_eq!(fs::read_dir(&s.outside).expect("list").count(), 1);
}

#[test]
fn a_directory_swapped_for_a_symlink_does_not_lead_open_chmod_or_truncate_outside() {
    let s = setup();
    let fs_ = mount(&s);
    swap(&s);
    let f = Path::new("d/f");
    assert!(fs_.open(f).is_err(), "open followed the link");
    assert!(fs_.chmod(f, 0o777).is_err(), "chmod followed the link");
    assert!(fs_.truncate(f, 0).is_err(), "truncate followed the link");
    assert!(fs_.getattr(f).is_err(), "stat followed the link");
    assert!(fs_.create(Path::new("d/new"), 0o644, None).is_err());
    assert!(fs_.mkdir(Path::new("d/sub"), 0o755, None).is_err());
    assert!(fs_.unlink(f).is_err(), "unlink followed the link");
    assert!(fs_.rename(f, Path::new("moved"), 0).is_err());
    assert!(
        fs_.setxattr(f, "user.x".as_ref(), b"1").is_err(),
        "setxattr followed the link"
    );
    assert!(fs_.preload(Path::new("d"), &Caller::root()).is_ok());
    assert_eq!(fs_.stats().used_bytes, 0, "preload read through the link");
    // The link itself is still the tree's to show and remove.
    assert!(fs_.getattr(Path::new("d")).expect("lstat").mode & 0o170000 == 0o120000);
    assert_eq!(fs_.readlink(Path::new("d")).expect("readlink"), s.outside);
    drop(fs_);
    outside_untouched(&s);
    assert_eq!(
        fs::read(s.backing.join("d.old/f")).expect("read"),
        b"inside"
    );
}

#[test]
fn a_directory_swapped_for_a_symlink_does_not_lead_write_back_outside() {
    let s = setup();
    let fs_ = mount(&s);
    // Dirty data of d/f, written back after the swap, from the open file: into the file the
    // user opened (now d.old/f), not outside.
    let h = fs_.open(Path::new("d/f")).expect("open");
    fs_.write(&h, 0, b"WRITTEN").expect("write");
    fs_.release(h);
    swap(&s);
    fs_.flush(&mut |_| {});
    drop(fs_);
    outside_untouched(&s);
    assert_eq!(
        fs::read(s.backing.join("d.old/f")).expect("read"),
        b"WRITTEN"
    );
}

#[test]
fn a_directory_swapped_for_a_symlink_before_recovery_is_refused_not_followed() {
    let s = setup();
    let fs_ = mount(&s);
    let h = fs_.open(Path::new("d/f")).expect("open");
    fs_.write(&h, 0, b"FSYNCED").expect("write");
    fs_.fsync(&h).expect("fsync");
    fs_.crash();
    swap(&s);
    // The next mount must write the journaled extents back to d/f: d is now a link, so it
    // refuses (naming the path), and the journal keeps the data for a mount after the repair.
    let mut c = FsConfig::new(s.backing.clone(), s.cache.clone(), 64 * EXTENT);
    c.extent = EXTENT;
    let e = FsCache::new(c.clone(), Arc::new(SystemClock)).expect_err("recovery through a link");
    assert!(e.to_string().contains("d/f"), "{e}");
    outside_untouched(&s);
    fs::remove_file(s.backing.join("d")).expect("rm link");
    fs::rename(s.backing.join("d.old"), s.backing.join("d")).expect("repair");
    let (fs_, rec) = FsCache::new(c, Arc::new(SystemClock)).expect("mount after the repair");
    assert_eq!(rec.files, 1);
    drop(fs_);
    assert_eq!(fs::read(s.backing.join("d/f")).expect("read"), b"FSYNCED");
}

/// A file of `uid`'s with `mode`, under backing/shared (0755, root's).
fn owned(s: &Setup, name: &str, uid: u32, mode: u32) -> PathBuf {
    let dir = s.backing.join("shared");
    fs::create_dir_all(&dir).expect("mkdir");
    let p = dir.join(name);
    fs::write(&p, vec![7u8; 2 * EXTENT as usize]).expect("write");
    if nix::unistd::geteuid().is_root() {
        std::os::unix::fs::chown(&p, Some(uid), Some(uid)).expect("chown");
    }
    fs::set_permissions(&p, fs::Permissions::from_mode(mode)).expect("chmod");
    p
}

#[test]
fn hints_reach_only_the_files_the_caller_may_read_or_write() {
    let s = setup();
    let me = nix::unistd::geteuid().as_raw();
    // Run as root the files are another user's; run as a user they are that user's, and the
    // caller is someone else: either way `bob` owns nothing.
    let alice = if me == 0 { 60_001 } else { me };
    let bob = Caller {
        uid: 60_002,
        gid: 60_002,
        groups: vec![],
    };
    owned(&s, "readable", alice, 0o644);
    owned(&s, "private", alice, 0o600);
    let fs_ = mount(&s);
    let r = fs_.preload(Path::new("shared"), &bob).expect("preload");
    assert_eq!((r.files, r.skipped), (1, 1), "{r:?}");
    // Dirty data of alice's (she may write it), then bob asks to evict and write it back.
    let h = fs_.open(Path::new("shared/readable")).expect("open");
    fs_.write(&h, 0, b"alice").expect("write");
    fs_.release(h);
    let dirty = fs_.stats().dirty_bytes;
    assert!(dirty > 0);
    let r = fs_.evict(Path::new("shared"), &bob).expect("evict");
    assert_eq!((r.files, r.skipped), (0, 2), "{r:?}");
    let e = fs_
        .writeback(Path::new("shared/readable"), &bob)
        .expect_err("bob may not write it");
    assert_eq!(e.raw_os_error(), Some(nix::libc::EACCES), "{e}");
    assert_eq!(
        fs_.stats().dirty_bytes,
        dirty,
        "bob's hints moved alice's data"
    );
    let owner = Caller {
        uid: alice,
        gid: alice,
        groups: vec![],
    };
    let r = fs_
        .writeback(Path::new("shared"), &owner)
        .expect("writeback");
    assert_eq!((r.files, r.skipped), (1, 0), "{r:?}");
    assert_eq!(fs_.stats().dirty_bytes, 0);
    // A directory named directly that bob may not list is refused, as a file is.
    fs::create_dir(s.backing.join("shared/closed")).expect("mkdir");
    fs::set_permissions(
        s.backing.join("shared/closed"),
        fs::Permissions::from_mode(0o700),
    )
    .expect("chmod");
    if me == 0 {
        std::os::unix::fs::chown(s.backing.join("shared/closed"), Some(alice), Some(alice))
            .expect("chown");
    }
    let e = fs_
        .preload(Path::new("shared/closed"), &bob)
        .expect_err("bob may not list it");
    assert_eq!(e.raw_os_error(), Some(nix::libc::EACCES), "{e}");
}

/// The kernel checks only the directory when it asks the daemon to create a name it did not
/// find; a file another user made there since must not be opened or handed to the creator
/// (the FUSE adapter then checks the caller against it and opens it as it is).
#[test]
fn create_never_opens_or_chowns_a_file_that_is_already_there() {
    let s = setup();
    let me = nix::unistd::geteuid().as_raw();
    let alice = if me == 0 { 60_001 } else { me };
    let theirs = owned(&s, "theirs", alice, 0o600);
    let fs_ = mount(&s);
    let e = fs_
        .create(Path::new("shared/theirs"), 0o644, Some((60_002, 60_002)))
        .expect_err("created over an existing file");
    assert_eq!(e.raw_os_error(), Some(nix::libc::EEXIST), "{e}");
    let m = fs::metadata(&theirs).expect("stat");
    assert_eq!(
        (m.uid(), m.mode() & 0o7777),
        (alice, 0o600),
        "the file changed hands"
    );
    assert_eq!(fs::read(&theirs).expect("read").len(), 2 * EXTENT as usize);
}

/// The backing directory is opened first and its path taken from what was opened: a path
/// resolved first and opened after could be switched in between (a link put where the directory
/// was, by whoever owns its parent), and the checks of the directories above it would look at
/// others than the ones served. Reached through a link, the cache names (and checks the parents
/// of) the directory the link led to.
#[test]
fn a_backing_directory_reached_through_a_link_is_the_one_it_led_to() {
    let s = setup();
    let link = s.backing.parent().expect("parent").join("link");
    std::os::unix::fs::symlink(&s.backing, &link).expect("symlink");
    let mut c = FsConfig::new(link.clone(), s.cache.clone(), 64 * EXTENT);
    c.extent = EXTENT;
    let (fs, _) = FsCache::new(c, Arc::new(SystemClock)).expect("mount");
    assert_eq!(
        fs.config().backing,
        fs::canonicalize(&s.backing).expect("canonical"),
        "the directory served, not the link"
    );
    let h = fs.open(Path::new("d/f")).expect("open");
    assert_eq!(fs.read(&h, 0, 16).expect("read"), b"inside");
    fs.release(h);
    let plain = s.backing.parent().expect("parent").join("plain");
    fs::write(&plain, b"x").expect("write");
    let mut c = FsConfig::new(plain, s.cache.join("2"), 64 * EXTENT);
    c.extent = EXTENT;
    let Err(err) = FsCache::new(c, Arc::new(SystemClock)) else {
        panic!("a file is no backing directory");
    };
    assert!(err.to_string().contains("not a directory"), "{err}");
}
