//! [`Registry`]: the host's record of every chunk a plugin holds and every live allocation —
//! what lets the host check each answer and keep every allocation valid through a quarantine.
//!
//! Every check on the allocation path is O(1) in the number of live allocations: the chunk is
//! an index into a vector, the live allocations are a hash table by address ([`LiveMap`]), and
//! each [`Chunk`] keeps a bitmap of where its live allocations start, which answers "does
//! anything start inside the answer, and does the allocation before it reach into it" in a
//! few word reads.

use emm_core::units::Bytes;
use emm_core::DevicePtr;

use crate::abi::{Answer, MAX_CHUNK_HANDLE};
pub(crate) use crate::chunk::Chunk;
use crate::chunk::GRANULE_SHIFT;
use crate::fault::{host_bug, PluginFault, Rule};
use crate::live_map::{Live, LiveMap};

/// The `origin` of an allocation served by the fallback resource rather than a chunk.
pub(crate) const FALLBACK: u32 = 0;

/// What the host knows, independent of the guest. Handles are dense (`1..`), reused after a
/// chunk is returned, so a guest can index arrays with them.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    chunks: Vec<Option<Chunk>>,
    free_handles: Vec<u32>,
    live: LiveMap,
    /// Bytes of all chunks held (current and orphaned).
    pub held_bytes: u64,
    /// Bytes of live allocations (fallback included).
    pub live_bytes: u64,
    /// The current instance generation.
    pub generation: u32,
}

impl Registry {
    /// Records a new chunk for the current generation and returns its handle. Its start
    /// bitmap takes one bit of host memory per 256 bytes of chunk.
    ///
    /// # Errors
    ///
    /// A breach of [`Rule::TooManyChunks`] when every handle is in use; a host bug for a
    /// chunk over 1 TiB, which `upstream_alloc` never asks for.
    pub fn add_chunk(&mut self, base: DevicePtr, size: u64) -> Result<u32, PluginFault> {
        // Sizes above `MAX_CHUNK_BYTES` never get here (`upstream_alloc` refuses them).
        let Some(chunk) = Chunk::new(base, size, self.generation) else {
            return Err(host_bug!());
        };
        let too_many = || PluginFault::BadAnswer {
            rule: Rule::TooManyChunks,
            detail: format!("upstream_alloc({size}) with every handle in use"),
        };
        let handle = match self.free_handles.pop() {
            Some(h) => h,
            None => {
                let next = u32::try_from(self.chunks.len() + 1)
                    .ok()
                    .filter(|&h| h <= MAX_CHUNK_HANDLE)
                    .ok_or_else(too_many)?;
                self.chunks.push(None);
                next
            }
        };
        let slot = self.slot_mut(handle).ok_or_else(too_many)?;
        *slot = Some(chunk);
        self.held_bytes = self.held_bytes.saturating_add(size);
        Ok(handle)
    }

    #[inline]
    fn slot_mut(&mut self, handle: u32) -> Option<&mut Option<Chunk>> {
        let i = usize::try_from(handle.checked_sub(1)?).ok()?;
        self.chunks.get_mut(i)
    }

    #[inline]
    fn chunk_mut(&mut self, handle: u32) -> Option<&mut Chunk> {
        self.slot_mut(handle)?.as_mut()
    }

    /// The chunk behind `handle`, of any generation.
    #[inline]
    pub fn chunk(&self, handle: u32) -> Option<&Chunk> {
        let i = usize::try_from(handle.checked_sub(1)?).ok()?;
        self.chunks.get(i)?.as_ref()
    }

    /// Checks an answer to a request of `size` bytes aligned to `align` (a power of two; less
    /// than 256 counts as 256, as every request asks): a chunk of the current generation,
    /// aligned, inside the chunk, overlapping no live allocation.
    ///
    /// # Time complexity
    ///
    /// O(1) in the number of live allocations: two bitmap queries of O(log64 granules) words
    /// and at most one hash probe.
    #[inline]
    pub fn check_answer(
        &self,
        a: Answer,
        size: u64,
        align: u64,
    ) -> Result<DevicePtr, (Rule, String)> {
        let Some(chunk) = self
            .chunk(a.chunk)
            .filter(|c| c.generation == self.generation)
        else {
            return Err(not_held(a));
        };
        let addr = chunk.base.0.checked_add(a.offset);
        let end = a.offset.checked_add(size);
        let (Some(addr), Some(end)) = (addr, end) else {
            return Err(outside(a, size, chunk));
        };
        if end > chunk.size {
            return Err(outside(a, size, chunk));
        }
        // At least 256 (every request asks for that much): the start bitmaps count in granules.
        let align = align.max(1 << GRANULE_SHIFT);
        if addr & (align - 1) != 0 {
            return Err(misaligned(a, addr, align));
        }
        let size_at = |start| self.live.get(start).map(|l| l.size);
        if let Some(other) = chunk.overlap(addr, size, size_at) {
            return Err(self.overlap(a, size, addr, other));
        }
        Ok(DevicePtr(addr))
    }

    /// Records a checked allocation. `origin` is a chunk handle or [`FALLBACK`].
    ///
    /// # Time complexity
    ///
    /// Expected O(1).
    #[inline]
    pub fn insert_live(&mut self, ptr: DevicePtr, size: u64, origin: u32) {
        if let Some(chunk) = self.chunk_mut(origin) {
            chunk.record(ptr.0);
        }
        self.live.insert(ptr.0, Live { size, origin });
        self.live_bytes = self.live_bytes.saturating_add(size);
    }

    /// Checks an answer and records it: [`Registry::check_answer`] then
    /// [`Registry::insert_live`].
    ///
    /// # Time complexity
    ///
    /// O(1) in the number of live allocations.
    #[inline]
    pub fn accept(
        &mut self,
        a: Answer,
        size: u64,
        align: u64,
    ) -> Result<DevicePtr, (Rule, String)> {
        let ptr = self.check_answer(a, size, align)?;
        self.insert_live(ptr, size, a.chunk);
        Ok(ptr)
    }

    /// Takes a live allocation out, when `ptr` is one and `size` is its size; otherwise says
    /// why not and changes nothing.
    ///
    /// # Time complexity
    ///
    /// Expected O(1).
    #[inline]
    pub fn remove_live(&mut self, ptr: DevicePtr, size: u64) -> Result<Live, String> {
        let live = match self.live.remove_if(ptr.0, |l| l.size == size) {
            Some(Ok(live)) => live,
            Some(Err(other)) => return Err(wrong_size(other)),
            None => return Err(not_live()),
        };
        self.live_bytes = self.live_bytes.saturating_sub(size);
        if let Some(chunk) = self.chunk_mut(live.origin) {
            chunk.forget(ptr.0);
        }
        Ok(live)
    }

    /// Takes chunk `handle` out for `upstream_free`: it must be the current generation's and
    /// hold nothing live.
    pub fn release_chunk(&mut self, handle: u32) -> Result<Chunk, (Rule, String)> {
        let generation = self.generation;
        let Some(slot) = self.slot_mut(handle) else {
            return Err(foreign(handle));
        };
        match slot {
            Some(c) if c.generation == generation && c.live == 0 => {}
            Some(c) if c.generation == generation => {
                return Err((
                    Rule::ChunkInUse,
                    format!(
                        "upstream_free({handle}): chunk {handle} ({}) still holds {} live \
                         allocation(s)",
                        Bytes(c.size),
                        c.live
                    ),
                ))
            }
            _ => return Err(foreign(handle)),
        }
        let chunk = slot.take().ok_or_else(|| foreign(handle))?;
        self.free_handles.push(handle);
        self.held_bytes = self.held_bytes.saturating_sub(chunk.size);
        Ok(chunk)
    }

    /// Starts a new generation: every chunk held so far becomes an orphan.
    pub fn orphan_all(&mut self) {
        self.generation = self.generation.wrapping_add(1);
    }

    /// Takes out every orphaned chunk that holds nothing live (to return upstream).
    pub fn take_empty_orphans(&mut self) -> Vec<Chunk> {
        self.take_where(|c, generation| c.generation != generation && c.live == 0)
    }

    /// Takes out every chunk, live or not (when the resource is dropped).
    pub fn take_all(&mut self) -> Vec<Chunk> {
        self.live.clear();
        self.live_bytes = 0;
        self.take_where(|_, _| true)
    }

    fn take_where(&mut self, pick: impl Fn(&Chunk, u32) -> bool) -> Vec<Chunk> {
        let generation = self.generation;
        let mut out = Vec::new();
        for (i, slot) in self.chunks.iter_mut().enumerate() {
            if slot.as_ref().is_some_and(|c| pick(c, generation)) {
                if let (Some(c), Ok(h)) = (slot.take(), u32::try_from(i + 1)) {
                    self.held_bytes = self.held_bytes.saturating_sub(c.size);
                    self.free_handles.push(h);
                    out.push(c);
                }
            }
        }
        out
    }

    /// Number of chunks held (current and orphaned), in O(1).
    #[inline]
    pub fn held_chunks(&self) -> usize {
        self.chunks.len() - self.free_handles.len()
    }

    /// Number of chunks held.
    pub fn chunk_count(&self) -> usize {
        self.chunks.iter().filter(|c| c.is_some()).count()
    }

    /// Number of live allocations.
    pub fn live_count(&self) -> usize {
        self.live.len()
    }
}

impl Registry {
    /// The breach of an answer at `addr` overlapping the live allocation at `other`.
    #[cold]
    #[inline(never)]
    fn overlap(&self, a: Answer, size: u64, addr: u64, other: u64) -> (Rule, String) {
        let other_size = self
            .live
            .get(other)
            .map_or_else(|| "unknown".to_string(), |l| l.size.to_string());
        (
            Rule::Overlap,
            format!(
                "chunk {} offset {:#x} ({} bytes, address {:#x}) overlaps the live \
                 allocation at {:#x} ({} bytes)",
                a.chunk, a.offset, size, addr, other, other_size
            ),
        )
    }
}

#[cold]
#[inline(never)]
fn not_held(a: Answer) -> (Rule, String) {
    (
        Rule::ForeignChunk,
        format!(
            "the answer names chunk {}, which the plugin does not hold",
            a.chunk
        ),
    )
}

#[cold]
#[inline(never)]
fn outside(a: Answer, size: u64, chunk: &Chunk) -> (Rule, String) {
    (
        Rule::OutsideChunk,
        format!(
            "chunk {} offset {:#x} + {} bytes runs past the chunk's {} bytes",
            a.chunk, a.offset, size, chunk.size
        ),
    )
}

#[cold]
#[inline(never)]
fn misaligned(a: Answer, addr: u64, align: u64) -> (Rule, String) {
    (
        Rule::Misaligned,
        format!(
            "chunk {} offset {:#x} is address {:#x}, not a multiple of {align}",
            a.chunk, a.offset, addr
        ),
    )
}

#[cold]
#[inline(never)]
fn wrong_size(live: Live) -> String {
    format!(
        "it was allocated with {} bytes; give the size it was allocated with",
        live.size
    )
}

#[cold]
#[inline(never)]
fn not_live() -> String {
    "not a live allocation of this plugin: a foreign pointer, an interior pointer, or already \
     freed"
        .to_string()
}

fn foreign(handle: u32) -> (Rule, String) {
    (
        Rule::ForeignChunk,
        format!("upstream_free({handle}): the plugin holds no chunk {handle}"),
    )
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;
