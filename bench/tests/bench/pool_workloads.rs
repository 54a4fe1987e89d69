//! The pool's timings on a real GPU: ignored by default, run by hand on a GPU host.

use std::sync::Arc;

use emm_bench::harness::{self as bench, BenchConfig};
use emm_core::mr::{Backing, CudaResource, PoolOptions, PoolResource};
use emm_core::workloads;
use emm_cuda::CudaDriver;

/// The pool on W1, W2, W3 with each backing, by the harness of `cargo bench -p emm-bench
/// --bench resources`: one JSON line per run. Run on a GPU with
/// `cargo test -p emm-bench --release --test bench -- --ignored --nocapture pool_workloads`.
#[test]
#[ignore = "a timing: run it on a GPU with --ignored --nocapture"]
fn pool_workloads() {
    let Ok(gpu) = CudaDriver::new() else {
        eprintln!("no GPU here");
        return;
    };
    let d = Arc::new(gpu);
    for w in [workloads::w1(), workloads::w2(), workloads::w3()] {
        for (label, backing) in [
            ("pool", Backing::Expandable),
            ("pool(chunks)", Backing::Chunks),
        ] {
            let r = bench::run(
                &*d,
                || {
                    PoolResource::with_options(
                        CudaResource::<CudaDriver>::new(Arc::clone(&d)),
                        PoolOptions::default().backing(backing),
                    )
                },
                label,
                &w,
                &BenchConfig::default(),
            )
            .unwrap();
            println!("{}  held/peak live {:.3}", r.to_json(), r.held_over_live());
        }
    }
}
