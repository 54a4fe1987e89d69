//! Algorithms the resources share. Private to the crate: the resources are the API.
//!
//! - [`addr_map`]: live pointer → block index, an open-addressing hash table.
//! - [`block`]: host-side records of device memory blocks, in a slab.
//! - [`tlsf`]: two-level segregated fit free lists with constant-time search.
//! - [`heap`]: a coalescing suballocator over upstream chunks with per-stream TLSF lists.
//! - [`stream_order`]: ordering one stream after another with a cached event, lazily.
//! - [`growth`]: how much a pool asks its upstream for when it must grow.

pub(crate) mod addr_map;
pub(crate) mod block;
pub(crate) mod growth;
pub(crate) mod heap;
pub(crate) mod stream_order;
pub(crate) mod tlsf;
