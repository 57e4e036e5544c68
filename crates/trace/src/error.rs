//! Trace errors: every one names the file and, where it applies, the line or byte offset.

use std::path::PathBuf;

/// What can go wrong reading or writing a trace.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// The file could not be opened, read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A text line is not a record of the format.
    #[error("{path}:{line}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// What is wrong, with the offending text.
        message: String,
    },
    /// A binary trace ends inside a record.
    #[error("{path}: truncated at byte {offset}: {bytes} bytes left, a record is {record} bytes")]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Offset of the partial record.
        offset: u64,
        /// Bytes of it present.
        bytes: usize,
        /// Record size.
        record: usize,
    },
    /// The format name is not known, or the format cannot be guessed.
    #[error("{message}; known formats: {}", crate::FORMATS.join(", "))]
    Format {
        /// What was asked for.
        message: String,
    },
    /// Options that do not fit the format (a CSV column that does not exist, ...).
    #[error("{0}")]
    Options(String),
}
