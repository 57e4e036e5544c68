//! The decision log: every callback evaluation, kept in a bounded ring and exportable as JSON
//! lines for offline analysis.

use std::collections::VecDeque;
use std::io::Write;

use serde::Serialize;

use crate::source::Callback;

/// One callback evaluation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LogEntry {
    /// Sequence number of the decision this evaluation belongs to (0 = a dry run at install).
    pub decision: u64,
    /// Policy version.
    pub version: u64,
    /// Policy name.
    pub policy: String,
    /// The callback.
    pub callback: Callback,
    /// What it returned, as JSON (`null` on error).
    pub result: serde_json::Value,
    /// Wall time in microseconds.
    pub micros: f64,
    /// VM instructions used (counted in blocks of 1,000).
    pub instructions: u64,
    /// The error, if it failed.
    pub error: Option<String>,
    /// True for evaluations made while dry-running a candidate policy.
    pub dry_run: bool,
}

/// A bounded log: the oldest entries fall off once `capacity` is reached, so a service that runs
/// for weeks does not grow without bound.
#[derive(Debug, Clone)]
pub struct DecisionLog {
    entries: VecDeque<LogEntry>,
    capacity: usize,
    dropped: u64,
}

impl DecisionLog {
    /// A log that keeps at most `capacity` entries (0 disables logging).
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: VecDeque::new(),
            capacity,
            dropped: 0,
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.capacity > 0
    }

    pub(crate) fn push(&mut self, e: LogEntry) {
        if self.capacity == 0 {
            return;
        }
        if self.entries.len() == self.capacity {
            self.entries.pop_front();
            self.dropped += 1;
        }
        self.entries.push_back(e);
    }

    /// The entries kept, oldest first.
    pub fn entries(&self) -> impl Iterator<Item = &LogEntry> {
        self.entries.iter()
    }

    /// How many entries fell off the front.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Writes the kept entries as JSON lines.
    pub fn write_jsonl(&self, mut out: impl Write) -> std::io::Result<()> {
        for e in &self.entries {
            serde_json::to_writer(&mut out, e)?;
            out.write_all(b"\n")?;
        }
        Ok(())
    }
}
