//! Fixed-width compares: which of a few `u64`s are at least a bound, as a bit mask. In
//! WebAssembly they use 128-bit SIMD (two lanes per compare, straight-line code); natively the
//! plain loop, which the compiler unrolls and vectorizes itself. Values and bounds stay below
//! 2^63, so the signed lane compare of wasm is exact.

/// Bit `j` is set when `values[j] >= bound`. `N` is at most 32 and even.
#[inline]
pub fn mask_at_least<const N: usize>(values: &[u64; N], bound: u64) -> u32 {
    const { assert!(N <= 32 && N % 2 == 0) };
    imp::mask_at_least(values, bound)
}

/// The largest of `values` (0 for none). `N` is at most 32 and even.
#[inline]
pub fn max_of<const N: usize>(values: &[u64; N]) -> u64 {
    const { assert!(N <= 32 && N % 2 == 0) };
    imp::max_of(values)
}

/// The first index whose value is at least `bound`.
///
/// # Time complexity
///
/// O(n / 8) blocks of eight compares.
#[inline]
pub fn first_at_least(values: &[u64], bound: u64) -> Option<usize> {
    let mut blocks = values.chunks_exact(8);
    let mut base = 0;
    for block in &mut blocks {
        if let Ok(block) = <&[u64; 8]>::try_from(block) {
            let m = mask_at_least(block, bound);
            if m != 0 {
                return Some(base + m.trailing_zeros() as usize);
            }
        }
        base += 8;
    }
    let rest = blocks.remainder().iter().position(|&v| v >= bound)?;
    Some(base + rest)
}

#[cfg(target_arch = "wasm32")]
mod imp {
    use core::arch::wasm32::{
        i64x2_bitmask, i64x2_ge, i64x2_gt, i64x2_splat, u64x2, u64x2_extract_lane, v128_bitselect,
    };

    #[inline]
    #[target_feature(enable = "simd128")]
    pub fn mask_at_least<const N: usize>(values: &[u64; N], bound: u64) -> u32 {
        // Below 2^63 (see the module docs): the cast keeps the value.
        let bound = i64x2_splat(bound as i64);
        let mut mask = 0;
        for (j, pair) in values.chunks_exact(2).enumerate() {
            let v = u64x2(pair[0], pair[1]);
            mask |= u32::from(i64x2_bitmask(i64x2_ge(v, bound))) << (2 * j);
        }
        mask
    }

    #[inline]
    #[target_feature(enable = "simd128")]
    pub fn max_of<const N: usize>(values: &[u64; N]) -> u64 {
        // wasm has no 64-bit lane max: a compare and a select per pair of vectors, in a tree
        // (log depth) rather than a chain, so the compares run side by side.
        let mut v = [u64x2(0, 0); 16];
        for (slot, pair) in v.iter_mut().zip(values.chunks_exact(2)) {
            *slot = u64x2(pair[0], pair[1]);
        }
        let mut width = 16;
        while width > 1 {
            width /= 2;
            for i in 0..width {
                let (a, b) = (v[i], v[i + width]);
                v[i] = v128_bitselect(a, b, i64x2_gt(a, b));
            }
        }
        u64x2_extract_lane::<0>(v[0]).max(u64x2_extract_lane::<1>(v[0]))
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod imp {
    #[inline]
    pub fn mask_at_least<const N: usize>(values: &[u64; N], bound: u64) -> u32 {
        let mut mask = 0;
        for (j, &v) in values.iter().enumerate() {
            mask |= u32::from(v >= bound) << j;
        }
        mask
    }

    #[inline]
    pub fn max_of<const N: usize>(values: &[u64; N]) -> u64 {
        values.iter().fold(0, |m, &v| m.max(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_and_first_match_plain_scans() {
        let values: [u64; 32] = core::array::from_fn(|j| (j as u64 * 37) % 11);
        for bound in 0..12 {
            let mut want = 0u32;
            for (j, &v) in values.iter().enumerate() {
                want |= u32::from(v >= bound) << j;
            }
            assert_eq!(mask_at_least(&values, bound), want);
            assert_eq!(max_of(&values), 10);
            assert_eq!(max_of(&[0u64; 8]), 0);
            for n in 0..=32 {
                assert_eq!(
                    first_at_least(&values[..n], bound),
                    values[..n].iter().position(|&v| v >= bound)
                );
            }
        }
    }
}
