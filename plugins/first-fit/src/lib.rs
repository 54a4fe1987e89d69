//! `first_fit`: a first-fit coalescing pool. Free blocks of every chunk live in one structure
//! ordered by address (`chunk << 40 | offset`, [`blocks::FreeBlocks`]); a request takes the
//! lowest block that fits and splits it, a free merges with both neighbours. Chunks are kept
//! (a pool) and go back only on `trim`/`reset`, or when the upstream runs out and no
//! `defer_cleanup` scope is open.
//!
//! Config: `chunk_bytes` (default 64 MiB, rounded down to a multiple of 256 B), the size of
//! each chunk asked from the host.
//!
//! # Time complexity
//!
//! `alloc`: O(n / 256) vector compares for n free blocks (leaves of 32 whose largest block is
//! too small are skipped eight at a time), then one 32-entry compare; `free`: O(log n), a
//! 32-entry compare and a move of at most 32 entries.

#![no_std]
#![deny(missing_docs)]

extern crate alloc;
#[cfg(not(target_arch = "wasm32"))]
extern crate std;

pub mod blocks;
mod scan;

use alloc::vec::Vec;

use blocks::FreeBlocks;

use emm_plugin_sdk::{
    checked_round_up, export_plugin, Answer, Config, Deferral, Error, Policy, Request, Stats,
    Upstream, GRANULE,
};

/// Default chunk size.
pub const DEFAULT_CHUNK_BYTES: u64 = 64 << 20;

/// The largest chunk, and so the largest request: one granule short of the ABI's 1 TiB, so
/// that the end of one chunk's keys never meets the start of the next chunk's and blocks of
/// two chunks never merge.
const MAX_BLOCK: u64 = emm_plugin_sdk::abi::MAX_CHUNK_BYTES - GRANULE;

/// The first-fit coalescing pool.
#[derive(Debug, Default)]
pub struct FirstFit {
    chunk_bytes: u64,
    /// Free blocks by key (`chunk << 40 | offset`).
    free: FreeBlocks,
    /// Chunks held: the size of chunk `handle` at `handle - 1`, 0 for a handle not held
    /// (handles are dense, so a vector indexes them).
    chunks: Vec<u64>,
    free_bytes: u64,
    held_bytes: u64,
    deferral: Deferral,
}

impl FirstFit {
    /// A pool asking for chunks of `chunk_bytes`.
    pub fn new(chunk_bytes: u64) -> Self {
        FirstFit {
            chunk_bytes: (chunk_bytes & !(GRANULE - 1)).clamp(GRANULE, MAX_BLOCK),
            ..FirstFit::default()
        }
    }

    /// The size of chunk `handle`, when the pool holds it.
    #[inline]
    fn chunk_size(&self, handle: u32) -> Option<u64> {
        let i = usize::try_from(handle.checked_sub(1)?).ok()?;
        self.chunks.get(i).copied().filter(|&s| s > 0)
    }

    /// The chunks held, as `(handle, size)` in handle order.
    fn held(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        (1u32..)
            .zip(self.chunks.iter().copied())
            .filter(|&(_, size)| size > 0)
    }

    fn take_first_fit(&mut self, need: u64) -> Option<u64> {
        let key = self.free.take_first_fit(need)?;
        self.free_bytes -= need;
        Some(key)
    }

    fn grow<U: Upstream>(&mut self, up: &mut U, need: u64) -> Result<(), Error> {
        let size = need.max(self.chunk_bytes);
        let chunk = self.deferral.alloc_chunk_or_trim(self, up, size)?;
        let Some(i) = usize::try_from(chunk.handle)
            .ok()
            .and_then(|h| h.checked_sub(1))
        else {
            return Err(Error::Invalid);
        };
        if self.chunks.len() <= i {
            self.chunks.resize(i + 1, 0);
        }
        self.chunks[i] = size;
        self.held_bytes += size;
        self.insert_free(
            Answer {
                chunk: chunk.handle,
                offset: 0,
            }
            .key(),
            size,
        );
        Ok(())
    }

    /// Inserts a free block, merging it with its neighbours in the same chunk.
    fn insert_free(&mut self, key: u64, size: u64) {
        self.free_bytes += size;
        self.free.insert(key, size);
    }
}

impl Policy for FirstFit {
    fn init(config: &Config) -> Result<Self, Error> {
        let chunk = config
            .get_u64("chunk_bytes")?
            .unwrap_or(DEFAULT_CHUNK_BYTES);
        Ok(FirstFit::new(chunk))
    }

    #[inline]
    fn alloc<U: Upstream>(&mut self, up: &mut U, req: Request) -> Result<Answer, Error> {
        if req.align > GRANULE {
            return Err(Error::Unsupported);
        }
        let need = checked_round_up(req.size, GRANULE)
            .filter(|&n| n <= MAX_BLOCK)
            .ok_or(Error::OutOfMemory)?;
        if let Some(key) = self.take_first_fit(need) {
            return Ok(Answer::from_key(key));
        }
        self.grow(up, need)?;
        self.take_first_fit(need)
            .map(Answer::from_key)
            .ok_or(Error::OutOfMemory)
    }

    #[inline]
    fn free<U: Upstream>(
        &mut self,
        _up: &mut U,
        answer: Answer,
        size: u64,
        _stream: u64,
    ) -> Result<(), Error> {
        let need = checked_round_up(size, GRANULE).ok_or(Error::Invalid)?;
        if self.chunk_size(answer.chunk).is_none() {
            return Err(Error::UnknownAllocation);
        }
        self.insert_free(answer.key(), need);
        Ok(())
    }

    fn trim<U: Upstream>(&mut self, up: &mut U, keep: u64) -> Result<(), Error> {
        let start = |handle: u32| {
            Answer {
                chunk: handle,
                offset: 0,
            }
            .key()
        };
        // A chunk is empty when one free block covers it.
        let empty: Vec<(u32, u64)> = self
            .held()
            .filter(|&(h, size)| self.free.get(start(h)) == Some(size))
            .collect();
        let mut empty_bytes: u64 = empty.iter().map(|&(_, size)| size).sum();
        for (handle, size) in empty {
            if empty_bytes <= keep {
                break;
            }
            up.free_chunk(handle)?;
            self.free.remove(start(handle));
            if let Some(slot) = usize::try_from(handle - 1)
                .ok()
                .and_then(|i| self.chunks.get_mut(i))
            {
                *slot = 0;
            }
            self.free_bytes -= size;
            self.held_bytes -= size;
            empty_bytes -= size;
        }
        Ok(())
    }

    fn stats(&self) -> Stats {
        Stats {
            free_bytes: self.free_bytes,
            free_blocks: self.free.len() as u64,
            largest_free: self.free.largest(),
            held_bytes: self.held_bytes,
        }
    }

    fn defer_enter(&mut self) {
        self.deferral.enter();
    }

    fn defer_exit<U: Upstream>(&mut self, _up: &mut U) -> Result<(), Error> {
        self.deferral.exit();
        Ok(())
    }
}

export_plugin!(FirstFit);
