//! The connections a node serves, as CLIENT LIST, CLIENT INFO and CLIENT KILL see them: each
//! one's addresses, name, age, last command, and how to close it from another connection; and
//! the messages of the one channel a connection may subscribe to (`__redis__:invalidate`, where
//! CLIENT TRACKING … REDIRECT sends invalidations).
//!
//! Who may kill whom: there is one user (`default`), and when the node has a password only an
//! authenticated connection reaches CLIENT at all (AUTH gates every command but AUTH, HELLO and
//! QUIT), so any authenticated client may close any other, as Redis's `default` user may. A
//! child tier's connection killed this way is cut off as one that stopped acknowledging is: the
//! tier empties its memory and reconnects, so no stale value is served.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use pliant_proto::frame::Frame;
use tokio::sync::mpsc;

/// The channel invalidations are published on to a redirect target (Redis's).
pub const INVALIDATE_CHANNEL: &[u8] = b"__redis__:invalidate";

/// Longest client name (CLIENT SETNAME): a line of CLIENT LIST stays short.
pub const MAX_NAME: usize = 512;

/// One connection.
#[derive(Debug)]
pub struct Client {
    /// Its id (`CLIENT ID`).
    pub id: u64,
    /// The client's address.
    pub addr: SocketAddr,
    /// The node's address it connected to.
    pub laddr: SocketAddr,
    /// Its file descriptor.
    pub fd: i32,
    created: Instant,
    /// `created` in [`crate::node::mono_ns`]'s nanoseconds.
    created_ns: u64,
    /// The latest command, by its index in [`crate::COMMANDS`] (`usize::MAX`: none yet), and
    /// when it came, in microseconds since the connection opened: atomics, since every
    /// command sets them.
    last_command: AtomicUsize,
    last_at: AtomicU64,
    name: Mutex<Option<Bytes>>,
    /// 2 or 3.
    resp: AtomicU8,
    /// Commands queued in a transaction, or -1 outside one.
    multi: AtomicI64,
    /// Keys watched.
    watch: AtomicUsize,
    /// Channels subscribed.
    channels: AtomicUsize,
    /// Whether it tracks keys (CLIENT TRACKING ON), and where to (its id, or the redirect's).
    tracking: AtomicI64,
    killed: AtomicBool,
    /// Its connection's task while it waits for a request, woken to close it (CLIENT KILL, the
    /// node stopping).
    closer: atomic_waker::AtomicWaker,
    /// Where messages of [`INVALIDATE_CHANNEL`] go while it is subscribed.
    messages: Mutex<Option<mpsc::UnboundedSender<Frame>>>,
}

impl Client {
    /// A connection accepted now.
    pub fn new(id: u64, addr: SocketAddr, laddr: SocketAddr, fd: i32) -> Self {
        let now = Instant::now();
        Self {
            id,
            addr,
            laddr,
            fd,
            created: now,
            created_ns: crate::node::mono_ns(),
            last_command: AtomicUsize::new(usize::MAX),
            last_at: AtomicU64::new(0),
            name: Mutex::new(None),
            resp: AtomicU8::new(2),
            multi: AtomicI64::new(-1),
            watch: AtomicUsize::new(0),
            channels: AtomicUsize::new(0),
            tracking: AtomicI64::new(0),
            killed: AtomicBool::new(false),
            closer: atomic_waker::AtomicWaker::new(),
            messages: Mutex::new(None),
        }
    }

    /// It ran command `index` (in [`crate::COMMANDS`]) at `at_ns` ([`crate::node::mono_ns`]).
    pub(crate) fn ran(&self, index: usize, at_ns: u64) {
        self.last_command.store(index, Ordering::Relaxed);
        self.last_at.store(
            at_ns.saturating_sub(self.created_ns) / 1000,
            Ordering::Relaxed,
        );
    }

    /// Its name changed.
    pub fn set_name(&self, name: Option<Bytes>) {
        *self.name.lock().unwrap_or_else(|p| p.into_inner()) = name;
    }

    /// Its protocol changed.
    pub fn set_resp(&self, resp: u8) {
        self.resp.store(resp, Ordering::Relaxed);
    }

    /// Its transaction: `None` outside one, else the commands queued.
    pub fn set_multi(&self, queued: Option<usize>) {
        self.multi
            .store(queued.map_or(-1, |n| n as i64), Ordering::Relaxed);
    }

    /// How many keys it watches.
    pub fn set_watch(&self, keys: usize) {
        self.watch.store(keys, Ordering::Relaxed);
    }

    /// Tracking: `None` off, else the id invalidations go to.
    pub fn set_tracking(&self, to: Option<u64>) {
        self.tracking
            .store(to.map_or(0, |t| t as i64), Ordering::Relaxed);
    }

    /// Subscribes it to [`INVALIDATE_CHANNEL`]: messages go to `tx` (`None`: unsubscribed).
    pub fn subscribe(&self, tx: Option<mpsc::UnboundedSender<Frame>>) {
        self.channels
            .store(usize::from(tx.is_some()), Ordering::Relaxed);
        *self.messages.lock().unwrap_or_else(|p| p.into_inner()) = tx;
    }

    /// Publishes `keys` (an array of keys, or a null for every key) on [`INVALIDATE_CHANNEL`] to
    /// it; whether it is subscribed to hear them.
    pub fn invalidate(&self, keys: Frame) -> bool {
        let m = self.messages.lock().unwrap_or_else(|p| p.into_inner());
        m.as_ref().is_some_and(|tx| {
            tx.send(Frame::Push(vec![
                Frame::bulk("message"),
                Frame::Bulk(Bytes::from_static(INVALIDATE_CHANNEL)),
                keys,
            ]))
            .is_ok()
        })
    }

    /// Whether it subscribed to a channel.
    pub fn subscribed(&self) -> bool {
        self.channels.load(Ordering::Relaxed) > 0
    }

    /// Asks its connection to close (CLIENT KILL).
    pub fn kill(&self) {
        self.killed.store(true, Ordering::Relaxed);
        self.closer.wake();
    }

    /// Wakes its connection to look again whether it must close (the node stopping).
    pub fn nudge(&self) {
        self.closer.wake();
    }

    /// Whether CLIENT KILL closed it.
    pub fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Relaxed)
    }

    /// Resolves once it is killed or `stopping` holds: looked at when it starts, and whenever
    /// it is killed or [nudged](Client::nudge).
    pub async fn closed(&self, stopping: impl Fn() -> bool) {
        std::future::poll_fn(|cx| {
            // Registered before the looks: a kill or a nudge after them wakes it.
            self.closer.register(cx.waker());
            if self.is_killed() || stopping() {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
        .await;
    }

    /// Its age in seconds.
    pub fn age(&self) -> u64 {
        self.created.elapsed().as_secs()
    }

    /// Its line of CLIENT LIST, in Redis's format and field order (the fields of buffers this
    /// server does not keep per client are 0).
    pub fn line(&self) -> String {
        let cmd = crate::COMMANDS
            .get(self.last_command.load(Ordering::Relaxed))
            .map_or("NULL", |c| c.name);
        let idle = self
            .created
            .elapsed()
            .as_secs()
            .saturating_sub(self.last_at.load(Ordering::Relaxed) / 1_000_000);
        let name = self
            .name
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_deref()
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .unwrap_or_default();
        let multi = self.multi.load(Ordering::Relaxed);
        let channels = self.channels.load(Ordering::Relaxed);
        let tracking = self.tracking.load(Ordering::Relaxed);
        let mut flags = String::new();
        if multi >= 0 {
            flags.push('x');
        }
        if channels > 0 {
            flags.push('P');
        }
        if tracking != 0 {
            flags.push('t');
        }
        if flags.is_empty() {
            flags.push('N');
        }
        let redir = if tracking != 0 && tracking != self.id as i64 {
            tracking
        } else {
            -1
        };
        let mut s = String::with_capacity(256);
        let _ = write!(
            s,
            "id={} addr={} laddr={} fd={} name={name} age={} idle={} flags={flags} db=0 sub={channels} psub=0 ssub=0 multi={multi} watch={} qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd={cmd} user=default redir={redir} resp={}",
            self.id,
            self.addr,
            self.laddr,
            self.fd,
            self.age(),
            idle,
            self.watch.load(Ordering::Relaxed),
            self.resp.load(Ordering::Relaxed),
        );
        s
    }
}

/// The connections open now, by id.
#[derive(Debug, Default)]
pub struct Registry {
    clients: Mutex<BTreeMap<u64, Arc<Client>>>,
}

impl Registry {
    /// A connection opened.
    pub fn add(&self, c: Arc<Client>) {
        self.lock().insert(c.id, c);
    }

    /// A connection closed.
    pub fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// Connection `id`, if open.
    pub fn get(&self, id: u64) -> Option<Arc<Client>> {
        self.lock().get(&id).cloned()
    }

    /// Every connection, by id (at most `--max-clients`), but those killed and still closing.
    pub fn all(&self) -> Vec<Arc<Client>> {
        self.lock()
            .values()
            .filter(|c| !c.is_killed())
            .cloned()
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<Client>>> {
        self.clients.lock().unwrap_or_else(|p| p.into_inner())
    }
}
