//! The requests between a striped mount and its cache servers, as RESP arrays of bulk strings
//! (the protocol crate's frames and client: one protocol in the project, and `redis-cli` can
//! talk to a server when someone needs to look).
//!
//! Every request that names a file carries who asks for it: `VERB uid gid groups path …`,
//! `groups` the supplementary groups as decimal numbers joined by commas (empty for none). An
//! error reply that stands for an errno is `-ERRNO <n> <text>`, so the application gets the
//! server's errno (EACCES, ENOSPC, EDQUOT, EFBIG) rather than a generic EIO.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use bytes::Bytes;
use pliant_proto::Frame;

use crate::core::Caller;

/// Longest write one request carries, bytes: the largest FUSE write (1 MiB) cut at stripe
/// boundaries is smaller; the bound is what a server lets one frame make it allocate.
pub const MAX_WRITE: usize = 16 << 20;

/// Longest read one request asks for, bytes (as [`MAX_WRITE`]).
pub const MAX_READ: u64 = 16 << 20;

/// A request to a cache server.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// Up to `len` bytes at `offset`; fewer where the server's data of the file ends.
    Read {
        /// Who asks.
        who: Caller,
        /// Relative to the backing directory.
        path: PathBuf,
        /// The file's inode number when the mount opened it: a name that leads to another
        /// file by now (renamed or unlinked through another mount) gets ESTALE, not its data.
        ino: u64,
        /// Where.
        offset: u64,
        /// How many bytes at most.
        len: u64,
    },
    /// `data` at `offset`.
    Write {
        /// Who asks.
        who: Caller,
        /// Relative to the backing directory.
        path: PathBuf,
        /// The file's inode number when the mount opened it: a name that leads to another
        /// file by now (renamed or unlinked through another mount) gets ESTALE, not its data.
        ino: u64,
        /// Where.
        offset: u64,
        /// What.
        data: Bytes,
    },
    /// The file's size and modification time as this server knows them.
    Size {
        /// Who asks.
        who: Caller,
        /// Relative to the backing directory.
        path: PathBuf,
    },
    /// Make what this server holds of the file durable, as its `--fsync` says.
    Fsync {
        /// Who asks.
        who: Caller,
        /// Relative to the backing directory.
        path: PathBuf,
        /// The file's inode number when the mount opened it: a name that leads to another
        /// file by now (renamed or unlinked through another mount) gets ESTALE, not its data.
        ino: u64,
    },
    /// Cut (or extend) the file to `size`, here and in the backing directory.
    Truncate {
        /// Who asks.
        who: Caller,
        /// Relative to the backing directory.
        path: PathBuf,
        /// The new size.
        size: u64,
        /// The inode an open file was opened as (ESTALE if the name leads elsewhere now); 0:
        /// a truncation by name.
        ino: u64,
    },
    /// The name was unlinked in the backing directory: what this server holds under it goes.
    Unlinked {
        /// Who asks.
        who: Caller,
        /// Relative to the backing directory.
        path: PathBuf,
    },
    /// `from` was renamed to `to` in the backing directory (swapped with it if `exchange`).
    Renamed {
        /// Who asks.
        who: Caller,
        /// The old name.
        from: PathBuf,
        /// The new name.
        to: PathBuf,
        /// `RENAME_EXCHANGE`.
        exchange: bool,
    },
    /// Take, change or release a byte-range lock (`fcntl(F_SETLK)`) of the file whose first
    /// stripe this server owns.
    Lock {
        /// Who asks.
        who: Caller,
        /// Relative to the backing directory.
        path: PathBuf,
        /// The file's inode number.
        ino: u64,
        /// What it asks: the mount's session, the kernel's lock owner, the kind, the range
        /// (`end` inclusive) and the holder's pid.
        lock: LockRequest,
    },
    /// The first lock that conflicts with `lock` (`fcntl(F_GETLK)`).
    GetLock {
        /// Who asks.
        who: Caller,
        /// Relative to the backing directory.
        path: PathBuf,
        /// The file's inode number.
        ino: u64,
        /// What would be asked.
        lock: LockRequest,
    },
    /// The mount's session is alive: its locks stay.
    Renew {
        /// The session.
        session: u64,
    },
    /// The mount is going: its locks go.
    UnlockAll {
        /// The session.
        session: u64,
    },
    /// Write every dirty byte back to the backing directory and sync it (a job's teardown).
    Flush,
    /// The server's counters, as JSON.
    Stats,
}

/// A lock as a request carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockRequest {
    /// The mount's session.
    pub session: u64,
    /// The kernel's lock owner.
    pub owner: u64,
    /// Read, write or unlock.
    pub kind: super::locks::Kind,
    /// First byte.
    pub start: u64,
    /// Last byte, inclusive.
    pub end: u64,
    /// The holder's pid.
    pub pid: u32,
}

impl LockRequest {
    fn encode(&self, a: &mut Vec<Vec<u8>>) {
        use super::locks::Kind;
        let kind: &[u8] = match self.kind {
            Kind::Read => b"R",
            Kind::Write => b"W",
            Kind::Unlock => b"U",
        };
        a.extend([
            self.session.to_string().into_bytes(),
            self.owner.to_string().into_bytes(),
            kind.to_vec(),
            self.start.to_string().into_bytes(),
            self.end.to_string().into_bytes(),
            self.pid.to_string().into_bytes(),
        ]);
    }
}

/// A request's first arguments: the verb, who asks, and the path.
fn head(verb: &str, who: &Caller, path: &Path) -> Vec<Vec<u8>> {
    let groups: Vec<String> = who.groups.iter().map(u32::to_string).collect();
    vec![
        verb.as_bytes().to_vec(),
        who.uid.to_string().into_bytes(),
        who.gid.to_string().into_bytes(),
        groups.join(",").into_bytes(),
        path.as_os_str().as_bytes().to_vec(),
    ]
}

/// Appends `FS.WRITE` of `data` to `out` as RESP, the data copied once, into `out` (the mount's
/// write path: [`Request::encode`] would copy it twice more).
pub fn encode_write(
    who: &Caller,
    path: &Path,
    ino: u64,
    offset: u64,
    data: &[u8],
    out: &mut Vec<u8>,
) {
    let mut args = head("FS.WRITE", who, path);
    args.extend([
        ino.to_string().into_bytes(),
        offset.to_string().into_bytes(),
    ]);
    out.reserve(data.len() + 256);
    out.extend_from_slice(format!("*{}\r\n", args.len() + 1).as_bytes());
    for a in args.iter().map(Vec::as_slice).chain(std::iter::once(data)) {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

impl Request {
    /// The request as a command's arguments.
    pub fn encode(&self) -> Vec<Vec<u8>> {
        let num = |n: u64| n.to_string().into_bytes();
        match self {
            Request::Read {
                who,
                path,
                ino,
                offset,
                len,
            } => {
                let mut a = head("FS.READ", who, path);
                a.extend([num(*ino), num(*offset), num(*len)]);
                a
            }
            Request::Write {
                who,
                path,
                ino,
                offset,
                data,
            } => {
                let mut a = head("FS.WRITE", who, path);
                a.extend([num(*ino), num(*offset), data.to_vec()]);
                a
            }
            Request::Size { who, path } => head("FS.SIZE", who, path),
            Request::Fsync { who, path, ino } => {
                let mut a = head("FS.FSYNC", who, path);
                a.push(num(*ino));
                a
            }
            Request::Truncate {
                who,
                path,
                size,
                ino,
            } => {
                let mut a = head("FS.TRUNCATE", who, path);
                a.extend([num(*size), num(*ino)]);
                a
            }
            Request::Unlinked { who, path } => head("FS.UNLINKED", who, path),
            Request::Renamed {
                who,
                from,
                to,
                exchange,
            } => {
                let mut a = head("FS.RENAMED", who, from);
                a.extend([
                    to.as_os_str().as_bytes().to_vec(),
                    num(u64::from(*exchange)),
                ]);
                a
            }
            Request::Lock {
                who,
                path,
                ino,
                lock,
            } => {
                let mut a = head("FS.SETLK", who, path);
                a.push(num(*ino));
                lock.encode(&mut a);
                a
            }
            Request::GetLock {
                who,
                path,
                ino,
                lock,
            } => {
                let mut a = head("FS.GETLK", who, path);
                a.push(num(*ino));
                lock.encode(&mut a);
                a
            }
            Request::Renew { session } => vec![b"FS.RENEW".to_vec(), num(*session)],
            Request::UnlockAll { session } => vec![b"FS.UNLOCKALL".to_vec(), num(*session)],
            Request::Flush => vec![b"FS.FLUSH".to_vec()],
            Request::Stats => vec![b"FS.STATS".to_vec()],
        }
    }

    /// A request from a command's arguments; the error is the reply's text.
    pub fn decode(args: &[Bytes]) -> Result<Request, String> {
        let verb = args
            .first()
            .map(|v| String::from_utf8_lossy(v).to_ascii_uppercase())
            .ok_or("empty request")?;
        let want = |n: usize| {
            if args.len() == n {
                Ok(())
            } else {
                Err(format!(
                    "wrong number of arguments for '{verb}': {} given, {n} expected",
                    args.len()
                ))
            }
        };
        let num = |i: usize, what: &str| -> Result<u64, String> {
            std::str::from_utf8(&args[i])
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| format!("{verb}: {what} is not a number"))
        };
        let who = || -> Result<Caller, String> {
            let uid = num(1, "uid")? as u32;
            let gid = num(2, "gid")? as u32;
            let groups = std::str::from_utf8(&args[3]).map_err(|_| "groups: not text")?;
            let groups = if groups.is_empty() {
                Vec::new()
            } else {
                groups
                    .split(',')
                    .map(|g| g.parse::<u32>())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|_| format!("{verb}: groups are not numbers"))?
            };
            if groups.len() > 65_536 {
                return Err(format!("{verb}: more groups than Linux allows"));
            }
            Ok(Caller { uid, gid, groups })
        };
        let path = |i: usize| relative(&args[i]).map_err(|e| format!("{verb}: {e}"));
        Ok(match verb.as_str() {
            "FS.READ" => {
                want(8)?;
                let len = num(7, "length")?;
                if len > MAX_READ {
                    return Err(format!("{verb}: length {len} over {MAX_READ}"));
                }
                Request::Read {
                    who: who()?,
                    path: path(4)?,
                    ino: num(5, "inode")?,
                    offset: num(6, "offset")?,
                    len,
                }
            }
            "FS.WRITE" => {
                want(8)?;
                if args[7].len() > MAX_WRITE {
                    return Err(format!("{verb}: data over {MAX_WRITE} bytes"));
                }
                Request::Write {
                    who: who()?,
                    path: path(4)?,
                    ino: num(5, "inode")?,
                    offset: num(6, "offset")?,
                    data: args[7].clone(),
                }
            }
            "FS.SIZE" => {
                want(5)?;
                Request::Size {
                    who: who()?,
                    path: path(4)?,
                }
            }
            "FS.FSYNC" => {
                want(6)?;
                Request::Fsync {
                    who: who()?,
                    path: path(4)?,
                    ino: num(5, "inode")?,
                }
            }
            "FS.TRUNCATE" => {
                want(7)?;
                Request::Truncate {
                    who: who()?,
                    path: path(4)?,
                    size: num(5, "size")?,
                    ino: num(6, "inode")?,
                }
            }
            "FS.UNLINKED" => {
                want(5)?;
                Request::Unlinked {
                    who: who()?,
                    path: path(4)?,
                }
            }
            "FS.RENAMED" => {
                want(7)?;
                Request::Renamed {
                    who: who()?,
                    from: path(4)?,
                    to: path(5)?,
                    exchange: num(6, "exchange")? != 0,
                }
            }
            "FS.SETLK" | "FS.GETLK" => {
                want(12)?;
                use super::locks::Kind;
                let kind = match &args[8][..] {
                    b"R" => Kind::Read,
                    b"W" => Kind::Write,
                    b"U" => Kind::Unlock,
                    _ => return Err(format!("{verb}: kind must be R, W or U")),
                };
                let (start, end) = (num(9, "start")?, num(10, "end")?);
                if start > end {
                    return Err(format!("{verb}: start {start} after end {end}"));
                }
                let lock = LockRequest {
                    session: num(6, "session")?,
                    owner: num(7, "owner")?,
                    kind,
                    start,
                    end,
                    pid: num(11, "pid")? as u32,
                };
                let (who, path, ino) = (who()?, path(4)?, num(5, "inode")?);
                if verb == "FS.SETLK" {
                    Request::Lock {
                        who,
                        path,
                        ino,
                        lock,
                    }
                } else {
                    Request::GetLock {
                        who,
                        path,
                        ino,
                        lock,
                    }
                }
            }
            "FS.RENEW" => {
                want(2)?;
                Request::Renew {
                    session: num(1, "session")?,
                }
            }
            "FS.UNLOCKALL" => {
                want(2)?;
                Request::UnlockAll {
                    session: num(1, "session")?,
                }
            }
            "FS.FLUSH" => {
                want(1)?;
                Request::Flush
            }
            "FS.STATS" => {
                want(1)?;
                Request::Stats
            }
            _ => return Err(format!("unknown command '{verb}'")),
        })
    }
}

/// A path a request names: relative, without `..`, `.` or an empty name (the server reaches
/// files beneath its backing directory only, whatever a client sends).
pub fn relative(bytes: &[u8]) -> Result<PathBuf, String> {
    let p = Path::new(OsStr::from_bytes(bytes));
    if bytes.is_empty() || bytes.contains(&0) {
        return Err("empty path or a NUL byte in it".into());
    }
    if !p.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(format!(
            "path {:?} must be relative to the backing directory, without '.' or '..'",
            p.display()
        ));
    }
    Ok(p.to_path_buf())
}

/// The reply for an error: `-ERRNO n text` for an errno, `-ERR text` otherwise.
pub fn error_frame(e: &std::io::Error) -> Frame {
    match e.raw_os_error() {
        Some(n) => Frame::error(format!("ERRNO {n} {e}")),
        None => Frame::error(format!("ERR {e}")),
    }
}

/// The error a reply stands for: its errno, or EIO for anything else (with the text logged by
/// the caller).
pub fn reply_error(text: &str) -> std::io::Error {
    if let Some(rest) = text.strip_prefix("ERRNO ")
        && let Some(n) = rest.split(' ').next().and_then(|n| n.parse::<i32>().ok())
        && n > 0
    {
        return std::io::Error::from_raw_os_error(n);
    }
    std::io::Error::from_raw_os_error(nix::libc::EIO)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who() -> Caller {
        Caller {
            uid: 1000,
            gid: 100,
            groups: vec![4, 27],
        }
    }

    #[test]
    fn every_request_survives_its_encoding() {
        let all = vec![
            Request::Read {
                who: who(),
                path: "a/b".into(),
                ino: 99,
                offset: 7,
                len: 4096,
            },
            Request::Write {
                who: Caller::root(),
                path: "x y".into(),
                ino: 1,
                offset: u64::MAX - 1,
                data: Bytes::from_static(b"\r\n\0data"),
            },
            Request::Size {
                who: who(),
                path: "f".into(),
            },
            Request::Fsync {
                who: who(),
                path: "f".into(),
                ino: 3,
            },
            Request::Truncate {
                who: who(),
                path: "f".into(),
                size: 3,
                ino: 8,
            },
            Request::Unlinked {
                who: who(),
                path: "d/f".into(),
            },
            Request::Renamed {
                who: who(),
                from: "d".into(),
                to: "e".into(),
                exchange: true,
            },
            Request::Lock {
                who: who(),
                path: "f".into(),
                ino: 5,
                lock: LockRequest {
                    session: 1 << 60,
                    owner: 42,
                    kind: super::super::locks::Kind::Write,
                    start: 0,
                    end: u64::MAX,
                    pid: 777,
                },
            },
            Request::GetLock {
                who: who(),
                path: "f".into(),
                ino: 5,
                lock: LockRequest {
                    session: 3,
                    owner: 4,
                    kind: super::super::locks::Kind::Read,
                    start: 10,
                    end: 20,
                    pid: 1,
                },
            },
            Request::Renew { session: 9 },
            Request::UnlockAll { session: 9 },
            Request::Flush,
            Request::Stats,
        ];
        for r in all {
            let args: Vec<Bytes> = r.encode().into_iter().map(Bytes::from).collect();
            assert_eq!(Request::decode(&args).expect("valid"), r);
        }
    }

    #[test]
    fn a_write_encoded_in_place_is_the_same_request() {
        let r = Request::Write {
            who: who(),
            path: "d/f".into(),
            ino: 12,
            offset: 4097,
            data: Bytes::from_static(b"\r\n$3\r\nabc"),
        };
        let mut direct = Vec::new();
        let Request::Write {
            who: w,
            path,
            ino,
            offset,
            data,
        } = &r
        else {
            unreachable!()
        };
        encode_write(w, path, *ino, *offset, data, &mut direct);
        let mut generic = Vec::new();
        pliant_proto::encode(&r.encode(), &mut generic);
        assert_eq!(direct, generic);
    }

    #[test]
    fn paths_that_leave_the_backing_directory_and_oversized_requests_are_refused() {
        for bad in [
            &b"/etc/passwd"[..],
            b"../x",
            b"a/../../x",
            b"./a",
            b"",
            b"a\0b",
        ] {
            assert!(relative(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        let read = |len: u64| {
            let r = Request::Read {
                who: who(),
                path: "f".into(),
                ino: 1,
                offset: 0,
                len,
            };
            let args: Vec<Bytes> = r.encode().into_iter().map(Bytes::from).collect();
            Request::decode(&args)
        };
        assert!(read(MAX_READ).is_ok());
        assert!(read(MAX_READ + 1).expect_err("refused").contains("over"));
        let e = Request::decode(&[Bytes::from_static(b"FS.SIZE")]).expect_err("refused");
        assert!(e.contains("wrong number of arguments"), "{e}");
        let e = Request::decode(&[Bytes::from_static(b"GET"), Bytes::from_static(b"k")]);
        assert!(e.expect_err("refused").contains("unknown command"));
    }

    #[test]
    fn an_errno_crosses_the_wire_and_anything_else_is_eio() {
        let e = std::io::Error::from_raw_os_error(nix::libc::EDQUOT);
        let Frame::Error(text) = error_frame(&e) else {
            panic!()
        };
        assert_eq!(reply_error(&text).raw_os_error(), Some(nix::libc::EDQUOT));
        assert_eq!(
            reply_error("ERR something").raw_os_error(),
            Some(nix::libc::EIO)
        );
        assert_eq!(
            reply_error("ERRNO -3 x").raw_os_error(),
            Some(nix::libc::EIO)
        );
    }
}
