//! [`Op`]: one step of a conformance case — every call the suite makes of a plugin.
//!
//! Operations name their targets by index ([`Pick`]) into what is live when they run, taken
//! modulo the number of candidates, and do nothing when there is none. Every operation is
//! therefore legal in every state: removing any step of a failing sequence leaves a sequence
//! that still runs, which is what lets shrinking find the shortest one (the role of
//! proptest-state-machine's preconditions, without a rejected case).

use std::fmt;

use serde::{Deserialize, Serialize};

/// Which of the live candidates an operation acts on (taken modulo their number).
pub type Pick = u16;

/// Which stream an operation uses: 0 is the legacy default stream, 1 to 3 the harness's own
/// non-blocking streams (taken modulo 4).
pub type Lane = u8;

/// Number of stream lanes a case has: the default stream and three of its own.
pub const LANES: usize = 4;

/// Power-of-two size classes [`Size::Class`] reaches: 1 B to 64 GiB.
pub const CLASSES: u8 = 37;

/// The units of [`Size::Edge`]: the alignment, a page, an allocation granule, 4 GiB (where a
/// size truncated to 32 bits wraps).
pub const EDGE_UNITS: [u64; 4] = [256, 4096, 2 << 20, 4 << 30];

/// The largest alignment a request may ask for, as its base-2 logarithm: 1 TiB, the largest
/// chunk the plugin ABI allows (`MAX_CHUNK_BYTES`).
pub const MAX_ALIGN_LOG: u8 = 40;

/// The alignments above 256 bytes the suite asks for, as base-2 logarithms: every power of two
/// from 512 B to 2 MiB (an allocation granule), then 1 GiB and the largest the ABI allows.
pub const ALIGN_CLASSES: [u8; 15] = [9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 30, 40];

/// The size of a request, as a class: the suite resolves it against the device's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Size {
    /// 1 byte.
    One,
    /// An odd size, `2n + 1` bytes.
    Odd(u16),
    /// `n + 1` pages of 4 KiB.
    Pages(u8),
    /// `n + 1` MiB.
    Mib(u8),
    /// 0 bytes: must be refused.
    Zero,
    /// The device's total memory less `n + 1` MiB: fits only when nearly nothing else is live.
    NearTotal(u8),
    /// An odd size in the power-of-two class `[2^exp, 2^(exp+1))` (`exp` modulo
    /// [`CLASSES`], so 1 B up to 64 GiB): `2^exp` plus an odd offset from `frac`.
    Class {
        /// The class.
        exp: u8,
        /// Picks the odd offset inside the class.
        frac: u16,
    },
    /// A boundary plus or minus one byte: `n + 1` units of 256 B, 4 KiB, 2 MiB or 4 GiB
    /// (`unit` modulo 4), plus `delta - 1` bytes (`delta` modulo 3).
    Edge {
        /// Which unit: alignment, page, allocation granule, 32-bit limit.
        unit: u8,
        /// Units, less one.
        n: u8,
        /// 0: one byte less, 1: exact, 2: one byte more.
        delta: u8,
    },
    /// 1 PiB: more than any device has (RMM's out-of-memory case).
    Absurd,
    /// `usize::MAX` bytes.
    Max,
}

impl Size {
    /// The size in bytes on a device with `total` bytes of memory.
    pub fn bytes(self, total: u64) -> usize {
        const MIB: u64 = 1 << 20;
        let b = match self {
            Size::One => 1,
            Size::Odd(n) => 2 * u64::from(n) + 1,
            Size::Pages(n) => 4096 * (u64::from(n) + 1),
            Size::Mib(n) => MIB * (u64::from(n) + 1),
            Size::Zero => 0,
            Size::NearTotal(n) => total.saturating_sub(MIB * (u64::from(n) + 1)).max(1),
            Size::Class { exp, frac } => {
                let base = 1u64 << (exp % CLASSES);
                base + (2 * u64::from(frac) + 1) % base
            }
            Size::Edge { unit, n, delta } => {
                let units = EDGE_UNITS[usize::from(unit % 4)] * (u64::from(n) + 1);
                (units + u64::from(delta % 3)).saturating_sub(1).max(1)
            }
            Size::Absurd => 1 << 50,
            Size::Max => return usize::MAX,
        };
        usize::try_from(b).unwrap_or(usize::MAX)
    }

    /// Whether the request is more than any device has: it must fail with out of memory.
    pub fn is_absurd(self) -> bool {
        matches!(self, Size::Absurd | Size::Max)
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Size::One => f.write_str("1 B"),
            Size::Odd(n) => write!(f, "{} B", 2 * u32::from(*n) + 1),
            Size::Pages(n) => write!(f, "{} pages", u32::from(*n) + 1),
            Size::Mib(n) => write!(f, "{} MiB", u32::from(*n) + 1),
            Size::Zero => f.write_str("0 B"),
            Size::NearTotal(n) => write!(f, "total - {} MiB", u32::from(*n) + 1),
            Size::Class { .. } | Size::Edge { .. } => {
                write!(f, "{} B", self.bytes(u64::MAX))
            }
            Size::Absurd => f.write_str("1 PiB"),
            Size::Max => f.write_str("usize::MAX"),
        }
    }
}

/// One operation of a case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "op")]
pub enum Op {
    /// `initialize()` again (the first allocation initializes on its own, as a context does).
    Initialize,
    /// A context reset: the suite drops every pointer and guard it holds, then `reset()`.
    Reset,
    /// `memalloc(size)`; the suite writes the new memory's first and last bytes.
    Memalloc {
        /// The request.
        size: Size,
    },
    /// `memalloc_async(size, stream)` (the stream-ordered extension).
    MemallocAsync {
        /// The request.
        size: Size,
        /// The stream it is for.
        lane: Lane,
    },
    /// A request of `size` aligned to `2^align` bytes through the plugin's device memory
    /// resource (`allocate_aligned`), where the manager offers one (a sandboxed plugin's
    /// resource carries the alignment to `emm_alloc`); elsewhere it does nothing, since the
    /// EMM contract's `memalloc` takes no alignment. Its pointer is held as `memalloc`'s are.
    MemallocAligned {
        /// The request.
        size: Size,
        /// The alignment's base-2 logarithm, 8 to [`MAX_ALIGN_LOG`] (clamped).
        align: u8,
    },
    /// Drops one pointer, view or IPC handle the suite holds.
    Drop {
        /// Which.
        pick: Pick,
    },
    /// `memfree_async(pointer, stream)` of an allocation with no other owner.
    FreeAsync {
        /// Which allocation.
        pick: Pick,
        /// The stream it is freed on.
        lane: Lane,
    },
    /// A view of part of a live allocation, kept as a pointer of its own.
    View {
        /// Which allocation.
        pick: Pick,
        /// Start of the view, modulo the allocation's size.
        start: u16,
    },
    /// A kernel on `lane` writes the allocation's first and last bytes with a new pattern.
    Write {
        /// Which allocation.
        pick: Pick,
        /// The stream the write runs on.
        lane: Lane,
    },
    /// Reads back every live allocation and compares it with what was written.
    Verify,
    /// `memhostalloc(size, mapped, portable, wc)`.
    Memhostalloc {
        /// The request.
        size: Size,
        /// Map into the device address space.
        mapped: bool,
        /// Pinned for every context.
        portable: bool,
        /// Write-combined.
        wc: bool,
    },
    /// `mempin` of a fresh pageable buffer of `size` bytes.
    Mempin {
        /// The buffer's size.
        size: Size,
        /// Also map it.
        mapped: bool,
    },
    /// `memallocmanaged(size, attach_global)`.
    Memallocmanaged {
        /// The request.
        size: Size,
        /// `CU_MEM_ATTACH_GLOBAL`.
        attach_global: bool,
    },
    /// `get_ipc_handle` of an allocation (or of a view `start` bytes into it), opened in a
    /// second process where the backend has one.
    GetIpcHandle {
        /// Which allocation.
        pick: Pick,
        /// Offset of the exported view, modulo the allocation's size (0: the whole of it).
        start: u16,
    },
    /// `get_memory_info()`.
    GetMemoryInfo,
    /// `defer_cleanup()`, kept until [`Op::EndDeferCleanup`] (guards nest).
    DeferCleanup,
    /// Drops the innermost guard.
    EndDeferCleanup,
    /// A `defer_cleanup` scope left early by an error (`memalloc(0)` inside it).
    DeferCleanupWithError,
    /// Records an event on `from` and makes `to` wait for it.
    RecordAndWait {
        /// The stream the event is recorded on.
        from: Lane,
        /// The stream that waits.
        to: Lane,
    },
    /// `threads` threads each allocate `allocs` blocks of `size` at once, write them, check
    /// them and free them.
    Concurrent {
        /// Number of threads, 2 to 4.
        threads: u8,
        /// Allocations per thread, 1 to 8.
        allocs: u8,
        /// Size of each.
        size: Size,
    },
    /// A producer thread allocates and writes on one stream; a consumer thread waits for its
    /// event on another, reads and frees there (RMM's producer/consumer test).
    ProducerConsumer {
        /// Number of items, 1 to 8.
        items: u8,
        /// Size of each.
        size: Size,
    },
    /// Drops every pointer and guard, then repeats the last request that ran out of memory:
    /// it must now succeed.
    FreeAllAndRetry,
    /// `rounds` rounds of the same allocations freed in a rotating order, with resets only
    /// during the warm-up: what the plugin holds after a round must stop growing.
    SteadyState {
        /// Rounds, at least 8.
        rounds: u16,
    },
}

/// An alignment's base-2 logarithm as a request may give it, clamped to 8 (256 B) to
/// [`MAX_ALIGN_LOG`].
pub fn align_log(align: u8) -> u8 {
    align.clamp(8, MAX_ALIGN_LOG)
}

impl Op {
    /// The operation's pick, for those that act on something live.
    pub fn pick_mut(&mut self) -> Option<&mut Pick> {
        match self {
            Op::Drop { pick }
            | Op::FreeAsync { pick, .. }
            | Op::View { pick, .. }
            | Op::Write { pick, .. }
            | Op::GetIpcHandle { pick, .. } => Some(pick),
            _ => None,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Initialize => f.write_str("initialize()"),
            Op::Reset => f.write_str("reset()"),
            Op::Memalloc { size } => write!(f, "memalloc({size})"),
            Op::MemallocAsync { size, lane } => write!(f, "memalloc_async({size}, lane {lane})"),
            Op::MemallocAligned { size, align } => write!(
                f,
                "allocate_aligned({size}, align {})",
                emm_core::units::Bytes(1u64 << align_log(*align))
            ),
            Op::Drop { pick } => write!(f, "drop(#{pick})"),
            Op::FreeAsync { pick, lane } => write!(f, "memfree_async(#{pick}, lane {lane})"),
            Op::View { pick, start } => write!(f, "view(#{pick}, {start}..)"),
            Op::Write { pick, lane } => write!(f, "write(#{pick}, lane {lane})"),
            Op::Verify => f.write_str("verify()"),
            Op::Memhostalloc {
                size,
                mapped,
                portable,
                wc,
            } => write!(
                f,
                "memhostalloc({size}, mapped={mapped}, portable={portable}, wc={wc})"
            ),
            Op::Mempin { size, mapped } => write!(f, "mempin({size}, mapped={mapped})"),
            Op::Memallocmanaged {
                size,
                attach_global,
            } => write!(f, "memallocmanaged({size}, attach_global={attach_global})"),
            Op::GetIpcHandle { pick, start } => write!(f, "get_ipc_handle(#{pick}, {start}..)"),
            Op::GetMemoryInfo => f.write_str("get_memory_info()"),
            Op::DeferCleanup => f.write_str("defer_cleanup() {"),
            Op::EndDeferCleanup => f.write_str("} // end defer_cleanup"),
            Op::DeferCleanupWithError => f.write_str("defer_cleanup() { memalloc(0)? }"),
            Op::RecordAndWait { from, to } => write!(f, "record(lane {from}); wait(lane {to})"),
            Op::Concurrent {
                threads,
                allocs,
                size,
            } => write!(f, "concurrent({threads} threads × {allocs} × {size})"),
            Op::ProducerConsumer { items, size } => {
                write!(f, "producer_consumer({items} × {size})")
            }
            Op::FreeAllAndRetry => f.write_str("free_all_and_retry()"),
            Op::SteadyState { rounds } => write!(f, "steady_state({rounds} rounds)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_resolve_against_the_device() {
        let total = 1 << 30;
        assert_eq!(Size::One.bytes(total), 1);
        assert_eq!(Size::Odd(2).bytes(total), 5);
        assert_eq!(Size::Pages(0).bytes(total), 4096);
        assert_eq!(Size::NearTotal(0).bytes(total), (1 << 30) - (1 << 20));
        assert_eq!(Size::NearTotal(0).bytes(1), 1, "never 0");
        assert_eq!(Size::Absurd.bytes(total), 1 << 50);
        assert!(Size::Max.is_absurd() && !Size::Mib(3).is_absurd());
        assert_eq!(Size::Class { exp: 0, frac: 9 }.bytes(total), 1);
        assert_eq!(Size::Class { exp: 3, frac: 1 }.bytes(total), 8 + 3);
        let top = Size::Class { exp: 36, frac: 7 }.bytes(total) as u64;
        assert!(top % 2 == 1 && (1 << 36..1 << 37).contains(&top));
        let edge = |unit, delta| Size::Edge { unit, n: 0, delta }.bytes(total) as u64;
        assert_eq!(edge(1, 0), 4095);
        assert_eq!(edge(2, 2), (2 << 20) + 1);
        assert_eq!(edge(3, 1), 4 << 30, "a size that truncates to 0 in 32 bits");
    }

    #[test]
    fn ops_round_trip_through_json() {
        let ops = vec![
            Op::Memalloc { size: Size::Odd(7) },
            Op::FreeAsync { pick: 2, lane: 1 },
            Op::Memhostalloc {
                size: Size::Pages(1),
                mapped: true,
                portable: false,
                wc: true,
            },
        ];
        let text = serde_json::to_string(&ops).unwrap();
        assert!(
            text.contains(r#"{"op":"memalloc","size":{"odd":7}}"#),
            "{text}"
        );
        let back: Vec<Op> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, ops);
        assert_eq!(ops[1].to_string(), "memfree_async(#2, lane 1)");
    }
}
