//! [`Coverage`]: what a run exercised — request sizes, streams, out-of-memory answers, resets,
//! `defer_cleanup` scopes, cross-stream reuse — so that a report says which rules were really
//! tried, and a check whose rule never came up says SKIPPED with the reason instead of PASS.

use std::fmt::Write as _;

use emm_core::units::Bytes;
use serde::{Deserialize, Serialize};

use crate::checks::CheckId;

/// What one case, or a whole run (the cases merged), exercised.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Coverage {
    /// Device requests by power-of-two class: bit `k` is set once a request of
    /// `[2^k, 2^(k+1))` bytes was made (bit 0: 1 byte).
    pub size_classes: u64,
    /// Device requests made (`memalloc`, `memalloc_async`, threads' requests excluded).
    pub requests: u64,
    /// The largest request that was answered with memory, in bytes.
    pub largest_served: u64,
    /// The streams (lanes 0 to 3) device memory was allocated or freed on, as a bit mask.
    pub lanes: u8,
    /// Allocations that landed in memory freed on another stream.
    pub cross_stream_reuses: u64,
    /// Out-of-memory answers to requests that fit the device.
    pub oom_answers: u64,
    /// Of those, answers the backend could check against the plugin's upstream calls.
    pub oom_checked: u64,
    /// Successful `reset()` calls.
    pub resets: u64,
    /// `defer_cleanup()` scopes opened.
    pub defer_scopes: u64,
    /// The deepest nesting of `defer_cleanup()` scopes.
    pub deepest_defer: u32,
    /// The most allocations live at once.
    pub live_high_water: u64,
    /// IPC handles returned (not `Unsupported`).
    pub ipc_handles: u64,
    /// Managed allocations returned.
    pub managed: u64,
    /// `get_memory_info()` answers (not `Unsupported`).
    pub memory_info: u64,
    /// A sandboxed plugin's own statistics compared with the host's.
    #[serde(default)]
    pub stats_checked: u64,
    /// Of the out-of-memory answers checked, those that followed a chunk request the host
    /// refused for a configured limit (`PluginLimits::max_held_bytes`, `max_chunks`).
    #[serde(default)]
    pub oom_at_limit: u64,
    /// Retries after out of memory that failed again where the driver itself, asked directly
    /// once the manager was reset, could not serve the request either (a GPU keeps memory for
    /// its page tables and context beyond what `cuMemGetInfo` counts): no finding.
    #[serde(default)]
    pub oom_retries_unservable: u64,
    /// Alignments above 256 bytes that requests asked for and got memory, as a mask: bit `k`
    /// is set once a request aligned to `2^k` bytes was served.
    #[serde(default)]
    pub alignments_served: u64,
    /// Alignments above 256 bytes the plugin declined as unsupported (the ABI's `-2`), as a
    /// mask of base-2 logarithms.
    #[serde(default)]
    pub alignments_unsupported: u64,
    /// Rounds of the steady state after which a sandboxed plugin's linear memory was read.
    #[serde(default)]
    pub guest_memory_checked: u64,
}

/// `mask`'s alignments (bit `k`: `2^k` bytes) as "N (from X to Y)", or "none".
fn alignments(mask: u64) -> String {
    if mask == 0 {
        return "none".to_string();
    }
    let (lo, hi) = (mask.trailing_zeros(), 63 - mask.leading_zeros());
    format!(
        "{} (from {} to {})",
        mask.count_ones(),
        Bytes(1 << lo),
        Bytes(1 << hi)
    )
}

/// The power-of-two class of a request of `bytes` (0 for 0 and 1 byte).
pub fn size_class(bytes: u64) -> u32 {
    63 - bytes.max(1).leading_zeros()
}

impl Coverage {
    /// Adds what `other` exercised.
    pub fn merge(&mut self, o: &Coverage) {
        self.size_classes |= o.size_classes;
        self.requests += o.requests;
        self.largest_served = self.largest_served.max(o.largest_served);
        self.lanes |= o.lanes;
        self.cross_stream_reuses += o.cross_stream_reuses;
        self.oom_answers += o.oom_answers;
        self.oom_checked += o.oom_checked;
        self.resets += o.resets;
        self.defer_scopes += o.defer_scopes;
        self.deepest_defer = self.deepest_defer.max(o.deepest_defer);
        self.live_high_water = self.live_high_water.max(o.live_high_water);
        self.ipc_handles += o.ipc_handles;
        self.managed += o.managed;
        self.memory_info += o.memory_info;
        self.stats_checked += o.stats_checked;
        self.oom_at_limit += o.oom_at_limit;
        self.oom_retries_unservable += o.oom_retries_unservable;
        self.alignments_served |= o.alignments_served;
        self.alignments_unsupported |= o.alignments_unsupported;
        self.guest_memory_checked += o.guest_memory_checked;
    }

    /// Records a device request of `bytes`.
    pub fn request(&mut self, bytes: u64) {
        self.requests += 1;
        self.size_classes |= 1 << size_class(bytes);
    }

    /// Number of size classes requested.
    pub fn classes(&self) -> u32 {
        self.size_classes.count_ones()
    }

    /// Why `check` could not exercise its rule in a run with this coverage, if it could not.
    pub fn unexercised(&self, check: CheckId) -> Option<&'static str> {
        match check {
            CheckId::StreamOrderedReuse if self.cross_stream_reuses == 0 => Some(
                "no block freed on one stream was handed out on another (the plugin offers no \
                 stream-ordered allocation, or never reused memory across streams)",
            ),
            CheckId::DeferCleanupNests if self.defer_scopes == 0 => {
                Some("no defer_cleanup() scope was opened")
            }
            CheckId::IpcHandleAddressesSameBytes if self.ipc_handles == 0 => {
                Some("get_ipc_handle never returned a handle (unsupported)")
            }
            CheckId::MemallocmanagedIsUnified if self.managed == 0 => {
                Some("memallocmanaged never returned memory (unsupported)")
            }
            CheckId::GetMemoryInfoConsistent if self.memory_info == 0 => {
                Some("get_memory_info never answered (unsupported)")
            }
            CheckId::OutOfMemoryIsHonest if self.oom_checked == 0 => {
                Some("no out-of-memory answer could be checked against the plugin's upstream calls")
            }
            CheckId::GuestMemoryStaysSteady if self.guest_memory_checked == 0 => Some(
                "no guest memory was read after the steady state's rounds (the plugin is no \
                 sandboxed plugin, or its steady state did not run)",
            ),
            CheckId::StatsAgreeWithTheHost if self.stats_checked == 0 => {
                Some("the plugin reports no statistics of its own (no emm_stats), or is no sandboxed plugin")
            }
            _ => None,
        }
    }

    /// One paragraph for the report's table.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let (lo, hi) = (
            self.size_classes.trailing_zeros(),
            63 - self.size_classes.leading_zeros().min(63),
        );
        if self.size_classes == 0 {
            out.push_str("  sizes: no device request\n");
        } else {
            let _ = writeln!(
                out,
                "  sizes: {} requests in {} power-of-two classes from {} to {}; largest served {}",
                self.requests,
                self.classes(),
                Bytes(1 << lo),
                Bytes(1 << hi),
                Bytes(self.largest_served)
            );
        }
        let lanes: Vec<String> = (0..8)
            .filter(|l| self.lanes & (1 << l) != 0)
            .map(|l| l.to_string())
            .collect();
        let _ = writeln!(
            out,
            "  streams: lanes [{}], {} cross-stream reuse(s)",
            lanes.join(", "),
            self.cross_stream_reuses
        );
        if self.alignments_served | self.alignments_unsupported == 0 {
            out.push_str(
                "  alignment: 256 only (memalloc takes none, and the manager offers no aligned \
                 request)\n",
            );
        } else {
            let _ = writeln!(
                out,
                "  alignment: 256 (memalloc); above it, through allocate_aligned: served {}, \
                 declined as unsupported {}",
                alignments(self.alignments_served),
                alignments(self.alignments_unsupported)
            );
        }
        let _ = writeln!(
            out,
            "  live high-water: {}; out of memory: {} answer(s), {} checked against upstream calls \
             ({} at a configured limit){}; resets: {}; defer scopes: {} (deepest {})",
            self.live_high_water,
            self.oom_answers,
            self.oom_checked,
            self.oom_at_limit,
            match self.oom_retries_unservable {
                0 => String::new(),
                n => format!(", {n} retried request(s) the device itself could not serve"),
            },
            self.resets,
            self.defer_scopes,
            self.deepest_defer
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_powers_of_two_and_merging_keeps_the_most() {
        assert_eq!(size_class(0), 0);
        assert_eq!(size_class(1), 0);
        assert_eq!(size_class(3), 1);
        assert_eq!(size_class(4096), 12);
        assert_eq!(size_class((4 << 30) + 1), 32);
        let mut a = Coverage::default();
        a.request(1);
        a.live_high_water = 3;
        let mut b = Coverage::default();
        b.request(5 << 30);
        b.live_high_water = 2;
        b.cross_stream_reuses = 1;
        a.merge(&b);
        assert_eq!(a.classes(), 2);
        assert_eq!(a.live_high_water, 3);
        assert_eq!(a.unexercised(CheckId::StreamOrderedReuse), None);
        assert!(Coverage::default()
            .unexercised(CheckId::StreamOrderedReuse)
            .is_some());
        assert_eq!(
            Coverage::default().unexercised(CheckId::MemallocAligned),
            None
        );
        let mut c = Coverage {
            alignments_served: 1 << 9 | 1 << 21,
            alignments_unsupported: 1 << 40,
            ..Coverage::default()
        };
        c.merge(&Coverage {
            alignments_served: 1 << 12,
            ..Coverage::default()
        });
        let text = c.to_text();
        assert!(
            text.contains("served 3 (from 512 B to 2.0 MiB), declined as unsupported 1 (from 1.0 TiB to 1.0 TiB)"),
            "{text}"
        );
        assert!(Coverage::default().to_text().contains("256 only"));
    }
}
