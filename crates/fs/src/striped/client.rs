//! A mount's side of a striped cache: each stripe's reads and writes go to the server that
//! owns it; what changes a file's size or names reaches every server.
//!
//! A server that does not answer within the timeout gives the application `EIO`, never a hang:
//! the connection is dropped (its state is unknown) and the next request dials again.

use std::io;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use pliant_proto::{Client, ClientError, Dialer, Frame};

use super::layout::{Layout, LayoutError};
use super::wire::{self, Request};
use crate::core::{Caller, lock};
use crate::stats::FsStats;

/// How long a mount waits for a server by default before the application gets `EIO`: longer
/// than the write-back of a stripe to a slow file system (an fsync with `--fsync backing`
/// waits for it), short enough that a job notices a dead server within a minute.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Idle connections a mount keeps per server; more are opened when requests overlap.
const POOL: usize = 16;

/// How a mount reaches its servers.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// The servers' addresses, in the job's order (every mount must give the same order).
    pub servers: Vec<String>,
    /// The cache's secret.
    pub secret: String,
    /// The stripe size, bytes.
    pub stripe: u64,
    /// How long to wait for a server.
    pub timeout: Duration,
}

/// Why a mount could not reach its servers at start.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// A bad layout.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// A server refused or did not answer.
    #[error("cache server {0}")]
    Server(#[source] ClientError),
}

/// The servers of a striped cache, as a mount reaches them.
pub struct Remote {
    layout: Layout,
    servers: Vec<Server>,
    /// This mount's lock session (see [`super::locks`]).
    session: u64,
}

struct Server {
    dialer: Dialer,
    idle: Mutex<Vec<Client>>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("layout", &self.layout)
            .field(
                "servers",
                &self
                    .servers
                    .iter()
                    .map(|s| s.dialer.addr())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Remote {
    /// Dials every server once (a wrong secret or a server that is not there fails the mount,
    /// not the first write).
    pub fn connect(opts: &ClientOptions) -> Result<Self, RemoteError> {
        let layout = Layout::new(opts.stripe, opts.servers.len())?;
        let mut servers = Vec::new();
        for addr in &opts.servers {
            let dialer = Dialer::new(addr)
                .password(Some(&opts.secret))
                .connect_timeout(opts.timeout)
                .io_timeout(Some(opts.timeout));
            let c = dialer.connect().map_err(RemoteError::Server)?;
            servers.push(Server {
                dialer,
                idle: Mutex::new(vec![c]),
            });
        }
        Ok(Self {
            layout,
            servers,
            session: random_session(),
        })
    }

    /// Keeps this mount's locks alive on every server while it exists: a thread renews the
    /// session every third of [`super::locks::LEASE`], and stops once the mount lets go of it.
    pub fn keep_locks_alive(self: &std::sync::Arc<Self>) {
        let weak = std::sync::Arc::downgrade(self);
        let _ = std::thread::Builder::new()
            .name("pliant-stripe-lease".into())
            .spawn(move || {
                let step = Duration::from_millis(200);
                let every = super::locks::LEASE / 3;
                let mut waited = Duration::ZERO;
                loop {
                    std::thread::sleep(step);
                    waited += step;
                    let Some(r) = weak.upgrade() else { return };
                    if waited >= every {
                        waited = Duration::ZERO;
                        let _ = r.everywhere(&Request::Renew { session: r.session });
                    }
                }
            });
    }

    /// A lock of this mount's session.
    fn lock_request(
        &self,
        owner: u64,
        kind: super::locks::Kind,
        range: (u64, u64),
        pid: u32,
    ) -> wire::LockRequest {
        wire::LockRequest {
            session: self.session,
            owner,
            kind,
            start: range.0,
            end: range.1,
            pid,
        }
    }

    /// The server keeping the locks of file `ino`: its first stripe's.
    fn lock_server(&self, ino: u64) -> usize {
        self.layout.owner(ino, 0)
    }

    /// `fcntl(F_SETLK)` (or, with `wait`, `F_SETLKW`) across every mount of the cache.
    #[allow(clippy::too_many_arguments)]
    pub fn set_lock(
        &self,
        ino: u64,
        path: &Path,
        who: &Caller,
        owner: u64,
        kind: super::locks::Kind,
        range: (u64, u64),
        pid: u32,
        wait: bool,
    ) -> io::Result<()> {
        let req = Request::Lock {
            who: who.clone(),
            path: path.to_path_buf(),
            ino,
            lock: self.lock_request(owner, kind, range, pid),
        };
        let mut pause = Duration::from_millis(2);
        loop {
            match self.call(self.lock_server(ino), &req) {
                Err(e) if wait && e.raw_os_error() == Some(nix::libc::EAGAIN) => {
                    // F_SETLKW waits as long as the holder holds: polled, backing off to
                    // 200 ms, so a freed lock is taken soon and a long wait costs little.
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(200));
                }
                r => return r.map(|_| ()),
            }
        }
    }

    /// `fcntl(F_GETLK)`: the first conflicting lock, as (write, start, end, pid).
    pub fn get_lock(
        &self,
        ino: u64,
        path: &Path,
        who: &Caller,
        owner: u64,
        kind: super::locks::Kind,
        range: (u64, u64),
    ) -> io::Result<Option<(bool, u64, u64, u32)>> {
        let req = Request::GetLock {
            who: who.clone(),
            path: path.to_path_buf(),
            ino,
            lock: self.lock_request(owner, kind, range, 0),
        };
        match self.call(self.lock_server(ino), &req)? {
            Frame::Null | Frame::NullArray => Ok(None),
            Frame::Array(v) => match v.as_slice() {
                [
                    Frame::Integer(w),
                    Frame::Bulk(s),
                    Frame::Bulk(e),
                    Frame::Integer(pid),
                ] => {
                    let n = |b: &[u8]| std::str::from_utf8(b).ok().and_then(|t| t.parse().ok());
                    match (n(s), n(e)) {
                        (Some(s), Some(e)) => Ok(Some((*w != 0, s, e, *pid as u32))),
                        _ => Err(odd(&Frame::Array(v.clone()))),
                    }
                }
                _ => Err(odd(&Frame::Array(v.clone()))),
            },
            f => Err(odd(&f)),
        }
    }

    /// The layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    fn call(&self, server: usize, req: &Request) -> io::Result<Frame> {
        let mut out = Vec::new();
        pliant_proto::encode(&req.encode(), &mut out);
        // A rename sent twice could undo itself (RENAME_EXCHANGE): never sent again.
        let again = !matches!(req, Request::Renamed { .. });
        self.call_encoded(server, &out, again)
    }

    /// Sends a request already in RESP and returns its reply (an error reply as its errno).
    fn call_encoded(&self, server: usize, request: &[u8], again: bool) -> io::Result<Frame> {
        let s = &self.servers[server];
        let pooled = lock(&s.idle).pop();
        let reused = pooled.is_some();
        let mut c = match pooled {
            Some(c) => c,
            None => dial(&s.dialer)?,
        };
        let reply = match c.send_raw(request).and_then(|()| c.read()) {
            Ok(f) => f,
            // A kept connection the server closed (it was restarted, or dropped it): once more
            // on a new one. `again` only for requests that may be sent twice (a write of the
            // same bytes at the same place, a truncation to a size, a lock by the same owner).
            Err(e) if again && reused && !matches!(e, ClientError::Timeout { .. }) => {
                tracing::debug!(error = %e, "a kept connection to a cache server failed: dialling again");
                c = dial(&s.dialer)?;
                match c.send_raw(request).and_then(|()| c.read()) {
                    Ok(f) => f,
                    Err(e) => return Err(unreachable(&e)),
                }
            }
            Err(e) => return Err(unreachable(&e)),
        };
        {
            let mut idle = lock(&s.idle);
            if idle.len() < POOL {
                idle.push(c);
            }
        }
        match reply {
            Frame::Error(text) => {
                let e = wire::reply_error(&text);
                if e.raw_os_error() == Some(nix::libc::EIO) {
                    tracing::warn!(server = s.dialer.addr(), reply = %text, "cache server refused a request");
                }
                Err(e)
            }
            f => Ok(f),
        }
    }

    /// Runs `req` on every server at once; the first error wins (after every server answered,
    /// so none is left half-told).
    fn everywhere(&self, req: &Request) -> io::Result<Vec<Frame>> {
        let results: Vec<io::Result<Frame>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..self.servers.len())
                .map(|i| scope.spawn(move || self.call(i, req)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(io::Error::other("request thread panicked")))
                })
                .collect()
        });
        results.into_iter().collect()
    }

    /// Reads `len` bytes at `offset` of the file `ino` at `path` into `buf`: each stripe from
    /// its owner; a stripe a server has nothing of up to the file's end reads as zeros (a
    /// hole). `backing_size` gives the backing file's size, asked only when a piece comes back
    /// short.
    #[allow(clippy::too_many_arguments)]
    pub fn read(
        &self,
        ino: u64,
        path: &Path,
        who: &Caller,
        offset: u64,
        len: u64,
        backing_size: &dyn Fn() -> io::Result<u64>,
        buf: &mut Vec<u8>,
    ) -> io::Result<()> {
        buf.clear();
        let mut end: Option<u64> = None;
        for (at, n, owner) in self.layout.pieces(ino, offset, len) {
            let got = match self.call(
                owner,
                &Request::Read {
                    who: who.clone(),
                    path: path.to_path_buf(),
                    ino,
                    offset: at,
                    len: n,
                },
            )? {
                Frame::Bulk(b) => b,
                f => return Err(odd(&f)),
            };
            buf.extend_from_slice(&got[..got.len().min(n as usize)]);
            if (got.len() as u64) < n {
                let size = match end {
                    Some(s) => s,
                    None => {
                        let s = self
                            .size(path, who)?
                            .map_or(0, |(s, _)| s)
                            .max(backing_size()?);
                        end = Some(s);
                        s
                    }
                };
                let piece_end = (at + n).min(size);
                let have = at + got.len() as u64;
                if piece_end > have {
                    buf.resize(buf.len() + (piece_end - have) as usize, 0);
                }
                if size < at + n {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Writes `data` at `offset`: each stripe to its owner.
    pub fn write(
        &self,
        ino: u64,
        path: &Path,
        who: &Caller,
        offset: u64,
        data: &[u8],
    ) -> io::Result<u32> {
        let mut done = 0usize;
        let mut out = Vec::new();
        for (at, n, owner) in self.layout.pieces(ino, offset, data.len() as u64) {
            let from = (at - offset) as usize;
            out.clear();
            wire::encode_write(who, path, ino, at, &data[from..from + n as usize], &mut out);
            match self.call_encoded(owner, &out, true)? {
                Frame::Integer(w) if w == n as i64 => done += n as usize,
                f => return Err(odd(&f)),
            }
        }
        Ok(done as u32)
    }

    /// The file's size and modification time as the servers hold it (the largest of each), or
    /// `None` if no server knows the file.
    pub fn size(&self, path: &Path, who: &Caller) -> io::Result<Option<(u64, SystemTime)>> {
        let req = Request::Size {
            who: who.clone(),
            path: path.to_path_buf(),
        };
        let mut best: Option<(u64, SystemTime)> = None;
        for f in self.everywhere(&req)? {
            let Frame::Array(v) = &f else {
                return Err(odd(&f));
            };
            let [Frame::Integer(size), Frame::Integer(s), Frame::Integer(ns)] = v.as_slice() else {
                return Err(odd(&f));
            };
            let t = SystemTime::UNIX_EPOCH
                + Duration::new((*s).max(0) as u64, (*ns).clamp(0, 999_999_999) as u32);
            let size = (*size).max(0) as u64;
            best = Some(match best {
                None => (size, t),
                Some((bs, bt)) => (bs.max(size), bt.max(t)),
            });
        }
        Ok(best)
    }

    /// Makes what every server holds of the file durable.
    pub fn fsync(&self, ino: u64, path: &Path, who: &Caller) -> io::Result<()> {
        self.everywhere(&Request::Fsync {
            who: who.clone(),
            path: path.to_path_buf(),
            ino,
        })
        .map(|_| ())
    }

    /// Cuts or extends the file to `size` on every server and in the backing directory; `ino`
    /// the inode an open file was opened as (ESTALE if the name leads elsewhere now), 0 for a
    /// truncation by name.
    pub fn truncate(&self, path: &Path, who: &Caller, size: u64, ino: u64) -> io::Result<()> {
        self.everywhere(&Request::Truncate {
            who: who.clone(),
            path: path.to_path_buf(),
            size,
            ino,
        })
        .map(|_| ())
    }

    /// Tells every server that `path` was unlinked.
    pub fn unlinked(&self, path: &Path, who: &Caller) -> io::Result<()> {
        self.everywhere(&Request::Unlinked {
            who: who.clone(),
            path: path.to_path_buf(),
        })
        .map(|_| ())
    }

    /// Tells every server that `from` was renamed to `to`.
    pub fn renamed(&self, from: &Path, to: &Path, exchange: bool, who: &Caller) -> io::Result<()> {
        self.everywhere(&Request::Renamed {
            who: who.clone(),
            from: from.to_path_buf(),
            to: to.to_path_buf(),
            exchange,
        })
        .map(|_| ())
    }

    /// Has every server write all its dirty data back.
    pub fn flush(&self) -> io::Result<()> {
        self.everywhere(&Request::Flush).map(|_| ())
    }

    /// Every server's counters, in the servers' order.
    pub fn stats(&self) -> io::Result<Vec<FsStats>> {
        self.everywhere(&Request::Stats)?
            .into_iter()
            .map(|f| match f {
                Frame::Bulk(b) => serde_json::from_slice(&b).map_err(io::Error::other),
                f => Err(odd(&f)),
            })
            .collect()
    }
}

impl Drop for Remote {
    /// The mount is going: its locks go with it now rather than at the lease's end.
    fn drop(&mut self) {
        let _ = self.everywhere(&Request::UnlockAll {
            session: self.session,
        });
    }
}

/// A session number no other mount draws (64 random bits).
fn random_session() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_err()
    {
        // No /dev/urandom: the time and pid, unique enough among one job's mounts.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        return (t.as_nanos() as u64) ^ (u64::from(std::process::id()) << 32);
    }
    u64::from_le_bytes(b)
}

/// A new authenticated connection. Once more when the server closed it before it could
/// authenticate: a server closes the connection that has waited longest to authenticate when
/// too many wait (a local user's flood, [`super::server::MAX_UNAUTHENTICATED`]), and that is
/// not the server being gone.
fn dial(dialer: &Dialer) -> io::Result<Client> {
    let closed = |e: &ClientError| match e {
        ClientError::Closed(_) => true,
        ClientError::Io { source, .. } => matches!(
            source.kind(),
            io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
        ),
        _ => false,
    };
    match dialer.connect() {
        Err(e) if closed(&e) => dialer.connect(),
        r => r,
    }
    .map_err(|e| unreachable(&e))
}

fn unreachable(e: &ClientError) -> io::Error {
    tracing::error!(error = %e, "cache server unreachable: the application gets EIO");
    io::Error::from_raw_os_error(nix::libc::EIO)
}

fn odd(f: &Frame) -> io::Error {
    tracing::error!(reply = ?f, "unexpected reply from a cache server");
    io::Error::from_raw_os_error(nix::libc::EIO)
}
