//! Stream handles: [`StreamView`] names a stream without owning it; [`Stream`] creates one and
//! destroys it when dropped.

use std::sync::Arc;

use crate::driver::{Driver, StreamId};
use crate::error::DriverResult;

/// A non-owning view of a stream: the legacy default stream ([`StreamId::DEFAULT`]), the
/// calling thread's per-thread default stream ([`StreamId::PER_THREAD`]), or a handle.
///
/// It is the driver's stream handle itself: copying it is free and it never destroys anything.
/// Every stream-ordered API in emm takes one.
pub type StreamView = StreamId;

/// An owned stream: created on construction, destroyed on drop (work queued on it still
/// completes, as with `cuStreamDestroy`).
pub struct Stream<D: Driver> {
    driver: Arc<D>,
    id: StreamId,
}

impl<D: Driver> Stream<D> {
    /// Creates a stream in the calling thread's current context. A `non_blocking` stream does
    /// not order itself with the legacy default stream.
    ///
    /// # Errors
    ///
    /// The driver's, e.g. no current context.
    pub fn new(driver: impl Into<Arc<D>>, non_blocking: bool) -> DriverResult<Self> {
        let driver = driver.into();
        let id = driver.stream_create(non_blocking)?;
        Ok(Stream { driver, id })
    }

    /// The view to pass to stream-ordered APIs.
    #[inline]
    pub fn view(&self) -> StreamView {
        self.id
    }

    /// Waits for all work queued on the stream.
    ///
    /// # Errors
    ///
    /// The driver's.
    pub fn synchronize(&self) -> DriverResult<()> {
        self.driver.stream_synchronize(self.id)
    }
}

impl<D: Driver> Drop for Stream<D> {
    fn drop(&mut self) {
        // The handle is ours and live: destroying it can only fail if the driver is gone, and
        // then there is nothing left to release.
        let _ = self.driver.stream_destroy(self.id);
    }
}

impl<D: Driver> std::fmt::Debug for Stream<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Stream").field(&self.id).finish()
    }
}
