//! Where the exact order and number of driver calls is the rule, a [`ScriptedDriver`] checks
//! it: the flush on the 11th pending free, one retry after out of memory, unregister before
//! re-pin.

use std::sync::Arc;

use crate::contract::{EmmError, MemoryManager};
use crate::driver::scripted::ScriptedDriver;
use crate::driver::{ContextId, DevicePtr, HostPtr, MemInfo};
use crate::error::{CudaCode, DriverError, DriverResult};
use crate::managers::DefaultManager;

const CTX: ContextId = ContextId(1);
const TOTAL: u64 = 80 << 30;

/// A driver whose context is always current and whose device has 80 GiB, all free.
fn driver() -> Arc<ScriptedDriver> {
    Arc::new(
        ScriptedDriver::default()
            .always("current_context", || DriverResult::Ok(CTX))
            .always("mem_get_info", || {
                DriverResult::Ok(MemInfo {
                    free: TOTAL,
                    total: TOTAL,
                })
            }),
    )
}

fn oom() -> DriverError {
    DriverError::new(
        "cuMemAlloc",
        CudaCode::OUT_OF_MEMORY,
        "scripted: no memory left",
    )
}

/// Expects `cuMemAlloc` of `size` bytes once per pointer, in order, answering each pointer.
fn expect_allocs(d: &ScriptedDriver, size: usize, ptrs: &[u64]) {
    for &p in ptrs {
        d.expect(format!("mem_alloc({size})"), DriverResult::Ok(DevicePtr(p)));
    }
}

/// Expects `cuMemFree` of each pointer once, in order.
fn expect_frees(d: &ScriptedDriver, ptrs: &[u64]) {
    for &p in ptrs {
        expect_free(d, p, Ok(()));
    }
}

fn expect_free(d: &ScriptedDriver, p: u64, answer: DriverResult<()>) {
    d.expect(format!("mem_free({:?})", DevicePtr(p)), answer);
}

/// NBEP 7: "When the addition of a new cleanup function to the deallocation list causes
/// the number or size of pending deallocations to exceed a configured ratio, the
/// `_PendingDeallocs` object runs deallocators for all items it knows about."
#[test]
fn pending_deallocs_flush_on_the_eleventh_pending_free() {
    let d = driver();
    let ptrs: Vec<u64> = (1..=11).map(|i| i * 0x1000).collect();
    expect_allocs(&d, 1024, &ptrs);
    expect_frees(&d, &ptrs);
    let m = DefaultManager::new(Arc::clone(&d), CTX);
    m.initialize().unwrap();
    let mut live: Vec<_> = (0..11).map(|_| m.memalloc(1024).unwrap()).collect();
    for _ in 0..10 {
        drop(live.remove(0));
    }
    assert_eq!(d.made("mem_free"), 0, "10 pending frees are held");
    assert_eq!(m.deallocations().len(), 10);
    drop(live.remove(0));
    assert_eq!(d.made("mem_free"), 11, "the 11th flushes all, oldest first");
    assert!(m.deallocations().is_empty());
    d.assert_done();
}

/// NBEP 7: "[defer_cleanup is] a mechanism for preventing deallocations entirely during
/// critical sections"; when the last guard goes, the queue over its threshold flushes.
#[test]
fn defer_cleanup_holds_the_eleventh_free_until_the_guard_goes() {
    let d = driver();
    let ptrs: Vec<u64> = (1..=11).map(|i| i * 0x1000).collect();
    expect_allocs(&d, 64, &ptrs);
    expect_frees(&d, &ptrs);
    let m = DefaultManager::new(Arc::clone(&d), CTX);
    m.initialize().unwrap();
    let live: Vec<_> = (0..11).map(|_| m.memalloc(64).unwrap()).collect();
    let outer = m.defer_cleanup();
    let inner = m.defer_cleanup();
    drop(live);
    drop(inner);
    assert_eq!(d.made("mem_free"), 0, "the outer guard still holds");
    drop(outer);
    assert_eq!(d.made("mem_free"), 11);
    d.assert_done();
}

/// Numba's `_attempt_allocation`: on `CUDA_ERROR_OUT_OF_MEMORY`, "self.deallocations.clear()"
/// and allocate once more.
#[test]
fn out_of_memory_flushes_pending_frees_then_retries_once() {
    let d = driver();
    expect_allocs(&d, 64, &[0x1000, 0x2000]);
    d.expect("mem_alloc(4096)", DriverResult::<DevicePtr>::Err(oom()));
    expect_frees(&d, &[0x1000, 0x2000]);
    expect_allocs(&d, 4096, &[0x1000]);
    expect_frees(&d, &[0x1000]);
    let m = DefaultManager::new(Arc::clone(&d), CTX);
    m.initialize().unwrap();
    drop((m.memalloc(64).unwrap(), m.memalloc(64).unwrap()));
    assert_eq!(m.deallocations().len(), 2);
    let p = m.memalloc(4096).unwrap();
    assert_eq!(p.device_ptr(), DevicePtr(0x1000));
    assert_eq!(d.made("mem_free"), 2);
    drop(p);
    drop(m); // the manager going flushes what is left
    assert_eq!(d.made("mem_free"), 3);
    d.assert_done();
}

/// One retry, not more: a second out of memory is the typed error, with what is free.
#[test]
fn out_of_memory_twice_is_an_error_after_exactly_two_attempts() {
    let d = driver();
    for _ in 0..2 {
        d.expect(
            "mem_alloc(1099511627776)",
            DriverResult::<DevicePtr>::Err(oom()),
        );
    }
    let m = DefaultManager::new(Arc::clone(&d), CTX);
    m.initialize().unwrap();
    let e = m.memalloc(1 << 40).unwrap_err();
    assert_eq!(
        e,
        EmmError::OutOfMemory {
            manager: "DefaultManager".into(),
            requested: 1 << 40,
            available: Some(TOTAL),
        }
    );
    // No third attempt: it would be a call the script did not expect.
    d.assert_done();
}

/// Re-pinning a range whose unpin is still pending must unregister it first, even under
/// `defer_cleanup`: otherwise `cuMemHostRegister` fails with
/// `CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED` (a register out of its turn here is a call the
/// script did not expect, and fails the test).
#[test]
fn unregister_runs_before_re_pin_of_the_same_range() {
    let h = HostPtr(0x7000_0000);
    let d = driver();
    for _ in 0..3 {
        d.expect(
            format!("host_register({h:?}, 4096, false)"),
            DriverResult::Ok(()),
        );
        d.expect(format!("host_unregister({h:?})"), DriverResult::Ok(()));
    }
    let m = DefaultManager::new(Arc::clone(&d), CTX);
    m.initialize().unwrap();
    drop(m.mempin(None, h, 4096, false).unwrap());
    assert_eq!(m.deallocations().len(), 1, "the unpin is pending");
    drop(m.mempin(None, h, 4096, false).unwrap());
    let guard = m.defer_cleanup();
    let pinned = m.mempin(None, h, 4096, false).unwrap();
    drop(guard);
    drop(pinned);
    drop(m);
    assert_eq!(d.made("host_unregister"), 3);
    d.assert_done();
}

/// A free that fails inside a finalizer cannot be returned there; it is recorded and reported
/// by the next `reset` (as cudarc's `record_err` does), and the rest still run.
#[test]
fn a_deferred_free_that_fails_is_reported_by_the_next_reset() {
    let d = driver();
    expect_allocs(&d, 64, &[0x1000, 0x2000]);
    expect_free(
        &d,
        0x1000,
        Err(DriverError::new(
            "cuMemFree",
            CudaCode::ILLEGAL_ADDRESS,
            "scripted: a kernel faulted",
        )),
    );
    expect_frees(&d, &[0x2000]);
    let m = DefaultManager::new(Arc::clone(&d), CTX);
    m.initialize().unwrap();
    drop((m.memalloc(64).unwrap(), m.memalloc(64).unwrap()));
    let e = m.reset().unwrap_err();
    assert_eq!(d.made("mem_free"), 2, "the second free still ran");
    assert!(
        matches!(&e, EmmError::DeallocationsFailed { count: 1, first } if first.code == CudaCode::ILLEGAL_ADDRESS),
        "{e}"
    );
    assert!(
        e.to_string()
            .starts_with("1 deferred deallocation(s) failed"),
        "{e}"
    );
    m.reset().unwrap(); // reported once
    d.assert_done();
}
