//! emm-plugin-sdk: write an emm allocation policy as a struct and a few methods; the SDK
//! provides the `extern "C"` layer of the plugin ABI (`plugins/ABI.md`).
//!
//! ```ignore
//! use emm_plugin_sdk::{export_plugin, Answer, Config, Error, Policy, Request, Upstream};
//!
//! pub struct Bump { chunk: Option<u32>, top: u64 }
//!
//! impl Policy for Bump {
//!     fn init(_config: &Config) -> Result<Self, Error> { Ok(Bump { chunk: None, top: 0 }) }
//!     fn alloc<U: Upstream>(&mut self, up: &mut U, req: Request) -> Result<Answer, Error> {
//!         let chunk = match self.chunk { Some(c) => c, None => up.alloc_chunk(1 << 26, 256)?.handle };
//!         self.chunk = Some(chunk);
//!         let offset = self.top;
//!         self.top += emm_plugin_sdk::round_up(req.size, 256);
//!         if self.top > 1 << 26 { return Err(Error::OutOfMemory) }
//!         Ok(Answer { chunk, offset })
//!     }
//!     fn free<U: Upstream>(&mut self, _: &mut U, _: Answer, _: u64, _: u64) -> Result<(), Error> { Ok(()) }
//! }
//! export_plugin!(Bump);
//! ```
//!
//! Modules:
//! - [`abi`]: names, status codes and the answer encoding of ABI v1.1 (the host's `abi.rs`).
//! - [`config`]: [`Config`], the `key=value` blob `emm_init` receives.
//! - `guest` (wasm32 only): the host imports, the policy's slot, the heap and the panic
//!   handler that `export_plugin!` uses.

#![no_std]
#![deny(missing_docs)]

extern crate alloc;

pub mod abi;
pub mod config;
#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
pub mod guest;

pub use config::Config;

/// The alignment every answer honours, and the granule policies round sizes to.
pub const GRANULE: u64 = 256;

/// A chunk of device memory the host gave the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    /// Its handle (≥ 1; handles are dense and reused, so they can index arrays).
    pub handle: u32,
    /// Its size in bytes.
    pub size: u64,
}

/// Where an allocation lies: a chunk the policy holds and an offset inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Answer {
    /// The chunk's handle.
    pub chunk: u32,
    /// Bytes from the chunk's base.
    pub offset: u64,
}

impl Answer {
    /// The answer as one number, `chunk << 40 | offset`: ordered by chunk then offset, so
    /// policies can keep free blocks of every chunk in one ordered map.
    #[inline]
    pub fn key(self) -> u64 {
        (u64::from(self.chunk) << abi::OFFSET_BITS) | self.offset
    }

    /// The answer a [`Answer::key`] stands for.
    #[inline]
    pub fn from_key(key: u64) -> Answer {
        Answer {
            chunk: (key >> abi::OFFSET_BITS) as u32,
            offset: key & (abi::MAX_CHUNK_BYTES - 1),
        }
    }
}

/// A request: `size` bytes aligned to `align` (a power of two, at least 256) for `stream`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Bytes asked for (at least 1).
    pub size: u64,
    /// Alignment of the device address.
    pub align: u64,
    /// The stream the memory is used on.
    pub stream: u64,
}

/// Why a policy could not do what was asked; each is a status of the ABI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// Not enough memory.
    OutOfMemory,
    /// The policy does not support the request (an alignment above 256).
    Unsupported,
    /// A bad argument.
    Invalid,
    /// A free of an allocation the policy does not know.
    UnknownAllocation,
}

impl Error {
    /// The ABI status code.
    pub fn status(self) -> i32 {
        match self {
            Error::OutOfMemory => abi::STATUS_OUT_OF_MEMORY,
            Error::Unsupported => abi::STATUS_UNSUPPORTED,
            Error::Invalid => abi::STATUS_INVALID,
            Error::UnknownAllocation => abi::STATUS_UNKNOWN_ALLOCATION,
        }
    }

    /// The error for a status the host returned.
    pub fn from_status(status: i32) -> Error {
        match status {
            abi::STATUS_OUT_OF_MEMORY => Error::OutOfMemory,
            abi::STATUS_UNSUPPORTED => Error::Unsupported,
            abi::STATUS_UNKNOWN_ALLOCATION => Error::UnknownAllocation,
            _ => Error::Invalid,
        }
    }
}

/// Counters a policy reports of itself (`emm_stats`); the host shows them as the policy's
/// word, beside what it knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Bytes free inside chunks.
    pub free_bytes: u64,
    /// Free blocks.
    pub free_blocks: u64,
    /// The largest free block.
    pub largest_free: u64,
    /// Bytes of chunks the policy holds.
    pub held_bytes: u64,
}

/// Log levels of `emm::log`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Something failed.
    Error = 0,
    /// Something looks wrong.
    Warn = 1,
    /// For the operator.
    Info = 2,
    /// For the plugin's author.
    Debug = 3,
}

/// Where chunks come from: the host's `upstream_alloc` / `upstream_free` in a plugin, a
/// native resource in a test or benchmark.
pub trait Upstream {
    /// A new chunk of `size` bytes aligned to `align`.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfMemory`] when the upstream has no more.
    fn alloc_chunk(&mut self, size: u64, align: u64) -> Result<Chunk, Error>;
    /// Returns a chunk; nothing in it may be live (the host quarantines a plugin that does).
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for a handle the policy does not hold.
    fn free_chunk(&mut self, handle: u32) -> Result<(), Error>;
    /// Makes stream `to` wait for the work queued on stream `from` so far: what a policy must
    /// do before it hands memory freed on `from` to a request on `to` (the stream-ordered
    /// rule). `true` once they are ordered (at once when `from == to`); `false` when the host
    /// could not order them (a stream it does not know, a driver failure, its limit of
    /// orderings per call): then hand `to` other memory. Calling it makes the plugin import
    /// `emm::stream_order` (ABI v1.1), and only such a plugin is offered streams: its manager
    /// has the stream-ordered extension. The default, for a native upstream with no GPU,
    /// orders nothing and says `false`.
    fn order_streams(&mut self, from: u64, to: u64) -> bool {
        let _ = (from, to);
        false
    }
    /// Logs `message` at `level`.
    fn log(&mut self, level: Level, message: &str) {
        let _ = (level, message);
    }
}

/// An allocation policy: what a plugin author writes. The host calls it one request at a
/// time; it may keep any state.
pub trait Policy: Sized {
    /// The policy, configured by the blob `emm_init` receives.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for a config it refuses.
    fn init(config: &Config) -> Result<Self, Error>;

    /// Where `req.size` bytes go. The host checks the answer: inside a chunk the policy
    /// holds, aligned, overlapping no live allocation; a wrong answer quarantines the plugin.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfMemory`], [`Error::Unsupported`].
    fn alloc<U: Upstream>(&mut self, up: &mut U, req: Request) -> Result<Answer, Error>;

    /// `answer`, of `size` bytes, is free again (the host checked it was live, with this
    /// size).
    ///
    /// # Errors
    ///
    /// Any error quarantines the plugin: the host knows the allocation was handed out.
    fn free<U: Upstream>(
        &mut self,
        up: &mut U,
        answer: Answer,
        size: u64,
        stream: u64,
    ) -> Result<(), Error>;

    /// Return empty chunks until at most `keep` bytes of them stay.
    ///
    /// # Errors
    ///
    /// Any error quarantines the plugin.
    fn trim<U: Upstream>(&mut self, up: &mut U, keep: u64) -> Result<(), Error> {
        let _ = (up, keep);
        Ok(())
    }

    /// Return every empty chunk and forget caches (`reset`); live allocations stay.
    ///
    /// # Errors
    ///
    /// Any error quarantines the plugin.
    fn reset<U: Upstream>(&mut self, up: &mut U) -> Result<(), Error> {
        self.trim(up, 0)
    }

    /// The policy's counters.
    fn stats(&self) -> Stats {
        Stats::default()
    }

    /// A `defer_cleanup` scope begins: avoid returning chunks until it ends.
    fn defer_enter(&mut self) {}

    /// The innermost `defer_cleanup` scope ended.
    ///
    /// # Errors
    ///
    /// Any error quarantines the plugin.
    fn defer_exit<U: Upstream>(&mut self, up: &mut U) -> Result<(), Error> {
        let _ = up;
        Ok(())
    }
}

/// How many `defer_cleanup` scopes are open, for a policy that holds chunks back while one
/// is: [`Deferral::enter`] from [`Policy::defer_enter`], [`Deferral::exit`] from
/// [`Policy::defer_exit`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Deferral(u32);

impl Deferral {
    /// A scope begins.
    #[inline]
    pub fn enter(&mut self) {
        self.0 += 1;
    }

    /// The innermost scope ended: true when none is open any more, the time to give back
    /// what the scopes held back.
    #[inline]
    pub fn exit(&mut self) -> bool {
        self.0 = self.0.saturating_sub(1);
        self.0 == 0
    }

    /// Whether a scope is open.
    #[inline]
    pub fn is_active(self) -> bool {
        self.0 > 0
    }

    /// A new [`GRANULE`]-aligned chunk of `size` bytes from `up`. When the upstream is out of
    /// memory and no scope is open, `policy` first gives back what is empty (`trim(up, 0)`),
    /// and the chunk is asked for once more.
    ///
    /// # Errors
    ///
    /// The upstream's, or the trim's.
    pub fn alloc_chunk_or_trim<P: Policy, U: Upstream>(
        self,
        policy: &mut P,
        up: &mut U,
        size: u64,
    ) -> Result<Chunk, Error> {
        match up.alloc_chunk(size, GRANULE) {
            Err(Error::OutOfMemory) if !self.is_active() => {
                policy.trim(up, 0)?;
                up.alloc_chunk(size, GRANULE)
            }
            other => other,
        }
    }
}

/// `value` rounded up to a multiple of `to` (a power of two); `None` on overflow.
#[inline]
pub fn checked_round_up(value: u64, to: u64) -> Option<u64> {
    Some(value.checked_add(to - 1)? & !(to - 1))
}

/// `value` rounded up to a multiple of `to` (a power of two), saturating.
#[inline]
pub fn round_up(value: u64, to: u64) -> u64 {
    checked_round_up(value, to).unwrap_or(!(to - 1))
}

/// Exports `$policy` (a type implementing [`Policy`]) as an emm plugin: the ABI's
/// `extern "C"` functions, on wasm32 only (natively the policy is an ordinary type).
#[macro_export]
macro_rules! export_plugin {
    ($policy:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            static SLOT: $crate::guest::Slot<$policy> = $crate::guest::Slot::new();

            #[no_mangle]
            extern "C" fn emm_abi_version() -> i32 {
                $crate::abi::ABI_VERSION
            }
            #[no_mangle]
            extern "C" fn emm_buffer(len: i32) -> i32 {
                $crate::guest::buffer(len)
            }
            #[no_mangle]
            extern "C" fn emm_init(ptr: i32, len: i32) -> i32 {
                $crate::guest::init(&SLOT, ptr, len)
            }
            #[no_mangle]
            extern "C" fn emm_alloc(size: i64, align: i64, stream: i64) -> i64 {
                $crate::guest::alloc(&SLOT, size, align, stream)
            }
            #[no_mangle]
            extern "C" fn emm_free(chunk: i32, offset: i64, size: i64, stream: i64) -> i32 {
                $crate::guest::free(&SLOT, chunk, offset, size, stream)
            }
            #[no_mangle]
            extern "C" fn emm_reset() -> i32 {
                $crate::guest::reset(&SLOT)
            }
            #[no_mangle]
            extern "C" fn emm_trim(keep: i64) -> i32 {
                $crate::guest::trim(&SLOT, keep)
            }
            #[no_mangle]
            extern "C" fn emm_stats() -> i32 {
                $crate::guest::stats(&SLOT)
            }
            #[no_mangle]
            extern "C" fn emm_defer_enter() {
                $crate::guest::defer_enter(&SLOT)
            }
            #[no_mangle]
            extern "C" fn emm_defer_exit() -> i32 {
                $crate::guest::defer_exit(&SLOT)
            }
        };
    };
}
