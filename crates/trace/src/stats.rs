//! One-pass trace statistics: what `pliant trace stats` reports.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use crate::record::{Op, Record};

/// Statistics of a trace.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TraceStats {
    /// Records.
    pub requests: u64,
    /// Reads.
    pub reads: u64,
    /// Writes.
    pub writes: u64,
    /// Deletes.
    pub deletes: u64,
    /// Distinct keys.
    pub distinct_keys: u64,
    /// Sum of each distinct key's last-seen size.
    pub working_set_bytes: u64,
    /// Keys requested exactly once.
    pub one_hit_wonders: u64,
    /// One-hit wonders over distinct keys.
    pub one_hit_wonder_ratio: f64,
    /// First and last timestamp (seconds).
    pub time_span: (u64, u64),
    /// The most requested keys.
    pub top_keys: Vec<TopKey>,
    /// Reads in each second, from the first timestamp: `(second, reads)`.
    pub reads_per_second: Vec<(u64, u64)>,
    /// Distinct keys requested in each 1-second window: `(second, distinct keys)`.
    pub distinct_keys_per_second: Vec<(u64, u64)>,
}

/// A popular key.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TopKey {
    /// The key.
    pub key: u64,
    /// Its requests.
    pub requests: u64,
    /// Its share of all requests.
    pub share: f64,
}

/// Accumulates [`TraceStats`] record by record.
#[derive(Debug, Default)]
pub struct StatsBuilder {
    requests: u64,
    reads: u64,
    writes: u64,
    deletes: u64,
    keys: HashMap<u64, (u64, u32)>,
    first: Option<u64>,
    last: u64,
    second: Option<u64>,
    reads_this_second: u64,
    seen_this_second: HashSet<u64>,
    reads_per_second: Vec<(u64, u64)>,
    distinct_per_second: Vec<(u64, u64)>,
}

impl StatsBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    fn close_second(&mut self) {
        if let Some(s) = self.second {
            self.reads_per_second.push((s, self.reads_this_second));
            self.distinct_per_second
                .push((s, self.seen_this_second.len() as u64));
        }
        self.reads_this_second = 0;
        self.seen_this_second.clear();
    }

    /// Adds one record.
    pub fn add(&mut self, r: &Record) {
        self.requests += 1;
        match r.op {
            Op::Get => self.reads += 1,
            Op::Put => self.writes += 1,
            Op::Delete => self.deletes += 1,
        }
        let first = *self.first.get_or_insert(r.time);
        let sec = r.time.saturating_sub(first);
        self.last = self.last.max(r.time);
        if self.second != Some(sec) {
            // Time can repeat or (in merged traces) step back; a new window starts whenever the
            // second changes.
            self.close_second();
            self.second = Some(sec);
        }
        if r.op == Op::Get {
            self.reads_this_second += 1;
        }
        self.seen_this_second.insert(r.key);
        let e = self.keys.entry(r.key).or_insert((0, r.size));
        e.0 += 1;
        e.1 = r.size;
    }

    /// The statistics, with the `top` most requested keys.
    pub fn finish(mut self, top: usize) -> TraceStats {
        self.close_second();
        let one_hit = self.keys.values().filter(|(c, _)| *c == 1).count() as u64;
        let mut by_count: Vec<(u64, u64)> = self.keys.iter().map(|(k, (c, _))| (*k, *c)).collect();
        by_count.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let distinct = self.keys.len() as u64;
        TraceStats {
            requests: self.requests,
            reads: self.reads,
            writes: self.writes,
            deletes: self.deletes,
            distinct_keys: distinct,
            working_set_bytes: self.keys.values().map(|(_, s)| u64::from(*s)).sum(),
            one_hit_wonders: one_hit,
            one_hit_wonder_ratio: if distinct == 0 {
                0.0
            } else {
                one_hit as f64 / distinct as f64
            },
            time_span: (self.first.unwrap_or(0), self.last),
            top_keys: by_count
                .into_iter()
                .take(top)
                .map(|(key, requests)| TopKey {
                    key,
                    requests,
                    share: requests as f64 / self.requests.max(1) as f64,
                })
                .collect(),
            reads_per_second: self.reads_per_second,
            distinct_keys_per_second: self.distinct_per_second,
        }
    }
}
