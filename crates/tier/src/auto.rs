//! The `auto` policy: the cache absorbs everything while the run is in its opening regime, then
//! keeps the keys whose loss would cost more than the run's efficiency objective allows. Both
//! decisions come from what the run has shown so far; no key count, window or date is set by
//! hand.
//!
//! # When to stop absorbing: the run has left its opening regime
//!
//! At each decision the policy records the interval's behaviour as two features, both logarithms
//! so that they share a unit (a factor of e) and a distance can add them:
//!
//! - **reads per second**: ParSplice opens with a flash crowd, every worker reading the few
//!   initial states, and the read rate falls as the run spreads out;
//! - **distinct keys read per second**: the crowd reads few keys many times; exploration reads
//!   many, a few times each.
//!
//! The new-key rate is left out although it is behaviour too: new keys come in bursts whenever
//! the trajectory enters a superbasin, so clustering on it separates bursts from lulls, not
//! phases. Time is left out on purpose: with time as a coordinate (the studies' k-means) the
//! history is cut into slices of the clock whatever the run does, which is why the old `auto`
//! armed at its first allowed fit in every run.
//!
//! The intervals so far are clustered by [`pliant_regime::cluster`], k (one included) by the gap
//! statistic. The policy arms once the latest interval lies in a regime other than the opening
//! one (the first interval's) and that regime reads less: the crowd is over. Until then the run
//! shows one regime, or is back in the first, and the cache keeps absorbing. Fits are made each
//! time the history has grown by a sixteenth, so their cost stays near linear in the run's length
//! and the gate opens at most a sixteenth of the elapsed time late; once armed, no more fits.
//!
//! # How much to keep: the working set for an efficiency objective
//!
//! Armed, the cache keeps the keys read or put in the last `W` seconds (LRU order keeps exactly
//! those).
//! `W` is derived at every decision from what the run has measured:
//!
//! - the **reuse time** of every read of a key read or put before (seconds since that key's
//!   previous access): a window `W` would have missed the rereads that came later than `W`;
//! - the **fetch time**: the mean seconds a miss waited for its value from above
//!   ([`Auto::on_wait`]);
//! - the **clients** the cache serves ([`CacheView::clients`], a WorkManager's workers).
//!
//! A missed reread costs its reader the fetch time, and every read of the same key during that
//! fetch joins it and waits for the rest: a miss of the state all workers are about to read
//! stalls them all. So each reread that starts a burst (comes later than one fetch time after
//! the burst before) is charged a fetch time, and each read inside a burst the remainder of the
//! burst's fetch, both in the log-histogram bucket ([`BUCKETS_PER_OCTAVE`]) of the burst's
//! reuse time. A window `W` would have cost the charges of the buckets above `W`. (Counting
//! rereads alone, without the bursts, undercounts the waits: every read that joins a fetch
//! waits too. The variants tried while designing this were not kept, so no figure of them is
//! given here; docs/benchmarks.md lists what was removed and why.)
//!
//! The allowance is `1 − efficiency` of the clients' time, `clients × t`. The policy also
//! measures what it actually spends: the waits of fetches of keys the cache had held, of the
//! reads that joined them, and of reads of values that arrived late because a miss had delayed
//! the client producing them ([`Auto::on_late_put`]; they are part of what a miss costs, though
//! no read of the cache waited for them). `W` is the shortest window whose charges over the
//! priced period (since the first fetch gave a price) stay within the allowed cost rate times
//! that period; the rate is the sustainable one plus the unspent allowance spread over a time as
//! long as the run so far (an integral controller whose gain needs no constant). Charges are a
//! history, and when the run moves on to longer reuse times the spending overtakes them: once
//! the run has spent its whole allowance, the window is the longest reuse time seen until it is
//! back under.
//!
//! The efficiency objective is the user's ([`Auto::with_efficiency`]; [`EFFICIENCY`] by
//! default), the one number `auto` is given: it says how much throughput memory may cost, as a
//! capacity does for a fixed cache, and unlike a window it means the same in every run. Before
//! the first fetch there is no price, and the window is the longest reuse time seen: every key
//! that a reread says may come back is kept.
//!
//! # What a miss risks beyond its wait: the store reads the trims cause
//!
//! A missed reread also reads the tier above, and there a read may find nothing: in the
//! measured ParSplice runs a state the store never got stopped the whole run when a trimmed
//! cache read it back (`pliant_parsplice::model::LOST_SHARE`). No fetch time prices that. So
//! the policy also counts the fetches of keys the cache had held, over spans of at least
//! `1 / CAUSED_FETCH_SHARE` reads (the fewest that can show that share); where they pass
//! [`CAUSED_FETCH_SHARE`] of a span's reads, the window's floor becomes twice the window that
//! caused them (and never falls back): the policy backs off until its trims make the tier above
//! serve (almost) nothing the cache held.
//!
//! A cache counts keys, not seconds, so the policy keeps the window by trimming: at each
//! decision it asks the tier to evict down to the keys read or put within `W`
//! ([`crate::Resize::Trim`]), and the cache takes new keys freely until the next decision.
//!
//! It lives here rather than in the ParSplice simulator because a live tier runs it the same way:
//! it sees reads ([`Auto::on_read`]), waits ([`Auto::on_wait`]) and the tier's [`CacheView`] at
//! each decision, nothing else.

use std::collections::HashMap;

use crate::CacheView;

/// The efficiency `auto` keeps by default: the objective set for it (issue 10's goal, "≥ 96% of
/// the unlimited cache's efficiency"), a service level rather than a fitted number; the README
/// shows how memory and efficiency move with it.
pub const EFFICIENCY: f64 = 0.96;
/// How long the policy remembers a key it has not seen (seconds): a key not read or put for
/// longer is forgotten, with the count of its second, and its next read counts as a first
/// read. Only memory rides on it: a live node would otherwise keep every key it ever saw and a
/// counter for every second of its uptime. A day is longer than every run and trace here
/// (4.2 h at most) and than their longest reuse time (1,225 s), so none of their decisions
/// changes; a node's window can never be longer than this.
pub const HORIZON: f64 = 86_400.0;
/// Reuse-time histogram buckets per doubling (about 4.4% apart): the window's resolution.
pub const BUCKETS_PER_OCTAVE: f64 = 16.0;
/// The shortest reuse time the histogram tells apart, seconds (shorter ones share its first
/// bucket): below any decision interval.
const SHORTEST_REUSE: f64 = 1e-3;
/// Regimes the gate may find: the studies found four in ParSplice runs.
const MAX_REGIMES: usize = 4;
/// The share of an interval's reads that the tier above may serve for keys the cache had held
/// (rereads it missed: store traffic the trims caused) before the window's floor doubles: one
/// in 10,000. In the measured ParSplice runs LevelDB served no read in the hour before a trim
/// and 0.004–0.1% of the reads after one, and a read of a state the store never got stopped the
/// run (`pliant_parsplice::model::LOST_SHARE`): the fetch time a miss costs is not all it risks.
pub const CAUSED_FETCH_SHARE: f64 = 1e-4;

/// What `auto` has decided: where it armed, and the working set it keeps.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct AutoState {
    /// When the run left its opening regime and the policy armed, seconds.
    pub armed_at: f64,
    /// Regimes the gate found when it armed.
    pub regimes: usize,
    /// The window of the latest decision, seconds: keys read within it are kept.
    pub window_seconds: f64,
    /// The key count of the latest decision: the keys read or put within the window.
    pub target_keys: u64,
}

/// A fit the gate asks for: the decision intervals' features so far, to cluster.
#[derive(Debug, Clone)]
pub struct Fit {
    features: Vec<[f64; 2]>,
    seed: u64,
    t: f64,
}

impl Fit {
    /// Clusters the intervals (k from 1 to the regimes the studies found, by the gap statistic).
    pub fn run(self) -> Fitted {
        let clusters = pliant_regime::cluster(&self.features, MAX_REGIMES, self.seed);
        Fitted {
            features: self.features,
            clusters,
            t: self.t,
        }
    }
}

/// A fit that has run, for [`Auto::finish`].
#[derive(Debug)]
pub struct Fitted {
    features: Vec<[f64; 2]>,
    clusters: Result<pliant_regime::Clusters, pliant_regime::RegimeError>,
    t: f64,
}

/// The `auto` policy's state for one cache (see the module doc).
#[derive(Debug)]
pub struct Auto {
    seed: u64,
    efficiency: f64,
    /// `[ln reads/s, ln distinct keys read/s]` per decision interval, until armed.
    features: Vec<[f64; 2]>,
    fitted_at: usize,
    state: Option<AutoState>,
    /// Per key: its last access and read, and its current burst.
    keys: HashMap<u64, KeyReads, foldhash::fast::FixedState>,
    /// Keys by the whole second of their last access; the front is second `first_second`.
    by_second: std::collections::VecDeque<u32>,
    first_second: usize,
    /// Client seconds a miss of the rereads in each reuse-time bucket would cost (module doc).
    cost: Vec<f64>,
    longest_reuse: f64,
    /// The decision interval under way: when it began, and distinct keys read in it.
    interval_start: f64,
    distinct: u64,
    /// Seconds misses waited for their fetches, and the fetches.
    fetch_seconds: f64,
    fetches: u64,
    /// The latest time seen, and when the first fetch gave misses a price.
    now: f64,
    priced_since: Option<f64>,
    /// The latest read's key, and whether the key had been read or put before.
    last_key: u64,
    last_was_reread: bool,
    /// Client seconds actually lost to misses that an unlimited cache would not have had.
    spent: f64,
    /// Reads in the decision interval under way, and the fetches of keys the cache had held.
    reads: u64,
    caused: u64,
    /// The shortest window from now on: doubled whenever the trims made the tier above serve
    /// more than [`CAUSED_FETCH_SHARE`] of an interval's reads.
    floor: f64,
}

/// The count of `t`'s second in `by_second`, whose front is second `first`, growing it to reach.
/// A key's last access is never before the front: keys older than it are forgotten with their
/// seconds.
fn at_second(by_second: &mut std::collections::VecDeque<u32>, first: usize, t: f64) -> &mut u32 {
    let i = (t.max(0.0) as usize).saturating_sub(first);
    if by_second.len() <= i {
        by_second.resize(i + 1, 0);
    }
    &mut by_second[i]
}

/// One key's reads, as the window's pricing needs them.
#[derive(Debug, Clone, Copy)]
struct KeyReads {
    /// Its last access, a read or a put (what LRU order goes by).
    last: f64,
    /// Its last read (`-inf` for a key only put so far).
    last_read: f64,
    burst_start: f64,
    /// Reuse-time bucket of the read that began the burst; `None` for a key's first burst, whose
    /// miss no cache could save.
    burst_bucket: Option<u32>,
    /// Until when a fetch that only a trim caused is under way (readers who join it lose too).
    lost_until: f64,
}

impl Auto {
    /// A policy that has seen nothing, for the default [`EFFICIENCY`]; `seed` seeds its k-means.
    pub fn new(seed: u64) -> Self {
        Self::with_efficiency(seed, EFFICIENCY)
    }

    /// [`new`](Self::new) for another efficiency objective, in (0, 1].
    pub fn with_efficiency(seed: u64, efficiency: f64) -> Self {
        Self {
            seed,
            efficiency: efficiency.clamp(f64::MIN_POSITIVE, 1.0),
            features: Vec::new(),
            fitted_at: 0,
            state: None,
            keys: HashMap::with_hasher(foldhash::fast::FixedState::with_seed(4)),
            by_second: std::collections::VecDeque::new(),
            first_second: 0,
            cost: Vec::new(),
            longest_reuse: 0.0,
            interval_start: 0.0,
            distinct: 0,
            fetch_seconds: 0.0,
            fetches: 0,
            now: 0.0,
            priced_since: None,
            last_key: 0,
            last_was_reread: false,
            spent: 0.0,
            reads: 0,
            caused: 0,
            floor: 0.0,
        }
    }

    /// Sees one read of `key` at time `t` (seconds), whatever it found.
    #[inline]
    pub fn on_read(&mut self, t: f64, key: u64) {
        self.now = t;
        self.reads += 1;
        *self.second(t) += 1;
        let fetch = self.fetch_time().unwrap_or(0.0);
        let Some(k) = self.keys.get_mut(&key) else {
            self.keys.insert(
                key,
                KeyReads {
                    last: t,
                    last_read: t,
                    burst_start: t,
                    burst_bucket: None,
                    lost_until: f64::NEG_INFINITY,
                },
            );
            self.distinct += 1;
            (self.last_key, self.last_was_reread) = (key, false);
            return;
        };
        let (prev, gap) = (k.last, t - k.last);
        (self.last_key, self.last_was_reread) = (key, true);
        k.last = t;
        *at_second(&mut self.by_second, self.first_second, prev) -= 1;
        if k.last_read < self.interval_start {
            self.distinct += 1;
        }
        k.last_read = t;
        self.longest_reuse = self.longest_reuse.max(gap);
        let (b, charge) = if t - k.burst_start < fetch {
            // Inside the burst: had its first read missed, this one waits for the rest.
            (k.burst_bucket, fetch - (t - k.burst_start))
        } else {
            let b = bucket(gap) as u32;
            (k.burst_start, k.burst_bucket) = (t, Some(b));
            (Some(b), fetch)
        };
        if let Some(b) = b.map(|b| b as usize) {
            if self.cost.len() <= b {
                self.cost.resize(b + 1, 0.0);
            }
            self.cost[b] += charge;
        }
    }

    /// The count of keys last accessed in `t`'s second, growing the record to it and, once it
    /// spans two horizons, forgetting what is older than one.
    fn second(&mut self, t: f64) -> &mut u32 {
        let sec = t.max(0.0) as usize;
        if sec >= self.first_second + 2 * HORIZON as usize {
            self.forget_before(sec - HORIZON as usize);
        }
        at_second(&mut self.by_second, self.first_second, t)
    }

    /// Forgets the keys last accessed before second `cut`, and those seconds.
    fn forget_before(&mut self, cut: usize) {
        self.keys.retain(|_, k| k.last.max(0.0) as usize >= cut);
        let drop = cut
            .saturating_sub(self.first_second)
            .min(self.by_second.len());
        self.by_second.drain(..drop);
        self.first_second = cut;
    }

    /// The mean seconds a miss has waited for its fetch, once one has.
    fn fetch_time(&self) -> Option<f64> {
        (self.fetches > 0).then(|| self.fetch_seconds / self.fetches as f64)
    }

    /// Sees a put of `key` at `t`: the cache holds it from then on, so for LRU order and for
    /// the reuse time of its next read the put counts as an access.
    #[inline]
    pub fn on_put(&mut self, t: f64, key: u64) {
        *self.second(t) += 1;
        match self.keys.get_mut(&key) {
            Some(k) => {
                let prev = std::mem::replace(&mut k.last, t);
                *at_second(&mut self.by_second, self.first_second, prev) -= 1;
            }
            None => {
                self.keys.insert(
                    key,
                    KeyReads {
                        last: t,
                        last_read: f64::NEG_INFINITY,
                        burst_start: t,
                        burst_bucket: None,
                        lost_until: f64::NEG_INFINITY,
                    },
                );
            }
        }
    }

    /// Sees a read that waited `seconds` for a fetch from above: one it started (`fetched`, a
    /// miss) or one it joined. The wait belongs to the latest read [`on_read`](Self::on_read)
    /// saw, so it comes right after that read's `on_read`, as the simulator calls them (the
    /// simulator knows a fetch's end when it starts; a service that learns it later will need the
    /// key passed here).
    #[inline]
    pub fn on_wait(&mut self, seconds: f64, fetched: bool) {
        // A join's wait is priced by the bursts (module doc); the fetch time is the misses'.
        let seconds = seconds.max(0.0);
        if fetched {
            self.fetch_seconds += seconds;
            self.fetches += 1;
            self.priced_since.get_or_insert(self.now);
        }
        // The wait was the policy's doing if the fetch was of a key the cache had held: the
        // read that started it was a reread, or it joined such a fetch.
        if let Some(k) = self.keys.get_mut(&self.last_key) {
            if fetched && self.last_was_reread {
                k.lost_until = self.now + seconds;
                self.caused += 1;
            }
            if k.lost_until > self.now || (fetched && self.last_was_reread) {
                self.spent += seconds;
            }
        }
    }

    /// Sees a read that waited `seconds` for a value that a client was still producing, late
    /// because misses delayed that client: a miss costs its own wait and, downstream, the waits
    /// of every reader of what the delayed client produces. The cache cannot tell which of its
    /// misses caused the delay, so the wait is spent without a bucket to charge.
    #[inline]
    pub fn on_late_put(&mut self, seconds: f64) {
        self.spent += seconds.max(0.0);
    }

    /// The key count to trim to, once armed (the cache takes new keys again until the next
    /// decision: the trim is how a window is kept by a cache that counts keys); `None` while the
    /// cache should go on absorbing. [`begin`](Self::begin), the gate's fit, then
    /// [`finish`](Self::finish).
    pub fn decide(&mut self, v: &CacheView) -> Option<u64> {
        let fitted = self.begin(v).map(Fit::run);
        self.finish(v, fitted)
    }

    /// The first, quick step of a decision at `v`: records the interval that ended and says
    /// whether the gate wants a fit. A live cache runs the fit ([`Fit::run`], a k-means with its
    /// gap statistic) without holding what its readers need, then [`finish`](Self::finish)es.
    pub fn begin(&mut self, v: &CacheView) -> Option<Fit> {
        let dt = v.t - self.interval_start;
        let mut fit = None;
        if self.state.is_none() && dt > 0.0 {
            let distinct = self.distinct as f64 / dt;
            self.features
                .push([v.reads_per_s.max(0.0).ln_1p(), distinct.ln_1p()]);
            fit = self.due_fit(v.t);
        }
        self.interval_start = v.t;
        self.distinct = 0;
        fit
    }

    /// The decision at `v` once the gate's fit, if it asked for one, has run: arms if the fit
    /// says the run has left its opening regime, then sizes the window (see the module doc).
    pub fn finish(&mut self, v: &CacheView, fitted: Option<Fitted>) -> Option<u64> {
        if let Some(f) = fitted {
            self.arm_if(f);
        }
        // Judged once the reads since the last judgement could show the share (1 / the share of
        // them), so that one miss in a quiet interval is not read as a rate.
        let judged = self.reads as f64 * CAUSED_FETCH_SHARE >= 1.0;
        let caused = judged && self.caused as f64 > CAUSED_FETCH_SHARE * self.reads as f64;
        if judged || self.state.is_none() {
            (self.reads, self.caused) = (0, 0);
        }
        let before = self.state?.window_seconds;
        if caused && before.is_finite() {
            // The window just kept made the tier above serve rereads: a longer one from now on.
            self.floor = 2.0 * before.max(self.floor);
        }
        let window = match self.priced_since {
            Some(since) => {
                let per_second = (1.0 - self.efficiency) * v.clients.unwrap_or(1.0).max(1.0);
                // The cost rate allowed: the sustainable one, plus what the run has left unspent
                // of its allowance so far (or minus what it overspent), spread over a time as long
                // as the run so far.
                let unspent = per_second * v.t - self.spent;
                let rate = per_second + unspent / v.t;
                // Overspent (the run's reuse times moved past what the histogram knew): keep
                // everything a reread may come back for until the allowance has caught up.
                if unspent <= 0.0 {
                    self.longest_reuse
                } else {
                    window(&self.cost, self.longest_reuse, rate * (v.t - since))
                }
            }
            None => self.longest_reuse,
        }
        .max(self.floor);
        let since = ((v.t - window).max(0.0) as usize).saturating_sub(self.first_second);
        let target: u64 = self
            .by_second
            .range(since.min(self.by_second.len())..)
            .map(|&n| u64::from(n))
            .sum();
        let s = self.state.as_mut()?;
        s.window_seconds = window;
        s.target_keys = target.max(1);
        Some(s.target_keys)
    }

    /// A fit of the intervals so far, when they have grown by a sixteenth since the last one.
    fn due_fit(&mut self, t: f64) -> Option<Fit> {
        let n = self.features.len();
        if n < self.fitted_at + self.fitted_at.div_ceil(16).max(1) {
            return None;
        }
        self.fitted_at = n;
        Some(Fit {
            features: self.features.clone(),
            seed: self.seed,
            t,
        })
    }

    /// Arms if the fit's latest interval lies in a quieter regime than the first.
    fn arm_if(&mut self, f: Fitted) {
        let Ok(c) = f.clusters else {
            return;
        };
        let n = f.features.len();
        let last = c.labels[n - 1];
        if c.k < 2 || last == 0 {
            return;
        }
        let mean_rate = |label: usize| {
            let (sum, count) = f
                .features
                .iter()
                .zip(&c.labels)
                .filter(|(_, l)| **l == label)
                .fold((0.0, 0.0), |(s, n), (x, _)| (s + x[0], n + 1.0));
            sum / count
        };
        if mean_rate(last) < mean_rate(0) {
            self.state = Some(AutoState {
                armed_at: f.t,
                regimes: c.k,
                window_seconds: f64::NAN,
                target_keys: 0,
            });
            self.features = Vec::new();
        }
    }

    /// What it has decided so far; `None` while absorbing.
    pub fn state(&self) -> Option<AutoState> {
        self.state
    }
}

/// The histogram bucket of a reuse time.
fn bucket(gap: f64) -> usize {
    if gap <= SHORTEST_REUSE {
        0
    } else {
        1 + ((gap / SHORTEST_REUSE).log2() * BUCKETS_PER_OCTAVE) as usize
    }
}

/// The upper edge of bucket `b`, seconds.
fn bucket_top(b: usize) -> f64 {
    SHORTEST_REUSE * (b as f64 / BUCKETS_PER_OCTAVE).exp2()
}

/// The shortest window (a bucket edge) whose later rereads cost at most `allowed` client
/// seconds, given what a miss of each bucket's rereads costs; never past the `longest` reuse
/// time seen.
fn window(cost: &[f64], longest: f64, allowed: f64) -> f64 {
    let mut later = 0.0;
    for b in (0..cost.len()).rev() {
        if later + cost[b] > allowed {
            return bucket_top(b).min(longest);
        }
        later += cost[b];
    }
    0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_running_for_days_remembers_one_horizon_of_keys() {
        let mut a = Auto::new(1);
        // A new key every second for five days, each read twice a minute apart.
        let days = 5.0;
        let mut t = 0.0;
        let mut key = 0u64;
        while t < days * 86_400.0 {
            a.on_read(t, key);
            if key >= 60 {
                a.on_read(t + 0.5, key - 60);
            }
            key += 1;
            t += 1.0;
        }
        // Forgotten in steps of a horizon: what is remembered was touched within two horizons
        // (one key a second, and the 60 rereads a minute behind), and all that was touched
        // within one is.
        assert!(a.keys.values().all(|k| k.last >= t - 2.0 * HORIZON));
        assert!(
            a.keys.len() <= 2 * HORIZON as usize + 60,
            "{} keys",
            a.keys.len()
        );
        assert!(a.keys.len() >= HORIZON as usize, "{} keys", a.keys.len());
        assert!(a.by_second.len() <= 2 * HORIZON as usize + 1);
        let counted: u64 = a.by_second.iter().map(|&n| u64::from(n)).sum();
        assert_eq!(
            counted,
            a.keys.len() as u64,
            "every remembered key in one second"
        );
        // A key forgotten a day ago reads as new: its reuse time is not learned.
        assert_eq!(a.longest_reuse, 60.5);
        a.on_read(t, 0);
        assert_eq!(a.longest_reuse, 60.5);
    }

    #[test]
    fn buckets_cover_their_reuse_times() {
        for gap in [1e-4, 1e-3, 0.5, 1.0, 299.0, 300.0, 1e4] {
            let b = bucket(gap);
            assert!(
                gap <= bucket_top(b) * (1.0 + 1e-12),
                "{gap} above bucket {b}"
            );
            if b > 0 {
                assert!(
                    gap > bucket_top(b - 1) * (1.0 - 1e-12),
                    "{gap} below bucket {b}"
                );
            }
        }
    }

    #[test]
    fn the_window_is_the_shortest_whose_late_rereads_fit_the_budget() {
        let mut cost = vec![0.0; bucket(1000.0) + 1];
        cost[bucket(1.0)] = 1000.0;
        cost[bucket(100.0)] = 10.0;
        cost[bucket(1000.0)] = 1.0;
        // 20 s allowed: the rereads at 100 s and 1,000 s (11 s) may miss, those at 1 s may not.
        assert_eq!(window(&cost, 1000.0, 20.0), bucket_top(bucket(1.0)));
        // 8 s: only the one at 1,000 s may miss.
        assert_eq!(window(&cost, 1000.0, 8.0), bucket_top(bucket(100.0)));
        // Nothing may miss: the window reaches the longest reuse time.
        assert_eq!(window(&cost, 1000.0, 0.5), 1000.0);
        // Everything may miss.
        assert_eq!(window(&cost, 1000.0, 1e6), 0.0);
    }

    /// A hot key's reads during a fetch are charged to the burst's first read: a window that
    /// would miss it stalls them all.
    #[test]
    fn reads_during_a_fetch_are_charged_to_the_burst() {
        let mut a = Auto::new(1);
        a.on_wait(2.0, true); // fetches take 2 s
        a.on_read(0.0, 7); // first read: no cache could save it
        a.on_read(100.0, 7); // a reread 100 s later begins a burst: 2 s
        a.on_read(100.5, 7); // joins it: 1.5 s
        a.on_read(101.0, 7); // 1 s
        a.on_read(103.0, 7); // after the fetch: a burst of its own, reuse time 2 s
        let b100 = bucket(100.0);
        assert_eq!(a.cost[b100], 4.5);
        assert_eq!(a.cost[bucket(2.0)], 2.0);
        assert_eq!(a.cost.iter().sum::<f64>(), 6.5);
    }

    /// Waits for values that misses made late count against the allowance like the misses' own
    /// waits: a run whose late puts overspend it keeps every key a reread may come back for.
    #[test]
    fn late_puts_are_spent_like_misses() {
        let decide = |late: f64| {
            let mut a = Auto::new(1);
            a.state = Some(AutoState {
                armed_at: 0.0,
                regimes: 2,
                window_seconds: f64::NAN,
                target_keys: 0,
            });
            a.on_read(0.0, 1);
            a.on_wait(1.0, true); // the first read missed: fetches take 1 s, prices from t = 0
            // Ten keys reread once each after 500 s (10 client-s if missed); a hot key reread
            // every second (1 client-s a miss).
            for k in 10..20 {
                a.on_read(k as f64, k);
                a.on_read(500.0 + k as f64, k);
            }
            for s in 1..1000 {
                a.on_read(f64::from(s), 1);
            }
            a.on_late_put(late);
            let v = CacheView {
                t: 1000.0,
                clients: Some(1.0),
                ..CacheView::default()
            };
            a.decide(&v);
            a.state.expect("armed").window_seconds
        };
        // Allowed: 4% of 1,000 client-s, 40 s: the slow rereads may miss, the hot key may not.
        let unhurried = decide(0.0);
        assert!((1.0..2.0).contains(&unhurried), "{unhurried}");
        // 50 s of late puts overspend it: the window reaches the longest reuse time.
        let overspent = decide(50.0);
        assert!((500.0..=501.0).contains(&overspent), "{overspent}");
    }
    /// Rereads the trims made the tier above serve raise the window's floor for good: doubled
    /// from the window that caused them where they pass [`CAUSED_FETCH_SHARE`] of a span of at
    /// least 1 / that share reads, and left as it is where they do not; a span too short to show
    /// the share carries over.
    #[test]
    fn store_reads_the_trims_caused_double_the_window_floor() {
        let mut a = Auto::new(1);
        a.state = Some(AutoState {
            armed_at: 0.0,
            regimes: 2,
            window_seconds: 3.0,
            target_keys: 1,
        });
        let view = |t| CacheView {
            t,
            clients: Some(1.0),
            ..CacheView::default()
        };
        // `n` reads of one hot key between `t` and `t + 1`.
        let hot = |a: &mut Auto, t: f64, n: u32| {
            for i in 0..n {
                a.on_read(t + f64::from(i) / f64::from(n), 1);
            }
        };
        // Three rereads of keys the cache had held miss among 20,000 reads: 0.015%.
        for k in [7, 8, 9] {
            a.on_read(0.0, k);
        }
        hot(&mut a, 1.0, 20_000);
        for k in [7, 8, 9] {
            a.on_read(5.0, k);
            a.on_wait(1.0, true);
        }
        a.decide(&view(10.0));
        assert_eq!(a.floor, 6.0, "twice the window that missed");
        assert!(a.state.expect("armed").window_seconds >= 6.0);
        // 20,000 reads without such a miss leave the floor where it is.
        hot(&mut a, 11.0, 20_000);
        a.decide(&view(20.0));
        assert_eq!(a.floor, 6.0);
        // One such miss among 1,000 reads is too few reads to judge: it carries over...
        a.on_read(21.0, 8);
        a.on_wait(1.0, true);
        hot(&mut a, 22.0, 1_000);
        a.decide(&view(30.0));
        assert_eq!(a.floor, 6.0, "not judged yet");
        // ...and with a second among the next 9,000 the span shows 2 in 10,002: over the share.
        a.on_read(31.0, 9);
        a.on_wait(1.0, true);
        hot(&mut a, 32.0, 9_000);
        let before = a.state.expect("armed").window_seconds;
        a.decide(&view(40.0));
        assert_eq!(a.floor, 2.0 * before.max(6.0));
        // A first read that missed is no reread: nothing the trims caused.
        let floor = a.floor;
        a.on_read(41.0, 500);
        a.on_wait(1.0, true);
        hot(&mut a, 42.0, 20_000);
        a.decide(&view(50.0));
        assert_eq!(a.floor, floor);
    }
}
