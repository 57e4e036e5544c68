//! Belady's MIN: evict the object whose next request is furthest in the future (the offline
//! optimum for unit sizes; needs each request's next-access time, see `pliant trace convert`).
//!
//! libCacheSim semantics (`Belady.c`): a hit updates the object's next-access time; eviction pops
//! the maximum of a priority queue keyed by next-access time as a `double`, never-again objects
//! at `INT64_MAX`. Which of several never-again objects goes first matters once sizes vary, so the
//! queue reproduces libCacheSim's binary heap (`pqueue.c`: 1-based, sift-up while the parent is
//! strictly smaller, sift-down to the larger child preferring the left on ties, removal by moving
//! the last element into the hole).

use crate::algorithm::{Algorithm, Evicted, Request, Units};
use crate::list::{Index, new_index};

#[derive(Debug, Clone, Copy)]
struct Node {
    key: u64,
    size: u32,
    pos: u32,
    pri: f64,
}

/// Belady's MIN.
#[derive(Debug)]
pub struct Belady {
    index: Index,
    nodes: Vec<Node>,
    free: Vec<u32>,
    /// Heap of node ids; slot 0 unused, as in libCacheSim.
    heap: Vec<u32>,
    units: Units,
    capacity: u64,
    weight: u64,
    bytes: u64,
}

impl Belady {
    /// A MIN cache of `capacity` in `units`.
    pub fn new(capacity: u64, units: Units) -> Self {
        Self {
            index: new_index(),
            nodes: Vec::new(),
            free: Vec::new(),
            heap: vec![u32::MAX],
            units,
            capacity,
            weight: 0,
            bytes: 0,
        }
    }

    #[inline]
    fn pri(&self, slot: usize) -> f64 {
        self.nodes[self.heap[slot] as usize].pri
    }

    #[inline]
    fn place(&mut self, slot: usize, id: u32) {
        self.heap[slot] = id;
        self.nodes[id as usize].pos = slot as u32;
    }

    fn bubble_up(&mut self, mut i: usize) {
        let moving = self.heap[i];
        let p = self.nodes[moving as usize].pri;
        while i > 1 && self.pri(i / 2) < p {
            let parent = self.heap[i / 2];
            self.place(i, parent);
            i /= 2;
        }
        self.place(i, moving);
    }

    fn max_child(&self, i: usize) -> Option<usize> {
        let l = 2 * i;
        if l >= self.heap.len() {
            return None;
        }
        if l + 1 < self.heap.len() && self.pri(l) < self.pri(l + 1) {
            Some(l + 1)
        } else {
            Some(l)
        }
    }

    fn percolate_down(&mut self, mut i: usize) {
        let moving = self.heap[i];
        let p = self.nodes[moving as usize].pri;
        while let Some(c) = self.max_child(i) {
            // libCacheSim continues while `p < child`; priorities are never NaN, so this is its
            // exact negation.
            if p >= self.pri(c) {
                break;
            }
            let child = self.heap[c];
            self.place(i, child);
            i = c;
        }
        self.place(i, moving);
    }

    fn heap_remove(&mut self, id: u32) {
        let posn = self.nodes[id as usize].pos as usize;
        let last = self.heap.pop().unwrap_or(u32::MAX);
        if posn == self.heap.len() {
            return; // it was the last element
        }
        self.place(posn, last);
        if self.nodes[id as usize].pri < self.nodes[last as usize].pri {
            self.bubble_up(posn);
        } else {
            self.percolate_down(posn);
        }
    }

    fn release(&mut self, id: u32) -> Evicted {
        let n = self.nodes[id as usize];
        self.index.remove(&n.key);
        self.free.push(id);
        self.weight -= self.units.weight(n.size);
        self.bytes -= u64::from(n.size);
        Evicted {
            key: n.key,
            size: n.size,
            slot: id,
        }
    }
}

fn priority(next_access: i64) -> f64 {
    // libCacheSim stores next-access as a double; -1 (none) arrives as INT64_MAX.
    if next_access < 0 {
        i64::MAX as f64
    } else {
        next_access as f64
    }
}

impl Algorithm for Belady {
    fn name(&self) -> &'static str {
        "belady"
    }

    fn find(&mut self, req: &Request, update: bool) -> Option<u32> {
        let id = *self.index.get(&req.key)?;
        if update {
            let old = self.nodes[id as usize].pri;
            let new = priority(req.next_access);
            self.nodes[id as usize].pri = new;
            let pos = self.nodes[id as usize].pos as usize;
            if old < new {
                self.bubble_up(pos);
            } else {
                self.percolate_down(pos);
            }
        }
        Some(self.nodes[id as usize].size)
    }

    fn can_insert(&self, req: &Request) -> bool {
        self.units.weight(req.size) <= self.capacity
    }

    fn insert(&mut self, req: &Request) -> bool {
        let node = Node {
            key: req.key,
            size: req.size,
            pos: 0,
            pri: priority(req.next_access),
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.nodes[id as usize] = node;
                id
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        self.index.insert(req.key, id);
        self.weight += self.units.weight(req.size);
        self.bytes += u64::from(req.size);
        self.heap.push(id);
        let last = self.heap.len() - 1;
        self.bubble_up(last);
        true
    }

    fn evict(&mut self, _req: &Request) -> Option<Evicted> {
        if self.heap.len() <= 1 {
            return None;
        }
        let top = self.heap[1];
        let last = self.heap.pop().unwrap_or(top);
        if self.heap.len() > 1 {
            self.place(1, last);
            self.percolate_down(1);
        }
        Some(self.release(top))
    }

    fn slot(&self, key: u64) -> Option<u32> {
        self.index.get(&key).copied()
    }

    fn remove(&mut self, key: u64) -> Option<u32> {
        let id = *self.index.get(&key)?;
        self.heap_remove(id);
        Some(self.release(id).size)
    }

    fn occupied(&self) -> u64 {
        self.weight
    }

    fn len(&self) -> u64 {
        self.index.len() as u64
    }

    fn bytes(&self) -> u64 {
        self.bytes
    }

    fn set_capacity(&mut self, capacity: u64) {
        self.capacity = capacity;
    }

    fn allocated_bytes(&self) -> usize {
        self.index.capacity() * (std::mem::size_of::<(u64, u32)>() + 1)
            + self.nodes.capacity() * std::mem::size_of::<Node>()
            + self.heap.capacity() * 4
            + self.free.capacity() * 4
    }
}
