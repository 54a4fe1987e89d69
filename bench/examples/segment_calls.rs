//! What an expandable segment costs in driver calls: for each named resource, the four
//! PyTorch traces in `benchmarks/traces` (at their recorded pace) and W1–W3 replayed on the
//! simulated GPU (80 GiB),
//! with peak held over peak live and the calls that map or give back physical memory
//! (`cuMemCreate`, `cuMemMap`, `cuMemUnmap`, `cuMemRelease`) and the events that order the
//! unmaps (`cuEventRecord`, `cuEventQuery`) per 1 000 operations. W1–W3 are counted over one
//! pass after a warm-up pass (the steady state `emm bench` times), with the simulator's
//! virtual time of that pass per operation.
//!
//! `cargo run --release -p emm-bench --example segment_calls -- [RESOURCE,...]`
//! (default `pool,pool-vmm,pool-vmm-tight`)

use std::path::Path;
use std::sync::Arc;

use emm_bench::harness;
use emm_bench::replay::{replay, EventLog, HeldProbe, Pace, ReplayOptions};
use emm_core::mr::named;
use emm_core::workloads;
use emm_core::{DeviceId, Driver, StreamId};
use emm_sim::{CallKind, SimConfig, SimDriver, GIB};

const TRACES: [&str; 4] = [
    "transformer-train",
    "llm-decode",
    "cnn-varsize",
    "finetune-checkpoint",
];

fn sim() -> SimDriver {
    SimDriver::new(
        SimConfig::new(1)
            .memory_per_device(80 * GIB)
            .track_contents(false)
            .track_races(false)
            .record_trace(true),
    )
    .expect("simulated GPU")
}

/// Calls of each kind in `kinds` made since trace position `from`.
fn count(g: &SimDriver, from: usize, kinds: &[CallKind]) -> u64 {
    g.trace()[from..]
        .iter()
        .filter(|e| kinds.contains(&e.call))
        .count() as u64
}

fn row(name: &str, resource: &str, g: &SimDriver, from: usize, ops: usize, held: f64, vns: &str) {
    let per = |kinds: &[CallKind]| 1000.0 * count(g, from, kinds) as f64 / ops.max(1) as f64;
    println!(
        "{resource:<15} {name:<20} {ops:>8} {held:>9.3} {:>9.1} {:>9.1} {:>9.1} {vns:>10}",
        per(&[CallKind::MemMap, CallKind::MemUnmap]),
        per(&[CallKind::MemCreate, CallKind::MemRelease]),
        per(&[CallKind::EventRecord, CallKind::EventQuery]),
    );
}

/// The most bytes `w` has live at once.
fn peak_live(w: &workloads::Workload) -> u64 {
    let (mut live, mut sum, mut peak) = (Vec::new(), 0, 0);
    for op in &w.ops {
        match *op {
            workloads::Op::Alloc(n) => {
                live.push(n);
                sum += n;
                peak = peak.max(sum);
            }
            workloads::Op::Free(j) => sum -= live.swap_remove(j),
        }
    }
    peak
}

fn main() {
    let resources = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "pool,pool-vmm,pool-vmm-tight".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../benchmarks/traces");
    println!(
        "{:<15} {:<20} {:>8} {:>9} {:>9} {:>9} {:>9} {:>10}",
        "resource", "run", "ops", "held/live", "map+unmap", "cr+rel", "ev", "vns/op"
    );
    println!("{:<46}(per 1 000 operations)", "");
    for resource in resources.split(',') {
        for t in TRACES {
            let log = EventLog::from_file(root.join(format!("{t}.pickle.gz"))).expect("trace");
            let g = sim();
            let driver: Arc<dyn Driver> = Arc::new(g.clone());
            let mr = named::build(resource, driver).expect("resource");
            let from = g.trace().len();
            let options = ReplayOptions {
                held: HeldProbe::DriverMemInfo,
                pace: Pace::Recorded,
                ..ReplayOptions::default()
            };
            let r = replay(&log, &*mr, &options).expect("replay");
            assert!(r.failures.is_empty(), "{t}: {r}");
            let held = r.fragmentation().unwrap_or(f64::NAN);
            row(t, resource, &g, from, r.ops(), held, "");
        }
        for (name, w) in
            workloads::NAMES
                .iter()
                .zip([workloads::w1(), workloads::w2(), workloads::w3()])
        {
            let g = sim();
            let driver: Arc<dyn Driver> = Arc::new(g.clone());
            let mr = named::build(resource, driver).expect("resource");
            let s = StreamId::DEFAULT;
            harness::replay_once(&*mr, &w, s, || Ok(())).expect("warm-up");
            let (from, t0) = (g.trace().len(), g.now_ns());
            // Held as the device sees it, read without a driver call (which would cost
            // virtual time).
            let mut held = 0;
            harness::replay_once(&*mr, &w, s, || {
                held = held.max(g.device_memory_used(DeviceId(0)));
                Ok(())
            })
            .expect("pass");
            g.context_synchronize().expect("synchronize");
            let vns = (g.now_ns() - t0) as f64 / w.ops.len().max(1) as f64;
            let vns = format!("{vns:.0}");
            let ratio = held as f64 / peak_live(&w) as f64;
            row(name, resource, &g, from, w.ops.len(), ratio, &vns);
        }
    }
}
