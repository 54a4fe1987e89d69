//! Memory resources: RMM's model (<https://github.com/rapidsai/rmm>) in Rust.
//!
//! A [`DeviceMemoryResource`] hands out stream-ordered device memory. Resources get memory
//! from the [`Driver`] (`CudaResource`, `AsyncResource`, `ManagedResource`) or from an
//! upstream resource they own by value (`PoolResource`, `BinningResource`, …); adaptors wrap
//! an upstream and add one behaviour each (statistics, logging, limits, …). A chain is built by
//! value and shared across threads behind an `Arc`.
//!
//! # The rules every resource keeps
//!
//! - **Alignment**: every pointer is at least [`MIN_ALIGNMENT`] (256) bytes aligned. A larger
//!   alignment the resource cannot honour is [`MrError::UnsupportedAlignment`], never silently
//!   ignored (RMM's pool and arena ignore it); `AlignedAdaptor` honours any power of two.
//! - **Zero bytes**: `allocate(0)` returns [`DevicePtr::NULL`] without touching the upstream,
//!   and `deallocate(DevicePtr::NULL, 0, _)` is a no-op — the same in every resource, as in
//!   most of RMM's.
//! - **Out of memory** is [`MrError::OutOfMemory`], never a panic, and leaves the resource
//!   usable: after frees, the same request succeeds.
//! - **Bad frees** (a foreign pointer, a double free, a wrong size where the resource can tell)
//!   are [`MrError::InvalidFree`] and change nothing. `deallocate` returns a `Result` rather
//!   than recording the failure for later, so the caller that made the mistake sees it.
//! - **Streams**: memory freed on stream A is reusable at once on A; on stream B only after B
//!   waits on an event recorded on A after the free (the resource does that wait itself when it
//!   hands A's memory to B).
//!
//! Modules: one resource or adaptor per file, named after the type.

/// Writes every method of [`DeviceMemoryResource`] as a call of `<$T as $Trait>::method` on
/// `$recv`: the impls that forward each call unchanged (`Arc<R>` below, every
/// [`Adaptor`](adaptor::Adaptor)) come from this one list, so a method added to the trait is
/// added here once. A method left out is the trait's default, which a forwarding impl must not
/// fall back to: keep every method here, defaults included.
macro_rules! forward_resource_methods {
    ($T:ident: $Trait:path, |$this:ident| $recv:expr) => {
        forward_resource_methods! {
            @each $T, $Trait, $this, $recv;
            name() -> &'static str;
            allocate(bytes: usize, stream: StreamId) -> MrResult<DevicePtr>;
            deallocate(ptr: DevicePtr, bytes: usize, stream: StreamId) -> MrResult<()>;
            allocate_aligned(bytes: usize, alignment: usize, stream: StreamId) -> MrResult<DevicePtr>;
            deallocate_aligned(ptr: DevicePtr, bytes: usize, alignment: usize, stream: StreamId) -> MrResult<()>;
            is_equal(other: &dyn DeviceMemoryResource) -> bool;
            memory_info() -> Option<MemInfo>;
            release() -> MrResult<u64>;
            driver() -> &dyn Driver;
            driver_backed() -> bool;
            chunk_moves() -> Option<u64>;
            held() -> Option<u64>;
        }
    };
    (@each $T:ident, $Trait:path, $this:ident, $recv:expr;
        $($name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        $(
            #[inline]
            fn $name(&self, $($arg: $ty),*) -> $ret {
                let $this = self;
                <$T as $Trait>::$name($recv, $($arg),*)
            }
        )*
    };
}

pub mod adaptor;
pub mod arena;
pub mod binning;
pub mod cuda;
pub mod cuda_async;
pub(crate) mod detail;
pub mod event_log;
pub mod fixed_size;
pub mod local;
pub mod managed;
pub mod named;
pub mod pinned_host;
pub mod pool;
pub mod pool_options;
pub mod sharded_pool;

pub use adaptor::{
    AlignedAdaptor, FailureRetryAdaptor, LimitingAdaptor, LogHealth, LoggingAdaptor,
    PrefetchAdaptor, StatisticsAdaptor, ThreadSafeAdaptor, TrackingAdaptor,
};
pub use arena::ArenaResource;
pub use binning::BinningResource;
pub use cuda::CudaResource;
pub use cuda_async::AsyncResource;
pub use fixed_size::FixedSizeResource;
pub use local::LocalMemoryResource;
pub use managed::ManagedResource;
pub use pinned_host::PinnedHostResource;
pub use pool::{PoolLevels, PoolResource};
pub use pool_options::{Backing, Growth, PoolOptions};
pub use sharded_pool::{PerThreadPool, ShardedPoolResource};

use std::fmt;
use std::sync::Arc;

use crate::driver::{DevicePtr, Driver, HostPtr, MemInfo, StreamId};
use crate::error::DriverError;
use crate::units::Bytes;

/// Every pointer a resource returns is aligned to at least this many bytes.
pub const MIN_ALIGNMENT: usize = 256;

/// Why a resource could not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MrError {
    /// Not enough memory. `available` is what the resource could still give, when it knows.
    #[error("{resource}: out of memory: requested {}, {}; free memory or ask for less", Bytes(*requested), match available { Some(a) => format!("{} available", Bytes(*a)), None => "available unknown".to_string() })]
    OutOfMemory {
        /// The resource that ran out.
        resource: &'static str,
        /// Bytes requested.
        requested: u64,
        /// Bytes the resource could still give, if known.
        available: Option<u64>,
    },
    /// The host would not give the resource memory for its own records of blocks (an
    /// address-space limit, strict overcommit accounting, or no host memory): the request was
    /// refused and nothing changed; live blocks and the resource stay usable.
    #[error("{resource}: out of host memory: allocating {} needs more block records, and {reason}; free device allocations (their records are reused), free host memory or raise the address-space limit (ulimit -v)", Bytes(*requested))]
    HostOutOfMemory {
        /// The resource that ran out.
        resource: &'static str,
        /// Bytes requested.
        requested: u64,
        /// What the host refused.
        reason: String,
    },
    /// The resource cannot align to `alignment`.
    #[error("{resource}: cannot align {} to {alignment} bytes (supports powers of two up to {max}); wrap it in AlignedAdaptor", Bytes(*requested))]
    UnsupportedAlignment {
        /// The resource asked.
        resource: &'static str,
        /// Bytes requested.
        requested: u64,
        /// Alignment requested.
        alignment: usize,
        /// The largest alignment it supports.
        max: usize,
    },
    /// A free the resource refuses: nothing was changed.
    #[error("{resource}: cannot free {ptr} ({} bytes): {reason}", bytes)]
    InvalidFree {
        /// The resource asked.
        resource: &'static str,
        /// The pointer given.
        ptr: DevicePtr,
        /// The size given.
        bytes: u64,
        /// Why: foreign pointer, double free, wrong size, …
        reason: String,
    },
    /// An argument outside what the resource accepts (a bad configuration, a bad alignment).
    #[error("{resource}: {reason}")]
    InvalidArgument {
        /// The resource asked.
        resource: &'static str,
        /// What was wrong and what to do.
        reason: String,
    },
    /// The driver failed.
    #[error(transparent)]
    Driver(#[from] DriverError),
}

impl MrError {
    /// True for [`MrError::OutOfMemory`] and for a driver out-of-memory error.
    pub fn is_out_of_memory(&self) -> bool {
        match self {
            MrError::OutOfMemory { .. } | MrError::HostOutOfMemory { .. } => true,
            MrError::Driver(e) => e.is_out_of_memory(),
            _ => false,
        }
    }
}

impl MrError {
    /// [`MrError::HostOutOfMemory`] of `resource` for a request of `requested` bytes, whose
    /// heap's block slab could not grow.
    pub(crate) fn records_full(
        resource: &'static str,
        requested: u64,
        full: detail::heap::SlabFull,
    ) -> Self {
        MrError::HostOutOfMemory {
            resource,
            requested,
            reason: full.reason(),
        }
    }
}

/// The result of a resource operation.
pub type MrResult<T> = Result<T, MrError>;

/// Stream-ordered device memory: RMM's `device_memory_resource`.
///
/// Implementations are `Send + Sync`; share one behind an `Arc` (which is a resource too).
pub trait DeviceMemoryResource: Send + Sync {
    /// A short name for messages and logs, e.g. `PoolResource`.
    fn name(&self) -> &'static str;

    /// `bytes` of device memory, [`MIN_ALIGNMENT`]-aligned, usable on `stream` at once.
    ///
    /// # Errors
    ///
    /// [`MrError::OutOfMemory`] when it cannot be had; driver errors otherwise.
    fn allocate(&self, bytes: usize, stream: StreamId) -> MrResult<DevicePtr>;

    /// Returns `ptr` of `bytes` (as given to `allocate`) on `stream`.
    ///
    /// # Errors
    ///
    /// [`MrError::InvalidFree`] for a pointer the resource did not hand out (or already took
    /// back), and for a wrong size where the resource can tell; nothing is changed.
    fn deallocate(&self, ptr: DevicePtr, bytes: usize, stream: StreamId) -> MrResult<()>;

    /// `bytes` aligned to `alignment` (a power of two).
    ///
    /// # Errors
    ///
    /// [`MrError::UnsupportedAlignment`] above what the resource can honour.
    fn allocate_aligned(
        &self,
        bytes: usize,
        alignment: usize,
        stream: StreamId,
    ) -> MrResult<DevicePtr> {
        check_alignment(self.name(), bytes, alignment, MIN_ALIGNMENT)?;
        self.allocate(bytes, stream)
    }

    /// Frees memory from [`DeviceMemoryResource::allocate_aligned`].
    ///
    /// # Errors
    ///
    /// As [`DeviceMemoryResource::deallocate`].
    fn deallocate_aligned(
        &self,
        ptr: DevicePtr,
        bytes: usize,
        _alignment: usize,
        stream: StreamId,
    ) -> MrResult<()> {
        self.deallocate(ptr, bytes, stream)
    }

    /// Whether memory from `self` can be freed by `other` and vice versa (RMM's `is_equal`).
    /// The default: only the same object.
    fn is_equal(&self, other: &dyn DeviceMemoryResource) -> bool {
        std::ptr::addr_eq(
            self as *const Self,
            other as *const dyn DeviceMemoryResource,
        )
    }

    /// Free and total memory as this resource sees them, if it can tell.
    fn memory_info(&self) -> Option<MemInfo> {
        None
    }

    /// Gives memory the resource holds but has not handed out back to its upstream (pools,
    /// arenas, bins; adaptors pass it on); returns the bytes given back. Resources that hold
    /// nothing keep this default. A manager's `reset` calls it.
    ///
    /// # Errors
    ///
    /// The first upstream error.
    fn release(&self) -> MrResult<u64> {
        Ok(0)
    }

    /// The driver this resource's memory ultimately comes from.
    fn driver(&self) -> &dyn Driver;

    /// Whether every allocation is plain device memory straight from [`Self::driver`]
    /// (`cuMemAlloc`), with nothing counted, limited or logged on the way, so that a pool over
    /// this resource may take device memory from the driver itself (reserve and map) and lose
    /// nothing. The default: false.
    fn driver_backed(&self) -> bool {
        false
    }

    /// For resources with per-thread caches over a pool all threads share (`ShardedPoolResource`,
    /// `ArenaResource`): how many times, since it was built, memory moved between a thread's
    /// cache and the rest — a chunk taken from or given back to the shared pool, a chunk taken
    /// from another thread's cache, a request passed through to the shared pool. Each takes a
    /// lock other threads use, and across streams an event: what keeps many threads from
    /// scaling, so the many-threads benchmark reports it. The default: `None`, not counted.
    fn chunk_moves(&self) -> Option<u64> {
        None
    }

    /// Device memory the resource holds from its upstream now, handed out or kept for reuse
    /// (PyTorch's reserved bytes, against its allocated bytes): what a pool costs the device.
    /// Adaptors and resources that suballocate from a pool pass on the pool's. The default:
    /// `None`, not tracked (a resource that takes every request from the driver).
    fn held(&self) -> Option<u64> {
        None
    }
}

/// Checks an alignment request against the largest a resource supports.
///
/// # Errors
///
/// [`MrError::InvalidArgument`] when `alignment` is not a power of two;
/// [`MrError::UnsupportedAlignment`] when it exceeds `max`.
pub fn check_alignment(
    resource: &'static str,
    bytes: usize,
    alignment: usize,
    max: usize,
) -> MrResult<()> {
    if !alignment.is_power_of_two() {
        return Err(MrError::InvalidArgument {
            resource,
            reason: format!("alignment {alignment} is not a power of two"),
        });
    }
    if alignment > max {
        return Err(MrError::UnsupportedAlignment {
            resource,
            requested: bytes as u64,
            alignment,
            max,
        });
    }
    Ok(())
}

/// Host memory from a resource: pinned (page-locked) host memory, as RMM's
/// `pinned_host_memory_resource`.
pub trait HostMemoryResource: Send + Sync {
    /// A short name for messages and logs.
    fn name(&self) -> &'static str;

    /// `bytes` of host memory aligned to at least [`MIN_ALIGNMENT`].
    ///
    /// # Errors
    ///
    /// [`MrError::OutOfMemory`] when it cannot be had; driver errors otherwise.
    fn allocate_host(&self, bytes: usize) -> MrResult<HostPtr>;

    /// Returns `ptr` of `bytes`.
    ///
    /// # Errors
    ///
    /// [`MrError::InvalidFree`] for a pointer the resource did not hand out.
    fn deallocate_host(&self, ptr: HostPtr, bytes: usize) -> MrResult<()>;

    /// The driver this resource's memory comes from.
    fn driver(&self) -> &dyn Driver;
}

impl<R: DeviceMemoryResource + ?Sized> DeviceMemoryResource for Arc<R> {
    forward_resource_methods!(R: DeviceMemoryResource, |this| &**this);
}

impl fmt::Debug for dyn DeviceMemoryResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Compile-time check that a resource can be shared across threads, placed at the end of each
/// resource's file (the counterpart of RMM's trailing `static_assert`).
pub const fn assert_resource<R: DeviceMemoryResource + Send + Sync + 'static>() {}
