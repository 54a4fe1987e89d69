//! Managed (unified) memory: page residency, migration on access and on prefetch, advice, and
//! oversubscription by evicting least-recently-used pages to the host.
//!
//! A page lives on the host or on one device, or is not yet populated (first touch places it).
//! A kernel or a host access to a page elsewhere migrates it (a fault), unless advice says to
//! map it instead: `SetAccessedBy` for that processor, `SetPreferredLocation` keeping it where
//! it is, or `SetReadMostly` for reads (a copy is made once). Copies by the copy engine never
//! migrate. Prefetches move pages on a stream.
//!
//! Each page's location and advice live in its allocation's `ManagedRange` (in the
//! `allocation_table` part), the pages resident per device and the counters in the
//! `managed_residency` part; a placement also moves bytes of the device's accounting.

use emm_core::{Advice, CudaCode, DeviceId, DriverResult, Location, StreamId};

use crate::allocation_table::AllocKind;
use crate::config::CostModel;
use crate::managed_range::{copy_bit, ManagedAdvice, ManagedRange, Page, Span};
use crate::memory::Region;
use crate::state::State;
use crate::stream_table::Accessor;

impl State {
    pub(crate) fn mem_alloc_managed(
        &mut self,
        p: u32,
        size: usize,
        attach_global: bool,
    ) -> DriverResult<u64> {
        let size = size as u64;
        if size == 0 {
            return Err(self.zero_size());
        }
        let page = self.cfg.managed_page_size;
        let cap = if self.cfg.concurrent_managed_access {
            self.cfg.host_memory + self.cfg.memory_per_device * u64::from(self.cfg.devices)
        } else {
            self.cfg.memory_per_device
        };
        let rounded = crate::address_space::round_up(size, page)
            .filter(|r| *r <= cap)
            .ok_or_else(|| {
                self.err(
                    CudaCode::OUT_OF_MEMORY,
                    format!(
                        "requested {} of managed memory; the machine can back at most {}",
                        emm_core::units::Bytes(size),
                        emm_core::units::Bytes(cap)
                    ),
                )
            })?;
        let base = self.take_va(Region::Managed, rounded)?;
        let range = ManagedRange {
            attach_global,
            ..ManagedRange::default()
        };
        self.insert_alloc(base, size, rounded, AllocKind::Managed(Box::new(range)), p);
        let extra = (size.min(256 << 20) as f64 / (256u64 << 20) as f64 * 28_000.0) as u64;
        self.charge(p, self.cfg.costs.managed_alloc_ns + extra);
        Ok(base)
    }

    /// Releases the device pages of a freed managed allocation.
    pub(crate) fn drop_managed_pages(&mut self, _base: u64, range: &ManagedRange) {
        let page = self.cfg.managed_page_size;
        for pg in range.pages.values() {
            if let Location::Device(d) = pg.loc {
                self.devices[d.0 as usize].used -= page;
                self.managed.forget(d.0, pg.tick);
            }
        }
    }

    /// Moves the least recently used managed page off `device` to the host. False when none.
    pub(crate) fn evict_one_page(&mut self, device: u32) -> bool {
        if !self.cfg.concurrent_managed_access {
            return false;
        }
        let Some((base, idx)) = self.managed.pop_oldest(device) else {
            return false;
        };
        let page = self.cfg.managed_page_size;
        if let Some(pg) = self
            .allocs
            .managed_mut(base)
            .and_then(|r| r.pages.get_mut(&idx))
        {
            pg.loc = Location::Host;
            pg.copies = 0;
        }
        self.devices[device as usize].used -= page;
        self.managed.stats.evictions += 1;
        self.managed.stats.migrated_to_host += page;
        true
    }

    /// Places page `idx` of `base` at `to`, making room on a device. False if it cannot fit.
    fn place_page(&mut self, base: u64, idx: u64, to: Location) -> bool {
        let page = self.cfg.managed_page_size;
        let old = self
            .allocs
            .managed(base)
            .and_then(|r| r.pages.get(&idx))
            .copied();
        if let Some(Page {
            loc: Location::Device(d),
            tick,
            ..
        }) = old
        {
            self.devices[d.0 as usize].used -= page;
            self.managed.forget(d.0, tick);
        }
        let mut loc = to;
        if let Location::Device(d) = to {
            if self.reserve_device(d.0, page).is_err() {
                loc = old.map_or(Location::Host, |o| o.loc);
                if let Location::Device(od) = loc {
                    // It stays where it was: account for it again.
                    self.devices[od.0 as usize].used += page;
                }
            }
        }
        let tick = self.managed.place(loc, base, idx);
        if let Some(r) = self.allocs.managed_mut(base) {
            let copies = old.map_or(0, |o| o.copies);
            r.pages.insert(idx, Page { loc, tick, copies });
        }
        loc == to
    }

    /// Touches the managed pages under an access; returns the virtual time spent migrating.
    /// `migrate`: the access may fault pages over (kernels and the host; copies never do).
    pub(crate) fn touch_managed(
        &mut self,
        base: u64,
        addr: u64,
        len: u64,
        who: Accessor,
        migrate: bool,
        write: bool,
    ) -> u64 {
        if self.allocs.managed(base).is_none() {
            return 0;
        }
        let page = self.cfg.managed_page_size;
        let accessor = who.location(&self.streams);
        let (first, last_idx) = ((addr - base) / page, (addr - base + len - 1) / page);
        let mut ns = 0;
        for idx in first..=last_idx {
            let r = self.allocs.managed(base).expect("checked above");
            let advice = r.advice_at(idx * page);
            match r.pages.get(&idx).copied() {
                None => {
                    self.place_page(base, idx, accessor);
                }
                Some(pg) if pg.loc == accessor => {
                    self.place_page(base, idx, accessor);
                }
                Some(pg) => {
                    let mapped = advice.accessed_by.contains(&accessor)
                        || (advice.preferred_location == Some(pg.loc)
                            && accessor != Location::Host);
                    if !migrate || mapped {
                        self.managed.stats.remote_accesses += 1;
                    } else if advice.read_mostly && !write {
                        if pg.copies & copy_bit(accessor) == 0 {
                            ns += CostModel::transfer_ns(
                                page,
                                self.cfg.costs.fault_migration_bytes_per_us,
                            );
                            self.managed.count_migration(accessor, page);
                            if let Some(p) = self
                                .allocs
                                .managed_mut(base)
                                .and_then(|r| r.pages.get_mut(&idx))
                            {
                                p.copies |= copy_bit(accessor);
                            }
                        }
                    } else if self.place_page(base, idx, accessor) {
                        self.managed.stats.faults += 1;
                        ns += CostModel::transfer_ns(
                            page,
                            self.cfg.costs.fault_migration_bytes_per_us,
                        );
                        self.managed.count_migration(accessor, page);
                    } else {
                        self.managed.stats.remote_accesses += 1;
                    }
                }
            }
            if write {
                if let Some(p) = self
                    .allocs
                    .managed_mut(base)
                    .and_then(|r| r.pages.get_mut(&idx))
                {
                    p.copies = 0;
                }
            }
        }
        ns
    }

    /// Resolves a managed range of process `p`: the allocation's base.
    fn managed_base(&mut self, p: u32, addr: u64, len: u64) -> DriverResult<u64> {
        if len == 0 {
            return Err(self.zero_size());
        }
        let (base, target) = self.resolve(p, addr, len, true, false)?;
        if self.allocs.managed(base).is_none() || target != addr {
            return Err(self.err(
                CudaCode::INVALID_VALUE,
                format!("{addr:#x} is not managed memory; advice and prefetch apply to memory from mem_alloc_managed"),
            ));
        }
        Ok(base)
    }

    fn check_location(&self, location: Location) -> DriverResult<()> {
        match location {
            Location::Host => Ok(()),
            Location::Device(d) => self.device(d).map(|_| ()),
        }
    }

    pub(crate) fn mem_advise(
        &mut self,
        p: u32,
        addr: u64,
        len: u64,
        advice: Advice,
        location: Location,
    ) -> DriverResult<()> {
        let base = self.managed_base(p, addr, len)?;
        self.check_location(location)?;
        self.charge(p, self.cfg.costs.advise_ns);
        let (start, end) = (addr - base, addr - base + len);
        let r = self
            .allocs
            .managed_mut(base)
            .expect("checked by managed_base");
        match advice {
            Advice::SetPreferredLocation => r.preferred.push(Span {
                start,
                end,
                value: Some(location),
            }),
            Advice::UnsetPreferredLocation => r.preferred.push(Span {
                start,
                end,
                value: None,
            }),
            Advice::SetAccessedBy => r.accessed_by.push(Span {
                start,
                end,
                value: (location, true),
            }),
            Advice::UnsetAccessedBy => r.accessed_by.push(Span {
                start,
                end,
                value: (location, false),
            }),
            Advice::SetReadMostly => r.read_mostly.push(Span {
                start,
                end,
                value: true,
            }),
            Advice::UnsetReadMostly => r.read_mostly.push(Span {
                start,
                end,
                value: false,
            }),
        }
        Ok(())
    }

    pub(crate) fn mem_prefetch(
        &mut self,
        p: u32,
        addr: u64,
        len: u64,
        location: Location,
        stream: StreamId,
    ) -> DriverResult<()> {
        let s = self.stream(p, stream)?;
        let base = self.managed_base(p, addr, len)?;
        self.check_location(location)?;
        self.charge(p, self.cfg.costs.call_ns);
        let page = self.cfg.managed_page_size;
        let bw = match location {
            Location::Host => self.cfg.costs.prefetch_to_host_bytes_per_us,
            Location::Device(_) => self.cfg.costs.prefetch_to_device_bytes_per_us,
        };
        let (first, last_idx) = ((addr - base) / page, (addr - base + len - 1) / page);
        let mut moved = 0;
        for idx in first..=last_idx {
            let old = self
                .allocs
                .managed(base)
                .and_then(|r| r.pages.get(&idx))
                .map(|pg| pg.loc);
            if old == Some(location) {
                continue;
            }
            if self.place_page(base, idx, location) && old.is_some() {
                moved += page;
            }
        }
        self.managed.stats.prefetched += moved;
        self.managed.count_migration(location, moved);
        let (actor, epoch) = self.enqueue(p, s, CostModel::transfer_ns(moved, bw));
        // A migration conflicts with any unordered access to the pages, reads included.
        self.check_races(
            base,
            addr,
            addr + len,
            actor,
            epoch,
            true,
            "cuMemPrefetchAsync",
            Accessor::Stream(s),
        );
        Ok(())
    }

    /// Where the page holding `addr` lives (`None`: not managed, or not yet populated).
    pub(crate) fn residency(&self, addr: u64) -> Option<Location> {
        let (base, _) = self.allocs.containing(addr)?;
        let r = self.allocs.managed(base)?;
        r.pages
            .get(&((addr - base) / self.cfg.managed_page_size))
            .map(|pg| pg.loc)
    }

    /// The advice in force at `addr`, if it is managed memory.
    pub(crate) fn advice(&self, addr: u64) -> Option<ManagedAdvice> {
        let (base, _) = self.allocs.containing(addr)?;
        Some(self.allocs.managed(base)?.advice_at(addr - base))
    }

    /// Bytes of managed memory resident on `device`.
    pub(crate) fn managed_resident(&self, device: DeviceId) -> u64 {
        self.managed.resident_pages(device.0) * self.cfg.managed_page_size
    }
}
