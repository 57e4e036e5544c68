//! Commands: one file per family, each command a function from its arguments to its reply.
//! [`execute`] looks the name up in [`COMMANDS`], checks the arity as Redis does, and runs it.

mod cluster;
mod connection;
mod docs;
mod keys;
mod migrate;
mod multi;
mod netprobe;
mod pliant;
mod server;
mod strings;
#[cfg(test)]
mod testing;

use bytes::Bytes;

pub use docs::{Arg, Docs, Flag, Flags};

use crate::keyspace::{Keyspace, Lent};
use crate::node::Node;
pub(crate) use pliant::{check_write, written};
use pliant_proto::frame::{Frame, Protocol};

/// One connection's state, as commands see and change it.
#[derive(Debug, Default)]
pub struct Session {
    /// Its id (`CLIENT ID`).
    pub id: u64,
    /// The protocol it speaks (`HELLO`).
    pub proto: Protocol,
    /// Its name (`CLIENT SETNAME`).
    pub name: Option<Bytes>,
    /// Whether it may run commands: it gave the password, or none is required.
    pub authenticated: bool,
    /// Set by `QUIT`: reply, then close.
    pub quit: bool,
    /// Set by `SHUTDOWN`: reply, then stop the server.
    pub shutdown: bool,
    /// Whether a command of this batch wrote (the reply waits for the store's sync under
    /// `--durability always`).
    pub wrote: bool,
    /// Whether this batch's writes are synced before its replies whatever the durability: a
    /// slot move's copies (`PLIANT.RESTORE`), which the source deletes once they are
    /// acknowledged, must outlive a crash of this node.
    pub sync_writes: bool,
    /// Invalidation pushes to send (`CLIENT TRACKING ON`).
    pub pushes: Option<tokio::sync::mpsc::UnboundedReceiver<crate::tracking::Outgoing>>,
    /// Tiers this batch's writes invalidated: its replies wait until they have applied it.
    pub awaiting: Vec<crate::tracking::Wait>,
    /// Set by `ASKING`: the next command may use a slot being imported here (Redis Cluster's
    /// `-ASK` redirection).
    pub asking: bool,
    /// The transaction being queued, after MULTI.
    pub multi: Option<multi::Multi>,
    /// The keys it WATCHes.
    pub watching: Option<multi::Watching>,
    /// Its entry in the node's registry of connections (CLIENT LIST, KILL).
    pub client: Option<std::sync::Arc<crate::clients::Client>>,
    /// The client its invalidations go to (`CLIENT TRACKING ON REDIRECT id`).
    pub redirect: Option<u64>,
    /// Messages of the channel it subscribed to (`__redis__:invalidate`).
    pub messages: Option<tokio::sync::mpsc::UnboundedReceiver<Frame>>,
    /// Replies to send after this command's (SUBSCRIBE's, one per channel).
    pub also: Vec<Frame>,
    /// When the previous command of this batch ended (or the batch began): the start of the
    /// next one's time in `INFO commandstats`, so a command costs one clock read, not two.
    /// In [`crate::node::mono_ns`]'s nanoseconds.
    pub mark: Option<u64>,
    /// This batch's counts for `INFO commandstats`, folded into the node's once a batch.
    pub counts: crate::node::BatchCounts,
}

impl Session {
    /// Hands what this batch counted so far to the node (`INFO commandstats`) and its last
    /// command to the connection's registry entry (CLIENT LIST): once a batch, and before a
    /// command that reads them.
    pub(crate) fn settle(&mut self, node: &Node) {
        if let (Some((index, at)), Some(c)) = (self.counts.last.take(), &self.client) {
            c.ran(index, at);
        }
        node.fold_counts(&mut self.counts);
    }

    /// Whether `spec` is refused here because the connection subscribed over RESP2 (it reads
    /// messages, not replies, until it unsubscribes).
    pub(crate) fn refuses_while_subscribed(&self, spec: &Spec) -> bool {
        self.messages.is_some() && self.proto == Protocol::Resp2 && !spec.facts.while_subscribed
    }
}

/// What a command runs with.
pub struct Ctx<'a> {
    /// The node.
    pub node: &'a Node,
    /// The connection.
    pub session: &'a mut Session,
    /// Unix milliseconds now.
    pub now: u64,
    /// On a tier, the values fetched from the parent for this command (see [`Ctx::ks`]).
    pub lent: Lent,
    /// On a tier, whether the command looked for a key that neither memory nor the loan had (it
    /// left memory after the caller looked): the caller fetches and runs it again.
    pub unready: bool,
    /// The command, looked up and checked by the caller already ([`check`]): not looked up
    /// twice.
    pub checked: Option<&'static Spec>,
    /// What the caller walked of the store before the command ran, off the keyspace lock
    /// ([`Facts::walks`]); `None`: the command walks the store itself, under the lock.
    pub walked: Option<Walked>,
}

/// What a walk of the store the server ran for a command found ([`Facts::walks`]).
#[derive(Debug)]
pub enum Walked {
    /// Every key counted (DBSIZE, INFO keyspace, PLIANT.STATS).
    Counts(Result<crate::keyspace::StoreCounts, crate::KvError>),
    /// Keys and where to go on from, as [`crate::Keyspace::scan`] gives them (SCAN, KEYS).
    Keys(Scanned),
    /// The reply of a slot stream the server ran for the command (PLIANT.MIGRATE: it waits on
    /// another node, which the synchronous command table cannot).
    Streamed(Frame),
}

/// Keys found and the token to go on from, or the store's failure.
pub type Scanned = Result<(Vec<Bytes>, Option<Bytes>), crate::KvError>;

impl<'a> Ctx<'a> {
    /// The store's counts walked for this command before it ran, if they were.
    pub fn walked_counts(
        &mut self,
    ) -> Option<Result<crate::keyspace::StoreCounts, crate::KvError>> {
        match self.walked.take()? {
            Walked::Counts(c) => Some(c),
            _ => None,
        }
    }

    /// The keys walked for this command before it ran, if they were.
    pub fn walked_keys(&mut self) -> Option<Scanned> {
        match self.walked.take()? {
            Walked::Keys(k) => Some(k),
            _ => None,
        }
    }

    /// The reply of the slot stream run for this command before it ran, if one was.
    pub fn walked_stream(&mut self) -> Option<Frame> {
        match self.walked.take()? {
            Walked::Streamed(f) => Some(f),
            _ => None,
        }
    }

    /// What a command runs with, nothing lent.
    pub fn new(node: &'a Node, session: &'a mut Session, now: u64) -> Self {
        Self {
            node,
            session,
            now,
            lent: Lent::default(),
            unready: false,
            checked: None,
            walked: None,
        }
    }

    /// The keyspace, locked, with the values fetched for this command lent to it while the lock
    /// is held (a read command on a tier sees them even if memory could not keep them, and no
    /// other command ever sees them).
    pub fn ks(&mut self) -> Ks<'_> {
        let mut guard = self.node.keyspace();
        guard.tick(self.now);
        // Whatever another command left there is not this one's.
        guard.take_unready();
        if !self.lent.is_empty() {
            guard.lend(std::mem::take(&mut self.lent));
        }
        Ks {
            guard,
            lent: &mut self.lent,
            unready: &mut self.unready,
        }
    }
}

/// The keyspace locked by [`Ctx::ks`]; gives back what was lent when dropped.
pub struct Ks<'a> {
    guard: std::sync::MutexGuard<'a, Keyspace>,
    lent: &'a mut Lent,
    unready: &'a mut bool,
}

impl std::ops::Deref for Ks<'_> {
    type Target = Keyspace;
    fn deref(&self) -> &Keyspace {
        &self.guard
    }
}

impl std::ops::DerefMut for Ks<'_> {
    fn deref_mut(&mut self) -> &mut Keyspace {
        &mut self.guard
    }
}

impl Drop for Ks<'_> {
    fn drop(&mut self) {
        // Read under the same lock as the command, so no other command's miss is taken for it.
        *self.unready |= self.guard.take_unready();
        if self.guard.lends() {
            *self.lent = self.guard.unlend();
        }
    }
}

type Run = fn(&mut Ctx<'_>, &[Bytes]) -> Frame;

/// A command: its name, its arity as Redis states it (negative: at least that many, the name
/// included), its flags and keys as `COMMAND INFO` reports them, its documentation as `COMMAND
/// DOCS` does (see the `docs` module), and what runs it.
#[derive(Clone, Copy)]
pub struct Spec {
    /// Lowercase name.
    pub name: &'static str,
    /// Arity, counting the name; negative means at least `-arity`.
    pub arity: i32,
    /// Its flags: `Flag::Write` is what makes the server commit and track after it,
    /// `Flag::NoAuth` what lets it run before AUTH.
    pub flags: Flags,
    /// Where its keys are among the arguments, as `COMMAND INFO` reports it: first, last (negative:
    /// from the end) and step; all 0 for a command without keys.
    pub keys: (i64, i64, i64),
    /// What `COMMAND DOCS` says of it.
    pub docs: Docs,
    /// What the node must know of it beyond Redis's flags.
    pub facts: Facts,
    run: Run,
}

/// What the node must know of a command beyond Redis's flags (Pliant's: no `COMMAND` reply
/// shows them), kept in the table so that no code elsewhere picks a command out by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// Its part in a cache tier.
    pub tier: TierRole,
    /// It writes every key (FLUSHDB, FLUSHALL): watchers, trackers and tiers hear of all.
    pub every_key: bool,
    /// Inside MULTI it acts at once instead of being queued (EXEC, DISCARD, MULTI, WATCH and,
    /// as in Redis, QUIT).
    pub acts_in_multi: bool,
    /// Allowed on a RESP2 connection that subscribed (SUBSCRIBE, UNSUBSCRIBE, PING, QUIT).
    pub while_subscribed: bool,
    /// It takes the transactions' gate itself, exclusively (EXEC); every other command holds
    /// it shared while it runs.
    pub gate_itself: bool,
    /// It reads the commands' counters (INFO, CLIENT, PLIANT.STATS): the counts of the batch
    /// it is in are folded in first.
    pub reads_counts: bool,
    /// Whether it replaces what its keys held without reading it: a node over a store then
    /// reads nothing of them before it runs.
    pub overwrites: Overwrites,
    /// Whether it walks the store (DBSIZE, INFO keyspace, SCAN, KEYS): over a store, the
    /// server walks it first, off the keyspace lock, and hands it what it found
    /// (`Ctx::walked`).
    pub walks: Walks,
    /// It waits on another node (PLIANT.MIGRATE streams slots' keys to one, PLIANT.NETPROBE
    /// times an echo): the server runs that first, asynchronously, and the command replies with
    /// its outcome (`Ctx::walked`).
    pub streams: Option<Stream>,
}

/// What a command that waits on another node runs first ([`Facts::streams`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stream {
    /// `PLIANT.MIGRATE`'s copy of slots to their target.
    Migrate,
    /// `PLIANT.NETPROBE`'s echo.
    NetProbe,
}

/// Runs a command's [`Stream`], off the command table's synchronous path.
pub(crate) async fn stream(
    kind: Stream,
    node: &Node,
    session: &mut Session,
    args: &[Bytes],
    now: u64,
) -> Frame {
    match kind {
        Stream::Migrate => migrate::stream(node, session, args, now).await,
        Stream::NetProbe => netprobe::stream(node, session, args, now).await,
    }
}

/// What a command walks of the store ([`Facts::walks`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Walks {
    /// Nothing.
    No,
    /// It counts every key (DBSIZE, PLIANT.STATS).
    Counts,
    /// It counts every key when its arguments ask for this INFO section (INFO's `keyspace`,
    /// shown by default too).
    CountsIfShown(&'static str),
    /// SCAN's share of the keys after its cursor.
    Scan,
    /// KEYS: every key, those matching its pattern kept.
    Keys,
}

/// Whether a write reads what its keys held ([`Facts::overwrites`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Overwrites {
    /// It may read them (every command that is not a plain overwrite).
    No,
    /// It never reads them (MSET, SETEX).
    Always,
    /// It does not read them unless one of these options comes after its key and value (SET:
    /// NX, XX, GET and KEEPTTL need the old value; EX and PX do not).
    Unless(&'static [&'static str]),
}

/// The yes-or-no [`Facts`], named for the table (`.with(Fact::EveryKey)`).
#[derive(Clone, Copy)]
enum Fact {
    EveryKey,
    ActsInMulti,
    WhileSubscribed,
    GateItself,
    ReadsCounts,
    Streams(Stream),
}

impl Facts {
    const NONE: Facts = Facts {
        tier: TierRole::Plain,
        every_key: false,
        acts_in_multi: false,
        while_subscribed: false,
        gate_itself: false,
        reads_counts: false,
        overwrites: Overwrites::No,
        walks: Walks::No,
        streams: None,
    };
}

/// A command's part in a cache tier (`--parent`), where that is more than forwarding a write or
/// serving a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TierRole {
    /// Nothing beyond its flags.
    Plain,
    /// In its plain form (key and value, no options) it puts a whole value: a tier keeps what
    /// it forwards, and drops a put of the value it holds already.
    Put,
    /// It carries a child tier's write, acknowledged to the child as the parent acknowledges it.
    ChildWrite,
    /// It reads the whole keyspace, which a tier holds only part of: the parent answers it.
    AskParent,
}

const NO_KEYS: (i64, i64, i64) = (0, 0, 0);
const ONE_KEY: (i64, i64, i64) = (1, 1, 1);
const ALL_KEYS: (i64, i64, i64) = (1, -1, 1);

/// The groups of `COMMAND DOCS`.
const CLUSTER: &str = "cluster";
const CONNECTION: &str = "connection";
const GENERIC: &str = "generic";
const SERVER: &str = "server";
const STRING: &str = "string";
const PLIANT: &str = "pliant";
const TRANSACTIONS: &str = "transactions";
const PUBSUB: &str = "pubsub";

/// The version `PLIANT.*` commands came in.
const PLIANT_SINCE: &str = "0.1.0";

const fn cmd(
    name: &'static str,
    arity: i32,
    flags: &[Flag],
    keys: (i64, i64, i64),
    run: Run,
) -> Spec {
    Spec {
        name,
        arity,
        flags: Flags::of(flags),
        keys,
        docs: Docs::NONE,
        facts: Facts::NONE,
        run,
    }
}

impl Spec {
    /// Documented: its group, the version that added it, its complexity and a summary.
    const fn doc(
        mut self,
        group: &'static str,
        since: &'static str,
        complexity: &'static str,
        summary: &'static str,
    ) -> Spec {
        self.docs.group = group;
        self.docs.since = since;
        self.docs.complexity = complexity;
        self.docs.summary = summary;
        self
    }

    /// Its arguments after its name.
    const fn args(mut self, args: &'static [Arg]) -> Spec {
        self.docs.args = args;
        self
    }

    /// A container of subcommands.
    const fn container(mut self) -> Spec {
        self.docs.container = true;
        self
    }

    /// Its part in a cache tier.
    const fn tier(mut self, role: TierRole) -> Spec {
        self.facts.tier = role;
        self
    }

    /// Whether it counts every key of the store ([`Facts::walks`]).
    const fn walks(mut self, w: Walks) -> Spec {
        self.facts.walks = w;
        self
    }

    /// Whether it replaces what its keys held without reading it ([`Facts::overwrites`]).
    const fn overwrites(mut self, o: Overwrites) -> Spec {
        self.facts.overwrites = o;
        self
    }

    /// One of its [`Facts`] holds.
    const fn with(mut self, fact: Fact) -> Spec {
        match fact {
            Fact::EveryKey => self.facts.every_key = true,
            Fact::ActsInMulti => self.facts.acts_in_multi = true,
            Fact::WhileSubscribed => self.facts.while_subscribed = true,
            Fact::GateItself => self.facts.gate_itself = true,
            Fact::ReadsCounts => self.facts.reads_counts = true,
            Fact::Streams(kind) => self.facts.streams = Some(kind),
        }
        self
    }

    /// Deprecated since `since`, for `replaced_by`.
    const fn deprecated(mut self, since: &'static str, replaced_by: &'static str) -> Spec {
        self.docs.deprecated = Some((since, replaced_by));
        self
    }

    /// Whether running it, with these arguments (its name first), may read what its keys hold.
    pub fn reads_keys(&self, args: &[Bytes]) -> bool {
        match self.facts.overwrites {
            Overwrites::No => true,
            Overwrites::Always => false,
            Overwrites::Unless(options) => args
                .iter()
                .skip(3)
                .any(|a| options.iter().any(|o| a.eq_ignore_ascii_case(o.as_bytes()))),
        }
    }

    /// Whether it may change keys.
    pub fn writes(&self) -> bool {
        self.flags.has(Flag::Write)
    }

    /// Its index in [`COMMANDS`]: where it stands in [`TABLE`], the one copy [`lookup`] hands
    /// out (a constant's address is not one place), found from its address, as every command
    /// run needs it (`INFO commandstats`, CLIENT LIST's `cmd`) and a lookup by name cost a
    /// hash of the name each time; by name for a copy from elsewhere.
    pub(crate) fn index(&self) -> usize {
        let at = (self as *const Spec as usize).wrapping_sub(TABLE.as_ptr() as usize)
            / std::mem::size_of::<Spec>();
        if TABLE.get(at).is_some_and(|c| std::ptr::eq(c, self)) {
            return at;
        }
        TABLE
            .iter()
            .position(|c| c.name == self.name)
            .unwrap_or(usize::MAX)
    }
}

use Flag::{
    Admin, AllowBusy, Denyoom, Fast, Loading, NoAuth, NoMulti, Noscript, Pubsub, Readonly, Stale,
    Write,
};

/// `[NX | XX | GT | LT]` of EXPIRE and PEXPIRE.
const EXPIRE_CONDITION: Arg = Arg::one_of(
    "condition",
    &[
        Arg::token("nx", "NX"),
        Arg::token("xx", "XX"),
        Arg::token("gt", "GT"),
        Arg::token("lt", "LT"),
    ],
)
.optional()
.since("7.0.0");

/// `[ASYNC | SYNC]` of FLUSHDB and FLUSHALL.
const FLUSH_TYPE: Arg = Arg::one_of(
    "async",
    &[
        Arg::token("async", "ASYNC").since("4.0.0"),
        Arg::token("sync", "SYNC").since("6.2.0"),
    ],
)
.optional();

/// `key value expires_at_ms […]` of a slot move's batches.
const MOVED_KEYS: &[Arg] = &[Arg::block(
    "entry",
    &[
        Arg::string("key"),
        Arg::string("value"),
        Arg::integer("expires-at-ms"),
    ],
)
.multiple()];

/// `PLIANT.RESTORE`'s: the move its batch belongs to, then [`MOVED_KEYS`].
const RESTORE_ARGS: &[Arg] = &[
    Arg::integer("map-version").after("MAPVERSION").optional(),
    MOVED_KEYS[0],
];

/// [`COMMANDS`] at one address: what [`lookup`] hands out, so that [`Spec::index`] can tell a
/// command's place from where it is.
static TABLE: &[Spec] = COMMANDS;

/// Every command the node answers. The flags, summaries, versions, groups, complexities and
/// deprecations of Redis's commands are Redis 7.2's (`src/commands.def`); their arguments are
/// the ones this server takes, named as Redis names them (SHUTDOWN takes only NOSAVE and SAVE,
/// and ignores both).
pub const COMMANDS: &[Spec] = &[
    cmd(
        "auth",
        -2,
        &[Noscript, Loading, Stale, Fast, NoAuth, AllowBusy],
        NO_KEYS,
        connection::auth,
    )
    .doc(
        CONNECTION,
        "1.0.0",
        "O(N) where N is the number of passwords defined for the user",
        "Authenticates the connection.",
    )
    .args(&[
        Arg::string("username").optional().since("6.0.0"),
        Arg::string("password"),
    ]),
    cmd("ping", -1, &[Fast], NO_KEYS, connection::ping)
        .with(Fact::WhileSubscribed)
        .doc(
            CONNECTION,
            "1.0.0",
            "O(1)",
            "Returns the server's liveliness response.",
        )
        .args(&[Arg::string("message").optional()]),
    cmd(
        "echo",
        2,
        &[Loading, Stale, Fast],
        NO_KEYS,
        connection::echo,
    )
    .doc(CONNECTION, "1.0.0", "O(1)", "Returns the given string.")
    .args(&[Arg::string("message")]),
    cmd(
        "hello",
        -1,
        &[Noscript, Loading, Stale, Fast, NoAuth, AllowBusy],
        NO_KEYS,
        connection::hello,
    )
    .doc(
        CONNECTION,
        "6.0.0",
        "O(1)",
        "Handshakes with the Redis server.",
    )
    .args(&[Arg::block(
        "arguments",
        &[
            Arg::integer("protover"),
            Arg::block("auth", &[Arg::string("username"), Arg::string("password")])
                .after("AUTH")
                .optional(),
            Arg::string("clientname").after("SETNAME").optional(),
        ],
    )
    .optional()]),
    cmd("client", -2, &[], NO_KEYS, connection::client)
        .with(Fact::ReadsCounts)
        .doc(
            CONNECTION,
            "2.4.0",
            "Depends on subcommand.",
            "A container for client connection commands.",
        )
        .container(),
    cmd(
        "select",
        2,
        &[Loading, Stale, Fast],
        NO_KEYS,
        connection::select,
    )
    .doc(
        CONNECTION,
        "1.0.0",
        "O(1)",
        "Changes the selected database.",
    )
    .args(&[Arg::integer("index")]),
    cmd(
        "quit",
        -1,
        &[AllowBusy, Noscript, Loading, Stale, Fast, NoAuth],
        NO_KEYS,
        connection::quit,
    )
    .with(Fact::ActsInMulti)
    .with(Fact::WhileSubscribed)
    .doc(CONNECTION, "1.0.0", "O(1)", "Closes the connection.")
    .deprecated("7.2.0", "just closing the connection"),
    cmd(
        "multi",
        1,
        &[Noscript, Loading, Stale, Fast, AllowBusy],
        NO_KEYS,
        multi::multi,
    )
    .with(Fact::ActsInMulti)
    .doc(TRANSACTIONS, "1.2.0", "O(1)", "Starts a transaction."),
    cmd("exec", 1, &[Noscript, Loading, Stale], NO_KEYS, multi::exec)
        .with(Fact::ActsInMulti)
        .with(Fact::GateItself)
        .doc(
            TRANSACTIONS,
            "1.2.0",
            "Depends on commands in the transaction",
            "Executes all commands in a transaction.",
        ),
    cmd(
        "discard",
        1,
        &[Noscript, Loading, Stale, Fast, AllowBusy],
        NO_KEYS,
        multi::discard,
    )
    .with(Fact::ActsInMulti)
    .doc(
        TRANSACTIONS,
        "2.0.0",
        "O(N), when N is the number of queued commands",
        "Discards a transaction.",
    ),
    cmd(
        "watch",
        -2,
        &[Noscript, Loading, Stale, Fast, AllowBusy],
        ALL_KEYS,
        multi::watch,
    )
    .with(Fact::ActsInMulti)
    .doc(
        TRANSACTIONS,
        "2.2.0",
        "O(1) for every key.",
        "Monitors changes to keys to determine the execution of a transaction.",
    )
    .args(&[Arg::key("key").multiple()]),
    cmd(
        "unwatch",
        1,
        &[Noscript, Loading, Stale, Fast, AllowBusy],
        NO_KEYS,
        multi::unwatch,
    )
    .doc(
        TRANSACTIONS,
        "2.2.0",
        "O(1)",
        "Forgets about watched keys of a transaction.",
    ),
    cmd(
        "subscribe",
        -2,
        &[Pubsub, Noscript, Loading, Stale],
        NO_KEYS,
        connection::subscribe,
    )
    .with(Fact::WhileSubscribed)
    .doc(
        PUBSUB,
        "2.0.0",
        "O(N) where N is the number of channels to subscribe to.",
        "Listens for messages published to channels.",
    )
    .args(&[Arg::string("channel").multiple()]),
    cmd(
        "unsubscribe",
        -1,
        &[Pubsub, Noscript, Loading, Stale],
        NO_KEYS,
        connection::unsubscribe,
    )
    .with(Fact::WhileSubscribed)
    .doc(
        PUBSUB,
        "2.0.0",
        "O(N) where N is the number of channels to unsubscribe from.",
        "Stops listening to messages posted to channels.",
    )
    .args(&[Arg::string("channel").optional().multiple()]),
    cmd("wait", 3, &[Noscript], NO_KEYS, server::wait)
        .doc(
            GENERIC,
            "3.0.0",
            "O(1)",
            concat!(
                "Blocks until the asynchronous replication of all preceding write ",
                "commands sent by the connection is completed."
            ),
        )
        .args(&[Arg::integer("numreplicas"), Arg::integer("timeout")]),
    cmd("object", -2, &[], (2, 2, 1), keys::object)
        .doc(
            GENERIC,
            "2.2.3",
            "Depends on subcommand.",
            "A container for object introspection commands.",
        )
        .container(),
    cmd("memory", -2, &[], (2, 2, 1), server::memory)
        .doc(
            SERVER,
            "4.0.0",
            "Depends on subcommand.",
            "A container for memory diagnostics commands.",
        )
        .container(),
    cmd("command", -1, &[Loading, Stale], NO_KEYS, server::command).doc(
        SERVER,
        "2.8.13",
        "O(N) where N is the total number of Redis commands",
        "Returns detailed information about all commands.",
    ),
    cmd("info", -1, &[Loading, Stale], NO_KEYS, server::info)
        .with(Fact::ReadsCounts)
        .walks(Walks::CountsIfShown("keyspace"))
        .doc(
            SERVER,
            "1.0.0",
            "O(1)",
            "Returns information and statistics about the server.",
        )
        .args(&[Arg::string("section").optional().multiple()]),
    cmd("config", -2, &[], NO_KEYS, server::config)
        .doc(
            SERVER,
            "2.0.0",
            "Depends on subcommand.",
            "A container for server configuration commands.",
        )
        .container(),
    cmd("dbsize", 1, &[Readonly, Fast], NO_KEYS, server::dbsize)
        .tier(TierRole::AskParent)
        .walks(Walks::Counts)
        .doc(
            SERVER,
            "1.0.0",
            "O(1)",
            "Returns the number of keys in the database.",
        ),
    cmd("flushdb", -1, &[Write], NO_KEYS, server::flush)
        .with(Fact::EveryKey)
        .doc(
            SERVER,
            "1.0.0",
            "O(N) where N is the number of keys in the selected database",
            "Remove all keys from the current database.",
        )
        .args(&[FLUSH_TYPE]),
    cmd("flushall", -1, &[Write], NO_KEYS, server::flush)
        .with(Fact::EveryKey)
        .doc(
            SERVER,
            "1.0.0",
            "O(N) where N is the total number of keys in all databases",
            "Removes all keys from all databases.",
        )
        .args(&[FLUSH_TYPE]),
    cmd(
        "shutdown",
        -1,
        &[Admin, Noscript, Loading, Stale, NoMulti, AllowBusy],
        NO_KEYS,
        server::shutdown,
    )
    .doc(
        SERVER,
        "1.0.0",
        concat!(
            "O(N) when saving, where N is the total number of keys in all ",
            "databases when saving data, otherwise O(1)"
        ),
        concat!(
            "Synchronously saves the database(s) to disk and shuts down the ",
            "Redis server."
        ),
    )
    .args(&[Arg::one_of(
        "nosave_save",
        &[Arg::token("nosave", "NOSAVE"), Arg::token("save", "SAVE")],
    )
    .optional()]),
    cmd("get", 2, &[Readonly, Fast], ONE_KEY, strings::get)
        .doc(
            STRING,
            "1.0.0",
            "O(1)",
            "Returns the string value of a key.",
        )
        .args(&[Arg::key("key")]),
    cmd("set", -3, &[Write, Denyoom], ONE_KEY, strings::set)
        .tier(TierRole::Put)
        .overwrites(Overwrites::Unless(&["NX", "XX", "GET", "KEEPTTL"]))
        .doc(
            STRING,
            "1.0.0",
            "O(1)",
            concat!(
                "Sets the string value of a key, ignoring its type. The key is ",
                "created if it doesn't exist."
            ),
        )
        .args(&[
            Arg::key("key"),
            Arg::string("value"),
            Arg::one_of(
                "condition",
                &[Arg::token("nx", "NX"), Arg::token("xx", "XX")],
            )
            .optional()
            .since("2.6.12"),
            Arg::token("get", "GET").optional().since("6.2.0"),
            Arg::one_of(
                "expiration",
                &[
                    Arg::integer("seconds").after("EX").since("2.6.12"),
                    Arg::integer("milliseconds").after("PX").since("2.6.12"),
                    Arg::unix_time("unix-time-seconds")
                        .after("EXAT")
                        .since("6.2.0"),
                    Arg::unix_time("unix-time-milliseconds")
                        .after("PXAT")
                        .since("6.2.0"),
                    Arg::token("keepttl", "KEEPTTL").since("6.0.0"),
                ],
            )
            .optional(),
        ]),
    cmd("getex", -2, &[Write, Fast], ONE_KEY, strings::getex)
        .doc(
            STRING,
            "6.2.0",
            "O(1)",
            "Returns the string value of a key after setting its expiration time.",
        )
        .args(&[
            Arg::key("key"),
            Arg::one_of(
                "expiration",
                &[
                    Arg::integer("seconds").after("EX"),
                    Arg::integer("milliseconds").after("PX"),
                    Arg::unix_time("unix-time-seconds").after("EXAT"),
                    Arg::unix_time("unix-time-milliseconds").after("PXAT"),
                    Arg::token("persist", "PERSIST"),
                ],
            )
            .optional(),
        ]),
    cmd("setnx", 3, &[Write, Denyoom, Fast], ONE_KEY, strings::setnx)
        .doc(
            STRING,
            "1.0.0",
            "O(1)",
            "Set the string value of a key only when the key doesn't exist.",
        )
        .deprecated("2.6.12", "`SET` with the `NX` argument")
        .args(&[Arg::key("key"), Arg::string("value")]),
    cmd("setex", 4, &[Write, Denyoom], ONE_KEY, strings::setex)
        .overwrites(Overwrites::Always)
        .doc(
            STRING,
            "2.0.0",
            "O(1)",
            concat!(
                "Sets the string value and expiration time of a key. Creates the ",
                "key if it doesn't exist."
            ),
        )
        .deprecated("2.6.12", "`SET` with the `EX` argument")
        .args(&[
            Arg::key("key"),
            Arg::integer("seconds"),
            Arg::string("value"),
        ]),
    cmd("psetex", 4, &[Write, Denyoom], ONE_KEY, strings::psetex)
        .overwrites(Overwrites::Always)
        .doc(
            STRING,
            "2.6.0",
            "O(1)",
            concat!(
                "Sets both string value and expiration time in milliseconds of a ",
                "key. The key is created if it doesn't exist."
            ),
        )
        .deprecated("2.6.12", "`SET` with the `PX` argument")
        .args(&[
            Arg::key("key"),
            Arg::integer("milliseconds"),
            Arg::string("value"),
        ]),
    cmd(
        "getset",
        3,
        &[Write, Denyoom, Fast],
        ONE_KEY,
        strings::getset,
    )
    .doc(
        STRING,
        "1.0.0",
        "O(1)",
        concat!(
            "Returns the previous string value of a key after setting it to a ",
            "new value."
        ),
    )
    .deprecated("6.2.0", "`SET` with the `!GET` argument")
    .args(&[Arg::key("key"), Arg::string("value")]),
    cmd("getdel", 2, &[Write, Fast], ONE_KEY, strings::getdel)
        .doc(
            STRING,
            "6.2.0",
            "O(1)",
            "Returns the string value of a key after deleting the key.",
        )
        .args(&[Arg::key("key")]),
    cmd("mget", -2, &[Readonly, Fast], ALL_KEYS, strings::mget)
        .doc(
            STRING,
            "1.0.0",
            "O(N) where N is the number of keys to retrieve.",
            "Atomically returns the string values of one or more keys.",
        )
        .args(&[Arg::key("key").multiple()]),
    cmd("mset", -3, &[Write, Denyoom], (1, -1, 2), strings::mset)
        .overwrites(Overwrites::Always)
        .doc(
            STRING,
            "1.0.1",
            "O(N) where N is the number of keys to set.",
            concat!(
                "Atomically creates or modifies the string values of one or more ",
                "keys."
            ),
        )
        .args(&[Arg::block("data", &[Arg::key("key"), Arg::string("value")]).multiple()]),
    cmd("strlen", 2, &[Readonly, Fast], ONE_KEY, strings::strlen)
        .doc(
            STRING,
            "2.2.0",
            "O(1)",
            "Returns the length of a string value.",
        )
        .args(&[Arg::key("key")]),
    cmd(
        "append",
        3,
        &[Write, Denyoom, Fast],
        ONE_KEY,
        strings::append,
    )
    .doc(
        STRING,
        "2.0.0",
        concat!(
            "O(1). The amortized time complexity is O(1) assuming the appended ",
            "value is small and the already present value is of any size, since ",
            "the dynamic string library used by Redis will double the free ",
            "space available on every reallocation."
        ),
        concat!(
            "Appends a string to the value of a key. Creates the key if it ",
            "doesn't exist."
        ),
    )
    .args(&[Arg::key("key"), Arg::string("value")]),
    cmd("incr", 2, &[Write, Denyoom, Fast], ONE_KEY, strings::incr)
        .doc(
            STRING,
            "1.0.0",
            "O(1)",
            concat!(
                "Increments the integer value of a key by one. Uses 0 as initial ",
                "value if the key doesn't exist."
            ),
        )
        .args(&[Arg::key("key")]),
    cmd("decr", 2, &[Write, Denyoom, Fast], ONE_KEY, strings::decr)
        .doc(
            STRING,
            "1.0.0",
            "O(1)",
            concat!(
                "Decrements the integer value of a key by one. Uses 0 as initial ",
                "value if the key doesn't exist."
            ),
        )
        .args(&[Arg::key("key")]),
    cmd(
        "incrby",
        3,
        &[Write, Denyoom, Fast],
        ONE_KEY,
        strings::incrby,
    )
    .doc(
        STRING,
        "1.0.0",
        "O(1)",
        concat!(
            "Increments the integer value of a key by a number. Uses 0 as ",
            "initial value if the key doesn't exist."
        ),
    )
    .args(&[Arg::key("key"), Arg::integer("increment")]),
    cmd(
        "decrby",
        3,
        &[Write, Denyoom, Fast],
        ONE_KEY,
        strings::decrby,
    )
    .doc(
        STRING,
        "1.0.0",
        "O(1)",
        concat!(
            "Decrements a number from the integer value of a key. Uses 0 as ",
            "initial value if the key doesn't exist."
        ),
    )
    .args(&[Arg::key("key"), Arg::integer("decrement")]),
    cmd("del", -2, &[Write], ALL_KEYS, keys::del)
        .doc(
            GENERIC,
            "1.0.0",
            concat!(
                "O(N) where N is the number of keys that will be removed. When a ",
                "key to remove holds a value other than a string, the individual ",
                "complexity for this key is O(M) where M is the number of elements ",
                "in the list, set, sorted set or hash. Removing a single key that ",
                "holds a string value is O(1)."
            ),
            "Deletes one or more keys.",
        )
        .args(&[Arg::key("key").multiple()]),
    cmd("unlink", -2, &[Write, Fast], ALL_KEYS, keys::del)
        .doc(
            GENERIC,
            "4.0.0",
            concat!(
                "O(1) for each key removed regardless of its size. Then the command ",
                "does O(N) work in a different thread in order to reclaim memory, ",
                "where N is the number of allocations the deleted objects where ",
                "composed of."
            ),
            "Asynchronously deletes one or more keys.",
        )
        .args(&[Arg::key("key").multiple()]),
    cmd("exists", -2, &[Readonly, Fast], ALL_KEYS, keys::exists)
        .doc(
            GENERIC,
            "1.0.0",
            "O(N) where N is the number of keys to check.",
            "Determines whether one or more keys exist.",
        )
        .args(&[Arg::key("key").multiple()]),
    cmd("type", 2, &[Readonly, Fast], ONE_KEY, keys::type_)
        .doc(
            GENERIC,
            "1.0.0",
            "O(1)",
            "Determines the type of value stored at a key.",
        )
        .args(&[Arg::key("key")]),
    cmd("expire", -3, &[Write, Fast], ONE_KEY, keys::expire)
        .doc(
            GENERIC,
            "1.0.0",
            "O(1)",
            "Sets the expiration time of a key in seconds.",
        )
        .args(&[Arg::key("key"), Arg::integer("seconds"), EXPIRE_CONDITION]),
    cmd("pexpire", -3, &[Write, Fast], ONE_KEY, keys::pexpire)
        .doc(
            GENERIC,
            "2.6.0",
            "O(1)",
            "Sets the expiration time of a key in milliseconds.",
        )
        .args(&[
            Arg::key("key"),
            Arg::integer("milliseconds"),
            EXPIRE_CONDITION,
        ]),
    cmd("ttl", 2, &[Readonly, Fast], ONE_KEY, keys::ttl)
        .doc(
            GENERIC,
            "1.0.0",
            "O(1)",
            "Returns the expiration time in seconds of a key.",
        )
        .args(&[Arg::key("key")]),
    cmd("pttl", 2, &[Readonly, Fast], ONE_KEY, keys::pttl)
        .doc(
            GENERIC,
            "2.6.0",
            "O(1)",
            "Returns the expiration time in milliseconds of a key.",
        )
        .args(&[Arg::key("key")]),
    cmd("persist", 2, &[Write, Fast], ONE_KEY, keys::persist)
        .doc(
            GENERIC,
            "2.2.0",
            "O(1)",
            "Removes the expiration time of a key.",
        )
        .args(&[Arg::key("key")]),
    cmd("keys", 2, &[Readonly], NO_KEYS, keys::keys)
        .tier(TierRole::AskParent)
        .walks(Walks::Keys)
        .doc(
            GENERIC,
            "1.0.0",
            concat!(
                "O(N) with N being the number of keys in the database, under the ",
                "assumption that the key names in the database and the given ",
                "pattern have limited length."
            ),
            "Returns all key names that match a pattern.",
        )
        .args(&[Arg::pattern("pattern")]),
    cmd("scan", -2, &[Readonly], NO_KEYS, keys::scan)
        .tier(TierRole::AskParent)
        .walks(Walks::Scan)
        .doc(
            GENERIC,
            "2.8.0",
            concat!(
                "O(1) for every call. O(N) for a complete iteration, including ",
                "enough command calls for the cursor to return back to 0. N is the ",
                "number of elements inside the collection."
            ),
            "Iterates over the key names in the database.",
        )
        .args(&[
            Arg::integer("cursor"),
            Arg::pattern("pattern").after("MATCH").optional(),
            Arg::integer("count").after("COUNT").optional(),
            Arg::string("type").after("TYPE").optional().since("6.0.0"),
        ]),
    cmd("cluster", -2, &[], NO_KEYS, cluster::cluster)
        .doc(
            CLUSTER,
            "3.0.0",
            "Depends on subcommand.",
            "A container for Redis Cluster commands.",
        )
        .container(),
    cmd("asking", 1, &[Fast], NO_KEYS, cluster::asking).doc(
        CLUSTER,
        "3.0.0",
        "O(1)",
        "Signals that a cluster client is following an -ASK redirect.",
    ),
    cmd(
        "readonly",
        1,
        &[Loading, Stale, Fast],
        NO_KEYS,
        cluster::readonly,
    )
    .doc(
        CLUSTER,
        "3.0.0",
        "O(1)",
        concat!(
            "Enables read-only queries for a connection to a Redis Cluster ",
            "replica node."
        ),
    ),
    cmd(
        "readwrite",
        1,
        &[Loading, Stale, Fast],
        NO_KEYS,
        cluster::readonly,
    )
    .doc(
        CLUSTER,
        "3.0.0",
        "O(1)",
        concat!(
            "Enables read-write queries for a connection to a Redis Cluster ",
            "replica node."
        ),
    ),
    cmd("pliant.cluster", 1, &[], NO_KEYS, cluster::pliant_cluster).doc(
        PLIANT,
        PLIANT_SINCE,
        "O(N) where N is the number of members and slot ranges",
        concat!(
            "Returns this node's view of its cluster as JSON: itself, its ",
            "coordination store, the slot map and the members."
        ),
    ),
    // A slot move's steps: keyless here, so the routing they exist to get around does not apply.
    cmd(
        "pliant.slotkeys",
        -4,
        &[Readonly, NoMulti],
        NO_KEYS,
        cluster::slotkeys,
    )
    .doc(
        PLIANT,
        PLIANT_SINCE,
        "O(S + M log N) where S is the number of slots given, M the number of keys returned and N the slot's keys",
        concat!(
            "Returns up to count keys of the given slots with their values and ",
            "expiries, walking on from the token of an earlier call: what a ",
            "slot move copies."
        ),
    )
    .args(&[
        Arg::integer("count"),
        Arg::string("after"),
        Arg::integer("slot").multiple(),
    ]),
    cmd("pliant.slotstats", 1, &[], NO_KEYS, cluster::slotstats).doc(
        PLIANT,
        PLIANT_SINCE,
        "O(16384), one step a slot",
        concat!(
            "Returns the keys, bytes and keyed commands of every slot this node ",
            "has keys in or has served: what a rescale plans with."
        ),
    ),
    cmd("pliant.load", 1, &[Fast], NO_KEYS, cluster::load).doc(
        PLIANT,
        PLIANT_SINCE,
        "O(1)",
        concat!(
            "Returns how many keyed commands this node has run since it ",
            "started: what balancers read its load from."
        ),
    ),
    cmd("pliant.balancer", -2, &[Admin], NO_KEYS, cluster::balancer)
        .doc(
            PLIANT,
            PLIANT_SINCE,
            "O(1), except LOAD, which checks the policy first",
            concat!(
                "Sets the cluster's balancer policy, makes the one before it ",
                "current again, or returns what this node's balancer has decided."
            ),
        )
        .args(&[Arg::one_of(
            "subcommand",
            &[
                Arg::block("load", &[Arg::string("record")]).after("LOAD"),
                Arg::token("rollback", "ROLLBACK"),
                Arg::token("status", "STATUS"),
                Arg::block("log", &[Arg::integer("count").optional()]).after("LOG"),
            ],
        )]),
    cmd(
        "pliant.slotcount",
        -2,
        &[Readonly],
        NO_KEYS,
        cluster::slotcount,
    )
    .doc(
        PLIANT,
        PLIANT_SINCE,
        "O(S) where S is the number of slots given",
        concat!(
            "Returns how many keys of the given slots this node holds, counted ",
            "under one hold of the keyspace: what a slot move checks before it ",
            "gives the slots away."
        ),
    )
    .args(&[Arg::integer("slot").multiple()]),
    cmd(
        "pliant.restore",
        -4,
        &[Write, Denyoom, NoMulti],
        NO_KEYS,
        cluster::restore,
    )
    .doc(
        PLIANT,
        PLIANT_SINCE,
        "O(N) where N is the number of keys given",
        concat!(
            "Writes a slot move's copies of keys here while their slots move ",
            "here, over no key a client wrote here since; MAPVERSION names the ",
            "move, and a batch of a move that is over is refused (-MOVEOVER)."
        ),
    )
    .args(RESTORE_ARGS),
    cmd("pliant.migrate", -5, &[Write, NoMulti], NO_KEYS, migrate::migrate)
        .with(Fact::Streams(Stream::Migrate))
        .doc(
            PLIANT,
            PLIANT_SINCE,
            "O(N) where N is the number of keys sent",
            concat!(
                "Streams the given slots' keys to the node the slot map moves them ",
                "to, in batches of batch-bytes, deleting each here once the target has ",
                "it, for about half a second from the token of an earlier call: a slot ",
                "move's copy, node to node."
            ),
        )
        .args(&[
            Arg::string("target"),
            Arg::integer("batch-bytes"),
            Arg::string("after"),
            Arg::integer("slot").multiple(),
        ]),
    cmd(
        "pliant.netprobe",
        3,
        &[Admin, NoMulti],
        NO_KEYS,
        netprobe::netprobe,
    )
    .with(Fact::Streams(Stream::NetProbe))
    .doc(
        PLIANT,
        PLIANT_SINCE,
        "O(N) where N is the number of bytes",
        concat!(
            "Returns how many bytes a second this node sends another node of its ",
            "cluster, one way: the median of three echoes of the given size (64 KiB ",
            "to 16 MiB). What a rescale's transfer time is planned with."
        ),
    )
    .args(&[Arg::string("node"), Arg::integer("bytes")]),
    cmd("pliant.delifeq", -4, &[Write, NoMulti], NO_KEYS, cluster::delifeq)
        .doc(
            PLIANT,
            PLIANT_SINCE,
            "O(N) where N is the number of keys given",
            concat!(
                "Deletes each key given that still has the value and expiry given: ",
                "the end of a slot move's batch at its source."
            ),
        )
        .args(MOVED_KEYS),
    cmd("pliant.policy", -2, &[Admin], NO_KEYS, pliant::policy)
        .doc(
            PLIANT,
            PLIANT_SINCE,
            "O(1), except LOAD, which runs the policy once first",
            concat!(
                "Loads a policy that sizes the memory tier, rolls back to the one ",
                "before it, or returns its status or its latest decisions."
            ),
        )
        .args(&[Arg::one_of(
            "subcommand",
            &[
                Arg::block(
                    "load",
                    &[
                        Arg::string("name"),
                        Arg::string("source"),
                        Arg::string("param").optional().multiple(),
                    ],
                )
                .after("LOAD"),
                Arg::block(
                    "load-auto",
                    &[
                        Arg::token("auto", "AUTO"),
                        Arg::string("param").optional().multiple(),
                    ],
                )
                .after("LOAD"),
                Arg::token("rollback", "ROLLBACK"),
                Arg::token("status", "STATUS"),
                Arg::block("log", &[Arg::integer("count").optional()]).after("LOG"),
            ],
        )]),
    cmd("pliant.progress", -2, &[Fast], NO_KEYS, pliant::progress)
        .doc(
            PLIANT,
            PLIANT_SINCE,
            "O(1)",
            concat!(
                "Reports the application's progress (INCRBY or SET a number, or GET it), ",
                "which the node's policy sees as progress and progress_per_s."
            ),
        )
        .args(&[Arg::one_of(
            "subcommand",
            &[
                Arg::block("incrby", &[Arg::string("increment")]).after("INCRBY"),
                Arg::block("set", &[Arg::string("value")]).after("SET"),
                Arg::token("get", "GET"),
            ],
        )]),
    cmd("pliant.stats", 1, &[Fast], NO_KEYS, pliant::stats)
        .with(Fact::ReadsCounts)
        .walks(Walks::Counts)
        .doc(
            PLIANT,
            PLIANT_SINCE,
            "O(1)",
            "Returns the node's counters as one JSON object.",
        ),
    cmd("pliant.fetch", 2, &[Readonly, Fast], ONE_KEY, pliant::fetch)
        .doc(
            PLIANT,
            PLIANT_SINCE,
            "O(1)",
            concat!(
                "Returns a key's value and expiry: what a child tier asks its ",
                "parent on a miss."
            ),
        )
        .args(&[Arg::key("key")]),
    cmd("pliant.tier", -1, &[Fast], NO_KEYS, pliant::tier).doc(
        PLIANT,
        PLIANT_SINCE,
        "O(1)",
        concat!(
            "Makes this connection, which tracks keys, a child tier: writes ",
            "that invalidate its keys wait until it has applied them."
        ),
    ),
    cmd(
        "pliant.invalidated",
        3,
        &[Fast],
        NO_KEYS,
        pliant::invalidated,
    )
    .doc(
        PLIANT,
        PLIANT_SINCE,
        "O(1)",
        concat!(
            "Says that a child tier's connection has applied its first n ",
            "invalidations."
        ),
    )
    .args(&[Arg::integer("client"), Arg::integer("count")]),
    cmd("pliant.report", 3, &[Fast], NO_KEYS, pliant::report)
        .doc(
            PLIANT,
            PLIANT_SINCE,
            "O(N) where N is the number of metrics",
            concat!(
                "Records a child tier's metrics for this node's policy, and returns ",
                "this node's own."
            ),
        )
        .args(&[Arg::string("id"), Arg::string("metrics")]),
    cmd("pliant.write", -2, &[], NO_KEYS, pliant::write)
        .tier(TierRole::ChildWrite)
        .doc(
            PLIANT,
            PLIANT_SINCE,
            "Depends on the command carried.",
            concat!(
                "Runs a write sent by a child tier, and returns its reply with the ",
                "ticket of its acknowledgement."
            ),
        )
        .args(&[
            Arg::string("command"),
            Arg::string("arg").optional().multiple(),
        ]),
];

impl Spec {
    /// The arguments of a request for this command (`args[0]` its name) that are keys.
    pub fn keys_of<'a>(&self, args: &'a [Bytes]) -> impl Iterator<Item = &'a Bytes> + Clone {
        let (first, last, step) = self.keys;
        let n = args.len() as i64;
        let last = if last < 0 { n + last } else { last.min(n - 1) };
        let (first, step) = if first == 0 {
            (1, 1)
        } else {
            (first, step.max(1))
        };
        let end = if self.keys.0 == 0 { 0 } else { last + 1 };
        (first..end.max(first))
            .step_by(step as usize)
            .filter_map(move |i| args.get(i as usize))
    }
}

/// The command named `name` (any case).
pub fn lookup(name: &[u8]) -> Option<&'static Spec> {
    static BY_NAME: std::sync::OnceLock<
        std::collections::HashMap<&'static [u8], &'static Spec, foldhash::fast::FixedState>,
    > = std::sync::OnceLock::new();
    let table = BY_NAME.get_or_init(|| TABLE.iter().map(|c| (c.name.as_bytes(), c)).collect());
    // Every name is short: lowercase it on the stack rather than allocate per request.
    let mut lower = [0u8; 24];
    let lower = lower.get_mut(..name.len())?;
    for (l, c) in lower.iter_mut().zip(name) {
        *l = c.to_ascii_lowercase();
    }
    table.get(&*lower).copied()
}

/// Over a store, walks what `spec` with these arguments (its name first) would walk of it under
/// the keyspace lock, off the lock and on the blocking pool (see `Node::walk_store`), at `now`;
/// `None` if it walks nothing, or if its arguments are wrong (the command answers that).
pub(crate) async fn walk_ahead(
    node: &Node,
    spec: &Spec,
    args: &[Bytes],
    now: u64,
) -> Option<Walked> {
    let rest = args.get(1..).unwrap_or_default();
    match spec.facts.walks {
        Walks::No => None,
        Walks::CountsIfShown(section) if !server::shown(rest, section) => None,
        Walks::Counts | Walks::CountsIfShown(_) => node
            .walk_store(move |s| crate::keyspace::count_store(s, now))
            .await
            .map(Walked::Counts),
        Walks::Scan => {
            let a = keys::scan_args(node, rest).ok()?;
            node.walk_store(move |s| {
                crate::keyspace::scan_store(s, a.after.as_deref(), a.count, now, &|k| a.matches(k))
            })
            .await
            .map(Walked::Keys)
        }
        Walks::Keys => {
            let pattern = rest.first()?.clone();
            node.walk_store(move |s| {
                let matches = |k: &[u8]| crate::glob::glob_match(&pattern, k);
                // One snapshot of every key, as KEYS under the lock sees.
                crate::keyspace::scan_store(s, None, usize::MAX, now, &matches)
            })
            .await
            .map(Walked::Keys)
        }
    }
}

/// Runs one request (`args[0]` is the command's name) and returns its reply.
pub fn execute(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    // ASKING lasts one command, whatever becomes of it.
    let asking = std::mem::take(&mut ctx.session.asking);
    if ctx.session.multi.is_some()
        && let Some(queued) = multi::queue(ctx, args, asking)
    {
        return queued;
    }
    let spec = match ctx.checked.take() {
        Some(spec) => spec,
        None => match check(ctx.session, args) {
            Ok(spec) => spec,
            Err(reply) => return rejected(ctx.node, args, reply),
        },
    };
    if ctx.session.refuses_while_subscribed(spec) {
        return Frame::error(format!(
            "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
            spec.name
        ));
    }
    // EXEC holds it exclusively itself.
    let _shared = (!spec.facts.gate_itself).then(|| ctx.node.exec_shared());
    // Held from the routing decision to the end of the command, so a slot move cannot take a
    // key away between the two (see `cluster::Cluster::gate`).
    let mut _gate = None;
    if let Some(c) = ctx.node.cluster()
        && spec.keys.0 != 0
    {
        _gate = Some(c.gate());
        if let Some(redirect) = cluster::route(ctx, spec, args, asking) {
            return redirect;
        }
        if let Some(key) = spec.keys_of(args).next() {
            c.count_op(crate::cluster::key_slot(key));
        }
    }
    // One call, inlined: a call of its own cost 5% of a pipelined GET's instructions.
    run(ctx, spec, args)
}

/// What Redis checks before it runs a request: a known command, authentication, arity. The
/// command's spec, or the error reply.
pub fn check(session: &Session, args: &[Bytes]) -> Result<&'static Spec, Frame> {
    let Some(name) = args.first() else {
        return Err(Frame::error("ERR empty command"));
    };
    let Some(spec) = lookup(name) else {
        return Err(unknown(name, &args[1..]));
    };
    if !session.authenticated && !spec.flags.has(Flag::NoAuth) {
        return Err(Frame::error("NOAUTH Authentication required."));
    }
    let n = args.len() as i64;
    let arity = i64::from(spec.arity);
    if (arity > 0 && n != arity) || (arity < 0 && n < -arity) {
        return Err(wrong_arity(spec.name));
    }
    Ok(spec)
}

/// Runs a request [`check`] passed, here.
// Inlined into `execute`, its one caller per request (see there).
#[inline(always)]
pub fn run(ctx: &mut Ctx<'_>, spec: &Spec, args: &[Bytes]) -> Frame {
    if spec.writes() {
        ctx.session.wrote = true;
    }
    if spec.facts.reads_counts {
        ctx.session.settle(ctx.node);
    }
    ctx.session.counts.command();
    let node = ctx.node;
    // A FLUSHDB changes the watched keys that exist when it runs, and no others.
    let flushed = (node.watching() && spec.facts.every_key).then(|| {
        let mut ks = node.keyspace();
        let now = ctx.now;
        node.watched_keys()
            .into_iter()
            .filter(|k| ks.exists(k, now).unwrap_or(true))
            .collect::<Vec<_>>()
    });
    // The clock was 9% of a pipelined GET's profile with two reads a command: one read, the
    // command's end, which starts the next. Its time includes reading its request.
    let index = spec.index();
    let started = *ctx.session.mark.get_or_insert_with(crate::node::mono_ns);
    match (&ctx.session.client, spec.facts.reads_counts) {
        // CLIENT LIST shows the connection that asks running CLIENT LIST, as Redis does.
        (Some(c), true) => c.ran(index, started),
        _ => ctx.session.counts.last = Some((index, started)),
    }
    let reply = (spec.run)(ctx, &args[1..]);
    let ended = crate::node::mono_ns();
    ctx.session.mark = Some(ended);
    ctx.session.counts.call(
        index,
        ended.saturating_sub(started) / 1000,
        matches!(reply, Frame::Error(_)),
    );
    if spec.writes() && node.watching() {
        match &flushed {
            Some(keys) => node.touch(keys.iter()),
            None => node.touch(spec.keys_of(args)),
        }
    }
    track(ctx, spec, args);
    reply
}

/// Counts a known command refused by [`check`] (`INFO commandstats`' `rejected_calls`), and
/// returns the refusal.
pub(crate) fn rejected(node: &Node, args: &[Bytes], reply: Frame) -> Frame {
    if let Some(spec) = args.first().and_then(|n| lookup(n)) {
        node.count_rejected(spec.index());
    }
    reply
}

/// What a connection leaves behind when it closes: the keys it watched.
pub(crate) fn closed(node: &Node, session: &mut Session) {
    multi::unwatch_all(&mut Ctx::new(node, session, 0));
}

/// Tells the tracking table what a command read or changed (see [`crate::tracking`]).
pub fn track(ctx: &mut Ctx<'_>, spec: &Spec, args: &[Bytes]) {
    let tracking = ctx.node.tracking();
    if !tracking.active() {
        return;
    }
    let id = ctx.session.id;
    if spec.writes() {
        let waits = if spec.facts.every_key {
            tracking.wrote_all(id)
        } else {
            tracking.wrote(id, spec.keys_of(args))
        };
        ctx.session.awaiting.extend(waits);
    } else if ctx.session.pushes.is_some() || ctx.session.redirect.is_some() {
        tracking.read(id, spec.keys_of(args));
    }
}

/// Redis's reply to a command it does not know, quoting the first arguments.
fn unknown(name: &[u8], rest: &[Bytes]) -> Frame {
    let quoted: String = rest
        .iter()
        .take(20)
        .map(|a| format!("'{}' ", String::from_utf8_lossy(a)))
        .collect();
    Frame::error(format!(
        "ERR unknown command '{}', with args beginning with: {quoted}",
        String::from_utf8_lossy(name)
    ))
}

/// Redis's reply to a command given the wrong number of arguments.
pub fn wrong_arity(name: &str) -> Frame {
    Frame::error(format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

/// Redis's reply to a malformed option list.
pub fn syntax_error() -> Frame {
    Frame::error("ERR syntax error")
}

/// Redis's reply to an argument that must be an integer and is not.
pub fn not_an_integer() -> Frame {
    Frame::error("ERR value is not an integer or out of range")
}

/// Parses an integer argument as Redis does (no spaces, no `+`, within `i64`).
pub fn integer(arg: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(arg).ok()?;
    if s.is_empty() || s.starts_with('+') || s.len() > 20 {
        return None;
    }
    s.parse().ok()
}

/// The reply to a store failure: the command had no effect, and the client is told why.
pub fn store_error(e: &crate::KvError) -> Frame {
    if let crate::KvError::OutOfMemory | crate::KvError::TooLarge { .. } = e {
        // The client's to handle, as with Redis: not the node's failure.
        return Frame::error(e.to_string());
    }
    // The store's cause (an I/O error, the first failure of a poisoned store) is a source.
    let e = pliant_proto::error::chain(e);
    tracing::error!("{e}");
    Frame::error(format!("ERR {e}"))
}

/// Whether a write command would make an entry a pure cache of a byte capacity can hold
/// nowhere (see [`crate::Keyspace::would_oom`]), estimated from its arguments: its keys and its
/// longest argument (the value, for the string commands). What Redis checks before it queues a
/// `denyoom` command, and at EXEC.
pub(crate) fn would_oom(node: &Node, spec: &Spec, args: &[Bytes]) -> bool {
    if !spec.flags.has(Flag::Denyoom) {
        return false;
    }
    let keys: usize = spec.keys_of(args).map(|k| k.len()).sum();
    let value = args.iter().skip(1).map(|a| a.len()).max().unwrap_or(0);
    node.keyspace().would_oom((keys + value) as u64)
}

/// `$-1` or the value.
pub fn bulk_or_null(v: Option<Bytes>) -> Frame {
    v.map_or(Frame::Null, Frame::Bulk)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_is_found_by_its_name_in_any_case() {
        for c in COMMANDS {
            for name in [c.name.to_string(), c.name.to_ascii_uppercase()] {
                assert_eq!(
                    lookup(name.as_bytes()).map(|s| s.name),
                    Some(c.name),
                    "{name}"
                );
            }
        }
        assert!(lookup(b"nosuchcommand").is_none());
        assert!(lookup(b"a-name-longer-than-any-command").is_none());
    }

    /// Over a store, a write that replaces its keys' values whole reads nothing of them first
    /// (a plain SET of a key memory lacks costs no store read); every other keyed command does.
    #[test]
    fn only_plain_overwrites_skip_reading_their_keys() {
        let reads = |cmd: &[&str]| {
            let args: Vec<Bytes> = cmd
                .iter()
                .map(|a| Bytes::copy_from_slice(a.as_bytes()))
                .collect();
            lookup(&args[0]).expect("a command").reads_keys(&args)
        };
        for blind in [
            &["set", "k", "v"][..],
            &["SET", "k", "v", "EX", "10"],
            &["set", "k", "GET"],
            &["setex", "k", "10", "v"],
            &["psetex", "k", "10", "v"],
            &["mset", "a", "1", "b", "2"],
        ] {
            assert!(!reads(blind), "{blind:?}");
        }
        for reading in [
            &["get", "k"][..],
            &["set", "k", "v", "NX"],
            &["set", "k", "v", "xx"],
            &["set", "k", "v", "EX", "10", "GET"],
            &["set", "k", "v", "KEEPTTL"],
            &["getset", "k", "v"],
            &["incr", "k"],
            &["del", "k"],
            &["mget", "a", "b"],
            &["exists", "a", "b"],
        ] {
            assert!(reads(reading), "{reading:?}");
        }
    }

    /// What the node knows of a command beyond Redis's flags is in the table: the commands
    /// that were picked out by name in leaf.rs, multi.rs and here.
    #[test]
    fn the_facts_once_matched_by_name_are_in_the_table() {
        let with = |f: fn(&Facts) -> bool| {
            let mut names: Vec<&str> = COMMANDS
                .iter()
                .filter(|c| f(&c.facts))
                .map(|c| c.name)
                .collect();
            names.sort_unstable();
            names
        };
        assert_eq!(with(|f| f.every_key), ["flushall", "flushdb"]);
        assert_eq!(
            with(|f| f.acts_in_multi),
            ["discard", "exec", "multi", "quit", "watch"]
        );
        assert_eq!(
            with(|f| f.while_subscribed),
            ["ping", "quit", "subscribe", "unsubscribe"]
        );
        assert_eq!(with(|f| f.gate_itself), ["exec"]);
        // These take the move gate exclusively, which EXEC holds shared while its commands
        // run: queued in a transaction, one would wait on its own connection's lock forever.
        for name in [
            "pliant.delifeq",
            "pliant.migrate",
            "pliant.restore",
            "pliant.slotkeys",
        ] {
            let spec = lookup(name.as_bytes()).expect(name);
            assert!(
                spec.flags.has(Flag::NoMulti),
                "{name} may be queued in MULTI"
            );
        }
        assert_eq!(
            with(|f| f.streams.is_some()),
            ["pliant.migrate", "pliant.netprobe"]
        );
        // What waits on another node runs before the command, which a queued one never does.
        for name in ["pliant.migrate", "pliant.netprobe"] {
            let spec = lookup(name.as_bytes()).expect(name);
            assert!(
                spec.flags.has(Flag::NoMulti),
                "{name} may be queued in MULTI"
            );
        }
        assert_eq!(
            with(|f| f.walks != Walks::No),
            ["dbsize", "info", "keys", "pliant.stats", "scan"]
        );
        assert_eq!(
            with(|f| f.tier == TierRole::AskParent),
            ["dbsize", "keys", "scan"]
        );
        assert_eq!(with(|f| f.tier == TierRole::Put), ["set"]);
        assert_eq!(with(|f| f.tier == TierRole::ChildWrite), ["pliant.write"]);
    }

    /// The index a command's counters are kept under is its place in the table, whether its
    /// spec came from `lookup` (found by address) or is a copy (found by name).
    #[test]
    fn a_commands_index_is_its_place_in_the_table() {
        for (i, c) in COMMANDS.iter().enumerate() {
            let found = lookup(c.name.as_bytes()).expect("found");
            assert_eq!(found.index(), i, "{}", c.name);
            assert_eq!(c.index(), i, "{}", c.name);
        }
    }

    /// `COMMAND DOCS` never says less than Redis always says (summary, since, group), and the
    /// arguments it lists take as many request arguments as the arity allows: the fewest they
    /// take is the arity's least, and a fixed arity allows no more. Containers, whose
    /// subcommands are not documented, list none.
    #[test]
    fn every_command_is_documented_with_arguments_that_fit_its_arity() {
        for c in COMMANDS {
            let d = &c.docs;
            assert!(
                !d.summary.is_empty() && !d.since.is_empty() && !d.group.is_empty(),
                "{}",
                c.name
            );
            assert!(!d.complexity.is_empty(), "{}", c.name);
            if d.container {
                assert!(d.args.is_empty() && c.arity == -2, "{}", c.name);
                continue;
            }
            let (min, max) = Arg::block("all", d.args).span();
            let least = usize::try_from(c.arity.unsigned_abs()).expect("arity") - 1;
            assert_eq!(min, least, "{}: fewest arguments", c.name);
            if c.arity > 0 {
                assert_eq!(max, Some(least), "{}: most arguments", c.name);
            }
            // A command with keys documents a key, and one without none.
            let keyed = d.args.iter().any(mentions_key);
            assert_eq!(keyed, c.keys.0 != 0, "{}: key arguments", c.name);
        }
    }

    fn mentions_key(a: &Arg) -> bool {
        match a.kind {
            docs::Kind::Key => true,
            docs::Kind::OneOf(args) | docs::Kind::Block(args) => args.iter().any(mentions_key),
            _ => false,
        }
    }

    /// What runs before AUTH is what Redis flags `no_auth` (RESET aside, which is not here).
    #[test]
    fn only_auth_hello_and_quit_run_before_auth() {
        let before: Vec<&str> = COMMANDS
            .iter()
            .filter(|c| c.flags.has(Flag::NoAuth))
            .map(|c| c.name)
            .collect();
        assert_eq!(before, ["auth", "hello", "quit"]);
        let session = Session::default();
        for c in COMMANDS {
            let args: Vec<Bytes> = std::iter::once(Bytes::from_static(c.name.as_bytes()))
                .chain(std::iter::repeat_n(Bytes::from_static(b"x"), 3))
                .collect();
            let refused =
                matches!(check(&session, &args), Err(Frame::Error(e)) if e.starts_with("NOAUTH"));
            assert_eq!(refused, !before.contains(&c.name), "{}", c.name);
        }
    }
}
