//! [`LiveTable`]: one device's live allocations made through the C ABI, by address, with the
//! statistics `emm_stats_json` reports. Each entry keeps the context that made it, so memory
//! made before an `emm_configure` is still freed by the manager that made it.
//!
//! Every allocation and free of PyTorch's and CuPy's hooks looks its address up here, so the
//! table is a hash map by exact address: a B-tree's insert and remove, with the range search
//! that only an address *inside* an allocation needs, were about a fifth of the C ABI's
//! instructions for an allocation and its free. An inside address (an IPC handle or a managed
//! range given by an interior pointer, the hint of an error message) is found by a scan.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use emm_core::contract::{Context, ManagedMemory, MemoryPointer};
use emm_core::Driver;
use serde::Serialize;

/// The context type of the C ABI: one per device, over the process's `dyn Driver`.
pub(crate) type Ctx = Context<Arc<dyn Driver>>;

/// One live allocation.
pub(crate) enum Live {
    /// Device memory; `ordered` when it came from `memalloc_async`.
    Device {
        memory: MemoryPointer,
        ordered: bool,
        context: Arc<Ctx>,
    },
    /// Managed memory; the context is held so that its manager outlives the memory.
    Managed {
        memory: ManagedMemory,
        _context: Arc<Ctx>,
    },
}

impl Live {
    /// Its size in bytes.
    pub(crate) fn size(&self) -> usize {
        match self {
            Live::Device { memory, .. } => memory.size(),
            Live::Managed { memory, .. } => memory.size(),
        }
    }
}

/// Bytes and allocations through the C ABI on one device (RMM's statistics adaptor's figures).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Stats {
    /// Bytes live now.
    pub current_bytes: u64,
    /// The most bytes live at once.
    pub peak_bytes: u64,
    /// Bytes ever allocated.
    pub total_bytes: u64,
    /// Allocations live now.
    pub current_allocations: u64,
    /// The most allocations live at once.
    pub peak_allocations: u64,
    /// Allocations ever made.
    pub total_allocations: u64,
}

/// Live allocations by address, and their statistics.
#[derive(Default)]
pub(crate) struct LiveTable {
    entries: HashMap<u64, Live, BuildHasherDefault<AddressHasher>>,
    stats: Stats,
}

impl LiveTable {
    /// Records `live` at `addr`.
    ///
    /// # Time complexity
    ///
    /// O(1) expected.
    pub(crate) fn insert(&mut self, addr: u64, live: Live) {
        let bytes = live.size() as u64;
        let s = &mut self.stats;
        s.current_bytes += bytes;
        s.total_bytes += bytes;
        s.current_allocations += 1;
        s.total_allocations += 1;
        s.peak_bytes = s.peak_bytes.max(s.current_bytes);
        s.peak_allocations = s.peak_allocations.max(s.current_allocations);
        // An address the driver hands out twice while live would be a driver bug; the old
        // entry's memory then goes back through its own finalizer rather than leak.
        if let Some(old) = self.entries.insert(addr, live) {
            self.forget(old.size() as u64);
        }
    }

    /// Whether an allocation starts at exactly `addr`.
    ///
    /// # Time complexity
    ///
    /// O(1) expected.
    pub(crate) fn starts_at(&self, addr: u64) -> bool {
        self.entries.contains_key(&addr)
    }

    /// Takes the allocation at exactly `addr` out of the table.
    ///
    /// # Time complexity
    ///
    /// O(1) expected.
    pub(crate) fn remove(&mut self, addr: u64) -> Option<Live> {
        let live = self.entries.remove(&addr)?;
        self.forget(live.size() as u64);
        Some(live)
    }

    fn forget(&mut self, bytes: u64) {
        let s = &mut self.stats;
        s.current_bytes = s.current_bytes.saturating_sub(bytes);
        s.current_allocations = s.current_allocations.saturating_sub(1);
    }

    /// The allocation holding `addr` (its base address and entry), if any.
    ///
    /// # Time complexity
    ///
    /// O(1) expected for an allocation's own address; O(n) in the live allocations for an
    /// address inside one.
    pub(crate) fn containing(&self, addr: u64) -> Option<(u64, &Live)> {
        if let Some(live) = self.entries.get(&addr) {
            return Some((addr, live));
        }
        self.entries
            .iter()
            .find(|(&base, live)| addr > base && addr - base < live.size() as u64)
            .map(|(&base, live)| (base, live))
    }

    /// The statistics.
    pub(crate) fn stats(&self) -> Stats {
        self.stats
    }

    /// Forgets the peaks: they restart from what is live now.
    pub(crate) fn reset_peaks(&mut self) {
        self.stats.peak_bytes = self.stats.current_bytes;
        self.stats.peak_allocations = self.stats.current_allocations;
    }
}

/// Hashes a device address: allocations are 256-byte aligned and cluster in a few ranges, so
/// the address is multiplied by an odd constant and folded, spreading its middle bits into the
/// low bits a hash table indexes by (std's SipHash would cost more than the lookup).
#[derive(Default)]
pub(crate) struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        let x = n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = x ^ (x >> 29);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn aligned_addresses_spread_over_the_low_bits() {
        let h = BuildHasherDefault::<AddressHasher>::default();
        let base = 0x7f00_0000_0000u64;
        let buckets: std::collections::BTreeSet<u64> = (0..1024u64)
            .map(|k| h.hash_one(base + k * 256) & 1023)
            .collect();
        // A hash that kept the zero low bits of aligned addresses would fill 4 of 1024.
        assert!(buckets.len() > 600, "{} buckets of 1024", buckets.len());
    }
}
