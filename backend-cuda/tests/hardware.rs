//! The same driver checks on the simulated GPU (always) and on a real GPU (when one is there):
//! if both pass, the simulator predicts the hardware. Without a GPU the CUDA arm checks that
//! opening the driver is a clean error.

use std::sync::Arc;

use emm_core::mr::{Backing, CudaResource, DeviceMemoryResource, PoolResource};
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
        Ok(gpu) => {
            assert!(gpu.device_count().unwrap() >= 1);
            // The plugin gate asks this: a real GPU never passes for the simulator.
            assert!(!gpu.is_simulated());
        }
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

/// Reserve, create, map, grant access, use, unmap, remap, release, free — with device memory
/// counted when it is created, not when it is reserved, and bytes that cross from one mapping
/// to the next as if the range were one allocation.
#[test]
fn virtual_memory_maps_physical_memory_into_a_reserved_range() {
    both(|d| {
        let dev = DeviceId(0);
        let g = d.mem_get_allocation_granularity(dev).unwrap();
        assert!(g.is_power_of_two() && g >= 4096, "granularity {g}");
        let free0 = d.mem_get_info().unwrap().free;
        let base = d.mem_address_reserve(4 * g, 0).unwrap();
        assert_eq!(
            base.0 % g as u64,
            0,
            "reservations are aligned to the granularity"
        );
        let free1 = d.mem_get_info().unwrap().free;
        assert!(
            free1 + (g as u64) > free0,
            "a reservation uses no memory: {free0} -> {free1}"
        );
        let (a, b) = (d.mem_create(g, dev).unwrap(), d.mem_create(g, dev).unwrap());
        assert_ne!(a, b);
        let free2 = d.mem_get_info().unwrap().free;
        assert!(
            free2 + 2 * g as u64 <= free1,
            "physical memory counts: {free1} -> {free2}"
        );
        d.mem_map(base, g, a).unwrap();
        d.mem_map(base.offset(g as u64), g, b).unwrap();
        d.mem_set_access(base, 2 * g, dev).unwrap();
        // One copy across the boundary between the two mappings.
        let data = pattern(2 * g, 5);
        d.memcpy_htod(base, &data, None).unwrap();
        d.memset_d8(base.offset(g as u64 - 100), 0x5A, 200, None)
            .unwrap();
        let mut back = vec![0; 2 * g];
        d.memcpy_dtoh(&mut back, base, None).unwrap();
        assert_eq!(back[..g - 100], data[..g - 100]);
        assert!(back[g - 100..g + 100].iter().all(|&x| x == 0x5A));
        assert_eq!(back[g + 100..], data[g + 100..]);
        // Physical memory keeps its bytes when unmapped and mapped again elsewhere.
        let s = d.stream_create(true).unwrap();
        d.memset_d8(base, 0x11, 4096, Some(s)).unwrap();
        d.stream_synchronize(s).unwrap();
        d.mem_unmap(base, g).unwrap();
        d.mem_unmap(base.offset(g as u64), g).unwrap();
        let again = base.offset(3 * g as u64);
        d.mem_map(again, g, a).unwrap();
        d.mem_set_access(again, g, dev).unwrap();
        let mut first = vec![0; 8192];
        d.memcpy_dtoh(&mut first, again, None).unwrap();
        assert!(first[..4096].iter().all(|&x| x == 0x11));
        assert_eq!(first[4096..], data[4096..8192]);
        d.mem_unmap(again, g).unwrap();
        d.mem_release(a).unwrap();
        d.mem_release(b).unwrap();
        d.mem_address_free(base, 4 * g).unwrap();
        d.stream_destroy(s).unwrap();
        let free3 = d.mem_get_info().unwrap().free;
        assert!(
            free3 + (g as u64) > free0,
            "everything given back: {free0} -> {free3}"
        );
    });
}

/// Misuse of virtual memory management is an error value, and leaves the driver usable.
#[test]
fn virtual_memory_misuse_is_a_typed_error() {
    both(|d| {
        let dev = DeviceId(0);
        let g = d.mem_get_allocation_granularity(dev).unwrap();
        assert!(d.mem_address_reserve(0, 0).is_err(), "size 0");
        assert!(d.mem_create(0, dev).is_err(), "size 0");
        assert!(d.mem_create(g + 1, dev).is_err(), "not a granule multiple");
        assert!(d.mem_create(g, DeviceId(99)).is_err(), "no such device");
        assert!(d.mem_create(1 << 50, dev).unwrap_err().is_out_of_memory());
        let base = d.mem_address_reserve(2 * g, 0).unwrap();
        let h = d.mem_create(g, dev).unwrap();
        assert!(d.mem_unmap(base, g).is_err(), "nothing is mapped yet");
        d.mem_map(base, g, h).unwrap();
        assert!(d.mem_map(base, g, h).is_err(), "double map");
        assert_eq!(
            d.mem_release(h).unwrap_err().code,
            CudaCode::ILLEGAL_STATE,
            "release of mapped memory"
        );
        assert_eq!(
            d.mem_address_free(base, 2 * g).unwrap_err().code,
            CudaCode::ILLEGAL_STATE,
            "a reservation with a mapping"
        );
        d.mem_set_access(base, g, dev).unwrap();
        assert!(
            d.ipc_get_mem_handle(base).is_err(),
            "cuIpcGetMemHandle exports cuMemAlloc memory only"
        );
        d.mem_unmap(base, g).unwrap();
        assert!(d.mem_unmap(base, g).is_err(), "unmap of an unmapped range");
        d.mem_release(h).unwrap();
        assert!(d.mem_release(h).is_err(), "double release");
        assert!(d.mem_address_free(base, g).is_err(), "wrong size");
        d.mem_address_free(base, 2 * g).unwrap();
        assert!(d.mem_address_free(base, 2 * g).is_err(), "double free");
        // Still usable.
        let p = d.mem_alloc(256).unwrap();
        d.mem_free(p).unwrap();
    });
}

/// Per-call cost of virtual memory management, for the simulator's cost model: run on a GPU
/// with `cargo test -p emm-cuda --test hardware -- --ignored --nocapture vmm_costs`.
#[test]
#[ignore = "a timing: run it on a GPU with --ignored --nocapture"]
fn vmm_costs() {
    use std::time::Instant;
    let report = |d: &dyn Driver| {
        let dev = DeviceId(0);
        let g = d.mem_get_allocation_granularity(dev).unwrap();
        for size in [g, 32 * g] {
            let reps = 50;
            let mut t = [0f64; 7];
            for _ in 0..reps {
                let mut lap = |i: usize, t0: Instant| t[i] += t0.elapsed().as_secs_f64() * 1e6;
                let t0 = Instant::now();
                let base = d.mem_address_reserve(size, 0).unwrap();
                lap(0, t0);
                let t0 = Instant::now();
                let h = d.mem_create(size, dev).unwrap();
                lap(1, t0);
                let t0 = Instant::now();
                d.mem_map(base, size, h).unwrap();
                lap(2, t0);
                let t0 = Instant::now();
                d.mem_set_access(base, size, dev).unwrap();
                lap(3, t0);
                let t0 = Instant::now();
                d.mem_unmap(base, size).unwrap();
                lap(4, t0);
                let t0 = Instant::now();
                d.mem_release(h).unwrap();
                lap(5, t0);
                let t0 = Instant::now();
                d.mem_address_free(base, size).unwrap();
                lap(6, t0);
            }
            let names = [
                "cuMemAddressReserve",
                "cuMemCreate",
                "cuMemMap",
                "cuMemSetAccess",
                "cuMemUnmap",
                "cuMemRelease",
                "cuMemAddressFree",
            ];
            for (n, us) in names.iter().zip(t) {
                eprintln!(
                    "{} {:>20} {:>6} MiB {:>9.1} us",
                    d.backend_name(),
                    n,
                    size >> 20,
                    us / reps as f64
                );
            }
        }
    };
    match CudaDriver::new() {
        Ok(gpu) => report(&gpu),
        Err(e) => eprintln!("no GPU here: {e}"),
    }
}

/// A pool over an expandable segment keeps every block's bytes, also blocks that straddle the
/// granules it mapped one by one, and gives everything back when dropped.
fn expandable_pool_check<D: Driver>(d: Arc<D>) {
    let g = d.mem_get_allocation_granularity(DeviceId(0)).unwrap();
    let free0 = d.mem_get_info().unwrap().free;
    let pool = PoolResource::new(CudaResource::<D>::new(Arc::clone(&d)));
    let sizes = [g / 2 + 1000, 3 * g + 12345, 256, g, 7 * g / 3];
    let blocks: Vec<_> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let p = pool.allocate(n, StreamId::DEFAULT).unwrap();
            d.memcpy_htod(p, &pattern(n, i as u8), None).unwrap();
            (p, n, i as u8)
        })
        .collect();
    assert_eq!(pool.backing(), Some(Backing::Expandable));
    assert!(pool.held_bytes() < 2 * sizes.iter().sum::<usize>() as u64);
    for &(p, n, seed) in &blocks {
        let mut back = vec![0; n];
        d.memcpy_dtoh(&mut back, p, None).unwrap();
        assert!(back == pattern(n, seed), "block at {p} lost its bytes");
    }
    for (i, &(p, n, _)) in blocks.iter().enumerate() {
        if i != 1 {
            pool.deallocate(p, n, StreamId::DEFAULT).unwrap();
        }
    }
    pool.release().unwrap();
    let (p, n, seed) = blocks[1];
    let mut back = vec![0; n];
    d.memcpy_dtoh(&mut back, p, None).unwrap();
    assert!(
        back == pattern(n, seed),
        "a release keeps live blocks mapped"
    );
    pool.deallocate(p, n, StreamId::DEFAULT).unwrap();
    drop(pool);
    let free1 = d.mem_get_info().unwrap().free;
    assert!(
        free1 + (g as u64) > free0,
        "all given back: {free0} -> {free1}"
    );
}

#[test]
fn an_expandable_pool_keeps_bytes_across_granules() {
    expandable_pool_check(Arc::new(sim()));
    if let Ok(gpu) = CudaDriver::new() {
        expandable_pool_check(Arc::new(gpu));
    }
}

/// The sequence that preceded a sticky `CUDA_ERROR_ILLEGAL_ADDRESS` in the conformance suite on
/// a GPU: stream work in flight, a near-total `cuMemAllocAsync` refused twice, then a managed
/// byte written and read back. Both arms must keep every byte and report out of memory typed.
#[test]
fn near_total_async_refusal_then_managed_memory() {
    both(|d| {
        let total = d.mem_get_info().unwrap().total;
        let s = d.stream_create(true).unwrap();
        let n = 1 << 20;
        let a = d.mem_alloc_async(n, s).unwrap();
        d.memset_d8(a, 3, n, Some(s)).unwrap();
        // The GPU refuses it (its context holds memory); the simulator may grant it.
        for _ in 0..2 {
            match d.mem_alloc_async((total - (1 << 20)) as usize, s) {
                Ok(big) => d.mem_free_async(big, s).unwrap(),
                Err(e) => assert!(e.is_out_of_memory(), "{e}"),
            }
        }
        let m = d.mem_alloc_managed(1, true).unwrap();
        d.memcpy_htod(m, &[7], None).unwrap();
        let mut byte = [0u8];
        d.memcpy_dtoh(&mut byte, m, None).unwrap();
        assert_eq!(byte, [7]);
        let mut back = vec![0u8; n];
        d.memcpy_dtoh(&mut back, a, Some(s)).unwrap();
        assert!(back.iter().all(|&x| x == 3));
        d.mem_free_async(a, s).unwrap();
        d.stream_synchronize(s).unwrap();
        d.mem_free(m).unwrap();
        d.stream_destroy(s).unwrap();
    });
}

/// The driver's async pool keeps what is freed into it (release threshold at the maximum):
/// managed memory must still find room on the device, and a trim gives the memory back.
#[test]
fn managed_memory_beside_a_pool_holding_the_device() {
    both(|d| {
        let pool = d.device_default_mem_pool(DeviceId(0)).unwrap();
        d.mem_pool_set_release_threshold(pool, u64::MAX).unwrap();
        let s = d.stream_create(true).unwrap();
        let free0 = d.mem_get_info().unwrap().free;
        let big = d
            .mem_alloc_async((free0 - (512 << 20)) as usize, s)
            .unwrap();
        d.mem_free_async(big, s).unwrap();
        d.stream_synchronize(s).unwrap();
        assert!(
            d.mem_get_info().unwrap().free < free0 / 2,
            "the pool keeps it"
        );
        let n = 64 << 20;
        let m = d.mem_alloc_managed(n, true).unwrap();
        d.memset_d8(m, 9, n, None).unwrap();
        let mut back = vec![0u8; n];
        d.memcpy_dtoh(&mut back, m, None).unwrap();
        assert!(back.iter().all(|&x| x == 9));
        d.mem_free(m).unwrap();
        d.mem_pool_trim_to(pool, 0).unwrap();
        assert!(
            d.mem_get_info().unwrap().free + (64 << 20) >= free0,
            "trimmed"
        );
        d.stream_destroy(s).unwrap();
    });
}

#[test]
fn a_stream_of_another_library_is_adopted_used_and_never_destroyed() {
    let (Ok(owner), Ok(emm)) = (CudaDriver::new(), CudaDriver::new()) else {
        eprintln!("no GPU here: adopting a foreign stream needs one");
        return;
    };
    // A stream the second driver did not make stands for CuPy's or PyTorch's.
    let foreign = owner.stream_create(true).unwrap();
    let err = emm.stream_synchronize(foreign).unwrap_err();
    assert_eq!(err.code, CudaCode::INVALID_HANDLE, "{err}");
    let s = emm.adopt_stream(foreign.0, DeviceId(0)).unwrap();
    assert_eq!(s, foreign);
    assert_eq!(
        emm.adopt_stream(foreign.0, DeviceId(0)).unwrap(),
        s,
        "adopting twice"
    );
    assert_eq!(emm.adopt_stream(0, DeviceId(0)).unwrap(), StreamId::DEFAULT);
    assert_eq!(emm.adopt_stream(1, DeviceId(0)).unwrap(), StreamId::DEFAULT);
    let p = emm.mem_alloc_async(1 << 20, s).unwrap();
    emm.memset_d8(p, 7, 1 << 20, Some(s)).unwrap();
    emm.mem_free_async(p, s).unwrap();
    emm.stream_synchronize(s).unwrap();
    let err = emm.stream_destroy(s).unwrap_err();
    assert!(err.to_string().contains("borrowed"), "{err}");
    if emm.device_count().unwrap() > 1 {
        let err = emm.adopt_stream(foreign.0, DeviceId(1)).unwrap_err();
        assert!(err.to_string().contains("belongs to device 0"), "{err}");
    }
    assert!(emm.forget_stream(s));
    assert!(!emm.forget_stream(s));
    owner.stream_destroy(foreign).unwrap();
}

/// Several GPUs: skipped cleanly with fewer than two.
#[path = "hardware/multi_gpu.rs"]
mod multi_gpu;

/// emm memory lent to cudarc.
#[path = "hardware/cudarc_interop.rs"]
mod cudarc_interop;
