//! `FailureRetryAdaptor`: after out of memory the callback frees other memory (a cache) and
//! the allocation is retried; a callback that declines gets the error at once; other errors
//! are never retried.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use emm_core::mr::adaptor::RetryRequest;
use emm_core::mr::{
    CudaResource, DeviceMemoryResource, FailureRetryAdaptor, LimitingAdaptor, MrError,
};
use emm_core::{CudaCode, DevicePtr, StreamId};
use emm_sim::{CallKind, Fault, SimConfig, SimDriver, GIB, MIB};

const S: StreamId = StreamId::DEFAULT;

type Shared = std::sync::Arc<LimitingAdaptor<CudaResource<SimDriver>>>;

fn shared(limit: u64) -> (SimDriver, Shared) {
    let g = SimDriver::new(SimConfig::new(4).memory_per_device(GIB)).unwrap();
    let r = std::sync::Arc::new(LimitingAdaptor::new(CudaResource::new(g.clone()), limit));
    (g, r)
}

#[test]
fn flushing_a_cache_lets_the_retry_succeed() {
    let (g, device) = shared(8 * MIB);
    // Another library's cache holds 6 MiB of the 8 MiB budget in 1 MiB blocks.
    let cache: Mutex<Vec<DevicePtr>> = Mutex::new(
        (0..6)
            .map(|_| device.allocate(MIB as usize, S).unwrap())
            .collect(),
    );
    let calls = AtomicU32::new(0);
    let r = FailureRetryAdaptor::new(device.clone(), |req: &RetryRequest<'_>| {
        calls.fetch_add(1, Ordering::Relaxed);
        assert!(req.error.is_out_of_memory());
        assert_eq!(
            (req.bytes, req.stream, req.attempt),
            (4 * MIB as usize, S, calls.load(Ordering::Relaxed))
        );
        // Give back one block per call, as a cache flushing its oldest entry would.
        match cache.lock().unwrap().pop() {
            Some(p) => device.deallocate(p, MIB as usize, S).is_ok(),
            None => false,
        }
    });
    let p = r.allocate(4 * MIB as usize, S).unwrap();
    assert_eq!(calls.load(Ordering::Relaxed), 2, "two blocks had to go");
    assert_eq!(cache.lock().unwrap().len(), 4);
    r.deallocate(p, 4 * MIB as usize, S).unwrap();
    for p in cache.into_inner().unwrap() {
        device.deallocate(p, MIB as usize, S).unwrap();
    }
    assert_eq!(g.report().device_memory.count, 0);
}

#[test]
fn a_callback_that_declines_gets_the_out_of_memory_error() {
    let (_g, device) = shared(MIB);
    let calls = AtomicU32::new(0);
    let r = FailureRetryAdaptor::new(device, |_: &RetryRequest<'_>| {
        calls.fetch_add(1, Ordering::Relaxed);
        false
    });
    let e = r.allocate(2 * MIB as usize, S).unwrap_err();
    assert!(
        matches!(
            e,
            MrError::OutOfMemory {
                resource: "LimitingAdaptor",
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(calls.load(Ordering::Relaxed), 1);
    // Still usable.
    let p = r.allocate(1000, S).unwrap();
    r.deallocate(p, 1000, S).unwrap();
}

#[test]
fn the_attempt_count_lets_a_callback_stop() {
    let (_g, device) = shared(MIB);
    let calls = AtomicU32::new(0);
    let r = FailureRetryAdaptor::new(device, |req: &RetryRequest<'_>| {
        calls.fetch_add(1, Ordering::Relaxed);
        req.attempt < 3
    });
    assert!(r
        .allocate(2 * MIB as usize, S)
        .unwrap_err()
        .is_out_of_memory());
    assert_eq!(calls.load(Ordering::Relaxed), 3);
    assert!(r
        .allocate_aligned(2 * MIB as usize, 256, S)
        .unwrap_err()
        .is_out_of_memory());
    assert_eq!(calls.load(Ordering::Relaxed), 6, "aligned calls retry too");
}

#[test]
fn other_errors_are_never_retried() {
    let (g, device) = shared(GIB);
    let calls = AtomicU32::new(0);
    let r = FailureRetryAdaptor::new(device, |_: &RetryRequest<'_>| {
        calls.fetch_add(1, Ordering::Relaxed);
        true
    });
    g.inject(Fault::FailNth {
        call: Some(CallKind::MemAlloc),
        nth: 1,
        code: CudaCode::LAUNCH_FAILED,
    });
    assert!(matches!(r.allocate(4096, S), Err(MrError::Driver(_))));
    assert!(matches!(
        r.allocate_aligned(64, 4096, S),
        Err(MrError::UnsupportedAlignment { .. })
    ));
    assert_eq!(calls.load(Ordering::Relaxed), 0);
    assert_eq!(r.allocate(0, S).unwrap(), DevicePtr::NULL);
}

#[test]
fn a_driver_out_of_memory_is_retried_once_the_device_has_room() {
    let (g, device) = shared(GIB);
    g.inject(Fault::FailNth {
        call: Some(CallKind::MemAlloc),
        nth: 1,
        code: CudaCode::OUT_OF_MEMORY,
    });
    let r = FailureRetryAdaptor::new(device, |req: &RetryRequest<'_>| req.attempt == 1);
    let p = r.allocate(4096, S).unwrap();
    r.deallocate(p, 4096, S).unwrap();
    assert_eq!(r.upstream().allocated_bytes(), 0);
}
