//! What a mount is configured with, checked once so the core can trust it.

use std::path::PathBuf;
use std::time::Duration;

/// When `fsync` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncMode {
    /// Once the data and the journal record naming it are durable in the cache directory: a
    /// crash after that loses nothing, because the next mount writes the journal's extents back.
    Cache,
    /// Once the data is in the backing directory and the backing file is synced.
    Backing,
}

/// A setting's value that is none of those it may take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{setting} {value:?}: expected {expected}")]
pub struct UnknownSetting {
    /// The setting.
    pub setting: &'static str,
    /// What was given.
    pub value: String,
    /// What it may be.
    pub expected: &'static str,
}

impl std::str::FromStr for FsyncMode {
    type Err = UnknownSetting;
    fn from_str(s: &str) -> Result<Self, UnknownSetting> {
        match s {
            "cache" => Ok(Self::Cache),
            "backing" => Ok(Self::Backing),
            _ => Err(UnknownSetting {
                setting: "fsync mode",
                value: s.into(),
                expected: "cache or backing",
            }),
        }
    }
}

/// What eviction picks: whole files in least-recently-used order (DataWarp's cache evicts
/// files), or single extents in that order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvictionUnit {
    /// The least recently used file loses all its extents.
    File,
    /// The least recently used extent goes.
    Extent,
}

impl std::str::FromStr for EvictionUnit {
    type Err = UnknownSetting;
    fn from_str(s: &str) -> Result<Self, UnknownSetting> {
        match s {
            "file" => Ok(Self::File),
            "extent" => Ok(Self::Extent),
            _ => Err(UnknownSetting {
                setting: "eviction unit",
                value: s.into(),
                expected: "file or extent",
            }),
        }
    }
}

/// A mount's settings. Fractions are of `capacity`.
#[derive(Debug, Clone)]
pub struct FsConfig {
    /// The slow directory every path is served from.
    pub backing: PathBuf,
    /// Where extents and the journal live.
    pub cache_dir: PathBuf,
    /// Bytes of file data the cache may hold.
    pub capacity: u64,
    /// The unit of copy-up, dirtiness and (with `EvictionUnit::Extent`) eviction.
    pub extent: u64,
    /// Eviction starts above `high × capacity` cached bytes ...
    pub high: f64,
    /// ... and stops at `low × capacity`.
    pub low: f64,
    /// Write-back starts above `dirty_high × capacity` dirty bytes ...
    pub dirty_high: f64,
    /// ... and stops at `dirty_low × capacity`.
    pub dirty_low: f64,
    /// Threads writing dirty extents back.
    pub writeback_threads: usize,
    /// The most extents copied up ahead of a reader going through a file in order (0: none).
    pub read_ahead: u64,
    /// When fsync returns.
    pub fsync: FsyncMode,
    /// Writes past this size fail with EFBIG.
    pub max_file_size: u64,
    /// At most `write_window_multiplier × capacity` bytes written per window ...
    pub write_window_multiplier: u64,
    /// ... of this length; past it writes fail with EDQUOT.
    pub write_window: Duration,
    /// What eviction picks.
    pub eviction: EvictionUnit,
    /// What decides when to evict and to write back.
    pub policies: crate::policy::Policies,
    /// A cache server of a striped cache: other servers write the same backing files (their
    /// own stripes), so a changed size or time is not a change behind the cache's back, and a
    /// write-back only ever extends a backing file, never cuts what another server wrote.
    pub shared: bool,
}

/// A setting that cannot work, named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{setting}: {problem}")]
pub struct ConfigError {
    /// The flag's name, without dashes.
    pub setting: &'static str,
    /// What is wrong with it.
    pub problem: String,
}

impl FsConfig {
    /// DataWarp's defaults where it has them (write window 10 × capacity per 86,400 s), the
    /// issue's otherwise (1 MiB extents, 90/70% and 45/20% watermarks, 8 threads).
    pub fn new(backing: PathBuf, cache_dir: PathBuf, capacity: u64) -> Self {
        Self {
            backing,
            cache_dir,
            capacity,
            extent: 1 << 20,
            high: 0.90,
            low: 0.70,
            dirty_high: 0.45,
            dirty_low: 0.20,
            writeback_threads: 8,
            read_ahead: 8,
            fsync: FsyncMode::Cache,
            max_file_size: 1 << 30,
            write_window_multiplier: 10,
            write_window: Duration::from_secs(86_400),
            eviction: EvictionUnit::File,
            policies: crate::policy::Policies::default(),
            shared: false,
        }
    }

    /// Checks that the settings can work together; the error names the setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |setting, problem: String| Err(ConfigError { setting, problem });
        if self.capacity == 0 {
            return bad("capacity", "must be more than 0 bytes".into());
        }
        if self.extent < 4096 || !self.extent.is_power_of_two() {
            return bad(
                "extent",
                format!(
                    "{} bytes: must be a power of two of at least 4096",
                    self.extent
                ),
            );
        }
        if self.extent > self.capacity {
            return bad(
                "extent",
                format!(
                    "{} bytes is more than the capacity ({} bytes): one extent must fit",
                    self.extent, self.capacity
                ),
            );
        }
        for (setting, v) in [
            ("high", self.high),
            ("low", self.low),
            ("dirty-high", self.dirty_high),
            ("dirty-low", self.dirty_low),
        ] {
            if !(v > 0.0 && v <= 1.0) {
                return bad(setting, format!("{v}: must be a fraction in (0, 1]"));
            }
        }
        if self.low >= self.high {
            return bad(
                "low",
                format!("{} must be below high ({})", self.low, self.high),
            );
        }
        if self.dirty_low >= self.dirty_high {
            return bad(
                "dirty-low",
                format!(
                    "{} must be below dirty-high ({})",
                    self.dirty_low, self.dirty_high
                ),
            );
        }
        if self.dirty_high > self.high {
            return bad(
                "dirty-high",
                format!(
                    "{} is above high ({}): eviction would always find the cache dirty",
                    self.dirty_high, self.high
                ),
            );
        }
        if self.writeback_threads == 0 || self.writeback_threads > 256 {
            return bad(
                "writeback-threads",
                format!("{}: must be 1..=256", self.writeback_threads),
            );
        }
        if self.read_ahead > 1024 {
            return bad(
                "read-ahead",
                format!("{}: at most 1024 extents", self.read_ahead),
            );
        }
        if self.max_file_size == 0 {
            return bad("max-file-size", "must be more than 0 bytes".into());
        }
        if self.write_window_multiplier == 0 {
            return bad("write-window-multiplier", "must be at least 1".into());
        }
        if self.write_window.is_zero() {
            return bad("write-window-length", "must be more than 0 s".into());
        }
        Ok(())
    }

    pub(crate) fn low_bytes(&self) -> u64 {
        (self.capacity as f64 * self.low) as u64
    }
    pub(crate) fn window_bytes(&self) -> u64 {
        self.capacity.saturating_mul(self.write_window_multiplier)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_each_bad_setting_is_named() {
        let ok = FsConfig::new("/b".into(), "/c".into(), 10 << 30);
        assert_eq!(ok.validate(), Ok(()));
        type Breaker = fn(&mut FsConfig);
        let cases: [(&str, Breaker); 6] = [
            ("capacity", |c| c.capacity = 0),
            ("extent", |c| c.extent = 3000),
            ("low", |c| c.low = 0.95),
            ("dirty-low", |c| c.dirty_low = 0.5),
            ("dirty-high", |c| {
                c.dirty_high = 0.95;
                c.dirty_low = 0.2
            }),
            ("writeback-threads", |c| c.writeback_threads = 0),
        ];
        for (setting, break_it) in cases {
            let mut c = ok.clone();
            break_it(&mut c);
            let err = c.validate().expect_err(setting);
            assert_eq!(err.setting, setting, "{err}");
        }
    }
}
