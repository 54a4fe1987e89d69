//! [`LoggingAdaptor`]: RMM's CSV memory event log of every allocation and free (RMM's
//! `logging_resource_adaptor`), in the format of [`crate::mr::event_log`].
//!
//! - **What it does**: writes the header `Thread,Time,Action,Pointer,Size,Stream`, then one
//!   line per call: `allocate` after the upstream returned memory, `allocate failure` (pointer
//!   `0x0`) when it failed, and `free` *before* the upstream takes the memory back, as RMM
//!   does, so that a free always precedes, in the log, any later allocation that reuses its
//!   pointer. The fields are written exactly as RMM writes them ([`LogEvent`]): the thread is
//!   the operating-system thread id (what spdlog's `%t` prints), the time is
//!   `HH:MM:SS.ffffff` in UTC (spdlog prints local time; emm has no time-zone database, and
//!   replay ignores the time), pointers and streams are `0x`-prefixed hexadecimal.
//!   Zero-byte requests are not logged: they never reach the upstream.
//! - **Thread safety**: `Send + Sync` when the upstream is and the writer is `Send`; lines
//!   are written whole under one mutex, and the time is read under it, so lines are in time
//!   order even from many threads.
//! - **Streams**: passes the stream through and logs its handle.
//! - **Clone and ownership**: owns its upstream and its writer by value; not `Clone`.
//!   [`LoggingAdaptor::into_parts`] gives both back.
//! - **Use and cost**: recording a workload to replay it against other resources
//!   (`emm replay`), debugging. One lock and one formatted line per call; give it a buffered
//!   writer ([`LoggingAdaptor::to_file`] does).
//!
//! A write error never fails an allocation: the first one is kept, later lines are dropped
//! and counted, and [`LoggingAdaptor::flush`] or [`LoggingAdaptor::check`] reports it, as does
//! the [`LogHealth`] handle ([`LoggingAdaptor::health`]) that an owner of the resource chain
//! (the C ABI's statistics) keeps where the adaptor itself is out of reach.

use std::cell::Cell;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::driver::{DevicePtr, Driver, StreamId};
use crate::mr::adaptor::{lock, Request};
use crate::mr::event_log::{LogAction, LogEvent, HEADER, MICROS_PER_DAY};
use crate::mr::{assert_resource, DeviceMemoryResource, MrResult};

/// Where log times come from: the time since the Unix epoch (UTC). Replaceable for tests.
pub type LogClock = fn() -> Duration;

/// The system clock, as a [`LogClock`].
pub fn system_clock() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// What became of a [`LoggingAdaptor`]'s lines: a handle shared with the adaptor, readable
/// while it logs, from any thread.
#[derive(Debug, Clone, Default)]
pub struct LogHealth(Arc<HealthState>);

#[derive(Debug, Default)]
struct HealthState {
    /// Event lines not written: the one whose write failed and every one after it.
    dropped: AtomicU64,
    /// The first write failure, as [`LoggingAdaptor::check`] words it.
    failure: OnceLock<String>,
}

impl LogHealth {
    /// Event lines lost: the one whose write failed and every later one. 0 while the log is
    /// whole.
    pub fn lines_dropped(&self) -> u64 {
        self.0.dropped.load(Ordering::Relaxed)
    }

    /// The first write failure and what it means for the log; `None` while every write
    /// succeeded.
    pub fn failure(&self) -> Option<&str> {
        self.0.failure.get().map(String::as_str)
    }

    fn failed(&self, e: &io::Error) {
        let _ = self.0.failure.set(failure_message(e));
    }

    fn dropped(&self) {
        self.0.dropped.fetch_add(1, Ordering::Relaxed);
    }
}

/// The words of a write failure: what failed, and that the log is incomplete from then on.
fn failure_message(e: &io::Error) -> String {
    format!(
        "LoggingAdaptor: writing the memory event log failed ({e}); the lines from then on \
         were dropped, so the log is incomplete: check the disk or the writer"
    )
}

struct Sink<W> {
    writer: W,
    /// The first write error; once set, lines are dropped.
    error: Option<io::Error>,
}

/// Logs every allocation and free in RMM's CSV format; see the [module docs](self).
pub struct LoggingAdaptor<Up, W: Write + Send> {
    upstream: Up,
    sink: Mutex<Sink<W>>,
    clock: LogClock,
    auto_flush: bool,
    health: LogHealth,
}

impl<Up: DeviceMemoryResource> LoggingAdaptor<Up, BufWriter<File>> {
    /// Logs to a new file at `path` (truncated if it exists), through a buffer.
    ///
    /// # Errors
    ///
    /// The file cannot be created; the message names it.
    pub fn to_file(upstream: Up, path: impl AsRef<Path>) -> io::Result<Self> {
        let path = path.as_ref();
        let file = File::create(path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot create the memory event log {}: {e}", path.display()),
            )
        })?;
        Ok(LoggingAdaptor::new(upstream, BufWriter::new(file)))
    }
}

impl<Up: DeviceMemoryResource, W: Write + Send> LoggingAdaptor<Up, W> {
    /// Logs calls to `upstream` into `writer`, starting with the header line.
    pub fn new(upstream: Up, writer: W) -> Self {
        let mut sink = Sink {
            writer,
            error: None,
        };
        let health = LogHealth::default();
        if let Err(e) = writeln!(sink.writer, "{HEADER}") {
            health.failed(&e);
            sink.error = Some(e);
        }
        LoggingAdaptor {
            upstream,
            sink: Mutex::new(sink),
            clock: system_clock,
            auto_flush: false,
            health,
        }
    }

    /// A handle on what became of the lines (dropped lines, the first failure), shared with
    /// the adaptor: it can be kept where the adaptor goes into a chain out of reach.
    pub fn health(&self) -> LogHealth {
        self.health.clone()
    }

    /// Flushes the writer after every line (slow; for logs that must survive a crash).
    /// Default: off.
    pub fn with_auto_flush(mut self, on: bool) -> Self {
        self.auto_flush = on;
        self
    }

    /// Takes log times from `clock` instead of the system clock (for reproducible logs).
    /// Default: [`system_clock`].
    pub fn with_clock(mut self, clock: LogClock) -> Self {
        self.clock = clock;
        self
    }

    /// The upstream resource.
    pub fn upstream(&self) -> &Up {
        &self.upstream
    }

    /// Gives back the upstream resource, dropping the writer (which flushes it if it buffers).
    pub fn into_upstream(self) -> Up {
        self.upstream
    }

    /// Gives back the upstream resource and the writer, unflushed.
    pub fn into_parts(self) -> (Up, W) {
        let sink = self.sink.into_inner().unwrap_or_else(|e| e.into_inner());
        (self.upstream, sink.writer)
    }

    /// Flushes the writer.
    ///
    /// # Errors
    ///
    /// The flush failed, or an earlier write failed (lines were lost from then on).
    pub fn flush(&self) -> io::Result<()> {
        let mut sink = lock(&self.sink);
        if sink.error.is_none() {
            if let Err(e) = sink.writer.flush() {
                self.health.failed(&e);
                sink.error = Some(e);
            }
        }
        Self::status(&sink)
    }

    /// Whether every line so far was written.
    ///
    /// # Errors
    ///
    /// The first write error, saying that lines were lost from then on.
    pub fn check(&self) -> io::Result<()> {
        Self::status(&lock(&self.sink))
    }

    fn status(sink: &Sink<W>) -> io::Result<()> {
        match &sink.error {
            None => Ok(()),
            Some(e) => Err(io::Error::new(e.kind(), failure_message(e))),
        }
    }

    /// Writes one line. The time is read under the lock so that lines are in time order.
    #[inline]
    fn log(&self, action: LogAction, pointer: DevicePtr, bytes: usize, stream: StreamId) {
        let thread = os_thread_id();
        let mut sink = lock(&self.sink);
        if sink.error.is_some() {
            self.health.dropped();
            return;
        }
        let time_us = ((self.clock)().as_micros() % u128::from(MICROS_PER_DAY)) as u64;
        let event = LogEvent {
            thread,
            time_us,
            action,
            pointer: pointer.0,
            size: bytes as u64,
            stream: stream.0,
        };
        let mut result = writeln!(sink.writer, "{event}");
        if result.is_ok() && self.auto_flush {
            result = sink.writer.flush();
        }
        if let Err(e) = result {
            self.health.failed(&e);
            self.health.dropped();
            sink.error = Some(e);
        }
    }
}

impl<Up: DeviceMemoryResource, W: Write + Send> super::Adaptor for LoggingAdaptor<Up, W> {
    type Upstream = Up;

    fn upstream(&self) -> &Up {
        &self.upstream
    }

    fn name(&self) -> &'static str {
        "LoggingAdaptor"
    }

    /// # Time complexity
    ///
    /// O(1) besides the upstream and the writer: one lock, one formatted line.
    fn allocate_request(&self, request: Request) -> MrResult<DevicePtr> {
        let Request { bytes, stream, .. } = request;
        match request.allocate_from(&self.upstream) {
            Ok(ptr) => {
                self.log(LogAction::Allocate, ptr, bytes, stream);
                Ok(ptr)
            }
            Err(e) => {
                self.log(LogAction::AllocateFailure, DevicePtr::NULL, bytes, stream);
                Err(e)
            }
        }
    }

    fn deallocate_request(&self, ptr: DevicePtr, request: Request) -> MrResult<()> {
        // Logged first, as RMM does: once the upstream has the memory back, another thread
        // may be handed the same pointer and log its allocation.
        self.log(LogAction::Free, ptr, request.bytes, request.stream);
        request.deallocate_to(&self.upstream, ptr)
    }
}

/// Ids for threads whose operating-system id cannot be read: counting down from the top, so
/// they never collide with a real id.
static FALLBACK_THREAD_ID: AtomicU64 = AtomicU64::new(u64::MAX);

thread_local! {
    static THREAD_ID: Cell<u64> = const { Cell::new(0) };
}

/// The calling thread's operating-system id, as spdlog's `%t` prints it (Linux `gettid`), read
/// once per thread. Where it cannot be read, a process-unique number instead.
pub fn os_thread_id() -> u64 {
    THREAD_ID.with(|id| {
        if id.get() == 0 {
            let tid = read_os_thread_id()
                .unwrap_or_else(|| FALLBACK_THREAD_ID.fetch_sub(1, Ordering::Relaxed));
            id.set(tid);
        }
        id.get()
    })
}

/// `/proc/thread-self` links to `<pid>/task/<tid>`: the thread id without `unsafe` or libc.
fn read_os_thread_id() -> Option<u64> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    link.file_name()?
        .to_str()?
        .parse()
        .ok()
        .filter(|&tid| tid != 0)
}

const _: () = {
    #[expect(dead_code, reason = "a compile-time check: it only has to type-check")]
    fn check<D: Driver>() {
        assert_resource::<LoggingAdaptor<crate::mr::CudaResource<D>, BufWriter<File>>>();
    }
};
