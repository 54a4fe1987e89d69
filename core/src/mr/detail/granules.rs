//! [`GranuleMap`]: which granules of an expandable segment are mapped, and by which physical
//! handle; [`TrimPolicy`]: how much free memory the segment unmaps before it maps more.
//!
//! Physical memory follows live blocks, not the address range: a free block that wholly
//! covers mapped handles in the middle of the segment has them unmapped and released, and an
//! allocation landing there maps fresh ones. `cuMemUnmap` takes whole mappings, so the handle
//! size bounds what can go back: a mapping is made of handles of one granule, or of
//! 1/[`HANDLES_PER_GROWTH`] of it when that is more (mapping 78 GB one 2 MiB granule at a
//! time took seconds of driver calls). Handles of 1/16 of a mapping held 1.069 × peak live on
//! the fine-tuning trace, against 1.011 with 1/64, for half the driver calls.

use std::collections::BTreeMap;

use crate::driver::PhysHandle;

/// A growth maps at most this many handles (more granules each when it is large).
pub(crate) const HANDLES_PER_GROWTH: u64 = 64;

/// The bytes of each handle a mapping of `bytes` (a multiple of `granule`) is made of.
pub(crate) fn handle_bytes(bytes: u64, granule: u64) -> u64 {
    bytes.div_ceil(HANDLES_PER_GROWTH).div_ceil(granule).max(1) * granule
}

/// The mapped handles of a segment, by address.
#[derive(Debug, Default)]
pub(crate) struct GranuleMap {
    /// First address → the handle mapped there and its bytes.
    maps: BTreeMap<u64, (PhysHandle, u64)>,
    /// The sum of the handles' bytes.
    mapped: u64,
}

impl GranuleMap {
    /// Bytes mapped.
    pub(crate) fn mapped(&self) -> u64 {
        self.mapped
    }

    /// Records `handle` of `bytes` mapped at `at`.
    pub(crate) fn insert(&mut self, at: u64, handle: PhysHandle, bytes: u64) {
        debug_assert!(!self.overlaps(at, at + bytes));
        self.maps.insert(at, (handle, bytes));
        self.mapped += bytes;
    }

    /// Forgets the handle mapped at `at`, returning it and its bytes.
    pub(crate) fn remove(&mut self, at: u64) -> Option<(PhysHandle, u64)> {
        let m = self.maps.remove(&at)?;
        self.mapped -= m.1;
        Some(m)
    }

    /// The handles wholly inside `lo..hi`, `(address, handle, bytes)` in address order.
    ///
    /// # Time complexity
    ///
    /// O(log handles + handles returned).
    pub(crate) fn inside(&self, lo: u64, hi: u64) -> Vec<(u64, PhysHandle, u64)> {
        self.maps
            .range(lo..hi)
            .filter(|(&at, &(_, n))| at + n <= hi)
            .map(|(&at, &(h, n))| (at, h, n))
            .collect()
    }

    /// The longest run of contiguous handles wholly inside `lo..hi`: `(start, end)`.
    ///
    /// # Time complexity
    ///
    /// O(log handles + handles in the range).
    pub(crate) fn whole_run(&self, lo: u64, hi: u64) -> Option<(u64, u64)> {
        let mut best: Option<(u64, u64)> = None;
        let mut cur: Option<(u64, u64)> = None;
        for (&at, &(_, n)) in self.maps.range(lo..hi) {
            if at + n > hi {
                break;
            }
            cur = match cur {
                Some((s, e)) if e == at => Some((s, at + n)),
                _ => Some((at, at + n)),
            };
            if let Some((s, e)) = cur {
                if best.is_none_or(|(bs, be)| e - s > be - bs) {
                    best = Some((s, e));
                }
            }
        }
        best
    }

    /// The first mapped address in `lo..hi`, if any byte there is mapped.
    pub(crate) fn first_mapped(&self, lo: u64, hi: u64) -> Option<u64> {
        if let Some((&at, &(_, n))) = self.maps.range(..lo).next_back() {
            if at + n > lo {
                return Some(lo);
            }
        }
        self.maps.range(lo..hi).next().map(|(&at, _)| at)
    }

    /// Whether any byte of `lo..hi` is mapped.
    pub(crate) fn overlaps(&self, lo: u64, hi: u64) -> bool {
        self.first_mapped(lo, hi).is_some()
    }

    /// Takes every handle out, last first.
    pub(crate) fn drain_from_top(&mut self) -> Vec<(u64, PhysHandle, u64)> {
        let all = std::mem::take(&mut self.maps);
        self.mapped = 0;
        all.into_iter()
            .rev()
            .map(|(at, (h, n))| (at, h, n))
            .collect()
    }
}

/// How much free memory a segment gives back before it maps more.
///
/// Held memory grows only where the segment maps, and its peak is what a program pays for. So
/// the segment gives back only what mapping would otherwise take past the most it ever had
/// mapped (its mark), or past the most live bytes seen and a slack: below that it maps without
/// looking, where a segment that gave back every free handle unmapped and mapped again in
/// every step of a steady loop.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TrimPolicy {
    /// Whether free memory goes back before mapping (else only when the device is short).
    pub(crate) gives_back: bool,
    /// The slack over the most live bytes seen that mapping may take without giving back, in
    /// parts per thousand.
    pub(crate) slack_permille: u64,
    /// The most bytes ever mapped.
    mark: u64,
    /// The most live bytes seen.
    live_peak: u64,
}

impl TrimPolicy {
    /// The policy, with `slack_permille` / 1000 of live bytes as slack.
    pub(crate) const fn new(slack_permille: u64) -> Self {
        TrimPolicy {
            gives_back: true,
            slack_permille,
            mark: 0,
            live_peak: 0,
        }
    }

    /// The policy of a segment that gives back nothing before it maps (only when the device
    /// is short).
    pub(crate) const fn keeping(mut self) -> Self {
        self.gives_back = false;
        self
    }

    /// Bytes to give back before mapping `need` more to `mapped`, with `live` bytes live
    /// once the request is served (seen only once it is: [`TrimPolicy::served`]).
    pub(crate) fn excess(&self, mapped: u64, need: u64, live: u64) -> u64 {
        if !self.gives_back {
            return 0;
        }
        mapped
            .saturating_add(need)
            .saturating_sub(self.limit_with(self.live_peak.max(live)))
    }

    /// Notes `live` bytes live after a request was served. A request that failed is not
    /// noted: a refused 139 GiB request would otherwise raise the limit for good.
    pub(crate) fn served(&mut self, live: u64) {
        self.live_peak = self.live_peak.max(live);
    }

    /// What the segment may hold without giving back: the most it ever had mapped, or the
    /// most live bytes seen and the slack.
    pub(crate) fn limit(&self) -> u64 {
        self.limit_with(self.live_peak)
    }

    fn limit_with(&self, peak: u64) -> u64 {
        self.mark
            .max(peak.saturating_add(peak / 1000 * self.slack_permille))
    }

    /// Notes `mapped` bytes mapped.
    pub(crate) fn mapped(&mut self, mapped: u64) {
        self.mark = self.mark.max(mapped);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 2 << 20;

    fn map(ranges: &[(u64, u64)]) -> GranuleMap {
        let mut m = GranuleMap::default();
        for (k, &(at, n)) in ranges.iter().enumerate() {
            m.insert(at, PhysHandle(k as u64), n);
        }
        m
    }

    #[test]
    fn handles_are_granules_for_small_growths_and_64_at_most_for_large() {
        assert_eq!(handle_bytes(G, G), G);
        assert_eq!(handle_bytes(64 * G, G), G);
        assert_eq!(handle_bytes(65 * G, G), 2 * G);
        assert_eq!(handle_bytes(1 << 40, G), (1 << 40) / 64);
    }

    #[test]
    fn whole_runs_take_only_handles_wholly_inside() {
        let m = map(&[(0, G), (G, 4 * G), (5 * G, G), (6 * G, G), (9 * G, G)]);
        assert_eq!(m.mapped(), 8 * G);
        assert_eq!(m.whole_run(G / 2, 7 * G), Some((G, 7 * G)));
        assert_eq!(m.whole_run(G / 2, 4 * G), None, "the big handle sticks out");
        assert_eq!(m.whole_run(2 * G, 7 * G), Some((5 * G, 7 * G)));
        assert_eq!(
            m.whole_run(5 * G, 10 * G),
            Some((5 * G, 7 * G)),
            "the longest contiguous run"
        );
        assert_eq!(m.inside(5 * G, 10 * G).len(), 3);
        assert!(m.overlaps(3 * G, 3 * G + 1), "inside a handle");
        assert!(!m.overlaps(7 * G, 9 * G), "a gap");
        assert_eq!(m.first_mapped(7 * G, 10 * G), Some(9 * G));
    }

    #[test]
    fn the_policy_gives_back_only_what_mapping_would_take_past_the_mark() {
        let mut p = TrimPolicy::new(10);
        // Growing: 1 % over the most live bytes maps without giving back.
        assert_eq!(p.excess(0, 1011 * G, 1000 * G), G);
        assert_eq!(p.excess(0, 1010 * G, 1000 * G), 0);
        // A request that failed is not seen: the limit stays where served requests put it.
        assert_eq!(p.excess(0, 1010 * G, 1000 * G), 0);
        assert_eq!(p.limit(), 0);
        p.served(1000 * G);
        p.mapped(1100 * G);
        // Below the mark (or the live peak and its slack), nothing: that much was held.
        assert_eq!(p.excess(1000 * G, 100 * G, 500 * G), 0);
        assert_eq!(p.excess(1000 * G, 150 * G, 500 * G), 50 * G);
        p.mapped(1050 * G);
        assert_eq!(
            p.excess(1000 * G, 150 * G, 500 * G),
            50 * G,
            "the mark stays"
        );
        assert_eq!(p.excess(1000 * G, 150 * G, 2000 * G), 0, "a new live peak");
    }
}
