//! Regression tests for the bugs the fault-injection sweep (`emm sweep`), the concurrency
//! stress (conformance/tests/conformance/stress.rs) and the soak (`emm soak`) found in emm-core.

use std::sync::Arc;

use emm_core::contract::{Context, EmmError};
use emm_core::managers::ResourceManagerFactory;
use emm_core::{CudaCode, DeviceId, Driver};
use emm_sim::{CallKind, Fault, SimConfig, SimDriver, GIB};

fn context(g: &Arc<SimDriver>, resource: &str) -> Context<SimDriver> {
    Context::with_factory(
        g.clone(),
        DeviceId(0),
        &ResourceManagerFactory::new(resource),
    )
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

/// Found by the stress: `memalloc` of the async manager handed out memory allocated with
/// cuMemAllocAsync on the legacy default stream without waiting for it, so a non-blocking
/// stream writing it at once raced with the allocation (the legacy default stream orders
/// nothing with non-blocking streams). `memalloc` memory is usable on every stream.
#[test]
fn async_memalloc_memory_is_ready_on_every_stream() {
    let g = Arc::new(SimDriver::new(SimConfig::new(2).memory_per_device(GIB)).unwrap());
    let s = g.stream_create(true).unwrap();
    let ctx = context(&g, "async");
    for i in 0..4u8 {
        let p = ctx.memalloc(4096).unwrap();
        g.memcpy_htod(p.device_ptr(), &[i; 64], Some(s)).unwrap();
        // Idle before it is freed (the caller's part); the pool then reuses the block.
        g.stream_synchronize(s).unwrap();
        drop(p);
    }
    let races: Vec<String> = g.report().races().map(ToString::to_string).collect();
    assert!(races.is_empty(), "{races:#?}");
    drop(ctx);
    g.stream_destroy(s).unwrap();
}

/// Found by the soak: when the driver said out of memory for a reason other than memory (the
/// simulator's address range used up after hours; an injected fault here), the default
/// manager reported "out of memory: requested 317.6 KiB, 8.0 GiB free" and dropped the
/// driver's reason. With the bytes free, the driver's error is returned as it is (still
/// `is_out_of_memory`); a real shortage keeps the manager's message with what is free.
#[test]
fn an_out_of_memory_with_memory_free_keeps_the_drivers_reason() {
    let g = Arc::new(SimDriver::new(SimConfig::new(4).memory_per_device(GIB)).unwrap());
    let ctx = Context::with_factory(
        g.clone(),
        DeviceId(0),
        &*emm_core::managers::DefaultManager::factory(),
    )
    .unwrap();
    // Every cuMemAlloc fails (the manager retries after flushing its pending frees).
    g.inject(Fault::Random {
        calls: vec![CallKind::MemAlloc],
        per_million: 1_000_000,
        code: CudaCode::OUT_OF_MEMORY,
    });
    let e = ctx.memalloc(4096).expect_err("every cuMemAlloc fails");
    assert!(e.is_out_of_memory(), "{e}");
    assert!(e.to_string().contains("injected"), "{e}");
    g.clear_faults();
    // A real shortage: the manager's message, with what is free.
    let e = ctx
        .memalloc(2 * GIB as usize)
        .expect_err("more than the device");
    assert!(matches!(e, EmmError::OutOfMemory { .. }), "{e}");
}
