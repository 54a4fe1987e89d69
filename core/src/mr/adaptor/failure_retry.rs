//! [`FailureRetryAdaptor`]: after out of memory, a callback decides whether to retry (RMM's
//! `failure_callback_resource_adaptor`).
//!
//! - **What it does**: when the upstream fails an allocation with out of memory, calls the
//!   callback with a [`RetryRequest`] (what was asked, the error, which attempt); if the
//!   callback returns `true` (it freed something: flushed another cache, ran a garbage
//!   collection, waited for a stream) the allocation is tried again, otherwise the
//!   out-of-memory error is returned. Other errors are returned at once, never retried.
//! - **Thread safety**: `Send + Sync` when the upstream and the callback are; the callback may
//!   run on several threads at once.
//! - **Streams**: passes the stream through; the callback sees it.
//! - **Clone and ownership**: owns its upstream and callback by value; not `Clone`.
//! - **Use and cost**: sharing a device with caches that can give memory back (another
//!   library's pool, a tensor cache). Free when allocations succeed: one branch on the error.
//!
//! A callback that keeps returning `true` while nothing frees memory retries forever, as in
//! RMM; [`RetryRequest::attempt`] lets it stop (`|r| r.attempt <= 3 && flush()`).

use crate::driver::{DevicePtr, Driver, StreamId};
use crate::mr::adaptor::Request;
use crate::mr::{assert_resource, DeviceMemoryResource, MrError, MrResult, MIN_ALIGNMENT};

/// What the callback is told about a failed allocation.
#[derive(Debug)]
pub struct RetryRequest<'a> {
    /// Bytes requested.
    pub bytes: usize,
    /// Alignment requested ([`MIN_ALIGNMENT`] for a plain allocation).
    pub alignment: usize,
    /// The stream of the request.
    pub stream: StreamId,
    /// How many times the allocation has failed so far, from 1.
    pub attempt: u32,
    /// The out-of-memory error of the last attempt.
    pub error: &'a MrError,
}

/// Retries allocations after out of memory while a callback says so; see the
/// [module docs](self).
pub struct FailureRetryAdaptor<Up, F> {
    upstream: Up,
    callback: F,
}

impl<Up, F> FailureRetryAdaptor<Up, F>
where
    Up: DeviceMemoryResource,
    F: Fn(&RetryRequest<'_>) -> bool + Send + Sync,
{
    /// Retries failed allocations of `upstream` while `callback` returns `true`.
    pub fn new(upstream: Up, callback: F) -> Self {
        FailureRetryAdaptor { upstream, callback }
    }

    /// The upstream resource.
    pub fn upstream(&self) -> &Up {
        &self.upstream
    }

    /// Gives back the upstream resource.
    pub fn into_upstream(self) -> Up {
        self.upstream
    }

    #[cold]
    #[inline(never)]
    fn retry(&self, mut error: MrError, request: Request) -> MrResult<DevicePtr> {
        let mut attempt = 1u32;
        loop {
            let retry = RetryRequest {
                bytes: request.bytes,
                alignment: request.alignment.unwrap_or(MIN_ALIGNMENT),
                stream: request.stream,
                attempt,
                error: &error,
            };
            if !(self.callback)(&retry) {
                return Err(error);
            }
            match request.allocate_from(&self.upstream) {
                Err(e) if e.is_out_of_memory() => error = e,
                other => return other,
            }
            attempt = attempt.saturating_add(1);
        }
    }
}

impl<Up, F> super::Adaptor for FailureRetryAdaptor<Up, F>
where
    Up: DeviceMemoryResource,
    F: Fn(&RetryRequest<'_>) -> bool + Send + Sync,
{
    type Upstream = Up;

    fn upstream(&self) -> &Up {
        &self.upstream
    }

    fn name(&self) -> &'static str {
        "FailureRetryAdaptor"
    }

    /// # Time complexity
    ///
    /// O(1) besides the upstream when it succeeds; each retry costs a callback and an
    /// upstream call.
    #[inline]
    fn allocate_request(&self, request: Request) -> MrResult<DevicePtr> {
        match request.allocate_from(&self.upstream) {
            Err(e) if e.is_out_of_memory() => self.retry(e, request),
            other => other,
        }
    }
}

const _: () = {
    #[expect(dead_code, reason = "a compile-time check: it only has to type-check")]
    fn check<D: Driver>() {
        assert_resource::<
            FailureRetryAdaptor<crate::mr::CudaResource<D>, fn(&RetryRequest<'_>) -> bool>,
        >();
    }
};
