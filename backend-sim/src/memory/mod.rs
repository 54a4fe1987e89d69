//! The operations on allocations and their contents, and the checks on every access: use after
//! free, double free, out of bounds, and races between streams. The allocations themselves are
//! the `allocation_table` part and their bytes the `byte_store` part; these operations tie them
//! to the devices' and the host's accounting, the streams' ordering and the violations.
//!
//! Modules: this one takes address space and allocates device memory (`cuMemAlloc`);
//! `driver_pools` stream-ordered allocation from driver pools; `host` pinned, pageable and
//! registered host memory; `access` the checks on every access; `contents` what memory holds
//! and the copies that change it.

mod access;
mod contents;
mod driver_pools;
mod host;

use emm_core::units::Bytes;
use emm_core::{CudaCode, DriverResult, MemInfo};

use crate::address_space::{round_up, DEVICE_VA, HOST_VA, IPC_VA, MANAGED_VA, VA_SPAN};
use crate::allocation_table::{Alloc, AllocKind};
use crate::byte_store::CHUNK;
use crate::report::Violation;
use crate::state::State;

/// Which address range a new allocation takes its address from.
#[derive(Clone, Copy)]
pub(crate) enum Region {
    Device(u32),
    Managed,
    Host(u32),
    Ipc(u32),
}

impl State {
    /// Takes `size` bytes of fresh address space, leaving an unmapped gap after them so that a
    /// small overrun never lands in a neighbour.
    pub(crate) fn take_va(&mut self, region: Region, size: u64) -> DriverResult<u64> {
        let (next, start) = match region {
            Region::Device(d) => (
                &mut self.devices[d as usize].va_next,
                DEVICE_VA + u64::from(d) * VA_SPAN,
            ),
            Region::Managed => (self.managed.va_next(), MANAGED_VA),
            Region::Host(p) => (
                &mut self.processes[p as usize].host_va_next,
                HOST_VA + u64::from(p) * VA_SPAN,
            ),
            Region::Ipc(p) => (
                &mut self.processes[p as usize].ipc_va_next,
                IPC_VA + u64::from(p) * VA_SPAN,
            ),
        };
        let base = *next;
        let end = round_up(base + size, CHUNK).map(|e| e + CHUNK);
        match end {
            Some(end) if end - start <= VA_SPAN => {
                *next = end;
                Ok(base)
            }
            _ => Err(self.err(
                CudaCode::OUT_OF_MEMORY,
                format!(
                    "the simulator's address range ({}) is used up; it never reuses addresses so that every use after free is caught: create a new SimDriver",
                    Bytes(VA_SPAN)
                ),
            )),
        }
    }

    /// Accounts `bytes` of device memory on `device`, evicting managed pages and releasing
    /// free pool blocks when that makes room. On failure returns the bytes available. The
    /// driver's own reserve is never handed out, though `cuMemGetInfo` counts it free.
    pub(crate) fn reserve_device(&mut self, device: u32, bytes: u64) -> Result<(), u64> {
        let limit = self
            .device_limit(device)
            .saturating_sub(self.cfg.driver_reserve);
        let fits = |st: &State| {
            st.devices[device as usize]
                .used
                .checked_add(bytes)
                .is_some_and(|u| u <= limit)
        };
        if fits(self) {
            self.devices[device as usize].used += bytes;
            return Ok(());
        }
        self.release_free_pool_blocks(device, 0, true);
        while !fits(self) && self.evict_one_page(device) {}
        if fits(self) {
            self.devices[device as usize].used += bytes;
            Ok(())
        } else {
            Err(limit.saturating_sub(self.devices[device as usize].used))
        }
    }

    pub(crate) fn oom(&self, device: u32, requested: u64, available: u64) -> emm_core::DriverError {
        self.err(
            CudaCode::OUT_OF_MEMORY,
            format!(
                "requested {} on device {device}, {} free of {}; free memory or ask for less",
                Bytes(requested),
                Bytes(available),
                Bytes(self.devices[device as usize].total)
            ),
        )
    }

    pub(crate) fn zero_size(&self) -> emm_core::DriverError {
        self.err(
            CudaCode::INVALID_VALUE,
            "size 0 was requested; ask for at least 1 byte",
        )
    }

    pub(crate) fn insert_alloc(
        &mut self,
        base: u64,
        size: u64,
        reserved: u64,
        kind: AllocKind,
        process: u32,
    ) {
        let serial = self.serial();
        self.allocs.insert(
            base,
            Alloc {
                size,
                reserved,
                kind,
                process,
                serial,
                caller: self.caller,
                accesses: Vec::new(),
            },
        );
    }

    /// Forgets an allocation: poisons its bytes and remembers it as freed.
    pub(crate) fn retire(&mut self, base: u64, size: u64) {
        self.contents.poison(base, size);
        self.allocs.record_freed(base, size);
    }

    /// The error (and violation) for freeing `addr`, which is not a live base of `expected`.
    #[cold]
    pub(crate) fn bad_free(&mut self, p: u32, addr: u64, expected: &str) -> emm_core::DriverError {
        let call = self.call.name();
        let caller = self.caller;
        if self.allocs.was_freed_at(addr) {
            self.violate(Violation::DoubleFree { call, addr, caller });
            return self.err(
                CudaCode::INVALID_VALUE,
                format!("{addr:#x} was already freed (double free)"),
            );
        }
        let why = match self.allocs.containing(addr) {
            Some((base, a)) if base == addr && a.process != p => {
                format!("it belongs to process {}, not this one", a.process)
            }
            Some((base, a)) if base == addr => {
                format!("it is {}, not {expected}", a.kind.describe())
            }
            Some((base, a)) => format!(
                "it points {} bytes into {} at {base:#x}; free the base pointer",
                addr - base,
                a.kind.describe()
            ),
            None => format!("no allocation of {expected} starts there"),
        };
        self.violate(Violation::InvalidFree {
            call,
            addr,
            why: why.clone(),
            caller,
        });
        self.err(
            CudaCode::INVALID_VALUE,
            format!("cannot free {addr:#x}: {why}"),
        )
    }

    // ---- device memory ---------------------------------------------------------------------

    pub(crate) fn mem_alloc(&mut self, p: u32, size: usize) -> DriverResult<u64> {
        let size = size as u64;
        if size == 0 {
            return Err(self.zero_size());
        }
        let device = self.current_device(p);
        let reserved =
            round_up(size, self.cfg.granularity).ok_or_else(|| self.oom(device, size, 0))?;
        self.reserve_device(device, reserved)
            .map_err(|avail| self.oom(device, size, avail))?;
        let base = match self.take_va(Region::Device(device), reserved) {
            Ok(b) => b,
            Err(e) => {
                self.devices[device as usize].used -= reserved;
                return Err(e);
            }
        };
        self.insert_alloc(base, size, reserved, AllocKind::Device { device }, p);
        let peers = self.devices[device as usize].peer_mappings;
        self.charge(
            p,
            self.cfg.costs.alloc_ns(size) + peers * self.cfg.costs.peer_map_ns,
        );
        Ok(base)
    }

    /// `cuMemFree`: device, stream-ordered or managed memory; synchronizes the device first.
    pub(crate) fn mem_free(&mut self, p: u32, addr: u64) -> DriverResult<()> {
        let (size, reserved, device) = match self.allocs.get(addr) {
            Some(a) if a.process == p => match &a.kind {
                AllocKind::Device { device } | AllocKind::PoolBlock { device, .. } => {
                    (a.size, a.reserved, Some(*device))
                }
                AllocKind::Managed(_) => (a.size, a.reserved, None),
                _ => return Err(self.bad_free(p, addr, "device or managed memory")),
            },
            _ => return Err(self.bad_free(p, addr, "device or managed memory")),
        };
        let sync_device = device.unwrap_or_else(|| self.current_device(p));
        self.host_wait_device(p, sync_device);
        self.charge(p, self.cfg.costs.alloc_ns(size));
        let alloc = self.allocs.remove(addr).expect("looked up above");
        self.ipc_exports.remove(&alloc.serial);
        match alloc.kind {
            AllocKind::Device { device } => self.devices[device as usize].used -= reserved,
            AllocKind::PoolBlock { pool, .. } => self.return_to_pool(pool, addr, reserved, None),
            AllocKind::Managed(range) => self.drop_managed_pages(addr, &range),
            _ => {}
        }
        self.retire(addr, size);
        Ok(())
    }

    // ---- information -----------------------------------------------------------------------

    pub(crate) fn mem_get_info(&mut self, p: u32) -> MemInfo {
        let d = self.current_device(p);
        self.charge(p, self.cfg.costs.mem_get_info_ns);
        let limit = self.device_limit(d);
        MemInfo {
            free: limit.saturating_sub(self.devices[d as usize].used),
            total: self.devices[d as usize].total,
        }
    }

    pub(crate) fn mem_get_address_range(&mut self, p: u32, addr: u64) -> DriverResult<(u64, u64)> {
        self.charge(p, self.cfg.costs.call_ns);
        match self.allocs.containing(addr) {
            Some((base, a)) if a.process == p && matches!(a.kind, AllocKind::Reserved(_)) => {
                let mapping = self
                    .allocs
                    .reservation(base)
                    .and_then(|r| r.mapping_at(addr));
                mapping.ok_or_else(|| {
                    self.err(
                        CudaCode::NOT_FOUND,
                        format!("{addr:#x} is reserved but not mapped"),
                    )
                })
            }
            Some((base, a)) if a.process == p && !matches!(a.kind, AllocKind::Pageable) => {
                Ok((base, a.size))
            }
            _ => Err(self.err(
                CudaCode::NOT_FOUND,
                format!("{addr:#x} is not inside a live allocation of this process"),
            )),
        }
    }
}
