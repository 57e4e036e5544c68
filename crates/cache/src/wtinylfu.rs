//! W-TinyLFU (Einziger et al., TOS 2017; Caffeine's policy): a small LRU window admits every new
//! object; objects leaving the window compete with the main cache's victim, and the one a
//! frequency sketch has seen more often stays.
//!
//! Design (not matched to libCacheSim, whose variant differs in details):
//! - window: 1% of the capacity, LRU; main: segmented LRU, probation 20% / protected 80%;
//! - a count-min sketch (4 rows of 4-bit counters, width a power of two ≥ the capacity in
//!   objects, at least 1,024) records every request; all counters halve every 10 × width
//!   requests, so old popularity fades;
//! - a hit in probation promotes to protected (demoting protected's oldest back to probation
//!   when protected is over its share); a hit in window or protected refreshes recency;
//! - eviction: while the window holds more than its share, its oldest object moves to main if
//!   main has room, else competes with main's victim (probation's oldest, or protected's): the
//!   object with the higher estimate stays, a tie keeps the incumbent.

use crate::algorithm::{Algorithm, Evicted, Request, Units};
use crate::core::Core;
use crate::list::List;

const WINDOW: u32 = 0;
const PROBATION: u32 = 1;
const PROTECTED: u32 = 2;

/// A count-min sketch of 4-bit counters with periodic halving.
#[derive(Debug)]
struct Sketch {
    rows: [Vec<u8>; 4],
    mask: u64,
    additions: u64,
    reset_at: u64,
}

impl Sketch {
    fn new(width: u64) -> Self {
        let width = width.clamp(1024, 1 << 24).next_power_of_two();
        Self {
            rows: std::array::from_fn(|_| vec![0; width as usize]),
            mask: width - 1,
            additions: 0,
            reset_at: 10 * width,
        }
    }

    #[inline]
    fn slot(&self, key: u64, row: usize) -> usize {
        const SEEDS: [u64; 4] = [
            0x9E37_79B9_7F4A_7C15,
            0xC2B2_AE3D_27D4_EB4F,
            0x1656_67B1_9E37_79F9,
            0x27D4_EB2F_1656_67C5,
        ];
        let mut h = key
            .wrapping_add(SEEDS[row])
            .wrapping_mul(0xBF58_476D_1CE4_E5B9);
        h ^= h >> 31;
        h = h.wrapping_mul(0x94D0_49BB_1331_11EB);
        h ^= h >> 29;
        (h & self.mask) as usize
    }

    fn add(&mut self, key: u64) {
        for r in 0..4 {
            let s = self.slot(key, r);
            let c = &mut self.rows[r][s];
            if *c < 15 {
                *c += 1;
            }
        }
        self.additions += 1;
        if self.additions >= self.reset_at {
            for row in &mut self.rows {
                for c in row.iter_mut() {
                    *c >>= 1;
                }
            }
            self.additions /= 2;
        }
    }

    fn estimate(&self, key: u64) -> u8 {
        (0..4)
            .map(|r| self.rows[r][self.slot(key, r)])
            .min()
            .unwrap_or(0)
    }
}

/// W-TinyLFU.
#[derive(Debug)]
pub struct WTinyLfu {
    core: Core,
    lists: [List; 3],
    sketch: Sketch,
    window_size: u64,
    protected_size: u64,
}

impl WTinyLfu {
    /// A W-TinyLFU of `capacity` in `units`.
    pub fn new(capacity: u64, units: Units) -> Self {
        let objects = match units {
            Units::Objects => capacity,
            Units::Bytes => capacity / 4096,
        };
        let mut s = Self {
            core: Core::new(capacity, units),
            lists: [List::default(); 3],
            sketch: Sketch::new(objects),
            window_size: 0,
            protected_size: 0,
        };
        s.set_capacity(capacity);
        s
    }

    fn relink(&mut self, i: u32, to: u32) {
        let n = *self.core.slab.get(i);
        let w = self.core.weight(n.size);
        self.lists[n.meta as usize].unlink(&mut self.core.slab, i, w);
        self.lists[to as usize].push_head(&mut self.core.slab, i, w);
        self.core.slab.get_mut(i).meta = to;
    }

    fn main_weight(&self) -> u64 {
        self.lists[PROBATION as usize].weight + self.lists[PROTECTED as usize].weight
    }

    fn main_victim(&self) -> Option<u32> {
        [PROBATION, PROTECTED]
            .into_iter()
            .map(|l| self.lists[l as usize].tail)
            .find(|&t| t != crate::list::NIL)
    }

    fn drop_node(&mut self, i: u32) -> Evicted {
        let l = self.core.slab.get(i).meta as usize;
        let mut list = self.lists[l];
        let e = self.core.drop_resident(&mut list, i);
        self.lists[l] = list;
        e
    }
}

impl Algorithm for WTinyLfu {
    fn name(&self) -> &'static str {
        "wtinylfu"
    }

    fn find(&mut self, req: &Request, update: bool) -> Option<u32> {
        if update {
            self.sketch.add(req.key);
        }
        let i = self.core.lookup(req.key)?;
        let n = *self.core.slab.get(i);
        if update {
            match n.meta {
                PROBATION => {
                    self.relink(i, PROTECTED);
                    while self.lists[PROTECTED as usize].weight > self.protected_size {
                        let t = self.lists[PROTECTED as usize].tail;
                        self.relink(t, PROBATION);
                    }
                }
                l => self.lists[l as usize].move_to_head(&mut self.core.slab, i),
            }
        }
        Some(n.size)
    }

    fn can_insert(&self, req: &Request) -> bool {
        self.core.weight(req.size) <= self.core.capacity
    }

    fn insert(&mut self, req: &Request) -> bool {
        let mut l = self.lists[WINDOW as usize];
        self.core.add_resident(&mut l, req.key, req.size, WINDOW);
        self.lists[WINDOW as usize] = l;
        true
    }

    fn evict(&mut self, req: &Request) -> Option<Evicted> {
        let incoming = self.core.weight(req.size);
        let window = self.lists[WINDOW as usize];
        let window_full = window.weight + incoming > self.window_size;
        if window.len > 0 && (window_full || self.main_weight() == 0) {
            let cand = window.tail;
            let cw = self.core.weight(self.core.slab.get(cand).size);
            let main_room = self.core.capacity - self.window_size.min(self.core.capacity);
            if self.main_weight() + cw <= main_room {
                self.relink(cand, PROBATION);
                return None;
            }
            let Some(victim) = self.main_victim() else {
                return Some(self.drop_node(cand));
            };
            let (ck, vk) = (self.core.slab.get(cand).key, self.core.slab.get(victim).key);
            return if self.sketch.estimate(ck) > self.sketch.estimate(vk) {
                Some(self.drop_node(victim))
            } else {
                Some(self.drop_node(cand))
            };
        }
        match self.main_victim() {
            Some(v) => Some(self.drop_node(v)),
            None => {
                let t = self.lists[WINDOW as usize].tail;
                (t != crate::list::NIL).then(|| self.drop_node(t))
            }
        }
    }

    fn slot(&self, key: u64) -> Option<u32> {
        // No ghosts (the frequency sketch is not nodes): every indexed node is resident.
        self.core.lookup(key)
    }

    fn remove(&mut self, key: u64) -> Option<u32> {
        let i = self.core.lookup(key)?;
        Some(self.drop_node(i).size)
    }

    fn occupied(&self) -> u64 {
        self.lists.iter().map(|l| l.weight).sum()
    }

    fn len(&self) -> u64 {
        self.lists.iter().map(|l| l.len).sum()
    }

    fn bytes(&self) -> u64 {
        self.core.bytes
    }

    fn set_capacity(&mut self, capacity: u64) {
        self.core.capacity = capacity;
        self.window_size = ((capacity as f64 * 0.01) as u64).max(1);
        let main = capacity.saturating_sub(self.window_size);
        self.protected_size = (main as f64 * 0.8) as u64;
    }

    fn allocated_bytes(&self) -> usize {
        self.core.allocated_bytes() + self.sketch.rows.iter().map(Vec::len).sum::<usize>()
    }
}
