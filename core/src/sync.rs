//! The synchronization primitives of the fine-grained resources ([`ShardedPoolResource`],
//! [`ArenaResource`] and the [`PoolResource`] behind them): std's, or loom's when built with
//! `RUSTFLAGS="--cfg loom"`, so that `tests/loom_sharded.rs` can model-check their locking
//! (`cargo xtask loom`). The same names either way: the resources import them from here.
//!
//! [`ShardedPoolResource`]: crate::mr::ShardedPoolResource
//! [`ArenaResource`]: crate::mr::ArenaResource
//! [`PoolResource`]: crate::mr::PoolResource

#[cfg(not(loom))]
pub(crate) use std::{
    sync::atomic::{AtomicU64, AtomicUsize, Ordering},
    sync::{Mutex, MutexGuard},
    thread_local,
};

// loom's `thread_local!` gives each loom thread its own value (loom runs every modelled thread
// on one OS thread, so std's would be shared), and its `Mutex` is a point where loom switches
// threads.
#[cfg(loom)]
pub(crate) use loom::{
    sync::atomic::{AtomicU64, AtomicUsize, Ordering},
    sync::{Mutex, MutexGuard},
};

/// loom's `thread_local!`, which takes no `const { … }` initializer: the same key, built
/// from the value.
#[cfg(loom)]
macro_rules! loom_thread_local {
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = const { $init:expr };) => {
        loom::thread_local! { $(#[$attr])* $vis static $name: $t = $init; }
    };
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = $init:expr;) => {
        loom::thread_local! { $(#[$attr])* $vis static $name: $t = $init; }
    };
}
#[cfg(loom)]
pub(crate) use loom_thread_local as thread_local;
