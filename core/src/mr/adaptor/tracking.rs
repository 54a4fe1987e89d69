//! [`TrackingAdaptor`]: every outstanding allocation, optionally with the backtrace of where it
//! was made, a leak report, and frees checked against what was allocated (RMM's
//! `tracking_resource_adaptor`).
//!
//! - **What it does**: keeps a table of the allocations it handed out and not yet took back.
//!   A free of a pointer not in the table (foreign, or already freed) or with a size other than
//!   the one allocated (or, for aligned memory, another alignment) is [`MrError::InvalidFree`], and never reaches the upstream: nothing
//!   changes (RMM only logs a wrong size and frees anyway). [`TrackingAdaptor::leak_report`]
//!   lists what is outstanding, oldest first.
//! - **Thread safety**: `Send + Sync` when the upstream is; the table sits behind one mutex,
//!   never held across the upstream call.
//! - **Streams**: passes the stream through and records the allocating stream in the report.
//! - **Clone and ownership**: owns its upstream by value; not `Clone`. Share it behind an `Arc`.
//! - **Use and cost**: leak detection in tests and at shutdown, catching wrong-size frees. One
//!   lock and one hash-table insert or remove per call; with backtraces on, a capture per
//!   allocation (microseconds): for debugging, not production.
//!
//! Rollback: an entry is removed before the upstream free (so two threads cannot both free
//! it) and put back if the upstream refuses.

use std::backtrace::Backtrace;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::driver::{DevicePtr, Driver, StreamId};
use crate::mr::adaptor::{lock, Request};
use crate::mr::{assert_resource, DeviceMemoryResource, MrError, MrResult, MIN_ALIGNMENT};
use crate::units::Bytes;

/// One allocation handed out and not yet freed.
#[derive(Debug, Clone)]
pub struct OutstandingAllocation {
    /// The pointer handed out.
    pub ptr: DevicePtr,
    /// Bytes requested.
    pub bytes: u64,
    /// The stream it was allocated on.
    pub stream: StreamId,
    /// Its position among all allocations through the adaptor, from 1.
    pub sequence: u64,
    /// Where it was allocated, when backtraces are on.
    pub backtrace: Option<Arc<Backtrace>>,
}

/// The allocations outstanding at one moment, oldest first. Its `Display` is the report.
#[derive(Debug, Clone)]
pub struct LeakReport {
    /// The adaptor's name.
    pub resource: &'static str,
    /// The outstanding allocations, in allocation order.
    pub allocations: Vec<OutstandingAllocation>,
}

impl LeakReport {
    /// Total bytes outstanding.
    pub fn bytes(&self) -> u64 {
        self.allocations.iter().map(|a| a.bytes).sum()
    }

    /// True when nothing is outstanding.
    pub fn is_empty(&self) -> bool {
        self.allocations.is_empty()
    }
}

impl fmt::Display for LeakReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.allocations.len();
        if n == 0 {
            return write!(f, "{}: no outstanding allocations", self.resource);
        }
        let bytes = self.bytes();
        write!(
            f,
            "{}: {n} outstanding allocation{}, {} ({bytes} bytes)",
            self.resource,
            if n == 1 { "" } else { "s" },
            Bytes(bytes),
        )?;
        for a in &self.allocations {
            write!(
                f,
                "\n  #{} {} {} ({} bytes) on {}",
                a.sequence,
                a.ptr,
                Bytes(a.bytes),
                a.bytes,
                a.stream
            )?;
            if let Some(bt) = &a.backtrace {
                f.write_str("\n    allocated at:")?;
                for line in bt.to_string().lines() {
                    write!(f, "\n      {line}")?;
                }
            }
        }
        Ok(())
    }
}

struct Entry {
    bytes: u64,
    /// The alignment asked for, at least [`MIN_ALIGNMENT`]: the free must give the same.
    alignment: usize,
    stream: StreamId,
    sequence: u64,
    backtrace: Option<Arc<Backtrace>>,
}

struct Table {
    live: HashMap<u64, Entry>,
    bytes: u64,
}

/// Tracks outstanding allocations; see the [module docs](self).
pub struct TrackingAdaptor<Up> {
    upstream: Up,
    capture_backtraces: bool,
    table: Mutex<Table>,
    sequence: AtomicU64,
}

impl<Up: DeviceMemoryResource> TrackingAdaptor<Up> {
    /// Tracks allocations through to `upstream`; `capture_backtraces` records where each was
    /// made (costly).
    pub fn new(upstream: Up, capture_backtraces: bool) -> Self {
        TrackingAdaptor {
            upstream,
            capture_backtraces,
            table: Mutex::new(Table {
                live: HashMap::new(),
                bytes: 0,
            }),
            sequence: AtomicU64::new(0),
        }
    }

    /// The upstream resource.
    pub fn upstream(&self) -> &Up {
        &self.upstream
    }

    /// Gives back the upstream resource; outstanding allocations stay allocated there.
    pub fn into_upstream(self) -> Up {
        self.upstream
    }

    /// Bytes outstanding (as requested).
    pub fn allocated_bytes(&self) -> u64 {
        lock(&self.table).bytes
    }

    /// Number of allocations outstanding.
    pub fn outstanding_count(&self) -> usize {
        lock(&self.table).live.len()
    }

    /// The allocations outstanding now, oldest first.
    ///
    /// # Time complexity
    ///
    /// O(n log n) in the number outstanding.
    pub fn outstanding(&self) -> Vec<OutstandingAllocation> {
        let mut v: Vec<OutstandingAllocation> = lock(&self.table)
            .live
            .iter()
            .map(|(&ptr, e)| OutstandingAllocation {
                ptr: DevicePtr(ptr),
                bytes: e.bytes,
                stream: e.stream,
                sequence: e.sequence,
                backtrace: e.backtrace.clone(),
            })
            .collect();
        v.sort_unstable_by_key(|a| a.sequence);
        v
    }

    /// What is outstanding now, as a report (empty when nothing leaked).
    pub fn leak_report(&self) -> LeakReport {
        LeakReport {
            resource: self.name(),
            allocations: self.outstanding(),
        }
    }
}

impl<Up: DeviceMemoryResource> super::Adaptor for TrackingAdaptor<Up> {
    type Upstream = Up;

    fn upstream(&self) -> &Up {
        &self.upstream
    }

    fn name(&self) -> &'static str {
        "TrackingAdaptor"
    }

    /// # Time complexity
    ///
    /// O(1) expected besides the upstream (one hash insert), plus a backtrace capture when on.
    fn allocate_request(&self, request: Request) -> MrResult<DevicePtr> {
        let ptr = request.allocate_from(&self.upstream)?;
        let bytes = request.bytes;
        let backtrace = self
            .capture_backtraces
            .then(|| Arc::new(Backtrace::force_capture()));
        let sequence = self.sequence.fetch_add(1, Ordering::Relaxed) + 1;
        let mut t = lock(&self.table);
        t.bytes += bytes as u64;
        t.live.insert(
            ptr.0,
            Entry {
                bytes: bytes as u64,
                alignment: request.effective_alignment(),
                stream: request.stream,
                sequence,
                backtrace,
            },
        );
        Ok(ptr)
    }

    /// # Time complexity
    ///
    /// O(1) expected besides the upstream (one hash lookup and remove).
    fn deallocate_request(&self, ptr: DevicePtr, request: Request) -> MrResult<()> {
        let bytes = request.bytes;
        let alignment = request.alignment.unwrap_or(MIN_ALIGNMENT);
        let entry = {
            let mut t = lock(&self.table);
            let refuse = |reason: String| MrError::InvalidFree {
                resource: "TrackingAdaptor",
                ptr,
                bytes: bytes as u64,
                reason,
            };
            match t.live.get(&ptr.0) {
                None => {
                    return Err(refuse(
                        "not outstanding: never allocated through this TrackingAdaptor, or \
                         already freed (a double free)"
                            .to_string(),
                    ))
                }
                Some(e) if e.bytes != bytes as u64 => {
                    return Err(refuse(format!(
                        "wrong size: allocation #{} on {} was {} bytes; free it with the size \
                         given to allocate",
                        e.sequence, e.stream, e.bytes
                    )))
                }
                Some(e) if e.alignment != request.effective_alignment() => {
                    return Err(refuse(format!(
                        "wrong alignment: allocation #{} on {} was aligned to {} bytes but is \
                         freed as aligned to {alignment}; free it as it was allocated",
                        e.sequence, e.stream, e.alignment
                    )))
                }
                Some(_) => {}
            }
            t.bytes -= bytes as u64;
            t.live.remove(&ptr.0)
        };
        request.deallocate_to(&self.upstream, ptr).inspect_err(|_| {
            if let Some(e) = entry {
                let mut t = lock(&self.table);
                t.bytes += e.bytes;
                t.live.insert(ptr.0, e);
            }
        })
    }
}

const _: () = {
    #[expect(dead_code, reason = "a compile-time check: it only has to type-check")]
    fn check<D: Driver>() {
        assert_resource::<TrackingAdaptor<crate::mr::CudaResource<D>>>();
    }
};
