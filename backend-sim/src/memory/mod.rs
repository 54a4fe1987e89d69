//! Allocations, their contents, and the checks on every access: use after free, double free,
//! out of bounds, and races between streams.

use emm_core::units::Bytes;
use emm_core::{CudaCode, DriverResult, HostAllocFlags, MemInfo, StreamId};

use crate::config::CostModel;
use crate::report::Violation;
use crate::state::{
    round_up, Access, Alloc, FreeBlock, Kind, Registration, State, Who, ACCESS_MEMORY, CHUNK,
    FREED_MEMORY, POISON, VA_SPAN,
};

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
                crate::state::DEVICE_VA + u64::from(d) * VA_SPAN,
            ),
            Region::Managed => (&mut self.managed_va_next, crate::state::MANAGED_VA),
            Region::Host(p) => (
                &mut self.processes[p as usize].host_va_next,
                crate::state::HOST_VA + u64::from(p) * VA_SPAN,
            ),
            Region::Ipc(p) => (
                &mut self.processes[p as usize].ipc_va_next,
                crate::state::IPC_VA + u64::from(p) * VA_SPAN,
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
    /// free pool blocks when that makes room. On failure returns the bytes available.
    pub(crate) fn reserve_device(&mut self, device: u32, bytes: u64) -> Result<(), u64> {
        let limit = self.device_limit(device);
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
        kind: Kind,
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
        self.poison(base, size);

        self.freed.insert(base, size);
        if self.freed.len() > FREED_MEMORY {
            self.freed.pop_first();
        }
    }

    /// The error (and violation) for freeing `addr`, which is not a live base of `expected`.
    #[cold]
    pub(crate) fn bad_free(&mut self, p: u32, addr: u64, expected: &str) -> emm_core::DriverError {
        let call = self.call.name();
        let caller = self.caller;
        if self.freed.contains_key(&addr) {
            self.violate(Violation::DoubleFree { call, addr, caller });
            return self.err(
                CudaCode::INVALID_VALUE,
                format!("{addr:#x} was already freed (double free)"),
            );
        }
        let why = match self.containing(addr) {
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

    /// The live allocation containing `addr`.
    pub(crate) fn containing(&self, addr: u64) -> Option<(u64, &Alloc)> {
        let (&base, a) = self.allocs.range(..=addr).next_back()?;
        (addr < base + a.size.max(1)).then_some((base, a))
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
        self.insert_alloc(base, size, reserved, Kind::Device { device }, p);
        let peers = self.devices[device as usize].peer_mappings;
        self.charge(
            p,
            self.cfg.costs.alloc_ns(size) + peers * self.cfg.costs.peer_map_ns,
        );
        Ok(base)
    }

    /// `cuMemFree`: device, stream-ordered or managed memory; synchronizes the device first.
    pub(crate) fn mem_free(&mut self, p: u32, addr: u64) -> DriverResult<()> {
        let (size, reserved, device) = match self.allocs.get(&addr) {
            Some(a) if a.process == p => match &a.kind {
                Kind::Device { device } | Kind::PoolBlock { device, .. } => {
                    (a.size, a.reserved, Some(*device))
                }
                Kind::Managed(_) => (a.size, a.reserved, None),
                _ => return Err(self.bad_free(p, addr, "device or managed memory")),
            },
            _ => return Err(self.bad_free(p, addr, "device or managed memory")),
        };
        let sync_device = device.unwrap_or_else(|| self.current_device(p));
        self.host_wait_device(p, sync_device);
        self.charge(p, self.cfg.costs.alloc_ns(size));
        let alloc = self.allocs.remove(&addr).expect("looked up above");
        self.ipc_exports.remove(&alloc.serial);
        match alloc.kind {
            Kind::Device { device } => self.devices[device as usize].used -= reserved,
            Kind::PoolBlock { pool, .. } => self.return_to_pool(pool, addr, reserved, None),
            Kind::Managed(range) => self.drop_managed_pages(addr, &range),
            _ => {}
        }
        self.retire(addr, size);
        Ok(())
    }

    // ---- driver pools ----------------------------------------------------------------------

    pub(crate) fn pool(&self, pool: u64) -> DriverResult<()> {
        match self.pools.get(&pool) {
            Some(pl) if !pl.destroyed => Ok(()),
            _ => Err(self.err(
                CudaCode::INVALID_VALUE,
                format!("mempool:{pool} is not a live memory pool"),
            )),
        }
    }

    /// `cuMemAllocFromPoolAsync`: reuses a free block the stream is ordered after, or reserves
    /// new memory from the device.
    pub(crate) fn alloc_from_pool(
        &mut self,
        p: u32,
        size: usize,
        pool: u64,
        stream: StreamId,
    ) -> DriverResult<u64> {
        let size = size as u64;
        let s = self.stream(p, stream)?;
        self.pool(pool)?;
        if size == 0 {
            return Err(self.zero_size());
        }
        let device = self.pools[&pool].device;
        if self.streams[&s].device != device {
            return Err(self.err(
                CudaCode::INVALID_VALUE,
                format!(
                    "{stream} is on device {} but mempool:{pool} on device {device}",
                    self.streams[&s].device
                ),
            ));
        }
        self.charge(p, self.cfg.costs.alloc_async_ns);
        let reserved =
            round_up(size, self.cfg.granularity).ok_or_else(|| self.oom(device, size, 0))?;
        let (actor, clock) = {
            let st = &self.streams[&s];
            (st.actor, &st.clock)
        };
        let pl = &self.pools[&pool];
        let races = self.cfg.track_races;
        let reuse = pl
            .free
            .range((reserved, 0)..)
            .take_while(|((sz, _), _)| *sz <= reserved.saturating_mul(2))
            .find(|(_, fb)| {
                fb.freed_on
                    .is_none_or(|(a, e)| !races || a == actor || clock.has_seen(a, e))
            })
            .map(|(k, _)| *k);
        let (block_size, base) = match reuse {
            Some(key) => {
                self.pools
                    .get_mut(&pool)
                    .expect("checked")
                    .free
                    .remove(&key);
                key
            }
            None => {
                if let Err(avail) = self.reserve_device(device, reserved) {
                    return Err(self.oom(device, size, avail));
                }
                let base = match self.take_va(Region::Device(device), reserved) {
                    Ok(b) => b,
                    Err(e) => {
                        self.devices[device as usize].used -= reserved;
                        return Err(e);
                    }
                };
                self.pools.get_mut(&pool).expect("checked").reserved += reserved;
                self.charge(p, self.cfg.costs.alloc_ns(size));
                (reserved, base)
            }
        };
        self.pools.get_mut(&pool).expect("checked").used += block_size;
        self.insert_alloc(base, size, block_size, Kind::PoolBlock { device, pool }, p);
        // The allocation happens in stream order: until another stream (or the host) is ordered
        // after it, the memory may not even be mapped there (a real GPU faults).
        let (actor, epoch) = self.enqueue(p, s, 0);
        self.check_races(
            base,
            base,
            base + size,
            actor,
            epoch,
            true,
            "cuMemAllocAsync",
            Who::Stream(s),
        );
        Ok(base)
    }

    /// `cuMemFreeAsync`: the block returns to its pool, reusable on `stream` at once and on
    /// other streams once they are ordered after this point.
    pub(crate) fn mem_free_async(
        &mut self,
        p: u32,
        addr: u64,
        stream: StreamId,
    ) -> DriverResult<()> {
        let s = self.stream(p, stream)?;
        let pool = match self.allocs.get(&addr) {
            Some(a) if a.process == p => match a.kind {
                Kind::PoolBlock { pool, .. } => pool,
                Kind::Device { .. } | Kind::Managed(_) => {
                    // CUDA accepts cuMemAlloc'd memory here and frees it synchronously.
                    self.host_wait_stream(p, s);
                    return self.mem_free(p, addr);
                }
                _ => return Err(self.bad_free(p, addr, "stream-ordered device memory")),
            },
            _ => return Err(self.bad_free(p, addr, "stream-ordered device memory")),
        };
        self.charge(p, self.cfg.costs.alloc_async_ns);
        let (size, reserved) = (self.allocs[&addr].size, self.allocs[&addr].reserved);
        // The free is the stream's last use of the block: it must be ordered after every other use.
        let (actor, epoch) = self.enqueue(p, s, 0);
        self.check_races(
            addr,
            addr,
            addr + size,
            actor,
            epoch,
            true,
            "cuMemFreeAsync",
            Who::Stream(s),
        );
        self.allocs.remove(&addr);
        let done_at = self.streams[&s].busy_until;
        self.return_to_pool(pool, addr, reserved, Some((actor, epoch, done_at)));
        self.retire(addr, size);
        Ok(())
    }

    fn return_to_pool(
        &mut self,
        pool: u64,
        base: u64,
        reserved: u64,
        freed_on: Option<(u32, u64, u64)>,
    ) {
        let Some(pl) = self.pools.get_mut(&pool) else {
            return;
        };
        pl.used -= reserved;
        if pl.destroyed {
            pl.reserved -= reserved;
            let device = pl.device;
            self.devices[device as usize].used -= reserved;
            if pl.used == 0 {
                self.pools.remove(&pool);
            }
            return;
        }
        let block = FreeBlock {
            freed_on: freed_on.map(|(a, e, _)| (a, e)),
            done_at: freed_on.map_or(0, |(_, _, t)| t),
        };
        pl.free.insert((reserved, base), block);
    }

    /// Releases free blocks of `device`'s pools down to each pool's release threshold (or to
    /// `keep` with `force`), if their frees have completed.
    pub(crate) fn release_free_pool_blocks(&mut self, device: u32, keep: u64, force: bool) {
        let now = self.processes.iter().map(|p| p.now).max().unwrap_or(0);
        let mut released = 0;
        for pl in self.pools.values_mut().filter(|pl| pl.device == device) {
            let floor = if force { keep } else { pl.release_threshold };
            let mut gone = Vec::new();
            for (&(size, base), fb) in &pl.free {
                if pl.reserved <= floor {
                    break;
                }
                if fb.done_at <= now || force {
                    pl.reserved -= size;
                    released += size;
                    gone.push((size, base));
                }
            }
            for k in gone {
                pl.free.remove(&k);
            }
        }
        self.devices[device as usize].used -= released;
    }

    pub(crate) fn release_pools_over_threshold(&mut self, device: u32) {
        if self
            .pools
            .values()
            .any(|pl| pl.device == device && !pl.free.is_empty())
        {
            self.release_free_pool_blocks(device, 0, false);
        }
    }

    pub(crate) fn mem_pool_create(&mut self, device: u32) -> u64 {
        let id = self.handle();
        self.pools.insert(
            id,
            crate::state::Pool {
                device,
                is_default: false,
                destroyed: false,
                release_threshold: 0,
                reserved: 0,
                used: 0,
                free: Default::default(),
            },
        );
        id
    }

    pub(crate) fn mem_pool_destroy(&mut self, pool: u64) -> DriverResult<()> {
        self.pool(pool)?;
        if self.pools[&pool].is_default {
            return Err(self.err(
                CudaCode::INVALID_VALUE,
                format!("mempool:{pool} is a device's default pool and cannot be destroyed"),
            ));
        }
        let pl = self.pools.get_mut(&pool).expect("checked");
        let free: u64 = pl.free.keys().map(|(s, _)| s).sum();
        pl.free.clear();
        pl.reserved -= free;
        pl.destroyed = true;
        let (device, used) = (pl.device, pl.used);
        self.devices[device as usize].used -= free;
        if used == 0 {
            self.pools.remove(&pool);
        }
        for d in &mut self.devices {
            if d.current_pool == pool {
                d.current_pool = d.default_pool;
            }
        }
        Ok(())
    }

    // ---- host memory -----------------------------------------------------------------------

    fn reserve_host(&mut self, size: u64) -> DriverResult<()> {
        if self
            .host_used
            .checked_add(size)
            .is_some_and(|u| u <= self.cfg.host_memory)
        {
            self.host_used += size;
            Ok(())
        } else {
            Err(self.err(
                CudaCode::OUT_OF_MEMORY,
                format!(
                    "requested {} of host memory, {} free of {}",
                    Bytes(size),
                    Bytes(self.cfg.host_memory.saturating_sub(self.host_used)),
                    Bytes(self.cfg.host_memory)
                ),
            ))
        }
    }

    pub(crate) fn host_alloc(
        &mut self,
        p: u32,
        size: usize,
        flags: HostAllocFlags,
    ) -> DriverResult<u64> {
        self.host_allocation(p, size, Kind::Pinned { flags })
    }

    pub(crate) fn host_allocation(&mut self, p: u32, size: usize, kind: Kind) -> DriverResult<u64> {
        let size = size as u64;
        if size == 0 {
            return Err(self.zero_size());
        }
        self.reserve_host(size)?;
        let base = match self.take_va(Region::Host(p), size) {
            Ok(b) => b,
            Err(e) => {
                self.host_used -= size;
                return Err(e);
            }
        };
        if matches!(kind, Kind::Pinned { .. }) {
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
        let ok = match self.allocs.get(&addr) {
            Some(a) if a.process == p => matches!(
                (&a.kind, pinned),
                (Kind::Pinned { .. }, true) | (Kind::Pageable, false)
            ),
            _ => false,
        };
        if !ok {
            return Err(self.bad_free(p, addr, expected));
        }
        let size = self.allocs[&addr].size;
        if !pinned {
            if let Some((&start, _)) = self.registrations.range(addr..addr + size).next() {
                return Err(self.err(
                    CudaCode::INVALID_VALUE,
                    format!("{addr:#x} still has a registration at {start:#x}; call host_unregister first"),
                ));
            }
        }
        // Freeing is the host's last touch: a stream still using the memory races with it.
        self.host_touch(p, addr, addr, addr + size, "cuMemFreeHost/free");
        self.allocs.remove(&addr);
        self.host_used -= size;
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
        match self.containing(addr) {
            Some((base, a)) if a.process == p && matches!(a.kind, Kind::Pageable) => {
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
            Some((_, a)) if a.process == p && matches!(a.kind, Kind::Pinned { .. }) => {
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
        let overlap = self
            .registrations
            .range(..addr + size)
            .next_back()
            .filter(|(s, r)| **s + r.size > addr);
        if let Some((&start, r)) = overlap {
            return Err(self.err(
                CudaCode::HOST_MEMORY_ALREADY_REGISTERED,
                format!(
                    "{addr:#x}+{size} overlaps the registered range {start:#x}+{}",
                    r.size
                ),
            ));
        }
        self.registrations.insert(
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
        match self.registrations.get(&addr) {
            Some(r) if r.process == p => {
                let size = r.size;
                // Unpinning with stream work still using the range races with it.
                if let Some((base, _)) = self.containing(addr) {
                    self.host_touch(p, base, addr, addr + size, "cuMemHostUnregister");
                }
                self.registrations.remove(&addr);
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
    fn host_mapped(&self, alloc: &Alloc, addr: u64, len: u64) -> bool {
        match alloc.kind {
            Kind::Pinned { flags } => flags.mapped,
            Kind::Pageable => {
                self.registrations
                    .range(..=addr)
                    .next_back()
                    .is_some_and(|(s, r)| {
                        r.mapped && addr.checked_add(len).is_some_and(|e| e <= s + r.size)
                    })
            }
            _ => false,
        }
    }

    pub(crate) fn host_device_pointer(&self, p: u32, addr: u64) -> DriverResult<u64> {
        match self.containing(addr) {
            Some((_, a)) if a.process == p && self.host_mapped(a, addr, 1) => Ok(addr),
            Some((_, a)) if a.process == p => Err(self.err(
                CudaCode::INVALID_VALUE,
                format!("{addr:#x} is {} that is not mapped; allocate with mapped=true or register with mapped=true", a.kind.describe()),
            )),
            _ => Err(self.err(CudaCode::INVALID_VALUE, format!("{addr:#x} is not host memory of this process"))),
        }
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
        match self.containing(addr) {
            Some((base, a)) if a.process == p && matches!(a.kind, Kind::Reserved(_)) => {
                self.mapping_at(base, addr).ok_or_else(|| {
                    self.err(
                        CudaCode::NOT_FOUND,
                        format!("{addr:#x} is reserved but not mapped"),
                    )
                })
            }
            Some((base, a)) if a.process == p && !matches!(a.kind, Kind::Pageable) => {
                Ok((base, a.size))
            }
            _ => Err(self.err(
                CudaCode::NOT_FOUND,
                format!("{addr:#x} is not inside a live allocation of this process"),
            )),
        }
    }

    // ---- access ----------------------------------------------------------------------------

    /// Checks an access of `len` bytes at `addr` by `who`, returning the base of the allocation
    /// that holds the bytes and the address inside it (translated through IPC mappings).
    /// `device_side`: the access comes from the device (a kernel or a copy engine).
    pub(crate) fn resolve(
        &mut self,
        p: u32,
        addr: u64,
        len: u64,
        device_side: bool,
        kernel: bool,
    ) -> DriverResult<(u64, u64)> {
        let call = self.call.name();
        let caller = self.caller;
        let Some((base, a)) = self.containing(addr) else {
            if let Some((&fbase, &fsize)) = self.freed.range(..=addr).next_back() {
                if addr < fbase + fsize {
                    self.violate(Violation::UseAfterFree { call, addr, caller });
                    return Err(self.err(
                        CudaCode::ILLEGAL_ADDRESS,
                        format!("{addr:#x} was freed; it is used after free"),
                    ));
                }
            }
            self.violate(Violation::OutOfBounds {
                call,
                addr,
                len,
                caller,
            });
            return Err(self.err(
                CudaCode::INVALID_VALUE,
                format!("{addr:#x} is not inside any live allocation"),
            ));
        };
        // `addr` is inside the allocation, so `room` is exact; `addr + len` could wrap for an
        // absurd `len` and pass (found by fuzz/fuzz_targets/sim_driver_ops.rs).
        let room = (base + a.size).saturating_sub(addr);
        if len > room {
            let msg = format!(
                "{len} bytes at {addr:#x} run {} bytes past the end of {} ({} bytes at {base:#x})",
                len - room,
                a.kind.describe(),
                a.size
            );
            self.violate(Violation::OutOfBounds {
                call,
                addr,
                len,
                caller,
            });
            return Err(self.err(CudaCode::INVALID_VALUE, msg));
        }
        if a.process != p {
            return Err(self.err(
                CudaCode::INVALID_VALUE,
                format!(
                    "{addr:#x} belongs to process {}; open an IPC handle to use it here",
                    a.process
                ),
            ));
        }
        match &a.kind {
            Kind::Device { .. } | Kind::PoolBlock { .. } | Kind::Reserved(_) if !device_side => {
                Err(self.err(
                    CudaCode::INVALID_VALUE,
                    format!(
                        "{addr:#x} is {}; the host cannot load or store it: copy it with memcpy",
                        a.kind.describe()
                    ),
                ))
            }
            Kind::Pinned { .. } | Kind::Pageable if kernel && !self.host_mapped(a, addr, len) => {
                Err(self.err(
                    CudaCode::ILLEGAL_ADDRESS,
                    format!(
                        "{addr:#x} is {} not mapped into the device; a kernel cannot touch it",
                        a.kind.describe()
                    ),
                ))
            }
            Kind::IpcAlias { target, serial } => {
                let (target, serial) = (*target, *serial);
                let off = addr - base;
                match self.allocs.get(&target) {
                    Some(t) if t.serial == serial => Ok((target, target + off)),
                    _ => {
                        self.violate(Violation::UseAfterFree { call, addr, caller });
                        Err(self.err(
                            CudaCode::ILLEGAL_ADDRESS,
                            format!("{addr:#x} maps IPC memory that its exporter freed"),
                        ))
                    }
                }
            }
            Kind::Reserved(_) => self
                .check_mapped(base, addr, len, None)
                .map(|()| (base, addr)),
            _ => Ok((base, addr)),
        }
    }

    /// Records a host-side write-like touch of `start..end` in the allocation at `base` (a
    /// free or an unpin), reporting any unordered stream access as a race.
    fn host_touch(&mut self, p: u32, base: u64, start: u64, end: u64, op: &'static str) {
        let pr = &mut self.processes[p as usize];
        let (actor, epoch) = (pr.host_actor, pr.clock.tick(pr.host_actor));
        self.check_races(base, start, end, actor, epoch, true, op, Who::Host);
    }

    /// A kernel on stream `s` may touch another device's memory only once its context has
    /// enabled peer access to that device.
    fn check_peer_access(&mut self, base: u64, addr: u64, len: u64, s: u64) -> DriverResult<()> {
        let owner = match self.allocs.get(&base).map(|a| &a.kind) {
            Some(Kind::Device { device } | Kind::PoolBlock { device, .. }) => *device,
            Some(Kind::Reserved(_)) => {
                // Mapped memory is reachable from the devices cuMemSetAccess names.
                let device = self.streams[&s].device;
                return self.check_mapped(base, addr, len, Some(device));
            }
            _ => return Ok(()),
        };
        let st = &self.streams[&s];
        if owner == st.device || self.contexts[st.ctx as usize].peers.contains(&owner) {
            return Ok(());
        }
        let reason = format!(
            "device {} has no access to device {owner}'s memory; call enable_peer_access first",
            st.device
        );
        let (call, caller) = (self.call.name(), self.caller);
        self.violate(Violation::PeerAccess {
            call,
            addr: base,
            caller,
            reason: reason.clone(),
        });
        Err(self.err(CudaCode::ILLEGAL_ADDRESS, reason))
    }

    /// Records an access and reports a race with any earlier unordered conflicting access.
    #[allow(
        clippy::too_many_arguments,
        reason = "one access is all of these facts"
    )]
    pub(crate) fn check_races(
        &mut self,
        base: u64,
        start: u64,
        end: u64,
        actor: u32,
        epoch: u64,
        write: bool,
        op: &'static str,
        who: Who,
    ) {
        if !self.cfg.track_races {
            return;
        }
        let clock = match who {
            Who::Host => {
                &self
                    .processes
                    .iter()
                    .find(|pr| pr.host_actor == actor)
                    .expect("host actor")
                    .clock
            }
            Who::Stream(s) => &self.streams[&s].clock,
        };
        let Some(alloc) = self.allocs.get_mut(&base) else {
            return;
        };
        let mut race = None;
        for a in &alloc.accesses {
            if a.start < end
                && start < a.end
                && a.actor != actor
                && (a.write || write)
                && !clock.has_seen(a.actor, a.epoch)
            {
                race = Some((a.start.max(start), a.actor, a.op));
                break;
            }
        }
        // Forget accesses this one supersedes: ordered before it and inside its range.
        alloc.accesses.retain(|a| {
            !(a.start >= start
                && a.end <= end
                && (write || !a.write)
                && (a.actor == actor || clock.has_seen(a.actor, a.epoch)))
        });
        // A reservation is one allocation for a whole pool: it remembers more.
        let memory = match alloc.kind {
            Kind::Reserved(_) => 16 * ACCESS_MEMORY,
            _ => ACCESS_MEMORY,
        };
        if alloc.accesses.len() >= memory {
            alloc.accesses.remove(0);
        }
        alloc.accesses.push(Access {
            start,
            end,
            actor,
            epoch,
            write,
            op,
        });
        if let Some((addr, first_actor, first_op)) = race {
            let name = |st: &State, a: u32| {
                if st.processes.iter().any(|pr| pr.host_actor == a) {
                    "the host".to_string()
                } else {
                    st.streams.iter().find(|(_, s)| s.actor == a).map_or_else(
                        || "a destroyed stream".into(),
                        |(id, _)| format!("stream:{id}"),
                    )
                }
            };
            let first = format!("{first_op} on {}", name(self, first_actor));
            let second = format!("{op} on {}", name(self, actor));
            self.violate(Violation::Race {
                addr,
                first,
                second,
            });
        }
    }

    /// One access by `who` to `len` bytes at `addr`: resolves it, migrates managed pages as
    /// needed, orders it (queuing `duration_ns` of work on a stream), and checks for races.
    #[allow(
        clippy::too_many_arguments,
        reason = "one access is all of these facts"
    )]
    pub(crate) fn access(
        &mut self,
        p: u32,
        who: Who,
        addr: u64,
        len: u64,
        write: bool,
        kernel: bool,
        duration_ns: u64,
    ) -> DriverResult<u64> {
        let (base, target) = self.resolve(p, addr, len, who != Who::Host, kernel)?;
        if let (true, Who::Stream(s)) = (kernel, who) {
            self.check_peer_access(base, target, len, s)?;
        }
        let migrate = kernel || who == Who::Host;
        let migration_ns = self.touch_managed(base, target, len, who, migrate, write);
        let (actor, epoch) = match who {
            Who::Host => {
                self.charge(p, migration_ns);
                let pr = &mut self.processes[p as usize];
                (pr.host_actor, pr.clock.tick(pr.host_actor))
            }
            Who::Stream(s) => self.enqueue(p, s, duration_ns + migration_ns),
        };
        let op = self.call.name();
        self.check_races(base, target, target + len, actor, epoch, write, op, who);
        Ok(target)
    }

    // ---- contents --------------------------------------------------------------------------

    pub(crate) fn write_bytes(&mut self, mut addr: u64, mut src: &[u8]) {
        if !self.cfg.track_contents {
            return;
        }
        while !src.is_empty() {
            let chunk = addr & !(CHUNK - 1);
            let off = (addr - chunk) as usize;
            let n = src.len().min(CHUNK as usize - off);
            let buf = self
                .contents
                .entry(chunk)
                .or_insert_with(|| vec![POISON; CHUNK as usize].into_boxed_slice());
            buf[off..off + n].copy_from_slice(&src[..n]);
            src = &src[n..];
            addr += n as u64;
        }
    }

    pub(crate) fn read_bytes(&self, mut addr: u64, mut dst: &mut [u8]) {
        if !self.cfg.track_contents {
            dst.fill(POISON);
            return;
        }
        while !dst.is_empty() {
            let chunk = addr & !(CHUNK - 1);
            let off = (addr - chunk) as usize;
            let n = dst.len().min(CHUNK as usize - off);
            match self.contents.get(&chunk) {
                Some(buf) => dst[..n].copy_from_slice(&buf[off..off + n]),
                None => dst[..n].fill(POISON),
            }
            dst = &mut dst[n..];
            addr += n as u64;
        }
    }

    pub(crate) fn fill_bytes(&mut self, addr: u64, value: u8, len: u64) {
        if !self.cfg.track_contents {
            return;
        }
        let mut done = 0;
        let block = vec![value; CHUNK as usize];
        while done < len {
            let n = (len - done).min(CHUNK - ((addr + done) & (CHUNK - 1)));
            self.write_bytes(addr + done, &block[..n as usize]);
            done += n;
        }
    }

    /// Poisons freed memory: its chunks are dropped and read back as [`POISON`].
    pub(crate) fn poison(&mut self, addr: u64, len: u64) {
        if !self.cfg.track_contents || self.contents.is_empty() {
            return;
        }
        let first = addr & !(CHUNK - 1);
        let chunks: Vec<u64> = self
            .contents
            .range(first..addr + len)
            .map(|(k, _)| *k)
            .collect();
        for c in chunks {
            let (lo, hi) = (c.max(addr), (c + CHUNK).min(addr + len));
            if lo == c && hi == c + CHUNK {
                self.contents.remove(&c);
            } else if let Some(buf) = self.contents.get_mut(&c) {
                buf[(lo - c) as usize..(hi - c) as usize].fill(POISON);
            }
        }
    }

    // ---- copies ----------------------------------------------------------------------------

    /// Runs a copy or set on `stream` (or synchronously on the default stream).
    pub(crate) fn on_stream(
        &mut self,
        p: u32,
        stream: Option<StreamId>,
    ) -> DriverResult<(u64, bool)> {
        let s = self.stream(p, stream.unwrap_or(StreamId::DEFAULT))?;
        Ok((s, stream.is_none()))
    }

    pub(crate) fn memcpy_htod(
        &mut self,
        p: u32,
        dst: u64,
        src: &[u8],
        stream: Option<StreamId>,
    ) -> DriverResult<()> {
        let (s, sync) = self.on_stream(p, stream)?;
        let ns = CostModel::transfer_ns(src.len() as u64, self.cfg.costs.copy_bytes_per_us);
        self.charge(p, self.cfg.costs.call_ns);
        if src.is_empty() {
            return Ok(());
        }
        // CUDA's synchronous form from pageable memory waits for the stream's earlier work,
        // stages the bytes and returns: the copy itself may still be in flight.
        if sync {
            self.host_wait_stream(p, s);
        }
        let target = self.access(p, Who::Stream(s), dst, src.len() as u64, true, false, ns)?;
        self.write_bytes(target, src);
        Ok(())
    }

    pub(crate) fn memcpy_dtoh(
        &mut self,
        p: u32,
        dst: &mut [u8],
        src: u64,
        stream: Option<StreamId>,
    ) -> DriverResult<()> {
        let (s, _) = self.on_stream(p, stream)?;
        let ns = CostModel::transfer_ns(dst.len() as u64, self.cfg.costs.copy_bytes_per_us);
        self.charge(p, self.cfg.costs.call_ns);
        if dst.is_empty() {
            return Ok(());
        }
        let target = self.access(p, Who::Stream(s), src, dst.len() as u64, false, false, ns)?;
        self.read_bytes(target, dst);
        // A pageable destination holds the bytes when the call returns: the host waits.
        self.host_wait_stream(p, s);
        Ok(())
    }

    pub(crate) fn memcpy_dtod(
        &mut self,
        p: u32,
        dst: u64,
        src: u64,
        size: u64,
        stream: Option<StreamId>,
    ) -> DriverResult<()> {
        let (s, sync) = self.on_stream(p, stream)?;
        let ns = CostModel::transfer_ns(size, self.cfg.costs.d2d_bytes_per_us);
        self.charge(p, self.cfg.costs.call_ns);
        if size == 0 {
            return Ok(());
        }
        // Resolve both ends before touching either, so a bad destination changes nothing.
        self.resolve(p, dst, size, true, false)?;
        let from = self.access(p, Who::Stream(s), src, size, false, false, ns)?;
        let to = self.access(p, Who::Stream(s), dst, size, true, false, 0)?;
        if self.cfg.track_contents {
            let mut buf = vec![0u8; size as usize];
            self.read_bytes(from, &mut buf);
            self.write_bytes(to, &buf);
        }
        // A device-to-device copy never synchronizes the host, even in its synchronous form.
        let _ = sync;
        Ok(())
    }

    pub(crate) fn memset_d8(
        &mut self,
        p: u32,
        dst: u64,
        value: u8,
        size: u64,
        stream: Option<StreamId>,
    ) -> DriverResult<()> {
        let (s, sync) = self.on_stream(p, stream)?;
        let ns = CostModel::transfer_ns(size, self.cfg.costs.d2d_bytes_per_us);
        self.charge(p, self.cfg.costs.call_ns);
        if size == 0 {
            return Ok(());
        }
        // cuMemsetD8 runs as a kernel: it needs device-accessible memory (a host range only
        // while it is mapped), faults managed pages over, and needs peer access across devices.
        let target = self.access(p, Who::Stream(s), dst, size, true, true, ns)?;
        self.fill_bytes(target, value, size);
        // cuMemsetD8 is asynchronous with respect to the host unless it sets pinned host memory.
        let pinned = self
            .containing(target)
            .is_some_and(|(_, a)| matches!(a.kind, Kind::Pinned { .. }));
        if sync && pinned {
            self.host_wait_stream(p, s);
        }
        Ok(())
    }

    pub(crate) fn host_read(&mut self, p: u32, src: u64, dst: &mut [u8]) -> DriverResult<()> {
        self.charge(p, self.cfg.costs.call_ns);
        if dst.is_empty() {
            return Ok(());
        }
        let target = self.access(p, Who::Host, src, dst.len() as u64, false, false, 0)?;
        self.read_bytes(target, dst);
        Ok(())
    }

    pub(crate) fn host_write(&mut self, p: u32, dst: u64, src: &[u8]) -> DriverResult<()> {
        self.charge(p, self.cfg.costs.call_ns);
        if src.is_empty() {
            return Ok(());
        }
        let target = self.access(p, Who::Host, dst, src.len() as u64, true, false, 0)?;
        self.write_bytes(target, src);
        Ok(())
    }

    /// A kernel on `stream` reading or writing `len` bytes at `addr`.
    pub(crate) fn device_access(
        &mut self,
        p: u32,
        addr: u64,
        len: u64,
        stream: StreamId,
        write: bool,
    ) -> DriverResult<()> {
        let s = self.stream(p, stream)?;
        self.charge(p, self.cfg.costs.call_ns);
        if len == 0 {
            return Ok(());
        }
        let ns = CostModel::transfer_ns(len, self.cfg.costs.d2d_bytes_per_us);
        self.access(p, Who::Stream(s), addr, len, write, true, ns)?;
        Ok(())
    }
}
