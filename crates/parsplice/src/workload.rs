//! The ParSplice state process: which state each segment starts from and which new states it
//! finds, deterministic for a seed.
//!
//! A new state becomes a possible start only once the segment that found it has completed and
//! stored it ([`StateProcess::publish`]), as the splicer only schedules segments from states it has
//! been told about. The random draws per segment are the same for every policy; which states are
//! published by then can differ, so policies see statistically identical trajectories.
//!
//! Where a segment starts: the trajectory's current state, or another state of the superbasin
//! drawn by how recently the WorkManager saw it (its rank in the superbasin's read-or-put order,
//! log-uniform over the ranks). The traces' reads are that shape: on d100K, 91.6% read the state
//! last read or put, and the share of reads past rank `c` falls by about the same amount for each
//! tenfold `c` (1.9% past 2, 1.2% past 10, 0.83% past 100, 0.32% past 1,000, none past 10,000;
//! `tools/fit/parsplice_locality.py`), which is what a rank drawn log-uniformly over the states
//! the superbasin holds gives. A uniform draw (the model before) sent a small cache's reads to the
//! store 18 to 110 times as often as the traces'.

use std::collections::{HashMap, VecDeque};

use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64Mcg;

use crate::model::{
    WorkloadParams, atoms, basin_states, new_state_chance, segment_trajectory, value_size,
};

/// One segment of trajectory.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Segment {
    /// The state whose coordinates the worker reads.
    pub start: u64,
    /// Size of those coordinates.
    pub start_size: u32,
    /// A state the segment discovered, with the size of its coordinates: the worker puts it.
    pub new_state: Option<(u64, u32)>,
    /// Atoms in the system during the segment.
    pub atoms: f64,
}

/// Generates segments in order.
#[derive(Debug)]
pub struct StateProcess {
    params: WorkloadParams,
    rng: Pcg64Mcg,
    produced: u64,
    /// Trajectory of the segments produced so far, ps.
    trajectory: f64,
    basin_atoms: u32,
    /// The superbasin's published states, most recently read or put first.
    basin: VecDeque<u64>,
    /// Found in this superbasin but not yet stored by the worker that found them.
    unpublished: Vec<u64>,
    current: u64,
    stalled: bool,
    sizes: HashMap<u64, u32, foldhash::fast::FixedState>,
}

impl StateProcess {
    /// A process for `params`, whose first segment starts from a seeded initial state.
    pub fn new(params: WorkloadParams) -> Self {
        let mut s = Self {
            params,
            rng: Pcg64Mcg::seed_from_u64(params.seed),
            produced: 0,
            trajectory: 0.0,
            basin_atoms: 0,
            basin: VecDeque::new(),
            unpublished: Vec::new(),
            current: 0,
            stalled: false,
            sizes: HashMap::with_hasher(foldhash::fast::FixedState::with_seed(3)),
        };
        s.new_basin();
        s
    }

    fn fresh_key(&mut self, atoms: f64) -> u64 {
        loop {
            let k: u64 = self.rng.random();
            if k != 0 && !self.sizes.contains_key(&k) {
                self.sizes.insert(k, value_size(atoms, &self.params));
                return k;
            }
        }
    }

    fn new_basin(&mut self) {
        let a = atoms(self.trajectory, &self.params);
        self.basin_atoms = a.floor() as u32;
        let k = self.fresh_key(a);
        self.basin = VecDeque::from([k]);
        self.unpublished.clear();
        self.current = k;
    }

    /// Size of a state's coordinates.
    pub fn size_of(&self, key: u64) -> u32 {
        self.sizes.get(&key).copied().unwrap_or(0)
    }

    /// The next segment. The initial state of the run (and of each superbasin after an atom
    /// lands) exists before any segment reads it: the caller stores it first, see
    /// [`StateProcess::take_seeded`].
    pub fn next_segment(&mut self) -> (Segment, Option<(u64, u32)>) {
        let a = atoms(self.trajectory, &self.params);
        let mut seeded = None;
        if a.floor() as u32 != self.basin_atoms {
            // An atom landed: the system is new, its old states are never seen again.
            self.new_basin();
            seeded = Some((self.current, self.size_of(self.current)));
        }
        let start = if self.rng.random_bool(self.params.p_current) || self.basin.len() == 1 {
            self.current
        } else {
            self.older()
        };
        self.touch(start);
        // The superbasin's seed state is not one its segments found.
        let found = (self.basin.len() - 1 + self.unpublished.len()) as f64;
        let chance = new_state_chance(found, basin_states(a, &self.params), &self.params);
        let new_state = if self.rng.random_bool(chance) {
            let k = self.fresh_key(a);
            self.unpublished.push(k);
            Some((k, self.size_of(k)))
        } else {
            if self.rng.random_bool(self.params.p_hop) && self.basin.len() > 1 {
                self.current = self.older();
            }
            None
        };
        self.produced += 1;
        if !self.stalled {
            self.trajectory += segment_trajectory(a, &self.params);
        }
        (
            Segment {
                start,
                start_size: self.size_of(start),
                new_state,
                atoms: a,
            },
            seeded,
        )
    }

    /// The segment that found `key` has completed and stored it: the trajectory moves there and
    /// later segments may start from it. States of a superbasin the system has left stay unused.
    pub fn publish(&mut self, key: u64) {
        if let Some(i) = self.unpublished.iter().position(|&k| k == key) {
            self.unpublished.swap_remove(i);
            self.basin.push_front(key);
            if self.rng.random_bool(self.params.p_move) {
                self.current = key;
            }
        }
    }

    /// A state of the superbasin other than the most recent, by its recency rank drawn
    /// log-uniformly over `1..len` (see the module doc). Needs two states or more.
    fn older(&mut self) -> u64 {
        let len = self.basin.len();
        let u: f64 = self.rng.random();
        let rank =
            ((len as f64).powf(u.powf(self.params.recency_shape)) as usize).clamp(1, len - 1);
        self.basin[rank]
    }

    /// The WorkManager saw `key` now: it moves to the front of the recency order.
    fn touch(&mut self, key: u64) {
        if let Some(i) = self.basin.iter().position(|&k| k == key)
            && i > 0
        {
            self.basin.remove(i);
            self.basin.push_front(key);
        }
    }

    /// While the trajectory is stalled, the segments still run but the system does not grow.
    pub fn set_stalled(&mut self, stalled: bool) {
        self.stalled = stalled;
    }

    /// The run's initial state, which exists before the first segment.
    pub fn take_seeded(&self) -> (u64, u32) {
        (self.current, self.size_of(self.current))
    }
}
