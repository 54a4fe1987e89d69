//! emm-cuda: emm's [`emm_core::Driver`] on a real NVIDIA GPU, through cudarc's driver API
//! bindings (by default CUDA 13.0, loaded at run time: no CUDA toolkit is needed to build).
//!
//! # cudarc's choices belong to the final binary
//!
//! emm-cuda forwards cudarc's CUDA-version features (`cuda-12020` to `cuda-13040`,
//! `cuda-version-from-build-system`) and its linking modes (`dynamic-loading`,
//! `dynamic-linking`, `static-linking`). The defaults are `cuda-13000` and `dynamic-loading`; a
//! binary that wants others turns them off and picks exactly one of each, here rather than on
//! its own cudarc dependency (cudarc refuses two versions or two linking modes, and emm-cuda
//! only knows the linking mode chosen through its own features):
//!
//! ```toml
//! emm-cuda = { version = "0.1", default-features = false, features = ["cuda-12040", "dynamic-linking"] }
//! ```
//!
//! Minimum NVIDIA driver: one that supports CUDA 12.2 (Linux 535.54.03, Windows 536.25), the
//! release that added `cuMemAdvise_v2` and `cuMemPrefetchAsync_v2`, the newest driver entry
//! points emm-cuda calls; for the same reason CUDA 12.2 is the oldest version feature offered.
//! A driver older than the chosen bindings still works as long as it has those entry points.
//!
//! Modules:
//! - `result`: one function per CUDA driver call, returning `DriverResult`; all raw `unsafe`.
//! - `host`: the host memory the driver knows, so host loads and stores are checked.
//! - `driver`: [`CudaDriver`], the `Driver` implementation, with every handle checked.
//! - [`cudarc_interop`]: emm memory where cudarc takes device memory ([`cudarc_interop::AsCudarc`]),
//!   emm streams from cudarc's ([`cudarc_interop::adopt_stream`]).
//!
//! Without a GPU or without the NVIDIA driver, [`CudaDriver::new`] returns an error
//! (`CUDA_ERROR_NO_DEVICE`); nothing panics.
#![allow(
    unsafe_code,
    reason = "the one crate that calls the CUDA driver's C API"
)]
#![deny(
    clippy::undocumented_unsafe_blocks,
    clippy::missing_safety_doc,
    unsafe_op_in_unsafe_fn
)]

pub mod cudarc_interop;
mod driver;
mod host;
mod result;

pub use driver::{CudaDriver, MANAGED_FREE_FRACTION};

/// Whether the NVIDIA driver library can be loaded on this machine.
pub fn driver_present() -> bool {
    result::driver_present()
}
