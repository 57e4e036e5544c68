//! FIFOs, sockets and device nodes made through the core land in the backing directory, as the
//! type they were asked for, with the caller's permissions and owner; devices are root's alone;
//! none of them is ever opened as a cached file. Without a mount (the mount test is
//! `fifos_and_sockets_work_through_the_mount` in crates/pliant/tests/fs_cli.rs).

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

use pliant_fs::core::libc_mode::{S_IFBLK, S_IFCHR, S_IFIFO, S_IFMT, S_IFREG, S_IFSOCK};
use pliant_fs::{Caller, FsCache, FsConfig, SystemClock};

fn cache(backing: &Path, dir: &Path) -> FsCache {
    let mut c = FsConfig::new(backing.into(), dir.into(), 1 << 20);
    c.extent = 4096;
    c.writeback_threads = 1;
    FsCache::new(c, Arc::new(SystemClock)).expect("mount").0
}

fn user() -> Caller {
    Caller {
        uid: 54_321,
        gid: 54_321,
        groups: Vec::new(),
    }
}

#[test]
fn fifos_and_sockets_are_made_in_the_backing_directory_and_listed_as_such() {
    let (b, d) = (
        tempfile::tempdir().expect("b"),
        tempfile::tempdir().expect("d"),
    );
    let fs = cache(b.path(), d.path());
    fs.mknod(Path::new("pipe"), S_IFIFO | 0o640, 0, &user(), None)
        .expect("mkfifo");
    fs.mknod(Path::new("sock"), S_IFSOCK | 0o600, 0, &user(), None)
        .expect("socket");
    let pipe = std::fs::symlink_metadata(b.path().join("pipe")).expect("pipe");
    assert!(pipe.file_type().is_fifo());
    assert_eq!(pipe.permissions().mode() & 0o7777, 0o640);
    assert!(
        std::fs::symlink_metadata(b.path().join("sock"))
            .expect("sock")
            .file_type()
            .is_socket()
    );
    let a = fs.getattr(Path::new("pipe")).expect("getattr");
    assert_eq!(a.mode & S_IFMT, S_IFIFO);
    let mut listed: Vec<(String, u32)> = fs
        .readdir(Path::new(""))
        .expect("readdir")
        .into_iter()
        .map(|e| (e.name.to_string_lossy().into_owned(), e.kind))
        .collect();
    listed.sort();
    assert_eq!(
        listed,
        [
            ("pipe".to_string(), S_IFIFO),
            ("sock".to_string(), S_IFSOCK)
        ]
    );
    // A hint walks past them: they have no data to cache.
    let r = fs.preload(Path::new(""), &Caller::root()).expect("preload");
    assert_eq!((r.files, r.bytes), (0, 0));
    fs.unlink(Path::new("pipe")).expect("unlink");
    assert!(!b.path().join("pipe").exists());
    // Made for another user when the mount gives new files their creator (as root).
    if nix::unistd::geteuid().is_root() {
        fs.mknod(
            Path::new("theirs"),
            S_IFIFO | 0o600,
            0,
            &user(),
            Some((54_321, 54_321)),
        )
        .expect("mkfifo for a user");
        let m = std::fs::symlink_metadata(b.path().join("theirs")).expect("theirs");
        assert_eq!((m.uid(), m.gid()), (54_321, 54_321));
    }
}

#[test]
fn a_device_node_is_roots_alone_and_a_regular_file_is_not_mknods() {
    let (b, d) = (
        tempfile::tempdir().expect("b"),
        tempfile::tempdir().expect("d"),
    );
    let fs = cache(b.path(), d.path());
    // /dev/null's numbers: 1, 3.
    let null = nix::sys::stat::makedev(1, 3);
    for kind in [S_IFCHR, S_IFBLK] {
        let e = fs
            .mknod(Path::new("dev"), kind | 0o666, null, &user(), None)
            .expect_err("a user's device");
        assert_eq!(e.raw_os_error(), Some(nix::libc::EPERM), "{kind:o}");
        assert!(!b.path().join("dev").exists());
    }
    let e = fs
        .mknod(Path::new("file"), S_IFREG | 0o644, 0, &user(), None)
        .expect_err("a regular file");
    assert_eq!(e.raw_os_error(), Some(nix::libc::EINVAL));
    // Root may, where the daemon may (it needs CAP_MKNOD; the kernel says no otherwise).
    match fs.mknod(
        Path::new("null"),
        S_IFCHR | 0o666,
        null,
        &Caller::root(),
        None,
    ) {
        Ok(()) => {
            let m = std::fs::symlink_metadata(b.path().join("null")).expect("null");
            assert!(m.file_type().is_char_device());
            assert_eq!(m.rdev(), null);
        }
        Err(e) => assert_eq!(
            e.raw_os_error(),
            Some(nix::libc::EPERM),
            "only a daemon without CAP_MKNOD may fail: {e}"
        ),
    }
}
