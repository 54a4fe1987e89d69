//! The C ABI on the simulated GPU (`EMM_BACKEND=sim`, two devices of 1 GiB): every entry
//! point, and bad input — null pointers, unknown pointers, double frees, zero and huge sizes,
//! bad devices, streams, handles and options — giving status codes and messages, not crashes.
#![allow(unsafe_code, reason = "the test calls the C ABI as a C caller does")]

use std::ffi::{c_void, CStr, CString};
use std::ptr::{null, null_mut};
use std::sync::{Mutex, MutexGuard, Once};

use emm::*;

const GIB: usize = 1 << 30;

/// Sets the environment before the runtime exists, and serializes the tests (they share the
/// process-wide manager; some reconfigure it).
fn setup() -> MutexGuard<'static, ()> {
    static ONCE: Once = Once::new();
    static SERIAL: Mutex<()> = Mutex::new(());
    ONCE.call_once(|| {
        std::env::set_var("EMM_BACKEND", "sim");
        std::env::set_var("EMM_SIM_DEVICES", "2");
        std::env::set_var("EMM_SIM_MEMORY", GIB.to_string());
        std::env::remove_var("EMM_MEMORY_MANAGER");
    });
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: a NUL-terminated literal.
    succeeds(unsafe { emm_configure(c"pool".as_ptr()) });
    guard
}

fn message() -> String {
    // SAFETY: emm returns a valid NUL-terminated string owned by the thread.
    unsafe { CStr::from_ptr(emm_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

/// Asserts `status` is [`EmmStatus::Ok`], with the last error's message when it is not.
#[track_caller]
fn succeeds(status: EmmStatus) {
    assert_eq!(status, EmmStatus::Ok, "{}", message());
}

/// The name of the manager in use, as the statistics give it.
fn manager_name() -> String {
    stats()["manager"].as_str().unwrap_or("").to_owned()
}

/// Asserts `status` is `expected` and that the last error says so with `words` in it.
#[track_caller]
fn fails(status: EmmStatus, expected: EmmStatus, words: &str) {
    assert_eq!(status, expected, "message: {}", message());
    assert_eq!(emm_last_error_code(), expected);
    let m = message();
    assert!(m.contains(words), "{m:?} should contain {words:?}");
}

fn alloc(size: usize, device: i32, stream: cudaStream_t) -> *mut c_void {
    let mut p = null_mut();
    // SAFETY: `p` is writable; the stream is NULL or made by emm_stream_create.
    let s = unsafe { emm_alloc(size, device, stream, &mut p) };
    succeeds(s);
    assert!(!p.is_null());
    p
}

fn free(p: *mut c_void, stream: cudaStream_t) {
    // SAFETY: the stream is NULL or made by emm_stream_create.
    succeeds(unsafe { emm_free(p, stream) });
}

fn stats() -> serde_json::Value {
    let s = emm_stats_json();
    assert!(!s.is_null(), "{}", message());
    // SAFETY: a string from emm, freed once below.
    let text = unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned();
    // SAFETY: returned by emm_stats_json, not freed yet.
    unsafe { emm_string_free(s) };
    serde_json::from_str(&text).expect("stats are JSON")
}

fn stream(device: i32) -> cudaStream_t {
    let mut s = null_mut();
    // SAFETY: `s` is writable.
    succeeds(unsafe { emm_stream_create(device, &mut s) });
    s
}

mod bad_input;
mod buffers;
mod configure;
mod device;
mod host;
