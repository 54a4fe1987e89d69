//! [`CacheState`]: what a `CachingManagedAllocator`'s mutex guards — its pools of segments,
//! one per kind of block, with no driver call in here.

use crate::mr::detail::heap::{Chunk, CoalescingHeap};
use crate::mr::detail::stream_order::StreamOrder;
use crate::unified::error::UnifiedError;
use crate::unified::hints::Placement;
use crate::unified::stats::CachingStats;

/// Which segments a block comes from: blocks of one placement share segments (advised once,
/// when taken), and so do blocks of one size class and attachment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PoolKey {
    pub placement: Placement,
    pub attach_global: bool,
    pub small: bool,
}

/// The segments of one [`PoolKey`], carved by the pool's heap.
#[derive(Debug)]
pub(crate) struct Pool {
    pub key: PoolKey,
    pub heap: CoalescingHeap,
}

/// The allocator's state: pools, stream ordering, counters, failures kept for later.
#[derive(Debug, Default)]
pub(crate) struct CacheState {
    pub pools: Vec<Pool>,
    pub order: StreamOrder,
    pub stats: CachingStats,
    pub failures: Vec<UnifiedError>,
    /// The device's memory, read on the first growth.
    pub device_total: Option<u64>,
}

impl CacheState {
    /// The pool of `key`, if it exists. O(pools): a handful.
    #[inline]
    pub(crate) fn pool_of(&self, key: PoolKey) -> Option<usize> {
        self.pools.iter().position(|p| p.key == key)
    }

    /// The pool of `key`, made empty on first use.
    pub(crate) fn pool(&mut self, key: PoolKey) -> usize {
        self.pool_of(key).unwrap_or_else(|| {
            self.pools.push(Pool {
                key,
                heap: CoalescingHeap::default(),
            });
            self.pools.len() - 1
        })
    }

    /// The pool holding the live block at `addr`. O(pools) map probes.
    #[inline]
    pub(crate) fn pool_holding(&self, addr: u64) -> Option<usize> {
        self.pools.iter().position(|p| p.heap.is_live(addr))
    }

    /// Bytes held from the driver.
    pub(crate) fn held(&self) -> u64 {
        self.pools.iter().map(|p| p.heap.held()).sum()
    }

    /// Whether holding `extra` more bytes would hold more managed memory than the device has:
    /// then cached pages compete with live ones for the device, and reusing a cached block
    /// whose pages were evicted migrates dead data back.
    pub(crate) fn oversubscribed_with(&self, extra: u64) -> bool {
        self.device_total
            .is_some_and(|total| self.held().saturating_add(extra) > total)
    }

    /// Takes every wholly free segment out of the pools (no stream unification).
    pub(crate) fn take_free_segments(&mut self) -> Vec<Chunk> {
        let mut out = Vec::new();
        for p in &mut self.pools {
            out.extend(p.heap.take_free_chunks(0).into_iter().map(|(c, _)| c));
        }
        out
    }

    /// Keeps a failure no caller can be told of now (a free in a finalizer, a segment the
    /// driver would not take back), for `take_failures`; the first few are kept.
    pub(crate) fn record(&mut self, e: UnifiedError) {
        const KEPT: usize = 16;
        if self.failures.len() < KEPT {
            self.failures.push(e);
        }
    }

    /// The counters, with bytes held and live as of now.
    pub(crate) fn snapshot(&self) -> CachingStats {
        let mut s = self.stats;
        s.held_bytes = self.held();
        s.live_bytes = self.pools.iter().map(|p| p.heap.live_bytes()).sum();
        s.live_blocks = self.pools.iter().map(|p| p.heap.live_count() as u64).sum();
        s
    }
}
