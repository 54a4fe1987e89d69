//! [`AddrMap`]: live pointer → block index, a hash table tuned for device addresses.
//!
//! Keys are device addresses (non-zero multiples of 256); values are `u32` block indices. Slots
//! come in groups of four on one cache line, each group with one 32-bit word of one-byte tags
//! (empty, or seven bits of the key's hash), so a probe compares four tags at once with a few
//! integer instructions (SWAR, as hashbrown does without SIMD) and looks at a key only where a
//! tag matches. A search that finds neither the key nor an empty slot moves to the next group; each
//! group counts the keys that probed past it, so a search for an absent key stops at the first
//! group none passed, and a removal needs no tombstone (F14's scheme). The table doubles above
//! 3/8 full, where a group overflows rarely: almost every search is one cache line, with no
//! branch that depends on the probe length (linear probing over single slots mispredicted
//! about one branch in six on W3's frees). 16 bytes a slot, so at most 43 bytes of host memory
//! per live allocation. Every operation is expected O(1).

/// Slots in a group: a group is one cache line.
const GROUP: usize = 4;
/// Each byte's low bit.
const LO: u32 = 0x0101_0101;
/// Each byte's high bit: set in every full slot's tag.
const HI: u32 = 0x8080_8080;

/// Four slots on one cache line: keys, values, tags and the overflow count.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Group {
    keys: [u64; GROUP],
    values: [u32; GROUP],
    /// One byte a slot: 0 when empty, `0x80 | 7 hash bits` when full.
    tags: u32,
    /// How many keys of the table probed past this group (their home group was full).
    passed: u32,
}

const EMPTY_GROUP: Group = Group {
    keys: [0; GROUP],
    tags: 0,
    passed: 0,
    values: [0; GROUP],
};

/// The bytes of `tags` equal to `tag`, as their high bits. A byte right above a true match
/// may show as a false one; callers compare the key, so that is harmless.
#[inline(always)]
fn matching(tags: u32, tag: u8) -> u32 {
    let x = tags ^ (LO * u32::from(tag));
    x.wrapping_sub(LO) & !x & HI
}

/// The slot inside a group of the lowest byte flagged in `bits`.
#[inline(always)]
fn first(bits: u32) -> usize {
    (bits.trailing_zeros() / 8) as usize
}

/// A map from device address to block index.
#[derive(Debug, Clone)]
pub(crate) struct AddrMap {
    groups: Vec<Group>,
    len: usize,
    /// The length at which an insert doubles the table first: 3/8 of the slots.
    grow_at: usize,
    /// `64 - log2(groups)`: the shift that turns a 64-bit hash into a group.
    shift: u32,
}

impl Default for AddrMap {
    fn default() -> Self {
        Self::with_groups_log2(4)
    }
}

impl AddrMap {
    fn with_groups_log2(bits: u32) -> Self {
        AddrMap {
            groups: vec![EMPTY_GROUP; 1 << bits],
            len: 0,
            grow_at: (GROUP << bits) * 3 / 8,
            shift: 64 - bits,
        }
    }

    /// Number of entries.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether the map has no entry.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The key's home group and its tag.
    #[inline(always)]
    fn home(&self, key: u64) -> (usize, u8) {
        // Fibonacci hashing: the low 8 bits of a 256-aligned address carry nothing. The group
        // takes the top bits, the tag seven bits well below them.
        let h = (key >> 8).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        ((h >> self.shift) as usize, 0x80 | (h >> 24) as u8)
    }

    #[inline(always)]
    fn next(&self, g: usize) -> usize {
        (g + 1) & (self.groups.len() - 1)
    }

    /// The group and slot holding `key`, if present, with the key's home group.
    #[inline(always)]
    fn find(&self, key: u64) -> Option<(usize, usize, usize)> {
        let (home, tag) = self.home(key);
        let mut g = home;
        loop {
            let group = &self.groups[g];
            let mut m = matching(group.tags, tag);
            while m != 0 {
                let j = first(m);
                if group.keys[j] == key {
                    return Some((g, j, home));
                }
                m &= m - 1;
            }
            if group.passed == 0 {
                return None;
            }
            g = self.next(g);
        }
    }

    /// Inserts `key → value`; `key` must be non-zero and absent.
    ///
    /// # Time complexity
    ///
    /// Expected O(1); O(len) when the table doubles (amortized O(1)).
    #[inline]
    pub(crate) fn insert(&mut self, key: u64, value: u32) {
        debug_assert_ne!(key, 0);
        debug_assert!(self.find(key).is_none(), "key inserted twice");
        if self.len >= self.grow_at {
            self.grow();
        }
        let (mut g, tag) = self.home(key);
        loop {
            let group = &mut self.groups[g];
            let empty = !group.tags & HI;
            if empty != 0 {
                let j = first(empty);
                group.tags |= u32::from(tag) << (8 * j);
                group.keys[j] = key;
                group.values[j] = value;
                self.len += 1;
                return;
            }
            group.passed += 1;
            g = self.next(g);
        }
    }

    /// The value of `key`, if present.
    ///
    /// # Time complexity
    ///
    /// Expected O(1).
    #[inline]
    pub(crate) fn get(&self, key: u64) -> Option<u32> {
        if key == 0 {
            return None;
        }
        self.find(key).map(|(g, j, _)| self.groups[g].values[j])
    }

    /// Removes `key`, returning its value if it was present.
    ///
    /// # Time complexity
    ///
    /// Expected O(1).
    #[inline]
    pub(crate) fn remove(&mut self, key: u64) -> Option<u32> {
        if key == 0 {
            return None;
        }
        let (g, j, mut h) = self.find(key)?;
        let group = &mut self.groups[g];
        group.tags &= !(0xFF << (8 * j));
        group.keys[j] = 0;
        let value = group.values[j];
        // The groups between the key's home and its slot counted it as passing.
        while h != g {
            self.groups[h].passed -= 1;
            h = self.next(h);
        }
        self.len -= 1;
        Some(value)
    }

    #[cold]
    fn grow(&mut self) {
        let bits = 64 - self.shift + 1;
        let old = std::mem::replace(self, Self::with_groups_log2(bits));
        for group in &old.groups {
            let mut full = group.tags & HI;
            while full != 0 {
                let j = first(full);
                self.insert(group.keys[j], group.values[j]);
                full &= full - 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{matching, AddrMap};
    use std::collections::BTreeMap;

    /// Random inserts and removals checked against a `BTreeMap`; returns how many steps saw a
    /// key probe past a full group.
    fn churn(m: &mut AddrMap, keys: &[u64], steps: u32) -> u32 {
        let mut overflowed = 0;
        let mut model = BTreeMap::new();
        let mut x = 0x1234_5678_9abc_def1u64;
        for step in 0..steps {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Few distinct keys, so inserts, hits and misses all happen often.
            let key = keys[(x % keys.len() as u64) as usize];
            if x & (1 << 40) == 0 {
                if let std::collections::btree_map::Entry::Vacant(e) = model.entry(key) {
                    e.insert(step);
                    m.insert(key, step);
                }
            } else {
                assert_eq!(m.remove(key), model.remove(&key));
            }
            assert_eq!(m.get(key), model.get(&key).copied());
            overflowed += u32::from(m.groups.iter().any(|g| g.passed > 0));
        }
        assert_eq!(m.len(), model.len());
        for (k, v) in &model {
            assert_eq!(m.get(*k), Some(*v));
        }
        for key in keys {
            assert_eq!(m.get(*key), model.get(key).copied());
        }
        overflowed
    }

    #[test]
    fn behaves_as_a_map_under_churn() {
        let mut m = AddrMap::default();
        let keys: Vec<u64> = (1..=4096u64).map(|k| k << 8).collect();
        churn(&mut m, &keys, 200_000);
        assert_eq!(m.get(0), None);
        assert_eq!(m.remove(0), None);
    }

    #[test]
    fn behaves_as_a_map_when_groups_overflow() {
        // 20 keys with one home group in the smallest table (which holds 24 before it
        // doubles): probes pass full groups, and removals must undo their counts.
        let mut m = AddrMap::default();
        let keys: Vec<u64> = (1u64..)
            .map(|k| k << 8)
            .filter(|&k| m.home(k).0 == 0)
            .take(20)
            .collect();
        let overflowed = churn(&mut m, &keys, 100_000);
        assert!(
            overflowed > 10_000,
            "the overflow path was barely taken: {overflowed}"
        );
        assert_eq!(m.groups.len(), 16, "the table did not double");
        for k in keys {
            let _ = m.remove(k);
        }
        assert!(m.is_empty());
        assert!(m.groups.iter().all(|g| g.passed == 0 && g.tags == 0));
    }

    #[test]
    fn tag_matching_flags_every_true_match() {
        let tags = 0x81_00_81_80u32;
        let m = matching(tags, 0x81);
        for j in [1usize, 3] {
            assert_ne!(m & (0x80 << (8 * j)), 0, "byte {j}");
        }
        assert_eq!(matching(tags, 0xFF), 0);
    }
}
