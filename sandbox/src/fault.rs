//! [`PluginFault`]: why a plugin was quarantined, and [`Breach`]: the fault with the call that
//! caused it.

use std::fmt;

use emm_core::units::Bytes;

/// A rule of the ABI a guest's answer or request broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Rule {
    /// An answer names a chunk the plugin does not hold.
    ForeignChunk,
    /// An answer is not aligned as asked.
    Misaligned,
    /// An answer runs past the end of its chunk.
    OutsideChunk,
    /// An answer overlaps a live allocation.
    Overlap,
    /// `upstream_free` of a chunk that still holds live allocations.
    ChunkInUse,
    /// `emm_free` refused an allocation the plugin itself handed out.
    FreeRefused,
    /// A return value that is not a status or answer of the ABI.
    BadStatus,
    /// A pointer and length into guest memory that lie outside it.
    BadGuestPointer,
    /// More chunks than the ABI's handles can name.
    TooManyChunks,
}

impl Rule {
    /// The rule as one sentence.
    pub fn sentence(self) -> &'static str {
        match self {
            Rule::ForeignChunk => "an answer must name a chunk the plugin holds",
            Rule::Misaligned => "an answer must be aligned as asked",
            Rule::OutsideChunk => "an answer must lie inside its chunk",
            Rule::Overlap => "an answer must not overlap a live allocation",
            Rule::ChunkInUse => "a chunk may be returned only when nothing in it is live",
            Rule::FreeRefused => "emm_free must accept every allocation the plugin handed out",
            Rule::BadStatus => "results must be an answer or a status of ABI v1",
            Rule::BadGuestPointer => "pointers into guest memory must lie inside it",
            Rule::TooManyChunks => "a plugin may hold at most 8 388 607 chunks",
        }
    }
}

/// Why a plugin was quarantined.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PluginFault {
    /// The call burnt all its fuel (a loop, or far too much work).
    OutOfFuel {
        /// The fuel each call gets.
        fuel: u64,
    },
    /// The call ran past its wall-clock deadline.
    Deadline {
        /// The deadline in milliseconds.
        millis: u128,
    },
    /// The guest tried to grow its linear memory past the cap.
    MemoryCap {
        /// The size it asked for, in bytes.
        desired: usize,
        /// The cap, in bytes.
        cap: usize,
    },
    /// The guest trapped (`unreachable`, stack overflow, an out-of-bounds access, …).
    Trap(String),
    /// An answer or request broke a rule of the ABI.
    BadAnswer {
        /// The rule.
        rule: Rule,
        /// What the guest said, and why it breaks the rule.
        detail: String,
    },
    /// A bug of the host, caught rather than panicking (see the file and line).
    HostBug {
        /// The source file.
        file: &'static str,
        /// The line.
        line: u32,
    },
}

impl fmt::Display for PluginFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PluginFault::OutOfFuel { fuel } => {
                write!(f, "ran out of fuel ({fuel} units per call)")
            }
            PluginFault::Deadline { millis } => {
                write!(f, "ran past its deadline ({millis} ms per call)")
            }
            PluginFault::MemoryCap { desired, cap } => write!(
                f,
                "tried to grow its memory to {}, over its cap of {} (PluginLimits::memory_cap)",
                Bytes(*desired as u64),
                Bytes(*cap as u64)
            ),
            PluginFault::Trap(trap) => write!(f, "trapped: {trap}"),
            PluginFault::BadAnswer { rule, detail } => {
                write!(f, "broke the rule \"{}\": {detail}", rule.sentence())
            }
            PluginFault::HostBug { file, line } => write!(
                f,
                "hit a bug of the sandbox host at {file}:{line} (please report it)"
            ),
        }
    }
}

/// A fault and the call that caused it: what a quarantine records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Breach {
    /// The plugin's name.
    pub plugin: String,
    /// What went wrong.
    pub fault: PluginFault,
    /// The call, with its arguments, e.g. `emm_alloc(size=4096, align=256, stream=0)`.
    pub call: String,
}

impl fmt::Display for Breach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "plugin {} {} in {}; it is quarantined: its live allocations stay valid",
            self.plugin, self.fault, self.call
        )
    }
}

impl std::error::Error for Breach {}

/// A host bug at this line, as a [`PluginFault::HostBug`].
macro_rules! host_bug {
    () => {
        $crate::fault::PluginFault::HostBug {
            file: file!(),
            line: line!(),
        }
    };
}
pub(crate) use host_bug;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_breach_names_the_plugin_the_rule_and_the_call() {
        let b = Breach {
            plugin: "liar".into(),
            fault: PluginFault::BadAnswer {
                rule: Rule::Overlap,
                detail: "chunk 1 offset 0 (4096 bytes) overlaps dptr:0x1000".into(),
            },
            call: "emm_alloc(size=4096, align=256, stream=0)".into(),
        };
        assert_eq!(
            b.to_string(),
            "plugin liar broke the rule \"an answer must not overlap a live allocation\": \
             chunk 1 offset 0 (4096 bytes) overlaps dptr:0x1000 in emm_alloc(size=4096, \
             align=256, stream=0); it is quarantined: its live allocations stay valid"
        );
        let cap = PluginFault::MemoryCap {
            desired: 128 << 20,
            cap: 64 << 20,
        };
        assert_eq!(
            cap.to_string(),
            "tried to grow its memory to 128.0 MiB, over its cap of 64.0 MiB (PluginLimits::memory_cap)"
        );
    }
}
