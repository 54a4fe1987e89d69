//! [`ThreadSafeAdaptor`]: a mutex around a single-threaded [`LocalMemoryResource`], making it
//! a shareable [`DeviceMemoryResource`] (RMM's `thread_safe_resource_adaptor`).
//!
//! - **What it does**: owns the resource behind one mutex and forwards each call under it.
//!   The design (see [`crate::mr::local`]): resources written for one thread take `&mut self`
//!   and implement [`LocalMemoryResource`], so they need no synchronisation of their own and
//!   cannot be shared by accident; this adaptor is the one way to share them. Resources that
//!   are already `Sync` implement `DeviceMemoryResource` directly and need no adaptor; they
//!   do not implement `LocalMemoryResource`, so they cannot be wrapped by mistake and a chain
//!   never pays for two layers of locking.
//! - **Thread safety**: `Send + Sync` for any `LocalMemoryResource` (which is `Send`): calls
//!   are serialised. A panic inside the resource leaves the mutex poisoned; the adaptor goes on
//!   using the resource, whose `&mut self` methods must leave it consistent at every return.
//! - **Streams**: passes the stream through.
//! - **Clone and ownership**: owns the resource by value; not `Clone`. Share it behind an
//!   `Arc`. [`ThreadSafeAdaptor::upstream`] lends the resource under the lock.
//! - **Use and cost**: a single-threaded pool or arena shared by a few threads. One lock per
//!   call; under contention the resource serves one call at a time.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::driver::{DevicePtr, Driver, MemInfo, StreamId};
use crate::mr::adaptor::lock;
use crate::mr::{assert_resource, DeviceMemoryResource, LocalMemoryResource, MrResult};

/// Shares a [`LocalMemoryResource`] across threads behind a mutex; see the
/// [module docs](self).
pub struct ThreadSafeAdaptor<R> {
    resource: Mutex<R>,
    /// Kept outside the lock so that `driver()` can return a plain reference.
    driver: Arc<dyn Driver>,
    name: &'static str,
}

impl<R: LocalMemoryResource> ThreadSafeAdaptor<R> {
    /// Shares `resource` behind a mutex.
    pub fn new(resource: R) -> Self {
        ThreadSafeAdaptor {
            driver: resource.shared_driver(),
            name: resource.name(),
            resource: Mutex::new(resource),
        }
    }

    /// The resource, lent under the lock: every other call waits until the guard is dropped.
    pub fn upstream(&self) -> MutexGuard<'_, R> {
        lock(&self.resource)
    }

    /// Gives back the resource.
    pub fn into_upstream(self) -> R {
        self.resource
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The name of the resource inside.
    pub fn upstream_name(&self) -> &'static str {
        self.name
    }
}

impl<R: LocalMemoryResource> DeviceMemoryResource for ThreadSafeAdaptor<R> {
    fn name(&self) -> &'static str {
        "ThreadSafeAdaptor"
    }

    /// # Time complexity
    ///
    /// One lock besides the resource.
    #[inline]
    fn allocate(&self, bytes: usize, stream: StreamId) -> MrResult<DevicePtr> {
        if bytes == 0 {
            return Ok(DevicePtr::NULL);
        }
        lock(&self.resource).allocate(bytes, stream)
    }

    #[inline]
    fn deallocate(&self, ptr: DevicePtr, bytes: usize, stream: StreamId) -> MrResult<()> {
        if ptr == DevicePtr::NULL && bytes == 0 {
            return Ok(());
        }
        lock(&self.resource).deallocate(ptr, bytes, stream)
    }

    fn allocate_aligned(
        &self,
        bytes: usize,
        alignment: usize,
        stream: StreamId,
    ) -> MrResult<DevicePtr> {
        lock(&self.resource).allocate_aligned(bytes, alignment, stream)
    }

    fn deallocate_aligned(
        &self,
        ptr: DevicePtr,
        bytes: usize,
        alignment: usize,
        stream: StreamId,
    ) -> MrResult<()> {
        lock(&self.resource).deallocate_aligned(ptr, bytes, alignment, stream)
    }

    fn memory_info(&self) -> Option<MemInfo> {
        lock(&self.resource).memory_info()
    }

    fn driver(&self) -> &dyn Driver {
        &*self.driver
    }
}

const _: () = {
    #[expect(dead_code, reason = "a compile-time check: it only has to type-check")]
    fn check<R: LocalMemoryResource + 'static>() {
        assert_resource::<ThreadSafeAdaptor<R>>();
    }
};
