//! [`PrefetchAdaptor`]: prefetches each new allocation of managed memory to the device, on
//! the allocating stream (RMM's `prefetch_resource_adaptor`).
//!
//! - **What it does**: after the upstream allocates, calls [`Driver::mem_prefetch`] for the
//!   whole allocation to the device of the calling thread's current context, ordered on the
//!   allocation's stream, so that the first kernel on that stream finds the pages resident
//!   instead of faulting them over one by one. If the prefetch fails, the memory is given
//!   back to the upstream and the error returned (rollback): a failed call changes nothing.
//! - **Thread safety**: `Send + Sync` when the upstream is; it keeps no state.
//! - **Streams**: the prefetch is queued on the allocation's stream; frees pass through.
//! - **Clone and ownership**: owns its upstream by value; not `Clone`.
//! - **Use and cost**: in front of a managed-memory resource (`ManagedResource`, or a pool over
//!   it) when the memory is used on the device first. Three driver calls per allocation (the
//!   current context, its device, the prefetch); the migration itself runs on the stream.
//!   The upstream must hand out managed memory: the driver refuses to prefetch device memory.

use crate::attribution::CallerScope;
use crate::driver::{DevicePtr, Driver, Location, StreamId};
use crate::mr::adaptor::Request;
use crate::mr::{assert_resource, DeviceMemoryResource, MrError, MrResult};

/// Prefetches new managed allocations to the device; see the [module docs](self).
pub struct PrefetchAdaptor<Up> {
    upstream: Up,
}

impl<Up: DeviceMemoryResource> PrefetchAdaptor<Up> {
    /// Prefetches what `upstream` allocates; `upstream` must hand out managed memory.
    pub fn new(upstream: Up) -> Self {
        PrefetchAdaptor { upstream }
    }

    /// The upstream resource.
    pub fn upstream(&self) -> &Up {
        &self.upstream
    }

    /// Gives back the upstream resource.
    pub fn into_upstream(self) -> Up {
        self.upstream
    }

    fn prefetch(&self, ptr: DevicePtr, bytes: usize, stream: StreamId) -> MrResult<()> {
        let _scope = CallerScope::enter(self.name());
        let driver = self.upstream.driver();
        let device = driver.context_device(driver.current_context()?)?;
        driver.mem_prefetch(ptr, bytes, Location::Device(device), stream)?;
        Ok(())
    }
}

impl<Up: DeviceMemoryResource> super::Adaptor for PrefetchAdaptor<Up> {
    type Upstream = Up;

    fn upstream(&self) -> &Up {
        &self.upstream
    }

    fn name(&self) -> &'static str {
        "PrefetchAdaptor"
    }

    /// # Time complexity
    ///
    /// O(1) besides the upstream: three driver calls that queue the migration.
    fn allocate_request(&self, request: Request) -> MrResult<DevicePtr> {
        let ptr = request.allocate_from(&self.upstream)?;
        let Err(e) = self.prefetch(ptr, request.bytes, request.stream) else {
            return Ok(ptr);
        };
        // Rollback. If even the free fails, say so: that memory is lost to the caller.
        match request.deallocate_to(&self.upstream, ptr) {
            Ok(()) => Err(e),
            Err(f) => Err(MrError::InvalidArgument {
                resource: "PrefetchAdaptor",
                reason: format!(
                    "prefetching {ptr} failed ({e}) and giving it back to the upstream failed \
                     too ({f}); is the upstream handing out managed memory?"
                ),
            }),
        }
    }
}

const _: () = {
    #[expect(dead_code, reason = "a compile-time check: it only has to type-check")]
    fn check<D: Driver>() {
        assert_resource::<PrefetchAdaptor<crate::mr::CudaResource<D>>>();
    }
};
