//! Containers on the simulated GPU.

use std::sync::Arc;

use emm_core::containers::{DeviceBuffer, DeviceScalar, DeviceVec, Stream};
use emm_core::mr::{AsyncResource, CudaResource, DeviceMemoryResource, MrError};
use emm_core::{DeviceId, DevicePtr, Driver, StreamId};
use emm_sim::{SimConfig, SimDriver, GIB, MIB};

fn gpu(memory: u64) -> SimDriver {
    SimDriver::new(SimConfig::new(3).devices(2).memory_per_device(memory)).unwrap()
}

#[test]
fn contents_round_trip() {
    let g = gpu(GIB);
    let mr: Arc<dyn DeviceMemoryResource> = Arc::new(CudaResource::new(g.clone()));
    let s = StreamId::DEFAULT;
    let data: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
    let buf = DeviceBuffer::from_host_in(&data, s, mr.clone()).unwrap();
    assert_eq!(buf.to_host(s).unwrap(), data);
    let copy = buf.try_clone(s).unwrap();
    assert_ne!(copy.ptr(), buf.ptr());
    assert_eq!(copy.clone().to_host(s).unwrap(), data);

    let v = DeviceVec::<u32>::from_slice_in(&[1, 2, 3], s, mr.clone()).unwrap();
    assert_eq!(v.to_vec(s).unwrap(), vec![1, 2, 3]);
    v.set(1, 42).unwrap();
    assert_eq!(v.get(1, s).unwrap(), 42);
    assert!(matches!(v.get(3, s), Err(MrError::InvalidArgument { .. })));
    v.fill(0x0101_0101, s).unwrap(); // one memset
    assert_eq!(v.to_vec(s).unwrap(), vec![0x0101_0101; 3]);
    v.fill(7, s).unwrap(); // bytes differ: a copy
    assert_eq!(v.to_vec(s).unwrap(), vec![7; 3]);

    let mut grow = DeviceVec::<u64>::with_capacity_in(0, s, mr.clone()).unwrap();
    for i in 0..100 {
        grow.push(i * i, s).unwrap();
    }
    assert_eq!(grow.len(), 100);
    assert!(grow.capacity() >= 100);
    assert_eq!(grow.get(99, s).unwrap(), 99 * 99);
    assert_eq!(grow.pop(s).unwrap(), Some(99 * 99));
    assert_eq!(
        grow.to_vec(s).unwrap(),
        (0..99).map(|i| i * i).collect::<Vec<u64>>()
    );

    let mut scalar = DeviceScalar::new_in(1.5f64, s, mr.clone()).unwrap();
    assert_eq!(scalar.value(s).unwrap(), 1.5);
    scalar.set_value(-2.0, s).unwrap();
    assert_eq!(scalar.value(s).unwrap(), -2.0);
    drop((buf, copy, v, grow, scalar));
    assert!(g.report().is_clean(), "{}", g.report());
}

#[test]
fn zero_length_containers() {
    let g = gpu(GIB);
    let mr: Arc<dyn DeviceMemoryResource> = Arc::new(CudaResource::new(g.clone()));
    let s = StreamId::DEFAULT;
    let b = DeviceBuffer::new_in(0, s, mr.clone()).unwrap();
    assert_eq!((b.size(), b.ptr()), (0, DevicePtr::NULL));
    assert!(b.to_host(s).unwrap().is_empty());
    let mut v = DeviceVec::<u16>::new_in(0, s, mr.clone()).unwrap();
    assert!(v.is_empty());
    assert_eq!(v.pop(s).unwrap(), None);
    v.fill(3, s).unwrap();
    v.push(9, s).unwrap();
    assert_eq!(v.to_vec(s).unwrap(), vec![9]);
    drop((b, v));
    assert!(g.report().is_clean(), "{}", g.report());
}

#[test]
fn drop_frees_on_the_buffers_stream_and_other_streams_need_a_wait() {
    let g = gpu(GIB);
    let mr: Arc<dyn DeviceMemoryResource> =
        Arc::new(AsyncResource::from_default_pool(g.clone()).unwrap());
    let (s1, s2) = (
        Stream::new(g.clone(), true).unwrap(),
        Stream::new(g.clone(), true).unwrap(),
    );
    {
        let buf = DeviceBuffer::from_host_in(&[1; 4096], s1.view(), mr.clone()).unwrap();
        assert_eq!(buf.to_host(s1.view()).unwrap(), vec![1; 4096]);
    }
    assert_eq!(
        g.report().races().count(),
        0,
        "freed on its own stream: {}",
        g.report()
    );
    // Using the buffer on s2 without waiting on s1 is reported.
    let buf = DeviceBuffer::from_host_in(&[2; 4096], s1.view(), mr.clone()).unwrap();
    g.memset_d8(buf.ptr(), 0, 4096, Some(s2.view())).unwrap();
    assert_eq!(g.report().races().count(), 1, "{}", g.report());
    drop(buf);
    s1.synchronize().unwrap();
}

#[test]
fn a_failed_resize_keeps_the_old_contents() {
    let g = gpu(MIB);
    let mr: Arc<dyn DeviceMemoryResource> = Arc::new(CudaResource::new(g.clone()));
    let s = StreamId::DEFAULT;
    let data = vec![5u8; 600 << 10];
    let mut buf = DeviceBuffer::from_host_in(&data, s, mr).unwrap();
    let e = buf.resize(700 << 10, s).unwrap_err();
    assert!(e.is_out_of_memory(), "{e}");
    assert_eq!(buf.size(), 600 << 10);
    assert_eq!(buf.to_host(s).unwrap(), data);
    buf.resize(100, s).unwrap();
    buf.shrink_to_fit(s).unwrap();
    assert_eq!((buf.size(), buf.capacity()), (100, 100));
    assert_eq!(buf.to_host(s).unwrap(), vec![5; 100]);
}

/// The check runs in debug builds only (as RMM's), so the test does too.
#[cfg(debug_assertions)]
#[test]
fn a_buffer_used_while_another_device_is_current_is_caught() {
    let g = gpu(GIB);
    let mr: Arc<dyn DeviceMemoryResource> = Arc::new(CudaResource::new(g.clone()));
    let buf = DeviceBuffer::from_host_in(b"device 0", StreamId::DEFAULT, mr).unwrap();
    assert_eq!(buf.device(), DeviceId(0));
    g.set_current_context(g.primary_context(DeviceId(1)).unwrap())
        .unwrap();
    let e = buf.to_host(StreamId::DEFAULT).unwrap_err();
    assert!(
        e.to_string()
            .contains("device 0 was used while device 1 is current"),
        "{e}"
    );
    g.set_current_context(g.primary_context(DeviceId(0)).unwrap())
        .unwrap();
    assert_eq!(buf.to_host(StreamId::DEFAULT).unwrap(), b"device 0");
}
