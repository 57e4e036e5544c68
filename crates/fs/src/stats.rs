//! The counters a mount keeps, and the snapshot `pliant fs stat` shows.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Counters, updated without a lock.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub read_hit_bytes: AtomicU64,
    pub read_miss_bytes: AtomicU64,
    pub read_requests: AtomicU64,
    pub written_bytes: AtomicU64,
    pub copy_up_bytes: AtomicU64,
    pub copy_up_read_bytes: AtomicU64,
    pub copy_up_preload_bytes: AtomicU64,
    pub read_ahead_bytes: AtomicU64,
    pub writeback_bytes: AtomicU64,
    pub writeback_errors: AtomicU64,
    pub evicted_extents: AtomicU64,
    pub evicted_bytes: AtomicU64,
    pub edquot: AtomicU64,
    pub efbig: AtomicU64,
    pub revalidated_files: AtomicU64,
    pub conflicting_files: AtomicU64,
    pub passthrough_opens: AtomicU64,
    pub passthrough_write_opens: AtomicU64,
    pub policy_errors: AtomicU64,
}

impl Counters {
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Relaxed);
    }
}

/// What `pliant fs stat` prints (and `--json` serialises as is).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FsStats {
    /// The mount daemon's pid (what `pliant fs unmount` waits for).
    pub pid: u32,
    /// The backing directory.
    pub backing: String,
    /// Seconds since the mount started.
    pub uptime_secs: f64,
    /// Bytes of file data the cache may hold.
    pub capacity_bytes: u64,
    /// Bytes of file data the cache holds.
    pub used_bytes: u64,
    /// Of those, bytes not yet in the backing directory.
    pub dirty_bytes: u64,
    /// Files with cached extents.
    pub cached_files: u64,
    /// Bytes read through the daemon from extents the cache held when the read came. A read
    /// of extents none of which is cached is answered from the backing directory and its
    /// extents copied up behind it; later requests of an extent copied by then count here,
    /// although its bytes came from the backing directory a moment earlier:
    /// `copy_up_read_bytes` says how much reads fetched. Reads served by the kernel (its page
    /// cache, passthrough) are not seen.
    pub read_hit_bytes: u64,
    /// Bytes read through the daemon whose extent the cache did not hold: answered from the
    /// backing directory, or (a read that found part of its range cached, or `--read-ahead 0`)
    /// after its extent was copied up (the requested bytes, not the whole extent: that is in
    /// `copy_up_read_bytes`).
    pub read_miss_bytes: u64,
    /// Read requests the daemon served: `(read_hit_bytes + read_miss_bytes) / read_requests`
    /// is their mean size, which the kernel's read-ahead sets for reads through its page cache
    /// (128 KiB by default; see `--kernel-read-ahead`).
    #[serde(default)]
    pub read_requests: u64,
    /// `read_hit_bytes / (read_hit_bytes + read_miss_bytes)`: the share of read requests' bytes
    /// that found their extent cached; 0 before any read. Not the share of read data that
    /// came from the cache rather than the backing directory: compare `copy_up_read_bytes`.
    pub hit_ratio: f64,
    /// Bytes written by applications (of a file written by passthrough, what it grew: the
    /// daemon does not see rewrites inside it).
    pub written_bytes: u64,
    /// Bytes copied from the backing directory into the cache: for reads, for preloads, and
    /// for writes to part of an extent (the rest).
    pub copy_up_bytes: u64,
    /// Of those, bytes copied up because a read needed their extent.
    #[serde(default)]
    pub copy_up_read_bytes: u64,
    /// Of those, bytes copied up by `preload` hints.
    #[serde(default)]
    pub copy_up_preload_bytes: u64,
    /// Of the bytes copied up for reads, those read-ahead copied for a reader going through a
    /// file in order (not those a read answered from the backing directory left to copy).
    #[serde(default)]
    pub read_ahead_bytes: u64,
    /// Mean copy-up rate since the mount, bytes/s.
    pub copy_up_rate: f64,
    /// Bytes written back to the backing directory.
    pub writeback_bytes: u64,
    /// Mean write-back rate since the mount, bytes/s.
    pub writeback_rate: f64,
    /// Write-backs that failed (and were retried).
    pub writeback_errors: u64,
    /// Extents evicted.
    pub evicted_extents: u64,
    /// Bytes evicted.
    pub evicted_bytes: u64,
    /// Writes refused with EDQUOT by the write window.
    pub edquot_writes: u64,
    /// Writes refused with EFBIG.
    pub efbig_writes: u64,
    /// Bytes written in the current write window.
    pub window_used_bytes: u64,
    /// What the window allows.
    pub window_limit_bytes: u64,
    /// Seconds until the window rolls over.
    pub window_left_secs: f64,
    /// Files whose cached data was dropped because the backing copy changed.
    pub revalidated_files: u64,
    /// Files found changed in the backing directory while the cache held data of theirs not
    /// yet written back: the cache's data won, and its write-back overwrites the change.
    #[serde(default)]
    pub conflicting_files: u64,
    /// Opens served by kernel passthrough (reads straight from the cache file).
    pub passthrough_opens: u64,
    /// Of the opens for writing, those served by kernel passthrough (writes straight into the
    /// cache file; in `written_bytes` by what the file grew).
    #[serde(default)]
    pub passthrough_write_opens: u64,
    /// The eviction policy's name.
    pub evict_policy: String,
    /// The write-back policy's name.
    pub writeback_policy: String,
    /// Decisions a policy failed to make (its last targets stood).
    pub policy_errors: u64,
    /// Background flushes asked for (`pliant fs unmount`, through the owner's `pliant.flush`).
    #[serde(default)]
    pub flush_asked: u64,
    /// The last of them done: everything dirty when it was asked is in the backing directory.
    #[serde(default)]
    pub flush_done: u64,
    /// Where `--metrics` serves the counters (the port the system chose for `:0`).
    #[serde(default)]
    pub metrics_addr: Option<String>,
    /// A striped mount: how many cache servers the data counters above add up (0: the mount's
    /// own cache).
    #[serde(default)]
    pub servers: u32,
}

impl FsStats {
    /// A striped mount's counters: the mount's own identity, and the data counters of its
    /// servers added up (the job's cache is all of them). Rates and the hit ratio are those of
    /// the sums; the write window is the sum of the servers' (each keeps its own).
    pub fn striped(mut self, servers: &[FsStats]) -> FsStats {
        let sum = |f: fn(&FsStats) -> u64| servers.iter().map(f).sum::<u64>();
        self.capacity_bytes = sum(|s| s.capacity_bytes);
        self.used_bytes = sum(|s| s.used_bytes);
        self.dirty_bytes = sum(|s| s.dirty_bytes);
        self.cached_files = sum(|s| s.cached_files);
        self.read_hit_bytes = sum(|s| s.read_hit_bytes);
        self.read_miss_bytes = sum(|s| s.read_miss_bytes);
        let reads = self.read_hit_bytes + self.read_miss_bytes;
        self.hit_ratio = if reads == 0 {
            0.0
        } else {
            self.read_hit_bytes as f64 / reads as f64
        };
        self.written_bytes = sum(|s| s.written_bytes);
        self.copy_up_bytes = sum(|s| s.copy_up_bytes);
        self.copy_up_read_bytes = sum(|s| s.copy_up_read_bytes);
        self.copy_up_preload_bytes = sum(|s| s.copy_up_preload_bytes);
        self.read_ahead_bytes = sum(|s| s.read_ahead_bytes);
        self.writeback_bytes = sum(|s| s.writeback_bytes);
        self.writeback_errors = sum(|s| s.writeback_errors);
        self.evicted_extents = sum(|s| s.evicted_extents);
        self.evicted_bytes = sum(|s| s.evicted_bytes);
        self.edquot_writes += sum(|s| s.edquot_writes);
        self.efbig_writes += sum(|s| s.efbig_writes);
        self.window_used_bytes = sum(|s| s.window_used_bytes);
        self.window_limit_bytes = sum(|s| s.window_limit_bytes);
        self.window_left_secs = servers
            .iter()
            .map(|s| s.window_left_secs)
            .fold(f64::INFINITY, f64::min);
        if !self.window_left_secs.is_finite() {
            self.window_left_secs = 0.0;
        }
        self.revalidated_files = sum(|s| s.revalidated_files);
        self.conflicting_files = sum(|s| s.conflicting_files);
        self.policy_errors += sum(|s| s.policy_errors);
        let up = self.uptime_secs.max(1e-9);
        self.copy_up_rate = self.copy_up_bytes as f64 / up;
        self.writeback_rate = self.writeback_bytes as f64 / up;
        if let Some(s) = servers.first() {
            self.evict_policy.clone_from(&s.evict_policy);
            self.writeback_policy.clone_from(&s.writeback_policy);
        }
        self.servers = servers.len() as u32;
        self
    }
}
