//! A sandboxed policy whose linear memory grows a little on every few calls and is never
//! reused (a leak inside the guest) fails `guest_memory_stays_steady` at the default depth, on
//! the default seed and on others; the correct control passes it.

use crate::zoo;

use emm_conformance::{check, CheckId, Config, Report};
use zoo::wasm::WasmBug;

fn result(report: &Report, id: CheckId) -> &emm_conformance::report::CheckResult {
    report
        .result(id)
        .unwrap_or_else(|| panic!("no {id} in the report"))
}

#[test]
fn a_guest_that_grows_its_memory_on_every_few_calls_fails_on_every_seed() {
    for seed in [emm_conformance::config::DEFAULT_SEED, 1, 0xfeed_beef] {
        let report = check(
            &WasmBug::GrowsMemoryEveryFewCalls.factory(),
            &Config::new(seed),
        );
        let c = result(&report, CheckId::GuestMemoryStaysSteady);
        let f = c
            .failure
            .as_ref()
            .unwrap_or_else(|| panic!("seed {seed}: not caught\n{}", report.to_table(false)));
        assert!(f.message.contains("linear memory"), "{}", f.message);
        // The leak is the guest's: the device bytes it holds stay steady.
        assert!(
            result(&report, CheckId::HeldBytesStaySteady).passed,
            "{}",
            report.to_table(false)
        );
    }
}

#[test]
fn the_control_s_guest_memory_stays_steady_and_is_checked() {
    let report = check(&WasmBug::None.factory(), &Config::new(7));
    let c = result(&report, CheckId::GuestMemoryStaysSteady);
    assert!(c.passed && !c.skipped, "{}", report.to_table(false));
    assert!(report.coverage.guest_memory_checked > 0);
}
