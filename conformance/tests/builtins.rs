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

/// The example wasm plugins (built by `cargo xtask wasm`, which `cargo xtask test` runs first)
/// pass every check through the sandbox.
#[test]
fn every_example_wasm_plugin_passes_everything() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/wasm");
    emm_sandbox::install_loader();
    for name in ["first_fit", "buddy", "slab"] {
        let path = dir.join(format!("{name}.wasm"));
        assert!(
            path.exists(),
            "{} is missing: build the example plugins with `cargo xtask wasm`",
            path.display()
        );
        let factory = resolve_plugin(&path.to_string_lossy()).unwrap();
        for seed in [1, 2] {
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
