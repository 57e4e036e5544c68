//! `pliant serve` as users run it, where the process is the subject: a kill that loses nothing
//! acknowledged, SHUTDOWN's exit, flags refused with their errors, the TOML config file,
//! `pliant admin` and `pliant replay`, and the node's own resident memory under hostile
//! clients. A real process on a loopback port it picks itself (the test reads the address from
//! its first line), talked to with the `redis` client crate and raw sockets, stopped by its own
//! pid. The service's behaviour (commands, protocol limits, auth, metrics) is tested in-process
//! in crates/kv/tests/service.rs.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `pliant serve`; killed (SIGKILL) when dropped if still running.
pub(super) struct Node {
    pub(super) child: Child,
    pub(super) addr: SocketAddr,
    /// The rest of its stderr, line by line: held so that the thread reading it keeps reading
    /// (a node writing to a closed pipe would die of SIGPIPE).
    _stderr: std::sync::mpsc::Receiver<String>,
}

impl Node {
    /// Starts `pliant serve --bind 127.0.0.1:0 args…` in `dir` and waits (at most 30 s) for it to
    /// say where it listens.
    pub(super) fn start(dir: &Path, args: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_pliant"))
            .args(["serve", "--bind", "127.0.0.1:0"])
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start pliant serve");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let line = match line.strip_prefix("pliant serve: listening on ") {
                    Some(rest) => rest.split_whitespace().next().unwrap_or("").to_string(),
                    None => line,
                };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("pliant serve says where it listens")
            .parse()
            .expect("an address");
        Self {
            child,
            addr,
            _stderr: rx,
        }
    }

    pub(super) fn client(&self) -> redis::Connection {
        redis::Client::open(format!("redis://{}/", self.addr))
            .expect("client")
            .get_connection_with_timeout(Duration::from_secs(10))
            .expect("connect")
    }

    /// Waits (at most 30 s) for the process to exit by itself.
    fn wait(mut self) -> std::process::ExitStatus {
        exit_within_30s(&mut self.child).expect("pliant serve did not exit")
    }

    /// SIGKILL, as a crash.
    pub(super) fn kill(mut self) {
        self.child.kill().expect("kill");
        self.child.wait().expect("reap");
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How `child` exited, if it does by itself within 30 s.
fn exit_within_30s(child: &mut Child) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if let Some(s) = child.try_wait().expect("wait") {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

pub(super) fn cmd<T: redis::FromRedisValue>(c: &mut redis::Connection, args: &[&str]) -> T {
    let mut k = redis::cmd(args[0]);
    for a in &args[1..] {
        k.arg(*a);
    }
    k.query(c)
        .unwrap_or_else(|e| panic!("{}: {e}", args.join(" ")))
}

#[test]
fn acknowledged_writes_survive_a_kill_under_durability_always() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = Node::start(
        dir.path(),
        &["--durability", "always", "--capacity", "50keys"],
    );
    let mut c = node.client();
    for i in 0..500 {
        let _: () = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg(format!("v{i}"))
            .query(&mut c)
            .expect("set");
    }
    node.kill();
    let node = Node::start(dir.path(), &[]);
    let mut c = node.client();
    assert_eq!(cmd::<i64>(&mut c, &["DBSIZE"]), 500);
    for i in (0..500).step_by(7) {
        assert_eq!(
            cmd::<String>(&mut c, &["GET", &format!("k{i}")]),
            format!("v{i}")
        );
    }
}

/// A bulk load fast enough to fill the store's write-behind budget has its applications
/// ingested into the LSM tree as tables of their own (issue 34). Killed in the middle of one,
/// the node comes back with every write it acknowledged, whether it was in a table, in one
/// being built, or only in the log.
#[test]
fn a_bulk_load_killed_midway_keeps_every_acknowledged_write() {
    use std::io::{Read, Write};
    const KEYS: usize = 200_000;
    const KILL_AFTER: usize = 120_000;
    let value = |i: usize| -> Vec<u8> { (0..1000).map(|j| ((i * 31 + j) % 251) as u8).collect() };
    let dir = tempfile::tempdir().expect("tempdir");
    let node = Node::start(dir.path(), &["--durability", "everysec"]);
    let mut s = std::net::TcpStream::connect(node.addr).expect("connect");
    let mut replies = s.try_clone().expect("clone");
    replies
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let writer = std::thread::spawn(move || {
        let mut buf = Vec::new();
        for start in (0..KEYS).step_by(500) {
            buf.clear();
            for i in start..start + 500 {
                let k = format!("k{i}");
                let v = value(i);
                buf.extend_from_slice(
                    format!("*3\r\n$3\r\nSET\r\n${}\r\n{k}\r\n${}\r\n", k.len(), v.len())
                        .as_bytes(),
                );
                buf.extend_from_slice(&v);
                buf.extend_from_slice(b"\r\n");
            }
            if s.write_all(&buf).is_err() {
                return;
            }
        }
    });
    // Every reply is "+OK\r\n": the bytes received say how many writes were acknowledged.
    let mut received = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    let mut killed = Some(node);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(
            Instant::now() < deadline,
            "{} replies after 120 s",
            received.len() / 5
        );
        if killed.is_some() && received.len() / 5 >= KILL_AFTER {
            killed.take().expect("node").kill();
        }
        match replies.read(&mut chunk) {
            Ok(0) | Err(_) if killed.is_none() => break,
            Ok(0) => panic!("the node closed the connection before the kill"),
            Ok(n) => received.extend_from_slice(&chunk[..n]),
            Err(e) => panic!("reading replies: {e}"),
        }
    }
    writer.join().expect("writer");
    let acked = received.len() / 5;
    assert!(
        received.chunks(5).take(acked).all(|r| r == b"+OK\r\n"),
        "a reply other than +OK"
    );
    assert!((KILL_AFTER..KEYS).contains(&acked), "{acked} acknowledged");
    let node = Node::start(dir.path(), &[]);
    let mut c = node.client();
    assert!(cmd::<i64>(&mut c, &["DBSIZE"]) as usize >= acked);
    for start in (0..acked).step_by(500) {
        let keys: Vec<String> = (start..(start + 500).min(acked))
            .map(|i| format!("k{i}"))
            .collect();
        let got: Vec<Option<Vec<u8>>> = redis::cmd("MGET").arg(&keys).query(&mut c).expect("mget");
        for (i, v) in (start..).zip(got) {
            assert!(
                v.as_deref() == Some(&value(i)[..]),
                "k{i}: acknowledged, then {} after the kill",
                if v.is_some() {
                    "another value"
                } else {
                    "missing"
                }
            );
        }
    }
}

#[test]
fn shutdown_syncs_the_store_and_exits_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = Node::start(dir.path(), &["--durability", "none"]);
    let mut c = node.client();
    assert_eq!(cmd::<String>(&mut c, &["SET", "kept", "yes"]), "OK");
    // Redis closes the connection on SHUTDOWN; the reply may or may not arrive.
    let _ = redis::cmd("SHUTDOWN").query::<redis::Value>(&mut c);
    assert!(node.wait().success());
    let node = Node::start(dir.path(), &[]);
    assert_eq!(cmd::<String>(&mut node.client(), &["GET", "kept"]), "yes");
}

use pliant_testdata::wire::{raw, read_until_closed, until_closed};

const UNAUTH_BULK: &str = "-ERR Protocol error: unauthenticated bulk length\r\n";

/// The hole Redis closed with CVE-2021-32675: a client that never authenticates claimed a
/// 100 MB value and sent it, and the node buffered it as it arrived (8 MiB on each of 200
/// connections here, 1.6 GB, before the request was whole and its NOAUTH due). Now each is
/// refused at the header and closed, and the node's resident memory stays flat. (In a process
/// of its own: its resident memory is the subject, which a test binary's other tests would blur.)
#[test]
fn unauthenticated_client_cannot_make_the_node_buffer_a_large_bulk() {
    use std::io::ErrorKind;
    let dir = tempfile::tempdir().expect("tempdir");
    let node = Node::start(dir.path(), &["--no-store", "--requirepass", "s3cret"]);
    let pid = node.child.id();
    assert_eq!(
        until_closed(node.addr, b"AUTH s3cret\r\nPING\r\nQUIT\r\n", false),
        "+OK\r\n+PONG\r\n+OK\r\n"
    );
    let before = rss(pid);
    const CONNECTIONS: usize = 200;
    const SENT: usize = 8 << 20;
    const BOUND: u64 = 64 << 20;
    let chunk = vec![b'x'; 64 << 10];
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut connections = Vec::with_capacity(CONNECTIONS);
    for i in 1..=CONNECTIONS {
        let mut s = TcpStream::connect(node.addr).expect("connect");
        s.set_write_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut sent = 0;
        let mut closed = s
            .write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100000000\r\n")
            .is_err();
        while !closed && sent < SENT {
            match s.write_all(&chunk) {
                Ok(()) => sent += chunk.len(),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    panic!("connection {i}: the node neither read nor closed for 10 s ({e})")
                }
                Err(_) => closed = true,
            }
        }
        connections.push((s, closed, sent));
        let grown = rss(pid).saturating_sub(before);
        assert!(
            grown < BOUND,
            "after {i} unauthenticated connections sent up to 8 MiB each, the node's RSS grew by {} MiB",
            grown >> 20
        );
        assert!(Instant::now() < deadline, "{i} connections in 120 s");
    }
    for (i, (mut s, closed, sent)) in connections.into_iter().enumerate() {
        assert!(
            closed,
            "connection {}: the node took all {sent} bytes of an unauthenticated bulk",
            i + 1
        );
        assert_eq!(
            read_until_closed(&mut s),
            UNAUTH_BULK,
            "connection {}",
            i + 1
        );
    }
    assert_eq!(
        until_closed(node.addr, b"AUTH s3cret\r\nPING\r\nQUIT\r\n", false),
        "+OK\r\n+PONG\r\n+OK\r\n"
    );
}

/// Polls `PLIANT.STATS` (every 50 ms, at most 20 s) until `ok` holds of it; returns it.
pub(super) fn stats_until(
    c: &mut redis::Connection,
    what: &str,
    ok: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let start = Instant::now();
    loop {
        let text: String = cmd(c, &["PLIANT.STATS"]);
        let v: serde_json::Value = serde_json::from_str(&text).expect("PLIANT.STATS is JSON");
        if ok(&v) {
            return v;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{what}: {v}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `pliant admin` against a node with a password: refused (NOAUTH) without one, served with
/// `-a`. (The service's side of the password is crates/kv/tests/service.rs's
/// `without_the_password_every_command_is_refused_and_wrong_ones_are_counted`.)
#[test]
fn pliant_admin_needs_the_password_and_takes_it_with_a() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = Node::start(dir.path(), &["--no-store", "--requirepass", "s3cret"]);
    let mut c = redis::Client::open(format!("redis://:s3cret@{}/", node.addr))
        .expect("client")
        .get_connection_with_timeout(Duration::from_secs(10))
        .expect("connect");
    assert_eq!(cmd::<String>(&mut c, &["SET", "k", "v"]), "OK");
    let addr = node.addr.to_string();
    let admin = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_pliant"))
            .arg("admin")
            .arg(&addr)
            .args(args)
            .env_remove("PLIANT_PASSWORD")
            .output()
            .expect("run pliant admin")
    };
    let refused = admin(&["stats"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("NOAUTH"));
    let ok = admin(&["-a", "s3cret", "stats", "--json"]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&ok.stdout).expect("json");
    assert_eq!(v["writes"], 1);
}

#[test]
fn a_non_loopback_address_without_a_password_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(env!("CARGO_BIN_EXE_pliant"))
        .args(["serve", "--bind", "0.0.0.0:0", "--no-store"])
        .current_dir(dir.path())
        .env_remove("PLIANT_PASSWORD")
        .output()
        .expect("run pliant serve");
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("refusing to serve 0.0.0.0:0 without a password"),
        "{e}"
    );
}

/// `--metrics` serves HTTP without authentication: off loopback it is refused, with or without
/// a password, and the error names the flag that allows it; nothing is bound meanwhile.
#[test]
fn the_unauthenticated_metrics_endpoint_is_refused_off_loopback() {
    let dir = tempfile::tempdir().expect("tempdir");
    for extra in [&[][..], &["--requirepass", "s3cret"]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_pliant"))
            .args(["serve", "--bind", "127.0.0.1:0", "--no-store"])
            .args(["--metrics", "0.0.0.0:0"])
            .args(extra)
            .current_dir(dir.path())
            .env_remove("PLIANT_PASSWORD")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start pliant serve");
        // A node that accepted the address would serve until stopped: give it 30 s to refuse.
        let Some(status) = exit_within_30s(&mut child) else {
            child.kill().expect("kill");
            child.wait().expect("reap");
            panic!("{extra:?}: pliant serve took a non-loopback --metrics address");
        };
        assert!(!status.success(), "{extra:?}");
        let mut e = String::new();
        child
            .stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut e)
            .expect("read stderr");
        assert!(
            e.contains("refusing to serve metrics on 0.0.0.0:0")
                && e.contains("--unsafe-no-auth")
                && !e.contains("listening on"),
            "{extra:?}: {e}"
        );
    }
}

#[test]
fn pliant_admin_loads_a_policy_file_and_reads_its_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = Node::start(dir.path(), &["--no-store", "--interval", "100ms"]);
    std::fs::write(
        dir.path().join("cap.lua"),
        "function when() return servers[whoami].keys > params.keep end\n\
         function howmuch() return params.keep end\n",
    )
    .expect("write policy");
    let addr = node.addr.to_string();
    let admin = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_pliant"))
            .arg("admin")
            .arg(&addr)
            .args(args)
            .current_dir(dir.path())
            .output()
            .expect("run pliant admin");
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    assert_eq!(
        admin(&["policy", "load", "cap.lua", "--param", "keep=5"]).trim(),
        "OK loaded version 1"
    );
    let mut c = node.client();
    for i in 0..20 {
        let _: () = redis::cmd("SET").arg(i).arg(i).query(&mut c).expect("set");
    }
    stats_until(&mut c, "cap.lua keeps 5", |s| s["keys"] == 5);
    let status: serde_json::Value =
        serde_json::from_str(&admin(&["policy", "status"])).expect("json");
    assert_eq!(status["policy"], "cap");
    let log = admin(&["policy", "log", "2"]);
    assert_eq!(log.lines().count(), 2, "{log}");
}

/// The first `lines` lines of the d100K WorkManager trace, written to `dir`.
fn d100k_prefix(dir: &Path, lines: usize) -> Option<std::path::PathBuf> {
    let trace = pliant_testdata::shared("traces/parsplice/d100K/rank4.csv.gz")?;
    let gz = flate2::read::GzDecoder::new(std::fs::File::open(trace).expect("open trace"));
    let out = dir.join("d100K-prefix.csv");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&out).expect("create"));
    for line in BufReader::new(gz).lines().take(lines) {
        writeln!(w, "{}", line.expect("read trace")).expect("write");
    }
    w.flush().expect("flush");
    Some(out)
}

/// A node replaying a trace through `pliant replay` counts exactly the memory-tier misses the
/// simulator counts for the same algorithm and capacity (issue 11's contract between the
/// service and `pliant sim`). Pipelined: with one client the node still sees the trace's order.
#[test]
fn a_replayed_trace_misses_exactly_as_the_simulator_says() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 500,000 lines: 248,952 reads and the first misses of a 100-key cache (LRU 155).
    let Some(trace) = d100k_prefix(dir.path(), 500_000) else {
        return;
    };
    let trace = trace.to_str().expect("utf-8 path");
    let sim = Command::new(env!("CARGO_BIN_EXE_pliant"))
        .args([
            "sim",
            trace,
            "--algo",
            "lru,s3fifo,sieve",
            "--size",
            "100keys",
            "--json",
        ])
        .output()
        .expect("pliant sim");
    assert!(
        sim.status.success(),
        "{}",
        String::from_utf8_lossy(&sim.stderr)
    );
    let sim: serde_json::Value = serde_json::from_slice(&sim.stdout).expect("json");
    for (i, algo) in ["lru", "s3fifo", "sieve"].into_iter().enumerate() {
        let expected = sim[i]["misses"].as_u64().expect("misses");
        assert!(
            expected > 100,
            "{algo}: the prefix must make misses: {expected}"
        );
        let store = dir.path().join(format!("store-{algo}"));
        let node = Node::start(
            dir.path(),
            &[
                "--store",
                store.to_str().expect("utf-8"),
                "--algo",
                algo,
                "--capacity",
                "100keys",
            ],
        );
        let out = Command::new(env!("CARGO_BIN_EXE_pliant"))
            .args([
                "replay",
                trace,
                "--server",
                &node.addr.to_string(),
                "--pipeline",
                "64",
                "--json",
            ])
            .output()
            .expect("pliant replay");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(r["server_stats"]["misses"], expected, "{algo}: {r}");
        assert_eq!(r["records"], 249_651, "{algo}");
    }
}

#[test]
fn a_config_file_gives_the_settings_and_flags_win() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("pliant.toml"),
        "bind = \"127.0.0.1:1\"\nno-store = true\ncapacity = \"10keys\"\nalgo = \"fifo\"\n",
    )
    .expect("write");
    // --bind (given by Node::start) wins over the file's port 1.
    let node = Node::start(dir.path(), &["--config", "pliant.toml"]);
    let mut c = node.client();
    for i in 0..50 {
        let _: () = redis::cmd("SET").arg(i).arg(i).query(&mut c).expect("set");
    }
    assert_eq!(cmd::<i64>(&mut c, &["DBSIZE"]), 10);
    let info: String = cmd(&mut c, &["INFO", "pliant"]);
    assert!(
        info.contains("algorithm:fifo\r\n") && info.contains("store:none\r\n"),
        "{info}"
    );

    std::fs::write(
        dir.path().join("bad.toml"),
        "capacity = \"10keys\"\nshards = 4\n",
    )
    .expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_pliant"))
        .args(["serve", "--config", "bad.toml"])
        .current_dir(dir.path())
        .output()
        .expect("run");
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("bad.toml") && e.contains("shards") && e.contains("line 2"),
        "{e}"
    );
}

/// The node's resident memory, bytes (Linux).
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kb| kb.parse::<u64>().ok())
        .expect("VmRSS")
        * 1024
}

/// Clients that claim huge frames and stall, and random bytes, cost the node no memory beyond
/// what they sent, and it keeps answering everyone else. (In a process of its own, as above.)
#[test]
fn stalled_half_frames_and_random_bytes_leave_memory_bounded_and_the_node_answering() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = Node::start(dir.path(), &["--no-store"]);
    let mut c = node.client();
    assert_eq!(cmd::<String>(&mut c, &["SET", "k", "v"]), "OK");
    let before = rss(node.child.id());
    // 200 connections, each claiming a 500 MB value (the default limit allows it) and sending
    // a few bytes of it, then stalling with the connection open.
    let stalled: Vec<TcpStream> = (0..200)
        .map(|_| {
            let mut s = TcpStream::connect(node.addr).expect("connect");
            s.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$500000000\r\nabc")
                .expect("send");
            s
        })
        .collect();
    // Deeply nested and very long claims, as whole frames.
    for bytes in [&b"*1\r\n$536870913\r\n"[..], b"*1048577\r\n"] {
        assert!(raw(node.addr, bytes).starts_with("-ERR Protocol error"));
    }
    // Seeded random bytes on fresh connections, each then half-closed: every one gets its
    // answers and a close, never a hang (a frame left incomplete ends with the client's
    // bytes).
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..150 {
        let len = 1 + (x % 64) as usize;
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Mostly protocol bytes, so frames get deep enough to exercise the parser.
                const ALPHABET: &[u8] = b"*$:+-_#,%~>!=(\r\n0123456789abcXYZ ";
                ALPHABET[(x % ALPHABET.len() as u64) as usize]
            })
            .collect();
        let answer = until_closed(node.addr, &bytes, true);
        // What came ends where a reply ends: the close cut nothing short.
        assert!(
            answer.is_empty() || answer.ends_with("\r\n"),
            "{:?}: {answer:?}",
            String::from_utf8_lossy(&bytes)
        );
    }
    assert_eq!(cmd::<String>(&mut c, &["GET", "k"]), "v");
    let grown = rss(node.child.id()).saturating_sub(before);
    assert!(grown < 64 << 20, "RSS grew by {grown} bytes");
    drop(stalled);
}

/// A slot move's copies (`PLIANT.RESTORE`) are synced before they are acknowledged, whatever
/// the node's durability: the move's source deletes its own copy of each key on that
/// acknowledgement, so a copy lost in a crash of the target (power lost, not only the process:
/// a killed process leaves what it wrote to the OS) would be a key lost. A plain write under
/// `--durability none` is not synced.
#[test]
fn a_moves_copies_are_synced_before_they_are_acknowledged_whatever_the_durability() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = Node::start(dir.path(), &["--durability", "none"]);
    let mut c = node.client();
    let syncs = |c: &mut redis::Connection| -> u64 {
        let info: String = cmd(c, &["INFO", "pliant"]);
        info.lines()
            .find_map(|l| l.strip_prefix("store_syncs:"))
            .and_then(|n| n.trim().parse().ok())
            .expect("store_syncs in INFO pliant")
    };
    let before = syncs(&mut c);
    let _: String = cmd(&mut c, &["SET", "plain", "v"]);
    assert_eq!(
        syncs(&mut c),
        before,
        "a plain write under `none` is not synced"
    );
    let _: String = cmd(&mut c, &["PLIANT.RESTORE", "moved", "v", "0"]);
    assert!(
        syncs(&mut c) > before,
        "the copy is synced before its reply"
    );
    // A batch naming a move is refused outside a cluster: there are no moves here.
    let named = redis::cmd("PLIANT.RESTORE")
        .arg(&["MAPVERSION", "1", "named", "v", "0"])
        .query::<String>(&mut c)
        .expect_err("no move outside a cluster");
    assert!(
        named.to_string().contains("cluster support disabled"),
        "{named}"
    );
    let got: Option<String> = cmd(&mut c, &["GET", "named"]);
    assert_eq!(got, None);
    node.kill();
}

/// The shipped `parsplice-no-progress` policy, live: it trims the memory tier after the absorb
/// phase while the application reports progress (`PLIANT.PROGRESS`), and grows it back when the
/// reports stop, as it does in the model.
#[test]
fn the_no_progress_policy_grows_the_tier_back_when_the_application_stops_progressing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = Node::start(
        dir.path(),
        &[
            "--no-store",
            "--interval",
            "100ms",
            "--capacity",
            "1000keys",
        ],
    );
    let policy = dir.path().join("no-progress.lua");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies/parsplice-no-progress.lua"),
        &policy,
    )
    .expect("copy the policy");
    let o = Command::new(env!("CARGO_BIN_EXE_pliant"))
        .arg("admin")
        .arg(node.addr.to_string())
        .args(["policy", "load", "no-progress.lua"])
        // Five decisions a window, a stall below a fifth of the progress rate before the trim:
        // a loaded machine that delays a report now and then is no stall. No store above: no
        // fetches, so thrashing is not what grows it back.
        .args([
            "--param",
            "absorb=30",
            "--param",
            "target=5",
            "--param",
            "window=5",
        ])
        .args(["--param", "stall=0.2"])
        .current_dir(dir.path())
        .output()
        .expect("pliant admin");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut c = node.client();
    // Reports progress every 20 ms for `d` (bounded by its own clock).
    let report = |c: &mut redis::Connection, d: Duration| {
        let start = Instant::now();
        while start.elapsed() < d {
            let _: String = cmd(c, &["PLIANT.PROGRESS", "INCRBY", "100"]);
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    // Bad reports are refused, naming why, and change nothing.
    for (args, why) in [
        (&["INCRBY", "-1e9"][..], "not negative"),
        (&["SET", "inf"][..], "not a valid float"),
        (&["INCRBY", "ten"][..], "not a valid float"),
        (&["ADD", "1"][..], "usage"),
        (&["GET", "extra"][..], "usage"),
    ] {
        let bad: redis::RedisResult<String> = redis::cmd("PLIANT.PROGRESS").arg(args).query(&mut c);
        let e = bad.expect_err("refused").to_string();
        assert!(e.contains(why), "{args:?}: {e}");
    }
    let none: Option<String> = cmd(&mut c, &["PLIANT.PROGRESS", "GET"]);
    assert_eq!(none, None, "no report yet");
    report(&mut c, Duration::from_millis(800));
    for i in 0..40 {
        let _: () = redis::cmd("SET").arg(i).arg(i).query(&mut c).expect("set");
    }
    let mut trimmed = None;
    let start = Instant::now();
    while trimmed.is_none() {
        report(&mut c, Duration::from_millis(100));
        let text: String = cmd(&mut c, &["PLIANT.STATS"]);
        let v: serde_json::Value = serde_json::from_str(&text).expect("json");
        if v["keys"] == 5 {
            trimmed = Some(v);
        }
        assert!(start.elapsed() < Duration::from_secs(20), "never trimmed");
    }
    // Progress goes on: the tier stays trimmed.
    report(&mut c, Duration::from_millis(1500));
    let v = stats_until(&mut c, "trimmed", |_| true);
    assert_eq!(v["capacity"], "5keys", "{v}");
    // The reports stop: the policy grows the tier back to the absorb size.
    let v = stats_until(&mut c, "grown back", |v| v["capacity"] == "30keys");
    let progress: String = cmd(&mut c, &["PLIANT.PROGRESS", "GET"]);
    assert!(progress.parse::<f64>().expect("a number") > 0.0, "{v}");
    for i in 40..70 {
        let _: () = redis::cmd("SET").arg(i).arg(i).query(&mut c).expect("set");
    }
    stats_until(&mut c, "room for 30 keys again", |v| v["keys"] == 30);
}
