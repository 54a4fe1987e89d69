//! [`AlignedAdaptor`]: any power-of-two alignment, above the 256 bytes every resource gives,
//! by over-allocating (RMM's `aligned_resource_adaptor`).
//!
//! - **What it does**: for an alignment `a` above [`MIN_ALIGNMENT`] it asks the upstream for
//!   `bytes + a - 256` bytes (the upstream's pointer is 256-aligned, so an `a`-aligned address
//!   lies within the first `a - 256` bytes), returns the first `a`-aligned address inside, and
//!   remembers the upstream's pointer when the two differ. A free recomputes the upstream size
//!   from `bytes` and the alignment, so the table holds only shifted pointers.
//!   [`AlignedAdaptor::allocate_aligned`](DeviceMemoryResource::allocate_aligned) honours any
//!   power of two; [`AlignedAdaptor::with_alignment`] also aligns plain `allocate` calls of at
//!   least a threshold size, as RMM's adaptor does.
//! - **Thread safety**: `Send + Sync` when the upstream is; the table of shifted pointers sits
//!   behind a mutex, taken only for over-aligned calls.
//! - **Streams**: passes the stream through.
//! - **Clone and ownership**: owns its upstream by value; not `Clone`.
//! - **Use and cost**: buffers that need large alignment (2 MiB pages, IPC granularity, vector
//!   loads). Calls at 256 go straight through; an over-aligned call wastes up to `a - 256`
//!   bytes and costs a lock and, when shifted, a hash insert.
//!
//! Memory must be freed with the size and alignment it was allocated with: the size of the
//! upstream allocation is computed from them. A shifted pointer freed at another alignment is
//! [`MrError::InvalidFree`]; for the rest only the upstream can tell (put a `TrackingAdaptor`
//! in front to check every free).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::driver::{DevicePtr, Driver};
use crate::mr::adaptor::{align_up, lock, Request};
use crate::mr::{
    assert_resource, check_alignment, DeviceMemoryResource, MrError, MrResult, MIN_ALIGNMENT,
};

/// Where a shifted allocation really starts.
#[derive(Clone, Copy)]
struct Shifted {
    base: u64,
    alignment: usize,
}

/// Aligns allocations to any power of two; see the [module docs](self).
pub struct AlignedAdaptor<Up> {
    upstream: Up,
    /// The alignment of plain `allocate` calls of at least `threshold` bytes.
    alignment: usize,
    threshold: usize,
    /// Returned (aligned) pointer → the upstream's pointer and the alignment, for shifted
    /// allocations only.
    shifted: Mutex<HashMap<u64, Shifted>>,
}

impl<Up: DeviceMemoryResource> AlignedAdaptor<Up> {
    /// Honours any power-of-two alignment given to `allocate_aligned`; plain `allocate` calls
    /// go straight through.
    pub fn new(upstream: Up) -> Self {
        AlignedAdaptor {
            upstream,
            alignment: MIN_ALIGNMENT,
            threshold: 0,
            shifted: Mutex::new(HashMap::new()),
        }
    }

    /// Also aligns plain `allocate` calls of at least `threshold` bytes to `alignment`.
    ///
    /// # Errors
    ///
    /// [`MrError::InvalidArgument`] when `alignment` is not a power of two.
    pub fn with_alignment(upstream: Up, alignment: usize, threshold: usize) -> MrResult<Self> {
        check_alignment("AlignedAdaptor", 0, alignment, usize::MAX)?;
        Ok(AlignedAdaptor {
            alignment: alignment.max(MIN_ALIGNMENT),
            threshold,
            ..AlignedAdaptor::new(upstream)
        })
    }

    /// The upstream resource.
    pub fn upstream(&self) -> &Up {
        &self.upstream
    }

    /// Gives back the upstream resource.
    pub fn into_upstream(self) -> Up {
        self.upstream
    }

    /// The alignment of plain allocations of at least [`AlignedAdaptor::threshold`] bytes.
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// The size from which plain allocations get [`AlignedAdaptor::alignment`].
    pub fn threshold(&self) -> usize {
        self.threshold
    }

    /// Number of allocations whose pointer is shifted from the upstream's.
    pub fn shifted_count(&self) -> usize {
        lock(&self.shifted).len()
    }

    /// The alignment used for `bytes` asked at `alignment`: the stronger of the two rules.
    #[inline]
    fn effective(&self, bytes: usize, alignment: usize) -> usize {
        let default = if bytes >= self.threshold {
            self.alignment
        } else {
            MIN_ALIGNMENT
        };
        alignment.max(default)
    }

    /// The size asked of the upstream for `bytes` at `alignment` (above 256), if it fits.
    #[inline]
    fn upstream_size(bytes: usize, alignment: usize) -> Option<usize> {
        bytes.checked_add(alignment - MIN_ALIGNMENT)
    }
}

impl<Up: DeviceMemoryResource> super::Adaptor for AlignedAdaptor<Up> {
    type Upstream = Up;

    /// Any power of two: [`MrError::InvalidArgument`] for any other alignment, and
    /// [`MrError::OutOfMemory`] when the padded size does not fit in `usize`.
    const HONOURS_ANY_ALIGNMENT: bool = true;

    fn upstream(&self) -> &Up {
        &self.upstream
    }

    fn name(&self) -> &'static str {
        "AlignedAdaptor"
    }

    /// # Time complexity
    ///
    /// O(1) expected besides the upstream.
    fn allocate_request(&self, request: Request) -> MrResult<DevicePtr> {
        let Request { bytes, stream, .. } = request;
        let alignment = self.effective(bytes, request.effective_alignment());
        if alignment <= MIN_ALIGNMENT {
            return self.upstream.allocate(bytes, stream);
        }
        let oom = || MrError::OutOfMemory {
            resource: "AlignedAdaptor",
            requested: bytes as u64,
            available: None,
        };
        let size = Self::upstream_size(bytes, alignment).ok_or_else(oom)?;
        let base = self.upstream.allocate(size, stream)?;
        let Some(aligned) = align_up(base.0, alignment as u64) else {
            // Cannot happen for a real address; give the memory back rather than lose it.
            let _ = self.upstream.deallocate(base, size, stream);
            return Err(oom());
        };
        if aligned != base.0 {
            lock(&self.shifted).insert(
                aligned,
                Shifted {
                    base: base.0,
                    alignment,
                },
            );
        }
        Ok(DevicePtr(aligned))
    }

    fn deallocate_request(&self, ptr: DevicePtr, request: Request) -> MrResult<()> {
        let Request { bytes, stream, .. } = request;
        let alignment = self.effective(bytes, request.effective_alignment());
        if alignment <= MIN_ALIGNMENT {
            return self.upstream.deallocate(ptr, bytes, stream);
        }
        let Some(size) = Self::upstream_size(bytes, alignment) else {
            return Err(MrError::InvalidFree {
                resource: "AlignedAdaptor",
                ptr,
                bytes: bytes as u64,
                reason: format!(
                    "{bytes} bytes at alignment {alignment} can never have been allocated"
                ),
            });
        };
        let shifted = {
            let mut table = lock(&self.shifted);
            match table.get(&ptr.0) {
                Some(s) if s.alignment != alignment => {
                    return Err(MrError::InvalidFree {
                        resource: "AlignedAdaptor",
                        ptr,
                        bytes: bytes as u64,
                        reason: format!(
                            "allocated at alignment {} but freed at {alignment}; free it with \
                             the alignment it was allocated with",
                            s.alignment
                        ),
                    });
                }
                Some(_) => table.remove(&ptr.0),
                None => None,
            }
        };
        let base = shifted.map_or(ptr, |s| DevicePtr(s.base));
        self.upstream
            .deallocate(base, size, stream)
            .inspect_err(|_| {
                if let Some(s) = shifted {
                    lock(&self.shifted).insert(ptr.0, s);
                }
            })
    }
}

const _: () = {
    #[expect(dead_code, reason = "a compile-time check: it only has to type-check")]
    fn check<D: Driver>() {
        assert_resource::<AlignedAdaptor<crate::mr::CudaResource<D>>>();
    }
};
