//! The process-wide current resource (one test: the registry is global).

use std::sync::Arc;

use emm_core::containers::{
    current_device, current_device_resource, set_current_device_resource, DeviceBuffer,
};
use emm_core::mr::{CudaResource, DeviceMemoryResource};
use emm_core::{DeviceId, Driver, StreamId};
use emm_sim::{SimConfig, SimDriver, GIB};

#[test]
fn set_returns_the_previous_resource_and_containers_use_the_current_one() {
    let e = DeviceBuffer::new(16, StreamId::DEFAULT).unwrap_err();
    assert!(e.to_string().contains("reinitialize"), "{e}");
    let g = SimDriver::new(SimConfig::new(1).devices(2).memory_per_device(GIB)).unwrap();
    let a: Arc<dyn DeviceMemoryResource> = Arc::new(CudaResource::new(g.clone()));
    let b: Arc<dyn DeviceMemoryResource> = Arc::new(CudaResource::new(g.clone()));
    assert!(set_current_device_resource(DeviceId(0), a.clone()).is_none());
    let prev = set_current_device_resource(DeviceId(0), b.clone()).unwrap();
    assert!(Arc::ptr_eq(&prev, &a));
    assert!(Arc::ptr_eq(
        &current_device_resource(DeviceId(0)).unwrap(),
        &b
    ));
    assert!(current_device_resource(DeviceId(1)).is_err());
    // Thread-safe: another thread sees and replaces it.
    let b2 = b.clone();
    std::thread::spawn(move || {
        assert!(Arc::ptr_eq(
            &current_device_resource(DeviceId(0)).unwrap(),
            &b2
        ));
        set_current_device_resource(DeviceId(1), b2);
    })
    .join()
    .unwrap();
    assert!(current_device_resource(DeviceId(1)).is_ok());
    assert_eq!(current_device().unwrap(), DeviceId(0));
    let buf = DeviceBuffer::from_host(b"current", StreamId::DEFAULT).unwrap();
    assert!(Arc::ptr_eq(buf.resource(), &b));
    assert_eq!(buf.to_host(StreamId::DEFAULT).unwrap(), b"current");
    g.set_current_context(g.primary_context(DeviceId(1)).unwrap())
        .unwrap();
    assert_eq!(current_device().unwrap(), DeviceId(1));
}
