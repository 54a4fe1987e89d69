//! [`Registry`]: the host's record of every chunk a plugin holds and every live allocation —
//! what lets the host check each answer and keep every allocation valid through a quarantine.

use std::collections::BTreeMap;

use emm_core::units::Bytes;
use emm_core::DevicePtr;

use crate::abi::{Answer, MAX_CHUNK_HANDLE};
use crate::fault::Rule;

/// The `origin` of an allocation served by the fallback resource rather than a chunk.
pub(crate) const FALLBACK: u32 = 0;

/// A chunk of upstream memory held for a plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Chunk {
    /// Its device address.
    pub base: DevicePtr,
    /// Its size in bytes.
    pub size: u64,
    /// Live allocations inside it.
    pub live: u32,
    /// The instance generation that holds it; older ones are orphans of a quarantine.
    pub generation: u32,
}

/// A live allocation: its size as requested and where it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Live {
    /// Bytes requested.
    pub size: u64,
    /// The chunk handle, or [`FALLBACK`].
    pub origin: u32,
}

/// What the host knows, independent of the guest. Handles are dense (`1..`), reused after a
/// chunk is returned, so a guest can index arrays with them.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    chunks: Vec<Option<Chunk>>,
    free_handles: Vec<u32>,
    live: BTreeMap<u64, Live>,
    /// Bytes of all chunks held (current and orphaned).
    pub held_bytes: u64,
    /// Bytes of live allocations (fallback included).
    pub live_bytes: u64,
    /// The current instance generation.
    pub generation: u32,
}

impl Registry {
    /// Records a new chunk for the current generation and returns its handle.
    pub fn add_chunk(&mut self, base: DevicePtr, size: u64) -> Result<u32, Rule> {
        let chunk = Chunk {
            base,
            size,
            live: 0,
            generation: self.generation,
        };
        let handle = match self.free_handles.pop() {
            Some(h) => h,
            None => {
                let next = u32::try_from(self.chunks.len() + 1).map_err(|_| Rule::TooManyChunks)?;
                if next > MAX_CHUNK_HANDLE {
                    return Err(Rule::TooManyChunks);
                }
                self.chunks.push(None);
                next
            }
        };
        let slot = self.slot_mut(handle).ok_or(Rule::TooManyChunks)?;
        *slot = Some(chunk);
        self.held_bytes = self.held_bytes.saturating_add(size);
        Ok(handle)
    }

    fn slot_mut(&mut self, handle: u32) -> Option<&mut Option<Chunk>> {
        let i = usize::try_from(handle.checked_sub(1)?).ok()?;
        self.chunks.get_mut(i)
    }

    /// The chunk behind `handle`, of any generation.
    pub fn chunk(&self, handle: u32) -> Option<&Chunk> {
        let i = usize::try_from(handle.checked_sub(1)?).ok()?;
        self.chunks.get(i)?.as_ref()
    }

    /// Checks an answer to a request of `size` bytes aligned to `align`: a chunk of the
    /// current generation, aligned, inside the chunk, overlapping no live allocation.
    ///
    /// # Time complexity
    ///
    /// One ordered-map lookup: O(log live).
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
            return Err((
                Rule::ForeignChunk,
                format!(
                    "the answer names chunk {}, which the plugin does not hold",
                    a.chunk
                ),
            ));
        };
        let addr = chunk.base.0.checked_add(a.offset);
        let end = a.offset.checked_add(size);
        let (Some(addr), Some(end)) = (addr, end) else {
            return Err((Rule::OutsideChunk, outside(a, size, chunk)));
        };
        if end > chunk.size {
            return Err((Rule::OutsideChunk, outside(a, size, chunk)));
        }
        if addr % align != 0 {
            return Err((
                Rule::Misaligned,
                format!(
                    "chunk {} offset {:#x} is address {:#x}, not a multiple of {align}",
                    a.chunk, a.offset, addr
                ),
            ));
        }
        // Live allocations never overlap, so only the last one starting before our end can.
        let end_addr = addr.saturating_add(size);
        if let Some((&start, other)) = self.live.range(..end_addr).next_back() {
            if start.saturating_add(other.size) > addr {
                return Err((
                    Rule::Overlap,
                    format!(
                        "chunk {} offset {:#x} ({} bytes, address {:#x}) overlaps the live \
                         allocation at {:#x} ({} bytes)",
                        a.chunk, a.offset, size, addr, start, other.size
                    ),
                ));
            }
        }
        Ok(DevicePtr(addr))
    }

    /// Records a checked allocation. `origin` is a chunk handle or [`FALLBACK`].
    #[inline]
    pub fn insert_live(&mut self, ptr: DevicePtr, size: u64, origin: u32) {
        if let Some(Some(chunk)) = origin
            .checked_sub(1)
            .and_then(|i| usize::try_from(i).ok())
            .and_then(|i| self.chunks.get_mut(i))
        {
            chunk.live = chunk.live.saturating_add(1);
        }
        self.live.insert(ptr.0, Live { size, origin });
        self.live_bytes = self.live_bytes.saturating_add(size);
    }

    /// Takes a live allocation out, when `ptr` is one and `size` is its size; otherwise says
    /// why not and changes nothing.
    #[inline]
    pub fn remove_live(&mut self, ptr: DevicePtr, size: u64) -> Result<Live, String> {
        use std::collections::btree_map::Entry;
        let Entry::Occupied(e) = self.live.entry(ptr.0) else {
            return Err(
                "not a live allocation of this plugin: a foreign pointer, an interior \
                 pointer, or already freed"
                    .to_string(),
            );
        };
        if e.get().size != size {
            return Err(format!(
                "it was allocated with {} bytes; give the size it was allocated with",
                e.get().size
            ));
        }
        let live = e.remove();
        self.live_bytes = self.live_bytes.saturating_sub(size);
        if let Some(Some(chunk)) = self.slot_mut(live.origin) {
            chunk.live = chunk.live.saturating_sub(1);
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

    /// Number of chunks held.
    pub fn chunk_count(&self) -> usize {
        self.chunks.iter().filter(|c| c.is_some()).count()
    }

    /// Number of live allocations.
    pub fn live_count(&self) -> usize {
        self.live.len()
    }
}

fn outside(a: Answer, size: u64, chunk: &Chunk) -> String {
    format!(
        "chunk {} offset {:#x} + {} bytes runs past the chunk's {} bytes",
        a.chunk, a.offset, size, chunk.size
    )
}

fn foreign(handle: u32) -> (Rule, String) {
    (
        Rule::ForeignChunk,
        format!("upstream_free({handle}): the plugin holds no chunk {handle}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg() -> (Registry, u32) {
        let mut r = Registry::default();
        let h = r.add_chunk(DevicePtr(0x10_0000), 0x1000).unwrap();
        (r, h)
    }

    #[test]
    fn answers_are_checked_for_each_rule() {
        let (mut r, h) = reg();
        let a = |offset| Answer { chunk: h, offset };
        let p = r.check_answer(a(0x100), 0x100, 256).unwrap();
        assert_eq!(p, DevicePtr(0x10_0100));
        r.insert_live(p, 0x100, h);
        let rule = |res: Result<DevicePtr, (Rule, String)>| res.unwrap_err().0;
        assert_eq!(rule(r.check_answer(a(0x180), 0x10, 128)), Rule::Overlap);
        assert_eq!(rule(r.check_answer(a(0x0), 0x101, 256)), Rule::Overlap);
        assert!(
            r.check_answer(a(0x0), 0x100, 256).is_ok(),
            "adjacent is fine"
        );
        assert!(
            r.check_answer(a(0x200), 0x100, 256).is_ok(),
            "adjacent is fine"
        );
        assert_eq!(rule(r.check_answer(a(0x210), 0x10, 256)), Rule::Misaligned);
        assert_eq!(
            rule(r.check_answer(a(0xf00), 0x101, 256)),
            Rule::OutsideChunk
        );
        assert_eq!(rule(r.check_answer(a(u64::MAX), 1, 1)), Rule::OutsideChunk);
        let foreign = Answer {
            chunk: 9,
            offset: 0,
        };
        assert_eq!(rule(r.check_answer(foreign, 1, 1)), Rule::ForeignChunk);
    }

    #[test]
    fn frees_need_the_exact_pointer_and_size_and_chunks_go_only_when_empty() {
        let (mut r, h) = reg();
        let p = r
            .check_answer(
                Answer {
                    chunk: h,
                    offset: 0,
                },
                64,
                256,
            )
            .unwrap();
        r.insert_live(p, 64, h);
        assert_eq!(r.release_chunk(h).unwrap_err().0, Rule::ChunkInUse);
        assert!(r.remove_live(p, 65).unwrap_err().contains("64 bytes"));
        assert!(r.remove_live(p.offset(1), 64).is_err());
        assert_eq!(r.remove_live(p, 64).unwrap().origin, h);
        assert!(r.remove_live(p, 64).is_err(), "double free");
        assert_eq!(r.release_chunk(h).unwrap().size, 0x1000);
        assert_eq!(r.release_chunk(h).unwrap_err().0, Rule::ForeignChunk);
        assert_eq!((r.held_bytes, r.chunk_count()), (0, 0));
        let again = r.add_chunk(DevicePtr(0x20_0000), 0x2000).unwrap();
        assert_eq!(again, h, "handles are reused");
    }

    #[test]
    fn orphans_leave_only_when_empty_and_are_foreign_to_the_new_generation() {
        let (mut r, h) = reg();
        let p = r
            .check_answer(
                Answer {
                    chunk: h,
                    offset: 0,
                },
                64,
                256,
            )
            .unwrap();
        r.insert_live(p, 64, h);
        let empty = r.add_chunk(DevicePtr(0x30_0000), 0x1000).unwrap();
        r.orphan_all();
        let taken = r.take_empty_orphans();
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].base, DevicePtr(0x30_0000));
        assert!(r.chunk(empty).is_none());
        let rule = r
            .check_answer(
                Answer {
                    chunk: h,
                    offset: 0x100,
                },
                1,
                1,
            )
            .unwrap_err()
            .0;
        assert_eq!(
            rule,
            Rule::ForeignChunk,
            "an orphan is no longer the plugin's"
        );
        r.remove_live(p, 64).unwrap();
        assert_eq!(r.take_empty_orphans().len(), 1);
        assert_eq!(r.held_bytes, 0);
    }
}
