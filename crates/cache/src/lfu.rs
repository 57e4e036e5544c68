//! LFU: evict the least frequently used object; among equals, the one that reached that
//! frequency first.
//!
//! libCacheSim semantics (`LFU.c`): a miss inserts with frequency 1 (frequencies are not
//! remembered after eviction); a hit raises the frequency by one and appends the object to the
//! end of its new frequency's FIFO; eviction takes the oldest object of the lowest non-empty
//! frequency. Hits keep the original size.

use std::collections::BTreeMap;

use crate::algorithm::{Algorithm, Evicted, Request, Units};
use crate::core::Core;
use crate::list::List;

/// Least frequently used, FIFO among equal frequencies.
#[derive(Debug)]
pub struct Lfu {
    core: Core,
    /// Frequency → objects with that frequency (head = most recent arrival). Empty buckets are
    /// dropped, so the first entry is the minimum frequency.
    buckets: BTreeMap<u32, List>,
    weight: u64,
    len: u64,
}

impl Lfu {
    /// An LFU of `capacity` in `units`.
    pub fn new(capacity: u64, units: Units) -> Self {
        Self {
            core: Core::new(capacity, units),
            buckets: BTreeMap::new(),
            weight: 0,
            len: 0,
        }
    }

    fn take_from_bucket(&mut self, freq: u32, i: u32, w: u64) {
        if let Some(b) = self.buckets.get_mut(&freq) {
            b.unlink(&mut self.core.slab, i, w);
            if b.len == 0 {
                self.buckets.remove(&freq);
            }
        }
    }
}

impl Algorithm for Lfu {
    fn name(&self) -> &'static str {
        "lfu"
    }

    fn find(&mut self, req: &Request, update: bool) -> Option<u32> {
        let i = self.core.lookup(req.key)?;
        let n = *self.core.slab.get(i);
        if update {
            let w = self.core.weight(n.size);
            self.take_from_bucket(n.meta, i, w);
            self.core.slab.get_mut(i).meta = n.meta + 1;
            self.buckets
                .entry(n.meta + 1)
                .or_default()
                .push_head(&mut self.core.slab, i, w);
        }
        Some(n.size)
    }

    fn can_insert(&self, req: &Request) -> bool {
        self.core.weight(req.size) <= self.core.capacity
    }

    fn insert(&mut self, req: &Request) -> bool {
        let mut ones = self.buckets.remove(&1).unwrap_or_default();
        self.core.add_resident(&mut ones, req.key, req.size, 1);
        self.buckets.insert(1, ones);
        self.weight += self.core.weight(req.size);
        self.len += 1;
        true
    }

    fn evict(&mut self, _req: &Request) -> Option<Evicted> {
        let (&freq, bucket) = self.buckets.first_key_value()?;
        let i = bucket.tail;
        let size = self.core.slab.get(i).size;
        let w = self.core.weight(size);
        self.take_from_bucket(freq, i, w);
        self.core.bytes -= u64::from(size);
        self.weight -= w;
        self.len -= 1;
        Some(self.core.free(i))
    }

    fn slot(&self, key: u64) -> Option<u32> {
        // No ghosts: every indexed node is resident.
        self.core.lookup(key)
    }

    fn remove(&mut self, key: u64) -> Option<u32> {
        let i = self.core.lookup(key)?;
        let n = *self.core.slab.get(i);
        let w = self.core.weight(n.size);
        self.take_from_bucket(n.meta, i, w);
        self.core.bytes -= u64::from(n.size);
        self.weight -= w;
        self.len -= 1;
        self.core.free(i);
        Some(n.size)
    }

    fn occupied(&self) -> u64 {
        self.weight
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn bytes(&self) -> u64 {
        self.core.bytes
    }

    fn set_capacity(&mut self, capacity: u64) {
        self.core.capacity = capacity;
    }

    fn allocated_bytes(&self) -> usize {
        self.core.allocated_bytes() + self.buckets.len() * 48
    }
}
