//! [`ManagedResidency`]: managed memory's machine-wide state, an owned part of the state: the
//! address range managed allocations take from, the pages resident on each device in least
//! recently used order (what oversubscription evicts first), and the counters of migrations.
//! Each page's own location and advice are in its allocation's `ManagedRange`; the operations
//! that migrate pages, which also need the allocations and the devices' accounting, are in
//! `managed`.

use std::collections::BTreeMap;

use emm_core::Location;

use crate::address_space::MANAGED_VA;

/// Counters of managed memory behaviour.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ManagedStats {
    /// Page faults that migrated a page.
    pub faults: u64,
    /// Bytes migrated to a device (faults and prefetches).
    pub migrated_to_device: u64,
    /// Bytes migrated to the host (faults, prefetches and evictions).
    pub migrated_to_host: u64,
    /// Bytes moved by prefetches.
    pub prefetched: u64,
    /// Pages evicted from a device to make room (oversubscription).
    pub evictions: u64,
    /// Accesses served remotely through a mapping instead of migrating.
    pub remote_accesses: u64,
}

/// The managed address range, the device-resident pages by recency, and the counters.
///
/// Invariant: a page is in `lru[d]` exactly when its `ManagedRange` page says it lives on
/// device `d`, under the tick stored with it; ticks only grow.
#[derive(Debug)]
pub(crate) struct ManagedResidency {
    /// The next free managed address.
    va_next: u64,
    /// Per device: the resident pages by last use (tick → (allocation base, page index)).
    lru: Vec<BTreeMap<u64, (u64, u64)>>,
    /// The tick of the latest page placement.
    tick: u64,
    /// Counters of managed memory behaviour.
    pub(crate) stats: ManagedStats,
}

impl ManagedResidency {
    /// No managed memory yet, on a machine of `devices` devices.
    pub(crate) fn new(devices: u32) -> Self {
        ManagedResidency {
            va_next: MANAGED_VA,
            lru: (0..devices).map(|_| BTreeMap::new()).collect(),
            tick: 0,
            stats: ManagedStats::default(),
        }
    }

    /// The next free managed address, for the caller to take addresses from.
    pub(crate) fn va_next(&mut self) -> &mut u64 {
        &mut self.va_next
    }

    /// Page `idx` of the allocation at `base` is placed at `loc` now; returns its tick.
    pub(crate) fn place(&mut self, loc: Location, base: u64, idx: u64) -> u64 {
        self.tick += 1;
        if let Location::Device(d) = loc {
            self.lru[d.0 as usize].insert(self.tick, (base, idx));
        }
        self.tick
    }

    /// The page placed on `device` at `tick` left it.
    pub(crate) fn forget(&mut self, device: u32, tick: u64) {
        self.lru[device as usize].remove(&tick);
    }

    /// Takes the least recently used page off `device`: its allocation base and index.
    pub(crate) fn pop_oldest(&mut self, device: u32) -> Option<(u64, u64)> {
        self.lru[device as usize].pop_first().map(|(_, page)| page)
    }

    /// The number of pages resident on `device` (0 for a device that does not exist).
    pub(crate) fn resident_pages(&self, device: u32) -> u64 {
        self.lru.get(device as usize).map_or(0, |l| l.len() as u64)
    }

    /// Counts `bytes` migrated to `to`.
    pub(crate) fn count_migration(&mut self, to: Location, bytes: u64) {
        match to {
            Location::Host => self.stats.migrated_to_host += bytes,
            Location::Device(_) => self.stats.migrated_to_device += bytes,
        }
    }
}
