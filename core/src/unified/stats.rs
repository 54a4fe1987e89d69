//! [`CachingStats`]: what a `CachingManagedAllocator` did, for tests, figures and tuning.

/// Counters of a `CachingManagedAllocator` since it was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CachingStats {
    /// Allocations served from a cached block (no driver call).
    pub cache_hits: u64,
    /// Allocations that took a new segment from the driver.
    pub cache_misses: u64,
    /// `cuMemAllocManaged` calls that succeeded (one per segment).
    pub segments_allocated: u64,
    /// `cuMemFree` calls (segments given back by `release` or on out of memory).
    pub segments_freed: u64,
    /// `cuMemAdvise` calls made (segment hints, and restoring the hints of moved blocks).
    pub advise_calls: u64,
    /// Times one stream was ordered after another to take its free blocks.
    pub stream_orderings: u64,
    /// Frees that took a block back into the cache.
    pub frees: u64,
    /// Bytes held from the driver now.
    pub held_bytes: u64,
    /// Most bytes held at once.
    pub peak_held_bytes: u64,
    /// Bytes in live blocks now (rounded sizes).
    pub live_bytes: u64,
    /// Live blocks now.
    pub live_blocks: u64,
}
