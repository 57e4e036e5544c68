//! `PLIANT.NETPROBE node bytes`: how fast this node reaches another node of its cluster, one
//! way, in bytes per second. A rescale's transfer time `T_t` (Pufferscale's) is the bytes each
//! node sends or receives over its link, and a slot move's copy goes source node to target
//! node (`PLIANT.MIGRATE`): the link that counts is the one between them, which the process
//! that runs the rescale (on a login node, say) may not share. So the source measures it.
//!
//! The node sends an `ECHO` of `bytes` to the other node, once to open the connection's
//! buffers, then [`ROUNDS`] times, and replies with the median of `2 × bytes / round trip`
//! (the payload goes out, then back once it is all in: each way took about half). The other
//! node is one the cluster names (the slot map or a live member): a client cannot make a node
//! dial an address it gives. A probe holds its payload here and at the other node, so it is
//! bounded ([`MAX_BYTES`]) and one runs at a time on a node (the next waits), each within
//! [`PROBE_TIME`], its wait included. What a node's probes send is bounded too
//! ([`BUDGET_BYTES`] in [`BUDGET_WINDOW`]): a request of a few dozen bytes makes the node exchange
//! up to 64 MiB each way with another, and a client repeating it would keep the links busy.

use std::time::{Duration, Instant};

use bytes::Bytes;
use pliant_proto::frame::Frame;

use super::{Ctx, Session, integer};
use crate::node::Node;

/// Timed round trips a probe makes, after one untimed.
pub const ROUNDS: usize = 3;

/// The largest payload: 16 MiB is a few milliseconds on a datacentre link and enough to see
/// past a loopback's per-request costs; more would only hold more memory at both ends.
pub const MAX_BYTES: u64 = 16 << 20;

/// The smallest payload: below it the round trip is latency, not bandwidth.
pub const MIN_BYTES: u64 = 64 << 10;

/// One probe at a time on this node: payloads of concurrent probes would add up in memory.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The longest a probe takes, its wait for its turn included: [`ROUNDS`] + 1 echoes of
/// [`MAX_BYTES`] are 128 MiB on the wire, 1 s at 1 Gbit/s. Without it a node that stops
/// answering held the turn through the dial's and each echo's own timeouts (up to 2.5 min),
/// and every probe behind it waited as long again, without end.
pub const PROBE_TIME: Duration = Duration::from_secs(15);

/// Echo payload bytes this node's probes may send in one [`BUDGET_WINDOW`] (as much comes back).
/// A rescale measures each link its moves use once, from the link's source: 4 echoes of 4 MiB,
/// 16 MiB; so a node may take part in 64 rescales' probes a minute, and a client that repeats
/// probes makes the node send at most this much a minute (twice it across a window's edge).
pub const BUDGET_BYTES: u64 = 1 << 30;

/// The window [`BUDGET_BYTES`] is counted over.
pub const BUDGET_WINDOW: Duration = Duration::from_secs(60);

/// The bytes this node's probes sent in the current window, and when the window began.
static SPENT: std::sync::Mutex<Option<(Instant, u64)>> = std::sync::Mutex::new(None);

/// Charges a probe of `cost` payload bytes at `now` to the budget of the window in `spent`
/// (a new window once the last is [`BUDGET_WINDOW`] old): whether it may run, or how long until
/// the window renews.
fn charge(spent: &mut Option<(Instant, u64)>, now: Instant, cost: u64) -> Result<(), Duration> {
    let (began, used) = spent.get_or_insert((now, 0));
    let age = now.saturating_duration_since(*began);
    if age >= BUDGET_WINDOW {
        (*began, *used) = (now, 0);
    } else if used.saturating_add(cost) > BUDGET_BYTES {
        return Err(BUDGET_WINDOW - age);
    }
    *used += cost;
    Ok(())
}

/// Why a probe gave no figure.
#[derive(Debug, thiserror::Error)]
enum ProbeError {
    /// The arguments or the cluster do not allow it (nothing was sent).
    #[error("ERR {0}")]
    Refused(String),
    /// The other node could not be reached or did not echo the payload.
    #[error("ERR node {addr}: {why}")]
    Node {
        addr: std::net::SocketAddr,
        why: String,
    },
}

/// What the server runs, off the command table's synchronous path, before the command itself
/// (which then replies with this: `Ctx::walked`).
pub(crate) async fn stream(node: &Node, _: &mut Session, args: &[Bytes], _: u64) -> Frame {
    match probe(node, args).await {
        Ok(rate) => Frame::Integer(i64::try_from(rate).unwrap_or(i64::MAX)),
        Err(e) => Frame::error(e.to_string()),
    }
}

/// The command in the table: the reply the server's [`stream`] prepared.
pub(super) fn netprobe(ctx: &mut Ctx<'_>, _: &[Bytes]) -> Frame {
    ctx.walked_stream()
        .unwrap_or_else(|| Frame::error("ERR PLIANT.NETPROBE cannot run inside MULTI"))
}

async fn probe(node: &Node, args: &[Bytes]) -> Result<u64, ProbeError> {
    let refused = |why: String| ProbeError::Refused(why);
    let Some(cluster) = node.cluster() else {
        return Err(refused("This instance has cluster support disabled".into()));
    };
    let id = String::from_utf8_lossy(&args[1]).into_owned();
    let bytes = integer(&args[2])
        .and_then(|b| u64::try_from(b).ok())
        .filter(|b| (MIN_BYTES..=MAX_BYTES).contains(b))
        .ok_or_else(|| refused(format!("bytes must be {MIN_BYTES} to {MAX_BYTES}")))?;
    let addr = {
        let state = cluster.state();
        if id == cluster.me().id {
            return Err(refused(format!("node {id} is this node")));
        }
        state
            .map
            .nodes()
            .iter()
            .chain(&state.members)
            .find(|m| m.id == id)
            .map(|m| m.addr)
            .ok_or_else(|| refused(format!("node {id} is not in this cluster")))?
    };
    // Charged before the turn is waited for: a probe that then runs out of time counts anyway,
    // as its echoes may have gone out.
    let cost = bytes * (ROUNDS as u64 + 1);
    {
        // A panic elsewhere while it was held leaves a plain count behind: still the count.
        let mut spent = SPENT
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(wait) = charge(&mut spent, Instant::now(), cost) {
            return Err(refused(format!(
                "this node's probes sent their budget of {} MiB in the last {} s; try again in {} s",
                BUDGET_BYTES >> 20,
                BUDGET_WINDOW.as_secs(),
                // Rounded up: a client that waits as long is not refused again.
                wait.as_secs_f64().ceil().max(1.0)
            )));
        }
    }
    let timed = async {
        let _turn = TURN.lock().await;
        measure(cluster, addr, bytes).await
    };
    tokio::time::timeout(PROBE_TIME, timed)
        .await
        .unwrap_or_else(|_| {
            Err(ProbeError::Node {
                addr,
                why: format!(
                    "no figure within {} s (a probe waits for the one before it to end)",
                    PROBE_TIME.as_secs()
                ),
            })
        })
}

/// Times [`ROUNDS`] echoes of `bytes` to `addr`, after one untimed: bytes per second one way.
async fn measure(
    cluster: &crate::cluster::Cluster,
    addr: std::net::SocketAddr,
    bytes: u64,
) -> Result<u64, ProbeError> {
    let fail = |why: String| ProbeError::Node { addr, why };
    let mut conn = cluster.dial(addr).await.map_err(|e| fail(e.reason()))?;
    // The echo is as long as the payload: a node that answers with a longer one is refused at
    // its length, not buffered (up to 512 MiB otherwise).
    conn.limit_replies(pliant_proto::Limits {
        max_bulk: bytes as usize,
        ..pliant_proto::Limits::default()
    });
    let payload = Bytes::from(vec![b'x'; bytes as usize]);
    let mut rates = Vec::with_capacity(ROUNDS);
    for round in 0..=ROUNDS {
        let t = Instant::now();
        match conn.call(&[b"ECHO".as_slice(), &payload[..]]).await {
            Ok(Frame::Bulk(b)) if b.len() == payload.len() => {}
            Ok(other) => return Err(fail(format!("answered {other:?} to ECHO"))),
            Err(e) => return Err(fail(e.to_string())),
        }
        if round > 0 {
            rates.push(2.0 * bytes as f64 / t.elapsed().as_secs_f64().max(1e-9));
        }
    }
    rates.sort_by(f64::total_cmp);
    Ok(rates[rates.len() / 2] as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::testing::{cluster_node, member};
    use std::sync::Arc;
    use tokio::io::AsyncReadExt;

    /// A node of the cluster on a loopback port chosen now that reads what it is sent and
    /// never answers (a node that hangs).
    async fn hung() -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut chunk = vec![0u8; 1 << 16];
                    while matches!(s.read(&mut chunk).await, Ok(n) if n > 0) {}
                });
            }
        });
        addr
    }

    /// A cluster node whose map names a second node at `other`: that node's id.
    async fn node_with(other: std::net::SocketAddr) -> (Arc<Node>, String) {
        let them = member(2, other);
        let node = cluster_node(&them, None).await;
        (node, them.id)
    }

    /// Regression: a probe to a node that stops answering held the one turn through the
    /// echo's 30 s timeout, and a second probe waited for it before its own 30 s: a minute.
    /// Each answers within [`PROBE_TIME`], the second's wait for the turn included.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn probes_to_a_node_that_hangs_each_answer_within_their_bound() {
        let (node, id) = node_with(hung().await).await;
        let args: Vec<Bytes> = ["PLIANT.NETPROBE", id.as_str(), "65536"]
            .iter()
            .map(|a| Bytes::copy_from_slice(a.as_bytes()))
            .collect();
        let began = Instant::now();
        let one = {
            let (node, args) = (node.clone(), args.clone());
            tokio::spawn(async move {
                let reply = stream(&node, &mut Session::default(), &args, 0).await;
                (reply, began.elapsed())
            })
        };
        // The second asks while the first holds the turn.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let two = {
            let (node, args) = (node.clone(), args.clone());
            tokio::spawn(async move {
                let asked = Instant::now();
                let reply = stream(&node, &mut Session::default(), &args, 0).await;
                (reply, asked.elapsed())
            })
        };
        for probe in [one, two] {
            let (reply, took) = probe.await.expect("probe");
            match reply {
                Frame::Error(e) => assert!(e.contains("no figure within"), "{e}"),
                other => panic!("a figure from a node that never answers: {other:?}"),
            }
            assert!(
                took >= PROBE_TIME && took < PROBE_TIME + Duration::from_secs(3),
                "{took:?}"
            );
        }
    }

    /// A node's probes send at most the budget in a window: a probe that would pass it is
    /// refused with the time until the window renews, and the next window starts afresh.
    #[test]
    fn probes_past_the_byte_budget_are_refused_until_the_window_renews() {
        let t0 = Instant::now();
        let probe = 4 * (4 << 20);
        let mut spent = None;
        for i in 0..BUDGET_BYTES / probe {
            let at = t0 + Duration::from_millis(i * 100);
            assert_eq!(charge(&mut spent, at, probe), Ok(()), "probe {i}");
        }
        let later = t0 + Duration::from_secs(20);
        assert_eq!(
            charge(&mut spent, later, probe),
            Err(BUDGET_WINDOW - Duration::from_secs(20))
        );
        assert_eq!(
            charge(&mut spent, later, 1),
            Err(BUDGET_WINDOW - Duration::from_secs(20)),
            "the budget is spent to the byte"
        );
        assert_eq!(charge(&mut spent, t0 + BUDGET_WINDOW, probe), Ok(()));
        assert_eq!(spent.map(|(_, used)| used), Some(probe));
    }

    /// Regression (audit): the echo's reply was read with the client's default bound, so a
    /// node of the cluster answering with a 400 MiB length made the prober wait to buffer up
    /// to that much. A reply longer than the payload is refused at its length.
    #[tokio::test(start_paused = true)]
    async fn an_echo_longer_than_the_payload_is_refused_at_its_length() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let other = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((mut s, _)) = listener.accept().await {
                use tokio::io::AsyncWriteExt;
                // Whatever it is asked, a 400 MiB answer begins, and nothing follows.
                let _ = s.write_all(b"$419430400\r\n").await;
                held.push(s);
            }
        });
        let (node, id) = node_with(other).await;
        let args: Vec<Bytes> = ["PLIANT.NETPROBE", id.as_str(), "65536"]
            .iter()
            .map(|a| Bytes::copy_from_slice(a.as_bytes()))
            .collect();
        match stream(&node, &mut Session::default(), &args, 0).await {
            Frame::Error(e) => assert!(e.contains("invalid bulk length"), "{e}"),
            other => panic!("a figure from a node that sent none: {other:?}"),
        }
    }
}
