//! The operations of [`PluginResource`] beyond allocation: reset, trim, `defer_cleanup`
//! scopes, statistics, breaches and logs.

use crate::abi::STATUS_OK;
use crate::error::SandboxError;
use crate::fault::{Breach, PluginFault, Rule};
use crate::host::LogLine;
use crate::resource::{PluginResource, Slot};
use crate::stats::PluginStats;

/// Which optional export to call.
#[derive(Clone, Copy)]
enum Op {
    Reset,
    Trim(u64),
    DeferEnter,
    DeferExit,
}

impl PluginResource {
    /// Calls an optional export of the running instance; a failure status or a fault
    /// quarantines it. Does nothing when no instance runs.
    fn control(&self, op: Op) -> Result<(), SandboxError> {
        let mut inner = self.lock();
        match op {
            Op::DeferEnter => inner.defer_depth = inner.defer_depth.saturating_add(1),
            Op::DeferExit => inner.defer_depth = inner.defer_depth.saturating_sub(1),
            Op::Reset | Op::Trim(_) => {}
        }
        let Slot::Running(instance) = &mut inner.slot else {
            // Quarantined chunks may have emptied: return them.
            let empty = inner.registry.take_empty_orphans();
            drop(inner);
            self.give_back(&empty);
            return Ok(());
        };
        let (call, result) = match op {
            Op::Reset => ("emm_reset()".to_string(), instance.reset()),
            Op::Trim(keep) => (
                format!("emm_trim({keep})"),
                instance.trim(i64::try_from(keep).unwrap_or(i64::MAX)),
            ),
            Op::DeferEnter => (
                "emm_defer_enter()".to_string(),
                instance.defer_enter().map(|()| STATUS_OK),
            ),
            Op::DeferExit => ("emm_defer_exit()".to_string(), instance.defer_exit()),
        };
        let fault = match result {
            Ok(STATUS_OK) => return Ok(()),
            Ok(status) => PluginFault::BadAnswer {
                rule: Rule::BadStatus,
                detail: format!(
                    "{call} returned {status} ({})",
                    crate::abi::status_name(i64::from(status))
                ),
            },
            Err(fault) => fault,
        };
        Err(SandboxError::Quarantined(
            self.quarantine(&mut inner, fault, call),
        ))
    }

    /// Asks the plugin to return every chunk that holds nothing live and forget its caches
    /// (`emm_reset`); live allocations stay valid.
    ///
    /// # Errors
    ///
    /// [`SandboxError::Quarantined`] when the plugin breaks a rule or a limit doing it.
    pub fn reset(&self) -> Result<(), SandboxError> {
        self.control(Op::Reset)
    }

    /// Asks the plugin to return empty chunks until at most `keep` bytes of them stay
    /// (`emm_trim`).
    ///
    /// # Errors
    ///
    /// As [`PluginResource::reset`].
    pub fn trim(&self, keep: u64) -> Result<(), SandboxError> {
        self.control(Op::Trim(keep))
    }

    /// Tells the plugin a `defer_cleanup` scope begins (`emm_defer_enter`): it should not
    /// return chunks upstream until the matching [`PluginResource::defer_exit`].
    ///
    /// # Errors
    ///
    /// As [`PluginResource::reset`].
    pub fn defer_enter(&self) -> Result<(), SandboxError> {
        self.control(Op::DeferEnter)
    }

    /// Tells the plugin the innermost `defer_cleanup` scope ended (`emm_defer_exit`).
    ///
    /// # Errors
    ///
    /// As [`PluginResource::reset`].
    pub fn defer_exit(&self) -> Result<(), SandboxError> {
        self.control(Op::DeferExit)
    }

    /// A snapshot of what the host knows, and the guest's own counters.
    ///
    /// # Errors
    ///
    /// [`SandboxError::Quarantined`] when `emm_stats` breaks a rule or a limit.
    pub fn stats(&self) -> Result<PluginStats, SandboxError> {
        let mut inner = self.lock();
        let (breaches, restarts) = (inner.breaches.len(), inner.restarts);
        let guest = match &mut inner.slot {
            Slot::Running(instance) => match instance.stats() {
                Ok(words) => words,
                Err(fault) => {
                    let b = self.quarantine(&mut inner, fault, "emm_stats()".to_string());
                    return Err(SandboxError::Quarantined(b));
                }
            },
            Slot::Idle | Slot::Down => None,
        };
        let (running, guest_memory_bytes, limit_refusals) = match &inner.slot {
            Slot::Running(instance) => (
                true,
                Some(instance.exports.memory.data_size(&instance.store) as u64),
                instance.store.data().limit_refusals,
            ),
            Slot::Idle | Slot::Down => (false, None, 0),
        };
        let reg = inner.registry();
        Ok(PluginStats {
            chunks: reg.chunk_count(),
            held_bytes: reg.held_bytes,
            live: reg.live_count(),
            live_bytes: reg.live_bytes,
            running,
            breaches,
            restarts,
            guest,
            guest_memory_bytes,
            limit_refusals,
        })
    }

    /// The breach that stopped the plugin, while it is down (quarantined and not restarted).
    pub fn quarantined(&self) -> Option<Breach> {
        let inner = self.lock();
        match inner.slot {
            Slot::Down => inner.breaches.last().cloned(),
            Slot::Idle | Slot::Running(_) => None,
        }
    }

    /// Every breach so far, oldest first.
    pub fn breaches(&self) -> Vec<Breach> {
        self.lock().breaches.clone()
    }

    /// The last lines the plugin logged (`emm::log`), oldest first.
    pub fn logs(&self) -> Vec<LogLine> {
        let inner = self.lock();
        let mut out = inner.logs.clone();
        if let Slot::Running(instance) = &inner.slot {
            out.extend(instance.store.data().logs.iter().cloned());
        }
        out
    }
}
