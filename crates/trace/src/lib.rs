//! Pliant's traces: streaming readers for real key-value traces (ParSplice keyspace CSV,
//! libCacheSim oracleGeneral, generic CSV, Twitter cache traces), gzip/zstd by extension, the
//! oracleGeneral writer with next-access times, one-pass statistics, profiles over time (reads and
//! distinct keys per bucket, popularity: what calibration and regime detection read), and seeded
//! generators.
//!
//! Every reader error names the file and the line (text) or byte offset (binary); lenient mode
//! skips malformed lines and counts them instead.
//!
//! Dependencies: `flate2` and `ruzstd` (pure Rust) decompress; `rand`, `rand_distr` and `rand_pcg`
//! make seeded workloads; `foldhash` keys the next-access pass; `serde` serialises statistics.

mod convert;
mod error;
mod generate;
mod open;
mod profile;
mod readers;
mod record;
mod stats;

pub use convert::{Converted, convert_to_oracle_general, fill_next_access, write_oracle_general};
pub use error::TraceError;
pub use generate::{Popularity, Workload, generate, write_workload};
pub use open::open;
pub use profile::{Profile, ProfileBuilder, profile};
pub use readers::{ORACLE_RECORD, TraceReader, format_of, reader};
pub use record::{Op, Record, hash_id};
pub use stats::{StatsBuilder, TopKey, TraceStats};

/// Format names, as `--format` takes them.
pub const FORMATS: [&str; 4] = ["parsplice", "oracle-general", "csv", "twitter"];

/// A trace format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// ParSplice keyspace counters: `unix_ts,op,db,key`.
    ParSplice,
    /// libCacheSim oracleGeneral binary.
    OracleGeneral,
    /// Generic CSV, see [`CsvOptions`].
    Csv,
    /// Twitter cache trace: `timestamp,key,key_size,value_size,client_id,op,ttl`.
    Twitter,
}

impl std::str::FromStr for Format {
    type Err = TraceError;
    fn from_str(s: &str) -> Result<Self, TraceError> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "parsplice" => Self::ParSplice,
            "oracle-general" | "oraclegeneral" | "oracle_general" => Self::OracleGeneral,
            "csv" => Self::Csv,
            "twitter" => Self::Twitter,
            _ => {
                return Err(TraceError::Format {
                    message: format!("unknown format {s:?}"),
                });
            }
        })
    }
}

/// Which logical operations a reader emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ops {
    /// Emit reads.
    pub reads: bool,
    /// Emit writes (and deletes).
    pub writes: bool,
}

impl Default for Ops {
    fn default() -> Self {
        Self {
            reads: true,
            writes: true,
        }
    }
}

/// Column layout of a generic CSV trace (1-based columns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsvOptions {
    /// Timestamp column (seconds; fractions are dropped).
    pub time_col: Option<usize>,
    /// Object id column (numbers as is, anything else hashed).
    pub key_col: usize,
    /// Size column.
    pub size_col: Option<usize>,
    /// Operation column (get/put/delete and synonyms).
    pub op_col: Option<usize>,
    /// First line is a header.
    pub header: bool,
    /// Field delimiter.
    pub delimiter: char,
}

impl Default for CsvOptions {
    fn default() -> Self {
        Self {
            time_col: Some(1),
            key_col: 2,
            size_col: Some(3),
            op_col: None,
            header: false,
            delimiter: ',',
        }
    }
}

impl CsvOptions {
    fn validate(&self) -> Result<(), TraceError> {
        let cols = [
            Some(self.key_col),
            self.time_col,
            self.size_col,
            self.op_col,
        ];
        if cols.iter().flatten().any(|c| *c == 0) {
            return Err(TraceError::Options(
                "CSV columns are numbered from 1".into(),
            ));
        }
        Ok(())
    }
}

/// How to read a trace.
#[derive(Debug, Clone)]
pub struct ReadOptions {
    /// The format; `None` guesses from the name (`*.oracleGeneral*`, `*.bin`) or first line.
    pub format: Option<Format>,
    /// Skip and count malformed lines instead of failing.
    pub lenient: bool,
    /// Size for formats without sizes (ParSplice; CSV without a size column).
    pub default_size: u32,
    /// Which logical operations to emit.
    pub ops: Ops,
    /// ParSplice database index to keep (`None`: all). Database 0 holds the minima coordinates
    /// the cache studies looked at.
    pub parsplice_db: Option<u32>,
    /// Generic CSV layout.
    pub csv: CsvOptions,
}

impl Default for ReadOptions {
    fn default() -> Self {
        Self {
            format: None,
            lenient: false,
            default_size: 1,
            ops: Ops::default(),
            parsplice_db: Some(0),
            csv: CsvOptions::default(),
        }
    }
}
