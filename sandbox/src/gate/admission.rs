//! [`Admission`]: the gate let a plugin run on hardware, and why.

use std::path::PathBuf;

use super::depth::Depth;

/// Why the gate let a plugin run on a real GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// A passing, intact record of its exact bytes at the minimum depth or deeper.
    Verified {
        /// The record.
        record: PathBuf,
        /// The depth it was checked to.
        depth: Depth,
    },
    /// An override (`EMM_GATE`) let it through; the warning names the risk and was printed.
    Overridden {
        /// The warning.
        warning: String,
    },
}

impl Admission {
    /// The warning, when an override let the plugin through.
    pub fn warning(&self) -> Option<&str> {
        match self {
            Admission::Verified { .. } => None,
            Admission::Overridden { warning } => Some(warning),
        }
    }
}
