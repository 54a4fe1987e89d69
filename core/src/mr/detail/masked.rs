//! [`Masked`]: a non-empty slice of power-of-two length indexed by masked numbers, never out
//! of bounds, so never checked.
//!
//! The pool's block slab has a power-of-two length, where the mask changes no number it
//! holds; masking then costs one `and` where a bounds check cost a compare, a branch and,
//! around it, reloads of the slab's base and length (about a tenth of the pool's instructions
//! on W3 by callgrind). The `unsafe` is local: a number masked as below names an element of a
//! slice that is not empty, whatever it was.
//!
//! Element `k` is numbered `k << STEP`, so that its byte offset is the number times
//! `size_of::<T>() >> STEP`: with 32-byte records and `STEP` 2 that is 8, which x86-64 folds
//! into the load's address, where an index would need a shift first (one instruction a
//! record touched, some twenty an operation on the pool's hot path).

use std::mem::size_of;

/// A non-empty slice (`&[T]` or `&mut [T]`) of power-of-two length, with its mask.
#[derive(Clone, Copy)]
pub(crate) struct Masked<S, const STEP: u32> {
    slice: S,
    /// The slice's length minus one, shifted left by `STEP`; set with the slice, never
    /// changed.
    mask: usize,
}

/// The byte offset of the element a masked number names.
#[inline(always)]
const fn offset<T, const STEP: u32>(masked: usize) -> usize {
    // `masked`'s low `STEP` bits are clear, so this is the element's index times its size.
    masked * (size_of::<T>() >> STEP)
}

/// Whether `T` and `STEP` fit: the element's size a multiple of `1 << STEP`.
const fn fits<T, const STEP: u32>() -> bool {
    size_of::<T>().is_multiple_of(1 << STEP) && size_of::<T>() >= (1 << STEP)
}

impl<'a, T, const STEP: u32> Masked<&'a [T], STEP> {
    /// `slice`.
    ///
    /// # Panics
    ///
    /// When `slice` is empty or its length not a power of two.
    #[inline]
    pub(crate) fn new(slice: &'a [T]) -> Self {
        const { assert!(fits::<T, STEP>()) };
        // An empty slice would give a mask of all ones: refused, as `get` relies on it.
        assert!(
            slice.len().is_power_of_two(),
            "a masked slice is not empty and a power of two long"
        );
        Masked {
            slice,
            mask: (slice.len() - 1) << STEP,
        }
    }

    /// The element numbered `n & mask`.
    #[inline(always)]
    pub(crate) fn get(&self, n: usize) -> &'a T {
        let k = n & self.mask;
        #[allow(
            unsafe_code,
            reason = "a masked number names an element by construction"
        )]
        // SAFETY: `mask` is `(len - 1) << STEP` for a slice that is not empty and a power of
        // two long (`new`, `new_unchecked`, `shared`), so `k >> STEP <= len - 1`, and `k`'s
        // low `STEP` bits are clear: the offset is that of element `k >> STEP`.
        unsafe {
            &*self.slice.as_ptr().byte_add(offset::<T, STEP>(k))
        }
    }
}

impl<'a, T, const STEP: u32> Masked<&'a mut [T], STEP> {
    /// `slice`, with no check (two instructions an operation on the pool's hot path, where
    /// the slab always holds its sentinel and doubles when it grows).
    ///
    /// # Safety
    ///
    /// `slice` must not be empty and its length must be a power of two: else `get` would read
    /// past it.
    #[inline(always)]
    #[allow(unsafe_code, reason = "its callers vouch for the slice's length")]
    pub(crate) unsafe fn new_unchecked(slice: &'a mut [T]) -> Self {
        const { assert!(fits::<T, STEP>()) };
        debug_assert!(slice.len().is_power_of_two());
        let mask = slice.len().wrapping_sub(1) << STEP;
        Masked { slice, mask }
    }

    /// The element numbered `n & mask`.
    #[inline(always)]
    pub(crate) fn get(&self, n: usize) -> &T {
        self.shared().get(n)
    }

    /// The element numbered `n & mask`, mutably.
    #[inline(always)]
    pub(crate) fn get_mut(&mut self, n: usize) -> &mut T {
        self.reborrow().into_mut(n)
    }

    /// The element numbered `n & mask`, mutably, for as long as the slice is borrowed.
    #[inline(always)]
    pub(crate) fn into_mut(self, n: usize) -> &'a mut T {
        let k = n & self.mask;
        #[allow(
            unsafe_code,
            reason = "a masked number names an element by construction"
        )]
        // SAFETY: as in `get`; `self` gives up its borrow of the slice.
        unsafe {
            &mut *self.slice.as_mut_ptr().byte_add(offset::<T, STEP>(k))
        }
    }

    /// The same slice, borrowed for less long.
    #[inline(always)]
    pub(crate) fn reborrow(&mut self) -> Masked<&mut [T], STEP> {
        Masked {
            slice: &mut *self.slice,
            mask: self.mask,
        }
    }

    /// A shared view of the same slice.
    #[inline(always)]
    pub(crate) fn shared(&self) -> Masked<&[T], STEP> {
        Masked {
            slice: &*self.slice,
            mask: self.mask,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Masked;

    #[test]
    fn a_number_wraps_into_the_slice() {
        let mut v = [10, 11, 12, 13];
        let m = Masked::<&[i32], 0>::new(&v);
        assert_eq!((*m.get(1), *m.get(5), *m.get(usize::MAX)), (11, 11, 13));
        // SAFETY: not empty, a power of two long.
        #[allow(unsafe_code, reason = "the unchecked constructor under test")]
        let mut m = unsafe { Masked::<&mut [i32], 0>::new_unchecked(&mut v) };
        *m.get_mut(6) = 7;
        assert_eq!(*m.get(2), 7);
        assert_eq!(v, [10, 11, 7, 13]);
    }

    #[test]
    fn a_stepped_number_names_its_element_and_its_low_bits_are_dropped() {
        let v = [[1u64, 2], [3, 4], [5, 6], [7, 8]];
        let m = Masked::<&[[u64; 2]], 2>::new(&v);
        // Element k is numbered 4k; the low two bits and the bits past the length are masked.
        assert_eq!((m.get(0), m.get(4), m.get(12)), (&[1, 2], &[3, 4], &[7, 8]));
        assert_eq!(
            (m.get(7), m.get(16 + 8), m.get(usize::MAX)),
            (&[3, 4], &[5, 6], &[7, 8])
        );
    }

    #[test]
    #[should_panic(expected = "a masked slice is not empty and a power of two long")]
    fn an_empty_slice_is_refused() {
        let _ = Masked::<&[i32], 0>::new(&[]);
    }

    #[test]
    #[should_panic(expected = "a masked slice is not empty and a power of two long")]
    fn a_slice_of_other_length_is_refused() {
        let _ = Masked::<&[i32], 0>::new(&[1, 2, 3]);
    }
}
