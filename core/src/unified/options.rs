//! [`CachingManagedOptions`], [`ManagedLimit`] and [`GiveBack`]: how a
//! `CachingManagedAllocator` rounds requests, how large its segments are, how much managed
//! memory it may hold and when it gives segments back.
//!
//! The defaults start from PyTorch's `CUDACachingAllocator`, as the RFC asks (512-byte
//! rounding, 2 MiB small segments for requests up to 1 MiB, requests of 10 MiB or more in a
//! segment of their own), with two changes measured on the training workload (the
//! book's "Unified memory"): large segments of 128 MiB instead of 20 MiB (3–8× fewer
//! `cuMemAllocManaged`, 1–4 % less virtual time; the price is address space, since untouched
//! managed pages take no device memory), and giving back segments whose pages are displaced
//! ([`GiveBack::Displaced`]: 2.1× less virtual time at 2× device memory). Rounding large
//! requests to a page (64 KiB) or to 2 MiB gained nothing and held more.

use crate::mr::detail::growth::CHUNK_GRANULARITY;
use crate::unified::error::UnifiedError;

/// The fraction of the device's free memory a managed segment may take when oversubscription
/// is not allowed: the same 90 % the CUDA backend holds `cuMemAllocManaged` to.
pub const MANAGED_FREE_FRACTION: f64 = 0.9;

/// How much managed memory a `CachingManagedAllocator` may hold.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum ManagedLimit {
    /// Take a new segment only while it fits in this fraction of the device's free memory
    /// and everything held stays within this fraction of the device's total memory. Asking a
    /// real GPU for more managed memory than it has free can hang it.
    FractionOfFree(f64),
    /// No limit: managed memory may exceed device memory and pages are evicted to the host
    /// (oversubscription). For the simulated GPU, or hardware known to handle it.
    Oversubscribe,
}

/// When a `CachingManagedAllocator` gives a wholly free segment back to the driver, besides
/// `release` and out of memory (when it always does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GiveBack {
    /// Never: every freed block stays cached (PyTorch's caching allocator).
    Never,
    /// When a free empties a segment whose pages are likely displaced: the block had been
    /// moved away from its pool's location, or the cache holds more managed memory than the
    /// device has (oversubscription, where cached pages get evicted). Reusing such a segment
    /// would migrate dead data back on first touch; a fresh one is placed where it is first
    /// touched. Before taking a segment that would oversubscribe, wholly free ones go back too.
    Displaced,
}

/// The largest rounding [`CachingManagedOptions::validate`] accepts: 1 TiB.
pub const MAX_ROUNDING: u64 = 1 << 40;

/// The sizing of a `CachingManagedAllocator`.
///
/// # Examples
///
/// ```
/// use emm_core::unified::{CachingManagedOptions, ManagedLimit};
///
/// let o = CachingManagedOptions::default().limit(ManagedLimit::Oversubscribe);
/// assert_eq!(o.min_block, 512);
/// assert_eq!(o.round(1), Some(512));
/// assert_eq!(o.round(3 << 20), Some(3 << 20));
/// assert!(o.validate().is_ok());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CachingManagedOptions {
    /// Every request up to `small_size` is rounded up to a multiple of this (a power of two,
    /// at least 256).
    pub min_block: u64,
    /// Requests up to this many bytes are served from small segments.
    pub small_size: u64,
    /// Bytes of a small segment.
    pub small_segment: u64,
    /// Bytes of a large segment, for requests above `small_size` and below `min_large_alloc`.
    pub large_segment: u64,
    /// Requests of at least this many bytes get a segment of their own size (rounded to
    /// 2 MiB) when no cached block fits.
    pub min_large_alloc: u64,
    /// Requests above `small_size` are rounded up to a multiple of this (a power of two, at
    /// least `min_block`).
    pub large_rounding: u64,
    /// How much managed memory the allocator may hold.
    pub limit: ManagedLimit,
    /// When wholly free segments go back to the driver.
    pub give_back: GiveBack,
}

impl CachingManagedOptions {
    /// The defaults, usable in constants.
    pub const DEFAULT: CachingManagedOptions = CachingManagedOptions {
        min_block: 512,
        small_size: 1 << 20,
        small_segment: 2 << 20,
        large_segment: 128 << 20,
        min_large_alloc: 10 << 20,
        large_rounding: 512,
        limit: ManagedLimit::FractionOfFree(MANAGED_FREE_FRACTION),
        give_back: GiveBack::Displaced,
    };

    /// Sets the limit on managed memory held.
    ///
    /// Default: [`ManagedLimit::FractionOfFree`] of [`MANAGED_FREE_FRACTION`].
    pub fn limit(mut self, limit: ManagedLimit) -> Self {
        self.limit = limit;
        self
    }

    /// Sets when wholly free segments go back to the driver.
    ///
    /// Default: [`GiveBack::Displaced`].
    pub fn give_back(mut self, give_back: GiveBack) -> Self {
        self.give_back = give_back;
        self
    }

    /// Sets the rounding of small requests.
    ///
    /// Default: 512 bytes.
    pub fn min_block(mut self, bytes: u64) -> Self {
        self.min_block = bytes;
        self
    }

    /// Sets the rounding of requests above `small_size`.
    ///
    /// Default: 512 bytes.
    pub fn large_rounding(mut self, bytes: u64) -> Self {
        self.large_rounding = bytes;
        self
    }

    /// Sets the small and large segment sizes.
    ///
    /// Default: 2 MiB and 128 MiB (PyTorch's are 2 MiB and 20 MiB).
    pub fn segments(mut self, small: u64, large: u64) -> Self {
        self.small_segment = small;
        self.large_segment = large;
        self
    }

    /// `bytes` rounded as the allocator rounds it, or `None` when that overflows.
    #[inline]
    pub fn round(&self, bytes: u64) -> Option<u64> {
        let unit = if bytes <= self.small_size {
            self.min_block
        } else {
            self.large_rounding
        };
        Some(bytes.checked_add(unit - 1)? & !(unit - 1))
    }

    /// Whether a request of `bytes` is served from small segments.
    #[inline]
    pub fn is_small(&self, bytes: u64) -> bool {
        bytes <= self.small_size
    }

    /// Checks the options, saying which field is wrong and what is accepted.
    ///
    /// # Errors
    ///
    /// [`UnifiedError::InvalidConfig`] naming the field.
    pub fn validate(&self) -> Result<(), UnifiedError> {
        let bad = |setting: &'static str, value: String, reason: &str| {
            Err(UnifiedError::InvalidConfig {
                setting,
                value,
                reason: reason.to_string(),
            })
        };
        if !self.min_block.is_power_of_two() || self.min_block < 256 {
            return bad(
                "CachingManagedOptions.min_block",
                self.min_block.to_string(),
                "give a power of two of at least 256 bytes (the alignment of every block)",
            );
        }
        // A live block keeps its rounding (size less bytes asked) in 48 bits.
        if !self.large_rounding.is_power_of_two()
            || self.large_rounding < self.min_block
            || self.large_rounding > MAX_ROUNDING
        {
            return bad(
                "CachingManagedOptions.large_rounding",
                self.large_rounding.to_string(),
                "give a power of two of at least min_block and at most 1 TiB",
            );
        }
        if self.small_size == 0 || self.small_segment < self.small_size {
            return bad(
                "CachingManagedOptions.small_segment",
                self.small_segment.to_string(),
                "give a small segment of at least small_size bytes (and small_size above 0)",
            );
        }
        if self.large_segment < CHUNK_GRANULARITY || self.min_large_alloc <= self.small_size {
            return bad(
                "CachingManagedOptions.large_segment",
                self.large_segment.to_string(),
                "give a large segment of at least 2 MiB and min_large_alloc above small_size",
            );
        }
        if let ManagedLimit::FractionOfFree(f) = self.limit {
            if !(f > 0.0 && f <= 1.0) {
                return bad(
                    "CachingManagedOptions.limit",
                    f.to_string(),
                    "give a fraction of free memory in (0, 1]",
                );
            }
        }
        Ok(())
    }
}

impl Default for CachingManagedOptions {
    fn default() -> Self {
        Self::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_follows_the_size_class() {
        let o = CachingManagedOptions::default().large_rounding(64 << 10);
        assert_eq!(o.round(0), Some(0));
        assert_eq!(o.round(513), Some(1024));
        assert_eq!(o.round(1 << 20), Some(1 << 20));
        assert_eq!(o.round((1 << 20) + 1), Some((1 << 20) + (64 << 10)));
        assert_eq!(o.round(u64::MAX), None);
    }

    #[test]
    fn validate_names_the_bad_field() {
        let e = CachingManagedOptions::default()
            .min_block(300)
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("min_block"), "{e}");
        let e = CachingManagedOptions::default()
            .large_rounding(MAX_ROUNDING * 2)
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("at most 1 TiB"), "{e}");
        assert!(CachingManagedOptions::default()
            .large_rounding(MAX_ROUNDING)
            .validate()
            .is_ok());
        let e = CachingManagedOptions::default()
            .limit(ManagedLimit::FractionOfFree(1.5))
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("(0, 1]"), "{e}");
        let e = CachingManagedOptions::default()
            .segments(512 << 10, 20 << 20)
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("small_segment"), "{e}");
        assert!(CachingManagedOptions::default().validate().is_ok());
    }
}
