//! The embedded coordination store served over the Redis protocol, so that the nodes of a
//! cluster on one machine share it with no extra process: `pliant cluster up` runs this beside
//! its nodes. Commands (what [`crate::remote::Remote`] sends):
//!
//! ```text
//! AUTH [default] PASSWORD             when the cluster has a password
//! PLIANT.COORD JOIN ID ADDR TTL_MS    a lease for node ID at ADDR
//! PLIANT.COORD KEEPALIVE ID           renew it (-NOLEASE if it lapsed)
//! PLIANT.COORD LEAVE ID               end it
//! PLIANT.COORD GET                    the state as JSON
//! PLIANT.COORD UPDATE VERSION MAP     replace the map if VERSION is current (:1), else :0
//! PLIANT.COORD WATCH                  then a push [pliant.coord, JSON] at every change
//! PLIANT.COORD SPAWN N                start N more nodes (a local cluster's supervisor only):
//!                                     their ids once they have joined
//! PLIANT.COORD RETIRE ID              stop node ID's process (supervisor only) and end its lease
//! ```

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use pliant_proto::frame::{Frame, FrameError, Limits, Protocol};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::coord::{CoordError, Embedded};
use crate::map::{Member, SlotMap};

/// How often lapsed leases are looked for: a few times per second, so a dead node leaves the
/// member list within a fraction of a second of its lease's end.
const REAP_EVERY: Duration = Duration::from_millis(250);

/// A reaper this late was stalled with the whole process (the lease is 6 s; a tick is 250 ms).
const STALLED: Duration = Duration::from_secs(1);

/// Leases a node may ask for: long enough to outlast a scheduling hiccup, short enough that a
/// dead node is noticed within minutes at worst.
const TTL_MS: std::ops::RangeInclusive<u64> = 100..=600_000;

/// Requests refused before AUTH succeeds (NOAUTH, WRONGPASS), at most; the connection closes
/// after them, as a striped cache server closes one (`MAX_REFUSED` there). A node or tool
/// authenticates first, so only a client that has not the password meets it: without it,
/// one connection could keep the store answering refusals (or guessing passwords) for ever.
const MAX_REFUSED: u32 = 8;

/// What one request may make this server allocate: the longest is an UPDATE with a slot map
/// (tens of KiB for the fragmented maps of many nodes); no request has more than 5 arguments.
const LIMITS: Limits = Limits {
    max_bulk: 16 * 1024 * 1024,
    max_elements: 8,
    max_depth: 1,
    max_inline: 4096,
    unauthenticated: false,
};

/// What a supervisor (`pliant cluster up`) is asked to do with node processes.
#[derive(Debug)]
pub enum Supervise {
    /// Start this many more nodes; reply with their ids once they hold leases.
    Spawn(
        usize,
        tokio::sync::oneshot::Sender<Result<Vec<String>, crate::local::UpError>>,
    ),
    /// Stop this node's process cleanly and end its lease.
    Retire(
        String,
        tokio::sync::oneshot::Sender<Result<(), crate::local::UpError>>,
    ),
}

/// Serves `coord` on `listener` until `stop` turns true; SPAWN and RETIRE go to `supervisor`,
/// when there is one. Without `coord` (a cluster whose state is in etcd) only SPAWN and
/// RETIRE are served.
pub async fn serve(
    listener: TcpListener,
    coord: Option<Arc<Embedded>>,
    password: Option<String>,
    supervisor: Option<tokio::sync::mpsc::Sender<Supervise>>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let reaper = coord.clone().map(|coord| {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(REAP_EVERY);
            let mut last = tokio::time::Instant::now();
            loop {
                tick.tick().await;
                // A reaper that ran far later than its tick means this process was stalled: the
                // nodes' renewals may be waiting unread in its sockets, so the time goes back
                // to their leases before they are judged.
                let now = tokio::time::Instant::now();
                let gap = now - last;
                last = now;
                if gap > STALLED {
                    coord.forgive(gap - REAP_EVERY);
                }
                coord.expire();
            }
        })
    });
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let (coord, password, stop) = (coord.clone(), password.clone(), stop.clone());
                    let supervisor = supervisor.clone();
                    conns.spawn(async move {
                        if let Err(e) =
                            connection(stream, coord, password.as_deref(), supervisor, stop).await
                        {
                            tracing::debug!("coordination client: {e}");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!("coordination store: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = stop.changed() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    if let Some(reaper) = reaper {
        reaper.abort();
    }
    conns.abort_all();
}

async fn connection(
    mut stream: TcpStream,
    coord: Option<Arc<Embedded>>,
    password: Option<&str>,
    supervisor: Option<tokio::sync::mpsc::Sender<Supervise>>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    let mut buf = BytesMut::with_capacity(4096);
    let mut authenticated = password.is_none();
    let mut refused = 0u32;
    loop {
        // As a node's clients: before AUTH, no UPDATE-sized requests (see `Limits`).
        let limits = Limits {
            unauthenticated: !authenticated,
            ..LIMITS
        };
        let args = loop {
            match Frame::parse_request(&buf, &limits) {
                Ok((frame, used)) => {
                    let _ = buf.split_to(used);
                    break request_args(frame);
                }
                Err(FrameError::Incomplete) => {}
                Err(FrameError::Protocol(why)) => {
                    reply(
                        &mut stream,
                        Frame::error(format!("ERR Protocol error: {why}")),
                    )
                    .await?;
                    return Ok(());
                }
            }
            tokio::select! {
                n = stream.read_buf(&mut buf) => if n? == 0 { return Ok(()) },
                _ = stop.changed() => return Ok(()),
            }
        };
        let name = args
            .first()
            .map(|a| a.to_ascii_uppercase())
            .unwrap_or_default();
        let sub = args
            .get(1)
            .map(|a| a.to_ascii_uppercase())
            .unwrap_or_default();
        let frame = match (name.as_slice(), authenticated) {
            (b"AUTH", _) => {
                let ok = match (password, &args[1..]) {
                    (Some(p), [given]) => pliant_proto::auth::same_password(p, given),
                    (Some(p), [user, given]) => {
                        // The password is compared whatever the user: the time says nothing.
                        let pass_ok = pliant_proto::auth::same_password(p, given);
                        pass_ok & (user.as_ref() == b"default")
                    }
                    _ => false,
                };
                authenticated |= ok;
                match (password, ok) {
                    (None, _) => {
                        Frame::error("ERR AUTH <password> called without any password configured")
                    }
                    (Some(_), true) => Frame::ok(),
                    (Some(_), false) => Frame::error(
                        "WRONGPASS invalid username-password pair or user is disabled.",
                    ),
                }
            }
            (_, false) => Frame::error("NOAUTH Authentication required."),
            (b"PING", true) => Frame::Simple("PONG".into()),
            (b"PLIANT.COORD", true) if matches!(sub.as_slice(), b"SPAWN" | b"RETIRE") => {
                supervise(supervisor.as_ref(), &sub, &args[2.min(args.len())..]).await
            }
            (b"PLIANT.COORD", true) => match &coord {
                Some(coord) if sub.as_slice() == b"WATCH" => {
                    return watch(stream, coord, stop).await;
                }
                // An update saves (an fsync, which may wait seconds behind the disk's other
                // writes) off this runtime's one thread, which serves every node's lease.
                Some(coord) if matches!(sub.as_slice(), b"UPDATE" | b"BALANCER") => {
                    let (coord, rest) = (coord.clone(), args[2.min(args.len())..].to_vec());
                    tokio::task::spawn_blocking(move || run(&coord, &sub, &rest))
                        .await
                        .unwrap_or_else(|e| Frame::error(format!("ERR the update failed: {e}")))
                }
                Some(coord) => run(coord, &sub, &args[2.min(args.len())..]),
                None => Frame::error(
                    "ERR this is a supervisor only (SPAWN, RETIRE): the cluster's state is in etcd",
                ),
            },
            _ => Frame::error(format!(
                "ERR unknown command '{}' (this is a coordination store: PLIANT.COORD only)",
                String::from_utf8_lossy(&name)
            )),
        };
        if !authenticated && password.is_some() {
            refused += 1;
            if refused > MAX_REFUSED {
                let closing =
                    Frame::error("NOAUTH Authentication required; closing the connection");
                reply(&mut stream, closing).await?;
                return Ok(());
            }
        }
        reply(&mut stream, frame).await?;
    }
}

fn request_args(frame: Frame) -> Vec<Bytes> {
    match frame {
        Frame::Array(items) => items
            .into_iter()
            .filter_map(|f| match f {
                Frame::Bulk(b) => Some(b),
                Frame::Simple(s) => Some(Bytes::from(s)),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

async fn reply(stream: &mut TcpStream, frame: Frame) -> std::io::Result<()> {
    let mut out = Vec::new();
    frame.write(Protocol::Resp3, &mut out);
    stream.write_all(&out).await
}

fn text(b: &[u8]) -> Option<&str> {
    std::str::from_utf8(b).ok()
}

/// One request other than WATCH.
fn run(coord: &Embedded, sub: &[u8], args: &[Bytes]) -> Frame {
    let error = |e: CoordError| match e {
        CoordError::NoLease(id) => Frame::error(format!("NOLEASE node {id} holds no lease")),
        e => Frame::error(format!("ERR {e}")),
    };
    match (sub, args) {
        (b"JOIN", [id, addr, ttl]) => {
            let (Some(id), Some(addr), Some(ttl)) = (
                text(id),
                text(addr).and_then(|a| a.parse().ok()),
                text(ttl)
                    .and_then(|t| t.parse::<u64>().ok())
                    .filter(|t| TTL_MS.contains(t)),
            ) else {
                return Frame::error(format!(
                    "ERR JOIN wants a node id, an ADDR:PORT and a ttl of {}-{} ms",
                    TTL_MS.start(),
                    TTL_MS.end()
                ));
            };
            let me = Member {
                id: id.to_string(),
                addr,
            };
            match coord.join_now(me, Duration::from_millis(ttl)) {
                Ok(()) => Frame::ok(),
                Err(e) => error(e),
            }
        }
        (b"KEEPALIVE", [id]) => match coord.keepalive_now(&String::from_utf8_lossy(id)) {
            Ok(()) => Frame::ok(),
            Err(e) => error(e),
        },
        (b"LEAVE", [id]) => {
            coord.leave_now(&String::from_utf8_lossy(id));
            Frame::ok()
        }
        (b"GET", []) => Frame::bulk(coord.current().to_json()),
        (b"UPDATE", [version, map]) => {
            let Some(version) = text(version).and_then(|v| v.parse().ok()) else {
                return Frame::error("ERR UPDATE wants the version the map was read at");
            };
            match text(map).map(SlotMap::from_json) {
                None => Frame::error("ERR the map is not UTF-8"),
                Some(Err(e)) => Frame::error(format!("ERR {e}")),
                Some(Ok(map)) => match coord.update_now(version, map) {
                    Ok(done) => Frame::Integer(i64::from(done)),
                    Err(e) => error(e),
                },
            }
        }
        (b"BALANCER", [record]) => {
            match text(record).map(serde_json::from_str::<crate::coord::BalancerRecord>) {
                None => Frame::error("ERR the balancer record is not UTF-8"),
                Some(Err(e)) => Frame::error(format!("ERR balancer record: {e}")),
                Some(Ok(r)) => match coord.set_balancer_now(r) {
                    Ok(v) => Frame::Integer(i64::try_from(v).unwrap_or(i64::MAX)),
                    Err(e) => error(e),
                },
            }
        }
        _ => Frame::error(format!(
            "ERR unknown or malformed PLIANT.COORD {} (JOIN, KEEPALIVE, LEAVE, GET, UPDATE, BALANCER, WATCH)",
            String::from_utf8_lossy(sub)
        )),
    }
}

/// SPAWN and RETIRE, handed to the supervisor.
async fn supervise(
    supervisor: Option<&tokio::sync::mpsc::Sender<Supervise>>,
    sub: &[u8],
    args: &[Bytes],
) -> Frame {
    let Some(sv) = supervisor else {
        return Frame::error(
            "ERR no supervisor: this coordination store does not start or stop nodes (start them with pliant serve --coord)",
        );
    };
    let gone = || Frame::error("ERR the supervisor is stopping");
    match (sub, args) {
        (b"SPAWN", [n]) => {
            let Some(n) = text(n)
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|n| (1..=64).contains(n))
            else {
                return Frame::error("ERR SPAWN wants a node count of 1-64");
            };
            let (tx, rx) = tokio::sync::oneshot::channel();
            if sv.send(Supervise::Spawn(n, tx)).await.is_err() {
                return gone();
            }
            match rx.await {
                Ok(Ok(ids)) => Frame::Array(ids.into_iter().map(Frame::bulk).collect()),
                Ok(Err(e)) => Frame::error(format!("ERR {}", pliant_proto::error::chain(&e))),
                Err(_) => gone(),
            }
        }
        (b"RETIRE", [id]) => {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let id = String::from_utf8_lossy(id).into_owned();
            if sv.send(Supervise::Retire(id, tx)).await.is_err() {
                return gone();
            }
            match rx.await {
                Ok(Ok(())) => Frame::ok(),
                Ok(Err(e)) => Frame::error(format!("ERR {}", pliant_proto::error::chain(&e))),
                Err(_) => gone(),
            }
        }
        _ => Frame::error("ERR SPAWN N or RETIRE ID"),
    }
}

/// Pushes the state now and at every change, until the client goes or the server stops.
async fn watch(
    mut stream: TcpStream,
    coord: &Embedded,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<()> {
    let mut rx = coord.subscribe();
    let mut sink = [0u8; 64];
    loop {
        let state = rx.borrow_and_update().clone();
        let push = Frame::Push(vec![
            Frame::bulk(Bytes::from_static(b"pliant.coord")),
            Frame::bulk(state.to_json()),
        ]);
        reply(&mut stream, push).await?;
        tokio::select! {
            changed = rx.changed() => if changed.is_err() { return Ok(()) },
            // A watcher sends nothing more; a read of 0 bytes is its leaving.
            n = stream.read(&mut sink) => if n? == 0 { return Ok(()) },
            _ = stop.changed() => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coord::Coord;
    use crate::remote::Remote;
    use pliant_proto::Dialer;

    fn member(i: u8) -> Member {
        Member {
            id: format!("{i:040x}"),
            addr: std::net::SocketAddr::from(([127, 0, 0, 1], 7000 + u16::from(i))),
        }
    }

    /// A store with `password` served on a free loopback port: its address, and what stops it.
    async fn start(
        password: &str,
    ) -> (std::net::SocketAddr, impl std::future::Future<Output = ()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let server = tokio::spawn(serve(
            listener,
            Some(Arc::new(Embedded::new())),
            Some(password.into()),
            None,
            stop_rx,
        ));
        let stop = async move {
            let _ = stop_tx.send(true);
            server.await.expect("server");
        };
        (addr, stop)
    }

    /// Sends `bytes`, half-closes, and returns all that comes back until the close (at most
    /// 10 s). A server that closes early cuts the sending short, and may reset the connection:
    /// what it said before still counts.
    async fn exchange(addr: std::net::SocketAddr, bytes: &[u8]) -> String {
        let talk = async {
            let mut s = TcpStream::connect(addr).await.expect("connect");
            if s.write_all(bytes).await.is_ok() {
                let _ = s.shutdown().await;
            }
            let mut out = Vec::new();
            let _ = s.read_to_end(&mut out).await;
            String::from_utf8_lossy(&out).into_owned()
        };
        tokio::time::timeout(Duration::from_secs(10), talk)
            .await
            .expect("an answer and a close within 10 s")
    }

    /// Regression: an UPDATE saved (an fsync) on the server's runtime thread, the supervisor's
    /// only one, so a save waiting behind the disk's other writes held up every node's lease
    /// renewal and state read ("no reply within 5s", seen under a loaded node's writes). A
    /// save that does not end (its file a FIFO nobody reads) leaves other requests answered.
    #[test]
    fn a_save_that_waits_holds_up_no_other_request() {
        use std::io::{Read as _, Write as _};
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("cluster.json");
        let coord = Arc::new(Embedded::open(&file).expect("open"));
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        std_listener.set_nonblocking(true).expect("nonblocking");
        let addr = std_listener.local_addr().expect("addr");
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        // Served as `cluster up` serves it: a runtime of one thread.
        let server = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let listener = TcpListener::from_std(std_listener).expect("listener");
                serve(listener, Some(coord), None, None, stop_rx).await;
            });
        });
        let tmp = file.with_extension("json.tmp");
        crate::map::tests::mkfifo(&tmp);
        let call = move |bytes: Vec<u8>| {
            let mut s = std::net::TcpStream::connect(addr).expect("connect");
            s.set_read_timeout(Some(Duration::from_secs(3)))
                .expect("timeout");
            s.write_all(&bytes).expect("send");
            let mut out = [0u8; 256];
            let n = s.read(&mut out).map_err(|e| e.kind());
            n.map(|n| String::from_utf8_lossy(&out[..n]).into_owned())
        };
        let map = SlotMap::even(1, &[member(1)]).to_json();
        let update = format!(
            "*4\r\n$12\r\nPLIANT.COORD\r\n$6\r\nUPDATE\r\n$1\r\n0\r\n${}\r\n{map}\r\n",
            map.len()
        )
        .into_bytes();
        let updating = std::thread::spawn(move || call(update));
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            !updating.is_finished(),
            "the save waits for the FIFO's reader"
        );
        let other = call(b"*2\r\n$12\r\nPLIANT.COORD\r\n$3\r\nGET\r\n".to_vec());
        // The save goes on (and fails: a FIFO cannot be synced).
        let mut fifo = std::fs::File::open(&tmp).expect("open the FIFO");
        fifo.read_to_end(&mut Vec::new()).expect("read the FIFO");
        let other = other.expect("a GET answered while a save waited");
        assert!(other.contains("\"version\":0"), "{other}");
        let updated = updating.join().expect("update").expect("an answer");
        assert!(updated.starts_with('-'), "the save failed: {updated}");
        let _ = stop_tx.send(true);
        server.join().expect("server");
    }

    /// As a node's clients (CVE-2021-32675): before AUTH no argument over 16 KiB is waited for,
    /// however much of it comes; after it, an UPDATE of 100 KiB is read.
    #[tokio::test]
    async fn an_unauthenticated_client_cannot_make_the_coordination_store_buffer_a_large_bulk() {
        let (addr, stop) = start("pw").await;
        let mut claim =
            b"*4\r\n$12\r\nPLIANT.COORD\r\n$6\r\nUPDATE\r\n$1\r\n0\r\n$16000000\r\n".to_vec();
        assert_eq!(
            exchange(addr, &claim).await,
            "-ERR Protocol error: unauthenticated bulk length\r\n"
        );
        claim.extend(std::iter::repeat_n(b'{', 1 << 20));
        assert_eq!(
            exchange(addr, &claim).await,
            "-ERR Protocol error: unauthenticated bulk length\r\n"
        );
        let mut update =
            b"AUTH pw\r\n*4\r\n$12\r\nPLIANT.COORD\r\n$6\r\nUPDATE\r\n$1\r\n0\r\n$102400\r\n"
                .to_vec();
        update.extend(std::iter::repeat_n(b'{', 102_400));
        update.extend_from_slice(b"\r\n");
        let reply = exchange(addr, &update).await;
        assert!(
            reply.starts_with("+OK\r\n-ERR ") && !reply.contains("Protocol error"),
            "{reply:?}"
        );
        stop.await;
    }

    /// A client without the password gets eight refusals (NOAUTH or WRONGPASS) on one
    /// connection, then the connection closes; a client that authenticates within them is
    /// served as usual.
    #[tokio::test]
    async fn a_connection_is_closed_after_eight_refusals_before_auth() {
        let (addr, stop) = start("pw").await;
        let wire = exchange(addr, &b"PLIANT.COORD GET\r\nAUTH nope\r\n".repeat(10)).await;
        let lines: Vec<&str> = wire.lines().collect();
        assert_eq!(lines.len(), 9, "{wire}");
        assert!(
            lines[..8]
                .iter()
                .all(|l| l.starts_with("-NOAUTH") || l.starts_with("-WRONGPASS")),
            "{wire}"
        );
        assert_eq!(
            lines[8],
            "-NOAUTH Authentication required; closing the connection"
        );
        let mut late = b"PLIANT.COORD GET\r\n".repeat(7);
        late.extend_from_slice(b"AUTH pw\r\nPLIANT.COORD GET\r\n");
        let wire = exchange(addr, &late).await;
        assert!(
            wire.contains("+OK\r\n") && wire.contains("\"version\"") && !wire.contains("closing"),
            "{wire}"
        );
        stop.await;
    }

    /// AUTH takes the password alone or with the user `default`, compared by the node's
    /// constant-time compare ([`pliant_proto::auth::same_password`]): a prefix, an extension or
    /// another user is refused.
    #[tokio::test]
    async fn the_coordination_store_takes_exactly_its_password() {
        let (addr, stop) = start("s3cret").await;
        let welcome = "+OK\r\n+PONG\r\n";
        let refused = "-WRONGPASS invalid username-password pair or user is disabled.\r\n-NOAUTH Authentication required.\r\n";
        for (auth, reply) in [
            ("AUTH s3cret", welcome),
            ("AUTH default s3cret", welcome),
            ("AUTH admin s3cret", refused),
            ("AUTH s3cre", refused),
            ("AUTH s3cret!", refused),
            ("AUTH \"\"", refused),
            ("AUTH S3CRET", refused),
        ] {
            assert_eq!(
                exchange(addr, format!("{auth}\r\nPING\r\n").as_bytes()).await,
                reply,
                "{auth}"
            );
        }
        stop.await;
    }

    #[tokio::test]
    async fn the_served_store_checks_passwords_leases_and_versions() {
        let (addr, stop) = start("pw").await;

        let wrong = Arc::new(Remote::new(addr, &Dialer::default().password(Some("nope"))));
        assert!(
            matches!(wrong.state().await, Err(CoordError::Refused(e)) if e.starts_with("WRONGPASS"))
        );
        let none = Arc::new(Remote::new(addr, &Dialer::default()));
        assert!(
            matches!(none.state().await, Err(CoordError::Refused(e)) if e.starts_with("NOAUTH"))
        );

        let c = Arc::new(Remote::new(addr, &Dialer::default().password(Some("pw"))));
        // A lease longer than ten minutes is refused (one that never ends would keep a dead
        // node alive; one that overflows the clock would break the store).
        assert!(matches!(
            c.join(member(1), Duration::from_secs(u64::MAX / 2000)).await,
            Err(CoordError::Refused(e)) if e.contains("ttl")
        ));
        c.join(member(1), Duration::from_secs(5))
            .await
            .expect("join");
        let mut w = c.watch().await.expect("watch");
        assert_eq!(w.borrow_and_update().members, vec![member(1)]);
        assert!(
            c.update(0, SlotMap::even(0, &[member(1)]))
                .await
                .expect("update")
        );
        // A writer that read version 0 too loses.
        assert!(!c.update(0, SlotMap::even(0, &[])).await.expect("update"));
        tokio::time::timeout(Duration::from_secs(5), async {
            while w.borrow_and_update().map.version() < 1 {
                w.changed().await.expect("watch");
            }
        })
        .await
        .expect("the watch hears of the update");
        assert_eq!(w.borrow().map.assigned(), usize::from(crate::SLOTS));
        assert!(matches!(
            c.keepalive(&member(2).id).await,
            Err(CoordError::NoLease(id)) if id == member(2).id
        ));
        stop.await;
    }
}
