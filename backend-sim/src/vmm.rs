//! Virtual memory management: address reservations, physical memory, mappings and access
//! (`cuMemAddressReserve`, `cuMemCreate`, `cuMemMap`, `cuMemSetAccess`, `cuMemUnmap`,
//! `cuMemRelease`, `cuMemAddressFree`).
//!
//! A reservation is an allocation of kind `AllocKind::Reserved` spanning its whole range, so the
//! checks every access goes through — bounds, use after free, races — treat it as one
//! allocation, and an access may run from one mapping into the next as on a GPU. `reservation`
//! then requires every byte an access touches to be mapped with access granted: a byte that
//! was unmapped is a use after free, one never mapped is out of bounds.
//!
//! Physical memory counts against its device from `cuMemCreate` to `cuMemRelease`. Its bytes
//! live at its first mapping's addresses while mapped and move to a store of their own while
//! not, so they survive being mapped again elsewhere. A handle may be mapped at several
//! addresses at once, as CUDA allows: a new mapping gets a copy of the bytes and of the
//! accesses remembered at the first, so that a user of the new address not ordered after a
//! user of the old one is a race (the bytes of two mappings part only through such a race).
//!
//! Misuse is refused with the error CUDA gives (or, where CUDA would defer or guess, with
//! `ILLEGAL_STATE`) and recorded as a violation: releasing mapped memory, freeing a reservation
//! with mappings, unmapping what is not mapped. `cuMemUnmap` is not stream-ordered, so an
//! unmap is a host write to the range: stream work on it the host has not waited for is a race.
//!
//! The parts these operations touch: the reservations in `allocation_table`, the physical
//! memory and address ranges in `virtual_memory`, the bytes in `byte_store`, and the devices'
//! accounting on the state.

use emm_core::units::Bytes;
use emm_core::{CudaCode, DeviceId, DriverResult};

use crate::address_space::RESERVE_SPAN;
use crate::allocation_table::AllocKind;
use crate::report::Violation;
use crate::reservation::{Mapping, Phys};
use crate::state::State;
use crate::stream_table::Accessor;

impl State {
    /// The allocation granularity, or `NOT_SUPPORTED` when the machine has no virtual memory
    /// management.
    fn granularity(&self) -> DriverResult<u64> {
        if self.cfg.virtual_memory_management {
            Ok(self.cfg.vmm_granularity)
        } else {
            Err(self.err(
                CudaCode::NOT_SUPPORTED,
                "this simulated device has no virtual memory management; use cuMemAlloc",
            ))
        }
    }

    /// Checks that `n` bytes (what `what` names) are a positive multiple of the granularity.
    fn granules(&self, n: u64, what: &str) -> DriverResult<u64> {
        let g = self.granularity()?;
        if n == 0 || !n.is_multiple_of(g) {
            return Err(self.err(
                CudaCode::INVALID_VALUE,
                format!(
                    "{what} is {n} bytes; it must be a positive multiple of the allocation \
                     granularity, {}: round it up",
                    Bytes(g)
                ),
            ));
        }
        Ok(n / g)
    }

    pub(crate) fn mem_get_allocation_granularity(
        &mut self,
        p: u32,
        device: DeviceId,
    ) -> DriverResult<u64> {
        self.charge(p, self.cfg.costs.call_ns);
        self.device(device)?;
        self.granularity()
    }

    pub(crate) fn mem_address_reserve(
        &mut self,
        p: u32,
        size: u64,
        alignment: u64,
    ) -> DriverResult<u64> {
        self.granules(size, "the reservation")?;
        let g = self.cfg.vmm_granularity;
        if alignment != 0 && !alignment.is_power_of_two() {
            return Err(self.err(
                CudaCode::INVALID_VALUE,
                format!("alignment {alignment} is not a power of two (or 0 for the default)"),
            ));
        }
        // A gap of one granule after each reservation, so that an overrun lands nowhere.
        let Some(base) = self.vmm.take_reservation(size, alignment.max(g), g) else {
            return Err(self.err(
                CudaCode::OUT_OF_MEMORY,
                format!(
                    "cannot reserve {}: the simulator's {} of reservable address space is used \
                     up (it never reuses addresses); create a new SimDriver",
                    Bytes(size),
                    Bytes(RESERVE_SPAN)
                ),
            ));
        };
        self.insert_alloc(base, size, 0, AllocKind::Reserved(Box::default()), p);
        self.charge(p, self.cfg.costs.vmm_reserve_ns);
        Ok(base)
    }

    pub(crate) fn mem_address_free(&mut self, p: u32, ptr: u64, size: u64) -> DriverResult<()> {
        let (reserved, mapped) = match self.allocs.get(ptr) {
            Some(a) if a.process == p => match &a.kind {
                AllocKind::Reserved(r) => {
                    (a.size, r.mappings.iter().next().map(|(&b, m)| (b, m.size)))
                }
                _ => return Err(self.bad_free(p, ptr, "an address reservation")),
            },
            _ => return Err(self.bad_free(p, ptr, "an address reservation")),
        };
        if size != reserved {
            return Err(self.err(
                CudaCode::INVALID_VALUE,
                format!("{ptr:#x} was reserved with {reserved} bytes, not {size}"),
            ));
        }
        if let Some((at, n)) = mapped {
            let why = format!("{} is still mapped at {at:#x}; unmap it first", Bytes(n));
            return Err(self.refuse(ptr, why));
        }
        self.allocs.remove(ptr);
        self.retire(ptr, size);
        self.charge(p, self.cfg.costs.vmm_reserve_ns);
        Ok(())
    }

    pub(crate) fn mem_create(&mut self, p: u32, size: u64, device: DeviceId) -> DriverResult<u64> {
        let d = self.device(device)?;
        let granules = self.granules(size, "the physical allocation")?;
        self.reserve_device(d, size)
            .map_err(|avail| self.oom(d, size, avail))?;
        let store = self.vmm.take_store(size);
        let handle = self.handle();
        let phys = Phys {
            size,
            device: d,
            process: p,
            caller: self.caller,
            store,
            mapped_at: Vec::new(),
        };
        self.vmm.insert(handle, phys);
        self.charge(p, self.cfg.costs.vmm_create_ns(granules));
        Ok(handle)
    }

    /// The live physical memory `handle` of process `p`.
    fn phys_of(&self, p: u32, handle: u64) -> DriverResult<&Phys> {
        match self.vmm.get(handle) {
            Some(ph) if ph.process == p => Ok(ph),
            _ => Err(self.err(
                CudaCode::INVALID_VALUE,
                format!(
                    "phys:{handle:#x} is not live physical memory of this process (released \
                     already, or never created)"
                ),
            )),
        }
    }

    pub(crate) fn mem_release(&mut self, p: u32, handle: u64) -> DriverResult<()> {
        let (size, device, store, mapped_at) = match self.phys_of(p, handle) {
            Ok(ph) => (ph.size, ph.device, ph.store, ph.mapped_at.first().copied()),
            Err(e) => {
                let (call, caller) = (self.call.name(), self.caller);
                let why = "not live physical memory (double release, or a foreign handle)";
                self.violate(Violation::InvalidFree {
                    call,
                    addr: handle,
                    why: why.into(),
                    caller,
                });
                return Err(e);
            }
        };
        if let Some(at) = mapped_at {
            let why = format!("phys:{handle:#x} is still mapped at {at:#x}; unmap it first");
            return Err(self.refuse(handle, why));
        }
        self.vmm.remove(handle);
        self.devices[device as usize].used -= size;
        self.contents.poison(store, size);
        let granules = size / self.cfg.vmm_granularity;
        self.charge(p, self.cfg.costs.vmm_create_ns(granules));
        Ok(())
    }

    /// The reservation of process `p` holding `ptr..ptr + len` whole: its base.
    fn reservation_of(&self, p: u32, ptr: u64, len: u64) -> DriverResult<u64> {
        match self.allocs.containing(ptr) {
            Some((base, a))
                if a.process == p
                    && matches!(a.kind, AllocKind::Reserved(_))
                    && ptr.checked_add(len).is_some_and(|e| e <= base + a.size) =>
            {
                Ok(base)
            }
            _ => Err(self.err(
                CudaCode::INVALID_VALUE,
                format!(
                    "{} at {ptr:#x} is not inside one address reservation of this process; \
                     reserve it with cuMemAddressReserve",
                    Bytes(len)
                ),
            )),
        }
    }

    pub(crate) fn mem_map(&mut self, p: u32, ptr: u64, size: u64, handle: u64) -> DriverResult<()> {
        self.granules(size, "the mapping")?;
        if !ptr.is_multiple_of(self.cfg.vmm_granularity) {
            return Err(self.err(
                CudaCode::INVALID_VALUE,
                format!("{ptr:#x} is not aligned to the allocation granularity"),
            ));
        }
        let (phys_size, store, first) = {
            let ph = self.phys_of(p, handle)?;
            (ph.size, ph.store, ph.mapped_at.first().copied())
        };
        if size > phys_size {
            return Err(self.err(
                CudaCode::INVALID_VALUE,
                format!(
                    "{} asked of phys:{handle:#x}, which has {}",
                    Bytes(size),
                    Bytes(phys_size)
                ),
            ));
        }
        let base = self.reservation_of(p, ptr, size)?;
        let end = ptr + size;
        let clash = self
            .allocs
            .reservation(base)
            .and_then(|r| r.overlapping(ptr, end));
        if let Some(at) = clash {
            return Err(self.err(
                CudaCode::ALREADY_MAPPED,
                format!(
                    "{ptr:#x}..{end:#x} overlaps the mapping at {at:#x}; unmap that first \
                     (double map)"
                ),
            ));
        }
        if let Some(r) = self.allocs.reservation_mut(base) {
            r.mappings.insert(ptr, Mapping::new(size, handle));
            r.forget_unmapped(ptr, end);
        }
        if let Some(ph) = self.vmm.get_mut(handle) {
            ph.mapped_at.push(ptr);
        }
        match first {
            // An alias: the bytes and the accesses of the first mapping, over the same size.
            Some(at) => {
                let (len, seen) = match self.allocs.containing(at) {
                    Some((_, a)) => {
                        let first = match &a.kind {
                            AllocKind::Reserved(r) => r.mappings.get(&at).map_or(0, |m| m.size),
                            _ => 0,
                        };
                        let len = size.min(first);
                        (len, a.accesses_moved(at, ptr, len))
                    }
                    None => (0, Vec::new()),
                };
                self.contents.copy_range(at, ptr, len);
                if let Some(a) = self.allocs.get_mut(base) {
                    a.remember(seen);
                }
            }
            None => self.contents.move_range(store, ptr, size),
        }
        self.charge(p, self.cfg.costs.vmm_map_ns);
        Ok(())
    }

    pub(crate) fn mem_unmap(&mut self, p: u32, ptr: u64, size: u64) -> DriverResult<()> {
        let base = self.reservation_of(p, ptr, size.max(1))?;
        let end = ptr + size;
        let mut whole = Vec::new();
        let gap = self.allocs.reservation(base).and_then(|r| {
            r.first_gap(ptr, end, |b, m| whole.push((b, *m)))
                .or_else(|| {
                    // The range must hold whole mappings: none may start before it or end after.
                    let (first, last) = (whole.first()?, whole.last()?);
                    (first.0 != ptr || last.0 + last.1.size != end).then_some(first.0)
                })
        });
        if size == 0 || gap.is_some() || whole.is_empty() {
            let why = format!(
                "{} at {ptr:#x} is not a run of whole mappings (unmap of an unmapped range, or \
                 of part of a mapping)",
                Bytes(size)
            );
            return Err(self.refuse_with(CudaCode::INVALID_VALUE, ptr, why));
        }
        // Not stream-ordered: the unmap is a host write to the range.
        let (actor, epoch) = {
            let pr = &mut self.processes[p as usize];
            (pr.host_actor, pr.clock.tick(pr.host_actor))
        };
        self.check_races(
            base,
            ptr,
            end,
            actor,
            epoch,
            true,
            "cuMemUnmap",
            Accessor::Host,
        );
        for (at, m) in whole {
            // The bytes go to the store with the last mapping; another mapping keeps its own.
            let store = self.vmm.get_mut(m.handle).and_then(|ph| {
                ph.mapped_at.retain(|&a| a != at);
                ph.mapped_at.is_empty().then_some(ph.store)
            });
            match store {
                Some(store) => self.contents.move_range(at, store, m.size),
                None => self.contents.poison(at, m.size),
            }
            if let Some(r) = self.allocs.reservation_mut(base) {
                r.mappings.remove(&at);
                r.record_unmapped(at, m.size);
            }
            self.charge(p, self.cfg.costs.vmm_unmap_ns);
        }
        Ok(())
    }

    pub(crate) fn mem_set_access(
        &mut self,
        p: u32,
        ptr: u64,
        size: u64,
        device: DeviceId,
    ) -> DriverResult<()> {
        let d = self.device(device)?;
        let granules = self.granules(size, "the range")?;
        let base = self.reservation_of(p, ptr, size)?;
        let mut covered = Vec::new();
        let gap = self
            .allocs
            .reservation(base)
            .and_then(|r| r.first_gap(ptr, ptr + size, |b, _| covered.push(b)));
        if let Some(at) = gap {
            return Err(self.err(
                CudaCode::INVALID_VALUE,
                format!("{at:#x} is not mapped; map the whole range before granting access"),
            ));
        }
        if let Some(r) = self.allocs.reservation_mut(base) {
            for b in covered {
                r.grant(b, d);
            }
        }
        self.charge(p, self.cfg.costs.vmm_set_access_ns(granules));
        Ok(())
    }

    /// Refuses a misuse with `ILLEGAL_STATE`, recording it as an invalid free.
    fn refuse(&mut self, addr: u64, why: String) -> emm_core::DriverError {
        self.refuse_with(CudaCode::ILLEGAL_STATE, addr, why)
    }

    #[cold]
    fn refuse_with(&mut self, code: CudaCode, addr: u64, why: String) -> emm_core::DriverError {
        let (call, caller) = (self.call.name(), self.caller);
        self.violate(Violation::InvalidFree {
            call,
            addr,
            why: why.clone(),
            caller,
        });
        self.err(code, why)
    }
}

impl State {
    /// Checks a device-side access of `len` bytes at `addr` in the reservation at `base`:
    /// every byte mapped, and access granted (to `device`, when the access is a kernel's).
    pub(crate) fn check_mapped(
        &mut self,
        base: u64,
        addr: u64,
        len: u64,
        device: Option<u32>,
    ) -> DriverResult<()> {
        let Some(r) = self.allocs.reservation(base) else {
            return Ok(());
        };
        let mut denied = None;
        let gap = r.first_gap(addr, addr + len, |b, m| {
            if !m.grants(device) {
                denied.get_or_insert(b);
            }
        });
        let gap = gap.map(|at| (at, r.was_unmapped(at)));
        let (call, caller) = (self.call.name(), self.caller);
        match (gap, denied) {
            (Some((at, true)), _) => {
                self.violate(Violation::UseAfterFree {
                    call,
                    addr: at,
                    caller,
                });
                Err(self.err(
                    CudaCode::ILLEGAL_ADDRESS,
                    format!("{at:#x} was unmapped; it is used after free"),
                ))
            }
            (Some((at, false)), _) => {
                self.violate(Violation::OutOfBounds {
                    call,
                    addr,
                    len,
                    caller,
                });
                Err(self.err(
                    CudaCode::ILLEGAL_ADDRESS,
                    format!("{at:#x} is reserved but not mapped; map memory there first"),
                ))
            }
            (None, Some(at)) => Err(self.err(
                CudaCode::ILLEGAL_ADDRESS,
                format!(
                    "the mapping at {at:#x} grants no access{}; call cuMemSetAccess",
                    device.map_or(String::new(), |d| format!(" to device {d}"))
                ),
            )),
            (None, None) => Ok(()),
        }
    }
}
