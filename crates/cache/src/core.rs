//! State shared by the list-based algorithms: the key index, node storage, units and capacity.

use crate::algorithm::{Evicted, Units};
use crate::list::{Index, List, NIL, Slab, new_index};

/// Index + slab + capacity bookkeeping. Ghost entries, where an algorithm keeps them, live here
/// too; resident weight and bytes are tracked by the algorithm's lists.
#[derive(Debug)]
pub(crate) struct Core {
    pub index: Index,
    pub slab: Slab,
    pub units: Units,
    pub capacity: u64,
    /// Resident bytes (ghosts excluded).
    pub bytes: u64,
}

impl Core {
    pub fn new(capacity: u64, units: Units) -> Self {
        Self {
            index: new_index(),
            slab: Slab::default(),
            units,
            capacity,
            bytes: 0,
        }
    }

    #[inline]
    pub fn weight(&self, size: u32) -> u64 {
        self.units.weight(size)
    }

    #[inline]
    pub fn lookup(&self, key: u64) -> Option<u32> {
        self.index.get(&key).copied()
    }

    /// Allocates a node for `key` and indexes it.
    #[inline]
    pub fn alloc(&mut self, key: u64, size: u32, meta: u32) -> u32 {
        let i = self.slab.alloc(key, size, meta);
        self.index.insert(key, i);
        i
    }

    /// Drops node `i` (already unlinked) from the index and storage.
    #[inline]
    pub fn free(&mut self, i: u32) -> Evicted {
        let n = *self.slab.get(i);
        self.index.remove(&n.key);
        self.slab.release(i);
        Evicted {
            key: n.key,
            size: n.size,
            slot: i,
        }
    }

    /// Unlinks resident node `i` from `list` and frees it.
    #[inline]
    pub fn drop_resident(&mut self, list: &mut List, i: u32) -> Evicted {
        let size = self.slab.get(i).size;
        list.unlink(&mut self.slab, i, self.units.weight(size));
        self.bytes -= u64::from(size);
        self.free(i)
    }

    /// Allocates a resident node at the head of `list`.
    #[inline]
    pub fn add_resident(&mut self, list: &mut List, key: u64, size: u32, meta: u32) -> u32 {
        let i = self.alloc(key, size, meta);
        list.push_head(&mut self.slab, i, self.units.weight(size));
        self.bytes += u64::from(size);
        i
    }

    pub fn allocated_bytes(&self) -> usize {
        // hashbrown: one control byte per bucket plus the (key, value) pair.
        self.index.capacity() * (std::mem::size_of::<(u64, u32)>() + 1)
            + self.slab.allocated_bytes()
    }

    /// The tail of `list`, if any.
    #[inline]
    pub fn tail(list: &List) -> Option<u32> {
        (list.tail != NIL).then_some(list.tail)
    }
}

/// The `Algorithm` methods every single-queue algorithm (`core` + one list `q`) implements the same
/// way: admission by size, removal, occupancy, capacity and memory accounting.
macro_rules! single_queue_accounting {
    () => {
        fn can_insert(&self, req: &Request) -> bool {
            self.core.weight(req.size) <= self.core.capacity
        }

        fn slot(&self, key: u64) -> Option<u32> {
            // Every indexed node is resident: these algorithms keep no ghosts.
            self.core.lookup(key)
        }

        fn remove(&mut self, key: u64) -> Option<u32> {
            let i = self.core.lookup(key)?;
            self.before_remove(i);
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
    };
}

pub(crate) use single_queue_accounting;
