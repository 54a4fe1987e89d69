//! Bad input of every kind gives a status code and a message, never a crash.

use super::*;

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
