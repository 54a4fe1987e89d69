//! Host, managed and IPC memory, and host memory on the simulator.

use super::*;

#[test]
fn host_managed_and_ipc_memory() {
    let _g = setup();
    let (mut h, mut d) = (null_mut(), null_mut());
    // SAFETY (every call): out-pointers writable, pointers from emm.
    unsafe {
        let s = emm_host_alloc(4096, 0, EMM_HOST_MAPPED | EMM_HOST_PORTABLE, &mut h, &mut d);
        succeeds(s);
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
        succeeds(emm_managed_alloc(1 << 20, 0, 1, &mut m));
        succeeds(emm_managed_advise(m, 1 << 20, 1, 0));
        succeeds(emm_managed_prefetch(m, 1 << 20, 0, null_mut()));
        succeeds(emm_managed_prefetch(m, 4096, EMM_LOCATION_HOST, null_mut()));
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
        succeeds(s);
        assert!(handle.iter().any(|&b| b != 0));
        let inner = a.cast::<u8>().add(1024).cast::<c_void>();
        let s = emm_ipc_get_handle(inner, 512, handle.as_mut_ptr(), &mut off_b);
        succeeds(s);
        assert_eq!(off_b, off_a + 1024);
        fails(
            emm_ipc_get_handle(inner, 1 << 20, handle.as_mut_ptr(), &mut off_b),
            EmmStatus::InvalidArgument,
            "outside the pointer",
        );
        free(a, null_mut());

        // The async manager's memory cannot be exported: Unsupported, told apart.
        succeeds(emm_configure(c"async".as_ptr()));
        let b = alloc(4096, 0, null_mut());
        fails(
            emm_ipc_get_handle(b, 0, handle.as_mut_ptr(), &mut off_a),
            EmmStatus::Unsupported,
            "cuIpcGetMemHandle",
        );
        free(b, null_mut());
    }
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
            succeeds(s);
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
        succeeds(emm_host_pin(p, mine.len(), 0, 1, &mut d));
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
        succeeds(emm_host_pin(p, half, 1, 0, null_mut()));
        let q = p.byte_add(half);
        succeeds(emm_host_pin(q, half, 1, 0, null_mut()));
        assert_eq!(stats()["host_allocations"], 2);
        free(q, null_mut());
        free(p, null_mut());
        assert_eq!(stats()["host_allocations"], 0);
    }
}
