//! What a node is started with.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use pliant_cache::Capacity;
use pliant_policy::{Params, PolicySource};

/// The port `pliant serve` listens on by default: beside Redis's 6379, not on it, so the two
/// can run side by side.
pub const DEFAULT_PORT: u16 = 6479;

/// The longest value accepted by default: Redis's `proto-max-bulk-len`, 512 MiB.
pub const DEFAULT_MAX_VALUE_SIZE: usize = 512 * 1024 * 1024;

/// Threads serving connections by default (see `Config::threads`).
pub const DEFAULT_THREADS: usize = 1;

/// Connections accepted at once by default (Redis's `maxclients`).
pub const DEFAULT_MAX_CLIENTS: usize = 10_000;

/// The live policy to start with (`--policy`), run by [`crate::policy::Policy`].
#[derive(Debug, Clone)]
pub struct PolicyConfig {
    /// The policy, if any (without one, the thread waits for `PLIANT.POLICY LOAD`).
    pub source: Option<PolicySource>,
    /// Whether the node starts with `auto` instead (`--policy auto`; `source` is then `None`).
    pub auto: bool,
    /// Its parameters (`params.*`).
    pub params: Params,
    /// Time between decisions.
    pub interval: Duration,
}

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
    /// The persistent store's directory; `None` for a pure cache or a tier over a parent.
    pub store: Option<PathBuf>,
    /// The node this one is a cache tier of (`--parent`): misses go up to it, writes through it.
    pub parent: Option<SocketAddr>,
    /// The password the parent wants (`--parent-password`; by default this node's own).
    pub parent_password: Option<String>,
    /// The longest a client waits for the parent's answer before it gets an error
    /// (`--parent-timeout`).
    pub parent_timeout: std::time::Duration,
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
    pub policy: PolicyConfig,
    /// The password clients must give (AUTH, or HELLO … AUTH) before any other command.
    pub requirepass: Option<String>,
    /// Serve an address other than loopback without a password, and metrics on an address other
    /// than loopback (both refused otherwise).
    pub unsafe_no_auth: bool,
    /// Where to serve Prometheus metrics, if anywhere: over HTTP without authentication, so
    /// only on loopback unless `unsafe_no_auth`.
    pub metrics: Option<SocketAddr>,
    /// Threads serving connections (0: one per core).
    pub threads: usize,
    /// The embedded coordination store of the cluster this node belongs to (`--coord`), if any:
    /// the node joins it and serves the slots its map gives it.
    pub coord: Option<SocketAddr>,
    /// This node's id in the cluster (`--node-id`): 40 lowercase hex digits. Without one, it is
    /// derived from the address and the store's path.
    pub node_id: Option<String>,
    /// The etcd cluster holding this node's cluster state (`--etcd http://HOST:2379`).
    pub etcd: Option<String>,
    /// The policy that moves this node's slots to balance the cluster's load (`--balancer`).
    pub balancer: Option<pliant_cluster::BalancerConfig>,
}

/// How long a tier waits for its parent by default: Redis's `cluster-node-timeout` default
/// (15,000 ms, redis.conf), the time after which Redis Cluster takes a silent node for failed.
pub const DEFAULT_PARENT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// Time between policy decisions by default: ParSplice's `PerfDelay`, the interval the studies'
/// policies decided at.
pub const DEFAULT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

impl Default for Config {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT)),
            store: Some(PathBuf::from("pliant-data")),
            parent: None,
            parent_password: None,
            parent_timeout: DEFAULT_PARENT_TIMEOUT,
            capacity: Capacity::Keys(u64::MAX),
            algo: "lru".into(),
            durability: Durability::default(),
            max_clients: DEFAULT_MAX_CLIENTS,
            max_value_size: DEFAULT_MAX_VALUE_SIZE,
            policy: PolicyConfig {
                source: None,
                auto: false,
                params: Default::default(),
                interval: DEFAULT_INTERVAL,
            },
            requirepass: None,
            unsafe_no_auth: false,
            metrics: None,
            threads: DEFAULT_THREADS,
            coord: None,
            node_id: None,
            etcd: None,
            balancer: None,
        }
    }
}

/// A node's settings as a user gives them, every one optional: the flags of `pliant serve`, or
/// a TOML file of the same names (`--config FILE`). [`Settings::or`] lets the flags win over the
/// file; [`Settings::resolve`] fills in the defaults and checks every value, naming the field.
///
/// ```toml
/// bind = "127.0.0.1:6479"
/// store = "/scratch/pliant"        # or: no-store = true
/// capacity = "64MiB"
/// algo = "s3fifo"
/// durability = "always"
/// policy = "static-limit"          # a shipped name, or file paths (relative to this file)
/// interval = "10s"
/// metrics = "127.0.0.1:9479"
/// [param]
/// limit = 100000
/// ```
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Settings {
    /// `--bind`.
    pub bind: Option<SocketAddr>,
    /// `--store`.
    pub store: Option<PathBuf>,
    /// `--no-store`.
    pub no_store: Option<bool>,
    /// `--parent`.
    pub parent: Option<SocketAddr>,
    /// `--parent-password`.
    pub parent_password: Option<String>,
    /// `--parent-timeout`.
    pub parent_timeout: Option<String>,
    /// `--capacity`.
    pub capacity: Option<String>,
    /// `--algo`.
    pub algo: Option<String>,
    /// `--durability`.
    pub durability: Option<String>,
    /// `--max-clients`.
    pub max_clients: Option<usize>,
    /// `--max-value-size`.
    pub max_value_size: Option<String>,
    /// `--policy`: a shipped name or files.
    pub policy: Option<OneOrMany>,
    /// `--param`: the policy's parameters (numbers or strings).
    pub param: Option<pliant_policy::Params>,
    /// `--interval`.
    pub interval: Option<String>,
    /// `--requirepass`.
    pub requirepass: Option<String>,
    /// `--unsafe-no-auth`.
    pub unsafe_no_auth: Option<bool>,
    /// `--metrics`.
    pub metrics: Option<SocketAddr>,
    /// `--threads`.
    pub threads: Option<usize>,
    /// `--coord`.
    pub coord: Option<SocketAddr>,
    /// `--node-id`.
    pub node_id: Option<String>,
    /// `--etcd`.
    pub etcd: Option<String>,
    /// `--balancer`: a shipped name or files.
    pub balancer: Option<OneOrMany>,
    /// `--balancer-param`: the balancer's parameters.
    pub balancer_param: Option<pliant_policy::Params>,
    /// `--balancer-interval`.
    pub balancer_interval: Option<String>,
    /// `--balancer-slot-window`.
    pub balancer_slot_window: Option<usize>,
}

/// Parameters from the flags, completed by the file's.
fn merge_params(
    mine: Option<pliant_policy::Params>,
    theirs: Option<pliant_policy::Params>,
) -> Option<pliant_policy::Params> {
    match (mine, theirs) {
        (Some(mut mine), Some(theirs)) => {
            for (k, v) in theirs {
                mine.entry(k).or_insert(v);
            }
            Some(mine)
        }
        (mine, theirs) => mine.or(theirs),
    }
}

/// A policy named by one path or several.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    /// One file or shipped name.
    One(PathBuf),
    /// Chunk files.
    Many(Vec<PathBuf>),
}

/// A setting that cannot be used, or a configuration file that cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML for these settings (the message has the line and column).
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// toml's message.
        message: String,
    },
    /// A value that does not parse or does not fit.
    #[error("{field}: {message}")]
    Value {
        /// The setting's name, as the flag and the file spell it.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
}

impl Settings {
    /// Reads a TOML file of settings. Policy paths in it are relative to the file's directory.
    pub fn from_file(path: &std::path::Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut s: Self = toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string().trim_end().replace('\n', " "),
        })?;
        let base = path.parent().unwrap_or(std::path::Path::new("."));
        let rebase = |p: PathBuf| {
            let joined = base.join(&p);
            // A shipped policy's name is not a file here or there: keep it as written.
            if p.is_relative() && joined.exists() {
                joined
            } else {
                p
            }
        };
        s.policy = s.policy.map(|p| match p {
            OneOrMany::One(p) => OneOrMany::One(rebase(p)),
            OneOrMany::Many(v) => OneOrMany::Many(v.into_iter().map(rebase).collect()),
        });
        Ok(s)
    }

    /// These settings, with `fallback`'s where these have none.
    pub fn or(self, fallback: Self) -> Self {
        Self {
            bind: self.bind.or(fallback.bind),
            store: self.store.or(fallback.store),
            no_store: self.no_store.or(fallback.no_store),
            parent: self.parent.or(fallback.parent),
            parent_password: self.parent_password.or(fallback.parent_password),
            parent_timeout: self.parent_timeout.or(fallback.parent_timeout),
            capacity: self.capacity.or(fallback.capacity),
            algo: self.algo.or(fallback.algo),
            durability: self.durability.or(fallback.durability),
            max_clients: self.max_clients.or(fallback.max_clients),
            max_value_size: self.max_value_size.or(fallback.max_value_size),
            policy: self.policy.or(fallback.policy),
            param: merge_params(self.param, fallback.param),
            interval: self.interval.or(fallback.interval),
            requirepass: self.requirepass.or(fallback.requirepass),
            unsafe_no_auth: self.unsafe_no_auth.or(fallback.unsafe_no_auth),
            metrics: self.metrics.or(fallback.metrics),
            threads: self.threads.or(fallback.threads),
            coord: self.coord.or(fallback.coord),
            node_id: self.node_id.or(fallback.node_id),
            etcd: self.etcd.or(fallback.etcd),
            balancer: self.balancer.or(fallback.balancer),
            balancer_param: merge_params(self.balancer_param, fallback.balancer_param),
            balancer_interval: self.balancer_interval.or(fallback.balancer_interval),
            balancer_slot_window: self.balancer_slot_window.or(fallback.balancer_slot_window),
        }
    }

    /// The balancer these settings name, checked.
    fn balancer(
        paths: Option<OneOrMany>,
        params: Option<pliant_policy::Params>,
        interval: Option<&str>,
        slot_window: Option<usize>,
        in_cluster: bool,
    ) -> Result<Option<pliant_cluster::BalancerConfig>, ConfigError> {
        let bad = |field: &'static str, message: String| ConfigError::Value { field, message };
        if !in_cluster {
            if paths.is_some() || params.is_some() || interval.is_some() || slot_window.is_some() {
                return Err(bad(
                    "balancer",
                    "a balancer moves slots between a cluster's nodes: give coord or etcd too"
                        .into(),
                ));
            }
            return Ok(None);
        }
        let source = match paths {
            None if params.is_some() => {
                return Err(bad(
                    "balancer-param",
                    "given without a balancer (parameters go with the policy they are for)".into(),
                ));
            }
            None => None,
            Some(OneOrMany::One(p)) => Some(vec![p]),
            Some(OneOrMany::Many(v)) => Some(v),
        }
        .map(|paths| {
            pliant_policy::PolicySource::resolve(&paths).map_err(|e| bad("balancer", e.to_string()))
        })
        .transpose()?;
        let interval = match interval {
            None => pliant_cluster::config::DEFAULT_INTERVAL,
            Some(s) => pliant_policy::parse_interval(s).map_err(|e| bad("balancer-interval", e))?,
        };
        if interval.is_zero() {
            return Err(bad("balancer-interval", "must be more than 0".into()));
        }
        if slot_window == Some(0) {
            return Err(bad(
                "balancer-slot-window",
                "must be at least 1 interval".into(),
            ));
        }
        Ok(Some(pliant_cluster::BalancerConfig {
            source,
            params: params.unwrap_or_default(),
            interval,
            slot_window: slot_window.unwrap_or(pliant_cluster::config::DEFAULT_SLOT_WINDOW),
        }))
    }

    /// The node's configuration: these settings checked, defaults where none was given.
    pub fn resolve(self) -> Result<Config, ConfigError> {
        let d = Config::default();
        let bad = |field: &'static str, message: String| ConfigError::Value { field, message };
        let capacity = match &self.capacity {
            None => d.capacity,
            Some(c) => c
                .parse()
                .map_err(|e: pliant_cache::CapacityError| bad("capacity", e.to_string()))?,
        };
        let algo = self.algo.unwrap_or(d.algo);
        pliant_cache::build(&algo, capacity).map_err(|e| bad("algo", e.to_string()))?;
        if let Some(offline) = pliant_cache::algorithm(&algo).filter(|a| a.needs_next_access) {
            return Err(bad("algo", offline_refused(offline.name)));
        }
        let durability = match &self.durability {
            None => d.durability,
            Some(s) => s.parse().map_err(|e| bad("durability", e))?,
        };
        let max_value_size = match &self.max_value_size {
            None => d.max_value_size,
            Some(s) => match s.parse::<Capacity>() {
                Ok(Capacity::Bytes(n)) => usize::try_from(n)
                    .map_err(|_| bad("max-value-size", format!("{s:?} is too large")))?,
                Ok(Capacity::Keys(_)) => {
                    return Err(bad(
                        "max-value-size",
                        format!("{s:?}: give bytes (512MiB), not keys"),
                    ));
                }
                Err(e) => return Err(bad("max-value-size", e.to_string())),
            },
        };
        let interval = match &self.interval {
            None => d.policy.interval,
            Some(s) => pliant_policy::parse_interval(s).map_err(|e| bad("interval", e))?,
        };
        let parent_timeout = match &self.parent_timeout {
            None => d.parent_timeout,
            Some(s) => pliant_policy::parse_interval(s).map_err(|e| bad("parent-timeout", e))?,
        };
        if parent_timeout.is_zero() {
            return Err(bad("parent-timeout", "must be more than 0".into()));
        }
        if self.parent_timeout.is_some() && self.parent.is_none() {
            return Err(bad(
                "parent-timeout",
                "given without parent: only a tier waits for a parent".into(),
            ));
        }
        let paths = match self.policy {
            None => Vec::new(),
            Some(OneOrMany::One(p)) => vec![p],
            Some(OneOrMany::Many(v)) => v,
        };
        // `auto` is the built-in policy, not a file (a file of that name is given as `./auto`).
        let auto = matches!(paths.as_slice(), [p] if p.as_os_str() == crate::policy::AUTO);
        let source = if paths.is_empty() || auto {
            None
        } else {
            Some(
                pliant_policy::PolicySource::resolve(&paths)
                    .map_err(|e| bad("policy", e.to_string()))?,
            )
        };
        if self.no_store == Some(true) && self.store.is_some() {
            return Err(bad("store", "given together with no-store".into()));
        }
        if self.parent.is_some() && self.store.is_some() {
            return Err(bad(
                "store",
                "given together with parent: a tier keeps no store of its own (its parent holds every key); give one or the other".into(),
            ));
        }
        if self.coord.is_some() && self.etcd.is_some() {
            return Err(bad(
                "etcd",
                "given together with coord: a cluster's state is in one coordination store".into(),
            ));
        }
        if self.etcd.is_some() && self.parent.is_some() {
            return Err(bad(
                "etcd",
                "given together with parent: a cluster node owns its slots' keys, a tier caches another node's".into(),
            ));
        }
        if self.coord.is_some() && self.parent.is_some() {
            return Err(bad(
                "coord",
                "given together with parent: a cluster node owns its slots' keys, a tier caches another node's; give one or the other".into(),
            ));
        }
        if (self.coord.is_some() || self.etcd.is_some())
            && self.bind.is_some_and(|b| b.ip().is_unspecified())
        {
            return Err(bad(
                "bind",
                "a cluster node sends clients to its own address: bind a specific one, not 0.0.0.0 or ::".into(),
            ));
        }
        if let Some(id) = &self.node_id
            && !pliant_cluster::map::valid_id(id)
        {
            return Err(bad(
                "node-id",
                format!("{id:?} is not 40 lowercase hex digits"),
            ));
        }
        let balancer = Self::balancer(
            self.balancer,
            self.balancer_param,
            self.balancer_interval.as_deref(),
            self.balancer_slot_window,
            self.coord.is_some() || self.etcd.is_some(),
        )?;
        let requirepass = self.requirepass.filter(|p| !p.is_empty());
        Ok(Config {
            bind: self.bind.unwrap_or(d.bind),
            store: if self.no_store == Some(true) || self.parent.is_some() {
                None
            } else {
                self.store.or(d.store)
            },
            parent: self.parent,
            parent_password: self
                .parent_password
                .filter(|p| !p.is_empty())
                .or_else(|| requirepass.clone()),
            parent_timeout,
            capacity,
            algo,
            durability,
            max_clients: self.max_clients.unwrap_or(d.max_clients),
            max_value_size,
            policy: PolicyConfig {
                source,
                auto,
                params: self.param.unwrap_or_default(),
                interval,
            },
            requirepass,
            unsafe_no_auth: self.unsafe_no_auth.unwrap_or(false),
            metrics: self.metrics,
            threads: self.threads.unwrap_or(d.threads),
            coord: self.coord,
            node_id: self.node_id,
            etcd: self.etcd,
            balancer,
        })
    }
}

/// Why an offline algorithm (one that reads each request's next-access time, such as Belady's
/// MIN) cannot order a live node's memory: no one knows when a live key will next be read.
pub(crate) fn offline_refused(name: &str) -> String {
    let online: Vec<&str> = pliant_cache::ALGORITHMS
        .iter()
        .filter(|a| !a.needs_next_access)
        .map(|a| a.name)
        .collect();
    format!(
        "{name} is an offline algorithm: it needs each request's next-access time, which only a recorded trace has (use it with pliant sim); a live node takes one of {}",
        online.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_gives_every_setting_and_flags_win() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pliant.toml");
        std::fs::write(
            &path,
            "bind = \"127.0.0.1:7000\"\nno-store = true\ncapacity = \"1000keys\"\nalgo = \"sieve\"\n\
             durability = \"always\"\npolicy = \"static-limit\"\ninterval = \"500ms\"\n\
             [param]\nlimit = 10\n",
        )
        .expect("write");
        let file = Settings::from_file(&path).expect("parses");
        let flags = Settings {
            algo: Some("lru".into()),
            ..Settings::default()
        };
        let c = flags.or(file).resolve().expect("resolves");
        assert_eq!(c.bind.port(), 7000);
        assert_eq!(c.store, None);
        assert_eq!(c.capacity, Capacity::Keys(1000));
        assert_eq!(c.algo, "lru");
        assert_eq!(c.durability, Durability::Always);
        assert_eq!(c.policy.interval, std::time::Duration::from_millis(500));
        assert_eq!(c.policy.source.map(|s| s.name), Some("static-limit".into()));
        assert_eq!(
            c.policy.params.get("limit"),
            Some(&pliant_policy::ParamValue::Num(10.0))
        );
    }

    #[test]
    fn errors_name_the_file_line_or_field() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, "capacity = \"64MiB\"\ncapasity = 1\n").expect("write");
        let e = Settings::from_file(&path)
            .expect_err("unknown field")
            .to_string();
        assert!(
            e.contains("bad.toml") && e.contains("capasity") && e.contains("line 2"),
            "{e}"
        );
        for (s, field) in [
            (
                Settings {
                    capacity: Some("lots".into()),
                    ..Settings::default()
                },
                "capacity",
            ),
            (
                Settings {
                    durability: Some("sometimes".into()),
                    ..Settings::default()
                },
                "durability",
            ),
            (
                Settings {
                    interval: Some("0s".into()),
                    ..Settings::default()
                },
                "interval",
            ),
            (
                Settings {
                    algo: Some("mru".into()),
                    ..Settings::default()
                },
                "algo",
            ),
            (
                Settings {
                    algo: Some("belady".into()),
                    ..Settings::default()
                },
                "algo",
            ),
            (
                Settings {
                    parent: Some("127.0.0.1:7000".parse().expect("addr")),
                    store: Some("kv".into()),
                    ..Settings::default()
                },
                "store",
            ),
        ] {
            let e = s.resolve().expect_err(field).to_string();
            assert!(e.starts_with(&format!("{field}: ")), "{e}");
        }
    }

    /// A tier keeps no store, and speaks to its parent with its own password unless told another.
    #[test]
    fn a_tier_has_no_store_and_its_own_password_by_default() {
        let c = Settings {
            parent: Some("127.0.0.1:7000".parse().expect("addr")),
            requirepass: Some("secret".into()),
            ..Settings::default()
        }
        .resolve()
        .expect("resolves");
        assert_eq!(c.store, None);
        assert_eq!(c.parent_password.as_deref(), Some("secret"));
        assert_eq!(c.parent_timeout, DEFAULT_PARENT_TIMEOUT);
    }

    #[test]
    fn a_parent_timeout_is_a_positive_duration_for_a_tier_only() {
        let tier = |t: &str| Settings {
            parent: Some("127.0.0.1:7000".parse().expect("addr")),
            parent_timeout: Some(t.into()),
            ..Settings::default()
        };
        assert_eq!(
            tier("500ms").resolve().expect("resolves").parent_timeout,
            std::time::Duration::from_millis(500)
        );
        let field = |e: ConfigError| e.to_string();
        assert!(field(tier("0s").resolve().expect_err("zero")).contains("parent-timeout"));
        assert!(
            field(tier("soon").resolve().expect_err("not a duration")).contains("parent-timeout")
        );
        let no_parent = Settings {
            parent_timeout: Some("1s".into()),
            ..Settings::default()
        };
        let e = field(no_parent.resolve().expect_err("no parent"));
        assert!(
            e.contains("parent-timeout") && e.contains("without parent"),
            "{e}"
        );
    }

    #[test]
    fn a_balancer_needs_a_cluster_and_its_parameters_a_policy() {
        let field = |s: Settings| match s.resolve() {
            Err(ConfigError::Value { field, message }) => (field, message),
            other => panic!("refused, got {other:?}"),
        };
        let (f, m) = field(Settings {
            balancer: Some(OneOrMany::One("cephfs-greedy-spill".into())),
            ..Settings::default()
        });
        assert_eq!(f, "balancer");
        assert!(m.contains("coord or etcd"), "{m}");
        let (f, _) = field(Settings {
            balancer_interval: Some("5s".into()),
            ..Settings::default()
        });
        assert_eq!(f, "balancer");
        let in_cluster = || Settings {
            coord: Some("127.0.0.1:7000".parse().expect("addr")),
            ..Settings::default()
        };
        let (f, _) = field(Settings {
            balancer_param: Some([("k".to_string(), pliant_policy::ParamValue::Num(1.0))].into()),
            ..in_cluster()
        });
        assert_eq!(f, "balancer-param");
        let (f, _) = field(Settings {
            balancer_interval: Some("0s".into()),
            ..in_cluster()
        });
        assert_eq!(f, "balancer-interval");
        // Every cluster node runs a balancer: the store's policy, or none until one is loaded.
        let b = in_cluster()
            .resolve()
            .expect("resolves")
            .balancer
            .expect("a balancer");
        assert_eq!(b.interval, pliant_cluster::config::DEFAULT_INTERVAL);
        assert!(b.source.is_none());
        let b = Settings {
            balancer: Some(OneOrMany::One("cephfs-greedy-spill".into())),
            ..in_cluster()
        }
        .resolve()
        .expect("resolves")
        .balancer
        .expect("a balancer");
        assert_eq!(b.source.expect("a policy").name, "cephfs-greedy-spill");
    }
}
