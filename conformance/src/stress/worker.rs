//! One stress thread's state and the execution of one [`ThreadOp`] — the same code for the
//! threaded run and its single-threaded replay.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use emm_core::attribution::CallerScope;
use emm_core::contract::{Context, DeferCleanupGuard, IpcHandle, MemoryPointer};
use emm_core::{DevicePtr, Driver, StreamId};
use emm_sim::SimDriver;

use super::{StressReport, ThreadOp};
use crate::sut::HARNESS;

/// What every thread shares: the live allocations of all of them (start → end, thread), to
/// catch an overlap the moment it is handed out, and the ticket counter.
pub(super) struct Shared {
    pub live: Mutex<BTreeMap<u64, (u64, usize)>>,
    pub ticket: AtomicU64,
    pub stream_ordered: bool,
    pub ipc: bool,
}

impl Shared {
    /// Records `[start, start + size)` as live for `thread`; the overlap, if any.
    fn claim(&self, start: u64, size: u64, thread: usize) -> Option<String> {
        let end = start.saturating_add(size.max(1));
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        let before = live.range(..end).next_back().map(|(&s, &(e, t))| (s, e, t));
        let clash = before.filter(|&(_, e, _)| e > start);
        live.insert(start, (end, thread));
        clash.map(|(s, e, t)| {
            format!(
                "thread {thread} got [{start:#x}, {end:#x}) while [{s:#x}, {e:#x}) of thread {t} \
                 is live"
            )
        })
    }

    fn release(&self, start: u64) {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.remove(&start);
    }
}

struct Live {
    ptr: MemoryPointer,
    pattern: u8,
    /// From `memalloc_async`: stream-ordered memory, which IPC cannot export.
    on_stream: bool,
}

/// One thread: its stream, its live allocations, its open scope and export.
pub(super) struct Worker {
    thread: usize,
    stream: StreamId,
    live: Vec<Live>,
    guards: Vec<(DeferCleanupGuard, u8)>,
    ipc: Option<IpcHandle>,
    serial: u32,
    overlaps: Vec<String>,
    corrupted: Vec<String>,
    errors: Vec<String>,
}

impl Worker {
    pub fn new(thread: usize, stream: StreamId) -> Self {
        Worker {
            thread,
            stream,
            live: Vec::new(),
            guards: Vec::new(),
            ipc: None,
            serial: 0,
            overlaps: Vec::new(),
            corrupted: Vec::new(),
            errors: Vec::new(),
        }
    }

    fn next_pattern(&mut self) -> u8 {
        self.serial += 1;
        // Odd, and different between neighbouring threads and successive writes.
        ((self.thread as u32 * 37 + self.serial * 11) as u8) | 1
    }

    /// The start, middle and last byte of an allocation: where patterns are written.
    fn spots(ptr: DevicePtr, size: usize) -> [DevicePtr; 3] {
        let n = size as u64;
        [ptr, ptr.offset(n / 2), ptr.offset(n.saturating_sub(1))]
    }

    fn write(&self, sim: &SimDriver, ptr: DevicePtr, size: usize, v: u8) {
        let _h = CallerScope::enter(HARNESS);
        for at in Self::spots(ptr, size) {
            let _ = sim.memcpy_htod(at, &[v], Some(self.stream));
        }
    }

    fn check(&mut self, sim: &SimDriver, i: usize, when: &str) {
        let (ptr, size, v) = {
            let l = &self.live[i];
            (l.ptr.device_ptr(), l.ptr.size(), l.pattern)
        };
        let _h = CallerScope::enter(HARNESS);
        for at in Self::spots(ptr, size) {
            let mut b = [0u8];
            let ok = sim.memcpy_dtoh(&mut b, at, Some(self.stream)).is_ok() && b[0] == v;
            if !ok {
                self.corrupted.push(format!(
                    "thread {}: {size} bytes at {ptr}: {at} reads {:#04x}, not {v:#04x} ({when})",
                    self.thread, b[0]
                ));
                return;
            }
        }
    }

    fn alloc(
        &mut self,
        ctx: &Context<SimDriver>,
        sim: &SimDriver,
        sh: &Shared,
        size: usize,
        on_stream: bool,
    ) {
        let on_stream = on_stream && sh.stream_ordered;
        let r = if on_stream {
            ctx.memalloc_async(size, self.stream)
        } else {
            ctx.memalloc(size)
        };
        match r {
            Ok(ptr) => {
                if let Some(o) = sh.claim(ptr.device_ptr().0, size as u64, self.thread) {
                    self.overlaps.push(o);
                }
                let v = self.next_pattern();
                self.write(sim, ptr.device_ptr(), size, v);
                self.live.push(Live {
                    ptr,
                    pattern: v,
                    on_stream,
                });
            }
            Err(e) => self
                .errors
                .push(format!("thread {}: memalloc({size}): {e}", self.thread)),
        }
    }

    fn free(
        &mut self,
        ctx: &Context<SimDriver>,
        sim: &SimDriver,
        sh: &Shared,
        i: usize,
        on_stream: bool,
    ) {
        if self.live.is_empty() {
            return;
        }
        let i = i % self.live.len();
        self.check(sim, i, "before its free");
        let l = self.live.swap_remove(i);
        sh.release(l.ptr.device_ptr().0);
        if on_stream && sh.stream_ordered && l.ptr.owner_count() == 1 {
            if let Err(e) = ctx.memfree_async(l.ptr, self.stream) {
                self.errors
                    .push(format!("thread {}: memfree_async: {e}", self.thread));
            }
        } else {
            // Memory freed outside stream order must be idle: finish this thread's work.
            let _h = CallerScope::enter(HARNESS);
            let _ = sim.stream_synchronize(self.stream);
            drop(_h);
            drop(l);
        }
    }

    /// Runs one op.
    pub fn step(&mut self, ctx: &Context<SimDriver>, sim: &SimDriver, sh: &Shared, op: ThreadOp) {
        self.ipc = None;
        for g in &mut self.guards {
            g.1 = g.1.saturating_sub(1);
        }
        self.guards.retain(|g| g.1 > 0);
        match op {
            ThreadOp::Alloc(size) => self.alloc(ctx, sim, sh, size, false),
            ThreadOp::AllocAsync(size) => self.alloc(ctx, sim, sh, size, true),
            ThreadOp::Free(i) => self.free(ctx, sim, sh, i, false),
            ThreadOp::FreeAsync(i) => self.free(ctx, sim, sh, i, true),
            ThreadOp::View(i) if !self.live.is_empty() => {
                let i = i % self.live.len();
                let (size, v) = (self.live[i].ptr.size(), self.live[i].pattern);
                let off = (i * 97) % size;
                match self.live[i].ptr.view(off..) {
                    Ok(view) => {
                        // The view's first byte is a spot only when it starts at one.
                        let spots = Self::spots(self.live[i].ptr.device_ptr(), size);
                        if spots.contains(&view.device_ptr()) {
                            self.write(sim, view.device_ptr(), 1, v);
                        }
                        if view.device_ptr() != self.live[i].ptr.device_ptr().offset(off as u64) {
                            self.corrupted.push(format!(
                                "thread {}: a view {off} bytes into {} starts at {}",
                                self.thread,
                                self.live[i].ptr.device_ptr(),
                                view.device_ptr()
                            ));
                        }
                    }
                    Err(e) => self
                        .errors
                        .push(format!("thread {}: view: {e}", self.thread)),
                }
            }
            ThreadOp::Ipc(i) if sh.ipc => {
                // Only cuMemAlloc-style memory can be exported (not stream-ordered memory).
                let plain: Vec<usize> = (0..self.live.len())
                    .filter(|&j| !self.live[j].on_stream)
                    .collect();
                let Some(&i) = plain.get(i % plain.len().max(1)) else {
                    return;
                };
                match ctx.get_ipc_handle(&self.live[i].ptr) {
                    Ok(h) => self.ipc = Some(h),
                    Err(e) => self
                        .errors
                        .push(format!("thread {}: get_ipc_handle: {e}", self.thread)),
                }
            }
            ThreadOp::Defer(n) => self.guards.push((ctx.defer_cleanup(), n)),
            ThreadOp::Write(i) if !self.live.is_empty() => {
                let i = i % self.live.len();
                let v = self.next_pattern();
                let (ptr, size) = (self.live[i].ptr.device_ptr(), self.live[i].ptr.size());
                self.write(sim, ptr, size, v);
                self.live[i].pattern = v;
            }
            ThreadOp::Check => {
                for i in 0..self.live.len() {
                    self.check(sim, i, "at a check");
                }
            }
            _ => {}
        }
    }

    /// Drops the thread's export and scopes (its allocations are freed by its op list).
    pub fn end(&mut self) {
        self.ipc = None;
        self.guards.clear();
    }

    pub fn into_report(self, r: &mut StressReport) {
        r.overlaps.extend(self.overlaps);
        r.corrupted.extend(self.corrupted);
        r.errors.extend(self.errors);
        for l in &self.live {
            r.errors.push(format!(
                "thread {}: {} still live at the end of its list",
                self.thread,
                l.ptr.device_ptr()
            ));
        }
    }
}
