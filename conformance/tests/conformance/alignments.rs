//! Every alignment the plugin ABI allows is asked for: a sandboxed policy that honours 256
//! bytes and ignores larger alignments fails `memalloc_aligned`, and one that declines them as
//! unsupported (the ABI's `-2`) passes, with the alignments in the coverage report.

use crate::zoo;

use emm_conformance::transition::ALIGN_CLASSES;
use emm_conformance::{check, CheckId, Config};
use zoo::wasm::WasmBug;

fn config() -> Config {
    Config::new(emm_conformance::config::DEFAULT_SEED)
}

#[test]
fn a_policy_that_ignores_alignments_above_256_fails_memalloc_aligned() {
    let report = check(&WasmBug::IgnoresLargeAlignments.factory(), &config());
    let aligned = report
        .result(CheckId::MemallocAligned)
        .unwrap_or_else(|| panic!("no memalloc_aligned in the report"));
    let f = aligned
        .failure
        .as_ref()
        .unwrap_or_else(|| panic!("not caught:\n{}", report.to_table(false)));
    assert!(
        f.ops.iter().any(|op| op.contains("allocate_aligned")),
        "the failing case asks for an alignment: {f:?}"
    );
}

#[test]
fn a_policy_that_declines_large_alignments_passes_and_the_report_says_so() {
    let report = check(&WasmBug::None.factory(), &config());
    let table = report.to_table(false);
    assert!(report.passed, "{table}");
    let asked: u64 = ALIGN_CLASSES.iter().map(|&k| 1u64 << k).sum();
    let c = report.coverage;
    assert_eq!(
        c.alignments_served | c.alignments_unsupported,
        asked,
        "every alignment from 512 B to 1 TiB was asked: {c:?}"
    );
    assert!(
        table.contains("declined as unsupported 15 (from 512 B to 1.0 TiB)"),
        "{table}"
    );
}
