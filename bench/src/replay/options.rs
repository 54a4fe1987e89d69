//! [`ReplayOptions`]: how [`replay`](crate::replay::replay) runs: which threads
//! ([`Threading`]), at what pace ([`Pace`]), how held memory is measured ([`HeldProbe`]),
//! whether leaks are kept.

use std::fmt;

/// How memory held by the resource is measured, after every successful allocation (held
/// memory grows only there, so the peak is exact).
#[derive(Default)]
pub enum HeldProbe {
    /// Not measured: `peak_held_bytes` stays `None`.
    #[default]
    None,
    /// Free device memory at the start minus free memory now (`cuMemGetInfo`). Counts
    /// everything else on the device too, and costs a driver call per allocation (outside
    /// `resource_time`).
    DriverMemInfo,
    /// A function returning the bytes held, e.g. from a `StatisticsAdaptor` between a pool
    /// and its upstream.
    Custom(Box<dyn Fn() -> u64 + Send + Sync>),
}

impl fmt::Debug for HeldProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HeldProbe::None => "None",
            HeldProbe::DriverMemInfo => "DriverMemInfo",
            HeldProbe::Custom(_) => "Custom(..)",
        })
    }
}

/// Which threads replay the events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Threading {
    /// All events on the calling thread, in log order: no hand-off cost.
    #[default]
    Single,
    /// One thread per log thread, taking turns in log order; past
    /// [`MAX_REPLAY_THREADS`] log threads, each replay thread takes several of them in turn
    /// (log thread `k` on replay thread `k % MAX_REPLAY_THREADS`, in order of thread id).
    PerLogThread,
}

/// The most threads a [`Threading::PerLogThread`] replay starts: a log of twenty thousand
/// threads must not start twenty thousand (each an OS thread with its stack), and a program
/// with more threads than this allocating at once is rare.
pub const MAX_REPLAY_THREADS: usize = 256;

/// When each event runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Pace {
    /// Each event as soon as the one before is done: the resource's own time, nothing else.
    #[default]
    Flat,
    /// Each event no earlier than its time in the log after the first event's, on the
    /// driver's clock ([`Driver::host_clock_ns`](emm_core::Driver::host_clock_ns)): the host
    /// sleeps through the program's own work between calls
    /// ([`Driver::host_sleep`](emm_core::Driver::host_sleep); on the simulated GPU, virtual
    /// time, so free), and the device runs on meanwhile. A resource that weighs its driver
    /// calls against the time that passes (a tight segment's moves) then sees the program's
    /// time, as it would under the program. The sleeps are not in `resource_time`; a gap
    /// between two events counts as at most
    /// [`MAX_PACED_GAP_NS`](crate::replay::MAX_PACED_GAP_NS).
    Recorded,
}

/// How to replay.
#[derive(Debug, Default)]
pub struct ReplayOptions {
    /// Which threads replay the events.
    pub threading: Threading,
    /// When each event runs.
    pub pace: Pace,
    /// How held memory is measured.
    pub held: HeldProbe,
    /// Keep the allocations the log never frees instead of freeing them after the replay
    /// (they are reported as leaks either way).
    pub keep_leaks: bool,
}
