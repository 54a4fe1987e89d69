//! The verdict of an `emm check` run on the simulated GPU as a record of the gate's store
//! ([`emm_sandbox::gate`]): what a `.wasm` plugin needs before it may run on a real GPU.

use std::time::SystemTime;

use emm_sandbox::abi::ABI_VERSION;
use emm_sandbox::gate::{
    utc_date, CheckVerdict, Depth, Settings, Subject, VerdictRecord, DEFAULT_MIN_DEPTH,
    RECORD_FORMAT,
};

use crate::config::{Config, DEFAULT_CASES, DEFAULT_MAX_OPS};
use crate::report::Report;

/// The contract suite as records name it.
pub const SUITE: &str = concat!("emm-conformance ", env!("CARGO_PKG_VERSION"));

/// The depth of a run of `config` in which `ran` random cases actually ran (never more than
/// the run asked for).
pub fn depth_of(config: &Config, ran: usize) -> Depth {
    let n = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    Depth::new(n(ran.min(config.cases)), n(config.max_ops))
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

/// The record of `report`, a run of `config` on `subject` with `settings` (a `.wasm`
/// plugin's config and limits) in which `ran` random cases actually ran, dated now; the store
/// authenticates it when it saves it. It passes only when the report passed, the plugin could
/// be run and every random case asked for ran: a run of no case, or a cut-short one, is no
/// pass.
pub fn record_of(
    report: &Report,
    subject: Subject,
    settings: Option<Settings>,
    config: &Config,
    ran: usize,
) -> VerdictRecord {
    let complete = ran > 0 && ran >= config.cases && config.max_ops > 0;
    VerdictRecord {
        format: RECORD_FORMAT,
        subject,
        settings,
        plugin: report.plugin.clone(),
        abi_version: ABI_VERSION,
        suite: SUITE.to_string(),
        backend: report.backend.clone(),
        depth: depth_of(config, ran),
        seed: report.seed,
        date: utc_date(SystemTime::now()),
        passed: report.passed && report.error.is_none() && complete,
        error: report.error.clone().or_else(|| {
            (!complete).then(|| {
                format!(
                    "only {ran} of the {} random cases asked for ran, which proves nothing",
                    config.cases
                )
            })
        }),
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
        mac: String::new(),
    }
}
