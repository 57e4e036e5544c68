//! How a tier (`--parent`) runs a request.
//!
//! - **Reads of keys** (GET, MGET, STRLEN, EXISTS, TYPE, TTL, PTTL, PLIANT.FETCH): every key memory
//!   lacks is fetched first, all of them in one pipeline, a key another reader is already fetching
//!   joined rather than asked for again ([`Keyspace::want`]); the command then runs here over
//!   memory and what was fetched for it.
//! - **Writes** go through to the parent, which holds every key, as `PLIANT.WRITE`, and are
//!   acknowledged when it acknowledges them (after its store, and after every other tier holding
//!   the key has dropped it: the `pliant-acked` push, see [`crate::tracking`]). A plain
//!   `SET key value` is a put: one of a key held with this very value is redundant
//!   and goes no further; otherwise memory keeps the value once the parent has it. Other writes
//!   drop this tier's copy of their keys. This node's own children hear of the change.
//! - **Whole-keyspace reads** (KEYS, SCAN, DBSIZE) are the parent's to answer.
//! - Everything else (connection, server, policy commands) runs here.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;

use crate::cmd::{
    Ctx, Session, Spec, TierRole, check, check_write, run as run_here, track, written,
};
use crate::keyspace::{Fetched, Lent, Value, Want};
use crate::node::Node;
use crate::upstream::{Then, Upstream, UpstreamError};
use pliant_proto::frame::Frame;

/// Rounds of fetching for one read: each round fetches only keys that left memory since the
/// last (a command on one thread never needs a second).
const ROUNDS: usize = 4;

/// Runs one request on a tier (see the module doc).
pub(crate) async fn run(
    node: &Node,
    up: &Upstream,
    session: &mut Session,
    args: &[Bytes],
    now: u64,
) -> Frame {
    let spec = match check(session, args) {
        Ok(spec) => spec,
        Err(reply) => return reply,
    };
    if spec.writes() {
        return write(node, up, session, spec, args, now).await;
    }
    if spec.facts.tier == TierRole::ChildWrite {
        // A child tier's write: forwarded up like any other, and acknowledged to the child as
        // the parent acknowledges it here (see `PLIANT.WRITE`).
        let inner = &args[1..];
        let spec = match check_write(session, inner) {
            Ok(spec) => spec,
            Err(reply) => return reply,
        };
        let before = session.awaiting.len();
        let (reply, acked) = write_deferred(node, up, session, spec, inner, now).await;
        if node.tracking().tracks(session.id) {
            let waits = session.awaiting.split_off(before);
            return written(reply, node.tracking().defer(session.id, waits, acked));
        }
        // No tracking connection to send a ticket's acknowledgement on: the write is
        // acknowledged here, once the parent has, and the batch's replies wait for the rest.
        if let Some(acked) = acked
            && let Err(e) = acknowledged(up, acked).await
        {
            return written(e, 0);
        }
        return written(reply, 0);
    }
    if spec.facts.tier == TierRole::AskParent {
        node.count_command();
        return up
            .within("answer", up.call(args.to_vec(), None))
            .await
            .and_then(|r| r)
            .unwrap_or_else(|e| refused(&e));
    }
    if spec.keys_of(args).next().is_none() {
        return run_here(&mut Ctx::new(node, session, now), spec, args);
    }
    read(node, up, session, spec, args, now).await
}

async fn read(
    node: &Node,
    up: &Upstream,
    session: &mut Session,
    spec: &Spec,
    args: &[Bytes],
    now: u64,
) -> Frame {
    // A client of this node that tracks keys (a child tier) holds them from before the read,
    // not from after the command: an invalidation that arrives from the parent between the two
    // reaches it, after the reply that carries the value it invalidates. (The command registers
    // it again, for later writes.)
    if session.pushes.is_some() && node.tracking().active() {
        node.tracking().read(session.id, spec.keys_of(args));
    }
    // Every key held (a tier's usual case): run at once, as a node without a parent would. A
    // key that leaves memory before the command runs (another thread's eviction) sends it the
    // long way round.
    if node.keyspace().holds_all(spec.keys_of(args)) {
        let mut ctx = Ctx::new(node, session, now);
        let reply = run_here(&mut ctx, spec, args);
        if !ctx.unready {
            return reply;
        }
    }
    let keys: Vec<Bytes> = spec.keys_of(args).cloned().collect();
    let mut lent = Lent::default();
    // How long this read waited for the parent, and whether it fetched (or only joined): the
    // live `auto` prices misses with it.
    let mut waited: Option<(f64, bool)> = None;
    for round in 1..=ROUNDS {
        let wants: Vec<(Bytes, Want)> = {
            let mut ks = node.keyspace();
            ks.lend(std::mem::take(&mut lent));
            let wants = keys
                .iter()
                .filter_map(|k| match ks.want(k, now) {
                    Want::Ready => None,
                    w => Some((k.clone(), w)),
                })
                .collect();
            lent = ks.unlend();
            wants
        };
        if wants.is_empty() {
            let mut ctx = Ctx::new(node, session, now);
            ctx.lent = lent;
            let reply = run_here(&mut ctx, spec, args);
            if !ctx.unready || round == ROUNDS {
                if let Some((seconds, fetched)) = waited {
                    node.keyspace().auto_wait(seconds, fetched);
                }
                return reply;
            }
            lent = std::mem::take(&mut ctx.lent);
            continue;
        }
        // Every fetch is sent before any is waited for: one round trip for all the keys.
        let started = std::time::Instant::now();
        let fetches = wants.iter().any(|(_, w)| matches!(w, Want::Fetch(_)));
        let mut replies = Vec::with_capacity(wants.len());
        for (k, want) in wants {
            match want {
                Want::Ready => {}
                Want::Join(f) => replies.push((k, Err(f))),
                Want::Fetch(done) => {
                    let (key, addr) = (k.clone(), up.addr());
                    let then: Then = Box::new(move |reply, node| {
                        let v = fetched(addr, reply);
                        node.keyspace().fetched(&key, &v);
                        done.done(&v);
                    });
                    let args = vec![Bytes::from_static(b"PLIANT.FETCH"), k.clone()];
                    match up.send(args, Some(then)).await {
                        Ok(rx) => replies.push((k, Ok(rx))),
                        Err(e) => {
                            // Never sent: the place memory held for it goes, and readers who
                            // joined it are told (the fetch's sender is gone).
                            let reply = refused(&e);
                            node.keyspace().fetched(&k, &Err(Arc::new(e)));
                            return reply;
                        }
                    }
                }
            }
        }
        for (k, pending) in replies {
            let v = match pending {
                Ok(rx) => match up.within("answer a fetch", rx).await {
                    Ok(r) => r.map_or_else(
                        |_| Err(Arc::new(UpstreamError::Lost { addr: up.addr() })),
                        |f| fetched(up.addr(), &f),
                    ),
                    Err(e) => Err(Arc::new(e)),
                },
                Err(joined) => up
                    .within("answer a fetch", joined.wait())
                    .await
                    .unwrap_or_else(|e| Err(Arc::new(e))),
            };
            match v {
                Ok(v) => {
                    lent.insert(k, v);
                }
                Err(e) => return refused(&e),
            }
        }
        let (seconds, fetched) = waited.unwrap_or_default();
        waited = Some((
            seconds + started.elapsed().as_secs_f64(),
            fetched || fetches,
        ));
    }
    Frame::error("ERR keys kept leaving memory while they were fetched; try again")
}

async fn write(
    node: &Node,
    up: &Upstream,
    session: &mut Session,
    spec: &Spec,
    args: &[Bytes],
    now: u64,
) -> Frame {
    let (reply, acked) = write_deferred(node, up, session, spec, args, now).await;
    if let Some(acked) = acked
        && let Err(e) = acknowledged(up, acked).await
    {
        return e;
    }
    reply
}

/// Waits, at most `--parent-timeout`, for the parent to acknowledge a write; the error reply if
/// it does not.
async fn acknowledged(
    up: &Upstream,
    acked: tokio::sync::oneshot::Receiver<()>,
) -> Result<(), Frame> {
    match up.within("acknowledge the write", acked).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(Frame::error(format!(
            "ERR parent {}: connection lost before it acknowledged the write",
            up.addr()
        ))),
        Err(e) => Err(unsure(&e)),
    }
}

/// The reply to a write whose answer did not come in time.
fn unsure(timed_out: &UpstreamError) -> Frame {
    Frame::error(format!(
        "ERR {timed_out}; it may or may not have been applied"
    ))
}

/// [`write`] without waiting for the parent's acknowledgement: the reply, and what resolves once
/// the parent has acknowledged it (see [`Upstream::write_deferred`]).
async fn write_deferred(
    node: &Node,
    up: &Upstream,
    session: &mut Session,
    spec: &Spec,
    args: &[Bytes],
    now: u64,
) -> (Frame, Option<tokio::sync::oneshot::Receiver<()>>) {
    node.count_command();
    let put = spec.facts.tier == TierRole::Put && args.len() == 3;
    if put && node.keyspace().put_redundant(&args[1], &args[2]) {
        // Still a write as this node's own tracking clients see it: a child tier that keeps what
        // it puts is remembered as holding the key.
        track(&mut Ctx::new(node, session, now), spec, args);
        return (Frame::ok(), None);
    }
    let then: Then = if put {
        // Its own allocation: the argument is a slice of the whole request buffer.
        let (key, data) = (args[1].clone(), Bytes::copy_from_slice(&args[2]));
        Box::new(move |reply, node| {
            let mut ks = node.keyspace();
            if matches!(reply, Frame::Simple(s) if s == "OK") {
                ks.put_forwarded(&key, Value::new(data));
            } else {
                ks.drop_key(&key);
            }
        })
    } else if spec.facts.every_key {
        Box::new(|_, node| node.keyspace().forget_memory())
    } else {
        let keys: Vec<Bytes> = spec.keys_of(args).cloned().collect();
        Box::new(move |_, node| {
            let mut ks = node.keyspace();
            for k in &keys {
                ks.drop_key(k);
            }
        })
    };
    let (reply, acked) = match up
        .within("answer the write", up.write_deferred(args.to_vec(), then))
        .await
    {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => (refused(&e), None),
        Err(e) => (unsure(&e), None),
    };
    track(&mut Ctx::new(node, session, now), spec, args);
    (reply, acked)
}

/// The error reply to a client whose request the parent could not answer: the error and its
/// causes, each once.
fn refused(e: &UpstreamError) -> Frame {
    Frame::error(format!("ERR {}", pliant_proto::error::chain(e)))
}

/// What the parent at `addr` says of the key in its `PLIANT.FETCH` reply.
fn fetched(addr: SocketAddr, reply: &Frame) -> Fetched {
    let malformed = || Err(Arc::new(UpstreamError::Malformed { addr }));
    match reply {
        Frame::Null | Frame::NullArray => Ok(None),
        Frame::Array(v) => match v.as_slice() {
            [Frame::Bulk(data), Frame::Integer(t)] => Ok(Some(Value {
                data: data.clone(),
                expires_at: (*t > 0).then_some(*t as u64),
            })),
            _ => malformed(),
        },
        Frame::Error(e) => Err(Arc::new(UpstreamError::Refused {
            addr,
            reply: e.clone(),
        })),
        _ => malformed(),
    }
}
