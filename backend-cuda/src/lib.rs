//! emm-cuda: emm's [`emm_core::Driver`] on a real NVIDIA GPU, through cudarc's driver API
//! bindings (CUDA 13.0, loaded at run time: no CUDA toolkit is needed to build).
//!
//! Modules:
//! - `result`: one function per CUDA driver call, returning `DriverResult`; all raw `unsafe`.
//! - `host`: the host memory the driver knows, so host loads and stores are checked.
//! - `driver`: [`CudaDriver`], the `Driver` implementation, with every handle checked.
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

mod driver;
mod host;
mod result;

pub use driver::{CudaDriver, MANAGED_FREE_FRACTION};

/// Whether the NVIDIA driver library can be loaded on this machine.
pub fn driver_present() -> bool {
    result::driver_present()
}
