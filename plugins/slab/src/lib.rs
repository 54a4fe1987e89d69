//! `slab`: a size-class (slab) allocator. Requests up to 1 MiB round up to a power-of-two
//! class (256 B … 1 MiB); each class carves slabs (one chunk each) into equal slots and keeps a
//! stack of free slots per slab. Larger requests get a chunk of their own, returned at once on
//! free (at the end of a `defer_cleanup` scope when one is open). Each class keeps one empty slab; more go back upstream unless a `defer_cleanup`
//! scope is open (then they go at its end).
//!
//! Streams: each free slot remembers the stream it was freed on. A slot goes to a request on
//! another stream only after `Upstream::order_streams` made that stream wait for the one it was
//! freed on (RMM's stream-ordered rule); when the host cannot order them the request gets a
//! fresh slab instead.
//!
//! Config: `slab_bytes` (default 2 MiB; a slab holds at least 16 slots).
//!
//! # Time complexity
//!
//! `alloc` and `free`: O(1) amortized, plus a map lookup by chunk handle.

#![no_std]
#![deny(missing_docs)]

extern crate alloc;
#[cfg(not(target_arch = "wasm32"))]
extern crate std;

use alloc::vec::Vec;

use emm_plugin_sdk::{
    checked_round_up, export_plugin, Answer, Config, Deferral, Error, Policy, Request, Stats,
    Upstream, GRANULE,
};

/// Default slab size.
pub const DEFAULT_SLAB_BYTES: u64 = 2 << 20;
/// Classes 256 B × 2^0 … 2^12 (1 MiB).
const CLASSES: usize = 13;
/// Fewest slots a slab holds.
const MIN_SLOTS: u64 = 16;
/// The stream of a slot never handed out: usable on any stream at once.
const FRESH: u64 = u64::MAX;

/// What a chunk is used for, indexed by handle − 1.
#[derive(Debug, Clone)]
enum Use {
    Free,
    Slab {
        class: usize,
        slots: Vec<u32>,
        capacity: u32,
        /// By slot: the stream it was last freed on ([`FRESH`]: never handed out).
        freed_on: Vec<u64>,
    },
    Large {
        size: u64,
    },
    /// A large request's chunk, freed while a `defer_cleanup` scope was open: held until the
    /// scope ends (or a trim).
    IdleLarge {
        size: u64,
    },
}

/// The slab allocator.
#[derive(Debug)]
pub struct Slab {
    slab_bytes: u64,
    chunks: Vec<Use>,
    /// Per class: slabs with a free slot (may list a slab twice or a full one; checked on use).
    partial: Vec<Vec<u32>>,
    held_bytes: u64,
    free_bytes: u64,
    deferral: Deferral,
}

fn class_of(size: u64) -> Option<usize> {
    let blocks = size.div_ceil(GRANULE).max(1).checked_next_power_of_two()?;
    let class = blocks.trailing_zeros() as usize;
    (class < CLASSES).then_some(class)
}

fn class_bytes(class: usize) -> u64 {
    GRANULE << class
}

/// The use of chunk `handle` (borrowing only the chunk table).
fn slot_of(chunks: &mut [Use], handle: u32) -> Option<&mut Use> {
    chunks.get_mut(usize::try_from(handle).ok()?.checked_sub(1)?)
}

impl Slab {
    /// A slab allocator whose slabs are `slab_bytes` (at least 16 slots each).
    pub fn new(slab_bytes: u64) -> Self {
        Slab {
            slab_bytes: slab_bytes.max(GRANULE * MIN_SLOTS),
            chunks: Vec::new(),
            partial: (0..CLASSES).map(|_| Vec::new()).collect(),
            held_bytes: 0,
            free_bytes: 0,
            deferral: Deferral::default(),
        }
    }

    fn set(&mut self, handle: u32, u: Use) {
        let i = handle as usize - 1;
        if self.chunks.len() <= i {
            self.chunks.resize(i + 1, Use::Free);
        }
        self.chunks[i] = u;
    }

    /// A whole number of slots, at least [`MIN_SLOTS`].
    fn slab_size(&self, class: usize) -> u64 {
        let size = self.slab_bytes.max(class_bytes(class) * MIN_SLOTS);
        size - size % class_bytes(class)
    }

    fn chunk<U: Upstream>(&mut self, up: &mut U, size: u64) -> Result<u32, Error> {
        let chunk = self.deferral.alloc_chunk_or_trim(self, up, size)?;
        self.held_bytes += size;
        Ok(chunk.handle)
    }

    fn alloc_small<U: Upstream>(
        &mut self,
        up: &mut U,
        class: usize,
        stream: u64,
    ) -> Result<Answer, Error> {
        while let Some(&handle) = self.partial[class].last() {
            if let Some(Use::Slab {
                class: c,
                slots,
                freed_on,
                ..
            }) = slot_of(&mut self.chunks, handle)
            {
                if *c == class {
                    if let Some(slot) = slots.pop() {
                        let from = freed_on.get(slot as usize).copied().unwrap_or(FRESH);
                        if from != FRESH && from != stream && !up.order_streams(from, stream) {
                            // Not ordered: the slot stays free, the request gets a new slab.
                            slots.push(slot);
                            break;
                        }
                        if slots.is_empty() {
                            self.partial[class].pop();
                        }
                        self.free_bytes -= class_bytes(class);
                        return Ok(Answer {
                            chunk: handle,
                            offset: u64::from(slot) * class_bytes(class),
                        });
                    }
                }
            }
            // A stale entry: a full or returned slab.
            self.partial[class].pop();
        }
        let size = self.slab_size(class);
        let handle = self.chunk(up, size)?;
        let capacity = (size / class_bytes(class)) as u32;
        // Slot 0 goes out now; the rest are free, lowest on top.
        let slots: Vec<u32> = (1..capacity).rev().collect();
        self.free_bytes += size - class_bytes(class);
        self.set(
            handle,
            Use::Slab {
                class,
                slots,
                capacity,
                freed_on: alloc::vec![FRESH; capacity as usize],
            },
        );
        self.partial[class].push(handle);
        Ok(Answer {
            chunk: handle,
            offset: 0,
        })
    }

    fn release<U: Upstream>(&mut self, up: &mut U, handle: u32, size: u64) -> Result<(), Error> {
        up.free_chunk(handle)?;
        self.set(handle, Use::Free);
        self.held_bytes -= size;
        Ok(())
    }

    /// Empty slabs (of `class`, or of every class).
    /// Returns the large chunks freed while a scope was open.
    fn release_idle_large<U: Upstream>(&mut self, up: &mut U) -> Result<(), Error> {
        let idle: Vec<(u32, u64)> = self
            .chunks
            .iter()
            .enumerate()
            .filter_map(|(i, u)| match u {
                Use::IdleLarge { size } => Some((i as u32 + 1, *size)),
                _ => None,
            })
            .collect();
        for (handle, size) in idle {
            self.release(up, handle, size)?;
        }
        Ok(())
    }

    fn empty_slabs(&self, class: Option<usize>) -> Vec<(u32, u64)> {
        self.chunks
            .iter()
            .enumerate()
            .filter_map(|(i, u)| match u {
                Use::Slab {
                    class: c,
                    slots,
                    capacity,
                    ..
                } if slots.len() as u32 == *capacity && class.is_none_or(|k| k == *c) => {
                    Some((i as u32 + 1, u64::from(*capacity) * class_bytes(*c)))
                }
                _ => None,
            })
            .collect()
    }
}

impl Policy for Slab {
    fn init(config: &Config) -> Result<Self, Error> {
        Ok(Slab::new(
            config.get_u64("slab_bytes")?.unwrap_or(DEFAULT_SLAB_BYTES),
        ))
    }

    fn alloc<U: Upstream>(&mut self, up: &mut U, req: Request) -> Result<Answer, Error> {
        if req.align > GRANULE {
            return Err(Error::Unsupported);
        }
        if let Some(class) = class_of(req.size) {
            return self.alloc_small(up, class, req.stream);
        }
        let size = checked_round_up(req.size, GRANULE).ok_or(Error::OutOfMemory)?;
        let handle = self.chunk(up, size)?;
        self.set(handle, Use::Large { size });
        Ok(Answer {
            chunk: handle,
            offset: 0,
        })
    }

    fn free<U: Upstream>(
        &mut self,
        up: &mut U,
        answer: Answer,
        _size: u64,
        stream: u64,
    ) -> Result<(), Error> {
        let deferring = self.deferral.is_active();
        match slot_of(&mut self.chunks, answer.chunk) {
            Some(Use::Large { size }) if deferring => {
                let size = *size;
                self.set(answer.chunk, Use::IdleLarge { size });
                Ok(())
            }
            Some(Use::Large { size }) => {
                let size = *size;
                self.release(up, answer.chunk, size)
            }
            Some(Use::Slab {
                class,
                slots,
                capacity,
                freed_on,
            }) => {
                let class = *class;
                let slot = u32::try_from(answer.offset / class_bytes(class))
                    .map_err(|_| Error::Invalid)?;
                *freed_on
                    .get_mut(slot as usize)
                    .ok_or(Error::UnknownAllocation)? = stream;
                let was_full = slots.is_empty();
                slots.push(slot);
                let now_empty = slots.len() as u32 == *capacity;
                self.free_bytes += class_bytes(class);
                if was_full {
                    self.partial[class].push(answer.chunk);
                }
                if now_empty && !deferring && self.empty_slabs(Some(class)).len() > 1 {
                    let size = self.slab_size(class);
                    self.free_bytes -= size;
                    self.release(up, answer.chunk, size)?;
                }
                Ok(())
            }
            _ => Err(Error::UnknownAllocation),
        }
    }

    fn trim<U: Upstream>(&mut self, up: &mut U, keep: u64) -> Result<(), Error> {
        self.release_idle_large(up)?;
        let empty = self.empty_slabs(None);
        let mut empty_bytes: u64 = empty.iter().map(|(_, s)| s).sum();
        for (handle, size) in empty {
            if empty_bytes <= keep {
                break;
            }
            self.free_bytes -= size;
            self.release(up, handle, size)?;
            empty_bytes -= size;
        }
        Ok(())
    }

    fn stats(&self) -> Stats {
        Stats {
            free_bytes: self.free_bytes,
            free_blocks: self
                .chunks
                .iter()
                .map(|u| match u {
                    Use::Slab { slots, .. } => slots.len() as u64,
                    _ => 0,
                })
                .sum(),
            // From the slabs themselves: the partial lists may name full slabs.
            largest_free: self
                .chunks
                .iter()
                .filter_map(|u| match u {
                    Use::Slab { class, slots, .. } if !slots.is_empty() => {
                        Some(class_bytes(*class))
                    }
                    _ => None,
                })
                .max()
                .unwrap_or(0),
            held_bytes: self.held_bytes,
        }
    }

    fn defer_enter(&mut self) {
        self.deferral.enter();
    }

    fn defer_exit<U: Upstream>(&mut self, up: &mut U) -> Result<(), Error> {
        if !self.deferral.exit() {
            return Ok(());
        }
        // Return what the scope held back: large chunks, and all but one empty slab per class.
        self.release_idle_large(up)?;
        for class in 0..CLASSES {
            for (handle, size) in self.empty_slabs(Some(class)).into_iter().skip(1) {
                self.free_bytes -= size;
                self.release(up, handle, size)?;
            }
        }
        Ok(())
    }
}

export_plugin!(Slab);
