//! emm-capi: emm's C ABI, so that Numba, CuPy and PyTorch in one process share one memory
//! manager (the source documents' "Importance of external allocator interfaces": each library
//! keeping its own pool makes them compete for memory). `capi/include/emm.h` is generated from
//! this crate by cbindgen (`cargo xtask header` fails when it is stale); `capi/python/emm` is the
//! Python package over it (ctypes, no build step).
//!
//! Modules:
//! - `status`: [`EmmStatus`] codes and [`CapiError`], the one error type of the boundary.
//! - `last_error`: the last error of each thread (code and message).
//! - `ffi`: `catch_unwind` around every entry point; a panic becomes `EMM_STATUS_PANIC`.
//! - `backend`: the driver chosen by `EMM_BACKEND` (`cuda`, the default, or `sim`) and the
//!   mapping of a caller's raw stream to a driver stream.
//! - `selection`: the manager spec (built-in name, `.wasm` path, or reinitialize options).
//! - `chain_factory`: the managers over the resource chains `emm_reinitialize` builds.
//! - `live_table`: one device's live allocations and their statistics.
//! - `host_table`: host memory and pins by the caller's address (real memory on the
//!   simulator).
//! - `runtime`: the process-wide state: backend, manager, one context per device.
//! - `runtime_resource`: the runtime as a `DeviceMemoryResource`, so `DeviceBuffer`s share it.
//! - `buffers`: the `DeviceBuffer`s handed out by handle.
//! - `api_*`: the `extern "C"` entry points, grouped by what they do.
#![allow(
    unsafe_code,
    reason = "the C ABI: raw pointers from C callers are read and written at this boundary only"
)]
#![deny(
    clippy::undocumented_unsafe_blocks,
    clippy::missing_safety_doc,
    unsafe_op_in_unsafe_fn
)]

mod api_buffer;
mod api_config;
mod api_cupy;
mod api_device;
mod api_error;
mod api_host;
mod api_info;
mod api_torch;
mod backend;
mod buffers;
mod chain_factory;
mod ffi;
mod host_table;
mod last_error;
mod live_table;
mod runtime;
mod runtime_resource;
mod selection;
mod status;

pub use api_buffer::*;
pub use api_config::*;
pub use api_cupy::*;
pub use api_device::*;
pub use api_error::*;
pub use api_host::*;
pub use api_info::*;
pub use api_torch::*;
pub use status::{CapiError, EmmStatus};

/// The version of this C ABI; `emm_abi_version()` returns it and the Python package checks it.
pub const EMM_ABI_VERSION: u32 = 1;
