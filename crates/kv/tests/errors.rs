//! The data plane's errors are typed: a store failure that makes writes refused carries the
//! store's error, a failed fetch from the parent is one `UpstreamError` shared by every reader
//! that joined it, and a parent that refuses the tier's handshake is `UpstreamError::Connect`
//! with the client's error as its source. Each matches on the variant, not the text.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use pliant_cache::Capacity;
use pliant_kv::keyspace::{Fetched, Want};
use pliant_kv::upstream::{Upstream, UpstreamError};
use pliant_kv::{Keyspace, KvError, Value};
use pliant_proto::ClientError;
use pliant_store::{FaultyStore, MemStore, Store, StoreError};

/// The bug: `KvError::Failed` held the store's failure as a string, so a caller could not tell
/// an injected fault from a full disk, nor reach the store's own error.
#[test]
fn a_failed_commit_refuses_later_writes_with_the_store_s_error_typed() {
    let faulty = FaultyStore::new(MemStore::new());
    let faults = faulty.faults();
    let store: Arc<dyn Store> = Arc::new(faulty);
    let mut k = Keyspace::new("lru", Capacity::Keys(10), Some(store)).expect("keyspace");
    k.set(Bytes::from_static(b"a"), Value::new("1"))
        .expect("set");
    faults.fail_write(1);
    let first = k.commit().expect_err("the injected fault");
    let KvError::Failed(first) = first else {
        panic!("{first:?}");
    };
    assert!(
        matches!(*first, StoreError::Injected { op: "batch" }),
        "{first:?}"
    );
    for refused in [
        k.set(Bytes::from_static(b"b"), Value::new("2"))
            .expect_err("refused"),
        k.commit().expect_err("refused"),
    ] {
        let KvError::Failed(why) = &refused else {
            panic!("{refused:?}");
        };
        assert!(
            Arc::ptr_eq(why, &first),
            "every refusal carries the first failure"
        );
        // The cause is told once, after the refusal.
        let shown = pliant_proto::error::chain(&refused);
        assert_eq!(shown.matches("injected fault").count(), 1, "{shown}");
    }
}

/// The bug: a fetch's error was a `String` (`Fetched = Result<_, String>`): the readers that
/// joined a fetch got text, not the parent's typed error.
#[tokio::test]
async fn every_reader_that_joined_a_failed_fetch_gets_the_same_typed_error() {
    let parent: SocketAddr = "127.0.0.1:7000".parse().expect("addr");
    let mut k = Keyspace::over_parent("lru", Capacity::Keys(4)).expect("keyspace");
    let Want::Fetch(done) = k.want(b"a", 0) else {
        panic!("the first reader fetches");
    };
    let joined: Vec<_> = (0..3)
        .map(|_| match k.want(b"a", 0) {
            Want::Join(f) => f,
            w => panic!("later readers join: {w:?}"),
        })
        .collect();
    let failed: Fetched = Err(Arc::new(UpstreamError::Refused {
        addr: parent,
        reply: "ERR the parent's store failed".into(),
    }));
    k.fetched(b"a", &failed);
    done.done(&failed);
    let Err(sent) = &failed else { unreachable!() };
    for f in joined {
        let got = f.wait().await.expect_err("the fetch failed");
        assert!(
            matches!(&*got, UpstreamError::Refused { addr, .. } if *addr == parent),
            "{got:?}"
        );
        assert!(Arc::ptr_eq(&got, sent), "shared, not copied");
    }
    assert!(matches!(k.want(b"a", 0), Want::Fetch(_)), "nothing kept");

    // A fetcher that goes away without an answer: its readers hear of it, typed.
    let Want::Fetch(done) = k.want(b"b", 0) else {
        panic!("fetch b");
    };
    let Want::Join(joined) = k.want(b"b", 0) else {
        panic!("join b");
    };
    drop(done);
    let got = joined.wait().await.expect_err("abandoned");
    assert!(matches!(*got, UpstreamError::Abandoned), "{got:?}");
}

/// A parent that refuses every password, on a loopback port chosen at run time: it answers the
/// first command (the tier's `HELLO 3 AUTH default <password>`) with `-WRONGPASS` and passes on
/// what it read.
fn wrongpass_parent() -> (SocketAddr, std::sync::mpsc::Receiver<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let Ok((mut s, _)) = listener.accept() else {
            return;
        };
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut got = Vec::new();
        let mut buf = [0; 512];
        let start = Instant::now();
        // HELLO 3 AUTH default <password>: five bulk strings, whole once the 11th line ends.
        while got.iter().filter(|&&b| b == b'\n').count() < 11
            && start.elapsed() < Duration::from_secs(10)
        {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        let _ = s.write_all(b"-WRONGPASS invalid username-password pair\r\n");
        let _ = tx.send(got);
    });
    (addr, rx)
}

/// The bug: `UpstreamError::Connect` held the client's error as a string (`why`), and the tier
/// built its `Dialer` (address, password) again at every dial. Now the dialer is built once with
/// the password, and a refused password is `ClientError::Auth` under `Connect`.
#[tokio::test]
async fn a_parent_that_refuses_the_password_is_a_connect_error_with_the_client_s_auth_error() {
    let (addr, sent) = wrongpass_parent();
    let up = Upstream::new(
        addr,
        Some("s3cret".into()),
        Duration::from_secs(5),
        Weak::new(),
    );
    let e = up
        .call(vec![Bytes::from_static(b"PING")], None)
        .await
        .expect_err("the password is refused");
    let UpstreamError::Connect { addr: at, source } = &e else {
        panic!("{e:?}");
    };
    assert_eq!(*at, addr);
    assert!(matches!(**source, ClientError::Auth { .. }), "{source:?}");
    let hello = sent
        .recv_timeout(Duration::from_secs(10))
        .expect("the parent read the handshake");
    let hello = String::from_utf8_lossy(&hello);
    assert!(
        hello.contains("HELLO") && hello.contains("s3cret"),
        "the dialer carries the password: {hello:?}"
    );
    assert_eq!(
        pliant_proto::error::chain(&e),
        format!("parent {addr}: WRONGPASS invalid username-password pair"),
        "each part once"
    );
}
