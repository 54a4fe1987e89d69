//! [`Scenario`]: what one sweep position runs — a standard workload's prefix or the suite's
//! fixed op sequences — and [`Harness`], which runs it against a context without stopping at
//! errors, keeps the pattern it wrote into every live allocation, and collects every error.

use std::fmt;
use std::sync::Arc;

use emm_core::attribution::CallerScope;
use emm_core::contract::{Context, DeferCleanupGuard, EmmError, HostMemory, IpcHandle};
use emm_core::contract::{ManagedMemory, MemoryPointer};
use emm_core::workloads::{self, Op as WorkOp, Workload};
use emm_core::{DevicePtr, Driver, HostPtr, StreamId};
use emm_sim::SimDriver;

use crate::strategy::scenarios;
use crate::sut::HARNESS;
use crate::transition::{Op, LANES};

/// One op list a position runs.
#[derive(Debug, Clone)]
pub enum Scenario {
    /// The first ops of a standard workload, then frees of whatever is still live.
    Workload(Workload),
    /// The suite's fixed scenarios run one after the other (the ops that need threads left
    /// out: their driver calls interleave differently from run to run, so a position would
    /// not name the same call twice).
    Conformance(Vec<Op>),
}

impl Scenario {
    /// W1, W2 and W3, each cut to its first `ops` ops and closed by frees of what is live.
    pub fn workloads(ops: usize) -> Vec<Scenario> {
        [workloads::w1(), workloads::w2(), workloads::w3()]
            .into_iter()
            .map(|w| Scenario::Workload(prefix(&w, ops)))
            .collect()
    }

    /// The suite's fixed scenarios as one sequence, without the threaded ops.
    pub fn conformance() -> Scenario {
        let ops = scenarios()
            .into_iter()
            .flat_map(|(_, ops)| ops)
            .filter(|op| !matches!(op, Op::Concurrent { .. } | Op::ProducerConsumer { .. }))
            .collect();
        Scenario::Conformance(ops)
    }

    /// A short name for reports: `W1[..400]` or `conformance`.
    pub fn name(&self) -> String {
        match self {
            Scenario::Workload(w) => w.name.clone(),
            Scenario::Conformance(_) => "conformance".to_string(),
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// The first `ops` ops of `w`, then a free of each allocation still live (last first).
pub fn prefix(w: &Workload, ops: usize) -> Workload {
    let mut out: Vec<WorkOp> = w.ops.iter().copied().take(ops).collect();
    let mut live = 0usize;
    for op in &out {
        match op {
            WorkOp::Alloc(_) => live += 1,
            WorkOp::Free(_) => live = live.saturating_sub(1),
        }
    }
    out.extend((0..live).rev().map(WorkOp::Free));
    Workload {
        name: format!("{}[..{ops}]", w.name),
        ops: out,
    }
}

/// Something the harness holds, with the pattern byte written at its ends (device memory).
enum Held {
    Device(MemoryPointer, u8),
    #[expect(dead_code, reason = "held so that dropping it frees the memory")]
    Host(HostMemory),
    Managed(ManagedMemory, u8),
    #[expect(dead_code, reason = "held so that dropping it ends the export")]
    Ipc(IpcHandle),
}

/// Runs a [`Scenario`] against one context, recording errors instead of stopping.
pub struct Harness<'a> {
    ctx: &'a Context<SimDriver>,
    sim: &'a Arc<SimDriver>,
    streams: [StreamId; LANES],
    held: Vec<Held>,
    guards: Vec<DeferCleanupGuard>,
    pattern: u8,
    /// Every error an operation returned, in order, with the operation.
    pub errors: Vec<(String, EmmError)>,
    /// Allocations whose pattern did not read back, with where.
    pub corrupted: Vec<String>,
    /// The harness's pageable buffers behind pins: freed once the context is gone (after
    /// the unpins have run).
    pub pageable: Vec<HostPtr>,
}

impl<'a> Harness<'a> {
    /// A harness on `ctx`, whose lanes 1.. are `streams` (lane 0 is the default stream).
    pub fn new(
        ctx: &'a Context<SimDriver>,
        sim: &'a Arc<SimDriver>,
        streams: [StreamId; LANES],
    ) -> Self {
        Harness {
            ctx,
            sim,
            streams,
            held: Vec::new(),
            guards: Vec::new(),
            pattern: 0,
            errors: Vec::new(),
            corrupted: Vec::new(),
            pageable: Vec::new(),
        }
    }

    /// Runs `scenario` to its end.
    pub fn run(&mut self, scenario: &Scenario) {
        match scenario {
            Scenario::Workload(w) => self.workload(w),
            Scenario::Conformance(ops) => {
                for (i, op) in ops.iter().enumerate() {
                    self.op(i, op);
                }
            }
        }
    }

    fn failed(&mut self, what: String, e: EmmError) {
        self.errors.push((what, e));
    }

    /// Writes the next pattern byte at the first and last byte of `[ptr, ptr + size)`.
    fn stamp(&mut self, ptr: DevicePtr, size: usize, stream: Option<StreamId>) -> u8 {
        self.pattern = self.pattern.wrapping_add(1).max(1);
        let _h = CallerScope::enter(HARNESS);
        let v = [self.pattern];
        let last = ptr.offset(size.saturating_sub(1) as u64);
        // The harness's own calls are never swept (see `sweep::positions`), so they succeed.
        let _ = self.sim.memcpy_htod(ptr, &v, stream);
        let _ = self.sim.memcpy_htod(last, &v, stream);
        self.pattern
    }

    /// Whether `[ptr, ptr + size)` still holds `v` at both ends.
    fn holds(&self, ptr: DevicePtr, size: usize, v: u8) -> bool {
        let _h = CallerScope::enter(HARNESS);
        let (mut a, mut b) = ([0u8], [0u8]);
        let last = ptr.offset(size.saturating_sub(1) as u64);
        self.sim.memcpy_dtoh(&mut a, ptr, None).is_ok()
            && self.sim.memcpy_dtoh(&mut b, last, None).is_ok()
            && a[0] == v
            && b[0] == v
    }

    /// Reads back every live allocation; each one that lost its pattern is recorded.
    pub fn verify(&mut self, when: &str) {
        {
            // Writes and stream-ordered allocations on the lanes finish before the reads.
            let _h = CallerScope::enter(HARNESS);
            let _ = self.sim.context_synchronize();
        }
        for h in &self.held {
            let (ptr, size, v) = match h {
                Held::Device(p, v) => (p.device_ptr(), p.size(), *v),
                Held::Managed(m, v) => (m.device_ptr(), m.size(), *v),
                _ => continue,
            };
            if !self.holds(ptr, size, v) {
                self.corrupted
                    .push(format!("{size} bytes at {ptr} lost their contents {when}"));
            }
        }
    }

    fn workload(&mut self, w: &Workload) {
        // Slots stay in the workload's live-set order; a failed allocation leaves `None`.
        let mut live: Vec<Option<(MemoryPointer, u8)>> = Vec::new();
        for (i, op) in w.ops.iter().enumerate() {
            match *op {
                WorkOp::Alloc(size) => {
                    let size = usize::try_from(size).unwrap_or(usize::MAX);
                    match self.ctx.memalloc(size) {
                        Ok(p) => {
                            let v = self.stamp(p.device_ptr(), size, None);
                            live.push(Some((p, v)));
                        }
                        Err(e) => {
                            self.failed(format!("{} op {i}: memalloc({size})", w.name), e);
                            live.push(None);
                        }
                    }
                }
                WorkOp::Free(j) if j < live.len() => {
                    if let Some((p, v)) = live.swap_remove(j) {
                        if !self.holds(p.device_ptr(), p.size(), v) {
                            self.corrupted.push(format!(
                                "{} op {i}: {} bytes at {} lost their contents before the free",
                                w.name,
                                p.size(),
                                p.device_ptr()
                            ));
                        }
                    }
                }
                WorkOp::Free(_) => {}
            }
        }
    }

    fn pick(&self, pick: u16, device_only: bool) -> Option<usize> {
        let idx: Vec<usize> = self
            .held
            .iter()
            .enumerate()
            .filter(|(_, h)| !device_only || matches!(h, Held::Device(..)))
            .map(|(i, _)| i)
            .collect();
        (!idx.is_empty()).then(|| idx[usize::from(pick) % idx.len()])
    }

    fn lane(&self, lane: u8) -> StreamId {
        self.streams[usize::from(lane) % LANES]
    }

    fn total(&self) -> u64 {
        self.ctx.properties().total_memory
    }

    fn drop_all(&mut self) {
        self.guards.clear();
        self.held.clear();
    }

    /// One op of the suite; its error, if any, is recorded.
    fn op(&mut self, i: usize, op: &Op) {
        let what = format!("conformance op {i}: {op}");
        let r: Result<(), EmmError> = match *op {
            Op::Initialize => self.ctx.manager().initialize(),
            Op::Reset => {
                self.drop_all();
                self.ctx.reset()
            }
            Op::Memalloc { size } => {
                let n = size.bytes(self.total());
                self.ctx.memalloc(n).map(|p| {
                    let v = self.stamp(p.device_ptr(), n, None);
                    self.held.push(Held::Device(p, v));
                })
            }
            Op::MemallocAsync { size, lane } => {
                let n = size.bytes(self.total());
                let s = self.lane(lane);
                self.ctx.memalloc_async(n, s).map(|p| {
                    let v = self.stamp(p.device_ptr(), n, Some(s));
                    self.held.push(Held::Device(p, v));
                })
            }
            Op::Drop { pick } => {
                if let Some(j) = self.pick(pick, false) {
                    self.held.swap_remove(j);
                }
                Ok(())
            }
            Op::FreeAsync { pick, lane } => match self.pick(pick, true) {
                Some(j) => match self.held.swap_remove(j) {
                    Held::Device(p, _) if p.owner_count() == 1 => {
                        self.ctx.memfree_async(p, self.lane(lane))
                    }
                    other => {
                        self.held.push(other);
                        Ok(())
                    }
                },
                None => Ok(()),
            },
            Op::View { pick, start } => match self.pick(pick, true) {
                Some(j) => {
                    let Held::Device(p, v) = &self.held[j] else {
                        return;
                    };
                    let v = *v;
                    let s = usize::from(start) % p.size().max(1);
                    // A view that starts inside keeps the allocation's last byte.
                    p.view(s..).map(|view| {
                        if s == 0 {
                            self.held.push(Held::Device(view, v));
                        }
                    })
                }
                None => Ok(()),
            },
            Op::Write { pick, lane } => match self.pick(pick, true) {
                Some(j) => {
                    let (ptr, size) = match &self.held[j] {
                        Held::Device(p, _) => (p.device_ptr(), p.size()),
                        _ => return,
                    };
                    let s = self.lane(lane);
                    let v = self.stamp(ptr, size, Some(s));
                    // Every holder of the same memory sees the new pattern.
                    for h in &mut self.held {
                        if let Held::Device(q, w) = h {
                            if q.device_ptr() == ptr && q.size() == size {
                                *w = v;
                            }
                        }
                    }
                    let _h = CallerScope::enter(HARNESS);
                    let _ = self.sim.stream_synchronize(s);
                    Ok(())
                }
                None => Ok(()),
            },
            Op::Verify => {
                self.verify(&format!("at {what}"));
                Ok(())
            }
            Op::Memhostalloc {
                size,
                mapped,
                portable,
                wc,
            } => {
                let n = size.bytes(self.total());
                self.ctx
                    .memhostalloc(n, mapped, portable, wc)
                    .map(|h| self.held.push(Held::Host(h)))
            }
            Op::Mempin { size, mapped } => {
                let n = size.bytes(self.total()).min(64 << 20);
                let buf = {
                    let _h = CallerScope::enter(HARNESS);
                    self.sim.pageable_alloc(n)
                };
                match buf {
                    Ok(ptr) => {
                        let r = self
                            .ctx
                            .mempin(None, ptr, n, mapped)
                            .map(|h| self.held.push(Held::Host(h)));
                        self.pageable.push(ptr);
                        r
                    }
                    Err(_) => Ok(()),
                }
            }
            Op::Memallocmanaged {
                size,
                attach_global,
            } => {
                let n = size.bytes(self.total());
                self.ctx.memallocmanaged(n, attach_global).map(|m| {
                    let v = self.stamp(m.device_ptr(), n, None);
                    self.held.push(Held::Managed(m, v));
                })
            }
            Op::GetIpcHandle { pick, .. } => match self.pick(pick, true) {
                Some(j) => {
                    let Held::Device(p, _) = &self.held[j] else {
                        return;
                    };
                    self.ctx
                        .get_ipc_handle(p)
                        .map(|h| self.held.push(Held::Ipc(h)))
                }
                None => Ok(()),
            },
            Op::GetMemoryInfo => self.ctx.get_memory_info().map(|_| ()),
            Op::DeferCleanup => {
                self.guards.push(self.ctx.defer_cleanup());
                Ok(())
            }
            Op::EndDeferCleanup => {
                self.guards.pop();
                Ok(())
            }
            Op::DeferCleanupWithError => {
                let _g = self.ctx.defer_cleanup();
                // memalloc(0) must be refused; that refusal is not the fault.
                let _ = self.ctx.memalloc(0);
                Ok(())
            }
            Op::RecordAndWait { from, to } => {
                let (a, b) = (self.lane(from), self.lane(to));
                let _h = CallerScope::enter(HARNESS);
                if let Ok(e) = self.sim.event_create() {
                    let _ = self.sim.event_record(e, a);
                    let _ = self.sim.stream_wait_event(b, e);
                    let _ = self.sim.event_destroy(e);
                }
                Ok(())
            }
            Op::FreeAllAndRetry => {
                self.drop_all();
                Ok(())
            }
            Op::Concurrent { .. }
            | Op::ProducerConsumer { .. }
            | Op::SteadyState { .. }
            | Op::MemallocAligned { .. } => Ok(()),
        };
        if let Err(e) = r {
            self.failed(what, e);
        }
    }

    /// Drops every pointer, handle and guard the harness holds.
    pub fn teardown(&mut self) {
        self.drop_all();
    }
}
