//! The state of one simulated machine, shared by its processes behind one lock.
//!
//! [`State`] owns the machine's parts, each a type with its own fields and the methods that
//! need only them:
//! - `allocation_table`: the live allocations (with their per-kind part and remembered
//!   accesses) and the recently freed ones;
//! - `byte_store`: what memory holds;
//! - `virtual_memory`: physical memory from `cuMemCreate` and the reservations' address range;
//! - `managed_residency`: managed memory's address range, resident pages and counters;
//! - `driver_pool_table`: the driver memory pools;
//! - `host_regions`: host memory in use and the registered ranges;
//! - `stream_table`: the streams and events;
//! - `audit`: the injected faults, the violations found and the call trace.
//!
//! What is the whole machine's stays here: the configuration, the random source, the devices
//! (and their memory accounting), the processes (host clocks, current contexts), the contexts,
//! the handle, actor and serial counters, and the call being executed. The operations, most of
//! which touch several parts, are methods of `State` in their own modules, one idea a module:
//! `memory` (allocation, copies, access checks), `streams` (ordering on virtual time),
//! `managed` (migration), `vmm` (mapping), `ipc` (handles between processes). Each borrows the
//! parts it needs; no part holds or takes the whole state.
//!
//! This module holds the machine-wide types and the helpers every operation uses: errors,
//! faults, the current context.

use std::cell::Cell;
use std::collections::BTreeMap;

use emm_core::{CudaCode, DeviceId, DriverError, DriverResult};

use crate::address_space::{DEVICE_VA, HOST_VA, IPC_VA, VA_SPAN};
use crate::allocation_table::AllocationTable;
use crate::audit::Audit;
use crate::byte_store::{ByteStore, CHUNK};
use crate::clock::{Actor, VClock};
use crate::config::SimConfig;
use crate::driver_pool_table::DriverPools;
use crate::host_regions::HostRegions;
use crate::managed_residency::ManagedResidency;
use crate::report::Violation;
use crate::stream_table::{Stream, StreamTable};
use crate::trace::CallKind;
use crate::virtual_memory::VirtualMemory;

/// One device: its memory and its address range.
#[derive(Debug)]
pub(crate) struct Device {
    pub(crate) total: u64,
    /// Device allocations + pool reservations + resident managed pages.
    pub(crate) used: u64,
    /// The next free address of the device's range.
    pub(crate) va_next: u64,
    pub(crate) default_pool: u64,
    pub(crate) current_pool: u64,
    /// Peers whose contexts enabled access to this device (each maps new allocations).
    pub(crate) peer_mappings: u64,
}

/// One simulated process: its host's clocks, current contexts and address ranges.
#[derive(Debug)]
pub(crate) struct Process {
    pub(crate) host_actor: Actor,
    /// What the host has seen of other actors' work.
    pub(crate) clock: VClock,
    /// The host's virtual time, in nanoseconds.
    pub(crate) now: u64,
    /// Current context per thread (by `thread_key`); unset means device 0's primary.
    pub(crate) thread_ctx: BTreeMap<u64, u32>,
    /// Primary context index per device.
    pub(crate) primary: Vec<u32>,
    pub(crate) host_va_next: u64,
    pub(crate) ipc_va_next: u64,
    /// Opened IPC mappings: serial of the exported allocation → alias base.
    pub(crate) opened: BTreeMap<u64, u64>,
}

/// One context: a process's view of one device.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub(crate) process: u32,
    pub(crate) device: u32,
    pub(crate) default_stream: u64,
    /// Streams of this context, for the legacy default stream's implicit ordering.
    pub(crate) streams: Vec<u64>,
    /// Devices whose memory this context may access (`cuCtxEnablePeerAccess`).
    pub(crate) peers: Vec<u32>,
}

/// One machine: what is the whole machine's, and its parts.
pub(crate) struct State {
    pub(crate) cfg: SimConfig,
    /// The random source every random decision draws from (SplitMix64), seeded by the config.
    pub(crate) rng: u64,
    /// Names the machine in IPC handles, so that a handle from another machine is refused.
    pub(crate) machine_id: u64,
    pub(crate) devices: Vec<Device>,
    pub(crate) processes: Vec<Process>,
    /// Every context; a context handle is its index plus 1.
    pub(crate) contexts: Vec<Ctx>,
    /// Every live allocation and the recently freed ones.
    pub(crate) allocs: AllocationTable,
    /// What memory holds.
    pub(crate) contents: ByteStore,
    /// Physical memory and the address ranges of reservations and of the store.
    pub(crate) vmm: VirtualMemory,
    /// Managed memory's address range, device-resident pages and counters.
    pub(crate) managed: ManagedResidency,
    /// The driver memory pools.
    pub(crate) pools: DriverPools,
    /// Host memory in use and the registered ranges.
    pub(crate) host: HostRegions,
    /// Streams, events and the per-thread default streams.
    pub(crate) streams: StreamTable,
    /// The injected faults, the violations found and the call trace.
    pub(crate) audit: Audit,
    /// The exporting host's clock when each IPC handle was last made, by allocation serial:
    /// opening a handle happens after making it (the handle travels from one process to the
    /// other). Only IPC and the free of the exported allocation touch it.
    pub(crate) ipc_exports: BTreeMap<u64, VClock>,
    /// The last handle given to a stream, an event, a pool or physical memory.
    pub(crate) next_handle: u64,
    /// The last actor (a host or a stream) of the vector clocks.
    pub(crate) next_actor: Actor,
    /// The last allocation serial.
    pub(crate) next_serial: u64,
    /// The call being executed, for messages and violations.
    pub(crate) call: CallKind,
    /// The caller tag of the call being executed.
    pub(crate) caller: &'static str,
}

thread_local! {
    static THREAD_KEY: Cell<u64> = const { Cell::new(0) };
}

static NEXT_THREAD_KEY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A number naming the calling thread, for per-thread current contexts.
pub(crate) fn thread_key() -> u64 {
    THREAD_KEY.with(|k| {
        if k.get() == 0 {
            k.set(NEXT_THREAD_KEY.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        }
        k.get()
    })
}

/// The next number of the random source whose state is `rng` (SplitMix64).
fn splitmix(rng: &mut u64) -> u64 {
    *rng = rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *rng;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl State {
    pub(crate) fn new(cfg: SimConfig, machine_id: u64) -> Self {
        let mut st = State {
            rng: cfg.seed,
            machine_id,
            devices: Vec::new(),
            processes: Vec::new(),
            contexts: Vec::new(),
            allocs: AllocationTable::default(),
            contents: ByteStore::new(cfg.track_contents),
            vmm: VirtualMemory::default(),
            managed: ManagedResidency::new(cfg.devices),
            pools: DriverPools::default(),
            host: HostRegions::new(cfg.host_memory),
            streams: StreamTable::default(),
            audit: Audit::new(&cfg.faults, cfg.record_trace),
            ipc_exports: BTreeMap::new(),
            next_handle: 0x100,
            next_actor: 1,
            next_serial: 1,
            call: CallKind::DeviceCount,
            caller: emm_core::attribution::UNATTRIBUTED,
            cfg,
        };
        for d in 0..st.cfg.devices {
            let pool = st.handle();
            st.pools.create(pool, d, true);
            st.devices.push(Device {
                total: st.cfg.memory_per_device,
                used: 0,
                va_next: DEVICE_VA + u64::from(d) * VA_SPAN + CHUNK,
                default_pool: pool,
                current_pool: pool,
                peer_mappings: 0,
            });
        }
        st
    }

    /// A fresh handle number for streams, events and pools.
    pub(crate) fn handle(&mut self) -> u64 {
        self.next_handle += 1;
        self.next_handle
    }

    pub(crate) fn actor(&mut self) -> Actor {
        self.next_actor += 1;
        self.next_actor
    }

    pub(crate) fn serial(&mut self) -> u64 {
        self.next_serial += 1;
        self.next_serial
    }

    /// Adds a process with a primary context (and its legacy default stream) per device.
    pub(crate) fn add_process(&mut self) -> u32 {
        let p = self.processes.len() as u32;
        let host_actor = self.actor();
        let mut primary = Vec::new();
        for d in 0..self.cfg.devices {
            let ctx = self.contexts.len() as u32;
            let stream = self.handle();
            let actor = self.actor();
            self.streams.insert(
                stream,
                Stream {
                    process: p,
                    ctx,
                    device: d,
                    actor,
                    non_blocking: false,
                    is_default: true,
                    per_thread: false,
                    busy_until: 0,
                    clock: VClock::default(),
                },
            );
            self.contexts.push(Ctx {
                process: p,
                device: d,
                default_stream: stream,
                streams: vec![stream],
                peers: Vec::new(),
            });
            primary.push(ctx);
        }
        self.processes.push(Process {
            host_actor,
            clock: VClock::default(),
            now: 0,
            thread_ctx: BTreeMap::new(),
            primary,
            host_va_next: HOST_VA + u64::from(p) * VA_SPAN + CHUNK,
            ipc_va_next: IPC_VA + u64::from(p) * VA_SPAN + CHUNK,
            opened: BTreeMap::new(),
        });
        p
    }

    /// An error from the call being executed.
    #[cold]
    pub(crate) fn err(&self, code: CudaCode, detail: impl Into<String>) -> DriverError {
        DriverError::new(self.call.name(), code, detail)
    }

    /// Records a violation.
    #[cold]
    pub(crate) fn violate(&mut self, v: Violation) {
        self.audit.violate(v);
    }

    /// Advances process `p`'s host clock by `ns` virtual nanoseconds.
    #[inline]
    pub(crate) fn charge(&mut self, p: u32, ns: u64) {
        let now = &mut self.processes[p as usize].now;
        *now = now.saturating_add(ns);
    }

    /// The injected failure for this call, if any. A fired `FailNth` is spent.
    #[inline]
    pub(crate) fn injected_fault(&mut self, call: CallKind) -> Option<CudaCode> {
        let rng = &mut self.rng;
        self.audit.injected_fault(call, || splitmix(rng))
    }

    /// The most device memory usable on `device` under injected out-of-memory levels.
    pub(crate) fn device_limit(&self, device: u32) -> u64 {
        self.audit
            .device_limit(device, self.devices[device as usize].total)
    }

    /// The calling thread's current context in process `p` (device 0's primary by default).
    #[inline]
    pub(crate) fn current_ctx(&self, p: u32) -> u32 {
        let proc = &self.processes[p as usize];
        if proc.thread_ctx.is_empty() {
            return proc.primary[0];
        }
        proc.thread_ctx
            .get(&thread_key())
            .copied()
            .unwrap_or(proc.primary[0])
    }

    /// The device of the calling thread's current context.
    #[inline]
    pub(crate) fn current_device(&self, p: u32) -> u32 {
        self.contexts[self.current_ctx(p) as usize].device
    }

    /// Checks a device ordinal.
    pub(crate) fn device(&self, device: DeviceId) -> DriverResult<u32> {
        if device.0 < self.cfg.devices {
            Ok(device.0)
        } else {
            Err(self.err(
                CudaCode::INVALID_DEVICE,
                format!(
                    "device {} does not exist; this machine has {} device(s), numbered from 0",
                    device.0, self.cfg.devices
                ),
            ))
        }
    }

    /// Checks a context handle of process `p` and returns its index.
    pub(crate) fn context(&self, p: u32, ctx: u64) -> DriverResult<u32> {
        match ctx
            .checked_sub(1)
            .and_then(|i| self.contexts.get(i as usize))
        {
            Some(c) if c.process == p => Ok((ctx - 1) as u32),
            _ => Err(self.err(
                CudaCode::INVALID_CONTEXT,
                format!(
                    "context {ctx} is not a context of this process; use primary_context(device)"
                ),
            )),
        }
    }
}
