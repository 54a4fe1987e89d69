//! The verdict of an `emm check` run on the simulated GPU as a record of the gate's store
//! ([`emm_sandbox::gate`]): what a `.wasm` plugin needs before it may run on a real GPU.

use std::time::SystemTime;

use emm_sandbox::abi::ABI_VERSION;
use emm_sandbox::gate::{
    utc_date, CheckVerdict, Depth, Subject, VerdictRecord, DEFAULT_MIN_DEPTH, RECORD_FORMAT,
};

use crate::config::{Config, DEFAULT_CASES, DEFAULT_MAX_OPS};
use crate::report::Report;

/// The contract suite as records name it.
pub const SUITE: &str = concat!("emm-conformance ", env!("CARGO_PKG_VERSION"));

/// The depth of a run of `config`.
pub fn depth_of(config: &Config) -> Depth {
    let n = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    Depth::new(n(config.cases), n(config.max_ops))
}

/// The gate's default minimum depth is the depth of a plain `emm check`.
pub const fn default_depth_is_the_gates() -> bool {
    DEFAULT_MIN_DEPTH.cases as usize == DEFAULT_CASES
        && DEFAULT_MIN_DEPTH.max_ops as usize == DEFAULT_MAX_OPS
}

const _: () = assert!(
    default_depth_is_the_gates(),
    "emm check's default depth and the gate's default minimum depth must be the same"
);

/// The sealed record of `report`, a run of `config` on `subject`, dated now.
pub fn record_of(report: &Report, subject: Subject, config: &Config) -> VerdictRecord {
    VerdictRecord {
        format: RECORD_FORMAT,
        subject,
        plugin: report.plugin.clone(),
        abi_version: ABI_VERSION,
        suite: SUITE.to_string(),
        backend: report.backend.clone(),
        depth: depth_of(config),
        seed: report.seed,
        date: utc_date(SystemTime::now()),
        passed: report.passed && report.error.is_none(),
        error: report.error.clone(),
        checks: report
            .checks
            .iter()
            .map(|c| CheckVerdict {
                name: c.name.clone(),
                passed: c.passed,
                skipped: c.skipped,
                failure: c.failure.as_ref().map(|f| f.message.clone()),
            })
            .collect(),
        checksum: String::new(),
    }
    .sealed()
}
