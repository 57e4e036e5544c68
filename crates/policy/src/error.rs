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
    /// The files given do not form a policy (unknown chunk name, nothing defined, duplicates).
    #[error("not a policy: {0}")]
    Shape(String),
    /// The Lua source does not compile.
    #[error("{}syntax error in {chunk}: {message}", At(location))]
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
    Vm(String),
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

    #[test]
    fn message_without_location_is_kept_whole() {
        let (loc, msg) = split_location("boom: no line here");
        assert_eq!(loc, None);
        assert_eq!(msg, "boom: no line here");
    }
}
