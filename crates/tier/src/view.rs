//! What a cache tells its policy, and what the policy's answer means for the cache.

use pliant_policy::{Decision, Metrics, ServerId};

/// A cache at the end of a decision interval, as its policy sees it.
///
/// Counters (`hits`, `misses`) are totals since the cache started; rates are over the interval
/// that just ended. Metrics that only some caches can report are options: a simulator has no
/// CPU, so its policies see `cpu_load_avg` as `nil`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CacheView {
    /// Seconds since the run began (virtual time in a simulation).
    pub t: f64,
    /// Keys held.
    pub keys: u64,
    /// Bytes held.
    pub bytes: u64,
    /// The capacity, in the cache's own unit (keys for the policy-sized caches, whose `howmuch`
    /// counts keys).
    pub capacity: u64,
    /// Hits so far.
    pub hits: u64,
    /// Misses so far.
    pub misses: u64,
    /// Reads per second in the interval.
    pub reads_per_s: f64,
    /// Writes (puts) per second in the interval.
    pub writes_per_s: f64,
    /// Misses per second in the interval.
    pub misses_per_s: f64,
    /// Requests waiting for the tier above (misses in flight), where the cache has one.
    pub queue_len: Option<f64>,
    /// The host's one-minute load average, where the cache runs on a real host.
    pub cpu_load_avg: Option<f64>,
    /// Clients the cache serves (a WorkManager's workers; a service's connected clients), where
    /// the cache knows them: what a stalled read costs is a share of their time.
    pub clients: Option<f64>,
    /// Reads per second in the interval sent to the tier above (the store's traffic: misses,
    /// a coalesced fetch once), where there is one.
    pub fetches_per_s: Option<f64>,
    /// Puts per second in the interval of keys the cache did not hold (first-time puts: a
    /// ParSplice WorkManager's new states), where the cache tells them apart.
    pub new_keys_per_s: Option<f64>,
    /// The application's progress so far, in its own unit (a ParSplice run's trajectory, ps; what
    /// a service's clients report with `PLIANT.PROGRESS`), where it is given one: what a cache
    /// policy is for, which a hit rate only stands for.
    pub progress: Option<f64>,
    /// Progress per second in the interval.
    pub progress_per_s: Option<f64>,
}

/// One metric a policy sees about its cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricInfo {
    /// The name in `servers[whoami][name]`.
    pub name: &'static str,
    /// The Ceph Mantle metric of the same name and sense, if there is one: a Mantle policy
    /// written for Ceph's metadata servers reads these unchanged.
    pub mantle: bool,
}

/// How many metrics a [`CacheView`] can give.
const N: usize = 16;

/// Every metric a [`CacheView`] can give a policy, in the order it sets them.
pub const METRICS: [MetricInfo; N] = [
    ours("keys"),
    ours("bytes"),
    ours("capacity"),
    ours("hits"),
    ours("misses"),
    ours("reads_per_s"),
    ours("writes_per_s"),
    ours("misses_per_s"),
    mantle("req_rate"),
    mantle("queue_len"),
    mantle("cpu_load_avg"),
    ours("clients"),
    ours("fetches_per_s"),
    ours("new_keys_per_s"),
    ours("progress"),
    ours("progress_per_s"),
];

/// A metric of Pliant's own (its meaning: the [`CacheView`] field of the same name).
const fn ours(name: &'static str) -> MetricInfo {
    MetricInfo {
        name,
        mantle: false,
    }
}

/// A metric under Ceph Mantle's name and in its sense.
const fn mantle(name: &'static str) -> MetricInfo {
    MetricInfo { name, mantle: true }
}

impl CacheView {
    /// The values of [`METRICS`], in that order; `None` for a metric this cache cannot report.
    pub fn values(&self) -> [Option<f64>; N] {
        [
            Some(self.keys as f64),
            Some(self.bytes as f64),
            Some(self.capacity as f64),
            Some(self.hits as f64),
            Some(self.misses as f64),
            Some(self.reads_per_s),
            Some(self.writes_per_s),
            Some(self.misses_per_s),
            Some(self.reads_per_s + self.writes_per_s),
            self.queue_len,
            self.cpu_load_avg,
            self.clients,
            self.fetches_per_s,
            self.new_keys_per_s,
            self.progress,
            self.progress_per_s,
        ]
    }

    /// The view as the metrics of server `whoami`, alone.
    pub fn metrics(&self, whoami: impl Into<ServerId>) -> Metrics {
        let whoami = whoami.into();
        let mut m = Metrics::new(whoami.clone());
        self.write_to(&mut m, whoami);
        m
    }

    /// Updates server `id`'s metrics in place (a service keeps one [`Metrics`] across decisions,
    /// which is what lets the engine refresh only what changed). A metric this cache cannot
    /// report now is absent, so a policy sees `nil`, never a value from an earlier interval.
    pub fn write_to(&self, m: &mut Metrics, id: impl Into<ServerId>) {
        let id = id.into();
        for (info, v) in METRICS.iter().zip(self.values()) {
            m.set(id.clone(), info.name, v.unwrap_or(f64::NAN));
        }
    }

    /// The capacity a decision asks for, if it differs from the current one: `when` true and a
    /// `howmuch` amount, in the cache's unit; a negative amount means empty.
    pub fn new_capacity(&self, d: &Decision) -> Option<u64> {
        if !d.when {
            return None;
        }
        let n = d.howmuch.as_ref()?.amount()?;
        self.resize_to(n.max(0.0) as u64)
    }

    /// `target`, if it differs from the current capacity.
    pub fn resize_to(&self, target: u64) -> Option<u64> {
        (target != self.capacity).then_some(target)
    }
}
