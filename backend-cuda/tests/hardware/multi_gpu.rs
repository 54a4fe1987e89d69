//! Several GPUs (part of the `hardware` test binary): each check runs on a simulated node of
//! two devices and, when this machine has two GPUs or more, on devices 0 and 1; with one GPU
//! or none the CUDA arm is skipped with a line on stderr.
//!
//! Run on a two-GPU machine from the bundle: `bin/emm-cuda-hardware --test-threads=1 multi_gpu`
//! (or `PARTS=multigpu bash run.sh`).

use std::sync::Arc;

use emm_core::contract::{
    get_ipc_handle_via_driver, open_on_device, IpcAccess, IpcHandle, MemoryPointer, SourceInfo,
};
use emm_core::mr::named;
use emm_core::{DeviceId, Driver, StreamId};
use emm_cuda::CudaDriver;
use emm_sim::{SimConfig, SimDriver, GIB};

const MIB: usize = 1 << 20;

/// Runs `check` on a simulated pair of devices and, with two GPUs here, on the GPUs.
fn on_two_devices(check: fn(Arc<dyn Driver>)) {
    let sim = SimDriver::new(SimConfig::new(12).devices(2).memory_per_device(4 * GIB)).unwrap();
    check(Arc::new(sim));
    match CudaDriver::new() {
        Ok(gpu) if gpu.device_count().unwrap_or(0) >= 2 => check(Arc::new(gpu)),
        Ok(_) => eprintln!("one GPU here: the two-GPU CUDA arm is skipped"),
        Err(e) => eprintln!("no GPU here, CUDA arm skipped: {e}"),
    }
}

fn free_on(d: &dyn Driver, ctx: emm_core::ContextId) -> u64 {
    let before = d.current_context().ok();
    d.set_current_context(ctx).unwrap();
    let free = d.mem_get_info().unwrap().free;
    if let Some(b) = before {
        d.set_current_context(b).unwrap();
    }
    free
}

/// A pool built for device 1 grows on device 1 even while device 0 is current (rmm#1405).
fn allocations_land_on_their_device(d: Arc<dyn Driver>) {
    let (c0, c1) = (
        d.primary_context(DeviceId(0)).unwrap(),
        d.primary_context(DeviceId(1)).unwrap(),
    );
    for name in [
        "pool", "pool-vmm", "sharded", "arena", "binning", "async", "cuda",
    ] {
        d.set_current_context(c1).unwrap();
        let r = named::build(name, Arc::clone(&d)).unwrap();
        d.set_current_context(c0).unwrap();
        let (f0, f1) = (free_on(&*d, c0), free_on(&*d, c1));
        let p = r.allocate(256 * MIB, StreamId::DEFAULT).unwrap();
        let (g0, g1) = (free_on(&*d, c0), free_on(&*d, c1));
        assert!(
            f1 - g1 >= 256 * MIB as u64,
            "{name}: device 1 gave {}",
            f1 - g1
        );
        assert!(
            f0.abs_diff(g0) < 64 * MIB as u64,
            "{name}: device 0 moved {}",
            f0.abs_diff(g0)
        );
        assert_eq!(
            d.current_context().unwrap(),
            c0,
            "{name}: current context restored"
        );
        r.deallocate(p, 256 * MIB, StreamId::DEFAULT).unwrap();
    }
}

#[test]
fn multi_gpu_allocations_land_on_their_device() {
    on_two_devices(allocations_land_on_their_device);
}

/// Device 1 reads device 0's pool memory after peer access is enabled (skipped where the
/// pair has no peer access), and copies between the devices either way.
fn peer_access_and_copies(d: Arc<dyn Driver>) {
    let (c0, c1) = (
        d.primary_context(DeviceId(0)).unwrap(),
        d.primary_context(DeviceId(1)).unwrap(),
    );
    d.set_current_context(c0).unwrap();
    let pool0 = named::build("pool", Arc::clone(&d)).unwrap();
    let a = pool0.allocate(4 * MIB, StreamId::DEFAULT).unwrap();
    let bytes: Vec<u8> = (0..4 * MIB).map(|i| (i % 253) as u8).collect();
    d.memcpy_htod(a, &bytes, None).unwrap();
    d.context_synchronize().unwrap();
    d.set_current_context(c1).unwrap();
    let pool1 = named::build("pool", Arc::clone(&d)).unwrap();
    let b = pool1.allocate(4 * MIB, StreamId::DEFAULT).unwrap();
    if d.can_access_peer(DeviceId(1), DeviceId(0)).unwrap() {
        // Enabling twice is "already enabled"; either way access is there after.
        let _ = d.enable_peer_access(c0);
    } else {
        eprintln!("devices 1 and 0 have no peer access: copies only");
    }
    d.memcpy_dtod(b, a, 4 * MIB, None).unwrap();
    d.context_synchronize().unwrap();
    let mut seen = vec![0u8; 4 * MIB];
    d.memcpy_dtoh(&mut seen, b, None).unwrap();
    assert!(seen == bytes, "device 0's bytes arrive on device 1");
    pool1.deallocate(b, 4 * MIB, StreamId::DEFAULT).unwrap();
    d.set_current_context(c0).unwrap();
    pool0.deallocate(a, 4 * MIB, StreamId::DEFAULT).unwrap();
}

#[test]
fn multi_gpu_peer_access_and_copies() {
    on_two_devices(peer_access_and_copies);
}

/// Set in the child process of the IPC test: the handle, as JSON.
const CHILD_ENV: &str = "EMM_MULTI_GPU_IPC_HANDLE";
const IPC_BYTES: usize = 3 * MIB;

fn ipc_pattern() -> Vec<u8> {
    (0..IPC_BYTES).map(|i| (i % 241) as u8 ^ 0x5a).collect()
}

/// The importing side: opens the handle for device 1 (direct with peer access, a staged
/// copy otherwise) and checks the bytes. Runs only in the child the parent test starts.
#[test]
#[ignore = "the child process of multi_gpu_ipc_from_device_0_to_a_process_on_device_1"]
fn multi_gpu_ipc_child() {
    let Ok(json) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut handle: IpcHandle = serde_json::from_str(&json).unwrap();
    let d: Arc<dyn Driver> = Arc::new(CudaDriver::new().unwrap());
    let c1 = d.primary_context(DeviceId(1)).unwrap();
    d.set_current_context(c1).unwrap();
    let staging = named::build("pool", Arc::clone(&d)).unwrap();
    let import = open_on_device(&mut handle, Arc::clone(&d), c1, &staging).unwrap();
    let mut seen = vec![0u8; IPC_BYTES];
    d.memcpy_dtoh(&mut seen, import.ptr(), None).unwrap();
    assert!(
        seen == ipc_pattern(),
        "the exported bytes, via {:?}",
        import.access()
    );
    println!("IPC across devices: {:?}", import.access());
    assert_ne!(import.access(), IpcAccess::SameDevice);
}

#[test]
fn multi_gpu_ipc_from_device_0_to_a_process_on_device_1() {
    let Ok(gpu) = CudaDriver::new() else {
        eprintln!("no GPU here: the IPC test across processes needs two GPUs");
        return;
    };
    if gpu.device_count().unwrap_or(0) < 2 {
        eprintln!("one GPU here: the IPC test across devices is skipped");
        return;
    }
    let d: Arc<dyn Driver> = Arc::new(gpu);
    let c0 = d.primary_context(DeviceId(0)).unwrap();
    d.set_current_context(c0).unwrap();
    let pool = named::build("pool", Arc::clone(&d)).unwrap();
    // One 16 MiB chunk, freed: the two blocks below are carved from it, so the exported
    // block sits at an offset inside its chunk.
    let whole = pool.allocate(16 * MIB, StreamId::DEFAULT).unwrap();
    pool.deallocate(whole, 16 * MIB, StreamId::DEFAULT).unwrap();
    let _first = pool.allocate(5000, StreamId::DEFAULT).unwrap();
    let p = pool.allocate(IPC_BYTES, StreamId::DEFAULT).unwrap();
    d.memcpy_htod(p, &ipc_pattern(), None).unwrap();
    d.context_synchronize().unwrap();
    let source = SourceInfo::of(&*d, DeviceId(0)).unwrap();
    let mem = MemoryPointer::new(c0, p, IPC_BYTES, None);
    let handle = get_ipc_handle_via_driver(&*d, &mem, source).unwrap();
    assert!(handle.offset > 0, "a suballocated pointer inside a chunk");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "multi_gpu::multi_gpu_ipc_child",
            "--include-ignored",
            "--nocapture",
        ])
        .env(CHILD_ENV, serde_json::to_string(&handle).unwrap())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the child failed");
    assert!(
        text.contains("IPC across devices:"),
        "the child ran the check"
    );
}
