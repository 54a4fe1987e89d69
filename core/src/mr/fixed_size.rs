//! [`FixedSizeResource`]: constant-time allocation of blocks of one size, with per-stream free
//! lists.
//!
//! - **What it does**: takes chunks of several blocks from its upstream and hands out one
//!   block per request of up to the block size. Free blocks sit on a stack per stream, so
//!   allocation and free are a pop and a push. A request larger than the block size is
//!   refused with [`MrError::InvalidArgument`] (put the resource in a `BinningResource`).
//! - **Thread safety**: `Send + Sync`; one spin lock guards the stacks, held for a pop or a push.
//! - **Streams**: as `PoolResource`: blocks freed on stream A are reused on A at once; when B
//!   runs out it takes all of A's free blocks after recording a cached event on A and making
//!   B wait on it — lazily, so a free never calls the driver.
//! - **Clone and ownership**: not `Clone`; owns its upstream by value and gives every chunk
//!   back when dropped. Share it through an `Arc`.
//! - **Use and cost**: RMM's `fixed_size_memory_resource`, the bins of `BinningResource`.
//!   O(1) with no search at all; a request wastes the block size minus its size, so use it
//!   for sizes near the block size.

use crate::attribution::CallerScope;
use crate::driver::{DevicePtr, Driver, StreamId};
use crate::mr::detail::addr_map::AddrMap;
use crate::mr::detail::growth::CHUNK_GRANULARITY;
use crate::mr::detail::heap::round_to_granule;
use crate::mr::detail::stream_map::StreamMap;
use crate::mr::detail::stream_order::StreamOrder;
use crate::mr::{assert_resource, DeviceMemoryResource, MrError, MrResult};
use crate::sync::{SpinGuard, SpinMutex};

const NAME: &str = "FixedSizeResource";

/// The largest block size: live sizes are kept as `u32`.
pub const MAX_BLOCK_SIZE: u64 = 1 << 31;

/// The stream of a free stack that a sweep emptied, waiting for a new stream: no handle is
/// all ones.
const VACANT: StreamId = StreamId(u64::MAX);

/// Stacks kept before a refill looks for empty ones to reuse (as the pool's lists).
const STACK_SWEEP_MIN: usize = 64;

#[derive(Debug, Default)]
struct FixedState {
    /// Per stream, a stack of free block addresses; the first stream's is looked at inline.
    free: Vec<(StreamId, Vec<u64>)>,
    /// Stream → its stack in `free`, vacant stacks not included.
    stacks: StreamMap<usize>,
    /// Stacks a sweep emptied, their stream [`VACANT`], for new streams to take.
    vacant_stacks: Vec<usize>,
    /// `free.len()` at which the next sweep is due (0: [`STACK_SWEEP_MIN`]).
    sweep_at: usize,
    /// Live block → index of its record in `records`.
    live: AddrMap,
    /// Live blocks' records: (address, bytes requested); a vacant one is listed in `vacant`.
    records: Vec<(u64, u32)>,
    vacant: Vec<u32>,
    /// Upstream chunks: (base, size).
    chunks: Vec<(u64, u64)>,
    order: StreamOrder,
}

impl FixedState {
    /// Records `addr` live with `bytes` requested.
    #[inline]
    fn insert_live(&mut self, addr: u64, bytes: u32) {
        let i = match self.vacant.pop() {
            Some(i) => {
                self.records[i as usize] = (addr, bytes);
                i
            }
            None => {
                // Fewer records than blocks, each at least a granule of device memory.
                self.records.push((addr, bytes));
                self.records.len() as u32 - 1
            }
        };
        let records = &self.records;
        self.live.insert(addr, i, |j| records[j as usize].0);
    }

    /// Forgets live block `addr` and returns the bytes requested for it.
    #[inline]
    fn remove_live(&mut self, addr: u64) -> Option<u32> {
        let records = &self.records;
        let i = self.live.remove(addr, |j| records[j as usize].0)?;
        self.vacant.push(i);
        Some(records[i as usize].1)
    }

    /// The stack of `stream`, made on its first use. O(1) expected.
    #[inline]
    fn slot(&mut self, stream: StreamId) -> usize {
        if self.free.first().is_some_and(|(s, _)| *s == stream) {
            return 0;
        }
        match self.stacks.get(&stream) {
            Some(&i) => i,
            None => self.new_slot(stream),
        }
    }

    #[cold]
    fn new_slot(&mut self, stream: StreamId) -> usize {
        let i = self.vacant_stacks.pop().unwrap_or_else(|| {
            self.free.push((VACANT, Vec::new()));
            self.free.len() - 1
        });
        self.free[i].0 = stream;
        self.stacks.insert(stream, i);
        i
    }

    /// Once the resource has gone through many streams, makes every empty stack but the first
    /// and `keep` vacant, for new streams to reuse; due only when none is vacant and the
    /// stacks have doubled since the last sweep (amortized O(1) a new stream).
    fn sweep_stacks_if_due(&mut self, keep: usize) {
        if !self.vacant_stacks.is_empty() || self.free.len() < self.sweep_at.max(STACK_SWEEP_MIN) {
            return;
        }
        for (i, (s, stack)) in self.free.iter_mut().enumerate().skip(1) {
            if i != keep && *s != VACANT && stack.is_empty() {
                self.stacks.remove(s);
                *s = VACANT;
                self.vacant_stacks.push(i);
            }
        }
        self.sweep_at = 2 * (self.free.len() - self.vacant_stacks.len());
    }

    /// Streams with a free stack, vacant ones not counted.
    fn stack_count(&self) -> usize {
        self.free.len() - self.vacant_stacks.len()
    }
}

/// Blocks of one size, carved from upstream chunks, with per-stream free stacks.
pub struct FixedSizeResource<Up: DeviceMemoryResource> {
    upstream: Up,
    block_size: u64,
    blocks_per_chunk: u64,
    state: SpinMutex<FixedState>,
}

impl<Up: DeviceMemoryResource> FixedSizeResource<Up> {
    /// Blocks of `block_size` bytes (rounded up to 256) taken from `upstream` in chunks of
    /// 2 MiB or one block, whichever is larger.
    ///
    /// # Errors
    ///
    /// [`MrError::InvalidArgument`] for a block size of 0 or above [`MAX_BLOCK_SIZE`].
    pub fn new(upstream: Up, block_size: u64) -> MrResult<Self> {
        let blocks = CHUNK_GRANULARITY / block_size.max(1);
        Self::with_blocks_per_chunk(upstream, block_size, blocks.max(1))
    }

    /// Blocks of `block_size` bytes taken from `upstream` `blocks_per_chunk` at a time (RMM's
    /// default is 128).
    ///
    /// # Errors
    ///
    /// [`MrError::InvalidArgument`] for a block size of 0 or above [`MAX_BLOCK_SIZE`], or
    /// zero blocks per chunk.
    pub fn with_blocks_per_chunk(
        upstream: Up,
        block_size: u64,
        blocks_per_chunk: u64,
    ) -> MrResult<Self> {
        let bad = |reason: String| MrError::InvalidArgument {
            resource: NAME,
            reason,
        };
        if block_size == 0 || block_size > MAX_BLOCK_SIZE {
            return Err(bad(format!(
                "block size {block_size} is outside 1 to {MAX_BLOCK_SIZE} bytes"
            )));
        }
        if blocks_per_chunk == 0 {
            return Err(bad("blocks per chunk must be at least 1".into()));
        }
        let block_size = round_to_granule(block_size).unwrap_or(block_size);
        if block_size.checked_mul(blocks_per_chunk).is_none() {
            return Err(bad(format!(
                "{blocks_per_chunk} blocks of {block_size} bytes overflow a chunk"
            )));
        }
        Ok(FixedSizeResource {
            upstream,
            block_size,
            blocks_per_chunk,
            state: SpinMutex::new(FixedState::default()),
        })
    }

    /// The block size: the largest request served.
    pub fn block_size(&self) -> u64 {
        self.block_size
    }

    /// The upstream resource.
    pub fn upstream(&self) -> &Up {
        &self.upstream
    }

    /// Number of streams whose free stacks the resource keeps: at most about twice those
    /// holding free blocks once it has gone through many streams.
    pub fn stream_lists(&self) -> usize {
        self.lock().stack_count()
    }

    /// Bytes held from upstream.
    pub fn held_bytes(&self) -> u64 {
        self.lock().chunks.iter().map(|c| c.1).sum()
    }

    #[inline]
    fn lock(&self) -> SpinGuard<'_, FixedState> {
        self.state.lock()
    }

    /// The stream's stack is empty: take another stream's blocks, or a new chunk.
    #[cold]
    #[inline(never)]
    fn refill(&self, st: &mut FixedState, slot: usize, stream: StreamId) -> MrResult<()> {
        st.sweep_stacks_if_due(slot);
        let FixedState { stacks, order, .. } = &mut *st;
        order.prune(self.upstream.driver(), |s| stacks.contains_key(&s));
        if let Some(other) = (0..st.free.len()).find(|&s| s != slot && !st.free[s].1.is_empty()) {
            let source = st.free[other].0;
            {
                let _scope = CallerScope::enter(NAME);
                st.order.order(self.upstream.driver(), source, stream)?;
            }
            let mut taken = std::mem::take(&mut st.free[other].1);
            st.free[slot].1.append(&mut taken);
            st.free[other].1 = taken; // keep the emptied stack's capacity
            return Ok(());
        }
        let chunk = self.block_size * self.blocks_per_chunk;
        let n = usize::try_from(chunk).map_err(|_| MrError::OutOfMemory {
            resource: NAME,
            requested: chunk,
            available: None,
        })?;
        let base = self.upstream.allocate(n, stream)?;
        if base.0 % crate::mr::MIN_ALIGNMENT as u64 != 0 {
            let _ = self.upstream.deallocate(base, n, stream);
            return Err(MrError::InvalidArgument {
                resource: NAME,
                reason: format!(
                    "upstream {} returned unaligned {base}",
                    self.upstream.name()
                ),
            });
        }
        st.chunks.push((base.0, chunk));
        let stack = &mut st.free[slot].1;
        // Pushed in reverse so blocks go out in address order.
        stack.extend(
            (0..self.blocks_per_chunk)
                .rev()
                .map(|k| base.0 + k * self.block_size),
        );
        Ok(())
    }
}

impl<Up: DeviceMemoryResource> std::fmt::Debug for FixedSizeResource<Up> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.lock();
        f.debug_struct(NAME)
            .field("block_size", &self.block_size)
            .field("chunks", &st.chunks.len())
            .field("free", &st.free.iter().map(|s| s.1.len()).sum::<usize>())
            .finish()
    }
}

impl<Up: DeviceMemoryResource> DeviceMemoryResource for FixedSizeResource<Up> {
    fn name(&self) -> &'static str {
        NAME
    }

    /// # Time complexity
    ///
    /// O(1): a stack pop and a map insert; O(free blocks of one other stream) when taking that
    /// stream's blocks; one upstream call for a new chunk.
    #[inline]
    fn allocate(&self, bytes: usize, stream: StreamId) -> MrResult<DevicePtr> {
        if bytes == 0 {
            return Ok(DevicePtr::NULL);
        }
        let bytes = bytes as u64;
        if bytes > self.block_size {
            return Err(MrError::InvalidArgument {
                resource: NAME,
                reason: format!(
                    "{bytes} bytes exceed the block size {}; serve larger sizes from a \
                     BinningResource or PoolResource",
                    self.block_size
                ),
            });
        }
        let mut st = self.lock();
        let slot = st.slot(stream);
        // Budget: one pop, one map insert.
        let addr = match st.free[slot].1.pop() {
            Some(a) => a,
            None => {
                self.refill(&mut st, slot, stream)?;
                st.free[slot].1.pop().ok_or(MrError::OutOfMemory {
                    resource: NAME,
                    requested: bytes,
                    available: None,
                })?
            }
        };
        // `bytes <= block_size <= MAX_BLOCK_SIZE` fits in u32.
        st.insert_live(addr, bytes as u32);
        Ok(DevicePtr(addr))
    }

    /// # Time complexity
    ///
    /// O(1): a map removal and a stack push.
    #[inline]
    fn deallocate(&self, ptr: DevicePtr, bytes: usize, stream: StreamId) -> MrResult<()> {
        if ptr == DevicePtr::NULL && bytes == 0 {
            return Ok(());
        }
        let mut st = self.lock();
        let refuse = |reason: String| MrError::InvalidFree {
            resource: NAME,
            ptr,
            bytes: bytes as u64,
            reason,
        };
        let requested = st.remove_live(ptr.0).ok_or_else(|| {
            refuse(
                "no live block starts there: the pointer came from elsewhere, points inside \
                 a block, or was already freed"
                    .into(),
            )
        })?;
        if u64::from(requested) != bytes as u64 {
            st.insert_live(ptr.0, requested);
            return Err(refuse(format!(
                "it was allocated with {requested} bytes; free it with the size it was \
                 allocated with"
            )));
        }
        let slot = st.slot(stream);
        st.free[slot].1.push(ptr.0);
        Ok(())
    }

    /// Gives every chunk back when no block is live (blocks are not tracked per chunk, so a
    /// single live block keeps them all).
    ///
    /// # Time complexity
    ///
    /// O(chunks + free blocks), plus a context synchronize when there is something to give back.
    fn release(&self) -> MrResult<u64> {
        let mut st = self.lock();
        if !st.live.is_empty() || st.chunks.is_empty() {
            return Ok(0);
        }
        let _scope = CallerScope::enter(NAME);
        // Free blocks were last used on streams the default stream may not follow.
        self.upstream.driver().context_synchronize()?;
        let mut released = 0;
        let mut first_err = None;
        for (base, size) in st.chunks.drain(..) {
            released += size;
            // Chunk sizes came from `usize` requests, so they fit.
            if let Err(e) =
                self.upstream
                    .deallocate(DevicePtr(base), size as usize, StreamId::DEFAULT)
            {
                first_err.get_or_insert(e);
            }
        }
        st.free.clear();
        st.stacks.clear();
        st.vacant_stacks.clear();
        first_err.map_or(Ok(released), Err)
    }

    fn driver(&self) -> &dyn Driver {
        self.upstream.driver()
    }

    /// The upstream's: the chunks come from it.
    fn held(&self) -> Option<u64> {
        self.upstream.held()
    }
}

impl<Up: DeviceMemoryResource> Drop for FixedSizeResource<Up> {
    fn drop(&mut self) {
        let st = self.state.get_mut();
        let _scope = CallerScope::enter(NAME);
        st.order.destroy(self.upstream.driver());
        // Blocks were last used on streams the default stream may not be ordered with: wait
        // for all work before the chunks go back (and may be reused at once).
        let _ = self.upstream.driver().context_synchronize();
        for (base, size) in st.chunks.drain(..) {
            // Chunk sizes came from `usize` requests, so they fit.
            let _ = self
                .upstream
                .deallocate(DevicePtr(base), size as usize, StreamId::DEFAULT);
        }
    }
}

const _: () = {
    #[expect(dead_code, reason = "a compile-time check: it only has to type-check")]
    fn check<D: Driver>() {
        assert_resource::<FixedSizeResource<crate::mr::CudaResource<D>>>();
    }
};
