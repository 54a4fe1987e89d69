//! Growing a [`PoolResource`]: a chunk from upstream taken with the lock let go, or more of
//! the expandable segment mapped under it.

use crate::attribution::CallerScope;
use crate::driver::{DevicePtr, StreamId};
use crate::mr::detail::growth::{chunk_size, should_trim};
use crate::mr::detail::pool_backing::PoolBacking;
use crate::mr::detail::segment::PoolParts;
use crate::mr::{DeviceMemoryResource, MrError, MrResult};
use crate::sync::SpinGuard;

use super::{PoolResource, PoolState, NAME, OWN_CLASS};

impl<Up: DeviceMemoryResource> PoolResource<Up> {
    /// Takes a chunk for a request of `size` bytes from upstream and serves the request from
    /// it, with the lock let go over the upstream calls: a `cuMemAlloc` of a chunk took about
    /// 100 µs on the H100 host, and with the lock held through it, 16 threads of
    /// `ShardedPoolResource` (W1 on own streams) waited 1.6 ms on average for each call into
    /// the shared pool. Fully free chunks are taken
    /// out under the lock and given back without it (the trim before growing); chunks in
    /// flight count against the maximum size. On out of memory, every free chunk goes back,
    /// and the exact request is tried once more with the lock held.
    pub(super) fn grow_unlocked<'a>(
        &'a self,
        mut st: SpinGuard<'a, PoolState>,
        size: u64,
        bytes: u64,
        stream: StreamId,
    ) -> (MrResult<DevicePtr>, SpinGuard<'a, PoolState>) {
        let oom = |available| MrError::OutOfMemory {
            resource: NAME,
            requested: bytes,
            available,
        };
        let held = st.heap.held().saturating_add(st.pending);
        // Chunks are whole granules, so the room left under the maximum is counted in them.
        let room = self
            .options
            .maximum_size
            .map(|m| m.saturating_sub(held) & !(crate::mr::MIN_ALIGNMENT as u64 - 1));
        let Some(mut chunk) = chunk_size(self.options.growth, size, held) else {
            return (Err(oom(room)), st);
        };
        if let Some(room) = room {
            if size > room {
                return (Err(oom(Some(room))), st);
            }
            chunk = chunk.min(room);
        }
        // Fully free chunks are all smaller than this request (or one would have served it):
        // give them back rather than hold them beside a new chunk.
        let trimmed = if should_trim(held, chunk, st.heap.live_bytes(), size) {
            st.heap.take_free_chunks(0)
        } else {
            Vec::new()
        };
        st.pending += chunk;
        drop(st);
        for (c, on) in trimmed {
            // A chunk the upstream refuses is forgotten: it was free.
            let _ = self.give_back(c.base, c.size, on);
        }
        let got = self.upstream_allocate(chunk, stream);
        let mut st = self.lock();
        st.pending -= chunk;
        let got = match got {
            Ok(p) => p,
            Err(e) if e.is_out_of_memory() => {
                let _ = self.release_all_free(&mut st);
                chunk = size;
                match self.upstream_allocate(chunk, stream) {
                    Ok(p) => p,
                    Err(MrError::OutOfMemory { available, .. }) => {
                        return (Err(oom(available)), st)
                    }
                    Err(e) if e.is_out_of_memory() => return (Err(oom(None)), st),
                    Err(e) => return (Err(e), st),
                }
            }
            Err(e) => return (Err(e), st),
        };
        // Other threads may have used the records reserved before the lock was let go.
        let slot = st.heap.slot(stream);
        if let Err(full) = st
            .heap
            .reserve_records(2)
            .and_then(|()| st.heap.add_chunk(slot, got.0, chunk))
        {
            // Not recorded: the chunk goes back, and the pool is as it was.
            drop(st);
            let _ = self.give_back(got.0, chunk, stream);
            return (Err(MrError::records_full(NAME, bytes, full)), self.lock());
        }
        let p = st
            .heap
            .allocate_with(OWN_CLASS, slot, size, bytes)
            .map(DevicePtr);
        (p.ok_or_else(|| oom(None)), st)
    }

    /// Maps more of the expandable segment for a request of `size` bytes and serves the
    /// request from it, the lock held (the segment maps in order); `None` when the pool takes
    /// chunks instead.
    pub(super) fn grow_segment(
        &self,
        st: &mut PoolState,
        size: u64,
        bytes: u64,
        stream: StreamId,
    ) -> Option<MrResult<DevicePtr>> {
        let held = st.heap.held();
        let PoolState {
            heap,
            order,
            backing: PoolBacking::Segment(seg),
            ..
        } = st
        else {
            return None;
        };
        let _scope = CallerScope::enter(NAME);
        let parts = PoolParts {
            heap,
            order,
            driver: self.upstream.driver(),
            growth: self.options.growth,
            room: self.options.maximum_size.map(|m| m.saturating_sub(held)),
        };
        Some(
            seg.allocate_growing(parts, NAME, size, bytes, stream)
                .map(DevicePtr),
        )
    }

    pub(super) fn upstream_allocate(&self, chunk: u64, stream: StreamId) -> MrResult<DevicePtr> {
        let n = usize::try_from(chunk).map_err(|_| MrError::OutOfMemory {
            resource: NAME,
            requested: chunk,
            available: None,
        })?;
        let p = self.upstream.allocate(n, stream)?;
        if p.0 % crate::mr::MIN_ALIGNMENT as u64 != 0 || p == DevicePtr::NULL {
            // A chunk we cannot carve aligned blocks from: give it back and say so.
            let _ = self.upstream.deallocate(p, n, stream);
            return Err(MrError::InvalidArgument {
                resource: NAME,
                reason: format!("upstream {} returned unaligned {p}", self.upstream.name()),
            });
        }
        Ok(p)
    }
}
