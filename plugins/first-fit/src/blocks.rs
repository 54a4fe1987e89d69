//! [`FreeBlocks`]: free blocks ordered by key (`chunk << 40 | offset`), kept in groups of
//! sorted arrays with each group's largest size cached, so a first-fit search skips whole
//! groups: O(n / GROUP + GROUP) with cache-friendly scans instead of a walk over tree nodes.

use alloc::vec::Vec;

/// Entries per group after a split; a group splits above twice this.
const GROUP: usize = 32;

#[derive(Debug, Default)]
struct Group {
    keys: Vec<u64>,
    sizes: Vec<u64>,
    max: u64,
}

impl Group {
    fn recompute(&mut self) {
        self.max = self.sizes.iter().copied().max().unwrap_or(0);
    }
}

/// Free blocks by key, merged with their neighbours on insert.
#[derive(Debug, Default)]
pub struct FreeBlocks {
    // Ordered by key; never holds an empty group.
    groups: Vec<Group>,
    len: usize,
}

impl FreeBlocks {
    /// Number of free blocks.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The largest free block.
    pub fn largest(&self) -> u64 {
        self.groups.iter().map(|g| g.max).max().unwrap_or(0)
    }

    /// Takes `need` bytes from the lowest-keyed block of at least `need`; returns its key.
    #[inline]
    pub fn take_first_fit(&mut self, need: u64) -> Option<u64> {
        let gi = self.groups.iter().position(|g| g.max >= need)?;
        let g = &mut self.groups[gi];
        let i = g.sizes.iter().position(|&s| s >= need)?;
        let (key, size) = (g.keys[i], g.sizes[i]);
        if size > need {
            g.keys[i] = key + need;
            g.sizes[i] = size - need;
        } else {
            g.keys.remove(i);
            g.sizes.remove(i);
            self.len -= 1;
        }
        if size == g.max {
            g.recompute();
        }
        if g.keys.is_empty() {
            self.groups.remove(gi);
        }
        Some(key)
    }

    /// Adds the free block `[key, key + size)`, merging it with the block that ends at `key`
    /// and the one that starts at `key + size`.
    pub fn insert(&mut self, key: u64, size: u64) {
        if self.groups.is_empty() {
            self.groups.push(Group {
                keys: alloc::vec![key],
                sizes: alloc::vec![size],
                max: size,
            });
            self.len = 1;
            return;
        }
        let gi = self
            .groups
            .partition_point(|g| g.keys[0] <= key)
            .saturating_sub(1);
        let i = self.groups[gi].keys.partition_point(|&k| k <= key);
        let prev = i > 0 && {
            let g = &self.groups[gi];
            g.keys[i - 1] + g.sizes[i - 1] == key
        };
        let (sg, si) = if i < self.groups[gi].keys.len() {
            (gi, i)
        } else {
            (gi + 1, 0)
        };
        let next = sg < self.groups.len() && self.groups[sg].keys[si] == key + size;
        match (prev, next) {
            (true, false) => {
                let g = &mut self.groups[gi];
                g.sizes[i - 1] += size;
                g.max = g.max.max(g.sizes[i - 1]);
            }
            (false, true) => {
                let g = &mut self.groups[sg];
                g.keys[si] = key;
                g.sizes[si] += size;
                g.max = g.max.max(g.sizes[si]);
            }
            (true, true) => {
                let next_size = self.remove_at(sg, si);
                let g = &mut self.groups[gi];
                g.sizes[i - 1] += size + next_size;
                g.max = g.max.max(g.sizes[i - 1]);
            }
            (false, false) => {
                let g = &mut self.groups[gi];
                g.keys.insert(i, key);
                g.sizes.insert(i, size);
                g.max = g.max.max(size);
                self.len += 1;
                if g.keys.len() > 2 * GROUP {
                    let mut upper = Group {
                        keys: g.keys.split_off(GROUP),
                        sizes: g.sizes.split_off(GROUP),
                        max: 0,
                    };
                    upper.recompute();
                    g.recompute();
                    self.groups.insert(gi + 1, upper);
                }
            }
        }
    }

    /// Removes entry `i` of group `gi` (dropping the group when it empties); returns its size.
    fn remove_at(&mut self, gi: usize, i: usize) -> u64 {
        let g = &mut self.groups[gi];
        g.keys.remove(i);
        let size = g.sizes.remove(i);
        if size == g.max {
            g.recompute();
        }
        if g.keys.is_empty() {
            self.groups.remove(gi);
        }
        self.len -= 1;
        size
    }

    fn find(&self, key: u64) -> Option<(usize, usize)> {
        let gi = self
            .groups
            .partition_point(|g| g.keys[0] <= key)
            .checked_sub(1)?;
        let i = self.groups[gi].keys.binary_search(&key).ok()?;
        Some((gi, i))
    }

    /// The size of the free block at `key`, if one starts there.
    pub fn get(&self, key: u64) -> Option<u64> {
        self.find(key).map(|(gi, i)| self.groups[gi].sizes[i])
    }

    /// Removes the free block at `key`; returns its size.
    pub fn remove(&mut self, key: u64) -> Option<u64> {
        let (gi, i) = self.find(key)?;
        Some(self.remove_at(gi, i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// The reference: a map with the same merge rule and a linear first-fit scan.
    fn reference_take(m: &mut BTreeMap<u64, u64>, need: u64) -> Option<u64> {
        let (&k, &s) = m.iter().find(|(_, &s)| s >= need)?;
        m.remove(&k);
        if s > need {
            m.insert(k + need, s - need);
        }
        Some(k)
    }

    fn reference_insert(m: &mut BTreeMap<u64, u64>, mut k: u64, mut s: u64) {
        if let Some((&p, &ps)) = m.range(..k).next_back() {
            if p + ps == k {
                m.remove(&p);
                k = p;
                s += ps;
            }
        }
        if let Some(ns) = m.remove(&(k + s)) {
            s += ns;
        }
        m.insert(k, s);
    }

    #[test]
    fn matches_a_linear_first_fit_over_a_map() {
        let (mut blocks, mut reference) = (FreeBlocks::default(), BTreeMap::new());
        let mut live: Vec<(u64, u64)> = Vec::new();
        let mut rng = 0x1234_5678_u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        blocks.insert(0, 1 << 30);
        reference_insert(&mut reference, 0, 1 << 30);
        for _ in 0..20_000 {
            if live.is_empty() || next() % 3 != 0 {
                let need = (next() % 64 + 1) * 256;
                let got = blocks.take_first_fit(need);
                assert_eq!(got, reference_take(&mut reference, need));
                live.push((got.unwrap(), need));
            } else {
                let j = (next() % live.len() as u64) as usize;
                let (k, s) = live.swap_remove(j);
                blocks.insert(k, s);
                reference_insert(&mut reference, k, s);
            }
            assert_eq!(blocks.len(), reference.len());
        }
        for (k, s) in live {
            blocks.insert(k, s);
        }
        assert_eq!(blocks.len(), 1);
        assert_eq!(blocks.get(0), Some(1 << 30));
        assert_eq!(blocks.remove(0), Some(1 << 30));
        assert!(blocks.is_empty());
    }
}
