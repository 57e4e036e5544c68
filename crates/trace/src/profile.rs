//! A trace's shape over time, in fixed-length buckets: what the ParSplice calibration compares
//! with the model, and what regime detection clusters (`pliant regimes`).

use std::collections::HashMap;

use crate::error::TraceError;
use crate::record::{Op, Record};

/// Reads, distinct keys and key popularity of a trace, bucket by bucket from its first record.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// Seconds per bucket.
    pub bucket_seconds: u64,
    /// Reads.
    pub reads: u64,
    /// Writes and deletes.
    pub writes: u64,
    /// Distinct keys, read or written.
    pub distinct_keys: u64,
    /// Reads in each bucket.
    pub reads_per_bucket: Vec<u64>,
    /// Distinct keys seen by the end of each bucket: what an unlimited cache holds then.
    pub keys_by_bucket: Vec<u64>,
    /// Most reads in one second of the trace's clock.
    pub peak_reads_per_second: u64,
    /// Reads of each key read at least once, most read first.
    pub popularity: Vec<u64>,
    /// `(seconds since the first record, key id)` of every read, ids numbered in order of first
    /// appearance (read or write): the fan detector's input. Empty unless asked for
    /// ([`ProfileBuilder::keep_accesses`]), as it holds a point per read.
    pub accesses: Vec<(f64, u64)>,
}

impl Profile {
    /// Reads per write (per 1 if there are none).
    pub fn read_write_ratio(&self) -> f64 {
        self.reads as f64 / self.writes.max(1) as f64
    }

    /// The most read key's share of all reads.
    pub fn top_key_share(&self) -> f64 {
        self.popularity.first().copied().unwrap_or(0) as f64 / self.reads.max(1) as f64
    }

    /// `(bucket start in seconds, reads per second in it)`.
    pub fn read_rates(&self) -> Vec<(f64, f64)> {
        let b = self.bucket_seconds;
        self.reads_per_bucket
            .iter()
            .enumerate()
            .map(|(i, &n)| ((i as u64 * b) as f64, n as f64 / b as f64))
            .collect()
    }

    /// `(bucket start in seconds, distinct keys by its end)`, aligned with
    /// [`read_rates`](Self::read_rates).
    pub fn keys_held(&self) -> Vec<(f64, u64)> {
        let b = self.bucket_seconds;
        self.keys_by_bucket
            .iter()
            .enumerate()
            .map(|(i, &n)| ((i as u64 * b) as f64, n))
            .collect()
    }
}

/// Accumulates a [`Profile`] record by record.
#[derive(Debug)]
pub struct ProfileBuilder {
    bucket: u64,
    keep_accesses: bool,
    first: Option<u64>,
    reads: u64,
    writes: u64,
    reads_per_bucket: Vec<u64>,
    keys_by_bucket: Vec<u64>,
    /// Key → (id by first appearance, reads).
    keys: HashMap<u64, (u64, u64)>,
    reads_per_second: HashMap<u64, u64>,
    accesses: Vec<(f64, u64)>,
}

impl ProfileBuilder {
    /// A builder for buckets of `bucket_seconds` (at least 1).
    pub fn new(bucket_seconds: u64) -> Result<Self, TraceError> {
        if bucket_seconds == 0 {
            return Err(TraceError::Options(
                "profile buckets must be at least 1 second".into(),
            ));
        }
        Ok(Self {
            bucket: bucket_seconds,
            keep_accesses: false,
            first: None,
            reads: 0,
            writes: 0,
            reads_per_bucket: Vec::new(),
            keys_by_bucket: Vec::new(),
            keys: HashMap::new(),
            reads_per_second: HashMap::new(),
            accesses: Vec::new(),
        })
    }

    /// Also keep every read's `(time, key id)` ([`Profile::accesses`]).
    pub fn keep_accesses(mut self) -> Self {
        self.keep_accesses = true;
        self
    }

    /// Adds one record. Times before the first record's (merged traces can step back) count
    /// in the first bucket.
    pub fn add(&mut self, r: &Record) {
        let t0 = *self.first.get_or_insert(r.time);
        let since = r.time.saturating_sub(t0);
        let b = (since / self.bucket) as usize;
        if self.reads_per_bucket.len() <= b {
            // Buckets without records hold what was there before them.
            self.reads_per_bucket.resize(b + 1, 0);
            self.keys_by_bucket.resize(b + 1, self.keys.len() as u64);
        }
        let next = self.keys.len() as u64;
        let entry = self.keys.entry(r.key).or_insert((next, 0));
        if r.op == Op::Get {
            entry.1 += 1;
            self.reads += 1;
            self.reads_per_bucket[b] += 1;
            *self.reads_per_second.entry(r.time).or_default() += 1;
            if self.keep_accesses {
                self.accesses.push((since as f64, entry.0));
            }
        } else {
            self.writes += 1;
        }
        self.keys_by_bucket[b] = self.keys.len() as u64;
    }

    /// The profile.
    pub fn finish(self) -> Profile {
        let mut popularity: Vec<u64> = self
            .keys
            .values()
            .map(|&(_, reads)| reads)
            .filter(|&n| n > 0)
            .collect();
        popularity.sort_unstable_by(|a, b| b.cmp(a));
        Profile {
            bucket_seconds: self.bucket,
            reads: self.reads,
            writes: self.writes,
            distinct_keys: self.keys.len() as u64,
            reads_per_bucket: self.reads_per_bucket,
            keys_by_bucket: self.keys_by_bucket,
            peak_reads_per_second: self.reads_per_second.values().copied().max().unwrap_or(0),
            popularity,
            accesses: self.accesses,
        }
    }
}

/// Profiles every record of `records` in buckets of `bucket_seconds`, keeping every read's
/// `(time, key id)` if `keep_accesses`.
pub fn profile(
    records: impl IntoIterator<Item = Result<Record, TraceError>>,
    bucket_seconds: u64,
    keep_accesses: bool,
) -> Result<Profile, TraceError> {
    let mut b = ProfileBuilder::new(bucket_seconds)?;
    if keep_accesses {
        b = b.keep_accesses();
    }
    for r in records {
        b.add(&r?);
    }
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(time: u64, key: u64) -> Record {
        Record {
            op: Op::Put,
            ..Record::get(time, key, 1)
        }
    }

    /// A ParSplice-like run: keys written, then read; a quiet stretch with no records at all.
    fn run() -> Vec<Record> {
        vec![
            put(1000, 70),
            Record::get(1000, 70, 1),
            Record::get(1000, 70, 1),
            put(1004, 80),
            Record::get(1009, 80, 1),
            Record::get(1010, 70, 1),
            // 1020..1030 has nothing.
            put(1031, 90),
            Record::get(1031, 90, 1),
            Record::get(1032, 70, 1),
        ]
    }

    fn of(records: &[Record], bucket: u64, accesses: bool) -> Profile {
        profile(records.iter().copied().map(Ok), bucket, accesses).expect("profile")
    }

    #[test]
    fn counts_buckets_keys_and_popularity() {
        let p = of(&run(), 10, false);
        assert_eq!((p.reads, p.writes, p.distinct_keys), (6, 3, 3));
        assert_eq!(p.reads_per_bucket, [3, 1, 0, 2]);
        // An empty bucket holds what the one before it ended with.
        assert_eq!(p.keys_by_bucket, [2, 2, 2, 3]);
        assert_eq!(p.peak_reads_per_second, 2);
        assert_eq!(p.popularity, [4, 1, 1]);
        assert_eq!(p.read_write_ratio(), 2.0);
        assert!((p.top_key_share() - 4.0 / 6.0).abs() < 1e-12);
        assert_eq!(
            p.read_rates(),
            [(0.0, 0.3), (10.0, 0.1), (20.0, 0.0), (30.0, 0.2)]
        );
        assert_eq!(p.keys_held(), [(0.0, 2), (10.0, 2), (20.0, 2), (30.0, 3)]);
        assert!(p.accesses.is_empty(), "accesses only when asked for");
    }

    #[test]
    fn accesses_number_keys_by_first_appearance_reads_or_writes() {
        let p = of(&run(), 10, true);
        assert_eq!(
            p.accesses,
            [
                (0.0, 0),
                (0.0, 0),
                (9.0, 1),
                (10.0, 0),
                (31.0, 2),
                (32.0, 0)
            ]
        );
        // Keeping them changes nothing else.
        assert_eq!(
            Profile {
                accesses: Vec::new(),
                ..p
            },
            of(&run(), 10, false)
        );
    }

    #[test]
    fn a_time_before_the_first_counts_in_the_first_bucket() {
        let p = of(&[Record::get(50, 1, 1), Record::get(40, 2, 1)], 10, true);
        assert_eq!(p.reads_per_bucket, [2]);
        assert_eq!(p.accesses, [(0.0, 0), (0.0, 1)]);
    }

    #[test]
    fn no_records_and_bad_input() {
        let p = of(&[], 10, true);
        assert_eq!(
            (p.reads, p.distinct_keys, p.peak_reads_per_second),
            (0, 0, 0)
        );
        assert!(p.reads_per_bucket.is_empty() && p.popularity.is_empty());
        assert_eq!((p.read_write_ratio(), p.top_key_share()), (0.0, 0.0));
        assert!(matches!(
            ProfileBuilder::new(0),
            Err(TraceError::Options(m)) if m.contains("at least 1 second")
        ));
        let failing = [
            Ok(Record::get(1, 1, 1)),
            Err(TraceError::Options("bad line".into())),
        ];
        assert!(
            profile(failing, 10, false).is_err(),
            "a reader error stops it"
        );
    }
}
