//! Key commands: DEL/UNLINK, EXISTS, TYPE, EXPIRE/PEXPIRE, TTL/PTTL, PERSIST, KEYS, SCAN.

use bytes::Bytes;
use pliant_proto::frame::Frame;

use super::{Ctx, integer, not_an_integer, store_error, syntax_error};
use crate::glob::glob_match;
use crate::keyspace::Value;

pub(super) fn del(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let mut ks = ctx.node.keyspace();
    let mut n = 0;
    for k in args {
        match ks.delete(k, ctx.now) {
            Ok(existed) => n += i64::from(existed),
            Err(e) => return store_error(&e),
        }
    }
    Frame::Integer(n)
}

/// Counts every argument that exists, a key named twice twice (as Redis).
pub(super) fn exists(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let now = ctx.now;
    let mut ks = ctx.ks();
    let mut n = 0;
    for k in args {
        match ks.exists(k, now) {
            Ok(e) => n += i64::from(e),
            Err(e) => return store_error(&e),
        }
    }
    Frame::Integer(n)
}

pub(super) fn type_(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let now = ctx.now;
    match ctx.ks().exists(&args[0], now) {
        Ok(true) => Frame::Simple("string".into()),
        Ok(false) => Frame::Simple("none".into()),
        Err(e) => store_error(&e),
    }
}

pub(super) fn expire(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    set_expiry(ctx, args, 1000, "expire")
}

pub(super) fn pexpire(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    set_expiry(ctx, args, 1, "pexpire")
}

/// `EXPIRE key n [NX|XX|GT|LT …]` with `n` in units of `ms` milliseconds. A time in the past
/// deletes the key, as in Redis.
fn set_expiry(ctx: &mut Ctx<'_>, args: &[Bytes], ms: i64, name: &str) -> Frame {
    // Options first, as Redis reads them: any of them, each a condition that must hold.
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for opt in &args[2..] {
        match opt.to_ascii_uppercase().as_slice() {
            b"NX" => nx = true,
            b"XX" => xx = true,
            b"GT" => gt = true,
            b"LT" => lt = true,
            _ => {
                return Frame::error(format!(
                    "ERR Unsupported option {}",
                    String::from_utf8_lossy(opt)
                ));
            }
        }
    }
    if nx && (xx || gt || lt) {
        return Frame::error("ERR NX and XX, GT or LT options at the same time are not compatible");
    }
    if gt && lt {
        return Frame::error("ERR GT and LT options at the same time are not compatible");
    }
    let Some(n) = integer(&args[1]) else {
        return not_an_integer();
    };
    // Past a signed 64-bit count of milliseconds, in the multiplication or once now is added,
    // Redis refuses the time (it was taken, and saturated to the end of time).
    let Some(delta) = n
        .checked_mul(ms)
        .filter(|d| (ctx.now as i64).checked_add(*d).is_some())
    else {
        return Frame::error(format!("ERR invalid expire time in '{name}' command"));
    };
    let mut ks = ctx.node.keyspace();
    let Some(v) = (match ks.read(&args[0], ctx.now) {
        Ok(v) => v,
        Err(e) => return store_error(&e),
    }) else {
        return Frame::Integer(0);
    };
    let at = ctx.now as i64 + delta;
    // A key without an expiry has an infinite TTL for GT and LT.
    let current = v.expires_at.map_or(i64::MAX, |t| t as i64);
    let allowed = (!nx || v.expires_at.is_none())
        && (!xx || v.expires_at.is_some())
        && (!gt || at > current)
        && (!lt || at < current);
    if !allowed {
        return Frame::Integer(0);
    }
    let result = if at <= ctx.now as i64 {
        ks.delete(&args[0], ctx.now).map(|_| ())
    } else {
        ks.set(
            args[0].clone(),
            Value {
                data: v.data,
                expires_at: Some(at as u64),
            },
        )
    };
    match result {
        Ok(()) => Frame::Integer(1),
        Err(e) => store_error(&e),
    }
}

pub(super) fn ttl(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    remaining(ctx, &args[0], 1000)
}

pub(super) fn pttl(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    remaining(ctx, &args[0], 1)
}

/// -2 for a missing key, -1 for one without an expiry, else the time left (rounded as Redis).
fn remaining(ctx: &mut Ctx<'_>, key: &[u8], ms: u64) -> Frame {
    let now = ctx.now;
    match ctx.ks().peek(key, now) {
        Ok(None) => Frame::Integer(-2),
        Ok(Some(Value {
            expires_at: None, ..
        })) => Frame::Integer(-1),
        Ok(Some(Value {
            expires_at: Some(t),
            ..
        })) => Frame::Integer((t.saturating_sub(now) + ms / 2).div_euclid(ms) as i64),
        Err(e) => store_error(&e),
    }
}

pub(super) fn persist(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let mut ks = ctx.node.keyspace();
    match ks.read(&args[0], ctx.now) {
        Ok(Some(v)) if v.expires_at.is_some() => {
            match ks.set(args[0].clone(), Value::new(v.data)) {
                Ok(()) => Frame::Integer(1),
                Err(e) => store_error(&e),
            }
        }
        Ok(_) => Frame::Integer(0),
        Err(e) => store_error(&e),
    }
}

/// Every live key matching the pattern, in key order (the whole keyspace: as in Redis, a
/// command for debugging, not for production loops; SCAN is bounded per call).
///
/// Over a store the server walked it before this ran, off the keyspace lock; where it could not
/// (queued in MULTI, run by EXEC; a tier), the walk is here, under the lock.
pub(super) fn keys(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    if let Some(walked) = ctx.walked_keys() {
        return match walked {
            Ok((found, _)) => Frame::Array(found.into_iter().map(Frame::Bulk).collect()),
            Err(e) => store_error(&e),
        };
    }
    let pattern = args[0].clone();
    let mut ks = ctx.node.keyspace();
    let mut out = Vec::new();
    let mut after: Option<Bytes> = None;
    loop {
        let matches = |k: &[u8]| glob_match(&pattern, k);
        match ks.scan(after.as_deref(), 1024, ctx.now, &matches) {
            Ok((found, next)) => {
                out.extend(found.into_iter().map(Frame::Bulk));
                match next {
                    Some(n) => after = Some(n),
                    None => return Frame::Array(out),
                }
            }
            Err(e) => return store_error(&e),
        }
    }
}

/// `SCAN cursor [MATCH pattern] [COUNT n] [TYPE t]`. Cursors are numbers the node hands out,
/// each standing for the last key a call returned ([`crate::node::Node::cursor`]): keys are
/// walked in order, so a key that exists for the whole scan is returned exactly once.
///
/// Over a store the server scanned it before this ran, off the keyspace lock (see
/// [`super::walk_ahead`]); where it could not (queued in MULTI, run by EXEC; a tier), the
/// scan is here, under the lock.
pub(super) fn scan(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let result = match ctx.walked_keys() {
        Some(walked) => walked,
        None => {
            let a = match scan_args(ctx.node, args) {
                Ok(a) => a,
                Err(reply) => return reply,
            };
            ctx.node
                .keyspace()
                .scan(a.after.as_deref(), a.count, ctx.now, &|k| a.matches(k))
        }
    };
    match result {
        Ok((found, next)) => {
            let next = next.map_or(0, |k| ctx.node.new_cursor(k));
            Frame::Array(vec![
                Frame::Bulk(Bytes::from(next.to_string())),
                Frame::Array(found.into_iter().map(Frame::Bulk).collect()),
            ])
        }
        Err(e) => store_error(&e),
    }
}

/// What a SCAN asks for.
pub(super) struct ScanArgs {
    /// The key its cursor stands for (`None`: from the start).
    pub(super) after: Option<Bytes>,
    /// `COUNT`.
    pub(super) count: usize,
    /// `MATCH`.
    pattern: Option<Bytes>,
    /// `TYPE`: every value is a string, so any other type matches nothing.
    only_strings: bool,
}

impl ScanArgs {
    /// Whether `key` is one it asks for.
    pub(super) fn matches(&self, key: &[u8]) -> bool {
        self.only_strings && self.pattern.as_ref().is_none_or(|p| glob_match(p, key))
    }
}

/// SCAN's arguments (after its name) read, or the error reply.
pub(super) fn scan_args(node: &crate::node::Node, args: &[Bytes]) -> Result<ScanArgs, Frame> {
    let Some(cursor) = args
        .first()
        .and_then(|c| std::str::from_utf8(c).ok())
        .and_then(|s| s.parse::<u64>().ok())
    else {
        return Err(Frame::error("ERR invalid cursor"));
    };
    let (mut pattern, mut count, mut only_strings) = (None, 10usize, true);
    for pair in args[1..].chunks(2) {
        let [opt, val] = pair else {
            return Err(syntax_error());
        };
        match opt.to_ascii_uppercase().as_slice() {
            b"MATCH" => pattern = Some(val.clone()),
            b"COUNT" => match integer(val) {
                Some(n) if n >= 1 => count = n as usize,
                Some(_) => return Err(syntax_error()),
                None => return Err(not_an_integer()),
            },
            b"TYPE" => only_strings = val.eq_ignore_ascii_case(b"string"),
            _ => return Err(syntax_error()),
        }
    }
    let after = if cursor == 0 {
        None
    } else {
        match node.cursor(cursor) {
            Some(k) => Some(k),
            None => return Err(Frame::error("ERR invalid cursor")),
        }
    };
    Ok(ScanArgs {
        after,
        count,
        pattern,
        only_strings,
    })
}

/// `OBJECT ENCODING|FREQ|IDLETIME|REFCOUNT key`, `OBJECT HELP`. Every value is a string:
/// ENCODING says how Redis would hold it (`int`, `embstr` up to 44 bytes, `raw`); REFCOUNT is
/// always 1 (values are not shared between keys). The memory tier's algorithms keep neither an
/// access clock per key nor Redis's LFU counter, so IDLETIME and FREQ are refused by name rather
/// than answered with a made-up number.
pub(super) fn object(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let sub = args[0].to_ascii_uppercase();
    if sub == b"HELP" && args.len() == 1 {
        return Frame::Array(
            [
                "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "ENCODING <key>",
                "    Return the kind of internal representation used in order to store the value",
                "    associated with a <key>.",
                "FREQ <key>",
                "    Not kept here: refused (the memory tier's algorithms keep no LFU counter).",
                "IDLETIME <key>",
                "    Not kept here: refused (the memory tier keeps no access time per key).",
                "REFCOUNT <key>",
                "    Return the number of references of the value associated with the specified",
                "    <key> (always 1 here).",
                "HELP",
                "    Print this help.",
            ]
            .iter()
            .map(|l| Frame::Simple((*l).to_string()))
            .collect(),
        );
    }
    let [_, key] = args else {
        return Frame::error(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try OBJECT HELP.",
            String::from_utf8_lossy(&args[0])
        ));
    };
    if !matches!(
        sub.as_slice(),
        b"ENCODING" | b"FREQ" | b"IDLETIME" | b"REFCOUNT"
    ) {
        return Frame::error(format!(
            "ERR unknown subcommand '{}'. Try OBJECT HELP.",
            String::from_utf8_lossy(&args[0])
        ));
    }
    let now = ctx.now;
    let v = match ctx.ks().peek(key, now) {
        Ok(Some(v)) => v,
        Ok(None) => return Frame::Null,
        Err(e) => return store_error(&e),
    };
    match sub.as_slice() {
        b"ENCODING" => Frame::Bulk(Bytes::from_static(encoding(&v.data).as_bytes())),
        b"REFCOUNT" => Frame::Integer(1),
        b"FREQ" => Frame::error(
            "ERR OBJECT FREQ is not kept by this server: its memory tier's algorithms keep no LFU counter",
        ),
        _ => Frame::error(
            "ERR OBJECT IDLETIME is not kept by this server: its memory tier keeps no access time per key",
        ),
    }
}

/// Redis's encoding of a string value: `int` for a canonical 64-bit integer of at most 20
/// characters, `embstr` for at most 44 bytes, `raw` otherwise.
fn encoding(data: &[u8]) -> &'static str {
    let canonical_int = data.len() <= 20
        && std::str::from_utf8(data)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .is_some_and(|n| n.to_string().as_bytes() == data);
    if canonical_int {
        "int"
    } else if data.len() <= 44 {
        "embstr"
    } else {
        "raw"
    }
}
