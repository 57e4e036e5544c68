//! String commands: GET, SET and its variants, MGET, MSET, STRLEN, APPEND, INCR/DECR(BY).

use bytes::Bytes;
use pliant_proto::frame::Frame;

use super::{Ctx, bulk_or_null, integer, not_an_integer, store_error, syntax_error};
use crate::keyspace::Value;

pub(super) fn get(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let now = ctx.now;
    match ctx.ks().get(&args[0], now) {
        Ok(v) => bulk_or_null(v),
        Err(e) => store_error(&e),
    }
}

/// `SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]`.
pub(super) fn set(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let (key, data) = (&args[0], &args[1]);
    let (mut nx, mut xx, mut get, mut keepttl) = (false, false, false, false);
    let mut expires_at = None;
    let mut i = 2;
    while i < args.len() {
        let opt = args[i].to_ascii_uppercase();
        let next = args.get(i + 1);
        match opt.as_slice() {
            b"NX" if !xx => nx = true,
            b"XX" if !nx => xx = true,
            b"GET" => get = true,
            b"KEEPTTL" if expires_at.is_none() => keepttl = true,
            b"EX" | b"PX" | b"EXAT" | b"PXAT" if expires_at.is_none() && !keepttl => {
                let Some(n) = next.and_then(|n| integer(n)) else {
                    return if next.is_none() {
                        syntax_error()
                    } else {
                        not_an_integer()
                    };
                };
                match deadline(&opt, n, ctx.now) {
                    Some(t) => expires_at = Some(t),
                    None => return Frame::error("ERR invalid expire time in 'set' command"),
                }
                i += 1;
            }
            _ => return syntax_error(),
        }
        i += 1;
    }
    let mut ks = ctx.node.keyspace();
    // A plain SET needs nothing of the value it replaces: no read, so a write costs one store
    // write and is not counted as a read of the key.
    let old = if nx || xx || get || keepttl {
        match ks.peek(key, ctx.now) {
            Ok(v) => v,
            Err(e) => return store_error(&e),
        }
    } else {
        None
    };
    let reply = |done: bool, old: Option<Value>| match (get, done) {
        (true, _) => bulk_or_null(old.map(|v| v.data)),
        (false, true) => Frame::ok(),
        (false, false) => Frame::Null,
    };
    if (nx && old.is_some()) || (xx && old.is_none()) {
        return reply(false, old);
    }
    if keepttl {
        expires_at = old.as_ref().and_then(|v| v.expires_at);
    }
    let v = Value {
        // Its own allocation: the argument is a slice of the whole request buffer.
        data: Bytes::copy_from_slice(data),
        expires_at,
    };
    match ks.set(key.clone(), v) {
        Ok(()) => reply(true, old),
        Err(e) => store_error(&e),
    }
}

/// When a key given `EX`/`PX`/`EXAT`/`PXAT n` at `now` expires, in unix ms; `None` if `n` is
/// not positive or the time does not fit a signed 64-bit count of milliseconds (Redis refuses
/// both: `SET k v EX 10000000000000000` was taken, and PTTL then said -8446744073709551641).
fn deadline(unit: &[u8], n: i64, now: u64) -> Option<u64> {
    let n = u64::try_from(n).ok().filter(|&n| n > 0)?;
    match unit {
        b"EX" => n.checked_mul(1000)?.checked_add(now),
        b"PX" => n.checked_add(now),
        b"EXAT" => n.checked_mul(1000),
        _ => Some(n),
    }
    .filter(|&t| i64::try_from(t).is_ok())
}

pub(super) fn setnx(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    match set(
        ctx,
        &[args[0].clone(), args[1].clone(), Bytes::from_static(b"NX")],
    ) {
        Frame::Simple(_) => Frame::Integer(1),
        Frame::Null => Frame::Integer(0),
        e => e,
    }
}

pub(super) fn setex(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    timed_set(ctx, args, b"EX")
}

pub(super) fn psetex(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    timed_set(ctx, args, b"PX")
}

fn timed_set(ctx: &mut Ctx<'_>, args: &[Bytes], unit: &'static [u8]) -> Frame {
    let name = if unit == b"EX" { "setex" } else { "psetex" };
    match integer(&args[1]) {
        None => not_an_integer(),
        Some(n) if n <= 0 => Frame::error(format!("ERR invalid expire time in '{name}' command")),
        Some(_) => set(
            ctx,
            &[
                args[0].clone(),
                args[2].clone(),
                Bytes::from_static(unit),
                args[1].clone(),
            ],
        ),
    }
}

pub(super) fn getset(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    set(
        ctx,
        &[args[0].clone(), args[1].clone(), Bytes::from_static(b"GET")],
    )
}

pub(super) fn getdel(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let mut ks = ctx.node.keyspace();
    let v = match ks.get(&args[0], ctx.now) {
        Ok(v) => v,
        Err(e) => return store_error(&e),
    };
    if v.is_some()
        && let Err(e) = ks.delete(&args[0], ctx.now)
    {
        return store_error(&e);
    }
    bulk_or_null(v)
}

pub(super) fn mget(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let now = ctx.now;
    let mut ks = ctx.ks();
    let mut out = Vec::with_capacity(args.len());
    for k in args {
        match ks.get(k, now) {
            Ok(v) => out.push(bulk_or_null(v)),
            Err(e) => return store_error(&e),
        }
    }
    Frame::Array(out)
}

pub(super) fn mset(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    if !args.len().is_multiple_of(2) {
        return super::wrong_arity("mset");
    }
    let mut ks = ctx.node.keyspace();
    for kv in args.chunks_exact(2) {
        if let Err(e) = ks.set(kv[0].clone(), Value::new(Bytes::copy_from_slice(&kv[1]))) {
            return store_error(&e);
        }
    }
    Frame::ok()
}

pub(super) fn strlen(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let now = ctx.now;
    match ctx.ks().read(&args[0], now) {
        Ok(v) => Frame::Integer(v.map_or(0, |v| v.data.len() as i64)),
        Err(e) => store_error(&e),
    }
}

pub(super) fn append(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let mut ks = ctx.node.keyspace();
    let old = match ks.read(&args[0], ctx.now) {
        Ok(v) => v,
        Err(e) => return store_error(&e),
    };
    let (mut data, expires_at) =
        old.map_or((Vec::new(), None), |v| (v.data.to_vec(), v.expires_at));
    if data.len() + args[1].len() > ctx.node.max_value_size() {
        return Frame::error("ERR string exceeds maximum allowed size (proto-max-bulk-len)");
    }
    data.extend_from_slice(&args[1]);
    let len = data.len() as i64;
    match ks.set(
        args[0].clone(),
        Value {
            data: data.into(),
            expires_at,
        },
    ) {
        Ok(()) => Frame::Integer(len),
        Err(e) => store_error(&e),
    }
}

pub(super) fn incr(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    add(ctx, &args[0], 1)
}

pub(super) fn decr(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    add(ctx, &args[0], -1)
}

pub(super) fn incrby(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    match integer(&args[1]) {
        Some(n) => add(ctx, &args[0], n),
        None => not_an_integer(),
    }
}

pub(super) fn decrby(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    match integer(&args[1]).and_then(i64::checked_neg) {
        Some(n) => add(ctx, &args[0], n),
        None => not_an_integer(),
    }
}

/// Adds `n` to the integer at `key` (0 if absent), keeping its expiry.
fn add(ctx: &mut Ctx<'_>, key: &Bytes, n: i64) -> Frame {
    let mut ks = ctx.node.keyspace();
    let old = match ks.read(key, ctx.now) {
        Ok(v) => v,
        Err(e) => return store_error(&e),
    };
    let (cur, expires_at) = match &old {
        None => (0, None),
        Some(v) => match integer(&v.data) {
            Some(c) => (c, v.expires_at),
            None => return not_an_integer(),
        },
    };
    let Some(new) = cur.checked_add(n) else {
        return Frame::error("ERR increment or decrement would overflow");
    };
    match ks.set(
        key.clone(),
        Value {
            data: Bytes::from(new.to_string()),
            expires_at,
        },
    ) {
        Ok(()) => Frame::Integer(new),
        Err(e) => store_error(&e),
    }
}

/// `GETEX key [EX s|PX ms|EXAT s|PXAT ms|PERSIST]`: the value, its expiry changed as told. A
/// time in the past deletes the key after reading it, as in Redis.
pub(super) fn getex(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    // `None`: leave the expiry; `Some(None)`: PERSIST; `Some(Some(t))`: expire at `t`.
    let change: Option<Option<u64>> = match &args[1..] {
        [] => None,
        [p] if p.eq_ignore_ascii_case(b"persist") => Some(None),
        [unit, n] => {
            let unit = unit.to_ascii_uppercase();
            if !matches!(unit.as_slice(), b"EX" | b"PX" | b"EXAT" | b"PXAT") {
                return syntax_error();
            }
            let Some(n) = integer(n) else {
                return not_an_integer();
            };
            match deadline(&unit, n, ctx.now) {
                Some(t) => Some(Some(t)),
                None => return Frame::error("ERR invalid expire time in 'getex' command"),
            }
        }
        _ => return syntax_error(),
    };
    let now = ctx.now;
    let mut ks = ctx.node.keyspace();
    let v = match ks.get_value(&args[0], now) {
        Ok(Some(v)) => v,
        Ok(None) => return Frame::Null,
        Err(e) => return store_error(&e),
    };
    let done = match change {
        None => Ok(()),
        Some(Some(t)) if t <= now => ks.delete(&args[0], now).map(|_| ()),
        Some(expires_at) if expires_at == v.expires_at => Ok(()),
        Some(expires_at) => ks.set(
            args[0].clone(),
            Value {
                data: v.data.clone(),
                expires_at,
            },
        ),
    };
    match done {
        Ok(()) => Frame::Bulk(v.data),
        Err(e) => store_error(&e),
    }
}
