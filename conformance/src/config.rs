//! [`Config`]: how deep a run goes (cases × operations), its seed, where it runs and where
//! failures are kept.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::backend::Backend;
use crate::sim_backend::SimBackend;

/// Random cases of the default run (after the fixed scenarios).
pub const DEFAULT_CASES: usize = 256;
/// Most operations in one case of the default run.
pub const DEFAULT_MAX_OPS: usize = 64;
/// Most runs of a case while shrinking one failure.
pub const DEFAULT_SHRINK_RUNS: usize = 400;
/// The environment variable that picks the seed.
pub const SEED_VAR: &str = "EMM_SEED";
/// Where failures are kept unless told otherwise.
pub const DEFAULT_REGRESSIONS: &str = ".emm/regressions";

/// Progress of a run, for a progress bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Cases finished.
    pub done: usize,
    /// Cases in all.
    pub total: usize,
    /// Checks failed so far.
    pub failed: usize,
}

/// Called after every case.
pub type ProgressFn = Arc<dyn Fn(Progress) + Send + Sync>;

/// How a run goes.
#[derive(Clone)]
pub struct Config {
    /// Random cases, run after the fixed scenarios.
    pub cases: usize,
    /// Most operations in one random case.
    pub max_ops: usize,
    /// The seed every case's operations and machine are drawn from.
    pub seed: u64,
    /// Threads running cases at once.
    pub threads: usize,
    /// Most runs of a case while shrinking one failure.
    pub shrink_runs: usize,
    /// Where cases run.
    pub backend: Arc<dyn Backend>,
    /// Where failures are written as regression files (`None`: not written).
    pub regressions: Option<PathBuf>,
    /// The plugin's name as the command line takes it (for the replay command).
    pub plugin: Option<String>,
    /// Called after every case.
    pub progress: Option<ProgressFn>,
}

impl Config {
    /// The fast default: [`DEFAULT_CASES`] × [`DEFAULT_MAX_OPS`] on the simulated GPU, on
    /// every core, seeded with `seed`, keeping no files.
    pub fn new(seed: u64) -> Self {
        Config {
            cases: DEFAULT_CASES,
            max_ops: DEFAULT_MAX_OPS,
            seed,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            shrink_runs: DEFAULT_SHRINK_RUNS,
            backend: Arc::new(SimBackend::new()),
            regressions: None,
            plugin: None,
            progress: None,
        }
    }

    /// With `cases` random cases of at most `max_ops` operations.
    pub fn depth(mut self, cases: usize, max_ops: usize) -> Self {
        self.cases = cases;
        self.max_ops = max_ops;
        self
    }

    /// Running on `backend`.
    pub fn backend(mut self, backend: Arc<dyn Backend>) -> Self {
        self.backend = backend;
        self
    }

    /// Writing failures to `dir`.
    pub fn regressions(mut self, dir: impl Into<PathBuf>) -> Self {
        self.regressions = Some(dir.into());
        self
    }

    /// Running `threads` cases at once.
    pub fn threads(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("cases", &self.cases)
            .field("max_ops", &self.max_ops)
            .field("seed", &self.seed)
            .field("threads", &self.threads)
            .field("backend", &self.backend.name())
            .field("regressions", &self.regressions)
            .finish_non_exhaustive()
    }
}

/// The seed of a run when `EMM_SEED` is unset: a constant, so that a verdict at the default
/// depth means the same cases on every run (a different seed is asked for with `EMM_SEED`).
pub const DEFAULT_SEED: u64 = 20_261_127;

/// The seed `EMM_SEED` gives (`value` is its value), or [`DEFAULT_SEED`] when unset.
///
/// # Errors
///
/// The value is not a whole number, with what to give instead.
pub fn seed_from(value: Option<&str>) -> Result<u64, String> {
    match value.map(str::trim).filter(|v| !v.is_empty()) {
        Some(v) => v.parse().map_err(|_| {
            format!("{SEED_VAR}={v:?} is not a seed; give a whole number such as 42, or unset it")
        }),
        None => Ok(DEFAULT_SEED),
    }
}

/// SplitMix64: spreads a seed's bits (one case's seed from the run's seed and its index).
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_comes_from_the_variable_or_is_the_constant_default() {
        assert_eq!(seed_from(None), Ok(DEFAULT_SEED));
        assert_eq!(seed_from(Some("  ")), Ok(DEFAULT_SEED));
        assert_eq!(seed_from(Some(" 42 ")), Ok(42));
        let e = seed_from(Some("forty")).unwrap_err();
        assert_eq!(
            e,
            "EMM_SEED=\"forty\" is not a seed; give a whole number such as 42, or unset it"
        );
        assert!(seed_from(None).is_ok() && seed_from(Some("")).is_ok());
        assert_ne!(mix(1), mix(2));
    }
}
