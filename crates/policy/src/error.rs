//! The engine's typed errors: what went wrong, in which callback, and where in the policy source.

use std::path::PathBuf;

use crate::Callback;

/// Where in a policy's source an error arose, as Lua reports it (`when.lua:12`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The chunk name: the policy file's name, or `policy` for in-memory source.
    pub chunk: String,
    /// 1-based line number.
    pub line: u32,
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.chunk, self.line)
    }
}

/// Shows an optional location as `file:line: ` or nothing.
pub(crate) struct At<'a>(pub &'a Option<Location>);

impl std::fmt::Display for At<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(l) => write!(f, "{l}: "),
            None => Ok(()),
        }
    }
}

/// Shows where a syntax error is: `file:line: syntax error`, or `syntax error in file` when Lua
/// gave no line.
struct Within<'a>(&'a str, &'a Option<Location>);

impl std::fmt::Display for Within<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.1 {
            Some(l) => write!(f, "{l}: syntax error"),
            None => write!(f, "syntax error in {}", self.0),
        }
    }
}

/// Everything that can go wrong while loading, installing or evaluating a policy.
///
/// Every variant that comes from running Lua names the callback and, where Lua knows it, the
/// `file:line` of the fault. The engine keeps serving its last good policy after any of them.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// A policy file or directory could not be read.
    #[error("cannot read policy {path}: {source}")]
    Read {
        /// The path that failed.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A policy named by one path that is neither a file or directory nor a shipped policy.
    #[error(
        "{}: no such file, and not a shipped policy (shipped: {})",
        path.display(),
        crate::shipped::NAMES.join(", ")
    )]
    NotFound {
        /// The path, or name, given.
        path: PathBuf,
    },
    /// The files given do not form a policy (unknown chunk name, nothing defined, duplicates).
    #[error("not a policy: {0}")]
    Shape(String),
    /// The Lua source does not compile.
    // The location names the chunk already: "syn.lua:3: syntax error in syn.lua" said it twice.
    #[error("{}: {message}", Within(chunk, location))]
    Syntax {
        /// The chunk (file) that failed.
        chunk: String,
        /// Where, if Lua said.
        location: Option<Location>,
        /// Lua's message.
        message: String,
    },
    /// The policy raised an error while running.
    #[error("{}{callback} failed: {message}\n{traceback}", At(location))]
    Runtime {
        /// The callback being evaluated.
        callback: Callback,
        /// Where, if Lua said.
        location: Option<Location>,
        /// Lua's message without the location prefix.
        message: String,
        /// Lua's stack traceback.
        traceback: String,
    },
    /// The callback used more VM instructions than its budget allows.
    #[error(
        "{}{callback} exceeded its instruction budget of {budget}",
        At(location)
    )]
    Budget {
        /// The callback being evaluated.
        callback: Callback,
        /// The budget in VM instructions.
        budget: u64,
        /// Where the policy was when it was stopped.
        location: Option<Location>,
    },
    /// The policy's Lua state would have grown past its memory cap.
    #[error("{callback} exceeded the policy memory cap of {limit} bytes")]
    Memory {
        /// The callback being evaluated.
        callback: Callback,
        /// The cap in bytes.
        limit: usize,
    },
    /// A callback returned something that is not a decision of its kind.
    #[error("{callback} returned {got}, expected {expected}")]
    Malformed {
        /// The callback being evaluated.
        callback: Callback,
        /// What the callback must return.
        expected: &'static str,
        /// What it returned, described.
        got: String,
    },
    /// Policy state could not be read or persisted.
    #[error("policy state {path}: {source}")]
    State {
        /// The state file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Metrics or time-series input is invalid.
    #[error("{0}")]
    Input(String),
    /// No policy version with that number was ever installed.
    #[error("no policy version {0}")]
    UnknownVersion(u64),
    /// A decision was asked for before any policy was installed.
    #[error("no policy installed")]
    NoPolicy,
    /// The Lua VM itself failed (should not happen; reported rather than panicking).
    #[error("Lua VM error: {0}")]
    Vm(#[from] VmError),
}

/// A failure of the Lua VM outside a policy's own code, kept as typed as `mlua`'s error allows.
///
/// `mlua::Error` cannot cross threads (it may hold a non-`Send` error), and the simulations run
/// policies on worker threads, so this is its sendable image: the kind to match on, the message,
/// and the chain of causes as further `VmError`s, which [`std::error::Error::source`] walks.
#[derive(Debug, Clone, PartialEq)]
pub struct VmError {
    /// What failed.
    pub kind: VmErrorKind,
    /// `mlua`'s description of it.
    pub message: String,
    /// What caused it, if `mlua` said.
    pub cause: Option<Box<VmError>>,
}

impl std::fmt::Display for VmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for VmError {
    /// The cause itself, not its box, so callers can `downcast_ref::<VmError>()` it.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause.as_deref().map(|c| c as _)
    }
}

/// The kinds of [`VmError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum VmErrorKind {
    /// Lua code did not compile.
    Syntax,
    /// Lua code raised an error.
    Runtime,
    /// An allocation failed or a memory limit was reached.
    Memory,
    /// The Lua stack could not grow.
    Stack,
    /// A Rust callback failed; `cause` says why.
    Callback,
    /// A value had the wrong type for a conversion.
    Conversion,
    /// Anything else `mlua` reports.
    Other,
}

impl From<mlua::Error> for VmError {
    fn from(e: mlua::Error) -> Self {
        use mlua::Error as E;
        let message = e.to_string();
        let (kind, cause) = match e {
            E::SyntaxError { .. } => (VmErrorKind::Syntax, None),
            E::RuntimeError(_) => (VmErrorKind::Runtime, None),
            E::MemoryError(_) => (VmErrorKind::Memory, None),
            E::StackError => (VmErrorKind::Stack, None),
            E::CallbackError { cause, .. } => (
                VmErrorKind::Callback,
                Some(Box::new(Self::from((*cause).clone()))),
            ),
            E::FromLuaConversionError { .. } | E::BadArgument { .. } => {
                (VmErrorKind::Conversion, None)
            }
            E::WithContext { cause, .. } => {
                let inner = Self::from((*cause).clone());
                (inner.kind, Some(Box::new(inner)))
            }
            _ => (VmErrorKind::Other, None),
        };
        Self {
            kind,
            message,
            cause,
        }
    }
}

impl From<mlua::Error> for PolicyError {
    fn from(e: mlua::Error) -> Self {
        Self::Vm(e.into())
    }
}

impl PolicyError {
    /// The callback this error arose in, if it came from running a callback.
    pub fn callback(&self) -> Option<Callback> {
        match self {
            Self::Runtime { callback, .. }
            | Self::Budget { callback, .. }
            | Self::Memory { callback, .. }
            | Self::Malformed { callback, .. } => Some(*callback),
            _ => None,
        }
    }

    /// The `file:line` of the fault, where known.
    pub fn location(&self) -> Option<&Location> {
        match self {
            Self::Syntax { location, .. }
            | Self::Runtime { location, .. }
            | Self::Budget { location, .. } => location.as_ref(),
            _ => None,
        }
    }
}

/// Splits Lua's `chunk:line: message` into a location and the message.
pub(crate) fn split_location(msg: &str) -> (Option<Location>, String) {
    // Lua prefixes with the chunk's short source, which for our chunks is the file name. Scan
    // for the first `:<digits>:` so that chunk names containing ':' still parse.
    let bytes = msg.as_bytes();
    let mut i = 0;
    while let Some(off) = msg[i..].find(':') {
        let colon = i + off;
        let digits_end = msg[colon + 1..]
            .find(|c: char| !c.is_ascii_digit())
            .map(|e| colon + 1 + e)
            .unwrap_or(msg.len());
        if digits_end > colon + 1
            && bytes.get(digits_end) == Some(&b':')
            && let Ok(line) = msg[colon + 1..digits_end].parse()
        {
            let chunk = msg[..colon].trim().to_string();
            let rest = msg[digits_end + 1..].trim_start().to_string();
            if !chunk.contains('\n') && !chunk.is_empty() {
                return (Some(Location { chunk, line }), rest);
            }
        }
        i = colon + 1;
    }
    (None, msg.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_chunk_line_message() {
        let (loc, msg) = split_location("when.lua:12: attempt to index a nil value");
        assert_eq!(
            loc,
            Some(Location {
                chunk: "when.lua".into(),
                line: 12
            })
        );
        assert_eq!(msg, "attempt to index a nil value");
    }

    /// A failing Rust callback reaches the caller as a matchable kind whose `source()` is the
    /// callback's own error, and the whole thing can cross threads.
    #[test]
    fn a_vm_error_keeps_its_kind_and_cause_chain() {
        fn sendable<T: Send + Sync + 'static>(_: &T) {}
        let lua = mlua::Lua::new();
        let f = lua
            .create_function(|_, ()| -> mlua::Result<()> {
                Err(mlua::Error::RuntimeError("disk on fire".into()))
            })
            .expect("function");
        let e = PolicyError::from(f.call::<()>(()).expect_err("fails"));
        sendable(&e);
        let PolicyError::Vm(vm) = &e else {
            panic!("not a VM error: {e:?}")
        };
        assert_eq!(vm.kind, VmErrorKind::Callback);
        let cause = std::error::Error::source(vm).expect("a cause");
        assert!(cause.to_string().contains("disk on fire"), "{cause}");
        assert!(matches!(
            cause.downcast_ref::<VmError>(),
            Some(VmError {
                kind: VmErrorKind::Runtime,
                ..
            })
        ));
    }

    #[test]
    fn message_without_location_is_kept_whole() {
        let (loc, msg) = split_location("boom: no line here");
        assert_eq!(loc, None);
        assert_eq!(msg, "boom: no line here");
    }
}
