//! The wasm plugin host on arbitrary modules: loading never panics, and a module it accepts
//! serves (or refuses, or is quarantined on) a few requests without panicking; every
//! allocation it hands out keeps its contents, and once they are freed and the resource is
//! dropped the simulated GPU holds nothing.
#![no_main]

use std::sync::Arc;

use emm_core::mr::{CudaResource, DeviceMemoryResource};
use emm_core::{Driver, StreamId};
use emm_sandbox::{PluginLimits, PluginModule, PluginResource};
use emm_sim::{SimConfig, SimDriver, MIB};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Deterministic limits and small ones, so a hostile module fails fast.
    let limits = PluginLimits::default()
        .deadline(None)
        .fuel_per_call(Some(200_000))
        .memory_cap(4 << 20)
        .max_restarts(1);
    let Ok(module) =
        PluginModule::from_bytes("fuzzed", data, limits, b"chunk_bytes=1048576".to_vec())
    else {
        return;
    };
    let Ok(g) = SimDriver::new(SimConfig::new(5).memory_per_device(64 * MIB)) else {
        return;
    };
    let g = Arc::new(g);
    let upstream: Arc<dyn DeviceMemoryResource> =
        Arc::new(CudaResource::<SimDriver>::new(Arc::clone(&g)));
    let r = PluginResource::new(Arc::new(module), upstream);
    let s = StreamId::DEFAULT;
    let mut live = Vec::new();
    for (i, size) in [256usize, 4096, 1000, 1 << 20, 300].into_iter().enumerate() {
        if let Ok(p) = r.allocate(size, s) {
            let fill = vec![i as u8 + 1; size];
            g.memcpy_htod(p, &fill, None)
                .expect("the host checked the answer: it is writable");
            live.push((p, size, i as u8 + 1));
        }
    }
    let _ = r.reset();
    for (p, size, v) in live {
        let mut back = vec![0; size];
        g.memcpy_dtoh(&mut back, p, None).expect("still live");
        assert!(back.iter().all(|&b| b == v), "allocation at {p} corrupted");
        r.deallocate(p, size, s).expect("a live allocation frees");
    }
    drop(r);
    let report = g.report();
    assert!(report.is_clean(), "left behind:\n{report}");
});
