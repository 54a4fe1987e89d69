//! RMM log replay: a workload logged through `LoggingAdaptor` parses and replays to the same
//! counts; leaks, unknown frees, wrong sizes and failures are reported by line; corrupt and
//! truncated logs give line-numbered errors.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use emm_bench::replay::{
    replay, EventLog, HeldProbe, LogAction, Pace, ReplayError, ReplayOptions, Threading,
    MAX_PACED_GAP_NS,
};
use emm_core::mr::{
    CudaResource, DeviceMemoryResource, LimitingAdaptor, LoggingAdaptor, MrResult,
    StatisticsAdaptor,
};
use emm_core::{workloads, DevicePtr, Driver, StreamId};
use emm_sim::{CallKind, SimConfig, SimDriver, GIB};

fn fast_gpu(seed: u64) -> SimDriver {
    SimDriver::new(
        SimConfig::new(seed)
            .memory_per_device(16 * GIB)
            .track_contents(false)
            .record_trace(false),
    )
    .unwrap()
}

#[test]
fn w1_logged_parsed_and_replayed_gives_the_same_counts() {
    let w1 = workloads::w1();
    let expected = w1.summary();

    // Record W1 through the logging adaptor.
    let g = fast_gpu(1);
    let logger = LoggingAdaptor::new(CudaResource::new(g.clone()), Vec::new());
    let run: MrResult<()> = workloads::replay(
        &w1,
        |size| logger.allocate(size as usize, StreamId::DEFAULT),
        |p, size| {
            logger
                .deallocate(p, size as usize, StreamId::DEFAULT)
                .unwrap()
        },
    );
    run.unwrap();
    logger.check().unwrap();
    let (_, bytes) = logger.into_parts();
    let text = String::from_utf8(bytes).unwrap();
    assert_eq!(text.lines().count(), expected.ops + 1);

    // Parse it: the log alone says what the workload document says.
    let log = EventLog::parse_str(&text).unwrap();
    let s = log.summary();
    assert_eq!(
        (s.events, s.allocations, s.frees, s.allocation_failures),
        (expected.ops, expected.allocs, expected.frees, 0)
    );
    assert_eq!(
        (s.peak_live_bytes, s.peak_live_count),
        (expected.peak_live_bytes, expected.peak_live_count)
    );
    assert_eq!(
        (s.threads, s.streams, s.never_freed, s.unknown_frees),
        (1, 1, 0, 0)
    );

    // Replay it on a fresh GPU, measuring held memory through cuMemGetInfo.
    let target = fast_gpu(2);
    let r = replay(
        &log,
        &CudaResource::new(target.clone()),
        &ReplayOptions {
            held: HeldProbe::DriverMemInfo,
            ..ReplayOptions::default()
        },
    )
    .unwrap();
    assert_eq!((r.allocations, r.frees), (expected.allocs, expected.frees));
    assert_eq!(r.ops(), expected.ops);
    assert_eq!(r.peak_live_bytes, expected.peak_live_bytes);
    assert_eq!(r.peak_live_count, expected.peak_live_count);
    assert!(r.leaks.is_empty() && r.unknown_frees.is_empty() && r.failures.is_empty());
    assert!(r.size_mismatches.is_empty());
    // cuMemAlloc rounds to 256 bytes: held is a hair above live.
    let frag = r.fragmentation().unwrap();
    assert!((1.0..1.01).contains(&frag), "held/live {frag}");
    assert!(r.resource_time <= r.wall_time);
    let text = r.to_string();
    assert!(
        text.contains("replayed 100468 events against CudaResource"),
        "{text}"
    );
    assert!(target.report().is_clean(), "{}", target.report());
}

#[test]
fn held_memory_can_come_from_the_resource_statistics() {
    let log = EventLog::parse_str(
        "Thread,Time,Action,Pointer,Size,Stream\n\
         1,10:00:00.000001,allocate,0x1000,1000,0x0\n\
         1,10:00:00.000002,allocate,0x2000,3000,0x0\n\
         1,10:00:00.000003,free,0x1000,1000,0x0\n\
         1,10:00:00.000004,allocate,0x3000,500,0x0\n\
         1,10:00:00.000005,free,0x2000,3000,0x0\n\
         1,10:00:00.000006,free,0x3000,500,0x0\n",
    )
    .unwrap();
    let g = fast_gpu(3);
    let r = Arc::new(StatisticsAdaptor::new(CudaResource::new(g)));
    let probe = Arc::clone(&r);
    let options = ReplayOptions {
        held: HeldProbe::Custom(Box::new(move || probe.bytes_counter().value as u64)),
        ..ReplayOptions::default()
    };
    let report = replay(&log, &*r, &options).unwrap();
    assert_eq!(report.peak_live_bytes, 4000);
    assert_eq!(report.peak_held_bytes, Some(4000));
    assert_eq!(report.fragmentation(), Some(1.0));
}

const HEADER: &str = "Thread,Time,Action,Pointer,Size,Stream\n";

#[test]
fn leaks_unknown_frees_wrong_sizes_and_failures_are_reported_by_line() {
    let body = "\
1,10:00:00.000001,allocate,0x1000,1024,0x0
1,10:00:00.000002,allocate,0x2000,2048,0x0
1,10:00:00.000003,free,0x1000,1000,0x0
1,10:00:00.000004,free,0x9000,64,0x0
2,10:00:00.000005,allocate failure,0x0,4096,0x55
2,10:00:00.000006,allocate,0x3000,4096,0x55
2,10:00:00.000007,free,0x3000,4096,0x55
2,10:00:00.000008,allocate,0x4000,0,0x55
1,10:00:00.000009,allocate,0x2000,512,0x1
1,10:00:00.000010,free,0x2000,512,0x1
2,10:00:00.000011,allocate,0x5000,256,0x55
";
    let log = EventLog::parse_str(&format!("{HEADER}{body}")).unwrap();
    let s = log.summary();
    assert_eq!(
        (s.never_freed, s.unknown_frees, s.allocation_failures),
        (2, 1, 1)
    );

    let g = fast_gpu(4);
    // 3 KiB: the 4 KiB allocation on line 7 cannot fit.
    let limited = LimitingAdaptor::new(CudaResource::new(g.clone()), 3072);
    let r = replay(&log, &limited, &ReplayOptions::default()).unwrap();
    assert_eq!((r.allocations, r.frees), (4, 2));
    assert_eq!((r.logged_failures, r.zero_byte_events), (1, 1));
    assert_eq!(
        (r.threads, r.streams),
        (2, 2),
        "0x0 and 0x1 are both the default stream"
    );
    let lines = |v: &[emm_bench::replay::LoggedAllocation]| {
        v.iter()
            .map(|l| (l.line, l.pointer, l.size))
            .collect::<Vec<_>>()
    };
    // Line 3's 0x2000 is allocated again on line 10 without a free: a leak. Line 12 is never
    // freed at all.
    assert_eq!(lines(&r.leaks), [(3, 0x2000, 2048), (12, 0x5000, 256)]);
    assert_eq!(r.leaked_bytes(), 2304);
    assert_eq!(lines(&r.unknown_frees), [(5, 0x9000, 64)]);
    assert_eq!(r.size_mismatches.len(), 1);
    assert_eq!(
        (
            r.size_mismatches[0].line,
            r.size_mismatches[0].allocated,
            r.size_mismatches[0].freed
        ),
        (4, 1024, 1000)
    );
    assert_eq!(r.failures.len(), 1, "{:?}", r.failures);
    assert_eq!(
        (r.failures[0].line, r.failures[0].action),
        (7, LogAction::Allocate)
    );
    assert!(r.failures[0].error.is_out_of_memory());
    let text = r.to_string();
    assert!(text.contains("2 allocations never freed"), "{text}");
    assert!(
        text.contains("line 7: allocate of 4.0 KiB failed"),
        "{text}"
    );
    // The leaks were freed after the replay, so nothing is left.
    assert_eq!(limited.allocated_bytes(), 0);
    assert!(g.report().is_clean(), "{}", g.report());

    // Kept on request.
    let kept = replay(
        &log,
        &limited,
        &ReplayOptions {
            keep_leaks: true,
            ..ReplayOptions::default()
        },
    )
    .unwrap();
    assert_eq!(kept.leaks.len(), 2);
    assert_eq!(
        limited.allocated_bytes(),
        256,
        "the never-freed allocation stays"
    );
    assert_eq!(g.report().device_memory.count, 1);
}

#[test]
fn a_free_on_another_stream_waits_for_the_allocating_stream() {
    let log = EventLog::parse_str(&format!(
        "{HEADER}\
         1,10:00:00.000001,allocate,0x1000,4096,0xa0\n\
         1,10:00:00.000002,free,0x1000,4096,0xb0\n\
         1,10:00:00.000003,allocate,0x2000,4096,0x2\n\
         1,10:00:00.000004,free,0x2000,4096,0x2\n"
    ))
    .unwrap();
    let g = SimDriver::new(SimConfig::new(5).memory_per_device(GIB)).unwrap();
    let r = replay(
        &log,
        &CudaResource::new(g.clone()),
        &ReplayOptions::default(),
    )
    .unwrap();
    assert_eq!((r.allocations, r.frees, r.streams), (2, 2, 3));
    let calls: Vec<CallKind> = g.trace().iter().map(|e| e.call).collect();
    let count = |k| calls.iter().filter(|&&c| c == k).count();
    assert_eq!(
        count(CallKind::StreamCreate),
        3,
        "one stream per log stream"
    );
    assert_eq!(count(CallKind::StreamDestroy), 3);
    assert_eq!(
        count(CallKind::StreamWaitEvent),
        1,
        "only the cross-stream free"
    );
    assert!(g.report().is_clean(), "{}", g.report());
}

/// The simulator's `cuMemAlloc`, running `before` on the calling thread ahead of every
/// allocation: a resource that panics, or that records who calls it.
struct OnAllocate<F> {
    inner: CudaResource<SimDriver>,
    before: F,
}

impl<F: Fn() + Send + Sync> DeviceMemoryResource for OnAllocate<F> {
    fn name(&self) -> &'static str {
        "OnAllocate"
    }
    fn allocate(&self, bytes: usize, stream: StreamId) -> MrResult<DevicePtr> {
        (self.before)();
        self.inner.allocate(bytes, stream)
    }
    fn deallocate(&self, ptr: DevicePtr, bytes: usize, stream: StreamId) -> MrResult<()> {
        self.inner.deallocate(ptr, bytes, stream)
    }
    fn driver(&self) -> &dyn Driver {
        self.inner.driver()
    }
}

#[test]
fn a_panic_in_the_resource_stops_every_replay_thread() {
    let mut body = String::from(HEADER);
    for i in 0..20u64 {
        let t = i % 2 + 1;
        writeln!(
            body,
            "{t},10:00:00.000001,allocate,{:#x},256,0x0",
            0x1000 * (i + 1)
        )
        .unwrap();
    }
    let log = EventLog::parse_str(&body).unwrap();
    let g = SimDriver::new(SimConfig::new(6).memory_per_device(GIB)).unwrap();
    let calls = AtomicUsize::new(0);
    // Panics on its third allocation.
    let r = OnAllocate {
        inner: CudaResource::new(g.clone()),
        before: || {
            if calls.fetch_add(1, Ordering::Relaxed) == 2 {
                panic!("a bug in the resource under test");
            }
        },
    };
    let options = ReplayOptions {
        threading: Threading::PerLogThread,
        ..ReplayOptions::default()
    };
    let e = replay(&log, &r, &options).unwrap_err();
    assert!(
        matches!(e, ReplayError::ThreadPanicked { thread: 1 }),
        "{e}"
    );
    assert!(e.to_string().contains("has a bug"), "{e}");
    // The replay still cleaned up: its streams and event are gone.
    let report = g.report();
    assert_eq!((report.streams.count, report.events.count), (0, 0));
}

#[test]
fn corrupt_and_truncated_logs_name_the_line_and_what_was_expected() {
    let good = "1,10:00:00.000001,allocate,0x1000,1024,0x0\n";
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty file", b"".to_vec()),
        ("no header", good.as_bytes().to_vec()),
        (
            "header missing a column",
            b"Thread,Time,Action,Pointer,Size\n".to_vec(),
        ),
        (
            "five fields",
            format!("{HEADER}{good}1,10:00:00.000002,free,0x1000,1024\n").into_bytes(),
        ),
        (
            "truncated mid-line",
            format!("{HEADER}{good}1,10:00:00.000002,free,0x10").into_bytes(),
        ),
        (
            "truncated in the last field",
            format!("{HEADER}{good}1,10:00:00.000002,free,0x1000,1024,0x").into_bytes(),
        ),
        (
            "bad thread",
            format!("{HEADER}t1,10:00:00.000001,allocate,0x1000,1024,0x0\n").into_bytes(),
        ),
        (
            "bad time",
            format!("{HEADER}1,10:00:00,allocate,0x1000,1024,0x0\n").into_bytes(),
        ),
        (
            "unknown action",
            format!("{HEADER}1,10:00:00.000001,deallocate,0x1000,1024,0x0\n").into_bytes(),
        ),
        (
            "bad pointer",
            format!("{HEADER}1,10:00:00.000001,allocate,0xZZ,1024,0x0\n").into_bytes(),
        ),
        (
            "negative size",
            format!("{HEADER}1,10:00:00.000001,allocate,0x1000,-5,0x0\n").into_bytes(),
        ),
        (
            "bad stream",
            format!("{HEADER}1,10:00:00.000001,allocate,0x1000,1024,stream0\n").into_bytes(),
        ),
        (
            "null allocation",
            format!("{HEADER}1,10:00:00.000001,allocate,0x0,1024,0x0\n").into_bytes(),
        ),
        (
            "blank line inside",
            format!("{HEADER}{good}\n{good}").into_bytes(),
        ),
        (
            "not UTF-8",
            [
                HEADER.as_bytes(),
                b"1,10:00:00.000001,\xff\xfe,0x1000,1,0x0\n",
            ]
            .concat(),
        ),
    ];
    let mut out = String::new();
    for (name, input) in &cases {
        let e = EventLog::parse(&input[..]).unwrap_err();
        writeln!(out, "{name} (line {:?}):\n  {e}", e.line()).unwrap();
    }
    insta::assert_snapshot!(out);

    // What is accepted: CRLF endings, a last line without newline, trailing blank lines,
    // pointers without 0x (RMM's printf-style logger).
    let ok = format!("{HEADER}1,10:00:00.000001,allocate,7f00,1024,0\r\n1,10:00:00.000002,free,0x7f00,1024,0x0\n\n");
    assert_eq!(EventLog::parse_str(&ok).unwrap().events().len(), 2);
    let no_newline = format!("{HEADER}{}", good.trim_end());
    assert_eq!(EventLog::parse_str(&no_newline).unwrap().events().len(), 1);
    assert!(EventLog::parse_str(HEADER).unwrap().events().is_empty());

    let missing = EventLog::from_file("/nonexistent/rmm_log.csv").unwrap_err();
    assert!(
        missing.to_string().contains("/nonexistent/rmm_log.csv"),
        "{missing}"
    );
}

/// A log of more threads than a replay starts: every event is replayed, in log order, on at
/// most `MAX_REPLAY_THREADS` threads (it used to start one OS thread per log thread, and
/// twenty thousand of them failed to spawn).
#[test]
fn a_log_of_many_threads_replays_on_a_bounded_number_of_threads() {
    let mut body = String::from(HEADER);
    let n = 3 * emm_bench::replay::MAX_REPLAY_THREADS as u64;
    for t in 0..n {
        let p = 0x10_0000 * (t + 1);
        writeln!(body, "{},10:00:00.000001,allocate,{p:#x},256,0x0", t + 1).unwrap();
        writeln!(body, "{},10:00:00.000002,free,{p:#x},256,0x0", t + 1).unwrap();
    }
    let log = EventLog::parse_str(&body).unwrap();
    let g = SimDriver::new(SimConfig::new(6).memory_per_device(GIB)).unwrap();
    // The OS threads that allocated.
    let threads = std::sync::Mutex::new(std::collections::HashSet::new());
    let r = OnAllocate {
        inner: CudaResource::new(g.clone()),
        before: || {
            threads.lock().unwrap().insert(std::thread::current().id());
        },
    };
    let options = ReplayOptions {
        threading: Threading::PerLogThread,
        ..ReplayOptions::default()
    };
    let report = replay(&log, &r, &options).unwrap();
    assert_eq!(report.ops(), 2 * n as usize);
    assert!(report.failures.is_empty() && report.leaks.is_empty());
    assert_eq!(report.threads, n as usize);
    let used = threads.lock().unwrap().len();
    assert_eq!(used, emm_bench::replay::MAX_REPLAY_THREADS);
}

/// A stream with no line end (`/dev/zero`, a binary file) is refused at the line limit, with
/// the line's number, not read into memory whole.
#[test]
fn a_line_longer_than_any_event_is_refused_at_the_limit() {
    use emm_bench::replay::MAX_LINE_BYTES;
    use std::io::Read as _;
    let zeros = std::io::BufReader::new(std::io::repeat(0).take(1 << 30));
    let e = EventLog::parse(zeros).expect_err("no header line");
    assert!(
        matches!(e, ReplayError::LineTooLong { line: 1, limit } if limit == MAX_LINE_BYTES),
        "{e}"
    );
    assert_eq!(e.line(), Some(1));
    let event = "1,00:00:00.000001,allocate,0x7f0000000000,4096,0x0";
    let long = format!("{event}{}", " ".repeat(MAX_LINE_BYTES + 1 - event.len()));
    let log = format!("Thread,Time,Action,Pointer,Size,Stream\n{event}\n{long}\n");
    let e = EventLog::parse_str(&log).expect_err("the third line is too long");
    assert!(
        e.to_string()
            .starts_with("line 3 is longer than 4096 bytes"),
        "{e}"
    );
}

/// A paced replay sleeps through the log's gaps on the driver's clock (the simulator's
/// virtual time, so no wall time), each gap at most `MAX_PACED_GAP_NS` (a log's idle hour is
/// not slept through on a GPU), and an event a thread wrote slightly out of order does not
/// take the pace back.
#[test]
fn a_paced_replay_keeps_the_logs_gaps_up_to_a_bound() {
    let log = EventLog::parse_str(
        "Thread,Time,Action,Pointer,Size,Stream\n\
         1,10:00:00.000000,allocate,0x1000,4096,0x0\n\
         1,10:00:02.000000,allocate,0x2000,4096,0x0\n\
         2,10:00:01.999990,free,0x1000,4096,0x0\n\
         1,11:00:02.000000,free,0x2000,4096,0x0\n",
    )
    .unwrap();
    let virtual_ns = |pace| {
        let g = fast_gpu(7);
        let r = CudaResource::new(g.clone());
        let t0 = g.now_ns();
        let options = ReplayOptions {
            pace,
            ..ReplayOptions::default()
        };
        let report = replay(&log, &r, &options).unwrap();
        assert_eq!((report.allocations, report.frees), (2, 2));
        g.now_ns() - t0
    };
    let flat = virtual_ns(Pace::Flat);
    assert!(flat < 1_000_000, "{flat} ns with no pace");
    // 2 s, nothing back for the event written 10 µs early, then an hour counted as the bound.
    let paced = virtual_ns(Pace::Recorded);
    let expected = 2_000_000_000 + MAX_PACED_GAP_NS;
    assert!(
        (expected..expected + 1_000_000).contains(&paced),
        "{paced} ns paced, {expected} expected"
    );
}
