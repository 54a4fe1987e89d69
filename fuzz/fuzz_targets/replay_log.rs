//! The RMM CSV log parser (`core/src/mr/event_log/`) on arbitrary bytes: it never panics, and a
//! log it accepts replays against `cuMemAlloc` memory on the simulated GPU without panicking,
//! leaving nothing held once the replay has freed what the log leaked.
#![no_main]

use std::sync::Arc;

use emm_bench::replay::{replay, EventLog, ReplayOptions};
use emm_core::mr::CudaResource;
use emm_sim::{SimConfig, SimDriver, GIB};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(log) = EventLog::parse(data) else {
        return;
    };
    let summary = log.summary();
    let _ = summary.to_string();
    // Replaying thousands of events per input would slow the search to a crawl; the parser
    // is what is under test, the replay is the consumer of what it accepts.
    if log.events().len() > 512 {
        return;
    }
    let Ok(sim) = SimDriver::new(
        SimConfig::new(1)
            .memory_per_device(GIB)
            .track_contents(false),
    ) else {
        return;
    };
    let sim = Arc::new(sim);
    let resource = CudaResource::<SimDriver>::new(Arc::clone(&sim));
    let _ = replay(&log, &resource, &ReplayOptions::default());
    drop(resource);
    let report = sim.report();
    assert!(
        report.nothing_held() && report.violations.is_empty(),
        "the replay left something behind:\n{report}"
    );
});
