//! The client against a scripted server on a loopback port chosen at run time: the handshake
//! (AUTH; HELLO 3 carrying the password), typed errors (a refused password, a silent node, a
//! bad frame, a closed connection), and pushes, which an async call skips and `read` returns.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pliant_proto::client::Wait;
use pliant_proto::frame::{Frame, FrameError, Limits};
use pliant_proto::{Client, ClientError, Dialer};

type Seen = Vec<Vec<Vec<u8>>>;

/// A server that takes one connection (waiting up to 10 s for it) and answers each request
/// with the raw bytes `answer` returns (`None` closes the connection); the thread returns the
/// requests it saw once the client is gone.
fn scripted(
    mut answer: impl FnMut(&[Vec<u8>]) -> Option<Vec<u8>> + Send + 'static,
) -> (String, JoinHandle<Seen>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr").to_string();
    l.set_nonblocking(true).expect("nonblocking");
    let t = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut s = loop {
            match l.accept() {
                Ok((s, _)) => break s,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => panic!("no client within 10 s: {e}"),
            }
        };
        s.set_nonblocking(false).expect("blocking");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut seen = Vec::new();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            match Frame::parse_request(&buf, &Limits::default()) {
                Ok((Frame::Array(items), used)) => {
                    buf.drain(..used);
                    let args: Vec<Vec<u8>> = items
                        .into_iter()
                        .map(|f| match f {
                            Frame::Bulk(b) => b.to_vec(),
                            other => panic!("not a bulk string: {other:?}"),
                        })
                        .collect();
                    let reply = answer(&args);
                    seen.push(args);
                    match reply {
                        Some(r) => s.write_all(&r).expect("write"),
                        None => return seen,
                    }
                    continue;
                }
                Ok((other, _)) => panic!("not a request: {other:?}"),
                Err(FrameError::Incomplete) => {}
                Err(e) => panic!("{e}"),
            }
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => return seen,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    });
    (addr, t)
}

fn args(words: &[&str]) -> Vec<Vec<u8>> {
    words.iter().map(|w| w.as_bytes().to_vec()).collect()
}

#[test]
fn a_refused_password_is_an_auth_error_naming_the_node() {
    let (addr, server) =
        scripted(|_| Some(b"-WRONGPASS invalid username-password pair\r\n".to_vec()));
    let e = Dialer::new(&addr)
        .password(Some("pw"))
        .connect()
        .expect_err("refused");
    let ClientError::Auth { addr: at, message } = &e else {
        panic!("not an auth error: {e:?}");
    };
    assert_eq!(at, &addr);
    assert!(message.starts_with("WRONGPASS"), "{message}");
    assert!(
        e.to_string().starts_with(&format!("{addr}: WRONGPASS")),
        "{e}"
    );
    assert!(!e.reason().contains(&addr), "{}", e.reason());
    assert_eq!(e.addr(), addr);
    assert_eq!(server.join().expect("server"), vec![args(&["AUTH", "pw"])]);
}

#[test]
fn resp3_dials_with_hello_carrying_the_password() {
    let (addr, server) = scripted(|a| match a[0].as_slice() {
        b"HELLO" => Some(b"%1\r\n+proto\r\n:3\r\n".to_vec()),
        b"PING" => Some(b"+PONG\r\n".to_vec()),
        _ => None,
    });
    let mut c = Dialer::new(&addr)
        .password(Some("pw"))
        .resp3()
        .connect()
        .expect("connect");
    assert_eq!(
        c.call(&[b"PING"]).expect("ping"),
        Frame::Simple("PONG".into())
    );
    drop(c);
    assert_eq!(
        server.join().expect("server"),
        vec![
            args(&["HELLO", "3", "AUTH", "default", "pw"]),
            args(&["PING"])
        ]
    );
}

#[test]
fn hello_refused_without_a_password_is_not_an_auth_error() {
    let (addr, server) = scripted(|_| Some(b"-NOPROTO unsupported protocol version\r\n".to_vec()));
    let e = Dialer::new(&addr).resp3().connect().expect_err("refused");
    assert!(
        matches!(&e, ClientError::Refused { command, message, .. }
            if command == "HELLO" && message.starts_with("NOPROTO")),
        "{e:?}"
    );
    server.join().expect("server");
}

#[test]
fn a_silent_node_is_a_timeout_for_both_clients() {
    let after = Duration::from_millis(200);
    let (addr, server) = scripted(|_| Some(Vec::new()));
    let mut c = Dialer::new(&addr)
        .io_timeout(Some(after))
        .connect()
        .expect("connect");
    let started = Instant::now();
    let e = c.call(&[b"PING"]).expect_err("silent");
    assert!(
        matches!(e, ClientError::Timeout { waited: Wait::Reply, after: a, .. } if a == after),
        "{e:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    drop(c);
    server.join().expect("server");

    let (addr, server) = scripted(|_| Some(Vec::new()));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let e = rt.block_on(async {
        let mut c = Dialer::new(&addr)
            .io_timeout(Some(after))
            .connect_async()
            .await
            .expect("connect");
        c.call(&[b"PING"]).await.expect_err("silent")
    });
    assert!(
        matches!(e, ClientError::Timeout { waited: Wait::Reply, after: a, .. } if a == after),
        "{e:?}"
    );
    assert_eq!(e.reason(), "no reply within 200ms");
    server.join().expect("server");
}

#[tokio::test]
async fn the_async_call_skips_pushes_that_read_returns() {
    let (addr, server) = scripted(|a| match a[0].as_slice() {
        // A push ahead of the reply, as a tracking connection may get one.
        b"GET" => Some(b">2\r\n+invalidate\r\n*1\r\n$1\r\nk\r\n$1\r\nv\r\n".to_vec()),
        // A push on its own, and a reply read ahead of being asked for.
        b"WATCH" => Some(b">1\r\n+news\r\n+PONG\r\n+EXTRA\r\n".to_vec()),
        _ => None,
    });
    let mut c = Dialer::new(&addr).connect_async().await.expect("connect");
    assert_eq!(
        c.call(&[b"GET", b"k"]).await.expect("get"),
        Frame::bulk("v")
    );
    c.send(&[b"WATCH"]).await.expect("send");
    assert_eq!(
        c.read().await.expect("push"),
        Frame::Push(vec![Frame::Simple("news".into())])
    );
    assert_eq!(c.read().await.expect("reply"), Frame::Simple("PONG".into()));
    // What was read but not parsed goes to a caller with its own reader loop.
    let (_stream, buf) = c.into_parts();
    assert_eq!(&buf[..], b"+EXTRA\r\n");
    drop(_stream);
    server.join().expect("server");
}

#[test]
fn a_bad_reply_is_a_protocol_error_and_a_close_is_closed() {
    let (addr, server) = scripted(|_| Some(b"?what\r\n".to_vec()));
    let mut c = Client::connect(&addr, None).expect("connect");
    let e = c.call(&[b"PING"]).expect_err("bad frame");
    assert!(matches!(e, ClientError::Protocol { .. }), "{e:?}");
    drop(c);
    server.join().expect("server");

    let (addr, server) = scripted(|_| None);
    let mut c = Client::connect(&addr, None).expect("connect");
    let e = c.call(&[b"PING"]).expect_err("closed");
    assert!(matches!(&e, ClientError::Closed(a) if *a == addr), "{e:?}");
    server.join().expect("server");
}

#[test]
fn a_dialer_keeps_its_password_out_of_debug() {
    let d = Dialer::new("127.0.0.1:1").password(Some("s3cret"));
    let shown = format!("{d:?}");
    assert!(
        !shown.contains("s3cret") && shown.contains("redacted"),
        "{shown}"
    );
}

#[test]
fn a_template_aimed_at_a_node_keeps_its_password_and_timeouts() {
    let (addr, server) = scripted(|a| match a[0].as_slice() {
        b"AUTH" => Some(b"+OK\r\n".to_vec()),
        b"PING" => Some(b"+PONG\r\n".to_vec()),
        _ => None,
    });
    let template = Dialer::default()
        .password(Some("pw"))
        .io_timeout(Some(Duration::from_secs(7)));
    let aimed = template.to(&addr);
    assert_eq!((template.addr(), aimed.addr()), ("", addr.as_str()));
    assert!(
        format!("{aimed:?}").contains("io_timeout: Some(7s)"),
        "{aimed:?}"
    );
    let mut c = aimed.connect().expect("connect");
    assert_eq!(
        c.call(&[b"PING"]).expect("ping"),
        Frame::Simple("PONG".into())
    );
    drop(c);
    assert_eq!(
        server.join().expect("server"),
        vec![args(&["AUTH", "pw"]), args(&["PING"])]
    );
    // The template itself reaches no node.
    assert!(template.connect().is_err());
}
