//! Concurrency stress on the simulated GPU (race detection on): 8 and 32 threads, each on its
//! own stream, against every built-in manager and example wasm plugin. Any failure prints its
//! seed; `EMM_STRESS_SEED=<n>` reruns it, and the failing run's order replays on one thread.

use emm_conformance::stress::{replay, run, StressConfig};
use emm_conformance::sweep::subjects;

fn plugins() -> Vec<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/wasm");
    ["first_fit", "buddy", "slab"]
        .iter()
        .map(|name| dir.join(format!("{name}.wasm")).display().to_string())
        .collect()
}

fn seed() -> u64 {
    std::env::var("EMM_STRESS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20)
}

fn stress(threads: usize, ops: usize) {
    let seed = seed();
    let mut failed = Vec::new();
    for s in subjects(&plugins()).unwrap_or_else(|e| panic!("{e}")) {
        let config = StressConfig {
            name: s.name.clone(),
            factory: s.factory.clone(),
            threads,
            ops,
            seed,
        };
        let report = run(&config).unwrap_or_else(|e| panic!("{}: {e}", s.name));
        if !report.passed() {
            let again = replay(&config, &report.order).map(|r| r.to_string());
            failed.push(format!(
                "{report}\nrerun with EMM_STRESS_SEED={seed}; the recorded order replayed on one \
                 thread gives:\n{}",
                again.unwrap_or_else(|e| e)
            ));
            continue;
        }
        assert_eq!(report.ops_run, report.order.len());
        assert!(report.ops_run >= threads * ops, "{report}");
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn eight_threads_on_eight_streams() {
    stress(8, 150);
}

#[test]
fn thirty_two_threads_on_thirty_two_streams() {
    stress(32, 40);
}

/// The replay of a recorded order is deterministic: two replays make the same driver calls.
#[test]
fn a_recorded_order_replays_call_for_call() {
    let s = subjects(&[]).unwrap_or_else(|e| panic!("{e}"));
    let pool = s
        .iter()
        .find(|s| s.name == "pool")
        .expect("the pool manager");
    let config = StressConfig {
        name: pool.name.clone(),
        factory: pool.factory.clone(),
        threads: 8,
        ops: 100,
        seed: 5,
    };
    let threaded = run(&config).unwrap_or_else(|e| panic!("{e}"));
    assert!(threaded.passed(), "{threaded}");
    let a = replay(&config, &threaded.order).unwrap_or_else(|e| panic!("{e}"));
    let b = replay(&config, &threaded.order).unwrap_or_else(|e| panic!("{e}"));
    assert!(a.passed(), "{a}");
    assert_eq!(a.trace_hash, b.trace_hash);
    assert_eq!(a.ops_run, threaded.ops_run);
    // A different order is a different run.
    let mut other = threaded.order.clone();
    other.sort_unstable();
    if other == threaded.order {
        // The threads ran one after another (a busy machine): take them in reverse.
        other.reverse();
    }
    let c = replay(&config, &other).unwrap_or_else(|e| panic!("{e}"));
    assert_ne!(c.trace_hash, a.trace_hash);
}
