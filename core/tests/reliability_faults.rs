//! Regression tests for the bugs the fault-injection sweep (`emm sweep`) found in emm-core.

use std::sync::Arc;

use emm_core::contract::{Context, EmmError};
use emm_core::managers::ResourceManagerFactory;
use emm_core::{CudaCode, DeviceId};
use emm_sim::{CallKind, Fault, SimConfig, SimDriver, GIB};

fn context(g: &Arc<SimDriver>, resource: &str) -> Context<SimDriver> {
    Context::with_factory(g.clone(), DeviceId(0), &ResourceManagerFactory::new(resource))
        .expect("context")
}

/// Found by the sweep: when cuMemGetInfo failed, `get_memory_info` of a manager over a
/// driver-backed resource (managed, async, every wasm plugin) said "not supported" instead of
/// the driver's failure, so the caller could not tell a broken device from a missing feature.
#[test]
fn a_failing_cumemgetinfo_is_reported_not_called_unsupported() {
    for resource in ["managed", "async"] {
        let g = Arc::new(SimDriver::new(SimConfig::new(1).memory_per_device(GIB)).unwrap());
        let ctx = context(&g, resource);
        ctx.get_memory_info().expect("the clean call works");
        // Every cuMemGetInfo fails: the error is the driver's, naming the call.
        g.inject(Fault::Random {
            calls: vec![CallKind::MemGetInfo],
            per_million: 1_000_000,
            code: CudaCode::LAUNCH_FAILED,
        });
        let e = ctx.get_memory_info().expect_err(resource);
        assert!(
            matches!(e, EmmError::Driver(ref d) if d.code == CudaCode::LAUNCH_FAILED),
            "{resource}: {e}"
        );
        assert!(e.to_string().contains("cuMemGetInfo"), "{resource}: {e}");
        // One failing call, then the driver works again: the answer is the real one.
        g.clear_faults();
        g.inject(Fault::FailNth {
            call: Some(CallKind::MemGetInfo),
            nth: 1,
            code: CudaCode::LAUNCH_FAILED,
        });
        let info = ctx.get_memory_info().expect("recovers from one failure");
        assert_eq!(info.total, GIB, "{resource}");
    }
}
