//! The slot map: which node owns each of the 16,384 slots, which slots are moving, and the
//! version every change of it gets (the coordination store updates it only if the version it
//! read is still the current one, so two writers never both win).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::slot::SLOTS;

/// A node of the cluster: its id (40 hex digits, as Redis Cluster's) and client address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// The id `CLUSTER NODES` and `CLUSTER MYID` show.
    pub id: String,
    /// Where clients reach it.
    pub addr: SocketAddr,
}

/// A slot on its way from one node to another: the source still owns it and answers for the
/// keys it has; a key it no longer has is asked for at the target (`-ASK`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    /// The owner, index into [`SlotMap::nodes`].
    pub from: u16,
    /// The node it moves to, index into [`SlotMap::nodes`].
    pub to: u16,
    /// The map version this move of the slot began at: which move it is. The coordination store
    /// sets it ([`SlotMap::with_moves_begun`]), so both ends of a move read the same number, and
    /// a later move of the slot (after this one ended or was given up) has a larger one. A
    /// move's copies name the map version their source checked the move at, and the target
    /// refuses copies checked before its current move of the slot began: those are of a move
    /// that is over, held up on their way (`PLIANT.RESTORE`). 0 in a map saved before moves
    /// had it: such a move accepts every copy, as before.
    pub since: u64,
}

/// No owner (the slot is unassigned).
const NONE: u16 = u16::MAX;

/// Who owns which slot, at one version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotMap {
    version: u64,
    nodes: Vec<Member>,
    owner: Box<[u16]>,
    migrations: BTreeMap<u16, Migration>,
}

/// What is wrong with a slot map read from the coordination store or given by a command.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MapError {
    /// Not the JSON of a slot map.
    #[error("slot map: {0}")]
    Json(#[from] serde_json::Error),
    /// A node id that is not 40 hex digits.
    #[error("slot map: node id {0:?} is not 40 lowercase hex digits")]
    BadId(String),
    /// Two nodes with one id.
    #[error("slot map: node {0} appears twice")]
    DuplicateId(String),
    /// An address clients cannot be sent to, or one two nodes share.
    #[error("slot map: node {id} has address {addr}: {why}")]
    BadAddr {
        /// The node.
        id: String,
        /// Its address.
        addr: SocketAddr,
        /// What is wrong with it.
        why: &'static str,
    },
    /// More nodes than a map can index.
    #[error("slot map: {0} nodes, more than 65,535")]
    TooManyNodes(usize),
    /// A slot range outside 0..=16383 or reversed.
    #[error("slot map: node {node} has slot range {start}-{end}, outside 0-16383 or reversed")]
    BadRange {
        /// The node.
        node: String,
        /// First slot.
        start: u32,
        /// Last slot.
        end: u32,
    },
    /// A slot two nodes claim.
    #[error("slot map: slot {slot} is owned by both {first} and {second}")]
    Overlap {
        /// The slot.
        slot: u16,
        /// One owner.
        first: String,
        /// The other.
        second: String,
    },
    /// A migration that names an unknown node, a slot out of range, or a source that does not
    /// own the slot.
    #[error("slot map: migration of slot {slot}: {why}")]
    Migration {
        /// The slot.
        slot: u32,
        /// What is wrong.
        why: String,
    },
}

/// The JSON form: nodes with their slot ranges (inclusive), readable in `etcdctl get`.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct MapJson {
    version: u64,
    nodes: Vec<NodeJson>,
    #[serde(default)]
    migrations: Vec<MigrationJson>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeJson {
    id: String,
    addr: SocketAddr,
    slots: Vec<(u32, u32)>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct MigrationJson {
    slot: u32,
    from: String,
    to: String,
    /// Absent in maps saved before moves had it.
    #[serde(default)]
    since: u64,
}

/// Whether `id` has the form of a Redis Cluster node id (clients parse it).
pub fn valid_id(id: &str) -> bool {
    id.len() == 40 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl SlotMap {
    /// Version 0: no nodes, no slot assigned.
    pub fn empty() -> Self {
        Self {
            version: 0,
            nodes: Vec::new(),
            owner: vec![NONE; usize::from(SLOTS)].into_boxed_slice(),
            migrations: BTreeMap::new(),
        }
    }

    /// `members` owning every slot, in contiguous ranges of sizes differing by at most one,
    /// in the order given; at `version`. The ranges are those `redis-cli --cluster create`
    /// makes (node i from round(i·16384/n)), so a cluster looks as its users know it.
    pub fn even(version: u64, members: &[Member]) -> Self {
        let mut map = Self::empty();
        map.version = version;
        map.nodes = members.to_vec();
        let n = members.len();
        if n == 0 {
            return map;
        }
        let start = |i: usize| (i * usize::from(SLOTS) + n / 2) / n;
        for i in 0..n {
            for o in &mut map.owner[start(i)..start(i + 1)] {
                *o = i as u16;
            }
        }
        map
    }

    /// The map version; every change increments it.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// This map with the version set.
    pub fn with_version(mut self, version: u64) -> Self {
        self.version = version;
        self
    }

    /// The nodes the map names (owners, or targets of a migration).
    pub fn nodes(&self) -> &[Member] {
        &self.nodes
    }

    /// The index of node `id` in [`nodes`](Self::nodes).
    pub fn index_of(&self, id: &str) -> Option<u16> {
        self.nodes.iter().position(|m| m.id == id).map(|i| i as u16)
    }

    /// The owner of `slot`, if it is assigned.
    pub fn owner(&self, slot: u16) -> Option<&Member> {
        self.owner_index(slot).map(|i| &self.nodes[usize::from(i)])
    }

    /// The index of the owner of `slot`.
    pub fn owner_index(&self, slot: u16) -> Option<u16> {
        let o = *self.owner.get(usize::from(slot))?;
        (o != NONE).then_some(o)
    }

    /// The migration of `slot`, if it is moving.
    pub fn migration(&self, slot: u16) -> Option<Migration> {
        self.migrations.get(&slot).copied()
    }

    /// Slots that are moving.
    pub fn migrations(&self) -> impl Iterator<Item = (u16, Migration)> + '_ {
        self.migrations.iter().map(|(s, m)| (*s, *m))
    }

    /// Slots with an owner.
    pub fn assigned(&self) -> usize {
        self.owner.iter().filter(|&&o| o != NONE).count()
    }

    /// Contiguous runs of slots with one owner: `(first, last, owner index)`, in slot order.
    pub fn ranges(&self) -> Vec<(u16, u16, u16)> {
        let mut out: Vec<(u16, u16, u16)> = Vec::new();
        for (s, &o) in self.owner.iter().enumerate() {
            if o == NONE {
                continue;
            }
            let s = s as u16;
            match out.last_mut() {
                Some((_, last, owner)) if *owner == o && *last + 1 == s => *last = s,
                _ => out.push((s, s, o)),
            }
        }
        out
    }

    /// The slot ranges node `i` owns.
    pub fn ranges_of(&self, i: u16) -> Vec<(u16, u16)> {
        self.ranges()
            .into_iter()
            .filter(|r| r.2 == i)
            .map(|(a, b, _)| (a, b))
            .collect()
    }

    /// Slots node `i` owns.
    pub fn slots_of(&self, i: u16) -> usize {
        self.owner.iter().filter(|&&o| o == i).count()
    }

    /// This map with `member` among its nodes (its address updated if it is there already);
    /// and its index.
    pub fn with_node(mut self, member: &Member) -> (Self, u16) {
        match self.index_of(&member.id) {
            Some(i) => {
                self.nodes[usize::from(i)].addr = member.addr;
                (self, i)
            }
            None => {
                self.nodes.push(member.clone());
                let i = (self.nodes.len() - 1) as u16;
                (self, i)
            }
        }
    }

    /// This map without node `id`, which must own no slot and take part in no move.
    pub fn without_node(mut self, id: &str) -> Result<Self, MapError> {
        let Some(i) = self.index_of(id) else {
            return Ok(self);
        };
        let busy =
            self.slots_of(i) > 0 || self.migrations.values().any(|m| m.from == i || m.to == i);
        if busy {
            return Err(MapError::Migration {
                slot: u32::from(SLOTS),
                why: format!("node {id} still owns slots or takes part in a move"),
            });
        }
        self.nodes.remove(usize::from(i));
        let shift = |o: &mut u16| {
            if *o != NONE && *o > i {
                *o -= 1;
            }
        };
        self.owner.iter_mut().for_each(shift);
        for m in self.migrations.values_mut() {
            shift(&mut m.from);
            shift(&mut m.to);
        }
        Ok(self)
    }

    /// This map with `slot` moving from its owner to node `to`, a move that begins at the
    /// version after this map's (the one the coordination store gives the map it accepts as
    /// this one's successor; it sets [`Migration::since`] itself, whatever this says).
    pub fn with_migration(mut self, slot: u16, to: u16) -> Result<Self, MapError> {
        let bad = |why: &str| MapError::Migration {
            slot: u32::from(slot),
            why: why.to_string(),
        };
        let from = self
            .owner_index(slot)
            .ok_or_else(|| bad("it has no owner"))?;
        if usize::from(to) >= self.nodes.len() {
            return Err(bad("unknown target"));
        }
        if from == to {
            return Err(bad("source and target are one node"));
        }
        let since = self.version.saturating_add(1);
        self.migrations.insert(slot, Migration { from, to, since });
        Ok(self)
    }

    /// This map as the coordination store accepts it at `version`, the successor of `current`:
    /// a move that `current` has too (the slot moving from and to the same nodes, by id) keeps
    /// the version it began at; any other begins at `version`. The store, not the writer, says
    /// when a move began: a writer cannot give a move the identity of another (a forged or
    /// stale `since` is replaced), and a move given up and begun again, even within one
    /// update's reading, is a new move.
    pub fn with_moves_begun(mut self, current: &SlotMap, version: u64) -> Self {
        fn id(map: &SlotMap, i: u16) -> Option<&str> {
            map.nodes.get(usize::from(i)).map(|m| m.id.as_str())
        }
        let stamps: Vec<(u16, u64)> = self
            .migrations
            .iter()
            .map(|(&slot, m)| {
                let kept = current.migration(slot).filter(|c| {
                    id(current, c.from) == id(&self, m.from) && id(current, c.to) == id(&self, m.to)
                });
                (slot, kept.map_or(version, |c| c.since))
            })
            .collect();
        for (slot, since) in stamps {
            if let Some(m) = self.migrations.get_mut(&slot) {
                m.since = since;
            }
        }
        self
    }

    /// This map with `slot` owned by node `to`, and no longer moving.
    pub fn with_owner(mut self, slot: u16, to: u16) -> Self {
        self.owner[usize::from(slot)] = to;
        self.migrations.remove(&slot);
        self
    }

    /// The map as JSON (what the coordination store holds).
    pub fn to_json(&self) -> String {
        let nodes = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, m)| NodeJson {
                id: m.id.clone(),
                addr: m.addr,
                slots: self
                    .ranges_of(i as u16)
                    .into_iter()
                    .map(|(a, b)| (u32::from(a), u32::from(b)))
                    .collect(),
            })
            .collect();
        let migrations = self
            .migrations
            .iter()
            .map(|(s, m)| MigrationJson {
                slot: u32::from(*s),
                from: self.nodes[usize::from(m.from)].id.clone(),
                to: self.nodes[usize::from(m.to)].id.clone(),
                since: m.since,
            })
            .collect();
        serde_json::to_string(&MapJson {
            version: self.version,
            nodes,
            migrations,
        })
        .expect("a slot map serialises")
    }

    /// A map read from JSON, checked: ids well formed and unique, ranges inside the slot space
    /// and disjoint, migrations from a slot's owner to a known node.
    pub fn from_json(text: &str) -> Result<Self, MapError> {
        let json: MapJson = serde_json::from_str(text)?;
        if json.nodes.len() >= usize::from(NONE) {
            return Err(MapError::TooManyNodes(json.nodes.len()));
        }
        let mut map = Self::empty();
        map.version = json.version;
        for (i, n) in json.nodes.iter().enumerate() {
            if !valid_id(&n.id) {
                return Err(MapError::BadId(n.id.clone()));
            }
            if map.index_of(&n.id).is_some() {
                return Err(MapError::DuplicateId(n.id.clone()));
            }
            let bad_addr = |why| MapError::BadAddr {
                id: n.id.clone(),
                addr: n.addr,
                why,
            };
            if n.addr.port() == 0 || n.addr.ip().is_unspecified() {
                return Err(bad_addr("not an address clients can be sent to"));
            }
            if map.nodes.iter().any(|m| m.addr == n.addr) {
                return Err(bad_addr("another node has it too"));
            }
            for &(start, end) in &n.slots {
                if start > end || end >= u32::from(SLOTS) {
                    return Err(MapError::BadRange {
                        node: n.id.clone(),
                        start,
                        end,
                    });
                }
                for s in start..=end {
                    let o = &mut map.owner[s as usize];
                    if *o != NONE {
                        return Err(MapError::Overlap {
                            slot: s as u16,
                            first: json.nodes[usize::from(*o)].id.clone(),
                            second: n.id.clone(),
                        });
                    }
                    *o = i as u16;
                }
            }
            map.nodes.push(Member {
                id: n.id.clone(),
                addr: n.addr,
            });
        }
        for m in &json.migrations {
            let bad = |why: String| MapError::Migration { slot: m.slot, why };
            if m.slot >= u32::from(SLOTS) {
                return Err(bad("no such slot".into()));
            }
            let slot = m.slot as u16;
            let from = map
                .index_of(&m.from)
                .ok_or_else(|| bad(format!("unknown node {}", m.from)))?;
            let to = map
                .index_of(&m.to)
                .ok_or_else(|| bad(format!("unknown node {}", m.to)))?;
            if map.owner_index(slot) != Some(from) {
                return Err(bad(format!("{} does not own it", m.from)));
            }
            if from == to {
                return Err(bad("source and target are one node".into()));
            }
            if map
                .migrations
                .insert(
                    slot,
                    Migration {
                        from,
                        to,
                        since: m.since,
                    },
                )
                .is_some()
            {
                return Err(bad("listed twice".into()));
            }
        }
        Ok(map)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Node `i` of the crate's tests: an id of 40 hex digits, a loopback address.
    pub(crate) fn member(i: u8) -> Member {
        Member {
            id: format!("{i:040x}"),
            addr: SocketAddr::from(([127, 0, 0, 1], 7000 + u16::from(i))),
        }
    }

    /// A FIFO at `path` (coreutils' `mkfifo`: the crate's `nix` has no `stat` feature): a file
    /// that a writer opens only once a reader does, so a save to it waits for certain.
    pub(crate) fn mkfifo(path: &std::path::Path) {
        let made = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .expect("mkfifo (coreutils)");
        assert!(made.success(), "mkfifo {}", path.display());
    }

    #[test]
    fn even_spreads_every_slot_in_contiguous_ranges() {
        let map = SlotMap::even(1, &[member(1), member(2), member(3)]);
        assert_eq!(map.assigned(), usize::from(SLOTS));
        assert_eq!(
            map.ranges(),
            vec![(0, 5460, 0), (5461, 10922, 1), (10923, 16383, 2)]
        );
        let sizes: Vec<usize> = (0..3).map(|i| map.slots_of(i)).collect();
        assert_eq!(sizes, vec![5461, 5462, 5461]);
        assert_eq!(map.owner(16383), Some(&member(3)));
        assert_eq!(SlotMap::even(1, &[]).assigned(), 0);
    }

    #[test]
    fn a_node_leaves_the_map_only_once_it_owns_nothing() {
        let map = SlotMap::even(1, &[member(1), member(2), member(3)]);
        assert!(map.clone().without_node(&member(2).id).is_err());
        let mut emptied = map.clone();
        for s in 5461..=10922 {
            emptied = emptied.with_owner(s, 2);
        }
        let after = emptied.without_node(&member(2).id).expect("owns nothing");
        assert_eq!(after.nodes(), &[member(1), member(3)]);
        assert_eq!(after.ranges(), vec![(0, 5460, 0), (5461, 16383, 1)]);
        assert_eq!(
            SlotMap::from_json(&after.to_json()).expect("a valid map"),
            after
        );
    }

    #[test]
    fn json_round_trips_with_migrations() {
        let map = SlotMap::even(7, &[member(1), member(2)]);
        let mut text: serde_json::Value =
            serde_json::from_str(&map.to_json()).expect("a valid map");
        text["migrations"] = serde_json::json!([
            {"slot": 3, "from": member(1).id, "to": member(2).id}
        ]);
        let back = SlotMap::from_json(&text.to_string()).expect("a valid map");
        assert_eq!(back.version(), 7);
        assert_eq!(
            back.migration(3),
            Some(Migration {
                from: 0,
                to: 1,
                since: 0
            }),
            "a map saved before moves had `since`"
        );
        assert_eq!(back.migration(4), None);
        assert_eq!(
            SlotMap::from_json(&back.to_json()).expect("a valid map"),
            back
        );
    }

    /// The store says when a move began: one that goes on keeps its version through later
    /// updates (other slots', a node's address), a new one, or one given up and begun again
    /// within one update, gets the new map's, and a writer cannot choose either.
    #[test]
    fn a_move_keeps_the_version_it_began_at_and_a_new_one_gets_the_next() {
        let (base, _) = SlotMap::even(4, &[member(1)]).with_node(&member(2));
        let moving = base
            .clone()
            .with_migration(3, 1)
            .expect("a migration")
            .with_moves_begun(&base, 5)
            .with_version(5);
        assert_eq!(moving.migration(3).map(|m| m.since), Some(5));
        // Later updates: the move goes on, another begins.
        let more = moving
            .clone()
            .with_migration(9, 1)
            .expect("a migration")
            .with_moves_begun(&moving, 6)
            .with_version(6);
        assert_eq!(more.migration(3).map(|m| m.since), Some(5), "goes on");
        assert_eq!(more.migration(9).map(|m| m.since), Some(6), "begins");
        // A writer's own `since` (forged, or copied from an earlier move) is not kept.
        let mut text: serde_json::Value =
            serde_json::from_str(&more.to_json()).expect("a valid map");
        text["migrations"][0]["since"] = 1_000.into();
        text["migrations"][1]["since"] = 1.into();
        let forged = SlotMap::from_json(&text.to_string()).expect("a valid map");
        let stamped = forged.with_moves_begun(&more, 7);
        assert_eq!(stamped.migration(3).map(|m| m.since), Some(5));
        assert_eq!(stamped.migration(9).map(|m| m.since), Some(6));
        // Given up and begun again (or towards another node): a new move.
        let given_up = base.clone().with_version(7);
        let again = base
            .clone()
            .with_migration(3, 1)
            .expect("a migration")
            .with_moves_begun(&given_up, 8);
        assert_eq!(again.migration(3).map(|m| m.since), Some(8));
        let (three, _) = more.clone().with_node(&member(3));
        let elsewhere = three
            .with_migration(3, 2)
            .expect("a migration")
            .with_moves_begun(&more, 7);
        assert_eq!(elsewhere.migration(3).map(|m| m.since), Some(7));
        // A node leaving the map shifts indices, not identities.
        assert_eq!(
            SlotMap::from_json(&more.to_json()).expect("a valid map"),
            more,
            "`since` round-trips"
        );
    }

    #[test]
    fn corrupted_maps_are_refused_with_what_is_wrong() {
        let (a, b) = (member(1).id, member(2).id);
        let cases = [
            ("{\"version\":1,\"nodes\":[", "slot map: EOF"),
            (
                r#"{"version":1,"nodes":[{"id":"xyz","addr":"127.0.0.1:1","slots":[]}]}"#,
                "node id \"xyz\"",
            ),
            (
                &format!(
                    r#"{{"version":1,"nodes":[{{"id":"{a}","addr":"127.0.0.1:1","slots":[[0,16384]]}}]}}"#
                ),
                "slot range 0-16384",
            ),
            (
                &format!(
                    r#"{{"version":1,"nodes":[{{"id":"{a}","addr":"127.0.0.1:1","slots":[[0,10]]}},{{"id":"{b}","addr":"127.0.0.1:2","slots":[[10,20]]}}]}}"#
                ),
                "slot 10 is owned by both",
            ),
            (
                &format!(
                    r#"{{"version":1,"nodes":[{{"id":"{a}","addr":"127.0.0.1:1","slots":[[0,10]]}},{{"id":"{b}","addr":"127.0.0.1:2","slots":[]}}],"migrations":[{{"slot":11,"from":"{a}","to":"{b}"}}]}}"#
                ),
                "migration of slot 11",
            ),
            (
                &format!(
                    r#"{{"version":1,"nodes":[{{"id":"{a}","addr":"127.0.0.1:1","slots":[]}},{{"id":"{a}","addr":"127.0.0.1:2","slots":[]}}]}}"#
                ),
                "appears twice",
            ),
        ];
        for (text, want) in cases {
            let err = SlotMap::from_json(text).expect_err("refused").to_string();
            assert!(err.contains(want), "{err} should say {want}");
        }
    }
}
