//! Proof that the suite catches bugs: each plugin of the zoo fails the check named for its
//! bug, and the zoo's correct control passes everything.

mod zoo;

use emm_conformance::{check, CheckId, Config};
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
    }
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
        let got = report
            .checks
            .iter()
            .find(|c| c.name == want.name())
            .unwrap();
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
