//! A cudarc program on emm memory: a kernel compiled at run time with cudarc's NVRTC, launched
//! through cudarc's launch builder on `DeviceVec`s that an emm pool allocated on the same
//! stream, its result checked on the host; then the same kernel many times on fresh emm
//! allocations, to show what the pool costs next to a launch.
//!
//! Needs an NVIDIA GPU and libnvrtc: `cargo run --release -p emm-cuda --example cudarc_kernel`.
//! Without a GPU it says so and exits with status 2.
#![allow(unsafe_code, reason = "a kernel launch through cudarc is unsafe")]

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};
use emm_core::containers::DeviceVec;
use emm_core::mr::{CudaResource, DeviceMemoryResource, PoolResource};
use emm_cuda::cudarc_interop::{adopt_stream, AsCudarc};
use emm_cuda::CudaDriver;

const SAXPY: &str = r#"
extern "C" __global__ void saxpy(float *y, const float *x, float a, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"#;

fn main() {
    if !emm_cuda::driver_present() {
        eprintln!("cudarc_kernel: no NVIDIA driver on this machine");
        std::process::exit(2);
    }
    if let Err(e) = run() {
        eprintln!("cudarc_kernel: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    // cudarc's context and stream, and emm's driver on the same primary context.
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let driver = Arc::new(CudaDriver::new()?);
    let s = adopt_stream(&driver, &stream)?;
    let pool: Arc<dyn DeviceMemoryResource> = Arc::new(PoolResource::new(
        CudaResource::<CudaDriver>::new(Arc::clone(&driver)),
    ));

    let ptx = cudarc::nvrtc::compile_ptx(SAXPY)?;
    let saxpy = ctx.load_module(ptx)?.load_function("saxpy")?;

    let n: u32 = 1 << 20;
    let a = 2.5f32;
    let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let ys: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let x = DeviceVec::from_slice_in(&xs, s, Arc::clone(&pool))?;
    let mut y = DeviceVec::from_slice_in(&ys, s, Arc::clone(&pool))?;
    {
        let xv = x.cudarc(&stream)?;
        let mut yv = y.cudarc_mut(&stream)?;
        let mut launch = stream.launch_builder(&saxpy);
        launch.arg(&mut yv).arg(&xv).arg(&a).arg(&n);
        // SAFETY: saxpy's parameters are (float*, const float*, float, unsigned int), as
        // pushed; both views hold n floats.
        unsafe { launch.launch(LaunchConfig::for_num_elems(n)) }?;
        // cudarc reads emm memory back through the view.
        let got = stream.clone_dtoh(&yv)?;
        let bad = (0..n as usize)
            .filter(|&i| got[i] != a * xs[i] + ys[i])
            .count();
        println!("saxpy on {n} floats in emm memory through cudarc: {bad} wrong");
        if bad != 0 {
            return Err(format!("{bad} of {n} results wrong").into());
        }
    }
    // emm reads the same memory on its own stream: the view ordered its stream after cudarc's.
    let via_emm = y.to_vec(s)?;
    if via_emm
        .iter()
        .zip(&xs)
        .zip(&ys)
        .any(|((g, x), y)| *g != a * x + y)
    {
        return Err("emm read different results than cudarc".into());
    }

    // Fresh allocations every launch, freed on the stream: the pool's cost beside a kernel.
    let rounds = 2000u32;
    let m: u32 = 1 << 16;
    stream.synchronize()?;
    let t = Instant::now();
    for _ in 0..rounds {
        let x = DeviceVec::<f32>::new_in(m as usize, s, Arc::clone(&pool))?;
        let mut y = DeviceVec::<f32>::new_in(m as usize, s, Arc::clone(&pool))?;
        let xv = x.cudarc(&stream)?;
        let mut yv = y.cudarc_mut(&stream)?;
        let mut launch = stream.launch_builder(&saxpy);
        launch.arg(&mut yv).arg(&xv).arg(&a).arg(&m);
        // SAFETY: as above; both views hold m floats.
        unsafe { launch.launch(LaunchConfig::for_num_elems(m)) }?;
    }
    stream.synchronize()?;
    let per = t.elapsed().as_secs_f64() / f64::from(rounds) * 1e6;
    println!("{rounds} rounds of two emm allocations, a launch and two frees: {per:.2} us a round");
    Ok(())
}
