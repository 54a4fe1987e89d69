//! Contexts, attribution, injected faults, costs, memory information, leaks, configs and
//! peer access.

use super::*;

#[test]
fn contexts_are_per_thread_and_allocations_land_on_the_current_device() {
    let g = SimDriver::new(SimConfig::new(4).devices(4).memory_per_device(GIB)).unwrap();
    assert_eq!(g.device_count().unwrap(), 4);
    let c2 = g.primary_context(DeviceId(2)).unwrap();
    g.set_current_context(c2).unwrap();
    assert_eq!(g.current_context().unwrap(), c2);
    g.mem_alloc(4096).unwrap();
    assert_eq!(g.device_memory_used(DeviceId(2)), 4096);
    let g2 = g.clone();
    let other =
        std::thread::spawn(move || g2.context_device(g2.current_context().unwrap()).unwrap())
            .join()
            .unwrap();
    assert_eq!(other, DeviceId(0), "a new thread starts on device 0");
    assert_eq!(
        code(g.primary_context(DeviceId(4))),
        CudaCode::INVALID_DEVICE
    );
    assert_eq!(
        code(g.set_current_context(emm_core::ContextId(99))),
        CudaCode::INVALID_CONTEXT
    );
    let other_process = g.process();
    assert_eq!(
        code(other_process.set_current_context(c2)),
        CudaCode::INVALID_CONTEXT
    );
}

#[test]
fn every_call_is_attributed_to_its_caller() {
    let g = gpu();
    {
        let _scope = CallerScope::enter("plugin");
        let p = g.mem_alloc(64).unwrap();
        g.mem_free(p).unwrap();
    }
    g.mem_alloc(64).unwrap();
    let by = g.device_allocations_by_caller();
    assert_eq!(by.get("plugin"), Some(&1));
    assert_eq!(by.get("user"), Some(&1));
    let t = g.trace();
    assert_eq!(t[1].call, CallKind::MemFree);
    assert_eq!(t[1].caller, "plugin");
    assert_eq!(g.report().leaks[0].caller, "user");
}

#[test]
fn the_nth_call_fails_as_injected_and_changes_nothing() {
    let g = SimDriver::new(
        SimConfig::new(5)
            .memory_per_device(GIB)
            .fault(Fault::FailNth {
                call: Some(CallKind::MemAlloc),
                nth: 2,
                code: CudaCode::LAUNCH_FAILED,
            }),
    )
    .unwrap();
    let a = g.mem_alloc(64).unwrap();
    let e = g.mem_alloc(64).unwrap_err();
    assert_eq!(e.code, CudaCode::LAUNCH_FAILED);
    assert!(e.to_string().contains("injected"), "{e}");
    assert_eq!(g.device_memory_used(DeviceId(0)), 256);
    g.mem_alloc(64).unwrap();
    g.inject(Fault::FailNth {
        call: None,
        nth: 1,
        code: CudaCode::INVALID_VALUE,
    });
    assert_eq!(code(g.mem_free(a)), CudaCode::INVALID_VALUE);
    g.mem_free(a).unwrap();
}

#[test]
fn out_of_memory_at_a_chosen_level() {
    let g = gpu();
    g.inject(Fault::OutOfMemoryAbove {
        device: None,
        bytes: MIB,
    });
    let a = g.mem_alloc(MIB as usize / 2).unwrap();
    assert!(g.mem_alloc(MIB as usize).unwrap_err().is_out_of_memory());
    assert_eq!(g.mem_get_info().unwrap().free, MIB / 2);
    g.clear_faults();
    g.mem_alloc(MIB as usize).unwrap();
    g.mem_free(a).unwrap();
}

#[test]
fn random_faults_follow_the_seed() {
    let run = || {
        let g = SimDriver::new(SimConfig::new(42).fault(Fault::Random {
            calls: vec![],
            per_million: 200_000,
            code: CudaCode::OUT_OF_MEMORY,
        }))
        .unwrap();
        (0..200)
            .map(|_| g.mem_alloc(64).is_ok())
            .collect::<Vec<_>>()
    };
    let (a, b) = (run(), run());
    assert_eq!(a, b);
    let failed = a.iter().filter(|ok| !**ok).count();
    assert!((20..70).contains(&failed), "{failed} of 200 failed at 20 %");
}

#[test]
fn cudamalloc_costs_what_the_h200_measured_and_peers_add_to_it() {
    let g = SimDriver::new(SimConfig::new(6).devices(4).memory_per_device(GIB)).unwrap();
    let t0 = g.now_ns();
    let p = g.mem_alloc(4096).unwrap();
    g.mem_free(p).unwrap();
    let small = g.now_ns() - t0;
    assert!(
        (8_000..=10_000).contains(&small),
        "alloc+free of 4 KiB: {small} ns"
    );
    let t1 = g.now_ns();
    let p = g.mem_alloc(64 << 20).unwrap();
    g.mem_free(p).unwrap();
    let large = g.now_ns() - t1;
    assert!(
        (104_000..=128_000).contains(&large),
        "alloc+free of 64 MiB: {large} ns"
    );
    let t2 = g.now_ns();
    let s = g.stream_create(true).unwrap();
    let pool = g.device_default_mem_pool(DeviceId(0)).unwrap();
    g.mem_pool_set_release_threshold(pool, u64::MAX).unwrap();
    let p = g.mem_alloc_async(4096, s).unwrap();
    g.mem_free_async(p, s).unwrap();
    let t3 = g.now_ns();
    let p = g.mem_alloc_async(4096, s).unwrap();
    g.mem_free_async(p, s).unwrap();
    let pooled = (g.now_ns() - t3) / 2;
    assert!(
        (900..=1_100).contains(&pooled),
        "pooled async op: {pooled} ns"
    );
    assert!(t3 > t2);
    // With three peers mapping device 0, every cuMemAlloc costs more.
    for d in 1..4 {
        g.set_current_context(g.primary_context(DeviceId(d)).unwrap())
            .unwrap();
        g.enable_peer_access(g.primary_context(DeviceId(0)).unwrap())
            .unwrap();
    }
    g.set_current_context(g.primary_context(DeviceId(0)).unwrap())
        .unwrap();
    let t4 = g.now_ns();
    let p = g.mem_alloc(4096).unwrap();
    g.mem_free(p).unwrap();
    assert!(g.now_ns() - t4 > small);
    assert_eq!(
        code(g.enable_peer_access(g.primary_context(DeviceId(0)).unwrap())),
        CudaCode::INVALID_DEVICE
    );
}

#[test]
fn memory_info_is_consistent() {
    let g = gpu();
    let i = g.mem_get_info().unwrap();
    assert_eq!((i.free, i.total), (GIB, GIB));
    let p = g.mem_alloc(1000).unwrap();
    assert_eq!(g.mem_get_info().unwrap().free, GIB - 1024);
    assert_eq!(g.mem_get_address_range(p.offset(999)).unwrap(), (p, 1000));
    assert_eq!(
        code(g.mem_get_address_range(p.offset(1000))),
        CudaCode::NOT_FOUND
    );
}

#[test]
fn leaks_are_reported_with_their_kind() {
    let g = gpu();
    g.mem_alloc(100).unwrap();
    g.host_alloc(200, HostAllocFlags::default()).unwrap();
    g.stream_create(false).unwrap();
    g.event_create().unwrap();
    let r = g.report();
    assert!(!r.is_clean());
    assert_eq!(r.device_memory.bytes, 100);
    assert_eq!(r.pinned_memory.bytes, 200);
    assert_eq!(r.leaked_bytes(), 300);
    assert_eq!((r.streams.count, r.events.count), (1, 1));
}

#[test]
fn bad_configs_are_refused_with_the_field_named() {
    let e = SimDriver::new(SimConfig::new(1).devices(0)).unwrap_err();
    assert!(e.contains("devices"), "{e}");
}

#[test]
fn a_kernel_touches_a_peer_device_only_after_peer_access_is_enabled() {
    let g = SimDriver::new(SimConfig::new(8).devices(2).memory_per_device(GIB)).unwrap();
    let on_dev0 = g.mem_alloc(4096).unwrap();
    let (c0, c1) = (
        g.primary_context(DeviceId(0)).unwrap(),
        g.primary_context(DeviceId(1)).unwrap(),
    );
    g.set_current_context(c1).unwrap();
    let s1 = g.stream_create(true).unwrap();
    assert_eq!(
        code(g.device_access(on_dev0, 16, s1, false)),
        CudaCode::ILLEGAL_ADDRESS
    );
    assert!(matches!(
        g.report().violations[0],
        Violation::PeerAccess { .. }
    ));
    // Copies go through the copy engine and need no peer access.
    g.memcpy_dtoh(&mut [0; 16], on_dev0, Some(s1)).unwrap();
    assert!(g.can_access_peer(DeviceId(1), DeviceId(0)).unwrap());
    g.enable_peer_access(c0).unwrap();
    g.device_access(on_dev0, 16, s1, false).unwrap();
    assert_eq!(
        code(g.enable_peer_access(c0)),
        CudaCode::PEER_ACCESS_ALREADY_ENABLED
    );
    assert_eq!(g.report().violations.len(), 1);
}
