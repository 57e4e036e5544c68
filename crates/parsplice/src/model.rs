//! The fitted model of a ParSplice run: how fast trajectory accrues, how the system grows, what a
//! state's coordinates weigh, and what the store costs. Every constant says where it comes from.

use serde::Serialize;

/// Workload knobs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct WorkloadParams {
    /// Picoseconds of trajectory between two atoms deposited (`<Delay>` in ps-config.xml):
    /// 100,000 for the d100K traces, 1,000,000 for d1M.
    pub growth_delay: f64,
    /// Relative temperature (1.0 = the traced runs): scales how many states each superbasin has.
    pub temperature: f64,
    /// Workers per node (27 in the traced runs: ranks 5–31 under one WorkManager).
    pub workers: u32,
    /// Nodes, each one WorkManager cache in front of the shared store (the measured policy runs
    /// used 8).
    pub nodes: u32,
    /// Simulated wall-clock hours.
    pub hours: f64,
    /// RNG seed of the state process.
    pub seed: u64,
}

impl Default for WorkloadParams {
    fn default() -> Self {
        Self {
            growth_delay: 100_000.0,
            temperature: 1.0,
            workers: 27,
            nodes: 8,
            hours: 2.5,
            seed: 1,
        }
    }
}

/// Trajectory rate of a whole run, in ps of trajectory per wall-clock second, at `atoms` atoms:
/// `R0 / (1 + (atoms / A_C)^GAMMA)`. Fitted by least squares on log trajectory to both traced
/// runs at once (`times.txt` of d100K and d1M, 150 points each, with atoms = `A0` + L / delay):
/// within ±5% of both over 4.2 h except d1M after 3.3 h (−6% at 4.2 h).
pub const R0: f64 = 5554.0;
/// Atom count at which the segment cost doubles (fit).
pub const A_C: f64 = 15.2;
/// Exponent of the cost growth with atoms (fit).
pub const GAMMA: f64 = 2.78;
/// Atoms at trajectory 0 (fit; the runs start from a 2–3 atom seed).
pub const A0: f64 = 2.62;

/// MD time one segment computes, ps: each read of a state's coordinates starts one segment, and
/// the traced runs produced 10.29 ps of MD (the third column of `times.txt`) per WorkManager read
/// over both runs (9.95 on d100K, 10.41 on d1M; 9.4–11.5 in every 1,000 s of either,
/// `tools/collapse_evidence.py`).
pub const SEGMENT_MD_PS: f64 = 10.29;

/// MD produced per worker per wall second at `atoms` atoms: `P0 / (1 + (atoms / P_A)^P_GAMMA)`.
/// Fitted by least squares on log rate to the third column of both traced runs' `times.txt`
/// (27 workers each; rms 5.0% on d100K, 3.9% on d1M). Held out: the measured eight-node runs
/// produce 9.5% more per worker at the same atom count, whatever their cache policy.
pub const P0: f64 = 255.0;
/// Atom count at which a worker's production halves (fit).
pub const P_A: f64 = 11.23;
/// Exponent of the production's fall with atoms (fit).
pub const P_GAMMA: f64 = 1.693;

/// MD ps per worker per second at `atoms` atoms.
pub fn production(atoms: f64) -> f64 {
    P0 / (1.0 + (atoms / P_A).powf(P_GAMMA))
}

/// Trajectory ps per second of a whole run at `atoms` atoms (the fit above).
pub fn trajectory_rate(atoms: f64) -> f64 {
    R0 / (1.0 + (atoms / A_C).powf(GAMMA))
}

/// Bytes of a state's coordinates: ~75 bytes per atom plus ~300 bytes (README of the traces:
/// `DBMemorySize / DBMemory`, ~0.5 KB at 2 atoms, ~3.9 KB mean at 57 K keys for d100K).
pub fn value_size(atoms: f64) -> u32 {
    300 + 75 * atoms.floor() as u32
}

/// Atoms after `trajectory` ps.
pub fn atoms(trajectory: f64, p: &WorkloadParams) -> f64 {
    A0 + trajectory / p.growth_delay
}

/// Workers of the traced runs (ranks 5–31 under one WorkManager): the state counts were fitted
/// with them.
pub const FIT_WORKERS: f64 = 27.0;

/// Wall seconds a worker computes one segment at `atoms` atoms: a segment's MD at the measured
/// production rate, whatever the cache does.
pub fn segment_seconds(atoms: f64) -> f64 {
    (SEGMENT_MD_PS / production(atoms) - CACHE_HIT_SECONDS).max(1e-6)
}

/// Trajectory one segment adds at `atoms` atoms, ps: the share of the workers' MD the splicer
/// uses, such that all workers with an unlimited cache splice the fitted trajectory rate. The
/// rest is speculation the splicer never needed; more workers produce more of it (eight nodes
/// splice about as much as one: 10% of their MD against 63%).
pub fn segment_trajectory(atoms: f64, p: &WorkloadParams) -> f64 {
    let workers = f64::from(p.workers * p.nodes);
    let spliced = trajectory_rate(atoms) / (workers * production(atoms));
    SEGMENT_MD_PS * spliced.min(1.0)
}

/// States a superbasin yields at `atoms` atoms: `K0 · atoms^KAPPA · temperature · workers/27`.
/// `K0` and `KAPPA` are fitted so the state process creates the traced 27-worker runs' key counts
/// (57,695 for d100K over 4.2 h, 3,240 for d1M): the state space grows steeply with the cluster.
/// More workers speculate on more of each superbasin and find proportionally more states: the
/// measured 8-node two-phase runs crossed 100,000 keys per WorkManager, which 27-worker counts
/// would not. That proportionality is an assumption (no 8-node trace exists to fit it).
pub fn basin_states(atoms: f64, p: &WorkloadParams) -> f64 {
    let workers = f64::from(p.workers * p.nodes) / FIT_WORKERS;
    (K0 * atoms.powf(KAPPA) * p.temperature * workers).max(1.0)
}

/// Scale of [`basin_states`] (fit).
pub const K0: f64 = 0.00633;
/// Exponent of [`basin_states`] (fit).
pub const KAPPA: f64 = 3.25;
/// Segments over which a new superbasin's states are discovered (the relaxation after an atom
/// lands; the key-creation bursts in the traces last a few thousand reads).
pub const DISCOVERY_SEGMENTS: f64 = 2000.0;
/// Chance a segment starts from the trajectory's current state rather than another state of the
/// superbasin the splicer speculates on.
pub const P_CURRENT: f64 = 0.7;
/// Chance a segment that found no new state moves the trajectory to another state of the basin.
pub const P_HOP: f64 = 0.1;

/// Latency of a read served by the WorkManager cache (message + lookup), seconds.
pub const CACHE_HIT_SECONDS: f64 = 0.0005;
/// Round trip to the store node, seconds, on top of queueing and service.
pub const STORE_NETWORK_SECONDS: f64 = 0.001;

/// Effective penalty of a store read, seconds: the one parameter fitted to a measured policy run
/// (LRU 10 keys on 8 nodes, 75.4% efficiency at 2.5 h; bisection to 0.01 s gave 0.55 s, 75.5%).
/// It is far more than one LevelDB block read: it stands for the whole miss path under 216
/// workers (WorkManager → in-memory database → LevelDB on Lustre) and is the model's least
/// physical parameter. Every other policy's efficiency is a prediction.
pub const READ_LATENCY_SECONDS: f64 = 0.55;

/// The persistent store's service model: LevelDB on Lustre, which the cache studies saw saturate
/// at ~750 reads/s plus ~300 puts/s.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StoreParams {
    /// Reads per second the store serves when busy.
    pub reads_per_s: f64,
    /// Puts per second the store absorbs when busy.
    pub puts_per_s: f64,
    /// Latency of a read on top of queueing and service (LevelDB block reads on Lustre): it does
    /// not occupy the server, several reads can be in this phase at once.
    pub read_latency_seconds: f64,
    /// Every this many puts, compaction stalls the store...
    pub stall_every_puts: u64,
    /// ...for this many seconds (LevelDB's write stall when level-0 files pile up).
    pub stall_seconds: f64,
}

impl Default for StoreParams {
    fn default() -> Self {
        Self {
            reads_per_s: 750.0,
            puts_per_s: 300.0,
            read_latency_seconds: READ_LATENCY_SECONDS,
            stall_every_puts: 4096,
            stall_seconds: 2.0,
        }
    }
}
