//! [`Masked`]: a non-empty slice indexed by `i & (len - 1)`, never out of bounds, so never
//! checked.
//!
//! The pool's tables (the block slab, the live map's groups) have power-of-two lengths, where
//! the mask changes no index they hold; masking then costs one `and` where a bounds check cost
//! a compare, a branch and, around it, reloads of the table's base and length (about a tenth
//! of the pool's instructions on W3 by callgrind). The one `unsafe` is local: an index masked
//! with the length minus one is below the length whatever it was.

/// A non-empty slice (`&[T]` or `&mut [T]`) with its length minus one.
#[derive(Clone, Copy)]
pub(crate) struct Masked<S> {
    slice: S,
    /// The slice's length minus one; set with the slice, never changed.
    mask: usize,
}

impl<'a, T> Masked<&'a [T]> {
    /// `slice`, which must not be empty.
    #[inline(always)]
    pub(crate) fn new(slice: &'a [T]) -> Self {
        let mask = slice.len() - 1;
        Masked { slice, mask }
    }

    /// The element at `i & mask`.
    #[inline(always)]
    pub(crate) fn get(&self, i: usize) -> &'a T {
        let k = i & self.mask;
        #[allow(unsafe_code, reason = "a masked index is in bounds by construction")]
        // SAFETY: `mask` is the slice's length minus one (`new`), and `k <= mask`.
        unsafe {
            self.slice.get_unchecked(k)
        }
    }
}

impl<'a, T> Masked<&'a mut [T]> {
    /// `slice`, which must not be empty.
    #[inline(always)]
    pub(crate) fn new(slice: &'a mut [T]) -> Self {
        let mask = slice.len() - 1;
        Masked { slice, mask }
    }

    /// The element at `i & mask`.
    #[inline(always)]
    pub(crate) fn get(&self, i: usize) -> &T {
        self.shared().get(i)
    }

    /// The element at `i & mask`, mutably.
    #[inline(always)]
    pub(crate) fn get_mut(&mut self, i: usize) -> &mut T {
        let k = i & self.mask;
        #[allow(unsafe_code, reason = "a masked index is in bounds by construction")]
        // SAFETY: as in `get`.
        unsafe {
            self.slice.get_unchecked_mut(k)
        }
    }

    /// A shared view of the same slice.
    #[inline(always)]
    pub(crate) fn shared(&self) -> Masked<&[T]> {
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
    fn an_index_wraps_into_the_slice() {
        let mut v = [10, 11, 12, 13];
        let m = Masked::<&[i32]>::new(&v);
        assert_eq!((*m.get(1), *m.get(5), *m.get(usize::MAX)), (11, 11, 13));
        let mut m = Masked::<&mut [i32]>::new(&mut v);
        *m.get_mut(6) = 7;
        assert_eq!(*m.get(2), 7);
        assert_eq!(v, [10, 11, 7, 13]);
    }
}
