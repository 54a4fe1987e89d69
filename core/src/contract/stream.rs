//! [`Stream`] and [`Event`]: objects a [`crate::contract::Context`] owns and destroys through
//! its own pending deallocations.
//!
//! NBEP 7: "The Context class will still instantiate self.allocations and
//! self.deallocations as before - these will still be used by the context to manage the
//! allocations and deallocations of events, streams, and modules, which are not handled by the
//! EMM plugin."

use std::fmt;
use std::sync::Arc;

use crate::contract::finalizer::{Dealloc, DeallocSink};
use crate::driver::{EventId, StreamId};

/// A stream of a context; dropping it queues `cuStreamDestroy` in the context's deallocations.
pub struct Stream {
    id: StreamId,
    sink: Arc<dyn DeallocSink>,
}

impl Stream {
    pub(crate) fn new(id: StreamId, sink: Arc<dyn DeallocSink>) -> Self {
        Stream { id, sink }
    }

    /// The driver's handle.
    pub fn id(&self) -> StreamId {
        self.id
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.sink.add(Dealloc::Stream(self.id));
    }
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Stream({})", self.id)
    }
}

/// An event of a context; dropping it queues `cuEventDestroy` in the context's deallocations.
pub struct Event {
    id: EventId,
    sink: Arc<dyn DeallocSink>,
}

impl Event {
    pub(crate) fn new(id: EventId, sink: Arc<dyn DeallocSink>) -> Self {
        Event { id, sink }
    }

    /// The driver's handle.
    pub fn id(&self) -> EventId {
        self.id
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        self.sink.add(Dealloc::Event(self.id));
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Event({})", self.id)
    }
}
