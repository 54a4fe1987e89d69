//! [`CheckId`] and [`CHECKS`]: the named checks, each with the sentence it enforces and where
//! that sentence is written: NBEP 7, Numba's EMM plugin reference, RMM's documentation, the
//! PyTorch unified-memory RFC (cited by URL), or emm's plugin ABI.
//!
//! The assertions themselves are in [`crate::assertions`] (one `check_<rule>` per sentence);
//! this file is the catalogue `emm list` prints and every report follows.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::backend::Observes;

/// One named check of the suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CheckId {
    /// The plugin reports interface version 1.
    InterfaceVersion,
    /// `initialize` may be repeated and keeps earlier state.
    InitializeKeepsState,
    /// `reset` may come before `initialize`.
    ResetBeforeInitialize,
    /// `reset` frees everything the manager holds.
    ResetFreesEverything,
    /// Every finalizer runs exactly once; teardown leaks nothing.
    FinalizerRunsOnce,
    /// `memalloc` pointers are 256-byte aligned; an aligned request's, aligned as asked.
    MemallocAligned,
    /// `memalloc` memory is device memory of at least the requested size.
    MemallocInDeviceMemory,
    /// Live allocations never overlap.
    MemallocNeverOverlaps,
    /// Writes to one allocation never change another.
    WritesStayInTheirAllocation,
    /// Size 0 is refused with an error.
    ZeroSizeIsAnError,
    /// Out of memory is an error that leaves the manager usable.
    OutOfMemoryIsAnError,
    /// Out of memory is answered only when the upstream refused the plugin in that call.
    OutOfMemoryIsHonest,
    /// `memhostalloc` honours `mapped`, `portable` and `wc`.
    MemhostallocHonoursFlags,
    /// `mempin` honours `mapped`; the finalizer unpins.
    MempinUnpinsInFinalizer,
    /// `memallocmanaged` gives one address for host and device, or says it is unsupported.
    MemallocmanagedIsUnified,
    /// `get_memory_info` gives free ≤ total, or says it is unsupported.
    GetMemoryInfoConsistent,
    /// An IPC handle's base plus offset addresses the exported bytes.
    IpcHandleAddressesSameBytes,
    /// `defer_cleanup` guards nest and are released on every path.
    DeferCleanupNests,
    /// Every device allocation is made by a layer of the plugin.
    OnlyThePluginAllocates,
    /// Memory freed on one stream reaches another only after an ordering.
    StreamOrderedReuse,
    /// Over many cycles of the same requests, what the plugin holds stops growing.
    HeldBytesStaySteady,
    /// Over many cycles of the same requests, a sandboxed plugin's own memory stops growing.
    GuestMemoryStaysSteady,
    /// A sandboxed plugin's own statistics agree with what the host knows.
    StatsAgreeWithTheHost,
    /// Threads never receive overlapping memory.
    ConcurrentUseNeverOverlaps,
    /// Producer and consumer threads on two streams share memory without a race.
    ProducerConsumerAcrossStreams,
}

/// What a check says and where the rule comes from.
#[derive(Debug, Clone, Copy)]
pub struct CheckInfo {
    /// Which check.
    pub id: CheckId,
    /// The sentence it enforces, quoted.
    pub rule: &'static str,
    /// Where the sentence is.
    pub source: &'static str,
    /// What the backend must observe for the check to run at all.
    pub needs: Observes,
}

// Where each rule is written, as a reader can open it.
const NBEP7: &str =
    "NBEP 7, https://numba.readthedocs.io/en/stable/proposals/external-memory-management.html";
const EMM_REF: &str =
    "Numba's EMM plugin reference, https://numba.readthedocs.io/en/stable/cuda/external-memory.html";
const RMM: &str = "RMM blog, https://developer.nvidia.com/blog/fast-flexible-allocation-for-cuda-with-rapids-memory-manager/";
const DESIGN: &str = "emm's plugin ABI, plugins/ABI.md (rules emm adds to the contract)";

const fn info(id: CheckId, source: &'static str, rule: &'static str) -> CheckInfo {
    CheckInfo {
        id,
        rule,
        source,
        needs: Observes::NOTHING,
    }
}

const fn sim(mut c: CheckInfo, needs: Observes) -> CheckInfo {
    c.needs = needs;
    c
}

/// Every check, in the order reports list them.
pub const CHECKS: &[CheckInfo] = &[
    info(CheckId::InterfaceVersion, EMM_REF,
        "The interface_version property is used to ensure that the plugin version matches the interface provided by the version of Numba. At present, this should always be 1."),
    info(CheckId::InitializeKeepsState, EMM_REF,
        "This method may be called multiple times, and must not invalidate previous state when it is called."),
    info(CheckId::ResetBeforeInitialize, EMM_REF,
        "It may be called even prior to initialize, and an EMM Plugin implementation needs to guard against this."),
    info(CheckId::ResetFreesEverything, EMM_REF,
        "reset(): Clears up all memory allocated in this context."),
    info(CheckId::FinalizerRunsOnce, NBEP7,
        "finalizer: A method that is called when the last reference to the MemoryPointer object is released."),
    info(CheckId::MemallocAligned, DESIGN,
        "memalloc returns at least the requested bytes, 256-byte aligned, inside device memory, never overlapping another live allocation; a request that names a larger alignment (emm_alloc's align, a power of two ≥ 256) gets it, or is declined as unsupported."),
    info(CheckId::MemallocInDeviceMemory, EMM_REF,
        "memalloc(size): Allocate on-device memory in the current context. Returns: A memory pointer instance that owns the allocated memory."),
    info(CheckId::MemallocNeverOverlaps, DESIGN,
        "memalloc returns at least the requested bytes, 256-byte aligned, inside device memory, never overlapping another live allocation."),
    info(CheckId::WritesStayInTheirAllocation, DESIGN,
        "writes to one allocation never change another."),
    info(CheckId::ZeroSizeIsAnError, "emm contract (MemoryManager::memalloc)",
        "A manager never panics on bad input: size 0, an absurd size, a foreign pointer are errors."),
    info(CheckId::OutOfMemoryIsAnError, DESIGN,
        "Out of memory is an error, never a panic, and leaves the manager usable; after frees, the same request succeeds."),
    sim(info(CheckId::OutOfMemoryIsHonest, DESIGN,
        "An out-of-memory answer is correct only when the memory was really not available: the plugin asked its upstream in that call and was refused, or a configured limit was reached."),
        Observes::ATTRIBUTION),
    info(CheckId::MemhostallocHonoursFlags, EMM_REF,
        "mapped (bool) – Whether the allocated memory should be mapped into the CUDA address space. portable (bool) – Whether the memory will be considered pinned by all contexts, and not just the calling context. wc (bool) – Whether to allocate the memory as write-combined."),
    info(CheckId::MempinUnpinsInFinalizer, NBEP7,
        "pinned memory is immediately unpinned by its finalizer, and unpinning before a finalizer runs would invalidate the state of PinnedMemory objects for which references are still held."),
    info(CheckId::MemallocmanagedIsUnified, "PyTorch RFC-0023 Unified Memory, https://github.com/pytorch/rfcs/pull/36",
        "managed memory is available to all GPUs on all streams by default and can move between host and any number of GPUs at will."),
    info(CheckId::GetMemoryInfoConsistent, EMM_REF,
        "Returns (free, total) memory in bytes in the context. May raise NotImplementedError, if returning such information is not practical (e.g. for a pool allocator)."),
    info(CheckId::IpcHandleAddressesSameBytes, EMM_REF,
        "If the underlying memory does not point to the base of an allocation returned by the CUDA driver or runtime API (e.g. if a pool allocator is in use) then the offset from the base must be provided."),
    info(CheckId::DeferCleanupNests, EMM_REF,
        "The defer_cleanup method should return a context manager that ensures that expensive cleanup operations are avoided whilst it is active."),
    sim(info(CheckId::OnlyThePluginAllocates, NBEP7,
        "When the EMM is in use, Numba will make all memory allocation using the EMM. It will never directly call functions such as CuMemAlloc, cuMemFree, etc."),
        Observes::ATTRIBUTION),
    sim(info(CheckId::StreamOrderedReuse, RMM,
        "If a block is found in a free list associated with a different stream, the requesting stream must wait on an event recorded in the stream on which the block was deallocated."),
        Observes::RACES),
    info(CheckId::HeldBytesStaySteady, DESIGN,
        "A long-lived program makes the same requests for hours: over many cycles of allocations, frees and resets, the memory a plugin holds stops growing."),
    info(CheckId::GuestMemoryStaysSteady, DESIGN,
        "A long-lived program makes the same requests for hours: over many cycles of the same requests, a sandboxed plugin's linear memory, which it can grow and never give back, stops growing."),
    info(CheckId::StatsAgreeWithTheHost, "emm plugin ABI v1 (plugins/ABI.md)",
        "emm_stats: The address of four u64s: free bytes, free blocks, largest free block, bytes of chunks held — the plugin's own word, shown beside what the host knows."),
    info(CheckId::ConcurrentUseNeverOverlaps, DESIGN,
        "Concurrent use from many threads never hands out overlapping memory."),
    info(CheckId::ProducerConsumerAcrossStreams, RMM,
        "The stream passed to deallocate is typically the stream on which the allocation was last used before the call to deallocate."),
];

impl CheckId {
    /// The check's name, as reports and `emm list` print it.
    pub fn name(self) -> &'static str {
        match self {
            CheckId::InterfaceVersion => "interface_version",
            CheckId::InitializeKeepsState => "initialize_keeps_state",
            CheckId::ResetBeforeInitialize => "reset_before_initialize",
            CheckId::ResetFreesEverything => "reset_frees_everything",
            CheckId::FinalizerRunsOnce => "finalizer_runs_once",
            CheckId::MemallocAligned => "memalloc_aligned",
            CheckId::MemallocInDeviceMemory => "memalloc_in_device_memory",
            CheckId::MemallocNeverOverlaps => "memalloc_never_overlaps",
            CheckId::WritesStayInTheirAllocation => "writes_stay_in_their_allocation",
            CheckId::ZeroSizeIsAnError => "zero_size_is_an_error",
            CheckId::OutOfMemoryIsAnError => "out_of_memory_is_an_error",
            CheckId::OutOfMemoryIsHonest => "out_of_memory_is_honest",
            CheckId::MemhostallocHonoursFlags => "memhostalloc_honours_flags",
            CheckId::MempinUnpinsInFinalizer => "mempin_unpins_in_finalizer",
            CheckId::MemallocmanagedIsUnified => "memallocmanaged_is_unified",
            CheckId::GetMemoryInfoConsistent => "get_memory_info_consistent",
            CheckId::IpcHandleAddressesSameBytes => "ipc_handle_addresses_same_bytes",
            CheckId::DeferCleanupNests => "defer_cleanup_nests",
            CheckId::OnlyThePluginAllocates => "only_the_plugin_allocates",
            CheckId::StreamOrderedReuse => "stream_ordered_reuse",
            CheckId::HeldBytesStaySteady => "held_bytes_stay_steady",
            CheckId::GuestMemoryStaysSteady => "guest_memory_stays_steady",
            CheckId::StatsAgreeWithTheHost => "stats_agree_with_the_host",
            CheckId::ConcurrentUseNeverOverlaps => "concurrent_use_never_overlaps",
            CheckId::ProducerConsumerAcrossStreams => "producer_consumer_across_streams",
        }
    }

    /// The catalogue entry of this check.
    pub fn info(self) -> &'static CheckInfo {
        // Every id has exactly one entry (a unit test holds the catalogue to that).
        CHECKS.iter().find(|c| c.id == self).unwrap_or(&CHECKS[0])
    }

    /// The check named `name`, if any.
    pub fn from_name(name: &str) -> Option<CheckId> {
        CHECKS.iter().map(|c| c.id).find(|id| id.name() == name)
    }
}

impl fmt::Display for CheckId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_check_has_one_entry_a_unique_name_and_a_quoted_rule() {
        let mut names: Vec<&str> = CHECKS.iter().map(|c| c.id.name()).collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n, "names are unique");
        for c in CHECKS {
            assert_eq!(c.id.info().id, c.id);
            assert_eq!(CheckId::from_name(c.id.name()), Some(c.id));
            assert!(c.rule.len() > 30 && !c.source.is_empty(), "{}", c.id);
        }
        assert_eq!(CheckId::from_name("no_such_check"), None);
    }
}
