//! Test helpers: the built example plugins, a simulated GPU, managers and resources over it.

#![allow(dead_code, reason = "each test file uses a part")]

use std::path::PathBuf;
use std::sync::Arc;

use emm_core::contract::ManagerTarget;
use emm_core::mr::{CudaResource, DeviceMemoryResource};
use emm_core::{DeviceId, DevicePtr, Driver};
use emm_sandbox::{PluginFactory, PluginLimits, PluginManager, PluginModule};
use emm_sim::{SimConfig, SimDriver};

/// The example plugins, as `cargo xtask wasm` names their files.
pub const EXAMPLES: [&str; 3] = ["first_fit", "buddy", "slab"];

/// The path of a built example plugin. Panics with what to run when it is missing: a test
/// that cannot find its plugin fails, it never skips.
pub fn plugin_path(name: &str) -> PathBuf {
    let dir = std::env::var_os("EMM_PLUGIN_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/wasm"),
        PathBuf::from,
    );
    let path = dir.join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "{} is missing: build the plugins with `cargo xtask wasm` (`cargo xtask test` does it \
         first), or point EMM_PLUGIN_DIR at the folder that holds them",
        path.display()
    );
    path
}

/// A one-device simulated GPU with `memory` bytes, contents tracked.
pub fn gpu(memory: u64) -> Arc<SimDriver> {
    Arc::new(SimDriver::new(SimConfig::new(7).memory_per_device(memory)).expect("sim config"))
}

/// `cuMemAlloc` memory from `g`, as a plugin's upstream.
pub fn upstream(g: &Arc<SimDriver>) -> Arc<dyn DeviceMemoryResource> {
    Arc::new(CudaResource::<SimDriver>::new(Arc::clone(g)))
}

/// The factory of example plugin `name`.
pub fn factory(name: &str, limits: PluginLimits, config: &str) -> PluginFactory {
    PluginFactory::from_file(&plugin_path(name), limits, config.as_bytes().to_vec())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// An initialized manager of example plugin `name` on `g`'s device 0.
pub fn manager(g: &Arc<SimDriver>, name: &str, config: &str) -> PluginManager {
    use emm_core::contract::MemoryManager;
    let driver: Arc<dyn Driver> = g.clone();
    let target = ManagerTarget {
        context: driver.primary_context(DeviceId(0)).expect("context"),
        device: DeviceId(0),
        driver,
    };
    let m = factory(name, PluginLimits::default(), config)
        .create_plugin_manager(&target)
        .unwrap_or_else(|e| panic!("{e}"));
    m.initialize().unwrap_or_else(|e| panic!("{e}"));
    m
}

/// A module from WAT text.
pub fn wat_module(name: &str, wat: &str, limits: PluginLimits) -> Arc<PluginModule> {
    Arc::new(
        PluginModule::from_wat(name, wat, limits, Vec::new()).unwrap_or_else(|e| panic!("{e}")),
    )
}

/// The pattern `seed` gives byte `i`: `seed ^ i`, so it repeats every 256 bytes and is built
/// and compared a period at a time (byte by byte, unoptimized, hundreds of megabytes took
/// seconds).
fn period(seed: u8) -> [u8; 256] {
    std::array::from_fn(|i| seed ^ (i as u8))
}

/// Writes `len` bytes of pattern `seed` at `ptr`.
pub fn fill(g: &SimDriver, ptr: DevicePtr, len: usize, seed: u8) {
    let period = period(seed);
    let mut data = Vec::with_capacity(len);
    while data.len() < len {
        let n = (len - data.len()).min(period.len());
        data.extend_from_slice(&period[..n]);
    }
    g.memcpy_htod(ptr, &data, None).expect("write");
}

/// Whether `len` bytes at `ptr` still hold pattern `seed`.
pub fn holds(g: &SimDriver, ptr: DevicePtr, len: usize, seed: u8) -> bool {
    let period = period(seed);
    let mut back = vec![0; len];
    g.memcpy_dtoh(&mut back, ptr, None).expect("read");
    back.chunks(period.len()).all(|c| c == &period[..c.len()])
}
