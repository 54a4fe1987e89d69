//! Device memory through the C ABI: streams, devices and statistics, and the PyTorch pair.

use super::*;

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
    succeeds(s);
    assert_eq!(total_b, GIB);
    assert!(free_b <= total_b);

    let mut token = 0;
    // SAFETY: writable.
    assert_eq!(
        unsafe { emm_defer_cleanup_begin(0, &mut token) },
        EmmStatus::Ok
    );
    assert_eq!(emm_defer_cleanup_end(token), EmmStatus::Ok);
    succeeds(emm_reset(0));
    succeeds(emm_reset(-1));
    succeeds(emm_stream_synchronize(1, s1));
    succeeds(emm_stream_destroy(1, s1));
}

/// `held_bytes` is the device memory the manager holds from the driver: at least what is live,
/// still held once it is freed (kept for reuse), none after a reset; `null` for a manager that
/// takes every request from the driver, and for a device with no context yet.
#[test]
fn statistics_say_what_the_manager_holds() {
    let _g = setup();
    // SAFETY: NUL pointer: the default manager (`pool-vmm-tight`), fresh contexts.
    succeeds(unsafe { emm_configure(null()) });
    assert!(
        stats()["devices"][1]["held_bytes"].is_null(),
        "no context yet"
    );
    let a = alloc(3 << 20, 1, null_mut());
    let held = |d: usize| stats()["devices"][d]["held_bytes"].as_u64();
    assert!(held(1).is_some_and(|h| h >= 3 << 20), "{:?}", held(1));
    free(a, null_mut());
    assert!(
        held(1).is_some_and(|h| h >= 3 << 20),
        "kept for reuse: {:?}",
        held(1)
    );
    succeeds(emm_reset(1));
    assert_eq!(held(1), Some(0), "a reset gives it all back");
    // SAFETY: a NUL-terminated literal.
    succeeds(unsafe { emm_configure(c"default".as_ptr()) });
    free(alloc(4096, 1, null_mut()), null_mut());
    assert!(stats()["devices"][1]["held_bytes"].is_null());
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
