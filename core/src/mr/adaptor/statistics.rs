//! [`StatisticsAdaptor`]: current, peak and total bytes and allocation counts, with nestable
//! counters (RMM's `statistics_resource_adaptor`, `push_counters` / `pop_counters`).
//!
//! - **What it does**: counts every successful allocation and free through it: bytes and
//!   allocations, each as a [`Counter`] (current value, peak, running total). Counters nest:
//!   [`StatisticsAdaptor::push_counters`] starts a fresh level that counts only what happens
//!   until the matching [`StatisticsAdaptor::pop_counters`], which folds it back into the level
//!   below, as RMM does.
//! - **Thread safety**: `Send + Sync` when the upstream is; the counters sit behind one mutex,
//!   held for a few additions per call and never across the upstream call.
//! - **Streams**: passes the stream through; counting ignores it.
//! - **Clone and ownership**: owns its upstream by value; not `Clone` (two copies would count
//!   apart). Share it behind an `Arc`.
//! - **Use and cost**: observing any chain (peak memory of a workload, memory per phase with
//!   nested counters). One uncontended lock and a few additions per call, no allocation.
//!
//! Counting order: an allocation is counted after the upstream returns it; a free is
//! uncounted *before* the upstream takes the memory back (so the memory cannot be handed out
//! again while still counted, and `current` never overstates what is live), and counted again
//! if the upstream refuses the free (rollback).

use std::ops::AddAssign;
use std::sync::Mutex;

use crate::driver::{DevicePtr, Driver};
use crate::mr::adaptor::{lock, Request};
use crate::mr::{assert_resource, DeviceMemoryResource, MrError, MrResult};

/// One counted quantity: its current value, the highest it reached, and the sum of all
/// increments. Signed, because a nested level sees frees of memory allocated before it began
/// (RMM's counters do the same).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counter {
    /// The current value.
    pub value: i64,
    /// The highest `value` reached.
    pub peak: i64,
    /// The sum of all increments (frees do not subtract).
    pub total: i64,
}

impl Counter {
    // Saturating: a long-running process may allocate more than `i64::MAX` bytes in total.
    #[inline]
    fn add(&mut self, n: i64) {
        self.value = self.value.saturating_add(n);
        self.total = self.total.saturating_add(n);
        self.peak = self.peak.max(self.value);
    }

    #[inline]
    fn sub(&mut self, n: i64) {
        self.value = self.value.saturating_sub(n);
    }
}

impl AddAssign for Counter {
    /// Folds a nested level's counter into this one: its peak counts on top of this level's
    /// value when it began (RMM's `add_counters_from_tracked_sub_block`).
    fn add_assign(&mut self, nested: Counter) {
        self.peak = self.peak.max(self.value.saturating_add(nested.peak));
        self.value = self.value.saturating_add(nested.value);
        self.total = self.total.saturating_add(nested.total);
    }
}

/// The bytes and allocation counters of one level.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Bytes allocated (as requested, not as rounded by the upstream).
    pub bytes: Counter,
    /// Number of allocations.
    pub allocations: Counter,
}

/// Counts bytes and allocations through it; see the [module docs](self).
pub struct StatisticsAdaptor<Up> {
    upstream: Up,
    /// The stack of levels; the last is the one being counted. Never empty.
    levels: Mutex<Vec<Counters>>,
}

impl<Up: DeviceMemoryResource> StatisticsAdaptor<Up> {
    /// Counts what goes through to `upstream`, starting from zero.
    pub fn new(upstream: Up) -> Self {
        StatisticsAdaptor {
            upstream,
            levels: Mutex::new(vec![Counters::default()]),
        }
    }

    /// The upstream resource.
    pub fn upstream(&self) -> &Up {
        &self.upstream
    }

    /// Gives back the upstream resource.
    pub fn into_upstream(self) -> Up {
        self.upstream
    }

    /// The bytes counter of the current level.
    pub fn bytes_counter(&self) -> Counter {
        self.counters().bytes
    }

    /// The allocations counter of the current level.
    pub fn allocations_counter(&self) -> Counter {
        self.counters().allocations
    }

    /// Both counters of the current level.
    pub fn counters(&self) -> Counters {
        *lock(&self.levels).last().unwrap_or(&Counters::default())
    }

    /// Number of levels: 1, plus one per [`StatisticsAdaptor::push_counters`] not yet popped.
    pub fn depth(&self) -> usize {
        lock(&self.levels).len()
    }

    /// Starts a new level of counters, all zero, and returns the level that was current.
    ///
    /// # Time complexity
    ///
    /// O(1) amortized (one push).
    pub fn push_counters(&self) -> Counters {
        let mut levels = lock(&self.levels);
        let current = levels.last().copied().unwrap_or_default();
        levels.push(Counters::default());
        current
    }

    /// Ends the current level: returns its counters and folds them into the level below.
    ///
    /// # Errors
    ///
    /// [`MrError::InvalidArgument`] when only the base level is left (a pop without a push);
    /// nothing changes.
    pub fn pop_counters(&self) -> MrResult<Counters> {
        let mut levels = lock(&self.levels);
        if levels.len() < 2 {
            return Err(MrError::InvalidArgument {
                resource: "StatisticsAdaptor",
                reason: "pop_counters without a matching push_counters: only the base level of \
                         counters is left"
                    .to_string(),
            });
        }
        let popped = levels.pop().unwrap_or_default();
        if let Some(below) = levels.last_mut() {
            below.bytes += popped.bytes;
            below.allocations += popped.allocations;
        }
        Ok(popped)
    }

    /// Applies `change` to the innermost level's counters, under the lock.
    #[inline]
    fn on_top(&self, change: impl FnOnce(&mut Counters)) {
        if let Some(top) = lock(&self.levels).last_mut() {
            change(top);
        }
    }

    #[inline]
    fn count_allocation(&self, bytes: usize) {
        self.on_top(|top| {
            top.bytes.add(as_i64(bytes));
            top.allocations.add(1);
        });
    }

    #[inline]
    fn uncount(&self, bytes: usize) {
        self.on_top(|top| {
            top.bytes.sub(as_i64(bytes));
            top.allocations.sub(1);
        });
    }

    /// Undoes [`Self::uncount`] after the upstream refused a free: value only, so the
    /// rollback is not counted as a new allocation.
    #[cold]
    fn recount(&self, bytes: usize) {
        self.on_top(|top| {
            top.bytes.value = top.bytes.value.saturating_add(as_i64(bytes));
            top.allocations.value = top.allocations.value.saturating_add(1);
        });
    }
}

/// Bytes as a counter value; sizes past `i64::MAX` cannot be allocated, so this saturates.
#[inline]
fn as_i64(bytes: usize) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

impl<Up: DeviceMemoryResource> super::Adaptor for StatisticsAdaptor<Up> {
    type Upstream = Up;

    fn upstream(&self) -> &Up {
        &self.upstream
    }

    fn name(&self) -> &'static str {
        "StatisticsAdaptor"
    }

    /// # Time complexity
    ///
    /// O(1) besides the upstream: one lock, four additions.
    #[inline]
    fn allocate_request(&self, request: Request) -> MrResult<DevicePtr> {
        let ptr = request.allocate_from(&self.upstream)?;
        self.count_allocation(request.bytes);
        Ok(ptr)
    }

    #[inline]
    fn deallocate_request(&self, ptr: DevicePtr, request: Request) -> MrResult<()> {
        self.uncount(request.bytes);
        request
            .deallocate_to(&self.upstream, ptr)
            .inspect_err(|_| self.recount(request.bytes))
    }
}

const _: () = {
    #[expect(dead_code, reason = "a compile-time check: it only has to type-check")]
    fn check<D: Driver>() {
        assert_resource::<StatisticsAdaptor<crate::mr::CudaResource<D>>>();
    }
};

#[cfg(test)]
mod tests {
    use super::Counter;

    #[test]
    fn counter_tracks_value_peak_and_total() {
        let mut c = Counter::default();
        c.add(10);
        c.add(5);
        c.sub(12);
        c.add(1);
        assert_eq!(
            c,
            Counter {
                value: 4,
                peak: 15,
                total: 16
            }
        );
    }

    #[test]
    fn folding_a_nested_level_adds_its_peak_on_top_of_the_outer_value() {
        let mut outer = Counter {
            value: 100,
            peak: 120,
            total: 200,
        };
        outer += Counter {
            value: -10,
            peak: 50,
            total: 60,
        };
        assert_eq!(
            outer,
            Counter {
                value: 90,
                peak: 150,
                total: 260
            }
        );
    }
}
