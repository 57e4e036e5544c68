//! ARC (Megiddo & Modha, FAST '03): two LRU lists, recent (T1) and frequent (T2), with ghost
//! lists (B1, B2) that adapt the target size `p` of T1.
//!
//! libCacheSim semantics (`ARC.c`), kept exactly, including for variable sizes:
//! - `p` is a float; a ghost hit in B1 adds `max(|B2| / |B1|, 1)` (sizes before removing the hit,
//!   in the cache's units) capped at the capacity; a ghost hit in B2 subtracts `max(|B1| / |B2|,
//!   1)` floored at 0. The ghost entry is dropped and the request is a miss.
//! - A hit in T1 moves the object to T2's head; a hit in T2 moves it to T2's head. Sizes are kept.
//! - Insert goes to T2's head if this request hit a ghost, else to T1's head.
//! - Eviction after a ghost hit is REPLACE: evict T1's tail into B1 when T1 is non-empty and
//!   (|T1| > p, or |T1| = p and the ghost hit was in B2), or when T2 is empty; otherwise T2's tail
//!   into B2.
//! - Eviction on a miss in all lists (case IV): if |T1| + |B1| + incoming > c, drop B1's tail and
//!   REPLACE when B1 is non-empty, else evict T1's tail without a ghost; otherwise, if
//!   |T1| + |B1| + |T2| + |B2| ≥ 2c and B2 is non-empty, drop B2's tail, then REPLACE.
//! - The ghost-hit flags are cleared only by a later hit (data or ghost) or by the insert that
//!   follows a ghost hit, and REPLACE's tie rule reads the flag as it stands.

use crate::algorithm::{Algorithm, Evicted, Request, Units};
use crate::core::Core;
use crate::list::List;

const T1: u32 = 0;
const T2: u32 = 1;
const B1: u32 = 2;
const B2: u32 = 3;

/// Adaptive replacement cache.
#[derive(Debug)]
pub struct Arc {
    core: Core,
    lists: [List; 4],
    p: f64,
    in_b1: bool,
    in_b2: bool,
    /// Request number of the last ghost hit; the flags count only during that request.
    ghost_hit_at: i64,
    n_req: i64,
}

impl Arc {
    /// An ARC of `capacity` in `units`.
    pub fn new(capacity: u64, units: Units) -> Self {
        Self {
            core: Core::new(capacity, units),
            lists: [List::default(); 4],
            p: 0.0,
            in_b1: false,
            in_b2: false,
            ghost_hit_at: -1,
            n_req: 0,
        }
    }

    fn ghost_hit_now(&self) -> bool {
        self.ghost_hit_at == self.n_req && (self.in_b1 || self.in_b2)
    }

    /// Moves the tail of data list `from` to the head of ghost list `to`.
    fn demote(&mut self, from: u32, to: u32) -> Option<Evicted> {
        let i = Core::tail(&self.lists[from as usize])?;
        let n = *self.core.slab.get(i);
        let w = self.core.weight(n.size);
        self.lists[from as usize].unlink(&mut self.core.slab, i, w);
        self.lists[to as usize].push_head(&mut self.core.slab, i, w);
        self.core.slab.get_mut(i).meta = to;
        self.core.bytes -= u64::from(n.size);
        Some(Evicted {
            key: n.key,
            size: n.size,
            slot: i,
        })
    }

    /// Drops the tail of a ghost list.
    fn drop_ghost(&mut self, ghost: u32) {
        if let Some(i) = Core::tail(&self.lists[ghost as usize]) {
            let w = self.core.weight(self.core.slab.get(i).size);
            self.lists[ghost as usize].unlink(&mut self.core.slab, i, w);
            self.core.free(i);
        }
    }

    fn replace(&mut self) -> Option<Evicted> {
        let t1 = self.lists[T1 as usize].weight as f64;
        let cond1 = t1 > 0.0;
        let cond2 = t1 > self.p;
        let cond3 = t1 == self.p && self.in_b2;
        let cond4 = self.lists[T2 as usize].weight == 0;
        if (cond1 && (cond2 || cond3)) || cond4 {
            self.demote(T1, B1)
        } else {
            self.demote(T2, B2)
        }
    }

    fn evict_miss_on_all_lists(&mut self, req: &Request) -> Option<Evicted> {
        let [t1, t2, b1, b2] = self.lists.map(|l| l.weight);
        let cap = self.core.capacity;
        if t1 + b1 + self.core.weight(req.size) > cap {
            if b1 > 0 {
                self.drop_ghost(B1);
                self.replace()
            } else {
                let i = Core::tail(&self.lists[T1 as usize])?;
                let mut l = self.lists[T1 as usize];
                let e = self.core.drop_resident(&mut l, i);
                self.lists[T1 as usize] = l;
                Some(e)
            }
        } else {
            if t1 + b1 + t2 + b2 >= 2 * cap && b2 > 0 {
                self.drop_ghost(B2);
            }
            self.replace()
        }
    }
}

impl Algorithm for Arc {
    fn name(&self) -> &'static str {
        "arc"
    }

    fn find(&mut self, req: &Request, update: bool) -> Option<u32> {
        let i = self.core.lookup(req.key)?;
        let n = *self.core.slab.get(i);
        let ghost = n.meta == B1 || n.meta == B2;
        if !update {
            return (!ghost).then_some(n.size);
        }
        self.n_req += 1;
        self.in_b1 = false;
        self.in_b2 = false;
        let w = self.core.weight(n.size);
        if ghost {
            self.ghost_hit_at = self.n_req;
            let [_, _, b1, b2] = self.lists.map(|l| l.weight as f64);
            if n.meta == B1 {
                self.in_b1 = true;
                let delta = (b2 / b1).max(1.0);
                self.p = (self.p + delta).min(self.core.capacity as f64);
            } else {
                self.in_b2 = true;
                let delta = (b1 / b2).max(1.0);
                self.p = (self.p - delta).max(0.0);
            }
            self.lists[n.meta as usize].unlink(&mut self.core.slab, i, w);
            self.core.free(i);
            return None;
        }
        if n.meta == T1 {
            self.lists[T1 as usize].unlink(&mut self.core.slab, i, w);
            self.lists[T2 as usize].push_head(&mut self.core.slab, i, w);
            self.core.slab.get_mut(i).meta = T2;
        } else {
            self.lists[T2 as usize].move_to_head(&mut self.core.slab, i);
        }
        Some(n.size)
    }

    fn can_insert(&self, req: &Request) -> bool {
        self.core.weight(req.size) <= self.core.capacity
    }

    fn insert(&mut self, req: &Request) -> bool {
        let target = if self.ghost_hit_now() {
            self.in_b1 = false;
            self.in_b2 = false;
            self.ghost_hit_at = -1;
            T2
        } else {
            T1
        };
        let mut l = self.lists[target as usize];
        self.core.add_resident(&mut l, req.key, req.size, target);
        self.lists[target as usize] = l;
        true
    }

    fn evict(&mut self, req: &Request) -> Option<Evicted> {
        if self.ghost_hit_now() {
            self.replace()
        } else {
            self.evict_miss_on_all_lists(req)
        }
    }

    fn slot(&self, key: u64) -> Option<u32> {
        let i = self.core.lookup(key)?;
        let meta = self.core.slab.get(i).meta;
        (meta != B1 && meta != B2).then_some(i)
    }

    fn remove(&mut self, key: u64) -> Option<u32> {
        let i = self.core.lookup(key)?;
        let n = *self.core.slab.get(i);
        let w = self.core.weight(n.size);
        self.lists[n.meta as usize].unlink(&mut self.core.slab, i, w);
        self.core.free(i);
        if n.meta == B1 || n.meta == B2 {
            return None;
        }
        self.core.bytes -= u64::from(n.size);
        Some(n.size)
    }

    fn occupied(&self) -> u64 {
        self.lists[T1 as usize].weight + self.lists[T2 as usize].weight
    }

    fn len(&self) -> u64 {
        self.lists[T1 as usize].len + self.lists[T2 as usize].len
    }

    fn bytes(&self) -> u64 {
        self.core.bytes
    }

    fn set_capacity(&mut self, capacity: u64) {
        self.core.capacity = capacity;
        self.p = self.p.min(capacity as f64);
    }

    fn allocated_bytes(&self) -> usize {
        self.core.allocated_bytes()
    }
}
