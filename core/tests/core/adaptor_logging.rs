//! `LoggingAdaptor`: RMM's CSV format exactly, free logged before the upstream takes the
//! memory back, write errors recorded without failing allocations.

use std::cell::Cell;
use std::io::{self, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use emm_core::mr::adaptor::logging::os_thread_id;
use emm_core::mr::event_log::{EventLog, LogAction};
use emm_core::mr::{CudaResource, DeviceMemoryResource, LoggingAdaptor, MrResult};
use emm_core::{DevicePtr, Driver, StreamId};
use emm_sim::{SimConfig, SimDriver, GIB};

fn gpu() -> SimDriver {
    SimDriver::new(SimConfig::new(11).memory_per_device(GIB)).unwrap()
}

/// A writer whose bytes the test can read while the adaptor still owns it.
#[derive(Clone, Default)]
struct SharedBuf(Arc<Mutex<Vec<u8>>>);

impl SharedBuf {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

impl Write for SharedBuf {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

thread_local! {
    static TICKS: Cell<u64> = const { Cell::new(0) };
}

/// 13:45:07 on some day, then 1.5 ms later at each call: a reproducible clock per thread.
fn fixed_clock() -> Duration {
    let tick = TICKS.with(|t| {
        t.set(t.get() + 1);
        t.get()
    });
    Duration::from_secs(20_000 * 86_400 + (13 * 60 + 45) * 60 + 7)
        + Duration::from_micros(1500 * tick)
}

#[test]
fn the_log_is_rmm_csv_exactly() {
    let g = gpu();
    let buf = SharedBuf::default();
    let log =
        LoggingAdaptor::new(CudaResource::new(g.clone()), buf.clone()).with_clock(fixed_clock);
    let s = g.stream_create(true).unwrap();
    let a = log.allocate(1024, StreamId::DEFAULT).unwrap();
    let b = log.allocate(2048, s).unwrap();
    assert!(log.allocate(1 << 50, s).is_err());
    assert_eq!(log.allocate(0, s).unwrap(), DevicePtr::NULL, "not logged");
    let c = log.allocate_aligned(300, 128, s).unwrap();
    log.deallocate(a, 1024, StreamId::DEFAULT).unwrap();
    log.deallocate(b, 2048, s).unwrap();
    log.deallocate_aligned(c, 300, 128, s).unwrap();
    log.deallocate(DevicePtr::NULL, 0, s).unwrap();
    log.flush().unwrap();

    let text = buf.text();
    // The thread column is this thread's operating-system id on every line.
    let tid = os_thread_id().to_string();
    let mut normalized = String::new();
    for (i, line) in text.lines().enumerate() {
        if i == 0 {
            normalized.push_str(line);
        } else {
            let (thread, rest) = line.split_once(',').unwrap();
            assert_eq!(thread, tid, "{line}");
            normalized.push_str("<tid>,");
            normalized.push_str(rest);
        }
        normalized.push('\n');
    }
    assert!(text.ends_with('\n'));
    insta::assert_snapshot!(normalized);

    // And the parser reads back what was done.
    let parsed = EventLog::parse_str(&text).unwrap();
    let actions: Vec<_> = parsed.events().iter().map(|e| e.action).collect();
    use LogAction::*;
    assert_eq!(
        actions,
        [
            Allocate,
            Allocate,
            AllocateFailure,
            Allocate,
            Free,
            Free,
            Free
        ]
    );
    assert_eq!(parsed.events()[1].pointer, b.0);
    assert_eq!(parsed.events()[1].stream, s.0);
    assert_eq!(parsed.events()[2].size, 1 << 50);
    g.stream_destroy(s).unwrap();
    assert!(g.report().is_clean(), "{}", g.report());
}

#[test]
fn thread_ids_are_the_operating_system_ids_and_differ_between_threads() {
    let main = os_thread_id();
    assert_eq!(main, os_thread_id(), "stable within a thread");
    let other = std::thread::spawn(os_thread_id).join().unwrap();
    assert_ne!(main, other);
    // On Linux the id is the kernel's thread id, as spdlog's %t prints it.
    if let Ok(link) = std::fs::read_link("/proc/thread-self") {
        let tid = link.file_name().unwrap().to_str().unwrap().to_string();
        assert_eq!(main.to_string(), tid);
    }
}

/// An upstream that, when asked to free, checks that the free is already in the log.
struct SeesTheLog {
    inner: CudaResource<SimDriver>,
    log: SharedBuf,
}

impl DeviceMemoryResource for SeesTheLog {
    fn name(&self) -> &'static str {
        "SeesTheLog"
    }
    fn allocate(&self, bytes: usize, stream: StreamId) -> MrResult<DevicePtr> {
        self.inner.allocate(bytes, stream)
    }
    fn deallocate(&self, ptr: DevicePtr, bytes: usize, stream: StreamId) -> MrResult<()> {
        let last = self
            .log
            .text()
            .lines()
            .last()
            .unwrap_or_default()
            .to_string();
        assert!(
            last.contains(&format!(",free,{:#x},{bytes},", ptr.0)),
            "the free must be logged before the upstream sees it; last line: {last}"
        );
        self.inner.deallocate(ptr, bytes, stream)
    }
    fn driver(&self) -> &dyn Driver {
        self.inner.driver()
    }
}

#[test]
fn a_free_is_logged_before_the_upstream_takes_the_memory_back() {
    let g = gpu();
    let buf = SharedBuf::default();
    let upstream = SeesTheLog {
        inner: CudaResource::new(g.clone()),
        log: buf.clone(),
    };
    let log = LoggingAdaptor::new(upstream, buf.clone());
    let p = log.allocate(4096, StreamId::DEFAULT).unwrap();
    log.deallocate(p, 4096, StreamId::DEFAULT).unwrap();
    assert_eq!(buf.text().lines().count(), 3);
}

/// Accepts `room` bytes, then fails every write.
struct FailingWriter {
    room: usize,
}

impl Write for FailingWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.len() > self.room {
            return Err(io::Error::new(io::ErrorKind::StorageFull, "disk full"));
        }
        self.room -= buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_write_error_never_fails_an_allocation_and_is_reported() {
    let g = gpu();
    let log = LoggingAdaptor::new(CudaResource::new(g.clone()), FailingWriter { room: 60 });
    log.check().unwrap();
    let mut ptrs = Vec::new();
    for _ in 0..5 {
        ptrs.push(log.allocate(1000, StreamId::DEFAULT).unwrap());
    }
    for p in ptrs {
        log.deallocate(p, 1000, StreamId::DEFAULT).unwrap();
    }
    let e = log.check().unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::StorageFull);
    let msg = e.to_string();
    assert!(
        msg.contains("disk full") && msg.contains("incomplete"),
        "{msg}"
    );
    assert!(log.flush().is_err());
    assert_eq!(g.report().device_memory.count, 0);
}

/// The health handle counts every line lost (the one that failed and all after it) and keeps
/// the first failure, readable where the adaptor is out of reach in a chain.
#[test]
fn the_health_handle_counts_the_lines_lost() {
    let g = gpu();
    // The header (39 bytes and a newline) fits, no event line does.
    let log = LoggingAdaptor::new(CudaResource::new(g.clone()), FailingWriter { room: 41 });
    let health = log.health();
    assert_eq!((health.lines_dropped(), health.failure()), (0, None));
    let chain: Box<dyn DeviceMemoryResource> = Box::new(log);
    let ptrs: Vec<_> = (0..4)
        .map(|_| chain.allocate(1000, StreamId::DEFAULT).unwrap())
        .collect();
    for p in ptrs {
        chain.deallocate(p, 1000, StreamId::DEFAULT).unwrap();
    }
    assert_eq!(health.lines_dropped(), 8);
    let failure = health.failure().expect("a failure is kept");
    assert!(
        failure.contains("disk full") && failure.contains("incomplete"),
        "{failure}"
    );
}

#[test]
fn auto_flush_flushes_every_line() {
    struct CountsFlushes(Arc<Mutex<usize>>);
    impl Write for CountsFlushes {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            *self.0.lock().unwrap() += 1;
            Ok(())
        }
    }
    let g = gpu();
    let flushes = Arc::new(Mutex::new(0));
    let log = LoggingAdaptor::new(
        CudaResource::new(g.clone()),
        CountsFlushes(Arc::clone(&flushes)),
    )
    .with_auto_flush(true);
    let p = log.allocate(64, StreamId::DEFAULT).unwrap();
    log.deallocate(p, 64, StreamId::DEFAULT).unwrap();
    assert_eq!(*flushes.lock().unwrap(), 2);
}

#[test]
fn to_file_writes_a_log_that_parses_back() {
    let g = gpu();
    let path = std::env::temp_dir().join(format!("emm-log-{}.csv", std::process::id()));
    let log = LoggingAdaptor::to_file(CudaResource::new(g.clone()), &path).unwrap();
    let p = log.allocate(5000, StreamId::DEFAULT).unwrap();
    log.deallocate(p, 5000, StreamId::DEFAULT).unwrap();
    log.flush().unwrap();
    drop(log);
    let parsed = EventLog::from_file(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(parsed.events().len(), 2);
    assert_eq!(parsed.events()[0].pointer, p.0);
    assert_eq!(parsed.events()[1].action, LogAction::Free);

    let e = LoggingAdaptor::to_file(CudaResource::new(g), "/nonexistent-dir/x.csv").err();
    let msg = e.map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.contains("/nonexistent-dir/x.csv"), "{msg}");
}

#[test]
fn into_parts_gives_back_the_upstream_and_the_writer() {
    let g = gpu();
    let log = LoggingAdaptor::new(CudaResource::new(g.clone()), Vec::new());
    let p = log.allocate(64, StreamId::DEFAULT).unwrap();
    log.deallocate(p, 64, StreamId::DEFAULT).unwrap();
    let (cuda, bytes) = log.into_parts();
    assert_eq!(cuda.name(), "CudaResource");
    let text = String::from_utf8(bytes).unwrap();
    assert!(text.starts_with("Thread,Time,Action,Pointer,Size,Stream\n"));
    assert_eq!(text.lines().count(), 3);
}
