//! Connection commands: PING, ECHO, HELLO, CLIENT, SELECT, QUIT, and the SUBSCRIBE a CLIENT
//! TRACKING REDIRECT target needs.

use bytes::Bytes;
use pliant_proto::frame::{Frame, Protocol};

use super::{Ctx, integer, syntax_error};

pub(super) fn ping(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    if ctx.session.messages.is_some() && ctx.session.proto == Protocol::Resp2 {
        // As Redis answers a subscribed RESP2 connection, whose replies are read as messages.
        return Frame::Array(vec![
            Frame::bulk("pong"),
            Frame::Bulk(args.first().cloned().unwrap_or_default()),
        ]);
    }
    match args {
        [] => Frame::Simple("PONG".into()),
        [msg] => Frame::Bulk(msg.clone()),
        _ => super::wrong_arity("ping"),
    }
}

pub(super) fn echo(_: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    Frame::Bulk(args[0].clone())
}

/// `HELLO [protover [AUTH user pass] [SETNAME name]]`: switches the protocol and describes the
/// server, as a map (a flat array in RESP2).
pub(super) fn hello(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let mut proto = ctx.session.proto;
    let mut rest = args;
    if let Some((v, tail)) = args.split_first() {
        proto = match integer(v) {
            Some(2) => Protocol::Resp2,
            Some(3) => Protocol::Resp3,
            Some(_) => return Frame::error("NOPROTO unsupported protocol version"),
            None => return Frame::error("ERR Protocol version is not an integer or out of range"),
        };
        rest = tail;
    }
    let mut name = None;
    while let Some((opt, tail)) = rest.split_first() {
        if opt.eq_ignore_ascii_case(b"setname") && !tail.is_empty() {
            name = Some(Bytes::copy_from_slice(&tail[0]));
            rest = &tail[1..];
        } else if opt.eq_ignore_ascii_case(b"auth") && tail.len() >= 2 {
            if let Err(e) = authenticate(ctx, Some(&tail[0]), &tail[1]) {
                return e;
            }
            rest = &tail[2..];
        } else {
            return syntax_error();
        }
    }
    if !ctx.session.authenticated {
        return Frame::error(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time",
        );
    }
    ctx.session.proto = proto;
    if name.is_some() {
        ctx.session.name = name;
    }
    if let Some(c) = &ctx.session.client {
        c.set_resp(if proto == Protocol::Resp3 { 3 } else { 2 });
        if ctx.session.name.is_some() {
            c.set_name(ctx.session.name.clone());
        }
    }
    let s = |x: &str| Frame::Bulk(Bytes::copy_from_slice(x.as_bytes()));
    Frame::Map(vec![
        (s("server"), s("pliant")),
        (s("version"), s(env!("CARGO_PKG_VERSION"))),
        (
            s("proto"),
            Frame::Integer(if proto == Protocol::Resp3 { 3 } else { 2 }),
        ),
        (s("id"), Frame::Integer(ctx.session.id as i64)),
        (s("mode"), s("standalone")),
        (s("role"), s("master")),
        (s("modules"), Frame::Array(vec![])),
    ])
}

/// `AUTH [username] password`: the one user is `default`, as in Redis without ACLs.
pub(super) fn auth(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let r = match args {
        [pass] => authenticate(ctx, None, pass),
        [user, pass] => authenticate(ctx, Some(user), pass),
        _ => return syntax_error(),
    };
    r.map_or_else(|e| e, |()| Frame::ok())
}

/// Checks a password (and user, if given) and marks the session authenticated.
fn authenticate(ctx: &mut Ctx<'_>, user: Option<&Bytes>, pass: &[u8]) -> Result<(), Frame> {
    if !ctx.node.requires_auth() {
        return Err(Frame::error(
            "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
        ));
    }
    let user_ok = user.is_none_or(|u| u.as_ref() == b"default");
    if ctx.node.check_password(pass) && user_ok {
        ctx.session.authenticated = true;
        Ok(())
    } else {
        ctx.node.count_auth_failure();
        tracing::warn!("client {}: wrong user or password", ctx.session.id);
        Err(Frame::error(
            "WRONGPASS invalid username-password pair or user is disabled.",
        ))
    }
}

/// `CLIENT SETNAME|GETNAME|SETINFO|ID|INFO`: what client libraries send on connect; `CLIENT
/// TRACKING ON|OFF [NOLOOP]` (see [`crate::tracking`]).
pub(super) fn client(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let sub = args[0].to_ascii_lowercase();
    match (sub.as_slice(), &args[1..]) {
        (b"setname", [name]) => {
            if name.iter().any(|&b| b == b' ' || b == b'\n') {
                return Frame::error(
                    "ERR Client names cannot contain spaces, newlines or special characters.",
                );
            }
            if name.len() > crate::clients::MAX_NAME {
                return Frame::error(format!(
                    "ERR Client names are limited to {} bytes here",
                    crate::clients::MAX_NAME
                ));
            }
            ctx.session.name = (!name.is_empty()).then(|| Bytes::copy_from_slice(name));
            if let Some(c) = &ctx.session.client {
                c.set_name(ctx.session.name.clone());
            }
            Frame::ok()
        }
        (b"getname", []) => ctx.session.name.clone().map_or(Frame::Null, Frame::Bulk),
        (b"setinfo", [_, _]) => Frame::ok(),
        (b"id", []) => Frame::Integer(ctx.session.id as i64),
        (b"tracking", [on, opts @ ..]) => tracking(ctx, on, opts),
        (b"info", []) => match &ctx.session.client {
            Some(c) => Frame::Verbatim(Bytes::from(format!("{}\n", c.line()))),
            // Not a network connection (a command run in-process): what the session knows.
            None => Frame::Verbatim(Bytes::from(format!(
                "id={} name={} resp={}\n",
                ctx.session.id,
                ctx.session
                    .name
                    .as_deref()
                    .map(String::from_utf8_lossy)
                    .unwrap_or_default(),
                if ctx.session.proto == Protocol::Resp3 {
                    3
                } else {
                    2
                }
            ))),
        },
        (b"list", opts) => list(ctx, opts),
        (b"kill", opts) if !opts.is_empty() => kill(ctx, opts),
        _ => Frame::error(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try CLIENT HELP.",
            String::from_utf8_lossy(&args[0])
        )),
    }
}

/// `CLIENT TRACKING ON|OFF [NOLOOP] [REDIRECT id]`: Redis's default mode, its invalidations
/// pushed on the connection itself (RESP3), or with REDIRECT published to connection `id` on
/// `__redis__:invalidate`, which that connection subscribed to (RESP2 clients' way: redis-py's
/// and redis-cli's). The other modes (BCAST, PREFIX, OPTIN, OPTOUT) are refused by name rather
/// than accepted and ignored.
fn tracking(ctx: &mut Ctx<'_>, on: &[u8], opts: &[Bytes]) -> Frame {
    let on = match on.to_ascii_lowercase().as_slice() {
        b"on" => true,
        b"off" => false,
        _ => return syntax_error(),
    };
    let mut noloop = false;
    let mut redirect = None;
    let mut rest = opts.iter();
    while let Some(o) = rest.next() {
        match o.to_ascii_uppercase().as_slice() {
            b"NOLOOP" => noloop = true,
            b"REDIRECT" => match rest.next().map(|id| integer(id)) {
                Some(Some(id)) => redirect = Some(id),
                Some(None) => return super::not_an_integer(),
                None => return syntax_error(),
            },
            b"BCAST" | b"PREFIX" | b"OPTIN" | b"OPTOUT" => {
                return Frame::error(format!(
                    "ERR CLIENT TRACKING {} is not supported by this server: use the default mode, over RESP3 (HELLO 3) or with REDIRECT",
                    String::from_utf8_lossy(o).to_ascii_uppercase()
                ));
            }
            _ => return syntax_error(),
        }
    }
    let tracking = ctx.node.tracking();
    if !on {
        tracking.disable(ctx.session.id);
        ctx.session.pushes = None;
        ctx.session.redirect = None;
        if let Some(c) = &ctx.session.client {
            c.set_tracking(None);
        }
        return Frame::ok();
    }
    // Redis: a redirect to the connection itself is no redirect.
    let redirect = redirect.filter(|&r| r != ctx.session.id as i64);
    let target = match redirect {
        None => None,
        Some(r) => match u64::try_from(r)
            .ok()
            .and_then(|r| ctx.node.registry().get(r))
        {
            Some(t) => Some(t),
            None => {
                return Frame::error("ERR The client ID you want redirect to does not exist");
            }
        },
    };
    let Some(target) = target else {
        if ctx.session.proto != Protocol::Resp3 {
            return Frame::error(
                "ERR CLIENT TRACKING needs RESP3 (HELLO 3) here, or REDIRECT to a connection subscribed to __redis__:invalidate",
            );
        }
        ctx.session.redirect = None;
        ctx.session.pushes = Some(tracking.enable(ctx.session.id, noloop));
        if let Some(c) = &ctx.session.client {
            c.set_tracking(Some(ctx.session.id));
        }
        return Frame::ok();
    };
    let mut rx = tracking.enable(ctx.session.id, noloop);
    ctx.session.pushes = None;
    ctx.session.redirect = Some(target.id);
    if let Some(c) = &ctx.session.client {
        c.set_tracking(Some(target.id));
    }
    // Each invalidation becomes a message to the target; the task ends when tracking does
    // (OFF, or the connection closes: the table drops the sender).
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return Frame::error("ERR CLIENT TRACKING REDIRECT needs the server's runtime");
    };
    rt.spawn(async move {
        while let Some(out) = rx.recv().await {
            if let crate::tracking::Outgoing::Push(Frame::Push(items)) = out
                && let [kind, keys] = items.as_slice()
                && matches!(kind, Frame::Bulk(k) if k.as_ref() == b"invalidate")
            {
                // Gone or unsubscribed: Redis drops the message too (and would tell a RESP3
                // tracker its redirect broke).
                let _ = target.invalidate(keys.clone());
            }
        }
    });
    Frame::ok()
}

/// `SUBSCRIBE channel…`: only `__redis__:invalidate`, where CLIENT TRACKING REDIRECT publishes
/// (this server has no PUBLISH, so any other channel would never carry a message and is
/// refused by name). One reply per channel, as Redis sends them.
pub(super) fn subscribe(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    if let Some(other) = args
        .iter()
        .find(|c| c.as_ref() != crate::clients::INVALIDATE_CHANNEL)
    {
        return Frame::error(format!(
            "ERR this server has no PUBLISH: SUBSCRIBE takes only __redis__:invalidate (where CLIENT TRACKING REDIRECT sends invalidations), not '{}'",
            String::from_utf8_lossy(other)
        ));
    }
    if ctx.session.multi.is_some() {
        return Frame::error("ERR SUBSCRIBE inside MULTI is not allowed");
    }
    if ctx.session.messages.is_none() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        ctx.session.messages = Some(rx);
        if let Some(c) = &ctx.session.client {
            c.subscribe(Some(tx));
        }
    }
    let reply = || {
        Frame::Push(vec![
            Frame::bulk("subscribe"),
            Frame::Bulk(Bytes::from_static(crate::clients::INVALIDATE_CHANNEL)),
            Frame::Integer(1),
        ])
    };
    ctx.session
        .also
        .extend(std::iter::repeat_with(reply).take(args.len() - 1));
    reply()
}

/// `UNSUBSCRIBE [channel…]`: from `__redis__:invalidate` (the only channel there is), one reply
/// per channel named, or one for it when none is.
pub(super) fn unsubscribe(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let was = ctx.session.messages.is_some();
    let leaves = args.is_empty()
        || args
            .iter()
            .any(|c| c.as_ref() == crate::clients::INVALIDATE_CHANNEL);
    if leaves {
        ctx.session.messages = None;
        if let Some(c) = &ctx.session.client {
            c.subscribe(None);
        }
    }
    let left = i64::from(was && !leaves);
    let reply = |channel: Frame| {
        Frame::Push(vec![
            Frame::bulk("unsubscribe"),
            channel,
            Frame::Integer(left),
        ])
    };
    match args.split_first() {
        None if was => reply(Frame::Bulk(Bytes::from_static(
            crate::clients::INVALIDATE_CHANNEL,
        ))),
        None => reply(Frame::Null),
        Some((first, rest)) => {
            ctx.session
                .also
                .extend(rest.iter().map(|c| reply(Frame::Bulk(c.clone()))));
            reply(Frame::Bulk(first.clone()))
        }
    }
}

/// `CLIENT LIST [TYPE normal|pubsub|master|replica] [ID id…]`: one line per connection, in
/// Redis's format. At most `--max-clients` lines, each of a bounded length (names are at most
/// [`crate::clients::MAX_NAME`] bytes).
fn list(ctx: &mut Ctx<'_>, opts: &[Bytes]) -> Frame {
    let mut ids: Option<Vec<u64>> = None;
    let mut kind: Option<Vec<u8>> = None;
    match opts {
        [] => {}
        [t, k] if t.eq_ignore_ascii_case(b"type") => {
            let k = k.to_ascii_lowercase();
            if !matches!(
                k.as_slice(),
                b"normal" | b"pubsub" | b"master" | b"replica" | b"slave"
            ) {
                return Frame::error(format!(
                    "ERR Unknown client type '{}'",
                    String::from_utf8_lossy(&k)
                ));
            }
            kind = Some(k);
        }
        [i, list @ ..] if i.eq_ignore_ascii_case(b"id") && !list.is_empty() => {
            let mut v = Vec::with_capacity(list.len());
            for id in list {
                match integer(id)
                    .and_then(|n| u64::try_from(n).ok())
                    .filter(|&n| n > 0)
                {
                    Some(n) => v.push(n),
                    None => return Frame::error("ERR Invalid client ID"),
                }
            }
            ids = Some(v);
        }
        _ => return syntax_error(),
    }
    let mut out = String::new();
    for c in ctx.node.registry().all() {
        if ids.as_ref().is_some_and(|ids| !ids.contains(&c.id)) {
            continue;
        }
        let pubsub = c.subscribed();
        let shown = match kind.as_deref() {
            None => true,
            Some(b"pubsub") => pubsub,
            Some(b"normal") => !pubsub,
            // No replicas, no masters here.
            Some(_) => false,
        };
        if shown {
            out.push_str(&c.line());
            out.push('\n');
        }
    }
    Frame::Verbatim(Bytes::from(out))
}

/// `CLIENT KILL addr:port` (the old form: `+OK`, or an error if there is none), or `CLIENT KILL
/// [ID id] [ADDR ip:port] [LADDR ip:port] [USER name] [SKIPME yes|no] [MAXAGE s]`: closes
/// every connection all the filters given match and returns how many (the caller's own only
/// with SKIPME no). See [`crate::clients`] for who may.
fn kill(ctx: &mut Ctx<'_>, opts: &[Bytes]) -> Frame {
    let me = ctx.session.id;
    if let [addr] = opts {
        let target = ctx
            .node
            .registry()
            .all()
            .into_iter()
            .find(|c| c.addr.to_string().as_bytes() == addr.as_ref());
        return match target {
            Some(c) => {
                tracing::info!("client {me} killed client {} ({})", c.id, c.addr);
                c.kill();
                Frame::ok()
            }
            None => Frame::error("ERR No such client"),
        };
    }
    if !opts.len().is_multiple_of(2) {
        return syntax_error();
    }
    let (mut id, mut addr, mut laddr, mut skipme, mut maxage) = (None, None, None, true, None);
    for pair in opts.chunks_exact(2) {
        let (k, v) = (pair[0].to_ascii_lowercase(), &pair[1]);
        match k.as_slice() {
            b"id" => match integer(v)
                .and_then(|n| u64::try_from(n).ok())
                .filter(|&n| n > 0)
            {
                Some(n) => id = Some(n),
                None => return Frame::error("ERR client-id should be greater than 0"),
            },
            b"addr" => addr = Some(v.clone()),
            b"laddr" => laddr = Some(v.clone()),
            b"user" => {
                if v.as_ref() != b"default" {
                    return Frame::error(format!(
                        "ERR No such user '{}'",
                        String::from_utf8_lossy(v)
                    ));
                }
            }
            b"skipme" => match v.to_ascii_lowercase().as_slice() {
                b"yes" => skipme = true,
                b"no" => skipme = false,
                _ => return syntax_error(),
            },
            b"maxage" => match integer(v).and_then(|n| u64::try_from(n).ok()) {
                Some(n) => maxage = Some(n),
                None => return super::not_an_integer(),
            },
            b"type" => {
                if !matches!(
                    v.to_ascii_lowercase().as_slice(),
                    b"normal" | b"pubsub" | b"master" | b"replica" | b"slave"
                ) {
                    return Frame::error(format!(
                        "ERR Unknown client type '{}'",
                        String::from_utf8_lossy(v)
                    ));
                }
                // Every connection here is a normal one or a subscriber; no finer filter.
            }
            _ => return syntax_error(),
        }
    }
    let mut n = 0;
    for c in ctx.node.registry().all() {
        let matches = id.is_none_or(|i| c.id == i)
            && addr
                .as_ref()
                .is_none_or(|a| c.addr.to_string().as_bytes() == a.as_ref())
            && laddr
                .as_ref()
                .is_none_or(|a| c.laddr.to_string().as_bytes() == a.as_ref())
            && maxage.is_none_or(|m| c.age() >= m)
            && !(skipme && c.id == me);
        if matches {
            tracing::info!("client {me} killed client {} ({})", c.id, c.addr);
            c.kill();
            n += 1;
        }
    }
    Frame::Integer(n)
}

/// Only database 0 exists (as in Redis Cluster).
pub(super) fn select(_: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    match integer(&args[0]) {
        Some(0) => Frame::ok(),
        Some(_) => Frame::error("ERR DB index is out of range"),
        None => super::not_an_integer(),
    }
}

pub(super) fn quit(ctx: &mut Ctx<'_>, _: &[Bytes]) -> Frame {
    ctx.session.quit = true;
    Frame::ok()
}
