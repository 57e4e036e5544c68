//! Commands: one file per family, each command a function from its arguments to its reply.
//! [`execute`] looks the name up in [`COMMANDS`], checks the arity as Redis does, and runs it.

mod cluster;
mod connection;
mod keys;
mod pliant;
mod server;
mod strings;

use bytes::Bytes;

use crate::frame::{Frame, Protocol};
use crate::keyspace::{Keyspace, Lent};
use crate::node::Node;
pub(crate) use pliant::{check_write, written};

/// One connection's state, as commands see and change it.
#[derive(Debug, Default)]
pub struct Session {
    /// Its id (`CLIENT ID`).
    pub id: u64,
    /// The protocol it speaks (`HELLO`).
    pub proto: Protocol,
    /// Its name (`CLIENT SETNAME`).
    pub name: Option<Bytes>,
    /// Whether it may run commands: it gave the password, or none is required.
    pub authenticated: bool,
    /// Set by `QUIT`: reply, then close.
    pub quit: bool,
    /// Set by `SHUTDOWN`: reply, then stop the server.
    pub shutdown: bool,
    /// Whether a command of this batch wrote (the reply waits for the store's sync under
    /// `--durability always`).
    pub wrote: bool,
    /// Invalidation pushes to send (`CLIENT TRACKING ON`).
    pub pushes: Option<tokio::sync::mpsc::UnboundedReceiver<crate::tracking::Outgoing>>,
    /// Tiers this batch's writes invalidated: its replies wait until they have applied it.
    pub awaiting: Vec<crate::tracking::Wait>,
    /// Set by `ASKING`: the next command may use a slot being imported here (Redis Cluster's
    /// `-ASK` redirection).
    pub asking: bool,
}

/// What a command runs with.
pub struct Ctx<'a> {
    /// The node.
    pub node: &'a Node,
    /// The connection.
    pub session: &'a mut Session,
    /// Unix milliseconds now.
    pub now: u64,
    /// On a tier, the values fetched from the parent for this command (see [`Ctx::ks`]).
    pub lent: Lent,
    /// On a tier, whether the command looked for a key that neither memory nor the loan had (it
    /// left memory after the caller looked): the caller fetches and runs it again.
    pub unready: bool,
}

impl<'a> Ctx<'a> {
    /// What a command runs with, nothing lent.
    pub fn new(node: &'a Node, session: &'a mut Session, now: u64) -> Self {
        Self {
            node,
            session,
            now,
            lent: Lent::default(),
            unready: false,
        }
    }

    /// The keyspace, locked, with the values fetched for this command lent to it while the lock
    /// is held (a read command on a tier sees them even if memory could not keep them, and no
    /// other command ever sees them).
    pub fn ks(&mut self) -> Ks<'_> {
        let mut guard = self.node.keyspace();
        guard.tick(self.now);
        // Whatever another command left there is not this one's.
        guard.take_unready();
        if !self.lent.is_empty() {
            guard.lend(std::mem::take(&mut self.lent));
        }
        Ks {
            guard,
            lent: &mut self.lent,
            unready: &mut self.unready,
        }
    }
}

/// The keyspace locked by [`Ctx::ks`]; gives back what was lent when dropped.
pub struct Ks<'a> {
    guard: std::sync::MutexGuard<'a, Keyspace>,
    lent: &'a mut Lent,
    unready: &'a mut bool,
}

impl std::ops::Deref for Ks<'_> {
    type Target = Keyspace;
    fn deref(&self) -> &Keyspace {
        &self.guard
    }
}

impl std::ops::DerefMut for Ks<'_> {
    fn deref_mut(&mut self) -> &mut Keyspace {
        &mut self.guard
    }
}

impl Drop for Ks<'_> {
    fn drop(&mut self) {
        // Read under the same lock as the command, so no other command's miss is taken for it.
        *self.unready |= self.guard.take_unready();
        if self.guard.lends() {
            *self.lent = self.guard.unlend();
        }
    }
}

type Run = fn(&mut Ctx<'_>, &[Bytes]) -> Frame;

/// A command: its name, its arity as Redis states it (negative: at least that many, the name
/// included), whether it writes, and what runs it.
#[derive(Clone, Copy)]
pub struct Spec {
    /// Lowercase name.
    pub name: &'static str,
    /// Arity, counting the name; negative means at least `-arity`.
    pub arity: i32,
    /// Whether it changes keys.
    pub writes: bool,
    /// Where its keys are among the arguments, as `COMMAND` reports it: first, last (negative:
    /// from the end) and step; all 0 for a command without keys.
    pub keys: (i64, i64, i64),
    run: Run,
}

const NO_KEYS: (i64, i64, i64) = (0, 0, 0);
const ONE_KEY: (i64, i64, i64) = (1, 1, 1);
const ALL_KEYS: (i64, i64, i64) = (1, -1, 1);

const fn cmd(
    name: &'static str,
    arity: i32,
    writes: bool,
    keys: (i64, i64, i64),
    run: Run,
) -> Spec {
    Spec {
        name,
        arity,
        writes,
        keys,
        run,
    }
}

/// Every command the node answers.
pub const COMMANDS: &[Spec] = &[
    cmd("auth", -2, false, NO_KEYS, connection::auth),
    cmd("ping", -1, false, NO_KEYS, connection::ping),
    cmd("echo", 2, false, NO_KEYS, connection::echo),
    cmd("hello", -1, false, NO_KEYS, connection::hello),
    cmd("client", -2, false, NO_KEYS, connection::client),
    cmd("select", 2, false, NO_KEYS, connection::select),
    cmd("quit", -1, false, NO_KEYS, connection::quit),
    cmd("command", -1, false, NO_KEYS, server::command),
    cmd("info", -1, false, NO_KEYS, server::info),
    cmd("config", -2, false, NO_KEYS, server::config),
    cmd("dbsize", 1, false, NO_KEYS, server::dbsize),
    cmd("flushdb", -1, true, NO_KEYS, server::flush),
    cmd("flushall", -1, true, NO_KEYS, server::flush),
    cmd("shutdown", -1, false, NO_KEYS, server::shutdown),
    cmd("get", 2, false, ONE_KEY, strings::get),
    cmd("set", -3, true, ONE_KEY, strings::set),
    cmd("setnx", 3, true, ONE_KEY, strings::setnx),
    cmd("setex", 4, true, ONE_KEY, strings::setex),
    cmd("psetex", 4, true, ONE_KEY, strings::psetex),
    cmd("getset", 3, true, ONE_KEY, strings::getset),
    cmd("getdel", 2, true, ONE_KEY, strings::getdel),
    cmd("mget", -2, false, ALL_KEYS, strings::mget),
    cmd("mset", -3, true, (1, -1, 2), strings::mset),
    cmd("strlen", 2, false, ONE_KEY, strings::strlen),
    cmd("append", 3, true, ONE_KEY, strings::append),
    cmd("incr", 2, true, ONE_KEY, strings::incr),
    cmd("decr", 2, true, ONE_KEY, strings::decr),
    cmd("incrby", 3, true, ONE_KEY, strings::incrby),
    cmd("decrby", 3, true, ONE_KEY, strings::decrby),
    cmd("del", -2, true, ALL_KEYS, keys::del),
    cmd("unlink", -2, true, ALL_KEYS, keys::del),
    cmd("exists", -2, false, ALL_KEYS, keys::exists),
    cmd("type", 2, false, ONE_KEY, keys::type_),
    cmd("expire", -3, true, ONE_KEY, keys::expire),
    cmd("pexpire", -3, true, ONE_KEY, keys::pexpire),
    cmd("ttl", 2, false, ONE_KEY, keys::ttl),
    cmd("pttl", 2, false, ONE_KEY, keys::pttl),
    cmd("persist", 2, true, ONE_KEY, keys::persist),
    cmd("keys", 2, false, NO_KEYS, keys::keys),
    cmd("scan", -2, false, NO_KEYS, keys::scan),
    cmd("cluster", -2, false, NO_KEYS, cluster::cluster),
    cmd("asking", 1, false, NO_KEYS, cluster::asking),
    cmd("readonly", 1, false, NO_KEYS, cluster::readonly),
    cmd("readwrite", 1, false, NO_KEYS, cluster::readonly),
    cmd("pliant.cluster", 1, false, NO_KEYS, cluster::pliant_cluster),
    // A slot move's steps: keyless here, so the routing they exist to get around does not apply.
    cmd("pliant.slotkeys", -4, false, NO_KEYS, cluster::slotkeys),
    cmd("pliant.slotstats", 1, false, NO_KEYS, cluster::slotstats),
    cmd("pliant.load", 1, false, NO_KEYS, cluster::load),
    cmd("pliant.balancer", -2, false, NO_KEYS, cluster::balancer),
    cmd("pliant.slotcount", -2, false, NO_KEYS, cluster::slotcount),
    cmd("pliant.restore", -4, true, NO_KEYS, cluster::restore),
    cmd("pliant.delifeq", -4, true, NO_KEYS, cluster::delifeq),
    cmd("pliant.policy", -2, false, NO_KEYS, pliant::policy),
    cmd("pliant.stats", 1, false, NO_KEYS, pliant::stats),
    cmd("pliant.fetch", 2, false, ONE_KEY, pliant::fetch),
    cmd("pliant.tier", -1, false, NO_KEYS, pliant::tier),
    cmd("pliant.invalidated", 3, false, NO_KEYS, pliant::invalidated),
    cmd("pliant.report", 3, false, NO_KEYS, pliant::report),
    cmd("pliant.write", -2, false, NO_KEYS, pliant::write),
];

impl Spec {
    /// The arguments of a request for this command (`args[0]` its name) that are keys.
    pub fn keys_of<'a>(&self, args: &'a [Bytes]) -> impl Iterator<Item = &'a Bytes> {
        let (first, last, step) = self.keys;
        let n = args.len() as i64;
        let last = if last < 0 { n + last } else { last.min(n - 1) };
        let (first, step) = if first == 0 {
            (1, 1)
        } else {
            (first, step.max(1))
        };
        let end = if self.keys.0 == 0 { 0 } else { last + 1 };
        (first..end.max(first))
            .step_by(step as usize)
            .filter_map(move |i| args.get(i as usize))
    }
}

/// The command named `name` (any case).
pub fn lookup(name: &[u8]) -> Option<&'static Spec> {
    static BY_NAME: std::sync::OnceLock<
        std::collections::HashMap<&'static [u8], &'static Spec, foldhash::fast::FixedState>,
    > = std::sync::OnceLock::new();
    let table = BY_NAME.get_or_init(|| COMMANDS.iter().map(|c| (c.name.as_bytes(), c)).collect());
    // Every name is short: lowercase it on the stack rather than allocate per request.
    let mut lower = [0u8; 24];
    let lower = lower.get_mut(..name.len())?;
    for (l, c) in lower.iter_mut().zip(name) {
        *l = c.to_ascii_lowercase();
    }
    table.get(&*lower).copied()
}

/// Runs one request (`args[0]` is the command's name) and returns its reply.
pub fn execute(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    // ASKING lasts one command, whatever becomes of it.
    let asking = std::mem::take(&mut ctx.session.asking);
    let spec = match check(ctx.session, args) {
        Ok(spec) => spec,
        Err(reply) => return reply,
    };
    match ctx.node.cluster() {
        Some(c) if spec.keys.0 != 0 => {
            // Held from the routing decision to the end of the command, so a slot move cannot
            // take a key away between the two (see `cluster::Cluster::gate`).
            let _gate = c.gate();
            if let Some(redirect) = cluster::route(ctx, spec, args, asking) {
                return redirect;
            }
            if let Some(key) = spec.keys_of(args).next() {
                c.count_op(crate::cluster::key_slot(key));
            }
            run(ctx, spec, args)
        }
        _ => run(ctx, spec, args),
    }
}

/// What Redis checks before it runs a request: a known command, authentication, arity. The
/// command's spec, or the error reply.
pub fn check(session: &Session, args: &[Bytes]) -> Result<&'static Spec, Frame> {
    let Some(name) = args.first() else {
        return Err(Frame::error("ERR empty command"));
    };
    let Some(spec) = lookup(name) else {
        return Err(unknown(name, &args[1..]));
    };
    if !session.authenticated && !matches!(spec.name, "auth" | "hello" | "quit") {
        return Err(Frame::error("NOAUTH Authentication required."));
    }
    let n = args.len() as i64;
    let arity = i64::from(spec.arity);
    if (arity > 0 && n != arity) || (arity < 0 && n < -arity) {
        return Err(wrong_arity(spec.name));
    }
    Ok(spec)
}

/// Runs a request [`check`] passed, here.
pub fn run(ctx: &mut Ctx<'_>, spec: &Spec, args: &[Bytes]) -> Frame {
    if spec.writes {
        ctx.session.wrote = true;
    }
    ctx.node.count_command();
    let reply = (spec.run)(ctx, &args[1..]);
    track(ctx, spec, args);
    reply
}

/// Tells the tracking table what a command read or changed (see [`crate::tracking`]).
pub fn track(ctx: &mut Ctx<'_>, spec: &Spec, args: &[Bytes]) {
    let tracking = ctx.node.tracking();
    if !tracking.active() {
        return;
    }
    let id = ctx.session.id;
    if spec.writes {
        let waits = if matches!(spec.name, "flushdb" | "flushall") {
            tracking.wrote_all(id)
        } else {
            tracking.wrote(id, spec.keys_of(args))
        };
        ctx.session.awaiting.extend(waits);
    } else if ctx.session.pushes.is_some() {
        tracking.read(id, spec.keys_of(args));
    }
}

/// Redis's reply to a command it does not know, quoting the first arguments.
fn unknown(name: &[u8], rest: &[Bytes]) -> Frame {
    let quoted: String = rest
        .iter()
        .take(20)
        .map(|a| format!("'{}' ", String::from_utf8_lossy(a)))
        .collect();
    Frame::error(format!(
        "ERR unknown command '{}', with args beginning with: {quoted}",
        String::from_utf8_lossy(name)
    ))
}

/// Redis's reply to a command given the wrong number of arguments.
pub fn wrong_arity(name: &str) -> Frame {
    Frame::error(format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

/// Redis's reply to a malformed option list.
pub fn syntax_error() -> Frame {
    Frame::error("ERR syntax error")
}

/// Redis's reply to an argument that must be an integer and is not.
pub fn not_an_integer() -> Frame {
    Frame::error("ERR value is not an integer or out of range")
}

/// Parses an integer argument as Redis does (no spaces, no `+`, within `i64`).
pub fn integer(arg: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(arg).ok()?;
    if s.is_empty() || s.starts_with('+') || s.len() > 20 {
        return None;
    }
    s.parse().ok()
}

/// The reply to a store failure: the command had no effect, and the client is told why.
pub fn store_error(e: &crate::KvError) -> Frame {
    tracing::error!("{e}");
    Frame::error(format!("ERR {e}"))
}

/// `$-1` or the value.
pub fn bulk_or_null(v: Option<Bytes>) -> Frame {
    v.map_or(Frame::Null, Frame::Bulk)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_is_found_by_its_name_in_any_case() {
        for c in COMMANDS {
            for name in [c.name.to_string(), c.name.to_ascii_uppercase()] {
                assert_eq!(
                    lookup(name.as_bytes()).map(|s| s.name),
                    Some(c.name),
                    "{name}"
                );
            }
        }
        assert!(lookup(b"nosuchcommand").is_none());
        assert!(lookup(b"a-name-longer-than-any-command").is_none());
    }
}
