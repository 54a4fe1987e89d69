//! Proof that the suite catches bugs: each plugin of the zoo fails the check named for its
//! bug, and the zoo's correct control passes everything.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::zoo;

use emm_conformance::{
    check, resolve_plugin, Backend, CheckId, Config, Machine, Observes, SimBackend,
};
use emm_core::CudaCode;
use emm_sim::{CallKind, Fault};
use zoo::wasm::WasmBug;
use zoo::{Bug, ZooFactory};

/// The check each bug class must fail.
fn named_check(bug: Bug) -> CheckId {
    match bug {
        Bug::None => unreachable!("the control fails nothing"),
        Bug::OverlappingAllocations => CheckId::MemallocNeverOverlaps,
        Bug::MisalignedPointers => CheckId::MemallocAligned,
        Bug::LeakAtReset => CheckId::ResetFreesEverything,
        Bug::FinalizerRunTwice => CheckId::FinalizerRunsOnce,
        Bug::WrongIpcOffset => CheckId::IpcHandleAddressesSameBytes,
        Bug::CrashOnResetBeforeInitialize => CheckId::ResetBeforeInitialize,
        Bug::InitializeWipesState => CheckId::InitializeKeepsState,
        Bug::CrossStreamReuseWithoutWaiting => CheckId::StreamOrderedReuse,
        Bug::PanicInsteadOfOutOfMemory => CheckId::OutOfMemoryIsAnError,
        Bug::MemoryInfoFreeAboveTotal => CheckId::GetMemoryInfoConsistent,
        Bug::PointerOutsideDeviceMemory => CheckId::MemallocInDeviceMemory,
        Bug::WriteAfterFreeThroughRecycledBlock => CheckId::WritesStayInTheirAllocation,
        Bug::AllocationBehindTheManagersBack => CheckId::OnlyThePluginAllocates,
        Bug::OutOfMemoryWithoutAsking => CheckId::OutOfMemoryIsHonest,
        Bug::KeepsMemoryOnOutOfMemory => CheckId::OutOfMemoryIsAnError,
    }
}

/// The check each sandboxed policy's bug must fail.
fn named_wasm_check(bug: WasmBug) -> CheckId {
    match bug {
        WasmBug::None => unreachable!("the control fails nothing"),
        WasmBug::IgnoresDeferScopes | WasmBug::DeferScopesAsAFlag => CheckId::DeferCleanupNests,
        WasmBug::OutOfMemoryWithoutAsking => CheckId::OutOfMemoryIsHonest,
        WasmBug::MisalignedOddSizes => CheckId::MemallocAligned,
        WasmBug::RepeatsAnAnswer => CheckId::MemallocNeverOverlaps,
        WasmBug::KeepsChunksUntilReset => CheckId::HeldBytesStaySteady,
        WasmBug::StatsMissKeptChunks => CheckId::StatsAgreeWithTheHost,
        WasmBug::IgnoresLargeAlignments => CheckId::MemallocAligned,
        WasmBug::GrowsMemoryEveryFewCalls => CheckId::GuestMemoryStaysSteady,
    }
}

/// The default depth and seed, as `emm check` runs them.
fn default_config() -> Config {
    Config::new(emm_conformance::config::DEFAULT_SEED)
}

#[test]
fn every_broken_wasm_policy_is_caught_at_the_default_depth_by_the_check_named_for_its_bug() {
    let mut missed = Vec::new();
    for bug in WasmBug::ALL {
        let report = check(&bug.factory(), &default_config());
        let want = named_wasm_check(bug);
        println!("---- {bug:?}\n{}", report.to_table(false));
        let got = report.result(want).unwrap();
        if got.failure.is_none() {
            missed.push(format!("{bug:?} was not caught by {want}"));
        }
        assert!(!report.passed && report.error.is_none(), "{bug:?}");
    }
    assert!(missed.is_empty(), "{}", missed.join("\n"));
}

#[test]
fn a_host_breach_is_filed_under_its_own_check_and_nowhere_else() {
    // A misaligned answer is the sandbox's breach: it used to be filed under
    // memalloc_in_device_memory while memalloc_aligned printed PASS.
    let report = check(&WasmBug::MisalignedOddSizes.factory(), &default_config());
    let failed: Vec<&str> = report.failed().map(|c| c.name.as_str()).collect();
    assert_eq!(failed, ["memalloc_aligned"], "{}", report.to_table(false));
}

#[test]
fn the_sandboxed_control_passes_and_says_what_it_could_not_exercise() {
    let report = check(&WasmBug::None.factory(), &default_config());
    assert!(report.passed, "{}", report.to_table(false));
    let stream = report.result(CheckId::StreamOrderedReuse).unwrap();
    assert!(
        stream.skipped && !stream.passed,
        "a policy the suite cannot drive on several streams is not certified for stream order: {stream:?}"
    );
    assert!(stream
        .skip_reason
        .as_deref()
        .unwrap_or("")
        .contains("not exercised"));
    assert!(report.coverage.defer_scopes > 0 && report.coverage.deepest_defer >= 2);
    assert!(report.coverage.oom_checked > 0, "{:?}", report.coverage);
    assert!(report.coverage.stats_checked > 0, "{:?}", report.coverage);
}

fn config() -> Config {
    Config::new(20_261_121).depth(48, 32)
}

#[test]
fn every_broken_plugin_is_caught_by_the_check_named_for_its_bug() {
    let mut missed = Vec::new();
    for bug in Bug::ALL {
        let report = check(&ZooFactory(bug), &config());
        let want = named_check(bug);
        println!("---- {bug:?}\n{}", report.to_table(false));
        let got = report.result(want).unwrap();
        match &got.failure {
            Some(f) => {
                assert!(!f.ops.is_empty() || f.step == 0, "{bug:?}: {f:?}");
                assert!(
                    f.ops.len() <= 8,
                    "{bug:?} shrinks to a short case: {:#?}",
                    f.ops
                );
            }
            None => missed.push(format!(
                "{bug:?} was not caught by {want}:\n{}",
                report.to_table(false)
            )),
        }
        assert!(!report.passed && report.error.is_none(), "{bug:?}");
    }
    assert!(missed.is_empty(), "{}", missed.join("\n"));
}

#[test]
fn the_zoo_s_correct_control_passes_everything() {
    let report = check(&ZooFactory(Bug::None), &config());
    assert!(report.passed, "{}", report.to_table(false));
}

/// The simulator, whose machines run out after `left` cases, as a GPU's do after a device
/// fault: the context is lost, and no later case can start.
struct LostAfter {
    sim: SimBackend,
    left: AtomicUsize,
}

impl Backend for LostAfter {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn observes(&self) -> Observes {
        self.sim.observes()
    }

    fn machine(&self, seed: u64) -> Result<Box<dyn Machine>, String> {
        let take = |n: usize| n.checked_sub(1);
        if self
            .left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, take)
            .is_err()
        {
            return Err("cannot create a stream: CUDA_ERROR_ILLEGAL_ADDRESS (700)".into());
        }
        self.sim.machine(seed)
    }
}

#[test]
fn a_failure_the_machine_cannot_shorten_is_still_reported() {
    let bug = Bug::OverlappingAllocations;
    let want = named_check(bug);
    let config = || config().threads(1);
    let whole = check(&ZooFactory(bug), &config());
    let first = whole.result(want).unwrap().failure.clone().unwrap();
    // One machine a case up to the failing one, then `runs` of its shortening: either the
    // shortening is cut short, and the error says so, or it ends as without the fault.
    let mut cut_short = 0;
    for runs in [0, 1, 2, 5, 40] {
        let backend = Arc::new(LostAfter {
            sim: SimBackend::new(),
            left: AtomicUsize::new(first.case + 1 + runs),
        });
        let report = check(&ZooFactory(bug), &config().backend(backend));
        let failure = report.result(want).and_then(|r| r.failure.clone());
        let failure = failure.unwrap_or_else(|| {
            panic!(
                "{runs} runs: the failure was lost\n{}",
                report.to_table(false)
            )
        });
        assert_eq!(failure.case, first.case, "{runs} runs");
        assert!(!report.passed, "{runs} runs");
        let error = report.error.unwrap_or_default();
        assert!(error.contains("ILLEGAL_ADDRESS"), "{runs} runs: {error}");
        let shortening = format!("shortening case {}'s failure of {want}", first.case);
        if error.contains(&shortening) {
            cut_short += 1;
        } else {
            assert_eq!(failure.ops, first.ops, "{runs} runs: {error}");
        }
    }
    assert!(cut_short >= 2, "only {cut_short} runs were cut short");
}

/// On one GPU machine, reads of managed memory faulted under every manager, the driver's own
/// allocations included: such a fault names itself as possibly the machine's, and a fault in
/// device memory does not.
#[test]
fn a_device_fault_in_managed_memory_says_the_plugin_may_not_be_at_fault() {
    let faulting = SimBackend::new().configure(|c| {
        c.fault(Fault::Random {
            calls: vec![CallKind::MemcpyDtoH],
            per_million: 1_000_000,
            code: CudaCode::ILLEGAL_ADDRESS,
        })
    });
    let default = resolve_plugin("default").unwrap();
    let report = check(&*default, &config().threads(1).backend(Arc::new(faulting)));
    let message = |c: CheckId| {
        let failure = report.result(c).and_then(|r| r.failure.clone());
        failure
            .unwrap_or_else(|| panic!("{c} did not fail:\n{}", report.to_table(false)))
            .message
    };
    let managed = message(CheckId::MemallocmanagedIsUnified);
    assert!(
        managed.contains("ILLEGAL_ADDRESS") && managed.contains("emm check default --backend cuda"),
        "{managed}"
    );
    let device = message(CheckId::WritesStayInTheirAllocation);
    assert!(
        device.contains("ILLEGAL_ADDRESS") && !device.contains("managed memory"),
        "{device}"
    );
}
