//! Replays the standard workload W1 through a `Context` with the `DefaultManager`, and through
//! the raw driver, on the simulated GPU; prints what the contract layer costs on the host per
//! op and the simulated device time of each.
//!
//! `cargo run --release -p emm-bench --example contract_w1`

use std::sync::Arc;
use std::time::Instant;

use emm_core::contract::Context;
use emm_core::managers::DefaultManager;
use emm_core::{workloads, DeviceId, Driver};
use emm_sim::{SimConfig, SimDriver};

fn gpu() -> Result<Arc<SimDriver>, String> {
    let config = SimConfig::new(1).track_contents(false).record_trace(false);
    Ok(Arc::new(SimDriver::new(config)?))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let w = workloads::w1();
    let ops = w.ops.len() as f64;

    let g = gpu()?;
    let t = Instant::now();
    workloads::replay(
        &w,
        |size| g.mem_alloc(size as usize),
        |p, _| {
            if let Err(e) = g.mem_free(p) {
                eprintln!("free failed: {e}");
            }
        },
    )?;
    let raw = (
        t.elapsed().as_nanos() as f64 / ops,
        g.now_ns(),
        g.call_count(),
    );

    let g = gpu()?;
    let id = g.primary_context(DeviceId(0))?;
    let manager = DefaultManager::new(g.clone(), id);
    let ctx = Context::with_manager(g.clone(), DeviceId(0), Box::new(manager))?;
    ctx.prepare_for_use()?;
    let t = Instant::now();
    workloads::replay(&w, |size| ctx.memalloc(size as usize), |p, _| drop(p))?;
    ctx.reset()?;
    let emm = (
        t.elapsed().as_nanos() as f64 / ops,
        g.now_ns(),
        g.call_count(),
    );

    println!("{}", w.summary());
    println!(
        "raw driver:               {:>7.0} ns/op on the host, {:>8.1} ms simulated, {} driver calls",
        raw.0,
        raw.1 as f64 / 1e6,
        raw.2
    );
    println!(
        "Context + DefaultManager: {:>7.0} ns/op on the host, {:>8.1} ms simulated, {} driver calls",
        emm.0,
        emm.1 as f64 / 1e6,
        emm.2
    );
    Ok(())
}
