//! The one way into emm from C: [`call`] runs the body under `catch_unwind`, records a failure
//! as the thread's last error and turns it into the function's C return value. No panic
//! crosses the boundary.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard};

use crate::last_error;
use crate::status::{CapiError, EmmStatus};

/// Locks `m`, recovering it after a panic [`call`] caught (every table stays consistent between
/// statements, so a poisoned lock holds valid data).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string());
    format!(
        "{what}; this is a bug in emm (the call was stopped at the C boundary; please report \
         it with this message)"
    )
}

/// Runs `body` for the entry point `function`; on failure records the error and returns
/// `on_error(status)`.
#[inline]
pub(crate) fn call<T>(
    function: &'static str,
    on_error: impl FnOnce(EmmStatus) -> T,
    body: impl FnOnce() -> Result<T, CapiError>,
) -> T {
    let outcome = catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|payload| {
        Err(CapiError::new(
            EmmStatus::Panic,
            format!("{function}: {}", panic_message(&*payload)),
        ))
    });
    match outcome {
        Ok(v) => v,
        Err(e) => {
            last_error::set(&e);
            on_error(e.status)
        }
    }
}

/// [`call`] for an entry point that returns only a status.
#[inline]
pub(crate) fn status(
    function: &'static str,
    body: impl FnOnce() -> Result<(), CapiError>,
) -> EmmStatus {
    call(function, |s| s, || body().map(|()| EmmStatus::Ok))
}

/// Writes `value` through the out-parameter `out` of `function`.
///
/// # Errors
///
/// `InvalidArgument` when `out` is null (nothing is written).
///
/// # Safety
///
/// 1. `out` is null or points to memory valid for writing one `T` (the C caller's promise,
///    stated in each entry point's `# Safety`).
pub(crate) unsafe fn write_out<T>(
    function: &str,
    name: &str,
    out: *mut T,
    value: T,
) -> Result<(), CapiError> {
    CapiError::non_null(function, name, out)?;
    // SAFETY: non-null, and valid for one write by the caller's promise (1).
    unsafe { out.write(value) };
    Ok(())
}

/// The C string `s` of `function`'s argument `name` (`None` for null).
///
/// # Errors
///
/// `InvalidArgument` when it is not UTF-8.
///
/// # Safety
///
/// 1. `s` is null or points to a NUL-terminated string that stays valid and unchanged for the
///    returned lifetime.
pub(crate) unsafe fn c_str<'a>(
    function: &str,
    name: &str,
    s: *const std::ffi::c_char,
) -> Result<Option<&'a str>, CapiError> {
    if s.is_null() {
        return Ok(None);
    }
    // SAFETY: non-null and NUL-terminated by the caller's promise (1).
    let c = unsafe { std::ffi::CStr::from_ptr(s) };
    c.to_str()
        .map(Some)
        .map_err(|e| CapiError::invalid(function, format!("{name} is not UTF-8: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_stops_at_the_boundary_as_a_status_and_a_message() {
        let s = status("emm_test", || -> Result<(), CapiError> {
            panic!("the invariant broke")
        });
        assert_eq!(s, EmmStatus::Panic);
        assert_eq!(last_error::status(), EmmStatus::Panic);
        // SAFETY: a NUL-terminated string owned by this thread.
        let m = unsafe { std::ffi::CStr::from_ptr(last_error::message_ptr()) };
        let m = m.to_string_lossy();
        assert!(
            m.starts_with("emm_test: the invariant broke; this is a bug in emm"),
            "{m}"
        );
        let p = call("emm_test", |_| 7, || Ok(3));
        assert_eq!(p, 3);
        assert_eq!(
            last_error::status(),
            EmmStatus::Panic,
            "success leaves the last error"
        );
    }
}
