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
//! bounded ([`MAX_BYTES`]) and one runs at a time on a node (the next waits).

use std::time::Instant;

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
    let _turn = TURN.lock().await;
    let fail = |why: String| ProbeError::Node { addr, why };
    let mut conn = cluster.dial(addr).await.map_err(|e| fail(e.reason()))?;
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
