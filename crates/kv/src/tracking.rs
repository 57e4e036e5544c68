//! Which clients hold copies of which keys, and telling them when a key changes: Redis 6's
//! client-side caching (`CLIENT TRACKING ON`, its default mode, invalidation pushes over RESP3),
//! which is also how a parent keeps its child tiers coherent.
//!
//! A tracking client is remembered for every key it reads; when any client changes the key, it
//! gets one push, `>2 invalidate [key…]` (`invalidate` with a null: every key, after a FLUSHALL),
//! and is forgotten for the key until it reads it again. With `NOLOOP` a client hears nothing of
//! its own writes, and is remembered for the keys it writes instead: a client that does not want
//! to hear of its own writes is one that keeps what it writes, as a tier does.
//!
//! Redis sends invalidations and moves on, so another client may still read the old value from
//! its copy for a moment after the write is acknowledged. A child tier must not: a SET through
//! one leaf is never followed by the old value through a sibling. So a client that declares
//! itself a tier (`PLIANT.TIER`) acknowledges what it has applied (`PLIANT.INVALIDATED id n`: the
//! first n pushes to client `id`, sent on a connection of its own so that an acknowledgement never
//! waits behind a request), and a write is acknowledged only once every tier it invalidated has
//! applied the invalidation ([`Tracking::wait`]), and every tier still applying an earlier one has
//! finished (a holder is forgotten when its push is sent, so a second write finds none). A tier
//! that has not within [`ACK_TIMEOUT`] is cut off: its connection is closed, and a tier that
//! loses its parent empties its memory, since it can no longer hear of changes.
//!
//! A plain client's write is held, with its connection, until then. A tier's writes come as
//! `PLIANT.WRITE` and are not held: the reply comes at once with a ticket, and a push
//! `pliant-acked <ticket>` when the tiers have applied the invalidation ([`Tracking::defer`]); the
//! tier acknowledges the write to its own client only then. Holding a tier's connection instead
//! would hold the invalidations queued on it too, and two tiers each writing keys the other holds
//! would wait for each other until both were cut off.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use pliant_proto::frame::Frame;
use tokio::sync::{mpsc, watch};

/// How long a write waits for a tier to acknowledge an invalidation before cutting it off.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(2);

/// Keys remembered at once (Redis's `tracking-table-max-keys` is 1 M too); past it, every
/// tracking client is told to drop everything and the table starts afresh.
const MAX_KEYS: usize = 1 << 20;

/// The push that completes a deferred acknowledgement ([`Tracking::defer`]).
pub const ACKED: &[u8] = b"pliant-acked";

/// What a tracking connection is to send besides its replies.
#[derive(Debug)]
pub enum Outgoing {
    /// An invalidation push.
    Push(Frame),
    /// Close the connection (a tier that did not acknowledge in time).
    Close,
}

#[derive(Debug)]
struct Client {
    tx: mpsc::UnboundedSender<Outgoing>,
    noloop: bool,
    tier: bool,
    /// Pushes sent so far.
    sent: u64,
    /// Tickets of deferred acknowledgements handed out ([`Tracking::defer`]).
    tickets: u64,
    /// Whether it has been told to close (a tier cut off is counted once).
    closing: bool,
    /// Pushes it said it applied.
    acked: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct Inner {
    keys: HashMap<Bytes, Vec<u64>, foldhash::fast::FixedState>,
    clients: HashMap<u64, Client, foldhash::fast::FixedState>,
}

/// A write's wait for one tier to apply the invalidation it caused.
#[derive(Debug)]
pub struct Wait {
    client: u64,
    seq: u64,
    acked: watch::Receiver<u64>,
}

/// The node's tracking table (see the module doc).
#[derive(Debug, Default)]
pub struct Tracking {
    inner: Mutex<Inner>,
    /// Whether any client tracks: when none does, commands skip the table without locking it.
    active: AtomicBool,
    /// Tiers cut off for not acknowledging in time.
    cut_off: std::sync::atomic::AtomicU64,
}

impl Tracking {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Tiers cut off so far for not acknowledging an invalidation within [`ACK_TIMEOUT`].
    pub fn cut_off(&self) -> u64 {
        self.cut_off.load(Ordering::Relaxed)
    }

    /// Whether client `id` tracks keys (and so can be sent pushes).
    pub fn tracks(&self, id: u64) -> bool {
        self.active() && self.lock().clients.contains_key(&id)
    }

    /// Whether any client tracks keys.
    pub fn active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Client `id` starts tracking; what it must send arrives on the receiver.
    pub fn enable(&self, id: u64, noloop: bool) -> mpsc::UnboundedReceiver<Outgoing> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut inner = self.lock();
        inner.clients.insert(
            id,
            Client {
                tx,
                noloop,
                tier: false,
                sent: 0,
                tickets: 0,
                closing: false,
                acked: watch::channel(0).0,
            },
        );
        self.active.store(true, Ordering::Relaxed);
        rx
    }

    /// Client `id` stops tracking (or left). Writes waiting for it stop waiting: a tier that
    /// loses its parent forgets what it held.
    pub fn disable(&self, id: u64) {
        let mut inner = self.lock();
        if let Some(c) = inner.clients.remove(&id) {
            c.acked.send_replace(u64::MAX);
        }
        if inner.clients.is_empty() {
            inner.keys.clear();
            self.active.store(false, Ordering::Relaxed);
        }
    }

    /// Client `id`, tracking, is a tier: writes wait for its acknowledgements. `false` if it
    /// does not track.
    pub fn set_tier(&self, id: u64) -> bool {
        match self.lock().clients.get_mut(&id) {
            Some(c) => {
                c.tier = true;
                true
            }
            None => false,
        }
    }

    /// Tier `id` applied its first `n` invalidations.
    pub fn ack(&self, id: u64, n: u64) -> bool {
        match self.lock().clients.get(&id) {
            Some(c) => {
                c.acked.send_if_modified(|a| {
                    let more = n > *a;
                    *a = (*a).max(n);
                    more
                });
                true
            }
            None => false,
        }
    }

    /// Client `id` read `keys`: remember it for them, if it tracks.
    pub fn read<'a>(&self, id: u64, keys: impl Iterator<Item = &'a Bytes>) {
        let mut inner = self.lock();
        if !inner.clients.contains_key(&id) {
            return;
        }
        for k in keys {
            let holders = inner.keys.entry(k.clone()).or_default();
            if !holders.contains(&id) {
                holders.push(id);
            }
        }
        if inner.keys.len() > MAX_KEYS {
            let waits = Self::invalidate_all(&mut inner, None);
            drop(waits);
        }
    }

    /// Client `writer` changed `keys`: every other client that holds one hears of it. Returns
    /// what the write must wait for before it is acknowledged (tiers' acknowledgements).
    pub fn wrote<'a>(&self, writer: u64, keys: impl Iterator<Item = &'a Bytes>) -> Vec<Wait> {
        let mut inner = self.lock();
        let noloop_writer = inner.clients.get(&writer).is_some_and(|c| c.noloop);
        let mut told: HashMap<u64, Vec<Frame>, foldhash::fast::FixedState> = HashMap::default();
        for k in keys {
            let holders = inner.keys.remove(k).unwrap_or_default();
            for id in holders {
                if id == writer && noloop_writer {
                    continue;
                }
                told.entry(id).or_default().push(Frame::Bulk(k.clone()));
            }
            if noloop_writer {
                inner.keys.insert(k.clone(), vec![writer]);
            }
        }
        let mut waits = Vec::new();
        for (id, keys) in told {
            if let Some(w) = Self::push(&mut inner, id, Frame::Array(keys)) {
                waits.push(w);
            }
        }
        Self::outstanding(&inner, writer, &mut waits);
        waits
    }

    /// Adds to `waits` every tier but `writer` still to acknowledge a push sent before: a holder is
    /// forgotten for a key when it is sent the invalidation, not when it applies it, so a second
    /// write of the key (or any write after a FLUSHALL) finds no holder, and must not be
    /// acknowledged while a tier may still serve what the key held before the first. The
    /// writer itself is not waited for: its pushes reach it before the reply to its write (one
    /// connection, in order), and waiting on it could wait on its own children, whose
    /// connections it may be holding for this very write.
    fn outstanding(inner: &Inner, writer: u64, waits: &mut Vec<Wait>) {
        for (&id, c) in &inner.clients {
            if id != writer
                && c.tier
                && *c.acked.borrow() < c.sent
                && !waits.iter().any(|w| w.client == id)
            {
                waits.push(Wait {
                    client: id,
                    seq: c.sent,
                    acked: c.acked.subscribe(),
                });
            }
        }
    }

    /// Client `writer` dropped every key (FLUSHDB, FLUSHALL): every tracking client hears of it.
    pub fn wrote_all(&self, writer: u64) -> Vec<Wait> {
        let mut inner = self.lock();
        let mut waits = Self::invalidate_all(&mut inner, Some(writer));
        Self::outstanding(&inner, writer, &mut waits);
        waits
    }

    fn invalidate_all(inner: &mut Inner, writer: Option<u64>) -> Vec<Wait> {
        inner.keys.clear();
        let ids: Vec<u64> = inner
            .clients
            .iter()
            .filter(|(id, c)| Some(**id) != writer || !c.noloop)
            .map(|(id, _)| *id)
            .collect();
        ids.into_iter()
            .filter_map(|id| Self::push(inner, id, Frame::Null))
            .collect()
    }

    /// Sends `invalidate <keys>` to client `id`; a wait if it is a tier.
    fn push(inner: &mut Inner, id: u64, keys: Frame) -> Option<Wait> {
        let c = inner.clients.get_mut(&id)?;
        let frame = Frame::Push(vec![Frame::Bulk(Bytes::from_static(b"invalidate")), keys]);
        if c.tx.send(Outgoing::Push(frame)).is_err() {
            // Its connection is gone; `disable` will follow.
            return None;
        }
        c.sent += 1;
        c.tier.then(|| Wait {
            client: id,
            seq: c.sent,
            acked: c.acked.subscribe(),
        })
    }

    /// A write by client `id` that must wait for `waits` is acknowledged now, but only provisionally:
    /// the reply carries the returned ticket, and a push `pliant-acked <ticket>` follows on the
    /// same connection once every tier in `waits` has applied its invalidation (or been cut
    /// off). The connection goes on meanwhile, pushes included, so two tiers each writing keys
    /// the other holds never wait for each other (`PLIANT.WRITE`). 0 if there is nothing to
    /// wait for, or the client does not track.
    ///
    /// On a tier passing on its child's write, `upstream` is the parent's own acknowledgement of
    /// it, waited for too; if the connection to the parent is lost first, the child's connection
    /// is closed (the child then answers that the write's outcome is unknown).
    pub fn defer(
        self: &std::sync::Arc<Self>,
        id: u64,
        waits: Vec<Wait>,
        upstream: Option<tokio::sync::oneshot::Receiver<()>>,
    ) -> u64 {
        if waits.is_empty() && upstream.is_none() {
            return 0;
        }
        let ticket = match self.lock().clients.get_mut(&id) {
            Some(c) => {
                c.tickets += 1;
                c.tickets
            }
            None => return 0,
        };
        let this = self.clone();
        tokio::spawn(async move {
            let up = match upstream {
                Some(rx) => rx.await.is_ok(),
                None => true,
            };
            this.wait(waits).await;
            if let Some(c) = this.lock().clients.get(&id) {
                let _ = c.tx.send(if up {
                    Outgoing::Push(Frame::Push(vec![
                        Frame::Bulk(Bytes::from_static(ACKED)),
                        Frame::Integer(ticket as i64),
                    ]))
                } else {
                    Outgoing::Close
                });
            }
        });
        ticket
    }

    /// Waits until every tier in `waits` has applied its invalidation; one that has not within
    /// [`ACK_TIMEOUT`] is cut off (see the module doc).
    pub async fn wait(&self, waits: Vec<Wait>) {
        // One deadline for all: a write waits for its slowest tier, not the sum of them.
        let deadline = tokio::time::Instant::now() + ACK_TIMEOUT;
        for mut w in waits {
            let seq = w.seq;
            if tokio::time::timeout_at(deadline, w.acked.wait_for(|a| *a >= seq))
                .await
                .is_ok()
            {
                continue;
            }
            tracing::warn!(
                "tier client {} did not acknowledge an invalidation within {ACK_TIMEOUT:?}; closing its connection",
                w.client
            );
            if let Some(c) = self.lock().clients.get_mut(&w.client)
                && !std::mem::replace(&mut c.closing, true)
            {
                let _ = c.tx.send(Outgoing::Close);
                self.cut_off.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> Bytes {
        Bytes::copy_from_slice(k.as_bytes())
    }

    #[tokio::test]
    async fn a_write_invalidates_the_readers_once_and_waits_for_tiers() {
        let t = Tracking::default();
        let mut a = t.enable(1, false);
        let mut b = t.enable(2, true);
        assert!(t.set_tier(2));
        t.read(1, [key("k")].iter());
        t.read(2, [key("k")].iter());
        let waits = t.wrote(3, [key("k")].iter());
        assert_eq!(waits.len(), 1, "only the tier's acknowledgement is awaited");
        assert!(matches!(a.try_recv(), Ok(Outgoing::Push(_))));
        assert!(matches!(b.try_recv(), Ok(Outgoing::Push(_))));
        // Forgotten after one invalidation, until read again: no second push (the second write
        // still waits for the tier to apply the first, see below).
        let second = t.wrote(3, [key("k")].iter());
        assert!(a.try_recv().is_err());
        assert!(b.try_recv().is_err());
        assert_eq!(second.len(), 1);
        // The wait ends when the tier acknowledges.
        let waiting = t.wait(waits);
        t.ack(2, 1);
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("acknowledged");
    }

    #[tokio::test]
    async fn a_noloop_writer_keeps_what_it_wrote_and_hears_of_the_next_change() {
        let t = Tracking::default();
        let mut w = t.enable(1, true);
        assert!(t.wrote(1, [key("k")].iter()).is_empty());
        assert!(w.try_recv().is_err(), "not told of its own write");
        let _ = t.wrote(2, [key("k")].iter());
        match w.try_recv() {
            Ok(Outgoing::Push(Frame::Push(items))) => {
                assert_eq!(items[1], Frame::Array(vec![Frame::Bulk(key("k"))]));
            }
            other => panic!("expected an invalidation, got {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_tier_that_never_acknowledges_is_cut_off() {
        let t = Tracking::default();
        let mut b = t.enable(2, true);
        t.set_tier(2);
        t.read(2, [key("k")].iter());
        let waits = t.wrote(1, [key("k")].iter());
        t.wait(waits).await;
        assert!(matches!(b.try_recv(), Ok(Outgoing::Push(_))));
        assert!(matches!(b.try_recv(), Ok(Outgoing::Close)));
    }

    /// Audit of b5a8c14: the parent forgot a holder when it sent the push, so a second write of
    /// the key found no holder and was acknowledged while the tier could still serve the value
    /// the first write replaced.
    #[tokio::test]
    async fn a_second_write_waits_for_a_tier_still_applying_the_first() {
        let t = Tracking::default();
        let _b = t.enable(2, true);
        t.set_tier(2);
        t.read(2, [key("k")].iter());
        let first = t.wrote(1, [key("k")].iter());
        assert_eq!(first.len(), 1);
        let second = t.wrote(1, [key("k")].iter());
        assert_eq!(
            second.len(),
            1,
            "the tier has not applied the first invalidation yet"
        );
        let after_flush = t.wrote_all(1);
        assert!(after_flush.iter().any(|w| w.client == 2));
        t.ack(2, 2);
        assert!(
            t.wrote(1, [key("k")].iter()).is_empty(),
            "once the tier has applied every push, nothing to wait for"
        );
    }
}
