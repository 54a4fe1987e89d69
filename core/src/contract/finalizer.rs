//! [`Finalizer`]: what runs when the last owner of a buffer goes, and [`Dealloc`], the
//! deallocations a finalizer hands to a [`DeallocSink`] (usually a `PendingDeallocs`).
//!
//! NBEP 7: "finalizer: A method that is called when the last reference to the
//! MemoryPointer object is released. Usually this will make a call to the external memory
//! management library to inform it that the memory is no longer required, and that it could
//! potentially be freed (though the EMM is not required to free it immediately)."

use std::fmt;
use std::sync::Arc;

use crate::driver::{DevicePtr, EventId, HostPtr, StreamId};
use crate::error::DriverError;

/// One deallocation waiting to run: what to release and how many bytes it frees.
#[non_exhaustive]
pub enum Dealloc {
    /// Device memory from a synchronous allocation (`cuMemFree`, or the manager's resource).
    Device {
        /// The base address.
        ptr: DevicePtr,
        /// Its size in bytes.
        bytes: u64,
    },
    /// Device memory from a stream-ordered allocation, freed on `stream` (`cuMemFreeAsync`).
    DeviceAsync {
        /// The base address.
        ptr: DevicePtr,
        /// Its size in bytes.
        bytes: u64,
        /// The stream the free is ordered on.
        stream: StreamId,
    },
    /// Managed memory (`cuMemFree` of `cuMemAllocManaged` memory).
    Managed {
        /// The base address.
        ptr: DevicePtr,
        /// Its size in bytes.
        bytes: u64,
    },
    /// Pinned host memory from `cuMemHostAlloc` (`cuMemFreeHost`).
    Host {
        /// The host address.
        ptr: HostPtr,
        /// Its size in bytes.
        bytes: u64,
    },
    /// A pinned range of user memory (`cuMemHostUnregister`). Unpinning frees no memory, so
    /// it counts 0 bytes against the threshold (as in Numba).
    Unpin {
        /// Start of the range.
        ptr: HostPtr,
        /// Its length in bytes.
        len: u64,
    },
    /// A stream (`cuStreamDestroy`).
    Stream(StreamId),
    /// An event (`cuEventDestroy`).
    Event(EventId),
    /// Anything else a context owns, e.g. a loaded module.
    Custom {
        /// What it is, for messages (`module my_kernels`).
        what: &'static str,
        /// Bytes it frees (0 when unknown).
        bytes: u64,
        /// Releases it.
        run: Box<dyn FnOnce() -> Result<(), DriverError> + Send>,
    },
}

impl Dealloc {
    /// Bytes this deallocation frees (counted against the pending-bytes threshold).
    pub fn bytes(&self) -> u64 {
        match self {
            Dealloc::Device { bytes, .. }
            | Dealloc::DeviceAsync { bytes, .. }
            | Dealloc::Managed { bytes, .. }
            | Dealloc::Host { bytes, .. }
            | Dealloc::Custom { bytes, .. } => *bytes,
            Dealloc::Unpin { .. } | Dealloc::Stream(_) | Dealloc::Event(_) => 0,
        }
    }

    /// Whether this is the unpinning of a host range overlapping `[ptr, ptr + bytes)`.
    pub fn unpins_overlapping(&self, ptr: HostPtr, bytes: u64) -> bool {
        match self {
            Dealloc::Unpin { ptr: p, len } => {
                p.0 < ptr.0.saturating_add(bytes) && ptr.0 < p.0.saturating_add(*len)
            }
            _ => false,
        }
    }
}

impl fmt::Debug for Dealloc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dealloc::Device { ptr, bytes } => write!(f, "Device({ptr}, {bytes})"),
            Dealloc::DeviceAsync { ptr, bytes, stream } => {
                write!(f, "DeviceAsync({ptr}, {bytes}, {stream})")
            }
            Dealloc::Managed { ptr, bytes } => write!(f, "Managed({ptr}, {bytes})"),
            Dealloc::Host { ptr, bytes } => write!(f, "Host({ptr}, {bytes})"),
            Dealloc::Unpin { ptr, len } => write!(f, "Unpin({ptr}, {len})"),
            Dealloc::Stream(s) => write!(f, "Stream({s})"),
            Dealloc::Event(e) => write!(f, "Event({e})"),
            Dealloc::Custom { what, bytes, .. } => write!(f, "Custom({what}, {bytes})"),
        }
    }
}

/// Where finalizers send deallocations: a `PendingDeallocs` that defers them, or a manager
/// that releases them at once (to its resource). `add` never fails: a failure is recorded by
/// the sink and reported by its next fallible call.
pub trait DeallocSink: Send + Sync {
    /// Takes `item`, releasing it now or later.
    fn add(&self, item: Dealloc);
}

enum Kind {
    User(Box<dyn FnOnce() + Send>),
    Enqueue(Arc<dyn DeallocSink>, Dealloc),
}

/// What runs, exactly once, when the last owner of a buffer (including every view) is dropped.
///
/// Either a user's closure (as Numba's `test_user_extension` passes `finalizer=dtor`), or a
/// [`Dealloc`] handed to a [`DeallocSink`] — the built-in managers' form, which costs no
/// allocation beyond the pointer's own.
pub struct Finalizer(Kind);

impl Finalizer {
    /// A finalizer that calls `f`.
    pub fn new(f: impl FnOnce() + Send + 'static) -> Self {
        Finalizer(Kind::User(Box::new(f)))
    }

    /// A finalizer that hands `item` to `sink`.
    pub fn enqueue(sink: Arc<dyn DeallocSink>, item: Dealloc) -> Self {
        Finalizer(Kind::Enqueue(sink, item))
    }

    /// Runs the finalizer.
    pub fn run(self) {
        match self.0 {
            Kind::User(f) => f(),
            Kind::Enqueue(sink, item) => sink.add(item),
        }
    }

    /// The sink and deallocation, for a finalizer made by [`Finalizer::enqueue`]. A manager
    /// uses it to recognise its own pointers.
    pub fn as_enqueued(&self) -> Option<(&Arc<dyn DeallocSink>, &Dealloc)> {
        match &self.0 {
            Kind::Enqueue(sink, item) => Some((sink, item)),
            Kind::User(_) => None,
        }
    }

    /// The sink and deallocation, taken apart (so a manager can send the deallocation
    /// elsewhere, e.g. free on another stream); `Err(self)` for a user finalizer.
    pub fn into_enqueued(self) -> Result<(Arc<dyn DeallocSink>, Dealloc), Finalizer> {
        match self.0 {
            Kind::Enqueue(sink, item) => Ok((sink, item)),
            kind @ Kind::User(_) => Err(Finalizer(kind)),
        }
    }

    /// Whether this finalizer hands its deallocation to `sink` (the same object).
    pub fn targets(&self, sink: &Arc<dyn DeallocSink>) -> bool {
        self.as_enqueued()
            .is_some_and(|(s, _)| std::ptr::addr_eq(Arc::as_ptr(s), Arc::as_ptr(sink)))
    }
}

impl fmt::Debug for Finalizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Kind::User(_) => f.write_str("Finalizer(user)"),
            Kind::Enqueue(_, item) => write!(f, "Finalizer(enqueue {item:?})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    struct Log(Mutex<Vec<String>>);
    impl DeallocSink for Log {
        fn add(&self, item: Dealloc) {
            self.0.lock().unwrap().push(format!("{item:?}"));
        }
    }

    #[test]
    fn enqueue_hands_the_item_to_its_sink_and_targets_only_it() {
        let log = Arc::new(Log(Mutex::new(Vec::new())));
        let sink: Arc<dyn DeallocSink> = log.clone();
        let other: Arc<dyn DeallocSink> = Arc::new(Log(Mutex::new(Vec::new())));
        let f = Finalizer::enqueue(
            sink.clone(),
            Dealloc::Device {
                ptr: DevicePtr(0x100),
                bytes: 64,
            },
        );
        assert!(f.targets(&sink));
        assert!(!f.targets(&other));
        f.run();
        assert_eq!(*log.0.lock().unwrap(), ["Device(dptr:0x100, 64)"]);
        assert!(!Finalizer::new(|| ()).targets(&sink));
    }

    #[test]
    fn unpin_overlap_is_a_half_open_interval_test() {
        let d = Dealloc::Unpin {
            ptr: HostPtr(1000),
            len: 100,
        };
        assert!(d.unpins_overlapping(HostPtr(1000), 1));
        assert!(d.unpins_overlapping(HostPtr(950), 51));
        assert!(!d.unpins_overlapping(HostPtr(950), 50));
        assert!(!d.unpins_overlapping(HostPtr(1100), 10));
        assert!(!Dealloc::Stream(StreamId(1)).unpins_overlapping(HostPtr(0), u64::MAX));
        assert_eq!(d.bytes(), 0, "unpinning frees no memory");
    }
}
