//! The harness of the service's tests: a node served in this process, on its own runtime and
//! thread, on a loopback port chosen when it binds (after tokio-rs/mini-redis's tests/server.rs).
//! A test that needs a separate process (a kill, a signal, the binary's flags, its own memory)
//! belongs to crates/pliant/tests instead.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pliant_kv::config::Settings;
use pliant_kv::{Config, Node, Server};
use pliant_proto::{Client, Frame};

/// A node served on its own runtime, on a thread of its own; shut down when dropped.
pub(crate) struct Served {
    pub(crate) addr: SocketAddr,
    /// Where its Prometheus metrics are served, if they are.
    pub(crate) metrics: Option<SocketAddr>,
    pub(crate) node: Arc<Node>,
    /// Says when the serving thread has ended.
    ended: std::sync::mpsc::Receiver<()>,
}

impl Served {
    /// Binds `config` and serves it; fails the test if the node does not start within 30 s.
    pub(crate) fn start(config: Config) -> Self {
        let (tx, rx) = std::sync::mpsc::channel();
        let (ended_tx, ended) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // The runtime `pliant_kv::serve` would build: one thread (the default) or several.
            let rt = if config.threads == 1 {
                tokio::runtime::Builder::new_current_thread()
            } else {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                b.worker_threads(config.threads.max(2));
                b
            }
            .enable_all()
            .build()
            .expect("runtime");
            rt.block_on(async move {
                let server = Server::bind(&config).await.expect("bind");
                tx.send((
                    server.local_addr().expect("addr"),
                    server.metrics_addr(),
                    server.node(),
                ))
                .expect("send");
                server.run().await.expect("run");
            });
            drop(rt);
            let _ = ended_tx.send(());
        });
        let (addr, metrics, node) = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the node starts");
        Self {
            addr,
            metrics,
            node,
            ended,
        }
    }

    /// A pure cache (no store) on a loopback port of its own.
    pub(crate) fn cache() -> Self {
        Self::start(cache_config())
    }

    /// A node with the settings of `toml` (what `pliant serve --config` reads), served on a
    /// loopback port of its own.
    pub(crate) fn with(toml: &str) -> Self {
        Self::start(config(toml))
    }

    /// A connection without a password.
    pub(crate) fn client(&self) -> Client {
        Client::connect(&self.addr.to_string(), None).expect("connect")
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.node.shut_down();
        // Bounded: a node that does not stop is left behind rather than hanging the suite (the
        // test that dropped it has its answer already).
        if self.ended.recv_timeout(Duration::from_secs(30)).is_err() {
            eprintln!("the node on {} did not stop within 30 s", self.addr);
        }
    }
}

/// A pure cache on a loopback port chosen at bind time.
pub(crate) fn cache_config() -> Config {
    Config {
        bind: "127.0.0.1:0".parse().expect("addr"),
        store: None,
        threads: 2,
        ..Config::default()
    }
}

/// The settings of `toml` (as `pliant serve --config` reads them) resolved, bound to a loopback
/// port chosen at bind time on two threads. Without `store` or `no-store` it is a pure cache:
/// the default store directory is relative to the test's working directory.
pub(crate) fn config(toml: &str) -> Config {
    let settings: Settings = toml::from_str(toml).unwrap_or_else(|e| panic!("{toml}: {e}"));
    let has_store = settings.store.is_some() || settings.no_store.is_some();
    let mut config = settings.resolve().expect("settings");
    config.bind = "127.0.0.1:0".parse().expect("addr");
    config.threads = 2;
    if !has_store {
        config.store = None;
    }
    config
}

/// Runs one command; its reply.
pub(crate) fn call(c: &mut Client, args: &[&str]) -> Frame {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    c.call(&args).expect("reply")
}

/// Polls `PLIANT.STATS` (every 50 ms, at most 20 s) until `ok` holds of it; returns it.
pub(crate) fn stats_until(
    c: &mut Client,
    what: &str,
    ok: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let start = Instant::now();
    loop {
        let v: serde_json::Value = serde_json::from_str(&string(&call(c, &["PLIANT.STATS"])))
            .expect("PLIANT.STATS is JSON");
        if ok(&v) {
            return v;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{what}: {v}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The value of `field` in INFO `section` (`field:value`), as a number; fails if it is not there.
pub(crate) fn info_number(c: &mut Client, section: &str, field: &str) -> u64 {
    let info = string(&call(c, &["INFO", section]));
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no number {field} in INFO {section}: {info}"))
}

/// A reply that is text (a bulk, verbatim or simple string), as a string; fails otherwise.
pub(crate) fn string(f: &Frame) -> String {
    match f {
        Frame::Bulk(b) | Frame::Verbatim(b) => String::from_utf8_lossy(b).into_owned(),
        Frame::Simple(s) => s.clone(),
        other => panic!("expected text, got {other:?}"),
    }
}
