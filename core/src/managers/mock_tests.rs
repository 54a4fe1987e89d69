//! Where the exact order and number of driver calls is the rule, a `mockall` mock of the
//! `Driver` checks it: the flush on the 11th pending free, one retry after out of memory,
//! unregister before re-pin.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use mockall::predicate::eq;
use mockall::Sequence;

use crate::contract::{EmmError, MemoryManager};
use crate::driver::{ContextId, DevicePtr, HostPtr, MemInfo, MockDriver};
use crate::error::{CudaCode, DriverError};
use crate::managers::DefaultManager;

const CTX: ContextId = ContextId(1);
const TOTAL: u64 = 80 << 30;

/// A mock whose context is always current and whose device has 80 GiB, all free.
fn driver() -> MockDriver {
    let mut d = MockDriver::new();
    d.expect_current_context().returning(|| Ok(CTX));
    d.expect_mem_get_info().returning(|| {
        Ok(MemInfo {
            free: TOTAL,
            total: TOTAL,
        })
    });
    d
}

fn oom() -> DriverError {
    DriverError::new(
        "cuMemAlloc",
        CudaCode::OUT_OF_MEMORY,
        "mock: no memory left",
    )
}

fn counter() -> Arc<AtomicUsize> {
    Arc::new(AtomicUsize::new(0))
}

/// Expects `cuMemAlloc` of `size` bytes once per pointer, in order, answering each pointer.
fn expect_allocs(d: &mut MockDriver, seq: &mut Sequence, size: usize, ptrs: &[u64]) {
    for &p in ptrs {
        d.expect_mem_alloc()
            .with(eq(size))
            .times(1)
            .in_sequence(seq)
            .returning(move |_| Ok(DevicePtr(p)));
    }
}

/// Expects `cuMemFree` of each pointer once, in order, counting them in `frees`.
fn expect_frees(d: &mut MockDriver, seq: &mut Sequence, ptrs: &[u64], frees: &Arc<AtomicUsize>) {
    for &p in ptrs {
        let f = Arc::clone(frees);
        d.expect_mem_free()
            .with(eq(DevicePtr(p)))
            .times(1)
            .in_sequence(seq)
            .returning(move |_| {
                f.fetch_add(1, Ordering::SeqCst);
                Ok(())
            });
    }
}

/// NBEP 7: "When the addition of a new cleanup function to the deallocation list causes
/// the number or size of pending deallocations to exceed a configured ratio, the
/// `_PendingDeallocs` object runs deallocators for all items it knows about."
#[test]
fn pending_deallocs_flush_on_the_eleventh_pending_free() {
    let mut d = driver();
    let mut seq = Sequence::new();
    let ptrs: Vec<u64> = (1..=11).map(|i| i * 0x1000).collect();
    expect_allocs(&mut d, &mut seq, 1024, &ptrs);
    let frees = counter();
    expect_frees(&mut d, &mut seq, &ptrs, &frees);
    let m = DefaultManager::new(Arc::new(d), CTX);
    m.initialize().unwrap();
    let mut live: Vec<_> = (0..11).map(|_| m.memalloc(1024).unwrap()).collect();
    for _ in 0..10 {
        drop(live.remove(0));
    }
    assert_eq!(frees.load(Ordering::SeqCst), 0, "10 pending frees are held");
    assert_eq!(m.deallocations().len(), 10);
    drop(live.remove(0));
    assert_eq!(
        frees.load(Ordering::SeqCst),
        11,
        "the 11th flushes all, oldest first"
    );
    assert!(m.deallocations().is_empty());
}

/// NBEP 7: "[defer_cleanup is] a mechanism for preventing deallocations entirely during
/// critical sections"; when the last guard goes, the queue over its threshold flushes.
#[test]
fn defer_cleanup_holds_the_eleventh_free_until_the_guard_goes() {
    let mut d = driver();
    let mut seq = Sequence::new();
    let ptrs: Vec<u64> = (1..=11).map(|i| i * 0x1000).collect();
    expect_allocs(&mut d, &mut seq, 64, &ptrs);
    let frees = counter();
    expect_frees(&mut d, &mut seq, &ptrs, &frees);
    let m = DefaultManager::new(Arc::new(d), CTX);
    m.initialize().unwrap();
    let live: Vec<_> = (0..11).map(|_| m.memalloc(64).unwrap()).collect();
    let outer = m.defer_cleanup();
    let inner = m.defer_cleanup();
    drop(live);
    drop(inner);
    assert_eq!(
        frees.load(Ordering::SeqCst),
        0,
        "the outer guard still holds"
    );
    drop(outer);
    assert_eq!(frees.load(Ordering::SeqCst), 11);
}

/// Numba's `_attempt_allocation`: on `CUDA_ERROR_OUT_OF_MEMORY`, "self.deallocations.clear()"
/// and allocate once more.
#[test]
fn out_of_memory_flushes_pending_frees_then_retries_once() {
    let mut d = driver();
    let mut seq = Sequence::new();
    expect_allocs(&mut d, &mut seq, 64, &[0x1000, 0x2000]);
    d.expect_mem_alloc()
        .with(eq(4096))
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| Err(oom()));
    let frees = counter();
    expect_frees(&mut d, &mut seq, &[0x1000, 0x2000], &frees);
    d.expect_mem_alloc()
        .with(eq(4096))
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| Ok(DevicePtr(0x1000)));
    expect_frees(&mut d, &mut seq, &[0x1000], &frees);
    let m = DefaultManager::new(Arc::new(d), CTX);
    m.initialize().unwrap();
    drop((m.memalloc(64).unwrap(), m.memalloc(64).unwrap()));
    assert_eq!(m.deallocations().len(), 2);
    let p = m.memalloc(4096).unwrap();
    assert_eq!(p.device_ptr(), DevicePtr(0x1000));
    assert_eq!(frees.load(Ordering::SeqCst), 2);
    drop(p);
    drop(m); // the manager going flushes what is left
    assert_eq!(frees.load(Ordering::SeqCst), 3);
}

/// One retry, not more: a second out of memory is the typed error, with what is free.
#[test]
fn out_of_memory_twice_is_an_error_after_exactly_two_attempts() {
    let mut d = driver();
    d.expect_mem_alloc().times(2).returning(|_| Err(oom()));
    let m = DefaultManager::new(Arc::new(d), CTX);
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
    // Still usable: the mock checks on drop that no third attempt was made.
}

/// Re-pinning a range whose unpin is still pending must unregister it first, even under
/// `defer_cleanup`: otherwise `cuMemHostRegister` fails with
/// `CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED`.
#[test]
fn unregister_runs_before_re_pin_of_the_same_range() {
    let h = HostPtr(0x7000_0000);
    let mut d = driver();
    let mut seq = Sequence::new();
    let registered = Arc::new(AtomicUsize::new(0));
    for _ in 0..3 {
        let r = Arc::clone(&registered);
        d.expect_host_register()
            .with(eq(h), eq(4096), eq(false))
            .times(1)
            .in_sequence(&mut seq)
            .returning(move |_, _, _| {
                // The mock plays the driver: registering a registered range fails.
                match r.fetch_add(1, Ordering::SeqCst) {
                    0 => Ok(()),
                    _ => Err(DriverError::new(
                        "cuMemHostRegister",
                        CudaCode::HOST_MEMORY_ALREADY_REGISTERED,
                        "mock: still registered",
                    )),
                }
            });
        let r = Arc::clone(&registered);
        d.expect_host_unregister()
            .with(eq(h))
            .times(1)
            .in_sequence(&mut seq)
            .returning(move |_| {
                r.fetch_sub(1, Ordering::SeqCst);
                Ok(())
            });
    }
    let m = DefaultManager::new(Arc::new(d), CTX);
    m.initialize().unwrap();
    drop(m.mempin(None, h, 4096, false).unwrap());
    assert_eq!(m.deallocations().len(), 1, "the unpin is pending");
    drop(m.mempin(None, h, 4096, false).unwrap());
    let guard = m.defer_cleanup();
    let pinned = m.mempin(None, h, 4096, false).unwrap();
    drop(guard);
    drop(pinned);
    drop(m);
    assert_eq!(registered.load(Ordering::SeqCst), 0);
}

/// A free that fails inside a finalizer cannot be returned there; it is recorded and reported
/// by the next `reset` (as cudarc's `record_err` does), and the rest still run.
#[test]
fn a_deferred_free_that_fails_is_reported_by_the_next_reset() {
    let mut d = driver();
    let mut seq = Sequence::new();
    expect_allocs(&mut d, &mut seq, 64, &[0x1000, 0x2000]);
    d.expect_mem_free()
        .with(eq(DevicePtr(0x1000)))
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| {
            Err(DriverError::new(
                "cuMemFree",
                CudaCode::ILLEGAL_ADDRESS,
                "mock: a kernel faulted",
            ))
        });
    let frees = counter();
    expect_frees(&mut d, &mut seq, &[0x2000], &frees);
    let m = DefaultManager::new(Arc::new(d), CTX);
    m.initialize().unwrap();
    drop((m.memalloc(64).unwrap(), m.memalloc(64).unwrap()));
    let e = m.reset().unwrap_err();
    assert_eq!(frees.load(Ordering::SeqCst), 1, "the second free still ran");
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
}
