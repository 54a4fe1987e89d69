//! `DeviceBuffer`s by handle (the Python `emm.DeviceBuffer`, RMM's `rmm.DeviceBuffer`): untyped
//! stream-ordered device memory from the same manager as `emm_alloc`.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use emm_core::containers::DeviceBuffer;
use emm_core::mr::DeviceMemoryResource;

use crate::api_config::cudaStream_t;
use crate::ffi::{status, write_out};
use crate::runtime::runtime;
use crate::runtime_resource::RuntimeResource;
use crate::status::{CapiError, EmmStatus};

/// Makes a buffer of `size` uninitialized bytes on `device`, on `stream` (size 0 is allowed:
/// an empty buffer with a NULL address), and writes its handle to `*handle`. When `data` is
/// not NULL the buffer holds a copy of its `size` bytes.
///
/// # Safety
///
/// 1. `data` is NULL or points to `size` readable bytes.
/// 2. `handle` is NULL or valid for writing one `uint64_t`.
/// 3. `stream` is NULL, 2, or a live stream of `device`.
#[no_mangle]
pub unsafe extern "C" fn emm_device_buffer_new(
    data: *const c_void,
    size: usize,
    device: c_int,
    stream: cudaStream_t,
    handle: *mut u64,
) -> EmmStatus {
    const F: &str = "emm_device_buffer_new";
    status(F, || {
        CapiError::non_null(F, "handle", handle)?;
        let r = runtime()?;
        let d = r.device(device)?;
        let s = r.stream(stream, d)?;
        let mr: Arc<dyn DeviceMemoryResource> =
            Arc::new(RuntimeResource::new(d, Arc::clone(r.driver())));
        let buffer = r.in_context(d, || {
            let b = DeviceBuffer::new_in(size, s, mr)?;
            if !data.is_null() && size > 0 {
                // SAFETY: `size` readable bytes at `data` by the caller's promise (1).
                let bytes = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), size) };
                b.copy_from_host(0, bytes)?;
            }
            Ok(b)
        })?;
        let h = r.buffers.insert(d, buffer);
        // SAFETY: checked non-null; writable by the caller's promise (2).
        unsafe { write_out(F, "handle", handle, h) }
    })
}

/// Writes the buffer's size in bytes to `*size` and its device address to `*ptr` (either may
/// be NULL when not wanted).
///
/// # Safety
///
/// 1. `size` and `ptr` are NULL or valid for writing one value each.
#[no_mangle]
pub unsafe extern "C" fn emm_device_buffer_info(
    handle: u64,
    size: *mut usize,
    ptr: *mut *mut c_void,
) -> EmmStatus {
    const F: &str = "emm_device_buffer_info";
    status(F, || {
        let (n, p) = runtime()?
            .buffers
            .with(F, handle, |_, b| Ok((b.size(), b.ptr().0)))?;
        if !size.is_null() {
            // SAFETY: non-null; writable by the caller's promise (1).
            unsafe { write_out(F, "size", size, n) }?;
        }
        if !ptr.is_null() {
            // SAFETY: non-null; writable by the caller's promise (1).
            unsafe { write_out(F, "ptr", ptr, p as *mut c_void) }?;
        }
        Ok(())
    })
}

/// Copies `len` bytes from `offset` in the buffer to `dst`, after the work on `stream`.
///
/// # Safety
///
/// 1. `dst` is NULL or valid for writing `len` bytes.
/// 2. `stream` is NULL, 2, or a live stream of the buffer's device.
#[no_mangle]
pub unsafe extern "C" fn emm_device_buffer_copy_to_host(
    handle: u64,
    offset: usize,
    dst: *mut c_void,
    len: usize,
    stream: cudaStream_t,
) -> EmmStatus {
    const F: &str = "emm_device_buffer_copy_to_host";
    status(F, || {
        if dst.is_null() && len > 0 {
            return Err(CapiError::null(F, "dst"));
        }
        let r = runtime()?;
        r.buffers.with(F, handle, |d, b| {
            if len == 0 {
                return Ok(());
            }
            let s = r.stream(stream, d)?;
            // SAFETY: `len` writable bytes at `dst` by the caller's promise (1).
            let out = unsafe { std::slice::from_raw_parts_mut(dst.cast::<u8>(), len) };
            r.in_context(d, || Ok(b.copy_to_host(offset, out, s)?))
        })
    })
}

/// Copies `len` bytes from `src` into the buffer at `offset`.
///
/// # Safety
///
/// 1. `src` is NULL or points to `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn emm_device_buffer_copy_from_host(
    handle: u64,
    offset: usize,
    src: *const c_void,
    len: usize,
) -> EmmStatus {
    const F: &str = "emm_device_buffer_copy_from_host";
    status(F, || {
        if src.is_null() && len > 0 {
            return Err(CapiError::null(F, "src"));
        }
        let r = runtime()?;
        r.buffers.with(F, handle, |d, b| {
            if len == 0 {
                return Ok(());
            }
            // SAFETY: `len` readable bytes at `src` by the caller's promise (1).
            let data = unsafe { std::slice::from_raw_parts(src.cast::<u8>(), len) };
            r.in_context(d, || Ok(b.copy_from_host(offset, data)?))
        })
    })
}

/// Resizes the buffer to `size` bytes on `stream`, keeping the contents that fit. On failure
/// (out of memory) the buffer is unchanged.
///
/// # Safety
///
/// 1. `stream` is NULL, 2, or a live stream of the buffer's device.
#[no_mangle]
pub unsafe extern "C" fn emm_device_buffer_resize(
    handle: u64,
    size: usize,
    stream: cudaStream_t,
) -> EmmStatus {
    const F: &str = "emm_device_buffer_resize";
    status(F, || {
        let r = runtime()?;
        r.buffers.with(F, handle, |d, b| {
            let s = r.stream(stream, d)?;
            r.in_context(d, || Ok(b.resize(size, s)?))
        })
    })
}

/// Frees the buffer `handle` (on the last stream it was used on).
#[no_mangle]
pub extern "C" fn emm_device_buffer_free(handle: u64) -> EmmStatus {
    const F: &str = "emm_device_buffer_free";
    status(F, || {
        let r = runtime()?;
        let b = r.buffers.remove(F, handle)?;
        let d = b.device();
        r.in_context(d, || {
            drop(b);
            Ok(())
        })
    })
}
