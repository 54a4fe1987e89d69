//! What a host's CPU charges the pool's fast path, for comparing figures taken on different
//! machines: an uncontended `std::sync::Mutex` lock + unlock, the same with a one-atomic spin
//! lock, the replay harness alone (W1, W3 with a bump "allocator"), and `PoolResource` with
//! chunks over the simulated GPU (no driver call in the timed passes), five passes each.
//!
//! `cargo run --release -p emm-bench --example host_floor`; the GPU bundle carries the binary.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use emm_bench::harness as bench;
use emm_core::mr::{Backing, CudaResource, PoolOptions, PoolResource};
use emm_core::{workloads, StreamId};
use emm_sim::{SimConfig, SimDriver};

fn per_op(start: Instant, ops: u64) -> f64 {
    start.elapsed().as_nanos() as f64 / ops as f64
}

fn main() {
    const PAIRS: u64 = 20_000_000;
    let m = Mutex::new(0u64);
    let t = Instant::now();
    for i in 0..PAIRS {
        *m.lock().unwrap() += i;
    }
    println!("std Mutex lock + unlock: {:.2} ns", per_op(t, PAIRS));

    let locked = AtomicBool::new(false);
    let mut v = 0u64;
    let t = Instant::now();
    for i in 0..PAIRS {
        while locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {}
        v = std::hint::black_box(v + i);
        locked.store(false, Ordering::Release);
    }
    println!("spin lock + unlock: {:.2} ns", per_op(t, PAIRS));

    for wl in [workloads::w1(), workloads::w3()] {
        let ops = wl.ops.len() as u64;
        let mut next = 0u64;
        let t = Instant::now();
        for _ in 0..5 {
            workloads::replay::<u64, ()>(
                &wl,
                |size| {
                    next += size;
                    Ok(next)
                },
                |h, _| {
                    std::hint::black_box(h);
                },
            )
            .unwrap();
        }
        println!("{} harness alone: {:.2} ns/op", wl.name, per_op(t, 5 * ops));

        let config = SimConfig::new(1)
            .track_contents(false)
            .record_trace(false)
            .memory_per_device(80 << 30);
        let driver = Arc::new(SimDriver::new(config).unwrap());
        let options = PoolOptions::default().backing(Backing::Chunks);
        let pool =
            PoolResource::with_options(CudaResource::<SimDriver>::new(driver), options).unwrap();
        for pass in 0..6 {
            let t = Instant::now();
            bench::replay_once(&pool, &wl, StreamId::DEFAULT, || Ok(())).unwrap();
            // Pass 0 grows the pool: a warm-up, as in the peers' protocol.
            if pass > 0 {
                println!(
                    "{} PoolResource (chunks): {:.2} ns/op",
                    wl.name,
                    per_op(t, ops)
                );
            }
        }
    }
}
