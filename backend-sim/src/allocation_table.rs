//! [`AllocationTable`]: every allocation of the machine, an owned part of the state: the live
//! ones by base address (device, pool, managed, host, IPC aliases, reservations, each with its
//! per-kind part and the accesses remembered for race detection) and the recently freed ones,
//! to tell a use after free or a double free from a wild access. The device and host byte
//! accounting, the contents and the checks' errors stay with the state.

use std::collections::BTreeMap;
use std::ops::Index;

use emm_core::HostAllocFlags;

use crate::clock::{Actor, VClock};
use crate::managed_range::ManagedRange;
use crate::reservation::Reservation;

/// How many freed allocations are remembered to tell a double free from a wild one.
const FREED_MEMORY: usize = 1 << 16;
/// Accesses remembered per allocation for race detection.
const ACCESS_MEMORY: usize = 256;

/// What kind of memory an allocation is; it also holds the per-kind part (a managed range, a
/// reservation).
#[derive(Debug)]
pub(crate) enum AllocKind {
    /// `cuMemAlloc`.
    Device { device: u32 },
    /// A stream-ordered allocation from a driver pool.
    PoolBlock { device: u32, pool: u64 },
    /// `cuMemAllocManaged`.
    Managed(Box<ManagedRange>),
    /// `cuMemHostAlloc`.
    Pinned { flags: HostAllocFlags },
    /// `malloc`.
    Pageable,
    /// An IPC handle opened in this process, aliasing `target`.
    IpcAlias { target: u64, serial: u64 },
    /// A virtual address reservation (`cuMemAddressReserve`) and what is mapped in it.
    Reserved(Box<Reservation>),
}

impl AllocKind {
    /// What the memory is, for messages.
    pub(crate) fn describe(&self) -> &'static str {
        match self {
            AllocKind::Device { .. } => "device memory from cuMemAlloc",
            AllocKind::PoolBlock { .. } => "stream-ordered memory from cuMemAllocAsync",
            AllocKind::Managed(_) => "managed memory",
            AllocKind::Pinned { .. } => "pinned host memory",
            AllocKind::Pageable => "pageable host memory",
            AllocKind::IpcAlias { .. } => "an opened IPC mapping",
            AllocKind::Reserved(_) => "a virtual address reservation from cuMemAddressReserve",
        }
    }
}

/// One access remembered for race detection.
#[derive(Debug, Clone)]
pub(crate) struct Access {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) actor: Actor,
    pub(crate) epoch: u64,
    pub(crate) write: bool,
    pub(crate) op: &'static str,
}

/// A live allocation.
#[derive(Debug)]
pub(crate) struct Alloc {
    /// Bytes asked for: accesses past them are out of bounds.
    pub(crate) size: u64,
    /// Bytes accounted against the device or host (rounded).
    pub(crate) reserved: u64,
    pub(crate) kind: AllocKind,
    pub(crate) process: u32,
    pub(crate) serial: u64,
    /// The caller tag of the call that made it, for leak reports.
    pub(crate) caller: &'static str,
    /// Recent accesses not superseded by a later ordered one, oldest first (at most
    /// [`ACCESS_MEMORY`], or sixteen times that for a reservation).
    pub(crate) accesses: Vec<Access>,
}

impl Alloc {
    /// Remembers `access` and returns the first earlier access it races with, if any: one by
    /// another actor, overlapping it, either a write, and not ordered before it by `clock` (the
    /// accessor's vector clock). Returns the first byte both touch, the earlier actor and its
    /// operation.
    pub(crate) fn record_access(
        &mut self,
        access: Access,
        clock: &VClock,
    ) -> Option<(u64, Actor, &'static str)> {
        let Access {
            start,
            end,
            actor,
            write,
            ..
        } = access;
        let mut race = None;
        for a in &self.accesses {
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
        self.accesses.retain(|a| {
            !(a.start >= start
                && a.end <= end
                && (write || !a.write)
                && (a.actor == actor || clock.has_seen(a.actor, a.epoch)))
        });
        if self.accesses.len() >= self.access_memory() {
            self.accesses.remove(0);
        }
        self.accesses.push(access);
        race
    }

    /// The remembered accesses to `from..from + len`, as if made to `to..to + len`.
    pub(crate) fn accesses_moved(&self, from: u64, to: u64, len: u64) -> Vec<Access> {
        self.accesses
            .iter()
            .filter(|a| a.start < from + len && from < a.end)
            .map(|a| Access {
                start: a.start.max(from) - from + to,
                end: a.end.min(from + len) - from + to,
                ..a.clone()
            })
            .collect()
    }

    /// Remembers `seen` as earlier accesses (the oldest forgotten past the bound).
    pub(crate) fn remember(&mut self, seen: Vec<Access>) {
        self.accesses.extend(seen);
        let over = self.accesses.len().saturating_sub(self.access_memory());
        self.accesses.drain(..over);
    }

    /// How many accesses it remembers: a reservation is one allocation for a whole pool, and
    /// remembers more.
    fn access_memory(&self) -> usize {
        match self.kind {
            AllocKind::Reserved(_) => 16 * ACCESS_MEMORY,
            _ => ACCESS_MEMORY,
        }
    }
}

/// The live allocations by base address, and the recently freed ones.
///
/// Invariants: live allocations never overlap (each spans `size.max(1)` bytes from its base);
/// `freed` holds at most [`FREED_MEMORY`] entries, the oldest forgotten first.
#[derive(Debug, Default)]
pub(crate) struct AllocationTable {
    live: BTreeMap<u64, Alloc>,
    /// Recently freed allocations: base → size.
    freed: BTreeMap<u64, u64>,
}

impl AllocationTable {
    /// The live allocation at `base`.
    #[inline]
    pub(crate) fn get(&self, base: u64) -> Option<&Alloc> {
        self.live.get(&base)
    }

    /// The live allocation at `base`, mutably.
    #[inline]
    pub(crate) fn get_mut(&mut self, base: u64) -> Option<&mut Alloc> {
        self.live.get_mut(&base)
    }

    /// Adds a live allocation at `base`; the caller took fresh addresses for it.
    pub(crate) fn insert(&mut self, base: u64, alloc: Alloc) {
        self.live.insert(base, alloc);
    }

    /// Forgets the live allocation at `base`, returning it.
    pub(crate) fn remove(&mut self, base: u64) -> Option<Alloc> {
        self.live.remove(&base)
    }

    /// Every live allocation, by base.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, &Alloc)> {
        self.live.iter().map(|(&b, a)| (b, a))
    }

    /// The live allocation containing `addr`.
    #[inline]
    pub(crate) fn containing(&self, addr: u64) -> Option<(u64, &Alloc)> {
        let (&base, a) = self.live.range(..=addr).next_back()?;
        (addr < base + a.size.max(1)).then_some((base, a))
    }

    /// Remembers `size` bytes at `base` as freed.
    pub(crate) fn record_freed(&mut self, base: u64, size: u64) {
        self.freed.insert(base, size);
        if self.freed.len() > FREED_MEMORY {
            self.freed.pop_first();
        }
    }

    /// Whether a recently freed allocation started at `base`.
    pub(crate) fn was_freed_at(&self, base: u64) -> bool {
        self.freed.contains_key(&base)
    }

    /// Whether `addr` lies in a recently freed allocation.
    pub(crate) fn was_freed(&self, addr: u64) -> bool {
        self.freed
            .range(..=addr)
            .next_back()
            .is_some_and(|(&b, &n)| addr < b + n)
    }

    /// The managed part of the allocation at `base`, if it is managed memory.
    #[inline]
    pub(crate) fn managed(&self, base: u64) -> Option<&ManagedRange> {
        match &self.live.get(&base)?.kind {
            AllocKind::Managed(r) => Some(r),
            _ => None,
        }
    }

    /// The managed part of the allocation at `base`, mutably.
    #[inline]
    pub(crate) fn managed_mut(&mut self, base: u64) -> Option<&mut ManagedRange> {
        match &mut self.live.get_mut(&base)?.kind {
            AllocKind::Managed(r) => Some(r),
            _ => None,
        }
    }

    /// The reservation at `base`.
    #[inline]
    pub(crate) fn reservation(&self, base: u64) -> Option<&Reservation> {
        match &self.live.get(&base)?.kind {
            AllocKind::Reserved(r) => Some(r),
            _ => None,
        }
    }

    /// The reservation at `base`, mutably.
    #[inline]
    pub(crate) fn reservation_mut(&mut self, base: u64) -> Option<&mut Reservation> {
        match &mut self.live.get_mut(&base)?.kind {
            AllocKind::Reserved(r) => Some(r),
            _ => None,
        }
    }
}

/// The live allocation at `base`; the caller looked it up, so it is live.
impl Index<u64> for AllocationTable {
    type Output = Alloc;

    #[inline]
    fn index(&self, base: u64) -> &Alloc {
        &self.live[&base]
    }
}
