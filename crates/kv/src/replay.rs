//! Replaying a trace against any Redis-protocol server (Pliant or Redis): reads as GET, writes
//! as SET of a value of the record's size, deletions as DEL, from N clients with P requests in
//! flight each.
//!
//! In look-aside mode a GET that finds nothing is followed by a SET of the key, as a look-aside
//! client does on a miss. In read-through mode the server fetches what its memory misses (a
//! Pliant node from its store) and keeps it, and the client writes only what the trace writes.
//! With one client, no pipelining and a Pliant node over a store, the node's memory-tier misses
//! are then exactly those of `pliant sim` over the same trace and cache, for a trace that writes
//! every key before reading it (a GET is an access that keeps what it missed, a SET a put).
//!
//! Records go to clients by key, so each key's requests keep their trace order. Keys are the
//! records' ids in decimal.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, sync_channel};
use std::time::{Duration, Instant};

use pliant_proto::client::{Client, ClientError};
use pliant_proto::frame::Frame;
use pliant_trace::{Op, Record, TraceError};

/// What the client does when a GET finds nothing (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The client writes what it missed, as a look-aside cache's client does.
    LookAside,
    /// The server fetches misses itself (a Pliant node with a store or a parent).
    ReadThrough,
}

/// How fast requests are sent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pace {
    /// As fast as the server answers.
    Unlimited,
    /// The trace's own clock, `x` times faster.
    Speed(f64),
    /// At most this many requests a second over all clients.
    MaxRate(f64),
}

/// A replay's settings.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// The server, `host:port`.
    pub server: String,
    /// Its password, if it wants one.
    pub password: Option<String>,
    /// Connections, each with its share of the keys.
    pub clients: usize,
    /// Requests each client sends before reading their replies.
    pub pipeline: usize,
    /// How fast.
    pub pace: Pace,
    /// What a miss leads to.
    pub mode: Mode,
}

/// Latency quantiles, microseconds (from a batch's send to each reply's arrival).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
}

/// What a replay did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ReplaySummary {
    /// Requests sent (the SETs that follow misses included).
    pub requests: u64,
    /// Trace records replayed.
    pub records: u64,
    /// GETs that found their key.
    pub hits: u64,
    /// GETs that did not.
    pub misses: u64,
    /// Seconds from the first request to the last reply.
    pub seconds: f64,
    /// Requests per second.
    pub ops_per_s: f64,
    /// Latency quantiles.
    pub latency_us: Latency,
    /// The server's `PLIANT.STATS` after the replay, if it is a Pliant node.
    pub server_stats: Option<serde_json::Value>,
}

/// Why a replay stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The trace could not be read.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// A connection failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The server answered a request with an error.
    #[error("{server} answered {command}: {message}")]
    Server {
        /// The server.
        server: String,
        /// The request, as text.
        command: String,
        /// Its error.
        message: String,
    },
    /// Settings that cannot work.
    #[error("{0}")]
    Options(String),
}

/// Whether the server at `addr` is a Pliant node (its `INFO server` says so).
pub fn is_pliant(addr: &str, password: Option<&str>) -> Result<bool, ClientError> {
    let mut c = Client::connect(addr, password)?;
    Ok(match c.call(&[b"INFO", b"server"])? {
        Frame::Bulk(b) | Frame::Verbatim(b) => b.windows(15).any(|w| w == b"pliant_version:"),
        _ => false,
    })
}

/// Replays `records` (see the module doc). `progress` is called with the records dispatched so
/// far, every few thousand.
pub fn replay(
    records: impl Iterator<Item = Result<Record, TraceError>>,
    opts: &ReplayOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<ReplaySummary, ReplayError> {
    if opts.clients == 0 || opts.pipeline == 0 {
        return Err(ReplayError::Options(
            "--clients and --pipeline must be at least 1".into(),
        ));
    }
    match opts.pace {
        Pace::Speed(x) | Pace::MaxRate(x) if !(x.is_finite() && x > 0.0) => {
            return Err(ReplayError::Options(format!(
                "a speed or rate must be a positive number, not {x}"
            )));
        }
        _ => {}
    }
    // Connect every client before the clock starts, so a refused password fails at once.
    let mut conns = Vec::with_capacity(opts.clients);
    for _ in 0..opts.clients {
        conns.push(Client::connect(&opts.server, opts.password.as_deref())?);
    }
    let start = Instant::now();
    let first_time = Arc::new(AtomicU64::new(u64::MAX));
    let sent = AtomicU64::new(0);
    let outcome = std::thread::scope(|scope| {
        let mut senders = Vec::with_capacity(opts.clients);
        let mut workers = Vec::with_capacity(opts.clients);
        for conn in conns {
            let (tx, rx) = sync_channel::<Record>(4096);
            senders.push(tx);
            let first_time = first_time.clone();
            workers.push(scope.spawn(move || Worker::new(conn, opts, start, first_time).run(&rx)));
        }
        let mut read_error = None;
        for r in records {
            match r {
                Ok(rec) => {
                    first_time
                        .compare_exchange(u64::MAX, rec.time, Ordering::Relaxed, Ordering::Relaxed)
                        .ok();
                    let n = sent.fetch_add(1, Ordering::Relaxed) + 1;
                    // A client that failed has dropped its receiver; its error is reported below.
                    if senders[(rec.key % opts.clients as u64) as usize]
                        .send(rec)
                        .is_err()
                    {
                        break;
                    }
                    if n.is_multiple_of(4096) {
                        progress(n);
                    }
                }
                Err(e) => {
                    read_error = Some(e);
                    break;
                }
            }
        }
        drop(senders);
        let results: Vec<Result<Tally, ReplayError>> = workers
            .into_iter()
            .map(|w| {
                w.join().unwrap_or_else(|_| {
                    Err(ReplayError::Options("a client thread panicked".into()))
                })
            })
            .collect();
        (read_error, results)
    });
    let (read_error, results) = outcome;
    if let Some(e) = read_error {
        return Err(e.into());
    }
    let seconds = start.elapsed().as_secs_f64();
    let mut total = Tally::default();
    for r in results {
        total.merge(r?);
    }
    progress(sent.load(Ordering::Relaxed));
    total.latencies.sort_unstable();
    let q = |p: f64| {
        let l = &total.latencies;
        if l.is_empty() {
            0.0
        } else {
            f64::from(l[((l.len() - 1) as f64 * p).round() as usize])
        }
    };
    let server_stats = if is_pliant(&opts.server, opts.password.as_deref())? {
        let mut c = Client::connect(&opts.server, opts.password.as_deref())?;
        match c.call(&[b"PLIANT.STATS"])? {
            Frame::Bulk(b) => serde_json::from_slice(&b).ok(),
            _ => None,
        }
    } else {
        None
    };
    Ok(ReplaySummary {
        requests: total.requests,
        records: total.records,
        hits: total.hits,
        misses: total.misses,
        seconds,
        ops_per_s: total.requests as f64 / seconds.max(1e-9),
        latency_us: Latency {
            p50: q(0.5),
            p99: q(0.99),
            p999: q(0.999),
        },
        server_stats,
    })
}

#[derive(Default)]
struct Tally {
    requests: u64,
    records: u64,
    hits: u64,
    misses: u64,
    latencies: Vec<u32>,
}

impl Tally {
    fn merge(&mut self, o: Tally) {
        self.requests += o.requests;
        self.records += o.records;
        self.hits += o.hits;
        self.misses += o.misses;
        self.latencies.extend(o.latencies);
    }
}

struct Worker<'a> {
    conn: Client,
    opts: &'a ReplayOptions,
    start: Instant,
    first_time: Arc<AtomicU64>,
    /// This client's position in its share, for `MaxRate`.
    index: u64,
    tally: Tally,
    value: Vec<u8>,
}

impl<'a> Worker<'a> {
    fn new(
        conn: Client,
        opts: &'a ReplayOptions,
        start: Instant,
        first_time: Arc<AtomicU64>,
    ) -> Self {
        Self {
            conn,
            opts,
            start,
            first_time,
            index: 0,
            tally: Tally::default(),
            value: Vec::new(),
        }
    }

    fn run(mut self, rx: &Receiver<Record>) -> Result<Tally, ReplayError> {
        let mut batch: Vec<Record> = Vec::with_capacity(self.opts.pipeline);
        loop {
            batch.clear();
            match rx.recv() {
                Ok(r) => batch.push(r),
                Err(_) => return Ok(self.tally),
            }
            while batch.len() < self.opts.pipeline {
                match rx.try_recv() {
                    Ok(r) => batch.push(r),
                    Err(_) => break,
                }
            }
            self.pace(&batch[0]);
            self.send(&batch)?;
        }
    }

    /// Waits until `r` may be sent.
    fn pace(&mut self, r: &Record) {
        let due = match self.opts.pace {
            Pace::Unlimited => return,
            Pace::Speed(x) => {
                let t0 = self.first_time.load(Ordering::Relaxed);
                Duration::from_secs_f64(r.time.saturating_sub(t0) as f64 / x)
            }
            Pace::MaxRate(rate) => {
                Duration::from_secs_f64(self.index as f64 * self.opts.clients as f64 / rate)
            }
        };
        let wait = due.saturating_sub(self.start.elapsed());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }

    fn send(&mut self, batch: &[Record]) -> Result<(), ReplayError> {
        let keys: Vec<String> = batch.iter().map(|r| r.key.to_string()).collect();
        let longest = batch.iter().map(|r| r.size as usize).max().unwrap_or(0);
        if self.value.len() < longest {
            self.value.resize(longest, b'x');
        }
        let commands: Vec<Vec<&[u8]>> = batch
            .iter()
            .zip(&keys)
            .map(|(r, k)| match r.op {
                Op::Get => vec![&b"GET"[..], k.as_bytes()],
                Op::Put => vec![&b"SET"[..], k.as_bytes(), &self.value[..r.size as usize]],
                Op::Delete => vec![&b"DEL"[..], k.as_bytes()],
            })
            .collect();
        let sent = Instant::now();
        let replies = self.conn.pipeline(&commands)?;
        let us = sent.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
        let mut refill: Vec<Vec<&[u8]>> = Vec::new();
        for ((r, k), reply) in batch.iter().zip(&keys).zip(replies) {
            self.tally.latencies.push(us);
            self.tally.requests += 1;
            self.tally.records += 1;
            self.index += 1;
            match reply {
                Frame::Error(message) => {
                    return Err(ReplayError::Server {
                        server: self.opts.server.clone(),
                        command: format!("{:?} {k}", r.op),
                        message,
                    });
                }
                Frame::Null if r.op == Op::Get => {
                    self.tally.misses += 1;
                    if self.opts.mode == Mode::LookAside {
                        refill.push(vec![
                            &b"SET"[..],
                            k.as_bytes(),
                            &self.value[..r.size as usize],
                        ]);
                    }
                }
                _ if r.op == Op::Get => self.tally.hits += 1,
                _ => {}
            }
        }
        if !refill.is_empty() {
            let sent = Instant::now();
            let replies = self.conn.pipeline(&refill)?;
            let us = sent.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
            for reply in replies {
                self.tally.latencies.push(us);
                self.tally.requests += 1;
                if let Frame::Error(message) = reply {
                    return Err(ReplayError::Server {
                        server: self.opts.server.clone(),
                        command: "SET after a miss".into(),
                        message,
                    });
                }
            }
        }
        Ok(())
    }
}
