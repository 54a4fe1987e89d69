//! [`PendingDeallocs`]: Numba's deferred deallocation strategy (`_PendingDeallocs`).
//!
//! NBEP 7: "cleanup functions (such as `cuMemFree`) for the items above are added to
//! its list of pending deallocations by the finalizers of objects representing allocations …
//! When the addition of a new cleanup function to the deallocation list causes the number or
//! size of pending deallocations to exceed a configured ratio, the `_PendingDeallocs` object
//! runs deallocators for all items it knows about and then clears its internal pending list."
//!
//! Thresholds as in Numba: more than `max_count` (10) items, or more than `max_ratio` (20 %)
//! of the device's memory pending, configurable through `EMM_MAX_PENDING_DEALLOCS_COUNT` and
//! `EMM_MAX_PENDING_DEALLOCS_RATIO` (Numba's `NUMBA_CUDA_MAX_PENDING_DEALLOCS_*`). Two
//! differences from Numba, both so that memory is not held longer than needed: when the last
//! `defer_cleanup` guard goes, a queue over its thresholds flushes at once (Numba waits for
//! the next free); and stream-ordered frees are never queued, since they do not synchronize.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::attribution::CallerScope;
use crate::contract::error::{EmmError, EmmResult};
use crate::contract::finalizer::{Dealloc, DeallocSink};
use crate::contract::guard::DeferCleanupGuard;
use crate::driver::{ContextId, Driver, HostPtr};
use crate::error::DriverError;

/// Failures kept for the report; later ones are only counted.
const FAILURES_KEPT: usize = 16;

/// When a [`PendingDeallocs`] flushes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PendingDeallocsConfig {
    /// Flush when more than this many deallocations are pending. Default 10.
    pub max_count: usize,
    /// Flush when more than this fraction of the device's memory is pending. Default 0.2.
    pub max_ratio: f64,
}

impl Default for PendingDeallocsConfig {
    fn default() -> Self {
        PendingDeallocsConfig {
            max_count: 10,
            max_ratio: 0.2,
        }
    }
}

impl PendingDeallocsConfig {
    /// The environment variable that sets [`PendingDeallocsConfig::max_count`].
    pub const COUNT_VAR: &'static str = "EMM_MAX_PENDING_DEALLOCS_COUNT";
    /// The environment variable that sets [`PendingDeallocsConfig::max_ratio`].
    pub const RATIO_VAR: &'static str = "EMM_MAX_PENDING_DEALLOCS_RATIO";

    /// The configuration the two variables' values give (unset: the default).
    ///
    /// # Errors
    ///
    /// [`EmmError::InvalidConfig`] for a count that is not a non-negative integer or a ratio
    /// outside 0 to 1.
    pub fn from_env_values(count: Option<&str>, ratio: Option<&str>) -> EmmResult<Self> {
        let mut c = PendingDeallocsConfig::default();
        if let Some(v) = count {
            c.max_count = v.trim().parse().map_err(|_| EmmError::InvalidConfig {
                setting: Self::COUNT_VAR,
                value: v.to_string(),
                reason: "give a whole number of deallocations, e.g. 10".into(),
            })?;
        }
        if let Some(v) = ratio {
            c.max_ratio = match v.trim().parse::<f64>() {
                Ok(r) if (0.0..=1.0).contains(&r) => r,
                _ => {
                    return Err(EmmError::InvalidConfig {
                        setting: Self::RATIO_VAR,
                        value: v.to_string(),
                        reason: "give a fraction of device memory from 0 to 1, e.g. 0.2".into(),
                    })
                }
            };
        }
        Ok(c)
    }

    /// The configuration from the process environment.
    ///
    /// # Errors
    ///
    /// As [`PendingDeallocsConfig::from_env_values`].
    pub fn from_env() -> EmmResult<Self> {
        let count = std::env::var(Self::COUNT_VAR).ok();
        let ratio = std::env::var(Self::RATIO_VAR).ok();
        Self::from_env_values(count.as_deref(), ratio.as_deref())
    }
}

#[derive(Default)]
struct State {
    items: VecDeque<Dealloc>,
    bytes: u64,
    disabled: u32,
    capacity: Option<u64>,
    context: Option<ContextId>,
    closed: bool,
    failures: Vec<DriverError>,
    failure_count: usize,
}

/// Deallocations waiting to run, flushed past a count or byte threshold, held while a
/// `defer_cleanup` guard lives.
///
/// - **Thread safety**: `Send + Sync`; one lock, never held while the driver is called.
/// - **Cost**: `add` is a push under a lock, O(1) amortized; a flush is one driver call per
///   item. Flushing makes the owning context current (and restores the previous one).
/// - **Ownership**: shared through an `Arc` by the manager and every finalizer that enqueues
///   into it. After [`PendingDeallocs::close`] (the manager is gone) items run at once.
pub struct PendingDeallocs<D: Driver + ?Sized> {
    driver: Arc<D>,
    tag: &'static str,
    config: PendingDeallocsConfig,
    state: Mutex<State>,
}

impl<D: Driver + ?Sized> PendingDeallocs<D> {
    /// An empty queue whose deallocations call `driver`, attributed to `tag` (the owning
    /// manager's or context's name).
    pub fn new(driver: Arc<D>, tag: &'static str, config: PendingDeallocsConfig) -> Self {
        PendingDeallocs {
            driver,
            tag,
            config,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while the lock is held; recover the state if something did.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The configuration.
    pub fn config(&self) -> PendingDeallocsConfig {
        self.config
    }

    /// Sets the device memory the byte threshold is a fraction of (done by `initialize`).
    /// Until it is set, only the count threshold applies.
    pub fn set_capacity(&self, bytes: u64) {
        self.lock().capacity = Some(bytes);
    }

    /// Sets the context a flush makes current, so that a finalizer running on any thread
    /// frees in the right context.
    pub fn set_context(&self, context: ContextId) {
        self.lock().context = Some(context);
    }

    /// The byte threshold: pending bytes above it trigger a flush (`None`: capacity unset).
    pub fn max_pending_bytes(&self) -> Option<u64> {
        self.lock().capacity.map(|c| self.max_bytes(c))
    }

    fn max_bytes(&self, capacity: u64) -> u64 {
        (capacity as f64 * self.config.max_ratio) as u64
    }

    /// Number of pending deallocations.
    pub fn len(&self) -> usize {
        self.lock().items.len()
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.lock().items.is_empty()
    }

    /// Bytes the pending deallocations would free.
    pub fn pending_bytes(&self) -> u64 {
        self.lock().bytes
    }

    /// Whether a `defer_cleanup` guard is holding flushes.
    pub fn is_disabled(&self) -> bool {
        self.lock().disabled > 0
    }

    fn over_threshold(&self, st: &State) -> bool {
        st.items.len() > self.config.max_count
            || st.capacity.is_some_and(|c| st.bytes > self.max_bytes(c))
    }

    /// Holds flushing until the guard is dropped (Numba's `deallocations.disable()`).
    /// Guards nest; when the last goes, a queue over its thresholds flushes.
    pub fn disable(self: &Arc<Self>) -> DeferCleanupGuard {
        self.lock().disabled += 1;
        let me = Arc::clone(self);
        DeferCleanupGuard::new(move || {
            let batch = {
                let mut st = me.lock();
                st.disabled = st.disabled.saturating_sub(1);
                if st.disabled == 0 && me.over_threshold(&st) {
                    Some(me.take_all(&mut st))
                } else {
                    None
                }
            };
            if let Some(batch) = batch {
                me.run_batch(batch);
            }
        })
    }

    /// Runs every pending deallocation unless a `defer_cleanup` guard holds them (Numba's
    /// `clear()`), then reports failures recorded since the last report.
    ///
    /// # Errors
    ///
    /// [`EmmError::DeallocationsFailed`] when any deallocation failed.
    pub fn flush(&self) -> EmmResult<()> {
        self.release_pending();
        self.take_failures()
    }

    /// Runs every pending deallocation unless a guard holds them, keeping failures for the
    /// next report; returns how many ran. The out-of-memory path uses it before its retry.
    pub fn release_pending(&self) -> usize {
        let batch = {
            let mut st = self.lock();
            if st.disabled > 0 {
                return 0;
            }
            self.take_all(&mut st)
        };
        let ran = batch.len();
        self.run_batch(batch);
        ran
    }

    /// Runs every pending deallocation even while a guard holds them (for `reset`), then
    /// reports failures.
    ///
    /// # Errors
    ///
    /// [`EmmError::DeallocationsFailed`] when any deallocation failed.
    pub fn flush_all(&self) -> EmmResult<()> {
        let batch = {
            let mut st = self.lock();
            self.take_all(&mut st)
        };
        self.run_batch(batch);
        self.take_failures()
    }

    /// Runs now, even under a guard, the pending unpinning of any range overlapping
    /// `[ptr, ptr + bytes)`: pinning a range again must not fail because its earlier unpin is
    /// still queued. Returns how many ran.
    ///
    /// # Errors
    ///
    /// The first failing unpin (the rest still run).
    pub fn flush_unpins_overlapping(&self, ptr: HostPtr, bytes: u64) -> EmmResult<usize> {
        let mut batch = VecDeque::new();
        {
            let mut st = self.lock();
            if !st.items.iter().any(|d| d.unpins_overlapping(ptr, bytes)) {
                return Ok(0);
            }
            let mut keep = VecDeque::with_capacity(st.items.len());
            for d in st.items.drain(..) {
                if d.unpins_overlapping(ptr, bytes) {
                    batch.push_back(d);
                } else {
                    keep.push_back(d);
                }
            }
            st.items = keep;
            st.bytes = st.items.iter().map(Dealloc::bytes).sum();
        }
        let ran = batch.len();
        let mut first = None;
        let _ctx = self.enter_context();
        for d in batch {
            if let Err(e) = self.run(d) {
                first.get_or_insert(e);
            }
        }
        match first {
            Some(e) => Err(e.into()),
            None => Ok(ran),
        }
    }

    /// Runs everything pending and makes later deallocations run at once (the owner is going
    /// away, so nobody would flush them).
    ///
    /// # Errors
    ///
    /// [`EmmError::DeallocationsFailed`] when any deallocation failed.
    pub fn close(&self) -> EmmResult<()> {
        self.lock().closed = true;
        self.flush_all()
    }

    /// Reports deallocations that failed since the last report, and forgets them.
    ///
    /// # Errors
    ///
    /// [`EmmError::DeallocationsFailed`] with the count and the first failure.
    pub fn take_failures(&self) -> EmmResult<()> {
        let mut st = self.lock();
        if st.failure_count == 0 {
            return Ok(());
        }
        let count = std::mem::take(&mut st.failure_count);
        let mut failures = std::mem::take(&mut st.failures);
        Err(EmmError::DeallocationsFailed {
            count,
            first: failures.swap_remove(0),
        })
    }

    fn take_all(&self, st: &mut State) -> VecDeque<Dealloc> {
        st.bytes = 0;
        std::mem::take(&mut st.items)
    }

    fn run_batch(&self, mut batch: VecDeque<Dealloc>) {
        if batch.is_empty() {
            return;
        }
        let _ctx = self.enter_context();
        for d in batch.drain(..) {
            if let Err(e) = self.run(d) {
                self.record(e);
            }
        }
        // Give the emptied buffer back so the next items need no allocation.
        let mut st = self.lock();
        if st.items.is_empty() && st.items.capacity() < batch.capacity() {
            st.items = batch;
        }
    }

    fn record(&self, e: DriverError) {
        let mut st = self.lock();
        st.failure_count += 1;
        if st.failures.len() < FAILURES_KEPT {
            st.failures.push(e);
        }
    }

    fn enter_context(&self) -> Option<RestoreContext<'_, D>> {
        let ctx = self.lock().context?;
        let previous = self.driver.current_context().ok()?;
        if previous == ctx || self.driver.set_current_context(ctx).is_err() {
            return None;
        }
        Some(RestoreContext {
            driver: &self.driver,
            previous,
        })
    }

    fn run(&self, item: Dealloc) -> Result<(), DriverError> {
        let _scope = CallerScope::enter(self.tag);
        let d = &self.driver;
        match item {
            Dealloc::Device { ptr, .. } | Dealloc::Managed { ptr, .. } => d.mem_free(ptr),
            Dealloc::DeviceAsync { ptr, stream, .. } => d.mem_free_async(ptr, stream),
            Dealloc::Host { ptr, .. } => d.host_free(ptr),
            Dealloc::Unpin { ptr, .. } => d.host_unregister(ptr),
            Dealloc::Stream(s) => d.stream_destroy(s),
            Dealloc::Event(e) => d.event_destroy(e),
            Dealloc::Custom { run, .. } => run(),
        }
    }
}

/// Restores the context that was current before a flush.
struct RestoreContext<'a, D: Driver + ?Sized> {
    driver: &'a Arc<D>,
    previous: ContextId,
}

impl<D: Driver + ?Sized> Drop for RestoreContext<'_, D> {
    fn drop(&mut self) {
        // Best effort: a failure leaves the owning context current, which is still valid.
        let _ = self.driver.set_current_context(self.previous);
    }
}

impl<D: Driver + ?Sized> DeallocSink for PendingDeallocs<D> {
    /// Queues `item`; flushes everything when the queue passes a threshold and no guard
    /// holds it. Stream-ordered frees, and everything after `close`, run at once.
    fn add(&self, item: Dealloc) {
        let mut st = self.lock();
        if st.closed || matches!(item, Dealloc::DeviceAsync { .. }) {
            drop(st);
            let _ctx = self.enter_context();
            if let Err(e) = self.run(item) {
                self.record(e);
            }
            return;
        }
        st.bytes = st.bytes.saturating_add(item.bytes());
        st.items.push_back(item);
        if st.disabled == 0 && self.over_threshold(&st) {
            let batch = self.take_all(&mut st);
            drop(st);
            self.run_batch(batch);
        }
    }
}
