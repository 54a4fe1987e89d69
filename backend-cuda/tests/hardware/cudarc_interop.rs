//! emm memory lent to cudarc: cudarc's copies read and write it through the views, on the
//! memory's own stream and on another, and emm then reads what cudarc wrote on its own stream.

use std::sync::Arc;

use cudarc::driver::CudaContext;
use emm_core::containers::{DeviceBuffer, DeviceVec};
use emm_core::mr::{CudaResource, DeviceMemoryResource, PoolResource};
use emm_cuda::cudarc_interop::{adopt_stream, AsCudarc};
use emm_cuda::CudaDriver;

#[test]
fn cudarc_reads_and_writes_emm_memory_through_its_views_on_any_stream() {
    if !emm_cuda::driver_present() {
        eprintln!("no GPU here: lending emm memory to cudarc needs one");
        return;
    }
    let ctx = CudaContext::new(0).unwrap();
    let (own, other) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let driver = Arc::new(CudaDriver::new().unwrap());
    let s = adopt_stream(&driver, &own).unwrap();
    let pool: Arc<dyn DeviceMemoryResource> = Arc::new(PoolResource::new(
        CudaResource::<CudaDriver>::new(Arc::clone(&driver)),
    ));

    let n = 1 << 20;
    let xs: Vec<u32> = (0..n).collect();
    let mut v = DeviceVec::from_slice_in(&xs, s, Arc::clone(&pool)).unwrap();
    // On the memory's own stream: nothing to order.
    assert_eq!(own.clone_dtoh(&v.cudarc(&own).unwrap()).unwrap(), xs);
    // Written on another stream, which waits for the memory's stream first; dropping the
    // view makes the memory's stream wait for the write.
    let ys: Vec<u32> = xs.iter().map(|x| x.wrapping_mul(2_654_435_761)).collect();
    {
        let mut view = v.cudarc_mut(&other).unwrap();
        other.memcpy_htod(&ys, &mut view).unwrap();
    }
    assert_eq!(v.to_vec(s).unwrap(), ys, "emm reads what cudarc wrote");

    // A buffer lends its bytes.
    let bytes: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
    let mut b = DeviceBuffer::from_host_in(&bytes, s, Arc::clone(&pool)).unwrap();
    assert_eq!(other.clone_dtoh(&b.cudarc(&other).unwrap()).unwrap(), bytes);
    {
        let mut view = b.cudarc_mut(&own).unwrap();
        own.memset_zeros(&mut view).unwrap();
    }
    assert_eq!(b.to_host(s).unwrap(), vec![0; bytes.len()]);
    drop((v, b, pool));
    own.synchronize().unwrap();
    assert!(driver.forget_stream(s));
}
