//! `buddy`: a binary buddy allocator. Blocks are 256 B × 2^order; a chunk is one block of its
//! order. A request larger than `chunk_bytes` gets a chunk of its own of exactly its size
//! (rounded to 256 B, not to a power of two, so a large request never needs up to twice its
//! size), given back when it is freed (at the end of a `defer_cleanup` scope when one is open). A request takes the lowest free block of the smallest order that fits and splits
//! it; a free merges with its buddy while the buddy is free. Empty chunks are kept until
//! `trim`/`reset`, or until the upstream runs out outside a `defer_cleanup` scope.
//!
//! Config: `chunk_bytes` (default 64 MiB, rounded up to a power of two).
//!
//! # Time complexity
//!
//! `alloc` and `free`: O(orders × log n).

#![no_std]
#![deny(missing_docs)]

extern crate alloc;
#[cfg(not(target_arch = "wasm32"))]
extern crate std;

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::vec::Vec;

use emm_plugin_sdk::{
    export_plugin, Answer, Config, Deferral, Error, Policy, Request, Stats, Upstream, GRANULE,
};

/// Default chunk size.
pub const DEFAULT_CHUNK_BYTES: u64 = 64 << 20;
/// Orders 0 (256 B) to 31 (512 GiB).
const ORDERS: usize = 32;

/// The order of a block of at least `size` bytes.
fn order_of(size: u64) -> Option<usize> {
    let blocks = size.div_ceil(GRANULE).max(1);
    let order = blocks.checked_next_power_of_two()?.trailing_zeros() as usize;
    (order < ORDERS).then_some(order)
}

fn block_bytes(order: usize) -> u64 {
    GRANULE << order
}

/// The buddy allocator.
#[derive(Debug)]
pub struct Buddy {
    chunk_order: usize,
    /// Free blocks per order, by key (`chunk << 40 | offset`).
    free: Vec<BTreeSet<u64>>,
    /// Chunks held: handle → order.
    chunks: BTreeMap<u32, usize>,
    /// Chunks of one large request each: handle → bytes.
    large: BTreeMap<u32, u64>,
    /// Large requests' chunks freed while a `defer_cleanup` scope was open: returned when the
    /// outermost scope ends (or by a trim).
    idle_large: Vec<(u32, u64)>,
    free_bytes: u64,
    held_bytes: u64,
    deferral: Deferral,
}

impl Buddy {
    /// A buddy allocator asking for chunks of `chunk_bytes` (rounded up to a power of two).
    pub fn new(chunk_bytes: u64) -> Result<Self, Error> {
        Ok(Buddy {
            chunk_order: order_of(chunk_bytes).ok_or(Error::Invalid)?,
            free: (0..ORDERS).map(|_| BTreeSet::new()).collect(),
            chunks: BTreeMap::new(),
            large: BTreeMap::new(),
            idle_large: Vec::new(),
            free_bytes: 0,
            held_bytes: 0,
            deferral: Deferral::default(),
        })
    }

    /// Returns the large chunks freed while a scope was open.
    fn release_idle_large<U: Upstream>(&mut self, up: &mut U) -> Result<(), Error> {
        while let Some((handle, bytes)) = self.idle_large.pop() {
            up.free_chunk(handle)?;
            self.held_bytes -= bytes;
        }
        Ok(())
    }

    /// The lowest free block of order `order`, splitting a larger one if needed.
    fn take(&mut self, order: usize) -> Option<u64> {
        let from = (order..ORDERS).find(|&o| !self.free[o].is_empty())?;
        let key = self.free[from].pop_first()?;
        for o in (order..from).rev() {
            // Keep the lower half, free the upper.
            self.free[o].insert(key + block_bytes(o));
        }
        self.free_bytes -= block_bytes(order);
        Some(key)
    }

    /// A chunk of its own for a request above the chunk size.
    fn alloc_large<U: Upstream>(&mut self, up: &mut U, size: u64) -> Result<Answer, Error> {
        let bytes = size
            .div_ceil(GRANULE)
            .checked_mul(GRANULE)
            .ok_or(Error::OutOfMemory)?;
        let chunk = self.deferral.alloc_chunk_or_trim(self, up, bytes)?;
        self.large.insert(chunk.handle, bytes);
        self.held_bytes += bytes;
        Ok(Answer {
            chunk: chunk.handle,
            offset: 0,
        })
    }

    fn grow<U: Upstream>(&mut self, up: &mut U, order: usize) -> Result<(), Error> {
        let chunk_order = order.max(self.chunk_order);
        let size = block_bytes(chunk_order);
        let chunk = self.deferral.alloc_chunk_or_trim(self, up, size)?;
        self.chunks.insert(chunk.handle, chunk_order);
        self.held_bytes += size;
        self.free_bytes += size;
        self.free[chunk_order].insert(
            Answer {
                chunk: chunk.handle,
                offset: 0,
            }
            .key(),
        );
        Ok(())
    }
}

impl Policy for Buddy {
    fn init(config: &Config) -> Result<Self, Error> {
        Buddy::new(
            config
                .get_u64("chunk_bytes")?
                .unwrap_or(DEFAULT_CHUNK_BYTES),
        )
    }

    fn alloc<U: Upstream>(&mut self, up: &mut U, req: Request) -> Result<Answer, Error> {
        if req.align > GRANULE {
            return Err(Error::Unsupported);
        }
        if req.size > block_bytes(self.chunk_order) {
            return self.alloc_large(up, req.size);
        }
        let order = order_of(req.size).ok_or(Error::OutOfMemory)?;
        if let Some(key) = self.take(order) {
            return Ok(Answer::from_key(key));
        }
        self.grow(up, order)?;
        self.take(order)
            .map(Answer::from_key)
            .ok_or(Error::OutOfMemory)
    }

    fn free<U: Upstream>(
        &mut self,
        up: &mut U,
        answer: Answer,
        size: u64,
        _stream: u64,
    ) -> Result<(), Error> {
        if let Some(&bytes) = self.large.get(&answer.chunk) {
            if answer.offset != 0 || size.div_ceil(GRANULE) * GRANULE != bytes {
                return Err(Error::UnknownAllocation);
            }
            self.large.remove(&answer.chunk);
            if self.deferral.is_active() {
                self.idle_large.push((answer.chunk, bytes));
                return Ok(());
            }
            up.free_chunk(answer.chunk)?;
            self.held_bytes -= bytes;
            return Ok(());
        }
        let mut order = order_of(size).ok_or(Error::Invalid)?;
        let top = *self
            .chunks
            .get(&answer.chunk)
            .ok_or(Error::UnknownAllocation)?;
        self.free_bytes += block_bytes(order);
        let mut offset = answer.offset;
        while order < top {
            let buddy = Answer {
                chunk: answer.chunk,
                offset: offset ^ block_bytes(order),
            };
            if !self.free[order].remove(&buddy.key()) {
                break;
            }
            offset = offset.min(buddy.offset);
            order += 1;
        }
        self.free[order].insert(
            Answer {
                chunk: answer.chunk,
                offset,
            }
            .key(),
        );
        Ok(())
    }

    fn trim<U: Upstream>(&mut self, up: &mut U, keep: u64) -> Result<(), Error> {
        self.release_idle_large(up)?;
        let empty: Vec<(u32, usize)> = self
            .chunks
            .iter()
            .filter(|(h, o)| {
                self.free[**o].contains(
                    &Answer {
                        chunk: **h,
                        offset: 0,
                    }
                    .key(),
                )
            })
            .map(|(h, o)| (*h, *o))
            .collect();
        let mut empty_bytes: u64 = empty.iter().map(|(_, o)| block_bytes(*o)).sum();
        for (handle, order) in empty {
            if empty_bytes <= keep {
                break;
            }
            up.free_chunk(handle)?;
            self.free[order].remove(
                &Answer {
                    chunk: handle,
                    offset: 0,
                }
                .key(),
            );
            self.chunks.remove(&handle);
            let size = block_bytes(order);
            self.free_bytes -= size;
            self.held_bytes -= size;
            empty_bytes -= size;
        }
        Ok(())
    }

    fn stats(&self) -> Stats {
        let largest = (0..ORDERS).rev().find(|&o| !self.free[o].is_empty());
        Stats {
            free_bytes: self.free_bytes,
            free_blocks: self.free.iter().map(|s| s.len() as u64).sum(),
            largest_free: largest.map_or(0, block_bytes),
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
        self.release_idle_large(up)
    }
}

export_plugin!(Buddy);
