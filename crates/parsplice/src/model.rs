//! The fitted model of a ParSplice run: how fast trajectory accrues, how the system grows, what a
//! state's coordinates weigh, and what the store costs. Every constant says where it comes from.
//!
//! The rates and sizes are fitted to ONE measured policy run, the eight-node unlimited-cache run
//! (`scale-cachelimit-8n-unlimited-71994` in `../shared/results/parsplice-8node-policies`: its
//! `times.txt` and its WorkManager's counters), and, for production and the superbasins' states
//! (small systems that run passes in its first 100 s, a slower growth), also to the two one-node
//! traces, by `tools/fit/parsplice_model.py`, which prints each fit's error on the seven other
//! runs up to the time their policy acts (`--check` fails if a constant here is not the fit's).
//! Where segments start is fitted to one trace's LRU miss curve and judged on the other's
//! (`tools/fit/parsplice_locality.py`); the stall to one policy run, LRU 10, and judged on the
//! four two-phase runs (`tools/fit/parsplice_stalls.py`). The other policy runs are predicted.

use serde::Serialize;

/// Workload knobs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct WorkloadParams {
    /// Picoseconds of trajectory between two atoms deposited (`<Delay>` in ps-config.xml):
    /// 100,000 for the d100K traces, 1,000,000 for d1M.
    pub growth_delay: f64,
    /// Relative temperature (1.0 = the measured runs): scales the states a superbasin holds
    /// ([`basin_states`]).
    pub temperature: f64,
    /// Workers under each WorkManager: 251 in the measured runs (`layout`: ranks 5–255 under
    /// rank 4; one more worker sits under the splicer), 27 in the one-node traces.
    pub workers: u32,
    /// WorkManagers, each a cache in front of the shared store: one in the measured runs, whose
    /// 256 ranks on 8 nodes had one WorkManager (`layout`).
    pub nodes: u32,
    /// Simulated wall-clock hours.
    pub hours: f64,
    /// RNG seed of the state process.
    pub seed: u64,
    /// Chance a segment starts from the trajectory's current state ([`P_CURRENT`]).
    pub p_current: f64,
    /// Chance a segment that found nothing moves the current state ([`P_HOP`]).
    pub p_hop: f64,
    /// How far back in the superbasin's recency order a segment not started from the current
    /// state goes ([`RECENCY_SHAPE`]).
    pub recency_shape: f64,
    /// Chance the trajectory moves to a state as soon as it is stored ([`P_MOVE`]).
    pub p_move: f64,
    /// Share of the states the persistent store never got ([`LOST_SHARE`]).
    pub lost_share: f64,
    /// Scale of the chance a stalled trajectory's state is found again ([`HEAL_SCALE`]).
    pub heal_scale: f64,
    /// Segments over which that chance falls by `e` as a stall lasts ([`HEAL_DECAY_SEGMENTS`]).
    pub heal_decay_segments: f64,
    /// The rates and sizes fitted to the measured runs ([`Fitted`]).
    pub fitted: Fitted,
}

/// The model's rates and sizes fitted to the measured runs (`tools/fit/parsplice_model.py`; each
/// constant's doc names its data), as values a run may change to see how a result moves with
/// them (`pliant parsplice compare --set r0=…`). Only the scales and offsets are here: an
/// exponent at ±50% changes its function by orders of magnitude at the runs' 30–60 atoms, and the
/// scale fitted with it carries the fit's uncertainty at those atoms.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Fitted {
    /// [`R0`].
    pub r0: f64,
    /// [`A0`].
    pub a0: f64,
    /// [`P0`].
    pub p0: f64,
    /// [`SEGMENT_MD_PS`].
    pub segment_md_ps: f64,
    /// [`K0`].
    pub k0: f64,
    /// [`DISCOVERY_SEGMENTS`].
    pub discovery_segments: f64,
    /// [`VALUE_BYTES_BASE`].
    pub value_bytes_base: f64,
    /// [`VALUE_BYTES_PER_ATOM`].
    pub value_bytes_per_atom: f64,
}

impl Default for Fitted {
    fn default() -> Self {
        Self {
            r0: R0,
            a0: A0,
            p0: P0,
            segment_md_ps: SEGMENT_MD_PS,
            k0: K0,
            discovery_segments: DISCOVERY_SEGMENTS,
            value_bytes_base: VALUE_BYTES_BASE,
            value_bytes_per_atom: VALUE_BYTES_PER_ATOM,
        }
    }
}

/// Workers under the WorkManager of the two one-node traces (`d100K`, `d1M`: ranks 5–31): what
/// a replay of them and the model's calibration against them use.
pub const TRACED_WORKERS: u32 = 27;

impl Default for WorkloadParams {
    fn default() -> Self {
        Self {
            growth_delay: 100_000.0,
            temperature: 1.0,
            workers: 251,
            nodes: 1,
            hours: 2.5,
            seed: 1,
            p_current: P_CURRENT,
            p_hop: P_HOP,
            recency_shape: RECENCY_SHAPE,
            p_move: P_MOVE,
            lost_share: LOST_SHARE,
            heal_scale: HEAL_SCALE,
            heal_decay_segments: HEAL_DECAY_SEGMENTS,
            fitted: Fitted::default(),
        }
    }
}

/// Trajectory rate of a whole run, in ps of trajectory per wall-clock second, at `atoms` atoms:
/// `R0 / (1 + (atoms / A_C)^GAMMA)`, atoms = `A0` + L / delay. Fitted by least squares on log
/// trajectory to the unlimited run's `times.txt` (150 rows): within 2.1% rms of it, 2.4% and
/// 3.5% of the two 100,000-key caps over their whole runs, 2.1–2.6% of the two-phase runs up to
/// their trims (`tools/fit/parsplice_model.py`). That run's first row is at 100 s and 20 atoms,
/// so it fixes only `R0 · A_C^GAMMA` (a power law over the atoms it saw), not the two apart.
pub const R0: f64 = 24_845_688.0;
/// Scale of the atoms in [`trajectory_rate`] (fit, with [`R0`]).
pub const A_C: f64 = 2.109;
/// Exponent of the cost growth with atoms (fit).
pub const GAMMA: f64 = 3.726;
/// Atoms at trajectory 0: the fit of both one-node traces (`tools/trajectory_fit.py`); the runs
/// start from a 2–3 atom seed, and the measured runs' files begin past it.
pub const A0: f64 = 2.62;

/// MD time one segment computes, ps: each WorkManager get starts one segment, and the unlimited
/// run produced 10.26 ps of MD (the third column of `times.txt`) per get (perf.1 DBMemoryGet)
/// from 300 s to its end (fit); 1.5–1.8% rms on the other runs' 600-s windows, 2.9% on LRU 10's
/// (`tools/fit/parsplice_model.py`), and 10.29 on the one-node traces.
pub const SEGMENT_MD_PS: f64 = 10.26;

/// MD produced per worker per wall second at `atoms` atoms: `P0 / (1 + (atoms / P_A)^P_GAMMA)`.
/// One function of the atoms whatever the layout (`tools/collapse_evidence.py`): fitted by least
/// squares on log rate to the third column of `times.txt` over 600-s windows, per worker, of the
/// unlimited eight-node run (252 workers, 31–62 atoms) and both one-node traces (27 workers; d1M
/// covers 7–31 atoms): 4.5%, 4.4% and 2.9% rms; held out, 4.7–6.2% on the other eight-node runs
/// before their policy acts (LRU 10's workers produce 25% less: they waited on its cache).
pub const P0: f64 = 246.7;
/// Atom count at which a worker's production halves (fit).
pub const P_A: f64 = 11.62;
/// Exponent of the production's fall with atoms (fit).
pub const P_GAMMA: f64 = 1.729;

/// MD ps per worker per second at `atoms` atoms.
pub fn production(atoms: f64, p: &WorkloadParams) -> f64 {
    p.fitted.p0 / (1.0 + (atoms / P_A).powf(P_GAMMA))
}

/// Trajectory ps per second of a whole run at `atoms` atoms (the fit above).
pub fn trajectory_rate(atoms: f64, p: &WorkloadParams) -> f64 {
    p.fitted.r0 / (1.0 + (atoms / A_C).powf(GAMMA))
}

/// Bytes of a state's coordinates at `atoms` atoms: `VALUE_BYTES_BASE + VALUE_BYTES_PER_ATOM ·
/// ⌊atoms⌋`, fitted (linear least squares) to the bytes the unlimited run's WorkManager held
/// against its keys and the atoms each was created at (perf.1 DBMemorySize and DBMemoryMapSize,
/// every sample from 600 s: 0.1% rms; 0.2–0.3% on the other runs before their first eviction).
pub fn value_size(atoms: f64, p: &WorkloadParams) -> u32 {
    let f = &p.fitted;
    (f.value_bytes_base + f.value_bytes_per_atom * atoms.floor())
        .round()
        .max(0.0) as u32
}

/// Bytes of a state's coordinates besides its atoms' (fit, [`value_size`]).
pub const VALUE_BYTES_BASE: f64 = 347.0;
/// Bytes per atom of a state's coordinates (fit, [`value_size`]).
pub const VALUE_BYTES_PER_ATOM: f64 = 70.8;

/// Atoms after `trajectory` ps.
pub fn atoms(trajectory: f64, p: &WorkloadParams) -> f64 {
    p.fitted.a0 + trajectory / p.growth_delay
}

/// Wall seconds a worker computes one segment at `atoms` atoms: a segment's MD at the measured
/// production rate, whatever the cache does.
pub fn segment_seconds(atoms: f64, p: &WorkloadParams) -> f64 {
    (p.fitted.segment_md_ps / production(atoms, p) - CACHE_HIT_SECONDS).max(1e-6)
}

/// Trajectory one segment adds at `atoms` atoms, ps: the share of the workers' MD the splicer
/// uses, such that all workers with an unlimited cache splice the fitted trajectory rate. The
/// rest is speculation the splicer never needed; more workers produce more of it (eight nodes
/// splice about as much as one: 10% of their MD against 63%).
pub fn segment_trajectory(atoms: f64, p: &WorkloadParams) -> f64 {
    let workers = f64::from(p.workers * p.nodes);
    let spliced = trajectory_rate(atoms, p) / (workers * production(atoms, p));
    p.fitted.segment_md_ps * spliced.min(1.0)
}

/// States a superbasin yields at `atoms` atoms, with `W` workers in all:
/// `K0 · atoms^KAPPA · (W / 27)^OMEGA · temperature`. A superbasin's states are found at the
/// rate of [`new_state_chance`], so that after `n` segments in it the system has found
/// `S (1 − e^(−n / D))`. `K0`, `KAPPA`, `OMEGA`, `DISCOVERY_SEGMENTS` and `DISCOVERY_DELTA` are
/// fitted together by `tools/fit/parsplice_model.py` (least squares on log(1 + states) per
/// superbasin, with each superbasin's reads as measured) to the unlimited eight-node run (251
/// workers) and both one-node traces (27 workers, growth 100,000 and 1,000,000: a ten times
/// longer superbasin is found out more fully, which one chance per segment would not give): the
/// unlimited run's whole superbasins +5.3%, the traces' −23% and −24%; held out, the eight-node
/// runs before their policy acts −8% to −9%.
pub fn basin_states(atoms: f64, p: &WorkloadParams) -> f64 {
    (p.fitted.k0 * atoms.powf(KAPPA) * workers_scale(p).powf(OMEGA) * p.temperature).max(1.0)
}

/// Segments over which a superbasin's states are found, with `W` workers in all:
/// `DISCOVERY_SEGMENTS · (W / 27)^DISCOVERY_DELTA` (fit, [`basin_states`]): more workers
/// speculate on the same states, so each segment finds fewer.
pub fn discovery_segments(p: &WorkloadParams) -> f64 {
    p.fitted.discovery_segments * workers_scale(p).powf(DISCOVERY_DELTA)
}

/// The chance a segment finds a new state when `found` of the superbasin's `size` states are
/// found: what makes `S (1 − e^(−n / D))` of them found after `n` segments.
pub fn new_state_chance(found: f64, size: f64, p: &WorkloadParams) -> f64 {
    let left = (1.0 - found / size).max(0.0);
    ((size / discovery_segments(p)) * left).clamp(0.0, 1.0)
}

fn workers_scale(p: &WorkloadParams) -> f64 {
    f64::from(p.workers * p.nodes) / f64::from(TRACED_WORKERS)
}

/// Scale of [`basin_states`] (fit).
pub const K0: f64 = 0.000589;
/// Exponent of the atoms in [`basin_states`] (fit).
pub const KAPPA: f64 = 3.878;
/// Exponent of the workers in [`basin_states`] (fit).
pub const OMEGA: f64 = 0.809;
/// Segments over which 27 workers find a superbasin's states, `D` (fit, [`discovery_segments`]).
pub const DISCOVERY_SEGMENTS: f64 = 18_071.0;
/// Exponent of the workers in [`discovery_segments`] (fit).
pub const DISCOVERY_DELTA: f64 = 1.040;

/// Chance a segment starts from the trajectory's current state rather than another state of the
/// superbasin the splicer speculates on. This and [`P_MOVE`], [`RECENCY_SHAPE`] and [`P_HOP`] are
/// fitted together (a grid, least squares on log miss ratio) to d100K's LRU miss curve at 1, 2,
/// 10, 100 and 1,000 keys (within 0.14 in log rms) by `tools/fit/parsplice_locality.py`; judged
/// on d1M's, the model misses 3–6 times too often at 1–100 keys.
pub const P_CURRENT: f64 = 0.985;
/// Chance a segment that found no new state moves the trajectory to an older state of the
/// superbasin (fit: none).
pub const P_HOP: f64 = 0.0;

/// Shape of the recency rank a segment not started from the current state reads: the rank is
/// `len^(u^RECENCY_SHAPE)` for `u` uniform in [0, 1) and `len` the superbasin's published states,
/// so 1 is log-uniform over the ranks and less than 1 reaches further back (fit, [`P_CURRENT`]).
pub const RECENCY_SHAPE: f64 = 0.1;

/// Chance the trajectory's current state becomes a state a worker found as soon as it is stored;
/// otherwise the segments keep starting from the state before (fit, [`P_CURRENT`]): d100K's reads
/// of the state before the last put (6.5% of them) say the trajectory seldom moves at once.
pub const P_MOVE: f64 = 0.05;

/// Share of the states a worker found that the persistent store never got: a read of one that
/// the WorkManager no longer holds finds it nowhere, and the trajectory, which needs it, stops
/// ([`heal_chance`]). The counters show it: the in-memory database's puts less LevelDB's grow
/// while a run progresses and freeze when it stops (0.6–18% of the states, run to run), and each
/// run's last LevelDB get is within 60 s of its trajectory's last growth. As a chance per store
/// read it is fitted by `tools/fit/parsplice_stalls.py` to the stalls of one run, LRU 10 (13
/// stalls while its cache read the store), and judged on the four two-phase runs' (6).
pub const LOST_SHARE: f64 = 0.00034;

/// A stalled trajectory resumes when a segment finds its missing state again: the `n`-th segment
/// completed meanwhile does with chance `HEAL_SCALE / basin_states(atoms) * exp(-n /
/// HEAL_DECAY_SEGMENTS)`, so a large system's stall lasts longer, and a stall that has lasted
/// long is less and less likely to end. Fitted together with [`HEAL_DECAY_SEGMENTS`] by
/// `tools/fit/parsplice_stalls.py` (maximum likelihood, the last stall censored at the run's end)
/// to LRU 10's 13 stalls, with the segments each stall's workers started (WorkManager gets over
/// its span) and its atoms; judged on the two-phase runs' six.
pub const HEAL_SCALE: f64 = 0.020;

/// Segments over which a stalled trajectory's chance to resume falls by `e` ([`HEAL_SCALE`]).
/// The measured stalls are of two kinds: LRU 10's are mostly short (12 of 13 healed, after
/// 100–3,600 s), and four of the two-phase runs' six lasted to the end (4,900–8,100 s). A chance
/// per segment that stays the same cannot give both: it made the model's large systems heal too
/// soon (the two-phase stops had chances of 0.06–0.45 of lasting as long as they did). Why the
/// chance falls is in no counter; the WorkManager's predictions moving its workers away from the
/// missing state's neighbourhood as the stall goes on would do it. With the decay, the fit on
/// LRU 10 alone gives the two-phase stops chances of 0.38–0.57 (log likelihood of the six:
/// −30.8, against −36.0 without it).
pub const HEAL_DECAY_SEGMENTS: f64 = 730_000.0;

/// The chance the `n`-th segment completed while the trajectory is stalled at `atoms` finds the
/// missing state again ([`HEAL_SCALE`]).
pub fn heal_chance(atoms: f64, n: u64, p: &WorkloadParams) -> f64 {
    let decay = (-(n as f64) / p.heal_decay_segments).exp();
    (p.heal_scale / basin_states(atoms, p) * decay).clamp(0.0, 1.0)
}

/// Whether the persistent store never got `key` ([`LOST_SHARE`]): a property of the state, the
/// same in every policy's run of one seed.
pub fn lost(key: u64, p: &WorkloadParams) -> bool {
    // splitmix64: a fixed, well-mixed function of the key and the seed.
    let mut z = key ^ p.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    ((z >> 11) as f64 / (1u64 << 53) as f64) < p.lost_share
}

/// Latency of a read served by the WorkManager cache (message + lookup), seconds.
pub const CACHE_HIT_SECONDS: f64 = 0.0005;
/// Round trip to the store node, seconds, on top of queueing and service.
pub const STORE_NETWORK_SECONDS: f64 = 0.001;

/// Effective penalty of a store read, seconds: fitted to a measured policy run (LRU 10 keys on 8
/// nodes, 75.4% efficiency at 2.5 h; bisection to 0.01 s gave 0.55 s, 75.5%) on the model's
/// former layout, when the model's reads were far less local than the traces' and a small cache
/// read the store 100 times a second. It is far more than one LevelDB block read and the model's
/// least physical parameter; with the traces' locality a limited cache reads the store 1–7 times
/// a second and the stall ([`LOST_SHARE`]), not this penalty, costs it its trajectory.
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
    /// Round trip to the store, seconds ([`STORE_NETWORK_SECONDS`]).
    pub network_seconds: f64,
}

impl Default for StoreParams {
    fn default() -> Self {
        Self {
            reads_per_s: 750.0,
            puts_per_s: 300.0,
            read_latency_seconds: READ_LATENCY_SECONDS,
            stall_every_puts: 4096,
            stall_seconds: 2.0,
            network_seconds: STORE_NETWORK_SECONDS,
        }
    }
}

/// The model's constants a run can be given other values of (`pliant parsplice compare --set
/// NAME=VALUE`), to see how a result moves with them: the names.
pub const KNOBS: [&str; 20] = [
    "p_current",
    "p_move",
    "lost_share",
    "heal_scale",
    "heal_decay_segments",
    "p_hop",
    "recency_shape",
    "miss_penalty",
    "store_network_seconds",
    "store_reads_per_s",
    "store_puts_per_s",
    "store_stall_seconds",
    "r0",
    "a0",
    "p0",
    "segment_md_ps",
    "k0",
    "discovery_segments",
    "value_bytes_base",
    "value_bytes_per_atom",
];

/// Sets knob `name` (one of [`KNOBS`]) to `value` in `w` or `s`.
pub fn set_knob(
    w: &mut WorkloadParams,
    s: &mut StoreParams,
    name: &str,
    value: f64,
) -> Result<(), String> {
    let chance = |v: f64| (0.0..=1.0).contains(&v);
    let (slot, ok): (&mut f64, bool) = match name {
        "p_current" => (&mut w.p_current, chance(value)),
        "p_hop" => (&mut w.p_hop, chance(value)),
        "p_move" => (&mut w.p_move, chance(value)),
        "lost_share" => (&mut w.lost_share, chance(value)),
        "heal_scale" => (&mut w.heal_scale, value >= 0.0),
        "heal_decay_segments" => (&mut w.heal_decay_segments, value > 0.0),
        "recency_shape" => (&mut w.recency_shape, value > 0.0),
        "miss_penalty" => (&mut s.read_latency_seconds, value >= 0.0),
        "store_network_seconds" => (&mut s.network_seconds, value >= 0.0),
        "store_reads_per_s" => (&mut s.reads_per_s, value > 0.0),
        "store_puts_per_s" => (&mut s.puts_per_s, value > 0.0),
        "store_stall_seconds" => (&mut s.stall_seconds, value >= 0.0),
        "r0" => (&mut w.fitted.r0, value > 0.0),
        "a0" => (&mut w.fitted.a0, value >= 0.0),
        "p0" => (&mut w.fitted.p0, value > 0.0),
        "segment_md_ps" => (&mut w.fitted.segment_md_ps, value > 0.0),
        "k0" => (&mut w.fitted.k0, value > 0.0),
        "discovery_segments" => (&mut w.fitted.discovery_segments, value > 0.0),
        "value_bytes_base" => (&mut w.fitted.value_bytes_base, value >= 0.0),
        "value_bytes_per_atom" => (&mut w.fitted.value_bytes_per_atom, value >= 0.0),
        _ => {
            return Err(format!(
                "unknown knob {name:?}: one of {}",
                KNOBS.join(", ")
            ));
        }
    };
    if !value.is_finite() || !ok {
        return Err(format!("{name}={value}: out of its range"));
    }
    *slot = value;
    Ok(())
}

/// Sets every `(name, value)` of `knobs` ([`set_knob`]) in order; the first bad one is the error.
pub fn set_knobs(
    w: &mut WorkloadParams,
    s: &mut StoreParams,
    knobs: &[(String, f64)],
) -> Result<(), String> {
    knobs
        .iter()
        .try_for_each(|(name, value)| set_knob(w, s, name, *value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heal_chance_falls_by_e_every_decay_segments_and_is_smaller_in_a_larger_system() {
        let p = WorkloadParams::default();
        let first = heal_chance(50.0, 0, &p);
        let later = heal_chance(50.0, HEAL_DECAY_SEGMENTS as u64, &p);
        assert!(
            (first / later - std::f64::consts::E).abs() < 1e-9,
            "{first} {later}"
        );
        assert!(heal_chance(60.0, 0, &p) < first);
        let sure = WorkloadParams {
            heal_scale: 1e12,
            ..p
        };
        assert_eq!(heal_chance(50.0, 0, &sure), 1.0, "a chance");
    }

    #[test]
    fn a_knob_is_set_by_name_and_bad_ones_are_named() {
        let (mut w, mut s) = (WorkloadParams::default(), StoreParams::default());
        for (name, v) in [
            ("p_hop", 0.05),
            ("miss_penalty", 0.3),
            ("store_reads_per_s", 100.0),
        ] {
            set_knob(&mut w, &mut s, name, v).expect("a knob");
        }
        assert_eq!(
            (w.p_hop, s.read_latency_seconds, s.reads_per_s),
            (0.05, 0.3, 100.0)
        );
        let e = set_knob(&mut w, &mut s, "p_hopp", 0.1).expect_err("unknown");
        assert!(e.contains("p_hopp") && e.contains("p_current"), "{e}");
        for (name, v) in [
            ("p_current", 1.5),
            ("store_puts_per_s", 0.0),
            ("p_hop", f64::NAN),
        ] {
            let e = set_knob(&mut w, &mut s, name, v).expect_err("out of range");
            assert!(e.contains(name), "{e}");
        }
        assert_eq!(w.p_current, P_CURRENT, "a refused value changes nothing");
    }

    /// Every knob named in [`KNOBS`] sets something, and a fitted one moves what it scales.
    #[test]
    fn every_knob_sets_its_value_and_the_fitted_ones_move_the_model() {
        let base = (WorkloadParams::default(), StoreParams::default());
        for name in KNOBS {
            let (mut w, mut s) = base;
            set_knob(&mut w, &mut s, name, 0.5).expect(name);
            assert!(w != base.0 || s != base.1, "{name} changed nothing");
        }
        let (mut w, mut s) = base;
        set_knob(&mut w, &mut s, "k0", 2.0 * K0).expect("k0");
        set_knob(&mut w, &mut s, "value_bytes_per_atom", 0.0).expect("bytes");
        set_knob(&mut w, &mut s, "a0", 0.0).expect("a0");
        let p = &base.0;
        assert!((basin_states(50.0, &w) / basin_states(50.0, p) - 2.0).abs() < 1e-9);
        assert_eq!(value_size(50.0, &w), VALUE_BYTES_BASE as u32);
        assert_eq!(atoms(100_000.0, &w), 1.0);
        set_knob(&mut w, &mut s, "r0", 1.5 * R0).expect("r0");
        assert!(trajectory_rate(40.0, &w) > trajectory_rate(40.0, p));
    }
}
