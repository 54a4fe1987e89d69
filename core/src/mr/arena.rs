//! [`ArenaResource`]: RMM's `arena_memory_resource` — per-thread arenas for small requests
//! over a global arena for large ones and for the arenas' superblocks — as the per-thread
//! front of [`ShardedPoolResource`](crate::mr::ShardedPoolResource) with the
//! [`Superblocks`] policy.
//!
//! - **What it does**: the global arena is a [`PoolResource`](crate::mr::PoolResource) of
//!   `cuMemAlloc`-style chunks over the upstream. Each thread is given an arena on its first
//!   use, round robin; an arena carves requests up to [`ArenaResource::small_max`] (256 KiB)
//!   from superblocks of [`SUPERBLOCK`] (2 MiB) it takes from the global arena, with the same
//!   coalescing TLSF heap as the pool, and gives wholly free superblocks back to it when a free
//!   leaves one, keeping one as a cache. Larger requests go to the global arena directly.
//! - **Thread safety**: `Send + Sync`. Each arena has its own lock, so threads on different
//!   arenas never contend on small requests; the global arena's lock is taken only for large
//!   requests and superblock traffic.
//! - **Streams**: per-stream free lists inside every arena and in the global arena, with the
//!   pool's lazy, cached-event ordering when memory changes streams. Threads on per-thread
//!   default streams (RMM's intended use) never cross.
//! - **Clone and ownership**: not `Clone`; owns the global arena, which owns the upstream;
//!   dropping it waits for the device and gives every chunk back. Share it through an `Arc`.
//! - **Use and cost**: for many threads allocating at once: small requests cost an
//!   uncontended lock plus the pool's O(1) path; a free from a thread other than the
//!   allocating one looks through the other arenas (O(arenas)). Unlike
//!   [`ShardedPoolResource`](crate::mr::ShardedPoolResource), an arena neither sizes its chunks
//!   to its thread's live bytes nor takes other arenas' spare memory: what it gives back on a
//!   free, any thread may take again through the global lock.

use crate::mr::sharded_pool::PerThreadPool;
pub use crate::mr::sharded_pool::{Superblocks, SUPERBLOCK};

/// Per-thread arenas over a global arena (the module docs).
///
/// # Examples
///
/// ```
/// use emm_core::mr::{ArenaResource, CudaResource, DeviceMemoryResource};
/// use emm_core::StreamId;
/// # fn demo<D: emm_core::Driver>(driver: std::sync::Arc<D>) -> emm_core::mr::MrResult<()> {
/// let arena = ArenaResource::with_arenas(CudaResource::<D>::new(driver), 8);
/// let small = arena.allocate(4096, StreamId::DEFAULT)?; // from this thread's arena
/// let large = arena.allocate(8 << 20, StreamId::DEFAULT)?; // from the global arena
/// arena.deallocate(small, 4096, StreamId::DEFAULT)?;
/// arena.deallocate(large, 8 << 20, StreamId::DEFAULT)?;
/// # Ok(()) }
/// ```
pub type ArenaResource<Up> = PerThreadPool<Up, Superblocks>;
