//! The reduced fault-injection sweep CI runs (seconds): every built-in manager and example
//! wasm plugin, W1–W3 cut to a few ops and the suite's op sequence, two failure kinds at every
//! third position. `emm sweep` runs the full one.

use emm_conformance::sweep::{subjects, sweep, Scenario, SweepConfig};
use emm_core::CudaCode;

fn plugins() -> Vec<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/wasm");
    ["first_fit", "buddy", "slab"]
        .iter()
        .map(|name| {
            let path = dir.join(format!("{name}.wasm"));
            assert!(
                path.is_file(),
                "{} is missing: build the example plugins with `cargo xtask wasm`",
                path.display()
            );
            path.display().to_string()
        })
        .collect()
}

#[test]
fn every_manager_survives_a_fault_at_every_third_position() {
    let subjects = subjects(&plugins()).unwrap_or_else(|e| panic!("{e}"));
    assert!(subjects.len() >= 8, "{subjects:?}");
    let mut config = SweepConfig::new(subjects, 12);
    config.kinds = vec![CudaCode::OUT_OF_MEMORY, CudaCode::LAUNCH_FAILED];
    config.stride = 3;
    let report = sweep(&config, |_, _, _| {});
    assert!(report.passed(), "{report:#}");
    assert!(report.runs > 500, "{report}");
    // Every verdict occurs: errors surface, some calls are recovered from, and a failed
    // release leaves its object with the driver.
    assert!(
        report.surfaced > 0 && report.recovered > 0 && report.kept_by_driver > 0,
        "{report}"
    );
}

#[test]
fn a_scenario_prefix_frees_what_it_left_live() {
    let w = emm_core::workloads::w1();
    let Scenario::Workload(p) = &Scenario::workloads(10)[0] else {
        panic!("W1 first");
    };
    let allocs = p
        .ops
        .iter()
        .filter(|o| matches!(o, emm_core::workloads::Op::Alloc(_)))
        .count();
    let frees = p.ops.len() - allocs;
    assert_eq!(allocs, frees, "{:?}", p.ops);
    assert_eq!(&p.ops[..10], &w.ops[..10]);
    assert_eq!(p.name, "W1[..10]");
}
