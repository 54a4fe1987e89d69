//! [`replay`]: runs an [`EventLog`] against a resource, every stream and every thread's order
//! kept.
//!
//! Each distinct stream of the log gets a stream of its own, created on the resource's driver
//! before the clock starts as `cudaStreamCreate` makes them (blocking), and synchronized and
//! destroyed after the replay (the log's `0x0` and `0x1`, the legacy default stream, map to
//! [`StreamId::DEFAULT`]). Log pointers map to the new allocations. Events run in log order,
//! which is a valid interleaving of every thread's own order; with [`Threading::PerLogThread`]
//! each event also runs on a thread of its own log thread, for resources that behave per
//! thread (arenas). A free on a stream other than its allocation's is ordered after the
//! allocation's stream with an event, as the program that wrote the log had to.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Condvar, Mutex};
use std::time::Instant;

use crate::lock;
use crate::replay::{
    EventLog, HeldProbe, LogAction, LogEvent, LoggedAllocation, Pace, ReplayError, ReplayFailure,
    ReplayOptions, ReplayReport, SizeMismatch, Threading, MAX_REPLAY_THREADS, MICROS_PER_DAY,
};
use emm_core::driver::{DevicePtr, Driver, EventId, StreamId};
use emm_core::mr::{DeviceMemoryResource, PoolOptions};

/// Replays `log` against `resource`; see the [module docs](self).
///
/// A call the resource refuses (out of memory on a smaller device, a refused free) is recorded
/// in [`ReplayReport::failures`] and the replay goes on; a later free of a pointer whose
/// allocation failed is skipped.
///
/// # Errors
///
/// [`ReplayError::Driver`] when creating or destroying the replay's streams fails;
/// [`ReplayError::ThreadPanicked`] when the resource panics on a replay thread.
///
/// # Time complexity
///
/// O(events) expected besides the resource.
pub fn replay<R: DeviceMemoryResource + ?Sized>(
    log: &EventLog,
    resource: &R,
    options: &ReplayOptions,
) -> Result<ReplayReport, ReplayError> {
    let driver = resource.driver();
    let threads: BTreeSet<u64> = log.events().iter().map(|e| e.thread).collect();
    let mut streams = HashMap::new();
    let mut created = Vec::new();
    let mut setup = || -> Result<EventId, ReplayError> {
        for s in log
            .events()
            .iter()
            .map(|e| e.stream)
            .collect::<BTreeSet<_>>()
        {
            let id = if s <= 1 {
                StreamId::DEFAULT
            } else {
                let id = driver.stream_create(false)?;
                created.push(id);
                id
            };
            streams.insert(s, id);
        }
        Ok(driver.event_create()?)
    };
    let order_event = match setup() {
        Ok(e) => e,
        Err(e) => {
            for s in created {
                let _ = driver.stream_destroy(s);
            }
            return Err(e);
        }
    };
    let mut state = State {
        resource,
        driver,
        streams,
        order_event,
        held: &options.held,
        held_base: match options.held {
            HeldProbe::DriverMemInfo => driver.mem_get_info().ok().map(|i| i.free),
            _ => None,
        },
        pacer: None,
        live: HashMap::new(),
        failed: HashSet::new(),
        live_bytes: 0,
        report: ReplayReport {
            resource: resource.name(),
            events: log.events().len(),
            threads: threads.len(),
            streams: created.len() + usize::from(log.events().iter().any(|e| e.stream <= 1)),
            ..ReplayReport::default()
        },
    };
    state.pacer = (options.pace == Pace::Recorded).then(|| Pacer {
        origin: driver.host_clock_ns(),
        last_us: log
            .events()
            .first()
            .map_or(0, |e| e.time_us % MICROS_PER_DAY),
        reached_ns: 0,
    });
    let start = Instant::now();
    let run = match options.threading {
        Threading::Single => {
            for (i, e) in log.events().iter().enumerate() {
                state.step(i, e);
            }
            Ok(())
        }
        Threading::PerLogThread => per_thread(log, &mut state),
    };
    state.report.wall_time = start.elapsed();
    state.finish(options.keep_leaks);
    let mut report = state.report;
    report.leaks.sort_unstable_by_key(|l| l.line);
    // Teardown: wait for what the resource queued on each stream (stream-ordered frees), then
    // destroy it. A resource that keeps state per stream must not use these streams again.
    let mut teardown = Ok(());
    for s in created {
        teardown = teardown
            .and(driver.stream_synchronize(s))
            .and(driver.stream_destroy(s));
    }
    teardown = teardown.and(driver.event_destroy(order_event));
    run?;
    teardown?;
    Ok(report)
}

/// Runs each event on a thread of its log thread, in log order: a thread waits for its turn,
/// replays its event, and passes the turn on. A panic in the resource stops every thread.
/// At most [`MAX_REPLAY_THREADS`] threads: past that, each takes several log threads.
fn per_thread<R: DeviceMemoryResource + ?Sized>(
    log: &EventLog,
    state: &mut State<'_, R>,
) -> Result<(), ReplayError> {
    let mut by_thread: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (i, e) in log.events().iter().enumerate() {
        by_thread.entry(e.thread).or_default().push(i);
    }
    // Each replay thread's events, in log order (the log threads it takes, merged).
    let mut workers: Vec<Vec<usize>> = vec![Vec::new(); by_thread.len().min(MAX_REPLAY_THREADS)];
    for (k, indices) in by_thread.into_values().enumerate() {
        workers[k % MAX_REPLAY_THREADS].extend(indices);
    }
    for w in &mut workers {
        w.sort_unstable();
    }
    let turn = Mutex::new(Turn {
        next: 0,
        aborted: false,
        state,
    });
    let wake = Condvar::new();
    std::thread::scope(|scope| {
        let handles: Vec<_> = workers
            .iter()
            .map(|indices| {
                let (turn, wake) = (&turn, &wake);
                // The log thread of the event that panicked, if one did on this thread.
                scope.spawn(move || -> Option<u64> {
                    for &i in indices {
                        let mut t = lock(turn);
                        while t.next != i && !t.aborted {
                            t = wake.wait(t).unwrap_or_else(|e| e.into_inner());
                        }
                        if t.aborted {
                            return None;
                        }
                        let event = &log.events()[i];
                        let ok = catch_unwind(AssertUnwindSafe(|| t.state.step(i, event)));
                        t.next += 1;
                        t.aborted |= ok.is_err();
                        drop(t);
                        wake.notify_all();
                        if ok.is_err() {
                            return Some(event.thread);
                        }
                    }
                    None
                })
            })
            .collect();
        let mut outcome = Ok(());
        for h in handles {
            // A thread that panicked outside the guarded step names no log thread.
            let panicked = h.join().unwrap_or(Some(u64::MAX));
            if let (Some(thread), true) = (panicked, outcome.is_ok()) {
                outcome = Err(ReplayError::ThreadPanicked { thread });
            }
        }
        outcome
    })
}

/// Whose turn it is, shared by the replay threads.
struct Turn<'s, 'a, R: ?Sized> {
    next: usize,
    aborted: bool,
    state: &'s mut State<'a, R>,
}

struct Live {
    ptr: DevicePtr,
    size: u64,
    stream: StreamId,
    line: usize,
    log_stream: u64,
}

/// The longest wait between two events of a [`Pace::Recorded`] replay: the log's idle hours
/// (a program between two runs) would otherwise be slept through on a GPU, and a tight
/// segment's move budget saves up no more than this much time's share.
pub const MAX_PACED_GAP_NS: u64 = PoolOptions::MOVE_SHARE_WINDOW_NS;

/// Where a [`Pace::Recorded`] replay is in the log's time.
struct Pacer {
    /// The driver's clock at the first event.
    origin: u64,
    /// The latest event time seen, as a time of day.
    last_us: u64,
    /// The replay's time reached, in ns after the first event: the log's gaps, each at most
    /// [`MAX_PACED_GAP_NS`].
    reached_ns: u64,
}

impl Pacer {
    /// Sleeps on `driver` until the log's time of `e`.
    fn wait_for(&mut self, driver: &dyn Driver, e: &LogEvent) {
        // Times of day wrap at midnight. A step back of under a second is an event a thread
        // wrote slightly before the one seen last, and the pace never goes back; any other
        // change is a gap forward.
        let now_us = e.time_us % MICROS_PER_DAY;
        let back_us = (self.last_us + MICROS_PER_DAY - now_us) % MICROS_PER_DAY;
        if back_us == 0 || back_us >= 1_000_000 {
            let gap_us = (now_us + MICROS_PER_DAY - self.last_us) % MICROS_PER_DAY;
            self.last_us = now_us;
            let gap = gap_us.saturating_mul(1000).min(MAX_PACED_GAP_NS);
            self.reached_ns = self.reached_ns.saturating_add(gap);
        }
        let target = self.origin.saturating_add(self.reached_ns);
        let now = driver.host_clock_ns();
        if target > now {
            driver.host_sleep(target - now);
        }
    }
}

struct State<'a, R: ?Sized> {
    resource: &'a R,
    driver: &'a dyn Driver,
    pacer: Option<Pacer>,
    streams: HashMap<u64, StreamId>,
    order_event: EventId,
    held: &'a HeldProbe,
    held_base: Option<u64>,
    /// Log pointer → the replayed allocation.
    live: HashMap<u64, Live>,
    /// Log pointers whose replayed allocation failed: their frees are skipped.
    failed: HashSet<u64>,
    live_bytes: u64,
    report: ReplayReport,
}

impl<R: DeviceMemoryResource + ?Sized> State<'_, R> {
    fn stream(&self, log_stream: u64) -> StreamId {
        self.streams
            .get(&log_stream)
            .copied()
            .unwrap_or(StreamId::DEFAULT)
    }

    fn step(&mut self, index: usize, e: &LogEvent) {
        if let Some(p) = &mut self.pacer {
            p.wait_for(self.driver, e);
        }
        let line = EventLog::line_of(index);
        match e.action {
            LogAction::AllocateFailure => self.report.logged_failures += 1,
            _ if e.size == 0 => self.report.zero_byte_events += 1,
            LogAction::Allocate => self.allocate(line, e),
            LogAction::Free => self.free(line, e),
        }
    }

    fn allocate(&mut self, line: usize, e: &LogEvent) {
        if let Some(old) = self.live.remove(&e.pointer) {
            // The log reuses a live pointer: its free was never logged. Count it as a leak
            // and give the replayed memory back, as the real program's allocator had.
            self.leak(e.pointer, &old);
            self.release(old);
        }
        self.failed.remove(&e.pointer);
        let stream = self.stream(e.stream);
        let Ok(size) = usize::try_from(e.size) else {
            self.fail(line, e, oversized(self.resource.name(), e.size));
            return;
        };
        let t = Instant::now();
        let result = self.resource.allocate(size, stream);
        self.report.resource_time += t.elapsed();
        match result {
            Ok(ptr) => {
                self.live.insert(
                    e.pointer,
                    Live {
                        ptr,
                        size: e.size,
                        stream,
                        line,
                        log_stream: e.stream,
                    },
                );
                self.live_bytes += e.size;
                self.report.allocations += 1;
                self.report.peak_live_bytes = self.report.peak_live_bytes.max(self.live_bytes);
                self.report.peak_live_count = self.report.peak_live_count.max(self.live.len());
                self.sample_held();
            }
            Err(err) => {
                self.failed.insert(e.pointer);
                self.fail(line, e, err);
            }
        }
    }

    fn free(&mut self, line: usize, e: &LogEvent) {
        let Some(live) = self.live.remove(&e.pointer) else {
            if !self.failed.remove(&e.pointer) {
                self.report.unknown_frees.push(LoggedAllocation {
                    line,
                    pointer: e.pointer,
                    size: e.size,
                    stream: e.stream,
                });
            }
            return;
        };
        if live.size != e.size {
            self.report.size_mismatches.push(SizeMismatch {
                line,
                pointer: e.pointer,
                allocated: live.size,
                freed: e.size,
            });
        }
        let stream = self.stream(e.stream);
        if stream != live.stream {
            // What the program did to free on another stream: order it after the allocation's.
            let _ = self
                .driver
                .event_record(self.order_event, live.stream)
                .and_then(|()| self.driver.stream_wait_event(stream, self.order_event));
        }
        let t = Instant::now();
        // Freed with the allocated size, so a wrong-size line cannot corrupt the resource.
        let result = self
            .resource
            .deallocate(live.ptr, live.size as usize, stream);
        self.report.resource_time += t.elapsed();
        match result {
            Ok(()) => {
                self.live_bytes -= live.size;
                self.report.frees += 1;
            }
            Err(err) => {
                // Counted as gone: the log frees it; what the resource kept is its own bug,
                // reported here.
                self.live_bytes -= live.size;
                self.fail(line, e, err);
            }
        }
    }

    fn fail(&mut self, line: usize, e: &LogEvent, error: emm_core::mr::MrError) {
        self.report.failures.push(ReplayFailure {
            line,
            action: e.action,
            size: e.size,
            error,
        });
    }

    fn leak(&mut self, pointer: u64, l: &Live) {
        self.report.leaks.push(LoggedAllocation {
            line: l.line,
            pointer,
            size: l.size,
            stream: l.log_stream,
        });
    }

    /// Frees a replayed allocation the log never frees.
    fn release(&mut self, l: Live) {
        self.live_bytes -= l.size;
        if let Err(error) = self.resource.deallocate(l.ptr, l.size as usize, l.stream) {
            self.report.failures.push(ReplayFailure {
                line: l.line,
                action: LogAction::Free,
                size: l.size,
                error,
            });
        }
    }

    fn sample_held(&mut self) {
        let held = match self.held {
            HeldProbe::None => return,
            HeldProbe::DriverMemInfo => match (self.held_base, self.driver.mem_get_info()) {
                (Some(base), Ok(now)) => base.saturating_sub(now.free),
                _ => return,
            },
            HeldProbe::Custom(f) => f(),
        };
        let peak = self.report.peak_held_bytes.get_or_insert(0);
        *peak = (*peak).max(held);
    }

    /// Reports what the log never freed and, unless kept, frees it.
    fn finish(&mut self, keep: bool) {
        let live: Vec<(u64, Live)> = self.live.drain().collect();
        for (pointer, l) in live {
            self.leak(pointer, &l);
            if !keep {
                self.release(l);
            }
        }
    }
}

fn oversized(resource: &'static str, size: u64) -> emm_core::mr::MrError {
    emm_core::mr::MrError::OutOfMemory {
        resource,
        requested: size,
        available: None,
    }
}
