//! [`BinningResource`]: size-class bins of fixed-size blocks in front of an upstream.
//!
//! - **What it does**: each bin is a [`FixedSizeResource`] of one block size drawing chunks
//!   from the shared upstream; a request goes to the smallest bin whose blocks hold it, and a
//!   request larger than every bin goes to the upstream directly.
//! - **Thread safety**: `Send + Sync`; each bin has its own lock, so requests of different
//!   classes never contend; the upstream's own locking covers large requests.
//! - **Streams**: each bin keeps per-stream free stacks with lazy event ordering (see
//!   `FixedSizeResource`); large requests follow the upstream's rules.
//! - **Clone and ownership**: not `Clone`; owns its upstream (shared with its bins through an
//!   `Arc`) and its bins; dropping it returns the bins' chunks, then drops the upstream.
//! - **Use and cost**: RMM's `binning_memory_resource`, usually over a `PoolResource`: many
//!   small allocations become O(1) stack operations with no coalescing, at the price of
//!   rounding each request up to its bin (up to 2× with power-of-two bins).

use std::sync::Arc;

use crate::driver::{DevicePtr, Driver, StreamId};
use crate::mr::fixed_size::FixedSizeResource;
use crate::mr::{assert_resource, DeviceMemoryResource, MrError, MrResult};

const NAME: &str = "BinningResource";

/// Fixed-size bins for small requests, the upstream for the rest.
///
/// # Examples
///
/// ```
/// use emm_core::mr::{BinningResource, CudaResource, PoolResource};
/// # fn demo<D: emm_core::Driver>(driver: std::sync::Arc<D>) -> emm_core::mr::MrResult<()> {
/// // Bins of 256 B, 512 B, … 1 MiB over a pool; larger requests go to the pool.
/// let r = BinningResource::with_range(PoolResource::new(CudaResource::<D>::new(driver)), 8, 20)?;
/// assert_eq!(r.bin_sizes().count(), 13);
/// # Ok(()) }
/// ```
pub struct BinningResource<Up: DeviceMemoryResource> {
    /// Sorted by block size.
    bins: Vec<FixedSizeResource<Arc<Up>>>,
    upstream: Arc<Up>,
}

impl<Up: DeviceMemoryResource> BinningResource<Up> {
    /// A resource with no bins yet: everything goes to `upstream` until bins are added.
    pub fn new(upstream: Up) -> Self {
        BinningResource {
            bins: Vec::new(),
            upstream: Arc::new(upstream),
        }
    }

    /// Bins for every power of two from `2^min_log2` to `2^max_log2` bytes (RMM's
    /// `binning_memory_resource(upstream, min, max)`; bins below 256 bytes are 256).
    ///
    /// # Errors
    ///
    /// [`MrError::InvalidArgument`] when `min_log2 > max_log2` or a bin is too large for
    /// [`FixedSizeResource`].
    pub fn with_range(upstream: Up, min_log2: u32, max_log2: u32) -> MrResult<Self> {
        if min_log2 > max_log2 || max_log2 >= 32 {
            return Err(MrError::InvalidArgument {
                resource: NAME,
                reason: format!(
                    "bin range 2^{min_log2} to 2^{max_log2} is empty or above 2^31 bytes"
                ),
            });
        }
        let mut r = Self::new(upstream);
        for k in min_log2.max(8)..=max_log2 {
            r = r.with_bin(1 << k)?;
        }
        Ok(r)
    }

    /// Adds a bin of `block_size` bytes (rounded up to 256); a bin of that size already
    /// present is kept.
    ///
    /// # Errors
    ///
    /// As [`FixedSizeResource::new`].
    pub fn with_bin(mut self, block_size: u64) -> MrResult<Self> {
        let bin = FixedSizeResource::new(Arc::clone(&self.upstream), block_size)?;
        let size = bin.block_size();
        let at = self.bins.partition_point(|b| b.block_size() < size);
        if self.bins.get(at).map(|b| b.block_size()) != Some(size) {
            self.bins.insert(at, bin);
        }
        Ok(self)
    }

    /// The block sizes of the bins, smallest first.
    pub fn bin_sizes(&self) -> impl Iterator<Item = u64> + '_ {
        self.bins.iter().map(|b| b.block_size())
    }

    /// The upstream resource.
    pub fn upstream(&self) -> &Up {
        &self.upstream
    }

    /// The bin serving `bytes`, if any.
    #[inline]
    fn bin_for(&self, bytes: u64) -> Option<&FixedSizeResource<Arc<Up>>> {
        // A handful of bins: a binary search is a few compares.
        self.bins
            .get(self.bins.partition_point(|b| b.block_size() < bytes))
    }
}

impl<Up: DeviceMemoryResource> std::fmt::Debug for BinningResource<Up> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(NAME)
            .field("bins", &self.bin_sizes().collect::<Vec<_>>())
            .field("upstream", &self.upstream.name())
            .finish()
    }
}

impl<Up: DeviceMemoryResource> BinningResource<Up> {
    /// Out of memory: empty bins may hold chunks the request needs; give them back and try
    /// once more — also when this release gave back nothing, since another thread's release
    /// may have freed the memory between the failure and now (the race loom found in the
    /// sharded pool).
    #[cold]
    #[inline(never)]
    fn allocate_after_release(&self, bytes: usize, stream: StreamId) -> MrResult<DevicePtr> {
        let _ = self.release();
        match self.bin_for(bytes as u64) {
            Some(bin) => bin.allocate(bytes, stream),
            None => self.upstream.allocate(bytes, stream),
        }
    }
}

impl<Up: DeviceMemoryResource> DeviceMemoryResource for BinningResource<Up> {
    fn name(&self) -> &'static str {
        NAME
    }

    /// # Time complexity
    ///
    /// O(log bins) to choose, then a bin's O(1), or the upstream's cost.
    #[inline]
    fn allocate(&self, bytes: usize, stream: StreamId) -> MrResult<DevicePtr> {
        if bytes == 0 {
            return Ok(DevicePtr::NULL);
        }
        let r = match self.bin_for(bytes as u64) {
            Some(bin) => bin.allocate(bytes, stream),
            None => self.upstream.allocate(bytes, stream),
        };
        match r {
            Err(e) if e.is_out_of_memory() => self.allocate_after_release(bytes, stream),
            r => r,
        }
    }

    /// # Time complexity
    ///
    /// As [`BinningResource::allocate`]: the size picks the same bin.
    #[inline]
    fn deallocate(&self, ptr: DevicePtr, bytes: usize, stream: StreamId) -> MrResult<()> {
        if ptr == DevicePtr::NULL && bytes == 0 {
            return Ok(());
        }
        match self.bin_for(bytes as u64) {
            Some(bin) => bin.deallocate(ptr, bytes, stream),
            None => self.upstream.deallocate(ptr, bytes, stream),
        }
    }

    fn memory_info(&self) -> Option<crate::driver::MemInfo> {
        self.upstream.memory_info()
    }

    /// The upstream's: the bins' chunks come from it.
    fn held(&self) -> Option<u64> {
        self.upstream.held()
    }

    /// Releases every bin's chunks when the bin has no live block, then the upstream's free
    /// memory.
    fn release(&self) -> MrResult<u64> {
        let mut released = 0;
        for bin in self.bins.iter() {
            released += bin.release()?;
        }
        Ok(released + self.upstream.release()?)
    }

    fn driver(&self) -> &dyn Driver {
        self.upstream.driver()
    }
}

const _: () = {
    #[expect(dead_code, reason = "a compile-time check: it only has to type-check")]
    fn check<D: Driver>() {
        assert_resource::<BinningResource<crate::mr::CudaResource<D>>>();
    }
};
