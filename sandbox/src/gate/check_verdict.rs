//! [`CheckVerdict`]: the outcome of one named conformance check, as a record keeps it.

use serde::{Deserialize, Serialize};

/// One check of a run: passed, failed (with its message) or skipped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckVerdict {
    /// The check's name (`emm check` prints it).
    pub name: String,
    /// Whether it passed (false when it failed or was skipped).
    pub passed: bool,
    /// Whether it did not run (the backend cannot observe what it needs).
    pub skipped: bool,
    /// The failure's message, when it failed.
    pub failure: Option<String>,
}
