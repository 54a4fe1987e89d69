//! `reinitialize` (one test: the current resources are process-wide).

use std::sync::Arc;

use emm_core::containers::{current_device_resource, DeviceBuffer};
use emm_core::{reinitialize, DeviceId, Driver, ReinitializeOptions, StreamId};
use emm_sim::{SimConfig, SimDriver, GIB};

#[test]
fn rebuilds_every_devices_current_resource_from_options() {
    let g = SimDriver::new(SimConfig::new(1).devices(2).memory_per_device(GIB)).unwrap();
    let driver: Arc<dyn Driver> = Arc::new(g.clone());
    let dir = std::env::temp_dir().join(format!("emm-reinit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let options = ReinitializeOptions {
        pool_allocator: true,
        initial_pool_size: Some(4 << 20),
        log_file_name: Some(dir.join("allocs.csv")),
        statistics: true,
        ..Default::default()
    };
    let built = reinitialize(Arc::clone(&driver), &options).unwrap();
    assert_eq!(built.len(), 2);
    assert_eq!(built[0].name(), "StatisticsAdaptor");
    // The initial pool size was taken on each device.
    assert_eq!(g.device_memory_used(DeviceId(0)), 4 << 20);
    assert_eq!(g.device_memory_used(DeviceId(1)), 4 << 20);
    // Buffers take the current device's resource.
    g.set_current_context(g.primary_context(DeviceId(1)).unwrap())
        .unwrap();
    let buf = DeviceBuffer::from_host(b"on device 1", StreamId::DEFAULT).unwrap();
    assert!(Arc::ptr_eq(
        buf.resource(),
        &current_device_resource(DeviceId(1)).unwrap()
    ));
    assert_eq!(buf.device(), DeviceId(1));
    drop(buf);
    g.set_current_context(g.primary_context(DeviceId(0)).unwrap())
        .unwrap();
    let log = std::fs::read_to_string(dir.join("allocs.dev1.csv")).unwrap();
    assert!(
        log.starts_with("Thread,Time,Action,Pointer,Size,Stream\n"),
        "{log}"
    );
    assert!(
        log.contains(",allocate,") && log.contains(",free,"),
        "{log}"
    );
    assert!(dir.join("allocs.dev0.csv").exists());

    // Bad options change nothing.
    let before = current_device_resource(DeviceId(0)).unwrap();
    let bad = ReinitializeOptions {
        maximum_pool_size: Some(1 << 20),
        ..Default::default()
    };
    let e = reinitialize(Arc::clone(&driver), &bad).unwrap_err();
    assert!(e.to_string().contains("pool_allocator"), "{e}");
    let missing = ReinitializeOptions {
        devices: Some(vec![DeviceId(7)]),
        ..Default::default()
    };
    assert!(reinitialize(Arc::clone(&driver), &missing).is_err());
    assert!(Arc::ptr_eq(
        &before,
        &current_device_resource(DeviceId(0)).unwrap()
    ));
    assert_eq!(
        g.context_device(g.current_context().unwrap()).unwrap(),
        DeviceId(0)
    );

    // Plain driver-backed resources again (the initial state RMM has).
    drop((before, built));
    let plain = reinitialize(driver, &ReinitializeOptions::default()).unwrap();
    assert_eq!(plain[1].name(), "CudaResource");
    let _ = std::fs::remove_dir_all(&dir);
}

/// An empty list of devices would set up none, leaving every allocation to fail, and a device
/// listed twice would be set up twice: both refused.
#[test]
fn an_empty_or_repeated_list_of_devices_is_refused() {
    let g: Arc<dyn Driver> =
        Arc::new(SimDriver::new(SimConfig::new(2).memory_per_device(GIB)).unwrap());
    let options = ReinitializeOptions {
        pool_allocator: true,
        devices: Some(Vec::new()),
        ..Default::default()
    };
    let e = reinitialize(Arc::clone(&g), &options).unwrap_err();
    assert!(e.to_string().contains("devices is empty"), "{e}");
    let e = emm_core::reinitialize_chains(Arc::clone(&g), &options)
        .err()
        .expect("refused");
    assert!(e.to_string().contains("leave devices out"), "{e}");
    // Nor may a device be listed twice (each would get a chain, the last one winning).
    let twice = ReinitializeOptions {
        devices: Some(vec![DeviceId(0), DeviceId(0)]),
        ..Default::default()
    };
    let e = reinitialize(g, &twice).unwrap_err();
    assert!(e.to_string().contains("device 0 is listed twice"), "{e}");
}
