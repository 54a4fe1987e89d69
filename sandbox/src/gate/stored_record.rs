//! [`StoredRecord`]: one file of the verdict store, read and judged.

use std::path::PathBuf;

use super::record::VerdictRecord;

/// A record file and what was found in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRecord {
    /// The file.
    pub path: PathBuf,
    /// The record when it verifies and is about the subject whose folder holds it; otherwise
    /// why it cannot be trusted.
    pub record: Result<VerdictRecord, String>,
}
