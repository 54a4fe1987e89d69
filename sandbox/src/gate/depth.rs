//! [`Depth`]: how deep a conformance run went — random cases × most operations per case.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The depth of a conformance run: `cases` random cases (after the fixed scenarios) of up to
/// `max_ops` operations, as `emm check --cases N --ops M` gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Depth {
    /// Random cases.
    pub cases: u32,
    /// Most operations in one case.
    pub max_ops: u32,
}

/// The depth the gate asks for by default: the depth of a plain `emm check` (256 cases of up
/// to 64 operations), so a default check is enough to load a plugin on a GPU.
pub const DEFAULT_MIN_DEPTH: Depth = Depth::new(256, 64);

impl Depth {
    /// `cases` random cases of up to `max_ops` operations.
    pub const fn new(cases: u32, max_ops: u32) -> Depth {
        Depth { cases, max_ops }
    }

    /// Whether a run this deep is at least as deep as `min`, in both cases and operations.
    pub fn covers(self, min: Depth) -> bool {
        self.cases >= min.cases && self.max_ops >= min.max_ops
    }

    /// Reads `CASESxOPS`, e.g. `256x64`.
    ///
    /// # Errors
    ///
    /// Anything else, with the form to give.
    pub fn parse(text: &str) -> Result<Depth, String> {
        let bad = || format!("{text:?} is not a depth; give CASESxOPS, e.g. 256x64");
        let (c, o) = text.trim().split_once(['x', 'X']).ok_or_else(bad)?;
        let cases: u32 = c.trim().parse().map_err(|_| bad())?;
        let max_ops: u32 = o.trim().parse().map_err(|_| bad())?;
        if cases == 0 || max_ops == 0 {
            return Err(format!(
                "{text:?} asks for no cases or no operations, which checks nothing; give at \
                 least 1x1, e.g. 256x64"
            ));
        }
        Ok(Depth { cases, max_ops })
    }

    /// The `emm check` flags that run this deep (empty for the default depth).
    pub fn flags(self) -> String {
        if self == DEFAULT_MIN_DEPTH {
            String::new()
        } else {
            format!(" --cases {} --ops {}", self.cases, self.max_ops)
        }
    }
}

impl fmt::Display for Depth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.cases, self.max_ops)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_reads_compares_and_names_its_flags() {
        assert_eq!(Depth::parse(" 256x64 "), Ok(DEFAULT_MIN_DEPTH));
        assert_eq!(Depth::parse("4X8"), Ok(Depth::new(4, 8)));
        assert_eq!(
            Depth::parse("deep"),
            Err("\"deep\" is not a depth; give CASESxOPS, e.g. 256x64".into())
        );
        assert!(Depth::parse("4x").is_err());
        assert!(Depth::parse("0x64").unwrap_err().contains("checks nothing"));
        assert!(Depth::parse("256x0").is_err());
        assert!(Depth::new(300, 64).covers(DEFAULT_MIN_DEPTH));
        assert!(!Depth::new(1000, 8).covers(DEFAULT_MIN_DEPTH));
        assert_eq!(DEFAULT_MIN_DEPTH.flags(), "");
        assert_eq!(Depth::new(4, 8).flags(), " --cases 4 --ops 8");
        assert_eq!(Depth::new(4, 8).to_string(), "4x8");
    }
}
