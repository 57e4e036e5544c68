//! A cache server of a striped cache: an [`FsCache`] over the job's backing directory that
//! holds the stripes the layout gives it, journals them and writes them back, reached over
//! TCP by the job's mounts.
//!
//! One thread per connection (a job has a few mounts per server, each with a few connections),
//! at most [`MAX_CONNECTIONS`], of which at most [`MAX_UNAUTHENTICATED`] waiting to
//! authenticate (one more closes the one that has waited longest). A connection must give the
//! cache's secret (`AUTH`) within [`AUTH_DEADLINE`], and until it does a request may claim only what Redis lets an
//! unauthenticated client claim (the protocol crate's limits). Every request that names a file
//! is checked against the backing file's permissions for the uid and groups it carries
//! ([`FsCache::may`]): a local user who learnt the port reaches nothing without the secret, and
//! the job's user with it nothing their mount would not give them.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use pliant_proto::frame::{Cursor, Limits, Protocol, Request as Parsed};
use pliant_proto::{Frame, FrameError};

use super::wire::{self, Request};
use crate::core::{FsCache, Handle, Recovery, lock, want};
use crate::{FsConfig, OpenError, SystemClock};

/// Connections served at once; one more is refused with an error reply.
pub const MAX_CONNECTIONS: usize = 1024;

/// Connections at once that have not given the secret yet; one more closes the one that has
/// waited longest. Far below [`MAX_CONNECTIONS`]: a local user who floods the port with idle
/// connections fills this, not the room the job's mounts need. Closing the oldest rather than
/// refusing the newest keeps a flood from refusing a mount's new connection (its `AUTH` comes
/// within a round trip; a flood would have to open this many connections inside that round
/// trip to close it, and the mount tries once more).
pub const MAX_UNAUTHENTICATED: usize = 64;

/// Requests refused before the secret is given, at most; the connection closes after them.
const MAX_REFUSED: u32 = 8;

/// How long a reply may wait for its client to read it.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a connection may stay without giving the secret.
pub const AUTH_DEADLINE: Duration = Duration::from_secs(10);

/// Files a server keeps open between requests (the least recently used beyond are closed; the
/// cache keeps their data): a re-open per request would cost two system calls a stripe.
const OPEN_FILES: usize = 1024;

/// How often a blocked connection looks whether the server is stopping.
const POLL: Duration = Duration::from_millis(200);

/// What a cache server needs.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// The cache over the backing directory (its `shared` is set by [`StripeServer::bind`]).
    pub cache: FsConfig,
    /// Where to listen (`:0` picks a free port).
    pub listen: SocketAddr,
    /// What clients must give with `AUTH`.
    pub secret: String,
    /// Where to keep the names of the files this server holds unwritten data of (rewritten
    /// whole within [`DIRTY_LIST_EVERY`] of a change): somewhere that outlives the server's own
    /// storage, so that a server lost for good is reported with the files it took with it.
    pub dirty_list: Option<PathBuf>,
}

/// How often a server looks whether its list of files with unwritten data changed.
pub const DIRTY_LIST_EVERY: Duration = Duration::from_secs(2);

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The cache could not be opened.
    #[error(transparent)]
    Cache(#[from] OpenError),
    /// The address could not be bound.
    #[error("listening on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: io::Error,
    },
    /// An extent that does not divide the smallest stripe.
    #[error(
        "--extent {0}: a cache server's extent must divide 1 MiB (the smallest stripe), so that no extent holds two servers' bytes"
    )]
    Extent(u64),
    /// No secret: every connection would be open to every local user.
    #[error("a cache server needs a secret (its clients give it with AUTH); none was given")]
    NoSecret,
}

/// A running cache server.
pub struct StripeServer {
    shared: Arc<Shared>,
    listener: TcpListener,
    addr: SocketAddr,
    dirty_list: Option<PathBuf>,
}

struct Shared {
    cache: FsCache,
    secret: String,
    open: Mutex<OpenFiles>,
    connections: AtomicUsize,
    /// Of those, the ones that have not given the secret yet.
    waiting: Mutex<WaitingRoom>,
    stop: AtomicBool,
    locks: Mutex<super::locks::LockTable>,
}

/// Connections that have not given the secret yet, oldest first, each with a handle that
/// closes it.
#[derive(Default)]
struct WaitingRoom {
    next: u64,
    queue: std::collections::VecDeque<(u64, TcpStream)>,
}

impl WaitingRoom {
    /// Lets `sock` wait, closing the connection that has waited longest if the room is full;
    /// `None` if `sock` cannot be given a handle.
    fn enter(&mut self, sock: &TcpStream) -> Option<u64> {
        let handle = sock.try_clone().ok()?;
        if self.queue.len() >= MAX_UNAUTHENTICATED
            && let Some((_, oldest)) = self.queue.pop_front()
        {
            // Its thread reads end-of-file at once and goes.
            let _ = oldest.shutdown(std::net::Shutdown::Both);
        }
        self.next += 1;
        self.queue.push_back((self.next, handle));
        Some(self.next)
    }

    fn leave(&mut self, id: u64) {
        self.queue.retain(|(i, _)| *i != id);
    }
}

#[derive(Default)]
struct OpenFiles {
    files: HashMap<PathBuf, (Handle, u64)>,
    tick: u64,
}

impl std::fmt::Debug for StripeServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StripeServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl StripeServer {
    /// Opens the cache (writing back what the journal of a server killed before holds) and
    /// binds the address.
    pub fn bind(opts: ServerOptions) -> Result<(Self, Recovery), ServerError> {
        if opts.secret.is_empty() {
            return Err(ServerError::NoSecret);
        }
        let mut cfg = opts.cache;
        if !super::layout::MIN_STRIPE.is_multiple_of(cfg.extent) {
            // A stripe must be whole extents here, or two servers would write back one extent.
            return Err(ServerError::Extent(cfg.extent));
        }
        cfg.shared = true;
        // Read-ahead copies the next extents, which are other servers' stripes.
        cfg.read_ahead = 0;
        let (cache, recovery) = FsCache::new(cfg, Arc::new(SystemClock))?;
        let listener = TcpListener::bind(opts.listen).map_err(|source| ServerError::Listen {
            addr: opts.listen,
            source,
        })?;
        let addr = listener
            .local_addr()
            .map_err(|source| ServerError::Listen {
                addr: opts.listen,
                source,
            })?;
        listener
            .set_nonblocking(true)
            .map_err(|source| ServerError::Listen { addr, source })?;
        let shared = Arc::new(Shared {
            cache,
            secret: opts.secret,
            open: Mutex::default(),
            connections: AtomicUsize::new(0),
            waiting: Mutex::default(),
            stop: AtomicBool::new(false),
            locks: Mutex::default(),
        });
        Ok((
            Self {
                shared,
                listener,
                addr,
                dirty_list: opts.dirty_list,
            },
            recovery,
        ))
    }

    /// The address bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The cache, for its counters and settings.
    pub fn cache(&self) -> &FsCache {
        &self.shared.cache
    }

    /// Serves until `stop` is set, then stops the connections (each within a fifth of a second
    /// of its current request) and returns.
    pub fn serve(&self, stop: &AtomicBool) {
        let mut threads: Vec<std::thread::JoinHandle<()>> = Vec::new();
        let mut listed: Option<Vec<PathBuf>> = None;
        let mut looked = Instant::now() - DIRTY_LIST_EVERY;
        while !stop.load(Relaxed) {
            if let Some(to) = &self.dirty_list
                && looked.elapsed() >= DIRTY_LIST_EVERY
            {
                looked = Instant::now();
                let now = self.shared.cache.dirty_files();
                if listed.as_ref() != Some(&now) {
                    match write_list(to, &now) {
                        Ok(()) => listed = Some(now),
                        Err(e) => {
                            tracing::warn!(error = %e, path = %to.display(), "writing the list of files with unwritten data")
                        }
                    }
                }
            }
            match self.listener.accept() {
                Ok((sock, _)) => {
                    threads.retain(|t| !t.is_finished());
                    let shared = self.shared.clone();
                    if shared.connections.fetch_add(1, Relaxed) >= MAX_CONNECTIONS {
                        shared.connections.fetch_sub(1, Relaxed);
                        let mut sock = sock;
                        let _ = sock.write_all(b"-ERR too many connections\r\n");
                        continue;
                    }
                    let Some(id) = lock(&shared.waiting).enter(&sock) else {
                        shared.connections.fetch_sub(1, Relaxed);
                        continue;
                    };
                    let t = std::thread::Builder::new()
                        .name("pliant-stripe-conn".into())
                        .spawn(move || {
                            if let Err(e) = shared.connection(sock, id) {
                                tracing::debug!(error = %e, "connection ended");
                            }
                            shared.connections.fetch_sub(1, Relaxed);
                        });
                    match t {
                        Ok(t) => threads.push(t),
                        Err(e) => {
                            self.shared.connections.fetch_sub(1, Relaxed);
                            lock(&self.shared.waiting).leave(id);
                            tracing::error!(error = %e, "starting a connection thread");
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(POLL / 4),
                Err(e) => {
                    tracing::warn!(error = %e, "accept");
                    std::thread::sleep(POLL / 4);
                }
            }
        }
        self.shared.stop.store(true, Relaxed);
        for t in threads {
            let _ = t.join();
        }
    }

    /// Writes every dirty byte back (`progress` gets the dirty bytes left) and closes the cache,
    /// leaving an empty journal.
    pub fn shutdown(self, progress: &mut dyn FnMut(u64)) -> io::Result<()> {
        let dirty_list = self.dirty_list.clone();
        let shared = Arc::try_unwrap(self.shared)
            .map_err(|_| io::Error::other("connections still running at shutdown"))?;
        for (_, (h, _)) in shared
            .open
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .files
        {
            shared.cache.release(h);
        }
        shared.cache.shutdown(false, progress)?;
        if let Some(to) = dirty_list {
            // Everything is written back: nothing is left to report.
            write_list(&to, &[])?;
        }
        Ok(())
    }

    /// Tests: stops as `kill -9` would, leaving the journal for the next server.
    #[doc(hidden)]
    pub fn crash(self) {
        if let Ok(shared) = Arc::try_unwrap(self.shared) {
            shared.cache.crash();
        }
    }
}

impl Shared {
    fn connection(&self, mut sock: TcpStream, id: u64) -> io::Result<()> {
        sock.set_nodelay(true)?;
        sock.set_read_timeout(Some(POLL))?;
        // A client that sends and never reads its replies must not hold this thread (and the
        // server's stop, which waits for it) for ever (found by an audit).
        sock.set_write_timeout(Some(WRITE_TIMEOUT))?;
        let mut refused = 0u32;
        let started = Instant::now();
        let mut authed = false;
        // In the waiting room until it authenticates, or goes.
        struct Waiting<'a>(&'a Mutex<WaitingRoom>, u64);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                lock(self.0).leave(self.1);
            }
        }
        let mut waiting = Some(Waiting(&self.waiting, id));
        // A request's arguments are slices of the bytes it came in (a write's data is not
        // copied again before it reaches the cache).
        let mut buf = bytes::BytesMut::with_capacity(64 << 10);
        let mut cursor = Cursor::default();
        let mut out = Vec::new();
        let mut chunk = vec![0u8; 256 << 10];
        loop {
            let limits = Limits {
                max_bulk: wire::MAX_WRITE,
                max_elements: 16,
                unauthenticated: !authed,
                ..Limits::default()
            };
            match cursor.request(&buf, &limits) {
                Ok((req, used)) => {
                    let whole = buf.split_to(used).freeze();
                    let args: Vec<Bytes> = match req {
                        Parsed::Ranges(r) => r.into_iter().map(|r| whole.slice(r)).collect(),
                        Parsed::Inline(a) => a,
                    };
                    if args.is_empty() {
                        continue;
                    }
                    let reply = if !authed {
                        match auth(&args, &self.secret) {
                            Ok(()) => {
                                authed = true;
                                drop(waiting.take());
                                Frame::ok()
                            }
                            Err(f) => {
                                refused += 1;
                                if refused > MAX_REFUSED || started.elapsed() > AUTH_DEADLINE {
                                    let _ = sock.write_all(
                                        b"-NOAUTH Authentication required; closing the connection\r\n",
                                    );
                                    return Ok(());
                                }
                                f
                            }
                        }
                    } else {
                        self.request(&args)
                    };
                    out.clear();
                    reply.write(Protocol::Resp2, &mut out);
                    sock.write_all(&out)?;
                    continue;
                }
                Err(FrameError::Incomplete) => {}
                Err(FrameError::Protocol(m)) => {
                    let _ = sock.write_all(format!("-ERR Protocol error: {m}\r\n").as_bytes());
                    return Ok(());
                }
            }
            if self.stop.load(Relaxed) {
                return Ok(());
            }
            if !authed && started.elapsed() > AUTH_DEADLINE {
                let _ = sock.write_all(b"-NOAUTH Authentication required.\r\n");
                return Ok(());
            }
            match sock.read(&mut chunk) {
                Ok(0) => return Ok(()),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    fn request(&self, args: &[Bytes]) -> Frame {
        if args[0].eq_ignore_ascii_case(b"AUTH") {
            return Frame::ok();
        }
        if args[0].eq_ignore_ascii_case(b"PING") {
            return Frame::Simple("PONG".into());
        }
        let req = match Request::decode(args) {
            Ok(r) => r,
            Err(m) => return Frame::error(format!("ERR {m}")),
        };
        match self.run(req) {
            Ok(f) => f,
            Err(e) => wire::error_frame(&e),
        }
    }

    fn run(&self, req: Request) -> io::Result<Frame> {
        let c = &self.cache;
        Ok(match req {
            Request::Read {
                who,
                path,
                ino,
                offset,
                len,
            } => {
                let m = c.may(&path, &who, want::READ)?;
                same_file(&m, ino)?;
                let h = self.handle(&path, &m)?;
                let mut buf = Vec::new();
                c.read_into(&h, offset, len as u32, &mut buf)?;
                Frame::bulk(buf)
            }
            Request::Write {
                who,
                path,
                ino,
                offset,
                data,
            } => {
                let m = c.may(&path, &who, want::WRITE)?;
                same_file(&m, ino)?;
                let h = self.handle(&path, &m)?;
                Frame::Integer(c.write(&h, offset, &data)? as i64)
            }
            Request::Size { who, path } => {
                c.may_reach(&path, &who)?;
                let a = c.getattr(&path)?;
                let t = a
                    .mtime
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default();
                Frame::Array(vec![
                    Frame::Integer(a.size as i64),
                    Frame::Integer(t.as_secs() as i64),
                    Frame::Integer(t.subsec_nanos() as i64),
                ])
            }
            Request::Fsync { who, path, ino } => {
                let m = c
                    .may(&path, &who, want::READ)
                    .or_else(|_| c.may(&path, &who, want::WRITE))?;
                same_file(&m, ino)?;
                let h = self.handle(&path, &m)?;
                c.fsync(&h)?;
                Frame::ok()
            }
            Request::Truncate {
                who,
                path,
                size,
                ino,
            } => {
                let m = c.may(&path, &who, want::WRITE)?;
                if ino != 0 {
                    same_file(&m, ino)?;
                }
                match self.open_handle(&path, &m) {
                    Some(h) => c.truncate_open(&h, size)?,
                    None => c.truncate(&path, size)?,
                }
                Frame::ok()
            }
            Request::Unlinked { who, path } => {
                c.may_change_parent(&path, &who)?;
                self.close_under(&path);
                c.note_unlinked(&path)?;
                Frame::ok()
            }
            Request::Renamed {
                who,
                from,
                to,
                exchange,
            } => {
                c.may_change_parent(&from, &who)?;
                c.may_change_parent(&to, &who)?;
                self.close_under(&from);
                self.close_under(&to);
                c.note_renamed(&from, &to, exchange)?;
                Frame::ok()
            }
            Request::Lock {
                who,
                path,
                ino,
                lock: l,
            } => {
                // Advisory: whoever may read the file may lock it (the kernel has checked the
                // descriptor's mode for the kind).
                same_file(&c.may(&path, &who, want::READ)?, ino)?;
                let now = Instant::now();
                let mut t = lock(&self.locks);
                t.expire(now);
                match t.set(ino, l.session, l.owner, l.kind, l.start, l.end, l.pid, now) {
                    Ok(()) => Frame::ok(),
                    Err(super::locks::Refused::Conflict) => {
                        return Err(io::Error::from_raw_os_error(nix::libc::EAGAIN));
                    }
                    Err(super::locks::Refused::Full) => {
                        return Err(io::Error::from_raw_os_error(nix::libc::ENOLCK));
                    }
                }
            }
            Request::GetLock {
                who,
                path,
                ino,
                lock: l,
            } => {
                same_file(&c.may(&path, &who, want::READ)?, ino)?;
                let mut t = lock(&self.locks);
                t.expire(Instant::now());
                match t.conflict(ino, l.session, l.owner, l.kind, l.start, l.end) {
                    None => Frame::Null,
                    Some(h) => Frame::Array(vec![
                        Frame::Integer(i64::from(h.write)),
                        Frame::bulk(h.start.to_string()),
                        Frame::bulk(h.end.to_string()),
                        Frame::Integer(i64::from(h.pid)),
                    ]),
                }
            }
            Request::Renew { session } => {
                lock(&self.locks).renew(session, Instant::now());
                Frame::ok()
            }
            Request::UnlockAll { session } => {
                lock(&self.locks).drop_session(session);
                Frame::ok()
            }
            Request::Flush => {
                c.flush(&mut |_| {});
                Frame::ok()
            }
            Request::Stats => {
                let s = serde_json::to_string(&c.stats()).map_err(io::Error::other)?;
                Frame::bulk(s)
            }
        })
    }

    /// The open handle of `path` (whose backing file `m` describes), opened now if need be
    /// (the least recently used closed).
    fn handle(&self, path: &Path, m: &std::fs::Metadata) -> io::Result<Handle> {
        if let Some(h) = self.open_handle(path, m) {
            return Ok(h);
        }
        let h = self.cache.open(path)?;
        let mut o = lock(&self.open);
        o.tick += 1;
        let tick = o.tick;
        if let Some((old, _)) = o.files.insert(path.to_path_buf(), (h.clone(), tick)) {
            // Opened by two requests at once: one handle is enough.
            self.cache.release(old);
        }
        if o.files.len() > OPEN_FILES
            && let Some(oldest) = o
                .files
                .iter()
                .min_by_key(|(_, (_, t))| *t)
                .map(|(p, _)| p.clone())
            && let Some((old, _)) = o.files.remove(&oldest)
        {
            self.cache.release(old);
        }
        Ok(h)
    }

    /// The handle kept open for `path`, if it is still the file `m` describes: a name that
    /// leads to another file now (unlinked and made again, or renamed over, by a mount that
    /// died before it told this server) lets go of the old one's.
    fn open_handle(&self, path: &Path, m: &std::fs::Metadata) -> Option<Handle> {
        use std::os::unix::fs::MetadataExt;
        let mut o = lock(&self.open);
        o.tick += 1;
        let tick = o.tick;
        match o.files.get_mut(path) {
            Some((h, t)) if h.ident() == (m.dev(), m.ino()) => {
                *t = tick;
                Some(h.clone())
            }
            Some(_) => {
                if let Some((old, _)) = o.files.remove(path) {
                    self.cache.release(old);
                }
                None
            }
            None => None,
        }
    }

    /// Closes the handles of `path` and of everything under it (before a rename or unlink
    /// notice, so the cache's own bookkeeping of names is all there is).
    fn close_under(&self, path: &Path) {
        let mut o = lock(&self.open);
        let gone: Vec<PathBuf> = o
            .files
            .keys()
            .filter(|p| p.starts_with(path))
            .cloned()
            .collect();
        for p in gone {
            if let Some((h, _)) = o.files.remove(&p) {
                self.cache.release(h);
            }
        }
    }
}

/// `names` as a JSON array in `to`, written whole (a new file renamed over it), or, where this
/// server may not make files beside it (a directory of the job's that is root's, where the
/// job's setup made the list for it), rewritten in place.
fn write_list(to: &Path, names: &[PathBuf]) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let text: Vec<String> = names.iter().map(|p| p.display().to_string()).collect();
    let json = serde_json::to_vec(&text).map_err(io::Error::other)?;
    let tmp = to.with_extension(format!("tmp{}", std::process::id()));
    // The names of a user's files: this server's user's to read alone.
    let open = |p: &Path, truncate: bool| {
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(truncate)
            .mode(0o600)
            .open(p)
    };
    match open(&tmp, true) {
        Ok(mut f) => {
            f.write_all(&json)?;
            drop(f);
            std::fs::rename(&tmp, to)
        }
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            let mut f = open(to, true)?;
            f.write_all(&json)
        }
        Err(e) => Err(e),
    }
}

/// ESTALE unless the backing file is the one the mount opened (see `wire::Request::Read`).
fn same_file(m: &std::fs::Metadata, ino: u64) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    if m.ino() == ino {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(nix::libc::ESTALE))
    }
}

/// Checks a connection's first request: `AUTH secret` (or `AUTH user secret`, as Redis 6
/// clients send it); anything else is refused as Redis refuses it.
fn auth(args: &[Bytes], secret: &str) -> Result<(), Frame> {
    if !args[0].eq_ignore_ascii_case(b"AUTH") {
        return Err(Frame::error("NOAUTH Authentication required."));
    }
    let given = match args.len() {
        2 => &args[1],
        3 => &args[2],
        _ => {
            return Err(Frame::error(
                "ERR wrong number of arguments for 'auth' command",
            ));
        }
    };
    if pliant_proto::auth::same_password(secret, given) {
        Ok(())
    } else {
        Err(Frame::error(
            "WRONGPASS invalid username-password pair or user is disabled.",
        ))
    }
}

/// Runs a cache server until SIGINT, SIGTERM or SIGHUP, then writes every dirty byte back and
/// returns the counters at the end. `ready` is called once it listens, with the address bound
/// and what it recovered from the journal of a server killed before.
pub fn run_foreground(
    opts: ServerOptions,
    ready: impl FnOnce(SocketAddr, &Recovery),
) -> Result<crate::FsStats, ServerError> {
    use nix::sys::signal::{SigSet, Signal};
    // Blocked before any thread starts, so every thread inherits the mask and the one below
    // takes them.
    let mut signals = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        signals.add(s);
    }
    let _ = signals.thread_block();
    let (server, recovery) = StripeServer::bind(opts)?;
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("pliant-stripe-signals".into())
            .spawn(move || {
                let _ = signals.wait();
                stop.store(true, Relaxed);
            })
            .map_err(|source| ServerError::Listen {
                addr: server.local_addr(),
                source,
            })?;
    }
    ready(server.local_addr(), &recovery);
    server.serve(&stop);
    server.cache().flush(&mut |_| {});
    let stats = server.cache().stats();
    let addr = server.local_addr();
    server
        .shutdown(&mut |_| {})
        .map_err(|source| ServerError::Listen { addr, source })?;
    Ok(stats)
}
