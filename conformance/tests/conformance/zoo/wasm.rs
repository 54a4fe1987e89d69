//! [`WasmBug`]: sandboxed policies for the zoo, one WAT module (`wasm/passthrough.wat`) whose
//! `$bug` global picks one thing done wrong, loaded through the sandbox as `emm check` loads a
//! `.wasm` plugin.

use std::sync::Arc;

use emm_conformance::sandboxed::Sandboxed;
use emm_sandbox::{PluginFactory, PluginLimits, PluginModule};

const PASSTHROUGH: &str = include_str!("wasm/passthrough.wat");

/// One bug of the pass-through policy, or none (its number is the WAT's `$bug`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WasmBug {
    /// The control: it must pass everything.
    None = 0,
    /// Gives chunks back at once inside `defer_cleanup` scopes.
    IgnoresDeferScopes = 1,
    /// Counts scopes as a flag: the first scope to end ends them all.
    DeferScopesAsAFlag = 2,
    /// Answers out of memory for a request over 1 MiB while anything is live, without asking.
    OutOfMemoryWithoutAsking = 3,
    /// Answers odd sizes 8 bytes into a chunk (misaligned).
    MisalignedOddSizes = 4,
    /// Every fifth answer repeats the last live one (overlap).
    RepeatsAnAnswer = 5,
    /// Keeps the chunk of every freed 1 MiB request until a reset (held bytes creep).
    KeepsChunksUntilReset = 6,
    /// Its statistics leave out the chunks it keeps for the end of a scope.
    StatsMissKeptChunks = 7,
    /// Honours 256-byte alignment only: a larger one is answered 256 bytes into a chunk.
    IgnoresLargeAlignments = 8,
    /// Grows its linear memory by a page every 16 allocations and never uses it.
    GrowsMemoryEveryFewCalls = 9,
}

impl WasmBug {
    /// Every bug, the control excluded.
    pub const ALL: [WasmBug; 9] = [
        WasmBug::IgnoresDeferScopes,
        WasmBug::DeferScopesAsAFlag,
        WasmBug::OutOfMemoryWithoutAsking,
        WasmBug::MisalignedOddSizes,
        WasmBug::RepeatsAnAnswer,
        WasmBug::KeepsChunksUntilReset,
        WasmBug::StatsMissKeptChunks,
        WasmBug::IgnoresLargeAlignments,
        WasmBug::GrowsMemoryEveryFewCalls,
    ];

    /// The module with this bug, assembled from its text.
    pub fn wasm(self) -> Vec<u8> {
        let text = PASSTHROUGH.replace("(i32.const BUG)", &format!("(i32.const {})", self as i32));
        wat::parse_str(text).unwrap_or_else(|e| panic!("the zoo's WAT does not assemble: {e}"))
    }

    /// A sandbox factory for the policy with this bug, under the default limits, whose
    /// statistics the suite reads (as `emm check` loads a `.wasm` file).
    pub fn factory(self) -> Sandboxed {
        self.factory_with(PluginLimits::default())
    }

    /// As [`WasmBug::factory`], under `limits`.
    pub fn factory_with(self, limits: PluginLimits) -> Sandboxed {
        let name = format!("zoo-{self:?}");
        let module = PluginModule::from_bytes(&name, &self.wasm(), limits, Vec::new())
            .unwrap_or_else(|e| panic!("the zoo's WAT does not load: {e}"));
        Sandboxed(PluginFactory::new(Arc::new(module)))
    }
}

const STREAMS: &str = include_str!("wasm/streams.wat");

/// How the per-stream caching policy (`wasm/streams.wat`) takes a block freed on another
/// stream (its number is the WAT's `$bug`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamSteal {
    /// The control: `emm::stream_order(freed on, requested on)` first, and only when it
    /// answers 0.
    Ordered = 0,
    /// Without ordering.
    Unordered = 1,
    /// Without ordering for the smallest class (256 B), ordered for the others.
    UnorderedWhenSmall = 2,
}

impl StreamSteal {
    /// A sandbox factory for the policy that steals this way, loaded from its text under the
    /// default limits, whose statistics the suite reads.
    pub fn factory(self) -> Sandboxed {
        let name = format!("zoo-streams-{self:?}");
        let text = STREAMS.replace("(i32.const BUG)", &format!("(i32.const {})", self as i32));
        let module = PluginModule::from_wat(&name, &text, PluginLimits::default(), Vec::new())
            .unwrap_or_else(|e| panic!("the zoo's WAT does not load: {e}"));
        Sandboxed(PluginFactory::new(Arc::new(module)))
    }
}
