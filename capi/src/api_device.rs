//! Device memory: allocate and free on a stream, streams for callers without their own, and
//! IPC handles (base + offset) for memory shared with another process.

use std::ffi::{c_int, c_void};

use crate::api_config::cudaStream_t;
use crate::ffi::{status, write_out};
use crate::live_table::Live;
use crate::runtime::runtime;
use crate::status::{CapiError, EmmStatus};

/// The size of a CUDA IPC memory handle (`CU_IPC_HANDLE_SIZE`).
pub const EMM_IPC_HANDLE_SIZE: usize = 64;

/// Allocates `size` bytes of device memory on `device` and writes the address to `*ptr`.
/// On a stream other than the legacy default (`NULL`) the memory is stream-ordered when the
/// manager offers it: usable at once on `stream`, elsewhere after an ordering with it. With
/// `NULL` it is usable on every stream.
///
/// Returns `EMM_STATUS_INVALID_ARGUMENT` for size 0 or a null `ptr`,
/// `EMM_STATUS_OUT_OF_MEMORY` when memory ran out, `EMM_STATUS_NO_DEVICE` for a bad ordinal.
///
/// # Safety
///
/// 1. `ptr` is NULL or valid for writing one pointer.
/// 2. `stream` is NULL, 2, or a live stream of `device`.
#[no_mangle]
pub unsafe extern "C" fn emm_alloc(
    size: usize,
    device: c_int,
    stream: cudaStream_t,
    ptr: *mut *mut c_void,
) -> EmmStatus {
    status("emm_alloc", || {
        CapiError::non_null("emm_alloc", "ptr", ptr)?;
        let r = runtime()?;
        let d = r.device(device)?;
        let s = r.stream(stream, d)?;
        let addr = r.alloc(d, size, s)?;
        // SAFETY: checked non-null above; writable by the caller's promise (1).
        unsafe { write_out("emm_alloc", "ptr", ptr, addr as *mut c_void) }
    })
}

/// Frees what emm gave at `ptr`: device or managed memory (on `stream` when it was
/// stream-ordered and a stream is given, else on its own stream), pinned host memory, or a pin
/// (unpinned; the memory stays the caller's).
///
/// Returns `EMM_STATUS_UNKNOWN_POINTER` for an address emm did not give or already freed
/// (nothing is freed then), `EMM_STATUS_INVALID_ARGUMENT` for NULL.
///
/// # Safety
///
/// 1. `stream` is NULL, 2, or a live stream of the allocation's device.
#[no_mangle]
pub unsafe extern "C" fn emm_free(ptr: *mut c_void, stream: cudaStream_t) -> EmmStatus {
    status("emm_free", || {
        let r = runtime()?;
        let addr = ptr as u64;
        let s = match r.device_of(addr, None) {
            Some(d) if !stream.is_null() => Some(r.stream(stream, d)?),
            _ => None,
        };
        r.free("emm_free", addr, s, None)
    })
}

/// Creates a stream on `device` for callers without their own (and for tests on the
/// simulated GPU); writes it to `*stream`.
///
/// # Safety
///
/// 1. `stream` is NULL or valid for writing one `cudaStream_t`.
#[no_mangle]
pub unsafe extern "C" fn emm_stream_create(device: c_int, stream: *mut cudaStream_t) -> EmmStatus {
    status("emm_stream_create", || {
        CapiError::non_null("emm_stream_create", "stream", stream)?;
        let r = runtime()?;
        let d = r.device(device)?;
        let s = r.in_context(d, || Ok(r.driver().stream_create(true)?))?;
        // SAFETY: checked non-null above; writable by the caller's promise (1).
        unsafe { write_out("emm_stream_create", "stream", stream, s.0 as cudaStream_t) }
    })
}

/// Destroys a stream made by `emm_stream_create` on `device`.
#[no_mangle]
pub extern "C" fn emm_stream_destroy(device: c_int, stream: cudaStream_t) -> EmmStatus {
    status("emm_stream_destroy", || {
        let r = runtime()?;
        let d = r.device(device)?;
        let s = r.stream(stream, d)?;
        r.in_context(d, || Ok(r.driver().stream_destroy(s)?))
    })
}

/// Waits until the work queued on `stream` of `device` is done.
#[no_mangle]
pub extern "C" fn emm_stream_synchronize(device: c_int, stream: cudaStream_t) -> EmmStatus {
    status("emm_stream_synchronize", || {
        let r = runtime()?;
        let d = r.device(device)?;
        let s = r.stream(stream, d)?;
        r.in_context(d, || Ok(r.driver().stream_synchronize(s)?))
    })
}

/// Tells emm that a stream of another library it was given is about to be destroyed by its
/// owner, so emm forgets it (emm never destroys a stream it did not create).
#[no_mangle]
pub extern "C" fn emm_stream_forget(stream: cudaStream_t) -> EmmStatus {
    status("emm_stream_forget", || {
        runtime()?
            .backend()
            .forget_stream(emm_core::StreamId(stream as u64));
        Ok(())
    })
}

/// Exports the `size` bytes at `ptr` (inside a live device allocation; `size` 0: to its end)
/// for another process: writes the 64-byte CUDA IPC handle of the driver allocation that holds
/// it to `handle` and the offset of `ptr` inside that allocation to `*offset` — the offset a
/// suballocating manager must report (Numba's `IpcHandle(..., offset=...)`).
///
/// Returns `EMM_STATUS_UNSUPPORTED` for managers whose memory cannot be exported (`async`,
/// `managed`), `EMM_STATUS_UNKNOWN_POINTER` for an address outside every live allocation.
///
/// # Safety
///
/// 1. `handle` is NULL or valid for writing `EMM_IPC_HANDLE_SIZE` bytes.
/// 2. `offset` is NULL or valid for writing one `size_t`.
#[no_mangle]
pub unsafe extern "C" fn emm_ipc_get_handle(
    ptr: *mut c_void,
    size: usize,
    handle: *mut u8,
    offset: *mut usize,
) -> EmmStatus {
    const F: &str = "emm_ipc_get_handle";
    status(F, || {
        CapiError::non_null(F, "handle", handle)?;
        CapiError::non_null(F, "offset", offset)?;
        let r = runtime()?;
        let addr = ptr as u64;
        let found = (0..r.device_count() as i32).find_map(|i| {
            let d = r.device(i).ok()?;
            let live = r.live(d);
            let (base, entry) = live.containing(addr)?;
            match entry {
                Live::Device {
                    memory, context, ..
                } => Some((base, memory.clone(), context.clone())),
                Live::Managed { .. } => None,
            }
        });
        let Some((base, memory, context)) = found else {
            return Err(CapiError::new(
                EmmStatus::UnknownPointer,
                format!("{F}: {addr:#x} is not inside a live emm device allocation"),
            ));
        };
        let start = (addr - base) as usize;
        let end = if size == 0 {
            memory.size()
        } else {
            start.saturating_add(size)
        };
        let view = memory.view(start..end)?;
        let h = context.get_ipc_handle(&view)?;
        // SAFETY: checked non-null; valid for EMM_IPC_HANDLE_SIZE bytes by promise (1); the
        // source is a 64-byte array that cannot overlap the caller's buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(h.handle.as_ptr(), handle, EMM_IPC_HANDLE_SIZE);
        }
        let off = usize::try_from(h.offset).unwrap_or(usize::MAX);
        // SAFETY: checked non-null; writable by the caller's promise (2).
        unsafe { write_out(F, "offset", offset, off) }
    })
}
