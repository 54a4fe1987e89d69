//! Every built-in manager the registry knows passes every check, on several seeds.

use emm_conformance::cli::resolve_plugin;
use emm_conformance::{check, Config};
use emm_core::contract::selection::manager_names;

#[test]
fn every_built_in_manager_passes_everything() {
    let names = manager_names();
    assert!(names.iter().any(|n| n == "default"), "{names:?}");
    for name in names {
        let factory = resolve_plugin(&name).unwrap();
        for seed in [1, 2, 3] {
            let report = check(&*factory, &Config::new(seed));
            assert!(
                report.passed,
                "{name}, seed {seed}:\n{}",
                report.to_table(false)
            );
            assert!(report.checks.iter().all(|c| c.passed && !c.skipped));
        }
    }
}
