//! Algorithms the resources share. Private to the crate: the resources are the API.
//!
//! - [`addr_map`]: address → record index, an open-addressing hash table.
//! - [`block`]: host-side records of device memory blocks, in a slab.
//! - [`live_index`]: the heap's live blocks by address, chained through their records.
//! - [`masked`]: a power-of-two table indexed by numbers checked against a mask, off the loads'
//!   address path (the block records' storage elsewhere than Linux).
//! - [`record_space`]: where the block records live, read by number with no check on Linux.
//! - [`context_scope`]: the resource's own context current for a slow path's driver calls.
//! - [`tlsf`]: two-level segregated fit free lists with constant-time search.
//! - [`heap`]: a coalescing suballocator over upstream chunks with per-stream TLSF lists.
//! - [`heap_tail`]: the heap's chunk as an expandable segment: its wilderness, growth and cuts.
//! - [`stream_order`]: ordering one stream after another with a cached event, lazily.
//! - [`stream_map`]: per-stream state found by stream handle in constant time.
//! - [`growth`]: how much a pool asks its upstream for when it must grow.
//! - [`segment`]: an expandable segment: one reserved range grown by mapping memory at its end.
//! - [`source`]: where a pool's memory comes from: chunks or a segment.

pub(crate) mod addr_map;
pub(crate) mod block;
pub(crate) mod context_scope;
pub(crate) mod growth;
pub(crate) mod heap;
pub(crate) mod heap_tail;
pub(crate) mod live_index;
#[cfg(any(test, not(all(target_os = "linux", target_pointer_width = "64"))))]
pub(crate) mod masked;
pub(crate) mod record_space;
pub(crate) mod segment;
pub(crate) mod source;
pub(crate) mod stream_map;
pub(crate) mod stream_order;
pub(crate) mod tlsf;
