//! The rescaling problem: servers, buckets, the commission and decommission sets, the
//! objectives, their targets, and validation of any plan or placement.

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

/// A server id.
pub type ServerId = u32;

/// A collection of objects that moves as a unit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    /// Id (unique in the cluster).
    pub id: u32,
    /// Bytes.
    pub size: f64,
    /// Load (any unit; the emulation normalises the total to 100).
    pub load: f64,
    /// Where it is now.
    pub server: ServerId,
}

/// How long a server's transfers take.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum TransferModel {
    /// Full-duplex network: `max(received, sent) / s_net`.
    Network {
        /// Bytes per second per server.
        s_net: f64,
    },
    /// Storage-bound: `sent / s_read + received / s_write`.
    Storage {
        /// Read bytes per second.
        s_read: f64,
        /// Write bytes per second.
        s_write: f64,
    },
}

impl TransferModel {
    /// Seconds a server takes to receive `recv` and send `sent` bytes.
    pub fn seconds(&self, recv: f64, sent: f64) -> f64 {
        match *self {
            Self::Network { s_net } => recv.max(sent) / s_net,
            Self::Storage { s_read, s_write } => sent / s_read + recv / s_write,
        }
    }

    /// The rate a target transfer time is computed with (the network rate, or the slower of the
    /// storage rates).
    pub fn rate(&self) -> f64 {
        match *self {
            Self::Network { s_net } => s_net,
            Self::Storage { s_read, s_write } => s_read.min(s_write),
        }
    }
}

/// A cluster and its data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cluster {
    /// Servers now.
    pub servers: Vec<ServerId>,
    /// Buckets and where they are.
    pub buckets: Vec<Bucket>,
    /// Bytes a server can hold (`C`); `null`/absent = unbounded.
    #[serde(default = "unbounded", deserialize_with = "null_is_unbounded")]
    pub capacity: f64,
    /// Transfer model.
    pub transfer: TransferModel,
}

impl Cluster {
    /// Reads a cluster from JSON `text`; errors name `source_name` (a file name), line and column.
    pub fn from_json(text: &str, source_name: &str) -> Result<Self, PlanError> {
        serde_json::from_str(text).map_err(|e| PlanError::Json {
            source_name: source_name.to_string(),
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })
    }
}

fn unbounded() -> f64 {
    f64::INFINITY
}

/// JSON has no infinity: serde_json writes an unbounded capacity as `null`, so `null` must read
/// back as unbounded (it was refused as "invalid type: null, expected f64").
fn null_is_unbounded<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(<Option<f64> as Deserialize>::deserialize(d)?.unwrap_or(f64::INFINITY))
}

/// What to change.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Rescale {
    /// Servers to commission (`I+`), not in the cluster yet.
    pub add: Vec<ServerId>,
    /// Servers to decommission (`I−`); they must end empty.
    pub remove: Vec<ServerId>,
}

impl Rescale {
    /// Commissions `n` new servers, numbered after the largest id in `cluster` (from 1 in an
    /// empty one), so that they are new whatever ids it uses.
    pub fn commission(cluster: &Cluster, n: u32) -> Self {
        let top = cluster.servers.iter().max().copied().unwrap_or(0);
        Self {
            add: (1..=n).map(|i| top + i).collect(),
            remove: Vec::new(),
        }
    }

    /// Decommissions `servers`.
    pub fn decommission(servers: Vec<ServerId>) -> Self {
        Self {
            add: Vec::new(),
            remove: servers,
        }
    }
}

/// Where every bucket ends, by position in `Cluster::buckets`.
pub type Placement = Vec<ServerId>;

/// One bucket transfer, in the order the planner decided it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Move {
    /// Bucket id.
    pub bucket: u32,
    /// From.
    pub from: ServerId,
    /// To.
    pub to: ServerId,
    /// Bytes.
    pub bytes: f64,
}

/// A plan or placement that breaks a constraint.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The placement does not place every bucket exactly once.
    #[error("placement has {got} entries for {buckets} buckets")]
    Length {
        /// Entries.
        got: usize,
        /// Buckets.
        buckets: usize,
    },
    /// A bucket ends on a server that is not in the cluster after the rescaling.
    #[error("bucket {bucket} placed on server {server}, which is not in the rescaled cluster")]
    NotAServer {
        /// Bucket id.
        bucket: u32,
        /// Server.
        server: ServerId,
    },
    /// A decommissioned server still holds data.
    #[error("decommissioned server {0} is not empty")]
    NotEmpty(ServerId),
    /// A server holds more than its capacity.
    #[error("server {server} holds {bytes} bytes, capacity {capacity}")]
    Capacity {
        /// Server.
        server: ServerId,
        /// Bytes it would hold.
        bytes: f64,
        /// Its capacity.
        capacity: f64,
    },
    /// The rescaling itself is impossible or inconsistent.
    #[error("invalid rescaling: {0}")]
    Request(String),
    /// A cluster description is not valid JSON of a [`Cluster`].
    #[error("{source_name}:{line}:{column}: {message}")]
    Json {
        /// Where the text came from (a file name).
        source_name: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What serde found wrong.
        message: String,
    },
    /// Two buckets share an id, or the move stream does not lead to the placement.
    #[error("inconsistent plan: {0}")]
    Inconsistent(String),
    /// The exact solver failed.
    #[cfg(feature = "exact")]
    #[error("solver: {0}")]
    Solver(#[source] good_lp::ResolutionError),
    /// The exact model's constraints cannot all hold (e.g. LDT's `L_max` and `D_max` both within
    /// 10% of their separate optima).
    #[error("no placement satisfies: {0}")]
    Infeasible(String),
}

/// The objectives of a placement and their targets.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Outcome {
    /// Max load per server.
    pub l_max: f64,
    /// Max data per server.
    pub d_max: f64,
    /// Longest per-server transfer time.
    pub t_max: f64,
    /// Target load per server.
    pub l_t: f64,
    /// Target data per server.
    pub d_t: f64,
    /// Target transfer time.
    pub t_t: f64,
    /// Bytes moved.
    pub moved_bytes: f64,
    /// Bytes moved over all bytes.
    pub moved_fraction: f64,
}

impl Outcome {
    /// `L_max / L_t`.
    pub fn load_ratio(&self) -> f64 {
        self.l_max / self.l_t
    }

    /// `D_max / D_t`.
    pub fn data_ratio(&self) -> f64 {
        self.d_max / self.d_t
    }

    /// `T_max / T_t`, or 1 when the target is 0 (no transfer needed), where the ratio has no
    /// meaning and a plan that moves nothing is on target.
    pub fn transfer_ratio(&self) -> f64 {
        if self.t_t > 0.0 {
            self.t_max / self.t_t
        } else {
            1.0
        }
    }
}

/// The targets of the Pufferscale paper for a rescaling.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Targets {
    /// Total load / servers after.
    pub l_t: f64,
    /// Total data / servers after.
    pub d_t: f64,
    /// Total load / servers before.
    pub l_i: f64,
    /// Total data / servers before.
    pub d_i: f64,
    /// Target transfer time.
    pub t_t: f64,
}

impl Cluster {
    /// Servers after `r`, checking it is consistent.
    pub fn after(&self, r: &Rescale) -> Result<Vec<ServerId>, PlanError> {
        let now: BTreeSet<ServerId> = self.servers.iter().copied().collect();
        if now.len() != self.servers.len() {
            return Err(PlanError::Request("duplicate server ids".into()));
        }
        for s in &r.add {
            if now.contains(s) {
                return Err(PlanError::Request(format!(
                    "server {s} is already in the cluster"
                )));
            }
        }
        for s in &r.remove {
            if !now.contains(s) {
                return Err(PlanError::Request(format!(
                    "server {s} is not in the cluster"
                )));
            }
        }
        let after: Vec<ServerId> = self
            .servers
            .iter()
            .filter(|s| !r.remove.contains(s))
            .chain(r.add.iter())
            .copied()
            .collect();
        if after.is_empty() {
            return Err(PlanError::Request("no server would remain".into()));
        }
        let mut ids = BTreeSet::new();
        for b in &self.buckets {
            if !ids.insert(b.id) {
                return Err(PlanError::Inconsistent(format!("bucket id {} twice", b.id)));
            }
            if !now.contains(&b.server) {
                return Err(PlanError::Request(format!(
                    "bucket {} is on server {}, which is not in the cluster",
                    b.id, b.server
                )));
            }
        }
        let total: f64 = self.buckets.iter().map(|b| b.size).sum();
        if total > self.capacity * after.len() as f64 {
            return Err(PlanError::Request(format!(
                "{total} bytes do not fit {} servers of capacity {}",
                after.len(),
                self.capacity
            )));
        }
        Ok(after)
    }

    /// The paper's targets for `r`.
    pub fn targets(&self, r: &Rescale) -> Result<Targets, PlanError> {
        let after = self.after(r)?.len() as f64;
        let before = self.servers.len() as f64;
        let load: f64 = self.buckets.iter().map(|b| b.load).sum();
        let size: f64 = self.buckets.iter().map(|b| b.size).sum();
        let (l_t, d_t, l_i, d_i) = (load / after, size / after, load / before, size / before);
        let rate = self.transfer.rate();
        // A decommission's bottleneck is a leaving server sending all it has; a commission's is a
        // new server receiving its share. A mixed rescaling takes the larger.
        let decommission = (d_t - d_i).abs().max(d_i) / rate;
        let commission = (d_i - d_t).abs().max(d_t) / rate;
        let t_t = match (r.add.is_empty(), r.remove.is_empty()) {
            (true, false) => decommission,
            (false, true) => commission,
            (false, false) => decommission.max(commission),
            (true, true) => 0.0,
        };
        Ok(Targets {
            l_t,
            d_t,
            l_i,
            d_i,
            t_t,
        })
    }

    /// Measures a placement.
    pub fn evaluate(&self, r: &Rescale, placement: &Placement) -> Result<Outcome, PlanError> {
        self.validate(r, placement)?;
        let t = self.targets(r)?;
        let mut load: HashMap<ServerId, f64> = HashMap::new();
        let mut data: HashMap<ServerId, f64> = HashMap::new();
        let mut recv: HashMap<ServerId, f64> = HashMap::new();
        let mut sent: HashMap<ServerId, f64> = HashMap::new();
        let mut moved = 0.0;
        for (b, &to) in self.buckets.iter().zip(placement) {
            *load.entry(to).or_default() += b.load;
            *data.entry(to).or_default() += b.size;
            if to != b.server {
                *recv.entry(to).or_default() += b.size;
                *sent.entry(b.server).or_default() += b.size;
                moved += b.size;
            }
        }
        let total: f64 = self.buckets.iter().map(|b| b.size).sum();
        let servers: BTreeSet<ServerId> = self.servers.iter().chain(&r.add).copied().collect();
        let t_max = servers
            .iter()
            .map(|s| {
                self.transfer.seconds(
                    recv.get(s).copied().unwrap_or(0.0),
                    sent.get(s).copied().unwrap_or(0.0),
                )
            })
            .fold(0.0, f64::max);
        Ok(Outcome {
            l_max: load.values().copied().fold(0.0, f64::max),
            d_max: data.values().copied().fold(0.0, f64::max),
            t_max,
            l_t: t.l_t,
            d_t: t.d_t,
            t_t: t.t_t,
            moved_bytes: moved,
            moved_fraction: if total > 0.0 { moved / total } else { 0.0 },
        })
    }

    /// Checks the constraints: every bucket on exactly one server of the rescaled cluster,
    /// decommissioned servers empty, capacity respected.
    pub fn validate(&self, r: &Rescale, placement: &Placement) -> Result<(), PlanError> {
        let after: BTreeSet<ServerId> = self.after(r)?.into_iter().collect();
        if placement.len() != self.buckets.len() {
            return Err(PlanError::Length {
                got: placement.len(),
                buckets: self.buckets.len(),
            });
        }
        let mut data: HashMap<ServerId, f64> = HashMap::new();
        for (b, &to) in self.buckets.iter().zip(placement) {
            if r.remove.contains(&to) {
                return Err(PlanError::NotEmpty(to));
            }
            if !after.contains(&to) {
                return Err(PlanError::NotAServer {
                    bucket: b.id,
                    server: to,
                });
            }
            *data.entry(to).or_default() += b.size;
        }
        for (&s, &bytes) in &data {
            // Tolerance for float sums of many bucket sizes.
            if bytes > self.capacity * (1.0 + 1e-9) {
                return Err(PlanError::Capacity {
                    server: s,
                    bytes,
                    capacity: self.capacity,
                });
            }
        }
        Ok(())
    }

    /// Checks that applying `moves` in order to the current placement gives `placement`, each
    /// move starting where its bucket is at that point.
    pub fn check_moves(&self, moves: &[Move], placement: &Placement) -> Result<(), PlanError> {
        let index: HashMap<u32, usize> = self
            .buckets
            .iter()
            .enumerate()
            .map(|(i, b)| (b.id, i))
            .collect();
        let mut at: Vec<ServerId> = self.buckets.iter().map(|b| b.server).collect();
        for m in moves {
            let &i = index
                .get(&m.bucket)
                .ok_or_else(|| PlanError::Inconsistent(format!("unknown bucket {}", m.bucket)))?;
            if at[i] != m.from {
                return Err(PlanError::Inconsistent(format!(
                    "bucket {} moved from {} but is on {}",
                    m.bucket, m.from, at[i]
                )));
            }
            at[i] = m.to;
        }
        if &at != placement {
            return Err(PlanError::Inconsistent(
                "the moves do not lead to the placement".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(servers: Vec<ServerId>) -> Cluster {
        Cluster {
            servers,
            buckets: Vec::new(),
            capacity: f64::INFINITY,
            transfer: TransferModel::Network { s_net: 1.0 },
        }
    }

    #[test]
    fn a_bad_cluster_file_is_named_with_line_and_column() {
        let e = Cluster::from_json("{\n  \"servers\": [1, 2],\n  \"buckets\": 3\n}", "c.json")
            .expect_err("buckets is not a list");
        assert!(
            matches!(&e, PlanError::Json { source_name, line: 3, .. } if source_name == "c.json"),
            "{e:?}"
        );
        assert!(e.to_string().starts_with("c.json:3:"), "{e}");
    }

    #[test]
    fn an_unbounded_cluster_written_as_json_reads_back() {
        let json = serde_json::to_string(&cluster(vec![1, 2])).expect("serialise");
        assert!(json.contains("\"capacity\":null,"), "{json}");
        assert_eq!(
            Cluster::from_json(&json, "ok.json"),
            Ok(cluster(vec![1, 2]))
        );
        let absent = json.replace("\"capacity\":null,", "");
        assert_eq!(
            Cluster::from_json(&absent, "ok.json"),
            Ok(cluster(vec![1, 2]))
        );
    }

    #[test]
    fn commissioned_servers_are_numbered_after_the_largest_id() {
        let r = Rescale::commission(&cluster(vec![7, 2, 40]), 3);
        assert_eq!(r.add, [41, 42, 43]);
        assert!(r.remove.is_empty());
        assert_eq!(Rescale::commission(&cluster(vec![]), 2).add, [1, 2]);
        let c = cluster(vec![1, 2, 3]);
        assert_eq!(
            c.after(&Rescale::commission(&c, 2)).ok(),
            Some(vec![1, 2, 3, 4, 5])
        );
        let r = Rescale::decommission(vec![2]);
        assert_eq!((r.add.len(), r.remove), (0, vec![2]));
    }

    #[test]
    fn outcome_ratios_and_a_transfer_target_of_zero() {
        let o = Outcome {
            l_max: 3.0,
            d_max: 5.0,
            t_max: 4.0,
            l_t: 2.0,
            d_t: 4.0,
            t_t: 8.0,
            moved_bytes: 1.0,
            moved_fraction: 0.1,
        };
        assert_eq!(
            (o.load_ratio(), o.data_ratio(), o.transfer_ratio()),
            (1.5, 1.25, 0.5)
        );
        assert_eq!(Outcome { t_t: 0.0, ..o }.transfer_ratio(), 1.0);
    }
}
