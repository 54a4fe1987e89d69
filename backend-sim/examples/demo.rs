//! `cargo xtask demo`: drives the simulated GPU through a scripted workload and prints what
//! happened — virtual time per allocation against what an H100 measured, managed-memory
//! migration, IPC between two processes, and the misuse the simulator catches.
//!
//! Usage: `demo [--seed N]`.

use std::process::ExitCode;
use std::time::Instant;

use emm_core::units::Bytes;
use emm_core::workloads;
use emm_core::{DeviceId, Driver, DriverError, Location, StreamId};
use emm_sim::{SimConfig, SimDriver, GIB};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut seed = 1;
    while let Some(a) = args.next() {
        match (a.as_str(), args.next().map(|v| v.parse::<u64>())) {
            ("--seed", Some(Ok(v))) => seed = v,
            _ => {
                eprintln!("demo: unknown or incomplete argument `{a}`; usage: demo [--seed N]");
                return ExitCode::from(2);
            }
        }
    }
    match run(seed) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(seed: u64) -> Result<(), DriverError> {
    println!("emm demo: a simulated 2-GPU machine (80 GiB each), seed {seed}\n");
    let cfg = SimConfig::new(seed)
        .devices(2)
        .track_contents(false)
        .record_trace(false);

    println!(
        "1. Workload W1 (emm_core::workloads) replayed through the driver; virtual time per op:"
    );
    let w1 = workloads::w1();
    println!("   {}", w1.summary());
    let gpu = SimDriver::new(cfg.clone())
        .map_err(|e| DriverError::new("SimDriver::new", emm_core::CudaCode::INVALID_VALUE, e))?;
    let wall = Instant::now();
    let t0 = gpu.now_ns();
    workloads::replay(
        &w1,
        |size| gpu.mem_alloc(size as usize),
        |p, _| {
            let _ = gpu.mem_free(p);
        },
    )?;
    let sync_ns = (gpu.now_ns() - t0) as f64 / w1.ops.len() as f64;
    let stream = gpu.stream_create(true)?;
    let pool = gpu.device_default_mem_pool(DeviceId(0))?;
    gpu.mem_pool_set_release_threshold(pool, u64::MAX)?;
    let t1 = gpu.now_ns();
    workloads::replay(
        &w1,
        |size| gpu.mem_alloc_async(size as usize, stream),
        |p, _| {
            let _ = gpu.mem_free_async(p, stream);
        },
    )?;
    gpu.stream_synchronize(stream)?;
    let async_ns = (gpu.now_ns() - t1) as f64 / w1.ops.len() as f64;
    println!("   cuMemAlloc/cuMemFree          {sync_ns:>8.0} ns/op   (H100 measured: 7012)");
    println!("   cuMemAllocAsync/cuMemFreeAsync {async_ns:>7.0} ns/op   (H100 measured: 1612)");
    println!(
        "   simulated {} driver calls in {:.0} ms of wall time\n",
        gpu.call_count(),
        wall.elapsed().as_secs_f64() * 1e3
    );

    println!("2. Managed memory on a small device (1 GiB), 2 GiB allocated: oversubscription");
    let small = SimDriver::new(
        SimConfig::new(seed)
            .memory_per_device(GIB)
            .track_contents(false),
    )
    .map_err(|e| DriverError::new("SimDriver::new", emm_core::CudaCode::INVALID_VALUE, e))?;
    let m = small.mem_alloc_managed(2 << 30, true)?;
    small.host_write(m.as_host(), &[1; 4096])?;
    small.device_access(m, 2 << 30, StreamId::DEFAULT, true)?;
    // The last quarter is on the device: move it to the host without faults, then touch the
    // first quarter (evicted to the host) from the device again: it faults back.
    small.mem_prefetch(
        m.offset(3 << 29),
        512 << 20,
        Location::Host,
        StreamId::DEFAULT,
    )?;
    small.device_access(m, 512 << 20, StreamId::DEFAULT, false)?;
    small.stream_synchronize(StreamId::DEFAULT)?;
    let st = small.managed_stats();
    println!(
        "   page faults {}, migrated to device {}, to host {}, evictions {}, prefetched {}",
        st.faults,
        Bytes(st.migrated_to_device),
        Bytes(st.migrated_to_host),
        st.evictions,
        Bytes(st.prefetched)
    );
    println!(
        "   resident on device 0: {}, virtual time {:.1} ms\n",
        Bytes(small.managed_resident(DeviceId(0))),
        small.now_ns() as f64 / 1e6
    );
    small.mem_free(m)?;

    println!("3. IPC: process 0 exports an allocation, process 1 opens it and reads its bytes");
    let tracked = SimDriver::new(SimConfig::new(seed).memory_per_device(GIB))
        .map_err(|e| DriverError::new("SimDriver::new", emm_core::CudaCode::INVALID_VALUE, e))?;
    let other = tracked.process();
    let a = tracked.mem_alloc(1 << 20)?;
    tracked.memcpy_htod(a.offset(4096), b"hello from process 0", None)?;
    let handle = tracked.ipc_get_mem_handle(a)?;
    let opened = other.ipc_open_mem_handle(&handle)?;
    let mut back = [0u8; 20];
    other.memcpy_dtoh(&mut back, opened.offset(4096), None)?;
    println!(
        "   exported {a}, opened as {opened} in process 1, read {:?}\n",
        String::from_utf8_lossy(&back)
    );
    other.ipc_close_mem_handle(opened)?;

    println!("4. Misuse the simulator catches (each call also returns an error where CUDA would):");
    let (s1, s2) = (tracked.stream_create(true)?, tracked.stream_create(true)?);
    tracked.memset_d8(a, 1, 4096, Some(s1))?;
    tracked.memset_d8(a, 2, 4096, Some(s2))?;
    tracked.mem_free(a)?;
    if let Err(e) = tracked.memcpy_dtoh(&mut back, a, None) {
        println!("   returned: {e}");
    }
    if let Err(e) = tracked.mem_free(a) {
        println!("   returned: {e}");
    }
    tracked.stream_destroy(s1)?;
    tracked.stream_destroy(s2)?;
    let report = tracked.report();
    for v in &report.violations {
        println!("   reported: {v}");
    }
    println!(
        "\n   after teardown: {} bytes held, {} violation(s)",
        report.leaked_bytes(),
        report.violations.len()
    );
    Ok(())
}
