//! Unified memory: the caching managed allocator with move-instead-of-copy that the PyTorch
//! RFC "Unified Memory for PyTorch" proposes (<https://github.com/pytorch/rfcs/pull/36>), for any Rust or C caller.
//!
//! Modules:
//! - [`caching`]: [`CachingManagedAllocator`], managed segments carved by the pool's heap,
//!   cached with per-stream free lists, advised once per segment.
//! - `cache_state`: the allocator's pools of segments, one per kind of block.
//! - `segments`: its slow paths: taking segments within the limit, giving them back.
//! - `resource`: the allocator as a `DeviceMemoryResource`, and its drop.
//! - [`options`]: [`CachingManagedOptions`] (rounding, segment sizes), [`ManagedLimit`],
//!   [`GiveBack`].
//! - [`hints`]: [`Placement`], the RFC's `cuMemAdvise` hints for device, host and plain
//!   managed allocations.
//! - [`buffer`]: [`ManagedBuffer`], `is_managed`, `to` (move, not copy), `manage`,
//!   `unmanage`.
//! - `copy`: `ManagedBuffer`'s copies (forced, managed-ness, standard buffers).
//! - [`to_options`]: [`ToOptions`], what a conversion changes besides the location.
//! - `storage`: the memory behind `ManagedBuffer` handles, returned when the last goes.
//! - [`manager`]: [`UnifiedManager`], a context's manager with unified memory on.
//! - [`enable`]: [`set_enabled_unified_memory`], `EMM_ENABLE_UNIFIED_MEMORY`, the options of
//!   new contexts and the seam into `selection::create_manager`.
//! - [`stats`]: [`CachingStats`], the allocator's counters.
//! - [`error`]: [`UnifiedError`], every failure of unified memory.

pub mod buffer;
mod cache_state;
pub mod caching;
mod copy;
pub mod enable;
pub mod error;
pub mod hints;
pub mod manager;
pub mod options;
mod resource;
mod segments;
pub mod stats;
mod storage;
pub mod to_options;

pub use buffer::ManagedBuffer;
pub use caching::CachingManagedAllocator;
pub use enable::{
    check_unified_memory_support, context_allocator, get_enabled_unified_memory, resolve_enabled,
    set_enabled_unified_memory, set_unified_memory_options, unified_memory_options,
    wrap_if_enabled, UNIFIED_MEMORY_ENV_VAR,
};
pub use error::UnifiedError;
pub use hints::Placement;
pub use manager::UnifiedManager;
pub use options::{
    CachingManagedOptions, GiveBack, ManagedLimit, MANAGED_FREE_FRACTION, MAX_ROUNDING,
};
pub use stats::CachingStats;
pub use to_options::ToOptions;
