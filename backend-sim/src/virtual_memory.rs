//! [`VirtualMemory`]: the machine's virtual memory management, an owned part of the state: the
//! physical memory from `cuMemCreate` by handle, the store its bytes move to while unmapped, and
//! the address range reservations (`cuMemAddressReserve`) take from. The reservations
//! themselves are allocations (`AllocKind::Reserved`), so that every access check sees them;
//! the operations, which also need the allocations, the devices and the contents, are in `vmm`.

use std::collections::BTreeMap;

use crate::address_space::{round_up, PHYS_STORE, RESERVE_SPAN, RESERVE_VA};
use crate::reservation::Phys;

/// Physical memory by handle, and the next free addresses of the store and of reservations.
///
/// Invariants: store ranges and reservation ranges are handed out once, in increasing order;
/// reservations stay inside `RESERVE_VA..RESERVE_VA + RESERVE_SPAN`.
#[derive(Debug)]
pub(crate) struct VirtualMemory {
    phys: BTreeMap<u64, Phys>,
    /// The next free address in the store of unmapped physical memory's bytes.
    store_next: u64,
    /// The next free address for reservations.
    reserve_next: u64,
}

impl Default for VirtualMemory {
    fn default() -> Self {
        VirtualMemory {
            phys: BTreeMap::new(),
            store_next: PHYS_STORE,
            reserve_next: RESERVE_VA,
        }
    }
}

impl VirtualMemory {
    /// Takes `size` bytes of reservation address space aligned to `align`, and a gap of `gap`
    /// bytes after them so that an overrun lands nowhere; `None` when the range is used up.
    pub(crate) fn take_reservation(&mut self, size: u64, align: u64, gap: u64) -> Option<u64> {
        let base = round_up(self.reserve_next, align)?;
        let end = base.checked_add(size)?.checked_add(gap)?;
        if end - RESERVE_VA > RESERVE_SPAN {
            return None;
        }
        self.reserve_next = end;
        Some(base)
    }

    /// Takes `size` bytes of the store, where unmapped physical memory keeps its bytes.
    pub(crate) fn take_store(&mut self, size: u64) -> u64 {
        let store = self.store_next;
        self.store_next += size;
        store
    }

    /// Adds physical memory `handle`.
    pub(crate) fn insert(&mut self, handle: u64, phys: Phys) {
        self.phys.insert(handle, phys);
    }

    /// Physical memory `handle`, if live.
    pub(crate) fn get(&self, handle: u64) -> Option<&Phys> {
        self.phys.get(&handle)
    }

    /// Physical memory `handle`, mutably.
    pub(crate) fn get_mut(&mut self, handle: u64) -> Option<&mut Phys> {
        self.phys.get_mut(&handle)
    }

    /// Forgets physical memory `handle`.
    pub(crate) fn remove(&mut self, handle: u64) {
        self.phys.remove(&handle);
    }

    /// Every live physical allocation, by handle.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, &Phys)> {
        self.phys.iter().map(|(&h, ph)| (h, ph))
    }
}
