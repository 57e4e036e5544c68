//! `pliant serve` with real clients and its own flags: redis-py's transactional `pipeline()`
//! (MULTI … EXEC), WATCH and its PubSub as a CLIENT TRACKING REDIRECT target, a transaction on
//! a cluster node, `--algo belady` refused, and what `-v` logs. Real processes on
//! loopback ports they pick themselves, stopped by their own pids.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::serve_cli::Node;

/// The python of the virtual environment `tools/compat/clients.sh` (and `tools/lib/clients.sh`'s
/// `need_redis_py`) puts redis-py in; `None` (a failure in CI) when it is not there.
fn redis_py() -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let py = root.join("target/compat-venv/bin/python");
    let works = py.exists()
        && Command::new(&py)
            .args(["-c", "import redis"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    if works {
        return Some(py);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI: redis-py is missing from {}; run tools/compat/clients.sh (or source tools/lib/clients.sh and call need_redis_py) first",
        py.display()
    );
    pliant_testdata::skip(&format!(
        "redis-py not found in {} (tools/compat/clients.sh installs it)",
        py.display()
    ));
    None
}

/// The bug: redis-py's default `pipeline()` (transaction=True) sends MULTI … EXEC; the node
/// answered "unknown command 'EXEC'" but had run the queued `SET x 1; INCR x` (x=2).
#[test]
fn redis_py_transactional_pipeline_runs_multi_exec_and_watch_aborts_on_a_change() {
    let Some(py) = redis_py() else {
        return;
    };
    let dir = tempfile::tempdir().expect("dir");
    let node = Node::start(dir.path(), &["--no-store"]);
    let script = r#"
import sys, redis
port = int(sys.argv[1])
r = redis.Redis(port=port, socket_timeout=10)
p = r.pipeline()  # transaction=True: MULTI ... EXEC
p.set("x", 1)
p.incr("x")
assert p.execute() == [True, 2], "pipeline"
assert r.get("x") == b"2"
# A runtime error is that command's reply; the rest run.
r.set("s", "text")
p = r.pipeline()
p.incr("s")
p.incr("x")
out = p.execute(raise_on_error=False)
assert isinstance(out[0], redis.ResponseError) and out[1] == 3, out
# WATCH: a change by another client makes EXEC fail (redis-py raises WatchError).
other = redis.Redis(port=port, socket_timeout=10)
with r.pipeline() as p:
    p.watch("x")
    other.set("x", 100)
    p.multi()
    p.incr("x")
    try:
        p.execute()
        raise SystemExit("EXEC ran although the watched key changed")
    except redis.WatchError:
        pass
assert r.get("x") == b"100"
# The usual optimistic-locking loop succeeds when nothing interferes.
def incr(pipe):
    v = int(pipe.get("x"))
    pipe.multi()
    pipe.set("x", v + 1)
assert r.transaction(incr, "x") == [True]
assert r.get("x") == b"101"
# RESP2 client-side caching: invalidations redirected to a connection subscribed to
# __redis__:invalidate, through redis-py's own PubSub.
ps = redis.Redis(port=port, socket_timeout=10).pubsub()
ps.subscribe("__redis__:invalidate")
assert ps.get_message(timeout=5)["type"] == "subscribe"
sid = next(c["id"] for c in r.client_list() if "P" in c["flags"])
tracker = redis.Redis(port=port, socket_timeout=10)
assert tracker.execute_command("CLIENT", "TRACKING", "ON", "REDIRECT", sid) in (b"OK", True)
r.set("ck", "1")
assert tracker.get("ck") == b"1"
other.set("ck", "2")
msg = ps.get_message(timeout=5)
assert msg and msg["type"] == "message" and msg["channel"] == b"__redis__:invalidate", msg
assert msg["data"] == [b"ck"], msg
ps.close()
# RESP3 too.
r3 = redis.Redis(port=port, protocol=3, socket_timeout=10)
p = r3.pipeline()
p.set("y", "a")
p.get("y")
assert p.execute() == [True, b"a"]
print("ok")
"#;
    let out = Command::new(&py)
        .args(["-c", script, &node.addr.port().to_string()])
        .output()
        .expect("run python");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "ok",
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    node.kill();
}

/// Belady's MIN needs each request's next-access time, which a live node never has.
#[test]
fn serve_refuses_an_offline_algorithm_by_name() {
    let dir = tempfile::tempdir().expect("dir");
    for algo in ["belady", "min"] {
        let out = Command::new(env!("CARGO_BIN_EXE_pliant"))
            .args([
                "serve",
                "--bind",
                "127.0.0.1:0",
                "--no-store",
                "--algo",
                algo,
            ])
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .output()
            .expect("run pliant serve");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{algo}: {err}");
        assert!(
            err.contains("algo") && err.contains("offline algorithm") && err.contains("s3fifo"),
            "{algo}: {err}"
        );
    }
}

/// `-v` logs, at info, the settings at start and every connection accepted and closed with its
/// address.
#[test]
fn serve_v_logs_its_settings_and_each_connection_with_its_address() {
    let dir = tempfile::tempdir().expect("dir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_pliant"))
        .args(["serve", "-v", "--bind", "127.0.0.1:0", "--no-store"])
        .args(["--capacity", "1000keys", "--algo", "sieve"])
        .env_remove("RUST_LOG")
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start pliant serve");
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let next = || {
        rx.recv_timeout(Duration::from_secs(10))
            .expect("a line on stderr")
    };
    let mut seen = Vec::new();
    let addr = loop {
        let line = next();
        if let Some(rest) = line.strip_prefix("pliant serve: listening on ") {
            break rest.split_whitespace().next().expect("addr").to_string();
        }
        seen.push(line);
    };
    assert!(
        seen.iter().any(|l| l.contains("INFO")
            && l.contains("sieve memory tier of 1000keys")
            && l.contains("no store")
            && l.contains("no password")),
        "{seen:#?}"
    );
    let mut c = redis::Client::open(format!("redis://{addr}/"))
        .expect("client")
        .get_connection_with_timeout(Duration::from_secs(10))
        .expect("connect");
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query(&mut c)
        .expect("SET");
    let local = {
        let info: String = redis::cmd("CLIENT")
            .arg("INFO")
            .query(&mut c)
            .expect("INFO");
        info.split(' ')
            .find_map(|f| f.strip_prefix("addr="))
            .expect("addr")
            .to_string()
    };
    drop(c);
    let (mut connected, mut left) = (false, false);
    for _ in 0..20 {
        let line = next();
        connected |= line.contains("INFO") && line.contains(&format!("connected from {local}"));
        left |= line.contains("INFO") && line.contains(&format!("({local}) left"));
        if connected && left {
            break;
        }
    }
    assert!(connected && left, "no connection lines for {local}");
    let _ = child.kill();
    let _ = child.wait();
}

/// Whether `key` is served by the node `c` is connected to (not redirected elsewhere).
fn owns(c: &mut pliant_proto::client::Client, key: &str) -> bool {
    match c.call(&[b"EXISTS", key.as_bytes()]).expect("reply") {
        pliant_proto::frame::Frame::Integer(_) => true,
        pliant_proto::frame::Frame::Error(e) if e.starts_with("MOVED") => false,
        other => panic!("EXISTS {key}: {other:?}"),
    }
}

/// In a cluster, as in Redis Cluster: every key of a transaction in one slot (-CROSSSLOT at
/// EXEC otherwise), and a key served elsewhere redirected while queuing (-MOVED), which makes
/// EXEC abort.
#[test]
fn a_cluster_node_runs_a_transaction_in_one_slot_and_refuses_one_across_slots() {
    use pliant_proto::frame::Frame;
    let dir = tempfile::tempdir().expect("dir");
    // Stopped by its pid whatever happens below: it stops its nodes.
    let cluster =
        crate::cluster_cli::LocalCluster::start(dir.path(), &["--nodes", "2", "--base-port", "0"]);
    let addr = cluster.addrs()[0].clone();
    let mut c = pliant_proto::client::Client::connect(&addr, None).expect("connect");
    let keys: Vec<String> = (0..200).map(|i| format!("key{i}")).collect();
    let mine: Vec<&String> = keys.iter().filter(|k| owns(&mut c, k)).take(2).collect();
    let theirs = keys
        .iter()
        .find(|k| !owns(&mut c, k))
        .expect("a key of the other node");
    assert_eq!(mine.len(), 2, "two keys served here");
    let call = |c: &mut pliant_proto::client::Client, args: &[&str]| {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        c.call(&args).expect("reply")
    };
    let queued = Frame::Simple("QUEUED".into());
    // One slot (one key twice): runs.
    assert_eq!(call(&mut c, &["MULTI"]), Frame::ok());
    assert_eq!(call(&mut c, &["SET", mine[0], "1"]), queued);
    assert_eq!(call(&mut c, &["INCR", mine[0]]), queued);
    assert_eq!(
        call(&mut c, &["EXEC"]),
        Frame::Array(vec![Frame::ok(), Frame::Integer(2)])
    );
    // Two slots, both served here: -CROSSSLOT, nothing runs.
    assert_eq!(call(&mut c, &["MULTI"]), Frame::ok());
    assert_eq!(call(&mut c, &["SET", mine[0], "x"]), queued);
    assert_eq!(call(&mut c, &["SET", mine[1], "y"]), queued);
    match call(&mut c, &["EXEC"]) {
        Frame::Error(e) => assert!(e.starts_with("CROSSSLOT"), "{e}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(call(&mut c, &["GET", mine[0]]), Frame::bulk("2"));
    // A key served elsewhere: -MOVED while queuing, then -EXECABORT.
    assert_eq!(call(&mut c, &["MULTI"]), Frame::ok());
    assert_eq!(call(&mut c, &["SET", mine[0], "z"]), queued);
    match call(&mut c, &["SET", theirs, "z"]) {
        Frame::Error(e) => assert!(e.starts_with("MOVED"), "{e}"),
        other => panic!("{other:?}"),
    }
    match call(&mut c, &["EXEC"]) {
        Frame::Error(e) => assert!(e.starts_with("EXECABORT"), "{e}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(call(&mut c, &["GET", mine[0]]), Frame::bulk("2"));
}
