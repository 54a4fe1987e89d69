//! Driver memory pools: the release threshold, created pools and their lifetime.

use super::*;

#[test]
fn driver_pools_release_above_the_threshold_at_synchronize() {
    let g = gpu();
    let pool = g.device_default_mem_pool(DeviceId(0)).unwrap();
    let s = g.stream_create(true).unwrap();
    let p = g.mem_alloc_async(8 << 20, s).unwrap();
    assert_eq!(g.mem_pool_usage(pool).unwrap().used, 8 << 20);
    g.mem_free_async(p, s).unwrap();
    assert_eq!(g.mem_pool_usage(pool).unwrap().reserved, 8 << 20);
    g.stream_synchronize(s).unwrap();
    assert_eq!(
        g.mem_pool_usage(pool).unwrap().reserved,
        0,
        "threshold 0 releases at sync"
    );
    g.mem_pool_set_release_threshold(pool, u64::MAX).unwrap();
    let p = g.mem_alloc_async(8 << 20, s).unwrap();
    g.mem_free_async(p, s).unwrap();
    g.stream_synchronize(s).unwrap();
    assert_eq!(
        g.mem_pool_usage(pool).unwrap().reserved,
        8 << 20,
        "kept under the threshold"
    );
    g.mem_pool_trim_to(pool, 0).unwrap();
    assert_eq!(g.mem_pool_usage(pool).unwrap().reserved, 0);
}

#[test]
fn created_pools_serve_their_device_and_outlive_destroy_until_freed() {
    let g = SimDriver::new(SimConfig::new(2).devices(2).memory_per_device(GIB)).unwrap();
    let pool = g.mem_pool_create(DeviceId(1)).unwrap();
    let s = g.stream_create(true).unwrap();
    assert_eq!(
        code(g.mem_alloc_from_pool_async(64, pool, s)),
        CudaCode::INVALID_VALUE,
        "stream on device 0"
    );
    g.set_current_context(g.primary_context(DeviceId(1)).unwrap())
        .unwrap();
    let s1 = g.stream_create(true).unwrap();
    let p = g.mem_alloc_from_pool_async(4096, pool, s1).unwrap();
    assert_eq!(g.device_memory_used(DeviceId(1)), 4096);
    g.mem_pool_destroy(pool).unwrap();
    g.memset_d8(p, 1, 4096, Some(s1)).unwrap();
    g.mem_free_async(p, s1).unwrap();
    assert_eq!(g.device_memory_used(DeviceId(1)), 0);
    assert_eq!(
        code(g.mem_pool_destroy(g.device_default_mem_pool(DeviceId(0)).unwrap())),
        CudaCode::INVALID_VALUE
    );
}
