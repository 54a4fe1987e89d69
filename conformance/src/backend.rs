//! [`Backend`]: where the suite runs a plugin, and [`Observes`]: what that backend can see
//! beyond the `Driver` calls every backend answers.
//!
//! The checks that need only the `Driver` (contents read back, address ranges, memory info)
//! run everywhere. The simulator also sees races between streams, use after free, double
//! frees and which layer made each driver call; checks that need those run only where the
//! backend says it observes them, and are reported as skipped elsewhere.

use std::ops::BitOr;
use std::sync::Arc;

use emm_core::Driver;

/// What a backend observes beyond the `Driver` interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Observes {
    /// Unordered accesses to the same bytes from two streams.
    pub races: bool,
    /// Accesses to freed memory, double and invalid frees, out-of-bounds accesses.
    pub memory_errors: bool,
    /// Which layer (caller tag) made each device allocation.
    pub attribution: bool,
    /// A second process on the same machine, for opening IPC handles.
    pub second_process: bool,
    /// Host memory (pinned, registered) still held at teardown.
    pub host_leaks: bool,
}

impl Observes {
    /// Only what the `Driver` answers.
    pub const NOTHING: Observes = Observes {
        races: false,
        memory_errors: false,
        attribution: false,
        second_process: false,
        host_leaks: false,
    };
    /// Races between streams.
    pub const RACES: Observes = Observes {
        races: true,
        ..Observes::NOTHING
    };
    /// Caller attribution of device allocations.
    pub const ATTRIBUTION: Observes = Observes {
        attribution: true,
        ..Observes::NOTHING
    };
    /// Everything the simulator sees.
    pub const EVERYTHING: Observes = Observes {
        races: true,
        memory_errors: true,
        attribution: true,
        second_process: true,
        host_leaks: true,
    };

    /// Whether everything `needs` asks for is observed.
    pub fn covers(self, needs: Observes) -> bool {
        (!needs.races || self.races)
            && (!needs.memory_errors || self.memory_errors)
            && (!needs.attribution || self.attribution)
            && (!needs.second_process || self.second_process)
            && (!needs.host_leaks || self.host_leaks)
    }
}

impl BitOr for Observes {
    type Output = Observes;
    fn bitor(self, o: Observes) -> Observes {
        Observes {
            races: self.races || o.races,
            memory_errors: self.memory_errors || o.memory_errors,
            attribution: self.attribution || o.attribution,
            second_process: self.second_process || o.second_process,
            host_leaks: self.host_leaks || o.host_leaks,
        }
    }
}

/// A misuse of memory the backend saw (only backends that observe them report any).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// Two unordered accesses from different streams, one a write.
    Race(String),
    /// An access to freed memory.
    UseAfterFree(String),
    /// A free of memory already freed, or of a pointer that is no allocation's base.
    BadFree(String),
    /// An access past the end of an allocation.
    OutOfBounds(String),
    /// Anything else.
    Other(String),
}

/// One device allocation of the plugin's process and the caller tag active when it was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributed {
    /// The driver call, e.g. `cuMemAlloc`.
    pub call: &'static str,
    /// Bytes asked for.
    pub bytes: u64,
    /// The caller tag (`emm_core::attribution`).
    pub caller: &'static str,
}

/// What is still held on the machine (for the teardown checks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Held {
    /// Live pinned host allocations.
    pub pinned: u64,
    /// Live host registrations (pins).
    pub registrations: u64,
    /// Live managed allocations.
    pub managed: u64,
}

/// What the plugin asked of the driver during a span of calls (process 0, the suite's own
/// calls excluded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UpstreamCalls {
    /// Device allocations the driver refused.
    pub refused_allocations: u64,
    /// Device memory given back synchronously (`cuMemFree`, `cuMemRelease`).
    pub returns: u64,
}

/// One machine for one case: a fresh simulated GPU, or the real one.
pub trait Machine: Send + Sync {
    /// The driver the plugin runs on.
    fn driver(&self) -> Arc<dyn Driver>;
    /// A second process on the same machine, where the backend has one.
    fn second_process(&self) -> Option<Arc<dyn Driver>>;
    /// Orders this process after everything the second process did so far: the message an
    /// importer sends back when it is done with exported memory.
    ///
    /// # Errors
    ///
    /// The backend cannot order the two, with the reason.
    fn importer_done(&self) -> Result<(), String>;
    /// Misuses seen since the first `skip` (pass the count already taken).
    fn seen_since(&self, skip: usize) -> Vec<Seen>;
    /// Every successful device allocation so far, with its caller tag.
    fn device_allocations(&self) -> Vec<Attributed>;
    /// Host resources still held, where the backend can tell.
    fn held(&self) -> Option<Held>;
    /// A hash of every driver call so far, where the backend keeps one (determinism check).
    fn trace_hash(&self) -> Option<u64>;
    /// Device bytes held by allocations made through the driver (allocations, managed memory,
    /// driver pools' reserves), where the backend counts them itself; `None` falls back to
    /// the driver's free memory.
    fn device_bytes_in_use(&self) -> Option<u64> {
        None
    }
    /// A mark for [`Machine::upstream_since`]: the number of driver calls so far, where the
    /// backend counts them.
    fn call_mark(&self) -> Option<u64> {
        None
    }
    /// What the plugin asked of the driver since `mark`, where the backend traces calls.
    fn upstream_since(&self, mark: u64) -> Option<UpstreamCalls> {
        let _ = mark;
        None
    }
    /// The device allocations still live, where the backend counts them (for a leak's message).
    fn describe_in_use(&self) -> Option<String> {
        None
    }
}

/// Where cases run: makes one [`Machine`] per case.
pub trait Backend: Send + Sync {
    /// The backend's name (`sim`, `cuda`), as `--backend` takes it.
    fn name(&self) -> &'static str;
    /// What it observes.
    fn observes(&self) -> Observes;
    /// A machine for one case; `seed` seeds whatever the backend draws at random.
    ///
    /// # Errors
    ///
    /// The machine cannot be had (no device, a bad configuration), with the reason.
    fn machine(&self, seed: u64) -> Result<Box<dyn Machine>, String>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covers_asks_for_everything_needed() {
        assert!(Observes::NOTHING.covers(Observes::NOTHING));
        assert!(!Observes::NOTHING.covers(Observes::RACES));
        assert!(Observes::EVERYTHING.covers(Observes::RACES | Observes::ATTRIBUTION));
        assert!(!(Observes::RACES).covers(Observes::ATTRIBUTION));
    }
}
