//! [`PoolOptions`], [`Growth`] and [`Backing`]: how a `PoolResource` is sized and where its
//! memory comes from.

/// How much a pool asks its upstream for when no free block fits a request. Chunks are always
/// rounded up to 2 MiB (the driver's large-page granularity) and never smaller than the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Growth {
    /// Exactly the request (rounded to 2 MiB): the least memory held, the most upstream calls.
    Exact,
    /// At least `held / divisor`: geometric growth, few upstream calls, up to `1/divisor` of
    /// the pool held beyond need.
    Fraction {
        /// The pool grows by at least 1/`divisor` of what it holds.
        divisor: u64,
    },
    /// At least `bytes` per chunk.
    Fixed {
        /// The smallest chunk.
        bytes: u64,
    },
}

/// Where a pool's memory comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backing {
    /// One reserved virtual address range grown by mapping physical memory at its end, and
    /// shrunk by unmapping wholly free granules there (an expandable segment, as PyTorch's
    /// `expandable_segments`): blocks coalesce across what would be chunk boundaries. Taken
    /// from the driver directly (`cuMemAddressReserve`, `cuMemCreate`, `cuMemMap`), so only
    /// over an upstream that is driver-backed
    /// ([`DeviceMemoryResource::driver_backed`](crate::mr::DeviceMemoryResource::driver_backed))
    /// and a driver with virtual memory management; otherwise the pool uses
    /// [`Backing::Chunks`]. Its memory cannot be exported with `cuIpcGetMemHandle`.
    Expandable,
    /// [`Backing::Expandable`], and free memory anywhere in the segment goes back too: before
    /// it maps more than it ever had mapped (or more than 1 % over the most live bytes seen),
    /// the segment unmaps the handles that free blocks wholly cover, once the device is done
    /// with them, and maps into such holes later, merged with the free blocks beside them.
    /// Physical memory then follows live bytes rather than the address range (real training
    /// traces: 1.001 to 1.014 × peak live on the simulated GPU, against 1.001 to 1.231 for
    /// [`Backing::Expandable`]), at the cost of more driver calls: 6 to 233 `cuMemCreate`,
    /// `cuMemMap`, `cuMemUnmap` and `cuMemRelease` calls per 1 000 operations on those traces
    /// (`Expandable`: 6 to 143). Moves take at most [`PoolOptions::move_share`] of the host's
    /// time: a loop that does nothing but allocate (W2) stops moving and holds about what
    /// `Expandable` holds.
    ExpandableTight,
    /// Chunks allocated from the upstream resource, one per growth, each given back whole.
    Chunks,
}

/// The sizing of a `PoolResource`: initial size, maximum size, growth policy, backing.
///
/// # Examples
///
/// ```
/// use emm_core::mr::{Growth, PoolOptions};
///
/// let o = PoolOptions::default().initial_size(1 << 30).maximum_size(4 << 30);
/// assert_eq!(o.initial_size, 1 << 30);
/// assert_eq!(o.maximum_size, Some(4 << 30));
/// assert_eq!(o.growth, PoolOptions::DEFAULT_GROWTH);
/// assert_eq!(o.backing, PoolOptions::DEFAULT_BACKING);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolOptions {
    /// Bytes taken from upstream when the pool is built (0: none; grow on demand).
    pub initial_size: u64,
    /// The most the pool holds from upstream (`None`: no limit but the upstream's).
    pub maximum_size: Option<u64>,
    /// How the pool grows.
    pub growth: Growth,
    /// Where the pool's memory comes from.
    pub backing: Backing,
    /// The most of the host's time a [`Backing::ExpandableTight`] segment spends moving
    /// memory, in parts per thousand (`None`: no bound); past it the segment maps more instead.
    pub move_share: Option<u16>,
}

impl PoolOptions {
    /// The default growth policy, chosen by measurement on W1, W2 and W3 (the book's "Resources and adaptors").
    pub const DEFAULT_GROWTH: Growth = Growth::Exact;

    /// The default backing, chosen by measurement on W1, W2 and W3 (the book's "Resources and adaptors").
    pub const DEFAULT_BACKING: Backing = Backing::Expandable;

    /// The most of the host's time over which a tight segment's unspent share saves up:
    /// moves that waited while ten seconds went by may then take those seconds' share at
    /// once, no more. Real traces move in bursts after their warm-up (45 ms of moves within
    /// 100 ms of fine-tuning on the simulated GPU, a few times that on an H200), which a
    /// one-second window at 5 % refused.
    pub const MOVE_SHARE_WINDOW_NS: u64 = 10_000_000_000;

    /// The default share of the host's time a tight segment spends moving memory: 5 %.
    /// Real training and inference traces spend less (the book's "Resources and adaptors"); a
    /// loop that only allocates would spend nearly all of its time.
    pub const DEFAULT_MOVE_SHARE: Option<u16> = Some(50);

    /// Sets the bytes taken from upstream at construction.
    ///
    /// Default: 0 (no preallocation).
    pub fn initial_size(mut self, bytes: u64) -> Self {
        self.initial_size = bytes;
        self
    }

    /// Sets the most the pool may hold from upstream.
    ///
    /// Default: no limit.
    pub fn maximum_size(mut self, bytes: u64) -> Self {
        self.maximum_size = Some(bytes);
        self
    }

    /// Sets the growth policy.
    ///
    /// Default: [`PoolOptions::DEFAULT_GROWTH`].
    pub fn growth(mut self, growth: Growth) -> Self {
        self.growth = growth;
        self
    }

    /// Sets where the pool's memory comes from.
    ///
    /// Default: [`PoolOptions::DEFAULT_BACKING`].
    pub fn backing(mut self, backing: Backing) -> Self {
        self.backing = backing;
        self
    }

    /// Sets the most of the host's time, in parts per thousand of the time that passes on the
    /// driver's clock ([`Driver::host_clock_ns`](crate::driver::Driver::host_clock_ns)), that
    /// a [`Backing::ExpandableTight`] segment spends moving memory from free blocks to where
    /// requests go; `None` moves whatever the time. Moves refused map more memory instead, so
    /// held memory rises toward what [`Backing::Expandable`] holds. Values above 1000 count as
    /// 1000. The named chains ([`crate::mr::named`]) take it from `EMM_MOVE_SHARE`, in
    /// percent.
    ///
    /// Default: [`PoolOptions::DEFAULT_MOVE_SHARE`].
    pub fn move_share(mut self, permille: Option<u16>) -> Self {
        self.move_share = permille.map(|p| p.min(1000));
        self
    }
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            initial_size: 0,
            maximum_size: None,
            growth: Self::DEFAULT_GROWTH,
            backing: Self::DEFAULT_BACKING,
            move_share: Self::DEFAULT_MOVE_SHARE,
        }
    }
}
