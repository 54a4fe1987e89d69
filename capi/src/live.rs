//! [`LiveTable`]: one device's live allocations made through the C ABI, by address, with the
//! statistics `emm_stats_json` reports. Each entry keeps the context that made it, so memory
//! made before an `emm_configure` is still freed by the manager that made it.

use std::collections::BTreeMap;
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
    entries: BTreeMap<u64, Live>,
    stats: Stats,
}

impl LiveTable {
    /// Records `live` at `addr`.
    ///
    /// # Time complexity
    ///
    /// O(log n) in the live allocations.
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

    /// Takes the allocation at exactly `addr` out of the table.
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
    pub(crate) fn containing(&self, addr: u64) -> Option<(u64, &Live)> {
        let (&base, live) = self.entries.range(..=addr).next_back()?;
        (addr < base.saturating_add(live.size() as u64)).then_some((base, live))
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
