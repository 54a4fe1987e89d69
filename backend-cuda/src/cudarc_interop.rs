//! emm memory where cudarc takes device memory, and emm streams made from cudarc's.
//!
//! A cudarc program keeps its own [`CudaContext`](cudarc::driver::CudaContext) and
//! [`CudaStream`]s; emm serves the same primary context. [`adopt_stream`] turns a cudarc stream
//! into the [`StreamId`] emm allocates and frees on, and [`AsCudarc`] lends a [`DeviceVec`]
//! (or a [`DeviceBuffer`] as bytes) to cudarc as an [`EmmSlice`] / [`EmmSliceMut`]: cudarc's
//! copies take them as [`DevicePtr`] / [`DevicePtrMut`], and kernel launches take them as
//! arguments (`launch_builder(..).arg(&view)`).
//!
//! # Stream order
//!
//! A view is bound to the cudarc stream it was made for. When that is the memory's own emm
//! stream (the memory was allocated on the adopted stream, as recommended) a view costs
//! nothing. Otherwise making the view makes the cudarc stream wait for the memory's stream,
//! and dropping it makes the memory's stream wait for the cudarc stream, so that emm's
//! stream-ordered free never overtakes cudarc's work (two events each way). A cudarc call on
//! a third stream through [`DevicePtr::device_ptr`] joins that stream first and synchronizes
//! it when done. A kernel must be launched on the view's stream: cudarc's launch builder gives
//! no way to order another.

use std::marker::PhantomData;
use std::sync::Arc;

use bytemuck::Pod;
use cudarc::driver::{
    sys, CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, LaunchArgs, PushKernelArg, SyncOnDrop,
};
use emm_core::containers::{DeviceBuffer, DeviceVec};
use emm_core::error::DriverResult;
use emm_core::{DeviceId, StreamId};

use crate::result::stream as raw;
use crate::CudaDriver;

/// The emm stream for cudarc's `stream`, adopted by `driver` (see
/// [`CudaDriver::adopt_stream`]): allocate and free on it, and emm's memory is ordered with
/// cudarc's work on that stream. The stream stays cudarc's.
///
/// # Errors
///
/// As [`CudaDriver::adopt_stream`]: a stream of a context that is not its device's primary
/// context.
pub fn adopt_stream(driver: &CudaDriver, stream: &CudaStream) -> DriverResult<StreamId> {
    let device = u32::try_from(stream.context().ordinal()).unwrap_or(u32::MAX);
    driver.adopt_stream(stream.cu_stream() as u64, DeviceId(device))
}

/// Makes stream `waiter` wait for the work queued so far on stream `on` (nothing when they
/// are the same stream).
fn order(waiter: sys::CUstream, on: sys::CUstream) -> DriverResult<()> {
    if waiter == on {
        return Ok(());
    }
    let e = raw::event_create()?;
    let r = raw::event_record(e, on).and_then(|()| raw::wait_event(waiter, e));
    // The driver keeps the event until the wait is done: destroying it now is safe.
    let _ = raw::event_destroy(e);
    r
}

fn as_raw(s: StreamId) -> sys::CUstream {
    s.0 as sys::CUstream
}

/// emm device memory lent to cudarc to read: `len` elements of `T` at `ptr`, ordered on
/// `stream`. Made by [`AsCudarc::cudarc`]; the memory stays borrowed while it lives.
#[derive(Debug)]
pub struct EmmSlice<'a, T> {
    ptr: sys::CUdeviceptr,
    len: usize,
    stream: Arc<CudaStream>,
    own: StreamId,
    _borrow: PhantomData<&'a [T]>,
}

/// emm device memory lent to cudarc to read and write. Made by [`AsCudarc::cudarc_mut`].
#[derive(Debug)]
pub struct EmmSliceMut<'a, T> {
    ptr: sys::CUdeviceptr,
    len: usize,
    stream: Arc<CudaStream>,
    own: StreamId,
    _borrow: PhantomData<&'a mut [T]>,
}

/// emm containers lent to cudarc.
pub trait AsCudarc<T> {
    /// A view to read, ordered on cudarc's `stream` (see the module docs for the cost when
    /// that is not the memory's own stream).
    ///
    /// # Errors
    ///
    /// The driver's, ordering the streams.
    fn cudarc(&self, stream: &Arc<CudaStream>) -> DriverResult<EmmSlice<'_, T>>;

    /// A view to read and write, ordered on cudarc's `stream`.
    ///
    /// # Errors
    ///
    /// The driver's, ordering the streams.
    fn cudarc_mut(&mut self, stream: &Arc<CudaStream>) -> DriverResult<EmmSliceMut<'_, T>>;
}

impl<T: Pod> AsCudarc<T> for DeviceVec<T> {
    fn cudarc(&self, stream: &Arc<CudaStream>) -> DriverResult<EmmSlice<'_, T>> {
        EmmSlice::lend(self.ptr().0, self.len(), self.stream(), stream)
    }

    fn cudarc_mut(&mut self, stream: &Arc<CudaStream>) -> DriverResult<EmmSliceMut<'_, T>> {
        EmmSliceMut::lend(self.ptr().0, self.len(), self.stream(), stream)
    }
}

impl AsCudarc<u8> for DeviceBuffer {
    fn cudarc(&self, stream: &Arc<CudaStream>) -> DriverResult<EmmSlice<'_, u8>> {
        EmmSlice::lend(self.ptr().0, self.size(), self.stream(), stream)
    }

    fn cudarc_mut(&mut self, stream: &Arc<CudaStream>) -> DriverResult<EmmSliceMut<'_, u8>> {
        EmmSliceMut::lend(self.ptr().0, self.size(), self.stream(), stream)
    }
}

/// The memory's stream waits for the view's before the view goes: emm may free or reuse the
/// memory on its own stream next. A failure here cannot be returned; it is reported by cudarc's
/// context as cudarc reports its own (`CudaContext::check_err`).
fn release(stream: &CudaStream, own: StreamId) {
    if order(as_raw(own), stream.cu_stream()).is_err() {
        // Ordering failed: the safe fallback is to wait for cudarc's work to finish.
        stream.context().record_err(stream.synchronize());
    }
}

/// A view's constructor, its release on drop and cudarc's traits, for both views.
macro_rules! cudarc_slice {
    ($view:ident) => {
        impl<T> $view<'_, T> {
            /// `len` elements at `ptr`, whose own emm stream is `own`, for cudarc's `stream`,
            /// which first waits for `own`.
            fn lend(
                ptr: sys::CUdeviceptr,
                len: usize,
                own: StreamId,
                stream: &Arc<CudaStream>,
            ) -> DriverResult<Self> {
                order(stream.cu_stream(), as_raw(own))?;
                Ok($view {
                    ptr,
                    len,
                    stream: Arc::clone(stream),
                    own,
                    _borrow: PhantomData,
                })
            }
        }

        impl<T> Drop for $view<'_, T> {
            fn drop(&mut self) {
                release(&self.stream, self.own);
            }
        }

        impl<T> DeviceSlice<T> for $view<'_, T> {
            fn len(&self) -> usize {
                self.len
            }

            fn stream(&self) -> &Arc<CudaStream> {
                &self.stream
            }
        }

        impl<T> DevicePtr<T> for $view<'_, T> {
            fn device_ptr<'a>(
                &'a self,
                stream: &'a CudaStream,
            ) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
                (self.ptr, join(&self.stream, stream))
            }
        }
    };
}

cudarc_slice!(EmmSlice);
cudarc_slice!(EmmSliceMut);

impl<T> DevicePtrMut<T> for EmmSliceMut<'_, T> {
    fn device_ptr_mut<'a>(
        &'a mut self,
        stream: &'a CudaStream,
    ) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        (self.ptr, join(&self.stream, stream))
    }
}

/// For a cudarc call on `stream`: nothing when it is the view's stream; else `stream` waits
/// for the view's stream now and is synchronized when the call is queued.
fn join<'a>(view: &CudaStream, stream: &'a CudaStream) -> SyncOnDrop<'a> {
    if view.cu_stream() == stream.cu_stream() {
        return SyncOnDrop::Sync(None);
    }
    stream.context().record_err(stream.join(view));
    SyncOnDrop::sync_stream(stream)
}

// SAFETY: the argument pushed is the address of the view's `CUdeviceptr` field, which lives
// as long as the borrow `'b`, longer than the launch builder `'a`, as cudarc's own views do.
unsafe impl<'a, 'b: 'a, 'c: 'b, T> PushKernelArg<&'b EmmSlice<'c, T>> for LaunchArgs<'a> {
    #[inline(always)]
    fn arg(&mut self, arg: &'b EmmSlice<'c, T>) -> &mut Self {
        self.arg(&arg.ptr)
    }
}

// SAFETY: as for `EmmSlice`.
unsafe impl<'a, 'b: 'a, 'c: 'b, T> PushKernelArg<&'b mut EmmSliceMut<'c, T>> for LaunchArgs<'a> {
    #[inline(always)]
    fn arg(&mut self, arg: &'b mut EmmSliceMut<'c, T>) -> &mut Self {
        self.arg(&arg.ptr)
    }
}
