//! Error reporting: the calling thread's last error (code and message) and status names.

use std::ffi::{c_char, c_int};

use crate::ffi::call;
use crate::last_error;
use crate::status::EmmStatus;

/// The status of the calling thread's last failed call (`EMM_STATUS_OK` when none failed
/// since the last `emm_clear_last_error`).
#[no_mangle]
pub extern "C" fn emm_last_error_code() -> EmmStatus {
    call("emm_last_error_code", |s| s, || Ok(last_error::status()))
}

/// The message of the calling thread's last failed call: what was asked, what went wrong, what
/// to do. Empty when none failed. Owned by emm: valid until this thread's next failing call or
/// `emm_clear_last_error`; copy it to keep it.
#[no_mangle]
pub extern "C" fn emm_last_error_message() -> *const c_char {
    call(
        "emm_last_error_message",
        |_| c"".as_ptr(),
        || Ok(last_error::message_ptr()),
    )
}

/// Forgets the calling thread's last error.
#[no_mangle]
pub extern "C" fn emm_clear_last_error() {
    call(
        "emm_clear_last_error",
        |_| (),
        || {
            last_error::clear();
            Ok(())
        },
    );
}

/// The name of a status (`"EMM_STATUS_OUT_OF_MEMORY"`), a static string; `"EMM_STATUS_UNKNOWN"`
/// for a value that is no status.
#[no_mangle]
pub extern "C" fn emm_status_name(status: c_int) -> *const c_char {
    call(
        "emm_status_name",
        |_| c"EMM_STATUS_UNKNOWN".as_ptr(),
        || Ok(status_name(status).as_ptr()),
    )
}

fn status_name(status: c_int) -> &'static std::ffi::CStr {
    match status {
        0 => c"EMM_STATUS_OK",
        1 => c"EMM_STATUS_INVALID_ARGUMENT",
        2 => c"EMM_STATUS_OUT_OF_MEMORY",
        3 => c"EMM_STATUS_UNKNOWN_POINTER",
        4 => c"EMM_STATUS_UNSUPPORTED",
        5 => c"EMM_STATUS_CONFIG",
        6 => c"EMM_STATUS_NO_DEVICE",
        7 => c"EMM_STATUS_DRIVER",
        8 => c"EMM_STATUS_PANIC",
        9 => c"EMM_STATUS_IO",
        _ => c"EMM_STATUS_UNKNOWN",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_has_its_name() {
        for s in [
            EmmStatus::Ok,
            EmmStatus::InvalidArgument,
            EmmStatus::OutOfMemory,
            EmmStatus::UnknownPointer,
            EmmStatus::Unsupported,
            EmmStatus::Config,
            EmmStatus::NoDevice,
            EmmStatus::Driver,
            EmmStatus::Panic,
            EmmStatus::Io,
        ] {
            // SAFETY: emm_status_name returns a static NUL-terminated string.
            let name = unsafe { std::ffi::CStr::from_ptr(emm_status_name(s as i32)) };
            let expected = format!("EMM_STATUS_{:?}", s)
                .to_uppercase()
                .replace("INVALIDARGUMENT", "INVALID_ARGUMENT")
                .replace("OUTOFMEMORY", "OUT_OF_MEMORY")
                .replace("UNKNOWNPOINTER", "UNKNOWN_POINTER")
                .replace("NODEVICE", "NO_DEVICE");
            assert_eq!(name.to_str(), Ok(expected.as_str()));
        }
    }
}
