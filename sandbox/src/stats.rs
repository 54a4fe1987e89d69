//! [`PluginStats`]: what the host knows of a plugin, beside what the plugin says of itself.

/// A snapshot of a [`crate::PluginResource`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PluginStats {
    /// Chunks held from upstream (a quarantined instance's included, until emptied).
    pub chunks: usize,
    /// Bytes of those chunks.
    pub held_bytes: u64,
    /// Live allocations (those served by the fallback included).
    pub live: usize,
    /// Bytes of live allocations.
    pub live_bytes: u64,
    /// Whether an instance is running now.
    pub running: bool,
    /// Breaches so far.
    pub breaches: usize,
    /// Instances started after a quarantine.
    pub restarts: u32,
    /// The guest's own counters (`emm_stats`): free bytes, free blocks, largest free block,
    /// bytes it believes it holds. Its word, not checked; `None` when it has no `emm_stats`
    /// or is not running.
    pub guest: Option<[u64; crate::abi::STATS_WORDS]>,
    /// Bytes of the running instance's linear memory (`None` when none runs). A guest's memory
    /// never shrinks, so a count that keeps rising under the same requests is a leak inside
    /// the guest.
    pub guest_memory_bytes: Option<u64>,
    /// Chunk requests of the running instance that the host answered out of memory because a
    /// limit was reached (`PluginLimits::max_held_bytes` or `max_chunks`), never asking the
    /// upstream: the plugin's out-of-memory answers that follow one are honest.
    pub limit_refusals: u64,
}
