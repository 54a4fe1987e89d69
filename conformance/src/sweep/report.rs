//! [`SweepReport`]: how many positions and kinds a sweep covered, how each run ended, what
//! failed, and how long it took.

use std::fmt;
use std::time::Duration;

use emm_core::CudaCode;

use super::Verdict;

/// One position that broke a rule.
#[derive(Debug, Clone)]
pub struct SweepFailure {
    /// The manager.
    pub subject: String,
    /// The scenario.
    pub scenario: String,
    /// The driver call failed (1-based), or `None` for the clean run.
    pub position: Option<u64>,
    /// The failure injected.
    pub kind: Option<CudaCode>,
    /// What broke.
    pub why: String,
}

impl fmt::Display for SweepFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.position, self.kind) {
            (Some(k), Some(code)) => write!(
                f,
                "{} on {}, call {k} failing with {code}: {}",
                self.subject, self.scenario, self.why
            ),
            _ => write!(f, "{} on {}: {}", self.subject, self.scenario, self.why),
        }
    }
}

/// The outcome of a sweep.
#[derive(Debug, Clone, Default)]
pub struct SweepReport {
    /// Positions swept (driver calls of the managers), over every subject and scenario.
    pub positions: usize,
    /// Failure kinds injected at each.
    pub kinds: usize,
    /// Faulted runs.
    pub runs: usize,
    /// Runs where a typed error naming the failure reached the caller.
    pub surfaced: usize,
    /// Runs that did what the clean run did.
    pub recovered: usize,
    /// Runs where a failed release left its one object with the driver.
    pub kept_by_driver: usize,
    /// Positions that broke a rule.
    pub failures: Vec<SweepFailure>,
    /// Wall-clock time of the sweep.
    pub elapsed: Duration,
}

impl SweepReport {
    /// Whether every position passed.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }

    pub(crate) fn count(&mut self, v: Verdict) {
        match v {
            Verdict::Surfaced => self.surfaced += 1,
            Verdict::Recovered => self.recovered += 1,
            Verdict::KeptByDriver => self.kept_by_driver += 1,
        }
    }
}

impl fmt::Display for SweepReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "swept {} positions × {} kinds = {} faulted runs in {:.1} s",
            self.positions,
            self.kinds,
            self.runs,
            self.elapsed.as_secs_f64()
        )?;
        writeln!(
            f,
            "  error reached the caller: {}, recovered: {}, release kept by the driver: {}, \
             failed: {}",
            self.surfaced,
            self.recovered,
            self.kept_by_driver,
            self.failures.len()
        )?;
        for x in self.failures.iter().take(20) {
            let mut lines = x.to_string();
            if !f.alternate() {
                // One line each unless `{:#}` asks for the simulator's whole report.
                lines.truncate(lines.find('\n').unwrap_or(lines.len()));
            }
            writeln!(f, "  FAIL {lines}")?;
        }
        if self.failures.len() > 20 {
            writeln!(f, "  … and {} more", self.failures.len() - 20)?;
        }
        Ok(())
    }
}
