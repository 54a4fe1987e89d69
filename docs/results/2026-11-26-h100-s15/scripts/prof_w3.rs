//! Profiling driver (local only).
use emm_core::mr::{
    bench, Backing, CudaResource, DeviceMemoryResource, PoolOptions, PoolResource,
    ShardedPoolResource,
};
use emm_core::{workloads, StreamId};
use emm_sim::{SimConfig, SimDriver};
use std::sync::Arc;
fn main() {
    let which = std::env::args().nth(1).unwrap_or("w3".into());
    let passes: usize = std::env::args()
        .nth(2)
        .map(|s| s.parse().unwrap())
        .unwrap_or(3);
    let wl = match which.as_str() {
        "w1" => workloads::w1(),
        "w2" => workloads::w2(),
        _ => workloads::w3(),
    };
    let config = SimConfig::new(1)
        .track_contents(false)
        .record_trace(false)
        .memory_per_device(80 << 30);
    let driver = Arc::new(SimDriver::new(config).unwrap());
    let options = PoolOptions::default().backing(if std::env::var("VMM").is_ok() {
        Backing::Expandable
    } else {
        Backing::Chunks
    });
    let pool = PoolResource::with_options(CudaResource::<SimDriver>::new(driver), options).unwrap();
    let sharded = ShardedPoolResource::over(pool, 4);
    let pool: &dyn DeviceMemoryResource = if std::env::var("SHARDED").is_ok() {
        &sharded
    } else {
        sharded.shared()
    };
    let enc: Vec<i64> = wl
        .ops
        .iter()
        .map(|o| match *o {
            emm_core::workloads::Op::Alloc(n) => n as i64,
            emm_core::workloads::Op::Free(j) => -(j as i64) - 1,
        })
        .collect();
    let compact = std::env::var("I64").is_ok();
    let run = |pool: &dyn DeviceMemoryResource| {
        if compact {
            let mut live: Vec<(emm_core::DevicePtr, usize)> = Vec::with_capacity(1024);
            for &x in &enc {
                if x > 0 {
                    let p = pool.allocate(x as usize, StreamId::DEFAULT).unwrap();
                    live.push((p, x as usize));
                } else {
                    let (p, n) = live.swap_remove((-x - 1) as usize);
                    pool.deallocate(p, n, StreamId::DEFAULT).unwrap();
                }
            }
        } else {
            bench::replay_once(pool, &wl, StreamId::DEFAULT, || Ok(())).unwrap();
        }
    };
    let mono = std::env::var("MONO").is_ok();
    let shared = sharded.shared();
    let go = |pool: &dyn DeviceMemoryResource| {
        if mono {
            bench::replay(shared, &wl, StreamId::DEFAULT).unwrap();
        } else {
            run(pool)
        }
    };
    go(pool);
    for _ in 0..passes {
        let t = std::time::Instant::now();
        go(pool);
        eprintln!(
            "{:.2} ns/op",
            t.elapsed().as_nanos() as f64 / wl.ops.len() as f64
        );
    }
}
