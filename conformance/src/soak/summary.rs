//! [`SoakSummary`]: what a soak saw, and its printed form.

use std::time::Duration;

/// What a soak saw.
#[derive(Debug, Clone, Default)]
pub struct SoakSummary {
    /// Rounds run.
    pub rounds: u64,
    /// Manager operations run.
    pub ops: u64,
    /// Rounds with random driver failures.
    pub fault_rounds: u64,
    /// Errors the managers returned in those rounds (each a typed error).
    pub errors_surfaced: u64,
    /// Hostile plugins quarantined.
    pub quarantines: u64,
    /// Machines torn down (each checked to hold nothing) and replaced during the soak.
    pub machines: u64,
    /// Per manager: (name, device memory held after reset at the first round, the most after
    /// any reset).
    pub held_after_reset: Vec<(String, u64, u64)>,
    /// Resident memory of this process after the first round and at the end, in KiB.
    pub rss_kib: (u64, u64),
    /// Resident memory in KiB when a quarter of the time had passed: the level after warm-up
    /// that the end is compared with.
    pub rss_warm_kib: u64,
    /// What broke, if anything.
    pub failures: Vec<String>,
    /// How long it ran.
    pub elapsed: Duration,
}

impl SoakSummary {
    /// Whether nothing crept and nothing broke.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

impl std::fmt::Display for SoakSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "soak: {} rounds, {} ops in {:.1} min; {} rounds with driver faults ({} typed errors \
             surfaced), {} plugins quarantined, {} machines torn down clean and replaced",
            self.rounds,
            self.ops,
            self.elapsed.as_secs_f64() / 60.0,
            self.fault_rounds,
            self.errors_surfaced,
            self.quarantines,
            self.machines
        )?;
        writeln!(
            f,
            "  resident memory: {} KiB after the first round, {} KiB a quarter in, {} KiB at the end",
            self.rss_kib.0, self.rss_warm_kib, self.rss_kib.1
        )?;
        for (name, first, max) in &self.held_after_reset {
            writeln!(
                f,
                "  {name:<28} held after reset: first {first} B, max {max} B"
            )?;
        }
        writeln!(f, "  failures: {}", self.failures.len())?;
        for x in self.failures.iter().take(20) {
            writeln!(f, "  FAIL {x}")?;
        }
        Ok(())
    }
}
