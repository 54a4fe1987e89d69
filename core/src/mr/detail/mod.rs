//! Algorithms the resources share. Private to the crate: the resources are the API.
//!
//! # The heap's layers
//!
//! Each layer uses only the layers below it:
//!
//! ```text
//!   heap         CoalescingHeap: chunks, per-stream free lists, allocate and free
//!    ├── heap::segment_end  the chunk as an expandable segment (wilderness, growth, cuts)
//!    │
//!   tlsf         TlsfIndex: the free lists by size class          live_index   addr_map
//!    │                                                            stream_map
//!   block        BlockSlab: the records by number, the vacant chain
//!    │
//!   record_space where the records lie (one mapping on Linux; a mask-checked slice elsewhere)
//!    │
//!   record       Block: one 32-byte record, its numbering, the sentinel and scratch records
//! ```
//!
//! `live_index` (live blocks by address) sits beside `tlsf`, over `block`; `addr_map` and
//! `stream_map` are tables of their own. Above the heap: `source`, `segment` and `growth` (where
//! a pool's memory comes from and how much it asks for), `stream_order` and `context_scope`
//! (the driver calls of a resource's slow paths).
//!
//! # Modules
//!
//! - [`addr_map`]: address → record index, an open-addressing hash table.
//! - [`record`]: one host-side record of a device memory block, and its numbering.
//! - [`record_space`]: where the block records live, read by number with no check on Linux.
//! - [`mask_checked_slice`]: a power-of-two table indexed by numbers checked against a mask,
//!   off the loads' address path (the block records' storage elsewhere than Linux).
//! - [`block`]: the slab of block records and its views.
//! - [`live_index`]: the heap's live blocks by address, chained through their records.
//! - [`tlsf`]: two-level segregated fit free lists with constant-time search.
//! - [`heap`]: a coalescing suballocator over upstream chunks with per-stream TLSF lists; its
//!   `segment_end` keeps the chunk's end as an expandable segment (wilderness, growth, cuts).
//! - [`heap_holes`]: ranges of a segment's chunk whose physical memory went back.
//! - [`context_scope`]: the resource's own context current for a slow path's driver calls.
//! - [`stream_order`]: ordering one stream after another with a cached event, lazily.
//! - [`stream_map`]: per-stream state found by stream handle in constant time.
//! - [`growth`]: how much a pool asks its upstream for when it must grow.
//! - [`segment`]: an expandable segment: one reserved range grown by mapping memory at its end,
//!   its free handles unmapped; `segment::unmap` gives back free handles anywhere and maps
//!   them again.
//! - [`granules`]: which granules of a segment are mapped, and when to unmap free ones.
//! - [`move_budget`]: the share of the host's time a segment may spend moving memory.
//! - [`pool_backing`]: where a pool's memory comes from: chunks or a segment.

pub(crate) mod addr_map;
pub(crate) mod block;
pub(crate) mod context_scope;
pub(crate) mod granules;
pub(crate) mod growth;
pub(crate) mod heap;
pub(crate) mod heap_holes;
pub(crate) mod live_index;
#[cfg(any(test, not(all(target_os = "linux", target_pointer_width = "64"))))]
pub(crate) mod mask_checked_slice;
pub(crate) mod move_budget;
pub(crate) mod pool_backing;
pub(crate) mod record;
pub(crate) mod record_space;
pub(crate) mod segment;
pub(crate) mod stream_map;
pub(crate) mod stream_order;
pub(crate) mod tlsf;
