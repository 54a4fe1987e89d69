//! The benchmark harness: the named chains measured as their own types, and the replay loops.

use std::cell::Cell;
use std::sync::Arc;

use emm_bench::harness::{self as bench, BenchConfig};
use emm_core::mr::named::{self, WithResource, NAMED_RESOURCES};
use emm_core::mr::{DeviceMemoryResource, MrError, MrResult, PoolResource};
use emm_core::workloads::{Op, Workload};
use emm_core::{Driver, StreamId};
use emm_sim::{SimConfig, SimDriver, GIB};

fn gpu() -> Arc<dyn Driver> {
    Arc::new(SimDriver::new(SimConfig::new(7).memory_per_device(8 * GIB)).expect("config"))
}

/// Allocations of several sizes, frees in another order, and two left live at the end.
fn small() -> Workload {
    Workload::new(
        "small",
        vec![
            Op::Alloc(1000),
            Op::Alloc(300 << 10),
            Op::Alloc(5 << 20),
            Op::Free(1),
            Op::Alloc(64),
            Op::Free(0),
            Op::Alloc(3 << 20),
        ],
    )
}

#[test]
fn run_named_measures_every_named_chain() {
    let w = small();
    let config = BenchConfig {
        timed_passes: 2,
        ..BenchConfig::default()
    };
    for (name, _) in NAMED_RESOURCES {
        let r = bench::run_named(&gpu(), name, &w, &config).unwrap();
        assert_eq!(
            (r.resource.as_str(), r.workload.as_str(), r.ops),
            (*name, "small", 7)
        );
        assert_eq!(r.peak_live_bytes, w.summary().peak_live_bytes, "{name}");
        // Managed memory is resident nowhere until touched: device free memory does not see it.
        assert!(
            *name == "managed" || r.peak_held_bytes >= r.peak_live_bytes,
            "{name}: held {} of {} live",
            r.peak_held_bytes,
            r.peak_live_bytes
        );
        assert!(r.ns_per_op > 0.0, "{name}");
    }
}

#[test]
fn an_unknown_name_is_refused_with_the_known_ones() {
    let err = bench::run_named(&gpu(), "poool", &small(), &BenchConfig::default()).unwrap_err();
    let MrError::InvalidArgument { reason, .. } = err else {
        panic!("{err:?}")
    };
    assert!(
        reason.contains("\"poool\"") && reason.contains("pool-vmm"),
        "{reason}"
    );
    assert!(named::build("poool", gpu()).is_err());
}

#[test]
fn with_named_hands_over_the_chain_as_its_own_type() {
    struct NameOf;
    impl WithResource for NameOf {
        type Output = MrResult<(&'static str, bool)>;
        fn with<R: DeviceMemoryResource + 'static>(
            self,
            build: impl FnOnce() -> MrResult<R>,
        ) -> Self::Output {
            let r = build()?;
            let any: &dyn std::any::Any = &r;
            Ok((
                r.name(),
                any.is::<PoolResource<emm_core::mr::CudaResource<Arc<dyn Driver>>>>(),
            ))
        }
    }
    let (name, is_pool) = named::with_named("pool-vmm", gpu(), NameOf)
        .unwrap()
        .unwrap();
    assert_eq!((name, is_pool), ("PoolResource", true));
    let (name, is_pool) = named::with_named("binning", gpu(), NameOf)
        .unwrap()
        .unwrap();
    assert_eq!(name, named::build("binning", gpu()).unwrap().name());
    assert!(!is_pool);
}

#[test]
fn the_replays_free_everything_and_call_back_after_each_allocation() {
    let g = gpu();
    let pool = named::build("pool", Arc::clone(&g)).unwrap();
    let w = small();
    bench::replay(&*pool, &w, StreamId::DEFAULT).unwrap();
    let calls = Cell::new(0);
    bench::replay_once(&*pool, &w, StreamId::DEFAULT, || {
        calls.set(calls.get() + 1);
        Ok(())
    })
    .unwrap();
    assert_eq!(calls.get(), w.summary().allocs);
    // Everything went back: the pool's free memory is all it holds.
    let pool = PoolResource::new(emm_core::mr::CudaResource::<Arc<dyn Driver>>::new(
        Arc::clone(&g),
    ));
    bench::replay(&pool, &w, StreamId::DEFAULT).unwrap();
    assert_eq!(pool.live_allocations(), 0);
    assert_eq!(pool.free_bytes(), pool.held_bytes());
}

#[test]
fn a_failing_callback_stops_the_replay_and_frees_what_it_made() {
    let g = gpu();
    let pool = PoolResource::new(emm_core::mr::CudaResource::<Arc<dyn Driver>>::new(
        Arc::clone(&g),
    ));
    let calls = Cell::new(0);
    let err = bench::replay_once(&pool, &small(), StreamId::DEFAULT, || {
        calls.set(calls.get() + 1);
        if calls.get() == 2 {
            return Err(MrError::InvalidArgument {
                resource: "test",
                reason: "stop".into(),
            });
        }
        Ok(())
    })
    .unwrap_err();
    assert!(matches!(err, MrError::InvalidArgument { .. }), "{err:?}");
    assert_eq!(calls.get(), 2);
    assert_eq!(pool.live_allocations(), 0);
}
