//! [`StartBitmap`]: where the live allocations of one chunk start, one bit per 256-byte granule,
//! with summary levels above (a bit per non-zero word of the level below), so that the next
//! start at or after a granule and the last start before one are found in O(levels) word reads
//! whatever the size of the request. The overlap check of every answer is these two queries.
//!
//! Host memory: one bit per 256 bytes of chunk (1/2048 of the device memory held, 32 KiB for a
//! 64 MiB chunk) plus 1/64 of that for the summaries. The levels are allocated zeroed, so the
//! operating system maps the pages of a large chunk's bitmap only where allocations start.

/// Bits per word.
const BITS: usize = 64;

/// The most levels: 1 TiB (`abi::MAX_CHUNK_BYTES`) of 256-byte granules is 2^32 bits, six
/// levels of 64-bit words.
const MAX_LEVELS: usize = 6;

/// The starts of a chunk's live allocations, by granule index.
#[derive(Debug, Clone, Default)]
pub(crate) struct StartBitmap {
    /// Every level's words, level 0 (one bit per granule) first.
    words: Vec<u64>,
    /// Where each level begins in `words`, and its number of words; `levels` of them are
    /// used.
    level_start: [usize; MAX_LEVELS],
    level_len: [usize; MAX_LEVELS],
    levels: usize,
}

impl StartBitmap {
    /// A bitmap for `granules` granules, all clear; `None` when that needs more than
    /// [`MAX_LEVELS`] levels (more than a 1 TiB chunk).
    pub fn new(granules: usize) -> Option<StartBitmap> {
        let (mut level_start, mut level_len) = ([0; MAX_LEVELS], [0; MAX_LEVELS]);
        let (mut total, mut bits, mut levels) = (0usize, granules.max(1), 0);
        loop {
            let words = bits.div_ceil(BITS);
            *level_start.get_mut(levels)? = total;
            *level_len.get_mut(levels)? = words;
            total = total.checked_add(words)?;
            levels += 1;
            if words == 1 {
                break;
            }
            bits = words;
        }
        Some(StartBitmap {
            // Zeroed allocation: large tables come from the OS as untouched zero pages.
            words: vec![0; total],
            level_start,
            level_len,
            levels,
        })
    }

    /// Where word `w` of `level` is in `words`, if the level has it.
    #[inline]
    fn index(&self, level: usize, w: usize) -> Option<usize> {
        let len = *self.level_len.get(level)?;
        (w < len).then(|| self.level_start.get(level).map(|s| s + w))?
    }

    /// Word `w` of `level` (0 past the end, which holds no bits).
    #[inline]
    fn word(&self, level: usize, w: usize) -> u64 {
        self.index(level, w)
            .and_then(|i| self.words.get(i))
            .copied()
            .unwrap_or(0)
    }

    #[inline]
    fn word_mut(&mut self, level: usize, w: usize) -> Option<&mut u64> {
        let i = self.index(level, w)?;
        self.words.get_mut(i)
    }

    /// Marks granule `g` as the start of a live allocation.
    ///
    /// # Time complexity
    ///
    /// O(levels), usually one word.
    #[inline]
    pub fn set(&mut self, g: usize) {
        let mut i = g;
        for level in 0..self.levels {
            let Some(word) = self.word_mut(level, i / BITS) else {
                return;
            };
            let was = *word;
            *word |= 1 << (i % BITS);
            if was != 0 {
                // The levels above already know this word is non-zero.
                return;
            }
            i /= BITS;
        }
    }

    /// Clears granule `g`.
    ///
    /// # Time complexity
    ///
    /// O(levels), usually one word.
    #[inline]
    pub fn clear(&mut self, g: usize) {
        let mut i = g;
        for level in 0..self.levels {
            let Some(word) = self.word_mut(level, i / BITS) else {
                return;
            };
            *word &= !(1 << (i % BITS));
            if *word != 0 {
                return;
            }
            i /= BITS;
        }
    }

    /// Whether granule `g` is set.
    #[cfg(test)]
    pub fn contains(&self, g: usize) -> bool {
        self.word(0, g / BITS) & (1 << (g % BITS)) != 0
    }

    /// The lowest set granule at or after `g`.
    ///
    /// # Time complexity
    ///
    /// O(levels): up the summaries to the first non-zero word, then down its lowest bits.
    #[inline]
    pub fn next_from(&self, g: usize) -> Option<usize> {
        let (mut i, mut level) = (g, 0);
        loop {
            if level == self.levels {
                return None;
            }
            let w = i / BITS;
            let word = self.word(level, w) & (!0u64 << (i % BITS));
            if word != 0 {
                i = w * BITS + word.trailing_zeros() as usize;
                break;
            }
            // Nothing at or after `i` in this word: the next non-zero word, one level up.
            i = w + 1;
            level += 1;
        }
        self.descend(level, i, |word| word.trailing_zeros() as usize)
    }

    /// The highest set granule strictly before `g`.
    ///
    /// # Time complexity
    ///
    /// O(levels), as [`StartBitmap::next_from`].
    #[inline]
    pub fn last_before(&self, g: usize) -> Option<usize> {
        let (mut i, mut level) = (g, 0);
        loop {
            if level == self.levels {
                return None;
            }
            let len = self.level_len.get(level).copied().unwrap_or(0);
            let (w, below) = match (i / BITS, i % BITS) {
                // Past the level's end: all of its last word is before `i`.
                (w, _) if w >= len => (len.saturating_sub(1), !0),
                (w, 0) => (w, 0),
                (w, b) => (w, (1u64 << b) - 1),
            };
            let word = self.word(level, w) & below;
            if word != 0 {
                i = w * BITS + (BITS - 1 - word.leading_zeros() as usize);
                break;
            }
            if w == 0 {
                return None;
            }
            // Nothing before `i` in this word: the last non-zero word before `w`, one level up.
            i = w;
            level += 1;
        }
        self.descend(level, i, |word| BITS - 1 - word.leading_zeros() as usize)
    }

    /// From bit `i` of `level` (a non-zero word of the level below) down to a granule, taking
    /// at each level the bit `pick` chooses.
    #[inline]
    fn descend(&self, level: usize, mut i: usize, pick: impl Fn(u64) -> usize) -> Option<usize> {
        for below in (0..level).rev() {
            let word = self.word(below, i);
            if word == 0 {
                // A summary bit without its word: cannot happen; say "none" rather than guess.
                debug_assert!(false, "summary bit {i} of level {} is stale", below + 1);
                return None;
            }
            i = i * BITS + pick(word);
        }
        Some(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn level_counts_follow_the_size() {
        assert_eq!(StartBitmap::new(1).unwrap().levels, 1);
        assert_eq!(StartBitmap::new(64).unwrap().levels, 1);
        assert_eq!(StartBitmap::new(65).unwrap().levels, 2);
        // A 64 MiB chunk: 262 144 granules, 4096 + 64 + 1 words.
        let b = StartBitmap::new(1 << 18).unwrap();
        assert_eq!((b.levels, b.words.len()), (3, 4096 + 64 + 1));
        assert_eq!(StartBitmap::new(1 << 32).map(|b| b.levels), Some(6));
        assert!(StartBitmap::new(usize::MAX).is_none());
    }

    #[test]
    fn queries_match_an_ordered_set() {
        for granules in [1usize, 63, 64, 65, 4096, 4097, 300_000] {
            let mut b = StartBitmap::new(granules).unwrap();
            let mut model = BTreeSet::new();
            let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ granules as u64;
            for _ in 0..20_000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Cluster the granules so that words fill and empty.
                let g = if x & 1 == 0 {
                    (x >> 8) as usize % granules
                } else {
                    (x >> 8) as usize % granules.min(200)
                };
                if x & 2 == 0 {
                    b.set(g);
                    model.insert(g);
                } else {
                    b.clear(g);
                    model.remove(&g);
                }
                let q = (x >> 32) as usize % (granules + 1);
                assert_eq!(
                    b.next_from(q),
                    model.range(q..).next().copied(),
                    "{granules} {q}"
                );
                assert_eq!(
                    b.last_before(q),
                    model.range(..q).next_back().copied(),
                    "{granules} {q}"
                );
                assert_eq!(b.contains(g), model.contains(&g));
            }
            for g in model.clone() {
                b.clear(g);
            }
            assert!(
                b.words.iter().all(|&w| w == 0),
                "{granules}: summaries cleared"
            );
            assert_eq!((b.next_from(0), b.last_before(granules)), (None, None));
        }
    }
}
