//! [`Model`]: the reference the plugin is held to — which device addresses are live, which
//! were freed and on what stream, and the manager's lifecycle — in the manner of rlsf's
//! shadow allocator: a `BTreeMap` from base address to [`Region`].

use std::collections::BTreeMap;

use emm_core::StreamId;

/// What the model knows of one range of device addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Region {
    /// Handed out and not yet freed.
    Live {
        /// One past the last byte.
        end: u64,
        /// The buffer (allocation) of the suite that holds it.
        buffer: u32,
        /// The stream it was allocated for (`None`: `memalloc`, every stream).
        stream: Option<StreamId>,
    },
    /// Freed by the suite; the plugin may hand it out again.
    Freed {
        /// One past the last byte.
        end: u64,
        /// The buffer it belonged to.
        buffer: u32,
        /// The stream it was freed on, its last use ordered there (`None`: freed after the host
        /// waited for its last use, so reusable on every stream at once).
        stream: Option<StreamId>,
        /// The step of the case that freed it.
        step: usize,
    },
}

impl Region {
    fn end(&self) -> u64 {
        match *self {
            Region::Live { end, .. } | Region::Freed { end, .. } => end,
        }
    }
}

/// A live region that a new allocation overlaps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overlap {
    /// The live region's base.
    pub base: u64,
    /// One past its last byte.
    pub end: u64,
    /// The buffer that holds it.
    pub buffer: u32,
}

/// The reference model of one case.
#[derive(Debug, Default)]
pub struct Model {
    regions: BTreeMap<u64, Region>,
    /// Whether `initialize` has run.
    pub initialized: bool,
    /// The last request that ran out of memory although it fits the device, if any.
    pub last_oom: Option<usize>,
}

/// Freed regions kept for messages; older ones are forgotten.
const FREED_KEPT: usize = 256;

impl Model {
    /// An empty model: nothing live, not initialized.
    pub fn new() -> Self {
        Model::default()
    }

    /// The first live region overlapping `[base, base + len)`, if any.
    ///
    /// # Time complexity
    ///
    /// O(log n + k) for k regions inside the range (freed ones included).
    pub fn overlapping(&self, base: u64, len: u64) -> Option<Overlap> {
        let end = base.saturating_add(len.max(1));
        let before = self.regions.range(..base).next_back();
        let inside = self.regions.range(base..end);
        before
            .into_iter()
            .chain(inside)
            .filter(|(&b, r)| b < end && r.end() > base)
            .find_map(|(&b, r)| match *r {
                Region::Live { end, buffer, .. } => Some(Overlap {
                    base: b,
                    end,
                    buffer,
                }),
                Region::Freed { .. } => None,
            })
    }

    /// The freed region a new allocation at `base` reuses, if any (for messages).
    pub fn reused(&self, base: u64) -> Option<Region> {
        self.regions
            .range(..=base)
            .next_back()
            .filter(|(_, r)| r.end() > base)
            .map(|(_, r)| *r)
            .filter(|r| matches!(r, Region::Freed { .. }))
    }

    /// Records `[base, base + len)` as live for `buffer`. Freed regions it covers are
    /// forgotten; the caller has checked it overlaps no live one.
    pub fn insert_live(&mut self, base: u64, len: u64, buffer: u32, stream: Option<StreamId>) {
        let end = base.saturating_add(len.max(1));
        let stale: Vec<u64> = self
            .regions
            .range(..end)
            .rev()
            .take_while(|(_, r)| r.end() > base)
            .map(|(&b, _)| b)
            .collect();
        for b in stale {
            self.regions.remove(&b);
        }
        self.regions.insert(
            base,
            Region::Live {
                end,
                buffer,
                stream,
            },
        );
    }

    /// Marks the live region at `base` freed at `step`, its last use ordered on `stream`.
    pub fn free(&mut self, base: u64, stream: Option<StreamId>, step: usize) {
        if let Some(r) = self.regions.get_mut(&base) {
            if let Region::Live { end, buffer, .. } = *r {
                *r = Region::Freed {
                    end,
                    buffer,
                    stream,
                    step,
                };
            }
        }
        if self.regions.len() > FREED_KEPT {
            let oldest = self
                .regions
                .iter()
                .find(|(_, r)| matches!(r, Region::Freed { .. }))
                .map(|(&b, _)| b);
            if let Some(b) = oldest {
                self.regions.remove(&b);
            }
        }
    }

    /// Number of live regions.
    pub fn live(&self) -> usize {
        self.regions
            .values()
            .filter(|r| matches!(r, Region::Live { .. }))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlaps_are_found_on_both_sides_and_freed_regions_may_be_reused() {
        let mut m = Model::new();
        m.insert_live(1000, 100, 1, None);
        m.insert_live(1100, 100, 2, None);
        assert_eq!(m.overlapping(900, 100), None, "ends where it starts");
        assert_eq!(m.overlapping(1099, 1).map(|o| o.buffer), Some(1));
        assert_eq!(m.overlapping(950, 1000).map(|o| o.buffer), Some(1));
        assert_eq!(m.overlapping(1150, 10).map(|o| o.buffer), Some(2));
        m.free(1000, Some(StreamId(3)), 7);
        assert_eq!(m.overlapping(1000, 100), None);
        assert!(matches!(
            m.reused(1050),
            Some(Region::Freed { step: 7, .. })
        ));
        m.insert_live(1000, 64, 3, Some(StreamId(1)));
        assert_eq!(m.reused(1050), None, "a reuse forgets the freed region");
        assert_eq!(m.live(), 2);
    }
}
