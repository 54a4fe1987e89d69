//! The example plugins (first-fit, buddy, slab) against the contract's rules, through the
//! sandbox, on the simulated GPU: alignment, no overlap, contents intact, frees, typed out of
//! memory, reset, defer_cleanup, concurrent threads, IPC offsets, loading by path.

use crate::common;

use std::sync::Arc;

use common::{fill, gpu, holds, manager, plugin_path, EXAMPLES};
use emm_core::contract::selection::{create_manager, current_factory_with_env};
use emm_core::contract::{EmmError, ManagerTarget, MemoryManager, MemoryPointer};
use emm_core::mr::{DeviceMemoryResource, MrError};
use emm_core::workloads::SplitMix64;
use emm_core::{DeviceId, DevicePtr, Driver, StreamId};
use emm_sim::{GIB, MIB};

/// emm's contract (plugins/ABI.md): "memalloc … returns at least the requested bytes, 256-byte aligned … never
/// overlapping another live allocation; writes to one allocation never change another."
#[test]
fn allocations_are_aligned_disjoint_and_keep_their_contents() {
    for name in EXAMPLES {
        let g = gpu(2 * GIB);
        let m = manager(&g, name, "chunk_bytes=8388608");
        let mut rng = SplitMix64::new(42);
        let mut live: Vec<(MemoryPointer, u8)> = Vec::new();
        for step in 0..600u32 {
            if live.len() > 40 && rng.below(3) == 0 {
                let j = rng.below(live.len() as u64) as usize;
                let (p, seed) = live.swap_remove(j);
                assert!(
                    holds(&g, p.device_ptr(), p.size(), seed),
                    "{name}: contents"
                );
                continue;
            }
            // Mostly small, sometimes above the slab classes and the chunk size.
            let size = match rng.below(20) {
                0 => rng.range(1, 24 * MIB) as usize,
                1..=4 => rng.range(1, 2 * MIB) as usize,
                _ => rng.range(1, 64 * 1024) as usize,
            };
            let p = m.memalloc(size).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(p.device_ptr().0 % 256, 0, "{name}: alignment");
            assert!(p.size() >= size);
            let seed = step as u8;
            fill(&g, p.device_ptr(), size, seed);
            live.push((p, seed));
        }
        let mut spans: Vec<(u64, u64)> = live
            .iter()
            .map(|(p, _)| (p.device_ptr().0, p.device_ptr().0 + p.size() as u64))
            .collect();
        spans.sort_unstable();
        for w in spans.windows(2) {
            assert!(
                w[0].1 <= w[1].0,
                "{name}: {:#x?} overlaps {:#x?}",
                w[0],
                w[1]
            );
        }
        for (p, seed) in &live {
            assert!(
                holds(&g, p.device_ptr(), p.size(), *seed),
                "{name}: contents"
            );
        }
        let stats = m.resource().stats().unwrap();
        assert_eq!(stats.live, live.len(), "{name}");
        // What the manager says it holds is the host's count of the plugin's chunks, which
        // the driver counts used.
        assert_eq!(m.held_bytes(), Some(stats.held_bytes), "{name}");
        assert!(
            stats.held_bytes >= stats.live_bytes
                && g.device_memory_used(emm_core::DeviceId(0)) >= stats.held_bytes,
            "{name}: {stats:?}"
        );
        assert!(stats.guest.is_some(), "{name} reports its own counters");
        drop(live);
        m.take_device_failures().unwrap();
        assert!(
            m.resource().breaches().is_empty(),
            "{name}: {:?}",
            m.resource().breaches()
        );
        drop(m);
        let report = g.report();
        assert!(
            report.is_clean(),
            "{name}: teardown leaves nothing: {report}"
        );
    }
}

/// emm's contract (plugins/ABI.md): "Out of memory is an error, never a panic, and leaves the manager usable; after
/// frees, the same request succeeds."
#[test]
fn out_of_memory_is_typed_and_the_same_request_succeeds_after_frees() {
    for name in EXAMPLES {
        let g = gpu(256 * MIB);
        let m = manager(&g, name, "chunk_bytes=16777216");
        let mut held = Vec::new();
        let e = loop {
            match m.memalloc(24 * MIB as usize) {
                Ok(p) => held.push(p),
                Err(e) => break e,
            }
            assert!(held.len() < 64, "{name}: never ran out");
        };
        assert!(e.is_out_of_memory(), "{name}: {e}");
        assert!(e.to_string().contains("out of memory"), "{name}: {e}");
        assert!(m.memalloc(usize::MAX).unwrap_err().is_out_of_memory());
        let e = m.memalloc(0).unwrap_err();
        assert!(matches!(e, EmmError::InvalidArgument { .. }), "{name}: {e}");
        held.pop();
        let p = m
            .memalloc(24 * MIB as usize)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        fill(&g, p.device_ptr(), 4096, 9);
        assert!(holds(&g, p.device_ptr(), 4096, 9));
        assert!(m.resource().breaches().is_empty(), "{name}");
    }
}

/// Numba's reference: reset "clears up all memory allocated in this context" that the manager holds;
/// memory still in use stays valid.
#[test]
fn reset_returns_empty_chunks_and_keeps_live_ones() {
    for name in EXAMPLES {
        let g = gpu(GIB);
        let m = manager(&g, name, "chunk_bytes=4194304");
        let keep = m.memalloc(1000).unwrap();
        fill(&g, keep.device_ptr(), 1000, 3);
        let others: Vec<_> = (0..40).map(|_| m.memalloc(300_000).unwrap()).collect();
        let peak = g.device_memory_used(DeviceId(0));
        drop(others);
        m.reset().unwrap_or_else(|e| panic!("{name}: {e}"));
        let after = g.device_memory_used(DeviceId(0));
        assert!(
            after < peak,
            "{name}: reset returned nothing ({after} of {peak})"
        );
        assert!(after > 0, "{name}: the live allocation's chunk stays");
        assert!(holds(&g, keep.device_ptr(), 1000, 3), "{name}");
        drop(keep);
        m.reset().unwrap();
        assert_eq!(g.device_memory_used(DeviceId(0)), 0, "{name}");
    }
}

/// `emm_trim(keep)` reaches each plugin through the SDK: empty chunks go back until at most
/// `keep` bytes of them stay, chunks with live allocations stay, and what trim(0) leaves a
/// reset cannot shrink further.
#[test]
fn trim_returns_empty_chunks_down_to_what_it_keeps() {
    const KEEP: u64 = 4 * MIB;
    for name in EXAMPLES {
        let g = gpu(GIB);
        let m = manager(&g, name, "chunk_bytes=4194304");
        let used = || g.device_memory_used(DeviceId(0));
        let live = m.memalloc(1000).unwrap();
        fill(&g, live.device_ptr(), 1000, 7);
        drop(
            (0..40)
                .map(|_| m.memalloc(300_000).unwrap())
                .collect::<Vec<_>>(),
        );
        let before = used();
        m.resource().trim(KEEP).unwrap();
        let kept = used();
        m.resource().trim(0).unwrap();
        let least = used();
        m.reset().unwrap();
        assert_eq!(
            used(),
            least,
            "{name}: trim(0) left empty chunks a reset returned"
        );
        assert!(least < before && least > 0, "{name}: {before} → {least}");
        assert!(
            kept - least <= KEEP,
            "{name}: trim({KEEP}) kept {} empty bytes",
            kept - least
        );
        assert!(holds(&g, live.device_ptr(), 1000, 7), "{name}");
        assert!(m.resource().breaches().is_empty(), "{name}");
    }
}

/// emm's contract (plugins/ABI.md): "Concurrent use from many threads never hands out overlapping memory."
#[test]
fn concurrent_threads_never_share_memory() {
    for name in EXAMPLES {
        let g = gpu(2 * GIB);
        let m = Arc::new(manager(&g, name, "chunk_bytes=8388608"));
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                let (m, g) = (Arc::clone(&m), Arc::clone(&g));
                std::thread::spawn(move || {
                    let mut rng = SplitMix64::new(u64::from(t));
                    let mut mine: Vec<(MemoryPointer, u8)> = Vec::new();
                    for i in 0..300u32 {
                        let size = rng.range(1, 200_000) as usize;
                        let p = m.memalloc(size).expect("memalloc");
                        let seed = (i as u8) ^ (t << 6);
                        fill(&g, p.device_ptr(), size.min(512), seed);
                        mine.push((p, seed));
                        if rng.below(2) == 0 {
                            let j = rng.below(mine.len() as u64) as usize;
                            let (p, seed) = mine.swap_remove(j);
                            assert!(holds(&g, p.device_ptr(), p.size().min(512), seed));
                        }
                    }
                    for (p, seed) in &mine {
                        assert!(holds(&g, p.device_ptr(), p.size().min(512), *seed));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("a thread failed");
        }
        assert!(m.resource().breaches().is_empty(), "{name}");
        assert!(g.report().violations.is_empty(), "{name}: {}", g.report());
    }
}

/// A user's bad free changes nothing and does not quarantine the plugin.
#[test]
fn bad_frees_are_refused_and_the_plugin_stays_up() {
    let g = gpu(GIB);
    let m = manager(&g, "first_fit", "");
    let r = m.resource();
    let p = r.allocate(4096, StreamId::DEFAULT).unwrap();
    let invalid = |res: Result<(), MrError>| matches!(res, Err(MrError::InvalidFree { .. }));
    assert!(
        invalid(r.deallocate(p, 4095, StreamId::DEFAULT)),
        "wrong size"
    );
    assert!(
        invalid(r.deallocate(p.offset(256), 4096, StreamId::DEFAULT)),
        "interior"
    );
    assert!(
        invalid(r.deallocate(DevicePtr(0xdead_0000), 16, StreamId::DEFAULT)),
        "foreign"
    );
    r.deallocate(p, 4096, StreamId::DEFAULT).unwrap();
    let e = r.deallocate(p, 4096, StreamId::DEFAULT).unwrap_err();
    assert!(e.to_string().contains("already freed"), "{e}");
    assert_eq!(r.allocate(0, StreamId::DEFAULT).unwrap(), DevicePtr::NULL);
    assert!(r.quarantined().is_none());
    assert!(r.breaches().is_empty());
    assert!(r.allocate(4096, StreamId::DEFAULT).is_ok());
}

/// An alignment that is not a power of two is the caller's mistake: the host refuses it before
/// the plugin sees it, naming the alignment, with nothing allocated and no breach.
#[test]
fn an_alignment_that_is_not_a_power_of_two_is_refused_before_the_plugin() {
    let g = gpu(GIB);
    let m = manager(&g, "first_fit", "");
    let r = m.resource();
    let held = r.stats().unwrap().held_bytes;
    for alignment in [0, 3, 768, usize::MAX] {
        match r.allocate_aligned(4096, alignment, StreamId::DEFAULT) {
            Err(MrError::InvalidArgument { reason, .. }) => {
                assert!(reason.contains(&alignment.to_string()), "{reason}");
            }
            other => panic!("alignment {alignment}: {other:?}"),
        }
    }
    let stats = r.stats().unwrap();
    assert_eq!((stats.live, stats.held_bytes), (0, held));
    assert!(r.quarantined().is_none() && r.breaches().is_empty());
    // A power of two reaches the plugin, which declines what first-fit does not offer.
    assert!(matches!(
        r.allocate_aligned(4096, 4096, StreamId::DEFAULT),
        Err(MrError::UnsupportedAlignment {
            alignment: 4096,
            ..
        })
    ));
}

/// `defer_cleanup` reaches the plugin: the slab keeps empty slabs while a guard lives and
/// returns them when the last guard goes.
#[test]
fn defer_cleanup_scopes_reach_the_plugin() {
    let g = gpu(GIB);
    let m = manager(&g, "slab", "slab_bytes=1048576");
    // Three slabs of the 64 KiB class (16 slots each).
    let ptrs: Vec<_> = (0..48).map(|_| m.memalloc(60_000).unwrap()).collect();
    let full = g.device_memory_used(DeviceId(0));
    let outer = m.defer_cleanup();
    let inner = m.defer_cleanup();
    drop(ptrs);
    assert_eq!(g.device_memory_used(DeviceId(0)), full, "deferred");
    drop(inner);
    assert_eq!(g.device_memory_used(DeviceId(0)), full, "still deferred");
    drop(outer);
    let after = g.device_memory_used(DeviceId(0));
    assert!(after < full, "the last guard returns the empty slabs");
    assert!(after > 0, "one empty slab per class stays");
}

/// Numba's reference: "IpcHandle offset for suballocators": the offset inside the driver allocation.
#[test]
fn ipc_handles_carry_the_offset_inside_the_chunk() {
    let g = gpu(GIB);
    let m = manager(&g, "first_fit", "chunk_bytes=1048576");
    let a = m.memalloc(1000).unwrap();
    let b = m.memalloc(1000).unwrap();
    let h = m.get_ipc_handle(&b).unwrap();
    let (base, _) = g.mem_get_address_range(b.device_ptr()).unwrap();
    assert_eq!(h.offset, b.device_ptr().0 - base.0);
    assert_eq!(h.offset, a.device_ptr().0 - base.0 + 1024);
}

/// `EMM_MEMORY_MANAGER=path/to/plugin.wasm` resolves through the loader the sandbox installs.
#[test]
fn a_wasm_path_loads_through_the_selection_hook() {
    emm_sandbox::install_loader();
    let path = plugin_path("buddy");
    let text = path.to_string_lossy().into_owned();
    let factory = current_factory_with_env(Some(&text)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(factory.name(), "buddy");
    let g = gpu(GIB);
    let driver: Arc<dyn Driver> = g.clone();
    let target = ManagerTarget {
        context: driver.primary_context(DeviceId(0)).unwrap(),
        device: DeviceId(0),
        driver,
    };
    let m = create_manager(&*factory, &target).unwrap();
    m.initialize().unwrap();
    assert_eq!(m.name(), "wasm:buddy");
    let p = m.memalloc(5000).unwrap();
    fill(&g, p.device_ptr(), 5000, 1);
    assert!(holds(&g, p.device_ptr(), 5000, 1));
    drop(p);
    drop(m);
    assert!(g.report().is_clean(), "{}", g.report());
    let Err(missing) = current_factory_with_env(Some("/nonexistent/none.wasm")) else {
        panic!("a missing file loaded");
    };
    assert!(
        missing.to_string().contains("cannot read plugin"),
        "{missing}"
    );
}
