//! Server commands: COMMAND, INFO, CONFIG GET/SET, DBSIZE, FLUSHDB/FLUSHALL, SHUTDOWN.

use std::fmt::Write as _;

use bytes::Bytes;
use pliant_proto::frame::Frame;

use super::{COMMANDS, Ctx, store_error, syntax_error};
use crate::config::Durability;
use crate::glob::glob_match;

/// `COMMAND`, `COMMAND COUNT`, `COMMAND DOCS [name…]`, `COMMAND INFO name…`: what redis-cli's
/// hints and clients that ask what a server supports read, from [`COMMANDS`] (see
/// [`super::docs`] for what is and is not given).
pub(super) fn command(_: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let name = |c: &super::Spec| Frame::Bulk(Bytes::from_static(c.name.as_bytes()));
    let info = |c: &super::Spec| {
        Frame::Array(vec![
            name(c),
            Frame::Integer(i64::from(c.arity)),
            Frame::Set(
                c.flags
                    .names()
                    .map(|f| Frame::Simple(f.to_owned()))
                    .collect(),
            ),
            Frame::Integer(c.keys.0),
            Frame::Integer(c.keys.1),
            Frame::Integer(c.keys.2),
        ])
    };
    let docs = |c: &super::Spec| (name(c), c.docs.reply());
    match args.first().map(|a| a.to_ascii_lowercase()) {
        None => Frame::Array(COMMANDS.iter().map(info).collect()),
        Some(sub) if sub == b"count" => Frame::Integer(COMMANDS.len() as i64),
        // As Redis: every command, or those named that exist.
        Some(sub) if sub == b"docs" => Frame::Map(match &args[1..] {
            [] => COMMANDS.iter().map(docs).collect(),
            names => names
                .iter()
                .filter_map(|n| super::lookup(n))
                .map(docs)
                .collect(),
        }),
        Some(sub) if sub == b"info" => Frame::Array(
            args[1..]
                .iter()
                .map(|n| super::lookup(n).map_or(Frame::NullArray, info))
                .collect(),
        ),
        Some(_) => Frame::error(format!(
            "ERR unknown subcommand '{}'. Try COMMAND HELP.",
            String::from_utf8_lossy(&args[0])
        )),
    }
}

/// Whether `INFO` with these arguments (after its name) shows `section` (lowercase). As Redis:
/// `default` (or nothing) is every section but the per-command statistics; `all` and
/// `everything` add them. The server asks it too, to walk the store before INFO keyspace.
pub(super) fn shown(args: &[Bytes], section: &str) -> bool {
    let asked = |w: &str| args.iter().any(|a| a.eq_ignore_ascii_case(w.as_bytes()));
    asked("all")
        || asked("everything")
        || ((args.is_empty() || asked("default")) && section != "commandstats")
        || asked(section)
}

/// `INFO [section…]`: Redis's sections that clients and tools read, and a `pliant` section.
pub(super) fn info(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let show = |s: &str| shown(args, s);
    let node = ctx.node;
    let now = ctx.now;
    // Counted off the keyspace lock before INFO ran, if the server could (see `Facts::walks`).
    let walked = ctx.walked_counts();
    let (stats, (mem_keys, mem_bytes), algo, capacity, has_store, keys, read_costs) = {
        let mut ks = node.keyspace();
        (
            ks.stats(),
            ks.memory(),
            ks.algorithm().to_string(),
            ks.capacity(),
            ks.has_store(),
            // With a store and nothing walked already (inside MULTI, on a tier), walks every
            // key under the lock, as DBSIZE then does: only when the section is shown.
            match walked {
                _ if !show("keyspace") => Ok((0, 0, 0)),
                Some(w) => w.map(|c| (c.live, c.expires, c.avg_ttl)),
                None => ks.expiry_counts(now),
            },
            ks.store_read_costs(),
        )
    };
    let mut out = String::new();
    if show("server") {
        let _ = write!(
            out,
            "# Server\r\nredis_version:7.2.0\r\npliant_version:{}\r\nredis_mode:{}\r\nos:{}\r\narch_bits:64\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\n\r\n",
            env!("CARGO_PKG_VERSION"),
            if node.cluster().is_some() {
                "cluster"
            } else {
                "standalone"
            },
            std::env::consts::OS,
            std::process::id(),
            node.port(),
            node.uptime().as_secs(),
        );
    }
    if show("clients") {
        let _ = write!(
            out,
            "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\n\r\n",
            node.clients(),
            node.max_clients()
        );
    }
    if show("memory") {
        let redis_algo = redis_policy(&algo);
        let _ = write!(
            out,
            "# Memory\r\nused_memory:{mem_bytes}\r\nused_memory_rss:{}\r\nmaxmemory:{}\r\nmaxmemory_policy:{redis_algo}\r\n\r\n",
            crate::node::rss_bytes().unwrap_or(0),
            match capacity {
                pliant_cache::Capacity::Bytes(b) => b,
                pliant_cache::Capacity::Keys(_) => 0,
            }
        );
    }
    if show("stats") {
        let _ = write!(
            out,
            "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\nrejected_connections:{}\r\nauth_failures:{}\r\nexpired_keys:{}\r\nevicted_keys:{}\r\nkeyspace_hits:{}\r\nkeyspace_misses:{}\r\n\r\n",
            node.connections_received(),
            node.commands_processed(),
            node.rejected_connections(),
            node.auth_failures(),
            stats.expired,
            stats.evictions,
            stats.keyspace_hits,
            stats.keyspace_misses,
        );
    }
    if show("replication") {
        // No replicas: a master with none, as a Redis without replication reports it.
        out.push_str(
            "# Replication\r\nrole:master\r\nconnected_slaves:0\r\nmaster_repl_offset:0\r\n\r\n",
        );
    }
    if show("cpu") {
        let (user, sys, cuser, csys) = crate::node::cpu_seconds().unwrap_or_default();
        let _ = write!(
            out,
            "# CPU\r\nused_cpu_sys:{sys:.6}\r\nused_cpu_user:{user:.6}\r\nused_cpu_sys_children:{csys:.6}\r\nused_cpu_user_children:{cuser:.6}\r\n\r\n"
        );
    }
    if show("commandstats") {
        out.push_str("# Commandstats\r\n");
        for (spec, s) in COMMANDS.iter().zip(node.command_stats()) {
            if s.calls + s.rejected > 0 {
                let per_call = if s.calls == 0 {
                    0.0
                } else {
                    s.usec as f64 / s.calls as f64
                };
                let _ = write!(
                    out,
                    "cmdstat_{}:calls={},usec={},usec_per_call={per_call:.2},rejected_calls={},failed_calls={}\r\n",
                    spec.name, s.calls, s.usec, s.rejected, s.failed
                );
            }
        }
        out.push_str("\r\n");
    }
    if show("persistence") {
        let _ = write!(
            out,
            "# Persistence\r\nloading:0\r\naof_enabled:{}\r\n\r\n",
            u8::from(has_store)
        );
    }
    if show("cluster") {
        let _ = write!(
            out,
            "# Cluster\r\ncluster_enabled:{}\r\n\r\n",
            u8::from(node.cluster().is_some())
        );
    }
    if show("keyspace") {
        out.push_str("# Keyspace\r\n");
        match keys {
            Ok((0, _, _)) => {}
            Ok((n, expires, avg_ttl)) => {
                let _ = write!(out, "db0:keys={n},expires={expires},avg_ttl={avg_ttl}\r\n");
            }
            Err(e) => return store_error(&e),
        }
        out.push_str("\r\n");
    }
    if show("pliant") {
        let _ = write!(
            out,
            "# Pliant\r\nalgorithm:{algo}\r\ncapacity:{capacity}\r\nmemory_keys:{mem_keys}\r\nmemory_bytes:{mem_bytes}\r\nmemory_hits:{}\r\nmemory_misses:{}\r\nstore:{}\r\ndurability:{}\r\nstore_reads:{}\r\nstore_reads_off_lock:{}\r\nstore_reads_joined:{}\r\nstore_read_usec:{:.1}\r\nstore_handoff_usec:{:.1}\r\nstore_writes:{}\r\nstore_syncs:{}\r\nparent:{}\r\nchildren:{}\r\nparent_requests:{}\r\ncoalesced:{}\r\nredundant_puts:{}\r\ninvalidated:{}\r\ntiers_cut_off:{}\r\n\r\n",
            stats.hits,
            stats.misses,
            if has_store { "fjall" } else { "none" },
            node.durability(),
            stats.store_reads,
            stats.store_reads_off_lock,
            stats.store_reads_joined,
            read_costs.0,
            read_costs.1,
            stats.store_writes,
            stats.store_syncs,
            node.parent()
                .map_or_else(|| "none".to_string(), |p| p.addr().to_string()),
            node.child_ids().join(","),
            stats.parent_requests,
            stats.coalesced,
            stats.redundant_puts,
            stats.invalidated,
            node.tracking().cut_off(),
        );
    }
    Frame::Verbatim(Bytes::from(out))
}

/// `CONFIG GET pattern…` / `CONFIG SET name value…` over the settings a running node can
/// change (capacity, durability) and those clients ask about (save, appendonly, maxmemory…).
pub(super) fn config(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let sub = args[0].to_ascii_lowercase();
    let node = ctx.node;
    match sub.as_slice() {
        b"get" if args.len() >= 2 => {
            let (capacity, algo, has_store) = {
                let ks = node.keyspace();
                (ks.capacity(), ks.algorithm().to_string(), ks.has_store())
            };
            let settings = [
                ("capacity", capacity.to_string()),
                (
                    "maxmemory",
                    match capacity {
                        pliant_cache::Capacity::Bytes(b) => b.to_string(),
                        // Unlimited, or a count of keys, which maxmemory cannot express.
                        pliant_cache::Capacity::Keys(_) => "0".to_string(),
                    },
                ),
                ("maxmemory-policy", redis_policy(&algo)),
                ("algo", algo),
                ("durability", node.durability().to_string()),
                (
                    "interval",
                    node.policy()
                        .and_then(|p| p.status().ok())
                        .map_or(String::new(), |s| format!("{}s", s.interval_s)),
                ),
                (
                    "appendonly",
                    if has_store { "yes" } else { "no" }.to_string(),
                ),
                ("appendfsync", node.durability().to_string()),
                ("save", String::new()),
                ("maxclients", node.max_clients().to_string()),
                ("proto-max-bulk-len", node.max_value_size().to_string()),
                ("databases", "1".to_string()),
            ];
            let mut out = Vec::new();
            for (name, value) in settings {
                if args[1..]
                    .iter()
                    .any(|p| glob_match(&p.to_ascii_lowercase(), name.as_bytes()))
                {
                    out.push((
                        Frame::Bulk(Bytes::from_static(name.as_bytes())),
                        Frame::Bulk(Bytes::from(value)),
                    ));
                }
            }
            Frame::Map(out)
        }
        b"set" if args.len() >= 3 && !args.len().is_multiple_of(2) => {
            for pair in args[1..].chunks_exact(2) {
                let name = String::from_utf8_lossy(&pair[0]).to_ascii_lowercase();
                let value = String::from_utf8_lossy(&pair[1]).into_owned();
                let bad = |why: String| {
                    Frame::error(format!(
                        "ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"
                    ))
                };
                match name.as_str() {
                    "capacity" => match value.parse::<pliant_cache::Capacity>() {
                        Ok(c) => {
                            if let Err(why) = node.keyspace().resize(c) {
                                return bad(why);
                            }
                        }
                        Err(e) => return bad(e.to_string()),
                    },
                    "maxmemory" => {
                        let Some(c) = maxmemory(&value) else {
                            return bad(format!(
                                "argument must be a memory value (100mb, 1gb, 1073741824; 0 for unlimited), got '{value}'"
                            ));
                        };
                        let mut ks = node.keyspace();
                        let done = if c.units() == ks.capacity().units() {
                            ks.resize(c)
                        } else {
                            // Keys to bytes or back: the algorithm is built anew in other units.
                            let algo = ks.algorithm().to_string();
                            ks.rebuild(&algo, c)
                        };
                        if let Err(why) = done {
                            return bad(why);
                        }
                    }
                    "maxmemory-policy" | "algo" => {
                        let algo = match algorithm_of(&value) {
                            Ok(a) => a,
                            Err(why) => return bad(why),
                        };
                        let mut ks = node.keyspace();
                        if ks.algorithm() != algo {
                            let capacity = ks.capacity();
                            if let Err(why) = ks.rebuild(&algo, capacity) {
                                return bad(why);
                            }
                        }
                    }
                    "interval" => match pliant_policy::parse_interval(&value) {
                        Ok(d) => match node.policy() {
                            Some(p) => p.set_interval(d),
                            None => return bad("this node runs no policy thread".into()),
                        },
                        Err(e) => return bad(e),
                    },
                    "durability" | "appendfsync" => match value.parse::<Durability>() {
                        Ok(d) => node.set_durability(d),
                        Err(e) => return bad(e),
                    },
                    _ => return bad("unknown or immutable parameter".into()),
                }
            }
            Frame::ok()
        }
        _ => Frame::error(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try CONFIG HELP.",
            String::from_utf8_lossy(&args[0])
        )),
    }
}

/// `DBSIZE`: over a store, counted by the server off the keyspace lock before it ran; where it
/// could not (queued in MULTI and run by EXEC, whose commands run back to back under its gate;
/// a tier's own store, on the leaf path), walked here under the lock, as before.
pub(super) fn dbsize(ctx: &mut Ctx<'_>, _: &[Bytes]) -> Frame {
    let n = match ctx.walked_counts() {
        Some(w) => w.map(|c| c.all),
        None => ctx.node.keyspace().len(),
    };
    match n {
        Ok(n) => Frame::Integer(n as i64),
        Err(e) => store_error(&e),
    }
}

/// `FLUSHDB`/`FLUSHALL [ASYNC|SYNC]`: both delete every key (there is one database).
pub(super) fn flush(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    match args {
        [] => {}
        [m] if m.eq_ignore_ascii_case(b"async") || m.eq_ignore_ascii_case(b"sync") => {}
        _ => return syntax_error(),
    }
    match ctx.node.keyspace().flush() {
        Ok(()) => Frame::ok(),
        Err(e) => store_error(&e),
    }
}

/// `SHUTDOWN [NOSAVE|SAVE]`: the server stops accepting, lets connections finish their
/// requests, syncs and closes the store, and exits. Redis closes the connection without a
/// reply on success; so does this (the reply is dropped with the connection).
pub(super) fn shutdown(ctx: &mut Ctx<'_>, _: &[Bytes]) -> Frame {
    ctx.session.shutdown = true;
    Frame::ok()
}

/// A `maxmemory` value as Redis reads it (`100mb` is 100 MiB, `100m` 100 MB; plain bytes; 0 is
/// unlimited), or a Pliant capacity (`64MiB`, `1000keys`, `unlimited`).
fn maxmemory(value: &str) -> Option<pliant_cache::Capacity> {
    let v = value.trim().to_ascii_lowercase();
    let digits = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (n, unit) = v.split_at(digits);
    let redis = n.parse::<u64>().ok().and_then(|n| {
        let m: u64 = match unit {
            "" | "b" => 1,
            "k" => 1000,
            "kb" => 1 << 10,
            "m" => 1000 * 1000,
            "mb" => 1 << 20,
            "g" => 1000 * 1000 * 1000,
            "gb" => 1 << 30,
            _ => return None,
        };
        n.checked_mul(m)
    });
    match redis {
        Some(0) => Some(pliant_cache::Capacity::Keys(u64::MAX)),
        Some(b) => Some(pliant_cache::Capacity::Bytes(b)),
        None => value.parse().ok(),
    }
}

/// The memory tier's algorithm for a `maxmemory-policy`: Redis's names where one of Pliant's
/// algorithms is what they name (`allkeys-lru` is `lru`, `allkeys-lfu` `lfu`), or any of
/// Pliant's algorithm specs (`s3fifo`, `sieve`, `s3fifo:small=0.2`). The others are refused by
/// name: every key may be evicted here (no `volatile-*`), no algorithm picks at random, and a
/// cache always evicts (`noeviction`: give `maxmemory 0` for no limit).
fn algorithm_of(value: &str) -> Result<String, String> {
    let v = value.trim().to_ascii_lowercase();
    match v.as_str() {
        "allkeys-lru" => return Ok("lru".into()),
        "allkeys-lfu" => return Ok("lfu".into()),
        "noeviction" => {
            return Err(
                "noeviction is not possible here: the memory tier always evicts (with a store, only its copy in memory); CONFIG SET maxmemory 0 removes the limit"
                    .into(),
            );
        }
        "allkeys-random" | "volatile-lru" | "volatile-lfu" | "volatile-random" | "volatile-ttl" => {
            return Err(format!(
                "{v} is not possible here: every key may be evicted and no algorithm picks at random; the policies are allkeys-lru, allkeys-lfu, or one of Pliant's algorithms: {}",
                pliant_cache::algorithm_names()
            ));
        }
        _ => {}
    }
    match pliant_cache::algorithm(&v) {
        Some(a) if a.needs_next_access => Err(crate::config::offline_refused(a.name)),
        // Checked by building it: its parameters too.
        Some(_) => pliant_cache::build(&v, pliant_cache::Capacity::Keys(1))
            .map(|_| v.clone())
            .map_err(|e| e.to_string()),
        None => Err(format!(
            "unknown policy '{value}': allkeys-lru, allkeys-lfu, or one of {}",
            pliant_cache::algorithm_names()
        )),
    }
}

/// The Redis name of the memory tier's algorithm where there is one (`allkeys-lru` for `lru`,
/// `allkeys-lfu` for `lfu`), else Pliant's own.
fn redis_policy(algo: &str) -> String {
    match algo {
        "lru" => "allkeys-lru".into(),
        "lfu" => "allkeys-lfu".into(),
        other => other.into(),
    }
}

/// `WAIT numreplicas timeout`: there are no replicas, so 0 at once, as Redis without replicas
/// answers (it does not wait out the timeout when none can ever acknowledge).
pub(super) fn wait(_: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    match (super::integer(&args[0]), super::integer(&args[1])) {
        (Some(_), Some(t)) if t >= 0 => Frame::Integer(0),
        (Some(_), Some(_)) => Frame::error("ERR timeout is negative"),
        _ => super::not_an_integer(),
    }
}

/// `MEMORY USAGE key [SAMPLES n]`: the bytes the key's entry takes in the memory tier (see
/// [`crate::keyspace::Keyspace::usage`]); `MEMORY HELP`.
pub(super) fn memory(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let sub = args[0].to_ascii_uppercase();
    match (sub.as_slice(), &args[1..]) {
        (b"HELP", []) => Frame::Array(
            [
                "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "USAGE <key> [SAMPLES <count>]",
                "    Return memory in bytes used by <key> and its value (its entry in the",
                "    memory tier: a header, the key, the value, the expiry, and its slot).",
                "HELP",
                "    Print this help.",
            ]
            .iter()
            .map(|l| Frame::Simple((*l).to_string()))
            .collect(),
        ),
        (b"USAGE", [key, opts @ ..]) => {
            match opts {
                [] => {}
                [s, n] if s.eq_ignore_ascii_case(b"samples") => {
                    if super::integer(n).is_none() {
                        return super::not_an_integer();
                    }
                }
                _ => return syntax_error(),
            }
            let now = ctx.now;
            match ctx.ks().usage(key, now) {
                Ok(Some(n)) => Frame::Integer(i64::try_from(n).unwrap_or(i64::MAX)),
                Ok(None) => Frame::Null,
                Err(e) => store_error(&e),
            }
        }
        _ => Frame::error(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try MEMORY HELP.",
            String::from_utf8_lossy(&args[0])
        )),
    }
}
