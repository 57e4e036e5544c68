//! The Pufferscale heuristic (Cheriere et al., CCGrid 2020), built from the paper.
//!
//! 1. **Weighted targets.** From the paper's targets and weights `W_L`, `W_D`, `W_T`
//!    (`max(W_L, W_D) = 1`, all > 0): for `W_T < 1`, `L_tw = L_t / W_L` and `D_tw = D_t / W_D`;
//!    otherwise `L_tw = ((1 − 1/W_T)·L_i + L_t/W_T) / W_L` (likewise `D_tw` with `D_i`, `D_t`), so a
//!    heavy transfer weight lets servers keep closer to what they hold now; `T_tw = T_t / W_T`.
//! 2. **Fixing.** Each remaining server keeps its own buckets in decreasing weighted norm
//!    `N_w = sqrt((W_L·load/ΣLoad)² + (W_D·size/ΣSize)²)` while the kept load stays ≤ `L_tw` and the
//!    kept size ≤ `D_tw` (and the capacity); it stops at the first bucket that would exceed.
//!    Decommissioned servers keep nothing.
//! 3. **Allocation.** The other buckets, in decreasing `N_w`, each go to the server that adds the
//!    least to `Σ_k P(k)`, with
//!    `P(k) = (load_k / L_tw)³ + (data_k / D_tw)³ + ½·(max(received_k, sent_k) / (S_net·T_tw))³`
//!    (a leaving server counts only its transfer term). The paper prints this as "minimise
//!    P(i) + P(i₀)" with `i₀` the bucket's current server, but its typeset formula is garbled; we
//!    use the *increase* of `P(i) + P(i₀)` when the bucket goes to `i`, which is the same choice
//!    whenever `i ≠ i₀` and does not count a server twice when the bucket stays home (`i = i₀`:
//!    no transfer, one server's load and data rise). Full servers are skipped.
//!
//! **Candidates.** Evaluating every server for every bucket costs `O(B·S)`. Servers are kept in an
//! ordered set by their current `P`; only the `k` lowest (default 16) and the bucket's own
//! server are evaluated. This is a heuristic on top of the greedy one, not an exact shortcut:
//! `P` is a sum of terms in different quantities, and a server's current `P` does not order
//! what one more bucket adds to it (a server with little load and much data has a high `P` but
//! adds least for a bucket of high load and little data), so the cheapest destination can lie
//! outside the `k` lowest. Cost: `O(B·(k + log S))` after an `O(B log B)` sort. With `k ≥ S` every
//! server is evaluated; [`crate::candidates`] measures how often and by how much the two differ
//! (`cargo bench -p pliant-scale --bench candidates`), and the tests pin seeded cases where they do.
//!
//! Moves are handed to the caller as they are decided, so transfers can start before planning
//! ends.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::model::{Cluster, Move, Placement, PlanError, Rescale, ServerId, Targets};

/// Objective weights.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Weights {
    /// Load weight `W_L`.
    pub load: f64,
    /// Data weight `W_D`.
    pub data: f64,
    /// Transfer-time weight `W_T`.
    pub transfer: f64,
}

/// A weight that stands for "ignore this objective" (weights must stay positive).
const OFF: f64 = 1e-3;

/// The paper's strategies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// Load balance only.
    L,
    /// Load balance and fast transfers.
    Lt,
    /// Data balance and fast transfers.
    Dt,
    /// All three.
    Ldt,
}

impl Strategy {
    /// All strategies.
    pub const ALL: [Strategy; 4] = [Self::L, Self::Lt, Self::Dt, Self::Ldt];

    /// Its weights.
    pub fn weights(self) -> Weights {
        let (load, data, transfer) = match self {
            Self::L => (1.0, OFF, OFF),
            Self::Lt => (1.0, OFF, 1.0),
            Self::Dt => (OFF, 1.0, 1.0),
            Self::Ldt => (1.0, 1.0, 1.0),
        };
        Weights {
            load,
            data,
            transfer,
        }
    }

    /// Its name (`l`, `lt`, `dt`, `ldt`).
    pub fn name(self) -> &'static str {
        match self {
            Self::L => "l",
            Self::Lt => "lt",
            Self::Dt => "dt",
            Self::Ldt => "ldt",
        }
    }
}

impl std::str::FromStr for Strategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|x| x.name() == s.to_ascii_lowercase())
            .ok_or_else(|| format!("unknown strategy {s:?}; known: l, lt, dt, ldt"))
    }
}

impl Weights {
    /// Weights given as the list `[W_L, W_D, W_T]` (as `--weights` takes them).
    pub fn from_list(w: &[f64]) -> Result<Self, PlanError> {
        let [load, data, transfer] = w[..] else {
            return Err(PlanError::Request(format!(
                "weights are three numbers W_L,W_D,W_T, got {}",
                w.len()
            )));
        };
        Ok(Self {
            load,
            data,
            transfer,
        })
    }

    /// Checks `max(W_L, W_D) = 1` and all > 0.
    pub fn validate(&self) -> Result<(), PlanError> {
        let ok = |x: f64| x.is_finite() && x > 0.0;
        if !(ok(self.load) && ok(self.data) && ok(self.transfer)) {
            return Err(PlanError::Request("weights must be positive".into()));
        }
        if (self.load.max(self.data) - 1.0).abs() > 1e-9 {
            return Err(PlanError::Request("max(W_L, W_D) must be 1".into()));
        }
        Ok(())
    }

    /// The weighted targets `(L_tw, D_tw, T_tw)`.
    pub fn targets(&self, t: &Targets) -> (f64, f64, f64) {
        let (l, d) = if self.transfer < 1.0 {
            (t.l_t / self.load, t.d_t / self.data)
        } else {
            let w = self.transfer;
            (
                ((1.0 - 1.0 / w) * t.l_i + t.l_t / w) / self.load,
                ((1.0 - 1.0 / w) * t.d_i + t.d_t / w) / self.data,
            )
        };
        (l, d, t.t_t / self.transfer)
    }
}

/// Planner options.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlanOptions {
    /// Candidate servers evaluated per bucket (besides its own); `usize::MAX` = all.
    pub candidates: usize,
}

impl Default for PlanOptions {
    fn default() -> Self {
        Self { candidates: 16 }
    }
}

struct State {
    load: Vec<f64>,
    data: Vec<f64>,
    recv: Vec<f64>,
    sent: Vec<f64>,
    dest: Vec<bool>,
    l_tw: f64,
    d_tw: f64,
    t_scale: f64,
}

impl State {
    #[inline]
    fn p(&self, i: usize, load: f64, data: f64, recv: f64, sent: f64) -> f64 {
        let t = recv.max(sent) / self.t_scale;
        let transfer = 0.5 * t * t * t;
        if !self.dest[i] {
            return transfer;
        }
        let l = load / self.l_tw;
        let d = data / self.d_tw;
        l * l * l + d * d * d + transfer
    }

    #[inline]
    fn now(&self, i: usize) -> f64 {
        self.p(i, self.load[i], self.data[i], self.recv[i], self.sent[i])
    }
}

fn key(p: f64, i: usize) -> (u64, u32) {
    // Penalties are non-negative, where the bit pattern orders like the value.
    (p.max(0.0).to_bits(), i as u32)
}

/// Plans `r` on `cluster` with `weights`, handing each move to `on_move` as soon as it is decided.
/// Returns the final placement (by bucket position).
pub fn plan(
    cluster: &Cluster,
    r: &Rescale,
    weights: Weights,
    opts: PlanOptions,
    mut on_move: impl FnMut(Move),
) -> Result<Placement, PlanError> {
    weights.validate()?;
    let after = cluster.after(r)?;
    let targets = cluster.targets(r)?;
    let (l_tw, d_tw, t_tw) = weights.targets(&targets);

    // Dense server indices: current servers, then new ones.
    let ids: Vec<ServerId> = cluster.servers.iter().chain(&r.add).copied().collect();
    let mut index = std::collections::HashMap::with_capacity(ids.len());
    for (i, s) in ids.iter().enumerate() {
        index.insert(*s, i);
    }
    let n = ids.len();
    let dest: Vec<bool> = ids.iter().map(|s| !r.remove.contains(s)).collect();
    debug_assert_eq!(dest.iter().filter(|d| **d).count(), after.len());
    let t_scale = (cluster.transfer.rate() * t_tw).max(f64::MIN_POSITIVE);
    let mut st = State {
        load: vec![0.0; n],
        data: vec![0.0; n],
        recv: vec![0.0; n],
        sent: vec![0.0; n],
        dest,
        l_tw: l_tw.max(f64::MIN_POSITIVE),
        d_tw: d_tw.max(f64::MIN_POSITIVE),
        t_scale,
    };

    let total_load: f64 = cluster
        .buckets
        .iter()
        .map(|b| b.load)
        .sum::<f64>()
        .max(f64::MIN_POSITIVE);
    let total_size: f64 = cluster
        .buckets
        .iter()
        .map(|b| b.size)
        .sum::<f64>()
        .max(f64::MIN_POSITIVE);
    let norm = |k: usize| {
        let b = &cluster.buckets[k];
        let l = weights.load * b.load / total_load;
        let d = weights.data * b.size / total_size;
        (l * l + d * d).sqrt()
    };
    let norms: Vec<f64> = (0..cluster.buckets.len()).map(norm).collect();
    let by_norm = |a: &usize, b: &usize| norms[*b].total_cmp(&norms[*a]).then(a.cmp(b));

    // Fixing phase.
    let mut per_server: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (k, b) in cluster.buckets.iter().enumerate() {
        per_server[index[&b.server]].push(k);
    }
    let mut placement: Placement = vec![ServerId::MAX; cluster.buckets.len()];
    let mut unfixed: Vec<usize> = Vec::new();
    for (i, mine) in per_server.iter_mut().enumerate() {
        mine.sort_by(by_norm);
        let mut keeping = st.dest[i];
        for &k in mine.iter() {
            let b = &cluster.buckets[k];
            keeping = keeping
                && st.load[i] + b.load <= st.l_tw
                && st.data[i] + b.size <= st.d_tw
                && st.data[i] + b.size <= cluster.capacity;
            if keeping {
                st.load[i] += b.load;
                st.data[i] += b.size;
                placement[k] = ids[i];
            } else {
                unfixed.push(k);
            }
        }
    }

    // Allocation phase.
    unfixed.sort_by(by_norm);
    let mut order: BTreeSet<(u64, u32)> = (0..n)
        .filter(|&i| st.dest[i])
        .map(|i| key(st.now(i), i))
        .collect();
    let mut pool: Vec<usize> = Vec::with_capacity(opts.candidates.min(n) + 1);
    for k in unfixed {
        let b = &cluster.buckets[k];
        let i0 = index[&b.server];
        let stay = |st: &State| -> Option<f64> {
            (st.dest[i0] && st.data[i0] + b.size <= cluster.capacity).then(|| {
                st.p(
                    i0,
                    st.load[i0] + b.load,
                    st.data[i0] + b.size,
                    st.recv[i0],
                    st.sent[i0],
                ) - st.now(i0)
            })
        };
        let src_increase = st.p(
            i0,
            st.load[i0],
            st.data[i0],
            st.recv[i0],
            st.sent[i0] + b.size,
        ) - st.now(i0);
        let go = |st: &State, i: usize| -> Option<f64> {
            (st.data[i] + b.size <= cluster.capacity).then(|| {
                st.p(
                    i,
                    st.load[i] + b.load,
                    st.data[i] + b.size,
                    st.recv[i] + b.size,
                    st.sent[i],
                ) - st.now(i)
                    + src_increase
            })
        };
        pool.clear();
        pool.extend(order.iter().take(opts.candidates).map(|&(_, i)| i as usize));
        let mut best: Option<(f64, usize)> = stay(&st).map(|d| (d, i0));
        let consider = |best: &mut Option<(f64, usize)>, i: usize, st: &State| {
            if i == i0 {
                return;
            }
            if let Some(d) = go(st, i)
                && best.is_none_or(|(bd, bi)| d < bd || (d == bd && i < bi))
            {
                *best = Some((d, i));
            }
        };
        for &i in &pool {
            consider(&mut best, i, &st);
        }
        if best.is_none() {
            // Every candidate is full: look at all servers.
            for &(_, i) in order.iter() {
                consider(&mut best, i as usize, &st);
            }
        }
        let Some((_, to)) = best else {
            return Err(PlanError::Capacity {
                server: ids[i0],
                bytes: b.size,
                capacity: cluster.capacity,
            });
        };
        for i in [to, i0] {
            if st.dest[i] {
                order.remove(&key(st.now(i), i));
            }
        }
        st.load[to] += b.load;
        st.data[to] += b.size;
        if to != i0 {
            st.recv[to] += b.size;
            st.sent[i0] += b.size;
            on_move(Move {
                bucket: b.id,
                from: ids[i0],
                to: ids[to],
                bytes: b.size,
            });
        }
        for i in [to, i0] {
            if st.dest[i] {
                order.insert(key(st.now(i), i));
            }
        }
        placement[k] = ids[to];
    }
    Ok(placement)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_are_three_numbers() {
        let w = Weights::from_list(&[1.0, 0.5, 2.0]).expect("three");
        assert_eq!((w.load, w.data, w.transfer), (1.0, 0.5, 2.0));
        for bad in [&[1.0, 1.0][..], &[1.0, 1.0, 1.0, 1.0][..], &[][..]] {
            assert!(matches!(
                Weights::from_list(bad),
                Err(PlanError::Request(_))
            ));
        }
    }
}
