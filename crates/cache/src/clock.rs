//! CLOCK (second chance): FIFO that gives accessed objects another round.
//!
//! libCacheSim semantics (`Clock.c`, defaults `n-bit-counter=1`, `init-freq=0`): a miss inserts at
//! the head with frequency 0; a hit raises the frequency to at most 1 (the reference bit).
//! Eviction looks at the tail: while its frequency is at least 1, decrement it and move the object
//! to the head; then evict the tail. Hits keep the original size.

use crate::algorithm::{Algorithm, Evicted, Request, Units};
use crate::core::Core;
use crate::list::List;

/// CLOCK with one reference bit.
#[derive(Debug)]
pub struct Clock {
    core: Core,
    q: List,
    max_freq: u32,
}

impl Clock {
    /// Nothing to adjust before a removal.
    fn before_remove(&mut self, _i: u32) {}

    /// A CLOCK of `capacity` in `units`.
    pub fn new(capacity: u64, units: Units) -> Self {
        Self {
            core: Core::new(capacity, units),
            q: List::default(),
            max_freq: 1,
        }
    }
}

impl Algorithm for Clock {
    fn name(&self) -> &'static str {
        "clock"
    }

    #[inline]
    fn find(&mut self, req: &Request, update: bool) -> Option<u32> {
        let i = self.core.lookup(req.key)?;
        let n = self.core.slab.get_mut(i);
        if update && n.meta < self.max_freq {
            n.meta += 1;
        }
        Some(n.size)
    }

    fn insert(&mut self, req: &Request) -> bool {
        self.core.add_resident(&mut self.q, req.key, req.size, 0);
        true
    }

    fn evict(&mut self, _req: &Request) -> Option<Evicted> {
        let mut i = Core::tail(&self.q)?;
        while self.core.slab.get(i).meta >= 1 {
            self.core.slab.get_mut(i).meta -= 1;
            self.q.move_to_head(&mut self.core.slab, i);
            i = self.q.tail;
        }
        Some(self.core.drop_resident(&mut self.q, i))
    }

    crate::core::single_queue_accounting!();
}
