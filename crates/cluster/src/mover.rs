//! Moving one slot between live nodes, as Redis Cluster does it, with nothing lost:
//!
//! 1. the map marks the slots migrating (one compare-and-swap in the coordination store), and
//!    both nodes are waited for until they serve that version: from then the source answers
//!    `-ASK` for a key it no longer has (a new key included), and the target serves such a key
//!    to a client that says `ASKING`;
//! 2. the keys are copied in batches, node to node: the source reads them with their expiry
//!    and sends them to the target (`PLIANT.RESTORE`), then deletes each only if still
//!    unchanged once the target has acknowledged its batch; `PLIANT.MIGRATE`, run at the source,
//!    does it for about half a second a call, several batches on their way at once. A key
//!    lives in one place at any moment for its clients: the source answers while it has it;
//!    once it is deleted there, the target's copy is the one clients are sent to. A key written
//!    during its copy stays at the source and goes in the next round;
//! 3. when a round finds nothing left, the map gives the slot to the target (one
//!    compare-and-swap) if this move is still the slot's (it still moves from the source to
//!    the target, begun at the same map version: another process running the same move may
//!    have finished it and begun another meanwhile); the source answers `-MOVED` from then on.
//!
//! This process only orders the move and counts its progress (a call at a time): the keys go
//! from the source to the target directly. A failure stops the move with the slot still
//! migrating, every key in exactly one of the two nodes for its clients, and running the move
//! again finishes it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use pliant_proto::{AsyncClient, ClientError, Dialer, Frame};

use crate::coord::{Coord, CoordError};
use crate::map::SlotMap;

/// Bytes of keys and values the source sends the target per batch (`PLIANT.MIGRATE`'s
/// `batch-bytes`; a value larger than that goes alone). See `tools/bench/rescale_scale.sh` for
/// the sensitivity.
pub const BATCH_BYTES: usize = 1 << 20;

/// Rounds over the slot before the move gives up on a slot whose keys keep changing faster
/// than they can be copied (each round copies every key it finds).
const MAX_ROUNDS: u32 = 1_000;

/// What a slot move did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MoveReport {
    /// The slots moved.
    pub slots: Vec<u16>,
    /// Their old owner's id.
    pub from: String,
    /// Their new owner's id.
    pub to: String,
    /// Keys moved.
    pub keys: u64,
    /// Bytes of keys and values copied.
    pub bytes: u64,
    /// Rounds over the slots (more than one when keys changed while they were copied).
    pub rounds: u32,
    /// How long it took.
    pub seconds: f64,
}

/// Why a move stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MoveError {
    /// The coordination store failed.
    #[error(transparent)]
    Coord(#[from] CoordError),
    /// A node failed or refused.
    #[error(
        "{addr}: {why} (the slot stays migrating with every key at one node; run the move again to finish it)"
    )]
    Node {
        /// The node.
        addr: SocketAddr,
        /// What happened.
        why: String,
    },
    /// The move's target refused a batch as one of a move that is over there (`-MOVEOVER`):
    /// the move was given up or begun again under this one (another process changed the
    /// map). The batch's keys stayed at the source; nothing acknowledged is lost. Running the
    /// move again finishes whatever move the map now has.
    #[error(
        "{addr}: {why} (the move was changed under this one; run it again if it is still wanted)"
    )]
    MoveOver {
        /// The source, which relayed the target's refusal.
        addr: SocketAddr,
        /// The refusal.
        why: String,
    },
    /// The node named to find the cluster by did not say where its coordination store is.
    #[error(transparent)]
    Status(#[from] crate::status::StatusError),
    /// The move makes no sense with the cluster as it is (nothing was changed).
    #[error("{0}")]
    Invalid(String),
    /// Asked to stop (Ctrl-C): the batches under way ended; the slots stay migrating, every key
    /// at one node for its clients, and running the move again finishes it.
    #[error("stopped: the slots stay migrating; run the move again to finish it")]
    Stopped,
    /// A range spanning several owners moved its first runs, then one failed.
    #[error("moved slots {moved} to the target; then slots {failed}: {error}")]
    Partly {
        /// The runs moved, as FIRST-LAST, comma-separated.
        moved: String,
        /// The run that failed, as FIRST-LAST.
        failed: String,
        /// Why.
        error: Box<MoveError>,
    },
}

/// A connection to a node for a move's (or a rescale's) requests: connected within 5 s,
/// authenticated, each reply awaited for [`Conn::call`]'s 30 s or a given time.
pub(crate) struct Conn {
    addr: SocketAddr,
    c: AsyncClient,
}

impl Conn {
    pub(crate) async fn open(dialer: &Dialer, addr: SocketAddr) -> Result<Self, MoveError> {
        let c = dialer
            .to(addr)
            .connect_timeout(Duration::from_secs(5))
            .io_timeout(Some(Duration::from_secs(30)))
            .connect_async()
            .await
            .map_err(|e| refused(addr, e))?;
        Ok(Self { addr, c })
    }

    pub(crate) async fn call(&mut self, args: &[&[u8]]) -> Result<Frame, MoveError> {
        match self.c.call(args).await {
            Ok(Frame::Error(e)) => Err(node(self.addr, e)),
            Ok(f) => Ok(f),
            Err(e) => Err(refused(self.addr, e)),
        }
    }

    /// [`call`](Self::call), with the reply awaited for up to `timeout`.
    pub(crate) async fn call_within(
        &mut self,
        args: &[&[u8]],
        timeout: Duration,
    ) -> Result<Frame, MoveError> {
        match self.c.call_within(args, timeout).await {
            Ok(Frame::Error(e)) => Err(node(self.addr, e)),
            Ok(f) => Ok(f),
            Err(e) => Err(refused(self.addr, e)),
        }
    }

    /// The node's address.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// A failure to reach `addr`, in the words of [`node`] (which names the node already).
fn refused(addr: SocketAddr, e: ClientError) -> MoveError {
    node(addr, e.reason())
}

fn node(addr: SocketAddr, why: impl std::fmt::Display) -> MoveError {
    MoveError::Node {
        addr,
        why: why.to_string(),
    }
}

/// Moves `slots`, all owned by one node, to node `to` (an id of a live member), as one
/// move: one map update marks them all migrating, one walk per round over the source's keys
/// copies theirs, one update gives them all to the target. `progress` hears of the keys and
/// bytes moved so far after every batch. `dialer` (the cluster's password) reaches the nodes.
pub async fn move_slots(
    coord: &dyn Coord,
    dialer: &Dialer,
    slots: &[u16],
    to: &str,
    progress: &mut (dyn FnMut(u64, u64) + Send),
) -> Result<MoveReport, MoveError> {
    move_slots_until(
        coord,
        dialer,
        slots,
        to,
        progress,
        &AtomicBool::new(false),
        BATCH_BYTES,
    )
    .await
}

/// [`move_slots`], stopping with [`MoveError::Stopped`] between two of the source's streaming
/// calls (each about half a second) once `stop` is set, the source sending batches of
/// `batch_bytes` (1 to 64 MiB).
pub async fn move_slots_until(
    coord: &dyn Coord,
    dialer: &Dialer,
    slots: &[u16],
    to: &str,
    progress: &mut (dyn FnMut(u64, u64) + Send),
    stop: &AtomicBool,
    batch_bytes: usize,
) -> Result<MoveReport, MoveError> {
    let started = Instant::now();
    if let Some(s) = slots.iter().find(|&&s| s >= crate::SLOTS) {
        return Err(MoveError::Invalid(format!(
            "slot {s} does not exist (slots are 0-16383)"
        )));
    }
    let state = coord.state().await?;
    let target = state
        .members
        .iter()
        .find(|m| m.id == to)
        .cloned()
        .ok_or_else(|| {
            MoveError::Invalid(format!(
                "node {to} is not a live member of the cluster (see CLUSTER NODES)"
            ))
        })?;
    let Some(&first) = slots.first() else {
        return Err(MoveError::Invalid("no slot to move".into()));
    };
    let Some(source) = state.map.owner(first).cloned() else {
        return Err(MoveError::Invalid(format!("slot {first} has no owner")));
    };
    if let Some(s) = slots
        .iter()
        .find(|&&s| state.map.owner(s).map(|o| &o.id) != Some(&source.id))
    {
        return Err(MoveError::Invalid(format!(
            "slots {first} and {s} have different owners: move them separately"
        )));
    }
    if !state.alive(&source.id) {
        return Err(MoveError::Invalid(format!(
            "the owner {} ({}) is not alive: its keys are there, so the move waits for it",
            source.id, source.addr
        )));
    }
    let mut report = MoveReport {
        slots: slots.to_vec(),
        from: source.id.clone(),
        to: to.to_string(),
        keys: 0,
        bytes: 0,
        rounds: 0,
        seconds: 0.0,
    };
    if source.id == to {
        return Ok(report);
    }
    // Before the map is touched: a node behind the store's map refuses the move anyway, but
    // the mark below would raise the version of a store that lost its state, and once a few
    // refused moves had raised it to what the nodes recorded, they would act on that fresh map
    // and drop their keys of the slots it gives others.
    refuse_if_behind(dialer, &state.members, state.map.version()).await?;
    // 1. Migrating (or already, from a move that stopped half way).
    let version = change_map(coord, |map| {
        let (mut map, t) = map.with_node(&target);
        let mut changed = false;
        for &slot in slots {
            match map.migration(slot) {
                Some(m) if m.to == t => {}
                Some(_) => {
                    return Err(MoveError::Invalid(format!(
                        "slot {slot} is already moving to another node"
                    )));
                }
                None if map.owner(slot).map(|o| &o.id) != Some(&source.id) => {
                    return Err(MoveError::Invalid(format!(
                        "slot {slot} changed owner during the move"
                    )));
                }
                None => {
                    map = map
                        .with_migration(slot, t)
                        .map_err(|e| MoveError::Invalid(e.to_string()))?;
                    changed = true;
                }
            }
        }
        Ok(changed.then_some(map))
    })
    .await?;
    // Which move of each slot this is (the store stamped it when it was marked): the last
    // step gives a slot to the target only while this move is still the slot's.
    let begun = moves_begun(
        &coord.state().await?.map,
        slots,
        &source.id,
        to,
        source.addr,
    )?;
    tokio::try_join!(
        wait_for_version(dialer, source.addr, version),
        wait_for_version(dialer, target.addr, version)
    )?;
    // 2. The keys, round after round until none is left at the source.
    let mut src = Conn::open(dialer, source.addr).await?;
    let slot_args: Vec<String> = slots.iter().map(u16::to_string).collect();
    let batch = batch_bytes.to_string();
    loop {
        report.rounds += 1;
        if report.rounds > MAX_ROUNDS {
            return Err(node(
                source.addr,
                format!("the slots' keys kept changing through {MAX_ROUNDS} rounds"),
            ));
        }
        let mut found_any = false;
        let mut after = Bytes::new();
        loop {
            if stop.load(Ordering::Relaxed) {
                return Err(MoveError::Stopped);
            }
            let mut args: Vec<&[u8]> =
                vec![b"PLIANT.MIGRATE", to.as_bytes(), batch.as_bytes(), &after];
            args.extend(slot_args.iter().map(|s| s.as_bytes()));
            // A call streams for about half a second, then waits for every batch in flight
            // (each given 30 s by the source).
            let reply = match src.call_within(&args, Duration::from_secs(120)).await {
                Err(MoveError::Node { addr, why }) if why.starts_with("MOVEOVER ") => {
                    return Err(MoveError::MoveOver { addr, why });
                }
                r => r?,
            };
            let streamed = Streamed::parse(reply).map_err(|e| node(source.addr, e))?;
            found_any |= streamed.copied > 0;
            report.keys += streamed.deleted;
            report.bytes += streamed.bytes;
            progress(report.keys, report.bytes);
            match streamed.next {
                Some(n) => after = n,
                None => break,
            }
        }
        if !found_any {
            // One count under one lock (the slot index's, O(1) a slot) says whether the slots
            // are really empty here before they are given away.
            let mut count: Vec<&[u8]> = vec![b"PLIANT.SLOTCOUNT"];
            count.extend(slot_args.iter().map(|s| s.as_bytes()));
            match src.call(&count).await? {
                Frame::Integer(0) => break,
                Frame::Integer(_) => continue,
                other => return Err(node(source.addr, format!("SLOTCOUNT: {other:?}"))),
            }
        }
    }
    // 3. The slots are the target's.
    change_map(coord, |map| {
        given(map, slots, &source.id, to, &begun, source.addr)
    })
    .await?;
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// The map version at which each of `slots`' moves from node `from` to node `to` began in
/// `map` (its [`Migration::since`](crate::map::Migration::since)); `-MOVEOVER` (relayed as from
/// `addr`, the source) for a slot that does not move so.
fn moves_begun(
    map: &SlotMap,
    slots: &[u16],
    from: &str,
    to: &str,
    addr: SocketAddr,
) -> Result<Vec<u64>, MoveError> {
    let (f, t) = (map.index_of(from), map.index_of(to));
    slots
        .iter()
        .map(|&slot| match map.migration(slot) {
            Some(m) if Some(m.from) == f && Some(m.to) == t => Ok(m.since),
            _ => Err(move_over(slot, to, addr)),
        })
        .collect()
}

/// `map` with `slots` given to node `to`, the last step of their move from node `from` that
/// began at `begun` (slot by slot). A slot is given only while that move is still the slot's:
/// another process may have finished this move meanwhile (running it again is how a move is
/// finished) and begun another of the slot, whose copy is under way, and giving the slot to
/// `to` then would end that move with its keys left where it took them from. A slot that is
/// `to`'s already, moving nowhere, needs nothing. `None` when no slot needs anything.
fn given(
    map: SlotMap,
    slots: &[u16],
    from: &str,
    to: &str,
    begun: &[u64],
    addr: SocketAddr,
) -> Result<Option<SlotMap>, MoveError> {
    let t = map
        .index_of(to)
        .ok_or_else(|| MoveError::Invalid(format!("node {to} left the map during the move")))?;
    let f = map.index_of(from);
    let mut give = Vec::new();
    for (&slot, &since) in slots.iter().zip(begun) {
        match map.migration(slot) {
            Some(m) if Some(m.from) == f && m.to == t && m.since == since => give.push(slot),
            None if map.owner_index(slot) == Some(t) => {}
            _ => return Err(move_over(slot, to, addr)),
        }
    }
    Ok((!give.is_empty()).then(|| give.iter().fold(map, |m, &slot| m.with_owner(slot, t))))
}

/// The move of `slot` to node `to` was ended or begun again by another process during this one.
fn move_over(slot: u16, to: &str, addr: SocketAddr) -> MoveError {
    MoveError::MoveOver {
        addr,
        why: format!(
            "MOVEOVER slot {slot}'s move to {to} was ended or begun again by another process during this one"
        ),
    }
}

/// Applies `change` to the current map in one compare-and-swap, reading it again and retrying
/// when another writer (a move running beside this one) changed it first. `change` returns
/// `None` when the map needs nothing. The version the map has after.
pub async fn change_map(
    coord: &dyn Coord,
    change: impl Fn(SlotMap) -> Result<Option<SlotMap>, MoveError>,
) -> Result<u64, MoveError> {
    for _ in 0..100 {
        let map = coord.state().await?.map;
        let v = map.version();
        match change(map)? {
            None => return Ok(v),
            Some(next) => {
                if coord.update(v, next).await? {
                    return Ok(v + 1);
                }
            }
        }
    }
    Err(MoveError::Invalid(
        "the slot map kept changing under 100 attempts to update it".into(),
    ))
}

/// Waits (at most 10 s) until node `addr` serves map `version` or a later one.
async fn wait_for_version(
    dialer: &Dialer,
    addr: SocketAddr,
    version: u64,
) -> Result<(), MoveError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    // A node learns a new map by watch within milliseconds: the first looks come soon (marking
    // and waiting took 6-37 ms a group with a fixed 20 ms pause), later ones back off to 20 ms.
    let mut pause = Duration::from_millis(1);
    loop {
        match crate::serving(dialer, addr).await {
            Some(s) if s.version >= version => return Ok(()),
            // It will not serve it: it acted on a newer map than the store holds.
            Some(crate::Serving {
                behind: Some(acted),
                ..
            }) => return Err(behind(addr, acted, version)),
            _ => {}
        }
        if Instant::now() >= deadline {
            return Err(node(
                addr,
                format!("does not serve map version {version} after 10 s"),
            ));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// [`MoveError`] for node `addr`, which acted on map version `acted`, newer than the store's
/// `version`.
fn behind(addr: SocketAddr, acted: u64, version: u64) -> MoveError {
    node(
        addr,
        format!(
            "MAPBEHIND the node has acted on slot map version {acted}, newer than the coordination store's ({version}): did the store lose its state? The node takes part in no move until the store's state is back (see docs/cluster.md, \"How do I recover from a lost coordination store?\")"
        ),
    )
}

/// Refuses with `MAPBEHIND` if one of `members` says it acted on a map newer than the store's
/// (`version`). Every live node is asked, not only the move's two: a move between two nodes
/// that recorded nothing (new ones) raises the version as much. A node that does not answer
/// within [`crate::serving`]'s bound is not counted (the move waits for its own two later).
pub(crate) async fn refuse_if_behind(
    dialer: &Dialer,
    members: &[crate::map::Member],
    version: u64,
) -> Result<(), MoveError> {
    let mut asks = tokio::task::JoinSet::new();
    for m in members {
        let (dialer, addr) = (dialer.clone(), m.addr);
        asks.spawn(async move { (addr, crate::serving(&dialer, addr).await) });
    }
    while let Some(asked) = asks.join_next().await {
        if let Ok((
            addr,
            Some(crate::Serving {
                behind: Some(acted),
                ..
            }),
        )) = asked
        {
            return Err(behind(addr, acted, version));
        }
    }
    Ok(())
}

/// What one `PLIANT.MIGRATE` call did at the source.
struct Streamed {
    /// Where the walk goes on from (`None`: this walk over the slots is over).
    next: Option<Bytes>,
    /// Keys deleted at the source (the target has them).
    deleted: u64,
    /// Bytes of keys and values sent.
    bytes: u64,
    /// Keys sent.
    copied: u64,
}

impl Streamed {
    /// `[token, deleted, bytes, copied]`.
    fn parse(reply: Frame) -> Result<Self, String> {
        let count = |f: &Frame| match f {
            Frame::Integer(n) => u64::try_from(*n).map_err(|_| format!("MIGRATE: count {n}")),
            other => Err(format!("MIGRATE: unexpected count {other:?}")),
        };
        match &reply {
            Frame::Array(items) if items.len() == 4 => Ok(Self {
                next: match &items[0] {
                    Frame::Bulk(t) => Some(t.clone()),
                    Frame::Null => None,
                    other => return Err(format!("MIGRATE: unexpected token {other:?}")),
                },
                deleted: count(&items[1])?,
                bytes: count(&items[2])?,
                copied: count(&items[3])?,
            }),
            _ => Err(format!("MIGRATE: unexpected reply {reply:?}")),
        }
    }
}

/// `slots` cut into runs of consecutive slots with one owner each (what [`move_slots`] moves
/// at once), in the order given.
pub fn runs_by_owner(map: &SlotMap, slots: &[u16]) -> Result<Vec<Vec<u16>>, MoveError> {
    let mut runs: Vec<Vec<u16>> = Vec::new();
    let mut last: Option<(u16, &str)> = None;
    for &slot in slots {
        if slot >= crate::SLOTS {
            return Err(MoveError::Invalid(format!(
                "slot {slot} does not exist (slots are 0-16383)"
            )));
        }
        let owner = map
            .owner(slot)
            .ok_or_else(|| MoveError::Invalid(format!("slot {slot} has no owner")))?;
        match (runs.last_mut(), last) {
            (Some(run), Some((prev, id)))
                if id == owner.id && prev.checked_add(1) == Some(slot) =>
            {
                run.push(slot);
            }
            _ => runs.push(vec![slot]),
        }
        last = Some((slot, owner.id.as_str()));
    }
    Ok(runs)
}

/// FIRST-LAST (or one slot) of a run.
pub fn range_name(run: &[u16]) -> String {
    match (run.first(), run.last()) {
        (Some(a), Some(b)) if a != b => format!("{a}-{b}"),
        (Some(a), _) => a.to_string(),
        _ => String::new(),
    }
}

/// [`move_slots`] for a caller without a runtime (`pliant cluster move`), the cluster found
/// through any of its nodes (`node`), which names the coordination store. The slots may have
/// several owners (`cluster move --slot 100-199` over a boundary): each run of one owner moves
/// on its own, in order; one report per run. A failure after some runs moved says which
/// ([`MoveError::Partly`]).
pub fn move_ranges_via(
    dialer: &Dialer,
    node: &str,
    slots: &[u16],
    to: &str,
    progress: &mut (dyn FnMut(u64, u64) + Send),
) -> Result<Vec<MoveReport>, MoveError> {
    let (_, coord, _) = crate::status::view(dialer, node)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| MoveError::Invalid(format!("starting the runtime: {e}")))?;
    rt.block_on(async {
        let remote = crate::open_coord(&coord, dialer).await?;
        let state = remote.state().await?;
        let runs = runs_by_owner(&state.map, slots)?;
        let mut reports: Vec<MoveReport> = Vec::new();
        for run in &runs {
            match move_slots(remote.as_ref(), dialer, run, to, progress).await {
                Ok(r) => reports.push(r),
                Err(e) if reports.is_empty() => return Err(e),
                Err(e) => {
                    let moved: Vec<String> = reports.iter().map(|r| range_name(&r.slots)).collect();
                    return Err(MoveError::Partly {
                        moved: moved.join(", "),
                        failed: range_name(run),
                        error: Box::new(e),
                    });
                }
            }
        }
        Ok(reports)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::map::tests::member;

    /// Slot 0 (node 1's) moving to node 2, the move begun at `since`.
    fn moving(since: u64) -> SlotMap {
        let even = SlotMap::even(1, &[member(1), member(2), member(3)]);
        even.clone()
            .with_migration(0, 1)
            .expect("a move")
            .with_moves_begun(&even, since)
    }

    /// The last step gives a slot to the target only while the move is still the slot's: not
    /// once another process finished it and began another of the slot (elsewhere, or to the
    /// same node again), whose keys would be left behind.
    #[test]
    fn the_last_step_gives_a_slot_only_while_its_move_is_still_the_slots() {
        let (from, to, addr) = (member(1).id, member(2).id, member(1).addr);
        let begun = moves_begun(&moving(5), &[0], &from, &to, addr).expect("moving");
        assert_eq!(begun, vec![5]);
        // Still this move: given.
        let map = given(moving(5), &[0], &from, &to, &begun, addr)
            .expect("given")
            .expect("a change");
        assert_eq!(map.owner(0), Some(&member(2)));
        assert!(map.migration(0).is_none());
        // Finished by another process: nothing to do.
        let done = moving(5).with_owner(0, 1);
        assert!(
            given(done.clone(), &[0], &from, &to, &begun, addr)
                .expect("ok")
                .is_none()
        );
        // ... which then began moving it on, to node 3: refused, that move left alone.
        let on = done.clone().with_migration(0, 2).expect("a move");
        assert!(matches!(
            given(on, &[0], &from, &to, &begun, addr),
            Err(MoveError::MoveOver { .. })
        ));
        // Moved back to node 1 and begun again to node 2: a new move, refused too.
        let again = moving(9);
        assert!(matches!(
            given(again, &[0], &from, &to, &begun, addr),
            Err(MoveError::MoveOver { .. })
        ));
        // A slot that does not move so is refused at the start.
        assert!(matches!(
            moves_begun(&done, &[0], &from, &to, addr),
            Err(MoveError::MoveOver { .. })
        ));
    }
}
