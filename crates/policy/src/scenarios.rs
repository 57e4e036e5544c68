//! The shipped policies deciding over built-in scenarios, tick by tick, with what acting on their
//! decisions does (what `pliant policy demo` shows): a cache trimmed by `parsplice-absorb-trim`
//! and `static-limit`, four metadata servers balanced by `cephfs-greedy-spill`, and `regime-fan`
//! over key accesses that move from superbasin to superbasin.

use serde::Serialize;

use crate::{Engine, Metrics, ParamValue, PolicyError, PolicySource, ServerId, shipped};

/// Keys a scenario cache gains per tick: a ParSplice run exploring new states.
pub const KEYS_PER_TICK: f64 = 30_000.0;

/// One tick of a cache trimmed by its policy.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CacheTick {
    /// Tick, from 1.
    pub tick: u32,
    /// Keys held before the decision.
    pub keys_before: f64,
    /// The policy's `when`.
    pub when: bool,
    /// Its `howmuch`, if it gave one.
    pub howmuch: Option<f64>,
    /// Keys held after acting on the decision.
    pub keys_after: f64,
}

/// One tick of the greedy spill between four metadata servers.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SpillTick {
    /// Tick, from 1.
    pub tick: u32,
    /// Each server's load after acting on the decision.
    pub loads: Vec<f64>,
    /// The policy's `when`.
    pub when: bool,
    /// The server load went to, if any.
    pub moved_to: Option<String>,
    /// Load moved.
    pub amount: f64,
}

/// One tick of the fan detector.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FanTick {
    /// Tick, from 1.
    pub tick: u32,
    /// Accesses in the time series so far.
    pub points: usize,
    /// Whether the detector saw two regimes or more.
    pub when: bool,
    /// The cache size it suggests, keys.
    pub suggested_keys: Option<f64>,
}

/// Every scenario's ticks.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    /// Cache trimming, per policy (a label with its parameters, and its ticks).
    pub cache: Vec<(String, Vec<CacheTick>)>,
    /// The greedy spill.
    pub spill: Vec<SpillTick>,
    /// The fan detector.
    pub fan: Vec<FanTick>,
}

/// Runs every scenario for `ticks` decisions.
pub fn run(ticks: u32) -> Result<Report, PolicyError> {
    Ok(Report {
        cache: vec![
            (
                "parsplice-absorb-trim (absorb 100000, target 1000)".into(),
                cache(
                    "parsplice-absorb-trim",
                    &[("absorb", 100_000.0), ("target", 1000.0)],
                    ticks,
                )?,
            ),
            (
                "static-limit (limit 100000)".into(),
                cache("static-limit", &[("limit", 100_000.0)], ticks)?,
            ),
        ],
        spill: spill(ticks)?,
        fan: fan(ticks)?,
    })
}

fn shipped(name: &str) -> Result<PolicySource, PolicyError> {
    shipped::get(name).ok_or_else(|| PolicyError::NotFound { path: name.into() })
}

/// A cache that gains [`KEYS_PER_TICK`] new keys per tick, trimmed whenever the policy says so.
pub fn cache(
    name: &str,
    params: &[(&str, f64)],
    ticks: u32,
) -> Result<Vec<CacheTick>, PolicyError> {
    let mut m = Metrics::new(0);
    m.set(0, "keys", 0.0);
    let mut e = Engine::in_memory(m);
    e.set_params(
        params
            .iter()
            .map(|(k, v)| (k.to_string(), ParamValue::Num(*v)))
            .collect(),
    );
    e.install(shipped(name)?)?;
    let mut keys = 0.0;
    let mut out = Vec::new();
    for tick in 1..=ticks {
        keys += KEYS_PER_TICK;
        e.metrics_mut().set(0, "keys", keys);
        let d = e.decide()?;
        let howmuch = d.howmuch.and_then(|h| h.amount());
        let before = keys;
        if let (true, Some(n)) = (d.when, howmuch) {
            keys = keys.min(n);
        }
        out.push(CacheTick {
            tick,
            keys_before: before,
            when: d.when,
            howmuch,
            keys_after: keys,
        });
    }
    Ok(out)
}

/// Four metadata servers, server 1 hot (80 against 20); greedy spill moves load to a neighbour.
pub fn spill(ticks: u32) -> Result<Vec<SpillTick>, PolicyError> {
    let mut loads = [80.0, 20.0, 20.0, 20.0];
    let mut m = Metrics::new(1);
    for (id, l) in (1..).zip(loads) {
        m.set(id, "req_rate", l);
    }
    let mut e = Engine::in_memory(m);
    e.install(shipped("cephfs-greedy-spill")?)?;
    let mut out = Vec::new();
    for tick in 1..=ticks {
        for (id, l) in (1..).zip(loads) {
            e.metrics_mut().set(id, "req_rate", l);
        }
        let d = e.decide()?;
        let mut moved_to = None;
        let mut amount = 0.0;
        for (to, x) in d.where_.iter().flatten() {
            // Server ids are 1..=4; anything else is not one of this scenario's servers.
            if let ServerId::Num(i) = to
                && let Some(slot) = usize::try_from(*i - 1).ok().filter(|&s| s < loads.len())
            {
                loads[0] -= x;
                loads[slot] += x;
                moved_to = Some(to.to_string());
                amount += x;
            }
        }
        out.push(SpillTick {
            tick,
            loads: loads.to_vec(),
            when: d.when,
            moved_to,
            amount,
        });
    }
    Ok(out)
}

/// Accesses that dwell in one superbasin of 500 keys for three ticks, then move on for good.
pub fn fan(ticks: u32) -> Result<Vec<FanTick>, PolicyError> {
    let mut e = Engine::in_memory(Metrics::new(0));
    e.install(shipped("regime-fan")?)?;
    let mut out = Vec::new();
    let mut t = 0.0;
    for tick in 1..=ticks {
        let basin = f64::from((tick - 1) / 3) * 500.0;
        for i in 0..2000u32 {
            // Sweeps down through the basin's keys: one widening fan per basin.
            e.timeseries().push(t, basin + f64::from(499 - i % 500));
            t += 1.0;
        }
        let d = e.decide()?;
        out.push(FanTick {
            tick,
            points: e.timeseries().len(),
            when: d.when,
            suggested_keys: d.howmuch.and_then(|h| h.amount()),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absorb_trim_absorbs_until_past_the_threshold_then_trims_every_tick() {
        let r = run(6).expect("scenarios run");
        let absorb = &r.cache[0].1;
        // 30,000 keys a tick cross 100,000 at tick 4.
        assert!(
            absorb[..3]
                .iter()
                .all(|t| !t.when && t.keys_after == t.keys_before)
        );
        assert!(absorb[3..].iter().all(|t| t.when && t.keys_after == 1000.0));
        let limit = &r.cache[1].1;
        assert!(limit.iter().all(|t| t.keys_after <= 100_000.0));
        assert_eq!(limit[3].keys_after, 100_000.0);
    }

    #[test]
    fn greedy_spill_moves_load_after_three_overloaded_ticks_and_loses_none() {
        let s = spill(6).expect("spill runs");
        assert_eq!(
            s.iter().map(|t| t.when).collect::<Vec<_>>(),
            [false, false, true, false, false, false]
        );
        for t in &s {
            assert_eq!(t.loads.iter().sum::<f64>(), 140.0, "tick {}", t.tick);
            assert_eq!(t.moved_to.is_some(), t.amount > 0.0);
        }
        assert!(
            s[5].loads[0] < 80.0,
            "the hot server shed load: {:?}",
            s[5].loads
        );
    }

    #[test]
    fn the_fan_detector_suggests_a_cache_once_accesses_leave_the_first_basin() {
        let f = fan(9).expect("fan runs");
        assert!(f[..3].iter().all(|t| !t.when && t.suggested_keys.is_none()));
        assert!(f[3..].iter().all(|t| t.when));
        let sizes: Vec<f64> = f[3..].iter().filter_map(|t| t.suggested_keys).collect();
        assert_eq!(sizes.len(), 6);
        // At least one 500-key basin, and never shrinking as basins accumulate.
        assert!(
            sizes[0] >= 500.0 && sizes.windows(2).all(|w| w[0] <= w[1]),
            "{sizes:?}"
        );
    }
}
