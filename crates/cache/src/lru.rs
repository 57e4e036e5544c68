//! LRU: evict the least recently used object.
//!
//! libCacheSim semantics (`LRU.c`): a miss inserts at the head; a hit moves the object to the
//! head and keeps its original size; eviction takes the tail. An object heavier than the whole
//! cache is never admitted.

use crate::algorithm::{Algorithm, Evicted, Request, Units};
use crate::core::Core;
use crate::list::List;

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
    /// Nothing to adjust before a removal.
    fn before_remove(&mut self, _i: u32) {}

    /// A queue of `capacity` in `units`.
    pub fn new(capacity: u64, units: Units) -> Self {
        Self {
            core: Core::new(capacity, units),
            q: List::default(),
        }
    }
}

impl<const PROMOTE: bool> Algorithm for Queue<PROMOTE> {
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

    crate::core::single_queue_accounting!();
}
