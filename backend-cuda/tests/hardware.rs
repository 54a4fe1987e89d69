//! The same driver checks on the simulated GPU (always) and on a real GPU (when one is there):
//! if both pass, the simulator predicts the hardware. Without a GPU the CUDA arm checks that
//! opening the driver is a clean error.

use emm_core::{Advice, CudaCode, DeviceId, DevicePtr, Driver, HostAllocFlags, Location, StreamId};
use emm_cuda::CudaDriver;
use emm_sim::{SimConfig, SimDriver, GIB};

fn sim() -> SimDriver {
    SimDriver::new(SimConfig::new(11).memory_per_device(4 * GIB)).expect("valid config")
}

/// Runs `check` on the simulator and, when a GPU is present, on it.
fn both(check: fn(&dyn Driver)) {
    check(&sim());
    match CudaDriver::new() {
        Ok(gpu) => check(&gpu),
        Err(e) => {
            assert_eq!(e.code, CudaCode::NO_DEVICE, "{e}");
            eprintln!("no GPU here, CUDA arm skipped: {e}");
        }
    }
}

#[test]
fn opening_without_a_gpu_is_an_error_value_not_a_panic() {
    match CudaDriver::new() {
        Ok(gpu) => assert!(gpu.device_count().unwrap() >= 1),
        Err(e) => {
            assert_eq!(e.code, CudaCode::NO_DEVICE);
            if !emm_cuda::driver_present() {
                assert!(e.to_string().contains("no NVIDIA driver"), "{e}");
            }
        }
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn data_integrity_through_copies_and_sets() {
    both(|d| {
        let n = 3 << 20;
        let (a, b) = (d.mem_alloc(n).unwrap(), d.mem_alloc(n).unwrap());
        let data = pattern(n, 7);
        d.memcpy_htod(a, &data, None).unwrap();
        d.memcpy_dtod(b, a, n, None).unwrap();
        d.memset_d8(b.offset(1000), 0xEE, 4096, None).unwrap();
        let mut back = vec![0; n];
        d.memcpy_dtoh(&mut back, b, None).unwrap();
        assert_eq!(back[..1000], data[..1000]);
        assert!(back[1000..5096].iter().all(|&x| x == 0xEE));
        assert_eq!(back[5096..], data[5096..]);
        // The same on a stream.
        let s = d.stream_create(true).unwrap();
        let e = d.event_create().unwrap();
        d.memset_d8(a, 1, n, Some(s)).unwrap();
        d.event_record(e, s).unwrap();
        d.stream_wait_event(StreamId::DEFAULT, e).unwrap();
        d.memcpy_dtoh(&mut back, a, Some(s)).unwrap();
        assert!(back.iter().all(|&x| x == 1));
        d.event_synchronize(e).unwrap();
        assert!(d.event_query(e).unwrap());
        assert!(d.stream_query(s).unwrap());
        d.event_destroy(e).unwrap();
        d.stream_destroy(s).unwrap();
        d.mem_free(a).unwrap();
        d.mem_free(b).unwrap();
    });
}

#[test]
fn bad_input_is_a_typed_error() {
    both(|d| {
        assert_eq!(d.mem_alloc(0).unwrap_err().code, CudaCode::INVALID_VALUE);
        let e = d.mem_alloc(1 << 50).unwrap_err();
        assert!(e.is_out_of_memory(), "{e}");
        let p = d.mem_alloc(256).unwrap();
        d.mem_free(p).unwrap();
        assert!(d.mem_free(p).is_err(), "double free");
        assert!(
            d.mem_free(DevicePtr(0xdead_0000)).is_err(),
            "foreign pointer"
        );
        assert_eq!(
            d.stream_synchronize(StreamId(0x1234_5678))
                .unwrap_err()
                .code,
            CudaCode::INVALID_HANDLE
        );
        assert_eq!(
            d.event_query(emm_core::EventId(0x1234_5678))
                .unwrap_err()
                .code,
            CudaCode::INVALID_HANDLE
        );
        assert_eq!(
            d.primary_context(DeviceId(99)).unwrap_err().code,
            CudaCode::INVALID_DEVICE
        );
        assert!(d.host_read(emm_core::HostPtr(0x10), &mut [0; 4]).is_err());
        // Still usable.
        let p = d.mem_alloc(256).unwrap();
        d.mem_free(p).unwrap();
    });
}

#[test]
fn pinned_mapped_and_registered_host_memory() {
    both(|d| {
        let mapped = d
            .host_alloc(
                1 << 16,
                HostAllocFlags {
                    mapped: true,
                    ..Default::default()
                },
            )
            .unwrap();
        d.host_write(mapped, b"pinned").unwrap();
        let dp = d.host_device_pointer(mapped).unwrap();
        let mut back = [0u8; 6];
        d.memcpy_dtoh(&mut back, dp, None).unwrap();
        assert_eq!(&back, b"pinned");
        d.host_free(mapped).unwrap();
        let page = d.pageable_alloc(1 << 16).unwrap();
        d.host_register(page, 1 << 16, true).unwrap();
        assert_eq!(
            d.host_register(page, 1 << 16, true).unwrap_err().code,
            CudaCode::HOST_MEMORY_ALREADY_REGISTERED
        );
        d.host_write(page, b"registered").unwrap();
        let dp = d.host_device_pointer(page).unwrap();
        let mut back = [0u8; 10];
        d.memcpy_dtoh(&mut back, dp, None).unwrap();
        assert_eq!(&back, b"registered");
        d.host_unregister(page).unwrap();
        d.host_register(page, 1 << 16, false).unwrap();
        d.host_unregister(page).unwrap();
        d.pageable_free(page).unwrap();
    });
}

#[test]
fn managed_memory_with_advice_and_prefetch() {
    both(|d| {
        let n = 4 << 20;
        let m = d.mem_alloc_managed(n, true).unwrap();
        d.host_write(m.as_host(), &pattern(n, 3)).unwrap();
        d.mem_advise(
            m,
            n,
            Advice::SetPreferredLocation,
            Location::Device(DeviceId(0)),
        )
        .unwrap();
        d.mem_advise(m, n, Advice::SetAccessedBy, Location::Device(DeviceId(0)))
            .unwrap();
        let s = d.stream_create(true).unwrap();
        d.mem_prefetch(m, n, Location::Device(DeviceId(0)), s)
            .unwrap();
        d.memset_d8(m, 9, 4096, Some(s)).unwrap();
        d.mem_prefetch(m, n, Location::Host, s).unwrap();
        d.stream_synchronize(s).unwrap();
        let mut back = vec![0; n];
        d.host_read(m.as_host(), &mut back).unwrap();
        assert!(back[..4096].iter().all(|&x| x == 9));
        assert_eq!(back[4096..], pattern(n, 3)[4096..]);
        d.stream_destroy(s).unwrap();
        d.mem_free(m).unwrap();
    });
}

#[test]
fn stream_ordered_pools() {
    both(|d| {
        let pool = d.device_default_mem_pool(DeviceId(0)).unwrap();
        d.mem_pool_set_release_threshold(pool, u64::MAX).unwrap();
        let s = d.stream_create(true).unwrap();
        let p = d.mem_alloc_async(1 << 20, s).unwrap();
        d.memset_d8(p, 5, 1 << 20, Some(s)).unwrap();
        let usage = d.mem_pool_usage(pool).unwrap();
        assert!(
            usage.used >= 1 << 20 && usage.reserved >= usage.used,
            "{usage:?}"
        );
        d.mem_free_async(p, s).unwrap();
        d.stream_synchronize(s).unwrap();
        assert!(
            d.mem_pool_usage(pool).unwrap().reserved >= 1 << 20,
            "kept under the threshold"
        );
        d.mem_pool_trim_to(pool, 0).unwrap();
        assert_eq!(d.mem_pool_usage(pool).unwrap().reserved, 0);
        let own = d.mem_pool_create(DeviceId(0)).unwrap();
        let q = d.mem_alloc_from_pool_async(4096, own, s).unwrap();
        d.mem_free_async(q, s).unwrap();
        d.stream_synchronize(s).unwrap();
        d.mem_pool_destroy(own).unwrap();
        d.stream_destroy(s).unwrap();
    });
}

#[test]
fn memory_info_and_address_ranges() {
    both(|d| {
        let info = d.mem_get_info().unwrap();
        assert!(info.free <= info.total && info.total > 0);
        let p = d.mem_alloc(1 << 20).unwrap();
        let (base, size) = d.mem_get_address_range(p.offset(4096)).unwrap();
        assert_eq!(base, p);
        assert!(size >= 1 << 20);
        d.mem_free(p).unwrap();
        let props = d.device_properties(DeviceId(0)).unwrap();
        assert!(props.total_memory >= info.total.min(props.total_memory));
        assert!(props.can_map_host_memory);
    });
}
