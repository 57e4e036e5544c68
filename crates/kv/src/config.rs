//! What a node is started with.

use std::net::SocketAddr;
use std::path::PathBuf;

use pliant_cache::Capacity;

/// The port `pliant serve` listens on by default: beside Redis's 6379, not on it, so the two
/// can run side by side.
pub const DEFAULT_PORT: u16 = 6479;

/// The longest value accepted by default: Redis's `proto-max-bulk-len`, 512 MiB.
pub const DEFAULT_MAX_VALUE_SIZE: usize = 512 * 1024 * 1024;

/// Connections accepted at once by default (Redis's `maxclients`).
pub const DEFAULT_MAX_CLIENTS: usize = 10_000;

/// When a write is acknowledged relative to the store's fsync: Redis AOF's three
/// `appendfsync` modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Never synced by the node (the OS writes back when it likes): fastest, a crash of the
    /// machine loses what the OS had not written.
    None,
    /// Synced once a second: a crash loses at most about a second of acknowledged writes.
    #[default]
    EverySec,
    /// Synced before the reply: nothing acknowledged is lost. Replies to a pipeline wait for
    /// one sync for all its writes.
    Always,
}

impl std::fmt::Display for Durability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::None => "none",
            Self::EverySec => "everysec",
            Self::Always => "always",
        })
    }
}

impl std::str::FromStr for Durability {
    type Err = String;

    /// `none` (also `no`, Redis's name), `everysec`, `always`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" | "no" => Ok(Self::None),
            "everysec" => Ok(Self::EverySec),
            "always" => Ok(Self::Always),
            _ => Err(format!(
                "durability {s:?}: expected none, everysec or always"
            )),
        }
    }
}

/// A node's settings (the flags of `pliant serve`).
#[derive(Debug, Clone)]
pub struct Config {
    /// Address and port to listen on.
    pub bind: SocketAddr,
    /// The persistent store's directory; `None` for a pure cache.
    pub store: Option<PathBuf>,
    /// The memory tier's capacity.
    pub capacity: Capacity,
    /// The memory tier's eviction algorithm (a `pliant-cache` spec).
    pub algo: String,
    /// When writes are acknowledged relative to the store's sync.
    pub durability: Durability,
    /// Connections served at once; more are refused with an error.
    pub max_clients: usize,
    /// Longest value (and bulk argument) accepted, bytes.
    pub max_value_size: usize,
    /// The policy that sizes the memory tier, and how often it decides.
    pub policy: crate::policy::PolicyConfig,
    /// The password clients must give (AUTH, or HELLO … AUTH) before any other command.
    pub requirepass: Option<String>,
    /// Serve an address other than loopback without a password (refused otherwise).
    pub unsafe_no_auth: bool,
    /// Where to serve Prometheus metrics, if anywhere.
    pub metrics: Option<SocketAddr>,
}

/// Time between policy decisions by default: ParSplice's `PerfDelay`, the interval the studies'
/// policies decided at.
pub const DEFAULT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

impl Default for Config {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT)),
            store: Some(PathBuf::from("pliant-data")),
            capacity: Capacity::Keys(u64::MAX),
            algo: "lru".into(),
            durability: Durability::default(),
            max_clients: DEFAULT_MAX_CLIENTS,
            max_value_size: DEFAULT_MAX_VALUE_SIZE,
            policy: crate::policy::PolicyConfig {
                source: None,
                params: Default::default(),
                interval: DEFAULT_INTERVAL,
            },
            requirepass: None,
            unsafe_no_auth: false,
            metrics: None,
        }
    }
}
