//! A one-second soak: every built-in manager and example plugin, driver faults every other
//! round and a quarantine every third; nothing may creep. `emm soak --minutes 30` is the real
//! one (`cargo xtask soak`).

use std::time::Duration;

use emm_conformance::soak::{soak, SoakConfig};
use emm_conformance::sweep::subjects;

#[test]
fn a_short_soak_holds_nothing_more_at_the_end() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/wasm");
    let plugins: Vec<String> = ["first_fit", "buddy", "slab"]
        .iter()
        .map(|n| dir.join(format!("{n}.wasm")).display().to_string())
        .collect();
    let config = SoakConfig {
        subjects: subjects(&plugins).unwrap_or_else(|e| panic!("{e}")),
        duration: Duration::from_secs(1),
        seed: 3,
        fault_every: 2,
        quarantine_every: 3,
        max_ops: 300,
    };
    let s = soak(&config, |_| {}).unwrap_or_else(|e| panic!("{e}"));
    assert!(s.passed(), "{s}");
    assert!(s.rounds >= 3, "{s}");
    assert!(s.fault_rounds > 0 && s.errors_surfaced > 0, "{s}");
    assert!(s.quarantines > 0, "{s}");
    assert_eq!(s.held_after_reset.len(), config.subjects.len());
}
