//! `ThreadSafeAdaptor`: a single-threaded `LocalMemoryResource` (here a small per-stream cache
//! of freed blocks, written with `&mut self` and no locks) shared by four threads.

use crate::adaptor_suite;

use std::collections::HashMap;
use std::sync::Arc;

use adaptor_suite::{assert_released, check_all, Alignment};
use emm_core::mr::{
    DeviceMemoryResource, LocalMemoryResource, MrError, MrResult, ThreadSafeAdaptor,
};
use emm_core::{DevicePtr, Driver, StreamId};
use emm_sim::{SimConfig, SimDriver};

/// Keeps freed blocks per (stream, size) and hands them out again on the same stream only,
/// which the stream rules allow without an event. Not thread safe: plain maps, `&mut self`.
struct StreamCache {
    driver: Arc<SimDriver>,
    free: HashMap<(StreamId, usize), Vec<DevicePtr>>,
    live: HashMap<DevicePtr, usize>,
    hits: usize,
}

impl StreamCache {
    fn new(driver: SimDriver) -> Self {
        StreamCache {
            driver: Arc::new(driver),
            free: HashMap::new(),
            live: HashMap::new(),
            hits: 0,
        }
    }
}

impl LocalMemoryResource for StreamCache {
    fn name(&self) -> &'static str {
        "StreamCache"
    }
    fn allocate(&mut self, bytes: usize, stream: StreamId) -> MrResult<DevicePtr> {
        if bytes == 0 {
            return Ok(DevicePtr::NULL);
        }
        let ptr = match self.free.get_mut(&(stream, bytes)).and_then(Vec::pop) {
            Some(p) => {
                self.hits += 1;
                p
            }
            None => self.driver.mem_alloc(bytes).map_err(|e| {
                if e.is_out_of_memory() {
                    MrError::OutOfMemory {
                        resource: "StreamCache",
                        requested: bytes as u64,
                        available: None,
                    }
                } else {
                    MrError::Driver(e)
                }
            })?,
        };
        self.live.insert(ptr, bytes);
        Ok(ptr)
    }
    fn deallocate(&mut self, ptr: DevicePtr, bytes: usize, stream: StreamId) -> MrResult<()> {
        if ptr == DevicePtr::NULL && bytes == 0 {
            return Ok(());
        }
        if self.live.get(&ptr) != Some(&bytes) {
            return Err(MrError::InvalidFree {
                resource: "StreamCache",
                ptr,
                bytes: bytes as u64,
                reason: "not a live allocation of this size".to_string(),
            });
        }
        self.live.remove(&ptr);
        self.free.entry((stream, bytes)).or_default().push(ptr);
        Ok(())
    }
    fn shared_driver(&self) -> Arc<dyn Driver> {
        self.driver.clone()
    }
}

impl Drop for StreamCache {
    fn drop(&mut self) {
        for p in self.free.drain().flat_map(|(_, v)| v) {
            let _ = self.driver.mem_free(p);
        }
    }
}

#[test]
fn a_local_resource_shared_by_four_threads_keeps_the_rules() {
    let g = SimDriver::new(SimConfig::new(13)).unwrap();
    let r = Arc::new(ThreadSafeAdaptor::new(StreamCache::new(g.clone())));
    assert_eq!(r.upstream_name(), "StreamCache");
    check_all(Arc::clone(&r), &g, Alignment::UpTo256);
    assert!(r.upstream().live.is_empty());
    drop(r);
    assert_released(&g);
}

#[test]
fn calls_are_serialised_and_the_resource_comes_back() {
    let g = SimDriver::new(SimConfig::new(14)).unwrap();
    let r = ThreadSafeAdaptor::new(StreamCache::new(g.clone()));
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let stream = g.stream_create(true).unwrap();
                for _ in 0..100 {
                    let p = r.allocate(4096, stream).unwrap();
                    r.deallocate(p, 4096, stream).unwrap();
                }
                g.stream_synchronize(stream).unwrap();
                g.stream_destroy(stream).unwrap();
            });
        }
    });
    // Each thread reused its own stream's block 99 times.
    assert_eq!(r.upstream().hits, 396);
    assert!(std::ptr::addr_eq(r.driver(), &*r.upstream().driver));
    let e = r
        .deallocate(DevicePtr(0x100), 4096, StreamId::DEFAULT)
        .unwrap_err();
    assert!(
        matches!(
            e,
            MrError::InvalidFree {
                resource: "StreamCache",
                ..
            }
        ),
        "{e}"
    );
    let cache = r.into_upstream();
    assert_eq!(cache.free.values().map(Vec::len).sum::<usize>(), 4);
    drop(cache);
    assert_eq!(g.report().device_memory.count, 0);
}
