//! LRU: evict the least recently used object.
//!
//! libCacheSim semantics (`LRU.c`): a miss inserts at the head; a hit moves the object to the
//! head and keeps its original size; eviction takes the tail. An object heavier than the whole
//! cache is never admitted.

use crate::core::Core;
use crate::list::List;
use crate::policy::{Evicted, Policy, Request, Units};

/// Least recently used.
pub type Lru = Queue<true>;

/// One queue, objects entering at the head and leaving from the tail; `PROMOTE` says whether a
/// hit moves the object back to the head (LRU) or not (FIFO, see [`crate::fifo`]).
#[derive(Debug)]
pub struct Queue<const PROMOTE: bool> {
    core: Core,
    q: List,
}

impl<const PROMOTE: bool> Queue<PROMOTE> {
    /// A queue of `capacity` in `units`.
    pub fn new(capacity: u64, units: Units) -> Self {
        Self {
            core: Core::new(capacity, units),
            q: List::default(),
        }
    }
}

impl<const PROMOTE: bool> Policy for Queue<PROMOTE> {
    fn name(&self) -> &'static str {
        if PROMOTE { "lru" } else { "fifo" }
    }

    #[inline]
    fn find(&mut self, req: &Request, update: bool) -> Option<u32> {
        let i = self.core.lookup(req.key)?;
        if PROMOTE && update {
            self.q.move_to_head(&mut self.core.slab, i);
        }
        Some(self.core.slab.get(i).size)
    }

    fn can_insert(&self, req: &Request) -> bool {
        self.core.weight(req.size) <= self.core.capacity
    }

    #[inline]
    fn insert(&mut self, req: &Request) -> bool {
        self.core.add_resident(&mut self.q, req.key, req.size, 0);
        true
    }

    #[inline]
    fn evict(&mut self, _req: &Request) -> Option<Evicted> {
        let i = Core::tail(&self.q)?;
        Some(self.core.drop_resident(&mut self.q, i))
    }

    fn remove(&mut self, key: u64) -> Option<u32> {
        let i = self.core.lookup(key)?;
        Some(self.core.drop_resident(&mut self.q, i).size)
    }

    fn occupied(&self) -> u64 {
        self.q.weight
    }

    fn len(&self) -> u64 {
        self.q.len
    }

    fn bytes(&self) -> u64 {
        self.core.bytes
    }

    fn set_capacity(&mut self, capacity: u64) {
        self.core.capacity = capacity;
    }

    fn allocated_bytes(&self) -> usize {
        self.core.allocated_bytes()
    }
}
