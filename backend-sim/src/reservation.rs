//! [`Reservation`]: what is mapped in one address reservation, and the check every
//! device-side access to a reservation goes through: each byte mapped, with access granted.

use std::collections::BTreeMap;

use emm_core::{CudaCode, DriverResult};

use crate::report::Violation;
use crate::state::{Kind, State};

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

    fn was_unmapped(&self, addr: u64) -> bool {
        self.unmapped
            .range(..=addr)
            .next_back()
            .is_some_and(|(&b, &n)| addr < b + n)
    }
}

impl State {
    /// The reservation at `base`, mutably.
    pub(crate) fn reservation_mut(&mut self, base: u64) -> Option<&mut Reservation> {
        match self.allocs.get_mut(&base).map(|a| &mut a.kind) {
            Some(Kind::Reserved(r)) => Some(r),
            _ => None,
        }
    }

    /// The reservation at `base`.
    pub(crate) fn reservation(&self, base: u64) -> Option<&Reservation> {
        match self.allocs.get(&base).map(|a| &a.kind) {
            Some(Kind::Reserved(r)) => Some(r),
            _ => None,
        }
    }

    /// Checks a device-side access of `len` bytes at `addr` in the reservation at `base`:
    /// every byte mapped, and access granted (to `device`, when the access is a kernel's).
    pub(crate) fn check_mapped(
        &mut self,
        base: u64,
        addr: u64,
        len: u64,
        device: Option<u32>,
    ) -> DriverResult<()> {
        let Some(r) = self.reservation(base) else {
            return Ok(());
        };
        let mut denied = None;
        let gap = r.first_gap(addr, addr + len, |b, m| {
            let ok = match device {
                Some(d) => m.access & (1 << d) != 0,
                None => m.access != 0,
            };
            if !ok {
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

    /// The mapping holding `addr` in the reservation at `base`: its address and size.
    pub(crate) fn mapping_at(&self, base: u64, addr: u64) -> Option<(u64, u64)> {
        let (&b, m) = self
            .reservation(base)?
            .mappings
            .range(..=addr)
            .next_back()?;
        (addr < b + m.size).then_some((b, m.size))
    }
}
