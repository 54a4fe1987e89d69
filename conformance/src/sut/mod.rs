//! [`Sut`]: the system under test — one manager on one machine — and the runner of one
//! case: every [`Op`] is applied to the plugin and to the [`Model`], and the assertions of
//! [`crate::assertions`] compare the two.
//!
//! The suite uses memory as a careful program would: it writes new memory on the stream it
//! was allocated for, orders a stream after another with an event before using memory there,
//! and orders every use before the stream a free happens on. Any race the backend then sees is
//! the plugin's. Modules: `device` (device memory), `host` (host, managed, IPC, memory info),
//! `threads` (concurrent use), `lifecycle` (initialize, reset, defer_cleanup, teardown).

mod device;
mod host;
mod lifecycle;
mod threads;

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use emm_core::attribution::CallerScope;
use emm_core::contract::{
    Capabilities, DeferCleanupGuard, HostMemory, IpcHandle, ManagedMemory, ManagerFactory,
    ManagerTarget, MemoryManager, MemoryPointer,
};
use emm_core::{ContextId, DeviceId, DevicePtr, Driver, DriverError, HostPtr, StreamId};

use crate::assertions::{check_for_seen, check_interface_version, panic_message};
use crate::backend::{Machine, Observes};
use crate::checks::CheckId;
use crate::coverage::Coverage;
use crate::model::Model;
use crate::transition::{Op, LANES};

/// The caller tag of the suite's own driver calls (never a device allocation).
pub const HARNESS: &str = "emm-conformance";

/// How a sandboxed plugin's manager names itself (`wasm:<plugin>`).
const SANDBOXED: &str = "wasm:";

/// Why a case failed: the check, the step and what went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The check that failed.
    pub check: CheckId,
    /// The step of the case (the number of operations for teardown).
    pub step: usize,
    /// What went wrong.
    pub message: String,
}

/// Why a case could not run at all (the plugin could not be made, the machine failed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetupError(pub String);

pub(crate) type Found = Result<(), Finding>;

/// What kind of memory a buffer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BufKind {
    Device,
    Managed,
}

impl BufKind {
    /// What a failed read of this kind of memory says after the driver's error. The driver
    /// pages managed memory itself, and a device fault there was seen under every manager on
    /// one GPU machine, the driver's own allocations included, so the plugin may not be at
    /// fault.
    fn fault_note(self, e: &DriverError) -> &'static str {
        if self == BufKind::Managed && e.is_device_fault() {
            " (a device fault in managed memory, which the driver pages between host and \
             device: on some machines managed memory faults under every manager, so run \
             `emm check default --backend cuda` with the same seed on this machine to compare, \
             and look for Xid 31 in the kernel log)"
        } else {
            ""
        }
    }
}

/// One allocation the suite holds, and what it wrote there.
#[derive(Debug)]
struct Buffer {
    base: DevicePtr,
    size: usize,
    kind: BufKind,
    /// The stream of a stream-ordered allocation (freed there by its finalizer).
    alloc_stream: Option<StreamId>,
    last_stream: StreamId,
    fill: u8,
    handles: usize,
}

/// Something the suite holds that keeps memory alive (dropping it is what frees).
#[expect(dead_code, reason = "the fields are held for their Drop, never read")]
enum Handle {
    Pointer {
        buffer: u32,
        ptr: MemoryPointer,
    },
    View {
        buffer: u32,
        ptr: MemoryPointer,
    },
    Managed {
        buffer: u32,
        mem: ManagedMemory,
    },
    Ipc {
        buffer: u32,
        handle: IpcHandle,
    },
    Host {
        mem: HostMemory,
        pin: Option<(HostPtr, usize)>,
    },
}

impl Handle {
    fn buffer(&self) -> Option<u32> {
        match self {
            Handle::Pointer { buffer, .. }
            | Handle::View { buffer, .. }
            | Handle::Managed { buffer, .. }
            | Handle::Ipc { buffer, .. } => Some(*buffer),
            Handle::Host { .. } => None,
        }
    }
}

/// One plugin instance on one machine, with the model it is held to.
pub struct Sut {
    machine: Box<dyn Machine>,
    observes: Observes,
    driver: Arc<dyn Driver>,
    context: ContextId,
    device_total: u64,
    manager: Option<Box<dyn MemoryManager>>,
    caps: Capabilities,
    model: Model,
    streams: [StreamId; LANES],
    buffers: BTreeMap<u32, Buffer>,
    handles: Vec<Handle>,
    guards: Vec<DeferCleanupGuard>,
    pageable: Vec<(HostPtr, usize)>,
    next_buffer: u32,
    baseline_free: u64,
    /// Device bytes the backend counted in use before the manager was made, where it counts.
    baseline_in_use: Option<u64>,
    seen: usize,
    step: usize,
    op: Option<Op>,
    /// What this case exercised so far.
    coverage: Coverage,
    /// The driver-call mark taken before the current operation, while a `defer_cleanup`
    /// scope is open and the plugin promises to keep its chunks in one.
    defer_mark: Option<u64>,
    /// A sandboxed plugin's resource, whose statistics are checked after every operation.
    sandbox: Option<Arc<emm_sandbox::PluginResource>>,
    /// Whether the plugin promises to return no chunk upstream while a `defer_cleanup` scope
    /// is open: a sandboxed plugin does (ABI v1, `emm_defer_enter`); emm's native managers
    /// document what they defer themselves.
    keeps_chunks_in_scope: bool,
    /// A sandboxed plugin's count of chunk requests the host refused for a limit, as last
    /// read (after the previous operation).
    limit_refusals_seen: u64,
}

/// Runs `f` at the plugin boundary: a panic becomes the message of a failure.
///
/// # Errors
///
/// The panic's message, when `f` panicked.
pub fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| panic_message(&*p))
}

impl Sut {
    /// A fresh manager from `factory` on `machine`, its streams, and the baseline of free
    /// memory it is held to.
    ///
    /// # Errors
    ///
    /// `Err(Ok(finding))` when creating the manager breaks a rule (its interface version);
    /// `Err(Err(setup))` when the machine or the factory fails.
    pub fn new(
        factory: &dyn ManagerFactory,
        machine: Box<dyn Machine>,
        observes: Observes,
    ) -> Result<Sut, Result<Finding, SetupError>> {
        let driver = machine.driver();
        let harness = CallerScope::enter(HARNESS);
        let context = driver
            .primary_context(DeviceId(0))
            .map_err(|e| Err(SetupError(format!("the machine has no device 0: {e}"))))?;
        driver
            .set_current_context(context)
            .map_err(|e| Err(SetupError(format!("cannot make the context current: {e}"))))?;
        let device_total = driver
            .device_properties(DeviceId(0))
            .map(|p| p.total_memory)
            .map_err(|e| {
                Err(SetupError(format!(
                    "cannot read the device's properties: {e}"
                )))
            })?;
        let mut streams = [StreamId::DEFAULT; LANES];
        for s in streams.iter_mut().skip(1) {
            *s = driver
                .stream_create(true)
                .map_err(|e| Err(SetupError(format!("cannot create a stream: {e}"))))?;
        }
        let baseline_free = driver
            .mem_get_info()
            .map(|i| i.free)
            .map_err(|e| Err(SetupError(format!("cuMemGetInfo failed: {e}"))))?;
        let baseline_in_use = machine.device_bytes_in_use();
        drop(harness);
        let target = ManagerTarget {
            driver: driver.clone(),
            context,
            device: DeviceId(0),
        };
        let manager = match guarded(|| factory.create(&target)) {
            Ok(Ok(m)) => m,
            Ok(Err(e)) => return Err(Err(SetupError(format!("the factory failed: {e}")))),
            Err(p) => return Err(Err(SetupError(format!("creating the manager: {p}")))),
        };
        let name = manager.name().to_string();
        check_interface_version(
            &name,
            factory.interface_version(),
            manager.interface_version(),
        )
        .map_err(|message| {
            Ok(Finding {
                check: CheckId::InterfaceVersion,
                step: 0,
                message,
            })
        })?;
        let caps = manager.capabilities();
        let sandbox = crate::sandboxed::resource_for(&driver);
        Ok(Sut {
            machine,
            observes,
            driver,
            context,
            device_total,
            manager: Some(manager),
            caps,
            model: Model::new(),
            streams,
            buffers: BTreeMap::new(),
            handles: Vec::new(),
            guards: Vec::new(),
            pageable: Vec::new(),
            next_buffer: 0,
            baseline_free,
            baseline_in_use,
            seen: 0,
            step: 0,
            op: None,
            coverage: Coverage::default(),
            defer_mark: None,
            keeps_chunks_in_scope: name.starts_with(SANDBOXED),
            limit_refusals_seen: 0,
            sandbox,
        })
    }

    /// Applies `ops` in order, then tears the manager down; the first rule broken ends it.
    pub fn run(self, ops: &[Op]) -> Option<Finding> {
        self.run_covered(ops).0
    }

    /// As [`Sut::run`], with what the case exercised.
    pub fn run_covered(mut self, ops: &[Op]) -> (Option<Finding>, Coverage) {
        let finding = self.run_ops(ops);
        (finding, self.coverage)
    }

    fn run_ops(&mut self, ops: &[Op]) -> Option<Finding> {
        for (step, op) in ops.iter().enumerate() {
            self.step = step;
            self.op = Some(op.clone());
            self.defer_mark = if self.guards.is_empty() || !self.keeps_chunks_in_scope {
                None
            } else {
                self.mark()
            };
            let applied = self
                .apply(op)
                .and_then(|()| self.check_scope_kept_chunks())
                .and_then(|()| self.check_stats());
            if let Err(f) = applied.and_then(|()| self.take_seen()) {
                self.abandon();
                return Some(f);
            }
        }
        self.step = ops.len();
        self.op = None;
        self.defer_mark = None;
        let result = self.teardown();
        if result.is_err() {
            self.abandon();
        }
        result.err()
    }

    fn apply(&mut self, op: &Op) -> Found {
        match *op {
            Op::Initialize => self.initialize(),
            Op::Reset => self.reset(),
            Op::Memalloc { size } => self.memalloc(size),
            Op::MemallocAsync { size, lane } => self.memalloc_async(size, lane),
            Op::MemallocAligned { size, align } => self.memalloc_aligned(size, align),
            Op::Drop { pick } => self.drop_handle(pick),
            Op::FreeAsync { pick, lane } => self.free_async(pick, lane),
            Op::View { pick, start } => self.view(pick, start),
            Op::Write { pick, lane } => self.write(pick, lane),
            Op::Verify => self.verify_all(CheckId::WritesStayInTheirAllocation),
            Op::Memhostalloc {
                size,
                mapped,
                portable,
                wc,
            } => self.memhostalloc(size, mapped, portable, wc),
            Op::Mempin { size, mapped } => self.mempin(size, mapped),
            Op::Memallocmanaged {
                size,
                attach_global,
            } => self.memallocmanaged(size, attach_global),
            Op::GetIpcHandle { pick, start } => self.ipc(pick, start),
            Op::GetMemoryInfo => self.memory_info(),
            Op::DeferCleanup => self.defer_cleanup(),
            Op::EndDeferCleanup => self.end_defer_cleanup(),
            Op::DeferCleanupWithError => self.defer_cleanup_with_error(),
            Op::RecordAndWait { from, to } => {
                let (a, b) = (self.lane(from), self.lane(to));
                self.order(a, b, CheckId::StreamOrderedReuse)
            }
            Op::Concurrent {
                threads,
                allocs,
                size,
            } => self.concurrent(threads, allocs, size),
            Op::ProducerConsumer { items, size } => self.producer_consumer(items, size),
            Op::FreeAllAndRetry => self.free_all_and_retry(),
            Op::SteadyState { rounds } => self.steady_state(rounds),
        }
    }

    fn fail(&self, check: CheckId, message: impl Into<String>) -> Finding {
        Finding {
            check,
            step: self.step,
            message: message.into(),
        }
    }

    /// Calls the manager at the plugin boundary (a panic becomes the failure's message).
    fn call<T>(
        &self,
        f: impl FnOnce(&dyn MemoryManager) -> T,
    ) -> Result<Result<T, String>, Finding> {
        self.manager().map(|m| guarded(|| f(m)))
    }

    fn manager(&self) -> Result<&dyn MemoryManager, Finding> {
        // Teardown takes the manager last; nothing calls it after that.
        self.manager.as_deref().ok_or_else(|| {
            self.fail(
                CheckId::FinalizerRunsOnce,
                "the suite called the manager after dropping it (a bug of emm-conformance)",
            )
        })
    }

    fn lane(&self, lane: u8) -> StreamId {
        self.streams[usize::from(lane) % LANES]
    }

    /// Misuses the backend saw since the last look, filed under the current operation's rule.
    fn take_seen(&mut self) -> Found {
        if !self.observes.memory_errors && !self.observes.races {
            return Ok(());
        }
        let new = self.machine.seen_since(self.seen);
        self.seen += new.len();
        match new.first() {
            None => Ok(()),
            Some(s) => {
                let check = check_for_seen(s, self.op.as_ref());
                let text = match s {
                    crate::backend::Seen::Race(t)
                    | crate::backend::Seen::UseAfterFree(t)
                    | crate::backend::Seen::BadFree(t)
                    | crate::backend::Seen::OutOfBounds(t)
                    | crate::backend::Seen::Other(t) => t.clone(),
                };
                Err(self.fail(
                    check,
                    format!("the {} backend saw: {text}", self.backend_word()),
                ))
            }
        }
    }

    fn backend_word(&self) -> &'static str {
        self.driver.backend_name()
    }

    /// Orders `to` after the work queued on `from` so far (an event record and wait).
    fn order(&self, from: StreamId, to: StreamId, check: CheckId) -> Found {
        if from == to {
            return Ok(());
        }
        let _h = CallerScope::enter(HARNESS);
        let d = &self.driver;
        let r = d.event_create().and_then(|e| {
            let r = d
                .event_record(e, from)
                .and_then(|()| d.stream_wait_event(to, e));
            d.event_destroy(e).and(r)
        });
        r.map_err(|e| self.fail(check, format!("ordering {to} after {from} failed: {e}")))
    }

    /// The failure of one of the suite's own driver calls, filed under `check`.
    fn harness_error(&self, check: CheckId, what: &str, e: impl std::fmt::Display) -> Finding {
        self.fail(check, format!("{what} failed: {e}"))
    }

    /// Leaves a failed case without further checks: memory the plugin holds is dropped, the
    /// suite's own resources are released best effort.
    fn abandon(&mut self) {
        self.guards.clear();
        let _ = guarded(|| self.handles.clear());
        let _ = guarded(|| self.manager.take());
        let _h = CallerScope::enter(HARNESS);
        for &(p, _) in &self.pageable {
            let _ = self.driver.pageable_free(p);
        }
        self.pageable.clear();
    }

    /// Whether the host refused a sandboxed plugin a chunk for a configured limit
    /// (`PluginLimits::max_held_bytes`, `max_chunks`) since the previous operation ended.
    fn refused_for_a_limit(&mut self) -> bool {
        let Some(now) = self
            .sandbox
            .as_ref()
            .and_then(|r| r.stats().ok())
            .map(|s| s.limit_refusals)
        else {
            return false;
        };
        // An instance started after a quarantine counts from 0 again: any change is a refusal.
        let refused = now != self.limit_refusals_seen;
        self.limit_refusals_seen = now;
        refused
    }

    /// Bytes of a sandboxed plugin's linear memory, while an instance runs.
    fn guest_memory(&self) -> Option<u64> {
        self.sandbox
            .as_ref()
            .and_then(|r| r.stats().ok())
            .and_then(|s| s.guest_memory_bytes)
    }

    /// A sandboxed plugin's own statistics (`emm_stats`) against the host's: the bytes of
    /// chunks it holds are the host's count, free bytes are at most those, the largest free
    /// block at most the free bytes. Checked while the first instance runs unbroken (a
    /// quarantined instance's chunks stay with the host, not the new one).
    fn check_stats(&mut self) -> Found {
        let Some(resource) = &self.sandbox else {
            return Ok(());
        };
        let stats = match resource.stats() {
            Ok(s) => s,
            Err(e) => {
                return Err(self.fail(CheckId::StatsAgreeWithTheHost, format!("emm_stats(): {e}")))
            }
        };
        self.limit_refusals_seen = stats.limit_refusals;
        let Some([free, _blocks, largest, held]) = stats.guest else {
            return Ok(());
        };
        if !stats.running || stats.breaches > 0 {
            return Ok(());
        }
        self.coverage.stats_checked += 1;
        use emm_core::units::Bytes;
        let wrong = if held != stats.held_bytes {
            Some(format!(
                "says it holds {} of chunks; the host gave it {} in {} chunk(s)",
                Bytes(held),
                Bytes(stats.held_bytes),
                stats.chunks
            ))
        } else if free > held {
            Some(format!(
                "says {} is free of the {} it holds",
                Bytes(free),
                Bytes(held)
            ))
        } else if largest > free {
            Some(format!(
                "says its largest free block is {}, more than all its free bytes ({})",
                Bytes(largest),
                Bytes(free)
            ))
        } else {
            None
        };
        match wrong {
            None => Ok(()),
            Some(w) => Err(self.fail(
                CheckId::StatsAgreeWithTheHost,
                format!(
                    "emm_stats() {w} (free {}, largest free {}, held {})",
                    free, largest, held
                ),
            )),
        }
    }
}
