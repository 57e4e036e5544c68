//! What `COMMAND INFO` and `COMMAND DOCS` say of a command: its flags, and its documentation
//! (summary, version, group, complexity, arguments). The facts are in [`super::COMMANDS`], each
//! beside the command they describe; this module has their types and turns them into replies.
//!
//! Redis's commands carry what Redis 7.2's command table gives them (`src/commands.def`), so a
//! client comparing the two sees the same flags and docs. `PLIANT.*` commands are this server's
//! own: their version is Pliant's, their group `pliant`, and their flags only the ones that
//! mean something here (write, readonly, denyoom, admin, fast).
//!
//! Not given, where Redis gives them: `COMMAND INFO`'s ACL categories, tips, key specs and
//! subcommands (its reply has Redis 6's six fields); `COMMAND DOCS`'s `history`,
//! `reply_schema`, `display_text` and `subcommands` (CLIENT, CONFIG and CLUSTER are documented
//! as containers, with no arguments); the flags Redis never shows (`sentinel`,
//! `may_replicate`, …) and those of features this server lacks (`blocking`,
//! `movablekeys`, …: no command here has them).

use bytes::Bytes;
use pliant_proto::frame::Frame;

/// A command flag, as `COMMAND INFO` names it; declared in the order Redis lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flag {
    /// It may change keys.
    Write,
    /// It reads keys and changes none.
    Readonly,
    /// It may use more memory (refused by Redis when over `maxmemory`).
    Denyoom,
    /// An administrative command.
    Admin,
    /// A publish/subscribe command.
    Pubsub,
    /// Not allowed in scripts.
    Noscript,
    /// Allowed while the dataset loads.
    Loading,
    /// Allowed on a replica with stale data.
    Stale,
    /// O(1) or O(log N), never blocking.
    Fast,
    /// Allowed before the client authenticates.
    NoAuth,
    /// Not allowed in a transaction.
    NoMulti,
    /// Allowed while a script or module blocks the server.
    AllowBusy,
}

impl Flag {
    /// Every flag, in the order `COMMAND INFO` lists them (Redis's).
    const ALL: [Flag; 12] = [
        Flag::Write,
        Flag::Readonly,
        Flag::Denyoom,
        Flag::Admin,
        Flag::Pubsub,
        Flag::Noscript,
        Flag::Loading,
        Flag::Stale,
        Flag::Fast,
        Flag::NoAuth,
        Flag::NoMulti,
        Flag::AllowBusy,
    ];

    /// Redis's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Flag::Write => "write",
            Flag::Readonly => "readonly",
            Flag::Denyoom => "denyoom",
            Flag::Admin => "admin",
            Flag::Pubsub => "pubsub",
            Flag::Noscript => "noscript",
            Flag::Loading => "loading",
            Flag::Stale => "stale",
            Flag::Fast => "fast",
            Flag::NoAuth => "no_auth",
            Flag::NoMulti => "no_multi",
            Flag::AllowBusy => "allow_busy",
        }
    }

    const fn bit(self) -> u16 {
        1 << self as u16
    }
}

/// A command's flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flags(u16);

impl Flags {
    /// These flags.
    pub const fn of(flags: &[Flag]) -> Flags {
        let mut bits = 0;
        let mut i = 0;
        while i < flags.len() {
            bits |= flags[i].bit();
            i += 1;
        }
        Flags(bits)
    }

    /// Whether `flag` is one of them.
    pub const fn has(self, flag: Flag) -> bool {
        self.0 & flag.bit() != 0
    }

    /// Their names, in Redis's order.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        Flag::ALL
            .into_iter()
            .filter(move |f| self.has(*f))
            .map(Flag::name)
    }
}

/// What an argument is, as `COMMAND DOCS` types it.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// A string.
    String,
    /// An integer.
    Integer,
    /// A key.
    Key,
    /// A glob-style pattern.
    Pattern,
    /// A Unix time.
    UnixTime,
    /// A literal token alone (`NX`).
    PureToken,
    /// Exactly one of these.
    OneOf(&'static [Arg]),
    /// These, in order.
    Block(&'static [Arg]),
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::String => "string",
            Kind::Integer => "integer",
            Kind::Key => "key",
            Kind::Pattern => "pattern",
            Kind::UnixTime => "unix-time",
            Kind::PureToken => "pure-token",
            Kind::OneOf(_) => "oneof",
            Kind::Block(_) => "block",
        }
    }
}

/// One argument of a command, as `COMMAND DOCS` describes it.
#[derive(Debug, Clone, Copy)]
pub struct Arg {
    /// Its name (for telling arguments apart; `token` is what a client types).
    pub name: &'static str,
    /// Its type.
    pub kind: Kind,
    /// The literal that comes before it (`EX` of `EX seconds`), or that it is.
    pub token: Option<&'static str>,
    /// The version that added it, where later than the command.
    pub since: Option<&'static str>,
    /// It may be left out.
    pub optional: bool,
    /// It may be repeated.
    pub multiple: bool,
}

impl Arg {
    const fn new(name: &'static str, kind: Kind) -> Arg {
        Arg {
            name,
            kind,
            token: None,
            since: None,
            optional: false,
            multiple: false,
        }
    }

    /// A key.
    pub const fn key(name: &'static str) -> Arg {
        Arg::new(name, Kind::Key)
    }

    /// A string.
    pub const fn string(name: &'static str) -> Arg {
        Arg::new(name, Kind::String)
    }

    /// An integer.
    pub const fn integer(name: &'static str) -> Arg {
        Arg::new(name, Kind::Integer)
    }

    /// A glob-style pattern.
    pub const fn pattern(name: &'static str) -> Arg {
        Arg::new(name, Kind::Pattern)
    }

    /// A Unix time.
    pub const fn unix_time(name: &'static str) -> Arg {
        Arg::new(name, Kind::UnixTime)
    }

    /// The literal `token` alone.
    pub const fn token(name: &'static str, token: &'static str) -> Arg {
        Arg::new(name, Kind::PureToken).after(token)
    }

    /// Exactly one of `args`.
    pub const fn one_of(name: &'static str, args: &'static [Arg]) -> Arg {
        Arg::new(name, Kind::OneOf(args))
    }

    /// `args`, in order.
    pub const fn block(name: &'static str, args: &'static [Arg]) -> Arg {
        Arg::new(name, Kind::Block(args))
    }

    /// Preceded by the literal `token`.
    pub const fn after(mut self, token: &'static str) -> Arg {
        self.token = Some(token);
        self
    }

    /// Added in `version`.
    pub const fn since(mut self, version: &'static str) -> Arg {
        self.since = Some(version);
        self
    }

    /// May be left out.
    pub const fn optional(mut self) -> Arg {
        self.optional = true;
        self
    }

    /// May be repeated.
    pub const fn multiple(mut self) -> Arg {
        self.multiple = true;
        self
    }

    /// Fewest and most request arguments it takes (`None`: no most).
    pub fn span(&self) -> (usize, Option<usize>) {
        let (mut min, mut max) = match self.kind {
            Kind::Block(args) => args.iter().map(Arg::span).fold((0, Some(0)), |a, b| {
                (a.0 + b.0, a.1.zip(b.1).map(|(x, y)| x + y))
            }),
            Kind::OneOf(args) => {
                let min = args.iter().map(|a| a.span().0).min().unwrap_or(0);
                let max = args
                    .iter()
                    .map(|a| a.span().1)
                    .try_fold(0, |m, x| x.map(|x| m.max(x)));
                (min, max)
            }
            Kind::PureToken => (0, Some(0)),
            _ => (1, Some(1)),
        };
        if self.token.is_some() {
            min += 1;
            max = max.map(|m| m + 1);
        }
        if self.multiple {
            max = None;
        }
        if self.optional {
            min = 0;
        }
        (min, max)
    }

    /// Its map in a `COMMAND DOCS` reply.
    fn reply(&self) -> Frame {
        let mut map = vec![(s("name"), s(self.name)), (s("type"), s(self.kind.name()))];
        if let Kind::Key = self.kind {
            // Every keyed command here has its keys in one range (`Spec::keys`), Redis's one
            // key spec.
            map.push((s("key_spec_index"), Frame::Integer(0)));
        }
        if let Some(t) = self.token {
            map.push((s("token"), s(t)));
        }
        if let Some(v) = self.since {
            map.push((s("since"), s(v)));
        }
        let flags: Vec<Frame> = [(self.optional, "optional"), (self.multiple, "multiple")]
            .into_iter()
            .filter(|(on, _)| *on)
            .map(|(_, f)| Frame::Simple(f.into()))
            .collect();
        if !flags.is_empty() {
            map.push((s("flags"), Frame::Set(flags)));
        }
        if let Kind::OneOf(args) | Kind::Block(args) = self.kind {
            map.push((s("arguments"), args_reply(args)));
        }
        Frame::Map(map)
    }
}

/// A command's documentation.
#[derive(Debug, Clone, Copy)]
pub struct Docs {
    /// One sentence.
    pub summary: &'static str,
    /// The version that added it (Redis's, or Pliant's for `PLIANT.*`).
    pub since: &'static str,
    /// Its group (`string`, `generic`, `server`, `connection`, `cluster`, `pliant`).
    pub group: &'static str,
    /// Its time complexity.
    pub complexity: &'static str,
    /// Deprecated since this version, for what replaces it.
    pub deprecated: Option<(&'static str, &'static str)>,
    /// Its arguments, after its name.
    pub args: &'static [Arg],
    /// A container of subcommands (CLIENT, CONFIG, CLUSTER): Redis documents those one by one;
    /// here they are not documented, and neither are arguments.
    pub container: bool,
}

impl Docs {
    /// None yet.
    pub const NONE: Docs = Docs {
        summary: "",
        since: "",
        group: "",
        complexity: "",
        deprecated: None,
        args: &[],
        container: false,
    };

    /// The map `COMMAND DOCS` gives for the command, with Redis's keys in Redis's order.
    pub fn reply(&self) -> Frame {
        let mut map = vec![
            (s("summary"), s(self.summary)),
            (s("since"), s(self.since)),
            (s("group"), s(self.group)),
            (s("complexity"), s(self.complexity)),
        ];
        if let Some((since, by)) = self.deprecated {
            map.push((
                s("doc_flags"),
                Frame::Set(vec![Frame::Simple("deprecated".into())]),
            ));
            map.push((s("deprecated_since"), s(since)));
            map.push((s("replaced_by"), s(by)));
        }
        if !self.args.is_empty() {
            map.push((s("arguments"), args_reply(self.args)));
        }
        Frame::Map(map)
    }
}

fn args_reply(args: &[Arg]) -> Frame {
    Frame::Array(args.iter().map(Arg::reply).collect())
}

fn s(text: &'static str) -> Frame {
    Frame::Bulk(Bytes::from_static(text.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::Flag;

    /// `Flag::ALL` is what `COMMAND INFO` shows: a flag missing from it would never be shown.
    /// Declared in the same order, each at its own index, and as many as the variants (the
    /// last one's discriminant).
    #[test]
    fn every_flag_is_listed_once_in_declaration_order() {
        for (i, f) in Flag::ALL.into_iter().enumerate() {
            assert_eq!(f as usize, i, "{}", f.name());
        }
        assert_eq!(Flag::ALL.len(), Flag::AllowBusy as usize + 1);
        // Keeps the line above true: a new variant must be matched here, where it is also
        // put last.
        match Flag::AllowBusy {
            Flag::Write
            | Flag::Readonly
            | Flag::Denyoom
            | Flag::Admin
            | Flag::Pubsub
            | Flag::Noscript
            | Flag::Loading
            | Flag::Stale
            | Flag::Fast
            | Flag::NoAuth
            | Flag::NoMulti
            | Flag::AllowBusy => {}
        }
    }
}
