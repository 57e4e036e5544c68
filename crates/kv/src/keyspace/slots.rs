//! The keys of each of Redis Cluster's 16,384 hash slots, so that `CLUSTER COUNTKEYSINSLOT`,
//! `GETKEYSINSLOT` and a slot move's `PLIANT.SLOTKEYS`, `SLOTCOUNT` and `SLOTSTATS` read the
//! slots they want and nothing else, instead of walking every key the node holds.
//!
//! It holds every key that exists on the node, expired ones not yet deleted included, as
//! `DBSIZE` counts them: with a store, the store's keys with the writes not yet written laid
//! over them (the store is the truth); without one, memory's (and on a tier, what memory holds
//! of the parent's keys, which is what the node can list: a walk answered the same before).
//! The keyspace keeps it in step where a key comes or goes (see [`super::Keyspace`]'s
//! `index_*` calls), and builds it once, by one walk of the store or of memory, when the node
//! joins a cluster (or on the first slot command of a node outside one). Outside a cluster it
//! is not built at all, as Redis keeps its slot-to-key index only in cluster mode: a lone node
//! pays nothing for it.
//!
//! Why it is shaped so:
//! - One ordered map per slot (std's B-tree): a slot's walk resumes from its last key however
//!   keys came and went meanwhile (a key present throughout is after the token or before it,
//!   never both: returned once, never skipped), in O(log n) whatever the slot's size, and a
//!   node holding all its keys in one slot (one hash tag) costs no more per key. A hash table
//!   per slot (Redis 7.2's) could only resume with a reverse-binary cursor, which may return a
//!   key twice across a resize.
//! - The count and the bytes of each slot kept beside its map: a slot's count and a node's
//!   `SLOTSTATS` without a walk.
//! - Keys of up to 22 bytes are held in place (most keys are short; `key:000000012345` is 16):
//!   no allocation of their own, and a new key costs only its share of a B-tree node. A SET of
//!   a key the index already holds looks it up and updates its entry: no allocation at all.
//! - Each key's size and expiry beside it, 12 bytes: a deletion takes the right bytes off its
//!   slot without reading the value it deletes, and a count leaves out keys whose expiry has
//!   passed. Each slot keeps a lower bound of its keys' expiries, so a slot none of whose keys
//!   has expired is counted in O(1); one that has is walked once (that slot only), and the
//!   keyspace deletes what expired there, as a read of those keys would.
//!
//! Cost: an entry is 36 bytes (a 24-byte key, a 12-byte size and expiry) in B-tree nodes of up
//! to 11, plus the key's own allocation past 22 bytes. Built from a store, each slot's map is
//! built in bulk, its nodes full; keys inserted one by one leave nodes from half to fully used.
//! Measured (`examples/slot_index.rs`, 1 M keys of 16 bytes): 47 bytes a key built from a store,
//! 58 to 66 grown by SETs (scattered or in key order); so 2 M keys cost 94 to 133 MB beside
//! their 2 GiB of 1 KiB values, and every key a node holds, in memory or only in its store, is
//! in it (bounded as the keys are). The 16,384 empty slots cost 0.8 MB. Building it is one walk
//! of the store in key order: 2.1 s for 1 M keys of 1 KiB (same example, on a shared 2-core
//! machine), paid when the node starts. A SET of a new key adds a B-tree insert: 0.45 µs with
//! keys in order, 0.8 to 1.1 µs scattered (cache misses). A pipelined load of nothing but new
//! keys feels it: `redis-benchmark -P 16 -t set -r 100000000` on a one-node cluster ran at 0.65×
//! the rate of the node without the index, on this shared machine; with keys set again (`-r
//! 100000`, as `vs_redis.sh` runs) the difference was within the noise, since a key set again
//! with a value of the same size and expiry leaves the index untouched (the keyspace checks in
//! memory first).

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::ops::Bound;

use bytes::Bytes;

use crate::cluster::{SLOTS, key_slot};

/// Keys up to this long are held in place.
const INLINE: usize = 22;

/// A key as the index holds it: in place if short, boxed otherwise. Ordered by its bytes.
#[derive(Clone)]
enum Key {
    Inline { len: u8, bytes: [u8; INLINE] },
    Boxed(Box<[u8]>),
}

impl Key {
    fn new(key: &[u8]) -> Self {
        if key.len() <= INLINE {
            let mut bytes = [0; INLINE];
            bytes[..key.len()].copy_from_slice(key);
            Self::Inline {
                len: key.len() as u8,
                bytes,
            }
        } else {
            Self::Boxed(key.into())
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Self::Boxed(b) => b,
        }
    }
}

impl Borrow<[u8]> for Key {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

/// A key's bytes (key and value, as `SLOTSTATS` counts them) and its expiry (unix ms, 0 for
/// none), in three 4-byte words so an entry is 12 bytes rather than 16.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Meta {
    bytes: u32,
    expires: [u32; 2],
}

impl Meta {
    fn new(bytes: u32, expires_at: Option<u64>) -> Self {
        // An expiry at 0 is kept as 1 (as memory keeps it), since 0 says there is none.
        let t = expires_at.map_or(0, |t| t.max(1));
        Self {
            bytes,
            expires: [(t >> 32) as u32, t as u32],
        }
    }

    fn expires_at(self) -> Option<u64> {
        let t = (u64::from(self.expires[0]) << 32) | u64::from(self.expires[1]);
        (t != 0).then_some(t)
    }

    fn live(self, now: u64) -> bool {
        self.expires_at().is_none_or(|t| t > now)
    }
}

/// One slot's keys.
#[derive(Default)]
struct Slot {
    keys: BTreeMap<Key, Meta>,
    /// The sum of the keys' bytes.
    bytes: u64,
    /// Keys with an expiry.
    expiring: u64,
    /// No key of the slot expires before this (unix ms): exact after a look at the slot
    /// ([`SlotIndex::expired`]), a lower bound as keys leave; 0 with none.
    soonest: u64,
}

/// The index (see the module doc).
pub(crate) struct SlotIndex {
    slots: Box<[Slot]>,
    /// Keys in every slot.
    keys: u64,
}

impl std::fmt::Debug for SlotIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotIndex")
            .field("keys", &self.keys)
            .finish()
    }
}

impl Default for SlotIndex {
    fn default() -> Self {
        Self {
            slots: (0..SLOTS).map(|_| Slot::default()).collect(),
            keys: 0,
        }
    }
}

/// Where a walk of slots goes on from: after `key` in `slot` (a token of `PLIANT.SLOTKEYS`:
/// the slot's two bytes, big-endian, then the key, so it is never empty, and an empty key has
/// a token too).
pub(crate) fn token(slot: u16, key: &[u8]) -> Bytes {
    let mut t = Vec::with_capacity(2 + key.len());
    t.extend_from_slice(&slot.to_be_bytes());
    t.extend_from_slice(key);
    t.into()
}

/// The slot and key of a [`token`], if it is one.
pub(crate) fn parse_token(t: &[u8]) -> Option<(u16, &[u8])> {
    let (s, key) = t.split_first_chunk::<2>()?;
    let slot = u16::from_be_bytes(*s);
    (slot < SLOTS).then_some((slot, key))
}

impl SlotIndex {
    /// `key` exists with `bytes` (key and value) and this expiry, replacing what it had.
    pub(crate) fn insert(&mut self, key: &[u8], bytes: u32, expires_at: Option<u64>) {
        let s = &mut self.slots[usize::from(key_slot(key))];
        let meta = Meta::new(bytes, expires_at);
        if let Some(t) = expires_at {
            s.soonest = if s.expiring == 0 { t } else { s.soonest.min(t) };
        }
        let old = match s.keys.get_mut(key) {
            Some(m) => Some(std::mem::replace(m, meta)),
            None => {
                s.keys.insert(Key::new(key), meta);
                self.keys += 1;
                None
            }
        };
        s.bytes += u64::from(bytes);
        s.expiring += u64::from(expires_at.is_some());
        if let Some(old) = old {
            s.bytes -= u64::from(old.bytes);
            s.expiring -= u64::from(old.expires_at().is_some());
        }
    }

    /// An index of `entries` (key, bytes, expiry), which come in key order (a store's walk):
    /// each slot's map is built in bulk from its keys, sorted, so its nodes are full, where
    /// inserting keys in order one by one leaves them half empty.
    pub(crate) fn build(entries: impl Iterator<Item = (Vec<u8>, u32, Option<u64>)>) -> Self {
        let mut by_slot: Vec<Vec<(Key, Meta)>> = (0..SLOTS).map(|_| Vec::new()).collect();
        let mut ix = Self::default();
        for (k, bytes, expires_at) in entries {
            let slot = key_slot(&k);
            let s = &mut ix.slots[usize::from(slot)];
            s.bytes += u64::from(bytes);
            if let Some(t) = expires_at {
                s.soonest = if s.expiring == 0 { t } else { s.soonest.min(t) };
                s.expiring += 1;
            }
            by_slot[usize::from(slot)].push((Key::new(&k), Meta::new(bytes, expires_at)));
            ix.keys += 1;
        }
        for (s, keys) in ix.slots.iter_mut().zip(by_slot) {
            s.keys = keys.into_iter().collect();
        }
        ix
    }

    /// `key` no longer exists.
    pub(crate) fn remove(&mut self, key: &[u8]) {
        let s = &mut self.slots[usize::from(key_slot(key))];
        if let Some(old) = s.keys.remove(key) {
            s.bytes -= u64::from(old.bytes);
            s.expiring -= u64::from(old.expires_at().is_some());
            self.keys -= 1;
        }
    }

    /// No key exists.
    pub(crate) fn clear(&mut self) {
        if self.keys > 0 {
            *self = Self::default();
        }
    }

    /// Keys in every slot.
    pub(crate) fn len(&self) -> u64 {
        self.keys
    }

    /// Keys of `slot` and their bytes, expired ones not yet deleted included.
    pub(crate) fn slot(&self, slot: u16) -> (u64, u64) {
        let s = &self.slots[usize::from(slot)];
        (s.keys.len() as u64, s.bytes)
    }

    /// Whether a key of `slot` may have expired by `now` (O(1); `false` is sure).
    pub(crate) fn due(&self, slot: u16, now: u64) -> bool {
        let s = &self.slots[usize::from(slot)];
        s.expiring > 0 && s.soonest <= now
    }

    /// The keys of `slot` whose expiry has passed at `now`, for the keyspace to delete; the
    /// slot's bound moves to the soonest expiry of the others. Walks the slot if it is
    /// [`due`](Self::due), else nothing.
    pub(crate) fn expired(&mut self, slot: u16, now: u64) -> Vec<Bytes> {
        if !self.due(slot, now) {
            return Vec::new();
        }
        let s = &mut self.slots[usize::from(slot)];
        let mut gone = Vec::new();
        let mut soonest = u64::MAX;
        for (k, m) in &s.keys {
            match m.expires_at() {
                Some(t) if t <= now => gone.push(Bytes::copy_from_slice(k.as_bytes())),
                Some(t) => soonest = soonest.min(t),
                None => {}
            }
        }
        s.soonest = soonest;
        gone
    }

    /// Up to `count` live keys (at `now`) of the slots `wanted` (ascending, no repeats), in
    /// slot order and key order within a slot, after the position `after` (the slot and key
    /// of a [`token`]; `None` to start); and the token to go on from if `count` were found.
    pub(crate) fn walk(
        &self,
        wanted: &[u16],
        after: Option<(u16, &[u8])>,
        count: usize,
        now: u64,
    ) -> (Vec<Bytes>, Option<Bytes>) {
        let mut found = Vec::new();
        if count == 0 {
            return (found, None);
        }
        let first = after.map_or(0, |(s, _)| wanted.partition_point(|&w| w < s));
        for &slot in &wanted[first..] {
            let lower = match after {
                Some((s, k)) if s == slot => Bound::Excluded(k),
                _ => Bound::Unbounded,
            };
            let keys = &self.slots[usize::from(slot)].keys;
            for (k, m) in keys.range::<[u8], _>((lower, Bound::Unbounded)) {
                if !m.live(now) {
                    continue;
                }
                found.push(Bytes::copy_from_slice(k.as_bytes()));
                if found.len() >= count {
                    return (found, Some(token(slot, k.as_bytes())));
                }
            }
        }
        (found, None)
    }

    /// The keys of `slots` (ascending) with their bytes and expiries, in slot order, after a
    /// check of the sums each of them keeps and of the count of every key (for tests'
    /// comparisons with a walk: looking at every slot at each step would be slow).
    #[cfg(test)]
    pub(crate) fn checked_entries(&self, slots: &[u16]) -> Vec<(Vec<u8>, u32, Option<u64>)> {
        let mut out = Vec::new();
        for &i in slots {
            let s = &self.slots[usize::from(i)];
            let bytes: u64 = s.keys.values().map(|m| u64::from(m.bytes)).sum();
            let expiring = s.keys.values().filter(|m| m.expires_at().is_some()).count();
            assert_eq!(s.bytes, bytes, "bytes of slot {i}");
            assert_eq!(s.expiring, expiring as u64, "expiring keys of slot {i}");
            if let Some(t) = s.keys.values().filter_map(|m| m.expires_at()).min() {
                assert!(s.soonest <= t, "slot {i}'s bound {} after {t}", s.soonest);
            }
            out.extend(
                s.keys
                    .iter()
                    .map(|(k, m)| (k.as_bytes().to_vec(), m.bytes, m.expires_at())),
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_held_in_place_up_to_22_bytes_and_compares_by_its_bytes() {
        assert_eq!(std::mem::size_of::<Key>(), 24);
        assert_eq!(std::mem::size_of::<Meta>(), 12);
        let short = Key::new(b"key:000000012345");
        assert!(matches!(short, Key::Inline { .. }));
        let long = Key::new(&[b'x'; 23]);
        assert!(matches!(long, Key::Boxed(_)));
        assert_eq!(long.as_bytes(), &[b'x'; 23]);
        // Ordered as their bytes, whichever way each is held.
        let mut keys: Vec<Key> = [&b"b"[..], &[b'a'; 30], b"", b"a", &[b'a'; 22]]
            .into_iter()
            .map(Key::new)
            .collect();
        keys.sort();
        let sorted: Vec<&[u8]> = keys.iter().map(Key::as_bytes).collect();
        assert_eq!(sorted, [&b""[..], b"a", &[b'a'; 22], &[b'a'; 30], b"b"]);
    }

    #[test]
    fn counts_and_bytes_follow_inserts_replacements_and_removals() {
        let mut ix = SlotIndex::default();
        let slot = key_slot(b"{t}a");
        ix.insert(b"{t}a", 10, None);
        ix.insert(b"{t}b", 20, Some(500));
        assert_eq!(ix.slot(slot), (2, 30));
        // A replacement counts once, with its new size; its expiry goes.
        ix.insert(b"{t}b", 5, None);
        assert_eq!(ix.slot(slot), (2, 15));
        assert!(!ix.due(slot, 1_000), "no key of the slot expires any more");
        ix.remove(b"{t}a");
        ix.remove(b"{t}never");
        assert_eq!(ix.slot(slot), (1, 5));
        assert_eq!(ix.len(), 1);
        let _ = ix.checked_entries(&[slot]);
        ix.clear();
        assert_eq!((ix.len(), ix.slot(slot)), (0, (0, 0)));
    }

    #[test]
    fn a_slot_is_due_once_an_expiry_passes_and_its_expired_keys_are_named() {
        let mut ix = SlotIndex::default();
        let slot = key_slot(b"{t}a");
        ix.insert(b"{t}a", 1, Some(100));
        ix.insert(b"{t}b", 1, Some(300));
        ix.insert(b"{t}c", 1, None);
        assert!(!ix.due(slot, 99));
        assert!(ix.expired(slot, 99).is_empty());
        assert!(ix.due(slot, 100));
        assert_eq!(ix.expired(slot, 150), [Bytes::from_static(b"{t}a")]);
        ix.remove(b"{t}a");
        // The bound moved to the next expiry: nothing to look at before it.
        assert!(!ix.due(slot, 299));
        assert!(ix.due(slot, 300));
        // Expired keys are left out of a walk even before they are deleted.
        let (keys, next) = ix.walk(&[slot], None, 10, 400);
        assert_eq!(keys, [Bytes::from_static(b"{t}c")]);
        assert_eq!(next, None);
    }

    #[test]
    fn a_walk_goes_slot_by_slot_and_resumes_after_its_token() {
        let mut ix = SlotIndex::default();
        let keys: Vec<String> = (0..200).map(|i| format!("k{i}")).collect();
        for k in &keys {
            ix.insert(k.as_bytes(), 3, None);
        }
        let mut wanted: Vec<u16> = keys.iter().map(|k| key_slot(k.as_bytes())).collect();
        wanted.sort_unstable();
        wanted.dedup();
        // Every other slot is wanted.
        let wanted: Vec<u16> = wanted.into_iter().step_by(2).collect();
        let mut expect: Vec<(u16, &[u8])> = keys
            .iter()
            .map(|k| (key_slot(k.as_bytes()), k.as_bytes()))
            .filter(|(s, _)| wanted.binary_search(s).is_ok())
            .collect();
        expect.sort();
        let mut got = Vec::new();
        let mut after: Option<Bytes> = None;
        loop {
            let (found, next) = ix.walk(
                &wanted,
                after.as_deref().map(|t| parse_token(t).expect("a token")),
                7,
                0,
            );
            assert!(found.len() <= 7);
            got.extend(found);
            match next {
                Some(t) => after = Some(t),
                None => break,
            }
        }
        let expect: Vec<Bytes> = expect
            .into_iter()
            .map(|(_, k)| Bytes::copy_from_slice(k))
            .collect();
        assert_eq!(got, expect);
    }

    #[test]
    fn a_token_holds_its_slot_and_key_and_is_never_empty() {
        assert_eq!(parse_token(&token(5, b"")), Some((5, &b""[..])));
        assert_eq!(
            parse_token(&token(16_383, b"ab")),
            Some((16_383, &b"ab"[..]))
        );
        assert_eq!(parse_token(b"x"), None);
        assert_eq!(parse_token(&[0xff, 0xff, b'a']), None, "no slot 65535");
    }
}
