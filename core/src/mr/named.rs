//! The resource chains emm names: one place that turns `pool` or `arena` into a chain, shared
//! by the built-in managers (`EMM_MEMORY_MANAGER=pool`), `emm bench`, `emm replay` and
//! `reinitialize`. [`build`] gives the chain as `Arc<dyn DeviceMemoryResource>`;
//! [`with_named`] hands a builder of its own type to a [`WithResource`], for work compiled for
//! that type (`bench::run_named`).
//!
//! Their pools take chunks from `cuMemAlloc` (`Backing::Chunks`), not an expandable segment:
//! the managers built on these chains export memory with `cuIpcGetMemHandle`, which takes
//! `cuMemAlloc` memory only.

use std::sync::Arc;

use crate::driver::Driver;
use crate::mr::{
    ArenaResource, AsyncResource, Backing, BinningResource, CudaResource, DeviceMemoryResource,
    ManagedResource, MrError, MrResult, PoolOptions, PoolResource, ShardedPoolResource,
};

/// Smallest and largest bin of `binning`, as powers of two: 256 B to 1 MiB in bins, larger
/// requests to the pool.
pub const BINNING_RANGE: (u32, u32) = (8, 20);

/// Every named chain with what it is, in the order `emm list` shows them.
pub const NAMED_RESOURCES: &[(&str, &str)] = &[
    (
        "pool",
        "PoolResource over CudaResource: coalescing TLSF pool of cuMemAlloc chunks, no preallocation",
    ),
    (
        "pool-vmm",
        "PoolResource on one expandable segment (cuMemCreate / cuMemMap): little memory held, few driver calls; no IPC",
    ),
    (
        "pool-vmm-tight",
        "pool-vmm that also unmaps free memory inside its segment: the least memory held, more driver calls; no IPC",
    ),
    (
        "sharded",
        "ShardedPoolResource: per-thread shards over a shared pool of cuMemAlloc chunks, for many threads",
    ),
    (
        "arena",
        "ArenaResource over CudaResource: per-thread arenas over a global pool",
    ),
    (
        "binning",
        "BinningResource (bins 256 B to 1 MiB) over PoolResource over CudaResource",
    ),
    (
        "async",
        "AsyncResource: the driver's stream-ordered pool (cuMemAllocAsync)",
    ),
    ("managed", "ManagedResource: cuMemAllocManaged per request"),
    ("cuda", "CudaResource: cuMemAlloc / cuMemFree per request"),
];

type Shared = Arc<dyn Driver>;

/// What to do with a named chain as its own type: [`with_named`] hands it a builder, so that
/// the work is compiled for that type (the benchmarks, whose calls then inline as the peers'
/// C++ harness inlines its allocators') instead of going through `dyn DeviceMemoryResource`.
pub trait WithResource {
    /// What the work returns.
    type Output;

    /// Does the work with `build`, which builds the chain (and may fail as the chain's
    /// constructor does).
    fn with<R: DeviceMemoryResource + 'static>(
        self,
        build: impl FnOnce() -> MrResult<R>,
    ) -> Self::Output;
}

/// Hands `work` a builder of the chain named `name` on `driver`, for the calling thread's
/// current context.
///
/// # Errors
///
/// [`MrError::InvalidArgument`] for an unknown name (the message lists the known ones); the
/// builder returns the resources' own errors (e.g. creating the driver pool of `async`).
pub fn with_named<W: WithResource>(name: &str, driver: Shared, work: W) -> MrResult<W::Output> {
    let cuda = || CudaResource::<Shared>::new(Arc::clone(&driver));
    let pool = || PoolResource::chunked(cuda());
    Ok(match name {
        "pool" => work.with(|| Ok(pool())),
        "pool-vmm" => work.with(|| Ok(PoolResource::new(cuda()))),
        "pool-vmm-tight" => work.with(|| {
            PoolResource::with_options(
                cuda(),
                PoolOptions::default().backing(Backing::ExpandableTight),
            )
        }),
        "sharded" => work.with(|| Ok(ShardedPoolResource::over(pool(), shard_count()))),
        "arena" => work.with(|| Ok(ArenaResource::new(cuda()))),
        "binning" => {
            work.with(|| BinningResource::with_range(pool(), BINNING_RANGE.0, BINNING_RANGE.1))
        }
        "async" => work.with(|| AsyncResource::<Shared>::new(Arc::clone(&driver))),
        "managed" => work.with(|| Ok(ManagedResource::<Shared>::new(Arc::clone(&driver)))),
        "cuda" => work.with(|| Ok(cuda())),
        other => {
            return Err(MrError::InvalidArgument {
                resource: "named resource",
                reason: format!(
                    "no resource named {other:?}; known: {}",
                    NAMED_RESOURCES
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })
        }
    })
}

/// Builds the chain named `name` on `driver`, for the calling thread's current context.
///
/// # Errors
///
/// As [`with_named`].
pub fn build(name: &str, driver: Shared) -> MrResult<Arc<dyn DeviceMemoryResource>> {
    struct ToArc;
    impl WithResource for ToArc {
        type Output = MrResult<Arc<dyn DeviceMemoryResource>>;
        fn with<R: DeviceMemoryResource + 'static>(
            self,
            build: impl FnOnce() -> MrResult<R>,
        ) -> Self::Output {
            Ok(Arc::new(build()?))
        }
    }
    with_named(name, driver, ToArc)?
}

/// Shards of `sharded`: twice the hardware threads, at least 4.
fn shard_count() -> usize {
    std::thread::available_parallelism()
        .map_or(4, |n| 2 * n.get())
        .max(4)
}
