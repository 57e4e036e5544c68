//! `pliant cluster status`: every node of a cluster with its slots, keys, bytes and load, as
//! one node's view of the map names them and as each node counts itself.

use std::time::{Duration, Instant};

use pliant_proto::Dialer;
use pliant_proto::client::ClientError;
use pliant_proto::frame::Frame;
use serde::Serialize;

use crate::coord::ClusterState;

/// One node.
#[derive(Debug, Clone, Serialize)]
pub struct NodeStatus {
    /// Its id.
    pub id: String,
    /// Its address.
    pub addr: String,
    /// Whether it holds a lease in the coordination store.
    pub alive: bool,
    /// Whether it answered now.
    pub reachable: bool,
    /// Slots it owns.
    pub slots: usize,
    /// Runs of consecutive slots it owns (what a restart's banner lists, one range each).
    pub ranges: usize,
    /// Keys it holds (`DBSIZE`).
    pub keys: Option<u64>,
    /// Bytes of keys and values in its memory tier.
    pub memory_bytes: Option<u64>,
    /// Commands per second over the sampling window: its load.
    pub ops_per_s: Option<f64>,
    /// What its balancer has done, if it runs one (`--balancer`).
    pub balancer: Option<BalancerSummary>,
}

/// A node's balancer, as `PLIANT.BALANCER STATUS` reports it (the part the status shows).
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct BalancerSummary {
    /// The policy.
    pub policy: String,
    /// Decisions it made.
    pub decisions: u64,
    /// Moves it made (one per target of a decision).
    pub moves: u64,
    /// Slots it moved away.
    pub slots_moved: u64,
    /// Keys it moved away.
    pub keys_moved: u64,
    /// Decisions that failed.
    pub errors: u64,
}

/// A cluster.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterStatus {
    /// The node asked.
    pub asked: String,
    /// Where the coordination store is.
    pub coord: String,
    /// The map's version.
    pub version: u64,
    /// Slots with an owner.
    pub slots_assigned: usize,
    /// Slots being moved.
    pub slots_migrating: usize,
    /// Every node of the map, then members that own nothing.
    pub nodes: Vec<NodeStatus>,
}

/// Why the status could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StatusError {
    /// The node asked could not be reached.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// It answered something else than a cluster node's view.
    #[error("{addr}: {why}")]
    Reply {
        /// The node.
        addr: String,
        /// What it said.
        why: String,
    },
}

/// What node `addr` knows of its cluster: `{me, coord, state}`, asked with `dialer` (the
/// cluster's password).
pub fn view(dialer: &Dialer, addr: &str) -> Result<(String, String, ClusterState), StatusError> {
    let reply = |why: String| StatusError::Reply {
        addr: addr.to_string(),
        why,
    };
    let mut c = dialer.to(addr).connect()?;
    let text = match c.call(&[b"PLIANT.CLUSTER"])? {
        Frame::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        Frame::Error(e) => return Err(reply(e)),
        other => return Err(reply(format!("unexpected reply {other:?}"))),
    };
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| reply(e.to_string()))?;
    let state =
        ClusterState::from_json(&v["state"].to_string()).map_err(|e| reply(e.to_string()))?;
    let text_of = |k: &str| v[k].as_str().unwrap_or_default().to_string();
    Ok((text_of("me"), text_of("coord"), state))
}

/// The status of the cluster node `addr` belongs to, each node's load measured over `window`;
/// every node is asked with `dialer` (the cluster's password).
pub fn status(dialer: &Dialer, addr: &str, window: Duration) -> Result<ClusterStatus, StatusError> {
    let (_, coord, state) = view(dialer, addr)?;
    let map = &state.map;
    let mut listed: Vec<(String, String, (usize, usize))> = map
        .nodes()
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let slots = (map.slots_of(i as u16), map.ranges_of(i as u16).len());
            (m.id.clone(), m.addr.to_string(), slots)
        })
        .collect();
    for m in &state.members {
        if map.index_of(&m.id).is_none() {
            listed.push((m.id.clone(), m.addr.to_string(), (0, 0)));
        }
    }
    // Two samples of every node's command count, `window` apart, all nodes sampled together.
    let sample = |a: &str| -> Option<(Instant, u64, u64, u64)> {
        let mut c = dialer.to(a).connect().ok()?;
        let stats = match c.call(&[b"PLIANT.STATS"]).ok()? {
            Frame::Bulk(b) => serde_json::from_slice::<serde_json::Value>(&b).ok()?,
            _ => return None,
        };
        Some((
            Instant::now(),
            stats["commands"].as_u64()?,
            stats["keys_total"].as_u64()?,
            stats["bytes"].as_u64()?,
        ))
    };
    let first: Vec<_> = listed.iter().map(|(_, a, _)| sample(a)).collect();
    std::thread::sleep(window);
    let nodes = listed
        .into_iter()
        .zip(first)
        .map(|((id, addr, (slots, ranges)), before)| {
            let after = sample(&addr);
            let ops_per_s = match (before, &after) {
                (Some((t0, c0, ..)), Some((t1, c1, ..))) => {
                    // The sampling's own PLIANT.STATS is one command: not load.
                    let secs = t1.duration_since(t0).as_secs_f64().max(1e-3);
                    Some(c1.saturating_sub(c0 + 1) as f64 / secs)
                }
                _ => None,
            };
            let balancer = after
                .is_some()
                .then(|| balancer_of(dialer, &addr))
                .flatten();
            NodeStatus {
                balancer,
                alive: state.alive(&id),
                reachable: after.is_some(),
                keys: after.map(|a| a.2),
                memory_bytes: after.map(|a| a.3),
                ops_per_s,
                id,
                addr,
                slots,
                ranges,
            }
        })
        .collect();
    Ok(ClusterStatus {
        asked: addr.to_string(),
        coord,
        version: map.version(),
        slots_assigned: map.assigned(),
        slots_migrating: map.migrations().count(),
        nodes,
    })
}

/// `PLIANT.BALANCER STATUS` of the node at `addr`, if it runs a balancer.
fn balancer_of(dialer: &Dialer, addr: &str) -> Option<BalancerSummary> {
    let mut c = dialer.to(addr).connect().ok()?;
    match c.call(&[b"PLIANT.BALANCER", b"STATUS"]).ok()? {
        Frame::Bulk(b) => serde_json::from_slice(&b).ok(),
        _ => None,
    }
}
