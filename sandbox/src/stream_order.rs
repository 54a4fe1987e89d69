//! [`StreamOrders`]: what `emm::stream_order(from, to)` does for a plugin — an event recorded
//! on `from`, then a wait for it on `to`, through the upstream's driver — with one cached event
//! per source stream.
//!
//! The built-in pool orders streams the same way (`core/src/mr/detail/stream_order.rs`), but
//! its cache is private to emm-core and, when the event cannot be recorded, it synchronizes the
//! whole context. A plugin must hear instead that the streams were not ordered (an unknown
//! stream is its error, a driver failure a reason to take other memory), so the sandbox keeps
//! its own: an event recorded when the plugin asks captures all of `from`'s work so far, which
//! includes everything before the free, and `cuStreamWaitEvent` captures the event's state when
//! it is called, so re-recording a cached event never disturbs an earlier wait.

use std::collections::BTreeMap;

use emm_core::{CudaCode, Driver, DriverError, EventId, StreamId};

/// Source streams whose event is kept for the next ordering; past it an ordering uses an
/// event of its own, destroyed at once.
pub(crate) const CACHED_EVENTS: usize = 64;

/// Why two streams were not ordered.
#[derive(Debug)]
pub(crate) enum NotOrdered {
    /// A stream the driver does not know (or of another context).
    UnknownStream(DriverError),
    /// Any other driver failure.
    Driver(DriverError),
}

/// Cached events, one per source stream, destroyed by [`StreamOrders::destroy`].
#[derive(Debug, Default)]
pub(crate) struct StreamOrders {
    events: BTreeMap<StreamId, EventId>,
}

impl StreamOrders {
    /// Makes future work on `to` wait for all work queued on `from` so far.
    ///
    /// # Errors
    ///
    /// [`NotOrdered`]; nothing was ordered then.
    ///
    /// # Time complexity
    ///
    /// Two driver calls (record, wait), one more the first time `from` is a source (create),
    /// and O(log n) to find the cached event.
    pub(crate) fn order(
        &mut self,
        driver: &dyn Driver,
        from: StreamId,
        to: StreamId,
    ) -> Result<(), NotOrdered> {
        if from == to {
            return Ok(());
        }
        let classify = |e: DriverError| {
            let unknown = [
                CudaCode::INVALID_HANDLE,
                CudaCode::INVALID_VALUE,
                CudaCode::INVALID_CONTEXT,
            ];
            if unknown.contains(&e.code) {
                NotOrdered::UnknownStream(e)
            } else {
                NotOrdered::Driver(e)
            }
        };
        let cached = self.events.get(&from).copied();
        let event = match cached {
            Some(e) => e,
            None => driver.event_create().map_err(NotOrdered::Driver)?,
        };
        let waited = driver
            .event_record(event, from)
            .and_then(|()| driver.stream_wait_event(to, event))
            .map_err(classify);
        if cached.is_none() {
            // A new event is kept only after it ordered two streams that exist, while the
            // cache has room; any other is destroyed at once.
            if waited.is_ok() && self.events.len() < CACHED_EVENTS {
                self.events.insert(from, event);
            } else {
                let _ = driver.event_destroy(event);
            }
        }
        waited
    }

    /// Number of cached events.
    #[cfg(test)]
    pub(crate) fn cached(&self) -> usize {
        self.events.len()
    }

    /// Destroys every cached event; errors are ignored (a failed destroy leaves only an event
    /// behind).
    pub(crate) fn destroy(&mut self, driver: &dyn Driver) {
        for (_, e) in std::mem::take(&mut self.events) {
            let _ = driver.event_destroy(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use emm_core::DeviceId;
    use emm_sim::{SimConfig, SimDriver};

    #[test]
    fn orders_known_streams_refuses_unknown_ones_and_caps_its_cache() {
        let d = SimDriver::new(SimConfig::new(3)).unwrap();
        d.set_current_context(d.primary_context(DeviceId(0)).unwrap())
            .unwrap();
        let (a, b) = (
            d.stream_create(true).unwrap(),
            d.stream_create(true).unwrap(),
        );
        let mut orders = StreamOrders::default();
        orders.order(&d, a, b).unwrap();
        orders.order(&d, a, b).unwrap();
        assert_eq!(orders.cached(), 1, "one event per source stream, reused");
        orders.order(&d, a, a).unwrap();
        let unknown = StreamId(987_654);
        for (from, to) in [(unknown, b), (a, unknown)] {
            assert!(matches!(
                orders.order(&d, from, to),
                Err(NotOrdered::UnknownStream(_))
            ));
        }
        assert_eq!(orders.cached(), 1, "no event kept for an unknown stream");
        let many: Vec<StreamId> = (0..CACHED_EVENTS + 8)
            .map(|_| d.stream_create(true).unwrap())
            .collect();
        for &s in &many {
            orders.order(&d, s, b).unwrap();
        }
        assert_eq!(orders.cached(), CACHED_EVENTS);
        orders.destroy(&d);
        assert_eq!(orders.cached(), 0);
    }
}
