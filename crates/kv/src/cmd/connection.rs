//! Connection commands: PING, ECHO, HELLO, CLIENT, SELECT, QUIT.

use bytes::Bytes;

use super::{Ctx, integer, syntax_error};
use crate::frame::{Frame, Protocol};

pub(super) fn ping(_: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
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
            ctx.session.name = (!name.is_empty()).then(|| Bytes::copy_from_slice(name));
            Frame::ok()
        }
        (b"getname", []) => ctx.session.name.clone().map_or(Frame::Null, Frame::Bulk),
        (b"setinfo", [_, _]) => Frame::ok(),
        (b"id", []) => Frame::Integer(ctx.session.id as i64),
        (b"tracking", [on, opts @ ..]) => tracking(ctx, on, opts),
        (b"info", []) => Frame::Bulk(Bytes::from(format!(
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
        _ => Frame::error(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try CLIENT HELP.",
            String::from_utf8_lossy(&args[0])
        )),
    }
}

/// `CLIENT TRACKING ON|OFF [NOLOOP]`: Redis's default mode over RESP3 pushes. The other modes
/// (REDIRECT to a RESP2 connection, BCAST, OPTIN, OPTOUT) are refused by name rather than
/// accepted and ignored.
fn tracking(ctx: &mut Ctx<'_>, on: &[u8], opts: &[Bytes]) -> Frame {
    let on = match on.to_ascii_lowercase().as_slice() {
        b"on" => true,
        b"off" => false,
        _ => return syntax_error(),
    };
    let mut noloop = false;
    for o in opts {
        match o.to_ascii_uppercase().as_slice() {
            b"NOLOOP" => noloop = true,
            b"REDIRECT" | b"BCAST" | b"PREFIX" | b"OPTIN" | b"OPTOUT" => {
                return Frame::error(format!(
                    "ERR CLIENT TRACKING {} is not supported by this server: use the default mode over RESP3 (HELLO 3)",
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
        return Frame::ok();
    }
    if ctx.session.proto != Protocol::Resp3 {
        return Frame::error(
            "ERR CLIENT TRACKING needs RESP3 (HELLO 3) here: invalidations are pushed on the same connection",
        );
    }
    ctx.session.pushes = Some(tracking.enable(ctx.session.id, noloop));
    Frame::ok()
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
