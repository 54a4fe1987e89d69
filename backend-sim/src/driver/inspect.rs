//! The simulator-only API of [`SimDriver`]: what a test asks the simulated machine beyond the
//! [`Driver`](emm_core::Driver) calls: reports, traces, injected faults, virtual time, memory used
//! and managed memory residency, and kernel accesses.

use std::collections::BTreeMap;

use emm_core::{DeviceId, DevicePtr, DriverResult, Location, StreamId};

use crate::allocation_table::AllocKind;
use crate::config::Fault;
use crate::managed_range::ManagedAdvice;
use crate::managed_residency::ManagedStats;
use crate::report::{Outstanding, SimReport};
use crate::trace::{CallKind, TraceEvent};

use super::SimDriver;

impl SimDriver {
    /// A kernel on `stream` reads (or writes) `len` bytes at `ptr`: checks the access, migrates
    /// managed pages as a fault would, and orders it on the stream for race detection.
    ///
    /// # Errors
    ///
    /// As a kernel would fail: freed memory, out of bounds, unmapped host memory.
    pub fn device_access(
        &self,
        ptr: DevicePtr,
        len: usize,
        stream: StreamId,
        write: bool,
    ) -> DriverResult<()> {
        self.call(
            CallKind::DeviceAccess,
            [ptr.0, len as u64, stream.0],
            |st, p| st.device_access(p, ptr.0, len as u64, stream, write),
        )
    }

    /// Violations seen so far and everything still held, machine-wide.
    pub fn report(&self) -> SimReport {
        let st = self.lock();
        let mut r = SimReport {
            violations: st.audit.violations.clone(),
            ..SimReport::default()
        };
        let add = |o: &mut Outstanding, bytes: u64| {
            o.count += 1;
            o.bytes += bytes;
        };
        for (addr, a) in st.allocs.iter() {
            if r.leaks.len() < crate::report::LEAKS_LISTED {
                r.leaks.push(crate::report::Leak {
                    addr,
                    size: a.size,
                    kind: a.kind.describe(),
                    caller: a.caller,
                });
            }
            match a.kind {
                AllocKind::Device { .. } | AllocKind::PoolBlock { .. } => {
                    add(&mut r.device_memory, a.size)
                }
                AllocKind::Managed(_) => add(&mut r.managed_memory, a.size),
                AllocKind::Pinned { .. } => add(&mut r.pinned_memory, a.size),
                AllocKind::Pageable => add(&mut r.pageable_memory, a.size),
                AllocKind::IpcAlias { .. } => add(&mut r.open_ipc_handles, a.size),
                AllocKind::Reserved(ref res) => {
                    add(&mut r.reservations, a.size);
                    for m in res.mappings.values() {
                        add(&mut r.mappings, m.size);
                    }
                }
            }
        }
        for (handle, ph) in st.vmm.iter() {
            if r.leaks.len() < crate::report::LEAKS_LISTED {
                r.leaks.push(crate::report::Leak {
                    addr: handle,
                    size: ph.size,
                    kind: "physical memory from cuMemCreate",
                    caller: ph.caller,
                });
            }
            add(&mut r.physical_memory, ph.size);
        }
        for reg in st.host.registrations() {
            add(&mut r.registrations, reg.size);
        }
        for (_, pl) in st.pools.iter() {
            for (size, _) in pl.free.keys() {
                add(&mut r.pool_reserved_free, *size);
            }
            if !pl.is_default && !pl.destroyed {
                add(&mut r.pools, 0);
            }
        }
        r.streams.count = st
            .streams
            .iter()
            .filter(|(_, s)| !s.is_default && !s.per_thread)
            .count() as u64;
        r.events.count = st.streams.event_count() as u64;
        r
    }

    /// Every traced call so far, in order (empty when `record_trace` is off).
    pub fn trace(&self) -> Vec<TraceEvent> {
        self.lock().audit.trace.events.clone()
    }

    /// A hash of every call so far (kept even when the trace itself is not).
    pub fn trace_hash(&self) -> u64 {
        self.lock().audit.trace.hash
    }

    /// Number of calls made on this machine.
    pub fn call_count(&self) -> u64 {
        self.lock().audit.trace.count
    }

    /// Successful device-memory allocations per caller tag (requires `record_trace`).
    pub fn device_allocations_by_caller(&self) -> BTreeMap<&'static str, u64> {
        let mut by = BTreeMap::new();
        for e in self.lock().audit.trace.events.iter() {
            if e.call.allocates_device_memory() && e.result.is_ok() {
                *by.entry(e.caller).or_insert(0) += 1;
            }
        }
        by
    }

    /// Injects a fault from now on.
    pub fn inject(&self, fault: Fault) {
        self.lock().audit.faults.push((fault, 0));
    }

    /// Removes every injected fault.
    pub fn clear_faults(&self) {
        self.lock().audit.faults.clear();
    }

    /// This process's virtual time, in nanoseconds.
    pub fn now_ns(&self) -> u64 {
        self.lock().processes[self.process as usize].now
    }

    /// Bytes of device memory in use on `device` (allocations, pool reservations, managed pages).
    pub fn device_memory_used(&self, device: DeviceId) -> u64 {
        self.lock()
            .devices
            .get(device.0 as usize)
            .map_or(0, |d| d.used)
    }

    /// Counters of managed-memory behaviour.
    pub fn managed_stats(&self) -> ManagedStats {
        self.lock().managed.stats
    }

    /// Where the managed page holding `ptr` lives (`None`: not managed or never touched).
    pub fn residency(&self, ptr: DevicePtr) -> Option<Location> {
        self.lock().residency(ptr.0)
    }

    /// The advice in force at `ptr`, if it is managed memory.
    pub fn managed_advice(&self, ptr: DevicePtr) -> Option<ManagedAdvice> {
        self.lock().advice(ptr.0)
    }

    /// Bytes of managed memory resident on `device`.
    pub fn managed_resident(&self, device: DeviceId) -> u64 {
        self.lock().managed_resident(device)
    }
}
