//! emm-bench: emm's allocator benchmarks: the harness that replays the standard workloads
//! against a memory resource and measures time and memory held, its many-threads mode, the
//! replay of RMM memory event logs, and SVG charts of the results. `emm bench` and `emm replay`
//! (emm-cli) are thin layers over this crate; its examples and benches run on the simulated GPU.
//!
//! Modules:
//! - [`harness`]: one thread: time per op and memory held over a workload ([`harness::run`]).
//! - [`threads`]: many threads on one resource: throughput, memory held, driver calls.
//! - [`replay`]: replay of an RMM memory event log, every stream and thread's order kept.
//! - [`charts`]: SVG charts of benchmark results (plotters).

pub mod charts;
pub mod harness;
pub mod replay;
pub mod threads;

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, recovering the data if a thread panicked while holding it: the replay's tables
/// stay consistent at each unlock, so a panic in the resource under test never corrupts them.
#[inline]
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
