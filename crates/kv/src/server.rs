//! The network side: accept connections, read requests, run them, write replies; the store's
//! periodic sync; a graceful stop.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use pliant_proto::frame::{Cursor, Frame, FrameError, Limits, Request};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use crate::cmd::{Ctx, Session, execute};
use crate::config::{Config, Durability};
use crate::keyspace::{Keyspace, KvError};
use crate::node::{Node, mono_ns, now_ms};
use crate::tracking::Outgoing;

/// How long a stopping server waits for its connections to finish the requests they have read.
const DRAIN: Duration = Duration::from_secs(5);

/// The store log's first segment, written with zeros at open under `--durability always`, whose
/// fsync after every group of writes takes half the time on blocks the file already has (see
/// `WriteBehindOptions::preallocate`): about two seconds of group-committed SETs of 100 bytes
/// (60,000 a second, 140 log bytes each: `serve-group-commit-30c` in docs/benchmarks.md), after
/// which the log's segments are recycled files of the size they last grew to. Under `everysec`
/// one fsync a second makes it moot.
const ALWAYS_PREALLOCATE: u64 = 16 << 20;

/// Why a server could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The runtime that serves connections could not be started.
    #[error("cannot start the server's runtime")]
    Runtime(#[source] std::io::Error),
    /// The store could not be opened or synced.
    #[error("store {}", path.display())]
    Store {
        /// Its directory.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: pliant_store::StoreError,
    },
    /// The keyspace could not be built or synced.
    #[error(transparent)]
    Keyspace(#[from] KvError),
    /// The parent (`--parent`) could not be reached or refused this tier's handshake.
    #[error("parent {addr}")]
    Parent {
        /// The parent.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: crate::upstream::UpstreamError,
    },
    /// The parent answered the first `PING` with an error.
    #[error("parent {addr} refused: {reply}")]
    ParentRefused {
        /// The parent.
        addr: SocketAddr,
        /// Its error reply.
        reply: String,
    },
    /// The cluster's coordination store (`--coord`, `--etcd`) could not be joined.
    #[error("joining the cluster")]
    Cluster(#[source] pliant_cluster::CoordError),
    /// The record of the newest slot map version this cluster node acted on could not be read
    /// (`Cluster::with_record`).
    #[error("the cluster's map record")]
    MapRecord(#[source] crate::cluster::SettleError),
    /// The policy given at start (`--policy`) did not install.
    #[error("policy")]
    Policy(#[source] crate::policy::LivePolicyError),
    /// The balancer given at start (`--balancer`) did not start.
    #[error("balancer")]
    Balancer(#[source] pliant_cluster::BalancerError),
    /// A non-loopback address without a password (Redis's protected mode, made strict).
    #[error(
        "refusing to serve {addr} without a password: anyone who can reach it could read and change every key. Give --requirepass (or PLIANT_PASSWORD), bind to 127.0.0.1, or pass --unsafe-no-auth if a firewall already keeps everyone else out"
    )]
    Unprotected {
        /// The address.
        addr: SocketAddr,
    },
    /// A non-loopback metrics address: the endpoint has no authentication, so a password does
    /// not protect it.
    #[error(
        "refusing to serve metrics on {addr}: the endpoint has no authentication, so anyone who can reach it could read the node's counters and its policy's decisions. Bind --metrics to 127.0.0.1, or pass --unsafe-no-auth if a firewall already keeps everyone else out"
    )]
    UnprotectedMetrics {
        /// The address.
        addr: SocketAddr,
    },
}

/// A bound server, not yet serving.
pub struct Server {
    node: Arc<Node>,
    listener: TcpListener,
    metrics: Option<TcpListener>,
}

impl Server {
    /// Opens the store and binds the address of `config`.
    pub async fn bind(config: &Config) -> Result<Self, ServeError> {
        refuse_unprotected(config)?;
        let store: Option<Arc<dyn pliant_store::Store>> = match &config.store {
            None => None,
            // Written behind: a write is acknowledged once it is in the store's log, and reaches
            // the LSM tree within a second, coalesced (see `pliant_store::WriteBehind`).
            Some(path) => {
                let opts = pliant_store::WriteBehindOptions {
                    preallocate: match config.durability {
                        Durability::Always => ALWAYS_PREALLOCATE,
                        _ => 0,
                    },
                    ..Default::default()
                };
                Some(Arc::new(
                    pliant_store::WriteBehind::open(path, opts).map_err(|source| {
                        ServeError::Store {
                            path: path.clone(),
                            source,
                        }
                    })?,
                ))
            }
        };
        let keyspace = match config.parent {
            Some(_) => Keyspace::over_parent(&config.algo, config.capacity)?,
            None => Keyspace::new(&config.algo, config.capacity, store)?,
        };
        let listener = TcpListener::bind(config.bind)
            .await
            .map_err(|source| ServeError::Bind {
                addr: config.bind,
                source,
            })?;
        let node = Arc::new(Node::new(keyspace, config));
        if let Ok(a) = listener.local_addr() {
            node.set_port(a.port());
        }
        if let Some(parent) = config.parent {
            let up = Arc::new(crate::upstream::Upstream::new(
                parent,
                config.parent_password.clone(),
                config.parent_timeout,
                Arc::downgrade(&node),
            ));
            // Connect now, so a wrong address or password stops the start, not the first read.
            match up.call(vec![Bytes::from_static(b"PING")], None).await {
                Ok(Frame::Error(reply)) => {
                    return Err(ServeError::ParentRefused {
                        addr: parent,
                        reply,
                    });
                }
                Ok(_) => {}
                Err(source) => {
                    return Err(ServeError::Parent {
                        addr: parent,
                        source,
                    });
                }
            }
            node.set_parent(up);
        }
        let coord_desc = match (&config.coord, &config.etcd) {
            (Some(addr), _) => Some(addr.to_string()),
            (None, Some(url)) => Some(format!("etcd:{url}")),
            (None, None) => None,
        };
        if let Some(desc) = coord_desc {
            // A cluster node lists and counts its keys by slot (slot moves, CLUSTER
            // COUNTKEYSINSLOT): the index of them is built now, by one walk of the store, and
            // kept in step from here on.
            let started = std::time::Instant::now();
            let indexed = {
                let mut ks = node.keyspace();
                ks.index_slots()?;
                ks.indexed_keys().unwrap_or(0)
            };
            tracing::info!(
                "slot index: {indexed} keys in {:.3} s",
                started.elapsed().as_secs_f64()
            );
            let addr = listener.local_addr().map_err(|source| ServeError::Bind {
                addr: config.bind,
                source,
            })?;
            let salt = match &config.store {
                Some(p) => std::fs::canonicalize(p)
                    .unwrap_or_else(|_| p.clone())
                    .display()
                    .to_string(),
                None => format!("{:?}", std::time::SystemTime::now()),
            };
            let me = pliant_cluster::Member {
                id: config
                    .node_id
                    .clone()
                    .unwrap_or_else(|| pliant_cluster::node_id(addr, &salt)),
                addr,
            };
            // The control plane's one dialer: the cluster's password (the node's own) for the
            // coordination store and every other node it talks to.
            let dialer = pliant_proto::Dialer::default().password(config.requirepass.as_deref());
            let join = async {
                let coord = pliant_cluster::open_coord(&desc, &dialer).await?;
                pliant_cluster::Membership::join(
                    me,
                    desc.clone(),
                    coord,
                    dialer.clone(),
                    node.stop_signal(),
                )
                .await
            };
            let membership = join.await.map_err(ServeError::Cluster)?;
            // The newest map version acted on is kept beside the keys it protects: a node
            // without a store keeps neither across a restart.
            let cluster = match &config.store {
                Some(dir) => crate::cluster::Cluster::with_record(
                    membership,
                    dir.join(crate::cluster::MAP_RECORD_FILE),
                )
                .map_err(ServeError::MapRecord)?,
                None => crate::cluster::Cluster::new(membership),
            };
            node.set_cluster(cluster);
            // Keys of slots this node does not own or import go (see `cluster::settle`).
            crate::cluster::settle(&node);
            if let Some(b) = &config.balancer {
                let started = pliant_cluster::Balancer::start(node.clone(), b.clone())
                    .map_err(ServeError::Balancer)?;
                if let Some(c) = node.cluster() {
                    c.set_balancer(started);
                }
            }
        }
        let policy = crate::policy::Policy::start(node.clone(), config.policy.clone())
            .map_err(ServeError::Policy)?;
        node.set_policy(policy);
        let metrics = match config.metrics {
            None => None,
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .map_err(|source| ServeError::Bind { addr, source })?,
            ),
        };
        tracing::info!(
            "listening on {}: {} memory tier of {}, {}, durability {}, at most {} clients, values up to {} bytes, {}{}",
            listener
                .local_addr()
                .map_or_else(|_| config.bind.to_string(), |a| a.to_string()),
            config.algo,
            config.capacity,
            match (&config.store, config.parent) {
                (Some(p), _) => format!("store {}", p.display()),
                (None, Some(parent)) => format!("tier of {parent}"),
                (None, None) => "no store".to_string(),
            },
            config.durability,
            config.max_clients,
            config.max_value_size,
            if config.requirepass.is_some() {
                "password required"
            } else {
                "no password"
            },
            node.policy()
                .and_then(|p| p.status().ok())
                .map_or_else(String::new, |s| format!(", policy every {}s", s.interval_s)),
        );
        Ok(Self {
            node,
            listener,
            metrics,
        })
    }

    /// The address it listens on (the port chosen, if the config said 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The address of the metrics endpoint, if it has one.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The node, e.g. to stop it from outside ([`Node::shut_down`]).
    pub fn node(&self) -> Arc<Node> {
        self.node.clone()
    }

    /// Serves until SHUTDOWN or [`Node::shut_down`]: then stops accepting, lets every connection
    /// finish the requests it has read (for at most `DRAIN`, 5 s), and syncs the store.
    pub async fn run(self) -> Result<(), ServeError> {
        let Self {
            node,
            listener,
            metrics,
        } = self;
        let syncer = tokio::spawn(sync_every_second(node.clone()));
        if let Some(m) = metrics {
            tokio::spawn(crate::metrics::serve(m, node.clone()));
        }
        let mut stop = node.stop_signal();
        let mut conns = tokio::task::JoinSet::new();
        while !node.stopping() {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        let node = node.clone();
                        conns.spawn(async move { connection(node, stream).await });
                    }
                    // Out of descriptors and the like: the listener itself is fine, so keep
                    // serving the clients already connected.
                    Err(e) => {
                        tracing::warn!("accept: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                _ = stop.changed() => {}
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
            }
        }
        drop(listener);
        let drained =
            tokio::time::timeout(DRAIN, async { while conns.join_next().await.is_some() {} }).await;
        if drained.is_err() {
            tracing::warn!(
                "{} connections still open after {DRAIN:?}; closing them",
                conns.len()
            );
            conns.abort_all();
        }
        syncer.abort();
        node.sync().await?;
        // The lease ends now rather than when it lapses: the renewing task leaves too, but the
        // process could exit before its request went out, and a node that looks alive for
        // seconds after it stopped can be taken for a new one by a commission.
        if let Some(c) = node.cluster() {
            let id = c.me().id.clone();
            match tokio::time::timeout(Duration::from_secs(2), c.coord().leave(&id)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!("leaving the cluster: {e}"),
                Err(_) => tracing::warn!("leaving the cluster: no answer within 2 s"),
            }
        }
        Ok(())
    }
}

/// Refuses what would let anyone who can reach the machine in: a non-loopback address without a
/// password (Redis's protected mode, made strict), or a non-loopback metrics address, which no
/// password protects; `--unsafe-no-auth` says a firewall already does.
fn refuse_unprotected(config: &Config) -> Result<(), ServeError> {
    if config.unsafe_no_auth {
        return Ok(());
    }
    if !config.bind.ip().is_loopback() && config.requirepass.is_none() {
        return Err(ServeError::Unprotected { addr: config.bind });
    }
    match config.metrics {
        Some(addr) if !addr.ip().is_loopback() => Err(ServeError::UnprotectedMetrics { addr }),
        _ => Ok(()),
    }
}

/// Once a second: deletes the expired keys memory holds (a bounded sweep), commits what is
/// pending and, under `--durability everysec`, syncs the store if anything was written.
async fn sync_every_second(node: Arc<Node>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        {
            let mut ks = node.keyspace();
            // Keys memory holds that expired since: deleted now, not at their next read. At most
            // 65,536 slots a second under the lock (well under a millisecond).
            if let Err(e) = ks.expire_sweep(now_ms(), 1 << 16) {
                tracing::error!("expiring keys: {}", pliant_proto::error::chain(&e));
            }
        }
        // Writes left uncommitted by commands that are not writes (a read that found a key
        // expired deletes it) are committed here at the latest. The store write and the fsync
        // run with the keyspace unlocked: the fsync stalled every client once a second.
        let done = match node.durability() {
            Durability::EverySec => node.sync().await,
            _ => node.write_pending().await.map(|_| ()),
        };
        if let Err(e) = done {
            tracing::error!(
                "periodic commit or sync failed: {}",
                pliant_proto::error::chain(&e)
            );
        }
    }
}

async fn connection(node: Arc<Node>, mut stream: TcpStream) {
    let peer = stream.peer_addr().ok();
    let Some(id) = node.admit() else {
        tracing::info!(
            "refused a connection from {}: max number of clients reached",
            shown(peer)
        );
        let _ = stream
            .write_all(b"-ERR max number of clients reached\r\n")
            .await;
        return;
    };
    // Leaves however the connection ends, a panic of its task included: one that panicked kept
    // its place for good (one of `--max-clients`, a line of CLIENT LIST, and group commit never
    // again found every open connection waiting for its fsync).
    let _left = Left(&node, id);
    let _ = stream.set_nodelay(true);
    let unknown = SocketAddr::from(([0, 0, 0, 0], 0));
    let client = Arc::new(crate::clients::Client::new(
        id,
        peer.unwrap_or(unknown),
        stream.local_addr().unwrap_or(unknown),
        std::os::fd::AsRawFd::as_raw_fd(&stream),
    ));
    node.registry().add(client.clone());
    tracing::info!("client {id} connected from {}", shown(peer));
    let mut session = Session {
        id,
        authenticated: !node.requires_auth(),
        client: Some(client.clone()),
        ..Session::default()
    };
    // Caught so that its WATCHed keys go however it ends, a panic of its serving (a bug)
    // included: they need the session (`cmd::closed`), which the guard above cannot reach.
    let served = {
        let mut serving = std::pin::pin!(serve(&node, &mut stream, &mut session, &client));
        std::future::poll_fn(|cx| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| serving.as_mut().poll(cx)))
                .map_or_else(|panic| std::task::Poll::Ready(Err(panic)), |p| p.map(Ok))
        })
        .await
    };
    crate::cmd::closed(&node, &mut session);
    let why = match served {
        Ok(Ok(())) if client.is_killed() => "killed (CLIENT KILL)".to_string(),
        Ok(Ok(())) => "closed".to_string(),
        Ok(Err(e)) => e.to_string(),
        Err(panic) => std::panic::resume_unwind(panic),
    };
    tracing::info!("client {id} ({}) left: {why}", shown(peer));
    session.settle(&node);
}

/// An admitted connection's place among the open ones, given up when dropped.
struct Left<'a>(&'a Node, u64);

impl Drop for Left<'_> {
    fn drop(&mut self) {
        self.0.registry().remove(self.1);
        self.0.tracking().disable(self.1);
        self.0.leave();
    }
}

/// Replies a client yet to authenticate may leave unread before it is closed: Redis's 1,024
/// bytes (`checkClientOutputBufferLimits`, networking.c).
const UNAUTHENTICATED_OUTPUT: usize = 1024;

/// Replies a connection is sent in all before it authenticates; past it, it is closed. The
/// 1 KiB above counts only what the node holds, and the socket's buffers take far more: a
/// client's receive buffer grows without it reading (to `tcp_rmem`'s 32 MiB on this machine's
/// kernel), so a client that never read took all the refusals of Redis's test's million SETs
/// (34 MB) in one run of five, and the time they cost the node. What a client says before its
/// password is a HELLO (under 1 KiB of reply) and a few refusals: 1 MiB is some 30,000 of those
/// (a password guessed 15,000 times on one connection), so no client that goes on to
/// authenticate meets it.
const UNAUTHENTICATED_REPLIES: usize = 1 << 20;

/// Bytes of replies a connection holds before it sends them: the requests of a pipeline past
/// this wait until the replies before them are written. A client that pipelines reads of large
/// values (a read of 16 KiB holds some 600 GETs) and reads nothing back otherwise made the node
/// hold every reply at once (600 of a 1 MiB value: 600 MiB, for any local user on a loopback
/// node without a password); now it holds this, plus one reply, and the socket's buffers. Far
/// above what a pipeline of ordinary replies fills (-P 16 of 100-byte values: 2 KiB), so the
/// one write a batch stays one.
const REPLIES_AT_ONCE: usize = 1 << 20;

/// Writes what the socket takes of `out` now, without waiting, and drops it from `out`; whether
/// what is left is at most `limit` bytes.
fn sent_within(stream: &TcpStream, out: &mut Vec<u8>, limit: usize) -> std::io::Result<bool> {
    let mut sent = 0;
    while sent < out.len() {
        match stream.try_write(&out[sent..]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    out.drain(..sent);
    Ok(out.len() <= limit)
}

/// An address for the log, or `?` if the socket could not say.
fn shown(addr: Option<SocketAddr>) -> String {
    addr.map_or_else(|| "?".to_string(), |a| a.to_string())
}

/// Warms the memory tier for the keys of the requests waiting in `buf` when there are several
/// (a pipeline): see [`Keyspace::warm`].
fn warm(node: &Node, buf: &[u8], ahead: &mut Vec<std::ops::Range<usize>>) {
    ahead.clear();
    let n = pliant_proto::frame::peek_keys(buf, Keyspace::WARM_MAX, |k| ahead.push(k));
    if n > 1 {
        node.keyspace().warm(ahead.iter().map(|r| &buf[r.clone()]));
    }
}

/// Runs one request on this node (not a tier's) at `now` (Unix ms). Over a store, what the
/// command would read of the store under the keyspace lock is read first, off it: one client's
/// disk read or walk of the whole store stalls no other client. A command queued in MULTI reads
/// and walks when EXEC runs it, under the lock (EXEC's commands run back to back).
pub(crate) async fn run_here(
    node: &Node,
    session: &mut Session,
    args: &[Bytes],
    now: u64,
) -> Frame {
    let spec = match session.multi {
        None => crate::cmd::check(session, args).ok(),
        // Queued by `execute`, not run: nothing to do ahead of it.
        Some(_) => None,
    };
    // PLIANT.MIGRATE and PLIANT.NETPROBE wait on another node, which the command table's synchronous run cannot.
    if let Some(spec) = spec
        && let Some(kind) = spec.facts.streams
        && !session.refuses_while_subscribed(spec)
    {
        let reply = crate::cmd::stream(kind, node, session, args, now).await;
        let mut ctx = Ctx::new(node, session, now);
        ctx.checked = Some(spec);
        ctx.walked = Some(crate::cmd::Walked::Streamed(reply));
        return execute(&mut ctx, args);
    }
    let mut walked = None;
    if node.has_store()
        && let Some(spec) = spec
    {
        // The keys it reads that memory lacks.
        if node.reads_ahead() && spec.reads_keys(args) {
            node.read_ahead(spec.keys_of(args)).await;
        }
        // DBSIZE, INFO keyspace, KEYS: O(keys); SCAN: a bounded share. Not for a command
        // `execute` refuses anyway.
        if !session.refuses_while_subscribed(spec) {
            walked = crate::cmd::walk_ahead(node, spec, args, now).await;
        }
    }
    let mut ctx = Ctx::new(node, session, now);
    ctx.checked = spec;
    ctx.walked = walked;
    execute(&mut ctx, args)
}

/// Reads requests, runs each complete one, and writes the replies of everything read in one go
/// (a pipeline gets its replies in one write, and under `always` one sync).
async fn serve(
    node: &Node,
    stream: &mut TcpStream,
    session: &mut Session,
    client: &crate::clients::Client,
) -> std::io::Result<()> {
    let id = session.id;
    let authenticated = Limits {
        max_bulk: node.max_value_size(),
        ..Limits::default()
    };
    // Chosen per request, not per connection: the request after an AUTH in a pipeline gets the
    // full limits.
    let unauthenticated = Limits {
        unauthenticated: true,
        ..authenticated
    };
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let mut out = Vec::with_capacity(16 * 1024);
    // Replies sent or held before the client authenticated, and how many of `out`'s bytes were
    // counted already (what the socket did not take last time).
    let mut refused_bytes = 0usize;
    let mut counted = 0usize;
    // Remembers how far an incomplete request was checked, so a large one arriving in many
    // reads costs linear time.
    let mut cursor = Cursor::default();
    // One request's arguments at a time: the vector is reused, not allocated per request.
    let mut args: Vec<Bytes> = Vec::new();
    let mut ahead: Vec<std::ops::Range<usize>> = Vec::new();
    // Its turn in group commit, from the fsync that acknowledged its last writes.
    let mut turn = None;
    loop {
        // Killed while it waited (CLIENT KILL from another connection): nothing more it sent
        // runs, even if its requests woke it at the same moment.
        if client.is_killed() {
            return Ok(());
        }
        let mut closing = false;
        if session.authenticated {
            warm(node, &buf, &mut ahead);
        }
        // The batch's first command is timed from here, not from the wait for its request; the
        // wall clock is read once a batch too, and each request's time (expiries) follows from
        // the end of the command before it: the clock was 6-9% of a pipelined GET.
        let base = (now_ms(), mono_ns());
        session.mark = Some(base.1);
        // Whether requests already read wait behind `REPLIES_AT_ONCE` of replies.
        let mut more = false;
        let now = |session: &Session| {
            base.0
                + session
                    .mark
                    .map_or(0, |m| m.saturating_sub(base.1) / 1_000_000)
        };
        loop {
            let limits = if session.authenticated {
                &authenticated
            } else {
                &unauthenticated
            };
            match cursor.request(&buf, limits) {
                Ok((request, used)) => {
                    args.clear();
                    match request {
                        // The arguments are slices of the request's bytes, not copies: what a
                        // command keeps (a value, a key) it copies to a size of its own.
                        Request::Ranges(ranges) => {
                            let bytes = buf.split_to(used).freeze();
                            args.extend(ranges.iter().map(|r| bytes.slice(r.clone())));
                            cursor.recycle(ranges);
                        }
                        Request::Inline(inline) => {
                            buf.advance(used);
                            args = inline;
                        }
                    }
                    if args.is_empty() {
                        continue;
                    }
                    let reply = match node.parent() {
                        // A tier's request may wait for its parent: its time is read afresh.
                        Some(up) => crate::leaf::run(node, up, session, &args, now_ms()).await,
                        // Without a store nothing is read or walked first: no future to build
                        // and drop a request (6% of a pipelined GET's instructions).
                        None if !node.has_store() => {
                            let at = now(session);
                            match crate::cmd::check(session, &args) {
                                // The commands a node without a store runs asynchronously.
                                Ok(spec) if spec.facts.streams.is_some() => {
                                    run_here(node, session, &args, at).await
                                }
                                checked => {
                                    let mut ctx = Ctx::new(node, session, at);
                                    ctx.checked = checked.ok();
                                    execute(&mut ctx, &args)
                                }
                            }
                        }
                        None => {
                            let at = now(session);
                            run_here(node, session, &args, at).await
                        }
                    };
                    reply.write(session.proto, &mut out);
                    if !session.also.is_empty() {
                        for more in session.also.drain(..) {
                            more.write(session.proto, &mut out);
                        }
                    }
                    // Let go of the request's bytes: the read buffer can then be reused in place.
                    args.clear();
                    if session.quit || session.shutdown {
                        closing = true;
                        break;
                    }
                    if out.len() >= REPLIES_AT_ONCE {
                        more = true;
                        break;
                    }
                }
                Err(FrameError::Incomplete) => break,
                Err(FrameError::Protocol(why)) => {
                    Frame::error(format!("ERR Protocol error: {why}"))
                        .write(session.proto, &mut out);
                    closing = true;
                    break;
                }
            }
        }
        // This batch's commands, in INFO commandstats from now on.
        session.settle(node);
        // Whether this batch's replies waited for an fsync (`always`): a client that waited for
        // them has sent nothing since, so a read before it has them finds nothing (it was 16% of
        // the node's receives under group commit, each a system call for EAGAIN); a pipelining
        // client's next requests are found by the select below as soon as they are there.
        let mut synced = false;
        if session.wrote {
            synced = node.has_store() && node.durability() == Durability::Always;
            // The batch's writes (and those of every client served meanwhile) reach the store as
            // one batch before any of them is acknowledged; under `always`, synced too, by an
            // fsync shared with the clients waiting with it, off the keyspace lock.
            if let Err(e) = node.commit(&mut turn).await {
                // Not in the store: say nothing was acknowledged by closing without the replies.
                tracing::error!(
                    "client {id}: store failed, closing without replies: {}",
                    pliant_proto::error::chain(&e)
                );
                return Ok(());
            }
            if std::mem::take(&mut session.sync_writes)
                && !synced
                && let Err(e) = node.sync().await
            {
                tracing::error!(
                    "client {id}: store sync failed, closing without replies: {}",
                    pliant_proto::error::chain(&e)
                );
                return Ok(());
            }
        }
        session.wrote = false;
        if !session.awaiting.is_empty() {
            // Tiers holding a key this batch changed drop it before the change is acknowledged.
            node.tracking()
                .wait(std::mem::take(&mut session.awaiting))
                .await;
        }
        if !out.is_empty() {
            if session.authenticated {
                // A client that does not read its replies holds this write: CLIENT KILL still
                // closes it (the node's stop waits for it, at most its drain time, so that a slow
                // reader still gets the replies of writes that were made).
                tokio::select! {
                    biased;
                    w = stream.write_all(&out) => w?,
                    _ = client.closed(|| false) => return Ok(()),
                }
                out.clear();
            } else {
                // (Saturating: a message or push written with the rest empties `out` unseen.)
                refused_bytes += out.len().saturating_sub(counted);
                if refused_bytes > UNAUTHENTICATED_REPLIES {
                    tracing::info!("client {id}: closed: unauthenticated, 1 MiB of replies sent");
                    return Ok(());
                }
                if !sent_within(stream, &mut out, UNAUTHENTICATED_OUTPUT)? {
                    // Redis's rule: a client yet to authenticate that leaves more than 1 KiB of
                    // replies untaken (pipelining SETs it is refused without reading the
                    // refusals) is closed, rather than held on a blocked write for as long as
                    // it likes.
                    tracing::info!("client {id}: closed: unauthenticated, replies left unread");
                    return Ok(());
                }
                counted = out.len();
            }
            // What is left of an unauthenticated client's replies (at most 1 KiB) waits for the
            // socket below while its requests keep being read, as Redis keeps it: a blocked
            // write here would hold the connection for as long as the client does not read.
        }
        if session.shutdown {
            node.shut_down();
        }
        if closing || client.is_killed() || node.stopping() {
            return Ok(());
        }
        if more {
            // The rest of what was read runs before anything more is read (nothing may be
            // waiting on the socket: the client may have sent it all and be reading).
            continue;
        }
        // A pipelining client has usually sent its next requests by now: they are read without
        // the select's futures (readiness, the kill notice, the stop signal: 8% of a pipelined
        // GET's instructions). A connection that receives messages or pushes always waits in
        // the select, so a client that never stops sending cannot starve them; the writes above
        // and the read below use up the task's scheduling budget, so it still yields to the
        // others.
        if out.is_empty() && !synced && session.messages.is_none() && session.pushes.is_none() {
            match read_available(stream, &mut buf) {
                Ok(0) => return Ok(()),
                Ok(_) => {
                    // A read that waits for nothing spends none of the task's scheduling
                    // budget: a client streaming one large value in pieces (no reply, so no
                    // write) would otherwise keep its worker to itself until the value ends.
                    tokio::task::coop::consume_budget().await;
                    continue;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        tokio::select! {
            // Readiness, then a read that does not wait (what `read_buf` does), so that the
            // socket's writability can be awaited beside it.
            r = stream.readable() => {
                r?;
                match read_available(stream, &mut buf) {
                    Ok(0) => return Ok(()),
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
            // Only an unauthenticated client's replies wait here (see above); sent at the top.
            w = stream.writable(), if !out.is_empty() => w?,
            _ = client.closed(|| node.stopping()) => return Ok(()),
            Some(message) = next_message(&mut session.messages) => {
                message.write(session.proto, &mut out);
                stream.write_all(&out).await?;
                out.clear();
            }
            push = next_push(&mut session.pushes) => match push {
                Some(Outgoing::Push(frame)) => {
                    frame.write(session.proto, &mut out);
                    stream.write_all(&out).await?;
                    out.clear();
                }
                Some(Outgoing::Close) | None => return Ok(()),
            },
        }
    }
}

/// Reads what the socket holds into `buf`, without waiting. A read that leaves room in `buf`
/// took everything the socket held, so the socket's readiness is cleared then, as tokio's own
/// `read` does: the next read waits for new data rather than asking the kernel first and being
/// told there is none. (Under group commit 22% of the node's receives had been such refusals,
/// 13,985 of 64,395 in a run of 50,000 SETs: each client waits for its reply before it sends
/// again.) Data that arrives after the read raises readiness anew, and tokio keeps that newer
/// readiness.
fn read_available(stream: &TcpStream, buf: &mut BytesMut) -> std::io::Result<usize> {
    let mut read = 0;
    let r = stream.try_io(tokio::io::Interest::READABLE, || {
        let room = buf.capacity() - buf.len();
        read = stream.try_read_buf(buf)?;
        if read > 0 && read < room {
            return Err(std::io::ErrorKind::WouldBlock.into());
        }
        Ok(read)
    });
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && read > 0 => Ok(read),
        r => r,
    }
}

/// The next message of the channel the connection subscribed to (never, if none).
async fn next_message(
    messages: &mut Option<tokio::sync::mpsc::UnboundedReceiver<Frame>>,
) -> Option<Frame> {
    match messages {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// The next invalidation to push, if the connection tracks keys (never, if not).
async fn next_push(
    pushes: &mut Option<tokio::sync::mpsc::UnboundedReceiver<Outgoing>>,
) -> Option<Outgoing> {
    match pushes {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What each combination of addresses, password and `--unsafe-no-auth` is allowed, decided
    /// before anything is bound.
    #[test]
    fn only_loopback_is_served_without_protection_and_metrics_have_none() {
        let at = |a: &str| -> SocketAddr { a.parse().expect("address") };
        let config = |bind: &str, metrics: Option<&str>, pass: bool, unsafe_no_auth: bool| Config {
            bind: at(bind),
            metrics: metrics.map(at),
            requirepass: pass.then(|| "pw".to_string()),
            unsafe_no_auth,
            ..Config::default()
        };
        let refused = |c: Config| match refuse_unprotected(&c) {
            Ok(()) => "served".to_string(),
            Err(e) => e.to_string(),
        };
        assert_eq!(refused(config("127.0.0.1:0", None, false, false)), "served");
        assert_eq!(
            refused(config("127.0.0.1:0", Some("127.0.0.1:0"), false, false)),
            "served"
        );
        assert_eq!(
            refused(config("[::1]:0", Some("[::1]:0"), false, false)),
            "served"
        );
        assert_eq!(refused(config("0.0.0.0:7000", None, true, false)), "served");
        assert!(
            refused(config("0.0.0.0:7000", None, false, false))
                .starts_with("refusing to serve 0.0.0.0:7000 without a password")
        );
        // A password protects the protocol, not the metrics endpoint.
        for metrics in ["0.0.0.0:9479", "[::]:9479", "10.1.2.3:9479"] {
            let e = refused(config("127.0.0.1:0", Some(metrics), true, false));
            assert!(
                e.starts_with(&format!("refusing to serve metrics on {metrics}"))
                    && e.contains("--unsafe-no-auth"),
                "{e}"
            );
        }
        assert_eq!(
            refused(config("0.0.0.0:7000", Some("0.0.0.0:9479"), false, true)),
            "served"
        );
    }

    /// A config for a pure cache on a loopback port chosen at bind time.
    fn cache() -> Config {
        Config {
            bind: at("127.0.0.1:0"),
            store: None,
            threads: 1,
            ..Config::default()
        }
    }

    fn at(a: &str) -> SocketAddr {
        a.parse().expect("address")
    }

    /// A node under `always` over a store whose fsync panics, a connection to it served by
    /// `connection` on a task of its own: the node, the client's end, the task.
    async fn panicking_connection() -> (Arc<Node>, TcpStream, tokio::task::JoinHandle<()>) {
        let store = pliant_store::FaultyStore::new(pliant_store::MemStore::new());
        store.faults().panic_syncs();
        let store: Arc<dyn pliant_store::Store> = Arc::new(store);
        let ks =
            Keyspace::new("lru", pliant_cache::Capacity::Keys(10), Some(store)).expect("keyspace");
        let node = Arc::new(Node::new(
            ks,
            &Config {
                durability: Durability::Always,
                ..Config::default()
            },
        ));
        let listener = TcpListener::bind(at("127.0.0.1:0")).await.expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("addr"))
            .await
            .expect("connect");
        let (stream, _) = listener.accept().await.expect("accept");
        let served = tokio::spawn(connection(node.clone(), stream));
        (node, client, served)
    }

    /// The bug: a connection whose task panicked never left: it kept one of `--max-clients`
    /// for good (enough such panics and the node refuses everyone), stayed in CLIENT LIST, kept
    /// group commit from ever again finding every open connection waiting for an fsync, and
    /// kept its WATCHed keys watched (a table entry each, a flag every write of them set for
    /// nobody).
    #[tokio::test]
    async fn a_connection_whose_task_panics_leaves_and_lets_go_of_its_watched_keys() {
        let (node, mut client, served) = panicking_connection().await;
        client
            .write_all(b"*2\r\n$5\r\nWATCH\r\n$1\r\nw\r\n")
            .await
            .expect("send");
        let mut ok = [0u8; 5];
        tokio::time::timeout(
            Duration::from_secs(10),
            tokio::io::AsyncReadExt::read_exact(&mut client, &mut ok),
        )
        .await
        .expect("WATCH answered within 10 s")
        .expect("read");
        assert_eq!(&ok, b"+OK\r\n");
        assert!(node.watching(), "w is watched");
        client
            .write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n")
            .await
            .expect("send");
        let ended = tokio::time::timeout(Duration::from_secs(10), served)
            .await
            .expect("the connection's task ends");
        assert!(
            ended.as_ref().is_err_and(|e| e.is_panic()),
            "its task panicked: {ended:?}"
        );
        assert_eq!(node.clients(), 0, "no connection is open");
        assert!(node.registry().all().is_empty(), "none in CLIENT LIST");
        assert!(!node.watching(), "no key is watched");
    }

    /// What binding `config` fails with, on a runtime of its own.
    fn refusal(config: &Config) -> ServeError {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        match rt.block_on(Server::bind(config)) {
            Ok(_) => panic!("the server started"),
            Err(e) => e,
        }
    }

    /// The bug: `ServeError::Policy` held the engine's error as a string, so a caller could
    /// not tell a policy that does not compile from a thread that did not start.
    #[test]
    fn a_policy_that_fails_at_start_is_a_typed_serve_error_with_its_cause() {
        let mut config = cache();
        config.policy.source = Some(pliant_policy::PolicySource::functions(
            "broken",
            "function when( -- never closed",
        ));
        let e = refusal(&config);
        let ServeError::Policy(crate::policy::LivePolicyError::Engine(engine)) = &e else {
            panic!("{e:?}");
        };
        assert!(
            matches!(engine, pliant_policy::PolicyError::Syntax { .. }),
            "{engine:?}"
        );
        // The serve error's own text names the step; the engine's text comes once, as a cause.
        assert_eq!(e.to_string(), "policy");
        let shown = pliant_proto::error::chain(&e);
        assert_eq!(shown, format!("policy: {engine}"));
    }

    /// The bug: `ServeError::Parent` held the connection's error as a string.
    #[test]
    fn a_parent_that_refuses_the_connection_is_a_typed_serve_error_with_its_cause() {
        // A port that was free a moment ago: nothing listens on it.
        let parent = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port");
        let mut config = cache();
        config.parent = Some(parent);
        let e = refusal(&config);
        let ServeError::Parent { addr, source } = &e else {
            panic!("{e:?}");
        };
        assert_eq!(*addr, parent);
        assert!(
            matches!(source, crate::upstream::UpstreamError::Connect { .. }),
            "{source:?}"
        );
        let shown = pliant_proto::error::chain(&e);
        assert!(
            shown.starts_with(&format!("parent {parent}: "))
                && shown.matches("parent").count() == 1,
            "{shown}"
        );
    }
}
