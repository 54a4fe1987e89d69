//! Several GPUs on the simulated node: one resource per device context, whose memory lands on
//! its own device whatever context is current when it grows (rmm#1405); peer access before a
//! kernel on one device touches a pool's memory on another; IPC of a suballocated buffer from
//! device 0 opened in a process working on device 1; and the peer-registration cost that a
//! pool removes from `cuMemAlloc` on a peer-enabled node.

use std::sync::Arc;

use emm_core::contract::{
    get_ipc_handle_via_driver, open_on_device, IpcAccess, MemoryPointer, SourceInfo,
};
use emm_core::mr::named;
use emm_core::workloads::{Op, Workload};
use emm_core::{ContextId, DeviceId, Driver, StreamId};
use emm_sim::{SimConfig, SimDriver, GIB};

fn node(devices: u32) -> SimDriver {
    SimDriver::new(SimConfig::new(21).devices(devices).memory_per_device(GIB)).expect("config")
}

fn contexts(g: &SimDriver, n: u32) -> Vec<ContextId> {
    (0..n)
        .map(|d| g.primary_context(DeviceId(d)).unwrap())
        .collect()
}

const RESOURCES: [&str; 6] = ["pool", "pool-vmm", "sharded", "arena", "binning", "cuda"];

#[test]
fn each_device_s_resource_allocates_on_its_device_whatever_is_current() {
    let g = node(4);
    let ctxs = contexts(&g, 4);
    let shared: Arc<dyn Driver> = Arc::new(g.clone());
    for name in RESOURCES {
        // One resource per device context, each built with its context current.
        let resources: Vec<_> = ctxs
            .iter()
            .map(|&c| {
                g.set_current_context(c).unwrap();
                named::build(name, Arc::clone(&shared)).unwrap()
            })
            .collect();
        // Device 0 is current while every device's resource grows.
        g.set_current_context(ctxs[0]).unwrap();
        for (d, r) in resources.iter().enumerate().skip(1) {
            let before: Vec<u64> = (0..4).map(|k| g.device_memory_used(DeviceId(k))).collect();
            let p = r.allocate(64 << 20, StreamId::DEFAULT).unwrap();
            for k in 0..4u32 {
                let grew = g.device_memory_used(DeviceId(k)) > before[k as usize];
                assert_eq!(
                    grew,
                    k as usize == d,
                    "{name}: device {d}'s allocation grew device {k}"
                );
            }
            assert_eq!(
                g.current_context().unwrap(),
                ctxs[0],
                "{name}: current context restored"
            );
            r.deallocate(p, 64 << 20, StreamId::DEFAULT).unwrap();
        }
        drop(resources);
        for k in 0..4 {
            assert_eq!(
                g.device_memory_used(DeviceId(k)),
                0,
                "{name}: device {k} given back"
            );
        }
    }
}

#[test]
fn a_peer_touches_a_pool_s_memory_only_after_access_is_granted() {
    let g = node(2);
    let ctxs = contexts(&g, 2);
    let shared: Arc<dyn Driver> = Arc::new(g.clone());
    g.set_current_context(ctxs[0]).unwrap();
    let pool = named::build("pool", Arc::clone(&shared)).unwrap();
    let p = pool.allocate(4096, StreamId::DEFAULT).unwrap();
    g.set_current_context(ctxs[1]).unwrap();
    assert!(g.can_access_peer(DeviceId(1), DeviceId(0)).unwrap());
    let refused = g.device_access(p, 4096, StreamId::DEFAULT, false);
    assert!(
        refused.is_err() || !g.report().violations.is_empty(),
        "access before enabling"
    );
    g.enable_peer_access(ctxs[0]).unwrap();
    let before = g.report().violations.len();
    g.device_access(p, 4096, StreamId::DEFAULT, true).unwrap();
    g.context_synchronize().unwrap();
    assert_eq!(g.report().violations.len(), before, "{:?}", g.report());
    g.set_current_context(ctxs[0]).unwrap();
    pool.deallocate(p, 4096, StreamId::DEFAULT).unwrap();
}

/// A segment's mapping grants its access itself (peer access enabled between contexts does
/// not reach it), so it grants every device that can reach its own: a kernel on device 1
/// reads and writes a tight pool's memory on device 0, also memory moved into a hole.
#[test]
fn a_peer_touches_a_segment_s_memory_its_mappings_grant_every_peer() {
    let g = node(2);
    let ctxs = contexts(&g, 2);
    let shared: Arc<dyn Driver> = Arc::new(g.clone());
    for name in ["pool-vmm", "pool-vmm-tight"] {
        g.set_current_context(ctxs[0]).unwrap();
        let pool = named::build(name, Arc::clone(&shared)).unwrap();
        let mb = 1 << 20;
        let a = pool.allocate(64 * mb, StreamId::DEFAULT).unwrap();
        let b = pool.allocate(64 * mb, StreamId::DEFAULT).unwrap();
        pool.deallocate(a, 64 * mb, StreamId::DEFAULT).unwrap();
        let c = pool.allocate(96 * mb, StreamId::DEFAULT).unwrap();
        g.set_current_context(ctxs[1]).unwrap();
        for (p, n) in [(b, 64 * mb), (c, 96 * mb)] {
            g.device_access(p, n, StreamId::DEFAULT, true).unwrap();
        }
        g.context_synchronize().unwrap();
        assert!(g.report().violations.is_empty(), "{name}: {}", g.report());
        g.set_current_context(ctxs[0]).unwrap();
        pool.deallocate(b, 64 * mb, StreamId::DEFAULT).unwrap();
        pool.deallocate(c, 96 * mb, StreamId::DEFAULT).unwrap();
    }
}

#[test]
fn peers_without_access_are_refused_peer_access_cleanly() {
    let mut config = SimConfig::new(2).devices(2).memory_per_device(GIB);
    config.peer_access = false;
    let g = SimDriver::new(config).unwrap();
    let ctxs = contexts(&g, 2);
    g.set_current_context(ctxs[1]).unwrap();
    assert!(!g.can_access_peer(DeviceId(1), DeviceId(0)).unwrap());
    assert!(g.enable_peer_access(ctxs[0]).is_err());
}

#[test]
fn a_pool_removes_the_peer_registration_cost_of_cu_mem_alloc() {
    // Cost of one pass of a small list through `cuda` and `pool` on device 0 of a node where
    // every pair of devices has peer access: cuMemAlloc pays per peer, the pool only grows.
    let mut ops = Vec::new();
    for k in 0..200u64 {
        ops.push(Op::Alloc(1000 + 997 * k % 60_000));
        ops.push(Op::Free(0));
    }
    let w = Workload::new("small", ops);
    let cost = |devices: u32, name: &str| {
        let g = node(devices);
        let ctxs = contexts(&g, devices);
        for &c in &ctxs {
            g.set_current_context(c).unwrap();
            for &p in ctxs.iter().filter(|&&p| p != c) {
                g.enable_peer_access(p).unwrap();
            }
        }
        g.set_current_context(ctxs[0]).unwrap();
        let r = named::build(name, Arc::new(g.clone())).unwrap();
        let t0 = g.now_ns();
        crate::common::replay(&r, &w).unwrap();
        g.context_synchronize().unwrap();
        (g.now_ns() - t0) as f64 / w.ops.len() as f64
    };
    let (cuda1, cuda16) = (cost(1, "cuda"), cost(16, "cuda"));
    let (pool1, pool16) = (cost(1, "pool"), cost(16, "pool"));
    assert!(
        cuda16 > 1.5 * cuda1,
        "cudaMalloc grows with peers: {cuda1} → {cuda16}"
    );
    assert!(
        pool16 < cuda16 / 50.0,
        "the pool removes it: {pool16} against {cuda16}"
    );
    assert!(pool1 <= pool16);
}

/// Exports 1 MiB suballocated at an offset inside a pool on device 0 of process A, filled with
/// a pattern; opens it in process B for device 1 with `open_on_device`; checks the bytes.
fn ipc_across_devices(peer_access: bool) -> IpcAccess {
    let mut config = SimConfig::new(4).devices(2).memory_per_device(GIB);
    config.peer_access = peer_access;
    let a = SimDriver::new(config).unwrap();
    let a_ctx = a.primary_context(DeviceId(0)).unwrap();
    a.set_current_context(a_ctx).unwrap();
    let pool = named::build("pool", Arc::new(a.clone())).unwrap();
    let _before = pool.allocate(3000, StreamId::DEFAULT).unwrap();
    let n = 1 << 20;
    let p = pool.allocate(n, StreamId::DEFAULT).unwrap();
    let pattern: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
    a.memcpy_htod(p, &pattern, None).unwrap();
    // The exporter's writes complete before another process reads (as a real exporter syncs
    // before sending the handle).
    a.context_synchronize().unwrap();
    let source = SourceInfo::of(&a, DeviceId(0)).unwrap();
    let mut handle =
        get_ipc_handle_via_driver(&a, &MemoryPointer::new(a_ctx, p, n, None), source).unwrap();
    assert!(
        handle.offset > 0,
        "suballocated: the pointer is inside a chunk"
    );

    let b = a.process();
    let b_driver: Arc<dyn Driver> = Arc::new(b.clone());
    let b_ctx = b.primary_context(DeviceId(1)).unwrap();
    b.set_current_context(b_ctx).unwrap();
    let staging = named::build("pool", Arc::clone(&b_driver)).unwrap();
    let import = open_on_device(&mut handle, Arc::clone(&b_driver), b_ctx, &staging).unwrap();
    let mut seen = vec![0u8; n];
    b.memcpy_dtoh(&mut seen, import.ptr(), None).unwrap();
    assert!(seen == pattern, "the bytes arrive intact");
    b.device_access(import.ptr(), n, StreamId::DEFAULT, false)
        .unwrap();
    b.context_synchronize().unwrap();
    assert!(b.report().violations.is_empty(), "{:?}", b.report());
    let access = import.access();
    drop(import);
    if handle.is_open() {
        handle.close().unwrap();
    }
    pool.deallocate(p, n, StreamId::DEFAULT).unwrap();
    access
}

#[test]
fn ipc_from_device_0_opens_on_device_1_directly_with_peer_access() {
    assert_eq!(ipc_across_devices(true), IpcAccess::Peer);
}

#[test]
fn ipc_from_device_0_opens_on_device_1_as_a_staged_copy_without_peer_access() {
    assert_eq!(ipc_across_devices(false), IpcAccess::Staged);
}
