//! [`HostEntry`]: one piece of host memory or one pin made through the C ABI, kept by the
//! address the caller holds.
//!
//! On a GPU the manager's host memory is the caller's. The simulated GPU simulates host memory
//! too: its addresses name nothing the process can touch, and it pins only memory it handed
//! out. So that a C or Python program runs there as on a GPU, an entry on the simulator also
//! holds real memory: `emm_host_alloc` hands out real, zeroed, page-aligned memory beside the
//! simulator's allocation, and `emm_host_pin` pins a simulated stand-in as long as the caller's
//! range, leaving the caller's memory as it is. The simulator still counts, charges and checks
//! both; the caller never sees its addresses, except a mapped allocation's device pointer.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::Arc;

use emm_core::contract::HostMemory;
use emm_core::{Driver, HostPtr};

use crate::status::{CapiError, CapiResult, EmmStatus};

/// The alignment of real host memory handed out on the simulator (a page, as CUDA's).
const PAGE: usize = 4096;

/// One host allocation or pin, by the address the caller holds.
pub(crate) struct HostEntry {
    /// The manager's memory or pin. Declared first, so dropped first: a pin is undone before
    /// its stand-in is freed.
    memory: HostMemory,
    /// On the simulator, the real memory handed out in place of the simulated allocation
    /// (held for its drop).
    _real: Option<RealMemory>,
    /// On the simulator, the simulated memory pinned in place of the caller's range (held for
    /// its drop).
    _stand_in: Option<StandIn>,
}

/// Simulated pageable memory pinned in place of a caller's range; freed on drop.
struct StandIn {
    driver: Arc<dyn Driver>,
    ptr: HostPtr,
}

impl Drop for StandIn {
    fn drop(&mut self) {
        // Unpinned already (the entry's `memory` drops first); a failure leaves only
        // simulated memory behind, nothing of the caller's.
        let _ = self.driver.pageable_free(self.ptr);
    }
}

/// Zeroed, page-aligned host memory, freed on drop.
struct RealMemory {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the memory is owned like a `Box<[u8]>`; the table never reads it, only the caller.
unsafe impl Send for RealMemory {}

impl RealMemory {
    /// `size` zeroed bytes (`size` > 0).
    fn zeroed(size: usize) -> CapiResult<Self> {
        let oom = || {
            CapiError::new(
                EmmStatus::OutOfMemory,
                format!("emm_host_alloc: out of memory: the host has no {size} bytes to give"),
            )
        };
        let layout = Layout::from_size_align(size.max(1), PAGE).map_err(|_| oom())?;
        // SAFETY: the layout's size is not zero.
        let p = unsafe { alloc_zeroed(layout) };
        Ok(RealMemory {
            ptr: NonNull::new(p).ok_or_else(oom)?,
            layout,
        })
    }
}

impl Drop for RealMemory {
    fn drop(&mut self) {
        // SAFETY: allocated by `alloc_zeroed` with this layout, freed once.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

impl HostEntry {
    /// The entry of `memory` as the manager made it (on a GPU: the caller uses it as it is).
    pub(crate) fn plain(memory: HostMemory) -> Self {
        HostEntry {
            memory,
            _real: None,
            _stand_in: None,
        }
    }

    /// The entry of a simulated allocation `memory`, with real memory of its size for the
    /// caller; returns the real memory's address with it.
    ///
    /// # Errors
    ///
    /// `OutOfMemory` when the host has no memory to give.
    pub(crate) fn with_real_memory(memory: HostMemory) -> CapiResult<(u64, Self)> {
        let real = RealMemory::zeroed(memory.size())?;
        let addr = real.ptr.as_ptr() as u64;
        Ok((
            addr,
            HostEntry {
                memory,
                _real: Some(real),
                _stand_in: None,
            },
        ))
    }

    /// The entry of a pin `memory` of the simulated stand-in at `stand_in`, which the entry
    /// frees (through `driver`) when it goes.
    pub(crate) fn with_stand_in(
        memory: HostMemory,
        driver: Arc<dyn Driver>,
        stand_in: HostPtr,
    ) -> Self {
        HostEntry {
            memory,
            _real: None,
            _stand_in: Some(StandIn {
                driver,
                ptr: stand_in,
            }),
        }
    }

    /// Its size in bytes.
    pub(crate) fn size(&self) -> usize {
        self.memory.size()
    }

    /// The device address of mapped memory.
    pub(crate) fn device_ptr(&self) -> Option<emm_core::DevicePtr> {
        self.memory.device_ptr()
    }
}

/// The entry of `table` overlapping `addr..addr + size`, if any: its address.
pub(crate) fn overlapping(table: &BTreeMap<u64, HostEntry>, addr: u64, size: usize) -> Option<u64> {
    let end = addr.saturating_add(size as u64);
    table
        .range(..end)
        .next_back()
        .filter(|(base, e)| base.saturating_add(e.size() as u64) > addr)
        .map(|(base, _)| *base)
}
