//! Regressions for the out-of-memory path of `ShardedPoolResource` and `ArenaResource`, found
//! by the loom model check (tests/loom_sharded.rs, `cargo xtask loom`), and of
//! `BinningResource`, which had the same pattern: when a request fails, the resource gathers
//! every shard's (bin's) free chunks with `release` and tries once more. It used
//! to try again only when its own `release` gave something back; but memory can reach the
//! upstream between the failure and that `release` — another thread's `release` gave it back
//! (what loom found), another user of the device freed it — and the request then failed with
//! the memory free. Here that moment is made deterministic: the upstream's other user frees
//! its memory right after the pool's second failed attempt. (With threads, only loom reaches
//! that moment reliably. The arena's other bug loom found, a superblock its `release` held
//! outside both locks, has only the loom regression.)

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use emm_core::mr::{
    ArenaResource, BinningResource, DeviceMemoryResource, MrError, MrResult, PoolResource,
    ShardedPoolResource,
};
use emm_core::{DevicePtr, Driver, StreamId};
use emm_sim::{SimConfig, SimDriver, MIB};

const S: StreamId = StreamId::DEFAULT;

/// `limit` bytes shared with another user who holds `hog` of them, and frees them when the
/// pool's request has failed twice (its first try and its exact-size retry).
struct Shared {
    driver: SimDriver,
    limit: u64,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    chunks: BTreeMap<u64, u64>,
    next: u64,
    hog: u64,
    failures: u32,
}

impl Shared {
    fn new(limit: u64, hog: u64) -> Arc<Self> {
        Arc::new(Shared {
            driver: SimDriver::new(SimConfig::new(3)).expect("simulator"),
            limit,
            state: Mutex::new(State {
                next: 1 << 32,
                hog,
                ..State::default()
            }),
        })
    }

    fn used(&self) -> u64 {
        self.state.lock().unwrap().chunks.values().sum()
    }
}

impl DeviceMemoryResource for Shared {
    fn name(&self) -> &'static str {
        "Shared"
    }

    fn allocate(&self, bytes: usize, _stream: StreamId) -> MrResult<DevicePtr> {
        let mut st = self.state.lock().unwrap();
        let n = bytes as u64;
        let used: u64 = st.chunks.values().sum::<u64>() + st.hog;
        if used + n > self.limit {
            st.failures += 1;
            if st.failures == 2 {
                // The other user frees its memory after this failure is reported.
                st.hog = 0;
            }
            return Err(MrError::OutOfMemory {
                resource: "Shared",
                requested: n,
                available: Some(self.limit - used),
            });
        }
        let p = st.next;
        st.next += n.next_multiple_of(256);
        st.chunks.insert(p, n);
        Ok(DevicePtr(p))
    }

    fn deallocate(&self, ptr: DevicePtr, bytes: usize, _stream: StreamId) -> MrResult<()> {
        let back = self.state.lock().unwrap().chunks.remove(&ptr.0);
        assert_eq!(back, Some(bytes as u64), "chunk {ptr} given back twice");
        Ok(())
    }

    fn driver(&self) -> &dyn Driver {
        &self.driver
    }
}

/// Allocates `bytes` from a full upstream whose other user frees everything after the pool's
/// second failure: the resource's retry after `release` must take it.
fn allocates_after_the_upstream_frees<R: DeviceMemoryResource>(
    make: impl FnOnce(Arc<Shared>) -> R,
    limit: u64,
    bytes: usize,
) {
    let up = Shared::new(limit, limit);
    let mr = make(Arc::clone(&up));
    let p = mr
        .allocate(bytes, S)
        .unwrap_or_else(|e| panic!("{}: {bytes} bytes with the upstream free: {e}", mr.name()));
    assert!(up.used() >= bytes as u64);
    mr.deallocate(p, bytes, S).unwrap();
    mr.release().unwrap();
    assert_eq!(up.used(), 0);
}

#[test]
fn sharded_pool_retries_after_release_gives_nothing_back() {
    let sharded = |up| ShardedPoolResource::over(PoolResource::new(up), 4);
    // Served by a shard, and above the shards' maximum (the shared pool directly).
    allocates_after_the_upstream_frees(sharded, 2 * MIB, 1000);
    allocates_after_the_upstream_frees(sharded, 6 * MIB, 5 << 20);
}

#[test]
fn arena_retries_after_release_gives_nothing_back() {
    allocates_after_the_upstream_frees(|up| ArenaResource::with_arenas(up, 2), 2 * MIB, 1000);
    allocates_after_the_upstream_frees(|up| ArenaResource::with_arenas(up, 2), 6 * MIB, 5 << 20);
}

#[test]
fn binning_retries_after_release_gives_nothing_back() {
    let binning = |up| BinningResource::with_range(PoolResource::new(up), 8, 20).unwrap();
    // Served by a bin, and above the bins (the upstream pool directly).
    allocates_after_the_upstream_frees(binning, 2 * MIB, 1000);
    allocates_after_the_upstream_frees(binning, 6 * MIB, 5 << 20);
}
