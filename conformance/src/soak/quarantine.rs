//! The soak's hostile plugin: it answers well for a while, then breaks a rule; the host must
//! quarantine it, keep its good allocations intact and return its chunk.

use std::sync::Arc;

use emm_core::attribution::CallerScope;
use emm_core::mr::{CudaResource, DeviceMemoryResource};
use emm_core::{DeviceId, Driver, StreamId};
use emm_sandbox::{PluginLimits, PluginModule, PluginResource};
use emm_sim::SimDriver;

use crate::sut::HARNESS;

/// A plugin that answers well for three allocations, then answers an overlap.
const HOSTILE: &str = r#"(module
  (import "emm" "upstream_alloc" (func $up (param i64 i64) (result i32)))
  (memory (export "memory") 1)
  (global $chunk (mut i32) (i32.const 0))
  (global $n (mut i64) (i64.const 0))
  (func (export "emm_abi_version") (result i32) (i32.const 1))
  (func (export "emm_buffer") (param i32) (result i32) (i32.const 1024))
  (func (export "emm_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "emm_alloc") (param i64 i64 i64) (result i64)
    (if (i32.eqz (global.get $chunk)) (then (global.set $chunk (call $up (i64.const 1048576) (i64.const 256)))))
    (global.set $n (i64.add (global.get $n) (i64.const 1)))
    (i64.or (i64.shl (i64.extend_i32_u (global.get $chunk)) (i64.const 40))
            (i64.mul (i64.rem_u (global.get $n) (i64.const 4)) (i64.const 4096))))
  (func (export "emm_free") (param i32 i64 i64 i64) (result i32) (i32.const 0)))"#;

/// [`HOSTILE`], compiled once per soak.
pub(super) fn hostile() -> Result<Arc<PluginModule>, String> {
    let limits = PluginLimits::default().deadline(None);
    PluginModule::from_wat("hostile", HOSTILE, limits, Vec::new())
        .map(Arc::new)
        .map_err(|e| format!("the hostile plugin does not load: {e}"))
}

/// Runs [`HOSTILE`] on `sim`, allocates until it is quarantined; checks the good
/// allocations survive and the device memory comes back once they are freed.
pub(super) fn quarantine_round(
    module: &Arc<PluginModule>,
    sim: &Arc<SimDriver>,
    failures: &mut Vec<String>,
) -> bool {
    let before = sim.device_memory_used(DeviceId(0));
    let module = Arc::clone(module);
    let upstream: Arc<dyn DeviceMemoryResource> =
        Arc::new(CudaResource::<SimDriver>::new(Arc::clone(sim)));
    let r = PluginResource::new(module, upstream);
    let s = StreamId::DEFAULT;
    let mut good = Vec::new();
    let _h = CallerScope::enter(HARNESS);
    for i in 0..8u8 {
        match r.allocate(4096, s) {
            Ok(p) => {
                let _ = sim.memcpy_htod(p, &[i | 0x80; 4096], None);
                good.push((p, i | 0x80));
            }
            Err(_) => break,
        }
    }
    let quarantined = r.quarantined().is_some();
    if !quarantined {
        failures.push("the hostile plugin answered an overlap and was not quarantined".into());
    }
    for (p, v) in good {
        let mut back = vec![0u8; 4096];
        if sim.memcpy_dtoh(&mut back, p, None).is_err() || back.iter().any(|&b| b != v) {
            failures.push(format!(
                "a quarantined plugin's allocation at {p} lost its contents"
            ));
        }
        if let Err(e) = r.deallocate(p, 4096, s) {
            failures.push(format!("freeing a quarantined plugin's allocation: {e}"));
        }
    }
    drop(r);
    let after = sim.device_memory_used(DeviceId(0));
    if after != before {
        failures.push(format!(
            "a quarantined plugin kept {} bytes",
            after.saturating_sub(before)
        ));
    }
    quarantined
}
