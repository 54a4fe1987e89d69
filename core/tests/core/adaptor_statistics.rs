//! `StatisticsAdaptor`: current, peak and total bytes and counts, nested counters as RMM's
//! `push_counters` / `pop_counters`, and rollback when the upstream fails.

use emm_core::mr::adaptor::{Counter, Counters};
use emm_core::mr::{CudaResource, DeviceMemoryResource, MrError, StatisticsAdaptor};
use emm_core::{CudaCode, DevicePtr, StreamId};
use emm_sim::{CallKind, Fault, SimConfig, SimDriver, GIB};

fn stats() -> (SimDriver, StatisticsAdaptor<CudaResource<SimDriver>>) {
    let g = SimDriver::new(SimConfig::new(3).memory_per_device(GIB)).unwrap();
    let r = StatisticsAdaptor::new(CudaResource::new(g.clone()));
    (g, r)
}

fn c(value: i64, peak: i64, total: i64) -> Counter {
    Counter { value, peak, total }
}

const S: StreamId = StreamId::DEFAULT;

#[test]
fn counts_current_peak_and_total() {
    let (_g, r) = stats();
    let a = r.allocate(1000, S).unwrap();
    let b = r.allocate(3000, S).unwrap();
    r.deallocate(a, 1000, S).unwrap();
    let d = r.allocate(500, S).unwrap();
    assert_eq!(r.bytes_counter(), c(3500, 4000, 4500));
    assert_eq!(r.allocations_counter(), c(2, 2, 3));
    r.deallocate(b, 3000, S).unwrap();
    r.deallocate(d, 500, S).unwrap();
    assert_eq!(r.bytes_counter(), c(0, 4000, 4500));
    assert_eq!(r.allocations_counter(), c(0, 2, 3));
    // Zero bytes is not an allocation.
    assert_eq!(r.allocate(0, S).unwrap(), DevicePtr::NULL);
    r.deallocate(DevicePtr::NULL, 0, S).unwrap();
    assert_eq!(r.allocations_counter().total, 3);
}

#[test]
fn nested_counters_count_only_their_level_and_fold_back() {
    let (_g, r) = stats();
    let outer = r.allocate(1000, S).unwrap();
    assert_eq!(r.depth(), 1);
    let before = r.push_counters();
    assert_eq!(before.bytes, c(1000, 1000, 1000));
    assert_eq!(r.depth(), 2);
    assert_eq!(
        r.counters(),
        Counters::default(),
        "a new level starts at zero"
    );

    let inner = r.allocate(200, S).unwrap();
    let inner2 = r.allocate(300, S).unwrap();
    r.deallocate(inner2, 300, S).unwrap();
    // Freeing memory of the outer level makes this level's value negative, as in RMM.
    r.deallocate(outer, 1000, S).unwrap();
    assert_eq!(r.bytes_counter(), c(-800, 500, 500));
    assert_eq!(r.allocations_counter(), c(0, 2, 2));

    let popped = r.pop_counters().unwrap();
    assert_eq!(popped.bytes, c(-800, 500, 500));
    assert_eq!(r.depth(), 1);
    // Folded back: the inner peak counts on top of the outer value when the level began.
    assert_eq!(r.bytes_counter(), c(200, 1500, 1500));
    assert_eq!(r.allocations_counter(), c(1, 3, 3));
    r.deallocate(inner, 200, S).unwrap();
    assert_eq!(r.bytes_counter().value, 0);
}

#[test]
fn levels_nest_more_than_once() {
    let (_g, r) = stats();
    r.push_counters();
    let a = r.allocate(100, S).unwrap();
    r.push_counters();
    let b = r.allocate(50, S).unwrap();
    assert_eq!(r.depth(), 3);
    assert_eq!(r.pop_counters().unwrap().bytes, c(50, 50, 50));
    assert_eq!(r.bytes_counter(), c(150, 150, 150));
    assert_eq!(r.pop_counters().unwrap().bytes, c(150, 150, 150));
    assert_eq!(r.bytes_counter(), c(150, 150, 150));
    r.deallocate(a, 100, S).unwrap();
    r.deallocate(b, 50, S).unwrap();
}

#[test]
fn popping_the_base_level_is_an_error_that_changes_nothing() {
    let (_g, r) = stats();
    let a = r.allocate(100, S).unwrap();
    let e = r.pop_counters().unwrap_err();
    assert!(matches!(e, MrError::InvalidArgument { .. }));
    assert!(e.to_string().contains("push_counters"), "{e}");
    assert_eq!(r.depth(), 1);
    assert_eq!(r.bytes_counter(), c(100, 100, 100));
    r.deallocate(a, 100, S).unwrap();
}

#[test]
fn a_failed_allocation_is_not_counted() {
    let (g, r) = stats();
    g.inject(Fault::FailNth {
        call: Some(CallKind::MemAlloc),
        nth: 1,
        code: CudaCode::OUT_OF_MEMORY,
    });
    assert!(r.allocate(4096, S).unwrap_err().is_out_of_memory());
    assert!(r.allocate(1 << 50, S).is_err());
    assert_eq!(r.counters(), Counters::default());
    let p = r.allocate(4096, S).unwrap();
    assert_eq!(r.allocations_counter(), c(1, 1, 1));
    r.deallocate(p, 4096, S).unwrap();
}

#[test]
fn a_refused_free_is_rolled_back() {
    let (g, r) = stats();
    let p = r.allocate(4096, S).unwrap();
    // A foreign pointer: the upstream refuses, the counters come back.
    let e = r.deallocate(DevicePtr(0xdead_0000), 4096, S).unwrap_err();
    assert!(matches!(e, MrError::InvalidFree { .. }), "{e}");
    assert_eq!(r.bytes_counter(), c(4096, 4096, 4096));
    assert_eq!(r.allocations_counter(), c(1, 1, 1));
    // A driver failure on a real free: rolled back too, and the memory can still be freed.
    g.inject(Fault::FailNth {
        call: Some(CallKind::MemFree),
        nth: 1,
        code: CudaCode::UNKNOWN,
    });
    assert!(r.deallocate(p, 4096, S).is_err());
    assert_eq!(r.bytes_counter(), c(4096, 4096, 4096));
    r.deallocate(p, 4096, S).unwrap();
    assert_eq!(r.bytes_counter(), c(0, 4096, 4096));
    assert_eq!(g.report().device_memory.count, 0);
}

#[test]
fn counters_are_exact_under_four_threads() {
    let (_g, r) = stats();
    std::thread::scope(|s| {
        for t in 0..4usize {
            let r = &r;
            s.spawn(move || {
                for i in 0..250usize {
                    let size = 256 * (1 + (i + t) % 7);
                    let p = r.allocate(size, S).unwrap();
                    r.deallocate(p, size, S).unwrap();
                }
            });
        }
    });
    let expected_total: i64 = (0..4usize)
        .flat_map(|t| (0..250usize).map(move |i| 256 * (1 + (i + t) % 7) as i64))
        .sum();
    assert_eq!(r.bytes_counter().value, 0);
    assert_eq!(r.bytes_counter().total, expected_total);
    assert_eq!(r.allocations_counter().total, 1000);
    assert!(r.allocations_counter().peak <= 4);
}
