//! The virtual memory pieces: [`Reservation`], what is mapped in one address reservation (held by
//! its allocation), its [`Mapping`]s, and [`Phys`], physical memory from `cuMemCreate` (held by
//! the `virtual_memory` part). The operations on them, and the check every device-side access
//! to a reservation goes through, are in `vmm`.

use std::collections::BTreeMap;

/// Unmapped ranges a reservation remembers, to tell a use after unmap from a wild access.
const UNMAPPED_MEMORY: usize = 4096;

/// What is mapped in one reservation.
#[derive(Debug, Default)]
pub(crate) struct Reservation {
    /// Mappings by address.
    pub(crate) mappings: BTreeMap<u64, Mapping>,
    /// Ranges mapped once and unmapped since: address → size.
    unmapped: BTreeMap<u64, u64>,
}

/// One mapping of physical memory into a reservation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mapping {
    pub(crate) size: u64,
    pub(crate) handle: u64,
    /// Devices granted read-write access, one bit per device.
    access: u32,
}

impl Mapping {
    /// Whether `device` may access the mapping (with no device: whether any may).
    pub(crate) fn grants(&self, device: Option<u32>) -> bool {
        match device {
            Some(d) => self.access & (1 << d) != 0,
            None => self.access != 0,
        }
    }

    /// A mapping of the first `size` bytes of physical memory `handle`, with no access yet.
    pub(crate) fn new(size: u64, handle: u64) -> Self {
        Mapping {
            size,
            handle,
            access: 0,
        }
    }
}

impl Reservation {
    /// Calls `each` on the mappings covering `addr..end` in address order and returns the
    /// first address in that range no mapping covers, if any.
    pub(crate) fn first_gap(
        &self,
        addr: u64,
        end: u64,
        mut each: impl FnMut(u64, &Mapping),
    ) -> Option<u64> {
        let from = self
            .mappings
            .range(..=addr)
            .next_back()
            .map_or(addr, |(&b, _)| b);
        let mut at = addr;
        for (&b, m) in self.mappings.range(from..end) {
            if b + m.size <= at {
                continue;
            }
            if b > at {
                return Some(at);
            }
            each(b, m);
            at = b + m.size;
            if at >= end {
                return None;
            }
        }
        (at < end).then_some(at)
    }

    /// The first mapping overlapping `addr..end`, if any.
    pub(crate) fn overlapping(&self, addr: u64, end: u64) -> Option<u64> {
        let from = self
            .mappings
            .range(..=addr)
            .next_back()
            .map_or(addr, |(&b, _)| b);
        self.mappings
            .range(from..end)
            .find(|&(&b, m)| b + m.size > addr)
            .map(|(&b, _)| b)
    }

    /// Remembers that `at..at + size` was mapped and is not any more.
    pub(crate) fn record_unmapped(&mut self, at: u64, size: u64) {
        self.unmapped.insert(at, size);
        if self.unmapped.len() > UNMAPPED_MEMORY {
            self.unmapped.pop_first();
        }
    }

    /// Forgets the unmapped ranges starting in `addr..end`, mapped again.
    pub(crate) fn forget_unmapped(&mut self, addr: u64, end: u64) {
        let stale: Vec<u64> = self.unmapped.range(addr..end).map(|(&b, _)| b).collect();
        for b in stale {
            self.unmapped.remove(&b);
        }
    }

    /// Grants device `d` read-write access to the mapping at `at`.
    pub(crate) fn grant(&mut self, at: u64, d: u32) {
        if let Some(m) = self.mappings.get_mut(&at) {
            m.access |= 1 << d;
        }
    }

    /// The mapping holding `addr`: its address and size.
    pub(crate) fn mapping_at(&self, addr: u64) -> Option<(u64, u64)> {
        let (&b, m) = self.mappings.range(..=addr).next_back()?;
        (addr < b + m.size).then_some((b, m.size))
    }

    /// Whether `addr` was mapped once and is not any more.
    pub(crate) fn was_unmapped(&self, addr: u64) -> bool {
        self.unmapped
            .range(..=addr)
            .next_back()
            .is_some_and(|(&b, &n)| addr < b + n)
    }
}

/// Physical memory from `cuMemCreate`.
#[derive(Debug)]
pub(crate) struct Phys {
    pub(crate) size: u64,
    pub(crate) device: u32,
    pub(crate) process: u32,
    pub(crate) caller: &'static str,
    /// Where its bytes are kept while it is not mapped.
    pub(crate) store: u64,
    /// The addresses it is mapped at, the first holding its bytes (none: `store` does).
    pub(crate) mapped_at: Vec<u64>,
}
