//! [`ReplayError`]: why a log could not be read or replayed. Parse errors give the line number,
//! what was expected and what was found.

use std::io;

use crate::error::DriverError;
use crate::mr::event_log::HEADER;

/// Why a memory event log could not be read or replayed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// Reading the log failed.
    #[error("reading the memory event log failed at line {line}: {source}")]
    Io {
        /// The line being read.
        line: usize,
        /// The I/O error.
        source: io::Error,
    },
    /// The log has no header line.
    #[error(
        "the memory event log is empty: expected the header line `{HEADER}` as RMM's \
         logging_resource_adaptor and emm's LoggingAdaptor write it"
    )]
    Empty,
    /// A line longer than any event's: not a memory event log (or a corrupt one).
    #[error(
        "line {line} is longer than {limit} bytes, and no event's line is; is this a memory \
         event log from RMM's logging_resource_adaptor or emm's LoggingAdaptor?"
    )]
    LineTooLong {
        /// The line number, from 1.
        line: usize,
        /// The longest line read.
        limit: usize,
    },
    /// The first line is not RMM's header.
    #[error(
        "line 1: expected the header `{HEADER}`, found `{found}`; is this a memory event log \
         from RMM's logging_resource_adaptor or emm's LoggingAdaptor?"
    )]
    Header {
        /// The first line as found.
        found: String,
    },
    /// A line without the six fields.
    #[error(
        "line {line}: expected 6 comma-separated fields ({HEADER}), found {found}: `{text}`{}",
        if *truncated { "; the log ends in the middle of this line: it was truncated" } else { "" }
    )]
    Fields {
        /// The line number, from 1.
        line: usize,
        /// How many fields it has.
        found: usize,
        /// The line.
        text: String,
        /// Whether it is the last line and has no newline: the log was cut short.
        truncated: bool,
    },
    /// A field that does not parse.
    #[error(
        "line {line}: bad {field} `{found}`: expected {expected}{}",
        if *truncated { "; the log ends in the middle of this line: it was truncated" } else { "" }
    )]
    Field {
        /// The line number, from 1.
        line: usize,
        /// The column: `Thread`, `Time`, `Action`, `Pointer`, `Size` or `Stream`.
        field: &'static str,
        /// What the column holds.
        expected: &'static str,
        /// What was found.
        found: String,
        /// Whether it is the last line and has no newline: the log was cut short.
        truncated: bool,
    },
    /// A line that parses but cannot have been written by a logging adaptor.
    #[error("line {line}: {reason}")]
    Inconsistent {
        /// The line number, from 1.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// A PyTorch memory snapshot that cannot be read as one.
    #[error("cannot read the PyTorch memory snapshot: {reason}")]
    Snapshot {
        /// What is wrong, and what to do.
        reason: String,
    },
    /// Setting up or tearing down the replay (streams, events) failed in the driver.
    #[error("replay: {0}")]
    Driver(#[from] DriverError),
    /// A replay thread panicked (a bug in the resource under test).
    #[error(
        "replay: the thread replaying log thread {thread} panicked inside the resource; the \
         resource under test has a bug"
    )]
    ThreadPanicked {
        /// The log's thread id.
        thread: u64,
    },
}

impl ReplayError {
    /// The log line the error is about, when it is about one.
    pub fn line(&self) -> Option<usize> {
        match self {
            ReplayError::Io { line, .. }
            | ReplayError::Fields { line, .. }
            | ReplayError::Field { line, .. }
            | ReplayError::Inconsistent { line, .. }
            | ReplayError::LineTooLong { line, .. } => Some(*line),
            ReplayError::Header { .. } => Some(1),
            _ => None,
        }
    }
}
