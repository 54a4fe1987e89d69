//! [`ReplayReport`]: what replaying a log against a resource measured and found.

use std::fmt;
use std::time::Duration;

use crate::replay::LogAction;
use emm_core::mr::MrError;
use emm_core::units::Bytes;

/// How many failures the report's `Display` lists one by one.
pub const FAILURES_SHOWN: usize = 10;

/// An allocation of the log, by the line that made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoggedAllocation {
    /// The log line of the event.
    pub line: usize,
    /// The pointer in the log.
    pub pointer: u64,
    /// Bytes, as logged.
    pub size: u64,
    /// The stream, as logged.
    pub stream: u64,
}

/// A free whose size differs from the allocation's; the replay freed the allocated size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeMismatch {
    /// The log line of the free.
    pub line: usize,
    /// The pointer in the log.
    pub pointer: u64,
    /// Bytes allocated.
    pub allocated: u64,
    /// Bytes the log frees.
    pub freed: u64,
}

/// A call the resource under test refused during the replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayFailure {
    /// The log line of the event.
    pub line: usize,
    /// What was replayed.
    pub action: LogAction,
    /// Bytes.
    pub size: u64,
    /// The resource's error.
    pub error: MrError,
}

/// What a replay measured and found.
///
/// Time: `wall_time` is the whole replay loop (with, in per-thread mode, the hand-offs between
/// threads); `resource_time` sums only the time spent inside `allocate` and `deallocate`, the
/// allocator's own cost.
///
/// Memory: `peak_live_bytes` is the largest sum of live allocation sizes; `peak_held_bytes` is
/// the most the resource held from below while replaying, as the [`HeldProbe`] saw it; their
/// ratio is [`ReplayReport::fragmentation`].
///
/// Leaks: `leaks` are allocations the log never frees (the replay frees them at the end unless
/// told not to); `unknown_frees` are frees of pointers not live at the time (double frees,
/// foreign pointers, or frees of memory allocated before logging began).
///
/// [`HeldProbe`]: crate::replay::HeldProbe
#[derive(Debug, Clone, Default)]
pub struct ReplayReport {
    /// The resource replayed against.
    pub resource: &'static str,
    /// Events in the log.
    pub events: usize,
    /// Allocations replayed successfully.
    pub allocations: usize,
    /// Frees replayed successfully.
    pub frees: usize,
    /// `allocate failure` lines of the log, which the replay skips.
    pub logged_failures: usize,
    /// Zero-byte events, which the replay skips (every resource answers them without work).
    pub zero_byte_events: usize,
    /// Distinct thread ids in the log.
    pub threads: usize,
    /// Distinct streams in the log (each replayed on a stream of its own).
    pub streams: usize,
    /// Time of the whole replay loop.
    pub wall_time: Duration,
    /// Time inside the resource's `allocate` and `deallocate` calls.
    pub resource_time: Duration,
    /// Largest sum of live sizes during the replay.
    pub peak_live_bytes: u64,
    /// Largest number of live allocations during the replay.
    pub peak_live_count: usize,
    /// Most memory the resource held during the replay, when a probe measured it.
    pub peak_held_bytes: Option<u64>,
    /// Allocations the log never frees.
    pub leaks: Vec<LoggedAllocation>,
    /// Frees of pointers that were not live.
    pub unknown_frees: Vec<LoggedAllocation>,
    /// Frees with a size other than the allocation's.
    pub size_mismatches: Vec<SizeMismatch>,
    /// Calls the resource refused (out of memory, refused frees).
    pub failures: Vec<ReplayFailure>,
}

impl ReplayReport {
    /// Allocations and frees replayed (successful or not).
    pub fn ops(&self) -> usize {
        self.allocations + self.frees + self.failures.len()
    }

    /// Nanoseconds inside the resource per replayed operation.
    pub fn ns_per_op(&self) -> f64 {
        match self.ops() {
            0 => 0.0,
            n => self.resource_time.as_nanos() as f64 / n as f64,
        }
    }

    /// Peak memory held over peak live bytes (1.0 is perfect), when both are known.
    pub fn fragmentation(&self) -> Option<f64> {
        match (self.peak_held_bytes, self.peak_live_bytes) {
            (Some(held), live) if live > 0 => Some(held as f64 / live as f64),
            _ => None,
        }
    }

    /// Bytes the log never frees.
    pub fn leaked_bytes(&self) -> u64 {
        self.leaks.iter().map(|l| l.size).sum()
    }
}

impl fmt::Display for ReplayReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "replayed {} events against {}: {} allocations, {} frees, {} threads, {} streams",
            self.events, self.resource, self.allocations, self.frees, self.threads, self.streams
        )?;
        writeln!(
            f,
            "time: {:.3} ms wall, {:.3} ms in the resource ({:.0} ns per op)",
            self.wall_time.as_secs_f64() * 1e3,
            self.resource_time.as_secs_f64() * 1e3,
            self.ns_per_op()
        )?;
        write!(
            f,
            "memory: peak live {} in {} allocations",
            Bytes(self.peak_live_bytes),
            self.peak_live_count
        )?;
        match (self.peak_held_bytes, self.fragmentation()) {
            (Some(held), Some(frag)) => {
                writeln!(f, ", peak held {} (held/live {frag:.3})", Bytes(held))?
            }
            (Some(held), None) => writeln!(f, ", peak held {}", Bytes(held))?,
            _ => writeln!(f, ", peak held not measured")?,
        }
        write!(
            f,
            "leaks: {} allocations never freed ({}), {} frees of unknown pointers, {} size \
             mismatches",
            self.leaks.len(),
            Bytes(self.leaked_bytes()),
            self.unknown_frees.len(),
            self.size_mismatches.len()
        )?;
        if self.logged_failures + self.zero_byte_events > 0 {
            write!(
                f,
                "\nskipped: {} logged allocation failures, {} zero-byte events",
                self.logged_failures, self.zero_byte_events
            )?;
        }
        for e in self.failures.iter().take(FAILURES_SHOWN) {
            write!(
                f,
                "\nline {}: {} of {} failed: {}",
                e.line,
                e.action,
                Bytes(e.size),
                e.error
            )?;
        }
        if self.failures.len() > FAILURES_SHOWN {
            write!(
                f,
                "\n… and {} more failures",
                self.failures.len() - FAILURES_SHOWN
            )?;
        }
        Ok(())
    }
}
