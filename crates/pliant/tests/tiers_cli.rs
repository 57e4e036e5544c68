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
    // FLUSHALL through one leaf empties what the other holds too.
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
    let signal = |sig: &str| {
        let ok = Command::new("kill")
            .args([sig, &pid])
            .status()
            .expect("run kill");
        assert!(ok.success(), "kill {sig} {pid}");
    };
    signal("-STOP");
    let threads: Vec<_> = clients
        .drain(..)
        .map(|mut c| std::thread::spawn(move || get(&mut c, "state:42")))
        .collect();
    // Every reader is waiting: one sent the request, the rest joined it.
    let waiting = stats_until(&mut admin, "readers joining the fetch", |s| {
        s["coalesced"].as_u64() == Some(readers - 1)
    });
    signal("-CONT");
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
    assert!(s["keys"].as_u64() <= Some(50), "{s}");
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
