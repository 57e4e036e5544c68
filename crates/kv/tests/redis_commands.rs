//! Redis's transactions (MULTI/EXEC/DISCARD/WATCH), GETEX, WAIT, OBJECT, MEMORY USAGE, INFO
//! keyspace's expiries, CLIENT LIST/INFO/KILL, CLIENT TRACKING with REDIRECT, and CONFIG's
//! maxmemory settings, against an in-process node on a loopback port chosen at run time,
//! with Redis's semantics (its tests/unit/multi.tcl for transactions). Every wait is bounded.

use std::time::{Duration, Instant};

use bytes::Bytes;
use pliant_cache::Capacity;
use pliant_kv::Config;
use pliant_proto::Client;
use pliant_proto::Frame;

use super::served::{Served, cache_config, call};

fn ok() -> Frame {
    Frame::ok()
}

fn queued() -> Frame {
    Frame::Simple("QUEUED".into())
}

fn bulk(s: &str) -> Frame {
    Frame::Bulk(Bytes::copy_from_slice(s.as_bytes()))
}

fn text(f: &Frame) -> String {
    match f {
        Frame::Bulk(b) | Frame::Verbatim(b) => String::from_utf8_lossy(b).into_owned(),
        Frame::Simple(s) | Frame::Error(s) => s.clone(),
        other => format!("{other:?}"),
    }
}

fn error(f: &Frame) -> String {
    match f {
        Frame::Error(e) => e.clone(),
        other => panic!("expected an error, got {other:?}"),
    }
}

// --- transactions -------------------------------------------------------------------------

/// The bug: redis-py's `pipeline()` sends MULTI … EXEC; the node answered "unknown command
/// 'EXEC'" and had run the queued commands one by one anyway.
#[test]
fn multi_exec_queues_the_commands_and_exec_returns_their_replies() {
    let s = Served::cache();
    let mut c = s.client();
    assert_eq!(call(&mut c, &["MULTI"]), ok());
    assert_eq!(call(&mut c, &["SET", "x", "1"]), queued());
    assert_eq!(call(&mut c, &["INCR", "x"]), queued());
    // Queued, not run: another client sees nothing yet.
    assert_eq!(call(&mut s.client(), &["GET", "x"]), Frame::Null);
    assert_eq!(
        call(&mut c, &["EXEC"]),
        Frame::Array(vec![ok(), Frame::Integer(2)])
    );
    assert_eq!(call(&mut c, &["GET", "x"]), bulk("2"));
    // An empty transaction is an empty array.
    assert_eq!(call(&mut c, &["MULTI"]), ok());
    assert_eq!(call(&mut c, &["EXEC"]), Frame::Array(vec![]));
}

/// The same, pipelined in one write as client libraries send it.
#[test]
fn a_transaction_pipelined_in_one_write_gets_every_reply_in_order() {
    let s = Served::cache();
    let mut c = s.client();
    let replies = c
        .pipeline(&[
            vec![b"MULTI".as_slice()],
            vec![b"SET", b"p", b"10"],
            vec![b"INCRBY", b"p", b"5"],
            vec![b"GET", b"p"],
            vec![b"EXEC"],
            vec![b"GET", b"p"],
        ])
        .expect("replies");
    assert_eq!(
        replies,
        vec![
            ok(),
            queued(),
            queued(),
            queued(),
            Frame::Array(vec![ok(), Frame::Integer(15), bulk("15")]),
            bulk("15"),
        ]
    );
}

#[test]
fn exec_or_discard_without_multi_nested_multi_and_watch_inside_multi_are_errors() {
    let s = Served::cache();
    let mut c = s.client();
    assert_eq!(error(&call(&mut c, &["EXEC"])), "ERR EXEC without MULTI");
    assert_eq!(
        error(&call(&mut c, &["DISCARD"])),
        "ERR DISCARD without MULTI"
    );
    assert_eq!(call(&mut c, &["MULTI"]), ok());
    assert_eq!(
        error(&call(&mut c, &["MULTI"])),
        "ERR MULTI calls can not be nested"
    );
    assert_eq!(
        error(&call(&mut c, &["WATCH", "x"])),
        "ERR WATCH inside MULTI is not allowed"
    );
    // Neither flags the transaction (as in Redis).
    assert_eq!(call(&mut c, &["SET", "a", "1"]), queued());
    assert_eq!(call(&mut c, &["EXEC"]), Frame::Array(vec![ok()]));
    // DISCARD drops the queue.
    assert_eq!(call(&mut c, &["MULTI"]), ok());
    assert_eq!(call(&mut c, &["DEL", "a"]), queued());
    assert_eq!(call(&mut c, &["DISCARD"]), ok());
    assert_eq!(call(&mut c, &["GET", "a"]), bulk("1"));
}

#[test]
fn an_unknown_command_or_wrong_arity_while_queuing_makes_exec_abort_and_run_nothing() {
    let s = Served::cache();
    let mut c = s.client();
    for bad in [&["NOSUCHCOMMAND", "x"][..], &["GET"][..], &["SHUTDOWN"][..]] {
        assert_eq!(call(&mut c, &["MULTI"]), ok());
        assert_eq!(call(&mut c, &["SET", "foo1", "bar1"]), queued());
        let e = error(&call(&mut c, bad));
        assert!(e.starts_with("ERR"), "{bad:?}: {e}");
        assert_eq!(call(&mut c, &["SET", "foo2", "bar2"]), queued());
        assert_eq!(
            error(&call(&mut c, &["EXEC"])),
            "EXECABORT Transaction discarded because of previous errors."
        );
        assert_eq!(call(&mut c, &["EXISTS", "foo1", "foo2"]), Frame::Integer(0));
        // The state is cleared: the connection is out of MULTI.
        assert_eq!(call(&mut c, &["PING"]), Frame::Simple("PONG".into()));
    }
}

#[test]
fn a_runtime_error_inside_exec_is_that_command_s_reply_and_the_rest_still_run() {
    let s = Served::cache();
    let mut c = s.client();
    assert_eq!(call(&mut c, &["SET", "s", "not-a-number"]), ok());
    assert_eq!(call(&mut c, &["MULTI"]), ok());
    for cmd in [&["SET", "a", "1"][..], &["INCR", "s"], &["INCR", "a"]] {
        assert_eq!(call(&mut c, cmd), queued());
    }
    let Frame::Array(replies) = call(&mut c, &["EXEC"]) else {
        panic!("EXEC's reply is an array");
    };
    assert_eq!(replies[0], ok());
    assert!(error(&replies[1]).starts_with("ERR value is not an integer"));
    assert_eq!(replies[2], Frame::Integer(2));
}

#[test]
fn exec_returns_null_when_another_client_changed_a_watched_key() {
    let s = Served::cache();
    let (mut c, mut other) = (s.client(), s.client());
    // Not modified: runs.
    assert_eq!(call(&mut c, &["WATCH", "x", "y", "z"]), ok());
    assert_eq!(call(&mut c, &["MULTI"]), ok());
    assert_eq!(call(&mut c, &["PING"]), queued());
    assert_eq!(
        call(&mut c, &["EXEC"]),
        Frame::Array(vec![Frame::Simple("PONG".into())])
    );
    // 1 key of 5 watched modified by another client: aborted, nothing runs.
    assert_eq!(call(&mut c, &["SET", "x", "30"]), ok());
    assert_eq!(call(&mut c, &["WATCH", "a", "b", "x", "k", "z"]), ok());
    assert_eq!(call(&mut other, &["SET", "x", "40"]), ok());
    assert_eq!(call(&mut c, &["MULTI"]), ok());
    assert_eq!(call(&mut c, &["SET", "x", "50"]), queued());
    assert_eq!(call(&mut c, &["EXEC"]), Frame::NullArray);
    assert_eq!(call(&mut c, &["GET", "x"]), bulk("40"));
    // After a failed EXEC the key is no longer watched.
    assert_eq!(call(&mut other, &["SET", "x", "41"]), ok());
    assert_eq!(call(&mut c, &["MULTI"]), ok());
    assert_eq!(call(&mut c, &["PING"]), queued());
    assert_eq!(
        call(&mut c, &["EXEC"]),
        Frame::Array(vec![Frame::Simple("PONG".into())])
    );
    // EXPIRE touches the key too.
    assert_eq!(call(&mut c, &["WATCH", "x"]), ok());
    assert_eq!(call(&mut other, &["EXPIRE", "x", "100"]), Frame::Integer(1));
    assert_eq!(call(&mut c, &["MULTI"]), ok());
    assert_eq!(call(&mut c, &["EXEC"]), Frame::NullArray);
    // UNWATCH forgets, and DISCARD unwatches.
    assert_eq!(call(&mut c, &["WATCH", "x"]), ok());
    assert_eq!(call(&mut other, &["SET", "x", "1"]), ok());
    assert_eq!(call(&mut c, &["UNWATCH"]), ok());
    assert_eq!(call(&mut c, &["MULTI"]), ok());
    assert_eq!(call(&mut c, &["INCR", "x"]), queued());
    assert_eq!(
        call(&mut c, &["EXEC"]),
        Frame::Array(vec![Frame::Integer(2)])
    );
    assert_eq!(call(&mut c, &["WATCH", "x"]), ok());
    assert_eq!(call(&mut other, &["SET", "x", "10"]), ok());
    assert_eq!(call(&mut c, &["MULTI"]), ok());
    assert_eq!(call(&mut c, &["DISCARD"]), ok());
    assert_eq!(call(&mut c, &["MULTI"]), ok());
    assert_eq!(call(&mut c, &["INCR", "x"]), queued());
    assert_eq!(
        call(&mut c, &["EXEC"]),
        Frame::Array(vec![Frame::Integer(11)])
    );
    // The node forgets a closed connection's watches.
    assert_eq!(call(&mut other, &["WATCH", "w"]), ok());
    drop(other);
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.node.registry().all().len() > 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(s.node.registry().all().len(), 1);
}

#[test]
fn a_watched_key_that_expires_before_exec_aborts_it_and_one_already_stale_does_not() {
    let s = Served::cache();
    let mut c = s.client();
    // Live at WATCH, expired at EXEC (nothing has deleted it yet: no command read it).
    assert_eq!(call(&mut c, &["SET", "key", "1", "PX", "100"]), ok());
    assert_eq!(call(&mut c, &["WATCH", "key"]), ok());
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(call(&mut c, &["MULTI"]), ok());
    assert_eq!(call(&mut c, &["INCR", "key"]), queued());
    assert_eq!(call(&mut c, &["EXEC"]), Frame::NullArray);
    // Already expired at WATCH, and deleted by EXISTS after it: not a change.
    assert_eq!(call(&mut c, &["SET", "x", "foo", "PX", "1"]), ok());
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(call(&mut c, &["WATCH", "x"]), ok());
    assert_eq!(call(&mut c, &["EXISTS", "x"]), Frame::Integer(0));
    assert_eq!(call(&mut c, &["MULTI"]), ok());
    assert_eq!(call(&mut c, &["PING"]), queued());
    assert_eq!(
        call(&mut c, &["EXEC"]),
        Frame::Array(vec![Frame::Simple("PONG".into())])
    );
}

#[test]
fn flushdb_touches_the_watched_keys_that_exist_and_no_others() {
    let s = Served::cache();
    let mut c = s.client();
    for flush in ["FLUSHDB", "FLUSHALL"] {
        assert_eq!(call(&mut c, &["SET", "x", "30"]), ok());
        assert_eq!(call(&mut c, &["WATCH", "x"]), ok());
        assert_eq!(call(&mut c, &[flush]), ok());
        assert_eq!(call(&mut c, &["MULTI"]), ok());
        assert_eq!(call(&mut c, &["EXEC"]), Frame::NullArray, "{flush}");
        assert_eq!(call(&mut c, &["WATCH", "x"]), ok());
        assert_eq!(call(&mut c, &[flush]), ok());
        assert_eq!(call(&mut c, &["MULTI"]), ok());
        assert_eq!(call(&mut c, &["EXEC"]), Frame::Array(vec![]), "{flush}");
    }
}

/// Without a store an evicted key is gone: a change, as Redis's evictions are to WATCH.
#[test]
fn a_watched_key_evicted_from_a_pure_cache_aborts_exec() {
    let s = Served::start(Config {
        capacity: Capacity::Keys(2),
        ..cache_config()
    });
    let mut c = s.client();
    assert_eq!(call(&mut c, &["SET", "w", "1"]), ok());
    assert_eq!(call(&mut c, &["WATCH", "w"]), ok());
    // Two newer keys push `w`, the least recently used, out.
    assert_eq!(call(&mut c, &["SET", "a", "1"]), ok());
    assert_eq!(call(&mut c, &["SET", "b", "1"]), ok());
    assert_eq!(call(&mut c, &["MULTI"]), ok());
    assert_eq!(call(&mut c, &["PING"]), queued());
    assert_eq!(call(&mut c, &["EXEC"]), Frame::NullArray);
}

/// With a store, eviction drops only the copy in memory: the key is unchanged and EXEC runs.
#[test]
fn a_watched_key_evicted_from_memory_over_a_store_does_not_abort_exec() {
    let dir = tempfile::tempdir().expect("dir");
    let s = Served::start(Config {
        capacity: Capacity::Keys(2),
        store: Some(dir.path().join("store")),
        ..cache_config()
    });
    let mut c = s.client();
    assert_eq!(call(&mut c, &["SET", "w", "1"]), ok());
    assert_eq!(call(&mut c, &["WATCH", "w"]), ok());
    assert_eq!(call(&mut c, &["SET", "a", "1"]), ok());
    assert_eq!(call(&mut c, &["SET", "b", "1"]), ok());
    assert_eq!(call(&mut c, &["MULTI"]), ok());
    assert_eq!(call(&mut c, &["INCR", "w"]), queued());
    assert_eq!(
        call(&mut c, &["EXEC"]),
        Frame::Array(vec![Frame::Integer(2)])
    );
}

/// No other client's command runs between a transaction's commands: a reader of both counters
/// never sees one incremented without the other.
#[test]
fn no_other_client_s_command_runs_between_a_transaction_s_commands() {
    let s = Served::cache();
    let mut writer = s.client();
    let mut reader = s.client();
    assert_eq!(call(&mut writer, &["MSET", "a", "0", "b", "0"]), ok());
    let rounds = 300;
    let t = std::thread::spawn(move || {
        for _ in 0..rounds {
            let replies = writer
                .pipeline(&[
                    vec![b"MULTI".as_slice()],
                    vec![b"INCR", b"a"],
                    vec![b"INCR", b"b"],
                    vec![b"EXEC"],
                ])
                .expect("replies");
            assert!(matches!(&replies[3], Frame::Array(r) if r.len() == 2));
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = 0;
    loop {
        let Frame::Array(v) = call(&mut reader, &["MGET", "a", "b"]) else {
            panic!("MGET's reply is an array");
        };
        assert_eq!(v[0], v[1], "read between a transaction's two INCRs");
        seen += 1;
        if t.is_finished() || Instant::now() > deadline {
            break;
        }
    }
    t.join().expect("writer");
    assert!(seen > 0);
    assert_eq!(
        call(&mut reader, &["MGET", "a", "b"]),
        Frame::Array(vec![bulk("300"), bulk("300")])
    );
}

/// A client that queues forever holds at most `--max-value-size` bytes: past it the queue is
/// dropped at once and EXEC refused.
#[test]
fn a_transaction_queued_past_its_bound_is_dropped_and_exec_aborts() {
    let s = Served::start(Config {
        max_value_size: 4096,
        ..cache_config()
    });
    let mut c = s.client();
    assert_eq!(call(&mut c, &["MULTI"]), ok());
    let value = "v".repeat(1000);
    let mut refused = None;
    for i in 0..10 {
        match call(&mut c, &["SET", "k", &value]) {
            Frame::Simple(q) if q == "QUEUED" => {}
            Frame::Error(e) => {
                refused = Some((i, e));
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    let (i, e) = refused.expect("refused within 10 commands");
    assert!(
        i >= 3 && e.starts_with("ERR transaction too large"),
        "{i}: {e}"
    );
    // Still refused after that, with nothing more kept.
    assert_eq!(call(&mut c, &["SET", "k", "small"]), queued());
    assert_eq!(
        error(&call(&mut c, &["EXEC"])),
        "EXECABORT Transaction discarded because of previous errors."
    );
    assert_eq!(call(&mut c, &["EXISTS", "k"]), Frame::Integer(0));
}

/// A tier's writes go through to its parent one by one: it refuses MULTI and WATCH by name.
#[test]
fn a_tier_refuses_transactions_with_a_clear_error() {
    let parent = Served::cache();
    let tier = Served::start(Config {
        parent: Some(parent.addr),
        ..cache_config()
    });
    let mut c = tier.client();
    for cmd in [&["MULTI"][..], &["WATCH", "x"]] {
        let e = error(&call(&mut c, cmd));
        assert!(
            e.contains("not supported on a tier (--parent)"),
            "{cmd:?}: {e}"
        );
    }
    assert_eq!(call(&mut c, &["SET", "x", "1"]), ok());
    assert_eq!(call(&mut c, &["GET", "x"]), bulk("1"));
}

// --- INFO, GETEX, WAIT, OBJECT, MEMORY ----------------------------------------------------

/// The bug: INFO keyspace said `expires=0` for 10,000 keys set with `EX 3600`.
#[test]
fn info_keyspace_counts_the_keys_with_an_expiry() {
    let dir = tempfile::tempdir().expect("dir");
    for store in [None, Some(dir.path().join("store"))] {
        let s = Served::start(Config {
            store: store.clone(),
            ..cache_config()
        });
        let mut c = s.client();
        let keys: Vec<String> = (0..10_000).map(|i| format!("k{i}")).collect();
        for chunk in keys.chunks(500) {
            let cmds: Vec<Vec<&[u8]>> = chunk
                .iter()
                .map(|k| vec![b"SET".as_slice(), k.as_bytes(), b"v", b"EX", b"3600"])
                .collect();
            c.pipeline(&cmds).expect("replies");
        }
        assert_eq!(call(&mut c, &["SET", "forever", "v"]), ok());
        let info = text(&call(&mut c, &["INFO", "keyspace"]));
        let line = info
            .lines()
            .find(|l| l.starts_with("db0:"))
            .unwrap_or_else(|| panic!("{info}"));
        let (keys, rest) = line
            .strip_prefix("db0:keys=10001,expires=10000,avg_ttl=")
            .map(|r| ("ok", r))
            .unwrap_or_else(|| panic!("store {store:?}: {line}"));
        let avg: u64 = rest.parse().expect("avg_ttl");
        assert!(
            keys == "ok" && (3_500_000..=3_600_000).contains(&avg),
            "{line}"
        );
        // Overwritten without an expiry, deleted, persisted, expired: each counted out.
        assert_eq!(call(&mut c, &["SET", "k0", "v"]), ok());
        assert_eq!(call(&mut c, &["DEL", "k1"]), Frame::Integer(1));
        assert_eq!(call(&mut c, &["PERSIST", "k2"]), Frame::Integer(1));
        assert_eq!(call(&mut c, &["GETEX", "k3", "PXAT", "1"]), bulk("v"));
        assert_eq!(call(&mut c, &["SET", "k4", "w", "EX", "10"]), ok());
        let info = text(&call(&mut c, &["INFO", "keyspace"]));
        assert!(
            info.contains("db0:keys=9999,expires=9996,avg_ttl="),
            "store {store:?}: {info}"
        );
    }
}

/// Redis's expire.tcl, "… with big integer …": `SET foo bar EX 10000000000000000` was taken and
/// PTTL then said -8446744073709551641; EXPIRE and PEXPIRE past the end of a signed 64-bit
/// millisecond clock were taken too.
#[test]
fn an_expiry_past_a_64_bit_millisecond_clock_is_refused() {
    let s = Served::cache();
    let mut c = s.client();
    assert_eq!(call(&mut c, &["SET", "foo", "bar"]), ok());
    for (args, name) in [
        (&["SET", "foo", "bar", "EX", "10000000000000000"][..], "set"),
        (&["GETEX", "foo", "EX", "10000000000000000"], "getex"),
        (&["EXPIRE", "foo", "9223370399119966"], "expire"),
        (&["PEXPIRE", "foo", "9223372036854770000"], "pexpire"),
    ] {
        assert_eq!(
            call(&mut c, args),
            Frame::error(format!("ERR invalid expire time in '{name}' command")),
            "{args:?}"
        );
    }
    assert_eq!(
        call(&mut c, &["PTTL", "foo"]),
        Frame::Integer(-1),
        "left as it was"
    );
}

/// Redis's expire.tcl, "EXPIRE with LT and XX option …", "… conflicting options …": EXPIRE took
/// one option at most and answered a syntax error to two.
#[test]
fn expire_takes_its_options_together_and_names_the_conflicts() {
    let s = Served::cache();
    let mut c = s.client();
    assert_eq!(call(&mut c, &["SET", "foo", "bar"]), ok());
    // XX with LT on a key without a TTL: XX fails.
    assert_eq!(
        call(&mut c, &["EXPIRE", "foo", "200", "XX", "LT"]),
        Frame::Integer(0)
    );
    assert_eq!(call(&mut c, &["EXPIRE", "foo", "200"]), Frame::Integer(1));
    assert_eq!(
        call(&mut c, &["EXPIRE", "foo", "100", "XX", "LT"]),
        Frame::Integer(1)
    );
    assert_eq!(call(&mut c, &["TTL", "foo"]), Frame::Integer(100));
    assert_eq!(
        call(&mut c, &["EXPIRE", "foo", "300", "XX", "LT"]),
        Frame::Integer(0)
    );
    let nx = "ERR NX and XX, GT or LT options at the same time are not compatible";
    for (args, want) in [
        (
            &["EXPIRE", "foo", "200", "LT", "GT"][..],
            "ERR GT and LT options at the same time are not compatible",
        ),
        (&["EXPIRE", "foo", "200", "NX", "GT"], nx),
        (&["EXPIRE", "foo", "200", "NX", "LT"], nx),
        (&["EXPIRE", "foo", "200", "NX", "XX"], nx),
        (&["EXPIRE", "foo", "200", "AB"], "ERR Unsupported option AB"),
        (
            &["EXPIRE", "foo", "200", "XX", "AB"],
            "ERR Unsupported option AB",
        ),
    ] {
        assert_eq!(call(&mut c, args), Frame::error(want), "{args:?}");
    }
}

#[test]
fn getex_reads_the_value_and_changes_its_expiry_as_told() {
    let s = Served::cache();
    let mut c = s.client();
    assert_eq!(call(&mut c, &["GETEX", "missing"]), Frame::Null);
    assert_eq!(call(&mut c, &["SET", "k", "v"]), ok());
    assert_eq!(call(&mut c, &["GETEX", "k"]), bulk("v"));
    assert_eq!(call(&mut c, &["TTL", "k"]), Frame::Integer(-1));
    assert_eq!(call(&mut c, &["GETEX", "k", "EX", "100"]), bulk("v"));
    assert_eq!(call(&mut c, &["TTL", "k"]), Frame::Integer(100));
    assert_eq!(call(&mut c, &["GETEX", "k", "PX", "50000"]), bulk("v"));
    assert_eq!(call(&mut c, &["TTL", "k"]), Frame::Integer(50));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let at = (now + 200).to_string();
    assert_eq!(call(&mut c, &["GETEX", "k", "EXAT", &at]), bulk("v"));
    let ttl = call(&mut c, &["TTL", "k"]);
    assert!(
        matches!(ttl, Frame::Integer(t) if (198..=200).contains(&t)),
        "{ttl:?}"
    );
    let at_ms = ((now + 300) * 1000).to_string();
    assert_eq!(call(&mut c, &["GETEX", "k", "PXAT", &at_ms]), bulk("v"));
    let ttl = call(&mut c, &["TTL", "k"]);
    assert!(
        matches!(ttl, Frame::Integer(t) if (298..=300).contains(&t)),
        "{ttl:?}"
    );
    assert_eq!(call(&mut c, &["GETEX", "k", "PERSIST"]), bulk("v"));
    assert_eq!(call(&mut c, &["TTL", "k"]), Frame::Integer(-1));
    // A time in the past deletes the key after reading it.
    assert_eq!(call(&mut c, &["GETEX", "k", "PXAT", "1"]), bulk("v"));
    assert_eq!(call(&mut c, &["EXISTS", "k"]), Frame::Integer(0));
    assert_eq!(call(&mut c, &["SET", "k", "v"]), ok());
    for (args, want) in [
        (
            &["GETEX", "k", "EX", "0"][..],
            "ERR invalid expire time in 'getex' command",
        ),
        (
            &["GETEX", "k", "EX", "x"],
            "ERR value is not an integer or out of range",
        ),
        (&["GETEX", "k", "EX"], "ERR syntax error"),
        (&["GETEX", "k", "PERSIST", "EX", "1"], "ERR syntax error"),
        (&["GETEX", "k", "NOPE"], "ERR syntax error"),
    ] {
        assert_eq!(error(&call(&mut c, args)), want, "{args:?}");
    }
}

#[test]
fn wait_answers_zero_replicas_object_and_memory_usage_describe_the_entry() {
    let s = Served::cache();
    let mut c = s.client();
    assert_eq!(call(&mut c, &["SET", "k", "v"]), ok());
    assert_eq!(call(&mut c, &["WAIT", "1", "0"]), Frame::Integer(0));
    assert_eq!(call(&mut c, &["WAIT", "0", "100"]), Frame::Integer(0));
    assert!(error(&call(&mut c, &["WAIT", "1", "-1"])).contains("negative"));
    for (value, encoding) in [
        ("12345", "int"),
        ("-7", "int"),
        ("007", "embstr"),
        ("hello", "embstr"),
        (&*"x".repeat(44), "embstr"),
        (&*"x".repeat(45), "raw"),
    ] {
        assert_eq!(call(&mut c, &["SET", "e", value]), ok());
        assert_eq!(
            call(&mut c, &["OBJECT", "ENCODING", "e"]),
            bulk(encoding),
            "{value}"
        );
    }
    assert_eq!(
        call(&mut c, &["OBJECT", "REFCOUNT", "e"]),
        Frame::Integer(1)
    );
    assert_eq!(
        call(&mut c, &["OBJECT", "ENCODING", "missing"]),
        Frame::Null
    );
    assert!(error(&call(&mut c, &["OBJECT", "FREQ", "e"])).contains("FREQ is not kept"));
    assert!(error(&call(&mut c, &["OBJECT", "IDLETIME", "e"])).contains("IDLETIME is not kept"));
    assert!(matches!(call(&mut c, &["OBJECT", "HELP"]), Frame::Array(l) if l.len() > 4));
    // A one-byte header, the key, the value; then the 16-byte slot pointing to it.
    assert_eq!(call(&mut c, &["SET", "key", "value"]), ok());
    assert_eq!(
        call(&mut c, &["MEMORY", "USAGE", "key"]),
        Frame::Integer(1 + 3 + 5 + 16)
    );
    // An expiry adds its 8 bytes.
    assert_eq!(call(&mut c, &["EXPIRE", "key", "100"]), Frame::Integer(1));
    assert_eq!(
        call(&mut c, &["MEMORY", "USAGE", "key", "SAMPLES", "5"]),
        Frame::Integer(1 + 3 + 5 + 8 + 16)
    );
    assert_eq!(call(&mut c, &["MEMORY", "USAGE", "missing"]), Frame::Null);
}

// --- CLIENT LIST / INFO / KILL --------------------------------------------------------------

fn field<'a>(line: &'a str, name: &str) -> &'a str {
    line.split(' ')
        .find_map(|f| f.strip_prefix(name).and_then(|r| r.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {name} in {line}"))
}

fn id(c: &mut Client) -> u64 {
    match call(c, &["CLIENT", "ID"]) {
        Frame::Integer(n) => n as u64,
        other => panic!("{other:?}"),
    }
}

#[test]
fn client_list_and_info_describe_every_connection_in_redis_s_format() {
    let s = Served::cache();
    let (mut a, mut b) = (s.client(), s.client());
    assert_eq!(call(&mut a, &["CLIENT", "SETNAME", "alpha"]), ok());
    assert_eq!(call(&mut b, &["MULTI"]), ok());
    let list = text(&call(&mut a, &["CLIENT", "LIST"]));
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 2, "{list}");
    // b is in MULTI (its CLIENT ID would be queued): its line is the one not named alpha.
    let ia = id(&mut a);
    let ib: u64 = lines
        .iter()
        .find(|l| field(l, "name") != "alpha")
        .map(|l| field(l, "id").parse().expect("id"))
        .expect("b");
    let la = lines
        .iter()
        .find(|l| field(l, "name") == "alpha")
        .expect("a");
    assert_eq!(field(la, "id"), ia.to_string());
    assert!(field(la, "addr").starts_with("127.0.0.1:"));
    assert_eq!(field(la, "laddr"), s.addr.to_string());
    assert_eq!(field(la, "flags"), "N");
    assert_eq!(field(la, "db"), "0");
    assert_eq!(field(la, "user"), "default");
    assert_eq!(field(la, "resp"), "2");
    assert_eq!(field(la, "cmd"), "client");
    let lb = lines
        .iter()
        .find(|l| field(l, "id") == ib.to_string())
        .expect("b");
    assert_eq!(field(lb, "flags"), "x");
    assert_eq!(field(lb, "multi"), "0");
    // Every field Redis 7 gives, in its order.
    let names: Vec<&str> = la
        .split(' ')
        .map(|f| f.split('=').next().unwrap_or(""))
        .collect();
    assert_eq!(
        names,
        [
            "id",
            "addr",
            "laddr",
            "fd",
            "name",
            "age",
            "idle",
            "flags",
            "db",
            "sub",
            "psub",
            "ssub",
            "multi",
            "watch",
            "qbuf",
            "qbuf-free",
            "argv-mem",
            "multi-mem",
            "rbs",
            "rbp",
            "obl",
            "oll",
            "omem",
            "tot-mem",
            "events",
            "cmd",
            "user",
            "redir",
            "resp"
        ]
    );
    let only_b = text(&call(&mut a, &["CLIENT", "LIST", "ID", &ib.to_string()]));
    assert_eq!(only_b.lines().count(), 1);
    assert_eq!(field(only_b.trim_end(), "id"), ib.to_string());
    let info = text(&call(&mut a, &["CLIENT", "INFO"]));
    assert_eq!(field(info.trim_end(), "id"), ia.to_string());
    assert_eq!(field(info.trim_end(), "name"), "alpha");
    assert!(
        error(&call(&mut a, &["CLIENT", "LIST", "TYPE", "nope"])).contains("Unknown client type")
    );
    let long = "n".repeat(513);
    assert!(error(&call(&mut a, &["CLIENT", "SETNAME", &long])).contains("limited to 512"));
}

/// A connection that is `CLIENT ID`'s `N` on `s`, opened raw so that nothing is sent on it
/// afterwards: `(stream, N)`.
fn idle_connection(s: &Served) -> (std::net::TcpStream, u64) {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(s.addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    c.write_all(b"*2\r\n$6\r\nCLIENT\r\n$2\r\nID\r\n")
        .expect("send");
    let mut reply = Vec::new();
    let mut byte = [0u8; 1];
    // ":N\r\n", at most 32 bytes.
    while !reply.ends_with(b"\r\n") && reply.len() < 32 {
        c.read_exact(&mut byte).expect("CLIENT ID's reply");
        reply.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&reply);
    let id = text
        .trim()
        .strip_prefix(':')
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("CLIENT ID answered {text:?}"));
    (c, id)
}

/// The bug this guards against: a connection waiting for a request is closed by CLIENT KILL
/// only if the kill wakes it; one killed while idle must not linger until it sends something.
#[test]
fn client_kill_closes_an_idle_connection_without_waiting_for_its_next_request() {
    let s = Served::cache();
    let mut admin = s.client();
    let (mut idle, vid) = idle_connection(&s);
    assert_eq!(
        call(&mut admin, &["CLIENT", "KILL", "ID", &vid.to_string()]),
        Frame::Integer(1)
    );
    // Fails after 10 s with no close.
    let left = pliant_testdata::wire::read_until_closed(&mut idle);
    assert_eq!(left, "", "nothing is sent to a killed connection");
}

/// The same at SHUTDOWN: an idle connection is closed at once, not after the 5 s the node gives
/// connections to finish what they have read.
#[test]
fn an_idle_connection_is_closed_as_soon_as_the_node_stops() {
    let s = Served::cache();
    let (mut idle, _) = idle_connection(&s);
    let started = Instant::now();
    s.node.shut_down();
    let left = pliant_testdata::wire::read_until_closed(&mut idle);
    assert_eq!(left, "");
    // Woken, it closes within milliseconds; not woken, it would be closed by the drain's end
    // at 5 s. Half of that leaves room for a loaded machine.
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "closed after {:?}",
        started.elapsed()
    );
}

/// GET's calls so far (INFO commandstats).
fn get_calls(admin: &mut Client) -> u64 {
    text(&call(admin, &["INFO", "commandstats"]))
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_get:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().expect("a count"))
}

/// Sets `big` to `len` bytes through `admin`, then sends `n` GETs of it on a new connection in
/// one write and reads nothing back; waits (polling every 50 ms, at most 10 s) until the GETs
/// run stop growing for half a second. The connection, its id, the value and how many ran.
fn unread_gets(
    s: &Served,
    admin: &mut Client,
    len: usize,
    n: usize,
) -> (std::net::TcpStream, u64, Vec<u8>, u64) {
    use std::io::Write;
    let value = vec![b'v'; len];
    let set: [&[u8]; 3] = [b"SET", b"big", &value];
    assert_eq!(admin.call(&set).expect("reply"), ok());
    let (mut c, id) = idle_connection(s);
    c.write_all(&b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n".repeat(n))
        .expect("send");
    let started = Instant::now();
    let (mut last, mut since) = (get_calls(admin), Instant::now());
    while since.elapsed() < Duration::from_millis(500) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "GETs still running"
        );
        std::thread::sleep(Duration::from_millis(50));
        let now = get_calls(admin);
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    (c, id, value, last)
}

/// The bug: a client that pipelined reads of a large value and read nothing back had the node
/// run them all and hold every reply at once (400 GETs of 256 KiB: 100 MiB for one
/// connection, any local user's on a loopback node without a password). Now the requests past
/// 1 MiB of replies wait until those are written: the node runs only as many as the socket's
/// buffers take, and every reply still comes, whole and in order, once the client reads.
#[test]
fn a_client_that_reads_none_of_its_pipelined_replies_holds_a_bounded_share_of_them() {
    use std::io::Read;
    const GETS: usize = 400;
    const LEN: usize = 256 * 1024;
    let s = Served::cache();
    let mut admin = s.client();
    let (mut c, _, value, ran) = unread_gets(&s, &mut admin, LEN, GETS);
    // Loopback's buffers take some 10 MiB here (40 replies); the bound, 1 MiB more.
    assert!(
        ran < GETS as u64 / 2,
        "{ran} of {GETS} GETs ran while their replies went unread"
    );
    let mut reply = format!("${LEN}\r\n").into_bytes();
    reply.extend_from_slice(&value);
    reply.extend_from_slice(b"\r\n");
    let mut got = vec![0u8; reply.len()];
    for i in 0..GETS {
        c.read_exact(&mut got)
            .unwrap_or_else(|e| panic!("reply {i} of {GETS}: {e}"));
        assert!(got == reply, "reply {i} of {GETS} is not the value");
    }
}

/// CLIENT KILL closes a connection whose writes of replies are held by a client that reads
/// none of them (it waited for the client before, for ever).
#[test]
fn client_kill_closes_a_connection_held_by_replies_it_cannot_send() {
    let s = Served::cache();
    let mut admin = s.client();
    let (_c, id, _, ran) = unread_gets(&s, &mut admin, 256 * 1024, 400);
    assert!(ran > 0, "the GETs ran");
    assert_eq!(s.node.clients(), 2, "the admin and the one not reading");
    assert_eq!(
        call(&mut admin, &["CLIENT", "KILL", "ID", &id.to_string()]),
        Frame::Integer(1)
    );
    let started = Instant::now();
    while s.node.clients() > 1 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{} connections open 10 s after the kill",
            s.node.clients()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn client_kill_closes_the_connections_its_filters_match_and_skips_the_caller() {
    let s = Served::cache();
    let mut admin = s.client();
    let mut victim = s.client();
    let mut bystander = s.client();
    let vid = id(&mut victim);
    let me = id(&mut admin);
    // By id.
    assert_eq!(
        call(&mut admin, &["CLIENT", "KILL", "ID", &vid.to_string()]),
        Frame::Integer(1)
    );
    assert!(
        victim.call(&[b"PING"]).is_err(),
        "the killed connection is closed"
    );
    assert_eq!(
        call(&mut bystander, &["PING"]),
        Frame::Simple("PONG".into())
    );
    // By address, the old form.
    let list = text(&call(&mut admin, &["CLIENT", "LIST"]));
    let baddr = list
        .lines()
        .find(|l| field(l, "id") != me.to_string())
        .map(|l| field(l, "addr").to_string())
        .expect("bystander");
    assert_eq!(call(&mut admin, &["CLIENT", "KILL", &baddr]), ok());
    assert_eq!(
        error(&call(&mut admin, &["CLIENT", "KILL", &baddr])),
        "ERR No such client"
    );
    assert!(bystander.call(&[b"PING"]).is_err());
    // LADDR matches every connection, the caller's skipped (SKIPME yes by default).
    let mut other = s.client();
    // Served (so registered) before the kill.
    assert_eq!(call(&mut other, &["PING"]), Frame::Simple("PONG".into()));
    assert_eq!(
        call(
            &mut admin,
            &["CLIENT", "KILL", "LADDR", &s.addr.to_string()]
        ),
        Frame::Integer(1)
    );
    assert!(other.call(&[b"PING"]).is_err());
    assert_eq!(
        error(&call(&mut admin, &["CLIENT", "KILL", "USER", "nobody"])),
        "ERR No such user 'nobody'"
    );
    assert_eq!(
        error(&call(&mut admin, &["CLIENT", "KILL", "ID", "0"])),
        "ERR client-id should be greater than 0"
    );
    // SKIPME no: the caller too, after its reply.
    assert_eq!(
        call(
            &mut admin,
            &["CLIENT", "KILL", "USER", "default", "SKIPME", "no"]
        ),
        Frame::Integer(1)
    );
    assert!(admin.call(&[b"PING"]).is_err());
}

/// With a password, CLIENT (LIST, KILL) is out of reach before AUTH.
#[test]
fn client_list_and_kill_need_authentication_when_a_password_is_set() {
    let s = Served::start(Config {
        requirepass: Some("s3cret".into()),
        ..cache_config()
    });
    let mut stranger = s.client();
    let mut admin = Client::connect(&s.addr.to_string(), Some("s3cret")).expect("auth");
    for cmd in [
        &["CLIENT", "LIST"][..],
        &["CLIENT", "KILL", "LADDR", &s.addr.to_string()],
    ] {
        assert!(
            error(&call(&mut stranger, cmd)).starts_with("NOAUTH"),
            "{cmd:?}"
        );
    }
    assert_eq!(
        text(&call(&mut admin, &["CLIENT", "LIST"])).lines().count(),
        2
    );
}

// --- CLIENT TRACKING REDIRECT ---------------------------------------------------------------

/// RESP2 clients' client-side caching: invalidations go to another connection, subscribed to
/// `__redis__:invalidate`.
#[test]
fn client_tracking_redirect_publishes_invalidations_to_the_subscribed_connection() {
    let s = Served::cache();
    let mut sub = s.client();
    let mut reader = s.client();
    let mut writer = s.client();
    let sid = id(&mut sub);
    assert_eq!(
        call(&mut sub, &["SUBSCRIBE", "__redis__:invalidate"]),
        Frame::Array(vec![
            bulk("subscribe"),
            bulk("__redis__:invalidate"),
            Frame::Integer(1)
        ])
    );
    // A subscribed RESP2 connection takes only (UN)SUBSCRIBE, PING and QUIT.
    assert!(error(&call(&mut sub, &["GET", "k"])).contains("only (P|S)SUBSCRIBE"));
    assert_eq!(
        call(&mut sub, &["PING"]),
        Frame::Array(vec![bulk("pong"), bulk("")])
    );
    assert_eq!(
        call(
            &mut reader,
            &["CLIENT", "TRACKING", "ON", "REDIRECT", &sid.to_string()]
        ),
        ok()
    );
    assert_eq!(call(&mut writer, &["SET", "k", "1"]), ok());
    assert_eq!(call(&mut reader, &["GET", "k"]), bulk("1"));
    assert_eq!(call(&mut writer, &["SET", "k", "2"]), ok());
    assert_eq!(
        sub.read().expect("message"),
        Frame::Array(vec![
            bulk("message"),
            bulk("__redis__:invalidate"),
            Frame::Array(vec![bulk("k")]),
        ])
    );
    let list = text(&call(&mut writer, &["CLIENT", "LIST"]));
    let rl = list
        .lines()
        .find(|l| field(l, "redir") == sid.to_string())
        .expect("tracker");
    assert_eq!(field(rl, "flags"), "t");
    assert!(
        error(&call(
            &mut reader,
            &["CLIENT", "TRACKING", "ON", "REDIRECT", "999999"]
        ))
        .contains("does not exist")
    );
    assert!(error(&call(&mut sub, &["SUBSCRIBE", "news"])).contains("no PUBLISH"));
    assert_eq!(
        call(&mut sub, &["UNSUBSCRIBE"]),
        Frame::Array(vec![
            bulk("unsubscribe"),
            bulk("__redis__:invalidate"),
            Frame::Integer(0)
        ])
    );
    assert_eq!(call(&mut sub, &["GET", "k"]), bulk("2"));
}

// --- CONFIG maxmemory -----------------------------------------------------------------------

fn config_get(c: &mut Client, pattern: &str) -> Vec<(String, String)> {
    match call(c, &["CONFIG", "GET", pattern]) {
        Frame::Array(v) => v.chunks(2).map(|p| (text(&p[0]), text(&p[1]))).collect(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn config_maxmemory_and_its_policy_map_to_the_memory_tier() {
    let s = Served::cache();
    let mut c = s.client();
    assert_eq!(
        config_get(&mut c, "maxmemory*"),
        [
            ("maxmemory".to_string(), "0".to_string()),
            ("maxmemory-policy".to_string(), "allkeys-lru".to_string()),
        ]
    );
    for i in 0..100 {
        assert_eq!(
            call(&mut c, &["SET", &format!("k{i}"), &"v".repeat(100)]),
            ok()
        );
    }
    // Unlimited counted keys; 4kb is bytes: the algorithm is rebuilt in bytes and evicts.
    assert_eq!(call(&mut c, &["CONFIG", "SET", "maxmemory", "4kb"]), ok());
    assert_eq!(config_get(&mut c, "maxmemory")[0].1, "4096");
    assert_eq!(
        config_get(&mut c, "capacity")[0].1,
        Capacity::Bytes(4096).to_string()
    );
    let Frame::Integer(n) = call(&mut c, &["DBSIZE"]) else {
        panic!("DBSIZE");
    };
    assert!(n > 0 && n <= 4096 / 102, "{n} keys in 4 KiB");
    for (policy, algo) in [
        ("allkeys-lfu", "lfu"),
        ("s3fifo", "s3fifo"),
        ("allkeys-lru", "lru"),
    ] {
        assert_eq!(
            call(&mut c, &["CONFIG", "SET", "maxmemory-policy", policy]),
            ok()
        );
        assert_eq!(config_get(&mut c, "algo")[0].1, algo);
        assert_eq!(
            call(&mut c, &["DBSIZE"]),
            Frame::Integer(n),
            "{policy} kept the keys"
        );
    }
    assert_eq!(config_get(&mut c, "maxmemory-policy")[0].1, "allkeys-lru");
    for (bad, why) in [
        ("volatile-lru", "every key may be evicted"),
        ("noeviction", "always evicts"),
        ("belady", "offline algorithm"),
        ("nope", "unknown policy"),
    ] {
        let e = error(&call(&mut c, &["CONFIG", "SET", "maxmemory-policy", bad]));
        assert!(e.contains(why), "{bad}: {e}");
    }
    let e = error(&call(&mut c, &["CONFIG", "SET", "maxmemory", "lots"]));
    assert!(e.contains("memory value"), "{e}");
    // 0 is unlimited again.
    assert_eq!(call(&mut c, &["CONFIG", "SET", "maxmemory", "0"]), ok());
    assert_eq!(config_get(&mut c, "capacity")[0].1, "unlimited");
}

/// Redis's INFO sections as its `info-command` tests read them: `default` (or nothing) without
/// the per-command statistics, `all` with them; CPU and replication in both.
#[test]
fn info_default_has_cpu_and_replication_and_all_adds_the_command_statistics() {
    let s = Served::cache();
    let mut c = s.client();
    assert_eq!(call(&mut c, &["SET", "k", "text"]), ok());
    assert!(error(&call(&mut c, &["INCR", "k"])).starts_with("ERR"));
    assert!(error(&call(&mut c, &["GET"])).starts_with("ERR wrong number"));
    for args in [&["INFO"][..], &["INFO", "default"]] {
        let info = text(&call(&mut c, args));
        for want in [
            "used_cpu_user:",
            "used_cpu_sys:",
            "master_repl_offset:0",
            "used_memory:",
        ] {
            assert!(info.contains(want), "{args:?} lacks {want}");
        }
        assert!(!info.contains("rejected_calls"), "{args:?}");
    }
    for args in [
        &["INFO", "all"][..],
        &["INFO", "everything"],
        &["INFO", "commandSTATS"],
    ] {
        let info = text(&call(&mut c, args));
        let line = |name: &str| {
            info.lines()
                .find(|l| l.starts_with(&format!("cmdstat_{name}:")))
                .unwrap_or_else(|| panic!("{args:?}: no cmdstat_{name} in {info}"))
                .to_string()
        };
        assert!(
            line("set").starts_with("cmdstat_set:calls=1,usec="),
            "{}",
            line("set")
        );
        assert!(
            line("incr").ends_with("rejected_calls=0,failed_calls=1"),
            "{}",
            line("incr")
        );
        assert!(
            line("get").ends_with("rejected_calls=1,failed_calls=0"),
            "{}",
            line("get")
        );
    }
    let cpu = text(&call(&mut c, &["INFO", "cpu"]));
    assert!(
        cpu.contains("used_cpu_user:") && !cpu.contains("used_memory"),
        "{cpu}"
    );
}

/// Expired keys used to stay in a pure cache's memory (and DBSIZE) until something read them:
/// Redis's multi.tcl waits for DBSIZE 0 after a TTL ends. The once-a-second sweep deletes them.
#[test]
fn expired_keys_leave_memory_without_being_read() {
    let s = Served::cache();
    let mut c = s.client();
    let keys: Vec<String> = (0..1000).map(|i| format!("t{i}")).collect();
    let cmds: Vec<Vec<&[u8]>> = keys
        .iter()
        .map(|k| vec![b"SET".as_slice(), k.as_bytes(), b"v", b"PX", b"200"])
        .collect();
    c.pipeline(&cmds).expect("replies");
    assert_eq!(call(&mut c, &["SET", "stays", "v"]), ok());
    assert_eq!(call(&mut c, &["DBSIZE"]), Frame::Integer(1001));
    let deadline = Instant::now() + Duration::from_secs(10);
    while call(&mut c, &["DBSIZE"]) != Frame::Integer(1) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(call(&mut c, &["DBSIZE"]), Frame::Integer(1));
    let info = text(&call(&mut c, &["INFO", "stats"]));
    assert!(info.contains("expired_keys:1000"), "{info}");
    assert!(!text(&call(&mut c, &["INFO", "keyspace"])).contains("expires=1,"));
}

/// The watched keys were a list searched for each new key: one WATCH of 100,000 keys took
/// their square (5·10⁹ comparisons). A map makes it linear.
#[test]
fn one_watch_of_100k_keys_takes_linear_time() {
    let s = Served::cache();
    let mut c = s.client();
    let keys: Vec<String> = (0..100_000).map(|i| format!("w{i}")).collect();
    let mut args: Vec<&[u8]> = vec![b"WATCH"];
    args.extend(keys.iter().map(|k| k.as_bytes()));
    let started = Instant::now();
    assert_eq!(c.call(&args).expect("reply"), ok());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let list = text(&call(&mut c, &["CLIENT", "INFO"]));
    assert_eq!(field(list.trim_end(), "watch"), "100000");
    assert_eq!(call(&mut s.client(), &["SET", "w99999", "x"]), ok());
    assert_eq!(call(&mut c, &["MULTI"]), ok());
    assert_eq!(call(&mut c, &["EXEC"]), Frame::NullArray);
}

/// A pure cache whose byte capacity is below an entry acknowledged its write and held it
/// nowhere; Redis answers -OOM. Inside a transaction: refused while queuing, and at EXEC the
/// whole transaction aborts (Redis's multi.tcl "DISCARD should not fail during OOM", "EXEC with
/// at least one use-memory command should fail").
#[test]
fn a_write_a_pure_cache_can_hold_nowhere_is_refused_with_oom() {
    let s = Served::cache();
    let (mut c, mut admin) = (s.client(), s.client());
    assert_eq!(call(&mut c, &["SET", "x", "value"]), ok());
    assert_eq!(call(&mut admin, &["CONFIG", "SET", "maxmemory", "4"]), ok());
    let oom = "OOM command not allowed when used memory > 'maxmemory'.";
    assert_eq!(error(&call(&mut c, &["SET", "big", "value"])), oom);
    assert_eq!(call(&mut c, &["EXISTS", "big"]), Frame::Integer(0));
    // Fits: stored (and evicts what does not fit beside it).
    assert_eq!(call(&mut c, &["SET", "k", "v"]), ok());
    assert_eq!(call(&mut c, &["GET", "k"]), bulk("v"));
    // While queuing: -OOM, and the transaction is flagged.
    assert_eq!(call(&mut c, &["MULTI"]), ok());
    assert_eq!(error(&call(&mut c, &["SET", "big", "value"])), oom);
    assert_eq!(call(&mut c, &["DISCARD"]), ok());
    // At EXEC: queued while it fitted, refused whole once it no longer does.
    assert_eq!(call(&mut admin, &["CONFIG", "SET", "maxmemory", "0"]), ok());
    assert_eq!(call(&mut c, &["MULTI"]), ok());
    assert_eq!(call(&mut c, &["SET", "a", "1"]), queued());
    assert_eq!(call(&mut c, &["SET", "big", "value"]), queued());
    assert_eq!(call(&mut admin, &["CONFIG", "SET", "maxmemory", "4"]), ok());
    let e = error(&call(&mut c, &["EXEC"]));
    assert!(e.starts_with("EXECABORT") && e.contains("-OOM"), "{e}");
    assert_eq!(call(&mut c, &["EXISTS", "a"]), Frame::Integer(0));
    // Reads still run.
    assert_eq!(call(&mut c, &["MULTI"]), ok());
    assert_eq!(call(&mut c, &["GET", "k"]), queued());
    assert_eq!(call(&mut c, &["EXEC"]), Frame::Array(vec![bulk("v")]));
}
