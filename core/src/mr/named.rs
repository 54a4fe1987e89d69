//! The resource chains emm names: one place that turns `pool` or `arena` into a chain, shared
//! by the built-in managers (`EMM_MEMORY_MANAGER=pool`), `emm bench`, `emm replay` and
//! `reinitialize`. [`build`] gives the chain as `Arc<dyn DeviceMemoryResource>`;
//! [`with_named`] hands a builder of its own type to a [`WithResource`], for work compiled for
//! that type (`bench::run_named`).
//!
//! The pools of `pool`, `sharded` and `binning` take chunks from `cuMemAlloc`
//! (`Backing::Chunks`), which `cuIpcGetMemHandle` exports; `pool-vmm` and `pool-vmm-tight` map
//! one expandable segment, which it cannot. `pool-vmm-tight` reads its share of the host's time
//! for moves from [`MOVE_SHARE_ENV_VAR`].

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
        "pool-vmm-tight" => {
            let share = move_share_from_env()?;
            work.with(|| {
                PoolResource::with_options(
                    cuda(),
                    PoolOptions::default()
                        .backing(Backing::ExpandableTight)
                        .move_share(share),
                )
            })
        }
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

/// Sets `pool-vmm-tight`'s [`PoolOptions::move_share`] for the chains built here: a
/// percentage of the host's time from 0 to 100 with one decimal at most (`5`, `0.5`, `2%`), or
/// `unbounded`. Unset, the default ([`PoolOptions::DEFAULT_MOVE_SHARE`]) applies.
pub const MOVE_SHARE_ENV_VAR: &str = "EMM_MOVE_SHARE";

/// `pool-vmm-tight`'s move share, in parts per thousand, from a value of
/// [`MOVE_SHARE_ENV_VAR`] (`None` or blank: unset, the default; `Ok(None)`: `unbounded`).
///
/// # Errors
///
/// [`MrError::InvalidArgument`] for anything but a percentage from 0 to 100 with one decimal
/// at most, or `unbounded`; the message quotes the value.
pub fn move_share_from(value: Option<&str>) -> MrResult<Option<u16>> {
    let Some(raw) = value.filter(|v| !v.trim().is_empty()) else {
        return Ok(PoolOptions::DEFAULT_MOVE_SHARE);
    };
    let v = raw.trim();
    if v.eq_ignore_ascii_case("unbounded") {
        return Ok(None);
    }
    let digits = v.strip_suffix('%').unwrap_or(v).trim_end();
    let (whole, tenths) = digits.split_once('.').unwrap_or((digits, "0"));
    let number = |s: &str| {
        (!s.is_empty() && s.len() <= 3 && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u16>().ok())
            .flatten()
    };
    match (number(whole), number(tenths).filter(|_| tenths.len() == 1)) {
        (Some(w), Some(t)) if w * 10 + t <= 1000 => Ok(Some(w * 10 + t)),
        _ => Err(MrError::InvalidArgument {
            resource: "pool-vmm-tight",
            reason: format!(
                "{MOVE_SHARE_ENV_VAR}={raw:?} is not a share of the host's time: give a \
                 percentage from 0 to 100 with one decimal at most (5, 0.5) or \"unbounded\", \
                 or unset it for the default of {}",
                share_text(PoolOptions::DEFAULT_MOVE_SHARE)
            ),
        }),
    }
}

/// `permille` as the percentage [`MOVE_SHARE_ENV_VAR`] takes.
fn share_text(permille: Option<u16>) -> String {
    match permille {
        None => "unbounded".to_string(),
        Some(p) if p % 10 == 0 => format!("{} %", p / 10),
        Some(p) => format!("{}.{} %", p / 10, p % 10),
    }
}

/// [`move_share_from`] this process's [`MOVE_SHARE_ENV_VAR`]; a value that is not Unicode is
/// refused as any other bad value.
fn move_share_from_env() -> MrResult<Option<u16>> {
    match std::env::var_os(MOVE_SHARE_ENV_VAR) {
        None => move_share_from(None),
        Some(v) => move_share_from(Some(&v.to_string_lossy())),
    }
}

/// Shards of `sharded`: twice the hardware threads, at least 4.
fn shard_count() -> usize {
    std::thread::available_parallelism()
        .map_or(4, |n| 2 * n.get())
        .max(4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_move_share_is_a_percentage_with_one_decimal_or_unbounded() {
        let ok = |v: &str| move_share_from(Some(v)).unwrap();
        for unset in [None, Some(""), Some("  ")] {
            assert_eq!(
                move_share_from(unset).unwrap(),
                PoolOptions::DEFAULT_MOVE_SHARE
            );
        }
        assert_eq!(ok("5"), Some(50));
        assert_eq!(ok(" 0.5 "), Some(5));
        assert_eq!(ok("2%"), Some(20));
        assert_eq!(ok("0"), Some(0), "0: never move");
        assert_eq!(ok("100.0"), Some(1000));
        assert_eq!(ok("Unbounded"), None);
        for bad in [
            "-1", "100.1", "1000", "0.25", "5.", ".5", "1e1", "five", "5 5",
        ] {
            let e = move_share_from(Some(bad)).unwrap_err().to_string();
            assert!(
                e.contains(&format!("EMM_MOVE_SHARE={bad:?}")) && e.contains("default of 5 %"),
                "{bad:?}: {e}"
            );
        }
    }

    #[test]
    fn the_default_share_reads_as_the_variable_takes_it() {
        assert_eq!(share_text(Some(50)), "5 %");
        assert_eq!(share_text(Some(5)), "0.5 %");
        assert_eq!(share_text(None), "unbounded");
    }
}
