//! The resource side of [`CachingManagedAllocator`]: it is a [`DeviceMemoryResource`] (device
//! placement on its device), and dropping it gives every segment back.

use crate::attribution::CallerScope;
use crate::driver::{DevicePtr, Driver, MemInfo, StreamId};
use crate::mr::{assert_resource, DeviceMemoryResource, MrResult};
use crate::unified::caching::{CachingManagedAllocator, NAME};
use crate::unified::hints::Placement;

impl DeviceMemoryResource for CachingManagedAllocator {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Device placement on the allocator's device; 0 bytes is `DevicePtr::NULL`.
    #[inline]
    fn allocate(&self, bytes: usize, stream: StreamId) -> MrResult<DevicePtr> {
        if bytes == 0 {
            return Ok(DevicePtr::NULL);
        }
        Ok(self.allocate_placed(bytes, Placement::Device(self.device), stream)?)
    }

    #[inline]
    fn deallocate(&self, ptr: DevicePtr, bytes: usize, stream: StreamId) -> MrResult<()> {
        if ptr == DevicePtr::NULL && bytes == 0 {
            return Ok(());
        }
        Ok(self.free(ptr, bytes, stream)?)
    }

    fn memory_info(&self) -> Option<MemInfo> {
        self.driver.mem_get_info().ok()
    }

    fn release(&self) -> MrResult<u64> {
        Ok(CachingManagedAllocator::release(self)?)
    }

    fn driver(&self) -> &dyn Driver {
        &*self.driver
    }
}

impl Drop for CachingManagedAllocator {
    fn drop(&mut self) {
        let mut st = std::mem::take(self.state_mut());
        let _scope = CallerScope::enter(NAME);
        st.order.destroy(&*self.driver);
        for pool in &mut st.pools {
            for (chunk, _) in pool.heap.take_all_chunks() {
                // No caller to report to; a segment the driver refuses stays with it.
                let _ = self.driver.mem_free(DevicePtr(chunk.base));
            }
        }
    }
}

impl std::fmt::Debug for CachingManagedAllocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.stats();
        f.debug_struct(NAME)
            .field("device", &self.device)
            .field("held", &s.held_bytes)
            .field("live", &s.live_bytes)
            .field("segments", &(s.segments_allocated - s.segments_freed))
            .finish_non_exhaustive()
    }
}

const _: () = assert_resource::<CachingManagedAllocator>();
