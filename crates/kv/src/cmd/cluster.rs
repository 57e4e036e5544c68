//! Redis Cluster's commands: `CLUSTER …` (what clients read to route: SLOTS, SHARDS, NODES; and
//! MYID, INFO, KEYSLOT, COUNTKEYSINSLOT, GETKEYSINSLOT), `ASKING`, `READONLY`/`READWRITE`, and
//! [`route`], which every keyed command passes on a cluster node.

use std::fmt::Write;

use bytes::Bytes;
use pliant_proto::frame::Frame;

use super::{Ctx, Spec, integer, store_error};
use crate::cluster::{SLOTS, key_slot};
use pliant_cluster::ClusterState;

/// Redis's reply on a node that is not in a cluster.
fn disabled() -> Frame {
    Frame::error("ERR This instance has cluster support disabled")
}

/// Where the request may run (see [`crate::cluster::route`]): `None` here.
pub(super) fn route(ctx: &Ctx<'_>, spec: &Spec, args: &[Bytes], asking: bool) -> Option<Frame> {
    let cluster = ctx.node.cluster()?;
    // Before the routing: a copied key that expired here since would otherwise be sent to the
    // target with -ASK, where the copy's arrival could overwrite the write.
    if spec.writes() && spec.keys_of(args).any(|k| cluster.is_copying(k)) {
        return Some(Frame::error(
            "TRYAGAIN the key is being moved to another node; try again",
        ));
    }
    let (node, now) = (ctx.node, ctx.now);
    let redirect = crate::cluster::route(cluster, spec.keys_of(args), asking, |k| {
        node.keyspace().exists(k, now).unwrap_or(false)
    });
    // At a move's target, the slot's keys an earlier move of it left here are dropped before
    // any client is served there (`Cluster::settled`): served, a key the owner deleted since
    // would come back. The task doing it was woken; clients retry.
    if redirect.is_none()
        && asking
        && spec
            .keys_of(args)
            .next()
            .is_some_and(|k| !cluster.import_settled(key_slot(k)))
    {
        return Some(Frame::error(
            "TRYAGAIN this slot's move here is dropping keys an earlier move left; try again",
        ));
    }
    // Runs here, at a move's target if it was sent here: a copy arriving later is older.
    if redirect.is_none()
        && asking
        && spec.writes()
        && !cluster.clients_write(spec.keys_of(args).cloned())
    {
        return Some(Frame::error(
            "TRYAGAIN too many keys written during this slot's move; try again once it ends",
        ));
    }
    redirect
}

/// `ASKING`.
pub(super) fn asking(ctx: &mut Ctx<'_>, _: &[Bytes]) -> Frame {
    if ctx.node.cluster().is_none() {
        return disabled();
    }
    ctx.session.asking = true;
    Frame::ok()
}

/// `READONLY` / `READWRITE`: accepted (there are no replicas to read from yet).
pub(super) fn readonly(ctx: &mut Ctx<'_>, _: &[Bytes]) -> Frame {
    if ctx.node.cluster().is_none() {
        return disabled();
    }
    Frame::ok()
}

/// `PLIANT.CLUSTER`: this node's view as JSON: `{"me", "coord", "state": {"map", "members"}}`
/// (what `pliant cluster status` and the rescaler read).
pub(super) fn pliant_cluster(ctx: &mut Ctx<'_>, _: &[Bytes]) -> Frame {
    let Some(cluster) = ctx.node.cluster() else {
        return disabled();
    };
    Frame::bulk(format!(
        "{{\"me\":{},\"coord\":{},\"state\":{}}}",
        serde_json::Value::from(cluster.me().id.clone()),
        serde_json::Value::from(cluster.coord_addr()),
        cluster.state().to_json()
    ))
}

/// `CLUSTER subcommand …`.
pub(super) fn cluster(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let sub = args[0].to_ascii_uppercase();
    let rest = &args[1..];
    if sub == b"HELP" {
        return Frame::Array(
            HELP.iter()
                .map(|l| Frame::Simple((*l).to_string()))
                .collect(),
        );
    }
    let Some(cluster) = ctx.node.cluster() else {
        return disabled();
    };
    let state = cluster.state();
    let me = cluster.me().id.clone();
    let wrong = || {
        Frame::error(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try CLUSTER HELP.",
            String::from_utf8_lossy(&args[0])
        ))
    };
    match (sub.as_slice(), rest) {
        (b"MYID" | b"MYSHARDID", []) => Frame::bulk(me),
        (b"INFO", []) => Frame::Verbatim(
            info(
                &state,
                &me,
                cluster.served_version(&state),
                cluster.unsettled_imports(&state),
                cluster.acted_version(),
            )
            .into(),
        ),
        (b"SLOTS", []) => slots(&state),
        (b"SHARDS", []) => shards(&state),
        (b"NODES", []) => Frame::Verbatim(nodes(&state, &me).into()),
        (b"KEYSLOT", [key]) => Frame::Integer(i64::from(key_slot(key))),
        (b"COUNTKEYSINSLOT", [slot]) => match slot_arg(slot) {
            Err(e) => e,
            Ok(slot) => match ctx.node.keyspace().slot_count(&[slot], ctx.now) {
                Ok(n) => Frame::Integer(i64::try_from(n).unwrap_or(i64::MAX)),
                Err(e) => store_error(&e),
            },
        },
        (b"GETKEYSINSLOT", [slot, count]) => {
            let slot = match slot_arg(slot) {
                Ok(s) => s,
                Err(e) => return e,
            };
            let Some(count) = integer(count).and_then(|c| usize::try_from(c).ok()) else {
                return Frame::error("ERR Invalid number of keys");
            };
            match ctx.node.keyspace().slot_keys(&[slot], None, count, ctx.now) {
                Ok(Some((keys, _))) => Frame::Array(keys.into_iter().map(Frame::Bulk).collect()),
                Ok(None) => unreachable!("no token given"),
                Err(e) => store_error(&e),
            }
        }
        _ => wrong(),
    }
}

const HELP: &[&str] = &[
    "CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "COUNTKEYSINSLOT <slot>",
    "GETKEYSINSLOT <slot> <count>",
    "INFO",
    "KEYSLOT <key>",
    "MYID",
    "MYSHARDID",
    "NODES",
    "SHARDS",
    "SLOTS",
    "HELP",
];

fn slot_arg(arg: &[u8]) -> Result<u16, Frame> {
    integer(arg)
        .and_then(|s| u16::try_from(s).ok())
        .filter(|&s| s < SLOTS)
        .ok_or_else(|| Frame::error("ERR Invalid slot"))
}

/// The slots named by `args`, ascending and each once.
fn slot_args(args: &[Bytes]) -> Result<Vec<u16>, Frame> {
    let mut slots = args
        .iter()
        .map(|a| slot_arg(a))
        .collect::<Result<Vec<u16>, Frame>>()?;
    slots.sort_unstable();
    slots.dedup();
    Ok(slots)
}

/// `PLIANT.SLOTKEYS count after slot [slot…]`: what a slot move copies: `[token, [key, value,
/// expires_at_ms (0: none)]…]`, up to `count` keys of the slots given, walking on from the
/// token of an earlier call (`after`; empty to start; a nil token back: the walk is over). One
/// walk serves every slot of a move, slot by slot, in key order within a slot, reading only
/// those slots' keys (the slot index); a key present throughout the walk is returned once,
/// whatever is written between calls. Reads do not count as reads of the keys.
pub(super) fn slotkeys(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let Some(count) = integer(&args[0]).and_then(|c| usize::try_from(c).ok()) else {
        return Frame::error("ERR Invalid number of keys");
    };
    let after = (!args[1].is_empty()).then(|| args[1].clone());
    let wanted = match slot_args(&args[2..]) {
        Ok(s) => s,
        Err(e) => return e,
    };
    let now = ctx.now;
    // No keyed command is between its routing and its end while the copies are marked.
    let cluster = ctx.node.cluster();
    let _gate = cluster.map(|c| c.gate_exclusive());
    let mut ks = ctx.node.keyspace();
    let (keys, next) = match ks.slot_keys(&wanted, after.as_deref(), count.clamp(1, 10_000), now) {
        Ok(Some(r)) => r,
        Ok(None) => return Frame::error("ERR invalid token"),
        Err(e) => return store_error(&e),
    };
    if let Some(c) = cluster {
        c.copying(keys.iter().cloned());
    }
    let mut out = vec![next.map_or(Frame::Null, Frame::Bulk)];
    for k in keys {
        match ks.peek(&k, now) {
            Ok(Some(v)) => {
                let at = v.expires_at.unwrap_or(0);
                out.push(Frame::Array(vec![
                    Frame::Bulk(k),
                    Frame::Bulk(v.data),
                    Frame::Integer(i64::try_from(at).unwrap_or(i64::MAX)),
                ]));
            }
            Ok(None) => {}
            Err(e) => return store_error(&e),
        }
    }
    Frame::Array(out)
}

/// `PLIANT.LOAD`: the keyed commands this node has run since it started, on every slot (the
/// count other nodes' balancers read twice to get its load).
pub(super) fn load(ctx: &mut Ctx<'_>, _: &[Bytes]) -> Frame {
    match ctx.node.cluster() {
        Some(c) => Frame::Integer(i64::try_from(c.total_ops()).unwrap_or(i64::MAX)),
        None => disabled(),
    }
}

/// `PLIANT.BALANCER LOAD record | ROLLBACK | STATUS | LOG [n]`: set the cluster's balancer policy
/// (`record`: JSON `{"name", "chunks": {"main"|"load"|"when"|"where"|"howmuch": source},
/// "params": {name: value}}`, checked here first; the node never opens a path a client names),
/// make the one before it current again, or what this node's balancer has decided (JSON; the
/// log one decision a line, oldest first).
pub(super) fn balancer(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let Some(cluster) = ctx.node.cluster() else {
        return disabled();
    };
    let Some(b) = cluster.balancer() else {
        return Frame::error("ERR this node runs no balancer");
    };
    let sub = args[0].to_ascii_uppercase();
    let version = |r: Result<u64, pliant_cluster::BalancerError>, what: &str| match r {
        Ok(v) => Frame::Simple(format!("OK {what} version {v}")),
        Err(e) => Frame::error(format!(
            "ERR balancer: {}",
            pliant_proto::error::chain(&e).replace(['\r', '\n'], " ")
        )),
    };
    match (sub.as_slice(), &args[1..]) {
        (b"LOAD", [record]) => {
            match serde_json::from_slice::<pliant_cluster::coord::BalancerRecord>(record) {
                Ok(r) => version(b.load(r), "loaded"),
                Err(e) => Frame::error(format!("ERR balancer record: {e}")),
            }
        }
        (b"ROLLBACK", []) => version(b.rollback(), "rolled back to"),
        (b"STATUS", []) => {
            Frame::bulk(serde_json::to_string_pretty(&b.status()).unwrap_or_default())
        }
        (b"LOG", rest) if rest.len() <= 1 => {
            let n = match rest.first() {
                None => 10,
                Some(n) => match super::integer(n) {
                    Some(n) if n >= 0 => n as usize,
                    _ => return super::not_an_integer(),
                },
            };
            Frame::bulk(
                b.log(n)
                    .iter()
                    .filter_map(|e| serde_json::to_string(e).ok())
                    .collect::<Vec<_>>()
                    .join("\n"),
            )
        }
        _ => Frame::error(format!(
            "ERR unknown subcommand '{}' for 'pliant.balancer': LOAD record, ROLLBACK, STATUS or LOG [n]",
            String::from_utf8_lossy(&args[0])
        )),
    }
}

/// `PLIANT.SLOTSTATS`: what a rescale plans with, for every slot this node has keys in or has
/// served: `[[slot, keys, bytes, ops]…]`, bytes of keys and values, ops the keyed commands run
/// on it since the start. From the slot index's counts, without a walk.
pub(super) fn slotstats(ctx: &mut Ctx<'_>, _: &[Bytes]) -> Frame {
    let Some(cluster) = ctx.node.cluster() else {
        return disabled();
    };
    let stats = match ctx.node.keyspace().slot_stats(ctx.now) {
        Ok(s) => s,
        Err(e) => return store_error(&e),
    };
    Frame::Array(
        (0..SLOTS)
            .zip(stats)
            .filter_map(|(s, (keys, bytes))| {
                let ops = cluster.ops(s);
                (keys > 0 || ops > 0).then(|| {
                    Frame::Array(vec![
                        Frame::Integer(i64::from(s)),
                        Frame::Integer(keys as i64),
                        Frame::Integer(bytes as i64),
                        Frame::Integer(ops as i64),
                    ])
                })
            })
            .collect(),
    )
}

/// `PLIANT.SLOTCOUNT slot [slot…]`: live keys of these slots here, from the slot index under
/// one hold of the keyspace: what a move checks before it gives the slots away.
pub(super) fn slotcount(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let wanted = match slot_args(args) {
        Ok(s) => s,
        Err(e) => return e,
    };
    match ctx.node.keyspace().slot_count(&wanted, ctx.now) {
        Ok(n) => Frame::Integer(i64::try_from(n).unwrap_or(i64::MAX)),
        Err(e) => store_error(&e),
    }
}

/// `PLIANT.RESTORE [MAPVERSION v] key value expires_at_ms […]`: a slot move's copies, written
/// here while their slots are moving here (the move's target receives them before it owns the
/// slots; a batch with a key of a slot that is not is refused whole). `MAPVERSION` names the
/// move the batch belongs to: the map version at which its source checked that the slots were
/// moving from it to here; a batch checked before the current move of one of its slots here
/// began (`Migration::since`) is of a move that is over, and is refused whole too. Both refusals
/// are `-MOVEOVER`, which a source takes as "this batch's move is over": it keeps the keys.
/// Without `MAPVERSION` (a source from before it, or a client) only the slot is checked, as
/// before. A key a client wrote here since its slot began moving here is left as it is
/// (`Cluster::written_here`). An expiry already past drops the key. Synced before the reply
/// whatever the durability: the source deletes its own copies on it. On a node outside a
/// cluster every copy is written, and a batch naming a move is refused (there is none here).
pub(super) fn restore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let (checked_at, args) = match args {
        [word, v, rest @ ..] if args.len() % 3 == 2 && word.eq_ignore_ascii_case(b"MAPVERSION") => {
            let Some(v) = integer(v).and_then(|v| u64::try_from(v).ok()) else {
                return super::not_an_integer();
            };
            (Some(v), rest)
        }
        _ => (None, args),
    };
    if args.is_empty() || !args.len().is_multiple_of(3) {
        return super::wrong_arity("pliant.restore");
    }
    let mut parsed = Vec::with_capacity(args.len() / 3);
    for t in args.chunks(3) {
        let Some(at) = integer(&t[2]).and_then(|a| u64::try_from(a).ok()) else {
            return super::not_an_integer();
        };
        parsed.push((t[0].clone(), t[1].clone(), (at > 0).then_some(at)));
    }
    let now = ctx.now;
    let cluster = ctx.node.cluster();
    if cluster.is_none() && checked_at.is_some() {
        return Frame::error("ERR This instance has cluster support disabled");
    }
    // Nothing is written on a map older than one this node acted on (a coordination store
    // that lost its state): the map recorded first, so a restart remembers it.
    if let Some(Err(e)) = cluster.map(|c| c.act_on(&c.state())) {
        return settle_error(&e);
    }
    let mut slots: Vec<u16> = parsed.iter().map(|t| key_slot(&t.0)).collect();
    slots.sort_unstable();
    slots.dedup();
    // A slot moving here whose keys from an earlier move are not dropped yet (the task that
    // does it had not come to it) has them dropped first, here, under the move gate held alone
    // (see `Cluster::drop_strays`): taken before the keyspace, as every holder takes them.
    let gate = cluster
        .filter(|c| slots.iter().any(|&s| !c.import_settled(s)))
        .map(|c| c.gate_exclusive());
    // Checked under the keyspace lock, which a client's write needs too: a write that the map
    // or a client's mark let run here comes after the copy, not between the check and it.
    let mut ks = ctx.node.keyspace();
    if let Some(c) = cluster {
        for &slot in &slots {
            match (c.import(slot), checked_at) {
                // A copy that arrives once its slot is no longer moving here (its move ended,
                // or was given up) is one held up on its way: its key is this node's, or
                // another's, now.
                (None, _) => {
                    return Frame::error(format!(
                        "MOVEOVER PLIANT.RESTORE: slot {slot} is not moving to this node"
                    ));
                }
                // One checked before this move began was sent in an earlier move of the slot
                // here, held up on its way while the slot moved away and back: its values are
                // older than what this move copies (or what clients wrote here meanwhile).
                (Some(since), Some(v)) if v < since => {
                    return Frame::error(format!(
                        "MOVEOVER PLIANT.RESTORE: slot {slot}'s move to this node began at map version {since}, after this batch's source checked its move at {v}: the batch is of a move that is over"
                    ));
                }
                _ => {}
            }
        }
        // Nothing is written until every slot of the batch is settled.
        for &slot in &slots {
            if c.import_settled(slot) {
                continue;
            }
            let dropped = match &gate {
                Some(g) => c.drop_strays(g, &mut ks, slot, crate::cluster::RESTORE_DROPS_MAX, now),
                // Its move changed between the look without the lock and the one with it.
                None => Ok(crate::cluster::Strays {
                    dropped: 0,
                    done: false,
                }),
            };
            let strays = match dropped {
                Ok(s) => s,
                Err(e) => return settle_error(&e),
            };
            if strays.dropped > 0 {
                tracing::warn!(
                    "PLIANT.RESTORE dropped {} keys of slot {slot} from memory and store first: an earlier move of the slot here, given up, left them",
                    strays.dropped
                );
            }
            if !strays.done {
                return Frame::error(format!(
                    "TRYAGAIN PLIANT.RESTORE: slot {slot} still holds keys an earlier move of it left here, being dropped; try again"
                ));
            }
        }
    }
    ctx.session.sync_writes = true;
    for (k, data, expires_at) in parsed {
        if expires_at.is_some_and(|at| at <= now) {
            continue;
        }
        // The source copies a key only while it has it, and a client is sent here for it only
        // once the source has lost it for good (a write there to a key it lacks answers -ASK
        // until the move ends): a copy arriving after such a write was taken before it.
        if cluster.is_some_and(|c| c.written_here(&k)) {
            continue;
        }
        // The value as the request holds it: `set` copies it into memory and the store's
        // batch, and keeps nothing of it, so no copy of the whole request is held by it.
        let v = crate::keyspace::Value { data, expires_at };
        if let Err(e) = ks.set(k, v) {
            return store_error(&e);
        }
    }
    Frame::ok()
}

/// The reply for a [`crate::cluster::SettleError`]: `-MAPBEHIND` for a map older than one this
/// node acted on (the refusal a move's source relays, naming both versions).
pub(super) fn settle_error(e: &crate::cluster::SettleError) -> Frame {
    match e {
        crate::cluster::SettleError::Keyspace(e) => store_error(e),
        crate::cluster::SettleError::Behind { .. } => Frame::error(format!("MAPBEHIND {e}")),
        other => Frame::error(format!("ERR {other}")),
    }
}

/// `PLIANT.DELIFEQ key value expires_at_ms […]`: the end of a slot move's batch at its
/// source: each key is deleted if it still has the value and expiry that were copied (one
/// changed since stays, and is copied again). The number deleted.
pub(super) fn delifeq(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    if !args.len().is_multiple_of(3) {
        return super::wrong_arity("pliant.delifeq");
    }
    let mut copied = Vec::with_capacity(args.len() / 3);
    for t in args.chunks(3) {
        let Some(at) = integer(&t[2]).and_then(|a| u64::try_from(a).ok()) else {
            return super::not_an_integer();
        };
        copied.push((t[0].clone(), t[1].clone(), at));
    }
    match delete_unchanged(ctx.node, ctx.session, &copied, ctx.now) {
        Ok(n) => Frame::Integer(i64::try_from(n).unwrap_or(i64::MAX)),
        Err(e) => store_error(&e),
    }
}

/// The end of a slot move's batch at its source (`PLIANT.DELIFEQ`, and `PLIANT.MIGRATE` once
/// the target acknowledged the batch): each `(key, value, expires_at_ms)` copied is deleted
/// here if it still has that value and expiry (one changed since stays, and is copied again),
/// and its mark as being copied ends either way. The number deleted.
pub(super) fn delete_unchanged(
    node: &crate::node::Node,
    session: &mut super::Session,
    copied: &[(Bytes, Bytes, u64)],
    now: u64,
) -> Result<u64, crate::KvError> {
    let mut deleted: Vec<Bytes> = Vec::new();
    let mut n = 0;
    {
        // No keyed command is between its routing and its end while keys leave.
        let _gate = node.cluster().map(|c| c.gate_exclusive());
        let mut ks = node.keyspace();
        // The keys were last touched a batch round trip ago: their loads, overlapped a group
        // at a time, rather than one cache miss after another.
        for group in copied.chunks(crate::keyspace::Keyspace::WARM_MAX) {
            ks.warm(group.iter().map(|t| t.0.as_ref()));
            for (k, data, at) in group {
                if ks.delete_if_unchanged(k, data, *at, now)? {
                    n += 1;
                    deleted.push(k.clone());
                }
            }
        }
    }
    // Clients tracking a key that left are told, as for any deletion (the command is keyless,
    // so the generic tracking after it does not see these keys).
    let tracking = node.tracking();
    if tracking.active() {
        let waits = tracking.wrote(session.id, deleted.iter());
        session.awaiting.extend(waits);
    }
    if let Some(c) = node.cluster() {
        c.copied(copied.iter().map(|t| t.0.as_ref()));
    }
    Ok(n)
}

/// `CLUSTER INFO`: the fields clients and redis-cli read.
/// `served`: the map version this node serves in full (`Cluster::served_version`), what a move
/// waits for; the epochs are the map's. `acted`: the newest map version this node acted on
/// (`Cluster::act_on`); a map older than it is not acted on, which `pliant_map_behind:1` says.
/// `unsettled`: the slots moving here whose moves wait for this node to drop the keys an
/// earlier move left (`Cluster::unsettled_imports`).
fn info(state: &ClusterState, me: &str, served: u64, unsettled: usize, acted: u64) -> String {
    let map = &state.map;
    let assigned = map.assigned();
    let ok = (0..SLOTS)
        .filter(|&s| map.owner(s).is_some_and(|o| state.alive(&o.id)))
        .count();
    let size = (0..map.nodes().len() as u16)
        .filter(|&i| map.slots_of(i) > 0)
        .count();
    let known = map.nodes().len()
        + state
            .members
            .iter()
            .filter(|m| map.index_of(&m.id).is_none())
            .count();
    let healthy = ok == usize::from(SLOTS);
    let mut out = String::new();
    let _ = write!(
        out,
        "cluster_enabled:1\r\ncluster_state:{}\r\ncluster_slots_assigned:{assigned}\r\ncluster_slots_ok:{ok}\r\ncluster_slots_pfail:0\r\ncluster_slots_fail:{}\r\ncluster_known_nodes:{known}\r\ncluster_size:{size}\r\ncluster_current_epoch:{v}\r\ncluster_my_epoch:{v}\r\ncluster_stats_messages_sent:0\r\ncluster_stats_messages_received:0\r\ntotal_cluster_links_buffer_limit_exceeded:0\r\npliant_map_version:{served}\r\npliant_unsettled_imports:{unsettled}\r\npliant_map_behind:{}\r\npliant_map_newest_acted:{acted}\r\npliant_migrating_slots:{}\r\npliant_myself_in_map:{}\r\n",
        if healthy { "ok" } else { "fail" },
        assigned - ok,
        u8::from(map.version() < acted),
        map.migrations().count(),
        u8::from(map.index_of(me).is_some()),
        v = map.version(),
    );
    out
}

/// `[ip, port, id, {}]`, a node as CLUSTER SLOTS lists it.
fn node_entry(addr: std::net::SocketAddr, id: &str) -> Frame {
    Frame::Array(vec![
        Frame::bulk(addr.ip().to_string()),
        Frame::Integer(i64::from(addr.port())),
        Frame::bulk(id.to_string()),
        Frame::Map(Vec::new()),
    ])
}

/// `CLUSTER SLOTS`: every range of slots with one owner.
fn slots(state: &ClusterState) -> Frame {
    let map = &state.map;
    Frame::Array(
        map.ranges()
            .into_iter()
            .map(|(a, b, o)| {
                let m = &map.nodes()[usize::from(o)];
                Frame::Array(vec![
                    Frame::Integer(i64::from(a)),
                    Frame::Integer(i64::from(b)),
                    node_entry(m.addr, &m.id),
                ])
            })
            .collect(),
    )
}

/// `CLUSTER SHARDS`: one shard per node (each is its own primary; no replicas yet).
fn shards(state: &ClusterState) -> Frame {
    let map = &state.map;
    let text = |s: &str| Frame::bulk(s.to_string());
    Frame::Array(
        map.nodes()
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let slots = map
                    .ranges_of(i as u16)
                    .into_iter()
                    .flat_map(|(a, b)| [Frame::Integer(i64::from(a)), Frame::Integer(i64::from(b))])
                    .collect();
                let health = if state.alive(&m.id) {
                    "online"
                } else {
                    "failed"
                };
                let node = Frame::Map(vec![
                    (text("id"), text(&m.id)),
                    (text("port"), Frame::Integer(i64::from(m.addr.port()))),
                    (text("ip"), text(&m.addr.ip().to_string())),
                    (text("endpoint"), text(&m.addr.ip().to_string())),
                    (text("role"), text("master")),
                    (text("replication-offset"), Frame::Integer(0)),
                    (text("health"), text(health)),
                ]);
                Frame::Map(vec![
                    (text("slots"), Frame::Array(slots)),
                    (text("nodes"), Frame::Array(vec![node])),
                ])
            })
            .collect(),
    )
}

/// `CLUSTER NODES`: Redis's line format, which redis-cli and redis-benchmark parse. The bus
/// port shown is the client port + 10000, as Redis's default, though nodes talk through the
/// coordination store rather than a bus.
fn nodes(state: &ClusterState, me: &str) -> String {
    let map = &state.map;
    let mut listed: Vec<(String, std::net::SocketAddr)> =
        map.nodes().iter().map(|m| (m.id.clone(), m.addr)).collect();
    for m in &state.members {
        if map.index_of(&m.id).is_none() {
            listed.push((m.id.clone(), m.addr));
        }
    }
    let mut out = String::new();
    for (id, addr) in listed {
        let alive = state.alive(&id);
        let flags = match (id == me, alive) {
            (true, _) => "myself,master",
            (false, true) => "master",
            (false, false) => "master,fail",
        };
        let _ = write!(
            out,
            "{id} {}:{}@{} {flags} - 0 0 {} {}",
            addr.ip(),
            addr.port(),
            u32::from(addr.port()) + 10000,
            map.version(),
            if alive { "connected" } else { "disconnected" }
        );
        if let Some(i) = map.index_of(&id) {
            for (a, b) in map.ranges_of(i) {
                if a == b {
                    let _ = write!(out, " {a}");
                } else {
                    let _ = write!(out, " {a}-{b}");
                }
            }
            for (slot, m) in map.migrations() {
                if m.from == i {
                    let _ = write!(out, " [{slot}->-{}]", map.nodes()[usize::from(m.to)].id);
                } else if m.to == i {
                    let _ = write!(out, " [{slot}-<-{}]", map.nodes()[usize::from(m.from)].id);
                }
            }
        }
        out.push('\n');
    }
    out
}
