//! Proof that the suite drives sandboxed plugins on several streams: a per-stream policy that
//! hands a block freed on one stream to another without ordering them fails
//! `stream_ordered_reuse`, however rarely it does so, and the same policy ordering its steals
//! with `emm::stream_order` passes with the check exercised, not skipped.

use crate::zoo;

use emm_conformance::{check, CheckId, Config, Report};
use zoo::wasm::StreamSteal;

fn stream_check(report: &Report) -> &emm_conformance::report::CheckResult {
    report.result(CheckId::StreamOrderedReuse).unwrap()
}

fn assert_caught(steal: StreamSteal, seed: u64) {
    let report = check(&steal.factory(), &Config::new(seed));
    let table = report.to_table(false);
    let got = stream_check(&report);
    let failure = got
        .failure
        .as_ref()
        .unwrap_or_else(|| panic!("{steal:?}, seed {seed}: not caught\n{table}"));
    assert!(
        failure.message.contains("race"),
        "{steal:?}, seed {seed}: the simulator's race report is the finding: {failure:?}"
    );
    assert!(!report.passed && report.error.is_none(), "{table}");
}

#[test]
fn a_policy_stealing_across_streams_without_ordering_fails_stream_ordered_reuse() {
    for seed in [emm_conformance::config::DEFAULT_SEED, 1, 2, 3] {
        assert_caught(StreamSteal::Unordered, seed);
    }
}

#[test]
fn a_policy_stealing_without_ordering_only_for_small_blocks_is_caught_at_the_default_depth() {
    assert_caught(
        StreamSteal::UnorderedWhenSmall,
        emm_conformance::config::DEFAULT_SEED,
    );
}

#[test]
fn a_policy_ordering_its_steals_passes_with_stream_order_exercised() {
    for seed in [emm_conformance::config::DEFAULT_SEED, 1] {
        let report = check(&StreamSteal::Ordered.factory(), &Config::new(seed));
        let table = report.to_table(false);
        assert!(report.passed, "seed {seed}:\n{table}");
        let got = stream_check(&report);
        assert!(got.passed && !got.skipped, "seed {seed}: {got:?}\n{table}");
        assert!(report.coverage.cross_stream_reuses > 0, "{table}");
    }
}
