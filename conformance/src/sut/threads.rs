//! Concurrent use: several threads allocating at once, and a producer and a consumer thread
//! handing memory across streams.

use std::sync::mpsc;
use std::sync::Barrier;
use std::thread;

use emm_core::attribution::CallerScope;
use emm_core::contract::{EmmError, MemoryManager, MemoryPointer};
use emm_core::{ContextId, DevicePtr, Driver, StreamId};

use super::{guarded, Found, Sut, HARNESS};
use crate::assertions::check_for_breach;
use crate::checks::CheckId;
use crate::transition::Size;

/// Requests from threads are capped at this size, so that several fit at once.
const THREAD_CAP: usize = 4 << 20;

/// What one thread of [`Sut::concurrent`] got.
type Got = Result<Vec<(DevicePtr, usize, MemoryPointer)>, String>;

fn pattern(thread: usize, item: usize) -> u8 {
    (thread * 31 + item * 7) as u8 | 1
}

fn write_read(driver: &dyn Driver, ptr: DevicePtr, byte: u8, len: usize) -> Result<bool, String> {
    let _h = CallerScope::enter(HARNESS);
    let n = len.min(64);
    let mut back = [0u8; 64];
    driver
        .memcpy_dtoh(&mut back[..n], ptr, None)
        .map(|()| back[..n].iter().all(|&b| b == byte))
        .map_err(|e| format!("reading {ptr} back failed: {e}"))
}

impl Sut {
    /// `threads` threads allocate `allocs` blocks each, all live at once; no two overlap and
    /// each thread reads back what it wrote after all have written.
    pub(super) fn concurrent(&mut self, threads: u8, allocs: u8, size: Size) -> Found {
        const C: CheckId = CheckId::ConcurrentUseNeverOverlaps;
        self.ensure_initialized()?;
        let threads = usize::from(threads).clamp(2, 4);
        let allocs = usize::from(allocs).clamp(1, 8);
        let bytes = match size {
            Size::Zero | Size::Absurd | Size::Max | Size::NearTotal(_) => 4096,
            s => s.bytes(self.device_total).min(THREAD_CAP),
        };
        let (manager, driver, ctx) = (self.manager()?, &*self.driver, self.context);
        let barrier = Barrier::new(threads);
        let got: Vec<Got> = thread::scope(|s| {
            let workers: Vec<_> = (0..threads)
                .map(|t| {
                    let barrier = &barrier;
                    s.spawn(move || one_thread(manager, driver, ctx, barrier, t, allocs, bytes))
                })
                .collect();
            workers
                .into_iter()
                .map(|w| {
                    w.join()
                        .unwrap_or_else(|_| Err("a thread of the suite panicked".into()))
                })
                .collect()
        });
        let mut all: Vec<(DevicePtr, usize, usize)> = Vec::new();
        let mut kept = Vec::new();
        for (t, g) in got.into_iter().enumerate() {
            let g = g.map_err(|m| {
                let check = check_for_breach(&m).unwrap_or(C);
                self.fail(check, format!("thread {t}: {m}"))
            })?;
            for (p, n, ptr) in g {
                all.push((p, n, t));
                kept.push(ptr);
            }
        }
        all.sort_unstable_by_key(|a| a.0 .0);
        for w in all.windows(2) {
            let ((a, an, at), (b, _, bt)) = (w[0], w[1]);
            if a.0 + an as u64 > b.0 {
                return Err(self.fail(
                    C,
                    format!(
                        "thread {at} got {a} ({an} bytes) and thread {bt} got {b}: they overlap"
                    ),
                ));
            }
        }
        for &(p, n, t) in &all {
            if let Some(o) = self.model.overlapping(p.0, n as u64) {
                return Err(self.fail(
                    C,
                    format!("thread {t} got {p}, inside live allocation #{}", o.buffer),
                ));
            }
        }
        guarded(|| drop(kept)).map_err(|p| self.fail(C, format!("freeing: {p}")))
    }

    /// A producer thread allocates on one stream, writes and records an event; then a
    /// consumer thread makes another stream wait for it, reads, and frees there.
    pub(super) fn producer_consumer(&mut self, items: u8, size: Size) -> Found {
        const C: CheckId = CheckId::ProducerConsumerAcrossStreams;
        self.ensure_initialized()?;
        let items = usize::from(items).clamp(1, 8);
        let bytes = match size {
            Size::Zero | Size::Absurd | Size::Max | Size::NearTotal(_) => 4096,
            s => s.bytes(self.device_total).min(THREAD_CAP),
        };
        let (a, b) = (self.streams[1], self.streams[2]);
        let ordered = self.caps.stream_ordered;
        let (manager, driver, ctx) = (self.manager()?, &*self.driver, self.context);
        let (tx, rx) = mpsc::channel::<(MemoryPointer, Option<emm_core::EventId>, u8)>();
        let (made, used) = thread::scope(|s| {
            let producer = s.spawn(move || -> Result<(), String> {
                current(driver, ctx)?;
                for i in 0..items {
                    let r = guarded(|| {
                        if ordered {
                            manager.memalloc_async(bytes, a)
                        } else {
                            manager.memalloc(bytes)
                        }
                    })?;
                    let ptr = match r {
                        Ok(p) => p,
                        Err(e) if e.is_out_of_memory() => break,
                        Err(e) => return Err(format!("allocating item {i}: {e}")),
                    };
                    let byte = pattern(0, i);
                    let _h = CallerScope::enter(HARNESS);
                    let stream = ordered.then_some(a);
                    let fill = [byte; 64];
                    let n = bytes.min(64);
                    driver
                        .memcpy_htod(ptr.device_ptr(), &fill[..n], stream)
                        .map_err(|e| e.to_string())?;
                    let event = match stream {
                        Some(st) => {
                            let e = driver.event_create().map_err(|e| e.to_string())?;
                            driver.event_record(e, st).map_err(|e| e.to_string())?;
                            Some(e)
                        }
                        None => None,
                    };
                    if tx.send((ptr, event, byte)).is_err() {
                        break;
                    }
                }
                Ok(())
            });
            // The consumer starts once the producer is done: still two threads and two
            // streams, but one interleaving, so a seed always gives the same verdict.
            let made = join(producer);
            let consumer = s.spawn(move || -> Result<(), String> {
                current(driver, ctx)?;
                for (ptr, event, byte) in rx {
                    if let Some(e) = event {
                        let _h = CallerScope::enter(HARNESS);
                        driver.stream_wait_event(b, e).map_err(|e| e.to_string())?;
                        driver.event_destroy(e).map_err(|e| e.to_string())?;
                    }
                    let stream = if ordered { b } else { StreamId::DEFAULT };
                    let _h = CallerScope::enter(HARNESS);
                    let n = bytes.min(64);
                    let mut back = [0u8; 64];
                    driver
                        .memcpy_dtoh(&mut back[..n], ptr.device_ptr(), Some(stream))
                        .map_err(|e| e.to_string())?;
                    drop(_h);
                    if back[..n].iter().any(|&x| x != byte) {
                        return Err(format!(
                            "the consumer read other bytes than the producer wrote at {}",
                            ptr.device_ptr()
                        ));
                    }
                    let freed = if ordered {
                        guarded(|| manager.memfree_async(ptr, b))?
                    } else {
                        guarded(|| drop(ptr)).map(Ok)?
                    };
                    freed
                        .map_err(|e: EmmError| format!("freeing on the consumer's stream: {e}"))?;
                }
                Ok(())
            });
            (made, join(consumer))
        });
        made.and(used)
            .map_err(|m| self.fail(check_for_breach(&m).unwrap_or(C), m))
    }
}

fn join(h: thread::ScopedJoinHandle<'_, Result<(), String>>) -> Result<(), String> {
    h.join()
        .unwrap_or_else(|_| Err("a thread of the suite panicked".into()))
}

fn current(driver: &dyn Driver, ctx: ContextId) -> Result<(), String> {
    let _h = CallerScope::enter(HARNESS);
    driver.set_current_context(ctx).map_err(|e| e.to_string())
}

fn one_thread(
    manager: &dyn MemoryManager,
    driver: &dyn Driver,
    ctx: ContextId,
    barrier: &Barrier,
    t: usize,
    allocs: usize,
    bytes: usize,
) -> Got {
    let mine = (|| -> Got {
        current(driver, ctx)?;
        let mut mine = Vec::with_capacity(allocs);
        for i in 0..allocs {
            let ptr = match guarded(|| manager.memalloc(bytes))? {
                Ok(p) => p,
                Err(e) if e.is_out_of_memory() => break,
                Err(e) => return Err(format!("memalloc({bytes}) failed: {e}")),
            };
            let p = ptr.device_ptr();
            let _h = CallerScope::enter(HARNESS);
            driver
                .memset_d8(p, pattern(t, i), bytes.min(64), None)
                .map_err(|e| format!("writing {p} failed: {e}"))?;
            mine.push((p, bytes, ptr));
        }
        Ok(mine)
    })();
    // Every thread writes before any reads: an overlapping block shows another's bytes.
    barrier.wait();
    let mine = mine?;
    for (i, (p, n, _)) in mine.iter().enumerate() {
        if !write_read(driver, *p, pattern(t, i), *n)? {
            return Err(format!("its block {p} was overwritten by another thread"));
        }
    }
    Ok(mine)
}
