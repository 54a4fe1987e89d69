//! Host memory: pinned (`cuMemHostAlloc`), pageable, registered (`cuMemHostRegister`) and mapped
//! into the device address space. The bytes in use and the registrations are the
//! `host_regions` part; these operations add the allocations and the races with streams.

use emm_core::units::Bytes;
use emm_core::{CudaCode, DriverResult, HostAllocFlags};

use crate::allocation_table::{Alloc, AllocKind};
use crate::host_regions::Registration;
use crate::state::State;

use super::Region;

impl State {
    pub(super) fn reserve_host(&mut self, size: u64) -> DriverResult<()> {
        self.host.reserve(size).map_err(|free| {
            self.err(
                CudaCode::OUT_OF_MEMORY,
                format!(
                    "requested {} of host memory, {} free of {}",
                    Bytes(size),
                    Bytes(free),
                    Bytes(self.host.capacity())
                ),
            )
        })
    }

    pub(crate) fn host_alloc(
        &mut self,
        p: u32,
        size: usize,
        flags: HostAllocFlags,
    ) -> DriverResult<u64> {
        self.host_allocation(p, size, AllocKind::Pinned { flags })
    }

    pub(crate) fn host_allocation(
        &mut self,
        p: u32,
        size: usize,
        kind: AllocKind,
    ) -> DriverResult<u64> {
        let size = size as u64;
        if size == 0 {
            return Err(self.zero_size());
        }
        self.reserve_host(size)?;
        let base = match self.take_va(Region::Host(p), size) {
            Ok(b) => b,
            Err(e) => {
                self.host.give_back(size);
                return Err(e);
            }
        };
        if matches!(kind, AllocKind::Pinned { .. }) {
            self.charge(p, self.cfg.costs.pin_ns(self.cfg.costs.host_alloc_ns, size));
        } else {
            self.charge(p, self.cfg.costs.call_ns);
        }
        self.insert_alloc(base, size, size, kind, p);
        Ok(base)
    }

    pub(crate) fn host_free(&mut self, p: u32, addr: u64, pinned: bool) -> DriverResult<()> {
        let expected = if pinned {
            "pinned host memory"
        } else {
            "pageable host memory"
        };
        let ok = match self.allocs.get(addr) {
            Some(a) if a.process == p => matches!(
                (&a.kind, pinned),
                (AllocKind::Pinned { .. }, true) | (AllocKind::Pageable, false)
            ),
            _ => false,
        };
        if !ok {
            return Err(self.bad_free(p, addr, expected));
        }
        let size = self.allocs[addr].size;
        if !pinned {
            if let Some(start) = self.host.registered_start_in(addr, addr + size) {
                return Err(self.err(
                    CudaCode::INVALID_VALUE,
                    format!("{addr:#x} still has a registration at {start:#x}; call host_unregister first"),
                ));
            }
        }
        // Freeing is the host's last touch: a stream still using the memory races with it.
        self.host_touch(p, addr, addr, addr + size, "cuMemFreeHost/free");
        self.allocs.remove(addr);
        self.host.give_back(size);
        self.charge(
            p,
            if pinned {
                self.cfg
                    .costs
                    .pin_ns(self.cfg.costs.host_alloc_ns / 3, size / 3)
            } else {
                self.cfg.costs.call_ns
            },
        );
        self.retire(addr, size);
        Ok(())
    }

    pub(crate) fn host_register(
        &mut self,
        p: u32,
        addr: u64,
        size: usize,
        mapped: bool,
    ) -> DriverResult<()> {
        let size = size as u64;
        if size == 0 {
            return Err(self.zero_size());
        }
        match self.allocs.containing(addr) {
            Some((base, a)) if a.process == p && matches!(a.kind, AllocKind::Pageable) => {
                // Without wrapping for an absurd `size` (as in `resolve`).
                let room = (base + a.size).saturating_sub(addr);
                if size > room {
                    return Err(self.err(
                        CudaCode::INVALID_VALUE,
                        format!(
                            "range {addr:#x}+{size} runs {} bytes past its host allocation",
                            size - room
                        ),
                    ));
                }
            }
            Some((_, a)) if a.process == p && matches!(a.kind, AllocKind::Pinned { .. }) => {
                return Err(self.err(
                    CudaCode::HOST_MEMORY_ALREADY_REGISTERED,
                    format!("{addr:#x} is pinned memory from cuMemHostAlloc"),
                ));
            }
            _ => {
                return Err(self.err(
                    CudaCode::INVALID_VALUE,
                    format!("{addr:#x} is not in a host allocation of this process; allocate it with pageable_alloc"),
                ));
            }
        }
        if let Some((start, len)) = self.host.overlapping(addr, addr + size) {
            return Err(self.err(
                CudaCode::HOST_MEMORY_ALREADY_REGISTERED,
                format!("{addr:#x}+{size} overlaps the registered range {start:#x}+{len}"),
            ));
        }
        self.host.register(
            addr,
            Registration {
                size,
                mapped,
                process: p,
            },
        );
        self.charge(
            p,
            self.cfg.costs.pin_ns(self.cfg.costs.host_register_ns, size),
        );
        Ok(())
    }

    pub(crate) fn host_unregister(&mut self, p: u32, addr: u64) -> DriverResult<()> {
        match self.host.registration(addr) {
            Some(r) if r.process == p => {
                let size = r.size;
                // Unpinning with stream work still using the range races with it.
                if let Some((base, _)) = self.allocs.containing(addr) {
                    self.host_touch(p, base, addr, addr + size, "cuMemHostUnregister");
                }
                self.host.unregister(addr);
                self.charge(
                    p,
                    self.cfg
                        .costs
                        .pin_ns(self.cfg.costs.host_register_ns / 2, size / 16),
                );
                Ok(())
            }
            _ => Err(self.err(
                CudaCode::HOST_MEMORY_NOT_REGISTERED,
                format!("no registered range starts at {addr:#x}"),
            )),
        }
    }

    /// Whether `addr..addr+len` in a host allocation is mapped into the device address space.
    pub(super) fn host_mapped(&self, alloc: &Alloc, addr: u64, len: u64) -> bool {
        match alloc.kind {
            AllocKind::Pinned { flags } => flags.mapped,
            AllocKind::Pageable => self.host.is_mapped(addr, len),
            _ => false,
        }
    }

    pub(crate) fn host_device_pointer(&self, p: u32, addr: u64) -> DriverResult<u64> {
        match self.allocs.containing(addr) {
            Some((_, a)) if a.process == p && self.host_mapped(a, addr, 1) => Ok(addr),
            Some((_, a)) if a.process == p => Err(self.err(
                CudaCode::INVALID_VALUE,
                format!("{addr:#x} is {} that is not mapped; allocate with mapped=true or register with mapped=true", a.kind.describe()),
            )),
            _ => Err(self.err(CudaCode::INVALID_VALUE, format!("{addr:#x} is not host memory of this process"))),
        }
    }
}
