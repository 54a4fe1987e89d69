//! [`ManagedRange`]: what one managed allocation holds beside its bytes: where each page lives,
//! the read-only copies, and the advice in force over byte ranges (the last covering entry
//! wins). The operations that migrate pages are in `managed`.

use std::collections::BTreeMap;

use emm_core::Location;

/// Advice over a byte range of a managed allocation; the last covering entry wins.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span<T> {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) value: T,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Page {
    pub(crate) loc: Location,
    pub(crate) tick: u64,
    /// Processors holding a read-only copy (bit 0: host, bit d+1: device d).
    pub(crate) copies: u32,
}

/// The managed part of an allocation.
#[derive(Debug, Default)]
pub(crate) struct ManagedRange {
    pub(crate) attach_global: bool,
    pub(crate) pages: BTreeMap<u64, Page>,
    pub(crate) preferred: Vec<Span<Option<Location>>>,
    pub(crate) accessed_by: Vec<Span<(Location, bool)>>,
    pub(crate) read_mostly: Vec<Span<bool>>,
}

/// The advice in force for one byte of managed memory.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ManagedAdvice {
    /// `SetPreferredLocation`, if set.
    pub preferred_location: Option<Location>,
    /// Processors with `SetAccessedBy`.
    pub accessed_by: Vec<Location>,
    /// `SetReadMostly`.
    pub read_mostly: bool,
    /// Allocated with `CU_MEM_ATTACH_GLOBAL` (else `CU_MEM_ATTACH_HOST`).
    pub attach_global: bool,
}

pub(crate) fn last<T: Copy>(spans: &[Span<T>], off: u64) -> Option<T> {
    spans
        .iter()
        .rev()
        .find(|s| s.start <= off && off < s.end)
        .map(|s| s.value)
}

pub(crate) fn copy_bit(loc: Location) -> u32 {
    match loc {
        Location::Host => 1,
        Location::Device(d) => 1 << ((d.0 + 1) % 32),
    }
}

impl ManagedRange {
    pub(crate) fn advice_at(&self, off: u64) -> ManagedAdvice {
        let mut accessed_by: Vec<Location> = Vec::new();
        for s in self
            .accessed_by
            .iter()
            .filter(|s| s.start <= off && off < s.end)
        {
            let (loc, set) = s.value;
            accessed_by.retain(|l| *l != loc);
            if set {
                accessed_by.push(loc);
            }
        }
        accessed_by.sort();
        ManagedAdvice {
            preferred_location: last(&self.preferred, off).flatten(),
            accessed_by,
            read_mostly: last(&self.read_mostly, off).unwrap_or(false),
            attach_global: self.attach_global,
        }
    }
}
