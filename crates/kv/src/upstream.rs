//! A tier's connection to its parent (`--parent`): requests pipelined on one RESP3 connection,
//! with the parent's invalidation pushes applied in the order they arrive among the replies.
//!
//! Order is what keeps a tier coherent. The parent answers a fetch and tells of a change on the
//! same connection, in the order it did them; the reader applies both in that order (a reply's
//! effect on memory runs in the reader, [`Upstream::send`]'s `then`), so a value is never kept
//! after the news that it changed, whatever the tasks waiting for the reply do meanwhile.
//!
//! Invalidations are acknowledged on a second connection (`PLIANT.INVALIDATED`), so that an
//! acknowledgement never queues behind this tier's own requests: the parent holds a write's reply
//! until its tiers have applied the invalidation (see [`crate::tracking`]).
//!
//! A lost connection empties memory (this tier can no longer hear of changes) and fails the
//! requests under way; the next request connects again.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};

use bytes::{Bytes, BytesMut};
use pliant_proto::frame::{Cursor, Frame, FrameError, Limits};
use pliant_proto::{AsyncClient, ClientError, Dialer, encode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, watch};

use crate::node::Node;

/// Why the parent could not answer. Shared (`Arc`) by every reader that joined a fetch
/// ([`crate::keyspace::Fetched`]), so none of them needs it cloned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamError {
    /// The parent could not be reached or refused the tier's handshake: the client's error says
    /// which (`ClientError::Auth` for the password, `Refused` for a command the tier sends to
    /// declare itself, `Io`/`Timeout` for the connection).
    #[error("parent {addr}")]
    Connect {
        /// The parent.
        addr: SocketAddr,
        /// Why (boxed: every `Result` of the tier's requests carries this error).
        #[source]
        source: Box<ClientError>,
    },
    /// The connection closed before the reply came.
    #[error("parent {addr}: connection lost before it replied")]
    Lost {
        /// The parent.
        addr: SocketAddr,
    },
    /// The parent did not answer within `--parent-timeout`: what was asked may or may not have
    /// been applied.
    #[error("parent {addr} did not {what} within {after:?} (--parent-timeout)")]
    TimedOut {
        /// The parent.
        addr: SocketAddr,
        /// What the tier waited for ("answer a fetch").
        what: &'static str,
        /// `--parent-timeout`.
        after: std::time::Duration,
    },
    /// The parent answered a fetch (`PLIANT.FETCH`) with an error reply; this is also how a
    /// request under way when the connection was lost ends (the reader answers it with one).
    #[error("parent: {reply}")]
    Refused {
        /// The parent.
        addr: SocketAddr,
        /// Its error reply.
        reply: String,
    },
    /// The parent's reply to a fetch is not what `PLIANT.FETCH` answers.
    #[error("the parent's PLIANT.FETCH reply is malformed")]
    Malformed {
        /// The parent.
        addr: SocketAddr,
    },
    /// The reader fetching a key went away without an answer (its request never sent, or its
    /// client gone before it was), so the readers that joined its fetch have none either.
    #[error("the connection to the parent closed during the fetch")]
    Abandoned,
}

/// What runs in the reader when a request's reply arrives, before anything later is read.
pub type Then = Box<dyn FnOnce(&Frame, &Node) + Send>;

struct Call {
    args: Vec<Bytes>,
    reply: oneshot::Sender<Frame>,
    then: Option<Then>,
}

/// The tier's parent (see the module doc).
pub struct Upstream {
    /// The parent, typed, for the errors that name it (the dialer holds it as text).
    addr: SocketAddr,
    /// Built once: the parent's address, the password, and the timeouts every dial uses.
    dialer: Dialer,
    /// `--parent-timeout`.
    timeout: std::time::Duration,
    node: Weak<Node>,
    conn: tokio::sync::Mutex<Option<(mpsc::UnboundedSender<Call>, Arc<Acks>)>>,
}

/// The deferred acknowledgements of one connection's writes (`PLIANT.WRITE`): tickets whose
/// `pliant-acked` push has come, and writes waiting for theirs.
#[derive(Debug, Default)]
struct Acks(Mutex<AcksInner>);

#[derive(Debug, Default)]
struct AcksInner {
    done: std::collections::HashSet<u64>,
    waiting: std::collections::HashMap<u64, oneshot::Sender<()>>,
    lost: bool,
}

impl Acks {
    fn lock(&self) -> std::sync::MutexGuard<'_, AcksInner> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The parent says ticket `t`'s write is acknowledged.
    fn done(&self, t: u64) {
        let mut a = self.lock();
        match a.waiting.remove(&t) {
            Some(tx) => {
                let _ = tx.send(());
            }
            None => {
                a.done.insert(t);
            }
        }
    }

    /// Resolves once ticket `t`'s write is acknowledged; fails if the connection is lost first.
    fn wait(&self, t: u64) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        let mut a = self.lock();
        if a.done.remove(&t) {
            let _ = tx.send(());
        } else if !a.lost {
            a.waiting.insert(t, tx);
        }
        rx
    }

    /// The connection is gone: every write still waiting fails.
    fn lose(&self) {
        let mut a = self.lock();
        a.lost = true;
        a.waiting.clear();
    }
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("addr", &self.addr)
            .finish()
    }
}

impl Upstream {
    /// The parent at `addr`, for `node`; connects on the first request.
    pub fn new(
        addr: SocketAddr,
        password: Option<String>,
        timeout: std::time::Duration,
        node: Weak<Node>,
    ) -> Self {
        Self {
            addr,
            // A parent that does not take a connection in the time a tier has to acknowledge an
            // invalidation is as good as gone (the system's own connect timeout is minutes).
            // Replies are waited for by `within`, with `--parent-timeout`, not by the socket.
            dialer: Dialer::new(addr)
                .password(password.as_deref())
                .connect_timeout(crate::tracking::ACK_TIMEOUT)
                .io_timeout(None),
            timeout,
            node,
            conn: tokio::sync::Mutex::new(None),
        }
    }

    /// The parent's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Waits for `answer`, something the parent sends, at most `--parent-timeout`; after that
    /// the caller's client gets this error (`what` says what it was waiting for). What the
    /// parent sends later is still handled as if the client had waited: a fetched value is
    /// kept, a write's reply updates memory.
    pub async fn within<T>(
        &self,
        what: &'static str,
        answer: impl std::future::Future<Output = T>,
    ) -> Result<T, UpstreamError> {
        tokio::time::timeout(self.timeout, answer)
            .await
            .map_err(|_| UpstreamError::TimedOut {
                addr: self.addr,
                what,
                after: self.timeout,
            })
    }

    /// Sends a request; `then` runs in the reader when its reply arrives (or with an error
    /// reply, if the connection is lost first). Returns what the reply will arrive on, so a
    /// caller can send several requests before waiting for any.
    pub async fn send(
        &self,
        args: Vec<Bytes>,
        then: Option<Then>,
    ) -> Result<oneshot::Receiver<Frame>, UpstreamError> {
        self.send_on(args, then).await.map(|(rx, _)| rx)
    }

    /// [`send`](Self::send), also giving the acknowledgements of the connection it went on.
    async fn send_on(
        &self,
        args: Vec<Bytes>,
        then: Option<Then>,
    ) -> Result<(oneshot::Receiver<Frame>, Arc<Acks>), UpstreamError> {
        let (reply, rx) = oneshot::channel();
        let mut call = Call { args, reply, then };
        let mut conn = self.conn.lock().await;
        for _ in 0..2 {
            if let Some((tx, acks)) = conn.as_ref() {
                match tx.send(call) {
                    Ok(()) => return Ok((rx, acks.clone())),
                    // The connection died since: connect again, once.
                    Err(mpsc::error::SendError(c)) => call = c,
                }
            }
            *conn = Some(self.connect().await?);
        }
        Err(UpstreamError::Lost { addr: self.addr })
    }

    /// Sends a write (`PLIANT.WRITE`) and waits until the parent has acknowledged it: its reply,
    /// then, if other tiers held keys it changed, the push saying they have dropped them. `then`
    /// runs in the reader with the write's own reply, as soon as it arrives.
    pub async fn write(&self, args: Vec<Bytes>, then: Then) -> Result<Frame, UpstreamError> {
        let (reply, acked) = self.write_deferred(args, then).await?;
        if let Some(acked) = acked {
            acked
                .await
                .map_err(|_| UpstreamError::Lost { addr: self.addr })?;
        }
        Ok(reply)
    }

    /// [`write`](Self::write) without waiting for the acknowledgement: the reply, and what
    /// resolves once the parent acknowledges the write (`None`: it already has), or fails if
    /// the connection is lost first. A tier passing on a child's write hands the child a ticket
    /// of its own that waits on it, rather than holding the child's connection.
    pub async fn write_deferred(
        &self,
        args: Vec<Bytes>,
        then: Then,
    ) -> Result<(Frame, Option<oneshot::Receiver<()>>), UpstreamError> {
        let mut wrapped = Vec::with_capacity(args.len() + 1);
        wrapped.push(Bytes::from_static(b"PLIANT.WRITE"));
        wrapped.extend(args);
        let then: Then = Box::new(move |f, node| then(&unwrap_write(f).0, node));
        let (rx, acks) = self.send_on(wrapped, Some(then)).await?;
        let reply = rx
            .await
            .map_err(|_| UpstreamError::Lost { addr: self.addr })?;
        let (reply, ticket) = unwrap_write(&reply);
        Ok((reply, (ticket > 0).then(|| acks.wait(ticket))))
    }

    /// Sends a request and waits for its reply.
    pub async fn call(&self, args: Vec<Bytes>, then: Option<Then>) -> Result<Frame, UpstreamError> {
        let rx = self.send(args, then).await?;
        rx.await
            .map_err(|_| UpstreamError::Lost { addr: self.addr })
    }

    /// Opens the two connections, shakes hands (RESP3, the password, tracking without loop, the
    /// tier declared) and starts the tasks that serve them.
    async fn connect(&self) -> Result<(mpsc::UnboundedSender<Call>, Arc<Acks>), UpstreamError> {
        let err = |source: ClientError| UpstreamError::Connect {
            addr: self.addr,
            source: Box::new(source),
        };
        let mut data = self
            .dialer
            .clone()
            .resp3()
            .connect_async()
            .await
            .map_err(err)?;
        let id = {
            let mut ask = async |args: &[&[u8]]| -> Result<Frame, UpstreamError> {
                match data.call(args).await {
                    Ok(Frame::Error(message)) => Err(err(ClientError::Refused {
                        addr: self.addr.to_string(),
                        command: String::from_utf8_lossy(&args.join(&b' ')).into_owned(),
                        message,
                    })),
                    Ok(f) => Ok(f),
                    Err(e) => Err(err(e)),
                }
            };
            ask(&[b"CLIENT", b"TRACKING", b"ON", b"NOLOOP"]).await?;
            let id = match ask(&[b"CLIENT", b"ID"]).await? {
                Frame::Integer(id) => id,
                other => {
                    return Err(err(ClientError::Refused {
                        addr: self.addr.to_string(),
                        command: "CLIENT ID".into(),
                        message: format!("answered {other:?}, not an integer"),
                    }));
                }
            };
            ask(&[b"PLIANT.TIER"]).await?;
            id
        };
        let control = self.dialer.connect_async().await.map_err(err)?;
        let (data, buf) = data.into_parts();
        let (tx, rx) = mpsc::unbounded_channel();
        let (ack_tx, ack_rx) = watch::channel(0u64);
        let acks = Arc::new(Acks::default());
        let pending = Arc::new(Mutex::new(VecDeque::new()));
        let (read, write) = data.into_split();
        let writer = tokio::spawn(write_calls(write, rx, pending.clone()));
        let acker = tokio::spawn(acknowledge(control, id, ack_rx));
        tokio::spawn(read_replies(
            read,
            buf,
            pending,
            self.node.clone(),
            Heard {
                applied: ack_tx,
                acks: acks.clone(),
            },
            self.addr,
            [writer, acker],
        ));
        tracing::info!("connected to parent {} as client {id}", self.addr);
        Ok((tx, acks))
    }
}

type Pending = Arc<Mutex<VecDeque<(oneshot::Sender<Frame>, Option<Then>)>>>;

/// Where the reader passes on the pushes it hears besides replies: how many invalidations this
/// tier has applied (for [`acknowledge`]), and the parent's deferred acknowledgements.
struct Heard {
    applied: watch::Sender<u64>,
    acks: Arc<Acks>,
}

/// Writes requests as they come, each queued for its reply before it is written (one writer,
/// so the queue's order is the wire's).
async fn write_calls(
    mut w: tokio::net::tcp::OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Call>,
    pending: Pending,
) {
    let mut out = Vec::new();
    while let Some(call) = rx.recv().await {
        out.clear();
        encode(&call.args, &mut out);
        // Whatever else is queued goes in the same write.
        pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back((call.reply, call.then));
        while let Ok(more) = rx.try_recv() {
            encode(&more.args, &mut out);
            pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push_back((more.reply, more.then));
        }
        if w.write_all(&out).await.is_err() {
            return;
        }
    }
}

/// Reads replies and pushes in order: a reply completes the oldest request (its `then` first),
/// a push invalidates keys here and in this node's own children, then is acknowledged.
async fn read_replies(
    mut r: tokio::net::tcp::OwnedReadHalf,
    mut buf: BytesMut,
    pending: Pending,
    node: Weak<Node>,
    heard: Heard,
    addr: SocketAddr,
    tasks: [tokio::task::JoinHandle<()>; 2],
) {
    let Heard {
        applied: acked,
        acks,
    } = heard;
    let limits = Limits::default();
    let mut cursor = Cursor::default();
    // Invalidations are applied here, in wire order, and acknowledged in that order by a task of
    // their own once this node's own children have applied them too: the reader never waits for
    // a child, which may itself be waiting for a reply only this reader can read.
    let (applied_tx, mut applied_rx) = mpsc::unbounded_channel::<Vec<crate::tracking::Wait>>();
    if let Some(n) = node.upgrade() {
        let tracking = n.tracking().clone();
        tokio::spawn(async move {
            let mut applied = 0u64;
            while let Some(waits) = applied_rx.recv().await {
                tracking.wait(waits).await;
                applied += 1;
                acked.send_replace(applied);
            }
        });
    }
    let why = 'read: loop {
        loop {
            match cursor.parse(&buf, &limits) {
                Ok((frame, used)) => {
                    let _ = buf.split_to(used);
                    let Some(node) = node.upgrade() else {
                        break 'read "the node stopped".to_string();
                    };
                    match frame {
                        Frame::Push(items) => {
                            tracing::debug!("push from the parent: {items:?}");
                            if let [Frame::Bulk(kind), Frame::Integer(t)] = items.as_slice()
                                && kind.as_ref() == crate::tracking::ACKED
                            {
                                acks.done(*t as u64);
                            } else if let Some(waits) = invalidate(&node, &items) {
                                let _ = applied_tx.send(waits);
                            }
                        }
                        reply => {
                            let next = pending
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .pop_front();
                            let Some((tx, then)) = next else {
                                break 'read "a reply to no request".to_string();
                            };
                            if let Some(then) = then {
                                then(&reply, &node);
                            }
                            let _ = tx.send(reply);
                        }
                    }
                }
                Err(FrameError::Incomplete) => break,
                Err(FrameError::Protocol(e)) => break 'read format!("protocol error: {e}"),
            }
        }
        match r.read_buf(&mut buf).await {
            Ok(0) => break "closed by the parent".to_string(),
            Ok(_) => {}
            Err(e) => break e.to_string(),
        }
    };
    for t in tasks {
        t.abort();
    }
    acks.lose();
    tracing::warn!("lost parent {addr} ({why}); memory emptied, reconnecting on the next request");
    let lost = Frame::error(format!("ERR parent {addr}: connection lost ({why})"));
    let calls: Vec<_> = pending
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .drain(..)
        .collect();
    if let Some(node) = node.upgrade() {
        // Changes made while disconnected would go unheard: nothing held can be trusted, here or
        // in this node's own children (told to drop everything; nothing waits for them).
        node.keyspace().forget_memory();
        drop(node.tracking().wrote_all(0));
        for (tx, then) in calls {
            if let Some(then) = then {
                then(&lost, &node);
            }
            let _ = tx.send(lost.clone());
        }
    }
}

/// A `PLIANT.WRITE` reply as `(the write's reply, ticket)`; an error reply (the parent refused
/// `PLIANT.WRITE` itself) is the write's, with nothing to wait for.
fn unwrap_write(f: &Frame) -> (Frame, u64) {
    match f {
        Frame::Array(v) => match v.as_slice() {
            [reply, Frame::Integer(t)] => (reply.clone(), (*t).max(0) as u64),
            _ => (
                Frame::error("ERR the parent's PLIANT.WRITE reply is malformed"),
                0,
            ),
        },
        other => (other.clone(), 0),
    }
}

/// Applies an `invalidate` push to memory and passes it on to this node's own children; what to
/// wait for before acknowledging it (their acknowledgements, as the parent waits for this
/// one's). `None` for any other push.
fn invalidate(node: &Node, items: &[Frame]) -> Option<Vec<crate::tracking::Wait>> {
    let [Frame::Bulk(kind), keys] = items else {
        return None;
    };
    if kind.as_ref() != b"invalidate" {
        return None;
    }
    let waits = match keys {
        Frame::Array(keys) => {
            let keys: Vec<Bytes> = keys
                .iter()
                .filter_map(|k| match k {
                    Frame::Bulk(b) => Some(b.clone()),
                    _ => None,
                })
                .collect();
            node.keyspace().invalidate(Some(&keys));
            node.tracking().wrote(0, keys.iter())
        }
        _ => {
            node.keyspace().invalidate(None);
            node.tracking().wrote_all(0)
        }
    };
    Some(waits)
}

/// Tells the parent how many invalidations this tier has applied, as that number grows (a
/// burst of them is acknowledged once, with the latest count).
async fn acknowledge(mut control: AsyncClient, id: i64, mut applied: watch::Receiver<u64>) {
    while applied.changed().await.is_ok() {
        let n = *applied.borrow_and_update();
        tracing::debug!("acknowledging {n} invalidations as client {id}");
        let (id, n) = (id.to_string(), n.to_string());
        let args: [&[u8]; 3] = [b"PLIANT.INVALIDATED", id.as_bytes(), n.as_bytes()];
        match control.call(&args).await {
            Ok(Frame::Error(e)) => {
                tracing::warn!("the parent refused an acknowledgement of invalidations: {e}");
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!("acknowledging invalidations to the parent: {e}");
                return;
            }
        }
    }
}
