//! RMM-style resources on cudarc: a pool with statistics over the GPU's device memory, used
//! from two streams. The README shows this program; without a GPU it exits with the driver's
//! error (`CUDA_ERROR_NO_DEVICE`) instead of panicking.
//!
//! `cargo run --release -p emm-cuda --example pool`

use emm_core::mr::{CudaResource, DeviceMemoryResource, PoolResource, StatisticsAdaptor};
use emm_core::Driver;
use emm_cuda::CudaDriver;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = CudaDriver::new()?;
    let stream = gpu.stream_create(true)?;
    let mr = StatisticsAdaptor::new(PoolResource::new(CudaResource::new(gpu)));
    let a = mr.allocate(1 << 20, stream)?; // stream-ordered: usable on `stream`
    mr.deallocate(a, 1 << 20, stream)?; // back to the pool, not to the driver
    let b = mr.allocate(1 << 20, stream)?; // served from the pool
    println!("peak {} bytes", mr.bytes_counter().peak);
    mr.deallocate(b, 1 << 20, stream)?;
    Ok(())
}
