//! [`LiveMap`]: every live allocation of a plugin by device address — an open-addressing hash
//! table, so the checks on the allocation path cost O(1) instead of an ordered-map walk.
//!
//! Linear probing with backward-shift deletion (no tombstones, so probes never lengthen under
//! churn) and Fibonacci hashing of `addr >> 8` (the low 8 bits of a 256-aligned address carry
//! nothing). The table doubles at half full. Address [`EMPTY`] marks a free slot; a live
//! allocation at that address (no aligned allocation can start there, but the fallback resource
//! is not ours to trust) is kept beside the table.

/// A live allocation: its size as requested and where it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Live {
    /// Bytes requested.
    pub size: u64,
    /// The chunk handle, or [`FALLBACK`](crate::registry::FALLBACK) for the fallback resource.
    pub origin: u32,
}

/// The free-slot marker: odd, so no allocation aligned to 256 bytes starts there.
const EMPTY: u64 = u64::MAX;

/// Slots of a new table (a power of two).
const INITIAL_SLOTS: usize = 64;

/// One slot: the address and its allocation side by side, so a probe touches one cache line.
#[derive(Debug, Clone, Copy)]
struct Slot {
    addr: u64,
    live: Live,
}

const FREE_SLOT: Slot = Slot {
    addr: EMPTY,
    live: Live { size: 0, origin: 0 },
};

/// Live allocations by device address.
#[derive(Debug, Clone)]
pub(crate) struct LiveMap {
    slots: Vec<Slot>,
    len: usize,
    /// `64 - log2(slots)`: the shift that turns a 64-bit hash into a slot.
    shift: u32,
    /// The allocation at address [`EMPTY`], if any.
    at_empty: Option<Live>,
}

impl Default for LiveMap {
    fn default() -> Self {
        LiveMap::with_slots(INITIAL_SLOTS)
    }
}

impl LiveMap {
    fn with_slots(slots: usize) -> Self {
        LiveMap {
            slots: vec![FREE_SLOT; slots],
            len: 0,
            shift: 64 - slots.trailing_zeros(),
            at_empty: None,
        }
    }

    /// Number of live allocations.
    pub(crate) fn len(&self) -> usize {
        self.len + usize::from(self.at_empty.is_some())
    }

    #[inline]
    fn home(&self, addr: u64) -> usize {
        // The shift leaves at most log2(slots) bits: the value indexes the table.
        ((addr >> 8).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// The slot holding `addr`, if it is live. `addr` is not [`EMPTY`].
    #[inline]
    fn find(&self, addr: u64) -> Option<usize> {
        let mask = self.mask();
        let mut i = self.home(addr);
        loop {
            let slot = self.slots.get(i)?;
            if slot.addr == addr {
                return Some(i);
            }
            if slot.addr == EMPTY {
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    /// The allocation at `addr`, if one is live there.
    ///
    /// # Time complexity
    ///
    /// Expected O(1).
    #[inline]
    pub(crate) fn get(&self, addr: u64) -> Option<Live> {
        if addr == EMPTY {
            return self.at_empty;
        }
        self.find(addr)
            .and_then(|i| self.slots.get(i))
            .map(|s| s.live)
    }

    /// Records `live` at `addr`, replacing what was there.
    ///
    /// # Time complexity
    ///
    /// Expected O(1); O(len) when the table doubles (amortized O(1)).
    #[inline]
    pub(crate) fn insert(&mut self, addr: u64, live: Live) {
        if addr == EMPTY {
            self.at_empty = Some(live);
            return;
        }
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let mask = self.mask();
        let mut i = self.home(addr);
        while let Some(slot) = self.slots.get_mut(i) {
            if slot.addr == EMPTY || slot.addr == addr {
                if slot.addr == EMPTY {
                    self.len += 1;
                }
                *slot = Slot { addr, live };
                return;
            }
            i = (i + 1) & mask;
        }
    }

    /// Takes out the allocation at `addr` when `take` accepts it: `Ok` with the allocation
    /// taken, `Err` with the one `take` refused (left in place), `None` when nothing is live
    /// there. One probe serves both the check and the removal.
    ///
    /// # Time complexity
    ///
    /// Expected O(1).
    #[inline]
    pub(crate) fn remove_if(
        &mut self,
        addr: u64,
        take: impl FnOnce(&Live) -> bool,
    ) -> Option<Result<Live, Live>> {
        if addr == EMPTY {
            let live = self.at_empty?;
            if !take(&live) {
                return Some(Err(live));
            }
            self.at_empty = None;
            return Some(Ok(live));
        }
        let i = self.find(addr)?;
        let live = self.slots.get(i)?.live;
        if !take(&live) {
            return Some(Err(live));
        }
        self.remove_at(i);
        Some(Ok(live))
    }

    /// Empties slot `i`: backward-shift deletion pulls later members of its probe run into
    /// the hole, so every address stays reachable from its home slot without tombstones.
    fn remove_at(&mut self, i: usize) {
        let mask = self.mask();
        let mut hole = i;
        let mut j = (i + 1) & mask;
        while let Some(&slot) = self.slots.get(j) {
            if slot.addr == EMPTY {
                break;
            }
            let home = self.home(slot.addr);
            // `j` may move to `hole` if its home is not in the cyclic range (hole, j].
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                if let Some(h) = self.slots.get_mut(hole) {
                    *h = slot;
                }
                hole = j;
            }
            j = (j + 1) & mask;
        }
        if let Some(h) = self.slots.get_mut(hole) {
            *h = FREE_SLOT;
        }
        self.len -= 1;
    }

    /// Forgets every allocation.
    pub(crate) fn clear(&mut self) {
        *self = LiveMap::default();
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let bigger = LiveMap::with_slots(self.slots.len() * 2);
        let old = std::mem::replace(self, bigger);
        self.at_empty = old.at_empty;
        for slot in old.slots {
            if slot.addr != EMPTY {
                self.insert(slot.addr, slot.live);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn live(size: u64) -> Live {
        Live { size, origin: 1 }
    }

    #[test]
    fn behaves_as_a_map_under_churn() {
        let mut m = LiveMap::default();
        let mut model = BTreeMap::new();
        let mut x = 0x1234_5678_9abc_def1u64;
        for step in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Few distinct keys, so inserts, hits and misses all happen often.
            let addr = ((x % 4096) + 1) << 8;
            match x >> 62 {
                0 | 1 => {
                    m.insert(addr, live(step));
                    model.insert(addr, live(step));
                }
                2 => {
                    let got = m.remove_if(addr, |l| l.size % 2 == 0);
                    let want = model.get(&addr).copied().map(|l| {
                        if l.size % 2 == 0 {
                            model.remove(&addr);
                            Ok(l)
                        } else {
                            Err(l)
                        }
                    });
                    assert_eq!(got, want);
                }
                _ => assert_eq!(m.get(addr), model.get(&addr).copied()),
            }
            assert_eq!(m.len(), model.len());
        }
        for (a, l) in &model {
            assert_eq!(m.get(*a), Some(*l));
        }
    }

    #[test]
    fn the_empty_marker_address_is_an_ordinary_key() {
        let mut m = LiveMap::default();
        assert_eq!(m.get(EMPTY), None);
        m.insert(EMPTY, live(7));
        m.insert(256, live(8));
        assert_eq!((m.get(EMPTY), m.len()), (Some(live(7)), 2));
        assert_eq!(m.remove_if(EMPTY, |_| false), Some(Err(live(7))));
        assert_eq!(m.remove_if(EMPTY, |_| true), Some(Ok(live(7))));
        assert_eq!(m.remove_if(EMPTY, |_| true), None);
        assert_eq!((m.get(256), m.len()), (Some(live(8)), 1));
        m.clear();
        assert_eq!(m.len(), 0);
    }
}
