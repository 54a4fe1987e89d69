//! Uses emm's CUDA driver beside cudarc in one binary whose cudarc features it chose itself.

use emm_core::Driver;

fn main() {
    if !emm_cuda::driver_present() {
        println!("no CUDA driver on this machine");
        return;
    }
    match emm_cuda::CudaDriver::new() {
        Ok(driver) => match driver.device_count() {
            Ok(n) => println!("emm sees {n} CUDA device(s)"),
            Err(e) => println!("emm cannot count the CUDA devices: {e}"),
        },
        Err(e) => println!("emm cannot use the CUDA driver: {e}"),
    }
    // cudarc's own API, from the same build: the bindings this binary picked.
    println!("cudarc driver bindings: {}", cudarc::driver::sys::CUDA_VERSION);
}
