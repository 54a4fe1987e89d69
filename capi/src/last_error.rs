//! The last error of each thread, as CUDA's `cudaGetLastError`: set by a failing call, read by
//! `emm_last_error_code` / `emm_last_error_message`, cleared by `emm_clear_last_error` and by
//! the next failing call's replacement. A successful call leaves it alone, so a caller that
//! only looks after a failure (`emm_torch_alloc` returning NULL) always finds its cause.

use std::cell::RefCell;
use std::ffi::{c_char, CString};

use crate::status::{CapiError, EmmStatus};

struct LastError {
    status: EmmStatus,
    message: CString,
}

thread_local! {
    static LAST: RefCell<LastError> = RefCell::new(LastError {
        status: EmmStatus::Ok,
        message: CString::default(),
    });
}

/// Records `e` as this thread's last error.
pub(crate) fn set(e: &CapiError) {
    // A NUL inside a message would cut it short in C: replace it.
    let text = e.message.replace('\0', "\\0");
    let message = CString::new(text).unwrap_or_default();
    LAST.with(|l| {
        let mut l = l.borrow_mut();
        l.status = e.status;
        l.message = message;
    });
}

/// Forgets this thread's last error.
pub(crate) fn clear() {
    LAST.with(|l| {
        let mut l = l.borrow_mut();
        l.status = EmmStatus::Ok;
        l.message = CString::default();
    });
}

/// This thread's last error status.
pub(crate) fn status() -> EmmStatus {
    LAST.with(|l| l.borrow().status)
}

/// This thread's last error message, valid until the thread's next failing call (or
/// `emm_clear_last_error`); an empty string when there is none.
pub(crate) fn message_ptr() -> *const c_char {
    LAST.with(|l| l.borrow().message.as_ptr())
}
