//! A chain built by value and shared by four threads:
//! `StatisticsAdaptor::new(LoggingAdaptor::new(LimitingAdaptor::new(CudaResource::new(driver),
//! limit), writer))`. Every layer must agree with the others, the contents must never bleed,
//! and the log it writes must replay to the same counts, on one thread and on one thread per
//! log thread.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use emm_bench::replay::{replay, EventLog, ReplayOptions, Threading};
use emm_core::mr::{
    CudaResource, DeviceMemoryResource, LimitingAdaptor, LoggingAdaptor, MrError, StatisticsAdaptor,
};
use emm_core::workloads::SplitMix64;
use emm_core::{DevicePtr, Driver, StreamId};
use emm_sim::{SimConfig, SimDriver, GIB, MIB};

const LIMIT: u64 = 2 * MIB;

fn fill_and_check(g: &SimDriver, p: DevicePtr, n: usize, tag: u8, s: StreamId) {
    let head = n.min(512);
    g.memset_d8(p, tag, head, Some(s)).unwrap();
    let mut back = vec![0u8; head];
    g.memcpy_dtoh(&mut back, p, Some(s)).unwrap();
    assert!(back.iter().all(|&b| b == tag), "{p}: contents bled");
}

#[test]
fn a_chain_shared_by_four_threads_stays_consistent_and_its_log_replays() {
    let g = SimDriver::new(SimConfig::new(21).memory_per_device(GIB)).unwrap();
    let chain = Arc::new(StatisticsAdaptor::new(LoggingAdaptor::new(
        LimitingAdaptor::new(CudaResource::new(g.clone()), LIMIT),
        Vec::new(),
    )));
    let (ok, refused) = (AtomicUsize::new(0), AtomicUsize::new(0));
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (chain, g, ok, refused) = (Arc::clone(&chain), &g, &ok, &refused);
            s.spawn(move || {
                let stream = g.stream_create(true).unwrap();
                let mut rng = SplitMix64::new(t + 1);
                let mut live: Vec<(DevicePtr, usize, u8)> = Vec::new();
                for step in 0..300u32 {
                    if live.len() < 6 && (live.is_empty() || rng.below(100) < 55) {
                        let n = rng.range(1, MIB) as usize;
                        match chain.allocate(n, stream) {
                            Ok(p) => {
                                let tag = (t as u8) << 6 | (step % 63) as u8;
                                fill_and_check(g, p, n, tag, stream);
                                live.push((p, n, tag));
                                ok.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => {
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
                                refused.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    } else {
                        let j = rng.below(live.len() as u64) as usize;
                        let (p, n, tag) = live.swap_remove(j);
                        let mut back = [0u8; 1];
                        g.memcpy_dtoh(&mut back, p, Some(stream)).unwrap();
                        assert_eq!(back[0], tag, "{p}: contents changed while live");
                        chain.deallocate(p, n, stream).unwrap();
                    }
                }
                for (p, n, _) in live {
                    chain.deallocate(p, n, stream).unwrap();
                }
                g.stream_synchronize(stream).unwrap();
                g.stream_destroy(stream).unwrap();
            });
        }
    });
    let (ok, refused) = (ok.into_inner(), refused.into_inner());
    assert!(
        refused > 0,
        "the limit must be reached for the test to mean something"
    );

    // Every layer agrees.
    let stats = chain.counters();
    assert_eq!(stats.bytes.value, 0);
    assert_eq!(stats.allocations.total, ok as i64);
    assert!(stats.bytes.peak as u64 <= LIMIT);
    assert_eq!(chain.upstream().upstream().allocated_bytes(), 0);
    chain.upstream().flush().unwrap();
    let report = g.report();
    assert!(report.is_clean(), "{report}");

    // The log says the same.
    let chain = Arc::into_inner(chain).expect("the threads are done");
    let (_, written) = chain.into_upstream().into_parts();
    let log = EventLog::parse_str(std::str::from_utf8(&written).unwrap()).unwrap();
    let summary = log.summary();
    assert_eq!(
        (
            summary.allocations,
            summary.allocation_failures,
            summary.frees
        ),
        (ok, refused, ok)
    );
    assert_eq!((summary.threads, summary.streams), (4, 4));
    assert_eq!((summary.never_freed, summary.unknown_frees), (0, 0));
    assert!(summary.peak_live_bytes <= LIMIT);

    // And replays to the same counts, on one thread and on one thread per log thread.
    for threading in [Threading::Single, Threading::PerLogThread] {
        let target = SimDriver::new(SimConfig::new(22).memory_per_device(GIB)).unwrap();
        let resource = LoggingAdaptor::new(CudaResource::new(target.clone()), Vec::new());
        let options = ReplayOptions {
            threading,
            ..ReplayOptions::default()
        };
        let r = replay(&log, &resource, &options).unwrap();
        assert_eq!((r.allocations, r.frees), (ok, ok), "{threading:?}");
        assert_eq!(r.logged_failures, refused);
        assert!(r.failures.is_empty() && r.leaks.is_empty() && r.unknown_frees.is_empty());
        assert_eq!((r.threads, r.streams), (4, 4));
        assert_eq!(r.peak_live_bytes, summary.peak_live_bytes);
        assert!(target.report().is_clean(), "{}", target.report());

        // The replay's own log: same sizes in the same order; in per-thread mode each log
        // thread maps to one replay thread and back.
        let (_, written) = resource.into_parts();
        let again = EventLog::parse_str(std::str::from_utf8(&written).unwrap()).unwrap();
        let original: Vec<_> = log
            .events()
            .iter()
            .filter(|e| e.action != emm_bench::replay::LogAction::AllocateFailure)
            .collect();
        assert_eq!(again.events().len(), original.len());
        let mut map = HashMap::new();
        let mut back = HashMap::new();
        for (a, b) in original.iter().zip(again.events()) {
            assert_eq!((a.action, a.size), (b.action, b.size));
            if threading == Threading::PerLogThread {
                assert_eq!(*map.entry(a.thread).or_insert(b.thread), b.thread);
                assert_eq!(*back.entry(b.thread).or_insert(a.thread), a.thread);
            } else {
                back.insert(b.thread, a.thread);
            }
        }
        let replay_threads = back.len();
        match threading {
            Threading::Single => assert_eq!(replay_threads, 1),
            Threading::PerLogThread => assert_eq!(replay_threads, 4),
        }
    }
}
