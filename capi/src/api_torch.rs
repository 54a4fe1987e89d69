//! The two functions PyTorch's `torch.cuda.memory.CUDAPluggableAllocator(path, "emm_torch_alloc",
//! "emm_torch_free")` loads, with exactly the signatures it calls. They allocate on the given
//! device (its primary context made current for the call) and stream, never device 0 by default.

use std::ffi::{c_int, c_void};

use crate::api_config::{cudaStream_t, ssize_t};
use crate::ffi::call;
use crate::runtime::runtime;
use crate::status::CapiError;

/// Allocates `size` bytes on `device`, ordered on `stream`; NULL on failure, with the cause in
/// `emm_last_error_code` / `emm_last_error_message` (`EMM_STATUS_OUT_OF_MEMORY` when memory ran
/// out: the Python side raises `torch.cuda.OutOfMemoryError`). Size 0 gives NULL and no error.
#[no_mangle]
pub extern "C" fn emm_torch_alloc(
    size: ssize_t,
    device: c_int,
    stream: cudaStream_t,
) -> *mut c_void {
    call(
        "emm_torch_alloc",
        |_| std::ptr::null_mut(),
        || {
            let size = usize::try_from(size).map_err(|_| {
                CapiError::invalid("emm_torch_alloc", format!("size {size} is negative"))
            })?;
            if size == 0 {
                return Ok(std::ptr::null_mut());
            }
            let r = runtime()?;
            let d = r.device(device)?;
            let s = r.stream(stream, d)?;
            Ok(r.alloc(d, size, s)? as *mut c_void)
        },
    )
}

/// Frees `ptr` from `emm_torch_alloc` on `stream`. NULL is ignored. The pointer decides the
/// device: `device` is only a hint, so another device's ordinal frees it all the same.
/// PyTorch gives this function no way to report an error: a failure (an unknown pointer) is
/// recorded as the thread's last error and written to stderr.
#[no_mangle]
pub extern "C" fn emm_torch_free(
    ptr: *mut c_void,
    size: ssize_t,
    device: c_int,
    stream: cudaStream_t,
) {
    let _ = size;
    call(
        "emm_torch_free",
        |_| (),
        || {
            if ptr.is_null() {
                return Ok(());
            }
            runtime()?.free_from_hook("emm_torch_free", ptr as u64, device, Some(stream))
        },
    );
}
