//! The fault-injection sweep: for every manager and scenario, fail the `k`-th driver call the
//! manager makes, for every `k` and every failure kind, and check that nothing panics, the
//! error reaches the caller typed and naming the failure, every allocation made before the
//! fault keeps its contents, and after teardown the simulated GPU holds nothing (`emm sweep`).
//!
//! Positions are found by a clean run first: the simulator traces every call with the layer
//! that made it, and the positions are the calls not made by the harness (whose own writes
//! and reads must not fail, or a contents check would blame the manager). The simulator is
//! deterministic and the swept scenarios use one thread, so call `k` of a faulted run is call
//! `k` of the clean run up to the fault; [`position::judge`] checks that it is.
//!
//! - [`scenario`]: [`Scenario`] (workload prefixes, the suite's op sequences) and the harness.
//! - [`position`]: one run, the positions of a clean run, and the checks of a faulted one.
//! - [`report`]: [`SweepReport`]: counts, failures, time.

pub mod position;
pub mod report;
pub mod scenario;

use std::sync::Arc;
use std::time::Instant;

use emm_core::contract::selection::manager_names;
use emm_core::contract::ManagerFactory;
use emm_core::CudaCode;

pub use position::Verdict;
pub use report::{SweepFailure, SweepReport};
pub use scenario::Scenario;

/// The failure kinds a full sweep injects: out of memory, a bad argument, a failed launch, a
/// bad access, a bad stream or event handle, and an unknown error.
pub const FAULT_KINDS: [CudaCode; 6] = [
    CudaCode::OUT_OF_MEMORY,
    CudaCode::INVALID_VALUE,
    CudaCode::LAUNCH_FAILED,
    CudaCode::ILLEGAL_ADDRESS,
    CudaCode::INVALID_HANDLE,
    CudaCode::UNKNOWN,
];

/// A manager to sweep: a built-in or a `.wasm` plugin.
#[derive(Clone)]
pub struct Subject {
    /// Its name in reports (the built-in's name, or the plugin's path).
    pub name: String,
    /// Makes its managers.
    pub factory: Arc<dyn ManagerFactory>,
}

impl std::fmt::Debug for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

/// Every built-in manager, then the `.wasm` plugins at `plugins` (paths).
///
/// # Errors
///
/// A plugin that cannot be loaded, with the reason.
pub fn subjects(plugins: &[String]) -> Result<Vec<Subject>, String> {
    emm_sandbox::install_loader();
    let mut out = Vec::new();
    for name in manager_names().into_iter().chain(plugins.iter().cloned()) {
        let factory = crate::resolve_plugin(&name)?;
        out.push(Subject { name, factory });
    }
    Ok(out)
}

/// What to sweep.
#[derive(Debug, Clone)]
pub struct SweepConfig {
    /// The managers.
    pub subjects: Vec<Subject>,
    /// The scenarios each one runs.
    pub scenarios: Vec<Scenario>,
    /// The failure kinds injected at every position.
    pub kinds: Vec<CudaCode>,
    /// Sweep every `stride`-th position only (1: all of them).
    pub stride: usize,
    /// The simulator's seed.
    pub seed: u64,
}

impl SweepConfig {
    /// A full sweep of `subjects`: W1–W3 cut to `ops` ops and the suite's sequence, every
    /// position, every kind of [`FAULT_KINDS`].
    pub fn new(subjects: Vec<Subject>, ops: usize) -> Self {
        let mut scenarios = Scenario::workloads(ops);
        scenarios.push(Scenario::conformance());
        SweepConfig {
            subjects,
            scenarios,
            kinds: FAULT_KINDS.to_vec(),
            stride: 1,
            seed: 1,
        }
    }
}

/// Runs the sweep; `progress` hears of each (subject, scenario) as it ends.
pub fn sweep(config: &SweepConfig, mut progress: impl FnMut(&str, &str, usize)) -> SweepReport {
    let start = Instant::now();
    let mut report = SweepReport::default();
    for subject in &config.subjects {
        for scenario in &config.scenarios {
            let swept = sweep_one(config, subject, scenario, &mut report);
            progress(&subject.name, &scenario.name(), swept);
        }
    }
    report.kinds = config.kinds.len();
    report.elapsed = start.elapsed();
    report
}

fn sweep_one(
    config: &SweepConfig,
    subject: &Subject,
    scenario: &Scenario,
    report: &mut SweepReport,
) -> usize {
    let fail = |k: Option<u64>, code: Option<CudaCode>, why: String| SweepFailure {
        subject: subject.name.clone(),
        scenario: scenario.name(),
        position: k,
        kind: code,
        why,
    };
    let clean = match position::run(&subject.factory, scenario, config.seed, None) {
        Ok(c) => c,
        Err(e) => {
            report.failures.push(fail(None, None, e));
            return 0;
        }
    };
    // The clean run must pass the same checks, or every position would inherit its fault.
    if let Some(p) = &clean.panic {
        report
            .failures
            .push(fail(None, None, format!("the clean run panicked: {p}")));
        return 0;
    }
    if !clean.report.is_clean() || !clean.corrupted.is_empty() {
        let why = format!(
            "the clean run is not clean: {:?}\n{}",
            clean.corrupted, clean.report
        );
        report.failures.push(fail(None, None, why));
        return 0;
    }
    let positions = position::positions(&clean);
    let mut swept = 0;
    for &k in positions.iter().step_by(config.stride.max(1)) {
        for &code in &config.kinds {
            swept += 1;
            report.runs += 1;
            let verdict = position::run(&subject.factory, scenario, config.seed, Some((k, code)))
                .and_then(|f| position::judge(&clean, &f, k, code));
            match verdict {
                Ok(v) => report.count(v),
                Err(why) => report.failures.push(fail(Some(k), Some(code), why)),
            }
        }
    }
    report.positions += positions.len().div_ceil(config.stride.max(1));
    swept
}
