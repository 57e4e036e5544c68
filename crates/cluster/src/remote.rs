//! A node's (or the rescaler's) side of the embedded coordination store served by
//! [`crate::coord_server`]: requests on one connection, opened again after a failure, and the
//! watch on a connection of its own that a task keeps open.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pliant_proto::{AsyncClient, ClientError, Dialer, Frame};
use tokio::sync::watch;

use crate::coord::{BoxFuture, ClusterState, Coord, CoordError};
use crate::map::{Member, SlotMap};

/// How long a request to the coordination store may take (connecting included) before it
/// counts as unreachable.
const TIMEOUT: Duration = Duration::from_secs(5);

/// How long an update of the map or the balancer may take: the store saves it (an fsync)
/// before it answers, and a save waits behind whatever else the disk is writing (over 5 s
/// seen in the suite, on 2 cores with several clusters' nodes writing their stores).
const SAVE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the watch waits before connecting again after it lost the store.
const RETRY: Duration = Duration::from_millis(500);

/// The embedded coordination store at `addr`.
pub struct Remote {
    addr: SocketAddr,
    dialer: Dialer,
    conn: tokio::sync::Mutex<Option<AsyncClient>>,
    /// Updates go on a connection of their own, so that a save that takes a while holds up
    /// no state read behind it.
    saves: tokio::sync::Mutex<Option<AsyncClient>>,
}

impl Remote {
    /// A client of the store at `addr`, reached with `dialer` (the cluster's password; its
    /// timeouts become the store's, 5 s). Nothing is connected until the first request.
    pub fn new(addr: SocketAddr, dialer: &Dialer) -> Self {
        Self {
            addr,
            dialer: dialer
                .to(addr)
                .connect_timeout(TIMEOUT)
                .io_timeout(Some(TIMEOUT)),
            conn: tokio::sync::Mutex::new(None),
            saves: tokio::sync::Mutex::new(None),
        }
    }

    fn unreachable(&self, why: impl std::fmt::Display) -> CoordError {
        CoordError::Unreachable {
            addr: self.addr.to_string(),
            why: why.to_string(),
        }
    }

    async fn connect(&self) -> Result<AsyncClient, CoordError> {
        self.dialer.connect_async().await.map_err(|e| self.lost(e))
    }

    /// A client's failure as the store's: a refused password is the store's answer, anything
    /// else leaves it unreachable.
    fn lost(&self, e: ClientError) -> CoordError {
        match e {
            ClientError::Auth { message, .. } => CoordError::Refused(message),
            e => self.unreachable(e.reason()),
        }
    }

    /// One request; a failed connection is dropped so the next request opens another.
    async fn call(&self, args: &[&[u8]]) -> Result<Frame, CoordError> {
        self.call_within(args, TIMEOUT).await
    }

    /// [`call`](Self::call), with a reply awaited for up to `timeout`.
    async fn call_within(&self, args: &[&[u8]], timeout: Duration) -> Result<Frame, CoordError> {
        self.call_on(&self.conn, args, timeout).await
    }

    /// [`call_within`](Self::call_within) on connection `conn`.
    async fn call_on(
        &self,
        conn: &tokio::sync::Mutex<Option<AsyncClient>>,
        args: &[&[u8]],
        timeout: Duration,
    ) -> Result<Frame, CoordError> {
        let mut conn = conn.lock().await;
        if conn.is_none() {
            *conn = Some(self.connect().await?);
        }
        let c = conn.as_mut().expect("connected above");
        match c.call_within(args, timeout).await {
            Ok(Frame::Error(e)) if e.starts_with("NOLEASE") => Err(CoordError::NoLease(
                e.split(' ').nth(2).unwrap_or("").to_string(),
            )),
            Ok(Frame::Error(e)) => Err(CoordError::Refused(e)),
            Ok(f) => Ok(f),
            Err(e) => {
                *conn = None;
                Err(self.unreachable(e.reason()))
            }
        }
    }

    async fn ok(&self, args: &[&[u8]]) -> Result<(), CoordError> {
        self.call(args).await.map(|_| ())
    }

    /// Asks the supervisor of a local cluster to start `n` more nodes: their ids, once joined.
    /// [`CoordError::Refused`] where no supervisor runs the store (nodes are started by hand).
    pub async fn spawn_nodes(&self, n: usize) -> Result<Vec<String>, CoordError> {
        let n = n.to_string();
        // Starting nodes takes a while: the supervisor waits up to 30 s for them to join.
        let spawn: [&[u8]; 3] = [b"PLIANT.COORD", b"SPAWN", n.as_bytes()];
        match self.call_within(&spawn, Duration::from_secs(60)).await? {
            Frame::Array(ids) => Ok(ids
                .into_iter()
                .filter_map(|f| match f {
                    Frame::Bulk(b) => Some(String::from_utf8_lossy(&b).into_owned()),
                    _ => None,
                })
                .collect()),
            other => Err(self.unreachable(format!("unexpected reply {other:?}"))),
        }
    }

    /// Asks the supervisor of a local cluster to stop node `id` (cleanly) and end its lease.
    pub async fn retire_node(&self, id: &str) -> Result<(), CoordError> {
        let retire: [&[u8]; 3] = [b"PLIANT.COORD", b"RETIRE", id.as_bytes()];
        self.call_within(&retire, Duration::from_secs(60))
            .await
            .map(|_| ())
    }

    /// Keeps `tx` current from a WATCH connection, connecting again whenever it is lost, until
    /// every receiver is gone.
    async fn follow(self: Arc<Self>, tx: watch::Sender<Arc<ClusterState>>) {
        let mut warned = false;
        while !tx.is_closed() {
            match self.watch_once(&tx).await {
                Ok(()) => return,
                Err(e) => {
                    if !warned {
                        tracing::warn!("{e}; keeping the last slot map and trying again");
                        warned = true;
                    }
                }
            }
            tokio::time::sleep(RETRY).await;
        }
    }

    /// One WATCH connection: every state pushed goes to `tx`. Returns `Ok` once nobody watches.
    async fn watch_once(&self, tx: &watch::Sender<Arc<ClusterState>>) -> Result<(), CoordError> {
        let mut c = self.connect().await?;
        c.send(&[b"PLIANT.COORD", b"WATCH"])
            .await
            .map_err(|e| self.unreachable(e.reason()))?;
        loop {
            tokio::select! {
                frame = c.read() => {
                    let frame = frame.map_err(|e| self.unreachable(e.reason()))?;
                    let state = self.pushed(frame)?;
                    // A map older than one already seen (the store restarted from an older
                    // file, or states crossed) never replaces it.
                    if state.map.version() >= tx.borrow().map.version() {
                        tx.send_replace(Arc::new(state));
                    }
                }
                _ = tx.closed() => return Ok(()),
            }
        }
    }

    fn pushed(&self, frame: Frame) -> Result<ClusterState, CoordError> {
        match frame {
            Frame::Push(items) | Frame::Array(items) => match items.as_slice() {
                [Frame::Bulk(kind), Frame::Bulk(json)] if kind.as_ref() == b"pliant.coord" => {
                    let text = std::str::from_utf8(json)
                        .map_err(|_| CoordError::Refused("state is not UTF-8".into()))?;
                    Ok(ClusterState::from_json(text)?)
                }
                _ => Err(self.unreachable("unexpected push")),
            },
            Frame::Error(e) => Err(CoordError::Refused(e)),
            other => Err(self.unreachable(format!("unexpected reply {other:?}"))),
        }
    }
}

impl Coord for Arc<Remote> {
    fn join(&self, me: Member, ttl: Duration) -> BoxFuture<'_, Result<(), CoordError>> {
        Box::pin(async move {
            let (addr, ttl) = (me.addr.to_string(), ttl.as_millis().to_string());
            self.ok(&[
                b"PLIANT.COORD",
                b"JOIN",
                me.id.as_bytes(),
                addr.as_bytes(),
                ttl.as_bytes(),
            ])
            .await
        })
    }

    fn keepalive<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), CoordError>> {
        Box::pin(async move {
            self.ok(&[b"PLIANT.COORD", b"KEEPALIVE", id.as_bytes()])
                .await
        })
    }

    fn renewer(&self) -> Option<Arc<dyn Coord>> {
        // Not connected yet: its connection is made by its first request, in the runtime
        // that makes it.
        Some(Arc::new(Arc::new(Remote::new(self.addr, &self.dialer))))
    }

    fn leave<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), CoordError>> {
        Box::pin(async move { self.ok(&[b"PLIANT.COORD", b"LEAVE", id.as_bytes()]).await })
    }

    fn state(&self) -> BoxFuture<'_, Result<ClusterState, CoordError>> {
        Box::pin(async move {
            match self.call(&[b"PLIANT.COORD", b"GET"]).await? {
                Frame::Bulk(json) => Ok(ClusterState::from_json(&String::from_utf8_lossy(&json))?),
                other => Err(self.unreachable(format!("unexpected reply {other:?}"))),
            }
        })
    }

    fn update(&self, expected: u64, map: SlotMap) -> BoxFuture<'_, Result<bool, CoordError>> {
        Box::pin(async move {
            let (v, json) = (expected.to_string(), map.to_json());
            let update: [&[u8]; 4] = [b"PLIANT.COORD", b"UPDATE", v.as_bytes(), json.as_bytes()];
            match self.call_on(&self.saves, &update, SAVE_TIMEOUT).await? {
                Frame::Integer(n) => Ok(n == 1),
                other => Err(self.unreachable(format!("unexpected reply {other:?}"))),
            }
        })
    }

    fn set_balancer(
        &self,
        record: crate::coord::BalancerRecord,
    ) -> BoxFuture<'_, Result<u64, CoordError>> {
        Box::pin(async move {
            let json = serde_json::to_string(&record).expect("a balancer record serialises");
            let set: [&[u8]; 3] = [b"PLIANT.COORD", b"BALANCER", json.as_bytes()];
            match self.call_on(&self.saves, &set, SAVE_TIMEOUT).await? {
                Frame::Integer(n) if n > 0 => Ok(n as u64),
                other => Err(self.unreachable(format!("unexpected reply {other:?}"))),
            }
        })
    }

    fn spawn(&self, n: usize) -> BoxFuture<'_, Result<Vec<String>, CoordError>> {
        Box::pin(async move { self.spawn_nodes(n).await })
    }

    fn retire<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), CoordError>> {
        Box::pin(async move { self.retire_node(id).await })
    }

    fn watch(&self) -> BoxFuture<'_, Result<watch::Receiver<Arc<ClusterState>>, CoordError>> {
        Box::pin(async move {
            // The first state comes from a request, so a store that cannot be reached fails
            // here rather than leaving the node waiting; the task follows the changes.
            let first = self.state().await?;
            let (tx, rx) = watch::channel(Arc::new(first));
            tokio::spawn(self.clone().follow(tx));
            Ok(rx)
        })
    }
}
