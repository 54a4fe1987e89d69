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
    assert_eq!(
        unsafe { emm_configure(c"pool".as_ptr()) },
        EmmStatus::Ok,
        "{}",
        message()
    );
    guard
}

fn message() -> String {
    // SAFETY: emm returns a valid NUL-terminated string owned by the thread.
    unsafe { CStr::from_ptr(emm_last_error_message()) }
        .to_string_lossy()
        .into_owned()
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
    assert_eq!(s, EmmStatus::Ok, "{}", message());
    assert!(!p.is_null());
    p
}

fn free(p: *mut c_void, stream: cudaStream_t) {
    // SAFETY: the stream is NULL or made by emm_stream_create.
    assert_eq!(
        unsafe { emm_free(p, stream) },
        EmmStatus::Ok,
        "{}",
        message()
    );
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
    assert_eq!(
        unsafe { emm_stream_create(device, &mut s) },
        EmmStatus::Ok,
        "{}",
        message()
    );
    s
}

#[test]
fn device_memory_on_streams_and_devices_with_statistics() {
    let _g = setup();
    assert_eq!(emm_abi_version(), EMM_ABI_VERSION);
    let mut n = 0;
    // SAFETY: `n` is writable.
    assert_eq!(unsafe { emm_device_count(&mut n) }, EmmStatus::Ok);
    assert_eq!(n, 2);
    assert_eq!(emm_reset_peak_stats(), EmmStatus::Ok);
    let before = stats();
    let base = before["devices"][1]["total_allocations"]
        .as_u64()
        .unwrap_or(0);

    let s1 = stream(1);
    let a = alloc(1000, 1, null_mut());
    let b = alloc(4096, 1, s1);
    let c = alloc(256, 0, null_mut());
    assert_ne!(a, b);
    let st = stats();
    assert_eq!(st["backend"], "sim");
    assert_eq!(st["manager"], "pool");
    let d1 = &st["devices"][1];
    assert_eq!(d1["current_allocations"], 2);
    assert_eq!(d1["current_bytes"], 5096);
    assert_eq!(d1["total_allocations"].as_u64(), Some(base + 2));
    free(b, s1);
    free(a, null_mut());
    free(c, null_mut());
    let st = stats();
    assert_eq!(st["devices"][1]["current_bytes"], 0);
    assert_eq!(st["devices"][1]["peak_bytes"], 5096);

    let (mut free_b, mut total_b) = (0, 0);
    // SAFETY: both writable.
    let s = unsafe { emm_memory_info(1, &mut free_b, &mut total_b) };
    assert_eq!(s, EmmStatus::Ok, "{}", message());
    assert_eq!(total_b, GIB);
    assert!(free_b <= total_b);

    let mut token = 0;
    // SAFETY: writable.
    assert_eq!(
        unsafe { emm_defer_cleanup_begin(0, &mut token) },
        EmmStatus::Ok
    );
    assert_eq!(emm_defer_cleanup_end(token), EmmStatus::Ok);
    assert_eq!(emm_reset(0), EmmStatus::Ok, "{}", message());
    assert_eq!(emm_reset(-1), EmmStatus::Ok, "{}", message());
    assert_eq!(
        emm_stream_synchronize(1, s1),
        EmmStatus::Ok,
        "{}",
        message()
    );
    assert_eq!(emm_stream_destroy(1, s1), EmmStatus::Ok, "{}", message());
}

#[test]
fn the_torch_pair_uses_the_device_it_is_given() {
    let _g = setup();
    let s = stream(1);
    let p = emm_torch_alloc(1 << 20, 1, s);
    assert!(!p.is_null(), "{}", message());
    let st = stats();
    assert_eq!(st["devices"][1]["current_bytes"], 1 << 20);
    assert_eq!(st["devices"][0]["current_bytes"], 0);
    emm_torch_free(p, 1 << 20, 1, s);
    assert_eq!(stats()["devices"][1]["current_bytes"], 0);
    // Size 0: NULL and no error; freeing NULL is nothing.
    emm_clear_last_error();
    assert!(emm_torch_alloc(0, 0, null_mut()).is_null());
    assert_eq!(emm_last_error_code(), EmmStatus::Ok);
    emm_torch_free(null_mut(), 0, 0, null_mut());
    assert_eq!(emm_last_error_code(), EmmStatus::Ok);
    // Out of memory is told apart, and the manager still serves afterwards.
    assert!(emm_torch_alloc((2 * GIB) as isize, 0, null_mut()).is_null());
    assert_eq!(
        emm_last_error_code(),
        EmmStatus::OutOfMemory,
        "{}",
        message()
    );
    assert!(message().contains("out of memory"), "{}", message());
    assert!(emm_torch_alloc(-5, 0, null_mut()).is_null());
    fails(
        EmmStatus::InvalidArgument,
        EmmStatus::InvalidArgument,
        "negative",
    );
    assert!(emm_torch_alloc(64, 5, null_mut()).is_null());
    assert_eq!(emm_last_error_code(), EmmStatus::NoDevice);
    let q = emm_torch_alloc(64, 0, null_mut());
    assert!(!q.is_null());
    emm_torch_free(q, 64, 0, null_mut());
    // A double free from PyTorch cannot return an error: it is recorded, nothing crashes.
    emm_torch_free(q, 64, 0, null_mut());
    assert_eq!(emm_last_error_code(), EmmStatus::UnknownPointer);
    assert_eq!(emm_stream_destroy(1, s), EmmStatus::Ok);
}

/// PyTorch may name another device, or none it knows, when it frees: the pointer decides.
#[test]
fn the_torch_free_frees_by_pointer_whatever_device_it_names() {
    let _g = setup();
    let s1 = stream(1);
    let s0 = stream(0);
    for (device, stream) in [(0, s0), (0, null_mut()), (5, null_mut()), (-1, s1), (7, s0)] {
        let p = emm_torch_alloc(1 << 20, 1, s1);
        assert!(!p.is_null(), "{}", message());
        emm_clear_last_error();
        emm_torch_free(p, 1 << 20, device, stream);
        assert_eq!(
            emm_last_error_code(),
            EmmStatus::Ok,
            "device {device}: {}",
            message()
        );
        assert_eq!(
            stats()["devices"][1]["current_bytes"],
            0,
            "device {device}: the block stayed live"
        );
        // Freed, not leaked: a second free is an unknown pointer.
        // SAFETY: a pointer emm_torch_alloc gave (freed: the call reports it).
        assert_eq!(
            unsafe { emm_free(p, null_mut()) },
            EmmStatus::UnknownPointer
        );
    }
    assert_eq!(emm_stream_destroy(1, s1), EmmStatus::Ok);
    assert_eq!(emm_stream_destroy(0, s0), EmmStatus::Ok);
}

#[test]
fn bad_input_gives_codes_and_messages_not_crashes() {
    let _g = setup();
    let mut p = null_mut();
    // SAFETY (every call below): out-pointers are NULL or writable; strings NUL-terminated.
    unsafe {
        fails(
            emm_alloc(0, 0, null_mut(), &mut p),
            EmmStatus::InvalidArgument,
            "size 0",
        );
        fails(
            emm_alloc(16, 0, null_mut(), null_mut()),
            EmmStatus::InvalidArgument,
            "ptr is NULL",
        );
        fails(
            emm_alloc(usize::MAX, 0, null_mut(), &mut p),
            EmmStatus::OutOfMemory,
            "out of memory",
        );
        fails(
            emm_alloc(1 << 50, 0, null_mut(), &mut p),
            EmmStatus::OutOfMemory,
            "out of memory",
        );
        fails(
            emm_alloc(16, -1, null_mut(), &mut p),
            EmmStatus::NoDevice,
            "device -1 does not exist",
        );
        fails(
            emm_alloc(16, 2, null_mut(), &mut p),
            EmmStatus::NoDevice,
            "2 device(s)",
        );
        fails(
            emm_alloc(16, 0, 0xdead_beef as cudaStream_t, &mut p),
            EmmStatus::Driver,
            "stream",
        );
        fails(
            emm_free(null_mut(), null_mut()),
            EmmStatus::InvalidArgument,
            "NULL",
        );
        fails(
            emm_free(0x1234_5678 as *mut c_void, null_mut()),
            EmmStatus::UnknownPointer,
            "not a live emm allocation",
        );
        let a = alloc(4096, 0, null_mut());
        fails(
            emm_free(a.cast::<u8>().add(256).cast(), null_mut()),
            EmmStatus::UnknownPointer,
            "lies inside the allocation",
        );
        free(a, null_mut());
        fails(
            emm_free(a, null_mut()),
            EmmStatus::UnknownPointer,
            "already freed",
        );
        // After all that, the manager still serves.
        free(alloc(64, 0, null_mut()), null_mut());

        let (mut f, mut t) = (0, 0);
        fails(
            emm_memory_info(0, null_mut(), &mut t),
            EmmStatus::InvalidArgument,
            "free is NULL",
        );
        fails(
            emm_memory_info(9, &mut f, &mut t),
            EmmStatus::NoDevice,
            "device 9",
        );
        fails(
            emm_device_count(null_mut()),
            EmmStatus::InvalidArgument,
            "count is NULL",
        );
        fails(
            emm_configure(c"no-such-manager".as_ptr()),
            EmmStatus::Config,
            "no memory manager named",
        );
        fails(
            emm_configure(c"/nowhere/plugin.wasm".as_ptr()),
            EmmStatus::Config,
            "plugin.wasm",
        );
        fails(
            emm_reinitialize(c"{\"pool\": 1}".as_ptr()),
            EmmStatus::InvalidArgument,
            "unknown field",
        );
        fails(
            emm_reinitialize(c"not json".as_ptr()),
            EmmStatus::InvalidArgument,
            "not valid",
        );
        let bad = CString::from_vec_with_nul(vec![0xff, 0xfe, 0]).expect("one NUL at the end");
        fails(
            emm_configure(bad.as_ptr()),
            EmmStatus::InvalidArgument,
            "not UTF-8",
        );
        // The manager is unchanged by the failed configurations.
        assert_eq!(stats()["manager"], "pool");

        let mut h = null_mut();
        fails(
            emm_host_alloc(64, 0, 0x80, &mut h, null_mut()),
            EmmStatus::InvalidArgument,
            "unknown bits",
        );
        fails(
            emm_host_alloc(64, 0, EMM_HOST_MAPPED, &mut h, null_mut()),
            EmmStatus::InvalidArgument,
            "device_ptr",
        );
        fails(
            emm_host_alloc(0, 0, 0, &mut h, null_mut()),
            EmmStatus::InvalidArgument,
            "",
        );
        fails(
            emm_host_pin(null_mut(), 64, 0, 0, null_mut()),
            EmmStatus::InvalidArgument,
            "ptr is NULL",
        );
        fails(
            emm_managed_alloc(64, 0, 1, null_mut()),
            EmmStatus::InvalidArgument,
            "ptr is NULL",
        );
        fails(
            emm_managed_advise(0x10 as *mut c_void, 4, 1, 0),
            EmmStatus::UnknownPointer,
            "managed",
        );
        fails(
            emm_managed_advise(null_mut(), 4, 99, 0),
            EmmStatus::InvalidArgument,
            "CUmem_advise",
        );
        fails(
            emm_managed_prefetch(0x10 as *mut c_void, 4, 0, null_mut()),
            EmmStatus::UnknownPointer,
            "managed",
        );
        let mut handle = [0u8; EMM_IPC_HANDLE_SIZE];
        let mut off = 0;
        fails(
            emm_ipc_get_handle(null_mut(), 0, handle.as_mut_ptr(), &mut off),
            EmmStatus::UnknownPointer,
            "not inside",
        );
        fails(
            emm_ipc_get_handle(null_mut(), 0, null_mut(), &mut off),
            EmmStatus::InvalidArgument,
            "handle is NULL",
        );
        let mut token = 0;
        fails(
            emm_defer_cleanup_begin(0, null_mut()),
            EmmStatus::InvalidArgument,
            "token is NULL",
        );
        fails(
            emm_defer_cleanup_end(424_242),
            EmmStatus::InvalidArgument,
            "not a held deferral",
        );
        assert_eq!(emm_defer_cleanup_begin(0, &mut token), EmmStatus::Ok);
        assert_eq!(emm_defer_cleanup_end(token), EmmStatus::Ok);
        fails(
            emm_defer_cleanup_end(token),
            EmmStatus::InvalidArgument,
            "not a held deferral",
        );
        fails(
            emm_stream_create(0, null_mut()),
            EmmStatus::InvalidArgument,
            "stream is NULL",
        );
        fails(emm_reset(7), EmmStatus::NoDevice, "device 7");
    }
    // SAFETY: a static string.
    let name = unsafe { CStr::from_ptr(emm_status_name(42)) };
    assert_eq!(name.to_str(), Ok("EMM_STATUS_UNKNOWN"));
    // SAFETY: NULL is allowed.
    unsafe { emm_string_free(null_mut()) };
}

#[test]
fn host_managed_and_ipc_memory() {
    let _g = setup();
    let (mut h, mut d) = (null_mut(), null_mut());
    // SAFETY (every call): out-pointers writable, pointers from emm.
    unsafe {
        let s = emm_host_alloc(4096, 0, EMM_HOST_MAPPED | EMM_HOST_PORTABLE, &mut h, &mut d);
        assert_eq!(s, EmmStatus::Ok, "{}", message());
        assert!(!h.is_null() && !d.is_null());
        assert_eq!(stats()["host_allocations"], 1);
        free(h, null_mut());
        assert_eq!(stats()["host_allocations"], 0);
        fails(
            emm_free(h, null_mut()),
            EmmStatus::UnknownPointer,
            "already freed",
        );

        let mut m = null_mut();
        assert_eq!(
            emm_managed_alloc(1 << 20, 0, 1, &mut m),
            EmmStatus::Ok,
            "{}",
            message()
        );
        assert_eq!(
            emm_managed_advise(m, 1 << 20, 1, 0),
            EmmStatus::Ok,
            "{}",
            message()
        );
        assert_eq!(
            emm_managed_prefetch(m, 1 << 20, 0, null_mut()),
            EmmStatus::Ok,
            "{}",
            message()
        );
        assert_eq!(
            emm_managed_prefetch(m, 4096, EMM_LOCATION_HOST, null_mut()),
            EmmStatus::Ok,
            "{}",
            message()
        );
        fails(
            emm_managed_prefetch(m, 2 << 20, 0, null_mut()),
            EmmStatus::InvalidArgument,
            "do not lie inside",
        );
        fails(
            emm_managed_prefetch(m, 0, 0, null_mut()),
            EmmStatus::InvalidArgument,
            "non-empty",
        );
        fails(
            emm_managed_prefetch(m, 16, -3, null_mut()),
            EmmStatus::InvalidArgument,
            "location -3",
        );
        free(m, null_mut());

        // IPC: the offset of an interior pointer includes the distance from the allocation.
        let a = alloc(8192, 0, null_mut());
        let mut handle = [0u8; EMM_IPC_HANDLE_SIZE];
        let (mut off_a, mut off_b) = (usize::MAX, usize::MAX);
        let s = emm_ipc_get_handle(a, 0, handle.as_mut_ptr(), &mut off_a);
        assert_eq!(s, EmmStatus::Ok, "{}", message());
        assert!(handle.iter().any(|&b| b != 0));
        let inner = a.cast::<u8>().add(1024).cast::<c_void>();
        let s = emm_ipc_get_handle(inner, 512, handle.as_mut_ptr(), &mut off_b);
        assert_eq!(s, EmmStatus::Ok, "{}", message());
        assert_eq!(off_b, off_a + 1024);
        fails(
            emm_ipc_get_handle(inner, 1 << 20, handle.as_mut_ptr(), &mut off_b),
            EmmStatus::InvalidArgument,
            "outside the pointer",
        );
        free(a, null_mut());

        // The async manager's memory cannot be exported: Unsupported, told apart.
        assert_eq!(
            emm_configure(c"async".as_ptr()),
            EmmStatus::Ok,
            "{}",
            message()
        );
        let b = alloc(4096, 0, null_mut());
        fails(
            emm_ipc_get_handle(b, 0, handle.as_mut_ptr(), &mut off_a),
            EmmStatus::Unsupported,
            "cuIpcGetMemHandle",
        );
        free(b, null_mut());
    }
}

#[test]
fn configure_and_reinitialize_keep_live_memory_valid() {
    let _g = setup();
    let old = alloc(1 << 16, 0, null_mut());
    // SAFETY: NUL-terminated literals.
    unsafe {
        assert_eq!(
            emm_configure(c"arena".as_ptr()),
            EmmStatus::Ok,
            "{}",
            message()
        );
        assert_eq!(stats()["manager"], "arena");
        let a = alloc(4096, 0, null_mut());
        free(a, null_mut());
        let opts = cr#"{"pool_allocator": true, "initial_pool_size": 1048576, "statistics": true}"#;
        assert_eq!(
            emm_reinitialize(opts.as_ptr()),
            EmmStatus::Ok,
            "{}",
            message()
        );
        assert!(stats()["manager"]
            .as_str()
            .unwrap_or("")
            .starts_with("reinitialize("));
        let b = alloc(4096, 1, null_mut());
        free(b, null_mut());
        assert_eq!(emm_reinitialize(null()), EmmStatus::Ok, "{}", message());
        let opts = cr#"{"devices": [0]}"#;
        assert_eq!(
            emm_reinitialize(opts.as_ptr()),
            EmmStatus::Ok,
            "{}",
            message()
        );
        let mut p = null_mut();
        fails(
            emm_alloc(64, 1, null_mut(), &mut p),
            EmmStatus::InvalidArgument,
            "was not set up by emm_reinitialize",
        );
        assert_eq!(emm_configure(null()), EmmStatus::Ok, "{}", message());
        assert_eq!(stats()["manager"], "pool");
    }
    // Memory from the first manager goes back to it.
    free(old, null_mut());
    assert_eq!(stats()["devices"][0]["current_bytes"], 0);
}

#[test]
fn device_buffers_round_trip_and_share_the_manager() {
    let _g = setup();
    let data: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
    let mut h = 0;
    // SAFETY (every call): `data` readable, out-pointers writable, handles from emm.
    unsafe {
        let s = emm_device_buffer_new(data.as_ptr().cast(), data.len(), 1, null_mut(), &mut h);
        assert_eq!(s, EmmStatus::Ok, "{}", message());
        let (mut size, mut ptr) = (0, null_mut());
        assert_eq!(
            emm_device_buffer_info(h, &mut size, &mut ptr),
            EmmStatus::Ok
        );
        assert_eq!(size, 3000);
        assert!(!ptr.is_null());
        assert_eq!(stats()["devices"][1]["current_bytes"], 3000);
        assert_eq!(stats()["device_buffers"], 1);
        let mut back = vec![0u8; 3000];
        let s = emm_device_buffer_copy_to_host(h, 0, back.as_mut_ptr().cast(), 3000, null_mut());
        assert_eq!(s, EmmStatus::Ok, "{}", message());
        assert_eq!(back, data);
        assert_eq!(
            emm_device_buffer_resize(h, 5000, null_mut()),
            EmmStatus::Ok,
            "{}",
            message()
        );
        assert_eq!(
            emm_device_buffer_copy_from_host(h, 4000, data.as_ptr().cast(), 1000),
            EmmStatus::Ok
        );
        let mut tail = vec![0u8; 1000];
        let s = emm_device_buffer_copy_to_host(h, 4000, tail.as_mut_ptr().cast(), 1000, null_mut());
        assert_eq!(s, EmmStatus::Ok, "{}", message());
        assert_eq!(tail, data[..1000]);
        let mut head = vec![0u8; 3000];
        assert_eq!(
            emm_device_buffer_copy_to_host(h, 0, head.as_mut_ptr().cast(), 3000, null_mut()),
            EmmStatus::Ok
        );
        assert_eq!(head, data, "resize keeps the contents that fit");
        fails(
            emm_device_buffer_copy_to_host(h, 4900, tail.as_mut_ptr().cast(), 1000, null_mut()),
            EmmStatus::InvalidArgument,
            "",
        );
        fails(
            emm_device_buffer_copy_to_host(h, 0, null_mut(), 10, null_mut()),
            EmmStatus::InvalidArgument,
            "dst is NULL",
        );
        assert_eq!(emm_device_buffer_free(h), EmmStatus::Ok, "{}", message());
        fails(
            emm_device_buffer_free(h),
            EmmStatus::InvalidArgument,
            "not a live DeviceBuffer",
        );
        fails(
            emm_device_buffer_info(h, &mut size, null_mut()),
            EmmStatus::InvalidArgument,
            "not a live DeviceBuffer",
        );
        assert_eq!(stats()["devices"][1]["current_bytes"], 0);

        // Size 0 is an empty buffer.
        let mut e = 0;
        assert_eq!(
            emm_device_buffer_new(null(), 0, 0, null_mut(), &mut e),
            EmmStatus::Ok,
            "{}",
            message()
        );
        assert_eq!(
            emm_device_buffer_info(e, &mut size, &mut ptr),
            EmmStatus::Ok
        );
        assert_eq!((size, ptr), (0, null_mut()));
        assert_eq!(emm_device_buffer_free(e), EmmStatus::Ok);
        // Too big: out of memory, no buffer.
        fails(
            emm_device_buffer_new(null(), 4 * GIB, 0, null_mut(), &mut e),
            EmmStatus::OutOfMemory,
            "out of memory",
        );
        fails(
            emm_device_buffer_new(null(), 16, 0, null_mut(), null_mut()),
            EmmStatus::InvalidArgument,
            "handle is NULL",
        );
    }
}

/// A `.wasm` plugin (built by `cargo xtask wasm`, which `cargo xtask test` runs first) loads
/// through emm-sandbox's loader and serves the C ABI.
#[test]
fn a_wasm_plugin_serves_the_c_abi() {
    let _g = setup();
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/wasm/first_fit.wasm");
    assert!(
        path.exists(),
        "{} is missing: build the example plugins with `cargo xtask wasm`",
        path.display()
    );
    let spec = CString::new(path.to_string_lossy().into_owned()).expect("no NUL in the path");
    // SAFETY: a NUL-terminated string.
    assert_eq!(
        unsafe { emm_configure(spec.as_ptr()) },
        EmmStatus::Ok,
        "{}",
        message()
    );
    assert!(stats()["manager"]
        .as_str()
        .unwrap_or("")
        .ends_with("first_fit.wasm"));
    let ptrs: Vec<_> = (1..=8).map(|i| alloc(i * 1000, 0, null_mut())).collect();
    assert_eq!(stats()["devices"][0]["current_allocations"], 8);
    for p in ptrs {
        free(p, null_mut());
    }
    // SAFETY: writable out-pointer.
    unsafe {
        let mut p = null_mut();
        fails(
            emm_alloc(0, 0, null_mut(), &mut p),
            EmmStatus::InvalidArgument,
            "size 0",
        );
    }
}

/// A configuration error quotes a short excerpt of the input, however long it is: a 64 MiB
/// spec once came back as a 64 MiB message.
#[test]
fn a_configuration_error_quotes_an_excerpt_not_the_whole_input() {
    let _g = setup();
    let big = "y".repeat(64 << 20);
    for (spec, status) in [
        (
            format!("{{\"pool_allocator\": {big}}}"),
            EmmStatus::InvalidArgument,
        ),
        (format!("{{\"{big}\": true}}"), EmmStatus::InvalidArgument),
        (big.clone(), EmmStatus::Config),
    ] {
        let c = CString::new(spec).unwrap();
        // SAFETY: a NUL-terminated string.
        let s = unsafe { emm_configure(c.as_ptr()) };
        assert_eq!(s, status);
        let m = message();
        assert!(
            m.len() < 1024,
            "{} bytes of message: {}",
            m.len(),
            &m[..200]
        );
        assert!(m.contains("bytes in all"), "{m}");
    }
    assert_eq!(stats()["manager"], "pool", "nothing changed");
}

/// `{"devices": []}` would set up no device, so that every allocation failed: refused.
#[test]
fn a_chain_on_no_device_is_refused() {
    let _g = setup();
    for json in [
        cr#"{"devices": []}"#,
        cr#"{"pool_allocator": true, "devices": []}"#,
    ] {
        // SAFETY: NUL-terminated literals.
        fails(
            unsafe { emm_configure(json.as_ptr()) },
            EmmStatus::InvalidArgument,
            "devices is empty",
        );
        // SAFETY: as above.
        fails(
            unsafe { emm_reinitialize(json.as_ptr()) },
            EmmStatus::InvalidArgument,
            "devices is empty",
        );
    }
    assert_eq!(stats()["manager"], "pool", "nothing changed");
    let p = alloc(4096, 0, null_mut());
    free(p, null_mut());
}

/// An allocation log on a full disk (`/dev/full`): allocations go on, and the lost lines are
/// reported by `emm_log_check` (`EMM_STATUS_IO`) and in the statistics, not dropped silently.
#[test]
fn a_log_on_a_full_disk_is_reported_by_status_and_statistics() {
    let _g = setup();
    assert_eq!(stats()["devices"][0]["log"], serde_json::Value::Null);
    let opts = cr#"{"pool_allocator": true, "devices": [0], "log_file_name": "/dev/full"}"#;
    // SAFETY: a NUL-terminated literal.
    assert_eq!(
        unsafe { emm_reinitialize(opts.as_ptr()) },
        EmmStatus::Ok,
        "{}",
        message()
    );
    assert_eq!(emm_log_check(-1), EmmStatus::Ok, "nothing logged yet");
    let ptrs: Vec<_> = (0..3).map(|_| alloc(4096, 0, null_mut())).collect();
    for p in ptrs {
        free(p, null_mut());
    }
    fails(emm_log_check(0), EmmStatus::Io, "No space left on device");
    assert!(message().contains("6 event lines lost"), "{}", message());
    fails(emm_log_check(-1), EmmStatus::Io, "device 0");
    let log = &stats()["devices"][0]["log"];
    assert_eq!(log["lines_dropped"], 6, "{log}");
    assert!(
        log["failure"].as_str().unwrap_or("").contains("incomplete"),
        "{log}"
    );
    assert_eq!(stats()["devices"][1]["log"], serde_json::Value::Null);
    // SAFETY: a NUL-terminated literal.
    assert_eq!(unsafe { emm_configure(c"pool".as_ptr()) }, EmmStatus::Ok);
    assert_eq!(emm_log_check(-1), EmmStatus::Ok, "the pool writes no log");
}

/// On the simulator, host memory from `emm_host_alloc` is real memory the program reads and
/// writes, and `emm_host_pin` pins the program's own memory, as on a GPU; the simulator still
/// counts both, and a pin overlapping another is refused as CUDA refuses it.
#[test]
fn host_memory_on_the_simulator_is_real_and_pins_the_callers_memory() {
    let _g = setup();
    // SAFETY (every call): out-pointers writable; each pointer read or written lies inside
    // memory emm handed out or the test's own vector, for its length.
    unsafe {
        for flags in [0, EMM_HOST_MAPPED | EMM_HOST_PORTABLE] {
            let (mut h, mut d) = (null_mut(), null_mut());
            let s = emm_host_alloc(1 << 20, 0, flags, &mut h, &mut d);
            assert_eq!(s, EmmStatus::Ok, "{}", message());
            assert_eq!(h as usize % 4096, 0, "page-aligned");
            let bytes = std::slice::from_raw_parts_mut(h.cast::<u8>(), 1 << 20);
            assert!(bytes.iter().all(|&b| b == 0), "zeroed");
            std::ptr::write_bytes(h.cast::<u8>(), 0xab, 1 << 20);
            assert!(bytes.iter().all(|&b| b == 0xab));
            assert_eq!(d.is_null(), flags & EMM_HOST_MAPPED == 0);
            assert_eq!(stats()["host_allocations"], 1);
            free(h, null_mut());
            assert_eq!(stats()["host_allocations"], 0);
        }

        let mut mine = vec![7u8; 3 << 20];
        let p = mine.as_mut_ptr().cast::<c_void>();
        let mut d = null_mut();
        assert_eq!(
            emm_host_pin(p, mine.len(), 0, 1, &mut d),
            EmmStatus::Ok,
            "{}",
            message()
        );
        assert!(!d.is_null(), "a mapped pin has a device address");
        fails(
            emm_host_pin(p.byte_add(4096), 4096, 0, 0, null_mut()),
            EmmStatus::InvalidArgument,
            "overlap",
        );
        // The caller's memory stays the caller's while pinned, and after.
        mine[12345] = 9;
        free(p, null_mut());
        assert_eq!((mine[0], mine[12345], mine[(3 << 20) - 1]), (7, 9, 7));
        // Pinned again once unpinned, in two halves.
        let half = mine.len() / 2;
        assert_eq!(
            emm_host_pin(p, half, 1, 0, null_mut()),
            EmmStatus::Ok,
            "{}",
            message()
        );
        let q = p.byte_add(half);
        assert_eq!(
            emm_host_pin(q, half, 1, 0, null_mut()),
            EmmStatus::Ok,
            "{}",
            message()
        );
        assert_eq!(stats()["host_allocations"], 2);
        free(q, null_mut());
        free(p, null_mut());
        assert_eq!(stats()["host_allocations"], 0);
    }
}
