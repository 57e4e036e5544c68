//! Transactions: MULTI, EXEC, DISCARD, WATCH, UNWATCH, with Redis's semantics.
//!
//! - After MULTI, every command but EXEC, DISCARD, MULTI, WATCH and QUIT is checked (known,
//!   arity, authentication, `no_multi`, and on a cluster node its routing) and queued, answered
//!   `+QUEUED`; one that fails the check gets its error and flags the transaction, whose EXEC is
//!   then refused with `-EXECABORT` and runs nothing.
//! - EXEC runs the queued commands with every other command kept out (`Node::exec_exclusive`):
//!   no other client's command runs between them. Its reply is the array of their replies; an
//!   error of one (a wrong type, a value that is no integer) is its reply and the rest still run.
//! - WATCH key… (before MULTI only) makes EXEC answer a null array, running nothing, if any of the
//!   keys changed since: a write command naming it (any client's, this one's too, even one that
//!   left it as it was, such as `SET NX` of an existing key: a false abort is safe, the client
//!   tries again), a FLUSHDB/FLUSHALL while it existed, its expiry (a key that was live at WATCH
//!   and has expired by EXEC, whether or not anything has deleted it yet; one already expired at
//!   WATCH is not a change, as in Redis), or its eviction: without a store an evicted key is gone,
//!   so a watched key that existed at WATCH and no longer exists at EXEC aborts it (as Redis's
//!   evictions signal WATCH); with a store, eviction only drops the copy in memory and the key is
//!   unchanged, so EXEC runs. EXEC and DISCARD forget every watched key.
//! - On a cluster node, every key of the transaction must hash to one slot (`-CROSSSLOT`
//!   otherwise), and that slot must be served here when EXEC runs (`-MOVED`/`-ASK`/`-TRYAGAIN`
//!   otherwise), as Redis Cluster does; either refusal discards the transaction.
//! - A `denyoom` write that a pure cache could hold nowhere (its byte capacity, `maxmemory`, is
//!   below the entry) is refused with `-OOM` while queuing, and at EXEC aborts the whole
//!   transaction (`-EXECABORT … -OOM …`), as Redis does when over `maxmemory`.
//! - A tier (`--parent`) refuses MULTI and WATCH: its writes go through to the parent one by one,
//!   so it could not hold other clients off between them.
//!
//! What a client can make the node hold is bounded: a transaction's queue holds at most
//! [`MAX_QUEUED`] commands and as many bytes of arguments as one value may have
//! (`--max-value-size`, Redis's `proto-max-bulk-len`, which bounds one request's bulk already),
//! and a connection watches at most [`MAX_QUEUED`] keys of as many bytes; past either, the
//! queue is dropped at once (its memory freed) and EXEC refused, or the WATCH refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use pliant_proto::frame::Frame;

use super::{Ctx, Flag, Spec, check};

/// Most commands one transaction may queue, and most keys one connection may watch: as many as
/// one request may carry arguments ([`pliant_proto::frame::Limits::max_elements`]).
pub const MAX_QUEUED: usize = 1_048_576;

/// A transaction being queued.
#[derive(Default)]
pub struct Multi {
    /// The commands, checked, with their arguments.
    queue: Vec<(&'static Spec, Vec<Bytes>)>,
    /// Bytes of the queued arguments.
    bytes: usize,
    /// A command failed its check: EXEC is refused.
    aborted: bool,
}

impl std::fmt::Debug for Multi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Multi")
            .field("queued", &self.queue.len())
            .field("bytes", &self.bytes)
            .field("aborted", &self.aborted)
            .finish()
    }
}

/// What one connection watches.
#[derive(Debug, Default)]
pub struct Watching {
    /// Each key, with whether it existed at WATCH and its expiry then (a map: one WATCH of a
    /// million keys costs a million lookups, not their square).
    keys: std::collections::HashMap<Bytes, (bool, Option<u64>), foldhash::fast::FixedState>,
    bytes: usize,
    /// Set when a watched key changes (by `Node::touch`).
    dirty: Arc<AtomicBool>,
}

/// The commands that are never queued: they act on the transaction itself (QUIT, too, acts at
/// once in Redis).
fn acts_at_once(spec: &Spec) -> bool {
    spec.facts.acts_in_multi
}

/// Queues a request of a connection in a transaction; `None` when it is one that runs at once.
pub(super) fn queue(ctx: &mut Ctx<'_>, args: &[Bytes], asking: bool) -> Option<Frame> {
    let spec = match check(ctx.session, args) {
        Ok(spec) if acts_at_once(spec) => return None,
        Ok(spec) => spec,
        Err(reply) => {
            let reply = super::rejected(ctx.node, args, reply);
            return Some(flag(ctx, reply));
        }
    };
    if spec.flags.has(Flag::NoMulti) {
        return Some(flag(
            ctx,
            Frame::error("ERR Command not allowed inside a transaction"),
        ));
    }
    if super::would_oom(ctx.node, spec, args) {
        return Some(flag(
            ctx,
            Frame::error(crate::KvError::OutOfMemory.to_string()),
        ));
    }
    if spec.keys.0 != 0
        && ctx.node.cluster().is_some()
        && let Some(redirect) = super::cluster::route(ctx, spec, args, asking)
    {
        return Some(flag(ctx, redirect));
    }
    let max_bytes = ctx.node.max_value_size();
    let multi = ctx.session.multi.as_mut()?;
    let bytes: usize = args.iter().map(|a| a.len() + 16).sum();
    if multi.queue.len() >= MAX_QUEUED || multi.bytes.saturating_add(bytes) > max_bytes {
        // Dropped now, not at EXEC: a client that queues forever holds nothing more.
        *multi = Multi {
            aborted: true,
            ..Multi::default()
        };
        return Some(Frame::error(format!(
            "ERR transaction too large: at most {MAX_QUEUED} commands of {max_bytes} bytes in all may be queued; the transaction is discarded at EXEC"
        )));
    }
    if !multi.aborted {
        multi.bytes += bytes;
        // Copied: the arguments are slices of the connection's read buffer, which must not stay
        // pinned by a queue.
        let owned = args.iter().map(|a| Bytes::copy_from_slice(a)).collect();
        multi.queue.push((spec, owned));
    }
    let queued = multi.queue.len();
    if let Some(c) = &ctx.session.client {
        c.set_multi(Some(queued));
    }
    Some(Frame::Simple("QUEUED".into()))
}

/// Flags the transaction (its EXEC will be refused) and returns `reply`.
fn flag(ctx: &mut Ctx<'_>, reply: Frame) -> Frame {
    if let Some(m) = ctx.session.multi.as_mut() {
        m.aborted = true;
        m.queue = Vec::new();
    }
    reply
}

/// Why a tier refuses transactions.
fn on_tier() -> Frame {
    Frame::error(
        "ERR transactions (MULTI, WATCH) are not supported on a tier (--parent): its writes go through to the parent one by one; send them to the parent",
    )
}

pub(super) fn multi(ctx: &mut Ctx<'_>, _: &[Bytes]) -> Frame {
    if ctx.node.parent().is_some() {
        return on_tier();
    }
    if ctx.session.multi.is_some() {
        return Frame::error("ERR MULTI calls can not be nested");
    }
    ctx.session.multi = Some(Multi::default());
    if let Some(c) = &ctx.session.client {
        c.set_multi(Some(0));
    }
    Frame::ok()
}

pub(super) fn discard(ctx: &mut Ctx<'_>, _: &[Bytes]) -> Frame {
    if ctx.session.multi.take().is_none() {
        return Frame::error("ERR DISCARD without MULTI");
    }
    unwatch_all(ctx);
    Frame::ok()
}

pub(super) fn watch(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    if ctx.node.parent().is_some() {
        return on_tier();
    }
    if ctx.session.multi.is_some() {
        return Frame::error("ERR WATCH inside MULTI is not allowed");
    }
    let now = ctx.now;
    let watching = ctx.session.watching.get_or_insert_with(Watching::default);
    let bytes: usize = args.iter().map(|a| a.len() + 32).sum();
    if watching.keys.len() + args.len() > MAX_QUEUED
        || watching.bytes.saturating_add(bytes) > ctx.node.max_value_size()
    {
        return Frame::error(format!(
            "ERR too many watched keys: at most {MAX_QUEUED} keys of {} bytes in all",
            ctx.node.max_value_size()
        ));
    }
    for key in args {
        if watching.keys.contains_key(key) {
            continue;
        }
        let v = match ctx.node.keyspace().peek(key, now) {
            Ok(v) => v,
            Err(e) => return super::store_error(&e),
        };
        let key = Bytes::copy_from_slice(key);
        ctx.node.watch(ctx.session.id, key.clone(), &watching.dirty);
        watching.bytes += key.len() + 32;
        watching
            .keys
            .insert(key, (v.is_some(), v.and_then(|v| v.expires_at)));
    }
    if let Some(c) = &ctx.session.client {
        c.set_watch(watching.keys.len());
    }
    Frame::ok()
}

pub(super) fn unwatch(ctx: &mut Ctx<'_>, _: &[Bytes]) -> Frame {
    unwatch_all(ctx);
    Frame::ok()
}

/// Forgets every key the connection watches (also when it closes).
pub(crate) fn unwatch_all(ctx: &mut Ctx<'_>) {
    if let Some(w) = ctx.session.watching.take() {
        ctx.node.unwatch(ctx.session.id, w.keys.keys());
    }
    if let Some(c) = &ctx.session.client {
        c.set_watch(0);
        c.set_multi(None);
    }
}

/// Whether a watched key changed since WATCH (see the module doc).
fn changed(ctx: &mut Ctx<'_>) -> Result<bool, Frame> {
    let Some(w) = &ctx.session.watching else {
        return Ok(false);
    };
    if w.dirty.load(Ordering::Relaxed) {
        return Ok(true);
    }
    let now = ctx.now;
    let mut ks = ctx.node.keyspace();
    for (key, (existed, expires_at)) in &w.keys {
        if expires_at.is_some_and(|t| t <= now) {
            return Ok(true);
        }
        if *existed && !ks.exists(key, now).map_err(|e| super::store_error(&e))? {
            return Ok(true);
        }
    }
    Ok(false)
}

pub(super) fn exec(ctx: &mut Ctx<'_>, _: &[Bytes]) -> Frame {
    let Some(multi) = ctx.session.multi.take() else {
        return Frame::error("ERR EXEC without MULTI");
    };
    let reply = exec_queued(ctx, multi);
    unwatch_all(ctx);
    reply
}

fn exec_queued(ctx: &mut Ctx<'_>, multi: Multi) -> Frame {
    if multi.aborted {
        return Frame::error("EXECABORT Transaction discarded because of previous errors.");
    }
    // No other command runs from here to the last reply.
    let node = ctx.node;
    let _exclusive = node.exec_exclusive();
    let _gate = node.cluster().map(|c| c.gate());
    match changed(ctx) {
        Ok(false) => {}
        Ok(true) => return Frame::NullArray,
        Err(e) => return e,
    }
    // As Redis: a transaction with a write that memory could hold nowhere is refused whole,
    // before any of it runs.
    if multi
        .queue
        .iter()
        .any(|(spec, args)| super::would_oom(node, spec, args))
    {
        return Frame::error(format!(
            "EXECABORT Transaction discarded because of: -{}",
            crate::KvError::OutOfMemory
        ));
    }
    if let Some(c) = node.cluster() {
        let mut slot = None;
        for (spec, args) in &multi.queue {
            for k in spec.keys_of(args) {
                let s = crate::cluster::key_slot(k);
                if slot.is_some_and(|x| x != s) {
                    return Frame::error("CROSSSLOT Keys in request don't hash to the same slot");
                }
                slot = Some(s);
            }
        }
        for (spec, args) in &multi.queue {
            if spec.keys.0 != 0 {
                if let Some(redirect) = super::cluster::route(ctx, spec, args, false) {
                    return redirect;
                }
                if let Some(key) = spec.keys_of(args).next() {
                    c.count_op(crate::cluster::key_slot(key));
                }
            }
        }
    }
    let replies = multi
        .queue
        .iter()
        .map(|(spec, args)| super::run(ctx, spec, args))
        .collect();
    Frame::Array(replies)
}
