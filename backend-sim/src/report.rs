//! What the simulator saw go wrong, and what was left behind.

use std::fmt;

use emm_core::units::Bytes;

/// A rule of the CUDA programming model that a caller broke. The call that broke it also
/// returns an error where CUDA would; races and leaks are only reported, as CUDA cannot see them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Violation {
    /// An access to memory that was freed.
    UseAfterFree {
        /// The call that made the access.
        call: &'static str,
        /// The address accessed.
        addr: u64,
        /// The caller tag.
        caller: &'static str,
    },
    /// A free of memory already freed.
    DoubleFree {
        /// The free call.
        call: &'static str,
        /// The pointer freed twice.
        addr: u64,
        /// The caller tag.
        caller: &'static str,
    },
    /// A free of a pointer that is not the base of a live allocation of the right kind.
    InvalidFree {
        /// The free call.
        call: &'static str,
        /// The pointer.
        addr: u64,
        /// Why it is not freeable.
        why: String,
        /// The caller tag.
        caller: &'static str,
    },
    /// An access that runs past the end of its allocation, or touches no allocation at all.
    OutOfBounds {
        /// The call that made the access.
        call: &'static str,
        /// The first address accessed.
        addr: u64,
        /// The number of bytes accessed.
        len: u64,
        /// The caller tag.
        caller: &'static str,
    },
    /// A kernel touched another device's memory without peer access enabled.
    PeerAccess {
        /// The call that made the access.
        call: &'static str,
        /// The allocation touched.
        addr: u64,
        /// The caller tag.
        caller: &'static str,
        /// Which devices.
        reason: String,
    },
    /// Two accesses to the same bytes from different streams (or a stream and the host), at
    /// least one a write, with no ordering between them (event wait or synchronize).
    Race {
        /// The first byte both touched.
        addr: u64,
        /// The earlier access: actor and operation.
        first: String,
        /// The later access: actor and operation.
        second: String,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::UseAfterFree { call, addr, caller } => {
                write!(f, "use after free: {call} by [{caller}] touched freed memory at {addr:#x}")
            }
            Violation::DoubleFree { call, addr, caller } => {
                write!(f, "double free: {call} by [{caller}] freed {addr:#x} again")
            }
            Violation::InvalidFree { call, addr, why, caller } => {
                write!(f, "invalid free: {call} by [{caller}] of {addr:#x}: {why}")
            }
            Violation::OutOfBounds { call, addr, len, caller } => write!(
                f,
                "out of bounds: {call} by [{caller}] touched {len} bytes at {addr:#x}, past the end of any allocation"
            ),
            Violation::PeerAccess { call, addr, caller, reason } => {
                write!(f, "peer access: {call} by [{caller}] at {addr:#x}: {reason}")
            }
            Violation::Race { addr, first, second } => write!(
                f,
                "race at {addr:#x}: {first} and then {second} with no event wait or synchronize between them"
            ),
        }
    }
}

/// Live resources of one kind at the time of the report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outstanding {
    /// How many.
    pub count: u64,
    /// Their bytes (0 for streams and events).
    pub bytes: u64,
}

/// One allocation still live at the time of the report, and who made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leak {
    /// Its address.
    pub addr: u64,
    /// Its size in bytes.
    pub size: u64,
    /// What kind of memory it is.
    pub kind: &'static str,
    /// The caller tag active when it was allocated.
    pub caller: &'static str,
}

/// How many live allocations a report lists one by one.
pub const LEAKS_LISTED: usize = 32;

/// The simulator's report: every violation seen, and what is still held.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimReport {
    /// Violations in the order they happened.
    pub violations: Vec<Violation>,
    /// The first [`LEAKS_LISTED`] live allocations, oldest address first.
    pub leaks: Vec<Leak>,
    /// Live `cuMemAlloc` and stream-ordered allocations.
    pub device_memory: Outstanding,
    /// Memory reserved by driver pools but not allocated from them.
    pub pool_reserved_free: Outstanding,
    /// Live managed allocations.
    pub managed_memory: Outstanding,
    /// Live pinned host allocations.
    pub pinned_memory: Outstanding,
    /// Live host registrations.
    pub registrations: Outstanding,
    /// Live pageable host allocations.
    pub pageable_memory: Outstanding,
    /// IPC handles opened and not closed.
    pub open_ipc_handles: Outstanding,
    /// Created and not destroyed streams.
    pub streams: Outstanding,
    /// Created and not destroyed events.
    pub events: Outstanding,
    /// Created and not destroyed driver pools (default pools excluded).
    pub pools: Outstanding,
    /// Address reservations not freed (their bytes are address space, not memory).
    pub reservations: Outstanding,
    /// Mappings of physical memory not unmapped.
    pub mappings: Outstanding,
    /// Physical memory from `cuMemCreate` not released.
    pub physical_memory: Outstanding,
}

impl SimReport {
    /// Bytes still allocated from the driver (device, physical, managed, pinned, registered).
    pub fn leaked_bytes(&self) -> u64 {
        self.device_memory.bytes
            + self.physical_memory.bytes
            + self.managed_memory.bytes
            + self.pinned_memory.bytes
            + self.registrations.bytes
    }

    /// True when nothing is held and nothing was violated.
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty() && self.nothing_held()
    }

    /// True when no memory, reservation, mapping, handle, stream, event or pool is held (pool
    /// memory that is reserved but free does not count: the driver releases it at the next
    /// synchronization).
    pub fn nothing_held(&self) -> bool {
        let zero = Outstanding::default();
        [
            self.device_memory,
            self.managed_memory,
            self.pinned_memory,
            self.registrations,
            self.pageable_memory,
            self.open_ipc_handles,
            self.streams,
            self.events,
            self.pools,
            self.reservations,
            self.mappings,
            self.physical_memory,
        ]
        .iter()
        .all(|o| *o == zero)
    }

    /// The races among the violations.
    pub fn races(&self) -> impl Iterator<Item = &Violation> {
        self.violations
            .iter()
            .filter(|v| matches!(v, Violation::Race { .. }))
    }
}

impl fmt::Display for SimReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "violations: {}", self.violations.len())?;
        for v in &self.violations {
            writeln!(f, "  - {v}")?;
        }
        let rows = [
            ("device memory", self.device_memory),
            ("pool reserved, free", self.pool_reserved_free),
            ("managed memory", self.managed_memory),
            ("pinned memory", self.pinned_memory),
            ("registered host memory", self.registrations),
            ("pageable memory", self.pageable_memory),
            ("open IPC handles", self.open_ipc_handles),
            ("streams", self.streams),
            ("events", self.events),
            ("pools", self.pools),
            ("address reservations", self.reservations),
            ("mappings", self.mappings),
            ("physical memory", self.physical_memory),
        ];
        for (name, o) in rows {
            writeln!(f, "{name:>24}: {} live, {}", o.count, Bytes(o.bytes))?;
        }
        for l in &self.leaks {
            writeln!(
                f,
                "  live: {} at {:#x}, {} bytes, allocated by [{}]",
                l.kind, l.addr, l.size, l.caller
            )?;
        }
        Ok(())
    }
}
