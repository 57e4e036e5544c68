//! SIEVE: a FIFO queue with a moving hand that skips (and clears) visited objects.
//!
//! libCacheSim semantics (`Sieve.c`): a miss inserts at the head, unvisited; a hit marks the
//! object visited (no movement, original size kept). Eviction starts at the hand, or at the tail
//! when there is no hand; visited objects are cleared and passed over toward the head, wrapping
//! from the head back to the tail; the first unvisited object is evicted and the hand stays at
//! the object just head-ward of it (none if it was the head). Removing the object under the hand
//! moves the hand head-ward too.

use crate::algorithm::{Algorithm, Evicted, Request, Units};
use crate::core::Core;
use crate::list::{List, NIL};

/// SIEVE.
#[derive(Debug)]
pub struct Sieve {
    core: Core,
    q: List,
    hand: u32,
}

impl Sieve {
    /// Removing the object under the hand moves the hand head-ward.
    fn before_remove(&mut self, i: u32) {
        if i == self.hand {
            self.hand = self.core.slab.get(i).prev;
        }
    }
    /// A SIEVE of `capacity` in `units`.
    pub fn new(capacity: u64, units: Units) -> Self {
        Self {
            core: Core::new(capacity, units),
            q: List::default(),
            hand: NIL,
        }
    }
}

impl Algorithm for Sieve {
    fn name(&self) -> &'static str {
        "sieve"
    }

    #[inline]
    fn find(&mut self, req: &Request, update: bool) -> Option<u32> {
        let i = self.core.lookup(req.key)?;
        let n = self.core.slab.get_mut(i);
        if update {
            n.meta = 1;
        }
        Some(n.size)
    }

    #[inline]
    fn insert(&mut self, req: &Request) -> bool {
        self.core.add_resident(&mut self.q, req.key, req.size, 0);
        true
    }

    #[inline]
    fn evict(&mut self, _req: &Request) -> Option<Evicted> {
        let tail = Core::tail(&self.q)?;
        let mut i = if self.hand == NIL { tail } else { self.hand };
        loop {
            let n = self.core.slab.get_mut(i);
            if n.meta == 0 {
                break;
            }
            n.meta -= 1;
            i = if n.prev == NIL { self.q.tail } else { n.prev };
        }
        self.hand = self.core.slab.get(i).prev;
        Some(self.core.drop_resident(&mut self.q, i))
    }

    crate::core::single_queue_accounting!();
}
