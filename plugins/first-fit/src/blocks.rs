//! [`FreeBlocks`]: free blocks ordered by key (`chunk << 40 | offset`), kept in leaves of 32
//! sorted entries with each leaf's first key and largest size in dense arrays beside them. A
//! first-fit search scans the dense array of largest sizes eight at a time to find the leaf,
//! then compares all 32 sizes of that leaf at once ([`crate::scan`]): a few straight-line
//! vector compares instead of a loop of branches, which matters in WebAssembly, where every
//! loop iteration also pays the sandbox's fuel and deadline checks.

use alloc::boxed::Box;
use alloc::vec::Vec;

use crate::scan::{first_at_least, mask_at_least, max_of};

/// Entries per leaf; a full leaf splits into two halves.
pub const LEAF: usize = 32;

/// The key of an unused slot: above every real key (a chunk handle has at most 23 bits), so
/// fixed-width scans of keys need no length check.
const NO_KEY: u64 = i64::MAX as u64;

/// A stretch of the free blocks in key order. Slots from `len` on hold [`NO_KEY`] and size
/// 0 (no request is 0 bytes), so every scan can cover all [`LEAF`] slots.
#[derive(Debug, Clone)]
struct Leaf {
    keys: [u64; LEAF],
    sizes: [u64; LEAF],
    len: usize,
}

impl Leaf {
    fn with(key: u64, size: u64) -> Box<Leaf> {
        let mut leaf = Box::new(Leaf {
            keys: [NO_KEY; LEAF],
            sizes: [0; LEAF],
            len: 1,
        });
        leaf.keys[0] = key;
        leaf.sizes[0] = size;
        leaf
    }

    /// The number of entries whose key is at most `key`: where `key` goes.
    #[inline]
    fn position(&self, key: u64) -> usize {
        LEAF - mask_at_least(&self.keys, key + 1).count_ones() as usize
    }

    /// The largest size.
    #[inline]
    fn max(&self) -> u64 {
        max_of(&self.sizes)
    }

    /// Puts `(key, size)` at `i`; the leaf has room.
    #[inline]
    fn insert_at(&mut self, i: usize, key: u64, size: u64) {
        let len = self.len;
        self.keys.copy_within(i..len, i + 1);
        self.sizes.copy_within(i..len, i + 1);
        self.keys[i] = key;
        self.sizes[i] = size;
        self.len += 1;
    }

    /// Takes out entry `i`; returns its size.
    #[inline]
    fn remove_at(&mut self, i: usize) -> u64 {
        let (len, size) = (self.len, self.sizes[i]);
        self.keys.copy_within(i + 1..len, i);
        self.sizes.copy_within(i + 1..len, i);
        self.keys[len - 1] = NO_KEY;
        self.sizes[len - 1] = 0;
        self.len -= 1;
        size
    }

    /// Moves the upper half into a new leaf.
    fn split_off(&mut self) -> Box<Leaf> {
        let half = LEAF / 2;
        let mut upper = Box::new(Leaf {
            keys: [NO_KEY; LEAF],
            sizes: [0; LEAF],
            len: self.len - half,
        });
        upper.keys[..self.len - half].copy_from_slice(&self.keys[half..self.len]);
        upper.sizes[..self.len - half].copy_from_slice(&self.sizes[half..self.len]);
        self.keys[half..].fill(NO_KEY);
        self.sizes[half..].fill(0);
        self.len = half;
        upper
    }
}

/// Free blocks by key, merged with their neighbours on insert.
#[derive(Debug, Default)]
pub struct FreeBlocks {
    /// In key order; never holds an empty leaf.
    #[expect(
        clippy::vec_box,
        reason = "a split or an emptied leaf moves pointers, not 520-byte leaves"
    )]
    leaves: Vec<Box<Leaf>>,
    /// Each leaf's first key.
    first: Vec<u64>,
    /// Each leaf's largest size.
    max: Vec<u64>,
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
        self.max.iter().copied().max().unwrap_or(0)
    }

    /// Takes `need` bytes (at least 1) from the lowest-keyed block of at least `need`;
    /// returns its key.
    ///
    /// # Time complexity
    ///
    /// O(leaves / 8) vector compares to find the leaf, a fixed 32-entry compare inside it.
    #[inline]
    pub fn take_first_fit(&mut self, need: u64) -> Option<u64> {
        let li = first_at_least(&self.max, need)?;
        let leaf = &mut self.leaves[li];
        let i = mask_at_least(&leaf.sizes, need).trailing_zeros() as usize;
        if i >= leaf.len {
            // `max` promised a fit: it cannot be stale, but never hand out a wrong block.
            return None;
        }
        let (key, size) = (leaf.keys[i], leaf.sizes[i]);
        if size > need {
            leaf.keys[i] = key + need;
            leaf.sizes[i] = size - need;
        } else {
            leaf.remove_at(i);
            self.len -= 1;
        }
        self.settle(li, i, size);
        Some(key)
    }

    /// After a change at entry `i` of leaf `li` whose old size was `old`: drops the leaf if
    /// it emptied, else refreshes its first key and largest size.
    #[inline]
    fn settle(&mut self, li: usize, i: usize, old: u64) {
        let leaf = &self.leaves[li];
        if leaf.len == 0 {
            self.leaves.remove(li);
            self.first.remove(li);
            self.max.remove(li);
            return;
        }
        if i == 0 {
            self.first[li] = leaf.keys[0];
        }
        if old == self.max[li] {
            self.max[li] = leaf.max();
        }
    }

    /// Adds the free block `[key, key + size)` (`size` at least 1, overlapping no free
    /// block), merging it with the block that ends at `key` and the one that starts at
    /// `key + size`.
    ///
    /// # Time complexity
    ///
    /// O(leaves / 8) vector compares, a fixed 32-entry compare, and a move of at most 32
    /// entries.
    pub fn insert(&mut self, key: u64, size: u64) {
        if self.leaves.is_empty() {
            self.leaves.push(Leaf::with(key, size));
            self.first.push(key);
            self.max.push(size);
            self.len = 1;
            return;
        }
        let li = self.leaf_of(key);
        let leaf = &self.leaves[li];
        let i = leaf.position(key);
        let prev = i > 0 && leaf.keys[i - 1] + leaf.sizes[i - 1] == key;
        let (nl, ni) = if i < leaf.len { (li, i) } else { (li + 1, 0) };
        let next = nl < self.leaves.len() && self.leaves[nl].keys[ni] == key + size;
        match (prev, next) {
            (true, false) => self.grow_at(li, i - 1, size),
            (false, true) => {
                let leaf = &mut self.leaves[nl];
                leaf.keys[ni] = key;
                if ni == 0 {
                    self.first[nl] = key;
                }
                self.grow_at(nl, ni, size);
            }
            (true, true) => {
                let leaf = &mut self.leaves[nl];
                let next_size = leaf.remove_at(ni);
                self.len -= 1;
                // The leaf of `prev` keeps entry `i - 1`, so only the next leaf can empty.
                self.settle(nl, ni, next_size);
                self.grow_at(li, i - 1, size + next_size);
            }
            (false, false) => self.insert_new(li, i, key, size),
        }
    }

    /// Adds `more` bytes to entry `i` of leaf `li`.
    #[inline]
    fn grow_at(&mut self, li: usize, i: usize, more: u64) {
        let leaf = &mut self.leaves[li];
        leaf.sizes[i] += more;
        self.max[li] = self.max[li].max(leaf.sizes[i]);
    }

    /// Puts a new entry at `i` of leaf `li`, splitting the leaf first when it is full.
    fn insert_new(&mut self, mut li: usize, mut i: usize, key: u64, size: u64) {
        if self.leaves[li].len == LEAF {
            let upper = self.leaves[li].split_off();
            self.first.insert(li + 1, upper.keys[0]);
            self.max.insert(li + 1, upper.max());
            self.max[li] = self.leaves[li].max();
            self.leaves.insert(li + 1, upper);
            if i > LEAF / 2 {
                li += 1;
                i -= LEAF / 2;
            }
        }
        let leaf = &mut self.leaves[li];
        leaf.insert_at(i, key, size);
        if i == 0 {
            self.first[li] = key;
        }
        self.max[li] = self.max[li].max(size);
        self.len += 1;
    }

    /// The leaf where `key` belongs: the last whose first key is at most `key` (the first
    /// leaf for a key below all). A scan of the dense first keys, eight at a time: its loads
    /// do not wait on each other as a binary search's do.
    #[inline]
    fn leaf_of(&self, key: u64) -> usize {
        first_at_least(&self.first, key + 1)
            .unwrap_or(self.first.len())
            .saturating_sub(1)
    }

    fn find(&self, key: u64) -> Option<(usize, usize)> {
        let li = self.first.partition_point(|&f| f <= key).checked_sub(1)?;
        let leaf = &self.leaves[li];
        let i = leaf.keys[..leaf.len].binary_search(&key).ok()?;
        Some((li, i))
    }

    /// The size of the free block at `key`, if one starts there.
    pub fn get(&self, key: u64) -> Option<u64> {
        self.find(key).map(|(li, i)| self.leaves[li].sizes[i])
    }

    /// Removes the free block at `key`; returns its size.
    pub fn remove(&mut self, key: u64) -> Option<u64> {
        let (li, i) = self.find(key)?;
        let size = self.leaves[li].remove_at(i);
        self.len -= 1;
        self.settle(li, i, size);
        Some(size)
    }

    /// Number of leaves (for tests and statistics).
    pub fn leaves(&self) -> usize {
        self.leaves.len()
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

    /// Every invariant: leaves sorted and non-empty, summaries right, unused slots blank.
    fn check(b: &FreeBlocks, reference: &BTreeMap<u64, u64>) {
        let entries: std::vec::Vec<(u64, u64)> = b
            .leaves
            .iter()
            .flat_map(|l| {
                l.keys[..l.len]
                    .iter()
                    .copied()
                    .zip(l.sizes[..l.len].iter().copied())
            })
            .collect();
        let want: std::vec::Vec<(u64, u64)> = reference.iter().map(|(&k, &s)| (k, s)).collect();
        assert_eq!(entries, want);
        assert_eq!(b.len(), reference.len());
        for (li, l) in b.leaves.iter().enumerate() {
            assert!(l.len > 0);
            assert_eq!(b.first[li], l.keys[0]);
            assert_eq!(b.max[li], l.sizes[..l.len].iter().copied().max().unwrap());
            assert!(l.keys[l.len..].iter().all(|&k| k == NO_KEY));
            assert!(l.sizes[l.len..].iter().all(|&s| s == 0));
        }
    }

    fn churn(chunks: u64, steps: usize, max_granules: u64, seed: u64) {
        let (mut blocks, mut reference) = (FreeBlocks::default(), BTreeMap::new());
        let mut live: std::vec::Vec<(u64, u64)> = std::vec::Vec::new();
        let mut rng = seed;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for c in 1..=chunks {
            blocks.insert(c << 40, 1 << 30);
            reference_insert(&mut reference, c << 40, 1 << 30);
        }
        for step in 0..steps {
            if live.is_empty() || next() % 3 != 0 {
                let need = (next() % max_granules + 1) * 256;
                let got = blocks.take_first_fit(need);
                assert_eq!(got, reference_take(&mut reference, need));
                // A miss (the chunks are full) changes nothing; the next free makes room.
                live.extend(got.map(|k| (k, need)));
            } else {
                let j = (next() % live.len() as u64) as usize;
                let (k, s) = live.swap_remove(j);
                blocks.insert(k, s);
                reference_insert(&mut reference, k, s);
            }
            if step % 97 == 0 {
                check(&blocks, &reference);
            }
        }
        check(&blocks, &reference);
        for (k, s) in live {
            blocks.insert(k, s);
            reference_insert(&mut reference, k, s);
        }
        check(&blocks, &reference);
        assert_eq!(blocks.len(), chunks as usize);
        for c in 1..=chunks {
            assert_eq!(blocks.get(c << 40), Some(1 << 30));
            assert_eq!(blocks.remove(c << 40), Some(1 << 30));
        }
        assert!(blocks.is_empty());
        assert_eq!(blocks.leaves(), 0);
    }

    #[test]
    fn matches_a_linear_first_fit_over_a_map() {
        churn(1, 20_000, 64, 0x1234_5678);
        // Hundreds of blocks over several chunks: leaves split, empty and go.
        churn(3, 40_000, 16, 0x9abc_def1);
        churn(2, 20_000, 4096, 0x0fed_cba9);
    }

    #[test]
    fn a_miss_leaves_everything_as_it_was() {
        let mut b = FreeBlocks::default();
        assert_eq!(b.take_first_fit(256), None);
        b.insert(1 << 40, 4096);
        assert_eq!(b.take_first_fit(8192), None);
        assert_eq!((b.len(), b.largest()), (1, 4096));
        assert_eq!(b.take_first_fit(4096), Some(1 << 40));
        assert!(b.is_empty());
    }
}
