//! The backing directory, reached only through a descriptor of its root and never through a
//! symbolic link.
//!
//! The daemon runs as root on an `--allow-other` mount, while the backing directory is a shared
//! tree that other users write to directly. Had it reached a backing file by its full name, a
//! user could swap a directory for a symbolic link between the kernel's permission check (on
//! the mount's own path) and the daemon's use of the name, and have root open, chmod, truncate
//! or write back a file anywhere on the machine, or inside another user's part of the tree.
//!
//! So every path is resolved beneath the descriptor of the root taken when the mount started,
//! with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`: a symbolic link anywhere on the way
//! fails the operation with `ELOOP`, and so does `..` leading out. On a kernel without
//! `openat2` (before 5.6) each component is opened with `O_NOFOLLOW` in turn, which refuses the
//! same things (a link in place of a directory then as `ENOTDIR`). An operation on a name (unlink, rename, mkdir, readlink, …) resolves the parent
//! directory that way and acts on the name inside it with the `*at` call that does not follow
//! it, so a symbolic link the user made is itself renamed or removed, never what it points to.
//! Calls with no `*at` form (extended attributes) go through `/proc/self/fd/N/NAME` with the
//! variant that does not follow the last component: the directory is the descriptor's, fixed.
//!
//! Symbolic links *in* the tree still work through the mount: the kernel reads them
//! (`readlink`) and resolves them itself, as the calling user, with its own permission checks.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;

fn errno(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// The root of a backing tree, held open.
#[derive(Debug)]
pub struct BackingDir {
    root: OwnedFd,
    /// `openat2` answered `ENOSYS` once: resolve component by component from then on.
    no_openat2: AtomicBool,
}

/// How to open a file with [`BackingDir::open`].
#[derive(Debug, Clone, Copy)]
pub struct Open {
    pub read: bool,
    pub write: bool,
    /// `Some(exclusive)`: create the file if missing (`O_EXCL` when exclusive).
    pub create: Option<bool>,
    pub mode: u32,
}

impl Open {
    pub const READ: Open = Open {
        read: true,
        write: false,
        create: None,
        mode: 0,
    };
    pub const WRITE: Open = Open {
        read: false,
        write: true,
        create: None,
        mode: 0,
    };
    pub const READ_WRITE: Open = Open {
        read: true,
        write: true,
        create: None,
        mode: 0,
    };

    fn flags(self) -> OFlag {
        let mut f = match (self.read, self.write) {
            (_, false) => OFlag::O_RDONLY,
            (false, true) => OFlag::O_WRONLY,
            (true, true) => OFlag::O_RDWR,
        };
        match self.create {
            Some(true) => f |= OFlag::O_CREAT | OFlag::O_EXCL,
            Some(false) => f |= OFlag::O_CREAT,
            None => {}
        }
        // A FIFO someone made in the backing directory, opened where a file was expected (a
        // hint's walk races a rename, a `create` finds the name taken), must not hold a request
        // thread until a writer comes; on a regular file the flag changes nothing.
        f | OFlag::O_NONBLOCK
    }
}

impl BackingDir {
    /// Opens the root of the tree, a directory (links on the way are followed: [`real_path`]
    /// says where it led).
    ///
    /// [`real_path`]: Self::real_path
    pub fn open_root(path: &Path) -> io::Result<Self> {
        let root = nix::fcntl::open(
            path,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(errno)?;
        Ok(Self {
            root,
            no_openat2: AtomicBool::new(false),
        })
    }

    /// The path of the directory the root descriptor holds, as the kernel names it now: what
    /// was opened, whatever a link or a rename on the way to it did meanwhile.
    pub fn real_path(&self) -> io::Result<PathBuf> {
        use std::os::fd::AsRawFd;
        std::fs::read_link(format!("/proc/self/fd/{}", self.root.as_raw_fd()))
    }

    /// Checks that `rel` is a plain relative path (no root, no `.` or `..`): FUSE hands the
    /// daemon single names, and a path made from them has nothing else.
    fn check(rel: &Path) -> io::Result<()> {
        if rel.components().all(|c| matches!(c, Component::Normal(_))) {
            Ok(())
        } else {
            Err(errno(Errno::EINVAL))
        }
    }

    /// Opens `rel` (the root for `""`) with `flags`, following no symbolic link on the way or
    /// at the end, and never leaving the tree.
    fn resolve(&self, rel: &Path, flags: OFlag, mode: u32) -> io::Result<OwnedFd> {
        self.resolve_in(rel, flags, mode, false)
    }

    /// [`resolve`](Self::resolve), and with `same_mount` refusing (`EXDEV`) to cross into
    /// another mount on the way.
    fn resolve_in(
        &self,
        rel: &Path,
        flags: OFlag,
        mode: u32,
        same_mount: bool,
    ) -> io::Result<OwnedFd> {
        Self::check(rel)?;
        let flags = flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let rel_or_dot: &Path = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        if !self.no_openat2.load(Relaxed) {
            let how = OpenHow::new()
                .flags(flags)
                .mode(Mode::from_bits_truncate(mode))
                .resolve(if same_mount {
                    ResolveFlag::RESOLVE_BENEATH
                        | ResolveFlag::RESOLVE_NO_SYMLINKS
                        | ResolveFlag::RESOLVE_NO_XDEV
                } else {
                    ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS
                });
            match nix::fcntl::openat2(&self.root, rel_or_dot, how) {
                Err(Errno::ENOSYS) => self.no_openat2.store(true, Relaxed),
                // EAGAIN: a rename elsewhere in the tree raced the resolution; once more.
                Err(Errno::EAGAIN) => {
                    return nix::fcntl::openat2(&self.root, rel_or_dot, how).map_err(errno);
                }
                r => return r.map_err(errno),
            }
        }
        // Component by component: every directory on the way opened with O_NOFOLLOW (and, for
        // `same_mount`, on the root's device, which is what RESOLVE_NO_XDEV holds to).
        let root_dev = if same_mount {
            Some(nix::sys::stat::fstat(&self.root).map_err(errno)?.st_dev)
        } else {
            None
        };
        let on_root_dev = |fd: OwnedFd| -> io::Result<OwnedFd> {
            match root_dev {
                Some(dev) if nix::sys::stat::fstat(&fd).map_err(errno)?.st_dev != dev => {
                    Err(errno(Errno::EXDEV))
                }
                _ => Ok(fd),
            }
        };
        let mut comps: Vec<&OsStr> = rel.iter().collect();
        let Some(last) = comps.pop() else {
            return nix::fcntl::openat(&self.root, ".", flags, Mode::from_bits_truncate(mode))
                .map_err(errno);
        };
        let mut dir: Option<OwnedFd> = None;
        for c in comps {
            let at = dir.as_ref().map_or(self.root.as_fd(), |d| d.as_fd());
            dir = Some(on_root_dev(
                nix::fcntl::openat(
                    at,
                    c,
                    OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )
                .map_err(errno)?,
            )?);
        }
        let at = dir.as_ref().map_or(self.root.as_fd(), |d| d.as_fd());
        on_root_dev(
            nix::fcntl::openat(at, last, flags, Mode::from_bits_truncate(mode)).map_err(errno)?,
        )
    }

    /// Opens `rel` with `O_PATH`, resolved as every call here is (no symbolic link followed on
    /// the way, `ELOOP`; none out of the tree) and besides without crossing into another mount
    /// (`EXDEV`): for root acting on a path a user named, inside one mount and nowhere else (a
    /// job's `#DW preload`). `O_PATH` reads nothing and, on a FUSE mount, opens nothing in the
    /// daemon; a symbolic link as the last name is returned as itself, for the caller to refuse.
    pub fn open_path_in_mount(&self, rel: &Path) -> io::Result<OwnedFd> {
        self.resolve_in(rel, OFlag::O_PATH, 0, true)
    }

    /// The directory holding `rel` (resolved as [`resolve`](Self::resolve) does) and `rel`'s
    /// last name in it; for the root, the root and `.` (which no call follows anywhere, and
    /// which the calls that make or remove names refuse).
    fn parent<'a>(&self, rel: &'a Path) -> io::Result<(OwnedFd, &'a OsStr)> {
        let Some(name) = rel.file_name() else {
            Self::check(rel)?;
            return Ok((self.root.try_clone()?, OsStr::new(".")));
        };
        let dir = rel.parent().unwrap_or(Path::new(""));
        let fd = self.resolve(dir, OFlag::O_PATH | OFlag::O_DIRECTORY, 0)?;
        Ok((fd, name))
    }

    /// Opens a file (a directory with `O_DIRECTORY` in a read-only open).
    pub fn open(&self, rel: &Path, how: Open) -> io::Result<File> {
        let flags = how.flags();
        match self.resolve(rel, flags, how.mode) {
            // A lease on a regular file (a Samba oplock, an NFS delegation) refuses a
            // non-blocking open: opened as any open is, waiting for the lease's break. (A FIFO
            // never answers so: without a peer its non-blocking open succeeds or is ENXIO.)
            Err(e) if e.raw_os_error() == Some(Errno::EAGAIN as i32) => Ok(File::from(
                self.resolve(rel, flags - OFlag::O_NONBLOCK, how.mode)?,
            )),
            r => Ok(File::from(r?)),
        }
    }

    /// Opens a regular file for reading and writing although its mode no longer lets its
    /// owner write, when this process is that owner: what a descriptor that created the file
    /// with a read-only mode, or opened it before a `chmod a-w`, may still write (POSIX checks
    /// the mode at `open` only), a cache that writes the data later must be able to write
    /// too, or acknowledged data is lost. The owner's write bit is set for the open and put
    /// back at once; it only ever widens what the owner, this process, may do. (A `chmod` of
    /// the file by its owner in that instant is undone: the same race `cp -p` has.)
    /// `EACCES` for anyone but the owner, and for an owner who may write already (the refusal
    /// was for another reason).
    pub fn open_writable_as_owner(&self, rel: &Path) -> io::Result<File> {
        use std::os::unix::fs::MetadataExt;
        let r = self.open(rel, Open::READ)?;
        let m = r.metadata()?;
        if !m.is_file() || m.uid() != nix::unistd::geteuid().as_raw() || m.mode() & 0o200 != 0 {
            return Err(errno(Errno::EACCES));
        }
        let mode = Mode::from_bits_truncate(m.mode() & 0o7777);
        nix::sys::stat::fchmod(r.as_fd(), mode | Mode::S_IWUSR).map_err(errno)?;
        let w = self.open(rel, Open::READ_WRITE);
        let back = nix::sys::stat::fchmod(r.as_fd(), mode).map_err(errno);
        let w = w?;
        back?;
        let n = w.metadata()?;
        if (n.dev(), n.ino()) != (m.dev(), m.ino()) {
            // Renamed over in between: not the file that was asked for.
            return Err(errno(Errno::ESTALE));
        }
        Ok(w)
    }

    /// Opens a directory for listing.
    pub fn open_dir(&self, rel: &Path) -> io::Result<OwnedFd> {
        self.resolve(rel, OFlag::O_RDONLY | OFlag::O_DIRECTORY, 0)
    }

    /// `lstat`: the metadata of `rel` itself (a symbolic link's own, if it is one).
    pub fn symlink_metadata(&self, rel: &Path) -> io::Result<std::fs::Metadata> {
        // O_PATH | O_NOFOLLOW on a link yields the link itself, even under RESOLVE_NO_SYMLINKS
        // (openat2(2)); the component walk does the same.
        File::from(self.resolve(rel, OFlag::O_PATH, 0)?).metadata()
    }

    /// The metadata of a regular file or directory; `ELOOP` for a symbolic link.
    pub fn metadata(&self, rel: &Path) -> io::Result<std::fs::Metadata> {
        let m = self.symlink_metadata(rel)?;
        if m.file_type().is_symlink() {
            return Err(errno(Errno::ELOOP));
        }
        Ok(m)
    }

    pub fn mkdir(&self, rel: &Path, mode: u32) -> io::Result<()> {
        let (dir, name) = self.parent(rel)?;
        nix::sys::stat::mkdirat(&dir, name, Mode::from_bits_truncate(mode)).map_err(errno)
    }

    /// `mknodat` of a FIFO, socket or device node of type `kind` (`S_IFIFO`, …).
    pub fn mknod(&self, rel: &Path, kind: u32, perm: u32, rdev: u64) -> io::Result<()> {
        let (dir, name) = self.parent(rel)?;
        let kind = nix::sys::stat::SFlag::from_bits_truncate(kind & crate::core::libc_mode::S_IFMT);
        nix::sys::stat::mknodat(&dir, name, kind, Mode::from_bits_truncate(perm), rdev)
            .map_err(errno)
    }

    /// `linkat` without following a symbolic link at `existing`.
    pub fn link(&self, existing: &Path, new: &Path) -> io::Result<()> {
        let (fdir, fname) = self.parent(existing)?;
        let (tdir, tname) = self.parent(new)?;
        nix::unistd::linkat(&fdir, fname, &tdir, tname, nix::fcntl::AtFlags::empty()).map_err(errno)
    }

    pub fn rmdir(&self, rel: &Path) -> io::Result<()> {
        let (dir, name) = self.parent(rel)?;
        nix::unistd::unlinkat(&dir, name, nix::unistd::UnlinkatFlags::RemoveDir).map_err(errno)
    }

    pub fn unlink(&self, rel: &Path) -> io::Result<()> {
        let (dir, name) = self.parent(rel)?;
        nix::unistd::unlinkat(&dir, name, nix::unistd::UnlinkatFlags::NoRemoveDir).map_err(errno)
    }

    pub fn symlink(&self, rel: &Path, target: &Path) -> io::Result<()> {
        let (dir, name) = self.parent(rel)?;
        nix::unistd::symlinkat(target, &dir, name).map_err(errno)
    }

    pub fn readlink(&self, rel: &Path) -> io::Result<PathBuf> {
        let (dir, name) = self.parent(rel)?;
        nix::fcntl::readlinkat(&dir, name)
            .map(PathBuf::from)
            .map_err(errno)
    }

    pub fn rename(&self, from: &Path, to: &Path, flags: nix::fcntl::RenameFlags) -> io::Result<()> {
        let (fdir, fname) = self.parent(from)?;
        let (tdir, tname) = self.parent(to)?;
        nix::fcntl::renameat2(&fdir, fname, &tdir, tname, flags).map_err(errno)
    }

    /// `chmod` of a file or directory; a symbolic link is refused (`EOPNOTSUPP`: Linux links
    /// have no mode of their own, and the kernel resolves links before asking the daemon).
    pub fn chmod(&self, rel: &Path, mode: u32) -> io::Result<()> {
        let mode = Mode::from_bits_truncate(mode & 0o7777);
        let (dir, name) = self.parent(rel)?;
        nix::sys::stat::fchmodat(
            &dir,
            name,
            mode,
            nix::sys::stat::FchmodatFlags::NoFollowSymlink,
        )
        .map_err(errno)
    }

    /// `lchown`.
    pub fn chown(&self, rel: &Path, uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
        let uid = uid.map(nix::unistd::Uid::from_raw);
        let gid = gid.map(nix::unistd::Gid::from_raw);
        let (dir, name) = self.parent(rel)?;
        nix::unistd::fchownat(
            &dir,
            name,
            uid,
            gid,
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(errno)
    }

    /// `utimensat` without following a symbolic link.
    pub fn set_times(
        &self,
        rel: &Path,
        atime: &nix::sys::time::TimeSpec,
        mtime: &nix::sys::time::TimeSpec,
    ) -> io::Result<()> {
        let (dir, name) = self.parent(rel)?;
        let flag = nix::sys::stat::UtimensatFlags::NoFollowSymlink;
        nix::sys::stat::utimensat(&dir, name, atime, mtime, flag).map_err(errno)
    }

    /// Lists a directory (without `.` and `..`): names and file types.
    pub fn read_dir(&self, rel: &Path) -> io::Result<Vec<(OsString, u32)>> {
        let fd = self.open_dir(rel)?;
        // std's reader over the descriptor's own directory: `/proc/self/fd/N` names the open
        // directory itself, whatever happens to `rel` meanwhile.
        let mut out = Vec::new();
        for e in std::fs::read_dir(proc_fd(&fd))? {
            let e = e?;
            let ft = e.file_type()?;
            let kind = if ft.is_dir() {
                crate::core::libc_mode::S_IFDIR
            } else if ft.is_symlink() {
                crate::core::libc_mode::S_IFLNK
            } else if ft.is_file() {
                crate::core::libc_mode::S_IFREG
            } else {
                // fstatat on the listed directory's descriptor, not following.
                std::os::unix::fs::MetadataExt::mode(&e.metadata()?)
                    & crate::core::libc_mode::S_IFMT
            };
            out.push((e.file_name(), kind));
        }
        Ok(out)
    }

    /// Runs `f` on a path that reaches `rel` itself, `/proc/self/fd/DIR/NAME`, for the calls
    /// that have no `*at` form: used with the variants that do not follow the last component
    /// (`lgetxattr`, …), it names exactly the entry in the directory the descriptor holds.
    fn with_proc_path<T>(
        &self,
        rel: &Path,
        f: impl FnOnce(&Path) -> io::Result<T>,
    ) -> io::Result<T> {
        let (dir, name) = self.parent(rel)?;
        f(&proc_fd(&dir).join(name))
    }

    pub fn getxattr(&self, rel: &Path, name: &OsStr) -> io::Result<Option<Vec<u8>>> {
        self.with_proc_path(rel, |p| xattr::get(p, name))
    }

    pub fn setxattr(&self, rel: &Path, name: &OsStr, value: &[u8]) -> io::Result<()> {
        self.with_proc_path(rel, |p| xattr::set(p, name, value))
    }

    pub fn listxattr(&self, rel: &Path) -> io::Result<Vec<OsString>> {
        self.with_proc_path(rel, |p| Ok(xattr::list(p)?.collect()))
    }

    pub fn removexattr(&self, rel: &Path, name: &OsStr) -> io::Result<()> {
        self.with_proc_path(rel, |p| xattr::remove(p, name))
    }

    /// The file system's numbers.
    pub fn statfs(&self) -> io::Result<nix::sys::statvfs::Statvfs> {
        nix::sys::statvfs::fstatvfs(&self.root).map_err(errno)
    }
}

/// `/proc/self/fd/N` for a descriptor: the kernel's name for exactly that open file.
fn proc_fd(fd: &impl AsRawFd) -> PathBuf {
    let mut p = PathBuf::from("/proc/self/fd");
    p.push(OsStr::from_bytes(fd.as_raw_fd().to_string().as_bytes()));
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symbolic_link_anywhere_on_the_way_is_refused_and_names_are_not_followed() {
        let top = tempfile::tempdir().expect("tempdir");
        let (tree, outside) = (top.path().join("tree"), top.path().join("outside"));
        std::fs::create_dir_all(tree.join("d")).expect("mkdir");
        std::fs::create_dir(&outside).expect("mkdir");
        std::fs::write(tree.join("d/f"), b"inside").expect("write");
        std::fs::write(outside.join("f"), b"outside").expect("write");
        std::os::unix::fs::symlink(&outside, tree.join("link")).expect("symlink");
        std::os::unix::fs::symlink("../outside/f", tree.join("d/up")).expect("symlink");
        for fallback in [false, true] {
            let b = BackingDir::open_root(&tree).expect("open");
            b.no_openat2.store(fallback, Relaxed);
            let e = b
                .open(Path::new("link/f"), Open::READ)
                .expect_err("through a link");
            // The component walk meets the link as a directory it may not follow: ENOTDIR.
            assert!(
                [Errno::ELOOP as i32, Errno::ENOTDIR as i32]
                    .contains(&e.raw_os_error().unwrap_or(0)),
                "{fallback}: {e}"
            );
            let e = b
                .open(Path::new("d/up"), Open::READ)
                .expect_err("a link at the end");
            assert_eq!(
                e.raw_os_error(),
                Some(Errno::ELOOP as i32),
                "{fallback}: {e}"
            );
            assert!(b.open(Path::new("../outside/f"), Open::READ).is_err());
            assert!(b.open(Path::new("/etc/passwd"), Open::READ).is_err());
            assert!(b.chmod(Path::new("link/f"), 0o777).is_err());
            assert!(
                b.symlink_metadata(Path::new("d/up"))
                    .expect("lstat")
                    .is_symlink()
            );
            assert_eq!(
                b.readlink(Path::new("d/up")).expect("readlink"),
                Path::new("../outside/f")
            );
            let mut s = String::new();
            std::io::Read::read_to_string(
                &mut b.open(Path::new("d/f"), Open::READ).expect("open"),
                &mut s,
            )
            .expect("read");
            assert_eq!(s, "inside");
            let names: Vec<_> = b
                .read_dir(Path::new(""))
                .expect("list")
                .into_iter()
                .map(|(n, _)| n)
                .collect();
            assert_eq!(names.len(), 2, "{names:?}");
            // The root itself, through the same calls.
            let root = Path::new("");
            b.chmod(root, 0o750).expect("chmod root");
            let m = std::fs::metadata(&tree).expect("stat");
            assert_eq!(
                std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o7777,
                0o750
            );
            assert!(b.symlink_metadata(root).expect("stat root").is_dir());
            b.setxattr(root, OsStr::new("user.pliant-test"), b"1")
                .expect("setxattr root");
            assert_eq!(
                b.getxattr(root, OsStr::new("user.pliant-test"))
                    .expect("getxattr root"),
                Some(b"1".to_vec())
            );
            assert!(b.unlink(root).is_err() && b.rmdir(root).is_err());
        }
        assert_eq!(std::fs::read(outside.join("f")).expect("read"), b"outside");
        let mode = std::fs::metadata(outside.join("f")).expect("stat");
        assert_ne!(
            std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
            0o777
        );
    }
}
