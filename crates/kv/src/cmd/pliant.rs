//! Pliant's own commands: `PLIANT.POLICY` (load, roll back, inspect the live policy) and
//! `PLIANT.STATS` (the node's counters as JSON).

use bytes::Bytes;
use pliant_policy::{ParamValue, Params, PolicySource};
use pliant_proto::frame::Frame;

use super::Ctx;
use crate::policy::AUTO;

/// `PLIANT.POLICY LOAD name <lua source> [param=value…]` | `LOAD auto [param=value…]` |
/// `ROLLBACK` | `STATUS` | `LOG [n]`. LOAD takes the policy's source text, never a path: the
/// server opens no file a client names.
pub(super) fn policy(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let Some(p) = ctx.node.policy() else {
        return Frame::error("ERR this node runs no policy thread");
    };
    let sub = args[0].to_ascii_uppercase();
    let reply = |r: Result<u64, crate::policy::LivePolicyError>, what: &str| match r {
        Ok(v) => Frame::Simple(format!("OK {what} version {v}")),
        Err(e) => Frame::error(format!("ERR policy: {}", one_line(&e.to_string()))),
    };
    match (sub.as_slice(), &args[1..]) {
        // `auto` is the built-in policy: parameters follow its name, no source.
        (b"LOAD", [name, params @ ..]) if name.eq_ignore_ascii_case(AUTO.as_bytes()) => {
            match parse_params(params) {
                Ok(parsed) => reply(p.load_auto(parsed), "loaded"),
                Err(e) => e,
            }
        }
        (b"LOAD", [name, source, params @ ..]) => {
            let parsed = match parse_params(params) {
                Ok(parsed) => parsed,
                Err(e) => return e,
            };
            let source = PolicySource::functions(
                String::from_utf8_lossy(name),
                String::from_utf8_lossy(source),
            );
            reply(p.load(source, parsed), "loaded")
        }
        (b"ROLLBACK", []) => reply(p.rollback(), "rolled back to"),
        (b"STATUS", []) => match p.status() {
            Ok(s) => Frame::Bulk(Bytes::from(
                serde_json::to_string_pretty(&s).unwrap_or_default(),
            )),
            Err(e) => Frame::error(format!("ERR {e}")),
        },
        (b"LOG", rest) if rest.len() <= 1 => {
            let n = match rest.first() {
                None => 10,
                Some(n) => match super::integer(n) {
                    Some(n) if n >= 0 => n as usize,
                    _ => return super::not_an_integer(),
                },
            };
            match p.log(n) {
                Ok(lines) => Frame::Array(
                    lines
                        .into_iter()
                        .map(|l| Frame::Bulk(Bytes::from(l)))
                        .collect(),
                ),
                Err(e) => Frame::error(format!("ERR {e}")),
            }
        }
        _ => Frame::error(
            "ERR usage: PLIANT.POLICY LOAD name source [param=value ...] | LOAD auto [param=value ...] | ROLLBACK | STATUS | LOG [n]",
        ),
    }
}

/// `name=value` arguments as a policy's parameters, or the error reply naming the bad one.
fn parse_params(args: &[Bytes]) -> Result<Params, Frame> {
    let mut parsed = Params::new();
    for p in args {
        let text = String::from_utf8_lossy(p);
        let Some((k, v)) = text.split_once('=').filter(|(k, _)| !k.is_empty()) else {
            return Err(Frame::error(format!(
                "ERR policy parameter {text:?}: expected name=value"
            )));
        };
        parsed.insert(k.to_string(), ParamValue::parse(v));
    }
    Ok(parsed)
}

/// `PLIANT.STATS`: the node's counters, one JSON object.
pub(super) fn stats(ctx: &mut Ctx<'_>, _: &[Bytes]) -> Frame {
    // Over a store, `keys_total` was counted off the keyspace lock before this ran, where the
    // server could (see `Facts::walks`); otherwise walked here under the lock.
    let walked = ctx.walked_counts();
    let (stats, (keys, bytes), capacity, algo, keys_total) = {
        let mut ks = ctx.node.keyspace();
        (
            ks.stats(),
            ks.memory(),
            ks.capacity(),
            ks.algorithm().to_string(),
            match walked {
                Some(w) => w.map(|c| c.all),
                None => ks.len(),
            },
        )
    };
    let keys_total = match keys_total {
        Ok(n) => n,
        Err(e) => return super::store_error(&e),
    };
    let mut v = serde_json::to_value(stats).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("keys".into(), keys.into());
        o.insert("bytes".into(), bytes.into());
        o.insert("keys_total".into(), keys_total.into());
        o.insert("capacity".into(), capacity.to_string().into());
        o.insert("algorithm".into(), algo.into());
        o.insert("clients".into(), ctx.node.clients().into());
        o.insert("commands".into(), ctx.node.commands_processed().into());
        o.insert("tiers_cut_off".into(), ctx.node.tracking().cut_off().into());
    }
    Frame::Bulk(Bytes::from(v.to_string()))
}

/// `PLIANT.PROGRESS INCRBY n | SET n | GET`: the application's progress (its own unit: steps,
/// simulated time, records written), which the node's policy sees as `progress` and
/// `progress_per_s`: what a cache is for, which a hit rate only stands for. Replies the progress
/// (null before any report).
pub(super) fn progress(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let sub = args[0].to_ascii_uppercase();
    let reply = |v: Option<f64>| match v {
        Some(v) => Frame::Bulk(Bytes::from(format!("{v}"))),
        None => Frame::Null,
    };
    match (sub.as_slice(), args.len()) {
        (b"GET", 1) => reply(ctx.node.progress()),
        (b"INCRBY" | b"SET", 2) => {
            let Some(v) = std::str::from_utf8(&args[1])
                .ok()
                .and_then(|s| s.trim().parse::<f64>().ok())
                .filter(|v| v.is_finite())
            else {
                return Frame::error("ERR value is not a valid float");
            };
            match ctx.node.report_progress(v, sub.as_slice() == b"INCRBY") {
                Ok(now) => reply(Some(now)),
                Err(e) => Frame::error(format!("ERR {e}")),
            }
        }
        _ => Frame::error("ERR usage: PLIANT.PROGRESS INCRBY n | SET n | GET"),
    }
}

/// A policy error's first line (a simple error reply cannot span lines).
fn one_line(e: &str) -> String {
    e.lines().collect::<Vec<_>>().join(" | ")
}

/// `PLIANT.FETCH key`: what a child tier asks its parent on a miss: `[value, expires_at]`
/// (unix milliseconds, 0 for none), or null. A read, as GET: counted, kept in memory, tracked.
pub(super) fn fetch(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let now = ctx.now;
    match ctx.ks().get_value(&args[0], now) {
        Ok(Some(v)) => Frame::Array(vec![
            Frame::Bulk(v.data),
            Frame::Integer(v.expires_at.map_or(0, |t| t as i64)),
        ]),
        Ok(None) => Frame::Null,
        Err(e) => super::store_error(&e),
    }
}

/// `PLIANT.TIER`: this connection, which tracks keys, is a child tier: writes that invalidate its
/// keys wait until it says it has applied them (see [`crate::tracking`]).
pub(super) fn tier(ctx: &mut Ctx<'_>, _: &[Bytes]) -> Frame {
    if ctx.node.tracking().set_tier(ctx.session.id) {
        Frame::ok()
    } else {
        Frame::error("ERR PLIANT.TIER needs CLIENT TRACKING ON first")
    }
}

/// `PLIANT.INVALIDATED client n`: child tier connection `client` applied its first `n`
/// invalidations.
pub(super) fn invalidated(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let (Some(id), Some(n)) = (super::integer(&args[0]), super::integer(&args[1])) else {
        return super::not_an_integer();
    };
    ctx.node.tracking().ack(id as u64, n as u64);
    Frame::ok()
}

/// `PLIANT.REPORT id metrics`: a child tier's metrics (a JSON object of numbers), which this
/// node's policy sees as `servers[id]`; the reply is this node's own, `{"id": …, "metrics": …}`,
/// which the child's policy sees as its parent's.
pub(super) fn report(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let id = String::from_utf8_lossy(&args[0]).into_owned();
    let metrics = match serde_json::from_slice(&args[1]).and_then(crate::node::reported_from) {
        Ok(m) => m,
        Err(e) => {
            return Frame::error(format!(
                "ERR PLIANT.REPORT: metrics must be a JSON object of numbers: {e}"
            ));
        }
    };
    ctx.node.report_child(id, metrics);
    let own = crate::node::reported_json(&ctx.node.metrics());
    Frame::Bulk(Bytes::from(
        serde_json::json!({ "id": ctx.node.id(), "metrics": own }).to_string(),
    ))
}

/// `PLIANT.WRITE command args…`: how a child tier sends a write. The command runs as if sent
/// alone; the reply is `[its reply, ticket]`. A ticket of 0 means the write is acknowledged;
/// otherwise other tiers hold keys it changed, and a push `pliant-acked ticket` follows once they
/// have all dropped them ([`crate::tracking::Tracking::defer`]): the child acknowledges the write
/// to its own client only then, while this connection goes on serving it.
pub(super) fn write(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let spec = match check_write(ctx.session, args) {
        Ok(spec) => spec,
        Err(reply) => return reply,
    };
    let before = ctx.session.awaiting.len();
    let reply = super::run(ctx, spec, args);
    if !ctx.node.tracking().tracks(ctx.session.id) {
        // No tracking connection to send a ticket's acknowledgement on: the batch's replies wait
        // for the tiers, as a plain write's do.
        return written(reply, 0);
    }
    let waits = ctx.session.awaiting.split_off(before);
    let ticket = ctx.node.tracking().defer(ctx.session.id, waits, None);
    written(reply, ticket)
}

/// The write command `PLIANT.WRITE` carries, checked as [`super::check`] checks any request; the
/// `PLIANT.WRITE` reply refusing it otherwise.
pub(crate) fn check_write(
    session: &super::Session,
    args: &[Bytes],
) -> Result<&'static super::Spec, Frame> {
    match super::check(session, args) {
        Ok(spec) if spec.writes() => Ok(spec),
        Ok(_) => Err(written(
            Frame::error("ERR PLIANT.WRITE takes a write command"),
            0,
        )),
        Err(reply) => Err(written(reply, 0)),
    }
}

/// A `PLIANT.WRITE` reply: the write's reply and its ticket.
pub(crate) fn written(reply: Frame, ticket: u64) -> Frame {
    Frame::Array(vec![reply, Frame::Integer(ticket as i64)])
}
