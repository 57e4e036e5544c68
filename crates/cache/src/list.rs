//! Arena-allocated intrusive doubly-linked lists: the queue structure under every list-based
//! algorithm.
//!
//! Nodes live in one `Vec` and link by `u32` index, so a node costs 24 bytes and following a link
//! is an array access. Naming follows libCacheSim: `head` is where new objects enter, `tail` is
//! the oldest end; `prev` points toward the head, `next` toward the tail.

use std::collections::HashMap;

/// No node.
pub(crate) const NIL: u32 = u32::MAX;

/// Key → node index. foldhash with a fixed seed: fast on integer keys and deterministic, so two
/// runs of a simulation visit hash-ordered state identically.
pub(crate) type Index = HashMap<u64, u32, foldhash::fast::FixedState>;

pub(crate) fn new_index() -> Index {
    Index::with_hasher(foldhash::fast::FixedState::with_seed(0x5eed))
}

/// One cached (or ghost) object.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Node {
    pub key: u64,
    pub size: u32,
    pub prev: u32,
    pub next: u32,
    /// Per-algorithm metadata: frequency, queue id, flags.
    pub meta: u32,
}

/// Node storage with a free list.
#[derive(Debug, Default)]
pub(crate) struct Slab {
    nodes: Vec<Node>,
    free: Vec<u32>,
}

impl Slab {
    pub fn alloc(&mut self, key: u64, size: u32, meta: u32) -> u32 {
        let node = Node {
            key,
            size,
            prev: NIL,
            next: NIL,
            meta,
        };
        match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        }
    }

    pub fn release(&mut self, i: u32) {
        self.free.push(i);
    }

    #[inline]
    pub fn get(&self, i: u32) -> &Node {
        &self.nodes[i as usize]
    }

    #[inline]
    pub fn get_mut(&mut self, i: u32) -> &mut Node {
        &mut self.nodes[i as usize]
    }

    /// Bytes of node storage allocated (for memory accounting).
    pub fn allocated_bytes(&self) -> usize {
        self.nodes.capacity() * std::mem::size_of::<Node>()
            + self.free.capacity() * std::mem::size_of::<u32>()
    }
}

/// A queue of nodes with its total weight (bytes or objects, as the algorithm counts).
#[derive(Debug, Clone, Copy)]
pub(crate) struct List {
    pub head: u32,
    pub tail: u32,
    pub len: u64,
    pub weight: u64,
}

impl Default for List {
    fn default() -> Self {
        Self {
            head: NIL,
            tail: NIL,
            len: 0,
            weight: 0,
        }
    }
}

impl List {
    /// Links node `i` in at the head.
    #[inline]
    pub fn push_head(&mut self, slab: &mut Slab, i: u32, weight: u64) {
        let old = self.head;
        {
            let n = slab.get_mut(i);
            n.prev = NIL;
            n.next = old;
        }
        if old == NIL {
            self.tail = i;
        } else {
            slab.get_mut(old).prev = i;
        }
        self.head = i;
        self.len += 1;
        self.weight += weight;
    }

    /// Unlinks node `i`, which must be in this list.
    #[inline]
    pub fn unlink(&mut self, slab: &mut Slab, i: u32, weight: u64) {
        let (prev, next) = {
            let n = slab.get(i);
            (n.prev, n.next)
        };
        if prev == NIL {
            self.head = next;
        } else {
            slab.get_mut(prev).next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            slab.get_mut(next).prev = prev;
        }
        let n = slab.get_mut(i);
        n.prev = NIL;
        n.next = NIL;
        self.len -= 1;
        self.weight -= weight;
    }

    /// Moves node `i` (in this list) to the head.
    #[inline]
    pub fn move_to_head(&mut self, slab: &mut Slab, i: u32) {
        if self.head == i {
            return;
        }
        self.unlink(slab, i, 0);
        self.push_head(slab, i, 0);
    }

    /// Keys from head to tail (tests and debugging).
    #[cfg(test)]
    pub fn keys(&self, slab: &Slab) -> Vec<u64> {
        let mut out = Vec::new();
        let mut i = self.head;
        while i != NIL {
            out.push(slab.get(i).key);
            i = slab.get(i).next;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_unlink_move_keep_links_and_weights() {
        let mut s = Slab::default();
        let mut l = List::default();
        let a = s.alloc(1, 10, 0);
        let b = s.alloc(2, 20, 0);
        let c = s.alloc(3, 30, 0);
        for (i, w) in [(a, 10), (b, 20), (c, 30)] {
            l.push_head(&mut s, i, w);
        }
        assert_eq!(l.keys(&s), [3, 2, 1]);
        l.move_to_head(&mut s, a);
        assert_eq!(l.keys(&s), [1, 3, 2]);
        l.unlink(&mut s, c, 30);
        assert_eq!(l.keys(&s), [1, 2]);
        assert_eq!((l.len, l.weight, l.tail), (2, 30, b));
        l.unlink(&mut s, b, 20);
        l.unlink(&mut s, a, 10);
        assert_eq!((l.head, l.tail, l.len, l.weight), (NIL, NIL, 0, 0));
    }
}
