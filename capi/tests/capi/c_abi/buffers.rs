//! Device buffers round trip and share the process-wide manager.

use super::*;

#[test]
fn device_buffers_round_trip_and_share_the_manager() {
    let _g = setup();
    let data: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
    let mut h = 0;
    // SAFETY (every call): `data` readable, out-pointers writable, handles from emm.
    unsafe {
        let s = emm_device_buffer_new(data.as_ptr().cast(), data.len(), 1, null_mut(), &mut h);
        succeeds(s);
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
        succeeds(s);
        assert_eq!(back, data);
        succeeds(emm_device_buffer_resize(h, 5000, null_mut()));
        assert_eq!(
            emm_device_buffer_copy_from_host(h, 4000, data.as_ptr().cast(), 1000),
            EmmStatus::Ok
        );
        let mut tail = vec![0u8; 1000];
        let s = emm_device_buffer_copy_to_host(h, 4000, tail.as_mut_ptr().cast(), 1000, null_mut());
        succeeds(s);
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
        succeeds(emm_device_buffer_free(h));
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
        succeeds(emm_device_buffer_new(null(), 0, 0, null_mut(), &mut e));
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
