//! The two functions CuPy's `cupy.cuda.memory.CFunctionAllocator(param, malloc, free, owner)`
//! calls, so that a CuPy allocation runs no Python of emm's. CuPy passes them no stream and has
//! no error return, so `param` is an [`EmmCupyHooks`] the Python side fills from CuPy and
//! Python: where the calling thread's current CuPy stream is read, and how an exception is
//! raised in the caller.
//!
//! Both are called by CuPy with the GIL held, on the thread that allocates or drops the memory.

use std::ffi::{c_char, c_int, c_void, CStr};

use crate::ffi::call;
use crate::last_error;
use crate::runtime::runtime;
use crate::status::EmmStatus;

/// What `emm_cupy_malloc` returns after raising an exception in the caller: `(void *)-1`,
/// the value at which CuPy's call of `malloc` looks for a pending Python exception (Cython's
/// `except? -1`). `emm_cupy_free` ignores it.
const RAISED: usize = usize::MAX;

/// The `param` of CuPy's `CFunctionAllocator` for [`emm_cupy_malloc`] and [`emm_cupy_free`].
/// The Python side keeps it, and the exception types it names, alive as the allocator's owner.
#[repr(C)]
#[derive(Debug)]
pub struct EmmCupyHooks {
    /// The calling thread's current CuPy stream (`cupy.cuda.stream.get_current_stream_ptr`
    /// from the module's `__pyx_capi__`); -1 with a Python exception set when it fails. NULL:
    /// the legacy default stream.
    pub current_stream: Option<unsafe extern "C" fn() -> isize>,
    /// `PyErr_SetString`: raises `type(message)` in the caller. NULL: no exception is raised
    /// and a failed allocation returns NULL, with the cause in `emm_last_error_message`.
    pub raise: Option<unsafe extern "C" fn(*mut c_void, *const c_char)>,
    /// The exception type (a `PyObject *`) raised when memory ran out.
    pub out_of_memory: *mut c_void,
    /// The exception type raised for every other failure.
    pub error: *mut c_void,
}

/// Allocates `size` bytes on `device`, ordered on the calling thread's current CuPy stream (as
/// CuPy's own pool: usable at once there, elsewhere after an ordering with it).
///
/// On failure raises `hooks->out_of_memory` (memory ran out) or `hooks->error` with emm's
/// message and returns `(void *)-1`; without `hooks->raise` returns NULL and leaves the
/// cause in `emm_last_error_code` / `emm_last_error_message`.
///
/// # Safety
///
/// 1. `hooks` is NULL (the legacy default stream; NULL on failure) or points to an [`EmmCupyHooks`] that stays valid for the call, whose
///    functions have the signatures named there.
/// 2. With `hooks->raise` set, the caller holds the GIL and both exception types are live
///    `PyObject *`s.
#[no_mangle]
pub unsafe extern "C" fn emm_cupy_malloc(
    hooks: *const EmmCupyHooks,
    size: usize,
    device: c_int,
) -> *mut c_void {
    // SAFETY: NULL or valid for the call by the caller's promise (1).
    let hooks = unsafe { hooks.as_ref() };
    let stream = match hooks.and_then(|h| h.current_stream) {
        // SAFETY: a function of this signature by the caller's promise (1).
        Some(current) => match unsafe { current() } {
            // CuPy could not say: its exception is pending, and goes to the caller as it is.
            -1 => return RAISED as *mut c_void,
            s => s as *mut c_void,
        },
        None => std::ptr::null_mut(),
    };
    let allocated = call(
        "emm_cupy_malloc",
        |_| None,
        || {
            let r = runtime()?;
            let d = r.device(device)?;
            let s = r.stream(stream, d)?;
            Ok(Some(r.alloc(d, size, s)? as *mut c_void))
        },
    );
    if let Some(ptr) = allocated {
        return ptr;
    }
    let Some((raise, h)) = hooks.and_then(|h| h.raise.map(|raise| (raise, h))) else {
        return std::ptr::null_mut();
    };
    let kind = if last_error::status() == EmmStatus::OutOfMemory {
        h.out_of_memory
    } else {
        h.error
    };
    // SAFETY: the thread's last error message, a C string valid until its next failing call.
    let message = unsafe { CStr::from_ptr(last_error::message_ptr()) };
    // SAFETY: `PyErr_SetString` with a live exception type, the GIL held (promise 2).
    unsafe { raise(kind, message.as_ptr()) };
    RAISED as *mut c_void
}

/// Frees `ptr` from [`emm_cupy_malloc`], on the stream it was allocated on (CuPy drops memory
/// wherever its last reference goes, and names no stream). NULL and `(void *)-1` are
/// ignored. The pointer decides the device; `device` is a hint. CuPy gives this function no way
/// to report an error: a failure (an unknown pointer) is recorded as the thread's last error
/// and written to stderr.
///
/// `hooks` is not read: CuPy passes the allocator's `param` back.
#[no_mangle]
pub extern "C" fn emm_cupy_free(hooks: *const EmmCupyHooks, ptr: *mut c_void, device: c_int) {
    let _ = hooks;
    if ptr.is_null() || ptr as usize == RAISED {
        return;
    }
    call(
        "emm_cupy_free",
        |_| (),
        || runtime()?.free_from_hook("emm_cupy_free", ptr as u64, device, None),
    );
}
