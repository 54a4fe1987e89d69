//! The plugin ABI, version [`ABI_VERSION`].[`ABI_MINOR`]: every name, signature, status code and encoding the
//! host and a guest agree on. `plugins/ABI.md` is the same contract in prose (with a `.wit`
//! description); the guest SDK (`plugins/sdk`) mirrors its numbers, and the sandbox's tests
//! hold the two copies equal.
//!
//! A plugin is a core WebAssembly module for `wasm32-unknown-unknown` (no WASI, no component
//! model: a core call costs about 12 ns here against about 110 ns through the component model,
//! and the allocation path cannot afford the difference). Export names carry an `emm_` prefix
//! so they never clash with libc symbols (`free`, `malloc`).

/// The ABI version this host speaks; `emm_abi_version` must return it.
pub const ABI_VERSION: i32 = 1;

/// The minor version: additions a plugin of [`ABI_VERSION`] may use and an older plugin never
/// sees. Minor 1 adds [`IMPORT_STREAM_ORDER`] and [`STATUS_NOT_ORDERED`]. A plugin does not
/// report its minor version: it needs minor 1 exactly when it imports `stream_order`, which a
/// host of minor 0 refuses at load, naming the import.
pub const ABI_MINOR: i32 = 1;

/// The module the host functions are imported from.
pub const IMPORT_MODULE: &str = "emm";

/// `upstream_alloc(size: i64, align: i64) -> i32`: a new chunk of `size` bytes aligned to
/// `align`; a chunk handle (≥ 1) or a negative status.
pub const IMPORT_UPSTREAM_ALLOC: &str = "upstream_alloc";
/// `upstream_free(handle: i32) -> i32`: returns a chunk that holds no live allocation.
pub const IMPORT_UPSTREAM_FREE: &str = "upstream_free";
/// `log(level: i32, ptr: i32, len: i32)`: a UTF-8 message from guest memory.
pub const IMPORT_LOG: &str = "log";
/// `stream_order(from: i64, to: i64) -> i32` (minor 1): makes stream `to` wait for the work
/// queued on `from` so far, as a plugin must before it hands memory freed on `from` to `to`.
/// [`STATUS_OK`], [`STATUS_INVALID`] for a stream that is negative or that the driver does not
/// know, or [`STATUS_NOT_ORDERED`]. A plugin that imports it is offered streams: its manager
/// has the stream-ordered extension.
pub const IMPORT_STREAM_ORDER: &str = "stream_order";

/// The guest's linear memory (required).
pub const EXPORT_MEMORY: &str = "memory";
/// `emm_abi_version() -> i32` (required).
pub const EXPORT_ABI_VERSION: &str = "emm_abi_version";
/// `emm_buffer(len: i32) -> i32`: where the host may write `len` bytes of config (required).
pub const EXPORT_BUFFER: &str = "emm_buffer";
/// `emm_init(ptr: i32, len: i32) -> i32`: start with the config blob at `ptr` (required).
pub const EXPORT_INIT: &str = "emm_init";
/// `emm_alloc(size: i64, align: i64, stream: i64) -> i64`: an [`Answer`] or a status
/// (required).
pub const EXPORT_ALLOC: &str = "emm_alloc";
/// `emm_free(chunk: i32, offset: i64, size: i64, stream: i64) -> i32` (required).
pub const EXPORT_FREE: &str = "emm_free";
/// `emm_reset() -> i32`: return every chunk that holds nothing live, forget caches (optional).
pub const EXPORT_RESET: &str = "emm_reset";
/// `emm_trim(keep: i64) -> i32`: return empty chunks until at most `keep` bytes of them stay
/// (optional).
pub const EXPORT_TRIM: &str = "emm_trim";
/// `emm_stats() -> i32`: the address of [`STATS_WORDS`] little-endian `u64`s in guest memory,
/// or a negative status (optional).
pub const EXPORT_STATS: &str = "emm_stats";
/// `emm_defer_enter()`: a `defer_cleanup` scope begins (optional).
pub const EXPORT_DEFER_ENTER: &str = "emm_defer_enter";
/// `emm_defer_exit() -> i32`: the innermost `defer_cleanup` scope ends (optional).
pub const EXPORT_DEFER_EXIT: &str = "emm_defer_exit";

/// Success.
pub const STATUS_OK: i32 = 0;
/// Not enough memory (the guest's, or upstream's).
pub const STATUS_OUT_OF_MEMORY: i32 = -1;
/// The guest cannot honour the request (an alignment it does not support).
pub const STATUS_UNSUPPORTED: i32 = -2;
/// A bad argument (from the host: size 0, a size too large, an alignment that is not a power
/// of two).
pub const STATUS_INVALID: i32 = -3;
/// `emm_free` of an allocation the guest does not know.
pub const STATUS_UNKNOWN_ALLOCATION: i32 = -4;
/// From `stream_order` (minor 1): the streams were not ordered (the driver failed, or the call
/// used up `PluginLimits::max_stream_orders_per_call`); memory freed on `from` must not be
/// handed to `to` in this call.
pub const STATUS_NOT_ORDERED: i32 = -5;

/// Bits of an [`Answer`] that hold the offset; the chunk handle sits above them.
pub const OFFSET_BITS: u32 = 40;
/// The largest chunk, and so the largest request: offsets must fit [`OFFSET_BITS`].
pub const MAX_CHUNK_BYTES: u64 = 1 << OFFSET_BITS;
/// The largest chunk handle: handles fit the 23 bits above the offset, below the sign bit.
pub const MAX_CHUNK_HANDLE: u32 = (1 << 23) - 1;

/// Number of `u64` words `emm_stats` writes: free bytes, free blocks, largest free block,
/// bytes the guest believes it holds.
pub const STATS_WORDS: usize = 4;

/// Longest log message the host reads; longer ones are cut.
pub const MAX_LOG_BYTES: usize = 1024;

/// Largest config blob the host passes to `emm_init`.
pub const MAX_CONFIG_BYTES: usize = 64 * 1024;

/// An allocation as a guest answers it: a chunk it holds and an offset inside it. Encoded in
/// the `i64` result of `emm_alloc` as `chunk << 40 | offset`; a negative result is a status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    /// The chunk handle from `upstream_alloc`.
    pub chunk: u32,
    /// Bytes from the chunk's base.
    pub offset: u64,
}

impl Answer {
    /// Decodes `emm_alloc`'s result: `Ok(answer)` or `Err(status)` for a negative value.
    #[inline]
    pub fn decode(raw: i64) -> Result<Answer, i64> {
        let Ok(bits) = u64::try_from(raw) else {
            return Err(raw);
        };
        let chunk = u32::try_from(bits >> OFFSET_BITS).map_err(|_| raw)?;
        Ok(Answer {
            chunk,
            offset: bits & (MAX_CHUNK_BYTES - 1),
        })
    }

    /// Encodes the answer as `emm_alloc` returns it; `None` when a field is out of range.
    pub fn encode(self) -> Option<i64> {
        if self.chunk > MAX_CHUNK_HANDLE || self.offset >= MAX_CHUNK_BYTES {
            return None;
        }
        i64::try_from((u64::from(self.chunk) << OFFSET_BITS) | self.offset).ok()
    }
}

/// The name of a status code, for messages.
pub fn status_name(status: i64) -> &'static str {
    match status {
        0 => "OK",
        -1 => "OUT_OF_MEMORY",
        -2 => "UNSUPPORTED",
        -3 => "INVALID",
        -4 => "UNKNOWN_ALLOCATION",
        -5 => "NOT_ORDERED",
        _ => "not a status of ABI v1",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_round_trip_and_negative_values_are_statuses() {
        let a = Answer {
            chunk: 7,
            offset: 0x12_3400,
        };
        let raw = a.encode().unwrap();
        assert_eq!(raw, (7 << 40) | 0x12_3400);
        assert_eq!(Answer::decode(raw), Ok(a));
        assert_eq!(Answer::decode(-1), Err(-1));
        let top = Answer {
            chunk: MAX_CHUNK_HANDLE,
            offset: MAX_CHUNK_BYTES - 1,
        };
        assert_eq!(Answer::decode(top.encode().unwrap()), Ok(top));
        assert_eq!(
            Answer {
                chunk: MAX_CHUNK_HANDLE + 1,
                offset: 0
            }
            .encode(),
            None
        );
        assert_eq!(status_name(-1), "OUT_OF_MEMORY");
        assert_eq!(status_name(-5), "NOT_ORDERED");
        assert_eq!(status_name(-99), "not a status of ABI v1");
    }
}
