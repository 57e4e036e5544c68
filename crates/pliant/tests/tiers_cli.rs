//! Tiers (`pliant serve --parent`) as users run them: a store node and leaves over it, each a
//! real process on a loopback port of its own choosing, stopped by its own pid.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::serve_cli::{Node, cmd, stats_until};

/// A store node and `n` leaves of `capacity` over it.
fn hierarchy(dir: &Path, n: usize, capacity: &str, parent_args: &[&str]) -> (Node, Vec<Node>) {
    let mut args = vec!["--store", "store"];
    args.extend(parent_args);
    let parent = Node::start(dir, &args);
    let at = parent.addr.to_string();
    let leaves = (0..n)
        .map(|_| Node::start(dir, &["--parent", &at, "--capacity", capacity]))
        .collect();
    (parent, leaves)
}

/// A store node and one leaf over it started with `leaf_args`.
fn store_and_leaf(dir: &Path, leaf_args: &[&str]) -> (Node, Node) {
    let parent = Node::start(dir, &["--store", "store"]);
    let at = parent.addr.to_string();
    let leaf = Node::start(dir, &[&["--parent", &at][..], leaf_args].concat());
    (parent, leaf)
}

/// Sends `sig` (`-STOP`, `-CONT`) to the process `pid`.
fn signal(pid: &str, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, pid])
        .status()
        .expect("run kill");
    assert!(ok.success(), "kill {sig} {pid}");
}

fn stats(c: &mut redis::Connection) -> serde_json::Value {
    let text: String = cmd(c, &["PLIANT.STATS"]);
    serde_json::from_str(&text).expect("PLIANT.STATS is JSON")
}

fn get(c: &mut redis::Connection, key: &str) -> Option<String> {
    cmd(c, &["GET", key])
}

/// The coherence the issue asks for: once a write through one leaf is acknowledged, no read
/// through the other returns what the key held before, whatever that leaf had cached. Each step
/// caches the key in both leaves first, so a leaf that missed an invalidation would answer the
/// old value.
#[test]
fn a_write_through_one_leaf_is_never_followed_by_the_old_value_through_its_sibling() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (parent, leaves) = hierarchy(dir.path(), 2, "100keys", &[]);
    let mut c: Vec<redis::Connection> = leaves.iter().map(Node::client).collect();
    assert_eq!(cmd::<String>(&mut c[0], &["SET", "k", "first"]), "OK");
    assert_eq!(get(&mut c[1], "k").as_deref(), Some("first"));

    for i in 0..300usize {
        let (w, r) = if i % 2 == 0 { (0, 1) } else { (1, 0) };
        let key = format!("key:{}", i % 7);
        // Both leaves hold the key (or know it is absent) before the write.
        let before = get(&mut c[r], &key);
        assert_eq!(get(&mut c[w], &key), before, "{key}: the leaves agree");
        let expected = match i % 5 {
            0 | 1 => {
                let v = format!("v{i}");
                assert_eq!(cmd::<String>(&mut c[w], &["SET", &key, &v]), "OK");
                Some(v)
            }
            2 => {
                let _: i64 = cmd(&mut c[w], &["DEL", &key]);
                None
            }
            3 => {
                let v = format!("m{i}");
                let _: () = cmd(&mut c[w], &["MSET", &key, &v, "other", "x"]);
                Some(v)
            }
            _ => {
                let _: i64 = cmd(&mut c[w], &["APPEND", &key, "+"]);
                Some(format!("{}+", before.clone().unwrap_or_default()))
            }
        };
        assert_eq!(
            get(&mut c[r], &key),
            expected,
            "step {i}: read through leaf {r} after leaf {w}'s write was acknowledged"
        );
    }
    // FLUSHALL through one leaf empties what the other holds too (which holds "other" first).
    assert_eq!(get(&mut c[1], "other").as_deref(), Some("x"));
    let _: () = cmd(&mut c[0], &["FLUSHALL"]);
    assert_eq!(get(&mut c[1], "other"), None);

    let s = stats(&mut c[1]);
    assert!(
        s["invalidated"].as_u64() > Some(50),
        "the sibling's copies were dropped by invalidations: {s}"
    );
    drop(parent);
}

/// ParSplice's coalescing: readers that miss on a key while its fetch is on the way wait for
/// that fetch; one request reaches the parent. The parent is stopped (SIGSTOP) while the readers
/// arrive, so the fetch is certainly still on its way.
#[test]
fn concurrent_misses_of_one_key_make_one_parent_request() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (parent, leaves) = hierarchy(dir.path(), 1, "100keys", &[]);
    let _: () = cmd(&mut parent.client(), &["SET", "state:42", "payload"]);
    let before = stats(&mut parent.client());
    let mut admin = leaves[0].client();
    let readers = 8;
    let mut clients: Vec<redis::Connection> = (0..readers).map(|_| leaves[0].client()).collect();

    let pid = parent.child.id().to_string();
    signal(&pid, "-STOP");
    let threads: Vec<_> = clients
        .drain(..)
        .map(|mut c| std::thread::spawn(move || get(&mut c, "state:42")))
        .collect();
    // Every reader is waiting: one sent the request, the rest joined it.
    let waiting = stats_until(&mut admin, "readers joining the fetch", |s| {
        s["coalesced"].as_u64() == Some(readers - 1)
    });
    signal(&pid, "-CONT");
    for t in threads {
        assert_eq!(t.join().expect("reader").as_deref(), Some("payload"));
    }
    assert_eq!(waiting["parent_requests"], 1, "{waiting}");
    let after = stats(&mut parent.client());
    let reads = |s: &serde_json::Value| {
        s["keyspace_hits"].as_u64().unwrap_or(0) + s["keyspace_misses"].as_u64().unwrap_or(0)
    };
    assert_eq!(
        reads(&after) - reads(&before),
        1,
        "the parent served one read: {after}"
    );
    // The leaf kept what it fetched.
    let s = stats(&mut admin);
    assert_eq!(get(&mut admin, "state:42").as_deref(), Some("payload"));
    assert_eq!(
        stats(&mut admin)["hits"],
        s["hits"].as_u64().unwrap_or(0) + 1
    );
}

/// A parent that stops answering (SIGSTOP) does not hang a leaf's clients: after
/// `--parent-timeout` a read gets an error naming the parent and the timeout, a write one saying
/// it may or may not have been applied, and once the parent answers again the fetch that timed
/// out is kept (no second request) and the write is there.
#[test]
fn a_parent_that_stops_answering_gets_its_leaf_s_clients_an_error_after_the_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (parent, leaf) = store_and_leaf(dir.path(), &["--parent-timeout", "1s"]);
    let _: () = cmd(&mut parent.client(), &["SET", "state:1", "payload"]);
    let mut c = leaf.client();
    let pid = parent.child.id().to_string();
    signal(&pid, "-STOP");
    let started = Instant::now();
    let read = redis::cmd("GET")
        .arg("state:1")
        .query::<Option<String>>(&mut c);
    let read_took = started.elapsed();
    let started = Instant::now();
    let write = redis::cmd("SET")
        .arg("state:2")
        .arg("new")
        .query::<()>(&mut c);
    let write_took = started.elapsed();
    signal(&pid, "-CONT");
    let read = read
        .expect_err("a read while the parent is stopped")
        .to_string();
    assert!(
        read.contains(&format!(
            "parent {} did not answer a fetch within 1s",
            parent.addr
        )),
        "{read}"
    );
    let write = write
        .expect_err("a write while the parent is stopped")
        .to_string();
    assert!(
        write.contains("may or may not have been applied"),
        "{write}"
    );
    for took in [read_took, write_took] {
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(5),
            "{took:?}"
        );
    }
    assert_eq!(get(&mut c, "state:1").as_deref(), Some("payload"));
    assert_eq!(
        stats(&mut c)["parent_requests"],
        1,
        "the fetch that timed out was kept"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while get(&mut parent.client(), "state:2").as_deref() != Some("new") {
        assert!(
            Instant::now() < deadline,
            "the write sent before the timeout never landed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A put of a key the leaf holds with the same value is redundant and goes no further; one with
/// another value goes through.
#[test]
fn a_put_a_leaf_already_holds_goes_no_further() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (parent, leaves) = hierarchy(dir.path(), 1, "100keys", &[]);
    let mut c = leaves[0].client();
    let mut p = parent.client();
    assert_eq!(cmd::<String>(&mut c, &["SET", "s", "one"]), "OK");
    let writes = stats(&mut p)["writes"].clone();
    assert_eq!(cmd::<String>(&mut c, &["SET", "s", "one"]), "OK");
    assert_eq!(stats(&mut c)["redundant_puts"], 1);
    assert_eq!(stats(&mut p)["writes"], writes, "the parent never saw it");
    assert_eq!(cmd::<String>(&mut c, &["SET", "s", "two"]), "OK");
    assert_eq!(get(&mut p, "s").as_deref(), Some("two"));
    assert_eq!(stats(&mut c)["redundant_puts"], 1);
}

/// A leaf holds nothing of its own: killing it (SIGKILL, mid-stream) loses nothing the parent's
/// store acknowledged, and a new leaf serves it all.
#[test]
fn killing_a_leaf_loses_nothing_the_store_acknowledged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (parent, mut leaves) = hierarchy(dir.path(), 1, "50keys", &["--durability", "always"]);
    let leaf = leaves.remove(0);
    let mut c = leaf.client();
    let n = 400;
    for i in 0..n {
        let _: () = cmd(&mut c, &["SET", &format!("k{i}"), &format!("v{i}")]);
    }
    leaf.kill();
    let at = parent.addr.to_string();
    let leaf = Node::start(dir.path(), &["--parent", &at, "--capacity", "50keys"]);
    let mut c = leaf.client();
    assert_eq!(cmd::<i64>(&mut c, &["DBSIZE"]), n);
    let start = Instant::now();
    for i in 0..n {
        assert_eq!(
            get(&mut c, &format!("k{i}")),
            Some(format!("v{i}")),
            "k{i} through the new leaf"
        );
    }
    assert!(start.elapsed() < Duration::from_secs(60));
    let s = stats(&mut c);
    assert_eq!(
        s["parent_requests"], n,
        "every read was a miss of the new leaf: {s}"
    );
    assert!(s["keys"].as_u64().is_some_and(|k| k <= 50), "{s}");
}

/// A leaf whose parent goes away answers with an error naming it, and serves again once a parent
/// is back at that address; what it held before is not served meanwhile.
#[test]
fn a_leaf_that_loses_its_parent_says_so_and_forgets_what_it_held() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (parent, leaves) = hierarchy(dir.path(), 1, "100keys", &[]);
    let mut c = leaves[0].client();
    let _: () = cmd(&mut c, &["SET", "k", "v"]);
    assert_eq!(get(&mut c, "k").as_deref(), Some("v"));
    let at = parent.addr;
    parent.kill();
    let start = Instant::now();
    let e = loop {
        match redis::cmd("GET").arg("k").query::<Option<String>>(&mut c) {
            Err(e) => break e.to_string(),
            Ok(_) => {
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "the leaf kept serving a key it can no longer hear about"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    assert!(e.contains(&at.to_string()), "{e}");
}

fn policy_status(c: &mut redis::Connection) -> serde_json::Value {
    let text: String = cmd(c, &["PLIANT.POLICY", "STATUS"]);
    serde_json::from_str(&text).expect("PLIANT.POLICY STATUS is JSON")
}

/// ParSplice's two-phase policy deciding live on a leaf: it absorbs until the leaf has held more
/// than `absorb` keys, then trims to `target` at every decision; every key stays readable
/// through the leaf (fetched from the parent).
#[test]
fn parsplice_absorb_trim_runs_live_on_a_leaf() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_parent, leaf) = store_and_leaf(
        dir.path(),
        &[
            "--policy",
            "parsplice-absorb-trim",
            "--param",
            "absorb=300",
            "--param",
            "target=40",
            "--interval",
            "200ms",
        ],
    );
    let mut c = leaf.client();
    let set = |c: &mut redis::Connection, range: std::ops::Range<usize>| {
        let mut p = redis::pipe();
        for i in range {
            p.cmd("SET").arg(format!("k{i}")).arg(i).ignore();
        }
        let _: () = p.query(c).expect("pipelined SETs");
    };
    set(&mut c, 0..250);
    // Two decisions later it still absorbs: 250 keys is under the absorb threshold.
    let decided = policy_status(&mut c)["decisions"].as_u64().unwrap_or(0);
    let start = Instant::now();
    while policy_status(&mut c)["decisions"].as_u64().unwrap_or(0) < decided + 2 {
        assert!(start.elapsed() < Duration::from_secs(20), "no decisions");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(stats(&mut c)["keys"], 250, "absorbing");
    set(&mut c, 250..400);
    stats_until(&mut c, "trimmed to the target", |s| s["keys"] == 40);
    for i in 0..400 {
        assert_eq!(get(&mut c, &format!("k{i}")), Some(i.to_string()), "k{i}");
    }
    // Past the absorb phase the leaf holds the target: most reads went up to the parent.
    let s = stats_until(&mut c, "at the target", |s| {
        s["keys"].as_u64().is_some_and(|k| k <= 40)
    });
    assert!(s["parent_requests"].as_u64() >= Some(360), "{s}");
    let status = policy_status(&mut c);
    assert_eq!(status["last_error"], serde_json::Value::Null, "{status}");
    assert_eq!(status["last_resize"], "40keys", "{status}");
}

/// `auto` deciding live on a leaf, fed by real reads and waits: loaded with `PLIANT.POLICY LOAD
/// auto` over a running Lua policy, it arms and trims the leaf to its working set once the reads
/// spread out over new keys, every key staying readable through the parent; rolled back, the Lua
/// policy decides again. (Both outcomes of the gate, with the clock given, are in the keyspace's
/// unit tests: here the rates are whatever this machine gives, and a crowd whose rate wanders
/// can arm the gate early; docs/serve.md, "How do policies work across tiers?", says why.)
#[test]
fn auto_runs_live_on_a_leaf_and_trims_it_to_its_working_set() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_parent, leaf) = store_and_leaf(
        dir.path(),
        &[
            "--policy",
            "static-limit",
            "--param",
            "limit=100000",
            "--interval",
            "200ms",
        ],
    );
    let mut c = leaf.client();
    assert_eq!(
        cmd::<String>(
            &mut c,
            &["PLIANT.POLICY", "LOAD", "auto", "efficiency=0.96"]
        ),
        "OK loaded version 2"
    );
    assert_eq!(policy_status(&mut c)["policy"], "auto");
    for i in 0..10 {
        let _: () = cmd(&mut c, &["SET", &format!("crowd{i}"), "x"]);
    }
    // The crowd: 3 s of pipelined reads of 10 keys.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        let mut p = redis::pipe();
        for i in 0..500 {
            p.cmd("GET").arg(format!("crowd{}", i % 10)).ignore();
        }
        let _: () = p.query(&mut c).expect("crowd reads");
    }
    // The reads spread out: a new key every 10 ms, read twice, until auto has armed and
    // trimmed (at most 20 s).
    let mut written = 0;
    let armed = loop {
        let key = format!("new{written}");
        let _: () = cmd(&mut c, &["SET", &key, "y"]);
        assert_eq!(get(&mut c, &key).as_deref(), Some("y"));
        assert_eq!(get(&mut c, &key).as_deref(), Some("y"));
        written += 1;
        std::thread::sleep(Duration::from_millis(10));
        if written % 20 == 0 {
            let s = policy_status(&mut c);
            if !s["auto"].is_null() && s["last_resize"].is_string() {
                break s;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(23),
            "auto never armed: {}",
            policy_status(&mut c)
        );
    };
    let state = &armed["auto"];
    assert!(state["armed_at"].as_f64() > Some(0.0), "{armed}");
    assert!(state["regimes"].as_u64() >= Some(2), "{armed}");
    assert!(state["window_seconds"].as_f64() > Some(0.0), "{armed}");
    let s = stats_until(&mut c, "trimmed below what was written", |s| {
        s["keys"].as_u64().is_some_and(|k| k < written / 2)
    });
    assert!(s["evictions"].as_u64() > Some(0), "{s}");
    // Every key is still served, through the parent.
    for i in 0..10 {
        assert_eq!(get(&mut c, &format!("crowd{i}")).as_deref(), Some("x"));
    }
    let log: Vec<String> = cmd(&mut c, &["PLIANT.POLICY", "LOG", "2"]);
    assert!(
        log.iter().all(|l| l.contains("\"policy\":\"auto\"")),
        "{log:?}"
    );
    assert_eq!(
        cmd::<String>(&mut c, &["PLIANT.POLICY", "ROLLBACK"]),
        "OK rolled back to version 1"
    );
    assert_eq!(policy_status(&mut c)["policy"], "static-limit");
}

/// A node's policy sees every node it knows in `servers`: a parent its children (they report
/// their metrics every interval) and a child its parent (in the reply to its report), under the
/// contract's metric names. The policy here sizes memory by what it sees: 1,000 keys per node
/// known plus the keys the others hold.
#[test]
fn servers_holds_the_parent_and_the_children_that_report() {
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = dir.path().join("count.lua");
    std::fs::write(
        &policy,
        "function when() return true end\n\
         function howmuch()\n\
           local n, others = 0, 0\n\
           for id, s in pairs(servers) do\n\
             n = n + 1\n\
             if id ~= whoami then others = others + (s[\"keys\"] or 0) end\n\
           end\n\
           return 1000 * n + others\n\
         end\n",
    )
    .expect("write the policy");
    let policy = policy.to_str().expect("utf-8 path");
    let with_policy = ["--policy", policy, "--interval", "200ms"];
    let parent = Node::start(
        dir.path(),
        &[&["--store", "store"][..], &with_policy].concat(),
    );
    let at = parent.addr.to_string();
    let leaves: Vec<Node> = (0..2)
        .map(|_| Node::start(dir.path(), &[&["--parent", &at][..], &with_policy].concat()))
        .collect();
    let mut p = parent.client();
    for i in 0..7 {
        let _: () = cmd(&mut p, &["SET", &format!("k{i}"), "v"]);
    }
    // The parent knows itself and two children that hold nothing yet; each leaf knows itself
    // and the parent, which holds 7 keys.
    stats_until(&mut p, "the parent sees two children", |s| {
        s["capacity"] == "3000keys"
    });
    for leaf in &leaves {
        stats_until(&mut leaf.client(), "a leaf sees its parent", |s| {
            s["capacity"] == "2007keys"
        });
    }
    // INFO says who is above and below.
    let info: String = cmd(&mut p, &["INFO", "pliant"]);
    let children: Vec<String> = leaves.iter().map(|l| l.addr.to_string()).collect();
    let line = info
        .lines()
        .find_map(|l| l.strip_prefix("children:"))
        .expect("a children line");
    let mut listed: Vec<&str> = line.split(',').collect();
    listed.sort_unstable();
    let mut expected: Vec<&str> = children.iter().map(String::as_str).collect();
    expected.sort_unstable();
    assert_eq!(listed, expected, "{info}");
    let leaf_info: String = cmd(&mut leaves[0].client(), &["INFO", "pliant"]);
    assert!(leaf_info.contains(&format!("parent:{at}")), "{leaf_info}");
    // A key read through one leaf is held there, and the parent's policy counts it.
    assert_eq!(get(&mut leaves[0].client(), "k1").as_deref(), Some("v"));
    stats_until(&mut p, "the parent sees the child's key", |s| {
        s["capacity"] == "3001keys"
    });
}

/// Audit of b5a8c14: a parent held a write's reply until every tier holding the key had applied
/// its invalidation, and wrote nothing else to the writer's connection meanwhile, pushes
/// included. Two leaves each writing keys the other holds waited for each other's
/// acknowledgement, which could not come until the 2-s timeout cut both off (their memory
/// emptied, requests under way failed). Here each leaf writes the keys the other holds, at the
/// same time, and reads them back so that the other holds them again; no tier may be cut off.
#[test]
fn two_leaves_writing_keys_the_other_holds_do_not_stall_each_other() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (parent, leaves) = hierarchy(dir.path(), 2, "1000keys", &[]);
    let rounds = 150;
    cross_writes(&leaves, rounds);
    let s = stats(&mut parent.client());
    assert_eq!(s["tiers_cut_off"], 0, "{s}");
    for leaf in &leaves {
        let mut c = leaf.client();
        for key in ["a9", "b9"] {
            assert_eq!(get(&mut c, key), Some((rounds - 1).to_string()), "{key}");
        }
    }
}

/// Three levels: two leaves under a mid tier, and a leaf beside the mid tier, all over one store
/// node. A write through any of them is never followed by the old value through another once
/// it is acknowledged, whatever each had cached: the mid tier passes its parent's invalidations
/// on to its children and acknowledges only after they have.
#[test]
fn a_write_is_seen_through_every_tier_of_three_levels() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Node::start(dir.path(), &["--store", "store"]);
    let top = store.addr.to_string();
    let mid = Node::start(dir.path(), &["--parent", &top, "--capacity", "100keys"]);
    let below = mid.addr.to_string();
    let nodes = [
        Node::start(dir.path(), &["--parent", &below]),
        Node::start(dir.path(), &["--parent", &below]),
        Node::start(dir.path(), &["--parent", &top]),
    ];
    let mut c: Vec<redis::Connection> = nodes.iter().map(Node::client).collect();
    for i in 0..150usize {
        let key = format!("key:{}", i % 5);
        let w = i % 3;
        let before: Vec<Option<String>> = c.iter_mut().map(|c| get(c, &key)).collect();
        assert!(
            before.windows(2).all(|p| p[0] == p[1]),
            "step {i}: the tiers agree before the write: {before:?}"
        );
        let expected = if i % 4 == 3 {
            let _: i64 = cmd(&mut c[w], &["DEL", &key]);
            None
        } else {
            let v = format!("v{i}");
            assert_eq!(cmd::<String>(&mut c[w], &["SET", &key, &v]), "OK");
            Some(v)
        };
        for (r, conn) in c.iter_mut().enumerate() {
            assert_eq!(
                get(conn, &key),
                expected,
                "step {i}: read through {r} after {w} wrote"
            );
        }
    }
    let s = stats(&mut mid.client());
    assert_eq!(s["tiers_cut_off"], 0, "{s}");
    assert!(
        s["invalidated"].as_u64() > Some(20),
        "the mid tier dropped copies: {s}"
    );
}

/// Audit of b5a8c14: a mid tier's reader waited for its children's acknowledgements before
/// reading on, and a child waiting for a reply only that reader could read never got the
/// invalidation to acknowledge. A leaf under a mid tier and a leaf beside it each write, at once,
/// keys the other holds; no tier may be cut off.
#[test]
fn cross_writes_through_a_mid_tier_do_not_stall_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Node::start(dir.path(), &["--store", "store"]);
    let top = store.addr.to_string();
    let mid = Node::start(dir.path(), &["--parent", &top]);
    let below = mid.addr.to_string();
    let leaves = [
        Node::start(dir.path(), &["--parent", &below]),
        Node::start(dir.path(), &["--parent", &top]),
    ];
    cross_writes(&leaves, 150);
    for n in [&store, &mid] {
        let s = stats(&mut n.client());
        assert_eq!(s["tiers_cut_off"], 0, "{s}");
    }
}

/// Two leaves, at once, `rounds` times each: read a key the other writes (so this leaf holds
/// it), then write a key the other reads: every write invalidates a copy the other leaf holds.
fn cross_writes(leaves: &[Node], rounds: usize) {
    let workers: Vec<_> = leaves
        .iter()
        .take(2)
        .enumerate()
        .map(|(i, leaf)| {
            let (mine, theirs) = if i == 0 { ("a", "b") } else { ("b", "a") };
            let mut c = leaf.client();
            std::thread::spawn(move || {
                let start = Instant::now();
                for r in 0..rounds {
                    let _: Option<String> = cmd(&mut c, &["GET", &format!("{theirs}{}", r % 10)]);
                    let _: () = cmd(
                        &mut c,
                        &["SET", &format!("{mine}{}", r % 10), &r.to_string()],
                    );
                    assert!(start.elapsed() < Duration::from_secs(60), "round {r}");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("a leaf's writer");
    }
}

/// Audit of 41e67c8: `PLIANT.WRITE` from a client that does not track got ticket 0, and the
/// write was acknowledged before the tiers holding the key had dropped it. Here the one leaf
/// holding the key is stopped (SIGSTOP): the write's reply must wait until the leaf is cut off.
#[test]
fn a_plain_client_s_pliant_write_waits_for_the_tiers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (parent, leaves) = hierarchy(dir.path(), 1, "100keys", &[]);
    let mut p = parent.client();
    let _: () = cmd(&mut p, &["SET", "k", "old"]);
    assert_eq!(get(&mut leaves[0].client(), "k").as_deref(), Some("old"));
    let pid = leaves[0].child.id().to_string();
    signal(&pid, "-STOP");
    let reply: (String, i64) = cmd(&mut p, &["PLIANT.WRITE", "SET", "k", "new"]);
    let cut_off = stats(&mut p)["tiers_cut_off"].clone();
    signal(&pid, "-CONT");
    assert_eq!(reply, ("OK".to_string(), 0));
    assert_eq!(
        cut_off, 1,
        "the reply came only once the stopped leaf was cut off"
    );
}
