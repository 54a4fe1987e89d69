//! Configuration: the ABI version, the process-wide manager, the devices, and the C types the
//! header names.

use std::ffi::{c_char, c_int, c_void};

use crate::ffi::{c_str, call, status, write_out};
use crate::runtime::runtime;
use crate::status::{CapiError, EmmStatus};

/// A CUDA stream (`CUstream` / `cudaStream_t`; the same handle in the driver and runtime
/// APIs). `NULL` (0) is the legacy default stream, `2` the per-thread default stream. On the
/// simulated backend, a stream from `emm_stream_create`.
#[allow(non_camel_case_types, reason = "the CUDA runtime's name for the type")]
pub type cudaStream_t = *mut c_void;

/// A signed size, as POSIX `ssize_t` (what PyTorch's `CUDAPluggableAllocator` passes).
#[allow(non_camel_case_types, reason = "POSIX's name for the type")]
pub type ssize_t = isize;

/// The version of the C ABI this library implements ([`crate::EMM_ABI_VERSION`]).
#[no_mangle]
pub extern "C" fn emm_abi_version() -> u32 {
    call("emm_abi_version", |_| 0, || Ok(crate::EMM_ABI_VERSION))
}

/// Sets the manager of every device, process-wide: a built-in name (`"pool"`, `"default"`,
/// `"pool-vmm-tight"`, `"arena"`, `"binning"`, `"async"`, `"managed"`), the path of a `.wasm`
/// plugin, or a JSON object of resource-chain options (as `emm_reinitialize`). `NULL` or `""`:
/// `EMM_MEMORY_MANAGER` if set, else `"pool-vmm-tight"`. `EMM_MEMORY_MANAGER`, when set, wins
/// over the argument (with a warning on stderr). Live memory stays valid and goes back to the
/// manager that made it.
///
/// Returns `EMM_STATUS_CONFIG` for an unknown name or a plugin that does not load (nothing
/// changes then).
///
/// # Safety
///
/// 1. `spec` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn emm_configure(spec: *const c_char) -> EmmStatus {
    status("emm_configure", || {
        // SAFETY: the caller's promise (1).
        let spec = unsafe { c_str("emm_configure", "spec", spec) }?;
        runtime()?.configure(spec)
    })
}

/// Sets the manager as `emm_configure` does, only if nothing chose the one in use: neither the
/// program (`emm_configure`, `emm_reinitialize`) nor `EMM_MEMORY_MANAGER`. For a library that
/// needs a kind of manager without overriding a choice: Numba's IPC needs memory that
/// `cuIpcGetMemHandle` exports, which the default `"pool-vmm-tight"` cannot give, so `emm.numba`
/// asks for `"pool"`. Writes to `*applied` (when not NULL) 1 if it took effect, else 0.
///
/// Returns `EMM_STATUS_INVALID_ARGUMENT` for a spec that does not parse, whether or not it
/// would apply, and `EMM_STATUS_CONFIG` for one that applies and does not resolve (an unknown
/// name, a plugin that does not load); nothing changes then. A spec that would not apply is
/// not resolved: no plugin is loaded and no warning is printed.
///
/// # Safety
///
/// 1. `spec` is NULL or a NUL-terminated string; NULL is refused.
/// 2. `applied` is NULL or valid for writing one `int`.
#[no_mangle]
pub unsafe extern "C" fn emm_configure_if_unset(
    spec: *const c_char,
    applied: *mut c_int,
) -> EmmStatus {
    status("emm_configure_if_unset", || {
        // SAFETY: the caller's promise (1).
        let spec = unsafe { c_str("emm_configure_if_unset", "spec", spec) }?
            .ok_or_else(|| CapiError::null("emm_configure_if_unset", "spec"))?;
        let done = runtime()?.configure_if_unset(spec)?;
        if !applied.is_null() {
            // SAFETY: the caller's promise (2).
            unsafe { applied.write(c_int::from(done)) };
        }
        Ok(())
    })
}

/// Rebuilds every device's manager over a fresh resource chain from options, as RMM's
/// `rmm.reinitialize`: a JSON object with `pool_allocator` (bool), `initial_pool_size` and
/// `maximum_pool_size` (bytes), `managed_memory` (bool), `log_file_name` (string), `statistics`
/// (bool), `devices` (list of ordinals). `NULL` or `"{}"`: plain device memory, no pool.
/// `DeviceBuffer`s and Rust containers of the process use the same chains.
///
/// # Safety
///
/// 1. `options_json` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn emm_reinitialize(options_json: *const c_char) -> EmmStatus {
    status("emm_reinitialize", || {
        // SAFETY: the caller's promise (1).
        let json = unsafe { c_str("emm_reinitialize", "options_json", options_json) }?;
        let json = json
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .unwrap_or("{}");
        // Parsed here first so that a malformed object is an argument error, never taken as
        // a manager name.
        crate::selection::parse_chain(json)?;
        runtime()?.configure(Some(json))
    })
}

/// Writes the number of devices the backend sees to `*count`.
///
/// # Safety
///
/// 1. `count` is NULL or valid for writing one `int`.
#[no_mangle]
pub unsafe extern "C" fn emm_device_count(count: *mut c_int) -> EmmStatus {
    status("emm_device_count", || {
        let n = i32::try_from(runtime()?.device_count()).unwrap_or(i32::MAX);
        // SAFETY: the caller's promise (1).
        unsafe { write_out("emm_device_count", "count", count, n) }
    })
}
