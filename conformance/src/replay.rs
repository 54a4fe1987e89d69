//! Regression files: a failure's shrunk case written as JSON ([`save`], [`load`]);
//! [`crate::runner::replay`] runs one again and gives the same verdict (the simulator is
//! deterministic from the machine's seed).

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::transition::Op;

/// One failure, as written to a regression file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Regression {
    /// The version of the suite that wrote it.
    pub emm_conformance: String,
    /// The plugin, as the command line names it.
    pub plugin: String,
    /// The backend it ran on.
    pub backend: String,
    /// The check that failed.
    pub check: String,
    /// What went wrong.
    pub message: String,
    /// The run's seed.
    pub seed: u64,
    /// The case's index in the run.
    pub case: usize,
    /// The seed of the case's machine.
    pub machine_seed: u64,
    /// The step that failed (the number of operations: at teardown).
    pub step: usize,
    /// The shrunk operations.
    pub ops: Vec<Op>,
}

impl Regression {
    /// The file name it is written under: plugin, check, seed and case.
    pub fn file_name(&self) -> String {
        let plugin: String = self
            .plugin
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        format!("{plugin}-{}-{}-{}.json", self.check, self.seed, self.case)
    }
}

/// Writes `r` into `dir` (created if missing); returns the file's path.
///
/// # Errors
///
/// The directory or the file cannot be written, with the path.
pub fn save(dir: &Path, r: &Regression) -> Result<PathBuf, String> {
    fs::create_dir_all(dir).map_err(|e| {
        format!(
            "cannot create the regressions directory {}: {e}",
            dir.display()
        )
    })?;
    let path = dir.join(r.file_name());
    let text = serde_json::to_string_pretty(r)
        .map_err(|e| format!("cannot encode the regression: {e}"))?;
    fs::write(&path, text + "\n").map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}

/// Reads a regression file.
///
/// # Errors
///
/// The file cannot be read or is not a regression file, with the path and the reason.
pub fn load(path: &Path) -> Result<Regression, String> {
    let text = fs::read_to_string(path)
        .map_err(|e| format!("cannot read the regression file {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| {
        format!(
            "{} is not a regression file of emm check: {e}",
            path.display()
        )
    })
}
