//! [`AddrMap`]: device address → record index, a hash table tuned for device addresses (a
//! fixed-size resource's live blocks, a heap's chunks; the heap's live blocks have their own
//! [`super::live_index::LiveIndex`]).
//!
//! Keys are device addresses (non-zero multiples of 256); values are `u32` indices of records
//! that hold the key themselves (a block's address, a chunk's base), so the table stores no
//! keys: each operation takes the caller's `key_of(value)` and compares the key there. A free
//! reads the block's record next anyway, so the comparison costs no extra cache line, and a
//! slot is 5 bytes instead of 13 (when the pool's heap still used this table, W3's thousand
//! live blocks took 16 KiB of it, not 64, and its lines had been a quarter of the pool's L1
//! misses on W3 by cachegrind).
//!
//! Slots come in groups of eight on one cache line, each with a one-byte tag (empty, or seven
//! bits of the key's hash), so a probe compares eight tags at once with a few integer
//! instructions (SWAR, as hashbrown does without SIMD) and reads a key only where a tag
//! matches. A search that finds neither the key nor an empty slot moves to the next group;
//! each group counts the keys that probed past it, so a search for an absent key stops at the
//! first group none passed, and a removal needs no tombstone (F14's scheme). The table doubles
//! above half full, where a group of eight overflows rarely: almost every search is one cache
//! line, with no branch that depends on the probe length. Every operation is expected O(1).

/// Slots in a group: a group is one cache line.
const GROUP: usize = 8;
/// Each byte's low bit.
const LO: u64 = 0x0101_0101_0101_0101;
/// Each byte's high bit: set in every full slot's tag.
const HI: u64 = 0x8080_8080_8080_8080;

/// Eight slots on one cache line: tags, values and the overflow count.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Group {
    /// One byte a slot: 0 when empty, `0x80 | 7 hash bits` when full.
    tags: u64,
    values: [u32; GROUP],
    /// How many keys of the table probed past this group (their home group was full).
    passed: u32,
}

const EMPTY_GROUP: Group = Group {
    tags: 0,
    values: [0; GROUP],
    passed: 0,
};

/// The bytes of `tags` equal to `tag`, as their high bits. A byte right above a true match
/// may show as a false one; callers compare the key, so that is harmless.
#[inline(always)]
fn matching(tags: u64, tag: u8) -> u64 {
    let x = tags ^ (LO * u64::from(tag));
    x.wrapping_sub(LO) & !x & HI
}

/// The slot inside a group of the lowest byte flagged in `bits`.
#[inline(always)]
fn first(bits: u64) -> usize {
    (bits.trailing_zeros() / 8) as usize
}

/// A map from device address to the index of a record holding that address.
#[derive(Debug, Clone)]
pub(crate) struct AddrMap {
    groups: Vec<Group>,
    len: usize,
    /// The length at which an insert doubles the table first: half the slots.
    grow_at: usize,
    /// `64 - log2(groups)`: the shift that turns a 64-bit hash into a group.
    shift: u32,
}

impl Default for AddrMap {
    fn default() -> Self {
        Self::with_groups_log2(3)
    }
}

impl AddrMap {
    fn with_groups_log2(bits: u32) -> Self {
        AddrMap {
            groups: vec![EMPTY_GROUP; 1 << bits],
            len: 0,
            grow_at: (GROUP << bits) / 2,
            shift: 64 - bits,
        }
    }

    /// Number of entries.
    #[cfg(test)]
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

    /// The groups, sliced so that an index masked with `len - 1` needs no bounds check (the
    /// table's length is a power of two).
    #[inline(always)]
    fn groups(&self) -> &[Group] {
        &self.groups[..=self.groups.len() - 1]
    }

    #[inline(always)]
    fn groups_mut(&mut self) -> &mut [Group] {
        let mask = self.groups.len() - 1;
        &mut self.groups[..=mask]
    }

    /// The group after `g`, wrapping; also `g` itself masked into the table.
    #[inline(always)]
    fn next(groups: &[Group], g: usize) -> usize {
        (g + 1) & (groups.len() - 1)
    }

    /// The group and slot holding `key`, if present, with the key's home group.
    #[inline(always)]
    fn find(&self, key: u64, key_of: impl Fn(u32) -> u64) -> Option<(usize, usize, usize)> {
        let (home, tag) = self.home(key);
        let groups = self.groups();
        let mask = groups.len() - 1;
        let mut g = home & mask;
        loop {
            let group = &groups[g];
            let mut m = matching(group.tags, tag);
            while m != 0 {
                let j = first(m);
                if key_of(group.values[j]) == key {
                    return Some((g, j, home));
                }
                m &= m - 1;
            }
            if group.passed == 0 {
                return None;
            }
            g = Self::next(groups, g);
        }
    }

    /// Inserts `key → value`; `key` must be non-zero and absent, and `key_of(value)` must be
    /// `key` for this and every other entry (doubling the table reads every key).
    ///
    /// # Time complexity
    ///
    /// Expected O(1); O(len) when the table doubles (amortized O(1)).
    #[inline]
    pub(crate) fn insert(&mut self, key: u64, value: u32, key_of: impl Fn(u32) -> u64) {
        debug_assert_ne!(key, 0);
        debug_assert_eq!(key_of(value), key, "the value's record holds another key");
        debug_assert!(self.find(key, &key_of).is_none(), "key inserted twice");
        if self.len >= self.grow_at {
            self.grow(&key_of);
        }
        let (g, tag) = self.home(key);
        self.put(g, tag, value);
    }

    /// Puts `value` with `tag` in the first group from `g` on that has an empty slot.
    #[inline(always)]
    fn put(&mut self, g: usize, tag: u8, value: u32) {
        let groups = self.groups_mut();
        let mask = groups.len() - 1;
        let mut g = g & mask;
        loop {
            let group = &mut groups[g];
            let empty = !group.tags & HI;
            if empty != 0 {
                let j = first(empty);
                group.tags |= u64::from(tag) << (8 * j);
                group.values[j] = value;
                self.len += 1;
                return;
            }
            group.passed += 1;
            g = Self::next(groups, g);
        }
    }

    /// The value of `key`, if present.
    ///
    /// # Time complexity
    ///
    /// Expected O(1).
    #[inline]
    pub(crate) fn get(&self, key: u64, key_of: impl Fn(u32) -> u64) -> Option<u32> {
        if key == 0 {
            return None;
        }
        self.find(key, key_of)
            .map(|(g, j, _)| self.groups()[g].values[j])
    }

    /// Removes `key`, returning its value if it was present.
    ///
    /// # Time complexity
    ///
    /// Expected O(1).
    #[inline]
    pub(crate) fn remove(&mut self, key: u64, key_of: impl Fn(u32) -> u64) -> Option<u32> {
        if key == 0 {
            return None;
        }
        let (g, j, h) = self.find(key, key_of)?;
        self.len -= 1;
        let groups = self.groups_mut();
        let mask = groups.len() - 1;
        let group = &mut groups[g & mask];
        group.tags &= !(0xFF << (8 * j));
        let value = group.values[j];
        // The groups between the key's home and its slot counted it as passing.
        let mut h = h & mask;
        while h != g {
            groups[h].passed -= 1;
            h = Self::next(groups, h);
        }
        Some(value)
    }

    #[cold]
    fn grow(&mut self, key_of: impl Fn(u32) -> u64) {
        let bits = 64 - self.shift + 1;
        let old = std::mem::replace(self, Self::with_groups_log2(bits));
        for group in &old.groups {
            let mut full = group.tags & HI;
            while full != 0 {
                let j = first(full);
                let value = group.values[j];
                let (g, tag) = self.home(key_of(value));
                self.put(g, tag, value);
                full &= full - 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{matching, AddrMap};
    use std::collections::BTreeMap;

    /// The tests' values name their keys: a key is its value's granules.
    fn key_of(v: u32) -> u64 {
        u64::from(v) << 8
    }

    /// Random inserts and removals checked against a `BTreeMap`; returns how many steps saw a
    /// key probe past a full group.
    fn churn(m: &mut AddrMap, keys: &[u64], steps: u32) -> u32 {
        let mut overflowed = 0;
        let mut model = BTreeMap::new();
        let mut x = 0x1234_5678_9abc_def1u64;
        for _ in 0..steps {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Few distinct keys, so inserts, hits and misses all happen often.
            let key = keys[(x % keys.len() as u64) as usize];
            if x & (1 << 40) == 0 {
                if let std::collections::btree_map::Entry::Vacant(e) = model.entry(key) {
                    e.insert((key >> 8) as u32);
                    m.insert(key, (key >> 8) as u32, key_of);
                }
            } else {
                assert_eq!(m.remove(key, key_of), model.remove(&key));
            }
            assert_eq!(m.get(key, key_of), model.get(&key).copied());
            overflowed += u32::from(m.groups.iter().any(|g| g.passed > 0));
        }
        assert_eq!(m.len(), model.len());
        for (k, v) in &model {
            assert_eq!(m.get(*k, key_of), Some(*v));
        }
        for key in keys {
            assert_eq!(m.get(*key, key_of), model.get(key).copied());
        }
        overflowed
    }

    #[test]
    fn behaves_as_a_map_under_churn() {
        let mut m = AddrMap::default();
        let keys: Vec<u64> = (1..=4096u64).map(|k| k << 8).collect();
        churn(&mut m, &keys, 200_000);
        assert_eq!(m.get(0, key_of), None);
        assert_eq!(m.remove(0, key_of), None);
    }

    #[test]
    fn behaves_as_a_map_when_groups_overflow() {
        // 20 keys with one home group in the smallest table (which holds 32 before it
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
        assert_eq!(m.groups.len(), 8, "the table did not double");
        for k in keys {
            let _ = m.remove(k, key_of);
        }
        assert!(m.is_empty());
        assert!(m.groups.iter().all(|g| g.passed == 0 && g.tags == 0));
    }

    #[test]
    fn a_key_is_compared_through_its_record_not_its_tag() {
        // Two keys with one home group and one tag: only the record's key tells them apart.
        let m = AddrMap::default();
        let a = 1u64 << 8;
        let b = (2u64..)
            .map(|k| k << 8)
            .find(|&k| m.home(k) == m.home(a))
            .unwrap();
        let mut m = m;
        m.insert(a, (a >> 8) as u32, key_of);
        assert_eq!(m.get(b, key_of), None, "a tag match is not a key match");
        assert_eq!(m.remove(b, key_of), None);
        m.insert(b, (b >> 8) as u32, key_of);
        assert_eq!(m.remove(a, key_of), Some((a >> 8) as u32));
        assert_eq!(m.get(b, key_of), Some((b >> 8) as u32));
        assert_eq!(m.len(), 1);
    }

    #[test]
    fn tag_matching_flags_every_true_match() {
        let tags = 0x81_00_81_80_81_00_81_80u64;
        let m = matching(tags, 0x81);
        for j in [1usize, 3, 5, 7] {
            assert_ne!(m & (0x80 << (8 * j)), 0, "byte {j}");
        }
        assert_eq!(matching(tags, 0xFF), 0);
    }
}
