//! S3-FIFO (Yang et al., SOSP '23): a small FIFO that filters one-hit wonders, a main FIFO run as
//! a 2-bit CLOCK, and a ghost FIFO of recently filtered keys.
//!
//! libCacheSim semantics (`S3FIFO.c`), kept exactly:
//! - Sizes: small = ⌊c · ratio⌋ (ratio 0.1), main = c − small, ghost = ⌊c · 0.9⌋, in the cache's
//!   units. An object is admitted only if it fits the small queue (and the cache); one exactly the
//!   small queue's size is then declined at insert. So a key-capacity S3-FIFO under 20 keys (small
//!   queue of one key) admits nothing but ghost hits, exactly as libCacheSim's does.
//! - A hit in small or main adds 1 to the object's frequency (sizes are kept). A request whose key
//!   is in the ghost drops the ghost entry and is a miss that inserts into main.
//! - Other inserts go to small, except before the first eviction ever, when a full small queue
//!   sends them to main. Inserted objects start at frequency 0.
//! - Eviction works on main when main is over its size or small is empty, else on small.
//!   Small: take the oldest; with frequency ≥ threshold (2) it moves to main at frequency 0, else
//!   it leaves the cache into the ghost (which drops its own oldest entries to fit, and skips
//!   objects larger than itself); repeat until one left or small is empty. Main: take the oldest;
//!   with frequency ≥ 1 it is reinserted at frequency min(f, 3) − 1, else it leaves.

use crate::algorithm::{Algorithm, Evicted, Request, Units};
use crate::core::Core;
use crate::list::List;

const SMALL: u32 = 0;
const MAIN: u32 = 1;
const GHOST: u32 = 2;

#[inline]
fn queue(meta: u32) -> u32 {
    meta & 3
}

#[inline]
fn freq(meta: u32) -> u32 {
    meta >> 2
}

#[inline]
fn meta(queue: u32, freq: u32) -> u32 {
    (freq << 2) | queue
}

/// S3-FIFO.
#[derive(Debug)]
pub struct S3Fifo {
    core: Core,
    small: List,
    main: List,
    ghost: List,
    small_ratio: f64,
    ghost_ratio: f64,
    threshold: u32,
    small_size: u64,
    main_size: u64,
    ghost_size: u64,
    hit_on_ghost: bool,
    has_evicted: bool,
}

impl S3Fifo {
    /// An S3-FIFO with the paper's defaults: small queue 10%, move-to-main threshold 2.
    pub fn new(capacity: u64, units: Units) -> Self {
        Self::with_params(capacity, units, 0.1, 2)
    }

    /// An S3-FIFO with a given small-queue ratio and move-to-main threshold.
    pub fn with_params(capacity: u64, units: Units, small_ratio: f64, threshold: u32) -> Self {
        let mut s = Self {
            core: Core::new(capacity, units),
            small: List::default(),
            main: List::default(),
            ghost: List::default(),
            small_ratio,
            ghost_ratio: 0.9,
            threshold,
            small_size: 0,
            main_size: 0,
            ghost_size: 0,
            hit_on_ghost: false,
            has_evicted: false,
        };
        s.set_capacity(capacity);
        s
    }

    fn list(&mut self, q: u32) -> &mut List {
        match q {
            SMALL => &mut self.small,
            MAIN => &mut self.main,
            _ => &mut self.ghost,
        }
    }

    /// Moves node `i` from its queue to the head of `to` with frequency `f`.
    fn relink(&mut self, i: u32, to: u32, f: u32) {
        let n = *self.core.slab.get(i);
        let w = self.core.weight(n.size);
        let mut from = *self.list(queue(n.meta));
        from.unlink(&mut self.core.slab, i, w);
        *self.list(queue(n.meta)) = from;
        let mut dest = *self.list(to);
        dest.push_head(&mut self.core.slab, i, w);
        *self.list(to) = dest;
        self.core.slab.get_mut(i).meta = meta(to, f);
    }

    fn drop_oldest_ghost(&mut self) {
        let i = self.ghost.tail;
        let w = self.core.weight(self.core.slab.get(i).size);
        self.ghost.unlink(&mut self.core.slab, i, w);
        self.core.free(i);
    }

    fn evict_small(&mut self) -> Option<Evicted> {
        while self.small.weight > 0 {
            let i = self.small.tail;
            let n = *self.core.slab.get(i);
            if freq(n.meta) >= self.threshold {
                self.relink(i, MAIN, 0);
                continue;
            }
            let w = self.core.weight(n.size);
            self.core.bytes -= u64::from(n.size);
            if self.ghost_size > 0 && w <= self.ghost_size {
                while self.ghost.weight + w > self.ghost_size {
                    self.drop_oldest_ghost();
                }
                self.relink(i, GHOST, 0);
            } else {
                self.small.unlink(&mut self.core.slab, i, w);
                self.core.free(i);
            }
            return Some(Evicted {
                key: n.key,
                size: n.size,
                slot: i,
            });
        }
        None
    }

    fn evict_main(&mut self) -> Option<Evicted> {
        while self.main.weight > 0 {
            let i = self.main.tail;
            let n = *self.core.slab.get(i);
            let f = freq(n.meta);
            if f >= 1 {
                self.relink(i, MAIN, f.min(3) - 1);
            } else {
                let mut main = self.main;
                let e = self.core.drop_resident(&mut main, i);
                self.main = main;
                return Some(e);
            }
        }
        None
    }
}

impl Algorithm for S3Fifo {
    fn name(&self) -> &'static str {
        "s3fifo"
    }

    #[inline]
    fn find(&mut self, req: &Request, update: bool) -> Option<u32> {
        if update {
            self.hit_on_ghost = false;
        }
        let i = self.core.lookup(req.key)?;
        let n = *self.core.slab.get(i);
        let q = queue(n.meta);
        if !update {
            return (q != GHOST).then_some(n.size);
        }
        if q == GHOST {
            let w = self.core.weight(n.size);
            self.ghost.unlink(&mut self.core.slab, i, w);
            self.core.free(i);
            self.hit_on_ghost = true;
            return None;
        }
        self.core.slab.get_mut(i).meta = meta(q, freq(n.meta) + 1);
        Some(n.size)
    }

    fn can_insert(&self, req: &Request) -> bool {
        let w = self.core.weight(req.size);
        w <= self.small_size && w <= self.core.capacity
    }

    #[inline]
    fn insert(&mut self, req: &Request) -> bool {
        let w = self.core.weight(req.size);
        let target = if self.hit_on_ghost {
            self.hit_on_ghost = false;
            MAIN
        } else if w >= self.small_size {
            return false;
        } else if !self.has_evicted && self.small.weight >= self.small_size {
            MAIN
        } else {
            SMALL
        };
        let mut l = *self.list(target);
        self.core
            .add_resident(&mut l, req.key, req.size, meta(target, 0));
        *self.list(target) = l;
        true
    }

    #[inline]
    fn evict(&mut self, _req: &Request) -> Option<Evicted> {
        self.has_evicted = true;
        if self.main.weight > self.main_size || self.small.weight == 0 {
            self.evict_main()
        } else {
            self.evict_small()
        }
    }

    fn slot(&self, key: u64) -> Option<u32> {
        let i = self.core.lookup(key)?;
        (queue(self.core.slab.get(i).meta) != GHOST).then_some(i)
    }

    fn remove(&mut self, key: u64) -> Option<u32> {
        let i = self.core.lookup(key)?;
        let n = *self.core.slab.get(i);
        let q = queue(n.meta);
        let w = self.core.weight(n.size);
        let mut l = *self.list(q);
        l.unlink(&mut self.core.slab, i, w);
        *self.list(q) = l;
        self.core.free(i);
        if q == GHOST {
            return None;
        }
        self.core.bytes -= u64::from(n.size);
        Some(n.size)
    }

    fn occupied(&self) -> u64 {
        self.small.weight + self.main.weight
    }

    fn len(&self) -> u64 {
        self.small.len + self.main.len
    }

    fn bytes(&self) -> u64 {
        self.core.bytes
    }

    fn set_capacity(&mut self, capacity: u64) {
        self.core.capacity = capacity;
        self.small_size = (capacity as f64 * self.small_ratio) as u64;
        self.main_size = capacity - self.small_size;
        self.ghost_size = (capacity as f64 * self.ghost_ratio) as u64;
        while self.ghost.weight > self.ghost_size {
            self.drop_oldest_ghost();
        }
    }

    fn allocated_bytes(&self) -> usize {
        self.core.allocated_bytes()
    }
}
