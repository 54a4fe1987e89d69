//! ABI v1.1 as the guest sees it: the same numbers as the host's `sandbox/src/abi.rs` (the
//! sandbox's tests compare the two).

/// The ABI version `emm_abi_version` returns.
pub const ABI_VERSION: i32 = 1;
/// The minor version this SDK speaks: 1 adds the `stream_order` import, which a plugin needs
/// (and a host of minor 0 refuses) only when it calls [`crate::Upstream::order_streams`].
pub const ABI_MINOR: i32 = 1;
/// Success.
pub const STATUS_OK: i32 = 0;
/// Not enough memory.
pub const STATUS_OUT_OF_MEMORY: i32 = -1;
/// The request cannot be honoured (an alignment the policy does not support).
pub const STATUS_UNSUPPORTED: i32 = -2;
/// A bad argument.
pub const STATUS_INVALID: i32 = -3;
/// A free of an allocation the policy does not know.
pub const STATUS_UNKNOWN_ALLOCATION: i32 = -4;
/// From `stream_order`: the streams were not ordered (a driver failure, or the host's limit of
/// orderings per call).
pub const STATUS_NOT_ORDERED: i32 = -5;
/// Bits of an answer that hold the offset; the chunk handle sits above them.
pub const OFFSET_BITS: u32 = 40;
/// The largest chunk.
pub const MAX_CHUNK_BYTES: u64 = 1 << OFFSET_BITS;
