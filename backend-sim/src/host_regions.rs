//! [`HostRegions`]: the host memory of the machine, a part the state owns: how much of it is
//! in use (pinned and pageable allocations together) against its size, and the ranges page-locked
//! with `cuMemHostRegister`.

use std::collections::BTreeMap;

/// A range page-locked with `cuMemHostRegister`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Registration {
    pub(crate) size: u64,
    /// Also mapped into the device address space.
    pub(crate) mapped: bool,
    pub(crate) process: u32,
}

/// Host memory in use and the registered ranges.
///
/// Invariants: `used` never exceeds `capacity`; registered ranges never overlap.
#[derive(Debug)]
pub(crate) struct HostRegions {
    capacity: u64,
    used: u64,
    /// Registered ranges by start address.
    registered: BTreeMap<u64, Registration>,
}

impl HostRegions {
    /// `capacity` bytes of host memory, none in use.
    pub(crate) fn new(capacity: u64) -> Self {
        HostRegions {
            capacity,
            used: 0,
            registered: BTreeMap::new(),
        }
    }

    /// Takes `size` bytes; `Err` with the bytes still free when they do not fit.
    pub(crate) fn reserve(&mut self, size: u64) -> Result<(), u64> {
        match self.used.checked_add(size) {
            Some(u) if u <= self.capacity => {
                self.used = u;
                Ok(())
            }
            _ => Err(self.capacity.saturating_sub(self.used)),
        }
    }

    /// Gives back `size` bytes taken with [`HostRegions::reserve`].
    pub(crate) fn give_back(&mut self, size: u64) {
        self.used -= size;
    }

    /// The bytes of host memory.
    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The start of the first registered range that starts in `start..end`.
    pub(crate) fn registered_start_in(&self, start: u64, end: u64) -> Option<u64> {
        self.registered.range(start..end).next().map(|(&s, _)| s)
    }

    /// A registered range overlapping `start..end`, as (its start, its size).
    pub(crate) fn overlapping(&self, start: u64, end: u64) -> Option<(u64, u64)> {
        self.registered
            .range(..end)
            .next_back()
            .filter(|(s, r)| **s + r.size > start)
            .map(|(&s, r)| (s, r.size))
    }

    /// Registers `r` at `start`; the caller checked it overlaps nothing.
    pub(crate) fn register(&mut self, start: u64, r: Registration) {
        debug_assert!(self.overlapping(start, start + r.size).is_none());
        self.registered.insert(start, r);
    }

    /// The range registered at `start`.
    pub(crate) fn registration(&self, start: u64) -> Option<&Registration> {
        self.registered.get(&start)
    }

    /// Forgets the range registered at `start`.
    pub(crate) fn unregister(&mut self, start: u64) {
        self.registered.remove(&start);
    }

    /// Whether `addr..addr + len` lies in one range registered as mapped.
    pub(crate) fn is_mapped(&self, addr: u64, len: u64) -> bool {
        self.registered
            .range(..=addr)
            .next_back()
            .is_some_and(|(s, r)| {
                r.mapped && addr.checked_add(len).is_some_and(|e| e <= s + r.size)
            })
    }

    /// Every registered range.
    pub(crate) fn registrations(&self) -> impl Iterator<Item = &Registration> {
        self.registered.values()
    }
}
