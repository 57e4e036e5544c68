#!/usr/bin/env python3
"""Differential POSIX conformance check: TARGET (e.g. a `pliant fs` mount) against REFERENCE
(a local directory), case by case.

    posix_diff.py TARGET_DIR REFERENCE_DIR [--as-user UID:GID ...] [--json] [--report-only]

Each case makes a fresh subdirectory, sets it up (as root: files of every type, owned by the
acting user or by someone else, with exact modes), runs one system call through Python's `os`
module (as root, then forked with setgroups/setgid/setuid as each `--as-user`), and records the
result ("ok" or the errno name) and what can be observed afterwards: every entry's type,
permission bits, link count, owner, size (contents of small files, symlink targets), and, where
POSIX says a call must (or must not) update them, whether mtime/ctime changed. A case passes
when TARGET and REFERENCE record the same. The cases follow what pjdfstest checks per system
call (errno cases, link counts, times, sticky directories, permissions); its code is not used.

Run as root (the set-up makes files owned by other users and device nodes). Exit status 1
when a case differs that is in neither KNOWN (accepted differences, each with its reason) nor
PENDING (bugs to fix, reported loudly), unless --report-only.
"""

import argparse
import ctypes
import errno
import json
import os
import select
import signal
import stat
import sys
import time

# Differences accepted for good, with the reason. Key: case name (every user) or
# "USER:case" (one run; USER is "root" or the uid).
KNOWN = {
    "truncate.regular.to_2GiB": "the cache refuses files past --max-file-size (1 GiB by default): EFBIG by design",
    "truncate.ftruncate.to_2GiB": "the cache refuses files past --max-file-size (1 GiB by default): EFBIG by design",
    # Linux's FUSE (fuse_setattr, without FUSE_HANDLE_KILLPRIV_V2) clears setgid on chown and
    # write only when group-execute is set, and sends no request for a chown(-1, -1) that
    # clears nothing; ext4 (Linux 6.x) clears setgid without group-execute too.
    "chown.me2745.nothing": "kernel FUSE: chown(-1,-1) of a g+s,g-x file sends no request: no ctime change",
    "chown.other2745.nothing": "kernel FUSE: chown(-1,-1) of a g+s,g-x file sends no request: ok, no EPERM, no ctime",
}

# Real bugs, to fix in the product: reported as failures to fix, not counted in the exit status.
# Remove a case from here once its fix lands (the check then fails if it differs again).
NODEV = ("the mount is nodev by design (mount.rs, MountOption::NoDev; docs/fs.md): a device "
         "node is made and listed through it, opened only in the backing directory (EACCES)")
PENDING = {}
# The kernel's FUSE clears setgid on a non-owner's write only with group-execute (ext4 does
# without it too): the daemon sees the write after the kernel's check.
KNOWN["65534:write.other2767"] = ("kernel FUSE: a non-owner's write of a g+s,g-x file keeps "
                                  "setgid (ext4 clears it)")
KNOWN.update({f"open.{t}.{f}": NODEV for t in ("block", "char")
              for f in ("rdonly", "wronly", "rdwr", "nofollow", "trunc", "creat")})
KNOWN["mknod.char.read_null"] = NODEV

# Differences, on top of KNOWN, of a mount with FUSE_HANDLE_KILLPRIV_V2 alone (KNOWN_KILLPRIV:
# `--no-passthrough --direct-io`) and of one with the kernel's write-back cache as well
# (KNOWN_WRITE_CACHE: an unprivileged mount, or --no-passthrough).
KNOWN_KILLPRIV = {
    f"65534:chown.other{mode}.nothing": ("kernel FUSE with HANDLE_KILLPRIV_V2: a chown(-1, -1) "
                                         "reaches the daemon as a change of nothing, which it "
                                         "takes as a chown's set-ID clearing for the owner and "
                                         "root; for anyone else it changes nothing, ok where a "
                                         "local chown says EPERM")
    for mode in ("4755", "2755", "6755")}
KNOWN_WRITE_CACHE = dict(KNOWN_KILLPRIV)
KNOWN_WRITE_CACHE["truncate.regular.same"] = (
    "kernel FUSE write cache: a truncate to the size the kernel already has keeps its cached "
    "mtime and ctime")

OTHER = (12345, 12345)  # the owner of "someone else's" files: never the acting user
TIMEOUT_S = 5  # a case's system call must return by then (a FIFO open never blocks)
TICK_S = 0.012  # longer than a coarse clock tick (HZ=100), so a time update shows

libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2


def renameat2(src, dst, flags):
    if libc.renameat2(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst), flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


# ---------------------------------------------------------------------------------------------
# Set-up: ("kind", rel, mode, owner, extra); owner "me" (the acting user) or "other".


def E(kind, rel, mode=None, own="me", extra=None):
    return (kind, rel, mode, own, extra)


DEFAULT_MODE = {"regular": 0o644, "dir": 0o755, "fifo": 0o644, "socket": 0o644,
                "block": 0o644, "char": 0o644}
DATA = b"abcd"


def make(base, spec, me):
    kind, rel, mode, own, extra = spec
    p = os.path.join(base, rel)
    if own == "me":
        uid, gid = me
    elif own == "other":
        uid, gid = OTHER
    else:  # (uid or "me", gid or "me")
        uid, gid = (me[i] if x == "me" else x for i, x in enumerate(own))
    if mode is None:
        mode = DEFAULT_MODE.get(kind, 0o644)
    if kind == "regular":
        with open(p, "wb") as f:
            f.write(DATA if extra is None else extra)
    elif kind == "dir":
        os.mkdir(p)
    elif kind == "fifo":
        os.mkfifo(p)
    elif kind == "socket":
        os.mknod(p, stat.S_IFSOCK | 0o600)
    elif kind == "char":
        os.mknod(p, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # /dev/null
    elif kind == "block":
        os.mknod(p, stat.S_IFBLK | 0o600, os.makedev(259, 1048000))  # no such device
    elif kind == "symlink":
        os.symlink(extra, p)
        os.lchown(p, uid, gid)
        return
    elif kind == "link":
        os.link(os.path.join(base, extra), p)
        return
    else:
        raise ValueError(kind)
    os.lchown(p, uid, gid)
    os.chmod(p, mode)


def of_type(t, rel, own="me", mode=None):
    """The set-up of one entry of type t (the pjdfstest types, plus symlinks to a file, to a
    directory and to themselves); symlinks to something make that something first."""
    if t == "symlink":
        return [E("symlink", rel, own=own, extra="nowhere")]
    if t == "symlink_f":
        return [E("regular", rel + ".t", own=own), E("symlink", rel, own=own, extra=os.path.basename(rel) + ".t")]
    if t == "symlink_d":
        return [E("dir", rel + ".t", own=own), E("symlink", rel, own=own, extra=os.path.basename(rel) + ".t")]
    if t == "loop":
        return [E("symlink", rel, own=own, extra=os.path.basename(rel))]
    return [E(t, rel, mode, own)]


TYPES = ["regular", "dir", "fifo", "socket", "block", "char", "symlink"]
ALL_TYPES = TYPES + ["symlink_f", "symlink_d", "loop"]
NONDIR = [t for t in TYPES if t != "dir"]

# Directories every case may use: w mine; o someone else's (0755); t someone else's sticky
# (1777); p someone else's, writable by all (0777); s mine, sticky (1777).
DIRS = {
    "w": E("dir", "w", 0o755, "me"),
    "o": E("dir", "o", 0o755, "other"),
    "t": E("dir", "t", 0o1777, "other"),
    "p": E("dir", "p", 0o777, "other"),
    "s": E("dir", "s", 0o1777, "me"),
}

# ---------------------------------------------------------------------------------------------
# Cases


CASES = []


def case(family, name, setup, op, times=(), umask=0):
    """setup: list of E(...) (a leading directory name such as "w/" pulls in DIRS["w"]);
    op: f() run with the case directory as cwd, returning None or a value to record;
    times: (rel_before, rel_after, "m"/"c"/"mc") whose change is recorded."""
    CASES.append({"family": family, "name": f"{family}.{name}", "setup": setup, "op": op,
                  "times": list(times), "umask": umask})


def T(rel, fields="mc", after=None):
    return (rel, rel if after is None else after, fields)


def ret_stat(p, follow=True):
    st = os.stat(p) if follow else os.lstat(p)
    return f"{kind_of(st.st_mode)} {stat.S_IMODE(st.st_mode):o}"


def open_op(path, flags, mode=0o644, write=None):
    def op():
        fd = os.open(path, flags | os.O_NONBLOCK, mode)
        try:
            st = os.fstat(fd)
            r = kind_of(st.st_mode)
            if write is not None:
                os.write(fd, write)
            return r
        finally:
            os.close(fd)
    return op


LONG = "n" * 256
MAX = "m" * 255

OPEN_FLAGS = {
    "rdonly": os.O_RDONLY,
    "wronly": os.O_WRONLY,
    "rdwr": os.O_RDWR,
    "directory": os.O_RDONLY | os.O_DIRECTORY,
    "nofollow": os.O_RDONLY | os.O_NOFOLLOW,
    "trunc": os.O_WRONLY | os.O_TRUNC,
    "creat": os.O_WRONLY | os.O_CREAT,
    "creat_excl": os.O_WRONLY | os.O_CREAT | os.O_EXCL,
}


def build():
    # --- open --------------------------------------------------------------------------------
    for t in ALL_TYPES:
        for fname, fl in OPEN_FLAGS.items():
            times = [T("w/x", "mc"), T("w", "mc")] if fname in ("trunc", "creat", "creat_excl") else []
            case("open", f"{t}.{fname}", [DIRS["w"]] + of_type(t, "w/x"), open_op("w/x", fl), times)
    for m in (0o644, 0o600, 0o755, 0o777, 0o4755, 0o2755, 0o1644, 0o0):
        for um in (0, 0o022, 0o077):
            case("open", f"create.mode{m:o}.umask{um:o}", [DIRS["w"]],
                 open_op("w/new", os.O_WRONLY | os.O_CREAT | os.O_EXCL, m), [T("w")], umask=um)
    case("open", "create.max_name", [DIRS["w"]], open_op("w/" + MAX, os.O_CREAT | os.O_WRONLY))
    case("open", "create.long_name", [DIRS["w"]], open_op("w/" + LONG, os.O_CREAT | os.O_WRONLY))
    case("open", "lookup.long_name", [DIRS["w"]], open_op("w/" + LONG, os.O_RDONLY))
    case("open", "create.no_parent", [DIRS["w"]], open_op("w/no/x", os.O_CREAT | os.O_WRONLY))
    case("open", "create.parent_is_file", [DIRS["w"], E("regular", "w/f")],
         open_op("w/f/x", os.O_CREAT | os.O_WRONLY))
    case("open", "create.trailing_slash", [DIRS["w"]], open_op("w/x/", os.O_CREAT | os.O_WRONLY))
    case("open", "create.through_dangling_symlink", [DIRS["w"], E("symlink", "w/l", extra="tgt")],
         open_op("w/l", os.O_CREAT | os.O_WRONLY), [T("w")])
    case("open", "create.keeps_existing", [DIRS["w"], E("regular", "w/f", extra=b"0123456789")],
         open_op("w/f", os.O_CREAT | os.O_WRONLY), [T("w/f")])
    case("open", "trunc.empty_file", [DIRS["w"], E("regular", "w/f", extra=b"")],
         open_op("w/f", os.O_WRONLY | os.O_TRUNC), [T("w/f")])
    case("open", "trunc.rdonly", [DIRS["w"], E("regular", "w/f")],
         open_op("w/f", os.O_RDONLY | os.O_TRUNC), [T("w/f")])
    # The set-ID bits an O_TRUNC open clears (the daemon does it under FUSE_ATOMIC_O_TRUNC).
    for m in (0o4755, 0o2755, 0o2745, 0o6755, 0o4777, 0o2777):
        for own in ("me", "other"):
            case("open", f"trunc.setid.{own}{m:o}", [DIRS["w"], E("regular", f"w/f", m, own)],
                 open_op("w/f", os.O_WRONLY | os.O_TRUNC), [T("w/f")])
    case("open", "append.write", [DIRS["w"], E("regular", "w/f")],
         open_op("w/f", os.O_WRONLY | os.O_APPEND, write=b"XY"), [T("w/f")])
    case("open", "write.overwrite", [DIRS["w"], E("regular", "w/f")],
         open_op("w/f", os.O_WRONLY, write=b"XY"), [T("w/f")])
    case("open", "write.rdonly_fd", [DIRS["w"], E("regular", "w/f")],
         open_op("w/f", os.O_RDONLY, write=b"XY"), [T("w/f")])
    case("open", "dir.creat_on_dir", [DIRS["w"], E("dir", "w/d")], open_op("w/d", os.O_RDONLY | os.O_CREAT))
    case("open", "dir.through_symlink_slash", [DIRS["w"]] + of_type("symlink_d", "w/l"),
         open_op("w/l/", os.O_RDONLY))
    case("open", "file.trailing_slash", [DIRS["w"], E("regular", "w/f")], open_op("w/f/", os.O_RDONLY))
    case("open", "enotdir.prefix", [DIRS["w"], E("regular", "w/f")], open_op("w/f/x", os.O_RDONLY))
    case("open", "eloop.prefix", [DIRS["w"]] + of_type("loop", "w/l"), open_op("w/l/x", os.O_RDONLY))
    # permissions
    for d in ("w", "o", "p", "t"):
        for fm in (0o644, 0o600, 0o444, 0o000, 0o666):
            for own in ("me", "other"):
                for fname, fl in (("rdonly", os.O_RDONLY), ("wronly", os.O_WRONLY), ("trunc", os.O_WRONLY | os.O_TRUNC)):
                    case("open", f"perm.{d}.{own}{fm:03o}.{fname}",
                         [DIRS[d], E("regular", f"{d}/f", fm, own)], open_op(f"{d}/f", fl))
        case("open", f"perm.{d}.create", [DIRS[d]], open_op(f"{d}/new", os.O_WRONLY | os.O_CREAT), [T(d)])
    for dm in (0o700, 0o600, 0o300, 0o100, 0o000):
        case("open", f"perm.search.mine{dm:03o}", [E("dir", "d", dm, "me"), E("regular", "d/f", 0o644, "me")],
             open_op("d/f", os.O_RDONLY))
        case("open", f"perm.search.others{dm:03o}", [E("dir", "d", dm, "other"), E("regular", "d/f", 0o644, "me")],
             open_op("d/f", os.O_RDONLY))
        case("open", f"perm.listdir.mine{dm:03o}", [E("dir", "d", dm, "me"), E("regular", "d/f", 0o644, "me")],
             lambda: sorted(os.listdir("d")))
    case("open", "perm.sticky_other_dir_mine_file_creat", [DIRS["t"], E("regular", "t/f", 0o666, "other")],
         open_op("t/f", os.O_WRONLY | os.O_CREAT))

    # --- mkdir -------------------------------------------------------------------------------
    for m in (0o755, 0o700, 0o777, 0o1777, 0o2755, 0o4755, 0o7777, 0o0):
        for um in (0, 0o022):
            case("mkdir", f"mode{m:o}.umask{um:o}", [DIRS["w"]], lambda m=m: os.mkdir("w/d", m),
                 [T("w")], umask=um)
    for t in ALL_TYPES:
        case("mkdir", f"eexist.{t}", [DIRS["w"]] + of_type(t, "w/x"), lambda: os.mkdir("w/x", 0o755), [T("w")])
    case("mkdir", "enoent", [DIRS["w"]], lambda: os.mkdir("w/no/d"))
    case("mkdir", "enotdir", [DIRS["w"], E("regular", "w/f")], lambda: os.mkdir("w/f/d"))
    case("mkdir", "enametoolong", [DIRS["w"]], lambda: os.mkdir("w/" + LONG))
    case("mkdir", "max_name", [DIRS["w"]], lambda: os.mkdir("w/" + MAX))
    case("mkdir", "dot", [DIRS["w"]], lambda: os.mkdir("w/."))
    case("mkdir", "dotdot", [DIRS["w"]], lambda: os.mkdir("w/.."))
    case("mkdir", "trailing_slash", [DIRS["w"]], lambda: os.mkdir("w/d/"), [T("w")])
    case("mkdir", "eloop", [DIRS["w"]] + of_type("loop", "w/l"), lambda: os.mkdir("w/l/d"))
    for d in DIRS:
        case("mkdir", f"perm.{d}", [DIRS[d]], lambda d=d: os.mkdir(f"{d}/d"), [T(d)])
    case("mkdir", "perm.no_search", [E("dir", "d", 0o666, "me")], lambda: os.mkdir("d/e"))
    case("mkdir", "setgid_parent", [E("dir", "g", 0o2777, "other")], lambda: os.mkdir("g/d", 0o755), [T("g")])
    case("mkdir", "setgid_parent.file", [E("dir", "g", 0o2777, "other")],
         open_op("g/f", os.O_CREAT | os.O_WRONLY, 0o2755))

    # --- rmdir -------------------------------------------------------------------------------
    case("rmdir", "empty", [DIRS["w"], E("dir", "w/d")], lambda: os.rmdir("w/d"), [T("w")])
    case("rmdir", "trailing_slash", [DIRS["w"], E("dir", "w/d")], lambda: os.rmdir("w/d/"), [T("w")])
    for t in ALL_TYPES:
        case("rmdir", f"enotempty.{t}", [DIRS["w"], E("dir", "w/d")] + of_type(t, "w/d/x"),
             lambda: os.rmdir("w/d"), [T("w")])
        if t != "dir":
            case("rmdir", f"enotdir.{t}", [DIRS["w"]] + of_type(t, "w/x"), lambda: os.rmdir("w/x"), [T("w")])
    case("rmdir", "dot", [DIRS["w"], E("dir", "w/d")], lambda: os.rmdir("w/d/."))
    case("rmdir", "dotdot", [DIRS["w"], E("dir", "w/d")], lambda: os.rmdir("w/d/.."))
    case("rmdir", "enoent", [DIRS["w"]], lambda: os.rmdir("w/no"))
    case("rmdir", "enotdir.prefix", [DIRS["w"], E("regular", "w/f")], lambda: os.rmdir("w/f/d"))
    case("rmdir", "enametoolong", [DIRS["w"]], lambda: os.rmdir("w/" + LONG))
    for d in DIRS:
        for own in ("me", "other"):
            case("rmdir", f"perm.{d}.{own}", [DIRS[d], E("dir", f"{d}/d", 0o755, own)],
                 lambda d=d: os.rmdir(f"{d}/d"), [T(d)])
    case("rmdir", "perm.parent_readonly", [E("dir", "d", 0o555, "me"), E("dir", "d/e", 0o755, "me")],
         lambda: os.rmdir("d/e"))

    # --- unlink ------------------------------------------------------------------------------
    for t in ALL_TYPES:
        case("unlink", t, [DIRS["w"]] + of_type(t, "w/x"), lambda: os.unlink("w/x"), [T("w")])
    case("unlink", "enoent", [DIRS["w"]], lambda: os.unlink("w/no"))
    case("unlink", "enotdir.prefix", [DIRS["w"], E("regular", "w/f")], lambda: os.unlink("w/f/x"))
    case("unlink", "trailing_slash", [DIRS["w"], E("regular", "w/f")], lambda: os.unlink("w/f/"))
    case("unlink", "enametoolong", [DIRS["w"]], lambda: os.unlink("w/" + LONG))
    for t in ("regular", "fifo", "socket", "char"):
        case("unlink", f"one_of_two_links.{t}", [DIRS["w"], E(t, "w/a"), E("link", "w/b", extra="w/a")],
             lambda: os.unlink("w/a"), [T("w"), T("w/b", "c")])
    case("unlink", "one_of_three_links", [DIRS["w"], E("regular", "w/a"), E("link", "w/b", extra="w/a"),
                                          E("link", "w/c", extra="w/a")], lambda: os.unlink("w/b"))
    for what in ("write_read", "fstat", "ftruncate", "fchmod"):
        case("unlink", f"open_file.{what}", [DIRS["w"], E("regular", "w/f")], lambda what=what: unlink_open(what))
    case("rename", "open_file_then_fstat", [DIRS["w"], E("regular", "w/a")],
         lambda: fd_after("w/a", lambda: os.rename("w/a", "w/b"), lambda fd: os.fstat(fd).st_size))
    for d in DIRS:
        for own in ("me", "other"):
            for t in ("regular", "fifo", "symlink"):
                case("unlink", f"perm.{d}.{own}.{t}", [DIRS[d]] + of_type(t, f"{d}/x", own),
                     lambda d=d: os.unlink(f"{d}/x"), [T(d)])
    case("unlink", "perm.parent_readonly", [E("dir", "d", 0o555, "me"), E("regular", "d/f")],
         lambda: os.unlink("d/f"))

    # --- rename ------------------------------------------------------------------------------
    dsts = {"absent": [], "regular": [E("regular", "w/b", extra=b"bbbbbbbb")], "dir": [E("dir", "w/b")],
            "dir_full": [E("dir", "w/b"), E("regular", "w/b/f")], "fifo": [E("fifo", "w/b")],
            "symlink": [E("symlink", "w/b", extra="nowhere")], "socket": [E("socket", "w/b")]}
    for st_ in ("regular", "dir", "fifo", "socket", "char", "symlink", "symlink_d"):
        for dn, dsetup in dsts.items():
            case("rename", f"{st_}.over_{dn}", [DIRS["w"]] + of_type(st_, "w/a") + dsetup,
                 lambda: os.rename("w/a", "w/b"), [T("w"), T("w/a", "c", after="w/b")])
    for st_ in ("regular", "dir", "fifo", "symlink"):
        case("rename", f"{st_}.to_other_dir", [DIRS["w"], E("dir", "w/d")] + of_type(st_, "w/a"),
             lambda: os.rename("w/a", "w/d/a"), [T("w"), T("w/d"), T("w/a", "c", after="w/d/a")])
        case("rename", f"{st_}.to_itself", [DIRS["w"]] + of_type(st_, "w/a"),
             lambda: os.rename("w/a", "w/a"), [T("w"), T("w/a", "c")])
    case("rename", "dir.into_own_child", [DIRS["w"], E("dir", "w/a"), E("dir", "w/a/b")],
         lambda: os.rename("w/a", "w/a/b/c"))
    case("rename", "dir.onto_own_child", [DIRS["w"], E("dir", "w/a"), E("dir", "w/a/b")],
         lambda: os.rename("w/a", "w/a/b"))
    case("rename", "dir.onto_own_parent", [DIRS["w"], E("dir", "w/a"), E("dir", "w/a/b")],
         lambda: os.rename("w/a/b", "w/a"))
    case("rename", "dir.with_contents_to_other_dir",
         [DIRS["w"], E("dir", "w/a"), E("dir", "w/a/s"), E("regular", "w/a/f"), E("dir", "w/d")],
         lambda: os.rename("w/a", "w/d/a"), [T("w"), T("w/d")])
    case("rename", "dir.then_lookup_child",
         [DIRS["w"], E("dir", "w/a"), E("regular", "w/a/f")],
         lambda: (os.rename("w/a", "w/b"), ret_stat("w/b/f"), os.path.exists("w/a/f"))[1:])
    case("rename", "hardlinks_same_inode", [DIRS["w"], E("regular", "w/a"), E("link", "w/b", extra="w/a")],
         lambda: os.rename("w/a", "w/b"), [T("w"), T("w/a", "c")])
    case("rename", "over_hardlink_of_other", [DIRS["w"], E("regular", "w/a"), E("regular", "w/b", extra=b"bb"),
                                             E("link", "w/c", extra="w/b")],
         lambda: os.rename("w/a", "w/b"), [T("w/c", "c")])
    case("rename", "enoent.src", [DIRS["w"]], lambda: os.rename("w/no", "w/b"))
    case("rename", "enoent.dst_parent", [DIRS["w"], E("regular", "w/a")], lambda: os.rename("w/a", "w/no/b"))
    case("rename", "enotdir.src_prefix", [DIRS["w"], E("regular", "w/f")], lambda: os.rename("w/f/a", "w/b"))
    case("rename", "enotdir.dst_prefix", [DIRS["w"], E("regular", "w/f"), E("regular", "w/a")],
         lambda: os.rename("w/a", "w/f/b"))
    case("rename", "file.dst_trailing_slash", [DIRS["w"], E("regular", "w/a")], lambda: os.rename("w/a", "w/b/"))
    case("rename", "dir.dst_trailing_slash", [DIRS["w"], E("dir", "w/a")], lambda: os.rename("w/a", "w/b/"))
    case("rename", "enametoolong.dst", [DIRS["w"], E("regular", "w/a")], lambda: os.rename("w/a", "w/" + LONG))
    case("rename", "max_name.dst", [DIRS["w"], E("regular", "w/a")], lambda: os.rename("w/a", "w/" + MAX))
    case("rename", "dot.src", [DIRS["w"], E("dir", "w/d")], lambda: os.rename("w/d/.", "w/e"))
    case("rename", "dotdot.dst", [DIRS["w"], E("dir", "w/d"), E("dir", "w/e")], lambda: os.rename("w/e", "w/d/.."))
    case("rename", "open_file_then_read", [DIRS["w"], E("regular", "w/a", extra=b"hello")], rename_open)
    case("rename", "cycle_three", [DIRS["w"], E("regular", "w/a", extra=b"A"), E("regular", "w/b", extra=b"B")],
         lambda: (os.rename("w/a", "w/c"), os.rename("w/b", "w/a"), os.rename("w/c", "w/b")) and None)
    # renameat2
    for fl_name, fl in (("noreplace", RENAME_NOREPLACE), ("exchange", RENAME_EXCHANGE)):
        for dn in ("absent", "regular", "dir"):
            case("rename", f"renameat2_{fl_name}.regular_over_{dn}", [DIRS["w"], E("regular", "w/a")] + dsts[dn],
                 lambda fl=fl: renameat2("w/a", "w/b", fl), [T("w")])
        case("rename", f"renameat2_{fl_name}.dir_across", [DIRS["w"], E("dir", "w/a"), E("dir", "w/a/x"), E("dir", "w/d"),
                                                            E("regular", "w/d/b")],
             lambda fl=fl: renameat2("w/a", "w/d/b", fl), [T("w"), T("w/d")])
    # permissions: src and dst in the shared directories
    for d in DIRS:
        for own in ("me", "other"):
            case("rename", f"perm.{d}.{own}.within", [DIRS[d], E("regular", f"{d}/a", 0o644, own)],
                 lambda d=d: os.rename(f"{d}/a", f"{d}/b"))
            case("rename", f"perm.{d}.{own}.out_to_w", [DIRS[d], DIRS["w"], E("regular", f"{d}/a", 0o644, own)],
                 lambda d=d: os.rename(f"{d}/a", "w/a"))
            case("rename", f"perm.w.in_over_{d}.{own}", [DIRS[d], DIRS["w"], E("regular", "w/a"),
                                                        E("regular", f"{d}/b", 0o644, own)],
                 lambda d=d: os.rename("w/a", f"{d}/b"))
            case("rename", f"perm.{d}.{own}.dir_out_to_w", [DIRS[d], DIRS["w"], E("dir", f"{d}/a", 0o755, own)],
                 lambda d=d: os.rename(f"{d}/a", "w/a"))

    # --- link --------------------------------------------------------------------------------
    for t in ("regular", "dir", "fifo", "socket", "block", "char", "symlink", "symlink_f"):
        case("link", t, [DIRS["w"]] + of_type(t, "w/a"), lambda: os.link("w/a", "w/b", follow_symlinks=False),
             [T("w"), T("w/a", "c")])
    case("link", "follow.symlink_f", [DIRS["w"]] + of_type("symlink_f", "w/a"),
         lambda: os.link("w/a", "w/b", follow_symlinks=True), [T("w/a.t", "c")])
    case("link", "follow.dangling", [DIRS["w"]] + of_type("symlink", "w/a"),
         lambda: os.link("w/a", "w/b", follow_symlinks=True))
    for t in ALL_TYPES:
        case("link", f"eexist.{t}", [DIRS["w"], E("regular", "w/a")] + of_type(t, "w/b"),
             lambda: os.link("w/a", "w/b"), [T("w/a", "c")])
    case("link", "three_names", [DIRS["w"], E("regular", "w/a"), E("link", "w/b", extra="w/a")],
         lambda: os.link("w/b", "w/c"))
    case("link", "to_other_dir", [DIRS["w"], E("regular", "w/a"), E("dir", "w/d")],
         lambda: os.link("w/a", "w/d/a"), [T("w/d")])
    case("link", "then_write_through_new_name", [DIRS["w"], E("regular", "w/a")],
         link_then_append)
    case("link", "enoent.src", [DIRS["w"]], lambda: os.link("w/no", "w/b"))
    case("link", "enoent.dst_parent", [DIRS["w"], E("regular", "w/a")], lambda: os.link("w/a", "w/no/b"))
    case("link", "enotdir.src_prefix", [DIRS["w"], E("regular", "w/f")], lambda: os.link("w/f/a", "w/b"))
    case("link", "enotdir.dst_prefix", [DIRS["w"], E("regular", "w/f"), E("regular", "w/a")],
         lambda: os.link("w/a", "w/f/b"))
    case("link", "enametoolong", [DIRS["w"], E("regular", "w/a")], lambda: os.link("w/a", "w/" + LONG))
    case("link", "dst_trailing_slash", [DIRS["w"], E("regular", "w/a")], lambda: os.link("w/a", "w/b/"))
    for d in DIRS:
        for own in ("me", "other"):
            for fm in (0o644, 0o600, 0o666):
                case("link", f"perm.{d}.{own}{fm:03o}", [DIRS[d], DIRS["w"], E("regular", f"{d}/a", fm, own)],
                     lambda d=d: os.link(f"{d}/a", "w/b"))
        case("link", f"perm.into_{d}", [DIRS[d], E("dir", "m", 0o755, "me"), E("regular", "m/a")],
             lambda d=d: os.link("m/a", f"{d}/b"))

    # --- symlink -----------------------------------------------------------------------------
    for tgt_name, tgt in (("relative", "x"), ("absolute", "/nonexistent/x"), ("dotdot", "../w"),
                          ("len1024", "t" * 1024), ("len4095", "t" * 4095), ("len4096", "t" * 4096),
                          ("empty", ""), ("self", "w/l"), ("name255", MAX), ("name256", LONG)):
        case("symlink", f"target.{tgt_name}", [DIRS["w"]], lambda tgt=tgt: os.symlink(tgt, "w/l"), [T("w")])
    for t in ALL_TYPES:
        case("symlink", f"eexist.{t}", [DIRS["w"]] + of_type(t, "w/l"), lambda: os.symlink("x", "w/l"), [T("w")])
    case("symlink", "enoent", [DIRS["w"]], lambda: os.symlink("x", "w/no/l"))
    case("symlink", "enotdir", [DIRS["w"], E("regular", "w/f")], lambda: os.symlink("x", "w/f/l"))
    case("symlink", "enametoolong", [DIRS["w"]], lambda: os.symlink("x", "w/" + LONG))
    case("symlink", "trailing_slash", [DIRS["w"]], lambda: os.symlink("x", "w/l/"))
    for d in DIRS:
        case("symlink", f"perm.{d}", [DIRS[d]], lambda d=d: os.symlink("x", f"{d}/l"))
    for t in ALL_TYPES:
        case("symlink", f"readlink.{t}", [DIRS["w"]] + of_type(t, "w/x"), lambda: os.readlink("w/x"))
        case("symlink", f"stat_through.{t}", [DIRS["w"]] + of_type(t, "w/x"), lambda: ret_stat("w/x"))
    case("symlink", "readlink.enoent", [DIRS["w"]], lambda: os.readlink("w/no"))
    case("symlink", "readlink.long", [DIRS["w"], E("symlink", "w/l", extra="t" * 4095)],
         lambda: len(os.readlink("w/l")))
    case("symlink", "chain_to_file", [DIRS["w"], E("regular", "w/f"), E("symlink", "w/l1", extra="f"),
                                      E("symlink", "w/l2", extra="l1")], lambda: ret_stat("w/l2"))
    case("symlink", "eloop.40", [DIRS["w"], E("regular", "w/f"), E("symlink", "w/l0", extra="f")]
         + [E("symlink", f"w/l{i}", extra=f"l{i - 1}") for i in range(1, 42)], lambda: ret_stat("w/l41"))
    case("symlink", "lchown", [DIRS["w"]] + of_type("symlink", "w/l"),
         lambda: os.chown("w/l", os.getuid(), os.getgid(), follow_symlinks=False), [T("w/l", "c")])

    # --- truncate ----------------------------------------------------------------------------
    for name, size in (("grow", 100), ("shrink", 2), ("same", 4), ("zero", 0), ("to_1MiB", 1 << 20),
                       ("to_2GiB", 2 << 30), ("negative", -1)):
        case("truncate", f"regular.{name}", [DIRS["w"], E("regular", "w/f")],
             lambda size=size: os.truncate("w/f", size), [T("w/f")])
        case("truncate", f"ftruncate.{name}", [DIRS["w"], E("regular", "w/f")],
             lambda size=size: ftruncate("w/f", os.O_WRONLY, size), [T("w/f")])
    case("truncate", "ftruncate.rdonly_fd", [DIRS["w"], E("regular", "w/f")],
         lambda: ftruncate("w/f", os.O_RDONLY, 0), [T("w/f")])
    case("truncate", "grow_then_read", [DIRS["w"], E("regular", "w/f")],
         lambda: (os.truncate("w/f", 10), open("w/f", "rb").read())[1])
    case("truncate", "shrink_then_grow_reads_zeros", [DIRS["w"], E("regular", "w/f")],
         lambda: (os.truncate("w/f", 1), os.truncate("w/f", 4), open("w/f", "rb").read())[2])
    for t in ALL_TYPES:
        if t not in ("regular", "block", "char"):  # devices: opening one is not the point
            case("truncate", f"type.{t}", [DIRS["w"]] + of_type(t, "w/x"), lambda: os.truncate("w/x", 0))
    case("truncate", "enoent", [DIRS["w"]], lambda: os.truncate("w/no", 0))
    case("truncate", "enotdir.prefix", [DIRS["w"], E("regular", "w/f")], lambda: os.truncate("w/f/x", 0))
    case("truncate", "enametoolong", [DIRS["w"]], lambda: os.truncate("w/" + LONG, 0))
    for fm in (0o644, 0o444, 0o666, 0o4755, 0o2755, 0o6777, 0o000):
        for own in ("me", "other"):
            case("truncate", f"perm.{own}{fm:o}", [DIRS["w"], E("regular", "w/f", fm, own)],
                 lambda: os.truncate("w/f", 1), [T("w/f")])
    case("truncate", "perm.no_search", [E("dir", "d", 0o666, "me"), E("regular", "d/f", 0o666, "me")],
         lambda: os.truncate("d/f", 1))

    # --- mknod -------------------------------------------------------------------------------
    for tname, tbits in (("fifo", stat.S_IFIFO), ("socket", stat.S_IFSOCK), ("regular", stat.S_IFREG),
                         ("zero_type", 0), ("char", stat.S_IFCHR), ("block", stat.S_IFBLK),
                         ("dir", stat.S_IFDIR), ("bad_type", 0o170000), ("symlink", stat.S_IFLNK)):
        for m in (0o644, 0o777, 0o4755):
            case("mknod", f"{tname}.mode{m:o}", [DIRS["w"]],
                 lambda tbits=tbits, m=m: os.mknod("w/n", tbits | m, os.makedev(1, 3)), [T("w")])
    case("mknod", "fifo.umask022", [DIRS["w"]], lambda: os.mkfifo("w/n", 0o666), [T("w")], umask=0o022)
    case("mknod", "socket.bind", [DIRS["w"]], bind_socket)
    for t in ALL_TYPES:
        case("mknod", f"eexist.{t}", [DIRS["w"]] + of_type(t, "w/n"), lambda: os.mkfifo("w/n", 0o644))
    case("mknod", "enoent", [DIRS["w"]], lambda: os.mkfifo("w/no/n"))
    case("mknod", "enotdir", [DIRS["w"], E("regular", "w/f")], lambda: os.mkfifo("w/f/n"))
    case("mknod", "enametoolong", [DIRS["w"]], lambda: os.mkfifo("w/" + LONG))
    for d in DIRS:
        case("mknod", f"perm.fifo.{d}", [DIRS[d]], lambda d=d: os.mkfifo(f"{d}/n"), [T(d)])
        case("mknod", f"perm.char.{d}", [DIRS[d]], lambda d=d: os.mknod(f"{d}/n", stat.S_IFCHR | 0o644,
                                                                        os.makedev(1, 3)))
    case("mknod", "fifo.open_rw_nonblock", [DIRS["w"], E("fifo", "w/p", 0o666)], fifo_roundtrip)
    case("mknod", "fifo.open_wronly_no_reader", [DIRS["w"], E("fifo", "w/p", 0o666)],
         open_op("w/p", os.O_WRONLY))
    case("mknod", "char.read_null", [DIRS["w"], E("char", "w/c", 0o666)],
         lambda: open("w/c", "rb").read(10))

    # --- chmod / chown (ctime, setuid clearing) ----------------------------------------------
    for own in ("me", "other"):
        for m in (0o755, 0o4755, 0o2755, 0o1755, 0o7777, 0o000):
            case("chmod", f"regular.{own}.to{m:o}", [DIRS["w"], E("regular", "w/f", 0o644, own)],
                 lambda m=m: os.chmod("w/f", m), [T("w/f", "mc")])
            case("chmod", f"dir.{own}.to{m:o}", [DIRS["w"], E("dir", "w/d", 0o755, own)],
                 lambda m=m: os.chmod("w/d", m), [T("w/d", "mc")])
    case("chmod", "through_symlink", [DIRS["w"]] + of_type("symlink_f", "w/l"), lambda: os.chmod("w/l", 0o600))
    case("chmod", "enoent", [DIRS["w"]], lambda: os.chmod("w/no", 0o600))
    case("chmod", "setgid.group_not_mine", [DIRS["w"], E("regular", "w/f", 0o644, ("me", OTHER[1]))],
         lambda: os.chmod("w/f", 0o2755))
    for own in ("me", "other"):
        for m in (0o4755, 0o2755, 0o6755, 0o2745):
            for name, who in (("to_other", lambda: OTHER), ("to_self", lambda: (os.getuid(), os.getgid())),
                              ("nothing", lambda: (-1, -1)), ("group_only", lambda: (-1, OTHER[1]))):
                case("chown", f"{own}{m:o}.{name}", [DIRS["w"], E("regular", "w/f", m, own)],
                     lambda who=who: os.chown("w/f", *who()), [T("w/f", "mc")])
        case("chown", f"dir.{own}.to_other", [DIRS["w"], E("dir", "w/d", 0o2755, own)],
             lambda: os.chown("w/d", *OTHER), [T("w/d", "c")])
    case("chown", "through_symlink", [DIRS["w"]] + of_type("symlink_f", "w/l"),
         lambda: os.chown("w/l", os.getuid(), os.getgid()))

    # --- write (clears setuid, times) --------------------------------------------------------
    for own in ("me", "other"):
        for m in (0o4777, 0o2777, 0o6777, 0o2767, 0o666):
            case("write", f"{own}{m:o}", [DIRS["w"], E("regular", "w/f", m, own)],
                 open_op("w/f", os.O_WRONLY, write=b"Z"), [T("w/f", "mc")])
    case("write", "append_twice", [DIRS["w"], E("regular", "w/f")],
         lambda: [open_op("w/f", os.O_WRONLY | os.O_APPEND, write=b"12")() for _ in range(2)])
    case("write", "sparse_then_size", [DIRS["w"], E("regular", "w/f")], write_sparse)
    case("write", "utime_then_stat", [DIRS["w"], E("regular", "w/f")],
         lambda: (os.utime("w/f", (1000000000, 1000000000)), int(os.stat("w/f").st_mtime))[1], [T("w/f", "c")])
    case("write", "utime_now_not_owner", [DIRS["w"], E("regular", "w/f", 0o666, "other")],
         lambda: os.utime("w/f"), [T("w/f", "c")])
    case("write", "utime_set_not_owner", [DIRS["w"], E("regular", "w/f", 0o666, "other")],
         lambda: os.utime("w/f", (5, 5)), [T("w/f", "c")])


def write_sparse():
    fd = os.open("w/f", os.O_WRONLY)
    try:
        os.pwrite(fd, b"E", 9)
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def link_then_append():
    os.link("w/a", "w/b")
    with open("w/b", "ab") as f:
        f.write(b"more")
    return os.stat("w/a").st_size


def unlink_open(what):
    """What an open file still allows after its last name is gone (tmpfile-style)."""
    def use(fd):
        if what == "write_read":
            os.pwrite(fd, b"after", 0)
            return os.pread(fd, 5, 0)
        if what == "fstat":
            st = os.fstat(fd)
            return [st.st_nlink, st.st_size]
        if what == "ftruncate":
            os.ftruncate(fd, 1)
            return os.pread(fd, 5, 0)
        os.fchmod(fd, 0o600)
        return None
    return fd_after("w/f", lambda: os.unlink("w/f"), use)


def fd_after(path, change, use):
    fd = os.open(path, os.O_RDWR)
    try:
        change()
        return use(fd)
    finally:
        os.close(fd)


def rename_open():
    fd = os.open("w/a", os.O_RDONLY)
    try:
        os.rename("w/a", "w/b")
        return os.pread(fd, 5, 0)
    finally:
        os.close(fd)


def ftruncate(p, flags, size):
    fd = os.open(p, flags)
    try:
        os.ftruncate(fd, size)
    finally:
        os.close(fd)


def bind_socket():
    import socket
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind("w/s")
        s.listen(1)
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.settimeout(2)
        c.connect("w/s")
        a, _ = s.accept()
        c.sendall(b"ping")
        got = a.recv(4)
        a.close()
        c.close()
        return got
    finally:
        s.close()


def fifo_roundtrip():
    r = os.open("w/p", os.O_RDONLY | os.O_NONBLOCK)
    w = os.open("w/p", os.O_WRONLY | os.O_NONBLOCK)
    try:
        os.write(w, b"through")
        select.select([r], [], [], 2)
        return os.read(r, 16)
    finally:
        os.close(w)
        os.close(r)


# ---------------------------------------------------------------------------------------------
# Running


def kind_of(mode):
    for test, ch in ((stat.S_ISREG, "reg"), (stat.S_ISDIR, "dir"), (stat.S_ISLNK, "lnk"),
                     (stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "sock"), (stat.S_ISCHR, "chr"),
                     (stat.S_ISBLK, "blk")):
        if test(mode):
            return ch
    return "?"


def snapshot(base, me):
    """Everything observable under base, as lines (owners as me/other/root)."""
    out = []
    for root, dirs, files in os.walk(base):
        dirs.sort()
        for n in sorted(dirs + files):
            p = os.path.join(root, n)
            rel = os.path.relpath(p, base)
            st = os.lstat(p)
            k = kind_of(st.st_mode)
            uid = {me[0]: "me", OTHER[0]: "other", 0: "root"}.get(st.st_uid, str(st.st_uid))
            gid = {me[1]: "me", OTHER[1]: "other", 0: "root"}.get(st.st_gid, str(st.st_gid))
            line = f"{rel} {k} {stat.S_IMODE(st.st_mode):04o} n{st.st_nlink} {uid}:{gid}"
            if k == "reg":
                line += f" s{st.st_size}"
                if st.st_size <= 64:
                    with open(p, "rb") as f:
                        line += " " + repr(f.read())
            elif k == "lnk":
                t = os.readlink(p)
                line += " -> " + (t if len(t) < 80 else f"<{len(t)} chars>")
            elif k in ("chr", "blk"):
                line += f" {os.major(st.st_rdev)},{os.minor(st.st_rdev)}"
            out.append(line)
    return out


def times_of(base, rel):
    try:
        st = os.lstat(os.path.join(base, rel))
        return (st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    except OSError:
        return None


def result_of(fn):
    try:
        v = fn()
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
    if v is None:
        return "ok"
    if isinstance(v, bytes):
        v = v.decode("latin-1")
    return "ok:" + json.dumps(v, default=str)


class Timeout(Exception):
    pass


def on_alarm(_sig, _frame):
    raise Timeout()


def run_ops(jobs, who):
    """Runs every (case, base) of jobs in order, in one child process (as who = (uid, gid),
    or root) with cwd base and the case's umask; returns their results. A call that does
    not return within TIMEOUT_S is interrupted and recorded as TIMEOUT."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            signal.signal(signal.SIGALRM, on_alarm)
            if who != (0, 0):
                os.setgroups([])
                os.setgid(who[1])
                os.setuid(who[0])
            out = []
            for c, base in jobs:
                try:
                    os.umask(c["umask"])
                    os.chdir(base)
                    signal.alarm(TIMEOUT_S)
                    try:
                        res = result_of(c["op"])
                    finally:
                        signal.alarm(0)
                except Timeout:
                    res = "TIMEOUT"
                except Exception as e:  # noqa: BLE001 - a case must not take the run down
                    res = f"ERROR {type(e).__name__}: {e}"
                out.append(res)
            os.write(w, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    chunks = []
    while True:
        data = os.read(r, 1 << 20)
        if not data:
            break
        chunks.append(data)
    os.close(r)
    os.waitpid(pid, 0)
    got = json.loads(b"".join(chunks).decode() or "[]")
    if len(got) != len(jobs):
        sys.exit(f"posix_diff.py: the child running the operations died after {len(got)} of {len(jobs)}")
    return got


def set_up(c, top, idx, who):
    """Makes case c's fresh directory under top and its entries; returns (base, error)."""
    base = os.path.join(top, f"{idx:04d}")
    os.mkdir(base)
    os.chmod(base, 0o755)
    old = os.umask(0)
    try:
        done = []
        for s in c["setup"]:
            d = s[1].split("/")[0]
            if "/" in s[1] and d in DIRS and DIRS[d] not in done:
                make(base, DIRS[d], who)
                done.append(DIRS[d])
            if s not in done:
                make(base, s, who)
                done.append(s)
    except OSError as e:
        return base, f"SETUP {errno.errorcode.get(e.errno)} at {os.path.relpath(e.filename or base, base)}"
    finally:
        os.umask(old)
    return base, None


def run_all(cases, tops, who):
    """Every case on every side of tops, as who: all set-ups, the times before, one clock
    tick, every operation, then what is observed. Returns, per case, one record per side."""
    bases = [[set_up(c, top, i, who) for top in tops] for i, c in enumerate(cases)]
    before = [[{t[0]: times_of(b, t[0]) for t in c["times"]} for b, _ in sides]
              for c, sides in zip(cases, bases)]
    time.sleep(TICK_S)
    jobs = [(c, b) for c, sides in zip(cases, bases) for b, err in sides if not err]
    done = iter(run_ops(jobs, who))
    results = [[err or next(done) for b, err in sides] for sides in bases]
    out = []
    for c, sides, bef, res in zip(cases, bases, before, results):
        recs = []
        for (b, _), tb, r in zip(sides, bef, res):
            tm = {}
            for rel_b, rel_a, fields in c["times"]:
                x, y = tb[rel_b], times_of(b, rel_a)
                if x is None or y is None:
                    tm[f"{rel_b}->{rel_a}"] = "absent"
                    continue
                if x[2] != y[2]:  # another file there now (a rename that failed, say)
                    tm[f"{rel_b}->{rel_a}"] = "other file"
                    continue
                s = ""
                if "m" in fields:
                    s += "m+" if y[0] != x[0] else "m="
                if "c" in fields:
                    s += "c+" if y[1] != x[1] else "c="
                tm[f"{rel_b}->{rel_a}"] = s
            recs.append({"result": r, "state": snapshot(b, who), "times": tm})
        out.append(recs)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("target")
    ap.add_argument("reference")
    ap.add_argument("--as-user", action="append", default=[], metavar="UID:GID")
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout")
    ap.add_argument("--report-only", action="store_true", help="exit 0 even if cases differ")
    ap.add_argument("--only", help="run only cases whose name contains this")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--write-cache", action="store_true",
                    help="the target is a mount with the kernel's write cache (no passthrough): "
                         "its own known differences count as known too")
    ap.add_argument("--killpriv-v2", action="store_true",
                    help="the target is a mount with FUSE_HANDLE_KILLPRIV_V2 but no write cache "
                         "(--no-passthrough --direct-io): its known differences count as known")
    a = ap.parse_args()
    if a.write_cache:
        KNOWN.update(KNOWN_WRITE_CACHE)
    if a.killpriv_v2:
        KNOWN.update(KNOWN_KILLPRIV)
    build()
    names = [c["name"] for c in CASES]
    dup = {n for n in names if names.count(n) > 1}
    assert not dup, f"duplicate case names: {sorted(dup)}"
    cases = [c for c in CASES if not a.only or a.only in c["name"]]
    if a.list:
        for c in cases:
            print(c["name"])
        return 0
    if os.geteuid() != 0:
        sys.exit("posix_diff.py: run as root (the set-up makes other users' files and device nodes)")
    runs = [("root", (0, 0))]
    for u in a.as_user:
        uid, gid = (int(x) for x in u.split(":"))
        runs.append((str(uid), (uid, gid)))
    stamp = f"posix-diff-{os.getpid()}-{int(time.time())}"
    report = {"cases": len(cases), "runs": {}, "differences": []}
    t0 = time.monotonic()
    for tag, who in runs:
        tops = []
        for d in (a.target, a.reference):
            top = os.path.join(d, f"{stamp}-{tag}")
            os.mkdir(top)
            os.chmod(top, 0o755)
            tops.append(top)
        fam = {}
        for c, got in zip(cases, run_all(cases, tops, who)):
            f = fam.setdefault(c["family"], {"cases": 0, "passed": 0, "differing": 0})
            f["cases"] += 1
            if got[0] == got[1]:
                f["passed"] += 1
                continue
            f["differing"] += 1
            key = next((k for k in (f"{tag}:{c['name']}", c["name"]) if k in KNOWN or k in PENDING), None)
            if key in PENDING:
                key = c["name"] if c["name"] in PENDING else key
            diff = {"run": tag, "case": c["name"], "family": c["family"],
                    "status": "known" if key in KNOWN else "pending" if key in PENDING else "new",
                    "reason": KNOWN.get(key) or PENDING.get(key),
                    "target": got[0], "reference": got[1]}
            report["differences"].append(diff)
        total = sum(f["cases"] for f in fam.values())
        passed = sum(f["passed"] for f in fam.values())
        report["runs"][tag] = {"cases": total, "passed": passed, "differing": total - passed, "families": fam}
    report["seconds"] = round(time.monotonic() - t0, 1)
    new = [d for d in report["differences"] if d["status"] == "new"]
    report["new"] = len(new)
    report["pending"] = sorted({d["case"] for d in report["differences"] if d["status"] == "pending"})
    if a.json:
        print(json.dumps(report, indent=1))
    else:
        for d in report["differences"]:
            print(f"DIFF [{d['run']}] {d['case']} ({d['status']}{': ' + d['reason'] if d['reason'] else ''})")
            for side in ("target", "reference"):
                print(f"    {side:9}: {d[side]['result']}")
            print_detail(d)
        for tag, r in report["runs"].items():
            print(f"run {tag}: {r['cases']} cases, {r['passed']} passed "
                  f"({100.0 * r['passed'] / max(r['cases'], 1):.1f}%), {r['differing']} differing")
            for name, f in sorted(r["families"].items()):
                print(f"    {name:9} {f['cases']:4} cases {f['passed']:4} passed {f['differing']:4} differing")
        if report["pending"]:
            print("PENDING (bugs to fix, not failing the run):")
            for reason in sorted({PENDING[c] for c in report["pending"] if c in PENDING}):
                names = [c for c in report["pending"] if PENDING.get(c) == reason]
                print(f"  {len(names)} cases: {reason}")
        print(f"{len(report['differences'])} differences: {report['new']} new, "
              f"{len(report['pending'])} pending cases, in {report['seconds']} s")
    return 1 if new and not a.report_only else 0


def print_detail(d):
    t, r = d["target"], d["reference"]
    if t["times"] != r["times"]:
        print(f"    times    : target {t['times']} reference {r['times']}")
    if t["state"] != r["state"]:
        ts, rs = set(t["state"]), set(r["state"])
        for line in t["state"]:
            if line not in rs:
                print(f"    target   + {line}")
        for line in r["state"]:
            if line not in ts:
                print(f"    reference+ {line}")


if __name__ == "__main__":
    sys.exit(main())
