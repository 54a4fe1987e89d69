//! [`CountingDriver`]: a driver that counts the calls made through it, by class, and passes
//! each on unchanged.
//!
//! What a slow path costs on a GPU is mostly its driver calls (`cuMemAlloc` and `cuMemFree`
//! take microseconds, `cuEventRecord` and `cuStreamWaitEvent` about one each), and the
//! simulated GPU spends no wall time on them. Building a resource over a counting driver shows
//! how often it reaches the driver, on the simulator and on a GPU alike; the many-threads
//! benchmark reports these counts per 1 000 operations.
//!
//! Counting costs one relaxed atomic add per call, in a counter on a cache line of its own per
//! class; calls that never reach the GPU (`backend_name`, `is_simulated`) are not counted.

use std::sync::atomic::{AtomicU64, Ordering};

use super::*;

/// What a driver call does, for counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallClass {
    /// Takes or gives back memory: `cuMemAlloc`, `cuMemFree`, their async forms, `cuMemCreate`,
    /// `cuMemMap`, `cuMemUnmap`, `cuMemRelease`, address reservations, host and managed memory.
    Memory,
    /// Orders or waits for work: `cuEventRecord`, `cuStreamWaitEvent`, event and stream
    /// queries and synchronizes, `cuCtxSynchronize`.
    Ordering,
    /// Everything else: context queries and switches, `cuMemGetInfo`, copies, events and
    /// streams created or destroyed.
    Other,
}

/// Calls made through a [`CountingDriver`], by class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallCounts {
    /// [`CallClass::Memory`] calls.
    pub memory: u64,
    /// [`CallClass::Ordering`] calls.
    pub ordering: u64,
    /// [`CallClass::Other`] calls.
    pub other: u64,
}

impl CallCounts {
    /// Every call together.
    pub fn total(&self) -> u64 {
        self.memory + self.ordering + self.other
    }

    /// The calls made since `earlier` was read.
    pub fn since(&self, earlier: &CallCounts) -> CallCounts {
        CallCounts {
            memory: self.memory.saturating_sub(earlier.memory),
            ordering: self.ordering.saturating_sub(earlier.ordering),
            other: self.other.saturating_sub(earlier.other),
        }
    }
}

/// One counter on a cache line of its own, so that threads counting different classes do not
/// slow each other down.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Counter(AtomicU64);

/// A driver that counts the calls made through it and passes them on to `D`.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use emm_core::driver::counting::CountingDriver;
/// use emm_core::mr::{CudaResource, DeviceMemoryResource, PoolResource};
/// use emm_core::StreamId;
/// # fn demo(driver: Arc<dyn emm_core::Driver>) -> emm_core::mr::MrResult<()> {
/// let counting = Arc::new(CountingDriver::new(driver));
/// let cuda = CudaResource::<CountingDriver<Arc<dyn emm_core::Driver>>>::new(counting.clone());
/// let pool = PoolResource::new(cuda);
/// let p = pool.allocate(1000, StreamId::DEFAULT)?;
/// pool.deallocate(p, 1000, StreamId::DEFAULT)?;
/// println!("{} driver calls", counting.counts().total());
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct CountingDriver<D: Driver + ?Sized> {
    counters: [Counter; 3],
    inner: D,
}

impl<D: Driver> CountingDriver<D> {
    /// Counts the calls made to `inner`, from zero.
    pub fn new(inner: D) -> Self {
        CountingDriver {
            counters: Default::default(),
            inner,
        }
    }
}

impl<D: Driver + ?Sized> CountingDriver<D> {
    /// The driver the calls go to.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// The calls made so far.
    pub fn counts(&self) -> CallCounts {
        let get = |c: CallClass| self.counters[c as usize].0.load(Ordering::Relaxed);
        CallCounts {
            memory: get(CallClass::Memory),
            ordering: get(CallClass::Ordering),
            other: get(CallClass::Other),
        }
    }

    #[inline]
    fn count(&self, class: CallClass) {
        self.counters[class as usize]
            .0
            .fetch_add(1, Ordering::Relaxed);
    }
}

/// The [`CallClass`] a call of class `$class` in [`with_driver_methods`]'s list counts as:
/// `None` for `Uncounted`.
macro_rules! call_class {
    (Uncounted) => {
        None::<CallClass>
    };
    ($class:ident) => {
        Some(CallClass::$class)
    };
}

/// Counts each call by its class in the list, then passes it to the inner driver.
macro_rules! forward_counted {
    ($($class:ident $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        impl<D: Driver + ?Sized> Driver for CountingDriver<D> {
            $(
                #[inline]
                fn $name(&self, $($arg: $ty),*) -> $ret {
                    if let Some(class) = call_class!($class) {
                        self.count(class);
                    }
                    self.inner.$name($($arg),*)
                }
            )*
        }
    };
}

with_driver_methods!(forward_counted);
