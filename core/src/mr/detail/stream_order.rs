//! [`StreamOrder`]: orders one stream after another with a cached event, lazily.
//!
//! The stream-ordered rule: memory freed on stream A may be handed to stream B only after B
//! waits for A's work up to the free. RMM records an event on every free; emm's resources do
//! nothing on a free and call [`StreamOrder::order`] only when B actually takes A's memory.
//! An event recorded then captures all of A's work so far, which includes everything before
//! the free, so the late record is as safe as an early one and costs nothing when memory never
//! changes streams. One event per source stream is created on first use and re-recorded after
//! that: `cuStreamWaitEvent` captures the event's state when it is called, so re-recording
//! never disturbs an earlier wait.

use crate::driver::{Driver, EventId, StreamId};
use crate::error::DriverError;

use super::stream_map::StreamMap;

/// Cached events a resource keeps before [`StreamOrder::prune`] looks for ones to destroy.
const PRUNE_MIN: usize = 64;

/// Cached events, one per source stream.
#[derive(Debug, Default)]
pub(crate) struct StreamOrder {
    events: StreamMap<EventId>,
    /// `events.len()` at which the next [`StreamOrder::prune`] is due (0: [`PRUNE_MIN`]).
    prune_at: usize,
}

impl StreamOrder {
    /// Makes future work on `waiter` wait for all work queued on `source` so far.
    ///
    /// When the event cannot be recorded (say `source` was destroyed), falls back to
    /// synchronizing the context, which orders everything.
    ///
    /// # Errors
    ///
    /// The driver's error when neither the event nor the synchronize works.
    ///
    /// # Time complexity
    ///
    /// Two driver calls (record, wait), plus one to create the event the first time a stream
    /// is a source; O(1) expected to find the cached event.
    pub(crate) fn order(
        &mut self,
        driver: &dyn Driver,
        source: StreamId,
        waiter: StreamId,
    ) -> Result<(), DriverError> {
        if source == waiter {
            return Ok(());
        }
        let event = match self.events.get(&source) {
            Some(&e) => Ok(e),
            None => driver.event_create().inspect(|&e| {
                self.events.insert(source, e);
            }),
        };
        let waited = event.and_then(|e| {
            driver.event_record(e, source)?;
            driver.stream_wait_event(waiter, e)
        });
        match waited {
            Ok(()) => Ok(()),
            Err(e) => driver.context_synchronize().map_err(|_| e),
        }
    }

    /// Number of cached events.
    pub(crate) fn events(&self) -> usize {
        self.events.len()
    }

    /// Destroys the cached events of the streams `keep` rejects (streams whose memory the
    /// resource no longer holds), once the cache has doubled since the last pruning: a program
    /// that goes through thousands of streams keeps events for about twice as many streams as
    /// hold free memory, and the O(events) scan is constant per new stream, amortized. A
    /// stream pruned gets a new event if it is a source again. Errors are ignored: a failed
    /// destroy leaves only an event behind.
    pub(crate) fn prune(&mut self, driver: &dyn Driver, keep: impl Fn(StreamId) -> bool) {
        if self.events.len() < self.prune_at.max(PRUNE_MIN) {
            return;
        }
        self.events.retain(|&s, &mut e| {
            keep(s) || {
                let _ = driver.event_destroy(e);
                false
            }
        });
        self.prune_at = 2 * self.events.len();
    }

    /// Destroys every cached event; errors are ignored (this runs when the resource is
    /// dropped, and a failed destroy leaves only an event behind).
    pub(crate) fn destroy(&mut self, driver: &dyn Driver) {
        for (_, e) in self.events.drain() {
            let _ = driver.event_destroy(e);
        }
    }
}
