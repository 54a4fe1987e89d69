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
}
