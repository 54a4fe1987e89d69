//! Streams, events and races: ordering by events, synchronize and the legacy default
//! stream, stream-ordered frees, virtual time, bad handles.

use super::*;

/// Writes one allocation on `s1`, then on `s2`, with nothing ordering the two writes.
fn write_on_both_unordered(g: &SimDriver, s1: StreamId, s2: StreamId) {
    let a = g.mem_alloc(4096).unwrap();
    g.memset_d8(a, 1, 4096, Some(s1)).unwrap();
    g.memset_d8(a, 2, 4096, Some(s2)).unwrap();
}

#[test]
fn unordered_use_across_streams_is_a_race() {
    let g = gpu();
    let (s1, s2) = two_streams(&g);
    write_on_both_unordered(&g, s1, s2);
    let races: Vec<_> = g.report().races().cloned().collect();
    assert_eq!(races.len(), 1, "{:?}", g.report());
    let text = races[0].to_string();
    assert!(
        text.contains(&format!("stream:{}", s1.0)) && text.contains(&format!("stream:{}", s2.0)),
        "{text}"
    );
}

/// With happens-before tracking off, streams that wait on one another in a long chain cost
/// nothing per stream, and no race is reported (the replays' and benchmarks' setting); the
/// same unordered use is a race with it on (above).
#[test]
fn race_tracking_off_reports_no_race_and_keeps_no_clocks() {
    let g = SimDriver::new(SimConfig::new(1).track_races(false)).unwrap();
    let (s1, s2) = two_streams(&g);
    write_on_both_unordered(&g, s1, s2);
    assert_eq!(g.report().races().count(), 0, "{}", g.report());
    // Twenty thousand streams, each ordered after the one before: with clocks this took
    // minutes and gigabytes (each stream's clock held every stream before it).
    let e = g.event_create().unwrap();
    let start = std::time::Instant::now();
    let mut prev = g.stream_create(false).unwrap();
    for _ in 0..20_000 {
        let next = g.stream_create(false).unwrap();
        g.event_record(e, prev).unwrap();
        g.stream_wait_event(next, e).unwrap();
        g.stream_destroy(prev).unwrap();
        prev = next;
    }
    assert!(start.elapsed().as_secs() < 20, "{:?}", start.elapsed());
}

#[test]
fn an_event_wait_orders_streams() {
    let g = gpu();
    let (s1, s2) = two_streams(&g);
    let e = g.event_create().unwrap();
    let a = g.mem_alloc(4096).unwrap();
    g.memset_d8(a, 1, 4096, Some(s1)).unwrap();
    g.event_record(e, s1).unwrap();
    g.stream_wait_event(s2, e).unwrap();
    g.memset_d8(a, 2, 4096, Some(s2)).unwrap();
    assert_eq!(g.report().races().count(), 0, "{}", g.report());
    // A kernel on s1 reading what s2 wrote, without waiting on s2, is a race.
    g.device_access(a, 16, s1, false).unwrap();
    assert_eq!(g.report().races().count(), 1, "{}", g.report());
    // Reads on two streams never race with each other.
    let b = g.mem_alloc(64).unwrap();
    g.memset_d8(b, 7, 64, None).unwrap();
    // cuMemsetD8 is asynchronous with respect to the host: wait for it.
    g.stream_synchronize(StreamId::DEFAULT).unwrap();
    g.device_access(b, 64, s1, false).unwrap();
    g.device_access(b, 64, s2, false).unwrap();
    assert_eq!(g.report().races().count(), 1, "{}", g.report());
}

#[test]
fn a_synchronize_orders_streams() {
    let g = gpu();
    let (s1, s2) = two_streams(&g);
    let a = g.mem_alloc(4096).unwrap();
    g.memset_d8(a, 1, 4096, Some(s1)).unwrap();
    g.stream_synchronize(s1).unwrap();
    g.memset_d8(a, 2, 4096, Some(s2)).unwrap();
    assert_eq!(g.report().races().count(), 0);
}

#[test]
fn the_legacy_default_stream_orders_blocking_streams_but_not_non_blocking_ones() {
    let g = gpu();
    let blocking = g.stream_create(false).unwrap();
    let non_blocking = g.stream_create(true).unwrap();
    let a = g.mem_alloc(4096).unwrap();
    g.memset_d8(a, 1, 4096, Some(blocking)).unwrap();
    g.memset_d8(a, 2, 4096, Some(StreamId::DEFAULT)).unwrap();
    assert_eq!(g.report().races().count(), 0);
    g.memset_d8(a, 3, 4096, Some(non_blocking)).unwrap();
    assert_eq!(g.report().races().count(), 1);
}

#[test]
fn stream_ordered_free_is_reusable_at_once_on_the_same_stream_only() {
    let g = gpu();
    let (a, b) = two_streams(&g);
    let p = g.mem_alloc_async(1 << 20, a).unwrap();
    g.mem_free_async(p, a).unwrap();
    let q = g.mem_alloc_async(1 << 20, b).unwrap();
    assert_ne!(p, q, "stream b is not ordered after the free on a");
    let r = g.mem_alloc_async(1 << 20, a).unwrap();
    assert_eq!(p, r, "same stream reuses at once");
    g.mem_free_async(r, a).unwrap();
    let e = g.event_create().unwrap();
    g.event_record(e, a).unwrap();
    g.stream_wait_event(b, e).unwrap();
    let s = g.mem_alloc_async(1 << 20, b).unwrap();
    assert_eq!(
        p, s,
        "after waiting on an event recorded after the free, b reuses"
    );
    for (ptr, st) in [(q, b), (s, b)] {
        g.mem_free_async(ptr, st).unwrap();
    }
    assert_eq!(g.report().violations, vec![]);
}

#[test]
fn freeing_on_one_stream_while_another_uses_the_block_is_a_race() {
    let g = gpu();
    let (a, b) = two_streams(&g);
    let p = g.mem_alloc_async(4096, a).unwrap();
    g.memset_d8(p, 0, 4096, Some(b)).unwrap();
    g.mem_free_async(p, a).unwrap();
    // The memset on b is ordered neither after the allocation on a nor before the free on a.
    assert_eq!(g.report().races().count(), 2, "{}", g.report());
}

#[test]
fn virtual_time_advances_with_work_and_synchronize_waits_for_it() {
    let g = gpu();
    let s = g.stream_create(true).unwrap();
    let a = g.mem_alloc(64 << 20).unwrap();
    let before = g.now_ns();
    g.memset_d8(a, 0, 64 << 20, Some(s)).unwrap();
    assert!(
        !g.stream_query(s).unwrap(),
        "64 MiB of work is not done at once"
    );
    g.stream_synchronize(s).unwrap();
    assert!(g.stream_query(s).unwrap());
    assert!(g.now_ns() > before + 40_000, "{} ns", g.now_ns() - before);
}

#[test]
fn event_query_reports_progress() {
    let g = gpu();
    let s = g.stream_create(true).unwrap();
    let e = g.event_create().unwrap();
    assert!(g.event_query(e).unwrap(), "an unrecorded event is complete");
    let a = g.mem_alloc(256 << 20).unwrap();
    g.memset_d8(a, 0, 256 << 20, Some(s)).unwrap();
    g.event_record(e, s).unwrap();
    assert!(!g.event_query(e).unwrap());
    g.event_synchronize(e).unwrap();
    assert!(g.event_query(e).unwrap());
}

#[test]
fn bad_handles_are_invalid_handle_errors() {
    let g = gpu();
    let s = g.stream_create(false).unwrap();
    g.stream_destroy(s).unwrap();
    assert_eq!(code(g.stream_synchronize(s)), CudaCode::INVALID_HANDLE);
    assert_eq!(
        code(g.stream_destroy(StreamId::DEFAULT)),
        CudaCode::INVALID_HANDLE
    );
    assert_eq!(
        code(g.event_query(emm_core::EventId(12345))),
        CudaCode::INVALID_HANDLE
    );
    let e = g.event_create().unwrap();
    g.event_destroy(e).unwrap();
    assert_eq!(code(g.event_destroy(e)), CudaCode::INVALID_HANDLE);
    assert_eq!(
        code(g.memset_d8(DevicePtr(1), 0, 1, Some(s))),
        CudaCode::INVALID_HANDLE
    );
}

#[test]
fn each_thread_has_its_own_per_thread_default_stream() {
    let g = gpu();
    let a = g.mem_alloc(4096).unwrap();
    g.memset_d8(a, 1, 4096, Some(StreamId::PER_THREAD)).unwrap();
    // The same thread's per-thread stream is ordered with itself.
    g.memset_d8(a, 2, 4096, Some(StreamId::PER_THREAD)).unwrap();
    assert_eq!(g.report().races().count(), 0);
    // Another thread's per-thread stream is a different stream: unordered, a race.
    let g2 = g.clone();
    std::thread::spawn(move || {
        g2.memset_d8(a, 3, 4096, Some(StreamId::PER_THREAD))
            .unwrap()
    })
    .join()
    .unwrap();
    assert_eq!(g.report().races().count(), 1);
    assert_eq!(
        code(g.stream_destroy(StreamId::PER_THREAD)),
        CudaCode::INVALID_HANDLE
    );
    g.mem_free(a).unwrap();
    assert!(
        g.report().nothing_held(),
        "per-thread streams are not leaks: {}",
        g.report()
    );
}

#[test]
fn stream_ordered_memory_is_usable_elsewhere_only_after_its_allocation() {
    let g = gpu();
    let (a, b) = two_streams(&g);
    let p = g.mem_alloc_async(4096, a).unwrap();
    g.memset_d8(p, 1, 4096, Some(a)).unwrap();
    assert_eq!(g.report().races().count(), 0, "same stream: {}", g.report());
    let q = g.mem_alloc_async(4096, a).unwrap();
    g.memset_d8(q, 1, 4096, Some(b)).unwrap();
    let races: Vec<String> = g.report().races().map(ToString::to_string).collect();
    assert_eq!(races.len(), 1, "{races:?}");
    assert!(races[0].contains("cuMemAllocAsync"), "{races:?}");
    let e = g.event_create().unwrap();
    let r = g.mem_alloc_async(4096, a).unwrap();
    g.event_record(e, a).unwrap();
    g.stream_wait_event(b, e).unwrap();
    g.memset_d8(r, 1, 4096, Some(b)).unwrap();
    assert_eq!(
        g.report().races().count(),
        1,
        "ordered after the allocation: {}",
        g.report()
    );
}
