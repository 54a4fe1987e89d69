//! Out of memory at a configured limit is honest: a sandboxed plugin whose chunk request the
//! host refuses for `PluginLimits::max_held_bytes` (the driver never hears of it) answers out
//! of memory truthfully and passes `out_of_memory_is_honest`; one that answers out of memory
//! while under its limit, with room on the device, still fails it.

use crate::zoo;

use emm_conformance::{check, CheckId, Config};
use emm_sandbox::PluginLimits;
use zoo::wasm::WasmBug;

/// A limit far below the suite's near-total requests and above the steady state's rounds.
const MAX_HELD: u64 = 64 << 20;

fn limited() -> PluginLimits {
    PluginLimits::default().max_held_bytes(Some(MAX_HELD))
}

fn config() -> Config {
    Config::new(emm_conformance::config::DEFAULT_SEED)
}

fn honest(report: &emm_conformance::Report) -> &emm_conformance::report::CheckResult {
    report
        .result(CheckId::OutOfMemoryIsHonest)
        .unwrap_or_else(|| panic!("no out_of_memory_is_honest in the report"))
}

#[test]
fn a_plugin_refused_by_its_held_bytes_limit_answers_out_of_memory_honestly() {
    let report = check(&WasmBug::None.factory_with(limited()), &config());
    let table = report.to_table(false);
    let c = honest(&report);
    assert!(c.passed && !c.skipped, "{table}");
    assert!(
        report.coverage.oom_at_limit > 0,
        "no out-of-memory answer came at the limit: {:?}",
        report.coverage
    );
    assert!(report.passed, "{table}");
    assert!(table.contains("at a configured limit"), "{table}");
}

#[test]
fn a_plugin_that_answers_out_of_memory_under_its_limit_still_fails() {
    let report = check(
        &WasmBug::OutOfMemoryWithoutAsking.factory_with(limited()),
        &config(),
    );
    let c = honest(&report);
    let f = c
        .failure
        .as_ref()
        .unwrap_or_else(|| panic!("not caught:\n{}", report.to_table(false)));
    assert!(
        f.message.contains("no configured limit refused it a chunk"),
        "{}",
        f.message
    );
}
