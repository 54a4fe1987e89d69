//! Managed memory: migration on access and prefetch, advice, oversubscription.

use super::*;

#[test]
fn managed_pages_migrate_on_access_and_prefetch() {
    let g = gpu();
    let m = g.mem_alloc_managed(1 << 20, true).unwrap();
    assert_eq!(g.residency(m), None, "unpopulated until touched");
    g.host_write(m.as_host(), &[5; 1 << 20]).unwrap();
    assert_eq!(g.residency(m), Some(Location::Host));
    g.device_access(m, 1 << 20, StreamId::DEFAULT, false)
        .unwrap();
    assert_eq!(g.residency(m), Some(Location::Device(DeviceId(0))));
    let st = g.managed_stats();
    assert_eq!(st.faults, 16, "16 pages of 64 KiB faulted over");
    assert_eq!(st.migrated_to_device, 1 << 20);
    g.mem_prefetch(m, 1 << 20, Location::Host, StreamId::DEFAULT)
        .unwrap();
    g.stream_synchronize(StreamId::DEFAULT).unwrap();
    assert_eq!(g.residency(m), Some(Location::Host));
    assert_eq!(g.managed_stats().prefetched, 1 << 20);
    let mut back = vec![0; 1 << 20];
    g.host_read(m.as_host(), &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 5));
    g.mem_free(m).unwrap();
    assert!(g.report().is_clean(), "{}", g.report());
}

#[test]
fn advice_is_recorded_and_honoured() {
    let g = gpu();
    let m = g.mem_alloc_managed(256 << 10, true).unwrap();
    g.mem_advise(m, 256 << 10, Advice::SetPreferredLocation, Location::Host)
        .unwrap();
    g.mem_advise(
        m,
        256 << 10,
        Advice::SetAccessedBy,
        Location::Device(DeviceId(0)),
    )
    .unwrap();
    let adv = g.managed_advice(m).unwrap();
    assert_eq!(adv.preferred_location, Some(Location::Host));
    assert_eq!(adv.accessed_by, vec![Location::Device(DeviceId(0))]);
    g.host_write(m.as_host(), &[1; 256 << 10]).unwrap();
    g.device_access(m, 256 << 10, StreamId::DEFAULT, false)
        .unwrap();
    assert_eq!(g.residency(m), Some(Location::Host), "mapped, not migrated");
    assert_eq!(g.managed_stats().faults, 0);
    assert!(g.managed_stats().remote_accesses > 0);
    g.mem_advise(
        m,
        256 << 10,
        Advice::UnsetAccessedBy,
        Location::Device(DeviceId(0)),
    )
    .unwrap();
    g.mem_advise(m, 256 << 10, Advice::UnsetPreferredLocation, Location::Host)
        .unwrap();
    assert_eq!(
        g.managed_advice(m).unwrap(),
        emm_sim::ManagedAdvice {
            attach_global: true,
            ..Default::default()
        }
    );
    let plain = g.mem_alloc(64).unwrap();
    assert_eq!(
        code(g.mem_advise(plain, 64, Advice::SetReadMostly, Location::Host)),
        CudaCode::INVALID_VALUE
    );
    assert_eq!(
        code(g.mem_advise(m, 64, Advice::SetReadMostly, Location::Device(DeviceId(9)))),
        CudaCode::INVALID_DEVICE
    );
}

#[test]
fn managed_memory_oversubscribes_by_evicting_to_the_host() {
    let g = SimDriver::new(SimConfig::new(3).memory_per_device(4 * MIB)).unwrap();
    let m = g.mem_alloc_managed(8 << 20, true).unwrap();
    g.device_access(m, 8 << 20, StreamId::DEFAULT, true)
        .unwrap();
    let st = g.managed_stats();
    assert_eq!(st.evictions, 64, "half of 128 pages evicted");
    assert_eq!(g.managed_resident(DeviceId(0)), 4 * MIB);
    // Device allocations push managed pages out too.
    let d = g.mem_alloc(MIB as usize).unwrap();
    assert_eq!(g.managed_resident(DeviceId(0)), 3 * MIB);
    g.mem_free(d).unwrap();
    g.mem_free(m).unwrap();
    assert_eq!(g.device_memory_used(DeviceId(0)), 0);
}

#[test]
fn a_non_blocking_move_to_the_host_races_with_an_unsynchronized_host_read() {
    let g = gpu();
    let s = g.stream_create(true).unwrap();
    let m = g.mem_alloc_managed(64 << 10, true).unwrap();
    g.device_access(m, 64 << 10, s, true).unwrap();
    g.mem_prefetch(m, 64 << 10, Location::Host, s).unwrap();
    g.host_read(m.as_host(), &mut [0; 16]).unwrap();
    assert_eq!(g.report().races().count(), 1, "{}", g.report());
    g.stream_synchronize(s).unwrap();
    g.host_read(m.as_host(), &mut [0; 16]).unwrap();
    assert_eq!(g.report().races().count(), 1);
}
